//! Elementwise binary primitives on equal shapes and dtypes (arithmetic and
//! logic): one table entry per op naming its CPU and CUDA expressions side
//! by side (`binary_table!`), then the shape rule, JVP, transpose, batching
//! (elementwise) and samples.

use super::cuda_c::{upow_helper, CudaCx, CudaExpr};
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::jit::{Tile, TileMut};
use super::sample::{numeric, Case, Dom, Sample, FLOATS};
use super::{check_arity, check_same_dtypes, check_same_shapes, Family, OnesTranspose, Props};
use crate::array::Array;
use crate::error::{Error, Result};
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

/// Generates the binary family from its table: the enum with its names and
/// `ALL`, `lax` functions, the CPU kernels per dtype class and the CUDA
/// expression beside each, and the accepted dtypes (those with a kernel).
/// Each op's entry: `cost` (per element, 1 = an add), then optional
/// `float`, `int` and `bool` groups, each a CPU expression on `x, y` (in
/// `R: Real`, `T: IntBinary`, `bool`) and its CUDA expression (`c` is a
/// `CudaCx`). A group without its CUDA expression does not compile.
macro_rules! binary_table {
    ($(
        $(#[$doc:meta])*
        $v:ident => $fname:ident $name:literal {
            cost: $cost:expr,
            $( float: |$fx:ident, $fy:ident| $fbody:expr, cuda: |$fc:ident| $fcuda:expr, )?
            $( int: |$ix:ident, $iy:ident| $ibody:expr, cuda: |$ic:ident| $icuda:expr, )?
            $( bool: |$bx:ident, $by:ident| $bbody:expr, cuda: |$bc:ident| $bcuda:expr, )?
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
    };
}

binary_table! {
    /// `a + b`.
    Add => add "add" {
        cost: 1,
        float: |x, y| x + y, cuda: |c| c.expr("x + y"),
        int: |x, y| x.add_(y), cuda: |c| c.expr(format!("({t})(({u})x + ({u})y)", t = c.t(), u = c.u())),
    }
    /// `a - b`.
    Sub => sub "sub" {
        cost: 1,
        float: |x, y| x - y, cuda: |c| c.expr("x - y"),
        int: |x, y| x.sub_(y), cuda: |c| c.expr(format!("({t})(({u})x - ({u})y)", t = c.t(), u = c.u())),
    }
    /// `a * b`.
    Mul => mul "mul" {
        cost: 1,
        float: |x, y| x * y, cuda: |c| c.expr("x * y"),
        int: |x, y| x.mul_(y), cuda: |c| c.expr(format!("({t})(({u})x * ({u})y)", t = c.t(), u = c.u())),
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
    }
    /// Elementwise maximum (NaN propagates).
    Max => max "max" {
        cost: 1,
        float: |x, y| if x.is_nan() || y.is_nan() { x + y } else if x >= y { x } else { y },
        cuda: |c| c.expr("(x != x || y != y) ? x + y : (x >= y ? x : y)"),
        int: |x, y| if x >= y { x } else { y }, cuda: |c| c.expr("(x >= y ? x : y)"),
    }
    /// Elementwise minimum (NaN propagates).
    Min => min "min" {
        cost: 1,
        float: |x, y| if x.is_nan() || y.is_nan() { x + y } else if x <= y { x } else { y },
        cuda: |c| c.expr("(x != x || y != y) ? x + y : (x <= y ? x : y)"),
        int: |x, y| if x <= y { x } else { y }, cuda: |c| c.expr("(x <= y ? x : y)"),
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
    }
    /// `atan2(a, b)`.
    Atan2 => atan2 "atan2" {
        cost: 8,
        float: |x, y| x.atan2(y), cuda: |c| c.expr(format!("{}(x, y)", c.math("atan2"))),
    }
    /// `a ln(b)`, 0 where `a = 0` unless `b` is NaN
    /// (`jax.scipy.special.xlogy`: `xlogy(0, 0)` is 0).
    Xlogy => xlogy "xlogy" {
        cost: 8,
        float: |x, y| if x != R::ZERO || y.is_nan() { x * y.ln() } else { R::ZERO },
        cuda: |c| c.expr(format!("(x != ({t})0 || y != y) ? x * {log}(y) : ({t})0", t = c.c(), log = c.math("log"))),
    }
    /// `a ln(1 + b)`, 0 where `a = 0` unless `b` is NaN
    /// (`jax.scipy.special.xlog1py`: `xlog1py(0, -1)` is 0).
    Xlog1py => xlog1py "xlog1py" {
        cost: 8,
        float: |x, y| if x != R::ZERO || y.is_nan() { x * y.ln_1p() } else { R::ZERO },
        cuda: |c| c.expr(format!("(x != ({t})0 || y != y) ? x * {log1p}(y) : ({t})0", t = c.c(), log1p = c.math("log1p"))),
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
    }
    /// `sqrt(a^2 + b^2)` without overflow or underflow (`jnp.hypot`; C's
    /// `hypot`): `hypot(1e200, 1e200)` is finite in f64.
    Hypot => hypot "hypot" {
        cost: 8,
        float: |x, y| x.via2(y, f32::hypot, f64::hypot), cuda: |c| c.expr(format!("{}(x, y)", c.math("hypot"))),
    }
    /// Logical (bool) or bitwise (integer) and.
    And => and "and" {
        cost: 1,
        int: |x, y| x.and_(y), cuda: |c| c.expr("x & y"),
        bool: |x, y| x & y, cuda: |c| c.expr("x && y"),
    }
    /// Logical (bool) or bitwise (integer) or.
    Or => or "or" {
        cost: 1,
        int: |x, y| x.or_(y), cuda: |c| c.expr("x | y"),
        bool: |x, y| x | y, cuda: |c| c.expr("x || y"),
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
        BinaryOp::Xlogy => {
            // JAX (the custom_jvp of jax.scipy.special.xlogy): a_dot * log(b) + b_dot * a / b
            let da = term(ta, &|t| lax::mul(t, &lax::log(b)?))?;
            let db = term(tb, &|t| lax::div(&lax::mul(t, a)?, b))?;
            lax::add_any(da, db)?
        }
        BinaryOp::Xlog1py => {
            // JAX (the custom_jvp of jax.scipy.special.xlog1py): a_dot * log1p(b) + b_dot * a / (1 + b)
            let da = term(ta, &|t| lax::mul(t, &lax::log1p(b)?))?;
            let db = term(tb, &|t| lax::div(&lax::mul(t, a)?, &lax::add_scalar(b, 1.0)?))?;
            lax::add_any(da, db)?
        }
        BinaryOp::Logaddexp => {
            // JAX (the custom_jvp of lax.logaddexp): t_a * exp(r(a) - r(out)) + t_b * exp(r(b) - r(out)),
            // where r replaces +inf by 0 (logaddexp(inf, inf) has derivatives 1 and 1, not NaN).
            let r = |v: &Tensor| -> Result<Tensor> {
                let inf = lax::eq(v, &lax::full_like(v, f64::INFINITY)?)?;
                lax::select(&inf, &lax::zeros_like(v)?, v)
            };
            let r_out = r(&out)?;
            let da = term(ta, &|t| lax::mul(t, &lax::exp(&lax::sub(&r(a)?, &r_out)?)?))?;
            let db = term(tb, &|t| lax::mul(t, &lax::exp(&lax::sub(&r(b)?, &r_out)?)?))?;
            lax::add_any(da, db)?
        }
        BinaryOp::Hypot => {
            // d hypot(a, b) = t_a (a / h) + t_b (b / h). At h = 0, JAX's formula
            // (hypot is max(|a|, |b|) there: a tie of max, and abs' derivative 1 at 0)
            // gives (t_a + t_b) / 2, and so does this; h is made 1 there so that no
            // derivative of the unused quotients is NaN. Elsewhere JAX's autodiff of
            // its formula differs only at ties |a| = |b| (its max and min split the
            // tangent, so its second derivatives there are 0), from |a| ~ 1e154 on (its
            // `b * a^-2` underflows), and at an infinite leg (JAX's jvp gives 0, its
            // grad NaN; this gives NaN): there this is the true derivative (PyTorch's).
            let at_zero = lax::eq(&out, &lax::zeros_like(&out)?)?;
            let safe = lax::select(&at_zero, &lax::ones_like(&out)?, &out)?;
            let half = lax::full_like(&out, 0.5)?;
            let weight = |v: &Tensor| -> Result<Tensor> { lax::select(&at_zero, &half, &lax::div(v, &safe)?) };
            let da = term(ta, &|t| lax::mul(t, &weight(a)?))?;
            let db = term(tb, &|t| lax::mul(t, &weight(b)?))?;
            lax::add_any(da, db)?
        }
        BinaryOp::And | BinaryOp::Or => None,
    };
    Ok((smallvec![out], smallvec![t]))
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
        match self {
            // the cotangent passes on to each operand: ones stay ones
            BinaryOp::Add => Props::ELEMENTWISE.ones(OnesTranspose::Ones),
            BinaryOp::Sub => Props::ELEMENTWISE,
            // `1 * c` is `c`
            BinaryOp::Mul => Props::ELEMENTWISE.fresh().ones(OnesTranspose::Constant),
            BinaryOp::Div => Props::ELEMENTWISE.fresh(),
            BinaryOp::Pow
            | BinaryOp::Max
            | BinaryOp::Min
            | BinaryOp::Rem
            | BinaryOp::Atan2
            | BinaryOp::Xlogy
            | BinaryOp::Xlog1py
            | BinaryOp::Logaddexp
            | BinaryOp::Hypot
            | BinaryOp::And
            | BinaryOp::Or => Props::ELEMENTWISE,
        }
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

    fn batch(&self, prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
        super::batching::batch_elementwise(prim, ins, bdims)
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

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: true, sink: false, thread_bound: false, lower_into: false }
    }

    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::elementwise_rows(q)
    }

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

fn binary_sample(op: BinaryOp) -> Sample {
    let dtypes: Vec<DType> = match op {
        BinaryOp::And | BinaryOp::Or => vec![DType::Bool, DType::I32, DType::I64, DType::U32],
        BinaryOp::Atan2 | BinaryOp::Xlogy | BinaryOp::Xlog1py | BinaryOp::Logaddexp | BinaryOp::Hypot => {
            FLOATS.to_vec()
        }
        _ => numeric(),
    };
    let linear = match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => vec![0, 1],
        BinaryOp::Div => vec![0],
        _ => vec![],
    };
    let smooth = !matches!(op, BinaryOp::And | BinaryOp::Or);
    Sample::new(op.name(), dtypes, linear, smooth, move |g, d| {
        let shape = g.shape(3, 0, 3);
        let (da, db) = if d.is_float() {
            match op {
                BinaryOp::Div | BinaryOp::Rem => (Dom::Real(-3.0, 3.0), Dom::AwayFromZero(0.7, 2.0)),
                BinaryOp::Pow => (Dom::Real(0.5, 2.0), Dom::Real(-2.0, 2.0)),
                BinaryOp::Atan2 => (Dom::AwayFromZero(0.2, 2.0), Dom::Real(-2.0, 2.0)),
                BinaryOp::Xlogy => (Dom::Real(-3.0, 3.0), Dom::Real(0.2, 4.0)),
                BinaryOp::Xlog1py => (Dom::Real(-3.0, 3.0), Dom::Real(-0.8, 3.0)),
                // away from the origin, where hypot has its kink
                BinaryOp::Hypot => (Dom::AwayFromZero(0.2, 3.0), Dom::Real(-3.0, 3.0)),
                _ => (Dom::Real(-3.0, 3.0), Dom::Real(-3.0, 3.0)),
            }
        } else if d == DType::Bool {
            (Dom::Small(0, 1), Dom::Small(0, 1))
        } else {
            let lo = if d == DType::U32 { 0 } else { -20 };
            match op {
                BinaryOp::Div | BinaryOp::Rem => (Dom::Small(lo, 20), Dom::Small(1, 7)),
                BinaryOp::Pow => (Dom::Small(if d == DType::U32 { 0 } else { -3 }, 3), Dom::Small(0, 4)),
                _ => (Dom::Small(lo, 20), Dom::Small(lo, 20)),
            }
        };
        Case::new(op, vec![(shape.clone(), d, da), (shape, d, db)])
    })
}
