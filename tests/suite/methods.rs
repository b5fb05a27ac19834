//! The numpy-style methods, checked with numbers.

use crate::harness::{assert_close as close, v};
use xform::prelude::*;

#[test]
fn broadcasting_arithmetic_and_promotion() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3, 1]);
    let b = Tensor::from_vec(vec![10i32, 20], [2]);
    let c = &a * &b; // [3, 2], f32
    assert_eq!(c.shape().dims(), &[3, 2]);
    assert_eq!(c.dtype(), DType::F32);
    assert_eq!(v(&c), vec![10., 20., 20., 40., 30., 60.]);
    assert_eq!(v(&(2.0 - &a)), vec![1., 0., -1.]);
    assert_eq!((&b * 2.5).dtype(), DType::F32); // float scalar promotes ints
    assert_eq!(v(&(&b / 3)), vec![3., 6.]); // Rust integer division
    assert_eq!(v(&(&Tensor::from_vec(vec![-7i32, 7], [2]) % 3)), vec![-1., 1.]);
    assert_eq!(v(&(-&a)), vec![-1., -2., -3.]);
    let x = Tensor::from_vec(vec![-2.0f64, 0.5, 3.0], [3]);
    assert_eq!(v(&x.clamp(-1.0, 1.0)), vec![-1., 0.5, 1.]);
    assert_eq!(v(&x.relu()), vec![0., 0.5, 3.]);
    assert_eq!(v(&x.gt_scalar(0.0)), vec![0., 1., 1.]);
    let w = Tensor::where_(&x.gt_scalar(0.0), &x, &Tensor::scalar(0.0f64));
    assert_eq!(v(&w), vec![0., 0.5, 3.]);
    assert_eq!(v(&x.powi(2)), vec![4., 0.25, 9.]);
    close(&v(&x.abs().powf(0.5)), &[2f64.sqrt(), 0.5f64.sqrt(), 3f64.sqrt()], 1e-15);
}

#[test]
fn reductions_with_axes_and_keepdim() {
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F64).reshape(&[2, 3]);
    assert_eq!(v(&x.sum()), vec![15.]);
    assert_eq!(v(&x.sum_axis(0, false)), vec![3., 5., 7.]);
    assert_eq!(x.sum_axis(-1, true).shape().dims(), &[2, 1]);
    assert_eq!(v(&x.mean_axis(1, false)), vec![1., 4.]);
    assert_eq!(v(&x.max_axis(0, false)), vec![3., 4., 5.]);
    assert_eq!(v(&x.min()), vec![0.]);
    assert_eq!(v(&x.argmax(1)), vec![2., 2.]);
    assert_eq!(x.argmax(1).dtype(), DType::I64);
    assert_eq!(v(&x.cumsum(1)), vec![0., 1., 3., 3., 7., 12.]);
    close(&v(&x.var_axes(&[1], 1, false)), &[1.0, 1.0], 1e-15);
    close(&v(&x.std_axes(&[0, 1], 0, false)), &[(35.0f64 / 12.0).sqrt()], 1e-15);
    close(&v(&x.norm()), &[55f64.sqrt()], 1e-15);
    let lse = x.logsumexp(1, false);
    close(&v(&lse), &[(1f64 + 1f64.exp() + 2f64.exp()).ln(), 3.0 + (1f64 + 1f64.exp() + 2f64.exp()).ln()], 1e-14);
    let sm = x.softmax(1);
    close(&v(&sm.sum_axis(1, false)), &[1.0, 1.0], 1e-15);
    // its derivatives, with a tie at the maximum: softmax, diag(p) - p p^T
    close(&v(&xform::grad(|x: &Tensor| x.logsumexp(1, false).sum())(&x)), &v(&sm), 1e-15);
    let tied = Tensor::from_vec(vec![2.0f64, 2.0, 1.0], [3]);
    let p = v(&tied.softmax(0));
    close(&v(&xform::grad(|t: &Tensor| t.logsumexp(0, false))(&tied)), &p, 1e-15);
    let h = v(&xform::hessian(|t: &Tensor| t.logsumexp(0, false))(&tied));
    let want: Vec<f64> = (0..9).map(|k| if k / 3 == k % 3 { p[k / 3] } else { 0.0 } - p[k / 3] * p[k % 3]).collect();
    close(&h, &want, 1e-15);
    close(&v(&x.log_softmax(1).exp()), &v(&sm), 1e-14);
    let bools = Tensor::from_vec(vec![true, false, true], [3]);
    assert_eq!(v(&bools.sum()), vec![2.]);
}

#[test]
fn matmul_follows_numpy() {
    let a = Tensor::arange(0.0, 6.0, 1.0, DType::F64).reshape(&[2, 3]);
    let b = Tensor::arange(0.0, 12.0, 1.0, DType::F64).reshape(&[3, 4]);
    let c = a.matmul(&b);
    assert_eq!(v(&c), vec![20., 23., 26., 29., 56., 68., 80., 92.]);
    let vec3 = Tensor::from_vec(vec![1.0f64, 0.0, -1.0], [3]);
    assert_eq!(v(&a.matmul(&vec3)), vec![-2., -2.]);
    assert_eq!(v(&vec3.matmul(&b)), vec![-8., -8., -8., -8.]);
    assert_eq!(v(&vec3.dot(&vec3)), vec![2.]);
    // batch broadcasting: [2, 1, 2, 3] @ [4, 3, 4] -> [2, 4, 2, 4]
    let aa = Tensor::stack(&[a.clone(), &a * 2.0], 0).unsqueeze(1);
    let bb = Tensor::stack(&[b.clone(), b.clone(), b.clone(), b.clone()], 0);
    let cc = aa.matmul(&bb);
    assert_eq!(cc.shape().dims(), &[2, 4, 2, 4]);
    assert_eq!(v(&cc.slice(s![1, 3])), v(&(&c * 2.0)));
    // a plain matrix on the left of a batch
    let left = a.matmul(&bb);
    assert_eq!(left.shape().dims(), &[4, 2, 4]);
    assert_eq!(v(&left.select(0, 2)), v(&c));
    assert_eq!(v(&vec3.outer(&Tensor::from_vec(vec![1.0f64, 2.0], [2]))), vec![1., 2., 0., 0., -1., -2.]);
}

/// Products of every kernel path of `dot_general` (the k = 1 outer-product
/// kernel, narrow and wide; the direct small GEMM with each register block,
/// transposed operands and a packed B; faer above the size limit and for
/// matrix-vector products) against the same sums done by broadcasting and
/// reducing, in f32 and f64, on strided operands (a leading slice gives odd
/// offsets), with the products of a batch at several alignments (odd
/// `m * n`).
#[test]
fn matmul_kernel_paths_agree_with_broadcast_sums() {
    let key = Key::new(3);
    let shapes: &[(usize, usize, usize, usize)] = &[
        // (batch, m, k, n)
        (5, 7, 1, 3),
        (3, 33, 1, 10),
        (4, 10, 1, 64),
        (2, 20, 1, 37),
        (1, 6, 10, 64),
        (1, 13, 33, 70),
        (2, 64, 64, 10),
        (1, 5, 3, 129),
        (1, 64, 64, 64),
        (1, 65, 64, 64),
        (1, 40, 30, 1),
    ];
    for dtype in [DType::F32, DType::F64] {
        let tol = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
        for (i, &(b, m, k, n)) in shapes.iter().enumerate() {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let g = key.fold_in(i as u32);
                // Operands as views: a leading slice off a bigger array
                // (odd offsets), and transposed storage when asked.
                let a_store = if ta { [b, k, m + 1] } else { [b, m + 1, k] };
                let a = g.fold_in(1).normal(a_store, dtype);
                let a = if ta { a.slice(s![.., .., 1..]).transpose(1, 2) } else { a.slice(s![.., 1.., ..]) };
                let b_store = if tb { [b, n, k] } else { [b, k, n] };
                let bm = g.fold_in(2).normal(b_store, dtype);
                let bm = if tb { bm.transpose(1, 2) } else { bm };
                let got = a.matmul(&bm);
                let want = (a.unsqueeze(3) * bm.unsqueeze(1)).sum_axis(2, false);
                assert_eq!(got.shape().dims(), &[b, m, n]);
                let (g, w) = (v(&got), v(&want));
                assert_eq!(g.len(), w.len());
                let scale = w.iter().fold(1.0f64, |s, x| s.max(x.abs()));
                for (j, (x, y)) in g.iter().zip(&w).enumerate() {
                    assert!(
                        (x - y).abs() <= tol * scale * (k as f64).sqrt().max(1.0),
                        "{dtype:?} [{b}, {m}, {k}] @ [{b}, {k}, {n}] (transposed a {ta}, b {tb}) at {j}: {x} vs {y}"
                    );
                }
            }
        }
    }
}

#[test]
fn shaping_and_indexing() {
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32).reshape(&[2, 3, 4]);
    assert_eq!(x.reshape(&[-1, 4]).shape().dims(), &[6, 4]);
    assert_eq!(x.moveaxis(2, 0).shape().dims(), &[4, 2, 3]);
    assert_eq!(v(&x.slice(s![1, -1, 1..3])), vec![21., 22.]);
    assert_eq!(x.slice(&[Idx::NewAxis, Idx::All, Idx::At(0)]).shape().dims(), &[1, 2, 4]);
    let ids = Tensor::from_vec(vec![2i64, 0, -1], [3]);
    assert_eq!(v(&x.select(0, 0).select(1, 0).take(&ids, 0)), vec![8., 0., 8.]);
    let table = Tensor::arange(0.0, 6.0, 1.0, DType::F32).reshape(&[3, 2]);
    let emb = table.take(&Tensor::from_vec(vec![1i32, 1, 2, 0], [2, 2]), 0);
    assert_eq!(emb.shape().dims(), &[2, 2, 2]);
    assert_eq!(v(&emb), vec![2., 3., 2., 3., 4., 5., 0., 1.]);
    let m = Tensor::from_vec(vec![10.0f32, 11.0, 12.0, 20.0, 21.0, 22.0], [2, 3]);
    let pick = m.take_along_axis(&Tensor::from_vec(vec![2i32, 0], [2, 1]), 1);
    assert_eq!(v(&pick), vec![12., 20.]);
    let oh = Tensor::from_vec(vec![0i32, 2], [2]).one_hot(3, DType::F32);
    assert_eq!(v(&oh), vec![1., 0., 0., 0., 0., 1.]);
    let acc = Tensor::zeros([3], DType::F32).index_add(
        0,
        &Tensor::from_vec(vec![0i32, 2, 0], [3]),
        &Tensor::ones([3], DType::F32),
    );
    assert_eq!(v(&acc), vec![2., 0., 1.]);
    let parts = x.split(2, &[1, 3]);
    assert_eq!(parts[1].shape().dims(), &[2, 3, 3]);
    assert_eq!(v(&Tensor::concat(&[parts[1].clone(), parts[0].clone()], 2).slice(s![0, 0])), vec![1., 2., 3., 0.]);
    let padded = Tensor::from_vec(vec![1.0f32, 2.0], [2]).pad(&[(1, 2)], 9.0);
    assert_eq!(v(&padded), vec![9., 1., 2., 9., 9.]);
    let ds = x.dynamic_slice(&[Tensor::scalar(1i32), Tensor::scalar(5i32), Tensor::scalar(1i32)], &[1, 2, 2]);
    assert_eq!(v(&ds), vec![17., 18., 21., 22.]); // the start 5 is clamped to 1
    let dus =
        Tensor::zeros([3], DType::F32).dynamic_update_slice(&Tensor::ones([2], DType::F32), &[Tensor::scalar(2i32)]);
    assert_eq!(v(&dus), vec![0., 1., 1.]);
    assert_eq!(x.unstack(0).len(), 2);
}

#[test]
fn constructors_and_readback() {
    assert_eq!(v(&Tensor::linspace(0.0, 1.0, 5, DType::F64)), vec![0., 0.25, 0.5, 0.75, 1.]);
    assert_eq!(v(&Tensor::eye(2, DType::I32)), vec![1., 0., 0., 1.]);
    assert_eq!(Tensor::arange(0.0, 1.0, 0.25, DType::F32).numel(), 4);
    let x = Tensor::from_vec(vec![1.5f32], []);
    assert_eq!(x.item::<f32>(), 1.5);
    assert_eq!(x.cast(DType::BF16).item_f64(), 1.5);
    assert_eq!(Tensor::full([2], 3.0, DType::U32).to_vec::<u32>(), vec![3, 3]);
    assert_eq!(x.ones_like().dtype(), DType::F32);
    let printed = format!("{}", Tensor::from_vec(vec![1.0f32, 2.5, -3.0, 4.0], [2, 2]));
    assert_eq!(printed, "tensor([[ 1.0,  2.5],\n        [-3.0,  4.0]], dtype=float32)");
    let ints = format!("{}", Tensor::from_vec(vec![1i64, -20], [2]));
    assert_eq!(ints, "tensor([  1, -20], dtype=int64)");
}

#[test]
fn random_keys_are_values() {
    let k = Key::new(0);
    // JAX 0.10's jax.random.split(PRNGKey(0)) gives these words (partitionable
    // Threefry, its default)
    assert_eq!(k.split_tensor(2).to_vec::<u32>(), vec![1797259609, 2579123966, 928981903, 3453687069]);
    let u = k.uniform([1000], DType::F32);
    let m = u.mean().item::<f32>();
    assert!((m - 0.5).abs() < 0.05, "{m}");
    assert!(u.max().item::<f32>() < 1.0 && u.min().item::<f32>() >= 0.0);
    let n = k.normal([4000], DType::F64);
    assert!(n.mean().item::<f64>().abs() < 0.06);
    assert!((n.var().item::<f64>() - 1.0).abs() < 0.08);
    // same key, same numbers; fold_in gives a different stream
    assert_eq!(k.normal([5], DType::F32).to_vec::<f32>(), k.normal([5], DType::F32).to_vec::<f32>());
    assert_ne!(k.fold_in(1).bits([4]).to_vec::<u32>(), k.bits([4]).to_vec::<u32>());
    let r = k.randint([100], 3, 7, DType::I32).to_vec::<i32>();
    assert!(r.iter().all(|&x| (3..7).contains(&x)));
}
