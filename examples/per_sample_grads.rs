//! Per-sample gradients: differentially private SGD (DP-SGD, Abadi et al.
//! 2016) on the UCI handwritten digits.
//!
//! Each step takes one gradient per example with `vmap(grad(loss))` (no
//! loop over the examples), clips each example's gradient to a global norm
//! of at most `CLIP`, sums them, adds Gaussian noise of standard deviation
//! `NOISE * CLIP`, averages, and takes an SGD step. It prints the test
//! accuracy per epoch, the throughput of per-sample gradients against a
//! loop of `grad` and against one ordinary (batch-mean) gradient, and
//! checks that the per-sample gradients equal a loop of `grad`.
//!
//! (The privacy budget epsilon is not computed here: that needs a privacy
//! accountant, which is independent of how the gradients are computed.)
//!
//! Run: `cargo run --release --example per_sample_grads`

mod common;
use common::median_time;
use std::time::Instant;
use xform::data::{batches, digits};
use xform::nn::{
    accuracy, clip_by_global_norm, softmax_cross_entropy, tree_add, tree_map, tree_normal_like, tree_scale, tree_sub,
    unstack, Mlp, Sgd,
};
use xform::prelude::*;

const BATCH: usize = 64;
const EPOCHS: usize = 12;
const CLIP: f64 = 1.0;
const NOISE: f64 = 1.0;
const LR: f64 = 1.0;

/// The loss of one example (`x: [64]`, `y`: a scalar label) or of a batch.
fn loss(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.forward(x), y)
}

/// One gradient per example: every leaf of the result has a leading axis
/// of the batch size. The parameters are captured (not batched); the
/// examples are mapped.
fn per_example_grads(params: &Mlp, xs: &Tensor, ys: &Tensor) -> Mlp {
    vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Mlp| loss(p, x, y))(params))(&(xs.clone(), ys.clone()))
}

/// The DP-SGD gradient: clip per example, sum, add noise, average.
fn private_grad(params: &Mlp, xs: &Tensor, ys: &Tensor, key: &Key) -> Mlp {
    let g = per_example_grads(params, xs, ys);
    let clipped = vmap(|g: &Mlp| clip_by_global_norm(g, CLIP))(&g);
    let summed = tree_map(&clipped, |l| l.sum_axis(0, false));
    let noise = tree_scale(&tree_normal_like(key, &summed), NOISE * CLIP);
    tree_scale(&tree_add(&summed, &noise), 1.0 / xs.dim(0) as f64)
}

fn main() {
    let data = digits();
    println!("digits: {} training and {} test images of 8x8 pixels", data.train_x.dim(0), data.test_x.dim(0));
    let mut params = Mlp::init(&Key::new(0), &[64, 32, 10], DType::F32);
    let sgd = Sgd::new(LR);
    let mut state = sgd.init(&params);

    // 1. Per-sample gradients equal a loop of grad.
    let (xb, yb) = (data.train_x.narrow(0, 0, BATCH), data.train_y.narrow(0, 0, BATCH));
    let each = unstack(&per_example_grads(&params, &xb, &yb)); // BATCH trees like `params`
    let mut worst = 0.0f64;
    for i in 0..4 {
        let gi = grad(|p: &Mlp| loss(p, &xb.index(i), &yb.index(i)))(&params);
        let diff = tree_sub(&gi, &each[i as usize]);
        for l in diff.leaves() {
            worst = worst.max(l.abs().max().item_f64());
        }
    }
    println!("per-sample gradients vs a loop of grad on 4 examples: max |difference| = {worst:.2e}");
    assert!(worst < 1e-5, "per-sample gradients differ from a loop of grad");

    // 2. Throughput: vmap(grad) against a loop of grad and one batch gradient.
    let reps = 15;
    let t_vmap = median_time(reps, || {
        per_example_grads(&params, &xb, &yb);
    });
    let t_loop = median_time(3, || {
        for i in 0..BATCH as isize {
            grad(|p: &Mlp| loss(p, &xb.index(i), &yb.index(i)))(&params);
        }
    });
    let t_batch = median_time(reps, || {
        grad(|p: &Mlp| loss(p, &xb, &yb))(&params);
    });
    println!(
        "per-sample gradients, batch {BATCH}: vmap(grad) {:.0} examples/s ({:.3} ms/batch); \
         loop of grad {:.0} examples/s ({:.1}x slower); one batch-mean gradient takes {:.3} ms (vmap(grad) costs {:.2}x that)",
        BATCH as f64 / t_vmap,
        t_vmap * 1e3,
        BATCH as f64 / t_loop,
        t_loop / t_vmap,
        t_batch * 1e3,
        t_vmap / t_batch
    );

    // 3. DP-SGD training.
    println!("DP-SGD: batch {BATCH}, clip {CLIP}, noise multiplier {NOISE}, lr {LR}");
    let key = Key::new(42);
    let start = Instant::now();
    let mut step = 0u32;
    let mut acc = 0.0;
    for epoch in 0..EPOCHS {
        let t0 = Instant::now();
        for (xb, yb) in batches(&data.train_x, &data.train_y, BATCH, Some(epoch as u64), true) {
            let g = private_grad(&params, &xb, &yb, &key.fold_in(step));
            (params, state) = sgd.update(&params, &g, &state);
            step += 1;
        }
        let dt = t0.elapsed().as_secs_f64();
        acc = accuracy(&params.forward(&data.test_x), &data.test_y).item_f64();
        let train_loss = loss(&params, &data.train_x, &data.train_y).item_f64();
        println!(
            "epoch {:2}: train loss {train_loss:.4}, test accuracy {:.2}%  ({:.0} examples/s)",
            epoch + 1,
            acc * 100.0,
            (data.train_x.dim(0) / BATCH * BATCH) as f64 / dt
        );
    }
    println!("trained in {:.2} s; final test accuracy {:.2}%", start.elapsed().as_secs_f64(), acc * 100.0);
    assert!(acc > 0.85, "DP-SGD should reach 85% test accuracy on the digits");
}
