//! Elementwise binary primitives on equal shapes and dtypes (arithmetic,
//! logic, comparisons) and `select`: shape rules, lowering, JVP, transpose
//! and batching (shared elementwise combinator).

use super::{check_arity, check_same_dtypes, check_same_shapes};
use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use xform_kernels::cpu::elementwise::{map2, map3};
use xform_kernels::cpu::Par;
use xform_kernels::{match_buffer, CpuBuffer, DType, Element, Float, Layout, Real};

/// The elementwise binary primitives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (integers truncate toward zero; x / 0 is -1 as in XLA).
    Div,
    /// `a ^ b`.
    Pow,
    /// Elementwise maximum (NaN propagates).
    Max,
    /// Elementwise minimum (NaN propagates).
    Min,
    /// Remainder with the sign of `a` (C and Rust `%`; x % 0 is x as in XLA).
    Rem,
    /// `atan2(a, b)`.
    Atan2,
    /// Logical (bool) or bitwise (integer) and.
    And,
    /// Logical (bool) or bitwise (integer) or.
    Or,
}

impl BinaryOp {
    /// The name programs print.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Rem => "rem",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
        }
    }

    /// Every op.
    pub const ALL: [BinaryOp; 11] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Rem,
        BinaryOp::Atan2,
        BinaryOp::And,
        BinaryOp::Or,
    ];

    fn accepts(self, d: DType) -> bool {
        match self {
            BinaryOp::And | BinaryOp::Or => !d.is_float(),
            BinaryOp::Atan2 => d.is_float(),
            _ => d != DType::Bool,
        }
    }
}

/// The elementwise comparisons.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CompareOp {
    /// The name programs print.
    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
        }
    }

    /// Every comparison.
    pub const ALL: [CompareOp; 6] =
        [CompareOp::Eq, CompareOp::Ne, CompareOp::Lt, CompareOp::Le, CompareOp::Gt, CompareOp::Ge];

    fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareOp::Eq => a == b,
            CompareOp::Ne => a != b,
            CompareOp::Lt => a < b,
            CompareOp::Le => a <= b,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a >= b,
        }
    }
}

// ---- shape rules -----------------------------------------------------------

/// Validates the operands of a binary op (the whole shape rule but the
/// output, which is the first operand's aval).
#[inline]
pub(crate) fn check_binary(op: BinaryOp, ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity(op.name(), ins, 2)?;
    check_same_shapes(op.name(), ins)?;
    check_same_dtypes(op.name(), ins)?;
    if !op.accepts(ins[0].dtype) {
        let what = match op {
            BinaryOp::And | BinaryOp::Or => "needs bool or integer operands",
            BinaryOp::Atan2 => "needs floating-point operands",
            _ => "needs numeric operands",
        };
        return Err(Error::dtype(op.name(), what, &[ins[0].dtype]));
    }
    Ok(())
}

pub(crate) fn shape_binary(op: BinaryOp, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_binary(op, ins)?;
    Ok(smallvec![ins[0].to_owned()])
}

/// Validates the operands of a comparison.
#[inline]
pub(crate) fn check_compare(op: CompareOp, ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity(op.name(), ins, 2)?;
    check_same_shapes(op.name(), ins)?;
    check_same_dtypes(op.name(), ins)
}

pub(crate) fn shape_compare(op: CompareOp, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_compare(op, ins)?;
    let mut a = ins[0].to_owned();
    a.dtype = DType::Bool;
    Ok(smallvec![a])
}

/// Validates the operands of a select.
#[inline]
pub(crate) fn check_select(ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity("select", ins, 3)?;
    check_same_shapes("select", ins)?;
    if ins[0].dtype != DType::Bool {
        return Err(Error::dtype("select", "the predicate must be bool", &[ins[0].dtype]));
    }
    check_same_dtypes("select", &ins[1..])
}

pub(crate) fn shape_select(ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_select(ins)?;
    Ok(smallvec![ins[1].to_owned()])
}

// ---- lowering --------------------------------------------------------------

fn float_binary<T: Float>(op: BinaryOp, a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Vec<T> {
    let cost = if matches!(op, BinaryOp::Pow | BinaryOp::Atan2) { 8 } else { 1 };
    let par = Par::for_work(la.numel(), cost);
    macro_rules! m {
        ($f:expr) => {
            map2(a, la, b, lb, par, |x: T, y: T| T::down($f(x.up(), y.up())))
        };
    }
    type C<T> = <T as Float>::Compute;
    match op {
        BinaryOp::Add => m!(|x: C<T>, y| x + y),
        BinaryOp::Sub => m!(|x: C<T>, y| x - y),
        BinaryOp::Mul => m!(|x: C<T>, y| x * y),
        BinaryOp::Div => m!(|x: C<T>, y| x / y),
        BinaryOp::Pow => m!(|x: C<T>, y| Real::powf(x, y)),
        BinaryOp::Max => m!(|x: C<T>, y: C<T>| if x.is_nan() || y.is_nan() {
            x + y
        } else if x >= y {
            x
        } else {
            y
        }),
        BinaryOp::Min => m!(|x: C<T>, y: C<T>| if x.is_nan() || y.is_nan() {
            x + y
        } else if x <= y {
            x
        } else {
            y
        }),
        BinaryOp::Rem => m!(|x: C<T>, y| x % y),
        BinaryOp::Atan2 => m!(|x: C<T>, y| Real::atan2(x, y)),
        BinaryOp::And | BinaryOp::Or => unreachable!("checked by the shape rule"),
    }
}

/// Integer binary arithmetic (wrapping; division by zero as in XLA).
pub(crate) trait IntBinary: Element + Copy {
    fn add_(self, o: Self) -> Self;
    fn sub_(self, o: Self) -> Self;
    fn mul_(self, o: Self) -> Self;
    fn div_(self, o: Self) -> Self;
    fn rem_(self, o: Self) -> Self;
    fn pow_(self, o: Self) -> Self;
    fn and_(self, o: Self) -> Self;
    fn or_(self, o: Self) -> Self;
}

macro_rules! int_binary {
    ($t:ty) => {
        impl IntBinary for $t {
            fn add_(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub_(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul_(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div_(self, o: Self) -> Self {
                if o == 0 {
                    !0
                } else {
                    self.wrapping_div(o)
                }
            }
            fn rem_(self, o: Self) -> Self {
                if o == 0 {
                    self
                } else {
                    self.wrapping_rem(o)
                }
            }
            fn pow_(self, o: Self) -> Self {
                let e = o as i64;
                if e >= 0 {
                    self.wrapping_pow(e.min(u32::MAX as i64) as u32)
                } else if self as i64 == 1 {
                    1
                } else if self as i64 == -1 {
                    if e % 2 == 0 {
                        1
                    } else {
                        self
                    }
                } else {
                    0
                }
            }
            fn and_(self, o: Self) -> Self {
                self & o
            }
            fn or_(self, o: Self) -> Self {
                self | o
            }
        }
    };
}
int_binary!(i32);
int_binary!(i64);
int_binary!(u32);

fn int_binary<T: IntBinary>(op: BinaryOp, a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Vec<T> {
    let par = Par::for_work(la.numel(), 1);
    let f: fn(T, T) -> T = match op {
        BinaryOp::Add => T::add_,
        BinaryOp::Sub => T::sub_,
        BinaryOp::Mul => T::mul_,
        BinaryOp::Div => T::div_,
        BinaryOp::Rem => T::rem_,
        BinaryOp::Pow => T::pow_,
        BinaryOp::Max => |x, y| if x >= y { x } else { y },
        BinaryOp::Min => |x, y| if x <= y { x } else { y },
        BinaryOp::And => T::and_,
        BinaryOp::Or => T::or_,
        BinaryOp::Atan2 => unreachable!("checked by the shape rule"),
    };
    map2(a, la, b, lb, par, f)
}

pub(crate) fn lower_binary(op: BinaryOp, a: &Array, b: &Array) -> Result<Array> {
    if let Device::Cuda(_) = a.device() {
        return crate::backend::cuda_binary(op, a, b);
    }
    let ga = a.read();
    let gb = b.read();
    let (ba, bb) = (ga.cpu(op.name())?, gb.cpu(op.name())?);
    let (la, lb) = (&a.layout, &b.layout);
    let out = match (ba, bb) {
        (CpuBuffer::F32(x), CpuBuffer::F32(y)) => CpuBuffer::F32(float_binary(op, x, la, y, lb)),
        (CpuBuffer::F64(x), CpuBuffer::F64(y)) => CpuBuffer::F64(float_binary(op, x, la, y, lb)),
        (CpuBuffer::F16(x), CpuBuffer::F16(y)) => CpuBuffer::F16(float_binary(op, x, la, y, lb)),
        (CpuBuffer::BF16(x), CpuBuffer::BF16(y)) => CpuBuffer::BF16(float_binary(op, x, la, y, lb)),
        (CpuBuffer::I32(x), CpuBuffer::I32(y)) => CpuBuffer::I32(int_binary(op, x, la, y, lb)),
        (CpuBuffer::I64(x), CpuBuffer::I64(y)) => CpuBuffer::I64(int_binary(op, x, la, y, lb)),
        (CpuBuffer::U32(x), CpuBuffer::U32(y)) => CpuBuffer::U32(int_binary(op, x, la, y, lb)),
        (CpuBuffer::Bool(x), CpuBuffer::Bool(y)) => {
            let par = Par::for_work(la.numel(), 1);
            CpuBuffer::Bool(match op {
                BinaryOp::And => map2(x, la, y, lb, par, |p: bool, q: bool| p & q),
                BinaryOp::Or => map2(x, la, y, lb, par, |p: bool, q: bool| p | q),
                _ => unreachable!("checked by the shape rule"),
            })
        }
        _ => unreachable!("dtypes checked by the shape rule"),
    };
    Ok(Array::from_cpu(out, a.shape().clone()))
}

pub(crate) fn lower_compare(op: CompareOp, a: &Array, b: &Array) -> Result<Array> {
    if let Device::Cuda(_) = a.device() {
        return crate::backend::cuda_compare(op, a, b);
    }
    let ga = a.read();
    let gb = b.read();
    let (ba, bb) = (ga.cpu(op.name())?, gb.cpu(op.name())?);
    let par = Par::for_work(a.layout.numel(), 1);
    let out = match_buffer!(ba, x => {
        let y = bb.as_slice();
        map2(x, &a.layout, y, &b.layout, par, |p, q| op.holds(p, q))
    });
    Ok(Array::from_cpu(CpuBuffer::Bool(out), a.shape().clone()))
}

pub(crate) fn lower_select(p: &Array, a: &Array, b: &Array) -> Result<Array> {
    if let Device::Cuda(_) = a.device() {
        return crate::backend::cuda_select(p, a, b);
    }
    let gp = p.read();
    let ga = a.read();
    let gb = b.read();
    let (bp, ba, bb) = (gp.cpu("select")?, ga.cpu("select")?, gb.cpu("select")?);
    let pv: &[bool] = bp.as_slice();
    let par = Par::for_work(a.layout.numel(), 1);
    let out = match_buffer!(ba, x => {
        let y = bb.as_slice();
        CpuBuffer::from_vec(map3(pv, &p.layout, x, &a.layout, y, &b.layout, par, |c, t, f| if c { t } else { f }))
    });
    Ok(Array::from_cpu(out, a.shape().clone()))
}

// ---- JVP ---------------------------------------------------------------------

pub(crate) fn jvp_binary(op: BinaryOp, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let (a, b) = (&primals[0], &primals[1]);
    let out = bind1(&Prim::Binary(op), primals)?;
    if !a.dtype().is_float() {
        return Ok((smallvec![out], smallvec![None]));
    }
    let (ta, tb) = (&tangents[0], &tangents[1]);
    // Each term is linear in its tangent; None terms are skipped.
    let term = |t: &Option<Tensor>, f: &dyn Fn(&Tensor) -> Result<Tensor>| -> Result<Option<Tensor>> {
        t.as_ref().map(f).transpose()
    };
    let t = match op {
        BinaryOp::Add => lax::add_any(ta.clone(), tb.clone())?,
        BinaryOp::Sub => lax::add_any(ta.clone(), term(tb, &|t| lax::neg(t))?)?,
        BinaryOp::Mul => lax::add_any(term(ta, &|t| lax::mul(t, b))?, term(tb, &|t| lax::mul(a, t))?)?,
        BinaryOp::Div => {
            // d(a/b) = da / b - db * (out / b)
            let db = term(tb, &|t| lax::mul(t, &lax::neg(&lax::div(&out, b)?)?))?;
            lax::add_any(term(ta, &|t| lax::div(t, b))?, db)?
        }
        BinaryOp::Pow => {
            // d/da = b a^(b-1); d/db = out ln a (0 where a == 0, as JAX).
            // The factor b is kept outside the guard, so that d/db of d/da
            // at b = 0 is a^-1 (JAX's testPowSecondDerivative); only
            // a^(b-1) is guarded, where a == b == 0 (an infinite power times
            // a zero factor), which keeps the gradient 0 at pow(0, 0). The
            // guarded power is taken of a safe base (1 there), so that its
            // own derivative, which reverse mode multiplies by the select's
            // zero cotangent, is finite (0 * inf would be NaN).
            let zero = lax::zeros_like(a)?;
            let da = term(ta, &|t| {
                let both_0 = lax::and(&lax::eq(a, &zero)?, &lax::eq(b, &zero)?)?;
                let safe_a = lax::select(&both_0, &lax::ones_like(a)?, a)?;
                let p = lax::pow(&safe_a, &lax::add_scalar(b, -1.0)?)?;
                lax::mul(t, &lax::mul(b, &lax::select(&both_0, &zero, &p)?)?)
            })?;
            let db = term(tb, &|t| {
                let a_is_0 = lax::eq(a, &zero)?;
                let safe_a = lax::select(&a_is_0, &lax::ones_like(a)?, a)?;
                let f = lax::select(&a_is_0, &zero, &lax::mul(&out, &lax::log(&safe_a)?)?)?;
                lax::mul(t, &f)
            })?;
            lax::add_any(da, db)?
        }
        BinaryOp::Max | BinaryOp::Min => {
            // Ties split the tangent evenly (as JAX does).
            let win = if op == BinaryOp::Max { lax::gt(a, b)? } else { lax::lt(a, b)? };
            let tie = lax::eq(a, b)?;
            let one = lax::ones_like(a)?;
            let zero = lax::zeros_like(a)?;
            let half = lax::full_like(a, 0.5)?;
            let wa = lax::select(&win, &one, &lax::select(&tie, &half, &zero)?)?;
            let wb = lax::sub(&one, &wa)?;
            lax::add_any(term(ta, &|t| lax::mul(t, &wa))?, term(tb, &|t| lax::mul(t, &wb))?)?
        }
        BinaryOp::Rem => {
            // a = q b + r with q = trunc(a / b): dr = da - q db
            let q = lax::div(&lax::sub(a, &out)?, b)?;
            lax::add_any(ta.clone(), term(tb, &|t| lax::mul(t, &lax::neg(&q)?))?)?
        }
        BinaryOp::Atan2 => {
            let denom = lax::add(&lax::mul(a, a)?, &lax::mul(b, b)?)?;
            let da = term(ta, &|t| lax::mul(t, &lax::div(b, &denom)?))?;
            let db = term(tb, &|t| lax::mul(t, &lax::neg(&lax::div(a, &denom)?)?))?;
            lax::add_any(da, db)?
        }
        BinaryOp::And | BinaryOp::Or => None,
    };
    Ok((smallvec![out], smallvec![t]))
}

pub(crate) fn jvp_select(primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(&Prim::Select, primals)?;
    let t = match (&tangents[1], &tangents[2]) {
        (None, None) => None,
        (ta, tb) => {
            let ta = lax::instantiate(ta, &primals[1])?;
            let tb = lax::instantiate(tb, &primals[2])?;
            Some(lax::select(&primals[0], &ta, &tb)?)
        }
    };
    Ok((smallvec![out], smallvec![t]))
}

// ---- transpose ---------------------------------------------------------------

fn nonlinear(op: &str) -> Error {
    Error::transform(op, format!("{op} is not linear in these operands, so it cannot be transposed"))
}

pub(crate) fn transpose_binary(op: BinaryOp, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None]);
    };
    let (la, lb) = (args[0].is_linear(), args[1].is_linear());
    let pick = |lin: bool, v: Result<Tensor>| -> Result<Option<Tensor>> {
        if lin {
            v.map(Some)
        } else {
            Ok(None)
        }
    };
    match op {
        BinaryOp::Add => Ok(smallvec![pick(la, Ok(ct.clone()))?, pick(lb, Ok(ct.clone()))?]),
        BinaryOp::Sub => Ok(smallvec![pick(la, Ok(ct.clone()))?, pick(lb, lax::neg(ct))?]),
        BinaryOp::Mul => match (&args[0], &args[1]) {
            (LinearArg::Linear(_), LinearArg::Const(b)) => Ok(smallvec![Some(lax::mul(ct, b)?), None]),
            (LinearArg::Const(a), LinearArg::Linear(_)) => Ok(smallvec![None, Some(lax::mul(a, ct)?)]),
            _ => Err(nonlinear("mul")),
        },
        BinaryOp::Div => match (&args[0], &args[1]) {
            (LinearArg::Linear(_), LinearArg::Const(b)) => Ok(smallvec![Some(lax::div(ct, b)?), None]),
            _ => Err(nonlinear("div")),
        },
        _ => Err(nonlinear(op.name())),
    }
}

pub(crate) fn transpose_select(cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None, None]);
    };
    let Some(pred) = args[0].constant() else {
        return Err(nonlinear("select"));
    };
    let zero = lax::zeros_like(ct)?;
    let on_true = if args[1].is_linear() { Some(lax::select(pred, ct, &zero)?) } else { None };
    let on_false = if args[2].is_linear() { Some(lax::select(pred, &zero, ct)?) } else { None };
    Ok(smallvec![None, on_true, on_false])
}
