//! Sink steps of a CPU replay run on a second core.
//!
//! NOTE: [parallel sinks] A *sink* is a step whose results no later step
//! reads: they are only returned. `vmap(grad)`'s per-sample weight
//! gradients are sinks (each layer's outer products, written once and
//! handed back), and they are most of W1's memory traffic. Nothing waits
//! for a sink until the replay ends, so the plan hands it to a helper
//! thread (one per process, `xform-jit-sinks`) and goes on with the steps
//! after it; the results are collected when the step list is done.
//! Interpreting op by op cannot do this: it does not know whether a value
//! will be read.
//!
//! A step is a sink when it runs one heavy primitive (dot_general, conv,
//! a reduction, a window op or an indexing op) on the CPU, writes at
//! least [`SINK_MIN_ELEMS`] elements, and some later step is not a sink
//! (the main thread has work to overlap; offloading the last step would
//! only add a hand-off).
//!
//! The hand-off never makes the replay wait for a thread that is not
//! running its job: a posted job sits in the replay's queue, the helper
//! takes jobs from its front, and at the end the replaying thread takes
//! what is left itself. It waits only for a job the helper already runs
//! (spinning briefly, then on a condition variable), so a helper that is
//! asleep, or busy with another replay's jobs, costs at worst the
//! sequential time. The helper serves registered replays in order, spins
//! for `SPIN` for the next one (a replay in a loop posts again
//! within microseconds, and waking a sleeping thread costs tens of them
//! on a virtual machine), then sleeps. Both spins yield the CPU after
//! their first microseconds (`spin_until`), so two threads the scheduler
//! placed on one CPU do not spin through each other's time slices.
//! Results are the same bits whichever thread computes them (the
//! lowerings are deterministic); the helper's arrays become tensors on
//! the replaying thread, which owns them as it owns its other results. A panic in a job is caught there and resumed
//! on the replaying thread, as if the step had run there.
//!
//! The replay also lends the helper to its kernels for halves of their
//! work ([`Sinks::lender`]; NOTE: [paired halves] in
//! `xform_kernels::cpu::pair`): a half goes through the same queue, and
//! whichever thread moves it out of `QUEUED` first runs it, so the lender
//! waits only for a half the helper already runs.
//!
//! A replay on one of rayon's pool threads offloads nothing (the plan
//! checks): blocked at its join on a sink whose kernel splits over the
//! pool, every pool thread could end up waiting, with that kernel's tasks
//! queued behind them.

use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use xform_ops::interp::lower_checked;
use xform_ops::{Array, Prim, Result};

/// The fewest result elements worth a hand-off (a post took about a
/// microsecond in W1 small's replay, as long as storing some 2^14
/// elements); W1 small's smallest outer product (64 x 64 x 10) has 40960.
pub const SINK_MIN_ELEMS: usize = 1 << 14;

/// Whether a primitive may run on a helper thread as a sink: what its
/// family states (`JitProps::sink`: a pure CPU lowering with no
/// thread-bound state, heavy enough to be worth it).
pub fn heavy(prim: &Prim) -> bool {
    prim.jit_props().sink
}

/// What a helper returns: the step's arrays, its error, or its panic.
type Outcome = std::thread::Result<Result<SmallVec<[Array; 2]>>>;

/// What a sink computes: its results' arrays.
type Work = Box<dyn FnOnce() -> Result<SmallVec<[Array; 2]>> + Send>;

/// A posted job.
enum Job {
    /// A sink step: its index and its work.
    Sink { step: usize, work: Work },
    /// Half of a kernel, lent to the helper (NOTE: [paired halves] in
    /// `xform_kernels::cpu::pair`).
    Half(Arc<Half>),
}

/// Runs a sink step here, catching a panic to resume on the replaying
/// thread.
fn run_sink(step: usize, work: Work) -> (usize, Outcome) {
    (step, std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)))
}

/// Where a lent half stands.
const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const DONE: u8 = 2;
const RECLAIMED: u8 = 3;

/// The second half of a kernel offered to the helper: whichever thread
/// moves `state` out of `QUEUED` runs it (the helper to `TAKEN`, then
/// `DONE`; the lender, once its own half is done, to `RECLAIMED`).
struct Half {
    /// The work, its lifetime erased: the lender neither returns nor
    /// unwinds before the half is `DONE` or reclaimed ([`Settle`]), so the
    /// closure outlives every use.
    work: *mut (dyn FnMut() + Send + 'static),
    state: std::sync::atomic::AtomicU8,
    /// The work's panic on the helper, for the lender to resume (and the
    /// lock under which the helper marks the half `DONE`).
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// Signalled when the helper marks the half `DONE`.
    done: Condvar,
}

// SAFETY: `work` is a `Send` closure, dereferenced only by the one thread
// that moved `state` out of `QUEUED`, while its lender keeps it alive (see
// the field); the rest is atomics, a mutex and a condition variable.
unsafe impl Send for Half {}
// SAFETY: as above: shared access goes through the state's compare-exchange.
unsafe impl Sync for Half {}

impl Half {
    /// The helper's side: runs the half unless the lender reclaimed it.
    fn help(&self) {
        if self.state.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        // SAFETY: this thread took the half, and its lender keeps the
        // closure alive until it sees DONE (below).
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*self.work)() }));
        // DONE under the lock a sleeping lender checks it with: the
        // notification cannot be missed
        let mut panic = self.panic.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(p) = outcome {
            *panic = Some(p);
        }
        self.state.store(DONE, Ordering::Release);
        drop(panic);
        self.done.notify_all();
    }

    /// The lender's side of a half the helper took: waits for `DONE`
    /// (spinning first: a half takes microseconds) and returns its panic.
    fn wait_done(&self) -> Option<Box<dyn std::any::Any + Send>> {
        wait_until(&self.panic, &self.done, || self.state.load(Ordering::Acquire) == DONE).take()
    }
}

/// Waits until `ready()`, which the other thread makes true under `lock`
/// and then signals `cv`: spinning first (the other thread's work takes
/// microseconds), then on the condition variable. Returns with the lock
/// held.
fn wait_until<'m, T>(lock: &'m Mutex<T>, cv: &Condvar, ready: impl Fn() -> bool) -> std::sync::MutexGuard<'m, T> {
    spin_until(&ready);
    let mut guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    while !ready() {
        guard = cv.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
    guard
}

/// Settles a posted half when the lender leaves, by return or by unwind:
/// reclaims it if no thread took it, else waits until the helper is done
/// with it, so the helper never touches a closure whose frame is gone.
struct Settle<'h>(&'h Half);

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        let state = &self.0.state;
        if state.compare_exchange(QUEUED, RECLAIMED, Ordering::AcqRel, Ordering::Acquire) == Err(TAKEN) {
            // a panic of the half is dropped: the lender is unwinding already
            let _ = self.0.wait_done();
        }
    }
}

/// `prim` on `ins` through its lowering, as arrays (a tensor belongs to
/// the thread that made it; the replaying thread wraps them).
pub fn lower_sink(prim: &Prim, ins: &[Array]) -> Result<SmallVec<[Array; 2]>> {
    let refs: SmallVec<[&Array; 4]> = ins.iter().collect();
    let outs = lower_checked(prim, &refs)?;
    Ok(outs.iter().map(|t| t.array().expect("a lowering returns concrete arrays")).collect())
}

/// A replay's jobs and results, shared with its helper.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Jobs the helper took and has not finished (read without the lock
    /// while the joining thread spins; changed under it).
    running: AtomicUsize,
    /// The replay ended (or failed): the helper takes no more jobs.
    closed: AtomicBool,
    /// 1 while the helper serves this replay (or is registered to).
    helpers: AtomicUsize,
    /// Signalled (under the lock) when the helper finishes a job.
    finished: Condvar,
}

#[derive(Default)]
struct State {
    /// Posted jobs no thread took yet.
    queue: VecDeque<Job>,
    /// Jobs the helper finished.
    results: Vec<(usize, Outcome)>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the next job, counting it as running in the same critical
    /// section: a join that then finds the queue empty sees the job
    /// running and waits for its result. (Counted after the lock was
    /// released, a join blocked on the lock could run in between, find
    /// neither, and return without the job's result.)
    fn take(&self) -> Option<Job> {
        let mut state = self.lock();
        let job = state.queue.pop_front()?;
        if matches!(job, Job::Sink { .. }) {
            self.running.fetch_add(1, Ordering::AcqRel);
        }
        drop(state);
        Some(job)
    }

    /// Queues `job` and registers the replay with the helper thread unless
    /// it is there.
    fn post(self: &Arc<Self>, job: Job) {
        self.lock().queue.push_back(job);
        // one helper at a time: a lingering one takes this job
        if self.helpers.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            match helper() {
                Some(h) => h.register(self.clone()),
                // no helper thread: the join runs the jobs
                None => self.helpers.store(0, Ordering::SeqCst),
            }
        }
    }

    /// The helper's loop over this replay: jobs from the front until none
    /// is left.
    fn help(&self) {
        loop {
            while !self.closed.load(Ordering::Acquire) {
                let Some(job) = self.take() else { break };
                let (step, work) = match job {
                    Job::Sink { step, work } => (step, work),
                    Job::Half(half) => {
                        half.help();
                        continue;
                    }
                };
                let done = run_sink(step, work);
                // the count drops under the lock, which a waiter holds
                // while it checks the count: the notification cannot be
                // missed
                let mut state = self.lock();
                state.results.push(done);
                self.running.fetch_sub(1, Ordering::AcqRel);
                drop(state);
                self.finished.notify_all();
            }
            // leave; a post that saw the helper still here registered the
            // replay no more, so look once more after leaving and stay for
            // its job unless that post registered it again
            self.helpers.fetch_sub(1, Ordering::SeqCst);
            if !self.has_work() || self.helpers.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                return;
            }
        }
    }

    /// Open with jobs queued.
    fn has_work(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && !self.lock().queue.is_empty()
    }
}

/// How long a thread spins for the other before it sleeps: the helper for
/// the next replay's jobs (a replay in a loop posts again within tens of
/// microseconds), the joining thread for the helper's job. Waking a
/// sleeping thread costs about as much here (25-50 us on the 2-core VM).
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// How long a spin polls without yielding the CPU.
const SPIN_BUSY: std::time::Duration = std::time::Duration::from_micros(2);

/// Spins until `ready()` or `SPIN` has passed. After `SPIN_BUSY` it yields the CPU between polls: when the
/// other thread shares this CPU (the scheduler placed both there, or
/// another process holds the second core), a pure spin would hold the
/// CPU the other thread needs to make `ready()` true. Measured on W1
/// small's split replay with another process busy on the second core:
/// median 83 us and a tenth of the calls past 300 us with a pure spin
/// (the sequential replay takes 70 us); alone it measured the same
/// 43 us as the pure spin.
fn spin_until(ready: &dyn Fn() -> bool) {
    let start = std::time::Instant::now();
    while !ready() {
        let waited = start.elapsed();
        if waited >= SPIN {
            return;
        }
        if waited < SPIN_BUSY {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The process's helper thread: replays with jobs for it wait in its
/// inbox, in order.
#[derive(Default)]
struct Helper {
    inbox: Mutex<Inbox>,
    /// Replays registered so far (what the spinning helper watches).
    registered: AtomicUsize,
    wake: Condvar,
}

#[derive(Default)]
struct Inbox {
    replays: VecDeque<Arc<Shared>>,
    /// The helper waits on `wake` (set and read under the lock).
    asleep: bool,
}

/// The helper thread, started at the first post (`None` if it could not
/// be started: then the replaying thread runs every sink).
fn helper() -> Option<&'static Helper> {
    static HELPER: std::sync::OnceLock<Option<&'static Helper>> = std::sync::OnceLock::new();
    *HELPER.get_or_init(|| {
        let h: &'static Helper = Box::leak(Box::default());
        std::thread::Builder::new().name("xform-jit-sinks".into()).spawn(move || h.serve()).ok().map(|_| h)
    })
}

impl Helper {
    fn register(&self, replay: Arc<Shared>) {
        let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        inbox.replays.push_back(replay);
        self.registered.fetch_add(1, Ordering::Release);
        if inbox.asleep {
            self.wake.notify_one();
        }
    }

    /// The thread's loop: serve registered replays; without one, spin for
    /// a while, then sleep until the next.
    fn serve(&self) {
        loop {
            let next = self.inbox.lock().unwrap_or_else(|e| e.into_inner()).replays.pop_front();
            if let Some(replay) = next {
                replay.help();
                continue;
            }
            let seen = self.registered.load(Ordering::Acquire);
            spin_until(&|| self.registered.load(Ordering::Acquire) != seen);
            let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
            while inbox.replays.is_empty() {
                inbox.asleep = true;
                inbox = self.wake.wait(inbox).unwrap_or_else(|e| e.into_inner());
                inbox.asleep = false;
            }
        }
    }
}

/// The sinks of one replay.
#[derive(Default)]
pub struct Sinks {
    shared: Option<Arc<Shared>>,
}

impl Sinks {
    /// Queues step `step`'s work and registers the replay with the helper
    /// thread unless it is there.
    pub fn post(&mut self, step: usize, work: impl FnOnce() -> Result<SmallVec<[Array; 2]>> + Send + 'static) {
        self.shared.get_or_insert_with(Default::default).post(Job::Sink { step, work: Box::new(work) });
    }

    /// The helper, lent to the replay's kernels for halves of their work
    /// (NOTE: [paired halves] in `xform_kernels::cpu::pair`), through the
    /// replay's queue.
    pub fn lender(&mut self) -> Lender {
        Lender { shared: self.shared.get_or_insert_with(Default::default).clone() }
    }

    /// Runs the jobs no helper took, waits for those they run, and returns
    /// every posted step's arrays (in no particular order).
    ///
    /// # Errors
    /// The first failed step's error; a helper's panic is resumed here.
    pub fn join(&mut self) -> Result<Vec<(usize, SmallVec<[Array; 2]>)>> {
        let Some(shared) = self.shared.take() else { return Ok(Vec::new()) };
        shared.closed.store(true, Ordering::Release);
        let mut mine = Vec::new();
        while let Some(job) = shared.lock().queue.pop_front() {
            // a half still queued was reclaimed (or is, by its lender's
            // `Settle`): the helper must not run it now
            if let Job::Sink { step, work } = job {
                mine.push(run_sink(step, work));
            }
        }
        let mut state = wait_until(&shared.state, &shared.finished, || shared.running.load(Ordering::Acquire) == 0);
        let mut all = std::mem::take(&mut state.results);
        drop(state);
        all.extend(mine);
        all.sort_by_key(|(step, _)| *step);
        let mut out = Vec::with_capacity(all.len());
        for (step, outcome) in all {
            match outcome {
                Ok(r) => out.push((step, r?)),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(out)
    }
}

/// A replay's helper lent to its kernels (see [`Sinks::lender`]).
pub struct Lender {
    shared: Arc<Shared>,
}

impl xform_kernels::cpu::pair::Pair for Lender {
    fn join(&self, a: &mut dyn FnMut(), b: &mut (dyn FnMut() + Send)) {
        // SAFETY: only the lifetime is erased; from the post on, `settle`
        // keeps this frame (and `b`) alive until the half is DONE or
        // reclaimed, on return and on unwinding alike, after which the
        // helper no longer touches it.
        let work: *mut (dyn FnMut() + Send + 'static) = unsafe { std::mem::transmute(b as *mut (dyn FnMut() + Send)) };
        let half = Arc::new(Half {
            work,
            state: std::sync::atomic::AtomicU8::new(QUEUED),
            panic: Mutex::new(None),
            done: Condvar::new(),
        });
        let settle = Settle(&half);
        self.shared.post(Job::Half(half.clone()));
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(a));
        let reclaimed = half.state.compare_exchange(QUEUED, RECLAIMED, Ordering::AcqRel, Ordering::Acquire).is_ok();
        let theirs = if reclaimed {
            // SAFETY: this thread reclaimed the half; the helper will skip it.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*work)() }))
        } else {
            // the helper runs it
            half.wait_done().map_or(Ok(()), Err)
        };
        drop(settle);
        // a's panic first (as rayon's join; b's is then dropped)
        if let Err(panic) = mine.and(theirs) {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for Sinks {
    /// A replay that failed before joining: helpers take no more of its
    /// jobs (those running finish and drop their results).
    fn drop(&mut self) {
        if let Some(s) = &self.shared {
            s.closed.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xform_ops::{Error, Tensor};

    fn array(x: f32) -> SmallVec<[Array; 2]> {
        smallvec::smallvec![Tensor::from_vec(vec![x], [1]).array().unwrap()]
    }

    fn value(a: &Array) -> f32 {
        Tensor::from_array(a.clone()).item::<f32>()
    }

    /// Every posted job's result comes back once, in step order, whoever
    /// ran it (slow jobs make the helper and the joining thread share them).
    #[test]
    fn join_returns_every_result_in_step_order() {
        for round in 0..20 {
            let mut sinks = Sinks::default();
            for step in [3usize, 7, 8, 12] {
                sinks.post(step, move || {
                    std::thread::sleep(std::time::Duration::from_micros(50 * (round % 3)));
                    Ok(array(step as f32))
                });
            }
            let got: Vec<(usize, f32)> = sinks.join().unwrap().iter().map(|(s, a)| (*s, value(&a[0]))).collect();
            assert_eq!(got, vec![(3, 3.0), (7, 7.0), (8, 8.0), (12, 12.0)]);
        }
        assert!(Sinks::default().join().unwrap().is_empty());
    }

    /// A join right after the posts, many times: every job's result comes
    /// back even when the helper takes a job as the join closes the queue
    /// (a job taken is counted as running in the same critical section
    /// that takes it, so the join cannot miss it).
    #[test]
    fn a_join_racing_the_helper_misses_no_job() {
        for round in 0..200_000usize {
            let mut sinks = Sinks::default();
            for step in 0..1 + round % 8 {
                sinks.post(step, move || Ok(array(step as f32)));
            }
            // join at varying moments of the helper's take
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_nanos((round % 16) as u64 * 100) {
                std::hint::spin_loop();
            }
            let got = sinks.join().unwrap();
            assert_eq!(got.len(), 1 + round % 8, "round {round}: a job's result was lost");
        }
    }

    /// A failed job's error is the join's (the first by step); the other
    /// jobs still ran.
    #[test]
    fn an_error_is_returned_by_the_join() {
        let ran = Arc::new(AtomicUsize::new(0));
        let mut sinks = Sinks::default();
        for step in 0..4usize {
            let ran = ran.clone();
            sinks.post(step, move || {
                ran.fetch_add(1, Ordering::SeqCst);
                if step >= 2 {
                    Err(Error::invalid("sink", format!("step {step} failed")))
                } else {
                    Ok(array(0.0))
                }
            });
        }
        let err = sinks.join().unwrap_err();
        assert!(err.to_string().contains("step 2 failed"), "{err}");
        assert_eq!(ran.load(Ordering::SeqCst), 4);
    }

    /// A job's panic unwinds out of the join, on the joining thread, with
    /// its payload.
    #[test]
    fn a_panic_is_resumed_by_the_join() {
        let mut sinks = Sinks::default();
        sinks.post(0, || Ok(array(1.0)));
        sinks.post(1, || panic!("sink step panicked"));
        let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sinks.join())).unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"sink step panicked"));
    }

    /// A replay whose helper is busy with another replay's job does not
    /// wait for it: its join runs its own jobs (the other job is held
    /// until this join has returned).
    #[test]
    fn a_busy_helper_costs_no_wait() {
        let gate = Arc::new(AtomicBool::new(false));
        let mut first = Sinks::default();
        let g = gate.clone();
        first.post(0, move || {
            while !g.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            Ok(array(1.0))
        });
        let shared = first.shared.clone().unwrap();
        let start = std::time::Instant::now();
        while shared.running.load(Ordering::SeqCst) == 0 && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::yield_now();
        }
        assert_eq!(shared.running.load(Ordering::SeqCst), 1, "the helper took the first replay's job");
        let mut second = Sinks::default();
        for step in 0..3usize {
            second.post(step, move || Ok(array(step as f32)));
        }
        let got: Vec<f32> = second.join().unwrap().iter().map(|(_, a)| value(&a[0])).collect();
        assert_eq!(got, vec![0.0, 1.0, 2.0]);
        gate.store(true, Ordering::SeqCst);
        assert_eq!(value(&first.join().unwrap()[0].1[0]), 1.0);
    }

    /// A replay that fails before its join drops its sinks: helpers take
    /// none of the jobs left (nothing waits for them, nothing hangs).
    #[test]
    fn dropped_sinks_close_the_queue() {
        let ran = Arc::new(AtomicUsize::new(0));
        let mut sinks = Sinks::default();
        let gate = Arc::new(AtomicBool::new(false));
        {
            let (ran, gate) = (ran.clone(), gate.clone());
            sinks.post(0, move || {
                while !gate.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(array(0.0))
            });
        }
        for step in 1..4 {
            let ran = ran.clone();
            sinks.post(step, move || {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(array(0.0))
            });
        }
        let shared = sinks.shared.clone().unwrap();
        drop(sinks);
        gate.store(true, Ordering::SeqCst);
        let start = std::time::Instant::now();
        while shared.running.load(Ordering::SeqCst) > 0 && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::yield_now();
        }
        // the job a helper had taken (if one had) ran; the others did not
        assert!(ran.load(Ordering::SeqCst) <= 1, "{} jobs ran after the drop", ran.load(Ordering::SeqCst));
    }

    /// Halves lent through a replay's queue, many times: each runs exactly
    /// once (on the helper, or reclaimed by the lender), its writes are
    /// seen after the join, and sink jobs posted beside them still come
    /// back.
    #[test]
    fn lent_halves_run_once() {
        use xform_kernels::cpu::pair::Pair;
        let mut helped = 0;
        for round in 0..20_000usize {
            let mut sinks = Sinks::default();
            if round % 3 == 0 {
                sinks.post(0, || Ok(array(0.0)));
            }
            let lender = sinks.lender();
            let (mut a_runs, mut b_runs) = (0, 0);
            let mut helper_thread = None;
            // the lender's own half takes 0-6 us: the helper takes some
            let busy = std::time::Duration::from_micros(2 * (round % 4) as u64);
            lender.join(
                &mut || {
                    let start = std::time::Instant::now();
                    while start.elapsed() < busy {
                        std::hint::spin_loop();
                    }
                    a_runs += 1
                },
                &mut || {
                    b_runs += 1;
                    helper_thread = Some(std::thread::current().id());
                },
            );
            assert_eq!((a_runs, b_runs), (1, 1), "round {round}");
            helped += (helper_thread != Some(std::thread::current().id())) as usize;
            assert_eq!(sinks.join().unwrap().len(), (round % 3 == 0) as usize);
        }
        // the helper takes some (it spins for the next post), unless this
        // machine has no second thread to give it
        assert!(helped > 0 || std::thread::available_parallelism().map_or(true, |n| n.get() < 2));
    }

    /// A panic in the lent half (on the helper) or in the lender's half
    /// unwinds out of the join on the lending thread.
    #[test]
    fn a_lent_half_panic_is_resumed_by_the_lender() {
        use xform_kernels::cpu::pair::Pair;
        for first in [true, false] {
            let mut sinks = Sinks::default();
            let lender = sinks.lender();
            let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                lender.join(
                    &mut || {
                        if first {
                            panic!("a failed")
                        }
                    },
                    &mut || {
                        if !first {
                            panic!("b failed")
                        }
                    },
                )
            }))
            .unwrap_err();
            assert_eq!(payload.downcast_ref::<&str>(), Some(if first { &"a failed" } else { &"b failed" }));
            assert!(sinks.join().unwrap().is_empty());
        }
    }
}
