//! In-place ops inside control-flow bodies: writes to a body's own copies
//! give the pure result under every transform; writes that would leak a
//! traced value out of a body are refused; writes to a body's operand.

use super::{err, m64, says, t64};
use crate::harness::{assert_close, v};
use xform::functionalize;
use xform::prelude::*;

#[test]
fn scan_and_while_bodies_mutating_copies_equal_the_pure_version() {
    let xs = m64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let f = |c: &Tensor| {
        let step = |c: &Tensor, x: &Tensor| {
            let d = c.copy();
            d.mul_(x);
            d.add_scalar_(1.0);
            (d.sin(), ())
        };
        scan(step, c, &xs).0.sum()
    };
    let pure = |c: &Tensor| scan(|c: &Tensor, x: &Tensor| (((c * x) + 1.0).sin(), ()), c, &xs).0.sum();
    let c0 = t64(&[0.1, 0.2]);
    assert_close(&[f(&c0).item_f64()], &[pure(&c0).item_f64()], 1e-15);
    assert_close(&[functionalize(f)(&c0).item_f64()], &[pure(&c0).item_f64()], 1e-15);
    assert_close(&v(&grad(f)(&c0)), &v(&grad(pure)(&c0)), 1e-14);
    let cs = m64(&[0.1, 0.2, 0.3, 0.4], &[2, 2]);
    assert_close(&v(&vmap(f)(&cs)), &v(&vmap(pure)(&cs)), 1e-15);
    assert_close(&v(&vmap(grad(f))(&cs)), &v(&vmap(grad(pure))(&cs)), 1e-14);
    let text = trace(functionalize(f), &c0).to_string();
    assert!(text.contains("scan[") && !text.contains("mul_") && !text.contains("add_"), "{text}");
    // a while body: 1.5 x + sin x written in place into a copy
    let w = |x: &Tensor| {
        let body = |x: &Tensor| {
            let d = x.copy();
            d.mul_scalar_(1.5);
            d.add_(&x.sin());
            d
        };
        while_loop(|x: &Tensor| x.sum().lt_scalar(10.0), body, x).sum()
    };
    let wp = |x: &Tensor| while_loop(|x: &Tensor| x.sum().lt_scalar(10.0), |x: &Tensor| x * 1.5 + x.sin(), x).sum();
    let xs = m64(&[0.7, 1.1, 0.2, 0.3], &[2, 2]);
    assert_close(&v(&vmap(grad(w))(&xs)), &v(&vmap(grad(wp))(&xs)), 1e-14);
    assert_close(&v(&functionalize(vmap(w))(&xs)), &v(&vmap(wp)(&xs)), 1e-14);
}

#[test]
fn a_branch_writing_into_an_outer_tensor_is_refused() {
    let x = t64(&[0.3, -0.2, 0.8]);
    let buf = Tensor::zeros([3], DType::F64);
    let e = err(|| {
        cond(
            &Tensor::scalar(true),
            |x: &Tensor| {
                buf.add_(x);
                x * 2.0
            },
            |x: &Tensor| x.clone(),
            &x,
        )
    });
    says(&e, &["add_", "cond", "outside"]);
    assert_eq!(v(&buf), vec![0.0; 3], "the outer tensor is unchanged");
}

#[test]
fn a_branch_writing_into_its_operand_writes_back_as_eager_code_does() {
    let bump = |x: &Tensor| {
        x.add_scalar_(1.0);
        x * 2.0
    };
    let eager = t64(&[0.3, -0.2, 0.8]);
    let _ = bump(&eager);
    let y = t64(&[0.3, -0.2, 0.8]);
    let out = cond(&Tensor::scalar(true), bump, |x: &Tensor| x.clone(), &y);
    assert_close(&v(&out), &[2.6, 1.6, 3.6], 1e-15);
    assert_eq!(v(&y), v(&eager), "the write reaches the operand, as without cond");
}
