//! The control-flow primitives by their definitions: bodies run equation by
//! equation through the naive reference of each primitive, with plain Rust
//! loops and branches.

use super::{apply as reference, Nd};
use xform::core::prim::ControlOp;
use xform::core::program::Atom;
use xform::{DType, Program};

/// The outputs of `p` on `args`, every equation by the reference.
fn run(p: &Program, args: &[Nd]) -> Vec<Nd> {
    assert_eq!(p.inputs.len(), args.len(), "reference: arity of a body");
    let mut env: Vec<Option<Nd>> = vec![None; p.avals.len()];
    for (v, a) in p.inputs.iter().zip(args) {
        env[v.0 as usize] = Some(a.clone());
    }
    let read = |env: &[Option<Nd>], a: &Atom| -> (Nd, DType) {
        match a {
            Atom::Var(v) => (env[v.0 as usize].clone().expect("defined before use"), p.aval(*v).dtype),
            Atom::Const(i) => (Nd::of(&p.consts[*i]), p.consts[*i].dtype()),
        }
    };
    for e in &p.eqns {
        let (ins, dtypes): (Vec<Nd>, Vec<DType>) = e.inputs.iter().map(|a| read(&env, a)).unzip();
        for (v, o) in e.outputs.iter().zip(reference(&e.prim, &ins, &dtypes)) {
            env[v.0 as usize] = Some(o);
        }
    }
    p.outputs.iter().map(|a| read(&env, a).0).collect()
}

/// Element `i` of `x` along its leading axis.
fn index0(x: &Nd, i: usize) -> Nd {
    let shape = x.shape[1..].to_vec();
    let n: usize = shape.iter().product();
    Nd::new(shape, x.data[i * n..(i + 1) * n].to_vec())
}

/// `ys` stacked along a new leading axis (`shape`: one element's shape).
fn stack(ys: &[Nd], shape: &[usize]) -> Nd {
    let mut s = vec![ys.len()];
    s.extend_from_slice(shape);
    Nd::new(s, ys.iter().flat_map(|y| y.data.iter().copied()).collect())
}

pub fn apply(op: &ControlOp, ins: &[Nd], _dtypes: &[DType]) -> Vec<Nd> {
    match op {
        ControlOp::Cond { branches } => {
            let k = (ins[0].data[0] as i64).clamp(0, branches.len() as i64 - 1) as usize;
            run(&branches[k], &ins[1..])
        }
        ControlOp::While { cond, body, cond_consts, body_consts, .. } => {
            let (cc, rest) = ins.split_at(*cond_consts);
            let (bc, carry) = rest.split_at(*body_consts);
            let mut carry = carry.to_vec();
            while run(cond, &[cc, &carry].concat())[0].data[0] != 0.0 {
                carry = run(body, &[bc, &carry].concat());
            }
            carry
        }
        ControlOp::Scan { body, consts, carry, length, reverse, .. } => {
            let (c, rest) = ins.split_at(*consts);
            let (k, xs) = rest.split_at(*carry);
            let mut k = k.to_vec();
            let y_shapes: Vec<Vec<usize>> = body.out_avals()[*carry..].iter().map(|a| a.shape.to_vec()).collect();
            let mut ys: Vec<Vec<Nd>> = vec![Vec::new(); y_shapes.len()];
            for step in 0..*length {
                let i = if *reverse { length - 1 - step } else { step };
                let x: Vec<Nd> = xs.iter().map(|x| index0(x, i)).collect();
                let mut out = run(body, &[c, &k, &x].concat());
                let y = out.split_off(*carry);
                k = out;
                for (acc, t) in ys.iter_mut().zip(y) {
                    acc.push(t);
                }
            }
            for (mut y, s) in ys.into_iter().zip(&y_shapes) {
                if *reverse {
                    y.reverse();
                }
                k.push(stack(&y, s));
            }
            k
        }
        ControlOp::CustomJvp { fun, fun_consts, rule_consts, .. } => {
            run(fun, &[&ins[..*fun_consts], &ins[fun_consts + rule_consts..]].concat())
        }
        ControlOp::CustomVjp { fun, consts, .. } => {
            let skip: usize = consts.iter().sum();
            run(fun, &[&ins[..consts[0]], &ins[skip..]].concat())
        }
        ControlOp::CustomVjpCall { jvp, bwd_consts, jvp_consts, residuals, .. } => {
            let jvp = jvp.as_ref().expect("the reference evaluates a tangent map with a JVP rule");
            let rest = &ins[bwd_consts + jvp_consts + residuals..];
            let (x, t) = rest.split_at(rest.len() / 2);
            let j = &ins[*bwd_consts..bwd_consts + jvp_consts];
            let mut out = run(jvp, &[j, x, t].concat());
            out.split_off(out.len() / 2)
        }
        ControlOp::Checkpoint { body, .. } => run(body, ins),
    }
}
