//! The user-facing, numpy-style API on [`Tensor`]: constructors, operators
//! with broadcasting and promotion, math, reductions, shape manipulation,
//! indexing, products, neural-network helpers and in-place ops. Everything
//! here is built from the primitives in `lax`, so every transform works on
//! it with no rule of its own.
//!
//! Methods panic with an [`Error`] message at the caller when
//! the input is invalid; the `try_` forms and [`catch`](crate::catch) are
//! the `Result` path.

mod arith;
mod creation;
mod indexing;
mod inplace;
mod linalg;
mod nn;
mod reduction;
mod repeat;
mod shaping;

pub use indexing::Idx;
pub use inplace::{assign_check, check_write};

use crate::error::{Error, Result};
use crate::lax;
use crate::tensor::Tensor;
use xform_kernels::DType;

/// Resolves a possibly negative axis against `rank`.
pub fn norm_axis(op: &str, axis: isize, rank: usize) -> Result<usize> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    if a < 0 || a >= rank as isize {
        return Err(Error::axis(op, axis, rank));
    }
    Ok(a as usize)
}

/// Resolves a list of possibly negative axes (sorted, checked unique).
pub fn norm_axes(op: &str, axes: &[isize], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = norm_axis(op, a, rank)?;
        if out.contains(&n) {
            return Err(Error::invalid(op, format!("axis {a} is repeated")));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

pub(crate) use crate::promote::align;
pub use crate::promote::broadcast_shapes;

/// A Rust number usable as a scalar operand (`&x * 2.0`, `x.add_(1)`).
///
/// Scalars are "weak": they take the tensor's dtype, except that a float
/// scalar with an integer or bool tensor promotes to f32 (as in JAX and
/// PyTorch). An integer scalar that the tensor's integer dtype cannot hold
/// is an error (numpy 2's "Python integer out of bounds for int32"; JAX
/// refuses it too), never a wrapped or saturated value.
pub trait Scalar: Copy {
    /// The value as f64.
    fn to_f64(self) -> f64;
    /// The exact value of an integer scalar (`None` for floats).
    fn to_i128(self) -> Option<i128>;
    /// True for float types.
    const IS_FLOAT: bool;
}

macro_rules! scalar_impl {
    ($($t:ty => $f:expr),*) => {$(
        impl Scalar for $t {
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn to_i128(self) -> Option<i128> {
                if $f {
                    None
                } else {
                    Some(self as i128)
                }
            }
            const IS_FLOAT: bool = $f;
        }
    )*};
}
scalar_impl!(f64 => true, f32 => true, i32 => false, i64 => false, u32 => false, usize => false);

/// The dtype a weak scalar takes next to a tensor of dtype `d`.
pub(crate) fn weak_dtype<S: Scalar>(d: DType) -> DType {
    if S::IS_FLOAT && !d.is_float() {
        DType::F32
    } else {
        d
    }
}

/// Checks that the integer dtype `d` can hold `v` (any value fits the
/// other dtypes): an exact check for integer scalars; a float is first
/// truncated toward zero, as numpy's and JAX's `full` cast it, and must
/// be finite.
pub(crate) fn check_scalar_fits<S: Scalar>(op: &str, v: S, d: DType) -> Result<()> {
    let Some((lo, hi)) = d.int_range() else {
        return Ok(());
    };
    let fits = match v.to_i128() {
        Some(i) => lo <= i && i <= hi,
        // lo and hi + 1 are powers of two, exact in f64.
        None => {
            let t = v.to_f64().trunc();
            t.is_finite() && lo as f64 <= t && t < (hi + 1) as f64
        }
    };
    if fits {
        return Ok(());
    }
    let shown = v.to_i128().map_or_else(|| v.to_f64().to_string(), |i| i.to_string());
    Err(Error::overflow(op, format!("the scalar {shown} is out of bounds for {d} (which holds {lo} to {hi})")))
}

/// A scalar constant placed and typed to combine with `x` in `op`.
pub(crate) fn scalar_for<S: Scalar>(op: &str, x: &Tensor, v: S) -> Result<Tensor> {
    let d = weak_dtype::<S>(x.dtype());
    check_scalar_fits(op, v, d)?;
    lax::scalar(v.to_f64(), d, x.device())
}
