//! Typed device buffers.

use super::device::{device, CudaDevice};
use super::error::{CudaError, Result};
use crate::dtype::CpuBuffer;
use crate::dtype::DType;
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr};
use half::{bf16, f16};
use std::sync::Arc;

/// The device elements of one dtype. The allocation holds at least one
/// element (the driver refuses empty ones); `len` is the logical length.
pub struct DeviceVec<T> {
    pub(super) slice: CudaSlice<T>,
    pub(super) len: usize,
    device: Arc<CudaDevice>,
}

impl<T: DeviceRepr> DeviceVec<T> {
    /// `len` uninitialized elements on `device` (every kernel that
    /// allocates one writes all of it before anything reads it).
    pub(super) fn alloc(device: &Arc<CudaDevice>, len: usize) -> Result<DeviceVec<T>> {
        let bytes = len as u128 * std::mem::size_of::<T>() as u128;
        let oom = || CudaError::OutOfMemory { ordinal: device.ordinal(), bytes };
        // The driver call multiplies len by the element size unchecked.
        if len.checked_mul(std::mem::size_of::<T>()).is_none_or(|b| b > isize::MAX as usize) {
            return Err(oom());
        }
        // SAFETY: the memory is uninitialized; callers fill it completely
        // before reading (see each kernel), and device memory of a `DeviceRepr`
        // type holds no invariants that uninitialized bytes could break on
        // the host side.
        let slice = unsafe { device.stream().alloc::<T>(len.max(1)) }.map_err(|e| {
            if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                oom()
            } else {
                CudaError::driver("allocating device memory", e)
            }
        })?;
        Ok(DeviceVec { slice, len, device: device.clone() })
    }

    pub(super) fn upload(device: &Arc<CudaDevice>, host: &[T]) -> Result<DeviceVec<T>> {
        // a copy from pageable host memory cannot be recorded (NOTE:
        // [capture stream]): the capture fails here, cleanly
        if CudaDevice::capturing_ordinal().is_some() {
            return Err(CudaError::unsupported("copying host memory to the device inside a CUDA graph capture"));
        }
        let mut v = DeviceVec::alloc(device, host.len())?;
        if !host.is_empty() {
            let mut view = v.slice.slice_mut(0..host.len());
            device.stream().memcpy_htod(host, &mut view).map_err(|e| CudaError::driver("copying to the device", e))?;
        }
        Ok(v)
    }

    pub(super) fn download_range(&self, start: usize, n: usize) -> Result<Vec<T>>
    where
        T: Clone + Default,
    {
        if n == 0 {
            return Ok(Vec::new());
        }
        if CudaDevice::capturing_ordinal().is_some() {
            return Err(CudaError::unsupported("reading device memory inside a CUDA graph capture"));
        }
        let view = self.slice.slice(start..start + n);
        let mut out = vec![T::default(); n];
        let stream = self.device.stream();
        stream.memcpy_dtoh(&view, &mut out).map_err(|e| CudaError::driver("copying from the device", e))?;
        stream.synchronize().map_err(|e| CudaError::driver("copying from the device", e))?;
        Ok(out)
    }

    /// The device address of the first element.
    pub(super) fn ptr(&self) -> u64 {
        let (p, _guard) = self.slice.device_ptr(self.device.stream());
        p
    }
}

/// The typed device elements of one array (bool is stored as one byte, 0 or 1).
pub enum CudaBuffer {
    /// f32 elements.
    F32(DeviceVec<f32>),
    /// f64 elements.
    F64(DeviceVec<f64>),
    /// f16 elements.
    F16(DeviceVec<f16>),
    /// bf16 elements.
    BF16(DeviceVec<bf16>),
    /// i32 elements.
    I32(DeviceVec<i32>),
    /// i64 elements.
    I64(DeviceVec<i64>),
    /// u32 elements.
    U32(DeviceVec<u32>),
    /// bool elements as bytes.
    Bool(DeviceVec<u8>),
}

/// Runs `$body` with `$v` bound to the typed `DeviceVec` inside a `CudaBuffer`.
macro_rules! match_cuda {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            CudaBuffer::F32($v) => $body,
            CudaBuffer::F64($v) => $body,
            CudaBuffer::F16($v) => $body,
            CudaBuffer::BF16($v) => $body,
            CudaBuffer::I32($v) => $body,
            CudaBuffer::I64($v) => $body,
            CudaBuffer::U32($v) => $body,
            CudaBuffer::Bool($v) => $body,
        }
    };
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer({} x {} on cuda:{})", self.dtype(), self.len(), self.ordinal())
    }
}

impl CudaBuffer {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            CudaBuffer::F32(_) => DType::F32,
            CudaBuffer::F64(_) => DType::F64,
            CudaBuffer::F16(_) => DType::F16,
            CudaBuffer::BF16(_) => DType::BF16,
            CudaBuffer::I32(_) => DType::I32,
            CudaBuffer::I64(_) => DType::I64,
            CudaBuffer::U32(_) => DType::U32,
            CudaBuffer::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements held.
    pub fn len(&self) -> usize {
        match_cuda!(self, v => v.len)
    }

    /// True if no elements are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ordinal of the device holding the elements.
    pub fn ordinal(&self) -> usize {
        self.device().ordinal()
    }

    /// The device holding the elements.
    pub fn device(&self) -> &Arc<CudaDevice> {
        match_cuda!(self, v => &v.device)
    }

    /// The device address of element 0 (for kernel arguments).
    pub fn device_ptr(&self) -> u64 {
        match_cuda!(self, v => v.ptr())
    }

    /// `len` uninitialized elements of `dtype` on `device`; the caller must
    /// write every element before any is read.
    pub fn alloc(device: &Arc<CudaDevice>, dtype: DType, len: usize) -> Result<CudaBuffer> {
        Ok(match dtype {
            DType::F32 => CudaBuffer::F32(DeviceVec::alloc(device, len)?),
            DType::F64 => CudaBuffer::F64(DeviceVec::alloc(device, len)?),
            DType::F16 => CudaBuffer::F16(DeviceVec::alloc(device, len)?),
            DType::BF16 => CudaBuffer::BF16(DeviceVec::alloc(device, len)?),
            DType::I32 => CudaBuffer::I32(DeviceVec::alloc(device, len)?),
            DType::I64 => CudaBuffer::I64(DeviceVec::alloc(device, len)?),
            DType::U32 => CudaBuffer::U32(DeviceVec::alloc(device, len)?),
            DType::Bool => CudaBuffer::Bool(DeviceVec::alloc(device, len)?),
        })
    }

    /// Copies all of `host` to device `ordinal`.
    ///
    /// # Errors
    /// If there is no such device or the copy fails.
    pub fn upload(ordinal: usize, host: &CpuBuffer) -> Result<CudaBuffer> {
        let dev = device(ordinal)?;
        Ok(match host {
            CpuBuffer::F32(v) => CudaBuffer::F32(DeviceVec::upload(&dev, v)?),
            CpuBuffer::F64(v) => CudaBuffer::F64(DeviceVec::upload(&dev, v)?),
            CpuBuffer::F16(v) => CudaBuffer::F16(DeviceVec::upload(&dev, v)?),
            CpuBuffer::BF16(v) => CudaBuffer::BF16(DeviceVec::upload(&dev, v)?),
            CpuBuffer::I32(v) => CudaBuffer::I32(DeviceVec::upload(&dev, v)?),
            CpuBuffer::I64(v) => CudaBuffer::I64(DeviceVec::upload(&dev, v)?),
            CpuBuffer::U32(v) => CudaBuffer::U32(DeviceVec::upload(&dev, v)?),
            CpuBuffer::Bool(v) => {
                let bytes: Vec<u8> = v.iter().map(|&b| b as u8).collect();
                CudaBuffer::Bool(DeviceVec::upload(&dev, &bytes)?)
            }
        })
    }

    /// Copies elements `start..start + n` to the host.
    ///
    /// # Errors
    /// If the range is out of bounds or the copy fails.
    pub fn download_range(&self, start: usize, n: usize) -> Result<CpuBuffer> {
        if start + n > self.len() {
            return Err(CudaError::unsupported(format!(
                "reading elements {start}..{} of a buffer of {}",
                start + n,
                self.len()
            )));
        }
        Ok(match self {
            CudaBuffer::F32(v) => CpuBuffer::F32(v.download_range(start, n)?),
            CudaBuffer::F64(v) => CpuBuffer::F64(v.download_range(start, n)?),
            CudaBuffer::F16(v) => CpuBuffer::F16(v.download_range(start, n)?),
            CudaBuffer::BF16(v) => CpuBuffer::BF16(v.download_range(start, n)?),
            CudaBuffer::I32(v) => CpuBuffer::I32(v.download_range(start, n)?),
            CudaBuffer::I64(v) => CpuBuffer::I64(v.download_range(start, n)?),
            CudaBuffer::U32(v) => CpuBuffer::U32(v.download_range(start, n)?),
            CudaBuffer::Bool(v) => CpuBuffer::Bool(v.download_range(start, n)?.into_iter().map(|b| b != 0).collect()),
        })
    }

    /// Copies every element to the host.
    pub fn download(&self) -> Result<CpuBuffer> {
        self.download_range(0, self.len())
    }
}
