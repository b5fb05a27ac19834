//! Vectorization: the batching interpreter and `vmap`.
//!
//! A batch tracer carries a value of the parent level with one extra axis,
//! the batch dim, at a recorded position. Each primitive's batch rule works
//! on whole batches (no loop over examples); values without a batch dim
//! stay plain values of the parent level. Shape errors are reported with
//! the per-example (logical) shapes the user's code sees.

use crate::tree::{Leaves, Prefix, Skeleton, Tree};
use smallvec::SmallVec;
use std::cell::RefCell;
use xform_ops::interp::{bind_at, parent_of, run_at_parent, with_interpreter};
use xform_ops::prim::{batch_rule, shape_rule};
use xform_ops::prims::batching::{to_position, BatchAxis};
use xform_ops::tensor::ValueKey;
use xform_ops::{
    lax, Aval, AxisName, Error, Interpreter, Level, OrRaise, Outs, Prim, Result, Tag, Tensor, Tracer, TracerData, Value,
};

/// The batching interpreter (one instance per vmap call).
pub(crate) struct BatchInterp {
    tag: Tag,
    /// The axis batched over, as batch rules are told it (its name, where
    /// one was given, binds the collectives over it: NOTE: [named axes]).
    axis: BatchAxis,
    /// The last unbatched operand broadcast into a batch (see
    /// [`BatchInterp::broadcast`]).
    last_broadcast: RefCell<Option<Broadcast>>,
}

/// An unbatched value and its broadcast along a batch dim.
struct Broadcast {
    /// Held only to keep the node alive, so that `key` names no other node.
    _source: Tensor,
    key: ValueKey,
    bdim: usize,
    batched: Tensor,
}

impl BatchInterp {
    fn new(size: usize, name: Option<&str>) -> BatchInterp {
        let axis = BatchAxis { size, name: name.map(AxisName::from) };
        BatchInterp { tag: Tag::fresh("vmap"), axis, last_broadcast: RefCell::new(None) }
    }

    fn wrap(&self, val: Tensor, bdim: Option<usize>) -> Tensor {
        match bdim {
            None => val,
            Some(d) => {
                let aval = val.with_aval(|a| Aval { shape: a.shape.without_axis(d), dtype: a.dtype, device: a.device });
                Tensor::from_tracer(Tracer { tag: self.tag, aval, data: TracerData::Batched { value: val, bdim: d } })
            }
        }
    }

    fn unwrap(&self, t: &Tensor) -> Result<(Tensor, Option<usize>)> {
        if let Value::Tracer(tr) = &*t.value() {
            if tr.tag.id == self.tag.id {
                let TracerData::Batched { value, bdim } = &tr.data else { return Err(tr.wrong_data("batched")) };
                return Ok((value.clone(), Some(*bdim)));
            }
        }
        Ok((t.clone(), None))
    }
}

impl Interpreter for BatchInterp {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn describe(&self) -> Option<String> {
        Some(match &self.axis.name {
            Some(n) => format!("vmap(size {}, axis_name '{n}')", self.axis.size),
            None => format!("vmap(size {})", self.axis.size),
        })
    }

    fn named_axis(&self) -> Option<(AxisName, usize)> {
        self.axis.name.clone().map(|n| (n, self.axis.size))
    }

    fn process(&self, level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
        // One and two operands (nearly every op) without operand lists.
        match inputs {
            [x] => {
                let (v, b) = self.unwrap(x)?;
                self.apply(level, prim, inputs, &[v], &[b])
            }
            [x, y] => {
                let ((vx, bx), (vy, by)) = (self.unwrap(x)?, self.unwrap(y)?);
                self.apply(level, prim, inputs, &[vx, vy], &[bx, by])
            }
            _ => {
                let mut vals: SmallVec<[Tensor; 4]> = SmallVec::new();
                let mut bdims: SmallVec<[Option<usize>; 4]> = SmallVec::new();
                for t in inputs {
                    let (v, b) = self.unwrap(t)?;
                    vals.push(v);
                    bdims.push(b);
                }
                self.apply(level, prim, inputs, &vals, &bdims)
            }
        }
    }
}

impl BatchInterp {
    /// Applies `prim` to the unwrapped operands `vals` (batch dims `bdims`)
    /// and wraps the results; `inputs` are the operands as the user's code
    /// sees them, for errors.
    fn apply(
        &self,
        level: Level,
        prim: &Prim,
        inputs: &[Tensor],
        vals: &[Tensor],
        bdims: &[Option<usize>],
    ) -> Result<Outs> {
        let result = match shared_batch_dim(prim, bdims) {
            // An elementwise op whose batched operands share one batch dim
            // (most batched ops): no rule dispatch.
            Some(d) => self.bind_elementwise(level, prim, vals, bdims, d),
            None => run_at_parent(level, || batch_rule(prim, vals, bdims, &self.axis)).map(|(mut outs, obdims)| {
                // Wrapped in place: no second list of outputs.
                for (o, b) in outs.iter_mut().zip(obdims) {
                    if b.is_some() {
                        *o = self.wrap(o.clone(), b);
                    }
                }
                outs
            }),
        };
        result.or_else(|e| {
            // Report the error with the per-example shapes the user's code
            // sees, not the batched ones the rule worked on.
            Tensor::with_avals(inputs, |refs| shape_rule(prim, refs))?;
            Err(e)
        })
    }

    /// `prim`, elementwise, with every batched operand batched at `d`:
    /// unbatched operands are broadcast into a batch at `d` and the parent
    /// applies `prim` to the batches as they are (exactly what
    /// `batch_elementwise` does, without the rule dispatch).
    fn bind_elementwise(
        &self,
        level: Level,
        prim: &Prim,
        vals: &[Tensor],
        bdims: &[Option<usize>],
        d: usize,
    ) -> Result<Outs> {
        let mut outs = if bdims.iter().all(Option::is_some) {
            bind_at(parent_of(level), prim, vals)?
        } else {
            let mut full: SmallVec<[Tensor; 4]> = SmallVec::new();
            for (v, b) in vals.iter().zip(bdims) {
                full.push(if b.is_some() { v.clone() } else { self.broadcast(level, v, d)? });
            }
            bind_at(parent_of(level), prim, &full)?
        };
        for o in outs.iter_mut() {
            *o = self.wrap(o.clone(), Some(d));
        }
        Ok(outs)
    }

    /// The unbatched value `x` broadcast into a batch at `bdim`. The last
    /// broadcast is kept: one unbatched value often meets several batched
    /// ones (a captured constant used twice, or an unbatched cotangent given
    /// to `vjp`, which multiplies every factor of the output), and each
    /// would broadcast it again. A kept
    /// broadcast is reused only while the value is unchanged (same
    /// [`Tensor::value_key`]).
    fn broadcast(&self, level: Level, x: &Tensor, bdim: usize) -> Result<Tensor> {
        let key = x.value_key();
        if let Some(b) = &*self.last_broadcast.borrow() {
            if b.key == key && b.bdim == bdim {
                return Ok(b.batched.clone());
            }
        }
        let batched = run_at_parent(level, || to_position(x, None, bdim, self.axis.size))?;
        *self.last_broadcast.borrow_mut() = Some(Broadcast { _source: x.clone(), key, bdim, batched: batched.clone() });
        Ok(batched)
    }
}

/// The batch dim shared by every batched operand of an elementwise `prim`,
/// if all that are batched sit at the same position.
#[inline]
fn shared_batch_dim(prim: &Prim, bdims: &[Option<usize>]) -> Option<usize> {
    if !prim.is_elementwise() {
        return None;
    }
    let first = bdims.iter().flatten().next().copied()?;
    bdims.iter().all(|b| b.is_none() || *b == Some(first)).then_some(first)
}

/// One resolved axis entry per leaf.
pub(crate) type AxisList = SmallVec<[Option<isize>; 4]>;

/// Where the batch axis of each leaf is (`None`: not batched): a tree
/// prefix, as JAX's `in_axes` and `out_axes`.
///
/// An entry at a subtree applies to every leaf under it; a negative axis
/// counts from the end. The concise spellings convert with `into()`:
/// `0` (every leaf), `None::<isize>` (none), a tuple with one entry per
/// tuple element or struct field, nested to any depth (`(None, 0, (0, -1))`).
///
/// ```
/// use xform_ops::{DType, Tensor};
/// use xform_transforms::{vmap_axes, Axes};
/// // (w, (x, y)): w shared, x mapped over axis 0, y over its last axis.
/// let f = |(w, (x, y)): &(Tensor, (Tensor, Tensor))| (w * x).sum() + y.sum();
/// let w = Tensor::ones([3], DType::F64);
/// let x = Tensor::ones([5, 3], DType::F64);
/// let y = Tensor::ones([2, 5], DType::F64);
/// let out = vmap_axes(f, (None, (0, -1)), 0)(&(w, (x, y)));
/// assert_eq!(out.to_vec::<f64>(), vec![5.0; 5]);
/// ```
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Axes {
    /// Axis 0 of every leaf.
    #[default]
    Zero,
    /// The same axis (negative counts from the end) for every leaf, or
    /// `None` for none.
    All(Option<isize>),
    /// One entry per top-level child of the tree (tuple element, struct
    /// field, vector element), applying to every leaf under it, like a
    /// JAX in_axes tuple.
    Args(Vec<Option<isize>>),
    /// One entry per leaf, in flattening order. Inside a tuple spec it
    /// lists the children of its subtree, as [`Axes::Args`] does.
    Leaves(Vec<Option<isize>>),
    /// A tree prefix at any depth (see [`Prefix`]): what tuples convert to.
    Tree(Prefix<Option<isize>>),
}

impl Axes {
    /// Entries by child name (struct fields, map keys), each a prefix of
    /// that child: `Axes::fields([("w", None.into()), ("x", 0.into())])`.
    pub fn fields<S: Into<String>>(entries: impl IntoIterator<Item = (S, Axes)>) -> Axes {
        Axes::Tree(Prefix::Named(entries.into_iter().map(|(k, a)| (k.into(), a.into_prefix())).collect()))
    }

    /// One entry per leaf of `tree`, in flattening order (negative axes
    /// as given): the spec expanded as vmap expands it.
    pub fn per_leaf<T: Tree>(&self, tree: &T) -> Result<Vec<Option<isize>>> {
        Ok(resolve_axes("axes", self, tree.leaves().len(), || tree.skeleton())?.into_vec())
    }

    /// The spec as a prefix (`None` for [`Axes::Leaves`], which is not one).
    fn to_prefix(&self) -> Option<Prefix<Option<isize>>> {
        match self {
            Axes::Zero => Some(Prefix::Leaf(Some(0))),
            Axes::All(a) => Some(Prefix::Leaf(*a)),
            Axes::Args(v) => Some(Prefix::Node(v.iter().map(|a| Prefix::Leaf(*a)).collect())),
            Axes::Leaves(_) => None,
            Axes::Tree(p) => Some(p.clone()),
        }
    }

    fn into_prefix(self) -> Prefix<Option<isize>> {
        match self {
            Axes::Tree(p) => p,
            Axes::Leaves(v) => Prefix::Node(v.into_iter().map(Prefix::Leaf).collect()),
            other => other.to_prefix().expect("a prefix"),
        }
    }
}

impl From<isize> for Axes {
    fn from(a: isize) -> Axes {
        Axes::All(Some(a))
    }
}

impl From<i32> for Axes {
    fn from(a: i32) -> Axes {
        Axes::All(Some(a as isize))
    }
}

impl From<Option<isize>> for Axes {
    fn from(a: Option<isize>) -> Axes {
        Axes::All(a)
    }
}

impl From<Vec<Option<isize>>> for Axes {
    fn from(a: Vec<Option<isize>>) -> Axes {
        Axes::Args(a)
    }
}

impl From<Prefix<Option<isize>>> for Axes {
    fn from(p: Prefix<Option<isize>>) -> Axes {
        Axes::Tree(p)
    }
}

macro_rules! tuple_axes {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Into<Axes>),+> From<($($name,)+)> for Axes {
            fn from(t: ($($name,)+)) -> Axes {
                Axes::Tree(Prefix::Node(vec![$(t.$idx.into().into_prefix()),+]))
            }
        }
    };
}
tuple_axes!(A 0);
tuple_axes!(A 0, B 1);
tuple_axes!(A 0, B 1, C 2);
tuple_axes!(A 0, B 1, C 2, D 3);
tuple_axes!(A 0, B 1, C 2, D 3, E 4);
tuple_axes!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_axes!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_axes!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// Options of [`vmap_with`]; build them with the methods
/// (`VmapOptions::new().in_axes((None, 0)).chunk_size(64)`) or as a struct.
#[derive(Clone, Debug, Default)]
pub struct VmapOptions {
    /// Batch axis of each input leaf (default: 0 for all).
    pub in_axes: Axes,
    /// Where the batch axis goes in each output leaf (default: 0 for all);
    /// `None` requires the output to be the same for every example.
    pub out_axes: Axes,
    /// The batch size, required when no input is batched.
    pub axis_size: Option<usize>,
    /// Process at most this many examples at a time (bounds memory; the
    /// chunks' results are concatenated). At least 1: `Some(0)` is an
    /// error when the map is called (as torch.func's `chunk_size=0`).
    pub chunk_size: Option<usize>,
    /// The name of the mapped axis, which collectives inside `f` refer to
    /// (`lax::psum(&x, "batch")`: JAX's `vmap(f, axis_name="batch")`).
    /// Nested maps give several names; an inner map of the same name
    /// shadows the outer one. Not with `chunk_size` (a collective would
    /// see one chunk, not the whole axis).
    pub axis_name: Option<String>,
}

impl VmapOptions {
    /// The defaults: axis 0 of every input and output leaf, no chunking.
    pub fn new() -> VmapOptions {
        VmapOptions::default()
    }

    /// Sets `in_axes` (a prefix of the argument tree; see [`Axes`]).
    pub fn in_axes(mut self, axes: impl Into<Axes>) -> VmapOptions {
        self.in_axes = axes.into();
        self
    }

    /// Sets `out_axes` (a prefix of the output tree).
    pub fn out_axes(mut self, axes: impl Into<Axes>) -> VmapOptions {
        self.out_axes = axes.into();
        self
    }

    /// Sets the batch size (needed when no argument is batched).
    pub fn axis_size(mut self, n: usize) -> VmapOptions {
        self.axis_size = Some(n);
        self
    }

    /// Processes at most `n` examples at a time.
    pub fn chunk_size(mut self, n: usize) -> VmapOptions {
        self.chunk_size = Some(n);
        self
    }

    /// Names the mapped axis for the collectives inside `f` (see
    /// [`VmapOptions::axis_name`](VmapOptions#structfield.axis_name)).
    pub fn axis_name(mut self, name: impl Into<String>) -> VmapOptions {
        self.axis_name = Some(name.into());
        self
    }
}

/// Resolves an axes spec to one entry per leaf of a tree with `n` leaves
/// (the skeleton is computed only for tree-shaped specs and errors).
pub(crate) fn resolve_axes(what: &str, spec: &Axes, n: usize, skeleton: impl FnOnce() -> Skeleton) -> Result<AxisList> {
    match spec {
        Axes::Zero => Ok(smallvec::smallvec![Some(0); n]),
        Axes::All(a) => Ok(smallvec::smallvec![*a; n]),
        Axes::Leaves(v) => {
            if v.len() != n {
                let paths = skeleton().paths();
                return Err(Error::batching(
                    "vmap",
                    format!("{what} lists {} axes but the tree has {n} leaves ({})", v.len(), paths.join(", ")),
                ));
            }
            Ok(v.iter().copied().collect())
        }
        _ => {
            let mut prefix = spec.to_prefix().expect("a prefix");
            let sk = skeleton();
            // `(a,)` for a function of one tensor: the one entry is the leaf's.
            if let (Skeleton::Leaf, Prefix::Node(v)) = (&sk, &prefix) {
                if v.len() == 1 {
                    prefix = v[0].clone();
                }
            }
            let out = sk
                .expand_prefix(&prefix)
                .map_err(|e| Error::batching("vmap", format!("{what} does not fit the tree: {e}")))?;
            Ok(out.into_iter().collect())
        }
    }
}

/// Vectorizes `f` over axis 0 of every input leaf: `vmap(f)(xs)` equals
/// stacking `f(x)` over the examples, without a loop.
///
/// ```
/// use xform_ops::Tensor;
/// let xs = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]);
/// let norms = xform_transforms::vmap(|x: &Tensor| (x * x).sum())(&xs);
/// assert_eq!(norms.to_vec::<f32>(), vec![5.0, 25.0]);
/// ```
pub fn vmap<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y {
    vmap_with(f, VmapOptions::default())
}

/// [`vmap`] with in_axes, out_axes, axis_size and chunk_size.
pub fn vmap_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: VmapOptions) -> impl Fn(&X) -> Y {
    move |x: &X| try_vmap_call(&f, &opts, x).or_raise()
}

/// [`vmap`] with `in_axes` and `out_axes`, each a tree prefix in the
/// concise spelling: `vmap_axes(f, (None, 0, 0), 1)` is JAX's
/// `vmap(f, in_axes=(None, 0, 0), out_axes=1)` for `f` taking a triple.
///
/// ```
/// use xform_ops::{DType, Tensor};
/// let w = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let xs = Tensor::ones([2, 4], DType::F64); // 4 examples along axis 1
/// let f = |(w, x): &(Tensor, Tensor)| w * x;
/// let ys = xform_transforms::vmap_axes(f, (None, 1), -1)(&(w, xs));
/// assert_eq!(ys.shape().dims(), &[2, 4]);
/// assert_eq!(ys.to_vec::<f64>(), vec![1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]);
/// ```
pub fn vmap_axes<X: Tree, Y: Tree>(
    f: impl Fn(&X) -> Y,
    in_axes: impl Into<Axes>,
    out_axes: impl Into<Axes>,
) -> impl Fn(&X) -> Y {
    vmap_with(f, VmapOptions::new().in_axes(in_axes).out_axes(out_axes))
}

/// Each leaf's mapped axis (`in_axes` resolved against `x`'s leaves,
/// negative axes counted from the end) and the size of the mapped axis:
/// every mapped leaf's, which must agree with each other and with `given`
/// (`None` where no leaf is mapped and none is given). Errors name `op`
/// and the arguments' paths.
pub(crate) fn mapped_axes<X: Tree>(
    op: &str,
    x: &X,
    leaves: &Leaves,
    in_axes: &Axes,
    given: Option<usize>,
) -> Result<(SmallVec<[Option<usize>; 4]>, Option<usize>)> {
    let axes = resolve_axes("in_axes", in_axes, leaves.len(), || x.skeleton())?;
    let path = |i: usize| x.paths().swap_remove(i);
    let mut batch_axes: SmallVec<[Option<usize>; 4]> = SmallVec::new();
    let mut sizes: SmallVec<[(usize, usize); 4]> = SmallVec::new();
    for (i, (leaf, ax)) in leaves.iter().zip(&axes).enumerate() {
        match ax {
            None => batch_axes.push(None),
            Some(a) => {
                let shape = leaf.shape();
                let r = shape.rank() as isize;
                let n = if *a < 0 { a + r } else { *a };
                if n < 0 || n >= r {
                    return Err(Error::batching(
                        op,
                        format!("in_axes {a} is out of range for argument {} of shape {shape} (rank {r})", path(i)),
                    ));
                }
                batch_axes.push(Some(n as usize));
                sizes.push((i, shape[n as usize]));
            }
        }
    }
    let size = match sizes.first() {
        None => given,
        Some((_, s)) => {
            let consistent = sizes.iter().all(|(_, n)| n == s) && given.is_none_or(|g| g == *s);
            if !consistent {
                let list: Vec<String> = sizes.iter().map(|(p, n)| format!("{}: {n}", path(*p))).collect();
                let extra = given.map_or(String::new(), |g| format!(", axis_size: {g}"));
                return Err(Error::batching(
                    op,
                    format!("inconsistent batch sizes along the mapped axes ({}{extra})", list.join(", ")),
                ));
            }
            Some(*s)
        }
    };
    Ok((batch_axes, size))
}

/// Calls `vmap_with(f, opts)` on `x`, returning errors instead of panicking.
pub fn try_vmap_call<X: Tree, Y: Tree>(f: &impl Fn(&X) -> Y, opts: &VmapOptions, x: &X) -> Result<Y> {
    let leaves = x.leaves();
    let (batch_axes, size) = mapped_axes("vmap", x, &leaves, &opts.in_axes, opts.axis_size)?;
    let Some(size) = size else {
        return Err(Error::batching("vmap", "no argument is batched (all in_axes are None); give axis_size"));
    };
    if opts.chunk_size == Some(0) {
        return Err(Error::batching(
            "vmap",
            "chunk_size must be at least 1 (got 0); leave it unset to map every example at once",
        ));
    }
    if let (Some(name), Some(c)) = (&opts.axis_name, opts.chunk_size) {
        if c < size {
            return Err(Error::batching(
                "vmap",
                format!(
                    "chunk_size {c} with axis_name '{name}': a collective over '{name}' would see one chunk of the \
                     {size} examples; drop chunk_size, or the axis name"
                ),
            ));
        }
    }
    match opts.chunk_size {
        Some(c) if c < size => vmap_chunked(f, opts, x, &leaves, &batch_axes, size, c),
        _ => {
            let (y, outs, finals) = vmap_once(f, opts, x, &leaves, &batch_axes, size)?;
            crate::functionalize::write_back("vmap", &leaves, finals)?;
            Ok(y.with_leaves(outs))
        }
    }
}

/// vmap over chunks of at most `c` examples. Every chunk runs on the
/// arguments as the caller passed them; the final values of mutated
/// arguments are joined and written back once, after the last chunk (a
/// write-back per chunk would reach only a chunk's slice, which under an
/// outer transform is a new value rather than a view of the argument, and
/// an unbatched argument would be mutated once per chunk).
fn vmap_chunked<X: Tree, Y: Tree>(
    f: &impl Fn(&X) -> Y,
    opts: &VmapOptions,
    x: &X,
    leaves: &Leaves,
    batch_axes: &[Option<usize>],
    size: usize,
    c: usize,
) -> Result<Y> {
    let mut parts: Vec<Leaves> = Vec::new();
    let mut chunk_finals: Vec<SmallVec<[Option<Tensor>; 4]>> = Vec::new();
    let mut chunks: Vec<Leaves> = Vec::new();
    let mut out_tree = None;
    let mut start = 0;
    while start < size {
        let end = (start + c).min(size);
        let chunk: Leaves = leaves
            .iter()
            .zip(batch_axes)
            .map(|(l, b)| match b {
                Some(d) => lax::slice_axis(l, *d, start, end),
                None => Ok(l.clone()),
            })
            .collect::<Result<_>>()?;
        let (y, outs, finals) = vmap_once(f, opts, x, &chunk, batch_axes, end - start)?;
        parts.push(outs);
        chunk_finals.push(finals);
        chunks.push(chunk);
        out_tree.get_or_insert(y);
        start = end;
    }
    // The final value of each mutated argument: the chunks' batched finals
    // (a chunk that left it alone contributes its slice) joined along the
    // argument's batch axis; an unbatched argument's from the last chunk
    // that wrote it (every chunk computes the same one).
    let mut finals: SmallVec<[Option<Tensor>; 4]> = SmallVec::new();
    for (i, b) in batch_axes.iter().enumerate() {
        if chunk_finals.iter().all(|cf| cf[i].is_none()) {
            finals.push(None);
            continue;
        }
        finals.push(Some(match b {
            Some(d) => {
                let pieces: Vec<Tensor> = chunk_finals
                    .iter()
                    .zip(&chunks)
                    .map(|(cf, ch)| cf[i].clone().unwrap_or_else(|| ch[i].clone()))
                    .collect();
                lax::concatenate(&pieces, *d)?
            }
            None => chunk_finals.iter().rev().find_map(|cf| cf[i].clone()).expect("one chunk wrote it"),
        }));
    }
    crate::functionalize::write_back("vmap", leaves, finals)?;
    let y = out_tree.expect("at least one chunk");
    let out_axes = resolve_axes("out_axes", &opts.out_axes, parts[0].len(), || y.skeleton())?;
    let joined: Vec<Tensor> = (0..parts[0].len())
        .map(|i| {
            let pieces: Vec<Tensor> = parts.iter().map(|p| p[i].clone()).collect();
            match out_axes[i] {
                None => Ok(pieces[0].clone()),
                Some(a) => {
                    let r = pieces[0].rank() as isize;
                    lax::concatenate(&pieces, if a < 0 { (a + r) as usize } else { a as usize })
                }
            }
        })
        .collect::<Result<_>>()?;
    Ok(y.with_leaves(joined))
}

/// One vmap of `f` over `leaves` (batch size `size`): the output tree, its
/// leaves with the batch axes placed, and the final value of each argument
/// `f` mutated (batch axis where the argument has it), for the caller to
/// write back.
fn vmap_once<X: Tree, Y: Tree>(
    f: &impl Fn(&X) -> Y,
    opts: &VmapOptions,
    x: &X,
    leaves: &Leaves,
    batch_axes: &[Option<usize>],
    size: usize,
) -> Result<(Y, Leaves, SmallVec<[Option<Tensor>; 4]>)> {
    let interp = BatchInterp::new(size, opts.axis_name.as_deref());
    // Unbatched arguments get fresh nodes made before the interpreter is
    // pushed: a write into one is functionalized into that node (not the
    // caller's, so every chunk starts from the caller's value) and written
    // back at the end like a batched argument's; a batched value written
    // into one is refused (it would not fit the caller's tensor).
    let mut unbatched: Leaves = Leaves::new();
    for (l, b) in leaves.iter().zip(batch_axes) {
        unbatched.push(if b.is_none() { Tensor::from_value(l.value_cloned()) } else { l.clone() });
    }
    let (y, outs, finals) = with_interpreter(&interp, || -> Result<_> {
        let mut wrapped = Leaves::new();
        for (l, b) in unbatched.iter().zip(batch_axes) {
            wrapped.push(interp.wrap(l.clone(), *b));
        }
        let y = f(&x.with_leaves(wrapped.iter().cloned()));
        let mut outs: SmallVec<[(Tensor, Option<usize>); 4]> = SmallVec::new();
        for o in y.leaves().iter() {
            outs.push(interp.unwrap(o)?);
        }
        // Arguments mutated inside f: their final values, batch dim back in place.
        let finals = crate::functionalize::mutated_finals(leaves, &wrapped, |w| interp.unwrap(w));
        Ok((y, outs, finals))
    })?;
    let mut placed_finals: SmallVec<[Option<Tensor>; 4]> = SmallVec::new();
    for (fin, b) in finals.into_iter().zip(batch_axes) {
        placed_finals.push(match (fin.transpose()?, b) {
            (Some((v, d)), Some(a)) => Some(to_position(&v, d, *a, size)?),
            (Some((v, None)), None) => Some(v),
            (Some((_, Some(_))), None) => {
                return Err(Error::batching(
                    "vmap",
                    "f writes a value that varies across the batch into an argument that is not batched \
                     (its in_axes is None); batch the argument, or write into a copy",
                ))
            }
            (None, _) => None,
        });
    }
    let out_axes = resolve_axes("out_axes", &opts.out_axes, outs.len(), || y.skeleton())?;
    let out_path = |i: usize| y.paths().swap_remove(i);
    let mut moved = Leaves::new();
    for (i, ((v, b), oa)) in outs.into_iter().zip(&out_axes).enumerate() {
        moved.push(match (b, oa) {
            (None, None) => v,
            (Some(_), None) => {
                return Err(Error::batching(
                    "vmap",
                    format!("output {} varies across the batch, but its out_axes is None", out_path(i)),
                ))
            }
            (b, Some(a)) => {
                let r = v.rank() as isize + if b.is_some() { 0 } else { 1 };
                let to = if *a < 0 { a + r } else { *a };
                if to < 0 || to >= r {
                    return Err(Error::batching(
                        "vmap",
                        format!("out_axes {a} is out of range for output {} (rank {r})", out_path(i)),
                    ));
                }
                let to = to as usize;
                let placed = to_position(&v, b, to, size)?;
                // An unbatched output is a broadcast view: materialized, so the
                // result is writable like any other.
                if b.is_some() {
                    placed
                } else {
                    lax::copy(&placed)?
                }
            }
        });
    }
    Ok((y, moved, placed_finals))
}
