//! Orthogonal factorizations over stacks of contiguous row-major matrices,
//! through faer: QR, the symmetric eigendecomposition and the singular
//! value decomposition (the CPU side of `qr`, `eigh` and `svd`).
//!
//! Each result is made unique where the mathematics allows, up to
//! rounding (and `vmap` equals a loop exactly, the same kernel running
//! for each matrix):
//! `R`'s diagonal is non-negative; eigenvalues ascend and singular values
//! descend; each eigenvector and each left singular vector has its entry
//! of largest magnitude (the first such) positive, a right singular vector
//! following its left one. LAPACK (and so JAX and torch) leaves these
//! signs to the algorithm; what is left free is the complement of a
//! complete `Q` or `U` past the first `min(m, n)` columns.
//!
//! A matrix with a NaN or an infinity gets NaN in every result (faer's
//! iterations are not run on it), and so does one whose iteration does not
//! converge. The matrices of a stack run in parallel (rayon), each
//! through faer's high-level solvers with faer's global parallelism
//! (nested in the stack's).

use super::decomp::DecompElem;
use super::Par;
use faer::{Mat, MatRef, Side};
use rayon::prelude::*;

/// Runs `f` on each matrix's index, in parallel over a stack when asked,
/// and concatenates the per-matrix results of each output.
fn per_matrix<T: Copy + Send, const K: usize>(
    batch: usize,
    par: Par,
    f: impl Fn(usize) -> [Vec<T>; K] + Sync,
) -> [Vec<T>; K] {
    let parts: Vec<[Vec<T>; K]> = match par {
        Par::Rayon if batch > 1 => (0..batch).into_par_iter().map(&f).collect(),
        _ => (0..batch).map(&f).collect(),
    };
    std::array::from_fn(|k| parts.iter().flat_map(|p| p[k].iter().copied()).collect())
}

/// A faer matrix in row-major order.
fn rows<T: Copy>(m: MatRef<'_, T>) -> Vec<T> {
    let mut v = Vec::with_capacity(m.nrows() * m.ncols());
    for i in 0..m.nrows() {
        for j in 0..m.ncols() {
            v.push(m[(i, j)]);
        }
    }
    v
}

fn finite<T: DecompElem>(a: &[T]) -> bool {
    a.iter().all(|x| x.finite())
}

/// The index of the first entry of largest magnitude of column `j` of
/// the row-major `rows x cols` matrix `m`.
fn largest_in_column<T: DecompElem>(m: &[T], rows: usize, cols: usize, j: usize) -> usize {
    let mut best = 0;
    for i in 1..rows {
        if m[i * cols + j].magnitude() > m[best * cols + j].magnitude() {
            best = i;
        }
    }
    best
}

/// The QR factorizations `A = Q R` of `batch` matrices `m x n`: `Q` with
/// orthonormal columns (`m x m` when `full`, else `m x k`, k = min(m, n))
/// and `R` upper triangular (`m x n` or `k x n`) with a non-negative
/// diagonal, back to back (`jax.numpy.linalg.qr`'s `complete` and
/// `reduced` modes, up to the signs LAPACK leaves free).
pub fn qr<T: DecompElem>(a: &[T], batch: usize, m: usize, n: usize, full: bool, par: Par) -> (Vec<T>, Vec<T>) {
    debug_assert_eq!(a.len(), batch * m * n);
    let k = m.min(n);
    let qc = if full { m } else { k };
    let [q, r] = per_matrix(batch, par, |i| {
        let x = &a[i * m * n..(i + 1) * m * n];
        if !finite(x) {
            return [vec![T::NAN; m * qc], vec![T::NAN; qc * n]];
        }
        let f = MatRef::from_row_major_slice(x, m, n).qr();
        let mut q = rows(if full { f.compute_Q() } else { f.compute_thin_Q() }.as_ref());
        // R's first k rows (a complete R's rows past them are zeros)
        let mut r = rows(f.thin_R());
        r.resize(qc * n, T::ZERO);
        // a negative diagonal entry of R flips its row and Q's column
        for j in 0..k {
            if r[j * n + j] < T::ZERO {
                r[j * n..(j + 1) * n].iter_mut().for_each(|v| *v = -*v);
                (0..m).for_each(|row| q[row * qc + j] = -q[row * qc + j]);
            }
        }
        for row in 1..qc {
            r[row * n..row * n + row.min(n)].fill(T::ZERO);
        }
        [q, r]
    });
    (q, r)
}

/// The eigendecompositions of `batch` symmetric matrices `n x n` (of their
/// symmetrized `(A + Aᵀ) / 2`, as `jax.numpy.linalg.eigh` with
/// `symmetrize_input=True`): the eigenvectors as the columns of `V`
/// (`n x n`, each with its largest entry positive) and the eigenvalues `w`
/// (`n`, ascending), `A V = V diag(w)`.
pub fn eigh<T: DecompElem>(a: &[T], batch: usize, n: usize, par: Par) -> (Vec<T>, Vec<T>) {
    debug_assert_eq!(a.len(), batch * n * n);
    let two = T::ONE + T::ONE;
    let [v, w] = per_matrix(batch, par, |i| {
        let x = &a[i * n * n..(i + 1) * n * n];
        let nan = || [vec![T::NAN; n * n], vec![T::NAN; n]];
        if !finite(x) {
            return nan();
        }
        // (halves added: no overflow for entries near the largest float)
        let sym = Mat::from_fn(n, n, |r, c| x[r * n + c] / two + x[c * n + r] / two);
        let Ok(e) = sym.self_adjoint_eigen(Side::Lower) else {
            return nan();
        };
        let mut v = rows(e.U());
        let w: Vec<T> = (0..n).map(|j| e.S().column_vector()[j]).collect();
        for j in 0..n {
            let p = largest_in_column(&v, n, n, j);
            if v[p * n + j] < T::ZERO {
                (0..n).for_each(|r| v[r * n + j] = -v[r * n + j]);
            }
        }
        [v, w]
    });
    (v, w)
}

/// The singular value decompositions `A = U diag(s) Vᵀ` of `batch`
/// matrices `m x n`: the singular values `s` (`k` = min(m, n), descending)
/// and, when `compute_uv`, `U` (`m x m` when `full`, else `m x k`) and `Vᵀ`
/// (`n x n` or `k x n`), each left singular vector with its largest entry
/// positive (`jax.numpy.linalg.svd`). Without `compute_uv` the two are
/// empty.
pub fn svd<T: DecompElem>(
    a: &[T],
    batch: usize,
    m: usize,
    n: usize,
    full: bool,
    compute_uv: bool,
    par: Par,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    debug_assert_eq!(a.len(), batch * m * n);
    let k = m.min(n);
    let (uc, vr) = match (compute_uv, full) {
        (false, _) => (0, 0),
        (true, true) => (m, n),
        (true, false) => (k, k),
    };
    let [s, u, vt] = per_matrix(batch, par, |i| {
        let x = &a[i * m * n..(i + 1) * m * n];
        let nan = || [vec![T::NAN; k], vec![T::NAN; m * uc], vec![T::NAN; vr * n]];
        if !finite(x) {
            return nan();
        }
        let x = MatRef::from_row_major_slice(x, m, n);
        if !compute_uv {
            return match x.singular_values() {
                Ok(s) => [s, Vec::new(), Vec::new()],
                Err(_) => nan(),
            };
        }
        let Ok(d) = (if full { x.svd() } else { x.thin_svd() }) else {
            return nan();
        };
        let s: Vec<T> = (0..k).map(|j| d.S().column_vector()[j]).collect();
        let mut u = rows(d.U());
        let mut vt = rows(d.V().transpose());
        for j in 0..uc {
            let p = largest_in_column(&u, m, uc, j);
            if u[p * uc + j] < T::ZERO {
                (0..m).for_each(|r| u[r * uc + j] = -u[r * uc + j]);
                if j < vr {
                    vt[j * n..(j + 1) * n].iter_mut().for_each(|v| *v = -*v);
                }
            }
        }
        [s, u, vt]
    });
    (s, u, vt)
}

#[cfg(test)]
mod tests {
    use super::super::decomp::tests::{mm, t};
    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= tol, "{a:?} vs {b:?}");
        }
    }

    fn eye(n: usize) -> Vec<f64> {
        (0..n * n).map(|i| f64::from(u8::from(i % (n + 1) == 0))).collect()
    }

    fn sample(m: usize, n: usize, seed: u64) -> Vec<f64> {
        (0..m * n).map(|i| (((i as u64 + 1) * 2654435761 + seed * 97) % 1000) as f64 / 500.0 - 1.0).collect()
    }

    #[test]
    fn qr_reconstructs_with_orthonormal_q_and_positive_diagonal() {
        for (m, n) in [(4, 3), (3, 4), (3, 3), (1, 3), (3, 1)] {
            let a = sample(m, n, 1);
            let k = m.min(n);
            for full in [false, true] {
                let (q, r) = qr(&a, 1, m, n, full, Par::Seq);
                let qc = if full { m } else { k };
                close(&mm(&q, &r, m, qc, n), &a, 1e-12);
                close(&mm(&t(&q, m, qc), &q, qc, m, qc), &eye(qc), 1e-12);
                for j in 0..k {
                    assert!(r[j * n + j] >= 0.0);
                    for i in j + 1..qc {
                        assert_eq!(r[i * n + j], 0.0);
                    }
                }
            }
        }
    }

    #[test]
    fn eigh_ascending_with_signed_vectors() {
        let n = 4;
        let a = sample(n, n, 2);
        let (v, w) = eigh(&a, 1, n, Par::Seq);
        let sym: Vec<f64> = (0..n * n).map(|i| 0.5 * (a[i] + a[(i % n) * n + i / n])).collect();
        let mut vw = v.clone();
        for r in 0..n {
            for c in 0..n {
                vw[r * n + c] *= w[c];
            }
        }
        close(&mm(&sym, &v, n, n, n), &vw, 1e-12);
        assert!(w.windows(2).all(|p| p[0] <= p[1]));
        for j in 0..n {
            let p = largest_in_column(&v, n, n, j);
            assert!(v[p * n + j] > 0.0);
        }
        let (v, w) = eigh(&[1.0, f64::NAN, 0.0, 1.0], 1, 2, Par::Seq);
        assert!(v.iter().chain(&w).all(|x| x.is_nan()));
    }

    #[test]
    fn svd_reconstructs_thin_and_full() {
        for (m, n) in [(4, 3), (3, 4), (3, 3)] {
            let a = sample(m, n, 3);
            let k = m.min(n);
            let (s0, _, _) = svd(&a, 1, m, n, false, false, Par::Seq);
            for full in [false, true] {
                let (s, u, vt) = svd(&a, 1, m, n, full, true, Par::Seq);
                close(&s, &s0, 1e-12);
                assert!(s.windows(2).all(|p| p[0] >= p[1]));
                let (uc, vr) = if full { (m, n) } else { (k, k) };
                let mut us = vec![0.0; m * vr];
                for r in 0..m {
                    for c in 0..k {
                        us[r * vr + c] = u[r * uc + c] * s[c];
                    }
                }
                close(&mm(&us, &vt, m, vr, n), &a, 1e-12);
                close(&mm(&t(&u, m, uc), &u, uc, m, uc), &eye(uc), 1e-12);
                close(&mm(&vt, &t(&vt, vr, n), vr, n, vr), &eye(vr), 1e-12);
            }
        }
    }
}
