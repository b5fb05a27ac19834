//! CUDA C source generation: every kernel the backend launches is produced
//! here from a family, a tag and the dtypes involved, so its name is derived
//! ([`kernel_name`]) rather than typed by hand, and the same generator serves
//! the launch path and the compile-everything test.
//!
//! Generic families take their operation as CUDA C expressions supplied by
//! the caller ([`MapOp`], [`Fold`], [`Ranking`]): the ops crate maps its op
//! enums to expressions; this crate knows no op enum. Structural kernels
//! (copy, convert, strided write, pad, iota, gather, scatter-add, GEMM,
//! Threefry, the convolution in [`conv`], the window selections) are
//! generated here in full; their semantics mirror `crate::cpu`.
//!
//! Generating source needs no GPU, toolkit or the `cuda` feature, so this
//! module is always built: the default build checks that every op has its
//! CUDA expression (`cargo test` generates the whole catalog), and the
//! `cuda` feature compiles and launches it.

use crate::dtype::DType;
use std::fmt::Write;

pub mod conv;
pub use conv::conv_kernel;
mod fused;
pub use fused::{fused_kernel, FusedArg, FusedKernelOp, MAX_FUSED_INPUTS, MAX_FUSED_OUTPUTS};
mod window;
pub use window::{reduce_window_kernel, select_gather_kernel, window_scatter_kernel, window_select_kernel};

/// Largest rank a kernel's layout parameters hold (after coalescing).
pub const MAX_DIMS: usize = 16;

/// Largest number of strided operands one elementwise kernel iterates.
pub const MAX_OPERANDS: usize = 4;

/// A generated kernel: its (derived) entry-point name and its CUDA C source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The `extern "C"` entry point, unique per source.
    pub name: String,
    /// The complete CUDA C translation unit.
    pub source: String,
    /// True if the source includes `cuda_fp16.h` / `cuda_bf16.h` (needs the
    /// include path of the CUDA headers).
    pub needs_half: bool,
}

/// An elementwise operation over 1 to 3 operands: `out[i] = expr(x, y, z)`.
///
/// `expr` sees the operands as `x`, `y`, `z` in their compute type
/// ([`compute_type`]: f16 and bf16 widen to `float`, bool is `bool`), or in
/// their storage type ([`storage_type`]) when `raw` is set (pure data
/// movement such as select). `helpers` is prepended device code the
/// expression may call. `param`, if set, is a run-time scalar argument the
/// expression sees as `p` (a `long long`), so one kernel serves every value
/// (integer powers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapOp {
    /// Identifier-safe name of the operation ("add", "integer_pow_m2").
    pub tag: String,
    /// The CUDA C expression.
    pub expr: String,
    /// Device functions used by `expr` (may be empty).
    pub helpers: String,
    /// Operate on storage values without widening.
    pub raw: bool,
    /// A run-time scalar argument `p`, if the expression uses one.
    pub param: Option<i64>,
}

/// A reduction: an accumulator of C type `acc` started at `init`, combined
/// with `combine(a, b)` (each element enters as `(acc)x` in its compute
/// type), and turned into the result by `finish(a)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    /// Identifier-safe name ("sum", "max").
    pub tag: String,
    /// C type of the accumulator.
    pub acc: String,
    /// Initial accumulator expression.
    pub init: String,
    /// Expression in `a` and `b` (both `acc`) combining two partial results;
    /// must be associative for reductions.
    pub combine: String,
    /// Expression in `a` giving the value stored (converted to the output dtype).
    pub finish: String,
    /// Device functions used by the expressions (may be empty).
    pub helpers: String,
}

/// How an arg-reduction ranks elements: `better` is an expression in `a`
/// and `b` (compute type) that is true when `a` beats `b`. The first
/// extreme wins and NaN counts as extreme, as in `crate::cpu::reduce::arg_reduce`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranking {
    /// Identifier-safe name ("argmax").
    pub tag: String,
    /// The comparison expression.
    pub better: String,
}

/// The C type elements of `d` are stored as on the device (bool as a byte).
pub fn storage_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::U32 => "unsigned int",
        DType::Bool => "unsigned char",
    }
}

/// The C type arithmetic on `d` is done in (f16 and bf16 compute in float).
pub fn compute_type(d: DType) -> &'static str {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => "float",
        DType::F64 => "double",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::U32 => "unsigned int",
        DType::Bool => "bool",
    }
}

fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// A kernel name derived from its family, its operation tag and its dtypes.
pub fn kernel_name(family: &str, tag: &str, dtypes: &[DType]) -> String {
    let mut s = format!("xf_{family}");
    if !tag.is_empty() {
        s.push('_');
        s.push_str(tag);
    }
    for d in dtypes {
        s.push('_');
        s.push_str(d.short_name());
    }
    debug_assert!(s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad kernel name {s}");
    s
}

/// Widens a storage value of dtype `d` to its compute type.
fn load(d: DType, e: &str) -> String {
    match d {
        DType::F16 => format!("__half2float({e})"),
        DType::BF16 => format!("__bfloat162float({e})"),
        DType::Bool => format!("(({e}) != 0)"),
        _ => e.to_string(),
    }
}

/// Rounds a compute value (float or double for the half types) to storage.
fn store(d: DType, e: &str) -> String {
    match d {
        DType::F16 => format!("xf_to_f16({e})"),
        DType::BF16 => format!("xf_to_bf16({e})"),
        DType::Bool => format!("(unsigned char)(({e}) ? 1 : 0)"),
        _ => format!("({})({e})", storage_type(d)),
    }
}

/// The parameter structs and index helpers every kernel shares. Their
/// layouts match the `#[repr(C)]` structs in `exec.rs`.
fn prelude(half: bool) -> String {
    let mut s = String::new();
    if half {
        s.push_str(
            "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\
static __device__ __forceinline__ __half xf_to_f16(float v) { return __float2half_rn(v); }\n\
static __device__ __forceinline__ __half xf_to_f16(double v) { return __double2half(v); }\n\
static __device__ __forceinline__ __nv_bfloat16 xf_to_bf16(float v) { return __float2bfloat16_rn(v); }\n\
static __device__ __forceinline__ __nv_bfloat16 xf_to_bf16(double v) { return __double2bfloat16(v); }\n",
        );
    }
    let _ = write!(
        s,
        r#"#define XF_MAXD {MAX_DIMS}
#define XF_MAXOPS {MAX_OPERANDS}
struct XfIter {{
    long long n;
    int rank;
    int pad;
    long long shape[XF_MAXD];
    long long strides[XF_MAXOPS][XF_MAXD];
    long long offsets[XF_MAXOPS];
}};
struct XfRed {{
    long long nout;
    long long nred;
    int krank;
    int rrank;
    long long kshape[XF_MAXD];
    long long kstride[XF_MAXD];
    long long rshape[XF_MAXD];
    long long rstride[XF_MAXD];
    long long offset;
}};
static __device__ __forceinline__ void xf_offsets(const XfIter& it, long long i, int nops, long long* off) {{
    for (int k = 0; k < nops; ++k) off[k] = it.offsets[k];
    for (int d = it.rank - 1; d >= 0; --d) {{
        long long s = it.shape[d];
        long long q = i % s;
        i /= s;
        for (int k = 0; k < nops; ++k) off[k] += q * it.strides[k][d];
    }}
}}
static __device__ __forceinline__ long long xf_index(long long i, int rank, const long long* shape, const long long* stride) {{
    long long off = 0;
    for (int d = rank - 1; d >= 0; --d) {{
        long long s = shape[d];
        off += (i % s) * stride[d];
        i /= s;
    }}
    return off;
}}
#define XF_GRID_LOOP(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
"#
    );
    s
}

fn header(half: bool, helpers: &str) -> String {
    let mut s = prelude(half);
    if !helpers.is_empty() {
        s.push_str(helpers);
        s.push('\n');
    }
    s
}

/// The elementwise kernel of `op` over operands of dtypes `ins` (1 to 3),
/// writing dtype `out` contiguously. Operand `k` is strided operand `k` of
/// the `XfIter` parameter.
pub fn map_kernel(op: &MapOp, ins: &[DType], out: DType) -> Kernel {
    assert!((1..=3).contains(&ins.len()), "map kernels take 1 to 3 operands");
    let mut dts = ins.to_vec();
    dts.push(out);
    let name = kernel_name(&format!("map{}", ins.len()), &op.tag, &dts);
    let half = dts.iter().any(|&d| is_half(d));
    let mut s = header(half, &op.helpers);
    let vars = ["x", "y", "z"];
    let _ = write!(s, "extern \"C\" __global__ void {name}({}* __restrict__ out", storage_type(out));
    for (k, d) in ins.iter().enumerate() {
        let _ = write!(s, ", const {}* __restrict__ in{k}", storage_type(*d));
    }
    let p = if op.param.is_some() { ", const long long p" } else { "" };
    let _ = writeln!(s, ", const XfIter it{p}) {{");
    let _ = writeln!(s, "    XF_GRID_LOOP(i, it.n) {{");
    let _ = writeln!(s, "        long long off[{}];", ins.len());
    let _ = writeln!(s, "        xf_offsets(it, i, {}, off);", ins.len());
    for (k, d) in ins.iter().enumerate() {
        if op.raw {
            let _ = writeln!(s, "        const {} {} = in{k}[off[{k}]];", storage_type(*d), vars[k]);
        } else {
            let v = load(*d, &format!("in{k}[off[{k}]]"));
            let _ = writeln!(s, "        const {} {} = {v};", compute_type(*d), vars[k]);
        }
    }
    if op.raw {
        let _ = writeln!(s, "        out[i] = ({});", op.expr);
    } else {
        let _ = writeln!(s, "        out[i] = {};", store(out, &format!("({})", op.expr)));
    }
    s.push_str("    }\n}\n");
    Kernel { name, source: s, needs_half: half }
}

/// The strided-to-contiguous copy of dtype `d` (a raw one-operand map).
pub fn copy_kernel(d: DType) -> Kernel {
    map_kernel(&MapOp { tag: "copy".into(), expr: "x".into(), helpers: String::new(), raw: true, param: None }, &[d], d)
}

/// Device helpers converting between any two dtypes with the CPU's
/// semantics (`Element::from_f64(to_f64)` when either side is a float,
/// `from_i64(to_i64)` otherwise; float-to-integer truncates and saturates,
/// NaN becomes 0).
fn convert_helpers(from: DType, to: DType) -> (String, String) {
    let via_f64 = from.is_float() || to.is_float();
    let mut h = String::new();
    let src = storage_type(from);
    let dst = storage_type(to);
    let widen = if via_f64 {
        match from {
            DType::F16 => "(double)__half2float(v)",
            DType::BF16 => "(double)__bfloat162float(v)",
            DType::Bool => "(v != 0 ? 1.0 : 0.0)",
            _ => "(double)v",
        }
    } else {
        match from {
            DType::Bool => "(v != 0 ? 1LL : 0LL)",
            _ => "(long long)v",
        }
    };
    let narrow = if via_f64 {
        match to {
            DType::F32 => "(float)w".to_string(),
            DType::F64 => "w".to_string(),
            DType::F16 => "__double2half(w)".to_string(),
            DType::BF16 => "__double2bfloat16(w)".to_string(),
            DType::I32 => "(w != w) ? 0 : (w <= -2147483648.0 ? (-2147483647 - 1) : (w >= 2147483647.0 ? 2147483647 : (int)w))".to_string(),
            DType::I64 => "(w != w) ? 0LL : (w <= -9223372036854775808.0 ? (-9223372036854775807LL - 1) : (w >= 9223372036854775808.0 ? 9223372036854775807LL : (long long)w))".to_string(),
            DType::U32 => "(w != w) ? 0u : (w <= 0.0 ? 0u : (w >= 4294967295.0 ? 4294967295u : (unsigned int)w))".to_string(),
            DType::Bool => "(unsigned char)(w != 0.0 ? 1 : 0)".to_string(),
        }
    } else {
        match to {
            DType::Bool => "(unsigned char)(w != 0 ? 1 : 0)".to_string(),
            _ => format!("({dst})w"),
        }
    };
    let wty = if via_f64 { "double" } else { "long long" };
    let _ = write!(
        h,
        "static __device__ __forceinline__ {dst} xf_convert({src} v) {{\n    const {wty} w = {widen};\n    return {narrow};\n}}\n"
    );
    (h, "xf_convert(x)".to_string())
}

/// The map operation of the dtype conversion `from -> to` (the one
/// [`convert_kernel`] runs), its helper named after the dtypes
/// (`xf_convert_f32_bool`) so that several conversions can share one
/// fused kernel.
pub fn convert_map_op(from: DType, to: DType) -> MapOp {
    let (helpers, expr) = convert_helpers(from, to);
    let named = format!("xf_convert_{}_{}", from.short_name(), to.short_name());
    MapOp {
        tag: "convert".into(),
        expr: expr.replace("xf_convert", &named),
        helpers: helpers.replace("xf_convert", &named),
        raw: true,
        param: None,
    }
}

/// The dtype conversion kernel `from -> to` (strided in, contiguous out).
pub fn convert_kernel(from: DType, to: DType) -> Kernel {
    let (helpers, expr) = convert_helpers(from, to);
    map_kernel(&MapOp { tag: "convert".into(), expr, helpers, raw: true, param: None }, &[from], to)
}

/// The strided write `dst[ld] = src[ls]` of dtype `d` (operands 0 and 1).
pub fn write_kernel(d: DType) -> Kernel {
    let name = kernel_name("write", "", &[d]);
    let half = is_half(d);
    let t = storage_type(d);
    let mut s = prelude(half);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({t}* dst, const {t}* __restrict__ src, const XfIter it) {{
    XF_GRID_LOOP(i, it.n) {{
        long long off[2];
        xf_offsets(it, i, 2, off);
        dst[off[0]] = src[off[1]];
    }}
}}
"#
    );
    Kernel { name, source: s, needs_half: half }
}

/// Block-wide combine of `a` (type `acc`) through `combine`; the result is
/// valid in thread 0. Uses warp shuffles and one shared slot per warp.
fn block_combine(acc: &str) -> String {
    format!(
        r#"static __device__ __forceinline__ {acc} xf_block_combine({acc} a) {{
    __shared__ {acc} xf_sh[32];
    const unsigned lane = threadIdx.x & 31u;
    const unsigned warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) a = xf_combine(a, __shfl_down_sync(0xffffffffu, a, o));
    if (lane == 0) xf_sh[warp] = a;
    __syncthreads();
    const unsigned nw = (blockDim.x + 31u) >> 5;
    if (warp == 0) {{
        a = lane < nw ? xf_sh[lane] : xf_sh[0];
        for (int o = 16; o > 0; o >>= 1) {{
            {acc} b = __shfl_down_sync(0xffffffffu, a, o);
            if (lane + o < nw) a = xf_combine(a, b);
        }}
    }}
    __syncthreads();
    return a;
}}
"#
    )
}

/// The reduction kernel of `f` over `input`, writing `out`: one block per
/// output element (grid-stride), the block's threads striding over the
/// reduced elements. Parameters: `XfRed` (kept and reduced axes).
pub fn reduce_kernel(f: &Fold, input: DType, out: DType) -> Kernel {
    let name = kernel_name("reduce", &f.tag, &[input, out]);
    let half = is_half(input) || is_half(out);
    let acc = &f.acc;
    let mut s = header(half, &f.helpers);
    let _ = writeln!(
        s,
        "static __device__ __forceinline__ {acc} xf_combine({acc} a, {acc} b) {{ return ({}); }}",
        f.combine
    );
    s.push_str(&block_combine(acc));
    let x = load(input, "in[base + xf_index(j, p.rrank, p.rshape, p.rstride)]");
    let fin = store(out, &format!("({})", f.finish));
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({ot}* __restrict__ out, const {it}* __restrict__ in, const XfRed p) {{
    for (long long o = blockIdx.x; o < p.nout; o += gridDim.x) {{
        const long long base = p.offset + xf_index(o, p.krank, p.kshape, p.kstride);
        {acc} a = ({init});
        for (long long j = threadIdx.x; j < p.nred; j += blockDim.x) {{
            const {ct} x = {x};
            a = xf_combine(a, ({acc})x);
        }}
        a = xf_block_combine(a);
        if (threadIdx.x == 0) out[o] = {fin};
    }}
}}
"#,
        ot = storage_type(out),
        it = storage_type(input),
        init = f.init,
        ct = compute_type(input),
    );
    Kernel { name, source: s, needs_half: half }
}

/// The arg-reduction kernel ranking `input` by `r` along one axis (the one
/// reduced axis of `XfRed`), writing indices of dtype `index`.
pub fn arg_reduce_kernel(r: &Ranking, input: DType, index: DType) -> Kernel {
    let name = kernel_name("argreduce", &r.tag, &[input, index]);
    let half = is_half(input);
    let ct = compute_type(input);
    let mut s = prelude(half);
    let x = load(input, "in[base + j * p.rstride[0]]");
    let _ = write!(
        s,
        r#"static __device__ __forceinline__ bool xf_better({ct} a, {ct} b) {{ return ({better}); }}
// (value, index) candidates; index -1 is "none". NaN beats everything, then
// the better value, then the smaller index.
static __device__ __forceinline__ void xf_pick({ct}& av, long long& ai, {ct} bv, long long bi) {{
    if (bi < 0) return;
    if (ai < 0) {{ av = bv; ai = bi; return; }}
    const bool an = av != av, bn = bv != bv;
    bool take;
    if (an || bn) take = bn && (!an || bi < ai);
    else if (xf_better(bv, av)) take = true;
    else if (xf_better(av, bv)) take = false;
    else take = bi < ai;
    if (take) {{ av = bv; ai = bi; }}
}}
extern "C" __global__ void {name}({ot}* __restrict__ out, const {it}* __restrict__ in, const XfRed p) {{
    __shared__ {ct} shv[32];
    __shared__ long long shi[32];
    const unsigned lane = threadIdx.x & 31u;
    const unsigned warp = threadIdx.x >> 5;
    const unsigned nw = (blockDim.x + 31u) >> 5;
    for (long long o = blockIdx.x; o < p.nout; o += gridDim.x) {{
        const long long base = p.offset + xf_index(o, p.krank, p.kshape, p.kstride);
        {ct} av = ({ct})0;
        long long ai = -1;
        for (long long j = threadIdx.x; j < p.nred; j += blockDim.x) {{
            xf_pick(av, ai, {x}, j);
        }}
        for (int d = 16; d > 0; d >>= 1) {{
            {ct} bv = __shfl_down_sync(0xffffffffu, av, d);
            long long bi = __shfl_down_sync(0xffffffffu, ai, d);
            if (lane + d < 32u) xf_pick(av, ai, bv, bi);
        }}
        if (lane == 0) {{ shv[warp] = av; shi[warp] = ai; }}
        __syncthreads();
        if (warp == 0) {{
            av = lane < nw ? shv[lane] : shv[0];
            ai = lane < nw ? shi[lane] : -1;
            for (int d = 16; d > 0; d >>= 1) {{
                {ct} bv = __shfl_down_sync(0xffffffffu, av, d);
                long long bi = __shfl_down_sync(0xffffffffu, ai, d);
                if (lane + d < 32u) xf_pick(av, ai, bv, bi);
            }}
            if (lane == 0) out[o] = ({ot})(ai < 0 ? 0 : ai);
        }}
        __syncthreads();
    }}
}}
"#,
        better = r.better,
        ot = storage_type(index),
        it = storage_type(input),
    );
    Kernel { name, source: s, needs_half: half }
}

/// The running fold of `f` along one axis (forward or reverse): one thread
/// per line. Operand 0 of `XfIter` is the input line start, operand 1 the
/// output line start; `n`, `sx`, `so` are the axis length and strides.
pub fn cumulative_kernel(f: &Fold, input: DType, out: DType) -> Kernel {
    let name = kernel_name("cumulative", &f.tag, &[input, out]);
    let half = is_half(input) || is_half(out);
    let acc = &f.acc;
    let mut s = header(half, &f.helpers);
    let x = load(input, "in[off[0] + j * sx]");
    let fin = store(out, &format!("({})", f.finish));
    let _ = write!(
        s,
        r#"static __device__ __forceinline__ {acc} xf_combine({acc} a, {acc} b) {{ return ({combine}); }}
extern "C" __global__ void {name}({ot}* __restrict__ out, const {it}* __restrict__ in, const XfIter it, long long n, long long sx, long long so, int reverse) {{
    XF_GRID_LOOP(i, it.n) {{
        long long off[2];
        xf_offsets(it, i, 2, off);
        {acc} a = ({init});
        for (long long jj = 0; jj < n; ++jj) {{
            const long long j = reverse ? n - 1 - jj : jj;
            const {ct} x = {x};
            a = xf_combine(a, ({acc})x);
            out[off[1] + j * so] = {fin};
        }}
    }}
}}
"#,
        combine = f.combine,
        init = f.init,
        ot = storage_type(out),
        it = storage_type(input),
        ct = compute_type(input),
    );
    Kernel { name, source: s, needs_half: half }
}

/// The pad kernel of dtype `d`: output-driven; an output element is the
/// input element it lands on (low/high may be negative, `interior` spaces
/// between neighbours) or the padding value.
pub fn pad_kernel(d: DType) -> Kernel {
    let name = kernel_name("pad", "", &[d]);
    let half = is_half(d);
    let t = storage_type(d);
    let mut s = prelude(half);
    let _ = write!(
        s,
        r#"struct XfPad {{
    long long n;
    int rank;
    int pad;
    long long oshape[XF_MAXD];
    long long ishape[XF_MAXD];
    long long istride[XF_MAXD];
    long long low[XF_MAXD];
    long long step[XF_MAXD];
    long long ioffset;
    long long voffset;
}};
extern "C" __global__ void {name}({t}* __restrict__ out, const {t}* __restrict__ in, const {t}* __restrict__ val, const XfPad p) {{
    XF_GRID_LOOP(i, p.n) {{
        long long rem = i;
        long long off = p.ioffset;
        bool inside = true;
        for (int d = p.rank - 1; d >= 0; --d) {{
            const long long o = rem % p.oshape[d];
            rem /= p.oshape[d];
            const long long pos = o - p.low[d];
            if (pos < 0 || pos % p.step[d] != 0) {{ inside = false; continue; }}
            const long long q = pos / p.step[d];
            if (q >= p.ishape[d]) {{ inside = false; continue; }}
            off += q * p.istride[d];
        }}
        out[i] = inside ? in[off] : val[p.voffset];
    }}
}}
"#
    );
    Kernel { name, source: s, needs_half: half }
}

/// `out[i] = i[dim]` converted from i64 like `Element::from_i64`.
pub fn iota_kernel(d: DType) -> Kernel {
    let name = kernel_name("iota", "", &[d]);
    let half = is_half(d);
    let t = storage_type(d);
    let conv = match d {
        DType::F16 => "__double2half((double)v)".to_string(),
        DType::BF16 => "__double2bfloat16((double)v)".to_string(),
        DType::F32 => "(float)(double)v".to_string(),
        DType::F64 => "(double)v".to_string(),
        DType::Bool => "(unsigned char)(v != 0 ? 1 : 0)".to_string(),
        _ => format!("({t})v"),
    };
    let mut s = prelude(half);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({t}* __restrict__ out, long long total, long long n, long long inner) {{
    XF_GRID_LOOP(i, total) {{
        const long long v = (i / inner) % n;
        out[i] = {conv};
    }}
}}
"#
    );
    Kernel { name, source: s, needs_half: half }
}

/// Validates gather/scatter indices (contiguous i64): the smallest position
/// of an index outside `[-n, n)` is folded into `*bad` with `atomicMin`.
pub fn check_indices_kernel() -> Kernel {
    let name = kernel_name("check_indices", "", &[DType::I64]);
    let mut s = prelude(false);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}(const long long* __restrict__ idx, long long count, long long n, unsigned long long* bad) {{
    XF_GRID_LOOP(i, count) {{
        const long long v = idx[i];
        const long long j = v < 0 ? v + n : v;
        if (j < 0 || j >= n) atomicMin(bad, (unsigned long long)i);
    }}
}}
"#
    );
    Kernel { name, source: s, needs_half: false }
}

const GATHER_STRUCT: &str = r#"struct XfGather {
    long long batch;
    long long pre;
    long long n;
    long long post;
    long long count;
    long long total;
};
// The operand element that gathered element `o` ([B, PRE, I, POST]) reads
// (and that scatter-add writes): index idx[b, i] (negative counts from the
// end) along the N axis of [B, PRE, N, POST].
static __device__ __forceinline__ long long xf_gather_src(const XfGather g, const long long* idx, long long o) {
    const long long q = o % g.post;
    long long r = o / g.post;
    const long long i = r % g.count;
    r /= g.count;
    const long long p = r % g.pre;
    const long long b = r / g.pre;
    const long long v = idx[b * g.count + i];
    const long long j = v < 0 ? v + g.n : v;
    return ((b * g.pre + p) * g.n + j) * g.post + q;
}
"#;

/// Gather with `tf.gather` semantics over a contiguous operand `[B, PRE, N,
/// POST]` and contiguous, validated i64 indices `[B, I]`.
pub fn gather_kernel(d: DType) -> Kernel {
    let name = kernel_name("gather", "", &[d]);
    let half = is_half(d);
    let t = storage_type(d);
    let mut s = prelude(half);
    s.push_str(GATHER_STRUCT);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({t}* __restrict__ out, const {t}* __restrict__ x, const long long* __restrict__ idx, const XfGather g) {{
    XF_GRID_LOOP(o, g.total) {{
        out[o] = x[xf_gather_src(g, idx, o)];
    }}
}}
"#
    );
    Kernel { name, source: s, needs_half: half }
}

/// The dtypes [`scatter_add_kernel`] supports natively (atomics); the half
/// types accumulate through f32 like the CPU path.
pub fn scatter_add_supports(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::I32 | DType::I64 | DType::U32)
}

/// Scatter-add of contiguous updates `[B, PRE, I, POST]` into a contiguous
/// output (a copy of the operand) with atomics. `None` for dtypes without
/// a native atomic add (see [`scatter_add_supports`]).
pub fn scatter_add_kernel(d: DType) -> Option<Kernel> {
    if !scatter_add_supports(d) {
        return None;
    }
    let name = kernel_name("scatter_add", "", &[d]);
    let t = storage_type(d);
    let add = match d {
        DType::I64 => "atomicAdd((unsigned long long*)dst, (unsigned long long)u)",
        _ => "atomicAdd(dst, u)",
    };
    let mut s = prelude(false);
    s.push_str(GATHER_STRUCT);
    let _ = write!(
        s,
        r#"extern "C" __global__ void {name}({t}* out, const long long* __restrict__ idx, const {t}* __restrict__ upd, const XfGather g) {{
    XF_GRID_LOOP(o, g.total) {{
        {t}* dst = out + xf_gather_src(g, idx, o);
        const {t} u = upd[o];
        {add};
    }}
}}
"#
    );
    Some(Kernel { name, source: s, needs_half: false })
}

/// A tiled batched GEMM over strided `a: [B, M, K]`, `b: [B, K, N]` into a
/// contiguous `[B, M, N]`: the fallback when cuBLAS is absent and the path
/// for integers (wrapping arithmetic). Floats accumulate in float (f64 in
/// double) and round once, like the CPU. `None` for bool.
pub fn gemm_kernel(d: DType) -> Option<Kernel> {
    let (acc, mac) = match d {
        DType::Bool => return None,
        DType::F32 | DType::F16 | DType::BF16 => ("float", "acc += xa * xb"),
        DType::F64 => ("double", "acc += xa * xb"),
        DType::I32 | DType::U32 => ("unsigned int", "acc += xa * xb"),
        DType::I64 => ("unsigned long long", "acc += xa * xb"),
    };
    let name = kernel_name("gemm", "", &[d]);
    let half = is_half(d);
    let t = storage_type(d);
    let la = if d.is_float() { load(d, "a[ia]") } else { format!("({acc})a[ia]") };
    let lb = if d.is_float() { load(d, "b[ib]") } else { format!("({acc})b[ib]") };
    let fin = if d.is_float() { store(d, "acc") } else { format!("({t})acc") };
    let mut s = prelude(half);
    let _ = write!(
        s,
        r#"struct XfGemm {{
    long long batch, m, n, k;
    long long as0, as1, as2;
    long long bs0, bs1, bs2;
    long long aoff, boff;
}};
#define XF_TILE 16
extern "C" __global__ void {name}({t}* __restrict__ c, const {t}* __restrict__ a, const {t}* __restrict__ b, const XfGemm p) {{
    __shared__ {acc} ta[XF_TILE][XF_TILE + 1];
    __shared__ {acc} tb[XF_TILE][XF_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (long long bi = blockIdx.z; bi < p.batch; bi += gridDim.z) {{
        for (long long rt = blockIdx.y; rt * XF_TILE < p.m; rt += gridDim.y) {{
            const long long row = rt * XF_TILE + ty;
            const long long col = (long long)blockIdx.x * XF_TILE + tx;
            {acc} acc = 0;
            for (long long kt = 0; kt < p.k; kt += XF_TILE) {{
                if (row < p.m && kt + tx < p.k) {{
                    const long long ia = p.aoff + bi * p.as0 + row * p.as1 + (kt + tx) * p.as2;
                    ta[ty][tx] = {la};
                }} else {{
                    ta[ty][tx] = 0;
                }}
                if (col < p.n && kt + ty < p.k) {{
                    const long long ib = p.boff + bi * p.bs0 + (kt + ty) * p.bs1 + col * p.bs2;
                    tb[ty][tx] = {lb};
                }} else {{
                    tb[ty][tx] = 0;
                }}
                __syncthreads();
                for (int kk = 0; kk < XF_TILE; ++kk) {{
                    const {acc} xa = ta[ty][kk];
                    const {acc} xb = tb[kk][tx];
                    {mac};
                }}
                __syncthreads();
            }}
            if (row < p.m && col < p.n) c[(bi * p.m + row) * p.n + col] = {fin};
        }}
    }}
}}
"#
    );
    Some(Kernel { name, source: s, needs_half: half })
}

/// Threefry-2x32 (20 rounds) over four strided u32 operands (key0, key1,
/// counter0, counter1), two contiguous u32 outputs; the algorithm of
/// `crate::cpu::random::threefry2x32`.
pub fn threefry_kernel() -> Kernel {
    let name = kernel_name("threefry2x32", "", &[DType::U32]);
    let mut s = prelude(false);
    let _ = write!(
        s,
        r#"static __device__ __forceinline__ unsigned int xf_rotl(unsigned int x, unsigned int r) {{ return (x << r) | (x >> (32u - r)); }}
extern "C" __global__ void {name}(unsigned int* __restrict__ y0, unsigned int* __restrict__ y1,
        const unsigned int* __restrict__ k0p, const unsigned int* __restrict__ k1p,
        const unsigned int* __restrict__ x0p, const unsigned int* __restrict__ x1p, const XfIter it) {{
    const unsigned int rot[2][4] = {{{{13u, 15u, 26u, 6u}}, {{17u, 29u, 16u, 24u}}}};
    XF_GRID_LOOP(i, it.n) {{
        long long off[4];
        xf_offsets(it, i, 4, off);
        const unsigned int k0 = k0p[off[0]], k1 = k1p[off[1]];
        const unsigned int ks[3] = {{k0, k1, k0 ^ k1 ^ 0x1BD11BDAu}};
        unsigned int x0 = x0p[off[2]] + ks[0];
        unsigned int x1 = x1p[off[3]] + ks[1];
        for (int r = 0; r < 5; ++r) {{
            for (int j = 0; j < 4; ++j) {{
                x0 += x1;
                x1 = xf_rotl(x1, rot[r % 2][j]) ^ x0;
            }}
            x0 += ks[(r + 1) % 3];
            x1 += ks[(r + 2) % 3] + (unsigned int)(r + 1);
        }}
        y0[i] = x0;
        y1[i] = x1;
    }}
}}
"#
    );
    Kernel { name, source: s, needs_half: false }
}

/// Every structural kernel this crate generates by itself, for every dtype
/// it supports (the operation-specific families come from the caller's
/// [`MapOp`], [`Fold`] and [`Ranking`] values).
pub fn builtin_catalog() -> Vec<Kernel> {
    let mut v = Vec::new();
    for from in DType::ALL {
        for to in DType::ALL {
            v.push(convert_kernel(from, to));
        }
    }
    for d in DType::ALL {
        v.push(copy_kernel(d));
        v.push(write_kernel(d));
        v.push(pad_kernel(d));
        v.push(iota_kernel(d));
        v.push(gather_kernel(d));
        v.extend(scatter_add_kernel(d));
        v.extend(gemm_kernel(d));
        v.extend(conv_kernel(d));
        for max in [true, false] {
            v.extend(select_gather_kernel(max, d));
            v.extend(window_select_kernel(max, d));
        }
        v.extend(window_scatter_kernel(d));
    }
    v.push(check_indices_kernel());
    v.push(threefry_kernel());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_derived_and_unique() {
        let cat = builtin_catalog();
        let mut names: Vec<&str> = cat.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate kernel names");
        for k in &cat {
            assert!(k.source.contains(&format!("void {}(", k.name)), "{} not defined in its source", k.name);
            assert_eq!(k.needs_half, k.source.contains("cuda_fp16.h"), "{}", k.name);
        }
        assert_eq!(convert_kernel(DType::F16, DType::I32).name, "xf_map1_convert_f16_i32");
    }
}
