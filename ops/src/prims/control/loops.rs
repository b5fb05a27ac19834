//! `while` and `scan`.
//!
//! while: where the predicate is known (eager values, or the primals of a
//! JVP), the JVP runs the loop here, iteration by iteration, so reverse
//! mode records the iterations (or checkpoints them every `remat_every`
//! iterations: one saved carry per group, the group recomputed by the
//! backward pass). A staged or batched predicate binds a while over the
//! JVP body, which forward mode evaluates and reverse mode cannot
//! transpose (its trip count is unknown: the error says so). A batched
//! predicate runs until every example is done, finished carries masked.
//!
//! scan: the JVP splits the body (`program_transforms::partial_eval::split_program`) into a known
//! scan, which stacks the residuals the tangent body reads, and a linear
//! scan over the tangents; residuals that are loop-invariant (a constant
//! operand) are passed once, not stacked. The transpose is a reverse scan
//! of the transposed body, accumulating the constants' cotangents in its
//! carry.

use super::{avals_of, bind_control, cat, cat_refs, check_inputs, move_to_front, Body, ControlOp, RematPolicy};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::lax;
use crate::prim::{Avals, Cotangents, LinearArg};
use crate::prims::batching::to_position;
use crate::prims::batching::BatchAxis;
use crate::prims::indexing::scalar_i64;
use crate::prims::Family;
use crate::program::{Atom, Program};
use crate::program_transforms::evaluate::{
    batch_eval, batch_program, batched_outputs, instantiate, jvp_eval, transpose_eval, OutBatching,
};
use crate::staging::stage;
use crate::tensor::{Aval, AvalRef, Tensor};
use xform_kernels::{DType, Shape};

fn show(v: &[Aval]) -> String {
    v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

pub(super) fn shape_rule(op: &ControlOp, ins: &[AvalRef<'_>]) -> Result<Avals> {
    match op {
        ControlOp::While { cond, body, cond_consts, body_consts, .. } => {
            let name = "while";
            if ins.len() < cond_consts + body_consts {
                return Err(Error::invalid(name, "fewer operands than constants"));
            }
            let (cc, rest) = ins.split_at(*cond_consts);
            let (bc, carry) = rest.split_at(*body_consts);
            check_inputs(name, "cond_fun", cond, &cat_refs(&[cc, carry]))?;
            let p = cond.out_avals();
            if p.len() != 1 || p[0].dtype != DType::Bool || p[0].shape.rank() != 0 {
                return Err(Error::invalid(name, format!("cond_fun must return a bool scalar, got ({})", show(&p))));
            }
            check_inputs(name, "body_fun", body, &cat_refs(&[bc, carry]))?;
            let carry_avals: Vec<Aval> = carry.iter().map(AvalRef::to_owned).collect();
            let outs = body.out_avals();
            if outs != carry_avals {
                return Err(Error::invalid(
                    name,
                    format!("body_fun must return the carry's types ({}), got ({})", show(&carry_avals), show(&outs)),
                ));
            }
            Ok(outs.into_iter().collect())
        }
        ControlOp::Scan { body, consts, carry, length, .. } => {
            let name = "scan";
            if ins.len() < consts + carry {
                return Err(Error::invalid(name, "fewer operands than constants and carries"));
            }
            let (c, rest) = ins.split_at(*consts);
            let (k, xs) = rest.split_at(*carry);
            let mut slices: Vec<Aval> = Vec::new();
            for (i, x) in xs.iter().enumerate() {
                if x.rank() == 0 || x.shape[0] != *length {
                    return Err(Error::shape(
                        name,
                        format!("xs operand {i} must have a leading axis of the scan's length {length}"),
                        &[x.shape],
                    ));
                }
                slices.push(Aval { shape: Shape::from(x.shape.0[1..].to_vec()), dtype: x.dtype, device: x.device });
            }
            let slice_refs: Vec<AvalRef<'_>> = slices.iter().map(Aval::as_ref).collect();
            check_inputs(name, "the body", body, &cat_refs(&[c, k, &slice_refs]))?;
            let outs = body.out_avals();
            let carry_avals: Vec<Aval> = k.iter().map(AvalRef::to_owned).collect();
            if outs.len() < *carry || outs[..*carry] != carry_avals[..] {
                return Err(Error::invalid(
                    name,
                    format!(
                        "the body must return the carry's types ({}) first, got ({})",
                        show(&carry_avals),
                        show(&outs[..(*carry).min(outs.len())])
                    ),
                ));
            }
            let mut r: Avals = carry_avals.into_iter().collect();
            for y in &outs[*carry..] {
                let mut shape = y.shape.clone();
                shape.0.insert(0, *length);
                r.push(Aval { shape, dtype: y.dtype, device: y.device });
            }
            Ok(r)
        }
        _ => unreachable!("loops::shape_rule on {}", op.name()),
    }
}

fn truthy(a: &Array) -> Result<bool> {
    Ok(scalar_i64(a)? != 0)
}

/// Element `i` of `x` along its leading axis.
pub(crate) fn index0(x: &Tensor, i: usize) -> Result<Tensor> {
    let s = lax::slice_axis(x, 0, i, i + 1)?;
    lax::reshape(&s, &Shape::from(x.shape().0[1..].to_vec()))
}

/// `ys` (one per step) stacked along a new leading axis.
fn stack(ys: &[Tensor], aval: &Aval) -> Result<Tensor> {
    if ys.is_empty() {
        let mut shape = aval.shape.clone();
        shape.0.insert(0, 0);
        return lax::full(&shape, 0.0, aval.dtype, aval.device);
    }
    let parts: Vec<Tensor> = ys.iter().map(|y| lax::expand_dims(y, 0)).collect::<Result<_>>()?;
    lax::concatenate(&parts, 0)
}

/// Runs a scan with the body evaluated by `step` (at the current level).
pub(crate) fn run_scan(
    body: &Program,
    consts: &[Tensor],
    carry: &[Tensor],
    xs: &[Tensor],
    length: usize,
    reverse: bool,
) -> Result<Vec<Tensor>> {
    let ncarry = carry.len();
    let y_avals: Vec<Aval> = body.out_avals()[ncarry..].to_vec();
    let mut carry = carry.to_vec();
    let mut ys: Vec<Vec<Tensor>> = y_avals.iter().map(|_| Vec::with_capacity(length)).collect();
    for step in 0..length {
        let i = if reverse { length - 1 - step } else { step };
        let x: Vec<Tensor> = xs.iter().map(|x| index0(x, i)).collect::<Result<_>>()?;
        let mut outs = body.eval(&cat(&[consts, &carry, &x]))?;
        let y = outs.split_off(ncarry);
        carry = outs;
        for (acc, t) in ys.iter_mut().zip(y) {
            acc.push(t);
        }
    }
    let mut r = carry;
    for (mut y, a) in ys.into_iter().zip(&y_avals) {
        if reverse {
            y.reverse();
        }
        r.push(stack(&y, a)?);
    }
    Ok(r)
}

pub(super) fn eval(op: &ControlOp, ins: &[Tensor]) -> Result<Outs> {
    match op {
        ControlOp::While { cond, body, cond_consts, body_consts, .. } => {
            let (cc, rest) = ins.split_at(*cond_consts);
            let (bc, carry) = rest.split_at(*body_consts);
            let mut carry = carry.to_vec();
            loop {
                let p = cond.eval(&cat(&[cc, &carry]))?;
                if !truthy(&p[0].array().expect("concrete"))? {
                    break;
                }
                carry = body.eval(&cat(&[bc, &carry]))?;
            }
            Ok(carry.into_iter().collect())
        }
        ControlOp::Scan { body, consts, carry, length, reverse, .. } => {
            let (c, rest) = ins.split_at(*consts);
            let (k, xs) = rest.split_at(*carry);
            Ok(run_scan(body, c, k, xs, *length, *reverse)?.into_iter().collect())
        }
        _ => unreachable!("loops::eval on {}", op.name()),
    }
}

type Jvp = (Vec<Tensor>, Vec<Option<Tensor>>);

pub(super) fn jvp(op: &ControlOp, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Jvp> {
    if tangents.iter().all(Option::is_none) {
        let outs = bind_control(op.clone(), primals)?.into_vec();
        let n = outs.len();
        return Ok((outs, vec![None; n]));
    }
    match op {
        ControlOp::While { .. } => jvp_while(op, primals, tangents),
        ControlOp::Scan { .. } => jvp_scan(op, primals, tangents),
        _ => unreachable!("loops::jvp on {}", op.name()),
    }
}

/// Float carries get instantiated tangents (a loop spreads a tangent from
/// any operand to every carry); the others have none.
fn carry_tangents(carry: &[Tensor], ts: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
    carry
        .iter()
        .zip(ts)
        .map(|(c, t)| if c.dtype().is_float() { Ok(Some(lax::instantiate(t, c)?)) } else { Ok(None) })
        .collect()
}

fn jvp_while(op: &ControlOp, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Jvp> {
    let ControlOp::While { cond, body, cond_consts, body_consts, remat_every } = op else { unreachable!() };
    let (cc, rest) = primals.split_at(*cond_consts);
    let (bc, carry) = rest.split_at(*body_consts);
    let bc_t = &tangents[*cond_consts..cond_consts + body_consts];
    let mut cp = carry.to_vec();
    let mut ct = carry_tangents(carry, &tangents[cond_consts + body_consts..])?;
    loop {
        // Up to `remat_every` iterations (all, when 0) while the predicate is known.
        let mut start = (cp.clone(), ct.clone());
        let mut steps = 0usize;
        let mut unknown = false;
        let mut done = false;
        while *remat_every == 0 || steps < *remat_every {
            let pred = cond.eval(&cat(&[cc, &cp]))?.remove(0);
            let masked = match pred.known_array() {
                Some(p) if truthy(&p)? => false,
                Some(_) => {
                    done = true;
                    break;
                }
                // A predicate vmap batched: step while any example's holds,
                // the others keeping their carry.
                None => match pred.known_any() {
                    Some(true) => true,
                    Some(false) => {
                        done = true;
                        break;
                    }
                    None => {
                        unknown = true;
                        break;
                    }
                },
            };
            if masked {
                if *remat_every > 0 && steps > 0 {
                    ct = remat_group(body, bc, bc_t, &start.0, &start.1, steps)?;
                    steps = 0;
                }
                let (np, nt) = jvp_eval(body, &cat(&[bc, &cp]), &[bc_t, &ct].concat())?;
                let keep = |new: &Tensor, old: &Tensor| -> Result<Tensor> {
                    let mask = lax::broadcast_in_dim(&pred, &new.shape(), &[])?;
                    lax::select(&mask, new, old)
                };
                let mut next_t = Vec::with_capacity(ct.len());
                for ((t, old), p) in nt.iter().zip(&ct).zip(&np) {
                    next_t.push(match old {
                        Some(old) if p.dtype().is_float() => Some(keep(&lax::instantiate(t, p)?, old)?),
                        _ => None,
                    });
                }
                cp = np.iter().zip(&cp).map(|(n, o)| keep(n, o)).collect::<Result<_>>()?;
                ct = next_t;
                start = (cp.clone(), ct.clone());
                continue;
            }
            if *remat_every == 0 {
                let (p, t) = jvp_eval(body, &cat(&[bc, &cp]), &[bc_t, &ct].concat())?;
                cp = p;
                ct = t.into_iter().zip(&cp).map(|(t, p)| t.filter(|_| p.dtype().is_float())).collect();
            } else {
                cp = body.eval(&cat(&[bc, &cp]))?;
            }
            steps += 1;
        }
        if *remat_every > 0 && steps > 0 {
            ct = remat_group(body, bc, bc_t, &start.0, &start.1, steps)?;
        }
        if unknown {
            return while_of_jvp(op, cc, bc, bc_t, &cp, &ct);
        }
        if done {
            return Ok((cp, ct));
        }
    }
}

/// The tangent of `steps` iterations of `body` from `carry` as one
/// checkpoint: reverse mode saves only the group's first carry and
/// recomputes the group.
fn remat_group(
    body: &Body,
    bc: &[Tensor],
    bc_t: &[Option<Tensor>],
    carry: &[Tensor],
    carry_t: &[Option<Tensor>],
    steps: usize,
) -> Result<Vec<Option<Tensor>>> {
    let mut operands = cat(&[bc, carry]);
    let mask: Vec<bool> = bc_t.iter().chain(carry_t).map(Option::is_some).collect();
    operands.extend(bc_t.iter().chain(carry_t).flatten().cloned());
    let avals = avals_of(&operands);
    let (nb, nc) = (bc.len(), carry.len());
    let float: Vec<bool> = carry.iter().map(|c| c.dtype().is_float()).collect();
    let group = stage("jvp", &avals, |ins| {
        let (ps, ts) = ins.split_at(nb + nc);
        let mut ts = ts.iter();
        let mut tangents: Vec<Option<Tensor>> =
            mask.iter().map(|&m| if m { ts.next().cloned() } else { None }).collect();
        let (b, mut p) = (ps[..nb].to_vec(), ps[nb..].to_vec());
        for _ in 0..steps {
            let (np, nt) = jvp_eval(body, &cat(&[&b, &p]), &tangents)?;
            p = np;
            tangents.truncate(nb);
            tangents.extend(nt);
        }
        let t = tangents.split_off(nb);
        t.into_iter().zip(&p).zip(&float).filter(|(_, &f)| f).map(|((t, p), _)| lax::instantiate(&t, p)).collect()
    })?;
    let mut outs =
        bind_control(ControlOp::Checkpoint { body: Body::new(group), policy: RematPolicy::Nothing }, &operands)?
            .into_iter();
    Ok(float.iter().map(|&f| if f { outs.next() } else { None }).collect())
}

/// A while over the JVP body, from this carry on (the predicate is not
/// known here).
fn while_of_jvp(
    op: &ControlOp,
    cc: &[Tensor],
    bc: &[Tensor],
    bc_t: &[Option<Tensor>],
    cp: &[Tensor],
    ct: &[Option<Tensor>],
) -> Result<Jvp> {
    let ControlOp::While { cond, body, remat_every, .. } = op else { unreachable!() };
    let bmask: Vec<bool> = bc_t.iter().map(Option::is_some).collect();
    let cmask: Vec<bool> = ct.iter().map(Option::is_some).collect();
    let bts: Vec<Tensor> = bc_t.iter().flatten().cloned().collect();
    let cts: Vec<Tensor> = ct.iter().flatten().cloned().collect();
    let (nb, nbt, nc) = (bc.len(), bts.len(), cp.len());
    let body_avals = avals_of(&cat(&[bc, &bts, cp, &cts]));
    let jvp_body = stage("jvp", &body_avals, |ins| {
        let b = &ins[..nb];
        let mut bt = ins[nb..nb + nbt].iter();
        let p = &ins[nb + nbt..nb + nbt + nc];
        let mut t = ins[nb + nbt + nc..].iter();
        let mut tangents: Vec<Option<Tensor>> =
            bmask.iter().map(|&m| if m { bt.next().cloned() } else { None }).collect();
        tangents.extend(cmask.iter().map(|&m| if m { t.next().cloned() } else { None }));
        let (np, nt) = jvp_eval(body, &cat(&[b, p]), &tangents)?;
        let mut r = np.clone();
        for ((t, p), &m) in nt.into_iter().zip(&np).zip(&cmask) {
            if m {
                r.push(lax::instantiate(&t, p)?);
            }
        }
        Ok(r)
    })?;
    let cond2: Program = (**cond).clone().insert_inputs(cond.inputs.len(), &avals_of(&cts));
    let while_op = ControlOp::While {
        cond: Body::new(cond2),
        body: Body::new(jvp_body),
        cond_consts: cc.len(),
        body_consts: nb + nbt,
        remat_every: *remat_every,
    };
    // The primal carry from a while of its own, so that it stays a value of
    // this level: under reverse mode only the tangent while is recorded,
    // and its transpose (not some later use of the primal) names the
    // unknown trip count.
    let primal = ControlOp::While {
        cond: cond.clone(),
        body: body.clone(),
        cond_consts: cc.len(),
        body_consts: nb,
        remat_every: *remat_every,
    };
    let outs = bind_control(primal, &cat(&[cc, bc, cp]))?.into_vec();
    let mut joint = bind_control(while_op, &cat(&[cc, bc, &bts, cp, &cts]))?.into_vec();
    let touts = joint.split_off(nc);
    let mut touts = touts.into_iter();
    Ok((outs, cmask.iter().map(|&m| if m { touts.next() } else { None }).collect()))
}

fn jvp_scan(op: &ControlOp, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Jvp> {
    let ControlOp::Scan { body, consts, carry, length, reverse, unroll } = op else { unreachable!() };
    let (nc, nk) = (*consts, *carry);
    let (c_p, rest) = primals.split_at(nc);
    let (k_p, xs_p) = rest.split_at(nk);
    let k_t = carry_tangents(k_p, &tangents[nc..nc + nk])?;
    let mut mask: Vec<bool> = tangents[..nc].iter().map(Option::is_some).collect();
    mask.extend(k_t.iter().map(Option::is_some));
    mask.extend(tangents[nc + nk..].iter().map(Option::is_some));
    let (known_body, tangent_body, nres) = crate::program_transforms::partial_eval::split_program(body, &mask)?;
    let (known_body, kc) = known_body.hoist_consts();
    let nin = kc.len() + nc;
    let nout = body.outputs.len();
    let ny = nout - nk;
    // Residuals: loop-invariant (a constant operand) or stacked per step.
    let operand_of = |v| known_body.inputs[..nin].iter().position(|u| *u == v);
    let mut invariant: Vec<(usize, Tensor)> = Vec::new();
    let mut stacked: Vec<usize> = Vec::new();
    let mut stacked_atoms: Vec<Atom> = Vec::new();
    for j in 0..nres {
        let atom = known_body.outputs[nout + j];
        match atom {
            Atom::Var(v) if operand_of(v).is_some() => {
                let p = operand_of(v).expect("checked");
                invariant.push((j, if p < kc.len() { kc[p].clone() } else { c_p[p - kc.len()].clone() }));
            }
            _ => {
                stacked.push(j);
                stacked_atoms.push(atom);
            }
        }
    }
    let mut known_body = known_body;
    known_body.outputs.truncate(nout);
    known_body.outputs.extend(stacked_atoms);
    let known_scan = ControlOp::Scan {
        body: Body::new(known_body),
        consts: nin,
        carry: nk,
        length: *length,
        reverse: *reverse,
        unroll: *unroll,
    };
    let mut outs = bind_control(known_scan, &cat(&[&kc, c_p, k_p, xs_p]))?.into_vec();
    let stacked_vals = outs.split_off(nout);
    // The tangent scan: consts [invariant residuals, constant tangents],
    // carry [carry tangents], xs [stacked residuals, xs tangents].
    let mut tb = tangent_body;
    let res_vars: Vec<_> = tb.inputs[..nres].to_vec();
    let tan_vars: Vec<_> = tb.inputs[nres..].to_vec();
    let nct = mask[..nc].iter().filter(|&&m| m).count();
    let nkt = mask[nc..nc + nk].iter().filter(|&&m| m).count();
    let mut inputs: Vec<_> = invariant.iter().map(|(j, _)| res_vars[*j]).collect();
    inputs.extend_from_slice(&tan_vars[..nct + nkt]);
    inputs.extend(stacked.iter().map(|&j| res_vars[j]));
    inputs.extend_from_slice(&tan_vars[nct + nkt..]);
    tb.inputs = inputs;
    let outputs: Vec<Atom> = tb.outputs[..nk]
        .iter()
        .zip(&k_t)
        .filter(|(_, t)| t.is_some())
        .map(|(a, _)| *a)
        .chain(tb.outputs[nk..].iter().copied())
        .collect();
    tb.outputs = outputs;
    let ninv = invariant.len();
    let mut operands: Vec<Tensor> = invariant.into_iter().map(|(_, t)| t).collect();
    operands.extend(tangents[..nc].iter().flatten().cloned());
    operands.extend(k_t.iter().flatten().cloned());
    operands.extend(stacked_vals);
    operands.extend(tangents[nc + nk..].iter().flatten().cloned());
    let tangent_scan = ControlOp::Scan {
        body: Body::new(tb),
        consts: ninv + nct,
        carry: nkt,
        length: *length,
        reverse: *reverse,
        unroll: *unroll,
    };
    let touts = bind_control(tangent_scan, &operands)?.into_vec();
    let mut it = touts.into_iter();
    let mut tangents_out: Vec<Option<Tensor>> =
        k_t.iter().map(|t| if t.is_some() { it.next() } else { None }).collect();
    tangents_out.extend(it.map(Some));
    debug_assert_eq!(tangents_out.len(), nk + ny);
    Ok((outs, tangents_out))
}

pub(super) fn transpose(op: &ControlOp, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    match op {
        ControlOp::While { .. } => Err(Error::transform(
            "while",
            "reverse-mode differentiation of a while_loop needs its trip count, which is unknown where the \
             gradient is taken: the loop's predicate is staged (jit, trace) or batched (vmap) inside the \
             differentiated function. Take the gradient outside the transform that hides the predicate: \
             grad(jit(f)) instead of jit(grad(f)) (the jitted loop then runs on concrete values, and the gradient \
             records its iterations), grad of the summed vmap(f) instead of vmap(grad(f)); or use fori_loop or \
             scan with a static length, which reverse mode differentiates anywhere",
        )),
        ControlOp::Scan { body, consts, carry, length, reverse, unroll } => {
            transpose_scan(body, *consts, *carry, *length, *reverse, *unroll, cts, args)
        }
        _ => unreachable!("loops::transpose on {}", op.name()),
    }
}

#[allow(clippy::too_many_arguments)]
fn transpose_scan(
    body: &Body,
    nc: usize,
    nk: usize,
    length: usize,
    reverse: bool,
    unroll: usize,
    cts: &[Option<Tensor>],
    args: &[LinearArg],
) -> Result<Cotangents> {
    // Every carry is transposed as linear: a carry of a linear scan that is
    // a constant is an instantiated zero tangent (a carry cannot be a
    // symbolic zero), and its cotangent is dropped.
    let (c_args, rest) = args.split_at(nc);
    let x_args = &rest[nk..];
    let body_in = body.in_avals();
    let out_avals = body.out_avals();
    let cc: Vec<Tensor> = c_args.iter().filter_map(|a| a.constant().cloned()).collect();
    let lc_avals: Vec<Aval> = c_args.iter().filter(|a| a.is_linear()).map(LinearArg::aval).collect();
    let cx: Vec<Tensor> = x_args.iter().filter_map(|a| a.constant().cloned()).collect();
    let lx_avals: Vec<Aval> =
        body_in[nc + nk..].iter().zip(x_args).filter(|(_, a)| a.is_linear()).map(|(v, _)| v.clone()).collect();
    let cx_avals: Vec<Aval> =
        body_in[nc + nk..].iter().zip(x_args).filter(|(_, a)| !a.is_linear()).map(|(v, _)| v.clone()).collect();
    let k_avals = &body_in[nc..nc + nk];
    let y_avals = &out_avals[nk..];
    let mut avals = avals_of(&cc);
    avals.extend(lc_avals.iter().cloned());
    avals.extend(k_avals.iter().cloned());
    avals.extend(cx_avals.iter().cloned());
    avals.extend(y_avals.iter().cloned());
    let (ncc, nlc, ncx) = (cc.len(), lc_avals.len(), cx.len());
    // Products reading a linear constant (a weight) are transposed after
    // the loop, all steps in one product over their stacked operands.
    let mut defer: Vec<bool> = c_args.iter().map(LinearArg::is_linear).collect();
    defer.resize(body_in.len(), false);
    let mut deferred_meta: Vec<(usize, crate::prim::DotDims, bool)> = Vec::new();
    let transposed = stage("transpose", &avals, |ins| {
        let (ccs, rest) = ins.split_at(ncc);
        let (acc, rest) = rest.split_at(nlc);
        let (ck, rest) = rest.split_at(nk);
        let (cxs, cy) = rest.split_at(ncx);
        let (mut ccs, mut cxs) = (ccs.iter(), cxs.iter());
        let mut known: Vec<Option<Tensor>> =
            c_args.iter().map(|a| if a.is_linear() { None } else { ccs.next().cloned() }).collect();
        known.extend((0..nk).map(|_| None));
        known.extend(x_args.iter().map(|a| if a.is_linear() { None } else { cxs.next().cloned() }));
        let out_cts: Vec<Option<Tensor>> = ck.iter().chain(cy).cloned().map(Some).collect();
        let mut hook = DeferProducts { defer: &defer, deferred: Vec::new() };
        let r = transpose_eval(body, &known, &out_cts, Some(&mut hook))?;
        let deferred = hook.deferred;
        let mut outs = Vec::new();
        let mut acc = acc.iter();
        for (j, a) in c_args.iter().enumerate() {
            if a.is_linear() {
                let prev = acc.next().expect("one accumulator per linear constant");
                outs.push(match &r[j] {
                    Some(c) => lax::add(prev, c)?,
                    None => prev.clone(),
                });
            }
        }
        for j in 0..nk {
            outs.push(instantiate(r[nc + j].clone(), &body_in[nc + j])?);
        }
        for (j, a) in x_args.iter().enumerate() {
            if a.is_linear() {
                outs.push(instantiate(r[nc + nk + j].clone(), &body_in[nc + nk + j])?);
            }
        }
        for d in deferred {
            outs.push(d.other);
            outs.push(d.ct);
            deferred_meta.push((d.input, d.dims, d.lhs));
        }
        Ok(outs)
    })?;
    let mut operands = cc;
    for a in &lc_avals {
        operands.push(lax::zeros_aval(a)?);
    }
    for (c, a) in cts[..nk].iter().zip(k_avals) {
        operands.push(instantiate(c.clone(), a)?);
    }
    operands.extend(cx);
    for (c, a) in cts[nk..].iter().zip(y_avals) {
        let mut shape = a.shape.clone();
        shape.0.insert(0, length);
        operands.push(instantiate(c.clone(), &Aval { shape, dtype: a.dtype, device: a.device })?);
    }
    let scan = ControlOp::Scan {
        body: Body::new(transposed),
        consts: ncc,
        carry: nlc + nk,
        length,
        reverse: !reverse,
        unroll,
    };
    let mut outs = bind_control(scan, &operands)?.into_vec();
    let stacked = outs.split_off(nlc + nk + lx_avals.len());
    let (acc, rest) = outs.split_at(nlc);
    let (ck, cxs) = rest.split_at(nk);
    let (mut acc, mut cxs) = (acc.iter(), cxs.iter());
    let mut result = Cotangents::new();
    for a in c_args {
        result.push(if a.is_linear() { acc.next().cloned() } else { None });
    }
    for ((input, dims, lhs), pair) in deferred_meta.iter().zip(stacked.chunks(2)) {
        let c = crate::prims::linalg::transpose_summed(dims, &pair[1], &pair[0], &body_in[*input], *lhs, 1)?;
        result[*input] = Some(match result[*input].take() {
            Some(prev) => lax::add(&prev, &c)?,
            None => c,
        });
    }
    result.extend(ck.iter().cloned().map(Some));
    for a in x_args {
        result.push(if a.is_linear() { cxs.next().cloned() } else { None });
    }
    Ok(result)
}

type Batched = (Vec<Tensor>, Vec<Option<usize>>);

fn as_bdims(b: &[bool]) -> Vec<Option<usize>> {
    b.iter().map(|&x| x.then_some(0)).collect()
}

/// Which carries must be batched: those batched on entry, and those the
/// body batches (to a fixed point).
fn carry_fixpoint(
    body: &Program,
    before: &[Option<usize>],
    carry: &[bool],
    after: &[Option<usize>],
    axis: &BatchAxis,
) -> Result<Vec<bool>> {
    let mut cb = carry.to_vec();
    loop {
        let mut bd = before.to_vec();
        bd.extend(as_bdims(&cb));
        bd.extend_from_slice(after);
        let outs = batched_outputs(body, &bd, axis)?;
        let next: Vec<bool> = cb.iter().zip(&outs).map(|(a, b)| *a || *b).collect();
        if next == cb {
            return Ok(cb);
        }
        cb = next;
    }
}

pub(super) fn batch(op: &ControlOp, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<Batched> {
    let size = axis.size;
    match op {
        ControlOp::While { cond, body, cond_consts, body_consts, remat_every } => {
            let (ncc, nbc) = (*cond_consts, *body_consts);
            let (cc_b, rest) = bdims.split_at(ncc);
            let (bc_b, k_b) = rest.split_at(nbc);
            let k_in: Vec<bool> = k_b.iter().map(Option::is_some).collect();
            let mut cb = carry_fixpoint(body, bc_b, &k_in, &[], axis)?;
            let mut cond_bd = cc_b.to_vec();
            cond_bd.extend(as_bdims(&cb));
            let pred_batched = batched_outputs(cond, &cond_bd, axis)?[0];
            if pred_batched {
                cb = vec![true; cb.len()];
            }
            let (cc, rest) = ins.split_at(ncc);
            let (bc, k) = rest.split_at(nbc);
            let (k, kd) = move_to_front(k, k_b, &cb, size)?;
            let mut cond_in = cc_b.to_vec();
            cond_in.extend(kd.iter().copied());
            let mut body_in = bc_b.to_vec();
            body_in.extend(kd.iter().copied());
            let outs = if !pred_batched {
                let (cond_b, _) = batch_program(cond, &cond_in, axis, OutBatching::Given(&[false]))?;
                let (body_b, _) = batch_program(body, &body_in, axis, OutBatching::Given(&cb))?;
                let w = ControlOp::While {
                    cond: Body::new(cond_b),
                    body: Body::new(body_b),
                    cond_consts: ncc,
                    body_consts: nbc,
                    remat_every: *remat_every,
                };
                bind_control(w, &cat(&[cc, bc, &k]))?.into_vec()
            } else {
                masked_while(cond, body, cc, bc, &k, cc_b, bc_b, axis, *remat_every)?
            };
            Ok((outs, as_bdims(&cb)))
        }
        ControlOp::Scan { body, consts, carry, length, reverse, unroll } => {
            let (nc, nk) = (*consts, *carry);
            let (c_b, rest) = bdims.split_at(nc);
            let (k_b, x_b) = rest.split_at(nk);
            let xs_in: Vec<Option<usize>> = x_b.iter().map(|b| b.map(|_| 0)).collect();
            let k_in: Vec<bool> = k_b.iter().map(Option::is_some).collect();
            let cb = carry_fixpoint(body, c_b, &k_in, &xs_in, axis)?;
            let (c, rest) = ins.split_at(nc);
            let (k, xs) = rest.split_at(nk);
            let (k, kd) = move_to_front(k, k_b, &cb, size)?;
            let xs: Vec<Tensor> = xs
                .iter()
                .zip(x_b)
                .map(|(x, b)| match b {
                    Some(d) => to_position(x, Some(*d), 1, size),
                    None => Ok(x.clone()),
                })
                .collect::<Result<_>>()?;
            let mut in_bd = c_b.to_vec();
            in_bd.extend(kd);
            in_bd.extend(xs_in);
            let ny = body.outputs.len() - nk;
            let mut force = cb.clone();
            force.extend(std::iter::repeat_n(true, ny));
            let (body_b, _) = batch_program(body, &in_bd, axis, OutBatching::Given(&force))?;
            let s = ControlOp::Scan {
                body: Body::new(body_b),
                consts: nc,
                carry: nk,
                length: *length,
                reverse: *reverse,
                unroll: *unroll,
            };
            let outs = bind_control(s, &cat(&[c, &k, &xs]))?.into_vec();
            let mut b = as_bdims(&cb);
            b.extend(std::iter::repeat_n(Some(1), ny));
            Ok((outs, b))
        }
        _ => unreachable!("loops::batch on {}", op.name()),
    }
}

/// A while whose predicate is batched: it runs while any example's
/// predicate holds, and an example whose predicate no longer holds keeps
/// its carry (every carry batched at 0).
#[allow(clippy::too_many_arguments)]
fn masked_while(
    cond: &Body,
    body: &Body,
    cc: &[Tensor],
    bc: &[Tensor],
    k: &[Tensor],
    cc_b: &[Option<usize>],
    bc_b: &[Option<usize>],
    axis: &BatchAxis,
    remat_every: usize,
) -> Result<Vec<Tensor>> {
    let size = axis.size;
    let (ncc, nbc, nk) = (cc.len(), bc.len(), k.len());
    let k_avals = avals_of(k);
    let cc_avals = avals_of(cc);
    let batched_pred = |ins_cc: &[Tensor], ins_k: &[Tensor]| -> Result<Tensor> {
        let mut bd = cc_b.to_vec();
        bd.extend(std::iter::repeat_n(Some(0), nk));
        let (p, b) = batch_eval(cond, &cat(&[ins_cc, ins_k]), &bd, axis)?;
        to_position(&p[0], b[0], 0, size)
    };
    let any_cond = stage("vmap", &[cc_avals.clone(), k_avals.clone()].concat(), |ins| {
        let p = batched_pred(&ins[..ncc], &ins[ncc..])?;
        let p = lax::convert(&p, DType::I32)?;
        let m = lax::reduce_max(&p, &[0])?;
        Ok(vec![lax::gt(&m, &lax::full_like(&m, 0.0)?)?])
    })?;
    let masked_body = stage("vmap", &[cc_avals, avals_of(bc), k_avals].concat(), |ins| {
        let (c, rest) = ins.split_at(ncc);
        let (b, old) = rest.split_at(nbc);
        let p = batched_pred(c, old)?;
        let mut bd = bc_b.to_vec();
        bd.extend(std::iter::repeat_n(Some(0), nk));
        let (new, nb) = batch_eval(body, &cat(&[b, old]), &bd, axis)?;
        new.iter()
            .zip(nb)
            .zip(old)
            .map(|((n, d), o)| {
                let n = to_position(n, d, 0, size)?;
                let mask = lax::broadcast_in_dim(&p, &n.shape(), &[0])?;
                lax::select(&mask, &n, o)
            })
            .collect()
    })?;
    let w = ControlOp::While {
        cond: Body::new(any_cond),
        body: Body::new(masked_body),
        cond_consts: ncc,
        body_consts: ncc + nbc,
        remat_every,
    };
    Ok(bind_control(w, &cat(&[cc, cc, bc, k]))?.into_vec())
}

/// A product (`dot_general`) reading a weight of a scan's body whose
/// transpose is deferred: the weight's cotangent is `transpose(dims)` of
/// `ct` against `other`, summed over every step by one product after the
/// loop (instead of one product and one add per step).
struct Deferred {
    /// The body input (a linear one) the product reads.
    input: usize,
    /// The product's dimensions.
    dims: crate::prim::DotDims,
    /// The input is the product's lhs.
    lhs: bool,
    /// The product's other (known) operand.
    other: Tensor,
    /// The cotangent of the product's result.
    ct: Tensor,
}

/// The backward pass's hook that defers the products reading a body input
/// `defer` marks directly, with a known other operand.
struct DeferProducts<'a> {
    defer: &'a [bool],
    deferred: Vec<Deferred>,
}

impl crate::program_transforms::backward::Hook for DeferProducts<'_> {
    fn watch(&mut self, p: &crate::program::Program) -> Vec<Option<usize>> {
        let mut watched = vec![None; p.avals.len()];
        for (i, v) in p.inputs.iter().enumerate() {
            if self.defer.get(i) == Some(&true) {
                watched[v.0 as usize] = Some(i);
            }
        }
        watched
    }

    fn take(
        &mut self,
        eqn: &crate::program::Eqn,
        cts: &[Option<Tensor>],
        args: &[LinearArg],
        inputs: &[Option<usize>],
    ) -> Result<bool> {
        let (crate::prim::Prim::Linalg(crate::prim::LinalgOp::DotGeneral(dims)), Some(ct)) = (&eqn.prim, &cts[0])
        else {
            return Ok(false);
        };
        let (input, lhs, other) = match (args, inputs) {
            ([LinearArg::Linear(_), LinearArg::Const(other)], [Some(i), _]) => (*i, true, (*other).clone()),
            ([LinearArg::Const(other), LinearArg::Linear(_)], [_, Some(i)]) => (*i, false, (*other).clone()),
            _ => return Ok(false),
        };
        self.deferred.push(Deferred { input, dims: dims.clone(), lhs, other, ct: ct.clone() });
        Ok(true)
    }
}
