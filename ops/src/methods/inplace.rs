//! In-place ops: `add_`, `sub_`, `mul_`, `div_`, `copy_`, `fill_`, and
//! assignment through views. See NOTE: [functionalization] in `mutation`.
//!
//! Every in-place op validates before it writes: the result must fit the
//! target's dtype (no float into an integer tensor) and shape (the value
//! broadcasts to the target, never grows it), and the target must not
//! overlap itself (a broadcast view) or, for a copy, the source. A failed
//! op leaves the target unchanged.

use super::{align, scalar_for, Scalar};
use crate::error::{Error, OrRaise, Result};
use crate::lax;
use crate::prim::BinaryOp;
use crate::tensor::{Tensor, Value};
use xform_kernels::DType;

/// Checks that `value` may be written into `target` by op `op`: a dtype the
/// target can hold and a shape that broadcasts to the target's.
pub fn assign_check(op: &str, target: &Tensor, value: &Tensor) -> Result<()> {
    let (td, vd) = (target.dtype(), value.dtype());
    let fits = td == vd
        || (td.is_float() && vd != DType::Bool)
        || (td.is_int() && vd.is_int())
        || (td.is_int() && vd == DType::Bool);
    if !fits {
        return Err(Error::in_place(op, format!("a {vd} result cannot be written into a {td} tensor")));
    }
    let (ts, vs) = (target.shape(), value.shape());
    let b = super::broadcast_shapes(op, &ts, &vs)?;
    if b != ts {
        return Err(Error::in_place(
            op,
            format!("a value of shape {vs} would grow the target of shape {ts} (it must broadcast to the target)"),
        ));
    }
    if let Some(a) = target.array() {
        if a.layout.has_internal_overlap() {
            return Err(Error::in_place(
                op,
                format!("the target (shape {ts}) is a broadcast view: several of its elements share one memory location; copy it first"),
            ));
        }
    }
    Ok(())
}

/// Every check [`Tensor::try_copy_`] makes before it writes `value` into
/// `target`, without writing: transforms run it on every argument they will
/// write back before they write the first, so that a refused write leaves
/// every argument unchanged.
///
/// # Errors
/// The error `try_copy_` would return (named `op`).
pub fn check_write(op: &str, target: &Tensor, value: &Tensor) -> Result<()> {
    crate::mutation::check_live(op, target)?;
    crate::mutation::check_live(op, value)?;
    assign_check(op, target, value)?;
    let eager = crate::interp::stack_depth() == 0;
    match (target.array(), value.array()) {
        (Some(t), Some(v)) if eager => {
            if t.device() != v.device() {
                return Err(Error::device(
                    op,
                    format!("cannot write a {} tensor into a {} tensor", v.device(), t.device()),
                ));
            }
            Ok(())
        }
        _ => {
            crate::mutation::check_scope(op, target, value)?;
            match target.view_link() {
                Some(link) => {
                    if link.ops.to_vec().iter().any(|p| p.props().view == Some(crate::prims::ViewKind::Broadcast)) {
                        return Err(Error::in_place(
                            op,
                            "the target is a broadcast view: several of its elements share one memory location; \
                             copy it first",
                        ));
                    }
                    crate::mutation::check_scope(op, &link.base, value)
                }
                None => Ok(()),
            }
        }
    }
}

/// Writes `value` (already validated) into `target`: into its storage
/// outside every transform, functionalized under any transform (see NOTE:
/// [functionalization]).
pub(crate) fn write(op: &str, target: &Tensor, value: &Tensor) -> Result<()> {
    crate::mutation::check_live(op, target)?;
    crate::mutation::check_live(op, value)?;
    let v = lax::broadcast_to(&lax::convert(value, target.dtype())?, &target.shape())?;
    let eager = crate::interp::stack_depth() == 0;
    match (target.value_cloned(), v.value_cloned()) {
        (Value::Array(t), Value::Array(s)) if eager => t.write_checked(op, &s),
        _ => crate::mutation::functionalized_write(op, target, &v),
    }
}

/// An in-place op on `target`: `compute` gives the value to write
/// (reading the target if it needs to), which is checked and written.
///
/// NOTE: [atomic in-place ops] Eagerly, the whole read-modify-write runs
/// under the target storage's update lock (`Array::lock_updates`), so
/// in-place ops on one storage (through any of its views) from several
/// threads serialize as PyTorch's do under its GIL: each is atomic with
/// respect to the others, and no completed write is lost. What is not
/// atomic: a sequence of in-place ops (another thread's op may run between
/// two of them), and an out-of-place read racing with an in-place op (it
/// sees the storage before or after that op's write, as a whole, since
/// the write holds the data lock, but nothing orders the two). Under a
/// transform the write is functionalized: there is no shared storage to
/// race on.
fn update(op: &str, target: &Tensor, compute: impl FnOnce() -> Result<Tensor>) -> Result<()> {
    let eager = crate::interp::stack_depth() == 0;
    let array = if eager { target.array() } else { None };
    let _serialized = array.as_ref().map(crate::Array::lock_updates);
    let value = compute()?;
    assign_check(op, target, &value)?;
    write(op, target, &value)
}

fn arith_(op: BinaryOp, name: &str, target: &Tensor, other: &Tensor) -> Result<()> {
    update(name, target, || {
        let (a, b) = align(name, target, other)?;
        lax::binary(op, &a, &b)
    })
}

macro_rules! inplace_arith {
    ($($name:ident, $sname:ident, $try:ident => $op:ident),*) => {
        impl Tensor {$(
            #[doc = concat!("In place: `self = self ", stringify!($op), " other` (other broadcasts to self).")]
            ///
            /// # Panics
            /// If the result does not fit `self`'s dtype or shape.
            #[track_caller]
            pub fn $name(&self, other: &Tensor) -> &Tensor {
                self.$try(other).or_raise();
                self
            }

            #[doc = concat!("[`Tensor::", stringify!($name), "`] returning an error instead of panicking.")]
            pub fn $try(&self, other: &Tensor) -> Result<()> {
                arith_(BinaryOp::$op, stringify!($name), self, other)
            }

            #[doc = concat!("In place with a scalar: `self = self ", stringify!($op), " v`.")]
            #[track_caller]
            pub fn $sname<S: Scalar>(&self, v: S) -> &Tensor {
                let s = scalar_for(stringify!($sname), self, v).or_raise();
                self.$try(&s).or_raise();
                self
            }
        )*}
    };
}
inplace_arith!(
    add_, add_scalar_, try_add_ => Add,
    sub_, sub_scalar_, try_sub_ => Sub,
    mul_, mul_scalar_, try_mul_ => Mul,
    div_, div_scalar_, try_div_ => Div
);

impl Tensor {
    /// In place: `self = value` (value broadcasts to self, and is cast to
    /// self's dtype if it fits).
    ///
    /// # Panics
    /// If the value does not fit, or overlaps `self` in memory.
    #[track_caller]
    pub fn copy_(&self, value: &Tensor) -> &Tensor {
        self.try_copy_(value).or_raise();
        self
    }

    /// [`Tensor::copy_`] returning an error instead of panicking.
    pub fn try_copy_(&self, value: &Tensor) -> Result<()> {
        update("copy_", self, || Ok(value.clone()))
    }

    /// In place: every element set to `v`.
    #[track_caller]
    pub fn fill_<S: Scalar>(&self, v: S) -> &Tensor {
        if !self.dtype().is_float() && S::IS_FLOAT && v.to_f64().fract() != 0.0 {
            Error::in_place("fill_", format!("{} cannot be stored in a {} tensor", v.to_f64(), self.dtype())).raise();
        }
        super::check_scalar_fits("fill_", v, self.dtype()).or_raise();
        let s = lax::scalar(v.to_f64(), self.dtype(), self.device()).or_raise();
        self.try_copy_(&s).or_raise();
        self
    }

    /// In place: the part of `self` selected by `index` set to `value`
    /// (`x.assign(s![0, 1..3], &v)` is numpy's `x[0, 1:3] = v`).
    #[track_caller]
    pub fn assign(&self, index: &[super::Idx], value: &Tensor) -> &Tensor {
        self.slice(index).copy_(value);
        self
    }
}
