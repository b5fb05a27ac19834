//! Reductions: sum, mean, max, min, argmax, argmin, cumsum, var, std, norm,
//! logsumexp. Every reduction takes axes that may be negative and a
//! `keepdim` flag; the `_all` forms reduce everything to a scalar.

use super::{norm_axes, norm_axis};
use crate::error::{OrRaise, Result};
use crate::lax;
use crate::prim::{ArgOp, ReduceOp};
use crate::tensor::Tensor;
use xform_kernels::{DType, Shape};

fn keep(y: Tensor, x_shape: &Shape, axes: &[usize], keepdim: bool) -> Result<Tensor> {
    if !keepdim {
        return Ok(y);
    }
    let mut s = x_shape.clone();
    for &a in axes {
        s[a] = 1;
    }
    lax::reshape(&y, &s)
}

fn reduce(op: ReduceOp, x: &Tensor, axes: &[isize], keepdim: bool) -> Result<Tensor> {
    let shape = x.shape();
    let axes = norm_axes(op.name(), axes, shape.rank())?;
    let x = if x.dtype() == DType::Bool { lax::convert(x, DType::I64)? } else { x.clone() };
    let y = lax::reduce(op, &x, &axes)?;
    keep(y, &shape, &axes, keepdim)
}

/// `m` where it is finite, else 0: the shift of a stable softmax or
/// logsumexp (an infinite shift would make `x - m` NaN).
pub(crate) fn finite_or_zero(m: &Tensor) -> Result<Tensor> {
    if !m.dtype().is_float() {
        return Ok(m.clone());
    }
    let zero = lax::zeros_like(m)?;
    let finite = lax::lt(&lax::abs(m)?, &lax::full_like(m, f64::INFINITY)?)?;
    lax::select(&finite, m, &zero)
}

fn all_axes(x: &Tensor) -> Vec<isize> {
    (0..x.rank() as isize).collect()
}

fn float_of(x: &Tensor) -> Result<Tensor> {
    if x.dtype().is_float() {
        Ok(x.clone())
    } else {
        lax::convert(x, DType::F32)
    }
}

impl Tensor {
    /// Sum of all elements (a scalar). Bools count as integers.
    pub fn sum(&self) -> Tensor {
        reduce(ReduceOp::Sum, self, &all_axes(self), false).or_raise()
    }

    /// Sum over one axis.
    #[track_caller]
    pub fn sum_axis(&self, axis: isize, keepdim: bool) -> Tensor {
        reduce(ReduceOp::Sum, self, &[axis], keepdim).or_raise()
    }

    /// Sum over several axes.
    #[track_caller]
    pub fn sum_axes(&self, axes: &[isize], keepdim: bool) -> Tensor {
        reduce(ReduceOp::Sum, self, axes, keepdim).or_raise()
    }

    /// Mean of all elements (integers and bools average as f32).
    pub fn mean(&self) -> Tensor {
        self.mean_axes(&all_axes(self), false)
    }

    /// Mean over one axis.
    #[track_caller]
    pub fn mean_axis(&self, axis: isize, keepdim: bool) -> Tensor {
        self.mean_axes(&[axis], keepdim)
    }

    /// Mean over several axes.
    #[track_caller]
    pub fn mean_axes(&self, axes: &[isize], keepdim: bool) -> Tensor {
        let x = float_of(self).or_raise();
        let shape = x.shape();
        let ax = norm_axes("mean", axes, shape.rank()).or_raise();
        let n: usize = ax.iter().map(|&a| shape[a]).product();
        let s = reduce(ReduceOp::Sum, &x, axes, keepdim).or_raise();
        lax::mul_scalar(&s, 1.0 / n as f64).or_raise()
    }

    /// Maximum of all elements.
    pub fn max(&self) -> Tensor {
        reduce(ReduceOp::Max, self, &all_axes(self), false).or_raise()
    }

    /// Maximum over one axis.
    #[track_caller]
    pub fn max_axis(&self, axis: isize, keepdim: bool) -> Tensor {
        reduce(ReduceOp::Max, self, &[axis], keepdim).or_raise()
    }

    /// Maximum over several axes.
    #[track_caller]
    pub fn max_axes(&self, axes: &[isize], keepdim: bool) -> Tensor {
        reduce(ReduceOp::Max, self, axes, keepdim).or_raise()
    }

    /// Minimum of all elements.
    pub fn min(&self) -> Tensor {
        reduce(ReduceOp::Min, self, &all_axes(self), false).or_raise()
    }

    /// Minimum over one axis.
    #[track_caller]
    pub fn min_axis(&self, axis: isize, keepdim: bool) -> Tensor {
        reduce(ReduceOp::Min, self, &[axis], keepdim).or_raise()
    }

    /// Minimum over several axes.
    #[track_caller]
    pub fn min_axes(&self, axes: &[isize], keepdim: bool) -> Tensor {
        reduce(ReduceOp::Min, self, axes, keepdim).or_raise()
    }

    /// Index (int64) of the first maximum along `axis`.
    #[track_caller]
    pub fn argmax(&self, axis: isize) -> Tensor {
        let a = norm_axis("argmax", axis, self.rank()).or_raise();
        lax::arg_reduce(ArgOp::Max, self, a, DType::I64).or_raise()
    }

    /// Index (int64) of the first minimum along `axis`.
    #[track_caller]
    pub fn argmin(&self, axis: isize) -> Tensor {
        let a = norm_axis("argmin", axis, self.rank()).or_raise();
        lax::arg_reduce(ArgOp::Min, self, a, DType::I64).or_raise()
    }

    /// Running sum along `axis`.
    #[track_caller]
    pub fn cumsum(&self, axis: isize) -> Tensor {
        let a = norm_axis("cumsum", axis, self.rank()).or_raise();
        let x = if self.dtype() == DType::Bool { self.cast(DType::I64) } else { self.clone() };
        lax::cumsum(&x, a, false).or_raise()
    }

    /// Variance over `axes` with `ddof` delta degrees of freedom (0: the
    /// population variance, 1: the sample variance).
    #[track_caller]
    pub fn var_axes(&self, axes: &[isize], ddof: usize, keepdim: bool) -> Tensor {
        let x = float_of(self).or_raise();
        let shape = x.shape();
        let ax = norm_axes("var", axes, shape.rank()).or_raise();
        let n: usize = ax.iter().map(|&a| shape[a]).product();
        let mu = x.mean_axes(axes, true);
        let d = &x - &mu;
        let ss = (&d * &d).sum_axes(axes, keepdim);
        lax::mul_scalar(&ss, 1.0 / (n.saturating_sub(ddof)) as f64).or_raise()
    }

    /// Population variance of all elements.
    pub fn var(&self) -> Tensor {
        self.var_axes(&all_axes(self), 0, false)
    }

    /// Standard deviation over `axes` (see [`Tensor::var_axes`]).
    #[track_caller]
    pub fn std_axes(&self, axes: &[isize], ddof: usize, keepdim: bool) -> Tensor {
        self.var_axes(axes, ddof, keepdim).sqrt()
    }

    /// The Euclidean (L2) norm of all elements.
    pub fn norm(&self) -> Tensor {
        let x = float_of(self).or_raise();
        (&x * &x).sum().sqrt()
    }

    /// The L2 norm over `axes`.
    #[track_caller]
    pub fn norm_axes(&self, axes: &[isize], keepdim: bool) -> Tensor {
        let x = float_of(self).or_raise();
        (&x * &x).sum_axes(axes, keepdim).sqrt()
    }

    /// `log(sum(exp(x)))` over `axis`, computed stably.
    #[track_caller]
    pub fn logsumexp(&self, axis: isize, keepdim: bool) -> Tensor {
        let x = float_of(self).or_raise();
        // The shift is a constant of the computation: its own gradient
        // cancels, so it is taken without one (as JAX's stop_gradient), of
        // the input, so that no transform computes max's derivative (a tie
        // mask and count) only to drop it. An infinite (or NaN) max shifts by
        // 0 instead (as JAX): -inf - -inf and inf - inf would be NaN, where
        // the sum gives -inf for an all -inf row and inf for one with +inf.
        let m = finite_or_zero(&x.stop_gradient().max_axis(axis, true)).or_raise();
        let s = (&x - &m).exp().sum_axis(axis, true).log() + &m;
        if keepdim {
            s
        } else {
            s.squeeze(axis)
        }
    }
}
