//! xform-transforms: the interpreters (jvp, vmap, trace, linearize and
//! transpose) and the transforms derived from them (vjp, grad,
//! value_and_grad, jacfwd, jacrev, hessian), over pytrees.
//!
//! Each transform call pushes an interpreter instance with a fresh tag on
//! the thread's stack (see NOTE: [interpreter stack] in xform-ops), so all
//! of them compose, at any depth, with no special cases.
//!
//! # Nesting depth
//!
//! Nesting is bounded by the native stack, not by a count: a transform
//! call, or an op dispatched down through the levels, that would use the
//! thread's stack past its last [`xform_ops::stack::RESERVE`] (256 KiB)
//! fails with `ErrorKind::TooDeep` (raised like any error inside a
//! transformed function, so `xform_ops::catch` returns it) instead of
//! overflowing it (NOTE: [stack guard] in `xform_ops::stack`, with the
//! measured cost of each level). 1,024 nested vmaps and a 200-fold grad
//! fit the 8 MiB main thread; a spawned thread has 2 MiB unless it asks for
//! more. While `f` runs, `vmap`, `jvp`, `trace` and `functionalize` hold
//! one interpreter each; `grad`, `value_and_grad`, `vjp`, `linearize`,
//! `jacfwd` and `jacrev` two; `hessian` four.

//! # Errors: panics and values
//!
//! Every transform reports bad input (shapes, dtypes, in_axes, tangents,
//! a non-scalar loss, a value read under vmap) as an `xform_ops::Error`
//! naming the op, the shapes and the transforms in force. The plain forms
//! raise it (it unwinds like a panic; `xform_ops::catch` turns it into a
//! `Result`); each has a `try_` form that returns it: [`try_vmap`],
//! [`try_vmap_with`], [`try_grad`], [`try_value_and_grad`],
//! [`try_grad_with_aux`], [`try_value_and_grad_with_aux`], [`try_jvp`],
//! [`try_vjp`], [`try_linearize`], [`try_jacfwd`], [`try_jacrev`],
//! [`try_hessian`], [`try_trace`], [`try_functionalize`], [`try_jit`] (control flow:
//! `control::try_cond`, `try_switch`). A panic that is not an xform error
//! (a bug in the closure) unwinds through both. After an error the
//! interpreter stack is as before the call.

#![warn(missing_docs)]

mod argnums;
pub mod control;
mod fallible;
mod functionalize;
mod grad;
mod jac;
pub mod jit;
mod jvp;
mod linearize;
pub mod per_example;
mod pmap;
mod trace;
pub mod tree;
mod vmap;

pub use argnums::{
    grad_argnums, hessian_argnums, jacfwd_argnums, jacrev_argnums, jvp_argnums, restrict, value_and_grad_argnums,
    vjp_argnums, Arg, Argnums,
};
pub use control::{
    checkpoint, checkpoint_with, cond, custom_jvp, custom_vjp, fori_loop, scan, scan_with, switch, try_cond,
    try_switch, while_loop, while_loop_with, Bound, CustomJvp, CustomVjp, ScanOptions, ScanRemat, WhileOptions,
};
pub use fallible::{
    try_functionalize, try_grad, try_grad_with_aux, try_hessian, try_jacfwd, try_jacrev, try_linearize, try_trace,
    try_value_and_grad, try_value_and_grad_with_aux, try_vjp, try_vmap, try_vmap_with,
};
pub use functionalize::{functionalize, functionalize_with, FunctionalizeOptions};
pub use grad::{grad, grad_with_aux, value_and_grad, value_and_grad_with_aux};
pub use jac::{
    hessian, hessian_with_aux, jacfwd, jacfwd_with, jacfwd_with_aux, jacrev, jacrev_with, jacrev_with_aux, JacOptions,
};
pub use jit::{jit, jit_static, jit_with, jitted, jitted_static, try_jit, JitEntry, JitOptions, JitStats, Jitted};
pub use jvp::{jvp, jvp_with_aux, try_jvp};
pub use linearize::{backward_pass, linearize, linearize_with_aux, vjp, vjp_with_aux};
pub use per_example::{
    dp_clipped_grad, dp_clipped_grad_with, per_example_grad_norms, per_example_grad_norms_with, try_dp_clipped_grad,
    try_per_example_grad_norms, ClipSum, DpGrad, DpOptions, GradNorms, NormMethod,
};
pub use pmap::{
    cpu_device_count, pmap, pmap_with, set_cpu_device_count, try_pmap_call, try_pmap_spanning, PmapOptions,
};
pub use trace::trace;
pub use tree::{Leaves, Prefix, Skeleton, Tree};
pub use vmap::{try_vmap_call, vmap, vmap_axes, vmap_with, Axes, VmapOptions};

#[doc(hidden)]
pub use xform_ops::Tensor as __Tensor;
