//! Tests of `xform::nn` (layers, tree utilities, stack/unstack, losses,
//! optimizers) and `xform::data` (the digits loader), with numbers and
//! stated tolerances, plus a short training run on the digits.

use crate::harness::{assert_close as close, v};
use xform::data::{batches, digits, digits_all, digits_split, permutation};
use xform::nn::*;
use xform::prelude::*;
use xform::testing::{check_grads, check_vmap, Modes};
use xform::{catch, ErrorKind};

/// The largest absolute difference between two trees' elements.
fn max_diff<T: Tree>(a: &T, b: &T) -> f64 {
    let (a, b) = (a.leaves(), b.leaves());
    assert_eq!(a.len(), b.len(), "the trees have different numbers of leaves");
    a.iter().zip(b).map(|(x, y)| (x - &y).abs().max().item_f64()).fold(0.0, f64::max)
}

fn assert_stack_clean() {
    assert_eq!(xform::core::interp::stack_depth(), 0, "interpreter stack not restored");
}

fn t1(data: &[f64]) -> Tensor {
    Tensor::from_vec(data.to_vec(), [data.len()])
}

// ---------------------------------------------------------------- layers

#[test]
fn linear_and_mlp_forward_init_and_paths() {
    let l = Linear::init(&Key::new(3), 100, 50, DType::F64);
    assert_eq!((l.d_in(), l.d_out()), (100, 50));
    // PyTorch's default: weight and bias U(-0.1, 0.1) (1/sqrt(100)), so the
    // std is 0.1/sqrt(3) = 0.0577; 5000 samples put the sample std within
    // 3% with overwhelming probability (nn_layers.rs tests the
    // distributions on larger draws).
    assert!(l.w.abs().max().item::<f64>() <= 0.1 && l.b.abs().max().item::<f64>() <= 0.1);
    let std = l.w.std_axes(&[0, 1], 0, false).item::<f64>();
    assert!((std - 0.1 / 3f64.sqrt()).abs() < 0.0018, "std {std}");
    assert!(l.w.mean().item::<f64>().abs() < 0.005);

    let lin = Linear { w: Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [3, 2]), b: t1(&[0.5, -1.0]) };
    // [1, 0, -1] @ w + b = [1 - 5, 2 - 6] + b
    assert_eq!(v(&lin.forward(&t1(&[1.0, 0.0, -1.0]))), vec![-3.5, -5.0]);
    let xb = Tensor::from_vec(vec![1.0f64, 0.0, -1.0, 0.0, 1.0, 0.0], [2, 3]);
    assert_eq!(v(&lin.forward(&xb)), vec![-3.5, -5.0, 3.5, 3.0]);

    let mlp = Mlp::init(&Key::new(0), &[5, 7, 3, 2], DType::F32);
    assert_eq!(mlp.sizes(), vec![5, 7, 3, 2]);
    assert_eq!(mlp.activation, Activation::Tanh);
    assert_eq!(
        mlp.paths(),
        vec![".layers[0].w", ".layers[0].b", ".layers[1].w", ".layers[1].b", ".layers[2].w", ".layers[2].b"]
    );
    assert_eq!(tree_numel(&mlp), 5 * 7 + 7 + 7 * 3 + 3 + 3 * 2 + 2);
    // One example gives the corresponding row of the batch.
    let x = Key::new(1).normal([4, 5], DType::F32);
    let batch = mlp.forward(&x);
    assert_eq!(batch.shape().dims(), &[4, 2]);
    close(&v(&mlp.forward(&x.index(2))), &v(&batch.index(2)), 1e-6);
    // The forward pass by hand: tanh between layers, none after the last.
    let mut h = x.clone();
    for (i, layer) in mlp.layers.iter().enumerate() {
        h = h.matmul(&layer.w) + &layer.b;
        if i < 2 {
            h = h.tanh();
        }
    }
    close(&v(&batch), &v(&h), 1e-6);
    // Other activations.
    let z = t1(&[-1.0, 0.5]);
    assert_eq!(v(&Activation::Relu.apply(&z)), vec![0.0, 0.5]);
    assert_eq!(v(&Activation::Identity.apply(&z)), vec![-1.0, 0.5]);
    close(&v(&Activation::Gelu.apply(&z)), &[-0.15865525393145707, 0.34573123063700656], 1e-12);
    let relu_mlp = mlp.clone().with_activation(Activation::Relu);
    assert_eq!(relu_mlp.activation, Activation::Relu);
    // grad keeps the configuration (activation) of its argument.
    let g = grad(|p: &Mlp| p.forward(&x).sum())(&relu_mlp);
    assert_eq!(g.activation, Activation::Relu);
    assert_eq!(g.layers[2].w.shape().dims(), &[3, 2]);

    assert!(catch(|| Mlp::init(&Key::new(0), &[5], DType::F32)).is_err());
    let e = catch(|| mlp.forward(&Tensor::zeros([4, 6], DType::F32))).unwrap_err();
    assert_eq!(e.op, "matmul");
    assert_stack_clean();
}

// ---------------------------------------------------------- tree utilities

#[test]
fn tree_utilities_compute_leafwise() {
    let a = (t1(&[1.0, 2.0]), vec![Tensor::scalar(3.0f64)]);
    let b = (t1(&[4.0, -1.0]), vec![Tensor::scalar(0.5f64)]);
    let c = (t1(&[1.0, 1.0]), vec![Tensor::scalar(2.0f64)]);
    let m = tree_map(&a, |x| x * 10.0);
    assert_eq!((v(&m.0), v(&m.1[0])), (vec![10.0, 20.0], vec![30.0]));
    let z = tree_zip_map(&a, &b, |x, y| x * y);
    assert_eq!((v(&z.0), v(&z.1[0])), (vec![4.0, -2.0], vec![1.5]));
    let m3 = tree_map3(&a, &b, &c, |x, y, w| x + &(y * w));
    assert_eq!((v(&m3.0), v(&m3.1[0])), (vec![5.0, 1.0], vec![4.0]));
    let s = tree_add(&a, &b);
    assert_eq!((v(&s.0), v(&s.1[0])), (vec![5.0, 1.0], vec![3.5]));
    let d = tree_sub(&a, &b);
    assert_eq!((v(&d.0), v(&d.1[0])), (vec![-3.0, 3.0], vec![2.5]));
    let sc = tree_scale(&a, -0.5);
    assert_eq!((v(&sc.0), v(&sc.1[0])), (vec![-0.5, -1.0], vec![-1.5]));
    let ax = tree_axpy(2.0, &a, &b);
    assert_eq!((v(&ax.0), v(&ax.1[0])), (vec![6.0, 3.0], vec![6.5]));
    // <a, b> = 4 - 2 + 1.5; |a| = sqrt(1 + 4 + 9)
    assert_eq!(tree_dot(&a, &b).item::<f64>(), 3.5);
    close(&[tree_norm(&a).item::<f64>()], &[14f64.sqrt()], 1e-15);
    let l = tree_lerp(&a, &b, 0.25);
    close(&v(&l.0), &[1.75, 1.25], 1e-15);
    close(&v(&l.1[0]), &[2.375], 1e-15);
    let avg = tree_average(&[a.clone(), b.clone(), c.clone()]);
    close(&v(&avg.0), &[2.0, 2.0 / 3.0], 1e-15);
    close(&v(&avg.1[0]), &[5.5 / 3.0], 1e-15);
    let zl = tree_zeros_like(&a);
    assert_eq!((v(&zl.0), v(&zl.1[0]), zl.0.dtype()), (vec![0.0, 0.0], vec![0.0], DType::F64));
    assert_eq!(v(&tree_ones_like(&a).0), vec![1.0, 1.0]);
    assert_eq!(tree_numel(&a), 3);
    let f32s = tree_cast(&a, DType::F32);
    assert_eq!((f32s.0.dtype(), f32s.1[0].dtype()), (DType::F32, DType::F32));
    // SWA in one line: the running mean over snapshots equals their average.
    let snaps = [a.clone(), b.clone(), c.clone()];
    let mut swa = snaps[0].clone();
    for (n, p) in snaps.iter().enumerate().skip(1) {
        swa = tree_lerp(&swa, p, 1.0 / (n + 1) as f64);
    }
    assert!(max_diff(&swa, &avg) < 1e-15);

    // Normal noise: one independent draw per leaf, shaped like the leaf.
    let big = (Tensor::zeros([200, 50], DType::F32), Tensor::zeros([3], DType::F64));
    let n = tree_normal_like(&Key::new(9), &big);
    assert_eq!((n.0.shape().dims(), n.1.dtype()), (&[200, 50][..], DType::F64));
    let (mean, std) = (n.0.mean().item::<f32>(), n.0.std_axes(&[0, 1], 0, false).item::<f32>());
    assert!(mean.abs() < 0.05 && (std - 1.0).abs() < 0.03, "mean {mean}, std {std}");

    // Clipping: norm 5 clipped to 2 scales by 0.4; norm under the bound is kept.
    let g = (t1(&[3.0]), t1(&[0.0, 4.0]));
    let cl = clip_by_global_norm(&g, 2.0);
    close(&v(&cl.0), &[1.2], 1e-15);
    close(&v(&cl.1), &[0.0, 1.6], 1e-15);
    assert_eq!(v(&clip_by_global_norm(&g, 5.0).1), vec![0.0, 4.0]);
    assert!(catch(|| clip_by_global_norm(&g, 0.0)).is_err());

    // Mismatches are errors that name the leaf.
    let e = catch(|| tree_add(&a, &(t1(&[1.0]), vec![Tensor::scalar(1.0f64)]))).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Shape { .. }), "{e}");
    assert!(e.to_string().contains(".0"), "{e}");
    let e = catch(|| tree_zip_map(&vec![t1(&[1.0])], &vec![t1(&[1.0]), t1(&[2.0])], |x, _| x.clone())).unwrap_err();
    assert!(e.to_string().contains("different structure"), "{e}");
    assert!(catch(|| tree_average::<Tensor>(&[])).is_err());
    assert_stack_clean();
}

#[test]
fn tree_utilities_work_under_transforms() {
    // Per-example norms with vmap equal a loop.
    let g = (Key::new(1).normal([6, 3, 2], DType::F64), Key::new(2).normal([6, 4], DType::F64));
    let norms = vmap(|g: &(Tensor, Tensor)| tree_norm(g))(&g);
    for i in 0..6 {
        let want = (g.0.index(i).powi(2).sum() + g.1.index(i).powi(2).sum()).sqrt().item::<f64>();
        close(&[v(&norms)[i as usize]], &[want], 1e-14);
    }
    // Per-example clipping under vmap bounds every example's norm.
    let clipped = vmap(|g: &(Tensor, Tensor)| clip_by_global_norm(g, 1.5))(&g);
    let cn = v(&vmap(|g: &(Tensor, Tensor)| tree_norm(g))(&clipped));
    assert_eq!(cn.len(), v(&norms).len());
    for (c, n) in cn.iter().zip(v(&norms)) {
        close(&[*c], &[n.min(1.5)], 1e-13);
    }
    check_vmap(|g: &(Tensor, Tensor)| clip_by_global_norm(g, 1.5), &g, Axes::Zero).unwrap();
    // tree_dot and tree_norm are differentiable: d|x|/dx = x / |x|.
    let x = (t1(&[3.0, 0.0]), t1(&[4.0]));
    let d = grad(|x: &(Tensor, Tensor)| tree_norm(x))(&x);
    close(&v(&d.0), &[0.6, 0.0], 1e-15);
    close(&v(&d.1), &[0.8], 1e-15);
    check_grads(|x: &(Tensor, Tensor)| tree_dot(x, x), &x, 2, Modes::Both).unwrap();
    assert_stack_clean();
}

// ------------------------------------------------------------ stack/unstack

#[test]
fn stack_unstack_round_trip_and_errors() {
    let models: Vec<Mlp> = Key::new(5).split(3).iter().map(|k| Mlp::init(k, &[4, 6, 2], DType::F32)).collect();
    let s = stack(&models);
    assert_eq!(s.layers[0].w.shape().dims(), &[3, 4, 6]);
    assert_eq!(s.layers[1].b.shape().dims(), &[3, 2]);
    let back = unstack(&s);
    assert_eq!(back.len(), 3);
    for (a, b) in models.iter().zip(&back) {
        assert_eq!(max_diff(a, b), 0.0);
        assert_eq!(a.paths(), b.paths());
    }
    // Stacked models under vmap give each model's output.
    let x = Key::new(6).normal([5, 4], DType::F32);
    let ys = vmap(|m: &Mlp| m.forward(&x))(&s);
    assert_eq!(ys.shape().dims(), &[3, 5, 2]);
    for (i, m) in models.iter().enumerate() {
        close(&v(&ys.index(i as isize)), &v(&m.forward(&x)), 1e-5);
    }
    // Stacking integer and float leaves together (an optimizer state).
    let states: Vec<AdamState<Mlp>> = models.iter().map(|m| Adam::new(0.1).init(m)).collect();
    let ss = stack(&states);
    assert_eq!((ss.step.shape().dims(), ss.step.dtype()), (&[3][..], DType::I32));
    assert_eq!(unstack(&ss)[2].step.item::<i32>(), 0);

    // Errors: empty, structure, shape, dtype; unstack of a scalar leaf or
    // of leaves with different leading sizes.
    assert!(catch(|| stack::<Mlp>(&[])).is_err());
    let deeper = Mlp::init(&Key::new(0), &[4, 6, 6, 2], DType::F32);
    let e = catch(|| stack(&[models[0].clone(), deeper])).unwrap_err();
    assert!(e.to_string().contains("tree 1 has a different structure"), "{e}");
    let wider = Mlp::init(&Key::new(0), &[4, 7, 2], DType::F32);
    let e = catch(|| stack(&[models[0].clone(), models[1].clone(), wider])).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Shape { .. }));
    assert!(e.to_string().contains(".layers[0].w of tree 2"), "{e}");
    let f64m = Mlp::init(&Key::new(0), &[4, 6, 2], DType::F64);
    let e = catch(|| stack(&[models[0].clone(), f64m])).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::DType { .. }), "{e}");
    let e = catch(|| unstack(&(Tensor::zeros([2], DType::F32), Tensor::scalar(1.0f32)))).unwrap_err();
    assert!(e.to_string().contains("scalar"), "{e}");
    let e = catch(|| unstack(&(Tensor::zeros([2], DType::F32), Tensor::zeros([3], DType::F32)))).unwrap_err();
    assert!(e.to_string().contains("different leading sizes"), "{e}");
    assert_stack_clean();
}

// ------------------------------------------------------------------ losses

#[test]
fn losses_against_hand_computed_values() {
    let logits = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 0.0, 0.0, 0.0], [2, 3]);
    let labels = Tensor::from_vec(vec![2i32, 1], [2]);
    // log(e + e^2 + e^3) - 3 and log 3
    let want = [0.40760596444438013, 1.0986122886681098];
    close(&v(&softmax_cross_entropy_per_example(&logits, &labels)), &want, 1e-14);
    close(&[softmax_cross_entropy(&logits, &labels).item::<f64>()], &[(want[0] + want[1]) / 2.0], 1e-14);
    // One example: [C] logits and a scalar label; i64 labels work too.
    close(&[softmax_cross_entropy(&logits.index(0), &Tensor::scalar(2i64)).item::<f64>()], &[want[0]], 1e-14);
    // Large logits stay finite (log_softmax is stable).
    let big = Tensor::from_vec(vec![1000.0f32, 0.0], [1, 2]);
    let l = softmax_cross_entropy(&big, &Tensor::from_vec(vec![1i32], [1])).item::<f32>();
    assert_eq!(l, 1000.0);
    // mse and accuracy.
    let p = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    let t = Tensor::from_vec(vec![0.0f64, 2.0, 5.0, 4.0], [2, 2]);
    assert_eq!(mse(&p, &t).item::<f64>(), 5.0 / 4.0);
    let acc_logits = Tensor::from_vec(vec![0.1f32, 0.9, 0.8, 0.2, 0.3, 0.7, 0.6, 0.4], [4, 2]);
    let acc = accuracy(&acc_logits, &Tensor::from_vec(vec![1i32, 0, 0, 0], [4]));
    assert_eq!(acc.item::<f32>(), 0.75);
    // Errors.
    let e = catch(|| softmax_cross_entropy(&logits, &Tensor::from_vec(vec![2.0f64, 1.0], [2]))).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::DType { .. }), "{e}");
    let e = catch(|| softmax_cross_entropy(&logits, &Tensor::from_vec(vec![2i32, 1, 0], [3]))).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Shape { .. }), "{e}");
    assert!(catch(|| softmax_cross_entropy(&logits, &Tensor::from_vec(vec![3i32, 1], [2]))).is_err());
    let e = catch(|| mse(&p, &t.reshape(&[4]))).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Shape { .. }), "{e}");
    assert_stack_clean();
}

#[test]
fn softmax_cross_entropy_gradients() {
    let logits = Key::new(11).normal([4, 5], DType::F64);
    let labels = Tensor::from_vec(vec![0i32, 4, 2, 2], [4]);
    let f = |z: &Tensor| softmax_cross_entropy(z, &labels);
    // Against finite differences, to second order, both modes (f64
    // tolerance 1e-6 relative, the checker's default).
    check_grads(f, &logits, 2, Modes::Both).unwrap();
    // Closed form: (softmax(z) - one_hot(y)) / B.
    let g = grad(f)(&logits);
    let want = (logits.softmax(-1) - labels.one_hot(5, DType::F64)) / 4.0;
    close(&v(&g), &v(&want), 1e-14);
    // Per-example losses are vmappable (also over the labels) ...
    check_vmap(
        |(z, y): &(Tensor, Tensor)| softmax_cross_entropy_per_example(z, y),
        &(logits.clone(), labels.clone()),
        Axes::Zero,
    )
    .unwrap();
    // ... and the gradients with respect to a model's parameters check too.
    let mlp = Mlp::init(&Key::new(12), &[3, 4, 5], DType::F64);
    let x = Key::new(13).normal([4, 3], DType::F64);
    check_grads(|p: &Mlp| softmax_cross_entropy(&p.forward(&x), &labels), &mlp, 1, Modes::Both).unwrap();
    check_grads(|p: &Mlp| mse(&p.forward(&x), &logits), &mlp, 1, Modes::Both).unwrap();
    assert_stack_clean();
}

// -------------------------------------------------------------- optimizers

#[test]
fn sgd_steps_against_hand_computed_values() {
    let p = (t1(&[1.0, -2.0]), Tensor::scalar(0.5f64));
    let g1 = (t1(&[0.5, -1.0]), Tensor::scalar(2.0f64));
    let g2 = (t1(&[0.25, 2.0]), Tensor::scalar(-1.0f64));
    let sgd = Sgd::new(0.1);
    let s = sgd.init(&p);
    assert!(s.velocity.is_none() && s.leaves().is_empty());
    let (p1, s) = sgd.update(&p, &g1, &s);
    close(&v(&p1.0), &[0.95, -1.9], 1e-15);
    close(&v(&p1.1), &[0.3], 1e-15);
    let (p2, _) = sgd.update(&p1, &g2, &s);
    close(&v(&p2.0), &[0.925, -2.1], 1e-15);
    // Momentum 0.9: v1 = g1, v2 = 0.9 g1 + g2.
    let sgdm = Sgd { lr: 0.1, momentum: 0.9 };
    let s = sgdm.init(&p);
    assert_eq!(s.paths(), vec![".velocity.0", ".velocity.1"]);
    let (p1, s) = sgdm.update(&p, &g1, &s);
    let (p2, s) = sgdm.update(&p1, &g2, &s);
    let vel = s.velocity.as_ref().unwrap();
    close(&v(&vel.0), &[0.7, 1.1], 1e-15);
    close(&v(&vel.1), &[0.8], 1e-15);
    // p2 = p - 0.1 g1 - 0.1 (0.9 g1 + g2)
    close(&v(&p2.0), &[1.0 - 0.05 - 0.07, -2.0 + 0.1 - 0.11], 1e-15);
    close(&v(&p2.1), &[0.5 - 0.2 - 0.08], 1e-15);
    let e = catch(|| sgd.update(&p, &(t1(&[1.0]), Tensor::scalar(1.0f64)), &sgd.init(&p))).unwrap_err();
    assert!(e.to_string().contains("gradient of .0"), "{e}");
    assert_stack_clean();
}

#[test]
fn adam_steps_against_hand_computed_values() {
    // Two steps of Adam (lr 0.1, b1 0.9, b2 0.999, eps 1e-8), computed by
    // hand in f64 with the formulas of Kingma & Ba.
    let adam = Adam::new(0.1);
    let p = (t1(&[1.0, -2.0]), Tensor::scalar(0.5f64));
    let g1 = (t1(&[0.5, -1.0]), Tensor::scalar(2.0f64));
    let g2 = (t1(&[0.25, 2.0]), Tensor::scalar(-1.0f64));
    let s0 = adam.init(&p);
    assert_eq!(s0.paths(), vec![".step", ".m.0", ".m.1", ".v.0", ".v.1"]);
    let (p1, s1) = adam.update(&p, &g1, &s0);
    // Step 1: m_hat = g, v_hat = g^2, so p moves by lr * g / (|g| + eps).
    close(&v(&p1.0), &[0.900000002, -1.900000001], 1e-15);
    close(&v(&p1.1), &[0.5 - 0.1 * 2.0 / (2.0 + 1e-8)], 1e-15);
    let (p2, s2) = adam.update(&p1, &g2, &s1);
    close(&v(&p2.0), &[0.8067820404774624, -1.9366103534720749], 1e-14);
    close(&v(&s2.m.0), &[0.07, 0.11], 1e-14);
    close(&v(&s2.v.0), &[0.00031225, 0.004999], 1e-14);
    assert_eq!(s2.step.item::<i32>(), 2);
    // The scalar leaf: m = 0.9 * 0.2 - 0.1 = 0.08, v = 0.999 * 0.004 + 0.001 = 0.004996.
    let (m, vv) = (0.08 / 0.19, 0.004996 / (1.0 - 0.999f64.powi(2)));
    close(&v(&p2.1), &[p1.1.item::<f64>() - 0.1 * m / (vv.sqrt() + 1e-8)], 1e-14);

    // f32 parameters stay f32 and agree with the f64 result.
    let p32 = tree_cast(&p, DType::F32);
    let (q1, r1) = adam.update(&p32, &tree_cast(&g1, DType::F32), &adam.init(&p32));
    let (q2, _) = adam.update(&q1, &tree_cast(&g2, DType::F32), &r1);
    assert_eq!(q2.0.dtype(), DType::F32);
    close(&v(&q2.0), &v(&p2.0), 1e-6);
    assert_stack_clean();
}

#[test]
fn optimizer_updates_vmap_over_stacked_states() {
    // An ensemble's update: vmap over stacked params, grads and states equals a loop.
    let adam = Adam::new(0.05);
    let ps: Vec<Mlp> = Key::new(1).split(3).iter().map(|k| Mlp::init(k, &[3, 4, 2], DType::F64)).collect();
    let gs: Vec<Mlp> = Key::new(2).split(3).iter().map(|k| Mlp::init(k, &[3, 4, 2], DType::F64)).collect();
    let mut states: Vec<AdamState<Mlp>> = ps.iter().map(|p| adam.init(p)).collect();
    // Take one step each first, so the states are not all zero.
    let mut ps2 = Vec::new();
    for (p, (g, s)) in ps.iter().zip(gs.iter().zip(states.iter_mut())) {
        let (q, t) = adam.update(p, g, s);
        ps2.push(q);
        *s = t;
    }
    let step = |(p, g, s): &(Mlp, Mlp, AdamState<Mlp>)| adam.update(p, g, s);
    let (bp, bs) = vmap(step)(&(stack(&ps2), stack(&gs), stack(&states)));
    for i in 0..3 {
        let (lp, ls) = adam.update(&ps2[i], &gs[i], &states[i]);
        assert!(max_diff(&unstack(&bp)[i], &lp) < 1e-14);
        assert!(max_diff(&unstack(&bs)[i], &ls) < 1e-14);
    }
    assert_eq!(v(&bs.step), vec![2.0, 2.0, 2.0]);
    assert_stack_clean();
}

// -------------------------------------------------------------------- data

#[test]
fn digits_loader_shapes_values_and_split() {
    let d = digits();
    assert_eq!(d.train_x.shape().dims(), &[1437, 64]);
    assert_eq!(d.train_y.shape().dims(), &[1437]);
    assert_eq!(d.test_x.shape().dims(), &[360, 64]);
    assert_eq!(d.test_y.shape().dims(), &[360]);
    assert_eq!((d.train_x.dtype(), d.train_y.dtype()), (DType::F32, DType::I32));
    assert_eq!((d.train_x.min().item::<f32>(), d.train_x.max().item::<f32>()), (0.0, 1.0));
    let (lo, hi) = (d.train_y.min().item::<i32>(), d.train_y.max().item::<i32>());
    assert_eq!((lo, hi), (0, 9));

    // Known values (from the CSV shuffled by SplitMix64 seed 0, computed
    // independently in Python): the first training image is a 3, the
    // first test image a 7.
    let first: Vec<f32> = d.train_x.index(0).to_vec::<f32>().iter().map(|p| p * 16.0).collect();
    assert_eq!(&first[..16], &[0., 0., 9., 14., 16., 16., 2., 0., 0., 7., 15., 7., 4., 14., 8., 0.]);
    assert_eq!(d.train_y.index(0).item::<i32>(), 3);
    assert_eq!(d.test_y.index(0).item::<i32>(), 7);
    assert_eq!((d.train_x.sum().item::<f32>() * 16.0).round(), 448159.0);
    assert_eq!((d.test_x.sum().item::<f32>() * 16.0).round(), 113559.0);
    // Class counts of the test split, and of the whole set (as documented
    // by scikit-learn: 178, 182, 177, 183, 181, 182, 181, 179, 174, 180).
    let counts = |y: &Tensor| y.one_hot(10, DType::I32).sum_axis(0, false).to_vec::<i32>();
    assert_eq!(counts(&d.test_y), vec![34, 35, 28, 49, 27, 37, 35, 41, 38, 36]);
    let (ax, ay) = digits_all();
    assert_eq!(ax.shape().dims(), &[1797, 64]);
    assert_eq!(counts(&ay), vec![178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);

    // Deterministic: the same split every time; another seed differs.
    let d2 = digits();
    assert_eq!(d2.train_y.to_vec::<i32>(), d.train_y.to_vec::<i32>());
    assert_eq!(d2.test_x.to_vec::<f32>(), d.test_x.to_vec::<f32>());
    let other = digits_split(500, 1);
    assert_eq!(other.test_y.dim(0), 500);
    assert_ne!(other.train_y.narrow(0, 0, 50).to_vec::<i32>(), d.train_y.narrow(0, 0, 50).to_vec::<i32>());
    assert_eq!(permutation(10, 7), vec![8, 1, 5, 9, 0, 4, 3, 2, 6, 7]);
    assert!(catch(|| digits_split(1798, 0)).is_err());
}

#[test]
fn minibatches_cover_the_data_once() {
    let d = digits();
    let bs = batches(&d.train_x, &d.train_y, 100, Some(3), false);
    assert_eq!(bs.len(), 15);
    assert_eq!(bs[14].0.shape().dims(), &[37, 64]);
    assert_eq!(batches(&d.train_x, &d.train_y, 100, Some(3), true).len(), 14);
    // Every example exactly once: the label histogram and pixel sum are kept.
    let ys: Vec<Tensor> = bs.iter().map(|b| b.1.clone()).collect();
    let all = Tensor::concat(&ys, 0);
    let hist = |y: &Tensor| y.one_hot(10, DType::I32).sum_axis(0, false).to_vec::<i32>();
    assert_eq!(hist(&all), hist(&d.train_y));
    let xsum: f32 = bs.iter().map(|b| b.0.sum().item::<f32>()).sum();
    close(&[xsum as f64], &[d.train_x.sum().item::<f32>() as f64], 1e-5);
    // Shuffled (not the original order), and in order without a seed.
    assert_ne!(bs[0].1.to_vec::<i32>(), d.train_y.narrow(0, 0, 100).to_vec::<i32>());
    let ordered = batches(&d.train_x, &d.train_y, 100, None, false);
    assert_eq!(ordered[1].1.to_vec::<i32>(), d.train_y.narrow(0, 100, 100).to_vec::<i32>());
    assert!(catch(|| batches(&d.train_x, &d.test_y, 10, None, false)).is_err());
}

// ------------------------------------------------ the use cases, end to end

#[test]
fn per_sample_grads_equal_a_loop_of_grads() {
    let d = digits();
    let (x, y) = (d.train_x.narrow(0, 0, 8).cast(DType::F64), d.train_y.narrow(0, 0, 8));
    let params = Mlp::init(&Key::new(4), &[64, 16, 10], DType::F64);
    let loss = |p: &Mlp, x: &Tensor, y: &Tensor| softmax_cross_entropy(&p.forward(x), y);
    let per_ex = vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Mlp| loss(p, x, y))(&params))(&(x.clone(), y.clone()));
    assert_eq!(per_ex.layers[0].w.shape().dims(), &[8, 64, 16]);
    let each = unstack(&per_ex);
    for i in 0..8 {
        let gi = grad(|p: &Mlp| loss(p, &x.index(i), &y.index(i)))(&params);
        let diff = max_diff(&gi, &each[i as usize]);
        assert!(diff < 1e-13, "example {i}: {diff}");
    }
    // Their mean is the gradient of the mean loss.
    let mean = tree_map(&per_ex, |l| l.mean_axis(0, false));
    let batch = grad(|p: &Mlp| loss(p, &x, &y))(&params);
    assert!(max_diff(&mean, &batch) < 1e-14);
    assert_stack_clean();
}

#[test]
fn short_training_run_reaches_accuracy_on_digits() {
    // An MLP 64-32-10 with Adam (lr 1e-2), 20 epochs of batches of 128
    // (about 0.5 s in the dev profile): above 93% test accuracy (it reaches
    // 95.0%; it passes 93% from the 7th epoch on).
    let d = digits();
    let loss = |p: &Mlp, x: &Tensor, y: &Tensor| softmax_cross_entropy(&p.forward(x), y);
    let adam = Adam::new(1e-2);
    let mut params = Mlp::init(&Key::new(0), &[64, 32, 10], DType::F32);
    let mut state = adam.init(&params);
    let before = accuracy(&params.forward(&d.test_x), &d.test_y).item_f64();
    for epoch in 0..20 {
        for (x, y) in batches(&d.train_x, &d.train_y, 128, Some(epoch), false) {
            let g = grad(|p: &Mlp| loss(p, &x, &y))(&params);
            (params, state) = adam.update(&params, &g, &state);
        }
    }
    let acc = accuracy(&params.forward(&d.test_x), &d.test_y).item_f64();
    assert!(before < 0.3, "untrained accuracy {before}");
    assert!(acc > 0.93, "test accuracy {acc} after 20 epochs");
    assert_eq!(state.step.item::<i32>(), 20 * 12);
    assert_stack_clean();
}

// ------------------------------------------- edge cases (issue 17, 2 and 3)

/// `assert_close` that also accepts equal infinities.
#[track_caller]
fn close_inf(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        let ok = if y.is_infinite() { x == y } else { (x - y).abs() <= tol * (1.0 + y.abs()) };
        assert!(ok, "{a:?} vs {b:?} (tolerance {tol})");
    }
}

#[test]
fn relu_has_derivative_zero_at_zero() {
    // jax.nn.relu and torch.relu: 0 at 0 (max(x, 0) would split the tie: 1/2).
    let x = t1(&[-1.0, 0.0, 2.0, f64::NAN]);
    let y = v(&x.relu());
    assert_eq!(&y[..3], &[0.0, 0.0, 2.0]);
    assert!(y[3].is_nan(), "relu(NaN) is NaN, as max");
    let d = |x: &Tensor| grad(|x: &Tensor| x.relu().sum())(x);
    close(&v(&d(&t1(&[-1.0, 0.0, 2.0]))), &[0.0, 0.0, 1.0], 0.0);
    close(&v(&jacfwd(|x: &Tensor| x.relu())(&t1(&[0.0, 3.0]))), &[0.0, 0.0, 0.0, 1.0], 0.0);
    close(&v(&grad(|x: &Tensor| d(x).sum())(&t1(&[0.0, 1.0]))), &[0.0, 0.0], 0.0);
    close(&v(&vmap(|x: &Tensor| grad(|x: &Tensor| x.relu().sum())(x))(&t1(&[0.0, -2.0, 5.0]))), &[0.0, 0.0, 1.0], 0.0);
    // Integers keep max.
    assert_eq!(Tensor::from_vec(vec![-3i32, 0, 4], [3]).relu().to_vec::<i32>(), vec![0, 0, 4]);
    assert_stack_clean();
}

#[test]
fn softplus_is_smooth_at_zero() {
    // Values and first two derivatives from jax.nn.softplus in f64.
    let x = t1(&[-30.0, -1.0, 0.0, 1.0, 30.0]);
    close(
        &v(&x.softplus()),
        &[9.357622968839737e-14, 0.3132616875182228, 2f64.ln(), 1.3132616875182228, 30.000000000000092],
        1e-15,
    );
    // The derivatives are sigmoid(x) and e^-|x| / (1 + e^-|x|)^2.
    let d1 = |x: &Tensor| grad(|x: &Tensor| x.softplus().sum())(x);
    close(&v(&d1(&x)), &[9.35762296883931e-14, 0.2689414213699951, 0.5, 0.731058578630005, 0.9999999999999076], 1e-15);
    let d2 = grad(|x: &Tensor| d1(x).sum())(&x);
    let want: Vec<f64> = v(&x).iter().map(|x| (-x.abs()).exp() / (1.0 + (-x.abs()).exp()).powi(2)).collect();
    for (g, w) in v(&d2).iter().zip(&want) {
        assert!((g - w).abs() <= 1e-14 * w, "{g} vs {w}");
    }
    assert_eq!(want[2], 0.25);
    let inf = t1(&[f64::INFINITY, f64::NEG_INFINITY]);
    assert_eq!(v(&inf.softplus()), vec![f64::INFINITY, 0.0]);
    assert_stack_clean();
}

#[test]
fn logsumexp_with_infinities() {
    let (inf, ninf) = (f64::INFINITY, f64::NEG_INFINITY);
    // JAX and PyTorch: -inf for an all -inf row, inf for a row with +inf.
    let rows = Tensor::from_vec(vec![ninf, ninf, inf, 0.0, 0.0, 0.0, inf, inf], [4, 2]);
    close_inf(&v(&rows.logsumexp(1, false)), &[ninf, inf, 2f64.ln(), inf], 1e-15);
    close_inf(&v(&rows.logsumexp(-1, true)), &[ninf, inf, 2f64.ln(), inf], 1e-15);
    // A finite max with -inf entries: finite gradients, as jax.grad.
    let x = t1(&[ninf, 1.0, 2.0]);
    close(&[x.logsumexp(0, false).item_f64()], &[2.313261687518223], 1e-15);
    let g = grad(|x: &Tensor| x.logsumexp(0, false))(&x);
    close(&v(&g), &[0.0, 0.2689414213699951, 0.7310585786300049], 1e-15);
    let h = hessian(|x: &Tensor| x.logsumexp(0, false))(&x);
    let s = 0.19661193324148185;
    close(&v(&h), &[0.0, 0.0, 0.0, 0.0, s, -s, 0.0, -s, s], 1e-15);
    let g1 = grad(|x: &Tensor| x.logsumexp(0, false))(&t1(&[ninf, 1.0]));
    close(&v(&g1), &[0.0, 1.0], 0.0);
    assert_stack_clean();
}

#[test]
fn softmax_log_softmax_and_cross_entropy_with_infinities() {
    let ninf = f64::NEG_INFINITY;
    let x = t1(&[ninf, 1.0, 2.0]);
    let (p1, p2) = (0.2689414213699951, 0.7310585786300049);
    close(&v(&x.softmax(0)), &[0.0, p1, p2], 1e-15);
    close_inf(&v(&x.log_softmax(0)), &[ninf, -1.3132616875182228, -0.3132616875182228], 1e-15);
    // Jacobians as jax.jacfwd(jax.nn.softmax) and jax.jacrev(jax.nn.log_softmax).
    let s = 0.19661193324148185;
    close(&v(&jacfwd(|x: &Tensor| x.softmax(0))(&x)), &[0.0, 0.0, 0.0, 0.0, s, -s, 0.0, -s, s], 1e-15);
    let jl = jacrev(|x: &Tensor| x.log_softmax(0))(&x);
    close(&v(&jl), &[1.0, -p1, -p2, 0.0, p2, -p2, 0.0, -p1, p1], 1e-15);
    // A row whose max is +inf no longer poisons the others; it is NaN
    // throughout itself, as jax.nn.softmax and jax.nn.log_softmax (and
    // torch) give it.
    let m = Tensor::from_vec(vec![f64::INFINITY, 0.0, 0.0, 0.0], [2, 2]);
    close(&v(&m.softmax(1))[2..], &[0.5, 0.5], 1e-15);
    let inf_row = t1(&[0.5, f64::INFINITY, 1.0]);
    assert!(v(&inf_row.softmax(0)).iter().all(|p| p.is_nan()));
    assert!(v(&inf_row.log_softmax(0)).iter().all(|p| p.is_nan()));
    let dead_row = t1(&[ninf, ninf]);
    assert!(v(&dead_row.softmax(0)).iter().chain(&v(&dead_row.log_softmax(0))).all(|p| p.is_nan()));
    // Cross-entropy with a -inf logit away from the label.
    let logits = Tensor::from_vec(vec![ninf, 1.0, 2.0], [1, 3]);
    let labels = Tensor::from_vec(vec![1i32], [1]);
    close(&[softmax_cross_entropy(&logits, &labels).item_f64()], &[1.3132616875182228], 1e-15);
    let g = grad(|z: &Tensor| softmax_cross_entropy(z, &labels))(&logits);
    close(&v(&g), &[0.0, -p2, p2], 1e-15);
    assert_stack_clean();
}

#[test]
fn cross_entropy_refuses_out_of_range_labels() {
    let logits = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 3.0, 4.0, 5.0], [2, 3]);
    for bad in [-1i32, 3] {
        let labels = Tensor::from_vec(vec![0i32, bad], [2]);
        let e = catch(|| softmax_cross_entropy(&logits, &labels)).expect_err("label out of range");
        assert_eq!(e.kind, ErrorKind::IndexOutOfRange { index: bad as i64, size: 3 }, "{e}");
        assert_eq!(e.op, "softmax_cross_entropy");
        // Concrete labels under a transform of the logits: the same error.
        let e = catch(|| grad(|z: &Tensor| softmax_cross_entropy(z, &labels))(&logits)).expect_err("under grad");
        assert_eq!(e.kind, ErrorKind::IndexOutOfRange { index: bad as i64, size: 3 });
        assert_stack_clean();
    }
    // Traced labels cannot be read: an out-of-range one gives NaN for its
    // example (never another class's loss) and a zero gradient.
    let labels = Tensor::from_vec(vec![2i64, -1], [2]);
    let per =
        vmap(|(z, y): &(Tensor, Tensor)| softmax_cross_entropy_per_example(z, y))(&(logits.clone(), labels.clone()));
    let per = v(&per);
    close(&per[..1], &[(1f64.exp() + 2f64.exp() + 1.0).ln() - 2.0], 1e-14);
    assert!(per[1].is_nan(), "{per:?}");
    let g = vmap(|(z, y): &(Tensor, Tensor)| grad(|z: &Tensor| softmax_cross_entropy_per_example(z, y))(z))(&(
        logits.clone(),
        labels,
    ));
    assert_eq!(&v(&g)[3..], &[0.0, 0.0, 0.0]);
    assert_stack_clean();
}
