//! `xform::tree`: flatten/unflatten, maps, reductions and arithmetic over
//! pytrees, eagerly and under transforms, with JAX's and optax's values.

use std::collections::BTreeMap;
use xform::nn::{Linear, Mlp};
use xform::prelude::*;
use xform::tree::{self, Skeleton};
use xform::{catch, ErrorKind};

fn v64(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), [v.len()])
}

fn sample() -> (Tensor, Vec<Tensor>, BTreeMap<String, Tensor>) {
    let mut m = BTreeMap::new();
    m.insert("k".to_string(), v64(&[-4.0]));
    (v64(&[1.0, 2.0]), vec![v64(&[3.0]), Tensor::scalar(0.5f64)], m)
}

#[test]
fn flatten_unflatten_paths_and_structure() {
    let t = sample();
    let (leaves, def) = tree::flatten(&t);
    assert_eq!(leaves.len(), 4);
    assert_eq!(def.num_leaves(), 4);
    assert_eq!(def.paths(), vec![".0", ".1[0]", ".1[1]", ".2[\"k\"]"]);
    assert_eq!(def.skeleton(), tree::structure(&t));
    let back = tree::unflatten(&def, leaves.iter().map(|l| l * 3.0));
    assert_eq!(back.0.to_vec::<f64>(), vec![3.0, 6.0]);
    assert_eq!(back.2["k"].to_vec::<f64>(), vec![-12.0]);
    let e = catch(|| tree::unflatten(&def, leaves.iter().take(3).cloned())).unwrap_err();
    assert!(e.to_string().contains("4 leaves, 3 were given"), "{e}");
    let named = tree::leaves_with_path(&t);
    assert_eq!(named[3].0, ".2[\"k\"]");
    assert_eq!(named[3].1.to_vec::<f64>(), vec![-4.0]);
    assert_eq!(tree::num_leaves(&t), 4);
    let Skeleton::Node(children) = tree::structure(&t) else { panic!("a node") };
    assert_eq!(children.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec![".0", ".1", ".2"]);
}

#[test]
fn maps_and_reduce() {
    let t = sample();
    let sq = tree::map(&t, |x| x * x);
    assert_eq!(sq.1[0].to_vec::<f64>(), vec![9.0]);
    let d = tree::map2(&t, &sq, |a, b| b - a);
    assert_eq!(d.0.to_vec::<f64>(), vec![0.0, 2.0]);
    let m3 = tree::map3(&t, &sq, &d, |a, b, c| a + &(b * c));
    assert_eq!(m3.2["k"].to_vec::<f64>(), vec![-4.0 + 16.0 * 20.0]);
    let tagged = tree::map_with_path(&t, |p, x| if p.starts_with(".1") { x.zeros_like() } else { x.clone() });
    assert_eq!((tagged.1[0].to_vec::<f64>(), tagged.0.to_vec::<f64>()), (vec![0.0], vec![1.0, 2.0]));
    let total_elems = tree::reduce(&t, 0usize, |n, l| n + l.numel());
    assert_eq!(total_elems, tree::numel(&t));
    assert_eq!(total_elems, 5);
    let e = catch(|| tree::map2(&t, &(v64(&[1.0]), vec![], BTreeMap::new()), |a, _| a.clone())).unwrap_err();
    assert!(e.to_string().contains("different structure"), "{e}");
}

#[test]
fn reductions_match_optax() {
    // optax.tree_utils on the same tree: tree_sum 2.5, tree_max 3, tree_min -4,
    // tree_l2_norm sqrt(1 + 4 + 9 + 0.25 + 16), tree_vdot(t, t) = 30.25.
    let t = sample();
    assert_eq!(tree::sum(&t).item::<f64>(), 2.5);
    assert_eq!(tree::max(&t).item::<f64>(), 3.0);
    assert_eq!(tree::min(&t).item::<f64>(), -4.0);
    assert_eq!(tree::dot(&t, &t).item::<f64>(), 30.25);
    assert_eq!(tree::norm(&t).item::<f64>(), 30.25f64.sqrt());
    assert_eq!(tree::sum(&()).item::<f32>(), 0.0);
    assert!(catch(|| tree::max(&())).is_err());
    // Under vmap: one norm per stacked example.
    let models: Vec<Linear> =
        (0..3).map(|i| Linear { w: Tensor::full([2, 2], i as f64, DType::F64), b: v64(&[1.0, i as f64]) }).collect();
    let norms = vmap(|m: &Linear| tree::norm(m))(&tree::stack(&models));
    let expect: Vec<f64> = (0..3).map(|i| (4.0 * (i * i) as f64 + 1.0 + (i * i) as f64).sqrt()).collect();
    for (n, e) in norms.to_vec::<f64>().iter().zip(&expect) {
        assert!((n - e).abs() < 1e-15, "{n} vs {e}");
    }
    // grad of a reduction: d/dt (t . t) = 2t.
    let g = grad(|t: &(Tensor, Vec<Tensor>, BTreeMap<String, Tensor>)| tree::dot(t, t))(&t);
    assert!(tree::all_close(&g, &tree::scale(&t, 2.0), 0.0, 0.0));
}

#[test]
fn arithmetic_for_optimizers() {
    let t = sample();
    let ones = tree::ones_like(&t);
    assert_eq!(tree::add(&t, &ones).0.to_vec::<f64>(), vec![2.0, 3.0]);
    assert_eq!(tree::sub(&t, &ones).1[1].item::<f64>(), -0.5);
    assert_eq!(tree::mul(&t, &t).2["k"].to_vec::<f64>(), vec![16.0]);
    assert_eq!(tree::div(&ones, &t).1[1].item::<f64>(), 2.0);
    assert_eq!(tree::scale(&t, -2.0).0.to_vec::<f64>(), vec![-2.0, -4.0]);
    // A gradient step p - 0.1 g, as optax.tree_add_scalar_mul(p, -0.1, g).
    assert_eq!(tree::axpy(-0.1, &ones, &t).1[0].to_vec::<f64>(), vec![2.9]);
    assert_eq!(tree::lerp(&t, &ones, 0.25).2["k"].to_vec::<f64>(), vec![-4.0 + 0.25 * 5.0]);
    assert_eq!(tree::average(&[t.clone(), ones.clone(), ones]).0.to_vec::<f64>(), vec![1.0, 4.0 / 3.0]);
    assert_eq!(tree::zeros_like(&t).0.to_vec::<f64>(), vec![0.0, 0.0]);
    assert_eq!(tree::full_like(&t, 7.0).1[1].item::<f64>(), 7.0);
    let c = tree::cast(&(t.0.clone(), Tensor::scalar(3i32)), DType::F32);
    assert_eq!((c.0.dtype(), c.1.dtype()), (DType::F32, DType::I32));
    // Shapes must agree leaf by leaf, and the error names the leaf.
    let other = (v64(&[1.0, 2.0, 3.0]), t.1.clone(), t.2.clone());
    let e = catch(|| tree::add(&t, &other)).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Shape { .. }) && e.to_string().contains("leaf .0"), "{e}");
    // all_close: numpy's allclose, equal infinities close, NaN never.
    let inf = (v64(&[f64::INFINITY]), v64(&[1.0]));
    assert!(tree::all_close(&inf, &inf, 0.0, 0.0));
    assert!(!tree::all_close(&(v64(&[f64::NAN]), v64(&[1.0])), &(v64(&[f64::NAN]), v64(&[1.0])), 1.0, 1.0));
    assert!(tree::all_close(&v64(&[1.0]), &v64(&[1.0 + 1e-9]), 1e-8, 0.0));
    assert!(!tree::all_close(&v64(&[1.0]), &v64(&[1.0 + 1e-7]), 1e-8, 0.0));
}

#[test]
fn stack_unstack_and_the_nn_names() {
    let models: Vec<Mlp> = Key::new(0).split(4).iter().map(|k| Mlp::init(k, &[3, 5, 2], DType::F32)).collect();
    let s = tree::stack(&models);
    assert_eq!(s.layers[0].w.shape().dims(), &[4, 3, 5]);
    let back = tree::unstack(&s);
    assert_eq!(back.len(), 4);
    assert!(tree::all_close(&back[2], &models[2], 0.0, 0.0));
    // The names nn had before xform::tree are the same functions.
    let a = xform::nn::tree_map(&models[0], |x| x * 2.0);
    assert!(tree::all_close(&a, &tree::scale(&models[0], 2.0), 0.0, 0.0));
    assert_eq!(xform::nn::tree_numel(&models[0]), 3 * 5 + 5 + 5 * 2 + 2);
}
