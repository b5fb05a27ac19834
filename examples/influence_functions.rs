//! Influence functions (Koh and Liang, 2017) on the UCI handwritten digits:
//! which training images most helped, and which most hurt, a trained
//! MLP's prediction on one test image.
//!
//! Upweighting a training example `z` by `ε` in the training objective
//! moves the trained parameters by `-ε H⁻¹ ∇L(z)`, with `H` the Hessian of
//! the objective at the trained parameters, and so the test loss by
//! `ε I(z)`, `I(z) = -∇L(z_test)ᵀ H⁻¹ ∇L(z)`. A negative score is a
//! helpful example (more of it lowers the test loss), a positive one
//! harmful; removing example `i` from the objective (a mean over `n`
//! examples) is `ε = -1/n`, a change of about `-I(z_i)/n` in the test loss.
//!
//! The computation, with no matrix of parameters by parameters formed:
//! per-example training gradients `∇L(z_i)` with `vmap(grad)`; the test
//! loss's gradient; `s = (H + λI)⁻¹ ∇L(z_test)` by `solvers::cg` over the
//! parameter tree, its operator an exact Hessian-vector product (`jvp` of
//! `grad`: forward-over-reverse) on the whole training set; the scores
//! `-∇L(z_i) · s`. The damping `λI` is the usual one: the Hessian of a
//! network at the end of training (not an exact minimum) can be
//! indefinite or singular, and CG needs a positive definite operator.
//!
//! A check first: on a small model whose Hessian is cheap to form, the
//! scores from `cg` equal those from the explicit Hessian (`hessian` of the
//! objective over the flattened parameters, then `linalg::solve`); the
//! example panics if they differ by more than 1e-6 (relative).
//!
//! Run: `cargo run --release --example influence_functions`

use std::time::Instant;
use xform::data::{batches, digits};
use xform::linalg;
use xform::nn::{accuracy, softmax_cross_entropy, softmax_cross_entropy_per_example, Adam, Mlp};
use xform::prelude::*;
use xform::solvers::{cg, CgOptions};
use xform::tree;

/// The L2 penalty of the training objective.
const WEIGHT_DECAY: f64 = 1e-3;
/// The damping `λ` added to the Hessian.
const DAMPING: f64 = 1e-2;

/// The training objective: mean cross-entropy plus the L2 penalty.
fn objective(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.forward(x), y) + tree::dot(p, p) * (0.5 * WEIGHT_DECAY)
}

/// The loss of one example (`x: [64]`, `y` a scalar label).
fn example_loss(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.forward(&x.unsqueeze(0)), &y.unsqueeze(0))
}

/// An MLP trained by Adam on `(x, y)` in batches of 64.
fn train(sizes: &[usize], x: &Tensor, y: &Tensor, epochs: usize) -> Mlp {
    let mut params = Mlp::init(&Key::new(0), sizes, DType::F64);
    let adam = Adam::new(1e-2);
    let mut state = adam.init(&params);
    for epoch in 0..epochs {
        for (xb, yb) in batches(x, y, 64, Some(epoch as u64), false) {
            let g = grad(|p: &Mlp| objective(p, &xb, &yb))(&params);
            (params, state) = adam.update(&params, &g, &state);
        }
    }
    params
}

/// The influence scores `-∇L(z_i)ᵀ (H + λI)⁻¹ ∇L(z_test)` of every
/// training example on the test example, by CG on Hessian-vector products;
/// also the relative residual of the solve.
fn influence_cg(params: &Mlp, x: &Tensor, y: &Tensor, test: (&Tensor, &Tensor), tol: f64) -> (Tensor, f64) {
    let train_grad = grad(|p: &Mlp| objective(p, x, y));
    // (H + λI) v, exact: the JVP of the gradient along v
    let hvp = |v: &Mlp| tree::axpy(DAMPING, v, &jvp(&train_grad, params, v).1);
    let g_test = grad(|p: &Mlp| example_loss(p, test.0, test.1))(params);
    let s = cg(hvp, &g_test, &CgOptions { tol, maxiter: Some(2000), ..Default::default() });
    let residual = (tree::norm(&tree::sub(&hvp(&s), &g_test)) / tree::norm(&g_test)).item_f64();
    let per_example =
        vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Mlp| example_loss(p, x, y))(params))(&(x.clone(), y.clone()));
    // -G s over every leaf: each leaf's per-example gradients are [n, ...]
    let scores = per_example
        .leaves()
        .iter()
        .zip(s.leaves().iter())
        .map(|(g, s)| -(g * &s.unsqueeze(0)).reshape(&[g.dim(0) as isize, -1]).sum_axis(1, false))
        .reduce(|a, b| a + b)
        .expect("parameters");
    (scores, residual)
}

/// The parameters as one vector, and back (for the explicit Hessian).
fn ravel(p: &Mlp) -> Tensor {
    Tensor::concat(&p.leaves().iter().map(Tensor::flatten).collect::<Vec<_>>(), 0)
}

fn unravel(v: &Tensor, like: &Mlp) -> Mlp {
    let mut at = 0;
    like.with_leaves(like.leaves().iter().map(|l| {
        let n = l.numel();
        at += n;
        v.narrow(0, at - n, n).reshape_to(l.shape())
    }))
}

/// The same scores from the explicit Hessian of the objective over the
/// flattened parameters, solved densely.
fn influence_dense(params: &Mlp, x: &Tensor, y: &Tensor, test: (&Tensor, &Tensor)) -> Tensor {
    let theta = ravel(params);
    let h = hessian(|t: &Tensor| objective(&unravel(t, params), x, y))(&theta);
    let h = &h + &(Tensor::eye(theta.numel(), DType::F64) * DAMPING);
    // (cholesky gives NaN for a matrix that is not positive definite)
    let pd = !linalg::cholesky(&h).unwrap().to_vec_f64().iter().any(|v| v.is_nan());
    assert!(pd, "H + λI is not positive definite at the small model's parameters: raise the damping");
    // (cholesky gives NaN for a matrix that is not positive definite)
    let pd = !linalg::cholesky(&h).unwrap().to_vec_f64().iter().any(|v| v.is_nan());
    assert!(pd, "H + λI is not positive definite at the small model's parameters: raise the damping");
    let g_test = grad(|t: &Tensor| example_loss(&unravel(t, params), test.0, test.1))(&theta);
    let s = linalg::solve(&h, &g_test).unwrap();
    let per_example =
        vmap(|(x, y): &(Tensor, Tensor)| grad(|t: &Tensor| example_loss(&unravel(t, params), x, y))(&theta))(&(
            x.clone(),
            y.clone(),
        ));
    -per_example.matmul(&s)
}

/// The digit's 8x8 image as text, one string per row.
fn picture(x: &Tensor) -> Vec<String> {
    let v = x.to_vec_f64();
    v.chunks(8).map(|row| row.iter().map(|&p| [' ', '.', ':', '#'][((p * 3.99) as usize).min(3)]).collect()).collect()
}

fn main() {
    let start = Instant::now();
    let data = digits();
    let (train_x, train_y) = (data.train_x.cast(DType::F64), data.train_y.clone());
    let (test_x, test_y) = (data.test_x.cast(DType::F64), data.test_y.clone());

    // 1. The check: cg against the explicit Hessian on a small model.
    let (sx, sy) = (train_x.narrow(0, 0, 400), train_y.narrow(0, 0, 400));
    let small = train(&[64, 12, 10], &sx, &sy, 300);
    let test = (&test_x.index(0), &test_y.index(0));
    let t0 = Instant::now();
    let (by_cg, residual) = influence_cg(&small, &sx, &sy, test, 1e-10);
    let t_cg = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let dense = influence_dense(&small, &sx, &sy, test);
    let t_dense = t0.elapsed().as_secs_f64();
    let gap = (&by_cg - &dense).abs().max().item_f64() / dense.abs().max().item_f64();
    println!(
        "check on a [64, 12, 10] MLP ({} parameters, 400 examples): cg scores vs the explicit Hessian's, \
         max relative gap {gap:.1e} (cg residual {residual:.1e}; cg {t_cg:.2} s, hessian + solve {t_dense:.2} s)",
        ravel(&small).numel()
    );
    assert!(gap < 1e-6, "influence scores from cg differ from the explicit Hessian solve by {gap:e} (relative)");

    // 2. Influence on a larger model trained on the whole training set.
    let t0 = Instant::now();
    let params = train(&[64, 32, 10], &train_x, &train_y, 30);
    let acc = accuracy(&params.forward(&test_x), &test_y).item_f64();
    println!(
        "trained a [64, 32, 10] MLP ({} parameters) on {} images in {:.1} s: test accuracy {:.1}%",
        ravel(&params).numel(),
        train_x.dim(0),
        t0.elapsed().as_secs_f64(),
        acc * 100.0
    );
    // the first misclassified test image, if any
    let wrong = params.forward(&test_x).argmax(-1).cast(DType::I32).ne(&test_y).cast(DType::I32).to_vec::<i32>();
    let i = wrong.iter().position(|&w| w == 1).unwrap_or(0) as isize;
    let (tx, ty) = (test_x.index(i), test_y.index(i));
    let logits = params.forward(&tx.unsqueeze(0));
    let pred = logits.argmax(-1).cast(DType::I32).item::<i32>();
    let test_loss = softmax_cross_entropy_per_example(&logits, &ty.unsqueeze(0)).item_f64();
    println!("test image {i}: label {}, predicted {pred}, loss {test_loss:.3}", ty.item::<i32>());

    let t0 = Instant::now();
    let (scores, residual) = influence_cg(&params, &train_x, &train_y, (&tx, &ty), 1e-6);
    println!(
        "influence of {} training images by cg on Hessian-vector products (damping {DAMPING}): {:.2} s, \
         relative residual {residual:.1e}",
        train_x.dim(0),
        t0.elapsed().as_secs_f64()
    );
    let s = scores.to_vec_f64();
    let mut order: Vec<usize> = (0..s.len()).collect();
    order.sort_by(|&a, &b| s[a].total_cmp(&s[b]));
    let labels = train_y.to_vec::<i32>();
    let show = |title: &str, idx: &[usize]| {
        println!("{title}");
        for &k in idx {
            println!("  train image {k:4}: label {}, score {:+.4e}", labels[k], s[k]);
        }
    };
    show("most helpful (upweighting lowers the test loss):", &order[..5]);
    show(
        "most harmful (upweighting raises the test loss):",
        &order[order.len() - 5..].iter().rev().copied().collect::<Vec<_>>(),
    );
    // the test image beside the most helpful and the most harmful
    let (best, worst) = (order[0], order[order.len() - 1]);
    let cols = [picture(&tx), picture(&train_x.index(best as isize)), picture(&train_x.index(worst as isize))];
    println!("test ({}), most helpful ({}), most harmful ({}):", ty.item::<i32>(), labels[best], labels[worst]);
    for r in 0..8 {
        println!("  |{}|   |{}|   |{}|", cols[0][r], cols[1][r], cols[2][r]);
    }
    println!("total {:.1} s", start.elapsed().as_secs_f64());
}
