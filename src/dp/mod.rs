//! Differential privacy: per-example gradient norms and clipped gradient
//! sums without per-example gradients, and privacy accounting.
//!
//! [`per_example_grad_norms`] and [`dp_clipped_grad`] take a loss written
//! for a batch that returns one loss per example (`[B]`, PyTorch's
//! `reduction="none"`), and compute what DP-SGD needs from each example's
//! activations and output cotangents ("ghost clipping" and book-keeping),
//! never forming a gradient per example for the weights of products and
//! embedding lookups. [`accountant`] gives the privacy spent.
//!
//! ```
//! use xform::prelude::*;
//! use xform::dp::{dp_clipped_grad, per_example_grad_norms};
//!
//! let key = Key::new(0);
//! let w = key.fold_in(0).normal([4, 3], DType::F32);
//! let (x, y) = (key.fold_in(1).normal([8, 4], DType::F32), key.fold_in(2).randint([8], 0, 3, DType::I32));
//! let loss = |w: &Tensor, (x, y): &(Tensor, Tensor)| xform::nn::softmax_cross_entropy_per_example(&x.matmul(w), y);
//! let batch = (x, y);
//! let norms = per_example_grad_norms(loss)(&w, &batch).norms; // [8]
//! let g = dp_clipped_grad(loss, 1.0)(&w, &batch);
//! let step = g.noisy_mean(&key.fold_in(3), 1.1, 8.0); // DP-SGD's gradient
//! assert_eq!((norms.shape().dims(), step.shape().dims()), (&[8][..], &[4, 3][..]));
//! ```

pub mod accountant;

pub use accountant::{epsilon, noise_multiplier_for_epsilon, RdpAccountant};

pub use xform_transforms::per_example::{
    dp_clipped_grad, dp_clipped_grad_with, per_example_grad_norms, per_example_grad_norms_with, try_dp_clipped_grad,
    try_per_example_grad_norms, ClipSum, DpGrad, DpOptions, GradNorms, NormMethod,
};
