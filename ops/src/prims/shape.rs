//! Structural primitives: broadcast_in_dim, reshape, transpose, slice, pad,
//! concatenate, rev, iota. Broadcast, transpose, slice, rev and reshape (of
//! compatible strides) lower to views that share storage ([`ShapeOp`]'s
//! `view_layout` says how).

use super::batching::BatchAxis;
use super::batching::{physical, to_front};
use super::factor::{Factor, FactorRows};
use super::jit::{self, Blame, JitProps, RowFusion, RowQuery, RowRule};
use super::jit::{Tile, TileMut};
use super::sample::{generic_dom, numeric, Case, Sample};
use super::{axes_str, check_arity, check_axes, check_axis, check_same_dtypes, Family, OnesTranspose, Props, ViewKind};
use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Amounts, Avals, Axes, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::{smallvec, SmallVec};
use xform_kernels::cpu::shape as k;
use xform_kernels::cuda_source::Kernel;
use xform_kernels::Layout;
use xform_kernels::{match_buffer, CpuBuffer, DType, Element, Shape};

crate::family_enum! {
    /// The structural primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum ShapeOp, kinds ShapeKind {
        /// Broadcast: operand axis `i` becomes output axis `dims[i]`.
        BroadcastInDim {
            /// Output shape.
            shape: Shape,
            /// Strictly increasing output axes of the operand's axes.
            dims: Axes,
        },
        /// Same elements, new shape.
        Reshape {
            /// Output shape.
            shape: Shape,
        },
        /// Axis permutation: output axis `i` is operand axis `perm[i]`.
        Transpose {
            /// The permutation.
            perm: Axes,
        },
        /// Strided static slice.
        Slice {
            /// First index per axis.
            start: Axes,
            /// One past the last index per axis.
            limit: Axes,
            /// Step per axis (>= 1).
            strides: Axes,
        },
        /// Pad with a scalar operand: low/high (negative crops) and interior.
        Pad {
            /// Elements before each axis.
            low: Amounts,
            /// Elements after each axis.
            high: Amounts,
            /// Elements between neighbours.
            interior: Axes,
        },
        /// Join operands along an axis.
        Concatenate {
            /// The axis.
            axis: usize,
        },
        /// Reverse the given axes.
        Rev {
            /// The axes.
            axes: Axes,
        },
        /// `out[i] = i[dim]`.
        Iota {
            /// Output shape.
            shape: Shape,
            /// The counting axis.
            dim: usize,
            /// Output dtype.
            dtype: DType,
            /// Output device.
            device: Device,
        },
    }
}

// ---- shape rules -----------------------------------------------------------

fn shape_broadcast_in_dim(shape: &Shape, dims: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
    let op = "broadcast_in_dim";
    check_arity(op, ins, 1)?;
    let x = &ins[0];
    if dims.len() != x.rank() {
        return Err(Error::shape(
            op,
            format!("needs one output axis per operand axis, got dims {dims:?}"),
            &[x.shape, shape],
        ));
    }
    for (i, &d) in dims.iter().enumerate() {
        check_axis(op, d, shape.rank())?;
        if i > 0 && dims[i - 1] >= d {
            return Err(Error::invalid(op, format!("dims must be strictly increasing, got {dims:?}")));
        }
        if x.shape[i] != 1 && x.shape[i] != shape[d] {
            return Err(Error::shape(
                op,
                format!(
                    "operand axis {i} (size {}) cannot broadcast to output axis {d} (size {})",
                    x.shape[i], shape[d]
                ),
                &[x.shape, shape],
            ));
        }
    }
    Ok(smallvec![Aval { shape: shape.clone(), dtype: x.dtype, device: x.device }])
}

fn shape_reshape(shape: &Shape, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("reshape", ins, 1)?;
    let x = &ins[0];
    if x.shape.numel() != shape.numel() {
        return Err(Error::shape("reshape", "the element counts differ", &[x.shape, shape]));
    }
    Ok(smallvec![Aval { shape: shape.clone(), dtype: x.dtype, device: x.device }])
}

fn shape_transpose(perm: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("transpose", ins, 1)?;
    let x = &ins[0];
    if perm.len() != x.rank() {
        return Err(Error::shape("transpose", format!("permutation {perm:?} does not match the rank"), &[x.shape]));
    }
    check_axes("transpose", perm, x.rank())?;
    let shape = Shape(perm.iter().map(|&p| x.shape[p]).collect());
    Ok(smallvec![Aval { shape, dtype: x.dtype, device: x.device }])
}

fn shape_slice(start: &[usize], limit: &[usize], strides: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("slice", ins, 1)?;
    let x = &ins[0];
    let r = x.rank();
    if start.len() != r || limit.len() != r || strides.len() != r {
        return Err(Error::shape("slice", "start, limit and strides need one entry per axis", &[x.shape]));
    }
    let mut out = Shape::scalar();
    for d in 0..r {
        if start[d] > limit[d] || limit[d] > x.shape[d] || strides[d] == 0 {
            return Err(Error::shape(
                "slice",
                format!(
                    "axis {d}: {}..{} step {} does not fit an axis of size {}",
                    start[d], limit[d], strides[d], x.shape[d]
                ),
                &[x.shape],
            ));
        }
        out.0.push((limit[d] - start[d]).div_ceil(strides[d]));
    }
    Ok(smallvec![Aval { shape: out, dtype: x.dtype, device: x.device }])
}

fn shape_pad(low: &[i64], high: &[i64], interior: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("pad", ins, 2)?;
    let (x, v) = (&ins[0], &ins[1]);
    if v.rank() != 0 {
        return Err(Error::shape("pad", "the padding value must be a scalar", &[x.shape, v.shape]));
    }
    check_same_dtypes("pad", ins)?;
    let r = x.rank();
    if low.len() != r || high.len() != r || interior.len() != r {
        return Err(Error::shape("pad", "low, high and interior need one entry per axis", &[x.shape]));
    }
    for d in 0..r {
        let total = k::padded_len(x.shape[d], low[d], high[d], interior[d]);
        if total < 0 {
            return Err(Error::shape(
                "pad",
                format!("axis {d}: negative padding {}/{} removes more than the axis holds", low[d], high[d]),
                &[x.shape],
            ));
        }
        if total > isize::MAX as i128 {
            return Err(Error::overflow(
                "pad",
                format!(
                    "axis {d}: padding {}/{} (interior {}) of an axis of size {} gives {total} elements, \
                     more than isize::MAX",
                    low[d], high[d], interior[d], x.shape[d]
                ),
            ));
        }
    }
    let shape = k::pad_shape(x.shape, low, high, interior).expect("each axis checked above");
    Ok(smallvec![Aval { shape, dtype: x.dtype, device: x.device }])
}

fn shape_concatenate(axis: usize, ins: &[AvalRef<'_>]) -> Result<Avals> {
    if ins.is_empty() {
        return Err(Error::invalid("concatenate", "needs at least one operand"));
    }
    check_same_dtypes("concatenate", ins)?;
    let first = &ins[0];
    check_axis("concatenate", axis, first.rank())?;
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for x in ins {
        let fits = x.rank() == first.rank() && (0..x.rank()).all(|d| d == axis || x.shape[d] == first.shape[d]);
        if !fits {
            let shapes: Vec<&Shape> = ins.iter().map(|a| a.shape).collect();
            return Err(Error::shape("concatenate", format!("operands must agree on every axis but {axis}"), &shapes));
        }
        shape[axis] = shape[axis].checked_add(x.shape[axis]).ok_or_else(|| {
            Error::overflow("concatenate", format!("the sizes along axis {axis} add up past usize::MAX"))
        })?;
    }
    Ok(smallvec![Aval { shape, dtype: first.dtype, device: first.device }])
}

fn shape_rev(axes: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("rev", ins, 1)?;
    check_axes("rev", axes, ins[0].rank())?;
    Ok(smallvec![ins[0].to_owned()])
}

fn shape_iota(shape: &Shape, dim: usize, dtype: DType, device: Device, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("iota", ins, 0)?;
    check_axis("iota", dim, shape.rank())?;
    if dtype == DType::Bool {
        return Err(Error::dtype("iota", "cannot count in bool", &[dtype]));
    }
    Ok(smallvec![Aval { shape: shape.clone(), dtype, device }])
}

// ---- lowering --------------------------------------------------------------

fn lower_broadcast_in_dim(shape: &Shape, dims: &[usize], x: &Array) -> Result<Array> {
    Ok(x.with_layout(x.layout.broadcast_in_dim(shape, dims)))
}

fn lower_reshape(shape: &Shape, x: &Array) -> Result<Array> {
    if let Some(l) = x.layout.reshape(shape) {
        return Ok(x.with_layout(l));
    }
    let c = x.contiguous_copy()?;
    Ok(c.with_layout(xform_kernels::Layout::contiguous(shape.clone())))
}

fn lower_transpose(perm: &[usize], x: &Array) -> Result<Array> {
    Ok(x.with_layout(x.layout.permute(perm)))
}

fn lower_slice(start: &[usize], limit: &[usize], strides: &[usize], x: &Array) -> Result<Array> {
    Ok(x.with_layout(x.layout.slice(start, limit, strides)))
}

fn lower_rev(axes: &[usize], x: &Array) -> Result<Array> {
    Ok(x.with_layout(x.layout.rev(axes)))
}

fn lower_pad(low: &[i64], high: &[i64], interior: &[usize], x: &Array, v: &Array) -> Result<Array> {
    let shape = k::pad_shape(x.shape(), low, high, interior)
        .ok_or_else(|| Error::invalid("pad", "the padding makes an axis negative"))?;
    let gv = v.read();
    let bv = gv.cpu("pad")?;
    let out = x.with_cpu("pad", |b, l| {
        match_buffer!(b, xs => {
            let value = bv.as_slice()[v.layout.offset];
            CpuBuffer::from_vec(k::pad(xs, l, low, high, interior, value))
        })
    })?;
    Ok(Array::from_cpu(out, shape))
}

fn lower_concatenate(axis: usize, ins: &[&Array]) -> Result<Array> {
    let mut shape = ins[0].shape().clone();
    shape[axis] = ins.iter().map(|a| a.shape()[axis]).sum();
    let guards: Vec<_> = ins.iter().map(|a| a.read()).collect();
    let bufs: Vec<&CpuBuffer> = guards.iter().map(|g| g.cpu("concatenate")).collect::<Result<_>>()?;
    fn run<T: Element + Default>(bufs: &[&CpuBuffer], ins: &[&Array], axis: usize, shape: &Shape) -> Vec<T> {
        let parts: Vec<(&[T], &xform_kernels::Layout)> =
            bufs.iter().zip(ins).map(|(b, a)| (b.as_slice::<T>(), &a.layout)).collect();
        k::concatenate(&parts, axis, shape)
    }
    let out = xform_kernels::with_dtype!(ins[0].dtype, T => CpuBuffer::from_vec(run::<T>(&bufs, ins, axis, &shape)));
    Ok(Array::from_cpu(out, shape))
}

fn lower_iota(shape: &Shape, dim: usize, dtype: DType, device: Device) -> Result<Array> {
    let out =
        xform_kernels::with_dtype!(dtype, T => CpuBuffer::from_vec(k::iota(shape, dim, |i| T::from_i64(i as i64))));
    Array::from_cpu(out, shape.clone()).to_device(device)
}

// ---- JVP ---------------------------------------------------------------------

fn jvp_pad(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(prim, primals)?;
    let t = match (&tangents[0], &tangents[1]) {
        (None, None) => None,
        (tx, tv) => {
            let tx = lax::instantiate(tx, &primals[0])?;
            let tv = lax::instantiate(tv, &primals[1])?;
            Some(bind1(prim, &[tx, tv])?)
        }
    };
    Ok((smallvec![out], smallvec![t]))
}

fn jvp_concatenate(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(prim, primals)?;
    if tangents.iter().all(Option::is_none) || !primals[0].dtype().is_float() {
        return Ok((smallvec![out], smallvec![None]));
    }
    let ts: Vec<Tensor> = tangents.iter().zip(primals).map(|(t, p)| lax::instantiate(t, p)).collect::<Result<_>>()?;
    Ok((smallvec![out], smallvec![Some(bind1(prim, &ts)?)]))
}

// ---- transpose ---------------------------------------------------------------

fn map_ct(cts: &[Option<Tensor>], f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Cotangents> {
    Ok(smallvec![cts[0].as_ref().map(f).transpose()?])
}

fn transpose_broadcast_in_dim(dims: &[usize], cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let in_shape = args[0].aval().shape;
    map_ct(cts, |ct| {
        let out_shape = ct.shape();
        // Sum the new axes and the axes that were size 1 in the operand.
        let mut sum_axes: Axes = (0..out_shape.rank()).filter(|d| !dims.contains(d)).collect();
        for (i, &d) in dims.iter().enumerate() {
            if in_shape[i] == 1 && out_shape[d] != 1 {
                sum_axes.push(d);
            }
        }
        let s = lax::reduce_sum(ct, &sum_axes)?;
        lax::reshape(&s, &in_shape)
    })
}

/// The operand's cotangent as `1^T G`: the output cotangent's rows over
/// the summed axes (new and expanded ones), each times one (a bias: with
/// one row per example, its norm is `|g|` and its clipped sum `c^T G`, with
/// `G` shared with the product that the bias is added to). Offered only
/// where the summed axes come first, so that `G` is a reshape of the
/// cotangent, not a copy.
fn factor_broadcast_in_dim(dims: &[usize], cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Option<Factor>> {
    let (Some(ct), LinearArg::Linear(x)) = (&cts[0], &args[0]) else {
        return Ok(None);
    };
    let out = ct.shape();
    let kept = |d: usize| dims.iter().position(|&a| a == d).is_some_and(|i| x.shape[i] == out[d]);
    // Axes of length one are free to sit anywhere; the others must be
    // summed ones first, then kept ones.
    let mut seen_kept = false;
    for d in (0..out.rank()).filter(|&d| out[d] != 1) {
        if kept(d) {
            seen_kept = true;
        } else if seen_kept {
            return Ok(None);
        }
    }
    let m: usize = (0..out.rank()).filter(|&d| !kept(d)).map(|d| out[d]).product();
    let n: usize = (0..out.rank()).filter(|&d| kept(d)).map(|d| out[d]).product();
    let ones = lax::full(&Shape::from(&[1, m, 1][..]), 1.0, ct.dtype(), ct.device())?;
    let g = lax::reshape(ct, &Shape::from(&[1, m, n][..]))?;
    let axes: Axes = (0..x.shape.rank()).collect();
    Ok(Some(Factor { rows: FactorRows::Dense(ones), ct: g, shape: x.shape.clone(), axes }))
}

fn transpose_reshape(cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let shape = args[0].aval().shape;
    map_ct(cts, |ct| lax::reshape(ct, &shape))
}

fn transpose_transpose(perm: &[usize], cts: &[Option<Tensor>], _args: &[LinearArg]) -> Result<Cotangents> {
    let mut inv: Axes = smallvec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    map_ct(cts, |ct| lax::transpose(ct, &inv))
}

fn transpose_slice(
    start: &[usize],
    limit: &[usize],
    strides: &[usize],
    cts: &[Option<Tensor>],
    args: &[LinearArg],
) -> Result<Cotangents> {
    let shape = args[0].aval().shape;
    map_ct(cts, |ct| {
        let mut low = Amounts::new();
        let mut high = Amounts::new();
        let mut interior = Axes::new();
        for d in 0..shape.rank() {
            let n = shape[d] as i64;
            let k = ((limit[d] - start[d]).div_ceil(strides[d])) as i64;
            let s = strides[d] as i64;
            low.push(start[d] as i64);
            high.push(if k == 0 { n - start[d] as i64 } else { n - start[d] as i64 - (k - 1) * s - 1 });
            interior.push(strides[d] - 1);
        }
        lax::pad(ct, &lax::scalar(0.0, ct.dtype(), ct.device())?, &low, &high, &interior)
    })
}

fn transpose_pad(
    low: &[i64],
    high: &[i64],
    interior: &[usize],
    cts: &[Option<Tensor>],
    args: &[LinearArg],
) -> Result<Cotangents> {
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None]);
    };
    // Undo the outer padding, then keep every (interior + 1)-th element.
    let neg = |v: &[i64]| -> Amounts { v.iter().map(|x| -x).collect() };
    let zero = lax::scalar(0.0, ct.dtype(), ct.device())?;
    let r = ct.rank();
    let unpadded = lax::pad(ct, &zero, &neg(low), &neg(high), &vec![0; r])?;
    let limit: Vec<usize> = unpadded.shape().to_vec();
    let steps: Vec<usize> = interior.iter().map(|i| i + 1).collect();
    let ct_x = lax::slice(&unpadded, &vec![0; r], &limit, &steps)?;
    let ct_v = if args[1].is_linear() {
        let all: Vec<usize> = (0..r).collect();
        Some(lax::sub(&lax::reduce_sum(ct, &all)?, &lax::reduce_sum(&ct_x, &all)?)?)
    } else {
        None
    };
    Ok(smallvec![args[0].is_linear().then_some(ct_x), ct_v])
}

fn transpose_concatenate(axis: usize, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let mut out = Cotangents::new();
    let mut at = 0;
    for a in args {
        let n = a.aval().shape[axis];
        out.push(match (&cts[0], a.is_linear()) {
            (Some(ct), true) => Some(lax::slice_axis(ct, axis, at, at + n)?),
            _ => None,
        });
        at += n;
    }
    Ok(out)
}

fn transpose_rev(axes: &[usize], cts: &[Option<Tensor>], _args: &[LinearArg]) -> Result<Cotangents> {
    map_ct(cts, |ct| lax::rev(ct, axes))
}

// ---- batching ----------------------------------------------------------------

fn one(x: Tensor, b: usize) -> Result<(Outs, BDims)> {
    Ok((smallvec![x], smallvec![Some(b)]))
}

fn batch_broadcast_in_dim(
    shape: &Shape,
    dims: &[usize],
    ins: &[Tensor],
    bdims: &[Option<usize>],
) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let x = lax::moveaxis(&ins[0], b, 0)?;
    let mut s = shape.clone();
    s.0.insert(0, x.shape()[0]);
    let d: Axes = std::iter::once(0).chain(dims.iter().map(|d| d + 1)).collect();
    one(lax::broadcast_in_dim(&x, &s, &d)?, 0)
}

fn batch_reshape(shape: &Shape, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let x = lax::moveaxis(&ins[0], b, 0)?;
    let mut s = shape.clone();
    s.0.insert(0, x.shape()[0]);
    one(lax::reshape(&x, &s)?, 0)
}

fn batch_transpose(perm: &[usize], ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let p: Axes = std::iter::once(b).chain(perm.iter().map(|&a| physical(a, b))).collect();
    one(lax::transpose(&ins[0], &p)?, 0)
}

fn batch_slice(
    start: &[usize],
    limit: &[usize],
    strides: &[usize],
    ins: &[Tensor],
    bdims: &[Option<usize>],
) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let n = ins[0].shape()[b];
    let ins_at = |v: &[usize], x: usize| -> Axes {
        let mut a: Axes = v.iter().copied().collect();
        a.insert(b, x);
        a
    };
    one(lax::slice(&ins[0], &ins_at(start, 0), &ins_at(limit, n), &ins_at(strides, 1))?, b)
}

fn batch_pad(
    low: &[i64],
    high: &[i64],
    interior: &[usize],
    ins: &[Tensor],
    bdims: &[Option<usize>],
    size: usize,
) -> Result<(Outs, BDims)> {
    let x = to_front(&ins[0], bdims[0], size)?;
    let lo: Amounts = std::iter::once(0).chain(low.iter().copied()).collect();
    let hi: Amounts = std::iter::once(0).chain(high.iter().copied()).collect();
    let it: Axes = std::iter::once(0).chain(interior.iter().copied()).collect();
    match bdims[1] {
        None => one(lax::pad(&x, &ins[1], &lo, &hi, &it)?, 0),
        Some(_) => {
            // A batched padding value: pad with anything, then select the
            // per-example value wherever the (unbatched) mask says "padding".
            let v = &ins[1]; // [B]
            let zero = lax::scalar(0.0, x.dtype(), x.device())?;
            let padded = lax::pad(&x, &zero, &lo, &hi, &it)?;
            let logical = ins[0].shape();
            let lshape = bdims[0].map_or_else(|| logical.clone(), |bd| logical.without_axis(bd));
            let inner = lax::full(&lshape, 1.0, DType::Bool, x.device())?;
            let f = lax::scalar(0.0, DType::Bool, x.device())?;
            let mask = lax::pad(&inner, &f, low, high, interior)?;
            let out_shape = padded.shape();
            let mask_b = lax::broadcast_in_dim(&mask, &out_shape, &(1..out_shape.rank()).collect::<Vec<_>>())?;
            let v_b = lax::broadcast_in_dim(&lax::moveaxis(v, bdims[1].unwrap(), 0)?, &out_shape, &[0])?;
            one(lax::select(&mask_b, &padded, &v_b)?, 0)
        }
    }
}

fn batch_concatenate(axis: usize, ins: &[Tensor], bdims: &[Option<usize>], size: usize) -> Result<(Outs, BDims)> {
    let moved: SmallVec<[Tensor; 4]> =
        ins.iter().zip(bdims).map(|(x, b)| to_front(x, *b, size)).collect::<Result<_>>()?;
    one(lax::concatenate(&moved, axis + 1)?, 0)
}

fn batch_rev(axes: &[usize], ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    let b = bdims[0].expect("batched operand");
    let phys: Axes = axes.iter().map(|&a| physical(a, b)).collect();
    one(lax::rev(&ins[0], &phys)?, b)
}

// ---- the family ------------------------------------------------------------------

impl From<ShapeOp> for Prim {
    fn from(op: ShapeOp) -> Prim {
        Prim::Shape(op)
    }
}

impl Family for ShapeOp {
    type Kind = ShapeKind;
    const KINDS: &'static [ShapeKind] = ShapeKind::ALL;

    fn kind(&self) -> ShapeKind {
        ShapeOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            ShapeOp::BroadcastInDim { .. } => "broadcast_in_dim",
            ShapeOp::Reshape { .. } => "reshape",
            ShapeOp::Transpose { .. } => "transpose",
            ShapeOp::Slice { .. } => "slice",
            ShapeOp::Pad { .. } => "pad",
            ShapeOp::Concatenate { .. } => "concatenate",
            ShapeOp::Rev { .. } => "rev",
            ShapeOp::Iota { .. } => "iota",
        }
    }

    fn props(&self) -> Props {
        // The transposes return views of the cotangent or pass it on.
        match self {
            ShapeOp::BroadcastInDim { .. } => Props::NONE.view(ViewKind::Broadcast),
            // each element moves to one place: ones stay ones
            ShapeOp::Reshape { .. } | ShapeOp::Transpose { .. } => {
                Props::NONE.view(ViewKind::Reindex).ones(OnesTranspose::Ones)
            }
            ShapeOp::Rev { .. } => Props::NONE.view(ViewKind::Reindex),
            ShapeOp::Slice { .. } => Props::NONE.view(ViewKind::Select),
            ShapeOp::Pad { .. } | ShapeOp::Concatenate { .. } | ShapeOp::Iota { .. } => Props::NONE,
        }
    }

    fn fmt_params(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShapeOp::BroadcastInDim { shape, dims } => write!(f, "[shape={shape} dims={}]", axes_str(dims)),
            ShapeOp::Reshape { shape } => write!(f, "[shape={shape}]"),
            ShapeOp::Transpose { perm } => write!(f, "[perm={}]", axes_str(perm)),
            ShapeOp::Slice { start, limit, strides } => {
                write!(f, "[start={} limit={} strides={}]", axes_str(start), axes_str(limit), axes_str(strides))
            }
            ShapeOp::Pad { low, high, interior } => {
                write!(f, "[low={low:?} high={high:?} interior={}]", axes_str(interior))
            }
            ShapeOp::Concatenate { axis } => write!(f, "[axis={axis}]"),
            ShapeOp::Rev { axes } => write!(f, "[axes={}]", axes_str(axes)),
            ShapeOp::Iota { shape, dim, dtype, .. } => write!(f, "[shape={shape} dim={dim} dtype={dtype}]"),
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            ShapeOp::BroadcastInDim { shape, dims } => shape_broadcast_in_dim(shape, dims, ins),
            ShapeOp::Reshape { shape } => shape_reshape(shape, ins),
            ShapeOp::Transpose { perm } => shape_transpose(perm, ins),
            ShapeOp::Slice { start, limit, strides } => shape_slice(start, limit, strides, ins),
            ShapeOp::Pad { low, high, interior } => shape_pad(low, high, interior, ins),
            ShapeOp::Concatenate { axis } => shape_concatenate(*axis, ins),
            ShapeOp::Rev { axes } => shape_rev(axes, ins),
            ShapeOp::Iota { shape, dim, dtype, device } => shape_iota(shape, *dim, *dtype, *device, ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(match self {
            ShapeOp::BroadcastInDim { shape, dims } => lower_broadcast_in_dim(shape, dims, ins[0]),
            ShapeOp::Reshape { shape } => lower_reshape(shape, ins[0]),
            ShapeOp::Transpose { perm } => lower_transpose(perm, ins[0]),
            ShapeOp::Slice { start, limit, strides } => lower_slice(start, limit, strides, ins[0]),
            ShapeOp::Pad { low, high, interior } => lower_pad(low, high, interior, ins[0], ins[1]),
            ShapeOp::Concatenate { axis } => lower_concatenate(*axis, ins),
            ShapeOp::Rev { axes } => lower_rev(axes, ins[0]),
            ShapeOp::Iota { shape, dim, dtype, device } => lower_iota(shape, *dim, *dtype, *device),
        })
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        let x = ins[0];
        super::one(match self {
            ShapeOp::Pad { low, high, interior } => {
                let shape = k::pad_shape(x.shape(), low, high, interior)
                    .ok_or_else(|| Error::invalid("pad", "the padding makes an axis negative"))?;
                backend.pad(x, ins[1], low, high, interior, shape)
            }
            ShapeOp::Concatenate { axis } => {
                let mut shape = x.shape().clone();
                shape[*axis] = ins.iter().map(|a| a.shape()[*axis]).sum();
                backend.concatenate(ins, *axis, shape)
            }
            // views and iota: layouts only (iota places its result itself)
            ShapeOp::BroadcastInDim { .. }
            | ShapeOp::Reshape { .. }
            | ShapeOp::Transpose { .. }
            | ShapeOp::Slice { .. }
            | ShapeOp::Rev { .. }
            | ShapeOp::Iota { .. } => return self.lower(ins),
        })
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            ShapeOp::BroadcastInDim { .. }
            | ShapeOp::Reshape { .. }
            | ShapeOp::Transpose { .. }
            | ShapeOp::Slice { .. }
            | ShapeOp::Rev { .. } => super::linear_jvp(prim, primals, tangents),
            ShapeOp::Pad { .. } => jvp_pad(prim, primals, tangents),
            ShapeOp::Concatenate { .. } => jvp_concatenate(prim, primals, tangents),
            ShapeOp::Iota { .. } => super::no_tangent(prim, primals),
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            ShapeOp::BroadcastInDim { shape: _, dims } => transpose_broadcast_in_dim(dims, cts, args),
            ShapeOp::Reshape { .. } => transpose_reshape(cts, args),
            ShapeOp::Transpose { perm } => transpose_transpose(perm, cts, args),
            ShapeOp::Slice { start, limit, strides } => transpose_slice(start, limit, strides, cts, args),
            ShapeOp::Pad { low, high, interior } => transpose_pad(low, high, interior, cts, args),
            ShapeOp::Concatenate { axis } => transpose_concatenate(*axis, cts, args),
            ShapeOp::Rev { axes } => transpose_rev(axes, cts, args),
            ShapeOp::Iota { .. } => super::not_linear("iota"),
        }
    }

    fn factor(&self, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<Factor>> {
        match (self, i) {
            (ShapeOp::BroadcastInDim { shape: _, dims }, 0) => factor_broadcast_in_dim(dims, cts, args),
            _ => Ok(None),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        let size = axis.size;
        match self {
            ShapeOp::BroadcastInDim { shape, dims } => batch_broadcast_in_dim(shape, dims, ins, bdims),
            ShapeOp::Reshape { shape } => batch_reshape(shape, ins, bdims),
            ShapeOp::Transpose { perm } => batch_transpose(perm, ins, bdims),
            ShapeOp::Slice { start, limit, strides } => batch_slice(start, limit, strides, ins, bdims),
            ShapeOp::Pad { low, high, interior } => batch_pad(low, high, interior, ins, bdims, size),
            ShapeOp::Concatenate { axis } => batch_concatenate(*axis, ins, bdims, size),
            ShapeOp::Rev { axes } => batch_rev(axes, ins, bdims),
            ShapeOp::Iota { .. } => super::never_batched("iota"),
        }
    }

    fn view_layout(&self, layout: &Layout) -> Option<Layout> {
        match self {
            ShapeOp::Reshape { shape } => layout.reshape(shape),
            ShapeOp::Transpose { perm } => Some(layout.permute(perm)),
            ShapeOp::Slice { start, limit, strides } => Some(layout.slice(start, limit, strides)),
            ShapeOp::Rev { axes } => Some(layout.rev(axes)),
            ShapeOp::BroadcastInDim { shape, dims } => Some(layout.broadcast_in_dim(shape, dims)),
            ShapeOp::Pad { .. } | ShapeOp::Concatenate { .. } | ShapeOp::Iota { .. } => None,
        }
    }

    fn samples() -> Vec<Sample> {
        shape_samples()
    }

    fn cuda_kernels(_: DType) -> Vec<Kernel> {
        // pad, iota, copy: the kernels crate's structural kernels
        Vec::new()
    }

    // ---- jit ----

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        // an iota is made on the host, so a CUDA graph cannot replay it
        let graph_capture = !matches!(self, ShapeOp::Iota { .. });
        JitProps { graph_capture, sink: false, thread_bound: false, lower_into: false }
    }

    /// Rows pass along the axis an operand holds them on where the op
    /// keeps that axis whole: a broadcast or transpose moves it, a reshape
    /// keeps it where the elements before it are kept, a slice, pad or
    /// concatenation must leave it untouched.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        let split = q.split();
        let a = q.axis(0).ok_or(split)?;
        let x = &q.ins[0];
        let out = match self {
            ShapeOp::BroadcastInDim { dims, .. } => dims[a],
            ShapeOp::Reshape { shape: to } => {
                // the axis keeps its size and the elements before it
                let before: usize = x[..a].iter().product();
                (0..to.rank()).find(|&c| to[c] == q.rows && to[..c].iter().product::<usize>() == before).ok_or(split)?
            }
            ShapeOp::Transpose { perm } => perm.iter().position(|&p| p == a).ok_or(split)?,
            ShapeOp::Slice { start, limit, strides } if (start[a], limit[a], strides[a]) == (0, q.rows, 1) => a,
            ShapeOp::Pad { low, high, interior }
                if (low[a], high[a], interior[a]) == (0, 0, 0) && q.axis(1).is_none() =>
            {
                return q.rows_at(smallvec![Some(a), None], a);
            }
            ShapeOp::Rev { axes } if !axes.contains(&a) => a,
            ShapeOp::Concatenate { axis: c } if *c != a => {
                let mut ins = SmallVec::new();
                for (i, s) in q.ins.iter().enumerate() {
                    ins.push(match q.axis(i) {
                        Some(b) if b == a => Some(a),
                        None if s[a] == q.rows => Some(a),
                        _ => return Err(split),
                    });
                }
                return q.rows_at(ins, a);
            }
            _ => return Err(split),
        };
        q.rows_at(jit::one_operand(a), out)
    }

    fn at_rows(&self, axis: usize, len: usize, cut: bool) -> Option<Prim> {
        let resized = |s: &Shape| -> Shape {
            let mut d: Vec<usize> = s.dims().to_vec();
            d[axis] = len;
            d.into()
        };
        let op = match self {
            // the operand has no rows along `axis` when it is not cut
            ShapeOp::BroadcastInDim { shape, dims } if cut || !dims.contains(&axis) => {
                ShapeOp::BroadcastInDim { shape: resized(shape), dims: dims.clone() }
            }
            ShapeOp::Iota { shape, dim, dtype, device } if !cut && *dim != axis => {
                ShapeOp::Iota { shape: resized(shape), dim: *dim, dtype: *dtype, device: *device }
            }
            _ if !cut => return None,
            ShapeOp::Reshape { shape } => ShapeOp::Reshape { shape: resized(shape) },
            ShapeOp::Slice { start, limit, strides } => {
                let mut limit = limit.clone();
                limit[axis] = len;
                ShapeOp::Slice { start: start.clone(), limit, strides: strides.clone() }
            }
            ShapeOp::BroadcastInDim { .. }
            | ShapeOp::Transpose { .. }
            | ShapeOp::Pad { .. }
            | ShapeOp::Concatenate { .. }
            | ShapeOp::Rev { .. }
            | ShapeOp::Iota { .. } => self.clone(),
        };
        Some(op.into())
    }

    fn row_fusion(&self) -> RowFusion<'_> {
        match self {
            ShapeOp::BroadcastInDim { dims, .. } => RowFusion::Broadcast { dims },
            ShapeOp::Reshape { .. } => RowFusion::SameElements,
            ShapeOp::Transpose { .. }
            | ShapeOp::Slice { .. }
            | ShapeOp::Pad { .. }
            | ShapeOp::Concatenate { .. }
            | ShapeOp::Rev { .. }
            | ShapeOp::Iota { .. } => RowFusion::None,
        }
    }

    fn cpu_row_reduce(&self, _x: &Tile<'_>, _row: usize, _strided: bool, _out: TileMut<'_>) -> bool {
        false
    }
}

/// The registry entries of the structural primitives.
fn shape_samples() -> Vec<Sample> {
    let mut v = Vec::new();
    v.push(Sample::new("broadcast_in_dim", numeric(), vec![0], true, |g, d| {
        let out_rank = g.int(0, 4);
        let out: Vec<usize> = g.dims(out_rank);
        let dims: Vec<usize> = g.subset(out_rank);
        let operand: Vec<usize> = dims.iter().map(|&k| if g.coin(0.3) { 1 } else { out[k] }).collect();
        Case::new(
            ShapeOp::BroadcastInDim { shape: Shape::from(out), dims: dims.into_iter().collect() },
            vec![(operand, d, generic_dom(d))],
        )
    }));
    v.push(Sample::new("reshape", numeric(), vec![0], true, |g, d| {
        let shape = g.shape(3, 1, 4);
        let n: usize = shape.iter().product();
        // a new factorization of n, with unit axes sprinkled in
        let mut factors = vec![];
        let mut m = n;
        let mut p = 2;
        while m > 1 {
            while m.is_multiple_of(p) {
                factors.push(p);
                m /= p;
            }
            p += 1;
        }
        let mut out: Vec<usize> = vec![];
        for f in factors {
            if out.is_empty() || g.coin(0.5) {
                out.push(f);
            } else {
                *out.last_mut().unwrap() *= f;
            }
        }
        if g.coin(0.3) {
            let at = g.int(0, out.len());
            out.insert(at, 1);
        }
        Case::new(ShapeOp::Reshape { shape: Shape::from(out) }, vec![(shape, d, generic_dom(d))])
    }));
    v.push(Sample::new("transpose", numeric(), vec![0], true, |g, d| {
        let r = g.int(0, 4);
        let shape = g.dims(r);
        Case::new(ShapeOp::Transpose { perm: g.perm(r).into_iter().collect() }, vec![(shape, d, generic_dom(d))])
    }));
    v.push(Sample::new("slice", numeric(), vec![0], true, |g, d| {
        let r = g.int(0, 3);
        let shape: Vec<usize> = (0..r).map(|_| g.int(0, 5)).collect();
        let mut start = Axes::new();
        let mut limit = Axes::new();
        let mut strides = Axes::new();
        for &n in &shape {
            let s = g.int(0, n);
            let l = g.int(s, n);
            start.push(s);
            limit.push(l);
            strides.push(g.int(1, 3));
        }
        Case::new(ShapeOp::Slice { start, limit, strides }, vec![(shape, d, generic_dom(d))])
    }));
    v.push(Sample::new("pad", numeric(), vec![0, 1], true, |g, d| {
        let r = g.int(0, 3);
        let shape: Vec<usize> = (0..r).map(|_| g.int(0, 3)).collect();
        let (mut low, mut high, mut interior) = (vec![], vec![], vec![]);
        for &n in &shape {
            let it = g.int(0, 2);
            let full = if n > 0 { n + (n - 1) * it } else { 0 } as i64;
            let lo = g.int(0, 4) as i64 - 2;
            let mut hi = g.int(0, 4) as i64 - 2;
            if lo + hi + full < 0 {
                hi = -(lo + full);
            }
            low.push(lo);
            high.push(hi);
            interior.push(it);
        }
        let prim = ShapeOp::Pad {
            low: low.into_iter().collect(),
            high: high.into_iter().collect(),
            interior: interior.into_iter().collect(),
        };
        Case::new(prim, vec![(shape, d, generic_dom(d)), (vec![], d, generic_dom(d))])
    }));
    v.push(Sample::new("concatenate", numeric(), vec![0, 1, 2], true, |g, d| {
        let r = g.int(1, 3);
        let base = g.dims(r);
        let axis = g.int(0, r - 1);
        let k = g.int(1, 3);
        let specs = (0..k)
            .map(|_| {
                let mut s = base.clone();
                s[axis] = g.int(0, 3);
                (s, d, generic_dom(d))
            })
            .collect();
        Case::new(ShapeOp::Concatenate { axis }, specs)
    }));
    v.push(Sample::new("rev", numeric(), vec![0], true, |g, d| {
        let r = g.int(0, 3);
        let shape = g.dims(r);
        Case::new(ShapeOp::Rev { axes: g.subset(r).into_iter().collect() }, vec![(shape, d, generic_dom(d))])
    }));
    v.push(Sample::new(
        "iota",
        vec![DType::F32, DType::F64, DType::I32, DType::I64, DType::U32],
        vec![],
        false,
        |g, d| {
            let r = g.int(1, 3);
            let shape = g.dims(r);
            Case::new(
                ShapeOp::Iota {
                    shape: Shape::from(shape),
                    dim: g.int(0, r - 1),
                    dtype: d,
                    device: crate::default_device(),
                },
                vec![],
            )
        },
    ));
    v
}
