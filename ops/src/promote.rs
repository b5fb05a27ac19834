//! numpy's broadcasting and dtype promotion of two operands, applied
//! before binding by the `Tensor` methods (`methods/`) and by the methods
//! the op tables generate in their families (`pow`, `exp`, ...): `lax`
//! stays strict, as JAX's is.

use crate::error::{Error, Result};
use crate::lax;
use crate::prim::{BinaryOp, CompareOp};
use crate::tensor::Tensor;
use xform_kernels::{DType, Shape};

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

/// Broadcasting, promoting binary op.
pub(crate) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (a, b) = align(op.name(), a, b)?;
    lax::binary(op, &a, &b)
}

/// Broadcasting, promoting binary op of float math: integer and bool
/// operands are converted to f32 after promotion (as the unary float
/// methods do; `jnp` promotes them to an inexact type likewise).
pub(crate) fn float_binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (a, b) = align(op.name(), a, b)?;
    lax::binary(op, &as_float(&a)?, &as_float(&b)?)
}

/// Broadcasting, promoting comparison.
pub(crate) fn compare(op: CompareOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (a, b) = align(op.name(), a, b)?;
    lax::compare(op, &a, &b)
}

/// A float version of `x` for float-only math (ints and bools become f32).
pub(crate) fn as_float(x: &Tensor) -> Result<Tensor> {
    if x.dtype().is_float() {
        Ok(x.clone())
    } else {
        lax::convert(x, DType::F32)
    }
}
