//! xform-ops: tensors, the interpreter core, the primitives with all their
//! rules, and the Program IR.
//!
//! Everything a user does to a [`Tensor`] becomes a primitive applied
//! through [`bind`], which hands it to the current interpreter; the bottom
//! interpreter evaluates kernels. Transforms (in `xform-transforms`) are
//! interpreters stacked on top. See `ARCHITECTURE.md`.

#![warn(missing_docs)]

pub mod array;
pub mod backend;
mod counted;
mod device;
mod display;
pub mod error;
mod free_list;
pub mod interp;
pub mod lax;
pub mod methods;
mod mutation;
pub mod prim;
pub mod prims;
pub mod program;
pub mod program_transforms;
mod promote;
pub mod provenance;
pub mod random;
pub mod stack;
pub mod staging;
pub mod tensor;
mod value_cell;

pub use array::{default_device, set_default_device, Array, Aval, AvalRef, Device};
pub use backend::GroupMember;
pub use error::{catch, panic_text, raise, Error, ErrorKind, OrRaise, Result};
pub use interp::{bind, bind1, AxisName, Interpreter, Level, Outs, Tag};
pub use methods::{Idx, Scalar};
pub use prim::{DotDims, LinearArg, Prim};
pub use program::{Atom, Eqn, Program, ProgramBuilder, Var};
pub use provenance::VersionGuard;
pub use random::Key;
pub use tensor::{Tensor, Tracer, TracerData, Value, ValueRef};
pub use xform_kernels::{half, DType, Element, Layout, Shape};
