//! The native stack that nested transforms use, and the guard that keeps
//! them from overflowing it.
//!
//! NOTE: [stack guard] Every transform call pushes an interpreter and runs
//! the user's function in its frames, and an op applied inside `n` nested
//! transforms is dispatched down through their rules, frames on frames: the
//! native stack grows with the nesting. A stack overflow aborts the
//! process, which no error handling can catch, so the interpreter core
//! checks the stack pointer against this thread's limit before it pushes
//! an interpreter and before it hands an op to one: the low end of the
//! thread's stack plus [`RESERVE`], kept for the innermost function, the
//! kernels and the error's unwinding. Past it, the call fails with the
//! typed `TooDeep` error instead. The bounds come from the thread library
//! (`pthread_getattr_np` on Linux, `pthread_get_stack*_np` on macOS; the
//! main thread's stack is its `ulimit -s`, 8 MiB by default; spawned Rust
//! threads get 2 MiB unless `Builder::stack_size` says otherwise); where
//! they are unknown, the limit is [`FALLBACK_BUDGET`] below the first
//! check on the thread.
//!
//! What a level costs, per level of nesting including an op's dispatch
//! through it, measured by `tests/suite/limits.rs` (which prints the
//! figures and checks bounds on them) in the test profile on x86-64: 3.9
//! KiB for vmap, 2.5 KiB for jvp, and 3.9 KiB for grad (two interpreters,
//! a JVP and a staging one). So 1,024 nested vmaps (4 MiB) or a 200-fold
//! grad (0.8 MiB) fit an 8 MiB thread (tested), and deeper nesting (4,096
//! vmaps on a 2 MiB thread, tested) is refused rather than crashing.

use std::cell::Cell;

/// Stack kept free below the deepest transform level: for the innermost
/// function, the kernels it calls, and raising the error.
pub const RESERVE: usize = 256 << 10;

/// Stack allowed below the first check on a thread whose bounds the
/// platform does not report.
pub const FALLBACK_BUDGET: usize = 1 << 20;

/// This thread's guard, in one thread-local.
struct Guard {
    /// The lowest stack address transforms may reach (0: not computed yet).
    limit: Cell<usize>,
    /// The lowest stack address a check saw (see [`deepest_since`]).
    low_water: Cell<usize>,
}

thread_local! {
    static GUARD: Guard = const { Guard { limit: Cell::new(0), low_water: Cell::new(usize::MAX) } };
}

/// The current stack pointer, near enough (the address of a local).
#[inline(always)]
fn stack_pointer() -> usize {
    let marker = 0u8;
    std::hint::black_box(std::ptr::addr_of!(marker)) as usize
}

impl Guard {
    /// The lowest address transforms may use on this thread.
    #[inline]
    fn limit(&self, sp: usize) -> usize {
        match self.limit.get() {
            0 => {
                let v = match bounds() {
                    Some((low, _)) => low.saturating_add(RESERVE),
                    None => sp.saturating_sub(FALLBACK_BUDGET),
                }
                .max(1);
                self.limit.set(v);
                v
            }
            v => v,
        }
    }
}

/// True if this thread's stack is used down to the limit (NOTE: [stack
/// guard]): one thread-local access, which also lowers the low-water mark
/// [`deepest_since`] reads, and a comparison.
#[inline]
pub(crate) fn exhausted() -> bool {
    let sp = stack_pointer();
    GUARD.with(|g| {
        g.low_water.set(g.low_water.get().min(sp));
        sp < g.limit(sp)
    })
}

/// The most stack, in bytes below the caller's frame, that transform
/// levels (pushes and op dispatches) used while `f` ran: how the per-level
/// costs in NOTE: [stack guard] are measured.
pub fn deepest_since<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let top = stack_pointer();
    let before = GUARD.with(|g| g.low_water.replace(usize::MAX));
    let r = f();
    let low = GUARD.with(|g| g.low_water.replace(before.min(g.low_water.get())));
    (r, top.saturating_sub(low))
}

/// This thread's stack as `(lowest, highest)` addresses, where the platform
/// reports it.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn bounds() -> Option<(usize, usize)> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: `pthread_getattr_np` initializes `attr` for the calling
    // thread (its result is checked before `attr` is read), and the
    // attribute object is destroyed once read.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        (ok && !addr.is_null()).then(|| (addr as usize, addr as usize + size))
    }
}

/// This thread's stack as `(lowest, highest)` addresses.
#[cfg(target_os = "macos")]
fn bounds() -> Option<(usize, usize)> {
    // SAFETY: both functions only read the calling thread's descriptor.
    unsafe {
        let th = libc::pthread_self();
        let high = libc::pthread_get_stackaddr_np(th) as usize;
        let size = libc::pthread_get_stacksize_np(th);
        Some((high - size, high))
    }
}

/// Unknown elsewhere: the fallback budget applies.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos")))]
fn bounds() -> Option<(usize, usize)> {
    None
}
