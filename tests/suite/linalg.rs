//! `xform::linalg` against JAX's numbers (float64, each with the JAX call
//! that produced it; JAX 0.10.2 on the CPU), finite-difference checks of
//! first and second derivatives through every function, `vmap` against a
//! loop, and the bad-input table of the module's documentation.

use xform::linalg::{self, TriangularSpec};
use xform::prelude::*;
use xform::testing::{check_grads, check_vmap, Modes};

pub(crate) fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec())
}

/// A = [[4, 1, -2], [1, 3, 0.5], [-2, 0.5, 5]] (symmetric positive definite).
fn a_spd() -> Tensor {
    t(&[4., 1., -2., 1., 3., 0.5, -2., 0.5, 5.], &[3, 3])
}

/// B = [[2, -1, 0], [3, 1, 4], [-1, 2, 1]] (general, det -7).
fn b_general() -> Tensor {
    t(&[2., -1., 0., 3., 1., 4., -1., 2., 1.], &[3, 3])
}

fn rhs() -> Tensor {
    t(&[1., -2., 0.5], &[3])
}

/// Each element within `tol (1 + |want|)` of JAX's (NaN matching NaN).
pub(crate) fn assert_close(got: &Tensor, want: &[f64], tol: f64, what: &str) {
    let g = got.to_vec_f64();
    assert_eq!(g.len(), want.len(), "{what}: {got}");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * (1.0 + b.abs());
        assert!(ok, "{what}: element {i}: {a:e} vs JAX {b:e}\n{got}");
    }
}

#[test]
fn linalg_values_equal_jax() {
    let tol = 1e-14;
    // jnp.linalg.cholesky(A)
    let l = linalg::cholesky(&a_spd()).unwrap();
    assert_close(
        &l,
        &[2., 0., 0., 0.5, 1.6583123951777, 0., -1., 0.6030226891555273, 1.9069251784911847],
        tol,
        "cholesky",
    );
    // jnp.linalg.det(B), jnp.linalg.slogdet(B)
    assert_close(&linalg::det(&b_general()).unwrap(), &[-7.0], tol, "det");
    let (sign, logdet) = linalg::slogdet(&b_general()).unwrap();
    assert_close(&sign, &[-1.0], 0.0, "slogdet sign");
    assert_close(&logdet, &[1.9459101490553137], tol, "slogdet");
    // jnp.linalg.solve(B, b), jnp.linalg.inv(B)
    assert_close(
        &linalg::solve(&b_general(), &rhs()).unwrap(),
        &[1.5714285714285712, 2.142857142857142, -2.214285714285714],
        tol,
        "solve",
    );
    let inv = [1., -1. / 7., 4. / 7., 1., -2. / 7., 8. / 7., -1., 3. / 7., -5. / 7.];
    assert_close(&linalg::inv(&b_general()).unwrap(), &inv, tol, "inv");
    // jax.lax.linalg.lu(B): lu, pivots [1, 2, 2], permutation [1, 2, 0]
    let (f, piv, perm) = linalg::lu(&b_general()).unwrap();
    assert_close(
        &f,
        &[
            3.,
            1.,
            4.,
            -0.3333333333333333,
            2.3333333333333335,
            2.333333333333333,
            0.6666666666666666,
            -0.7142857142857142,
            -1.0000000000000002,
        ],
        tol,
        "lu",
    );
    assert_eq!(piv.to_vec::<i32>(), vec![1, 2, 2]);
    assert_eq!(perm.to_vec::<i32>(), vec![1, 2, 0]);
    assert_close(
        &linalg::lu_solve(&f, &perm, &rhs()).unwrap(),
        &[1.5714285714285712, 2.142857142857142, -2.214285714285714],
        tol,
        "lu_solve",
    );
    // jax.scipy.linalg.cho_solve((cholesky(A), True), b)
    assert_close(&linalg::cho_solve(&l, true, &rhs()).unwrap(), &[0.75, -1.0, 0.4999999999999999], tol, "cho_solve");
    let upper = l.transpose(0, 1);
    assert_close(
        &linalg::cho_solve(&upper, false, &rhs()).unwrap(),
        &[0.75, -1.0, 0.4999999999999999],
        tol,
        "cho_solve upper",
    );
    // jax.scipy.linalg.solve_triangular(A, b, lower=True)
    let spec = TriangularSpec { left_side: true, lower: true, transpose_a: false, unit_diagonal: false };
    let x = linalg::triangular_solve(&a_spd(), &rhs().reshape(&[3, 1]), spec).unwrap();
    assert_close(&x, &[0.25, -0.75, 0.275], tol, "solve_triangular");
}

#[test]
fn linalg_derivatives_equal_jax() {
    let tol = 1e-12;
    // jax.grad(jnp.linalg.det)(B)
    let g = grad(|b: &Tensor| linalg::det(b).unwrap())(&b_general());
    assert_close(&g, &[-7., -7., 7., 1., 2., -3., -4., -8., 5.], tol, "grad det");
    // jax.grad(lambda a: jnp.linalg.slogdet(a)[1])(A)
    let g = grad(|a: &Tensor| linalg::slogdet(a).unwrap().1)(&a_spd());
    let want = [0.36875, -0.15, 0.1625, -0.15, 0.4, -0.1, 0.1625, -0.1, 0.275];
    assert_close(&g, &want, tol, "grad logdet");
    // jax.grad(lambda a: jnp.sum(jnp.linalg.cholesky(a)))(A): symmetric,
    // as the factor is of the symmetrized operand
    let g = grad(|a: &Tensor| linalg::cholesky(a).unwrap().sum())(&a_spd());
    let want = [
        0.3406681705049617,
        0.296446987196089,
        0.3295598346079677,
        0.296446987196089,
        0.226542222522053,
        0.20616508565320438,
        0.3295598346079677,
        0.20616508565320438,
        0.2622022120425378,
    ];
    assert_close(&g, &want, tol, "grad sum cholesky");
    // jax.grad(jnp.linalg.det) at [[1, 2, 3], [4, 5, 6], [7, 8, 9]] (rank 2:
    // the adjugate's transpose, rank one) and at ones((3, 3)) (rank 1: zero)
    let s = t(&[1., 2., 3., 4., 5., 6., 7., 8., 9.], &[3, 3]);
    let g = grad(|a: &Tensor| linalg::det(a).unwrap())(&s);
    assert_close(&g, &[-3., 6., -3., 6., -12., 6., -3., 6., -3.], tol, "grad det, rank 2");
    let g = grad(|a: &Tensor| linalg::det(a).unwrap())(&Tensor::ones([3, 3], DType::F64));
    assert_close(&g, &[0.0; 9], 0.0, "grad det, rank 1");
    // jax.hessian(jnp.linalg.det)(jnp.ones((3, 3)))[0, 0]: the 3 x 3
    // polynomial's, exact at rank 1
    let h = hessian(|a: &Tensor| linalg::det(a).unwrap())(&Tensor::ones([3, 3], DType::F64));
    assert_close(&h.select(0, 0).select(0, 0), &[0., 0., 0., 0., 1., -1., 0., -1., 1.], tol, "hessian det, rank 1");
    // jax.hessian(jnp.linalg.det)(B)[0, 0] and at the rank-2 matrix
    let h = hessian(|a: &Tensor| linalg::det(a).unwrap())(&b_general());
    assert_close(&h.select(0, 0).select(0, 0), &[0., 0., 0., 0., 1., -2., 0., -4., 1.], tol, "hessian det");
    let h = hessian(|a: &Tensor| linalg::det(a).unwrap())(&s);
    assert_close(&h.select(0, 0).select(0, 0), &[0., 0., 0., 0., 9., -8., 0., -6., 5.], tol, "hessian det, rank 2");
    // jax.jvp(jnp.linalg.det, (S,), (B,))[1]
    let (_, dd) = jvp(|a: &Tensor| linalg::det(a).unwrap(), &s, &b_general());
    assert_close(&dd, &[30.0], tol, "jvp det, rank 2");
    // jax.hessian(lambda a: jnp.linalg.slogdet(a)[1])(A)[0, 0]
    let h = hessian(|a: &Tensor| linalg::slogdet(a).unwrap().1)(&a_spd());
    let want =
        [-0.1359765625, 0.0553125, -0.059921875, 0.0553125, -0.0225, 0.024375, -0.059921875, 0.024375, -0.02640625];
    assert_close(&h.select(0, 0).select(0, 0), &want, tol, "hessian logdet");
}

#[test]
fn linalg_derivatives_match_finite_differences() {
    let a = a_spd();
    let b = b_general();
    let rhs2 = t(&[1., -2., 0.5, 0.3, 1.5, -1.0], &[3, 2]);
    let cases: Vec<(&str, Box<dyn Fn(&(Tensor, Tensor)) -> Tensor>)> = vec![
        ("cholesky", Box::new(|(a, _): &(Tensor, Tensor)| linalg::cholesky(a).unwrap())),
        ("solve", Box::new(|(a, b): &(Tensor, Tensor)| linalg::solve(a, b).unwrap())),
        ("inv", Box::new(|(a, _): &(Tensor, Tensor)| linalg::inv(a).unwrap())),
        ("det", Box::new(|(a, _): &(Tensor, Tensor)| linalg::det(a).unwrap())),
        ("slogdet", Box::new(|(a, _): &(Tensor, Tensor)| linalg::slogdet(a).unwrap().1)),
        ("lu", Box::new(|(a, _): &(Tensor, Tensor)| linalg::lu(a).unwrap().0)),
        (
            "cho_solve",
            Box::new(|(a, b): &(Tensor, Tensor)| linalg::cho_solve(&linalg::cholesky(a).unwrap(), true, b).unwrap()),
        ),
        (
            "triangular_solve",
            Box::new(|(a, b): &(Tensor, Tensor)| {
                let s = TriangularSpec { left_side: false, lower: false, transpose_a: true, unit_diagonal: false };
                linalg::triangular_solve(a, &b.transpose(0, 1), s).unwrap()
            }),
        ),
    ];
    // det at singular matrices, where it is a smooth polynomial: up to 3 x 3
    // the explicit polynomial (every order exact); above, JAX's cofactor
    // rule, the derivative at rank n - 1 (to second order) and below (first
    // order: its second derivative there is 0, as JAX's for n >= 4)
    let rank2 = t(&[1., 2., 3., 4., 5., 6., 7., 8., 9.], &[3, 3]);
    let four =
        |v: [f64; 4]| Tensor::from_vec(v.to_vec(), [4, 1]).matmul(&Tensor::from_vec(vec![1., -2., 0.5, 3.], [1, 4]));
    // (the last row the sum of the first two)
    let rank3 = t(&[2., -1., 0., 1., 1., 3., 1., 0., 0., 1., 4., 2., 3., 2., 1., 1.], &[4, 4]);
    let rank1 = four([1., 2., -1., 0.5]);
    // rank 3 with its first column zero: LU's first pivot is the zero one
    // (JAX's cofactor rule gives 0 there; xform the adjugate, by the SVD)
    let zero_first = t(&[0., 1., 2., -1., 0., 3., 1., 0.5, 0., -2., 4., 1., 0., 1., 0., 2.], &[4, 4]);
    let g = grad(|a: &Tensor| linalg::det(a).unwrap())(&zero_first);
    assert!(g.abs().max().item_f64() > 0.1, "the adjugate is not zero: {g}");
    let singular = [(rank2, 2), (Tensor::ones([3, 3], DType::F64), 2), (rank3, 2), (rank1, 1), (zero_first, 1)];
    for (s, order) in singular {
        assert!(linalg::det(&s).unwrap().item_f64().abs() < 1e-12, "{s} is singular");
        check_grads(|a: &Tensor| linalg::det(a).unwrap(), &s, order, Modes::Both)
            .unwrap_or_else(|e| panic!("det at {s}: {e}"));
    }
    for (name, f) in &cases {
        for x in [(a.clone(), rhs2.clone()), (b.clone(), rhs2.clone())] {
            // the factorization needs a positive definite matrix
            if (*name == "cholesky" || *name == "cho_solve") && x.0.to_vec_f64() != a.to_vec_f64() {
                continue;
            }
            check_grads(|x: &(Tensor, Tensor)| f(x), &x, 2, Modes::Both).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn linalg_vmap_equals_a_loop() {
    let k = Key::new(11);
    let m = k.normal([4, 3, 3], DType::F64);
    // a stack of positive definite matrices M Mᵀ + I, and general ones
    let spd = &m.matmul(&m.transpose(1, 2)) + &Tensor::eye(3, DType::F64);
    let gen = &m + &(Tensor::eye(3, DType::F64) * 3.0);
    let bs = k.fold_in(1).normal([4, 3], DType::F64);
    let fs: Vec<(&str, Box<dyn Fn(&(Tensor, Tensor)) -> Tensor>)> = vec![
        ("cholesky", Box::new(|(a, _): &(Tensor, Tensor)| linalg::cholesky(a).unwrap())),
        ("solve", Box::new(|(a, b): &(Tensor, Tensor)| linalg::solve(a, b).unwrap())),
        ("det", Box::new(|(a, _): &(Tensor, Tensor)| linalg::det(a).unwrap())),
        ("inv", Box::new(|(a, _): &(Tensor, Tensor)| linalg::inv(a).unwrap())),
        ("lu", Box::new(|(a, _): &(Tensor, Tensor)| linalg::lu(a).unwrap().0)),
        ("grad logdet", Box::new(|(a, _): &(Tensor, Tensor)| grad(|a: &Tensor| linalg::slogdet(a).unwrap().1)(a))),
    ];
    for (name, f) in &fs {
        for a in [&spd, &gen] {
            if *name == "cholesky" && a.to_vec_f64() == gen.to_vec_f64() {
                continue;
            }
            check_vmap(|x: &(Tensor, Tensor)| f(x), &(a.clone(), bs.clone()), xform::Axes::All(Some(0)))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    // a stack of matrices is the loop over them, without vmap
    let stacked = linalg::det(&gen).unwrap().to_vec_f64();
    for (i, d) in stacked.iter().enumerate() {
        let one = linalg::det(&gen.select(0, i as isize)).unwrap().item_f64();
        assert!((d - one).abs() <= 1e-12 * one.abs(), "det {i}");
    }
    // vmap over right-hand sides with one matrix: one solve, the same values
    let per = vmap(|b: &Tensor| linalg::solve(&gen.select(0, 0), b).unwrap())(&bs);
    for i in 0..4 {
        let one = linalg::solve(&gen.select(0, 0), &bs.select(0, i)).unwrap();
        let gap = (&per.select(0, i) - &one).abs().max().item_f64();
        assert!(gap <= 1e-13, "solve row {i}: {gap}");
    }
}

#[test]
fn linalg_bad_input_follows_the_table() {
    // jnp.linalg.cholesky([[1, 2], [2, 1]]): [[nan, 0], [nan, nan]]
    let l = linalg::cholesky(&t(&[1., 2., 2., 1.], &[2, 2])).unwrap();
    assert_close(&l, &[f64::NAN, 0.0, f64::NAN, f64::NAN], 0.0, "cholesky of an indefinite matrix");
    // one bad matrix of a stack leaves the others
    let stack = Tensor::stack(&[t(&[1., 2., 2., 1.], &[2, 2]), t(&[4., 2., 2., 3.], &[2, 2])], 0);
    let l = linalg::cholesky(&stack).unwrap();
    assert!(l.select(0, 1).to_vec_f64().iter().all(|v| v.is_finite()));
    // jnp.linalg.det / slogdet of [[1, 2], [2, 4]]: 0, (0, -inf); lu as LAPACK
    let s = t(&[1., 2., 2., 4.], &[2, 2]);
    assert_close(&linalg::det(&s).unwrap(), &[0.0], 0.0, "det singular");
    let (sign, logdet) = linalg::slogdet(&s).unwrap();
    assert_eq!((sign.item_f64(), logdet.item_f64()), (0.0, f64::NEG_INFINITY));
    assert_close(&linalg::lu(&s).unwrap().0, &[2., 4., 0.5, 0.], 0.0, "lu singular");
    // solve with a singular matrix: non-finite, never a panic
    let x = linalg::solve(&s, &t(&[1., 1.], &[2])).unwrap();
    assert!(x.to_vec_f64().iter().any(|v| !v.is_finite()), "{x}");
    // shapes and dtypes: errors naming the function and the shapes
    let e = linalg::cholesky(&Tensor::zeros([2, 3], DType::F64)).unwrap_err().to_string();
    assert!(e.contains("cholesky") && e.contains("square") && e.contains("[2, 3]"), "{e}");
    let e = linalg::solve(&b_general(), &Tensor::zeros([4], DType::F64)).unwrap_err().to_string();
    assert!(e.contains("solve") && e.contains("[4"), "{e}");
    let e = linalg::det(&Tensor::zeros([2, 2], DType::I32)).unwrap_err().to_string();
    assert!(e.contains("det") && e.contains("f32 or f64"), "{e}");
    let e = linalg::solve(&Tensor::zeros([2, 3, 3], DType::F64), &Tensor::zeros([4, 3, 1], DType::F64)).unwrap_err();
    assert!(e.to_string().contains("broadcast"), "{e}");
    let spec = TriangularSpec { left_side: true, lower: true, transpose_a: false, unit_diagonal: false };
    let e = linalg::triangular_solve(&a_spd(), &Tensor::zeros([2, 2], DType::F64), spec).unwrap_err().to_string();
    assert!(e.contains("triangular_solve") && e.contains("[3, 3]") && e.contains("[2, 2]"), "{e}");
    // f32 works, and matches f64 to f32 precision
    let d32 = linalg::det(&b_general().cast(DType::F32)).unwrap();
    assert!((d32.item_f64() + 7.0).abs() < 1e-5);
}

#[test]
fn linalg_under_jit_equals_eager() {
    let f = |a: &Tensor| {
        let (s, l) = linalg::slogdet(a).unwrap();
        &(&s * &l) + &linalg::inv(a).unwrap().sum()
    };
    let eager = f(&b_general());
    let jitted = jit(f)(&b_general());
    assert_eq!(eager.to_vec_f64(), jitted.to_vec_f64());
}

/// The batch rule's claim: `vmap` over right-hand sides with one shared
/// matrix is one solve (the examples folded into the solve's columns).
#[test]
fn linalg_vmap_over_right_hand_sides_is_one_solve() {
    let a = b_general();
    let spec = TriangularSpec { left_side: true, lower: true, transpose_a: false, unit_diagonal: false };
    let bs = Key::new(3).normal([5, 3, 2], DType::F64);
    let p = trace(|bs: &Tensor| vmap(|b: &Tensor| linalg::triangular_solve(&a, b, spec).unwrap())(bs), &bs);
    let solves: Vec<String> =
        p.eqns.iter().map(|e| e.prim.name().to_string()).filter(|n| n == "triangular_solve").collect();
    assert_eq!(solves.len(), 1, "{p}");
    // the values: each example's own solve
    let got = vmap(|b: &Tensor| linalg::triangular_solve(&a, b, spec).unwrap())(&bs);
    for i in 0..5 {
        let one = linalg::triangular_solve(&a, &bs.select(0, i), spec).unwrap();
        assert!((&got.select(0, i) - &one).abs().max().item_f64() <= 1e-14);
    }
}
