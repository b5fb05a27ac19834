//! xform's benchmark workloads, printing one JSON line per measurement
//! with the fields of `shared/bench/peers.py` (`"library": "xform"`), so
//! that both outputs concatenated give per-workload ratios from one sitting.
//!
//! Run: `cargo bench --bench workloads` (release). Select workloads with
//! `XFORM_BENCH=W1,W4,...` (default: all).

use std::time::Instant;
use xform::prelude::*;

mod measure {
    use std::time::Instant;

    /// Timing statistics of one measurement, in milliseconds.
    pub struct Stats {
        pub median_ms: f64,
        pub min_ms: f64,
        pub max_ms: f64,
        pub reps: usize,
        pub inner: usize,
        pub first_call_ms: f64,
    }

    /// peers.py's protocol: first call, 3 warm-up calls, an estimate, then
    /// `reps = clamp(1 s / estimate, 10, 300)` timed repetitions of `inner`
    /// calls each (inner > 1 only for microsecond-scale calls).
    pub fn measure(mut f: impl FnMut(), tiny: bool) -> Stats {
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
        }
    }
}

use measure::{measure, Stats};

fn emit(workload: &str, mode: &str, dtype: &str, sizes: &str, st: &Stats, extra: &str) {
    let inner = if st.inner > 1 { format!(", \"inner\": {}", st.inner) } else { String::new() };
    println!(
        "{{\"workload\": \"{workload}\", \"library\": \"xform\", \"mode\": \"{mode}\", \"dtype\": \"{dtype}\", \"sizes\": {sizes}, \
         \"median_ms\": {:.6}, \"min_ms\": {:.6}, \"max_ms\": {:.6}, \"reps\": {}{inner}, \"first_call_ms\": {:.6}, \"threads\": {}{extra}}}",
        st.median_ms,
        st.min_ms,
        st.max_ms,
        st.reps,
        st.first_call_ms,
        rayon::current_num_threads()
    );
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

fn main() {
    let t0 = Instant::now();
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
