//! Per-device state, created at first use and kept for the process: the
//! context, one stream (all work on a device is ordered on it), a cuBLAS
//! handle when the library is present, and the compiled kernels by name.
//!
//! NOTE: [capture stream] The device's stream is the context's legacy
//! default stream, which cannot be captured into a CUDA graph. A capture
//! (`super::graph::capture`) runs on the device's *capture stream*
//! instead: a non-blocking stream of its own, with its own cuBLAS handle
//! (and a fixed cuBLAS workspace, so that no GEMM allocates while
//! captured), created at the first capture. While a thread captures,
//! [`CudaDevice::stream`] and [`CudaDevice::blas`] return those on that
//! thread only (a thread-local says which device it captures), so every
//! launch, allocation and GEMM of the lowering code is recorded without
//! that code knowing; other threads keep running on the device's stream.

use super::compile::{arch_for, compile_ptx};
use super::error::{CudaError, Result};
use super::source::Kernel;
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// True if the CUDA driver library can be loaded (cached).
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to dlopen libcuda by its
    // candidate names and closes it again.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// True if the cuBLAS library can be loaded (cached).
pub fn cublas_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: as for the driver: a dlopen probe with no other effect.
    *PRESENT.get_or_init(|| unsafe { cudarc::cublas::sys::is_culib_present() })
}

/// Number of CUDA devices (0 without a driver or when the driver fails to
/// initialize).
pub fn device_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        if !driver_present() {
            return 0;
        }
        if cudarc::driver::result::init().is_err() {
            return 0;
        }
        CudaContext::device_count().map(|n| n.max(0) as usize).unwrap_or(0)
    })
}

/// True if at least one CUDA device can be used.
pub fn is_available() -> bool {
    device_count() > 0
}

/// One CUDA device's context, stream, cuBLAS handle and kernel cache.
pub struct CudaDevice {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: Option<Mutex<CudaBlas>>,
    arch: String,
    functions: Mutex<HashMap<String, Arc<CudaFunction>>>,
    capture: OnceLock<std::result::Result<CaptureStream, String>>,
}

/// The stream (and cuBLAS handle) graph captures of one device record on
/// (NOTE: [capture stream]).
pub(super) struct CaptureStream {
    // Dropped in order: the handle, the stream's wrapper, then the stream.
    blas: Option<Mutex<CudaBlas>>,
    /// cuBLAS's workspace while captured (it must not allocate then).
    _workspace: Option<cudarc::driver::CudaSlice<u8>>,
    stream: Arc<CudaStream>,
    _owned: OwnedStream,
    /// Held by the one capture in progress on the device.
    pub(super) busy: Mutex<()>,
}

/// A stream this module created (cudarc's wrapper of it does not own it).
struct OwnedStream(cudarc::driver::sys::CUstream);

// SAFETY: a CUstream handle may be used and destroyed from any thread.
unsafe impl Send for OwnedStream {}
// SAFETY: as above; the handle is only read.
unsafe impl Sync for OwnedStream {}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: the stream was created by `result::stream::create` and
        // everything using it (the cuBLAS handle, the wrapper) was dropped
        // before this field.
        let _ = unsafe { cudarc::driver::result::stream::destroy(self.0) };
    }
}

/// cuBLAS's workspace for captured GEMMs (its documented recommendation
/// for Hopper; 4 MiB suffices before it).
const CAPTURE_BLAS_WORKSPACE: usize = 32 << 20;

thread_local! {
    /// The ordinal of the device this thread is capturing a graph on.
    static CAPTURING: Cell<Option<usize>> = const { Cell::new(None) };
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice(cuda:{}, {})", self.ordinal, self.arch)
    }
}

impl CudaDevice {
    fn open(ordinal: usize) -> Result<CudaDevice> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        let count = device_count();
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::driver("creating a context", e))?;
        let stream = ctx.default_stream();
        let cc = ctx.compute_capability().map_err(|e| CudaError::driver("reading the compute capability", e))?;
        let blas = if cublas_present() { CudaBlas::new(stream.clone()).ok().map(Mutex::new) } else { None };
        Ok(CudaDevice {
            ordinal,
            ctx,
            stream,
            blas,
            arch: arch_for(Some(cc)),
            functions: Mutex::new(HashMap::new()),
            capture: OnceLock::new(),
        })
    }

    /// The capture stream, when this thread is capturing on this device.
    #[inline]
    fn capturing(&self) -> Option<&CaptureStream> {
        if CAPTURING.with(Cell::get) == Some(self.ordinal) {
            self.capture.get().and_then(|c| c.as_ref().ok())
        } else {
            None
        }
    }

    /// The device's capture stream, created at first use (NOTE: [capture
    /// stream]).
    ///
    /// # Errors
    /// The driver failing to create the stream, or cuBLAS (when the device
    /// has it) failing to get a handle or a workspace on it.
    pub(super) fn capture_stream(&self) -> std::result::Result<&CaptureStream, String> {
        self.capture.get_or_init(|| self.open_capture_stream()).as_ref().map_err(Clone::clone)
    }

    fn open_capture_stream(&self) -> std::result::Result<CaptureStream, String> {
        use cudarc::driver::result::stream::{create, StreamKind};
        self.ctx.bind_to_thread().map_err(|e| format!("binding the context: {e}"))?;
        // Non-blocking: work other threads queue on the legacy stream while
        // this one captures must not synchronize with the capturing stream.
        let raw = create(StreamKind::NonBlocking).map_err(|e| format!("creating a stream: {e}"))?;
        let owned = OwnedStream(raw);
        // SAFETY: `raw` is a stream of this context, alive as long as
        // `owned`, which the capture stream keeps after every user of the
        // wrapper (field order); work on it is ordered with the device's
        // stream by the capture (graphs are launched on the device's stream).
        let stream = unsafe { self.ctx.wrap_borrowed_stream(raw) };
        let (blas, workspace) = if self.blas.is_some() {
            let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("creating a cuBLAS handle: {e}"))?;
            // SAFETY: the workspace is only written by cuBLAS.
            let ws = unsafe { self.stream.alloc::<u8>(CAPTURE_BLAS_WORKSPACE) }
                .map_err(|e| format!("allocating cuBLAS's workspace: {e}"))?;
            let ptr = {
                let (ptr, _guard) = cudarc::driver::DevicePtr::device_ptr(&ws, &self.stream);
                ptr
            };
            // SAFETY: the handle is live; the workspace holds
            // CAPTURE_BLAS_WORKSPACE bytes and outlives the handle (field
            // order); it is set after the handle's stream (setting a stream
            // resets the workspace).
            let status = unsafe {
                cudarc::cublas::sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, CAPTURE_BLAS_WORKSPACE)
            };
            if status != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(format!("setting cuBLAS's workspace: {status:?}"));
            }
            (Some(Mutex::new(blas)), Some(ws))
        } else {
            (None, None)
        };
        Ok(CaptureStream { blas, _workspace: workspace, stream, _owned: owned, busy: Mutex::new(()) })
    }

    /// Sets (or clears) the device this thread captures on.
    pub(super) fn set_capturing(ordinal: Option<usize>) {
        CAPTURING.with(|c| c.set(ordinal));
    }

    /// The device this thread captures on, if any.
    pub(super) fn capturing_ordinal() -> Option<usize> {
        CAPTURING.with(Cell::get)
    }

    /// The device's own stream, even while this thread captures.
    pub(super) fn main_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The PTX architecture kernels are compiled for (`compute_XY`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The driver context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream all of this device's work runs on (the capture stream
    /// while this thread captures on the device: NOTE: [capture stream]).
    pub fn stream(&self) -> &Arc<CudaStream> {
        match self.capturing() {
            Some(c) => &c.stream,
            None => &self.stream,
        }
    }

    /// The cuBLAS handle, if libcublas could be loaded (the capture
    /// stream's while this thread captures on the device).
    pub fn blas(&self) -> Option<&Mutex<CudaBlas>> {
        match self.capturing() {
            Some(c) => c.blas.as_ref(),
            None => self.blas.as_ref(),
        }
    }

    /// The loaded entry point of `kernel`, compiling and loading its module
    /// at first use.
    pub fn function(&self, kernel: &Kernel) -> Result<Arc<CudaFunction>> {
        let mut map = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = map.get(&kernel.name) {
            return Ok(f.clone());
        }
        let ptx = compile_ptx(kernel, &self.arch)?;
        let module = self.ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)).map_err(|e| {
            let what = format!("loading the module of {}", kernel.name);
            if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
                let hint = format!(
                    "{e}: the PTX comes from an NVRTC ({:?}) newer than this driver supports; use an NVRTC no newer \
                     than the driver (for example `pip install 'nvidia-cuda-nvrtc==13.0.*'`)",
                    super::compile::nvrtc_version()
                );
                CudaError::driver(&what, hint)
            } else {
                CudaError::driver(&what, e)
            }
        })?;
        let f = Arc::new(
            module
                .load_function(&kernel.name)
                .map_err(|e| CudaError::driver(&format!("loading the kernel {}", kernel.name), e))?,
        );
        map.insert(kernel.name.clone(), f.clone());
        Ok(f)
    }

    /// Waits for all work queued on the device's stream.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| CudaError::driver("synchronizing", e))
    }
}

/// The device with this ordinal, opened at first use and cached.
///
/// # Errors
/// [`CudaError::NoDriver`] or [`CudaError::NoDevice`] when there is no such
/// device, a driver error if its context cannot be created.
pub fn device(ordinal: usize) -> Result<Arc<CudaDevice>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<CudaDevice>>>> = OnceLock::new();
    let mut map = DEVICES.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = map.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(CudaDevice::open(ordinal)?);
    map.insert(ordinal, d.clone());
    Ok(d)
}
