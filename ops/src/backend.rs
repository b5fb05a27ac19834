//! Device dispatch for the lowerings: CPU kernels live next to each
//! primitive; the CUDA lowerings are reached through these functions. In a
//! build without the `cuda` feature no array can live on a CUDA device, and
//! each of these reports that CUDA support was not built.
//!
//! With the feature, each function runs the kernels of
//! `xform_kernels::cuda`. Neither this file nor the kernels crate knows an
//! op: the CUDA C of each elementwise op, reduction fold and ranking is
//! written in its family file (`prims/<family>.rs`) beside the CPU kernel,
//! and arrives here as a [`CudaExpr`], [`Fold`] or [`Ranking`].

use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::prims::cuda_c::CudaExpr;
use smallvec::SmallVec;
use xform_kernels::cuda_source::{Fold, Ranking};
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
    pub fn cuda_map(name: &str, _: Option<CudaExpr>, _: &[&Array], _: DType) -> Result<Array> {
        unavailable(name)
    }
    pub fn cuda_map_raw(name: &str, _: CudaExpr, _: &[&Array], _: DType) -> Result<Array> {
        unavailable(name)
    }
    pub fn cuda_convert(_: DType, _: &Array) -> Result<Array> {
        unavailable("convert_element_type")
    }
    pub fn cuda_reduce(name: &str, _: Option<Fold>, _: &[usize], _: &Array) -> Result<Array> {
        unavailable(name)
    }
    pub fn cuda_arg_reduce(name: &str, _: Ranking, _: usize, _: DType, _: &Array) -> Result<Array> {
        unavailable(name)
    }
    pub fn cuda_cumsum(_: Option<Fold>, _: usize, _: bool, _: &Array) -> Result<Array> {
        unavailable("cumsum")
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

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::array::Buffer;
    use crate::error::ErrorKind;
    use std::sync::RwLockReadGuard;
    use xform_kernels::cpu::reduce::reduced_shape;
    use xform_kernels::cuda::{exec, CudaBuffer, CudaError, MapOp};
    use xform_kernels::{CpuBuffer, Layout};

    // ---- plumbing -----------------------------------------------------------

    fn cuda_err(op: &str, e: CudaError) -> Error {
        match e {
            CudaError::IndexOutOfRange { index, size } => Error::new(op, ErrorKind::IndexOutOfRange { index, size }),
            CudaError::OutOfMemory { ordinal, bytes } => Error::new(
                op,
                ErrorKind::OutOfMemory { shape: None, dtype: None, device: Device::Cuda(ordinal), bytes },
            ),
            e => Error::device(op, e.to_string()),
        }
    }

    fn ordinal(a: &Array) -> usize {
        match a.device() {
            Device::Cuda(i) => i,
            Device::Cpu => 0,
        }
    }

    fn wrap(buf: CudaBuffer, shape: Shape, dtype: DType, ordinal: usize) -> Array {
        Array::from_buffer(Buffer::Cuda(buf), shape, dtype, Device::Cuda(ordinal))
    }

    /// Read guards on the operands' storages.
    fn guards<'a>(arrays: &[&'a Array]) -> Vec<RwLockReadGuard<'a, Buffer>> {
        arrays.iter().map(|a| a.read()).collect()
    }

    /// The CUDA buffer behind a guard, or an error naming `op`.
    fn cuda_buf<'a>(op: &str, g: &'a Buffer) -> Result<&'a CudaBuffer> {
        match g {
            Buffer::Cuda(b) => Ok(b),
            Buffer::Cpu(_) => Err(Error::device(op, "expected a CUDA array, found a CPU one")),
        }
    }

    /// Runs `f` on the CUDA buffers and layouts of `arrays`.
    fn with_bufs<R>(
        op: &str,
        arrays: &[&Array],
        f: impl FnOnce(&[(&CudaBuffer, &Layout)]) -> std::result::Result<R, CudaError>,
    ) -> Result<R> {
        let gs = guards(arrays);
        let mut ins = Vec::with_capacity(arrays.len());
        for (g, a) in gs.iter().zip(arrays) {
            ins.push((cuda_buf(op, g)?, &a.layout));
        }
        f(&ins).map_err(|e| cuda_err(op, e))
    }

    fn map_array(name: &str, m: &MapOp, arrays: &[&Array], out: DType) -> Result<Array> {
        let buf = with_bufs(name, arrays, |ins| exec::map(m, ins, out))?;
        Ok(wrap(buf, arrays[0].shape().clone(), out, ordinal(arrays[0])))
    }

    // ---- the lowerings ------------------------------------------------------

    pub fn transfer(a: &Array, device: Device) -> Result<Array> {
        match (a.device(), device) {
            (from, to) if from == to => Ok(a.clone()),
            (Device::Cpu, Device::Cuda(o)) => {
                let host = a.with_cpu("to_device", |b, l| {
                    xform_kernels::match_buffer!(b, v => CpuBuffer::from_vec(
                        xform_kernels::cpu::elementwise::to_contiguous(v, l, xform_kernels::cpu::Par::Seq)))
                })?;
                let buf = CudaBuffer::upload(o, &host).map_err(|e| cuda_err("to_device", e))?;
                Ok(wrap(buf, a.shape().clone(), a.dtype, o))
            }
            (Device::Cuda(_), Device::Cpu) => {
                let host = with_bufs("to_device", &[a], |ins| exec::download(ins[0].0, ins[0].1))?;
                Ok(Array::from_cpu(host, a.shape().clone()))
            }
            (Device::Cuda(_), Device::Cuda(_)) => transfer(&transfer(a, Device::Cpu)?, device),
            (Device::Cpu, Device::Cpu) => Ok(a.clone()),
        }
    }

    pub fn cuda_contiguous_copy(a: &Array) -> Result<Array> {
        let buf = with_bufs("copy", &[a], |ins| exec::to_contiguous(ins[0].0, ins[0].1))?;
        Ok(wrap(buf, a.shape().clone(), a.dtype, ordinal(a)))
    }

    /// Runs an elementwise op's CUDA form; `None` (the op has none for
    /// this dtype, which the shape rule refuses first) is a dtype error.
    pub fn cuda_map(name: &str, e: Option<CudaExpr>, arrays: &[&Array], out: DType) -> Result<Array> {
        let e = e.ok_or_else(|| Error::dtype(name, "has no CUDA kernel for this dtype", &[arrays[0].dtype]))?;
        map_array(name, &e.map_op(name, false), arrays, out)
    }

    /// [`cuda_map`] on storage values (data movement, no widening).
    pub fn cuda_map_raw(name: &str, e: CudaExpr, arrays: &[&Array], out: DType) -> Result<Array> {
        map_array(name, &e.map_op(name, true), arrays, out)
    }

    pub fn cuda_convert(dtype: DType, x: &Array) -> Result<Array> {
        let buf = with_bufs("convert_element_type", &[x], |ins| exec::convert(ins[0].0, ins[0].1, dtype))?;
        Ok(wrap(buf, x.shape().clone(), dtype, ordinal(x)))
    }

    pub fn cuda_reduce(name: &str, f: Option<Fold>, axes: &[usize], x: &Array) -> Result<Array> {
        let f = f.ok_or_else(|| Error::dtype(name, "cannot reduce bool values; convert them first", &[x.dtype]))?;
        let buf = with_bufs(name, &[x], |ins| exec::reduce(&f, ins[0].0, ins[0].1, axes, x.dtype))?;
        Ok(wrap(buf, reduced_shape(x.shape(), axes), x.dtype, ordinal(x)))
    }

    pub fn cuda_arg_reduce(name: &str, r: Ranking, axis: usize, index_dtype: DType, x: &Array) -> Result<Array> {
        let buf = with_bufs(name, &[x], |ins| exec::arg_reduce(&r, ins[0].0, ins[0].1, axis, index_dtype))?;
        Ok(wrap(buf, reduced_shape(x.shape(), &[axis]), index_dtype, ordinal(x)))
    }

    pub fn cuda_cumsum(f: Option<Fold>, axis: usize, reverse: bool, x: &Array) -> Result<Array> {
        let f = f.ok_or_else(|| Error::dtype("cumsum", "cannot sum bool values; convert them first", &[x.dtype]))?;
        let buf = with_bufs("cumsum", &[x], |ins| exec::cumulative(&f, ins[0].0, ins[0].1, axis, reverse, x.dtype))?;
        Ok(wrap(buf, x.shape().clone(), x.dtype, ordinal(x)))
    }

    /// Runs a launch of the kernels crate on the operands' CUDA buffers and
    /// makes its result an array of `shape` and `dtype` on their device:
    /// how a family lowers to a CUDA kernel of its own without a function
    /// here (its call sits under `#[cfg(feature = "cuda")]`; without the
    /// feature no array lives on a CUDA device).
    pub fn cuda_launch(
        op: &str,
        arrays: &[&Array],
        shape: Shape,
        dtype: DType,
        launch: impl FnOnce(&[(&CudaBuffer, &Layout)]) -> std::result::Result<CudaBuffer, CudaError>,
    ) -> Result<Array> {
        let buf = with_bufs(op, arrays, launch)?;
        Ok(wrap(buf, shape, dtype, ordinal(arrays[0])))
    }

    pub fn cuda_gemm(a: &Array, b: &Array, shape: Shape) -> Result<Array> {
        let buf = with_bufs("dot_general", &[a, b], |ins| exec::gemm(ins[0].0, ins[0].1, ins[1].0, ins[1].1))?;
        Ok(wrap(buf, shape, a.dtype, ordinal(a)))
    }

    pub fn cuda_write(dst: &Array, src: &Array) -> Result<()> {
        let (gs, mut gd) = Array::read_and_write(src, dst);
        let s = cuda_buf("copy_", &gs)?;
        let d = match &mut *gd {
            Buffer::Cuda(b) => b,
            Buffer::Cpu(_) => return Err(Error::device("copy_", "expected a CUDA array, found a CPU one")),
        };
        exec::write_strided(d, &dst.layout, s, &src.layout).map_err(|e| cuda_err("copy_", e))
    }

    /// Runs a fused elementwise kernel (`prims::jit::run_fused_cuda`).
    pub fn cuda_fused(
        kernel: &xform_kernels::cuda_source::Kernel,
        in_dtypes: &[DType],
        arrays: &[&Array],
        shape: &Shape,
        outs: &[DType],
    ) -> Result<Vec<Array>> {
        let bufs = with_bufs("fused", arrays, |ins| exec::fused(kernel, in_dtypes, ins, shape, outs))?;
        let o = ordinal(arrays[0]);
        Ok(bufs.into_iter().zip(outs).map(|(b, &d)| wrap(b, shape.clone(), d, o)).collect())
    }

    pub fn cuda_threefry(ins: &[&Array]) -> Result<SmallVec<[Array; 2]>> {
        let (y0, y1) = with_bufs("threefry2x32", ins, |b| exec::threefry([b[0], b[1], b[2], b[3]]))?;
        let (shape, o) = (ins[0].shape().clone(), ordinal(ins[0]));
        Ok(smallvec::smallvec![wrap(y0, shape.clone(), DType::U32, o), wrap(y1, shape, DType::U32, o)])
    }
}
