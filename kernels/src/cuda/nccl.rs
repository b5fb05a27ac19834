//! Collectives among CUDA devices through NCCL (cudarc's `nccl` module,
//! loaded at run time like the rest of CUDA, so this builds without it):
//! communicators over the devices of one process (`ncclCommInitAll`) or
//! one member per process from a unique id shared by the caller
//! (`ncclCommInitRank`, the id sent through MPI), and the one collective
//! the pmap exchange needs: every member's buffer gathered on every
//! device (`ncclAllGather`), in rank order.
//!
//! NCCL has no timeout: a member that never calls blocks the others. The
//! callers agree on each call first (the collective, dtype and shape)
//! through an exchange that does time out (pmap's barrier, or MPI), so a
//! mismatch or a member that failed earlier is an error before NCCL is
//! called. Not covered yet: a member failing between that agreement and
//! its NCCL call (its staging copy running out of memory, say) leaves the
//! others blocked in NCCL; NCCL's non-blocking communicators with
//! `ncclCommGetAsyncError` polling and `ncclCommAbort` would cover it.

use super::buffer::{CudaBuffer, DeviceVec};
use super::device::{device, CudaDevice};
use super::error::{CudaError, Result};
use cudarc::driver::DeviceRepr;
use cudarc::nccl::safe::{Comm, Id, NcclType};
use std::sync::Arc;

/// Whether NCCL's library can be loaded; the error names it and how to
/// install it.
pub fn nccl_available() -> Result<()> {
    // SAFETY: only tries to load the library (dlopen); no symbol is called.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::NcclMissing)
    }
}

fn nccl_err(what: &str, e: cudarc::nccl::result::NcclError) -> CudaError {
    CudaError::Driver { what: format!("NCCL {what}"), message: format!("{:?}", e.0) }
}

/// One device's member of an NCCL communicator.
pub struct NcclMember {
    comm: Comm,
    device: Arc<CudaDevice>,
}

// SAFETY: an NCCL communicator may be driven from any thread as long as
// calls on it do not overlap; a member is used by one device's thread at a
// time (pmap hands each its own, the process group keeps its own under a
// mutex).
unsafe impl Send for NcclMember {}

impl NcclMember {
    /// One communicator over the devices `ordinals` of this process:
    /// member `k` drives `ordinals[k]` and has rank `k`.
    ///
    /// # Errors
    /// NCCL or a device missing, or NCCL's initialization failing.
    pub fn for_devices(ordinals: &[usize]) -> Result<Vec<NcclMember>> {
        nccl_available()?;
        let devices: Vec<Arc<CudaDevice>> = ordinals.iter().map(|&o| device(o)).collect::<Result<_>>()?;
        let comms = Comm::from_devices(devices.iter().map(|d| d.stream().clone()).collect())
            .map_err(|e| nccl_err("initializing a communicator over this process's devices", e))?;
        Ok(comms.into_iter().zip(devices).map(|(comm, device)| NcclMember { comm, device }).collect())
    }

    /// A fresh unique id for [`NcclMember::from_rank`] (one process makes
    /// it and sends it to the others).
    ///
    /// # Errors
    /// NCCL missing or failing.
    pub fn unique_id() -> Result<Vec<u8>> {
        nccl_available()?;
        let id = Id::new().map_err(|e| nccl_err("creating a unique id", e))?;
        Ok(id.internal().iter().map(|&c| c as u8).collect())
    }

    /// This process's member, rank `rank` of `world`, driving device
    /// `ordinal`, of the communicator that `id` names (every process calls
    /// it with the same id).
    ///
    /// # Errors
    /// A malformed id, NCCL or the device missing, NCCL failing.
    pub fn from_rank(ordinal: usize, rank: usize, world: usize, id: &[u8]) -> Result<NcclMember> {
        nccl_available()?;
        let mut raw = [0 as std::ffi::c_char; 128];
        if id.len() != raw.len() {
            return Err(CudaError::unsupported(format!("an NCCL unique id has 128 bytes, not {}", id.len())));
        }
        for (r, &b) in raw.iter_mut().zip(id) {
            *r = b as std::ffi::c_char;
        }
        let device = device(ordinal)?;
        let comm = Comm::from_rank(device.stream().clone(), rank, world, Id::uninit(raw))
            .map_err(|e| nccl_err("joining a communicator of several processes", e))?;
        Ok(NcclMember { comm, device })
    }

    /// This member's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of members.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// The device this member drives.
    pub fn ordinal(&self) -> usize {
        self.device.ordinal()
    }

    /// Every member's `send` (the same dtype and length everywhere, which
    /// the caller has checked) concatenated in rank order, on this
    /// member's device: `world_size() * send.len()` elements.
    ///
    /// # Errors
    /// `send` on another device, or NCCL failing.
    pub fn all_gather(&self, send: &CudaBuffer) -> Result<CudaBuffer> {
        if send.ordinal() != self.ordinal() {
            return Err(CudaError::unsupported(format!(
                "an NCCL member of cuda:{} was given a buffer on cuda:{}",
                self.ordinal(),
                send.ordinal()
            )));
        }
        let n = self.world_size();
        Ok(match send {
            CudaBuffer::F32(v) => CudaBuffer::F32(self.gather_typed(v, n)?),
            CudaBuffer::F64(v) => CudaBuffer::F64(self.gather_typed(v, n)?),
            CudaBuffer::F16(v) => CudaBuffer::F16(self.gather_typed(v, n)?),
            CudaBuffer::BF16(v) => CudaBuffer::BF16(self.gather_typed(v, n)?),
            CudaBuffer::I32(v) => CudaBuffer::I32(self.gather_typed(v, n)?),
            CudaBuffer::I64(v) => CudaBuffer::I64(self.gather_typed(v, n)?),
            CudaBuffer::U32(v) => CudaBuffer::U32(self.gather_typed(v, n)?),
            CudaBuffer::Bool(v) => CudaBuffer::Bool(self.gather_typed(v, n)?),
        })
    }

    fn gather_typed<T: DeviceRepr + NcclType>(&self, send: &DeviceVec<T>, n: usize) -> Result<DeviceVec<T>> {
        let len = send.len;
        let mut out = DeviceVec::<T>::alloc(&self.device, len * n)?;
        if len > 0 {
            let src = send.slice.slice(0..len);
            let mut dst = out.slice.slice_mut(0..len * n);
            self.comm.all_gather(&src, &mut dst).map_err(|e| nccl_err("all_gather", e))?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NCCL entry points xform calls (cudarc resolves each at its
    /// first call, and panics on a missing one: checked here up front).
    const SYMBOLS: &[&str] =
        &["ncclGetVersion", "ncclGetUniqueId", "ncclCommInitAll", "ncclCommInitRank", "ncclAllGather", "ncclCommAbort"];

    /// Where NCCL cannot be loaded, the error names the library and how
    /// to install it.
    #[test]
    fn a_missing_nccl_is_named() {
        if let Err(e) = nccl_available() {
            let msg = e.to_string();
            assert!(msg.contains("libnccl.so") && msg.contains("pip install nvidia-nccl-cu13"), "{msg}");
        }
    }

    /// NCCL loads, is version 2, and has every symbol xform calls
    /// (host-only: no GPU needed).
    #[test]
    #[ignore = "needs libnccl.so on LD_LIBRARY_PATH; .ci/run runs it with --include-ignored"]
    fn nccl_library_loads_with_every_symbol() {
        nccl_available()
            .expect("NCCL not loadable: put site-packages/nvidia/nccl/lib (with libnccl.so) on LD_LIBRARY_PATH");
        // SAFETY: the library was found above; looking symbols up calls
        // nothing.
        let lib = unsafe { cudarc::nccl::sys::culib() };
        for name in SYMBOLS {
            // SAFETY: only the symbol's address is looked up, never called
            // through this type.
            let sym = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) };
            assert!(sym.is_ok(), "libnccl lacks {name}");
        }
        let mut v: std::ffi::c_int = 0;
        // SAFETY: ncclGetVersion writes one int; it needs no device.
        let r = unsafe { cudarc::nccl::sys::ncclGetVersion(&mut v) };
        assert_eq!(r, cudarc::nccl::sys::ncclResult_t::ncclSuccess);
        assert!((20_000..30_000).contains(&v), "NCCL {v}: xform's bindings describe NCCL 2");
        println!("NCCL {v} with all {} symbols", SYMBOLS.len());
    }
}
