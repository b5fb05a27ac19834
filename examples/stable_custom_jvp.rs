//! Numerically stable derivatives with `custom_jvp`.
//!
//! Two functions whose automatic derivatives go wrong where the function
//! itself is fine:
//!
//! - softplus `log(1 + exp(x))`: written naively, `exp` overflows for large
//!   `x` and the derivative `exp(x) / (1 + exp(x))` is `inf / inf = NaN`.
//!   The stable rewrite `max(x, 0) + log1p(exp(-|x|))` has finite
//!   derivatives, but at the kink `x = 0` they are the one-sided
//!   conventions of `max` and `abs` and add up to 0, not 1/2.
//!   A custom JVP rule says what the derivative is: `sigmoid(x) * t`.
//! - `safe_norm(x) = |x|`: the derivative of `sqrt(sum x^2)` at `x = 0` is
//!   `(1 / 2 sqrt(0)) * 2x = inf * 0 = NaN`, which poisons a whole
//!   training step. The rule gives `x.t / |x|` and 0 at the origin (the
//!   subgradient of least norm).
//!
//! The rules are used by grad (reverse mode transposes their tangent
//! part), jvp, vmap of grad, and hessian (forward over reverse, which
//! differentiates the rule itself); every result is compared with a
//! closed form.
//!
//! Run: `cargo run --release --example stable_custom_jvp`

use xform::prelude::*;

/// The points every check runs at: both overflow regimes and the kink.
const XS: [f64; 9] = [-1000.0, -40.0, -1.0, -1e-8, 0.0, 1e-8, 1.0, 40.0, 1000.0];
/// Relative tolerance of the f64 comparisons with the closed forms.
const TOL: f64 = 1e-12;

/// softplus as written in a paper: overflows for x > ~709 (f64).
fn softplus_naive(x: &Tensor) -> Tensor {
    x.exp().log1p()
}

/// The usual stable rewrite: finite everywhere, derivative 0 at x = 0.
fn softplus_rewrite(x: &Tensor) -> Tensor {
    x.relu() + (-x.abs()).exp().log1p()
}

/// The stable value with the derivative stated once: `sigmoid(x) * t`.
fn softplus(x: &Tensor) -> Tensor {
    custom_jvp(softplus_rewrite, |x: &Tensor, t: &Tensor| (softplus_rewrite(x), x.sigmoid() * t)).call(x)
}

/// `sqrt(sum x^2)`, differentiated naively: NaN at the origin.
fn norm_naive(x: &Tensor) -> Tensor {
    (x * x).sum().sqrt()
}

/// `|x|` whose derivative at the origin is 0.
fn safe_norm(x: &Tensor) -> Tensor {
    custom_jvp(norm_naive, |x: &Tensor, t: &Tensor| {
        let y = norm_naive(x);
        let nonzero = y.gt_scalar(0.0);
        // Divide by 1 where y = 0 so that no 0/0 enters the program (a NaN
        // in an unselected branch still turns into NaN in a transpose).
        let denom = Tensor::where_(&nonzero, &y, &y.ones_like());
        let ty = (x * t).sum() / denom;
        (y.clone(), Tensor::where_(&nonzero, &ty, &ty.zeros_like()))
    })
    .call(x)
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        x.exp() / (1.0 + x.exp())
    }
}

fn softplus_exact(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// Largest relative difference `|a - b| / max(1, |b|)`; NaN if any is NaN.
fn max_rel_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(g, w)| (g - w).abs() / w.abs().max(1.0)).fold(0.0, |m, e| {
        if e.is_nan() {
            f64::NAN
        } else {
            m.max(e)
        }
    })
}

fn show(name: &str, v: &[f64]) {
    let cells: Vec<String> = v.iter().map(|x| format!("{x:>9.4}")).collect();
    println!("  {name:<28}{}", cells.join(" "));
}

fn main() {
    let xs = Tensor::from_vec(XS.to_vec(), [XS.len()]);
    let d1: Vec<f64> = XS.iter().map(|&x| sigmoid(x)).collect();
    let d2: Vec<f64> = XS.iter().map(|&x| sigmoid(x) * (1.0 - sigmoid(x))).collect();
    let values: Vec<f64> = XS.iter().map(|&x| softplus_exact(x)).collect();

    // --- softplus ---------------------------------------------------------
    println!("softplus(x) = log(1 + exp(x)), its derivative sigmoid(x), f64");
    show("x", &XS);
    let per_point = |f: fn(&Tensor) -> Tensor| vmap(grad(f))(&xs).to_vec::<f64>();
    let naive_g = per_point(softplus_naive);
    let rewrite_g = per_point(softplus_rewrite);
    let custom_g = per_point(softplus);
    show("naive value", &softplus_naive(&xs).to_vec::<f64>());
    show("custom_jvp value", &softplus(&xs).to_vec::<f64>());
    show("naive grad", &naive_g);
    show("rewrite grad", &rewrite_g);
    show("custom_jvp grad", &custom_g);
    show("sigmoid(x) (exact)", &d1);
    assert!(naive_g.last().unwrap().is_nan(), "the naive derivative at x = 1000 should be NaN (inf / inf)");
    let kink = XS.iter().position(|&x| x == 0.0).unwrap();
    assert_eq!(rewrite_g[kink], 0.0, "the rewrite's derivative at the kink is the sum of one-sided conventions");
    assert!(max_rel_err(&softplus(&xs).to_vec::<f64>(), &values) < TOL);
    let e_grad = max_rel_err(&custom_g, &d1);
    println!("  vmap(grad) vs sigmoid: max error {e_grad:.1e}");
    assert!(e_grad < TOL, "custom_jvp softplus: vmap(grad) differs from sigmoid");

    // Forward mode uses the rule directly.
    let t = Tensor::from_vec((1..=XS.len()).map(|i| i as f64 * 0.5).collect::<Vec<_>>(), [XS.len()]);
    let (_, tangent) = jvp(softplus, &xs, &t);
    let want: Vec<f64> = d1.iter().zip(t.to_vec::<f64>()).map(|(d, t)| d * t).collect();
    let e_jvp = max_rel_err(&tangent.to_vec::<f64>(), &want);
    println!("  jvp tangent vs sigmoid(x) t: max error {e_jvp:.1e}");
    assert!(e_jvp < TOL);

    // Second derivatives differentiate the rule: sigmoid' = s (1 - s).
    let h = hessian(|x: &Tensor| softplus(x).sum())(&xs);
    let diag: Vec<f64> = (0..XS.len() as isize).map(|i| h.index(i).index(i).item_f64()).collect();
    let off_diag = (&h * (1.0 - Tensor::eye(XS.len(), DType::F64))).abs().max().item_f64();
    let gg = vmap(grad(grad(softplus)))(&xs).to_vec::<f64>();
    show("hessian diagonal", &diag);
    show("s (1 - s) (exact)", &d2);
    let (e_h, e_gg) = (max_rel_err(&diag, &d2), max_rel_err(&gg, &d2));
    println!("  hessian: diagonal max error {e_h:.1e}, off-diagonal max |h| {off_diag:.1e}");
    println!("  vmap(grad(grad)): max error {e_gg:.1e}");
    assert!(e_h < TOL && off_diag == 0.0 && e_gg < TOL, "second derivatives of the custom_jvp softplus");

    // --- safe_norm --------------------------------------------------------
    println!("\nsafe_norm(x) = |x|, its gradient x / |x| (0 at the origin), f64");
    let rows = Tensor::from_vec(vec![3.0f64, 4.0, 0.0, 0.0, -5.0, 12.0, 0.6, -0.8], [4, 2]);
    let naive = vmap(grad(norm_naive))(&rows).to_vec::<f64>();
    let safe = vmap(grad(safe_norm))(&rows).to_vec::<f64>();
    let r = rows.to_vec::<f64>();
    let mut want = Vec::new();
    for p in r.chunks(2) {
        let n = p[0].hypot(p[1]);
        want.extend(p.iter().map(|v| if n > 0.0 { v / n } else { 0.0 }));
    }
    println!("  rows             {:?}", r);
    println!("  naive grads      {:?}", naive);
    println!("  safe_norm grads  {:?}", safe);
    assert!(naive[2].is_nan() && naive[3].is_nan(), "the naive gradient at the origin should be NaN");
    let e_norm = max_rel_err(&safe, &want);
    println!("  safe_norm vs x / |x|: max error {e_norm:.1e}");
    assert!(e_norm < TOL, "safe_norm gradient differs from x / |x|");
    assert!(safe.iter().all(|v| v.is_finite()), "safe_norm gradients must be finite");

    // The hessian at a nonzero point is (I - u u^T) / |x|, u = x / |x|;
    // at the origin the rule's derivative is 0, and the naive one NaN.
    let x = Tensor::from_vec(vec![1.0f64, -2.0, 2.0], [3]);
    let h = hessian(safe_norm)(&x).to_vec::<f64>();
    let xv = x.to_vec::<f64>();
    let n = 3.0;
    let want: Vec<f64> =
        (0..9).map(|k| ((k / 3 == k % 3) as i32 as f64 - xv[k / 3] * xv[k % 3] / (n * n)) / n).collect();
    let e_hn = max_rel_err(&h, &want);
    let h0 = hessian(safe_norm)(&x.zeros_like()).to_vec::<f64>();
    let h0_naive = hessian(norm_naive)(&x.zeros_like()).to_vec::<f64>();
    println!("  hessian at (1, -2, 2) vs (I - u u^T) / |x|: max error {e_hn:.1e}");
    println!("  hessian at the origin: safe_norm {h0:?}");
    println!("                         naive     {h0_naive:?}");
    assert!(e_hn < TOL, "safe_norm hessian differs from the closed form");
    // JAX 0.10 (jax.hessian of the same custom_jvp) gives zeros and NaNs.
    assert!(h0.iter().all(|&v| v == 0.0), "safe_norm's hessian at the origin should be 0");
    assert!(h0_naive.iter().all(|v| v.is_nan()), "the naive hessian at the origin should be NaN");
    println!("\nall checks passed");
}
