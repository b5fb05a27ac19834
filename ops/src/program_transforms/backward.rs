//! The one backward pass over programs: cotangents of a program's linear
//! inputs from cotangents of its outputs, equations backwards, each
//! primitive's own transpose rule, contributions accumulated, zero
//! cotangents skipped. Reverse mode (`linearize`'s pullback, the
//! per-example norms and clipped sums) and the control-flow rules (the
//! transposes of `cond`, `checkpoint` and `scan` bodies) all call
//! [`transpose`], so a fix to reverse mode is made here once.
//!
//! Its options are the callers' differences, stated rather than copied:
//! - `known`: per input, its value where it is not linear (a body's primal
//!   operands). Equations with no linear operand are then evaluated first,
//!   those whose results the linear ones read (the rest is dead code):
//!   this is where a checkpointed body recomputes its forward pass. `None`
//!   where every input is linear (linearize's programs, whose primal work
//!   ran eagerly and whose residuals are constants): every equation is then
//!   transposed as it stands.
//! - the seed: a cotangent may be [`Ct::Ones`], `grad`'s ones not made
//!   yet, which pass through sums, reshapes, transposes and adds and turn
//!   a product's transpose `1 * c` into `c` itself.
//! - a [`Hook`] sees the equations that read a watched variable before
//!   they are transposed and may take their cotangents itself: ghost
//!   clipping factors a weight's cotangent there, and `scan` defers the
//!   products reading a weight to sum them over every step at once.

use crate::error::Result;
use crate::interp::bind;
use crate::lax;
use crate::prim::{transpose_rule, LinearArg};
use crate::prims::OnesTranspose;
use crate::program::{Atom, Eqn, Program};
use crate::tensor::{Aval, Tensor};
use smallvec::SmallVec;

/// A cotangent in the backward pass.
#[derive(Clone)]
pub enum Ct {
    /// Ones shaped like the variable, not made yet: `grad`'s seed. It passes
    /// through sums, reshapes, transposes and adds, and turns a
    /// product's transpose `1 * c` into `c` itself, so the seed costs no
    /// kernels and no broadcast under `vmap`.
    Ones,
    /// A value. `borrowed` when it may be a tensor from outside the backward
    /// pass (a residual or a captured tensor, taken by the `1 * c`
    /// shortcut, or a view of one): it is copied before it is returned, so
    /// that no gradient aliases a tensor the caller can write to.
    Val(Tensor, bool),
}

impl Ct {
    /// The cotangent as a tensor shaped like `aval`.
    fn make(self, aval: &Aval) -> Result<(Tensor, bool)> {
        match self {
            Ct::Ones => Ok((lax::full(&aval.shape, 1.0, aval.dtype, aval.device)?, false)),
            Ct::Val(t, borrowed) => Ok((t, borrowed)),
        }
    }
}

/// Sees the equations that read a watched variable (a parameter's tangent,
/// a loop's weight) before they are transposed.
pub trait Hook {
    /// Per variable of `program`, the id under which the hook watches it
    /// (at least the inputs): `take` is offered the equations reading one.
    fn watch(&mut self, program: &Program) -> Vec<Option<usize>>;
    /// Given the equation's output cotangents and operands (known operands
    /// as constants), and for each operand the id it is watched under (if
    /// it is): `true` if the hook took the equation's cotangents itself, so
    /// that it is not transposed.
    fn take(&mut self, eqn: &Eqn, cts: &[Option<Tensor>], args: &[LinearArg], inputs: &[Option<usize>])
        -> Result<bool>;
}

/// Adds a cotangent contribution into the slot of a variable of `aval`.
fn accumulate(slot: &mut Option<Ct>, ct: Ct, aval: &Aval) -> Result<()> {
    *slot = Some(match slot.take() {
        None => ct,
        Some(old) => {
            let (a, b) = (old.make(aval)?.0, ct.make(aval)?.0);
            Ct::Val(lax::add(&a, &b)?, false)
        }
    });
    Ok(())
}

/// The input cotangents of an equation whose one output cotangent is
/// [`Ct::Ones`], where no kernel is needed; `None` otherwise.
fn transpose_ones(eqn: &Eqn, args: &[LinearArg], out: &Aval) -> Option<SmallVec<[Option<Ct>; 4]>> {
    let linear_ones = || args.iter().map(|a| a.is_linear().then_some(Ct::Ones)).collect();
    match eqn.prim.ones_transpose() {
        OnesTranspose::Ones => Some(linear_ones()),
        // `1 * c` is `c` when `c` is shaped and typed like the product.
        OnesTranspose::Constant => {
            let c = args.iter().find_map(LinearArg::constant)?;
            let same = c.with_aval(|a| a.shape == &out.shape && a.dtype == out.dtype);
            same.then(|| args.iter().map(|a| a.is_linear().then(|| Ct::Val(c.clone(), true))).collect())
        }
        OnesTranspose::Unknown => None,
    }
}

/// Which variables are linear (depend on a linear input) and which
/// equations have a linear operand, given which inputs are known.
struct Linearity {
    var: Vec<bool>,
    eqn: Vec<bool>,
}

impl Linearity {
    fn of(p: &Program, known: &[Option<Tensor>]) -> Linearity {
        let mut var = vec![false; p.avals.len()];
        for (v, k) in p.inputs.iter().zip(known) {
            var[v.0 as usize] = k.is_none();
        }
        let mut eqn = vec![false; p.eqns.len()];
        for (i, e) in p.eqns.iter().enumerate() {
            if e.inputs.iter().any(|a| matches!(a, Atom::Var(v) if var[v.0 as usize])) {
                eqn[i] = true;
                for o in &e.outputs {
                    var[o.0 as usize] = true;
                }
            }
        }
        Linearity { var, eqn }
    }
}

/// The values of the known variables that the linear equations read (and
/// what those need), evaluated from the known inputs.
fn known_values(p: &Program, known: &[Option<Tensor>], lin: &Linearity) -> Result<Vec<Option<Tensor>>> {
    let n = p.avals.len();
    let mut val: Vec<Option<Tensor>> = vec![None; n];
    for (v, k) in p.inputs.iter().zip(known) {
        val[v.0 as usize] = k.clone();
    }
    let mut needed = vec![false; n];
    for (i, e) in p.eqns.iter().enumerate().rev() {
        if lin.eqn[i] || e.outputs.iter().any(|o| needed[o.0 as usize]) {
            for a in &e.inputs {
                if let Atom::Var(v) = a {
                    if !lin.var[v.0 as usize] {
                        needed[v.0 as usize] = true;
                    }
                }
            }
        }
    }
    for (i, e) in p.eqns.iter().enumerate() {
        if lin.eqn[i] || !e.outputs.iter().any(|o| needed[o.0 as usize]) {
            continue;
        }
        let ins: SmallVec<[Tensor; 4]> = e
            .inputs
            .iter()
            .map(|a| match a {
                Atom::Var(v) => val[v.0 as usize].clone().expect("known before use"),
                Atom::Const(c) => p.consts[*c].clone(),
            })
            .collect();
        for (o, t) in e.outputs.iter().zip(bind(&e.prim, &ins)?) {
            val[o.0 as usize] = Some(t);
        }
    }
    Ok(val)
}

/// Transposes `program` (see the module docs): the cotangents of its
/// linear inputs (`None` where zero, and for the inputs `known` gives
/// values), from `cts`, the cotangents of its outputs (`None`: zero).
///
/// # Errors
/// A transpose rule's error (an equation that is not linear in its
/// linear operands), or the hook's.
pub fn transpose(
    program: &Program,
    known: Option<&[Option<Tensor>]>,
    cts: &[Option<Ct>],
    mut hook: Option<&mut dyn Hook>,
) -> Result<SmallVec<[Option<Tensor>; 4]>> {
    let lin = known.map(|k| Linearity::of(program, k));
    let is_lin_var = |v: usize| lin.as_ref().is_none_or(|l| l.var[v]);
    let val = match (known, &lin) {
        (Some(k), Some(l)) => known_values(program, k, l)?,
        _ => Vec::new(),
    };
    // Inline for the small programs of tiny transformed calls.
    let mut env: SmallVec<[Option<Ct>; 32]> = SmallVec::new();
    env.resize(program.avals.len(), None);
    // The variables the hook watches.
    let input_of: Vec<Option<usize>> = match hook.as_deref_mut() {
        Some(h) => h.watch(program),
        None => Vec::new(),
    };
    for (atom, ct) in program.outputs.iter().zip(cts) {
        if let (Atom::Var(v), Some(ct)) = (atom, ct) {
            if is_lin_var(v.0 as usize) {
                accumulate(&mut env[v.0 as usize], ct.clone(), program.aval(*v))?;
            }
        }
    }
    for (i, eqn) in program.eqns.iter().enumerate().rev() {
        if lin.as_ref().is_some_and(|l| !l.eqn[i]) || eqn.outputs.iter().all(|v| env[v.0 as usize].is_none()) {
            continue;
        }
        let mut args: SmallVec<[LinearArg; 4]> = SmallVec::new();
        for a in &eqn.inputs {
            args.push(match a {
                Atom::Var(v) if is_lin_var(v.0 as usize) => LinearArg::Linear(program.aval(*v)),
                Atom::Var(v) => LinearArg::Const(val[v.0 as usize].as_ref().expect("known before use")),
                Atom::Const(i) => LinearArg::Const(&program.consts[*i]),
            });
        }
        let inputs: SmallVec<[Option<usize>; 4]> = match hook {
            Some(_) => eqn
                .inputs
                .iter()
                .map(|a| match a {
                    Atom::Var(v) if is_lin_var(v.0 as usize) => input_of.get(v.0 as usize).copied().flatten(),
                    _ => None,
                })
                .collect(),
            None => SmallVec::new(),
        };
        let hooked = inputs.iter().any(Option::is_some);
        let shortcut = match eqn.outputs[..] {
            [v] if !hooked && matches!(env[v.0 as usize], Some(Ct::Ones)) => {
                transpose_ones(eqn, &args, program.aval(v))
            }
            _ => None,
        };
        let cts_in: SmallVec<[Option<Ct>; 4]> = match shortcut {
            Some(cts_in) => {
                env[eqn.outputs[0].0 as usize] = None;
                cts_in
            }
            None => {
                // The output cotangents as tensors: one (nearly every
                // equation) without a list.
                let mut borrowed = false;
                let mut outs: SmallVec<[Option<Tensor>; 2]> = SmallVec::new();
                for v in &eqn.outputs {
                    outs.push(match env[v.0 as usize].take() {
                        None => None,
                        Some(ct) => {
                            let (t, b) = ct.make(program.aval(*v))?;
                            borrowed |= b;
                            Some(t)
                        }
                    });
                }
                if let (true, Some(h)) = (hooked, hook.as_deref_mut()) {
                    if h.take(eqn, &outs, &args, &inputs)? {
                        continue;
                    }
                }
                let borrowed = borrowed && !eqn.prim.transpose_is_fresh();
                transpose_rule(&eqn.prim, &outs, &args)?.into_iter().map(|c| c.map(|t| Ct::Val(t, borrowed))).collect()
            }
        };
        for (a, ct) in eqn.inputs.iter().zip(cts_in) {
            if let (Atom::Var(v), Some(ct)) = (a, ct) {
                if is_lin_var(v.0 as usize) {
                    accumulate(&mut env[v.0 as usize], ct, program.aval(*v))?;
                }
            }
        }
    }
    let mut out = SmallVec::new();
    for v in &program.inputs {
        out.push(match env[v.0 as usize].take() {
            Some(ct) if is_lin_var(v.0 as usize) => {
                let (t, borrowed) = ct.make(program.aval(*v))?;
                Some(if borrowed { lax::copy(&t)? } else { t })
            }
            _ => None,
        });
    }
    Ok(out)
}
