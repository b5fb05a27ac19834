//! Errors of the control-flow API (issue part 8): each names the branch
//! or the carry's leaf path, through the `try_` forms and `catch`, and
//! leaves the interpreter stack restored.

use super::{err, says, t64};
use xform::control::{try_cond, try_fori_loop, try_scan_with, try_switch, try_while_loop_with};
use xform::prelude::*;
use xform::{Bound, ErrorKind, ScanOptions, WhileOptions};

/// The error of a `try_` form, with the stack checked.
#[track_caller]
fn fails<T>(r: xform::Result<T>) -> xform::Error {
    assert_eq!(xform::core::interp::stack_depth(), 0);
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

fn x2() -> Tensor {
    t64(&[1.0, 2.0])
}

fn yes() -> Tensor {
    Tensor::scalar(true)
}

#[test]
fn branches_whose_outputs_differ() {
    let x = x2();
    // shape, at the root
    let e = fails(try_cond(&yes(), |x: &Tensor| x.clone(), |x: &Tensor| x.sum(), &x));
    says(&e, &["cond", "true_fn", "false_fn", "<root>"]);
    assert!(matches!(e.kind, ErrorKind::Shape { .. }), "{e}");
    // dtype, at a leaf of a tuple
    let e = fails(try_cond(
        &yes(),
        |x: &Tensor| (x.clone(), x.sum()),
        |x: &Tensor| (x.clone(), x.sum().cast(DType::F32)),
        &x,
    ));
    says(&e, &["true_fn", "false_fn", ".1", "f32", "f64"]);
    // different tree structures (a Vec tree may change its length)
    let e = fails(try_cond(&yes(), |x: &Tensor| vec![x.clone(), x.clone()], |x: &Tensor| vec![x.clone()], &x));
    says(&e, &["true_fn", "false_fn", "[1]"]);
    // switch names the branch that differs from branch 0
    let same = |x: &Tensor| (x * 2.0, x.sum());
    let other = |x: &Tensor| (x * 3.0, x.sum());
    let bad = |x: &Tensor| (x.reshape(&[2, 1]), x.sum());
    let e = fails(try_switch(&Tensor::scalar(0i32), &[&same, &other, &bad], &x));
    says(&e, &["switch", "branch 2", "branch 0", ".0"]);
    // the same through the panicking form and catch
    let e = err(|| cond(&yes(), |x: &Tensor| x.clone(), |x: &Tensor| x.cast(DType::F32), &x));
    says(&e, &["true_fn", "false_fn", "<root>"]);
    // and under transforms
    let e = err(|| grad(|x: &Tensor| cond(&yes(), |x: &Tensor| x.sum(), |x: &Tensor| x.clone(), x))(&x));
    says(&e, &["cond", "<root>"]);
    let e = err(|| {
        vmap(|x: &Tensor| cond(&x.gt_scalar(0.0), |x: &Tensor| x * 1.0, |x: &Tensor| x.cast(DType::F32), x))(&x)
    });
    says(&e, &["cond", "true_fn", "false_fn"]);
}

#[test]
fn predicates_and_indices_of_the_wrong_kind() {
    let x = x2();
    let id = |x: &Tensor| x.clone();
    let e = fails(try_cond(&Tensor::scalar(1.0f32), id, id, &x));
    says(&e, &["cond", "predicate", "bool"]);
    let e = fails(try_cond(&Tensor::from_vec(vec![true, false, true], [3]), id, id, &x));
    says(&e, &["cond", "predicate", "bool", "where", "select"]);
    // switch: no branches, a float index, a non-scalar index
    let none: &[&dyn Fn(&Tensor) -> Tensor] = &[];
    let e = fails(try_switch(&Tensor::scalar(0i32), none, &x));
    says(&e, &["switch", "at least one branch"]);
    let e = fails(try_switch(&Tensor::scalar(1.0f32), &[&id], &x));
    says(&e, &["switch", "index", "integer"]);
    let e = fails(try_switch(&Tensor::from_vec(vec![0i32, 1], [2]), &[&id], &x));
    says(&e, &["switch", "index", "scalar"]);
    // while: cond_fun must return a bool scalar
    let body = |x: &Tensor| x * 2.0;
    let o = WhileOptions::default();
    let e = fails(try_while_loop_with(|x: &Tensor| x.sum(), body, &x, &o));
    says(&e, &["while_loop", "cond_fun", "bool scalar"]);
    let e = fails(try_while_loop_with(|x: &Tensor| x.lt_scalar(10.0), body, &x, &o));
    says(&e, &["while_loop", "cond_fun", "bool scalar", "all", "any"]);
    let e = err(|| while_loop(|x: &Tensor| x.lt_scalar(10.0), body, &x));
    says(&e, &["cond_fun"]);
    // fori_loop: a tensor bound that is not an integer scalar
    let e = fails(try_fori_loop(
        Bound::Static(0),
        Bound::Dynamic(&Tensor::from_vec(vec![1i32, 2], [2])),
        |_: &Tensor, c: &Tensor| c * 2.0,
        &x,
    ));
    says(&e, &["fori_loop", "integer scalar"]);
}

#[test]
fn loop_bodies_that_change_the_carry() {
    let init = (t64(&[1.0, 2.0]), t64(&[3.0, 4.0, 5.0]));
    let o = WhileOptions::default();
    // while: the carry's leaf .1 changes shape
    let e = fails(try_while_loop_with(
        |(a, _): &(Tensor, Tensor)| a.sum().lt_scalar(10.0),
        |(a, b): &(Tensor, Tensor)| (a * 2.0, b.slice(s![..2])),
        &init,
        &o,
    ));
    says(&e, &["while_loop", "body_fun", ".1", "[3]", "[2]"]);
    // while: dtype of leaf .0
    let e = fails(try_while_loop_with(
        |(a, _): &(Tensor, Tensor)| a.sum().lt_scalar(10.0),
        |(a, b): &(Tensor, Tensor)| (a.cast(DType::F32), b.clone()),
        &init,
        &o,
    ));
    says(&e, &["body_fun", ".0", "f32"]);
    // scan: the body changes the carry's dtype at .1
    let xs = t64(&[1.0, 2.0, 3.0]);
    let so = ScanOptions::default();
    let e = fails(try_scan_with(
        |(a, b): &(Tensor, Tensor), x: &Tensor| ((a * x, b.cast(DType::F32)), ()),
        &init,
        &xs,
        &so,
    ));
    says(&e, &["scan", "carry", ".1", "f32", "f64"]);
    // scan: the body changes the carry's shape at the root
    let e = fails(try_scan_with(|c: &Tensor, x: &Tensor| (c.sum() * x, ()), &t64(&[1.0, 2.0]), &xs, &so));
    says(&e, &["scan", "carry", "<root>"]);
    // scan: xs leaves with different leading axes name the leaf
    let e = fails(try_scan_with(
        |c: &Tensor, (a, b): &(Tensor, Tensor)| (c + a.sum() + b, ()),
        &Tensor::scalar(0.0f64),
        &(Tensor::zeros([5, 2], DType::F64), Tensor::zeros([4], DType::F64)),
        &so,
    ));
    says(&e, &["scan", ".1", "leading axis 4", "5"]);
    // scan: a length that disagrees with xs, and no xs without a length
    let e = fails(try_scan_with(
        |c: &Tensor, x: &Tensor| (c + x, ()),
        &Tensor::scalar(0.0f64),
        &xs,
        &ScanOptions { length: Some(2), ..so.clone() },
    ));
    says(&e, &["scan", "leading axis 3", "length is 2"]);
    let e = fails(try_scan_with(|c: &Tensor, _: &()| (c * 2.0, ()), &Tensor::scalar(1.0f64), &(), &so));
    says(&e, &["scan", "length"]);
    // the panicking forms, caught, and under a transform
    let e = err(|| {
        scan(|c: &Tensor, x: &Tensor| (c.cast(DType::F32) * x.cast(DType::F32), ()), &Tensor::scalar(0.0f64), &xs)
    });
    says(&e, &["scan", "<root>", "f32"]);
    let e = err(|| {
        grad(|a: &Tensor| {
            while_loop(
                |(a, _): &(Tensor, Tensor)| a.sum().lt_scalar(10.0),
                |(a, b): &(Tensor, Tensor)| (a * 2.0, b.slice(s![..2])),
                &(a.clone(), t64(&[3.0, 4.0, 5.0])),
            )
            .0
            .sum()
        })(&t64(&[1.0, 2.0]))
    });
    says(&e, &["body_fun", ".1", "grad"]);
    let e = err(|| {
        vmap(|x: &Tensor| scan(|c: &Tensor, y: &Tensor| (c.sum() * y, ()), x, &t64(&[1.0, 2.0])).0)(&Tensor::ones(
            [3, 2],
            DType::F64,
        ))
    });
    says(&e, &["scan", "<root>", "vmap"]);
    // everything works afterwards
    let (c, _) = scan(|c: &Tensor, x: &Tensor| (c + x, ()), &Tensor::scalar(0.0f64), &xs);
    assert_eq!(c.item_f64(), 6.0);
}

/// A trip count that the loop index cannot represent is an `Overflow`
/// error, never a loop of a wrong length (`i64::MIN..i64::MAX` computed in
/// the dtype wraps to -1, which ran zero steps); bounds that fit still
/// run, up to the index dtype's edge.
#[test]
fn fori_trip_counts_that_overflow() {
    let x = x2();
    let body = |_: &Tensor, c: &Tensor| c + 1.0;
    let overflow = |lo: Bound<'_>, hi: Bound<'_>| {
        let e = fails(try_fori_loop(lo, hi, body, &x));
        assert!(matches!(e.kind, ErrorKind::Overflow { .. }), "{e}");
        says(&e, &["fori_loop"]);
    };
    overflow(Bound::Static(i64::MIN), Bound::Static(i64::MAX));
    // static bounds index with i32, as JAX's
    overflow(Bound::Static(0), Bound::Static(i32::MAX as i64 + 2));
    overflow(Bound::Static(-(1 << 40)), Bound::Static(0));
    // tensor bounds: counted in their dtype
    let (lo, hi) = (Tensor::scalar(i64::MIN), Tensor::scalar(i64::MAX));
    overflow(Bound::Dynamic(&lo), Bound::Dynamic(&hi));
    let (lo32, hi32) = (Tensor::scalar(i32::MIN), Tensor::scalar(1i32));
    overflow(Bound::Dynamic(&lo32), Bound::Dynamic(&hi32));
    // a static bound that the tensor bound's dtype cannot hold
    overflow(Bound::Static(i64::MAX), Bound::Dynamic(&hi32));
    // what fits runs: the index's last value is i32::MAX, and a reversed
    // range runs no step
    let edge = i32::MAX as i64;
    let last = try_fori_loop(
        Bound::Static(edge - 2),
        Bound::Static(edge + 1),
        |i: &Tensor, _: &Tensor| i.clone(),
        &Tensor::scalar(0i32),
    )
    .unwrap();
    assert_eq!(last.item::<i32>(), i32::MAX);
    let big = (Tensor::scalar(i64::MAX - 3), Tensor::scalar(i64::MAX));
    let last = try_fori_loop(
        Bound::Dynamic(&big.0),
        Bound::Dynamic(&big.1),
        |i: &Tensor, _: &Tensor| i.clone(),
        &Tensor::scalar(0i64),
    )
    .unwrap();
    assert_eq!(last.item::<i64>(), i64::MAX - 1);
    let none = try_fori_loop(Bound::Static(5), Bound::Static(-5), body, &x).unwrap();
    assert_eq!(none.to_vec::<f64>(), x.to_vec::<f64>());
}
