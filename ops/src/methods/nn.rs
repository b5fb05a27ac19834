//! Neural-network functions, built from primitives: relu, gelu, softplus,
//! silu, softmax, log_softmax.

use super::norm_axis;
use crate::error::{OrRaise, Result};
use crate::lax;
use crate::tensor::Tensor;

/// `select(x <= 0, 0, x)`: the select gives the derivative 0 at 0 and the
/// value of `max(x, 0)` everywhere (NaN too: `NaN <= 0` is false).
fn relu(x: &Tensor) -> Result<Tensor> {
    let zero = lax::zeros_like(x)?;
    if !x.dtype().is_float() {
        return lax::max(x, &zero);
    }
    lax::select(&lax::le(x, &zero)?, &zero, x)
}

/// `x + log1p(e^-x)` for `x > 0`, `log1p(e^x)` otherwise, written as one
/// `log1p(e^-|x|)` whose `-|x|` is a select (slope -1 or 1, never the 0 of
/// `sign(0)`), so the first derivative at 0 is 1/2 and the second 1/4.
fn softplus(x: &Tensor) -> Result<Tensor> {
    let x = if x.dtype().is_float() { x.clone() } else { lax::convert(x, xform_kernels::DType::F32)? };
    let zero = lax::zeros_like(&x)?;
    let pos = lax::gt(&x, &zero)?;
    let neg_abs = lax::select(&pos, &lax::neg(&x)?, &x)?;
    let lin = lax::select(&pos, &x, &zero)?;
    lax::add(&lin, &lax::log1p(&lax::exp(&neg_abs)?)?)
}

impl Tensor {
    /// `max(x, 0)`, with derivative 0 at 0 (as `jax.nn.relu` and
    /// `torch.relu`; `maximum` would split the tie and give 1/2). NaN
    /// propagates.
    pub fn relu(&self) -> Tensor {
        relu(self).or_raise()
    }

    /// The Gaussian error linear unit, `x * Phi(x)` (exact, with erf).
    pub fn gelu(&self) -> Tensor {
        let x = if self.dtype().is_float() { self.clone() } else { self.cast(xform_kernels::DType::F32) };
        let phi = (&x * std::f64::consts::FRAC_1_SQRT_2).erf() * 0.5 + 0.5;
        &x * &phi
    }

    /// `log(1 + e^x)`, computed stably, with every derivative smooth at 0
    /// (the first is `sigmoid(x)`, as `jax.nn.softplus`).
    pub fn softplus(&self) -> Tensor {
        softplus(self).or_raise()
    }

    /// `x * sigmoid(x)`.
    pub fn silu(&self) -> Tensor {
        self * &self.sigmoid()
    }

    /// Softmax along `axis`, computed stably: `exp(x - m) / sum(exp(x - m))`
    /// with `m` the maximum (not differentiated), as `jax.nn.softmax`. A
    /// slice holding `+inf`, or only `-inf`, gives NaN throughout, as in JAX
    /// and PyTorch.
    #[track_caller]
    pub fn softmax(&self, axis: isize) -> Tensor {
        norm_axis("softmax", axis, self.rank()).or_raise();
        let m = self.max_axis(axis, true).stop_gradient();
        let e = (self - &m).exp();
        let s = e.sum_axis(axis, true);
        &e / &s
    }

    /// `log(softmax(x))` along `axis`, computed stably: `(x - m) -
    /// log(sum(exp(x - m)))` with `m` the maximum (not differentiated), as
    /// `jax.nn.log_softmax` (the same formula; NaN where softmax is).
    #[track_caller]
    pub fn log_softmax(&self, axis: isize) -> Tensor {
        norm_axis("log_softmax", axis, self.rank()).or_raise();
        let shifted = self - &self.max_axis(axis, true).stop_gradient();
        let lse = shifted.exp().sum_axis(axis, true).log();
        &shifted - &lse
    }
}
