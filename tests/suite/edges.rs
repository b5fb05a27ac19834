//! The registry's edge points (`registry::edge_points`): each primitive's
//! gradient and Hessian at a tie, a kink or a singular point, through
//! grad, jacfwd, jacrev and hessian (forward over reverse) and jacrev of
//! jacrev, against JAX's numbers.

use crate::registry::{edge_points, EdgePoint};
use xform::core::interp::bind;
use xform::prelude::*;

/// Equal within `tol` (relative above 1), with equal infinities and NaN
/// equal to NaN.
fn same(a: f64, b: f64, tol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= tol * b.abs().max(1.0)
}

fn check(e: &EdgePoint, what: &str, got: &[f64], want: &[f64]) {
    let ok = got.len() == want.len() && got.iter().zip(want).all(|(&g, &w)| same(g, w, 1e-12));
    assert!(ok, "{} at {:?}: {what} is {got:?}, want {want:?} {}", e.prim, e.at, e.note);
}

#[test]
fn derivatives_at_edge_points_match_jax() {
    for e in edge_points() {
        let (prim, vector) = (e.prim.clone(), e.vector);
        let k = e.at.len();
        // The primitive as a function of one vector of its operands.
        let f = move |p: &Tensor| -> Tensor {
            let args: Vec<Tensor> =
                if vector { vec![p.clone()] } else { (0..k).map(|i| p.index(i as isize)).collect() };
            bind(&prim, &args).unwrap_or_else(|err| err.raise())[0].clone()
        };
        let x = Tensor::from_vec(e.at.clone(), [k]);
        check(&e, "grad", &grad(&f)(&x).to_vec::<f64>(), &e.grad);
        check(&e, "jacfwd", &jacfwd(&f)(&x).to_vec::<f64>(), &e.grad);
        check(&e, "jacrev", &jacrev(&f)(&x).to_vec::<f64>(), &e.grad);
        let want: Vec<f64> = e.hessian.concat();
        check(&e, "hessian", &hessian(&f)(&x).to_vec::<f64>(), &want);
        check(&e, "jacrev(jacrev)", &jacrev(jacrev(&f))(&x).to_vec::<f64>(), &want);
        check(&e, "jacfwd(jacfwd)", &jacfwd(jacfwd(&f))(&x).to_vec::<f64>(), &want);
    }
}
