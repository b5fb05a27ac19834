//! Launching the generated kernels: every function takes device buffers with
//! any strided layouts and returns fresh contiguous row-major results, like
//! the CPU kernels in `crate::cpu` (the convolution, in `conv.rs`, takes
//! contiguous canonical operands instead).

use super::buffer::{CudaBuffer, DeviceVec};
use super::device::{device, CudaDevice};
use super::error::{CudaError, Result};
use super::source::{self, Fold, Kernel, MapOp, Ranking, MAX_DIMS, MAX_OPERANDS};
use crate::cpu::indexing::GatherExtents;
use crate::dtype::DType;
use crate::layout::{Coalesced, Dims, Layout, Shape, Strides};
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use std::sync::Arc;

pub use super::conv::{check_geometry, conv_forward, conv_forward_layouts, conv_forward_with, cudnn_enabled, ConvPath};
mod fused;
pub use fused::fused;
mod window;
pub use window::{reduce_window, select_and_gather, select_and_scatter};

/// Threads per block of the one-dimensional kernels.
const BLOCK: u32 = 256;

/// The iteration parameters of a generated elementwise kernel over `N`
/// operands (`XfIter`, and `XfFused` with `N = MAX_FUSED_INPUTS`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct IterParamsOf<const N: usize> {
    pub(super) n: i64,
    pub(super) rank: i32,
    pub(super) pad: i32,
    pub(super) shape: [i64; MAX_DIMS],
    pub(super) strides: [[i64; MAX_DIMS]; N],
    pub(super) offsets: [i64; N],
}
// SAFETY: a plain `#[repr(C)]` struct of integers whose layout matches
// `XfIter` (and `XfFused`) in the generated source; it is passed by value.
unsafe impl<const N: usize> DeviceRepr for IterParamsOf<N> {}

type IterParams = IterParamsOf<MAX_OPERANDS>;

#[repr(C)]
#[derive(Clone, Copy)]
struct RedParams {
    nout: i64,
    nred: i64,
    krank: i32,
    rrank: i32,
    kshape: [i64; MAX_DIMS],
    kstride: [i64; MAX_DIMS],
    rshape: [i64; MAX_DIMS],
    rstride: [i64; MAX_DIMS],
    offset: i64,
}
// SAFETY: plain `#[repr(C)]` integers matching `XfRed`.
unsafe impl DeviceRepr for RedParams {}

#[repr(C)]
#[derive(Clone, Copy)]
struct PadParams {
    n: i64,
    rank: i32,
    pad: i32,
    oshape: [i64; MAX_DIMS],
    ishape: [i64; MAX_DIMS],
    istride: [i64; MAX_DIMS],
    low: [i64; MAX_DIMS],
    step: [i64; MAX_DIMS],
    ioffset: i64,
    voffset: i64,
}
// SAFETY: plain `#[repr(C)]` integers matching `XfPad`.
unsafe impl DeviceRepr for PadParams {}

#[repr(C)]
#[derive(Clone, Copy)]
struct GatherParams {
    batch: i64,
    pre: i64,
    n: i64,
    post: i64,
    count: i64,
    total: i64,
}
// SAFETY: plain `#[repr(C)]` integers matching `XfGather`.
unsafe impl DeviceRepr for GatherParams {}

#[repr(C)]
#[derive(Clone, Copy)]
struct GemmParams {
    batch: i64,
    m: i64,
    n: i64,
    k: i64,
    as0: i64,
    as1: i64,
    as2: i64,
    bs0: i64,
    bs1: i64,
    bs2: i64,
    aoff: i64,
    boff: i64,
}
// SAFETY: plain `#[repr(C)]` integers matching `XfGemm`.
unsafe impl DeviceRepr for GemmParams {}

/// One kernel argument.
enum Arg<'a> {
    Ptr(u64),
    I64(i64),
    I32(i32),
    Iter(&'a IterParams),
    Red(&'a RedParams),
    Pad(&'a PadParams),
    Gather(&'a GatherParams),
    Gemm(&'a GemmParams),
    Win(&'a window::WinParams),
    Fused(&'a fused::FusedParams),
}

/// Launches `kernel` (compiled at first use) on `dev`'s stream.
fn launch(dev: &CudaDevice, kernel: &Kernel, cfg: LaunchConfig, args: &[Arg<'_>]) -> Result<()> {
    let f = dev.function(kernel)?;
    let stream = dev.stream();
    let mut b = stream.launch_builder(&f);
    for a in args {
        match a {
            Arg::Ptr(p) => b.arg(p),
            Arg::I64(v) => b.arg(v),
            Arg::I32(v) => b.arg(v),
            Arg::Iter(p) => b.arg(*p),
            Arg::Red(p) => b.arg(*p),
            Arg::Pad(p) => b.arg(*p),
            Arg::Gather(p) => b.arg(*p),
            Arg::Gemm(p) => b.arg(*p),
            Arg::Win(p) => b.arg(*p),
            Arg::Fused(p) => b.arg(*p),
        };
    }
    // SAFETY: the arguments match the generated signature of `kernel` in
    // number, order and type (each call site builds them next to the
    // generator it uses); every pointer is the base of a live allocation of
    // the right dtype, and the index parameters keep every access inside
    // the layouts of the operands, which the callers' arrays validated.
    unsafe { b.launch(cfg) }.map(|_| ()).map_err(|e| CudaError::driver(&format!("launching {}", kernel.name), e))
}

fn grid_1d(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, 1 << 20) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

fn too_many_dims(rank: usize) -> CudaError {
    CudaError::unsupported(format!("layouts of rank {rank} after merging axes (at most {MAX_DIMS})"))
}

fn fill_dims(dst: &mut [i64; MAX_DIMS], src: impl IntoIterator<Item = i64>) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s;
    }
}

/// The iteration parameters of operands of one logical shape.
fn iter_params<const N: usize>(shape: &[usize], ops: [(&[isize], usize); N]) -> Result<IterParams> {
    let c = Coalesced::new(shape, ops);
    if c.shape.len() > MAX_DIMS {
        return Err(too_many_dims(c.shape.len()));
    }
    let mut p = IterParams {
        n: shape.iter().product::<usize>() as i64,
        rank: c.shape.len() as i32,
        pad: 0,
        shape: [0; MAX_DIMS],
        strides: [[0; MAX_DIMS]; MAX_OPERANDS],
        offsets: [0; MAX_OPERANDS],
    };
    fill_dims(&mut p.shape, c.shape.iter().map(|&n| n as i64));
    for k in 0..N {
        fill_dims(&mut p.strides[k], c.strides[k].iter().map(|&s| s as i64));
        p.offsets[k] = c.offsets[k] as i64;
    }
    Ok(p)
}

fn same_device(bufs: &[&CudaBuffer]) -> Result<Arc<CudaDevice>> {
    let dev = bufs[0].device().clone();
    if let Some(b) = bufs.iter().find(|b| b.ordinal() != dev.ordinal()) {
        return Err(CudaError::unsupported(format!(
            "operands on different devices (cuda:{} and cuda:{})",
            dev.ordinal(),
            b.ordinal()
        )));
    }
    Ok(dev)
}

/// Runs a map-family kernel over operands of one shape into a fresh buffer
/// (`param`: the kernel's run-time scalar, if it takes one).
fn run_map(kernel: &Kernel, ins: &[(&CudaBuffer, &Layout)], out: DType, param: Option<i64>) -> Result<CudaBuffer> {
    let bufs: Vec<&CudaBuffer> = ins.iter().map(|(b, _)| *b).collect();
    let dev = same_device(&bufs)?;
    let shape = &ins[0].1.shape;
    let n = shape.numel();
    let y = CudaBuffer::alloc(&dev, out, n)?;
    if n == 0 {
        return Ok(y);
    }
    let lay = |k: usize| (&ins[k].1.strides[..], ins[k].1.offset);
    let params = match ins.len() {
        1 => iter_params(shape, [lay(0)])?,
        2 => iter_params(shape, [lay(0), lay(1)])?,
        3 => iter_params(shape, [lay(0), lay(1), lay(2)])?,
        k => return Err(CudaError::unsupported(format!("elementwise maps over {k} operands"))),
    };
    let mut args = vec![Arg::Ptr(y.device_ptr())];
    args.extend(bufs.iter().map(|b| Arg::Ptr(b.device_ptr())));
    args.push(Arg::Iter(&params));
    if let Some(p) = param {
        args.push(Arg::I64(p));
    }
    launch(&dev, kernel, grid_1d(n), &args)?;
    Ok(y)
}

/// `out[i] = op(x[i], y[i], ...)` over 1 to 3 operands of one shape (any
/// layouts), result dtype `out`, contiguous.
pub fn map(op: &MapOp, ins: &[(&CudaBuffer, &Layout)], out: DType) -> Result<CudaBuffer> {
    let dtypes: Vec<DType> = ins.iter().map(|(b, _)| b.dtype()).collect();
    run_map(&source::map_kernel(op, &dtypes, out), ins, out, op.param)
}

/// A contiguous copy of the logical elements of `x`.
pub fn to_contiguous(x: &CudaBuffer, lx: &Layout) -> Result<CudaBuffer> {
    run_map(&source::copy_kernel(x.dtype()), &[(x, lx)], x.dtype(), None)
}

/// The logical elements of `x`, row-major, on the host.
pub fn download(x: &CudaBuffer, lx: &Layout) -> Result<crate::CpuBuffer> {
    if let Some(r) = lx.contiguous_range() {
        return x.download_range(r.start, r.len());
    }
    to_contiguous(x, lx)?.download()
}

/// The elements of `x` converted to `to` (the CPU's casting rules).
pub fn convert(x: &CudaBuffer, lx: &Layout, to: DType) -> Result<CudaBuffer> {
    run_map(&source::convert_kernel(x.dtype(), to), &[(x, lx)], to, None)
}

/// Writes the logical elements of `src` into `dst` through layout `ld`
/// (same shape and dtype; `ld` must not overlap itself, `src` must not
/// alias `dst`).
pub fn write_strided(dst: &mut CudaBuffer, ld: &Layout, src: &CudaBuffer, ls: &Layout) -> Result<()> {
    if dst.dtype() != src.dtype() {
        return Err(CudaError::unsupported(format!("writing {} into {}", src.dtype(), dst.dtype())));
    }
    let dev = same_device(&[dst, src])?;
    let n = ld.numel();
    if n == 0 {
        return Ok(());
    }
    let params = iter_params(&ld.shape, [(&ld.strides[..], ld.offset), (&ls.strides[..], ls.offset)])?;
    let args = [Arg::Ptr(dst.device_ptr()), Arg::Ptr(src.device_ptr()), Arg::Iter(&params)];
    launch(&dev, &source::write_kernel(dst.dtype()), grid_1d(n), &args)
}

fn red_params(ks: &[usize], kt: &[isize], rs: &[usize], rt: &[isize], offset: usize) -> Result<RedParams> {
    let kept = Coalesced::new(ks, [(kt, 0)]);
    let red = Coalesced::new(rs, [(rt, 0)]);
    if kept.shape.len() > MAX_DIMS || red.shape.len() > MAX_DIMS {
        return Err(too_many_dims(kept.shape.len().max(red.shape.len())));
    }
    let mut p = RedParams {
        nout: ks.iter().product::<usize>() as i64,
        nred: rs.iter().product::<usize>() as i64,
        krank: kept.shape.len() as i32,
        rrank: red.shape.len() as i32,
        kshape: [0; MAX_DIMS],
        kstride: [0; MAX_DIMS],
        rshape: [0; MAX_DIMS],
        rstride: [0; MAX_DIMS],
        offset: offset as i64,
    };
    fill_dims(&mut p.kshape, kept.shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.kstride, kept.strides[0].iter().map(|&s| s as i64));
    fill_dims(&mut p.rshape, red.shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.rstride, red.strides[0].iter().map(|&s| s as i64));
    Ok(p)
}

/// One block per output element: 32 threads for short reductions, more for long ones.
fn grid_per_output(nout: usize, nred: usize) -> LaunchConfig {
    let threads = if nred <= 512 { 32 } else { BLOCK };
    LaunchConfig { grid_dim: (nout.clamp(1, 1 << 20) as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

/// Reduces `x` over `axes` with `f`; the result (dtype `out`) has the kept
/// axes, row-major.
pub fn reduce(f: &Fold, x: &CudaBuffer, lx: &Layout, axes: &[usize], out: DType) -> Result<CudaBuffer> {
    let dev = x.device().clone();
    let (ks, kt, rs, rt) = lx.split_axes(axes);
    let p = red_params(&ks, &kt, &rs, &rt, lx.offset)?;
    let y = CudaBuffer::alloc(&dev, out, p.nout as usize)?;
    if p.nout == 0 {
        return Ok(y);
    }
    let args = [Arg::Ptr(y.device_ptr()), Arg::Ptr(x.device_ptr()), Arg::Red(&p)];
    launch(&dev, &source::reduce_kernel(f, x.dtype(), out), grid_per_output(p.nout as usize, p.nred as usize), &args)?;
    Ok(y)
}

/// Index (dtype `index`) of the first extreme element along `axis` under
/// `r` (NaN counts as extreme); the result has `axis` removed.
pub fn arg_reduce(r: &Ranking, x: &CudaBuffer, lx: &Layout, axis: usize, index: DType) -> Result<CudaBuffer> {
    let dev = x.device().clone();
    let (ks, kt, _, _) = lx.split_axes(&[axis]);
    let mut p = red_params(&ks, &kt, &[], &[], lx.offset)?;
    p.nred = lx.shape[axis] as i64;
    p.rrank = 1;
    p.rshape[0] = lx.shape[axis] as i64;
    p.rstride[0] = lx.strides[axis] as i64;
    let y = CudaBuffer::alloc(&dev, index, p.nout as usize)?;
    if p.nout == 0 {
        return Ok(y);
    }
    let args = [Arg::Ptr(y.device_ptr()), Arg::Ptr(x.device_ptr()), Arg::Red(&p)];
    let kernel = source::arg_reduce_kernel(r, x.dtype(), index);
    launch(&dev, &kernel, grid_per_output(p.nout as usize, p.nred as usize), &args)?;
    Ok(y)
}

/// Running fold of `f` along `axis` (from the end when `reverse`), same
/// shape out, dtype `out`.
pub fn cumulative(f: &Fold, x: &CudaBuffer, lx: &Layout, axis: usize, reverse: bool, out: DType) -> Result<CudaBuffer> {
    let dev = x.device().clone();
    let n = lx.numel();
    let y = CudaBuffer::alloc(&dev, out, n)?;
    if n == 0 {
        return Ok(y);
    }
    let cs = lx.shape.contiguous_strides();
    let (mut oshape, mut xs, mut ys) = (Dims::new(), Strides::new(), Strides::new());
    for d in 0..lx.rank() {
        if d != axis {
            oshape.push(lx.shape[d]);
            xs.push(lx.strides[d]);
            ys.push(cs[d]);
        }
    }
    let params = iter_params(&oshape, [(&xs[..], lx.offset), (&ys[..], 0)])?;
    let lines = params.n as usize;
    let args = [
        Arg::Ptr(y.device_ptr()),
        Arg::Ptr(x.device_ptr()),
        Arg::Iter(&params),
        Arg::I64(lx.shape[axis] as i64),
        Arg::I64(lx.strides[axis] as i64),
        Arg::I64(cs[axis] as i64),
        Arg::I32(reverse as i32),
    ];
    launch(&dev, &source::cumulative_kernel(f, x.dtype(), out), grid_1d(lines), &args)?;
    Ok(y)
}

/// Pads `x` with the scalar `v` (element `lv.offset` of its buffer):
/// `low`/`high` at each end of each axis (negative crops), `interior`
/// between neighbours. Semantics of `crate::cpu::shape::pad`.
pub fn pad(
    x: &CudaBuffer,
    lx: &Layout,
    v: &CudaBuffer,
    lv: &Layout,
    low: &[i64],
    high: &[i64],
    interior: &[usize],
) -> Result<CudaBuffer> {
    let dev = same_device(&[x, v])?;
    let out_shape = crate::cpu::shape::pad_shape(&lx.shape, low, high, interior)
        .ok_or_else(|| CudaError::unsupported("pad to a negative size"))?;
    let rank = lx.rank();
    if rank > MAX_DIMS {
        return Err(too_many_dims(rank));
    }
    let n = out_shape.numel();
    let y = CudaBuffer::alloc(&dev, x.dtype(), n)?;
    if n == 0 {
        return Ok(y);
    }
    let mut p = PadParams {
        n: n as i64,
        rank: rank as i32,
        pad: 0,
        oshape: [0; MAX_DIMS],
        ishape: [0; MAX_DIMS],
        istride: [0; MAX_DIMS],
        low: [0; MAX_DIMS],
        step: [0; MAX_DIMS],
        ioffset: lx.offset as i64,
        voffset: lv.offset as i64,
    };
    fill_dims(&mut p.oshape, out_shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.ishape, lx.shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.istride, lx.strides.iter().map(|&s| s as i64));
    fill_dims(&mut p.low, low.iter().copied());
    fill_dims(&mut p.step, interior.iter().map(|&i| i as i64 + 1));
    let args = [Arg::Ptr(y.device_ptr()), Arg::Ptr(x.device_ptr()), Arg::Ptr(v.device_ptr()), Arg::Pad(&p)];
    launch(&dev, &source::pad_kernel(x.dtype()), grid_1d(n), &args)?;
    Ok(y)
}

/// Concatenates `parts` (same dtype and device) along `axis` into `out_shape`.
pub fn concatenate(parts: &[(&CudaBuffer, &Layout)], axis: usize, out_shape: &Shape) -> Result<CudaBuffer> {
    let bufs: Vec<&CudaBuffer> = parts.iter().map(|(b, _)| *b).collect();
    let dev = same_device(&bufs)?;
    let mut out = CudaBuffer::alloc(&dev, bufs[0].dtype(), out_shape.numel())?;
    let slots = Layout::concat_slots(out_shape, axis, parts.iter().map(|(_, lx)| lx.shape[axis]));
    for ((x, lx), dst) in parts.iter().zip(&slots) {
        if dst.numel() > 0 {
            write_strided(&mut out, dst, x, lx)?;
        }
    }
    Ok(out)
}

/// `out[i] = i[dim]` over `shape` as `dtype`, on device `ordinal`.
pub fn iota(ordinal: usize, shape: &Shape, dim: usize, dtype: DType) -> Result<CudaBuffer> {
    let dev = device(ordinal)?;
    let total = shape.numel();
    let y = CudaBuffer::alloc(&dev, dtype, total)?;
    if total == 0 {
        return Ok(y);
    }
    let inner: usize = shape[dim + 1..].iter().product();
    let args = [Arg::Ptr(y.device_ptr()), Arg::I64(total as i64), Arg::I64(shape[dim] as i64), Arg::I64(inner as i64)];
    launch(&dev, &source::iota_kernel(dtype), grid_1d(total), &args)?;
    Ok(y)
}

/// A contiguous copy of `x` with the block at `start` replaced by `u`.
pub fn dynamic_update_slice(
    x: &CudaBuffer,
    lx: &Layout,
    u: &CudaBuffer,
    lu: &Layout,
    start: &[usize],
) -> Result<CudaBuffer> {
    let mut out = to_contiguous(x, lx)?;
    let full = Layout::contiguous(lx.shape.clone());
    let limit: Vec<usize> = start.iter().zip(lu.shape.iter()).map(|(s, n)| s + n).collect();
    let dst = full.slice(start, &limit, &vec![1; full.rank()]);
    if dst.numel() > 0 {
        write_strided(&mut out, &dst, u, lu)?;
    }
    Ok(out)
}

/// The address of the logical element 0 of a contiguous operand, copying
/// it first if its layout is not contiguous (the copy is returned to keep
/// it alive).
fn contiguous_ptr(x: &CudaBuffer, lx: &Layout) -> Result<(Option<CudaBuffer>, u64)> {
    match lx.contiguous_range() {
        Some(r) => Ok((None, x.device_ptr() + (r.start * x.dtype().size_bytes()) as u64)),
        None => {
            let c = to_contiguous(x, lx)?;
            let p = c.device_ptr();
            Ok((Some(c), p))
        }
    }
}

/// Indices as a fresh contiguous i64 buffer, checked against `[-n, n)`:
/// the first bad one in row-major order is reported.
fn checked_indices(idx: &CudaBuffer, lidx: &Layout, n: usize, check: bool) -> Result<CudaBuffer> {
    let iv = convert(idx, lidx, DType::I64)?;
    let count = iv.len();
    if !check || count == 0 {
        return Ok(iv);
    }
    let dev = iv.device().clone();
    let bad = DeviceVec::<u64>::upload(&dev, &[u64::MAX])?;
    let args = [Arg::Ptr(iv.device_ptr()), Arg::I64(count as i64), Arg::I64(n as i64), Arg::Ptr(bad.ptr())];
    launch(&dev, &source::check_indices_kernel(), grid_1d(count), &args)?;
    let pos = bad.download_range(0, 1)?[0];
    if pos != u64::MAX {
        let index = iv.download_range(pos as usize, 1)?.as_slice::<i64>()[0];
        return Err(CudaError::IndexOutOfRange { index, size: n });
    }
    Ok(iv)
}

fn gather_params(e: GatherExtents) -> GatherParams {
    GatherParams {
        batch: e.batch as i64,
        pre: e.pre as i64,
        n: e.n as i64,
        post: e.post as i64,
        count: e.count as i64,
        total: (e.batch * e.pre * e.count * e.post) as i64,
    }
}

/// Gather with `tf.gather` semantics (see `crate::cpu::indexing`): `x`
/// viewed as `[B, PRE, N, POST]`, `idx` (any integer dtype) as `[B, I]`.
///
/// # Errors
/// [`CudaError::IndexOutOfRange`] for an index outside `[-N, N)`.
pub fn gather(x: &CudaBuffer, lx: &Layout, idx: &CudaBuffer, lidx: &Layout, e: GatherExtents) -> Result<CudaBuffer> {
    let dev = same_device(&[x, idx])?;
    // The CPU loop visits indices only when some (batch, pre) pair exists.
    let iv = checked_indices(idx, lidx, e.n, e.batch * e.pre > 0)?;
    let p = gather_params(e);
    let total = p.total as usize;
    let y = CudaBuffer::alloc(&dev, x.dtype(), total)?;
    if total == 0 {
        return Ok(y);
    }
    let (_keep, xp) = contiguous_ptr(x, lx)?;
    let args = [Arg::Ptr(y.device_ptr()), Arg::Ptr(xp), Arg::Ptr(iv.device_ptr()), Arg::Gather(&p)];
    launch(&dev, &source::gather_kernel(x.dtype()), grid_1d(total), &args)?;
    Ok(y)
}

/// Scatter-add of `u` (viewed as `[B, PRE, I, POST]`) into a copy of `x`
/// at `idx`, with atomics (f32, f64, i32, i64, u32; the caller widens the
/// half types).
///
/// # Errors
/// [`CudaError::IndexOutOfRange`] for an index outside `[-N, N)`.
pub fn scatter_add(
    x: &CudaBuffer,
    lx: &Layout,
    idx: &CudaBuffer,
    lidx: &Layout,
    u: &CudaBuffer,
    lu: &Layout,
    e: GatherExtents,
) -> Result<CudaBuffer> {
    let dev = same_device(&[x, idx, u])?;
    let kernel = source::scatter_add_kernel(x.dtype())
        .ok_or_else(|| CudaError::unsupported(format!("scatter_add of {} (widen to f32 first)", x.dtype())))?;
    let iv = checked_indices(idx, lidx, e.n, true)?;
    let out = to_contiguous(x, lx)?;
    let p = gather_params(e);
    let total = p.total as usize;
    if total == 0 {
        return Ok(out);
    }
    let (_keep, up) = contiguous_ptr(u, lu)?;
    let args = [Arg::Ptr(out.device_ptr()), Arg::Ptr(iv.device_ptr()), Arg::Ptr(up), Arg::Gather(&p)];
    launch(&dev, &kernel, grid_1d(total), &args)?;
    Ok(out)
}

/// How cuBLAS (column-major) sees the row-major matrix `M` (`rows x cols`,
/// element `(i, j)` at `i * rs + j * cs`) when it needs the operand `M^T`:
/// `Some((transposed, ld))`, or `None` if the strides fit neither form.
fn blas_operand(rows: usize, cols: usize, rs: isize, cs: isize) -> Option<(bool, i32)> {
    let fits = |ld: isize| ld >= 1 && ld <= i32::MAX as isize;
    // Rows contiguous: M^T is column-major cols x rows with ld = rs.
    if (cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols.max(1) as isize) {
        let ld = if rows <= 1 { cols.max(1) as isize } else { rs };
        if fits(ld) {
            return Some((false, ld as i32));
        }
    }
    // Columns contiguous: M is column-major rows x cols with ld = cs.
    if (rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows.max(1) as isize) {
        let ld = if cols <= 1 { rows.max(1) as isize } else { cs };
        if fits(ld) {
            return Some((true, ld as i32));
        }
    }
    None
}

/// Element offsets of a 3-d operand usable by cuBLAS (non-negative batch
/// stride), with its row and column strides.
fn blas_batch_stride(l: &Layout) -> Option<i64> {
    let s = if l.shape[0] <= 1 { 0 } else { l.strides[0] };
    (s >= 0).then_some(s as i64)
}

fn gemm_cublas(dev: &Arc<CudaDevice>, a: &CudaBuffer, la: &Layout, b: &CudaBuffer, lb: &Layout) -> Result<CudaBuffer> {
    let (batch, m, k, n) = (la.shape[0], la.shape[1], la.shape[2], lb.shape[2]);
    let mut c = CudaBuffer::alloc(dev, a.dtype(), batch * m * n)?;
    let (opa, lda) = blas_operand(m, k, la.strides[1], la.strides[2]).expect("checked by the caller");
    let (opb, ldb) = blas_operand(k, n, lb.strides[1], lb.strides[2]).expect("checked by the caller");
    let sa = blas_batch_stride(la).expect("checked by the caller");
    let sb = blas_batch_stride(lb).expect("checked by the caller");
    let op = |t: bool| {
        if t {
            cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let blas = dev.blas().expect("checked by the caller").lock().unwrap_or_else(|e| e.into_inner());
    // C^T (n x m, column-major) = op(B^T) (n x k) * op(A^T) (k x m).
    macro_rules! call {
        ($av:expr, $bv:expr, $cv:expr, $one:expr, $zero:expr) => {{
            let cfg = StridedBatchedConfig {
                gemm: GemmConfig {
                    transa: op(opb),
                    transb: op(opa),
                    m: n as i32,
                    n: m as i32,
                    k: k as i32,
                    alpha: $one,
                    lda: ldb,
                    ldb: lda,
                    beta: $zero,
                    ldc: n as i32,
                },
                batch_size: batch as i32,
                stride_a: sb,
                stride_b: sa,
                stride_c: (m * n) as i64,
            };
            let av = $av.slice.slice(la.offset..);
            let bv = $bv.slice.slice(lb.offset..);
            // SAFETY: the operand views start at each layout's element 0 and
            // `blas_operand` checked that the leading dimensions and the
            // (non-negative) strides describe exactly the elements of the
            // validated layouts; C is a fresh buffer of batch * m * n.
            unsafe { blas.gemm_strided_batched(cfg, &bv, &av, &mut $cv.slice) }
                .map_err(|e| CudaError::Blas { message: e.to_string() })?;
        }};
    }
    match (a, b, &mut c) {
        (CudaBuffer::F32(x), CudaBuffer::F32(y), CudaBuffer::F32(z)) => call!(x, y, z, 1.0f32, 0.0f32),
        (CudaBuffer::F64(x), CudaBuffer::F64(y), CudaBuffer::F64(z)) => call!(x, y, z, 1.0f64, 0.0f64),
        (CudaBuffer::F16(x), CudaBuffer::F16(y), CudaBuffer::F16(z)) => {
            call!(x, y, z, half::f16::ONE, half::f16::ZERO)
        }
        (CudaBuffer::BF16(x), CudaBuffer::BF16(y), CudaBuffer::BF16(z)) => {
            call!(x, y, z, half::bf16::ONE, half::bf16::ZERO)
        }
        _ => return Err(CudaError::unsupported(format!("cuBLAS GEMM of {}", a.dtype()))),
    }
    Ok(c)
}

fn gemm_kernel(dev: &Arc<CudaDevice>, a: &CudaBuffer, la: &Layout, b: &CudaBuffer, lb: &Layout) -> Result<CudaBuffer> {
    let (batch, m, k, n) = (la.shape[0], la.shape[1], la.shape[2], lb.shape[2]);
    let kernel = source::gemm_kernel(a.dtype())
        .ok_or_else(|| CudaError::unsupported(format!("matrix products of {}", a.dtype())))?;
    let c = CudaBuffer::alloc(dev, a.dtype(), batch * m * n)?;
    let p = GemmParams {
        batch: batch as i64,
        m: m as i64,
        n: n as i64,
        k: k as i64,
        as0: la.strides[0] as i64,
        as1: la.strides[1] as i64,
        as2: la.strides[2] as i64,
        bs0: lb.strides[0] as i64,
        bs1: lb.strides[1] as i64,
        bs2: lb.strides[2] as i64,
        aoff: la.offset as i64,
        boff: lb.offset as i64,
    };
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(16).max(1) as u32, m.div_ceil(16).clamp(1, 65535) as u32, batch.clamp(1, 65535) as u32),
        block_dim: (16, 16, 1),
        shared_mem_bytes: 0,
    };
    let args = [Arg::Ptr(c.device_ptr()), Arg::Ptr(a.device_ptr()), Arg::Ptr(b.device_ptr()), Arg::Gemm(&p)];
    launch(dev, &kernel, cfg, &args)?;
    Ok(c)
}

/// Batched matrix product `[B, M, K] x [B, K, N] -> [B, M, N]` (contiguous)
/// over strided 3-d operands: cuBLAS strided-batched GEMM for the float
/// types when libcublas is present (f16/bf16 through GemmEx with f32
/// compute), else a tiled kernel (always for integers, wrapping).
pub fn gemm(a: &CudaBuffer, la: &Layout, b: &CudaBuffer, lb: &Layout) -> Result<CudaBuffer> {
    let dev = same_device(&[a, b])?;
    if a.dtype() != b.dtype() {
        return Err(CudaError::unsupported(format!("matrix products of {} with {}", a.dtype(), b.dtype())));
    }
    if la.rank() != 3 || lb.rank() != 3 || la.shape[0] != lb.shape[0] || la.shape[2] != lb.shape[1] {
        return Err(CudaError::unsupported(format!("GEMM of shapes {} and {}", la.shape, lb.shape)));
    }
    let (batch, m, k, n) = (la.shape[0], la.shape[1], la.shape[2], lb.shape[2]);
    if batch * m * n == 0 {
        return CudaBuffer::alloc(&dev, a.dtype(), 0);
    }
    let fits = [batch, m, k, n].iter().all(|&d| d <= i32::MAX as usize) && m * n <= i32::MAX as usize;
    if a.dtype().is_float() && dev.blas().is_some() && k > 0 && fits {
        let usable = |l: &Layout, r: usize, c: usize| {
            blas_operand(r, c, l.strides[1], l.strides[2]).is_some() && blas_batch_stride(l).is_some()
        };
        let ca;
        let (a, la) = if usable(la, m, k) {
            (a, la.clone())
        } else {
            ca = to_contiguous(a, la)?;
            (&ca, Layout::contiguous(la.shape.clone()))
        };
        let cb;
        let (b, lb) = if usable(lb, k, n) {
            (b, lb.clone())
        } else {
            cb = to_contiguous(b, lb)?;
            (&cb, Layout::contiguous(lb.shape.clone()))
        };
        return gemm_cublas(&dev, a, &la, b, &lb);
    }
    gemm_kernel(&dev, a, la, b, lb)
}

/// Threefry-2x32 over four u32 operands of one shape (key0, key1, counter0,
/// counter1; any layouts): the two output words, contiguous.
pub fn threefry(ins: [(&CudaBuffer, &Layout); 4]) -> Result<(CudaBuffer, CudaBuffer)> {
    let bufs: Vec<&CudaBuffer> = ins.iter().map(|(b, _)| *b).collect();
    if let Some(b) = bufs.iter().find(|b| b.dtype() != DType::U32) {
        return Err(CudaError::unsupported(format!("threefry2x32 of {}", b.dtype())));
    }
    let dev = same_device(&bufs)?;
    let shape = &ins[0].1.shape;
    let n = shape.numel();
    let y0 = CudaBuffer::alloc(&dev, DType::U32, n)?;
    let y1 = CudaBuffer::alloc(&dev, DType::U32, n)?;
    if n == 0 {
        return Ok((y0, y1));
    }
    let lay = |k: usize| (&ins[k].1.strides[..], ins[k].1.offset);
    let params = iter_params(shape, [lay(0), lay(1), lay(2), lay(3)])?;
    let mut args = vec![Arg::Ptr(y0.device_ptr()), Arg::Ptr(y1.device_ptr())];
    args.extend(bufs.iter().map(|b| Arg::Ptr(b.device_ptr())));
    args.push(Arg::Iter(&params));
    launch(&dev, &source::threefry_kernel(), grid_1d(n), &args)?;
    Ok((y0, y1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blas_operand_forms() {
        // row-major 3 x 4
        assert_eq!(blas_operand(3, 4, 4, 1), Some((false, 4)));
        // its transpose view (4 x 3 with strides 1, 4)
        assert_eq!(blas_operand(4, 3, 1, 4), Some((true, 4)));
        // a column slice of a wider matrix
        assert_eq!(blas_operand(3, 2, 5, 1), Some((false, 5)));
        // reversed or broadcast inner strides need a copy
        assert_eq!(blas_operand(3, 4, 4, -1), None);
        assert_eq!(blas_operand(3, 4, 0, 1), None);
        // unit dims accept any stride
        assert_eq!(blas_operand(1, 4, 99, 1), Some((false, 4)));
        assert_eq!(blas_operand(3, 1, 7, 99), Some((false, 7)));
    }

    #[test]
    fn param_structs_match_the_generated_layouts() {
        use std::mem::size_of;
        assert_eq!(size_of::<IterParams>(), 16 + 8 * MAX_DIMS * (1 + MAX_OPERANDS) + 8 * MAX_OPERANDS);
        assert_eq!(size_of::<RedParams>(), 24 + 8 * 4 * MAX_DIMS + 8);
        assert_eq!(size_of::<PadParams>(), 16 + 8 * 5 * MAX_DIMS + 16);
        assert_eq!(size_of::<GemmParams>(), 8 * 12);
        assert_eq!(size_of::<window::WinParams>(), 32 + 8 * 9 * MAX_DIMS + 16);
    }
}
