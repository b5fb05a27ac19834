//! The windowed launches (`reduce_window`, select-and-gather,
//! select-and-scatter-add): semantics of `crate::cpu::window`.

use super::params::{fill_dims, too_many_dims};
use super::{unsupported, Arg, Buf, Plan, Ptr, Result};
use crate::cpu::window::WindowGeom;
use crate::cuda_source::{self as source, Fold, MAX_DIMS};
use crate::dtype::DType;
use crate::layout::Layout;

/// `XfWin`: the window geometry over the operand x and the layouts of x
/// and of a second array y (see `cuda_source::window`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WinParams {
    /// Windows (output elements).
    pub nout: i64,
    /// Operand elements.
    pub nin: i64,
    /// Taps per window.
    pub taps: i64,
    /// Axes.
    pub rank: i32,
    /// Padding (0).
    pub pad: i32,
    /// Output shape.
    pub oshape: [i64; MAX_DIMS],
    /// Operand shape.
    pub ishape: [i64; MAX_DIMS],
    /// Window taps per axis.
    pub window: [i64; MAX_DIMS],
    /// Window strides.
    pub stride: [i64; MAX_DIMS],
    /// Low padding of the dilated operand.
    pub lo: [i64; MAX_DIMS],
    /// Operand (base) dilation.
    pub bdil: [i64; MAX_DIMS],
    /// Window dilation.
    pub wdil: [i64; MAX_DIMS],
    /// x's strides.
    pub xstride: [i64; MAX_DIMS],
    /// y's strides.
    pub ystride: [i64; MAX_DIMS],
    /// x's offset.
    pub xoffset: i64,
    /// y's offset.
    pub yoffset: i64,
}

/// The window kernels' parameters: geometry `g` over x (layout `lx`) and a
/// second array `ly` (shaped like x or like the windows; x's layout when
/// there is none).
fn win_params(g: &WindowGeom, lx: &Layout, ly: &Layout) -> Result<WinParams> {
    let rank = g.rank();
    if rank > MAX_DIMS {
        return Err(too_many_dims(rank));
    }
    let out = g.output_shape().ok_or_else(|| unsupported("a window stride of 0"))?;
    if lx.shape[..] != g.input[..] || ly.rank() != rank {
        return Err(unsupported(format!("windows of {:?} over {} and {}", g.input, lx.shape, ly.shape)));
    }
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

/// `reduce_window` of the `d` operand `Input(0)` (layout `lx`) with fold
/// `f` (semantics of `crate::cpu::window::reduce_window`), contiguous.
pub fn reduce_window(f: &Fold, d: DType, lx: &Layout, g: &WindowGeom) -> Result<Plan> {
    let p = win_params(g, lx, lx)?;
    let mut plan = Plan::default();
    let y = plan.temp(d, p.nout as usize);
    if p.nout > 0 {
        let args = vec![Arg::Ptr(Ptr::at(Buf::Temp(y))), Arg::Ptr(Ptr::at(Buf::Input(0))), Arg::Win(Box::new(p))];
        plan.launch_1d(source::reduce_window_kernel(f, d), p.nout as usize, args);
    }
    Ok(plan.with_output(y))
}

/// Select-and-gather: per window of x (`Input(1)`, layout `lx`), the
/// element of t (`Input(0)`, shaped like x, layout `lt`) at the first
/// maximum (`max`) or minimum, or 0 (semantics of
/// `crate::cpu::window::select_and_gather`); float dtypes `d`.
pub fn select_and_gather(max: bool, d: DType, lt: &Layout, lx: &Layout, g: &WindowGeom) -> Result<Plan> {
    let kernel =
        source::select_gather_kernel(max, d).ok_or_else(|| unsupported(format!("select_and_gather_add of {d}")))?;
    let p = win_params(g, lx, lt)?;
    let mut plan = Plan::default();
    let y = plan.temp(d, p.nout as usize);
    if p.nout > 0 {
        let args = vec![
            Arg::Ptr(Ptr::at(Buf::Temp(y))),
            Arg::Ptr(Ptr::at(Buf::Input(1))),
            Arg::Ptr(Ptr::at(Buf::Input(0))),
            Arg::Win(Box::new(p)),
        ];
        plan.launch_1d(kernel, p.nout as usize, args);
    }
    Ok(plan.with_output(y))
}

/// Select-and-scatter-add: zeros shaped like x (`Input(1)`, layout `lx`)
/// plus each element of ct (`Input(0)`, shaped like the windows, layout
/// `lct`) at its window's first maximum (`max`) or minimum (semantics of
/// `crate::cpu::window::select_and_scatter`): a selection kernel, then
/// one thread per element of x summing the windows that selected it (no
/// atomics); float dtypes `d`.
pub fn select_and_scatter(max: bool, d: DType, lct: &Layout, lx: &Layout, g: &WindowGeom) -> Result<Plan> {
    let unsupported_dtype = || unsupported(format!("select_and_scatter_add of {d}"));
    let select = source::window_select_kernel(max, d).ok_or_else(unsupported_dtype)?;
    let scatter = source::window_scatter_kernel(d).ok_or_else(unsupported_dtype)?;
    let p = win_params(g, lx, lct)?;
    let mut plan = Plan::default();
    let out = plan.temp(d, p.nin as usize);
    if p.nin == 0 {
        return Ok(plan.with_output(out));
    }
    let sel = plan.temp(DType::I64, (p.nout as usize).max(1));
    if p.nout > 0 {
        let args = vec![Arg::Ptr(Ptr::at(Buf::Temp(sel))), Arg::Ptr(Ptr::at(Buf::Input(1))), Arg::Win(Box::new(p))];
        plan.launch_1d(select, p.nout as usize, args);
    }
    let args = vec![
        Arg::Ptr(Ptr::at(Buf::Temp(out))),
        Arg::Ptr(Ptr::at(Buf::Temp(sel))),
        Arg::Ptr(Ptr::at(Buf::Input(0))),
        Arg::Win(Box::new(p)),
    ];
    plan.launch_1d(scatter, p.nin as usize, args);
    Ok(plan.with_output(out))
}
