//! Neural-network helpers over pytrees: layers whose parameters are plain
//! structs, tree utilities, `stack` / `unstack` for ensembles, losses and
//! optimizers as pure functions.
//!
//! - Layers: [`Linear`] and [`Mlp`] (pytrees through
//!   [`impl_tree!`](crate::impl_tree) and `#[derive(Tree)]`; settings such
//!   as an activation, sizes or `eps` are `#[tree(static)]` fields, not
//!   leaves), initialized from a [`Key`](crate::Key)
//!   with PyTorch's default distributions ([`init`] holds the initializers
//!   and fan helpers).
//! - Convolution and pooling: [`Conv1d`], [`Conv2d`], [`Conv3d`] (one generic
//!   [`Conv`] with a [`ConvConfig`]), [`ConvTranspose2d`], [`MaxPool2d`],
//!   [`AvgPool2d`], [`global_avg_pool`], and [`ResidualBlock`].
//! - Normalization: [`LayerNorm`], [`GroupNorm`], [`BatchNorm`] (functional:
//!   [`batch_norm`] takes and returns the running [`BatchNormStats`]; with
//!   statistics across a named `vmap` axis, [`BatchNorm::across`] and
//!   [`batch_norm_across`]).
//! - [`Dropout`] / [`dropout`] with an explicit key, [`Embedding`].
//! - Attention: [`scaled_dot_product_attention`], [`MultiHeadAttention`]
//!   with [`AttentionMasks`], [`causal_mask`].
//! - Trees: the utilities of [`xform::tree`](crate::tree), also here
//!   under the names they had before that module existed: `tree_map` is
//!   [`tree::map`](crate::tree::map), `tree_zip_map` is
//!   [`tree::map2`](crate::tree::map2), and `tree_map3`, `tree_add`,
//!   `tree_sub`, `tree_scale`, `tree_axpy`, `tree_dot`, `tree_norm`,
//!   `tree_lerp`, `tree_average`, `tree_zeros_like`, `tree_ones_like`,
//!   `tree_normal_like`, `tree_numel`, `tree_cast` drop the prefix;
//!   [`clip_by_global_norm`].
//! - Ensembles: [`stack`] (models to one model with a leading axis on
//!   every leaf) and [`unstack`], from [`xform::tree`](crate::tree).
//! - Losses and metrics: [`softmax_cross_entropy`] (and
//!   [`softmax_cross_entropy_per_example`]), [`mse`], [`accuracy`].
//! - Optimizers: [`Sgd`] and [`Adam`], `init(&params)` then
//!   `update(&params, &grads, &state) -> (params, state)`.
//!
//! A training step, a per-example gradient and an ensemble in a few lines:
//!
//! ```
//! use xform::prelude::*;
//! use xform::nn::{softmax_cross_entropy, stack, Adam, Mlp};
//!
//! let x = Key::new(1).normal([32, 8], DType::F32);
//! let y = Key::new(2).randint([32], 0, 4, DType::I32);
//! let params = Mlp::init(&Key::new(0), &[8, 16, 4], DType::F32);
//! let loss = |p: &Mlp, x: &Tensor, y: &Tensor| softmax_cross_entropy(&p.forward(x), y);
//!
//! // One Adam step.
//! let adam = Adam::new(1e-3);
//! let g = grad(|p: &Mlp| loss(p, &x, &y))(&params);
//! let (params, _state) = adam.update(&params, &g, &adam.init(&params));
//!
//! // Per-example gradients: every leaf gains a leading axis of 32.
//! let per_example = vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Mlp| loss(p, x, y))(&params))(&(x.clone(), y));
//! assert_eq!(per_example.layers[0].w.shape().dims(), &[32, 8, 16]);
//!
//! // An ensemble of 4 models evaluated in one call.
//! let models: Vec<Mlp> = Key::new(3).split(4).iter().map(|k| Mlp::init(k, &[8, 16, 4], DType::F32)).collect();
//! let logits = vmap(|m: &Mlp| m.forward(&x))(&stack(&models));
//! assert_eq!(logits.shape().dims(), &[4, 32, 4]);
//! ```

mod attention;
mod conv;
mod dropout;
mod embedding;
pub mod init;
mod layers;
mod loss;
mod norm;
mod optim;
mod pool;
mod residual;

pub use attention::{causal_mask, scaled_dot_product_attention, AttentionMasks, MultiHeadAttention};
pub use conv::{Conv, Conv1d, Conv2d, Conv3d, ConvConfig, ConvTranspose2d};
pub use dropout::{dropout, Dropout};
pub use embedding::Embedding;
pub use layers::{Activation, Linear, Mlp};
pub use loss::{accuracy, mse, softmax_cross_entropy, softmax_cross_entropy_per_example};
pub use norm::{batch_norm, batch_norm_across, BatchNorm, BatchNormStats, GroupNorm, LayerNorm};
pub use optim::{Adam, AdamState, Sgd, SgdState};
pub use pool::{global_avg_pool, AvgPool2d, MaxPool2d};
pub use residual::ResidualBlock;
// The tree utilities' names from before `xform::tree` (many examples and
// programs use them).
pub use crate::tree::{
    add as tree_add, average as tree_average, axpy as tree_axpy, cast as tree_cast, clip_by_global_norm,
    dot as tree_dot, lerp as tree_lerp, map as tree_map, map2 as tree_zip_map, map3 as tree_map3, norm as tree_norm,
    normal_like as tree_normal_like, numel as tree_numel, ones_like as tree_ones_like, scale as tree_scale, stack,
    sub as tree_sub, unstack, zeros_like as tree_zeros_like,
};
