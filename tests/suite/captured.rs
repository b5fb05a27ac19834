//! Values computed from captured tensors while a program is staged (issue
//! 46, item 1; NOTE: [trace-time values] in `xform_ops::provenance`): after
//! an eager write to the captured tensor, a jitted or traced function that
//! used a value computed from it at trace time (`exp(2 c)`), a value a
//! pass folded or dropped (`x * c` with `c` all ones), or a decision made
//! on it (`cond` on a known predicate, `item`) is refused with the
//! in-place error, never answered with the old number; a write to an
//! unrelated tensor changes nothing, and a new trace sees the new values.

use xform::core::interp::stack_depth;
use xform::prelude::*;
use xform::{trace, try_jit, ErrorKind};

fn c3() -> Tensor {
    Tensor::from_vec(vec![0.5f64, -1.0, 2.0], [3])
}

fn x3() -> Tensor {
    Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3])
}

/// The error of a call refused because a captured tensor was written.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: xform::Result<T>) {
    let e = r.expect_err("a stale value was returned");
    assert!(matches!(e.kind, ErrorKind::InPlace { .. }), "{e}");
    assert!(e.to_string().contains("modified by an in-place operation"), "{e}");
    assert_eq!(stack_depth(), 0);
}

/// `x * exp(2 c)`: jit (plain, under grad and vmap inside it, a view of
/// `c`) and trace refuse after `c.fill_(0.0)`; before the write they give
/// eager's numbers.
#[test]
fn values_computed_from_a_captured_tensor_are_guarded() {
    type F = Box<dyn Fn(&Tensor, &Tensor) -> Tensor>;
    let cases: Vec<(&str, F)> = vec![
        ("plain", Box::new(|x, c| x * (c * 2.0).exp())),
        ("a view", Box::new(|x, c| x * c.slice(s![0..3]).flip(&[0]).exp())),
        ("grad inside", Box::new(|x, c| grad(|x: &Tensor| (x * (c * 2.0).exp()).sin().sum())(x))),
        ("vmap inside", Box::new(|x, c| vmap(|x: &Tensor| x * (c * 2.0).exp().sum())(x))),
        ("reduction", Box::new(|x, c| x + (c * c).sum())),
    ];
    for (name, f) in &cases {
        let c = c3();
        let x = x3();
        let want = f(&x, &c);
        let j = try_jit(|x: &Tensor| f(x, &c));
        assert_eq!(j(&x).unwrap().to_vec::<f64>(), want.to_vec::<f64>(), "{name}");
        let p = trace(|x: &Tensor| f(x, &c), &x);
        assert_eq!(p.eval(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f64>(), want.to_vec::<f64>(), "{name}");
        // an unrelated write changes nothing
        let other = c3();
        other.fill_(7.0);
        assert_eq!(j(&x).unwrap().to_vec::<f64>(), want.to_vec::<f64>(), "{name}");
        c.fill_(0.0);
        refused(j(&x));
        refused(p.eval(std::slice::from_ref(&x)));
        // the caller's tensor keeps the write; a new trace sees it
        assert_eq!(c.to_vec::<f64>(), vec![0.0; 3]);
        let again = try_jit(|x: &Tensor| f(x, &c));
        assert_eq!(again(&x).unwrap().to_vec::<f64>(), f(&x, &c).to_vec::<f64>(), "{name}");
    }
}

/// jit's passes fold and drop constants (`x * c` with `c` all ones
/// simplifies to `x`; `exp(c)` is folded): the optimized program keeps the
/// checks of the constants it no longer holds.
#[test]
fn constants_the_passes_fold_or_drop_stay_guarded() {
    let ones = Tensor::ones([3], DType::F64);
    let x = x3();
    let j = try_jit(|x: &Tensor| x * &ones);
    assert_eq!(j(&x).unwrap().to_vec::<f64>(), x.to_vec::<f64>());
    ones.mul_scalar_(2.0);
    refused(j(&x));

    let c = c3();
    let f = try_jit(|x: &Tensor| {
        // staged as a constant computation, then folded by the passes
        let k = Tensor::ones([3], DType::F64) * 0.5;
        x * (&c + &k).exp()
    });
    let want = &x * (&c + 0.5).exp();
    assert_eq!(f(&x).unwrap().to_vec::<f64>(), want.to_vec::<f64>());
    c.add_scalar_(1.0);
    refused(f(&x));
}

/// Decisions staged code takes on values computed from a captured tensor:
/// a `cond` whose predicate is known at trace time records only the taken
/// branch, and `item` bakes a number in; both are refused after the write.
#[test]
fn decisions_on_captured_values_are_guarded() {
    let c = c3();
    let x = x3();
    let by_cond = try_jit(|x: &Tensor| cond(&c.sum().gt_scalar(0.0), |x: &Tensor| x * 2.0, |x: &Tensor| x * 3.0, x));
    assert_eq!(by_cond(&x).unwrap().to_vec::<f64>(), vec![2.0, 4.0, 6.0]);
    let by_item = try_jit(|x: &Tensor| x * c.max().item::<f64>());
    assert_eq!(by_item(&x).unwrap().to_vec::<f64>(), vec![2.0, 4.0, 6.0]);
    let by_trace = trace(|x: &Tensor| x * c.max().item::<f64>(), &x);
    c.fill_(-1.0);
    refused(by_cond(&x));
    refused(by_item(&x));
    refused(by_trace.eval(std::slice::from_ref(&x)));
}

/// A jitted function called on a captured tensor inside another jitted
/// function: its result (computed by its replay, not by `bind`) is guarded
/// in the outer program too.
#[test]
fn nested_jits_pass_their_guards_on() {
    let c = c3();
    let x = x3();
    let inner = try_jit(|c: &Tensor| (c * 2.0).exp());
    let outer = try_jit(|x: &Tensor| x * inner(&c).unwrap());
    let want = &x * (&c * 2.0).exp();
    assert_eq!(outer(&x).unwrap().to_vec::<f64>(), want.to_vec::<f64>());
    c.fill_(0.0);
    refused(outer(&x));
    // the inner function itself takes `c` as an argument: it sees the write
    assert_eq!(inner(&c).unwrap().to_vec::<f64>(), vec![1.0; 3]);
}

/// A recorded program evaluated on concrete values inside a jitted
/// function: what it computed from a captured tensor when it was recorded
/// (its guards) guards the jitted program too.
#[test]
fn programs_evaluated_while_staging_pass_their_guards_on() {
    let c = c3();
    let x = x3();
    let p = trace(|x: &Tensor| x * (&c * 2.0).exp(), &x);
    let outer = try_jit(|y: &Tensor| y + p.eval(std::slice::from_ref(&x3())).unwrap().remove(0));
    let want = &x + &x * (&c * 2.0).exp();
    assert_eq!(outer(&x).unwrap().to_vec::<f64>(), want.to_vec::<f64>());
    c.fill_(0.0);
    refused(outer(&x));
    // the recorded program refuses too: it read `exp(2 c)`
    refused(p.eval(std::slice::from_ref(&x)));
}

/// A while_loop whose predicate is known when the function is staged (a
/// captured count): the staged program is refused after the count is
/// written, rather than running the old number of iterations.
#[test]
fn loop_trip_counts_decided_on_captured_values_are_guarded() {
    let n = Tensor::scalar(3.0f64);
    let x = x3();
    let f = try_jit(|x: &Tensor| {
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&n),
            |(i, y): &(Tensor, Tensor)| (i + 1.0, y * 2.0),
            &(Tensor::scalar(0.0f64), x.clone()),
        );
        y
    });
    assert_eq!(f(&x).unwrap().to_vec::<f64>(), vec![8.0, 16.0, 24.0]);
    n.fill_(1.0);
    refused(f(&x));
}
