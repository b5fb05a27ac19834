//! Gaussian-process regression whose kernel hyperparameters are learned by
//! gradients of the log marginal likelihood, through `linalg::cholesky`
//! and `linalg::cho_solve`, from several starting points at once (`vmap`
//! over the starts: every start's likelihood, gradient and step in one
//! batched computation).
//!
//! The kernel is the squared exponential with a signal variance and a
//! noise variance, `k(x, x') = s² exp(-(x - x')² / (2 l²)) + σ² [x = x']`,
//! over `θ = (log l, log s, log σ)`. The negative log marginal likelihood
//! is `½ yᵀ K⁻¹ y + Σ log diag L + n/2 log 2π` with `K = L Lᵀ`. Its
//! gradient is checked against central finite differences first.
//!
//! Run: `cargo run --release --example gp_regression`

use xform::linalg;
use xform::prelude::*;

const N: usize = 40;

/// The kernel matrix of the training inputs for hyperparameters `theta`.
fn kernel(theta: &Tensor, x: &Tensor) -> Tensor {
    let (l, s, noise) = (theta.select(0, 0), theta.select(0, 1), theta.select(0, 2));
    let d = &x.unsqueeze(1) - &x.unsqueeze(0);
    let k = (&(&d * &d) * &(l * -2.0).exp() * -0.5).exp() * (s * 2.0).exp();
    &k + &(Tensor::eye(x.shape()[0], x.dtype()) * (noise * 2.0).exp())
}

/// The negative log marginal likelihood of `y` at `x`.
fn nll(theta: &Tensor, x: &Tensor, y: &Tensor) -> Tensor {
    let c = linalg::cholesky(&kernel(theta, x)).or_raise();
    let alpha = linalg::cho_solve(&c, true, y).or_raise();
    let fit = (y * &alpha).sum() * 0.5;
    let complexity = linalg::diagonal(&c).or_raise().log().sum();
    fit + complexity + 0.5 * N as f64 * (2.0 * std::f64::consts::PI).ln()
}

/// The posterior mean at `xs` given the training data.
fn predict(theta: &Tensor, x: &Tensor, y: &Tensor, xs: &Tensor) -> Tensor {
    let (l, s) = (theta.select(0, 0), theta.select(0, 1));
    let c = linalg::cholesky(&kernel(theta, x)).or_raise();
    let alpha = linalg::cho_solve(&c, true, y).or_raise();
    let d = &xs.unsqueeze(1) - &x.unsqueeze(0);
    let ks = (&(&d * &d) * &(l * -2.0).exp() * -0.5).exp() * (s * 2.0).exp();
    ks.matmul(&alpha.unsqueeze(1)).squeeze(1)
}

fn main() {
    let key = Key::new(0);
    let x = key.uniform_range([N], 0.0, 6.0, DType::F64);
    let y = &x.sin() + &(key.fold_in(1).normal([N], DType::F64) * 0.1);
    let loss = |theta: &Tensor| nll(theta, &x, &y);

    // the gradient against central finite differences
    let theta0 = Tensor::from_vec(vec![0.5f64, 0.0, -1.0], [3]);
    let g = grad(loss)(&theta0).to_vec_f64();
    for (i, gi) in g.iter().enumerate() {
        let h = 1e-5;
        let bump = |v: f64| {
            let mut t = theta0.to_vec_f64();
            t[i] += v;
            loss(&Tensor::from_vec(t, [3])).item_f64()
        };
        let fd = (bump(h) - bump(-h)) / (2.0 * h);
        let rel = (gi - fd).abs() / fd.abs().max(1.0);
        println!("dNLL/dθ{i}: {gi:+.8} (finite differences {fd:+.8}, relative gap {rel:.1e})");
        assert!(rel < 1e-6, "the gradient disagrees with finite differences");
    }

    // several starts, trained together: vmap over the starts
    let starts = Tensor::from_vec(vec![0.5f64, 0.0, -1.0, -1.0, 1.0, -2.0, 1.5, -0.5, 0.0, 0.0, 0.5, -3.0], [4, 3]);
    let value_and_grad_all = vmap(|t: &Tensor| {
        let (v, g) = value_and_grad(loss)(t);
        Tensor::concat(&[v.unsqueeze(0), g], 0)
    });
    let mut thetas = starts.clone();
    let first = value_and_grad_all(&thetas).narrow(1, 0, 1).to_vec_f64();
    let lr = 0.01;
    for _ in 0..300 {
        let vg = value_and_grad_all(&thetas);
        thetas = &thetas - &(vg.narrow(1, 1, 3) * lr);
    }
    let last = value_and_grad_all(&thetas).narrow(1, 0, 1).to_vec_f64();
    for (k, (a, b)) in first.iter().zip(&last).enumerate() {
        println!("start {k}: NLL {a:8.3} -> {b:8.3}, θ = {:?}", thetas.select(0, k as isize).to_vec_f64());
        assert!(b < a, "training did not lower start {k}'s NLL");
    }
    let best = last.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).map(|(k, _)| k).unwrap_or(0);
    let theta = thetas.select(0, best as isize);
    let xs = Tensor::linspace(0.5, 5.5, 11, DType::F64);
    let mean = predict(&theta, &x, &y, &xs);
    let rmse = ((&mean - &xs.sin()).powi(2).mean()).sqrt().item_f64();
    println!("best start {best}: posterior mean vs sin at 11 test points, RMSE {rmse:.3}");
    assert!(rmse < 0.15, "the fit is poor: RMSE {rmse}");
}
