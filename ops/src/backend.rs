//! Device dispatch for the lowerings: CPU kernels live next to each
//! primitive; the CUDA lowerings are reached through these functions. In a
//! build without the `cuda` feature no array can live on a CUDA device, and
//! each of these reports that CUDA support was not built.
//!
//! With the feature, each function runs the kernels of
//! `xform_kernels::cuda`. The kernels crate knows no op enum: the CUDA C
//! expression of every [`UnaryOp`], [`BinaryOp`], [`CompareOp`],
//! [`ReduceOp`] and [`ArgOp`] is written here, mirroring the CPU lowering
//! in the op's family file (`prims/<family>.rs`).

use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::prim::{ArgOp, BinaryOp, CompareOp, ReduceOp, UnaryOp};
use smallvec::SmallVec;
use xform_kernels::{DType, Shape};

#[cfg(not(feature = "cuda"))]
fn unavailable<T>(op: &str) -> Result<T> {
    Err(Error::device(op, "CUDA support was not built: enable the `cuda` feature of xform"))
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::*;
    pub fn transfer(a: &Array, device: Device) -> Result<Array> {
        let _ = a;
        match device {
            Device::Cpu => Ok(a.clone()),
            Device::Cuda(_) => unavailable("to_device"),
        }
    }
    pub fn cuda_contiguous_copy(_: &Array) -> Result<Array> {
        unavailable("copy")
    }
    pub fn cuda_unary(op: UnaryOp, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_convert(_: DType, _: &Array) -> Result<Array> {
        unavailable("convert_element_type")
    }
    pub fn cuda_binary(op: BinaryOp, _: &Array, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_compare(op: CompareOp, _: &Array, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_select(_: &Array, _: &Array, _: &Array) -> Result<Array> {
        unavailable("select")
    }
    pub fn cuda_reduce(op: ReduceOp, _: &[usize], _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_arg_reduce(op: ArgOp, _: usize, _: DType, _: &Array) -> Result<Array> {
        unavailable(op.name())
    }
    pub fn cuda_cumsum(_: usize, _: bool, _: &Array) -> Result<Array> {
        unavailable("cumsum")
    }
    pub fn cuda_pad(_: &[i64], _: &[i64], _: &[usize], _: &Array, _: &Array) -> Result<Array> {
        unavailable("pad")
    }
    pub fn cuda_concatenate(_: usize, _: &[&Array]) -> Result<Array> {
        unavailable("concatenate")
    }
    pub fn cuda_dynamic_update_slice(_: &[&Array]) -> Result<Array> {
        unavailable("dynamic_update_slice")
    }
    pub fn cuda_gather(_: usize, _: usize, _: &Array, _: &Array) -> Result<Array> {
        unavailable("gather")
    }
    pub fn cuda_scatter_add(_: usize, _: usize, _: &Array, _: &Array, _: &Array) -> Result<Array> {
        unavailable("scatter_add")
    }
    pub fn cuda_gemm(_: &Array, _: &Array, _: Shape) -> Result<Array> {
        unavailable("dot_general")
    }
    pub fn cuda_write(_: &Array, _: &Array) -> Result<()> {
        unavailable("copy_")
    }
    pub fn cuda_threefry(_: &[&Array]) -> Result<SmallVec<[Array; 2]>> {
        unavailable("threefry2x32")
    }
}

pub(crate) use imp::*;

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::array::Buffer;
    use crate::error::ErrorKind;
    use std::sync::RwLockReadGuard;
    use xform_kernels::cpu::reduce::reduced_shape;
    use xform_kernels::cuda::source::{map_kernel, storage_type};
    use xform_kernels::cuda::{exec, CudaBuffer, CudaError, Fold, Kernel, MapOp, Ranking};
    use xform_kernels::{CpuBuffer, Layout};

    // ---- CUDA C for each op -------------------------------------------------

    /// The C math function `name` in the compute type of `d` (`expf` for
    /// f32/f16/bf16, `exp` for f64).
    fn math(d: DType, name: &str) -> String {
        if d == DType::F64 {
            name.to_string()
        } else {
            format!("{name}f")
        }
    }

    /// The unsigned C type of an integer dtype (wrapping arithmetic).
    fn unsigned(d: DType) -> &'static str {
        match d {
            DType::I64 => "unsigned long long",
            _ => "unsigned int",
        }
    }

    fn mapop(tag: impl Into<String>, expr: impl Into<String>, helpers: impl Into<String>) -> MapOp {
        MapOp { tag: tag.into(), expr: expr.into(), helpers: helpers.into(), raw: false, param: None }
    }

    /// `b^e` with wrapping arithmetic in the unsigned type `u`.
    fn upow_helper(u: &str) -> String {
        format!(
            "static __device__ __forceinline__ {u} xf_upow({u} b, unsigned long long e) {{\n    {u} r = 1;\n    \
             while (e) {{ if (e & 1ull) r *= b; b *= b; e >>= 1; }}\n    return r;\n}}\n"
        )
    }

    /// The CUDA form of a unary op on dtype `d` (the CPU semantics of
    /// `prims/unary.rs`), or `None` where the shape rule refuses `d`. The
    /// exponent of `integer_pow` is a run-time parameter (`p`): one kernel
    /// per dtype serves every power.
    pub fn unary_op(op: UnaryOp, d: DType) -> Option<MapOp> {
        let m = unary_map(op, d)?;
        Some(match op {
            UnaryOp::IntegerPow(n) => MapOp { param: Some(n as i64), ..m },
            _ => m,
        })
    }

    fn unary_map(op: UnaryOp, d: DType) -> Option<MapOp> {
        let tag = op.name();
        if d == DType::Bool {
            return matches!(op, UnaryOp::Not).then(|| mapop(tag, "!x", ""));
        }
        if d.is_int() {
            let t = storage_type(d);
            let u = unsigned(d);
            let signed = d != DType::U32;
            let (expr, helpers) = match op {
                UnaryOp::Neg => (format!("({t})(({u})0 - ({u})x)"), String::new()),
                UnaryOp::Abs if signed => (format!("(x < 0 ? ({t})(({u})0 - ({u})x) : x)"), String::new()),
                UnaryOp::Abs => ("x".to_string(), String::new()),
                UnaryOp::Sign if signed => (format!("({t})((x > 0) - (x < 0))"), String::new()),
                UnaryOp::Sign => (format!("({t})(x > 0)"), String::new()),
                UnaryOp::Not => ("~x".to_string(), String::new()),
                // x^-n truncates to 0 except for |x| = 1.
                UnaryOp::IntegerPow(_) => (
                    format!(
                        "(p >= 0) ? ({t})xf_upow(({u})x, (unsigned long long)p) : ((x == ({t})1) ? ({t})1 : \
                         (((long long)x == -1LL) ? ((p % 2 == 0) ? ({t})1 : x) : ({t})0))"
                    ),
                    upow_helper(u),
                ),
                _ => return None,
            };
            return Some(mapop(tag, expr, helpers));
        }
        let c = xform_kernels::cuda::source::compute_type(d);
        let f = |name: &str| format!("{}(x)", math(d, name));
        let (expr, helpers) = match op {
            UnaryOp::Neg => ("-x".to_string(), String::new()),
            UnaryOp::Exp => (f("exp"), String::new()),
            UnaryOp::Log => (f("log"), String::new()),
            UnaryOp::Log1p => (f("log1p"), String::new()),
            UnaryOp::Expm1 => (f("expm1"), String::new()),
            UnaryOp::Sin => (f("sin"), String::new()),
            UnaryOp::Cos => (f("cos"), String::new()),
            UnaryOp::Tan => (f("tan"), String::new()),
            UnaryOp::Tanh => (f("tanh"), String::new()),
            UnaryOp::Logistic => {
                let e = math(d, "exp");
                (
                    "xf_logistic(x)".to_string(),
                    format!(
                        "static __device__ __forceinline__ {c} xf_logistic({c} x) {{\n    if (x >= ({c})0) return ({c})1 / \
                         (({c})1 + {e}(-x));\n    const {c} v = {e}(x);\n    return v / (({c})1 + v);\n}}\n"
                    ),
                )
            }
            UnaryOp::Sqrt => (f("sqrt"), String::new()),
            UnaryOp::Rsqrt => (format!("({c})1 / {}", f("sqrt")), String::new()),
            UnaryOp::Abs => (f("fabs"), String::new()),
            UnaryOp::Sign => {
                (format!("(x != x) ? x : (x > ({c})0 ? ({c})1 : (x < ({c})0 ? ({c})-1 : ({c})0))"), String::new())
            }
            UnaryOp::Floor => (f("floor"), String::new()),
            UnaryOp::Ceil => (f("ceil"), String::new()),
            // Round half to even: rint in the default rounding mode.
            UnaryOp::Round => (f("rint"), String::new()),
            UnaryOp::Erf => (f("erf"), String::new()),
            // Repeated squaring, like LLVM's powi.
            UnaryOp::IntegerPow(_) => (
                "xf_powi(x, (int)p)".to_string(),
                format!(
                    "static __device__ __forceinline__ {c} xf_powi({c} a, int n) {{\n    unsigned int m = n < 0 ? 0u - \
                     (unsigned int)n : (unsigned int)n;\n    {c} r = 1;\n    while (true) {{\n        if (m & 1u) r *= \
                     a;\n        m >>= 1;\n        if (m == 0u) break;\n        a *= a;\n    }}\n    return n < 0 ? \
                     ({c})1 / r : r;\n}}\n"
                ),
            ),
            UnaryOp::Not => return None,
        };
        Some(mapop(tag, expr, helpers))
    }

    /// The CUDA form of a binary op on dtype `d` (the CPU semantics of
    /// `prims/binary.rs`), or `None` where the shape rule refuses `d`.
    pub fn binary_op(op: BinaryOp, d: DType) -> Option<MapOp> {
        let tag = op.name();
        if d == DType::Bool {
            return match op {
                BinaryOp::And => Some(mapop(tag, "x && y", "")),
                BinaryOp::Or => Some(mapop(tag, "x || y", "")),
                _ => None,
            };
        }
        if d.is_int() {
            let t = storage_type(d);
            let u = unsigned(d);
            let signed = d != DType::U32;
            let (expr, helpers) = match op {
                BinaryOp::Add => (format!("({t})(({u})x + ({u})y)"), String::new()),
                BinaryOp::Sub => (format!("({t})(({u})x - ({u})y)"), String::new()),
                BinaryOp::Mul => (format!("({t})(({u})x * ({u})y)"), String::new()),
                // x / 0 is !0 (-1, or the largest u32) as in XLA; MIN / -1 wraps.
                BinaryOp::Div if signed => {
                    (format!("(y == 0) ? ({t})-1 : ((y == -1) ? ({t})(({u})0 - ({u})x) : x / y)"), String::new())
                }
                BinaryOp::Div => ("(y == 0u) ? 0xffffffffu : x / y".to_string(), String::new()),
                BinaryOp::Rem if signed => (format!("(y == 0) ? x : ((y == -1) ? ({t})0 : x % y)"), String::new()),
                BinaryOp::Rem => ("(y == 0u) ? x : x % y".to_string(), String::new()),
                BinaryOp::Pow => (
                    "xf_ipow(x, y)".to_string(),
                    format!(
                        "{}static __device__ __forceinline__ {t} xf_ipow({t} x, {t} y) {{\n    const long long e = \
                         (long long)y;\n    if (e >= 0) return ({t})xf_upow(({u})x, e > 4294967295LL ? 4294967295ull : \
                         (unsigned long long)e);\n    if ((long long)x == 1LL) return ({t})1;\n    if ((long long)x == \
                         -1LL) return (e % 2 == 0) ? ({t})1 : x;\n    return ({t})0;\n}}\n",
                        upow_helper(u)
                    ),
                ),
                BinaryOp::Max => ("(x >= y ? x : y)".to_string(), String::new()),
                BinaryOp::Min => ("(x <= y ? x : y)".to_string(), String::new()),
                BinaryOp::And => ("x & y".to_string(), String::new()),
                BinaryOp::Or => ("x | y".to_string(), String::new()),
                BinaryOp::Atan2 => return None,
            };
            return Some(mapop(tag, expr, helpers));
        }
        let expr = match op {
            BinaryOp::Add => "x + y".to_string(),
            BinaryOp::Sub => "x - y".to_string(),
            BinaryOp::Mul => "x * y".to_string(),
            BinaryOp::Div => "x / y".to_string(),
            BinaryOp::Pow => format!("{}(x, y)", math(d, "pow")),
            // NaN propagates.
            BinaryOp::Max => "(x != x || y != y) ? x + y : (x >= y ? x : y)".to_string(),
            BinaryOp::Min => "(x != x || y != y) ? x + y : (x <= y ? x : y)".to_string(),
            // Rust's `%` on floats is fmod.
            BinaryOp::Rem => format!("{}(x, y)", math(d, "fmod")),
            BinaryOp::Atan2 => format!("{}(x, y)", math(d, "atan2")),
            BinaryOp::And | BinaryOp::Or => return None,
        };
        Some(mapop(tag, expr, ""))
    }

    /// The CUDA form of a comparison (bool out) on any dtype.
    pub fn compare_op(op: CompareOp) -> MapOp {
        let e = match op {
            CompareOp::Eq => "x == y",
            CompareOp::Ne => "x != y",
            CompareOp::Lt => "x < y",
            CompareOp::Le => "x <= y",
            CompareOp::Gt => "x > y",
            CompareOp::Ge => "x >= y",
        };
        mapop(op.name(), e, "")
    }

    /// `select(p, a, b)`: data movement, no widening.
    fn select_op() -> MapOp {
        MapOp { tag: "select".into(), expr: "x ? y : z".into(), helpers: String::new(), raw: true, param: None }
    }

    /// Infinity of a float compute type, negated or not.
    fn infinity(d: DType, negative: bool) -> &'static str {
        match (d == DType::F64, negative) {
            (true, false) => "__longlong_as_double(0x7ff0000000000000LL)",
            (true, true) => "__longlong_as_double((long long)0xfff0000000000000ULL)",
            (false, false) => "__int_as_float(0x7f800000)",
            (false, true) => "__int_as_float((int)0xff800000u)",
        }
    }

    /// The reduction of `op` over dtype `d` (the CPU semantics of
    /// `prims/reduce.rs`: float sums accumulate in f64, integer sums wrap,
    /// max/min propagate NaN), or `None` for bool.
    pub fn reduce_fold(op: ReduceOp, d: DType) -> Option<Fold> {
        if d == DType::Bool {
            return None;
        }
        let fold = |acc: &str, init: &str, combine: &str, finish: &str| Fold {
            tag: op.name().to_string(),
            acc: acc.to_string(),
            init: init.to_string(),
            combine: combine.to_string(),
            finish: finish.to_string(),
            helpers: String::new(),
        };
        let c = xform_kernels::cuda::source::compute_type(d);
        let t = storage_type(d);
        Some(match (op, d.is_float()) {
            (ReduceOp::Sum, true) => fold("double", "0.0", "a + b", "a"),
            (ReduceOp::Sum, false) => fold(unsigned(d), "0", "a + b", &format!("({t})a")),
            (ReduceOp::Max, true) => fold(c, infinity(d, true), "(a != a || b != b) ? a + b : (b > a ? b : a)", "a"),
            (ReduceOp::Min, true) => fold(c, infinity(d, false), "(a != a || b != b) ? a + b : (b < a ? b : a)", "a"),
            (ReduceOp::Max, false) => {
                let min = match d {
                    DType::I32 => "(-2147483647 - 1)",
                    DType::I64 => "(-9223372036854775807LL - 1)",
                    _ => "0u",
                };
                fold(t, min, "(b > a ? b : a)", "a")
            }
            (ReduceOp::Min, false) => {
                let max = match d {
                    DType::I32 => "2147483647",
                    DType::I64 => "9223372036854775807LL",
                    _ => "4294967295u",
                };
                fold(t, max, "(b < a ? b : a)", "a")
            }
        })
    }

    /// cumsum: the running form of the sum (f64 accumulation for floats,
    /// wrapping for integers), as `lower_cumsum` on the CPU.
    fn cumsum_fold(d: DType) -> Option<Fold> {
        reduce_fold(ReduceOp::Sum, d).map(|f| Fold { tag: "cumsum".to_string(), ..f })
    }

    /// How argmax / argmin rank elements.
    pub fn ranking(op: ArgOp) -> Ranking {
        let better = match op {
            ArgOp::Max => "a > b",
            ArgOp::Min => "a < b",
        };
        Ranking { tag: op.name().to_string(), better: better.to_string() }
    }

    /// Every kernel the CUDA lowerings can launch: the kernels crate's
    /// structural ones plus each op here for each dtype it accepts.
    pub fn kernel_catalog() -> Vec<Kernel> {
        let mut v = xform_kernels::cuda::source::builtin_catalog();
        for d in DType::ALL {
            for u in UnaryOp::ALL {
                if let Some(m) = unary_op(u, d) {
                    v.push(map_kernel(&m, &[d], d));
                }
            }
            for b in BinaryOp::ALL {
                if let Some(m) = binary_op(b, d) {
                    v.push(map_kernel(&m, &[d, d], d));
                }
            }
            for c in CompareOp::ALL {
                v.push(map_kernel(&compare_op(c), &[d, d], DType::Bool));
            }
            v.push(map_kernel(&select_op(), &[DType::Bool, d, d], d));
            for r in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                if let Some(f) = reduce_fold(r, d) {
                    v.push(xform_kernels::cuda::source::reduce_kernel(&f, d, d));
                }
            }
            if let Some(f) = cumsum_fold(d) {
                v.push(xform_kernels::cuda::source::cumulative_kernel(&f, d, d));
            }
            if d != DType::Bool {
                for a in [ArgOp::Max, ArgOp::Min] {
                    for i in [DType::I32, DType::I64, DType::U32] {
                        v.push(xform_kernels::cuda::source::arg_reduce_kernel(&ranking(a), d, i));
                    }
                }
            }
        }
        v
    }

    // ---- plumbing -----------------------------------------------------------

    fn cuda_err(op: &str, e: CudaError) -> Error {
        match e {
            CudaError::IndexOutOfRange { index, size } => Error::new(op, ErrorKind::IndexOutOfRange { index, size }),
            CudaError::OutOfMemory { ordinal, bytes } => Error::new(
                op,
                ErrorKind::OutOfMemory { shape: None, dtype: None, device: Device::Cuda(ordinal), bytes },
            ),
            e => Error::device(op, e.to_string()),
        }
    }

    fn ordinal(a: &Array) -> usize {
        match a.device() {
            Device::Cuda(i) => i,
            Device::Cpu => 0,
        }
    }

    fn wrap(buf: CudaBuffer, shape: Shape, dtype: DType, ordinal: usize) -> Array {
        Array::from_buffer(Buffer::Cuda(buf), shape, dtype, Device::Cuda(ordinal))
    }

    /// Read guards on the operands' storages.
    fn guards<'a>(arrays: &[&'a Array]) -> Vec<RwLockReadGuard<'a, Buffer>> {
        arrays.iter().map(|a| a.read()).collect()
    }

    /// The CUDA buffer behind a guard, or an error naming `op`.
    fn cuda_buf<'a>(op: &str, g: &'a Buffer) -> Result<&'a CudaBuffer> {
        match g {
            Buffer::Cuda(b) => Ok(b),
            Buffer::Cpu(_) => Err(Error::device(op, "expected a CUDA array, found a CPU one")),
        }
    }

    /// Runs `f` on the CUDA buffers and layouts of `arrays`.
    fn with_bufs<R>(
        op: &str,
        arrays: &[&Array],
        f: impl FnOnce(&[(&CudaBuffer, &Layout)]) -> std::result::Result<R, CudaError>,
    ) -> Result<R> {
        let gs = guards(arrays);
        let mut ins = Vec::with_capacity(arrays.len());
        for (g, a) in gs.iter().zip(arrays) {
            ins.push((cuda_buf(op, g)?, &a.layout));
        }
        f(&ins).map_err(|e| cuda_err(op, e))
    }

    fn map_array(name: &str, m: &MapOp, arrays: &[&Array], out: DType) -> Result<Array> {
        let buf = with_bufs(name, arrays, |ins| exec::map(m, ins, out))?;
        Ok(wrap(buf, arrays[0].shape().clone(), out, ordinal(arrays[0])))
    }

    // ---- the lowerings ------------------------------------------------------

    pub fn transfer(a: &Array, device: Device) -> Result<Array> {
        match (a.device(), device) {
            (from, to) if from == to => Ok(a.clone()),
            (Device::Cpu, Device::Cuda(o)) => {
                let host = a.with_cpu("to_device", |b, l| {
                    xform_kernels::match_buffer!(b, v => CpuBuffer::from_vec(
                        xform_kernels::cpu::elementwise::to_contiguous(v, l, xform_kernels::cpu::Par::Seq)))
                })?;
                let buf = CudaBuffer::upload(o, &host).map_err(|e| cuda_err("to_device", e))?;
                Ok(wrap(buf, a.shape().clone(), a.dtype, o))
            }
            (Device::Cuda(_), Device::Cpu) => {
                let host = with_bufs("to_device", &[a], |ins| exec::download(ins[0].0, ins[0].1))?;
                Ok(Array::from_cpu(host, a.shape().clone()))
            }
            (Device::Cuda(_), Device::Cuda(_)) => transfer(&transfer(a, Device::Cpu)?, device),
            (Device::Cpu, Device::Cpu) => Ok(a.clone()),
        }
    }

    pub fn cuda_contiguous_copy(a: &Array) -> Result<Array> {
        let buf = with_bufs("copy", &[a], |ins| exec::to_contiguous(ins[0].0, ins[0].1))?;
        Ok(wrap(buf, a.shape().clone(), a.dtype, ordinal(a)))
    }

    pub fn cuda_unary(op: UnaryOp, x: &Array) -> Result<Array> {
        let m = unary_op(op, x.dtype)
            .ok_or_else(|| Error::dtype(op.name(), "has no CUDA kernel for this dtype", &[x.dtype]))?;
        map_array(op.name(), &m, &[x], x.dtype)
    }

    pub fn cuda_convert(dtype: DType, x: &Array) -> Result<Array> {
        let buf = with_bufs("convert_element_type", &[x], |ins| exec::convert(ins[0].0, ins[0].1, dtype))?;
        Ok(wrap(buf, x.shape().clone(), dtype, ordinal(x)))
    }

    pub fn cuda_binary(op: BinaryOp, a: &Array, b: &Array) -> Result<Array> {
        let m = binary_op(op, a.dtype)
            .ok_or_else(|| Error::dtype(op.name(), "has no CUDA kernel for this dtype", &[a.dtype]))?;
        map_array(op.name(), &m, &[a, b], a.dtype)
    }

    pub fn cuda_compare(op: CompareOp, a: &Array, b: &Array) -> Result<Array> {
        map_array(op.name(), &compare_op(op), &[a, b], DType::Bool)
    }

    pub fn cuda_select(p: &Array, a: &Array, b: &Array) -> Result<Array> {
        map_array("select", &select_op(), &[p, a, b], a.dtype)
    }

    pub fn cuda_reduce(op: ReduceOp, axes: &[usize], x: &Array) -> Result<Array> {
        let f = reduce_fold(op, x.dtype)
            .ok_or_else(|| Error::dtype(op.name(), "cannot reduce bool values; convert them first", &[x.dtype]))?;
        let buf = with_bufs(op.name(), &[x], |ins| exec::reduce(&f, ins[0].0, ins[0].1, axes, x.dtype))?;
        Ok(wrap(buf, reduced_shape(x.shape(), axes), x.dtype, ordinal(x)))
    }

    pub fn cuda_arg_reduce(op: ArgOp, axis: usize, index_dtype: DType, x: &Array) -> Result<Array> {
        let r = ranking(op);
        let buf = with_bufs(op.name(), &[x], |ins| exec::arg_reduce(&r, ins[0].0, ins[0].1, axis, index_dtype))?;
        Ok(wrap(buf, reduced_shape(x.shape(), &[axis]), index_dtype, ordinal(x)))
    }

    pub fn cuda_cumsum(axis: usize, reverse: bool, x: &Array) -> Result<Array> {
        let f = cumsum_fold(x.dtype)
            .ok_or_else(|| Error::dtype("cumsum", "cannot sum bool values; convert them first", &[x.dtype]))?;
        let buf = with_bufs("cumsum", &[x], |ins| exec::cumulative(&f, ins[0].0, ins[0].1, axis, reverse, x.dtype))?;
        Ok(wrap(buf, x.shape().clone(), x.dtype, ordinal(x)))
    }

    pub fn cuda_pad(low: &[i64], high: &[i64], interior: &[usize], x: &Array, v: &Array) -> Result<Array> {
        let shape = xform_kernels::cpu::shape::pad_shape(x.shape(), low, high, interior)
            .ok_or_else(|| Error::invalid("pad", "the padding makes an axis negative"))?;
        let buf =
            with_bufs("pad", &[x, v], |ins| exec::pad(ins[0].0, ins[0].1, ins[1].0, ins[1].1, low, high, interior))?;
        Ok(wrap(buf, shape, x.dtype, ordinal(x)))
    }

    pub fn cuda_concatenate(axis: usize, ins: &[&Array]) -> Result<Array> {
        let mut shape = ins[0].shape().clone();
        shape[axis] = ins.iter().map(|a| a.shape()[axis]).sum();
        let buf = with_bufs("concatenate", ins, |parts| exec::concatenate(parts, axis, &shape))?;
        Ok(wrap(buf, shape, ins[0].dtype, ordinal(ins[0])))
    }

    pub fn cuda_dynamic_update_slice(ins: &[&Array]) -> Result<Array> {
        let (x, u) = (ins[0], ins[1]);
        let start = crate::prims::indexing::resolved_starts(x.shape(), u.shape(), &ins[2..])?;
        let buf = with_bufs("dynamic_update_slice", &[x, u], |b| {
            exec::dynamic_update_slice(b[0].0, b[0].1, b[1].0, b[1].1, &start)
        })?;
        Ok(wrap(buf, x.shape().clone(), x.dtype, ordinal(x)))
    }

    pub fn cuda_gather(axis: usize, batch_dims: usize, x: &Array, idx: &Array) -> Result<Array> {
        let e = crate::prims::indexing::gather_extents(x.shape(), idx.shape(), axis, batch_dims);
        let mut s: Vec<usize> = x.shape()[..axis].to_vec();
        s.extend_from_slice(&idx.shape()[batch_dims..]);
        s.extend_from_slice(&x.shape()[axis + 1..]);
        let buf = with_bufs("gather", &[x, idx], |b| exec::gather(b[0].0, b[0].1, b[1].0, b[1].1, e))?;
        Ok(wrap(buf, Shape::from(s), x.dtype, ordinal(x)))
    }

    pub fn cuda_scatter_add(axis: usize, batch_dims: usize, x: &Array, idx: &Array, u: &Array) -> Result<Array> {
        if matches!(x.dtype, DType::F16 | DType::BF16) {
            // Accumulate in f32 and round once, as the half types compute
            // (and as the CPU lowering does).
            let out =
                cuda_scatter_add(axis, batch_dims, &cuda_convert(DType::F32, x)?, idx, &cuda_convert(DType::F32, u)?)?;
            return cuda_convert(x.dtype, &out);
        }
        let e = crate::prims::indexing::gather_extents(x.shape(), idx.shape(), axis, batch_dims);
        let buf = with_bufs("scatter_add", &[x, idx, u], |b| {
            exec::scatter_add(b[0].0, b[0].1, b[1].0, b[1].1, b[2].0, b[2].1, e)
        })?;
        Ok(wrap(buf, x.shape().clone(), x.dtype, ordinal(x)))
    }

    pub fn cuda_gemm(a: &Array, b: &Array, shape: Shape) -> Result<Array> {
        let buf = with_bufs("dot_general", &[a, b], |ins| exec::gemm(ins[0].0, ins[0].1, ins[1].0, ins[1].1))?;
        Ok(wrap(buf, shape, a.dtype, ordinal(a)))
    }

    pub fn cuda_write(dst: &Array, src: &Array) -> Result<()> {
        let (gs, mut gd) = Array::read_and_write(src, dst);
        let s = cuda_buf("copy_", &gs)?;
        let d = match &mut *gd {
            Buffer::Cuda(b) => b,
            Buffer::Cpu(_) => return Err(Error::device("copy_", "expected a CUDA array, found a CPU one")),
        };
        exec::write_strided(d, &dst.layout, s, &src.layout).map_err(|e| cuda_err("copy_", e))
    }

    pub fn cuda_threefry(ins: &[&Array]) -> Result<SmallVec<[Array; 2]>> {
        let (y0, y1) = with_bufs("threefry2x32", ins, |b| exec::threefry([b[0], b[1], b[2], b[3]]))?;
        let (shape, o) = (ins[0].shape().clone(), ordinal(ins[0]));
        Ok(smallvec::smallvec![wrap(y0, shape.clone(), DType::U32, o), wrap(y1, shape, DType::U32, o)])
    }
}
