//! in_axes and out_axes as tree prefixes at any depth (JAX's semantics),
//! in the concise spelling and the builder.

use crate::harness::{assert_close as close, v};
use xform::prelude::*;
use xform::{Axes, VmapOptions};

#[derive(Clone)]
struct Layer {
    w: Tensor,
    b: Tensor,
}
impl_tree!(Layer { w, b });

#[test]
fn a_prefix_at_a_subtree_applies_to_all_its_leaves() {
    let w = Key::new(1).normal([3], DType::F64);
    let xs = Key::new(2).normal([4, 3], DType::F64);
    let ys = Key::new(3).normal([3, 4], DType::F64);
    // (w, (x, y)): w shared, x over axis 0, y over its last axis.
    let f = |(w, (x, y)): &(Tensor, (Tensor, Tensor))| (w * x * y).sum();
    let out = vmap_axes(f, (None, (0, -1)), 0)(&(w.clone(), (xs.clone(), ys.clone())));
    let want: Vec<f64> = (0..4)
        .map(|i| v(&(&w * xs.narrow(0, i, 1).reshape(&[3]) * ys.narrow(1, i, 1).reshape(&[3])).sum())[0])
        .collect();
    close(&v(&out), &want, 1e-14);
    // A single entry for a subtree maps every leaf in it.
    let g = |(w, (x, y)): &(Tensor, (Tensor, Tensor))| (w * x).sum() + y.sum();
    let out = vmap_axes(g, (None, 0), 0)(&(w.clone(), (xs.clone(), ys.t().copy())));
    assert_eq!(out.shape().dims(), &[4]);
}

#[test]
fn struct_fields_by_position_or_by_name_and_option_children() {
    let layer = Layer { w: Key::new(4).normal([5, 3, 2], DType::F64), b: Key::new(5).normal([2], DType::F64) };
    let x = Key::new(6).normal([3], DType::F64);
    let f = |(l, x): &(Layer, Tensor)| x.matmul(&l.w) + &l.b;
    // An ensemble of 5 weight matrices sharing one bias and one input.
    let by_position = vmap_axes(f, ((0, None), None), 0)(&(layer.clone(), x.clone()));
    let by_name = vmap_with(
        f,
        VmapOptions::new().in_axes((Axes::fields([("w", Axes::from(0)), ("b", Axes::All(None))]), None)),
    )(&(layer.clone(), x.clone()));
    assert_eq!(by_position.shape().dims(), &[5, 2]);
    close(&v(&by_position), &v(&by_name), 0.0);
    for i in 0..5 {
        let one = Layer { w: layer.w.narrow(0, i, 1).reshape(&[3, 2]), b: layer.b.clone() };
        close(&v(&by_position.narrow(0, i, 1)), &v(&f(&(one, x.clone()))), 1e-14);
    }
    // A None child is an empty subtree: the prefix still has its entry.
    let h = |(a, _, c): &(Tensor, Option<Tensor>, Tensor)| a + c;
    let a = Tensor::ones([2, 3], DType::F64);
    let out = vmap_axes(h, (0, None, 1), 0)(&(a.clone(), None, a.t().copy()));
    assert_eq!(out.shape().dims(), &[2, 3]);
}

#[test]
fn out_axes_prefix_and_the_builder() {
    let xs = Key::new(7).normal([4, 3], DType::F64);
    let f = |x: &Tensor| (x * 2.0, (x.sum(), x.clone()));
    let (a, (s, c)) = vmap_with(f, VmapOptions::new().out_axes((1, (0, -1))).chunk_size(3))(&xs);
    assert_eq!(a.shape().dims(), &[3, 4]);
    assert_eq!(s.shape().dims(), &[4]);
    assert_eq!(c.shape().dims(), &[3, 4]);
    close(&v(&a), &v(&(xs.t() * 2.0)), 0.0);
    // Unbatched outputs with out_axes None come back as they are.
    let w = Tensor::ones([2], DType::F64);
    let (k, y) = vmap_axes(|(w, x): &(Tensor, Tensor)| (w * 3.0, x.sum()), (None, 0), (None, 0))(&(w, xs.clone()));
    close(&v(&k), &[3.0, 3.0], 0.0);
    assert_eq!(y.shape().dims(), &[4]);
}

#[test]
fn prefixes_that_do_not_fit_name_the_path() {
    let x = Tensor::zeros([3, 2], DType::F32);
    let f = |(a, (b, c)): &(Tensor, (Tensor, Tensor))| a + b + c;
    let arg = (x.clone(), (x.clone(), x.clone()));
    let e = catch(|| vmap_axes(f, (0, (0, 0, 0)), 0)(&arg)).unwrap_err();
    assert!(e.to_string().contains("the prefix has 3 entries at .1, where the tree has 2 children (.0, .1)"), "{e}");
    let e = catch(|| vmap_axes(f, ((0, 0), 0), 0)(&arg)).unwrap_err();
    assert!(e.to_string().contains("the prefix has children at .0, where the tree has a leaf"), "{e}");
    let e = catch(|| vmap_axes(f, (0, (0, 5)), 0)(&arg)).unwrap_err();
    assert!(e.to_string().contains("in_axes 5 is out of range for argument .1.1 of shape [3, 2]"), "{e}");
    let e = catch(|| vmap_axes(f, (0, (0, -1)), 0)(&arg)).unwrap_err();
    assert!(e.to_string().contains("inconsistent batch sizes along the mapped axes (.0: 3, .1.0: 3, .1.1: 2)"), "{e}");
    let layer = Layer { w: x.clone(), b: x.clone() };
    let e = catch(|| {
        vmap_with(|l: &Layer| &l.w + &l.b, VmapOptions::new().in_axes(Axes::fields([("w", Axes::from(0))])))(&layer)
    })
    .unwrap_err();
    assert!(e.to_string().contains("names some children but not .b"), "{e}");
    let e = catch(|| vmap_axes(|a: &Tensor| (a * 2.0, a.sum()), 0, (0, 0, 0))(&x)).unwrap_err();
    assert!(e.to_string().contains("out_axes does not fit the tree"), "{e}");
    // a chunk of no examples is refused (torch.func: chunk_size=0 is a ValueError)
    let e = catch(|| vmap_with(|a: &Tensor| a * 2.0, VmapOptions::new().chunk_size(0))(&x)).unwrap_err();
    assert!(e.to_string().contains("chunk_size must be at least 1"), "{e}");
}
