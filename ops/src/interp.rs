//! The interpreter core: a per-thread stack of interpreter instances, the
//! current one, and [`bind`], which hands each primitive application to it.
//!
//! NOTE: [interpreter stack] Each transform call pushes one interpreter
//! instance with a fresh [`Tag`] and makes it current; a guard pops it on
//! return and on panic. `bind` walks down from the current level to the
//! first interpreter that owns one of the inputs (by tag); levels that own
//! none forward untouched (the fast path), and level 0 is `Eval`, which runs
//! kernels. An interpreter runs its rule with its *parent* current, so the
//! ops inside a rule belong to the parent: nesting needs nothing more. A
//! tracer that reaches `Eval` outlived its interpreter: an escaped tracer.

use crate::error::{Error, ErrorKind, Result};
use crate::prim::Prim;
use crate::tensor::{AvalRef, Tensor, Value};
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// The outputs of one primitive application (almost always one).
pub type Outs = SmallVec<[Tensor; 2]>;

/// A stack position: 0 is `Eval`, `n` the n-th pushed interpreter.
pub type Level = usize;

/// Identifies one interpreter instance (not one kind of transform), which
/// is what keeps nested transforms of the same kind apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// Unique per instance within a thread.
    pub id: u64,
    /// The transform's name, for messages ("vmap", "jvp", ...).
    pub name: &'static str,
}

thread_local! {
    static NEXT_TAG: Cell<u64> = const { Cell::new(1) };
    static EPOCH: Cell<u64> = const { Cell::new(0) };
    static STACK: RefCell<Stack> = const { RefCell::new(Stack { entries: Vec::new(), current: 0 }) };
}

impl Tag {
    /// A tag no other live interpreter on this thread has.
    pub fn fresh(name: &'static str) -> Tag {
        let id = NEXT_TAG.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        Tag { id, name }
    }
}

/// One transform's interpreter.
pub trait Interpreter {
    /// This instance's tag.
    fn tag(&self) -> Tag;

    /// How error messages name this level, e.g. "vmap(size 8)"; `None` for
    /// helper levels that users did not ask for.
    fn describe(&self) -> Option<String>;

    /// Applies `prim` to `inputs`, at least one of which is this
    /// interpreter's tracer. `level` is this interpreter's stack level; run
    /// rules under [`run_at_parent`] and forward with [`bind_at`].
    fn process(&self, level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs>;
}

struct Entry {
    interp: Rc<dyn Interpreter>,
    tag: Tag,
    parent: Level,
    epoch: u64,
}

/// Ticks the thread's epoch clock (tensor nodes and interpreter pushes).
#[inline]
pub(crate) fn next_epoch() -> u64 {
    EPOCH.with(|e| {
        let v = e.get() + 1;
        e.set(v);
        v
    })
}

/// True if the live interpreter tagged `tag` was pushed after `epoch`.
pub(crate) fn pushed_after(epoch: u64, tag: Tag) -> bool {
    STACK.with(|s| s.borrow().entries.iter().any(|e| e.tag.id == tag.id && e.epoch > epoch))
}

struct Stack {
    entries: Vec<Entry>,
    current: Level,
}

/// The current level.
pub fn current_level() -> Level {
    STACK.with(|s| s.borrow().current)
}

/// Number of interpreters on this thread's stack (0 outside transforms).
pub fn stack_depth() -> usize {
    STACK.with(|s| s.borrow().entries.len())
}

/// The parent of `level` (the level its rules run at).
pub fn parent_of(level: Level) -> Level {
    STACK.with(|s| s.borrow().entries[level - 1].parent)
}

/// The transforms in force, outermost first: "vmap(size 8) > grad".
pub fn describe_transforms() -> String {
    STACK.with(|s| {
        let s = match s.try_borrow() {
            Ok(s) => s,
            Err(_) => return String::new(),
        };
        let mut names = Vec::new();
        let mut level = s.entries.len();
        while level > 0 {
            let e = &s.entries[level - 1];
            if let Some(d) = e.interp.describe() {
                names.push(d);
            }
            level = e.parent;
        }
        names.reverse();
        names.join(" > ")
    })
}

/// Restores the stack when a transform call ends, also on panic.
pub struct PushGuard {
    level: Level,
    prev_current: Level,
}

impl PushGuard {
    /// This interpreter's level.
    pub fn level(&self) -> Level {
        self.level
    }
}

impl Drop for PushGuard {
    fn drop(&mut self) {
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            debug_assert_eq!(s.entries.len(), self.level, "interpreter stack popped out of order");
            s.entries.truncate(self.level - 1);
            s.current = self.prev_current;
        });
    }
}

/// Pushes `interp` with the current level as its parent and makes it
/// current until the guard drops.
pub fn push_interpreter(interp: Rc<dyn Interpreter>) -> PushGuard {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let parent = s.current;
        let tag = interp.tag();
        s.entries.push(Entry { interp, tag, parent, epoch: next_epoch() });
        let level = s.entries.len();
        let prev_current = std::mem::replace(&mut s.current, level);
        PushGuard { level, prev_current }
    })
}

/// Restores the current level when dropped.
pub struct CurrentGuard {
    prev: Level,
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        STACK.with(|s| s.borrow_mut().current = self.prev);
    }
}

/// Makes `level` current until the guard drops.
pub fn set_current(level: Level) -> CurrentGuard {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let prev = std::mem::replace(&mut s.current, level);
        CurrentGuard { prev }
    })
}

/// Runs `f` with the parent of `level` current (how rules run).
pub fn run_at_parent<R>(level: Level, f: impl FnOnce() -> R) -> R {
    let _g = STACK.with(|s| {
        let mut s = s.borrow_mut();
        let parent = s.entries[level - 1].parent;
        CurrentGuard { prev: std::mem::replace(&mut s.current, parent) }
    });
    f()
}

/// Applies a primitive at the current level.
#[inline]
pub fn bind(prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
    bind_at(current_level(), prim, inputs)
}

/// Applies a primitive with a single output at the current level.
#[inline]
pub fn bind1(prim: &Prim, inputs: &[Tensor]) -> Result<Tensor> {
    let mut outs = bind(prim, inputs)?;
    Ok(outs.swap_remove(0))
}

/// Applies a primitive starting at `level`: levels that own no input
/// forward it down, level 0 evaluates it.
pub fn bind_at(level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
    match owner(level, inputs) {
        Some((level, interp)) => interp.process(level, prim, inputs),
        // Concrete inputs, or tracers of no interpreter below (escaped:
        // eval reports them).
        None => eval(prim, inputs),
    }
}

/// The first level from `level` down (through parents) that owns an input,
/// with its interpreter. The inputs' tags are read once, and concrete
/// inputs only (the common case under every transform) walk no stack.
#[inline]
fn owner(level: Level, inputs: &[Tensor]) -> Option<(Level, Rc<dyn Interpreter>)> {
    if level == 0 {
        return None;
    }
    let mut tags: SmallVec<[u64; 4]> = SmallVec::new();
    for t in inputs {
        if let Value::Tracer(tr) = &*t.value() {
            tags.push(tr.tag.id);
        }
    }
    if tags.is_empty() {
        return None;
    }
    STACK.with(|s| {
        let s = s.borrow();
        let mut level = level;
        while level > 0 {
            let e = &s.entries[level - 1];
            if tags.contains(&e.tag.id) {
                return Some((level, e.interp.clone()));
            }
            level = e.parent;
        }
        None
    })
}

/// Level 0: check shapes, run the kernels.
fn eval(prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
    let mut vals: SmallVec<[std::cell::Ref<'_, Value>; 4]> = SmallVec::new();
    for t in inputs {
        let v = t.value();
        if let Value::Tracer(tr) = &*v {
            return Err(Error::new(prim.name(), ErrorKind::EscapedTracer { transform: tr.tag.name.to_string() }));
        }
        vals.push(v);
    }
    let mut arrays: SmallVec<[&crate::Array; 4]> = SmallVec::new();
    let mut avals: SmallVec<[AvalRef<'_>; 4]> = SmallVec::new();
    for v in &vals {
        if let Value::Array(a) = &**v {
            arrays.push(a);
            avals.push(a.aval_ref());
        }
    }
    crate::prim::check(prim, &avals)?;
    if let Some(first) = avals.first() {
        if let Some(other) = avals.iter().find(|a| a.device != first.device) {
            return Err(Error::device(
                prim.name(),
                format!(
                    "operands are on different devices ({} and {}); move them with to_device",
                    first.device, other.device
                ),
            ));
        }
    }
    crate::prim::lower(prim, &arrays)
}
