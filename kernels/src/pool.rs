//! A caching allocator for array buffers.
//!
//! Freed buffers are kept, by exact size and alignment, and handed out again
//! for the next array of that size: small ones skip malloc and free, large
//! ones skip the page faults of fresh memory, which otherwise dominate
//! workloads that return hundreds of megabytes per call (per-sample
//! gradients). Small buffers live in a per-thread cache; large ones in a
//! process-wide cache whose total size is bounded (`XFORM_POOL_BYTES`,
//! default 2 GiB; 0 disables it).

use std::alloc::Layout;
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::Mutex;

/// Buffers up to this many bytes are cached per thread.
const SMALL_MAX: usize = 64 << 10;
/// At most this many cached buffers per small size.
const SMALL_PER_SIZE: usize = 32;

struct Cached {
    layout: Layout,
    ptrs: Vec<*mut u8>,
}

struct SmallCache(Vec<Cached>);

impl Drop for SmallCache {
    fn drop(&mut self) {
        for c in &self.0 {
            for &p in &c.ptrs {
                // SAFETY: p was allocated with c.layout and is owned by the cache.
                unsafe { std::alloc::dealloc(p, c.layout) };
            }
        }
    }
}

thread_local! {
    static SMALL: RefCell<SmallCache> = const { RefCell::new(SmallCache(Vec::new())) };
}

/// Large cached buffers, oldest first, and their total size.
struct LargeCache {
    entries: Vec<(Layout, usize)>,
    bytes: usize,
}

// SAFETY: the cache only holds addresses of allocations that nothing else
// references; moving them between threads is sound.
unsafe impl Send for LargeCache {}

static LARGE: Mutex<LargeCache> = Mutex::new(LargeCache { entries: Vec::new(), bytes: 0 });

fn large_budget() -> usize {
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| std::env::var("XFORM_POOL_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(2 << 30))
}

fn take(layout: Layout) -> Option<*mut u8> {
    if layout.size() <= SMALL_MAX {
        SMALL
            .try_with(|s| {
                let mut s = s.borrow_mut();
                s.0.iter_mut().find(|c| c.layout == layout).and_then(|c| c.ptrs.pop())
            })
            .ok()
            .flatten()
    } else {
        let mut l = LARGE.lock().unwrap_or_else(|e| e.into_inner());
        let i = l.entries.iter().rposition(|(lay, _)| *lay == layout)?;
        let (lay, p) = l.entries.remove(i);
        l.bytes -= lay.size();
        Some(p as *mut u8)
    }
}

/// Returns `ptr` (allocated with `layout`) to the cache, or frees it.
fn give(ptr: *mut u8, layout: Layout) {
    if layout.size() <= SMALL_MAX {
        let kept = SMALL
            .try_with(|s| {
                let mut s = s.borrow_mut();
                let idx = match s.0.iter().position(|c| c.layout == layout) {
                    Some(i) => i,
                    None => {
                        s.0.push(Cached { layout, ptrs: Vec::new() });
                        s.0.len() - 1
                    }
                };
                let c = &mut s.0[idx];
                if c.ptrs.len() < SMALL_PER_SIZE {
                    c.ptrs.push(ptr);
                    true
                } else {
                    false
                }
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: ptr was allocated with layout and is not used elsewhere.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
        return;
    }
    let budget = large_budget();
    if layout.size() > budget {
        // SAFETY: as above.
        unsafe { std::alloc::dealloc(ptr, layout) };
        return;
    }
    let mut l = LARGE.lock().unwrap_or_else(|e| e.into_inner());
    while l.bytes + layout.size() > budget && !l.entries.is_empty() {
        let (lay, p) = l.entries.remove(0);
        l.bytes -= lay.size();
        // SAFETY: the entry was allocated with lay and is owned by the cache.
        unsafe { std::alloc::dealloc(p as *mut u8, lay) };
    }
    l.bytes += layout.size();
    l.entries.push((layout, ptr as usize));
}

/// An allocation the system refused, or whose size overflows `usize`.
///
/// NOTE: [allocation failure] Buffer allocations never abort the process:
/// [`alloc_uninit`] (and everything built on it) unwinds with this value as
/// the payload (through `resume_unwind`, so no panic message is printed),
/// and xform-ops turns it into a typed out-of-memory error at the op that
/// asked ([`catch_alloc`]). Kernels therefore allocate every buffer whose
/// size comes from a shape through this module, never through `Vec`'s
/// infallible constructors, and allocate before they write anything.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AllocFailure {
    /// The bytes requested (exact, even where it exceeds `usize`).
    pub bytes: u128,
}

/// Unwinds with an [`AllocFailure`] of `n` elements of `T`.
#[cold]
#[inline(never)]
fn refuse<T>(n: usize) -> ! {
    let bytes = n as u128 * std::mem::size_of::<T>() as u128;
    std::panic::resume_unwind(Box::new(AllocFailure { bytes }))
}

/// Runs `f`; an [`AllocFailure`] unwinding out of it becomes `Err` (any
/// other panic continues unwinding).
pub fn catch_alloc<R>(f: impl FnOnce() -> R) -> Result<R, AllocFailure> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(payload) => match payload.downcast::<AllocFailure>() {
            Ok(failure) => Err(*failure),
            Err(other) => std::panic::resume_unwind(other),
        },
    }
}

/// The machine's memory (RAM and swap, from /proc/meminfo; `None` where
/// unknown). A buffer larger than this can never be backed: the kernels
/// write every element, so under an always-overcommit policy it would only
/// fail later, as a kill by the OOM killer instead of an error.
fn machine_memory() -> Option<u128> {
    static MEM: std::sync::OnceLock<Option<u128>> = std::sync::OnceLock::new();
    *MEM.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib = |key: &str| -> Option<u128> {
            let line = info.lines().find(|l| l.starts_with(key))?;
            line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
        };
        Some((kib("MemTotal:")? + kib("SwapTotal:").unwrap_or(0)) * 1024)
    })
}

/// An empty vector with room for exactly `n` elements, or an unwind with an
/// [`AllocFailure`] (see the note there) where `Vec::with_capacity` would
/// abort the process.
pub fn vec_with_capacity<T>(n: usize) -> Vec<T> {
    let bytes = n as u128 * std::mem::size_of::<T>() as u128;
    if bytes > SMALL_MAX as u128 && machine_memory().is_some_and(|m| bytes > m) {
        refuse::<T>(n)
    }
    let mut v = Vec::new();
    if v.try_reserve_exact(n).is_err() {
        refuse::<T>(n)
    }
    v
}

/// A vector of `n` uninitialized slots, from the cache when one of that size
/// is free.
///
/// # Panics
/// Unwinds with an [`AllocFailure`] when the memory cannot be had.
pub fn alloc_uninit<T>(n: usize) -> Vec<MaybeUninit<T>> {
    let Ok(layout) = Layout::array::<T>(n) else { refuse::<T>(n) };
    if layout.size() > 0 {
        if let Some(p) = take(layout) {
            // SAFETY: p was allocated with exactly Layout::array::<T>(n) (the
            // cache matches layouts exactly), so it is a valid Vec buffer of
            // capacity n; MaybeUninit slots need no initialization.
            return unsafe { Vec::from_raw_parts(p as *mut MaybeUninit<T>, n, n) };
        }
    }
    let mut v = vec_with_capacity(n);
    // SAFETY: MaybeUninit<T> needs no initialization; capacity is n (or T is
    // zero-sized).
    unsafe { v.set_len(n) };
    v
}

/// The `n` values `f(0), f(1), ...`, in a buffer from the cache when one
/// is free (what `(0..n).map(f).collect()` does, without aborting when the
/// memory cannot be had).
pub fn from_fn<T>(n: usize, mut f: impl FnMut(usize) -> T) -> Vec<T> {
    let mut v = alloc_uninit::<T>(n);
    for (i, s) in v.iter_mut().enumerate() {
        s.write(f(i));
    }
    // SAFETY: every slot was written.
    unsafe { assume_init(v) }
}

/// A vector of `n` copies of `value`, from the cache when possible.
pub fn filled<T: Copy>(n: usize, value: T) -> Vec<T> {
    let mut v = alloc_uninit::<T>(n);
    for s in v.iter_mut() {
        s.write(value);
    }
    // SAFETY: every slot was written.
    unsafe { assume_init(v) }
}

/// Takes a vector's buffer into the cache (or frees it).
pub fn recycle<T>(v: Vec<T>) {
    let cap = v.capacity();
    let Ok(layout) = Layout::array::<T>(cap) else {
        return;
    };
    if layout.size() == 0 {
        return;
    }
    let mut v = std::mem::ManuallyDrop::new(v);
    // Elements are plain data (no destructors) for every buffer type.
    let ptr = v.as_mut_ptr() as *mut u8;
    give(ptr, layout);
}

/// Converts a completely written vector of slots into a vector of values.
///
/// Used with [`alloc_uninit`].
///
/// # Safety
/// Every slot must have been written.
pub unsafe fn assume_init<T>(v: Vec<MaybeUninit<T>>) -> Vec<T> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: MaybeUninit<T> has the layout of T, every slot is initialized
    // (the caller's contract), and the allocation is handed over unchanged.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut T, v.len(), v.capacity()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_by_size() {
        let v: Vec<f32> = filled(100, 1.0);
        let p = v.as_ptr() as usize;
        recycle(v);
        let w = alloc_uninit::<f32>(100);
        assert_eq!(w.as_ptr() as usize, p);
        // same bytes and alignment, another type: reused too
        recycle(unsafe { assume_init(w) });
        let u = alloc_uninit::<i32>(100);
        assert_eq!(u.as_ptr() as usize, p);
        let big: Vec<f64> = filled(1 << 20, 2.0);
        let q = big.as_ptr() as usize;
        recycle(big);
        let again: Vec<f64> = filled(1 << 20, 3.0);
        assert_eq!(again.as_ptr() as usize, q);
        assert!(again.iter().all(|&x| x == 3.0));
    }

    #[test]
    fn a_refused_allocation_is_a_typed_failure() {
        // Larger than any address space: refused before reaching the system.
        let r = catch_alloc(|| alloc_uninit::<f64>(usize::MAX / 4));
        assert_eq!(r.unwrap_err(), AllocFailure { bytes: (usize::MAX / 4) as u128 * 8 });
        // Fits usize but no machine has it (1 << 60 bytes).
        let r = catch_alloc(|| filled::<u8>(1 << 60, 0));
        assert_eq!(r.unwrap_err(), AllocFailure { bytes: 1 << 60 });
        let r = catch_alloc(|| vec_with_capacity::<i32>(1 << 60));
        assert_eq!(r.unwrap_err(), AllocFailure { bytes: 1 << 62 });
        // Other panics pass through unchanged.
        let p = std::panic::catch_unwind(|| catch_alloc(|| panic!("not an allocation"))).unwrap_err();
        assert_eq!(p.downcast_ref::<&str>(), Some(&"not an allocation"));
        // And allocation works afterwards.
        assert_eq!(from_fn(4, |i| i as u32 * 2), vec![0, 2, 4, 6]);
        assert_eq!(catch_alloc(|| filled(3, 7i64)), Ok(vec![7, 7, 7]));
    }
}
