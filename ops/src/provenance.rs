//! Provenance of trace-time values: what the values computed while a
//! visible staging (jit, trace) is alive were computed from, so that a
//! staged program is guarded against later writes to it.
//!
//! NOTE: [trace-time values] What staging computes at once (everything
//! that does not depend on its tracers: `exp(2 c)` of a captured `c`) is a
//! new constant of the program, which carries no version of `c`: after
//! `c.fill_(0.0)`, a program that reads `c` itself is refused by
//! `Program::check_consts`, but one that reads `exp(2 c)` would answer
//! with the old number. So while a *visible* staging interpreter (`jit`,
//! `trace`: programs that are run again later) is alive on this thread,
//! every primitive evaluated under a transform records, per result
//! storage, the storages it was computed from (through earlier recorded
//! results, back to tensors made before or outside: captured ones), with
//! their versions then (`note_arrays`, which `interp::bind_at` calls through
//! `interp::note_computed`); a
//! value that staged code *reads* (a control-flow decision on a known
//! predicate, `item`, `to_vec`) records the same ([`note_read`]). A
//! constant entering the program, and every read made while it was
//! staged, add those storages to the program as version guards, which
//! `check_consts` checks with the constants: the call is refused with the
//! in-place error, never answered with a stale value. jit's passes, which
//! fold and drop constants, keep the guards of every constant they were
//! given (`ProgramBuilder::inherit_guards`). Hidden stagings (linearize's
//! tangent program, control-flow bodies) do not record: a pullback's
//! residuals are values at the point of linearization, as PyTorch's saved
//! tensors are, and bodies are bound at once.

use crate::array::Array;
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// A storage a recorded program depends on, and its version when the
/// program was recorded: an eager write to the storage since (through any
/// view) makes [`Program::check_consts`](crate::Program::check_consts) refuse the program.
#[derive(Clone, Debug)]
pub struct VersionGuard {
    /// An array over the storage (kept alive with it).
    pub array: Array,
    /// [`Array::storage_version`] when it was seen.
    pub version: u64,
}

impl VersionGuard {
    /// The guard of `array`'s storage at its version now.
    pub fn now(array: &Array) -> VersionGuard {
        VersionGuard { array: array.clone(), version: array.storage_version() }
    }

    /// True if the storage was written since.
    pub fn is_stale(&self) -> bool {
        self.array.storage_version() != self.version
    }
}

/// Adds `g` to `guards` unless a guard of its storage at its version is
/// there.
pub(crate) fn push_guard(guards: &mut Vec<VersionGuard>, g: VersionGuard) {
    if !has_guard(guards, &g) {
        guards.push(g);
    }
}

/// True if `guards` already checks `g`'s storage at `g`'s version.
pub(crate) fn has_guard(guards: &[VersionGuard], g: &VersionGuard) -> bool {
    guards.iter().any(|h| h.version == g.version && h.array.shares_storage(&g.array))
}

/// What this thread records while visible stagings are alive (NOTE:
/// [trace-time values]).
#[derive(Default)]
struct Provenance {
    /// Per storage (by address) computed while recording: an array over it
    /// (kept alive, so the address is not reused: the intermediates of a
    /// trace's eager work live until the last visible staging ends) and
    /// the storages it was computed from.
    derived: HashMap<usize, (Array, SmallVec<[VersionGuard; 2]>)>,
    /// The storages that staged code read values of, in order.
    reads: Vec<VersionGuard>,
}

thread_local! {
    /// Visible staging interpreters alive on this thread.
    static RECORDING: Cell<u32> = const { Cell::new(0) };
    static PROVENANCE: RefCell<Provenance> = RefCell::new(Provenance::default());
}

/// True while a visible staging interpreter (jit, trace) is alive on this
/// thread (one thread-local read).
#[inline]
pub fn recording() -> bool {
    RECORDING.with(Cell::get) > 0
}

pub(crate) fn start_recording() -> usize {
    RECORDING.with(|r| r.set(r.get() + 1));
    PROVENANCE.with(|p| p.borrow().reads.len())
}

pub(crate) fn stop_recording() {
    let left = RECORDING.with(|r| {
        let n = r.get().saturating_sub(1);
        r.set(n);
        n
    });
    if left == 0 {
        // dropped outside the borrow: arrays may hold programs' tensors
        let old = PROVENANCE.with(|p| std::mem::take(&mut *p.borrow_mut()));
        drop(old);
    }
}

/// The storages `a` was computed from while recording (with their
/// versions then), or `a`'s own storage if it was not computed then.
fn derived_from(a: &Array) -> SmallVec<[VersionGuard; 2]> {
    computed_from(a).unwrap_or_else(|| smallvec::smallvec![VersionGuard::now(a)])
}

/// The storages `a` was computed from, if it was computed while recording.
pub(crate) fn computed_from(a: &Array) -> Option<SmallVec<[VersionGuard; 2]>> {
    PROVENANCE.with(|p| p.borrow().derived.get(&a.storage_addr()).map(|(_, from)| from.clone()))
}

/// Records that the arrays `outs` were computed from the arrays `inputs`
/// and the storages of `extra` (a replayed program's guards) while
/// [`recording`] (see NOTE: [trace-time values]); `interp::note_computed`
/// hands it the concrete values of a primitive's operands and results.
pub(crate) fn note_arrays(
    inputs: impl Iterator<Item = Array>,
    outs: impl Iterator<Item = Array>,
    extra: &[VersionGuard],
) {
    if !recording() {
        return;
    }
    let mut from: Vec<VersionGuard> = Vec::new();
    let mut in_arrays: SmallVec<[Array; 4]> = SmallVec::new();
    for a in inputs {
        for g in derived_from(&a) {
            push_guard(&mut from, g);
        }
        in_arrays.push(a);
    }
    for g in extra {
        push_guard(&mut from, g.clone());
    }
    for a in outs {
        // a view of an operand is that operand's storage, guarded as it is
        if !in_arrays.iter().any(|i| i.shares_storage(&a)) {
            note_derived(&a, &from);
        }
    }
}

/// Records that `a` was computed from the storages of `from` (for values
/// computed without `bind`: a program's constants, a replayed plan's
/// results).
pub fn note_derived(a: &Array, from: &[VersionGuard]) {
    if !recording() {
        return;
    }
    PROVENANCE.with(|p| {
        let mut p = p.borrow_mut();
        let entry = p.derived.entry(a.storage_addr()).or_insert_with(|| (a.clone(), SmallVec::new()));
        for g in from {
            if !has_guard(&entry.1, g) {
                entry.1.push(g.clone());
            }
        }
    });
}

/// Records that staged code read the value of `a` (NOTE: [trace-time
/// values]): the storages it was computed from guard every program being
/// staged. `Tensor::known` (item, to_vec, control-flow decisions on known
/// values) calls it.
pub fn note_read(a: &Array) {
    if !recording() {
        return;
    }
    let from = derived_from(a);
    PROVENANCE.with(|p| p.borrow_mut().reads.extend(from));
}

/// The reads recorded since position `from`.
pub(crate) fn reads_since(from: usize) -> Vec<VersionGuard> {
    PROVENANCE.with(|p| p.borrow().reads.get(from..).map(<[VersionGuard]>::to_vec).unwrap_or_default())
}
