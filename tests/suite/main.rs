//! xform's test suite: one binary (built once) holding the generic rule
//! tests over the primitive registry and the facade's integration tests.

mod harness;
mod reference;
mod reference_conv;
mod reference_decomp;
mod registry;

mod accountant;
mod api;
mod architecture;
mod captured;
mod collectives;
mod compositions;
mod control;
mod conv;
mod cuda;
mod derive;
mod dp;
mod dynamic_slice;
mod edges;
mod emulation;
mod errors;
mod gaps;
mod jit;
mod jit_edges;
mod limits;
mod linalg;
mod linalg_expm;
mod linalg_spectral;
mod methods;
mod mutation;
mod nn;
mod nn_layers;
mod pmap;
mod prims_eval;
mod random;
mod random_original;
mod rules;
mod safetensors;
mod solvers;
mod special_ops;
mod threads;
mod tree;
mod views;
mod window;
