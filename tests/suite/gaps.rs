//! Forms found missing while porting JAX programs: negative slice steps,
//! repeat and tile, scalar maximum and minimum, concat and stack over
//! references. Reference numbers are from JAX 0.10.2 (x64 enabled), the
//! Python beside each test.

use crate::harness::{assert_close as close, v};
use xform::prelude::*;
use xform::testing::{check_grads, check_vmap, Modes};

fn x46() -> Tensor {
    Tensor::arange(0.0, 24.0, 1.0, DType::F64).reshape(&[4, 6])
}

// x = jnp.arange(24.).reshape(4, 6); x[:, ::-1], x[::-1, 1::2], ...
#[test]
fn negative_steps_match_numpy() {
    let x = x46();
    let rev6 = |r: usize| (0..6).rev().map(move |c| (6 * r + c) as f64);
    let full_rev: Vec<f64> = (0..4).flat_map(rev6).collect();
    let cases: Vec<(Vec<Idx>, Vec<usize>, Vec<f64>)> = vec![
        (s![.., ..;-1].to_vec(), vec![4, 6], full_rev.clone()),
        (s![..;-1, 1..;2].to_vec(), vec![4, 3], vec![19., 21., 23., 13., 15., 17., 7., 9., 11., 1., 3., 5.]),
        (vec![Idx::All, Idx::range(5, 1, -2)], vec![4, 2], vec![5., 3., 11., 9., 17., 15., 23., 21.]),
        (s![.., -1..;-3].to_vec(), vec![4, 2], vec![5., 2., 11., 8., 17., 14., 23., 20.]),
        // x[:, 1:4:-1]: nothing (the start is below the stop)
        (s![.., 1..4;-1].to_vec(), vec![4, 0], vec![]),
        // out-of-range bounds clip as Python's: x[:, 100:-100:-1], x[:, -100::-1], x[:, :-100:-1]
        (vec![Idx::All, Idx::range(100, -100, -1)], vec![4, 6], full_rev.clone()),
        (s![.., -100..;-1].to_vec(), vec![4, 0], vec![]),
        (s![.., ..-100;-1].to_vec(), vec![4, 6], full_rev),
        (s![..;-2, ..;-4].to_vec(), vec![2, 2], vec![23., 19., 11., 7.]),
        (s![-1, ..;-1].to_vec(), vec![6], vec![23., 22., 21., 20., 19., 18.]),
        (vec![Idx::range(2, 0, -1), Idx::At(3)], vec![2], vec![15., 9.]),
        // a step of 1 or more is unchanged: x[1:3, 4::3]
        (s![1..3, 4..;3].to_vec(), vec![2, 1], vec![10., 16.]),
    ];
    for (i, (index, shape, want)) in cases.into_iter().enumerate() {
        let y = x.slice(&index);
        assert_eq!(y.shape().dims(), &shape[..], "case {i}: {index:?}");
        assert_eq!(v(&y), want, "case {i}: {index:?}");
    }
    assert!(x.try_slice(s![..;0]).is_err());
    assert!(std::panic::catch_unwind(|| Idx::At(1).with_step(-1)).is_err());
}

#[test]
fn negative_step_slices_are_views() {
    let x = x46();
    let y = x.slice(s![1.., ..;-2]); // rows 1..4, columns 5, 3, 1
    y.slice(s![.., 0]).fill_(-1.0); // column 5
    y.slice(s![-1, 1..]).mul_scalar_(10.0); // x[3, 3] and x[3, 1]
    let xs = v(&x);
    assert_eq!(&xs[0..6], &[0., 1., 2., 3., 4., 5.]);
    assert_eq!(&xs[6..12], &[6., 7., 8., 9., 10., -1.]);
    assert_eq!(&xs[18..24], &[18., 190., 20., 210., 22., -1.]);
}

// w = jnp.array([[0.3, -1.2, 0.7, 2.0, -0.4, 1.1], ...])
// f = lambda x: jnp.sum(x[:, ::-2]**2) + jnp.sum(jnp.sin(x[::-1, 5:1:-2]))
// f(w) = 15.827595218178516; jax.grad(f)(w) below.
// g = lambda r: r[::-1][1::2] * r[-1::-3].sum(); jax.vmap(g)(w) below.
#[test]
fn negative_steps_under_grad_and_vmap() {
    let w = Tensor::from_vec(
        vec![
            0.3f64, -1.2, 0.7, 2.0, -0.4, 1.1, 0.5, 0.9, -2.0, 0.1, 1.3, -0.6, 1.7, -0.8, 0.2, 0.4, -1.1, 0.6, -0.3,
            0.8, 1.4, -1.9, 0.05, 0.75,
        ],
        [4, 6],
    );
    let f = |x: &Tensor| {
        x.slice(s![.., ..;-2]).powi(2).sum() + x.slice(&[Idx::range(None, None, -1), Idx::range(5, 1, -2)]).sin().sum()
    };
    close(&v(&f(&w)), &[15.827595218178516], 1e-14);
    let want_grad = [
        0.0,
        -2.4,
        0.0,
        3.5838531634528574,
        0.0,
        2.6535961214255774,
        0.0,
        1.8,
        0.0,
        1.1950041652780259,
        0.0,
        -0.3746643850903216,
        0.0,
        -1.6,
        0.0,
        1.7210609940028851,
        0.0,
        2.0253356149096784,
        0.0,
        1.6,
        0.0,
        -4.1232895668635035,
        0.0,
        2.231688868873821,
    ];
    close(&v(&grad(f)(&w)), &want_grad, 1e-14);
    check_grads(f, &w, 2, Modes::Both).unwrap();

    let g = |r: &Tensor| r.slice(s![..;-1]).slice(s![1..;2]) * r.slice(s![-1..;-3]).sum();
    let want_vmap = [
        -0.7200000000000001,
        1.26,
        0.54,
        -3.3800000000000003,
        5.2,
        -1.3,
        -0.8800000000000001,
        0.16000000000000003,
        1.36,
        0.1075,
        3.01,
        -0.6449999999999999,
    ];
    close(&v(&vmap(g)(&w)), &want_vmap, 1e-14);
    check_vmap(g, &w, Axes::Zero).unwrap();
    // batched along the sliced axis: vmap over columns of a [6, 4]
    check_vmap(g, &w.t(), Axes::Zero).unwrap();
    check_grads(g, &w.index(0), 2, Modes::Both).unwrap();
}

// a = jnp.array([[1., 2.], [3., 4.]])
#[test]
fn repeat_and_tile_match_jnp() {
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    // jnp.repeat(a, 2, axis=1)
    assert_eq!(v(&a.repeat(2, Some(1))), [1., 1., 2., 2., 3., 3., 4., 4.]);
    // jnp.repeat(a, 3, axis=0): shape (6, 2)
    let r = a.repeat(3, Some(0));
    assert_eq!(r.shape().dims(), &[6, 2]);
    assert_eq!(v(&r), [1., 2., 1., 2., 1., 2., 3., 4., 3., 4., 3., 4.]);
    // jnp.repeat(a, 2): flattened
    assert_eq!(v(&a.repeat(2, None)), [1., 1., 2., 2., 3., 3., 4., 4.]);
    // jnp.repeat(a, 0, axis=1): shape (2, 0)
    assert_eq!(a.repeat(0, Some(-1)).shape().dims(), &[2, 0]);
    // jnp.repeat(a, jnp.array([2, 0]), axis=0): [[1, 2], [1, 2]]
    assert_eq!(v(&a.repeat_each(&[2, 0], Some(0))), [1., 2., 1., 2.]);
    // jnp.repeat(a, jnp.array([1, 0, 2, 1])): [1, 3, 3, 4]
    assert_eq!(v(&a.repeat_each(&[1, 0, 2, 1], None)), [1., 3., 3., 4.]);
    assert_eq!(v(&a.repeat_each(&[2], Some(1))), v(&a.repeat(2, Some(1))));
    assert!(a.try_repeat_each(&[1, 2, 3], Some(0)).is_err());
    // jnp.tile(a, 2): shape (2, 4)
    let t = a.tile(&[2]);
    assert_eq!(t.shape().dims(), &[2, 4]);
    assert_eq!(v(&t), [1., 2., 1., 2., 3., 4., 3., 4.]);
    // jnp.tile(a, (2, 1))
    assert_eq!(v(&a.tile(&[2, 1])), [1., 2., 3., 4., 1., 2., 3., 4.]);
    // jnp.tile(a, (2, 1, 3)): shape (2, 2, 6)
    let t3 = a.tile(&[2, 1, 3]);
    assert_eq!(t3.shape().dims(), &[2, 2, 6]);
    let block = [1., 2., 1., 2., 1., 2., 3., 4., 3., 4., 3., 4.];
    assert_eq!(v(&t3), [block, block].concat());
    // jnp.tile(jnp.array([1., 2.]), (2, 2))
    assert_eq!(v(&Tensor::from_vec(vec![1.0f32, 2.0], [2]).tile(&[2, 2])), [1., 2., 1., 2., 1., 2., 1., 2.]);
    assert_eq!(v(&a.tile(&[])), v(&a));
}

// h = lambda a: jnp.sum(jnp.repeat(a, 3, axis=1) * jnp.arange(12.).reshape(2, 6)) + jnp.sum(jnp.tile(a, (2, 3))**2)
// h(a) = 390.0, jax.grad(h)(a) = [15, 36, 57, 78]
// h2 = lambda a: jnp.sum(jnp.repeat(a, jnp.array([1, 0, 2, 1])) * jnp.array([1., 2., 3., 4.]))
// jax.grad(h2)(a) = [1, 0, 5, 4]
#[test]
fn repeat_and_tile_under_transforms() {
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    let k = Tensor::arange(0.0, 12.0, 1.0, DType::F64).reshape(&[2, 6]);
    let h = |a: &Tensor| (a.repeat(3, Some(1)) * &k).sum() + a.tile(&[2, 3]).powi(2).sum();
    close(&v(&h(&a)), &[390.0], 1e-15);
    close(&v(&grad(h)(&a)), &[15., 36., 57., 78.], 1e-15);
    let c = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [4]);
    let h2 = |a: &Tensor| (a.repeat_each(&[1, 0, 2, 1], None) * &c).sum();
    close(&v(&grad(h2)(&a)), &[1., 0., 5., 4.], 1e-15);
    let x = Key::new(3).normal([3, 2, 2], DType::F64);
    let rep = |x: &Tensor| x.repeat(2, Some(-1)).sin();
    let each = |x: &Tensor| x.repeat_each(&[0, 3], Some(-1)).tanh();
    let tile = |x: &Tensor| x.tile(&[2, 1, 2]).exp();
    for f in [&rep as &dyn Fn(&Tensor) -> Tensor, &each, &tile] {
        check_grads(f, &x, 2, Modes::Both).unwrap();
        check_vmap(f, &x, Axes::Zero).unwrap();
        check_vmap(f, &x, Axes::All(Some(2))).unwrap();
    }
    check_vmap(|x: &Tensor| x.repeat(3, None), &x, Axes::Zero).unwrap();
}

// jax.grad(lambda z: jnp.maximum(z, 0.).sum())(jnp.array([-1., 0., 2.])) = [0, 0.5, 1]
// jax.grad(lambda z: jnp.minimum(z, 2.).sum())(jnp.array([-1., 0., 2.])) = [1, 1, 0.5]
// jax.hessian(lambda z: (jnp.maximum(z, 0.)**3).sum())(jnp.array([-1., .5, 2.])) = diag(0, 3, 12)
#[test]
fn scalar_maximum_and_minimum() {
    let z = Tensor::from_vec(vec![-1.0f64, 0.0, 2.0], [3]);
    assert_eq!(v(&z.maximum_scalar(0.0)), [0., 0., 2.]);
    assert_eq!(v(&z.minimum_scalar(1)), [-1., 0., 1.]);
    assert_eq!(v(&grad(|z: &Tensor| z.maximum_scalar(0.0).sum())(&z)), [0., 0.5, 1.]);
    assert_eq!(v(&grad(|z: &Tensor| z.minimum_scalar(2.0).sum())(&z)), [1., 1., 0.5]);
    let p = Tensor::from_vec(vec![-1.0f64, 0.5, 2.0], [3]);
    let hs = hessian(|z: &Tensor| z.maximum_scalar(0.0).powi(3).sum())(&p);
    close(&v(&hs), &[0., 0., 0., 0., 3., 0., 0., 0., 12.], 1e-14);
    check_vmap(
        |z: &Tensor| z.maximum_scalar(0.25) * z.minimum_scalar(1.0),
        &Key::new(1).normal([4, 3], DType::F64),
        Axes::Zero,
    )
    .unwrap();
    // jnp.maximum(jnp.array([0, 1, 2], jnp.int32), 0.5) = [0.5, 1, 2] (float32 without x64)
    let i = Tensor::from_vec(vec![0i32, 1, 2], [3]);
    let m = i.maximum_scalar(0.5);
    assert_eq!((m.dtype(), v(&m)), (DType::F32, vec![0.5, 1., 2.]));
    // jnp.minimum(jnp.array([0, 1, 2], jnp.int32), 1) = [0, 1, 1], int32
    let m = i.minimum_scalar(1);
    assert_eq!((m.dtype(), v(&m)), (DType::I32, vec![0., 1., 1.]));
}

#[test]
fn concat_and_stack_take_any_list() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
    let b = Tensor::from_vec(vec![3.0f32], [1]);
    let want = [1., 2., 3.];
    assert_eq!(v(&Tensor::concat(&[a.clone(), b.clone()], 0)), want);
    assert_eq!(v(&Tensor::concat(&[&a, &b], 0)), want);
    let owned = vec![a.clone(), b.clone()];
    assert_eq!(v(&Tensor::concat(&owned, -1)), want);
    let refs: Vec<&Tensor> = vec![&a, &b];
    assert_eq!(v(&Tensor::concat(&refs, 0)), want);
    assert_eq!(v(&Tensor::concat(&refs[..], 0)), want);
    let s = Tensor::stack(&[&a, &a], 1);
    assert_eq!((s.shape().dims().to_vec(), v(&s)), (vec![2, 2], vec![1., 1., 2., 2.]));
    let pair: Vec<Tensor> = vec![a.clone(), a.clone()];
    assert_eq!(v(&Tensor::stack(&pair, 0)), [1., 2., 1., 2.]);
    assert!(Tensor::try_stack(&[&a, &b], 0).is_err());
    assert!(Tensor::try_concat(&[] as &[&Tensor], 0).is_err());
    // under grad: d/da sum(concat([a, a]) * [1, 2, 3, 4]) = [4, 6]
    let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4]);
    close(&v(&grad(|a: &Tensor| (Tensor::concat(&[a, a], 0) * &w).sum())(&a)), &[4., 6.], 1e-6);
}
