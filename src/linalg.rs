//! Linear algebra over stacks of matrices, with numpy's and JAX's names
//! (`jax.numpy.linalg`, `jax.scipy.linalg`): every function takes `[..., m,
//! n]` operands whose leading axes are a batch, runs under every transform
//! (it is built on the decomposition primitives `cholesky`, `lu` and
//! `triangular_solve`, whose rules JAX's are), and returns an error naming
//! the function and the shapes for operands of the wrong shape or dtype
//! (f32 and f64).
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
//! | `det` | singular | 0 (its derivative there is NaN: see below) |
//! | `slogdet` | singular | sign 0, log-determinant -inf |
//! | every operation | NaN or inf entries | NaN in that matrix's results (`cholesky`: its whole factor's lower triangle; which entries of `lu`'s factors are NaN can differ from LAPACK's) |
//!
//! Where xform differs from JAX: `det`'s derivative is taken through
//! `slogdet` (`det * d logdet`), not JAX's cofactor rule, so at a singular
//! matrix it is NaN where JAX gives the adjugate; `lu_solve` takes the
//! permutation `lu` returns rather than LAPACK's pivots; and `solve`
//! differentiates through its LU factors rather than by a second solve.

use crate::{lax, DType, Error, Result, Tensor};
use xform_kernels::Shape;
pub use xform_ops::lax::{cholesky, lu, triangular_solve, TriangularSpec};

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

/// The diagonals `[..., n]` of square matrices `[..., n, n]`
/// (`jnp.diagonal(x, axis1=-2, axis2=-1)`), a strided slice.
pub fn diagonal(x: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    if s.rank() < 2 || s[s.rank() - 1] != s[s.rank() - 2] {
        return Err(Error::shape("diagonal", "needs square matrices [..., n, n]", &[&s]));
    }
    let s = x.shape();
    let r = s.rank();
    let n = s[r - 1];
    let mut flat: Vec<usize> = s.dims()[..r - 2].to_vec();
    flat.push(n * n);
    let x = lax::reshape(x, &Shape::from(flat))?;
    let start = vec![0; r - 1];
    let mut limit: Vec<usize> = x.shape().dims().to_vec();
    let mut strides = vec![1; r - 1];
    limit[r - 2] = n * n;
    strides[r - 2] = n + 1;
    lax::slice(&x, &start, &limit, &strides)
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
    // row swaps and negative pivots, each flipping the sign
    let steps = lax::iota(DType::I32, &pivots.shape(), r - 1, pivots.device())?;
    let swaps = lax::convert(&lax::ne(&pivots, &steps)?, DType::I32)?;
    let negative = lax::convert(&lax::lt(&d, &zero)?, DType::I32)?;
    let parity = lax::add(&lax::reduce_sum(&swaps, &[r - 1])?, &lax::reduce_sum(&negative, &[r - 1])?)?;
    let odd = lax::convert(&lax::rem(&parity, &lax::full_like(&parity, 2.0)?)?, a.dtype())?;
    let sign = lax::sub(&lax::full_like(&odd, 1.0)?, &lax::mul_scalar(&odd, 2.0)?)?;
    let logdet = lax::reduce_sum(&lax::log(&lax::abs(&d)?)?, &[r - 1])?;
    let singular = lax::ne(&is_zero, &lax::zeros_like(&is_zero)?)?;
    Ok((
        lax::select(&singular, &lax::zeros_like(&sign)?, &sign)?,
        lax::select(&singular, &lax::full_like(&logdet, f64::NEG_INFINITY)?, &logdet)?,
    ))
}

/// The determinant of each matrix (`jnp.linalg.det`), as JAX computes it:
/// `sign * exp(logdet)` from [`slogdet`].
pub fn det(a: &Tensor) -> Result<Tensor> {
    square("det", a)?;
    let (sign, logdet) = slogdet(a)?;
    lax::mul(&sign, &lax::exp(&logdet)?)
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
