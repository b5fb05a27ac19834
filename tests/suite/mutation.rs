//! Mutation under every transform, and functionalize: the same numbers as
//! eager execution, for hand-written cases and for random programs of view
//! ops and in-place ops.

use crate::harness::{cases, close, run, v};
use crate::registry::G;
use xform::prelude::*;
use xform::testing::{check_grads_with, GradCheckOptions, Modes};
use xform::{functionalize, functionalize_with, FunctionalizeOptions};

/// A buffer of zeros filled slice by slice, and `+=` through views.
fn fill_by_slices(x: &Tensor) -> Tensor {
    let n = x.shape()[0];
    let buf = Tensor::zeros([n, 2], x.dtype());
    for i in 0..n as isize {
        buf.select(0, i).select(0, 0).copy_(&x.select(0, i).sin());
        buf.slice(s![i, 1..]).copy_(&(x.select(0, i) * 2.0).reshape(&[1]));
    }
    let col = buf.slice(s![.., 0]);
    col.add_(&buf.slice(s![.., 1]));
    buf
}

#[test]
fn vmap_of_mutating_code_equals_a_loop() {
    let xs = Key::new(1).normal([4, 3], DType::F64);
    let got = vmap(fill_by_slices)(&xs);
    for i in 0..4 {
        let want = fill_by_slices(&xs.select(0, i).copy());
        close("row", &v(&got.select(0, i)), &v(&want), 1e-15).unwrap();
    }
    // the unbatched zeros buffer became batched
    assert_eq!(got.shape().dims(), &[4, 3, 2]);
}

/// vmap keeps its last broadcast of an unbatched operand; an in-place
/// write to that operand (functionalized, unbatched value) must be seen by
/// its next use, and a view of it must follow its base.
#[test]
fn unbatched_operands_written_in_place_are_broadcast_again() {
    let f = |x: &Tensor| {
        let c = Tensor::ones([3], DType::F64);
        let view = c.slice(s![..]);
        let a = x * &c;
        let a2 = x * &c; // the kept broadcast, unchanged operand
        c.mul_scalar_(2.0);
        let b = x * &c; // c is now 2
        let w = x * &view; // the view follows its base: 2
        Tensor::stack(&[a, a2, b, w], 0)
    };
    let xs = Key::new(7).normal([4, 3], DType::F64);
    let got = vmap(f)(&xs);
    for i in 0..4 {
        let want = f(&xs.select(0, i).copy());
        close("row", &v(&got.select(0, i)), &v(&want), 0.0).unwrap();
        let x = v(&xs.select(0, i));
        let scaled: Vec<f64> = x.iter().map(|e| 2.0 * e).collect();
        close("after the write", &v(&got.select(0, i).select(0, 2)), &scaled, 0.0).unwrap();
        close("view after the write", &v(&got.select(0, i).select(0, 3)), &scaled, 0.0).unwrap();
    }
}

#[test]
fn sibling_views_see_writes_under_transforms() {
    let f = |x: &Tensor| {
        let buf = Tensor::zeros([2, 3], DType::F64);
        let row = buf.select(0, 1);
        let col = buf.slice(s![.., 2]);
        let t = buf.t();
        row.copy_(x); // write through one view
        col.mul_scalar_(10.0); // a sibling sees it and writes too
        let seen = t.copy(); // a third view sees both
        Tensor::stack(&[buf.flatten(), seen.flatten()], 0)
    };
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    let eager = f(&x);
    assert_eq!(v(&eager.select(0, 0)), vec![0., 0., 0., 1., 2., 30.]);
    assert_eq!(v(&eager.select(0, 1)), vec![0., 1., 0., 2., 0., 30.]);
    let xs = Tensor::stack(&[x.clone(), &x * 2.0], 0);
    let batched = vmap(f)(&xs);
    close("vmap", &v(&batched.select(0, 0)), &v(&eager), 0.0).unwrap();
    close("vmap", &v(&batched.select(0, 1)), &v(&f(&(&x * 2.0))), 0.0).unwrap();
    let (_, t) = jvp(f, &x, &x.ones_like());
    assert_eq!(v(&t.select(0, 0)), vec![0., 0., 0., 1., 1., 10.]);
    check_grads_with(f, &x, 2, Modes::Both, &GradCheckOptions::default()).unwrap();
    close("functionalize", &v(&functionalize(f)(&x)), &v(&eager), 0.0).unwrap();
}

#[test]
fn grad_of_mutating_code_matches_finite_differences() {
    let f = |x: &Tensor| {
        let y = x.copy();
        y.slice(s![1..]).mul_(&x.slice(s![..-1]).exp());
        y.add_scalar_(1.0);
        y.select(0, 0).copy_(&(y.sum() * 0.5));
        (&y * &y).sum()
    };
    let x = Key::new(2).normal([4], DType::F64);
    check_grads_with(f, &x, 2, Modes::Both, &GradCheckOptions::default()).unwrap();
}

#[test]
fn mutated_arguments_are_written_back() {
    let f = |x: &Tensor| {
        x.slice(s![1..]).mul_scalar_(3.0);
        x.sum()
    };
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    let y = functionalize(f)(&x);
    assert_eq!(v(&x), vec![1., 6., 9.]);
    assert_eq!(y.item::<f64>(), 16.0);
    // the same write-back under vmap, jvp and grad, as eager would do
    let xs = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    let _ = vmap(f)(&xs);
    assert_eq!(v(&xs), vec![1., 6., 9., 4., 15., 18.]);
    let x2 = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
    let g = grad(|x: &Tensor| {
        x.mul_scalar_(2.0);
        (x * x).sum()
    })(&x2);
    assert_eq!(v(&x2), vec![2., 4.]);
    assert_eq!(v(&g), vec![8., 16.]); // d/dx (2x)^2 = 8x at the original x
                                      // in_axes over axis 1: the write lands in the right places
    let xt = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    let _ = vmap_with(
        |x: &Tensor| x.add_scalar_(10.0).sum(),
        VmapOptions { in_axes: Axes::All(Some(1)), ..Default::default() },
    )(&xt);
    assert_eq!(v(&xt), vec![11., 12., 13., 14.]);
}

#[test]
fn traced_functionalized_programs_have_no_mutation() {
    let f = |x: &Tensor| {
        let buf = Tensor::zeros([3], DType::F32);
        buf.slice(s![1..]).copy_(&x.slice(s![..2]).sin());
        buf.add_(x);
        buf
    };
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    let prog = trace(functionalize(f), &x);
    let text = prog.to_string();
    assert!(!text.contains("_"), "{text}"); // no in-place op has a name here at all
    close("program", &v(&prog.eval(std::slice::from_ref(&x)).unwrap()[0]), &v(&f(&x)), 1e-7).unwrap();
    // removing views: results never alias the argument
    let g = |x: &Tensor| (x.reshape(&[3, 1]), x.slice(s![1..]));
    let (a, b) = functionalize_with(g, FunctionalizeOptions { remove_views: true })(&x);
    assert!(!a.shares_storage(&x) && !b.shares_storage(&x));
    let (a2, _) = g(&x);
    assert!(a2.shares_storage(&x));
    let pv = trace(functionalize_with(g, FunctionalizeOptions { remove_views: true }), &x);
    assert_eq!(pv.eqns.iter().filter(|e| e.prim.name() == "copy").count(), 2, "{pv}");
}

#[test]
fn writes_of_traced_values_into_outer_tensors_are_refused() {
    let outer = Tensor::zeros([3], DType::F64);
    let xs = Key::new(3).normal([2, 3], DType::F64);
    let e = catch(|| {
        vmap(|x: &Tensor| {
            outer.copy_(x);
            x.sum()
        })(&xs)
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("would store a value traced by vmap into a tensor created outside that transform"),
        "{e}"
    );
    assert_eq!(v(&outer), vec![0.0; 3]);
    assert_eq!(xform::core::interp::stack_depth(), 0);
    // a value that does not depend on the transform is fine, and consistent
    let _ = vmap(|x: &Tensor| {
        outer.fill_(7.0);
        x.sum()
    })(&xs);
    assert_eq!(v(&outer), vec![7.0; 3]);
}

#[test]
fn bad_in_place_ops_under_transforms_leave_the_target_unchanged() {
    let xs = Key::new(4).normal([2, 3], DType::F32);
    let e = catch(|| {
        vmap(|x: &Tensor| {
            let ints = Tensor::zeros([3], DType::I32);
            ints.add_(x);
            ints
        })(&xs)
    })
    .unwrap_err();
    assert!(e.to_string().contains("a float32 result cannot be written into a int32 tensor"), "{e}");
    let e = catch(|| vmap(|x: &Tensor| x.slice(s![..1]).broadcast_to([3]).add_(x).clone())(&xs)).unwrap_err();
    assert!(e.to_string().contains("broadcast view"), "{e}");
    let e = catch(|| grad(|x: &Tensor| x.add_(&Tensor::ones([2, 3], DType::F32)).sum())(&xs.select(0, 0).copy()))
        .unwrap_err();
    assert!(e.to_string().contains("would grow the target"), "{e}");
}

// ---- random programs ----------------------------------------------------------

/// One step of a random program over a growing list of tensors.
#[derive(Clone, Debug)]
enum Step {
    /// A view of tensor `src`.
    View { src: usize, kind: usize, a: usize, b: usize },
    /// A fresh tensor computed from `src`.
    Pure { src: usize, kind: usize },
    /// A fresh zeros buffer like `src`.
    Zeros { src: usize },
    /// An in-place op on `dst` with a value computed from `src`.
    InPlace { dst: usize, src: usize, kind: usize },
}

fn gen_program(g: &mut G, len: usize) -> Vec<Step> {
    let mut n = 1;
    let mut steps = Vec::new();
    for _ in 0..len {
        let step = match g.int(0, 9) {
            0..=3 => Step::View { src: g.int(0, n - 1), kind: g.int(0, 5), a: g.int(0, 7), b: g.int(0, 7) },
            4 => Step::Pure { src: g.int(0, n - 1), kind: g.int(0, 2) },
            5 => Step::Zeros { src: g.int(0, n - 1) },
            _ => Step::InPlace { dst: g.int(0, n - 1), src: g.int(0, n - 1), kind: g.int(0, 4) },
        };
        if !matches!(step, Step::InPlace { .. }) {
            n += 1;
        }
        steps.push(step);
    }
    steps
}

fn view(t: &Tensor, kind: usize, a: usize, b: usize) -> Tensor {
    let r = t.rank();
    match kind {
        0 if r >= 2 => t.transpose((a % r) as isize, (b % r) as isize),
        1 if r >= 1 => {
            let ax = a % r;
            let n = t.shape()[ax];
            // never empty: a mean of nothing would put NaNs in the check
            let start = (b % n.max(1)) as isize;
            t.slice_axis(ax as isize, start, n as isize, 1 + b % 2)
        }
        2 if r >= 1 && t.shape()[a % r] > 0 => t.select((a % r) as isize, (b % t.shape()[a % r]) as isize),
        3 => t.flatten(),
        4 => t.unsqueeze((a % (r + 1)) as isize),
        _ if r >= 1 => t.flip(&[(a % r) as isize]),
        _ => t.clone(),
    }
}

/// Runs a program on `x` and returns the sum of every tensor it made.
fn run_program(steps: &[Step], x: &Tensor) -> Tensor {
    let mut ts = vec![x.clone()];
    for s in steps {
        match *s {
            Step::View { src, kind, a, b } => ts.push(view(&ts[src], kind, a, b)),
            Step::Pure { src, kind } => ts.push(match kind {
                0 => ts[src].sin(),
                1 => &ts[src] * 1.5,
                _ => (&ts[src] + 0.25).tanh(),
            }),
            Step::Zeros { src } => ts.push(Tensor::zeros(ts[src].shape(), DType::F64)),
            Step::InPlace { dst, src, kind } => {
                let (d, sv) = (&ts[dst], &ts[src]);
                // a fresh value that broadcasts to the target
                let val = if d.shape() == sv.shape() { sv.sin() * 0.5 } else { sv.mean() };
                match kind {
                    0 => {
                        d.add_(&val);
                    }
                    1 => {
                        d.mul_(&(val.tanh() + 1.0));
                    }
                    2 => {
                        d.copy_(&val);
                    }
                    3 => {
                        d.sub_scalar_(0.5);
                    }
                    _ => {
                        d.fill_(0.75);
                    }
                }
            }
        }
    }
    let sums: Vec<Tensor> = ts.iter().map(|t| t.sum()).collect();
    Tensor::stack(&sums, 0)
}

#[test]
fn random_programs_of_views_and_mutations() {
    run("mutation programs", cases(40), |seed| {
        let mut g = G::new(seed);
        let len = g.int(1, 10);
        let steps = gen_program(&mut g, len);
        let shape = [g.int(1, 3), g.int(1, 3), g.int(1, 2)];
        let x = Key::new(seed).normal(shape, DType::F64);
        let ctx = |what: &str| format!("{what} of {steps:?} on {:?}", x.shape());
        // eager, on a copy (the program may mutate its argument)
        let x_eager = x.copy();
        let want = run_program(&steps, &x_eager);
        // functionalize: same outputs, same final argument
        let x_f = x.copy();
        let got = functionalize(|x: &Tensor| run_program(&steps, x))(&x_f);
        close(&ctx("functionalize"), &v(&got), &v(&want), 1e-12)?;
        close(&ctx("functionalize write-back"), &v(&x_f), &v(&x_eager), 1e-12)?;
        // vmap: a loop over examples, and the written-back batch
        let xs = Key::new(seed + 1).normal([2, shape[0], shape[1], shape[2]], DType::F64);
        let xs_loop = xs.copy();
        let got_v = vmap(|x: &Tensor| run_program(&steps, x))(&xs);
        for i in 0..2 {
            let xi = xs_loop.select(0, i).copy();
            let wi = run_program(&steps, &xi);
            close(&ctx("vmap"), &v(&got_v.select(0, i)), &v(&wi), 1e-12)?;
            close(&ctx("vmap write-back"), &v(&xs.select(0, i)), &v(&xi), 1e-12)?;
        }
        // grad: finite differences (on a copy, since the program mutates)
        let f = |x: &Tensor| {
            let y = x.copy();
            (run_program(&steps, &y)
                * Tensor::linspace(
                    0.5,
                    1.5,
                    steps.iter().filter(|s| !matches!(s, Step::InPlace { .. })).count() + 1,
                    DType::F64,
                ))
            .sum()
        };
        check_grads_with(f, &x, 1, Modes::Both, &GradCheckOptions { per_element_limit: Some(0), ..Default::default() })
            .map_err(|e| format!("{}: {e}", ctx("grad")))?;
        Ok(())
    });
}

/// A captured concrete view whose base is written in place inside `trace`
/// must be read again: the program sees each value the eager code saw.
#[test]
fn traced_constants_follow_writes_to_a_views_base() {
    let buf = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [4]);
    let view = buf.slice(s![0..2]);
    let prog = trace(
        |x: &Tensor| {
            let first = x * &view;
            buf.add_scalar_(10.0);
            let second = x * &view;
            first + second
        },
        &Tensor::zeros([2], DType::F64),
    );
    let out = prog.eval(&[Tensor::from_vec(vec![1.0f64, 1.0], [2])]).unwrap();
    // (1 + 11, 2 + 12): the second product sees the written base
    assert_eq!(v(&out[0]), vec![12.0, 14.0]);
}
