//! The backend seam: the one place that decides where a primitive runs.
//!
//! A primitive on CPU arrays runs its family's own lowering
//! (`Family::lower`: the CPU kernels live beside each primitive's other
//! rules). On any other device it runs the family's device lowering
//! (`Family::lower_device`), which states the work in the device-neutral
//! vocabulary of [`Backend`] (map, reduce, arg-reduce, cumsum, GEMM,
//! convolution, gather and scatter, pad and concatenate, windows, random
//! bits, copies, writes, fused kernels and transfers) and hands it to the
//! device's backend, chosen by [`of`] here and nowhere else. Family files
//! carry no device branches, and a CPU path given a device array is an
//! internal error ([`Array::with_cpu`]), never a silent transfer.
//!
//! Neither this file nor the kernels crate knows an op: the CUDA C of each
//! elementwise op, reduction fold and ranking is written in its family
//! file (`prims/<family>.rs`) beside the CPU kernel, and arrives here as a
//! [`CudaExpr`], [`Fold`] or [`Ranking`].
//!
//! The array methods that copy, move, read or write elements
//! (`Array::contiguous_copy`, `to_device`, `to_vec`, `overwrite_with`, the
//! eager in-place write `write_checked`) are defined here too: each goes
//! through the backend of the array's device, or the array's own CPU code.
//!
//! Adding a backend (a third device, say) is an implementation of
//! [`Backend`], a `Device` variant and its arm in [`of`]; several devices
//! of one kind are one backend (the CUDA one reads each array's ordinal).
//! In a build without the `cuda` feature no array can live on a CUDA
//! device, and [`of`] reports that CUDA support was not built.

use crate::array::{guard_alloc, Array, Device};
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::prim::Prim;
use crate::prims::cuda_c::CudaExpr;
use smallvec::SmallVec;
use xform_kernels::conv_geom::ConvGeometry;
use xform_kernels::cpu::indexing::GatherExtents;
use xform_kernels::cpu::window::WindowGeom;
use xform_kernels::cuda_source::{Fold, Kernel, Ranking};
use xform_kernels::{CpuBuffer, DType, Element, Shape};

/// The kernels of a device other than the CPU, in the vocabulary the
/// families' device lowerings use. Every operand lives on the backend's
/// device (the interpreter refuses mixed devices first); results are
/// fresh arrays there. Shapes are the results' (the shape rules computed
/// them); an op that has no kernel for a dtype is a dtype error.
pub trait Backend: Sync {
    /// Elementwise `out[i] = e(ins[0][i], ...)` over operands of one
    /// logical shape (any layouts), in the compute type of the dtype;
    /// `None`: the op has no form for this dtype.
    fn map(&self, name: &str, e: Option<CudaExpr>, ins: &[&Array], out: DType) -> Result<Array>;
    /// [`Backend::map`] on storage values (data movement, no widening).
    fn map_raw(&self, name: &str, e: CudaExpr, ins: &[&Array], out: DType) -> Result<Array>;
    /// `x` converted to `dtype`.
    fn convert(&self, dtype: DType, x: &Array) -> Result<Array>;
    /// `x` folded by `f` over `axes` (`None`: the dtype cannot be reduced).
    fn reduce(&self, name: &str, f: Option<Fold>, axes: &[usize], x: &Array) -> Result<Array>;
    /// The index of the first element ranked best by `r` along `axis`.
    fn arg_reduce(&self, name: &str, r: Ranking, axis: usize, index_dtype: DType, x: &Array) -> Result<Array>;
    /// Inclusive running fold along `axis`, from the end if `reverse`.
    fn cumsum(&self, f: Option<Fold>, axis: usize, reverse: bool, x: &Array) -> Result<Array>;
    /// Batched `a @ b` of `[bt, m, k]` and `[bt, k, n]` operands, shaped `shape`.
    fn gemm(&self, a: &Array, b: &Array, shape: Shape) -> Result<Array>;
    /// The convolution of operands in the canonical layouts of
    /// `prims::conv` (batch-major result, shaped `shape`).
    fn conv(&self, lhs: &Array, rhs: &Array, g: &ConvGeometry, shape: Shape) -> Result<Array>;
    /// `x` gathered at `idx` (extents `e`), shaped `shape`.
    fn gather(&self, x: &Array, idx: &Array, e: GatherExtents, shape: Shape) -> Result<Array>;
    /// `x` plus `u` scattered at `idx` (extents `e`).
    fn scatter_add(&self, x: &Array, idx: &Array, u: &Array, e: GatherExtents) -> Result<Array>;
    /// `x` with `u` written at `start`.
    fn dynamic_update_slice(&self, x: &Array, u: &Array, start: &[usize]) -> Result<Array>;
    /// `x` padded with the scalar `v` (negative amounts crop).
    fn pad(&self, x: &Array, v: &Array, low: &[i64], high: &[i64], interior: &[usize], shape: Shape) -> Result<Array>;
    /// The operands joined along `axis`, shaped `shape`.
    fn concatenate(&self, ins: &[&Array], axis: usize, shape: Shape) -> Result<Array>;
    /// `x` folded by `f` over each window of `g`, shaped `shape`.
    fn reduce_window(&self, name: &str, f: Fold, x: &Array, g: &WindowGeom, shape: Shape) -> Result<Array>;
    /// `t` at each window's first maximum (`max`) or minimum of `x`.
    fn select_and_gather(
        &self,
        name: &str,
        max: bool,
        t: &Array,
        x: &Array,
        g: &WindowGeom,
        shape: Shape,
    ) -> Result<Array>;
    /// Zeros shaped like `x` plus each element of `ct` at its window's
    /// first maximum (`max`) or minimum.
    fn select_and_scatter(&self, name: &str, max: bool, ct: &Array, x: &Array, g: &WindowGeom) -> Result<Array>;
    /// Threefry-2x32 of four u32 operands: two u32 results.
    fn threefry(&self, ins: &[&Array]) -> Result<SmallVec<[Array; 2]>>;
    /// A contiguous copy of `a` in fresh storage.
    fn contiguous_copy(&self, a: &Array) -> Result<Array>;
    /// `src`'s elements written into `dst`'s (through their layouts).
    fn write(&self, dst: &Array, src: &Array) -> Result<()>;
    /// A fused elementwise kernel (generated by jit for inputs of dtypes
    /// `in_dtypes`) over `arrays` of logical shape `shape`: its outputs of
    /// dtypes `outs`, contiguous.
    fn fused(
        &self,
        kernel: &Kernel,
        in_dtypes: &[DType],
        arrays: &[&Array],
        shape: &Shape,
        outs: &[DType],
    ) -> Result<Vec<Array>>;
    /// `a` copied to the host.
    fn download(&self, a: &Array) -> Result<Array>;
    /// The host array `a` copied to `device` (one of this backend's).
    fn upload(&self, a: &Array, device: Device) -> Result<Array>;
}

/// The backend of `device`: the one place that maps devices to backends.
///
/// # Errors
/// The CPU (its kernels are the families' own lowerings: asking for its
/// backend is a bug), or a device whose support was not built.
pub fn of(device: Device) -> Result<&'static dyn Backend> {
    match device {
        Device::Cpu => Err(Error::internal("backend", "the CPU runs the families' own lowerings, not a backend")),
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => Ok(&cuda::CUDA),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => {
            Err(Error::device("to_device", "CUDA support was not built: enable the `cuda` feature of xform"))
        }
    }
}

/// Runs `prim` on `ins` (checked by its shape rule): its CPU lowering on
/// CPU arrays (and where there are no operands: such a primitive places
/// its result itself), its device lowering through the operands' backend
/// otherwise.
pub(crate) fn lower(prim: &Prim, ins: &[&Array]) -> Result<Outs> {
    match ins.first().map(|a| a.device()) {
        None | Some(Device::Cpu) => crate::prim::lower_cpu(prim, ins),
        Some(d) => crate::prim::lower_device(prim, ins, of(d)?),
    }
}

// The array methods that copy, move, read or write elements: each goes
// through the backend of the array's device (array.rs holds the storage
// and its CPU-only parts).
impl Array {
    /// `shape` filled with `value`, stored once and broadcast (stride 0): a
    /// read-only constant that costs one element however large it is.
    pub fn full_broadcast(shape: Shape, dtype: DType, value: f64, device: Device) -> Result<Array> {
        let one = Array::from_cpu(CpuBuffer::full(dtype, 1, value), Shape::scalar()).to_device(device)?;
        let dims: Vec<usize> = vec![];
        Ok(one.with_layout(one.layout.broadcast_in_dim(&shape, &dims)))
    }

    /// The logical elements, row-major, as `T` (which must be the dtype).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::dtype(
                "to_vec",
                format!("the array holds {}, not {}", self.dtype, T::DTYPE),
                &[self.dtype, T::DTYPE],
            ));
        }
        let host = self.to_device(Device::Cpu)?;
        let v = host.with_cpu("to_vec", |b, l| {
            guard_alloc("to_vec", &l.shape, self.dtype, Device::Cpu, || {
                xform_kernels::cpu::elementwise::to_contiguous(b.as_slice::<T>(), l, xform_kernels::cpu::Par::Seq)
            })
        })?;
        v
    }

    /// A contiguous copy in fresh storage on the same device.
    pub fn contiguous_copy(&self) -> Result<Array> {
        match self.device() {
            Device::Cpu => self.cpu_contiguous_copy(),
            d => of(d)?.contiguous_copy(self),
        }
    }

    /// This array if its layout is contiguous, else a contiguous copy.
    pub fn contiguous(&self) -> Result<Array> {
        if self.layout.is_contiguous() {
            Ok(self.clone())
        } else {
            self.contiguous_copy()
        }
    }

    /// Writes `src` (same shape and dtype, same device, any layout) into
    /// this array's storage, in place, whatever transforms are active: the
    /// array itself is written, not a tensor holding it (jit's CUDA graph
    /// replay writes its arguments into the buffers the graph reads this
    /// way).
    ///
    /// # Errors
    /// A shape, dtype or device mismatch, a target whose elements share
    /// memory (a broadcast view), a source overlapping it, or a device
    /// failure.
    pub fn overwrite_with(&self, src: &Array) -> Result<()> {
        if self.shape() != src.shape() || self.dtype != src.dtype {
            return Err(Error::invalid(
                "overwrite_with",
                format!(
                    "writing {}{} into {}{}",
                    src.dtype.short_name(),
                    src.shape(),
                    self.dtype.short_name(),
                    self.shape()
                ),
            ));
        }
        self.write_checked("overwrite_with", src)
    }

    /// A copy on `device` (this array itself if it is there already).
    pub fn to_device(&self, device: Device) -> Result<Array> {
        // Through the host where neither end is the CPU.
        match (self.device(), device) {
            (from, to) if from == to => Ok(self.clone()),
            (Device::Cpu, to) => of(to)?.upload(self, to),
            (from, Device::Cpu) => of(from)?.download(self),
            (from, to) => of(to)?.upload(&of(from)?.download(self)?, to),
        }
    }

    /// Eager in-place write of `src` into this array's storage (same shape
    /// and dtype): refused where the target is a broadcast view or the
    /// source overlaps it in memory, or on another device.
    pub(crate) fn write_checked(&self, op: &str, src: &Array) -> Result<()> {
        if self.layout.has_internal_overlap() {
            return Err(Error::in_place(
                op,
                "the target is a broadcast view: several of its elements share one memory location",
            ));
        }
        let src = if src.shares_storage(self) {
            if src.layout == self.layout {
                return Ok(()); // writing a tensor onto itself
            }
            let (a, b) = (src.layout.storage_span(), self.layout.storage_span());
            if a.start < b.end && b.start < a.end {
                return Err(Error::in_place(
                    op,
                    "the source overlaps the target in memory (a view of the same tensor); copy the source first",
                ));
            }
            src.contiguous_copy()?
        } else {
            src.clone()
        };
        if self.device() != src.device() {
            return Err(Error::device(
                op,
                format!("cannot write a {} tensor into a {} tensor", src.device(), self.device()),
            ));
        }
        match self.device() {
            Device::Cpu => self.cpu_write(op, &src),
            d => of(d)?.write(self, &src),
        }
    }
}

/// The CUDA backend: the kernels of `xform_kernels::cuda` on each array's
/// device (its ordinal).
/// One member of a group of devices that exchange arrays directly (an
/// NCCL communicator between CUDA devices, of one process or of several):
/// what `pmap` over GPUs and the process group's GPU collectives gather
/// operands through. Without the `cuda` feature none can be made.
pub struct GroupMember {
    #[cfg(feature = "cuda")]
    inner: xform_kernels::cuda::nccl::NcclMember,
    #[cfg(not(feature = "cuda"))]
    _none: std::convert::Infallible,
}

#[cfg(not(feature = "cuda"))]
fn no_cuda<T>(op: &str) -> Result<T> {
    Err(Error::device(op, "CUDA support was not built: enable the `cuda` feature of xform"))
}

impl GroupMember {
    /// Whether NCCL can be loaded (the error names the library and how to
    /// install it).
    ///
    /// # Errors
    /// CUDA support not built, or NCCL missing.
    pub fn available() -> Result<()> {
        #[cfg(feature = "cuda")]
        return xform_kernels::cuda::nccl::nccl_available().map_err(|e| Error::device("nccl", e.to_string()));
        #[cfg(not(feature = "cuda"))]
        no_cuda("nccl")
    }

    /// One group over CUDA devices `0..n` of this process; member `k`
    /// drives `cuda:k`.
    ///
    /// # Errors
    /// CUDA support not built, NCCL or a device missing, NCCL failing.
    pub fn cuda_devices(n: usize) -> Result<Vec<GroupMember>> {
        #[cfg(feature = "cuda")]
        {
            let ordinals: Vec<usize> = (0..n).collect();
            let members = xform_kernels::cuda::nccl::NcclMember::for_devices(&ordinals)
                .map_err(|e| Error::device("pmap", e.to_string()))?;
            Ok(members.into_iter().map(|inner| GroupMember { inner }).collect())
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = n;
            no_cuda("pmap")
        }
    }

    /// A unique id naming a new group of several processes (one process
    /// makes it and sends it to the others).
    ///
    /// # Errors
    /// CUDA support not built, NCCL missing or failing.
    pub fn unique_id() -> Result<Vec<u8>> {
        #[cfg(feature = "cuda")]
        return xform_kernels::cuda::nccl::NcclMember::unique_id().map_err(|e| Error::device("nccl", e.to_string()));
        #[cfg(not(feature = "cuda"))]
        no_cuda("nccl")
    }

    /// This process's member, rank `rank` of `world`, driving `cuda:ordinal`,
    /// of the group `id` names.
    ///
    /// # Errors
    /// CUDA support not built, a malformed id, NCCL or the device missing.
    pub fn from_rank(ordinal: usize, rank: usize, world: usize, id: &[u8]) -> Result<GroupMember> {
        #[cfg(feature = "cuda")]
        {
            let inner = xform_kernels::cuda::nccl::NcclMember::from_rank(ordinal, rank, world, id)
                .map_err(|e| Error::device("nccl", e.to_string()))?;
            Ok(GroupMember { inner })
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (ordinal, rank, world, id);
            no_cuda("nccl")
        }
    }

    /// The device this member drives.
    pub fn device(&self) -> Device {
        #[cfg(feature = "cuda")]
        return Device::Cuda(self.inner.ordinal());
        #[cfg(not(feature = "cuda"))]
        match self._none {}
    }

    /// Every member's `a` (the same shape and dtype at every member, which
    /// the caller agreed on first: NCCL cannot time out) stacked along a new
    /// leading axis, in rank order, on this member's device.
    ///
    /// # Errors
    /// `a` on another device, or NCCL failing.
    pub fn all_gather(&self, a: &Array) -> Result<Array> {
        #[cfg(feature = "cuda")]
        return cuda::all_gather_nccl(a, &self.inner);
        #[cfg(not(feature = "cuda"))]
        {
            let _ = a;
            match self._none {}
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::array::Buffer;
    use crate::error::ErrorKind;
    use std::sync::RwLockReadGuard;
    use xform_kernels::cpu::reduce::reduced_shape;
    use xform_kernels::cuda::{exec, CudaBuffer, CudaError, MapOp};
    use xform_kernels::{CpuBuffer, Layout};

    pub(super) struct Cuda;
    pub(super) static CUDA: Cuda = Cuda;

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

    /// Runs a launch of the kernels crate on the operands' CUDA buffers and
    /// makes its result an array of `shape` and `dtype` on their device.
    fn launch(
        op: &str,
        arrays: &[&Array],
        shape: Shape,
        dtype: DType,
        launch: impl FnOnce(&[(&CudaBuffer, &Layout)]) -> std::result::Result<CudaBuffer, CudaError>,
    ) -> Result<Array> {
        let buf = with_bufs(op, arrays, launch)?;
        Ok(wrap(buf, shape, dtype, ordinal(arrays[0])))
    }

    /// `a` gathered from every member of `member`'s communicator:
    /// `[members, ...shape]` on its device.
    pub(super) fn all_gather_nccl(a: &Array, member: &xform_kernels::cuda::nccl::NcclMember) -> Result<Array> {
        let op = "all_gather (NCCL)";
        if a.device() != Device::Cuda(member.ordinal()) {
            return Err(Error::device(
                op,
                format!("the operand is on {}, the member drives cuda:{}", a.device(), member.ordinal()),
            ));
        }
        // fresh contiguous storage from element 0
        let a = a.contiguous_copy()?;
        let out = with_bufs(op, &[&a], |ins| member.all_gather(ins[0].0))?;
        let mut dims = vec![member.world_size()];
        dims.extend_from_slice(a.shape().dims());
        Ok(wrap(out, Shape::from(dims), a.dtype, member.ordinal()))
    }

    fn map_array(name: &str, m: &MapOp, arrays: &[&Array], out: DType) -> Result<Array> {
        launch(name, arrays, arrays[0].shape().clone(), out, |ins| exec::map(m, ins, out))
    }

    // ---- the kernels --------------------------------------------------------

    impl Backend for Cuda {
        fn map(&self, name: &str, e: Option<CudaExpr>, ins: &[&Array], out: DType) -> Result<Array> {
            let e = e.ok_or_else(|| Error::dtype(name, "has no CUDA kernel for this dtype", &[ins[0].dtype]))?;
            map_array(name, &e.map_op(name, false), ins, out)
        }

        fn map_raw(&self, name: &str, e: CudaExpr, ins: &[&Array], out: DType) -> Result<Array> {
            map_array(name, &e.map_op(name, true), ins, out)
        }

        fn convert(&self, dtype: DType, x: &Array) -> Result<Array> {
            launch("convert_element_type", &[x], x.shape().clone(), dtype, |ins| {
                exec::convert(ins[0].0, ins[0].1, dtype)
            })
        }

        fn reduce(&self, name: &str, f: Option<Fold>, axes: &[usize], x: &Array) -> Result<Array> {
            let f = f.ok_or_else(|| Error::dtype(name, "cannot reduce bool values; convert them first", &[x.dtype]))?;
            launch(name, &[x], reduced_shape(x.shape(), axes), x.dtype, |ins| {
                exec::reduce(&f, ins[0].0, ins[0].1, axes, x.dtype)
            })
        }

        fn arg_reduce(&self, name: &str, r: Ranking, axis: usize, index_dtype: DType, x: &Array) -> Result<Array> {
            launch(name, &[x], reduced_shape(x.shape(), &[axis]), index_dtype, |ins| {
                exec::arg_reduce(&r, ins[0].0, ins[0].1, axis, index_dtype)
            })
        }

        fn cumsum(&self, f: Option<Fold>, axis: usize, reverse: bool, x: &Array) -> Result<Array> {
            let f =
                f.ok_or_else(|| Error::dtype("cumsum", "cannot sum bool values; convert them first", &[x.dtype]))?;
            launch("cumsum", &[x], x.shape().clone(), x.dtype, |ins| {
                exec::cumulative(&f, ins[0].0, ins[0].1, axis, reverse, x.dtype)
            })
        }

        fn gemm(&self, a: &Array, b: &Array, shape: Shape) -> Result<Array> {
            launch("dot_general", &[a, b], shape, a.dtype, |ins| exec::gemm(ins[0].0, ins[0].1, ins[1].0, ins[1].1))
        }

        fn conv(&self, lhs: &Array, rhs: &Array, g: &ConvGeometry, shape: Shape) -> Result<Array> {
            launch("conv_general_dilated", &[lhs, rhs], shape, lhs.dtype, |b| {
                xform_kernels::cuda::exec::conv_forward_layouts(b[0].0, b[0].1, b[1].0, b[1].1, g, lhs.dtype)
            })
        }

        fn gather(&self, x: &Array, idx: &Array, e: GatherExtents, shape: Shape) -> Result<Array> {
            launch("gather", &[x, idx], shape, x.dtype, |b| exec::gather(b[0].0, b[0].1, b[1].0, b[1].1, e))
        }

        fn scatter_add(&self, x: &Array, idx: &Array, u: &Array, e: GatherExtents) -> Result<Array> {
            launch("scatter_add", &[x, idx, u], x.shape().clone(), x.dtype, |b| {
                exec::scatter_add(b[0].0, b[0].1, b[1].0, b[1].1, b[2].0, b[2].1, e)
            })
        }

        fn dynamic_update_slice(&self, x: &Array, u: &Array, start: &[usize]) -> Result<Array> {
            launch("dynamic_update_slice", &[x, u], x.shape().clone(), x.dtype, |b| {
                exec::dynamic_update_slice(b[0].0, b[0].1, b[1].0, b[1].1, start)
            })
        }

        fn pad(
            &self,
            x: &Array,
            v: &Array,
            low: &[i64],
            high: &[i64],
            interior: &[usize],
            shape: Shape,
        ) -> Result<Array> {
            launch("pad", &[x, v], shape, x.dtype, |b| exec::pad(b[0].0, b[0].1, b[1].0, b[1].1, low, high, interior))
        }

        fn concatenate(&self, ins: &[&Array], axis: usize, shape: Shape) -> Result<Array> {
            launch("concatenate", ins, shape.clone(), ins[0].dtype, |parts| exec::concatenate(parts, axis, &shape))
        }

        fn reduce_window(&self, name: &str, f: Fold, x: &Array, g: &WindowGeom, shape: Shape) -> Result<Array> {
            launch(name, &[x], shape, x.dtype, |b| exec::reduce_window(&f, b[0].0, b[0].1, g))
        }

        fn select_and_gather(
            &self,
            name: &str,
            max: bool,
            t: &Array,
            x: &Array,
            g: &WindowGeom,
            shape: Shape,
        ) -> Result<Array> {
            launch(name, &[t, x], shape, x.dtype, |b| exec::select_and_gather(max, b[0].0, b[0].1, b[1].0, b[1].1, g))
        }

        fn select_and_scatter(&self, name: &str, max: bool, ct: &Array, x: &Array, g: &WindowGeom) -> Result<Array> {
            launch(name, &[ct, x], x.shape().clone(), x.dtype, |b| {
                exec::select_and_scatter(max, b[0].0, b[0].1, b[1].0, b[1].1, g)
            })
        }

        fn threefry(&self, ins: &[&Array]) -> Result<SmallVec<[Array; 2]>> {
            let (y0, y1) = with_bufs("threefry2x32", ins, |b| exec::threefry([b[0], b[1], b[2], b[3]]))?;
            let (shape, o) = (ins[0].shape().clone(), ordinal(ins[0]));
            Ok(smallvec::smallvec![wrap(y0, shape.clone(), DType::U32, o), wrap(y1, shape, DType::U32, o)])
        }

        fn contiguous_copy(&self, a: &Array) -> Result<Array> {
            launch("copy", &[a], a.shape().clone(), a.dtype, |ins| exec::to_contiguous(ins[0].0, ins[0].1))
        }

        fn write(&self, dst: &Array, src: &Array) -> Result<()> {
            let (gs, mut gd) = Array::read_and_write(src, dst);
            let s = cuda_buf("copy_", &gs)?;
            let d = match &mut *gd {
                Buffer::Cuda(b) => b,
                Buffer::Cpu(_) => return Err(Error::device("copy_", "expected a CUDA array, found a CPU one")),
            };
            exec::write_strided(d, &dst.layout, s, &src.layout).map_err(|e| cuda_err("copy_", e))
        }

        fn fused(
            &self,
            kernel: &Kernel,
            in_dtypes: &[DType],
            arrays: &[&Array],
            shape: &Shape,
            outs: &[DType],
        ) -> Result<Vec<Array>> {
            let bufs = with_bufs("fused", arrays, |ins| exec::fused(kernel, in_dtypes, ins, shape, outs))?;
            let o = ordinal(arrays[0]);
            Ok(bufs.into_iter().zip(outs).map(|(b, &d)| wrap(b, shape.clone(), d, o)).collect())
        }

        fn download(&self, a: &Array) -> Result<Array> {
            let host = with_bufs("to_device", &[a], |ins| exec::download(ins[0].0, ins[0].1))?;
            Ok(Array::from_cpu(host, a.shape().clone()))
        }

        fn upload(&self, a: &Array, device: Device) -> Result<Array> {
            let Device::Cuda(o) = device else {
                return Err(Error::internal("to_device", format!("the CUDA backend asked to upload to {device}")));
            };
            let host = a.with_cpu("to_device", |b, l| {
                xform_kernels::match_buffer!(b, v => CpuBuffer::from_vec(
                    xform_kernels::cpu::elementwise::to_contiguous(v, l, xform_kernels::cpu::Par::Seq)))
            })?;
            let buf = CudaBuffer::upload(o, &host).map_err(|e| cuda_err("to_device", e))?;
            Ok(wrap(buf, a.shape().clone(), a.dtype, o))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::Buffer;
    use crate::prim::UnaryOp;
    use xform_kernels::CpuBuffer;

    /// An array that claims to live on cuda:0 (its elements are host
    /// memory, which no path below may read as if it were on the CPU).
    fn on_device() -> Array {
        Array::from_buffer(Buffer::Cpu(CpuBuffer::F32(vec![1.0, 2.0])), Shape::from([2]), DType::F32, Device::Cuda(0))
    }

    #[test]
    fn a_cpu_path_given_a_device_array_is_an_internal_error() {
        let e = on_device().with_cpu("probe", |b, _| b.len()).unwrap_err();
        assert!(e.to_string().contains("internal error") && e.to_string().contains("cuda:0"), "{e}");
        assert!(of(Device::Cpu).is_err(), "the CPU has no backend: its kernels are the families'");
    }

    #[test]
    fn a_primitive_on_a_device_array_goes_to_the_device_backend() {
        let x = on_device();
        let r = lower(&Prim::Unary(UnaryOp::Exp), &[&x]);
        // never the CPU kernel on the host copy: the device's backend runs
        // it, or (without the feature) says its support was not built
        match r {
            Err(e) if cfg!(not(feature = "cuda")) => assert!(e.to_string().contains("cuda"), "{e}"),
            Err(_) => {} // with the feature and no GPU: the device is missing
            Ok(_) => panic!("a fake device array was computed on"),
        }
        assert!(x.contiguous_copy().is_err() && x.to_device(Device::Cpu).is_err());
        assert!(x.write_checked("copy_", &on_device()).is_err());
    }
}
