//! DP-SGD on the digits CNN across MPI processes (feature `mpi`):
//!
//! `mpirun -np 2 target/release/examples/dp_sgd_mpi` (build it with
//! `cargo build --release --features mpi --example dp_sgd_mpi`).
//!
//! Every process draws the same Poisson batch from one key stream and
//! takes its share of the rows (rank `r` of `P` takes a contiguous `1/P`
//! of them); each computes the clipped sum of its examples' gradients
//! (`dp_clipped_grad`), the sums are all-reduced across the processes
//! (`psum` over the process axis), and the Gaussian noise is added once, to
//! the reduced sum, from the shared key stream, so every process takes the
//! same step and holds the same parameters, and the privacy spent (one
//! accountant step per batch, sampling rate `q`, noise multiplier
//! `NOISE`) is that of the single-process run: the same mechanism, with
//! its work split.
//!
//! Rank 0 checks the two places the runs can differ. At every step, the
//! all-reduced clipped sum equals the single-process one to within float32
//! reduction-order error: the only difference is that the batch's clipped
//! gradients are added up in `P` partial sums, then summed, instead of in
//! one sum; for a sum of at most ~100 terms of one sign that is at most
//! ~100 ulps of the sum's largest element, and `STEP_TOL` (1e-5, relative
//! to it; measured: about 1e-7) bounds it. At the end rank 0 replays the
//! training in one process: the parameters agree to within `TOL` (1e-3
//! relative to their largest magnitude; measured 2e-7 after 3 epochs and
//! 3e-4 after 10), a looser bound because those per-step rounding
//! differences are amplified by training where the model is not smooth (a
//! relu or max-pool that switches), not because the mechanism differs.

use xform::data::{digits, poisson_batches};
use xform::dp::accountant::RdpAccountant;
use xform::dp::dp_clipped_grad;
use xform::lax::psum;
use xform::nn::{accuracy, softmax_cross_entropy_per_example, Conv2d, Linear, MaxPool2d, Sgd};
use xform::prelude::*;

const BATCH: usize = 64;
const EPOCHS: usize = 10;
const CLIP: f64 = 1.0;
const NOISE: f64 = 0.8;
const LR: f64 = 0.5;
const DELTA: f64 = 1e-5;
/// The largest difference of a step's reduced clipped sum from the
/// single-process one, relative to its largest element.
const STEP_TOL: f64 = 1e-5;
/// The largest difference of the final parameters from the single-process
/// run, relative to their largest magnitude (see the module documentation).
const TOL: f64 = 1e-3;

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

    fn forward(&self, x: &Tensor) -> Tensor {
        let x = x.reshape(&[-1, 1, 8, 8]);
        let pool = MaxPool2d::new([2, 2]);
        let h = pool.forward(&self.conv1.forward(&x).relu());
        let h = pool.forward(&self.conv2.forward(&h).relu());
        self.head.forward(&h.reshape(&[h.dim(0) as isize, -1]))
    }
}

fn losses(p: &Cnn, (x, y): &(Tensor, Tensor)) -> Tensor {
    softmax_cross_entropy_per_example(&p.forward(x), y)
}

/// Rows `[rank/P, (rank+1)/P)` of a batch.
fn share((x, y): &(Tensor, Tensor), rank: usize, procs: usize) -> (Tensor, Tensor) {
    let b = x.dim(0);
    let (lo, hi) = (b * rank / procs, b * (rank + 1) / procs);
    (x.narrow(0, lo, hi - lo), y.narrow(0, lo, hi - lo))
}

/// Trains with the clipped sum computed by `clipped_sum`; returns the
/// parameters and the epsilon spent.
fn train(clipped_sum: &dyn Fn(&Cnn, &(Tensor, Tensor)) -> Cnn) -> (Cnn, f64) {
    let data = digits();
    let q = BATCH as f64 / data.train_x.dim(0) as f64;
    let mut params = Cnn::init(&Key::new(0));
    let sgd = Sgd::new(LR);
    let mut state = sgd.init(&params);
    let key = Key::new(42);
    let mut accountant = RdpAccountant::new();
    let mut step = 0u32;
    for epoch in 0..EPOCHS {
        for batch in poisson_batches(&data.train_x, &data.train_y, q, &key.fold_in(1_000_000 + epoch as u32)) {
            let sum = clipped_sum(&params, &batch);
            // the noise, once, on the reduced sum: the same draw everywhere
            let keys = key.fold_in(step).split(sum.leaves().len());
            let noisy: Vec<Tensor> = sum
                .leaves()
                .iter()
                .zip(&keys)
                .map(|(l, k)| (l + &(k.normal(l.shape(), l.dtype()) * (NOISE * CLIP))) * (1.0 / BATCH as f64))
                .collect();
            (params, state) = sgd.update(&params, &sum.with_leaves(noisy), &state);
            accountant.step(NOISE, q).expect("valid accountant step");
            step += 1;
        }
    }
    (params, accountant.epsilon(DELTA).expect("epsilon"))
}

/// Every parameter in one vector.
fn flat(c: &Cnn) -> Tensor {
    Tensor::concat(&c.leaves().iter().map(|l| l.reshape(&[-1])).collect::<Vec<_>>(), 0)
}

fn main() {
    let procs = xform::distributed::initialize().expect("MPI");
    let (rank, p) = (procs.rank(), procs.size());
    let private = dp_clipped_grad(losses, CLIP);
    let worst_step = std::cell::Cell::new(0.0f64);
    // each process's clipped sum over its share, all-reduced
    let distributed = |params: &Cnn, batch: &(Tensor, Tensor)| {
        let mine = share(batch, rank, p);
        let local =
            if mine.0.dim(0) == 0 { xform::tree::map(params, |l| l.zeros_like()) } else { private(params, &mine).sum };
        let reduced = procs.run("procs", || xform::tree::map(&local, |l| psum(l, "procs").or_raise()));
        if rank == 0 {
            let whole = private(params, batch).sum;
            let (a, b) = (flat(&reduced), flat(&whole));
            let rel = (&a - &b).abs().max().item_f64() / b.abs().max().item_f64().max(f64::MIN_POSITIVE);
            worst_step.set(worst_step.get().max(rel));
        }
        reduced
    };
    let (params, eps) = train(&distributed);
    let data = digits();
    let acc = accuracy(&params.forward(&data.test_x), &data.test_y).item_f64();
    println!(
        "rank {rank} of {p}: {EPOCHS} epochs, test accuracy {:.2}%, epsilon {eps:.3} at delta {DELTA:e}",
        acc * 100.0
    );

    // every process holds the same parameters
    let from_root = procs.broadcast(&params, 0).expect("broadcast");
    assert_eq!(flat(&from_root).to_vec::<f32>(), flat(&params).to_vec::<f32>(), "rank {rank} diverged");

    if rank == 0 {
        let worst = worst_step.get();
        println!("every step's reduced clipped sum vs one process's: largest difference {worst:.2e} (relative; bound {STEP_TOL:e})");
        assert!(worst <= STEP_TOL, "a step's reduced clipped sum differs by {worst:e}");
        // the same training in one process
        let (single, eps1) = train(&|params: &Cnn, batch: &(Tensor, Tensor)| private(params, batch).sum);
        let (a, b) = (flat(&params), flat(&single));
        let rel = (&a - &b).abs().max().item_f64() / b.abs().max().item_f64();
        println!("single process: epsilon {eps1:.3}; largest parameter difference {rel:.2e} (relative; bound {TOL:e})");
        assert_eq!(eps, eps1);
        assert!(rel <= TOL, "the {p}-process run differs from the single-process run by {rel:e}");
    }
}
