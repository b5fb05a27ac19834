//! Every transform's `try_` form returns xform errors as values, leaves the
//! interpreter stack as it was, and lets other panics unwind.

use xform::prelude::*;
use xform::{
    try_functionalize, try_grad, try_grad_with_aux, try_hessian, try_jacfwd, try_jacrev, try_jvp, try_linearize,
    try_trace, try_value_and_grad, try_value_and_grad_with_aux, try_vjp, try_vmap, try_vmap_with, VmapOptions,
};

fn bad(x: &Tensor) -> Tensor {
    // A shape error raised inside the transformed function.
    x.matmul(&Tensor::ones([5, 5], DType::F64)).sum()
}

#[test]
fn every_try_form_returns_the_error_raised_inside_f() {
    let x = Tensor::ones([3], DType::F64);
    let errs: Vec<(&str, xform::Error)> = vec![
        ("try_vmap", try_vmap(bad)(&Tensor::ones([2, 3], DType::F64)).unwrap_err()),
        (
            "try_vmap_with",
            try_vmap_with(bad, VmapOptions::new().chunk_size(1))(&Tensor::ones([2, 3], DType::F64)).unwrap_err(),
        ),
        ("try_grad", try_grad(bad)(&x).unwrap_err()),
        ("try_value_and_grad", try_value_and_grad(bad)(&x).unwrap_err()),
        ("try_grad_with_aux", try_grad_with_aux(|x: &Tensor| (bad(x), ()))(&x).unwrap_err()),
        ("try_value_and_grad_with_aux", try_value_and_grad_with_aux(|x: &Tensor| (bad(x), ()))(&x).unwrap_err()),
        ("try_jacfwd", try_jacfwd(bad)(&x).unwrap_err()),
        ("try_jacrev", try_jacrev(bad)(&x).unwrap_err()),
        ("try_hessian", try_hessian(bad)(&x).unwrap_err()),
        ("try_jvp", try_jvp(bad, &x, &x).err().unwrap()),
        ("try_vjp", try_vjp(bad, &x).err().unwrap()),
        ("try_linearize", try_linearize(bad, &x).err().unwrap()),
        ("try_trace", try_trace(bad, &x).unwrap_err()),
        ("try_functionalize", try_functionalize(bad)(&x).unwrap_err()),
    ];
    for (name, e) in errs {
        assert!(e.to_string().contains("matmul") && e.to_string().contains("[5, 5]"), "{name}: {e}");
    }
    // Nothing was left on the interpreter stack.
    assert_eq!(grad(|x: &Tensor| (x * x).sum())(&x).to_vec::<f64>(), vec![2.0; 3]);
}

#[test]
fn try_forms_return_errors_found_before_and_after_f() {
    let x = Tensor::ones([3], DType::F64);
    let e = try_grad(|x: &Tensor| x * 2.0)(&x).unwrap_err();
    assert!(e.to_string().contains("must return a scalar"), "{e}");
    let e = try_vmap_with(|x: &Tensor| x * 2.0, VmapOptions::new().in_axes(1))(&x).unwrap_err();
    assert!(e.to_string().contains("in_axes 1 is out of range"), "{e}");
    let e = try_jvp(|x: &Tensor| x * 2.0, &x, &Tensor::ones([2], DType::F64)).unwrap_err();
    assert!(e.to_string().contains("tangent"), "{e}");
    let (_, pullback) = try_vjp(|x: &Tensor| x * 2.0, &x).unwrap();
    assert!(pullback(&Tensor::ones([4], DType::F64)).is_err());
    let (_, f_lin) = try_linearize(|x: &Tensor| x * 2.0, &x).unwrap();
    assert_eq!(f_lin(&x).unwrap().to_vec::<f64>(), vec![2.0; 3]);
    assert!(f_lin(&Tensor::ones([4], DType::F64)).is_err());
    // Successes are values too.
    assert_eq!(try_grad(|x: &Tensor| (x * x).sum())(&x).unwrap().to_vec::<f64>(), vec![2.0; 3]);
}

#[test]
fn a_panic_that_is_not_an_xform_error_unwinds_through_a_try_form() {
    let x = Tensor::ones([3], DType::F64);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = try_grad(|_: &Tensor| -> Tensor { panic!("a bug in the closure") })(&x);
    }));
    let payload = r.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"a bug in the closure"));
    // The stack was unwound too.
    assert_eq!(grad(|x: &Tensor| (x * x).sum())(&x).to_vec::<f64>(), vec![2.0; 3]);
}
