//! Launching the windowed kernels (`reduce_window`, select-and-gather,
//! select-and-scatter-add): semantics of `crate::cpu::window`.

use super::source::{self, Fold, MAX_DIMS};
use super::{fill_dims, grid_1d, launch, same_device, too_many_dims, Arg};
use crate::cpu::window::WindowGeom;
use crate::cuda::buffer::CudaBuffer;
use crate::cuda::error::{CudaError, Result};
use crate::dtype::DType;
use crate::layout::Layout;
use cudarc::driver::DeviceRepr;

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct WinParams {
    nout: i64,
    nin: i64,
    taps: i64,
    rank: i32,
    pad: i32,
    oshape: [i64; MAX_DIMS],
    ishape: [i64; MAX_DIMS],
    window: [i64; MAX_DIMS],
    stride: [i64; MAX_DIMS],
    lo: [i64; MAX_DIMS],
    bdil: [i64; MAX_DIMS],
    wdil: [i64; MAX_DIMS],
    xstride: [i64; MAX_DIMS],
    ystride: [i64; MAX_DIMS],
    xoffset: i64,
    yoffset: i64,
}
// SAFETY: plain `#[repr(C)]` integers matching `XfWin`.
unsafe impl DeviceRepr for WinParams {}

/// The window kernels' parameters: geometry `g` over x (layout `lx`) and a
/// second array `ly` (shaped like x or like the windows; x's layout when
/// there is none).
fn win_params(g: &WindowGeom, lx: &Layout, ly: &Layout) -> Result<WinParams> {
    let rank = g.rank();
    if rank > MAX_DIMS {
        return Err(too_many_dims(rank));
    }
    let out = g.output_shape().ok_or_else(|| CudaError::unsupported("a window stride of 0"))?;
    let mut p = WinParams {
        nout: out.numel() as i64,
        nin: g.input.iter().product::<usize>() as i64,
        taps: g.window.iter().product::<usize>() as i64,
        rank: rank as i32,
        pad: 0,
        oshape: [0; MAX_DIMS],
        ishape: [0; MAX_DIMS],
        window: [0; MAX_DIMS],
        stride: [0; MAX_DIMS],
        lo: [0; MAX_DIMS],
        bdil: [0; MAX_DIMS],
        wdil: [0; MAX_DIMS],
        xstride: [0; MAX_DIMS],
        ystride: [0; MAX_DIMS],
        xoffset: lx.offset as i64,
        yoffset: ly.offset as i64,
    };
    let long = |v: &[usize]| v.iter().map(|&n| n as i64).collect::<Vec<i64>>();
    fill_dims(&mut p.oshape, long(&out));
    fill_dims(&mut p.ishape, long(&g.input));
    fill_dims(&mut p.window, long(&g.window));
    fill_dims(&mut p.stride, long(&g.strides));
    fill_dims(&mut p.lo, g.pad_lo.iter().copied());
    fill_dims(&mut p.bdil, long(&g.base_dilation));
    fill_dims(&mut p.wdil, long(&g.window_dilation));
    fill_dims(&mut p.xstride, lx.strides.iter().map(|&s| s as i64));
    fill_dims(&mut p.ystride, ly.strides.iter().map(|&s| s as i64));
    Ok(p)
}

/// `reduce_window` of `x` with fold `f` (semantics of
/// `crate::cpu::window::reduce_window`), contiguous, x's dtype.
pub fn reduce_window(f: &Fold, x: &CudaBuffer, lx: &Layout, g: &WindowGeom) -> Result<CudaBuffer> {
    let dev = x.device().clone();
    let p = win_params(g, lx, lx)?;
    let y = CudaBuffer::alloc(&dev, x.dtype(), p.nout as usize)?;
    if p.nout == 0 {
        return Ok(y);
    }
    let args = [Arg::Ptr(y.device_ptr()), Arg::Ptr(x.device_ptr()), Arg::Win(&p)];
    launch(&dev, &source::reduce_window_kernel(f, x.dtype()), grid_1d(p.nout as usize), &args)?;
    Ok(y)
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
    let kernel = source::select_gather_kernel(max, x.dtype())
        .ok_or_else(|| CudaError::unsupported(format!("select_and_gather_add of {}", x.dtype())))?;
    let p = win_params(g, lx, lt)?;
    let y = CudaBuffer::alloc(&dev, x.dtype(), p.nout as usize)?;
    if p.nout == 0 {
        return Ok(y);
    }
    let args = [Arg::Ptr(y.device_ptr()), Arg::Ptr(x.device_ptr()), Arg::Ptr(t.device_ptr()), Arg::Win(&p)];
    launch(&dev, &kernel, grid_1d(p.nout as usize), &args)?;
    Ok(y)
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
    let unsupported = || CudaError::unsupported(format!("select_and_scatter_add of {}", x.dtype()));
    let select = source::window_select_kernel(max, x.dtype()).ok_or_else(unsupported)?;
    let scatter = source::window_scatter_kernel(x.dtype()).ok_or_else(unsupported)?;
    let p = win_params(g, lx, lct)?;
    let out = CudaBuffer::alloc(&dev, x.dtype(), p.nin as usize)?;
    if p.nin == 0 {
        return Ok(out);
    }
    let sel = CudaBuffer::alloc(&dev, DType::I64, (p.nout as usize).max(1))?;
    if p.nout > 0 {
        let args = [Arg::Ptr(sel.device_ptr()), Arg::Ptr(x.device_ptr()), Arg::Win(&p)];
        launch(&dev, &select, grid_1d(p.nout as usize), &args)?;
    }
    let args = [Arg::Ptr(out.device_ptr()), Arg::Ptr(sel.device_ptr()), Arg::Ptr(ct.device_ptr()), Arg::Win(&p)];
    launch(&dev, &scatter, grid_1d(p.nin as usize), &args)?;
    Ok(out)
}
