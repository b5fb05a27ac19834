//! Where a step of a split replay writes (NOTE: [batch split] in
//! `split.rs`): its half's rows of an output allocated whole, straight
//! from the kernel where the kernel can write there, else copied. The plan
//! runs its steps into these; the split makes them.

use xform_ops::interp::lower_checked;
use xform_ops::prims::jit::TileMut;
use xform_ops::{Array, DType, Error, Prim, Result, Tensor};

/// A destination for one output of a half: its rows of a whole output's
/// buffer, in row-major order.
pub(crate) struct Dst {
    ptr: *mut u8,
    bytes: usize,
    /// The elements' dtype.
    dtype: DType,
}

// SAFETY: a `Dst` is the byte range of one half's rows in a buffer that
// the replaying thread keeps alive until both halves are done (it joins
// the helper first, also when a half fails); the two halves' ranges are
// disjoint, and nothing reads the buffer before the join.
unsafe impl Send for Dst {}
// SAFETY: as above: only the half that owns the range writes through it.
unsafe impl Sync for Dst {}

impl Dst {
    /// The `bytes` bytes at `ptr`, holding elements of `dtype`.
    ///
    /// # Safety
    /// The range lies inside a live buffer of `dtype` elements that
    /// outlives the `Dst` and that nothing else reads or writes until the
    /// step writing through it is done.
    pub(crate) unsafe fn new(ptr: *mut u8, bytes: usize, dtype: DType) -> Dst {
        Dst { ptr, bytes, dtype }
    }

    /// The range as elements of `T`.
    ///
    /// # Safety
    /// The buffer holds `T` (so the range is aligned for it), and no other
    /// view of the range is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn elems<T>(&self) -> &mut [std::mem::MaybeUninit<T>] {
        // SAFETY: the caller's contract and the type's (a live, exclusive range).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.bytes / std::mem::size_of::<T>()) }
    }
}

/// Copies the elements of `a` (any layout) into `dst`.
fn copy_array_into(a: &Array, dst: &Dst) -> Result<()> {
    let a = a.contiguous()?;
    a.with_cpu("jit", |buf, l| {
        let r = l.contiguous_range().expect("a contiguous array");
        xform_kernels::match_buffer!(buf, v => {
            let src = &v[r];
            if std::mem::size_of_val(src) != dst.bytes {
                return Err(Error::invalid("jit", "a half's output does not fit its rows (internal error)"));
            }
            // SAFETY: `dst` is this half's range of a live buffer, exactly
            // `bytes` long (checked), which no other view reaches; `src`
            // is another allocation.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().cast::<u8>(), dst.ptr, dst.bytes) };
            Ok(())
        })
    })?
}

/// Copies the value of `t` into `dst`.
pub(crate) fn copy_into(t: &Tensor, dst: &Dst) -> Result<()> {
    let a = t.array().ok_or_else(|| Error::invalid("jit", "replay reached a tracer (internal error)"))?;
    copy_array_into(&a, dst)
}

/// Runs a step's product into `dst`: straight from the kernel where it
/// can write there, else computed and copied.
pub(crate) fn write_product(prim: &Prim, ins: &[&Array], dst: &Dst) -> Result<()> {
    // SAFETY (both): the buffer holds `dst.dtype` (`elems`' contract), and
    // this step alone writes the range.
    let fresh = match dst.dtype {
        DType::F32 => prim.lower_into(ins, TileMut::F32(unsafe { dst.elems() }))?,
        DType::F64 => prim.lower_into(ins, TileMut::F64(unsafe { dst.elems() }))?,
        _ => {
            let outs = lower_checked(prim, ins)?;
            Some(outs[0].array().ok_or_else(|| Error::invalid("jit", "a lowering returned a tracer"))?)
        }
    };
    match fresh {
        Some(a) => copy_array_into(&a, dst),
        None => Ok(()),
    }
}
