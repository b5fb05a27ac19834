//! Parameter initializers with PyTorch's default distributions, each drawn
//! from an explicit [`Key`].
//!
//! PyTorch's layers initialize themselves in `reset_parameters`; the
//! distributions are:
//!
//! | layer | weight | bias |
//! |---|---|---|
//! | `Linear`, `Conv*d`, `ConvTranspose*d` | `kaiming_uniform_(a=sqrt(5))` = U(-1/sqrt(fan_in), 1/sqrt(fan_in)) | U(-1/sqrt(fan_in), 1/sqrt(fan_in)) |
//! | `Embedding` | N(0, 1) (the `padding_idx` row zero) | |
//! | `LayerNorm`, `GroupNorm`, `BatchNorm*d` | 1 | 0 |
//! | `MultiheadAttention` in_proj | `xavier_uniform_` on the `[3E, E]` weight | 0 |
//! | `MultiheadAttention` out_proj | as `Linear`'s weight | 0 |
//!
//! `kaiming_uniform_(a)` has bound `gain * sqrt(3 / fan)` with the leaky
//! ReLU gain `sqrt(2 / (1 + a^2))`, so `a = sqrt(5)` gives exactly
//! `1 / sqrt(fan_in)`: [`fan_in_uniform`] draws that directly.
//!
//! Fans follow PyTorch's `_calculate_fan_in_and_fan_out` on a weight laid
//! out `[out, in, kernel..]` (a convolution's OIHW): see [`fan_in_fan_out`].
//! xform's [`Linear`](super::Linear) stores `[d_in, d_out]`, so its fan-in is
//! `d_in`; every initializer here takes its fan explicitly, so any layout
//! works. The draws are JAX's streams ([`Key::uniform_range`],
//! [`Key::normal`]), so the numbers are not PyTorch's (its generator is a
//! different one); the distributions are.

use crate::{DType, Error, Key, Shape, Tensor};

/// PyTorch's `(fan_in, fan_out)` of a weight laid out `[out, in,
/// kernel..]`: `fan_in = in * prod(kernel)`, `fan_out = out *
/// prod(kernel)` (`torch.nn.init._calculate_fan_in_and_fan_out`). A
/// grouped convolution's weight `[out, in / groups, k..]` gives the fan-in
/// of one group, as in PyTorch.
///
/// ```
/// use xform::nn::init::fan_in_fan_out;
///
/// assert_eq!(fan_in_fan_out(&[16, 3, 5, 5]), (75, 400)); // Conv2d(3, 16, 5)
/// assert_eq!(fan_in_fan_out(&[10, 64]), (64, 10)); // torch Linear(64, 10).weight
/// ```
///
/// # Panics
/// If `shape` has fewer than two axes (PyTorch refuses them too).
#[track_caller]
pub fn fan_in_fan_out(shape: &[usize]) -> (usize, usize) {
    if shape.len() < 2 {
        Error::shape(
            "fan_in_fan_out",
            "fan in and fan out need a weight of at least two axes [out, in, kernel..]",
            &[&Shape::from(shape.to_vec())],
        )
        .raise();
    }
    let receptive: usize = shape[2..].iter().product();
    (shape[1] * receptive, shape[0] * receptive)
}

/// A nonlinearity, for [`calculate_gain`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Nonlinearity {
    /// The identity (also a convolution or linear layer alone): gain 1.
    Linear,
    /// The logistic sigmoid: gain 1.
    Sigmoid,
    /// tanh: gain 5/3.
    Tanh,
    /// ReLU: gain sqrt(2).
    Relu,
    /// Leaky ReLU with this negative slope: gain sqrt(2 / (1 + slope^2)).
    LeakyRelu(f64),
    /// SELU: gain 3/4.
    Selu,
}

/// PyTorch's `torch.nn.init.calculate_gain`: the factor that keeps the
/// activations' variance through a layer followed by `nonlinearity`.
///
/// ```
/// use xform::nn::init::{calculate_gain, Nonlinearity};
///
/// assert_eq!(calculate_gain(Nonlinearity::Relu), 2f64.sqrt());
/// // PyTorch's Linear/Conv default: leaky ReLU with slope sqrt(5).
/// assert!((calculate_gain(Nonlinearity::LeakyRelu(5f64.sqrt())) - (1.0f64 / 3.0).sqrt()).abs() < 1e-15);
/// ```
pub fn calculate_gain(nonlinearity: Nonlinearity) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::Relu => 2f64.sqrt(),
        Nonlinearity::LeakyRelu(slope) => (2.0 / (1.0 + slope * slope)).sqrt(),
        Nonlinearity::Selu => 0.75,
    }
}

/// Raises unless `v` is a finite, non-negative number.
#[track_caller]
fn check_nonneg(op: &str, what: &str, v: f64) {
    if !(v.is_finite() && v >= 0.0) {
        Error::invalid(op, format!("{what} must be finite and non-negative, got {v}")).raise();
    }
}

/// Uniform values in `[low, high)` (`torch.nn.init.uniform_`).
///
/// # Panics
/// If the bounds are not finite, `low > high`, or `dtype` is not a float
/// type.
#[track_caller]
pub fn uniform(key: &Key, shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Tensor {
    if low > high {
        Error::invalid("init::uniform", format!("needs low <= high, got [{low}, {high})")).raise();
    }
    key.uniform_range(shape, low, high, dtype)
}

/// Normal values with mean `mean` and standard deviation `std`
/// (`torch.nn.init.normal_`).
///
/// # Panics
/// If `std` is negative or not finite, or `dtype` is not a float type.
#[track_caller]
pub fn normal(key: &Key, shape: impl Into<Shape>, mean: f64, std: f64, dtype: DType) -> Tensor {
    check_nonneg("init::normal", "std", std);
    key.normal(shape, dtype) * std + mean
}

/// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for the weight
/// (`kaiming_uniform_(a=sqrt(5))`) and the bias of `Linear` and
/// `Conv*d`. A zero `fan_in` gives zeros (PyTorch's bias bound is 0 then).
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::init::fan_in_uniform;
///
/// let w = fan_in_uniform(&Key::new(0), [16, 3, 5, 5], 75, DType::F32);
/// assert!(w.abs().max().item::<f32>() < 1.0 / 75f32.sqrt());
/// ```
#[track_caller]
pub fn fan_in_uniform(key: &Key, shape: impl Into<Shape>, fan_in: usize, dtype: DType) -> Tensor {
    let bound = if fan_in == 0 { 0.0 } else { 1.0 / (fan_in as f64).sqrt() };
    key.uniform_range(shape, -bound, bound, dtype)
}

/// He (Kaiming) uniform: U(-b, b) with `b = gain * sqrt(3 / fan)`
/// (`torch.nn.init.kaiming_uniform_` with `gain =
/// calculate_gain(nonlinearity, a)` and `fan` the fan-in or fan-out of
/// `mode`).
///
/// # Panics
/// If `fan` is zero, `gain` negative or `dtype` not a float type.
#[track_caller]
pub fn kaiming_uniform(key: &Key, shape: impl Into<Shape>, fan: usize, gain: f64, dtype: DType) -> Tensor {
    check_fan("init::kaiming_uniform", fan);
    check_nonneg("init::kaiming_uniform", "gain", gain);
    let bound = gain * (3.0 / fan as f64).sqrt();
    key.uniform_range(shape, -bound, bound, dtype)
}

/// He (Kaiming) normal: N(0, (gain / sqrt(fan))^2)
/// (`torch.nn.init.kaiming_normal_`).
///
/// # Panics
/// If `fan` is zero, `gain` negative or `dtype` not a float type.
#[track_caller]
pub fn kaiming_normal(key: &Key, shape: impl Into<Shape>, fan: usize, gain: f64, dtype: DType) -> Tensor {
    check_fan("init::kaiming_normal", fan);
    normal(key, shape, 0.0, gain / (fan as f64).sqrt(), dtype)
}

/// Glorot (Xavier) uniform: U(-b, b) with `b = gain * sqrt(6 / (fan_in +
/// fan_out))` (`torch.nn.init.xavier_uniform_`).
///
/// # Panics
/// If both fans are zero, `gain` is negative or `dtype` not a float type.
#[track_caller]
pub fn xavier_uniform(
    key: &Key,
    shape: impl Into<Shape>,
    fan_in: usize,
    fan_out: usize,
    gain: f64,
    dtype: DType,
) -> Tensor {
    check_fan("init::xavier_uniform", fan_in + fan_out);
    check_nonneg("init::xavier_uniform", "gain", gain);
    let bound = gain * (6.0 / (fan_in + fan_out) as f64).sqrt();
    key.uniform_range(shape, -bound, bound, dtype)
}

/// Glorot (Xavier) normal: N(0, gain^2 * 2 / (fan_in + fan_out))
/// (`torch.nn.init.xavier_normal_`).
///
/// # Panics
/// If both fans are zero, `gain` is negative or `dtype` not a float type.
#[track_caller]
pub fn xavier_normal(
    key: &Key,
    shape: impl Into<Shape>,
    fan_in: usize,
    fan_out: usize,
    gain: f64,
    dtype: DType,
) -> Tensor {
    check_fan("init::xavier_normal", fan_in + fan_out);
    normal(key, shape, 0.0, gain * (2.0 / (fan_in + fan_out) as f64).sqrt(), dtype)
}

#[track_caller]
fn check_fan(op: &str, fan: usize) {
    if fan == 0 {
        Error::invalid(op, "the fan is zero (a weight without inputs or outputs)").raise();
    }
}
