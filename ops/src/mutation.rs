//! Views and in-place writes of tensors: making a view and linking it to
//! its base, and the functionalization of writes under transforms (the
//! eager write itself is `Array::write_checked`, in `backend.rs`; a view
//! re-reads its base in `Tensor::value`, in `tensor.rs`).
//!
//! NOTE: [functionalization] Outside every transform, an in-place op on a
//! concrete tensor writes its storage, so views that share it see the
//! write (PyTorch semantics). Under any transform the write is
//! functionalized instead: nothing is written in place; the target's *base*
//! gets a new value computed out of place with the view's inverse (the view
//! scattered back into the base), the base's version is bumped, and every
//! view of that base recomputes itself from the base on its next read. So
//! an unbatched buffer that receives a batched value simply becomes
//! batched, a staged program never contains a mutation, and arrays that a
//! program captured as constants are never changed behind its back. A value
//! of a transform may not be written into a tensor created outside that
//! transform (it would outlive it): that is refused with an error.

use crate::tensor::Tensor;
use std::sync::atomic::Ordering::Relaxed;

/// Applies the view primitives `ops` to `x` and links the result to `x`'s
/// base, so that functionalized writes through either are seen by both.
///
/// A reshape that cannot be a view of the (eager, or assumed contiguous)
/// layout is a copy, eagerly and under transforms alike: its result is not
/// linked.
pub(crate) fn make_view(x: &Tensor, ops: &[crate::prim::Prim]) -> crate::Result<Tensor> {
    let mut v = x.clone();
    for op in ops {
        v = crate::interp::bind1(op, std::slice::from_ref(&v))?;
    }
    let (base, mut chain, mut layout): (Tensor, crate::tensor::ViewOps, xform_kernels::Layout) = match x.view_link() {
        Some(l) => (l.base.clone(), l.ops.clone(), l.layout.clone()),
        None => (x.clone(), Default::default(), x.eager_layout()),
    };
    for op in ops {
        debug_assert!(op.aliases_operand(), "{} is not a view op", op.name());
        layout = match op.view_layout(&layout) {
            Some(l) => l,
            // a reshape the strides cannot express: a copy, not a view
            None => return Ok(Tensor::from_value(v.value_cloned())),
        };
        chain = chain.push(op.clone());
    }
    let link = crate::tensor::ViewLink {
        seen_version: std::sync::atomic::AtomicU64::new(base.version()),
        base,
        ops: chain,
        layout,
    };
    Ok(Tensor::new_view(v.value_cloned(), link))
}

/// Functionalized write: `target` (or the value) is a tracer, so instead of
/// writing storage, the target's base gets a new value through the view's
/// inverse and every view of the base re-reads it.
pub(crate) fn functionalized_write(op: &str, target: &Tensor, value: &Tensor) -> crate::Result<()> {
    crate::mutation::check_scope(op, target, value)?;
    // A broadcast constant becomes the tensor's value: give it its own
    // storage, so that it stays writable like any other tensor.
    let materialized;
    let value = match value.array() {
        Some(a) if a.layout.has_internal_overlap() => {
            materialized = Tensor::from_array(a.contiguous_copy()?);
            &materialized
        }
        _ => value,
    };
    match target.view_link().cloned() {
        None => target.replace_value(op, value.value_cloned()),
        Some(link) => {
            let new_base = scatter_into_base(op, &link.base, &link.ops.to_vec(), value)?;
            crate::mutation::check_scope(op, &link.base, &new_base)?;
            if !target.owned_here() {
                return target.replace_value(op, value.value_cloned()); // the error
            }
            link.base.replace_value(op, new_base.value_cloned())?;
            target.set_view_value(value.value_cloned()).expect("the target's own thread");
            link.seen_version.store(link.base.version(), Relaxed);
            Ok(())
        }
    }
}

/// The base with the view (reached by `ops`) replaced by `value`.
fn scatter_into_base(op: &str, base: &Tensor, ops: &[&crate::prim::Prim], value: &Tensor) -> crate::Result<Tensor> {
    use crate::lax;
    use crate::prims::ViewKind;
    // The intermediate values of the view chain, base first.
    let mut chain = vec![base.clone()];
    for p in ops {
        let next = crate::interp::bind1(p, std::slice::from_ref(chain.last().expect("nonempty")))?;
        chain.push(next);
    }
    let mut v = value.clone();
    for (p, prev) in ops.iter().zip(&chain).rev() {
        let aval = prev.aval();
        let args = [crate::prim::LinearArg::Linear(&aval)];
        // A view op is linear in its input: its transpose puts the view's
        // elements where they live in that input (zeros elsewhere).
        let place = |t: &Tensor| -> crate::Result<Tensor> {
            crate::prim::transpose_rule(p, &[Some(t.clone())], &args)?
                .into_iter()
                .next()
                .flatten()
                .ok_or_else(|| crate::Error::in_place(op, format!("{} has no transpose", p.name())))
        };
        v =
            match p.props().view {
                Some(ViewKind::Reindex) => place(&v)?,
                Some(ViewKind::Select) => {
                    // the written elements from `v`, the others from the input
                    let mask = place(&lax::full(&v.shape(), 1.0, xform_kernels::DType::Bool, v.device())?)?;
                    lax::select(&mask, &place(&v)?, prev)?
                }
                Some(ViewKind::Detach) => replace_values(prev, &v)?,
                Some(ViewKind::Broadcast) => return Err(crate::Error::in_place(
                    op,
                    "the target is a broadcast view: several of its elements share one memory location; copy it first",
                )),
                None => {
                    return Err(crate::Error::in_place(
                        op,
                        format!("{} is not a view op, so it cannot be written through", p.name()),
                    ))
                }
            };
    }
    Ok(v)
}

/// `prev` with the values of `v` and the derivative of `prev`: a write
/// through a `detach()`ed alias changes what the tensor holds, not how it
/// depends on the differentiated inputs (PyTorch's semantics). Computed as
/// `sg(v) - (sg(prev) - prev)`: the difference is `+0.0` exactly wherever
/// `prev` is finite (and `v - +0.0` is `v`, signed zeros included), and its
/// tangent is `-tangent(prev)`; where `prev` is not finite, `sg(v)` itself.
fn replace_values(prev: &Tensor, v: &Tensor) -> crate::Result<Tensor> {
    use crate::lax;
    use crate::prim::{BinaryOp, CompareOp, ElementwiseOp};
    let sg = |t: &Tensor| crate::interp::bind1(&ElementwiseOp::StopGradient.into(), std::slice::from_ref(t));
    let vs = sg(v)?;
    if !prev.dtype().is_float() {
        return Ok(vs);
    }
    let d = lax::binary(BinaryOp::Sub, &sg(prev)?, prev)?;
    let finite = lax::compare(CompareOp::Eq, &d, &lax::zeros_like(&d)?)?;
    lax::select(&finite, &lax::binary(BinaryOp::Sub, &vs, &d)?, &vs)
}

/// Refuses a functionalized write that would let a value of an inner
/// transform leak into a tensor created outside it.
pub(crate) fn check_scope(op: &str, target: &Tensor, value: &Tensor) -> crate::Result<()> {
    let Some(tag) = value.tag() else {
        return Ok(());
    };
    // A tensor of another thread was made outside every transform here.
    let birth = if target.owned_here() { target.birth() } else { 0 };
    let born = crate::interp::pushed_after(birth, tag);
    if born {
        return Err(crate::Error::in_place(
            op,
            format!(
                "this in-place op would store a value traced by {} into a tensor created outside that transform, \
                 where it would outlive the transform; copy the tensor inside the transformed function \
                 (or return the new value) instead",
                tag.name
            ),
        ));
    }
    Ok(())
}

/// Refuses a tracer whose transform has returned (an escaped tracer): an
/// in-place op would otherwise store it (a copy into a plain tensor makes
/// that tensor a dead tracer) and fail much later, far from the cause.
pub(crate) fn check_live(op: &str, t: &Tensor) -> crate::Result<()> {
    let Some(tag) = t.tag() else {
        return Ok(());
    };
    // Every pushed interpreter's epoch is after 0: this asks whether the
    // interpreter tagged `tag` is on the stack at all.
    if crate::interp::pushed_after(0, tag) {
        return Ok(());
    }
    Err(crate::interp::escaped(op, t, tag))
}

impl Tensor {
    /// The view primitives `ops` (as [`Tensor::view_of`] lists them)
    /// applied to this tensor, linked to its base as the view methods link
    /// their results (a reshape its layout cannot express is a copy, as
    /// eagerly).
    ///
    /// # Errors
    /// What the primitives raise on this tensor's shape.
    pub fn apply_views(&self, ops: &[crate::prim::Prim]) -> crate::Result<Tensor> {
        make_view(self, ops)
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;
    use std::sync::mpsc::channel;
    use std::time::Duration;
    use xform_kernels::DType;

    /// `copy_` takes its two locks in the global (address) order. A thread
    /// that holds the lower storage's lock and then takes the higher one's
    /// is the other half of a deadlock with a copy that takes them the
    /// other way round (reads its source first); in the global order the
    /// copy waits for the lower lock holding nothing, and both finish. Every
    /// thread reports over a channel with a deadline, so a deadlock fails
    /// the test instead of hanging it.
    #[test]
    fn copy_takes_its_locks_in_address_order() {
        for dir in 0..2 {
            let x = Tensor::full([4], 1.0, DType::F32).array().expect("concrete");
            let y = Tensor::full([4], 2.0, DType::F32).array().expect("concrete");
            let (lo, hi) = if x.storage_addr() < y.storage_addr() { (x, y) } else { (y, x) };
            // dir 0 copies hi into lo: the order that deadlocked
            let (src, dst) = if dir == 0 { (hi.clone(), lo.clone()) } else { (lo.clone(), hi.clone()) };
            let (tx, rx) = channel();
            let (held_tx, held_rx) = channel();
            let (lo2, hi2, tx2) = (lo.clone(), hi.clone(), tx.clone());
            std::thread::spawn(move || {
                let first = lo2.read();
                held_tx.send(()).expect("waiting");
                // time for the copy to reach its locks
                std::thread::sleep(Duration::from_millis(200));
                let second = hi2.write();
                drop((second, first));
                tx2.send("holder").expect("waiting");
            });
            held_rx.recv_timeout(Duration::from_secs(10)).expect("holder started");
            std::thread::spawn(move || {
                Tensor::from_array(dst).copy_(&Tensor::from_array(src));
                tx.send("copy").expect("waiting");
            });
            for _ in 0..2 {
                rx.recv_timeout(Duration::from_secs(10)).expect("deadlock between copy_ and a lock holder");
            }
            let (l, h) = (Tensor::from_array(lo).to_vec::<f32>(), Tensor::from_array(hi).to_vec::<f32>());
            assert_eq!(l, h, "direction {dir}: the copy happened");
        }
    }
}
