//! The inverse error function behind [`Key::normal`](super::Key::normal),
//! composed from `lax` primitives so it runs under every transform. It
//! follows XLA's expansion (the one `jax.random.normal` runs): M. Giles'
//! polynomials in `w = -log1p(-x²)` ("Approximating the erfinv function",
//! GPU Computing Gems, 2011), a degree-8 pair for f32 split at w = 5 and a
//! degree-22/18/16 triple for f64 split at w = 6.25 and 16, evaluated by
//! Horner's rule, with ±1 mapped to ±inf.
//!
//! How close to JAX: XLA on CPU contracts every Horner step into a fused
//! multiply-add, and its `log1p` is a Cephes rational below sqrt(2) - 1
//! and `log(1 + a)` above. Both are reproduced here (the FMAs exactly, see
//! [`horner`]), and XLA's f64 `log` is the C library's, so f64 erfinv (and
//! f64 normals) equal JAX's bit for bit. XLA's f32 `log` is its own
//! approximation, not the C library's, so an f32 erfinv whose argument
//! takes the `log(1 + a)` branch (|x| > 0.64) can differ by 1 or 2 ulps
//! (about 0.5% of f32 normals).

use crate::error::Result;
use crate::lax;
use crate::tensor::Tensor;
use xform_kernels::special::{
    ERFINV_F32_CENTRAL, ERFINV_F32_TAIL, ERFINV_F64_CENTRAL, ERFINV_F64_MID, ERFINV_F64_TAIL,
};
use xform_kernels::DType;

/// Coefficient `i` of a polynomial padded with leading zeros to `len` terms
/// (a leading zero leaves Horner's rule unchanged).
fn coef(c: &[f64], len: usize, i: usize) -> f64 {
    let pad = len - c.len();
    if i < pad {
        0.0
    } else {
        c[i - pad]
    }
}

/// `a * b + c` for f64 tensors, rounded once as XLA's contracted
/// multiply-add: Dekker's exact product (Veltkamp splits) and Knuth's
/// two-sum, then the small terms.
fn fma64(a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Tensor> {
    let split = |t: &Tensor| -> Result<(Tensor, Tensor)> {
        let m = lax::mul_scalar(t, 134_217_729.0)?; // 2^27 + 1
        let hi = lax::sub(&m, &lax::sub(&m, t)?)?;
        let lo = lax::sub(t, &hi)?;
        Ok((hi, lo))
    };
    let (ah, al) = split(a)?;
    let (bh, bl) = split(b)?;
    let p = lax::mul(a, b)?;
    // e = a * b - p exactly.
    let e = lax::sub(&lax::mul(&ah, &bh)?, &p)?;
    let e = lax::add(&e, &lax::mul(&ah, &bl)?)?;
    let e = lax::add(&e, &lax::mul(&al, &bh)?)?;
    let e = lax::add(&e, &lax::mul(&al, &bl)?)?;
    // s + t = p + c exactly.
    let s = lax::add(&p, c)?;
    let v = lax::sub(&s, &p)?;
    let t = lax::add(&lax::sub(&p, &lax::sub(&s, &v)?)?, &lax::sub(c, &v)?)?;
    lax::add(&s, &lax::add(&t, &e)?)
}

/// An f64 constant shaped like `x`.
fn full64(x: &Tensor, v: f64) -> Result<Tensor> {
    lax::full(&x.shape(), v, DType::F64, x.device())
}

/// Horner's rule as XLA runs it: every step `p * x + c` one fused
/// multiply-add rounded to `x`'s dtype (f32 or f64). `coef(i)` is the i-th
/// coefficient (highest first), an f64 tensor shaped like `x` holding values
/// of `x`'s dtype. For f32 the step is exact in f64 and rounds to f32 once
/// (a double rounding only when the f64 sum lands on an f32 midpoint).
fn horner(x: &Tensor, n: usize, coef: impl Fn(usize) -> Result<Tensor>) -> Result<Tensor> {
    let mut p = coef(0)?;
    if x.dtype() == DType::F64 {
        for i in 1..n {
            p = fma64(&p, x, &coef(i)?)?;
        }
        return Ok(p);
    }
    let x64 = lax::convert(x, DType::F64)?;
    for i in 1..n {
        let s = lax::add(&lax::mul(&p, &x64)?, &coef(i)?)?;
        p = lax::convert(&s, DType::F32)?;
        if i + 1 < n {
            p = lax::convert(&p, DType::F64)?;
        }
    }
    Ok(p)
}

/// Cephes' rational approximation of log1p on |a| < sqrt(2) - 1, as XLA
/// writes it: numerator and denominator by Horner's rule (highest first).
#[allow(clippy::excessive_precision)]
const LOG1P_NUM: [f64; 7] = [
    4.5270000862445199635215e-5,
    4.9854102823193375972212e-1,
    6.5787325942061044846969e0,
    2.9911919328553073277375e1,
    6.0949667980987787057556e1,
    5.7112963590585538103336e1,
    2.0039553499201281259648e1,
];
#[allow(clippy::excessive_precision)]
const LOG1P_DEN: [f64; 7] = [
    1.0,
    1.5062909083469192043167e1,
    8.3047565967967209469434e1,
    2.2176239823732856465394e2,
    3.0909872225312059774938e2,
    2.1642788614495947685003e2,
    6.0118660497603843919306e1,
];

/// Where XLA's `log1p` switches to `log(1 + a)`: sqrt(2) - 1.
#[allow(clippy::excessive_precision)]
const LOG1P_SMALL: f64 = 0.41421356237309504880;

/// XLA's `log1p`: the Cephes rational for |a| < sqrt(2) - 1 (with fused
/// Horner steps), else `log(1 + a)`. With the C library's `log` this is
/// XLA's f64 `log1p` exactly; XLA's f32 `log` is its own approximation.
fn log1p(a: &Tensor) -> Result<Tensor> {
    // XLA's constants, rounded to the operand's type.
    let typed = |c: f64| if a.dtype() == DType::F32 { c as f32 as f64 } else { c };
    let poly = |c: &[f64]| horner(a, c.len(), |i| full64(a, typed(c[i])));
    let a2 = lax::mul(a, a)?;
    let r = lax::div(&poly(&LOG1P_NUM)?, &poly(&LOG1P_DEN)?)?;
    let s = lax::mul(&lax::mul(a, &a2)?, &r)?;
    // -0.5 * a2 is exact, so the contracted form rounds as this one does.
    let small = lax::add(a, &lax::add(&lax::mul_scalar(&a2, -0.5)?, &s)?)?;
    let large = lax::log(&lax::add_scalar(a, 1.0)?)?;
    let is_small = lax::lt(&lax::abs(a)?, &lax::full_like(a, LOG1P_SMALL)?)?;
    lax::select(&is_small, &small, &large)
}

/// erfinv of an f32 or f64 tensor, elementwise.
pub(super) fn erf_inv(x: &Tensor) -> Result<Tensor> {
    let dtype = x.dtype();
    // w = -log1p(-x * x)
    let w = lax::neg(&log1p(&lax::neg(&lax::mul(x, x)?)?)?)?;
    let full = |v: f64| lax::full_like(&w, v);
    let sqrt_w = lax::sqrt(&w)?;
    let p = if dtype == DType::F32 {
        let central = lax::lt(&w, &full(5.0)?)?;
        let t = lax::select(&central, &lax::sub(&w, &full(2.5)?)?, &lax::sub(&sqrt_w, &full(3.0)?)?)?;
        horner(&t, ERFINV_F32_CENTRAL.len(), |i| {
            lax::select(&central, &full64(&w, ERFINV_F32_CENTRAL[i] as f64)?, &full64(&w, ERFINV_F32_TAIL[i] as f64)?)
        })?
    } else {
        let central = lax::lt(&w, &full(6.25)?)?;
        let mid = lax::lt(&w, &full(16.0)?)?;
        let t = lax::select(
            &central,
            &lax::sub(&w, &full(3.125)?)?,
            &lax::select(&mid, &lax::sub(&sqrt_w, &full(3.25)?)?, &lax::sub(&sqrt_w, &full(5.0)?)?)?,
        )?;
        let n = ERFINV_F64_CENTRAL.len();
        horner(&t, n, |i| {
            let tail = lax::select(&mid, &full(coef(&ERFINV_F64_MID, n, i))?, &full(coef(&ERFINV_F64_TAIL, n, i))?)?;
            lax::select(&central, &full(ERFINV_F64_CENTRAL[i])?, &tail)
        })?
    };
    let r = lax::mul(&p, x)?;
    // erfinv(±1) = ±inf, where the polynomial is indeterminate.
    let edge = lax::eq(&lax::abs(x)?, &lax::full_like(x, 1.0)?)?;
    lax::select(&edge, &lax::mul(x, &lax::full_like(x, f64::INFINITY)?)?, &r)
}
