//! A per-thread free list of equal-sized blocks, behind the counted
//! pointer of the hot path ([`Counted`](crate::counted), one list per
//! pointee type: tensor nodes and array storage).
//!
//! Every op at every transform level makes a node (and every eager op a
//! storage header), tens per transformed call, freed in bursts when a
//! transform returns; the system allocator handles such bursts slowly
//! (they overflow its per-thread cache). Taking a block from this list is
//! a pointer swap. Blocks are plain memory: a block freed on this thread
//! may have been allocated on another, which the global allocator allows.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::thread::LocalKey;

/// The link written into the first bytes of a listed block.
struct FreeBlock {
    next: *mut FreeBlock,
}

/// Freed blocks of one layout (declare one per block type in a
/// `thread_local!` with [`FreeList::new`]).
pub(crate) struct FreeList {
    head: Cell<*mut FreeBlock>,
    len: Cell<usize>,
    layout: Layout,
    max: usize,
}

impl FreeList {
    /// An empty list of blocks of `layout`, keeping at most `max`.
    ///
    /// # Panics
    /// (At compile time, in a `const` initializer.) If a block cannot hold
    /// the link.
    pub(crate) const fn new(layout: Layout, max: usize) -> FreeList {
        assert!(layout.size() >= std::mem::size_of::<FreeBlock>());
        assert!(layout.align() >= std::mem::align_of::<FreeBlock>());
        FreeList { head: Cell::new(std::ptr::null_mut()), len: Cell::new(0), layout, max }
    }

    /// A block of the list's layout: a listed one, or a fresh allocation
    /// (also while the thread is exiting and its list is gone).
    #[inline]
    pub(crate) fn take(key: &'static LocalKey<FreeList>, layout: Layout) -> *mut u8 {
        let listed = key
            .try_with(|f| {
                let head = f.head.get();
                if head.is_null() {
                    return None;
                }
                // SAFETY: `head` is a listed block (see `give`), valid for
                // reads of its link.
                f.head.set(unsafe { (*head).next });
                f.len.set(f.len.get() - 1);
                Some(head.cast::<u8>())
            })
            .ok()
            .flatten();
        listed.unwrap_or_else(|| {
            // SAFETY: the layouts of the listed types have a non-zero size
            // (asserted in `new`).
            let p = unsafe { alloc(layout) };
            if p.is_null() {
                handle_alloc_error(layout);
            }
            p
        })
    }

    /// Returns `block` (allocated with `layout`, its value already dropped)
    /// to the list, or to the system allocator when the list is full or
    /// the thread is exiting.
    ///
    /// # Safety
    /// `block` must have been allocated with `layout` by the global
    /// allocator, hold no live value, and not be used again by the caller.
    #[inline]
    pub(crate) unsafe fn give(key: &'static LocalKey<FreeList>, block: *mut u8, layout: Layout) {
        let kept = key
            .try_with(|f| {
                debug_assert_eq!(f.layout, layout);
                if f.len.get() >= f.max {
                    return false;
                }
                let b = block.cast::<FreeBlock>();
                // SAFETY: the caller hands over a dead block of this
                // layout, large and aligned enough for the link (`new`).
                unsafe { b.write(FreeBlock { next: f.head.get() }) };
                f.head.set(b);
                f.len.set(f.len.get() + 1);
                true
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: allocated with `layout`, no live value (caller).
            unsafe { dealloc(block, layout) };
        }
    }
}

impl Drop for FreeList {
    fn drop(&mut self) {
        let mut p = self.head.get();
        while !p.is_null() {
            // SAFETY: each listed block was allocated with `self.layout`,
            // holds no live value and starts with the link written by `give`.
            unsafe {
                let next = (*p).next;
                dealloc(p.cast(), self.layout);
                p = next;
            }
        }
    }
}
