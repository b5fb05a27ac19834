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
    assert!(e.to_string().contains("concat: operands must agree on every axis but 0"), "{e}");
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
    assert!(Tensor::try_concat(&[] as &[Tensor], 0).is_err());
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

// ------------------------------------------ overflow and range (issue 17, 8 and 14)

fn overflow(e: &xform::Error, op: &str) {
    assert!(matches!(e.kind, ErrorKind::Overflow { .. }), "{e}");
    assert_eq!(e.op, op, "{e}");
}

#[test]
fn element_counts_past_isize_max_are_overflow_errors() {
    let big = 1usize << 32;
    // Constructors.
    overflow(&err(|| Tensor::zeros([big, big], DType::F32)), "zeros");
    overflow(&err(|| Tensor::ones([1 << 62], DType::F32)), "ones"); // 2^64 bytes
    assert!(matches!(Tensor::try_full([big, big, 2], 0.0, DType::I64).unwrap_err().kind, ErrorKind::Overflow { .. }));
    overflow(&err(|| Tensor::from_vec(Vec::<f32>::new(), [big, big])), "from_vec");
    overflow(&err(|| Tensor::eye_nm(big, big, 0, DType::F32)), "eye");
    overflow(&err(|| Tensor::linspace(0.0, 1.0, usize::MAX, DType::F32)), "linspace");
    overflow(&err(|| Tensor::arange(0.0, 1e30, 1.0, DType::F32)), "arange");
    // Shape rules: views and products of views that would be too large.
    let one = Tensor::scalar(1.0f32);
    let e = err(|| one.broadcast_to([big, big]));
    overflow(&e, "broadcast_to");
    assert!(e.to_string().contains("[4294967296, 4294967296]"), "{e}");
    let col = one.broadcast_to([big, 1]);
    overflow(&err(|| col.matmul(&col.t())), "matmul");
    let half = Tensor::scalar(true).broadcast_to([1 << 62]);
    overflow(&err(|| Tensor::concat(&[half.clone(), half.clone()], 0)), "concat");
    overflow(&err(|| Tensor::concat(&[half.clone(), half.clone(), half.clone(), half.clone(), half], 0)), "concat");
    // The same refusals under transforms, with the stack restored.
    let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
    let e = err(|| grad(|x: &Tensor| x.broadcast_to([big, big, 2]).sum())(&x));
    overflow(&e, "broadcast_to");
    assert_eq!(e.transforms, "grad");
    overflow(&err(|| vmap(|x: &Tensor| x.broadcast_to([big, big]))(&x)), "broadcast_to");
    // Size arithmetic in the methods.
    let x4 = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], [4]);
    let e = err(|| x4.narrow(0, usize::MAX, 2));
    assert!(matches!(e.kind, ErrorKind::Shape { .. }), "{e}");
    assert!(e.to_string().contains("18446744073709551615+2 exceeds axis 0 of size 4"), "{e}");
    assert!(matches!(catch(|| x4.split(0, &[usize::MAX, 5])).unwrap_err().kind, ErrorKind::Shape { .. }));
    assert!(matches!(err(|| x4.reshape(&[1 << 40, 1 << 40, -1])).kind, ErrorKind::Shape { .. }));
}

#[test]
fn pad_reports_overflowing_widths_as_overflow() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    let e = err(|| x.pad(&[(i64::MAX, i64::MAX)], 0.0));
    overflow(&e, "pad");
    assert!(e.to_string().contains("more than isize::MAX"), "{e}");
    assert!(!e.to_string().contains("negative"), "{e}");
    let e = err(|| xform::lax::pad(&x, &Tensor::scalar(0.0f32), &[0], &[0], &[usize::MAX]).or_raise());
    overflow(&e, "pad");
    // Negative padding is still reported as such.
    let e = err(|| x.pad(&[(-2, -2)], 0.0));
    assert!(e.to_string().contains("negative padding -2/-2"), "{e}");
    // Widths near i64::MIN and i64::MAX that cancel are valid: 3 elements,
    // all padding (the input is cropped away), also over two axes.
    let y = x.pad(&[(i64::MIN + 2, i64::MAX - 1)], 9.0);
    assert_eq!(y.to_vec::<f32>(), vec![9.0, 9.0, 9.0]);
    let w = (i64::MIN + 2, i64::MAX - 1);
    let y = x.reshape(&[3, 1]).pad(&[w, w], 9.0);
    assert_eq!(y.to_vec::<f32>(), vec![9.0; 3]);
    let y = x.pad(&[(1, 0)], 7.0);
    assert_eq!(y.to_vec::<f32>(), vec![7.0, 1.0, 2.0, 3.0]);
    // A padding value the integer dtype cannot hold.
    let xi = Tensor::from_vec(vec![1i32], [1]);
    overflow(&err(|| xi.pad(&[(1, 0)], 1e30)), "pad");
}

#[test]
fn scalars_out_of_an_integer_dtypes_range_are_refused() {
    // numpy 2: "OverflowError: Python integer 3000000000 out of bounds for int32".
    let x = Tensor::from_vec(vec![1i32, 2], [2]);
    let e = catch(|| x.add_scalar_(3_000_000_000i64).clone()).unwrap_err();
    overflow(&e, "add_scalar_");
    assert_eq!(
        e.to_string(),
        "add_scalar_: the scalar 3000000000 is out of bounds for int32 (which holds -2147483648 to 2147483647)"
    );
    overflow(&catch(|| x.fill_(1e30).clone()).unwrap_err(), "fill_");
    overflow(&catch(|| x.fill_(i64::MIN).clone()).unwrap_err(), "fill_");
    overflow(&catch(|| x.mul_scalar_(usize::MAX).clone()).unwrap_err(), "mul_scalar_");
    assert_eq!(x.to_vec::<i32>(), vec![1, 2], "a refused write leaves the target as it was");
    // A float into an integer tensor in place stays refused (numpy's
    // same_kind casting; JAX's scatter warns that it will refuse it).
    let e = catch(|| x.add_scalar_(3e9).clone()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::InPlace { .. }), "{e}");
    // Scalars that fit are fine, at the ends of the range too.
    x.fill_(i32::MAX);
    assert_eq!(x.to_vec::<i32>(), vec![i32::MAX; 2]);
    x.fill_(-2147483648.0);
    assert_eq!(x.to_vec::<i32>(), vec![i32::MIN; 2]);
    let l = Tensor::from_vec(vec![0i64], [1]);
    l.add_scalar_(i64::MAX);
    assert_eq!(l.to_vec::<i64>(), vec![i64::MAX]);
    // Operators and comparisons with an unsigned tensor (numpy 2 and JAX refuse -1 for uint32).
    let u = Tensor::from_vec(vec![1u32, 2], [2]);
    overflow(&err(|| &u + (-1)), "add");
    overflow(&err(|| u.lt_scalar(-1)), "lt");
    assert_eq!((&u - 1).to_vec::<u32>(), vec![0, 1]);
    // Constructors: a float is truncated toward zero (numpy's and JAX's
    // full), but NaN, infinities and values out of range are refused.
    assert_eq!(Tensor::full([2], 1.5, DType::I32).to_vec::<i32>(), vec![1, 1]);
    assert_eq!(Tensor::full([1], -1.9, DType::I64).to_vec::<i64>(), vec![-1]);
    assert_eq!(Tensor::full([1], 4294967295.0, DType::U32).to_vec::<u32>(), vec![u32::MAX]);
    overflow(&err(|| Tensor::full([2], 1e30, DType::I32)), "full");
    overflow(&err(|| Tensor::full([2], f64::NAN, DType::I64)), "full");
    overflow(&err(|| Tensor::full([2], -1.0, DType::U32)), "full");
    overflow(&err(|| Tensor::full([2], 4294967296.0, DType::U32)), "full");
    overflow(&err(|| x.full_like(f64::INFINITY)), "full_like");
}

/// A tracer of an interpreter's own tag carrying another interpreter's data
/// can only come from a bug in xform: each interpreter reports it as an
/// error naming the transform, on its operands and on the outputs, rather
/// than panicking.
#[test]
fn a_tracer_with_another_interpreters_data_is_an_internal_error() {
    use xform::core::program::Var;
    use xform::core::tensor::{Tracer, TracerData, Value};
    // `x` (a tracer) with its tag and aval kept and its data replaced.
    fn forge(x: &Tensor, data: TracerData) -> Tensor {
        let Value::Tracer(tr) = &*x.value() else { panic!("expected a tracer") };
        Tensor::from_tracer(Tracer { tag: tr.tag, aval: tr.aval.clone(), data })
    }
    fn check(e: xform::Error, transform: &str, got: &str, expected: &str) {
        assert_eq!(e.op, transform);
        assert!(matches!(e.kind, ErrorKind::Transform { .. }), "{e}");
        let message = format!("internal error: a {transform} tracer holds {got} data, not {expected}");
        assert!(e.to_string().contains(&message), "{e}");
    }
    let x = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
    let staged = || TracerData::Staged { var: Var(0) };

    check(err(|| jvp(|x: &Tensor| forge(x, staged()).sin(), &x, &x).1), "jvp", "staged", "dual");
    check(err(|| jvp(|x: &Tensor| forge(x, staged()), &x, &x).1), "jvp", "staged", "dual");
    let dual = |x: &Tensor| TracerData::Dual { primal: x.clone(), tangent: x.clone() };
    check(err(|| vmap(|x: &Tensor| forge(x, dual(x)).sin())(&x)), "vmap", "dual", "batched");
    check(err(|| vmap(|x: &Tensor| forge(x, dual(x)))(&x)), "vmap", "dual", "batched");
    let opts = xform::FunctionalizeOptions { remove_views: true };
    let batched = |x: &Tensor| TracerData::Batched { value: x.clone(), bdim: 0 };
    let f = xform::functionalize_with(|x: &Tensor| forge(x, batched(x)).sin(), opts.clone());
    check(err(|| f(&x)), "functionalize", "batched", "functional");
    let f = xform::functionalize_with(|x: &Tensor| forge(x, batched(x)), opts);
    check(err(|| f(&x)), "functionalize", "batched", "functional");
    let e = catch(|| trace(|x: &Tensor| forge(x, dual(x)).sin(), &x)).unwrap_err();
    check(e, "trace", "dual", "staged");
    let e = catch(|| trace(|x: &Tensor| forge(x, dual(x)), &x)).unwrap_err();
    check(e, "trace", "dual", "staged");
    assert_eq!(xform::core::interp::stack_depth(), 0);
}

/// Errors name the call the user made (issue 46, item 11): a shape that
/// overflows in `zeros`, `ones`, `broadcast_to`, `repeat` and `tile`
/// (which reported the internal `full` and `broadcast_in_dim`); reading a
/// tracer that escaped its transform says it escaped (it said "under vmap
/// the value differs per example"); saving under vmap names
/// `safetensors::save` and the leaf (it said `to_vec`).
#[test]
fn errors_name_the_users_call() {
    let big = 1usize << 62;
    let x = t(&[3]);
    for (op, e) in [
        ("zeros", err(|| Tensor::zeros([big, 4], DType::F32))),
        ("ones", err(|| Tensor::ones([big, 4], DType::F32))),
        ("broadcast_to", err(|| x.broadcast_to([big, 3]))),
        ("repeat", err(|| x.repeat(big, None))),
        ("tile", err(|| x.tile(&[big]))),
    ] {
        assert_eq!(e.op, op, "{e}");
        assert!(matches!(e.kind, ErrorKind::Overflow { .. }), "{e}");
        assert!(e.to_string().starts_with(&format!("{op}: a float32 array of shape")), "{e}");
    }

    let xs = t(&[2, 3]);
    let kept = std::cell::RefCell::new(Vec::new());
    let _ = vmap(|r: &Tensor| {
        kept.borrow_mut().push(r.clone());
        r * 2.0
    })(&xs);
    let _ = trace(
        |r: &Tensor| {
            kept.borrow_mut().push(r.clone());
            r * 2.0
        },
        &x,
    );
    for (k, name) in [(0, "vmap"), (1, "trace")] {
        let tracer = kept.borrow()[k].clone();
        let e = tracer.try_to_vec::<f32>().unwrap_err();
        assert!(matches!(e.kind, ErrorKind::EscapedTracer { .. }), "{e}");
        assert_eq!(e.op, "to_vec");
        assert!(e.to_string().contains(&format!("traced by {name} was used after {name} returned")), "{e}");
        let e = catch(|| Tensor::scalar(tracer.slice(s![0]).item::<f32>())).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::EscapedTracer { .. }), "{e}");
    }

    let dir = std::env::temp_dir().join(format!("xform-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("under_vmap.safetensors");
    let e = catch(|| {
        vmap(|r: &Tensor| {
            xform::safetensors::save(&path, &(r.clone(), r.sum())).or_raise();
            r.clone()
        })(&xs)
    })
    .unwrap_err();
    assert_eq!(e.op, "safetensors::save", "{e}");
    assert!(e.to_string().contains("leaf .0 (f32[3]) has no single value here"), "{e}");
    assert!(!path.exists(), "nothing was written");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(xform::core::interp::stack_depth(), 0);
}
