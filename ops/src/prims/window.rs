//! Windowed primitives: `reduce_window` (sum, max or min over sliding
//! windows with strides, padding and both dilations: JAX's
//! `lax.reduce_window`) and the two selections behind the derivatives of a
//! windowed max or min: `select_and_gather_add` (JAX's
//! `_select_and_gather_add`, the JVP) and `select_and_scatter_add` (XLA's
//! select-and-scatter with an add, the transpose of the former: the
//! max-pool VJP). Pooling (`max_pool`, `avg_pool`) is built on them.
//!
//! Semantics, per operand axis (`xform_kernels::cpu::window`): the operand
//! is dilated by `base_dilation`, padded by `padding` (negative amounts
//! crop) and a window of `dims` taps spaced `window_dilation` apart moves by
//! `strides`. Padding and the holes of base dilation hold the reduction's
//! identity (0 for sum, -inf for max and +inf for min, or an integer type's
//! lowest and highest value). A selection picks the first maximum (minimum)
//! in row-major window order. With NaNs it follows JAX (XLA's
//! select-and-scatter with a `ge`/`le` select): a tap takes the selection
//! unless the one selected so far is `>=` (`<=`) it, so a NaN takes it and
//! the next tap takes it from the NaN (max-pooling `[NaN, 3]` routes the
//! gradient to the 3; PyTorch routes it to the NaN). Padding and holes are
//! never selected, and a window entirely in padding selects nothing
//! (gather gives 0, scatter adds nothing). (XLA's CPU selection differs
//! there: a padded position is a candidate holding `-inf` (`+inf`), which
//! keeps a window whose valid taps are all `-inf` and takes one whose last
//! valid tap is a NaN; xform selects the first `-inf`, or the NaN.)
//!
//! The selections take floats; `reduce_window` floats and integers (f16 and
//! bf16 compute in f32, float sums accumulate in f64, integer sums wrap).

mod params;

pub use params::WindowParams;

use super::batching::to_position;
use super::batching::BatchAxis;
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::padding::Padding;
use super::reduce::reduce_fold;
use super::sample::{generic_dom, numeric, Case, Dom, Gen, Sample, FLOATS};
use super::{check_arity, Family, Props};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, ReduceOp, Tangents};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::smallvec;
use std::fmt;
use xform_kernels::conv_geom::dilated;
use xform_kernels::cpu::reduce::Reducer;
use xform_kernels::cpu::window::{self as k, WindowGeom};
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::{reduce_window_kernel, Fold, Kernel};
use xform_kernels::{CpuBuffer, DType, Float, Layout, Real, Shape};

crate::op_enum! {
    /// The element a selection picks in each window.
    pub enum SelectOp {
        /// The first maximum.
        Max => "max",
        /// The first minimum.
        Min => "min",
    }
}

crate::family_enum! {
    /// The windowed primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum WindowOp, kinds WindowKind {
        /// Sum, max or min over each window of one operand.
        ReduceWindow {
            /// The reduction.
            op: ReduceOp,
            /// The window.
            window: WindowParams,
        },
        /// Operands `(t, x)` of one shape: per window of `x`, the element of
        /// `t` at the window's selected position of `x` (0 if none).
        SelectAndGatherAdd {
            /// Which element each window selects.
            select: SelectOp,
            /// The window.
            window: WindowParams,
        },
        /// Operands `(ct, x)`, `ct` shaped like the windows: zeros shaped
        /// like `x` plus each `ct` element at its window's selected position.
        SelectAndScatterAdd {
            /// Which element each window selects.
            select: SelectOp,
            /// The window.
            window: WindowParams,
        },
    }
}

fn reduce_window_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "reduce_window_sum",
        ReduceOp::Max => "reduce_window_max",
        ReduceOp::Min => "reduce_window_min",
    }
}

const GATHER: &str = "select_and_gather_add";
const SCATTER: &str = "select_and_scatter_add";

// ---- lax -----------------------------------------------------------------------

/// `op` (sum, max or min) over each window of `x` (see [`WindowParams`]).
pub fn reduce_window(op: ReduceOp, x: &Tensor, window: &WindowParams) -> Result<Tensor> {
    bind1(&WindowOp::ReduceWindow { op, window: window.clone() }.into(), std::slice::from_ref(x))
}

/// The sum over each window of `dims` moving by `strides` over every axis
/// of `x`, padded with zeros as `padding` says.
pub fn reduce_window_sum(x: &Tensor, dims: &[usize], strides: &[usize], padding: &Padding) -> Result<Tensor> {
    let w = WindowParams::new(reduce_window_name(ReduceOp::Sum), &x.shape(), dims, strides, padding)?;
    reduce_window(ReduceOp::Sum, x, &w)
}

/// The maximum over each window (padding is -inf, or an integer type's
/// lowest value).
pub fn reduce_window_max(x: &Tensor, dims: &[usize], strides: &[usize], padding: &Padding) -> Result<Tensor> {
    let w = WindowParams::new(reduce_window_name(ReduceOp::Max), &x.shape(), dims, strides, padding)?;
    reduce_window(ReduceOp::Max, x, &w)
}

/// The minimum over each window (padding is +inf, or an integer type's
/// highest value).
pub fn reduce_window_min(x: &Tensor, dims: &[usize], strides: &[usize], padding: &Padding) -> Result<Tensor> {
    let w = WindowParams::new(reduce_window_name(ReduceOp::Min), &x.shape(), dims, strides, padding)?;
    reduce_window(ReduceOp::Min, x, &w)
}

/// Per window of `x`, the element of `t` (shaped like `x`) at the window's
/// first maximum (minimum) of `x`, or 0 for a window without operand
/// elements: the JVP of `reduce_window` max (min) with tangent `t`.
pub fn select_and_gather_add(t: &Tensor, x: &Tensor, select: SelectOp, window: &WindowParams) -> Result<Tensor> {
    bind1(&WindowOp::SelectAndGatherAdd { select, window: window.clone() }.into(), &[t.clone(), x.clone()])
}

/// Zeros shaped like `x` plus each element of `ct` (shaped like the
/// windows) at its window's first maximum (minimum) of `x`: the transpose
/// of [`select_and_gather_add`], the VJP of max pooling.
pub fn select_and_scatter_add(ct: &Tensor, x: &Tensor, select: SelectOp, window: &WindowParams) -> Result<Tensor> {
    bind1(&WindowOp::SelectAndScatterAdd { select, window: window.clone() }.into(), &[ct.clone(), x.clone()])
}

/// The window of a pooling op over the trailing spatial axes of an `[N, C,
/// spatial...]` input (size 1 over N and C).
fn pool_window(op: &str, x: &Tensor, window: &[usize], strides: &[usize], padding: &Padding) -> Result<WindowParams> {
    let shape = x.shape();
    let k = window.len();
    if shape.rank() != k + 2 || strides.len() != k {
        return Err(Error::shape(
            op,
            format!(
                "a {k}-d window needs an input of rank {} (N, C and {k} spatial axes) and {k} strides; got {} strides",
                k + 2,
                strides.len()
            ),
            &[&shape],
        ));
    }
    let pads = padding.resolve(op, &shape[2..], window, strides)?;
    let mut w = WindowParams::identity(2);
    w.dims.extend_from_slice(window);
    w.strides.extend_from_slice(strides);
    w.padding.extend(pads);
    w.base_dilation.extend(std::iter::repeat_n(1, k));
    w.window_dilation.extend(std::iter::repeat_n(1, k));
    w.output_shape(op, &shape)?;
    Ok(w)
}

/// Max pooling of an `[N, C, spatial...]` input over its spatial axes:
/// windows of `window` moving by `strides`, padded with -inf as `padding`
/// says (PyTorch's `max_pool1d/2d/3d` with its padding, and "SAME" /
/// "VALID" as in JAX). Its gradient goes to the first maximum of each
/// window.
pub fn max_pool(x: &Tensor, window: &[usize], strides: &[usize], padding: &Padding) -> Result<Tensor> {
    let w = pool_window("max_pool", x, window, strides, padding)?;
    reduce_window(ReduceOp::Max, x, &w)
}

/// Average pooling of an `[N, C, spatial...]` float input over its spatial
/// axes: each window's sum divided by the window's size, padded elements
/// counted as zeros (PyTorch's default `count_include_pad=True`, and
/// flax's `avg_pool`). [`avg_pool_with`] can leave the padding out of the
/// count.
pub fn avg_pool(x: &Tensor, window: &[usize], strides: &[usize], padding: &Padding) -> Result<Tensor> {
    avg_pool_with(x, window, strides, padding, true)
}

/// Average pooling as [`avg_pool`], dividing each window's sum by its size
/// with `count_include_pad` (PyTorch's default), or without it by the number
/// of its elements that lie in the input (PyTorch's
/// `count_include_pad=False`, TensorFlow's average pooling): the window sum
/// of ones over the unpadded input, a constant, so the derivatives are those
/// of a sum divided by it. A window entirely in padding (possible with
/// explicit padding of a window's size or more) then averages nothing: 0 /
/// 0, NaN, as flax's `avg_pool(count_include_pad=False)`.
pub fn avg_pool_with(
    x: &Tensor,
    window: &[usize],
    strides: &[usize],
    padding: &Padding,
    count_include_pad: bool,
) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(Error::dtype("avg_pool", "needs a floating-point input", &[x.dtype()]));
    }
    let w = pool_window("avg_pool", x, window, strides, padding)?;
    let s = reduce_window(ReduceOp::Sum, x, &w)?;
    if count_include_pad {
        let count: usize = window.iter().product();
        return lax::div(&s, &lax::full_like(&s, count as f64)?);
    }
    // The same windows over ones of the spatial shape (size 1 over N and C).
    let mut spatial = x.shape();
    spatial.0[0] = 1;
    spatial.0[1] = 1;
    let ones = lax::full(&spatial, 1.0, x.dtype(), x.device())?;
    let counts = reduce_window(ReduceOp::Sum, &ones, &w)?;
    lax::div(&s, &lax::broadcast_to(&counts, &s.shape())?)
}

// ---- shape rules ---------------------------------------------------------------

fn shape_reduce_window(op: ReduceOp, w: &WindowParams, ins: &[AvalRef<'_>]) -> Result<Avals> {
    let name = reduce_window_name(op);
    check_arity(name, ins, 1)?;
    let x = &ins[0];
    if x.dtype == DType::Bool {
        return Err(Error::dtype(name, "needs a numeric operand (floating-point or integer), not bool", &[x.dtype]));
    }
    let shape = w.output_shape(name, x.shape)?;
    Ok(smallvec![Aval { shape, dtype: x.dtype, device: x.device }])
}

/// The operands of a selection: two of one floating-point dtype.
fn check_select(name: &str, ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity(name, ins, 2)?;
    let (a, x) = (&ins[0], &ins[1]);
    if a.dtype != x.dtype || !x.dtype.is_float() {
        return Err(Error::dtype(name, "needs two operands of one floating-point dtype", &[a.dtype, x.dtype]));
    }
    Ok(())
}

fn shape_select_gather(w: &WindowParams, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_select(GATHER, ins)?;
    let (t, x) = (&ins[0], &ins[1]);
    if t.shape != x.shape {
        return Err(Error::shape(GATHER, "the tangent must be shaped like the operand", &[t.shape, x.shape]));
    }
    let shape = w.output_shape(GATHER, x.shape)?;
    Ok(smallvec![Aval { shape, dtype: x.dtype, device: x.device }])
}

fn shape_select_scatter(w: &WindowParams, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_select(SCATTER, ins)?;
    let (ct, x) = (&ins[0], &ins[1]);
    let out = w.output_shape(SCATTER, x.shape)?;
    if *ct.shape != out {
        return Err(Error::shape(
            SCATTER,
            format!("the cotangent must have the windows' shape {out} (the operand's windows)"),
            &[ct.shape, x.shape],
        ));
    }
    Ok(smallvec![x.to_owned()])
}

// ---- lowering --------------------------------------------------------------------

/// The CUDA fold of `reduce_window` `op` on `d` (the reduction's, renamed).
pub fn window_fold(op: ReduceOp, d: DType) -> Option<Fold> {
    let f = reduce_fold(op, d)?;
    Some(Fold { tag: reduce_window_name(op).trim_start_matches("reduce_window_").to_string(), ..f })
}

fn float_reduce_window<T: Float>(op: ReduceOp, v: &[T], l: &Layout, g: &WindowGeom, par: Par) -> Vec<T> {
    // The folds of `reduce.rs`: sums in f64, NaN propagates through max/min.
    match op {
        ReduceOp::Sum => k::reduce_window(
            v,
            l,
            g,
            par,
            Reducer { init: 0.0f64, fold: |a, x: T| a + x.to_f64(), finish: T::from_f64 },
        ),
        ReduceOp::Max => k::reduce_window(
            v,
            l,
            g,
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
        ReduceOp::Min => k::reduce_window(
            v,
            l,
            g,
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

fn int_reduce_window<T: super::binary::IntBinary>(
    op: ReduceOp,
    v: &[T],
    l: &Layout,
    g: &WindowGeom,
    par: Par,
) -> Vec<T> {
    let r = |init: T, fold: fn(T, T) -> T| Reducer { init, fold, finish: |a: T| a };
    match op {
        ReduceOp::Sum => k::reduce_window(v, l, g, par, r(T::ZERO, T::add_)),
        ReduceOp::Max => k::reduce_window(v, l, g, par, r(T::min_value(), |a, x| if x > a { x } else { a })),
        ReduceOp::Min => k::reduce_window(v, l, g, par, r(T::max_value(), |a, x| if x < a { x } else { a })),
    }
}

/// Rayon above the work threshold (one operation per window tap).
fn par_for(out: &Shape, w: &WindowParams) -> Par {
    Par::for_work(out.numel().saturating_mul(w.dims.iter().product()), 1)
}

fn lower_reduce_window(op: ReduceOp, w: &WindowParams, x: &Array) -> Result<Array> {
    let name = reduce_window_name(op);
    let g = w.geom(x.shape());
    let out = w.output_shape(name, x.shape())?;
    let par = par_for(&out, w);
    let buf = x.with_cpu(name, |b, l| match b {
        CpuBuffer::F32(v) => CpuBuffer::F32(float_reduce_window(op, v, l, &g, par)),
        CpuBuffer::F64(v) => CpuBuffer::F64(float_reduce_window(op, v, l, &g, par)),
        CpuBuffer::F16(v) => CpuBuffer::F16(float_reduce_window(op, v, l, &g, par)),
        CpuBuffer::BF16(v) => CpuBuffer::BF16(float_reduce_window(op, v, l, &g, par)),
        CpuBuffer::I32(v) => CpuBuffer::I32(int_reduce_window(op, v, l, &g, par)),
        CpuBuffer::I64(v) => CpuBuffer::I64(int_reduce_window(op, v, l, &g, par)),
        CpuBuffer::U32(v) => CpuBuffer::U32(int_reduce_window(op, v, l, &g, par)),
        CpuBuffer::Bool(_) => unreachable!("checked by the shape rule"),
    })?;
    Ok(Array::from_cpu(buf, out))
}

fn lower_select_gather(select: SelectOp, w: &WindowParams, t: &Array, x: &Array) -> Result<Array> {
    let (g, max) = (w.geom(x.shape()), select == SelectOp::Max);
    let out = w.output_shape(GATHER, x.shape())?;
    let par = par_for(&out, w);
    let (gt, gx) = (t.read(), x.read());
    let (bt, bx) = (gt.cpu(GATHER)?, gx.cpu(GATHER)?);
    let (lt, lx) = (&t.layout, &x.layout);
    let buf = xform_kernels::with_float_dtype!(x.dtype, T => CpuBuffer::from_vec(
        k::select_and_gather(bt.as_slice::<T>(), lt, bx.as_slice::<T>(), lx, &g, max, par)
    ), _ => unreachable!("checked by the shape rule"));
    Ok(Array::from_cpu(buf, out))
}

fn lower_select_scatter(select: SelectOp, w: &WindowParams, ct: &Array, x: &Array) -> Result<Array> {
    let (g, max) = (w.geom(x.shape()), select == SelectOp::Max);
    let par = par_for(ct.shape(), w);
    let ctc = ct.contiguous()?;
    let range = ctc.layout.contiguous_range().expect("contiguous");
    let (gc, gx) = (ctc.read(), x.read());
    let (bc, bx) = (gc.cpu(SCATTER)?, gx.cpu(SCATTER)?);
    let buf = xform_kernels::with_float_dtype!(x.dtype, T => CpuBuffer::from_vec(
        k::select_and_scatter(&bc.as_slice::<T>()[range], bx.as_slice::<T>(), &x.layout, &g, max, par)
    ), _ => unreachable!("checked by the shape rule"));
    Ok(Array::from_cpu(buf, x.shape().clone()))
}

// ---- JVP ---------------------------------------------------------------------------

fn select_of(op: ReduceOp) -> Option<SelectOp> {
    match op {
        ReduceOp::Sum => None,
        ReduceOp::Max => Some(SelectOp::Max),
        ReduceOp::Min => Some(SelectOp::Min),
    }
}

/// Sum is linear; the tangent of a max (min) is the tangent at each
/// window's selected element (JAX's `_reduce_window_chooser_jvp_rule`).
fn jvp_reduce_window(
    prim: &Prim,
    op: ReduceOp,
    w: &WindowParams,
    primals: &[Tensor],
    tangents: &[Option<Tensor>],
) -> Result<(Outs, Tangents)> {
    let x = &primals[0];
    let y = bind1(prim, primals)?;
    let t = match &tangents[0] {
        Some(t) if x.dtype().is_float() => Some(match select_of(op) {
            None => bind1(prim, std::slice::from_ref(t))?,
            Some(select) => select_and_gather_add(t, x, select, w)?,
        }),
        _ => None,
    };
    Ok((smallvec![y], smallvec![t]))
}

/// The selections are linear in their first operand; the selected
/// positions, and so the result, do not move with `x` (almost everywhere),
/// so `x`'s tangent contributes nothing.
fn jvp_select(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let y = bind1(prim, primals)?;
    let t = tangents[0].as_ref().map(|t| bind1(prim, &[t.clone(), primals[1].clone()])).transpose()?;
    Ok((smallvec![y], smallvec![t]))
}

// ---- transpose -------------------------------------------------------------------

/// JAX's `_reduce_window_sum_transpose_rule`: pad the cotangent (strides
/// become interior padding, and the padding that makes every operand
/// element see the windows that read it) and sum its windows, moving by
/// the base dilation.
fn transpose_reduce_window(
    op: ReduceOp,
    w: &WindowParams,
    cts: &[Option<Tensor>],
    args: &[LinearArg],
) -> Result<Cotangents> {
    let name = reduce_window_name(op);
    if op != ReduceOp::Sum {
        return Err(Error::transform(name, format!("{name} is not linear, so it cannot be transposed")));
    }
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None]);
    };
    let input = args[0].aval().shape;
    let out = ct.shape();
    let (mut lo, mut hi, mut interior) = (Vec::new(), Vec::new(), Vec::new());
    for a in 0..input.rank() {
        let in_d = dilated(input[a], w.base_dilation[a]) as i64;
        let win_d = dilated(w.dims[a], w.window_dilation[a]) as i64;
        let out_d = dilated(out[a], w.strides[a]) as i64;
        let before = win_d - w.padding[a].0 - 1;
        lo.push(before);
        hi.push(in_d + win_d - 1 - out_d - before);
        interior.push(w.strides[a] - 1);
    }
    let padded = lax::pad(ct, &lax::scalar(0.0, ct.dtype(), ct.device())?, &lo, &hi, &interior)?;
    let tw = WindowParams {
        dims: w.dims.clone(),
        strides: w.base_dilation.clone(),
        padding: smallvec![(0, 0); input.rank()],
        base_dilation: smallvec![1; input.rank()],
        window_dilation: w.window_dilation.clone(),
    };
    let r = reduce_window(ReduceOp::Sum, &padded, &tw)?;
    if r.shape() != input {
        return Err(Error::transform(
            name,
            format!("internal error: the transpose has shape {} for an operand of shape {input}", r.shape()),
        ));
    }
    Ok(smallvec![Some(r)])
}

/// select-and-gather and select-and-scatter-add transpose into each other
/// (linear in the first operand, `x` known).
fn transpose_select(
    gather: bool,
    select: SelectOp,
    w: &WindowParams,
    cts: &[Option<Tensor>],
    args: &[LinearArg],
) -> Result<Cotangents> {
    let name = if gather { GATHER } else { SCATTER };
    let (LinearArg::Linear(_), LinearArg::Const(x)) = (&args[0], &args[1]) else {
        return Err(Error::transform(
            name,
            format!("{name} is linear in its first operand only, and needs its second operand known to transpose"),
        ));
    };
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None]);
    };
    let r = if gather { select_and_scatter_add(ct, x, select, w)? } else { select_and_gather_add(ct, x, select, w)? };
    Ok(smallvec![Some(r), None])
}

// ---- batching ------------------------------------------------------------------

/// A size-1 window over the batch axis.
fn batch_reduce_window(
    op: ReduceOp,
    w: &WindowParams,
    ins: &[Tensor],
    bdims: &[Option<usize>],
) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    Ok((smallvec![reduce_window(op, &ins[0], &w.with_unit_axis(b))?], smallvec![Some(b)]))
}

/// Both operands' batch axes at the first batched one's position (an
/// unbatched operand broadcast there), and a size-1 window over it.
fn batch_select(
    gather: bool,
    select: SelectOp,
    w: &WindowParams,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    size: usize,
) -> Result<(Outs, BDims)> {
    let d = bdims.iter().flatten().next().copied().expect("a batched operand");
    let a = to_position(&ins[0], bdims[0], d, size)?;
    let x = to_position(&ins[1], bdims[1], d, size)?;
    let w = w.with_unit_axis(d);
    let y =
        if gather { select_and_gather_add(&a, &x, select, &w)? } else { select_and_scatter_add(&a, &x, select, &w)? };
    Ok((smallvec![y], smallvec![Some(d)]))
}

// ---- the family --------------------------------------------------------------------

impl From<WindowOp> for Prim {
    fn from(op: WindowOp) -> Prim {
        Prim::Window(op)
    }
}

impl Family for WindowOp {
    type Kind = WindowKind;
    const KINDS: &'static [WindowKind] = WindowKind::ALL;

    fn kind(&self) -> WindowKind {
        WindowOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            WindowOp::ReduceWindow { op, .. } => reduce_window_name(*op),
            WindowOp::SelectAndGatherAdd { .. } => GATHER,
            WindowOp::SelectAndScatterAdd { .. } => SCATTER,
        }
    }

    fn props(&self) -> Props {
        // Every transpose computes a new array.
        match self {
            WindowOp::ReduceWindow { .. }
            | WindowOp::SelectAndGatherAdd { .. }
            | WindowOp::SelectAndScatterAdd { .. } => Props::NONE.fresh(),
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowOp::ReduceWindow { window, .. } => write!(f, "[{window}]"),
            WindowOp::SelectAndGatherAdd { select, window } | WindowOp::SelectAndScatterAdd { select, window } => {
                write!(f, "[select={} {window}]", select.name())
            }
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            WindowOp::ReduceWindow { op, window } => shape_reduce_window(*op, window, ins),
            WindowOp::SelectAndGatherAdd { window, .. } => shape_select_gather(window, ins),
            WindowOp::SelectAndScatterAdd { window, .. } => shape_select_scatter(window, ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(match self {
            WindowOp::ReduceWindow { op, window } => lower_reduce_window(*op, window, ins[0]),
            WindowOp::SelectAndGatherAdd { select, window } => lower_select_gather(*select, window, ins[0], ins[1]),
            WindowOp::SelectAndScatterAdd { select, window } => lower_select_scatter(*select, window, ins[0], ins[1]),
        })
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        let x = ins[ins.len() - 1];
        super::one(match self {
            WindowOp::ReduceWindow { op, window } => {
                let name = reduce_window_name(*op);
                let fold = window_fold(*op, x.dtype).expect("numeric: checked by the shape rule");
                backend.reduce_window(name, fold, x, &window.geom(x.shape()), window.output_shape(name, x.shape())?)
            }
            WindowOp::SelectAndGatherAdd { select, window } => {
                let (g, out) = (window.geom(x.shape()), window.output_shape(GATHER, x.shape())?);
                backend.select_and_gather(GATHER, *select == SelectOp::Max, ins[0], x, &g, out)
            }
            WindowOp::SelectAndScatterAdd { select, window } => {
                backend.select_and_scatter(SCATTER, *select == SelectOp::Max, ins[0], x, &window.geom(x.shape()))
            }
        })
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            WindowOp::ReduceWindow { op, window } => jvp_reduce_window(prim, *op, window, primals, tangents),
            WindowOp::SelectAndGatherAdd { .. } | WindowOp::SelectAndScatterAdd { .. } => {
                jvp_select(prim, primals, tangents)
            }
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            WindowOp::ReduceWindow { op, window } => transpose_reduce_window(*op, window, cts, args),
            WindowOp::SelectAndGatherAdd { select, window } => transpose_select(true, *select, window, cts, args),
            WindowOp::SelectAndScatterAdd { select, window } => transpose_select(false, *select, window, cts, args),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        let size = axis.size;
        match self {
            WindowOp::ReduceWindow { op, window } => batch_reduce_window(*op, window, ins, bdims),
            WindowOp::SelectAndGatherAdd { select, window } => batch_select(true, *select, window, ins, bdims, size),
            WindowOp::SelectAndScatterAdd { select, window } => batch_select(false, *select, window, ins, bdims, size),
        }
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        window_samples()
    }

    fn cuda_kernels(d: DType) -> Vec<Kernel> {
        // The selections' kernels are structural (the kernels crate's catalog).
        ReduceOp::ALL.iter().filter_map(|&op| window_fold(op, d)).map(|f| reduce_window_kernel(&f, d)).collect()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: true, sink: true, thread_bound: false, lower_into: false }
    }

    /// Rows do not pass: the split keeps its operands whole.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::no_rows(q)
    }
}

// ---- registry samples --------------------------------------------------------------

/// A random operand shape (rank 1 to 4) and a window over it: sizes 1-3,
/// strides 1-3, padding -1..2 on each side (widened where the window would
/// not fit), base and window dilations 1 or 2. With `covered`, every window
/// reads at least one operand element (a max or min over padding alone is
/// infinite, out of finite differences' reach).
fn draw_window(g: &mut Gen, covered: bool) -> (Vec<usize>, WindowParams) {
    loop {
        let r = g.int(1, 4);
        let most = if r >= 3 { 3 } else { 5 };
        let shape: Vec<usize> = (0..r).map(|_| g.int(1, most)).collect();
        let mut w = WindowParams::identity(0);
        for &n in &shape {
            let (taps, wd, bd) = (g.int(1, 3), if g.coin(0.25) { 2 } else { 1 }, if g.coin(0.25) { 2 } else { 1 });
            let lo = g.int(0, 3) as i64 - 1;
            let mut hi = g.int(0, 3) as i64 - 1;
            let short = dilated(taps, wd) as i64 - (dilated(n, bd) as i64 + lo + hi);
            if short > 0 {
                hi += short;
            }
            w.dims.push(taps);
            w.strides.push(g.int(1, 3));
            w.padding.push((lo, hi));
            w.base_dilation.push(bd);
            w.window_dilation.push(wd);
        }
        let s = Shape::from(shape.clone());
        let out = w.output_shape("sample", &s).expect("a valid window");
        let geom = w.geom(&s);
        let reads = |a: usize, o: usize| (0..w.dims[a]).any(|t| geom.input_index(a, o, t).is_some());
        if !covered || (0..r).all(|a| (0..out[a]).all(|o| reads(a, o))) {
            return (shape, w);
        }
    }
}

fn window_samples() -> Vec<Sample> {
    let mut v = Vec::new();
    for &op in ReduceOp::ALL {
        let linear = if op == ReduceOp::Sum { vec![0] } else { vec![] };
        v.push(Sample::new(reduce_window_name(op), numeric(), linear, true, move |g, d| {
            let (shape, window) = draw_window(g, op != ReduceOp::Sum);
            // distinct values: no ties for finite differences to straddle
            let dom = if d.is_float() && op != ReduceOp::Sum { Dom::Distinct(-2.0, 2.0) } else { generic_dom(d) };
            Case::new(WindowOp::ReduceWindow { op, window }, vec![(shape, d, dom)])
        }));
    }
    for &select in SelectOp::ALL {
        v.push(Sample::new(format!("{GATHER}({})", select.name()), FLOATS.to_vec(), vec![0], true, move |g, d| {
            let (shape, window) = draw_window(g, false);
            let ins = vec![(shape.clone(), d, Dom::Real(-2.0, 2.0)), (shape, d, Dom::Distinct(-2.0, 2.0))];
            Case::new(WindowOp::SelectAndGatherAdd { select, window }, ins)
        }));
        v.push(Sample::new(format!("{SCATTER}({})", select.name()), FLOATS.to_vec(), vec![0], true, move |g, d| {
            let (shape, window) = draw_window(g, false);
            let out = window.output_shape(SCATTER, &Shape::from(shape.clone())).expect("a valid window");
            let ins = vec![(out.to_vec(), d, Dom::Real(-2.0, 2.0)), (shape, d, Dom::Distinct(-2.0, 2.0))];
            Case::new(WindowOp::SelectAndScatterAdd { select, window }, ins)
        }));
    }
    v
}
