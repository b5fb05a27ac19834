//! Device dispatch for the lowerings: CPU kernels live next to each
//! primitive; the CUDA lowerings are reached through these functions. In a
//! build without the `cuda` feature no array can live on a CUDA device, and
//! each of these reports that CUDA support was not built.

use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::prim::{ArgOp, BinaryOp, CompareOp, ReduceOp, UnaryOp};
use smallvec::SmallVec;
use xform_kernels::{DType, Shape};

#[cfg(not(feature = "cuda"))]
fn unavailable<T>(op: &str) -> Result<T> {
    Err(Error::device(op, "CUDA support was not built: enable the `cuda` feature of xform"))
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::*;
    pub fn transfer(a: &Array, device: Device) -> Result<Array> {
        let _ = a;
        match device {
            Device::Cpu => Ok(a.clone()),
            Device::Cuda(_) => unavailable("to_device"),
        }
    }
    pub fn cuda_contiguous_copy(_: &Array) -> Result<Array> {
        unavailable("copy")
    }
    pub fn cuda_unary(op: UnaryOp, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_convert(_: DType, _: &Array) -> Result<Array> {
        unavailable("convert_element_type")
    }
    pub fn cuda_binary(op: BinaryOp, _: &Array, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_compare(op: CompareOp, _: &Array, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_select(_: &Array, _: &Array, _: &Array) -> Result<Array> {
        unavailable("select")
    }
    pub fn cuda_reduce(op: ReduceOp, _: &[usize], _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_arg_reduce(op: ArgOp, _: usize, _: DType, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_cumsum(_: usize, _: bool, _: &Array) -> Result<Array> {
        unavailable("cumsum")
    }
    pub fn cuda_pad(_: &[i64], _: &[i64], _: &[usize], _: &Array, _: &Array) -> Result<Array> {
        unavailable("pad")
    }
    pub fn cuda_concatenate(_: usize, _: &[&Array]) -> Result<Array> {
        unavailable("concatenate")
    }
    pub fn cuda_dynamic_update_slice(_: &[&Array]) -> Result<Array> {
        unavailable("dynamic_update_slice")
    }
    pub fn cuda_gather(_: usize, _: usize, _: &Array, _: &Array) -> Result<Array> {
        unavailable("gather")
    }
    pub fn cuda_scatter_add(_: usize, _: usize, _: &Array, _: &Array, _: &Array) -> Result<Array> {
        unavailable("scatter_add")
    }
    pub fn cuda_gemm(_: &Array, _: &Array, _: Shape) -> Result<Array> {
        unavailable("dot_general")
    }
    pub fn cuda_write(_: &Array, _: &Array) -> Result<()> {
        unavailable("copy_")
    }
    pub fn cuda_threefry(_: &[&Array]) -> Result<SmallVec<[Array; 2]>> {
        unavailable("threefry2x32")
    }
}

pub(crate) use imp::*;
