//! argnums (`grad_argnums(f, Arg::<0>)`, `restrict`) and integer leaves
//! anywhere in a differentiated argument.

use crate::harness::{assert_close as close, v};
use xform::prelude::*;
use xform::{hessian_argnums, jacfwd_argnums, jacrev_argnums, jvp_argnums, restrict, vjp_argnums};

type Args = (Tensor, Tensor, Tensor);

fn loss((w, x, y): &Args) -> Tensor {
    (x.matmul(w).tanh() - y).powf(2.0).sum()
}

fn args() -> Args {
    let k = Key::new(3);
    (
        k.fold_in(0).normal([3, 2], DType::F64),
        k.fold_in(1).normal([4, 3], DType::F64),
        k.fold_in(2).normal([4, 2], DType::F64),
    )
}

#[test]
fn grad_argnums_equals_the_selected_parts_of_the_full_gradient() {
    let a = args();
    let full = grad(loss)(&a);
    let dw = grad_argnums(loss, Arg::<0>)(&a);
    close(&v(&dw), &v(&full.0), 0.0);
    let (dw2, dy) = grad_argnums(loss, (Arg::<0>, Arg::<2>))(&a);
    close(&v(&dw2), &v(&full.0), 0.0);
    close(&v(&dy), &v(&full.2), 0.0);
    // Order of the selection is the order of the result.
    let (dy3, dx3) = grad_argnums(loss, (Arg::<2>, Arg::<1>))(&a);
    close(&v(&dy3), &v(&full.2), 0.0);
    close(&v(&dx3), &v(&full.1), 0.0);
    let (val, dw4) = value_and_grad_argnums(loss, Arg::<0>)(&a);
    close(&v(&val), &v(&loss(&a)), 0.0);
    close(&v(&dw4), &v(&full.0), 0.0);
}

#[test]
fn argnums_records_no_backward_work_for_the_other_arguments() {
    // The gradient for x (a [4, 3] matmul transpose) is never computed.
    let a = args();
    let selected = trace(|a: &Args| grad_argnums(loss, Arg::<0>)(a), &a);
    let everything = trace(|a: &Args| grad(loss)(a).0, &a);
    let count = |p: &Program| p.eqns.iter().filter(|e| e.prim.name() == "dot_general").count();
    assert!(count(&selected) < count(&everything), "{selected}\n---\n{everything}");
}

#[test]
fn jacobians_hessians_vjp_and_jvp_take_argnums() {
    let a = args();
    let f = |(w, x, _): &Args| x.matmul(w).sin();
    let jf = jacfwd_argnums(f, Arg::<0>)(&a);
    let jr = jacrev_argnums(f, Arg::<0>)(&a);
    let full = jacrev(f)(&a);
    assert_eq!(jf.shape().dims(), &[4, 2, 3, 2]);
    close(&v(&jf), &v(&full.0), 1e-14);
    close(&v(&jr), &v(&full.0), 0.0);
    let (jx, jw) = jacrev_argnums(f, (Arg::<1>, Arg::<0>))(&a);
    close(&v(&jx), &v(&full.1), 0.0);
    close(&v(&jw), &v(&full.0), 0.0);

    let h = hessian_argnums(loss, Arg::<0>)(&a);
    let (w, x, y) = a.clone();
    let hw = hessian(move |w: &Tensor| loss(&(w.clone(), x.clone(), y.clone())))(&w);
    close(&v(&h), &v(&hw), 1e-14);

    let (out, pullback) = vjp_argnums(f, &a, Arg::<1>);
    let ct = Tensor::ones([4, 2], DType::F64);
    let (_, full_pullback) = vjp(f, &a);
    close(&v(&pullback(&ct)), &v(&full_pullback(&ct).1), 0.0);
    close(&v(&out), &v(&f(&a)), 0.0);

    let t = Key::new(5).normal([3, 2], DType::F64);
    let (_, dy) = jvp_argnums(f, &a, Arg::<0>, &t);
    let zeros = (t.clone(), Tensor::zeros([4, 3], DType::F64), Tensor::zeros([4, 2], DType::F64));
    let (_, dy_full) = jvp(f, &a, &zeros);
    close(&v(&dy), &v(&dy_full), 0.0);
}

#[test]
fn argnums_composes_with_vmap_for_per_example_gradients() {
    // Per-example gradients for w, x and y mapped, w shared.
    let (w, x, y) = args();
    let per = vmap_axes(grad_argnums(loss, Arg::<0>), (None, 0, 0), 0)(&(w.clone(), x.clone(), y.clone()));
    assert_eq!(per.shape().dims(), &[4, 3, 2]);
    for i in 0..4 {
        let one = (w.clone(), x.narrow(0, i, 1), y.narrow(0, i, 1));
        close(&v(&per.narrow(0, i, 1)), &v(&grad(loss)(&one).0), 1e-14);
    }
}

#[test]
fn restrict_composes_argnums_with_has_aux() {
    let a = args();
    let with_aux = |a: &Args| (loss(a), a.1.sum());
    let (g, w) = restrict(with_aux, &a, Arg::<0>);
    let ((value, aux), dw) = value_and_grad_with_aux(g)(&w);
    close(&v(&value), &v(&loss(&a)), 0.0);
    close(&v(&aux), &v(&a.1.sum()), 0.0);
    close(&v(&dw), &v(&grad(loss)(&a).0), 0.0);
}

#[test]
fn selecting_an_argument_twice_is_an_error() {
    let a = args();
    let e = catch(|| grad_argnums(loss, (Arg::<0>, Arg::<0>))(&a)).unwrap_err();
    assert!(e.to_string().contains("argnums selects argument 0 more than once ([0, 0])"), "{e}");
    // The stack is restored: the next transform works.
    assert_eq!(grad(loss)(&a).0.shape().dims(), &[3, 2]);
}

#[test]
fn integer_and_bool_leaves_are_allowed_and_get_zero_gradients() {
    // Labels as integers inside the differentiated argument (JAX: float0,
    // Equinox: filter_grad); xform gives zeros in the leaf's dtype.
    let logits_w = Key::new(1).normal([3, 4], DType::F64);
    let x = Key::new(2).normal([5, 3], DType::F64);
    let labels = Tensor::from_vec(vec![0i64, 3, 1, 1, 2], [5]);
    let mask = Tensor::from_vec(vec![true, false, true, true, true], [5]);
    let f = |(w, x, labels, mask): &(Tensor, Tensor, Tensor, Tensor)| {
        let logp = x.matmul(w).log_softmax(-1);
        let picked = logp.take_along_axis(&labels.reshape(&[5, 1]), 1).reshape(&[5]);
        -(picked * mask.cast(DType::F64)).sum()
    };
    let a = (logits_w.clone(), x.clone(), labels.clone(), mask.clone());
    let (dw, dx, dl, dm) = grad(f)(&a);
    assert_eq!((dl.dtype(), dl.to_vec::<i64>()), (DType::I64, vec![0; 5]));
    assert_eq!((dm.dtype(), dm.to_vec::<bool>()), (DType::Bool, vec![false; 5]));
    let dw_only = grad(|w: &Tensor| f(&(w.clone(), x.clone(), labels.clone(), mask.clone())))(&logits_w);
    close(&v(&dw), &v(&dw_only), 0.0);
    assert_eq!(dx.shape().dims(), &[5, 3]);
    // Per-example gradients with the labels in the mapped argument: they
    // sum to the batch gradient.
    let one = |(w, x, label, m): &(Tensor, Tensor, Tensor, Tensor)| {
        let logp = x.matmul(w).log_softmax(-1);
        -(logp.take_along_axis(&label.reshape(&[1]), 0).sum() * m.cast(DType::F64))
    };
    let per = vmap_axes(grad(one), (None, 0, 0, 0), 0)(&a);
    assert_eq!(per.0.shape().dims(), &[5, 3, 4]);
    close(&v(&per.0.sum_axes(&[0], false)), &v(&dw), 1e-14);
    assert_eq!((per.2.dtype(), per.2.to_vec::<i64>()), (DType::I64, vec![0; 5]));
}

#[test]
fn jacobians_hessians_and_jvp_take_integer_leaves() {
    let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
    let n = Tensor::from_vec(vec![3i32], [1]);
    let f = |(x, n): &(Tensor, Tensor)| x * x * n.cast(DType::F64);
    for j in [jacfwd(f)(&(x.clone(), n.clone())), jacrev(f)(&(x.clone(), n.clone()))] {
        close(&v(&j.0), &[6.0, 0.0, 0.0, 12.0], 0.0);
        assert_eq!(
            (j.1.dtype(), j.1.shape().dims().to_vec(), j.1.to_vec::<i32>()),
            (DType::I32, vec![2, 1], vec![0, 0])
        );
    }
    let h = hessian(|a: &(Tensor, Tensor)| f(a).sum())(&(x.clone(), n.clone()));
    close(&v(&h.0 .0), &[6.0, 0.0, 0.0, 6.0], 0.0);
    assert_eq!((h.1 .1.dtype(), h.1 .1.to_vec::<i32>()), (DType::I32, vec![0]));
    // jvp: the integer leaf's tangent is ignored.
    let (_, dy) = jvp(f, &(x.clone(), n.clone()), &(Tensor::ones([2], DType::F64), n.clone()));
    close(&v(&dy), &[6.0, 12.0], 0.0);
    // A function of integers only has nothing to differentiate: an error
    // (JAX and PyTorch raise too; it returned zero Jacobians).
    let g = |n: &Tensor| n.cast(DType::F64) * 2.0;
    for (op, e) in [
        ("jacrev", catch(|| jacrev(g)(&n)).unwrap_err()),
        ("jacfwd", catch(|| jacfwd(g)(&n)).unwrap_err()),
        ("hessian", catch(|| hessian(|n: &Tensor| n.cast(DType::F64).sum())(&n)).unwrap_err()),
    ] {
        assert_eq!(e.op, op);
        assert!(e.to_string().contains("no floating-point leaf"), "{e}");
    }
}
