//! Derivative checks against central finite differences.

use super::{index_str, values, CheckFailure};
use xform_ops::{DType, Key, Tensor};
use xform_transforms::{jvp, vjp, Leaves, Tree};

/// Which modes of differentiation to check.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Modes {
    /// Forward mode (jvp) only.
    Fwd,
    /// Reverse mode (vjp) only.
    Rev,
    /// Both.
    Both,
}

/// Step size and tolerances of [`check_grads_with`]; `None` picks them from
/// the inputs' dtype (f64: step 1e-5, tolerance 1e-6; f32: 1e-3 and 2e-2;
/// f16/bf16: 5e-2 and 2e-1).
#[derive(Clone, Debug, Default)]
pub struct GradCheckOptions {
    /// Finite-difference step.
    pub eps: Option<f64>,
    /// Absolute and relative tolerance.
    pub tol: Option<f64>,
    /// Seed of the random directions and cotangents.
    pub seed: u64,
    /// Inputs with at most this many elements in all are checked one
    /// coordinate at a time (exact Jacobian columns, and the error names the
    /// input element); larger ones along random directions. Default 64.
    pub per_element_limit: Option<usize>,
}

fn defaults(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-5, 1e-6),
        DType::F32 => (1e-3, 2e-2),
        _ => (5e-2, 2e-1),
    }
}

/// Checks the derivatives of `f` at `x` up to `order` in the given modes.
///
/// # Errors
/// The worst mismatch, naming the input and output elements.
pub fn check_grads<X: Tree, Y: Tree>(
    f: impl Fn(&X) -> Y,
    x: &X,
    order: usize,
    modes: Modes,
) -> Result<(), CheckFailure> {
    check_grads_with(f, x, order, modes, &GradCheckOptions::default())
}

/// [`check_grads`] with explicit step, tolerance and seed.
///
/// # Errors
/// The worst mismatch, naming the input and output elements.
pub fn check_grads_with<X: Tree, Y: Tree>(
    f: impl Fn(&X) -> Y,
    x: &X,
    order: usize,
    modes: Modes,
    opts: &GradCheckOptions,
) -> Result<(), CheckFailure> {
    check_order(&f, x, order, 1, modes, opts)
}

fn check_order<X: Tree, Y: Tree>(
    f: &dyn Fn(&X) -> Y,
    x: &X,
    order: usize,
    level: usize,
    modes: Modes,
    opts: &GradCheckOptions,
) -> Result<(), CheckFailure> {
    if order == 0 {
        return Ok(());
    }
    let leaves = x.leaves();
    let dtype = leaves.iter().map(|l| l.dtype()).find(|d| d.is_float()).unwrap_or(DType::F64);
    let (eps0, tol0) = defaults(dtype);
    let eps = opts.eps.unwrap_or(eps0);
    let tol = opts.tol.unwrap_or(tol0);
    let key = Key::new(opts.seed.wrapping_add(level as u64 * 7919));
    let dirs = directions(x, &leaves, opts.per_element_limit.unwrap_or(64), &key);
    let y0 = f(x);
    let out_paths = y0.paths();
    let y0l = y0.leaves();
    let cts: Vec<Tensor> = y0l.iter().enumerate().map(|(i, y)| rand_like(y, &key.fold_in(1000 + i as u32))).collect();
    let pullback = if modes != Modes::Fwd { Some(vjp(|x: &X| f(x), x).1) } else { None };
    let rev_grad: Option<Leaves> = pullback.as_ref().map(|pb| pb(&y0.with_leaves(cts.clone())).leaves());
    for (dir, label) in &dirs {
        let plus = x.with_leaves(leaves.iter().zip(dir).map(|(l, d)| axpy(l, d, eps)));
        let minus = x.with_leaves(leaves.iter().zip(dir).map(|(l, d)| axpy(l, d, -eps)));
        let (yp, ym) = (f(&plus).leaves(), f(&minus).leaves());
        let numeric: Vec<Vec<f64>> = yp
            .iter()
            .zip(&ym)
            .map(|(a, b)| values(a).iter().zip(values(b)).map(|(p, m)| (p - m) / (2.0 * eps)).collect())
            .collect();
        if modes != Modes::Rev {
            let (_, t) = jvp(|x: &X| f(x), x, &x.with_leaves(dir.clone()));
            for (j, (tj, nj)) in t.leaves().iter().zip(&numeric).enumerate() {
                if !y0l[j].dtype().is_float() {
                    continue;
                }
                let tv = values(tj);
                if let Some((k, g, e)) = worst(&tv, nj, tol) {
                    return Err(CheckFailure {
                        check: "forward mode (jvp vs finite differences)".into(),
                        location: format!("{label} -> output {}{}", out_paths[j], index_str(&tj.shape(), k)),
                        got: g,
                        expected: e,
                        tolerance: tol * (1.0 + e.abs()),
                        order: level,
                    });
                }
            }
        }
        if let Some(g) = &rev_grad {
            // <J^T ct, v> must equal <ct, J v>
            let lhs: f64 = g.iter().zip(dir).map(|(a, b)| dot(&values(a), &values(b))).sum();
            let rhs: f64 = cts.iter().zip(&numeric).map(|(c, n)| dot(&values(c), n)).sum();
            if (lhs - rhs).abs() > tol * (1.0 + rhs.abs()) {
                return Err(CheckFailure {
                    check: "reverse mode (vjp vs finite differences)".into(),
                    location: label.clone(),
                    got: lhs,
                    expected: rhs,
                    tolerance: tol * (1.0 + rhs.abs()),
                    order: level,
                });
            }
        }
    }
    if order > 1 {
        if modes != Modes::Rev {
            let v: Vec<Tensor> =
                leaves.iter().enumerate().map(|(i, l)| rand_like(l, &key.fold_in(2000 + i as u32))).collect();
            let vt = x.with_leaves(v);
            let df = move |x: &X| jvp(|x: &X| f(x), x, &vt).1;
            check_order(&df, x, order - 1, level + 1, modes, opts)?;
        }
        if modes != Modes::Fwd {
            let ct = y0.with_leaves(cts);
            let df = move |x: &X| vjp(|x: &X| f(x), x).1(&ct);
            check_order(&df, x, order - 1, level + 1, modes, opts)?;
        }
    }
    Ok(())
}

/// Basis directions (one per input element, labelled with it) for small
/// inputs, random ones for large.
fn directions<X: Tree>(x: &X, leaves: &[Tensor], limit: usize, key: &Key) -> Vec<(Vec<Tensor>, String)> {
    let paths = x.paths();
    let float: Vec<bool> = leaves.iter().map(|l| l.dtype().is_float()).collect();
    let total: usize = leaves.iter().zip(&float).filter(|(_, f)| **f).map(|(l, _)| l.numel()).sum();
    if total <= limit {
        let mut dirs = Vec::new();
        for (i, l) in leaves.iter().enumerate() {
            if !float[i] {
                continue;
            }
            for k in 0..l.numel() {
                let dir: Vec<Tensor> = leaves
                    .iter()
                    .enumerate()
                    .map(|(j, m)| {
                        if j == i {
                            let mut v = vec![0.0f64; m.numel()];
                            v[k] = 1.0;
                            Tensor::from_vec(v, m.shape()).cast(m.dtype()).to_device(m.device())
                        } else {
                            m.zeros_like()
                        }
                    })
                    .collect();
                dirs.push((dir, format!("input {}{}", paths[i], index_str(&l.shape(), k))));
            }
        }
        dirs
    } else {
        (0..3)
            .map(|d| {
                let dir: Vec<Tensor> =
                    leaves.iter().enumerate().map(|(j, l)| rand_like(l, &key.fold_in(d * 100 + j as u32))).collect();
                (dir, format!("random direction {d}"))
            })
            .collect()
    }
}

fn rand_like(l: &Tensor, key: &Key) -> Tensor {
    if l.dtype().is_float() {
        key.normal(l.shape(), l.dtype()).to_device(l.device())
    } else {
        l.zeros_like()
    }
}

fn axpy(x: &Tensor, d: &Tensor, eps: f64) -> Tensor {
    if x.dtype().is_float() {
        x + &(d * eps)
    } else {
        x.clone()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The element whose mismatch most exceeds `tol * (1 + |expected|)`.
fn worst(got: &[f64], expected: &[f64], tol: f64) -> Option<(usize, f64, f64)> {
    let mut best: Option<(usize, f64, f64, f64)> = None;
    for (k, (g, e)) in got.iter().zip(expected).enumerate() {
        let excess = (g - e).abs() / (tol * (1.0 + e.abs()));
        let bad = excess > 1.0 || g.is_nan() != e.is_nan();
        if bad && best.is_none_or(|b| excess > b.3) {
            best = Some((k, *g, *e, excess));
        }
    }
    best.map(|(k, g, e, _)| (k, g, e))
}

/// Checks the transpose identity `<ct, J t> = <J^T ct, t>` for `f` at
/// `example`, with random `t` and `ct`: `J t` comes from forward mode and
/// `J^T ct` from reverse mode (for a linear `f`, `J t = f(t)`). This is the
/// defining property of a correct transpose rule.
///
/// # Errors
/// If the two inner products differ by more than the dtypes' tolerance.
pub fn check_transpose<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, example: &X) -> Result<(), CheckFailure> {
    let key = Key::new(17);
    let leaves = example.leaves();
    let t: Vec<Tensor> = leaves.iter().enumerate().map(|(i, l)| rand_like(l, &key.fold_in(i as u32))).collect();
    let tt = example.with_leaves(t.clone());
    let (y, jt) = jvp(&f, example, &tt);
    let (_, pullback) = vjp(&f, example);
    let yl = y.leaves();
    let cts: Vec<Tensor> = yl.iter().enumerate().map(|(i, l)| rand_like(l, &key.fold_in(500 + i as u32))).collect();
    let g = pullback(&y.with_leaves(cts.clone())).leaves();
    let lhs: f64 = cts.iter().zip(&jt.leaves()).map(|(c, y)| dot(&values(c), &values(y))).sum();
    let rhs: f64 = g.iter().zip(&t).map(|(a, b)| dot(&values(a), &values(b))).sum();
    // The coarsest dtype involved sets the tolerance (a conversion to a
    // narrower type rounds its output).
    let tol = leaves.iter().chain(&yl).map(|l| super::default_tolerance(l.dtype())).fold(1e-12, f64::max) * 10.0;
    let scale = 1.0 + lhs.abs().max(rhs.abs());
    if (lhs - rhs).abs() > tol * scale {
        return Err(CheckFailure {
            check: "transpose identity <ct, J t> = <J^T ct, t>".into(),
            location: "random t and ct".into(),
            got: rhs,
            expected: lhs,
            tolerance: tol * scale,
            order: 1,
        });
    }
    Ok(())
}
