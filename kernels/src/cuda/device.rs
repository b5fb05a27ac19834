//! Per-device state, created at first use and kept for the process: the
//! context, one stream (all work on a device is ordered on it), a cuBLAS
//! handle when the library is present, and the compiled kernels by name.

use super::compile::{arch_for, compile_ptx};
use super::error::{CudaError, Result};
use super::source::Kernel;
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
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
        Ok(CudaDevice { ordinal, ctx, stream, blas, arch: arch_for(Some(cc)), functions: Mutex::new(HashMap::new()) })
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

    /// The stream all of this device's work runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The cuBLAS handle, if libcublas could be loaded.
    pub fn blas(&self) -> Option<&Mutex<CudaBlas>> {
        self.blas.as_ref()
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
