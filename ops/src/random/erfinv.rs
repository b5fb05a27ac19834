//! XLA's expansion of the inverse error function written in `lax`
//! operations, step for step as XLA's CPU code rounds (every Horner step a
//! fused multiply-add, emulated exactly; Cephes' `log1p`): the reference
//! that the `erf_inv_xla` primitive's scalar kernel
//! (`xform_kernels::special::erfinv_xla`) must equal bit for bit. The
//! normal sampler once ran this composition (about 100 passes over the
//! samples); it now runs the one-pass primitive.

use crate::error::Result;
use crate::lax;
use crate::tensor::Tensor;
use xform_kernels::special::{
    ERFINV_F32_CENTRAL, ERFINV_F32_TAIL, ERFINV_F64_CENTRAL, ERFINV_F64_MID, ERFINV_F64_TAIL, LOG1P_DEN, LOG1P_NUM,
    LOG1P_SMALL,
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
fn erf_inv(x: &Tensor) -> Result<Tensor> {
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

/// The primitive's kernel against the composition, bit for bit: uniform
/// samples as the sampler draws them, points across every branch, and the
/// edges (±0, ±1, past ±1, NaN).
#[test]
fn erf_inv_xla_kernel_equals_the_lax_expansion() {
    use crate::random::Key;
    let edges = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        1.5,
        -2.0,
        f64::NAN,
        0.4,
        0.64,
        0.9,
        0.99,
        0.999_999,
        -0.999_999_999,
        1e-30,
        0.414_213_56,
    ];
    for dtype in [DType::F32, DType::F64] {
        let lo = if dtype == DType::F32 { -1.0 + 2f64.powi(-24) } else { -1.0 + 2f64.powi(-53) };
        let u = Key::new(7).uniform_range([200_000], lo, 1.0, dtype);
        // values near ±1 reach the tails (w past 5, 6.25 and 16)
        let tails =
            lax::sub(&lax::full_like(&u, 1.0).unwrap(), &lax::mul_scalar(&lax::abs(&u).unwrap(), 1e-9).unwrap())
                .unwrap();
        let edge = lax::convert(&Tensor::from_vec(edges.to_vec(), [edges.len()]), dtype).unwrap();
        for x in [u, tails, edge] {
            let want = erf_inv(&x).unwrap();
            let got = lax::erf_inv_xla(&x).unwrap();
            let (w, g) = (lax::convert(&want, DType::F64).unwrap(), lax::convert(&got, DType::F64).unwrap());
            for (i, (a, b)) in w.to_vec::<f64>().iter().zip(g.to_vec::<f64>()).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{dtype:?} element {i}: {a:e} vs {b:e}"
                );
            }
        }
    }
}
