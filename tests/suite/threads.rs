//! Tensors across threads (issue 21, part 6): concrete tensors, keys and
//! parameter trees are `Send + Sync`; a model computes on a worker thread;
//! threads share one tensor; in-place writes are seen across threads; a
//! tracer that reaches another thread is a clear error, never a panic.

use std::sync::{mpsc, Arc};
use xform::nn::{softmax_cross_entropy, Linear, Mlp};
use xform::prelude::*;
use xform::{Array, ErrorKind};

const fn assert_send_sync<T: Send + Sync>() {}
const _: () = {
    assert_send_sync::<Tensor>();
    assert_send_sync::<Key>();
    assert_send_sync::<Array>();
    assert_send_sync::<Mlp>();
    assert_send_sync::<Linear>();
    assert_send_sync::<Vec<Tensor>>();
    assert_send_sync::<(Tensor, Vec<Tensor>)>();
    assert_send_sync::<Program>();
    assert_send_sync::<xform::Error>();
};

fn data() -> (Tensor, Tensor) {
    let x = Key::new(1).normal([8, 6], DType::F32);
    let y = Tensor::from_vec(vec![0i32, 1, 2, 0, 1, 2, 0, 1], [8]);
    (x, y)
}

fn leaves(m: &Mlp) -> Vec<Vec<f32>> {
    m.layers.iter().flat_map(|l| [l.w.to_vec::<f32>(), l.b.to_vec::<f32>()]).collect()
}

fn loss<'a>(x: &'a Tensor, y: &'a Tensor) -> impl Fn(&Mlp) -> Tensor + 'a {
    move |p: &Mlp| softmax_cross_entropy(&p.forward(x), y)
}

/// A model and its data moved to a worker thread, which computes the
/// gradient there and sends it back: bit for bit the main thread's.
#[test]
fn a_model_computes_its_gradient_on_a_worker_thread() {
    let model = Mlp::init(&Key::new(0), &[6, 16, 3], DType::F32);
    let (x, y) = data();
    let here = grad(loss(&x, &y))(&model);

    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let g = grad(loss(&x, &y))(&model);
        tx.send((g, model)).expect("main thread waits");
    });
    let (there, model_back) = rx.recv().expect("worker sends the gradient");
    worker.join().expect("worker thread");
    assert_eq!(leaves(&there), leaves(&here));
    assert_eq!(model_back.layers[0].w.shape().dims(), &[6, 16]);
    // the returned tensors work on this thread: an SGD step
    let step = &model_back.layers[0].w - &(&there.layers[0].w * 0.1);
    let expect = &model_back.layers[0].w - &(&here.layers[0].w * 0.1);
    assert_eq!(step.to_vec::<f32>(), expect.to_vec::<f32>());
}

/// Several threads read one tensor at once (by `&Tensor` and through an
/// `Arc`) and each runs vmap(grad) on it: every result equals the one
/// computed alone.
#[test]
fn threads_share_a_tensor_and_run_vmap_of_grad() {
    let xs = Key::new(3).normal([8, 5], DType::F64);
    let f = |x: &Tensor| (x.sin() * x).sum();
    let alone = vmap(grad(f))(&xs).to_vec::<f64>();
    let shared = Arc::new(xs.clone());
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for i in 0..4 {
            let (xs, shared, alone) = (&xs, Arc::clone(&shared), &alone);
            handles.push(s.spawn(move || {
                for _ in 0..20 {
                    let input: &Tensor = if i % 2 == 0 { xs } else { &shared };
                    assert_eq!(&vmap(grad(f))(input).to_vec::<f64>(), alone);
                }
            }));
        }
        for h in handles {
            h.join().expect("reader thread");
        }
    });
    assert_eq!(vmap(grad(f))(&xs).to_vec::<f64>(), alone);
}

/// An in-place write on one thread is seen by another after the join, and
/// bumps the storage's version there: a pullback recorded before the write
/// refuses to run after it (never a different number).
#[test]
fn in_place_writes_cross_threads() {
    let w = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    let x = Tensor::from_vec(vec![0.5f64, 0.25, 2.0], [3]);
    let (_, pullback) = vjp(|x: &Tensor| (x * &w).sum(), &x);
    let before = w.array().expect("concrete").storage_version();
    std::thread::scope(|s| {
        s.spawn(|| {
            w.add_scalar_(10.0);
        })
        .join()
        .expect("writer thread");
    });
    assert_eq!(w.to_vec::<f64>(), vec![11.0, 12.0, 13.0]);
    assert!(w.array().expect("concrete").storage_version() > before);
    let e = catch(|| pullback(&Tensor::scalar(1.0f64))).expect_err("a captured tensor was written");
    assert!(matches!(e.kind, ErrorKind::InPlace { .. }), "{e}");
    // a write made on a worker that owns the tensor is seen here too
    let moved = Tensor::zeros([2], DType::F32);
    let back = std::thread::spawn(move || {
        moved.fill_(4.0);
        moved
    })
    .join()
    .expect("worker thread");
    assert_eq!(back.to_vec::<f32>(), vec![4.0, 4.0]);
}

/// A tracer taken to another thread while its transform runs, and after it
/// returned, is a `ForeignTracer` error there (through `catch`), naming the
/// transform; the transform on the first thread is undisturbed.
#[test]
fn a_tracer_on_another_thread_is_a_clear_error() {
    let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
    let leaked = std::sync::Mutex::new(None);
    let g = grad(|x: &Tensor| {
        let t = x * 3.0;
        let e = std::thread::scope(|s| s.spawn(|| catch(|| t.sin())).join().expect("thread"))
            .expect_err("a tracer on another thread");
        assert!(matches!(&e.kind, ErrorKind::ForeignTracer { transform } if transform == "grad"), "{e}");
        *leaked.lock().expect("lock") = Some(t.clone());
        (&t * &t).sum()
    })(&x);
    assert_eq!(g.to_vec::<f64>(), vec![18.0, 36.0]);

    let tracer = leaked.lock().expect("lock").take().expect("stored");
    let e = std::thread::spawn(move || {
        let plain = Tensor::zeros([2], DType::F64);
        let e = catch(|| plain.copy_(&tracer).clone()).expect_err("copy of a foreign tracer");
        assert_eq!(plain.to_vec::<f64>(), vec![0.0; 2]);
        let shape = tracer.shape();
        (e, shape, catch(|| tracer.exp()).expect_err("op on a foreign tracer"))
    })
    .join()
    .expect("thread");
    let (copy_err, shape, op_err) = e;
    assert_eq!(shape.dims(), &[2]);
    for e in [&copy_err, &op_err] {
        assert!(matches!(e.kind, ErrorKind::ForeignTracer { .. }), "{e}");
        assert!(e.to_string().contains("used on another thread"), "{e}");
        assert!(e.to_string().contains("escaped its transform"), "{e}");
    }
    assert_eq!(copy_err.op, "copy_");
}

/// While a transform keeps replacing a tensor's value (functionalized
/// writes), other threads read its shape and dtype: no read sees a torn
/// value or panics.
#[test]
fn reads_from_other_threads_during_functionalized_writes() {
    let x = Tensor::from_vec(vec![1.0f32; 4], [4]);
    let out = functionalize(|x: &Tensor| {
        let buf = Tensor::zeros([4], DType::F32);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut reads = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                    assert_eq!(buf.shape().dims(), &[4]);
                    assert_eq!(buf.dtype(), DType::F32);
                    reads += 1;
                }
                reads
            });
            for _ in 0..200 {
                buf.add_(x);
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(reader.join().expect("reader") > 0);
        });
        buf
    })(&x);
    assert_eq!(out.to_vec::<f32>(), vec![200.0; 4]);
}

/// Concurrent in-place ops on one shared tensor serialize (NOTE: [atomic
/// in-place ops]): 8 threads each adding 1 a thousand times end at exactly
/// 8000 (before, the read and the write of each op were separate lock
/// sections, and threads lost each other's updates: 1,681 to 6,762), and
/// the mixed `copy_` / `add_` / `mul_` ops of two threads are each seen
/// whole.
#[test]
fn concurrent_in_place_ops_lose_no_update() {
    let x = Tensor::zeros([4], DType::F32);
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let x = x.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    x.add_scalar_(1.0);
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().expect("worker"));
    assert_eq!(x.to_vec::<f32>(), vec![8000.0; 4]);

    // f64 counters through `add_` with a tensor operand, and `mul_` by 1
    // (a read-modify-write that must not undo the other thread's add)
    let y = Tensor::zeros([3], DType::F64);
    let one = Tensor::ones([3], DType::F64);
    let adders: Vec<_> = (0..2)
        .map(|k| {
            let (y, one) = (y.clone(), one.clone());
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    if k == 0 {
                        y.add_(&one);
                    } else {
                        y.mul_scalar_(1.0);
                    }
                }
            })
        })
        .collect();
    adders.into_iter().for_each(|w| w.join().expect("worker"));
    assert_eq!(y.to_vec::<f64>(), vec![2000.0; 3]);
}

/// Writes through overlapping views of one storage from two threads: each
/// thread adds 1 to its own view a thousand times; the views share the
/// middle column, which ends at 2000, the others at 1000.
#[test]
fn concurrent_writes_through_overlapping_views_lose_no_update() {
    let base = Tensor::zeros([4, 3], DType::F32);
    let left = base.slice(s![.., 0..2]);
    let right = base.slice(s![.., 1..3]);
    let workers: Vec<_> = [left, right]
        .into_iter()
        .map(|v| {
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    v.add_scalar_(1.0);
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().expect("worker"));
    assert_eq!(base.to_vec::<f32>(), [1000.0, 2000.0, 1000.0].repeat(4));
}
