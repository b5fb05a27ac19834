//! xform-exec: the execution layer. It compiles a staged [`Program`] (the
//! passes, then a replay plan with elementwise and row fusion, buffer
//! planning, a helper thread for sinks, a split of the batch between two
//! threads, CUDA graph capture) and runs it on tensors. `jit` (in
//! `xform-transforms`) traces a function into a program and hands it
//! here; nothing in this crate knows about transforms or pytrees.
//!
//! The surface is [`Executable`] with [`ExecOptions`]: compile a program
//! once, run it many times. [`inspect`] opens the compiler's parts to
//! xform's own tests and is not part of the API.
//!
//! Per-primitive knowledge (which primitives fuse, how a batch splits
//! through each, which may be captured in a CUDA graph or run on the
//! helper thread) is stated by the primitive families in
//! `xform_ops::prims` (`Family::jit_props`, `split_rows`, `cpu_tile`, ...)
//! and read here; only the rewrite passes `passes::simplify` and
//! `passes::diagonal` match specific primitives (see ARCHITECTURE.md).
//!
//! [`Program`]: xform_ops::Program

#![warn(missing_docs)]

mod aliasing;
mod executable;
mod fuse;
mod fuse_cuda;
mod fuse_rows;
mod graph;
mod passes;
mod plan;
mod rows_out;
mod sinks;
mod split;
mod tiles;

pub use executable::{ExecOptions, Executable, PlanStats};

/// The compiler's parts, for xform's own tests (fusion groups, plan
/// steps, the CUDA kernels fusion generates, the passes). Not part of the
/// API: anything here may change without notice.
#[doc(hidden)]
pub mod inspect {
    pub use crate::fuse::{group_with, FusedOp, Item, Reg};
    pub use crate::fuse_cuda::{sample_kernels, samples};
    pub use crate::plan::{Plan, StepOp};
}
