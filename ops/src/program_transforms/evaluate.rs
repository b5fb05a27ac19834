//! A program evaluated under a transform's rules, for the bodies of the
//! control-flow primitives: its JVP, its batched form and its transpose,
//! equation by equation with each primitive's own rule at the current
//! level (no interpreter is pushed). Staged with
//! [`crate::staging::stage`], each gives the transformed body that a rule
//! binds when control flow must stay control flow.

use super::backward::{self, Ct};
use crate::error::{Error, Result};
use crate::interp::bind;
use crate::lax;
use crate::prim::{batch_rule, jvp_rule};
use crate::prims::batching::{to_position, BatchAxis};
use crate::program::{Atom, Program};
use crate::staging::stage;
use crate::tensor::{Aval, Tensor};
use smallvec::SmallVec;

/// Zeros where a tangent or cotangent is a symbolic zero.
pub(crate) fn instantiate(t: Option<Tensor>, aval: &Aval) -> Result<Tensor> {
    match t {
        Some(t) => Ok(t),
        None => lax::zeros_aval(aval),
    }
}

/// The primal outputs and their tangents (`None`: zero) of `p` at
/// `primals` along `tangents`.
pub(crate) fn jvp_eval(
    p: &Program,
    primals: &[Tensor],
    tangents: &[Option<Tensor>],
) -> Result<(Vec<Tensor>, Vec<Option<Tensor>>)> {
    jvp_eval_with(p, primals, tangents, &mut |_, _| None)
}

/// [`jvp_eval`] where `known(i, outs)` may replace the primal outputs of
/// equation `i` (values saved by a forward pass; the recomputed ones are
/// then dead code).
pub(crate) fn jvp_eval_with(
    p: &Program,
    primals: &[Tensor],
    tangents: &[Option<Tensor>],
    known: &mut dyn FnMut(usize, &[Tensor]) -> Option<Vec<Tensor>>,
) -> Result<(Vec<Tensor>, Vec<Option<Tensor>>)> {
    let n = p.avals.len();
    let mut env_p: Vec<Option<Tensor>> = vec![None; n];
    let mut env_t: Vec<Option<Tensor>> = vec![None; n];
    for ((v, x), t) in p.inputs.iter().zip(primals).zip(tangents) {
        env_p[v.0 as usize] = Some(x.clone());
        env_t[v.0 as usize] = t.clone();
    }
    let read = |env_p: &[Option<Tensor>], env_t: &[Option<Tensor>], a: &Atom| -> (Tensor, Option<Tensor>) {
        match a {
            Atom::Var(v) => (env_p[v.0 as usize].clone().expect("defined before use"), env_t[v.0 as usize].clone()),
            Atom::Const(i) => (p.consts[*i].clone(), None),
        }
    };
    for (i, e) in p.eqns.iter().enumerate() {
        let mut ps: SmallVec<[Tensor; 4]> = SmallVec::new();
        let mut ts: SmallVec<[Option<Tensor>; 4]> = SmallVec::new();
        for a in &e.inputs {
            let (x, t) = read(&env_p, &env_t, a);
            ps.push(x);
            ts.push(t);
        }
        let (mut outs, touts): (Vec<Tensor>, Vec<Option<Tensor>>) = if ts.iter().all(Option::is_none) {
            let outs = bind(&e.prim, &ps)?;
            let k = outs.len();
            (outs.into_vec(), vec![None; k])
        } else {
            let (o, t) = jvp_rule(&e.prim, &ps, &ts)?;
            (o.into_vec(), t.into_vec())
        };
        if let Some(saved) = known(i, &outs) {
            outs = saved;
        }
        for ((v, o), t) in e.outputs.iter().zip(outs).zip(touts) {
            env_p[v.0 as usize] = Some(o);
            env_t[v.0 as usize] = t;
        }
    }
    let mut outs = Vec::with_capacity(p.outputs.len());
    let mut touts = Vec::with_capacity(p.outputs.len());
    for a in &p.outputs {
        let (x, t) = read(&env_p, &env_t, a);
        outs.push(x);
        touts.push(t);
    }
    Ok((outs, touts))
}

/// The outputs of `p` on batched operands `ins` (batch dims `bdims`) and
/// their batch dims, by each equation's batch rule.
pub(crate) fn batch_eval(
    p: &Program,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    axis: &BatchAxis,
) -> Result<(Vec<Tensor>, Vec<Option<usize>>)> {
    let n = p.avals.len();
    let mut env: Vec<Option<(Tensor, Option<usize>)>> = vec![None; n];
    for ((v, x), b) in p.inputs.iter().zip(ins).zip(bdims) {
        env[v.0 as usize] = Some((x.clone(), *b));
    }
    let read = |env: &[Option<(Tensor, Option<usize>)>], a: &Atom| -> (Tensor, Option<usize>) {
        match a {
            Atom::Var(v) => env[v.0 as usize].clone().expect("defined before use"),
            Atom::Const(i) => (p.consts[*i].clone(), None),
        }
    };
    for e in &p.eqns {
        let mut xs: SmallVec<[Tensor; 4]> = SmallVec::new();
        let mut bs: SmallVec<[Option<usize>; 4]> = SmallVec::new();
        for a in &e.inputs {
            let (x, b) = read(&env, a);
            xs.push(x);
            bs.push(b);
        }
        // a collective over this axis is its rule's even on unbatched
        // operands (NOTE: [named axes])
        let own_axis = || axis.name.as_ref().is_some_and(|n| e.prim.axis_names().contains(n));
        let (outs, obs): (Vec<Tensor>, Vec<Option<usize>>) = if bs.iter().all(Option::is_none) && !own_axis() {
            let outs = bind(&e.prim, &xs)?;
            let k = outs.len();
            (outs.into_vec(), vec![None; k])
        } else {
            let (o, b) = batch_rule(&e.prim, &xs, &bs, axis)?;
            (o.into_vec(), b.into_vec())
        };
        for ((v, o), b) in e.outputs.iter().zip(outs).zip(obs) {
            env[v.0 as usize] = Some((o, b));
        }
    }
    Ok(p.outputs.iter().map(|a| read(&env, a)).unzip())
}

/// `aval` with a batch axis of `size` at `bdim` (`None`: unchanged).
pub(crate) fn batched_aval(aval: &Aval, bdim: Option<usize>, size: usize) -> Aval {
    match bdim {
        None => aval.clone(),
        Some(d) => {
            let mut shape = aval.shape.clone();
            shape.0.insert(d, size);
            Aval { shape, dtype: aval.dtype, device: aval.device }
        }
    }
}

/// Which outputs [`batch_program`] batches.
#[derive(Copy, Clone, Debug)]
pub(crate) enum OutBatching<'a> {
    /// Every output (an unbatched one is broadcast).
    Every,
    /// Those that depend on a batched input; the others stay unbatched.
    AsComputed,
    /// Those marked; an output left unbatched must be unbatched.
    Given(&'a [bool]),
}

/// `p` batched: its inputs batched at `in_bdims` (size `size`), and each
/// output moved (or broadcast) to batch dim 0 where `out_batched` says so.
/// Returns the program and which outputs it batched.
pub(crate) fn batch_program(
    p: &Program,
    in_bdims: &[Option<usize>],
    axis: &BatchAxis,
    out_batched: OutBatching<'_>,
) -> Result<(Program, Vec<bool>)> {
    let size = axis.size;
    let avals: Vec<Aval> = p.in_avals().iter().zip(in_bdims).map(|(a, b)| batched_aval(a, *b, size)).collect();
    let mut which = Vec::new();
    let program = stage("vmap", &avals, |ins| {
        let (outs, bdims) = batch_eval(p, ins, in_bdims, axis)?;
        let mut r = Vec::with_capacity(outs.len());
        for (i, (o, b)) in outs.into_iter().zip(bdims).enumerate() {
            let want = match out_batched {
                OutBatching::Every => true,
                OutBatching::AsComputed => b.is_some(),
                OutBatching::Given(w) => w[i],
            };
            if want {
                r.push(to_position(&o, b, 0, size)?);
            } else if b.is_some() {
                return Err(Error::transform(
                    "vmap",
                    format!(
                        "internal error: output {i} of a control-flow body is batched where it was expected not to be"
                    ),
                ));
            } else {
                r.push(o);
            }
            which.push(want);
        }
        Ok(r)
    })?;
    Ok((program, which))
}

/// Which outputs of `p` are batched when its inputs are batched at
/// `in_bdims` (by staging its batched form).
pub(crate) fn batched_outputs(p: &Program, in_bdims: &[Option<usize>], axis: &BatchAxis) -> Result<Vec<bool>> {
    Ok(batch_program(p, in_bdims, axis, OutBatching::AsComputed)?.1)
}

/// Cotangents of the linear inputs of `p` (those whose `known` entry is
/// `None`; the others are given values) from cotangents of its outputs:
/// the one backward pass ([`backward::transpose`]), which
/// evaluates first the known equations the linear ones read (where a
/// checkpointed body recomputes its forward pass); `hook` may take
/// equations reading watched variables (a scan defers its weights'
/// products).
pub(crate) fn transpose_eval(
    p: &Program,
    known: &[Option<Tensor>],
    cts: &[Option<Tensor>],
    hook: Option<&mut dyn backward::Hook>,
) -> Result<Vec<Option<Tensor>>> {
    let cts: Vec<Option<Ct>> = cts.iter().map(|c| c.as_ref().map(|t| Ct::Val(t.clone(), false))).collect();
    Ok(backward::transpose(p, Some(known), &cts, hook)?.into_vec())
}
