//! Limits: allocations the machine cannot serve are typed errors that leave
//! the process usable; printing a huge tensor reads only what it shows;
//! nesting transforms past the thread's native stack is a typed error, not
//! a stack overflow (NOTE: [stack guard] in `xform_ops::stack`).

use std::time::{Duration, Instant};
use xform::core::interp::stack_depth;
use xform::core::stack::{deepest_since, RESERVE};
use xform::prelude::*;
use xform::ErrorKind;

/// The fields of an out-of-memory error (panics on any other error).
fn oom(e: &xform::Error) -> (Option<Vec<usize>>, Option<DType>, Device, u128) {
    match &e.kind {
        ErrorKind::OutOfMemory { shape, dtype, device, bytes } => {
            (shape.as_ref().map(|s| s.dims().to_vec()), *dtype, *device, *bytes)
        }
        k => panic!("expected an out-of-memory error, got {k:?} ({e})"),
    }
}

/// A normal op still runs, and the interpreter stack is empty.
fn still_usable() {
    assert_eq!(stack_depth(), 0);
    let y = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).exp().sum();
    assert!((y.item::<f32>() - (1f32.exp() + 2f32.exp() + 3f32.exp())).abs() < 1e-4);
    assert_eq!(Tensor::zeros([1000], DType::F64).sum().item::<f64>(), 0.0);
}

#[test]
fn zeros_larger_than_memory_is_an_out_of_memory_error() {
    let e = catch(|| Tensor::zeros([1usize << 40], DType::F32)).unwrap_err();
    assert_eq!(e.op, "zeros");
    assert_eq!(oom(&e), (Some(vec![1 << 40]), Some(DType::F32), Device::Cpu, 4 << 40));
    assert_eq!(
        e.to_string(),
        "zeros: out of memory: cannot allocate 4398046511104 bytes on cpu for a float32 array of shape [1099511627776]"
    );
    still_usable();
    let e = catch(|| Tensor::ones([1usize << 20, 1 << 20], DType::F64)).unwrap_err();
    assert_eq!(oom(&e), (Some(vec![1 << 20, 1 << 20]), Some(DType::F64), Device::Cpu, 8 << 40));
    let e = catch(|| Tensor::eye(1 << 21, DType::F32)).unwrap_err();
    assert_eq!((e.op.as_str(), oom(&e).3), ("eye", 16 << 40));
    let x = Tensor::scalar(1.0f32);
    let e = catch(|| x.broadcast_to([1usize << 40]).zeros_like()).unwrap_err();
    assert_eq!((e.op.as_str(), oom(&e).3), ("full_like", 4 << 40));
    still_usable();
}

#[test]
fn arange_and_linspace_larger_than_memory_are_out_of_memory_errors() {
    let e = catch(|| Tensor::arange(0.0, 1e13, 1.0, DType::F32)).unwrap_err();
    assert_eq!(e.op, "arange");
    // arange builds f64 values, then casts.
    assert_eq!(oom(&e), (Some(vec![10_000_000_000_000]), Some(DType::F64), Device::Cpu, 80_000_000_000_000));
    still_usable();
    let e = catch(|| Tensor::linspace(0.0, 1.0, 1 << 41, DType::F64)).unwrap_err();
    assert_eq!((e.op.as_str(), oom(&e).3), ("linspace", 16 << 40));
    still_usable();
}

/// A kernel's output allocation (here the product of broadcast views,
/// which cost one element each) fails inside an op, under a transform:
/// the error names the primitive and its result, and the stack unwinds.
#[test]
fn a_kernel_output_larger_than_memory_is_an_out_of_memory_error() {
    let big = Tensor::scalar(2.0f32).broadcast_to([1usize << 20, 1 << 20]);
    let e = catch(|| &big * &big).unwrap_err();
    assert_eq!(e.op, "mul");
    assert_eq!(oom(&e), (Some(vec![1 << 20, 1 << 20]), Some(DType::F32), Device::Cpu, 4 << 40));
    still_usable();
    let e = catch(|| vmap(|r: &Tensor| r.exp())(&big)).unwrap_err();
    assert_eq!((e.op.as_str(), oom(&e).3), ("exp", 4 << 40));
    assert!(e.to_string().ends_with("[under vmap(size 1048576)]"), "{e}");
    still_usable();
    let e = catch(|| big.to_vec::<f32>()).unwrap_err();
    assert_eq!((e.op.as_str(), oom(&e).3), ("to_vec", 4 << 40));
    still_usable();
}

#[test]
fn display_prints_small_tensors_in_full() {
    let a = Tensor::from_vec(vec![1.0f32, 2.5, -3.0, 4.0, 5.0, 6.0], [2, 3]);
    assert_eq!(a.to_string(), "tensor([[ 1.0,  2.5, -3.0],\n        [ 4.0,  5.0,  6.0]], dtype=float32)");
    let b = Tensor::arange(0.0, 6.0, 1.0, DType::I64);
    assert_eq!(b.to_string(), "tensor([0, 1, 2, 3, 4, 5], dtype=int64)");
    // 1000 elements: not summarized (numpy's threshold).
    let c = Tensor::zeros([1000], DType::Bool).to_string();
    assert_eq!(c.matches("false").count(), 1000);
    assert_eq!(Tensor::zeros([0, 3], DType::F32).to_string(), "tensor([], shape=[0, 3], dtype=float32)");
    assert_eq!(Tensor::scalar(0.25f64).to_string(), "tensor(0.25, dtype=float64)");
}

#[test]
fn display_summarizes_large_tensors_like_numpy() {
    let a = Tensor::arange(0.0, 2000.0, 1.0, DType::I32).reshape(&[40, 50]);
    let want = "tensor([[   0,    1,    2, ...,   47,   48,   49],\n        \
                        [  50,   51,   52, ...,   97,   98,   99],\n        \
                        [ 100,  101,  102, ...,  147,  148,  149],\n        \
                        ...,\n        \
                        [1850, 1851, 1852, ..., 1897, 1898, 1899],\n        \
                        [1900, 1901, 1902, ..., 1947, 1948, 1949],\n        \
                        [1950, 1951, 1952, ..., 1997, 1998, 1999]], dtype=int32)";
    assert_eq!(a.to_string(), want);
    // A transposed view prints its logical order.
    let t = Tensor::arange(0.0, 1001.0, 1.0, DType::F64).reshape(&[1, 1001]).t();
    assert_eq!(
        t.to_string(),
        "tensor([[   0.],\n        [   1.],\n        [   2.],\n        ...,\n        [ 998.],\n        [ 999.],\n        [1000.]], dtype=float64)"
    );
}

/// A broadcast of 2^30 elements (8 GiB if converted) prints at once:
/// only the six shown elements are read.
#[test]
fn display_of_a_huge_broadcast_reads_only_the_shown_elements() {
    let x = Tensor::scalar(1.5f64).broadcast_to([1usize << 30]);
    let start = Instant::now();
    let s = x.to_string();
    assert_eq!(s, "tensor([1.5, 1.5, 1.5, ..., 1.5, 1.5, 1.5], dtype=float64)");
    let y = Tensor::arange(0.0, 4.0, 1.0, DType::F32).broadcast_to([1usize << 20, 1 << 10, 4]);
    let s = y.to_string();
    assert!(s.starts_with("tensor([[[0., 1., 2., 3.],\n         [0., 1., 2., 3.],"), "{s}");
    assert_eq!(s.matches("[0., 1., 2., 3.]").count(), 36);
    assert!(start.elapsed() < Duration::from_secs(5), "printing took {:?}", start.elapsed());
}

/// `depth` vmaps, each over the leading axis of size 1, around `sin`.
fn nested_vmap(depth: usize, x: &Tensor) -> Tensor {
    if depth == 0 {
        return x.sin();
    }
    vmap(|y: &Tensor| nested_vmap(depth - 1, y))(x)
}

/// Runs `f` on a thread with a stack of `mib` MiB (2: Rust's default for
/// spawned threads; 8: the main thread's default).
fn on_stack<R: Send + 'static>(mib: usize, f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new().stack_size(mib << 20).spawn(f).unwrap().join().expect("the thread panicked")
}

/// `depth` nested grads of the polynomial `x^3 - 2x` (each grad takes two
/// interpreters).
fn nested_grad(depth: usize, x: &Tensor) -> Tensor {
    if depth == 0 {
        return x * x * x - x * 2.0;
    }
    grad(|y: &Tensor| nested_grad(depth - 1, y))(x)
}

/// 1,024 nested vmaps and a 200-fold grad, refused under the old count
/// limit (256 interpreters), run on an 8 MiB stack (the main thread's
/// default). The stack each level used is printed (run with --nocapture):
/// the figures in NOTE: [stack guard].
#[test]
fn deep_nesting_fits_an_8_mib_stack() {
    let (shape, value, per_vmap) = on_stack(8, || {
        let x = Tensor::full(vec![1usize; 1025], 0.5, DType::F64);
        let (y, used) = deepest_since(|| nested_vmap(1024, &x));
        assert_eq!(stack_depth(), 0);
        (y.shape().dims().to_vec(), y.to_vec::<f64>(), used / 1024)
    });
    assert_eq!(shape, vec![1; 1025]);
    assert_eq!(value, vec![0.5f64.sin()]);
    let (d, per_grad) = on_stack(8, || {
        let x = Tensor::scalar(0.7f64);
        assert_eq!(nested_grad(1, &x).item::<f64>(), 3.0 * 0.49 - 2.0);
        assert_eq!(nested_grad(3, &x).item::<f64>(), 6.0);
        let (d, used) = deepest_since(|| nested_grad(200, &x));
        assert_eq!(stack_depth(), 0);
        (d.item::<f64>(), used / 200)
    });
    assert_eq!(d, 0.0, "the 200th derivative of a cubic");
    let per_jvp = on_stack(8, || {
        fn nested_jvp(depth: usize, x: &Tensor) -> Tensor {
            if depth == 0 {
                // (linear: a tower of jvps of sin would double its work per level)
                return x * 3.0;
            }
            jvp(|z: &Tensor| nested_jvp(depth - 1, z), x, &Tensor::ones_like(x)).1
        }
        let (_, used) = deepest_since(|| nested_jvp(256, &Tensor::scalar(0.5f64)));
        used / 256
    });
    println!("stack per level: vmap {per_vmap} bytes, grad {per_grad} bytes, jvp {per_jvp} bytes");
    // the documented bounds (test profile; NOTE: [stack guard])
    assert!(per_vmap <= 5 << 10 && per_jvp <= 5 << 10 && per_grad <= 6 << 10, "{per_vmap} {per_jvp} {per_grad}");
}

/// Deeper than the stack allows: a typed error, raised before the stack
/// overflows, with the interpreter stack restored and the thread usable;
/// for vmap, for grad (two interpreters a level) and for jvp, on 2 MiB.
#[test]
fn nesting_past_the_stack_is_a_typed_error() {
    let e = on_stack(2, || {
        let x = Tensor::zeros(vec![1usize; 4097], DType::F32);
        let e = catch(|| nested_vmap(4096, &x)).unwrap_err();
        assert_eq!(stack_depth(), 0);
        // The thread is fine afterwards.
        assert_eq!(nested_vmap(3, &Tensor::zeros([1, 1, 1], DType::F32)).shape().dims(), &[1, 1, 1]);
        e
    });
    assert!(matches!(e.kind, ErrorKind::TooDeep { depth, reserve } if depth > 200 && reserve == RESERVE), "{e}");
    assert!(e.to_string().contains("nested too deep for this thread's stack"), "{e}");
    assert!(e.to_string().contains("stack_size"), "{e}");
    let e = on_stack(2, || {
        fn deep_grad(depth: usize, x: &Tensor) -> Tensor {
            if depth == 0 {
                return x * x;
            }
            grad(|z: &Tensor| deep_grad(depth - 1, z))(x)
        }
        let e = catch(|| deep_grad(4096, &Tensor::scalar(0.5f64))).unwrap_err();
        assert_eq!(stack_depth(), 0);
        e
    });
    assert!(matches!(e.kind, ErrorKind::TooDeep { .. }), "{e}");
    let e = on_stack(2, || {
        fn deep_jvp(depth: usize, x: &Tensor) -> Tensor {
            if depth == 0 {
                return x * 3.0;
            }
            jvp(|z: &Tensor| deep_jvp(depth - 1, z), x, &Tensor::ones_like(x)).1
        }
        let e = catch(|| deep_jvp(8192, &Tensor::scalar(0.5f64))).unwrap_err();
        assert_eq!(stack_depth(), 0);
        e
    });
    assert!(matches!(e.kind, ErrorKind::TooDeep { .. }), "{e}");
}
