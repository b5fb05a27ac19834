//! # xform
//!
//! Composable function transforms over tensors, in the spirit of JAX and
//! torch.func: [`vmap`], [`grad`], [`value_and_grad`], [`vjp`], [`jvp`],
//! [`linearize`], [`jacfwd`], [`jacrev`], [`hessian`], [`trace`] and [`jit()`],
//! composable at any depth, over a small closed set of primitives. Every
//! primitive carries its own batching and differentiation rules (a missing
//! rule does not compile) and lowers to CPU kernels (faer, rayon) or, with
//! the `cuda` feature, CUDA kernels.
//!
//! ```
//! use xform::prelude::*;
//!
//! let f = |x: &Tensor| (x.sin() * x).sum();
//! let x = Tensor::from_vec(vec![0.5f64, 1.0, 1.5], [3]);
//! let g = grad(f)(&x);                               // df/dx
//! let h = hessian(f)(&x);                            // [3, 3]
//! let per_row = vmap(grad(f))(&x.reshape(&[3, 1])); // one gradient per row
//! assert_eq!(h.shape().dims(), &[3, 3]);
//! assert_eq!(per_row.shape().dims(), &[3, 1]);
//! # let _ = g;
//! ```
//!
//! See the README for the three main uses (per-sample gradients, model
//! ensembles, property-based testing) and ARCHITECTURE.md for the design.

#![warn(missing_docs)]

pub mod data;
#[cfg(feature = "mpi")]
pub mod distributed;
pub mod dp;
pub mod linalg;
pub mod nn;
pub mod safetensors;
pub mod solvers;
pub mod testing;
pub mod tree;

/// `#[derive(Tree)]`: a struct or enum as a pytree, with `#[tree(static)]`
/// fields carried through transforms unchanged (see [`tree`]).
pub use xform_derive::Tree;
pub use xform_ops::prim::RematPolicy;
pub use xform_ops::{
    catch, default_device, lax, s, set_default_device, Array, Aval, DType, Device, DotDims, Error, ErrorKind, Idx, Key,
    OrRaise, Prim, Program, Result, Scalar, Shape, Tensor,
};
pub use xform_transforms::control;
pub use xform_transforms::{
    checkpoint, checkpoint_with, cond, custom_jvp, custom_vjp, fori_loop, scan, scan_with, switch, while_loop,
    while_loop_with, Bound, ScanOptions, ScanRemat, WhileOptions,
};
pub use xform_transforms::{
    cpu_device_count, pmap, pmap_with, set_cpu_device_count, try_pmap_call, try_pmap_spanning, PmapOptions,
};
pub use xform_transforms::{
    functionalize, functionalize_with, grad, grad_argnums, grad_with_aux, hessian, hessian_argnums, hessian_with_aux,
    impl_tree, jacfwd, jacfwd_argnums, jacfwd_with, jacfwd_with_aux, jacrev, jacrev_argnums, jacrev_with,
    jacrev_with_aux, jvp, jvp_argnums, jvp_with_aux, linearize, linearize_with_aux, restrict, trace, try_functionalize,
    try_grad, try_grad_with_aux, try_hessian, try_jacfwd, try_jacrev, try_jvp, try_linearize, try_trace,
    try_value_and_grad, try_value_and_grad_with_aux, try_vjp, try_vmap, try_vmap_with, value_and_grad,
    value_and_grad_argnums, value_and_grad_with_aux, vjp, vjp_argnums, vjp_with_aux, vmap, vmap_axes, vmap_with, Arg,
    Argnums, Axes, FunctionalizeOptions, JacOptions, Leaves, Prefix, Skeleton, Tree, VmapOptions,
};
pub use xform_transforms::{
    jit, jit_static, jit_with, jitted, jitted_static, try_jit, JitEntry, JitOptions, JitStats, Jitted,
};

/// Lower layers, for extension and inspection: the interpreter core, the
/// primitives' rules, and the kernels.
pub mod core {
    pub use xform_kernels as kernels;
    pub use xform_ops::{interp, prim, prims, program, stack, tensor};
    pub use xform_transforms::backward_pass;

    /// The execution layer jit compiles programs with: compile a
    /// `Program` once ([`Executable::compile`](xform_exec::Executable::compile)),
    /// run it many times.
    pub use xform_exec::{ExecOptions, Executable, PlanStats};
}

/// Everything a typical program needs: `use xform::prelude::*;`.
pub mod prelude {
    pub use crate::{
        catch, checkpoint, cond, custom_jvp, custom_vjp, fori_loop, functionalize, grad, grad_argnums, grad_with_aux,
        hessian, hessian_with_aux, impl_tree, jacfwd, jacfwd_with_aux, jacrev, jacrev_with_aux, jit, jit_static, jvp,
        jvp_with_aux, linearize, linearize_with_aux, s, scan, scan_with, switch, trace, try_grad, try_vmap,
        value_and_grad, value_and_grad_argnums, value_and_grad_with_aux, vjp, vjp_with_aux, vmap, vmap_axes, vmap_with,
        while_loop, Arg, Axes, DType, Device, Idx, Key, OrRaise, Program, ScanOptions, Shape, Tensor, Tree,
        VmapOptions,
    };
}

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "testing", feature = "data"))]
pub struct ReadmeDoctests;
