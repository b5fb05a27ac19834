//! `ValueCell`: the interior-mutable slot of a tensor node. Any thread may
//! read it; only the thread that made it writes it.
//!
//! NOTE: [node ownership] A tensor node's value changes only under a
//! transform (functionalized writes, a view re-reading its base), and a
//! transform writes only nodes of its own thread: its tracers and the
//! tensors made inside it (`mutation::check_scope` refuses the others).
//! So the cell is biased to the thread that made it, its *owner*: the
//! owner's borrows are counted in a plain `Cell` exactly like a `RefCell`'s
//! (the hot path: nearly every read is by the owner), other threads' reads
//! in an atomic counter, and a write, always the owner's, first takes that
//! counter to [`WRITING`] so that no other thread reads meanwhile (it waits
//! for readers to leave; readers wait for the write, which runs no user
//! code). A write asked of another thread is refused (`try_borrow_mut`
//! returns `None`), never done.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicIsize, AtomicU32, Ordering};

/// The `shared` counter while the owner writes.
const WRITING: isize = -1;

thread_local! {
    /// This thread's index (0: not assigned yet).
    static THREAD: Cell<u32> = const { Cell::new(0) };
}

/// The next thread index to hand out; indices are never reused, so a cell
/// whose owner exited has no owner.
static NEXT_THREAD: AtomicU32 = AtomicU32::new(1);

/// The calling thread's index: unique in the process, never 0.
#[inline]
pub(crate) fn thread_index() -> u32 {
    THREAD.with(|t| match t.get() {
        0 => assign_index(t),
        i => i,
    })
}

#[cold]
#[inline(never)]
fn assign_index(t: &Cell<u32>) -> u32 {
    let i = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    if i == 0 || i == u32::MAX {
        // 4 billion threads: an index would repeat; refuse to go on.
        std::process::abort();
    }
    t.set(i);
    i
}

/// A `RefCell` that other threads may read (see the module note).
pub(crate) struct ValueCell<T> {
    owner: u32,
    /// The owner's borrows: n > 0 readers, -1 a writer. Only the owner
    /// thread touches it.
    local: Cell<isize>,
    /// Other threads' readers (n > 0), or [`WRITING`] while the owner writes.
    shared: AtomicIsize,
    value: UnsafeCell<T>,
}

// SAFETY: shared access is sound when: (1) `local` is touched only by the
// owner thread (every access is behind an `is_owner` check, and indices are
// unique per thread), so it is never accessed concurrently; (2) `value` is
// mutated only by the owner, and only while `local` is -1 (no reader on the
// owner thread) and `shared` is `WRITING` (taken by a compare-exchange from
// 0: no reader on another thread, and none can start); (3) other threads
// only read `value`, concurrently with each other and with the owner's
// reads, which needs `T: Sync`, with acquire/release on `shared` ordering
// their reads after the previous write and before the next one.
// (The cell is `Send` when `T` is, automatically: moved, it keeps its owner
// index, so the receiving thread reads it through `shared`.)
unsafe impl<T: Send + Sync> Sync for ValueCell<T> {}

impl<T> ValueCell<T> {
    /// A cell owned by the thread of index `owner` (the caller's
    /// [`thread_index`], read before the node's block is taken so that the
    /// node is built in place).
    #[inline(always)]
    pub(crate) fn new(value: T, owner: u32) -> ValueCell<T> {
        ValueCell { owner, local: Cell::new(0), shared: AtomicIsize::new(0), value: UnsafeCell::new(value) }
    }

    /// True on the thread that made the cell.
    #[inline]
    pub(crate) fn is_owner(&self) -> bool {
        self.owner == thread_index()
    }

    /// Borrows the value for reading.
    ///
    /// # Panics
    /// On the owner thread, while it writes the cell (a bug in xform, as
    /// with `RefCell`).
    #[inline]
    pub(crate) fn borrow(&self) -> CellRef<'_, T> {
        self.acquire();
        CellRef { cell: self, _not_send: PhantomData }
    }

    /// Counts a read borrow (ended by [`ValueCell::release`] on the same
    /// thread); the value may then be read through [`ValueCell::as_ptr`].
    #[inline]
    pub(crate) fn acquire(&self) {
        if self.is_owner() {
            let n = self.local.get();
            if n < 0 || n == isize::MAX {
                borrowed_while_writing();
            }
            self.local.set(n + 1);
        } else {
            self.acquire_shared()
        }
    }

    /// Ends a read borrow counted by [`ValueCell::acquire`]. (A cell's
    /// owner never changes, so the same thread finds the same counter.)
    ///
    /// # Safety
    /// Once per `acquire`, on the thread that called it, after the last
    /// use of the value read under it.
    #[inline]
    pub(crate) unsafe fn release(&self) {
        if self.is_owner() {
            self.local.set(self.local.get() - 1);
        } else {
            // Release: this read happens before the owner's next write.
            self.shared.fetch_sub(1, Ordering::Release);
        }
    }

    /// The value's address (read it only under a counted borrow).
    #[inline]
    pub(crate) fn as_ptr(&self) -> *const T {
        self.value.get()
    }

    /// A reader on another thread: waits out a write in progress.
    #[cold]
    #[inline(never)]
    fn acquire_shared(&self) {
        let mut spins = 0u32;
        let mut n = self.shared.load(Ordering::Relaxed);
        loop {
            if (0..isize::MAX).contains(&n) {
                match self.shared.compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return,
                    Err(now) => n = now,
                }
            } else {
                backoff(&mut spins);
                n = self.shared.load(Ordering::Relaxed);
            }
        }
    }

    /// Borrows the value for writing: `None` on any thread but the owner.
    ///
    /// # Panics
    /// On the owner thread, while it holds another borrow of the cell (a
    /// bug in xform, as with `RefCell`).
    #[inline]
    pub(crate) fn try_borrow_mut(&self) -> Option<CellMut<'_, T>> {
        if !self.is_owner() {
            return None;
        }
        if self.local.get() != 0 {
            borrowed_while_writing();
        }
        let mut spins = 0u32;
        // Acquire: other threads' reads (released when they drop their
        // borrows) happen before this write.
        while self.shared.compare_exchange_weak(0, WRITING, Ordering::Acquire, Ordering::Relaxed).is_err() {
            backoff(&mut spins);
        }
        self.local.set(-1);
        Some(CellMut { cell: self })
    }
}

/// Waits a little: spins first, then yields (a reader on another thread may
/// be descheduled while it holds its borrow).
#[cold]
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn borrowed_while_writing() -> ! {
    panic!("internal error in xform: a tensor value borrowed while it is being written on its own thread")
}

/// A read borrow of a [`ValueCell`]; it stays on the thread that took it.
pub(crate) struct CellRef<'a, T> {
    cell: &'a ValueCell<T>,
    /// Not `Send`: `release` must run on the borrowing thread.
    _not_send: PhantomData<*const ()>,
}

impl<T> std::ops::Deref for CellRef<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a read borrow is counted, so no write happens while it
        // lives (see the `Sync` impl).
        unsafe { &*self.cell.as_ptr() }
    }
}

impl<T> Drop for CellRef<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the borrow counted in `borrow`, on this thread (not `Send`).
        unsafe { self.cell.release() }
    }
}

/// A write borrow of a [`ValueCell`] (the owner's only).
pub(crate) struct CellMut<'a, T> {
    cell: &'a ValueCell<T>,
}

impl<T> std::ops::Deref for CellMut<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the borrow is exclusive (see `try_borrow_mut`).
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> std::ops::DerefMut for CellMut<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the borrow is exclusive (see `try_borrow_mut`), and
        // `&mut self` makes this reference the only one.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for CellMut<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.cell.local.set(0);
        // Release: the write happens before the next reader's acquire.
        self.cell.shared.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads get distinct indices, stable per thread.
    #[test]
    fn thread_indices_are_unique_and_stable() {
        let here = thread_index();
        assert_eq!(here, thread_index());
        let there = std::thread::spawn(thread_index).join().expect("thread");
        assert_ne!(here, there);
        assert_ne!(there, 0);
    }

    /// Other threads read while the owner writes repeatedly: every read sees
    /// a whole value (both halves equal), and other threads cannot write.
    #[test]
    fn readers_on_other_threads_see_whole_writes() {
        let cell = ValueCell::new((0u64, 0u64), thread_index());
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    assert!(cell.try_borrow_mut().is_none());
                    let mut last = 0;
                    for _ in 0..20_000 {
                        let v = cell.borrow();
                        assert_eq!(v.0, v.1);
                        assert!(v.0 >= last);
                        last = v.0;
                    }
                });
            }
            for i in 1..=20_000u64 {
                let mut w = cell.try_borrow_mut().expect("owner writes");
                *w = (i, i);
            }
        });
        assert_eq!(*cell.borrow(), (20_000, 20_000));
    }
}
