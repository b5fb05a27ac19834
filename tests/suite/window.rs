//! The windowed primitives and pooling against JAX 0.10.2 (float64; the
//! Python that made each number is beside it), ties, vmap(grad) against a
//! loop, and the errors. The generic rule tests cover the primitives
//! through their registry samples.

use crate::harness::{assert_close as close, on_each_device, v};
use xform::core::prim::ReduceOp;
use xform::lax::{self, Padding, SelectOp, WindowParams};
use xform::nn::AvgPool2d;
use xform::prelude::*;

fn t(data: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape.to_vec())
}

fn err(r: xform::Result<Tensor>) -> String {
    r.map(|_| ()).unwrap_err().to_string()
}

// x1 = ((np.arange(20) * 7) % 20 - 10).reshape(1, 1, 4, 5) / 4
const X1: [f64; 20] = [
    -2.5, -0.75, 1.0, -2.25, -0.5, 1.25, -2.0, -0.25, 1.5, -1.75, 0.0, 1.75, -1.5, 0.25, 2.0, -1.25, 0.5, 2.25, -1.0,
    0.75,
];

#[test]
fn max_pool_matches_jax() {
    on_each_device(|| {
        // pads = lax.padtype_to_pads((4, 5), (2, 2), (2, 2), "SAME")  # [(0, 0), (0, 1)]
        // mp = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
        //                                  [(0, 0), (0, 0)] + pads)
        // w1 = np.arange(1, 7.).reshape(1, 1, 2, 3)
        // mp(x1); jax.grad(lambda x: (mp(x) * w1).sum())(x1)
        let x = t(&X1, &[1, 1, 4, 5]);
        let w = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 1, 2, 3]);
        let pool = |x: &Tensor| lax::max_pool(x, &[2, 2], &[2, 2], &Padding::Same).unwrap();
        let y = pool(&x);
        assert_eq!(y.shape().dims(), &[1, 1, 2, 3]);
        close(&v(&y), &[1.25, 1.5, -0.5, 1.75, 2.25, 2.0], 0.0);
        let g = grad(|x: &Tensor| (pool(x) * &w).sum())(&x);
        #[rustfmt::skip]
        let want = [0.0, 0.0, 0.0, 0.0, 3.0, 1.0, 0.0, 0.0, 2.0, 0.0,
                    0.0, 4.0, 0.0, 0.0, 6.0, 0.0, 0.0, 5.0, 0.0, 0.0];
        close(&v(&g), &want, 0.0);
        // the same in f32
        let g32 = grad(|x: &Tensor| (pool(x) * &w.cast(DType::F32)).sum())(&x.cast(DType::F32));
        close(&v(&g32), &want, 0.0);
    })
}

/// NaNs in a window route the max-pool gradient as JAX does (PyTorch
/// sends it to the first NaN instead): each NaN reached takes the
/// selection, and the next tap takes it from the NaN.
#[test]
fn max_pool_gradients_around_nans_match_jax() {
    on_each_device(|| {
        // mp = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2), (1, 1, 1), 'VALID')
        // jax.grad(lambda x: mp(x).sum())(x); jax.jvp(mp, (x,), (t,))[1]
        let nan = f64::NAN;
        let pool = |x: &Tensor| lax::max_pool(x, &[2], &[1], &Padding::Valid).unwrap();
        let tangent = t(&[1.0, 10.0, 100.0, 1000.0], &[1, 1, 4]);
        for (x, g, j) in [
            ([1.0, nan, 3.0, 2.0], [0.0, 1.0, 2.0, 0.0], [10.0, 100.0, 100.0]),
            ([nan, nan, 1.0, 1.0], [0.0, 1.0, 2.0, 0.0], [10.0, 100.0, 100.0]),
            ([3.0, 3.0, nan, 5.0], [1.0, 0.0, 1.0, 1.0], [1.0, 100.0, 1000.0]),
        ] {
            let x = t(&x, &[1, 1, 4]);
            close(&v(&grad(|x: &Tensor| pool(x).sum())(&x)), &g, 0.0);
            close(&v(&jvp(pool, &x, &tangent).1), &j, 0.0);
        }
    })
}

#[test]
fn avg_pool_counts_padding_like_jax_and_pytorch() {
    on_each_device(|| {
        // x2 = np.sin(np.arange(24.)).reshape(1, 2, 3, 4)
        // ap = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 3), (1, 1, 1, 2),
        //                                  [(0, 0), (0, 0), (1, 0), (1, 1)]) / 6.0
        // w2 = np.cos(np.arange(12.)).reshape(1, 2, 3, 2)
        // ap(x2); jax.grad(lambda x: (ap(x) * w2).sum())(x2)
        let x = t(&(0..24).map(|i| (i as f64).sin()).collect::<Vec<_>>(), &[1, 2, 3, 4]);
        let w = t(&(0..12).map(|i| (i as f64).cos()).collect::<Vec<_>>(), &[1, 2, 3, 2]);
        let pad = Padding::Explicit(vec![(1, 0), (1, 1)]);
        let pool = |x: &Tensor| lax::avg_pool(x, &[2, 3], &[1, 2], &pad).unwrap();
        let y = pool(&x);
        assert_eq!(y.shape().dims(), &[1, 2, 3, 2]);
        #[rustfmt::skip]
        close(&v(&y), &[
            0.1402451641346494, 0.3153147366155742, -0.14570929752719503, 0.21842254092502836,
            -0.052375006350988025, -0.285541001056932, -0.019400980195632335, 0.34351037211310465,
            -0.227617781619736, 0.0830924506150579, 0.08338334678651024, -0.2634872673196331,
        ], 1e-14);
        let g = grad(|x: &Tensor| (pool(x) * &w).sum())(&x);
        #[rustfmt::skip]
        close(&v(&g), &[
            0.09730886057547626, 0.022360495453425305, -0.07494836512205094, -0.07494836512205094,
            -0.17829840956845905, -0.2960201280913289, -0.11772171852286986, -0.11772171852286986,
            -0.10894060347726865, -0.06166357256673095, 0.047277030910537705, 0.047277030910537705,
            0.1357783754736254, 0.10957370755006332, -0.026204667923562047, -0.026204667923562047,
            -0.16409526048084433, -0.3152126877969487, -0.15111742731610436, -0.15111742731610436,
            -0.1398452548460754, -0.13910763851473362, 0.0007376163313417975, 0.0007376163313417975,
        ], 1e-14);
    })
}

#[test]
fn avg_pool_can_leave_padding_out_of_the_count() {
    on_each_device(|| {
        // PyTorch's count_include_pad=False: each window's sum over the number of its
        // elements inside the input, the window sum of ones (x2, w2 as above):
        // pads = [(0, 0), (0, 0), (1, 0), (1, 1)]
        // ones = lambda: lax.reduce_window(jnp.ones((1, 1, 3, 4)), 0.0, lax.add, (1, 1, 2, 3), (1, 1, 1, 2), pads)
        // ap = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 3), (1, 1, 1, 2), pads) / ones()
        // ones() is [2, 3, 4, 6, 4, 6]; ap(x2); jax.grad(lambda x: (ap(x) * w2).sum())(x2)
        let x = t(&(0..24).map(|i| (i as f64).sin()).collect::<Vec<_>>(), &[1, 2, 3, 4]);
        let w = t(&(0..12).map(|i| (i as f64).cos()).collect::<Vec<_>>(), &[1, 2, 3, 2]);
        let pad = Padding::Explicit(vec![(1, 0), (1, 1)]);
        let pool = |x: &Tensor| lax::avg_pool_with(x, &[2, 3], &[1, 2], &pad, false).unwrap();
        #[rustfmt::skip]
        close(&v(&pool(&x)), &[
            0.42073549240394825, 0.6306294732311484, -0.21856394629079254, 0.21842254092502836,
            -0.07856250952648204, -0.285541001056932, -0.05820294058689701, 0.6870207442262093,
            -0.341426672429604, 0.0830924506150579, 0.12507502017976538, -0.2634872673196331,
        ], 1e-14);
        let g = grad(|x: &Tensor| (pool(x) * &w).sum())(&x);
        #[rustfmt::skip]
        close(&v(&g), &[
            0.3959632908632144, 0.41106531005252, 0.015102019189305677, 0.015102019189305677,
            -0.2674476143526886, -0.38516933287555843, -0.11772171852286986, -0.11772171852286986,
            -0.16341090521590299, -0.11613387430536529, 0.047277030910537705, 0.047277030910537705,
            0.44371013487302957, 0.5431558426733517, 0.09944570780032205, 0.09944570780032205,
            -0.2461428907212665, -0.3972603180373709, -0.15111742731610436, -0.15111742731610436,
            -0.2097678822691131, -0.20903026593777133, 0.0007376163313417975, 0.0007376163313417975,
        ], 1e-14);
        // counting the padding is avg_pool
        let counted = lax::avg_pool_with(&x, &[2, 3], &[1, 2], &pad, true).unwrap();
        close(&v(&counted), &v(&lax::avg_pool(&x, &[2, 3], &[1, 2], &pad).unwrap()), 0.0);
        // without padding the two agree
        let valid = |c| lax::avg_pool_with(&x, &[2, 3], &[1, 1], &Padding::Valid, c).unwrap();
        close(&v(&valid(false)), &v(&valid(true)), 1e-15);
    })
}

#[test]
fn avg_pool_same_without_padding_in_the_count_matches_jax() {
    on_each_device(|| {
        // TensorFlow's "SAME" average pooling: x3 = (np.arange(25.) ** 1.5 % 7).reshape(1, 1, 5, 5)
        // p = [(0, 0), (0, 0)] + lax.padtype_to_pads((5, 5), (3, 3), (2, 2), "SAME")  # (1, 1) twice
        // ap3 = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 2, 2), p)
        //                 / lax.reduce_window(jnp.ones((1, 1, 5, 5)), 0.0, lax.add, (1, 1, 3, 3), (1, 1, 2, 2), p)
        // ap3(x3); jax.grad(lambda x: ap3(x).sum())(x3)
        let x = t(&(0..25).map(|i| (i as f64).powf(1.5) % 7.0).collect::<Vec<_>>(), &[1, 1, 5, 5]);
        let pool = |x: &Tensor| lax::avg_pool_with(x, &[3, 3], &[2, 2], &Padding::Same, false).unwrap();
        #[rustfmt::skip]
        close(&v(&pool(&x)), &[
            1.4693195860495045, 2.644865696595591, 3.4558923551690386, 2.1796129721504105, 3.0254668102624893,
            4.678233214876083, 3.442889721793872, 3.8646148916713323, 5.766561246301258,
        ], 1e-14);
        let (q, h, s, n) = (0.25, 5.0 / 12.0, 1.0 / 6.0, 25.0 / 36.0);
        let (e, c) = (5.0 / 18.0, 1.0 / 9.0);
        #[rustfmt::skip]
        close(&v(&grad(|x: &Tensor| pool(x).sum())(&x)), &[
            q, h, s, h, q,
            h, n, e, n, h,
            s, e, c, e, s,
            h, n, e, n, h,
            q, h, s, h, q,
        ], 1e-15);
    })
}

#[test]
fn avg_pool2d_without_padding_in_the_count_under_vmap_and_jit() {
    on_each_device(|| {
        // PyTorch: AvgPool2d(2, padding=1, count_include_pad=False)(torch.arange(16.).view(1, 1, 4, 4))
        // averages the input elements of each window: corners hold one, edges two
        let x = t(&(0..16).map(|i| i as f64).collect::<Vec<_>>(), &[1, 1, 4, 4]);
        let counted = AvgPool2d::new([2, 2]).with_padding([1, 1]);
        assert!(counted.count_include_pad);
        let pool = counted.clone().with_count_include_pad(false);
        close(&v(&pool.forward(&x)), &[0.0, 1.5, 3.0, 6.0, 7.5, 9.0, 12.0, 13.5, 15.0], 0.0);
        close(&v(&counted.forward(&x)), &[0.0, 0.75, 0.75, 3.0, 7.5, 4.5, 3.0, 6.75, 3.75], 0.0);
        // d sum / dx is 1 / (the count of x's window): 1 at corners, 1/2 on edges, 1/4 inside
        #[rustfmt::skip]
        let want = [1.0, 0.5, 0.5, 1.0, 0.5, 0.25, 0.25, 0.5, 0.5, 0.25, 0.25, 0.5, 1.0, 0.5, 0.5, 1.0];
        close(&v(&grad(|x: &Tensor| pool.forward(x).sum())(&x)), &want, 0.0);
        // vmap(grad) over examples equals the loop; jit (the layer a static argument) equals eager
        let xs = Key::new(3).normal([3, 1, 2, 4, 5], DType::F64);
        let loss = |x: &Tensor| (pool.forward(x).sin()).sum();
        let per = vmap(grad(loss))(&xs);
        for i in 0..3 {
            close(&v(&per.select(0, i)), &v(&grad(loss)(&xs.select(0, i))), 1e-14);
        }
        let jitted = jit(|(p, x): &(AvgPool2d, Tensor)| p.forward(x));
        close(&v(&jitted(&(pool.clone(), xs.select(0, 0)))), &v(&pool.forward(&xs.select(0, 0))), 0.0);
        // the static field is part of jit's key: the other setting traces again
        close(&v(&jitted(&(counted.clone(), xs.select(0, 0)))), &v(&counted.forward(&xs.select(0, 0))), 0.0);
    })
}

#[test]
fn reduce_window_min_with_both_dilations_matches_jax() {
    on_each_device(|| {
        // x3 = ((np.arange(10) * 3) % 10 - 4.5).reshape(2, 5)
        // mn = lambda x: lax.reduce_window(x, jnp.inf, lax.min, (1, 2), (1, 2), [(0, 0), (0, 2)],
        //                                  base_dilation=(1, 2), window_dilation=(1, 2))
        // t3 = np.cos(np.arange(10.)).reshape(2, 5); w3 = np.arange(1, 11.).reshape(2, 5)
        // mn(x3); jax.jvp(mn, (x3,), (t3,))[1]; jax.jacfwd(lambda x: (mn(x) * w3).sum())(x3)
        // (JAX has no VJP for a dilated window: "VJP not implemented for select_and_gather
        // (MaxPool) with window dilation"; xform transposes it, checked against jacfwd.)
        let x = t(&[-4.5, -1.5, 1.5, 4.5, -2.5, 0.5, 3.5, -3.5, -0.5, 2.5], &[2, 5]);
        let tan = t(&(0..10).map(|i| (i as f64).cos()).collect::<Vec<_>>(), &[2, 5]);
        let w3 = t(&(1..=10).map(|i| i as f64).collect::<Vec<_>>(), &[2, 5]);
        let win = WindowParams::dilated(
            "test",
            &[2, 5],
            &[1, 2],
            &[1, 2],
            &Padding::Explicit(vec![(0, 0), (0, 2)]),
            &[1, 2],
            &[1, 2],
        )
        .unwrap();
        let mn = |x: &Tensor| lax::reduce_window(ReduceOp::Min, x, &win).unwrap();
        let want = [-4.5, -1.5, 1.5, -2.5, -2.5, 0.5, -3.5, -3.5, -0.5, 2.5];
        close(&v(&mn(&x)), &want, 0.0);
        let (_, jt) = jvp(|x: &Tensor| mn(x), &x, &tan);
        #[rustfmt::skip]
        close(&v(&jt), &[
            1.0, 0.5403023058681398, -0.4161468365471424, -0.6536436208636119, -0.6536436208636119,
            0.28366218546322625, 0.7539022543433046, 0.7539022543433046, -0.14550003380861354, -0.9111302618846769,
        ], 0.0);
        let g = grad(|x: &Tensor| (mn(x) * &w3).sum())(&x);
        close(&v(&g), &[1.0, 2.0, 3.0, 0.0, 9.0, 6.0, 0.0, 15.0, 9.0, 10.0], 0.0);
        // integers: the same windows of 2 * x3 in i32 (padding is i32::MAX)
        let xi = (&x * &t(&[2.0; 10], &[2, 5])).cast(DType::I32);
        let yi = lax::reduce_window(ReduceOp::Min, &xi, &win).unwrap();
        assert_eq!(yi.dtype(), DType::I32);
        close(&v(&yi), &want.map(|w| 2.0 * w), 0.0);
    })
}

#[test]
fn ties_go_to_the_first_element() {
    on_each_device(|| {
        // jax.grad(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), "VALID").sum())(
        //     np.array([1., 3., 3., 2.]))                                     # [0, 2, 1, 0]
        // jax.grad(lambda x: lax.reduce_window(x, jnp.inf, lax.min, (3,), (1,), "VALID").sum())(
        //     np.array([2., 1., 1., 1., 5.]))                                 # [0, 2, 1, 0, 0]
        for d in [DType::F64, DType::F32, DType::BF16] {
            let x = t(&[1.0, 3.0, 3.0, 2.0], &[4]).cast(d);
            let g = grad(|x: &Tensor| lax::reduce_window_max(x, &[2], &[1], &Padding::Valid).unwrap().sum())(&x);
            close(&v(&g), &[0.0, 2.0, 1.0, 0.0], 0.0);
            let x = t(&[2.0, 1.0, 1.0, 1.0, 5.0], &[5]).cast(d);
            let g = grad(|x: &Tensor| lax::reduce_window_min(x, &[3], &[1], &Padding::Valid).unwrap().sum())(&x);
            close(&v(&g), &[0.0, 2.0, 1.0, 0.0, 0.0], 0.0);
        }
        // the selections directly: padding is never selected, an all-padding window selects nothing
        let x = t(&[-5.0, -7.0], &[2]);
        let tan = t(&[10.0, 20.0], &[2]);
        let w = WindowParams::new("test", &[2], &[2], &[1], &Padding::Explicit(vec![(2, 1)])).unwrap();
        // windows: [pad pad] [pad -5] [-5 -7] [-7 pad]
        let gathered = lax::select_and_gather_add(&tan, &x, SelectOp::Max, &w).unwrap();
        close(&v(&gathered), &[0.0, 10.0, 10.0, 20.0], 0.0);
        let ct = t(&[1.0, 2.0, 4.0, 8.0], &[4]);
        let scattered = lax::select_and_scatter_add(&ct, &x, SelectOp::Min, &w).unwrap();
        close(&v(&scattered), &[2.0, 12.0], 0.0);
    })
}

#[test]
fn vmap_of_grad_of_a_max_pool_equals_a_loop() {
    on_each_device(|| {
        let key = Key::new(7);
        let xs = key.fold_in(1).normal([4, 1, 2, 5, 6], DType::F64);
        let w = key.fold_in(2).normal([1, 2, 3, 3], DType::F64);
        // a loss of one example [1, C, H, W]: max pool (3x3, stride 2, SAME) and an average pool
        let loss = |x: &Tensor, w: &Tensor| {
            let m = lax::max_pool(&x.tanh(), &[3, 3], &[2, 2], &Padding::Same).unwrap();
            let a = lax::avg_pool(x, &[2, 2], &[1, 2], &Padding::Valid).unwrap();
            (m * w).sum() + (&a * &a).sum()
        };
        let per = vmap(|x: &Tensor| grad(|x: &Tensor| loss(x, &w))(x))(&xs);
        assert_eq!(per.shape().dims(), &[4, 1, 2, 5, 6]);
        // per-example weights too: both arguments batched, along different axes
        let ws = key.fold_in(3).normal([1, 2, 3, 3, 4], DType::F64);
        let per_w = vmap_with(
            |(x, w): &(Tensor, Tensor)| grad(|p: &(Tensor, Tensor)| loss(&p.0, &p.1))(&(x.clone(), w.clone())),
            VmapOptions { in_axes: xform::Axes::Leaves(vec![Some(0), Some(4)]), ..Default::default() },
        )(&(xs.clone(), ws.clone()));
        for i in 0..4 {
            let xi = xs.select(0, i);
            close(&v(&per.select(0, i)), &v(&grad(|x: &Tensor| loss(x, &w))(&xi)), 1e-12);
            let wi = ws.select(4, i);
            let gi = grad(|p: &(Tensor, Tensor)| loss(&p.0, &p.1))(&(xi.clone(), wi.clone()));
            close(&v(&per_w.0.select(0, i)), &v(&gi.0), 1e-12);
            close(&v(&per_w.1.select(0, i)), &v(&gi.1), 1e-12);
        }
    })
}

#[test]
fn bad_windows_are_clear_errors() {
    let x = t(&[1.0, 2.0, 3.0], &[3]);
    // a window larger than the padded input
    let e = err(lax::reduce_window_sum(&x, &[4], &[1], &Padding::Valid));
    assert!(e.contains("reduce_window_sum") && e.contains("larger than the padded input") && e.contains("[3]"), "{e}");
    let e = err(lax::reduce_window_max(&x, &[5], &[1], &Padding::Explicit(vec![(1, 0)])));
    assert!(e.contains("axis 0: the window (5 taps, dilation 1: 5 wide) is larger than the padded input"), "{e}");
    let img = Tensor::zeros([1, 1, 2, 2], DType::F32);
    let e = err(lax::max_pool(&img, &[3, 3], &[1, 1], &Padding::Valid));
    assert!(e.contains("max_pool") && e.contains("larger than the padded input") && e.contains("[1, 1, 2, 2]"), "{e}");
    // zero strides and dilations
    let e = err(lax::reduce_window_max(&x, &[2], &[0], &Padding::Valid));
    assert!(e.contains("reduce_window_max") && e.contains("window strides [0] must be positive"), "{e}");
    let e = err(lax::avg_pool(&img, &[2, 2], &[0, 1], &Padding::Same));
    assert!(e.contains("avg_pool") && e.contains("must be positive"), "{e}");
    let e = WindowParams::dilated("reduce_window", &[3], &[2], &[1], &Padding::Valid, &[0], &[1]).unwrap_err();
    assert!(e.to_string().contains("base dilations [0] must be positive"), "{e}");
    let e = WindowParams::dilated("reduce_window", &[3], &[2], &[1], &Padding::Valid, &[1], &[0]).unwrap_err();
    assert!(e.to_string().contains("window dilations [0] must be positive"), "{e}");
    let e = err(lax::reduce_window_min(&x, &[0], &[1], &Padding::Valid));
    assert!(e.contains("window dimensions [0] must be positive"), "{e}");
    // one parameter per axis
    let e = err(lax::reduce_window_sum(&img, &[2, 2], &[1, 1], &Padding::Valid));
    assert!(e.contains("reduce_window_sum: needs one window parameter per operand axis"), "{e}");
    assert!(e.contains("rank 4") && e.contains("2 window dimensions"), "{e}");
    let e = err(lax::max_pool(&x, &[2], &[1], &Padding::Valid));
    assert!(e.contains("max_pool") && e.contains("a 1-d window needs an input of rank 3"), "{e}");
    let e = err(lax::max_pool(&img, &[2, 2], &[1], &Padding::Valid));
    assert!(e.contains("2 strides; got 1 strides"), "{e}");
    let e = err(lax::avg_pool(&img, &[2, 2], &[1, 1], &Padding::Explicit(vec![(0, 0)])));
    assert!(e.contains("avg_pool") && e.contains("padding has 1 (low, high) pairs for 2 spatial axes"), "{e}");
    // dtypes
    let e = err(lax::reduce_window_sum(&x.cast(DType::Bool), &[2], &[1], &Padding::Valid));
    assert!(e.contains("reduce_window_sum: needs a numeric operand"), "{e}");
    let w = WindowParams::new("test", &[3], &[2], &[1], &Padding::Valid).unwrap();
    let xi = x.cast(DType::I32);
    let e = err(lax::select_and_gather_add(&xi, &xi, SelectOp::Max, &w));
    assert!(e.contains("select_and_gather_add: needs two operands of one floating-point dtype"), "{e}");
    let e = err(lax::avg_pool(&img.cast(DType::I32), &[2, 2], &[1, 1], &Padding::Valid));
    assert!(e.contains("avg_pool: needs a floating-point input"), "{e}");
    // a cotangent that is not shaped like the windows
    let e = err(lax::select_and_scatter_add(&x, &x, SelectOp::Max, &w));
    assert!(e.contains("select_and_scatter_add: the cotangent must have the windows' shape [2]"), "{e}");
}

/// "SAME" padding with a base dilation is resolved as JAX's
/// `reduce_window` resolves it, from the undilated operand and the
/// dilated window: x = [1, 2], window 3, stride 2, base dilation 2 is
/// `[1, 0, 2]` padded (0, 1), one window:
/// `lax.reduce_window(jnp.array([1., 2.]), 0., lax.add, (3,), (2,), "SAME", base_dilation=(2,))`
/// is `[3.]` (the padding was taken from the dilated size before, which
/// gave `[1., 2.]`). With window dilation 2 the window spans 5:
/// `padtype_to_pads((2,), (5,), (2,), "SAME") == [(1, 2)]`.
#[test]
fn same_padding_with_base_dilation_matches_jax() {
    let x = t(&[1.0, 2.0], &[2]);
    let w = WindowParams::dilated("t", &[2], &[3], &[2], &Padding::Same, &[2], &[1]).unwrap();
    let y = lax::reduce_window(ReduceOp::Sum, &x, &w).unwrap();
    assert_eq!(y.shape().dims(), &[1]);
    assert_eq!(y.to_vec::<f64>(), vec![3.0]);
    let w = WindowParams::dilated("t", &[2], &[3], &[2], &Padding::Same, &[2], &[2]).unwrap();
    assert_eq!(w.padding.as_slice(), &[(1, 2)]);
    // the gradient goes through the same parameters
    let g = grad(|x: &Tensor| {
        let w = WindowParams::dilated("t", &[2], &[3], &[2], &Padding::Same, &[2], &[1]).unwrap();
        lax::reduce_window(ReduceOp::Sum, x, &w).unwrap().sum()
    })(&x);
    assert_eq!(g.to_vec::<f64>(), vec![1.0, 1.0]);
}

/// vmap over an empty batch of windowed reductions and pooling: the batch
/// rule's one-tap window over the empty batch axis gives an empty axis (it
/// was refused as larger than the padded input).
#[test]
fn windows_under_vmap_of_an_empty_batch() {
    let x = Tensor::zeros([0, 1, 2, 4, 4], DType::F64);
    let pooled = vmap(|x: &Tensor| lax::max_pool(x, &[2, 2], &[2, 2], &Padding::Valid).unwrap())(&x);
    assert_eq!(pooled.shape().dims(), &[0, 1, 2, 2, 2]);
    let g = vmap(grad(|x: &Tensor| lax::avg_pool(x, &[2, 2], &[1, 1], &Padding::Same).unwrap().sum()))(&x);
    assert_eq!(g.shape().dims(), &[0, 1, 2, 4, 4]);
    // an explicit one-tap window over an empty axis is an empty axis
    let w = WindowParams::new("t", &[0, 3], &[1, 2], &[1, 1], &Padding::Valid).unwrap();
    assert_eq!(
        lax::reduce_window(ReduceOp::Sum, &Tensor::zeros([0, 3], DType::F64), &w).unwrap().shape().dims(),
        &[0, 2]
    );
}
