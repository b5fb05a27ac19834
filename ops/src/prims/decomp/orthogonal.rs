//! The orthogonal factorizations of the decomposition family: `qr`,
//! `eigh` and `svd` (`jax.lax.linalg`'s), their shapes, lowerings and
//! rules. The results' free signs are fixed by the kernels
//! (`xform_kernels::cpu::orthogonal`): `R`'s diagonal non-negative, each
//! eigenvector's and left singular vector's largest entry positive.
//!
//! The JVPs are JAX's (`jax/_src/lax/linalg.py`): QR's from
//! `Qᵀ Q̇` skew-symmetric and `Ṙ` upper triangular (J. Townsend's note),
//! for a wide matrix (m < n) through the square factorization of its
//! first m columns (as JAX 0.10); eigh's `ẇ = diag(Vᵀ Ȧ V)`,
//! `V̇ = V (F ∘ Vᵀ Ȧ V)` with `F_ij = 1 / (w_j - w_i)`; and the SVD's
//! (Townsend's, as JAX's). As in JAX, a repeated eigenvalue (singular
//! value) gives infinities in the vectors' tangents, while functions of
//! the eigenvalues that are symmetric in the repeated ones (a sum, a
//! trace, a norm) get their true derivative. The complete `U` and `Vᵀ` of
//! a non-square matrix have no derivative (their completion is arbitrary,
//! JAX refuses too), nor here the complete `Q` of a tall matrix (JAX
//! differentiates LAPACK's Householder completion, arXiv:2409.13374; the
//! completion faer gives beside xform's fixed signs is not that one):
//! errors when a tangent reaches them.

use super::{bmm, check_float, diagonal, elems, keep_where, matrix_mask, mt, spec, triangular_solve, DecompOp};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::{bind, Outs};
use crate::lax;
use crate::prim::{Avals, Tangents};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::smallvec;
use xform_kernels::cpu::orthogonal as kernel;
use xform_kernels::cpu::Par;
use xform_kernels::{CpuBuffer, DType, Shape};

// ---- the lax functions ------------------------------------------------------

/// The QR factorization of each matrix of `x` (`[..., m, n]`;
/// `jax.lax.linalg.qr`): `(q, r)` with `x = q r`, `q`'s columns
/// orthonormal and `r` upper triangular with a non-negative diagonal;
/// `q` is `[..., m, k]` and `r` `[..., k, n]` with `k = min(m, n)`, or
/// `m x m` and `m x n` when `full_matrices`.
pub fn qr(x: &Tensor, full_matrices: bool) -> Result<(Tensor, Tensor)> {
    let mut outs = bind(&DecompOp::Qr { full_matrices }.into(), std::slice::from_ref(x))?;
    let r = outs.pop().expect("two results");
    let q = outs.pop().expect("two results");
    Ok((q, r))
}

/// The eigendecomposition of each symmetric matrix of `x` (`[..., n, n]`,
/// symmetrized as `(x + xᵀ) / 2`; `jax.lax.linalg.eigh`): `(v, w)` with
/// the eigenvectors the columns of `v` (`[..., n, n]`, each with its
/// largest entry positive) and the eigenvalues `w` (`[..., n]`) ascending.
pub fn eigh(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let mut outs = bind(&DecompOp::Eigh.into(), std::slice::from_ref(x))?;
    let w = outs.pop().expect("two results");
    let v = outs.pop().expect("two results");
    Ok((v, w))
}

/// The singular value decomposition of each matrix of `x` (`[..., m, n]`;
/// `jax.lax.linalg.svd`): `(u, s, vt)` with `x = u diag(s) vt`, `s`
/// (`[..., k]`, k = min(m, n)) descending, `u` `[..., m, k]` and `vt`
/// `[..., k, n]` (`m x m` and `n x n` when `full_matrices`), each column
/// of `u` with its largest entry positive.
pub fn svd(x: &Tensor, full_matrices: bool) -> Result<(Tensor, Tensor, Tensor)> {
    let mut outs = bind(&DecompOp::Svd { full_matrices, compute_uv: true }.into(), std::slice::from_ref(x))?;
    let vt = outs.pop().expect("three results");
    let u = outs.pop().expect("three results");
    let s = outs.pop().expect("three results");
    Ok((u, s, vt))
}

/// The singular values of each matrix of `x` (`[..., m, n]`), descending
/// (`jax.lax.linalg.svd(x, compute_uv=False)`).
pub fn singular_values(x: &Tensor) -> Result<Tensor> {
    let prim = DecompOp::Svd { full_matrices: false, compute_uv: false }.into();
    Ok(bind(&prim, std::slice::from_ref(x))?.remove(0))
}

// ---- shapes -------------------------------------------------------------------

/// `[..., m, n]` of f32 or f64: the batch axes, `m` and `n`.
fn matrices<'a>(op: &str, a: &'a AvalRef<'_>) -> Result<(&'a [usize], usize, usize)> {
    check_float(op, a)?;
    let d = a.shape.dims();
    let r = d.len();
    if r < 2 {
        return Err(Error::shape(op, "needs matrices [..., m, n]", &[a.shape]));
    }
    Ok((&d[..r - 2], d[r - 2], d[r - 1]))
}

/// An aval of `a`'s dtype and device with the batch axes `lead` and then `last`.
fn aval(a: &AvalRef<'_>, lead: &[usize], last: &[usize]) -> Aval {
    let shape: Vec<usize> = lead.iter().chain(last).copied().collect();
    Aval { shape: Shape::from(shape), dtype: a.dtype, device: a.device }
}

pub(super) fn shape_qr(full: bool, ins: &[AvalRef<'_>]) -> Result<Avals> {
    super::check_arity("qr", ins, 1)?;
    let (lead, m, n) = matrices("qr", &ins[0])?;
    let c = if full { m } else { m.min(n) };
    Ok(smallvec![aval(&ins[0], lead, &[m, c]), aval(&ins[0], lead, &[c, n])])
}

pub(super) fn shape_eigh(ins: &[AvalRef<'_>]) -> Result<Avals> {
    super::check_arity("eigh", ins, 1)?;
    let (lead, n) = super::square("eigh", "the operand", &ins[0])?;
    Ok(smallvec![aval(&ins[0], lead, &[n, n]), aval(&ins[0], lead, &[n])])
}

pub(super) fn shape_svd(full: bool, compute_uv: bool, ins: &[AvalRef<'_>]) -> Result<Avals> {
    super::check_arity("svd", ins, 1)?;
    let (lead, m, n) = matrices("svd", &ins[0])?;
    let k = m.min(n);
    let s = aval(&ins[0], lead, &[k]);
    if !compute_uv {
        return Ok(smallvec![s]);
    }
    let (uc, vr) = if full { (m, n) } else { (k, k) };
    Ok(smallvec![s, aval(&ins[0], lead, &[m, uc]), aval(&ins[0], lead, &[vr, n])])
}

// ---- lowering -------------------------------------------------------------------

/// The batch axes, `m`, `n` and the number of matrices of `a`.
fn stack(a: &Array) -> (&[usize], usize, usize, usize) {
    let d = a.shape().dims();
    let r = d.len();
    let lead = &d[..r - 2];
    (lead, d[r - 2], d[r - 1], lead.iter().product())
}

/// A CPU tensor of `lead` batch axes and then `last`.
fn result(buf: CpuBuffer, lead: &[usize], last: &[usize]) -> Tensor {
    let shape: Vec<usize> = lead.iter().chain(last).copied().collect();
    Tensor::from_array(Array::from_cpu(buf, Shape::from(shape)))
}

/// Runs a kernel on `a`'s f32 or f64 elements, its results as buffers.
macro_rules! by_dtype {
    ($a:expr, |$x:ident| $call:expr) => {
        match $a.dtype {
            DType::F32 => {
                let $x = elems::<f32>($a)?;
                let outs: Vec<Vec<f32>> = $call;
                outs.into_iter().map(CpuBuffer::F32).collect::<Vec<_>>()
            }
            _ => {
                let $x = elems::<f64>($a)?;
                let outs: Vec<Vec<f64>> = $call;
                outs.into_iter().map(CpuBuffer::F64).collect::<Vec<_>>()
            }
        }
    };
}

pub(super) fn lower_qr(full: bool, a: &Array) -> Result<Outs> {
    let (lead, m, n, batch) = stack(a);
    let c = if full { m } else { m.min(n) };
    let mut bufs = by_dtype!(a, |x| {
        let (q, r) = kernel::qr(&x, batch, m, n, full, Par::Rayon);
        vec![q, r]
    });
    let r = bufs.pop().expect("two buffers");
    let q = bufs.pop().expect("two buffers");
    Ok(smallvec![result(q, lead, &[m, c]), result(r, lead, &[c, n])])
}

pub(super) fn lower_eigh(a: &Array) -> Result<Outs> {
    let (lead, n, _, batch) = stack(a);
    let mut bufs = by_dtype!(a, |x| {
        let (v, w) = kernel::eigh(&x, batch, n, Par::Rayon);
        vec![v, w]
    });
    let w = bufs.pop().expect("two buffers");
    let v = bufs.pop().expect("two buffers");
    Ok(smallvec![result(v, lead, &[n, n]), result(w, lead, &[n])])
}

pub(super) fn lower_svd(full: bool, compute_uv: bool, a: &Array) -> Result<Outs> {
    let (lead, m, n, batch) = stack(a);
    let k = m.min(n);
    let mut bufs = by_dtype!(a, |x| {
        let (s, u, vt) = kernel::svd(&x, batch, m, n, full, compute_uv, Par::Rayon);
        vec![s, u, vt]
    });
    let vt = bufs.pop().expect("three buffers");
    let u = bufs.pop().expect("three buffers");
    let s = result(bufs.pop().expect("three buffers"), lead, &[k]);
    if !compute_uv {
        return Ok(smallvec![s]);
    }
    let (uc, vr) = if full { (m, n) } else { (k, k) };
    Ok(smallvec![s, result(u, lead, &[m, uc]), result(vt, lead, &[vr, n])])
}

// ---- rules ----------------------------------------------------------------------

/// A vector `[..., k]` spread over the matrices `[..., k, k]` (or
/// `shape`) along their columns (`along_rows` false: entry `(i, j)` is
/// `v_j`) or rows (`v_i`).
fn spread(v: &Tensor, shape: &Shape, along_rows: bool) -> Result<Tensor> {
    let r = shape.rank();
    let mut dims: Vec<usize> = (0..r - 2).collect();
    dims.push(if along_rows { r - 2 } else { r - 1 });
    lax::broadcast_in_dim(v, shape, &dims)
}

/// `1 / (v_j - v_i)` off the diagonal and 0 on it, for a vector `[..., k]`
/// of values `v` (`g` maps the pair, e.g. to `s_j² - s_i²`): infinite at
/// repeated values, as JAX's `Fmat`.
fn reciprocal_gaps(v: &Tensor, g: impl Fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let mut s = v.shape().dims().to_vec();
    let k = s[s.len() - 1];
    s.push(k);
    let shape = Shape::from(s);
    let gaps = g(&spread(v, &shape, false)?, &spread(v, &shape, true)?)?;
    let on = matrix_mask(&gaps, |d| lax::eq(d, &lax::zeros_like(d)?))?;
    let ones = lax::ones_like(&gaps)?;
    let inv = lax::div(&ones, &lax::select(&on, &ones, &gaps)?)?;
    lax::select(&on, &lax::zeros_like(&gaps)?, &inv)
}

/// The tangents of a square or tall QR factorization `q r` (`r` square)
/// for the input tangent `t`.
fn qr_tangents(q: &Tensor, r: &Tensor, t: &Tensor) -> Result<(Tensor, Tensor)> {
    // Ȧ R⁻¹, by the right solve with the upper triangular R
    let t_rinv = triangular_solve(r, t, spec(false, false, false))?;
    let c = bmm(&mt(q)?, &t_rinv)?;
    let low = keep_where(&c, lax::ge, 1)?;
    // Qᵀ Q̇: skew-symmetric
    let omega = lax::sub(&low, &mt(&low)?)?;
    let dq = lax::add(&bmm(q, &lax::sub(&omega, &c)?)?, &t_rinv)?;
    let dr = bmm(&lax::sub(&c, &omega)?, r)?;
    Ok((dq, dr))
}

pub(super) fn jvp_qr(full: bool, a: &Tensor, t: Option<&Tensor>) -> Result<(Outs, Tangents)> {
    let (q, r) = qr(a, full)?;
    let Some(t) = t else {
        return Ok((smallvec![q, r], smallvec![None, None]));
    };
    let s = a.shape();
    let rank = s.rank();
    let (m, n) = (s[rank - 2], s[rank - 1]);
    let cols = |x: &Tensor, lo: usize, hi: usize| lax::slice_axis(x, rank - 1, lo, hi);
    let (dq, dr) = if m < n {
        // A = [X Y] with X square: X = Q R_X and R = [R_X, Qᵀ Y]
        let (dq, drx) = qr_tangents(&q, &cols(&r, 0, m)?, &cols(t, 0, m)?)?;
        let dry = lax::add(&bmm(&mt(&dq)?, &cols(a, m, n)?)?, &bmm(&mt(&q)?, &cols(t, m, n)?)?)?;
        (dq, lax::concatenate(&[drx, dry], rank - 1)?)
    } else if !full || m == n {
        qr_tangents(&q, &r, t)?
    } else {
        return Err(Error::invalid(
            "qr",
            format!(
                "has no derivative here for the complete Q of a tall matrix ({m} x {n}): its last {} columns are \
                 an orthonormal completion that xform's sign convention does not make a smooth function of the \
                 matrix (JAX differentiates LAPACK's Householder completion); use full_matrices = false",
                m - n
            ),
        ));
    };
    Ok((smallvec![q, r], smallvec![Some(dq), Some(dr)]))
}

pub(super) fn jvp_eigh(a: &Tensor, t: Option<&Tensor>) -> Result<(Outs, Tangents)> {
    let (v, w) = eigh(a)?;
    let Some(t) = t else {
        return Ok((smallvec![v, w], smallvec![None, None]));
    };
    // the tangent of the symmetrized operand, seen in the eigenbasis
    let sym = lax::mul_scalar(&lax::add(t, &mt(t)?)?, 0.5)?;
    let inner = bmm(&bmm(&mt(&v)?, &sym)?, &v)?;
    let dw = diagonal(&inner)?;
    let f = reciprocal_gaps(&w, lax::sub)?;
    let dv = bmm(&v, &lax::mul(&f, &inner)?)?;
    Ok((smallvec![v, w], smallvec![Some(dv), Some(dw)]))
}

pub(super) fn jvp_svd(full: bool, compute_uv: bool, a: &Tensor, t: Option<&Tensor>) -> Result<(Outs, Tangents)> {
    let sh = a.shape();
    let rank = sh.rank();
    let (m, n) = (sh[rank - 2], sh[rank - 1]);
    // a square matrix's complete factors are its thin ones
    let thin = !compute_uv || !full || m == n;
    let (u, s, vt) = if thin { svd(a, false)? } else { svd(a, true)? };
    let outs: Outs = if compute_uv { smallvec![s.clone(), u.clone(), vt.clone()] } else { smallvec![s.clone()] };
    let Some(t) = t else {
        return Ok((outs.clone(), outs.iter().map(|_| None).collect()));
    };
    if !thin {
        return Err(Error::invalid(
            "svd",
            format!(
                "has no derivative for the complete U and Vᵀ of a {m} x {n} matrix: their columns past the first {} \
                 are any orthonormal completion (JAX refuses it too); use full_matrices = false",
                m.min(n)
            ),
        ));
    }
    let v = mt(&vt)?;
    let ds_mat = bmm(&bmm(&mt(&u)?, t)?, &v)?;
    let ds = diagonal(&ds_mat)?;
    if !compute_uv {
        return Ok((outs, smallvec![Some(ds)]));
    }
    let ksq = ds_mat.shape();
    let (s_col, s_row) = (spread(&s, &ksq, false)?, spread(&s, &ksq, true)?);
    // 1 / (s_j² - s_i²)
    let f = reciprocal_gaps(&s, |sj, si| lax::mul(&lax::add(sj, si)?, &lax::sub(sj, si)?))?;
    let ds_s = lax::mul(&ds_mat, &s_col)?;
    let s_ds = lax::mul(&s_row, &ds_mat)?;
    // (JAX's term in (dS - dSᴴ) on the diagonal vanishes for real matrices)
    let mut du = bmm(&u, &lax::mul(&f, &lax::add(&ds_s, &mt(&ds_s)?)?)?)?;
    let mut dv = bmm(&v, &lax::mul(&f, &lax::add(&s_ds, &mt(&s_ds)?)?)?)?;
    // the parts of Ȧ outside the spans of U and V
    let past_span = |x: &Tensor, q: &Tensor, qt: &Tensor| -> Result<Tensor> {
        let out = lax::sub(x, &bmm(q, &bmm(qt, x)?)?)?;
        lax::div(&out, &spread(&s, &out.shape(), false)?)
    };
    if m > n {
        du = lax::add(&du, &past_span(&bmm(t, &v)?, &u, &mt(&u)?)?)?;
    }
    if n > m {
        dv = lax::add(&dv, &past_span(&bmm(&mt(t)?, &u)?, &v, &vt)?)?;
    }
    Ok((outs, smallvec![Some(ds), Some(du), Some(mt(&dv)?)]))
}
