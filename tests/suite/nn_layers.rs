//! Tests of the layers of `xform::nn` beyond Linear/Mlp: initializers,
//! LayerNorm, GroupNorm, BatchNorm, Dropout, Embedding, scaled dot-product
//! attention and MultiHeadAttention: values against PyTorch's formulas
//! computed in numpy (the reference numbers are at the end of the file,
//! with the numpy lines that made them), pytrees, `vmap(grad)` against a
//! loop of `grad`, ensembles under `vmap` against a loop, and errors.

use crate::harness::{assert_close as close, v};
use xform::nn::init::{self, calculate_gain, fan_in_fan_out, Nonlinearity};
use xform::nn::*;
use xform::prelude::*;
use xform::testing::{check_grads, Modes};
use xform::{catch, impl_tree, Error};

/// The deterministic test input of the reference script:
/// `sin(0.37 * i + a) * 1.5` over the row-major index `i` (numpy's `det`).
fn det(shape: &[usize], a: f64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (0.37 * i as f64 + a).sin() * 1.5).collect::<Vec<f64>>(), shape.to_vec())
}

/// The largest absolute difference between two trees' elements.
fn max_diff<T: Tree>(a: &T, b: &T) -> f64 {
    let (a, b) = (a.leaves(), b.leaves());
    assert_eq!(a.len(), b.len(), "the trees have different numbers of leaves");
    a.iter().zip(b).map(|(x, y)| (x - &y).abs().max().item_f64()).fold(0.0, f64::max)
}

/// The error of `f`, which must fail; its message must name `op` and
/// contain every string of `words`.
#[track_caller]
fn fails(f: impl FnOnce() -> Tensor, op: &str, words: &[&str]) -> Error {
    let e = catch(f).expect_err("expected an error");
    let msg = e.to_string();
    assert_eq!(e.op, op, "{msg}");
    for w in words {
        assert!(msg.contains(w), "`{w}` not in: {msg}");
    }
    assert_eq!(xform::core::interp::stack_depth(), 0, "interpreter stack not restored");
    e
}

/// Mean and population variance of all elements.
fn moments(t: &Tensor) -> (f64, f64) {
    (t.mean().item_f64(), t.var().item_f64())
}

// ------------------------------------------------------------ initializers

#[test]
fn initializers_match_pytorch_distributions() {
    assert_eq!(fan_in_fan_out(&[16, 3, 5, 5]), (75, 400));
    assert_eq!(fan_in_fan_out(&[10, 64]), (64, 10));
    assert_eq!(fan_in_fan_out(&[8, 2, 3]), (6, 24));
    assert!(catch(|| fan_in_fan_out(&[5])).is_err());
    assert_eq!(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
    assert_eq!(calculate_gain(Nonlinearity::Relu), 2f64.sqrt());
    assert_eq!(calculate_gain(Nonlinearity::Linear), 1.0);
    assert_eq!(calculate_gain(Nonlinearity::Selu), 0.75);
    close(&[calculate_gain(Nonlinearity::LeakyRelu(5f64.sqrt()))], &[(1.0f64 / 3.0).sqrt()], 1e-15);

    // A uniform U(-b, b) has variance b^2 / 3. With n = 65536 draws the
    // sample variance's relative standard deviation is 0.89 / sqrt(n) =
    // 0.35%, the mean's standard deviation b / sqrt(3n) = 0.0023 b: the
    // tolerances (2% and 0.02 b) are over 5 standard deviations.
    let check_uniform = |t: &Tensor, b: f64| {
        let (m, var) = moments(t);
        let max = t.abs().max().item_f64();
        assert!(max <= b && max > 0.99 * b, "max |w| {max}, bound {b}");
        assert!(m.abs() < 0.02 * b, "mean {m}, bound {b}");
        assert!((var / (b * b / 3.0) - 1.0).abs() < 0.02, "variance {var}, want {}", b * b / 3.0);
    };
    let check_normal = |t: &Tensor, mean: f64, std: f64| {
        let (m, var) = moments(t);
        assert!((m - mean).abs() < 0.02 * std, "mean {m}, want {mean}");
        assert!((var / (std * std) - 1.0).abs() < 0.03, "variance {var}, want {}", std * std);
    };
    // Linear: weight and bias U(-1/sqrt(d_in), 1/sqrt(d_in)) (PyTorch's
    // kaiming_uniform_(a=sqrt(5)) and its bias rule).
    let lin = Linear::init(&Key::new(1), 256, 256, DType::F64);
    check_uniform(&lin.w, 1.0 / 16.0);
    let lin_b = Linear::init(&Key::new(2), 256, 65536, DType::F32);
    check_uniform(&lin_b.b, 1.0 / 16.0);
    // The weight and bias come from different keys.
    let small = Linear::init(&Key::new(3), 4, 4, DType::F64);
    assert_ne!(v(&small.w.index(0)), v(&small.b));
    // kaiming_uniform with PyTorch's default gain equals fan_in_uniform's bound.
    let fan = 75;
    let g = calculate_gain(Nonlinearity::LeakyRelu(5f64.sqrt()));
    check_uniform(&init::kaiming_uniform(&Key::new(4), [256, 256], fan, g, DType::F64), 1.0 / (fan as f64).sqrt());
    check_uniform(&init::fan_in_uniform(&Key::new(5), [256, 256], fan, DType::F64), 1.0 / (fan as f64).sqrt());
    check_normal(&init::kaiming_normal(&Key::new(6), [256, 256], 50, 2f64.sqrt(), DType::F64), 0.0, 0.2);
    // xavier: b = gain * sqrt(6 / (fan_in + fan_out)), std = gain * sqrt(2 / (fan_in + fan_out)).
    check_uniform(&init::xavier_uniform(&Key::new(7), [256, 256], 30, 90, 2.0, DType::F64), 2.0 * 0.05f64.sqrt());
    check_normal(&init::xavier_normal(&Key::new(8), [256, 256], 100, 100, 1.0, DType::F64), 0.0, 0.1);
    check_uniform(&init::uniform(&Key::new(9), [65536], -2.0, 2.0, DType::F32), 2.0);
    check_normal(&init::normal(&Key::new(10), [65536], 3.0, 0.5, DType::F64), 3.0, 0.5);
    assert_eq!(v(&init::fan_in_uniform(&Key::new(0), [3], 0, DType::F32)), vec![0.0; 3]);
    assert!(catch(|| init::kaiming_uniform(&Key::new(0), [3], 0, 1.0, DType::F32)).is_err());
    assert!(catch(|| init::normal(&Key::new(0), [3], 0.0, -1.0, DType::F32)).is_err());
    assert!(catch(|| init::uniform(&Key::new(0), [3], 1.0, 0.0, DType::F32)).is_err());

    // Embedding N(0, 1); the normalization layers weight 1, bias 0.
    let emb = Embedding::init(&Key::new(11), 256, 256, DType::F64);
    check_normal(&emb.weight, 0.0, 1.0);
    let ln = LayerNorm::new(&[3, 4], DType::F32);
    assert_eq!((v(ln.weight.as_ref().unwrap()), v(ln.bias.as_ref().unwrap())), (vec![1.0; 12], vec![0.0; 12]));
    assert_eq!(ln.eps, 1e-5);
    let gn = GroupNorm::new(2, 6, DType::F32);
    assert_eq!((v(gn.weight.as_ref().unwrap()), v(gn.bias.as_ref().unwrap())), (vec![1.0; 6], vec![0.0; 6]));
    let bn = BatchNorm::new(5, DType::F32);
    assert_eq!((bn.eps, bn.momentum), (1e-5, 0.1));
    assert_eq!((v(bn.weight.as_ref().unwrap()), v(bn.bias.as_ref().unwrap())), (vec![1.0; 5], vec![0.0; 5]));
    let st = bn.init_stats(DType::F32);
    assert_eq!((v(&st.mean), v(&st.var)), (vec![0.0; 5], vec![1.0; 5]));

    // MultiheadAttention: in_proj Xavier over [3E, E] (bound sqrt(6 / 4E)),
    // out_proj Linear's U(-1/sqrt(E), 1/sqrt(E)), biases zero.
    let e = 256;
    let mha = MultiHeadAttention::init(&Key::new(12), e, 8, DType::F64);
    assert_eq!(mha.in_proj.w.shape().dims(), &[e, 3 * e]);
    check_uniform(&mha.in_proj.w, (6.0 / (4 * e) as f64).sqrt());
    check_uniform(&mha.out_proj.w, 1.0 / (e as f64).sqrt());
    assert_eq!((v(&mha.in_proj.b), v(&mha.out_proj.b)), (vec![0.0; 3 * e], vec![0.0; e]));
}

// ----------------------------------------------------------- normalization

#[test]
fn layer_norm_matches_pytorch() {
    let x = det(&[2, 3, 4], 0.1);
    let mut ln = LayerNorm::new(&[4], DType::F64);
    ln.weight = Some(det(&[4], 1.0) + 1.0);
    ln.bias = Some(det(&[4], 2.0));
    close(&v(&ln.forward(&x)), &LN, 1e-12);
    // One example (no leading axes) is the same row.
    close(&v(&ln.forward(&x.index(1).index(2))), &LN[20..24], 1e-12);
    let ln2 = LayerNorm::new(&[3, 4], DType::F64).without_affine();
    assert_eq!(ln2.paths(), Vec::<String>::new());
    close(&v(&ln2.forward(&x)), &LN2, 1e-12);
    // f32 and bf16 (computed in f32, cast back).
    close(&v(&ln.forward(&x.cast(DType::F32))), &LN, 2e-6);
    let y16 = tree_cast(&ln, DType::BF16).forward(&x.cast(DType::BF16));
    assert_eq!(y16.dtype(), DType::BF16);
    close(&v(&y16), &LN, 2e-2);
    // Derivatives against finite differences, in the input and the parameters.
    check_grads(|x: &Tensor| ln.forward(x), &x, 2, Modes::Both).unwrap();
    check_grads(|p: &LayerNorm| p.forward(&x), &ln, 1, Modes::Rev).unwrap();
    // grad keeps the configuration.
    let g = grad(|p: &LayerNorm| p.forward(&x).powi(2).sum())(&ln.clone().with_eps(1e-3));
    assert_eq!((g.eps, g.normalized_shape.clone()), (1e-3, vec![4]));
    assert_eq!(ln.paths(), vec![".weight", ".bias"]);
    fails(|| ln.forward(&det(&[2, 5], 0.0)), "LayerNorm", &["normalized_shape [4]", "[2, 5]"]);
    fails(|| ln.forward(&Tensor::zeros([3, 4], DType::I32)), "LayerNorm", &["float"]);
    assert!(catch(|| LayerNorm::new(&[4], DType::F32).with_eps(-1.0)).is_err());
}

#[test]
fn group_norm_matches_pytorch() {
    let x = det(&[2, 6, 3], 0.3);
    let mut gn = GroupNorm::new(3, 6, DType::F64);
    gn.weight = Some(det(&[6], 1.5) + 1.0);
    gn.bias = Some(det(&[6], 2.5));
    close(&v(&gn.forward(&x)), &GN, 1e-12);
    close(&v(&gn.forward(&x.cast(DType::F32))), &GN, 5e-6);
    // 2-D spatial input: the same numbers reshaped [2, 6, 3, 1].
    close(&v(&gn.forward(&x.reshape(&[2, 6, 3, 1]))), &GN, 1e-12);
    check_grads(|x: &Tensor| gn.forward(x), &x, 2, Modes::Both).unwrap();
    check_grads(|p: &GroupNorm| p.forward(&x), &gn, 1, Modes::Rev).unwrap();
    fails(|| gn.forward(&det(&[2, 4, 3], 0.0)), "GroupNorm", &["num_channels = 6", "[2, 4, 3]"]);
    fails(|| gn.forward(&det(&[6], 0.0)), "GroupNorm", &["[N, C, *]"]);
    let e = catch(|| GroupNorm::new(4, 6, DType::F32)).unwrap_err();
    assert!(e.to_string().contains("num_channels (6) must be divisible by num_groups (4)"), "{e}");
}

#[test]
fn batch_norm_train_eval_and_running_stats() {
    let x = det(&[4, 3, 2], 0.7);
    let mut bn = BatchNorm::new(3, DType::F64);
    bn.weight = Some(det(&[3], 1.1) + 1.0);
    bn.bias = Some(det(&[3], 2.1));
    let stats = BatchNormStats { mean: det(&[3], 3.0), var: det(&[3], 4.0).powi(2) + 0.5 };
    // Train: batch statistics (biased variance), running stats updated with
    // momentum 0.1 and the unbiased variance.
    let (y, new) = bn.forward(&x, &stats, true);
    close(&v(&y), &BN_TRAIN, 1e-12);
    close(&v(&new.mean), &BN_RM, 1e-12);
    close(&v(&new.var), &BN_RV, 1e-12);
    // Eval: the running statistics, returned unchanged.
    let (y, same) = bn.forward(&x, &stats, false);
    close(&v(&y), &BN_EVAL, 1e-12);
    assert_eq!((v(&same.mean), v(&same.var)), (v(&stats.mean), v(&stats.var)));
    // The functional form with other momentum and eps.
    let (_, m0) = batch_norm(&x, None, None, &stats, true, 0.0, 1e-3);
    assert_eq!(v(&m0.mean), v(&stats.mean));
    let (_, m1) = batch_norm(&x, None, None, &stats, true, 1.0, 1e-3);
    close(&v(&m1.mean), &v(&x.mean_axes(&[0, 2], false)), 1e-14);
    // BatchNorm1d on [N, C].
    let x2 = det(&[5, 3], 0.9);
    let bn1 = BatchNorm::new(3, DType::F64).without_affine();
    let (y1, s1) = bn1.forward(&x2, &bn1.init_stats(DType::F64), true);
    close(&v(&y1), &BN1D, 1e-12);
    close(&v(&s1.var), &BN1D_RV, 1e-12);
    // Derivatives in train mode (through the batch statistics) and eval mode.
    check_grads(|x: &Tensor| bn.forward(x, &stats, true).0, &x, 2, Modes::Both).unwrap();
    check_grads(|x: &Tensor| bn.forward(x, &stats, false).0, &x, 1, Modes::Both).unwrap();
    check_grads(|p: &BatchNorm| p.forward(&x, &stats, true).0, &bn, 1, Modes::Rev).unwrap();
    // The running statistics carry no gradient (PyTorch updates them under no_grad).
    let g = grad(|x: &Tensor| {
        let (_, s) = bn.forward(x, &stats, true);
        s.mean.sum() + s.var.sum()
    })(&x);
    assert_eq!(g.abs().max().item_f64(), 0.0);
    // A training step threads the statistics through: 200 steps on the same
    // batch converge to its statistics.
    let mut s = stats.clone();
    for _ in 0..200 {
        s = bn.forward(&x, &s, true).1;
    }
    close(&v(&s.mean), &v(&x.mean_axes(&[0, 2], false)), 1e-8);
    close(&v(&s.var), &v(&x.var_axes(&[0, 2], 1, false)), 1e-8);

    fails(|| bn.forward(&det(&[1, 3], 0.0), &stats, true).0, "BatchNorm", &["more than 1 value per channel"]);
    fails(|| bn.forward(&det(&[4, 5, 2], 0.0), &stats, true).0, "BatchNorm", &["C = 3", "[4, 5, 2]"]);
    fails(|| batch_norm(&x, Some(&det(&[4], 0.0)), None, &stats, true, 0.1, 1e-5).0, "BatchNorm", &["weight"]);
    fails(|| batch_norm(&x, None, None, &stats, true, 1.5, 1e-5).0, "BatchNorm", &["momentum"]);
}

// ------------------------------------------------------ dropout, embedding

#[test]
fn dropout_statistics_determinism_and_gradient() {
    let x = Tensor::ones([200_000], DType::F32);
    for p in [0.1, 0.5, 0.9] {
        let y = dropout(&x, p, &Key::new(7), true);
        let vals = v(&y);
        // Every element is 0 or 1 / (1 - p) (inverted dropout).
        let scale = 1.0 / (1.0 - p);
        assert!(vals.iter().all(|&a| a == 0.0 || (a - scale).abs() < 1e-6 * scale));
        // The kept fraction is 1 - p within 5 standard deviations
        // (sqrt(p (1 - p) / n) <= 0.0012), so the mean stays 1.
        let kept = vals.iter().filter(|&&a| a != 0.0).count() as f64 / vals.len() as f64;
        assert!((kept - (1.0 - p)).abs() < 0.006, "p {p}: kept {kept}");
        // The same key gives the same mask; another key another one.
        assert_eq!(vals, v(&dropout(&x, p, &Key::new(7), true)));
        assert_ne!(vals, v(&dropout(&x, p, &Key::new(8), true)));
    }
    // Identity out of training and at p = 0; zeros at p = 1 (x * 0).
    let z = det(&[3, 4], 0.0);
    assert_eq!(v(&dropout(&z, 0.5, &Key::new(0), false)), v(&z));
    assert_eq!(v(&Dropout::new(0.0).forward(&z, &Key::new(0), true)), v(&z));
    assert_eq!(v(&dropout(&z, 1.0, &Key::new(0), true)), vec![0.0; 12]);
    assert!(catch(|| Dropout::new(1.5)).is_err());
    fails(|| dropout(&z, -0.1, &Key::new(0), true), "Dropout", &["[0, 1]"]);
    // The gradient is the mask scaled: d/dx sum(dropout(x)) = dropout(1).
    let g = grad(|x: &Tensor| dropout(x, 0.3, &Key::new(4), true).sum())(&z);
    assert_eq!(v(&g), v(&dropout(&z.ones_like(), 0.3, &Key::new(4), true)));
    // vmap over keys equals a loop over them.
    let keys = Key::new(5).split_tensor(4);
    let ys = vmap(|(x, k): &(Tensor, Tensor)| dropout(x, 0.5, &Key::from_tensor(k.clone()), true))(&(
        z.unsqueeze(0).broadcast_to([4, 3, 4]).copy(),
        keys.clone(),
    ));
    for i in 0..4 {
        assert_eq!(v(&ys.index(i)), v(&dropout(&z, 0.5, &Key::from_tensor(keys.index(i)), true)));
    }
}

#[test]
fn embedding_gathers_rows_with_padding() {
    let emb = Embedding { weight: det(&[5, 3], 0.0), padding_idx: None };
    let ids = Tensor::from_vec(vec![4i64, 0, 4, 2], [2, 2]);
    let e = emb.forward(&ids);
    assert_eq!(e.shape().dims(), &[2, 2, 3]);
    let w = v(&emb.weight);
    let want: Vec<f64> = [4, 0, 4, 2].iter().flat_map(|&i| w[3 * i..3 * i + 3].to_vec()).collect();
    assert_eq!(v(&e), want);
    // The gradient of the table accumulates repeated ids.
    let g = grad(|p: &Embedding| p.forward(&ids).sum())(&emb);
    assert_eq!(v(&g.weight.sum_axis(1, false)), vec![3.0, 0.0, 3.0, 0.0, 6.0]);
    // padding_idx: the row is zeroed and gets no gradient.
    let padded = Embedding::init(&Key::new(1), 5, 3, DType::F64).with_padding_idx(4);
    assert_eq!(v(&padded.weight.index(4)), vec![0.0; 3]);
    assert_eq!(padded.paths(), vec![".weight"]);
    let g = grad(|p: &Embedding| p.forward(&ids).powi(2).sum() + p.forward(&ids).sum())(&padded);
    assert_eq!(g.padding_idx, Some(4));
    assert_eq!(v(&g.weight.index(4)), vec![0.0; 3]);
    assert_eq!(v(&g.weight.index(0)), v(&(padded.weight.index(0) * 2.0 + 1.0)));
    // Errors name the layer.
    let e = catch(|| emb.forward(&Tensor::from_vec(vec![1i32, 5], [2]))).unwrap_err();
    assert_eq!(e.op, "Embedding");
    assert!(matches!(e.kind, xform::ErrorKind::IndexOutOfRange { index: 5, size: 5 }), "{e}");
    fails(|| emb.forward(&Tensor::from_vec(vec![1.0f32], [1])), "Embedding", &["integers"]);
    assert!(catch(|| emb.clone().with_padding_idx(5)).is_err());
}

// ------------------------------------------------------------- attention

#[test]
fn scaled_dot_product_attention_matches_pytorch() {
    let (q, k, val) = (det(&[2, 3, 4], 0.2), det(&[2, 5, 4], 1.2), det(&[2, 5, 2], 2.2));
    let sdpa = |m: Option<&Tensor>, causal: bool, scale: Option<f64>| {
        scaled_dot_product_attention(&q, &k, &val, m, causal, scale)
    };
    close(&v(&sdpa(None, false, None)), &SDPA, 1e-12);
    close(&v(&sdpa(None, false, Some(0.3))), &SDPA_SCALE, 1e-12);
    close(&v(&sdpa(None, true, None)), &SDPA_CAUSAL, 1e-12);
    // The causal flag equals the additive causal mask.
    close(&v(&sdpa(Some(&causal_mask(3, 5, DType::F64)), false, None)), &SDPA_CAUSAL, 1e-12);
    // Bool mask, true = attend; row 2 fully masked gives zeros (torch >= 2.5).
    let bm: Vec<bool> = (0..15).map(|i| i % 3 != 1 && i / 5 != 2).collect();
    let bmask = Tensor::from_vec(bm, [3, 5]);
    close(&v(&sdpa(Some(&bmask), false, None)), &SDPA_BOOL, 1e-12);
    let fmask = det(&[3, 5], 4.0);
    close(&v(&sdpa(Some(&fmask), false, None)), &SDPA_FLOAT, 1e-12);
    // f32 inputs: softmax in f32.
    let o32 = scaled_dot_product_attention(
        &q.cast(DType::F32),
        &k.cast(DType::F32),
        &val.cast(DType::F32),
        None,
        false,
        None,
    );
    assert_eq!(o32.dtype(), DType::F32);
    close(&v(&o32), &SDPA, 2e-6);
    // Gradients are finite with a fully masked row, zero for its query,
    // and match finite differences.
    let gq = grad(|q: &Tensor| scaled_dot_product_attention(q, &k, &val, Some(&bmask), false, None).sum())(&q);
    assert!(v(&gq).iter().all(|a| a.is_finite()));
    assert_eq!(v(&gq.slice(s![.., 2, ..])), vec![0.0; 8]);
    let qkv = (q.clone(), k.clone(), val.clone());
    let f = |(q, k, x): &(Tensor, Tensor, Tensor)| scaled_dot_product_attention(q, k, x, Some(&bmask), false, None);
    check_grads(f, &qkv, 2, Modes::Both).unwrap();
    // Errors.
    let op = "scaled_dot_product_attention";
    fails(|| sdpa(Some(&bmask), true, None), op, &["is_causal"]);
    fails(
        || scaled_dot_product_attention(&q, &det(&[2, 5, 3], 0.0), &val, None, false, None),
        op,
        &["[2, 3, 4], [2, 5, 3]"],
    );
    fails(|| scaled_dot_product_attention(&q, &k, &det(&[2, 4, 2], 0.0), None, false, None), op, &["number S of keys"]);
    fails(|| sdpa(Some(&det(&[3, 4], 0.0)), false, None), op, &["[.., 3, 5]", "[3, 4]"]);
}

/// The MHA of the reference script: E = 4, two heads.
fn ref_mha() -> MultiHeadAttention {
    MultiHeadAttention {
        in_proj: Linear { w: det(&[4, 12], 0.5) * 0.5, b: det(&[12], 0.6) * 0.1 },
        out_proj: Linear { w: det(&[4, 4], 0.8) * 0.5, b: det(&[4], 0.9) * 0.1 },
        num_heads: 2,
    }
}

#[test]
fn multi_head_attention_matches_pytorch() {
    let mha = ref_mha();
    assert_eq!(mha.paths(), vec![".in_proj.w", ".in_proj.b", ".out_proj.w", ".out_proj.b"]);
    let (xq, xk, xv) = (det(&[2, 3, 4], 1.7), det(&[2, 5, 4], 2.7), det(&[2, 5, 4], 3.7));
    let (o, w) = mha.forward_with_weights(&xq, &xk, &xv, AttentionMasks::default());
    close(&v(&o), &MHA, 1e-12);
    close(&v(&w), &MHA_W, 1e-12);
    // Masks in PyTorch's convention: bool true = ignore.
    let mut kpm = vec![false; 10];
    kpm[3] = true;
    kpm[4] = true;
    kpm[5] = true;
    let kpm = Tensor::from_vec(kpm, [2, 5]);
    let mut am = vec![false; 15];
    am[9] = true; // [1, 4]
    am[0] = true; // [0, 0]
    let am = Tensor::from_vec(am, [3, 5]);
    let masks = AttentionMasks { key_padding_mask: Some(&kpm), attn_mask: Some(&am), is_causal: false };
    let (o, w) = mha.forward_with_weights(&xq, &xk, &xv, masks);
    close(&v(&o), &MHA_MASKED, 1e-12);
    close(&v(&w), &MHA_MASKED_W, 1e-12);
    close(&v(&mha.forward(&xq, &xk, &xv, masks)), &MHA_MASKED, 1e-12);
    // Float masks (-inf = forbidden) give the same; so does a 3-D attn_mask
    // [N * H, L, S] repeating the 2-D one.
    let to_f = |m: &Tensor| Tensor::where_(m, &Tensor::scalar(f64::NEG_INFINITY), &Tensor::scalar(0.0f64));
    let (kf, af) = (to_f(&kpm), to_f(&am));
    let fm = AttentionMasks { key_padding_mask: Some(&kf), attn_mask: Some(&af), is_causal: false };
    close(&v(&mha.forward(&xq, &xk, &xv, fm)), &MHA_MASKED, 1e-12);
    let am3 = am.unsqueeze(0).broadcast_to([4, 3, 5]).copy();
    let m3 = AttentionMasks { attn_mask: Some(&am3), ..masks };
    close(&v(&mha.forward(&xq, &xk, &xv, m3)), &MHA_MASKED, 1e-12);
    // One unbatched example is the batch's row.
    let kpm1 = kpm.index(1);
    let m1 = AttentionMasks { key_padding_mask: Some(&kpm1), ..masks };
    let o1 = mha.forward(&xq.index(1), &xk.index(1), &xv.index(1), m1);
    close(&v(&o1), &MHA_MASKED[12..], 1e-12);
    // is_causal builds the causal mask.
    let c = causal_mask(3, 5, DType::F64);
    let by_flag = mha.forward(&xq, &xk, &xv, AttentionMasks { is_causal: true, ..Default::default() });
    let by_mask = mha.forward(&xq, &xk, &xv, AttentionMasks { attn_mask: Some(&c), ..Default::default() });
    close(&v(&by_flag), &v(&by_mask), 1e-15);
    // Derivatives in the parameters and inputs.
    check_grads(|p: &MultiHeadAttention| p.forward(&xq, &xk, &xv, masks), &mha, 1, Modes::Rev).unwrap();
    let xs = (xq.clone(), xk.clone(), xv.clone());
    check_grads(|(q, k, x): &(Tensor, Tensor, Tensor)| mha.forward(q, k, x, masks), &xs, 1, Modes::Both).unwrap();
    // Errors name the layer and the shapes.
    let op = "MultiHeadAttention";
    let none = AttentionMasks::default();
    fails(|| mha.forward(&det(&[2, 3, 5], 0.0), &xk, &xv, none), op, &["E = 4", "[2, 3, 5]"]);
    fails(|| mha.forward(&xq, &xk, &det(&[2, 4, 4], 0.0), none), op, &["same [N, S]"]);
    fails(|| mha.forward(&det(&[4], 0.0), &xk, &xv, none), op, &["[N, L or S, E]"]);
    let bad = Tensor::from_vec(vec![false; 5], [5]);
    let bm = AttentionMasks { key_padding_mask: Some(&bad), ..none };
    fails(|| mha.forward(&xq, &xk, &xv, bm), op, &["key_padding_mask must be [2, 5]", "[5]"]);
    let bad = Tensor::from_vec(vec![false; 10], [2, 5]);
    let bm = AttentionMasks { attn_mask: Some(&bad), ..none };
    fails(|| mha.forward(&xq, &xk, &xv, bm), op, &["attn_mask must be [L, S] = [3, 5]", "[2, 5]"]);
    let e = catch(|| MultiHeadAttention::init(&Key::new(0), 10, 4, DType::F32)).unwrap_err();
    assert!(e.to_string().contains("embed_dim (10) must be divisible by num_heads (4)"), "{e}");
}

// ------------------------------------------------------- under transforms

/// A small model that uses every layer: ids `[T]` -> logits `[2]`.
#[derive(Clone, Debug)]
struct Tiny {
    emb: Embedding,
    ln: LayerNorm,
    mha: MultiHeadAttention,
    gn: GroupNorm,
    bn: BatchNorm,
    head: Linear,
}
impl_tree!(Tiny { emb, ln, mha, gn, bn, head });

impl Tiny {
    fn init(key: &Key) -> Tiny {
        let k = key.split(3);
        Tiny {
            emb: Embedding::init(&k[0], 7, 8, DType::F64).with_padding_idx(0),
            ln: LayerNorm::new(&[8], DType::F64),
            mha: MultiHeadAttention::init(&k[1], 8, 2, DType::F64),
            gn: GroupNorm::new(4, 8, DType::F64),
            bn: BatchNorm::new(8, DType::F64),
            head: Linear::init(&k[2], 8, 2, DType::F64),
        }
    }

    /// One example: `ids: [T]`, `pad: [T]` bool (true = padding), a dropout key.
    fn forward(&self, ids: &Tensor, pad: &Tensor, key: &Key, stats: &BatchNormStats) -> Tensor {
        let h = self.ln.forward(&self.emb.forward(ids));
        let masks = AttentionMasks { key_padding_mask: Some(pad), ..Default::default() };
        let h = &h + &dropout(&self.mha.forward(&h, &h, &h, masks), 0.2, key, true);
        let c = h.t().unsqueeze(0); // [1, C, T]
        let c = self.gn.forward(&c);
        let (c, _) = self.bn.forward(&c, stats, false); // eval: per-sample gradients see batches of one
        self.head.forward(&c.squeeze(0).mean_axis(1, false).tanh())
    }
}

type Example = (Tensor, Tensor, Tensor, Tensor); // ids, pad, key, label

#[test]
fn per_sample_gradients_of_every_layer_equal_a_loop() {
    let (b, t) = (6, 5);
    let model = Tiny::init(&Key::new(0));
    let stats = BatchNormStats { mean: det(&[8], 0.0) * 0.1, var: det(&[8], 1.0).powi(2) + 0.5 };
    let ids = Key::new(1).randint([b, t], 0, 7, DType::I32);
    let pad = Tensor::arange(0.0, t as f64, 1.0, DType::I64).unsqueeze(0).ge(
        &Tensor::from_vec(vec![5i64, 4, 3, 5, 2, 1], [b, 1]), // lengths per example
    );
    let keys = Key::new(2).split_tensor(b);
    let labels = Tensor::from_vec(vec![0i32, 1, 1, 0, 1, 0], [b]);
    let loss = |p: &Tiny, (ids, pad, key, y): &Example| {
        softmax_cross_entropy(&p.forward(ids, pad, &Key::from_tensor(key.clone()), &stats), y)
    };
    let per = vmap(|ex: &Example| grad(|p: &Tiny| loss(p, ex))(&model))(&(
        ids.clone(),
        pad.clone(),
        keys.clone(),
        labels.clone(),
    ));
    assert_eq!(per.mha.in_proj.w.shape().dims(), &[b, 8, 24]);
    assert_eq!(per.bn.momentum, 0.1);
    let each = unstack(&per);
    let mut worst = 0.0f64;
    for i in 0..b {
        let ex = (ids.index(i as isize), pad.index(i as isize), keys.index(i as isize), labels.index(i as isize));
        let gi = grad(|p: &Tiny| loss(p, &ex))(&model);
        worst = worst.max(max_diff(&gi, &each[i]));
        // The padding row of the embedding never gets a gradient.
        assert_eq!(v(&gi.emb.weight.index(0)), vec![0.0; 8]);
    }
    // f64 throughout: the batched and looped computations differ only by
    // summation order.
    assert!(worst < 1e-12, "per-sample gradients differ from a loop of grad by {worst}");
    // The gradients are not trivially zero.
    assert!(tree_norm(&per).item_f64() > 1e-3);
}

/// An ensemble member: LayerNorm, MHA and a BatchNorm in train mode.
#[derive(Clone, Debug)]
struct Member {
    ln: LayerNorm,
    mha: MultiHeadAttention,
    bn: BatchNorm,
}
impl_tree!(Member { ln, mha, bn });

fn member_forward(m: &Member, stats: &BatchNormStats, x: &Tensor) -> (Tensor, BatchNormStats) {
    let h = m.ln.forward(x); // [N, L, E]
    let h = m.mha.forward(&h, &h, &h, AttentionMasks { is_causal: true, ..Default::default() });
    let (y, s) = m.bn.forward(&h.transpose(1, 2), stats, true); // channels = E
    (y.transpose(1, 2), s)
}

#[test]
fn ensembles_under_vmap_equal_a_loop() {
    let n = 3;
    let members: Vec<Member> = Key::new(3)
        .split(n)
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut ln = LayerNorm::new(&[8], DType::F64);
            ln.bias = Some(det(&[8], i as f64) * 0.1);
            Member { ln, mha: MultiHeadAttention::init(k, 8, 4, DType::F64), bn: BatchNorm::new(8, DType::F64) }
        })
        .collect();
    let stats: Vec<BatchNormStats> = (0..n)
        .map(|i| BatchNormStats { mean: det(&[8], i as f64), var: det(&[8], i as f64 + 0.5).powi(2) + 1.0 })
        .collect();
    let x = det(&[4, 6, 8], 0.25);
    // Forward and updated running statistics of every member in one call.
    let (ys, new_stats) = vmap_with(
        |(m, s, x): &(Member, BatchNormStats, Tensor)| member_forward(m, s, x),
        VmapOptions { in_axes: Axes::Args(vec![Some(0), Some(0), None]), ..Default::default() },
    )(&(stack(&members), stack(&stats), x.clone()));
    assert_eq!(ys.shape().dims(), &[n, 4, 6, 8]);
    let new_stats = unstack(&new_stats);
    for i in 0..n {
        let (y, s) = member_forward(&members[i], &stats[i], &x);
        close(&v(&ys.index(i as isize)), &v(&y), 1e-12);
        assert!(max_diff(&new_stats[i], &s) < 1e-12);
    }
    // Gradients of the whole ensemble at once equal a loop.
    let loss = |m: &Member, s: &BatchNormStats| member_forward(m, s, &x).0.powi(2).mean();
    let g =
        vmap(|(m, s): &(Member, BatchNormStats)| grad(|m: &Member| loss(m, s))(m))(&(stack(&members), stack(&stats)));
    let g = unstack(&g);
    for i in 0..n {
        let gi = grad(|m: &Member| loss(m, &stats[i]))(&members[i]);
        assert!(max_diff(&gi, &g[i]) < 1e-12, "member {i}");
    }

    // Stacked embeddings, group norms and dropout keys on shared ids.
    let ids = Tensor::from_vec(vec![1i64, 4, 4, 0, 2, 3], [2, 3]);
    type Emb = (Embedding, GroupNorm, Tensor);
    let embs: Vec<Emb> = Key::new(4)
        .split(n)
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut gn = GroupNorm::new(2, 4, DType::F64);
            gn.weight = Some(det(&[4], i as f64) + 1.0);
            (Embedding::init(k, 5, 4, DType::F64).with_padding_idx(4), gn, k.fold_in(9).tensor().clone())
        })
        .collect();
    let run = |(e, gn): &(Embedding, GroupNorm), k: &Tensor| {
        let h = gn.forward(&e.forward(&ids).transpose(1, 2)); // [2, C = 4, 3]
        dropout(&h, 0.5, &Key::from_tensor(k.clone()), true).powi(2).sum()
    };
    let ge =
        vmap(|(e, gn, k): &Emb| grad(|p: &(Embedding, GroupNorm)| run(p, k))(&(e.clone(), gn.clone())))(&stack(&embs));
    let ge = unstack(&ge);
    for (i, (e, gn, k)) in embs.iter().enumerate() {
        let gi = grad(|p: &(Embedding, GroupNorm)| run(p, k))(&(e.clone(), gn.clone()));
        assert!(max_diff(&gi, &ge[i]) < 1e-12, "member {i}");
        assert_eq!(v(&ge[i].0.weight.index(4)), vec![0.0; 4]); // the padding row
        assert!(ge[i].0.weight.abs().max().item_f64() > 0.0);
    }
}

// ---------------------------------------------------------------- references
//
// PyTorch's formulas in numpy (float64), on the inputs of `det`:
//   det = lambda shape, a: (np.sin(np.arange(np.prod(shape)) * 0.37 + a) * 1.5).reshape(shape)
// LN:  x = det((2,3,4), .1); w = det((4,), 1.) + 1; b = det((4,), 2.)
//      (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
// LN2: the same over axes (-2, -1), no affine
// GN:  x = det((2,6,3), .3); g = x.reshape(2, 3, -1); ((g - g.mean(-1, keepdims=True))
//      / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(2, 6, 3) * w[:, None] + b[:, None]
//      with w = det((6,), 1.5) + 1, b = det((6,), 2.5)
// BN:  x = det((4,3,2), .7); w = det((3,), 1.1) + 1; b = det((3,), 2.1); rm = det((3,), 3.);
//      rv = det((3,), 4.)**2 + .5; mean, var = x.mean((0, 2)), x.var((0, 2))
//      BN_TRAIN = (x - mean) / sqrt(var + 1e-5) * w + b (per channel); BN_RM = .9 rm + .1 mean;
//      BN_RV = .9 rv + .1 var * 8 / 7; BN_EVAL = (x - rm) / sqrt(rv + 1e-5) * w + b
// BN1D: x = det((5,3), .9) normalized over axis 0; BN1D_RV = .9 + .1 * x.var(0) * 5 / 4
// SDPA: torch's reference implementation with _safe_softmax (fully masked rows 0):
//      q, k, v = det((2,3,4), .2), det((2,5,4), 1.2), det((2,5,2), 2.2);
//      softmax(q @ k.swapaxes(-1, -2) * scale + bias) @ v; scale 1/2 (SDPA_SCALE: .3);
//      bias: causal np.where(np.tril(ones((3, 5))), 0, -inf); bool mask where(m, 0, -inf) with
//      m = (arange(15).reshape(3, 5) % 3 != 1), row 2 all False; float mask det((3,5), 4.)
// MHA: F.multi_head_attention_forward (batch_first) with in_proj_weight.T = det((4,12), .5) * .5,
//      in_proj_bias = det((12,), .6) * .1, out_proj.weight.T = det((4,4), .8) * .5,
//      out_proj.bias = det((4,), .9) * .1, 2 heads; query, key, value = det((2,3,4), 1.7),
//      det((2,5,4), 2.7), det((2,5,4), 3.7); weights averaged over heads. MHA_MASKED:
//      key_padding_mask[0, 3:] = key_padding_mask[1, 0] = True, attn_mask[1, 4] = attn_mask[0, 0] = True
//      (true = ignore), softmax with fully masked rows 0.

#[rustfmt::skip]
const LN: [f64; 24] = [
    -1.9219288545268238, 0.2213885334738671, 2.0502171196851555, 2.782222090814231, 3.7003578977032308,
    2.793911348986925, 0.10792651895291266, -3.4920655423791214, 4.567783341960014, 1.9803643702243465,
    -0.777824383670271, -2.7983423101326306, -0.5480272272715045, -0.9698375309429215, 0.6944205264523072,
    3.7473699873487725, -1.7670256322266744, 0.021105443215037267, 1.8654101327529056, 2.9816137652709847,
    2.249391010279505, 3.5066579211950186, 1.2757437777570013, -3.762746059626914,
];
#[rustfmt::skip]
const LN2: [f64; 24] = [
    -0.34207632020832024, 0.24674753951773093, 0.7333414767449731, 1.0518472847850502, 1.1591566966980287,
    1.0407458869926942, 0.7126412032724458, 0.2192500752701655, -0.37264932244145194, -0.9829461831077371,
    -1.5290396896695064, -1.9370186478540732, -1.427669468121965, -1.4215872554559983, -1.24152111920175,
    -0.9118421661728008, -0.4771708960677363, 0.003661973839831773, 0.4655779702968763, 0.8460589301288337,
    1.0936085403393192, 1.1747221224940625, 1.0784213337694348, 0.8177400341518928,
];
#[rustfmt::skip]
const GN: [f64; 36] = [
    -3.9350829141917147, -0.5741497551332602, 1.91886369708612, 2.653066668495976, 2.563440644329908,
    1.1410820534716755, 3.183759159123498, 1.837320902647311, 0.35480349217634266, -1.417883978734375,
    -2.357287866269311, -2.9620996170884677, -2.5208184085605723, -2.3146773997799786, -1.7771743954907895,
    -1.3279599982989674, -0.801847986123502, -0.26312809861924324, -2.0075707806584244, 1.756893006049759,
    3.679577685145617, 2.9393845004191355, 0.7391881196341102, -3.1886150426020072, 3.505971151378277,
    1.7237308063974093, 0.023527405293714776, -1.6616466172043456, -2.3799000954707408, -2.596520450746384,
    -2.759841542642037, -2.296190500553005, -1.6131947066086976, -1.2292001924888136, -0.7696401907897965,
    -0.36267465724162395,
];
#[rustfmt::skip]
const BN_TRAIN: [f64; 24] = [
    2.6738915481910204, 3.453748210887369, 3.5206083374953545, 3.4504446996597737, 2.9029914149208524,
    1.9454772624321577, 1.253195612398616, 0.022582130896960484, -1.713859017315803, -2.701541084421332,
    -3.5615772205061558, -3.7321171583498356, -2.528359415140898, -1.8202757277645847, -1.350754470134471,
    -0.0863799587952121, 1.1164693911124102, 2.2801841570600554, 3.4646318807105954, 3.8390981596074045,
    3.444681527416816, 2.9036026299265307, 1.9247906202017058, 0.6882777488107981,
];
#[rustfmt::skip]
const BN_RM: [f64; 3] = [
    0.2253445840640619, -0.2672014523415911, -0.73850020810125,
];
#[rustfmt::skip]
const BN_RV: [f64; 3] = [
    1.7351432628798409, 2.375641371656338, 2.589008801651264,
];
#[rustfmt::skip]
const BN_EVAL: [f64; 24] = [
    2.6133704592188023, 3.2239894291775384, 3.8151031075396933, 3.7679415517327657, 3.507307445632579,
    2.926531242775309, 1.5009815672155813, 0.5374250927555297, 0.29667630002494727, -0.3672092162371068,
    -0.41374961178551295, -0.5171898975284823, -1.4599333626829458, -0.9055118227868904, 0.5407425413702218,
    1.3906110903345312, 2.423699987077962, 3.1295463092648186, 3.232511219879245, 3.525714092204107,
    3.7640677478972515, 3.400373341405146, 2.9139838464854035, 2.1639821380364728,
];
#[rustfmt::skip]
const BN1D: [f64; 15] = [
    1.0294667453277995, 1.3442097103783772, 1.5344441864394038, 1.1900937364166913, 0.9885093961745917,
    0.6650746207975492, 0.024607352962502955, -0.3958702776985644, -0.8026070150459532, -1.172513524143482,
    -1.2713306945564333, -1.238480533980341, -1.0716543105635117, -0.6655181342979708, -0.15843125821065893,
];
#[rustfmt::skip]
const BN1D_RV: [f64; 3] = [
    1.0616171583533462, 1.0561338615311264, 1.0411770939154201,
];
#[rustfmt::skip]
const SDPA: [f64; 12] = [
    -0.2416670368541339, -0.25831027155300734, 0.016878640090572685, -0.06302709129235688, -0.5768240825103541,
    -0.9881694090849843, 0.689533301815604, 1.0897132347332037, 1.1074193065927567, 0.9597669746324742,
    1.0600681589719103, 0.8152023184822794,
];
#[rustfmt::skip]
const SDPA_SCALE: [f64; 12] = [
    -0.2634080667444569, -0.32233387376634415, -0.0640487092232753, -0.16285775363887361, -0.5122924404787268,
    -0.8842509242013784, 0.7301676617701807, 1.075893593152534, 0.9499252416971667, 0.8764997369532473,
    0.9062821333763724, 0.723018628939991,
];
#[rustfmt::skip]
const SDPA_BOOL: [f64; 12] = [
    0.9356904214248535, 0.5686768473321436, 0.017870906240443706, -0.06161353576473009, 0.0, 0.0, 1.2444237551664503,
    1.4159325187171727, 1.0775330496413247, 0.8897750231629654, 0.0, 0.0,
];
#[rustfmt::skip]
const SDPA_FLOAT: [f64; 12] = [
    -0.2632368288777129, -0.26705079351140215, -0.9704080661140154, -0.7653167076035182, -0.5087059636786196,
    -0.9378136406792632, 0.6736688355584826, 1.077262874703573, 1.2184189342004341, 0.9606419182400906,
    0.9550314972034157, 0.8109964528747944,
];
#[rustfmt::skip]
const SDPA_CAUSAL: [f64; 12] = [
    1.2127446057293851, 0.8114583305654823, 1.1637340651899661, 0.7543647345114822, -0.5113984721909421,
    -0.9544466638966008, -0.560814997245354, -0.019777387700281878, -0.33719701793014356, 0.18977404406145718,
    -0.4549240095727204, 0.06627149729325973,
];
#[rustfmt::skip]
const MHA: [f64; 24] = [
    0.1676425001460176, 0.18454958984171915, 0.17647875831360715, 0.14452235474702937, 0.07460027785807473,
    0.10641992407485813, 0.12383613280654153, 0.12449170190442047, 0.27409515246827554, 0.30937361247913286,
    0.30277980537816407, 0.255206172023538, 0.23666438897181408, 0.2667108968219255, 0.26065933598456725,
    0.21932875682992078, 0.10319489673915296, 0.12990955785910657, 0.13904156975611576, 0.12935495746012485,
    -0.004642945157012593, 0.03056791090004568, 0.06164154361733516, 0.08437228257957183,
];
#[rustfmt::skip]
const MHA_W: [f64; 30] = [
    0.2649537170723552, 0.1780598075461422, 0.1269796841445331, 0.16904434645431948, 0.26096244478264985,
    0.17771497719247117, 0.22008326649449295, 0.23972253176752298, 0.18889973082184364, 0.17357949372366926,
    0.16964611054923706, 0.20155740860267624, 0.24658561973271872, 0.21136090870530053, 0.17084995241006748,
    0.19395775290228232, 0.13739016244767235, 0.17674566853780638, 0.2724256453325623, 0.21948077077967665,
    0.20961513246262337, 0.11914543397313437, 0.15126068705794063, 0.274702770211802, 0.2452759762944996,
    0.20886949595720233, 0.21425603377347258, 0.18507648533289062, 0.18646299287058027, 0.2053349920658543,
];
#[rustfmt::skip]
const MHA_MASKED: [f64; 24] = [
    -0.3290763721690054, -0.2542581826863669, -0.14502734095618433, -0.01616772898159402, -0.1849264107752624,
    -0.137010370199088, -0.07055061876116936, 0.005457827958159522, 0.02002260138017843, 0.07048418000601578,
    0.1114060555242746, 0.13724964405675527, 0.35932345140390093, 0.3887850891650855, 0.36562648898107813,
    0.2929820587448797, 0.37090257710397667, 0.398988130832981, 0.373072512791676, 0.2966632803062923,
    0.06664090296284386, 0.10318935528582107, 0.12577161245401114, 0.1313312718978572,
];
#[rustfmt::skip]
const MHA_MASKED_W: [f64; 30] = [
    0.0, 0.5929492787541777, 0.4070507212458223, 0.0, 0.0, 0.2827614247049358, 0.34472964906527587,
    0.3725089262297883, 0.0, 0.0, 0.27523294638071616, 0.32639941198609934, 0.3983676416331844, 0.0, 0.0, 0.0,
    0.17112552368090309, 0.219410773070835, 0.33710903783577134, 0.27235466541249065, 0.0, 0.21710389695524593,
    0.27474180493750555, 0.5081542981072485, 0.0, 0.0, 0.2702774172461492, 0.23377339455250223, 0.23613485860149724,
    0.25981432959985135,
];
