//! Elementwise unary primitives (and `convert_element_type`): shape rules,
//! lowering, JVP, transpose and batching (shared elementwise combinator).

use super::check_arity;
use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use xform_kernels::cpu::elementwise::map1;
use xform_kernels::cpu::Par;
use xform_kernels::{match_buffer, CpuBuffer, DType, Element, Float, Layout, Real};

/// The elementwise unary primitives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `e^x`.
    Exp,
    /// `ln x`.
    Log,
    /// `ln(1 + x)`.
    Log1p,
    /// `e^x - 1`.
    Expm1,
    /// `sin x`.
    Sin,
    /// `cos x`.
    Cos,
    /// `tan x`.
    Tan,
    /// `tanh x`.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Logistic,
    /// `sqrt x`.
    Sqrt,
    /// `1 / sqrt x`.
    Rsqrt,
    /// `|x|`.
    Abs,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign,
    /// Round toward -inf.
    Floor,
    /// Round toward +inf.
    Ceil,
    /// Round half to even (as numpy and PyTorch).
    Round,
    /// The error function.
    Erf,
    /// Logical not (bool) or bitwise not (integers).
    Not,
    /// `x^n` for a static integer `n`.
    IntegerPow(i32),
}

impl UnaryOp {
    /// The name programs print.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Log1p => "log1p",
            UnaryOp::Expm1 => "expm1",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tan => "tan",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Logistic => "logistic",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Abs => "abs",
            UnaryOp::Sign => "sign",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Erf => "erf",
            UnaryOp::Not => "not",
            UnaryOp::IntegerPow(_) => "integer_pow",
        }
    }

    /// Every op (with one sample exponent), for registries and tests.
    pub const ALL: [UnaryOp; 20] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Expm1,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tan,
        UnaryOp::Tanh,
        UnaryOp::Logistic,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Abs,
        UnaryOp::Sign,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Erf,
        UnaryOp::Not,
        UnaryOp::IntegerPow(3),
    ];

    /// Which dtypes the op accepts.
    fn accepts(self, d: DType) -> bool {
        match self {
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::IntegerPow(_) => d != DType::Bool,
            UnaryOp::Not => !d.is_float(),
            _ => d.is_float(),
        }
    }

    /// Rough cost per element relative to an add (for the parallel threshold).
    fn cost(self) -> usize {
        match self {
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Sign
            | UnaryOp::Not
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round => 1,
            UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::IntegerPow(_) => 2,
            _ => 8,
        }
    }
}

// ---- shape rules -----------------------------------------------------------

/// Validates the operand of a unary op (the output is its aval).
#[inline]
pub(crate) fn check_unary(op: UnaryOp, ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity(op.name(), ins, 1)?;
    let x = &ins[0];
    if !op.accepts(x.dtype) {
        let what = match op {
            UnaryOp::Not => "needs a bool or integer operand",
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::IntegerPow(_) => "needs a numeric operand",
            _ => "needs a floating-point operand",
        };
        return Err(Error::dtype(op.name(), what, &[x.dtype]));
    }
    Ok(())
}

pub(crate) fn shape_unary(op: UnaryOp, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_unary(op, ins)?;
    Ok(smallvec![ins[0].to_owned()])
}

pub(crate) fn shape_convert(dtype: DType, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("convert_element_type", ins, 1)?;
    let mut a = ins[0].to_owned();
    a.dtype = dtype;
    Ok(smallvec![a])
}

// ---- lowering --------------------------------------------------------------

fn sign<R: Real>(x: R) -> R {
    if x.is_nan() {
        x
    } else if x > R::ZERO {
        R::ONE
    } else if x < R::ZERO {
        -R::ONE
    } else {
        R::ZERO
    }
}

fn round_half_even<R: Real>(x: R) -> R {
    let r = x.round();
    // `round` goes half away from zero; step back to the even neighbour on ties.
    if (x - x.floor()) == R::of(0.5) && (r % R::of(2.0)) != R::ZERO {
        r - sign(x)
    } else {
        r
    }
}

fn float_unary<T: Float>(op: UnaryOp, v: &[T], l: &Layout) -> Vec<T> {
    let par = Par::for_work(l.numel(), op.cost());
    macro_rules! m {
        ($f:expr) => {
            map1(v, l, par, |a: T| T::down($f(a.up())))
        };
    }
    match op {
        UnaryOp::Neg => m!(|x: T::Compute| -x),
        UnaryOp::Exp => m!(Real::exp_v),
        UnaryOp::Log => m!(Real::ln),
        UnaryOp::Log1p => m!(Real::ln_1p),
        UnaryOp::Expm1 => m!(Real::exp_m1),
        UnaryOp::Sin => m!(Real::sin),
        UnaryOp::Cos => m!(Real::cos),
        UnaryOp::Tan => m!(Real::tan),
        UnaryOp::Tanh => m!(Real::tanh_v),
        UnaryOp::Logistic => m!(Real::logistic_v),
        UnaryOp::Sqrt => m!(Real::sqrt),
        UnaryOp::Rsqrt => m!(|x: T::Compute| T::Compute::ONE / x.sqrt()),
        UnaryOp::Abs => m!(Real::abs),
        UnaryOp::Sign => m!(sign),
        UnaryOp::Floor => m!(Real::floor),
        UnaryOp::Ceil => m!(Real::ceil),
        UnaryOp::Round => m!(round_half_even),
        UnaryOp::Erf => m!(Real::erf),
        UnaryOp::IntegerPow(n) => m!(|x: T::Compute| x.powi(n)),
        UnaryOp::Not => unreachable!("checked by the shape rule"),
    }
}

/// Integer arithmetic shared by i32, i64 and u32 (wrapping, like Rust's
/// release-mode arithmetic and numpy).
pub(crate) trait IntOps: Element + Copy {
    fn wrapping_neg(self) -> Self;
    fn abs_(self) -> Self;
    fn signum_(self) -> Self;
    fn not_(self) -> Self;
    fn pow_(self, n: u32) -> Self;
}

macro_rules! int_ops {
    ($t:ty, signed) => {
        impl IntOps for $t {
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            fn abs_(self) -> Self {
                <$t>::wrapping_abs(self)
            }
            fn signum_(self) -> Self {
                <$t>::signum(self)
            }
            fn not_(self) -> Self {
                !self
            }
            fn pow_(self, n: u32) -> Self {
                <$t>::wrapping_pow(self, n)
            }
        }
    };
    ($t:ty, unsigned) => {
        impl IntOps for $t {
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            fn abs_(self) -> Self {
                self
            }
            fn signum_(self) -> Self {
                (self > 0) as $t
            }
            fn not_(self) -> Self {
                !self
            }
            fn pow_(self, n: u32) -> Self {
                <$t>::wrapping_pow(self, n)
            }
        }
    };
}
int_ops!(i32, signed);
int_ops!(i64, signed);
int_ops!(u32, unsigned);

fn int_unary<T: IntOps>(op: UnaryOp, v: &[T], l: &Layout) -> Vec<T> {
    let par = Par::for_work(l.numel(), op.cost());
    match op {
        UnaryOp::Neg => map1(v, l, par, T::wrapping_neg),
        UnaryOp::Abs => map1(v, l, par, T::abs_),
        UnaryOp::Sign => map1(v, l, par, T::signum_),
        UnaryOp::Not => map1(v, l, par, T::not_),
        UnaryOp::IntegerPow(n) if n >= 0 => map1(v, l, par, |x: T| x.pow_(n as u32)),
        // x^-n truncates to 0 except for |x| = 1 (and 0^-n, which we define as 0).
        UnaryOp::IntegerPow(n) => map1(v, l, par, |x: T| {
            let one = T::ONE;
            if x == one {
                one
            } else if x.to_i64() == -1 {
                if n % 2 == 0 {
                    one
                } else {
                    x
                }
            } else {
                T::ZERO
            }
        }),
        _ => unreachable!("checked by the shape rule"),
    }
}

pub(crate) fn lower_unary(op: UnaryOp, x: &Array) -> Result<Array> {
    if let Device::Cuda(_) = x.device() {
        return crate::backend::cuda_unary(op, x);
    }
    let out = x.with_cpu(op.name(), |b, l| match b {
        CpuBuffer::F32(v) => CpuBuffer::F32(float_unary(op, v, l)),
        CpuBuffer::F64(v) => CpuBuffer::F64(float_unary(op, v, l)),
        CpuBuffer::F16(v) => CpuBuffer::F16(float_unary(op, v, l)),
        CpuBuffer::BF16(v) => CpuBuffer::BF16(float_unary(op, v, l)),
        CpuBuffer::I32(v) => CpuBuffer::I32(int_unary(op, v, l)),
        CpuBuffer::I64(v) => CpuBuffer::I64(int_unary(op, v, l)),
        CpuBuffer::U32(v) => CpuBuffer::U32(int_unary(op, v, l)),
        CpuBuffer::Bool(v) => CpuBuffer::Bool(map1(v, l, Par::for_work(l.numel(), 1), |a: bool| !a)),
    })?;
    Ok(Array::from_cpu(out, x.shape().clone()))
}

fn convert_vec<S: Element, D: Element>(v: &[S], l: &Layout) -> Vec<D> {
    let par = Par::for_work(l.numel(), 1);
    if S::DTYPE.is_float() || D::DTYPE.is_float() {
        map1(v, l, par, |a: S| D::from_f64(a.to_f64()))
    } else {
        map1(v, l, par, |a: S| D::from_i64(a.to_i64()))
    }
}

pub(crate) fn lower_convert(dtype: DType, x: &Array) -> Result<Array> {
    if let Device::Cuda(_) = x.device() {
        return crate::backend::cuda_convert(dtype, x);
    }
    let out = x.with_cpu("convert_element_type", |b, l| {
        xform_kernels::with_dtype!(dtype, D => match_buffer!(b, v => CpuBuffer::from_vec(convert_vec::<_, D>(v, l))))
    })?;
    Ok(Array::from_cpu(out, x.shape().clone()))
}

// ---- JVP ---------------------------------------------------------------------

pub(crate) fn jvp_unary(op: UnaryOp, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let x = &primals[0];
    let y = bind1(&Prim::Unary(op), primals)?;
    let t = match &tangents[0] {
        Some(t) if x.dtype().is_float() => t,
        _ => return Ok((smallvec![y], smallvec![None])),
    };
    // d/dx as a tensor of x's shape, from primal values only.
    let scale = |f: Tensor| lax::mul(t, &f).map(Some);
    let out = match op {
        UnaryOp::Neg => Some(lax::neg(t)?),
        UnaryOp::Exp => scale(y.clone())?,
        UnaryOp::Log => Some(lax::div(t, x)?),
        UnaryOp::Log1p => Some(lax::div(t, &lax::add_scalar(x, 1.0)?)?),
        UnaryOp::Expm1 => scale(lax::add_scalar(&y, 1.0)?)?,
        UnaryOp::Sin => scale(lax::cos(x)?)?,
        UnaryOp::Cos => scale(lax::neg(&lax::sin(x)?)?)?,
        UnaryOp::Tan => scale(lax::add_scalar(&lax::mul(&y, &y)?, 1.0)?)?,
        UnaryOp::Tanh => scale(lax::sub(&lax::ones_like(&y)?, &lax::mul(&y, &y)?)?)?,
        UnaryOp::Logistic => scale(lax::mul(&y, &lax::sub(&lax::ones_like(&y)?, &y)?)?)?,
        UnaryOp::Sqrt => Some(lax::div(t, &lax::mul_scalar(&y, 2.0)?)?),
        // d/dx x^-1/2 = -1/2 x^-3/2 = -y / (2x)
        UnaryOp::Rsqrt => scale(lax::div(&lax::mul_scalar(&y, -0.5)?, x)?)?,
        UnaryOp::Abs => scale(lax::sign(x)?)?,
        UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Not => None,
        // 2/sqrt(pi) e^{-x^2}
        UnaryOp::Erf => {
            let e = lax::exp(&lax::neg(&lax::mul(x, x)?)?)?;
            scale(lax::mul_scalar(&e, std::f64::consts::FRAC_2_SQRT_PI)?)?
        }
        UnaryOp::IntegerPow(0) => None,
        UnaryOp::IntegerPow(1) => Some(t.clone()),
        UnaryOp::IntegerPow(n) => {
            let d = if n == 2 { x.clone() } else { lax::integer_pow(x, n - 1)? };
            scale(lax::mul_scalar(&d, n as f64)?)?
        }
    };
    Ok((smallvec![y], smallvec![out]))
}

pub(crate) fn jvp_convert(dtype: DType, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let y = lax::convert(&primals[0], dtype)?;
    let t = match &tangents[0] {
        Some(t) if dtype.is_float() && primals[0].dtype().is_float() => Some(lax::convert(t, dtype)?),
        _ => None,
    };
    Ok((smallvec![y], smallvec![t]))
}

// ---- transpose ---------------------------------------------------------------

pub(crate) fn transpose_unary(op: UnaryOp, cts: &[Option<Tensor>], _args: &[LinearArg]) -> Result<Cotangents> {
    match op {
        UnaryOp::Neg => Ok(smallvec![cts[0].as_ref().map(lax::neg).transpose()?]),
        _ => Err(Error::transform(op.name(), format!("{} is not linear, so it cannot be transposed", op.name()))),
    }
}

pub(crate) fn transpose_convert(cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let to = args[0].aval().dtype;
    Ok(smallvec![cts[0].as_ref().map(|c| lax::convert(c, to)).transpose()?])
}
