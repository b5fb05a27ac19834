//! `pmap` over CPU devices: data-parallel DP-style per-sample gradients and
//! an ensemble split over devices.
//!
//! A process exposes several CPU devices (`set_cpu_device_count`, or the
//! `XFORM_CPU_DEVICES` environment variable: JAX's
//! `--xla_force_host_platform_device_count`); `pmap` runs each device's
//! shard on its own thread, and the collectives of its `axis_name`
//! exchange values among the devices. Results equal `vmap` with the same
//! axis name.
//!
//! Run: `cargo run --release --example pmap`

use xform::lax::psum;
use xform::prelude::*;
use xform::{pmap_with, set_cpu_device_count, PmapOptions};

fn main() {
    let devices = 4;
    set_cpu_device_count(devices);
    let (per_device, d) = (16, 8);

    // Data parallelism: each device clips its examples' gradients, and
    // psum adds the clipped sums across the devices.
    let w = Key::new(0).normal([d], DType::F32);
    let xs = Key::new(1).normal([devices, per_device, d], DType::F32);
    let ys = Key::new(2).normal([devices, per_device], DType::F32);
    let loss = |w: &Tensor, x: &Tensor, y: &Tensor| (x.matmul(w).tanh() - y).powi(2);
    let step = |(w, x, y): &(Tensor, Tensor, Tensor)| {
        let per = vmap(|(x, y): &(Tensor, Tensor)| grad(|w: &Tensor| loss(w, x, y))(w))(&(x.clone(), y.clone()));
        let norms = (&per * &per).sum_axes(&[1], true).sqrt();
        let clipped = &per / norms.maximum(&Tensor::scalar(1.0f32));
        psum(&clipped.sum_axes(&[0], false), "batch").or_raise()
    };
    let opts = PmapOptions::new().axis_name("batch").in_axes((None::<isize>, 0, 0)).out_axes(None::<isize>);
    let summed = pmap_with(step, opts)(&(w.clone(), xs.clone(), ys.clone()));
    let one_device = vmap_with(
        step,
        VmapOptions::new().axis_name("batch").in_axes((None::<isize>, 0, 0)).out_axes(None::<isize>),
    )(&(w, xs, ys));
    println!("clipped gradient sum over {devices} devices: {summed}");
    println!("the same as one device: {}", summed.to_vec::<f32>() == one_device.to_vec::<f32>());

    // An ensemble of 8 models, 2 per device: pmap of vmap.
    let models = Key::new(3).normal([devices, 2, d, d], DType::F32) * 0.3;
    let x = Key::new(4).normal([32, d], DType::F32);
    let predict = |w: &Tensor| x.matmul(w).tanh().mean();
    let spread = pmap_with(|w: &Tensor| vmap(predict)(w), PmapOptions::new())(&models);
    println!("ensemble predictions, [devices, models per device]: {spread}");
}
