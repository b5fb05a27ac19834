mod common;
use common::median_time;
use xform::dp::{dp_clipped_grad_with, ClipSum, DpOptions, NormMethod};
use xform::prelude::*;
type CnnParams = (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);
fn make_cnn(key: &Key) -> CnnParams {
    let shapes: [&[usize]; 8] =
        [&[32, 1, 3, 3], &[32], &[64, 32, 3, 3], &[64], &[9216, 128], &[128], &[128, 10], &[10]];
    let p: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let fan_in: usize = if s.len() == 4 { s[1..].iter().product() } else { s[0] };
            let scale = if s.len() > 1 { 1.0 / (fan_in as f64).sqrt() } else { 0.1 };
            key.fold_in(i as u32).normal(s.to_vec(), DType::F32) * scale
        })
        .collect();
    (p[0].clone(), p[1].clone(), p[2].clone(), p[3].clone(), p[4].clone(), p[5].clone(), p[6].clone(), p[7].clone())
}
fn conv_bias(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    xform::lax::conv_general_dilated(x, w, &xform::lax::ConvOptions::default()).unwrap() + b.reshape(&[-1, 1, 1])
}
fn cnn_predict(p: &CnnParams, x: &Tensor) -> Tensor {
    let h = conv_bias(x, &p.0, &p.1).relu();
    let h = conv_bias(&h, &p.2, &p.3).relu();
    let h = xform::lax::max_pool(&h, &[2, 2], &[2, 2], &xform::lax::Padding::Valid).unwrap();
    let h = h.reshape(&[h.dim(0) as isize, -1]);
    let h = (h.matmul(&p.4) + &p.5).relu();
    h.matmul(&p.6) + &p.7
}
fn losses(p: &CnnParams, (x, y): &(Tensor, Tensor)) -> Tensor {
    let logits = cnn_predict(p, x);
    logits.logsumexp(1, false) - logits.take_along_axis(&y.unsqueeze(1), 1).squeeze(1)
}
fn main() {
    let b = 32;
    let key = Key::new(4);
    let params = make_cnn(&key);
    let xs = key.fold_in(100).normal([b, 1, 28, 28], DType::F32);
    let ys = key.fold_in(101).randint([b], 0, 10, DType::I32);
    let batch = (xs.clone(), ys.clone());
    let bg = grad(|p: &CnnParams| losses(p, &batch).mean());
    let t = median_time(15, || drop(bg(&params)));
    println!("batch ref {:.2} ms", t * 1e3);
    for (name, o) in [
        ("book", DpOptions::new(1.0)),
        ("second", DpOptions::new(1.0).sum(ClipSum::SecondPass)),
        ("book-mat", DpOptions::new(1.0).norm_method(NormMethod::Materialize)),
    ] {
        let f = dp_clipped_grad_with(losses, o);
        let t = median_time(15, || drop(f(&params, &batch)));
        println!("dp {name} {:.2} ms", t * 1e3);
    }
    let psg = vmap(|(x, y): &(Tensor, Tensor)| {
        grad(|p: &CnnParams| losses(p, &(x.unsqueeze(0), y.unsqueeze(0))).sum())(&params)
    });
    let t = median_time(9, || drop(psg(&batch)));
    println!("vmap(grad) {:.2} ms", t * 1e3);
    let n = xform::dp::per_example_grad_norms(losses);
    let t = median_time(15, || drop(n(&params, &batch)));
    println!("norms only {:.2} ms", t * 1e3);
}
