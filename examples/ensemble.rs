//! Model ensembles: train E models from different random seeds at once,
//! with `vmap` over their stacked parameters, on the UCI handwritten digits.
//!
//! `stack` turns E models (and E Adam states) into one tree whose leaves
//! have a leading axis of size E. A whole training step (gradient and Adam
//! update) is then vmapped over that axis, with the minibatch shared by all
//! models (`in_axes` None), so each layer of the E models is one batched
//! matrix product instead of E small ones. The same training is run again
//! as a loop over the models, to compare the time and check that both give
//! the same models. Finally it prints each model's test accuracy and the
//! accuracy of the ensemble (the average of the E models' logits).
//!
//! Run: `cargo run --release --example ensemble`

use std::time::Instant;
use xform::data::{batches, digits};
use xform::nn::{accuracy, softmax_cross_entropy, stack, unstack, Activation, Adam, AdamState, Mlp};
use xform::prelude::*;

const MODELS: usize = 8;
const SIZES: [usize; 3] = [64, 64, 10];
const EPOCHS: usize = 10;
const BATCH: usize = 128;

type Step = (Mlp, AdamState<Mlp>);

fn loss(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    softmax_cross_entropy(&p.forward(x), y)
}

/// One training step of one model on a minibatch.
fn train_step(opt: &Adam, (p, s, x, y): &(Mlp, AdamState<Mlp>, Tensor, Tensor)) -> Step {
    let g = grad(|p: &Mlp| loss(p, x, y))(p);
    opt.update(p, &g, s)
}

fn main() {
    let data = digits();
    let opt = Adam::new(1e-2);
    let models: Vec<Mlp> = Key::new(2024)
        .split(MODELS)
        .iter()
        .map(|k| Mlp::init(k, &SIZES, DType::F32).with_activation(Activation::Relu))
        .collect();
    let states: Vec<AdamState<Mlp>> = models.iter().map(|m| opt.init(m)).collect();
    let epochs: Vec<Vec<(Tensor, Tensor)>> =
        (0..EPOCHS).map(|e| batches(&data.train_x, &data.train_y, BATCH, Some(e as u64), false)).collect();
    println!(
        "{MODELS} MLPs {SIZES:?} (relu), Adam lr {}, {EPOCHS} epochs of batches of {BATCH} on {} digits",
        opt.lr,
        data.train_x.dim(0)
    );

    // All models at once: vmap over the stacked parameters and states
    // (axis 0), with the minibatch shared (in_axes None).
    let ensemble_step = vmap_with(
        |args: &(Mlp, AdamState<Mlp>, Tensor, Tensor)| train_step(&opt, args),
        VmapOptions { in_axes: Axes::Args(vec![Some(0), Some(0), None, None]), ..Default::default() },
    );
    let t0 = Instant::now();
    let (mut params, mut state) = (stack(&models), stack(&states));
    for epoch in &epochs {
        for (x, y) in epoch {
            (params, state) = ensemble_step(&(params, state, x.clone(), y.clone()));
        }
    }
    let t_vmap = t0.elapsed().as_secs_f64();

    // The same, one model after the other.
    let t0 = Instant::now();
    let mut looped: Vec<Step> = models.iter().cloned().zip(states.iter().cloned()).collect();
    for epoch in &epochs {
        for (x, y) in epoch {
            for (p, s) in looped.iter_mut() {
                (*p, *s) = train_step(&opt, &(p.clone(), s.clone(), x.clone(), y.clone()));
            }
        }
    }
    let t_loop = t0.elapsed().as_secs_f64();
    let steps = EPOCHS * data.train_x.dim(0).div_ceil(BATCH);
    println!(
        "training time: vmap over {MODELS} stacked models {:.3} s, loop over the models {:.3} s ({:.2}x faster with vmap; {steps} steps)",
        t_vmap,
        t_loop,
        t_loop / t_vmap
    );

    // Evaluate all models on the test set in one call: parameters mapped,
    // images shared.
    let predict = vmap_with(
        |(p, x): &(Mlp, Tensor)| p.forward(x),
        VmapOptions { in_axes: Axes::Args(vec![Some(0), None]), ..Default::default() },
    );
    let logits = predict(&(params.clone(), data.test_x.clone())); // [MODELS, N, 10]
    let trained = unstack(&params);
    let time = |f: &dyn Fn()| {
        let t0 = Instant::now();
        for _ in 0..20 {
            f();
        }
        t0.elapsed().as_secs_f64() / 20.0
    };
    let t_pred_vmap = time(&|| {
        predict(&(params.clone(), data.test_x.clone()));
    });
    let t_pred_loop = time(&|| {
        for m in &trained {
            m.forward(&data.test_x);
        }
    });
    println!(
        "test-set inference of all {MODELS} models: vmap {:.3} ms, loop {:.3} ms ({:.2}x faster with vmap)",
        t_pred_vmap * 1e3,
        t_pred_loop * 1e3,
        t_pred_loop / t_pred_vmap
    );
    let accs = vmap(|l: &Tensor| accuracy(l, &data.test_y))(&logits).to_vec::<f32>();
    for (i, a) in accs.iter().enumerate() {
        println!("model {i}: test accuracy {:.2}%", a * 100.0);
    }
    let mean_acc = accs.iter().sum::<f32>() / MODELS as f32;
    let ens = accuracy(&logits.mean_axis(0, false), &data.test_y).item::<f32>();
    println!("mean of the models: {:.2}%; ensemble (averaged logits): {:.2}%", mean_acc * 100.0, ens * 100.0);

    // The vmapped training equals the loop.
    let mut worst = 0.0f64;
    for ((p, _), q) in looped.iter().zip(&trained) {
        let (a, b) = (p.forward(&data.test_x), q.forward(&data.test_x));
        worst = worst.max((&a - &b).abs().max().item_f64());
    }
    println!("vmap vs loop: max |difference| of the trained models' test logits = {worst:.2e}");
    assert!(worst < 1e-4, "the vmapped ensemble should match the loop over models");
    assert!(ens > 0.9, "the ensemble should exceed 90% test accuracy");
}
