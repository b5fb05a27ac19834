//! `functionalize`, and writing mutated arguments back to the caller.
//!
//! Under any transform, in-place ops are functionalized (see NOTE:
//! [functionalization] in xform-ops): they replace values instead of
//! writing storage. `functionalize(f)` runs `f` under a transparent
//! interpreter, so every mutation inside `f` is functionalized, and writes
//! the final values of the arguments `f` mutated back into them at the end,
//! as `torch.func.functionalize` does. Staged with `trace`, the result is a
//! program without mutation.

use crate::tree::Tree;
use smallvec::SmallVec;
use xform_ops::interp::{bind_at, parent_of, with_interpreter};
use xform_ops::prim::Prim;
use xform_ops::{lax, Interpreter, Level, OrRaise, Outs, Result, Tag, Tensor, TracerData, Value};

/// Options of [`functionalize_with`].
#[derive(Clone, Debug, Default)]
pub struct FunctionalizeOptions {
    /// Also remove aliasing: every view op's result is copied into fresh
    /// storage (its program shows a `copy` after each view op), so no result
    /// shares memory with an argument or with another result.
    pub remove_views: bool,
}

/// The transparent interpreter: it owns no tracers; its presence on the
/// stack is what makes in-place ops functionalize. With `remove_views`, it
/// owns wrapped values and copies the result of every view op.
struct FunctionalizeInterp {
    tag: Tag,
    remove_views: bool,
}

impl FunctionalizeInterp {
    fn wrap(&self, val: Tensor) -> Tensor {
        if !self.remove_views {
            // A fresh node over the same value: mutations replace it, not the
            // caller's tensor.
            return Tensor::from_value(val.value_cloned());
        }
        let aval = val.aval();
        Tensor::from_tracer(xform_ops::Tracer { tag: self.tag, aval, data: TracerData::Functional { value: val } })
    }

    fn unwrap(&self, t: &Tensor) -> Result<Tensor> {
        if let Value::Tracer(tr) = &*t.value() {
            if tr.tag.id == self.tag.id {
                let TracerData::Functional { value } = &tr.data else { return Err(tr.wrong_data("functional")) };
                return Ok(value.clone());
            }
        }
        Ok(t.clone())
    }
}

impl Interpreter for FunctionalizeInterp {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn describe(&self) -> Option<String> {
        Some("functionalize".into())
    }

    fn process(&self, level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
        let ins: Vec<Tensor> = inputs.iter().map(|t| self.unwrap(t)).collect::<Result<_>>()?;
        let outs = bind_at(parent_of(level), prim, &ins)?;
        // Views, stop_gradient and detach return their operand's storage
        // eagerly: aliases.
        let copy = prim.aliases_operand();
        outs.into_iter()
            .map(|o| {
                let o = if copy { xform_ops::interp::run_at_parent(level, || lax::copy(&o))? } else { o };
                Ok(self.wrap(o))
            })
            .collect()
    }
}

/// `f` with every mutation functionalized: the same results, and the same
/// final values of the arguments (written back into them at the end), but
/// no in-place op runs inside. `trace(functionalize(f), &x)` shows a
/// program without mutation.
///
/// ```
/// use xform_ops::{s, DType, Tensor};
/// use xform_transforms::{functionalize, trace};
///
/// let f = |x: &Tensor| {
///     let buf = Tensor::zeros([3], DType::F32);
///     buf.slice(s![1..]).copy_(&x.slice(s![..2]).sin());
///     x.mul_scalar_(2.0); // mutates the argument
///     buf
/// };
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
/// let y = functionalize(f)(&x);
/// assert_eq!(x.to_vec::<f32>(), vec![2.0, 4.0, 6.0]); // written back
/// assert_eq!(y.to_vec::<f32>()[0], 0.0);
/// println!("{}", trace(functionalize(f), &x));
/// ```
pub fn functionalize<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y {
    functionalize_with(f, FunctionalizeOptions::default())
}

/// [`functionalize`] with options.
pub fn functionalize_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: FunctionalizeOptions) -> impl Fn(&X) -> Y {
    move |x: &X| {
        let interp = FunctionalizeInterp { tag: Tag::fresh("functionalize"), remove_views: opts.remove_views };
        let leaves = x.leaves();
        let (y, outs, finals) = with_interpreter(&interp, || {
            let wrapped: Vec<Tensor> = leaves.iter().map(|l| interp.wrap(l.clone())).collect();
            let y = f(&x.with_leaves(wrapped.clone()));
            let outs: Vec<Tensor> = y.leaves().iter().map(|o| interp.unwrap(o).or_raise()).collect();
            let finals = mutated_finals(&leaves, &wrapped, |w| interp.unwrap(w).or_raise());
            (y, outs, finals)
        });
        write_back("functionalize", &leaves, finals).or_raise();
        y.with_leaves(outs)
    }
}

/// The final value (through `unwrap`) of each argument `f` mutated: a
/// wrapped leaf whose version moved. A leaf passed through unwrapped is the
/// caller's own tensor, which already holds its final value.
pub(crate) fn mutated_finals<T>(
    originals: &[Tensor],
    wrapped: &[Tensor],
    unwrap: impl Fn(&Tensor) -> T,
) -> SmallVec<[Option<T>; 4]> {
    let mut finals = SmallVec::new();
    for (w, o) in wrapped.iter().zip(originals) {
        finals.push((!w.same_node(o) && w.version() > 0).then(|| unwrap(w)));
    }
    finals
}

/// Refuses a call whose function writes in place to an argument leaf
/// (`mutated`) that overlaps another leaf in memory (`f(&(x.clone(), x))`,
/// an argument and a slice of it). Under a transform (staged, batched,
/// differentiated, functionalized) each leaf is its own value, so the
/// write would not be seen through the other leaf as it is eagerly; JAX's
/// arrays never alias, and xform says so rather than return other numbers
/// than eager execution. Views of one buffer
/// that share no element (two columns of a matrix) are fine.
pub(crate) fn check_unaliased_writes(
    op: &str,
    leaves: &[Tensor],
    mutated: impl IntoIterator<Item = usize>,
) -> Result<()> {
    let mut mutated = mutated.into_iter().peekable();
    if mutated.peek().is_none() {
        return Ok(());
    }
    // each leaf's array once (a tracer, or an empty one, overlaps nothing)
    let arrays: SmallVec<[Option<xform_ops::Array>; 8]> =
        leaves.iter().map(|l| l.array().filter(|a| a.layout.numel() > 0)).collect();
    for i in mutated {
        let Some(a) = &arrays[i] else { continue };
        for (j, b) in arrays.iter().enumerate() {
            let Some(b) = b.as_ref().filter(|b| j != i && b.shares_storage(a)) else { continue };
            if !layouts_overlap(&a.layout, &b.layout) {
                continue;
            }
            return Err(xform_ops::Error::invalid(
                op,
                format!(
                    "the function writes in place to argument leaf {i} ({} {}), which overlaps argument leaf {j} \
                     ({} {}) in memory; {op} treats each argument as its own value, so leaf {j} would not see \
                     the write as it does eagerly: pass a copy (`Tensor::copy`) as one of them",
                    a.dtype.name(),
                    a.shape(),
                    b.dtype.name(),
                    b.shape()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether two non-empty layouts of one storage reach a common element:
/// disjoint spans cannot; overlapping spans are checked element by element
/// (sorted offsets, merged), which only interleaved views need.
fn layouts_overlap(a: &xform_ops::Layout, b: &xform_ops::Layout) -> bool {
    let (sa, sb) = (a.storage_span(), b.storage_span());
    if sa.end <= sb.start || sb.end <= sa.start {
        return false;
    }
    let offsets = |l: &xform_ops::Layout| {
        let mut v: Vec<usize> = vec![l.offset];
        for (&n, &s) in l.shape.iter().zip(l.strides.iter()) {
            v = v.iter().flat_map(|&o| (0..n).map(move |k| (o as isize + k as isize * s) as usize)).collect();
        }
        v.sort_unstable();
        v
    };
    let (oa, ob) = (offsets(a), offsets(b));
    let (mut p, mut q) = (0, 0);
    while p < oa.len() && q < ob.len() {
        match oa[p].cmp(&ob[q]) {
            std::cmp::Ordering::Equal => return true,
            std::cmp::Ordering::Less => p += 1,
            std::cmp::Ordering::Greater => q += 1,
        }
    }
    false
}

/// Copies the final values of mutated arguments (`Some`) into the caller's
/// tensors, at the caller's level, all or nothing: every write is checked
/// before the first is made, and a final value that shares storage with an
/// argument is copied first, so that no write sees another (each argument
/// gets the value `f` left in it, as eagerly). A mutated argument that
/// overlaps another argument is refused first ([`check_unaliased_writes`]).
pub(crate) fn write_back(
    op: &str,
    originals: &[Tensor],
    finals: impl IntoIterator<Item = Option<Tensor>>,
) -> Result<()> {
    let mut pending: SmallVec<[(&Tensor, Tensor); 4]> = SmallVec::new();
    let mut written: SmallVec<[usize; 4]> = SmallVec::new();
    for (i, (orig, fin)) in originals.iter().zip(finals).enumerate() {
        if let Some(v) = fin {
            pending.push((orig, v));
            written.push(i);
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    // every transform that writes arguments back saw each one as its own
    // value
    check_unaliased_writes(op, originals, written)?;
    let targets: SmallVec<[xform_ops::Array; 4]> = pending.iter().filter_map(|(o, _)| o.array()).collect();
    for (_, v) in pending.iter_mut() {
        if let Some(a) = v.array() {
            if targets.iter().any(|t| t.shares_storage(&a)) {
                *v = Tensor::from_array(a.contiguous_copy()?);
            }
        }
    }
    for (orig, v) in &pending {
        xform_ops::methods::check_write(op, orig, v)?;
    }
    for (orig, v) in &pending {
        orig.try_copy_(v).map_err(|e| e.named(op))?;
    }
    Ok(())
}
