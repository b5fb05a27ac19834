//! dynamic_slice and dynamic_update_slice resolve their start indices as JAX
//! 0.10 does (issue 17, item 7): a negative start is wrapped once by the
//! axis length, then clamped so the block fits. Every expected number below
//! was computed with JAX 0.10.2 (`jax.lax.dynamic_slice`,
//! `jax.lax.dynamic_update_slice`, in float64), eagerly and under each
//! transform.

use crate::harness::{assert_close as close, on_each_device, v};
use xform::prelude::*;
use xform::{jacfwd, jacrev};

fn x4() -> Tensor {
    Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 3.0], [4])
}

fn start(s: i64) -> Tensor {
    Tensor::scalar(s)
}

/// JAX's results on x = [0, 1, 2, 3] for a block of 2: the slice's first
/// element, and where `[9, 9]` lands.
const JAX: [(i64, [f64; 2], [f64; 4]); 8] = [
    (-1, [2., 3.], [0., 1., 9., 9.]),
    (-2, [2., 3.], [0., 1., 9., 9.]),
    (-3, [1., 2.], [0., 9., 9., 3.]),
    (-4, [0., 1.], [9., 9., 2., 3.]),
    (-5, [0., 1.], [9., 9., 2., 3.]),
    (-10, [0., 1.], [9., 9., 2., 3.]),
    (3, [2., 3.], [0., 1., 9., 9.]),
    (5, [2., 3.], [0., 1., 9., 9.]),
];

#[test]
fn negative_starts_wrap_then_clamp_like_jax() {
    on_each_device(|| {
        let nine = Tensor::from_vec(vec![9.0f64, 9.0], [2]);
        for (s, slice, update) in JAX {
            for st in [start(s), Tensor::scalar(s as i32)] {
                assert_eq!(
                    v(&x4().dynamic_slice(std::slice::from_ref(&st), &[2])),
                    slice.to_vec(),
                    "dynamic_slice start {s}"
                );
                assert_eq!(
                    v(&x4().dynamic_update_slice(&nine, &[st])),
                    update.to_vec(),
                    "dynamic_update_slice start {s}"
                );
            }
        }
        // Rank 2, one negative start per axis: x[3, 4] = arange, block [2, 2]
        // at (-1, -3) is rows 1..3 (wrap 2, clamp 1), columns 1..3.
        let x = Tensor::arange(0.0, 12.0, 1.0, DType::F64).reshape(&[3, 4]);
        let b = x.dynamic_slice(&[start(-1), start(-3)], &[2, 2]);
        assert_eq!(v(&b), vec![5., 6., 9., 10.]);
    })
}

#[test]
fn negative_starts_under_grad_jvp_and_jacobians() {
    on_each_device(|| {
        let w = Tensor::from_vec(vec![10.0f64, 20.0], [2]);
        // grad of sum(dynamic_slice(x, [-1], [2]) * w): w lands on [2, 3].
        let g = grad(|x: &Tensor| (x.dynamic_slice(&[start(-1)], &[2]) * &w).sum())(&x4());
        close(&v(&g), &[0., 0., 10., 20.], 0.0);
        // The update's gradient is read back from the same block.
        let f = |u: &Tensor| {
            (x4().dynamic_update_slice(u, &[start(-1)]) * Tensor::from_vec(vec![1.0f64, 2., 3., 4.], [4])).sum()
        };
        close(&v(&grad(f)(&w)), &[3., 4.], 0.0);
        // The operand's gradient is zero where the update landed.
        let h = |x: &Tensor| (x.dynamic_update_slice(&w, &[start(-3)]) * x).sum();
        close(&v(&grad(h)(&x4())), &[0., 10., 20., 6.], 0.0);
        // jvp
        let t = Tensor::from_vec(vec![1.0f64, 2., 3., 4.], [4]);
        let (y, ty) = jvp(|x: &Tensor| x.dynamic_slice(&[start(-3)], &[2]), &x4(), &t);
        close(&v(&y), &[1., 2.], 0.0);
        close(&v(&ty), &[2., 3.], 0.0);
        // jacfwd and jacrev: rows of the identity at the resolved start.
        let want = [0., 0., 1., 0., 0., 0., 0., 1.];
        close(&v(&jacfwd(|x: &Tensor| x.dynamic_slice(&[start(-1)], &[2]))(&x4())), &want, 0.0);
        close(&v(&jacrev(|x: &Tensor| x.dynamic_slice(&[start(-1)], &[2]))(&x4())), &want, 0.0);
    })
}

#[test]
fn negative_starts_under_vmap_and_trace() {
    on_each_device(|| {
        // Batched starts (the per-example gather path), as JAX:
        // vmap(lambda s: dynamic_slice(x, [s], [2]))([-1, -3, -5, 1]).
        let starts = Tensor::from_vec(vec![-1i64, -3, -5, 1], [4]);
        let per = vmap(|s: &Tensor| x4().dynamic_slice(std::slice::from_ref(s), &[2]))(&starts);
        assert_eq!(v(&per), vec![2., 3., 1., 2., 0., 1., 1., 2.]);
        // Batched starts for the update (the per-example scatter path).
        let nine = Tensor::from_vec(vec![9.0f64, 9.0], [2]);
        let per = vmap(|s: &Tensor| x4().dynamic_update_slice(&nine, std::slice::from_ref(s)))(&starts);
        assert_eq!(v(&per), vec![0., 1., 9., 9., 0., 9., 9., 3., 9., 9., 2., 3., 0., 9., 9., 3.]);
        // Extreme i64 starts do not overflow in the batched path.
        let far = Tensor::from_vec(vec![i64::MIN, i64::MAX, -2], [3]);
        let per = vmap(|s: &Tensor| x4().dynamic_slice(std::slice::from_ref(s), &[2]))(&far);
        assert_eq!(v(&per), vec![0., 1., 2., 3., 2., 3.]);
        // A batched operand with unbatched negative starts.
        let xs = Tensor::arange(0.0, 8.0, 1.0, DType::F64).reshape(&[2, 4]);
        let per = vmap(|x: &Tensor| x.dynamic_slice(&[start(-1)], &[2]))(&xs);
        assert_eq!(v(&per), vec![2., 3., 6., 7.]);
        // A traced program resolves the start it is given at run time.
        let prog = trace(|(x, s): &(Tensor, Tensor)| x.dynamic_slice(std::slice::from_ref(s), &[2]), &(x4(), start(0)));
        let out = prog.eval(&[x4(), start(-1)]).unwrap();
        assert_eq!(v(&out[0]), vec![2., 3.]);
    })
}
