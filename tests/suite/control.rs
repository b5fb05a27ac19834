//! Control flow, custom derivative rules and checkpointing (issue 20,
//! parts 1-8): each primitive eagerly and under every transform, against
//! JAX 0.10.2 (float64), closed forms, or loops of the untransformed call.
//!
//! Reference values computed with JAX start from this preamble:
//! ```python
//! import jax, jax.numpy as jnp, numpy as np
//! from jax import lax
//! jax.config.update('jax_enable_x64', True)
//! ```

mod cond;
mod custom;
mod errors;
mod loops;
mod mutation;
mod nested;
mod scan;
mod values;

use xform::prelude::*;

/// A 1-D f64 tensor.
pub fn t64(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), [v.len()])
}

/// An f64 tensor of `shape` from row-major values.
pub fn m64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec())
}

/// The error `f` raises; asserts that the interpreter stack is restored.
#[track_caller]
pub fn err<T>(f: impl FnOnce() -> T) -> xform::Error {
    let e = catch(f).err().expect("expected an error");
    assert_eq!(xform::core::interp::stack_depth(), 0, "interpreter stack not restored after: {e}");
    e
}

/// Asserts that the message of `e` contains every one of `parts`.
#[track_caller]
pub fn says(e: &impl std::fmt::Display, parts: &[&str]) {
    let s = e.to_string();
    for p in parts {
        assert!(s.contains(p), "the message does not mention {p:?}: {s}");
    }
}

/// Asserts that every element is finite.
#[track_caller]
pub fn finite(what: &str, t: &Tensor) {
    let v = t.to_vec_f64();
    assert!(v.iter().all(|e| e.is_finite()), "{what}: non-finite values {v:?}");
}

/// An [n, n] matrix with `d` on the diagonal, row-major.
pub fn diag(d: &[f64]) -> Vec<f64> {
    let n = d.len();
    let mut m = vec![0.0; n * n];
    for i in 0..n {
        m[i * n + i] = d[i];
    }
    m
}

/// How often `needle` occurs in `text`.
pub fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}
