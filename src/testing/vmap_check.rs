//! `vmap(f)` against a loop over the examples.

use super::{default_tolerance, index_str, values, CheckFailure};
use xform_ops::Tensor;
use xform_transforms::{vmap_with, Axes, Tree, VmapOptions};

/// Checks that `vmap_with(f, in_axes)(x)` equals stacking `f` applied to
/// each example (outputs batched along axis 0).
///
/// # Errors
/// The worst mismatch, naming the example, output leaf and element.
pub fn check_vmap<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, x: &X, in_axes: Axes) -> Result<(), CheckFailure> {
    let opts = VmapOptions { in_axes: in_axes.clone(), ..Default::default() };
    let batched = vmap_with(&f, opts)(x);
    let leaves = x.leaves();
    let paths = x.paths();
    // Resolve the axes the same way vmap does: through a probe tree of ranks.
    let axes = resolve(&in_axes, &paths, &leaves);
    let size = leaves.iter().zip(&axes).find_map(|(l, a)| a.map(|a| l.shape()[a])).unwrap_or(0);
    let out_paths = batched.paths();
    let outs = batched.leaves();
    for i in 0..size {
        let xi: Vec<Tensor> = leaves
            .iter()
            .zip(&axes)
            .map(|(l, a)| a.map_or_else(|| l.clone(), |a| l.select(a as isize, i as isize)))
            .collect();
        let yi = f(&x.with_leaves(xi)).leaves();
        for (j, (o, y)) in outs.iter().zip(&yi).enumerate() {
            let got = values(&o.select(0, i as isize));
            let want = values(y);
            let tol = default_tolerance(y.dtype());
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
                if !ok {
                    return Err(CheckFailure {
                        check: "vmap (batched vs loop)".into(),
                        location: format!("example {i}, output {}{}", out_paths[j], index_str(&y.shape(), k)),
                        got: *g,
                        expected: *w,
                        tolerance: tol * (1.0 + w.abs()),
                        order: 0,
                    });
                }
            }
        }
    }
    Ok(())
}

fn resolve(spec: &Axes, paths: &[String], leaves: &[Tensor]) -> Vec<Option<usize>> {
    let norm =
        |a: Option<isize>, l: &Tensor| a.map(|a| if a < 0 { (a + l.rank() as isize) as usize } else { a as usize });
    match spec {
        Axes::Zero => leaves.iter().map(|_| Some(0)).collect(),
        Axes::All(a) => leaves.iter().map(|l| norm(*a, l)).collect(),
        Axes::Leaves(v) => v.iter().zip(leaves).map(|(a, l)| norm(*a, l)).collect(),
        Axes::Args(v) => {
            let top = |p: &str| -> String {
                let rest = &p[1.min(p.len())..];
                let end = rest.find(['.', '[']).map_or(p.len(), |i| i + 1);
                p[..end].to_string()
            };
            let mut k = 0;
            let mut last: Option<String> = None;
            paths
                .iter()
                .zip(leaves)
                .map(|(p, l)| {
                    let t = top(p);
                    if let Some(prev) = &last {
                        if *prev != t {
                            k += 1;
                        }
                    }
                    last = Some(t);
                    norm(v[k], l)
                })
                .collect()
        }
    }
}
