//! Pooling layers: [`MaxPool2d`], [`AvgPool2d`] (PyTorch's defaults: the
//! stride is the window, zero padding, `count_include_pad=True`) and
//! [`global_avg_pool`], on `lax::max_pool` / `lax::avg_pool`
//! (`reduce_window`, whose max-pool VJP routes each window's cotangent to
//! its first maximum, as PyTorch and JAX do; with NaNs, as JAX does: see
//! `lax::reduce_window`).

use crate::lax::{self, Padding};
use crate::{OrRaise, Tensor};

/// 2-D max pooling of `[N, C, H, W]` (or `[C, H, W]`): PyTorch's
/// `MaxPool2d(kernel_size, stride=kernel_size, padding=0)`, padding with
/// -inf.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::MaxPool2d;
///
/// let x = Tensor::from_vec((0..16).map(|i| i as f32).collect::<Vec<_>>(), [1, 1, 4, 4]);
/// assert_eq!(MaxPool2d::new([2, 2]).forward(&x).to_vec::<f32>(), vec![5.0, 7.0, 13.0, 15.0]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, crate::Tree)]
#[tree(crate = crate)]
pub struct MaxPool2d {
    /// Window size.
    #[tree(static)]
    pub kernel: [usize; 2],
    /// Window strides.
    #[tree(static)]
    pub stride: [usize; 2],
    /// Padding per axis, both sides.
    #[tree(static)]
    pub padding: [usize; 2],
}

impl MaxPool2d {
    /// Windows of `kernel` moving by `kernel`, no padding.
    pub fn new(kernel: [usize; 2]) -> MaxPool2d {
        MaxPool2d { kernel, stride: kernel, padding: [0, 0] }
    }

    /// The same layer with strides `stride`.
    pub fn with_stride(mut self, stride: [usize; 2]) -> MaxPool2d {
        self.stride = stride;
        self
    }

    /// The same layer with `padding` on both sides of each axis.
    pub fn with_padding(mut self, padding: [usize; 2]) -> MaxPool2d {
        self.padding = padding;
        self
    }

    /// The pooled input.
    ///
    /// # Panics
    /// On a window larger than the padded input, zero strides or fewer than
    /// two spatial axes (the error names the shapes).
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        lax::max_pool(x, &self.kernel, &self.stride, &Padding::symmetric(&self.padding)).or_raise()
    }
}

/// 2-D average pooling of `[N, C, H, W]` (or `[C, H, W]`): PyTorch's
/// `AvgPool2d(kernel_size, stride=kernel_size, padding=0)`, dividing by the
/// window size with padded zeros counted (`count_include_pad=True`).
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::AvgPool2d;
///
/// let x = Tensor::from_vec((0..16).map(|i| i as f32).collect::<Vec<_>>(), [1, 1, 4, 4]);
/// assert_eq!(AvgPool2d::new([2, 2]).forward(&x).to_vec::<f32>(), vec![2.5, 4.5, 10.5, 12.5]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, crate::Tree)]
#[tree(crate = crate)]
pub struct AvgPool2d {
    /// Window size.
    #[tree(static)]
    pub kernel: [usize; 2],
    /// Window strides.
    #[tree(static)]
    pub stride: [usize; 2],
    /// Padding per axis, both sides (zeros, counted in the average).
    #[tree(static)]
    pub padding: [usize; 2],
}

impl AvgPool2d {
    /// Windows of `kernel` moving by `kernel`, no padding.
    pub fn new(kernel: [usize; 2]) -> AvgPool2d {
        AvgPool2d { kernel, stride: kernel, padding: [0, 0] }
    }

    /// The same layer with strides `stride`.
    pub fn with_stride(mut self, stride: [usize; 2]) -> AvgPool2d {
        self.stride = stride;
        self
    }

    /// The same layer with `padding` on both sides of each axis.
    pub fn with_padding(mut self, padding: [usize; 2]) -> AvgPool2d {
        self.padding = padding;
        self
    }

    /// The pooled input.
    ///
    /// # Panics
    /// As [`MaxPool2d::forward`], and on an integer input.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        lax::avg_pool(x, &self.kernel, &self.stride, &Padding::symmetric(&self.padding)).or_raise()
    }
}

/// Global average pooling: the mean over every axis after the first two
/// (`[N, C, spatial..] -> [N, C]`), PyTorch's `AdaptiveAvgPool2d(1)`
/// followed by a flatten.
///
/// # Panics
/// If `x` has fewer than three axes.
#[track_caller]
pub fn global_avg_pool(x: &Tensor) -> Tensor {
    if x.rank() < 3 {
        crate::Error::shape("global_avg_pool", "expects [batch, channels, spatial..]", &[&x.shape()]).raise();
    }
    let axes: Vec<isize> = (2..x.rank() as isize).collect();
    x.mean_axes(&axes, false)
}
