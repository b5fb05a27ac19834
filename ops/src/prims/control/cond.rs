//! `cond` / `switch`: run the branch an index selects.
//!
//! Rules: where the index is known, the JVP and the transpose run the taken
//! branch alone (grad records nothing of the others). Where it is not (a
//! staged index), the JVP binds a cond of the primal branches and a cond of
//! their tangent programs, and the transpose a cond of their transposes.
//! A batched index runs every branch on the whole batch and selects, as
//! JAX does; an unbatched one keeps one cond of batched branches.

use super::{avals_of, bind_control, check_inputs, Body, ControlOp};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::lax;
use crate::prim::{Avals, Cotangents, ElementwiseOp, LinearArg};
use crate::prims::batching::to_position;
use crate::prims::batching::BatchAxis;
use crate::prims::indexing::scalar_i64;
use crate::program_transforms::evaluate::{
    batch_eval, batch_program, batched_outputs, instantiate, jvp_eval, transpose_eval, OutBatching,
};
use crate::staging::stage;
use crate::tensor::{Aval, AvalRef, Tensor};
use std::sync::Arc;
use xform_kernels::{DType, Shape};

pub(super) fn shape_rule(branches: &[Body], ins: &[AvalRef<'_>]) -> Result<Avals> {
    let op = "cond";
    let Some(first) = branches.first() else {
        return Err(Error::invalid(op, "needs at least one branch"));
    };
    let Some(index) = ins.first() else {
        return Err(Error::invalid(op, "needs an index operand"));
    };
    if index.rank() != 0 || !(index.dtype == DType::Bool || index.dtype.is_int()) {
        return Err(Error::shape(
            op,
            format!(
                "the predicate (index) must be a bool (integer) scalar, got {}{}",
                index.dtype.short_name(),
                index.shape
            ),
            &[index.shape],
        ));
    }
    for (k, b) in branches.iter().enumerate() {
        check_inputs(op, &format!("branch {k}"), b, &ins[1..])?;
    }
    let outs = first.out_avals();
    for (k, b) in branches.iter().enumerate().skip(1) {
        let other = b.out_avals();
        if other != outs {
            let show = |v: &[Aval]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ");
            return Err(Error::invalid(
                op,
                format!("branch {k} returns ({}) but branch 0 returns ({})", show(&other), show(&outs)),
            ));
        }
    }
    Ok(outs.into_iter().collect())
}

/// The branch a known index selects: bools pick branch 1 when true (as
/// `cond(pred, true_fn, false_fn)` is `switch(pred, [false_fn, true_fn])`),
/// integers are clamped to the branches (JAX's `switch`; `cond` turns an
/// integer predicate into `pred != 0` first, as JAX's).
fn pick(n: usize, index: &Array) -> Result<usize> {
    Ok(scalar_i64(index)?.clamp(0, n as i64 - 1) as usize)
}

pub(super) fn eval(branches: &[Body], ins: &[Tensor]) -> Result<Outs> {
    let index = ins[0].array().expect("lowered operands are concrete");
    let k = pick(branches.len(), &index)?;
    Ok(branches[k].eval(&ins[1..])?.into_iter().collect())
}

type Jvp = (Vec<Tensor>, Vec<Option<Tensor>>);

pub(super) fn jvp(branches: &Arc<[Body]>, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Jvp> {
    if let Some(index) = primals[0].known_array() {
        let k = pick(branches.len(), &index)?;
        return jvp_eval(&branches[k], &primals[1..], &tangents[1..]);
    }
    let outs = bind_control(ControlOp::Cond { branches: branches.clone() }, primals)?.into_vec();
    let mask: Vec<bool> = tangents[1..].iter().map(Option::is_some).collect();
    if !mask.iter().any(|&m| m) {
        let n = outs.len();
        return Ok((outs, vec![None; n]));
    }
    let mut avals = avals_of(&primals[1..]);
    let mut operands: Vec<Tensor> = primals.to_vec();
    for t in tangents[1..].iter().flatten() {
        avals.push(t.aval());
        operands.push(t.clone());
    }
    let out_avals = branches[0].out_avals();
    let tangent_branches: Vec<Body> = branches
        .iter()
        .map(|b| {
            let program = stage("jvp", &avals, |ins| {
                let (ps, rest) = ins.split_at(mask.len());
                let mut rest = rest.iter();
                let ts: Vec<Option<Tensor>> =
                    mask.iter().map(|&m| if m { rest.next().cloned() } else { None }).collect();
                let (_, touts) = jvp_eval(b, ps, &ts)?;
                touts.into_iter().zip(&out_avals).map(|(t, a)| instantiate(t, a)).collect()
            })?;
            Ok(Body::new(program))
        })
        .collect::<Result<_>>()?;
    let touts = bind_control(ControlOp::Cond { branches: tangent_branches.into() }, &operands)?;
    Ok((outs, touts.into_iter().map(Some).collect()))
}

pub(super) fn transpose(branches: &Arc<[Body]>, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let Some(index) = args[0].constant() else {
        return Err(Error::transform("cond", "the index of a cond cannot be a linear operand"));
    };
    let known_ins: Vec<Option<Tensor>> = args[1..].iter().map(|a| a.constant().cloned()).collect();
    let mut result: Cotangents = smallvec::smallvec![None];
    if let Some(i) = index.known_array() {
        let k = pick(branches.len(), &i)?;
        result.extend(transpose_eval(&branches[k], &known_ins, cts, None)?);
        return Ok(result);
    }
    let out_avals = branches[0].out_avals();
    let lin_avals: Vec<Aval> = args[1..].iter().filter(|a| a.is_linear()).map(LinearArg::aval).collect();
    let mut operands = vec![index.clone()];
    let mut avals = Vec::new();
    for c in known_ins.iter().flatten() {
        avals.push(c.aval());
        operands.push(c.clone());
    }
    for (c, a) in cts.iter().zip(&out_avals) {
        avals.push(a.clone());
        operands.push(instantiate(c.clone(), a)?);
    }
    let nknown = known_ins.iter().flatten().count();
    let transposed: Vec<Body> = branches
        .iter()
        .map(|b| {
            let program = stage("transpose", &avals, |ins| {
                let (ks, cs) = ins.split_at(nknown);
                let mut ks = ks.iter();
                let known: Vec<Option<Tensor>> =
                    known_ins.iter().map(|k| k.as_ref().and_then(|_| ks.next().cloned())).collect();
                let cs: Vec<Option<Tensor>> = cs.iter().cloned().map(Some).collect();
                let r = transpose_eval(b, &known, &cs, None)?;
                let lin: Vec<Option<Tensor>> =
                    r.into_iter().zip(&known).filter(|(_, k)| k.is_none()).map(|(c, _)| c).collect();
                lin.into_iter().zip(&lin_avals).map(|(c, a)| instantiate(c, a)).collect()
            })?;
            Ok(Body::new(program))
        })
        .collect::<Result<_>>()?;
    let mut outs = bind_control(ControlOp::Cond { branches: transposed.into() }, &operands)?.into_iter();
    for a in &args[1..] {
        result.push(if a.is_linear() { outs.next() } else { None });
    }
    Ok(result)
}

type Batched = (Vec<Tensor>, Vec<Option<usize>>);

pub(super) fn batch(
    branches: &Arc<[Body]>,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    axis: &BatchAxis,
) -> Result<Batched> {
    let size = axis.size;
    if bdims[0].is_none() {
        // One cond of batched branches, each output batched where any
        // branch batches it.
        let mut out_batched = vec![false; branches[0].outputs.len()];
        for b in branches.iter() {
            for (o, x) in out_batched.iter_mut().zip(batched_outputs(b, &bdims[1..], axis)?) {
                *o |= x;
            }
        }
        let bodies: Vec<Body> = branches
            .iter()
            .map(|b| Ok(Body::new(batch_program(b, &bdims[1..], axis, OutBatching::Given(&out_batched))?.0)))
            .collect::<Result<_>>()?;
        let outs = bind_control(ControlOp::Cond { branches: bodies.into() }, ins)?.into_vec();
        return Ok((outs, out_batched.iter().map(|&b| b.then_some(0)).collect()));
    }
    // A batched index: every branch on the whole batch, then a select per
    // branch.
    let n = branches.len() as f64;
    let index = to_position(&ins[0], bdims[0], 0, size)?;
    let index = lax::convert(&index, DType::I32)?;
    let index = lax::max(&index, &lax::full_like(&index, 0.0)?)?;
    let index = lax::min(&index, &lax::full_like(&index, n - 1.0)?)?;
    let mut result: Option<Vec<Tensor>> = None;
    for (k, b) in branches.iter().enumerate() {
        // Each branch sees its operands only where it is taken; elsewhere
        // their derivative is stopped, so that reverse mode through an
        // untaken branch (whose derivative may be NaN there) adds nothing
        // (JAX does the same; jax-ml/jax#1052).
        let hit = lax::eq(&index, &lax::full_like(&index, k as f64)?)?;
        let mut ops = Vec::with_capacity(ins.len() - 1);
        let mut obdims = Vec::with_capacity(ins.len() - 1);
        for (x, d) in ins[1..].iter().zip(&bdims[1..]) {
            if x.dtype().is_float() {
                let x = to_position(x, *d, 0, size)?;
                let mask = lax::broadcast_in_dim(&hit, &x.shape(), &[0])?;
                let frozen = crate::interp::bind1(&ElementwiseOp::StopGradient.into(), std::slice::from_ref(&x))?;
                ops.push(lax::select(&mask, &x, &frozen)?);
                obdims.push(Some(0));
            } else {
                ops.push(x.clone());
                obdims.push(*d);
            }
        }
        let (outs, obd) = batch_eval(b, &ops, &obdims, axis)?;
        let outs: Vec<Tensor> = outs.iter().zip(obd).map(|(o, d)| to_position(o, d, 0, size)).collect::<Result<_>>()?;
        result = Some(match result {
            None => outs,
            Some(prev) => prev
                .iter()
                .zip(&outs)
                .map(|(p, o)| {
                    let shape: Shape = o.shape();
                    let mask = lax::broadcast_in_dim(&hit, &shape, &[0])?;
                    lax::select(&mask, o, p)
                })
                .collect::<Result<_>>()?,
        });
    }
    let outs = result.expect("at least one branch");
    let n = outs.len();
    Ok((outs, vec![Some(0); n]))
}
