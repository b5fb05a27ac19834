//! Neural-network functions, built from primitives: relu, gelu, softplus,
//! silu, softmax, log_softmax.

use super::norm_axis;
use crate::error::OrRaise;
use crate::lax;
use crate::tensor::Tensor;

impl Tensor {
    /// `max(x, 0)`.
    pub fn relu(&self) -> Tensor {
        let z = lax::zeros_like(self).or_raise();
        lax::max(self, &z).or_raise()
    }

    /// The Gaussian error linear unit, `x * Phi(x)` (exact, with erf).
    pub fn gelu(&self) -> Tensor {
        let x = if self.dtype().is_float() { self.clone() } else { self.cast(xform_kernels::DType::F32) };
        let phi = (&x * std::f64::consts::FRAC_1_SQRT_2).erf() * 0.5 + 0.5;
        &x * &phi
    }

    /// `log(1 + e^x)`, computed stably.
    pub fn softplus(&self) -> Tensor {
        // max(x, 0) + log1p(exp(-|x|))
        self.relu() + (-self.abs()).exp().log1p()
    }

    /// `x * sigmoid(x)`.
    pub fn silu(&self) -> Tensor {
        self * &self.sigmoid()
    }

    /// Softmax along `axis`, computed stably.
    #[track_caller]
    pub fn softmax(&self, axis: isize) -> Tensor {
        norm_axis("softmax", axis, self.rank()).or_raise();
        let m = self.max_axis(axis, true).stop_gradient();
        let e = (self - &m).exp();
        let s = e.sum_axis(axis, true);
        &e / &s
    }

    /// `log(softmax(x))` along `axis`, computed stably.
    #[track_caller]
    pub fn log_softmax(&self, axis: isize) -> Tensor {
        self - &self.logsumexp(axis, true)
    }
}
