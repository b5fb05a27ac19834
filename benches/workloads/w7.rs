//! W7: one DP-SGD gradient, as `shared/bench/peers.py`'s `run_w7`: each
//! example's gradient clipped to global L2 norm C with Opacus's factor
//! `min(1, C / (norm + 1e-6))`, summed and divided by B (no noise), beside
//! the non-private batch gradient of the same model. On the W5 CNN
//! (`W7_dp_sgd_step`, B=32) and on the W1 medium MLP (`W7_dp_sgd_step_mlp`,
//! B=256, d_in=784, h=256, c=10), f32, C=1.0.
//!
//! Each mode also records `peak_rss_growth_mb` and
//! `first_call_peak_rss_growth_mb`, measured as peers.py's `rss_probe`, in a
//! fresh process: this binary re-executed with `XFORM_W7_PROBE` (the
//! workload) and `XFORM_W7_PROBE_MODE` set (see [`rss_probe`]).

use super::{cnn_loss_one, cnn_predict, emit, loss_one, make_cnn, make_mlp, measure, mlp_sizes, predict, xent_rows};
use super::{CnnParams, Params};
use xform::dp::{dp_clipped_grad_with, ClipSum, DpOptions};
use xform::prelude::*;
use xform::tree;

/// The clip norm C of both workloads.
const C: f64 = 1.0;
/// The name of the non-private reference mode.
const BATCH_REF: &str = "grad(mean loss) batch ref";
/// Environment variables naming the workload and mode a probe child measures.
const PROBE_VAR: &str = "XFORM_W7_PROBE";
const PROBE_MODE_VAR: &str = "XFORM_W7_PROBE_MODE";

/// A W7 mode: its name and its step, which returns the (clipped) mean gradient.
type Mode<'a, T> = (&'static str, Box<dyn Fn() -> T + 'a>);

/// A W7 model: its per-example gradients (for the log) and its modes at a
/// given clip norm. Adding a mode is one entry in `modes`.
struct Model<'a, T> {
    workload: &'static str,
    /// JSON object of the sizes (C is added by [`run`]).
    sizes: String,
    /// vmap(grad): the per-example gradients, leaves `[B, ...]`.
    psg: Box<dyn Fn() -> T + 'a>,
    modes: Box<dyn Fn(f64) -> Vec<Mode<'a, T>> + 'a>,
}

/// Opacus's per-example clipped mean, from per-example gradients `gs`
/// (each leaf with a leading batch axis B): `(1/B) sum_i f_i g_i` with
/// `f_i = min(1, C / (||g_i|| + 1e-6))` and `||g_i||` the L2 norm of
/// example i's gradient over all leaves (peers.py's `j_clip_mean`).
fn clipped_mean<T: Tree>(gs: &T, c: f64) -> T {
    let b = gs.leaves()[0].dim(0);
    let f = (c / (per_example_norms(gs) + 1e-6)).minimum_scalar(1.0) / b as f64;
    // One [B] x [B, n] product per leaf.
    tree::map(gs, |g| {
        let shape: Vec<isize> = g.shape().dims()[1..].iter().map(|&d| d as isize).collect();
        f.matmul(&g.reshape(&[b as isize, -1])).reshape(&shape)
    })
}

/// Elements per temporary of squares in [`per_example_norms`] (8 MB in f32).
const NORM_CHUNK: usize = 1 << 21;

/// Per-example global L2 norms `[B]` of `gs` (leaves `[B, ...]`): sums of
/// squares over slices of at most [`NORM_CHUNK`] elements of each leaf.
/// `vmap(tree::norm)` gives the same numbers, but its `x * x` writes a
/// temporary as large as the largest leaf (205 MB for the MLP's W1, 151 MB
/// for the CNN's fc1: peak_rss_growth_mb 460 instead of 274 for the MLP,
/// 335 instead of 239 for the CNN). A dot product of each flattened example
/// with itself writes nothing, but is 2x slower for these shapes and
/// accumulates in f32 (rel. error 2e-4 here; see `breakdown`); xform's f32
/// sums accumulate in f64.
fn per_example_norms<T: Tree>(gs: &T) -> Tensor {
    let leaves = gs.leaves();
    let b = leaves[0].dim(0);
    let len = (NORM_CHUNK / b).max(1);
    let mut sq: Option<Tensor> = None;
    for g in leaves.iter() {
        let g = g.reshape(&[b as isize, -1]);
        let n = g.dim(1);
        for start in (0..n).step_by(len) {
            let part = g.narrow(1, start, len.min(n - start));
            let s = (&part * &part).sum_axis(1, false);
            sq = Some(match sq {
                Some(acc) => acc + s,
                None => s,
            });
        }
    }
    sq.expect("a tree with leaves").sqrt()
}

/// The `dp` modes: `xform::dp::dp_clipped_grad` (per-example losses of
/// the batch), its clipped sum over `B` as the other modes return.
fn dp_mean<P: Tree>(
    losses: impl Fn(&P, &Tensor, &Tensor) -> Tensor,
    params: &P,
    xs: &Tensor,
    ys: &Tensor,
    c: f64,
    sum: ClipSum,
) -> P {
    let loss = |p: &P, (x, y): &(Tensor, Tensor)| losses(p, x, y);
    dp_clipped_grad_with(loss, DpOptions::new(c).sum(sum))(params, &(xs.clone(), ys.clone())).mean()
}

/// Every mode of a model with per-example gradients `psg` and logits
/// `predict`, at clip norm `c`.
fn modes<'a, P: Tree + 'a>(
    psg: impl Fn() -> P + 'a,
    predict: fn(&P, &Tensor) -> Tensor,
    params: &'a P,
    xs: &'a Tensor,
    ys: &'a Tensor,
    c: f64,
) -> Vec<Mode<'a, P>> {
    let losses = move |p: &P, x: &Tensor, y: &Tensor| xent_rows(&predict(p, x), y);
    vec![
        ("vmap(grad)+clip+sum", Box::new(move || clipped_mean(&psg(), c))),
        (BATCH_REF, Box::new(move || grad(|p: &P| losses(p, xs, ys).mean())(params))),
        ("dp", Box::new(move || dp_mean(losses, params, xs, ys, c, ClipSum::BookKeeping))),
        ("dp second pass", Box::new(move || dp_mean(losses, params, xs, ys, c, ClipSum::SecondPass))),
    ]
}

fn cnn_model<'a>(params: &'a CnnParams, xs: &'a Tensor, ys: &'a Tensor) -> Model<'a, CnnParams> {
    let batch = (xs.clone(), ys.clone());
    let psg = move || vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &CnnParams| cnn_loss_one(p, x, y))(params))(&batch);
    Model {
        workload: "W7_dp_sgd_step",
        sizes: format!("{{\"B\": {}, \"n_params\": {}}}", xs.dim(0), tree::numel(params)),
        psg: Box::new(psg.clone()),
        modes: Box::new(move |c| modes(psg.clone(), cnn_predict, params, xs, ys, c)),
    }
}

fn mlp_model<'a>(params: &'a Params, xs: &'a Tensor, ys: &'a Tensor, name: &str) -> Model<'a, Params> {
    let (b, d_in) = (xs.dim(0), xs.dim(1));
    let (h, c) = (params.2.dim(0), params.4.dim(1));
    let batch = (xs.clone(), ys.clone());
    let psg = move || vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Params| loss_one(p, x, y))(params))(&batch);
    Model {
        workload: "W7_dp_sgd_step_mlp",
        sizes: mlp_sizes(name, b, d_in, h, c),
        psg: Box::new(psg.clone()),
        modes: Box::new(move |c| modes(psg.clone(), predict, params, xs, ys, c)),
    }
}

/// Runs W7 on both models (or, in a probe child, the probe it names).
pub fn w7() {
    let key = Key::new(4);
    let params = make_cnn(&key);
    let xs = key.fold_in(100).normal([32, 1, 28, 28], DType::F32);
    let ys = key.fold_in(101).randint([32], 0, 10, DType::I32);
    run(&cnn_model(&params, &xs, &ys));
    let (b, d_in, h, c) = (256, 784, 256, 10);
    let key = Key::new(0);
    let params = make_mlp(&key, d_in, h, c, DType::F32, None);
    let xs = key.fold_in(7).normal([b, d_in], DType::F32);
    let ys = key.fold_in(8).randint([b], 0, c as i64, DType::I32);
    run(&mlp_model(&params, &xs, &ys, "medium"));
}

/// True in a probe child (main runs nothing else there).
pub fn is_probe() -> bool {
    std::env::var_os(PROBE_VAR).is_some()
}

fn run<T: Tree>(m: &Model<'_, T>) {
    if let Ok(w) = std::env::var(PROBE_VAR) {
        if w == m.workload {
            let mode = std::env::var(PROBE_MODE_VAR).expect("XFORM_W7_PROBE_MODE names the mode");
            let modes = (m.modes)(C);
            let step = &modes.iter().find(|(n, _)| *n == mode).unwrap_or_else(|| panic!("no W7 mode {mode:?}")).1;
            rss_probe(step);
        }
        return;
    }
    let sizes = format!("{}, \"C\": {C:?}}}", m.sizes.strip_suffix('}').expect("a JSON object"));
    let mut results: Vec<(&str, T)> = Vec::new();
    for (name, step) in (m.modes)(C) {
        let st = measure(|| drop(step()), false);
        emit(m.workload, name, "float32", &sizes, &st, &rss_growth(m.workload, name));
        results.push((name, step()));
    }
    cross_check(m, &results, C);
}

/// Logs each mode's difference from the first, the per-example norms, and
/// two more checks (untimed): at C = the median norm when C clips every
/// example or none (so both sides of `min(1, .)` are compared), and at a C
/// that clips nothing, where every mode must equal the batch reference.
fn cross_check<T: Tree>(m: &Model<'_, T>, results: &[(&str, T)], c: f64) {
    let log_diffs = |label: &str, results: &[(&str, T)]| {
        let (first, reference) = &results[0];
        for (name, r) in &results[1..] {
            let (abs, rel) = max_diff(r, reference);
            let note = if *name == BATCH_REF && !label.contains("clips nothing") {
                " (differs where examples are clipped)"
            } else {
                ""
            };
            eprintln!("check {} {label}: {name} vs {first}: max abs diff {abs:.3e}, rel {rel:.3e}{note}", m.workload);
        }
    };
    log_diffs(&format!("at C={c}"), results);
    let gs = (m.psg)();
    let norms = {
        let mut v = per_example_norms(&gs).to_vec_f64();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    };
    breakdown(m, &gs, c);
    drop(gs);
    let median = norms[norms.len() / 2];
    let clipped = norms.iter().filter(|&&n| n > c).count();
    eprintln!(
        "{} per-example gradient norms min {:.3} median {median:.3} max {:.3}; clipped {clipped} of {} at C={c}",
        m.workload,
        norms[0],
        norms[norms.len() - 1],
        norms.len()
    );
    let at = |c2: f64| (m.modes)(c2).into_iter().map(|(n, s)| (n, s())).collect::<Vec<_>>();
    if clipped == 0 || clipped == norms.len() {
        let n2 = norms.iter().filter(|&&n| n > median).count();
        log_diffs(&format!("at C={median:.4} ({n2} of {} clipped)", norms.len()), &at(median));
    }
    let big = 1e30;
    let r = at(big);
    let i = r.iter().position(|(n, _)| *n == BATCH_REF).expect("a batch ref mode");
    for (name, g) in &r {
        if *name != BATCH_REF {
            let (abs, rel) = max_diff(g, &r[i].1);
            eprintln!(
                "check {} at C={big:e} (clips nothing): {name} vs {BATCH_REF}: max abs diff {abs:.3e}, rel {rel:.3e}",
                m.workload
            );
        }
    }
}

/// Logs where the time of vmap(grad)+clip+sum goes (medians of 5 calls,
/// not waiting for a quiet machine): the per-example gradients, their norms
/// ([`per_example_norms`]; `vmap(tree::norm)`; under vmap a dot product of
/// each flattened leaf with itself), and the whole clip + sum.
fn breakdown<T: Tree>(m: &Model<'_, T>, gs: &T, c: f64) {
    let median_ms = |f: &dyn Fn()| {
        f();
        let mut t: Vec<f64> = (0..5)
            .map(|_| {
                let t0 = std::time::Instant::now();
                f();
                t0.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        t.sort_by(|a, b| a.total_cmp(b));
        t[2]
    };
    let tree_norm = vmap(|g: &T| tree::norm(g));
    let dot_norm = vmap(|g: &T| {
        let leaves = g.leaves();
        let sq = leaves.iter().map(|x| {
            let v = x.flatten();
            v.dot(&v)
        });
        sq.reduce(|a, b| a + b).expect("a tree with leaves").sqrt()
    });
    let reference = tree_norm(gs);
    let rel = |n: Tensor| ((&n - &reference).abs().max() / reference.abs().max()).item_f64();
    eprintln!(
        "{} breakdown (ms): vmap(grad) {:.1}; norms {:.1} (max rel diff from vmap(tree::norm) {:.1e}); \
         vmap(tree::norm) {:.1}; vmap(dot) {:.1} (max rel diff {:.1e}); norms + clip + sum {:.1}",
        m.workload,
        median_ms(&|| drop((m.psg)())),
        median_ms(&|| drop(per_example_norms(gs))),
        rel(per_example_norms(gs)),
        median_ms(&|| drop(tree_norm(gs))),
        median_ms(&|| drop(dot_norm(gs))),
        rel(dot_norm(gs)),
        median_ms(&|| drop(clipped_mean(gs, c)))
    );
}

/// (max |a - b|, that over max |b|) over all leaves.
fn max_diff<T: Tree>(a: &T, b: &T) -> (f64, f64) {
    let abs = tree::max(&tree::map(&tree::sub(a, b), |x| x.abs())).item_f64();
    let scale = tree::max(&tree::map(b, |x| x.abs())).item_f64();
    (abs, abs / (scale + 1e-30))
}

// ---- memory: peak RSS growth of one step, each mode in a fresh process ----

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    /// glibc: returns free heap memory (every arena) to the system.
    fn malloc_trim(pad: usize) -> i32;
}

/// A field of /proc/self/status, in kB.
fn status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = s.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'));
    line.and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {field}"))
}

/// peers.py's `_settle_and_reset_peak`: hands freed heap pages back (so
/// that they count when reused), restarts the kernel's peak counter (VmHWM)
/// at the current RSS, and returns that RSS in kB.
fn settle_and_reset_peak() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; any argument is valid.
    unsafe {
        malloc_trim(0);
    }
    // Linux >= 4.0: "5" resets VmHWM to VmRSS.
    std::fs::write("/proc/self/clear_refs", "5").expect("writing /proc/self/clear_refs");
    status_kb("VmRSS")
}

/// The probe child: prints `rss_probe <first> <steady1> <steady2> <steady3>`
/// (kB): VmHWM - VmRSS around the first call (which includes any tracing),
/// then around each of 3 further calls, each after [`settle_and_reset_peak`].
///
/// The parent runs it with `XFORM_POOL_BYTES=0`: xform otherwise keeps freed
/// large CPU buffers in a pool (kernels/src/pool.rs, 2 GiB by default) whose
/// pages stay resident, so a steady-state call would reuse them without
/// growing the RSS at all. With 0 every buffer above 64 KiB goes back to
/// malloc when freed (and to the system through malloc_trim), so the growth
/// counts every large buffer a call holds at its peak; the per-thread cache
/// of small buffers (at most 32 of each size up to 64 KiB) remains.
fn rss_probe<T>(step: impl Fn() -> T) {
    let base = settle_and_reset_peak();
    let out = step();
    let first = status_kb("VmHWM") - base;
    drop(out);
    let steady: Vec<u64> = (0..3)
        .map(|_| {
            let base = settle_and_reset_peak();
            let out = step();
            let grown = status_kb("VmHWM") - base;
            drop(out);
            grown
        })
        .collect();
    println!("rss_probe {first} {} {} {}", steady[0], steady[1], steady[2]);
}

/// Runs [`rss_probe`] for `mode` of `workload` in a fresh process; the JSON
/// fields `, "peak_rss_growth_mb": .., "first_call_peak_rss_growth_mb": ..`
/// (MiB, the max over the steady calls), or "" (and a log line) on failure.
fn rss_growth(workload: &str, mode: &str) -> String {
    let run = || -> Result<Vec<f64>, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let out = std::process::Command::new(exe)
            .env(PROBE_VAR, workload)
            .env(PROBE_MODE_VAR, mode)
            .env("XFORM_POOL_BYTES", "0")
            .output()
            .map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().rev().find(|l| l.starts_with("rss_probe "));
        let kb: Vec<f64> =
            line.map(|l| l.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect()).unwrap_or_default();
        if !out.status.success() || kb.len() != 4 {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{}: {}", out.status, &err[err.len().saturating_sub(2000)..]));
        }
        Ok(kb.iter().map(|k| (k / 1024.0 * 10.0).round() / 10.0).collect())
    };
    match run() {
        Ok(mb) => {
            eprintln!("  rss probe {workload} {mode}: first call {} MB, steady {:?} MB", mb[0], &mb[1..]);
            let peak = mb[1..].iter().copied().fold(0.0, f64::max);
            format!(", \"peak_rss_growth_mb\": {peak:.1}, \"first_call_peak_rss_growth_mb\": {:.1}", mb[0])
        }
        Err(e) => {
            eprintln!("  rss probe {workload} {mode} failed: {e}");
            String::new()
        }
    }
}
