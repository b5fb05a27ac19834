//! Counter-based random numbers from explicit keys (as in JAX): a [`Key`]
//! is a value (a `u32[2]` tensor), every draw is a pure function of it,
//! so `vmap` over keys gives exactly the per-key streams of a loop.
//!
//! The streams are JAX 0.10's: the Threefry-2x32 key of
//! `jax.random.key(seed)`, by default with `jax_threefry_partitionable =
//! True` (JAX's default since 0.5). Element `i` of a draw of any shape
//! hashes the 64-bit counter `i` (as the words `(i >> 32, i & 0xffffffff)`)
//! under the key; `split` and `fold_in` hash the key index or the data the
//! same way. [`Key::with_partitionable`]`(false)` gives the streams of
//! `jax_threefry_partitionable = False` (the default of older JAX), where a
//! draw of `m` 32-bit words hashes the counters `0..m` in two halves (see
//! NOTE: [original threefry layout]); the key carries the choice, so
//! `split`, `fold_in` and every sampler follow it, under every transform.
//! Every draw is composed from `lax` primitives around the `threefry2x32`
//! primitive, so it runs under every transform and on every device. What
//! matches JAX bit for bit and what within ulps is stated on each sampler
//! (and in the README).
//!
//! NOTE: [original threefry layout] JAX's `_threefry_random_bits_original`
//! and `_threefry_split_original` (jax/_src/random/threefry2x32.py) apply
//! `threefry_2x32(key, iota(m))`: the counters `0..m`, padded with one 0 if
//! `m` is odd, are cut into halves `x0 = [0, h)` and `x1 = [h, 2h)`
//! (`h = ceil(m / 2)`), hashed pairwise, and the two output words
//! concatenated (`y0 ++ y1`, the padding's word dropped). A draw of `n`
//! 32-bit values takes `m = n` words; of 64-bit values `m = 2n`, the high
//! halves first (`y[:n] << 32 | y[n:]`); of 16- or 8-bit values `m = ceil(n
//! / 2)` or `ceil(n / 4)`, each word giving 2 or 4 values from its low bits
//! up. `split(n)` takes `m = 2n` words as `n` pairs. `fold_in` is the same
//! in both layouts (the counter pair `(0, data)`).

#[cfg(test)]
mod erfinv;
mod randint;

use crate::array::{Array, Device};
use crate::error::{Error, OrRaise, Result};
use crate::lax;
use crate::methods::norm_axis;
use crate::tensor::Tensor;
use xform_kernels::{CpuBuffer, DType, Element, Shape};

/// A random key: two u32 words (or, under vmap, a batch of them), and the
/// layout of its streams (JAX's `jax_threefry_partitionable`, true unless
/// [`Key::with_partitionable`] says otherwise).
#[derive(Clone, Debug)]
pub struct Key {
    data: Tensor,
    partitionable: bool,
}

/// A scalar constant of exactly `v` (no trip through f64), broadcast to `shape`.
fn konst<T: Element>(v: T, shape: &Shape, device: Device) -> Result<Tensor> {
    let a = Array::from_cpu(CpuBuffer::from_vec(vec![v]), Shape::scalar()).to_device(device)?;
    lax::broadcast_in_dim(&Tensor::from_array(a), shape, &[])
}

/// Bitwise xor of two integer tensors: `(a | b) & !(a & b)`.
fn xor(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    lax::and(&lax::or(a, b)?, &lax::not(&lax::and(a, b)?)?)
}

/// `v` rounded to `dtype` (f32 arithmetic for the half types, as XLA does).
fn round_to(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => xform_kernels::half::f16::from_f64(v as f32 as f64).to_f64(),
        DType::BF16 => xform_kernels::half::bf16::from_f64(v as f32 as f64).to_f64(),
        _ => v,
    }
}

/// `x * a + b` for an f64 tensor and constants, rounded as one fused
/// multiply-add (but for the rare case where the low-order sum decides a
/// tie): Dekker's exact product `x * a = p + e` (Veltkamp splits), then
/// Knuth's two-sum of `p + b`, then the small terms.
fn fma_f64(x: &Tensor, a: f64, b: f64) -> Result<Tensor> {
    const SPLIT: f64 = 134_217_729.0; // 2^27 + 1
    let split_host = |v: f64| {
        let c = v * SPLIT;
        let hi = c - (c - v);
        (hi, v - hi)
    };
    let (ah, al) = split_host(a);
    let c = lax::mul_scalar(x, SPLIT)?;
    let xh = lax::sub(&c, &lax::sub(&c, x)?)?;
    let xl = lax::sub(x, &xh)?;
    let p = lax::mul_scalar(x, a)?;
    // e = ((xh*ah - p) + xh*al + xl*ah) + xl*al, exactly x*a - p.
    let e = lax::sub(&lax::mul_scalar(&xh, ah)?, &p)?;
    let e = lax::add(&e, &lax::mul_scalar(&xh, al)?)?;
    let e = lax::add(&e, &lax::mul_scalar(&xl, ah)?)?;
    let e = lax::add(&e, &lax::mul_scalar(&xl, al)?)?;
    // s + t = p + b exactly.
    let s = lax::add_scalar(&p, b)?;
    let bb = lax::sub(&s, &p)?;
    let t = lax::add(&lax::sub(&p, &lax::sub(&s, &bb)?)?, &lax::add_scalar(&lax::neg(&bb)?, b)?)?;
    lax::add(&s, &lax::add(&t, &e)?)
}

impl Key {
    /// The key for an integer seed (JAX's `jax.random.key(seed)` and
    /// `PRNGKey(seed)`: the words are the high and low halves of the seed).
    pub fn new(seed: u64) -> Key {
        Key { data: Tensor::from_vec(vec![(seed >> 32) as u32, seed as u32], [2]), partitionable: true }
    }

    /// Wraps a `u32[2]` tensor (for example one row of [`Key::split_tensor`])
    /// as a partitionable key; `.with_partitionable(false)` makes it draw
    /// the original streams (a row of a non-partitionable key's
    /// `split_tensor` is one of those).
    ///
    /// # Panics
    /// If the tensor is not `u32[2]`.
    #[track_caller]
    pub fn from_tensor(t: Tensor) -> Key {
        if t.dtype() != DType::U32 || *t.shape() != [2] {
            Error::shape(
                "Key::from_tensor",
                format!("a key is a uint32 tensor of shape [2], got {}", t.dtype()),
                &[&t.shape()],
            )
            .raise();
        }
        Key { data: t, partitionable: true }
    }

    /// The same key words drawing the streams of JAX's
    /// `jax_threefry_partitionable = partitionable`: `true` (every key's
    /// default, JAX's since 0.5) or `false`, the default of older JAX, for
    /// reproducing numbers made with it (NOTE: [original threefry layout]).
    /// The keys that `split` and `fold_in` derive keep the choice.
    ///
    /// ```
    /// use xform_ops::Key;
    /// // jax.config.update('jax_threefry_partitionable', False)
    /// // jax.random.bits(jax.random.key(0), (3,), jnp.uint32)
    /// let key = Key::new(0).with_partitionable(false);
    /// assert_eq!(key.bits([3]).to_vec::<u32>(), [4146024105, 1351547692, 2718843009]);
    /// assert!(!key.split(2)[1].is_partitionable());
    /// ```
    pub fn with_partitionable(self, partitionable: bool) -> Key {
        Key { partitionable, ..self }
    }

    /// Whether the key draws JAX's partitionable streams (see
    /// [`Key::with_partitionable`]).
    pub fn is_partitionable(&self) -> bool {
        self.partitionable
    }

    /// The `u32[2]` tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.data
    }

    /// A key of the same layout over the words `t`.
    fn derived(&self, t: Tensor) -> Key {
        Key { data: t, partitionable: self.partitionable }
    }

    fn device(&self) -> Device {
        self.data.device()
    }

    /// The two key words, each broadcast to `shape`.
    fn words(&self, shape: &Shape) -> Result<(Tensor, Tensor)> {
        let word = |i: usize| -> Result<Tensor> {
            let w = lax::reshape(&lax::slice_axis(&self.data, 0, i, i + 1)?, &Shape::scalar())?;
            lax::broadcast_in_dim(&w, shape, &[])
        };
        Ok((word(0)?, word(1)?))
    }

    /// JAX's `threefry_2x32(key, iota(m))`, the `m` words of the original
    /// layout (NOTE: [original threefry layout]), as a `u32[m]`.
    fn words_original(&self, op: &str, m: usize) -> Result<Tensor> {
        if m as u64 > u32::MAX as u64 {
            // JAX hashes such draws in blocks under split keys; no such tensor fits in memory.
            return Err(Error::shape(
                op,
                "a draw from a non-partitionable key takes at most 2^32 - 1 32-bit words",
                &[&Shape::from([m])],
            ));
        }
        let dev = self.device();
        let h = m.div_ceil(2);
        let half = Shape::from([h]);
        let x0 = lax::iota(DType::U32, &half, 0, dev)?;
        let mut x1 = lax::add(&x0, &konst(h as u32, &half, dev)?)?;
        if m % 2 == 1 {
            // the padding counter 0 in place of m
            x1 = lax::concatenate(&[lax::slice_axis(&x1, 0, 0, h - 1)?, konst(0u32, &Shape::from([1]), dev)?], 0)?;
        }
        let (k0, k1) = self.words(&half)?;
        let (y0, y1) = lax::threefry2x32(&k0, &k1, &x0, &x1)?;
        lax::slice_axis(&lax::concatenate(&[y0, y1], 0)?, 0, 0, m)
    }

    /// Threefry of the row-major counters `0..numel` of `shape` (JAX's
    /// partitionable `iota_2x32_shape`): the two output words.
    fn hash(&self, op: &str, shape: &Shape) -> Result<(Tensor, Tensor)> {
        let n = shape.numel();
        if n as u64 > u32::MAX as u64 + 1 {
            // The high counter word would be nonzero; no such tensor fits in memory.
            return Err(Error::shape(op, "a random draw has at most 2^32 elements", &[shape]));
        }
        let hi = konst(0u32, shape, self.device())?;
        let lo = lax::reshape(&lax::iota(DType::U32, &Shape::from([n]), 0, self.device())?, shape)?;
        let (k0, k1) = self.words(shape)?;
        lax::threefry2x32(&k0, &k1, &hi, &lo)
    }

    /// `n` new independent keys as a `u32[n, 2]` tensor (vmap over its rows);
    /// JAX's `jax.random.split(key, n)`.
    pub fn split_tensor(&self, n: usize) -> Tensor {
        self.try_split_tensor(n).or_raise()
    }

    fn try_split_tensor(&self, n: usize) -> Result<Tensor> {
        if !self.partitionable {
            let words = self.words_original("split", n.saturating_mul(2))?;
            return lax::reshape(&words, &Shape::from([n, 2]));
        }
        let (y0, y1) = self.hash("split", &Shape::from([n]))?;
        lax::concatenate(&[lax::expand_dims(&y0, 1)?, lax::expand_dims(&y1, 1)?], 1)
    }

    /// `n` new independent keys (the rows of [`Key::split_tensor`], of this
    /// key's layout).
    pub fn split(&self, n: usize) -> Vec<Key> {
        let t = self.split_tensor(n);
        (0..n as isize).map(|i| self.derived(t.index(i))).collect()
    }

    /// Row `i` of `split_tensor(n)` as a key of this key's layout.
    fn split_key(&self, keys: &Tensor, i: isize) -> Key {
        self.derived(keys.index(i))
    }

    /// A new key derived from this one and `data` (JAX's `fold_in`; for a
    /// partitionable key, equal to row `data` of `split_tensor(n)` for any
    /// `n > data`).
    pub fn fold_in(&self, data: u32) -> Key {
        self.try_fold_in(data).or_raise()
    }

    fn try_fold_in(&self, data: u32) -> Result<Key> {
        let s = Shape::from([1]);
        let hi = konst(0u32, &s, self.device())?;
        let lo = konst(data, &s, self.device())?;
        let (k0, k1) = self.words(&s)?;
        let (y0, y1) = lax::threefry2x32(&k0, &k1, &hi, &lo)?;
        Ok(self.derived(lax::concatenate(&[y0, y1], 0)?))
    }

    /// Uniform random u32 words of `shape` (JAX's `jax.random.bits(key,
    /// shape)`, bit for bit): the xor of the two Threefry output words (of
    /// a non-partitionable key: its words `0..numel`).
    pub fn bits(&self, shape: impl Into<Shape>) -> Tensor {
        self.bits32("bits", &shape.into()).or_raise()
    }

    fn bits32(&self, op: &str, shape: &Shape) -> Result<Tensor> {
        self.bits_narrow(op, shape, 32)
    }

    /// JAX's `random_bits(key, width, shape)` for a width of 8, 16 or 32,
    /// as u32 values below `2^width`.
    fn bits_narrow(&self, op: &str, shape: &Shape, width: u32) -> Result<Tensor> {
        let dev = self.device();
        let mask = |w: &Tensor| -> Result<Tensor> {
            if width == 32 {
                Ok(w.clone())
            } else {
                lax::and(w, &konst((1u32 << width) - 1, &w.shape(), dev)?)
            }
        };
        if self.partitionable {
            // the low bits of each element's word
            let (y0, y1) = self.hash(op, shape)?;
            return mask(&xor(&y0, &y1)?);
        }
        let n = shape.numel();
        let per = (32 / width) as usize;
        let words = self.words_original(op, n.div_ceil(per))?;
        if per == 1 {
            return lax::reshape(&words, shape);
        }
        // word j holds values j * per + k as its bits from width * k up
        let m = words.shape();
        let subs = (0..per)
            .map(|k| {
                let shifted = lax::div(&words, &konst(1u32 << (width as usize * k), &m, dev)?)?;
                lax::expand_dims(&mask(&shifted)?, 1)
            })
            .collect::<Result<Vec<_>>>()?;
        let flat = lax::reshape(&lax::concatenate(&subs, 1)?, &Shape::from([m.numel() * per]))?;
        lax::reshape(&lax::slice_axis(&flat, 0, 0, n)?, shape)
    }

    /// JAX's 64-bit `random_bits(key, 64, shape)` as the high and low u32
    /// halves of each value.
    fn bits64(&self, op: &str, shape: &Shape) -> Result<(Tensor, Tensor)> {
        if self.partitionable {
            return self.hash(op, shape);
        }
        let n = shape.numel();
        let words = self.words_original(op, n.saturating_mul(2))?;
        let hi = lax::reshape(&lax::slice_axis(&words, 0, 0, n)?, shape)?;
        let lo = lax::reshape(&lax::slice_axis(&words, 0, n, 2 * n)?, shape)?;
        Ok((hi, lo))
    }

    /// JAX's `floats` in `_uniform`: the top mantissa bits of the random
    /// word over an exponent of 1, minus 1, so multiples of 2^-nmant in
    /// [0, 1) (computed exactly without a bitcast).
    fn unit_floats(&self, op: &str, shape: &Shape, dtype: DType) -> Result<Tensor> {
        let dev = self.device();
        let u32c = |v: u32| konst(v, shape, dev);
        // (bits JAX draws, shift right, mantissa bits)
        let (width, shift, nmant) = match dtype {
            DType::F64 => {
                // 64 bits (y0 << 32 | y1) >> 12: y0 * 2^20 + (y1 >> 12), exact in f64.
                let (y0, y1) = self.bits64(op, shape)?;
                let hi = lax::mul(&lax::convert(&y0, DType::F64)?, &konst(2f64.powi(20), shape, dev)?)?;
                let lo = lax::convert(&lax::div(&y1, &u32c(1 << 12)?)?, DType::F64)?;
                return lax::mul(&lax::add(&hi, &lo)?, &konst(2f64.powi(-52), shape, dev)?);
            }
            DType::F32 => (32, 9, 23),
            DType::F16 => (16, 6, 10),
            // nmant = 7 < 8: JAX draws 8 bits and shifts them right by 1.
            DType::BF16 => (8, 1, 7),
            other => return Err(Error::dtype(op, "needs a float dtype", &[other])),
        };
        let w = self.bits_narrow(op, shape, width)?;
        let m = lax::convert(&lax::div(&w, &u32c(1 << shift)?)?, dtype)?;
        lax::mul_scalar(&m, 2f64.powi(-nmant))
    }

    /// JAX's `_uniform`: `max(lo, floats * (hi - lo) + lo)` in `dtype`, where
    /// XLA contracts the multiply-add into one fused multiply-add (half
    /// types in f32). A power-of-two span makes the product exact, so a
    /// plain multiply and add round once as the FMA does. Otherwise f32 and
    /// the half types step through f64 (exact product, one rounding of the
    /// sum, then to the type: a double rounding only when the f64 sum lands
    /// on a midpoint), and f64 uses Dekker's exact product.
    fn uniform_in(&self, op: &str, shape: &Shape, lo: f64, hi: f64, dtype: DType) -> Result<Tensor> {
        let f = self.unit_floats(op, shape, dtype)?;
        let (lo, hi) = (round_to(lo, dtype), round_to(hi, dtype));
        let span = round_to(hi - lo, dtype);
        // (a zero mantissa field: a power of two, or zero)
        let exact_product = span.to_bits() & ((1u64 << 52) - 1) == 0;
        let v = if exact_product {
            lax::add_scalar(&lax::mul_scalar(&f, span)?, lo)?
        } else if dtype == DType::F64 {
            fma_f64(&f, span, lo)?
        } else {
            let t = lax::mul_scalar(&lax::convert(&f, DType::F64)?, span)?;
            let s = lax::convert(&lax::add_scalar(&t, lo)?, DType::F32)?;
            lax::convert(&s, dtype)?
        };
        lax::max(&v, &lax::full_like(&v, lo)?)
    }

    /// Uniform floats in `[0, 1)` of `shape` and float `dtype`, bit for bit
    /// JAX's `jax.random.uniform(key, shape, dtype)`: multiples of
    /// 2^-nmant (23 bits for f32, 52 for f64, 10 for f16, 7 for bf16).
    ///
    /// # Panics
    /// If `dtype` is not a float type.
    #[track_caller]
    pub fn uniform(&self, shape: impl Into<Shape>, dtype: DType) -> Tensor {
        self.try_uniform(shape, dtype).or_raise()
    }

    /// [`Key::uniform`] returning an error instead of panicking.
    pub fn try_uniform(&self, shape: impl Into<Shape>, dtype: DType) -> Result<Tensor> {
        self.uniform_in("uniform", &shape.into(), 0.0, 1.0, dtype)
    }

    /// Uniform floats in `[low, high)` (JAX's `uniform(key, shape, dtype,
    /// minval=low, maxval=high)`; `low` and `high` are first rounded to
    /// `dtype`).
    #[track_caller]
    pub fn uniform_range(&self, shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Tensor {
        self.try_uniform_range(shape, low, high, dtype).or_raise()
    }

    /// [`Key::uniform_range`] returning an error instead of panicking.
    pub fn try_uniform_range(&self, shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Result<Tensor> {
        if !(low.is_finite() && high.is_finite()) {
            return Err(Error::invalid("uniform_range", format!("needs finite bounds, got [{low}, {high})")));
        }
        self.uniform_in("uniform_range", &shape.into(), low, high, dtype)
    }

    /// Standard normal floats of `shape` (JAX's `jax.random.normal`):
    /// `sqrt(2) * erfinv(u)` with `u` uniform in `(-1, 1)`. The uniforms
    /// are JAX's bit for bit; erfinv is XLA's expansion of it
    /// ([`lax::erf_inv_xla`]: JAX's f64 normals bit for bit, f32 ones within
    /// 2 ulps). f16 and bf16 take erfinv in f32.
    #[track_caller]
    pub fn normal(&self, shape: impl Into<Shape>, dtype: DType) -> Tensor {
        self.try_normal(shape, dtype).or_raise()
    }

    /// [`Key::normal`] returning an error instead of panicking.
    pub fn try_normal(&self, shape: impl Into<Shape>, dtype: DType) -> Result<Tensor> {
        let shape = shape.into();
        // nextafter(-1, 0) in dtype.
        let lo = match dtype {
            DType::F64 => -1.0 + 2f64.powi(-53),
            DType::F32 => -1.0 + 2f64.powi(-24),
            DType::F16 => -1.0 + 2f64.powi(-11),
            DType::BF16 => -1.0 + 2f64.powi(-8),
            other => return Err(Error::dtype("normal", "needs a float dtype", &[other])),
        };
        let u = self.uniform_in("normal", &shape, lo, 1.0, dtype)?;
        let e = match dtype {
            DType::F32 | DType::F64 => lax::erf_inv_xla(&u)?,
            _ => lax::convert(&lax::erf_inv_xla(&lax::convert(&u, DType::F32)?)?, dtype)?,
        };
        lax::mul_scalar(&e, std::f64::consts::SQRT_2)
    }

    /// Integers uniform in `[low, high)` of an integer `dtype` (JAX's
    /// `jax.random.randint`, bit for bit): two words per element reduced
    /// modulo the span. A range wider than the dtype is clipped to it as JAX
    /// clips it (`randint(i32::MIN as i64 - 5, 1 << 40, I32)` draws every
    /// i32).
    ///
    /// # Panics
    /// If `dtype` is not an integer type, or no value of `dtype` lies in
    /// `[low, high)`.
    #[track_caller]
    pub fn randint(&self, shape: impl Into<Shape>, low: i64, high: i64, dtype: DType) -> Tensor {
        self.try_randint(shape, low, high, dtype).or_raise()
    }

    /// [`Key::randint`] returning an error instead of panicking.
    pub fn try_randint(&self, shape: impl Into<Shape>, low: i64, high: i64, dtype: DType) -> Result<Tensor> {
        randint::randint(self, &shape.into(), low, high, dtype)
    }

    /// Booleans of `shape`, true with probability `p` (JAX's
    /// `jax.random.bernoulli(key, p, shape)`, bit for bit): `uniform < p`
    /// with the uniform drawn in `p`'s float dtype; `p` broadcasts to `shape`.
    #[track_caller]
    pub fn bernoulli(&self, p: &Tensor, shape: impl Into<Shape>) -> Tensor {
        self.try_bernoulli(p, shape).or_raise()
    }

    /// [`Key::bernoulli`] returning an error instead of panicking.
    pub fn try_bernoulli(&self, p: &Tensor, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if !p.dtype().is_float() {
            return Err(Error::dtype("bernoulli", "the probability needs a float dtype", &[p.dtype()]));
        }
        let u = self.uniform_in("bernoulli", &shape, 0.0, 1.0, p.dtype())?;
        lax::lt(&u, &lax::broadcast_to(p, &shape)?)
    }

    /// One category index (int64) per distribution of `logits` along `axis`
    /// (JAX's `jax.random.categorical(key, logits, axis)`, the Gumbel-max
    /// trick): the shape is `logits`' without `axis`.
    #[track_caller]
    pub fn categorical(&self, logits: &Tensor, axis: isize) -> Tensor {
        self.try_categorical(logits, axis, None).or_raise()
    }

    /// [`Key::categorical`] with an optional sample `shape` (JAX's `shape=`):
    /// it must end in a shape that `logits` without `axis` broadcasts to;
    /// leading axes draw independent samples.
    pub fn try_categorical(&self, logits: &Tensor, axis: isize, shape: Option<Shape>) -> Result<Tensor> {
        let dtype = logits.dtype();
        if !dtype.is_float() {
            return Err(Error::dtype("categorical", "logits need a float dtype", &[dtype]));
        }
        let ls = logits.shape();
        let a = norm_axis("categorical", axis, ls.rank())?;
        let mut batch = ls.0.clone();
        let k = batch.remove(a);
        let shape = shape.unwrap_or_else(|| Shape::from(batch.clone()));
        let bad =
            || Error::shape("categorical", "logits without the axis do not broadcast to the shape", &[&ls, &shape]);
        if shape.rank() < batch.len() {
            return Err(bad());
        }
        let n_prefix = shape.rank() - batch.len();
        let tail = &shape.0[n_prefix..];
        if batch.iter().zip(tail).any(|(&b, &s)| b != s && b != 1) {
            return Err(bad());
        }
        let mut gshape = shape.0.clone();
        gshape.insert(n_prefix + a, k);
        let gshape = Shape::from(gshape);
        // Gumbel noise: -log(-log(u)), u uniform in [tiny, 1).
        let tiny = match dtype {
            DType::F64 => f64::MIN_POSITIVE,
            DType::F32 => f32::MIN_POSITIVE as f64,
            DType::F16 => 2f64.powi(-14),
            _ => 2f64.powi(-126),
        };
        let u = self.uniform_in("categorical", &gshape, tiny, 1.0, dtype)?;
        let g = lax::neg(&lax::log(&lax::neg(&lax::log(&u)?)?)?)?;
        let z = lax::add(&g, &lax::broadcast_to(logits, &gshape)?)?;
        lax::arg_reduce(crate::prims::reduce::ArgOp::Max, &z, n_prefix + a, DType::I64)
    }
}
