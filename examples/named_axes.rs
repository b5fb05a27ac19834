//! Named axes: per-example code that needs the whole batch.
//!
//! `vmap` with an `axis_name` lets a function written for one example
//! reach the others through collectives (`psum`, `pmean`, `all_gather`,
//! `axis_index`, ...), as JAX's `vmap(f, axis_name=...)` does. Two uses:
//!
//! - BatchNorm with statistics across the mapped axis (flax's
//!   `BatchNorm(axis_name=...)`), inside per-example gradients;
//! - a contrastive (InfoNCE / SimCLR-style) loss, where each example's
//!   loss compares its embedding with every other example's.
//!
//! Per-example gradients through a collective follow JAX: example `k`'s
//! gradient is its share of the gradient of the summed loss (the
//! transpose of `psum` is `psum`), so they sum to the batch gradient, and
//! the parts of the model that do not mix examples keep their exact
//! per-example gradients.
//!
//! Run: `cargo run --release --example named_axes`

use xform::lax::{all_gather, axis_index, axis_size};
use xform::nn::{BatchNorm, BatchNormStats};
use xform::prelude::*;

/// A unit-length embedding of one example.
fn embed(w: &Tensor, x: &Tensor) -> Tensor {
    let z = x.matmul(w).tanh();
    let norm = (&z * &z).sum().sqrt();
    z / norm
}

/// One example's InfoNCE loss: its first view against every example's
/// second view (gathered along the named axis), the positive being its own.
fn info_nce(w: &Tensor, view1: &Tensor, view2: &Tensor, temperature: f64) -> Tensor {
    let z = embed(w, view1);
    let others = all_gather(&embed(w, view2), "batch", 0, false).or_raise(); // [N, E]
    let logits = others.matmul(&z) / temperature; // [N]
    let me = axis_index("batch").or_raise();
    let n = axis_size("batch").or_raise();
    let positive = Tensor::arange(0.0, n as f64, 1.0, DType::I32).eq(&me).cast(logits.dtype());
    logits.logsumexp(0, false) - (&logits * positive).sum()
}

fn main() {
    let (n, d, e) = (8, 6, 4);
    let batch = VmapOptions::new().axis_name("batch");

    // A layer normalized across the batch, differentiated per example.
    let x = Key::new(0).normal([n, d], DType::F32);
    let w = Key::new(1).normal([d, e], DType::F32) * 0.5;
    let bn = BatchNorm::new(e, DType::F32).across("batch");
    let stats = BatchNormStats::new(e, DType::F32);
    let loss = |w: &Tensor, x: &Tensor| bn.forward(&x.matmul(w), &stats, true).0.powi(2).sum();
    let per_example = vmap_with(|x: &Tensor| grad(|w: &Tensor| loss(w, x))(&w), batch.clone())(&x);
    println!("per-example gradients through BatchNorm across the batch: {:?}", per_example.shape().dims());

    // Running statistics come out once (the same for every example).
    let (_, new_stats) =
        vmap_with(|x: &Tensor| bn.forward(&x.matmul(&w), &stats, true), batch.clone().out_axes((0, None::<isize>)))(&x);
    println!("running mean after one step: {}", new_stats.mean);

    // InfoNCE written per example, with two noisy views of each input.
    let view2 = &x + Key::new(2).normal([n, d], DType::F32) * 0.1;
    let losses =
        vmap_with(|(a, b): &(Tensor, Tensor)| info_nce(&w, a, b, 0.5), batch.clone())(&(x.clone(), view2.clone()));
    println!("InfoNCE per example: {losses}");
    let grads = vmap_with(|(a, b): &(Tensor, Tensor)| grad(|w: &Tensor| info_nce(w, a, b, 0.5))(&w), batch)(&(
        x.clone(),
        view2.clone(),
    ));
    // Summed, the per-example gradients are the batch loss's gradient.
    let batch_grad = grad(|w: &Tensor| {
        vmap_with(|(a, b): &(Tensor, Tensor)| info_nce(w, a, b, 0.5), VmapOptions::new().axis_name("batch"))(&(
            x.clone(),
            view2.clone(),
        ))
        .sum()
    })(&w);
    let gap = (grads.sum_axes(&[0], false) - batch_grad).abs().max().item_f64();
    println!("|sum of per-example gradients - batch gradient| = {gap:.2e}");
    assert!(gap < 1e-4);
}
