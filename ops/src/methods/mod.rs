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
mod shaping;

pub use indexing::Idx;
pub use inplace::{assign_check, check_write};

use crate::error::{Error, Result};
use crate::lax;
use crate::tensor::Tensor;
use xform_kernels::{DType, Shape};

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

/// The numpy broadcast of two shapes.
pub fn broadcast_shapes(op: &str, a: &Shape, b: &Shape) -> Result<Shape> {
    let r = a.rank().max(b.rank());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.rank() >= r { a[i + a.rank() - r] } else { 1 };
        let db = if i + b.rank() >= r { b[i + b.rank() - r] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(op, "shapes cannot be broadcast together", &[a, b]));
        };
    }
    Ok(Shape::from(out))
}

/// Both operands promoted to one dtype and broadcast to one shape.
pub(crate) fn align(op: &str, a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
    let (da, db) = (a.dtype(), b.dtype());
    let (a, b) = if da == db {
        (a.clone(), b.clone())
    } else {
        let d = DType::promote(da, db);
        (lax::convert(a, d)?, lax::convert(b, d)?)
    };
    if a.same_shape(&b) {
        return Ok((a, b));
    }
    let s = broadcast_shapes(op, &a.shape(), &b.shape())?;
    Ok((lax::broadcast_to(&a, &s)?, lax::broadcast_to(&b, &s)?))
}

/// A Rust number usable as a scalar operand (`&x * 2.0`, `x.add_(1)`).
///
/// Scalars are "weak": they take the tensor's dtype, except that a float
/// scalar with an integer or bool tensor promotes to f32 (as in JAX and
/// PyTorch).
pub trait Scalar: Copy {
    /// The value as f64.
    fn to_f64(self) -> f64;
    /// True for float types.
    const IS_FLOAT: bool;
}

macro_rules! scalar_impl {
    ($($t:ty => $f:expr),*) => {$(
        impl Scalar for $t {
            fn to_f64(self) -> f64 {
                self as f64
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

/// A scalar constant placed and typed to combine with `x`.
pub(crate) fn scalar_for<S: Scalar>(x: &Tensor, v: S) -> Result<Tensor> {
    lax::scalar(v.to_f64(), weak_dtype::<S>(x.dtype()), x.device())
}
