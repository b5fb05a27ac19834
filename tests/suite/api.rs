//! The API forms JAX and torch.func users reach for: argnums, integer
//! leaves in differentiated arguments, has_aux on every transform, in_axes
//! and out_axes as tree prefixes, and the `try_` forms.

mod argnums;
mod aux;
mod axes;
mod fallible;
