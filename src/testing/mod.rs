//! Property-based checks for numeric code, for users and for xform itself:
//!
//! - [`check_grads`]: forward- and reverse-mode derivatives (to any order)
//!   against central finite differences, with per-dtype tolerances and an
//!   error that names the worst input and output elements;
//! - [`check_vmap`]: `vmap(f)` against a loop over the examples;
//! - [`check_transpose`]: the transpose identity `<ct, J t> = <J^T ct, t>`
//!   for a linear function;
//! - `strategies` (feature `testing`, on by default): proptest strategies
//!   for shapes, tensors and trees.
//!
//! ```
//! use xform::prelude::*;
//! use xform::testing::{check_grads, check_vmap, Modes};
//!
//! let f = |x: &Tensor| (x.tanh() * x).sum_axis(-1, false);
//! let x = Key::new(0).normal([4, 3], DType::F64);
//! check_grads(f, &x, 2, Modes::Both).unwrap();
//! check_vmap(f, &x, Axes::Zero).unwrap();
//! ```

mod grads;
#[cfg(feature = "testing")]
pub mod strategies;
mod vmap_check;

pub use grads::{check_grads, check_grads_with, check_transpose, GradCheckOptions, Modes};
pub use vmap_check::check_vmap;

use std::fmt;
use xform_ops::{DType, Tensor};

/// A failed check: what was compared, where, and by how much.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckFailure {
    /// Which check failed ("forward mode", "reverse mode", "vmap", ...).
    pub check: String,
    /// Where: the input element (and output element) of the worst mismatch.
    pub location: String,
    /// The value computed by the transform.
    pub got: f64,
    /// The reference value (finite differences, loop, ...).
    pub expected: f64,
    /// The tolerance that was exceeded.
    pub tolerance: f64,
    /// The derivative order at which it failed (1 for first derivatives).
    pub order: usize,
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} check failed at {} (order {}): got {:.9e}, expected {:.9e} (difference {:.3e} exceeds tolerance {:.3e})",
            self.check,
            self.location,
            self.order,
            self.got,
            self.expected,
            (self.got - self.expected).abs(),
            self.tolerance
        )
    }
}

impl std::error::Error for CheckFailure {}

/// Default absolute and relative tolerance for comparing two computations
/// of the same value in `dtype` (not finite differences).
pub fn default_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-10,
        DType::F32 => 1e-4,
        DType::F16 => 1e-2,
        DType::BF16 => 5e-2,
        _ => 0.0,
    }
}

/// A multi-index into `shape` for flat position `k`, as text "[i, j]".
pub(crate) fn index_str(shape: &[usize], mut k: usize) -> String {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = k % shape[d];
            k /= shape[d];
        }
    }
    let parts: Vec<String> = idx.iter().map(|i| i.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// The values of a (concrete) tensor as f64.
pub(crate) fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64()
}
