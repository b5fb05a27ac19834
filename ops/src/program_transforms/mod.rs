//! Program-level transformation, in one place: the backward pass over a
//! linear program ([`backward::transpose`]), the partial evaluation of a
//! JVP into its primal and linear parts ([`partial_eval`]), and a program
//! evaluated under the JVP, batch or transpose rules of its primitives
//! (`evaluate`). Reverse mode (`linearize`, `grad`, `vjp` in
//! xform-transforms), the per-example gradient norms and the control-flow
//! rules all call these, so a fix to reverse mode is made here once.

pub mod backward;
pub(crate) mod evaluate;
pub mod partial_eval;
