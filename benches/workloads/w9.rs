//! W9: one data-parallel DP-SGD step of W7 (the W5 CNN, global batch 64,
//! clip norm C = 1.0, Gaussian noise of multiplier 1.0, SGD with learning
//! rate 0.05), the same total work three ways:
//!
//! - `1 process x 1 thread` and `1 process x 2 threads`: the whole batch's
//!   clipped sum in one process (`xform::dp::dp_clipped_grad`);
//! - `2 processes x 1 thread` (run under `mpirun -np 2`, feature `mpi`):
//!   each process's clipped sum over its 32 examples (flattened into one
//!   vector, as DDP's bucket), summed across processes and scattered
//!   (`psum_scatter`), each process adding its half of the noise, the
//!   noisy halves gathered (`all_gather`), and the same update everywhere.
//!   The noise is drawn in two halves from `key.fold_in(0)` and
//!   `fold_in(1)` in every mode, so all three compute the same step.
//!
//! Every process runs the same fixed number of steps (a collective per
//! step: an adaptive repetition count could differ between processes);
//! rank 0 prints the JSON line. `bytes_sent_per_step` is what one process
//! hands the other per step (the other's half of its clipped sum, then its
//! noisy half, without the messages' headers). The peer is
//! `benches/peers/w9_ddp.py` (PyTorch DDP over gloo with Opacus).

use super::{cnn_predict, emit, make_cnn, measure::Stats, xent_rows, CnnParams};
use std::time::Instant;
use xform::distributed::Processes;
use xform::dp::dp_clipped_grad;
use xform::lax::{all_gather, axis_index, psum_scatter};
use xform::prelude::*;

const GLOBAL_BATCH: usize = 64;
const C: f64 = 1.0;
const NOISE: f64 = 1.0;
const LR: f64 = 0.05;
const WARMUP: usize = 3;
const REPS: usize = 15;

fn losses(p: &CnnParams, (x, y): &(Tensor, Tensor)) -> Tensor {
    xent_rows(&cnn_predict(p, x), y)
}

/// Every leaf in one vector, and back.
fn flatten(p: &CnnParams) -> Tensor {
    Tensor::concat(&p.leaves().iter().map(|l| l.reshape(&[-1])).collect::<Vec<_>>(), 0)
}

fn unflatten(like: &CnnParams, flat: &Tensor) -> CnnParams {
    let mut at = 0;
    let leaves: Vec<Tensor> = like
        .leaves()
        .iter()
        .map(|l| {
            let n = l.numel();
            let part = flat.narrow(0, at, n).reshape(&l.shape().dims().iter().map(|&d| d as isize).collect::<Vec<_>>());
            at += n;
            part
        })
        .collect();
    like.with_leaves(leaves.into_iter().collect::<xform::Leaves>())
}

/// The noise of one step in `SHARDS` parts, part `k` drawn from
/// `key.fold_in(k)`: one process draws all, or each of two its own.
const SHARDS: usize = 2;

fn noise_shard(key: &Key, k: usize, n: usize) -> Tensor {
    let len = n / SHARDS;
    key.fold_in(k as u32).normal([len], DType::F32) * (NOISE * C)
}

/// The update from the noisy clipped sum.
fn apply(params: &CnnParams, noisy_sum: &Tensor) -> CnnParams {
    let g = unflatten(params, &(noisy_sum * (1.0 / GLOBAL_BATCH as f64)));
    xform::tree::map2(params, &g, |p, g| p - &(g * LR))
}

/// One step in one process: the whole batch's clipped sum, noised, applied.
fn step_one(params: &CnnParams, batch: &(Tensor, Tensor), key: &Key) -> CnnParams {
    let sum = flatten(&dp_clipped_grad(losses, C)(params, batch).sum);
    let n = sum.numel();
    let noise = Tensor::concat(&(0..SHARDS).map(|k| noise_shard(key, k, n)).collect::<Vec<_>>(), 0);
    apply(params, &(&sum + &noise))
}

/// One step of one of `SHARDS` processes: its examples' clipped sum; the
/// sum over processes scattered (`psum_scatter`: this process gets its
/// part of the total), its part of the noise added, and the noisy parts
/// gathered (`all_gather`), so each process draws half the noise.
fn step_shard(procs: &Processes, params: &CnnParams, batch: &(Tensor, Tensor), key: &Key) -> CnnParams {
    let sum = flatten(&dp_clipped_grad(losses, C)(params, batch).sum);
    let n = sum.numel();
    let noisy = procs.run("procs", || {
        let parts = sum.reshape(&[SHARDS as isize, -1]);
        let mine = psum_scatter(&parts, "procs", 0, false).or_raise();
        let k = axis_index("procs").or_raise().item::<i32>() as usize;
        all_gather(&(&mine + &noise_shard(key, k, n)), "procs", 0, true).or_raise()
    });
    apply(params, &noisy)
}

/// Times `REPS` steps after `WARMUP`, every process the same count.
fn timed(mut f: impl FnMut(usize)) -> Stats {
    let t0 = Instant::now();
    f(0);
    let first = t0.elapsed().as_secs_f64() * 1e3;
    for i in 1..WARMUP {
        f(i);
    }
    let mut times: Vec<f64> = (0..REPS)
        .map(|i| {
            let t = Instant::now();
            f(WARMUP + i);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    Stats {
        median_ms: times[REPS / 2],
        min_ms: times[0],
        max_ms: times[REPS - 1],
        reps: REPS,
        inner: 1,
        first_call_ms: first,
        foreign_cpu: None,
    }
}

fn sizes(procs: usize) -> String {
    format!("{{\"B\": {GLOBAL_BATCH}, \"processes\": {procs}, \"n_params\": 1199882}}")
}

/// Runs W9's modes: the one-process modes when this is the only process,
/// the two-process mode under `mpirun -np 2`.
pub fn w9() {
    let Ok(procs) = xform::distributed::initialize() else {
        eprintln!("W9: MPI could not be initialized");
        return;
    };
    let (rank, n) = (procs.rank(), procs.size());
    let key = Key::new(4);
    let params0 = make_cnn(&key);
    let xs = key.fold_in(100).normal([GLOBAL_BATCH, 1, 28, 28], DType::F32);
    let ys = key.fold_in(101).randint([GLOBAL_BATCH], 0, 10, DType::I32);
    if n == 1 {
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
            let st = pool.install(|| {
                let mut params = params0.clone();
                let batch = (xs.clone(), ys.clone());
                timed(|i| params = step_one(&params, &batch, &key.fold_in(i as u32)))
            });
            emit("W9_dp_sgd_data_parallel", &format!("1 process x {threads} thread(s)"), "float32", &sizes(1), &st, "");
        }
        return;
    }
    // one thread per process; MPI is called from this (the main) thread,
    // so the global pool is set rather than a pool installed
    if rayon::ThreadPoolBuilder::new().num_threads(1).build_global().is_err() {
        eprintln!("W9: the global rayon pool was already built; threads per process: {}", rayon::current_num_threads());
    }
    if n != SHARDS {
        eprintln!("W9: the two-process mode runs on {SHARDS} processes (mpirun -np {SHARDS})");
        return;
    }
    let local = GLOBAL_BATCH / n;
    let mine = (xs.narrow(0, rank * local, local), ys.narrow(0, rank * local, local));
    let mut params = procs.broadcast(&params0, 0).expect("broadcast");
    let st = timed(|i| params = step_shard(&procs, &params, &mine, &key.fold_in(i as u32)));
    // what one process hands the other per step: the other's part of its
    // clipped sum (psum_scatter sends each rank only the part it keeps),
    // then its noisy part (all_gather), as f32, plus headers of under
    // 100 bytes per message
    let n_params = 1_199_882;
    let sent = 2 * (n_params / SHARDS) * std::mem::size_of::<f32>();
    if rank == 0 {
        let extra = format!(", \"bytes_sent_per_step\": {sent}");
        emit("W9_dp_sgd_data_parallel", &format!("{n} processes x 1 thread"), "float32", &sizes(n), &st, &extra);
    }
}
