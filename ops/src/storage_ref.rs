//! `StorageRef`: the atomically counted pointer from arrays to their
//! [`Storage`].
//!
//! It is `Arc<Storage>` whose freed blocks go to the [`FreeList`] of the
//! thread that frees them and are reused by the next storage that thread
//! makes (every eager op makes one). The elements themselves come from the
//! buffer pool in `xform_kernels::pool`.

use crate::array::Storage;
use crate::free_list::FreeList;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

struct Block {
    strong: AtomicUsize,
    storage: Storage,
}

const LAYOUT: Layout = Layout::new::<Block>();

thread_local! {
    static FREE: FreeList = const { FreeList::new(LAYOUT, 256) };
}

/// A counted, thread-safe reference to one storage; dereferences to it.
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
        let block = FreeList::take(&FREE, LAYOUT).cast::<Block>();
        // SAFETY: `block` is non-null, valid for writes of a `Block` and
        // holds no live value.
        unsafe {
            block.write(Block { strong: AtomicUsize::new(1), storage });
            StorageRef { ptr: NonNull::new_unchecked(block) }
        }
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

    /// The storage's address (a total order over live storages).
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The number of references (like `Arc::strong_count`, with acquire
    /// ordering so that a count of one means no other thread still uses it).
    #[inline]
    pub(crate) fn strong_count(&self) -> usize {
        self.block().strong.load(Ordering::Acquire)
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
        // SAFETY: this was the last reference: the storage is dropped once
        // and the block is handed over dead.
        unsafe {
            std::ptr::drop_in_place(&mut (*block).storage);
            FreeList::give(&FREE, block.cast(), LAYOUT);
        }
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
