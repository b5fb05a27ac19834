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

/// `checkpoint(f)`, `custom_jvp(f, ..)` and `custom_vjp(f, ..)` of an `f`
/// that doubles its argument in place leave the argument doubled, as
/// eager `f` does (they used to return the right value and drop the
/// write), under every outer transform: the same numbers as plain `f`
/// under grad, jvp, vmap, jit and vmap of grad. The written value is
/// differentiated as ordinary code (the custom rules give the derivative
/// of the result).
#[test]
fn checkpoint_and_custom_rules_write_their_arguments_back() {
    let f = |x: &Tensor| {
        x.mul_scalar_(2.0);
        x.sin()
    };
    let cj = custom_jvp(f, |x: &Tensor, t: &Tensor| {
        let y = (x * 2.0).sin();
        let dy = (x * 2.0).cos() * t * 2.0;
        (y, dy)
    });
    let cv =
        custom_vjp(f, |x: &Tensor| ((x * 2.0).sin(), x.clone()), |x: &Tensor, ct: &Tensor| (x * 2.0).cos() * ct * 2.0)
            .with_jvp(|x: &Tensor, t: &Tensor| ((x * 2.0).sin(), (x * 2.0).cos() * t * 2.0));
    let ck = checkpoint(f);
    type Wrapped<'a> = (&'a str, Box<dyn Fn(&Tensor) -> Tensor + 'a>);
    let wrapped: Vec<Wrapped<'_>> = vec![
        ("plain", Box::new(f)),
        ("checkpoint", Box::new(&ck)),
        ("custom_jvp", Box::new(|x: &Tensor| cj.call(x))),
        ("custom_vjp", Box::new(|x: &Tensor| cv.call(x))),
    ];
    // eagerly: the value and the write
    for (name, g) in &wrapped {
        let x = t64(&[0.3, -0.2, 0.8]);
        let y = g(&x);
        assert_close(&v(&y), &[0.6f64.sin(), (-0.4f64).sin(), 1.6f64.sin()], 1e-15);
        assert_eq!(v(&x), vec![0.6, -0.4, 1.6], "{name}: the argument is written");
    }
    // under transforms: a function of x that reads both the result and the
    // written argument, against plain f
    let uses = |g: &dyn Fn(&Tensor) -> Tensor, x: &Tensor| {
        let d = x.copy();
        let y = g(&d);
        (y * &d).sum()
    };
    let x = t64(&[0.3, -0.2, 0.8]);
    let xs = m64(&[0.3, -0.2, 0.8, 0.1, 0.5, -0.7], &[2, 3]);
    let want_grad = v(&grad(|x: &Tensor| uses(&f, x))(&x));
    let want_jvp = jvp(|x: &Tensor| uses(&f, x), &x, &t64(&[1.0, 0.5, -1.0]));
    let want_vmap = v(&vmap(|x: &Tensor| uses(&f, x))(&xs));
    let want_vg = v(&vmap(grad(|x: &Tensor| uses(&f, x)))(&xs));
    for (name, g) in &wrapped {
        let h = |x: &Tensor| uses(g.as_ref(), x);
        assert_close(&v(&grad(h)(&x)), &want_grad, 1e-14);
        let (y, t) = jvp(h, &x, &t64(&[1.0, 0.5, -1.0]));
        assert_close(&[y.item_f64(), t.item_f64()], &[want_jvp.0.item_f64(), want_jvp.1.item_f64()], 1e-14);
        assert_close(&v(&vmap(h)(&xs)), &want_vmap, 1e-15);
        assert_close(&v(&vmap(grad(h))(&xs)), &want_vg, 1e-14);
        // the write reaches a mutated argument of an outer transform too
        let outer = |x: &Tensor| {
            let y = g(x);
            (&y + x).sum()
        };
        let gx = grad(|x: &Tensor| outer(&x.copy()))(&x);
        let want = grad(|x: &Tensor| {
            let d = x.copy();
            let y = f(&d);
            (&y + &d).sum()
        })(&x);
        assert_close(&v(&gx), &v(&want), 1e-14);
        // jit: the argument is written on every call
        let j = jit(|x: &Tensor| g(x));
        let a = t64(&[0.3, -0.2, 0.8]);
        let y = j(&a);
        assert_eq!(v(&a), vec![0.6, -0.4, 1.6], "{name} under jit");
        assert_close(&v(&y), &[0.6f64.sin(), (-0.4f64).sin(), 1.6f64.sin()], 1e-15);
        let _ = j(&a);
        assert_eq!(v(&a), vec![1.2, -0.8, 3.2], "{name} under jit, second call");
        // vmap writes each example's row
        let b = xs.copy();
        let _ = vmap(|x: &Tensor| g(x))(&b);
        assert_eq!(v(&b), v(&(&xs * 2.0)), "{name} under vmap");
    }
}
