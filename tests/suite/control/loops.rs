//! while_loop (reverse mode included, which JAX refuses) and fori_loop
//! with static and dynamic bounds.

use super::{count, err, m64, says, t64};
use crate::harness::{assert_close, on_each_device, v};
use xform::control::try_fori_loop;
use xform::prelude::*;
use xform::{while_loop_with, Bound, WhileOptions};

/// x -> 1.5 x + sin x while sum(x) < 10.
fn grow(x: &Tensor, opts: &WhileOptions) -> Tensor {
    while_loop_with(|x: &Tensor| x.sum().lt_scalar(10.0), |x: &Tensor| x * 1.5 + x.sin(), x, opts)
}

fn plain(x: &Tensor) -> Tensor {
    grow(x, &WhileOptions::default())
}

fn loss(x: &Tensor) -> Tensor {
    let y = plain(x);
    (&y * &y).sum()
}

fn x0() -> Tensor {
    t64(&[0.7, 1.1])
}

/// The same loop, unrolled in Rust.
fn grow_ref(x: &[f64]) -> (Vec<f64>, usize) {
    let mut x = x.to_vec();
    let mut n = 0;
    while x.iter().sum::<f64>() < 10.0 {
        x = x.iter().map(|e| 1.5 * e + e.sin()).collect();
        n += 1;
    }
    (x, n)
}

#[test]
fn while_loop_eager() {
    on_each_device(|| {
        // lax.while_loop(lambda x: jnp.sum(x) < 10, lambda x: 1.5 * x + jnp.sin(x), jnp.array([0.7, 1.1]))
        let want = [4.918424716914209, 5.620950091496872];
        assert_close(&v(&plain(&x0())), &want, 1e-14);
        assert_eq!(grow_ref(&[0.7, 1.1]).1, 3);
        // a tree carry with an integer counter
        let (n, y) = while_loop(
            |(_, x): &(Tensor, Tensor)| x.sum().lt_scalar(10.0),
            |(n, x): &(Tensor, Tensor)| (n + 1, x * 1.5 + x.sin()),
            &(Tensor::scalar(0i32), x0()),
        );
        assert_eq!(n.item::<i32>(), 3);
        assert_close(&v(&y), &want, 1e-14);
        // zero trips: the initial carry
        assert_eq!(v(&plain(&t64(&[6.0, 5.0]))), vec![6.0, 5.0]);
    })
}

#[test]
fn while_loop_reverse_and_forward_mode() {
    on_each_device(|| {
        // JAX refuses reverse mode through lax.while_loop; its value is jax.grad of the unrolled loop
        // (3 trips here): def u(x):
        //     for _ in range(3): x = 1.5 * x + jnp.sin(x)
        //     return jnp.sum(x * x)
        let x = x0();
        // jax.grad(u)(jnp.array([0.7, 1.1]))
        let want_grad = [17.666159882904488, 17.3511623372139];
        assert_close(&v(&grad(loss)(&x)), &want_grad, 1e-12);
        let (val, g) = value_and_grad(loss)(&x);
        // u(jnp.array([0.7, 1.1]))
        assert_close(&[val.item_f64()], &[55.78598162705131], 1e-13);
        assert_close(&v(&g), &want_grad, 1e-12);
        // jax.jvp(lambda x: jnp.sum(lax.while_loop(lambda x: jnp.sum(x) < 10, lambda x: 1.5 * x
        //     + jnp.sin(x), x)**2), (x,), (jnp.array([1.0, -2.0]),))[1]
        let (_, tan) = jvp(loss, &x, &t64(&[1.0, -2.0]));
        assert_close(&[tan.item_f64()], &[-17.036164791523316], 1e-12);
        // jax.hessian(u)(jnp.array([0.7, 1.1]))
        let h = hessian(loss)(&x);
        assert_close(&v(&h), &[9.144728953661716, 0.0, 0.0, -13.075630345585143], 1e-11);
        // jacfwd and jacrev of the carry agree
        let jf = jacfwd(plain)(&x);
        let jr = jacrev(plain)(&x);
        assert_close(&v(&jf), &v(&jr), 1e-13);
        let jy: Vec<f64> = v(&jf);
        // J^T (2 y) is the gradient
        let y = v(&plain(&x));
        let jt_y = [2.0 * (jy[0] * y[0] + jy[2] * y[1]), 2.0 * (jy[1] * y[0] + jy[3] * y[1])];
        assert_close(&jt_y, &want_grad, 1e-12);
    })
}

#[test]
fn while_loop_remat_every_k_gives_the_same_gradients() {
    on_each_device(|| {
        let x = t64(&[0.2, 0.3]); // 5 trips: every k below but 1 and 10 leaves a remainder
        assert_eq!(grow_ref(&[0.2, 0.3]).1, 5);
        let g = |k: usize| {
            let opts = WhileOptions { remat_every: k };
            grad(move |x: &Tensor| {
                let y = grow(x, &opts);
                (&y * &y).sum()
            })(&x)
        };
        let base = g(0);
        for k in [1, 2, 3, 4, 10] {
            assert_close(&v(&g(k)), &v(&base), 1e-13);
        }
        let x = x0();
        let opts = WhileOptions { remat_every: 2 };
        let g2 = grad(|x: &Tensor| {
            let y = grow(x, &opts);
            (&y * &y).sum()
        })(&x);
        assert_close(&v(&g2), &[17.666159882904488, 17.3511623372139], 1e-12);
    })
}

fn starts() -> Tensor {
    // trips: 3, 5, 2, 0
    m64(&[0.7, 1.1, 0.2, 0.3, 3.0, 4.0, 6.0, 5.0], &[4, 2])
}

#[test]
fn vmap_of_while_loop_with_a_batched_predicate() {
    on_each_device(|| {
        let xs = starts();
        let counted = |x: &Tensor| {
            while_loop(
                |(_, x): &(Tensor, Tensor)| x.sum().lt_scalar(10.0),
                |(n, x): &(Tensor, Tensor)| (n + 1, x * 1.5 + x.sin()),
                &(Tensor::scalar(0i32), x.clone()),
            )
        };
        let (n, y) = vmap(counted)(&xs);
        assert_eq!(n.to_vec::<i32>(), vec![3, 5, 2, 0]);
        for i in 0..4 {
            let (want, trips) = grow_ref(&v(&xs.select(0, i)));
            assert_eq!(n.to_vec::<i32>()[i as usize], trips as i32);
            assert_close(&v(&y.select(0, i)), &want, 1e-14);
        }
        // the loop of the untransformed call
        let got = vmap(plain)(&xs);
        for i in 0..4 {
            assert_close(&v(&got.select(0, i)), &v(&plain(&xs.select(0, i))), 1e-15);
        }
        // vmap(vmap)
        let xss = Tensor::stack(&[xs.clone(), &xs * 0.5], 0);
        let got = vmap(vmap(plain))(&xss);
        for a in 0..2 {
            for b in 0..4 {
                let want = grow_ref(&v(&xss.select(0, a).select(0, b))).0;
                assert_close(&v(&got.select(0, a).select(0, b)), &want, 1e-14);
            }
        }
    })
}

#[test]
fn vmap_of_grad_of_while_loop_with_a_batched_predicate() {
    on_each_device(|| {
        let xs = starts();
        for k in [0, 2] {
            let opts = WhileOptions { remat_every: k };
            let l = |x: &Tensor| {
                let y = grow(x, &opts);
                (&y * &y).sum()
            };
            let per = vmap(grad(l))(&xs);
            let whole = grad(|xs: &Tensor| vmap(l)(xs).sum())(&xs);
            for i in 0..4 {
                let want = grad(l)(&xs.select(0, i));
                assert_close(&v(&per.select(0, i)), &v(&want), 1e-12);
                assert_close(&v(&whole.select(0, i)), &v(&want), 1e-12);
            }
            // the first row is x0: JAX's unrolled gradient
            assert_close(&v(&per.select(0, 0)), &[17.666159882904488, 17.3511623372139], 1e-12);
            // zero trips: d/dx sum(x^2) = 2x
            assert_close(&v(&per.select(0, 3)), &[12.0, 10.0], 1e-15);
        }
        // jvp of vmap equals a loop of jvp
        let ts = m64(&[1.0, -2.0, 0.5, 0.5, -1.0, 1.0, 2.0, 3.0], &[4, 2]);
        let (_, tys) = jvp(vmap(loss), &xs, &ts);
        for i in 0..4 {
            let (_, ty) = jvp(loss, &xs.select(0, i), &ts.select(0, i));
            assert_close(&[v(&tys)[i as usize]], &v(&ty), 1e-12);
        }
    })
}

#[test]
fn trace_keeps_while_and_reverse_mode_under_trace_is_a_clear_error() {
    let prog = trace(plain, &x0());
    let text = prog.to_string();
    assert_eq!(prog.eqns.iter().filter(|e| e.prim.name() == "while").count(), 1, "{text}");
    super::says(&text, &["while[", "cond_jaxpr", "body_jaxpr"]);
    assert_eq!(count(&text, "sin"), 1, "the body is not unrolled: {text}");
    for x in [x0(), t64(&[0.2, 0.3]), t64(&[6.0, 5.0])] {
        let y = prog.eval(std::slice::from_ref(&x)).unwrap();
        assert_close(&v(&y[0]), &grow_ref(&v(&x)).0, 1e-14);
    }
    // forward mode under trace is a while over the JVP body
    let t = t64(&[1.0, -2.0]);
    let jp = trace(|x: &Tensor| jvp(loss, x, &t).1, &x0());
    assert!(jp.to_string().contains("while["), "{jp}");
    let tan = jp.eval(&[x0()]).unwrap();
    assert_close(&v(&tan[0]), &[-17.036164791523316], 1e-12);
    // reverse mode needs the trip count, which a staged predicate does not give
    let e = err(|| trace(grad(|x: &Tensor| plain(x).sum()), &x0()));
    says(&e, &["while", "trip count"]);
    let e = err(|| trace(|x: &Tensor| vjp(plain, x).1(&t64(&[1.0, 1.0])), &x0()));
    says(&e, &["trip count"]);
    // and everything works afterwards
    assert_close(&v(&grad(loss)(&x0())), &[17.666159882904488, 17.3511623372139], 1e-12);
}

#[test]
fn reverse_mode_under_trace_names_the_trip_count_when_the_result_is_used_nonlinearly() {
    let e = err(|| trace(grad(loss), &x0()));
    says(&e, &["while", "trip count"]);
    let e = err(|| trace(grad(|x: &Tensor| plain(x).sin().sum()), &x0()));
    says(&e, &["while", "trip count"]);
}

/// c -> sin(c) * 1.3 + i * 0.1 for i in lower..upper.
fn fori_body(i: &Tensor, c: &Tensor) -> Tensor {
    c.sin() * 1.3 + i.cast(DType::F64) * 0.1
}

#[test]
fn fori_loop_static_and_dynamic_bounds() {
    on_each_device(|| {
        let x = t64(&[0.4, -0.9, 1.3]);
        // lax.fori_loop(0, 4, lambda i, c: jnp.sin(c) * 1.3 + i * 0.1, jnp.array([0.4, -0.9, 1.3]))
        let want = [1.4386608621343162, -0.7171308714017542, 1.592586824753481];
        // jax.grad(lambda x: jnp.sum(lax.fori_loop(0, 4, lambda i, c: jnp.sin(c) * 1.3 + i * 0.1, x) ** 2))(x)
        let want_grad = [2.3793826555328907, -0.44501308887274754, 0.01898517891677769];
        let (lo, hi) = (Tensor::scalar(0i32), Tensor::scalar(4i32));
        let stat = |x: &Tensor| fori_loop(0, 4, fori_body, x);
        let dynamic = |x: &Tensor| fori_loop(&lo, &hi, fori_body, x);
        let mixed = |x: &Tensor| fori_loop(0, &hi, fori_body, x);
        let shifted =
            |x: &Tensor| fori_loop(&Tensor::scalar(2i64), 6i64, |i: &Tensor, c: &Tensor| fori_body(&(i - 2), c), x);
        for f in [&stat as &dyn Fn(&Tensor) -> Tensor, &dynamic, &mixed, &shifted] {
            assert_close(&v(&f(&x)), &want, 1e-14);
            let g = grad(|x: &Tensor| {
                let y = f(x);
                (&y * &y).sum()
            })(&x);
            assert_close(&v(&g), &want_grad, 1e-13);
        }
        // static bounds make a scan, tensor bounds a while
        let s = trace(stat, &x).to_string();
        assert!(s.contains("scan[") && !s.contains("while["), "{s}");
        let d = trace(dynamic, &x).to_string();
        assert!(d.contains("while["), "{d}");
        // empty ranges leave the carry
        assert_eq!(v(&fori_loop(3, 1, fori_body, &x)), v(&x));
        assert_eq!(v(&fori_loop(&hi, &lo, fori_body, &x)), v(&x));
        // vmap over a dynamic bound: per-example trip counts
        let his = Tensor::from_vec(vec![0i32, 2, 4], [3]);
        let got = vmap(|h: &Tensor| fori_loop(&lo, h, fori_body, &x))(&his);
        for (k, h) in [0i64, 2, 4].into_iter().enumerate() {
            assert_close(&v(&got.select(0, k as isize)), &v(&fori_loop(0, h, fori_body, &x)), 1e-14);
        }
        // a bound that is not an integer scalar
        let e = try_fori_loop(Bound::Static(0), Bound::Dynamic(&Tensor::scalar(4.0f32)), fori_body, &x).unwrap_err();
        says(&e, &["fori_loop", "integer scalar"]);
        assert_eq!(xform::core::interp::stack_depth(), 0);
    })
}

#[test]
fn finished_examples_of_a_batched_while_do_not_leak_into_gradients() {
    // x -> x^2 while x < 100: 1.5 takes 4 trips (d/dx x^16 = 16 x^15); 1e100 takes none (d/dx x = 1),
    // but the masked loop keeps stepping its frozen carry (1e200, then inf) while 1.5 runs
    let sq = |x: &Tensor| while_loop(|x: &Tensor| x.lt_scalar(100.0), |x: &Tensor| x * x, x);
    let xs = t64(&[1.5, 1e100]);
    let want = [16.0 * 1.5f64.powi(15), 1.0];
    for (i, x) in v(&xs).iter().enumerate() {
        assert_close(&[grad(sq)(&Tensor::scalar(*x)).item_f64()], &[want[i]], 1e-14);
    }
    assert_eq!(v(&vmap(sq)(&xs)), vec![1.5f64.powi(16), 1e100]);
    assert_close(&v(&vmap(grad(sq))(&xs)), &want, 1e-14);
    let (_, t) = jvp(vmap(sq), &xs, &t64(&[1.0, 1.0]));
    assert_close(&v(&t), &want, 1e-14);
    let g = grad(|xs: &Tensor| vmap(sq)(xs).sum())(&xs);
    assert_close(&v(&g), &want, 1e-14);
}

/// jit of a gradient through a while_loop cannot know the trip count when
/// it stages the gradient: an error that says to take the gradient of the
/// jitted function instead (JAX refuses reverse mode through while_loop in
/// both orders), and that order gives the eager gradient.
#[test]
fn jit_of_grad_through_while_says_which_order_works() {
    let x = x0();
    let want = v(&grad(loss)(&x));
    let e = err(|| jit(grad(loss))(&x));
    says(&e, &["while", "trip count", "grad(jit(f)) instead of jit(grad(f))", "under jit"]);
    assert_eq!(xform::core::interp::stack_depth(), 0);
    assert_close(&v(&grad(jit(loss))(&x)), &want, 1e-12);
}
