//! cond and switch: only the taken branch under the derivatives (the
//! untaken one would give NaN), both branches and a select under vmap with
//! a batched predicate, nested programs under trace, functionalize.

use super::{count, diag, finite, m64, t64};
use crate::harness::{assert_close, on_each_device, v};
use xform::functionalize;
use xform::prelude::*;

/// x[0] > 0: x^1.5 (NaN for negative x); else x log(-x) (NaN for positive x).
fn branchy(x: &Tensor) -> Tensor {
    cond(&x.select(0, 0).gt_scalar(0.0), |x: &Tensor| x.sqrt() * x, |x: &Tensor| (-x).log() * x, x)
}

fn pos() -> Tensor {
    t64(&[0.5, 1.5, 2.0])
}

fn neg() -> Tensor {
    t64(&[-0.5, -1.5, -2.0])
}

/// The taken branch's value, first and second derivatives (closed forms;
/// JAX agrees: `jax.hessian(lambda x: jnp.sum(lax.cond(x[0] > 0, lambda x:
/// jnp.sqrt(x) * x, lambda x: jnp.log(-x) * x, x)))(x)` is finite).
fn branchy_ref(x: f64) -> (f64, f64, f64) {
    if x > 0.0 {
        (x.powf(1.5), 1.5 * x.sqrt(), 0.75 / x.sqrt())
    } else {
        (x * (-x).ln(), (-x).ln() + 1.0, 1.0 / x)
    }
}

fn refs(x: &Tensor) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let r: Vec<(f64, f64, f64)> = v(x).iter().map(|&e| branchy_ref(e)).collect();
    (r.iter().map(|r| r.0).collect(), r.iter().map(|r| r.1).collect(), r.iter().map(|r| r.2).collect())
}

#[test]
fn cond_eager_runs_the_taken_branch() {
    on_each_device(|| {
        for x in [pos(), neg()] {
            let y = branchy(&x);
            finite("value", &y);
            assert_close(&v(&y), &refs(&x).0, 1e-14);
        }
        // a literal predicate, and a tree of operands and results
        let a = t64(&[1.0, 2.0]);
        let b = t64(&[3.0, 4.0]);
        let swap = |p: bool| {
            cond(
                &Tensor::scalar(p),
                |(a, b): &(Tensor, Tensor)| (b.clone(), a * 10.0),
                |(a, b): &(Tensor, Tensor)| (a.clone(), b * 10.0),
                &(a.clone(), b.clone()),
            )
        };
        let (p, q) = swap(true);
        assert_eq!((v(&p), v(&q)), (vec![3.0, 4.0], vec![10.0, 20.0]));
        let (p, q) = swap(false);
        assert_eq!((v(&p), v(&q)), (vec![1.0, 2.0], vec![30.0, 40.0]));
    })
}

#[test]
fn cond_derivatives_use_only_the_taken_branch() {
    on_each_device(|| {
        let t = t64(&[1.0, -2.0, 0.5]);
        let sum = |x: &Tensor| branchy(x).sum();
        for x in [pos(), neg()] {
            let (y, d1, d2) = refs(&x);
            let g = grad(sum)(&x);
            finite("grad", &g);
            assert_close(&v(&g), &d1, 1e-13);
            let (val, g2) = value_and_grad(sum)(&x);
            assert_close(&[val.item_f64()], &[y.iter().sum()], 1e-13);
            assert_close(&v(&g2), &d1, 1e-13);
            let (p, tan) = jvp(branchy, &x, &t);
            finite("jvp", &tan);
            assert_close(&v(&p), &y, 1e-13);
            let want: Vec<f64> = d1.iter().zip(v(&t)).map(|(d, t)| d * t).collect();
            assert_close(&v(&tan), &want, 1e-13);
            let (_, lin) = linearize(branchy, &x);
            assert_close(&v(&lin(&t)), &want, 1e-13);
            for (name, j) in [("jacfwd", jacfwd(branchy)(&x)), ("jacrev", jacrev(branchy)(&x))] {
                finite(name, &j);
                assert_eq!(j.shape().dims(), &[3, 3]);
                assert_close(&v(&j), &diag(&d1), 1e-13);
            }
            let h = hessian(sum)(&x);
            finite("hessian", &h);
            assert_close(&v(&h), &diag(&d2), 1e-12);
        }
    })
}

/// Three branches, each NaN somewhere the others are finite.
fn three(i: &Tensor, x: &Tensor) -> Tensor {
    switch(i, &[&|x: &Tensor| x.sqrt(), &|x: &Tensor| x * x * x, &|x: &Tensor| x.log() * 2.0], x)
}

#[test]
fn switch_derivatives_use_only_the_taken_branch() {
    on_each_device(|| {
        // branch 1 (x^3) at negative x: the others are NaN there
        let x = t64(&[-0.5, -1.5, -2.0]);
        let i = Tensor::scalar(1i32);
        let f = |x: &Tensor| three(&i, x);
        let sum = |x: &Tensor| three(&i, x).sum();
        let xs = v(&x);
        let d1: Vec<f64> = xs.iter().map(|x| 3.0 * x * x).collect();
        let y = f(&x);
        finite("value", &y);
        assert_close(&v(&y), &xs.iter().map(|x| x * x * x).collect::<Vec<_>>(), 1e-14);
        let g = grad(sum)(&x);
        finite("grad", &g);
        assert_close(&v(&g), &d1, 1e-13);
        let (_, tan) = jvp(f, &x, &Tensor::ones([3], DType::F64));
        assert_close(&v(&tan), &d1, 1e-13);
        for j in [jacfwd(f)(&x), jacrev(f)(&x)] {
            finite("jacobian", &j);
            assert_close(&v(&j), &diag(&d1), 1e-13);
        }
        let h = hessian(sum)(&x);
        finite("hessian", &h);
        assert_close(&v(&h), &diag(&xs.iter().map(|x| 6.0 * x).collect::<Vec<_>>()), 1e-12);
    })
}

#[test]
fn switch_clamps_its_index() {
    on_each_device(|| {
        // JAX: lax.switch clamps the index to [0, len(branches) - 1]
        let x = t64(&[0.5, 1.5, 2.0]);
        let xs = v(&x);
        let sqrt: Vec<f64> = xs.iter().map(|x| x.sqrt()).collect();
        let cube: Vec<f64> = xs.iter().map(|x| x * x * x).collect();
        let log2: Vec<f64> = xs.iter().map(|x| 2.0 * x.ln()).collect();
        for (i, want) in [(-3, &sqrt), (-1, &sqrt), (0, &sqrt), (1, &cube), (2, &log2), (3, &log2), (70, &log2)] {
            assert_close(&v(&three(&Tensor::scalar(i), &x)), want, 1e-14);
        }
        assert_close(&v(&three(&Tensor::scalar(-5i64), &x)), &sqrt, 1e-14);
        // under grad, the clamped branch is the one differentiated
        let g = grad(|x: &Tensor| three(&Tensor::scalar(9i32), x).sum())(&x);
        assert_close(&v(&g), &xs.iter().map(|x| 2.0 / x).collect::<Vec<_>>(), 1e-13);
        let g = grad(|x: &Tensor| three(&Tensor::scalar(-9i32), x).sum())(&x);
        assert_close(&v(&g), &xs.iter().map(|x| 0.5 / x.sqrt()).collect::<Vec<_>>(), 1e-13);
    })
}

/// `cond` with an integer predicate, on 1.0: +100 when true, -100 when false.
fn int_cond(p: i32) -> f64 {
    let x = Tensor::scalar(1.0f64);
    cond(&Tensor::scalar(p), |x: &Tensor| x + 100.0, |x: &Tensor| x - 100.0, &x).item_f64()
}

#[test]
fn cond_with_an_integer_predicate() {
    // for p in [0, 1, 2, 7]: lax.cond(jnp.int32(p), lambda x: x + 100., lambda x: x - 100., 1.0)
    // -> -99, 101, 101, 101
    assert_eq!(int_cond(0), -99.0);
    assert_eq!(int_cond(1), 101.0);
    assert_eq!(int_cond(2), 101.0);
    assert_eq!(int_cond(7), 101.0);
}

#[test]
fn cond_with_a_negative_integer_predicate_is_true_as_in_jax() {
    // lax.cond(jnp.int32(-1), lambda x: x + 100., lambda x: x - 100., 1.0) -> 101.0 (JAX 0.10.2:
    // `if pred_dtype.kind in 'iuf': pred = pred != 0` in lax/control_flow/conditionals.py)
    assert_eq!(int_cond(-1), 101.0);
}

/// Rows of mixed signs: some take each branch.
fn rows() -> Tensor {
    m64(&[0.3, -1.2, 2.0, -0.7, 0.1, -0.9, 1.5, 0.2, -0.4, -2.0, 0.6, 0.8], &[4, 3])
}

/// Both branches finite everywhere, so vmap's select sees no NaN.
fn smooth(x: &Tensor) -> Tensor {
    cond(&x.sum().gt_scalar(0.0), |x: &Tensor| x.sin() * x, |x: &Tensor| x.cos() * x * x, x)
}

/// d/dx of sum(smooth) per branch.
fn smooth_grad(x: &[f64]) -> Vec<f64> {
    let s: f64 = x.iter().sum();
    x.iter().map(|&x| if s > 0.0 { x.cos() * x + x.sin() } else { 2.0 * x * x.cos() - x * x * x.sin() }).collect()
}

#[test]
fn vmap_of_cond_with_a_batched_predicate_selects_per_example() {
    on_each_device(|| {
        let xs = rows();
        let sums: Vec<f64> = (0..4).map(|i| v(&xs.select(0, i)).iter().sum()).collect();
        assert!(sums.iter().any(|&s| s > 0.0) && sums.iter().any(|&s| s <= 0.0), "both branches taken: {sums:?}");
        let got = vmap(smooth)(&xs);
        assert_eq!(got.shape().dims(), &[4, 3]);
        for i in 0..4 {
            assert_close(&v(&got.select(0, i)), &v(&smooth(&xs.select(0, i))), 1e-15);
        }
        // a batched predicate over unbatched operands
        let c = t64(&[0.25, -1.0]);
        let ps = t64(&[1.0, -1.0, 0.0, 2.0]);
        let got = vmap(|p: &Tensor| cond(&p.gt_scalar(0.0), |c: &Tensor| c.sin(), |c: &Tensor| c.cos(), &c))(&ps);
        for (i, p) in v(&ps).iter().enumerate() {
            let want = if *p > 0.0 { c.sin() } else { c.cos() };
            assert_close(&v(&got.select(0, i as isize)), &v(&want), 1e-15);
        }
        // a batched switch index, clamped per example
        let idx = Tensor::from_vec(vec![-1i32, 0, 1, 5], [4]);
        let xp = m64(&[0.5, 1.5, 2.0, 0.1, 0.2, 0.3, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[4, 3]);
        let got = vmap(|(i, x): &(Tensor, Tensor)| three(i, x))(&(idx.clone(), xp.clone()));
        for (k, i) in [-1i32, 0, 1, 5].into_iter().enumerate() {
            let want = three(&Tensor::scalar(i), &xp.select(0, k as isize));
            assert_close(&v(&got.select(0, k as isize)), &v(&want), 1e-15);
        }
    })
}

#[test]
fn vmap_of_cond_with_an_unbatched_predicate() {
    on_each_device(|| {
        let xs = rows();
        for p in [true, false] {
            let pred = Tensor::scalar(p);
            let f = |x: &Tensor| cond(&pred, |x: &Tensor| x.sin() * x, |x: &Tensor| x.cos() * x * x, x);
            let got = vmap(f)(&xs);
            for i in 0..4 {
                assert_close(&v(&got.select(0, i)), &v(&f(&xs.select(0, i))), 1e-15);
            }
        }
    })
}

#[test]
fn cond_composes_with_vmap_and_derivatives() {
    on_each_device(|| {
        let xs = rows();
        let f = |x: &Tensor| smooth(x).sum();
        // vmap(grad): a batched predicate inside grad
        let per = vmap(grad(f))(&xs);
        // grad(vmap): the summed per-example losses
        let whole = grad(|xs: &Tensor| vmap(f)(xs).sum())(&xs);
        for i in 0..4 {
            let want = smooth_grad(&v(&xs.select(0, i)));
            assert_close(&v(&per.select(0, i)), &want, 1e-13);
            assert_close(&v(&whole.select(0, i)), &want, 1e-13);
            assert_close(&v(&grad(f)(&xs.select(0, i))), &want, 1e-13);
        }
        // jvp(vmap) equals a loop of jvp
        let ts = m64(&[1.0, 0.5, -1.0, 2.0, 0.0, 1.0, -0.3, 0.7, 1.1, 0.2, -0.6, 0.9], &[4, 3]);
        let (ys, tys) = jvp(vmap(smooth), &xs, &ts);
        for i in 0..4 {
            let (y, ty) = jvp(smooth, &xs.select(0, i), &ts.select(0, i));
            assert_close(&v(&ys.select(0, i)), &v(&y), 1e-14);
            assert_close(&v(&tys.select(0, i)), &v(&ty), 1e-13);
        }
        // vmap(vmap): both levels batch the predicate
        let xss = Tensor::stack(&[xs.clone(), &xs * -0.5], 0);
        let got = vmap(vmap(smooth))(&xss);
        assert_eq!(got.shape().dims(), &[2, 4, 3]);
        for a in 0..2 {
            for b in 0..4 {
                let want = smooth(&xss.select(0, a).select(0, b));
                assert_close(&v(&got.select(0, a).select(0, b)), &v(&want), 1e-15);
            }
        }
        // vmap(vmap(grad)) too
        let got = vmap(vmap(grad(f)))(&xss);
        for a in 0..2 {
            for b in 0..4 {
                let want = smooth_grad(&v(&xss.select(0, a).select(0, b)));
                assert_close(&v(&got.select(0, a).select(0, b)), &want, 1e-13);
            }
        }
    })
}

#[test]
fn trace_keeps_cond_as_a_nested_program() {
    let prog = trace(branchy, &pos());
    let text = prog.to_string();
    assert_eq!(prog.eqns.iter().filter(|e| e.prim.name() == "cond").count(), 1, "{text}");
    super::says(&text, &["cond[", "branches=("]);
    // each branch once, nested inside the cond (the printed sub-programs)
    assert_eq!(count(&text, "sqrt"), 1, "{text}");
    assert_eq!(count(&text, "log"), 1, "{text}");
    let (before, nested) = text.split_once("branches=(").unwrap();
    assert!(!before.contains("sqrt") && nested.contains("sqrt") && nested.contains("log"), "{text}");
    // the program chooses at run time
    for x in [pos(), neg()] {
        let y = prog.eval(std::slice::from_ref(&x)).unwrap();
        assert_close(&v(&y[0]), &refs(&x).0, 1e-14);
    }
    // trace(grad): the derivative stays a cond too, and still picks
    let g = trace(grad(|x: &Tensor| branchy(x).sum()), &pos());
    let gt = g.to_string();
    assert!(gt.contains("cond["), "{gt}");
    for x in [pos(), neg()] {
        let y = g.eval(std::slice::from_ref(&x)).unwrap();
        finite("traced grad", &y[0]);
        assert_close(&v(&y[0]), &refs(&x).1, 1e-13);
    }
}

#[test]
fn functionalize_keeps_cond_and_removes_branch_mutation() {
    // each branch writes into its own copy of the operand, and through a view of it
    let f = |x: &Tensor| {
        cond(
            &x.sum().gt_scalar(0.0),
            |x: &Tensor| {
                let y = x.copy();
                y.add_(&x.sin());
                y.slice(s![1..]).mul_scalar_(2.0);
                y
            },
            |x: &Tensor| {
                let y = x.copy();
                y.mul_(x);
                y.sub_scalar_(1.0);
                y
            },
            x,
        )
    };
    let pure = |x: &Tensor| {
        let xs = v(x);
        if xs.iter().sum::<f64>() > 0.0 {
            xs.iter().enumerate().map(|(i, x)| (x + x.sin()) * if i > 0 { 2.0 } else { 1.0 }).collect::<Vec<_>>()
        } else {
            xs.iter().map(|x| x * x - 1.0).collect()
        }
    };
    for x in [t64(&[0.3, -0.2, 0.8]), t64(&[-0.3, 0.2, -0.8])] {
        let before = v(&x);
        assert_close(&v(&f(&x)), &pure(&x), 1e-15);
        assert_close(&v(&functionalize(f)(&x)), &pure(&x), 1e-15);
        assert_eq!(v(&x), before, "the operand itself is not written");
        let prog = trace(functionalize(f), &x);
        let text = prog.to_string();
        assert!(text.contains("cond["), "{text}");
        for op in ["add_", "mul_", "sub_", "copy_"] {
            assert!(!text.contains(op), "{op} left in {text}");
        }
        assert_close(&v(&prog.eval(std::slice::from_ref(&x)).unwrap()[0]), &pure(&x), 1e-15);
        // and grad through the mutating branches
        let g = grad(|x: &Tensor| f(x).sum())(&x);
        let xs = v(&x);
        let want: Vec<f64> = if xs.iter().sum::<f64>() > 0.0 {
            xs.iter().enumerate().map(|(i, x)| (1.0 + x.cos()) * if i > 0 { 2.0 } else { 1.0 }).collect()
        } else {
            xs.iter().map(|x| 2.0 * x).collect()
        };
        assert_close(&v(&g), &want, 1e-14);
    }
}

#[test]
fn batched_predicate_with_nan_in_the_untaken_branch_stays_finite() {
    on_each_device(|| {
        // one row per branch; each row is NaN in the other branch. JAX keeps every result finite:
        // f = lambda x: jnp.sum(lax.cond(x[0] > 0, lambda x: jnp.sqrt(x) * x, lambda x: jnp.log(-x) * x, x))
        // xs = jnp.array([[0.5, 1.5, 2.0], [-0.5, -1.5, -2.0]])
        // jax.vmap(f)(xs), jax.vmap(jax.grad(f))(xs), jax.grad(lambda xs: jnp.sum(jax.vmap(f)(xs)))(xs),
        // jax.jvp(jax.vmap(f), (xs,), (jnp.ones_like(xs),)), jax.vmap(jax.hessian(f))(xs): the closed forms
        let xs = Tensor::stack(&[pos(), neg()], 0);
        let sum = |x: &Tensor| branchy(x).sum();
        let (r0, r1) = (refs(&pos()), refs(&neg()));
        let ys = vmap(sum)(&xs);
        assert_close(&v(&ys), &[r0.0.iter().sum(), r1.0.iter().sum()], 1e-14);
        let want_g: Vec<f64> = r0.1.iter().chain(&r1.1).copied().collect();
        let g = vmap(grad(sum))(&xs);
        finite("vmap(grad)", &g);
        assert_close(&v(&g), &want_g, 1e-13);
        let (_, t) = jvp(vmap(sum), &xs, &Tensor::ones([2, 3], DType::F64));
        finite("jvp(vmap)", &t);
        assert_close(&v(&t), &[r0.1.iter().sum(), r1.1.iter().sum()], 1e-13);
        let h = vmap(hessian(sum))(&xs);
        finite("vmap(hessian)", &h);
        let want_h: Vec<f64> = diag(&r0.2).into_iter().chain(diag(&r1.2)).collect();
        assert_close(&v(&h), &want_h, 1e-12);
    })
}

#[test]
fn grad_of_vmap_with_nan_in_the_untaken_branch_stays_finite() {
    // jax.grad(lambda xs: jnp.sum(jax.vmap(f)(xs)))(xs) = [[1.06066017, 1.83711731, 2.12132034],
    //     [0.30685282, 1.40546511, 1.69314718]] (f, xs as in the test above): the closed forms
    let xs = Tensor::stack(&[pos(), neg()], 0);
    let want: Vec<f64> = refs(&pos()).1.into_iter().chain(refs(&neg()).1).collect();
    let g = grad(|xs: &Tensor| vmap(|x: &Tensor| branchy(x).sum())(xs).sum())(&xs);
    finite("grad(vmap)", &g);
    assert_close(&v(&g), &want, 1e-13);
}

#[test]
fn branches_capture_traced_values() {
    on_each_device(|| {
        // each branch captures a different value; grad is taken w.r.t. the captured ones
        let x = t64(&[0.5, -1.0, 2.0]);
        let f = |(a, b): &(Tensor, Tensor), p: bool| {
            cond(&Tensor::scalar(p), |x: &Tensor| (x * a).sin(), |x: &Tensor| x * x * b, &x).sum()
        };
        let ab = (Tensor::scalar(0.7f64), Tensor::scalar(-1.3f64));
        let xs = v(&x);
        let g = grad(|p: &(Tensor, Tensor)| f(p, true))(&ab);
        assert_close(&[g.0.item_f64()], &[xs.iter().map(|x| x * (0.7 * x).cos()).sum()], 1e-14);
        assert_eq!(g.1.item_f64(), 0.0);
        let g = grad(|p: &(Tensor, Tensor)| f(p, false))(&ab);
        assert_eq!(g.0.item_f64(), 0.0);
        assert_close(&[g.1.item_f64()], &[xs.iter().map(|x| x * x).sum()], 1e-14);
        // no operands at all: the branches return what they capture; a batched predicate selects
        let (a, b) = (t64(&[1.0, 2.0]), t64(&[10.0, 20.0]));
        let pick = |p: &Tensor| cond(&p.gt_scalar(0.0), |_: &()| a.clone(), |_: &()| &b * 2.0, &());
        assert_eq!(v(&vmap(pick)(&t64(&[1.0, -1.0]))), vec![1.0, 2.0, 20.0, 40.0]);
        // vmap over the captured value with an unbatched predicate, and vmap(grad) w.r.t. it
        let ws = t64(&[0.1, 0.2, 0.3]);
        let per = vmap(grad(|w: &Tensor| {
            cond(&Tensor::scalar(true), |x: &Tensor| (x * w).sin(), |x: &Tensor| x.clone(), &x).sum()
        }))(&ws);
        for (i, w) in v(&ws).iter().enumerate() {
            assert_close(&[v(&per)[i]], &[xs.iter().map(|x| x * (w * x).cos()).sum()], 1e-14);
        }
        // a batched switch index under vmap(grad)
        let idx = Tensor::from_vec(vec![0i32, 1, 2, 9], [4]);
        let rows = m64(&[0.5, 1.5, 2.0, 0.1, 0.2, 0.3, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[4, 3]);
        let g = vmap(|(i, x): &(Tensor, Tensor)| grad(|x: &Tensor| three(i, x).sum())(x))(&(idx, rows.clone()));
        for (k, i) in [0i32, 1, 2, 9].into_iter().enumerate() {
            let want = grad(|x: &Tensor| three(&Tensor::scalar(i), x).sum())(&rows.select(0, k as isize));
            assert_close(&v(&g.select(0, k as isize)), &v(&want), 1e-14);
        }
    })
}
