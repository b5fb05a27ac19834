//! [`Tensor`]: the one array type users and rules see. It is a cheap handle
//! (an `Arc`) to a node that holds either a concrete [`Array`] or a
//! [`Tracer`] of one interpreter instance.
//!
//! NOTE: [tensor identity] Cloning a `Tensor` copies the handle, like
//! assigning a variable in Python: an in-place op through one clone is seen
//! through all of them. `Tensor::copy` makes a fresh buffer (PyTorch's
//! `clone`). Under a transform an in-place op replaces the node's value
//! (functionalization), which is why the value sits in a cell: a
//! `ValueCell`, which any thread may read and only the node's own thread
//! writes (see `NOTE: [node ownership]`), so tensors are `Send + Sync`.

use crate::array::{Array, Device};
pub use crate::array::{Aval, AvalRef};
use crate::counted::{pooled, Counted};
use crate::error::{Error, Result};
use crate::interp::Tag;
use crate::value_cell::ValueCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use xform_kernels::{DType, Shape};

/// A value under a transform: the interpreter instance that owns it (by
/// tag), its abstract value, and that interpreter's own data.
#[derive(Clone)]
pub struct Tracer {
    /// The owning interpreter instance.
    pub tag: Tag,
    /// Logical shape, dtype and device, as the user's code sees them.
    pub aval: Aval,
    /// The owning interpreter's data.
    pub data: TracerData,
}

/// What a tracer carries, one variant per kind of interpreter: each reads
/// only its own variant, and a tracer of its tag with another variant is an
/// internal error it reports, not a panic. No variant allocates, so a clone
/// is at most two reference-count increments.
#[derive(Clone)]
pub enum TracerData {
    /// Forward mode (the JVP interpreter of jvp, grad, jacfwd, linearize,
    /// ...): the primal and its tangent, both of the parent level. A
    /// symbolic zero tangent is never a tracer: the primal stands alone.
    Dual {
        /// The value.
        primal: Tensor,
        /// Its tangent.
        tangent: Tensor,
    },
    /// vmap: the value with the batch axis in it, of the parent level.
    Batched {
        /// The batched value.
        value: Tensor,
        /// The batch axis of `value`.
        bdim: usize,
    },
    /// trace (and linearize's tangent recorder): the program variable.
    Staged {
        /// The variable in the program being built.
        var: crate::program::Var,
    },
    /// functionalize with `remove_views`: the value, of the parent level.
    Functional {
        /// The value.
        value: Tensor,
    },
}

impl TracerData {
    /// The variant's name, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            TracerData::Dual { .. } => "dual",
            TracerData::Batched { .. } => "batched",
            TracerData::Staged { .. } => "staged",
            TracerData::Functional { .. } => "functional",
        }
    }
}

impl Tracer {
    /// The error an interpreter returns for a tracer of its own tag whose
    /// data is not the `expected` variant: a bug in xform, reported, not a
    /// panic.
    #[cold]
    pub fn wrong_data(&self, expected: &str) -> Error {
        let (name, got) = (self.tag.name, self.data.kind());
        Error::transform(name, format!("internal error: a {name} tracer holds {got} data, not {expected}"))
    }
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tracer({} of {}#{})", self.aval, self.tag.name, self.tag.id)
    }
}

/// What a tensor node holds.
#[derive(Clone, Debug)]
pub enum Value {
    /// Concrete elements.
    Array(Array),
    /// A value of an interpreter instance.
    Tracer(Tracer),
}

impl Value {
    /// The abstract value, borrowed.
    #[inline]
    pub fn aval_ref(&self) -> AvalRef<'_> {
        match self {
            Value::Array(a) => a.aval_ref(),
            Value::Tracer(t) => t.aval.as_ref(),
        }
    }
}

/// The view ops from a base to one of its views: a persistent list whose
/// tail is shared with the chain it extends, so that making a view of a
/// view is O(1) in the length of the chain (a view of a view of ... is
/// common: 20,000 successive `.t()` must not copy 20,000 ops each time).
#[derive(Clone, Default)]
pub struct ViewOps(Option<Arc<ViewOpNode>>);

struct ViewOpNode {
    op: crate::prim::Prim,
    prev: ViewOps,
    len: usize,
}

impl ViewOps {
    /// This chain followed by `op` (the chain itself is unchanged).
    pub fn push(&self, op: crate::prim::Prim) -> ViewOps {
        ViewOps(Some(Arc::new(ViewOpNode { op, prev: self.clone(), len: self.len() + 1 })))
    }

    /// The number of ops.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |n| n.len)
    }

    /// True for the empty chain.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The ops in order, base first.
    pub fn to_vec(&self) -> Vec<&crate::prim::Prim> {
        let mut out = Vec::with_capacity(self.len());
        let mut node = self.0.as_deref();
        while let Some(n) = node {
            out.push(&n.op);
            node = n.prev.0.as_deref();
        }
        out.reverse();
        out
    }
}

impl Drop for ViewOps {
    /// Unlinks the nodes this chain holds alone one by one: a recursive drop
    /// of a chain of thousands of views would overflow the stack.
    fn drop(&mut self) {
        let mut next = self.0.take();
        while let Some(rc) = next {
            match Arc::try_unwrap(rc) {
                Ok(mut node) => next = node.prev.0.take(),
                Err(_) => break,
            }
        }
    }
}

/// How a view tensor was derived from its base, for functionalization.
pub struct ViewLink {
    /// The tensor this one is a view of (the root of the view chain).
    pub base: Tensor,
    /// The view ops from `base` to this tensor, in order.
    pub ops: ViewOps,
    /// The base's version when this view's value was last computed
    /// (written only by the view's own thread, so relaxed accesses).
    pub seen_version: AtomicU64,
    /// Where this view's elements would sit in the base's storage eagerly
    /// (for a traced base: as if it were contiguous). Decides whether a
    /// further reshape is a view or a copy, the same way eager execution
    /// decides it.
    pub layout: xform_kernels::Layout,
}

impl Clone for ViewLink {
    fn clone(&self) -> ViewLink {
        ViewLink {
            base: self.base.clone(),
            ops: self.ops.clone(),
            seen_version: AtomicU64::new(self.seen_version.load(Ordering::Relaxed)),
            layout: self.layout.clone(),
        }
    }
}

/// See [`Tensor::value_key`].
pub type ValueKey = (*const (), u64, u64);

pub(crate) struct Node {
    pub(crate) slot: ValueCell<Slot>,
    /// Set for tensors made by a view method (reshape, slice, ...).
    pub(crate) view: Option<Box<ViewLink>>,
    /// Bumped whenever `value` is replaced by a functionalized write
    /// (only by the node's own thread: relaxed loads and stores).
    pub(crate) version: AtomicU64,
    /// When the node was made, on its thread's epoch clock (see
    /// `interp::next_epoch`), to tell tensors made outside a transform.
    pub(crate) birth: u64,
}

// At most 1024 recycled blocks (~190 KiB) per thread.
pooled!(Node, 1024);

/// What a functionalized write changes: the value, and the layout it had.
pub(crate) struct Slot {
    pub(crate) value: Value,
    /// The layout the tensor had before its first functionalized write: an
    /// eager in-place op keeps a tensor's layout, so view decisions keep
    /// using it (see `mutation::make_view`).
    pub(crate) eager_layout: Option<Box<xform_kernels::Layout>>,
}

impl Node {
    #[inline(always)]
    fn new(value: Value, view: Option<Box<ViewLink>>, birth: u64, owner: u32) -> Node {
        Node {
            slot: ValueCell::new(Slot { value, eager_layout: None }, owner),
            view,
            version: AtomicU64::new(0),
            birth,
        }
    }
}

/// A borrowed tensor value (see [`Tensor::value`]); other borrows may
/// coexist, on this thread and others. Two words, like `Ref`.
pub struct ValueRef<'a> {
    value: NonNull<Value>,
    /// The borrowed cell (the borrow is counted there), or `None` when
    /// `value` is owned (a `Box`).
    cell: Option<&'a ValueCell<Slot>>,
}

impl<'a> ValueRef<'a> {
    #[inline]
    fn borrowed(cell: &'a ValueCell<Slot>) -> ValueRef<'a> {
        cell.acquire();
        // SAFETY: the slot is live while `cell` is borrowed; its address
        // is taken without reading it.
        let value = unsafe { NonNull::new_unchecked(std::ptr::addr_of!((*cell.as_ptr()).value).cast_mut()) };
        ValueRef { value, cell: Some(cell) }
    }

    fn owned(value: Value) -> ValueRef<'a> {
        // SAFETY: `Box::into_raw` is non-null.
        ValueRef { value: unsafe { NonNull::new_unchecked(Box::into_raw(Box::new(value))) }, cell: None }
    }
}

impl std::ops::Deref for ValueRef<'_> {
    type Target = Value;
    #[inline]
    fn deref(&self) -> &Value {
        // SAFETY: `value` points into the slot whose borrow this guard
        // counts (no write meanwhile), or at the box this guard owns.
        unsafe { self.value.as_ref() }
    }
}

impl Drop for ValueRef<'_> {
    #[inline]
    fn drop(&mut self) {
        match self.cell {
            // SAFETY: the borrow counted in `borrowed`, on this thread
            // (`ValueRef` is not `Send`: it holds a `NonNull`).
            Some(cell) => unsafe { cell.release() },
            // SAFETY: without a cell, `value` came from `Box::into_raw` in
            // `owned`, and is freed once, here.
            None => drop(unsafe { Box::from_raw(self.value.as_ptr()) }),
        }
    }
}

/// A tensor: a cheap-to-clone handle to a concrete array or a tracer.
///
/// Operations go through [`bind`](crate::bind), so every method works the
/// same eagerly and under any stack of transforms.
#[derive(Clone)]
pub struct Tensor(pub(crate) Counted<Node>);

impl Tensor {
    /// A tensor holding `value`. (Always inlined: built in place, the
    /// value is not copied through this frame; every op makes one.)
    #[inline(always)]
    pub fn from_value(value: Value) -> Tensor {
        let birth = crate::interp::next_epoch();
        let owner = crate::value_cell::thread_index();
        Tensor(Counted::new_with(|| Node::new(value, None, birth, owner)))
    }

    /// A tensor over a concrete array.
    pub fn from_array(a: Array) -> Tensor {
        Tensor::from_value(Value::Array(a))
    }

    /// A tracer tensor.
    pub fn from_tracer(t: Tracer) -> Tensor {
        Tensor::from_value(Value::Tracer(t))
    }

    /// A view tensor of `base` (see [`ViewLink`]).
    pub(crate) fn new_view(value: Value, link: ViewLink) -> Tensor {
        let birth = crate::interp::next_epoch();
        let owner = crate::value_cell::thread_index();
        Tensor(Counted::new_with(|| Node::new(value, Some(Box::new(link)), birth, owner)))
    }

    /// The current value. For a view whose base was replaced by a
    /// functionalized write, the view is recomputed from the base first
    /// (and kept, on the tensor's own thread).
    #[inline]
    pub fn value(&self) -> ValueRef<'_> {
        if self.0.view.is_some() {
            return self.view_value();
        }
        ValueRef::borrowed(&self.0.slot)
    }

    /// [`Tensor::value`] of a view (out of line: the common path stays small).
    #[inline(never)]
    fn view_value(&self) -> ValueRef<'_> {
        match sync_view(self) {
            Some(v) => ValueRef::owned(v),
            None => ValueRef::borrowed(&self.0.slot),
        }
    }

    /// True on the thread that made this tensor's node, the only one that
    /// may replace its value (see `NOTE: [node ownership]`).
    #[inline]
    pub(crate) fn owned_here(&self) -> bool {
        self.0.slot.is_owner()
    }

    /// The current value (a clone of the handle inside).
    pub fn value_cloned(&self) -> Value {
        self.value().clone()
    }

    /// The concrete array, if this tensor is not a tracer.
    pub fn array(&self) -> Option<Array> {
        match &*self.value() {
            Value::Array(a) => Some(a.clone()),
            Value::Tracer(_) => None,
        }
    }

    /// The concrete array, or an error naming `op` if this is a tracer.
    pub fn concrete(&self, op: &str) -> Result<Array> {
        match &*self.value() {
            Value::Array(a) => Ok(a.clone()),
            Value::Tracer(t) => Err(Error::transform(
                op,
                format!(
                    "needs a concrete value, but got a tracer of {} with shape {}; \
                     read values outside the transformed function",
                    t.tag.name, t.aval.shape
                ),
            )),
        }
    }

    /// The value where it is known at this level: the concrete array, or
    /// the primal of a JVP tracer (grad, jvp, linearize, jacfwd, jacrev),
    /// recursively, or a functionalized value. `None` under vmap (a
    /// value per example) and staging (trace: no value yet).
    pub fn known_array(&self) -> Option<Array> {
        self.known_or_unknown().ok()
    }

    /// The known value (see [`Tensor::known_array`]), or an error naming
    /// `op` that says why it is not known and what to use instead.
    pub fn known(&self, op: &str) -> Result<Array> {
        self.known_or_unknown().map_err(|u| match u {
            Unknown::Batched(aval) => unknown_under_vmap(op, &aval),
            Unknown::Staged(aval, by) => unknown_under_trace(op, &aval, by),
            Unknown::Escaped(e) => e.named(op),
        })
    }

    /// The known value, or the innermost level that hides it.
    fn known_or_unknown(&self) -> std::result::Result<Array, Unknown> {
        let mut t = self.clone();
        loop {
            let next = match &*t.value() {
                Value::Array(a) => {
                    // a value staged code decides on (NOTE: [trace-time values])
                    crate::provenance::note_read(a);
                    return Ok(a.clone());
                }
                // a tracer whose transform is not on this thread's stack
                // has no value to read here, whatever its kind
                Value::Tracer(tr) if !crate::interp::pushed_after(0, tr.tag) => {
                    return Err(Unknown::Escaped(crate::interp::escaped("", &t, tr.tag)))
                }
                Value::Tracer(tr) => match &tr.data {
                    TracerData::Dual { primal, .. } => primal.clone(),
                    TracerData::Functional { value } => value.clone(),
                    TracerData::Batched { .. } => return Err(Unknown::Batched(tr.aval.clone())),
                    TracerData::Staged { .. } => return Err(Unknown::Staged(tr.aval.clone(), tr.tag.name)),
                },
            };
            t = next;
        }
    }

    /// Whether any element of a bool tensor is true in any example of any
    /// enclosing vmap, where the values exist (everywhere but staging;
    /// `None` there, and for other dtypes). Control flow uses it to end a
    /// loop whose predicate vmap batched: the loop runs until no example's
    /// predicate holds.
    pub fn known_any(&self) -> Option<bool> {
        match &*self.value() {
            Value::Array(a) if a.dtype == DType::Bool => {
                crate::provenance::note_read(a);
                Some(a.to_vec::<bool>().ok()?.into_iter().any(|v| v))
            }
            Value::Array(_) => None,
            Value::Tracer(t) => match &t.data {
                TracerData::Dual { primal, .. } => primal.known_any(),
                TracerData::Functional { value } | TracerData::Batched { value, .. } => value.known_any(),
                TracerData::Staged { .. } => None,
            },
        }
    }

    /// True if this is a tracer.
    pub fn is_tracer(&self) -> bool {
        matches!(&*self.value(), Value::Tracer(_))
    }

    /// The tag of the interpreter that owns this tensor, if it is a tracer.
    pub fn tag(&self) -> Option<Tag> {
        match &*self.value() {
            Value::Tracer(t) => Some(t.tag),
            Value::Array(_) => None,
        }
    }

    /// Runs `f` on the borrowed abstract values of `inputs` (no shape is
    /// cloned: the staging interpreters call this on every op).
    pub fn with_avals<R>(inputs: &[Tensor], f: impl FnOnce(&[AvalRef<'_>]) -> R) -> R {
        // One and two operands (nearly every op) without operand lists.
        match inputs {
            [x] => return f(&[x.value().aval_ref()]),
            [x, y] => {
                let (vx, vy) = (x.value(), y.value());
                return f(&[vx.aval_ref(), vy.aval_ref()]);
            }
            _ => {}
        }
        // Plain pushes: `collect` into a SmallVec costs several times more
        // on this path, which every staged op takes.
        let mut vals: smallvec::SmallVec<[ValueRef<'_>; 4]> = smallvec::SmallVec::new();
        for t in inputs {
            vals.push(t.value());
        }
        let mut refs: smallvec::SmallVec<[AvalRef<'_>; 4]> = smallvec::SmallVec::new();
        for v in &vals {
            refs.push(v.aval_ref());
        }
        f(&refs)
    }

    /// Shape, dtype and device.
    pub fn aval(&self) -> Aval {
        self.with_aval(|a| a.to_owned())
    }

    /// Runs `f` on the borrowed shape, dtype and device (no shape copy).
    #[inline]
    pub fn with_aval<R>(&self, f: impl FnOnce(AvalRef<'_>) -> R) -> R {
        f(self.value().aval_ref())
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.with_shape(Shape::clone)
    }

    /// Runs `f` on the borrowed shape (no copy, for the getters below).
    pub(crate) fn with_shape<R>(&self, f: impl FnOnce(&Shape) -> R) -> R {
        self.with_aval(|a| f(a.shape))
    }

    /// True if both tensors have the same shape (compared without copies).
    pub(crate) fn same_shape(&self, other: &Tensor) -> bool {
        self.with_shape(|a| other.with_shape(|b| a == b))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.with_aval(|a| a.dtype)
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.with_aval(|a| a.device)
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.with_shape(Shape::rank)
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.with_shape(Shape::numel)
    }

    /// True if both handles point at the same tensor node.
    pub fn same_node(&self, other: &Tensor) -> bool {
        self.0.ptr_eq(&other.0)
    }

    /// True if this handle is the only one to its node, the node is not a
    /// view, and its value is a concrete CPU array that alone holds its
    /// storage, contiguous from offset 0: then no one else can observe a
    /// write of its elements over the buffer (the jit's in-place updates
    /// and donated arguments). No lock is taken.
    pub fn owns_its_buffer(&self) -> bool {
        if self.0.strong_count() != 1 || self.0.view.is_some() {
            return false;
        }
        let v = self.value();
        let Value::Array(a) = &*v else { return false };
        a.device() == Device::Cpu && a.is_unique() && a.layout.offset == 0 && a.layout.is_contiguous()
    }

    /// Replaces this node's value (functionalized mutation) and bumps its
    /// version so that views of it re-read. Only the node's own thread may
    /// (see `NOTE: [node ownership]`); on another, an in-place error
    /// naming `op`.
    pub(crate) fn replace_value(&self, op: &str, v: Value) -> Result<()> {
        let mut slot = self.0.slot.try_borrow_mut().ok_or_else(|| foreign_write(op))?;
        if slot.eager_layout.is_none() {
            slot.eager_layout = Some(Box::new(match &slot.value {
                Value::Array(a) => a.layout.clone(),
                Value::Tracer(t) => xform_kernels::Layout::contiguous(t.aval.shape.clone()),
            }));
        }
        slot.value = v;
        drop(slot);
        self.0.version.store(self.0.version.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Sets the value of a view to its base's (already replaced) value,
    /// without bumping the view's version; `None` on another thread than
    /// the node's (nothing written).
    pub(crate) fn set_view_value(&self, v: Value) -> Option<()> {
        self.0.slot.try_borrow_mut()?.value = v;
        Some(())
    }

    /// How many times an in-place op under a transform replaced this
    /// tensor's value (0 if it never did). Transforms use it to write
    /// mutated arguments back to the caller.
    #[inline]
    pub fn version(&self) -> u64 {
        self.0.version.load(Ordering::Relaxed)
    }

    /// The layout eager execution would give this tensor (its layout before
    /// any functionalized write; contiguous for a tracer).
    pub(crate) fn eager_layout(&self) -> xform_kernels::Layout {
        if let Some(l) = &self.0.slot.borrow().eager_layout {
            return (**l).clone();
        }
        match self.array() {
            Some(a) => a.layout,
            None => xform_kernels::Layout::contiguous(self.shape()),
        }
    }

    /// When the node was made (thread epoch clock).
    pub(crate) fn birth(&self) -> u64 {
        self.0.birth
    }

    /// A key that changes whenever this tensor's value may have: its node,
    /// its version (bumped by a functionalized write) and, for a view, the
    /// base version it is synced to (a view's value follows its base without
    /// a version of its own; the view is synced here first). Equal keys of
    /// a tensor kept alive mean the same value.
    pub fn value_key(&self) -> ValueKey {
        drop(self.value());
        let seen = self.view_link().map_or(0, |l| l.seen_version.load(Ordering::Relaxed));
        (self.0.addr() as *const (), self.version(), seen)
    }

    /// The view link, if this tensor was made by a view method.
    pub(crate) fn view_link(&self) -> Option<&ViewLink> {
        self.0.view.as_deref()
    }

    /// The tensor this one is a view of (the root of its chain of view
    /// methods: `x.slice(..).t()` gives `x`) and the view primitives from
    /// it to this one, base first; `None` if no view method made it.
    pub fn view_of(&self) -> Option<(&Tensor, Vec<crate::prim::Prim>)> {
        self.view_link().map(|l| (&l.base, l.ops.to_vec().into_iter().cloned().collect()))
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.value() {
            Value::Array(_) => write!(f, "{self}"),
            Value::Tracer(t) => write!(f, "{t:?}"),
        }
    }
}

/// Why a value is not known: the tracer (and its abstract value) that hides it.
enum Unknown {
    /// A vmap tracer: a value per example.
    Batched(Aval),
    /// A staged tracer: no value yet (and the transform staging it).
    Staged(Aval, &'static str),
    /// A tracer whose transform returned, or that reached another thread:
    /// the error says so.
    Escaped(Error),
}

/// Brings a view up to date with its base after a functionalized write.
/// On the view's own thread the new value is stored; on another (which may
/// not write the node: `NOTE: [node ownership]`) it is returned instead.
fn sync_view(view: &Tensor) -> Option<Value> {
    let link = view.view_link()?;
    let base_version = link.base.version();
    if base_version == link.seen_version.load(Ordering::Relaxed) {
        return None;
    }
    // Recompute from the base's current value by replaying the view ops.
    let mut v = link.base.clone();
    for op in link.ops.to_vec() {
        match crate::interp::bind1(op, std::slice::from_ref(&v)) {
            Ok(t) => v = t,
            Err(e) => e.raise(),
        }
    }
    let new_value: Value = v.value_cloned();
    if !view.owned_here() {
        return Some(new_value);
    }
    view.set_view_value(new_value).expect("the view's own thread");
    link.seen_version.store(base_version, Ordering::Relaxed);
    None
}

#[cold]
fn foreign_write(op: &str) -> Error {
    Error::in_place(
        op,
        "the target tensor was made on another thread; under a transform, in-place ops write only tensors \
         made on the thread running the transform (copy it first)",
    )
}

#[cold]
fn unknown_under_vmap(op: &str, aval: &Aval) -> Error {
    Error::transform(
        op,
        format!(
            "needs a concrete value, but under vmap the value of this {aval} tensor differs per example, so plain \
             Rust control flow cannot branch on it. Select per example with `where`/`select` (both branches \
             computed), or use `cond`/`switch` (and `while_loop` for loops), which vmap batches"
        ),
    )
}

#[cold]
fn unknown_under_trace(op: &str, aval: &Aval, by: &str) -> Error {
    Error::transform(
        op,
        format!(
            "needs a concrete value, but this {aval} tensor is being staged into a program ({by}) and has no \
             value yet. Use `cond`/`switch`, `while_loop`, `fori_loop` or `scan`, which stage control flow, or \
             `where`/`select`"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    /// The typed payload is no larger than the untyped fields it replaced
    /// (two optional tensor handles and a `usize`), so tracers and node
    /// values stay as small as they were.
    #[test]
    fn tracer_data_is_three_words() {
        assert_eq!(size_of::<TracerData>(), 2 * size_of::<Option<Tensor>>() + size_of::<usize>());
    }
}
