//! The primitive families. Each file holds, for each of its primitives, the
//! shape rule, the lowering, the JVP rule, the transpose rule (if linear)
//! and the batch rule, side by side.

pub mod batching;
pub mod binary;
pub mod indexing;
pub mod linalg;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod unary;

use crate::error::{Error, Result};
use crate::tensor::AvalRef;
use xform_kernels::{DType, Shape};

/// Checks the operand count.
#[inline]
pub(crate) fn check_arity(op: &str, ins: &[AvalRef<'_>], n: usize) -> Result<()> {
    if ins.len() != n {
        return Err(Error::invalid(op, format!("expects {n} operand(s), got {}", ins.len())));
    }
    Ok(())
}

/// Checks that all operands have one shape.
#[inline]
pub(crate) fn check_same_shapes(op: &str, ins: &[AvalRef<'_>]) -> Result<()> {
    if let Some(first) = ins.first() {
        if ins[1..].iter().any(|a| a.shape != first.shape) {
            let shapes: Vec<&xform_kernels::Shape> = ins.iter().map(|a| a.shape).collect();
            return Err(Error::shape(op, "operands must have equal shapes", &shapes));
        }
    }
    Ok(())
}

/// Checks that all operands have one dtype.
#[inline]
pub(crate) fn check_same_dtypes(op: &str, ins: &[AvalRef<'_>]) -> Result<()> {
    if let Some(first) = ins.first() {
        if ins[1..].iter().any(|a| a.dtype != first.dtype) {
            let d: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
            return Err(Error::dtype(op, "operands must have equal dtypes", &d));
        }
    }
    Ok(())
}

/// Checks that an operand is an integer (index) type.
pub(crate) fn check_int(op: &str, what: &str, a: &AvalRef<'_>) -> Result<()> {
    if !a.dtype.is_int() {
        return Err(Error::dtype(op, format!("{what} must have an integer dtype"), &[a.dtype]));
    }
    Ok(())
}

/// Checks that `axis < rank`.
pub(crate) fn check_axis(op: &str, axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return Err(Error::axis(op, axis as isize, rank));
    }
    Ok(())
}

/// Checks that `axes` are in range and unique.
pub(crate) fn check_axes(op: &str, axes: &[usize], rank: usize) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        check_axis(op, a, rank)?;
        if axes[..i].contains(&a) {
            return Err(Error::invalid(op, format!("axis {a} is repeated in {axes:?}")));
        }
    }
    Ok(())
}

/// Checks that an array of `shape` and `dtype` can exist: its element
/// count, bytes and strides within `isize::MAX` (see
/// [`Shape::checked_numel`]). Every shape rule's outputs and every
/// constructor pass here, so no kernel sees an overflowed count.
pub fn check_size(op: &str, shape: &Shape, dtype: DType) -> Result<usize> {
    shape.checked_numel(dtype.size_bytes()).ok_or_else(|| {
        Error::overflow(
            op,
            format!(
                "a {dtype} array of shape {shape} is too large: its bytes or strides would pass isize::MAX ({})",
                isize::MAX
            ),
        )
    })
}
