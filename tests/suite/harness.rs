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
