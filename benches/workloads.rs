//! xform's benchmark workloads, printing one JSON line per measurement
//! with the fields of `shared/bench/peers.py` (`"library": "xform"`), so
//! that both outputs concatenated give per-workload ratios from one sitting.
//!
//! Run: `cargo bench --bench workloads` (release). Select workloads with
//! `XFORM_BENCH=W1,W4,...` (default: all; `W1small` is W1 small alone, with
//! its `jit(...)` modes). `XFORM_PROFILE_SECS=n` then repeats each jitted
//! W1 small and dispatch call for `n` seconds after measuring it, alone, for
//! a profiler (`perf record`) to see that mode without the others.
//!
//! W9 (data-parallel DP-SGD, `workloads/w9.rs`) runs only when named and
//! needs the `mpi` feature: `XFORM_BENCH=W9 cargo bench --bench workloads
//! --features mpi` times one process, and `XFORM_BENCH=W9 mpirun -np 2
//! <the bench binary> --bench` two.

use std::time::Instant;
use xform::prelude::*;

#[path = "workloads/w7.rs"]
mod w7;
#[path = "workloads/w8.rs"]
mod w8;
#[cfg(feature = "mpi")]
#[path = "workloads/w9.rs"]
mod w9;

mod measure {
    use std::time::{Duration, Instant};

    /// Timing statistics of one measurement, in milliseconds.
    pub struct Stats {
        pub median_ms: f64,
        pub min_ms: f64,
        pub max_ms: f64,
        pub reps: usize,
        pub inner: usize,
        pub first_call_ms: f64,
        /// Average cores used by other processes during the measurement.
        pub foreign_cpu: Option<f64>,
    }

    // ---- contention monitor (peers.py's): the machine is shared, so CPU
    // used by other processes is measured from /proc/stat busy time minus
    // this process's own; measurements wait for quiet and are retried when
    // disturbed, keeping the least disturbed attempt.

    /// Cores of other processes above which the machine counts as busy.
    const FOREIGN_MAX: f64 = 0.15;
    /// Longest wait for a quiet machine before each measurement.
    const QUIET_WAIT: Duration = Duration::from_secs(60);
    /// Re-runs of a measurement that saw a busy machine.
    const RETRIES: usize = 2;
    /// Linux's USER_HZ, the unit of /proc/stat and /proc/self/stat times.
    const CLK_TCK: f64 = 100.0;

    /// (wall time, machine busy CPU seconds, own CPU seconds).
    type Sample = (Instant, f64, f64);

    fn cpu_sample() -> Option<Sample> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let v: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        // user, nice, system, irq, softirq, steal (idle and iowait excluded)
        let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7).unwrap_or(&0);
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        // fields after the parenthesized command name; utime and stime are 14 and 15
        let rest = own.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let own_ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some((Instant::now(), busy as f64 / CLK_TCK, own_ticks as f64 / CLK_TCK))
    }

    fn foreign(s0: Option<Sample>, s1: Option<Sample>) -> Option<f64> {
        let (s0, s1) = (s0?, s1?);
        let wall = s1.0.duration_since(s0.0).as_secs_f64();
        (wall > 0.0).then(|| (((s1.1 - s0.1) - (s1.2 - s0.2)) / wall).max(0.0))
    }

    /// Waits (up to QUIET_WAIT) until other processes use < FOREIGN_MAX cores;
    /// returns the sample opening the last 0.3 s check window.
    fn wait_quiet() -> Option<Sample> {
        let start = Instant::now();
        loop {
            let s0 = cpu_sample();
            std::thread::sleep(Duration::from_millis(300));
            let f = foreign(s0, cpu_sample());
            if f.is_none_or(|f| f < FOREIGN_MAX) || start.elapsed() >= QUIET_WAIT {
                if start.elapsed() > Duration::from_secs(1) {
                    eprintln!("  waited {:.1}s for a quiet machine", start.elapsed().as_secs_f64());
                }
                return s0;
            }
        }
    }

    /// peers.py's protocol: on a quiet machine, first call, 3 warm-up calls,
    /// an estimate, then `reps = clamp(1 s / estimate, 10, 300)` timed
    /// repetitions of `inner` calls each (inner > 1 only for
    /// microsecond-scale calls); retried when other processes were busy.
    pub fn measure(mut f: impl FnMut(), tiny: bool) -> Stats {
        let mut best: Option<Stats> = None;
        let mut first_call_ms = None;
        for attempt in 0..=RETRIES {
            let s_begin = wait_quiet();
            let mut st = measure_once(&mut f, tiny);
            st.foreign_cpu = foreign(s_begin, cpu_sample()).map(|x| (x * 1000.0).round() / 1000.0);
            // the first call is only a first call once
            let first = *first_call_ms.get_or_insert(st.first_call_ms);
            st.first_call_ms = first;
            let disturbed = st.foreign_cpu.is_some_and(|x| x >= FOREIGN_MAX);
            if best.as_ref().is_none_or(|b| st.foreign_cpu.unwrap_or(0.0) < b.foreign_cpu.unwrap_or(0.0)) {
                best = Some(st);
            }
            if !disturbed {
                break;
            }
            eprintln!("  busy machine during timing, retry {}", attempt + 1);
        }
        best.expect("at least one attempt")
    }

    fn measure_once(f: &mut impl FnMut(), tiny: bool) -> Stats {
        let t0 = Instant::now();
        f();
        let first = t0.elapsed().as_secs_f64();
        for _ in 0..3 {
            f();
        }
        let mut n_est = 1;
        let est = loop {
            let t = Instant::now();
            for _ in 0..n_est {
                f();
            }
            let e = t.elapsed().as_secs_f64() / n_est as f64;
            if !tiny || e * n_est as f64 > 0.005 {
                break e;
            }
            n_est *= 10;
        };
        let inner = if tiny { ((0.02 / est.max(1e-9)) as usize).max(1) } else { 1 };
        let reps = ((1.0 / (est * inner as f64).max(1e-9)) as usize).clamp(10, 300);
        let mut times: Vec<f64> = (0..reps)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..inner {
                    f();
                }
                t.elapsed().as_secs_f64() * 1e3 / inner as f64
            })
            .collect();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Stats {
            median_ms: times[reps / 2],
            min_ms: times[0],
            max_ms: times[reps - 1],
            reps,
            inner,
            first_call_ms: first * 1e3,
            foreign_cpu: None,
        }
    }
}

use measure::{measure, Stats};

fn emit(workload: &str, mode: &str, dtype: &str, sizes: &str, st: &Stats, extra: &str) {
    let inner = if st.inner > 1 { format!(", \"inner\": {}", st.inner) } else { String::new() };
    let foreign = st.foreign_cpu.map_or("null".to_string(), |f| format!("{f}"));
    println!(
        "{{\"workload\": \"{workload}\", \"library\": \"xform\", \"mode\": \"{mode}\", \"dtype\": \"{dtype}\", \"sizes\": {sizes}, \
         \"median_ms\": {:.6}, \"min_ms\": {:.6}, \"max_ms\": {:.6}, \"reps\": {}{inner}, \"first_call_ms\": {:.6}, \"threads\": {}, \"foreign_cpu\": {foreign}{extra}}}",
        st.median_ms,
        st.min_ms,
        st.max_ms,
        st.reps,
        st.first_call_ms,
        rayon::current_num_threads()
    );
}

/// Repeats `f` for `XFORM_PROFILE_SECS` seconds (none when unset).
fn profile_loop(mut f: impl FnMut()) {
    let secs: f64 = std::env::var("XFORM_PROFILE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let (t, mut calls) = (Instant::now(), 0usize);
    while t.elapsed().as_secs_f64() < secs {
        for _ in 0..100 {
            f();
        }
        calls += 100;
    }
    if secs > 0.0 {
        eprintln!("profile loop: {calls} calls, {:.3} us per call", t.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
}

fn enabled(name: &str) -> bool {
    match std::env::var("XFORM_BENCH") {
        Ok(v) => v.split(',').any(|w| w.trim() == name),
        Err(_) => true,
    }
}

fn w4_gemm() {
    let n = 1024;
    let flops = 2.0 * (n as f64).powi(3);
    for dtype in [DType::F64, DType::F32] {
        let a = Key::new(3).normal([n, n], dtype);
        let b = Key::new(4).normal([n, n], dtype);
        let st = measure(|| drop(a.matmul(&b)), false);
        let extra = format!(
            ", \"gflops\": {:.2}, \"gflops_best\": {:.2}",
            flops / (st.median_ms * 1e-3) / 1e9,
            flops / (st.min_ms * 1e-3) / 1e9
        );
        emit("W4_gemm", "matmul", dtype.name(), &format!("{{\"n\": {n}}}"), &st, &extra);
    }
}

fn elementwise_add() {
    let n = 1usize << 24;
    let a = Key::new(5).uniform([n], DType::F32);
    let b = Key::new(6).uniform([n], DType::F32);
    let sizes = format!("{{\"n\": {n}}}");
    let st = measure(|| drop(&a + &b), false);
    let bytes = 3.0 * 4.0 * n as f64;
    emit(
        "elementwise_add",
        "tensor add",
        "float32",
        &sizes,
        &st,
        &format!(", \"gb_per_s\": {:.2}", bytes / (st.median_ms * 1e-3) / 1e9),
    );
    let (va, vb) = (a.to_vec::<f32>(), b.to_vec::<f32>());
    let st = measure(
        || {
            let c: Vec<f32> = va.iter().zip(&vb).map(|(x, y)| x + y).collect();
            std::hint::black_box(c);
        },
        false,
    );
    emit(
        "elementwise_add",
        "plain Rust loop (allocating)",
        "float32",
        &sizes,
        &st,
        &format!(", \"gb_per_s\": {:.2}", bytes / (st.median_ms * 1e-3) / 1e9),
    );
    let mut out = vec![0f32; n];
    let st = measure(
        || {
            for ((o, x), y) in out.iter_mut().zip(&va).zip(&vb) {
                *o = x + y;
            }
            std::hint::black_box(&out);
        },
        false,
    );
    emit(
        "elementwise_add",
        "plain Rust loop (preallocated)",
        "float32",
        &sizes,
        &st,
        &format!(", \"gb_per_s\": {:.2}", bytes / (st.median_ms * 1e-3) / 1e9),
    );
}

/// Cost per primitive per transform level: a 10-op elementwise function of
/// an [8] vector, eagerly, under jvp and under vmap.
fn per_primitive() {
    let f = |x: &Tensor| {
        let mut y = x.sin();
        y = &y * x;
        y = y.exp();
        y = &y + x;
        y = y.tanh();
        y = &y - x;
        y = y.cos();
        y = &y * &y;
        y = y.sigmoid();
        -&y
    };
    let x = Tensor::linspace(-1.0, 1.0, 8, DType::F32);
    let xs = Key::new(1).normal([8, 8], DType::F32);
    let ops = 10.0;
    let sizes = "{\"shape\": [8], \"ops\": 10}";
    let eager = measure(|| drop(f(&x)), true);
    emit(
        "per_primitive",
        "eager",
        "float32",
        sizes,
        &eager,
        &format!(", \"ns_per_prim\": {:.1}", eager.median_ms * 1e6 / ops),
    );
    let st = measure(|| drop(jvp(f, &x, &x)), true);
    emit("per_primitive", "jvp", "float32", sizes, &st, &format!(", \"ns_per_prim\": {:.1}", st.median_ms * 1e6 / ops));
    let vf = vmap(f);
    let st = measure(|| drop(vf(&xs)), true);
    emit(
        "per_primitive",
        "vmap (batch 8)",
        "float32",
        "{\"shape\": [8, 8], \"ops\": 10}",
        &st,
        &format!(", \"ns_per_prim\": {:.1}", st.median_ms * 1e6 / ops),
    );
}

/// The MLP of peers.py: params (W1, b1, W2, b2, W3, b3).
type Params = (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);

fn make_mlp(key: &Key, d_in: usize, h: usize, c: usize, dtype: DType, e: Option<usize>) -> Params {
    let lead = |s: &[usize]| -> Vec<usize> { e.into_iter().chain(s.iter().copied()).collect() };
    let w = |i: u32, s: &[usize]| key.fold_in(i).normal(lead(s), dtype) * (1.0 / (s[0] as f64).sqrt());
    let b = |i: u32, n: usize| key.fold_in(i).normal(lead(&[n]), dtype) * 0.1;
    (w(1, &[d_in, h]), b(2, h), w(3, &[h, h]), b(4, h), w(5, &[h, c]), b(6, c))
}

fn predict(p: &Params, x: &Tensor) -> Tensor {
    let h = (x.matmul(&p.0) + &p.1).tanh();
    let h = (h.matmul(&p.2) + &p.3).tanh();
    h.matmul(&p.4) + &p.5
}

/// Softmax cross-entropy of each row of `logits[B, c]` against `ys[B]`: `[B]`.
fn xent_rows(logits: &Tensor, ys: &Tensor) -> Tensor {
    logits.logsumexp(1, false) - logits.take_along_axis(&ys.unsqueeze(1), 1).squeeze(1)
}

/// Softmax cross-entropy of one example: logsumexp(logits) - logits[y].
fn loss_one(p: &Params, x: &Tensor, y: &Tensor) -> Tensor {
    let logits = predict(p, x);
    logits.logsumexp(0, false) - logits.take(y, 0)
}

fn mlp_sizes(name: &str, b: usize, d_in: usize, h: usize, c: usize) -> String {
    let n_params = d_in * h + h + h * h + h + h * c + c;
    format!("{{\"name\": \"{name}\", \"B\": {b}, \"d_in\": {d_in}, \"h\": {h}, \"c\": {c}, \"n_params\": {n_params}}}")
}

fn w1(name: &str, b: usize, d_in: usize, h: usize, c: usize, dtype: DType) {
    let key = Key::new(0);
    let params = make_mlp(&key, d_in, h, c, dtype, None);
    let xs = key.fold_in(7).normal([b, d_in], dtype);
    let ys = key.fold_in(8).randint([b], 0, c as i64, DType::I32);
    let psg = vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Params| loss_one(p, x, y))(&params));
    let batch = (xs, ys);
    let st = measure(|| drop(psg(&batch)), false);
    emit("W1_per_sample_grad", "vmap(grad)", dtype.name(), &mlp_sizes(name, b, d_in, h, c), &st, "");
    if name == "small" {
        w1_jit(name, &params, &batch, (b, d_in, h, c), dtype);
    }
}

/// W1 jitted: the parameters and the batch are arguments (not captured
/// constants), as in JAX's `jit(vmap(grad(loss), in_axes=(None, 0, 0)))`.
/// Then the first call alone (trace, passes, plan, one replay), each on a
/// fresh jitted function.
fn w1_jit(name: &str, params: &Params, batch: &(Tensor, Tensor), dims: (usize, usize, usize, usize), dtype: DType) {
    let (b, d_in, h, c) = dims;
    let sizes = mlp_sizes(name, b, d_in, h, c);
    let per_sample = |(p, xs, ys): &(Params, Tensor, Tensor)| {
        vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Params| loss_one(p, x, y))(p))(&(xs.clone(), ys.clone()))
    };
    let args = (params.clone(), batch.0.clone(), batch.1.clone());
    let jf = jit(per_sample);
    let st = measure(|| drop(jf(&args)), false);
    emit("W1_per_sample_grad", "jit(vmap(grad))", dtype.name(), &sizes, &st, "");
    profile_loop(|| drop(jf(&args)));
    let st = measure(|| drop(jit(per_sample)(&args)), false);
    emit("W1_per_sample_grad", "jit(vmap(grad)) first call (trace+optimize+run)", dtype.name(), &sizes, &st, "");
}

fn w2() {
    let (e, b, d_in, h, c) = (16, 256, 784, 256, 10);
    let key = Key::new(1);
    let stacked = make_mlp(&key, d_in, h, c, DType::F32, Some(e));
    let x = key.fold_in(9).normal([b, d_in], DType::F32);
    let ens = vmap(|p: &Params| predict(p, &x));
    let st = measure(|| drop(ens(&stacked)), false);
    let sizes = format!("{{\"E\": {e}, \"B\": {b}, \"d_in\": {d_in}, \"h\": {h}, \"c\": {c}}}");
    emit("W2_ensemble_forward", "vmap", "float32", &sizes, &st, "");
}

fn w3() {
    let n = 256;
    let key = Key::new(2);
    let a = key.normal([n, n], DType::F32) * (1.0 / (n as f64).sqrt());
    let x = key.fold_in(1).normal([n], DType::F32);
    let g = |x: &Tensor| a.matmul(x).tanh();
    let f = |x: &Tensor| a.matmul(x).tanh().sum();
    let sizes = format!("{{\"n\": {n}}}");
    let jf = jacfwd(g);
    let st = measure(|| drop(jf(&x)), false);
    emit("W3_jacobian_hessian", "jacfwd(g)", "float32", &sizes, &st, "");
    let jr = jacrev(g);
    let st = measure(|| drop(jr(&x)), false);
    emit("W3_jacobian_hessian", "jacrev(g)", "float32", &sizes, &st, "");
    let hs = hessian(f);
    let st = measure(|| drop(hs(&x)), false);
    emit("W3_jacobian_hessian", "hessian(f)", "float32", &sizes, &st, "");
    // jitted, `A` captured (a constant of the program), as peers.py's
    // `jax.jit(jax.jacfwd(g))`
    let jf = jit(jacfwd(g));
    let st = measure(|| drop(jf(&x)), false);
    emit("W3_jacobian_hessian", "jit(jacfwd(g))", "float32", &sizes, &st, "");
    let jr = jit(jacrev(g));
    let st = measure(|| drop(jr(&x)), false);
    emit("W3_jacobian_hessian", "jit(jacrev(g))", "float32", &sizes, &st, "");
    let hs = jit(hessian(f));
    let st = measure(|| drop(hs(&x)), false);
    emit("W3_jacobian_hessian", "jit(hessian(f))", "float32", &sizes, &st, "");
}

/// The W5 CNN of peers.py (the functorch tutorial's, without dropout):
/// conv weights OIHW, dense weights `[in, out]`.
type CnnParams = (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);

fn make_cnn(key: &Key) -> CnnParams {
    let shapes: [&[usize]; 8] =
        [&[32, 1, 3, 3], &[32], &[64, 32, 3, 3], &[64], &[9216, 128], &[128], &[128, 10], &[10]];
    let p: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let fan_in: usize = if s.len() == 4 { s[1..].iter().product() } else { s[0] };
            let scale = if s.len() > 1 { 1.0 / (fan_in as f64).sqrt() } else { 0.1 };
            key.fold_in(i as u32).normal(s.to_vec(), DType::F32) * scale
        })
        .collect();
    (p[0].clone(), p[1].clone(), p[2].clone(), p[3].clone(), p[4].clone(), p[5].clone(), p[6].clone(), p[7].clone())
}

fn conv_bias(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    let y = xform::lax::conv_general_dilated(x, w, &xform::lax::ConvOptions::default()).unwrap();
    y + b.reshape(&[-1, 1, 1])
}

/// x[N,1,28,28] -> logits[N,10].
fn cnn_predict(p: &CnnParams, x: &Tensor) -> Tensor {
    let h = conv_bias(x, &p.0, &p.1).relu();
    let h = conv_bias(&h, &p.2, &p.3).relu();
    let h = xform::lax::max_pool(&h, &[2, 2], &[2, 2], &xform::lax::Padding::Valid).unwrap();
    let h = h.reshape(&[h.dim(0) as isize, -1]);
    let h = (h.matmul(&p.4) + &p.5).relu();
    h.matmul(&p.6) + &p.7
}

fn cnn_loss_one(p: &CnnParams, x: &Tensor, y: &Tensor) -> Tensor {
    let logits = cnn_predict(p, &x.unsqueeze(0)).squeeze(0);
    logits.logsumexp(0, false) - logits.take(y, 0)
}

fn w5() {
    let b = 32;
    let key = Key::new(4);
    let params = make_cnn(&key);
    let xs = key.fold_in(100).normal([b, 1, 28, 28], DType::F32);
    let ys = key.fold_in(101).randint([b], 0, 10, DType::I32);
    let sizes = format!("{{\"B\": {b}, \"n_params\": 1199882}}");
    let psg = vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &CnnParams| cnn_loss_one(p, x, y))(&params));
    let batch = (xs.clone(), ys.clone());
    let st = measure(|| drop(psg(&batch)), false);
    emit("W5_cnn_per_sample_grad", "vmap(grad)", "float32", &sizes, &st, "");
    let batch_grad = grad(|p: &CnnParams| xent_rows(&cnn_predict(p, &xs), &ys).mean());
    let st = measure(|| drop(batch_grad(&params)), false);
    emit("W5_cnn_per_sample_grad", "grad(mean loss) batch ref", "float32", &sizes, &st, "");
}

/// The W6 GRU of peers.py: `(W_ih[d,3h], W_hh[h,3h], b_ih[3h], b_hh[3h],
/// W_out[h,c], b_out[c])`, gates in PyTorch's order (r, z, n).
type GruParams = (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);

fn make_gru(key: &Key, d: usize, h: usize, c: usize) -> GruParams {
    let shapes: [&[usize]; 6] = [&[d, 3 * h], &[h, 3 * h], &[3 * h], &[3 * h], &[h, c], &[c]];
    let p: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let scale = if s.len() == 2 { 1.0 / (s[0] as f64).sqrt() } else { 0.1 };
            key.fold_in(i as u32).normal(s.to_vec(), DType::F32) * scale
        })
        .collect();
    (p[0].clone(), p[1].clone(), p[2].clone(), p[3].clone(), p[4].clone(), p[5].clone())
}

/// PyTorch's GRU cell on `h[..., H]`, `x[..., d]` (both products inside
/// the cell, as peers.py).
fn gru_cell(p: &GruParams, h: &Tensor, x: &Tensor) -> Tensor {
    let hd = h.dim(-1);
    let gi = x.matmul(&p.0) + &p.2;
    let gh = h.matmul(&p.1) + &p.3;
    let r = (gi.narrow(-1, 0, hd) + gh.narrow(-1, 0, hd)).sigmoid();
    let z = (gi.narrow(-1, hd, hd) + gh.narrow(-1, hd, hd)).sigmoid();
    let n = (gi.narrow(-1, 2 * hd, hd) + r * gh.narrow(-1, 2 * hd, hd)).tanh();
    (-&z + 1.0) * n + z * h
}

/// Logits of `x[T, d]` (or `x[T, B, d]`): the cell scanned over time.
fn gru_logits(p: &GruParams, x: &Tensor) -> Tensor {
    let mut shape = x.shape().0[1..].to_vec();
    *shape.last_mut().expect("rank >= 2") = p.1.dim(0);
    let h0 = Tensor::zeros(shape, DType::F32);
    let (h, ()) = scan(|h: &Tensor, x: &Tensor| (gru_cell(p, h, x), ()), &h0, x);
    h.matmul(&p.4) + &p.5
}

fn w6() {
    let (b, t, d, h, c) = (64, 32, 16, 64, 10);
    let key = Key::new(6);
    let params = make_gru(&key, d, h, c);
    let xs = key.fold_in(100).normal([b, t, d], DType::F32);
    let ys = key.fold_in(101).randint([b], 0, c as i64, DType::I32);
    let n_params = d * 3 * h + h * 3 * h + 6 * h + h * c + c;
    let sizes = format!("{{\"B\": {b}, \"T\": {t}, \"d\": {d}, \"h\": {h}, \"c\": {c}, \"n_params\": {n_params}}}");
    let psg = vmap(|(x, y): &(Tensor, Tensor)| {
        grad(|p: &GruParams| {
            let logits = gru_logits(p, x);
            logits.logsumexp(0, false) - logits.take(y, 0)
        })(&params)
    });
    let batch = (xs.clone(), ys.clone());
    let st = measure(|| drop(psg(&batch)), false);
    emit("W6_rnn_per_sample_grad", "vmap(grad) scan", "float32", &sizes, &st, "");
    // The batch reference: time-major x[T, B, d].
    let xt = xs.transpose(0, 1);
    let batch_grad = grad(|p: &GruParams| xent_rows(&gru_logits(p, &xt), &ys).mean());
    let st = measure(|| drop(batch_grad(&params)), false);
    emit("W6_rnn_per_sample_grad", "grad(mean loss) batch ref scan", "float32", &sizes, &st, "");
}

/// Peak resident memory of this process, in MiB (Linux).
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// W1 medium f32 alone, then the process's peak memory against the size of
/// one call's output plus the inputs (run it in its own process). With
/// `checkpointed`, the MLP's forward pass is one `checkpoint` (reverse mode
/// keeps only its inputs and recomputes the activations).
fn w1_memory(checkpointed: bool) {
    let (b, d_in, h, c) = (256, 784, 256, 10);
    let key = Key::new(0);
    let params = make_mlp(&key, d_in, h, c, DType::F32, None);
    let xs = key.fold_in(7).normal([b, d_in], DType::F32);
    let ys = key.fold_in(8).randint([b], 0, c as i64, DType::I32);
    let forward = checkpoint(|(p, x): &(Params, Tensor)| predict(p, x));
    let psg = vmap(|(x, y): &(Tensor, Tensor)| {
        grad(|p: &Params| {
            let logits = if checkpointed { forward(&(p.clone(), x.clone())) } else { predict(p, x) };
            logits.logsumexp(0, false) - logits.take(y, 0)
        })(&params)
    });
    let batch = (xs, ys);
    let st = measure(|| drop(psg(&batch)), false);
    let n_params = d_in * h + h + h * h + h + h * c + c;
    let out_mb = (b * n_params * 4) as f64 / (1 << 20) as f64;
    let in_mb = ((n_params + b * d_in) * 4 + b * 4) as f64 / (1 << 20) as f64;
    let peak = peak_rss_mb();
    let extra = format!(
        ", \"peak_rss_mb\": {peak:.1}, \"output_mb\": {out_mb:.1}, \"inputs_mb\": {in_mb:.1}, \"peak_over_output_plus_inputs\": {:.3}",
        peak / (out_mb + in_mb)
    );
    let mode = if checkpointed { "vmap(grad) checkpoint(forward) peak RSS" } else { "vmap(grad) peak RSS" };
    emit("W1_memory", mode, "float32", &mlp_sizes("medium", b, d_in, h, c), &st, &extra);
}

fn dispatch() {
    let x8 = Tensor::linspace(-1.0, 1.0, 8, DType::F32);
    let vg = vmap(grad(|x: &Tensor| x.sin() * x));
    let st = measure(|| drop(vg(&x8)), true);
    let extra = format!(", \"median_us\": {:.3}", st.median_ms * 1e3);
    emit("dispatch_overhead", "vmap(grad(sin(x)*x)) [8]", "float32", "{\"shape\": [8]}", &st, &extra);
    let jvg = jit(vmap(grad(|x: &Tensor| x.sin() * x)));
    let st = measure(|| drop(jvg(&x8)), true);
    let extra = format!(", \"median_us\": {:.3}", st.median_ms * 1e3);
    emit("dispatch_overhead", "jit(vmap(grad(sin(x)*x))) [8]", "float32", "{\"shape\": [8]}", &st, &extra);
    profile_loop(|| drop(jvg(&x8)));
    let one = Tensor::scalar(1.0f32);
    let st = measure(|| drop(&(&one * 2.0) + 1.0), true);
    let extra = format!(", \"median_us\": {:.3}", st.median_ms * 1e3);
    emit("dispatch_overhead", "eager x*2+1 scalar", "float32", "{\"shape\": []}", &st, &extra);
}

fn main() {
    if w7::is_probe() {
        // A W7 memory probe child: one measurement, nothing else.
        w7::w7();
        return;
    }
    let t0 = Instant::now();
    if enabled("W1") || enabled("W1small") {
        w1("small", 64, 32, 64, 10, DType::F32);
    }
    if enabled("W1") {
        w1("medium", 256, 784, 256, 10, DType::F32);
        w1("medium", 256, 784, 256, 10, DType::F64);
    }
    if enabled("W2") {
        w2();
    }
    if enabled("W3") {
        w3();
    }
    if enabled("W5") {
        w5();
    }
    if enabled("W6") {
        w6();
    }
    if enabled("W7") {
        w7::w7();
    }
    if enabled("W8") {
        w8::w8();
    }
    if enabled("dispatch") {
        dispatch();
    }
    if std::env::var("XFORM_BENCH").is_ok_and(|v| v.split(',').any(|w| w.trim() == "W9")) {
        // Only on request: it starts MPI (and `mpirun -np 2` runs its
        // two-process mode).
        #[cfg(feature = "mpi")]
        w9::w9();
        #[cfg(not(feature = "mpi"))]
        eprintln!("W9 needs the mpi feature: cargo bench --bench workloads --features mpi");
    }
    // Only on request: it must run in a process of its own.
    if std::env::var("XFORM_BENCH").is_ok_and(|v| v.split(',').any(|w| w.trim() == "W1mem")) {
        w1_memory(false);
    }
    if std::env::var("XFORM_BENCH").is_ok_and(|v| v.split(',').any(|w| w.trim() == "W1memckpt")) {
        w1_memory(true);
    }
    if enabled("W4") {
        w4_gemm();
    }
    if enabled("add") {
        elementwise_add();
    }
    if enabled("prim") {
        per_primitive();
    }
    eprintln!("total {:.1}s", t0.elapsed().as_secs_f64());
}
