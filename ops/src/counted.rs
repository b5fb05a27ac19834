//! `Counted<T>`: the atomically counted pointer of the hot path, behind
//! [`Tensor`](crate::Tensor) (`Counted<Node>`) and arrays
//! (`Counted<Storage>`).
//!
//! It is `Arc<T>` whose freed blocks go to the [`FreeList`] of the thread
//! that frees them and are reused by the next value of that type the
//! thread makes (every eager op makes a node and a storage; see
//! `free_list.rs` for why). A value made on one thread and dropped on
//! another lands on the second thread's list. Each pointee type names its
//! own thread's list ([`Pooled`], declared with `pooled!`).

use crate::free_list::FreeList;
use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::thread::LocalKey;

/// A type whose counted blocks are recycled through a free list per thread.
pub(crate) trait Pooled: Send + Sync + Sized + 'static {
    /// This thread's list of free blocks of `Block<Self>`'s layout.
    fn free_list() -> &'static LocalKey<FreeList>;
}

/// Declares `$t`'s thread-local free list of at most `$cap` blocks.
macro_rules! pooled {
    ($t:ty, $cap:expr) => {
        impl $crate::counted::Pooled for $t {
            fn free_list() -> &'static ::std::thread::LocalKey<$crate::free_list::FreeList> {
                thread_local! {
                    static FREE: $crate::free_list::FreeList =
                        const { $crate::free_list::FreeList::new($crate::counted::block_layout::<$t>(), $cap) };
                }
                &FREE
            }
        }
    };
}
pub(crate) use pooled;

struct Block<T> {
    strong: AtomicUsize,
    value: T,
}

/// The layout of `T`'s counted blocks.
pub(crate) const fn block_layout<T>() -> Layout {
    Layout::new::<Block<T>>()
}

/// A counted, thread-safe reference to one `T`; dereferences to it.
pub(crate) struct Counted<T: Pooled> {
    ptr: NonNull<Block<T>>,
    _owns: PhantomData<T>,
}

// SAFETY: `Counted<T>` is `Arc<T>` with a different allocator: the count is
// atomic (acquire/release as in `Arc`, below), blocks are plain allocations
// that any thread may free, and `T` is `Send + Sync` (`Pooled`'s bound), so
// sending a handle or sharing one is sharing the value.
unsafe impl<T: Pooled> Send for Counted<T> {}
// SAFETY: as above; shared access only reads the value (or locks it).
unsafe impl<T: Pooled> Sync for Counted<T> {}

impl<T: Pooled> Counted<T> {
    /// A new value with a count of one. The value is made by `make` after
    /// the block is taken, so that it can be built in place (a node built
    /// first and then moved costs a `memcpy` call per tensor).
    #[inline(always)]
    pub(crate) fn new_with(make: impl FnOnce() -> T) -> Counted<T> {
        let block = FreeList::take(T::free_list(), block_layout::<T>()).cast::<Block<T>>();
        // SAFETY: `block` is non-null, valid for writes of a `Block<T>` and
        // holds no live value (fresh, or listed after its value was
        // dropped). If `make` panics the block is leaked, never read.
        unsafe {
            block.write(Block { strong: AtomicUsize::new(1), value: make() });
            Counted { ptr: NonNull::new_unchecked(block), _owns: PhantomData }
        }
    }

    /// A new value with a count of one.
    #[inline]
    pub(crate) fn new(value: T) -> Counted<T> {
        Counted::new_with(|| value)
    }

    #[inline]
    fn strong(&self) -> &AtomicUsize {
        // SAFETY: the block is live while any reference to it exists.
        unsafe { &self.ptr.as_ref().strong }
    }

    /// True if both point at the same value.
    #[inline]
    pub(crate) fn ptr_eq(&self, other: &Counted<T>) -> bool {
        self.ptr == other.ptr
    }

    /// The value's address (an identity key, and a total order, while it
    /// is alive).
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The number of references (like `Arc::strong_count`, with acquire
    /// ordering so that a count of one means no other thread still uses it).
    #[inline]
    pub(crate) fn strong_count(&self) -> usize {
        self.strong().load(Ordering::Acquire)
    }
}

impl<T: Pooled> std::ops::Deref for Counted<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the block holds a live value while any reference exists.
        unsafe { &self.ptr.as_ref().value }
    }
}

impl<T: Pooled> Clone for Counted<T> {
    #[inline]
    fn clone(&self) -> Counted<T> {
        // Relaxed like `Arc::clone`: a new reference is made from an
        // existing one, which already orders the accesses.
        if self.strong().fetch_add(1, Ordering::Relaxed) > isize::MAX as usize {
            std::process::abort();
        }
        Counted { ptr: self.ptr, _owns: PhantomData }
    }
}

impl<T: Pooled> Drop for Counted<T> {
    #[inline]
    fn drop(&mut self) {
        if self.strong().fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Synchronizes with the other references' release decrements, so
        // their uses of the value happen before it is dropped (as in `Arc`).
        fence(Ordering::Acquire);
        let block = self.ptr.as_ptr();
        // SAFETY: this was the last reference: the value is dropped once
        // (which may drop other counted values, a node's tracer's tensors,
        // before the list is touched) and the block is handed over dead.
        unsafe {
            std::ptr::drop_in_place(&mut (*block).value);
            FreeList::give(T::free_list(), block.cast(), block_layout::<T>());
        }
    }
}

impl<T: Pooled + std::fmt::Debug> std::fmt::Debug for Counted<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    /// Nodes freed in a burst are reused by the next ones without mixing
    /// up values, identities or counts.
    #[test]
    fn reused_nodes_keep_values_and_identity() {
        for round in 0..3 {
            let ts: Vec<Tensor> = (0..2000).map(|i| Tensor::from_vec(vec![(i + round) as f64], [1])).collect();
            let copies: Vec<Tensor> = ts.iter().step_by(3).cloned().collect();
            drop(ts);
            for (k, c) in copies.iter().enumerate() {
                assert_eq!(c.to_vec::<f64>(), vec![(3 * k + round) as f64]);
            }
            let fresh = Tensor::from_vec(vec![-1.0f64], [1]);
            assert!(copies.iter().all(|c| !c.same_node(&fresh)));
            assert!(copies[0].same_node(&copies[0].clone()));
        }
    }

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
