//! Two halves of a small kernel on two threads, where a second thread is
//! lent.
//!
//! NOTE: [paired halves] Waking rayon's pool costs tens of microseconds on
//! a small virtual machine, so kernels below [`super::PAR_MIN_WORK`] run on
//! the calling thread. A jit replay has a thread that is already awake (the
//! helper of its parallel sinks, `exec/src/sinks.rs`), and lends
//! it here for the replay's duration ([`lend`]). Kernels with work between
//! [`PAIR_MIN_WORK`] and `PAR_MIN_WORK` then split it in two ([`join`]): the
//! second half is offered to the lent thread, the first runs here, and the
//! second runs here too unless the other thread took it meanwhile, so a
//! busy or sleeping helper costs only the offer. Each half writes its own
//! rows or ranges exactly as the whole would, so results are the same bits.
//! The kernels that split are loops over ranges (`for_ranges`: the jit's
//! fused loops). Products do not: the direct GEMM kernel takes at most
//! 2^18 multiply-adds (about 4 us), and halves measured slower or even
//! (jitted, sequential against halved: 32x64x64 2.2 vs 3.6 us, 64x64x64
//! 3.6 vs 4.3 us, 64x128x48 5.7 vs 5.7 us).
//! A half must not depend on thread-local state (xform's error scopes, the
//! floating-point control register): either thread may run it.

use std::cell::Cell;

/// Below this much work (elements times the cost of each, as for
/// [`super::Par::for_work`]) a kernel is not split. An offer, the other
/// core pulling the half's operands out of this one's cache, and the
/// hand-back cost about 3 us on the 2-core target (a bare cache-line
/// round trip between its cores is 0.13 us). Measured with a jitted chain
/// `t = tanh(a + b); (t, 1 - t * t)` (cost 8 per element), sequential
/// against halved: 2^11 elements 2.0 vs 3.6 us, 2^13 5.4 vs 5.5 us, 2^14
/// 10.1 vs 8.0 us, 2^15 19.7 vs 12.9 us. (2^14, the bound before, halved
/// loops of 1.5 us and lost about 1.5 us on each.)
pub const PAIR_MIN_WORK: usize = 1 << 17;

/// A thread that can run half of a kernel.
pub trait Pair {
    /// Runs `a` here and `b` on the other thread if it takes it before `a`
    /// is done (else here, after `a`); returns when both ran. A panic in
    /// either is resumed here after both finished (`a`'s when both
    /// panicked).
    fn join(&self, a: &mut dyn FnMut(), b: &mut (dyn FnMut() + Send));
}

thread_local! {
    /// The pair lent to this thread (its lifetime erased: [`lend`] removes
    /// it before the borrow ends).
    static LENT: Cell<Option<*const (dyn Pair + 'static)>> = const { Cell::new(None) };
}

/// Runs `f` with `pair` lent to the kernels it calls on this thread.
pub fn lend<R>(pair: &dyn Pair, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<*const (dyn Pair + 'static)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LENT.with(|l| l.set(self.0));
        }
    }
    // SAFETY: only the lifetime is erased; the pointer is removed from the
    // thread-local (by `Restore`, also on unwinding) before `pair`'s borrow
    // ends, and it is only read on this thread meanwhile.
    let erased: *const (dyn Pair + 'static) = unsafe { std::mem::transmute(pair as *const dyn Pair) };
    let _restore = Restore(LENT.with(|l| l.replace(Some(erased))));
    f()
}

/// Whether a pair is lent to this thread.
pub fn lent() -> bool {
    LENT.with(|l| l.get().is_some())
}

/// Whether `work` is worth splitting (between the bounds).
fn splits(work: usize) -> bool {
    (PAIR_MIN_WORK..super::PAR_MIN_WORK).contains(&work)
}

/// Whether a pair is lent to this thread and `work` is worth splitting.
pub fn worth(work: usize) -> bool {
    splits(work) && lent()
}

/// Whether [`super::for_ranges`] halves a loop of `n` elements in steps of
/// `step` at `cost` per element where a pair is lent: two steps or more,
/// and work worth a split (what a jit plan asks before lending its helper).
pub fn halves(n: usize, step: usize, cost: usize) -> bool {
    n.div_ceil(step.max(1)) >= 2 && splits(n.saturating_mul(cost))
}

/// Runs `a` and `b`, `b` on the lent thread when there is one and it takes
/// it in time; returns when both ran.
pub fn join(a: impl FnOnce(), b: impl FnOnce() + Send) {
    let Some(pair) = LENT.with(|l| l.get()) else {
        a();
        b();
        return;
    };
    let (mut a, mut b) = (Some(a), Some(b));
    let mut run_a = || {
        if let Some(a) = a.take() {
            a()
        }
    };
    let mut run_b = || {
        if let Some(b) = b.take() {
            b()
        }
    };
    // SAFETY: `lend` installed the pointer for the duration of its closure,
    // which is still running on this thread (this call is inside it).
    unsafe { (*pair).join(&mut run_a, &mut run_b) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::for_ranges;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A pair that always runs `b` on a second (scoped) thread, counting
    /// its joins.
    struct Thread(AtomicUsize);

    impl Pair for Thread {
        fn join(&self, a: &mut dyn FnMut(), b: &mut (dyn FnMut() + Send)) {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::thread::scope(|s| {
                s.spawn(b);
                a();
            });
        }
    }

    /// Each element of `0..n` visited once, ranges starting at multiples
    /// of the step, with and without a lent pair (which splits only work
    /// between the bounds).
    #[test]
    fn ranges_cover_once_with_a_lent_pair() {
        for (n, cost, split) in [(1 << 14, 8, true), (16500, 8, true), (1024, 128, false), (1 << 14, 1, false)] {
            let pair = Thread(AtomicUsize::new(0));
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            lend(&pair, || {
                for_ranges(n, 1024, cost, |r| {
                    assert_eq!(r.start % 1024, 0, "{r:?}");
                    r.for_each(|i| {
                        seen[i].fetch_add(1, Ordering::SeqCst);
                    });
                })
            });
            assert!(seen.iter().all(|c| c.load(Ordering::SeqCst) == 1), "n {n}");
            assert_eq!(pair.0.load(Ordering::SeqCst), split as usize, "n {n} cost {cost}");
            // what a jit plan asks before lending its helper agrees
            assert_eq!(halves(n, 1024, cost), split, "n {n} cost {cost}");
        }
        // nothing lent outside `lend`
        assert!(!worth(PAIR_MIN_WORK));
    }

    /// A panic in either half unwinds out of the join after both ran.
    #[test]
    fn a_panic_in_a_half_is_resumed_after_both_ran() {
        let pair = Thread(AtomicUsize::new(0));
        for first in [true, false] {
            let ran = AtomicUsize::new(0);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                lend(&pair, || {
                    join(
                        || {
                            ran.fetch_add(1, Ordering::SeqCst);
                            assert!(!first, "first half failed");
                        },
                        || {
                            ran.fetch_add(1, Ordering::SeqCst);
                            assert!(first, "second half failed");
                        },
                    )
                })
            }));
            assert!(r.is_err());
            assert_eq!(ran.load(Ordering::SeqCst), 2);
        }
        // the lent pair is gone after the unwind
        assert!(!worth(PAIR_MIN_WORK));
    }
}
