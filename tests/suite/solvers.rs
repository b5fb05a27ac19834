//! `xform::solvers`: conjugate gradients against a dense solve, implicit
//! derivatives (grad, jvp, jacfwd, jacrev, vmap, jit) against the dense
//! solve's and central finite differences, `custom_linear_solve` with a
//! direct solve, `custom_root` (Newton and bisection, scalar and vector),
//! a Hessian-vector-product operator closing over parameters, bad inputs,
//! and reverse mode through 1,000 CG iterations keeping none of them. All
//! in f64; each tolerance is stated where it is used.

use xform::core::interp::stack_depth;
use xform::core::prim::{ControlOp, Prim};
use xform::linalg;
use xform::prelude::*;
use xform::solvers::{
    cg, custom_linear_solve, custom_root, try_cg, try_custom_linear_solve, try_custom_root, CgOptions, TransposeSolve,
};
use xform::testing::{check_grads_with, GradCheckOptions, Modes};
use xform::{tree, ErrorKind};

fn normal(seed: u64, shape: &[usize]) -> Tensor {
    Key::new(seed).normal(shape.to_vec(), DType::F64)
}

/// A symmetric positive definite matrix from any square `s`: `(s + sᵀ)/2 +
/// n I`, whose eigenvalues lie in about `[n - 2 sqrt(n), n + 2 sqrt(n)]`
/// for a standard normal `s`.
fn spd_of(s: &Tensor) -> Tensor {
    let n = s.dim(0);
    (s + &s.t()) * 0.5 + Tensor::eye(n, DType::F64) * n as f64
}

/// CG converged to a relative residual of 1e-13: its solutions and
/// derivatives agree with a dense solve's to about 1e-12 on these
/// well-conditioned systems.
fn tight<X>() -> CgOptions<X> {
    CgOptions { tol: 1e-13, ..Default::default() }
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    (a - b).abs().max().item_f64()
}

#[track_caller]
fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let scale = want.abs().max().item_f64().max(1.0);
    let d = max_abs_diff(got, want);
    assert!(d <= tol * scale, "{what}: max |difference| {d:e} > {tol:e} (scale {scale})\ngot {got}\nwant {want}");
}

/// The matrix of a linear operator on vectors of length `n`, column by
/// column (a direct solve's view of a matrix-free operator).
fn dense(mv: &dyn Fn(&Tensor) -> Tensor, n: usize) -> Tensor {
    vmap(|e: &Tensor| mv(e))(&Tensor::eye(n, DType::F64)).t()
}

#[track_caller]
fn fd_check<X: Tree>(what: &str, f: impl Fn(&X) -> Tensor, x: &X, modes: Modes, tol: f64) {
    let opts = GradCheckOptions { tol: Some(tol), ..Default::default() };
    if let Err(e) = check_grads_with(f, x, 1, modes, &opts) {
        panic!("{what}: {e}");
    }
}

/// CG's solutions equal a dense solve's within 1e-12 (relative to the
/// largest entry): a vector, a matrix-shaped right-hand side (the operator
/// acting on `[2, 4]` tensors), a tuple of tensors (block diagonal), and
/// from an initial guess.
#[test]
fn cg_matches_a_dense_solve() {
    let a = spd_of(&normal(1, &[8, 8]));
    let b = normal(2, &[8]);
    let want = linalg::solve(&a, &b).unwrap();
    let x = cg(|x: &Tensor| a.matmul(x), &b, &tight());
    assert_close("vector", &x, &want, 1e-12);

    // any shape: the same operator on [2, 4] tensors
    let b24 = b.reshape(&[2, 4]);
    let x24 = cg(|x: &Tensor| a.matmul(&x.reshape(&[8])).reshape(&[2, 4]), &b24, &tight());
    assert_close("[2, 4]", &x24.reshape(&[8]), &want, 1e-12);

    // a tree: two blocks, each its own SPD matrix
    let a2 = spd_of(&normal(3, &[3, 3]));
    let b2 = normal(4, &[3]);
    let mv = |(u, v): &(Tensor, Tensor)| (a.matmul(u), a2.matmul(v));
    let (u, v) = cg(mv, &(b.clone(), b2.clone()), &tight());
    assert_close("tree block 0", &u, &want, 1e-12);
    assert_close("tree block 1", &v, &linalg::solve(&a2, &b2).unwrap(), 1e-12);

    // from an initial guess; and maxiter = 0 returns the guess
    let x0 = normal(5, &[8]);
    let opts = CgOptions { x0: Some(x0.clone()), ..tight() };
    assert_close("x0", &cg(|x: &Tensor| a.matmul(x), &b, &opts), &want, 1e-12);
    let opts = CgOptions { x0: Some(x0.clone()), maxiter: Some(0), ..tight() };
    assert_eq!(cg(|x: &Tensor| a.matmul(x), &b, &opts).to_vec_f64(), x0.to_vec_f64());

    // the default tolerance (1e-5 relative residual) is looser
    let loose = cg(|x: &Tensor| a.matmul(x), &b, &CgOptions::default());
    let res = (&a.matmul(&loose) - &b).powi(2).sum().sqrt().item_f64();
    assert!(res <= 1e-5 * b.powi(2).sum().sqrt().item_f64(), "residual {res}");
}

/// The loss `w · x(S, b)` with `x` CG's solution of `A(S) x = b`: its
/// gradient with respect to the matrix's parameters `S` and to `b` equals
/// the dense solve's (through `linalg::solve`, 1e-10) and the analytic
/// `∂/∂b = A⁻ᵀ w`, `∂/∂A = -λ xᵀ` (1e-10); both modes agree with central
/// finite differences (step 1e-5, tolerance 1e-6).
#[test]
fn cg_gradients_match_dense_and_finite_differences() {
    let s = normal(10, &[5, 5]);
    let b = normal(11, &[5]);
    let w = normal(12, &[5]);
    let loss_cg = |(s, b): &(Tensor, Tensor)| {
        let a = spd_of(s);
        (cg(|x: &Tensor| a.matmul(x), b, &tight()) * &w).sum()
    };
    let loss_dense = |(s, b): &(Tensor, Tensor)| (linalg::solve(&spd_of(s), b).unwrap() * &w).sum();
    let p = (s.clone(), b.clone());
    let (gs, gb) = grad(loss_cg)(&p);
    let (ds, db) = grad(loss_dense)(&p);
    assert_close("d/dS vs dense", &gs, &ds, 1e-10);
    assert_close("d/db vs dense", &gb, &db, 1e-10);

    // analytic: λ = A⁻ᵀ w, ∂/∂A = -λ xᵀ, and S enters A as (S + Sᵀ)/2
    let a = spd_of(&s);
    let x = linalg::solve(&a, &b).unwrap();
    let lam = linalg::solve(&a.t(), &w).unwrap();
    assert_close("d/db analytic", &gb, &lam, 1e-10);
    let da = -(lam.unsqueeze(1) * x.unsqueeze(0));
    assert_close("d/dS analytic", &gs, &((&da + &da.t()) * 0.5), 1e-10);

    fd_check("cg loss", loss_cg, &p, Modes::Both, 1e-6);
}

/// Forward mode: the JVP of CG's solution equals the dense solve's JVP
/// (1e-10) and central finite differences (1e-6); jacfwd and jacrev of the
/// solution with respect to `b` are `A⁻¹` (1e-10).
#[test]
fn cg_jvp_and_jacobians() {
    let s = normal(20, &[6, 6]);
    let b = normal(21, &[6]);
    let (ds, db) = (normal(22, &[6, 6]), normal(23, &[6]));
    let sol_cg = |(s, b): &(Tensor, Tensor)| {
        let a = spd_of(s);
        cg(|x: &Tensor| a.matmul(x), b, &tight())
    };
    let sol_dense = |(s, b): &(Tensor, Tensor)| linalg::solve(&spd_of(s), b).unwrap();
    let p = (s.clone(), b.clone());
    let t = (ds, db);
    let (x, dx) = jvp(sol_cg, &p, &t);
    let (xd, dxd) = jvp(sol_dense, &p, &t);
    assert_close("primal", &x, &xd, 1e-12);
    assert_close("tangent", &dx, &dxd, 1e-10);
    fd_check("cg solution (forward)", |p: &(Tensor, Tensor)| sol_cg(p), &p, Modes::Fwd, 1e-6);

    let a = spd_of(&s);
    let inv = linalg::inv(&a).unwrap();
    let of_b = |b: &Tensor| cg(|x: &Tensor| a.matmul(x), b, &tight());
    assert_close("jacfwd", &jacfwd(of_b)(&b), &inv, 1e-10);
    assert_close("jacrev", &jacrev(of_b)(&b), &inv, 1e-10);
}

/// vmap over right-hand sides (with a shared matrix), over matrices, and
/// over both, and vmap of the gradient, each equal to a loop of single
/// solves (1e-12). The batched loop runs until every example has
/// converged.
#[test]
fn cg_vmap_equals_a_loop() {
    let k = 4;
    let a = spd_of(&normal(30, &[6, 6]));
    let bs = normal(31, &[k, 6]);
    let ss = normal(32, &[k, 6, 6]);
    let one = |a: &Tensor, b: &Tensor| cg(|x: &Tensor| a.matmul(x), b, &tight());
    let rhs = vmap(|b: &Tensor| one(&a, b))(&bs);
    let mats = vmap(|s: &Tensor| one(&spd_of(s), &bs.index(0)))(&ss);
    let both = vmap(|(s, b): &(Tensor, Tensor)| one(&spd_of(s), b))(&(ss.clone(), bs.clone()));
    let loss = |(s, b): &(Tensor, Tensor)| one(&spd_of(s), b).powi(2).sum();
    let (gs, gb) = vmap(grad(loss))(&(ss.clone(), bs.clone()));
    for i in 0..k as isize {
        let (si, bi) = (ss.index(i), bs.index(i));
        assert_close("over b", &rhs.index(i), &one(&a, &bi), 1e-12);
        assert_close("over A", &mats.index(i), &one(&spd_of(&si), &bs.index(0)), 1e-12);
        assert_close("over both", &both.index(i), &one(&spd_of(&si), &bi), 1e-12);
        let (gsi, gbi) = grad(loss)(&(si, bi));
        assert_close("vmap(grad) d/dS", &gs.index(i), &gsi, 1e-12);
        assert_close("vmap(grad) d/db", &gb.index(i), &gbi, 1e-12);
    }
}

/// jit of the solve, of its gradient (1,000 iterations allowed: reverse
/// mode through a plain `while_loop` would be refused under jit's trace,
/// as in JAX) and of vmap over right-hand sides equal eager (1e-12).
#[test]
fn cg_jit_equals_eager() {
    let s = normal(40, &[5, 5]);
    let b = normal(41, &[5]);
    let opts = CgOptions { maxiter: Some(1000), ..tight() };
    let loss = |(s, b): &(Tensor, Tensor)| {
        let a = spd_of(s);
        cg(|x: &Tensor| a.matmul(x), b, &opts).sin().sum()
    };
    let p = (s.clone(), b.clone());
    let a = spd_of(&s);
    let solve = |b: &Tensor| cg(|x: &Tensor| a.matmul(x), b, &opts);
    assert_close("jit", &jit(solve)(&b), &solve(&b), 1e-12);
    assert_close("jit(loss)", &jit(loss)(&p), &loss(&p), 1e-12);
    let (gs, gb) = jit(grad(loss))(&p);
    let (es, eb) = grad(loss)(&p);
    assert_close("jit(grad) d/dS", &gs, &es, 1e-12);
    assert_close("jit(grad) d/db", &gb, &eb, 1e-12);
    let bs = normal(42, &[3, 5]);
    assert_close("jit(vmap)", &jit(vmap(solve))(&bs), &vmap(solve)(&bs), 1e-12);
}

/// `custom_linear_solve` on a general (non-symmetric) matrix with a direct
/// solve and its transpose: the solution, gradients (reverse), JVPs
/// (forward), jacfwd/jacrev and the Hessian of a quadratic of the solution
/// equal `linalg::solve`'s (1e-11), and both modes agree with finite
/// differences (1e-6).
#[test]
fn custom_linear_solve_with_a_direct_solve() {
    let n = 4;
    let m = normal(50, &[n, n]) + Tensor::eye(n, DType::F64) * 4.0;
    let b = normal(51, &[n]);
    let direct = |mv: &dyn Fn(&Tensor) -> Tensor, b: &Tensor| linalg::solve(&dense(mv, n), b).unwrap();
    let sol = |(m, b): &(Tensor, Tensor)| {
        custom_linear_solve(|x: &Tensor| m.matmul(x), b, direct, TransposeSolve::Solve(&direct))
    };
    let sol_dense = |(m, b): &(Tensor, Tensor)| linalg::solve(m, b).unwrap();
    let p = (m.clone(), b.clone());
    assert_close("solution", &sol(&p), &sol_dense(&p), 1e-12);
    let loss = |p: &(Tensor, Tensor)| sol(p).sin().sum();
    let loss_dense = |p: &(Tensor, Tensor)| sol_dense(p).sin().sum();
    let (gm, gb) = grad(loss)(&p);
    let (dm, db) = grad(loss_dense)(&p);
    assert_close("d/dM", &gm, &dm, 1e-11);
    assert_close("d/db", &gb, &db, 1e-11);
    let t = (normal(52, &[n, n]), normal(53, &[n]));
    assert_close("jvp", &jvp(sol, &p, &t).1, &jvp(sol_dense, &p, &t).1, 1e-11);
    let jf = jacfwd(|b: &Tensor| sol(&(m.clone(), b.clone())))(&b);
    let jr = jacrev(|b: &Tensor| sol(&(m.clone(), b.clone())))(&b);
    let inv = linalg::inv(&m).unwrap();
    assert_close("jacfwd", &jf, &inv, 1e-11);
    assert_close("jacrev", &jr, &inv, 1e-11);
    // second order through a direct solve: exact
    let quad = |b: &Tensor| sol(&(m.clone(), b.clone())).powi(2).sum();
    let h = hessian(quad)(&b);
    assert_close("hessian", &h, &(inv.t().matmul(&inv) * 2.0), 1e-11);
    fd_check("direct custom_linear_solve", loss, &p, Modes::Both, 1e-6);

    // the transpose solve is what reverse mode runs: a wrong one (the
    // solve itself, for a non-symmetric matrix) gives A⁻¹ w, not A⁻ᵀ w
    let wrong = |b: &Tensor| custom_linear_solve(|x: &Tensor| m.matmul(x), b, direct, TransposeSolve::Symmetric).sum();
    let g = grad(wrong)(&b);
    assert_close("symmetric claimed", &g, &inv.matmul(&Tensor::ones([n], DType::F64)), 1e-11);
}

/// A Hessian-vector product as the operator: `x(θ) = H(θ)⁻¹ v` for a
/// ridge-regularized logistic loss, by CG on exact HVPs (jvp of grad)
/// that close over `θ`. The gradient of `c · x(θ)` with respect to `θ`
/// (third derivatives of the loss, through the captured `θ`) equals the
/// dense `hessian` + `linalg::solve` version's (1e-10) and finite
/// differences (1e-6), in both modes.
#[test]
fn hvp_operator_closing_over_parameters() {
    let (m, d) = (20, 5);
    let data = normal(60, &[m, d]);
    let labels = normal(61, &[m]).gt_scalar(0.0).cast(DType::F64);
    let loss = |t: &Tensor| {
        let z = data.matmul(t);
        (z.softplus() - &labels * &z).mean() + t.powi(2).sum() * 0.05
    };
    let v = normal(62, &[d]);
    let c = normal(63, &[d]);
    let f_cg = |t: &Tensor| {
        let hvp = |u: &Tensor| jvp(|t: &Tensor| grad(loss)(t), t, u).1;
        (cg(hvp, &v, &tight()) * &c).sum()
    };
    let f_dense = |t: &Tensor| (linalg::solve(&hessian(loss)(t), &v).unwrap() * &c).sum();
    let theta = normal(64, &[d]) * 0.5;
    assert_close("value", &f_cg(&theta), &f_dense(&theta), 1e-12);
    assert_close("gradient", &grad(f_cg)(&theta), &grad(f_dense)(&theta), 1e-10);
    fd_check("H(θ)⁻¹ v", f_cg, &theta, Modes::Both, 1e-6);
}

/// sqrt(a) as the root of `x² - a` by Newton's method, and by bisection
/// (whose iterations have zero derivative: only the implicit rule gives
/// one): values, grad equal to `1/(2 sqrt a)`, vmap, jvp and jit (1e-12).
#[test]
fn custom_root_sqrt() {
    let newton = |f: &dyn Fn(&Tensor) -> Tensor, x0: &Tensor| {
        fori_loop(
            0,
            40,
            |_: &Tensor, x: &Tensor| {
                let (fx, dfx) = jvp(|x: &Tensor| f(x), x, &x.ones_like());
                x - &(fx / dfx)
            },
            x0,
        )
    };
    // bisection on [0, max(1, a)]: 60 halvings; a is read off f(0) = -a
    let bisect = |f: &dyn Fn(&Tensor) -> Tensor, x0: &Tensor| {
        let hi0 = (-f(&x0.zeros_like())).maximum_scalar(1.0);
        let (lo, hi) = fori_loop(
            0,
            60,
            |_: &Tensor, (lo, hi): &(Tensor, Tensor)| {
                let mid = (lo + hi) * 0.5;
                let neg = f(&mid).lt_scalar(0.0);
                (Tensor::where_(&neg, &mid, lo), Tensor::where_(&neg, hi, &mid))
            },
            &(x0.zeros_like(), hi0),
        );
        (lo + hi) * 0.5
    };
    let slope = |g: &dyn Fn(&Tensor) -> Tensor, y: &Tensor| y / &g(&y.ones_like());
    for (name, solve) in
        [("newton", &newton as &dyn Fn(&dyn Fn(&Tensor) -> Tensor, &Tensor) -> Tensor), ("bisection", &bisect)]
    {
        let sqrt = |a: &Tensor| custom_root(|x: &Tensor| x * x - a, &a.ones_like(), solve, slope);
        for a in [0.5f64, 2.0, 9.0] {
            let at = Tensor::scalar(a);
            let tol = if name == "newton" { 1e-14 } else { 1e-12 };
            assert!((sqrt(&at).item_f64() - a.sqrt()).abs() < tol, "{name} sqrt({a})");
            let g = grad(sqrt)(&at).item_f64();
            assert!((g - 0.5 / a.sqrt()).abs() < 1e-12, "{name} d sqrt({a}) = {g}");
            let (_, t) = jvp(sqrt, &at, &Tensor::scalar(2.0f64));
            assert!((t.item_f64() - 1.0 / a.sqrt()).abs() < 1e-12, "{name} jvp at {a}");
        }
        let a = Tensor::from_vec(vec![0.5f64, 2.0, 9.0], [3]);
        let want: Vec<f64> = a.to_vec_f64().iter().map(|a| a.sqrt()).collect();
        let got = vmap(sqrt)(&a);
        let gv = vmap(grad(sqrt))(&a);
        for i in 0..3 {
            assert!((got.to_vec_f64()[i] - want[i]).abs() < 1e-12, "{name} vmap");
            assert!((gv.to_vec_f64()[i] - 0.5 / want[i]).abs() < 1e-12, "{name} vmap(grad)");
        }
        let at = Tensor::scalar(2.0f64);
        assert!((jit(grad(sqrt))(&at).item_f64() - 0.5 / 2f64.sqrt()).abs() < 1e-12, "{name} jit(grad)");
    }
}

/// A vector root: `x + 0.3 tanh(W x) = θ`, by Newton with a dense
/// Jacobian, the tangent solved with the Jacobian of `g` (`∂f/∂x` at the
/// root). The root satisfies the equation (1e-12); the Jacobian of the
/// root with respect to `θ` is `(∂f/∂x)⁻¹` (1e-11); gradients with respect
/// to `θ` and `W` agree with finite differences (1e-6) in both modes.
#[test]
fn custom_root_vector() {
    let n = 4;
    let w = normal(70, &[n, n]);
    let theta = normal(71, &[n]);
    let c = normal(72, &[n]);
    let root = |(theta, w): &(Tensor, Tensor)| {
        let f = |x: &Tensor| x + &(w.matmul(x).tanh() * 0.3) - theta;
        let newton = |f: &dyn Fn(&Tensor) -> Tensor, x0: &Tensor| {
            fori_loop(
                0,
                30,
                |_: &Tensor, x: &Tensor| x - &linalg::solve(&jacfwd(|x: &Tensor| f(x))(x), &f(x)).unwrap(),
                x0,
            )
        };
        let tangent_solve =
            |g: &dyn Fn(&Tensor) -> Tensor, y: &Tensor| linalg::solve(&jacfwd(|v: &Tensor| g(v))(y), y).unwrap();
        custom_root(f, &theta.zeros_like(), newton, tangent_solve)
    };
    let p = (theta.clone(), w.clone());
    let x = root(&p);
    let resid = &x + &(w.matmul(&x).tanh() * 0.3) - &theta;
    assert!(resid.abs().max().item_f64() < 1e-12, "residual {resid}");
    let fx = jacfwd(|x: &Tensor| x + &(w.matmul(x).tanh() * 0.3))(&x);
    let jr = jacrev(|t: &Tensor| root(&(t.clone(), w.clone())))(&theta);
    let jf = jacfwd(|t: &Tensor| root(&(t.clone(), w.clone())))(&theta);
    let inv = linalg::inv(&fx).unwrap();
    assert_close("jacrev dx/dθ", &jr, &inv, 1e-11);
    assert_close("jacfwd dx/dθ", &jf, &inv, 1e-11);
    fd_check("vector root", |p: &(Tensor, Tensor)| (root(p) * &c).sum(), &p, Modes::Both, 1e-6);
}

/// Bad inputs are errors naming the function and the types, never a
/// panic or a wrong number: a matvec of the wrong shape, an integer `b`,
/// leaves of two dtypes, a mismatched initial guess, a negative or NaN
/// tolerance, a solve or transpose solve of the wrong type, an empty tree,
/// a failing matvec, and a root function of the wrong shape.
#[test]
fn bad_inputs_are_errors() {
    let a = spd_of(&normal(80, &[3, 3]));
    let b = normal(81, &[3]);
    let mv = |x: &Tensor| a.matmul(x);
    let check = |what: &str, r: xform::Result<Tensor>, kind: fn(&ErrorKind) -> bool, words: &[&str]| {
        let e = r.expect_err(what);
        assert!(kind(&e.kind), "{what}: {e:?}");
        let s = e.to_string();
        for w in words {
            assert!(s.contains(w), "{what}: {s:?} lacks {w:?}");
        }
        assert_eq!(stack_depth(), 0, "{what}");
    };
    let shape = |k: &ErrorKind| matches!(k, ErrorKind::Shape { .. });
    let dtype = |k: &ErrorKind| matches!(k, ErrorKind::DType { .. });
    let invalid = |k: &ErrorKind| matches!(k, ErrorKind::Invalid { .. });
    let any = |_: &ErrorKind| true;
    let o = CgOptions::default();

    check("short matvec", try_cg(|x: &Tensor| x.narrow(0, 0, 2), &b, &o), shape, &["cg", "matvec", "[2]", "[3]"]);
    check("f32 matvec", try_cg(|x: &Tensor| x.cast(DType::F32), &b, &o), shape, &["matvec", "f32", "f64"]);
    let bi = Tensor::from_vec(vec![1i32, 2, 3], [3]);
    check("integer b", try_cg(|x: &Tensor| x.clone(), &bi, &CgOptions::default()), dtype, &["cg", "float", "i32"]);
    let mixed = (b.clone(), b.cast(DType::F32));
    let r = try_cg(|x: &(Tensor, Tensor)| (x.0.clone(), x.1.clone()), &mixed, &CgOptions::default());
    assert!(matches!(r.map(|_| ()).expect_err("mixed").kind, ErrorKind::DType { .. }));
    let x0 = CgOptions { x0: Some(normal(82, &[4])), ..Default::default() };
    check("x0 shape", try_cg(mv, &b, &x0), shape, &["x0", "[4]", "[3]"]);
    check("negative tol", try_cg(mv, &b, &CgOptions { tol: -1.0, ..Default::default() }), invalid, &["tol"]);
    check("NaN atol", try_cg(mv, &b, &CgOptions { atol: f64::NAN, ..Default::default() }), invalid, &["atol"]);
    let a4 = normal(83, &[4, 4]);
    check("failing matvec", try_cg(|x: &Tensor| a4.matmul(x), &b, &o), any, &[]);
    let r = try_cg(|_: &()| (), &(), &CgOptions::default());
    assert!(matches!(r.expect_err("empty").kind, ErrorKind::Invalid { .. }));

    let bad_solve = |_: &dyn Fn(&Tensor) -> Tensor, b: &Tensor| b.narrow(0, 0, 2);
    let r = try_custom_linear_solve(mv, &b, bad_solve, TransposeSolve::Symmetric);
    check("short solve", r, shape, &["custom_linear_solve", "solve", "[2]"]);
    let good = |mv: &dyn Fn(&Tensor) -> Tensor, b: &Tensor| linalg::solve(&dense(mv, 3), b).unwrap();
    let bad_t = |_: &dyn Fn(&Tensor) -> Tensor, b: &Tensor| b.cast(DType::F32);
    let r = try_custom_linear_solve(mv, &b, good, TransposeSolve::Solve(&bad_t));
    check("f32 transpose solve", r, shape, &["transpose_solve", "f32"]);

    let r = try_custom_root(|x: &Tensor| x.narrow(0, 0, 1), &b, |_, x| x.clone(), |_, y| y.clone());
    check("short root function", r, shape, &["custom_root", "f", "[1]"]);
    let r = try_custom_root(|x: &Tensor| x.clone(), &b, |_, x| x.sum(), |_, y| y.clone());
    check("scalar root", r, shape, &["solve"]);
}

/// The number of top-level equations of a program, and of `while` loops
/// among them.
fn size(p: &Program) -> (usize, usize) {
    let loops = p.eqns.iter().filter(|e| matches!(e.prim, Prim::Control(ControlOp::While { .. }))).count();
    (p.eqns.len(), loops)
}

/// CG written directly with `while_loop`, without `custom_linear_solve`
/// (the same iterations as `cg` with `tol = atol = 0` and zeros as the
/// initial guess), on the operator `x ↦ d x`: reverse mode records each of
/// its iterations. Also returns the iterations run.
fn unrolled_cg(d: &Tensor, b: &Tensor, maxiter: i32) -> (Tensor, Tensor) {
    let r0 = b - &(d * &b.zeros_like());
    let init = (b.zeros_like(), r0.clone(), (&r0 * &r0).sum(), r0, Tensor::scalar(0i32));
    let (x, _, _, _, k) = while_loop(
        |(_, _, g, _, k): &(Tensor, Tensor, Tensor, Tensor, Tensor)| {
            g.gt_scalar(0.0).logical_and(&k.lt_scalar(maxiter))
        },
        |(x, r, g, p, k): &(Tensor, Tensor, Tensor, Tensor, Tensor)| {
            let ap = d * p;
            let alpha = g / &(p * &ap).sum();
            let r2 = r - &(&alpha * &ap);
            let g2 = (&r2 * &r2).sum();
            let p2 = &r2 + &(&(&g2 / g) * p);
            (x + &(&alpha * p), r2, g2, p2, k + 1)
        },
        &init,
    );
    (x, k)
}

/// Reverse mode through 1,000 CG iterations keeps none of them. The
/// operator is `x ↦ d x` with `d` (a differentiated parameter) spread
/// geometrically over `[1, 1e4]` in 1,000 dimensions, so that with `tol =
/// 0` the loop runs all 1,000 iterations without its residual reaching
/// zero (checked on the same iterations written as a plain `while_loop`).
/// The pullback, traced (every equation the backward pass runs,
/// recorded), is a second CG solve: one `while` loop and a few equations
/// around it, the same program for 10 iterations as for 1,000. The plain
/// loop's pullback records every iteration: its size grows by the same
/// number of equations per iteration from 10 to 1,000 iterations. The
/// gradient after 1,000 iterations is the exact one, `∂/∂b = cos(x)/d`,
/// `∂/∂d = -cos(x) x/d` (relative 1e-8).
#[test]
fn cg_reverse_mode_keeps_no_iteration() {
    let n = 1000;
    let d = (Tensor::linspace(0.0, 4.0, n, DType::F64) * 10f64.ln()).exp();
    let b = normal(91, &[n]);
    let ct = Tensor::scalar(1.0f64);
    let loss_of = |maxiter: usize| {
        let opts = CgOptions { tol: 0.0, maxiter: Some(maxiter), ..Default::default() };
        move |(d, b): &(Tensor, Tensor)| cg(|x: &Tensor| d * x, b, &opts).sin().sum()
    };
    let pullback_size = |maxiter: usize| {
        let (_, pullback) = vjp(loss_of(maxiter), &(d.clone(), b.clone()));
        size(&trace(|c: &Tensor| tree::leaves(&pullback(c)).into_vec(), &ct))
    };
    let (n10, loops10) = pullback_size(10);
    let (n1000, loops1000) = pullback_size(1000);
    assert_eq!((loops10, loops1000), (1, 1), "the backward pass is one CG loop");
    assert_eq!(n10, n1000, "the backward pass does not grow with the iterations");
    assert!(n1000 < 40, "{n1000} equations");

    let (gd, gb) = grad(loss_of(1000))(&(d.clone(), b.clone()));
    let x = &b / &d;
    assert_close("d/db after 1,000 iterations", &gb, &(x.cos() / &d), 1e-8);
    assert_close("d/dd after 1,000 iterations", &gd, &-(x.cos() * &x / &d), 1e-8);

    let unrolled = |maxiter: i32| {
        let (_, k) = unrolled_cg(&d, &b, maxiter);
        assert_eq!(k.item::<i32>(), maxiter, "the residual reached zero before {maxiter} iterations");
        let (_, pullback) =
            vjp(|(d, b): &(Tensor, Tensor)| unrolled_cg(d, b, maxiter).0.sin().sum(), &(d.clone(), b.clone()));
        size(&trace(|c: &Tensor| tree::leaves(&pullback(c)).into_vec(), &ct))
    };
    let ((u10, l10), (u20, _), (u1000, l1000)) = (unrolled(10), unrolled(20), unrolled(1000));
    assert_eq!((l10, l1000), (0, 0), "reverse mode records the plain loop's iterations");
    let per_iteration = (u20 - u10) / 10;
    assert!(per_iteration > 0 && u1000 == u10 + 990 * per_iteration, "{u10}, {u20}, {u1000}");
    println!(
        "backward pass: {n1000} equations (1 loop) through cg; {u1000} ({per_iteration} per iteration) \
         through the same 1,000 iterations as a plain while_loop"
    );
}

/// Second derivatives through CG (where the first-order rule's own solves
/// are differentiated, so their iterates: see the module documentation):
/// the Hessian of `sum(sin(x(S, b)))` with respect to `(S, b)` equals the
/// dense solve's (1e-8), by forward-over-reverse (`hessian`) and by
/// reverse-over-reverse (`jacrev` of `grad`); and vmap over initial
/// guesses (a batched value `solve` closes over) leaves the solution and
/// its gradient unchanged (1e-12).
#[test]
fn second_derivatives_and_batched_initial_guesses() {
    let n = 4;
    let s = normal(100, &[n, n]);
    let b = normal(101, &[n]);
    let flat = |p: &Tensor| (p.narrow(0, 0, n * n).reshape(&[n as isize, n as isize]), p.narrow(0, n * n, n));
    let loss_cg = |p: &Tensor| {
        let (s, b) = flat(p);
        let a = spd_of(&s);
        cg(|x: &Tensor| a.matmul(x), &b, &tight()).sin().sum()
    };
    let loss_dense = |p: &Tensor| {
        let (s, b) = flat(p);
        linalg::solve(&spd_of(&s), &b).unwrap().sin().sum()
    };
    let p = Tensor::concat(&[s.reshape(&[(n * n) as isize]), b.clone()], 0);
    let want = hessian(loss_dense)(&p);
    assert_close("hessian", &hessian(loss_cg)(&p), &want, 1e-8);
    assert_close("jacrev(grad)", &jacrev(grad(loss_cg))(&p), &want, 1e-8);

    let a = spd_of(&s);
    let x0s = normal(102, &[3, n]);
    let from = |x0: &Tensor, b: &Tensor| {
        let opts = CgOptions { x0: Some(x0.clone()), ..tight() };
        cg(|x: &Tensor| a.matmul(x), b, &opts)
    };
    let xs = vmap(|x0: &Tensor| from(x0, &b))(&x0s);
    let gs = vmap(|x0: &Tensor| grad(|b: &Tensor| from(x0, b).sin().sum())(&b))(&x0s);
    let want_x = linalg::solve(&a, &b).unwrap();
    let want_g = grad(|b: &Tensor| linalg::solve(&a, b).unwrap().sin().sum())(&b);
    for i in 0..3 {
        assert_close("x from a batched guess", &xs.index(i), &want_x, 1e-12);
        assert_close("gradient from a batched guess", &gs.index(i), &want_g, 1e-12);
    }
}

/// The influence-function computation of `examples/influence_functions.rs`
/// in small: `(H + λI)⁻¹ g` by CG over an `Mlp` parameter tree (a derived
/// tree with a static field), its operator a Hessian-vector product of a
/// loss over a batch, equals the dense solve with the explicit Hessian of
/// the flattened parameters (1e-10), also under vmap over several
/// right-hand sides.
#[test]
fn cg_over_a_parameter_tree() {
    use xform::nn::{softmax_cross_entropy, Mlp};
    let params = Mlp::init(&Key::new(110), &[4, 3, 2], DType::F64);
    let x = normal(111, &[10, 4]);
    let y = Key::new(112).randint([10], 0, 2, DType::I32);
    let damping = 0.1;
    let loss = |p: &Mlp| softmax_cross_entropy(&p.forward(&x), &y);
    let hvp = |v: &Mlp| tree::axpy(damping, v, &jvp(grad(loss), &params, v).1);
    let ravel = |p: &Mlp| Tensor::concat(&p.leaves().iter().map(Tensor::flatten).collect::<Vec<_>>(), 0);
    let unravel = |v: &Tensor| {
        let mut at = 0;
        params.with_leaves(params.leaves().iter().map(|l| {
            at += l.numel();
            v.narrow(0, at - l.numel(), l.numel()).reshape_to(l.shape())
        }))
    };
    let theta = ravel(&params);
    let n = theta.numel();
    let h = hessian(|t: &Tensor| loss(&unravel(t)))(&theta) + Tensor::eye(n, DType::F64) * damping;
    let gs = normal(113, &[3, n]);
    let s = cg(hvp, &unravel(&gs.index(0)), &tight());
    assert_close("tree", &ravel(&s), &linalg::solve(&h, &gs.index(0)).unwrap(), 1e-10);
    let batched = vmap(|g: &Tensor| ravel(&cg(hvp, &unravel(g), &tight())))(&gs);
    for i in 0..3 {
        assert_close("vmap over trees", &batched.index(i), &linalg::solve(&h, &gs.index(i)).unwrap(), 1e-10);
    }
}
