//! Counter-based random numbers from explicit keys (as in JAX): a [`Key`]
//! is a value (a `u32[2]` tensor), every draw is a pure function of it,
//! so `vmap` over keys gives exactly the per-key streams of a loop.
//!
//! The algorithms follow JAX's Threefry implementation (`split`, `fold_in`
//! and 32-bit `random_bits`), so streams match JAX's for the same key.

use crate::error::{Error, OrRaise, Result};
use crate::lax;
use crate::tensor::Tensor;
use xform_kernels::{DType, Shape};

/// A random key: two u32 words (or, under vmap, a batch of them).
#[derive(Clone, Debug)]
pub struct Key(Tensor);

/// Threefry on a flat u32 counter array of even length: halves in, halves
/// out (JAX's `threefry_2x32`).
fn threefry_counts(key: &Tensor, counts: &Tensor) -> Result<Tensor> {
    let n = counts.shape()[0];
    let half = n / 2;
    let x0 = lax::slice_axis(counts, 0, 0, half)?;
    let x1 = lax::slice_axis(counts, 0, half, n)?;
    let s = Shape::from([half]);
    let k0 = lax::broadcast_in_dim(&lax::reshape(&lax::slice_axis(key, 0, 0, 1)?, &Shape::scalar())?, &s, &[])?;
    let k1 = lax::broadcast_in_dim(&lax::reshape(&lax::slice_axis(key, 0, 1, 2)?, &Shape::scalar())?, &s, &[])?;
    let (y0, y1) = lax::threefry2x32(&k0, &k1, &x0, &x1)?;
    lax::concatenate(&[y0, y1], 0)
}

impl Key {
    /// The key for an integer seed (JAX's `PRNGKey(seed)`).
    pub fn new(seed: u64) -> Key {
        Key(Tensor::from_vec(vec![(seed >> 32) as u32, seed as u32], [2]))
    }

    /// Wraps a `u32[2]` tensor (for example one row of [`Key::split_tensor`]).
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
        Key(t)
    }

    /// The `u32[2]` tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.0
    }

    /// `n` new independent keys as a `u32[n, 2]` tensor (vmap over its rows).
    pub fn split_tensor(&self, n: usize) -> Tensor {
        let counts = lax::iota(DType::U32, &Shape::from([2 * n]), 0, self.0.device()).or_raise();
        let bits = threefry_counts(&self.0, &counts).or_raise();
        lax::reshape(&bits, &Shape::from([n, 2])).or_raise()
    }

    /// `n` new independent keys.
    pub fn split(&self, n: usize) -> Vec<Key> {
        let t = self.split_tensor(n);
        (0..n as isize).map(|i| Key(t.index(i))).collect()
    }

    /// A new key derived from this one and `data` (JAX's `fold_in`).
    pub fn fold_in(&self, data: u32) -> Key {
        let counts = Tensor::from_vec(vec![0u32, data], [2]).to_device(self.0.device());
        Key(threefry_counts(&self.0, &counts).or_raise())
    }

    /// Uniform random u32 words of `shape`.
    pub fn bits(&self, shape: impl Into<Shape>) -> Tensor {
        let shape = shape.into();
        let n = shape.numel();
        let padded = n + (n % 2);
        let counts = lax::iota(DType::U32, &Shape::from([padded]), 0, self.0.device()).or_raise();
        let bits = threefry_counts(&self.0, &counts).or_raise();
        let bits = if padded != n { lax::slice_axis(&bits, 0, 0, n).or_raise() } else { bits };
        lax::reshape(&bits, &shape).or_raise()
    }

    /// Uniform floats in `[0, 1)` of `shape` and float `dtype`: every value
    /// is a multiple of 2^-p with p the dtype's significand bits, so 1 is
    /// never produced.
    ///
    /// # Panics
    /// If `dtype` is not a float type.
    #[track_caller]
    pub fn uniform(&self, shape: impl Into<Shape>, dtype: DType) -> Tensor {
        self.try_uniform(shape.into(), dtype).or_raise()
    }

    fn try_uniform(&self, shape: Shape, dtype: DType) -> Result<Tensor> {
        let p: u32 = match dtype {
            DType::F32 => 24,
            DType::F16 => 11,
            DType::BF16 => 8,
            DType::F64 => 53,
            other => return Err(Error::dtype("uniform", "needs a float dtype", &[other])),
        };
        if dtype == DType::F64 {
            // 53 bits from two words: hi * 2^21 + lo / 2^11, times 2^-53.
            let mut s2 = shape.clone();
            s2.0.push(2);
            let w = self.bits(s2);
            let hi = lax::convert(&lax::reshape(&lax::slice_axis(&w, shape.rank(), 0, 1)?, &shape)?, DType::F64)?;
            let lo = lax::reshape(&lax::slice_axis(&w, shape.rank(), 1, 2)?, &shape)?;
            let lo = lax::convert(&lax::div(&lo, &lax::full_like(&lo, 2048.0)?)?, DType::F64)?;
            let v = lax::add(&lax::mul_scalar(&hi, 2f64.powi(21))?, &lo)?;
            return lax::mul_scalar(&v, 2f64.powi(-53));
        }
        let w = self.bits(shape);
        let top = lax::div(&w, &lax::full_like(&w, 2f64.powi(32 - p as i32))?)?;
        lax::mul_scalar(&lax::convert(&top, dtype)?, 2f64.powi(-(p as i32)))
    }

    /// Uniform floats in `[low, high)`.
    #[track_caller]
    pub fn uniform_range(&self, shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Tensor {
        let u = self.uniform(shape, dtype);
        u * (high - low) + low
    }

    /// Standard normal floats of `shape` (Box-Muller on two uniform draws;
    /// half types compute in f32).
    #[track_caller]
    pub fn normal(&self, shape: impl Into<Shape>, dtype: DType) -> Tensor {
        let shape = shape.into();
        if !dtype.is_float() {
            Error::dtype("normal", "needs a float dtype", &[dtype]).raise();
        }
        let work = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
        let keys = self.split(2);
        let u1 = keys[0].uniform(shape.clone(), work);
        let u2 = keys[1].uniform(shape, work);
        // 1 - u1 is in (0, 1], so the log is finite.
        let r = ((1.0f64 - &u1).log() * -2.0f64).sqrt();
        let r: Tensor = r;
        let z: Tensor = r * (u2 * std::f64::consts::TAU).cos();
        z.cast(dtype)
    }

    /// A random permutation-free choice: integers uniform in `[low, high)`.
    #[track_caller]
    pub fn randint(&self, shape: impl Into<Shape>, low: i64, high: i64, dtype: DType) -> Tensor {
        if high <= low || !dtype.is_int() {
            Error::invalid("randint", format!("needs low < high and an integer dtype, got [{low}, {high}) {dtype}"))
                .raise();
        }
        let u = self.uniform(shape, DType::F64);
        let v = (u * (high - low) as f64).floor() + low as f64;
        v.cast(dtype)
    }
}
