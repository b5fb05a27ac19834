//! Linear algebra over stacks of matrices, with numpy's and JAX's names
//! (`jax.numpy.linalg`, `jax.scipy.linalg`): every function takes `[..., m,
//! n]` operands whose leading axes are a batch, runs under every transform
//! (it is built on the decomposition primitives `cholesky`, `lu`,
//! `triangular_solve`, `qr`, `eigh` and `svd`, whose rules JAX's are), and
//! returns an error naming the function and the shapes for operands of the
//! wrong shape or dtype (f32 and f64).
//!
//! What a matrix without the property an operation needs gives (decided
//! once, as JAX on the CPU; never a panic):
//!
//! | operation | input | result |
//! |---|---|---|
//! | `cholesky` | not positive definite (after symmetrizing) | NaN in that matrix's factor's lower triangle, zeros above |
//! | `cho_solve` | a factor with NaN | NaN in that matrix's solution |
//! | `lu` | singular | factors with a zero on `U`'s diagonal (LAPACK's `getrf`) |
//! | `solve`, `inv`, `lu_solve` | singular | inf or NaN (division by the zero pivot) |
//! | `triangular_solve` | a zero on the read diagonal | inf or NaN |
//! | `det` | singular | 0, its derivative the adjugate (JAX's rule; 0 below rank n - 1) |
//! | `slogdet` | singular | sign 0, log-determinant -inf |
//! | `qr` | rank deficient | factors with a zero on `R`'s diagonal (its derivative divides by it: inf or NaN) |
//! | `eigh`, `eigvalsh` | a repeated eigenvalue | the eigenvalues; any orthonormal basis of its eigenspace; the eigenvectors' derivative inf or NaN, a symmetric function of the eigenvalues' finite (as JAX) |
//! | `svd`, `svdvals`, the 2- and nuclear norms | repeated or zero singular values | the same: `U`'s and `V`'s derivative inf or NaN |
//! | `pinv`, `lstsq` | rank deficient | singular values at or below the cutoff count as zero; the derivative finite (Golub and Pereyra's, as JAX's `pinv`) |
//! | `svd` with complete factors | a non-square matrix, differentiated | an error (the completion is arbitrary; JAX refuses too) |
//! | `qr` with complete factors | a tall matrix, differentiated | an error (JAX differentiates LAPACK's Householder completion; xform's is not that one) |
//! | `eigh`, `svd` | an iteration that does not converge | NaN in that matrix's results |
//! | every operation | NaN or inf entries | NaN in that matrix's results (`cholesky`: its whole factor's lower triangle; which entries of `lu`'s factors are NaN can differ from LAPACK's) |
//!
//! Where xform differs from JAX: the signs LAPACK leaves free are fixed
//! (`qr`'s `R` has a non-negative diagonal; each eigenvector and left
//! singular vector has its entry of largest magnitude positive), so the
//! factors are unique where the mathematics allows (and equal across
//! `vmap` and `jit`); `lu_solve` takes the permutation `lu` returns
//! rather than LAPACK's pivots; and `solve`
//! differentiates through its LU factors rather than by a second solve.

use crate::{custom_jvp, lax, DType, Error, OrRaise, Result, Tensor};
pub use expm::expm;
pub use spectral::{eigh, eigvalsh, lstsq, matrix_norm, norm, pinv, qr, svd, svdvals, vector_norm};
pub use spectral::{Lstsq, MatrixNorm, QrMode};
use xform_kernels::Shape;
pub use xform_ops::lax::{cholesky, diagonal, lu, triangular_solve, TriangularSpec};

mod expm;
mod spectral;

/// Each matrix transposed (the last two axes swapped).
fn mt(a: &Tensor) -> Result<Tensor> {
    let r = a.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    lax::transpose(a, &perm)
}

/// `n` for square matrices `[..., n, n]` of f32 or f64, else an error
/// naming `op`.
fn square(op: &str, a: &Tensor) -> Result<usize> {
    let s = a.shape();
    let r = s.rank();
    if r < 2 || s[r - 1] != s[r - 2] {
        return Err(Error::shape(op, "needs square matrices [..., n, n]", &[&s]));
    }
    if !matches!(a.dtype(), DType::F32 | DType::F64) {
        return Err(Error::dtype(op, "needs f32 or f64 matrices", &[a.dtype()]));
    }
    Ok(s[r - 1])
}

/// The sign (-1, 0 or 1) and the natural log of the absolute value of the
/// determinant of each matrix (`jnp.linalg.slogdet`): through `lu`, a
/// singular matrix giving sign 0 and log-determinant -inf.
pub fn slogdet(a: &Tensor) -> Result<(Tensor, Tensor)> {
    square("slogdet", a)?;
    let (f, pivots, _) = lu(a)?;
    let d = diagonal(&f)?;
    let r = d.rank();
    let zero = lax::zeros_like(&d)?;
    let is_zero = lax::reduce_max(&lax::convert(&lax::eq(&d, &zero)?, DType::I32)?, &[r - 1])?;
    let sign = lax::mul(&swap_sign(&pivots, a.dtype())?, &negatives_sign(&d)?)?;
    let logdet = lax::reduce_sum(&lax::log(&lax::abs(&d)?)?, &[r - 1])?;
    let singular = lax::ne(&is_zero, &lax::zeros_like(&is_zero)?)?;
    Ok((
        lax::select(&singular, &lax::zeros_like(&sign)?, &sign)?,
        lax::select(&singular, &lax::full_like(&logdet, f64::NEG_INFINITY)?, &logdet)?,
    ))
}

/// -1 where a count over the last axis of `flips` (bool) is odd, else 1.
fn parity_sign(flips: &Tensor, dtype: DType) -> Result<Tensor> {
    let r = flips.rank();
    let count = lax::reduce_sum(&lax::convert(flips, DType::I32)?, &[r - 1])?;
    let odd = lax::convert(&lax::rem(&count, &lax::full_like(&count, 2.0)?)?, dtype)?;
    lax::sub(&lax::full_like(&odd, 1.0)?, &lax::mul_scalar(&odd, 2.0)?)
}

/// The sign of the permutation LU's row swaps `pivots` make.
fn swap_sign(pivots: &Tensor, dtype: DType) -> Result<Tensor> {
    let steps = lax::iota(DType::I32, &pivots.shape(), pivots.rank() - 1, pivots.device())?;
    parity_sign(&lax::ne(pivots, &steps)?, dtype)
}

/// The sign of the product of each vector of `d` (its zeros aside).
fn negatives_sign(d: &Tensor) -> Result<Tensor> {
    parity_sign(&lax::lt(d, &lax::zeros_like(d)?)?, d.dtype())
}

/// The product over the last axis (halving it: the axis's two halves
/// multiplied, an odd element carried), `[...]` for `[..., n]`.
fn product_last(x: &Tensor) -> Result<Tensor> {
    let r = x.rank();
    let mut x = x.clone();
    loop {
        let n = x.shape()[r - 1];
        if n == 0 {
            return lax::full(&Shape::from(&x.shape().dims()[..r - 1]), 1.0, x.dtype(), x.device());
        }
        if n == 1 {
            return back_to_vector(x, true);
        }
        let h = n / 2;
        let pairs = lax::mul(&lax::slice_axis(&x, r - 1, 0, h)?, &lax::slice_axis(&x, r - 1, h, 2 * h)?)?;
        x = if n % 2 == 1 { lax::concatenate(&[pairs, lax::slice_axis(&x, r - 1, 2 * h, n)?], r - 1)? } else { pairs };
    }
}

/// The determinants of `a` and `adj(a) g` (`det(a) a⁻¹ g` where `a` is
/// invertible), through `lu`, finite at every matrix (JAX's
/// `_cofactor_solve`): with `a = Pᵀ L U`, the last pivot of `U` is replaced
/// by `1 / (sign · u₁₁ ⋯ uₙ₋₁ₙ₋₁)`, so that a matrix of rank `n - 1` (whose
/// last pivot is zero) still gets its adjugate, rank-one; below rank
/// `n - 1` the adjugate is zero.
fn cofactor_solve(a: &Tensor, g: &Tensor) -> Result<(Tensor, Tensor)> {
    let r = a.rank();
    let n = a.shape()[r - 1];
    let (f, pivots, perm) = lu(a)?;
    let d = diagonal(&f)?;
    let sign = swap_sign(&pivots, a.dtype())?;
    let leading = lax::mul(&sign, &product_last(&lax::slice_axis(&d, r - 2, 0, n - 1)?)?)?;
    let det = lax::mul(&leading, &back_to_vector(lax::slice_axis(&d, r - 2, n - 1, n)?, true)?)?;
    // U with its last pivot 1 / leading
    let s = f.shape();
    let corner = {
        let row = lax::iota(DType::I32, &s, r - 2, a.device())?;
        let col = lax::iota(DType::I32, &s, r - 1, a.device())?;
        let last = lax::full_like(&row, (n - 1) as f64)?;
        lax::and(&lax::eq(&row, &last)?, &lax::eq(&col, &last)?)?
    };
    let lead_dims: Vec<usize> = (0..r - 2).collect();
    let inv_leading = lax::div(&lax::ones_like(&leading)?, &leading)?;
    let f = lax::select(&corner, &lax::broadcast_in_dim(&inv_leading, &s, &lead_dims)?, &f)?;
    let upper = TriangularSpec { left_side: true, lower: false, transpose_a: false, unit_diagonal: false };
    // rank below n - 1: the solve with that U is not finite
    let mut ones_shape = s.dims().to_vec();
    ones_shape[r - 1] = 1;
    let probe = triangular_solve(&f, &lax::full(&Shape::from(ones_shape), 1.0, a.dtype(), a.device())?, upper)?;
    let finite = lax::eq(&lax::sub(&probe, &probe)?, &lax::zeros_like(&probe)?)?;
    let low_rank = lax::reduce_min(&lax::convert(&finite, DType::I32)?, &[r - 2, r - 1])?;
    let low_rank = lax::eq(&low_rank, &lax::zeros_like(&low_rank)?)?;
    let gs = g.shape();
    let low_rank = lax::broadcast_in_dim(&low_rank, &gs, &lead_dims)?;
    let zero_where_low = |x: &Tensor| lax::select(&low_rank, &lax::zeros_like(x)?, x);
    let x = zero_where_low(&lax::gather(g, &perm, r - 2, r - 2)?)?;
    let x = triangular_solve(&f, &x, TriangularSpec { lower: true, unit_diagonal: true, ..upper })?;
    let head = lax::mul(
        &lax::slice_axis(&x, r - 2, 0, n - 1)?,
        &lax::broadcast_in_dim(
            &det,
            &{
                let mut h = gs.dims().to_vec();
                h[r - 2] = n - 1;
                Shape::from(h)
            },
            &lead_dims,
        )?,
    )?;
    let x = lax::concatenate(&[head, lax::slice_axis(&x, r - 2, n - 1, n)?], r - 2)?;
    let x = zero_where_low(&triangular_solve(&f, &x, upper)?)?;
    // where that solve fails, the adjugate from the SVD instead (JAX gives
    // 0 there, which is wrong when a zero pivot comes before the last one
    // of a matrix of rank n - 1, e.g. one whose first column is zero)
    let x = lax::select(&low_rank, &adjugate_by_svd(a, g)?, &x)?;
    Ok((det, x))
}

/// `adj(a) g` from `a = U diag(s) Vᵀ`: `adj(a) = det(U) det(V) V diag(p)
/// Uᵀ` with `p_i` the product of the singular values but the `i`-th
/// (zero below rank n - 1, NaN for a matrix with NaN).
fn adjugate_by_svd(a: &Tensor, g: &Tensor) -> Result<Tensor> {
    let r = a.rank();
    let (u, s, vt) = lax::svd(a, false)?;
    let shape = u.shape();
    let eye = lax::broadcast_to(&Tensor::eye(shape[r - 1], a.dtype()).try_to_device(a.device())?, &shape)?;
    let on = lax::ne(&eye, &lax::zeros_like(&eye)?)?;
    // row i: the singular values with a 1 in place of the i-th
    let mut cols: Vec<usize> = (0..r - 2).collect();
    cols.push(r - 1);
    let others = lax::select(&on, &lax::ones_like(&eye)?, &lax::broadcast_in_dim(&s, &shape, &cols)?)?;
    let p = product_last(&others)?;
    let sign = lax::mul(&slogdet(&u)?.0, &slogdet(&vt)?.0)?;
    let mut rows: Vec<usize> = (0..r - 2).collect();
    rows.push(r - 2);
    let ut_g = mt(&u)?.try_matmul(g)?;
    let scaled = lax::mul(&lax::broadcast_in_dim(&p, &ut_g.shape(), &rows)?, &ut_g)?;
    let lead: Vec<usize> = (0..r - 2).collect();
    lax::mul(&lax::broadcast_in_dim(&sign, &shape, &lead)?, &mt(&vt)?.try_matmul(&scaled)?)
}

/// The determinant of each matrix (`jnp.linalg.det`), as JAX computes it:
/// for `n <= 3` the explicit polynomial (in JAX's order of operations), so
/// that every derivative is exact; above, `sign * exp(logdet)` from
/// [`slogdet`], differentiated by JAX's rule `trace(adj(a) ȧ)` through
/// `cofactor_solve` (JAX's `_cofactor_solve`, with the SVD's adjugate
/// where its LU step fails), so its derivative is finite (the adjugate) at
/// singular matrices too.
pub fn det(a: &Tensor) -> Result<Tensor> {
    let n = square("det", a)?;
    let by_slogdet = |a: &Tensor| -> Result<Tensor> {
        let (sign, logdet) = slogdet(a)?;
        lax::mul(&sign, &lax::exp(&logdet)?)
    };
    let r = a.rank();
    let at = |i: usize, j: usize| -> Result<Tensor> {
        let x = lax::slice_axis(&lax::slice_axis(a, r - 2, i, i + 1)?, r - 1, j, j + 1)?;
        lax::reshape(&x, &Shape::from(&a.shape().dims()[..r - 2]))
    };
    let mul3 = |x: (usize, usize), y: (usize, usize), z: (usize, usize)| -> Result<Tensor> {
        lax::mul(&lax::mul(&at(x.0, x.1)?, &at(y.0, y.1)?)?, &at(z.0, z.1)?)
    };
    match n {
        0 => return by_slogdet(a),
        1 => return at(0, 0),
        2 => return lax::sub(&lax::mul(&at(0, 0)?, &at(1, 1)?)?, &lax::mul(&at(0, 1)?, &at(1, 0)?)?),
        3 => {
            let plus = lax::add(
                &lax::add(&mul3((0, 0), (1, 1), (2, 2))?, &mul3((0, 1), (1, 2), (2, 0))?)?,
                &mul3((0, 2), (1, 0), (2, 1))?,
            )?;
            let minus = lax::sub(&plus, &mul3((0, 2), (1, 1), (2, 0))?)?;
            let minus = lax::sub(&minus, &mul3((0, 0), (1, 2), (2, 1))?)?;
            return lax::sub(&minus, &mul3((0, 1), (1, 0), (2, 2))?);
        }
        _ => {}
    }
    let rule = custom_jvp(
        move |a: &Tensor| by_slogdet(a).or_raise(),
        |a: &Tensor, g: &Tensor| {
            let (det, x) = cofactor_solve(a, g).or_raise();
            let r = x.rank();
            (det, lax::reduce_sum(&diagonal(&x).or_raise(), &[r - 2]).or_raise())
        },
    );
    rule.try_call(a)
}

/// `b` as matrices with `a`'s leading axes: a vector `[n]` is one column
/// (numpy 2's rule: only a 1-d `b` is a vector), and the leading axes of
/// both broadcast. Returns the matrices and whether `b` was a vector.
fn as_columns(op: &str, a: &Tensor, b: &Tensor, n: usize) -> Result<(Tensor, Tensor, bool)> {
    let vector = b.rank() == 1;
    let b = if vector { lax::expand_dims(b, 1)? } else { b.clone() };
    let (sa, sb) = (a.shape(), b.shape());
    let (ra, rb) = (sa.rank(), sb.rank());
    if rb < 2 || sb[rb - 2] != n || b.dtype() != a.dtype() {
        return Err(Error::shape(
            op,
            format!("needs b of shape [{n}] or [..., {n}, k] and a's dtype {} (b is {})", a.dtype(), b.dtype()),
            &[&sa, &sb],
        ));
    }
    let lead = broadcast_dims(&sa.dims()[..ra - 2], &sb.dims()[..rb - 2])
        .ok_or_else(|| Error::shape(op, "the leading (batch) axes of a and b do not broadcast", &[&sa, &sb]))?;
    let with = |last: [usize; 2]| Shape::from(lead.iter().copied().chain(last).collect::<Vec<_>>());
    let a = lax::broadcast_to(a, &with([n, n]))?;
    let b = lax::broadcast_to(&b, &with([n, sb[rb - 1]]))?;
    Ok((a, b, vector))
}

/// numpy's broadcast of two shapes, or `None`.
fn broadcast_dims(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let x = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let y = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            match (x, y) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// The solutions of a vector `b` as vectors (the column axis dropped).
fn back_to_vector(x: Tensor, vector: bool) -> Result<Tensor> {
    if vector {
        let s = x.shape();
        lax::reshape(&x, &Shape::from(&s.dims()[..s.rank() - 1]))
    } else {
        Ok(x)
    }
}

/// Solves `L U x = P b` given `lu`'s factors `f` and `permutation`.
fn solve_factored(f: &Tensor, permutation: &Tensor, b: &Tensor) -> Result<Tensor> {
    let r = b.rank();
    let pb = lax::gather(b, permutation, r - 2, r - 2)?;
    let y = triangular_solve(
        f,
        &pb,
        TriangularSpec { left_side: true, lower: true, transpose_a: false, unit_diagonal: true },
    )?;
    triangular_solve(f, &y, TriangularSpec { left_side: true, lower: false, transpose_a: false, unit_diagonal: false })
}

/// `x` with `a x = b` for each matrix (`jnp.linalg.solve`): `b` is a vector
/// `[n]` or matrices `[..., n, k]`, the leading axes broadcasting. Through
/// `lu` with partial pivoting.
pub fn solve(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let n = square("solve", a)?;
    let (a, b, vector) = as_columns("solve", a, b, n)?;
    let (f, _, perm) = lu(&a)?;
    back_to_vector(solve_factored(&f, &perm, &b)?, vector)
}

/// `x` with `A x = b` from `lu`'s factors (`jax.scipy.linalg.lu_solve`,
/// taking the permutation rather than the pivots).
pub fn lu_solve(f: &Tensor, permutation: &Tensor, b: &Tensor) -> Result<Tensor> {
    let n = square("lu_solve", f)?;
    let (f, b, vector) = as_columns("lu_solve", f, b, n)?;
    let fs = f.shape();
    let lead = &fs.dims()[..fs.rank() - 2];
    let perm = lax::broadcast_to(permutation, &Shape::from(lead.iter().copied().chain([n]).collect::<Vec<_>>()))?;
    back_to_vector(solve_factored(&f, &perm, &b)?, vector)
}

/// The inverse of each matrix (`jnp.linalg.inv`): `solve(a, I)`.
pub fn inv(a: &Tensor) -> Result<Tensor> {
    let n = square("inv", a)?;
    // one identity, broadcast over a's leading axes by solve
    solve(a, &Tensor::eye(n, a.dtype()).try_to_device(a.device())?)
}

/// `x` with `A x = b` given `A`'s Cholesky factor `c`: `L` when `lower`,
/// else `Lᵀ` (`jax.scipy.linalg.cho_solve((c, lower), b)`); two
/// triangular solves.
pub fn cho_solve(c: &Tensor, lower: bool, b: &Tensor) -> Result<Tensor> {
    let n = square("cho_solve", c)?;
    let (c, b, vector) = as_columns("cho_solve", c, b, n)?;
    // A = L Lᵀ: L y = b, then Lᵀ x = y (with c = Lᵀ when upper)
    let first = TriangularSpec { left_side: true, lower, transpose_a: !lower, unit_diagonal: false };
    let y = triangular_solve(&c, &b, first)?;
    let x = triangular_solve(&c, &y, TriangularSpec { transpose_a: lower, ..first })?;
    back_to_vector(x, vector)
}

/// Each matrix to the integer power `n` (`jnp.linalg.matrix_power`): by
/// repeated squaring, the identity for `n = 0` and powers of the inverse
/// for `n < 0`.
pub fn matrix_power(a: &Tensor, n: i64) -> Result<Tensor> {
    let size = square("matrix_power", a)?;
    let identity = || lax::broadcast_to(&Tensor::eye(size, a.dtype()).try_to_device(a.device())?, &a.shape());
    if n == 0 {
        return identity();
    }
    let mut base = if n < 0 { inv(a)? } else { a.clone() };
    let mut left = n.unsigned_abs();
    let mut out: Option<Tensor> = None;
    while left > 0 {
        if left & 1 == 1 {
            out = Some(match out {
                None => base.clone(),
                Some(o) => o.try_matmul(&base)?,
            });
        }
        left >>= 1;
        if left > 0 {
            base = base.try_matmul(&base)?;
        }
    }
    Ok(out.expect("n != 0 sets a factor"))
}
