//! Staging: the interpreter that records primitive applications on its
//! tracers into a [`Program`]; everything that does not depend on them is
//! computed by the parent and enters the program as a constant (constant
//! folding comes free). `trace` stages a whole function, `linearize`
//! records tangent work with it, and the control-flow primitives stage
//! their bodies (and the bodies their rules derive) with [`stage`].

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
//! their versions then (`note_eval`, called by `interp::bind_at`); a
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
use crate::error::{OrRaise, Result};
use crate::interp::{with_interpreter, Interpreter, Level, Outs, Tag};
use crate::prim::{shape_rule, Prim};
use crate::program::{has_guard, push_guard, Atom, Program, ProgramBuilder, Var, VersionGuard};
use crate::tensor::{Aval, Tensor, Tracer, TracerData, Value};
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// The staging interpreter.
pub struct Staging {
    tag: Tag,
    builder: RefCell<ProgramBuilder>,
    /// Shown in errors, or hidden (internal recorders).
    visible: Option<&'static str>,
    /// For a visible one: where the thread's reads stood when it was made
    /// (see NOTE: [trace-time values]).
    reads_from: Option<usize>,
}

impl Staging {
    /// A staging interpreter named `name`; `visible` ones appear in the
    /// transforms errors list ("trace") and guard their programs against
    /// writes to what they computed from (NOTE: [trace-time values]),
    /// hidden ones do neither.
    pub fn new(name: &'static str, visible: bool) -> Staging {
        let reads_from = visible.then(start_recording);
        Staging {
            tag: Tag::fresh(name),
            builder: RefCell::new(ProgramBuilder::new()),
            visible: visible.then_some(name),
            reads_from,
        }
    }

    /// A new program input and its tracer.
    pub fn new_input(&self, aval: Aval) -> Tensor {
        let var = self.builder.borrow_mut().new_input(aval.clone());
        Tensor::from_tracer(Tracer { tag: self.tag, aval, data: TracerData::Staged { var } })
    }

    /// The atom for `t`: its variable if it is this level's tracer, else a constant.
    pub fn atom(&self, t: &Tensor) -> Result<Atom> {
        if let Value::Tracer(tr) = &*t.value() {
            if tr.tag.id == self.tag.id {
                let TracerData::Staged { var } = tr.data else { return Err(tr.wrong_data("staged")) };
                return Ok(Atom::Var(var));
            }
        }
        let mut b = self.builder.borrow_mut();
        if self.reads_from.is_some() {
            // a value computed while recording is guarded by what it was
            // computed from; any other constant by its own version, which
            // the program records with it
            if let Value::Array(a) = &*t.value() {
                if let Some(from) = computed_from(a) {
                    b.guard(from);
                }
            }
        }
        Ok(b.constant(t))
    }

    /// The finished program with these outputs.
    pub fn finish(&self, outputs: &[Tensor]) -> Result<Program> {
        let mut atoms: SmallVec<[Atom; 4]> = SmallVec::new();
        for t in outputs {
            atoms.push(self.atom(t)?);
        }
        let mut b = std::mem::take(&mut *self.builder.borrow_mut());
        if let Some(from) = self.reads_from {
            b.guard(reads_since(from));
        }
        Ok(b.finish(atoms))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.reads_from.is_some() {
            stop_recording();
        }
    }
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

fn start_recording() -> usize {
    RECORDING.with(|r| r.set(r.get() + 1));
    PROVENANCE.with(|p| p.borrow().reads.len())
}

fn stop_recording() {
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
fn computed_from(a: &Array) -> Option<SmallVec<[VersionGuard; 2]>> {
    PROVENANCE.with(|p| p.borrow().derived.get(&a.storage_addr()).map(|(_, from)| from.clone()))
}

/// Records that `outs` were computed from `inputs` (see NOTE:
/// [trace-time values]); `interp::bind_at` calls it for primitives
/// evaluated under a transform while [`recording`].
pub(crate) fn note_eval(inputs: &[Tensor], outs: &Outs) {
    note_computed(inputs, outs, &[]);
}

/// Records that `outs` were computed from `inputs` and the storages of
/// `extra` (a replayed program's guards), for values computed without
/// `bind` while [`recording`].
pub fn note_computed(inputs: &[Tensor], outs: &[Tensor], extra: &[VersionGuard]) {
    if !recording() {
        return;
    }
    let mut from: Vec<VersionGuard> = Vec::new();
    let mut in_arrays: SmallVec<[Array; 4]> = SmallVec::new();
    for t in inputs {
        if let Value::Array(a) = &*t.value() {
            for g in derived_from(a) {
                push_guard(&mut from, g);
            }
            in_arrays.push(a.clone());
        }
    }
    for g in extra {
        push_guard(&mut from, g.clone());
    }
    for t in outs {
        if let Value::Array(a) = &*t.value() {
            // a view of an operand is that operand's storage, guarded as it is
            if !in_arrays.iter().any(|i| i.shares_storage(a)) {
                note_derived(a, &from);
            }
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
fn reads_since(from: usize) -> Vec<VersionGuard> {
    PROVENANCE.with(|p| p.borrow().reads.get(from..).map(<[VersionGuard]>::to_vec).unwrap_or_default())
}

impl Interpreter for Staging {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn describe(&self) -> Option<String> {
        self.visible.map(str::to_string)
    }

    fn process(&self, _level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
        let out_avals = Tensor::with_avals(inputs, |refs| shape_rule(prim, refs))?;
        let mut ins: SmallVec<[Atom; 4]> = SmallVec::new();
        for t in inputs {
            ins.push(self.atom(t)?);
        }
        let mut b = self.builder.borrow_mut();
        let mut vars: SmallVec<[Var; 2]> = SmallVec::new();
        let mut outs = Outs::new();
        for aval in out_avals {
            let var = b.new_var(aval.clone());
            vars.push(var);
            outs.push(Tensor::from_tracer(Tracer { tag: self.tag, aval, data: TracerData::Staged { var } }));
        }
        b.push(prim.clone(), ins, vars);
        Ok(outs)
    }
}

/// Stages `f` on inputs of abstract values `in_avals` into a program (with
/// the constants it captured). The staging interpreter sits on top of the
/// current stack, so ops on values of enclosing transforms alone run there
/// and enter as constants.
///
/// # Errors
/// What `f` returns or raises (a raised error is caught and returned; the
/// interpreter stack is restored either way).
pub fn stage(
    name: &'static str,
    in_avals: &[Aval],
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Program> {
    let staging = Staging::new(name, false);
    crate::error::catch(|| {
        with_interpreter(&staging, || {
            let ins: Vec<Tensor> = in_avals.iter().map(|a| staging.new_input(a.clone())).collect();
            let outs = f(&ins).or_raise();
            staging.finish(&outs).or_raise()
        })
    })
}
