//! `vmap(f)` against a loop over the examples.

use super::{default_tolerance, index_str, values, CheckFailure};
use xform_ops::{OrRaise, Tensor};
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
    // The axes resolved as vmap resolves them.
    let axes = resolve(&in_axes, x, &leaves);
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

fn resolve<X: Tree>(spec: &Axes, x: &X, leaves: &[Tensor]) -> Vec<Option<usize>> {
    let axes = spec.per_leaf(x).or_raise();
    axes.iter()
        .zip(leaves)
        .map(|(a, l)| a.map(|a| if a < 0 { (a + l.rank() as isize) as usize } else { a as usize }))
        .collect()
}
