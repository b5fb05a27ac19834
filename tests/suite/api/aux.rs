//! has_aux on every transform that takes a function.

use crate::harness::{assert_close as close, v};
use xform::prelude::*;

fn x() -> Tensor {
    Tensor::from_vec(vec![0.5f64, -1.0, 2.0], [3])
}

/// The function and its aux: a softmax, and (its sum of squares, a label).
fn f(x: &Tensor) -> (Tensor, (Tensor, Tensor)) {
    let y = x.softmax(-1) * x;
    let aux = ((x * x).sum(), Tensor::from_vec(vec![7i64], [1]));
    (y, aux)
}

fn plain(x: &Tensor) -> Tensor {
    f(x).0
}

fn check_aux((sq, label): &(Tensor, Tensor)) {
    close(&v(sq), &[5.25], 0.0);
    assert_eq!(label.to_vec::<i64>(), vec![7]);
}

#[test]
fn vjp_jvp_and_linearize_return_the_aux_undifferentiated() {
    let ct = Tensor::from_vec(vec![1.0f64, -2.0, 0.5], [3]);
    let (y, pullback, aux) = vjp_with_aux(f, &x());
    let (y0, pullback0) = vjp(plain, &x());
    close(&v(&y), &v(&y0), 0.0);
    close(&v(&pullback(&ct)), &v(&pullback0(&ct)), 0.0);
    check_aux(&aux);

    let (y, dy, aux) = jvp_with_aux(f, &x(), &ct);
    let (_, dy0) = jvp(plain, &x(), &ct);
    close(&v(&y), &v(&y0), 0.0);
    close(&v(&dy), &v(&dy0), 0.0);
    check_aux(&aux);

    let (y, f_lin, aux) = linearize_with_aux(f, &x());
    close(&v(&y), &v(&y0), 0.0);
    close(&v(&f_lin(&ct)), &v(&dy0), 1e-15);
    check_aux(&aux);
}

#[test]
fn jacobians_and_hessians_return_the_aux_undifferentiated() {
    let (jf, aux) = jacfwd_with_aux(f)(&x());
    close(&v(&jf), &v(&jacfwd(plain)(&x())), 0.0);
    check_aux(&aux);
    let (jr, aux) = jacrev_with_aux(f)(&x());
    close(&v(&jr), &v(&jacrev(plain)(&x())), 0.0);
    close(&v(&jr), &v(&jf), 1e-15);
    check_aux(&aux);
    let scalar = |x: &Tensor| {
        let (y, aux) = f(x);
        (y.sum(), aux)
    };
    let (h, aux) = hessian_with_aux(scalar)(&x());
    close(&v(&h), &v(&hessian(|x: &Tensor| plain(x).sum())(&x())), 0.0);
    check_aux(&aux);
}

#[test]
fn aux_forms_compose_with_vmap() {
    // One Jacobian and one aux per example; the aux is per-example data.
    let xs = Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 1.0, 0.0, -3.0], [2, 3]);
    let (js, (sq, label)) = vmap(jacrev_with_aux(f))(&xs);
    assert_eq!(js.shape().dims(), &[2, 3, 3]);
    close(&v(&js.narrow(0, 0, 1).reshape(&[3, 3])), &v(&jacrev(plain)(&x())), 0.0);
    close(&v(&sq), &[5.25, 10.0], 0.0);
    assert_eq!(label.shape().dims(), &[2, 1]);
    let (_, dys, (sq2, _)) = vmap(|x: &Tensor| jvp_with_aux(f, x, &Tensor::ones([3], DType::F64)))(&xs);
    assert_eq!(dys.shape().dims(), &[2, 3]);
    close(&v(&sq2), &[5.25, 10.0], 0.0);
}
