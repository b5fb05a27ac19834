//! custom_jvp, custom_vjp and checkpoint: the user's rules are the ones
//! used (each differs from the true derivative, to prove it), under vmap
//! and at second order; checkpoint changes memory, not numbers.

use super::{count, diag, err, says, t64};
use crate::harness::{assert_close, on_each_device, v};
use xform::prelude::*;
use xform::{checkpoint_with, RematPolicy};

fn x3() -> Tensor {
    t64(&[0.3, -1.2, 2.0])
}

fn rows() -> Tensor {
    Key::new(30).normal([4, 3], DType::F64)
}

fn map(x: &Tensor, f: impl Fn(f64) -> f64) -> Vec<f64> {
    v(x).into_iter().map(f).collect()
}

#[test]
fn custom_jvp_rule_is_used_by_every_derivative() {
    on_each_device(|| {
        // sin with a rule that says 3 cos: not the true derivative
        let f = custom_jvp(|x: &Tensor| x.sin(), |x: &Tensor, t: &Tensor| (x.sin(), x.cos() * t * 3.0));
        let call = |x: &Tensor| f.call(x);
        let sum = |x: &Tensor| f.call(x).sum();
        let x = x3();
        let t = t64(&[1.0, -2.0, 0.5]);
        assert_close(&v(&call(&x)), &map(&x, f64::sin), 1e-15);
        let d1 = map(&x, |x| 3.0 * x.cos());
        assert_close(&v(&grad(sum)(&x)), &d1, 1e-14);
        let (y, ty) = jvp(call, &x, &t);
        assert_close(&v(&y), &map(&x, f64::sin), 1e-15);
        let want: Vec<f64> = d1.iter().zip(v(&t)).map(|(d, t)| d * t).collect();
        assert_close(&v(&ty), &want, 1e-14);
        let (_, back) = vjp(call, &x);
        assert_close(&v(&back(&t)), &want, 1e-14);
        assert_close(&v(&jacfwd(call)(&x)), &diag(&d1), 1e-14);
        assert_close(&v(&jacrev(call)(&x)), &diag(&d1), 1e-14);
        // second order differentiates the rule: d/dx 3 cos x = -3 sin x (what jax.hessian gives
        // for a jax.custom_jvp with this defjvp)
        let d2 = map(&x, |x| -3.0 * x.sin());
        assert_close(&v(&hessian(sum)(&x)), &diag(&d2), 1e-13);
        assert_close(&v(&grad(|x: &Tensor| grad(sum)(x).sum())(&x)), &d2, 1e-13);
        // under vmap, the function and the rule are batched
        let xs = rows();
        let ys = vmap(call)(&xs);
        assert_close(&v(&ys), &map(&xs, f64::sin), 1e-15);
        let per = vmap(grad(sum))(&xs);
        assert_close(&v(&per), &map(&xs, |x| 3.0 * x.cos()), 1e-14);
        let whole = grad(|xs: &Tensor| vmap(sum)(xs).sum())(&xs);
        assert_close(&v(&whole), &map(&xs, |x| 3.0 * x.cos()), 1e-14);
        let (_, tys) = jvp(vmap(call), &xs, &Tensor::ones([4, 3], DType::F64));
        assert_close(&v(&tys), &map(&xs, |x| 3.0 * x.cos()), 1e-14);
    })
}

#[test]
fn custom_jvp_over_a_tree() {
    on_each_device(|| {
        // f(a, b) = a * b with the rule's tangent 2 (ta b + a tb)
        let f = custom_jvp(
            |(a, b): &(Tensor, Tensor)| a * b,
            |(a, b): &(Tensor, Tensor), (ta, tb): &(Tensor, Tensor)| (a * b, (ta * b + a * tb) * 2.0),
        );
        let (a, b) = (t64(&[1.0, 2.0]), t64(&[3.0, -4.0]));
        let g = grad(|p: &(Tensor, Tensor)| f.call(p).sum())(&(a.clone(), b.clone()));
        assert_close(&v(&g.0), &[6.0, -8.0], 1e-15);
        assert_close(&v(&g.1), &[2.0, 4.0], 1e-15);
    })
}

#[test]
fn custom_jvp_refuses_to_differentiate_a_captured_value() {
    let x = x3();
    // c is traced by grad and captured by the function and the rule
    let e = err(|| {
        grad(|c: &Tensor| {
            let f = custom_jvp(|x: &Tensor| x * c, |x: &Tensor, t: &Tensor| (x * c, t * c));
            f.call(&x).sum()
        })(&Tensor::scalar(2.0f64))
    });
    says(&e, &["custom_jvp", "capture", "argument"]);
    // a captured value that is not differentiated is fine
    let c = Tensor::scalar(2.0f64);
    let f = custom_jvp(|x: &Tensor| x * &c, |x: &Tensor, t: &Tensor| (x * &c, t * &c * 5.0));
    assert_close(&v(&grad(|x: &Tensor| f.call(x).sum())(&x)), &[10.0; 3], 1e-15);
    // and under vmap a captured batched value is just batched
    let cs = t64(&[1.0, 2.0]);
    let got = vmap(|c: &Tensor| {
        let f = custom_jvp(|x: &Tensor| x * c, |x: &Tensor, t: &Tensor| (x * c, t * c));
        grad(move |x: &Tensor| f.call(x).sum())(&x)
    })(&cs);
    assert_close(&v(&got), &[1.0, 1.0, 1.0, 2.0, 2.0, 2.0], 1e-15);
}

#[test]
fn custom_vjp_bwd_is_used_by_reverse_mode() {
    on_each_device(|| {
        // sin whose bwd says 2 cos (residual: cos x from fwd)
        let f =
            custom_vjp(|x: &Tensor| x.sin(), |x: &Tensor| (x.sin(), x.cos()), |r: &Tensor, ct: &Tensor| r * ct * 2.0);
        let sum = |x: &Tensor| f.call(x).sum();
        let x = x3();
        assert_close(&v(&f.call(&x)), &map(&x, f64::sin), 1e-15);
        let d1 = map(&x, |x| 2.0 * x.cos());
        assert_close(&v(&grad(sum)(&x)), &d1, 1e-14);
        let (_, back) = vjp(|x: &Tensor| f.call(x), &x);
        assert_close(&v(&back(&t64(&[1.0, 1.0, 1.0]))), &d1, 1e-14);
        assert_close(&v(&jacrev(|x: &Tensor| f.call(x))(&x)), &diag(&d1), 1e-14);
        // vmap(grad) and grad(vmap)
        let xs = rows();
        assert_close(&v(&vmap(grad(sum))(&xs)), &map(&xs, |x| 2.0 * x.cos()), 1e-14);
        assert_close(&v(&grad(|xs: &Tensor| vmap(sum)(xs).sum())(&xs)), &map(&xs, |x| 2.0 * x.cos()), 1e-14);
        // grad of grad: bwd (and fwd's residual) are differentiated: d/dx 2 cos x = -2 sin x
        let gg = grad(|x: &Tensor| grad(sum)(x).sum())(&x);
        assert_close(&v(&gg), &map(&x, |x| -2.0 * x.sin()), 1e-13);
        // vmap of grad of grad
        let per = vmap(grad(|x: &Tensor| grad(sum)(x).sum()))(&xs);
        assert_close(&v(&per), &map(&xs, |x| -2.0 * x.sin()), 1e-13);
    })
}

#[test]
fn custom_vjp_forward_mode_needs_a_jvp_rule() {
    on_each_device(|| {
        let f =
            custom_vjp(|x: &Tensor| x.sin(), |x: &Tensor| (x.sin(), x.cos()), |r: &Tensor, ct: &Tensor| r * ct * 2.0);
        let x = x3();
        let t = t64(&[1.0, -2.0, 0.5]);
        let e = err(|| jvp(|x: &Tensor| f.call(x), &x, &t));
        says(&e, &["custom_vjp", "JVP rule", "with_jvp"]);
        let e = err(|| jacfwd(|x: &Tensor| f.call(x))(&x));
        says(&e, &["JVP rule"]);
        // hessian is forward over reverse: the forward pass differentiates fwd and bwd themselves,
        // as JAX does: @jax.custom_vjp def f(x): return jnp.sin(x)
        // f.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda r, ct: (r * ct * 2.0,))
        // jax.hessian(lambda x: jnp.sum(f(x)))(jnp.array([0.3, -1.2, 2.0])) = diag(-2 sin x)
        let h = hessian(|x: &Tensor| f.call(x).sum())(&x);
        assert_close(&v(&h), &diag(&[-0.5910404133226791, 1.8640781719344526, -1.8185948536513634]), 1e-14);
        // with a JVP rule (5 cos: again not the truth), forward mode uses it and reverse mode keeps bwd
        let f = f.with_jvp(|x: &Tensor, t: &Tensor| (x.sin(), x.cos() * t * 5.0));
        let call = |x: &Tensor| f.call(x);
        let (y, ty) = jvp(call, &x, &t);
        assert_close(&v(&y), &map(&x, f64::sin), 1e-15);
        let want: Vec<f64> = v(&x).iter().zip(v(&t)).map(|(x, t)| 5.0 * x.cos() * t).collect();
        assert_close(&v(&ty), &want, 1e-14);
        assert_close(&v(&jacfwd(call)(&x)), &diag(&map(&x, |x| 5.0 * x.cos())), 1e-14);
        assert_close(&v(&grad(|x: &Tensor| f.call(x).sum())(&x)), &map(&x, |x| 2.0 * x.cos()), 1e-14);
        let xs = rows();
        let (_, tys) = jvp(vmap(call), &xs, &Tensor::ones([4, 3], DType::F64));
        assert_close(&v(&tys), &map(&xs, |x| 5.0 * x.cos()), 1e-14);
    })
}

/// A block with a matrix product, for the Products policy.
fn block(p: &(Tensor, Tensor)) -> Tensor {
    let (w, x) = p;
    (x.matmul(w).tanh().matmul(w).sin() * x).sum()
}

fn block_params() -> (Tensor, Tensor) {
    let k = Key::new(31);
    (k.fold_in(1).normal([3, 3], DType::F64), k.fold_in(2).normal([4, 3], DType::F64))
}

#[test]
fn checkpoint_gives_the_same_numbers() {
    on_each_device(|| {
        let p = block_params();
        let base = grad(block)(&p);
        let base_h = hessian(|x: &Tensor| block(&(p.0.clone(), x.clone())))(&p.1);
        for policy in [RematPolicy::Nothing, RematPolicy::Products] {
            let c = checkpoint_with(block, policy);
            assert_close(&[c(&p).item_f64()], &[block(&p).item_f64()], 1e-15);
            let g = grad(&c)(&p);
            assert_close(&v(&g.0), &v(&base.0), 1e-13);
            assert_close(&v(&g.1), &v(&base.1), 1e-13);
            let h = hessian(|x: &Tensor| c(&(p.0.clone(), x.clone())))(&p.1);
            assert_close(&v(&h), &v(&base_h), 1e-12);
            let t = (Tensor::ones([3, 3], DType::F64), Tensor::ones([4, 3], DType::F64));
            assert_close(&v(&jvp(&c, &p, &t).1), &v(&jvp(block, &p, &t).1), 1e-13);
        }
        // the plain form
        let c = checkpoint(|x: &Tensor| x.sin().exp());
        let x = x3();
        let g = grad(|x: &Tensor| c(x).sum())(&x);
        assert_close(&v(&g), &map(&x, |x| x.cos() * x.sin().exp()), 1e-14);
    })
}

#[test]
fn checkpoint_composes_with_vmap() {
    on_each_device(|| {
        let (w, _) = block_params();
        let xs = Key::new(32).normal([5, 4, 3], DType::F64);
        let f = |x: &Tensor| block(&(w.clone(), x.clone()));
        let c = checkpoint(f);
        let cp = checkpoint_with(f, RematPolicy::Products);
        for i in 0..5 {
            let want = grad(f)(&xs.select(0, i));
            assert_close(&v(&vmap(grad(&c))(&xs).select(0, i)), &v(&want), 1e-13);
            assert_close(&v(&grad(|xs: &Tensor| vmap(&cp)(xs).sum())(&xs).select(0, i)), &v(&want), 1e-13);
        }
        // a checkpoint of a vmap, and a vmap inside a checkpoint, under grad
        let cv = checkpoint(|xs: &Tensor| vmap(f)(xs).sum());
        let g = grad(&cv)(&xs);
        let plain = grad(|xs: &Tensor| vmap(f)(xs).sum())(&xs);
        assert_close(&v(&g), &v(&plain), 1e-13);
        // per-example gradients w.r.t. shared weights through the checkpoint
        let per = vmap(|x: &Tensor| grad(|w: &Tensor| checkpoint(block)(&(w.clone(), x.clone())))(&w))(&xs);
        for i in 0..5 {
            let want = grad(|w: &Tensor| block(&(w.clone(), xs.select(0, i))))(&w);
            assert_close(&v(&per.select(0, i)), &v(&want), 1e-13);
        }
    })
}

#[test]
fn trace_of_grad_shows_the_recomputation() {
    let f = |x: &Tensor| (x.sin().exp() * x).sum();
    let x = x3();
    let plain = trace(grad(f), &x).to_string();
    let c = checkpoint(f);
    let prog = trace(grad(|x: &Tensor| c(x)), &x);
    let text = prog.to_string();
    assert!(text.contains("checkpoint"), "{text}");
    // the forward pass (sin, exp) appears again in the backward pass
    assert_eq!(count(&plain, "sin"), 1, "{plain}");
    assert!(count(&text, "sin") >= 2, "no recomputation of sin: {text}");
    assert!(count(&text, "exp") > count(&plain, "exp"), "no recomputation of exp: {text}\nvs\n{plain}");
    assert_close(&v(&prog.eval(std::slice::from_ref(&x)).unwrap()[0]), &v(&grad(f)(&x)), 1e-14);
    // the Products policy keeps the matmul's result: no second matmul for the forward pass
    let p = block_params();
    let cp = checkpoint_with(block, RematPolicy::Products);
    let cn = checkpoint_with(block, RematPolicy::Nothing);
    let tp = trace(grad(&cp), &p).to_string();
    let tn = trace(grad(&cn), &p).to_string();
    assert!(tp.contains("checkpoint") && tn.contains("checkpoint"), "{tp}\n{tn}");
    assert!(count(&tn, "tanh") >= 2, "{tn}");
    assert!(count(&tp, "dot_general") < count(&tn, "dot_general"), "Products saves the products:\n{tp}\nvs\n{tn}");
}
