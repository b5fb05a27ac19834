//! `checkpoint` (remat): the JVP evaluates the body once for the primal
//! outputs and binds a second checkpoint over the body's tangent program,
//! whose operands (the primal inputs, plus the products under
//! [`RematPolicy::Products`]) are all that reverse mode keeps; its
//! transpose recomputes the rest of the forward pass (`program_transforms::evaluate::transpose_eval`
//! evaluates the non-linear equations the linear ones read).

use super::{avals_of, bind_control, Body, ControlOp};
use crate::error::Result;
use crate::prim::{Cotangents, LinearArg, Prim};
use crate::prims::batching::BatchAxis;
use crate::program::Atom;
use crate::program_transforms::evaluate::{batch_program, instantiate, jvp_eval_with, transpose_eval, OutBatching};
use crate::staging::stage;
use crate::tensor::Tensor;
use std::fmt;

/// What reverse mode saves of a checkpointed function's forward pass.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum RematPolicy {
    /// Only the inputs: everything else is recomputed (JAX's
    /// `nothing_saveable`, the default of `jax.checkpoint`).
    #[default]
    Nothing,
    /// The inputs and the results of matrix products and convolutions,
    /// whose recomputation costs most (JAX's `dots_saveable`).
    Products,
}

impl fmt::Display for RematPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RematPolicy::Nothing => "nothing_saveable",
            RematPolicy::Products => "dots_saveable",
        })
    }
}

fn is_product(p: &Prim) -> bool {
    matches!(p, Prim::Linalg(_) | Prim::Conv(_))
}

type Jvp = (Vec<Tensor>, Vec<Option<Tensor>>);

pub(super) fn jvp(body: &Body, policy: RematPolicy, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Jvp> {
    let this = ControlOp::Checkpoint { body: body.clone(), policy };
    if tangents.iter().all(Option::is_none) {
        let outs = bind_control(this, primals)?.into_vec();
        let n = outs.len();
        return Ok((outs, vec![None; n]));
    }
    // The products the forward pass saves (none under `Nothing`).
    let saved: Vec<usize> = match policy {
        RematPolicy::Nothing => Vec::new(),
        RematPolicy::Products => (0..body.eqns.len()).filter(|&i| is_product(&body.eqns[i].prim)).collect(),
    };
    let nout = body.outputs.len();
    let mut outs = if saved.is_empty() {
        bind_control(this, primals)?.into_vec()
    } else {
        let mut forward = (**body).clone();
        forward.outputs.extend(saved.iter().flat_map(|&i| forward.eqns[i].outputs.clone()).map(Atom::Var));
        bind_control(ControlOp::Checkpoint { body: Body::new(forward), policy }, primals)?.into_vec()
    };
    let products = outs.split_off(nout);
    let mask: Vec<bool> = tangents.iter().map(Option::is_some).collect();
    let mut operands: Vec<Tensor> = primals.to_vec();
    operands.extend(products.iter().cloned());
    operands.extend(tangents.iter().flatten().cloned());
    let out_avals = body.out_avals();
    let (np, ns) = (primals.len(), products.len());
    let tangent_program = stage("jvp", &avals_of(&operands), |ins| {
        let (ps, rest) = ins.split_at(np);
        let (prods, ts) = rest.split_at(ns);
        let mut ts = ts.iter();
        let ts: Vec<Option<Tensor>> = mask.iter().map(|&m| if m { ts.next().cloned() } else { None }).collect();
        let mut next = prods.iter();
        let (_, touts) = jvp_eval_with(body, ps, &ts, &mut |i, outs| {
            saved.contains(&i).then(|| outs.iter().map(|_| next.next().expect("one saved value").clone()).collect())
        })?;
        touts.into_iter().zip(&out_avals).map(|(t, a)| instantiate(t, a)).collect()
    })?;
    let touts = bind_control(
        ControlOp::Checkpoint { body: Body::new(tangent_program), policy: RematPolicy::Nothing },
        &operands,
    )?;
    Ok((outs, touts.into_iter().map(Some).collect()))
}

pub(super) fn transpose(body: &Body, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let known: Vec<Option<Tensor>> = args.iter().map(|a| a.constant().cloned()).collect();
    Ok(transpose_eval(body, &known, cts, None)?.into_iter().collect())
}

type Batched = (Vec<Tensor>, Vec<Option<usize>>);

pub(super) fn batch(
    body: &Body,
    policy: RematPolicy,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    axis: &BatchAxis,
) -> Result<Batched> {
    // only the outputs that depend on a batched operand are batched (a
    // final value the body writes into an unbatched argument stays
    // unbatched, so vmap can write it back)
    let (b, out_batched) = batch_program(body, bdims, axis, OutBatching::AsComputed)?;
    let outs = bind_control(ControlOp::Checkpoint { body: Body::new(b), policy }, ins)?.into_vec();
    Ok((outs, out_batched.iter().map(|&b| b.then_some(0)).collect()))
}
