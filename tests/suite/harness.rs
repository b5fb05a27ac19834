//! Running registry cases under proptest, and comparing results.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use xform::{DType, Device};

/// The devices every rule and composition test body runs on: the CPU, and
/// the first CUDA device when the `cuda` feature is on and a GPU is present.
pub fn devices() -> Vec<Device> {
    #[cfg(feature = "cuda")]
    let have_gpu = xform::core::kernels::cuda::is_available();
    #[cfg(not(feature = "cuda"))]
    let have_gpu = false;
    if have_gpu {
        vec![Device::Cpu, Device::Cuda(0)]
    } else {
        vec![Device::Cpu]
    }
}

/// Runs `body` once per device of [`devices`], with that device as the
/// default for new tensors (so the same test body exercises each backend);
/// a failure names the device.
pub fn on_each_device(body: impl Fn()) {
    for d in devices() {
        xform::set_default_device(d);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&body));
        xform::set_default_device(Device::Cpu);
        if let Err(e) = r {
            eprintln!("(the failure above happened on device {d})");
            std::panic::resume_unwind(e);
        }
    }
}

/// Number of cases per registry entry and dtype (PROPTEST_CASES overrides).
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs `body(seed)` for `n` proptest-chosen seeds on each device of
/// [`devices`]; panics with the first failure, its seed and its device.
pub fn run(name: &str, n: u32, body: impl Fn(u64) -> Result<(), String>) {
    for d in devices() {
        xform::set_default_device(d);
        let mut runner =
            TestRunner::new(Config { cases: n, failure_persistence: None, max_shrink_iters: 0, ..Config::default() });
        let r = runner.run(&any::<u64>(), |seed| body(seed).map_err(TestCaseError::fail));
        xform::set_default_device(Device::Cpu);
        if let Err(e) = r {
            panic!("{name} on {d}: {e}");
        }
        assert_eq!(xform::core::interp::stack_depth(), 0, "{name}: interpreter stack not restored");
    }
}

/// Absolute-and-relative tolerance for comparing results in `dtype`.
pub fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-9,
        DType::F32 => 2e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

/// Compares values with a tolerance; names the first bad element.
pub fn close(what: &str, got: &[f64], want: &[f64], t: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, expected {}", got.len(), want.len()));
    }
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= t * (1.0 + w.abs());
        if !ok {
            return Err(format!("{what}: element {k}: got {g}, expected {w} (tolerance {t})"));
        }
    }
    Ok(())
}

/// The elements of a tensor as f64.
pub fn v(t: &xform::Tensor) -> Vec<f64> {
    t.to_vec_f64()
}

/// Asserts `|a - b| <= tol * (1 + |b|)` elementwise.
#[track_caller]
pub fn assert_close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?} (tolerance {tol})");
    }
}

/// W1 small's parameters (three tanh layers 32-64-64-10): weights
/// `[in, out]` times 0.2, biases as drawn.
pub type W1 = (xform::Tensor, xform::Tensor, xform::Tensor, xform::Tensor, xform::Tensor, xform::Tensor);

/// W1 small's parameters from `k`, in `dtype`.
pub fn w1_params(k: &xform::Key, dtype: DType) -> W1 {
    let w = |i: u32, s: [usize; 2]| k.fold_in(i).normal(s, dtype) * 0.2;
    let b = |i: u32, n: usize| k.fold_in(i).normal([n], dtype);
    (w(1, [32, 64]), b(2, 64), w(3, [64, 64]), b(4, 64), w(5, [64, 10]), b(6, 10))
}

/// W1's loss of one example: softmax cross-entropy of the MLP's logits.
pub fn w1_loss(p: &W1, x: &xform::Tensor, y: &xform::Tensor) -> xform::Tensor {
    let h = (x.matmul(&p.0) + &p.1).tanh();
    let h = (h.matmul(&p.2) + &p.3).tanh();
    let logits = h.matmul(&p.4) + &p.5;
    logits.logsumexp(0, false) - logits.take(y, 0)
}

/// W1's per-sample gradients, `vmap(grad)` over the batch (the
/// benchmark's `jit(vmap(grad))` when jitted).
pub fn w1_per_sample((p, xs, ys): &(W1, xform::Tensor, xform::Tensor)) -> W1 {
    use xform::{grad, vmap};
    vmap(|(x, y): &(xform::Tensor, xform::Tensor)| grad(|p: &W1| w1_loss(p, x, y))(p))(&(xs.clone(), ys.clone()))
}
