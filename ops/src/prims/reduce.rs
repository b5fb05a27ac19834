//! Reductions (sum, max, min over axes), arg-reductions (argmax, argmin
//! along one axis) and cumulative sums: shape rules, lowering, JVP,
//! transpose and batching.

use super::batching::physical;
use super::{check_arity, check_axes, check_axis};
use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, Axes, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use xform_kernels::cpu::reduce::{arg_reduce, cumulative, reduce, reduced_shape, Reducer};
use xform_kernels::cpu::Par;
use xform_kernels::{CpuBuffer, DType, Element, Float, Layout, Real};

/// The reductions over axes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (0 for an empty reduction).
    Sum,
    /// Maximum (-inf, or the type's minimum, for an empty reduction).
    Max,
    /// Minimum (+inf, or the type's maximum, for an empty reduction).
    Min,
}

impl ReduceOp {
    /// The name programs print.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
        }
    }
}

/// argmax or argmin.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ArgOp {
    /// Index of the (first) maximum.
    Max,
    /// Index of the (first) minimum.
    Min,
}

impl ArgOp {
    /// The name programs print.
    pub fn name(self) -> &'static str {
        match self {
            ArgOp::Max => "argmax",
            ArgOp::Min => "argmin",
        }
    }
}

// ---- shape rules -----------------------------------------------------------

pub(crate) fn shape_reduce(op: ReduceOp, axes: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity(op.name(), ins, 1)?;
    let x = &ins[0];
    check_axes(op.name(), axes, x.rank())?;
    if x.dtype == DType::Bool {
        return Err(Error::dtype(op.name(), "cannot reduce bool values; convert them first", &[x.dtype]));
    }
    let mut a = x.to_owned();
    a.shape = reduced_shape(x.shape, axes);
    Ok(smallvec![a])
}

pub(crate) fn shape_arg_reduce(op: ArgOp, axis: usize, index_dtype: DType, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity(op.name(), ins, 1)?;
    let x = &ins[0];
    check_axis(op.name(), axis, x.rank())?;
    if !index_dtype.is_int() {
        return Err(Error::dtype(op.name(), "the index dtype must be an integer type", &[index_dtype]));
    }
    if x.shape[axis] == 0 {
        return Err(Error::shape(op.name(), format!("axis {axis} is empty, so it has no extreme element"), &[x.shape]));
    }
    if x.dtype == DType::Bool {
        return Err(Error::dtype(op.name(), "cannot rank bool values; convert them first", &[x.dtype]));
    }
    Ok(smallvec![crate::Aval { shape: reduced_shape(x.shape, &[axis]), dtype: index_dtype, device: x.device }])
}

pub(crate) fn shape_cumsum(axis: usize, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("cumsum", ins, 1)?;
    check_axis("cumsum", axis, ins[0].rank())?;
    if ins[0].dtype == DType::Bool {
        return Err(Error::dtype("cumsum", "cannot sum bool values; convert them first", &[ins[0].dtype]));
    }
    Ok(smallvec![ins[0].to_owned()])
}

// ---- lowering --------------------------------------------------------------

fn float_reduce<T: Float>(op: ReduceOp, v: &[T], l: &Layout, axes: &[usize]) -> Vec<T> {
    let par = Par::for_work(l.numel(), 1);
    match op {
        // f32 and the half types accumulate in f64: sums of many elements stay accurate.
        ReduceOp::Sum => {
            reduce(v, l, axes, par, Reducer { init: 0.0f64, fold: |a, x: T| a + x.to_f64(), finish: T::from_f64 })
        }
        ReduceOp::Max => reduce(
            v,
            l,
            axes,
            par,
            Reducer {
                init: T::min_value().up(),
                fold: |a: T::Compute, x: T| {
                    let x = x.up();
                    if a.is_nan() || x.is_nan() {
                        a + x
                    } else if x > a {
                        x
                    } else {
                        a
                    }
                },
                finish: T::down,
            },
        ),
        ReduceOp::Min => reduce(
            v,
            l,
            axes,
            par,
            Reducer {
                init: T::max_value().up(),
                fold: |a: T::Compute, x: T| {
                    let x = x.up();
                    if a.is_nan() || x.is_nan() {
                        a + x
                    } else if x < a {
                        x
                    } else {
                        a
                    }
                },
                finish: T::down,
            },
        ),
    }
}

fn int_reduce<T: super::binary::IntBinary>(op: ReduceOp, v: &[T], l: &Layout, axes: &[usize]) -> Vec<T> {
    let par = Par::for_work(l.numel(), 1);
    match op {
        ReduceOp::Sum => reduce(v, l, axes, par, Reducer { init: T::ZERO, fold: T::add_, finish: |a| a }),
        ReduceOp::Max => reduce(
            v,
            l,
            axes,
            par,
            Reducer { init: T::min_value(), fold: |a, x| if x > a { x } else { a }, finish: |a| a },
        ),
        ReduceOp::Min => reduce(
            v,
            l,
            axes,
            par,
            Reducer { init: T::max_value(), fold: |a, x| if x < a { x } else { a }, finish: |a| a },
        ),
    }
}

pub(crate) fn lower_reduce(op: ReduceOp, axes: &[usize], x: &Array) -> Result<Array> {
    if let Device::Cuda(_) = x.device() {
        return crate::backend::cuda_reduce(op, axes, x);
    }
    let out = x.with_cpu(op.name(), |b, l| match b {
        CpuBuffer::F32(v) => CpuBuffer::F32(float_reduce(op, v, l, axes)),
        CpuBuffer::F64(v) => CpuBuffer::F64(float_reduce(op, v, l, axes)),
        CpuBuffer::F16(v) => CpuBuffer::F16(float_reduce(op, v, l, axes)),
        CpuBuffer::BF16(v) => CpuBuffer::BF16(float_reduce(op, v, l, axes)),
        CpuBuffer::I32(v) => CpuBuffer::I32(int_reduce(op, v, l, axes)),
        CpuBuffer::I64(v) => CpuBuffer::I64(int_reduce(op, v, l, axes)),
        CpuBuffer::U32(v) => CpuBuffer::U32(int_reduce(op, v, l, axes)),
        CpuBuffer::Bool(_) => unreachable!("checked by the shape rule"),
    })?;
    Ok(Array::from_cpu(out, reduced_shape(x.shape(), axes)))
}

pub(crate) fn lower_arg_reduce(op: ArgOp, axis: usize, index_dtype: DType, x: &Array) -> Result<Array> {
    if let Device::Cuda(_) = x.device() {
        return crate::backend::cuda_arg_reduce(op, axis, index_dtype, x);
    }
    fn run<T: Element, I: Element>(op: ArgOp, v: &[T], l: &Layout, axis: usize) -> Vec<I> {
        let par = Par::for_work(l.numel(), 1);
        let to = |i: usize| I::from_i64(i as i64);
        match op {
            ArgOp::Max => arg_reduce(v, l, axis, par, |a, b| a > b, to),
            ArgOp::Min => arg_reduce(v, l, axis, par, |a, b| a < b, to),
        }
    }
    let out = x.with_cpu(op.name(), |b, l| {
        xform_kernels::with_int_dtype!(index_dtype, I => xform_kernels::match_buffer!(b, v => CpuBuffer::from_vec(run::<_, I>(op, v, l, axis))), _ => unreachable!("checked by the shape rule"))
    })?;
    Ok(Array::from_cpu(out, reduced_shape(x.shape(), &[axis])))
}

pub(crate) fn lower_cumsum(axis: usize, reverse: bool, x: &Array) -> Result<Array> {
    if let Device::Cuda(_) = x.device() {
        return crate::backend::cuda_cumsum(axis, reverse, x);
    }
    fn float<T: Float>(v: &[T], l: &Layout, axis: usize, reverse: bool) -> Vec<T> {
        let out: Vec<f64> =
            cumulative(v, l, axis, reverse, Reducer { init: 0.0f64, fold: |a, x: T| a + x.to_f64(), finish: |a| a });
        out.into_iter().map(T::from_f64).collect()
    }
    fn int<T: super::binary::IntBinary + Default>(v: &[T], l: &Layout, axis: usize, reverse: bool) -> Vec<T> {
        cumulative(v, l, axis, reverse, Reducer { init: T::ZERO, fold: T::add_, finish: |a| a })
    }
    let out = x.with_cpu("cumsum", |b, l| match b {
        CpuBuffer::F32(v) => CpuBuffer::F32(float(v, l, axis, reverse)),
        CpuBuffer::F64(v) => CpuBuffer::F64(float(v, l, axis, reverse)),
        CpuBuffer::F16(v) => CpuBuffer::F16(float(v, l, axis, reverse)),
        CpuBuffer::BF16(v) => CpuBuffer::BF16(float(v, l, axis, reverse)),
        CpuBuffer::I32(v) => CpuBuffer::I32(int(v, l, axis, reverse)),
        CpuBuffer::I64(v) => CpuBuffer::I64(int(v, l, axis, reverse)),
        CpuBuffer::U32(v) => CpuBuffer::U32(int(v, l, axis, reverse)),
        CpuBuffer::Bool(_) => unreachable!("checked by the shape rule"),
    })?;
    Ok(Array::from_cpu(out, x.shape().clone()))
}

// ---- JVP ---------------------------------------------------------------------

/// `y` (reduced over `axes`) broadcast back to the shape of `x`.
fn unreduce(y: &Tensor, x_shape: &xform_kernels::Shape, axes: &[usize]) -> Result<Tensor> {
    let kept: Axes = (0..x_shape.rank()).filter(|d| !axes.contains(d)).collect();
    lax::broadcast_in_dim(y, x_shape, &kept)
}

pub(crate) fn jvp_reduce(
    op: ReduceOp,
    axes: &[usize],
    primals: &[Tensor],
    tangents: &[Option<Tensor>],
) -> Result<(Outs, Tangents)> {
    let x = &primals[0];
    let y = lax::reduce(op, x, axes)?;
    let t = match &tangents[0] {
        None => None,
        Some(_) if !x.dtype().is_float() => None,
        Some(t) => match op {
            ReduceOp::Sum => Some(lax::reduce_sum(t, axes)?),
            ReduceOp::Max | ReduceOp::Min => {
                // The tangent of the extreme element, averaged over ties.
                // The other elements' tangents are selected away, not
                // multiplied by 0: a NaN or inf tangent where the extreme
                // is not (pow's exponent tangent at a negative base, say)
                // must not reach the result, as in JAX (XLA folds its
                // multiply by the indicator into a select) and PyTorch
                // (which scatters to the chosen element).
                let xs = x.shape();
                let at_extreme = lax::eq(x, &unreduce(&y, &xs, axes)?)?;
                let count = lax::reduce_sum(&lax::convert(&at_extreme, x.dtype())?, axes)?;
                let zeros = lax::full(&xs, 0.0, t.dtype(), t.device())?;
                let chosen = lax::select(&at_extreme, t, &zeros)?;
                Some(lax::div(&lax::reduce_sum(&chosen, axes)?, &count)?)
            }
        },
    };
    Ok((smallvec![y], smallvec![t]))
}

// ---- transpose ---------------------------------------------------------------

pub(crate) fn transpose_reduce(
    op: ReduceOp,
    axes: &[usize],
    cts: &[Option<Tensor>],
    args: &[LinearArg],
) -> Result<Cotangents> {
    if op != ReduceOp::Sum {
        return Err(Error::transform(op.name(), format!("{} is not linear, so it cannot be transposed", op.name())));
    }
    let shape = args[0].aval().shape;
    Ok(smallvec![cts[0].as_ref().map(|c| unreduce(c, &shape, axes)).transpose()?])
}

pub(crate) fn transpose_cumsum(
    axis: usize,
    reverse: bool,
    cts: &[Option<Tensor>],
    _args: &[LinearArg],
) -> Result<Cotangents> {
    Ok(smallvec![cts[0].as_ref().map(|c| lax::cumsum(c, axis, !reverse)).transpose()?])
}

// ---- batching ----------------------------------------------------------------

pub(crate) fn batch_reduce(
    op: ReduceOp,
    axes: &[usize],
    ins: &[Tensor],
    bdims: &[Option<usize>],
) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let phys: Axes = axes.iter().map(|&a| physical(a, b)).collect();
    let out_b = b - phys.iter().filter(|&&a| a < b).count();
    Ok((smallvec![lax::reduce(op, &ins[0], &phys)?], smallvec![Some(out_b)]))
}

pub(crate) fn batch_arg_reduce(
    op: ArgOp,
    axis: usize,
    index_dtype: DType,
    ins: &[Tensor],
    bdims: &[Option<usize>],
) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let pa = physical(axis, b);
    let out_b = if pa < b { b - 1 } else { b };
    Ok((smallvec![lax::arg_reduce(op, &ins[0], pa, index_dtype)?], smallvec![Some(out_b)]))
}

pub(crate) fn batch_cumsum(
    axis: usize,
    reverse: bool,
    ins: &[Tensor],
    bdims: &[Option<usize>],
) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let y = bind1(&Prim::Cumsum { axis: physical(axis, b), reverse }, &ins[..1])?;
    Ok((smallvec![y], smallvec![Some(b)]))
}
