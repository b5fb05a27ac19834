//! Concrete arrays: shared storage (CPU or CUDA) plus a strided layout.
//!
//! An [`Array`] is a cheap-to-clone, `Send` handle. Views (transpose,
//! broadcast, slice, reversal, reshape of compatible strides) share the
//! storage and differ only in their [`Layout`]; a write through one is seen
//! by all (PyTorch semantics).

use crate::counted::{pooled, Counted};
pub use crate::device::{default_device, set_default_device, Device};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use xform_kernels::{CpuBuffer, DType, Element, Layout, Shape};

/// The elements of one storage, on its device.
#[derive(Debug)]
pub enum Buffer {
    /// Host elements.
    Cpu(CpuBuffer),
    /// Device elements.
    #[cfg(feature = "cuda")]
    Cuda(xform_kernels::cuda::CudaBuffer),
}

impl Buffer {
    /// The CPU elements, or an error naming `op` for a device buffer.
    pub fn cpu(&self, op: &str) -> Result<&CpuBuffer> {
        let _ = op;
        match self {
            Buffer::Cpu(b) => Ok(b),
            #[cfg(feature = "cuda")]
            Buffer::Cuda(_) => Err(Error::device(op, "expected a CPU array, found a CUDA one")),
        }
    }

    /// The CPU elements mutably, or an error naming `op` for a device buffer.
    pub fn cpu_mut(&mut self, op: &str) -> Result<&mut CpuBuffer> {
        let _ = op;
        match self {
            Buffer::Cpu(b) => Ok(b),
            #[cfg(feature = "cuda")]
            Buffer::Cuda(_) => Err(Error::device(op, "expected a CPU array, found a CUDA one")),
        }
    }
}

/// Storage shared by an array and its views.
#[derive(Debug)]
pub struct Storage {
    data: RwLock<Buffer>,
    device: Device,
    /// Bumped by every write access (PyTorch's version counter, shared by
    /// all views of the storage): a recorded program compares it with the
    /// version it saw, so an in-place write after recording is an error,
    /// never a silently different number.
    version: AtomicU64,
    /// Held by an eager in-place op for its whole read-modify-write (see
    /// [`Array::lock_updates`]), so that concurrent in-place ops on this
    /// storage (through any of its views) serialize instead of losing
    /// updates.
    updates: Mutex<()>,
}

pooled!(Storage, 256);

impl Storage {
    fn new(data: Buffer, device: Device) -> Storage {
        Storage { data: RwLock::new(data), device, version: AtomicU64::new(0), updates: Mutex::new(()) }
    }
}

/// A concrete array: storage, layout and dtype.
#[derive(Clone, Debug)]
pub struct Array {
    storage: Counted<Storage>,
    /// Shape, strides and offset into the storage.
    pub layout: Layout,
    /// Element type (the storage's).
    pub dtype: DType,
}

impl Array {
    /// Shape, dtype and device, borrowed.
    pub fn aval_ref(&self) -> AvalRef<'_> {
        AvalRef { shape: &self.layout.shape, dtype: self.dtype, device: self.device() }
    }

    /// A contiguous CPU array over `buf`.
    ///
    /// # Panics
    /// If `buf` does not hold exactly `shape.numel()` elements.
    pub fn from_cpu(buf: CpuBuffer, shape: Shape) -> Array {
        debug_assert_eq!(buf.len(), shape.numel(), "buffer length does not match shape {shape}");
        let dtype = buf.dtype();
        Array {
            storage: Counted::new(Storage::new(Buffer::Cpu(buf), Device::Cpu)),
            layout: Layout::contiguous(shape),
            dtype,
        }
    }

    /// A contiguous array over a buffer on any device.
    pub fn from_buffer(buf: Buffer, shape: Shape, dtype: DType, device: Device) -> Array {
        Array { storage: Counted::new(Storage::new(buf, device)), layout: Layout::contiguous(shape), dtype }
    }

    /// A contiguous CPU array of `shape` filled with `value` (cast like
    /// numpy), or an out-of-memory error naming `op`.
    pub fn try_full(op: &str, shape: Shape, dtype: DType, value: f64) -> Result<Array> {
        let buf = guard_alloc(op, &shape, dtype, Device::Cpu, || CpuBuffer::full(dtype, shape.numel(), value))?;
        Ok(Array::from_cpu(buf, shape))
    }

    /// A contiguous CPU array of `shape` whose row-major elements are
    /// `f(0), f(1), ...`, or an out-of-memory error naming `op`.
    pub fn try_from_fn<T: Element>(op: &str, shape: Shape, f: impl FnMut(usize) -> T) -> Result<Array> {
        let v = guard_alloc(op, &shape, T::DTYPE, Device::Cpu, || xform_kernels::pool::from_fn(shape.numel(), f))?;
        Ok(Array::from_cpu(CpuBuffer::from_vec(v), shape))
    }

    /// The same storage seen through another layout.
    pub fn with_layout(&self, layout: Layout) -> Array {
        Array { storage: self.storage.clone(), layout, dtype: self.dtype }
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.layout.shape
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.storage.device
    }

    /// True if both arrays are views of one storage.
    pub fn shares_storage(&self, other: &Array) -> bool {
        self.storage.ptr_eq(&other.storage)
    }

    /// True if no other array or view holds this storage.
    pub fn is_unique(&self) -> bool {
        self.storage.strong_count() == 1
    }

    /// Read access to the storage.
    pub fn read(&self) -> RwLockReadGuard<'_, Buffer> {
        self.storage.data.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the storage. Bumps the storage's version (see
    /// [`Array::storage_version`]).
    pub fn write(&self) -> RwLockWriteGuard<'_, Buffer> {
        let guard = self.storage.data.write().unwrap_or_else(|e| e.into_inner());
        self.storage.version.fetch_add(1, Ordering::Relaxed);
        guard
    }

    /// Serializes eager in-place ops on this storage: an in-place op holds
    /// the guard from before it reads its target until after it wrote it,
    /// so `x.add_scalar_(1.0)` on two threads at once adds 2 (the data lock
    /// alone is taken per read and per write, and a read-modify-write made
    /// of the two could lose the other thread's update). Readers do not
    /// take it.
    pub fn lock_updates(&self) -> MutexGuard<'_, ()> {
        // no data lives under the mutex, so a panic while it was held
        // (an op that failed) left nothing inconsistent
        self.storage.updates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many times the storage was opened for writing: equal versions
    /// of one storage mean unchanged elements.
    pub fn storage_version(&self) -> u64 {
        self.storage.version.load(Ordering::Relaxed)
    }

    /// The storage's address: a total order over live storages.
    pub(crate) fn storage_addr(&self) -> usize {
        self.storage.addr()
    }

    /// Read access to `src` and write access to `dst`, taken in a global
    /// order (by storage address): two threads copying between the same two
    /// storages in opposite directions would otherwise each hold one lock
    /// and wait for the other forever. The storages must differ.
    pub fn read_and_write<'a>(
        src: &'a Array,
        dst: &'a Array,
    ) -> (RwLockReadGuard<'a, Buffer>, RwLockWriteGuard<'a, Buffer>) {
        debug_assert!(!src.shares_storage(dst), "read_and_write on one storage");
        if src.storage_addr() < dst.storage_addr() {
            let r = src.read();
            (r, dst.write())
        } else {
            let w = dst.write();
            (src.read(), w)
        }
    }

    /// Runs `f` on the elements and layout of this CPU array: what the CPU
    /// lowerings and host reads use. An array on another device is never
    /// copied over silently: that is a CPU path given a device array (a
    /// lowering that `backend::lower` should have sent to the device), an
    /// internal error; host reads copy first (`to_device(Device::Cpu)`).
    ///
    /// # Errors
    /// If the array is not on the CPU.
    pub fn with_cpu<R>(&self, op: &str, f: impl FnOnce(&CpuBuffer, &Layout) -> R) -> Result<R> {
        if self.device() != Device::Cpu {
            return Err(Error::internal(op, format!("a CPU path was given a {} array", self.device())));
        }
        let guard = self.read();
        Ok(f(guard.cpu(op)?, &self.layout))
    }

    /// [`Array::contiguous_copy`] of a CPU array.
    pub(crate) fn cpu_contiguous_copy(&self) -> Result<Array> {
        let buf = self.with_cpu("copy", |b, l| {
            let par = xform_kernels::cpu::Par::for_work(l.numel(), 1);
            guard_alloc("copy", &l.shape, self.dtype, Device::Cpu, || {
                xform_kernels::match_buffer!(b, v => CpuBuffer::from_vec(xform_kernels::cpu::elementwise::to_contiguous(v, l, par)))
            })
        })??;
        Ok(Array::from_cpu(buf, self.layout.shape.clone()))
    }

    /// Writes `src`'s elements into this CPU array's storage (same shape,
    /// dtype and device, checked by the caller).
    pub(crate) fn cpu_write(&self, op: &str, src: &Array) -> Result<()> {
        let (guard_src, mut guard_dst) = Array::read_and_write(src, self);
        let s = guard_src.cpu(op)?;
        let d = guard_dst.cpu_mut(op)?;
        xform_kernels::match_buffer!(d, dv => {
            let sv = s.as_slice();
            xform_kernels::cpu::elementwise::write_strided(dv, &self.layout, sv, &src.layout);
        });
        Ok(())
    }
}

/// Runs `f`, which allocates a `shape` / `dtype` array on `device` for
/// `op`; a refused allocation (see `NOTE: [allocation failure]` in
/// xform-kernels' pool) becomes an out-of-memory error.
pub fn guard_alloc<R>(op: &str, shape: &Shape, dtype: DType, device: Device, f: impl FnOnce() -> R) -> Result<R> {
    xform_kernels::pool::catch_alloc(f).map_err(|e| Error::out_of_memory(op, shape, dtype, device, e.bytes))
}

/// An abstract value: what every interpreter knows of a tensor without
/// looking at its elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Aval {
    /// Logical shape.
    pub shape: Shape,
    /// Element type.
    pub dtype: DType,
    /// Device.
    pub device: Device,
}

impl Aval {
    /// Borrowed form.
    pub fn as_ref(&self) -> AvalRef<'_> {
        AvalRef { shape: &self.shape, dtype: self.dtype, device: self.device }
    }
}

impl std::fmt::Display for Aval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.dtype.short_name(), self.shape)
    }
}

/// A borrowed abstract value (what shape rules take).
#[derive(Copy, Clone, Debug)]
pub struct AvalRef<'a> {
    /// Logical shape.
    pub shape: &'a Shape,
    /// Element type.
    pub dtype: DType,
    /// Device.
    pub device: Device,
}

impl AvalRef<'_> {
    /// Owned form.
    pub fn to_owned(&self) -> Aval {
        Aval { shape: self.shape.clone(), dtype: self.dtype, device: self.device }
    }
    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
}
