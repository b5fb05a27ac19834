//! `xform::linalg::expm` against JAX's `jax.scipy.linalg.expm` (float64
//! and float32, each order of the Padé approximant and the squarings;
//! JAX 0.10.2 on the CPU), its gradient against JAX's and finite
//! differences, and `vmap` over matrices needing different orders.

use crate::linalg::{assert_close, t};
use xform::linalg;
use xform::prelude::*;
use xform::testing::{check_grads, check_vmap, Modes};

/// A = [[4, 1, 2], [1, 3, 0.5], [2, 0.5, 5]].
fn a() -> Tensor {
    t(&[4., 1., 2., 1., 3., 0.5, 2., 0.5, 5.], &[3, 3])
}

#[test]
fn expm_equals_jax() {
    // (the shared comparison allows tol (1 + |want|): tolerances halved
    // from tol max(1, |want|), so no check is looser)
    let tol = 5e-15;
    // expm([[0.001, 0.002], [0.003, -0.001]]): Padé 3
    let e = linalg::expm(&t(&[0.001, 0.002, 0.003, -0.001], &[2, 2])).unwrap();
    assert_close(
        &e,
        &[1.0010035011687086, 0.00200000233333415, 0.0030000035000012247, 0.9990034988353748],
        tol,
        "pade 3",
    );
    // expm([[0.1, 0.2], [-0.3, 0.05]]): Padé 7
    let e = linalg::expm(&t(&[0.1, 0.2, -0.3, 0.05], &[2, 2])).unwrap();
    assert_close(&e, &[1.072723714165671, 0.21344984212019538, -0.3201747631802931, 1.0193612536356218], tol, "pade 7");
    // expm(A / 4): Padé 13, no squaring
    let want = [
        3.1936995080511252,
        0.7269567186418919,
        1.67356456494837,
        0.726956718641892,
        2.2251265489781877,
        0.5391992614526148,
        1.6735645649483701,
        0.5391992614526148,
        3.9426213394594747,
    ];
    assert_close(&linalg::expm(&(a() / 4.0)).unwrap(), &want, tol, "pade 13");
    // expm(A): one squaring; expm(10 A): four
    let want = [
        358.6292220624051,
        149.46965597532306,
        418.7471713206844,
        149.46965597532258,
        77.37092078003958,
        170.58111548369192,
        418.74717132068486,
        170.58111548369268,
        520.0796639747322,
    ];
    assert_close(&linalg::expm(&a()).unwrap(), &want, 5e-14, "squared once");
    let want = [
        1.768975484589874e29,
        7.40233292367522e28,
        2.1340931930870307e29,
        7.402332923675256e28,
        3.0975292303516673e28,
        8.930179328653544e28,
        2.134093193087007e29,
        8.930179328653401e28,
        2.574571437792563e29,
    ];
    assert_close(&linalg::expm(&(a() * 10.0)).unwrap(), &want, 5e-13, "squared four times");
    // expm((A / 4).astype(float32)): the f32 orders (Padé 7 with scaling)
    let want32 = [
        3.1936991214752197,
        0.7269566059112549,
        1.6735643148422241,
        0.7269566655158997,
        2.225126266479492,
        0.5391992330551147,
        1.6735646724700928,
        0.5391992330551147,
        3.9426214694976807,
    ];
    assert_close(&linalg::expm(&(a() / 4.0).cast(DType::F32)).unwrap(), &want32, 5e-7, "f32");
    // expm([[1e6, 0], [0, 1]]): more than 16 squarings, NaN as JAX
    let e = linalg::expm(&t(&[1e6, 0., 0., 1.], &[2, 2])).unwrap();
    assert!(e.to_vec_f64().iter().all(|v| v.is_nan()), "{e}");
    // expm(0) = I, and of a non-square matrix an error naming expm
    assert_close(
        &linalg::expm(&Tensor::zeros([3, 3], DType::F64)).unwrap(),
        &Tensor::eye(3, DType::F64).to_vec_f64(),
        0.0,
        "expm(0)",
    );
    let e = linalg::expm(&Tensor::zeros([2, 3], DType::F64)).unwrap_err().to_string();
    assert!(e.contains("expm") && e.contains("[2, 3]"), "{e}");
}

#[test]
fn expm_derivatives_equal_jax_and_finite_differences() {
    let c = t(&[1., -2., 0.5, 0.3, 1., 2., -1., 0., 1.], &[3, 3]);
    let f = |a: &Tensor| (linalg::expm(a).unwrap() * &c).sum();
    // jax.grad(lambda a: jnp.sum(expm(a) * C))(A / 4) and (A)
    let want = [
        2.309335664224623,
        -4.343061503823152,
        3.557318772600679,
        2.6788100217324247,
        2.0965702038005904,
        6.7132008326708945,
        -1.6303097792695167,
        -1.2462479224706002,
        3.961331347203401,
    ];
    assert_close(&grad(f)(&(a() / 4.0)), &want, 5e-13, "grad, pade 13");
    let want = [
        239.2019716499235,
        -61.28613813079846,
        515.3463979810476,
        328.0210571730622,
        85.24003980162934,
        503.82754314506565,
        178.52252621022853,
        -87.44294566848112,
        509.32802551615896,
    ];
    assert_close(&grad(f)(&a()), &want, 5e-13, "grad, squared");
    // jax.grad(lambda a: jnp.sum(expm(a) * C[:2, :2]))([[0.1, 0.2], [-0.3, 0.05]])
    let c2 = t(&[1., -2., 0.3, 1.], &[2, 2]);
    let g = grad(|a: &Tensor| (linalg::expm(a).unwrap() * &c2).sum())(&t(&[0.1, 0.2, -0.3, 0.05], &[2, 2]));
    assert_close(
        &g,
        &[0.8090600162877657, -2.428421489014259, 0.5161234750551632, 0.7600728383190481],
        5e-13,
        "grad, pade 7",
    );
    for x in [a() / 4.0, t(&[0.1, 0.2, -0.3, 0.05], &[2, 2]), a() * 0.7] {
        check_grads(|a: &Tensor| linalg::expm(a).unwrap(), &x, 2, Modes::Both)
            .unwrap_or_else(|e| panic!("expm at {x}: {e}"));
    }
}

#[test]
fn expm_vmap_equals_a_loop() {
    // matrices needing different orders and squarings in one stack
    let stack = Tensor::stack(&[a() * 0.001, a() * 0.05, a() / 4.0, a() * 3.0], 0);
    check_vmap(|a: &Tensor| linalg::expm(a).unwrap(), &stack, xform::Axes::All(Some(0))).unwrap();
    let batched = linalg::expm(&stack).unwrap();
    for i in 0..4 {
        let one = linalg::expm(&stack.select(0, i)).unwrap();
        assert_eq!(batched.select(0, i).to_vec_f64(), one.to_vec_f64(), "matrix {i}");
    }
    // expm(A) expm(-A) = I (for the three of moderate norm: the last's
    // product cancels entries near 1e9)
    let moderate = stack.slice_axis(0, 0, 3, 1);
    let prod = linalg::expm(&moderate).unwrap().matmul(&linalg::expm(&-&moderate).unwrap());
    let eye = Tensor::eye(3, DType::F64).broadcast_to([3, 3, 3]);
    assert!((&prod - &eye).abs().max().item_f64() < 1e-12);
    let jitted = jit(|a: &Tensor| linalg::expm(a).unwrap())(&stack);
    assert_eq!(jitted.to_vec_f64(), batched.to_vec_f64());
}
