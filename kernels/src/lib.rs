//! xform-kernels: compute over raw buffers.
//!
//! This crate knows no `Tensor`: it has element types ([`DType`],
//! [`Element`], [`Float`]), typed buffers ([`CpuBuffer`]), strided
//! [`Layout`]s, and kernels that take slices plus layouts and return fresh
//! contiguous results (`cpu`), plus the CUDA backend behind the `cuda`
//! feature (`cuda`).

#![warn(missing_docs)]

pub mod buffer;
pub mod conv_geom;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod cuda_host;
pub mod cuda_launch;
pub mod cuda_source;
pub mod dtype;
pub mod fastmath;
pub mod layout;
pub mod pool;
pub mod special;

pub use dtype::{CpuBuffer, DType, Element, Float, Real};
pub use half;
pub use layout::{Coalesced, Dims, Layout, Shape, Strides};
