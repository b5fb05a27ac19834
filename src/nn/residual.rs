//! [`ResidualBlock`]: ResNet's basic block with GroupNorm (per-example
//! statistics, so it stays valid under per-sample gradients and DP-SGD,
//! where BatchNorm mixes the examples of a batch).

use super::{Conv2d, GroupNorm};
use crate::{DType, Error, Key, Tensor};

/// `relu(norm2(conv2(relu(norm1(conv1(x))))) + shortcut(x))`, with 3x3
/// convolutions without bias (the first one strided), GroupNorm after each,
/// and a strided 1x1 convolution as the shortcut where the channels or the
/// resolution change (the identity otherwise): ResNet's `BasicBlock` with
/// GroupNorm in place of BatchNorm.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::ResidualBlock;
///
/// let block = ResidualBlock::init(&Key::new(0), 4, 8, 2, 2, DType::F32);
/// let x = Key::new(1).normal([3, 4, 8, 8], DType::F32);
/// assert_eq!(block.forward(&x).shape().dims(), &[3, 8, 4, 4]);
/// ```
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct ResidualBlock {
    /// The first 3x3 convolution (strided).
    pub conv1: Conv2d,
    /// GroupNorm after it.
    pub norm1: GroupNorm,
    /// The second 3x3 convolution.
    pub conv2: Conv2d,
    /// GroupNorm after it.
    pub norm2: GroupNorm,
    /// The 1x1 projection of the input, where the shape changes.
    pub shortcut: Option<Conv2d>,
}

impl ResidualBlock {
    /// A block from `in_channels` to `out_channels` with the first
    /// convolution's stride `stride` and `groups` GroupNorm groups; PyTorch's
    /// default initialization for the convolutions, ones and zeros for the
    /// norms.
    ///
    /// # Panics
    /// If `out_channels` is not divisible by `groups`, a size is zero, or
    /// `dtype` is not a float type.
    #[track_caller]
    pub fn init(
        key: &Key,
        in_channels: usize,
        out_channels: usize,
        stride: usize,
        groups: usize,
        dtype: DType,
    ) -> ResidualBlock {
        if stride == 0 {
            Error::invalid("ResidualBlock::init", "stride must be positive").raise();
        }
        let k = key.split(3);
        let conv3 = |k: &Key, cin: usize, s: usize| {
            Conv2d::init(k, cin, out_channels, [3, 3], dtype).with_stride([s, s]).with_padding([1, 1]).without_bias()
        };
        let shortcut = (in_channels != out_channels || stride != 1).then(|| {
            Conv2d::init(&k[2], in_channels, out_channels, [1, 1], dtype).with_stride([stride, stride]).without_bias()
        });
        ResidualBlock {
            conv1: conv3(&k[0], in_channels, stride),
            norm1: GroupNorm::new(groups, out_channels, dtype),
            conv2: conv3(&k[1], out_channels, 1),
            norm2: GroupNorm::new(groups, out_channels, dtype),
            shortcut,
        }
    }

    /// The block applied to `[batch, in_channels, H, W]`.
    ///
    /// # Panics
    /// On a shape the layers refuse (the error names the layer).
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.norm1.forward(&self.conv1.forward(x)).relu();
        let h = self.norm2.forward(&self.conv2.forward(&h));
        let skip = self.shortcut.as_ref().map_or_else(|| x.clone(), |s| s.forward(x));
        (h + skip).relu()
    }
}
