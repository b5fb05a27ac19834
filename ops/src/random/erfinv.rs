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
use xform_kernels::DType;

/// Giles' single-precision coefficients for w < 5 (in `w - 2.5`), highest first.
#[allow(clippy::excessive_precision)]
const F32_CENTRAL: [f32; 9] = [
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
];

/// Giles' single-precision coefficients for w >= 5 (in `sqrt(w) - 3`).
#[allow(clippy::excessive_precision)]
const F32_TAIL: [f32; 9] = [
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
];

/// Giles' double-precision coefficients for w < 6.25 (in `w - 3.125`).
#[allow(clippy::excessive_precision)]
const F64_CENTRAL: [f64; 23] = [
    -3.6444120640178196996e-21,
    -1.685059138182016589e-19,
    1.2858480715256400167e-18,
    1.115787767802518096e-17,
    -1.333171662854620906e-16,
    2.0972767875968561637e-17,
    6.6376381343583238325e-15,
    -4.0545662729752068639e-14,
    -8.1519341976054721522e-14,
    2.6335093153082322977e-12,
    -1.2975133253453532498e-11,
    -5.4154120542946279317e-11,
    1.051212273321532285e-09,
    -4.1126339803469836976e-09,
    -2.9070369957882005086e-08,
    4.2347877827932403518e-07,
    -1.3654692000834678645e-06,
    -1.3882523362786468719e-05,
    0.0001867342080340571352,
    -0.00074070253416626697512,
    -0.0060336708714301490533,
    0.24015818242558961693,
    1.6536545626831027356,
];

/// For 6.25 <= w < 16 (in `sqrt(w) - 3.25`).
#[allow(clippy::excessive_precision)]
const F64_MID: [f64; 19] = [
    2.2137376921775787049e-09,
    9.0756561938885390979e-08,
    -2.7517406297064545428e-07,
    1.8239629214389227755e-08,
    1.5027403968909827627e-06,
    -4.013867526981545969e-06,
    2.9234449089955446044e-06,
    1.2475304481671778723e-05,
    -4.7318229009055733981e-05,
    6.8284851459573175448e-05,
    2.4031110387097893999e-05,
    -0.0003550375203628474796,
    0.00095328937973738049703,
    -0.0016882755560235047313,
    0.0024914420961078508066,
    -0.0037512085075692412107,
    0.005370914553590063617,
    1.0052589676941592334,
    3.0838856104922207635,
];

/// For w >= 16 (in `sqrt(w) - 5`).
#[allow(clippy::excessive_precision)]
const F64_TAIL: [f64; 17] = [
    -2.7109920616438573243e-11,
    -2.5556418169965252055e-10,
    1.5076572693500548083e-09,
    -3.7894654401267369937e-09,
    7.6157012080783393804e-09,
    -1.4960026627149240478e-08,
    2.9147953450901080826e-08,
    -6.7711997758452339498e-08,
    2.2900482228026654717e-07,
    -9.9298272942317002539e-07,
    4.5260625972231537039e-06,
    -1.9681778105531670567e-05,
    7.5995277030017761139e-05,
    -0.00021503011930044477347,
    -0.00013871931833623122026,
    1.0103004648645343977,
    4.8499064014085844221,
];

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
        horner(&t, F32_CENTRAL.len(), |i| {
            lax::select(&central, &full64(&w, F32_CENTRAL[i] as f64)?, &full64(&w, F32_TAIL[i] as f64)?)
        })?
    } else {
        let central = lax::lt(&w, &full(6.25)?)?;
        let mid = lax::lt(&w, &full(16.0)?)?;
        let t = lax::select(
            &central,
            &lax::sub(&w, &full(3.125)?)?,
            &lax::select(&mid, &lax::sub(&sqrt_w, &full(3.25)?)?, &lax::sub(&sqrt_w, &full(5.0)?)?)?,
        )?;
        let n = F64_CENTRAL.len();
        horner(&t, n, |i| {
            let tail = lax::select(&mid, &full(coef(&F64_MID, n, i))?, &full(coef(&F64_TAIL, n, i))?)?;
            lax::select(&central, &full(F64_CENTRAL[i])?, &tail)
        })?
    };
    let r = lax::mul(&p, x)?;
    // erfinv(±1) = ±inf, where the polynomial is indeterminate.
    let edge = lax::eq(&lax::abs(x)?, &lax::full_like(x, 1.0)?)?;
    lax::select(&edge, &lax::mul(x, &lax::full_like(x, f64::INFINITY)?)?, &r)
}
