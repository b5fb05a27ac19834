//! The elementwise ops of issue 46 (`log10`, `erfc`, `logit`, `sinc`,
//! `xlogy`, `xlog1py`, `logaddexp`, `hypot`) at the points where they need
//! care: zeros, infinities, NaNs, overflow and the tails, against JAX 0.10.2
//! (float64 unless stated; the call is beside each number) and scipy 1.17.1.
//! The registry's generic tests cover their rules everywhere else, and
//! `registry::edge_points` their derivatives at kinks.

use crate::harness::on_each_device;
use std::f64::consts::{FRAC_2_PI, LOG10_2};
use xform::prelude::*;
use xform::{lax, DType};

fn f64s(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), [v.len()])
}

/// Equal, or both NaN (and zeros of either sign equal).
fn same(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g == w || (g.is_nan() && w.is_nan()), "{got:?} vs {want:?}");
    }
}

/// Within `tol` relative (equal infinities, NaN equal to NaN).
fn near(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * w.abs();
        assert!(ok, "{got:?} vs {want:?} (relative tolerance {tol})");
    }
}

#[test]
fn xlogy_and_xlog1py_are_zero_at_zero_unless_nan() {
    on_each_device(|| {
        let nan = f64::NAN;
        // jax.scipy.special.xlogy(a, b)
        let a = f64s(&[0.0, 0.0, 0.0, nan, 2.0, 0.0, 1.0, 0.0]);
        let b = f64s(&[0.0, -1.0, nan, 1.0, 0.0, f64::INFINITY, -1.0, 3.0]);
        same(&a.xlogy(&b).to_vec::<f64>(), &[0.0, 0.0, nan, nan, f64::NEG_INFINITY, 0.0, nan, 0.0]);
        same(&a.cast(DType::F32).xlogy(&b.cast(DType::F32)).to_vec_f64(), &a.xlogy(&b).to_vec::<f64>());
        // jax.scipy.special.xlog1py(a, b)
        let a = f64s(&[0.0, 0.0, 1.0, 0.0, nan, 2.0]);
        let b = f64s(&[-1.0, -2.0, -1.0, nan, 0.0, 3.0]);
        same(&a.xlog1py(&b).to_vec::<f64>(), &[0.0, 0.0, f64::NEG_INFINITY, nan, nan, 2.772588722239781]);
        // jax.grad(lambda v: xlogy(v[0], v[1]))(jnp.array([0., 0.])): the custom
        // rule's a_dot * log(b) + b_dot * a / b (xlog1py the same at (0, -1))
        let g = grad(|v: &Tensor| v.index(0).xlogy(&v.index(1)))(&f64s(&[0.0, 0.0])).to_vec::<f64>();
        same(&g, &[f64::NEG_INFINITY, nan]);
        let g = grad(|v: &Tensor| v.index(0).xlog1py(&v.index(1)))(&f64s(&[0.0, -1.0])).to_vec::<f64>();
        same(&g, &[f64::NEG_INFINITY, nan]);
    })
}

#[test]
fn logaddexp_keeps_infinities_and_large_values() {
    on_each_device(|| {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        // jnp.logaddexp(a, b)
        let a = f64s(&[-inf, inf, inf, nan, 1e308, -1000.0, 0.0, 1.0, -2.5]);
        let b = f64s(&[-inf, inf, -inf, 1.0, 1e308, -1000.0, -inf, 2.0, 3.0]);
        let want = [-inf, inf, inf, nan, 1e308, -999.3068528194401, 0.0, 2.3132616875182226, 3.0040784432705707];
        near(&a.logaddexp(&b).to_vec::<f64>(), &want, 2e-16);
        near(&a.cast(DType::F32).logaddexp(&b.cast(DType::F32)).to_vec_f64()[6..], &want[6..], 1e-7);
    })
}

#[test]
fn hypot_neither_overflows_nor_underflows() {
    on_each_device(|| {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        // jnp.hypot(a, b)
        let a = f64s(&[1e200, 1e-200, inf, nan, 3.0, -0.0, -5.0, 1e308]);
        let b = f64s(&[1e200, 1e-200, nan, 1.0, 4.0, 0.0, 12.0, 1e308]);
        let want = [1.414213562373095e200, 1.414213562373095e-200, inf, nan, 5.0, 0.0, 13.0, 1.4142135623730951e308];
        near(&a.hypot(&b).to_vec::<f64>(), &want, 2e-16);
        // jnp.hypot(jnp.float32(1e30), jnp.float32(1e30)), and of 3e-30, 4e-30
        let big = Tensor::scalar(1e30f32);
        assert_eq!(big.hypot(&big).to_vec::<f32>(), [1.4142135e30]);
        let small = Tensor::scalar(3e-30f32).hypot(&Tensor::scalar(4e-30f32));
        near(&small.to_vec_f64(), &[5.000000015855384e-30], 1e-7);
    })
}

#[test]
fn sinc_is_one_at_zero_with_jax_derivatives_there() {
    on_each_device(|| {
        // jnp.sinc(x)
        let x = f64s(&[0.0, -0.0, 1.0, 0.5, -2.5, 1e-10, 100.25]);
        let want = [1.0, 1.0, 3.8981718325193755e-17, FRAC_2_PI, 0.12732395447351627, 1.0, 0.002245177845778254];
        near(&x.sinc().to_vec::<f64>(), &want, 1e-15);
        // in f32: sin(pi) is not 0 there either (jnp.sinc of float32)
        let x32 = Tensor::from_vec(vec![0.0f32, 1.0, 0.5, -2.5], [4]);
        near(&x32.sinc().to_vec_f64(), &[1.0, -2.7827534054836178e-08, 0.6366197466850281, 0.1273239552974701], 1e-6);
    });
    // JAX's _sinc_maclaurin: the derivatives at 0 are those of sin(pi x) / (pi x),
    // jax.grad applied k times at 0.: 0, -pi^2 / 3, 0, pi^4 / 5
    let s = |x: &Tensor| x.sinc();
    let d1 = grad(s);
    let d2 = grad(grad(s));
    let d3 = grad(grad(grad(s)));
    let d4 = grad(grad(grad(grad(s))));
    let zero = Tensor::scalar(0.0f64);
    let got = [d1(&zero), d2(&zero), d3(&zero), d4(&zero)].map(|t| t.item_f64());
    near(&got, &[0.0, -3.2898681336964524, 0.0, 19.481818206800487], 1e-14);
    // away from 0: jax.grad(jnp.sinc)(0.5), jax.grad(jax.grad(jnp.sinc))(0.5)
    let half = Tensor::scalar(0.5f64);
    near(&[d1(&half).item_f64(), d2(&half).item_f64()], &[-1.2732395447351625, -1.190227128238935], 1e-14);
    // far from 0 the unused branch at 0 stays finite (jax.grad and its square at 1e31, 1e200)
    for (x, g, h) in [
        (1e31, 9.154085778358641e-32, -1.2645725486723455e-31),
        (1e200, 3.9704345201909945e-201, -2.883353150784303e-200),
    ] {
        let x = Tensor::scalar(x);
        near(&[d1(&x).item_f64(), d2(&x).item_f64()], &[g, h], 1e-10);
        assert!(hessian(s)(&x).item_f64().is_finite());
    }
}

#[test]
fn erfc_keeps_its_digits_in_the_tails() {
    on_each_device(|| {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let xs = [-3.0, -1.0, 0.0, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 26.5, inf, -inf, nan];
        // scipy.special.erfc(x) (1 - erf(x) would be 0 from x = 6 on)
        let want = [
            1.9999779095030015,
            1.8427007929497148,
            1.0,
            0.6713732405408726,
            0.4795001221869535,
            0.15729920705028516,
            0.004677734981047266,
            1.5374597944280347e-12,
            2.0884875837625446e-45,
            7.212994172451209e-100,
            2.2109076642637343e-307,
            0.0,
            2.0,
            nan,
        ];
        near(&f64s(&xs).erfc().to_vec::<f64>(), &want, 4e-15);
        // f32: numpy.float32(scipy.special.erfc(x)), the f64 value rounded once
        // (erfc(10) is subnormal in f32; XLA's f32 erfc flushes it to 0)
        let got32 = Tensor::from_vec(xs.iter().map(|&x| x as f32).collect::<Vec<_>>(), [xs.len()]).erfc();
        let want32: Vec<f32> = want.iter().map(|&w| w as f32).collect();
        let ok = got32.to_vec::<f32>().iter().zip(&want32).all(|(g, w)| g == w || (g.is_nan() && w.is_nan()));
        assert!(ok, "{:?} vs {want32:?}", got32.to_vec::<f32>());
    })
}

#[test]
fn log10_is_exact_at_powers_of_ten() {
    on_each_device(|| {
        // 10^0 ..= 10^22 are the powers of ten an f64 holds exactly
        let p: Vec<f64> = (0..=22).map(|k| format!("1e{k}").parse().unwrap()).collect();
        let k: Vec<f64> = (0..=22).map(|k| k as f64).collect();
        assert_eq!(f64s(&p).log10().to_vec::<f64>(), k);
        // 10^0 ..= 10^10 in f32
        let p32: Vec<f32> = (0..=10).map(|k| format!("1e{k}").parse().unwrap()).collect();
        let k32: Vec<f32> = (0..=10).map(|k| k as f32).collect();
        assert_eq!(Tensor::from_vec(p32, [11]).log10().to_vec::<f32>(), k32);
        // jnp.log10(jnp.array([1e-5, 0.001, 2.]))
        near(&f64s(&[1e-5, 0.001, 2.0]).log10().to_vec::<f64>(), &[-5.0, -3.0, LOG10_2], 0.0);
    })
}

#[test]
fn logit_inverts_the_sigmoid_and_diverges_at_its_ends() {
    on_each_device(|| {
        // jax.scipy.special.logit(x)
        let x = f64s(&[0.0, 1.0, 0.5, 0.25, 0.9, -0.1, 1e-10]);
        let want = [
            f64::NEG_INFINITY,
            f64::INFINITY,
            0.0,
            -1.0986122886681098,
            2.1972245773362196,
            f64::NAN,
            -23.025850929840455,
        ];
        near(&x.logit().to_vec::<f64>(), &want, 1e-15);
        let z = f64s(&[-3.0, -0.5, 0.0, 2.0]);
        near(&z.sigmoid().logit().to_vec::<f64>(), &z.to_vec::<f64>(), 1e-14);
    });
    // jax.grad(jax.scipy.special.logit) at 0. and 1. (the ends of its domain)
    let g = grad(|x: &Tensor| x.logit());
    assert_eq!([g(&Tensor::scalar(0.0f64)).item_f64(), g(&Tensor::scalar(1.0f64)).item_f64()], [f64::INFINITY; 2]);
}

#[test]
fn integer_operands_convert_to_f32_and_lax_refuses_them_by_name() {
    let i = Tensor::from_vec(vec![1i32, 10, 100], [3]);
    let l = i.log10();
    assert_eq!((l.dtype(), l.to_vec::<f32>()), (DType::F32, vec![0.0, 1.0, 2.0]));
    assert_eq!(i.erfc().dtype(), DType::F32);
    let x = i.xlogy(&Tensor::from_vec(vec![1i32, 1, 1], [3]));
    assert_eq!((x.dtype(), x.to_vec::<f32>()), (DType::F32, vec![0.0, 0.0, 0.0]));
    assert_eq!(i.hypot(&Tensor::scalar(0.0f64)).dtype(), DType::F64);
    let err = |r: xform::Result<Tensor>| r.map(|_| ()).unwrap_err().to_string();
    let e = err(lax::logit(&i));
    assert!(e.contains("logit") && e.contains("int32"), "{e}");
    let e = err(lax::xlogy(&i, &i));
    assert!(e.contains("xlogy") && e.contains("int32"), "{e}");
    let e = err(lax::logaddexp(&i, &i.cast(DType::F32)));
    assert!(e.contains("logaddexp"), "{e}");
}

#[test]
fn the_new_ops_compose_with_vmap_and_jit() {
    // vmap of grad against a loop, and jit against eager, for a function of all eight
    let f = |v: &Tensor| {
        let (a, b) = (v.index(0), v.index(1));
        let s = a.xlogy(&(&b * &b + 1.0)) + a.xlog1py(&(&b * &b)) + a.logaddexp(&b) + a.hypot(&b);
        s + a.sinc() + (&b * &b + 1.0).log10() + a.erfc() + (b.tanh() * 0.25 + 0.5).logit()
    };
    let xs = Tensor::from_vec(vec![0.0f64, 0.5, -1.25, 2.0, 0.75, -0.3], [3, 2]);
    let batched = vmap(grad(f))(&xs).to_vec::<f64>();
    let looped: Vec<f64> = (0..3).flat_map(|i| grad(f)(&xs.index(i)).to_vec::<f64>()).collect();
    near(&batched, &looped, 1e-15);
    let jitted = jit(f);
    for i in 0..3 {
        near(&jitted(&xs.index(i)).to_vec::<f64>(), &f(&xs.index(i)).to_vec::<f64>(), 1e-15);
    }
}
