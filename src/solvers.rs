//! Implicit differentiation: linear solves and roots whose derivatives come
//! from the equation they solve, not from the solver's iterations (JAX's
//! `jax.lax.custom_linear_solve`, `jax.lax.custom_root` and
//! `jax.scipy.sparse.linalg.cg`).
//!
//! - [`custom_linear_solve`]: `x` with `matvec(x) = b`, computed by the
//!   caller's `solve`. Its derivatives solve again instead of differentiating
//!   `solve`: forward mode `ẋ = A⁻¹ (ḃ - (∂A) x)`, reverse mode
//!   `λ = A⁻ᵀ x̄`, the cotangent of `b` being `λ` and that of every tensor
//!   `matvec` closes over `-vjp(matvec at x)(λ)` (with respect to those
//!   tensors), where `A` is the linear map `matvec`.
//! - [`cg`]: conjugate gradients on a matrix-free symmetric positive definite
//!   operator (a closure: a Hessian-vector product, say), one `while_loop`
//!   wrapped in [`custom_linear_solve`] with the operator symmetric, as JAX
//!   does. Reverse mode through a thousand iterations keeps no iteration: the
//!   backward pass is a second CG solve.
//! - [`custom_root`]: the root `x*` of `f(x) = 0` found by the caller's
//!   `solve`, differentiated by the implicit function theorem,
//!   `ẋ* = -(∂f/∂x)⁻¹ (∂f/∂θ) θ̇` for the tensors `θ` that `f` closes over,
//!   the linear system solved by the caller's `tangent_solve`.
//!
//! The vectors are pytrees ([`Tree`]): a tensor of any shape, or a tuple or
//! struct of them, with float leaves. The closures may capture tensors that
//! enclosing transforms trace (parameters being differentiated, examples
//! being mapped): each is staged, its captured tensors become arguments
//! (JAX's `closure_convert`), and the result is one [`custom_jvp`] whose
//! rule solves for the tangent (NOTE: [implicit tangent]). So every
//! transform composes with them: `grad`, `jvp`, `vjp`, `jacfwd`,
//! `jacrev`, `vmap` (over right-hand sides, parameters, or both) and `jit`.
//!
//! Derivatives with respect to what `solve` (or `transpose_solve`,
//! `tangent_solve`) closes over, such as `cg`'s initial guess, are zero, as
//! in JAX: the solution does not depend on how it was found.
//!
//! Where xform differs from JAX: second derivatives of a solution (a
//! `hessian`, `grad` of `grad`) differentiate the solver's code inside
//! the first-order rule (JAX applies the implicit rule at every order);
//! for an exact solve that is the same number, for an iterative one it is
//! the derivative of its iterates. `cg` takes no preconditioner and returns
//! the solution alone (JAX's `info` is always `None`).

use crate::tree;
use crate::{custom_jvp, custom_vjp, jvp, linearize, vjp, while_loop};
use crate::{lax, Aval, DType, Error, OrRaise, Program, Result, Tensor, Tree};
use xform_ops::staging;

/// The transpose of a linear solve, for reverse mode: see
/// [`custom_linear_solve`].
pub enum TransposeSolve<'a, X> {
    /// The operator is symmetric (`A = Aᵀ`): the solve is its own transpose
    /// (JAX's `symmetric=True`).
    Symmetric,
    /// `transpose_solve(vecmat, b)`: `y` with `vecmat(y) = b`, where
    /// `vecmat` is the transposed operator (`y ↦ Aᵀ y`).
    Solve(&'a dyn Fn(&dyn Fn(&X) -> X, &X) -> X),
}

/// The solution `x` of the linear system `matvec(x) = b`, computed by
/// `solve(matvec, b)`, and differentiated implicitly rather than through
/// `solve` (JAX's `jax.lax.custom_linear_solve`).
///
/// `matvec` must be linear in its argument; it may close over tensors that
/// enclosing transforms differentiate or map (a Hessian-vector product at
/// parameters `θ`). With `A` the map `matvec`:
///
/// - forward mode: `ẋ = solve(matvec, ḃ - (∂A) x)`, where `(∂A) x` is the
///   tangent of `matvec(x)` from the tangents of what `matvec` captures;
/// - reverse mode: `λ = transpose_solve(vecmat, x̄)` (`A⁻ᵀ x̄`), the
///   cotangent of `b` is `λ` and that of the captured tensors is
///   `-vjp(matvec at x with respect to them)(λ)`. For
///   [`TransposeSolve::Symmetric`] the transpose solve is `solve` itself.
///
/// `solve` runs once per call (twice under `jvp` or `grad`: once for `x`,
/// once for its tangent or cotangent); it is staged, so it may use
/// `while_loop` and the other control flow but not read values (`item`).
/// What it closes over gets no derivative.
///
/// ```
/// use xform::prelude::*;
/// use xform::linalg;
/// use xform::solvers::{custom_linear_solve, TransposeSolve};
///
/// let a = Tensor::from_vec(vec![4.0f64, 1.0, 1.0, 3.0], [2, 2]);
/// let b = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// // a direct solve that reads the matrix off the operator's columns
/// let dense = |mv: &dyn Fn(&Tensor) -> Tensor, b: &Tensor| {
///     let m = vmap(|e: &Tensor| mv(e))(&Tensor::eye(2, DType::F64)).t();
///     linalg::solve(&m, b).or_raise()
/// };
/// let loss = |a: &Tensor| {
///     let x = custom_linear_solve(|x: &Tensor| a.matmul(x), &b, dense, TransposeSolve::Symmetric);
///     x.sum()
/// };
/// let g = grad(loss)(&a); // d/dA of sum(A⁻¹ b) = -A⁻ᵀ 1 xᵀ
/// let x = linalg::solve(&a, &b).unwrap();
/// let lam = linalg::solve(&a.t(), &Tensor::ones([2], DType::F64)).unwrap();
/// let want = -(lam.unsqueeze(1) * x.unsqueeze(0));
/// assert!((&g - &want).abs().max().item::<f64>() < 1e-12);
/// ```
///
/// # Panics
/// As [`try_custom_linear_solve`] returns errors.
#[track_caller]
pub fn custom_linear_solve<X: Tree>(
    matvec: impl Fn(&X) -> X,
    b: &X,
    solve: impl Fn(&dyn Fn(&X) -> X, &X) -> X,
    transpose_solve: TransposeSolve<'_, X>,
) -> X {
    try_custom_linear_solve(matvec, b, solve, transpose_solve).or_raise()
}

/// [`custom_linear_solve`] returning an error instead of panicking.
///
/// # Errors
/// If `b` has no leaves or a leaf that is not a float, if `matvec`,
/// `solve` or `transpose_solve` returns a tree of another structure or a
/// leaf of another shape or dtype than `b`'s (the message names the leaf
/// and both types), or if one of them fails.
pub fn try_custom_linear_solve<X: Tree>(
    matvec: impl Fn(&X) -> X,
    b: &X,
    solve: impl Fn(&dyn Fn(&X) -> X, &X) -> X,
    transpose_solve: TransposeSolve<'_, X>,
) -> Result<X> {
    linear_solve("custom_linear_solve", matvec, b, solve, transpose_solve)
}

/// [`try_custom_linear_solve`], its errors named after `op`.
fn linear_solve<X: Tree>(
    op: &'static str,
    matvec: impl Fn(&X) -> X,
    b: &X,
    solve: impl Fn(&dyn Fn(&X) -> X, &X) -> X,
    transpose_solve: TransposeSolve<'_, X>,
) -> Result<X> {
    let b_avals = float_avals(op, "b", b)?;
    let (mv, out) = Closed::stage(op, &b_avals, |ins| matvec(&b.with_leaves(ins.iter().cloned())))?;
    check_like(op, "matvec", &out, "b", b)?;
    let c = mv.traced();
    let nc = c.len();
    let matvec_at = |c: &[Tensor], x: &X| b.with_leaves(mv.call(c, &x.leaves()).or_raise());
    // `solve` and `transpose_solve` staged on [matvec's traced captures, b]
    let cb_avals: Vec<Aval> = c.iter().map(Tensor::aval).chain(b_avals.iter().cloned()).collect();
    let stage_solve = |name: &str, f: &dyn Fn(&dyn Fn(&X) -> X, &X) -> X, transposed: bool| -> Result<Closed> {
        let (s, out) = Closed::stage(op, &cb_avals, |ins| {
            let (ci, bi) = ins.split_at(nc);
            let rhs = b.with_leaves(bi.iter().cloned());
            if transposed {
                // Aᵀ, linear: the pullback of A at any point (zero)
                let (_, pullback) = vjp(|x: &X| matvec_at(ci, x), &tree::zeros_like(&rhs));
                f(&pullback, &rhs)
            } else {
                f(&|x: &X| matvec_at(ci, x), &rhs)
            }
        })?;
        check_like(op, name, &out, "b", b)?;
        Ok(s)
    };
    let s = stage_solve("solve", &solve, false)?;
    let t = match transpose_solve {
        TransposeSolve::Symmetric => None,
        TransposeSolve::Solve(f) => Some(stage_solve("transpose_solve", f, true)?),
    };
    // `(matvec's, solve's, transpose_solve's traced captures, b)`
    type Args<X> = (Vec<Tensor>, Vec<Tensor>, Vec<Tensor>, X);
    let solve_at = |a: &Args<X>, rhs: &X| {
        let ins: Vec<Tensor> = a.0.iter().cloned().chain(rhs.leaves()).collect();
        b.with_leaves(s.call(&a.1, &ins).or_raise())
    };
    let transpose_solve_at = |a: &Args<X>, ct: &X| match &t {
        None => solve_at(a, ct),
        Some(t) => {
            let ins: Vec<Tensor> = a.0.iter().cloned().chain(ct.leaves()).collect();
            b.with_leaves(t.call(&a.2, &ins).or_raise())
        }
    };
    let args: Args<X> = (c, s.traced(), t.as_ref().map_or_else(Vec::new, Closed::traced), same(b));
    let traced = b.leaves().iter().any(Tensor::is_tracer)
        || [&mv, &s].into_iter().chain(t.as_ref()).any(|c| c.consts.iter().any(Tensor::is_tracer));
    if !traced {
        // no transform sees any of it: the solve alone
        return xform_ops::catch(|| solve_at(&args, b));
    }
    let rule = |a: &Args<X>, da: &Args<X>| {
        let x = solve_at(a, &a.3);
        let rhs = if nc == 0 {
            same(&da.3)
        } else {
            let (_, dmv) = jvp(|c: &Vec<Tensor>| matvec_at(c, &x), &a.0, &da.0);
            tree::sub(&da.3, &dmv)
        };
        (x, implicit_tangent(&rhs, |r| solve_at(a, r), |ct| transpose_solve_at(a, ct)))
    };
    custom_jvp(|a: &Args<X>| solve_at(a, &a.3), rule).try_call(&args)
}

/// NOTE: [implicit tangent] A solution's tangent is a linear solve of a
/// right-hand side `rhs` that is linear in the tangents; reverse mode
/// records that solve in the linear program and must transpose it by the
/// transpose solve, not by transposing the solver's code (a `while_loop`
/// whose trip count depends on `rhs` cannot be transposed, and recording
/// its iterations is what implicit differentiation avoids). The linear map
/// `r ↦ solve(r)` is therefore a `custom_vjp` whose `bwd` is the transpose
/// solve and whose JVP rule is the solve, applied to `rhs` as the tangent
/// of its JVP at `r = 0`: that binds `custom_vjp_tangent` on `rhs`, the
/// library's linear primitive whose transpose is `bwd` and whose forward
/// evaluation is the JVP rule. At `r = 0` the map's value is zero, so
/// `fwd` and the rule's primal half return zeros without solving; they are
/// never evaluated elsewhere. The solution itself is the outer
/// `custom_jvp`'s, computed once by the rule beside its tangent.
fn implicit_tangent<X: Tree>(rhs: &X, solve: impl Fn(&X) -> X, transpose_solve: impl Fn(&X) -> X) -> X {
    let map = custom_vjp(|r: &X| solve(r), |r: &X| (tree::zeros_like(r), ()), |_: &(), ct: &X| transpose_solve(ct))
        .with_jvp(|r: &X, dr: &X| (tree::zeros_like(r), solve(dr)));
    jvp(|r: &X| map.call(r), &tree::zeros_like(rhs), rhs).1
}

/// Options of [`cg`] (JAX's `jax.scipy.sparse.linalg.cg` keywords).
#[derive(Clone, Debug)]
pub struct CgOptions<X = Tensor> {
    /// Relative tolerance: iterations stop when `|r| <= max(tol |b|, atol)`
    /// for the residual `r = b - A x` (SciPy's and JAX's rule). Default
    /// `1e-5`.
    pub tol: f64,
    /// Absolute tolerance (see `tol`). Default `0`.
    pub atol: f64,
    /// At most this many iterations; default `10 n` for `n` elements in
    /// `b`.
    pub maxiter: Option<usize>,
    /// The initial guess; default zeros. It gets no derivative.
    pub x0: Option<X>,
}

impl<X> Default for CgOptions<X> {
    fn default() -> Self {
        CgOptions { tol: 1e-5, atol: 0.0, maxiter: None, x0: None }
    }
}

/// Solves `matvec(x) = b` for a symmetric positive definite linear
/// operator by conjugate gradients (JAX's `jax.scipy.sparse.linalg.cg`,
/// without a preconditioner).
///
/// The iterations are one `while_loop` inside [`custom_linear_solve`] with
/// [`TransposeSolve::Symmetric`], as in JAX: derivatives solve again with
/// CG instead of differentiating the loop, so reverse mode keeps no
/// iteration, however many run, and `matvec` may close over parameters
/// being differentiated (a Hessian-vector product). JAX returns `(x,
/// info)` with `info` always `None`; this returns `x`.
///
/// ```
/// use xform::prelude::*;
/// use xform::solvers::{cg, CgOptions};
///
/// let a = Tensor::from_vec(vec![4.0f64, 1.0, 1.0, 3.0], [2, 2]);
/// let b = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let opts = CgOptions { tol: 1e-12, ..Default::default() };
/// let x = cg(|x: &Tensor| a.matmul(x), &b, &opts);
/// assert!((&a.matmul(&x) - &b).abs().max().item::<f64>() < 1e-12);
/// // the gradient with respect to b is A⁻ᵀ 1, by a second CG solve
/// let g = grad(|b: &Tensor| cg(|x: &Tensor| a.matmul(x), b, &opts).sum())(&b);
/// let want = [2.0 / 11.0, 3.0 / 11.0];
/// assert!(g.to_vec::<f64>().iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12));
/// ```
///
/// # Panics
/// As [`try_cg`] returns errors.
#[track_caller]
pub fn cg<X: Tree>(matvec: impl Fn(&X) -> X, b: &X, options: &CgOptions<X>) -> X {
    try_cg(matvec, b, options).or_raise()
}

/// [`cg`] returning an error instead of panicking.
///
/// # Errors
/// As [`try_custom_linear_solve`]; also if `b`'s leaves do not share one
/// float dtype, `x0` differs from `b` in structure, shape or dtype, or a
/// tolerance is negative or NaN.
pub fn try_cg<X: Tree>(matvec: impl Fn(&X) -> X, b: &X, options: &CgOptions<X>) -> Result<X> {
    let op = "cg";
    let b_avals = float_avals(op, "b", b)?;
    let dtype = b_avals[0].dtype;
    if let Some(a) = b_avals.iter().find(|a| a.dtype != dtype) {
        return Err(Error::dtype(op, "needs the leaves of b to share one float dtype", &[dtype, a.dtype]));
    }
    for (name, v) in [("tol", options.tol), ("atol", options.atol)] {
        if v.is_nan() || v < 0.0 {
            return Err(Error::invalid(op, format!("{name} must be a non-negative number, got {v}")));
        }
    }
    if let Some(x0) = &options.x0 {
        check_like(op, "x0", x0, "b", b)?;
    }
    let n: usize = b_avals.iter().map(|a| a.shape.numel()).sum();
    let maxiter = options.maxiter.unwrap_or(10 * n).min(i32::MAX as usize) as i32;
    let (tol, atol) = (options.tol, options.atol);
    let solve = |mv: &dyn Fn(&X) -> X, b: &X| {
        let x0 = options.x0.as_ref().map_or_else(|| tree::zeros_like(b), same);
        cg_loop(mv, b, &x0, tol, atol, maxiter)
    };
    linear_solve(op, matvec, b, solve, TransposeSolve::Symmetric)
}

/// Conjugate gradients from `x0` (JAX's `_cg_solve` without the
/// preconditioner): the carry is `(x, r, |r|², p, k)`, and the loop runs
/// while `|r|² > max(tol² |b|², atol²)` and `k < maxiter`.
fn cg_loop<X: Tree>(a: &dyn Fn(&X) -> X, b: &X, x0: &X, tol: f64, atol: f64, maxiter: i32) -> X {
    let threshold = (tree::dot(b, b) * (tol * tol)).maximum_scalar(atol * atol);
    let r0 = tree::sub(b, &a(x0));
    let gamma0 = tree::dot(&r0, &r0);
    let k0 = lax::scalar(0.0, DType::I32, threshold.device()).or_raise();
    let init = (same(x0), same(&r0), gamma0, r0, k0);
    let (x, ..) = while_loop(
        |(_, _, gamma, _, k): &(X, X, Tensor, X, Tensor)| gamma.gt(&threshold).logical_and(&k.lt_scalar(maxiter)),
        |(x, r, gamma, p, k): &(X, X, Tensor, X, Tensor)| {
            let ap = a(p);
            let alpha = gamma / &tree::dot(p, &ap);
            let x = tree::map2(x, p, |x, p| x + &(&alpha * p));
            let r = tree::map2(r, &ap, |r, ap| r - &(&alpha * ap));
            let gamma_next = tree::dot(&r, &r);
            let beta = &gamma_next / gamma;
            let p = tree::map2(&r, p, |r, p| r + &(&beta * p));
            (x, r, gamma_next, p, k + 1)
        },
        &init,
    );
    x
}

/// The root `x*` of `f(x) = 0` found by `solve(f, initial_guess)`,
/// differentiated by the implicit function theorem rather than through
/// `solve` (JAX's `jax.lax.custom_root`).
///
/// For the tensors `θ` that `f` closes over, `f(θ, x*(θ)) = 0` gives
/// `ẋ* = -(∂f/∂x)⁻¹ (∂f/∂θ) θ̇`: the tangent solves `g(u) = (∂f/∂θ) θ̇`
/// by `tangent_solve(g, y)`, where `g` is the linear map `∂f/∂x` at `x*`
/// (a closure). `tangent_solve` must be linear in `y` for reverse mode,
/// which transposes it (as in JAX): `|g, y| y / g(1)` for a scalar, a dense
/// solve of `g`'s Jacobian, or [`custom_linear_solve`] / [`cg`] on `g`.
/// The initial guess, and what `solve` and `tangent_solve` close over,
/// get no derivative.
///
/// ```
/// use xform::prelude::*;
/// use xform::solvers::custom_root;
///
/// // sqrt(a) as the root of x² - a, by Newton's method
/// let sqrt = |a: &Tensor| {
///     custom_root(
///         |x: &Tensor| x * x - a,
///         &Tensor::scalar(1.0f64),
///         |f, x0| fori_loop(0, 30, |_: &Tensor, x: &Tensor| {
///             let (fx, dfx) = jvp(|x: &Tensor| f(x), x, &x.ones_like());
///             x - &(fx / dfx)
///         }, x0),
///         |g, y| y / &g(&y.ones_like()),
///     )
/// };
/// let a = Tensor::scalar(2.0f64);
/// assert!((sqrt(&a).item::<f64>() - 2f64.sqrt()).abs() < 1e-14);
/// let da = grad(|a: &Tensor| sqrt(a))(&a).item::<f64>();
/// assert!((da - 0.5 / 2f64.sqrt()).abs() < 1e-14);
/// ```
///
/// # Panics
/// As [`try_custom_root`] returns errors.
#[track_caller]
pub fn custom_root<X: Tree>(
    f: impl Fn(&X) -> X,
    initial_guess: &X,
    solve: impl Fn(&dyn Fn(&X) -> X, &X) -> X,
    tangent_solve: impl Fn(&dyn Fn(&X) -> X, &X) -> X,
) -> X {
    try_custom_root(f, initial_guess, solve, tangent_solve).or_raise()
}

/// [`custom_root`] returning an error instead of panicking.
///
/// # Errors
/// If the initial guess has no leaves or a leaf that is not a float, if
/// `f`, `solve` or `tangent_solve` returns a tree of another structure or
/// a leaf of another shape or dtype than the initial guess's (the message
/// names the leaf and both types), or if one of them fails.
pub fn try_custom_root<X: Tree>(
    f: impl Fn(&X) -> X,
    initial_guess: &X,
    solve: impl Fn(&dyn Fn(&X) -> X, &X) -> X,
    tangent_solve: impl Fn(&dyn Fn(&X) -> X, &X) -> X,
) -> Result<X> {
    let op = "custom_root";
    let guess = initial_guess;
    let x_avals = float_avals(op, "the initial guess", guess)?;
    let (fc, out) = Closed::stage(op, &x_avals, |ins| f(&guess.with_leaves(ins.iter().cloned())))?;
    check_like(op, "f", &out, "the initial guess", guess)?;
    let c = fc.traced();
    let nc = c.len();
    let c_avals: Vec<Aval> = c.iter().map(Tensor::aval).collect();
    let f_at = |c: &[Tensor], x: &X| guess.with_leaves(fc.call(c, &x.leaves()).or_raise());
    // solve on [f's traced captures, initial guess]
    let in_avals: Vec<Aval> = c_avals.iter().chain(&x_avals).cloned().collect();
    let (sc, out) = Closed::stage(op, &in_avals, |ins| {
        let (ci, xi) = ins.split_at(nc);
        solve(&|x: &X| f_at(ci, x), &guess.with_leaves(xi.iter().cloned()))
    })?;
    check_like(op, "solve", &out, "the initial guess", guess)?;
    // tangent_solve on [f's traced captures, root, right-hand side], with
    // g = ∂f/∂x at the root
    let in_avals: Vec<Aval> = c_avals.iter().chain(&x_avals).chain(&x_avals).cloned().collect();
    let (tc, out) = Closed::stage(op, &in_avals, |ins| {
        let (ci, rest) = ins.split_at(nc);
        let (xi, yi) = rest.split_at(x_avals.len());
        let (_, g) = linearize(|x: &X| f_at(ci, x), &guess.with_leaves(xi.iter().cloned()));
        tangent_solve(&g, &guess.with_leaves(yi.iter().cloned()))
    })?;
    check_like(op, "tangent_solve", &out, "the initial guess", guess)?;
    // `(f's, solve's, tangent_solve's traced captures, initial guess)`
    type Args<X> = (Vec<Tensor>, Vec<Tensor>, Vec<Tensor>, X);
    let solve_at = |a: &Args<X>| {
        let ins: Vec<Tensor> = a.0.iter().cloned().chain(a.3.leaves()).collect();
        guess.with_leaves(sc.call(&a.1, &ins).or_raise())
    };
    let args: Args<X> = (c, sc.traced(), tc.traced(), same(guess));
    let traced = guess.leaves().iter().any(Tensor::is_tracer)
        || [&fc, &sc, &tc].into_iter().any(|c| c.consts.iter().any(Tensor::is_tracer));
    if !traced {
        return xform_ops::catch(|| solve_at(&args));
    }
    let rule = |a: &Args<X>, da: &Args<X>| {
        let x = solve_at(a);
        if nc == 0 {
            return (x, tree::zeros_like(&a.3));
        }
        // f(θ, x*(θ)) = 0: ∂f/∂x ẋ = -(∂f/∂θ) θ̇
        let (_, df) = jvp(|c: &Vec<Tensor>| f_at(c, &x), &a.0, &da.0);
        let ins: Vec<Tensor> = a.0.iter().cloned().chain(x.leaves()).chain(df.leaves()).collect();
        let u = guess.with_leaves(tc.call(&a.2, &ins).or_raise());
        (x, tree::map(&u, |u| -u))
    };
    custom_jvp(solve_at, rule).try_call(&args)
}

/// A closure staged into a program whose captured values are its leading
/// inputs (JAX's `closure_convert`). The captured values that a transform
/// may differentiate (traced floats: [`Closed::traced`]) are handed to the
/// custom rule as arguments, so that it sees their tangents; the others
/// (concrete arrays, traced integers) stay captured.
struct Closed {
    program: Program,
    consts: Vec<Tensor>,
    /// Positions in `consts` of the traced float values.
    traced: Vec<usize>,
}

impl Closed {
    /// Stages `f` on fresh inputs of `in_avals`; also returns `f`'s result
    /// (staged leaves: its structure and types).
    fn stage<Y: Tree>(op: &'static str, in_avals: &[Aval], f: impl FnOnce(&[Tensor]) -> Y) -> Result<(Closed, Y)> {
        let mut out = None;
        let program = staging::stage(op, in_avals, |ins| {
            let y = f(ins);
            let leaves = y.leaves().into_vec();
            out = Some(y);
            Ok(leaves)
        })?;
        let (program, consts) = program.hoist_consts();
        let traced = (0..consts.len()).filter(|&i| consts[i].is_tracer() && consts[i].dtype().is_float()).collect();
        let out = out.ok_or_else(|| Error::internal(op, "the staged function returned nothing"))?;
        Ok((Closed { program, consts, traced }, out))
    }

    /// The traced float values it captured.
    fn traced(&self) -> Vec<Tensor> {
        self.traced.iter().map(|&i| self.consts[i].clone()).collect()
    }

    /// The program on `ins`, with `traced` in place of the captured values
    /// [`Closed::traced`] returns.
    fn call(&self, traced: &[Tensor], ins: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut args = self.consts.clone();
        for (&i, t) in self.traced.iter().zip(traced) {
            args[i] = t.clone();
        }
        args.extend(ins.iter().cloned());
        self.program.eval(&args)
    }
}

/// The avals of `x`'s leaves, checked to be floats (and at least one).
fn float_avals<X: Tree>(op: &str, what: &str, x: &X) -> Result<Vec<Aval>> {
    let leaves = x.leaves();
    if leaves.is_empty() {
        return Err(Error::invalid(op, format!("{what} has no leaves")));
    }
    let paths = x.paths();
    for (l, path) in leaves.iter().zip(&paths) {
        if !l.dtype().is_float() {
            return Err(Error::dtype(
                op,
                format!("{what} must have float leaves, got {}{}", l.aval(), at(path)),
                &[l.dtype()],
            ));
        }
    }
    Ok(leaves.iter().map(Tensor::aval).collect())
}

/// A tree like `x` over the same leaves (`Tree` does not require `Clone`).
fn same<X: Tree>(x: &X) -> X {
    x.with_leaves(x.leaves())
}

/// ` at <path>` for a leaf path, nothing for a lone tensor's (`<root>`).
fn at(path: &str) -> String {
    if path == "<root>" {
        String::new()
    } else {
        format!(" at {path}")
    }
}

/// Checks that `got` (what `got_name` returned) has the structure and
/// leaf types of `want` (`want_name`), naming the first leaf that differs.
fn check_like<X: Tree>(op: &str, got_name: &str, got: &X, want_name: &str, want: &X) -> Result<()> {
    let (gp, wp) = (got.paths(), want.paths());
    if gp != wp {
        return Err(Error::invalid(
            op,
            format!("{got_name} gives a tree with leaves [{}] but {want_name} has [{}]", gp.join(", "), wp.join(", ")),
        ));
    }
    for ((g, w), path) in got.leaves().iter().zip(want.leaves().iter()).zip(&wp) {
        let (g, w) = (g.aval(), w.aval());
        if g.shape != w.shape || g.dtype != w.dtype {
            return Err(Error::shape(
                op,
                format!("{got_name} gives {g}{}, but {want_name} is {w}", at(path)),
                &[&w.shape, &g.shape],
            ));
        }
    }
    Ok(())
}
