//! Helpers for writing the CUDA C of an op beside its CPU expression: the
//! C types of a dtype, the precision-suffixed math functions, and
//! [`CudaExpr`], which becomes a kernel of `xform_kernels::cuda_source`.
//! This is plain string building, built and tested without the `cuda`
//! feature, so a family whose op lacks its CUDA form does not compile in
//! the default build either.

use xform_kernels::cuda_source::{compute_type, storage_type, MapOp};
use xform_kernels::DType;

/// The C types and math names of one dtype, as an op's CUDA expression
/// sees them (the operands are `x`, `y`, `z`; a run-time parameter is `p`).
#[derive(Copy, Clone, Debug)]
pub struct CudaCx {
    /// The dtype the kernel is generated for.
    pub dtype: DType,
}

impl CudaCx {
    /// The context of dtype `d`.
    pub fn new(dtype: DType) -> CudaCx {
        CudaCx { dtype }
    }
    /// The compute type: `float` for f32, f16 and bf16, `double` for f64,
    /// the storage type otherwise.
    pub fn c(&self) -> &'static str {
        compute_type(self.dtype)
    }
    /// The storage type.
    pub fn t(&self) -> &'static str {
        storage_type(self.dtype)
    }
    /// The unsigned C type of an integer dtype (wrapping arithmetic).
    pub fn u(&self) -> &'static str {
        match self.dtype {
            DType::I64 => "unsigned long long",
            _ => "unsigned int",
        }
    }
    /// True for the signed integer dtypes.
    pub fn signed(&self) -> bool {
        matches!(self.dtype, DType::I32 | DType::I64)
    }
    /// True when the compute type is double.
    pub fn double(&self) -> bool {
        self.dtype == DType::F64
    }
    /// The C math function `name` in the compute type (`expf` for f32,
    /// f16 and bf16, `exp` for f64).
    pub fn math(&self, name: &str) -> String {
        if self.double() {
            name.to_string()
        } else {
            format!("{name}f")
        }
    }
    /// `name(x)` in the compute type's precision.
    pub fn call(&self, name: &str) -> CudaExpr {
        CudaExpr::new(format!("{}(x)", self.math(name)))
    }
    /// An expression as written.
    pub fn expr(&self, e: impl Into<String>) -> CudaExpr {
        CudaExpr::new(e)
    }
    /// Infinity of the compute type, negated or not.
    pub fn infinity(&self, negative: bool) -> &'static str {
        match (self.double(), negative) {
            (true, false) => "__longlong_as_double(0x7ff0000000000000LL)",
            (true, true) => "__longlong_as_double((long long)0xfff0000000000000ULL)",
            (false, false) => "__int_as_float(0x7f800000)",
            (false, true) => "__int_as_float((int)0xff800000u)",
        }
    }
}

/// The CUDA form of an elementwise op: an expression in `x`, `y`, `z`,
/// device helpers it calls, and an optional run-time parameter `p`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaExpr {
    /// The C expression.
    pub expr: String,
    /// Device functions the expression calls.
    pub helpers: String,
    /// The run-time parameter `p` (one kernel serves every value).
    pub param: Option<i64>,
}

impl CudaExpr {
    /// An expression without helpers or parameter.
    pub fn new(expr: impl Into<String>) -> CudaExpr {
        CudaExpr { expr: expr.into(), helpers: String::new(), param: None }
    }
    /// With device helper functions.
    pub fn helpers(self, helpers: impl Into<String>) -> CudaExpr {
        CudaExpr { helpers: helpers.into(), ..self }
    }
    /// With the run-time parameter `p`.
    pub fn param(self, p: i64) -> CudaExpr {
        CudaExpr { param: Some(p), ..self }
    }
    /// The map operation named `tag` (on widened values unless `raw`).
    pub fn map_op(self, tag: &str, raw: bool) -> MapOp {
        MapOp { tag: tag.to_string(), expr: self.expr, helpers: self.helpers, raw, param: self.param }
    }
}

/// `b^e` with wrapping arithmetic in the unsigned type `u` (the device
/// helper `xf_upow`).
pub fn upow_helper(u: &str) -> String {
    format!(
        "static __device__ __forceinline__ {u} xf_upow({u} b, unsigned long long e) {{\n    {u} r = 1;\n    \
         while (e) {{ if (e & 1ull) r *= b; b *= b; e >>= 1; }}\n    return r;\n}}\n"
    )
}
