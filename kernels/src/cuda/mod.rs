//! The CUDA backend (the `cuda` feature): typed device buffers, a
//! per-device context cache, and kernels generated as CUDA C, compiled with
//! NVRTC at first use and cached per device.
//!
//! Everything loads the CUDA libraries at run time (cudarc with dynamic
//! loading), so this builds without a toolkit; with no driver or no device
//! every entry point returns [`CudaError`] ("no CUDA device") instead of
//! panicking. [`source`] generates the kernels, [`exec`] launches them,
//! [`compile`] runs NVRTC (see it for the header, architecture and PTX
//! cache settings), and [`cudnn`] loads cuDNN for the convolution (its
//! absence is not an error: the generated kernel runs instead). [`nccl`]
//! gathers buffers across devices and processes (pmap's collectives).

mod buffer;
pub mod compile;
mod conv;
#[cfg(test)]
mod conv_tests;
pub mod cudnn;
mod device;
mod error;
pub mod exec;
pub mod graph;
pub mod nccl;
/// The kernel sources (compiled without the feature too; see [`crate::cuda_source`]).
pub use crate::cuda_source as source;

pub use buffer::{CudaBuffer, DeviceVec};
pub use compile::{half_include_dir, nvrtc_available, nvrtc_version};
pub use device::{cublas_present, device, device_count, driver_present, is_available, CudaDevice};
pub use error::{CudaError, Result};
pub use source::{Fold, Kernel, MapOp, Ranking};
