//! An ensemble of small CNNs trained together on one machine: `vmap` over
//! the models' stacked parameters, on the UCI digits seen as 1x8x8 images.
//!
//! `stack` turns E CNNs (and their Adam states) into one tree with a
//! leading axis of E on every leaf; a training step (gradient and Adam
//! update) is vmapped over that axis with the minibatch shared. The batch
//! rule of the convolution turns the E models' convolutions into one
//! grouped convolution. It checks the vmapped gradients against a loop of
//! `grad` over the models, and the per-sample gradients of every model
//! (`vmap` over models of `vmap` over examples of `grad`) against a loop,
//! then prints each model's and the ensemble's test accuracy.
//!
//! Run: `cargo run --release --example cnn_ensemble`

use std::time::Instant;
use xform::data::{batches, digits};
use xform::nn::{
    accuracy, softmax_cross_entropy, stack, unstack, Adam, AdamState, AvgPool2d, Conv2d, Linear, MaxPool2d,
};
use xform::prelude::*;

const MODELS: usize = 6;
const EPOCHS: usize = 12;
const BATCH: usize = 128;

#[derive(Clone, Debug, Tree)]
struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    head: Linear,
}

impl Cnn {
    fn init(key: &Key) -> Cnn {
        let k = key.split(3);
        Cnn {
            conv1: Conv2d::init(&k[0], 1, 8, [3, 3], DType::F32).with_padding([1, 1]),
            conv2: Conv2d::init(&k[1], 8, 16, [3, 3], DType::F32).with_padding([1, 1]),
            head: Linear::init(&k[2], 16 * 2 * 2, 10, DType::F32),
        }
    }

    /// Logits of images `[N, 64]` or one image `[64]`: max pooling after
    /// the first convolution, average pooling after the second.
    fn forward(&self, x: &Tensor) -> Tensor {
        let one = x.rank() == 1;
        let x = x.reshape(&[-1, 1, 8, 8]);
        let h = MaxPool2d::new([2, 2]).forward(&self.conv1.forward(&x).relu());
        let h = AvgPool2d::new([2, 2]).forward(&self.conv2.forward(&h).relu());
        let logits = self.head.forward(&h.reshape(&[h.dim(0) as isize, -1]));
        if one {
            logits.squeeze(0)
        } else {
            logits
        }
    }
}

fn loss(p: &Cnn, x: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.forward(x), y)
}

fn train_step(opt: &Adam, (p, s, x, y): &(Cnn, AdamState<Cnn>, Tensor, Tensor)) -> (Cnn, AdamState<Cnn>) {
    let g = grad(|p: &Cnn| loss(p, x, y))(p);
    opt.update(p, &g, s)
}

/// The largest difference between two trees relative to the second's scale.
fn rel_diff<T: Tree>(a: &T, b: &T) -> f64 {
    let mut worst = 0.0f64;
    for (x, y) in a.leaves().iter().zip(b.leaves()) {
        let scale = 1e-3 + y.abs().max().item_f64();
        worst = worst.max((x - &y).abs().max().item_f64() / scale);
    }
    worst
}

fn main() {
    let data = digits();
    let opt = Adam::new(1e-2);
    let models: Vec<Cnn> = Key::new(2024).split(MODELS).iter().map(Cnn::init).collect();
    let states: Vec<AdamState<Cnn>> = models.iter().map(|m| opt.init(m)).collect();
    let (mut params, mut state) = (stack(&models), stack(&states));
    let shared_batch = |i| VmapOptions { in_axes: Axes::Args(i), ..Default::default() };

    // 1. Gradients of all models at once equal a loop over the models, and
    //    every model's per-sample gradients equal a loop over examples.
    let (xb, yb) = (data.train_x.narrow(0, 0, 16), data.train_y.narrow(0, 0, 16));
    let all = vmap_with(
        |(p, x, y): &(Cnn, Tensor, Tensor)| grad(|p: &Cnn| loss(p, x, y))(p),
        shared_batch(vec![Some(0), None, None]),
    )(&(params.clone(), xb.clone(), yb.clone()));
    let worst_models = unstack(&all)
        .iter()
        .zip(&models)
        .map(|(g, m)| rel_diff(g, &grad(|p: &Cnn| loss(p, &xb, &yb))(m)))
        .fold(0.0, f64::max);
    let per_sample = vmap_with(
        |(p, x, y): &(Cnn, Tensor, Tensor)| {
            vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Cnn| loss(p, x, y))(p))(&(x.clone(), y.clone()))
        },
        shared_batch(vec![Some(0), None, None]),
    )(&(params.clone(), xb.clone(), yb.clone())); // leaves [MODELS, 16, ..]
    let mut worst_samples = 0.0f64;
    for (m, model) in unstack(&per_sample).iter().zip(&models).step_by(2) {
        let each = unstack(m);
        for i in [0usize, 7, 15] {
            let g = grad(|p: &Cnn| loss(p, &xb.index(i as isize), &yb.index(i as isize)))(model);
            worst_samples = worst_samples.max(rel_diff(&each[i], &g));
        }
    }
    println!(
        "vmap over {MODELS} models vs a loop of grad: max relative difference {worst_models:.2e}; \
         per-sample gradients of each model vs a loop: {worst_samples:.2e}"
    );
    assert!(worst_models < 1e-4 && worst_samples < 1e-4, "vmapped gradients differ from a loop of grad");

    // 2. Train all models together.
    let step = vmap_with(
        |args: &(Cnn, AdamState<Cnn>, Tensor, Tensor)| train_step(&opt, args),
        shared_batch(vec![Some(0), Some(0), None, None]),
    );
    let t0 = Instant::now();
    for epoch in 0..EPOCHS {
        for (x, y) in batches(&data.train_x, &data.train_y, BATCH, Some(epoch as u64), false) {
            (params, state) = step(&(params, state, x, y));
        }
    }
    println!(
        "{MODELS} CNNs, {EPOCHS} epochs of batches of {BATCH}: trained together in {:.2} s",
        t0.elapsed().as_secs_f64()
    );

    // 3. Accuracy of each model and of the ensemble (averaged logits).
    let logits = vmap_with(|(p, x): &(Cnn, Tensor)| p.forward(x), shared_batch(vec![Some(0), None]))(&(
        params.clone(),
        data.test_x.clone(),
    ));
    let accs = vmap(|l: &Tensor| accuracy(l, &data.test_y))(&logits).to_vec::<f32>();
    for (i, a) in accs.iter().enumerate() {
        println!("model {i}: test accuracy {:.2}%", a * 100.0);
    }
    let ens = accuracy(&logits.mean_axis(0, false), &data.test_y).item::<f32>();
    println!("ensemble (averaged logits): test accuracy {:.2}%", ens * 100.0);
    assert!(ens > 0.9, "the CNN ensemble should exceed 90% test accuracy");
}
