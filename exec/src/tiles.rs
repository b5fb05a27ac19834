//! The runtime of fused CPU loops: it opens the operands' buffers as
//! tiles ([`with_fused_inputs`]), allocates the outputs (or writes over a
//! donor's buffer) and runs a loop body over ranges of elements, split
//! across threads ([`run_fused`], [`run_fused_shaped`]). The body calls
//! each primitive's fused form (`Family::cpu_tile`, `cpu_row_reduce`), so
//! the element functions stay with the primitives and their eager
//! kernels.

use std::mem::MaybeUninit;
use xform_kernels::pool::alloc_uninit;
use xform_kernels::pool::assume_init;
use xform_kernels::{CpuBuffer, DType, Layout, Shape};
use xform_ops::prims::jit::{Tile, TileMut};
use xform_ops::Array;

/// One CPU operand of a fused loop: its whole buffer and its layout (any
/// strides: a broadcast operand is read through stride 0), or, for an
/// operand whose buffer the loop writes an output over (a donor), the
/// buffer's address only.
#[derive(Debug)]
pub struct FusedIn<'a> {
    /// The operand's storage (empty for a donor: read it through `donor`).
    pub data: Tile<'a>,
    /// Where its elements lie in `data`.
    pub layout: &'a Layout,
    /// A donor's elements (contiguous, from offset 0), read a tile at a
    /// time before the loop writes that tile (see [`OutBase::tile`]).
    pub donor: Option<OutBase>,
}

/// Calls `f` with the CPU buffers of `arrays`, or returns `None` without
/// calling it when one is not an f32, f64 or bool CPU buffer. The arrays
/// with `donor[i]` set are opened for writing (the loop writes an output
/// over them: the caller made sure no one else holds them and that they
/// are contiguous from offset 0) and passed by address.
pub fn with_fused_inputs<R>(arrays: &[&Array], donor: &[bool], f: impl FnOnce(&[FusedIn<'_>]) -> R) -> Option<R> {
    enum Guard<'g> {
        Read(std::sync::RwLockReadGuard<'g, xform_ops::array::Buffer>),
        Write(std::sync::RwLockWriteGuard<'g, xform_ops::array::Buffer>),
    }
    let mut guards: smallvec::SmallVec<[Guard<'_>; 4]> = arrays
        .iter()
        .enumerate()
        .map(|(i, a)| if donor.get(i) == Some(&true) { Guard::Write(a.write()) } else { Guard::Read(a.read()) })
        .collect();
    let mut ins: smallvec::SmallVec<[FusedIn<'_>; 4]> = smallvec::SmallVec::with_capacity(arrays.len());
    for (g, a) in guards.iter_mut().zip(arrays) {
        let (data, donor) = match g {
            Guard::Read(g) => {
                let Ok(b) = g.cpu("fused") else { return None };
                let data = match b {
                    CpuBuffer::F32(v) => Tile::F32(v),
                    CpuBuffer::F64(v) => Tile::F64(v),
                    CpuBuffer::Bool(v) => Tile::Bool(v),
                    _ => return None,
                };
                (data, None)
            }
            Guard::Write(g) => {
                let Ok(b) = g.cpu_mut("fused") else { return None };
                let base = match b {
                    CpuBuffer::F32(v) => (Tile::F32(&[]), OutBase::F32(v.as_mut_ptr() as usize)),
                    CpuBuffer::F64(v) => (Tile::F64(&[]), OutBase::F64(v.as_mut_ptr() as usize)),
                    CpuBuffer::Bool(v) => (Tile::Bool(&[]), OutBase::Bool(v.as_mut_ptr() as usize)),
                    _ => return None,
                };
                (base.0, Some(base.1))
            }
        };
        ins.push(FusedIn { data, layout: &a.layout, donor });
    }
    Some(f(&ins))
}

enum OutVec {
    F32(Vec<MaybeUninit<f32>>),
    F64(Vec<MaybeUninit<f64>>),
    Bool(Vec<MaybeUninit<bool>>),
}

/// The address of an output's first element (an address, so that tasks
/// on other threads can each view their own range). Every access to an
/// output goes through short-lived views made from it, one tile at a time,
/// so a loop may read a tile of a donor operand and then write the same
/// tile of the output that reuses its buffer.
#[derive(Copy, Clone, Debug)]
pub enum OutBase {
    /// f32 elements at this address.
    F32(usize),
    /// f64 elements at this address.
    F64(usize),
    /// bool elements at this address.
    Bool(usize),
}

impl OutBase {
    /// A read-only view of elements `r` (initialized ones).
    ///
    /// # Safety
    /// The base's buffer outlives the view and elements `r` are initialized
    /// and lie inside it; nothing writes them while the view lives.
    pub unsafe fn tile<'a>(self, r: std::ops::Range<usize>) -> Tile<'a> {
        // SAFETY: in bounds, initialized and not written meanwhile (the
        // caller's contract).
        unsafe {
            match self {
                OutBase::F32(p) => Tile::F32(std::slice::from_raw_parts((p as *const f32).add(r.start), r.len())),
                OutBase::F64(p) => Tile::F64(std::slice::from_raw_parts((p as *const f64).add(r.start), r.len())),
                OutBase::Bool(p) => Tile::Bool(std::slice::from_raw_parts((p as *const bool).add(r.start), r.len())),
            }
        }
    }

    /// A view of elements `r` to write.
    ///
    /// # Safety
    /// The base's buffer outlives the view and is not moved or otherwise
    /// accessed meanwhile; `r` lies inside it; no other live view overlaps `r`.
    pub unsafe fn range<'a>(self, r: std::ops::Range<usize>) -> TileMut<'a> {
        // SAFETY: in bounds, unaliased and alive (the caller's contract);
        // MaybeUninit slots may be written through the view.
        unsafe {
            match self {
                OutBase::F32(p) => {
                    TileMut::F32(std::slice::from_raw_parts_mut((p as *mut MaybeUninit<f32>).add(r.start), r.len()))
                }
                OutBase::F64(p) => {
                    TileMut::F64(std::slice::from_raw_parts_mut((p as *mut MaybeUninit<f64>).add(r.start), r.len()))
                }
                OutBase::Bool(p) => {
                    TileMut::Bool(std::slice::from_raw_parts_mut((p as *mut MaybeUninit<bool>).add(r.start), r.len()))
                }
            }
        }
    }
}

impl OutVec {
    fn new(d: DType, n: usize) -> Option<OutVec> {
        Some(match d {
            DType::F32 => OutVec::F32(alloc_uninit(n)),
            DType::F64 => OutVec::F64(alloc_uninit(n)),
            DType::Bool => OutVec::Bool(alloc_uninit(n)),
            _ => return None,
        })
    }

    /// The address of the first element, for views made on other threads.
    fn base(&mut self) -> OutBase {
        match self {
            OutVec::F32(v) => OutBase::F32(v.as_mut_ptr() as usize),
            OutVec::F64(v) => OutBase::F64(v.as_mut_ptr() as usize),
            OutVec::Bool(v) => OutBase::Bool(v.as_mut_ptr() as usize),
        }
    }

    /// The finished buffer.
    ///
    /// # Safety
    /// Every element was written.
    unsafe fn finish(self) -> CpuBuffer {
        // SAFETY: every element was written (the caller's contract).
        unsafe {
            match self {
                OutVec::F32(v) => CpuBuffer::F32(assume_init(v)),
                OutVec::F64(v) => CpuBuffer::F64(assume_init(v)),
                OutVec::Bool(v) => CpuBuffer::Bool(assume_init(v)),
            }
        }
    }
}

/// Runs a fused loop over the `shape.numel()` elements of outputs of
/// `dtypes` (f32, f64 or bool; `None` otherwise): `body(range, outs)` must
/// write elements `range` of every output, through views made from `outs`
/// (element 0 is the output's first), a tile at a time. An output with
/// `dests[j]` set is written there (a donor operand's buffer, see
/// [`with_fused_inputs`]) and answers `None`; the others are fresh arrays.
/// Ranges start at multiples of `tile`; under rayon (when `numel * cost`
/// is worth it, as for the eager maps) the ranges are split across
/// threads, whole tiles each.
pub fn run_fused(
    dtypes: &[DType],
    dests: &[Option<OutBase>],
    shape: &Shape,
    cost: usize,
    tile: usize,
    body: impl Fn(std::ops::Range<usize>, &[OutBase]) + Sync,
) -> Option<smallvec::SmallVec<[Option<Array>; 2]>> {
    run_fused_shaped(dtypes, dests, |_| shape, shape.numel(), cost, tile, body)
}

/// [`run_fused`] whose outputs have shapes of their own (`shape_of(j)`),
/// over a range of `n` elements that `body` maps onto each output (the
/// jit's row groups: outputs of one value per row beside whole ones).
pub fn run_fused_shaped<'s>(
    dtypes: &[DType],
    dests: &[Option<OutBase>],
    shape_of: impl Fn(usize) -> &'s Shape,
    n: usize,
    cost: usize,
    tile: usize,
    body: impl Fn(std::ops::Range<usize>, &[OutBase]) + Sync,
) -> Option<smallvec::SmallVec<[Option<Array>; 2]>> {
    let mut outs: smallvec::SmallVec<[Option<OutVec>; 2]> = smallvec::SmallVec::with_capacity(dtypes.len());
    for (j, d) in dtypes.iter().enumerate() {
        outs.push(match dests.get(j).copied().flatten() {
            Some(_) => None,
            None => Some(OutVec::new(*d, shape_of(j).numel())?),
        });
    }
    let bases: smallvec::SmallVec<[OutBase; 4]> = outs
        .iter_mut()
        .zip(dtypes.iter().enumerate())
        .map(|(o, (j, _))| match o {
            Some(v) => v.base(),
            None => dests[j].expect("a destination where no fresh output"),
        })
        .collect();
    // each range is written by one task only
    xform_kernels::cpu::for_ranges(n, tile, cost, |r| body(r, &bases));
    let mut arrays = smallvec::SmallVec::with_capacity(outs.len());
    for (j, o) in outs.into_iter().enumerate() {
        // SAFETY: the ranges cover 0..n, and `body` writes every element
        // of every output that its range maps to.
        arrays.push(o.map(|o| Array::from_cpu(unsafe { o.finish() }, shape_of(j).clone())));
    }
    Some(arrays)
}
