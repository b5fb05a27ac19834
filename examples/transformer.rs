//! A small transformer encoder trained with per-sample gradients on a
//! synthetic sequence task.
//!
//! Task: a sequence of 12 tokens from a vocabulary of 8; the label is 1 if
//! the bigram `3 5` (a 3 immediately followed by a 5) occurs in it. Half of
//! the sequences are positive (the bigram inserted at a random place); the
//! other half have every `3 5` removed and, half of the time, the reversed
//! bigram `5 3` inserted, so that the tokens' counts alone do not decide:
//! the model must use their order. Chance (and the majority class) is 50%.
//!
//! Model: token and learned positional embeddings, two pre-LayerNorm
//! encoder blocks (multi-head self-attention and a GELU MLP, each with a
//! residual connection), a final LayerNorm, mean pooling over the sequence
//! and a linear head. Every step takes one gradient per example with
//! `vmap(grad(loss))` (as DP-SGD would before clipping), averages them and
//! takes an Adam step. Once, the per-sample gradients are checked against
//! a loop of `grad`.
//!
//! Run: `cargo run --release --example transformer`

use std::time::Instant;
use xform::data::batches;
use xform::nn::{
    accuracy, softmax_cross_entropy, tree_map, tree_numel, tree_sub, unstack, Activation, Adam, AttentionMasks,
    Embedding, LayerNorm, Linear, Mlp, MultiHeadAttention,
};
use xform::prelude::*;

const VOCAB: usize = 8;
const LEN: usize = 12;
const EMBED: usize = 32;
const HEADS: usize = 4;
const BLOCKS: usize = 2;
const TRAIN: usize = 2048;
const TEST: usize = 1024;
const BATCH: usize = 64;
const EPOCHS: usize = 10;
const LR: f64 = 3e-3;

/// A pre-LayerNorm encoder block: `h + attn(ln1(h))`, then `h + mlp(ln2(h))`.
#[derive(Clone, Debug, Tree)]
struct Block {
    ln1: LayerNorm,
    attn: MultiHeadAttention,
    ln2: LayerNorm,
    mlp: Mlp,
}

#[derive(Clone, Debug, Tree)]
struct Encoder {
    tokens: Embedding,
    positions: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    head: Linear,
}

impl Encoder {
    fn init(key: &Key) -> Encoder {
        let k = key.split(3 + BLOCKS);
        let blocks = (0..BLOCKS)
            .map(|i| {
                let kb = k[3 + i].split(2);
                Block {
                    ln1: LayerNorm::new(&[EMBED], DType::F32),
                    attn: MultiHeadAttention::init(&kb[0], EMBED, HEADS, DType::F32),
                    ln2: LayerNorm::new(&[EMBED], DType::F32),
                    mlp: Mlp::init(&kb[1], &[EMBED, 2 * EMBED, EMBED], DType::F32).with_activation(Activation::Gelu),
                }
            })
            .collect();
        Encoder {
            tokens: Embedding::init(&k[0], VOCAB, EMBED, DType::F32),
            positions: Embedding::init(&k[1], LEN, EMBED, DType::F32),
            blocks,
            ln_f: LayerNorm::new(&[EMBED], DType::F32),
            head: Linear::init(&k[2], EMBED, 2, DType::F32),
        }
    }

    /// Logits `[.., 2]` for token ids `[.., LEN]` (one sequence or a batch).
    fn forward(&self, ids: &Tensor) -> Tensor {
        let pos = Tensor::arange(0.0, LEN as f64, 1.0, DType::I64);
        let mut h = self.tokens.forward(ids) + self.positions.forward(&pos);
        for b in &self.blocks {
            let a = b.ln1.forward(&h);
            h = &h + &b.attn.forward(&a, &a, &a, AttentionMasks::default());
            h = &h + &b.mlp.forward(&b.ln2.forward(&h));
        }
        self.head.forward(&self.ln_f.forward(&h).mean_axis(-2, false))
    }
}

fn loss(p: &Encoder, ids: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.forward(ids), y)
}

/// One gradient per example: every leaf gains a leading axis of the batch.
fn per_sample_grads(p: &Encoder, ids: &Tensor, y: &Tensor) -> Encoder {
    vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Encoder| loss(p, x, y))(p))(&(ids.clone(), y.clone()))
}

/// splitmix64, for the synthetic data.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

fn has_bigram(s: &[i32]) -> bool {
    s.windows(2).any(|w| w == [3, 5])
}

/// `n` sequences `[n, LEN]` (i32) and labels `[n]`, balanced.
fn dataset(rng: &mut Rng, n: usize) -> (Tensor, Tensor) {
    let (mut xs, mut ys) = (Vec::with_capacity(n * LEN), Vec::with_capacity(n));
    for i in 0..n {
        let positive = i % 2 == 0;
        let mut s: Vec<i32> = (0..LEN).map(|_| rng.below(VOCAB) as i32).collect();
        let at = rng.below(LEN - 1);
        let pair = if positive { [3, 5] } else { [5, 3] };
        let insert = positive || rng.below(2) == 0;
        if insert {
            s[at..at + 2].copy_from_slice(&pair);
        }
        // Break every other `3 5` by resampling one of its tokens outside
        // the inserted pair, until none is left.
        let inserted = |j: usize| insert && (j == at || j == at + 1);
        while let Some(j) = (0..LEN - 1).find(|&j| s[j..j + 2] == [3, 5] && !(positive && j == at)) {
            // (The inserted `5 3` can only be followed by a 5: resample that.)
            let k = if inserted(j) { j + 1 } else { j };
            s[k] = rng.below(VOCAB) as i32;
        }
        assert_eq!(has_bigram(&s), positive);
        ys.push(positive as i32);
        xs.extend(s);
    }
    (Tensor::from_vec(xs, [n, LEN]), Tensor::from_vec(ys, [n]))
}

fn main() {
    let mut rng = Rng(2024);
    let (train_x, train_y) = dataset(&mut rng, TRAIN);
    let (test_x, test_y) = dataset(&mut rng, TEST);
    let positive = test_y.cast(DType::F32).mean().item_f64();
    let mut params = Encoder::init(&Key::new(0));
    println!(
        "transformer encoder: {BLOCKS} blocks, embed {EMBED}, {HEADS} heads, {} parameters; \
         task: does a sequence of {LEN} tokens (vocabulary {VOCAB}) contain the bigram `3 5`? \
         ({TRAIN} training, {TEST} test sequences, {:.1}% positive: chance is 50%)",
        tree_numel(&params),
        positive * 100.0
    );

    // Per-sample gradients equal a loop of grad.
    let (xb, yb) = (train_x.narrow(0, 0, 8), train_y.narrow(0, 0, 8));
    let each = unstack(&per_sample_grads(&params, &xb, &yb));
    let mut worst = 0.0f64;
    let mut largest = 0.0f64;
    for (i, gv) in each.iter().enumerate() {
        let gi = grad(|p: &Encoder| loss(p, &xb.index(i as isize), &yb.index(i as isize)))(&params);
        for (d, l) in tree_sub(&gi, gv).leaves().iter().zip(gi.leaves()) {
            worst = worst.max(d.abs().max().item_f64());
            largest = largest.max(l.abs().max().item_f64());
        }
    }
    println!("per-sample gradients vs a loop of grad on 8 examples: max |difference| {worst:.2e} (largest entry {largest:.2e})");
    assert!(worst <= 1e-5 * largest.max(1.0), "per-sample gradients differ from a loop of grad");

    let adam = Adam::new(LR);
    let mut state = adam.init(&params);
    let start = Instant::now();
    let mut acc = 0.0;
    for epoch in 0..EPOCHS {
        let t0 = Instant::now();
        for (xb, yb) in batches(&train_x, &train_y, BATCH, Some(epoch as u64), true) {
            let g = tree_map(&per_sample_grads(&params, &xb, &yb), |l| l.mean_axis(0, false));
            (params, state) = adam.update(&params, &g, &state);
        }
        acc = accuracy(&params.forward(&test_x), &test_y).item_f64();
        let train_loss = loss(&params, &train_x, &train_y).item_f64();
        println!(
            "epoch {}: train loss {train_loss:.4}, test accuracy {:.2}%  ({:.2} s, {:.0} per-sample gradients/s)",
            epoch + 1,
            acc * 100.0,
            t0.elapsed().as_secs_f64(),
            (TRAIN / BATCH * BATCH) as f64 / t0.elapsed().as_secs_f64()
        );
    }
    println!("trained in {:.2} s; final test accuracy {:.2}% (chance 50%)", start.elapsed().as_secs_f64(), acc * 100.0);
    assert!(acc > 0.9, "the encoder should clearly beat chance (50%): got {:.2}%", acc * 100.0);
}
