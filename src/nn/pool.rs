//! Pooling layers: [`MaxPool2d`], [`AvgPool2d`] (PyTorch's defaults: the
//! stride is the window, zero padding, `count_include_pad=True`, which
//! [`AvgPool2d::with_count_include_pad`] turns off) and
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

    /// The pooled input.
    ///
    /// # Panics
    /// On a window larger than the padded input, zero kernel sizes or
    /// strides, a padding over half the kernel (PyTorch refuses it too) or
    /// fewer than two spatial axes (the error names the shapes).
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let padding = self.checked_padding().or_raise();
        lax::max_pool(x, &self.kernel, &self.stride, &padding).or_raise()
    }
}

/// What the two pooling layers share: their window's builders (strides,
/// padding) and the checks of its hyperparameters.
macro_rules! pool_window {
    ($layer:ident) => {
        impl $layer {
            /// The same layer with strides `stride`.
            pub fn with_stride(mut self, stride: [usize; 2]) -> $layer {
                self.stride = stride;
                self
            }

            /// The same layer with `padding` on both sides of each axis.
            pub fn with_padding(mut self, padding: [usize; 2]) -> $layer {
                self.padding = padding;
                self
            }

            /// The window's padding, after PyTorch's checks of the
            /// hyperparameters ([`check_pool`]).
            fn checked_padding(&self) -> crate::Result<Padding> {
                check_pool(stringify!($layer), self.kernel, self.stride, self.padding)?;
                Ok(Padding::symmetric(&self.padding))
            }
        }
    };
}

pool_window!(MaxPool2d);
pool_window!(AvgPool2d);

/// PyTorch's checks of a 2-D pooling layer's hyperparameters (made when
/// the layer runs, as PyTorch makes them): positive kernel sizes and
/// strides, and a padding of at most half the kernel ("pad should be at
/// most half of effective kernel size"), so that no window lies wholly in
/// the padding.
fn check_pool(layer: &str, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> crate::Result<()> {
    if kernel.contains(&0) || stride.contains(&0) {
        return Err(crate::Error::invalid(
            layer,
            format!("kernel sizes {kernel:?} and strides {stride:?} must be positive"),
        ));
    }
    if (0..2).any(|i| padding[i] > kernel[i] / 2) {
        return Err(crate::Error::invalid(
            layer,
            format!("padding {padding:?} must be at most half the kernel {kernel:?} (as PyTorch requires)"),
        ));
    }
    Ok(())
}

/// 2-D average pooling of `[N, C, H, W]` (or `[C, H, W]`): PyTorch's
/// `AvgPool2d(kernel_size, stride=kernel_size, padding=0)`, dividing by the
/// window size with padded zeros counted (`count_include_pad=True`), or,
/// with [`AvgPool2d::with_count_include_pad`]`(false)`, by the number of
/// the window's elements inside the input.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::AvgPool2d;
///
/// let x = Tensor::from_vec((0..16).map(|i| i as f32).collect::<Vec<_>>(), [1, 1, 4, 4]);
/// assert_eq!(AvgPool2d::new([2, 2]).forward(&x).to_vec::<f32>(), vec![2.5, 4.5, 10.5, 12.5]);
/// // A corner window holds one input element and three padded zeros.
/// let padded = AvgPool2d::new([2, 2]).with_padding([1, 1]);
/// assert_eq!(padded.forward(&x).to_vec::<f32>()[0], 0.0 / 4.0);
/// assert_eq!(padded.with_count_include_pad(false).forward(&(&x + 1.0)).to_vec::<f32>()[0], 1.0);
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
    /// Padding per axis, both sides (zeros).
    #[tree(static)]
    pub padding: [usize; 2],
    /// Whether padded elements count in the average (PyTorch's
    /// `count_include_pad`; `true` by default): if not, each window's sum
    /// is divided by the number of its elements inside the input.
    #[tree(static)]
    pub count_include_pad: bool,
}

impl AvgPool2d {
    /// Windows of `kernel` moving by `kernel`, no padding, padding counted.
    pub fn new(kernel: [usize; 2]) -> AvgPool2d {
        AvgPool2d { kernel, stride: kernel, padding: [0, 0], count_include_pad: true }
    }

    /// The same layer, counting padded elements in the average or not
    /// (PyTorch's `count_include_pad`).
    pub fn with_count_include_pad(mut self, count_include_pad: bool) -> AvgPool2d {
        self.count_include_pad = count_include_pad;
        self
    }

    /// The pooled input.
    ///
    /// # Panics
    /// As [`MaxPool2d::forward`], and on an integer input.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let padding = self.checked_padding().or_raise();
        lax::avg_pool_with(x, &self.kernel, &self.stride, &padding, self.count_include_pad).or_raise()
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
