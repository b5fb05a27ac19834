//! A straight-through estimator with `custom_vjp`: training a network with
//! binary weights (BinaryConnect: Courbariaux, Bengio and David, 2015) on
//! the UCI digits.
//!
//! The network keeps real-valued latent weights `W` and computes with
//! `sign(W)` times one real scale per layer. The derivative of `sign` (and of
//! `round`) is zero almost everywhere, so plain `grad` gives the latent
//! weights no gradient at all and only the biases learn. The
//! straight-through estimator keeps `sign` in the forward pass and lets the
//! cotangent through in the backward pass where `|w| <= 1` (the gradient
//! of the clipped identity `hardtanh`); the latent weights are clipped to
//! `[-1, 1]` after each step.
//!
//! It checks that the estimator's gradient is exactly `dL/d sign(W)`
//! masked by `|W| <= 1`, trains the network both ways, and asserts the
//! test accuracy.
//!
//! Run: `cargo run --release --example straight_through`

use std::time::Instant;
use xform::data::{batches, digits};
use xform::nn::{accuracy, init::uniform, softmax_cross_entropy, tree_map, tree_sub, Adam};
use xform::prelude::*;

const HIDDEN: usize = 128;
const BATCH: usize = 64;
const EPOCHS: usize = 20;
const LR: f64 = 1e-2;

/// `sign(w)` forward; the cotangent passes where `|w| <= 1`, 0 elsewhere.
fn binarize_ste(w: &Tensor) -> Tensor {
    custom_vjp(
        |w: &Tensor| w.sign(),
        |w: &Tensor| (w.sign(), w.clone()),
        |w: &Tensor, ct: &Tensor| ct * w.abs().le_scalar(1.0).cast(ct.dtype()),
    )
    .call(w)
}

/// `sign(w)` with its own derivative: zero.
fn binarize_plain(w: &Tensor) -> Tensor {
    w.sign()
}

type Binarize = fn(&Tensor) -> Tensor;

/// A two-layer perceptron with binary weights; one scale per layer (as
/// XNOR-Net's) and the biases stay real.
#[derive(Clone, Debug, Tree)]
struct BinaryMlp {
    w1: Tensor,
    s1: Tensor,
    b1: Tensor,
    w2: Tensor,
    s2: Tensor,
    b2: Tensor,
}

impl BinaryMlp {
    fn init(key: &Key) -> BinaryMlp {
        let k = key.split(2);
        BinaryMlp {
            w1: uniform(&k[0], [64, HIDDEN], -1.0, 1.0, DType::F32),
            s1: Tensor::scalar(1.0f32 / 8.0),
            b1: Tensor::zeros([HIDDEN], DType::F32),
            w2: uniform(&k[1], [HIDDEN, 10], -1.0, 1.0, DType::F32),
            s2: Tensor::scalar(1.0 / (HIDDEN as f32).sqrt()),
            b2: Tensor::zeros([10], DType::F32),
        }
    }

    /// Logits of images `[N, 64]`, each layer `(x @ binarize(W)) * s + b`.
    fn forward(&self, x: &Tensor, binarize: Binarize) -> Tensor {
        let layer = |x: &Tensor, w: &Tensor, s: &Tensor, b: &Tensor| x.matmul(&binarize(w)) * s + b;
        let h = layer(x, &self.w1, &self.s1, &self.b1).relu();
        layer(&h, &self.w2, &self.s2, &self.b2)
    }
}

fn loss(p: &BinaryMlp, x: &Tensor, y: &Tensor, binarize: Binarize) -> Tensor {
    softmax_cross_entropy(&p.forward(x, binarize), y)
}

/// Trains with Adam, clipping the latent weights to [-1, 1] after each
/// step; returns the final parameters and the test accuracy.
fn train(binarize: Binarize, name: &str) -> (BinaryMlp, f64) {
    let data = digits();
    let mut params = BinaryMlp::init(&Key::new(0));
    let adam = Adam::new(LR);
    let mut state = adam.init(&params);
    let start = Instant::now();
    let mut acc = accuracy(&params.forward(&data.test_x, binarize), &data.test_y).item_f64();
    println!("{name}: test accuracy at initialization {:.2}%", acc * 100.0);
    for epoch in 0..EPOCHS {
        for (xb, yb) in batches(&data.train_x, &data.train_y, BATCH, Some(epoch as u64), true) {
            let g = grad(|p: &BinaryMlp| loss(p, &xb, &yb, binarize))(&params);
            (params, state) = adam.update(&params, &g, &state);
            params.w1 = params.w1.clamp(-1.0, 1.0);
            params.w2 = params.w2.clamp(-1.0, 1.0);
        }
        if (epoch + 1) % 5 == 0 {
            acc = accuracy(&params.forward(&data.test_x, binarize), &data.test_y).item_f64();
            let train_loss = loss(&params, &data.train_x, &data.train_y, binarize).item_f64();
            println!("{name}: epoch {:2}: train loss {train_loss:.4}, test accuracy {:.2}%", epoch + 1, acc * 100.0);
        }
    }
    println!("{name}: trained in {:.2} s", start.elapsed().as_secs_f64());
    (params, acc)
}

fn main() {
    // The derivative of round and sign is zero almost everywhere.
    let x = Tensor::from_vec(vec![-1.7f32, -0.4, 0.3, 0.6, 2.2], [5]);
    let g_round = grad(|x: &Tensor| x.round().sum())(&x);
    let g_sign = grad(|x: &Tensor| x.sign().sum())(&x);
    let g_ste = grad(|x: &Tensor| binarize_ste(x).sum())(&x);
    println!("x                      = {x}");
    println!("plain grad of round(x) = {g_round}");
    println!("plain grad of sign(x)  = {g_sign}");
    println!("STE grad of sign(x)    = {g_ste}");
    assert!(g_round.abs().max().item_f64() == 0.0 && g_sign.abs().max().item_f64() == 0.0);
    assert_eq!(g_ste.to_vec::<f32>(), vec![0.0, 1.0, 1.0, 1.0, 0.0], "the STE passes the cotangent where |x| <= 1");

    // Forward mode through a custom_vjp needs a JVP rule, as in JAX; with
    // one (here the STE's own linearization), jvp uses it.
    let t = x.ones_like();
    let err = catch(|| jvp(binarize_ste, &x, &t)).expect_err("jvp of a custom_vjp without a JVP rule is an error");
    println!("jvp without a JVP rule: error: {err}");
    let ste_fwd = custom_vjp(
        |w: &Tensor| w.sign(),
        |w: &Tensor| (w.sign(), w.clone()),
        |w: &Tensor, ct: &Tensor| ct * w.abs().le_scalar(1.0).cast(ct.dtype()),
    )
    .with_jvp(|w: &Tensor, t: &Tensor| (w.sign(), t * w.abs().le_scalar(1.0).cast(t.dtype())));
    let (_, tangent) = jvp(|w: &Tensor| ste_fwd.call(w), &x, &t);
    println!("jvp with a JVP rule: tangent {tangent}");
    assert_eq!(tangent.to_vec::<f32>(), g_ste.to_vec::<f32>(), "the JVP rule's tangent is the STE's mask");
    // vmap batches fwd and bwd like any code: per-row STE gradients.
    let rows = x.reshape(&[5, 1]) * Tensor::from_vec(vec![1.0f32, 0.5], [2]);
    let per_row = vmap(grad(|r: &Tensor| (binarize_ste(r) * r).sum()))(&rows);
    let want: Vec<f32> =
        rows.to_vec::<f32>().iter().map(|&r| r.signum() + if r.abs() <= 1.0 { r } else { 0.0 }).collect();
    println!("vmap(grad) of sum(ste(r) * r) per row: {per_row}");
    assert_eq!(per_row.to_vec::<f32>(), want, "vmap(grad) through the STE");

    // The estimator's gradient is dL/d sign(W), masked by |W| <= 1: the
    // gradient with the binary weights as the variables.
    let data = digits();
    let (xb, yb) = (data.train_x.narrow(0, 0, BATCH), data.train_y.narrow(0, 0, BATCH));
    let mut p = BinaryMlp::init(&Key::new(1));
    p.w1 = &p.w1 * 1.5; // some latent weights beyond the clip
    let g = grad(|p: &BinaryMlp| loss(p, &xb, &yb, binarize_ste))(&p);
    let signs = tree_map(&p, |l| l.sign());
    let identity: Binarize = |w| w.clone();
    let mut g_bin = grad(|s: &BinaryMlp| loss(s, &xb, &yb, identity))(&BinaryMlp {
        s1: p.s1.clone(),
        b1: p.b1.clone(),
        s2: p.s2.clone(),
        b2: p.b2.clone(),
        ..signs
    });
    g_bin.w1 = &g_bin.w1 * p.w1.abs().le_scalar(1.0).cast(DType::F32);
    g_bin.w2 = &g_bin.w2 * p.w2.abs().le_scalar(1.0).cast(DType::F32);
    let diff = tree_sub(&g, &g_bin).leaves().iter().map(|l| l.abs().max().item_f64()).fold(0.0, f64::max);
    let scale = g_bin.leaves().iter().map(|l| l.abs().max().item_f64()).fold(0.0, f64::max);
    let clipped = p.w1.abs().gt_scalar(1.0).cast(DType::F32).mean().item_f64();
    println!(
        "STE gradient vs masked dL/d sign(W) ({:.0}% of W1 clipped): max difference {:.1e} (largest entry {scale:.1e})",
        clipped * 100.0,
        diff
    );
    assert!(diff <= 1e-6 * scale, "the STE gradient differs from the masked gradient at the binary weights");

    let g_plain = grad(|p: &BinaryMlp| loss(p, &xb, &yb, binarize_plain))(&p);
    let g_w = g_plain.w1.abs().max().item_f64().max(g_plain.w2.abs().max().item_f64());
    println!("plain grad: largest weight gradient {g_w:e}");
    assert_eq!(g_w, 0.0, "plain grad of sign gives the weights no gradient");

    println!("\nbinary-weight MLP 64-{HIDDEN}-10 on the digits, Adam lr {LR}, batch {BATCH}, {EPOCHS} epochs");
    let (_, acc_plain) = train(binarize_plain, "plain grad");
    let (trained, acc_ste) = train(binarize_ste, "STE");
    let flips = (trained.w1.sign() - BinaryMlp::init(&Key::new(0)).w1.sign()).abs().gt_scalar(0.0);
    println!(
        "plain grad reaches {:.2}% (only the scales and biases learn); the STE reaches {:.2}% ({:.1}% of W1's signs flipped)",
        acc_plain * 100.0,
        acc_ste * 100.0,
        flips.cast(DType::F32).mean().item_f64() * 100.0
    );
    assert!(acc_ste > 0.9, "the binary-weight network trained with the STE should reach 90% test accuracy");
    assert!(acc_ste > acc_plain + 0.3, "the STE should beat plain grad by a wide margin");
}
