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
//! A thread holds at most [`xform_ops::interp::MAX_DEPTH`] (256)
//! interpreters at once; a transform call that would push one more fails
//! with `ErrorKind::TooDeep` (raised like any error inside a transformed
//! function, so `xform_ops::catch` returns it) instead of overflowing the
//! native stack. That depth fits a 2 MiB thread (the default for spawned
//! threads). While `f` runs, `vmap`, `jvp`, `trace` and `functionalize`
//! hold one interpreter each; `grad`, `value_and_grad`, `vjp`, `linearize`,
//! `jacfwd` and `jacrev` two; `hessian` four.

#![warn(missing_docs)]

pub mod control;
mod functionalize;
mod grad;
mod jac;
mod jvp;
mod linearize;
mod trace;
pub mod tree;
mod vmap;

pub use control::{
    checkpoint, checkpoint_with, cond, custom_jvp, custom_vjp, fori_loop, scan, scan_with, switch, try_cond,
    try_switch, while_loop, while_loop_with, Bound, CustomJvp, CustomVjp, ScanOptions, ScanRemat, WhileOptions,
};
pub use functionalize::{functionalize, functionalize_with, FunctionalizeOptions};
pub use grad::{grad, grad_with_aux, value_and_grad, value_and_grad_with_aux};
pub use jac::{hessian, jacfwd, jacfwd_with, jacrev, jacrev_with, JacOptions};
pub use jvp::{jvp, try_jvp};
pub use linearize::{backward_pass, linearize, vjp};
pub use trace::trace;
pub use tree::{Leaves, Prefix, Skeleton, Tree};
pub use vmap::{try_vmap_call, vmap, vmap_with, Axes, VmapOptions};

#[doc(hidden)]
pub use xform_ops::Tensor as __Tensor;
