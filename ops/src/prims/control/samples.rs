//! Registry samples of the control-flow primitives: small bodies of
//! smooth ops, staged for the drawn dtype, so that every generic rule test
//! (eval against the reference, finite differences, transpose, vmap
//! against a loop, vmap of vmap, jvp of vmap) runs through them.

use super::{Body, ControlOp, RematPolicy};
use crate::array::default_device;
use crate::error::{OrRaise, Result};
use crate::lax;
use crate::prims::sample::{Case, Dom, Gen, Sample};
use crate::staging::stage;
use crate::tensor::{Aval, Tensor};
use crate::DotDims;
use xform_kernels::{DType, Shape};

fn aval(shape: &[usize], dtype: DType) -> Aval {
    Aval { shape: Shape::from(shape.to_vec()), dtype, device: default_device() }
}

fn body(avals: &[Aval], f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>) -> Body {
    Body::new(stage("sample", avals, f).or_raise())
}

fn c(x: &Tensor, v: f64) -> Tensor {
    lax::full_like(x, v).or_raise()
}

const F: [DType; 2] = [DType::F64, DType::F32];

pub(super) fn samples() -> Vec<Sample> {
    vec![
        Sample::new("cond", F.to_vec(), vec![], true, |g: &mut Gen, d| {
            let shape = g.dims(2);
            let a = aval(&shape, d);
            let branches: Vec<Body> = vec![
                body(&[a.clone(), a.clone()], |x| Ok(vec![lax::mul(&lax::sin(&x[0])?, &x[1])?])),
                body(&[a.clone(), a.clone()], |x| Ok(vec![lax::add(&lax::cos(&x[1])?, &x[0])?])),
                body(&[a.clone(), a.clone()], |x| Ok(vec![lax::mul(&lax::mul(&x[0], &x[0])?, &c(&x[0], 0.5))?])),
            ];
            let index = if g.coin(0.5) { (DType::I32, Dom::Small(-1, 3)) } else { (DType::Bool, Dom::Small(0, 1)) };
            let n = if index.0 == DType::Bool { 2 } else { 3 };
            Case::new(
                ControlOp::Cond { branches: branches[..n].to_vec().into() },
                vec![
                    (vec![], index.0, index.1),
                    (shape.clone(), d, Dom::Real(-2.0, 2.0)),
                    (shape, d, Dom::Real(-2.0, 2.0)),
                ],
            )
        }),
        Sample::new("while", F.to_vec(), vec![], true, |g: &mut Gen, d| {
            let shape = g.dims(2);
            let (i, x) = (aval(&[], DType::I32), aval(&shape, d));
            let cond = body(&[i.clone(), x.clone()], |v| Ok(vec![lax::lt(&v[0], &lax::full_like(&v[0], 3.0)?)?]));
            let step = body(&[x.clone(), i, x], |v| {
                let next = lax::add(&lax::mul(&lax::sin(&v[2])?, &v[0])?, &c(&v[2], 0.1))?;
                Ok(vec![lax::add(&v[1], &lax::full_like(&v[1], 1.0)?)?, next])
            });
            let remat_every = g.pick(&[0, 0, 2]);
            Case::new(
                ControlOp::While { cond, body: step, cond_consts: 0, body_consts: 1, remat_every },
                vec![
                    (shape.clone(), d, Dom::Real(0.5, 1.2)),
                    (vec![], DType::I32, Dom::Small(0, 2)),
                    (shape, d, Dom::Real(-2.0, 2.0)),
                ],
            )
        }),
        Sample::new("scan", F.to_vec(), vec![], true, |g: &mut Gen, d| {
            let shape = g.dims(2);
            let length = g.int(0, 4);
            let reverse = g.coin(0.5);
            let a = aval(&shape, d);
            let step = body(&[a.clone(), a.clone(), a.clone()], |v| {
                let h = lax::tanh(&lax::add(&lax::mul(&v[1], &v[0])?, &v[2])?)?;
                Ok(vec![h.clone(), lax::mul(&h, &lax::sin(&v[2])?)?])
            });
            let mut xs = vec![length];
            xs.extend(&shape);
            Case::new(
                ControlOp::Scan { body: step, consts: 1, carry: 1, length, reverse, unroll: 1 },
                vec![
                    (shape.clone(), d, Dom::Real(-1.5, 1.5)),
                    (shape, d, Dom::Real(-1.0, 1.0)),
                    (xs, d, Dom::Real(-1.0, 1.0)),
                ],
            )
        }),
        // A recurrent cell: the weight's cotangent is summed over the steps in
        // one product after the transposed loop (see `loops::transpose_scan`).
        Sample::new("scan(matmul cell)", F.to_vec(), vec![], true, |g: &mut Gen, d| {
            let n = g.int(1, 3);
            let length = g.int(0, 4);
            let reverse = g.coin(0.5);
            let (w, h) = (aval(&[n, n], d), aval(&[n], d));
            let step = body(&[w, h.clone(), h], |v| {
                let p = lax::dot_general(
                    &v[1],
                    &v[0],
                    DotDims {
                        lhs_contract: smallvec::smallvec![0],
                        rhs_contract: smallvec::smallvec![0],
                        ..Default::default()
                    },
                )?;
                let h = lax::tanh(&lax::add(&p, &v[2])?)?;
                Ok(vec![h.clone(), lax::mul(&h, &v[2])?])
            });
            Case::new(
                ControlOp::Scan { body: step, consts: 1, carry: 1, length, reverse, unroll: 1 },
                vec![
                    (vec![n, n], d, Dom::Real(-1.0, 1.0)),
                    (vec![n], d, Dom::Real(-1.0, 1.0)),
                    (vec![length, n], d, Dom::Real(-1.0, 1.0)),
                ],
            )
        }),
        Sample::new("custom_jvp_call", F.to_vec(), vec![], true, |g: &mut Gen, d| {
            let shape = g.dims(2);
            let a = aval(&shape, d);
            let fun = body(std::slice::from_ref(&a), |x| Ok(vec![lax::sin(&x[0])?]));
            let rule = body(&[a.clone(), a], |x| Ok(vec![lax::sin(&x[0])?, lax::mul(&lax::cos(&x[0])?, &x[1])?]));
            Case::new(
                ControlOp::CustomJvp { fun, rule, fun_consts: 0, rule_consts: 0 },
                vec![(shape, d, Dom::Real(-2.0, 2.0))],
            )
        }),
        Sample::new("custom_vjp_call", F.to_vec(), vec![], true, |g: &mut Gen, d| {
            let shape = g.dims(2);
            let a = aval(&shape, d);
            let cube = |x: &Tensor| lax::mul(&lax::mul(x, x)?, x);
            let fun = body(std::slice::from_ref(&a), |x| Ok(vec![cube(&x[0])?]));
            let fwd = body(std::slice::from_ref(&a), |x| Ok(vec![cube(&x[0])?, x[0].clone()]));
            let bwd = body(&[a.clone(), a.clone()], |v| {
                Ok(vec![lax::mul(&lax::mul(&lax::mul(&v[0], &v[0])?, &c(&v[0], 3.0))?, &v[1])?])
            });
            // With a JVP rule, so that the forward-mode tests run too (without
            // one, forward mode is an error by design: tests/suite/control.rs).
            let jvp = Some(body(&[a.clone(), a.clone()], |v| {
                let dy = lax::mul(&lax::mul(&lax::mul(&v[0], &v[0])?, &c(&v[0], 3.0))?, &v[1])?;
                Ok(vec![cube(&v[0])?, dy])
            }));
            Case::new(
                ControlOp::CustomVjp { fun, fwd, bwd, jvp, consts: [0; 4] },
                vec![(shape, d, Dom::Real(-2.0, 2.0))],
            )
        }),
        // The tangent map of a custom_vjp function alone: 2 t, transposed
        // by its bwd (2 ct); linear in its last operand.
        Sample::new("custom_vjp_tangent", F.to_vec(), vec![2], true, |g: &mut Gen, d| {
            let shape = g.dims(2);
            let a = aval(&shape, d);
            let bwd = body(&[a.clone(), a.clone()], |v| Ok(vec![lax::mul(&v[1], &c(&v[1], 2.0))?]));
            let jvp = body(&[a.clone(), a], |v| Ok(vec![lax::sin(&v[0])?, lax::mul(&v[1], &c(&v[1], 2.0))?]));
            Case::new(
                ControlOp::CustomVjpCall { bwd, jvp: Some(jvp), bwd_consts: 0, jvp_consts: 0, residuals: 1 },
                vec![
                    (shape.clone(), d, Dom::Real(-2.0, 2.0)),
                    (shape.clone(), d, Dom::Real(-2.0, 2.0)),
                    (shape, d, Dom::Real(-2.0, 2.0)),
                ],
            )
        }),
        Sample::new("checkpoint", F.to_vec(), vec![], true, |g: &mut Gen, d| {
            let (m, k, n) = (g.int(1, 3), g.int(1, 3), g.int(1, 3));
            let policy = g.pick(&[RematPolicy::Nothing, RematPolicy::Products]);
            let body = body(&[aval(&[m, k], d), aval(&[k, n], d)], |v| {
                let p = lax::dot_general(&lax::sin(&v[0])?, &v[1], DotDims::matmul())?;
                Ok(vec![lax::tanh(&p)?, lax::mul(&p, &p)?])
            });
            Case::new(
                ControlOp::Checkpoint { body, policy },
                vec![(vec![m, k], d, Dom::Real(-1.5, 1.5)), (vec![k, n], d, Dom::Real(-1.5, 1.5))],
            )
        }),
    ]
}
