//! Elementwise binary primitives on equal shapes and dtypes (arithmetic and
//! logic): one table entry per op naming its CPU and CUDA expressions side
//! by side (`binary_table!`), then the shape rule, JVP, transpose, batching
//! (elementwise) and samples.

use super::batching::BatchAxis;
use super::cuda_c::{upow_helper, CudaCx, CudaExpr};
use super::jit;
use super::jit::{Tile, TileMut};
use super::sample::{every_dtype, Case, Dom, Sample};
use super::{check_arity, check_same_dtypes, check_same_shapes, Family, OnesTranspose, Props};
use crate::array::Array;
use crate::error::{Error, OrRaise, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use xform_kernels::cpu::elementwise::map2;
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::MapOp;
use xform_kernels::cuda_source::{map_kernel, Kernel};
use xform_kernels::{CpuBuffer, DType, Element, Float, Layout, Real};

/// One arm of the table's transpose: `none` (not linear) or a closure of
/// the output's cotangent and the operands.
macro_rules! binary_transpose {
    ($op:ident, $ct:ident, $args:ident, none) => {
        Err(nonlinear($op.name()))
    };
    ($op:ident, $ct:ident, $args:ident, |$c:ident, $a:ident| $body:expr) => {{
        let ($c, $a) = ($ct, $args);
        $body
    }};
}

/// One `Tensor` method of a binary op, by its method kind.
macro_rules! binary_method {
    (none, $v:ident, [$(#[$doc:meta])*]) => {};
    (exact $m:ident, $v:ident, [$(#[$doc:meta])*]) => {
        $(#[$doc])*
        ///
        /// Broadcasting, with numpy's promotion.
        #[track_caller]
        pub fn $m(&self, other: &Tensor) -> Tensor {
            crate::promote::binary(BinaryOp::$v, self, other).or_raise()
        }
    };
    (float $m:ident, $v:ident, [$(#[$doc:meta])*]) => {
        $(#[$doc])*
        ///
        /// Broadcasting, with numpy's promotion; integer and bool operands
        /// are converted to f32 first.
        #[track_caller]
        pub fn $m(&self, other: &Tensor) -> Tensor {
            crate::promote::float_binary(BinaryOp::$v, self, other).or_raise()
        }
    };
}

/// Generates the binary family from its table, one entry per op as the
/// unary table (`unary_table.rs`) does: the enum with its names and `ALL`,
/// `lax` functions, the CPU kernels per dtype class and the CUDA
/// expression beside each, the accepted dtypes (those with a kernel), the
/// JVP, the transpose, the properties, the `Tensor` method and the
/// registry sample. An entry:
///
/// ```text
/// Variant => lax_fn "printed_name" {
///     cost: relative cost per element (1 = an add),
///     float: |x, y| CPU expression (R: Real), cuda: |c| CudaExpr,   (optional group)
///     int:   |x, y| CPU expression (T: IntBinary), cuda: |c| CudaExpr, (optional group)
///     bool:  |x, y| CPU expression on bools, cuda: |c| CudaExpr,     (optional group)
///     jvp: |a, b, out, ta, tb| the tangent of out = op(a, b) (float operands),
///          Result<Option<Tensor>>; `term(t, f)` is f(t) where t is not a
///          symbolic zero,
///     transpose: [none] | [|ct, args| Result<Cotangents>],
///     linear: [the operands it is linear in, where the others are constant],
///     props: Props,
///     method: exact name | float name (ints and bools convert to f32 first)
///             | none (an operator, or a method written by hand),
///     sample: |d| the operands' (Dom, Dom) for dtype d,
///     jax: "the op in JAX, as Python over {a} and {b}",
/// }
/// ```
///
/// A group without its CUDA expression, or an entry without one of the
/// other fields, does not compile.
macro_rules! binary_table {
    ($(
        $(#[$doc:meta])*
        $v:ident => $fname:ident $name:literal {
            cost: $cost:expr,
            $( float: |$fx:ident, $fy:ident| $fbody:expr, cuda: |$fc:ident| $fcuda:expr, )?
            $( int: |$ix:ident, $iy:ident| $ibody:expr, cuda: |$ic:ident| $icuda:expr, )?
            $( bool: |$bx:ident, $by:ident| $bbody:expr, cuda: |$bc:ident| $bcuda:expr, )?
            jvp: |$ja:ident, $jb:ident, $jo:ident, $jta:ident, $jtb:ident| $jvp:expr,
            transpose: [$($tr:tt)*],
            linear: [$($lin:literal),*],
            props: $props:expr,
            method: $mkind:ident $($mname:ident)?,
            sample: |$sd:ident| $sample:expr,
            jax: $jax:literal $(,)?
        }
    )*) => {
        crate::op_enum! {
            /// The elementwise binary primitives (one table entry each).
            pub enum BinaryOp, api = binary {
                $( $(#[$doc])* $v => $name fn $fname ),*
            }
        }

        impl BinaryOp {
            /// Rough cost per element relative to an add.
            fn cost(self) -> usize {
                match self { $( BinaryOp::$v => $cost ),* }
            }

            /// The tangent of `out = op(a, b)` along `ta`, `tb` (float
            /// operands; `None`: a symbolic zero).
            #[allow(unused_variables)]
            fn tangent(
                self,
                a: &Tensor,
                b: &Tensor,
                out: &Tensor,
                ta: &Option<Tensor>,
                tb: &Option<Tensor>,
            ) -> Result<Option<Tensor>> {
                match self {
                    $( BinaryOp::$v => {
                        let ($ja, $jb, $jo, $jta, $jtb) = (a, b, out, ta, tb);
                        $jvp
                    } ),*
                }
            }

            /// The cotangents of the linear operands given the output's
            /// cotangent `ct`.
            #[allow(unused_variables)]
            fn transpose_ct(self, ct: &Tensor, args: &[LinearArg]) -> Result<Cotangents> {
                let op = self;
                match self { $( BinaryOp::$v => binary_transpose!(op, ct, args, $($tr)*) ),* }
            }

            /// The operands the op is linear in (the others constant).
            fn linear_operands(self) -> Vec<usize> {
                match self { $( BinaryOp::$v => vec![$($lin),*] ),* }
            }

            /// The op's properties.
            fn table_props(self) -> Props {
                match self { $( BinaryOp::$v => $props ),* }
            }

            /// The op in JAX, as Python: a template over the operands `{a}`
            /// and `{b}` (the JAX differential test prints it; a new op is
            /// compared with JAX from this alone).
            pub fn jax(self) -> &'static str {
                match self { $( BinaryOp::$v => $jax ),* }
            }

            /// The registry's value domains of the operands for dtype `d`
            /// (the JAX differential test maps its values into them too).
            pub fn sample_doms(self, d: DType) -> (Dom, Dom) {
                match self { $( BinaryOp::$v => { let $sd = d; $sample } ),* }
            }

            /// The dtype classes with a kernel: what the op accepts.
            pub fn classes(self) -> super::DtypeClasses {
                match self {
                    $( BinaryOp::$v => super::DtypeClasses {
                        float: present!($($fx)?),
                        int: present!($($ix)?),
                        bool: present!($($bx)?),
                    } ),*
                }
            }
        }

        /// The float kernel of `op`, or `None` where it has none.
        #[allow(unreachable_code)]
        fn float_kernel<T: Float<Compute = R>, R: Real>(
            op: BinaryOp, a: &[T], la: &Layout, b: &[T], lb: &Layout,
        ) -> Option<Vec<T>> {
            let par = Par::for_work(la.numel(), op.cost());
            match op {
                $( BinaryOp::$v => {
                    $( return Some(map2(a, la, b, lb, par, |p: T, q: T| {
                        let ($fx, $fy): (R, R) = (p.up(), q.up());
                        T::down($fbody)
                    })); )?
                    None
                } )*
            }
        }

        /// `out[i] = op(a[i], b[i])` over contiguous slices of a float
        /// dtype: the very expression `float_kernel` maps, for the jit's
        /// fused loops. `false` where `op` has no float kernel.
        #[allow(unreachable_code)]
        pub(crate) fn float_slice<T: Float<Compute = R>, R: Real>(op: BinaryOp, a: &[T], b: &[T], out: &mut [std::mem::MaybeUninit<T>]) -> bool {
            match op {
                $( BinaryOp::$v => {
                    $(
                        xform_kernels::cpu::elementwise::slice2(a, b, out, &|p: T, q: T| {
                            let ($fx, $fy): (R, R) = (p.up(), q.up());
                            T::down($fbody)
                        });
                        return true;
                    )?
                    false
                } )*
            }
        }

        /// The integer kernel of `op`, or `None` where it has none.
        #[allow(unreachable_code)]
        fn int_kernel<T: IntBinary>(op: BinaryOp, a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Option<Vec<T>> {
            let par = Par::for_work(la.numel(), op.cost());
            match op {
                $( BinaryOp::$v => {
                    $( return Some(map2(a, la, b, lb, par, |$ix: T, $iy: T| $ibody)); )?
                    None
                } )*
            }
        }

        /// The bool kernel of `op`, or `None` where it has none.
        #[allow(unreachable_code)]
        fn bool_kernel(op: BinaryOp, a: &[bool], la: &Layout, b: &[bool], lb: &Layout) -> Option<Vec<bool>> {
            let par = Par::for_work(la.numel(), op.cost());
            match op {
                $( BinaryOp::$v => {
                    $( return Some(map2(a, la, b, lb, par, |$bx: bool, $by: bool| $bbody)); )?
                    None
                } )*
            }
        }

        /// The CUDA form of `op` on dtype `d` (the semantics of the CPU
        /// expression beside it in the table), or `None` where the shape
        /// rule refuses `d`.
        #[allow(unreachable_code, unused_variables)]
        pub fn cuda_expr(op: BinaryOp, d: DType) -> Option<CudaExpr> {
            let cx = CudaCx::new(d);
            match op {
                $( BinaryOp::$v => {
                    if d.is_float() {
                        $( let $fc = cx; return Some($fcuda); )?
                    } else if d == DType::Bool {
                        $( let $bc = cx; return Some($bcuda); )?
                    } else {
                        $( let $ic = cx; return Some($icuda); )?
                    }
                    None
                } )*
            }
        }

        impl Tensor {
            $( binary_method!($mkind $($mname)?, $v, [$(#[$doc])*]); )*
        }
    };
}

binary_table! {
    /// `a + b`.
    Add => add "add" {
        cost: 1,
        float: |x, y| x + y, cuda: |c| c.expr("x + y"),
        int: |x, y| x.add_(y), cuda: |c| c.expr(format!("({t})(({u})x + ({u})y)", t = c.t(), u = c.u())),
        jvp: |_a, _b, _out, ta, tb| lax::add_any(ta.clone(), tb.clone()),
        transpose: [|ct, args| Ok(smallvec![linear_ct(&args[0], ct.clone()), linear_ct(&args[1], ct.clone())])],
        linear: [0, 1],
        // the cotangent passes on to each operand: ones stay ones
        props: Props::ELEMENTWISE.ones(OnesTranspose::Ones),
        method: none,
        sample: |d| default_doms(d),
        jax: "({a} + {b})",
    }
    /// `a - b`.
    Sub => sub "sub" {
        cost: 1,
        float: |x, y| x - y, cuda: |c| c.expr("x - y"),
        int: |x, y| x.sub_(y), cuda: |c| c.expr(format!("({t})(({u})x - ({u})y)", t = c.t(), u = c.u())),
        jvp: |_a, _b, _out, ta, tb| lax::add_any(ta.clone(), term(tb, lax::neg)?),
        transpose: [|ct, args| Ok(smallvec![linear_ct(&args[0], ct.clone()), lin_map(&args[1], || lax::neg(ct))?])],
        linear: [0, 1],
        props: Props::ELEMENTWISE,
        method: none,
        sample: |d| default_doms(d),
        jax: "({a} - {b})",
    }
    /// `a * b`.
    Mul => mul "mul" {
        cost: 1,
        float: |x, y| x * y, cuda: |c| c.expr("x * y"),
        int: |x, y| x.mul_(y), cuda: |c| c.expr(format!("({t})(({u})x * ({u})y)", t = c.t(), u = c.u())),
        jvp: |a, b, _out, ta, tb| lax::add_any(term(ta, |t| lax::mul(t, b))?, term(tb, |t| lax::mul(a, t))?),
        transpose: [|ct, args| match (&args[0], &args[1]) {
            (LinearArg::Linear(_), LinearArg::Const(b)) => Ok(smallvec![Some(lax::mul(ct, b)?), None]),
            (LinearArg::Const(a), LinearArg::Linear(_)) => Ok(smallvec![None, Some(lax::mul(a, ct)?)]),
            _ => Err(nonlinear("mul")),
        }],
        linear: [0, 1],
        // `1 * c` is `c`
        props: Props::ELEMENTWISE.fresh().ones(OnesTranspose::Constant),
        method: none,
        sample: |d| default_doms(d),
        jax: "({a} * {b})",
    }
    /// `a / b` (integers truncate toward zero; x / 0 is -1, or the largest
    /// u32, as in XLA; MIN / -1 wraps).
    Div => div "div" {
        cost: 1,
        float: |x, y| x / y, cuda: |c| c.expr("x / y"),
        int: |x, y| x.div_(y),
        cuda: |c| if c.signed() {
            c.expr(format!("(y == 0) ? ({t})-1 : ((y == -1) ? ({t})(({u})0 - ({u})x) : x / y)", t = c.t(), u = c.u()))
        } else {
            c.expr("(y == 0u) ? 0xffffffffu : x / y")
        },
        // d(a/b) = da / b - db * (out / b)
        jvp: |a, b, out, ta, tb| {
            let db = term(tb, |t| lax::mul(t, &lax::neg(&lax::div(out, b)?)?))?;
            lax::add_any(term(ta, |t| lax::div(t, b))?, db)
        },
        transpose: [|ct, args| match (&args[0], &args[1]) {
            (LinearArg::Linear(_), LinearArg::Const(b)) => Ok(smallvec![Some(lax::div(ct, b)?), None]),
            _ => Err(nonlinear("div")),
        }],
        linear: [0],
        props: Props::ELEMENTWISE.fresh(),
        method: none,
        sample: |d| divisor_doms(d),
        jax: "({a} / {b})",
    }
    /// `a ^ b` (integers: wrapping for b >= 0; b < 0 truncates to 0 but for
    /// |a| = 1). Its derivative in `a` is 0 at `a = b = 0` (as PyTorch; JAX
    /// gives NaN).
    Pow => pow "pow" {
        cost: 8,
        float: |x, y| x.powf(y), cuda: |c| c.expr(format!("{}(x, y)", c.math("pow"))),
        int: |x, y| x.pow_(y),
        cuda: |c| c.expr("xf_ipow(x, y)").helpers(format!(
            "{}static __device__ __forceinline__ {t} xf_ipow({t} x, {t} y) {{\n    const long long e = \
             (long long)y;\n    if (e >= 0) return ({t})xf_upow(({u})x, e > 4294967295LL ? 4294967295ull : \
             (unsigned long long)e);\n    if ((long long)x == 1LL) return ({t})1;\n    if ((long long)x == \
             -1LL) return (e % 2 == 0) ? ({t})1 : x;\n    return ({t})0;\n}}\n",
            upow_helper(c.u()),
            t = c.t(),
            u = c.u()
        )),
        // d/da = b a^(b-1); d/db = out ln a (0 where a == 0, as JAX). The
        // factor b is kept outside the guard, so that d/db of d/da at b = 0
        // is a^-1 (JAX's testPowSecondDerivative); only a^(b-1) is guarded,
        // where a == b == 0 (an infinite power times a zero factor), which
        // keeps the gradient 0 at pow(0, 0). The guarded power is taken of a
        // safe base (1 there), so that its own derivative, which reverse
        // mode multiplies by the select's zero cotangent, is finite (0 * inf
        // would be NaN).
        jvp: |a, b, out, ta, tb| {
            let zero = lax::zeros_like(a)?;
            let da = term(ta, |t| {
                let both_0 = lax::and(&lax::eq(a, &zero)?, &lax::eq(b, &zero)?)?;
                let safe_a = lax::select(&both_0, &lax::ones_like(a)?, a)?;
                let p = lax::pow(&safe_a, &lax::add_scalar(b, -1.0)?)?;
                lax::mul(t, &lax::mul(b, &lax::select(&both_0, &zero, &p)?)?)
            })?;
            let db = term(tb, |t| {
                let a_is_0 = lax::eq(a, &zero)?;
                let safe_a = lax::select(&a_is_0, &lax::ones_like(a)?, a)?;
                let f = lax::select(&a_is_0, &zero, &lax::mul(out, &lax::log(&safe_a)?)?)?;
                lax::mul(t, &f)
            })?;
            lax::add_any(da, db)
        },
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: exact pow,
        sample: |d| if d.is_float() {
            (Dom::Real(0.5, 2.0), Dom::Real(-2.0, 2.0))
        } else {
            (Dom::Small(if d == DType::U32 { 0 } else { -3 }, 3), Dom::Small(0, 4))
        },
        jax: "jnp.power({a}, {b})",
    }
    /// Elementwise maximum (NaN propagates).
    Max => max "max" {
        cost: 1,
        float: |x, y| if x.is_nan() || y.is_nan() { x + y } else if x >= y { x } else { y },
        cuda: |c| c.expr("(x != x || y != y) ? x + y : (x >= y ? x : y)"),
        int: |x, y| if x >= y { x } else { y }, cuda: |c| c.expr("(x >= y ? x : y)"),
        jvp: |a, b, _out, ta, tb| tie_split(true, a, b, ta, tb),
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: exact maximum,
        sample: |d| default_doms(d),
        jax: "jnp.maximum({a}, {b})",
    }
    /// Elementwise minimum (NaN propagates).
    Min => min "min" {
        cost: 1,
        float: |x, y| if x.is_nan() || y.is_nan() { x + y } else if x <= y { x } else { y },
        cuda: |c| c.expr("(x != x || y != y) ? x + y : (x <= y ? x : y)"),
        int: |x, y| if x <= y { x } else { y }, cuda: |c| c.expr("(x <= y ? x : y)"),
        jvp: |a, b, _out, ta, tb| tie_split(false, a, b, ta, tb),
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: exact minimum,
        sample: |d| default_doms(d),
        jax: "jnp.minimum({a}, {b})",
    }
    /// Remainder with the sign of `a` (C and Rust `%`, fmod for floats;
    /// x % 0 is x as in XLA).
    Rem => rem "rem" {
        cost: 1,
        float: |x, y| x % y, cuda: |c| c.expr(format!("{}(x, y)", c.math("fmod"))),
        int: |x, y| x.rem_(y),
        cuda: |c| if c.signed() {
            c.expr(format!("(y == 0) ? x : ((y == -1) ? ({})0 : x % y)", c.t()))
        } else {
            c.expr("(y == 0u) ? x : x % y")
        },
        // a = q b + r with q = trunc(a / b): dr = da - q db
        jvp: |a, b, out, ta, tb| {
            let q = lax::div(&lax::sub(a, out)?, b)?;
            lax::add_any(ta.clone(), term(tb, |t| lax::mul(t, &lax::neg(&q)?))?)
        },
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: none,
        sample: |d| divisor_doms(d),
        jax: "jnp.fmod({a}, {b})",
    }
    /// `atan2(a, b)`.
    Atan2 => atan2 "atan2" {
        cost: 8,
        float: |x, y| x.atan2(y), cuda: |c| c.expr(format!("{}(x, y)", c.math("atan2"))),
        jvp: |a, b, _out, ta, tb| {
            let denom = lax::add(&lax::mul(a, a)?, &lax::mul(b, b)?)?;
            let da = term(ta, |t| lax::mul(t, &lax::div(b, &denom)?))?;
            let db = term(tb, |t| lax::mul(t, &lax::neg(&lax::div(a, &denom)?)?))?;
            lax::add_any(da, db)
        },
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: exact atan2,
        sample: |_d| (Dom::AwayFromZero(0.2, 2.0), Dom::Real(-2.0, 2.0)),
        jax: "jnp.arctan2({a}, {b})",
    }
    /// `a ln(b)`, 0 where `a = 0` unless `b` is NaN
    /// (`jax.scipy.special.xlogy`, `torch.xlogy`: `xlogy(0, 0)` is 0), so
    /// `p.xlogy(&p)` is the entropy term `p ln p` with 0 at `p = 0`. Its
    /// derivatives are JAX's (`a_dot ln(b) + b_dot a / b`).
    Xlogy => xlogy "xlogy" {
        cost: 8,
        float: |x, y| if x != R::ZERO || y.is_nan() { x * y.ln() } else { R::ZERO },
        cuda: |c| c.expr(format!("(x != ({t})0 || y != y) ? x * {log}(y) : ({t})0", t = c.c(), log = c.math("log"))),
        // JAX (the custom_jvp of jax.scipy.special.xlogy): a_dot * log(b) + b_dot * a / b
        jvp: |a, b, _out, ta, tb| {
            let da = term(ta, |t| lax::mul(t, &lax::log(b)?))?;
            let db = term(tb, |t| lax::div(&lax::mul(t, a)?, b))?;
            lax::add_any(da, db)
        },
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: float xlogy,
        sample: |_d| (Dom::Real(-3.0, 3.0), Dom::Real(0.2, 4.0)),
        jax: "jax.scipy.special.xlogy({a}, {b})",
    }
    /// `a ln(1 + b)`, 0 where `a = 0` unless `b` is NaN
    /// (`jax.scipy.special.xlog1py`: `xlog1py(0, -1)` is 0).
    Xlog1py => xlog1py "xlog1py" {
        cost: 8,
        float: |x, y| if x != R::ZERO || y.is_nan() { x * y.ln_1p() } else { R::ZERO },
        cuda: |c| c.expr(format!("(x != ({t})0 || y != y) ? x * {log1p}(y) : ({t})0", t = c.c(), log1p = c.math("log1p"))),
        // JAX (the custom_jvp of jax.scipy.special.xlog1py): a_dot * log1p(b) + b_dot * a / (1 + b)
        jvp: |a, b, _out, ta, tb| {
            let da = term(ta, |t| lax::mul(t, &lax::log1p(b)?))?;
            let db = term(tb, |t| lax::div(&lax::mul(t, a)?, &lax::add_scalar(b, 1.0)?))?;
            lax::add_any(da, db)
        },
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: float xlog1py,
        sample: |_d| (Dom::Real(-3.0, 3.0), Dom::Real(-0.8, 3.0)),
        jax: "jax.scipy.special.xlog1py({a}, {b})",
    }
    /// `ln(e^a + e^b)` without overflow (`jnp.logaddexp`): `max(a, b) +
    /// ln(1 + e^-|a - b|)`, and `a + b` where `a - b` is NaN (a NaN, or
    /// infinities of one sign: `logaddexp(-inf, -inf)` is -inf).
    Logaddexp => logaddexp "logaddexp" {
        cost: 16,
        float: |x, y| logaddexp(x, y),
        cuda: |c| c.expr("xf_logaddexp(x, y)").helpers(format!(
            "static __device__ __forceinline__ {t} xf_logaddexp({t} x, {t} y) {{\n    const {t} d = x - y;\n    \
             if (d != d) return x + y;\n    return (x >= y ? x : y) + {log1p}({exp}(-{fabs}(d)));\n}}\n",
            t = c.c(),
            log1p = c.math("log1p"),
            exp = c.math("exp"),
            fabs = c.math("fabs")
        )),
        // JAX (the custom_jvp of lax.logaddexp): t_a * exp(r(a) - r(out)) + t_b * exp(r(b) - r(out)),
        // where r replaces +inf by 0 (logaddexp(inf, inf) has derivatives 1 and 1, not NaN).
        jvp: |a, b, out, ta, tb| {
            let r = |v: &Tensor| -> Result<Tensor> {
                let inf = lax::eq(v, &lax::full_like(v, f64::INFINITY)?)?;
                lax::select(&inf, &lax::zeros_like(v)?, v)
            };
            let r_out = r(out)?;
            let da = term(ta, |t| lax::mul(t, &lax::exp(&lax::sub(&r(a)?, &r_out)?)?))?;
            let db = term(tb, |t| lax::mul(t, &lax::exp(&lax::sub(&r(b)?, &r_out)?)?))?;
            lax::add_any(da, db)
        },
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: float logaddexp,
        sample: |d| default_doms(d),
        jax: "jnp.logaddexp({a}, {b})",
    }
    /// `sqrt(a^2 + b^2)` without overflow or underflow (`jnp.hypot`,
    /// `torch.hypot`; C's `hypot`): `hypot(1e200, 1e200)` is finite in f64.
    /// Its gradient at `(0, 0)` is `(1/2, 1/2)`, as JAX's.
    Hypot => hypot "hypot" {
        cost: 8,
        float: |x, y| x.via2(y, f32::hypot, f64::hypot), cuda: |c| c.expr(format!("{}(x, y)", c.math("hypot"))),
        // d hypot(a, b) = t_a (a / h) + t_b (b / h). At h = 0, JAX's formula
        // (hypot is max(|a|, |b|) there: a tie of max, and abs' derivative 1 at 0)
        // gives (t_a + t_b) / 2, and so does this; h is made 1 there so that no
        // derivative of the unused quotients is NaN. Elsewhere JAX's autodiff of
        // its formula differs only at ties |a| = |b| (its max and min split the
        // tangent, so its second derivatives there are 0), from |a| ~ 1e154 on (its
        // `b * a^-2` underflows), and at an infinite leg (JAX's jvp gives 0, its
        // grad NaN; this gives NaN): there this is the true derivative (PyTorch's).
        jvp: |a, b, out, ta, tb| {
            let at_zero = lax::eq(out, &lax::zeros_like(out)?)?;
            let safe = lax::select(&at_zero, &lax::ones_like(out)?, out)?;
            let half = lax::full_like(out, 0.5)?;
            let weight = |v: &Tensor| -> Result<Tensor> { lax::select(&at_zero, &half, &lax::div(v, &safe)?) };
            let da = term(ta, |t| lax::mul(t, &weight(a)?))?;
            let db = term(tb, |t| lax::mul(t, &weight(b)?))?;
            lax::add_any(da, db)
        },
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: float hypot,
        // away from the origin, where hypot has its kink
        sample: |_d| (Dom::AwayFromZero(0.2, 3.0), Dom::Real(-3.0, 3.0)),
        jax: "jnp.hypot({a}, {b})",
    }
    /// Logical (bool) or bitwise (integer) and.
    And => and "and" {
        cost: 1,
        int: |x, y| x.and_(y), cuda: |c| c.expr("x & y"),
        bool: |x, y| x & y, cuda: |c| c.expr("x && y"),
        jvp: |_a, _b, _out, _ta, _tb| Ok(None),
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: exact logical_and,
        sample: |d| default_doms(d),
        jax: "jnp.logical_and({a}, {b})",
    }
    /// Logical (bool) or bitwise (integer) or.
    Or => or "or" {
        cost: 1,
        int: |x, y| x.or_(y), cuda: |c| c.expr("x | y"),
        bool: |x, y| x | y, cuda: |c| c.expr("x || y"),
        jvp: |_a, _b, _out, _ta, _tb| Ok(None),
        transpose: [none],
        linear: [],
        props: Props::ELEMENTWISE,
        method: exact logical_or,
        sample: |d| default_doms(d),
        jax: "jnp.logical_or({a}, {b})",
    }
}

/// Elementwise binary op on equal shapes and dtypes.
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    bind1(&Prim::Binary(op), &[a.clone(), b.clone()])
}

impl BinaryOp {
    /// Which dtypes the op accepts: those it has a kernel for.
    pub fn accepts(self, d: DType) -> bool {
        self.classes().accepts(d)
    }
}

// ---- shape rules -----------------------------------------------------------

/// Validates the operands of a binary op (the whole shape rule but the
/// output, which is the first operand's aval).
#[inline]
fn check_binary(op: BinaryOp, ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity(op.name(), ins, 2)?;
    check_same_shapes(op.name(), ins)?;
    check_same_dtypes(op.name(), ins)?;
    if !op.accepts(ins[0].dtype) {
        let what = format!("needs {} operands", op.classes().needs());
        return Err(Error::dtype(op.name(), what, &[ins[0].dtype]));
    }
    Ok(())
}

fn shape_binary(op: BinaryOp, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_binary(op, ins)?;
    Ok(smallvec![ins[0].to_owned()])
}

// ---- lowering --------------------------------------------------------------

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

fn lower_binary(op: BinaryOp, a: &Array, b: &Array) -> Result<Array> {
    let ga = a.read();
    let gb = b.read();
    let (ba, bb) = (ga.cpu(op.name())?, gb.cpu(op.name())?);
    let (la, lb) = (&a.layout, &b.layout);
    let out = match (ba, bb) {
        (CpuBuffer::F32(x), CpuBuffer::F32(y)) => float_kernel(op, x, la, y, lb).map(CpuBuffer::F32),
        (CpuBuffer::F64(x), CpuBuffer::F64(y)) => float_kernel(op, x, la, y, lb).map(CpuBuffer::F64),
        (CpuBuffer::F16(x), CpuBuffer::F16(y)) => float_kernel(op, x, la, y, lb).map(CpuBuffer::F16),
        (CpuBuffer::BF16(x), CpuBuffer::BF16(y)) => float_kernel(op, x, la, y, lb).map(CpuBuffer::BF16),
        (CpuBuffer::I32(x), CpuBuffer::I32(y)) => int_kernel(op, x, la, y, lb).map(CpuBuffer::I32),
        (CpuBuffer::I64(x), CpuBuffer::I64(y)) => int_kernel(op, x, la, y, lb).map(CpuBuffer::I64),
        (CpuBuffer::U32(x), CpuBuffer::U32(y)) => int_kernel(op, x, la, y, lb).map(CpuBuffer::U32),
        (CpuBuffer::Bool(x), CpuBuffer::Bool(y)) => bool_kernel(op, x, la, y, lb).map(CpuBuffer::Bool),
        _ => None,
    };
    let out = out.ok_or_else(|| Error::dtype(op.name(), "has no kernel for these dtypes", &[a.dtype, b.dtype]))?;
    Ok(Array::from_cpu(out, a.shape().clone()))
}

// ---- JVP ---------------------------------------------------------------------

fn jvp_binary(op: BinaryOp, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let (a, b) = (&primals[0], &primals[1]);
    let out = bind1(&Prim::Binary(op), primals)?;
    if !a.dtype().is_float() {
        return Ok((smallvec![out], smallvec![None]));
    }
    let t = op.tangent(a, b, &out, &tangents[0], &tangents[1])?;
    Ok((smallvec![out], smallvec![t]))
}

/// `f(t)` where the tangent `t` is not a symbolic zero (each term of a
/// JVP is linear in its tangent).
fn term(t: &Option<Tensor>, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Option<Tensor>> {
    t.as_ref().map(f).transpose()
}

/// The tangent of `max` (`max`) or `min` of `a` and `b`: ties split it
/// evenly (as JAX does).
fn tie_split(max: bool, a: &Tensor, b: &Tensor, ta: &Option<Tensor>, tb: &Option<Tensor>) -> Result<Option<Tensor>> {
    let win = if max { lax::gt(a, b)? } else { lax::lt(a, b)? };
    let tie = lax::eq(a, b)?;
    let one = lax::ones_like(a)?;
    let zero = lax::zeros_like(a)?;
    let half = lax::full_like(a, 0.5)?;
    let wa = lax::select(&win, &one, &lax::select(&tie, &half, &zero)?)?;
    let wb = lax::sub(&one, &wa)?;
    lax::add_any(term(ta, |t| lax::mul(t, &wa))?, term(tb, |t| lax::mul(t, &wb))?)
}

/// `ln(e^x + e^y)` as `jax.lax.logaddexp` computes it.
fn logaddexp<R: Real>(x: R, y: R) -> R {
    let d = x - y;
    if d.is_nan() {
        // a NaN, or infinities of one sign
        x + y
    } else {
        let m = if x >= y { x } else { y };
        m + (-d.abs()).exp().ln_1p()
    }
}

// ---- transpose ---------------------------------------------------------------

fn nonlinear(op: &str) -> Error {
    Error::transform(op, format!("{op} is not linear in these operands, so it cannot be transposed"))
}

fn transpose_binary(op: BinaryOp, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    match &cts[0] {
        None => Ok(smallvec![None, None]),
        Some(ct) => op.transpose_ct(ct, args),
    }
}

/// `ct` for a linear operand, nothing for a constant one.
fn linear_ct(arg: &LinearArg, ct: Tensor) -> Option<Tensor> {
    arg.is_linear().then_some(ct)
}

/// `f()` for a linear operand, nothing for a constant one.
fn lin_map(arg: &LinearArg, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if arg.is_linear() {
        f().map(Some)
    } else {
        Ok(None)
    }
}

// ---- the family ------------------------------------------------------------------

impl From<BinaryOp> for Prim {
    fn from(op: BinaryOp) -> Prim {
        Prim::Binary(op)
    }
}

impl Family for BinaryOp {
    type Kind = BinaryOp;
    const KINDS: &'static [BinaryOp] = BinaryOp::ALL;

    fn kind(&self) -> BinaryOp {
        *self
    }

    fn name(&self) -> &'static str {
        BinaryOp::name(*self)
    }

    fn props(&self) -> Props {
        self.table_props()
    }

    fn fmt_params(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }

    #[inline]
    fn check(&self, ins: &[AvalRef<'_>]) -> Result<()> {
        check_binary(*self, ins)
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        shape_binary(*self, ins)
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(lower_binary(*self, ins[0], ins[1]))
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        super::one(backend.map(self.name(), cuda_expr(*self, ins[0].dtype), &ins[..2], ins[0].dtype))
    }

    fn jvp(&self, _prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        jvp_binary(*self, primals, tangents)
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        transpose_binary(*self, cts, args)
    }

    fn batch(&self, prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        super::batching::batch_elementwise(prim, ins, bdims, axis)
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        BinaryOp::ALL.iter().map(|&op| binary_sample(op)).collect()
    }

    fn cuda_kernels(d: DType) -> Vec<Kernel> {
        BinaryOp::ALL
            .iter()
            .filter_map(|&op| cuda_expr(op, d).map(|e| map_kernel(&e.map_op(op.name(), false), &[d, d], d)))
            .collect()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::elementwise_map!();

    fn cpu_tile(&self, ins: &[Tile<'_>], out: TileMut<'_>) -> bool {
        match (ins, out) {
            ([Tile::F32(a), Tile::F32(b)], TileMut::F32(o)) => float_slice(*self, a, b, o),
            ([Tile::F64(a), Tile::F64(b)], TileMut::F64(o)) => float_slice(*self, a, b, o),
            _ => false,
        }
    }

    fn cuda_map_op(&self, ins: &[DType]) -> Option<MapOp> {
        match ins {
            [a, b] if a == b => cuda_expr(*self, *a).map(|e| e.map_op(self.name(), false)),
            _ => None,
        }
    }
}

/// The registry's sample of `op`: every dtype it accepts, its linear
/// operands and its domains from the table.
fn binary_sample(op: BinaryOp) -> Sample {
    let dtypes: Vec<DType> = every_dtype().into_iter().filter(|&d| op.accepts(d)).collect();
    let smooth = op.classes().float;
    Sample::new(op.name(), dtypes, op.linear_operands(), smooth, move |g, d| {
        let shape = g.shape(3, 0, 3);
        let (da, db) = op.sample_doms(d);
        Case::new(op, vec![(shape.clone(), d, da), (shape, d, db)])
    })
}

/// The operands' domains of most ops: [-3, 3] for floats, small integers
/// (not negative for u32).
fn default_doms(d: DType) -> (Dom, Dom) {
    if d.is_float() {
        (Dom::Real(-3.0, 3.0), Dom::Real(-3.0, 3.0))
    } else if d == DType::Bool {
        (Dom::Small(0, 1), Dom::Small(0, 1))
    } else {
        let lo = if d == DType::U32 { 0 } else { -20 };
        (Dom::Small(lo, 20), Dom::Small(lo, 20))
    }
}

/// The domains of a division or remainder: a divisor away from zero.
fn divisor_doms(d: DType) -> (Dom, Dom) {
    if d.is_float() {
        (Dom::Real(-3.0, 3.0), Dom::AwayFromZero(0.7, 2.0))
    } else {
        (Dom::Small(if d == DType::U32 { 0 } else { -20 }, 20), Dom::Small(1, 7))
    }
}
