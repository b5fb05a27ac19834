//! The registry's edge points (`registry::edge_points`): each primitive's
//! gradient and Hessian at a tie, a kink or a singular point, through
//! grad, jacfwd, jacrev and hessian (forward over reverse) and jacrev of
//! jacrev, against JAX's numbers.

use crate::registry::{edge_points, EdgePoint};
use xform::core::interp::bind;
use xform::prelude::*;

/// Equal within `tol` (relative above 1), with equal infinities and NaN
/// equal to NaN.
fn same(a: f64, b: f64, tol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= tol * b.abs().max(1.0)
}

fn check(e: &EdgePoint, what: &str, got: &[f64], want: &[f64]) {
    let ok = got.len() == want.len() && got.iter().zip(want).all(|(&g, &w)| same(g, w, 1e-12));
    assert!(ok, "{} at {:?}: {what} is {got:?}, want {want:?} {}", e.prim, e.at, e.note);
}

#[test]
fn derivatives_at_edge_points_match_jax() {
    for e in edge_points() {
        let (prim, vector) = (e.prim.clone(), e.vector);
        let k = e.at.len();
        // The primitive as a function of one vector of its operands.
        let f = move |p: &Tensor| -> Tensor {
            let args: Vec<Tensor> =
                if vector { vec![p.clone()] } else { (0..k).map(|i| p.index(i as isize)).collect() };
            bind(&prim, &args).unwrap_or_else(|err| err.raise())[0].clone()
        };
        let x = Tensor::from_vec(e.at.clone(), [k]);
        check(&e, "grad", &grad(&f)(&x).to_vec::<f64>(), &e.grad);
        check(&e, "jacfwd", &jacfwd(&f)(&x).to_vec::<f64>(), &e.grad);
        check(&e, "jacrev", &jacrev(&f)(&x).to_vec::<f64>(), &e.grad);
        let want: Vec<f64> = e.hessian.concat();
        check(&e, "hessian", &hessian(&f)(&x).to_vec::<f64>(), &want);
        check(&e, "jacrev(jacrev)", &jacrev(jacrev(&f))(&x).to_vec::<f64>(), &want);
        check(&e, "jacfwd(jacfwd)", &jacfwd(jacfwd(&f))(&x).to_vec::<f64>(), &want);
    }
}

/// The JVP of a max reduction takes the extreme element's tangent only: a
/// NaN tangent elsewhere (pow's exponent tangent at a negative base, where
/// log is NaN) does not reach the result. JAX 0.10.2:
/// `jax.jvp(lambda x: jnp.max(x ** jnp.maximum(x, 0.)), (x,), (t,))` with
/// x = [-0.4, 1.01, 0.93], t = [1, 2, 3] gives (1.0101005..., 2.04030268...);
/// its grad is [nan, 1.0201513375449436, 0] (the cotangent 0 meets the NaN
/// partial: reverse mode multiplies, as JAX's does). JAX's jacfwd of it is
/// all NaN (there the fold into a select does not happen); xform's jacfwd
/// agrees with its jvp, and with PyTorch, which routes the tangent to the
/// chosen element only.
#[test]
fn max_reduction_jvp_ignores_tangents_of_other_elements() {
    use xform::prelude::*;
    let f = |x: &Tensor| x.pow(&x.maximum(&x.zeros_like())).max();
    let x = Tensor::from_vec(vec![-0.4f64, 1.01, 0.93], [3]);
    let t = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    let (y, ty) = jvp(f, &x, &t);
    assert!((y.to_vec::<f64>()[0] - 1.0101005).abs() < 1e-7, "{y}");
    let want = 2.0 * 1.0201513375449436;
    let got = ty.to_vec::<f64>()[0];
    assert!((got - want).abs() < 1e-12 * want, "jvp {got} != {want}");
    // the same through jacfwd, whose tangents are a batched basis
    let j = jacfwd(f)(&x).to_vec::<f64>();
    assert!(j[0] == 0.0 && (j[1] - 1.0201513375449436).abs() < 1e-12 && j[2] == 0.0, "{j:?}");
    // reverse mode multiplies the zero cotangent into the NaN partial, as JAX
    let g = grad(f)(&x).to_vec::<f64>();
    assert!(g[0].is_nan() && (g[1] - 1.0201513375449436).abs() < 1e-12 && g[2] == 0.0, "{g:?}");
}
