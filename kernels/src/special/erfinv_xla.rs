//! XLA's expansion of the inverse error function, the one `jax.lax.erf_inv`
//! and `jax.random.normal` run: M. Giles' polynomials in
//! `w = -log1p(-x²)`, a degree-8 pair for f32 split at w = 5 and a
//! degree-22/18/16 triple for f64 split at w = 6.25 and 16, with ±1 mapped
//! to ±inf. Every step rounds as XLA's CPU code does: each Horner step is
//! one contracted multiply-add, and `log1p` is Cephes' rational below
//! sqrt(2) - 1 and `log(1 + a)` above. With the C library's `log` (XLA's
//! f64 `log`) the f64 version equals JAX's bit for bit; XLA's f32 `log`
//! is its own approximation, so an f32 value whose argument takes the
//! `log(1 + a)` branch (|x| > 0.64) can differ from JAX's by 1 or 2 ulps.
//!
//! [`erfinv`](super::erfinv) is the accurate one; this one loses accuracy
//! within about 1e-8 of ±1, where `x²` rounds (as XLA's does), and exists
//! so that xform's normal samples are JAX's. The fused multiply-adds are
//! emulated (Dekker's product, Knuth's sum) rather than `f64::mul_add`, so
//! the result is the same on every target; the ops crate checks this
//! function against the same expansion written in `lax` operations, bit
//! for bit.

use super::{ERFINV_F32_CENTRAL, ERFINV_F32_TAIL, ERFINV_F64_CENTRAL, ERFINV_F64_MID, ERFINV_F64_TAIL};

/// Cephes' rational approximation of log1p on |a| < sqrt(2) - 1, as XLA
/// writes it: numerator and denominator by Horner's rule (highest first).
#[allow(clippy::excessive_precision)]
pub const LOG1P_NUM: [f64; 7] = [
    4.5270000862445199635215e-5,
    4.9854102823193375972212e-1,
    6.5787325942061044846969e0,
    2.9911919328553073277375e1,
    6.0949667980987787057556e1,
    5.7112963590585538103336e1,
    2.0039553499201281259648e1,
];

/// The denominator of [`LOG1P_NUM`]'s rational.
#[allow(clippy::excessive_precision)]
pub const LOG1P_DEN: [f64; 7] = [
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
pub const LOG1P_SMALL: f64 = 0.41421356237309504880;

/// `a * b + c` rounded once (in all but rare double-rounding cases) as
/// XLA's contracted multiply-add: Dekker's exact product (Veltkamp splits)
/// and Knuth's two-sum, then the small terms.
#[inline]
pub fn fma_emulated(a: f64, b: f64, c: f64) -> f64 {
    let split = |t: f64| {
        let m = t * 134_217_729.0; // 2^27 + 1
        let hi = m - (m - t);
        (hi, t - hi)
    };
    let (ah, al) = split(a);
    let (bh, bl) = split(b);
    let p = a * b;
    // e = a * b - p exactly
    let e = ah * bh - p;
    let e = e + ah * bl;
    let e = e + al * bh;
    let e = e + al * bl;
    // s + t = p + c exactly
    let s = p + c;
    let v = s - p;
    let t = (p - (s - v)) + (c - v);
    s + (t + e)
}

/// Horner's rule over f64 with emulated fused steps (highest first).
#[inline]
fn horner_f64(x: f64, n: usize, coef: impl Fn(usize) -> f64) -> f64 {
    (1..n).fold(coef(0), |p, i| fma_emulated(p, x, coef(i)))
}

/// Horner's rule over f32 with fused steps: each step exact in f64 (an f32
/// product is exact there) and rounded to f32 once.
#[inline]
fn horner_f32(x: f32, n: usize, coef: impl Fn(usize) -> f64) -> f32 {
    (1..n).fold(coef(0) as f32, |p, i| (p as f64 * x as f64 + coef(i)) as f32)
}

/// XLA's f64 `log1p`.
#[inline]
fn log1p_f64(a: f64) -> f64 {
    if a.abs() < LOG1P_SMALL {
        let a2 = a * a;
        let r = horner_f64(a, 7, |i| LOG1P_NUM[i]) / horner_f64(a, 7, |i| LOG1P_DEN[i]);
        // -0.5 * a2 is exact, so the contracted form rounds as this one does
        a + (a2 * -0.5 + (a * a2) * r)
    } else {
        (a + 1.0).ln()
    }
}

/// XLA's f32 `log1p` (its constants rounded to f32), with the C library's
/// `logf` in place of XLA's own f32 `log`.
#[inline]
fn log1p_f32(a: f32) -> f32 {
    if a.abs() < LOG1P_SMALL as f32 {
        let a2 = a * a;
        let num = horner_f32(a, 7, |i| LOG1P_NUM[i] as f32 as f64);
        let den = horner_f32(a, 7, |i| LOG1P_DEN[i] as f32 as f64);
        a + (a2 * -0.5 + (a * a2) * (num / den))
    } else {
        (a + 1.0).ln()
    }
}

/// XLA's f64 erfinv (`jax.lax.erf_inv` on the CPU, bit for bit).
pub fn erfinv_xla(x: f64) -> f64 {
    if x.abs() == 1.0 {
        return x * f64::INFINITY;
    }
    let w = -log1p_f64(-(x * x));
    let n = ERFINV_F64_CENTRAL.len();
    // the shorter polynomials padded with leading zeros, as XLA pads them
    let padded = |c: &[f64], i: usize| if i < n - c.len() { 0.0 } else { c[i - (n - c.len())] };
    let p = if w < 6.25 {
        horner_f64(w - 3.125, n, |i| ERFINV_F64_CENTRAL[i])
    } else if w < 16.0 {
        horner_f64(w.sqrt() - 3.25, n, |i| padded(&ERFINV_F64_MID, i))
    } else {
        horner_f64(w.sqrt() - 5.0, n, |i| padded(&ERFINV_F64_TAIL, i))
    };
    p * x
}

/// XLA's f32 erfinv (up to its f32 `log`, see the module's note).
pub fn erfinv_xla_f32(x: f32) -> f32 {
    if x.abs() == 1.0 {
        return x * f32::INFINITY;
    }
    let w = -log1p_f32(-(x * x));
    let n = ERFINV_F32_CENTRAL.len();
    let p = if w < 5.0 {
        horner_f32(w - 2.5, n, |i| ERFINV_F32_CENTRAL[i] as f64)
    } else {
        horner_f32(w.sqrt() - 3.0, n, |i| ERFINV_F32_TAIL[i] as f64)
    };
    p * x
}
