//! `xform::linalg`'s orthogonal factorizations (`qr`, `eigh`, `svd`) and
//! what is built on them (`eigvalsh`, `svdvals`, `pinv`, `lstsq`, the
//! norms, `matrix_power`) against JAX's numbers (float64, each with the
//! JAX call that produced it; JAX 0.10.2 on the CPU), finite-difference
//! checks of first and second derivatives (at a repeated eigenvalue too,
//! for functions symmetric in it), `vmap` against a loop, `jit` against
//! eager, and bad input.
//!
//! Where JAX's factors carry other signs (LAPACK leaves them free; xform
//! makes `R`'s diagonal non-negative and each eigenvector's and left
//! singular vector's largest entry positive), the JAX numbers are
//! transcribed as JAX gives them and brought to xform's convention by
//! [`xform_signs`].

use crate::linalg::{assert_close, t};
use xform::linalg::{self, MatrixNorm, QrMode};
use xform::prelude::*;
use xform::testing::{check_grads, check_vmap, Modes};

/// A = [[4, 1, 2], [1, 3, 0.5], [2, 0.5, 5]] (symmetric positive definite).
fn a_sym() -> Tensor {
    t(&[4., 1., 2., 1., 3., 0.5, 2., 0.5, 5.], &[3, 3])
}

/// B = [[1, 2], [3, 4], [5, 6.5]] (tall); W = Bᵀ (wide).
fn b_tall() -> Tensor {
    t(&[1., 2., 3., 4., 5., 6.5], &[3, 2])
}

fn w_wide() -> Tensor {
    b_tall().transpose(0, 1).copy()
}

/// JAX's column-vectors (row-major `rows x cols`) with each column's
/// largest entry made positive, and the signs used (xform's convention).
fn xform_signs(v: &[f64], rows: usize, cols: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = v.to_vec();
    let mut signs = Vec::new();
    for j in 0..cols {
        let p = (0..rows).fold(0, |b, i| if v[i * cols + j].abs() > v[b * cols + j].abs() { i } else { b });
        let s = v[p * cols + j].signum();
        (0..rows).for_each(|i| out[i * cols + j] *= s);
        signs.push(s);
    }
    (out, signs)
}

#[test]
fn spectral_values_equal_jax() {
    let tol = 1e-13;
    // w, v = jnp.linalg.eigh(A)
    let (w, v) = linalg::eigh(&a_sym()).unwrap();
    assert_close(&w, &[2.0965216172967187, 3.0722239520050754, 6.831254430698205], tol, "eigh w");
    let jax_v = [
        -0.7167430662893416,
        -0.3257672733027812,
        -0.616567158200162,
        0.5748726248246245,
        -0.7765018813719533,
        -0.25800444463819483,
        0.3947161539048013,
        0.5393704773814453,
        -0.7438270269195071,
    ];
    assert_close(&v, &xform_signs(&jax_v, 3, 3).0, tol, "eigh v");
    assert_close(&linalg::eigvalsh(&a_sym()).unwrap(), &w.to_vec_f64(), 0.0, "eigvalsh");
    // u, s, vh = jnp.linalg.svd(B, full_matrices=False)
    let (u, s, vh) = linalg::svd(&b_tall(), false).unwrap();
    assert_close(&s, &[9.852920234522093, 0.41226551170948406], tol, "svd s");
    let jax_u = [
        -0.22330914878964228,
        0.9669444187311547,
        -0.5074636678955181,
        -0.0075088841904064505,
        -0.832234131619746,
        -0.25487665201599924,
    ];
    let (want_u, signs) = xform_signs(&jax_u, 3, 2);
    assert_close(&u, &want_u, tol, "svd u");
    let jax_vh = [-0.599504580365806, -0.800371325148783, -0.800371325148783, 0.599504580365806];
    let want_vh: Vec<f64> = (0..4).map(|i| jax_vh[i] * signs[i / 2]).collect();
    assert_close(&vh, &want_vh, tol, "svd vh");
    assert_close(&linalg::svdvals(&b_tall()).unwrap(), &s.to_vec_f64(), tol, "svdvals");
    // q, r = jnp.linalg.qr(B)
    let (q, r) = linalg::qr(&b_tall(), QrMode::Reduced).unwrap();
    let jax_q = [
        -0.16903085094570325,
        0.977894194827363,
        -0.50709255283711,
        0.02080625946441167,
        -0.8451542547285166,
        -0.20806259464411958,
    ];
    let jax_r = [-5.916079783099616, -7.859934568975204, 0.0, 0.6866065623255952];
    // (R's diagonal made non-negative: row 0 and Q's column 0 negated)
    let flip = [-1.0, 1.0];
    assert_close(&q, &(0..6).map(|i| jax_q[i] * flip[i % 2]).collect::<Vec<_>>(), tol, "qr q");
    assert_close(&r, &(0..4).map(|i| jax_r[i] * flip[i / 2]).collect::<Vec<_>>(), tol, "qr r");
    // jnp.linalg.pinv(B), jnp.linalg.pinv(B.T)
    let pinv_b = [
        -1.8636363636363635,
        0.04545454545454606,
        0.5454545454545451,
        1.4242424242424243,
        0.030303030303029863,
        -0.30303030303030276,
    ];
    assert_close(&linalg::pinv(&b_tall(), None).unwrap(), &pinv_b, 1e-12, "pinv B");
    let pinv_w = linalg::pinv(&w_wide(), None).unwrap();
    assert_close(
        &pinv_w,
        &[
            -1.8636363636363642,
            1.4242424242424245,
            0.04545454545454619,
            0.03030303030302979,
            0.5454545454545453,
            -0.30303030303030287,
        ],
        1e-12,
        "pinv W",
    );
    // jnp.linalg.pinv([[1, 2], [2, 4]]) (rank 1)
    let singular = t(&[1., 2., 2., 4.], &[2, 2]);
    assert_close(&linalg::pinv(&singular, None).unwrap(), &[0.04, 0.08, 0.08, 0.16], 1e-14, "pinv singular");
    // x, res, rank, s = jnp.linalg.lstsq(B, [1, -1, 2])
    let l = linalg::lstsq(&b_tall(), &t(&[1., -1., 2.], &[3]), None).unwrap();
    assert_close(&l.solution, &[-0.8181818181818193, 0.7878787878787888], 1e-12, "lstsq x");
    assert_close(&l.residuals, &[3.8787878787878785], 1e-12, "lstsq residuals");
    assert_eq!(l.rank.to_vec_f64(), vec![2.0]);
    assert_close(&l.singular_values, &s.to_vec_f64(), tol, "lstsq s");
    // jnp.linalg.norm(B, ord) for ord in ['fro', 'nuc', 2, -2, 1, -1, inf, -inf]
    let norms = [
        (MatrixNorm::Frobenius, 9.86154146165801),
        (MatrixNorm::Nuclear, 10.265185746231575),
        (MatrixNorm::Two, 9.852920234522092),
        (MatrixNorm::NegTwo, 0.41226551170948406),
        (MatrixNorm::One, 12.5),
        (MatrixNorm::NegOne, 9.0),
        (MatrixNorm::Inf, 11.5),
        (MatrixNorm::NegInf, 3.0),
    ];
    for (ord, want) in norms {
        assert_close(&linalg::matrix_norm(&b_tall(), ord).unwrap(), &[want], tol, &format!("norm {ord:?}"));
    }
    assert_close(&linalg::norm(&b_tall()).unwrap(), &[9.86154146165801], tol, "norm");
    let v = t(&[3., -4., 0.], &[3]);
    assert_close(&linalg::vector_norm(&v, f64::INFINITY, None).unwrap(), &[4.0], 0.0, "vector_norm inf");
    assert_close(&linalg::vector_norm(&v, 1.0, None).unwrap(), &[7.0], 0.0, "vector_norm 1");
    assert_close(&linalg::vector_norm(&v, 0.0, None).unwrap(), &[2.0], 0.0, "vector_norm 0");
    assert_close(&linalg::vector_norm(&v, 3.0, None).unwrap(), &[91f64.cbrt()], 1e-15, "vector_norm 3");
    // jnp.linalg.matrix_power(A, 3), jnp.linalg.matrix_power(A, -2)
    let p3 = [129.0, 54.25, 138.5, 54.25, 41.75, 51.125, 138.5, 51.125, 186.25];
    assert_close(&linalg::matrix_power(&a_sym(), 3).unwrap(), &p3, tol, "matrix_power 3");
    let m2 = [
        0.13626678719008262,
        -0.06353305785123967,
        -0.07315340909090909,
        -0.06353305785123967,
        0.14049586776859505,
        0.011363636363636364,
        -0.07315340909090909,
        0.011363636363636364,
        0.078125,
    ];
    assert_close(&linalg::matrix_power(&a_sym(), -2).unwrap(), &m2, 1e-12, "matrix_power -2");
    assert_close(&linalg::matrix_power(&a_sym(), 0).unwrap(), &Tensor::eye(3, DType::F64).to_vec_f64(), 0.0, "power 0");
}

#[test]
fn spectral_derivatives_equal_jax() {
    let tol = 1e-11;
    // jax.grad(lambda a: jnp.sum(jnp.linalg.eigvalsh(a)**3))(A)
    let g = grad(|a: &Tensor| linalg::eigvalsh(a).unwrap().powf(3.0).sum())(&a_sym());
    let want = [63.0, 24.0, 55.5, 24.0, 30.75, 18.0, 55.5, 18.0, 87.75];
    assert_close(&g, &want, tol, "grad eigvalsh");
    // jax.grad(lambda a: eigh(a)[1][0, 2] * sign(eigh(a)[1][2, 2]))(A): sign-free
    let g = grad(|a: &Tensor| {
        let v = linalg::eigh(a).unwrap().1;
        &v.select(0, 0).select(0, 2) * &v.select(0, 2).select(0, 2).sign()
    })(&a_sym());
    let want = [
        0.08430463212893197,
        0.011556188666396357,
        0.018021829081393326,
        0.011556188666396357,
        -0.005090548251399341,
        -0.021076158032232947,
        0.018021829081393326,
        -0.021076158032232947,
        -0.0792140838775326,
    ];
    assert_close(&g, &want, tol, "grad eigenvector");
    // jax.grad(lambda a: jnp.sum(jnp.linalg.svd(a, compute_uv=False)))(B)
    let want_nuc = [
        -0.6400397282280941,
        0.7584178473230918,
        0.3102366888624597,
        0.40165775787281266,
        0.7029241375663273,
        0.5132966144466496,
    ];
    assert_close(&grad(|a: &Tensor| linalg::svdvals(a).unwrap().sum())(&b_tall()), &want_nuc, tol, "grad svdvals");
    // jax.grad(lambda a: jnp.linalg.norm(a, ord='nuc'))(B)
    let g = grad(|a: &Tensor| linalg::matrix_norm(a, MatrixNorm::Nuclear).unwrap())(&b_tall());
    assert_close(&g, &want_nuc, tol, "grad nuclear norm");
    // jax.grad(lambda a: s[0] * s[1]**2 with s = svd(a, compute_uv=False))(B.T)
    let g = grad(|a: &Tensor| {
        let s = linalg::svdvals(a).unwrap();
        &s.select(0, 0) * &s.select(0, 1).powf(2.0)
    })(&w_wide());
    let want = [
        -6.264558064045891,
        0.10053187606347354,
        1.7420702991225463,
        4.739781891231845,
        0.03246074836311489,
        -1.128139163172506,
    ];
    assert_close(&g, &want, tol, "grad s0 s1^2 (wide)");
    // jax.grad(lambda a: jnp.linalg.norm(a, ord=2))(B)
    let g = grad(|a: &Tensor| linalg::matrix_norm(a, MatrixNorm::Two).unwrap())(&b_tall());
    let want = [
        0.13387485753697984,
        0.17873023933461274,
        0.30422679327259533,
        0.4061593683383977,
        0.4989281738427968,
        0.6660963347585428,
    ];
    assert_close(&g, &want, tol, "grad 2-norm");
    // jax.grad(lambda a: jnp.sum(jnp.linalg.qr(a)[1]**2 * [[1, 2], [0, 3]]))(B)
    let c = t(&[1., 2., 0., 3.], &[2, 2]);
    let g = grad(|a: &Tensor| (linalg::qr(a, QrMode::Reduced).unwrap().1.powf(2.0) * &c).sum())(&b_tall());
    let want = [
        0.21591836734693545,
        9.342857142857142,
        5.9620408163265335,
        16.028571428571425,
        10.3795918367347,
        25.714285714285715,
    ];
    assert_close(&g, &want, 1e-10, "grad qr");
    // jax.grad(lambda a: jnp.sum(jnp.linalg.pinv(a) * [[1, -2, 0.5], [0.3, 1, 2]]))(B)
    let c = t(&[1., -2., 0.5, 0.3, 1., 2.], &[2, 3]);
    let g = grad(|a: &Tensor| (linalg::pinv(a, None).unwrap() * &c).sum())(&b_tall());
    let want = [
        -3.040220385674937,
        1.7863177226813618,
        -6.354820936639116,
        4.738200183654729,
        4.7573002754820894,
        -3.4426078971533487,
    ];
    assert_close(&g, &want, 1e-10, "grad pinv");
    // jax.grad(lambda a: jnp.sum(jnp.linalg.pinv(a) * [[1, -2], [0.5, 0.3], [1, 2]]))(B.T)
    let c = t(&[1., -2., 0.5, 0.3, 1., 2.], &[3, 2]);
    let g = grad(|a: &Tensor| (linalg::pinv(a, None).unwrap() * &c).sum())(&w_wide());
    let want = [
        -9.376721763085417,
        0.4779614325068937,
        1.8476584022038576,
        7.086225895316802,
        -0.37630853994490815,
        -1.418732782369143,
    ];
    assert_close(&g, &want, 1e-10, "grad pinv (wide)");
    // the same at the rank-1 [[1, 2], [2, 4]]: finite, as JAX's custom rule
    let c = t(&[1., -2., 0.5, 3.], &[2, 2]);
    let g = grad(|a: &Tensor| (linalg::pinv(a, None).unwrap() * &c).sum())(&t(&[1., 2., 2., 4.], &[2, 2]));
    assert_close(&g, &[-0.056, -0.012, -0.112, -0.024], 1e-12, "grad pinv rank 1");
    // jax.grad(lambda a: jnp.sum(jnp.linalg.eigvalsh(a)**2))(jnp.eye(3)): a
    // repeated eigenvalue, a function symmetric in it
    let g = grad(|a: &Tensor| linalg::eigvalsh(a).unwrap().powf(2.0).sum())(&Tensor::eye(3, DType::F64));
    assert_close(&g, &[2., 0., 0., 0., 2., 0., 0., 0., 2.], 1e-14, "grad at a repeated eigenvalue");
    // jax.jvp(lambda a: jnp.linalg.eigh(a)[1], (I2,), ([[0, 1], [1, 0]],))[1]:
    // the eigenvectors' tangent at a repeated eigenvalue
    let (_, dv) =
        jvp(|a: &Tensor| linalg::eigh(a).unwrap().1, &Tensor::eye(2, DType::F64), &t(&[0., 1., 1., 0.], &[2, 2]));
    assert_close(&dv, &[f64::NAN, f64::INFINITY, f64::INFINITY, f64::NAN], 0.0, "eigenvectors' tangent, repeated");
}

type Case = (&'static str, Box<dyn Fn(&Tensor) -> Tensor>);

fn cases() -> Vec<Case> {
    vec![
        ("qr q", Box::new(|a: &Tensor| linalg::qr(a, QrMode::Reduced).unwrap().0)),
        ("qr r", Box::new(|a: &Tensor| linalg::qr(a, QrMode::Reduced).unwrap().1)),
        ("svd u", Box::new(|a: &Tensor| linalg::svd(a, false).unwrap().0)),
        ("svd vh", Box::new(|a: &Tensor| linalg::svd(a, false).unwrap().2)),
        ("svdvals", Box::new(|a: &Tensor| linalg::svdvals(a).unwrap())),
        ("pinv", Box::new(|a: &Tensor| linalg::pinv(a, None).unwrap())),
        ("nuclear", Box::new(|a: &Tensor| linalg::matrix_norm(a, MatrixNorm::Nuclear).unwrap())),
        ("2-norm", Box::new(|a: &Tensor| linalg::matrix_norm(a, MatrixNorm::Two).unwrap())),
        ("inf-norm", Box::new(|a: &Tensor| linalg::matrix_norm(a, MatrixNorm::Inf).unwrap())),
        ("fro", Box::new(|a: &Tensor| linalg::matrix_norm(a, MatrixNorm::Frobenius).unwrap())),
    ]
}

fn square_cases() -> Vec<Case> {
    vec![
        ("eigh w", Box::new(|a: &Tensor| linalg::eigh(a).unwrap().0)),
        ("eigh v", Box::new(|a: &Tensor| linalg::eigh(a).unwrap().1)),
        ("qr complete", Box::new(|a: &Tensor| linalg::qr(a, QrMode::Complete).unwrap().0)),
        ("svd complete", Box::new(|a: &Tensor| linalg::svd(a, true).unwrap().0)),
        ("matrix_power 3", Box::new(|a: &Tensor| linalg::matrix_power(a, 3).unwrap())),
        ("matrix_power -2", Box::new(|a: &Tensor| linalg::matrix_power(a, -2).unwrap())),
    ]
}

#[test]
fn spectral_derivatives_match_finite_differences() {
    let general = t(&[2., -1., 0.3, 3., 1., 4., -1., 2., 1.], &[3, 3]);
    for (name, f) in cases() {
        for a in [b_tall(), w_wide(), general.clone()] {
            check_grads(&f, &a, 2, Modes::Both).unwrap_or_else(|e| panic!("{name} at {}: {e}", a.shape()));
        }
    }
    for (name, f) in square_cases() {
        check_grads(&f, &a_sym(), 2, Modes::Both).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // lstsq in a and in b
    let bv = t(&[1., -1., 2.], &[3]);
    let f = |x: &(Tensor, Tensor)| linalg::lstsq(&x.0, &x.1, None).unwrap().solution;
    check_grads(f, &(b_tall(), bv.clone()), 2, Modes::Both).unwrap_or_else(|e| panic!("lstsq: {e}"));
    // at a repeated eigenvalue, a function symmetric in it (‖a‖²): its
    // first derivative (the second is NaN there, as JAX's
    // jax.hessian(lambda a: jnp.sum(jnp.linalg.eigvalsh(a)**2))(jnp.eye(2)))
    let eye = Tensor::eye(3, DType::F64);
    check_grads(|a: &Tensor| linalg::eigvalsh(a).unwrap().powf(2.0).sum(), &eye, 1, Modes::Both)
        .unwrap_or_else(|e| panic!("eigvalsh at I: {e}"));
    let h = hessian(|a: &Tensor| linalg::eigvalsh(a).unwrap().powf(2.0).sum())(&Tensor::eye(2, DType::F64));
    assert!(h.to_vec_f64().iter().all(|v| v.is_nan()), "{h}");
    // and a pseudo-inverse at a rank-deficient matrix, along tangents that
    // keep the rank (JAX's rule is the derivative there)
    let rank1 = t(&[1., 2., 2., 4.], &[2, 2]);
    let (p, dp) = jvp(|a: &Tensor| linalg::pinv(a, None).unwrap(), &rank1, &rank1);
    let h = 1e-6;
    let fd = (&linalg::pinv(&(&rank1 * (1.0 + h)), None).unwrap()
        - &linalg::pinv(&(&rank1 * (1.0 - h)), None).unwrap())
        / (2.0 * h);
    assert_close(&dp, &fd.to_vec_f64(), 1e-7, "pinv's tangent at rank 1");
    assert_close(&dp, &(-&p).to_vec_f64(), 1e-12, "d pinv(c a) / dc = -pinv(a)");
}

#[test]
fn spectral_vmap_equals_a_loop() {
    let k = Key::new(5);
    let tall = k.normal([4, 3, 2], DType::F64);
    let m = k.fold_in(1).normal([4, 3, 3], DType::F64);
    let sym = &m + &m.transpose(1, 2);
    for (name, f) in cases() {
        check_vmap(&f, &tall, xform::Axes::All(Some(0))).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_vmap(&f, &tall.transpose(0, 2).copy(), xform::Axes::All(Some(2)))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, f) in square_cases() {
        check_vmap(&f, &sym, xform::Axes::All(Some(0))).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // per-example gradients through eigh
    let g = |a: &Tensor| grad(|a: &Tensor| linalg::eigvalsh(a).unwrap().exp().sum())(a);
    check_vmap(g, &sym, xform::Axes::All(Some(0))).unwrap_or_else(|e| panic!("grad eigvalsh: {e}"));
    // lstsq over a stack of right-hand sides with one matrix
    let bs = k.fold_in(2).normal([5, 3], DType::F64);
    let per = vmap(|b: &Tensor| linalg::lstsq(&b_tall(), b, None).unwrap().solution)(&bs);
    for i in 0..5 {
        let one = linalg::lstsq(&b_tall(), &bs.select(0, i), None).unwrap().solution;
        assert!((&per.select(0, i) - &one).abs().max().item_f64() <= 1e-13, "lstsq {i}");
    }
}

#[test]
fn spectral_under_jit_equals_eager() {
    let f = |a: &Tensor| {
        let (w, v) = linalg::eigh(&(a + &a.transpose(0, 1))).unwrap();
        let (u, s, _) = linalg::svd(a, false).unwrap();
        let (q, _) = linalg::qr(a, QrMode::Reduced).unwrap();
        &(&(w.sum() + v.abs().sum()) + &(&(s.sum() + u.abs().sum()) + &q.sum())) + &linalg::pinv(a, None).unwrap().sum()
    };
    let a = t(&[2., -1., 0.3, 3., 1., 4., -1., 2., 1.], &[3, 3]);
    assert_eq!(f(&a).to_vec_f64(), jit(f)(&a).to_vec_f64());
    let g = grad(f);
    assert_eq!(g(&a).to_vec_f64(), jit(grad(f))(&a).to_vec_f64());
}

#[test]
fn spectral_bad_input() {
    // NaN or inf entries: NaN in every result of that matrix only
    let stack = Tensor::stack(&[t(&[1., f64::NAN, 0., 1.], &[2, 2]), t(&[2., 1., 1., 3.], &[2, 2])], 0);
    let (w, v) = linalg::eigh(&stack).unwrap();
    assert!(w.select(0, 0).to_vec_f64().iter().chain(&v.select(0, 0).to_vec_f64()).all(|x| x.is_nan()));
    assert!(w.select(0, 1).to_vec_f64().iter().all(|x| x.is_finite()));
    let (u, s, vh) = linalg::svd(&t(&[1., f64::INFINITY, 0., 1.], &[2, 2]), false).unwrap();
    assert!([u, s, vh].iter().all(|x| x.to_vec_f64().iter().all(|v| v.is_nan())));
    let (q, r) = linalg::qr(&t(&[1., f64::NAN, 0., 1.], &[2, 2]), QrMode::Reduced).unwrap();
    assert!(q.to_vec_f64().iter().chain(&r.to_vec_f64()).any(|v| v.is_nan()));
    // shapes and dtypes: errors naming the function and the shapes
    let e = linalg::eigh(&Tensor::zeros([2, 3], DType::F64)).unwrap_err().to_string();
    assert!(e.contains("eigh") && e.contains("square") && e.contains("[2, 3]"), "{e}");
    let e = linalg::svd(&Tensor::zeros([3], DType::F64), false).unwrap_err().to_string();
    assert!(e.contains("svd") && e.contains("[3]"), "{e}");
    let e = linalg::qr(&Tensor::zeros([2, 2], DType::I32), QrMode::Reduced).unwrap_err().to_string();
    assert!(e.contains("qr") && e.contains("f32 or f64"), "{e}");
    let e = linalg::lstsq(&b_tall(), &Tensor::zeros([2], DType::F64), None).unwrap_err().to_string();
    assert!(e.contains("lstsq") && e.contains("[3, 2]") && e.contains("[2]"), "{e}");
    let e = linalg::vector_norm(&b_tall(), 2.0, Some(2)).unwrap_err().to_string();
    assert!(e.contains("vector_norm") && e.contains("axis 2"), "{e}");
    // complete singular vectors of a non-square matrix have no derivative
    // (their completion is arbitrary; JAX refuses too): an error naming svd
    let e = xform::try_grad(|a: &Tensor| linalg::svd(a, true).or_raise().0.sum())(&b_tall());
    let e = e.unwrap_err().to_string();
    assert!(e.contains("svd") && e.contains("complete") && e.contains("full_matrices"), "{e}");
    // nor, here, a complete Q of a tall matrix (JAX differentiates
    // LAPACK's Householder completion; xform's completion is another)
    let e = xform::try_grad(|a: &Tensor| linalg::qr(a, QrMode::Complete).or_raise().0.sum())(&b_tall());
    let e = e.unwrap_err().to_string();
    assert!(e.contains("qr") && e.contains("complete") && e.contains("full_matrices"), "{e}");
    // ... whose value is still there (orthonormal, reconstructing)
    let (q, r) = linalg::qr(&b_tall(), QrMode::Complete).unwrap();
    assert_eq!((q.shape().to_vec(), r.shape().to_vec()), (vec![3, 3], vec![3, 2]));
    assert_close(&q.matmul(&r), &b_tall().to_vec_f64(), 1e-14, "complete qr reconstructs");
    assert_close(
        &q.transpose(0, 1).matmul(&q),
        &Tensor::eye(3, DType::F64).to_vec_f64(),
        1e-14,
        "complete q orthonormal",
    );
    // empty matrices and empty stacks: the shapes numpy gives, never a panic
    for (m, n) in [(0, 3), (3, 0), (0, 0)] {
        let z = Tensor::zeros([2, m, n], DType::F64);
        let (q, r) = linalg::qr(&z, QrMode::Reduced).unwrap();
        assert_eq!((q.shape().to_vec(), r.shape().to_vec()), (vec![2, m, m.min(n)], vec![2, m.min(n), n]));
        let (u, s, vh) = linalg::svd(&z, false).unwrap();
        assert_eq!(
            (u.shape().to_vec(), s.shape().to_vec(), vh.shape().to_vec()),
            (vec![2, m, m.min(n)], vec![2, m.min(n)], vec![2, m.min(n), n])
        );
        assert_eq!(linalg::matrix_norm(&z, MatrixNorm::One).unwrap().to_vec_f64(), vec![0.0, 0.0]);
        assert_eq!(linalg::matrix_norm(&z, MatrixNorm::Inf).unwrap().to_vec_f64(), vec![0.0, 0.0]);
        assert_eq!(linalg::matrix_norm(&z, MatrixNorm::Two).unwrap().to_vec_f64(), vec![0.0, 0.0]);
        let e = linalg::matrix_norm(&z, MatrixNorm::NegInf).unwrap_err().to_string();
        assert!(e.contains("matrix_norm") && e.contains("empty"), "{e}");
        assert_eq!(linalg::pinv(&z, None).unwrap().shape().to_vec(), vec![2, n, m]);
    }
    let (w, v) = linalg::eigh(&Tensor::zeros([0, 3, 3], DType::F64)).unwrap();
    assert_eq!((w.shape().to_vec(), v.shape().to_vec()), (vec![0, 3], vec![0, 3, 3]));
    let g = grad(|a: &Tensor| linalg::svdvals(a).unwrap().sum())(&Tensor::zeros([0, 2, 3], DType::F64));
    assert_eq!(g.shape().to_vec(), vec![0, 2, 3]);
    // pinv's rtol must be a non-negative number
    for bad in [-1.0, f64::NAN] {
        let e = linalg::pinv(&b_tall(), Some(bad)).unwrap_err().to_string();
        assert!(e.contains("pinv") && e.contains("rtol"), "{e}");
    }
    // f32 agrees with f64 to f32 precision
    let s32 = linalg::svdvals(&b_tall().cast(DType::F32)).unwrap().to_vec_f64();
    assert!((s32[0] - 9.852920234522093).abs() < 1e-5 && (s32[1] - 0.41226551170948406).abs() < 1e-5, "{s32:?}");
}
