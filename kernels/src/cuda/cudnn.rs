//! cuDNN (libcudnn.so.9, loaded at run time through cudarc) for the
//! forward convolution.
//!
//! Loading: cudarc panics when a library or one of its symbols is missing,
//! so [`available`] first probes the library by name, then checks its
//! version (9.x, the API cudarc's bindings describe) and that every symbol
//! in [`SYMBOLS`] resolves; only then does anything call into it. Without
//! it every entry point here is an error value and the caller runs the
//! generated kernel.
//!
//! Coverage (`plan`): any geometry, by rewriting it into what cuDNN's
//! convolution takes (symmetric non-negative padding, no lhs dilation, no
//! batch groups). Asymmetric or negative padding and lhs dilation become an
//! explicit pad of the lhs first (the pad kernel: low/high crop or pad,
//! interior holes for the dilation); batch groups become feature groups on
//! the lhs with its batch groups moved next to its features (`[bg, N/bg, C,
//! ...] -> [N/bg, bg*C, ...]`, a strided copy), which is exactly the
//! grouped convolution XLA's batch grouping means. One- and two-dimensional
//! convolutions use 4-d descriptors, three-dimensional ones 5-d. f32 runs
//! in FMA math (no TF32, so results match the CPU to f32 rounding), f64 in
//! double, f16/bf16 with float accumulation and tensor cores allowed.
//!
//! The algorithm is cuDNN's heuristic order (cudnnGetConvolutionForwardAlgorithm_v7)
//! restricted to those that sum the products directly (GEMM-based and
//! DIRECT; no FFT or Winograd, whose error is not bounded by each output's
//! terms): the first candidate whose status is success, whose workspace can
//! be allocated and that runs is used, and remembered per device, geometry
//! and dtype (a declined case too, so the fallback does not ask again).

use super::buffer::CudaBuffer;
use super::device::CudaDevice;
use super::error::{CudaError, Result};
use super::exec;
use crate::conv_geom::{dilated, ConvGeometry, SPATIAL};
use crate::dtype::CpuBuffer;
use crate::dtype::DType;
use crate::layout::{Layout, Shape};
use cudarc::cudnn::sys;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, OnceLock};

/// Every cuDNN entry point this module calls (checked to resolve before any
/// is called).
pub const SYMBOLS: &[&str] = &[
    "cudnnGetVersion",
    "cudnnCreate",
    "cudnnSetStream",
    "cudnnCreateTensorDescriptor",
    "cudnnSetTensorNdDescriptor",
    "cudnnDestroyTensorDescriptor",
    "cudnnCreateFilterDescriptor",
    "cudnnSetFilterNdDescriptor",
    "cudnnDestroyFilterDescriptor",
    "cudnnCreateConvolutionDescriptor",
    "cudnnSetConvolutionNdDescriptor",
    "cudnnSetConvolutionMathType",
    "cudnnSetConvolutionGroupCount",
    "cudnnDestroyConvolutionDescriptor",
    "cudnnGetConvolutionForwardAlgorithm_v7",
    "cudnnGetConvolutionForwardWorkspaceSize",
    "cudnnConvolutionForward",
];

/// True if the cuDNN library file can be opened (a dlopen probe; cached).
pub fn library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to dlopen the library by its
    // candidate names and closes it again.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// The entries of [`SYMBOLS`] the loaded library lacks (all of them if it
/// cannot be loaded).
pub fn missing_symbols() -> Vec<&'static str> {
    if !library_present() {
        return SYMBOLS.to_vec();
    }
    // SAFETY: the library is present (checked above), so `culib` loads it
    // instead of panicking; looking a symbol up calls nothing.
    let lib = unsafe { sys::culib() };
    SYMBOLS
        .iter()
        .copied()
        // SAFETY: only the lookup happens; the pointer is never called here.
        .filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err())
        .collect()
}

/// cuDNN's version number (`major * 10000 + minor * 100 + patch` for 9.x),
/// if the library loads and exports `cudnnGetVersion`.
pub fn version() -> Option<usize> {
    if !library_present() || missing_symbols().contains(&"cudnnGetVersion") {
        return None;
    }
    // SAFETY: the library and the symbol are there (checked above), so
    // cudarc's lazy loader succeeds; cudnnGetVersion takes no arguments.
    Some(unsafe { sys::cudnnGetVersion() })
}

/// True if cuDNN 9 loads with every symbol this module uses (cached).
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| missing_symbols().is_empty() && version().is_some_and(|v| (90_000..100_000).contains(&v)))
}

/// How [`conv_forward`] expresses a geometry in cuDNN's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// Padding applied to the lhs's spatial axes before cuDNN runs (low,
    /// high, interior), when its symmetric padding cannot express `g`'s.
    pub prepad: Option<([i64; SPATIAL], [i64; SPATIAL], [usize; SPATIAL])>,
    /// Move the lhs's batch groups next to its features (`[bg, N/bg, C*S]
    /// -> [N/bg, bg, C*S]`) and run them as feature groups.
    pub fold_batch_groups: bool,
    /// Descriptor sizes: the lhs as cuDNN sees it, the filter, the output.
    pub x: Vec<c_int>,
    pub w: Vec<c_int>,
    pub y: Vec<c_int>,
    /// Per spatial axis passed to cuDNN.
    pub pad: Vec<c_int>,
    pub stride: Vec<c_int>,
    pub dilation: Vec<c_int>,
    /// cuDNN's group count (`fg * bg`).
    pub groups: c_int,
}

/// The cuDNN form of `g` (a checked geometry with a non-empty output), or
/// `None` where a size does not fit cuDNN's 32-bit descriptors.
pub(super) fn plan(g: &ConvGeometry) -> Option<Plan> {
    let direct = (0..SPATIAL).all(|a| g.lhs_dilation[a] == 1 && g.pad_lo[a] == g.pad_hi[a] && g.pad_lo[a] >= 0);
    let mut xs = [0i64; SPATIAL];
    let mut pad = [0i64; SPATIAL];
    for a in 0..SPATIAL {
        if direct {
            xs[a] = g.input[a] as i64;
            pad[a] = g.pad_lo[a];
        } else {
            xs[a] = dilated(g.input[a], g.lhs_dilation[a]) as i64 + g.pad_lo[a] + g.pad_hi[a];
        }
    }
    let prepad = (!direct).then(|| (g.pad_lo, g.pad_hi, g.lhs_dilation.map(|d| d - 1)));
    // A leading spatial axis of size 1 that nothing touches is dropped
    // (1-d and 2-d convolutions get 4-d descriptors).
    let first = if xs[0] == 1 && g.kernel[0] == 1 && g.output[0] == 1 && pad[0] == 0 { 1 } else { 0 };
    let bg = g.batch_groups as i64;
    let mut x = vec![g.out_batch() as i64, bg * g.in_features as i64];
    let mut w = vec![g.out_features as i64, g.group_in_features() as i64];
    let mut y = vec![g.out_batch() as i64, g.out_features as i64];
    let (mut p, mut s, mut d) = (Vec::new(), Vec::new(), Vec::new());
    for a in first..SPATIAL {
        x.push(xs[a]);
        w.push(g.kernel[a] as i64);
        y.push(g.output[a] as i64);
        p.push(pad[a]);
        s.push(g.stride[a] as i64);
        d.push(g.rhs_dilation[a] as i64);
    }
    let fits = |v: &[i64]| {
        v.iter().all(|&n| (1..=c_int::MAX as i64).contains(&n))
            && v.iter().try_fold(1i64, |acc, &n| acc.checked_mul(n)).is_some_and(|t| t <= c_int::MAX as i64)
    };
    let small = |v: &[i64]| v.iter().all(|&n| (0..=c_int::MAX as i64).contains(&n));
    if !fits(&x) || !fits(&w) || !fits(&y) || !small(&p) || !fits(&s) || !fits(&d) {
        return None;
    }
    let int = |v: Vec<i64>| v.into_iter().map(|n| n as c_int).collect::<Vec<c_int>>();
    Some(Plan {
        prepad,
        fold_batch_groups: g.batch_groups > 1,
        x: int(x),
        w: int(w),
        y: int(y),
        pad: int(p),
        stride: int(s),
        dilation: int(d),
        groups: g.groups() as c_int,
    })
}

/// cuDNN's data type, compute type and math mode for `d`.
fn types(d: DType) -> Option<(sys::cudnnDataType_t, sys::cudnnDataType_t, sys::cudnnMathType_t)> {
    use sys::cudnnDataType_t::*;
    use sys::cudnnMathType_t::*;
    Some(match d {
        DType::F32 => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH),
        DType::F64 => (CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_FMA_MATH),
        DType::F16 => (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        DType::BF16 => (CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        _ => return None,
    })
}

fn status(what: &str, s: sys::cudnnStatus_t) -> Result<()> {
    if s == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::driver(&format!("running cuDNN ({what})"), format!("{s:?}")))
    }
}

/// A cuDNN handle bound to one device's stream.
struct Handle(sys::cudnnHandle_t);
// SAFETY: cuDNN handles may be used from any host thread as long as no two
// threads use one at the same time; every use goes through the `Mutex` in
// `handle`, and the handle is never destroyed (it lives as long as the
// device state, i.e. the process).
unsafe impl Send for Handle {}

/// The handle of `dev`, created at first use.
fn handle(dev: &CudaDevice) -> Result<Arc<Mutex<Handle>>> {
    static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<Mutex<Handle>>>>> = OnceLock::new();
    let mut map = HANDLES.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    // the handle is bound to the device's stream: not usable inside a
    // graph capture (NOTE: [capture stream]), whose work is recorded on
    // another stream
    if super::device::CudaDevice::capturing_ordinal().is_some() {
        return Err(CudaError::unsupported("cuDNN inside a CUDA graph capture"));
    }
    if let Some(h) = map.get(&dev.ordinal()) {
        return Ok(h.clone());
    }
    dev.context().bind_to_thread().map_err(|e| CudaError::driver("binding the context for cuDNN", e))?;
    let mut raw: sys::cudnnHandle_t = std::ptr::null_mut();
    // SAFETY: `available()` was checked by the caller, so the symbols
    // resolve; cudnnCreate writes a handle through a valid pointer, and the
    // stream is the device's live stream.
    unsafe {
        status("cudnnCreate", sys::cudnnCreate(&mut raw))?;
        status("cudnnSetStream", sys::cudnnSetStream(raw, dev.main_stream().cu_stream() as sys::cudaStream_t))?;
    }
    let h = Arc::new(Mutex::new(Handle(raw)));
    map.insert(dev.ordinal(), h.clone());
    Ok(h)
}

/// An owned tensor, filter or convolution descriptor (destroyed on drop).
struct Desc<T: Copy> {
    raw: T,
    destroy: fn(T),
}

impl<T: Copy> Drop for Desc<T> {
    fn drop(&mut self) {
        (self.destroy)(self.raw);
    }
}

fn contiguous_strides(dims: &[c_int]) -> Vec<c_int> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

// The destructors `Desc` calls once for the descriptor it owns (a failed
// destroy leaks it; nothing else can be done in a drop).
fn destroy_tensor(d: sys::cudnnTensorDescriptor_t) {
    // SAFETY: `d` came from cudnnCreateTensorDescriptor and is destroyed once.
    let _ = unsafe { sys::cudnnDestroyTensorDescriptor(d) };
}
fn destroy_filter(d: sys::cudnnFilterDescriptor_t) {
    // SAFETY: `d` came from cudnnCreateFilterDescriptor and is destroyed once.
    let _ = unsafe { sys::cudnnDestroyFilterDescriptor(d) };
}
fn destroy_conv(d: sys::cudnnConvolutionDescriptor_t) {
    // SAFETY: `d` came from cudnnCreateConvolutionDescriptor and is destroyed once.
    let _ = unsafe { sys::cudnnDestroyConvolutionDescriptor(d) };
}

fn tensor(dt: sys::cudnnDataType_t, dims: &[c_int]) -> Result<Desc<sys::cudnnTensorDescriptor_t>> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: the symbols resolve (`available`); create writes through a
    // valid pointer, and the descriptor is owned by `Desc` from then on.
    let d = unsafe {
        status("cudnnCreateTensorDescriptor", sys::cudnnCreateTensorDescriptor(&mut raw))?;
        Desc { raw, destroy: destroy_tensor }
    };
    let strides = contiguous_strides(dims);
    // SAFETY: `dims` and `strides` hold `dims.len()` ints each.
    status("cudnnSetTensorNdDescriptor", unsafe {
        sys::cudnnSetTensorNdDescriptor(d.raw, dt, dims.len() as c_int, dims.as_ptr(), strides.as_ptr())
    })?;
    Ok(d)
}

fn filter(dt: sys::cudnnDataType_t, dims: &[c_int]) -> Result<Desc<sys::cudnnFilterDescriptor_t>> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: as in `tensor`.
    let d = unsafe {
        status("cudnnCreateFilterDescriptor", sys::cudnnCreateFilterDescriptor(&mut raw))?;
        Desc { raw, destroy: destroy_filter }
    };
    // SAFETY: `dims` holds `dims.len()` ints; NCHW is the canonical OIDHW order.
    status("cudnnSetFilterNdDescriptor", unsafe {
        sys::cudnnSetFilterNdDescriptor(
            d.raw,
            dt,
            sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            dims.len() as c_int,
            dims.as_ptr(),
        )
    })?;
    Ok(d)
}

fn convolution(p: &Plan, d: DType) -> Result<Desc<sys::cudnnConvolutionDescriptor_t>> {
    let (_, compute, math) = types(d).ok_or_else(|| CudaError::unsupported(format!("cuDNN convolution of {d}")))?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: as in `tensor`.
    let c = unsafe {
        status("cudnnCreateConvolutionDescriptor", sys::cudnnCreateConvolutionDescriptor(&mut raw))?;
        Desc { raw, destroy: destroy_conv }
    };
    // SAFETY: pad, stride and dilation hold `pad.len()` ints each.
    unsafe {
        status(
            "cudnnSetConvolutionNdDescriptor",
            sys::cudnnSetConvolutionNdDescriptor(
                c.raw,
                p.pad.len() as c_int,
                p.pad.as_ptr(),
                p.stride.as_ptr(),
                p.dilation.as_ptr(),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                compute,
            ),
        )?;
        status("cudnnSetConvolutionMathType", sys::cudnnSetConvolutionMathType(c.raw, math))?;
        status("cudnnSetConvolutionGroupCount", sys::cudnnSetConvolutionGroupCount(c.raw, p.groups))?;
    }
    Ok(c)
}

/// `cudnnConvolutionFwdAlgoPerf_t` with its enums as plain integers, so a
/// value this binding does not know (a newer cuDNN) is not undefined
/// behaviour; converted to the enum only when it is a known algorithm.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct AlgoPerf {
    algo: u32,
    status: u32,
    time: f32,
    memory: usize,
    determinism: u32,
    math_type: u32,
    reserved: [c_int; 3],
}

fn algo_from(v: u32) -> Option<sys::cudnnConvolutionFwdAlgo_t> {
    use sys::cudnnConvolutionFwdAlgo_t::*;
    [
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        CUDNN_CONVOLUTION_FWD_ALGO_FFT,
        CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
        CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
    ]
    .into_iter()
    .find(|a| *a as u32 == v)
}

/// True for the algorithms that sum the products directly (the implicit
/// and explicit GEMMs, DIRECT): FFT and Winograd transform the operands
/// and lose accuracy relative to each output's terms (worst near the
/// borders), so they are never used and results match the CPU's rounding.
fn sums_directly(code: u32) -> bool {
    use sys::cudnnConvolutionFwdAlgo_t::*;
    matches!(
        algo_from(code),
        Some(
            CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
                | CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
                | CUDNN_CONVOLUTION_FWD_ALGO_GEMM
                | CUDNN_CONVOLUTION_FWD_ALGO_DIRECT
        )
    )
}

type AlgoKey = (usize, ConvGeometry, DType);

/// Per device, geometry and dtype: the algorithm that worked, or `None`
/// when cuDNN declined the case (so the fallback does not pay for asking
/// again: the heuristic query, the descriptors and the lhs rewrite).
fn algo_cache() -> &'static Mutex<HashMap<AlgoKey, Option<u32>>> {
    static CACHE: OnceLock<Mutex<HashMap<AlgoKey, Option<u32>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The lhs rewritten as the plan says (padded, batch groups folded).
fn prepare_lhs(dev: &CudaDevice, lhs: &CudaBuffer, g: &ConvGeometry, p: &Plan) -> Result<Option<CudaBuffer>> {
    let mut cur: Option<CudaBuffer> = None;
    let mut shape: Vec<usize> = [g.batch, g.in_features].into_iter().chain(g.input).collect();
    if let Some((lo, hi, interior)) = &p.prepad {
        let zero = CudaBuffer::upload(dev.ordinal(), &CpuBuffer::full(lhs.dtype(), 1, 0.0))?;
        let low: Vec<i64> = [0, 0].into_iter().chain(*lo).collect();
        let high: Vec<i64> = [0, 0].into_iter().chain(*hi).collect();
        let int: Vec<usize> = [0, 0].into_iter().chain(*interior).collect();
        let lx = Layout::contiguous(Shape::from(&shape));
        let lz = Layout::contiguous(Shape::scalar());
        let padded = exec::pad(lhs, &lx, &zero, &lz, &low, &high, &int)?;
        for a in 0..SPATIAL {
            shape[2 + a] = (dilated(g.input[a], g.lhs_dilation[a]) as i64 + lo[a] + hi[a]) as usize;
        }
        cur = Some(padded);
    }
    if p.fold_batch_groups {
        let x = cur.as_ref().unwrap_or(lhs);
        let bg = g.batch_groups;
        let rest: usize = shape[1..].iter().product();
        let l = Layout::contiguous(Shape::from([bg, g.batch / bg, rest])).permute(&[1, 0, 2]);
        cur = Some(exec::to_contiguous(x, &l)?);
    }
    Ok(cur)
}

/// Runs `g` through cuDNN.
///
/// # Errors
/// cuDNN absent, a case [`plan`] cannot express, a dtype cuDNN lacks, or
/// the first failing cuDNN status when no candidate algorithm runs.
pub(super) fn conv_forward(
    dev: &Arc<CudaDevice>,
    lhs: &CudaBuffer,
    rhs: &CudaBuffer,
    g: &ConvGeometry,
    dtype: DType,
) -> Result<CudaBuffer> {
    if !available() {
        return Err(CudaError::unsupported("cuDNN 9 (libcudnn.so.9) could not be loaded"));
    }
    let (dt, ..) = types(dtype).ok_or_else(|| CudaError::unsupported(format!("cuDNN convolution of {dtype}")))?;
    let p = plan(g).ok_or_else(|| CudaError::unsupported("a convolution too large for cuDNN's descriptors"))?;
    let key = (dev.ordinal(), g.clone(), dtype);
    let cached = algo_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied();
    if cached == Some(None) {
        return Err(CudaError::unsupported("cuDNN declined this convolution before"));
    }
    let r = run(dev, lhs, rhs, g, dtype, dt, &p, cached.flatten());
    // Out of memory is no verdict on the case: ask again next time.
    if !matches!(r, Err(CudaError::OutOfMemory { .. })) {
        let found = r.as_ref().ok().map(|(_, code)| *code);
        algo_cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, found);
    }
    r.map(|(y, _)| y)
}

/// Prepares the operands and descriptors of plan `p` and runs the cached
/// algorithm `cached`, or else cuDNN's candidates in heuristic order until
/// one works; returns the result and the algorithm used.
#[allow(clippy::too_many_arguments)]
fn run(
    dev: &Arc<CudaDevice>,
    lhs: &CudaBuffer,
    rhs: &CudaBuffer,
    g: &ConvGeometry,
    dtype: DType,
    dt: sys::cudnnDataType_t,
    p: &Plan,
    cached: Option<u32>,
) -> Result<(CudaBuffer, u32)> {
    let prepared = prepare_lhs(dev, lhs, g, p)?;
    let x = prepared.as_ref().unwrap_or(lhs);
    let y = CudaBuffer::alloc(dev, dtype, g.out_len())?;
    let (xd, wd, yd) = (tensor(dt, &p.x)?, filter(dt, &p.w)?, tensor(dt, &p.y)?);
    let cd = convolution(p, dtype)?;
    let h = handle(dev)?;
    let h = h.lock().unwrap_or_else(|e| e.into_inner());
    dev.context().bind_to_thread().map_err(|e| CudaError::driver("binding the context for cuDNN", e))?;
    let candidates: Vec<u32> = match cached {
        Some(a) => vec![a],
        None => {
            const COUNT: usize = sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_COUNT as usize;
            let mut perf = [AlgoPerf::default(); COUNT];
            let mut returned: c_int = 0;
            // SAFETY: the descriptors are live; `perf` holds COUNT records
            // laid out as cudnnConvolutionFwdAlgoPerf_t (the same repr(C)
            // fields with the enums as u32).
            status("cudnnGetConvolutionForwardAlgorithm_v7", unsafe {
                sys::cudnnGetConvolutionForwardAlgorithm_v7(
                    h.0,
                    xd.raw,
                    wd.raw,
                    cd.raw,
                    yd.raw,
                    COUNT as c_int,
                    &mut returned,
                    perf.as_mut_ptr().cast(),
                )
            })?;
            let ok = sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS as u32;
            perf[..(returned.clamp(0, COUNT as c_int) as usize)]
                .iter()
                .filter(|r| r.status == ok && sums_directly(r.algo))
                .map(|r| r.algo)
                .collect()
        }
    };
    // Scaling factors: double for f64 data, float otherwise.
    let (a32, b32, a64, b64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (alpha, beta): (*const std::ffi::c_void, *const std::ffi::c_void) = if dtype == DType::F64 {
        ((&a64 as *const f64).cast(), (&b64 as *const f64).cast())
    } else {
        ((&a32 as *const f32).cast(), (&b32 as *const f32).cast())
    };
    let mut last = CudaError::unsupported("cuDNN offered no forward algorithm for this convolution");
    for code in candidates {
        let Some(algo) = algo_from(code) else { continue };
        let mut bytes = 0usize;
        // SAFETY: live descriptors and handle; writes one usize.
        let ws = unsafe {
            sys::cudnnGetConvolutionForwardWorkspaceSize(h.0, xd.raw, wd.raw, cd.raw, yd.raw, algo, &mut bytes)
        };
        if let Err(e) = status("cudnnGetConvolutionForwardWorkspaceSize", ws) {
            last = e;
            continue;
        }
        // The workspace as f32 words (any dtype serves as raw bytes).
        let work = match CudaBuffer::alloc(dev, DType::F32, bytes.div_ceil(4)) {
            Ok(w) => w,
            Err(e) => {
                last = e;
                continue;
            }
        };
        // SAFETY: the handle is locked; x, w and y are live device buffers
        // holding exactly the descriptors' contiguous tensors of dtype `dt`
        // (x: the canonical or prepared lhs, w: the canonical rhs, y: a
        // fresh out_len buffer), the workspace holds at least `bytes`, and
        // alpha/beta point to scalars of the type cuDNN reads for `dt`.
        let r = unsafe {
            sys::cudnnConvolutionForward(
                h.0,
                alpha,
                xd.raw,
                x.device_ptr() as *const std::ffi::c_void,
                wd.raw,
                rhs.device_ptr() as *const std::ffi::c_void,
                cd.raw,
                algo,
                if bytes == 0 { std::ptr::null_mut() } else { work.device_ptr() as *mut std::ffi::c_void },
                bytes,
                beta,
                yd.raw,
                y.device_ptr() as *mut std::ffi::c_void,
            )
        };
        match status("cudnnConvolutionForward", r) {
            // The workspace and the prepared lhs are freed on drop:
            // stream-ordered, after the convolution.
            Ok(()) => return Ok((y, code)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(
        nc: (usize, usize, usize, usize, usize),
        i: [usize; 3],
        k: [usize; 3],
        pad: [(i64, i64); 3],
        ld: [usize; 3],
    ) -> ConvGeometry {
        let (n, c, o, fg, bg) = nc;
        ConvGeometry {
            batch: n,
            in_features: c,
            out_features: o,
            feature_groups: fg,
            batch_groups: bg,
            input: i,
            kernel: k,
            output: [0; 3],
            stride: [1; 3],
            pad_lo: pad.map(|p| p.0),
            pad_hi: pad.map(|p| p.1),
            lhs_dilation: ld,
            rhs_dilation: [1; 3],
        }
        .with_output()
        .expect("a valid geometry")
    }

    #[test]
    fn plan_of_a_2d_convolution_is_4d_with_cudnn_padding() {
        let g = geom((8, 6, 4, 2, 1), [1, 10, 12], [1, 3, 3], [(0, 0), (1, 1), (2, 2)], [1; 3]);
        let p = plan(&g).unwrap();
        assert_eq!(p.prepad, None);
        assert!(!p.fold_batch_groups);
        assert_eq!((p.x.clone(), p.w.clone(), p.y.clone()), (vec![8, 6, 10, 12], vec![4, 3, 3, 3], vec![8, 4, 10, 14]));
        assert_eq!(
            (p.pad.clone(), p.stride.clone(), p.dilation.clone(), p.groups),
            (vec![1, 2], vec![1, 1], vec![1, 1], 2)
        );
    }

    #[test]
    fn plan_prepads_asymmetric_negative_padding_and_lhs_dilation() {
        let g = geom((2, 3, 5, 1, 1), [4, 5, 6], [2, 2, 3], [(1, 0), (-1, 2), (0, 0)], [1, 2, 1]);
        let p = plan(&g).unwrap();
        assert_eq!(p.prepad, Some(([1, -1, 0], [0, 2, 0], [0, 1, 0])));
        // 4 + 1; 9 - 1 + 2; 6: what the explicitly padded lhs holds.
        assert_eq!(p.x, vec![2, 3, 5, 10, 6]);
        assert_eq!(p.pad, vec![0, 0, 0]);
        assert_eq!(p.y[2..], [4, 9, 4]);
    }

    #[test]
    fn plan_folds_batch_groups_into_feature_groups() {
        let g = geom((6, 4, 9, 1, 3), [1, 1, 7], [1, 1, 3], [(0, 0); 3], [1; 3]);
        let p = plan(&g).unwrap();
        assert!(p.fold_batch_groups);
        assert_eq!(p.x, vec![2, 12, 1, 7]);
        assert_eq!(p.w, vec![9, 4, 1, 3]);
        assert_eq!(p.y, vec![2, 9, 1, 5]);
        assert_eq!(p.groups, 3);
    }

    #[test]
    fn plan_declines_sizes_past_32_bits() {
        let g = geom((1 << 16, 1 << 16, 1, 1, 1), [1, 1, 1], [1, 1, 1], [(0, 0); 3], [1; 3]);
        assert_eq!(plan(&g), None);
    }

    #[test]
    fn algo_perf_matches_the_binding() {
        assert_eq!(std::mem::size_of::<AlgoPerf>(), std::mem::size_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
        assert_eq!(
            algo_from(1),
            Some(sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
        );
        assert_eq!(algo_from(99), None);
        assert!(sums_directly(0) && sums_directly(1) && sums_directly(2) && sums_directly(3));
        assert!(!sums_directly(4) && !sums_directly(5) && !sums_directly(6) && !sums_directly(7) && !sums_directly(99));
        assert_eq!(contiguous_strides(&[2, 3, 4, 5]), vec![60, 20, 5, 1]);
    }
}

#[cfg(test)]
mod library_tests {
    use super::*;

    /// Loads libcudnn through the guarded loader and checks its version and
    /// every symbol this module calls (no GPU needed; ignored unless asked
    /// for, then strict: .ci/run installs the nvidia-cudnn-cu13 wheel).
    #[test]
    #[ignore = "needs libcudnn.so.9 on LD_LIBRARY_PATH; .ci/run runs it with --include-ignored"]
    fn cudnn_library_loads_with_every_symbol() {
        assert!(library_present(), "libcudnn not found: put site-packages/nvidia/cudnn/lib on LD_LIBRARY_PATH");
        assert_eq!(missing_symbols(), Vec::<&str>::new(), "libcudnn lacks symbols xform calls");
        let v = version().expect("cudnnGetVersion");
        assert!((90_000..100_000).contains(&v), "cuDNN {v}: xform's bindings describe cuDNN 9");
        assert!(available());
        println!("cuDNN {}.{}.{} with all {} symbols", v / 10000, v / 100 % 100, v % 100, SYMBOLS.len());
    }

    /// cuDNN accepts the descriptors of every plan (all four dtypes) and
    /// computes the same output sizes from them (host-only calls: no GPU).
    #[test]
    #[ignore = "needs libcudnn.so.9 on LD_LIBRARY_PATH; .ci/run runs it with --include-ignored"]
    fn cudnn_library_agrees_with_every_plan() {
        use crate::cuda_source::conv::test_cases::cases;
        assert!(available(), "cuDNN 9 not loadable: put site-packages/nvidia/cudnn/lib on LD_LIBRARY_PATH");
        let mut planned = 0;
        for (name, g) in cases() {
            let Some(p) = plan(&g) else {
                // Only empty operands have no plan among the cases.
                assert!(g.out_len() == 0 || g.lhs_len() == 0, "{name}: no cuDNN plan");
                continue;
            };
            planned += 1;
            for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
                let (dt, ..) = types(d).unwrap();
                let what = format!("{name} {d:?}");
                let (x, w) = (tensor(dt, &p.x).expect(&what), filter(dt, &p.w).expect(&what));
                let c = convolution(&p, d).expect(&what);
                let mut y = vec![0 as c_int; p.y.len()];
                // SAFETY: live descriptors; `y` holds as many ints as the
                // tensors have dimensions.
                let s = unsafe {
                    sys::cudnnGetConvolutionNdForwardOutputDim(c.raw, x.raw, w.raw, y.len() as c_int, y.as_mut_ptr())
                };
                status("cudnnGetConvolutionNdForwardOutputDim", s).expect(&what);
                assert_eq!(y, p.y, "{what}: cuDNN's output size differs from the geometry's");
            }
        }
        assert!(planned >= 10, "only {planned} cases planned");
    }
}
