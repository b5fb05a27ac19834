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
use std::sync::atomic::{AtomicU64, Ordering};

/// The outputs of one primitive application (almost always one).
pub type Outs = SmallVec<[Tensor; 2]>;

/// A stack position: 0 is `Eval`, `n` the n-th pushed interpreter.
pub type Level = usize;

/// Identifies one interpreter instance (not one kind of transform), which
/// is what keeps nested transforms of the same kind apart. Unique in the
/// process, so a tracer that reached another thread never matches an
/// interpreter there.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// Unique per instance in the process.
    pub id: u64,
    /// The transform's name, for messages ("vmap", "jvp", ...).
    pub name: &'static str,
}

/// The next tag id (one atomic increment per transform call).
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static EPOCH: Cell<u64> = const { Cell::new(0) };
    static STACK: RefCell<Stack> = const { RefCell::new(Stack { entries: Vec::new(), current: 0 }) };
}

impl Tag {
    /// A tag no other interpreter has.
    pub fn fresh(name: &'static str) -> Tag {
        Tag { id: NEXT_TAG.fetch_add(1, Ordering::Relaxed), name }
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

    /// The named axis this level binds (`vmap(f, axis_name = ...)`) and its
    /// size: collectives over that name are this level's to apply even when
    /// it owns none of their operands (NOTE: [named axes]).
    fn named_axis(&self) -> Option<(AxisName, usize)> {
        None
    }
}

/// The name of a mapped axis (`vmap`'s `axis_name`), which collectives
/// (`psum`, `all_gather`, `axis_index`, ...) refer to.
pub type AxisName = std::sync::Arc<str>;

struct Entry {
    /// Borrowed by the [`with_interpreter`] call that pushed the entry,
    /// which pops it before it returns (see the SAFETY note there).
    interp: *const dyn Interpreter,
    tag: Tag,
    parent: Level,
    epoch: u64,
    /// The named axis the interpreter binds, if any.
    axis: Option<(AxisName, usize)>,
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
            // SAFETY: an entry's interpreter is alive while the entry is on
            // the stack (see `with_interpreter`).
            if let Some(d) = unsafe { &*e.interp }.describe() {
                names.push(d);
            }
            level = e.parent;
        }
        names.reverse();
        names.join(" > ")
    })
}

/// Records that the concrete values among `outs` were computed from those
/// among `inputs` and the storages of `extra` (see NOTE: [trace-time
/// values] in [`crate::provenance`]): `bind_at` calls it for primitives
/// evaluated under a transform, and exec for a replayed program's results,
/// while a visible staging is alive.
pub fn note_computed(inputs: &[Tensor], outs: &[Tensor], extra: &[crate::provenance::VersionGuard]) {
    crate::provenance::note_arrays(
        inputs.iter().filter_map(Tensor::array),
        outs.iter().filter_map(Tensor::array),
        extra,
    );
}

// The error constructor lives here, beside the stack it reads, so that the
// error type (error.rs) stays below the interpreter.
impl Error {
    /// An error in `op`, recording the transforms in force now.
    #[cold]
    pub fn new(op: impl Into<String>, kind: ErrorKind) -> Error {
        Error::with_transforms(op.into(), kind, describe_transforms())
    }
}

/// Pops the entry a [`with_interpreter`] call pushed, on return and on
/// panic.
struct PushGuard {
    level: Level,
    prev_current: Level,
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

/// Runs `f` with `interp` pushed (the current level as its parent) and
/// current; pops it when `f` returns or panics. This is how every
/// transform call runs the user's function.
///
/// The interpreter is borrowed, not moved: it lives in the transform's
/// frame, so pushing one allocates nothing.
///
/// # Panics
/// Raises [`ErrorKind::TooDeep`] (see [`crate::raise`]) when this thread's
/// native stack is used down to its limit (NOTE: [stack guard] in
/// [`crate::stack`]): nothing is pushed.
pub fn with_interpreter<R>(interp: &dyn Interpreter, f: impl FnOnce() -> R) -> R {
    let _guard = push(interp);
    f()
}

/// Pushes `interp` for [`with_interpreter`], whose frame (one per nesting
/// level, on the native stack while `f` runs) this keeps small: the work
/// is here, not in each generic instance.
#[inline(never)]
fn push(interp: &dyn Interpreter) -> PushGuard {
    if crate::stack::exhausted() {
        too_deep(interp.tag().name);
    }
    let ptr: *const (dyn Interpreter + '_) = interp;
    // SAFETY: only the pointer's lifetime bound is erased (same layout).
    // The entry holding it is popped by the returned guard, which
    // `with_interpreter` (the only caller) holds while `f` runs and drops
    // before it returns or unwinds, while `interp` is still borrowed;
    // entries are pushed and popped only there, in LIFO order, and all code
    // that runs on this thread meanwhile runs inside `f`. So every dereference of an
    // entry's pointer (in `bind_at` and `describe_transforms`, which find
    // it on the stack) happens while `interp` is alive.
    let ptr: *const (dyn Interpreter + 'static) = unsafe { std::mem::transmute(ptr) };
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let parent = s.current;
        let tag = interp.tag();
        let axis = interp.named_axis();
        s.entries.push(Entry { interp: ptr, tag, parent, epoch: next_epoch(), axis });
        let level = s.entries.len();
        let prev_current = std::mem::replace(&mut s.current, level);
        PushGuard { level, prev_current }
    })
}

#[cold]
#[inline(never)]
#[track_caller]
fn too_deep(transform: &str) -> ! {
    crate::raise(too_deep_error(transform))
}

/// The error of a transform call or an op that would go past the stack
/// limit.
#[cold]
#[inline(never)]
fn too_deep_error(op: &str) -> Error {
    Error::new(op, ErrorKind::TooDeep { depth: stack_depth(), reserve: crate::stack::RESERVE })
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
    let _g = enter_parent(level);
    f()
}

/// Makes the parent of `level` current (for [`run_at_parent`], whose
/// generic frame recurs once per level of a dispatch; kept small).
#[inline(never)]
fn enter_parent(level: Level) -> CurrentGuard {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let parent = s.entries[level - 1].parent;
        CurrentGuard { prev: std::mem::replace(&mut s.current, parent) }
    })
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
    debug_assert_eq!(outs.len(), 1, "bind1 on {}, which has {} outputs", prim.name(), outs.len());
    Ok(outs.pop().expect("one output"))
}

/// Applies a primitive starting at `level`: levels that own no input
/// forward it down, level 0 evaluates it.
pub fn bind_at(level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
    let found = if prim.may_name_axes() { owner_named(level, prim, inputs) } else { owner(level, inputs) };
    match found {
        // the op's dispatch through the levels recurses on the native
        // stack (NOTE: [stack guard])
        Some(_) if crate::stack::exhausted() => Err(too_deep_error(prim.name())),
        // SAFETY: `owner` found the entry on the stack, so the interpreter
        // it points at is alive (see `with_interpreter`) and outlives this
        // call, which runs inside the `with_interpreter` that pushed it.
        Some((level, interp)) => unsafe { &*interp }.process(level, prim, inputs),
        // Concrete inputs, or tracers of no interpreter below (escaped:
        // eval reports them).
        None => {
            let outs = eval(prim, inputs)?;
            // under a transform, while a program is staged: what this was
            // computed from (NOTE: [trace-time values] in `provenance`)
            if level > 0 && crate::provenance::recording() {
                note_computed(inputs, &outs, &[]);
            }
            Ok(outs)
        }
    }
}

/// The first level from `level` down (through parents) that owns an input,
/// with its interpreter. The inputs' tags are read once, and concrete
/// inputs only (the common case under every transform) walk no stack.
#[inline]
fn owner(level: Level, inputs: &[Tensor]) -> Option<(Level, *const dyn Interpreter)> {
    if level == 0 {
        return None;
    }
    // Up to four tags inline (primitives take one to three operands); more
    // tracer operands are looked up again on the tensors themselves.
    let mut tags = [0u64; 4];
    let mut n = 0;
    for t in inputs {
        if let Value::Tracer(tr) = &*t.value() {
            if n < tags.len() {
                tags[n] = tr.tag.id;
            }
            n += 1;
        }
    }
    if n == 0 {
        return None;
    }
    let owns = |id: u64| {
        tags[..n.min(4)].contains(&id)
            || (n > 4 && inputs.iter().any(|t| matches!(&*t.value(), Value::Tracer(tr) if tr.tag.id == id)))
    };
    STACK.with(|s| {
        let s = s.borrow();
        let mut level = level;
        while level > 0 {
            let e = &s.entries[level - 1];
            if owns(e.tag.id) {
                return Some((level, e.interp));
            }
            level = e.parent;
        }
        None
    })
}

/// [`owner`] for a primitive that may name axes (a collective, or control
/// flow whose bodies hold one): the first level from `level` down that owns
/// an input or binds one of the names (NOTE: [named axes]). The names (a
/// walk of a control primitive's bodies) are asked for only once the walk
/// meets a level that binds a name: without named maps this is `owner`.
#[cold]
fn owner_named(level: Level, prim: &Prim, inputs: &[Tensor]) -> Option<(Level, *const dyn Interpreter)> {
    let ids: SmallVec<[u64; 4]> = inputs
        .iter()
        .filter_map(|t| match &*t.value() {
            Value::Tracer(tr) => Some(tr.tag.id),
            Value::Array(_) => None,
        })
        .collect();
    let mut names: Option<SmallVec<[AxisName; 2]>> = None;
    STACK.with(|s| {
        let s = s.borrow();
        let mut level = level;
        while level > 0 {
            let e = &s.entries[level - 1];
            if ids.contains(&e.tag.id) {
                return Some((level, e.interp));
            }
            if let Some((n, _)) = &e.axis {
                if names.get_or_insert_with(|| prim.axis_names()).contains(n) {
                    return Some((level, e.interp));
                }
            }
            level = e.parent;
        }
        None
    })
}

/// Calls `f` on each named axis bound from the current level down,
/// innermost first, until it returns true.
fn find_named_axis(mut f: impl FnMut(&AxisName, usize) -> bool) {
    STACK.with(|s| {
        let s = s.borrow();
        let mut level = s.current;
        while level > 0 {
            let e = &s.entries[level - 1];
            if let Some((n, size)) = &e.axis {
                if f(n, *size) {
                    return;
                }
            }
            level = e.parent;
        }
    })
}

/// The size of the axis named `name` as the current level sees it: bound by
/// the innermost interpreter of that name from the current level down, or
/// else by a device-mapped axis this thread runs a position of ([`DeviceAxis`],
/// `pmap`) (NOTE: [named axes]); `None` where nothing binds it.
pub fn axis_size(name: &str) -> Option<usize> {
    let mut found = None;
    find_named_axis(|n, size| {
        if &**n == name {
            found = Some(size);
        }
        found.is_some()
    });
    found.or_else(|| device_axis(name).map(|d| d.size))
}

/// Hands values among the positions of a device-mapped axis (`pmap`'s
/// devices): how a collective that reaches `Eval` on a device's thread
/// communicates with the other devices.
pub trait Exchange: Send + Sync {
    /// Gives position `index`'s `value` (none for `axis_index`) to every
    /// position and returns every position's, in position order, once all
    /// have given theirs. `what` (the collective with its parameters) must
    /// be the same at every position: the positions run one program.
    ///
    /// # Errors
    /// Positions that disagree on `what`, or a position that failed
    /// before it got here (the others are released with an error rather
    /// than left waiting).
    fn exchange(&self, index: usize, what: &str, value: Option<crate::Array>) -> Result<Vec<Option<crate::Array>>>;

    /// Gives position `index`'s `parts[k]` to position `k` alone and returns
    /// the part each position gave this one, in position order: what a
    /// reduce-scatter or an all-to-all needs, each position receiving only
    /// what it keeps. The parts of one call have one shape and dtype. By
    /// default ([`exchange_each_by_gather`]) every part goes to every
    /// position, stacked, through [`Exchange::exchange`]; an exchange
    /// between processes sends each its own.
    fn exchange_each(&self, index: usize, what: &str, parts: Vec<crate::Array>) -> Result<Vec<crate::Array>> {
        exchange_each_by_gather(self, index, what, parts)
    }

    /// What a position is called in errors ("device", "rank").
    fn noun(&self) -> &'static str {
        "device"
    }
}

/// [`Exchange::exchange_each`] through [`Exchange::exchange`]: this
/// position's parts stacked along a new leading axis and given to every
/// position, each keeping its own row of every position's stack.
pub fn exchange_each_by_gather<E: Exchange + ?Sized>(
    ex: &E,
    index: usize,
    what: &str,
    parts: Vec<crate::Array>,
) -> Result<Vec<crate::Array>> {
    let rows: Vec<Tensor> =
        parts.into_iter().map(|p| crate::lax::expand_dims(&Tensor::from_array(p), 0)).collect::<Result<_>>()?;
    let lost =
        |k: usize| Error::invalid("collective", format!("{what}: internal error: {} {k} gave no parts", ex.noun()));
    let stacked = crate::lax::concatenate(&rows, 0)?.array().ok_or_else(|| lost(index))?;
    let all = ex.exchange(index, what, Some(stacked))?;
    all.into_iter()
        .enumerate()
        .map(|(k, a)| {
            let a = a.ok_or_else(|| lost(k))?;
            crate::lax::index_axis(&Tensor::from_array(a), 0, index)?.array().ok_or_else(|| lost(k))
        })
        .collect()
}

/// How long a collective over a device-mapped axis waits for the other
/// positions before it fails with an error naming those that did not
/// arrive: the `XFORM_COLLECTIVE_TIMEOUT` environment variable (seconds,
/// read once), else 300 s. `pmap`'s and the process group's options
/// override it per call.
pub fn default_collective_timeout() -> std::time::Duration {
    static TIMEOUT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| collective_timeout_from(std::env::var("XFORM_COLLECTIVE_TIMEOUT").ok().as_deref()))
}

/// The timeout `XFORM_COLLECTIVE_TIMEOUT`'s value gives: positive finite
/// seconds, else (unset or not such a number) 300 s.
fn collective_timeout_from(var: Option<&str>) -> std::time::Duration {
    let secs = var.and_then(|v| v.trim().parse::<f64>().ok()).filter(|s| s.is_finite() && *s > 0.0);
    std::time::Duration::from_secs_f64(secs.unwrap_or(300.0))
}

/// One position of a device-mapped axis that this thread runs (`pmap`
/// runs each device's shard on a thread of its own).
#[derive(Clone)]
pub struct DeviceAxis {
    /// The axis's name.
    pub name: AxisName,
    /// This thread's position along it.
    pub index: usize,
    /// The number of positions.
    pub size: usize,
    /// How the positions exchange values.
    pub exchange: std::sync::Arc<dyn Exchange>,
}

thread_local! {
    static DEVICE_AXES: RefCell<Vec<DeviceAxis>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` as position `axis.index` of the device-mapped axis `axis` (its
/// collectives exchange values with the other positions); the axis is
/// unbound again when `f` returns or panics.
pub fn with_device_axis<R>(axis: DeviceAxis, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            DEVICE_AXES.with(|d| d.borrow_mut().pop());
        }
    }
    DEVICE_AXES.with(|d| d.borrow_mut().push(axis));
    let _pop = Pop;
    f()
}

/// The innermost device-mapped axis named `name` this thread runs a
/// position of.
pub fn device_axis(name: &str) -> Option<DeviceAxis> {
    DEVICE_AXES.with(|d| d.borrow().iter().rev().find(|a| &*a.name == name).cloned())
}

/// The named axes in force at the current level, innermost first, with
/// their sizes (what a staged program's collectives were shaped by: jit
/// keys its cache with it).
pub fn axis_env() -> SmallVec<[(AxisName, usize); 2]> {
    let mut out: SmallVec<[(AxisName, usize); 2]> = SmallVec::new();
    find_named_axis(|n, size| {
        out.push((n.clone(), size));
        false
    });
    DEVICE_AXES.with(|d| out.extend(d.borrow().iter().rev().map(|a| (a.name.clone(), a.size))));
    out
}

/// The error for a collective over `name` where no transform binds it.
#[cold]
pub fn unbound_axis(op: &str, name: &str) -> Error {
    let bound: Vec<String> = axis_env().iter().map(|(n, s)| format!("'{n}' (size {s})")).collect();
    let hint = if bound.is_empty() {
        "no axis is named here: bind it with vmap's axis_name (VmapOptions::axis_name) or pmap".to_string()
    } else {
        format!("the named axes in force are {}", bound.join(", "))
    };
    Error::new(op, ErrorKind::UnboundAxis { name: name.to_string(), hint })
}

/// The concrete array of operand `t` (whose value is `v`) that reached `Eval`.
#[inline]
fn concrete<'v>(prim: &Prim, t: &Tensor, v: &'v Value) -> Result<&'v crate::Array> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Tracer(tr) => Err(escaped(prim.name(), t, tr.tag)),
    }
}

/// The error for tracer `t` of `tag`, whose interpreter is not on this
/// thread's stack: it escaped its transform, or reached another thread
/// (a tracer's node is made on its transform's thread).
#[cold]
#[inline(never)]
pub(crate) fn escaped(op: &str, t: &Tensor, tag: Tag) -> Error {
    let transform = tag.name.to_string();
    if t.owned_here() {
        Error::new(op, ErrorKind::EscapedTracer { transform })
    } else {
        Error::new(op, ErrorKind::ForeignTracer { transform })
    }
}

/// The error for operands of `prim` on two devices (`Eval`'s, and the
/// jit plan's at compile time).
#[cold]
pub fn mixed_devices(prim: &Prim, first: crate::Device, other: crate::Device) -> Error {
    Error::device(
        prim.name(),
        format!("operands are on different devices ({first} and {other}); move them with to_device"),
    )
}

/// Level 0: check shapes, run the kernels. One and two operands (nearly
/// every op) are handled without building operand lists. Not inlined into
/// [`bind_at`]: that frame recurs once per interpreter level when an op
/// dispatches down a deep stack, this one only at the bottom.
#[inline(never)]
fn eval(prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
    match inputs {
        [x] => {
            let vx = x.value();
            let ax = concrete(prim, x, &vx)?;
            crate::prim::check(prim, &[ax.aval_ref()])?;
            lower(prim, &[ax])
        }
        [x, y] => {
            let (vx, vy) = (x.value(), y.value());
            let (ax, ay) = (concrete(prim, x, &vx)?, concrete(prim, y, &vy)?);
            let (rx, ry) = (ax.aval_ref(), ay.aval_ref());
            let (dx, dy) = (rx.device, ry.device);
            crate::prim::check(prim, &[rx, ry])?;
            if dx != dy {
                return Err(mixed_devices(prim, dx, dy));
            }
            lower(prim, &[ax, ay])
        }
        _ => eval_any(prim, inputs),
    }
}

/// [`eval`] for any number of operands.
fn eval_any(prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
    let mut vals: SmallVec<[crate::tensor::ValueRef<'_>; 4]> = SmallVec::new();
    for t in inputs {
        let v = t.value();
        concrete(prim, t, &v)?;
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
            return Err(mixed_devices(prim, first.device, other.device));
        }
    }
    lower(prim, &arrays)
}

/// Runs `prim`'s lowering on concrete operands that were already checked
/// (shapes, dtypes, one device): what `Eval` does after its check. A
/// compiled plan (`jit`) checks each equation once, when it is compiled,
/// and calls this per replay. An allocation refused inside is the same
/// out-of-memory error as under `Eval`.
///
/// # Errors
/// What the lowering returns. Operands that do not satisfy the
/// primitive's shape rule are a bug of the caller (a kernel may then
/// report an internal error or panic).
#[inline]
pub fn lower_checked(prim: &Prim, arrays: &[&crate::Array]) -> Result<Outs> {
    lower(prim, arrays)
}

/// Runs the lowering; a buffer allocation refused inside it (see `NOTE:
/// [allocation failure]` in xform-kernels' pool, and the device's
/// out-of-memory error) becomes an out-of-memory error naming the primitive
/// and its result. Kernels allocate their outputs before writing anything,
/// so nothing is half-written.
#[inline]
fn lower(prim: &Prim, arrays: &[&crate::Array]) -> Result<Outs> {
    let device = || arrays.first().map_or(crate::Device::Cpu, |a| a.device());
    match xform_kernels::pool::catch_alloc(|| crate::prim::lower(prim, arrays)) {
        Ok(Err(e)) => match e.kind {
            ErrorKind::OutOfMemory { shape: None, device, bytes, .. } => {
                Err(out_of_memory(prim, arrays, device, bytes))
            }
            _ => Err(e),
        },
        Ok(r) => r,
        Err(failure) => Err(out_of_memory(prim, arrays, device(), failure.bytes)),
    }
}

/// The out-of-memory error of `prim` on `arrays`: names its largest result.
#[cold]
#[inline(never)]
fn out_of_memory(prim: &Prim, arrays: &[&crate::Array], device: crate::Device, bytes: u128) -> Error {
    let avals: SmallVec<[AvalRef<'_>; 4]> = arrays.iter().map(|a| a.aval_ref()).collect();
    let size = |a: &crate::Aval| a.shape.iter().fold(a.dtype.size_bytes() as u128, |n, &d| n * d as u128);
    let largest = crate::prim::shape_rule(prim, &avals).ok().and_then(|outs| outs.into_iter().max_by_key(size));
    match largest {
        Some(out) => Error::out_of_memory(prim.name(), &out.shape, out.dtype, device, bytes),
        None => Error::new(prim.name(), ErrorKind::OutOfMemory { shape: None, dtype: None, device, bytes }),
    }
}

#[cfg(test)]
mod collective_timeout_tests {
    use super::collective_timeout_from;
    use std::time::Duration;

    #[test]
    fn the_environment_sets_the_timeout_in_seconds() {
        assert_eq!(collective_timeout_from(None), Duration::from_secs(300));
        assert_eq!(collective_timeout_from(Some("2.5")), Duration::from_millis(2500));
        assert_eq!(collective_timeout_from(Some(" 60 ")), Duration::from_secs(60));
        for bad in ["", "soon", "0", "-1", "inf", "NaN"] {
            assert_eq!(collective_timeout_from(Some(bad)), Duration::from_secs(300), "{bad:?}");
        }
    }
}
