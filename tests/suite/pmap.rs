//! `pmap` over CPU devices (each shard on its own thread, collectives
//! exchanged among them) against `vmap` of the same function with the same
//! axis name: equal bit for bit (the collectives are; a product that vmap
//! turns into one batched GEMM may round differently from the per-device
//! products, as from a loop, so the functions here avoid those), and
//! within float32 rounding where a batched product differs.

use xform::lax::{all_gather, all_to_all, axis_index, pmax, pmean, ppermute, psum, psum_scatter};
use xform::{
    grad, jit, pmap_with, set_cpu_device_count, try_pmap_call, vmap, vmap_with, DType, Key, OrRaise, PmapOptions,
    Tensor, VmapOptions,
};

fn setup() {
    set_cpu_device_count(4);
}

fn both<Y: xform::Tree + Send>(f: impl Fn(&Tensor) -> Y + Sync + Clone, x: &Tensor) -> (Y, Y) {
    let p = pmap_with(f.clone(), PmapOptions::new().axis_name("d"))(x);
    let v = vmap_with(f, VmapOptions::new().axis_name("d"))(x);
    (p, v)
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn pmap_equals_vmap_bit_for_bit() {
    setup();
    let x = Key::new(3).normal([4, 8], DType::F32);
    let fs: Vec<(&str, Box<dyn Fn(&Tensor) -> Tensor + Sync>)> = vec![
        ("psum", Box::new(|x: &Tensor| psum(&x.sin(), "d").or_raise() * x)),
        ("pmean", Box::new(|x: &Tensor| x - pmean(x, "d").or_raise())),
        ("pmax", Box::new(|x: &Tensor| pmax(x, "d").or_raise())),
        ("all_gather", Box::new(|x: &Tensor| all_gather(x, "d", 0, false).or_raise() * x)),
        ("all_gather tiled", Box::new(|x: &Tensor| all_gather(x, "d", -1, true).or_raise())),
        ("psum_scatter", Box::new(|x: &Tensor| psum_scatter(&x.reshape(&[4, 2]), "d", 0, false).or_raise())),
        ("all_to_all", Box::new(|x: &Tensor| all_to_all(&x.reshape(&[2, 4]), "d", 1, 0, false).or_raise())),
        ("psum_scatter tiled", Box::new(|x: &Tensor| psum_scatter(&x.sin(), "d", 0, true).or_raise())),
        ("all_to_all tiled", Box::new(|x: &Tensor| all_to_all(&x.reshape(&[4, 2]), "d", 0, 1, true).or_raise())),
        ("all_to_all one axis", Box::new(|x: &Tensor| all_to_all(&x.reshape(&[4, 2]), "d", 0, 0, false).or_raise())),
        ("ppermute", Box::new(|x: &Tensor| ppermute(x, "d", &[(0, 1), (1, 2), (2, 3), (3, 0)]).or_raise())),
        ("axis_index", Box::new(|x: &Tensor| x * axis_index("d").or_raise().cast(DType::F32))),
        ("grad", Box::new(|x: &Tensor| grad(|x: &Tensor| (x - pmean(x, "d").or_raise()).powi(2).sum())(x))),
        ("jit", Box::new(|x: &Tensor| jit(|x: &Tensor| psum(x, "d").or_raise().exp())(x))),
    ];
    for (name, f) in &fs {
        let (p, v) = both(|x: &Tensor| f(x), &x);
        assert_eq!(p.shape(), v.shape(), "{name}");
        assert_eq!(bits(&p), bits(&v), "{name}: pmap {p} vs vmap {v}");
    }
    // a gathered product: vmap's is one batched GEMM, each device's its own
    let f = |x: &Tensor| all_gather(x, "d", 0, false).or_raise().matmul(x);
    let (p, v) = both(f, &x);
    let gap = (&p - &v).abs().max().item_f64();
    let scale = v.abs().max().item_f64();
    assert!(gap <= 4.0 * f32::EPSILON as f64 * scale, "{gap} vs {scale}");
}

/// Data-parallel per-sample gradients: each device takes a shard of the
/// batch and runs vmap(grad) on it; the clipped gradients are summed across
/// devices with psum. Equal to the one-device computation.
#[test]
fn data_parallel_per_sample_gradients() {
    setup();
    let (devices, per_device, d) = (4, 3, 5);
    let w = Key::new(1).normal([d], DType::F64);
    let xs = Key::new(2).normal([devices, per_device, d], DType::F64);
    let ys = Key::new(3).normal([devices, per_device], DType::F64);
    let loss = |w: &Tensor, x: &Tensor, y: &Tensor| (x.matmul(w).tanh() - y).powi(2);
    let step = |(w, x, y): &(Tensor, Tensor, Tensor)| {
        let per = vmap(|(x, y): &(Tensor, Tensor)| grad(|w: &Tensor| loss(w, x, y))(w))(&(x.clone(), y.clone()));
        let norms = (&per * &per).sum_axes(&[1], true).sqrt();
        let clipped = &per / norms.maximum(&Tensor::scalar(1.0f64));
        psum(&clipped.sum_axes(&[0], false), "batch").or_raise()
    };
    let opts = PmapOptions::new().axis_name("batch").in_axes((None::<isize>, 0, 0));
    let summed = pmap_with(step, opts)(&(w.clone(), xs.clone(), ys.clone()));
    let one = vmap_with(step, VmapOptions::new().axis_name("batch").in_axes((None::<isize>, 0, 0)))(&(w, xs, ys));
    assert_eq!(bits(&summed), bits(&one));
    // every device holds the same total
    assert_eq!(bits(&summed.select(0, 0)), bits(&summed.select(0, 3)));
}

/// An ensemble split over devices: pmap of vmap over stacked parameters
/// equals vmap of vmap.
#[test]
fn ensemble_over_devices() {
    setup();
    let (devices, models, d) = (2, 3, 4);
    let ws = Key::new(5).normal([devices, models, d, d], DType::F32);
    let x = Key::new(6).normal([8, d], DType::F32);
    let predict = |w: &Tensor| x.matmul(w).tanh().sum_axes(&[1], false);
    let per_device = |w: &Tensor| vmap(predict)(w);
    let spread = pmap_with(per_device, PmapOptions::new())(&ws);
    let local = vmap(vmap(predict))(&ws);
    assert_eq!(spread.shape().dims(), &[devices, models, 8]);
    assert_eq!(bits(&spread), bits(&local));
}

#[test]
fn failures_release_every_device() {
    setup();
    let x = Tensor::arange(0.0, 4.0, 1.0, DType::F64);
    // more positions than devices
    let e = try_pmap_call(&|x: &Tensor| x.clone(), &PmapOptions::new().devices(2), &x).unwrap_err();
    assert!(e.to_string().contains("4 positions but there are 2"), "{e}");
    // one device fails before a collective the others wait in
    let f = |x: &Tensor| {
        if x.item::<f64>() == 2.0 {
            xform::Error::invalid("user", "device 2 gives up").raise();
        }
        psum(x, "d").or_raise()
    };
    let e = try_pmap_call(&f, &PmapOptions::new().axis_name("d"), &x).unwrap_err();
    assert!(e.to_string().contains("device 2 gives up"), "{e}");
    // devices that run different collectives
    let g = |x: &Tensor| if x.item::<f64>() == 1.0 { pmax(x, "d").or_raise() } else { psum(x, "d").or_raise() };
    let e = try_pmap_call(&g, &PmapOptions::new().axis_name("d"), &x).unwrap_err();
    assert!(e.to_string().contains("different collectives"), "{e}");
    // devices whose operands differ in shape: each device's is named
    let h = |x: &Tensor| {
        let k = x.item::<f64>() as usize;
        psum(&Tensor::zeros([1 + k % 2], DType::F32), "d").or_raise()
    };
    let e = try_pmap_call(&h, &PmapOptions::new().axis_name("d"), &x).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("different shapes or dtypes") && msg.contains("device 1: f32[2]"), "{msg}");
    // a device that does not arrive: the others fail at the timeout,
    // naming it, instead of waiting forever
    let slow = |x: &Tensor| {
        if x.item::<f64>() == 3.0 {
            std::thread::sleep(std::time::Duration::from_millis(600));
        }
        psum(x, "d").or_raise()
    };
    let opts = PmapOptions::new().axis_name("d").timeout(std::time::Duration::from_millis(100));
    let t0 = std::time::Instant::now();
    let e = try_pmap_call(&slow, &opts, &x).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("timed out after 0.1 s waiting for device(s) 3"), "{msg}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    // and the next pmap works
    let ok = pmap_with(|x: &Tensor| psum(x, "d").or_raise(), PmapOptions::new().axis_name("d"))(&x);
    assert_eq!(ok.to_vec::<f64>(), vec![6.0; 4]);
}

/// Under another transform, pmap is vmap of the same name on the calling
/// thread: grad(pmap(f)) is defined and equals grad(vmap(f)).
#[test]
fn pmap_under_transforms() {
    setup();
    let x = Tensor::arange(1.0, 5.0, 1.0, DType::F64);
    let f = |x: &Tensor| (x * psum(x, "d").or_raise()).sum();
    let gp = grad(|x: &Tensor| {
        pmap_with(|x: &Tensor| x * psum(x, "d").or_raise(), PmapOptions::new().axis_name("d"))(x).sum()
    })(&x);
    let gv = grad(|x: &Tensor| {
        vmap_with(|x: &Tensor| x * psum(x, "d").or_raise(), VmapOptions::new().axis_name("d"))(x).sum()
    })(&x);
    assert_eq!(gp.to_vec::<f64>(), gv.to_vec::<f64>());
    let _ = f;
}

/// Each device runs its shard on a thread of its own, in a rayon pool of
/// its own (the machine's threads split among the devices).
#[test]
fn each_device_has_its_own_threads() {
    setup();
    let seen = std::sync::Mutex::new(Vec::new());
    let x = Tensor::arange(0.0, 4.0, 1.0, DType::F64);
    pmap_with(
        |x: &Tensor| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            seen.lock().unwrap().push((name, rayon::current_num_threads(), rayon::current_thread_index().is_some()));
            x.clone()
        },
        PmapOptions::new(),
    )(&x);
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    let cores = std::thread::available_parallelism().map_or(1, |t| t.get());
    assert_eq!(seen.len(), 4);
    for (k, (name, threads, in_pool)) in seen.iter().enumerate() {
        assert!(name.starts_with(&format!("xform-cpu-device-{k}-worker-")), "{name}");
        assert_eq!(*threads, (cores / 4).max(1));
        assert!(*in_pool);
    }
}

/// `pmap` over GPUs where there are none (or no NCCL, or no `cuda`
/// feature): a clear error naming what is missing, never a hang or abort.
#[test]
fn pmap_over_missing_gpus_is_a_clear_error() {
    // (on a GPU machine the device tests run pmap over the GPUs instead)
    #[cfg(feature = "cuda")]
    if xform::core::kernels::cuda::is_available() {
        return;
    }
    let x = Tensor::arange(0.0, 2.0, 1.0, DType::F64);
    let opts = PmapOptions::new().axis_name("d").cuda();
    let e = try_pmap_call(&|x: &Tensor| psum(x, "d").or_raise(), &opts, &x).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("enable the `cuda` feature") || msg.contains("libnccl.so") || msg.contains("no CUDA device"),
        "{msg}"
    );
}

/// Two pmap calls at once (from two threads) each hold devices' pools of
/// their own: a device blocked in a collective keeps its pool's worker,
/// so shared pools could leave each call waiting on the other's devices.
#[test]
fn concurrent_pmaps_do_not_share_devices() {
    setup();
    let x = Tensor::arange(0.0, 4.0, 1.0, DType::F64);
    let opts = PmapOptions::new().axis_name("d").timeout(std::time::Duration::from_secs(20));
    let f = |x: &Tensor| {
        // the last device arrives late, so the others wait in the barrier
        if x.item::<f64>() == 3.0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        psum(x, "d").or_raise()
    };
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..10 {
                    let y = try_pmap_call(&f, &opts, &x).expect("concurrent pmaps both finish");
                    assert_eq!(y.to_vec::<f64>(), vec![6.0; 4]);
                }
            });
        }
    });
}
