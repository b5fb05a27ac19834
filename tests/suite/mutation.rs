//! Mutation under every transform, and functionalize: the same numbers as
//! eager execution, for hand-written cases and for random programs of view
//! ops and in-place ops.

use crate::harness::{cases, close, run, v};
use crate::registry::G;
use xform::prelude::*;
use xform::testing::{check_grads_with, GradCheckOptions, Modes};
use xform::{functionalize, functionalize_with, jacfwd_with, jacrev_with, ErrorKind, FunctionalizeOptions, JacOptions};

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

// ---- recorded programs and later in-place writes (issue 17, item 5) ----------

fn assert_modified_in_place<T>(what: &str, r: Result<T, xform::Error>) {
    let e = r.err().unwrap_or_else(|| panic!("{what}: a program over a tensor written since was used"));
    assert!(matches!(e.kind, ErrorKind::InPlace { .. }), "{what}: {e}");
    assert!(e.to_string().contains("modified by an in-place operation after the program was recorded"), "{what}: {e}");
}

/// A pullback, a linearized function and a traced program keep capturing
/// the tensors they saw; an eager write to one of them afterwards (directly,
/// through its base, through a `detach()` alias, or to vjp's own output)
/// makes using the program an error, never a silently different number.
#[test]
fn recorded_programs_refuse_captured_tensors_written_since() {
    let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
    let ones = Tensor::ones([2], DType::F64);
    // vjp's pullback of x * c
    let c = Tensor::from_vec(vec![3.0f64, 4.0], [2]);
    let (_, pb) = vjp(|x: &Tensor| x * &c, &x);
    assert_eq!(v(&pb(&ones)), vec![3.0, 4.0]);
    c.fill_(5.0);
    assert_modified_in_place("vjp pullback", catch(|| pb(&ones)));
    // linearize's linear function
    let c = Tensor::from_vec(vec![3.0f64, 4.0], [2]);
    let (_, f_lin) = linearize(|x: &Tensor| x * &c, &x);
    assert_eq!(v(&f_lin(&ones)), vec![3.0, 4.0]);
    c.mul_scalar_(2.0);
    assert_modified_in_place("linearize", catch(|| f_lin(&ones)));
    // trace's program
    let c = Tensor::from_vec(vec![3.0f64, 4.0], [2]);
    let prog = trace(|x: &Tensor| x * &c, &x);
    assert_eq!(v(&prog.eval(std::slice::from_ref(&x)).unwrap()[0]), vec![3.0, 8.0]);
    c.add_scalar_(1.0);
    assert_modified_in_place("trace", prog.eval(std::slice::from_ref(&x)));
    // a captured view, written through its base
    let base = Tensor::from_vec(vec![3.0f64, 4.0, 5.0], [3]);
    let view = base.slice(s![..2]);
    let (_, pb) = vjp(|x: &Tensor| x * &view, &x);
    base.slice(s![1..]).fill_(0.0);
    assert_modified_in_place("view of a written base", catch(|| pb(&ones)));
    // a captured tensor, written through a detach() alias
    let c = Tensor::from_vec(vec![3.0f64, 4.0], [2]);
    let (_, pb) = vjp(|x: &Tensor| x * &c, &x);
    c.detach().fill_(7.0);
    assert_modified_in_place("detach alias", catch(|| pb(&ones)));
    // vjp's output is a residual of exp's derivative
    let (y, pb) = vjp(|x: &Tensor| x.exp(), &x);
    y.mul_scalar_(2.0);
    assert_modified_in_place("written output", catch(|| pb(&ones)));
    // a write to another tensor leaves a program usable, with its numbers
    let c = Tensor::from_vec(vec![3.0f64, 4.0], [2]);
    let other = c.copy();
    let (_, pb) = vjp(|x: &Tensor| x * &c, &x);
    other.fill_(9.0);
    assert_eq!(v(&pb(&ones)), vec![3.0, 4.0]);
    // a write under a transform is functionalized: the program keeps its values
    let c = Tensor::from_vec(vec![3.0f64, 4.0], [2]);
    let (_, pb) = vjp(|x: &Tensor| x * &c, &x);
    let _ = vmap(|r: &Tensor| {
        c.fill_(0.0);
        r.sum()
    })(&Tensor::ones([2, 2], DType::F64));
    assert_eq!(v(&pb(&ones)), vec![3.0, 4.0]);
    assert_eq!(xform::core::interp::stack_depth(), 0);
}

// ---- mutation under chunked and composed transforms (issue 17, item 6) -------

/// vmap with chunk_size writes a mutated argument back once, after every
/// chunk, also under an outer transform (where a chunk's slice is a new
/// value, not a view of the argument).
#[test]
fn chunked_vmap_writes_mutated_arguments_back_once() {
    let double_rows = |r: &Tensor| r.mul_scalar_(2.0).sum();
    let chunked = VmapOptions { chunk_size: Some(1), ..Default::default() };
    let g = |opts: VmapOptions| {
        grad(move |x: &Tensor| {
            let _ = vmap_with(double_rows, opts.clone())(x);
            x.sum()
        })(&Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]))
    };
    assert_eq!(v(&g(chunked.clone())), vec![2.0; 4]);
    assert_eq!(v(&g(VmapOptions::default())), vec![2.0; 4]);
    // eagerly: every row doubled once
    let xs = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [3, 2]);
    let sums = vmap_with(double_rows, chunked.clone())(&xs);
    assert_eq!(v(&sums), vec![6.0, 14.0, 22.0]);
    assert_eq!(v(&xs), vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
    // an unbatched argument written with an unbatched value: once, not once per chunk
    let f = |(x, c): &(Tensor, Tensor)| {
        c.add_scalar_(1.0);
        x * c
    };
    let in_axes = Axes::Args(vec![Some(0), None]);
    for chunk_size in [None, Some(1), Some(2)] {
        let c = Tensor::from_vec(vec![10.0f64, 20.0], [2]);
        let xs = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [3, 2]);
        let out =
            vmap_with(f, VmapOptions { in_axes: in_axes.clone(), chunk_size, ..Default::default() })(&(xs, c.clone()));
        assert_eq!(v(&c), vec![11.0, 21.0], "chunk_size {chunk_size:?}");
        assert_eq!(v(&out), vec![11.0, 42.0, 33.0, 84.0, 55.0, 126.0], "chunk_size {chunk_size:?}");
    }
    // a batched value written into an unbatched argument is refused, and nothing is written
    let c = Tensor::from_vec(vec![10.0f64, 20.0], [2]);
    let xs = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    let e = catch(|| {
        vmap_with(
            |(x, c): &(Tensor, Tensor)| {
                c.add_(x);
                x.sum()
            },
            VmapOptions { in_axes: in_axes.clone(), chunk_size: Some(1), ..Default::default() },
        )(&(xs.clone(), c.clone()))
    })
    .unwrap_err();
    assert!(e.to_string().contains("would store a value traced by vmap"), "{e}");
    assert_eq!(v(&c), vec![10.0, 20.0]);
}

/// vmap writes mutated arguments back all or nothing: a refused write-back
/// of the second argument leaves the first unchanged too.
#[test]
fn vmap_write_back_is_all_or_nothing() {
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    let row = Tensor::from_vec(vec![5.0f64, 6.0], [2]);
    let b = row.broadcast_to([2, 2]); // a broadcast view: cannot be written
    let e = catch(|| {
        vmap(|(a, b): &(Tensor, Tensor)| {
            a.add_scalar_(1.0);
            b.add_scalar_(1.0);
            a.sum()
        })(&(a.clone(), b.clone()))
    })
    .unwrap_err();
    assert!(e.to_string().contains("broadcast view"), "{e}");
    assert_eq!(e.op, "vmap");
    assert_eq!(v(&a), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(v(&row), vec![5.0, 6.0]);
    // and two arguments whose final values alias each other's storage get
    // the values f left in them, as eagerly
    let p = Tensor::from_vec(vec![1.0f64, 2.0], [1, 2]);
    let q = Tensor::from_vec(vec![3.0f64, 4.0], [1, 2]);
    let swap = |(p, q): &(Tensor, Tensor)| {
        let old_q = q.copy();
        q.copy_(p); // q's final value is p's storage, written back after p's
        p.copy_(&old_q);
        p.sum()
    };
    let _ = vmap(swap)(&(p.clone(), q.clone()));
    assert_eq!((v(&p), v(&q)), (vec![3.0, 4.0], vec![1.0, 2.0]));
}

/// jacfwd, jacrev and hessian of a function that mutates its argument give
/// the same Jacobian for every chunking, and mutate the argument once, as
/// one eager call would.
#[test]
fn jacobians_of_mutating_functions_do_not_depend_on_chunking() {
    let f = |x: &Tensor| {
        x.mul_scalar_(2.0);
        x.sin()
    };
    let x0 = [0.1f64, 0.2, 0.3];
    let want_j = |i: usize, j: usize| if i == j { 2.0 * (2.0 * x0[i]).cos() } else { 0.0 };
    let want: Vec<f64> = (0..9).map(|k| want_j(k / 3, k % 3)).collect();
    for max_bytes in [1usize, 64, 1 << 30] {
        let opts = JacOptions { max_bytes };
        let x = Tensor::from_vec(x0.to_vec(), [3]);
        close("jacfwd", &v(&jacfwd_with(f, opts.clone())(&x)), &want, 1e-12).unwrap();
        close("jacfwd write-back", &v(&x), &[0.2, 0.4, 0.6], 0.0).unwrap();
        let x = Tensor::from_vec(x0.to_vec(), [3]);
        close("jacrev", &v(&jacrev_with(f, opts.clone())(&x)), &want, 1e-12).unwrap();
        close("jacrev write-back", &v(&x), &[0.2, 0.4, 0.6], 0.0).unwrap();
        // hessian of sum((2x)^3) = 8 sum(x^3): diag(48 x)
        let x = Tensor::from_vec(x0.to_vec(), [3]);
        let cube = |x: &Tensor| {
            x.mul_scalar_(2.0);
            (x * x * x).sum()
        };
        let h = jacfwd_with(jacrev_with(cube, opts.clone()), opts)(&x);
        let want_h: Vec<f64> = (0..9).map(|k| if k / 3 == k % 3 { 48.0 * x0[k / 3] } else { 0.0 }).collect();
        close("hessian", &v(&h), &want_h, 1e-12).unwrap();
        close("hessian write-back", &v(&x), &[0.2, 0.4, 0.6], 0.0).unwrap();
    }
}

/// A write through a `detach()` alias changes the tensor's values under
/// every transform as it does eagerly, and keeps its derivative (PyTorch's
/// semantics: d/dx of (x * x).sum() at the new x).
#[test]
fn writes_through_detach_aliases_match_eager() {
    let f = |x: &Tensor| {
        let d = x.detach();
        d.mul_scalar_(2.0);
        (x * x).sum()
    };
    let x0 = vec![1.0f64, -2.0, 0.5];
    // eagerly: x doubled, then summed squares
    let x = Tensor::from_vec(x0.clone(), [3]);
    assert_eq!(f(&x).item::<f64>(), 4.0 * (1.0 + 4.0 + 0.25));
    assert_eq!(v(&x), vec![2.0, -4.0, 1.0]);
    // grad: 2 * (2 x0), and x written back
    let x = Tensor::from_vec(x0.clone(), [3]);
    let (val, g) = value_and_grad(f)(&x);
    assert_eq!(val.item::<f64>(), 21.0);
    assert_eq!(v(&g), vec![4.0, -8.0, 2.0]);
    assert_eq!(v(&x), vec![2.0, -4.0, 1.0]);
    // jvp: the tangent of x survives the write
    let x = Tensor::from_vec(x0.clone(), [3]);
    let (y, t) = jvp(f, &x, &Tensor::ones([3], DType::F64));
    assert_eq!((y.item::<f64>(), t.item::<f64>()), (21.0, 2.0 * (2.0 - 4.0 + 1.0)));
    // vmap and functionalize: the eager values, and the eager write-back
    let xs = Tensor::from_vec(vec![1.0f64, -2.0, 0.5, 3.0, 0.0, -1.0], [2, 3]);
    let ys = vmap(f)(&xs);
    assert_eq!(v(&ys), vec![21.0, 4.0 * 10.0]);
    assert_eq!(v(&xs), vec![2.0, -4.0, 1.0, 6.0, 0.0, -2.0]);
    let x = Tensor::from_vec(x0.clone(), [3]);
    assert_eq!(functionalize(f)(&x).item::<f64>(), 21.0);
    assert_eq!(v(&x), vec![2.0, -4.0, 1.0]);
    // the values are exact where x is not finite, and for signed zeros
    let g = |x: &Tensor| {
        x.detach().copy_(&Tensor::from_vec(vec![-0.0f64, 1.0, 2.0], [3]));
        x * 1.0
    };
    let x = Tensor::from_vec(vec![f64::INFINITY, f64::NAN, 0.0], [3]);
    let (y, t) = jvp(g, &x, &Tensor::ones([3], DType::F64));
    let y = v(&y);
    assert!(y[0] == 0.0 && y[0].is_sign_negative() && y[1] == 1.0 && y[2] == 2.0, "{y:?}");
    assert_eq!(v(&t)[2], 1.0);
}

/// jacfwd, jacrev and hessian return the empty Jacobian of the right shape
/// when the input or the output has no elements (as JAX does).
#[test]
fn jacobians_with_zero_elements_have_the_right_shape() {
    let empty = Tensor::zeros([0], DType::F64);
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    assert_eq!(jacfwd(|x: &Tensor| x.sin())(&empty).shape().dims(), &[0, 0]);
    assert_eq!(jacrev(|x: &Tensor| x.sin())(&empty).shape().dims(), &[0, 0]);
    // zero inputs, one output
    let j = jacfwd(|x: &Tensor| x.sum())(&empty);
    assert_eq!(j.shape().dims(), &[0]);
    assert_eq!(jacrev(|x: &Tensor| x.sum())(&empty).shape().dims(), &[0]);
    assert_eq!(hessian(|x: &Tensor| (x * x).sum())(&empty).shape().dims(), &[0, 0]);
    // zero outputs
    assert_eq!(jacfwd(|x: &Tensor| x.slice(s![..0]))(&x).shape().dims(), &[0, 3]);
    assert_eq!(jacrev(|x: &Tensor| x.slice(s![..0]))(&x).shape().dims(), &[0, 3]);
    // an empty leaf beside a full one: the full one's block has its numbers
    let f = |(a, b): &(Tensor, Tensor)| (a.sum() + (b * b).sum()) * 1.0;
    let (ja, jb) = jacfwd(f)(&(empty.clone(), x.clone()));
    assert_eq!((ja.shape().dims(), v(&jb)), (&[0usize][..], vec![2.0, 4.0, 6.0]));
    let (ja, jb) = jacrev(f)(&(empty.clone(), x.clone()));
    assert_eq!((ja.shape().dims(), v(&jb)), (&[0usize][..], vec![2.0, 4.0, 6.0]));
}

/// Mutation through a deep chain of views under a transform still reaches
/// the base.
#[test]
fn writes_through_deep_view_chains_under_transforms() {
    let f = |x: &Tensor| {
        let buf = x.copy();
        let mut view = buf.clone();
        for _ in 0..200 {
            view = view.slice(s![1..]).flip(&[0]).flip(&[0]);
        }
        view.mul_scalar_(10.0); // the last element only
        buf
    };
    let x = Tensor::arange(0.0, 201.0, 1.0, DType::F64);
    let eager = f(&x);
    assert_eq!(v(&eager)[200], 2000.0);
    assert_eq!(v(&eager)[199], 199.0);
    let xs = Tensor::stack(&[x.clone(), &x * 2.0], 0);
    let batched = vmap(f)(&xs);
    assert_eq!(v(&batched.select(0, 0)), v(&eager));
    assert_eq!(v(&batched.select(0, 1))[200], 4000.0);
    let g = grad(|x: &Tensor| f(x).sum())(&x);
    assert_eq!(v(&g)[200], 10.0);
    assert_eq!(v(&g)[0], 1.0);
}
