//! `randint`, bit for bit JAX's `_randint`: two n-bit words per element
//! (from the two halves of `split(key)`), `((hi % span) * (2^n % span) +
//! lo % span) % span` in wrapping unsigned n-bit arithmetic, plus the
//! clipped `low`. 64-bit words live in i64 tensors (same bits; add and mul
//! wrap alike), with the unsigned remainder built from signed ops.

use super::{konst, Key};
use crate::error::{Error, Result};
use crate::lax;
use crate::tensor::Tensor;
use xform_kernels::{DType, Shape};

pub(super) fn randint(key: &Key, shape: &Shape, low: i64, high: i64, dtype: DType) -> Result<Tensor> {
    let (dmin, dmax, nbits): (i128, i128, u32) = match dtype {
        DType::I32 => (i32::MIN as i128, i32::MAX as i128, 32),
        DType::U32 => (0, u32::MAX as i128, 32),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128, 64),
        other => return Err(Error::dtype("randint", "needs an integer dtype", &[other])),
    };
    let (low, high) = (low as i128, high as i128);
    if high <= low || high <= dmin || low > dmax {
        return Err(Error::invalid(
            "randint",
            format!("no {dtype} value lies in [{low}, {high}) (needs low < high, within the dtype's range)"),
        ));
    }
    // JAX clips both bounds to the dtype; a high past the dtype's maximum
    // makes the span one larger (2^n wraps to 0: the remainders keep every bit).
    let out_of_range = high > dmax;
    let (lo, hi) = (low.clamp(dmin, dmax), high.clamp(dmin, dmax));
    let modulus = 1u128 << nbits;
    let mut span = if hi <= lo { 1 } else { (hi - lo) as u128 % modulus };
    if out_of_range && hi > lo {
        span = (span + 1) % modulus;
    }
    let urem = |x: u128| if span == 0 { x } else { x % span };
    let half = urem(1u128 << (nbits / 2));
    let multiplier = urem(half * half % modulus);

    let keys = key.try_split_tensor(2)?;
    let k1 = key.split_key(&keys, 0);
    let k2 = key.split_key(&keys, 1);
    let dev = key.device();
    if nbits == 32 {
        let c = |v: u128| konst(v as u32, shape, dev);
        let higher = k1.bits32("randint", shape)?;
        let lower = k2.bits32("randint", shape)?;
        let s = c(span)?;
        let off = lax::add(&lax::mul(&lax::rem(&higher, &s)?, &c(multiplier)?)?, &lax::rem(&lower, &s)?)?;
        let off = lax::convert(&lax::rem(&off, &s)?, dtype)?;
        return match dtype {
            DType::U32 => lax::add(&off, &konst(lo as u32, shape, dev)?),
            _ => lax::add(&off, &konst(lo as i32, shape, dev)?),
        };
    }
    let higher = bits64(&k1, shape)?;
    let lower = bits64(&k2, shape)?;
    let span = span as u64;
    let off = lax::add(
        &lax::mul(&urem64(&higher, span)?, &konst(multiplier as u64 as i64, shape, dev)?)?,
        &urem64(&lower, span)?,
    )?;
    lax::add(&urem64(&off, span)?, &konst(lo as i64, shape, dev)?)
}

/// JAX's 64-bit random words `(y0 << 32) | y1`, as the bits of an i64.
fn bits64(key: &Key, shape: &Shape) -> Result<Tensor> {
    let (y0, y1) = key.bits64("randint", shape)?;
    let hi = lax::mul(&lax::convert(&y0, DType::I64)?, &konst(1i64 << 32, shape, key.device())?)?;
    lax::add(&hi, &lax::convert(&y1, DType::I64)?)
}

/// `x % s` for `x` holding the bits of a u64 and a constant u64 `s`
/// (`s = 0` leaves `x`, as XLA's remainder does).
fn urem64(x: &Tensor, s: u64) -> Result<Tensor> {
    let sh = x.shape();
    let c = |v: i64| konst(v, &sh, x.device());
    if s == 0 {
        return Ok(x.clone());
    }
    if s.is_power_of_two() {
        return lax::and(x, &c((s - 1) as i64)?);
    }
    if s > 1 << 63 {
        // x < s unsigned: one subtraction reduces it. Compare with the sign
        // bit flipped, which orders u64 bits as i64.
        let flip = |t: &Tensor| lax::add(t, &c(i64::MIN)?);
        let below = lax::lt(&flip(x)?, &c((s as i64).wrapping_add(i64::MIN))?)?;
        return lax::select(&below, x, &lax::sub(x, &c(s as i64)?)?);
    }
    // s < 2^63: a negative x stands for x + 2^64, so add 2^64 mod s to the
    // signed remainder (in (-s, 0]) and bring the sum into [0, s).
    let s_i = s as i64;
    let r = lax::rem(x, &c(s_i)?)?;
    let wrap = ((1u128 << 64) % s as u128) as i64;
    let zero = c(0)?;
    let t = lax::add(&r, &lax::select(&lax::lt(x, &zero)?, &c(wrap)?, &zero)?)?;
    lax::select(&lax::lt(&t, &zero)?, &lax::add(&t, &c(s_i)?)?, &t)
}
