//! Indexing primitives: dynamic_slice and dynamic_update_slice (runtime
//! start indices resolved as in JAX: a negative start is wrapped once by the
//! axis length, then clamped so the block fits), gather and
//! scatter_add (`tf.gather` semantics with matched batch axes; indices out
//! of range are an error, not a clamp).

use super::batching::BatchAxis;
use super::batching::{to_front, to_position};
use super::factor::{Factor, FactorRows};
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::sample::{generic_dom, numeric, Case, Dom, Sample, FLOATS, INTS};
use super::{check_arity, check_axis, check_int, Family, Props};
use crate::array::{Array, Device};
use crate::error::{Error, ErrorKind, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, Axes, BDims, CompareOp, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::{smallvec, SmallVec};
use xform_kernels::cpu::indexing::{self as k, GatherExtents};
use xform_kernels::cuda_source::Kernel;
use xform_kernels::Layout;
use xform_kernels::{match_buffer, CpuBuffer, DType, Element, Shape};

crate::family_enum! {
    /// The indexing primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum IndexOp, kinds IndexKind {
        /// Slice at runtime start indices (scalar operands), clamped to fit.
        DynamicSlice {
            /// Slice sizes.
            sizes: Axes,
        },
        /// Replace a block at runtime start indices, clamped to fit.
        DynamicUpdateSlice,
        /// `tf.gather`-style indexing of one axis with matched batch axes.
        Gather {
            /// The indexed operand axis.
            axis: usize,
            /// Leading axes matched between operand and indices.
            batch_dims: usize,
        },
        /// The transpose of gather: add updates at indexed positions.
        ScatterAdd {
            /// The indexed operand axis.
            axis: usize,
            /// Leading axes matched between operand and indices.
            batch_dims: usize,
        },
    }
}

// ---- shape rules -----------------------------------------------------------

fn check_starts(op: &str, starts: &[AvalRef<'_>], rank: usize) -> Result<()> {
    if starts.len() != rank {
        return Err(Error::invalid(op, format!("needs {rank} start indices (one per axis), got {}", starts.len())));
    }
    for s in starts {
        if s.rank() != 0 {
            return Err(Error::shape(op, "start indices must be scalars", &[s.shape]));
        }
        check_int(op, "start indices", s)?;
    }
    Ok(())
}

fn shape_dynamic_slice(sizes: &[usize], ins: &[AvalRef<'_>]) -> Result<Avals> {
    let op = "dynamic_slice";
    if ins.is_empty() {
        return Err(Error::invalid(op, "needs an operand"));
    }
    let x = &ins[0];
    check_starts(op, &ins[1..], x.rank())?;
    if sizes.len() != x.rank() || sizes.iter().zip(x.shape.iter()).any(|(s, n)| s > n) {
        return Err(Error::shape(op, format!("slice sizes {sizes:?} do not fit the operand"), &[x.shape]));
    }
    Ok(smallvec![Aval { shape: Shape::from(sizes.to_vec()), dtype: x.dtype, device: x.device }])
}

fn shape_dynamic_update_slice(ins: &[AvalRef<'_>]) -> Result<Avals> {
    let op = "dynamic_update_slice";
    if ins.len() < 2 {
        return Err(Error::invalid(op, "needs an operand and an update"));
    }
    let (x, u) = (&ins[0], &ins[1]);
    check_starts(op, &ins[2..], x.rank())?;
    if u.rank() != x.rank() || u.shape.iter().zip(x.shape.iter()).any(|(a, b)| a > b) {
        return Err(Error::shape(op, "the update must have the operand's rank and fit inside it", &[x.shape, u.shape]));
    }
    if u.dtype != x.dtype {
        return Err(Error::dtype(op, "the update must have the operand's dtype", &[x.dtype, u.dtype]));
    }
    Ok(smallvec![x.to_owned()])
}

/// Output shape of a gather: `x[:axis] + idx[batch_dims:] + x[axis+1:]`.
fn gather_shape(op: &str, x: &AvalRef<'_>, idx: &AvalRef<'_>, axis: usize, batch_dims: usize) -> Result<Shape> {
    check_axis(op, axis, x.rank())?;
    check_int(op, "indices", idx)?;
    if batch_dims > axis || batch_dims > idx.rank() {
        return Err(Error::invalid(
            op,
            format!("batch_dims {batch_dims} must be at most the axis ({axis}) and the index rank ({})", idx.rank()),
        ));
    }
    if x.shape[..batch_dims] != idx.shape[..batch_dims] {
        return Err(Error::shape(
            op,
            format!("the first {batch_dims} axes of operand and indices must match"),
            &[x.shape, idx.shape],
        ));
    }
    let mut s: Vec<usize> = x.shape[..axis].to_vec();
    s.extend_from_slice(&idx.shape[batch_dims..]);
    s.extend_from_slice(&x.shape[axis + 1..]);
    Ok(Shape::from(s))
}

fn shape_gather(axis: usize, batch_dims: usize, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("gather", ins, 2)?;
    let shape = gather_shape("gather", &ins[0], &ins[1], axis, batch_dims)?;
    Ok(smallvec![Aval { shape, dtype: ins[0].dtype, device: ins[0].device }])
}

fn shape_scatter_add(axis: usize, batch_dims: usize, ins: &[AvalRef<'_>]) -> Result<Avals> {
    let op = "scatter_add";
    check_arity(op, ins, 3)?;
    let (x, idx, u) = (&ins[0], &ins[1], &ins[2]);
    let want = gather_shape(op, x, idx, axis, batch_dims)?;
    if *u.shape != want {
        return Err(Error::shape(op, format!("updates must have shape {want}"), &[x.shape, idx.shape, u.shape]));
    }
    if u.dtype != x.dtype || x.dtype == DType::Bool {
        return Err(Error::dtype(op, "operand and updates must share one numeric dtype", &[x.dtype, u.dtype]));
    }
    Ok(smallvec![x.to_owned()])
}

// ---- lowering --------------------------------------------------------------

/// The value of a scalar integer array.
pub(crate) fn scalar_i64(a: &Array) -> Result<i64> {
    let host = a.to_device(Device::Cpu)?;
    host.with_cpu("index", |b, l| match_buffer!(b, v => v[l.offset].to_i64()))
}

/// A start index as JAX 0.10 resolves it on an axis of length `n` for a
/// block of length `block`: a negative start counts from the end (it is
/// wrapped once, `s + n`), then the start is clamped to `0..=n - block` so
/// the block fits. On `n = 4, block = 2`: -1 -> 3 -> 2, -5 -> -1 -> 0.
pub(crate) fn resolve_start(s: i64, n: usize, block: usize) -> usize {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let block = i64::try_from(block).unwrap_or(i64::MAX);
    let s = if s < 0 { s.saturating_add(n) } else { s };
    s.clamp(0, n - block) as usize
}

/// Start indices resolved (wrapped, then clamped) so that a block of
/// `sizes` fits in `shape`.
///
/// # Errors
/// A start that is not an integer scalar.
pub fn resolved_starts(shape: &Shape, sizes: &[usize], starts: &[&Array]) -> Result<Vec<usize>> {
    starts.iter().enumerate().map(|(d, s)| Ok(resolve_start(scalar_i64(s)?, shape[d], sizes[d]))).collect()
}

fn lower_dynamic_slice(sizes: &[usize], ins: &[&Array]) -> Result<Array> {
    let x = ins[0];
    let start = resolved_starts(x.shape(), sizes, &ins[1..])?;
    let limit: Vec<usize> = start.iter().zip(sizes).map(|(s, n)| s + n).collect();
    let view = x.with_layout(x.layout.slice(&start, &limit, &vec![1; sizes.len()]));
    view.contiguous_copy()
}

fn lower_dynamic_update_slice(ins: &[&Array]) -> Result<Array> {
    let (x, u) = (ins[0], ins[1]);
    let start = resolved_starts(x.shape(), u.shape(), &ins[2..])?;
    let gu = u.read();
    let bu = gu.cpu("dynamic_update_slice")?;
    let out = x.with_cpu("dynamic_update_slice", |b, l| {
        match_buffer!(b, xs => CpuBuffer::from_vec(xform_kernels::cpu::shape::dynamic_update_slice(xs, l, bu.as_slice(), &u.layout, &start)))
    })?;
    Ok(Array::from_cpu(out, x.shape().clone()))
}

/// The extents of a gather (or scatter-add) along `axis` after
/// `batch_dims` batch axes, of an operand of shape `x` at indices of
/// shape `idx`: what the CPU and CUDA kernels take.
pub fn gather_extents(x: &Shape, idx: &Shape, axis: usize, batch_dims: usize) -> GatherExtents {
    GatherExtents {
        batch: x[..batch_dims].iter().product(),
        pre: x[batch_dims..axis].iter().product(),
        n: x[axis],
        post: x[axis + 1..].iter().product(),
        count: idx[batch_dims..].iter().product(),
    }
}

/// Indices as a contiguous host vector of i64.
pub(crate) fn indices_i64(idx: &Array) -> Result<Vec<i64>> {
    let host = idx.to_device(Device::Cpu)?;
    host.with_cpu("gather", |b, l| {
        match_buffer!(b, v => xform_kernels::cpu::elementwise::map1(v, l, xform_kernels::cpu::Par::Seq, |x| x.to_i64()))
    })
}

fn index_error(op: &str, e: k::IndexOutOfRange) -> Error {
    Error::new(op, ErrorKind::IndexOutOfRange { index: e.index, size: e.size })
}

fn lower_gather(axis: usize, batch_dims: usize, x: &Array, idx: &Array) -> Result<Array> {
    let e = gather_extents(x.shape(), idx.shape(), axis, batch_dims);
    let iv = indices_i64(idx)?;
    let xc = x.contiguous()?;
    let out = xc.with_cpu("gather", |b, l| {
        let r = l.contiguous_range().expect("contiguous");
        match_buffer!(b, v => k::gather(&v[r], &iv, e).map(CpuBuffer::from_vec))
    })?;
    let shape = gather_shape("gather", &x.aval_ref(), &idx.aval_ref(), axis, batch_dims)?;
    Ok(Array::from_cpu(out.map_err(|e| index_error("gather", e))?, shape))
}

fn scatter_typed<T: Element>(x: Vec<T>, iv: &[i64], u: &[T], e: GatherExtents) -> Result<Vec<T>, k::IndexOutOfRange> {
    if T::DTYPE.is_float() {
        k::scatter_add(x, iv, u, e, |a, b| T::from_f64(a.to_f64() + b.to_f64()))
    } else {
        k::scatter_add(x, iv, u, e, |a, b| T::from_i64(a.to_i64().wrapping_add(b.to_i64())))
    }
}

fn lower_scatter_add(axis: usize, batch_dims: usize, x: &Array, idx: &Array, u: &Array) -> Result<Array> {
    if matches!(x.dtype, DType::F16 | DType::BF16) {
        // Accumulate in f32 and round once, as the half types compute.
        let wide = |a: &Array| super::elementwise::lower_convert(DType::F32, a);
        let out = lower_scatter_add(axis, batch_dims, &wide(x)?, idx, &wide(u)?)?;
        return super::elementwise::lower_convert(x.dtype, &out);
    }
    let e = gather_extents(x.shape(), idx.shape(), axis, batch_dims);
    let iv = indices_i64(idx)?;
    let xc = x.contiguous_copy()?;
    let uc = u.contiguous()?;
    let gu = uc.read();
    let bu = gu.cpu("scatter_add")?;
    let ur = uc.layout.contiguous_range().expect("contiguous");
    let taken = {
        let mut g = xc.write();
        let bx = g.cpu_mut("scatter_add")?;
        std::mem::replace(bx, CpuBuffer::Bool(vec![]))
    };
    let mut taken = taken;
    let out = match_buffer!(&mut taken, v => scatter_typed(std::mem::take(v), &iv, &bu.as_slice()[ur.clone()], e).map(CpuBuffer::from_vec));
    Ok(Array::from_cpu(out.map_err(|e| index_error("scatter_add", e))?, x.shape().clone()))
}

// ---- JVP ---------------------------------------------------------------------

fn jvp_dynamic_slice(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(prim, primals)?;
    let t = match &tangents[0] {
        Some(t) => {
            let mut ins: SmallVec<[Tensor; 4]> = smallvec![t.clone()];
            ins.extend(primals[1..].iter().cloned());
            Some(bind1(prim, &ins)?)
        }
        None => None,
    };
    Ok((smallvec![out], smallvec![t]))
}

fn jvp_dynamic_update_slice(primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(&IndexOp::DynamicUpdateSlice.into(), primals)?;
    let t = match (&tangents[0], &tangents[1]) {
        (None, None) => None,
        (tx, tu) => {
            let tx = lax::instantiate(tx, &primals[0])?;
            let tu = lax::instantiate(tu, &primals[1])?;
            Some(lax::dynamic_update_slice(&tx, &tu, &primals[2..])?)
        }
    };
    Ok((smallvec![out], smallvec![t]))
}

fn jvp_gather(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(prim, primals)?;
    let t = match &tangents[0] {
        Some(t) => Some(bind1(prim, &[t.clone(), primals[1].clone()])?),
        None => None,
    };
    Ok((smallvec![out], smallvec![t]))
}

fn jvp_scatter_add(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(prim, primals)?;
    let t = match (&tangents[0], &tangents[2]) {
        (None, None) => None,
        (tx, tu) => {
            let tx = lax::instantiate(tx, &primals[0])?;
            let tu = lax::instantiate(tu, &primals[2])?;
            Some(bind1(prim, &[tx, primals[1].clone(), tu])?)
        }
    };
    Ok((smallvec![out], smallvec![t]))
}

// ---- transpose ---------------------------------------------------------------

fn consts(args: &[LinearArg]) -> Result<Vec<Tensor>> {
    args.iter()
        .map(|a| a.constant().cloned().ok_or_else(|| Error::transform("index", "indices cannot be linear")))
        .collect()
}

fn transpose_dynamic_slice(cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let starts = consts(&args[1..])?;
    let mut out: Cotangents = smallvec![None; args.len()];
    if let Some(ct) = &cts[0] {
        let zeros = lax::zeros_aval(&args[0].aval())?;
        out[0] = Some(lax::dynamic_update_slice(&zeros, ct, &starts)?);
    }
    Ok(out)
}

fn transpose_dynamic_update_slice(cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let starts = consts(&args[2..])?;
    let mut out: Cotangents = smallvec![None; args.len()];
    if let Some(ct) = &cts[0] {
        let ua = args[1].aval();
        if args[0].is_linear() {
            out[0] = Some(lax::dynamic_update_slice(ct, &lax::zeros_aval(&ua)?, &starts)?);
        }
        if args[1].is_linear() {
            out[1] = Some(lax::dynamic_slice(ct, &starts, &ua.shape)?);
        }
    }
    Ok(out)
}

fn transpose_gather(axis: usize, batch_dims: usize, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let idx = consts(&args[1..2])?.remove(0);
    let ct_x = match &cts[0] {
        Some(ct) => Some(lax::scatter_add(&lax::zeros_aval(&args[0].aval())?, &idx, ct, axis, batch_dims)?),
        None => None,
    };
    Ok(smallvec![ct_x, None])
}

fn transpose_scatter_add(
    axis: usize,
    batch_dims: usize,
    cts: &[Option<Tensor>],
    args: &[LinearArg],
) -> Result<Cotangents> {
    let idx = consts(&args[1..2])?.remove(0);
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None, None]);
    };
    let ct_x = args[0].is_linear().then(|| ct.clone());
    let ct_u = if args[2].is_linear() { Some(lax::gather(ct, &idx, axis, batch_dims)?) } else { None };
    Ok(smallvec![ct_x, None, ct_u])
}

/// The cotangent of gather's operand as one-hot rows times the output
/// cotangent (NOTE: [factored cotangents]), for a gather of whole slices along the
/// first axis after the matched batch axes (an embedding lookup); `None`
/// for the rest.
fn factor_gather(
    axis: usize,
    batch_dims: usize,
    cts: &[Option<Tensor>],
    args: &[LinearArg],
    i: usize,
) -> Result<Option<Factor>> {
    let (Some(g), 0, LinearArg::Linear(x), LinearArg::Const(idx)) = (&cts[0], i, &args[0], &args[1]) else {
        return Ok(None);
    };
    if axis != batch_dims {
        return Ok(None);
    }
    let groups: usize = x.shape.dims()[..axis].iter().product();
    let n: usize = x.shape.dims()[axis + 1..].iter().product();
    let m: usize = idx.shape().dims()[batch_dims..].iter().product();
    let indices = lax::reshape(idx, &Shape::from(&[groups, m][..]))?;
    let ct = lax::reshape(g, &Shape::from(&[groups, m, n][..]))?;
    let axes: Axes = (0..x.shape.rank()).collect();
    let k = x.shape[axis];
    Ok(Some(Factor { rows: FactorRows::OneHot { indices, k }, ct, shape: x.shape.clone(), axes }))
}

// ---- batching ----------------------------------------------------------------

/// A scalar zero index, typed like the other start indices (i32 if none).
fn zero_index(starts: &[Tensor], device: crate::Device) -> Result<Tensor> {
    lax::scalar(0.0, starts.first().map_or(DType::I32, |s| s.dtype()), device)
}

/// Per-example start `[B]` (as i64) resolved as `resolve_start` does: in
/// i64 (exact for every index dtype), first clamped to `-n..=n` so the wrap
/// `s + n` cannot overflow, then wrapped, then clamped to `0..=n - block`.
fn resolved_batched_start(s: &Tensor, bdim: Option<usize>, size: usize, n: usize, block: usize) -> Result<Tensor> {
    let s = lax::convert(s, DType::I64)?;
    let s = to_front(&s, bdim, size)?;
    let clamp =
        |s: &Tensor, lo: f64, hi: f64| lax::min(&lax::max(s, &lax::full_like(s, lo)?)?, &lax::full_like(s, hi)?);
    let s = clamp(&s, -(n as f64), n as f64)?;
    let negative = lax::compare(CompareOp::Lt, &s, &lax::zeros_like(&s)?)?;
    let s = lax::select(&negative, &lax::add_scalar(&s, n as f64)?, &s)?;
    clamp(&s, 0.0, (n - block) as f64)
}

/// `[B, block]` indices `start[b] + i` (i64, like the starts).
fn block_indices(start: &Tensor, block: usize) -> Result<Tensor> {
    let b = start.shape()[0];
    let shape = Shape::from([b, block]);
    let iota = lax::iota(DType::I64, &Shape::from([block]), 0, start.device())?;
    lax::add(&lax::broadcast_in_dim(start, &shape, &[0])?, &lax::broadcast_in_dim(&iota, &shape, &[1])?)
}

fn batch_dynamic_slice(sizes: &[usize], ins: &[Tensor], bdims: &[Option<usize>], size: usize) -> Result<(Outs, BDims)> {
    if bdims[1..].iter().all(Option::is_none) {
        let b = bdims[0].expect("batched operand");
        let mut starts: SmallVec<[Tensor; 4]> = ins[1..].iter().cloned().collect();
        starts.insert(b, zero_index(&ins[1..], ins[0].device())?);
        let mut sz: Axes = sizes.iter().copied().collect();
        sz.insert(b, size);
        return Ok((smallvec![lax::dynamic_slice(&ins[0], &starts, &sz)?], smallvec![Some(b)]));
    }
    // Per-example starts: one batched gather per axis.
    let mut x = to_front(&ins[0], bdims[0], size)?;
    let logical = x.shape().without_axis(0);
    for d in 0..sizes.len() {
        if sizes[d] == logical[d] {
            continue; // the start resolves to 0: the whole axis
        }
        let start = resolved_batched_start(&ins[1 + d], bdims[1 + d], size, logical[d], sizes[d])?;
        x = lax::gather(&x, &block_indices(&start, sizes[d])?, d + 1, 1)?;
    }
    Ok((smallvec![x], smallvec![Some(0)]))
}

fn batch_dynamic_update_slice(ins: &[Tensor], bdims: &[Option<usize>], size: usize) -> Result<(Outs, BDims)> {
    let x = to_front(&ins[0], bdims[0], size)?;
    let u = to_front(&ins[1], bdims[1], size)?;
    if bdims[2..].iter().all(Option::is_none) {
        let mut starts: SmallVec<[Tensor; 4]> = ins[2..].iter().cloned().collect();
        starts.insert(0, zero_index(&ins[2..], ins[0].device())?);
        return Ok((smallvec![lax::dynamic_update_slice(&x, &u, &starts)?], smallvec![Some(0)]));
    }
    // Per-example starts: scatter the update (and a mask) into place one
    // axis at a time, from the last axis to the first, then select.
    let logical: Vec<usize> = x.shape()[1..].to_vec();
    let block: Vec<usize> = u.shape()[1..].to_vec();
    let is_bool = x.dtype() == DType::Bool;
    let mut e = if is_bool { lax::convert(&u, DType::I32)? } else { u.clone() };
    let mut m = lax::ones_like(&lax::convert(&u, DType::I32)?)?;
    for d in (0..logical.len()).rev() {
        let start = resolved_batched_start(&ins[2 + d], bdims[2 + d], size, logical[d], block[d])?;
        let idx = block_indices(&start, block[d])?;
        let mut shape = e.shape();
        shape[d + 1] = logical[d];
        e = lax::scatter_add(&lax::full(&shape, 0.0, e.dtype(), e.device())?, &idx, &e, d + 1, 1)?;
        m = lax::scatter_add(&lax::full(&shape, 0.0, DType::I32, m.device())?, &idx, &m, d + 1, 1)?;
    }
    let hit = lax::ne(&m, &lax::zeros_like(&m)?)?;
    let e = if is_bool { lax::convert(&e, DType::Bool)? } else { e };
    Ok((smallvec![lax::select(&hit, &e, &x)?], smallvec![Some(0)]))
}

fn batch_gather(
    axis: usize,
    batch_dims: usize,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    size: usize,
) -> Result<(Outs, BDims)> {
    let (x, idx) = (&ins[0], &ins[1]);
    match (bdims[0], bdims[1]) {
        // The batch axis becomes an operand axis just after the batch dims.
        (Some(b), None) => {
            let x = lax::moveaxis(x, b, batch_dims)?;
            Ok((smallvec![lax::gather(&x, idx, axis + 1, batch_dims)?], smallvec![Some(batch_dims)]))
        }
        // The batch axis becomes the first index axis after the batch dims.
        (None, Some(b)) => {
            let idx = lax::moveaxis(idx, b, batch_dims)?;
            Ok((smallvec![lax::gather(x, &idx, axis, batch_dims)?], smallvec![Some(axis)]))
        }
        _ => {
            let x = to_front(x, bdims[0], size)?;
            let idx = to_front(idx, bdims[1], size)?;
            Ok((smallvec![lax::gather(&x, &idx, axis + 1, batch_dims + 1)?], smallvec![Some(0)]))
        }
    }
}

fn batch_scatter_add(
    axis: usize,
    batch_dims: usize,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    size: usize,
) -> Result<(Outs, BDims)> {
    let (x, idx, u) = (&ins[0], &ins[1], &ins[2]);
    if bdims[1].is_none() {
        // Indices shared: the batch axis is an operand axis after the batch dims.
        let xb = to_position(x, bdims[0], batch_dims, size)?;
        let ub = to_position(u, bdims[2], batch_dims, size)?;
        let out = lax::scatter_add(&xb, idx, &ub, axis + 1, batch_dims)?;
        return Ok((smallvec![out], smallvec![Some(batch_dims)]));
    }
    let xb = to_front(x, bdims[0], size)?;
    let ib = to_front(idx, bdims[1], size)?;
    let ub = to_front(u, bdims[2], size)?;
    Ok((smallvec![lax::scatter_add(&xb, &ib, &ub, axis + 1, batch_dims + 1)?], smallvec![Some(0)]))
}

// ---- the family ------------------------------------------------------------------

impl From<IndexOp> for Prim {
    fn from(op: IndexOp) -> Prim {
        Prim::Index(op)
    }
}

impl Family for IndexOp {
    type Kind = IndexKind;
    const KINDS: &'static [IndexKind] = IndexKind::ALL;

    fn kind(&self) -> IndexKind {
        IndexOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            IndexOp::DynamicSlice { .. } => "dynamic_slice",
            IndexOp::DynamicUpdateSlice => "dynamic_update_slice",
            IndexOp::Gather { .. } => "gather",
            IndexOp::ScatterAdd { .. } => "scatter_add",
        }
    }

    fn props(&self) -> Props {
        match self {
            // zeros with the cotangent written in
            IndexOp::DynamicSlice { .. } | IndexOp::Gather { .. } => Props::NONE.fresh(),
            // pass (parts of) the cotangent on
            IndexOp::DynamicUpdateSlice | IndexOp::ScatterAdd { .. } => Props::NONE,
        }
    }

    fn fmt_params(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexOp::DynamicSlice { sizes } => write!(f, "[sizes={}]", super::axes_str(sizes)),
            IndexOp::DynamicUpdateSlice => Ok(()),
            IndexOp::Gather { axis, batch_dims } | IndexOp::ScatterAdd { axis, batch_dims } => {
                write!(f, "[axis={axis} batch_dims={batch_dims}]")
            }
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            IndexOp::DynamicSlice { sizes } => shape_dynamic_slice(sizes, ins),
            IndexOp::DynamicUpdateSlice => shape_dynamic_update_slice(ins),
            IndexOp::Gather { axis, batch_dims } => shape_gather(*axis, *batch_dims, ins),
            IndexOp::ScatterAdd { axis, batch_dims } => shape_scatter_add(*axis, *batch_dims, ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(match self {
            IndexOp::DynamicSlice { sizes } => lower_dynamic_slice(sizes, ins),
            IndexOp::DynamicUpdateSlice => lower_dynamic_update_slice(ins),
            IndexOp::Gather { axis, batch_dims } => lower_gather(*axis, *batch_dims, ins[0], ins[1]),
            IndexOp::ScatterAdd { axis, batch_dims } => lower_scatter_add(*axis, *batch_dims, ins[0], ins[1], ins[2]),
        })
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        let (x, idx) = (ins[0], ins.get(1).copied());
        super::one(match self {
            // a view of `x` at starts read from the host, copied on its device
            IndexOp::DynamicSlice { sizes } => lower_dynamic_slice(sizes, ins),
            IndexOp::DynamicUpdateSlice => {
                let u = ins[1];
                backend.dynamic_update_slice(x, u, &resolved_starts(x.shape(), u.shape(), &ins[2..])?)
            }
            IndexOp::Gather { axis, batch_dims } => {
                let idx = idx.expect("checked arity");
                let shape = gather_shape("gather", &x.aval_ref(), &idx.aval_ref(), *axis, *batch_dims)?;
                backend.gather(x, idx, gather_extents(x.shape(), idx.shape(), *axis, *batch_dims), shape)
            }
            IndexOp::ScatterAdd { axis, batch_dims } => {
                let (idx, u) = (ins[1], ins[2]);
                let e = gather_extents(x.shape(), idx.shape(), *axis, *batch_dims);
                if matches!(x.dtype, DType::F16 | DType::BF16) {
                    // Accumulate in f32 and round once, as the half types compute.
                    let out = backend.scatter_add(
                        &backend.convert(DType::F32, x)?,
                        idx,
                        &backend.convert(DType::F32, u)?,
                        e,
                    )?;
                    backend.convert(x.dtype, &out)
                } else {
                    backend.scatter_add(x, idx, u, e)
                }
            }
        })
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            IndexOp::DynamicSlice { .. } => jvp_dynamic_slice(prim, primals, tangents),
            IndexOp::DynamicUpdateSlice => jvp_dynamic_update_slice(primals, tangents),
            IndexOp::Gather { .. } => jvp_gather(prim, primals, tangents),
            IndexOp::ScatterAdd { .. } => jvp_scatter_add(prim, primals, tangents),
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            IndexOp::DynamicSlice { .. } => transpose_dynamic_slice(cts, args),
            IndexOp::DynamicUpdateSlice => transpose_dynamic_update_slice(cts, args),
            IndexOp::Gather { axis, batch_dims } => transpose_gather(*axis, *batch_dims, cts, args),
            IndexOp::ScatterAdd { axis, batch_dims } => transpose_scatter_add(*axis, *batch_dims, cts, args),
        }
    }

    fn factor(&self, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<Factor>> {
        match self {
            IndexOp::Gather { axis, batch_dims } => factor_gather(*axis, *batch_dims, cts, args, i),
            IndexOp::DynamicSlice { .. } | IndexOp::DynamicUpdateSlice | IndexOp::ScatterAdd { .. } => Ok(None),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        let size = axis.size;
        match self {
            IndexOp::DynamicSlice { sizes } => batch_dynamic_slice(sizes, ins, bdims, size),
            IndexOp::DynamicUpdateSlice => batch_dynamic_update_slice(ins, bdims, size),
            IndexOp::Gather { axis, batch_dims } => batch_gather(*axis, *batch_dims, ins, bdims, size),
            IndexOp::ScatterAdd { axis, batch_dims } => batch_scatter_add(*axis, *batch_dims, ins, bdims, size),
        }
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        let mut v = Vec::new();
        v.push(Sample::new("dynamic_slice", numeric(), vec![0], true, |g, d| {
            let r = g.int(0, 3);
            let shape: Vec<usize> = (0..r).map(|_| g.int(1, 4)).collect();
            let sizes: Vec<usize> = shape.iter().map(|&n| g.int(0, n)).collect();
            let idt = g.pick(&[DType::I32, DType::I64]);
            let mut specs = vec![(shape.clone(), d, generic_dom(d))];
            specs.extend(shape.iter().map(|&n| (vec![], idt, Dom::Start(n))));
            Case::new(IndexOp::DynamicSlice { sizes: sizes.into_iter().collect() }, specs)
        }));
        v.push(Sample::new("dynamic_update_slice", numeric(), vec![0, 1], true, |g, d| {
            let r = g.int(0, 3);
            let shape: Vec<usize> = (0..r).map(|_| g.int(1, 4)).collect();
            let sizes: Vec<usize> = shape.iter().map(|&n| g.int(0, n)).collect();
            let idt = g.pick(&[DType::I32, DType::I64]);
            let mut specs = vec![(shape.clone(), d, generic_dom(d)), (sizes, d, generic_dom(d))];
            specs.extend(shape.iter().map(|&n| (vec![], idt, Dom::Start(n))));
            Case::new(IndexOp::DynamicUpdateSlice, specs)
        }));
        for scatter in [false, true] {
            let name = if scatter { "scatter_add" } else { "gather" };
            let dtypes = if scatter { FLOATS.iter().chain(INTS.iter()).copied().collect() } else { numeric() };
            let linear = if scatter { vec![0, 2] } else { vec![0] };
            v.push(Sample::new(name, dtypes, linear, true, move |g, d| {
                let bd = g.int(0, 2);
                let batch: Vec<usize> = (0..bd).map(|_| g.int(1, 3)).collect();
                let pre = g.int(0, 1);
                let post = g.int(0, 2);
                let mut xs = batch.clone();
                xs.extend((0..pre).map(|_| g.int(1, 3)));
                let axis = xs.len();
                let n = g.int(1, 4);
                xs.push(n);
                xs.extend((0..post).map(|_| g.int(0, 3)));
                let mut is = batch.clone();
                is.extend((0..g.int(0, 2)).map(|_| g.int(1, 3)));
                let idt = g.pick(&[DType::I32, DType::I64, DType::U32]);
                let idom = if idt == DType::U32 { Dom::Small(0, n as i64 - 1) } else { Dom::Index(n) };
                let mut out: Vec<usize> = xs[..axis].to_vec();
                out.extend_from_slice(&is[bd..]);
                out.extend_from_slice(&xs[axis + 1..]);
                if scatter {
                    Case::new(
                        IndexOp::ScatterAdd { axis, batch_dims: bd },
                        vec![(xs, d, generic_dom(d)), (is, idt, idom), (out, d, generic_dom(d))],
                    )
                } else {
                    Case::new(IndexOp::Gather { axis, batch_dims: bd }, vec![(xs, d, generic_dom(d)), (is, idt, idom)])
                }
            }));
        }
        v
    }

    fn cuda_kernels(_: DType) -> Vec<Kernel> {
        // gather, scatter-add and the index check: structural kernels
        Vec::new()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: false, sink: true, thread_bound: false, lower_into: false }
    }

    /// A gather or scatter-add passes rows along a batch axis shared by
    /// its operands, or along an operand axis the indices do not reach.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        let split = q.split();
        match self {
            IndexOp::Gather { axis: g, batch_dims: nb } => {
                let (g, nb, idx_rank) = (*g, *nb, q.ins[1].rank());
                match (q.axis(0), q.axis(1)) {
                    (Some(a), i) if a < nb && i.is_none_or(|i| i == a) => q.rows_at(smallvec![Some(a), Some(a)], a),
                    (None, Some(a)) if a < nb => q.rows_at(smallvec![Some(a), Some(a)], a),
                    (Some(a), None) if a < g => q.rows_at(smallvec![Some(a), None], a),
                    (Some(a), None) if a > g => q.rows_at(smallvec![Some(a), None], a - 1 + idx_rank - nb),
                    (None, Some(a)) => q.rows_at(smallvec![None, Some(a)], g + a - nb),
                    _ => Err(split),
                }
            }
            IndexOp::ScatterAdd { axis: g, batch_dims: nb } => {
                let (g, nb, idx_rank) = (*g, *nb, q.ins[1].rank());
                let a = (0..3).find_map(|i| q.axis(i)).ok_or(split)?;
                let agree = |i: usize, want: Option<usize>| q.axis(i).is_none() || q.axis(i) == want;
                if a < nb && (0..3).all(|i| agree(i, Some(a))) {
                    return q.rows_at(smallvec![Some(a), Some(a), Some(a)], a);
                }
                // rows of the operand along an axis the indices do not
                // reach: the updates hold the same rows
                let u = match a.cmp(&g) {
                    std::cmp::Ordering::Less => a,
                    std::cmp::Ordering::Greater => a - 1 + idx_rank - nb,
                    std::cmp::Ordering::Equal => return Err(split),
                };
                if q.axis(0) == Some(a) && a >= nb && q.axis(1).is_none() && agree(2, Some(u)) {
                    return q.rows_at(smallvec![Some(a), None, Some(u)], a);
                }
                Err(split)
            }
            IndexOp::DynamicSlice { .. } | IndexOp::DynamicUpdateSlice => jit::no_rows(q),
        }
    }
}
