//! A GRU classifier on the UCI digits, each 8x8 image read as 8 time steps
//! of 8 pixels, with per-sample gradients through `scan`.
//!
//! The cell is PyTorch's `nn.GRUCell` (gate blocks in the order r, z, n):
//!
//! ```text
//! r = sigmoid(x W_ir + b_ir + h W_hr + b_hr)
//! z = sigmoid(x W_iz + b_iz + h W_hz + b_hz)
//! n = tanh(x W_in + b_in + r * (h W_hn + b_hn))
//! h' = (1 - z) * n + z * h
//! ```
//!
//! with `W_ih [8, 3H]`, `W_hh [H, 3H]`, `b_ih`, `b_hh [3H]`, `h_0 = 0`, and
//! logits `h_T W_out + b_out`. One example's loss scans the cell over the
//! image's rows (`xform::scan`); `vmap(grad(loss))` gives one gradient per
//! example through the scan (the scan's batch rule batches its carry and
//! xs, its transpose is a reverse scan). Each example's gradient is clipped
//! to norm `CLIP` (DP-SGD's clipping, without the noise) and the mean takes
//! an Adam step.
//!
//! Before training it checks, in f64, that
//! - `vmap(grad)` through the scan equals a loop of `grad` over examples,
//! - `grad` through the scan equals `grad` of the same GRU written as a
//!   Rust `for` loop over time steps,
//! - `jvp` through the scan (forward mode) agrees with `grad`,
//! - the scan's rematerialization options (keep only carries; a carry every
//!   3 steps) give the same gradient,
//!
//! then times `vmap(grad)` against a loop of `grad` on one batch, trains,
//! and asserts the test accuracy.
//!
//! Run: `cargo run --release --example gru_digits`

mod common;
use common::median_time;
use std::time::Instant;
use xform::data::{batches, digits};
use xform::nn::{
    accuracy, clip_by_global_norm, init::uniform, softmax_cross_entropy, tree_cast, tree_dot, tree_map,
    tree_normal_like, tree_sub, unstack, Adam,
};
use xform::prelude::*;
use xform::ScanRemat;

const HIDDEN: usize = 32;
const STEPS: usize = 8; // rows of an image: the time steps
const FEATURES: usize = 8; // pixels per row: the inputs of a step
const CLASSES: usize = 10;
const BATCH: usize = 64;
const EPOCHS: usize = 12;
const CLIP: f64 = 5.0;
const LR: f64 = 1e-2;

/// The GRU's parameters: a pytree, so `grad` of a loss is a `Gru` too.
#[derive(Clone, Debug, Tree)]
struct Gru {
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
    w_out: Tensor,
    b_out: Tensor,
}

impl Gru {
    /// PyTorch's initialization: every weight and bias ~ U(-1/sqrt(H), 1/sqrt(H)).
    fn init(key: &Key) -> Gru {
        let k = key.split(6);
        let b = 1.0 / (HIDDEN as f64).sqrt();
        let u = |i: usize, shape: &[usize]| uniform(&k[i], shape.to_vec(), -b, b, DType::F32);
        Gru {
            w_ih: u(0, &[FEATURES, 3 * HIDDEN]),
            w_hh: u(1, &[HIDDEN, 3 * HIDDEN]),
            b_ih: u(2, &[3 * HIDDEN]),
            b_hh: u(3, &[3 * HIDDEN]),
            w_out: u(4, &[HIDDEN, CLASSES]),
            b_out: u(5, &[CLASSES]),
        }
    }

    /// One step of the cell: `h [.., H]`, `x [.., d]` -> `h' [.., H]`.
    fn cell(&self, h: &Tensor, x: &Tensor) -> Tensor {
        let gi = x.matmul(&self.w_ih) + &self.b_ih;
        let gh = h.matmul(&self.w_hh) + &self.b_hh;
        let gate = |g: &Tensor, k: usize| g.narrow(-1, k * HIDDEN, HIDDEN);
        let r = (gate(&gi, 0) + gate(&gh, 0)).sigmoid();
        let z = (gate(&gi, 1) + gate(&gh, 1)).sigmoid();
        let n = (gate(&gi, 2) + &r * gate(&gh, 2)).tanh();
        (1.0 - &z) * n + z * h
    }

    fn h0(&self) -> Tensor {
        Tensor::zeros([HIDDEN], self.w_hh.dtype())
    }

    /// One image's logits, the time loop a `scan`: `x [T, d]` -> `[C]`.
    fn logits(&self, x: &Tensor, remat: ScanRemat) -> Tensor {
        let opts = ScanOptions { remat, ..ScanOptions::default() };
        let (h, ()) = scan_with(|h: &Tensor, x_t: &Tensor| (self.cell(h, x_t), ()), &self.h0(), x, &opts);
        h.matmul(&self.w_out) + &self.b_out
    }

    /// The same logits with the time loop a Rust `for` loop (unrolled when traced).
    fn logits_unrolled(&self, x: &Tensor) -> Tensor {
        let mut h = self.h0();
        for t in 0..x.dim(0) as isize {
            h = self.cell(&h, &x.index(t));
        }
        h.matmul(&self.w_out) + &self.b_out
    }
}

/// One example's loss: `x [T, d]`, `y` a scalar label.
fn loss(p: &Gru, x: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.logits(x, ScanRemat::SaveResiduals), y)
}

/// Each example's loss and gradient: the losses are `[B]`, and every
/// leaf of the gradients gains a leading axis of the batch size.
fn per_example_grads(p: &Gru, xs: &Tensor, ys: &Tensor) -> (Tensor, Gru) {
    vmap(|(x, y): &(Tensor, Tensor)| value_and_grad(|p: &Gru| loss(p, x, y))(p))(&(xs.clone(), ys.clone()))
}

/// Images `[N, 64]` as sequences `[N, T, d]`: row t of an image is step t.
fn as_sequences(x: &Tensor) -> Tensor {
    x.reshape(&[-1, STEPS as isize, FEATURES as isize])
}

fn test_accuracy(p: &Gru, x: &Tensor, y: &Tensor) -> f64 {
    let logits = vmap(|x: &Tensor| p.logits(x, ScanRemat::SaveResiduals))(x);
    accuracy(&logits, y).item_f64()
}

/// Largest `|a - b|` over all leaves, relative to the largest `|b|`.
fn max_rel_diff(a: &Gru, b: &Gru) -> f64 {
    let d = tree_sub(a, b).leaves().iter().map(|l| l.abs().max().item_f64()).fold(0.0, f64::max);
    let m = b.leaves().iter().map(|l| l.abs().max().item_f64()).fold(0.0, f64::max);
    d / m
}

fn checks(params: &Gru, xs: &Tensor, ys: &Tensor) {
    // f64 copies, so the comparisons measure the transforms and not f32 rounding.
    let p = tree_cast(params, DType::F64);
    let xs = xs.cast(DType::F64);
    let n = xs.dim(0) as isize;

    let each = unstack(&per_example_grads(&p, &xs, ys).1);
    let mut worst = 0.0f64;
    for i in 0..n {
        let g = grad(|p: &Gru| loss(p, &xs.index(i), &ys.index(i)))(&p);
        worst = worst.max(max_rel_diff(&each[i as usize], &g));
    }
    println!("vmap(grad) through scan vs a loop of grad, {n} examples (f64): max relative difference {worst:.1e}");
    assert!(worst < 1e-12, "per-sample gradients through scan differ from a loop of grad");

    let (x, y) = (xs.index(0), ys.index(0));
    let g_scan = grad(|p: &Gru| loss(p, &x, &y))(&p);
    let g_loop = grad(|p: &Gru| softmax_cross_entropy(&p.logits_unrolled(&x), &y))(&p);
    let d = max_rel_diff(&g_scan, &g_loop);
    println!("grad through scan vs grad through a Rust for loop (f64): max relative difference {d:.1e}");
    assert!(d < 1e-12, "grad through scan differs from the unrolled loop");

    // Forward mode through the scan: the jvp along v is <grad, v>.
    let v = tree_normal_like(&Key::new(7), &p);
    let (_, dl) = jvp(|p: &Gru| loss(p, &x, &y), &p, &v);
    let (dl, want) = (dl.item_f64(), tree_dot(&g_scan, &v).item_f64());
    println!("jvp through scan vs <grad, v> (f64): relative difference {:.1e}", (dl - want).abs() / want.abs());
    assert!((dl - want).abs() < 1e-12 * want.abs(), "jvp through scan disagrees with grad");

    for remat in [ScanRemat::SaveCarries, ScanRemat::Every(3)] {
        let g = grad(|p: &Gru| softmax_cross_entropy(&p.logits(&x, remat), &y))(&p);
        let d = max_rel_diff(&g, &g_loop);
        println!("grad through scan with {remat:?} vs the for loop (f64): max relative difference {d:.1e}");
        assert!(d < 1e-12, "grad through scan with {remat:?} differs");
    }
}

fn main() {
    let data = digits();
    let (train_x, test_x) = (as_sequences(&data.train_x), as_sequences(&data.test_x));
    println!(
        "digits: {} training and {} test images, each {STEPS} steps of {FEATURES} pixels; GRU hidden {HIDDEN}",
        train_x.dim(0),
        test_x.dim(0)
    );
    let mut params = Gru::init(&Key::new(0));
    checks(&params, &train_x.narrow(0, 0, 16), &data.train_y.narrow(0, 0, 16));

    // One batch's per-sample gradients: vmap(grad) against a loop of grad.
    let (xb, yb) = (train_x.narrow(0, 0, BATCH), data.train_y.narrow(0, 0, BATCH));
    let t_vmap = median_time(9, || {
        per_example_grads(&params, &xb, &yb);
    });
    let t_loop = median_time(3, || {
        for i in 0..BATCH as isize {
            grad(|p: &Gru| loss(p, &xb.index(i), &yb.index(i)))(&params);
        }
    });
    println!(
        "per-sample gradients, batch {BATCH}: vmap(grad) {:.2} ms, loop of grad {:.2} ms ({:.1}x faster with vmap)",
        t_vmap * 1e3,
        t_loop * 1e3,
        t_loop / t_vmap
    );

    let adam = Adam::new(LR);
    let mut state = adam.init(&params);
    let start = Instant::now();
    let mut acc = 0.0;
    for epoch in 0..EPOCHS {
        let mut loss_sum = 0.0;
        let mut steps = 0;
        for (xb, yb) in batches(&train_x, &data.train_y, BATCH, Some(epoch as u64), true) {
            let (losses, g) = per_example_grads(&params, &xb, &yb);
            let clipped = vmap(|g: &Gru| clip_by_global_norm(g, CLIP))(&g);
            let mean = tree_map(&clipped, |l| l.mean_axis(0, false));
            (params, state) = adam.update(&params, &mean, &state);
            loss_sum += losses.mean().item_f64();
            steps += 1;
        }
        acc = test_accuracy(&params, &test_x, &data.test_y);
        println!(
            "epoch {:2}: mean train loss {:.4}, test accuracy {:.2}%",
            epoch + 1,
            loss_sum / steps as f64,
            acc * 100.0
        );
    }
    println!("trained in {:.1} s; final test accuracy {:.2}%", start.elapsed().as_secs_f64(), acc * 100.0);
    assert!(acc > 0.9, "the GRU should reach 90% test accuracy on the digits");
}
