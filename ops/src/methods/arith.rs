//! Elementwise math: operators with numpy broadcasting and promotion,
//! unary functions, comparisons, logic, `where_`, `clamp`.

use super::{align, scalar_for, Scalar};
use crate::error::{OrRaise, Result};
use crate::lax;
use crate::prim::{BinaryOp, CompareOp};
use crate::promote::{as_float, binary, compare};
use crate::tensor::Tensor;
use std::ops;
use xform_kernels::DType;

// The unary math methods (exp, sin, abs, floor, powi, ...) and the named
// binary ones (pow, maximum, xlogy, logical_and, ...) are generated from
// the op tables in `prims/unary.rs` and `prims/binary.rs`.

impl Tensor {
    /// `x^y` for a scalar `y`.
    #[track_caller]
    pub fn powf(&self, y: f64) -> Tensor {
        let x = as_float(self).or_raise();
        let s = scalar_for("pow", &x, y).or_raise();
        binary(BinaryOp::Pow, &x, &s).or_raise()
    }

    /// Logical or bitwise not.
    pub fn logical_not(&self) -> Tensor {
        lax::not(self).or_raise()
    }

    /// Elementwise maximum with a scalar (jnp's `maximum(x, v)`,
    /// PyTorch's `clamp_min`): `x.maximum_scalar(0.0)` is a ReLU whose
    /// derivative at 0 is 1/2, as JAX's (ties split the tangent). The
    /// scalar is weak, as in [`Scalar`].
    #[track_caller]
    pub fn maximum_scalar<S: Scalar>(&self, v: S) -> Tensor {
        let s = scalar_for("max", self, v).or_raise();
        binary(BinaryOp::Max, self, &s).or_raise()
    }

    /// Elementwise minimum with a scalar (jnp's `minimum(x, v)`,
    /// PyTorch's `clamp_max`); ties split the tangent, as in JAX.
    #[track_caller]
    pub fn minimum_scalar<S: Scalar>(&self, v: S) -> Tensor {
        let s = scalar_for("min", self, v).or_raise();
        binary(BinaryOp::Min, self, &s).or_raise()
    }

    /// Clamps into `[lo, hi]`.
    pub fn clamp(&self, lo: f64, hi: f64) -> Tensor {
        let l = scalar_for("clamp", self, lo).or_raise();
        let h = scalar_for("clamp", self, hi).or_raise();
        self.maximum(&l).minimum(&h)
    }

    /// `cond ? on_true : on_false`, broadcasting all three.
    #[track_caller]
    pub fn where_(cond: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Tensor {
        Tensor::try_where(cond, on_true, on_false).or_raise()
    }

    /// [`Tensor::where_`] returning an error instead of panicking.
    pub fn try_where(cond: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let (t, f) = align("where", on_true, on_false)?;
        let shape = super::broadcast_shapes("where", &cond.shape(), &t.shape())?;
        let c = if cond.dtype() == DType::Bool { cond.clone() } else { lax::ne(cond, &lax::zeros_like(cond)?)? };
        lax::select(&lax::broadcast_to(&c, &shape)?, &lax::broadcast_to(&t, &shape)?, &lax::broadcast_to(&f, &shape)?)
    }
}

macro_rules! try_binary {
    ($($name:ident => $op:ident),*) => {
        impl Tensor {$(
            #[doc = concat!("`", stringify!($op), "` with broadcasting and promotion, returning an error on bad shapes.")]
            pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                binary(BinaryOp::$op, self, other)
            }
        )*}
    };
}
try_binary!(try_add => Add, try_sub => Sub, try_mul => Mul, try_div => Div, try_rem => Rem);

macro_rules! compare_methods {
    ($($name:ident, $sname:ident => $op:ident),*) => {
        impl Tensor {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting; bool result.")]
            #[track_caller]
            pub fn $name(&self, other: &Tensor) -> Tensor {
                compare(CompareOp::$op, self, other).or_raise()
            }
            #[doc = concat!("Elementwise `", stringify!($name), "` against a scalar; bool result.")]
            pub fn $sname<S: Scalar>(&self, v: S) -> Tensor {
                let s = scalar_for(CompareOp::$op.name(), self, v).or_raise();
                compare(CompareOp::$op, self, &s).or_raise()
            }
        )*}
    };
}
compare_methods!(eq, eq_scalar => Eq, ne, ne_scalar => Ne, lt, lt_scalar => Lt, le, le_scalar => Le, gt, gt_scalar => Gt, ge, ge_scalar => Ge);

macro_rules! operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                binary(BinaryOp::$op, self, rhs).or_raise()
            }
        }
        impl ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                binary(BinaryOp::$op, self, &rhs).or_raise()
            }
        }
        impl ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                binary(BinaryOp::$op, &self, rhs).or_raise()
            }
        }
        impl ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                binary(BinaryOp::$op, &self, &rhs).or_raise()
            }
        }
        operator!(@scalar $trait, $method, $op, f64, i32);
    };
    (@scalar $trait:ident, $method:ident, $op:ident, $($s:ty),*) => {$(
        impl ops::$trait<$s> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $s) -> Tensor {
                let r = scalar_for(BinaryOp::$op.name(), self, rhs).or_raise();
                binary(BinaryOp::$op, self, &r).or_raise()
            }
        }
        impl ops::$trait<$s> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $s) -> Tensor {
                (&self).$method(rhs)
            }
        }
        impl ops::$trait<&Tensor> for $s {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                let l = scalar_for(BinaryOp::$op.name(), rhs, self).or_raise();
                binary(BinaryOp::$op, &l, rhs).or_raise()
            }
        }
        impl ops::$trait<Tensor> for $s {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                self.$method(&rhs)
            }
        }
    )*};
}

operator!(Add, add, Add);
operator!(Sub, sub, Sub);
operator!(Mul, mul, Mul);
operator!(Div, div, Div);
operator!(Rem, rem, Rem);

impl ops::Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        lax::neg(self).or_raise()
    }
}

impl ops::Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        lax::neg(&self).or_raise()
    }
}
