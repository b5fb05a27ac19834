//! Reductions (sum, max, min over axes), arg-reductions (argmax, argmin
//! along one axis) and cumulative sums: shape rules, lowering (the CUDA
//! folds beside the CPU reducers), JVP, transpose, batching and samples.

use super::batching::physical;
use super::batching::BatchAxis;
use super::cuda_c::CudaCx;
use super::jit::{self, Blame, JitProps, RowFusion, RowQuery, RowRule};
use super::jit::{Tile, TileMut};
use super::sample::{numeric, Case, Sample};
use super::{check_arity, check_axes, check_axis, Family, OnesTranspose, Props};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, Axes, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use std::mem::MaybeUninit;
use xform_kernels::cpu::reduce::{
    arg_reduce, cumulative, fold_rows_into, reduce, reduced_shape, sum_row, sum_rows, trailing_rows, Reducer,
};
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::{arg_reduce_kernel, cumulative_kernel, reduce_kernel, Fold, Kernel, Ranking};
use xform_kernels::{CpuBuffer, DType, Element, Float, Layout, Real};

crate::op_enum! {
    /// The reductions over axes.
    pub enum ReduceOp {
        /// Sum (0 for an empty reduction).
        Sum => "reduce_sum",
        /// Maximum (-inf, or the type's minimum, for an empty reduction).
        Max => "reduce_max",
        /// Minimum (+inf, or the type's maximum, for an empty reduction).
        Min => "reduce_min",
    }
}

crate::op_enum! {
    /// argmax or argmin.
    pub enum ArgOp {
        /// Index of the (first) maximum.
        Max => "argmax",
        /// Index of the (first) minimum.
        Min => "argmin",
    }
}

crate::family_enum! {
    /// The reduction primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Reduction, kinds ReductionKind {
        /// Sum, max or min over sorted unique axes.
        Reduce {
            /// Which reduction.
            op: ReduceOp,
            /// Reduced axes, sorted, unique.
            axes: Axes,
        },
        /// Index of the max or min along one axis.
        ArgReduce {
            /// argmax or argmin.
            op: ArgOp,
            /// The reduced axis.
            axis: usize,
            /// Integer dtype of the result.
            index_dtype: DType,
        },
        /// Cumulative sum along one axis.
        Cumsum {
            /// The axis.
            axis: usize,
            /// Sum from the end.
            reverse: bool,
        },
    }
}

// ---- shape rules -----------------------------------------------------------

fn shape_reduce(op: ReduceOp, axes: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
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

fn shape_arg_reduce(op: ArgOp, axis: usize, index_dtype: DType, ins: &[AvalRef<'_>]) -> Result<Avals> {
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

fn shape_cumsum(axis: usize, ins: &[AvalRef<'_>]) -> Result<Avals> {
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
        // f32 and the half types accumulate in f64: sums of many elements
        // stay accurate. Over the trailing axes of a contiguous array (rows),
        // they take the vectorized kernel; f64 keeps the sequential order.
        ReduceOp::Sum => match trailing_rows(l, axes) {
            Some((range, row_len)) if T::DTYPE != DType::F64 => {
                sum_rows(&v[range], row_len, par, |x: T| x.to_f64(), T::from_f64)
            }
            _ => reduce(v, l, axes, par, Reducer { init: 0.0f64, fold: |a, x: T| a + x.to_f64(), finish: T::from_f64 }),
        },
        ReduceOp::Max => {
            reduce(v, l, axes, par, Reducer { init: T::min_value().up(), fold: max_fold::<T>, finish: T::down })
        }
        ReduceOp::Min => {
            reduce(v, l, axes, par, Reducer { init: T::max_value().up(), fold: min_fold::<T>, finish: T::down })
        }
    }
}

/// The float max fold: NaN wins (propagated through `a + x`), else the
/// larger; on ties (+0 and -0) the earlier element stays.
fn max_fold<T: Float>(a: T::Compute, x: T) -> T::Compute {
    let x = x.up();
    if a.is_nan() || x.is_nan() {
        a + x
    } else if x > a {
        x
    } else {
        a
    }
}

/// The float min fold (see [`max_fold`]).
fn min_fold<T: Float>(a: T::Compute, x: T) -> T::Compute {
    let x = x.up();
    if a.is_nan() || x.is_nan() {
        a + x
    } else if x < a {
        x
    } else {
        a
    }
}

/// Each row of `row` consecutive elements of `x` reduced by `op` into one
/// element of `out`, with the bits of the eager lowering over the trailing
/// axis (the jit's row fusion: NOTE: [row fusion]): f32 sums of rows of a
/// contiguous array through [`sum_row`] as `sum_rows` adds a row; those of
/// a strided array (`strided`: the rows were gathered), f64 sums, and max
/// and min folded in order from the same start as the strided `reduce` and
/// `fold_rows`.
fn float_rows<T: Float>(op: ReduceOp, x: &[T], row: usize, strided: bool, out: &mut [MaybeUninit<T>]) {
    match op {
        ReduceOp::Sum if T::DTYPE != DType::F64 && !strided => {
            for (r, o) in x.chunks_exact(row).zip(out.iter_mut()) {
                o.write(T::from_f64(sum_row(r, |x: T| x.to_f64())));
            }
        }
        ReduceOp::Sum => {
            fold_rows_into(x, row, out, &Reducer { init: 0.0f64, fold: |a, x: T| a + x.to_f64(), finish: T::from_f64 })
        }
        ReduceOp::Max => {
            fold_rows_into(x, row, out, &Reducer { init: T::min_value().up(), fold: max_fold::<T>, finish: T::down })
        }
        ReduceOp::Min => {
            fold_rows_into(x, row, out, &Reducer { init: T::max_value().up(), fold: min_fold::<T>, finish: T::down })
        }
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

fn lower_reduce(op: ReduceOp, axes: &[usize], x: &Array) -> Result<Array> {
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

fn lower_arg_reduce(op: ArgOp, axis: usize, index_dtype: DType, x: &Array) -> Result<Array> {
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

fn lower_cumsum(axis: usize, reverse: bool, x: &Array) -> Result<Array> {
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

/// The CUDA reduction of `op` over dtype `d` (the semantics of the CPU
/// reducers above: float sums accumulate in f64, integer sums wrap, max/min
/// propagate NaN), or `None` for bool.
pub fn reduce_fold(op: ReduceOp, d: DType) -> Option<Fold> {
    if d == DType::Bool {
        return None;
    }
    let fold = |acc: &str, init: &str, combine: &str, finish: &str| Fold {
        tag: op.name().to_string(),
        acc: acc.to_string(),
        init: init.to_string(),
        combine: combine.to_string(),
        finish: finish.to_string(),
        helpers: String::new(),
    };
    let cx = CudaCx::new(d);
    let (c, t, u) = (cx.c(), cx.t(), cx.u());
    Some(match (op, d.is_float()) {
        (ReduceOp::Sum, true) => fold("double", "0.0", "a + b", "a"),
        (ReduceOp::Sum, false) => fold(u, "0", "a + b", &format!("({t})a")),
        (ReduceOp::Max, true) => fold(c, cx.infinity(true), "(a != a || b != b) ? a + b : (b > a ? b : a)", "a"),
        (ReduceOp::Min, true) => fold(c, cx.infinity(false), "(a != a || b != b) ? a + b : (b < a ? b : a)", "a"),
        (ReduceOp::Max, false) => {
            let min = match d {
                DType::I32 => "(-2147483647 - 1)",
                DType::I64 => "(-9223372036854775807LL - 1)",
                _ => "0u",
            };
            fold(t, min, "(b > a ? b : a)", "a")
        }
        (ReduceOp::Min, false) => {
            let max = match d {
                DType::I32 => "2147483647",
                DType::I64 => "9223372036854775807LL",
                _ => "4294967295u",
            };
            fold(t, max, "(b < a ? b : a)", "a")
        }
    })
}

/// cumsum's CUDA fold: the running form of the sum (f64 accumulation for
/// floats, wrapping for integers), as `lower_cumsum` on the CPU.
pub fn cumsum_fold(d: DType) -> Option<Fold> {
    reduce_fold(ReduceOp::Sum, d).map(|f| Fold { tag: "cumsum".to_string(), ..f })
}

/// How argmax / argmin rank elements on CUDA (the first extreme wins and
/// NaN counts as extreme, as on the CPU).
pub fn ranking(op: ArgOp) -> Ranking {
    let better = match op {
        ArgOp::Max => "a > b",
        ArgOp::Min => "a < b",
    };
    Ranking { tag: op.name().to_string(), better: better.to_string() }
}

// ---- JVP ---------------------------------------------------------------------

/// `y` (reduced over `axes`) broadcast back to the shape of `x`.
fn unreduce(y: &Tensor, x_shape: &xform_kernels::Shape, axes: &[usize]) -> Result<Tensor> {
    let kept: Axes = (0..x_shape.rank()).filter(|d| !axes.contains(d)).collect();
    lax::broadcast_in_dim(y, x_shape, &kept)
}

fn jvp_reduce(
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

fn transpose_reduce(op: ReduceOp, axes: &[usize], cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    if op != ReduceOp::Sum {
        return Err(Error::transform(op.name(), format!("{} is not linear, so it cannot be transposed", op.name())));
    }
    let shape = args[0].aval().shape;
    Ok(smallvec![cts[0].as_ref().map(|c| unreduce(c, &shape, axes)).transpose()?])
}

fn transpose_cumsum(axis: usize, reverse: bool, cts: &[Option<Tensor>], _args: &[LinearArg]) -> Result<Cotangents> {
    Ok(smallvec![cts[0].as_ref().map(|c| lax::cumsum(c, axis, !reverse)).transpose()?])
}

// ---- batching ----------------------------------------------------------------

fn batch_reduce(op: ReduceOp, axes: &[usize], ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let phys: Axes = axes.iter().map(|&a| physical(a, b)).collect();
    let out_b = b - phys.iter().filter(|&&a| a < b).count();
    Ok((smallvec![lax::reduce(op, &ins[0], &phys)?], smallvec![Some(out_b)]))
}

fn batch_arg_reduce(
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

fn batch_cumsum(axis: usize, reverse: bool, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let y = bind1(&Reduction::Cumsum { axis: physical(axis, b), reverse }.into(), &ins[..1])?;
    Ok((smallvec![y], smallvec![Some(b)]))
}

// ---- the family ------------------------------------------------------------------

impl From<Reduction> for Prim {
    fn from(r: Reduction) -> Prim {
        Prim::Reduce(r)
    }
}

impl Family for Reduction {
    type Kind = ReductionKind;
    const KINDS: &'static [ReductionKind] = ReductionKind::ALL;

    fn kind(&self) -> ReductionKind {
        Reduction::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            Reduction::Reduce { op, .. } => op.name(),
            Reduction::ArgReduce { op, .. } => op.name(),
            Reduction::Cumsum { .. } => "cumsum",
        }
    }

    fn props(&self) -> Props {
        match self {
            // a sum's transpose broadcasts its cotangent: ones stay ones (a
            // sum over no axes may return the cotangent itself)
            Reduction::Reduce { op: ReduceOp::Sum, .. } => Props::NONE.ones(OnesTranspose::Ones),
            Reduction::Reduce { .. } | Reduction::ArgReduce { .. } => Props::NONE,
            Reduction::Cumsum { .. } => Props::NONE.fresh(),
        }
    }

    fn fmt_params(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reduction::Reduce { axes, .. } => write!(f, "[axes={}]", super::axes_str(axes)),
            Reduction::ArgReduce { axis, index_dtype, .. } => write!(f, "[axis={axis} index_dtype={index_dtype}]"),
            Reduction::Cumsum { axis, reverse } => write!(f, "[axis={axis} reverse={reverse}]"),
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            Reduction::Reduce { op, axes } => shape_reduce(*op, axes, ins),
            Reduction::ArgReduce { op, axis, index_dtype } => shape_arg_reduce(*op, *axis, *index_dtype, ins),
            Reduction::Cumsum { axis, .. } => shape_cumsum(*axis, ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(match self {
            Reduction::Reduce { op, axes } => lower_reduce(*op, axes, ins[0]),
            Reduction::ArgReduce { op, axis, index_dtype } => lower_arg_reduce(*op, *axis, *index_dtype, ins[0]),
            Reduction::Cumsum { axis, reverse } => lower_cumsum(*axis, *reverse, ins[0]),
        })
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        let x = ins[0];
        super::one(match self {
            Reduction::Reduce { op, axes } => backend.reduce(op.name(), reduce_fold(*op, x.dtype), axes, x),
            Reduction::ArgReduce { op, axis, index_dtype } => {
                backend.arg_reduce(op.name(), ranking(*op), *axis, *index_dtype, x)
            }
            Reduction::Cumsum { axis, reverse } => backend.cumsum(cumsum_fold(x.dtype), *axis, *reverse, x),
        })
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            Reduction::Reduce { op, axes } => jvp_reduce(*op, axes, primals, tangents),
            Reduction::ArgReduce { .. } => super::no_tangent(prim, primals),
            Reduction::Cumsum { .. } => super::linear_jvp(prim, primals, tangents),
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            Reduction::Reduce { op, axes } => transpose_reduce(*op, axes, cts, args),
            Reduction::ArgReduce { .. } => super::not_linear(self.name()),
            Reduction::Cumsum { axis, reverse } => transpose_cumsum(*axis, *reverse, cts, args),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], _axis: &BatchAxis) -> Result<(Outs, BDims)> {
        match self {
            Reduction::Reduce { op, axes } => batch_reduce(*op, axes, ins, bdims),
            Reduction::ArgReduce { op, axis, index_dtype } => batch_arg_reduce(*op, *axis, *index_dtype, ins, bdims),
            Reduction::Cumsum { axis, reverse } => batch_cumsum(*axis, *reverse, ins, bdims),
        }
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        let mut v: Vec<Sample> = ReduceOp::ALL.iter().map(|&op| reduce_sample(op)).collect();
        for &op in ArgOp::ALL {
            v.push(Sample::new(
                op.name(),
                vec![DType::F64, DType::F32, DType::F16, DType::I32, DType::U32],
                vec![],
                false,
                move |g, d| {
                    let r = g.int(1, 3);
                    let shape: Vec<usize> = (0..r).map(|_| g.int(1, 4)).collect();
                    let axis = g.int(0, r - 1);
                    let index_dtype = g.pick(&[DType::I32, DType::I64]);
                    Case::new(
                        Reduction::ArgReduce { op, axis, index_dtype },
                        vec![(shape, d, super::sample::generic_dom(d))],
                    )
                },
            ));
        }
        v.push(Sample::new("cumsum", numeric(), vec![0], true, |g, d| {
            let r = g.int(1, 3);
            let shape = g.dims(r);
            let axis = g.int(0, r - 1);
            Case::new(Reduction::Cumsum { axis, reverse: g.coin(0.5) }, vec![(shape, d, super::sample::generic_dom(d))])
        }));
        v
    }

    fn cuda_kernels(d: DType) -> Vec<Kernel> {
        let mut v: Vec<Kernel> =
            ReduceOp::ALL.iter().filter_map(|&op| reduce_fold(op, d)).map(|f| reduce_kernel(&f, d, d)).collect();
        v.extend(cumsum_fold(d).map(|f| cumulative_kernel(&f, d, d)));
        if d != DType::Bool {
            for &op in ArgOp::ALL {
                for i in [DType::I32, DType::I64, DType::U32] {
                    v.push(arg_reduce_kernel(&ranking(op), d, i));
                }
            }
        }
        v
    }

    // ---- jit ----

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: true, sink: true, thread_bound: false, lower_into: false }
    }

    /// A reduction passes rows along an axis it keeps.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        match self {
            Reduction::Reduce { axes, .. } => {
                let a = q.axis(0).ok_or(q.split())?;
                if axes.contains(&a) {
                    return Err(q.split());
                }
                q.rows_at(jit::one_operand(a), a - axes.iter().filter(|&&x| x < a).count())
            }
            Reduction::ArgReduce { .. } | Reduction::Cumsum { .. } => jit::no_rows(q),
        }
    }

    fn row_fusion(&self) -> RowFusion<'_> {
        match self {
            Reduction::Reduce { axes, .. } => RowFusion::Reduce { axes },
            Reduction::ArgReduce { .. } | Reduction::Cumsum { .. } => RowFusion::None,
        }
    }

    /// Covered: sums, maxima and minima over f32 and f64 (eager sums an
    /// f32 array's rows in a different order when `strided`).
    fn cpu_row_reduce(&self, x: &Tile<'_>, row: usize, strided: bool, out: TileMut<'_>) -> bool {
        let Reduction::Reduce { op, .. } = self else { return false };
        if row == 0 {
            return false;
        }
        match (x, out) {
            (Tile::F32(x), TileMut::F32(o)) => float_rows(*op, x, row, strided, o),
            (Tile::F64(x), TileMut::F64(o)) => float_rows(*op, x, row, strided, o),
            _ => return false,
        }
        true
    }
}

fn reduce_sample(op: ReduceOp) -> Sample {
    let linear = if op == ReduceOp::Sum { vec![0] } else { vec![] };
    Sample::new(op.name(), numeric(), linear, true, move |g, d| {
        let dom = super::sample::generic_dom(d);
        let r = g.int(0, 3);
        // max/min of an empty set is +-inf: keep their axes nonempty
        let shape: Vec<usize> = if op == ReduceOp::Sum { g.dims(r) } else { (0..r).map(|_| g.int(1, 3)).collect() };
        let axes: Axes = g.subset(r).into_iter().collect();
        let axes = if axes.is_empty() && r > 0 { smallvec![g.int(0, r - 1)] } else { axes };
        if axes.is_empty() {
            // rank 0: reduce over nothing is the identity; use a rank-1 case
            return Case::new(Reduction::Reduce { op, axes: smallvec![0] }, vec![(vec![3], d, dom)]);
        }
        Case::new(Reduction::Reduce { op, axes }, vec![(shape, d, dom)])
    })
}
