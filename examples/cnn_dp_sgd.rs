//! Per-sample gradients of a small CNN, with DP-SGD clipping, on the UCI
//! handwritten digits seen as 1x8x8 images.
//!
//! The model is conv(1->8, 3x3, pad 1) - relu - max pool 2 - conv(8->16,
//! 3x3, pad 1) - relu - max pool 2 - linear(64->10). Each step takes one
//! gradient per example with `vmap(grad(loss))`: the batch rule of the
//! convolution folds the examples into grouped convolutions, so there is
//! no loop over the examples. Each example's gradient is clipped to a
//! global norm of at most `CLIP`, the clipped gradients are summed,
//! Gaussian noise of standard deviation `NOISE * CLIP` is added, and the
//! average takes an SGD step. It checks the per-sample gradients against a
//! loop of `grad`, times both, and prints the test accuracy per epoch.
//!
//! (The privacy budget epsilon needs a privacy accountant, which is
//! independent of how the gradients are computed.)
//!
//! Run: `cargo run --release --example cnn_dp_sgd`

mod common;
use common::median_time;
use std::time::Instant;
use xform::data::{batches, digits};
use xform::nn::{
    accuracy, clip_by_global_norm, softmax_cross_entropy, tree_add, tree_map, tree_normal_like, tree_scale, tree_sub,
    unstack, Conv2d, Linear, MaxPool2d, Sgd,
};
use xform::prelude::*;

const BATCH: usize = 64;
const EPOCHS: usize = 20;
const CLIP: f64 = 1.0;
const NOISE: f64 = 0.8;
const LR: f64 = 0.5;

/// The CNN's parameters: a pytree, so `grad` of a loss is a `Cnn` too.
#[derive(Clone, Debug, Tree)]
struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    head: Linear,
}

impl Cnn {
    fn init(key: &Key) -> Cnn {
        let k = key.split(3);
        Cnn {
            conv1: Conv2d::init(&k[0], 1, 8, [3, 3], DType::F32).with_padding([1, 1]),
            conv2: Conv2d::init(&k[1], 8, 16, [3, 3], DType::F32).with_padding([1, 1]),
            head: Linear::init(&k[2], 16 * 2 * 2, 10, DType::F32),
        }
    }

    /// Logits of images `[N, 64]` (or one image `[64]`).
    fn forward(&self, x: &Tensor) -> Tensor {
        let one = x.rank() == 1;
        let x = x.reshape(&[-1, 1, 8, 8]);
        let pool = MaxPool2d::new([2, 2]);
        let h = pool.forward(&self.conv1.forward(&x).relu());
        let h = pool.forward(&self.conv2.forward(&h).relu());
        let logits = self.head.forward(&h.reshape(&[h.dim(0) as isize, -1]));
        if one {
            logits.squeeze(0)
        } else {
            logits
        }
    }
}

fn loss(p: &Cnn, x: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.forward(x), y)
}

/// One gradient per example: every leaf gains a leading axis of the batch size.
fn per_example_grads(params: &Cnn, xs: &Tensor, ys: &Tensor) -> Cnn {
    vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Cnn| loss(p, x, y))(params))(&(xs.clone(), ys.clone()))
}

/// The DP-SGD gradient: clip per example, sum, add noise, average.
fn private_grad(params: &Cnn, xs: &Tensor, ys: &Tensor, key: &Key) -> Cnn {
    let g = per_example_grads(params, xs, ys);
    let clipped = vmap(|g: &Cnn| clip_by_global_norm(g, CLIP))(&g);
    let summed = tree_map(&clipped, |l| l.sum_axis(0, false));
    let noise = tree_scale(&tree_normal_like(key, &summed), NOISE * CLIP);
    tree_scale(&tree_add(&summed, &noise), 1.0 / xs.dim(0) as f64)
}

fn main() {
    let data = digits();
    println!("digits: {} training and {} test images of 1x8x8", data.train_x.dim(0), data.test_x.dim(0));
    let mut params = Cnn::init(&Key::new(0));
    let sgd = Sgd::new(LR);
    let mut state = sgd.init(&params);

    // 1. Per-sample gradients equal a loop of grad.
    let (xb, yb) = (data.train_x.narrow(0, 0, BATCH), data.train_y.narrow(0, 0, BATCH));
    let each = unstack(&per_example_grads(&params, &xb, &yb));
    let mut worst = 0.0f64;
    for i in 0..8 {
        let gi = grad(|p: &Cnn| loss(p, &xb.index(i), &yb.index(i)))(&params);
        for (d, g) in tree_sub(&gi, &each[i as usize]).leaves().iter().zip(gi.leaves()) {
            worst = worst.max(d.abs().max().item_f64() / (1e-3 + g.abs().max().item_f64()));
        }
    }
    println!("per-sample gradients vs a loop of grad on 8 examples: max relative difference = {worst:.2e}");
    assert!(worst < 1e-4, "per-sample gradients differ from a loop of grad");

    // 2. vmap(grad) against a loop of grad.
    let t_vmap = median_time(9, || {
        per_example_grads(&params, &xb, &yb);
    });
    let t_loop = median_time(3, || {
        for i in 0..BATCH as isize {
            grad(|p: &Cnn| loss(p, &xb.index(i), &yb.index(i)))(&params);
        }
    });
    println!(
        "per-sample gradients, batch {BATCH}: vmap(grad) {:.2} ms, loop of grad {:.2} ms ({:.1}x faster with vmap)",
        t_vmap * 1e3,
        t_loop * 1e3,
        t_loop / t_vmap
    );

    // 3. DP-SGD training.
    println!("DP-SGD: batch {BATCH}, clip {CLIP}, noise multiplier {NOISE}, lr {LR}");
    let key = Key::new(42);
    let mut step = 0u32;
    let mut acc = 0.0;
    let start = Instant::now();
    for epoch in 0..EPOCHS {
        for (xb, yb) in batches(&data.train_x, &data.train_y, BATCH, Some(epoch as u64), true) {
            let g = private_grad(&params, &xb, &yb, &key.fold_in(step));
            (params, state) = sgd.update(&params, &g, &state);
            step += 1;
        }
        acc = accuracy(&params.forward(&data.test_x), &data.test_y).item_f64();
        let train_loss = loss(&params, &data.train_x, &data.train_y).item_f64();
        println!("epoch {:2}: train loss {train_loss:.4}, test accuracy {:.2}%", epoch + 1, acc * 100.0);
    }
    println!("trained in {:.2} s; final test accuracy {:.2}%", start.elapsed().as_secs_f64(), acc * 100.0);
    assert!(acc > 0.85, "DP-SGD on the CNN should reach 85% test accuracy on the digits");
}
