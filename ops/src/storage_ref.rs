//! `StorageRef`: the atomically counted pointer from arrays to their
//! [`Storage`](crate::array::Storage).
//!
//! It is `Arc<Storage>` whose freed blocks go to a free list of the thread
//! that frees them and are reused by the next storage that thread makes:
//! every eager op makes one, and the system allocator is slow at the
//! bursts of frees that end a transformed call. (The elements themselves
//! come from the buffer pool in `xform_kernels::pool`.)

use crate::array::Storage;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

struct Block {
    strong: AtomicUsize,
    storage: Storage,
}

/// Blocks kept per thread at most.
const MAX_FREE: usize = 256;

struct FreeBlock {
    next: *mut FreeBlock,
}

const _: () = assert!(std::mem::size_of::<FreeBlock>() <= std::mem::size_of::<Block>());
const _: () = assert!(std::mem::align_of::<FreeBlock>() <= std::mem::align_of::<Block>());

/// A list threaded through freed blocks (plain memory: a block freed on
/// this thread may have been allocated on another, which the global
/// allocator allows).
struct FreeList {
    head: Cell<*mut FreeBlock>,
    len: Cell<usize>,
}

impl Drop for FreeList {
    fn drop(&mut self) {
        let mut p = self.head.get();
        while !p.is_null() {
            // SAFETY: each listed block was allocated with
            // `Layout::new::<Block>()`, holds no live storage, and starts
            // with the link written when it was listed.
            unsafe {
                let next = (*p).next;
                dealloc(p.cast(), Layout::new::<Block>());
                p = next;
            }
        }
    }
}

thread_local! {
    static FREE: FreeList = const { FreeList { head: Cell::new(std::ptr::null_mut()), len: Cell::new(0) } };
}

/// A counted, thread-safe reference to one storage (see the module docs).
pub(crate) struct StorageRef {
    ptr: NonNull<Block>,
}

// SAFETY: `StorageRef` is `Arc<Storage>` with a different allocator: the
// count is atomic and the storage is `Send + Sync` (checked below).
unsafe impl Send for StorageRef {}
// SAFETY: as above; shared access only reads the storage or locks it.
unsafe impl Sync for StorageRef {}

const fn assert_send_sync<T: Send + Sync>() {}
const _: () = assert_send_sync::<Storage>();

impl StorageRef {
    /// A new storage with a count of one.
    #[inline]
    pub(crate) fn new(storage: Storage) -> StorageRef {
        let reused = FREE
            .try_with(|f| {
                let head = f.head.get();
                if head.is_null() {
                    return None;
                }
                // SAFETY: `head` is a listed block, valid for reads of its link.
                f.head.set(unsafe { (*head).next });
                f.len.set(f.len.get() - 1);
                Some(head.cast::<Block>())
            })
            .ok()
            .flatten();
        let block = match reused {
            Some(p) => p,
            None => {
                let layout = Layout::new::<Block>();
                // SAFETY: `Block` has a non-zero size.
                let p = unsafe { alloc(layout) }.cast::<Block>();
                if p.is_null() {
                    handle_alloc_error(layout);
                }
                p
            }
        };
        // SAFETY: `block` is valid for writes and holds no live value.
        unsafe { block.write(Block { strong: AtomicUsize::new(1), storage }) };
        // SAFETY: non-null (checked, or taken from the list).
        StorageRef { ptr: unsafe { NonNull::new_unchecked(block) } }
    }

    #[inline]
    fn block(&self) -> &Block {
        // SAFETY: the block is live while any reference to it exists.
        unsafe { self.ptr.as_ref() }
    }

    /// True if both point at the same storage.
    #[inline]
    pub(crate) fn ptr_eq(&self, other: &StorageRef) -> bool {
        self.ptr == other.ptr
    }

    /// The number of references (like `Arc::strong_count`, with acquire
    /// ordering so that a count of one means no other thread still uses it).
    #[inline]
    pub(crate) fn strong_count(&self) -> usize {
        self.block().strong.load(Ordering::Acquire)
    }

    fn release(block: *mut Block) {
        let kept = FREE
            .try_with(|f| {
                if f.len.get() >= MAX_FREE {
                    return false;
                }
                let b = block.cast::<FreeBlock>();
                // SAFETY: the block is valid for writes; its storage was dropped.
                unsafe { b.write(FreeBlock { next: f.head.get() }) };
                f.head.set(b);
                f.len.set(f.len.get() + 1);
                true
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: allocated with this layout; storage already dropped.
            unsafe { dealloc(block.cast(), Layout::new::<Block>()) };
        }
    }
}

impl std::ops::Deref for StorageRef {
    type Target = Storage;
    #[inline]
    fn deref(&self) -> &Storage {
        &self.block().storage
    }
}

impl Clone for StorageRef {
    #[inline]
    fn clone(&self) -> StorageRef {
        // Relaxed like `Arc::clone`: a new reference is made from an
        // existing one, which already orders the accesses.
        if self.block().strong.fetch_add(1, Ordering::Relaxed) > isize::MAX as usize {
            std::process::abort();
        }
        StorageRef { ptr: self.ptr }
    }
}

impl Drop for StorageRef {
    #[inline]
    fn drop(&mut self) {
        if self.block().strong.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Synchronizes with the other references' release decrements, so
        // their uses of the storage happen before it is dropped (as in `Arc`).
        fence(Ordering::Acquire);
        let block = self.ptr.as_ptr();
        // SAFETY: this was the last reference; the storage is dropped once
        // and the block is only reused through `release`.
        unsafe { std::ptr::drop_in_place(&mut (*block).storage) };
        StorageRef::release(block);
    }
}

impl std::fmt::Debug for StorageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.block().storage.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    /// Storage made on one thread and freed on another lands on the
    /// freeing thread's list; values stay intact through reuse, and both
    /// threads exit cleanly (their lists are freed).
    #[test]
    fn storage_crosses_threads_and_is_reused() {
        let arrays: Vec<crate::Array> =
            (0..600).map(|i| Tensor::from_vec(vec![i as f32; 3], [3]).array().expect("concrete")).collect();
        let sums = std::thread::spawn(move || {
            let shared = arrays[7].clone();
            assert!(!shared.is_unique());
            drop(arrays);
            assert!(shared.is_unique());
            let again: Vec<Tensor> = (0..600).map(|i| Tensor::from_vec(vec![i as f32; 2], [2])).collect();
            again.iter().map(|t| t.to_vec::<f32>().iter().sum::<f32>()).sum::<f32>()
        })
        .join()
        .expect("worker thread");
        assert_eq!(sums, (0..600).map(|i| 2.0 * i as f32).sum::<f32>());
    }
}
