//! xform's test suite: one binary (built once) holding the generic rule
//! tests over the primitive registry and the facade's integration tests.

mod harness;
mod reference;
mod registry;

mod compositions;
mod cuda;
mod dynamic_slice;
mod edges;
mod errors;
mod limits;
mod methods;
mod mutation;
mod nn;
mod prims_eval;
mod random;
mod rules;
mod views;
mod window;
