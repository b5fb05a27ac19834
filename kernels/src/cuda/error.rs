//! The CUDA backend's error type.

use std::fmt;

/// Why a CUDA operation could not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaError {
    /// No CUDA driver library (libcuda) could be loaded.
    NoDriver,
    /// The driver is there but the requested device is not.
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// No NVRTC library (libnvrtc) could be loaded, and no cached PTX fits.
    NvrtcMissing {
        /// The kernel that needed compiling.
        kernel: String,
    },
    /// NVRTC rejected a generated kernel.
    Compile {
        /// The kernel's name.
        kernel: String,
        /// NVRTC's log (the compiler's messages).
        log: String,
    },
    /// A driver call failed.
    Driver {
        /// What was being done.
        what: String,
        /// The driver's message.
        message: String,
    },
    /// A cuBLAS call failed.
    Blas {
        /// The cuBLAS status.
        message: String,
    },
    /// An index outside `[-size, size)` reached gather or scatter-add.
    IndexOutOfRange {
        /// The offending index.
        index: i64,
        /// The size of the indexed axis.
        size: usize,
    },
    /// The device could not allocate a buffer (the driver's
    /// CUDA_ERROR_OUT_OF_MEMORY, or a size past `usize`).
    OutOfMemory {
        /// The device's ordinal.
        ordinal: usize,
        /// The bytes requested.
        bytes: u128,
    },
    /// NCCL's library (libnccl) could not be loaded.
    NcclMissing,
    /// The operation has no CUDA kernel for these operands.
    Unsupported {
        /// What is not supported.
        message: String,
    },
}

impl CudaError {
    /// A driver error while doing `what`.
    pub fn driver(what: &str, e: impl fmt::Display) -> CudaError {
        CudaError::Driver { what: what.to_string(), message: e.to_string() }
    }

    /// An unsupported-operation error.
    pub fn unsupported(message: impl Into<String>) -> CudaError {
        CudaError::Unsupported { message: message.into() }
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NoDriver => f.write_str("no CUDA device: the CUDA driver library (libcuda) is not installed"),
            CudaError::NoDevice { ordinal, count } => {
                write!(f, "no CUDA device: cuda:{ordinal} was requested and the driver reports {count} device(s)")
            }
            CudaError::NvrtcMissing { kernel } => write!(
                f,
                "NVRTC (libnvrtc) could not be loaded to compile the CUDA kernel {kernel}: install it (for example \
                 `pip install nvidia-cuda-nvrtc` and add site-packages/nvidia/cu13/lib to LD_LIBRARY_PATH) or point \
                 XFORM_CUDA_PTX_CACHE at precompiled kernels"
            ),
            CudaError::Compile { kernel, log } => write!(f, "the CUDA kernel {kernel} failed to compile:\n{log}"),
            CudaError::Driver { what, message } => write!(f, "CUDA driver error while {what}: {message}"),
            CudaError::Blas { message } => write!(f, "cuBLAS error: {message}"),
            CudaError::IndexOutOfRange { index, size } => {
                write!(f, "index {index} is out of range for an axis of size {size}")
            }
            CudaError::OutOfMemory { ordinal, bytes } => {
                write!(f, "out of memory: cannot allocate {bytes} bytes on cuda:{ordinal}")
            }
            CudaError::NcclMissing => f.write_str(
                "NCCL (libnccl.so, NCCL 2) could not be loaded, and collectives between CUDA devices need it: \
                 install it (the distribution's libnccl2 and libnccl-dev packages, or `pip install \
                 nvidia-nccl-cu13` with a link libnccl.so -> libnccl.so.2 in site-packages/nvidia/nccl/lib, \
                 which goes on LD_LIBRARY_PATH)",
            ),
            CudaError::Unsupported { message } => write!(f, "not supported on CUDA: {message}"),
        }
    }
}

impl std::error::Error for CudaError {}

impl From<crate::cuda_launch::Unsupported> for CudaError {
    fn from(e: crate::cuda_launch::Unsupported) -> CudaError {
        CudaError::Unsupported { message: e.0 }
    }
}

/// Results of the CUDA backend.
pub type Result<T> = std::result::Result<T, CudaError>;
