//! A tour of xform in one file: eager tensors, then grad, vmap, jvp, vjp,
//! jacobians, hessians and trace, composed.
//!
//! Run: `cargo run --release --example quickstart`

use xform::prelude::*;

fn main() {
    // Eager tensors with numpy-style broadcasting.
    let x = Tensor::from_vec(vec![0.5f64, -1.0, 2.0], [3]);
    let w = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    println!("w @ x = {}", w.matmul(&x));

    // A scalar function and its derivatives.
    let f = |x: &Tensor| (x.sin() * x).sum();
    println!("f(x)         = {}", f(&x));
    println!("grad f(x)    = {}", grad(f)(&x));
    println!("hessian f(x) =\n{}", hessian(f)(&x));

    // Forward mode: a Hessian-vector product as jvp of grad.
    let v = Tensor::from_vec(vec![1.0f64, 0.0, 0.0], [3]);
    let (_, hvp) = jvp(grad(f), &x, &v);
    println!("H v          = {hvp}");

    // Reverse mode with a reusable pullback.
    let (y, pullback) = vjp(|x: &Tensor| x.tanh() * 2.0, &x);
    println!("y = {y}, J^T 1 = {}", pullback(&y.ones_like()));

    // Per-example gradients: vmap of grad, no loop.
    let xs = Key::new(0).normal([4, 3], DType::F64);
    println!("per-row gradients =\n{}", vmap(grad(f))(&xs));

    // Jacobians of a vector function, forward and reverse.
    let g = |x: &Tensor| w.matmul(x).tanh();
    let (jf, jr) = (jacfwd(g)(&x), jacrev(g)(&x));
    println!("jacfwd == jacrev: {}", (&jf - &jr).abs().max().item_f64() < 1e-12);

    // Stage a function into a program that prints like a jaxpr.
    println!("{}", trace(|x: &Tensor| grad(f)(x), &x));
}
