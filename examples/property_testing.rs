//! Property-based testing of your own numeric code with `xform::testing`.
//!
//! Two user functions, a numerically stable softplus and a layer norm, are
//! checked inside proptest properties on random tensors from
//! `xform::testing::strategies`:
//!
//! - `check_grads`: first and second derivatives, forward and reverse mode,
//!   against central finite differences;
//! - `check_vmap`: `vmap(f)` against a loop over the examples;
//! - plain value properties (bounds, identities, finiteness).
//!
//! Then the same finiteness property is run on a naive softplus, and
//! proptest finds (and shrinks) an input where it overflows.
//!
//! Run: `cargo run --release --example property_testing`
//! (the `tests` module at the end shows the same properties as `#[test]`s).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use std::cell::Cell;
use xform::prelude::*;
use xform::testing::{check_grads, check_vmap, strategies, Modes};

/// `log(1 + e^x)` without overflow: `max(x, 0) + log1p(e^-|x|)`.
fn softplus(x: &Tensor) -> Tensor {
    // maximum splits its tie at 0, so the slope there is 1/2 + 0 (relu's is 0)
    x.maximum(&x.zeros_like()) + (-x.abs()).exp().log1p()
}

/// The naive `log(1 + e^x)`, which overflows for large `x`.
fn softplus_naive(x: &Tensor) -> Tensor {
    (x.exp() + 1.0).log()
}

/// Layer normalization over the last axis (no affine part).
fn layer_norm(x: &Tensor) -> Tensor {
    let mu = x.mean_axis(-1, true);
    let var = x.var_axes(&[-1], 0, true);
    (x - &mu) / (var + 1e-5).sqrt()
}

/// A failed check as a proptest failure (with the checker's message, which
/// names the worst input and output elements).
fn ok<E: std::fmt::Display>(r: Result<(), E>) -> Result<(), TestCaseError> {
    r.map_err(|e| TestCaseError::fail(e.to_string()))
}

fn main() {
    let cases = Cell::new(0);
    let config = Config { cases: 48, failure_persistence: None, ..Config::default() };

    // softplus: derivatives to second order, on tensors of rank 0 to 2.
    proptest!(config.clone(), |(x in strategies::tensor(2, 4, DType::F64, -6.0, 6.0))| {
        ok(check_grads(softplus, &x, 2, Modes::Both))?;
        cases.set(cases.get() + 1);
    });
    println!("softplus: check_grads (order 2, forward and reverse) passed on {} random tensors", cases.replace(0));

    // softplus: vmap equals a loop, for batches of 1 to 5 examples.
    proptest!(config.clone(), |(n in 1usize..=5, shape in strategies::shape(2, 3), seed in any::<u32>())| {
        let dims: Vec<usize> = std::iter::once(n).chain(shape.iter().copied()).collect();
        let batch = strategies::random_tensor(seed as u64, &Shape::from(dims), DType::F32, -6.0, 6.0);
        ok(check_vmap(softplus, &batch, Axes::Zero))?;
        cases.set(cases.get() + 1);
    });
    println!("softplus: check_vmap passed on {} random batches", cases.replace(0));

    // softplus: value properties over a wide range, where naive formulas overflow.
    proptest!(config.clone(), |(x in strategies::tensor(1, 8, DType::F64, -1000.0, 1000.0))| {
        let y = softplus(&x);
        let (yv, xv) = (y.to_vec::<f64>(), x.to_vec::<f64>());
        for (y, x) in yv.iter().zip(&xv) {
            prop_assert!(y.is_finite(), "softplus({x}) = {y}");
            prop_assert!(*y >= x.max(0.0) && *y <= x.max(0.0) + std::f64::consts::LN_2 + 1e-12);
        }
        // softplus(x) - softplus(-x) = x
        let d = (&y - &softplus(&-&x) - &x).abs();
        prop_assert!(x.numel() == 0 || d.max().item::<f64>() < 1e-9);
        cases.set(cases.get() + 1);
    });
    println!("softplus: bounds and softplus(x) - softplus(-x) = x held on {} random tensors", cases.replace(0));

    // layer_norm: second derivatives, vmap over rows, and zero mean / unit variance.
    proptest!(config.clone(), |(rows in 1usize..4, cols in 2usize..6, seed in any::<u32>())| {
        let x = strategies::random_tensor(seed as u64, &Shape::from([rows, cols]), DType::F64, -3.0, 3.0);
        ok(check_grads(layer_norm, &x, 2, Modes::Both))?;
        ok(check_vmap(layer_norm, &x, Axes::Zero))?;
        ok(check_vmap(layer_norm, &x.t().copy(), Axes::All(Some(-1))))?;
        let y = layer_norm(&x);
        prop_assert!(y.mean_axis(-1, false).abs().max().item::<f64>() < 1e-12);
        let var = y.var_axes(&[-1], 0, false).to_vec::<f64>();
        let xvar = x.var_axes(&[-1], 0, false).to_vec::<f64>();
        for (v, xv) in var.iter().zip(&xvar) {
            // var(y) = var(x) / (var(x) + eps)
            prop_assert!((v - xv / (xv + 1e-5)).abs() < 1e-9, "var {v} for input var {xv}");
        }
        cases.set(cases.get() + 1);
    });
    println!("layer_norm: check_grads, check_vmap and normalization held on {} random matrices", cases.replace(0));

    // The naive softplus fails the finiteness property; proptest shrinks the
    // failing input (towards zero) and reports it.
    // (A deterministic runner, so that the report is the same on every run.)
    let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let result = runner.run(&(-1000.0f64..1000.0), |x| {
        let y = softplus_naive(&Tensor::scalar(x)).item::<f64>();
        prop_assert!(y.is_finite(), "softplus_naive({x}) = {y}");
        Ok(())
    });
    match result {
        Err(TestError::Fail(why, x)) => {
            println!("naive softplus: proptest found a failure, shrunk to x = {x}: {why}");
            println!(
                "(any x above ln(f64::MAX) = {:.2} overflows; the stable softplus passed the same property)",
                f64::MAX.ln()
            );
            // e^x overflows f64 for x above ln(f64::MAX) = 709.78.
            assert!(x > f64::MAX.ln(), "a finite e^x was reported as a failure");
        }
        other => panic!("the naive softplus should fail the finiteness property, got {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest! {
        #![proptest_config(Config { cases: 32, ..Config::default() })]

        #[test]
        fn softplus_gradients_match_finite_differences(x in strategies::tensor(2, 4, DType::F64, -6.0, 6.0)) {
            ok(check_grads(softplus, &x, 2, Modes::Both))?;
        }

        #[test]
        fn layer_norm_vmap_equals_loop(x in strategies::tensor_of(Shape::from([3, 5]), DType::F32, -2.0, 2.0)) {
            ok(check_vmap(layer_norm, &x, Axes::Zero))?;
        }
    }
}
