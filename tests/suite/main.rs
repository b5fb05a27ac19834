//! xform's test suite: one binary (built once) holding the generic rule
//! tests over the primitive registry and the facade's integration tests.

mod harness;
mod reference;
mod registry;

mod errors;
mod methods;
mod prims_eval;
mod rules;
mod compositions;
mod mutation;
mod nn;
mod cuda;
mod views;
