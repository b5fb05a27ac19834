//! Matrix factorizations and triangular solves over stacks of contiguous
//! row-major matrices, through faer: the CPU side of the decomposition
//! primitives. Each function takes `batch` matrices back to back and
//! returns a fresh buffer. The matrices of a stack are independent: they
//! run in parallel over the stack, each with faer's sequential kernels
//! (never rayon inside rayon); a single matrix gets faer's parallelism.

use super::Par;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
use faer::linalg::triangular_solve as tri;
use faer::{MatMut, MatRef};
use rayon::prelude::*;

/// An element faer factorizes: f32 or f64.
pub trait DecompElem: faer::traits::RealField + std::ops::AddAssign + Copy + Send + Sync + 'static {
    /// Not a number, for the factors of a matrix that has none.
    const NAN: Self;
    /// Zero, above a lower factor's diagonal.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// `|x|`.
    fn magnitude(self) -> Self;
    /// `sqrt(x)`.
    fn sqrt_value(self) -> Self;
    /// Neither NaN nor infinite.
    fn finite(self) -> bool;
}
macro_rules! decomp_elem {
    ($($t:ident),*) => {$(
        impl DecompElem for $t {
            const NAN: $t = $t::NAN;
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            fn magnitude(self) -> $t {
                self.abs()
            }
            fn sqrt_value(self) -> $t {
                self.sqrt()
            }
            fn finite(self) -> bool {
                self.is_finite()
            }
        }
    )*};
}
decomp_elem!(f32, f64);

/// Runs `f` on each `len`-element chunk of `out` with its index: in
/// parallel over the chunks when asked and there are several, and with
/// faer's own parallelism for a single matrix.
fn each_matrix<T: Send>(out: &mut [T], len: usize, par: Par, f: impl Fn(usize, &mut [T], faer::Par) + Sync) {
    if len == 0 || out.is_empty() {
        return;
    }
    let batch = out.len() / len;
    match par {
        Par::Rayon if batch > 1 => out.par_chunks_mut(len).enumerate().for_each(|(i, m)| f(i, m, faer::Par::Seq)),
        Par::Rayon => f(0, out, faer::Par::rayon(0)),
        Par::Seq => out.chunks_mut(len).enumerate().for_each(|(i, m)| f(i, m, faer::Par::Seq)),
    }
}

/// The lower Cholesky factors `L` of `batch` matrices `A` (`n x n`), of
/// their symmetrized `(A + Aᵀ) / 2` (`L Lᵀ = (A + Aᵀ) / 2`, as
/// `jax.numpy.linalg.cholesky`), with zeros above the diagonal. A matrix
/// that is not positive definite (a pivot that is not positive, or NaN)
/// gets NaN in every element of its factor's lower triangle (zeros above),
/// as `jnp.linalg.cholesky` on the CPU.
pub fn cholesky<T: DecompElem>(a: &[T], batch: usize, n: usize, par: Par) -> Vec<T> {
    debug_assert_eq!(a.len(), batch * n * n);
    let mut out = a.to_vec();
    each_matrix(&mut out, n * n, par, |_, m, inner| {
        // the lower triangle of (A + Aᵀ) / 2, which the factorization reads
        for i in 0..n {
            for j in 0..i {
                m[i * n + j] = (m[i * n + j] + m[j * n + i]) / (T::ONE + T::ONE);
            }
        }
        let ok = if n <= SMALL_CHOLESKY {
            cholesky_rows(m, n)
        } else {
            let req = cholesky_in_place_scratch::<T>(n, inner, Default::default());
            let mut buf = MemBuffer::new(req);
            cholesky_in_place(
                MatMut::from_row_major_slice_mut(m, n, n),
                Default::default(),
                inner,
                MemStack::new(&mut buf),
                Default::default(),
            )
            .is_ok()
        };
        for i in 0..n {
            if !ok {
                m[i * n..=i * n + i].fill(T::NAN);
            }
            for v in &mut m[i * n + i + 1..(i + 1) * n] {
                *v = T::ZERO;
            }
        }
    });
    out
}

/// Up to this size a matrix is factored by [`cholesky_rows`]: faer's
/// recursive blocked factorization pays its set-up at every level for a
/// small matrix (W8's stack of 64 matrices of 64 was faster this way in
/// f32 and no slower in f64 on the 2-core target); above it, faer.
const SMALL_CHOLESKY: usize = 96;

/// The Cholesky-Crout recurrence on the lower triangle of the row-major
/// `m` (`n x n`), in place, column by column: `L[i][j]` for every row
/// `i > j` from the dot product of two row prefixes ([`dot`], vectorized),
/// the rows of a column independent of each other. False at a pivot that
/// is not positive (or NaN).
fn cholesky_rows<T: DecompElem>(m: &mut [T], n: usize) -> bool {
    for j in 0..n {
        let (row_j, below) = m[j * n..].split_at_mut(n);
        let d = row_j[j] - dot(&row_j[..j], &row_j[..j]);
        // (a NaN fails too)
        if d.partial_cmp(&T::ZERO) != Some(std::cmp::Ordering::Greater) {
            return false;
        }
        let pivot = d.sqrt_value();
        row_j[j] = pivot;
        let lj = &row_j[..j];
        for row in below.chunks_mut(n) {
            row[j] = (row[j] - dot(&row[..j], lj)) / pivot;
        }
    }
    true
}

/// `Σ a_k b_k` with eight partial sums (so that the compiler vectorizes
/// it), added pairwise at the end.
#[inline]
fn dot<T: DecompElem>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::ZERO; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut tail = T::ZERO;
    for k in chunks * 8..a.len() {
        tail += a[k] * b[k];
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Which system [`triangular_solve`] solves (`jax.lax.linalg.triangular_solve`'s
/// parameters, real matrices).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TriangularSpec {
    /// `op(A) X = B` (true) or `X op(A) = B` (false).
    pub left_side: bool,
    /// `A` is lower (true) or upper triangular; the other triangle is not read.
    pub lower: bool,
    /// `op(A) = Aᵀ` (true) or `A`.
    pub transpose_a: bool,
    /// The diagonal of `A` is taken as ones (not read).
    pub unit_diagonal: bool,
}

/// Solves `batch` triangular systems: `A_i` is `k x k` (k = m for a left
/// side, n for a right side) and `B_i` is `m x n`; the solutions `X_i`
/// (`m x n`) back to back. A zero on a read diagonal divides by zero (inf
/// or NaN in the solution, as LAPACK's `trsm`).
pub fn triangular_solve<T: DecompElem>(
    a: &[T],
    b: &[T],
    batch: usize,
    m: usize,
    n: usize,
    spec: TriangularSpec,
    par: Par,
) -> Vec<T> {
    let k = if spec.left_side { m } else { n };
    debug_assert_eq!(a.len(), batch * k * k);
    debug_assert_eq!(b.len(), batch * m * n);
    let mut out = b.to_vec();
    // X op(A) = B is op(A)ᵀ Xᵀ = Bᵀ: the matrix solved with is transposed
    // once for op and once more for a right side
    let transposed = spec.transpose_a == spec.left_side;
    let lower = spec.lower != transposed;
    each_matrix(&mut out, m * n, par, |i, x, inner| {
        let a = MatRef::from_row_major_slice(&a[i * k * k..(i + 1) * k * k], k, k);
        let a = if transposed { a.transpose() } else { a };
        let x = MatMut::from_row_major_slice_mut(x, m, n);
        let x = if spec.left_side { x } else { x.transpose_mut() };
        match (lower, spec.unit_diagonal) {
            (true, false) => tri::solve_lower_triangular_in_place(a, x, inner),
            (true, true) => tri::solve_unit_lower_triangular_in_place(a, x, inner),
            (false, false) => tri::solve_upper_triangular_in_place(a, x, inner),
            (false, true) => tri::solve_unit_upper_triangular_in_place(a, x, inner),
        }
    });
    out
}

/// The LU factorization with partial pivoting of `batch` matrices `m x n`
/// (LAPACK's `getrf`, as `jax.lax.linalg.lu`): `P A = L U` with `L` unit
/// lower triangular (`m x k`, k = min(m, n)) and `U` upper (`k x n`), both
/// in one `m x n` matrix; the row swaps `pivots` (`k` per matrix: row `j`
/// was swapped with row `pivots[j]`, in turn) and the permutation they
/// make (`m` per matrix: row `i` of `P A` is row `permutation[i]` of `A`).
///
/// Written here rather than through faer so that a singular matrix gets
/// LAPACK's factors: a column without a nonzero pivot is left as it is
/// (faer divides by the zero pivot, and the NaN spreads). The pivot is
/// the first entry of largest magnitude, as LAPACK's `idamax`; the column
/// below it is scaled by its reciprocal, as `getf2`. Unblocked: meant for
/// the small and medium matrices of a stack.
pub fn lu<T: DecompElem>(a: &[T], batch: usize, m: usize, n: usize, par: Par) -> (Vec<T>, Vec<i32>, Vec<i32>) {
    debug_assert_eq!(a.len(), batch * m * n);
    let k = m.min(n);
    let mut out = a.to_vec();
    let mut pivots = vec![0i32; batch * k];
    let mut perms = vec![0i32; batch * m];
    let one = |x: &mut [T], piv: &mut [i32], perm: &mut [i32]| {
        for j in 0..k {
            let mut p = j;
            let mut best = x[j * n + j].magnitude();
            for i in j + 1..m {
                let v = x[i * n + j].magnitude();
                if v > best {
                    best = v;
                    p = i;
                }
            }
            piv[j] = p as i32;
            if x[p * n + j] != T::ZERO {
                if p != j {
                    for c in 0..n {
                        x.swap(p * n + c, j * n + c);
                    }
                }
                let inv = T::ONE / x[j * n + j];
                for i in j + 1..m {
                    x[i * n + j] *= inv;
                }
            }
            for i in j + 1..m {
                let l = x[i * n + j];
                if l != T::ZERO {
                    for c in j + 1..n {
                        x[i * n + c] -= l * x[j * n + c];
                    }
                }
            }
        }
        for (i, v) in perm.iter_mut().enumerate() {
            *v = i as i32;
        }
        for (j, &p) in piv.iter().enumerate() {
            perm.swap(j, p as usize);
        }
    };
    if batch == 0 || m == 0 {
        return (out, pivots, perms);
    }
    if k == 0 {
        // no columns (or rows) to pivot: the identity permutation
        perms.chunks_mut(m).for_each(|p| one(&mut [], &mut [], p));
        return (out, pivots, perms);
    }
    let chunks = out.chunks_mut(m * n).zip(pivots.chunks_mut(k)).zip(perms.chunks_mut(m));
    match par {
        Par::Rayon if batch > 1 => out
            .par_chunks_mut(m * n)
            .zip(pivots.par_chunks_mut(k))
            .zip(perms.par_chunks_mut(m))
            .for_each(|((x, piv), perm)| one(x, piv, perm)),
        _ => chunks.for_each(|((x, piv), perm)| one(x, piv, perm)),
    }
    (out, pivots, perms)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `A X` for row-major `A` (m x k) and `X` (k x n).
    /// `a x` for row-major `a` (`m x k`) and `x` (`k x n`).
    pub(in crate::cpu) fn mm(a: &[f64], x: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut y = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                y[i * n + j] = (0..k).map(|p| a[i * k + p] * x[p * n + j]).sum();
            }
        }
        y
    }

    /// The transpose of row-major `a` (`r x c`).
    pub(in crate::cpu) fn t(a: &[f64], r: usize, c: usize) -> Vec<f64> {
        (0..c * r).map(|q| a[(q % r) * c + q / r]).collect()
    }

    #[test]
    fn cholesky_factors_and_refuses_indefinite() {
        // [[4, 2], [2, 3]] = L Lᵀ with L = [[2, 0], [1, sqrt 2]], here
        // symmetrized from [[4, 3], [1, 3]]
        let a = [4.0, 3.0, 1.0, 3.0, 1.0, 2.0, 2.0, 1.0];
        let l = cholesky(&a, 2, 2, Par::Seq);
        assert_eq!(&l[..3], &[2.0, 0.0, 1.0]);
        assert!((l[3] - 2f64.sqrt()).abs() < 1e-15);
        // [[1, 2], [2, 1]] is indefinite: NaN below and on the diagonal
        // (jnp.linalg.cholesky gives [[nan, 0], [nan, nan]])
        assert!(l[4].is_nan() && l[5] == 0.0 && l[6].is_nan() && l[7].is_nan(), "{l:?}");
        assert!(cholesky::<f32>(&[], 0, 3, Par::Rayon).is_empty());
    }

    #[test]
    fn cholesky_by_rows_and_by_faer_agree() {
        // a matrix past the small size (faer) and its leading block (rows)
        let n = SMALL_CHOLESKY + 5;
        let mut a = vec![0.0f64; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = if i == j { n as f64 } else { ((i * 7 + j * 3) % 11) as f64 / 11.0 - 0.5 };
            }
        }
        let big = cholesky(&a, 1, n, Par::Seq);
        let k = SMALL_CHOLESKY;
        let lead: Vec<f64> = (0..k * k).map(|q| a[(q / k) * n + q % k]).collect();
        let small = cholesky(&lead, 1, k, Par::Seq);
        for i in 0..k {
            for j in 0..k {
                assert!((big[i * n + j] - small[i * k + j]).abs() < 1e-13, "({i}, {j})");
            }
        }
    }

    #[test]
    fn lu_as_lapack() {
        // scipy.linalg.lu_factor([[1, 2], [3, 4]]) (LAPACK dgetrf):
        // lu = [[3, 4], [1/3, 2/3]], piv = [1, 1]
        let (f, piv, perm) = lu(&[1.0f64, 2.0, 3.0, 4.0], 1, 2, 2, Par::Seq);
        assert_eq!(piv, vec![1, 1]);
        assert_eq!(perm, vec![1, 0]);
        assert_eq!(f[..2], [3.0, 4.0]);
        assert!((f[2] - 1.0 / 3.0).abs() < 1e-16 && (f[3] - 2.0 / 3.0).abs() < 1e-15, "{f:?}");
        // a zero column: no division by the zero pivot (LAPACK leaves it)
        let (f, piv, _) = lu(&[0.0f64, 1.0, 0.0, 2.0], 1, 2, 2, Par::Seq);
        assert_eq!(piv, vec![0, 1]);
        assert!(f.iter().all(|v| v.is_finite()), "{f:?}");
        // rectangular, P A = L U
        let a = [1.0f64, 4.0, 2.0, 5.0, 3.0, 6.0, 0.5, -1.0];
        for (m, n) in [(4, 2), (2, 4)] {
            let (f, _, perm) = lu(&a, 1, m, n, Par::Rayon);
            let k = m.min(n);
            let l: Vec<f64> = (0..m * k)
                .map(|q| {
                    let (i, j) = (q / k, q % k);
                    if i == j {
                        1.0
                    } else if i > j {
                        f[i * n + j]
                    } else {
                        0.0
                    }
                })
                .collect();
            let u: Vec<f64> = (0..k * n).map(|q| if q / n <= q % n { f[q] } else { 0.0 }).collect();
            let prod = mm(&l, &u, m, k, n);
            for i in 0..m {
                for j in 0..n {
                    assert!((prod[i * n + j] - a[perm[i] as usize * n + j]).abs() < 1e-14, "{m}x{n}");
                }
            }
        }
    }

    #[test]
    fn triangular_solve_every_form() {
        let (m, n) = (3, 2);
        let a3 = [2.0, 0.5, -1.0, 0.3, 3.0, 0.7, -0.4, 1.1, 4.0];
        let a2 = [2.0, 0.5, 0.3, 3.0];
        let b = [1.0, -2.0, 0.5, 3.0, -1.5, 2.5];
        for left_side in [true, false] {
            for lower in [true, false] {
                for transpose_a in [true, false] {
                    for unit_diagonal in [true, false] {
                        let spec = TriangularSpec { left_side, lower, transpose_a, unit_diagonal };
                        let (a, k) = if left_side { (&a3[..], m) } else { (&a2[..], n) };
                        // the triangle that is read, with the diagonal
                        let tri: Vec<f64> = (0..k * k)
                            .map(|q| {
                                let (i, j) = (q / k, q % k);
                                match () {
                                    _ if i == j && unit_diagonal => 1.0,
                                    _ if i == j || (lower && i > j) || (!lower && i < j) => a[q],
                                    _ => 0.0,
                                }
                            })
                            .collect();
                        let op = if transpose_a { t(&tri, k, k) } else { tri };
                        let x = triangular_solve(a, &b, 1, m, n, spec, Par::Seq);
                        let back = if left_side { mm(&op, &x, m, m, n) } else { mm(&x, &op, m, n, n) };
                        for (u, v) in back.iter().zip(&b) {
                            assert!((u - v).abs() < 1e-13, "{spec:?}: {back:?} vs {b:?}");
                        }
                    }
                }
            }
        }
    }
}
