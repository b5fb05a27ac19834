//! Each kind of bad input gets a clear error naming the op and the shapes,
//! through both the panicking API (caught) and the Result path, and leaves
//! the interpreter stack and the operands as they were.

use xform::prelude::*;
use xform::{ErrorKind, OrRaise};

fn err(f: impl FnOnce() -> Tensor) -> xform::Error {
    let e = catch(f).expect_err("expected an error");
    assert_eq!(xform::core::interp::stack_depth(), 0);
    e
}

fn t(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape.to_vec(), DType::F32)
}

#[test]
fn shape_errors_name_the_op_and_shapes() {
    let e = err(|| &t(&[2, 3]) + &t(&[4]));
    assert_eq!(e.op, "add");
    assert!(matches!(e.kind, ErrorKind::Shape { .. }));
    assert_eq!(e.to_string(), "add: shapes cannot be broadcast together (shapes [2, 3], [4])");

    let e = err(|| t(&[2, 3]).matmul(&t(&[4, 5])));
    assert!(e.to_string().contains("matmul: contracted sizes differ (3 vs 4)"), "{e}");
    let e = err(|| t(&[2, 3]).reshape(&[5]));
    assert!(e.to_string().starts_with("reshape: cannot reshape 6 elements to [5]"), "{e}");
    let e = err(|| Tensor::concat(&[t(&[2, 3]), t(&[2, 4])], 0));
    assert!(e.to_string().contains("concatenate: operands must agree on every axis but 0"), "{e}");
    let e = err(|| t(&[2]).broadcast_to([3]));
    assert!(e.to_string().contains("broadcast_to"), "{e}");
}

#[test]
fn axis_index_and_dtype_errors() {
    let e = err(|| t(&[2, 3]).sum_axis(2, false));
    assert_eq!(e.kind, ErrorKind::Axis { axis: 2, rank: 2 });
    assert_eq!(e.to_string(), "reduce_sum: axis 2 is out of range for an operand of rank 2");
    let e = err(|| t(&[3]).take(&Tensor::from_vec(vec![0i32, 3], [2]), 0));
    assert_eq!(e.kind, ErrorKind::IndexOutOfRange { index: 3, size: 3 });
    let e = err(|| t(&[3]).take(&Tensor::from_vec(vec![0.5f32], [1]), 0));
    assert!(matches!(e.kind, ErrorKind::DType { .. }), "{e}");
    let e = err(|| xform::lax::sin(&Tensor::from_vec(vec![1i32], [1])).or_raise());
    assert_eq!(e.to_string(), "sin: needs a floating-point operand (dtypes int32)");
    let e = err(|| t(&[2]).select(0, 5));
    assert_eq!(e.kind, ErrorKind::IndexOutOfRange { index: 5, size: 2 });
    let e = err(|| Tensor::from_vec(vec![1.0f32, 2.0], [3]));
    assert!(e.to_string().starts_with("from_vec: 2 values cannot fill a tensor of 3 elements"));
}

#[test]
fn result_paths_return_errors_without_panicking() {
    assert!(t(&[2]).try_add(&t(&[3])).is_err());
    assert!(t(&[2, 3]).try_matmul(&t(&[2, 3])).is_err());
    assert!(t(&[4]).try_reshape(&[3]).is_err());
    assert!(Tensor::try_concat(&[], 0).is_err());
    assert!(t(&[2]).try_slice(s![5]).is_err());
    let ok = t(&[2]).try_add(&t(&[2])).unwrap();
    assert_eq!(ok.shape().dims(), &[2]);
}

#[test]
fn errors_under_transforms_name_the_transforms() {
    let xs = t(&[4, 3]);
    let e = err(|| vmap(|x: &Tensor| x + &t(&[5]))(&xs));
    assert!(e.to_string().ends_with("[under vmap(size 4)]"), "{e}");
    // logical (per-example) shapes in the message, not the batched ones
    assert!(e.to_string().contains("(shapes [3], [5])"), "{e}");
    let e = err(|| grad(|x: &Tensor| (x + &t(&[5])).sum())(&t(&[3])));
    assert!(e.to_string().ends_with("[under grad]"), "{e}");
    let e = err(|| vmap(grad(|x: &Tensor| x.matmul(&t(&[2, 2])).sum()))(&t(&[4, 3])));
    assert!(e.to_string().ends_with("[under vmap(size 4) > grad]"), "{e}");
}

#[test]
fn escaped_tracers_are_reported() {
    let leaked = std::cell::RefCell::new(None);
    let x = t(&[2, 3]);
    let _ = vmap(|x: &Tensor| {
        *leaked.borrow_mut() = Some(x.clone());
        x.sin()
    })(&x);
    let tracer = leaked.borrow_mut().take().unwrap();
    let e = err(|| tracer.exp());
    assert!(matches!(e.kind, ErrorKind::EscapedTracer { .. }));
    assert!(e.to_string().contains("a value traced by vmap was used after vmap returned"), "{e}");
}

#[test]
fn panics_inside_transforms_restore_the_stack() {
    let r = std::panic::catch_unwind(|| {
        grad(|x: &Tensor| -> Tensor {
            let _ = vmap(|y: &Tensor| y * 2.0)(x);
            panic!("user code failed")
        })(&t(&[2, 2]))
    });
    assert!(r.is_err());
    assert_eq!(xform::core::interp::stack_depth(), 0);
    // and everything still works afterwards
    let g = grad(|x: &Tensor| (x * x).sum())(&Tensor::from_vec(vec![3.0f64], [1]));
    assert_eq!(g.to_vec::<f64>(), vec![6.0]);
}

#[test]
fn in_place_errors_leave_the_target_unchanged() {
    let x = Tensor::from_vec(vec![1i32, 2, 3], [3]);
    let e = catch(|| x.add_(&Tensor::from_vec(vec![0.5f32, 0.5, 0.5], [3])).clone()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::InPlace { .. }));
    assert_eq!(e.to_string(), "add_: a float32 result cannot be written into a int32 tensor");
    assert_eq!(x.to_vec::<i32>(), vec![1, 2, 3]);
    let y = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    let e = catch(|| y.add_(&Tensor::ones([2, 3], DType::F32)).clone()).unwrap_err();
    assert!(e.to_string().contains("would grow the target of shape [3]"), "{e}");
    assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0, 3.0]);
    // a broadcast view cannot be written (several elements share memory)
    let b = y.slice(s![0..1]).broadcast_to([4]);
    let e = catch(|| b.fill_(0.0).clone()).unwrap_err();
    assert!(e.to_string().contains("broadcast view"), "{e}");
    assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0, 3.0]);
    // overlapping self-assignment through shifted views
    let z = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4]);
    let e = catch(|| z.slice(s![0..3]).copy_(&z.slice(s![1..4])).clone()).unwrap_err();
    assert!(e.to_string().contains("overlaps the target in memory"), "{e}");
    assert_eq!(z.to_vec::<f32>(), vec![1.0, 2.0, 3.0, 4.0]);
    let e = catch(|| x.fill_(2.5).clone()).unwrap_err();
    assert!(e.to_string().contains("cannot be stored in a int32 tensor"), "{e}");
}

/// `copy_` of an escaped tracer into a plain tensor is an escaped-tracer
/// error at the copy, and the tensor keeps its values (issue 17, item 14).
#[test]
fn copy_of_an_escaped_tracer_fails_at_the_copy() {
    let leaked = std::cell::RefCell::new(None);
    let _ = vmap(|x: &Tensor| {
        *leaked.borrow_mut() = Some(x * 2.0);
        x.sum()
    })(&Tensor::ones([2, 3], DType::F64));
    let leaked = leaked.into_inner().expect("stored");
    let plain = Tensor::zeros([3], DType::F64);
    let e = catch(|| plain.copy_(&leaked).clone()).unwrap_err();
    assert!(matches!(&e.kind, ErrorKind::EscapedTracer { transform } if transform == "vmap"), "{e}");
    assert_eq!(e.op, "copy_");
    assert_eq!(plain.to_vec::<f64>(), vec![0.0; 3]);
    // writing into the escaped tracer is refused the same way
    let e = catch(|| leaked.add_(&plain).clone()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::EscapedTracer { .. }), "{e}");
}
