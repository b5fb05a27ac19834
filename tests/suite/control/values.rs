//! Plain Rust control flow on values (issue part 6): reading a tracer's
//! value works where its primal is known (the derivatives) and is a clear
//! error where it is not (vmap, trace).

use super::{err, says, t64};
use crate::harness::{assert_close, v};
use xform::prelude::*;

/// The example: x^2 when x != 0, else x.
fn branchy(x: &Tensor) -> Tensor {
    if x.item_f64() != 0.0 {
        x.powf(2.0)
    } else {
        x.clone()
    }
}

#[test]
fn rust_if_on_a_value_works_under_the_derivatives() {
    let x = Tensor::scalar(2.0f64);
    let one = Tensor::scalar(1.0f64);
    assert_eq!(grad(branchy)(&x).item_f64(), 4.0);
    let (y, t) = jvp(branchy, &x, &one);
    assert_eq!((y.item_f64(), t.item_f64()), (4.0, 4.0));
    let (y, g) = value_and_grad(branchy)(&x);
    assert_eq!((y.item_f64(), g.item_f64()), (4.0, 4.0));
    let (y, lin) = linearize(branchy, &x);
    assert_eq!((y.item_f64(), lin(&one).item_f64()), (4.0, 4.0));
    let (_, back) = vjp(branchy, &x);
    assert_eq!(back(&one).item_f64(), 4.0);
    assert_eq!(jacfwd(branchy)(&x).item_f64(), 4.0);
    assert_eq!(jacrev(branchy)(&x).item_f64(), 4.0);
    assert_eq!(hessian(branchy)(&x).item_f64(), 2.0);
    // the other branch at 0: the identity
    let z = Tensor::scalar(0.0f64);
    assert_eq!(grad(branchy)(&z).item_f64(), 1.0);
    assert_eq!(hessian(branchy)(&z).item_f64(), 0.0);
    assert_eq!(xform::core::interp::stack_depth(), 0);
}

#[test]
fn comparisons_and_to_vec_of_tracers_under_the_derivatives() {
    // a loop whose trip count depends on the value, and a branch on a comparison
    let f = |x: &Tensor| {
        let mut y = x.clone();
        while y.sum().item_f64() < 10.0 {
            y = &y * 2.0;
        }
        let first = y.to_vec::<f64>()[0];
        if y.select(0, 0).gt_scalar(5.0).item::<bool>() {
            y.sin().sum() * first
        } else {
            y.sum()
        }
    };
    let x = t64(&[1.5, 0.5]);
    // 3 doublings: y = 8x, first = 12 (a constant to the derivative); d/dx = 12 * 8 cos(8x)
    let want: Vec<f64> = v(&x).iter().map(|x| 96.0 * (8.0 * x).cos()).collect();
    assert_close(&v(&grad(f)(&x)), &want, 1e-13);
    let (_, t) = jvp(f, &x, &t64(&[1.0, 0.0]));
    assert_close(&[t.item_f64()], &[want[0]], 1e-13);
    assert_close(&v(&jacfwd(f)(&x)), &want, 1e-13);
    assert_close(&v(&jacrev(f)(&x)), &want, 1e-13);
    // under vmap(grad) the value is not known: an error, not a wrong number
    let e = err(|| vmap(grad(f))(&Tensor::stack(&[x.clone(), x.clone()], 0)));
    says(&e, &["vmap", "where", "select", "cond"]);
}

#[test]
fn rust_if_on_a_value_under_vmap_and_trace_is_a_clear_error() {
    let xs = t64(&[2.0, 0.0, 3.0]);
    let e = err(|| vmap(branchy)(&xs));
    says(&e, &["vmap", "where", "select", "cond"]);
    let e = err(|| trace(branchy, &Tensor::scalar(2.0f64)));
    says(&e, &["trace", "where", "select", "cond"]);
    let e = err(|| trace(grad(branchy), &Tensor::scalar(2.0f64)));
    says(&e, &["where", "select", "cond"]);
    let e = err(|| vmap(|x: &Tensor| Tensor::scalar(x.to_vec::<f64>()[0] * 2.0))(&xs));
    says(&e, &["where", "select", "cond"]);
    // everything works afterwards, and the suggested fix gives the per-example values
    assert_eq!(grad(branchy)(&Tensor::scalar(2.0f64)).item_f64(), 4.0);
    let fixed = |x: &Tensor| cond(&x.ne_scalar(0.0), |x: &Tensor| x.powf(2.0), |x: &Tensor| x.clone(), x);
    assert_eq!(v(&vmap(fixed)(&xs)), vec![4.0, 0.0, 9.0]);
    assert_eq!(v(&vmap(grad(fixed))(&xs)), vec![4.0, 1.0, 6.0]);
    let w = |x: &Tensor| Tensor::where_(&x.ne_scalar(0.0), &x.powf(2.0), x);
    assert_eq!(v(&vmap(w)(&xs)), vec![4.0, 0.0, 9.0]);
}
