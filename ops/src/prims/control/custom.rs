//! `custom_jvp` and `custom_vjp`: functions whose derivative rules the user
//! gives.
//!
//! custom_jvp: the JVP rule evaluates the user's rule program (at the
//! parent level, so outer transforms differentiate or batch it like any
//! function); under reverse mode its tangent part is recorded and
//! transposed as usual, so the rule must be linear in the tangents, as in
//! JAX.
//!
//! custom_vjp: the JVP rule runs `fwd` and binds `custom_vjp_tangent`, the
//! linear map of tangents whose transpose is `bwd`. Reverse mode only
//! records and transposes it; evaluating it forwards (forward mode: `jvp`,
//! `jacfwd`) needs a JVP rule, else it is an error, as JAX's "can't apply
//! forward-mode autodiff (jvp) to a custom_vjp function".

use super::{bind_control, cat, cat_refs, check_inputs, move_to_front, Body, ControlOp};
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::lax;
use crate::prim::{Avals, Cotangents, LinearArg};
use crate::prims::batching::to_position;
use crate::prims::batching::BatchAxis;
use crate::prims::Family;
use crate::program_transforms::evaluate::{batch_eval, batch_program, instantiate, jvp_eval, OutBatching};
use crate::staging::stage;
use crate::tensor::{Aval, AvalRef, Tensor};

/// The operand slices of a `custom_vjp_tangent`: `[bwd_consts, jvp_consts,
/// residuals, xs, tangents]`.
fn call_split<T>(ins: &[T], nb: usize, nj: usize, nr: usize) -> Result<(&[T], &[T], &[T], &[T], &[T])> {
    let rest = ins.len().checked_sub(nb + nj + nr).filter(|n| n % 2 == 0).ok_or_else(|| {
        Error::invalid("custom_vjp_tangent", format!("{} operands do not split into its layout", ins.len()))
    })?;
    let nx = rest / 2;
    let (b, r0) = ins.split_at(nb);
    let (j, r1) = r0.split_at(nj);
    let (r, r2) = r1.split_at(nr);
    let (x, t) = r2.split_at(nx);
    Ok((b, j, r, x, t))
}

pub(super) fn shape_rule(op: &ControlOp, ins: &[AvalRef<'_>]) -> Result<Avals> {
    match op {
        ControlOp::CustomJvp { fun, rule, fun_consts, rule_consts } => {
            let name = "custom_jvp_call";
            let (cf, rest) = ins.split_at((*fun_consts).min(ins.len()));
            let (cr, xs) = rest.split_at((*rule_consts).min(rest.len()));
            check_inputs(name, "the function", fun, &cat_refs(&[cf, xs]))?;
            check_inputs(name, "the JVP rule", rule, &cat_refs(&[cr, xs, xs]))?;
            Ok(fun.out_avals().into_iter().collect())
        }
        ControlOp::CustomVjp { fun, consts, .. } => {
            let name = "custom_vjp_call";
            let skip: usize = consts.iter().sum();
            if ins.len() < skip {
                return Err(Error::invalid(name, "fewer operands than constants"));
            }
            check_inputs(name, "the function", fun, &cat_refs(&[&ins[..consts[0]], &ins[skip..]]))?;
            Ok(fun.out_avals().into_iter().collect())
        }
        ControlOp::CustomVjpCall { bwd, bwd_consts, jvp_consts, residuals, .. } => {
            let (b, _, r, _, _) = call_split(ins, *bwd_consts, *jvp_consts, *residuals)?;
            let nin = bwd_consts + residuals;
            let avals = bwd.in_avals();
            check_inputs(
                "custom_vjp_tangent",
                "bwd's constants and residuals",
                &subprogram_inputs(bwd, nin),
                &cat_refs(&[b, r]),
            )?;
            Ok(avals[nin..].iter().cloned().collect())
        }
        _ => unreachable!("custom::shape_rule on {}", op.name()),
    }
}

/// A program whose inputs are the first `n` of `p`'s (for checking a
/// prefix of operands).
fn subprogram_inputs(p: &crate::program::Program, n: usize) -> crate::program::Program {
    let mut q = crate::program::Program::default();
    q.avals = p.avals.clone();
    q.inputs = p.inputs[..n].to_vec();
    q
}

fn forward_mode_error() -> Error {
    Error::transform(
        "custom_vjp",
        "forward-mode differentiation (jvp, jacfwd) of a custom_vjp function needs a JVP rule: its \
         derivative is given only as a VJP (bwd). Give one with CustomVjp::with_jvp, or use custom_jvp, whose rule \
         reverse mode transposes (JAX raises the same: \"can't apply forward-mode autodiff (jvp) to a custom_vjp \
         function\")",
    )
}

pub(super) fn eval(op: &ControlOp, ins: &[Tensor]) -> Result<Outs> {
    let outs = match op {
        ControlOp::CustomJvp { fun, fun_consts, rule_consts, .. } => {
            fun.eval(&cat(&[&ins[..*fun_consts], &ins[fun_consts + rule_consts..]]))?
        }
        ControlOp::CustomVjp { fun, consts, .. } => {
            let skip: usize = consts.iter().sum();
            fun.eval(&cat(&[&ins[..consts[0]], &ins[skip..]]))?
        }
        ControlOp::CustomVjpCall { jvp, bwd_consts, jvp_consts, residuals, .. } => {
            let (_, j, _, x, t) = call_split(ins, *bwd_consts, *jvp_consts, *residuals)?;
            let Some(rule) = jvp else { return Err(forward_mode_error()) };
            let mut outs = rule.eval(&cat(&[j, x, t]))?;
            outs.split_off(outs.len() / 2)
        }
        _ => unreachable!("custom::eval on {}", op.name()),
    };
    Ok(outs.into_iter().collect())
}

fn closed_over_error(what: &str) -> Error {
    Error::transform(
        what,
        format!(
            "a {what} function is differentiated with respect to a value its function or rules capture \
             (a closure over a traced value). Pass that value as an argument instead, so the rule sees its \
             tangent (JAX refuses the same)"
        ),
    )
}

/// Tangents for every input, zeros where symbolic.
fn all_tangents(xs: &[Tensor], ts: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    xs.iter().zip(ts).map(|(x, t)| lax::instantiate(t, x)).collect()
}

type Jvp = (Vec<Tensor>, Vec<Option<Tensor>>);

pub(super) fn jvp(op: &ControlOp, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Jvp> {
    match op {
        ControlOp::CustomJvp { rule, fun_consts, rule_consts, .. } => {
            let nc = fun_consts + rule_consts;
            if tangents[..nc].iter().any(Option::is_some) {
                return Err(closed_over_error("custom_jvp"));
            }
            let xs = &primals[nc..];
            let ts = all_tangents(xs, &tangents[nc..])?;
            let mut outs = rule.eval(&cat(&[&primals[*fun_consts..nc], xs, &ts]))?;
            let touts = outs.split_off(outs.len() / 2);
            Ok((outs, touts.into_iter().map(Some).collect()))
        }
        ControlOp::CustomVjp { fun, fwd, bwd, jvp, consts } => {
            let nc: usize = consts.iter().sum();
            if tangents[..nc].iter().any(Option::is_some) {
                return Err(closed_over_error("custom_vjp"));
            }
            let xs = &primals[nc..];
            let ny = fun.outputs.len();
            let mut outs = fwd.eval(&cat(&[&primals[consts[0]..consts[0] + consts[1]], xs]))?;
            let residuals = outs.split_off(ny);
            let ts = all_tangents(xs, &tangents[nc..])?;
            let (b0, j0) = (consts[0] + consts[1], consts[0] + consts[1] + consts[2]);
            let call = ControlOp::CustomVjpCall {
                bwd: bwd.clone(),
                jvp: jvp.clone(),
                bwd_consts: consts[2],
                jvp_consts: consts[3],
                residuals: residuals.len(),
            };
            let operands = cat(&[&primals[b0..j0], &primals[j0..nc], &residuals, xs, &ts]);
            let touts = bind_control(call, &operands)?;
            Ok((outs, touts.into_iter().map(Some).collect()))
        }
        ControlOp::CustomVjpCall { jvp, bwd_consts, jvp_consts, residuals, .. } => {
            let Some(rule) = jvp else { return Err(forward_mode_error()) };
            let (_, j, _, x, t) = call_split(primals, *bwd_consts, *jvp_consts, *residuals)?;
            let (_, tj, _, tx, tt) = call_split(tangents, *bwd_consts, *jvp_consts, *residuals)?;
            let (outs, touts) = jvp_eval(rule, &cat(&[j, x, t]), &[tj, tx, tt].concat())?;
            let half = outs.len() / 2;
            Ok((outs[half..].to_vec(), touts[half..].to_vec()))
        }
        _ => unreachable!("custom::jvp on {}", op.name()),
    }
}

pub(super) fn transpose(op: &ControlOp, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    match op {
        ControlOp::CustomVjpCall { bwd, bwd_consts, jvp_consts, residuals, .. } => {
            let (b, j, r, x, t) = call_split(args, *bwd_consts, *jvp_consts, *residuals)?;
            if b.iter().chain(j).chain(r).chain(x).any(LinearArg::is_linear) {
                return Err(Error::transform(
                    "custom_vjp_tangent",
                    "is linear only in its tangents, not in its residuals or primals",
                ));
            }
            let nin = bwd_consts + residuals;
            let ct_avals: Vec<Aval> = bwd.in_avals()[nin..].to_vec();
            let mut ins: Vec<Tensor> = b.iter().chain(r).map(|a| a.constant().expect("checked").clone()).collect();
            for (c, a) in cts.iter().zip(&ct_avals) {
                ins.push(instantiate(c.clone(), a)?);
            }
            let ct_x = bwd.eval(&ins)?;
            let mut result: Cotangents = (0..b.len() + j.len() + r.len() + x.len()).map(|_| None).collect();
            for (c, a) in ct_x.into_iter().zip(t) {
                result.push(a.aval().dtype.is_float().then_some(c));
            }
            Ok(result)
        }
        _ => Err(Error::transform(
            op.name(),
            format!("{} is not linear in any operand, so it cannot be transposed", op.name()),
        )),
    }
}

type Batched = (Vec<Tensor>, Vec<Option<usize>>);

/// `bwd` batched: residuals and cotangents batched at 0; each input
/// cotangent batched at 0 where its primal is (`x_batched`), else summed
/// over the batch (the primal was shared by every example).
fn batch_bwd(
    bwd: &Body,
    const_bdims: &[Option<usize>],
    nr: usize,
    x_batched: &[bool],
    axis: &BatchAxis,
) -> Result<Body> {
    let size = axis.size;
    let mut bd = const_bdims.to_vec();
    let ncts = bwd.inputs.len() - const_bdims.len() - nr;
    bd.extend(std::iter::repeat_n(Some(0), nr + ncts));
    let avals: Vec<Aval> = bwd
        .in_avals()
        .iter()
        .zip(&bd)
        .map(|(a, b)| crate::program_transforms::evaluate::batched_aval(a, *b, size))
        .collect();
    let program = stage("vmap", &avals, |ins| {
        let (outs, obd) = batch_eval(bwd, ins, &bd, axis)?;
        outs.iter()
            .zip(obd)
            .zip(x_batched)
            .map(|((o, b), &xb)| match (b, xb) {
                (b, true) => to_position(o, b, 0, size),
                (Some(d), false) => lax::reduce_sum(o, &[d]),
                (None, false) => Ok(o.clone()),
            })
            .collect()
    })?;
    Ok(Body::new(program))
}

pub(super) fn batch(op: &ControlOp, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<Batched> {
    let size = axis.size;
    match op {
        ControlOp::CustomJvp { fun, rule, fun_consts, rule_consts } => {
            let nc = fun_consts + rule_consts;
            let force = vec![false; ins.len()];
            let (ins, bd) = move_to_front(ins, bdims, &force, size)?;
            let (cf, cr, xb) = (&bd[..*fun_consts], &bd[*fun_consts..nc], &bd[nc..]);
            let (fun_b, _) = batch_program(fun, &[cf, xb].concat(), axis, OutBatching::Every)?;
            let (rule_b, _) = batch_program(rule, &[cr, xb, xb].concat(), axis, OutBatching::Every)?;
            let op = ControlOp::CustomJvp {
                fun: Body::new(fun_b),
                rule: Body::new(rule_b),
                fun_consts: *fun_consts,
                rule_consts: *rule_consts,
            };
            let outs = bind_control(op, &ins)?.into_vec();
            let n = outs.len();
            Ok((outs, vec![Some(0); n]))
        }
        ControlOp::CustomVjp { fun, fwd, bwd, jvp, consts } => {
            let nc: usize = consts.iter().sum();
            let force = vec![false; ins.len()];
            let (ins, bd) = move_to_front(ins, bdims, &force, size)?;
            let (o1, o2, o3) = (consts[0], consts[0] + consts[1], consts[0] + consts[1] + consts[2]);
            let xb = &bd[nc..];
            let x_batched: Vec<bool> = xb.iter().map(Option::is_some).collect();
            let (fun_b, _) = batch_program(fun, &[&bd[..o1], xb].concat(), axis, OutBatching::Every)?;
            let (fwd_b, _) = batch_program(fwd, &[&bd[o1..o2], xb].concat(), axis, OutBatching::Every)?;
            let nr = fwd.outputs.len() - fun.outputs.len();
            let bwd_b = batch_bwd(bwd, &bd[o2..o3], nr, &x_batched, axis)?;
            let jvp_b = match jvp {
                Some(j) => {
                    Some(Body::new(batch_program(j, &[&bd[o3..nc], xb, xb].concat(), axis, OutBatching::Every)?.0))
                }
                None => None,
            };
            let op = ControlOp::CustomVjp {
                fun: Body::new(fun_b),
                fwd: Body::new(fwd_b),
                bwd: bwd_b,
                jvp: jvp_b,
                consts: *consts,
            };
            let outs = bind_control(op, &ins)?.into_vec();
            let n = outs.len();
            Ok((outs, vec![Some(0); n]))
        }
        ControlOp::CustomVjpCall { bwd, jvp, bwd_consts, jvp_consts, residuals } => {
            let (nb, nj, nr) = (*bwd_consts, *jvp_consts, *residuals);
            // Residuals, primals and tangents batched at 0 (all or none of
            // a primal and its tangent).
            let (_, _, r_b, x_b, t_b) = call_split(bdims, nb, nj, nr)?;
            let mut force = vec![false; nb + nj];
            force.extend(r_b.iter().map(|_| true));
            let xt: Vec<bool> = x_b.iter().zip(t_b).map(|(x, t)| x.is_some() || t.is_some()).collect();
            force.extend(xt.iter().copied());
            force.extend(xt.iter().copied());
            let (ins, bd) = move_to_front(ins, bdims, &force, size)?;
            let (b_b, j_b, _, x_b, _) = call_split(&bd, nb, nj, nr)?;
            let bwd_b = batch_bwd(bwd, b_b, nr, &xt, axis)?;
            let jvp_b = match jvp {
                Some(j) => Some(Body::new(batch_program(j, &[j_b, x_b, x_b].concat(), axis, OutBatching::Every)?.0)),
                None => None,
            };
            let op = ControlOp::CustomVjpCall { bwd: bwd_b, jvp: jvp_b, bwd_consts: nb, jvp_consts: nj, residuals: nr };
            let outs = bind_control(op, &ins)?.into_vec();
            let n = outs.len();
            Ok((outs, vec![Some(0); n]))
        }
        _ => unreachable!("custom::batch on {}", op.name()),
    }
}
