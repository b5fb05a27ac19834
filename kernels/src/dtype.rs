//! Element types: the [`DType`] tag and the [`Element`] / [`Float`] traits that
//! the generic kernels are written against.
//!
//! f16 and bf16 compute in f32 and round once per result (their `Compute`
//! type is f32), as the design requires.

use half::{bf16, f16};
use std::fmt;

/// The element type of an array.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 16-bit IEEE float (computes in f32).
    F16,
    /// bfloat16 (computes in f32).
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 32-bit unsigned integer (random bits, keys).
    U32,
    /// Boolean.
    Bool,
}

/// The elements of one CPU array, typed: one variant per [`DType`] (its
/// methods and dispatch macros are in `buffer.rs`).
#[derive(Clone, Debug, PartialEq)]
pub enum CpuBuffer {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
    /// u32 elements.
    U32(Vec<u32>),
    /// bool elements.
    Bool(Vec<bool>),
}

impl DType {
    /// Every dtype, in a fixed order (handy for tests).
    pub const ALL: [DType; 8] =
        [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U32, DType::Bool];

    /// True for f32, f64, f16 and bf16.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// True for the integer types (not bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::U32)
    }

    /// The values an integer dtype holds, `lo..=hi` (`None` for the
    /// others).
    pub fn int_range(self) -> Option<(i128, i128)> {
        match self {
            DType::I32 => Some((i32::MIN as i128, i32::MAX as i128)),
            DType::I64 => Some((i64::MIN as i128, i64::MAX as i128)),
            DType::U32 => Some((0, u32::MAX as i128)),
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::Bool => None,
        }
    }

    /// True for the signed types (floats and signed integers).
    pub fn is_signed(self) -> bool {
        self.is_float() || matches!(self, DType::I32 | DType::I64)
    }

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Bool => 1,
        }
    }

    /// The numpy-style name: "float32", "int64", ...
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U32 => "uint32",
            DType::Bool => "bool",
        }
    }

    /// The short name programs and kernel names use: "f32", "i64", ...
    pub fn short_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }

    /// Machine epsilon of a float dtype (1 for the others), for tolerances.
    pub fn eps(self) -> f64 {
        match self {
            DType::F32 => f32::EPSILON as f64,
            DType::F64 => f64::EPSILON,
            DType::F16 => 9.765625e-4,
            DType::BF16 => 7.8125e-3,
            _ => 1.0,
        }
    }

    /// The dtype both operands of a numpy-style binary op are promoted to.
    ///
    /// Floats win over integers; among floats the wider wins (f16 with bf16
    /// gives f32); among integers the wider signed type wins.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a.is_float(), b.is_float()) {
            (true, false) => a,
            (false, true) => b,
            (true, true) => {
                if a == F64 || b == F64 {
                    F64
                } else {
                    F32
                }
            }
            (false, false) => match (a, b) {
                (Bool, o) | (o, Bool) => o,
                (I64, _) | (_, I64) => I64,
                // i32 with u32: no 32-bit type holds both; numpy uses i64.
                _ => I64,
            },
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A type that can be an array element.
pub trait Element: Copy + Send + Sync + PartialEq + PartialOrd + fmt::Debug + 'static {
    /// The dtype tag of this type.
    const DTYPE: DType;
    /// The additive identity.
    const ZERO: Self;
    /// The multiplicative identity (true for bool).
    const ONE: Self;
    /// Lossy conversion to f64 (bool gives 0 or 1).
    fn to_f64(self) -> f64;
    /// Conversion from f64 with numpy's casting semantics (truncation toward
    /// zero for integers, saturating; nonzero is true for bool).
    fn from_f64(v: f64) -> Self;
    /// Conversion to i64 (truncating floats), for index arithmetic.
    fn to_i64(self) -> i64;
    /// Conversion from i64 (wrapping for narrower integers).
    fn from_i64(v: i64) -> Self;
    /// The smallest value (for max-reductions), -inf for floats.
    fn min_value() -> Self;
    /// The largest value (for min-reductions), +inf for floats.
    fn max_value() -> Self;
    /// True if the value is NaN (always false for non-floats).
    fn is_nan(self) -> bool {
        false
    }
    /// Wraps a vector of this type as a buffer.
    fn wrap(v: Vec<Self>) -> CpuBuffer;
    /// The buffer's elements, if it holds this type.
    fn view(b: &CpuBuffer) -> Option<&[Self]>;
    /// The buffer's elements mutably, if it holds this type.
    fn view_mut(b: &mut CpuBuffer) -> Option<&mut [Self]>;
}

macro_rules! buffer_access {
    ($t:ty, $d:ident) => {
        #[inline]
        fn wrap(v: Vec<Self>) -> CpuBuffer {
            CpuBuffer::$d(v)
        }
        #[inline]
        fn view(b: &CpuBuffer) -> Option<&[Self]> {
            match b {
                CpuBuffer::$d(v) => Some(v),
                _ => None,
            }
        }
        #[inline]
        fn view_mut(b: &mut CpuBuffer) -> Option<&mut [Self]> {
            match b {
                CpuBuffer::$d(v) => Some(v),
                _ => None,
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn min_value() -> Self {
                <$t>::MIN
            }
            fn max_value() -> Self {
                <$t>::MAX
            }
            buffer_access!($t, $d);
        }
    };
}
int_element!(i32, I32);
int_element!(i64, I64);
int_element!(u32, U32);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    const ZERO: Self = false;
    const ONE: Self = true;
    #[inline]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    fn min_value() -> Self {
        false
    }
    fn max_value() -> Self {
        true
    }
    buffer_access!(bool, Bool);
}

macro_rules! float_element {
    ($t:ty, $d:ident, $zero:expr, $one:expr, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            #[inline]
            fn to_f64(self) -> f64 {
                ($to)(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                ($from)(v)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                ($to)(self) as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                ($from)(v as f64)
            }
            fn min_value() -> Self {
                ($from)(f64::NEG_INFINITY)
            }
            fn max_value() -> Self {
                ($from)(f64::INFINITY)
            }
            #[inline]
            fn is_nan(self) -> bool {
                ($to)(self).is_nan()
            }
            buffer_access!($t, $d);
        }
    };
}
float_element!(f32, F32, 0.0, 1.0, |x: f32| x as f64, |v: f64| v as f32);
float_element!(f64, F64, 0.0, 1.0, |x: f64| x, |v: f64| v);
float_element!(f16, F16, f16::ZERO, f16::ONE, |x: f16| x.to_f64(), |v: f64| f16::from_f32(round_to_odd_f32(v)));
float_element!(bf16, BF16, bf16::ZERO, bf16::ONE, |x: bf16| x.to_f64(), |v: f64| bf16::from_f32(round_to_odd_f32(v)));

/// `v` in f32, rounded to odd: truncated toward zero, then the last bit set
/// if that lost anything (NaN, infinities and overflow as `v as f32`).
/// Rounding this to a format of at most 22 significant bits (f16, bf16)
/// to nearest-even gives `v` rounded once, as CUDA's `__double2half` and
/// `__double2bfloat16` do: `half`'s `f16::from_f64` goes through a
/// rounded f32 where the CPU has F16C (rounding twice: `2^-25 (1 +
/// 2^-40)` became 0, not `2^-24`), and its `bf16::from_f64` drops the
/// f64's low 32 bits before rounding (so `1 + 2^-8 + 2^-40` became 1).
fn round_to_odd_f32(v: f64) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f as f64 == v || v.is_nan() {
        return f;
    }
    // toward zero (`f` rounded away from `v` if its magnitude is larger)
    let t = if (f as f64).abs() > v.abs() { f32::from_bits(f.to_bits() - 1) } else { f };
    f32::from_bits(t.to_bits() | 1)
}

/// A floating-point element. Math runs in `Self::Compute` (f32 or f64) and is
/// rounded back once.
pub trait Float: Element {
    /// The type arithmetic is done in: f64 for f64, f32 for the rest.
    type Compute: Real;
    /// Widen to the compute type.
    fn up(self) -> Self::Compute;
    /// Round from the compute type.
    fn down(v: Self::Compute) -> Self;
}

impl Float for f32 {
    type Compute = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self
    }
    #[inline(always)]
    fn down(v: f32) -> Self {
        v
    }
}
impl Float for f64 {
    type Compute = f64;
    #[inline(always)]
    fn up(self) -> f64 {
        self
    }
    #[inline(always)]
    fn down(v: f64) -> Self {
        v
    }
}
impl Float for f16 {
    type Compute = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(v: f32) -> Self {
        f16::from_f32(v)
    }
}
impl Float for bf16 {
    type Compute = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// The math of f32 and f64, under one name so kernels are written once.
pub trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + fmt::Debug
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Rem<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::iter::Sum
    + 'static
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Conversion from f64.
    fn of(v: f64) -> Self;
    /// e^x.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// ln(1 + x), accurate near 0.
    fn ln_1p(self) -> Self;
    /// e^x - 1, accurate near 0.
    fn exp_m1(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Tangent.
    fn tan(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Round toward -inf.
    fn floor(self) -> Self;
    /// Round toward +inf.
    fn ceil(self) -> Self;
    /// Round half away from zero.
    fn round(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// x^y.
    fn powf(self, y: Self) -> Self;
    /// x^n for an integer n.
    fn powi(self, n: i32) -> Self;
    /// atan2(self, x).
    fn atan2(self, x: Self) -> Self;
    /// NaN test.
    fn is_nan(self) -> bool;
    /// e^x as array kernels compute it (vectorizable in f32, see `fastmath`).
    fn exp_v(self) -> Self;
    /// tanh as array kernels compute it.
    fn tanh_v(self) -> Self;
    /// 1 / (1 + e^-x) as array kernels compute it.
    fn logistic_v(self) -> Self;
    /// The f32 or the f64 version of a function, chosen by `Self`: how an
    /// op table names math that has one implementation per precision
    /// (`x.via(f32::sinh, f64::sinh)`, or `crate::special`'s pairs), so a
    /// new op adds no method here.
    fn via(self, f32: impl Fn(f32) -> f32, f64: impl Fn(f64) -> f64) -> Self;
    /// [`Real::via`] for a function of two arguments
    /// (`x.via2(y, f32::hypot, f64::hypot)`).
    fn via2(self, y: Self, f32: impl Fn(f32, f32) -> f32, f64: impl Fn(f64, f64) -> f64) -> Self;
}

macro_rules! real_impl {
    ($t:ty, $is_f32:literal, $erf:path, $exp_v:expr, $tanh_v:expr, $logistic_v:expr) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)]
            fn of(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            #[inline(always)]
            fn exp_m1(self) -> Self {
                <$t>::exp_m1(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline(always)]
            fn round(self) -> Self {
                <$t>::round(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                <$t>::powf(self, y)
            }
            #[inline(always)]
            fn powi(self, n: i32) -> Self {
                <$t>::powi(self, n)
            }
            #[inline(always)]
            fn atan2(self, x: Self) -> Self {
                <$t>::atan2(self, x)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn exp_v(self) -> Self {
                ($exp_v)(self)
            }
            #[inline(always)]
            fn tanh_v(self) -> Self {
                ($tanh_v)(self)
            }
            #[inline(always)]
            fn logistic_v(self) -> Self {
                ($logistic_v)(self)
            }
            #[inline(always)]
            #[allow(clippy::unnecessary_cast)]
            fn via(self, f32: impl Fn(f32) -> f32, f64: impl Fn(f64) -> f64) -> Self {
                // The untaken branch is dead code after monomorphization.
                if $is_f32 {
                    f32(self as f32) as $t
                } else {
                    f64(self as f64) as $t
                }
            }
            #[inline(always)]
            #[allow(clippy::unnecessary_cast)]
            fn via2(self, y: Self, f32: impl Fn(f32, f32) -> f32, f64: impl Fn(f64, f64) -> f64) -> Self {
                if $is_f32 {
                    f32(self as f32, y as f32) as $t
                } else {
                    f64(self as f64, y as f64) as $t
                }
            }
        }
    };
}
real_impl!(f32, true, libm::erff, crate::fastmath::exp_f32, crate::fastmath::tanh_f32, crate::fastmath::logistic_f32);
real_impl!(f64, false, libm::erf, f64::exp, f64::tanh, |x: f64| {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_is_symmetric_and_float_wins() {
        for a in DType::ALL {
            for b in DType::ALL {
                assert_eq!(DType::promote(a, b), DType::promote(b, a), "{a} {b}");
            }
        }
        assert_eq!(DType::promote(DType::I32, DType::F16), DType::F16);
        assert_eq!(DType::promote(DType::F16, DType::BF16), DType::F32);
        assert_eq!(DType::promote(DType::I32, DType::U32), DType::I64);
    }

    #[test]
    fn half_types_round_through_f32() {
        let x = f16::from_f32(1.5);
        assert_eq!(f16::down(x.up() * 2.0), f16::from_f32(3.0));
        assert_eq!(<bf16 as Element>::from_f64(2.0).to_f64(), 2.0);
    }

    /// f64 to f16 and bf16 rounds once, to nearest-even (as CUDA's
    /// `__double2half` and `__double2bfloat16`): just above a tie rounds
    /// up, a tie to even, and the rest as `from_f32` of an exact f32.
    #[test]
    fn half_types_from_f64_round_once() {
        let p = |e: i32| 2f64.powi(e);
        let h = |v: f64| <f16 as Element>::from_f64(v).to_f64();
        let b = |v: f64| <bf16 as Element>::from_f64(v).to_f64();
        assert_eq!(h(p(-25) * (1.0 + p(-40))), p(-24));
        assert_eq!(h(p(-25)), 0.0);
        assert_eq!(h(-(1.0 + p(-11) + p(-40))), -(1.0 + p(-10)));
        assert_eq!(h(1.0 + p(-11)), 1.0);
        assert_eq!(h(65519.0 + p(-30)), 65504.0);
        assert_eq!(h(65520.0), f64::INFINITY);
        assert_eq!(b(1.0 + p(-8) + p(-40)), 1.0 + p(-7));
        assert_eq!(b(1.0 + p(-8)), 1.0);
        assert_eq!(b(-(3.0 * p(-134))), -p(-132));
        assert!(h(f64::NAN).is_nan() && b(f64::NAN).is_nan());
        assert_eq!(b(f64::MAX), f64::INFINITY);
        assert_eq!(h(-1e-300).to_bits(), (-0.0f64).to_bits());
        for v in [0.1f32, -3.7e-6, 6.1e4, 1e-40, 3.0e38] {
            assert_eq!(<f16 as Element>::from_f64(v as f64), f16::from_f32(v));
            assert_eq!(<bf16 as Element>::from_f64(v as f64), bf16::from_f32(v));
        }
    }
}
