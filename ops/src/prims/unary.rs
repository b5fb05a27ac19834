//! The elementwise unary primitives: one table entry per op (see
//! `unary_table.rs` for what an entry declares and what is derived from
//! it). The CPU expression and the CUDA expression of each op sit side by
//! side; the JVP follows JAX's rule for the same op (the same operations in
//! the same order), so that derivatives follow JAX's; the differential
//! test (`tests/jax_diff`) compares them within 1e-10, and
//! `registry::edge_points` exactly at poles and domain ends.

use super::batching::BatchAxis;
use super::cuda_c::{upow_helper, CudaCx, CudaExpr};
use super::jit;
use super::jit::{Tile, TileMut};
use super::sample::{generic_dom, Case, Dom, Sample, FLOATS, INTS};
use super::{check_arity, Family, Props};
use crate::array::Array;
use crate::error::{Error, OrRaise, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use std::f64::consts::{FRAC_2_SQRT_PI, LN_2, LOG10_E, PI};
use xform_kernels::cpu::elementwise::map1;
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::MapOp;
use xform_kernels::cuda_source::{map_kernel, Kernel};
use xform_kernels::special;
use xform_kernels::{CpuBuffer, DType, Element, Float, Layout, Real};

unary_table! {
    /// `-x`.
    Neg => neg "neg" {
        cost: 1,
        float: |x| -x, cuda: |c| c.expr("-x"),
        int: |x| x.wrapping_neg(), cuda: |c| c.expr(format!("({t})(({u})0 - ({u})x)", t = c.t(), u = c.u())),
        jvp: |t, _x, _y| Ok(Some(lax::neg(t)?)),
        linear: true,
        method: none,
        sample: Dom::Real(-3.0, 3.0),
        jax: "(-{x})",
    }
    /// `e^x`.
    Exp => exp "exp" {
        cost: 8,
        float: |x| x.exp_v(), cuda: |c| c.call("exp"),
        jvp: |t, _x, y| scale(t, y.clone()),
        linear: false,
        method: float exp,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.exp({x})",
    }
    /// `2^x`.
    Exp2 => exp2 "exp2" {
        cost: 8,
        float: |x| x.via(f32::exp2, f64::exp2), cuda: |c| c.call("exp2"),
        // JAX: log(2) * (t * y)
        jvp: |t, x, y| Ok(Some(lax::mul(&lax::full_like(x, LN_2)?, &lax::mul(t, y)?)?)),
        linear: false,
        method: float exp2,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.exp2({x})",
    }
    /// `e^x - 1`, accurate near zero.
    Expm1 => expm1 "expm1" {
        cost: 8,
        float: |x| x.exp_m1(), cuda: |c| c.call("expm1"),
        jvp: |t, _x, y| scale(t, lax::add_scalar(y, 1.0)?),
        linear: false,
        method: float expm1,
        sample: Dom::Real(-2.0, 2.0),
        jax: "jax.lax.expm1({x})",
    }
    /// Natural logarithm.
    Log => log "log" {
        cost: 8,
        float: |x| x.ln(), cuda: |c| c.call("log"),
        jvp: |t, x, _y| Ok(Some(lax::div(t, x)?)),
        linear: false,
        method: float log,
        sample: Dom::Real(0.2, 4.0),
        jax: "jax.lax.log({x})",
    }
    /// Base-2 logarithm.
    Log2 => log2 "log2" {
        cost: 8,
        float: |x| x.via(f32::log2, f64::log2), cuda: |c| c.call("log2"),
        // jnp.log2 is log(x) / log(2): its tangent is (t / x) / log(2).
        jvp: |t, x, _y| Ok(Some(lax::div(&lax::div(t, x)?, &lax::full_like(x, LN_2)?)?)),
        linear: false,
        method: float log2,
        sample: Dom::Real(0.2, 4.0),
        jax: "jnp.log2({x})",
    }
    /// Base-10 logarithm (exact at powers of ten, as the platform's `log10`
    /// is; `jnp.log10` rounds `log(x) * (1 / log(10))` instead).
    Log10 => log10 "log10" {
        cost: 8,
        float: |x| x.via(f32::log10, f64::log10), cuda: |c| c.call("log10"),
        // jnp.log10 is log(x) * (1 / log(10)): its tangent is (t / x) * (1 / log(10)).
        jvp: |t, x, _y| Ok(Some(lax::mul_scalar(&lax::div(t, x)?, LOG10_E)?)),
        linear: false,
        method: float log10,
        sample: Dom::Real(0.2, 4.0),
        jax: "jnp.log10({x})",
    }
    /// `ln(1 + x)`, accurate near zero.
    Log1p => log1p "log1p" {
        cost: 8,
        float: |x| x.ln_1p(), cuda: |c| c.call("log1p"),
        jvp: |t, x, _y| Ok(Some(lax::div(t, &lax::add_scalar(x, 1.0)?)?)),
        linear: false,
        method: float log1p,
        sample: Dom::Real(-0.5, 3.0),
        jax: "jax.lax.log1p({x})",
    }
    /// Sine.
    Sin => sin "sin" {
        cost: 8,
        float: |x| x.sin(), cuda: |c| c.call("sin"),
        jvp: |t, x, _y| scale(t, lax::cos(x)?),
        linear: false,
        method: float sin,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.sin({x})",
    }
    /// Cosine.
    Cos => cos "cos" {
        cost: 8,
        float: |x| x.cos(), cuda: |c| c.call("cos"),
        jvp: |t, x, _y| scale(t, lax::neg(&lax::sin(x)?)?),
        linear: false,
        method: float cos,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.cos({x})",
    }
    /// Tangent.
    Tan => tan "tan" {
        cost: 8,
        float: |x| x.tan(), cuda: |c| c.call("tan"),
        jvp: |t, _x, y| scale(t, lax::add_scalar(&lax::mul(y, y)?, 1.0)?),
        linear: false,
        method: float tan,
        sample: Dom::Real(-1.2, 1.2),
        jax: "jax.lax.tan({x})",
    }
    /// Arcsine.
    Asin => asin "asin" {
        cost: 8,
        float: |x| x.via(f32::asin, f64::asin), cuda: |c| c.call("asin"),
        // JAX: t * rsqrt(1 - x^2)
        jvp: |t, x, _y| scale(t, lax::rsqrt(&one_minus_square(x)?)?),
        linear: false,
        method: float asin,
        sample: Dom::Real(-0.9, 0.9),
        jax: "jax.lax.asin({x})",
    }
    /// Arccosine.
    Acos => acos "acos" {
        cost: 8,
        float: |x| x.via(f32::acos, f64::acos), cuda: |c| c.call("acos"),
        // JAX: t * -rsqrt(1 - x^2)
        jvp: |t, x, _y| scale(t, lax::neg(&lax::rsqrt(&one_minus_square(x)?)?)?),
        linear: false,
        method: float acos,
        sample: Dom::Real(-0.9, 0.9),
        jax: "jax.lax.acos({x})",
    }
    /// Arctangent.
    Atan => atan "atan" {
        cost: 8,
        float: |x| x.via(f32::atan, f64::atan), cuda: |c| c.call("atan"),
        // JAX: t / (1 + x^2)
        jvp: |t, x, _y| Ok(Some(lax::div(t, &lax::add(&lax::ones_like(x)?, &lax::mul(x, x)?)?)?)),
        linear: false,
        method: float atan,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.atan({x})",
    }
    /// The normalized sinc function `sin(pi x) / (pi x)`, 1 at 0 (`jnp.sinc`).
    Sinc => sinc "sinc" {
        cost: 8,
        float: |x| if x == R::ZERO {
            R::ONE
        } else {
            let p = R::of(PI) * x;
            p.sin() / p
        },
        cuda: |c| c.expr("xf_sinc(x)").helpers(format!(
            "static __device__ __forceinline__ {t} xf_sinc({t} x) {{\n    if (x == ({t})0) return ({t})1;\n    \
             const {t} p = ({t})3.141592653589793 * x;\n    return {sin}(p) / p;\n}}\n",
            t = c.c(),
            sin = c.math("sin")
        )),
        jvp: |t, x, y| sinc_tangent(t, x, y),
        linear: false,
        method: float sinc,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jnp.sinc({x})",
    }
    /// Hyperbolic sine.
    Sinh => sinh "sinh" {
        cost: 8,
        float: |x| x.via(f32::sinh, f64::sinh), cuda: |c| c.call("sinh"),
        jvp: |t, x, _y| scale(t, lax::cosh(x)?),
        linear: false,
        method: float sinh,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.sinh({x})",
    }
    /// Hyperbolic cosine.
    Cosh => cosh "cosh" {
        cost: 8,
        float: |x| x.via(f32::cosh, f64::cosh), cuda: |c| c.call("cosh"),
        jvp: |t, x, _y| scale(t, lax::sinh(x)?),
        linear: false,
        method: float cosh,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.cosh({x})",
    }
    /// Hyperbolic tangent.
    Tanh => tanh "tanh" {
        cost: 8,
        float: |x| x.tanh_v(), cuda: |c| c.call("tanh"),
        jvp: |t, _x, y| scale(t, lax::sub(&lax::ones_like(y)?, &lax::mul(y, y)?)?),
        linear: false,
        method: float tanh,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.tanh({x})",
    }
    /// Inverse hyperbolic sine.
    Asinh => asinh "asinh" {
        cost: 8,
        // f32 through f64: Rust's `f32::asinh` overflows to inf above
        // f32::MAX / 2 (asinh(3e38) is 89.3, as CUDA's asinhf gives)
        float: |x| x.via(|v| (v as f64).asinh() as f32, f64::asinh), cuda: |c| c.call("asinh"),
        // JAX: t * rsqrt(x^2 + 1)
        jvp: |t, x, _y| scale(t, lax::rsqrt(&lax::add(&lax::mul(x, x)?, &lax::ones_like(x)?)?)?),
        linear: false,
        method: float asinh,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.asinh({x})",
    }
    /// Inverse hyperbolic cosine (`x >= 1`).
    Acosh => acosh "acosh" {
        cost: 8,
        // f32 through f64, as asinh (Rust's `f32::acosh` overflows)
        float: |x| x.via(|v| (v as f64).acosh() as f32, f64::acosh), cuda: |c| c.call("acosh"),
        // JAX: t * rsqrt(x^2 - 1)
        jvp: |t, x, _y| scale(t, lax::rsqrt(&lax::sub(&lax::mul(x, x)?, &lax::ones_like(x)?)?)?),
        linear: false,
        method: float acosh,
        sample: Dom::Real(1.2, 4.0),
        jax: "jax.lax.acosh({x})",
    }
    /// Inverse hyperbolic tangent (`|x| < 1`).
    Atanh => atanh "atanh" {
        cost: 8,
        float: |x| x.via(f32::atanh, f64::atanh), cuda: |c| c.call("atanh"),
        // JAX: (1 + x)^-1 * (t / (1 - x))
        jvp: |t, x, _y| {
            let one = lax::ones_like(x)?;
            let inv = lax::integer_pow(&lax::add(&one, x)?, -1)?;
            Ok(Some(lax::mul(&inv, &lax::div(t, &lax::sub(&one, x)?)?)?))
        },
        linear: false,
        method: float atanh,
        sample: Dom::Real(-0.9, 0.9),
        jax: "jax.lax.atanh({x})",
    }
    /// The logistic sigmoid `1 / (1 + e^-x)`.
    Logistic => logistic "logistic" {
        cost: 8,
        float: |x| x.logistic_v(),
        cuda: |c| c.expr("xf_logistic(x)").helpers(format!(
            "static __device__ __forceinline__ {t} xf_logistic({t} x) {{\n    if (x >= ({t})0) return ({t})1 / \
             (({t})1 + {e}(-x));\n    const {t} v = {e}(x);\n    return v / (({t})1 + v);\n}}\n",
            t = c.c(),
            e = c.math("exp")
        )),
        jvp: |t, _x, y| scale(t, lax::mul(y, &lax::sub(&lax::ones_like(y)?, y)?)?),
        linear: false,
        method: float sigmoid,
        sample: Dom::Real(-3.0, 3.0),
        jax: "jax.lax.logistic({x})",
    }
    /// The log-odds `ln(x / (1 - x))`, the inverse of the logistic sigmoid
    /// (`jax.scipy.special.logit`): -inf at 0, +inf at 1, NaN outside `[0, 1]`.
    Logit => logit "logit" {
        cost: 8,
        float: |x| (x / (R::ONE - x)).ln(),
        cuda: |c| c.expr(format!("{}(x / (({})1 - x))", c.math("log"), c.c())),
        // JAX: t / (x * (1 - x))
        jvp: |t, x, _y| Ok(Some(lax::div(t, &lax::mul(x, &lax::sub(&lax::ones_like(x)?, x)?)?)?)),
        linear: false,
        method: float logit,
        sample: Dom::Real(0.1, 0.9),
        jax: "jax.scipy.special.logit({x})",
    }
    /// Square root.
    Sqrt => sqrt "sqrt" {
        cost: 2,
        float: |x| x.sqrt(), cuda: |c| c.call("sqrt"),
        jvp: |t, _x, y| Ok(Some(lax::div(t, &lax::mul_scalar(y, 2.0)?)?)),
        linear: false,
        method: float sqrt,
        sample: Dom::Real(0.2, 4.0),
        jax: "jax.lax.sqrt({x})",
    }
    /// `1 / sqrt(x)`.
    Rsqrt => rsqrt "rsqrt" {
        cost: 2,
        float: |x| R::ONE / x.sqrt(), cuda: |c| c.expr(format!("({})1 / {}(x)", c.c(), c.math("sqrt"))),
        // d/dx x^-1/2 = -1/2 x^-3/2 = -y / (2x)
        jvp: |t, x, y| scale(t, lax::div(&lax::mul_scalar(y, -0.5)?, x)?),
        linear: false,
        method: float rsqrt,
        sample: Dom::Real(0.2, 4.0),
        jax: "jax.lax.rsqrt({x})",
    }
    /// Cube root.
    Cbrt => cbrt "cbrt" {
        cost: 8,
        float: |x| x.via(f32::cbrt, f64::cbrt), cuda: |c| c.call("cbrt"),
        // JAX: t * (1/3 * y^-2)
        jvp: |t, x, y| scale(t, lax::mul(&lax::full_like(x, 1.0 / 3.0)?, &lax::integer_pow(y, -2)?)?),
        linear: false,
        method: float cbrt,
        sample: Dom::AwayFromZero(0.2, 3.0),
        jax: "jax.lax.cbrt({x})",
    }
    /// `|x|`. Its derivative is `sign(x)`, 0 at 0 (as PyTorch; JAX gives 1).
    Abs => abs "abs" {
        cost: 1,
        float: |x| x.abs(), cuda: |c| c.call("fabs"),
        int: |x| x.abs_(),
        cuda: |c| if c.signed() {
            c.expr(format!("(x < 0 ? ({t})(({u})0 - ({u})x) : x)", t = c.t(), u = c.u()))
        } else {
            c.expr("x")
        },
        jvp: |t, x, _y| scale(t, lax::sign(x)?),
        linear: false,
        method: exact abs,
        sample: Dom::AwayFromZero(0.1, 3.0),
        jax: "jax.lax.abs({x})",
    }
    /// -1, 0 or 1 (NaN stays NaN).
    Sign => sign "sign" {
        cost: 1,
        float: |x| sign(x),
        cuda: |c| c.expr(format!("(x != x) ? x : (x > ({t})0 ? ({t})1 : (x < ({t})0 ? ({t})-1 : ({t})0))", t = c.c())),
        int: |x| x.signum_(),
        cuda: |c| if c.signed() {
            c.expr(format!("({})((x > 0) - (x < 0))", c.t()))
        } else {
            c.expr(format!("({})(x > 0)", c.t()))
        },
        jvp: |_t, _x, _y| Ok(None),
        linear: false,
        method: exact sign,
        sample: Dom::AwayFromZero(0.1, 3.0),
        jax: "jax.lax.sign({x})",
    }
    /// Round toward -inf.
    Floor => floor "floor" {
        cost: 1,
        float: |x| x.floor(), cuda: |c| c.call("floor"),
        jvp: |_t, _x, _y| Ok(None),
        linear: false,
        method: round floor,
        sample: Dom::AwayFromInt(-4.0, 4.0),
        jax: "jax.lax.floor({x})",
    }
    /// Round toward +inf.
    Ceil => ceil "ceil" {
        cost: 1,
        float: |x| x.ceil(), cuda: |c| c.call("ceil"),
        jvp: |_t, _x, _y| Ok(None),
        linear: false,
        method: round ceil,
        sample: Dom::AwayFromInt(-4.0, 4.0),
        jax: "jax.lax.ceil({x})",
    }
    /// Round half to even (as numpy and PyTorch).
    Round => round "round" {
        cost: 1,
        // CUDA: rint in the default rounding mode is half to even.
        float: |x| round_half_even(x), cuda: |c| c.call("rint"),
        jvp: |_t, _x, _y| Ok(None),
        linear: false,
        method: round round,
        sample: Dom::AwayFromInt(-4.0, 4.0),
        jax: "jnp.round({x})",
    }
    /// The error function.
    Erf => erf "erf" {
        cost: 8,
        float: |x| x.erf(), cuda: |c| c.call("erf"),
        // 2/sqrt(pi) e^{-x^2}
        jvp: |t, x, _y| {
            let e = lax::exp(&lax::neg(&lax::mul(x, x)?)?)?;
            scale(t, lax::mul_scalar(&e, FRAC_2_SQRT_PI)?)
        },
        linear: false,
        method: float erf,
        sample: Dom::Real(-2.0, 2.0),
        jax: "jax.lax.erf({x})",
    }
    /// The complementary error function `1 - erf(x)`, accurate where that
    /// difference loses every digit (`erfc(10)` is 2.09e-45 in f64;
    /// `special::erfc`, W. J. Cody's rational approximations).
    Erfc => erfc "erfc" {
        cost: 8,
        float: |x| x.via(special::erfc_f32, special::erfc), cuda: |c| c.call("erfc"),
        // JAX: -2/sqrt(pi) * (t * e^{-x^2})
        jvp: |t, x, _y| {
            let e = lax::exp(&lax::neg(&lax::mul(x, x)?)?)?;
            Ok(Some(lax::mul_scalar(&lax::mul(t, &e)?, -FRAC_2_SQRT_PI)?))
        },
        linear: false,
        method: float erfc,
        sample: Dom::Real(-2.0, 3.0),
        jax: "jax.lax.erfc({x})",
    }
    /// The inverse error function (`-1 < x < 1`; +-inf at +-1).
    ErfInv => erf_inv "erf_inv" {
        cost: 8,
        float: |x| x.via(special::erfinv_f32, special::erfinv), cuda: |c| c.call("erfinv"),
        jvp: |t, x, y| erf_inv_tangent(t, x, y),
        linear: false,
        method: float erfinv,
        sample: Dom::Real(-0.9, 0.9),
        jax: "jax.lax.erf_inv({x})",
    }
    /// The inverse error function as XLA expands it (what
    /// `jax.lax.erf_inv` and `jax.random.normal` run; bit for bit in f64 on
    /// the CPU, see `special::erfinv_xla`): the inverse CDF of
    /// [`Key::normal`](crate::random::Key::normal), so that xform's normal
    /// samples are JAX's. Less accurate than `erf_inv` within about 1e-8 of
    /// ±1 (`x²` rounds there, as in XLA). On CUDA it is CUDA's `erfinv`.
    ErfInvXla => erf_inv_xla "erf_inv_xla" {
        cost: 8,
        float: |x| x.via(special::erfinv_xla_f32, special::erfinv_xla), cuda: |c| c.call("erfinv"),
        jvp: |t, x, y| erf_inv_tangent(t, x, y),
        linear: false,
        method: none,
        sample: Dom::Real(-0.9, 0.9),
        jax: "jax.lax.erf_inv({x})",
    }
    /// `ln |Gamma(x)|` (+inf at the poles 0, -1, -2, ...).
    Lgamma => lgamma "lgamma" {
        cost: 8,
        float: |x| x.via(special::lgamma_f32, special::lgamma), cuda: |c| c.call("lgamma"),
        jvp: |t, x, _y| scale(t, lax::digamma(x)?),
        linear: false,
        method: float lgamma,
        sample: Dom::Real(0.3, 4.0),
        jax: "jax.lax.lgamma({x})",
    }
    /// The digamma function `d/dx ln Gamma(x)` (NaN at the poles 0, -1, ...).
    Digamma => digamma "digamma" {
        cost: 8,
        float: |x| x.via(special::digamma_f32, special::digamma),
        cuda: |c| c.expr("xf_digamma(x)").helpers(special::cuda_helpers(c.double())),
        jvp: |t, x, _y| scale(t, lax::polygamma(x, 1)?),
        linear: false,
        method: float digamma,
        sample: Dom::Real(0.3, 4.0),
        jax: "jax.lax.digamma({x})",
    }
    /// The polygamma function of order `n`: the `n`-th derivative of
    /// digamma (`polygamma(0, x)` is digamma).
    Polygamma(n: u32; samples 1, 2) => polygamma "polygamma" {
        cost: 16,
        float: |x| x.via(|v| special::polygamma_f32(n, v), |v| special::polygamma(n, v)),
        cuda: |c| c.expr("xf_polygamma((int)p, x)").helpers(special::cuda_helpers(c.double())).param(n as i64),
        jvp: |t, x, _y| {
            let next = n.checked_add(1).ok_or_else(|| Error::overflow("polygamma", "the order of the derivative overflows u32"))?;
            scale(t, lax::polygamma(x, next)?)
        },
        linear: false,
        method: float polygamma,
        sample: Dom::Real(0.5, 4.0),
        jax: "jax.scipy.special.polygamma({p}, {x})",
    }
    /// Logical not (bool) or bitwise not (integers).
    Not => not "not" {
        cost: 1,
        int: |x| x.not_(), cuda: |c| c.expr("~x"),
        bool: |x| !x, cuda: |c| c.expr("!x"),
        jvp: |_t, _x, _y| Ok(None),
        linear: false,
        method: none,
        sample: Dom::Small(0, 1),
        jax: "jnp.logical_not({x})",
    }
    /// `x^n` for a static integer `n` (exact repeated multiplication).
    IntegerPow(n: i32; samples 3, -2, 0, 1, 2) => integer_pow "integer_pow" {
        cost: 2,
        float: |x| x.powi(n),
        // Repeated squaring, like LLVM's powi.
        cuda: |c| c.expr("xf_powi(x, (int)p)").param(n as i64).helpers(format!(
            "static __device__ __forceinline__ {t} xf_powi({t} a, int n) {{\n    unsigned int m = n < 0 ? 0u - \
             (unsigned int)n : (unsigned int)n;\n    {t} r = 1;\n    while (true) {{\n        if (m & 1u) r *= \
             a;\n        m >>= 1;\n        if (m == 0u) break;\n        a *= a;\n    }}\n    return n < 0 ? \
             ({t})1 / r : r;\n}}\n",
            t = c.c()
        )),
        int: |x| int_pow(x, n),
        // x^-n truncates to 0 except for |x| = 1.
        cuda: |c| c.expr(format!(
            "(p >= 0) ? ({t})xf_upow(({u})x, (unsigned long long)p) : ((x == ({t})1) ? ({t})1 : \
             (((long long)x == -1LL) ? ((p % 2 == 0) ? ({t})1 : x) : ({t})0))",
            t = c.t(),
            u = c.u()
        )).param(n as i64).helpers(upow_helper(c.u())),
        jvp: |t, x, _y| match n {
            0 => Ok(None),
            1 => Ok(Some(t.clone())),
            _ => {
                let m = n.checked_sub(1).ok_or_else(|| Error::overflow("integer_pow", "the exponent of the derivative overflows i32"))?;
                let d = if n == 2 { x.clone() } else { lax::integer_pow(x, m)? };
                scale(t, lax::mul_scalar(&d, n as f64)?)
            }
        },
        linear: false,
        method: exact powi,
        sample: if n < 0 { Dom::AwayFromZero(0.5, 2.0) } else { Dom::Real(-3.0, 3.0) },
        jax: "jax.lax.integer_pow({x}, {p})",
    }
}

// ---- helpers of the table ---------------------------------------------------

/// The tangent `t * f`.
fn scale(t: &Tensor, f: Tensor) -> Result<Option<Tensor>> {
    Ok(Some(lax::mul(t, &f)?))
}

/// `1 - x^2`.
fn one_minus_square(x: &Tensor) -> Result<Tensor> {
    lax::sub(&lax::ones_like(x)?, &lax::mul(x, x)?)
}

/// `d/du sin(u) / u` near `u = 0` as its Maclaurin polynomial
/// `u (A[0] + u^2 (A[1] + ...))`, `A[m-1] = (-1)^m 2m / (2m + 1)!`: what
/// sinc's tangent is at 0 (see [`sinc_tangent`]).
const SINC_SLOPE: [f64; 6] =
    [-1.0 / 3.0, 1.0 / 30.0, -1.0 / 840.0, 1.0 / 45_360.0, -1.0 / 3_991_680.0, 1.0 / 518_918_400.0];

/// The tangent of `y = sinc(x)` (JAX's `jnp.sinc`: `where(x == 0, 1,
/// sin(s) / s)` with `s = pi x` made 1 at 0). Away from 0 it is the
/// derivative of `sin(s) / s`, `ts (cos(s) - y) / s` with `ts = pi t`. At 0,
/// JAX's `_sinc_maclaurin` (a custom_jvp whose `k`-th derivative at 0 is
/// the `k`-th Maclaurin coefficient of `sin(u) / u`) gives 0, then
/// `-pi^2 / 3` as the second derivative, and so on; here the Maclaurin
/// polynomial of `d/du sin(u) / u` ([`SINC_SLOPE`], degree 11) times `pi t`
/// does, so every derivative at 0 agrees with JAX's through the 13th (the
/// odd ones are 0; the even ones from the 14th on are 0 here, not JAX's).
/// Each branch is evaluated where the other is taken at a point that keeps
/// it finite (`s = 1`, `u = 0`), so no unused derivative is NaN.
fn sinc_tangent(t: &Tensor, x: &Tensor, y: &Tensor) -> Result<Option<Tensor>> {
    let zeros = lax::zeros_like(x)?;
    let zero = lax::eq(x, &zeros)?;
    let pi_x = lax::mul_scalar(x, PI)?;
    let safe = lax::select(&zero, &lax::ones_like(x)?, &pi_x)?;
    let tp = lax::mul_scalar(t, PI)?;
    let ts = lax::select(&zero, &lax::zeros_like(t)?, &tp)?;
    let away = lax::div(&lax::mul(&ts, &lax::sub(&lax::cos(&safe)?, y)?)?, &safe)?;
    let u = lax::select(&zero, &pi_x, &zeros)?;
    let u2 = lax::mul(&u, &u)?;
    let mut p = lax::full_like(x, SINC_SLOPE[SINC_SLOPE.len() - 1])?;
    for &a in SINC_SLOPE.iter().rev().skip(1) {
        p = lax::add_scalar(&lax::mul(&p, &u2)?, a)?;
    }
    let at_zero = lax::mul(&lax::mul(&u, &p)?, &tp)?;
    Ok(Some(lax::select(&zero, &at_zero, &away)?))
}

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

/// IEEE roundeven (as CUDA's `rint`, numpy's `round`): ties to the even
/// neighbour, the sign kept (`-0.5` gives `-0`).
/// The tangent of `y = erfinv(x)` (both expansions), as JAX:
/// `sqrt(pi)/2 * (t * e^{y^2})`.
fn erf_inv_tangent(t: &Tensor, x: &Tensor, y: &Tensor) -> Result<Option<Tensor>> {
    Ok(Some(lax::mul(&lax::full_like(x, PI.sqrt() / 2.0)?, &lax::mul(t, &lax::exp(&lax::mul(y, y)?)?)?)?))
}

fn round_half_even<R: Real>(x: R) -> R {
    x.via(f32::round_ties_even, f64::round_ties_even)
}

/// `x^n` on integers: wrapping for n >= 0; x^-n truncates to 0 except for
/// |x| = 1 (and 0^-n, which we define as 0).
fn int_pow<T: IntOps>(x: T, n: i32) -> T {
    if n >= 0 {
        x.pow_(n as u32)
    } else if x == T::ONE {
        x
    } else if x.to_i64() == -1 {
        if n % 2 == 0 {
            T::ONE
        } else {
            x
        }
    } else {
        T::ZERO
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

// ---- the family ----------------------------------------------------------------

/// Elementwise unary op.
pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    bind1(&Prim::Unary(op), std::slice::from_ref(x))
}

impl UnaryOp {
    /// Which dtypes the op accepts: those it has a kernel for.
    pub fn accepts(self, d: DType) -> bool {
        self.classes().accepts(d)
    }

    /// The dtypes the op accepts.
    pub fn dtypes(self) -> Vec<DType> {
        DType::ALL.into_iter().filter(|&d| self.accepts(d)).collect()
    }
}

/// Validates the operand of a unary op (the output is its aval).
#[inline]
fn check_unary(op: UnaryOp, ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity(op.name(), ins, 1)?;
    let x = &ins[0];
    if !op.accepts(x.dtype) {
        let what = format!("needs a {} operand", op.classes().needs());
        return Err(Error::dtype(op.name(), what, &[x.dtype]));
    }
    Ok(())
}

fn lower_unary(op: UnaryOp, x: &Array) -> Result<Array> {
    let refused = || Error::dtype(op.name(), "has no kernel for this dtype", &[x.dtype]);
    let out = x.with_cpu(op.name(), |b, l| {
        Some(match b {
            CpuBuffer::F32(v) => CpuBuffer::F32(float_kernel(op, v, l)?),
            CpuBuffer::F64(v) => CpuBuffer::F64(float_kernel(op, v, l)?),
            CpuBuffer::F16(v) => CpuBuffer::F16(float_kernel(op, v, l)?),
            CpuBuffer::BF16(v) => CpuBuffer::BF16(float_kernel(op, v, l)?),
            CpuBuffer::I32(v) => CpuBuffer::I32(int_kernel(op, v, l)?),
            CpuBuffer::I64(v) => CpuBuffer::I64(int_kernel(op, v, l)?),
            CpuBuffer::U32(v) => CpuBuffer::U32(int_kernel(op, v, l)?),
            CpuBuffer::Bool(v) => CpuBuffer::Bool(bool_kernel(op, v, l)?),
        })
    })?;
    Ok(Array::from_cpu(out.ok_or_else(refused)?, x.shape().clone()))
}

impl From<UnaryOp> for Prim {
    fn from(op: UnaryOp) -> Prim {
        Prim::Unary(op)
    }
}

impl Family for UnaryOp {
    type Kind = UnaryKind;
    const KINDS: &'static [UnaryKind] = UnaryKind::ALL;

    fn kind(&self) -> UnaryKind {
        UnaryOp::kind(*self)
    }

    fn name(&self) -> &'static str {
        UnaryOp::name(*self)
    }

    fn props(&self) -> Props {
        // The linear ones (neg) make a new tensor.
        Props::ELEMENTWISE.fresh()
    }

    fn fmt_params(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnaryOp::IntegerPow(n) => write!(f, "[y={n}]"),
            UnaryOp::Polygamma(n) => write!(f, "[m={n}]"),
            _ => Ok(()),
        }
    }

    #[inline]
    fn check(&self, ins: &[AvalRef<'_>]) -> Result<()> {
        check_unary(*self, ins)
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        check_unary(*self, ins)?;
        Ok(smallvec![ins[0].to_owned()])
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(lower_unary(*self, ins[0]))
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        super::one(backend.map(self.name(), cuda_expr(*self, ins[0].dtype), &ins[..1], ins[0].dtype))
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        let x = &primals[0];
        let y = bind1(prim, primals)?;
        let t = match &tangents[0] {
            Some(t) if x.dtype().is_float() => tangent(*self, t, x, &y)?,
            _ => None,
        };
        Ok((smallvec![y], smallvec![t]))
    }

    fn transpose(&self, cts: &[Option<Tensor>], _args: &[LinearArg]) -> Result<Cotangents> {
        if self.is_linear() {
            Ok(smallvec![cts[0].as_ref().map(|c| unary(*self, c)).transpose()?])
        } else {
            Err(Error::transform(self.name(), format!("{} is not linear, so it cannot be transposed", self.name())))
        }
    }

    fn batch(&self, prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        super::batching::batch_elementwise(prim, ins, bdims, axis)
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        UnaryOp::examples().into_iter().map(unary_sample).collect()
    }

    fn cuda_kernels(d: DType) -> Vec<Kernel> {
        let mut seen = std::collections::HashSet::new();
        UnaryOp::examples()
            .into_iter()
            .filter(|op| seen.insert(op.kind()))
            .filter_map(|op| cuda_expr(op, d).map(|e| map_kernel(&e.map_op(op.name(), false), &[d], d)))
            .collect()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::elementwise_map!();

    fn cpu_tile(&self, ins: &[Tile<'_>], out: TileMut<'_>) -> bool {
        match (ins, out) {
            ([Tile::F32(x)], TileMut::F32(o)) => float_slice(*self, x, o),
            ([Tile::F64(x)], TileMut::F64(o)) => float_slice(*self, x, o),
            _ => false,
        }
    }

    fn cuda_map_op(&self, ins: &[DType]) -> Option<MapOp> {
        match ins {
            [d] => cuda_expr(*self, *d).map(|e| e.map_op(self.name(), false)),
            _ => None,
        }
    }
}

/// The registry entry of one op: its dtypes, its table domain for floats,
/// small integers otherwise.
fn unary_sample(op: UnaryOp) -> Sample {
    let name = match op {
        UnaryOp::IntegerPow(n) => format!("integer_pow({n})"),
        UnaryOp::Polygamma(n) => format!("polygamma({n})"),
        _ => op.name().to_string(),
    };
    let linear = if op.is_linear() { vec![0] } else { vec![] };
    let smooth = op.classes().float;
    let float_dom = op.sample_dom();
    let dtypes: Vec<DType> =
        FLOATS.iter().chain(&INTS).chain(&[DType::Bool]).copied().filter(|&d| op.accepts(d)).collect();
    Sample::new(name, dtypes, linear, smooth, move |g, d| {
        let shape = g.shape(3, 0, 3);
        let dom = if d.is_float() { float_dom } else { generic_dom(d) };
        Case::new(op, vec![(shape, d, dom)])
    })
}
