//! DP-SGD on a small CNN, on the UCI handwritten digits seen as 1x8x8
//! images, with the privacy spent printed per epoch.
//!
//! The model is conv(1->8, 3x3, pad 1) - relu - max pool 2 - conv(8->16,
//! 3x3, pad 1) - relu - max pool 2 - linear(64->10). Each step draws a
//! batch by Poisson sampling (every example independently with probability
//! `q`, as the accountant assumes), and `dp_clipped_grad` sums the
//! examples' gradients each clipped to a norm of at most `CLIP` without
//! forming them one per example (the head's weight gradient is never formed
//! per example; the convolutions' are, as they are small). Gaussian noise of
//! standard deviation `NOISE * CLIP` is added and the sum divided by the
//! expected batch size; the RDP accountant gives epsilon at `DELTA` after
//! each epoch. It first checks `dp_clipped_grad` against `vmap(grad)`,
//! clip and sum, and times both.
//!
//! Run: `cargo run --release --example cnn_dp_sgd`

mod common;
use common::median_time;
use std::time::Instant;
use xform::data::{digits, poisson_batches};
use xform::dp::accountant::RdpAccountant;
use xform::dp::dp_clipped_grad;
use xform::nn::{accuracy, clip_by_global_norm, softmax_cross_entropy_per_example, Conv2d, Linear, MaxPool2d, Sgd};
use xform::prelude::*;

/// The expected batch size (the sampling rate is this over the data set's size).
const BATCH: usize = 64;
const EPOCHS: usize = 20;
const CLIP: f64 = 1.0;
const NOISE: f64 = 0.8;
const LR: f64 = 0.5;
const DELTA: f64 = 1e-5;

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

/// One loss per example, `[B]`: what `dp_clipped_grad` differentiates.
fn losses(p: &Cnn, (x, y): &(Tensor, Tensor)) -> Tensor {
    softmax_cross_entropy_per_example(&p.forward(x), y)
}

/// The clipped sum the slow way: every example's gradient by `vmap(grad)`,
/// each clipped, summed.
fn clipped_sum_by_vmap(params: &Cnn, batch: &(Tensor, Tensor)) -> Cnn {
    let each = vmap(|(x, y): &(Tensor, Tensor)| {
        let g = grad(|p: &Cnn| softmax_cross_entropy_per_example(&p.forward(&x.unsqueeze(0)), &y.unsqueeze(0)).sum())(
            params,
        );
        clip_by_global_norm(&g, CLIP)
    })(batch);
    xform::tree::map(&each, |l| l.sum_axis(0, false))
}

fn main() {
    let data = digits();
    let n = data.train_x.dim(0);
    let q = BATCH as f64 / n as f64;
    println!("digits: {n} training and {} test images of 1x8x8", data.test_x.dim(0));
    let mut params = Cnn::init(&Key::new(0));
    let sgd = Sgd::new(LR);
    let mut state = sgd.init(&params);
    let private = dp_clipped_grad(losses, CLIP);

    // 1. dp_clipped_grad equals vmap(grad) + clip + sum.
    let batch = (data.train_x.narrow(0, 0, BATCH), data.train_y.narrow(0, 0, BATCH));
    let fast = private(&params, &batch);
    let slow = clipped_sum_by_vmap(&params, &batch);
    let mut worst = 0.0f64;
    for (a, b) in fast.sum.leaves().iter().zip(slow.leaves().iter()) {
        worst = worst.max((a - b).abs().max().item_f64() / b.abs().max().item_f64());
    }
    let clipped = fast.norms.gt_scalar(CLIP).cast(DType::F32).sum().item_f64();
    println!(
        "clipped sum of {BATCH} examples ({clipped} clipped): dp_clipped_grad vs vmap(grad) + clip + sum, max relative difference {worst:.2e}"
    );
    assert!(worst < 1e-4, "dp_clipped_grad differs from vmap(grad) + clip + sum");
    let t_fast = median_time(9, || drop(private(&params, &batch)));
    let t_slow = median_time(9, || drop(clipped_sum_by_vmap(&params, &batch)));
    println!("  dp_clipped_grad {:.2} ms, vmap(grad) + clip + sum {:.2} ms", t_fast * 1e3, t_slow * 1e3);

    // 2. DP-SGD: Poisson batches, clipped sum, noise, expected-size mean.
    println!("DP-SGD: sampling rate {q:.4} (expected batch {BATCH}), clip {CLIP}, noise multiplier {NOISE}, lr {LR}");
    let key = Key::new(42);
    let mut accountant = RdpAccountant::new();
    let mut step = 0u32;
    let mut acc = 0.0;
    let start = Instant::now();
    for epoch in 0..EPOCHS {
        for batch in poisson_batches(&data.train_x, &data.train_y, q, &key.fold_in(1_000_000 + epoch as u32)) {
            let g = private(&params, &batch).noisy_mean(&key.fold_in(step), NOISE, BATCH as f64);
            (params, state) = sgd.update(&params, &g, &state);
            accountant.step(NOISE, q).expect("valid accountant step");
            step += 1;
        }
        acc = accuracy(&params.forward(&data.test_x), &data.test_y).item_f64();
        let train_loss = losses(&params, &(data.train_x.clone(), data.train_y.clone())).mean().item_f64();
        let eps = accountant.epsilon(DELTA).expect("epsilon");
        println!(
            "epoch {:2}: train loss {train_loss:.4}, test accuracy {:.2}%, epsilon {eps:.3} at delta {DELTA:e}",
            epoch + 1,
            acc * 100.0
        );
    }
    println!("trained in {:.2} s; final test accuracy {:.2}%", start.elapsed().as_secs_f64(), acc * 100.0);
    assert!(acc > 0.85, "DP-SGD on the CNN should reach 85% test accuracy on the digits");
}
