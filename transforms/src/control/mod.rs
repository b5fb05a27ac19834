//! Control flow, custom derivative rules and checkpointing over pytrees:
//! the user API of the higher-order primitives of
//! `xform_ops::prims::control` (see NOTE: [control flow] there).
//!
//! Each function stages its bodies (closures) into closed programs at the
//! abstract values of their arguments, checks that their results have the
//! types they must have (naming the branch, the carry's path or the
//! leaf), and binds one primitive. Values the closures capture become
//! operands, so a closure may use tensors of enclosing transforms freely.

mod custom;
mod loops;

pub use custom::{checkpoint, checkpoint_with, custom_jvp, custom_vjp, CustomJvp, CustomVjp, MaybeJvp, NoJvp};
pub use loops::{
    fori_loop, scan, scan_with, try_fori_loop, try_scan_with, try_while_loop_with, while_loop, while_loop_with, Bound,
    ScanOptions, ScanRemat, WhileOptions,
};

use crate::tree::Tree;
use xform_ops::prim::{Body, ControlOp, Prim};
use xform_ops::{bind, lax, staging, Aval, DType, Error, OrRaise, Program, Result, Tensor};

/// A closure staged into a closed program: the program (its captured
/// values as leading inputs), those values, and the closure's result with
/// staged leaves (its tree structure, to rebuild results with).
pub(crate) struct Staged<Y> {
    pub(crate) program: Program,
    pub(crate) consts: Vec<Tensor>,
    pub(crate) out: Y,
}

/// Stages `f` on fresh inputs of `in_avals`.
pub(crate) fn stage_fn<Y: Tree>(
    name: &'static str,
    in_avals: &[Aval],
    f: impl FnOnce(&[Tensor]) -> Y,
) -> Result<Staged<Y>> {
    let mut out = None;
    let program = staging::stage(name, in_avals, |ins| {
        let y = f(ins);
        let leaves: Vec<Tensor> = y.leaves().into_iter().collect();
        out = Some(y);
        Ok(leaves)
    })?;
    let (program, consts) = program.hoist_consts();
    Ok(Staged { program, consts, out: out.expect("the staged function returned") })
}

/// [`stage_fn`] for a function that may write to its arguments in place,
/// as eager code would: also says which arguments it wrote, and the
/// program returns their final values after `f`'s own results (the
/// written ones only, in argument order).
pub(crate) fn stage_writing<Y: Tree>(
    name: &'static str,
    in_avals: &[Aval],
    f: impl FnOnce(&[Tensor]) -> Y,
) -> Result<(Staged<Y>, Vec<bool>)> {
    let mut written = vec![false; in_avals.len()];
    let s = stage_fn(name, in_avals, |ins| {
        let y = f(ins);
        for (w, t) in written.iter_mut().zip(ins) {
            *w = t.version() > 0;
        }
        (y, ins.to_vec())
    })?;
    let Staged { mut program, consts, out: (y, _) } = s;
    keep_written_finals(&mut program, y.leaves().len(), &written);
    Ok((Staged { program, consts, out: y }, written))
}

/// Keeps a staged body's first `n_out` outputs and, of the final values of
/// its arguments that follow, those of the `written` ones.
fn keep_written_finals(program: &mut Program, n_out: usize, written: &[bool]) {
    let finals = program.outputs.split_off(n_out);
    program.outputs.extend(finals.into_iter().zip(written).filter(|(_, &w)| w).map(|(a, _)| a));
}

/// Writes the final values `finals` of the `written` arguments back into
/// the caller's `leaves` (all or nothing: `functionalize::write_back`).
pub(crate) fn write_back_written(op: &str, leaves: &[Tensor], written: &[bool], finals: Vec<Tensor>) -> Result<()> {
    let mut finals = finals.into_iter();
    let finals: Vec<Option<Tensor>> = written.iter().map(|&w| if w { finals.next() } else { None }).collect();
    crate::functionalize::write_back(op, leaves, finals)
}

/// The abstract values of a tree's leaves.
pub(crate) fn avals<X: Tree>(x: &X) -> Vec<Aval> {
    x.leaves().iter().map(Tensor::aval).collect()
}

/// Checks that `got` (from `got_name`) has the structure and leaf types of
/// `want` (`want_name`), naming the first leaf that differs.
pub(crate) fn check_same_types<Y: Tree>(op: &str, want_name: &str, want: &Y, got_name: &str, got: &Y) -> Result<()> {
    let (wp, gp) = (want.paths(), got.paths());
    if wp != gp {
        return Err(Error::invalid(
            op,
            format!(
                "{got_name} returns a tree with leaves [{}] but {want_name} returns [{}]",
                gp.join(", "),
                wp.join(", ")
            ),
        ));
    }
    check_leaf_types(op, want_name, &avals(want), got_name, &avals(got), &wp)
}

/// Checks leaf types against `want`, naming the first leaf that differs.
pub(crate) fn check_leaf_types(
    op: &str,
    want_name: &str,
    want: &[Aval],
    got_name: &str,
    got: &[Aval],
    paths: &[String],
) -> Result<()> {
    for ((w, g), path) in want.iter().zip(got).zip(paths) {
        if w.shape != g.shape || w.dtype != g.dtype {
            return Err(Error::shape(
                op,
                format!("{got_name} returns {g} at {path}, but {want_name} has {w} there"),
                &[&w.shape, &g.shape],
            ));
        }
    }
    Ok(())
}

/// Checks that `t` is a scalar of an accepted dtype.
fn check_scalar(op: &str, what: &str, t: &Tensor, int_ok: bool, bool_ok: bool) -> Result<()> {
    let a = t.aval();
    let dtype_ok = (bool_ok && a.dtype == DType::Bool) || (int_ok && a.dtype.is_int());
    if a.shape.rank() != 0 || !dtype_ok {
        let want = match (bool_ok, int_ok) {
            (true, true) => "a bool (or integer) scalar",
            (true, false) => "a bool scalar",
            _ => "an integer scalar",
        };
        let hint = if a.shape.rank() != 0 {
            "; to choose per element, use `where`/`select` (both sides computed), or vmap the cond"
        } else {
            ""
        };
        return Err(Error::shape(op, format!("{what} must be {want}, got {a}{hint}"), &[&a.shape]));
    }
    Ok(())
}

type Branch<'a, X, Y> = Box<dyn FnOnce(&X) -> Y + 'a>;

/// Stages each branch on `operands`, checks that all return one type, and
/// binds one `cond` over `[index, every branch's constants, operands]`.
fn run_branches<X: Tree, Y: Tree>(
    op: &'static str,
    index: &Tensor,
    branches: Vec<(String, Branch<'_, X, Y>)>,
    operands: &X,
) -> Result<Y> {
    let leaves = operands.leaves();
    let in_avals: Vec<Aval> = leaves.iter().map(Tensor::aval).collect();
    let mut staged: Vec<(String, Staged<Y>)> = Vec::with_capacity(branches.len());
    // A branch may write to its operands in place, as eager code would: each
    // branch also returns its operands' final values, written back to the
    // caller's tensors after the cond (as vmap and grad write back).
    let mut mutated = vec![false; leaves.len()];
    for (name, f) in branches {
        let s = stage_fn(op, &in_avals, |ins| {
            let y = f(&operands.with_leaves(ins.iter().cloned()));
            for (m, t) in mutated.iter_mut().zip(ins) {
                *m |= t.version() > 0;
            }
            (y, ins.to_vec())
        })?;
        let Staged { program, consts, out: (y, _) } = s;
        if let Some((first_name, first)) = staged.first() {
            check_same_types(op, first_name, &first.out, &name, &y)?;
        }
        staged.push((name, Staged { program, consts, out: y }));
    }
    let n_out = staged.first().map_or(0, |(_, s)| s.out.leaves().len());
    // every branch returns the final values of the operands any branch wrote
    for (_, s) in staged.iter_mut() {
        keep_written_finals(&mut s.program, n_out, &mutated);
    }
    let const_avals: Vec<Vec<Aval>> = staged.iter().map(|(_, s)| avals(&s.consts)).collect();
    let mut operands_all = vec![index.clone()];
    for (_, s) in &staged {
        operands_all.extend(s.consts.iter().cloned());
    }
    operands_all.extend(leaves.iter().cloned());
    let mut bodies = Vec::with_capacity(staged.len());
    let mut template = None;
    for (k, (_, s)) in staged.into_iter().enumerate() {
        let before: Vec<Aval> = const_avals[..k].concat();
        let after: Vec<Aval> = const_avals[k + 1..].concat();
        let n_own = s.consts.len();
        let program = s.program.insert_inputs(0, &before).insert_inputs(before.len() + n_own, &after);
        bodies.push(Body::new(program));
        template.get_or_insert(s.out);
    }
    let prim = Prim::Control(ControlOp::Cond { branches: bodies.into() });
    let mut outs = bind(&prim, &operands_all)?.into_vec();
    let finals = outs.split_off(n_out);
    write_back_written(op, &leaves, &mutated, finals)?;
    Ok(template.expect("at least one branch").with_leaves(outs))
}

/// `true_fn(operands)` if `pred` else `false_fn(operands)`, as one
/// primitive that every transform understands (JAX's `lax.cond`).
///
/// Where the predicate's value is known (eagerly, and under grad, jvp and
/// the other derivatives, as with plain Rust `if` on `item`), only the
/// taken branch runs, and reverse mode records only it. Under vmap a
/// batched predicate runs both branches and selects per example, as JAX
/// does; under trace the cond stays a cond in the program. Both branches
/// must return the same tree of the same types; the error names the leaf
/// that differs.
///
/// `pred` is a bool scalar (an integer is accepted as `pred != 0`, as in
/// JAX; a float is refused).
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{cond, grad};
/// let f = |x: &Tensor| cond(&x.sum().gt_scalar(0.0), |x: &Tensor| x.sin().sum(), |x: &Tensor| x.powf(2.0).sum(), x);
/// let g = grad(f)(&Tensor::from_vec(vec![1.0f64, 2.0], [2]));
/// assert!((g.to_vec::<f64>()[0] - 1f64.cos()).abs() < 1e-12);
/// ```
///
/// # Panics
/// If the predicate is not a scalar bool or integer, the branches return
/// different types, or a branch fails.
#[track_caller]
pub fn cond<X: Tree, Y: Tree>(
    pred: &Tensor,
    true_fn: impl FnOnce(&X) -> Y,
    false_fn: impl FnOnce(&X) -> Y,
    operands: &X,
) -> Y {
    try_cond(pred, true_fn, false_fn, operands).or_raise()
}

/// [`cond`] returning an error instead of panicking.
pub fn try_cond<X: Tree, Y: Tree>(
    pred: &Tensor,
    true_fn: impl FnOnce(&X) -> Y,
    false_fn: impl FnOnce(&X) -> Y,
    operands: &X,
) -> Result<Y> {
    check_scalar("cond", "the predicate", pred, true, true)?;
    // An integer predicate is `pred != 0`, as JAX's.
    let nonzero;
    let pred = if pred.dtype().is_int() {
        nonzero = lax::ne(pred, &lax::full_like(pred, 0.0)?)?;
        &nonzero
    } else {
        pred
    };
    // cond(pred, t, f) is switch(pred, [f, t]).
    let branches: Vec<(String, Branch<'_, X, Y>)> =
        vec![("false_fn".into(), Box::new(false_fn)), ("true_fn".into(), Box::new(true_fn))];
    run_branches("cond", pred, branches, operands)
}

/// `branches[index](operands)`, with `index` clamped to the branches (JAX's
/// `lax.switch`); see [`cond`] for how transforms treat it.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::switch;
/// let x = Tensor::from_vec(vec![2.0f32], [1]);
/// let double = |x: &Tensor| x * 2.0;
/// let square = |x: &Tensor| x * x;
/// let y = switch(&Tensor::scalar(1i32), &[&double, &square], &x);
/// assert_eq!(y.to_vec::<f32>(), vec![4.0]);
/// ```
///
/// # Panics
/// If `index` is not an integer scalar, there are no branches, the
/// branches return different types, or a branch fails.
#[track_caller]
pub fn switch<X: Tree, Y: Tree>(index: &Tensor, branches: &[&dyn Fn(&X) -> Y], operands: &X) -> Y {
    try_switch(index, branches, operands).or_raise()
}

/// [`switch`] returning an error instead of panicking.
pub fn try_switch<X: Tree, Y: Tree>(index: &Tensor, branches: &[&dyn Fn(&X) -> Y], operands: &X) -> Result<Y> {
    check_scalar("switch", "the index", index, true, false)?;
    if branches.is_empty() {
        return Err(Error::invalid("switch", "needs at least one branch"));
    }
    let boxed: Vec<(String, Branch<'_, X, Y>)> = branches
        .iter()
        .enumerate()
        .map(|(k, f)| (format!("branch {k}"), Box::new(move |x: &X| f(x)) as Branch<'_, X, Y>))
        .collect();
    run_branches("switch", index, boxed, operands)
}
