//! Newton's method in a `while_loop`, differentiated in reverse mode.
//!
//! `x*(a, b)` solves `F(x) = x^3 + a x - b = 0` (one real root for
//! `a > 0`) by Newton's method from `x = 1`, stopping when the last update
//! is below `TOL`: the trip count depends on the parameters, so the loop
//! is a `while_loop`. JAX refuses reverse mode through `lax.while_loop`;
//! xform runs the loop, knows its trip count, and records the iterations
//! (or, with `WhileOptions { remat_every: k }`, keeps one carry every `k`
//! iterations and recomputes the rest in the backward pass).
//!
//! It checks `grad` with respect to `(a, b)` against the implicit function
//! theorem, `dx/da = -(dF/da) / (dF/dx) = -x / (3x^2 + a)` and
//! `dx/db = 1 / (3x^2 + a)`, and against central finite differences; the
//! second derivative `d2x/da2` (grad of grad through the loop) against
//! the derivative of the implicit one; `vmap` over several parameter pairs,
//! whose examples stop after different numbers of iterations (a batched
//! predicate), against a loop; and the rematerialized loop against the
//! recorded one.
//!
//! Run: `cargo run --release --example newton_while`

use xform::prelude::*;
use xform::{while_loop_with, WhileOptions};

/// Newton stops when the last update is below this.
const STOP: f64 = 1e-12;
/// Relative tolerance against the implicit-function-theorem derivatives.
const TOL_IFT: f64 = 1e-12;
/// Relative tolerance against central finite differences (step `FD_H`).
const TOL_FD: f64 = 1e-8;
const FD_H: f64 = 1e-5;

/// The Newton state: the iterate, the last update, the number of updates.
type State = (Tensor, Tensor, Tensor);

/// The root of `x^3 + a x - b` and the number of Newton steps taken.
fn solve(a: &Tensor, b: &Tensor, opts: &WhileOptions) -> (Tensor, Tensor) {
    let init: State = (a.ones_like(), a.ones_like(), Tensor::scalar(0i32));
    let (x, _, steps) = while_loop_with(
        |(_, dx, _): &State| dx.abs().gt_scalar(STOP),
        |(x, _, n): &State| {
            let f = x.powi(3) + a * x - b;
            let df = 3.0 * x * x + a;
            let dx = f / df;
            (x - &dx, dx, n + 1)
        },
        &init,
        opts,
    );
    (x, steps)
}

fn root(ab: &(Tensor, Tensor)) -> Tensor {
    solve(&ab.0, &ab.1, &WhileOptions::default()).0
}

/// `(dx/da, dx/db, d2x/da2)` at the root `x` by the implicit function theorem.
fn implicit(a: f64, x: f64) -> (f64, f64, f64) {
    let fx = 3.0 * x * x + a;
    let xa = -x / fx;
    // d/da of -x / (3x^2 + a), with x' = xa.
    let xaa = -(xa * fx - x * (6.0 * x * xa + 1.0)) / (fx * fx);
    (xa, 1.0 / fx, xaa)
}

fn scalar(v: f64) -> Tensor {
    Tensor::scalar(v)
}

fn rel(got: f64, want: f64) -> f64 {
    (got - want).abs() / want.abs().max(1e-300)
}

fn main() {
    let params = [(0.1, 1.0), (1.0, 5.0), (3.0, 30.0), (10.0, 2.0), (0.5, 100.0), (2.0, -8.0)];
    println!("x*(a, b): the root of x^3 + a x - b by Newton's method from x = 1, stopping at |update| < {STOP:e}");
    println!(
        "{:>5} {:>6} {:>7} {:>20} {:>20} {:>10} {:>10} {:>10}",
        "a", "b", "steps", "dx/da", "dx/db", "IFT err", "FD err", "d2 err"
    );
    let mut worst = [0.0f64; 3];
    for &(a, b) in &params {
        let ab = (scalar(a), scalar(b));
        let (x, steps) = solve(&ab.0, &ab.1, &WhileOptions::default());
        let x = x.item_f64();
        assert!((x.powi(3) + a * x - b).abs() < 1e-12 * b.abs().max(1.0), "Newton did not converge");
        let (ga, gb) = grad(root)(&ab);
        let (ga, gb) = (ga.item_f64(), gb.item_f64());
        let (xa, xb, xaa) = implicit(a, x);
        let e_ift = rel(ga, xa).max(rel(gb, xb));
        // Central differences of the solver itself (no derivative code).
        let fd = |da: f64, db: f64| {
            (root(&(scalar(a + da), scalar(b + db))).item_f64() - root(&(scalar(a - da), scalar(b - db))).item_f64())
                / (2.0 * FD_H)
        };
        let e_fd = rel(ga, fd(FD_H, 0.0)).max(rel(gb, fd(0.0, FD_H)));
        // Second order: grad of grad through the loop.
        let gaa = grad(|a: &Tensor| grad(|a: &Tensor| root(&(a.clone(), ab.1.clone())))(a))(&ab.0).item_f64();
        let e_2 = rel(gaa, xaa);
        println!(
            "{a:>5} {b:>6} {:>7} {ga:>20.15} {gb:>20.15} {e_ift:>10.1e} {e_fd:>10.1e} {e_2:>10.1e}",
            steps.item::<i32>()
        );
        worst = [worst[0].max(e_ift), worst[1].max(e_fd), worst[2].max(e_2)];
    }
    println!(
        "max relative error: vs the implicit function theorem {:.1e}, vs finite differences {:.1e}, d2x/da2 {:.1e}",
        worst[0], worst[1], worst[2]
    );
    assert!(worst[0] < TOL_IFT, "grad through the while_loop differs from the implicit derivative");
    assert!(worst[1] < TOL_FD, "grad through the while_loop differs from finite differences");
    assert!(worst[2] < 1e-10, "grad of grad through the while_loop differs from the implicit second derivative");

    // vmap: one batched loop runs until every example has stopped; the
    // finished ones keep their carry (their step counts stop growing).
    let a_s = Tensor::from_vec(params.iter().map(|p| p.0).collect::<Vec<_>>(), [params.len()]);
    let b_s = Tensor::from_vec(params.iter().map(|p| p.1).collect::<Vec<_>>(), [params.len()]);
    let ab_s = (a_s, b_s);
    let steps = vmap(|(a, b): &(Tensor, Tensor)| solve(a, b, &WhileOptions::default()).1)(&ab_s).to_vec::<i32>();
    let (ga_s, gb_s) = vmap(grad(root))(&ab_s);
    let (ga_s, gb_s) = (ga_s.to_vec::<f64>(), gb_s.to_vec::<f64>());
    let mut e_vmap = 0.0f64;
    for (i, &(a, b)) in params.iter().enumerate() {
        let (ga, gb) = grad(root)(&(scalar(a), scalar(b)));
        e_vmap = e_vmap.max(rel(ga_s[i], ga.item_f64())).max(rel(gb_s[i], gb.item_f64()));
    }
    println!("vmap over the {} parameter pairs: steps per example {steps:?}", params.len());
    println!("vmap(grad) vs a loop of grad: max relative difference {e_vmap:.1e}");
    let want_steps: Vec<i32> =
        params.iter().map(|&(a, b)| solve(&scalar(a), &scalar(b), &WhileOptions::default()).1.item::<i32>()).collect();
    assert_eq!(steps, want_steps, "vmap changed the per-example trip counts");
    assert!(e_vmap < 1e-14, "vmap(grad) through the while_loop differs from a loop of grad");

    // Rematerialization: the same gradient from a carry every k iterations.
    for k in [1, 2, 3] {
        let opts = WhileOptions { remat_every: k };
        let (ga, gb) = vmap(grad(|(a, b): &(Tensor, Tensor)| solve(a, b, &opts).0))(&ab_s);
        let d = ga
            .to_vec::<f64>()
            .iter()
            .zip(&ga_s)
            .chain(gb.to_vec::<f64>().iter().zip(&gb_s))
            .map(|(g, w)| rel(*g, *w))
            .fold(0.0, f64::max);
        println!(
            "WhileOptions {{ remat_every: {k} }}: vmap(grad) max relative difference from the recorded loop {d:.1e}"
        );
        assert!(d < 1e-14, "remat_every {k} changed the gradient");
    }
    println!("all checks passed");
}
