//! Launching the generated kernels: every function takes device buffers with
//! any strided layouts and returns fresh contiguous row-major results, like
//! the CPU kernels in `crate::cpu` (the convolution, in `conv.rs`, takes
//! contiguous canonical operands instead).
//!
//! What each operation launches is its [`Plan`] from `crate::cuda_launch`
//! (built from dtypes and layouts, without the feature, and run by the host
//! emulation of `crate::cuda_host` too); [`run`] executes a plan on the
//! device (the direct convolution kernel's too, from `conv.rs`). Only the
//! cuBLAS path of [`gemm`] (in `cublas.rs`) and cuDNN's convolution are
//! launches of their own.

use super::buffer::{CudaBuffer, DeviceVec};
use super::device::{device, CudaDevice};
use super::error::{CudaError, Result};
use super::source::{Fold, Kernel, MapOp, Ranking};
use crate::cpu::indexing::GatherExtents;
use crate::cpu::window::WindowGeom;
use crate::cuda_launch::{
    self as plans, Arg, Buf, GatherParams, GemmParams, Launch, PadParams, Plan, RedParams, Step, Temp, WinParams,
};
use crate::dtype::DType;
use crate::layout::{Layout, Shape};
use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use std::sync::Arc;

pub use super::conv::{check_geometry, conv_forward, conv_forward_layouts, conv_forward_with, cudnn_enabled, ConvPath};
mod cublas;

// SAFETY (each of these): a plain `#[repr(C)]` struct of integers whose
// layout matches its struct in the generated source (`XfIter` and
// `XfFused`, `XfRed`, `XfPad`, `XfGather`, `XfGemm`, `XfWin`); it is
// passed by value.
unsafe impl<const N: usize> DeviceRepr for plans::IterParamsOf<N> {}
// SAFETY: see above.
unsafe impl DeviceRepr for RedParams {}
// SAFETY: see above.
unsafe impl DeviceRepr for PadParams {}
// SAFETY: see above.
unsafe impl DeviceRepr for GatherParams {}
// SAFETY: see above.
unsafe impl DeviceRepr for GemmParams {}
// SAFETY: see above.
unsafe impl DeviceRepr for WinParams {}

/// A temporary of a running plan.
enum DeviceTemp {
    Array(CudaBuffer),
    Flag(DeviceVec<u64>),
}

/// The device address of a plan's pointer argument.
fn address(p: plans::Ptr, inputs: &[&CudaBuffer], temps: &[DeviceTemp], dest: Option<&CudaBuffer>) -> Result<u64> {
    let missing = || CudaError::unsupported(format!("a plan reads {:?}, which it was not given", p.buf));
    let (base, size) = match p.buf {
        Buf::Input(k) => inputs.get(k).map(|b| (b.device_ptr(), b.dtype().size_bytes())).ok_or_else(missing)?,
        Buf::Dest => dest.map(|b| (b.device_ptr(), b.dtype().size_bytes())).ok_or_else(missing)?,
        Buf::Temp(t) => match temps.get(t) {
            Some(DeviceTemp::Array(b)) => (b.device_ptr(), b.dtype().size_bytes()),
            Some(DeviceTemp::Flag(f)) => (f.ptr(), 8),
            None => return Err(missing()),
        },
    };
    Ok(base + (p.offset * size) as u64)
}

/// Launches one step of a plan (compiling its kernel at first use) on
/// `dev`'s stream.
fn launch(dev: &CudaDevice, l: &Launch, ptrs: &[u64]) -> Result<()> {
    let f = dev.function(&l.kernel)?;
    let stream = dev.stream();
    let mut b = stream.launch_builder(&f);
    let mut next_ptr = ptrs.iter();
    for a in &l.args {
        match a {
            Arg::Ptr(_) => b.arg(next_ptr.next().expect("one address per pointer")),
            Arg::I64(v) => b.arg(v),
            Arg::I32(v) => b.arg(v),
            Arg::Iter(p) => b.arg(&**p),
            Arg::Red(p) => b.arg(&**p),
            Arg::Pad(p) => b.arg(&**p),
            Arg::Gather(p) => b.arg(&**p),
            Arg::Gemm(p) => b.arg(&**p),
            Arg::Win(p) => b.arg(&**p),
            Arg::Fused(p) => b.arg(&**p),
            Arg::Conv(p) => b.arg(&**p),
        };
    }
    let cfg = LaunchConfig {
        grid_dim: (l.grid[0], l.grid[1], l.grid[2]),
        block_dim: (l.block[0], l.block[1], l.block[2]),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match the generated signature of the kernel in
    // number, order and type (its plan builds them next to the generator
    // it uses; the host emulation runs the same plans); every pointer is
    // an address inside a live allocation of the right dtype, and the
    // index parameters keep every access inside the layouts of the
    // operands, which the callers' arrays validated.
    unsafe { b.launch(cfg) }.map(|_| ()).map_err(|e| CudaError::driver(&format!("launching {}", l.kernel.name), e))
}

/// Runs `plan` on `dev` over `inputs` (the plan's `Input(k)`) and, for an
/// in-place plan, `dest`: allocates its temporaries, runs its steps in
/// order, and returns its results.
///
/// # Errors
/// Out of memory, a launch failure, or an index the plan's check finds out
/// of range ([`CudaError::IndexOutOfRange`]).
pub fn run(
    dev: &Arc<CudaDevice>,
    plan: &Plan,
    inputs: &[&CudaBuffer],
    dest: Option<&mut CudaBuffer>,
) -> Result<Vec<CudaBuffer>> {
    let mut temps = Vec::with_capacity(plan.temps.len());
    for t in &plan.temps {
        temps.push(match *t {
            Temp::Array { dtype, len } => DeviceTemp::Array(CudaBuffer::alloc(dev, dtype, len)?),
            Temp::Flag => DeviceTemp::Flag(DeviceVec::<u64>::upload(dev, &[u64::MAX])?),
        });
    }
    let dest = dest.map(|d| &*d);
    for step in &plan.steps {
        match step {
            Step::Launch(l) => {
                let ptrs = l
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        Arg::Ptr(p) => Some(address(*p, inputs, &temps, dest)),
                        _ => None,
                    })
                    .collect::<Result<Vec<u64>>>()?;
                launch(dev, l, &ptrs)?;
            }
            Step::CheckIndices { flag, indices, size } => {
                let Some(DeviceTemp::Flag(f)) = temps.get(*flag) else {
                    return Err(CudaError::unsupported("an index check without its flag"));
                };
                let pos = f.download_range(0, 1)?[0];
                if pos != u64::MAX {
                    let iv = match indices {
                        Buf::Temp(t) => match temps.get(*t) {
                            Some(DeviceTemp::Array(b)) => b,
                            _ => return Err(CudaError::unsupported("an index check of no indices")),
                        },
                        Buf::Input(k) => match inputs.get(*k) {
                            Some(b) => b,
                            None => return Err(CudaError::unsupported("an index check of an input it was not given")),
                        },
                        Buf::Dest => return Err(CudaError::unsupported("an index check of the destination")),
                    };
                    let index = iv.download_range(pos as usize, 1)?.as_slice::<i64>()[0];
                    return Err(CudaError::IndexOutOfRange { index, size: *size });
                }
            }
        }
    }
    let mut slots: Vec<Option<DeviceTemp>> = temps.into_iter().map(Some).collect();
    plan.outputs
        .iter()
        .map(|&t| match slots.get_mut(t).and_then(Option::take) {
            Some(DeviceTemp::Array(b)) => Ok(b),
            _ => Err(CudaError::unsupported("a plan result that is not an array temporary")),
        })
        .collect()
}

/// Runs a plan with one result.
fn run1(dev: &Arc<CudaDevice>, plan: &Plan, inputs: &[&CudaBuffer]) -> Result<CudaBuffer> {
    let mut out = run(dev, plan, inputs, None)?;
    debug_assert_eq!(out.len(), 1);
    Ok(out.swap_remove(0))
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

/// The buffers and `(dtype, layout)` pairs of operands.
fn split<'a>(ins: &[(&'a CudaBuffer, &'a Layout)]) -> (Vec<&'a CudaBuffer>, Vec<(DType, &'a Layout)>) {
    ins.iter().map(|&(b, l)| (b, (b.dtype(), l))).unzip()
}

/// `out[i] = op(x[i], y[i], ...)` over 1 to 3 operands of one shape (any
/// layouts), result dtype `out`, contiguous.
pub fn map(op: &MapOp, ins: &[(&CudaBuffer, &Layout)], out: DType) -> Result<CudaBuffer> {
    let (bufs, ops) = split(ins);
    let dev = same_device(&bufs)?;
    run1(&dev, &plans::map(op, &ops, out)?, &bufs)
}

/// A contiguous copy of the logical elements of `x`.
pub fn to_contiguous(x: &CudaBuffer, lx: &Layout) -> Result<CudaBuffer> {
    run1(x.device(), &plans::copy(x.dtype(), lx)?, &[x])
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
    run1(x.device(), &plans::convert(x.dtype(), lx, to)?, &[x])
}

/// Writes the logical elements of `src` into `dst` through layout `ld`
/// (same shape and dtype; `ld` must not overlap itself, `src` must not
/// alias `dst`).
pub fn write_strided(dst: &mut CudaBuffer, ld: &Layout, src: &CudaBuffer, ls: &Layout) -> Result<()> {
    if dst.dtype() != src.dtype() {
        return Err(CudaError::unsupported(format!("writing {} into {}", src.dtype(), dst.dtype())));
    }
    let dev = same_device(&[dst, src])?;
    let plan = plans::write(dst.dtype(), ld, ls)?;
    run(&dev, &plan, &[src], Some(dst)).map(|_| ())
}

/// Reduces `x` over `axes` with `f`; the result (dtype `out`) has the kept
/// axes, row-major.
pub fn reduce(f: &Fold, x: &CudaBuffer, lx: &Layout, axes: &[usize], out: DType) -> Result<CudaBuffer> {
    run1(x.device(), &plans::reduce(f, x.dtype(), lx, axes, out)?, &[x])
}

/// Index (dtype `index`) of the first extreme element along `axis` under
/// `r` (NaN counts as extreme); the result has `axis` removed.
pub fn arg_reduce(r: &Ranking, x: &CudaBuffer, lx: &Layout, axis: usize, index: DType) -> Result<CudaBuffer> {
    run1(x.device(), &plans::arg_reduce(r, x.dtype(), lx, axis, index)?, &[x])
}

/// Running fold of `f` along `axis` (from the end when `reverse`), same
/// shape out, dtype `out`.
pub fn cumulative(f: &Fold, x: &CudaBuffer, lx: &Layout, axis: usize, reverse: bool, out: DType) -> Result<CudaBuffer> {
    run1(x.device(), &plans::cumulative(f, x.dtype(), lx, axis, reverse, out)?, &[x])
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
    if v.dtype() != x.dtype() {
        return Err(CudaError::unsupported(format!("padding {} with {}", x.dtype(), v.dtype())));
    }
    run1(&dev, &plans::pad(x.dtype(), lx, lv, low, high, interior)?, &[x, v])
}

/// Concatenates `parts` (same dtype and device) along `axis` into `out_shape`.
pub fn concatenate(parts: &[(&CudaBuffer, &Layout)], axis: usize, out_shape: &Shape) -> Result<CudaBuffer> {
    let (bufs, ops) = split(parts);
    let dev = same_device(&bufs)?;
    run1(&dev, &plans::concatenate(&ops, axis, out_shape)?, &bufs)
}

/// `out[i] = i[dim]` over `shape` as `dtype`, on device `ordinal`.
pub fn iota(ordinal: usize, shape: &Shape, dim: usize, dtype: DType) -> Result<CudaBuffer> {
    run1(&device(ordinal)?, &plans::iota(shape, dim, dtype)?, &[])
}

/// A contiguous copy of `x` with the block at `start` replaced by `u`.
pub fn dynamic_update_slice(
    x: &CudaBuffer,
    lx: &Layout,
    u: &CudaBuffer,
    lu: &Layout,
    start: &[usize],
) -> Result<CudaBuffer> {
    let dev = same_device(&[x, u])?;
    if u.dtype() != x.dtype() {
        return Err(CudaError::unsupported(format!("writing {} into {}", u.dtype(), x.dtype())));
    }
    run1(&dev, &plans::dynamic_update_slice(x.dtype(), lx, lu, start)?, &[x, u])
}

/// Gather with `tf.gather` semantics (see `crate::cpu::indexing`): `x`
/// viewed as `[B, PRE, N, POST]`, `idx` (any integer dtype) as `[B, I]`.
///
/// # Errors
/// [`CudaError::IndexOutOfRange`] for an index outside `[-N, N)`.
pub fn gather(x: &CudaBuffer, lx: &Layout, idx: &CudaBuffer, lidx: &Layout, e: GatherExtents) -> Result<CudaBuffer> {
    let dev = same_device(&[x, idx])?;
    run1(&dev, &plans::gather(x.dtype(), lx, idx.dtype(), lidx, e)?, &[x, idx])
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
    if u.dtype() != x.dtype() {
        return Err(CudaError::unsupported(format!("scatter_add of {} into {}", u.dtype(), x.dtype())));
    }
    run1(&dev, &plans::scatter_add(x.dtype(), lx, idx.dtype(), lidx, lu, e)?, &[x, idx, u])
}

/// Batched matrix product `[B, M, K] x [B, K, N] -> [B, M, N]` (contiguous)
/// over strided 3-d operands: cuBLAS strided-batched GEMM for the float
/// types when libcublas is present (f16/bf16 through GemmEx with f32
/// compute), else a tiled kernel (always for integers, wrapping).
pub fn gemm(a: &CudaBuffer, la: &Layout, b: &CudaBuffer, lb: &Layout) -> Result<CudaBuffer> {
    let dev = same_device(&[a, b])?;
    // cuBLAS is decided first, so its products build no kernel plan
    let [batch, m, k, n] = plans::gemm_dims(a.dtype(), la, b.dtype(), lb)?;
    let fits = [batch, m, k, n].iter().all(|&d| d <= i32::MAX as usize) && m * n <= i32::MAX as usize;
    if batch * m * n > 0 && a.dtype().is_float() && dev.blas().is_some() && k > 0 && fits {
        let usable = |l: &Layout, r: usize, c: usize| {
            cublas::blas_operand(r, c, l.strides[1], l.strides[2]).is_some() && cublas::blas_batch_stride(l).is_some()
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
        return cublas::gemm_cublas(&dev, a, &la, b, &lb);
    }
    run1(&dev, &plans::gemm(a.dtype(), la, b.dtype(), lb)?, &[a, b])
}

/// Threefry-2x32 over four u32 operands of one shape (key0, key1, counter0,
/// counter1; any layouts): the two output words, contiguous.
pub fn threefry(ins: [(&CudaBuffer, &Layout); 4]) -> Result<(CudaBuffer, CudaBuffer)> {
    let bufs: Vec<&CudaBuffer> = ins.iter().map(|(b, _)| *b).collect();
    if let Some(b) = bufs.iter().find(|b| b.dtype() != DType::U32) {
        return Err(CudaError::unsupported(format!("threefry2x32 of {}", b.dtype())));
    }
    let dev = same_device(&bufs)?;
    let plan = plans::threefry(ins.map(|(_, l)| l))?;
    let mut out = run(&dev, &plan, &bufs, None)?.into_iter();
    let (Some(y0), Some(y1)) = (out.next(), out.next()) else { unreachable!("threefry has two results") };
    Ok((y0, y1))
}

/// Runs the fused kernel `kernel`, generated for inputs of dtypes `in_dtypes`
/// writing outputs of dtypes `outs`, over operands of logical shape `shape`
/// (any layouts); returns the outputs, contiguous.
///
/// # Errors
/// Operands that do not match the kernel (count, dtype, shape), operands on
/// different devices, a merged rank over `MAX_DIMS`, out of memory, or a
/// launch failure.
pub fn fused(
    kernel: &Kernel,
    in_dtypes: &[DType],
    ins: &[(&CudaBuffer, &Layout)],
    shape: &[usize],
    outs: &[DType],
) -> Result<Vec<CudaBuffer>> {
    if ins.is_empty() {
        return Err(CudaError::unsupported(format!("operands that {} was not generated for", kernel.name)));
    }
    let (bufs, ops) = split(ins);
    let dev = same_device(&bufs)?;
    run(&dev, &plans::fused(kernel, in_dtypes, &ops, shape, outs)?, &bufs, None)
}

/// `reduce_window` of `x` with fold `f` (semantics of
/// `crate::cpu::window::reduce_window`), contiguous, x's dtype.
pub fn reduce_window(f: &Fold, x: &CudaBuffer, lx: &Layout, g: &WindowGeom) -> Result<CudaBuffer> {
    run1(x.device(), &plans::reduce_window(f, x.dtype(), lx, g)?, &[x])
}

/// Select-and-gather: per window of `x`, the element of `t` (shaped like
/// `x`) at the first maximum (`max`) or minimum, or 0 (semantics of
/// `crate::cpu::window::select_and_gather`).
pub fn select_and_gather(
    max: bool,
    t: &CudaBuffer,
    lt: &Layout,
    x: &CudaBuffer,
    lx: &Layout,
    g: &WindowGeom,
) -> Result<CudaBuffer> {
    let dev = same_device(&[t, x])?;
    if t.dtype() != x.dtype() {
        return Err(CudaError::unsupported(format!("select_and_gather_add of {} by {}", t.dtype(), x.dtype())));
    }
    run1(&dev, &plans::select_and_gather(max, x.dtype(), lt, lx, g)?, &[t, x])
}

/// Select-and-scatter-add: zeros shaped like `x` plus each element of `ct`
/// (shaped like the windows) at its window's first maximum (`max`) or
/// minimum (semantics of `crate::cpu::window::select_and_scatter`): a
/// selection kernel, then one thread per element of `x` summing the windows
/// that selected it (no atomics).
pub fn select_and_scatter(
    max: bool,
    ct: &CudaBuffer,
    lct: &Layout,
    x: &CudaBuffer,
    lx: &Layout,
    g: &WindowGeom,
) -> Result<CudaBuffer> {
    let dev = same_device(&[ct, x])?;
    if ct.dtype() != x.dtype() {
        return Err(CudaError::unsupported(format!("select_and_scatter_add of {} by {}", ct.dtype(), x.dtype())));
    }
    run1(&dev, &plans::select_and_scatter(max, x.dtype(), lct, lx, g)?, &[ct, x])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FusedParams` is the `XfFused` image (`DeviceRepr` by the generic
    /// impl above).
    #[test]
    fn fused_params_are_device_repr() {
        fn is_repr<T: DeviceRepr>() {}
        is_repr::<plans::FusedParams>();
        is_repr::<plans::IterParams>();
    }
}
