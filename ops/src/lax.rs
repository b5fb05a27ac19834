//! One function per primitive, returning `Result`: what rules (and the
//! user-facing methods) are written with. Operands must already have the
//! shapes and dtypes the primitive requires; numpy-style broadcasting and
//! promotion live in `methods`.

use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::interp::{bind, bind1};
use crate::prim::{
    Amounts, ArgOp, Axes, DotDims, ElementwiseOp, IndexOp, LinalgOp, RandomOp, ReduceOp, Reduction, ShapeOp,
};
use crate::tensor::Tensor;
use smallvec::{smallvec, SmallVec};
use xform_kernels::{DType, Shape};

pub use crate::prims::collective::{
    all_gather, all_to_all, axis_index, axis_size_of as axis_size, pmax, pmean, pmin, ppermute, psum, psum_scatter,
    IntoAxisNames,
};
pub use crate::prims::conv::{conv_general_dilated, ConvDims, ConvOptions};
pub use crate::prims::decomp::{
    cholesky, diagonal, eigh, lu, qr, singular_values, svd, triangular_solve, TriangularSpec,
};
pub use crate::prims::padding::Padding;
pub use crate::prims::unary::{api::*, unary};
pub use crate::prims::window::{
    avg_pool, avg_pool_with, max_pool, reduce_window, reduce_window_max, reduce_window_min, reduce_window_sum,
    select_and_gather_add, select_and_scatter_add, SelectOp, WindowParams,
};

/// Converts to `dtype` (no-op if already).
pub fn convert(x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    bind1(&ElementwiseOp::Convert(dtype).into(), std::slice::from_ref(x))
}

pub use crate::prims::binary::{api::*, binary};
pub use crate::prims::compare::{api::*, compare};

/// `pred ? on_true : on_false`, elementwise.
pub fn select(pred: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
    bind1(&ElementwiseOp::Select.into(), &[pred.clone(), on_true.clone(), on_false.clone()])
}

fn sorted_axes(axes: &[usize]) -> Axes {
    let mut a: Axes = axes.iter().copied().collect();
    a.sort_unstable();
    a.dedup();
    a
}

/// Reduction over `axes`.
pub fn reduce(op: ReduceOp, x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    if axes.is_empty() {
        return Ok(x.clone());
    }
    bind1(&Reduction::Reduce { op, axes: sorted_axes(axes) }.into(), std::slice::from_ref(x))
}

/// Sum over `axes`.
pub fn reduce_sum(x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    reduce(ReduceOp::Sum, x, axes)
}

/// Max over `axes`.
pub fn reduce_max(x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    reduce(ReduceOp::Max, x, axes)
}

/// Min over `axes`.
pub fn reduce_min(x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    reduce(ReduceOp::Min, x, axes)
}

/// Index of the max or min along `axis`.
pub fn arg_reduce(op: ArgOp, x: &Tensor, axis: usize, index_dtype: DType) -> Result<Tensor> {
    bind1(&Reduction::ArgReduce { op, axis, index_dtype }.into(), std::slice::from_ref(x))
}

/// Cumulative sum along `axis`.
pub fn cumsum(x: &Tensor, axis: usize, reverse: bool) -> Result<Tensor> {
    bind1(&Reduction::Cumsum { axis, reverse }.into(), std::slice::from_ref(x))
}

/// Broadcast: operand axis `i` becomes axis `dims[i]` of `shape`.
pub fn broadcast_in_dim(x: &Tensor, shape: &Shape, dims: &[usize]) -> Result<Tensor> {
    if x.shape() == *shape {
        return Ok(x.clone());
    }
    bind1(
        &ShapeOp::BroadcastInDim { shape: shape.clone(), dims: dims.iter().copied().collect() }.into(),
        std::slice::from_ref(x),
    )
}

/// Numpy-style broadcast of `x` to `shape` (trailing axes aligned).
pub fn broadcast_to(x: &Tensor, shape: &Shape) -> Result<Tensor> {
    let r = x.rank();
    if r > shape.rank() {
        return Err(Error::shape("broadcast_to", "cannot broadcast to a lower rank", &[&x.shape(), shape]));
    }
    let dims: Axes = (shape.rank() - r..shape.rank()).collect();
    broadcast_in_dim(x, shape, &dims)
}

/// New shape, same elements.
pub fn reshape(x: &Tensor, shape: &Shape) -> Result<Tensor> {
    if x.shape() == *shape {
        return Ok(x.clone());
    }
    bind1(&ShapeOp::Reshape { shape: shape.clone() }.into(), std::slice::from_ref(x))
}

/// Axis permutation: output axis `i` is input axis `perm[i]`.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    bind1(&ShapeOp::Transpose { perm: perm.iter().copied().collect() }.into(), std::slice::from_ref(x))
}

/// Moves axis `from` to position `to`.
pub fn moveaxis(x: &Tensor, from: usize, to: usize) -> Result<Tensor> {
    if from == to {
        return Ok(x.clone());
    }
    let mut perm: Axes = (0..x.rank()).filter(|&d| d != from).collect();
    perm.insert(to, from);
    transpose(x, &perm)
}

/// Strided slice.
pub fn slice(x: &Tensor, start: &[usize], limit: &[usize], strides: &[usize]) -> Result<Tensor> {
    bind1(
        &ShapeOp::Slice { start: start.into(), limit: limit.into(), strides: strides.into() }.into(),
        std::slice::from_ref(x),
    )
}

/// `start..limit` along one axis (step 1).
pub fn slice_axis(x: &Tensor, axis: usize, start: usize, limit: usize) -> Result<Tensor> {
    let shape = x.shape();
    let mut s: Axes = smallvec![0; shape.rank()];
    let mut l: Axes = shape.iter().copied().collect();
    s[axis] = start;
    l[axis] = limit;
    slice(x, &s, &l, &smallvec::SmallVec::<[usize; 4]>::from_elem(1, shape.rank()))
}

/// Position `k` of `axis`, the axis removed (one example of a stack).
pub fn index_axis(x: &Tensor, axis: usize, k: usize) -> Result<Tensor> {
    let part = slice_axis(x, axis, k, k + 1)?;
    let mut shape = part.shape();
    shape.0.remove(axis);
    reshape(&part, &shape)
}

/// Pad with the scalar `value`.
pub fn pad(x: &Tensor, value: &Tensor, low: &[i64], high: &[i64], interior: &[usize]) -> Result<Tensor> {
    bind1(
        &ShapeOp::Pad { low: Amounts::from_slice(low), high: Amounts::from_slice(high), interior: interior.into() }
            .into(),
        &[x.clone(), value.clone()],
    )
}

/// Join along `axis`.
pub fn concatenate(xs: &[Tensor], axis: usize) -> Result<Tensor> {
    if xs.len() == 1 {
        return Ok(xs[0].clone());
    }
    bind1(&ShapeOp::Concatenate { axis }.into(), xs)
}

/// Reverse `axes`.
pub fn rev(x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    if axes.is_empty() {
        return Ok(x.clone());
    }
    bind1(&ShapeOp::Rev { axes: sorted_axes(axes) }.into(), std::slice::from_ref(x))
}

/// `out[i] = i[dim]` over `shape`.
pub fn iota(dtype: DType, shape: &Shape, dim: usize, device: Device) -> Result<Tensor> {
    bind1(&ShapeOp::Iota { shape: shape.clone(), dim, dtype, device }.into(), &[])
}

/// A copy in fresh storage.
pub fn copy(x: &Tensor) -> Result<Tensor> {
    bind1(&ElementwiseOp::Copy.into(), std::slice::from_ref(x))
}

/// Slice of `sizes` at runtime `starts` (one scalar integer per axis; a
/// negative start is wrapped by the axis length, then every start is
/// clamped so the block fits, as in JAX).
pub fn dynamic_slice(x: &Tensor, starts: &[Tensor], sizes: &[usize]) -> Result<Tensor> {
    let mut ins: SmallVec<[Tensor; 4]> = smallvec![x.clone()];
    ins.extend(starts.iter().cloned());
    bind1(&IndexOp::DynamicSlice { sizes: sizes.into() }.into(), &ins)
}

/// `x` with the block at runtime `starts` replaced by `update` (starts
/// resolved as in [`dynamic_slice`]).
pub fn dynamic_update_slice(x: &Tensor, update: &Tensor, starts: &[Tensor]) -> Result<Tensor> {
    let mut ins: SmallVec<[Tensor; 4]> = smallvec![x.clone(), update.clone()];
    ins.extend(starts.iter().cloned());
    bind1(&IndexOp::DynamicUpdateSlice.into(), &ins)
}

/// `tf.gather(x, indices, axis, batch_dims)`.
pub fn gather(x: &Tensor, indices: &Tensor, axis: usize, batch_dims: usize) -> Result<Tensor> {
    bind1(&IndexOp::Gather { axis, batch_dims }.into(), &[x.clone(), indices.clone()])
}

/// Adds `updates` into `x` at `indices` (the transpose of gather).
pub fn scatter_add(x: &Tensor, indices: &Tensor, updates: &Tensor, axis: usize, batch_dims: usize) -> Result<Tensor> {
    bind1(&IndexOp::ScatterAdd { axis, batch_dims }.into(), &[x.clone(), indices.clone(), updates.clone()])
}

/// Generalized matrix product.
pub fn dot_general(a: &Tensor, b: &Tensor, dims: DotDims) -> Result<Tensor> {
    bind1(&LinalgOp::DotGeneral(dims).into(), &[a.clone(), b.clone()])
}

/// Threefry-2x32 on u32 operands of one shape.
pub fn threefry2x32(k0: &Tensor, k1: &Tensor, x0: &Tensor, x1: &Tensor) -> Result<(Tensor, Tensor)> {
    let mut outs = bind(&RandomOp::Threefry2x32.into(), &[k0.clone(), k1.clone(), x0.clone(), x1.clone()])?;
    let b = outs.pop().expect("two outputs");
    let a = outs.pop().expect("two outputs");
    Ok((a, b))
}

// ---- constants -------------------------------------------------------------

/// A constant of `shape` filled with `value` (stored once, broadcast).
pub fn full(shape: &Shape, value: f64, dtype: DType, device: Device) -> Result<Tensor> {
    Ok(Tensor::from_array(Array::full_broadcast(shape.clone(), dtype, value, device)?))
}

/// A scalar constant.
pub fn scalar(value: f64, dtype: DType, device: Device) -> Result<Tensor> {
    full(&Shape::scalar(), value, dtype, device)
}

/// A constant shaped, typed and placed like `x`.
pub fn full_like(x: &Tensor, value: f64) -> Result<Tensor> {
    let a = x.aval();
    full(&a.shape, value, a.dtype, a.device)
}

/// Zeros like `x`.
pub fn zeros_like(x: &Tensor) -> Result<Tensor> {
    full_like(x, 0.0)
}

/// Ones like `x`.
pub fn ones_like(x: &Tensor) -> Result<Tensor> {
    full_like(x, 1.0)
}

/// Zeros of an abstract value.
pub fn zeros_aval(a: &crate::Aval) -> Result<Tensor> {
    full(&a.shape, 0.0, a.dtype, a.device)
}

/// `x * c` for a scalar constant `c` in `x`'s dtype.
pub fn mul_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    mul(x, &full_like(x, c)?)
}

/// `x + c` for a scalar constant `c` in `x`'s dtype.
pub fn add_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    add(x, &full_like(x, c)?)
}

/// `x` with a unit axis inserted at `axis`.
pub fn expand_dims(x: &Tensor, axis: usize) -> Result<Tensor> {
    let mut s = x.shape();
    s.0.insert(axis, 1);
    reshape(x, &s)
}

/// Sum of optional tangents (`None` is zero).
pub fn add_any(a: Option<Tensor>, b: Option<Tensor>) -> Result<Option<Tensor>> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(add(&a, &b)?),
        (a, None) => a,
        (None, b) => b,
    })
}

/// The tangent, or zeros shaped like `like` where it is symbolic.
pub fn instantiate(t: &Option<Tensor>, like: &Tensor) -> Result<Tensor> {
    match t {
        Some(t) => Ok(t.clone()),
        None => zeros_like(like),
    }
}
