//! The functions of `xform::linalg` built on the orthogonal factorizations
//! `qr`, `eigh` and `svd`: the factorizations with numpy's names and
//! result orders, `eigvalsh`, `svdvals`, `pinv`, `lstsq` and the norms.

use super::{back_to_vector, mt, square};
use crate::{custom_jvp, lax, DType, Error, OrRaise, Result, Tensor};
use xform_kernels::Shape;

/// Which factors [`qr`] returns (numpy's `mode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum QrMode {
    /// `Q` is `m x k` and `R` `k x n`, `k = min(m, n)` (numpy's `"reduced"`).
    Reduced,
    /// `Q` is `m x m` and `R` `m x n` (numpy's `"complete"`; for a tall
    /// matrix not differentiable here: its `Q` past the first `n` columns
    /// is an orthonormal completion, which JAX differentiates as LAPACK's
    /// Householder one and xform does not).
    Complete,
}

/// f32 or f64 matrices `[..., m, n]`: `(m, n)`, else an error naming `op`.
pub(super) fn matrices(op: &str, a: &Tensor) -> Result<(usize, usize)> {
    let s = a.shape();
    let r = s.rank();
    if r < 2 {
        return Err(Error::shape(op, "needs matrices [..., m, n]", &[&s]));
    }
    if !matches!(a.dtype(), DType::F32 | DType::F64) {
        return Err(Error::dtype(op, "needs f32 or f64 matrices", &[a.dtype()]));
    }
    Ok((s[r - 2], s[r - 1]))
}

/// The QR factorization of each matrix (`jnp.linalg.qr(a, mode)`): `(q,
/// r)` with `a = q r`, `q`'s columns orthonormal and `r` upper triangular
/// with a non-negative diagonal (LAPACK, and so numpy, JAX and torch,
/// leave its signs to the algorithm; xform fixes them, so that the factors
/// are unique for a matrix of full column rank).
pub fn qr(a: &Tensor, mode: QrMode) -> Result<(Tensor, Tensor)> {
    matrices("qr", a)?;
    lax::qr(a, mode == QrMode::Complete)
}

/// The eigenvalues (ascending) and eigenvectors (the columns, each with
/// its entry of largest magnitude positive) of each symmetric matrix,
/// symmetrized as `(a + aᵀ) / 2` (`jnp.linalg.eigh`): `(w, v)` with
/// `a v = v diag(w)`.
///
/// At a repeated eigenvalue the eigenvectors' derivative is infinite or
/// NaN (they are not determined there), as in JAX; a function symmetric in
/// the repeated eigenvalues (their sum, a norm, a trace of a function of
/// `a`) gets its true derivative.
pub fn eigh(a: &Tensor) -> Result<(Tensor, Tensor)> {
    square("eigh", a)?;
    let (v, w) = lax::eigh(a)?;
    Ok((w, v))
}

/// The eigenvalues of each symmetric matrix, ascending
/// (`jnp.linalg.eigvalsh`).
pub fn eigvalsh(a: &Tensor) -> Result<Tensor> {
    Ok(eigh(a)?.0)
}

/// The singular value decomposition of each matrix (`jnp.linalg.svd`):
/// `(u, s, vh)` with `a = u diag(s) vh`, the singular values `s` descending,
/// `u` `[..., m, k]` and `vh` `[..., k, n]` (`k = min(m, n)`), or square
/// when `full_matrices` (not differentiable for a non-square matrix, whose
/// completion is arbitrary). Each column of `u` has its entry of largest
/// magnitude positive.
pub fn svd(a: &Tensor, full_matrices: bool) -> Result<(Tensor, Tensor, Tensor)> {
    matrices("svd", a)?;
    lax::svd(a, full_matrices)
}

/// The singular values of each matrix, descending (`jnp.linalg.svdvals`).
pub fn svdvals(a: &Tensor) -> Result<Tensor> {
    matrices("svdvals", a)?;
    lax::singular_values(a)
}

/// The batched product of matrices with equal leading axes.
fn mm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.try_matmul(b)
}

/// The pseudo-inverse from the thin SVD: singular values at or below
/// `rtol` times the largest count as zero (`jnp.linalg.pinv`'s formula).
fn pinv_by_svd(a: &Tensor, rtol: f64) -> Result<Tensor> {
    let (u, s, vh) = lax::svd(a, false)?;
    let r = s.rank();
    let largest = lax::slice_axis(&s, r - 1, 0, 1)?;
    let cutoff = lax::broadcast_to(&lax::mul_scalar(&largest, rtol)?, &s.shape())?;
    let kept = lax::gt(&s, &cutoff)?;
    let s = lax::select(&kept, &s, &lax::full_like(&s, f64::INFINITY)?)?;
    // Uᵀ with row i divided by s_i
    let ut = mt(&u)?;
    let ur = ut.rank();
    let dims: Vec<usize> = (0..ur - 1).collect();
    let scaled = lax::div(&ut, &lax::broadcast_in_dim(&s, &ut.shape(), &dims)?)?;
    mm(&mt(&vh)?, &scaled)
}

/// The Moore-Penrose pseudo-inverse of each matrix (`jnp.linalg.pinv`):
/// `[..., n, m]` for `[..., m, n]`, through the SVD, singular values at or
/// below `rtol` times the largest (by default `10 max(m, n) ε`) taken as
/// zero. Its derivative is Golub and Pereyra's formula (as JAX's custom
/// rule), so it is finite at repeated singular values and for
/// rank-deficient matrices, where the SVD's own derivative is not.
pub fn pinv(a: &Tensor, rtol: Option<f64>) -> Result<Tensor> {
    let (m, n) = matrices("pinv", a)?;
    if m == 0 || n == 0 {
        let s = a.shape();
        let mut out: Vec<usize> = s.dims()[..s.rank() - 2].to_vec();
        out.extend([n, m]);
        return lax::full(&Shape::from(out), 0.0, a.dtype(), a.device());
    }
    let eps = if a.dtype() == DType::F32 { f64::from(f32::EPSILON) } else { f64::EPSILON };
    let rtol = rtol.unwrap_or(10.0 * m.max(n) as f64 * eps);
    if rtol.is_nan() || rtol < 0.0 {
        return Err(Error::invalid("pinv", format!("rtol must be a non-negative number, not {rtol}")));
    }
    let rule = custom_jvp(
        move |a: &Tensor| pinv_by_svd(a, rtol).or_raise(),
        move |a: &Tensor, da: &Tensor| {
            let p = pinv_by_svd(a, rtol).or_raise();
            let dp = pinv_tangent(a, da, &p).or_raise();
            (p, dp)
        },
    );
    rule.try_call(a)
}

/// Golub and Pereyra's derivative of the pseudo-inverse `p` of `a` along
/// `da`: `-p da p + p pᵀ daᵀ (I - a p) + (I - p a) daᵀ pᵀ p`.
fn pinv_tangent(a: &Tensor, da: &Tensor, p: &Tensor) -> Result<Tensor> {
    let (pt, dat) = (mt(p)?, mt(da)?);
    let pdp = mm(&mm(p, da)?, p)?;
    let s = mm(&mm(p, &pt)?, &dat)?;
    let t = mm(&mm(&dat, &pt)?, p)?;
    let left = lax::sub(&s, &mm(&mm(&s, a)?, p)?)?;
    let right = lax::sub(&t, &mm(p, &mm(a, &t)?)?)?;
    lax::sub(&lax::add(&left, &right)?, &pdp)
}

/// The least-squares solutions of [`lstsq`] and what numpy returns with
/// them.
#[derive(Clone, Debug)]
pub struct Lstsq {
    /// `x` minimizing `‖a x - b‖₂` (of least norm when `a` is rank
    /// deficient): `[..., n]` or `[..., n, k]` as `b` is a vector or not.
    pub solution: Tensor,
    /// The squared residual norms `‖b - a x‖²` per column of `b`
    /// (`[..., k]`, or `[...]` for a vector `b`), always computed (as
    /// JAX's `numpy_resid=False`; numpy returns an empty array when the
    /// rank is below `n` or `m <= n`).
    pub residuals: Tensor,
    /// The effective rank of each matrix (i32): the singular values above
    /// `rcond` times the largest.
    pub rank: Tensor,
    /// The singular values of each matrix, descending.
    pub singular_values: Tensor,
}

/// The least-squares solution of `a x = b` for each matrix
/// (`jnp.linalg.lstsq(a, b, rcond)`): `a` `[..., m, n]`, `b` `[..., m]`
/// (vectors: one axis fewer than `a`) or `[..., m, k]` with `a`'s leading
/// axes. Singular values at or below `rcond` times the largest (by default
/// `max(m, n) ε`) count as zero. The solution is `pinv(a, rcond) b`, so
/// its derivative is the pseudo-inverse's (finite for rank-deficient `a`).
pub fn lstsq(a: &Tensor, b: &Tensor, rcond: Option<f64>) -> Result<Lstsq> {
    let (m, n) = matrices("lstsq", a)?;
    let (sa, sb) = (a.shape(), b.shape());
    let vector = sb.rank() + 1 == sa.rank();
    let lead = &sa.dims()[..sa.rank() - 2];
    let fits = if vector {
        sb.dims() == [lead, &[m][..]].concat().as_slice()
    } else {
        sb.rank() == sa.rank() && &sb.dims()[..sb.rank() - 2] == lead && sb[sb.rank() - 2] == m
    };
    if !fits || b.dtype() != a.dtype() {
        return Err(Error::shape(
            "lstsq",
            format!("needs b of shape [..., {m}] or [..., {m}, k] with a's leading axes and dtype {}", a.dtype()),
            &[&sa, &sb],
        ));
    }
    let eps = if a.dtype() == DType::F32 { f64::from(f32::EPSILON) } else { f64::EPSILON };
    // numpy's and JAX's: by default max(m, n) ε, a negative rcond ε
    let rcond = match rcond {
        None => m.max(n) as f64 * eps,
        Some(r) if r < 0.0 => eps,
        Some(r) if r.is_nan() => return Err(Error::invalid("lstsq", "rcond is NaN")),
        Some(r) => r,
    };
    let bm = if vector { lax::expand_dims(b, b.rank())? } else { b.clone() };
    // the singular values of the thin SVD pinv uses (the same kernel: the
    // rank counted here is the one the solution used)
    let s = lax::svd(a, false)?.1;
    let r = s.rank();
    let rank = if m.min(n) == 0 {
        lax::full(&Shape::from(lead.to_vec()), 0.0, DType::I32, a.device())?
    } else {
        let largest = lax::slice_axis(&s, r - 1, 0, 1)?;
        let cutoff = lax::broadcast_to(&lax::mul_scalar(&largest, rcond)?, &s.shape())?;
        lax::reduce_sum(&lax::convert(&lax::gt(&s, &cutoff)?, DType::I32)?, &[r - 1])?
    };
    let x = mm(&pinv(a, Some(rcond))?, &bm)?;
    let resid = lax::sub(&bm, &mm(a, &x)?)?;
    let residuals = lax::reduce_sum(&lax::mul(&resid, &resid)?, &[resid.rank() - 2])?;
    let residuals = if vector { back_to_vector(residuals, true)? } else { residuals };
    Ok(Lstsq { solution: back_to_vector(x, vector)?, residuals, rank, singular_values: s })
}

/// A matrix norm (numpy's `ord` for 2-d `norm`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum MatrixNorm {
    /// Frobenius: `sqrt(Σ a_ij²)` (`"fro"`, numpy's default).
    Frobenius,
    /// Nuclear: the sum of the singular values (`"nuc"`).
    Nuclear,
    /// The largest singular value (`2`).
    Two,
    /// The smallest singular value (`-2`).
    NegTwo,
    /// The largest column sum of `|a|` (`1`).
    One,
    /// The smallest column sum of `|a|` (`-1`).
    NegOne,
    /// The largest row sum of `|a|` (`inf`).
    Inf,
    /// The smallest row sum of `|a|` (`-inf`).
    NegInf,
}

/// The norm `ord` of each matrix (`jnp.linalg.matrix_norm(a, ord)`):
/// `[...]` for `[..., m, n]`. The spectral ones through the singular
/// values (the 2-norm's derivative at a repeated largest singular value is
/// the average over the tied ones, finite, as JAX's). Of empty matrices
/// the largest-sum and 2-norms are 0 (as JAX); the smallest ones, which
/// have no value there, are errors.
pub fn matrix_norm(a: &Tensor, ord: MatrixNorm) -> Result<Tensor> {
    let (m, n) = matrices("matrix_norm", a)?;
    let r = a.rank();
    let abs_sums = |axis: usize| lax::reduce_sum(&lax::abs(a)?, &[axis]);
    let last = r - 2;
    // the largest of non-negative values: 0 when there are none
    let largest = |x: Tensor| -> Result<Tensor> {
        let top = lax::reduce_max(&x, &[last])?;
        lax::max(&top, &lax::zeros_like(&top)?)
    };
    let smallest_of_none = matches!(ord, MatrixNorm::NegTwo | MatrixNorm::NegOne | MatrixNorm::NegInf);
    if smallest_of_none && m.min(n) == 0 {
        return Err(Error::shape(
            "matrix_norm",
            format!("the {ord:?} norm of empty matrices has no value"),
            &[&a.shape()],
        ));
    }
    match ord {
        MatrixNorm::Frobenius => lax::sqrt(&lax::reduce_sum(&lax::mul(a, a)?, &[r - 2, r - 1])?),
        MatrixNorm::Nuclear => lax::reduce_sum(&svdvals(a)?, &[last]),
        MatrixNorm::Two => largest(svdvals(a)?),
        MatrixNorm::NegTwo => lax::reduce_min(&svdvals(a)?, &[last]),
        MatrixNorm::One => largest(abs_sums(r - 2)?),
        MatrixNorm::NegOne => lax::reduce_min(&abs_sums(r - 2)?, &[last]),
        MatrixNorm::Inf => largest(abs_sums(r - 1)?),
        MatrixNorm::NegInf => lax::reduce_min(&abs_sums(r - 1)?, &[last]),
    }
}

/// The vector norm `ord` over all the elements of `x`, or over `axis`
/// (`jnp.linalg.vector_norm(x, ord, axis)`): `ord` infinite gives the
/// largest `|x|`, minus infinity the smallest, 0 the count of nonzeros,
/// otherwise `(Σ |x|^ord)^(1/ord)`.
pub fn vector_norm(x: &Tensor, ord: f64, axis: Option<usize>) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(Error::dtype("vector_norm", "needs a float tensor", &[x.dtype()]));
    }
    let axes: Vec<usize> = match axis {
        Some(a) if a >= x.rank() => {
            return Err(Error::shape("vector_norm", format!("axis {a} is out of range"), &[&x.shape()]))
        }
        Some(a) => vec![a],
        None => (0..x.rank()).collect(),
    };
    let abs = lax::abs(x)?;
    let empty = axes.iter().any(|&a| x.shape()[a] == 0);
    if ord == f64::NEG_INFINITY && empty {
        return Err(Error::shape("vector_norm", "the -inf norm of an empty vector has no value", &[&x.shape()]));
    }
    if ord.is_nan() {
        return Err(Error::invalid("vector_norm", "ord is NaN"));
    }
    match ord {
        o if o == f64::INFINITY => {
            let top = lax::reduce_max(&abs, &axes)?;
            lax::max(&top, &lax::zeros_like(&top)?)
        }
        o if o == f64::NEG_INFINITY => lax::reduce_min(&abs, &axes),
        0.0 => {
            let nonzero = lax::ne(x, &lax::zeros_like(x)?)?;
            lax::reduce_sum(&lax::convert(&nonzero, x.dtype())?, &axes)
        }
        2.0 => lax::sqrt(&lax::reduce_sum(&lax::mul(x, x)?, &axes)?),
        1.0 => lax::reduce_sum(&abs, &axes),
        o => {
            let powered = lax::pow(&abs, &lax::full_like(&abs, o)?)?;
            let sum = lax::reduce_sum(&powered, &axes)?;
            lax::pow(&sum, &lax::full_like(&sum, 1.0 / o)?)
        }
    }
}

/// The 2-norm of all the elements of `x` (`jnp.linalg.norm(x)`: the
/// Euclidean norm of a vector, the Frobenius norm of a matrix).
pub fn norm(x: &Tensor) -> Result<Tensor> {
    vector_norm(x, 2.0, None)
}
