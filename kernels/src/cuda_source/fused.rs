//! Fused elementwise kernels: one generated kernel runs a chain of
//! elementwise ops (each given as the [`MapOp`] its unfused kernel uses)
//! over operands of one shape, writing only the chain's outputs.
//!
//! NOTE: [fused cuda kernels] Each op becomes a device function
//! `xf_fop<j>` whose body is its unfused map kernel's body: operands
//! widened from storage to the compute type (`load`), the op's expression,
//! the result rounded to its storage dtype (`store`), or, for `raw` ops
//! (select, convert), the expression on storage values. Values flow from
//! op to op in their storage type, so every op rounds exactly where its
//! unfused kernel rounds and the fused kernel's results equal the unfused
//! kernels' bit for bit. Nothing contracts: the kernels compile with
//! `--fmad=false` (`cuda::compile`), as the unfused ones, so `a*b+c` is a
//! multiply rounded to storage and an add, never an FMA, fused or not. A
//! run-time parameter `p` (integer powers, polygamma) is a constant of the
//! op's function. Each distinct helper text is emitted once, in a
//! namespace of its own (two ops' helpers may define one function
//! differently, such as `xf_upow` for two integer types) that also holds
//! the functions of the ops using it, and is made visible at global scope
//! (`using namespace`), so a helper whose include guard skipped its text
//! in a later namespace is found where it was first defined.
//!
//! Operands are read through their layouts (offset and strides, stride 0
//! on broadcast axes) from an `XfFused` parameter shaped like the map
//! kernels' `XfIter` but with room for [`MAX_FUSED_INPUTS`] operands;
//! outputs are contiguous. The kernel's name is `xf_fused<ops>_<hash>`,
//! the hash (FNV-1a, stable across builds) of the rest of its source, so
//! equal groups share one name, distinct sources get distinct names, and
//! the per-device cache of compiled functions (keyed by name) caches by
//! source.

use super::{header, is_half, load, storage_type, store, DType, Kernel, MapOp, MAX_DIMS};
use std::fmt::Write;

/// Most operands of one fused kernel (the `XfFused` parameter holds a
/// stride row per operand: 2.3 KB of the 4 KB of kernel parameters).
pub const MAX_FUSED_INPUTS: usize = 16;

/// Most outputs of one fused kernel (one pointer argument each).
pub const MAX_FUSED_OUTPUTS: usize = 8;

/// Where an op of a fused kernel reads an operand.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FusedArg {
    /// The kernel's input of this index.
    In(u32),
    /// The result of the kernel's op of this index (an earlier one).
    Op(u32),
}

/// One op of a fused kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedKernelOp {
    /// The op's map operation (the one its unfused kernel runs).
    pub op: MapOp,
    /// Its operands (1 to 3).
    pub args: Vec<FusedArg>,
    /// Its result dtype.
    pub out: DType,
}

/// A stable 64-bit FNV-1a hash.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The fused kernel of `ops` over inputs of dtypes `ins`, writing the
/// results of the ops `outputs` (in that order, contiguous). Arguments:
/// the output pointers, the input pointers, then `XfFused`.
///
/// # Panics
/// If the group is empty or over the limits ([`MAX_FUSED_INPUTS`],
/// [`MAX_FUSED_OUTPUTS`]), an op reads a later op or a missing input, or
/// has other than 1 to 3 operands.
pub fn fused_kernel(ins: &[DType], ops: &[FusedKernelOp], outputs: &[u32]) -> Kernel {
    assert!(!ops.is_empty() && !outputs.is_empty(), "a fused kernel needs ops and outputs");
    assert!(!ins.is_empty() && ins.len() <= MAX_FUSED_INPUTS, "{} fused inputs", ins.len());
    assert!(outputs.len() <= MAX_FUSED_OUTPUTS, "{} fused outputs", outputs.len());
    let dtype_of = |a: FusedArg, j: usize| match a {
        FusedArg::In(k) => ins[k as usize],
        FusedArg::Op(m) => {
            assert!((m as usize) < j, "fused op {j} reads op {m}");
            ops[m as usize].out
        }
    };
    let half = ins.iter().chain(ops.iter().map(|o| &o.out)).any(|&d| is_half(d));
    // each distinct helper text once, in a namespace of its own (two ops'
    // helpers may define one name differently), made visible at global
    // scope (a helper's include guard may skip its text in a later
    // namespace, whose op then finds the earlier definition)
    let mut helpers: Vec<&str> = Vec::new();
    let mut body = String::new();
    for o in ops {
        if !o.op.helpers.is_empty() && !helpers.contains(&o.op.helpers.as_str()) {
            let _ = writeln!(
                body,
                "namespace xf_h{} {{\n{}\n}}\nusing namespace xf_h{};",
                helpers.len(),
                o.op.helpers,
                helpers.len()
            );
            helpers.push(&o.op.helpers);
        }
    }
    let _ = writeln!(
        body,
        "#define XF_FUSED_MAXIN {MAX_FUSED_INPUTS}\nstruct XfFused {{\n    long long n;\n    int rank;\n    int pad;\n    \
         long long shape[XF_MAXD];\n    long long strides[XF_FUSED_MAXIN][XF_MAXD];\n    long long offsets[XF_FUSED_MAXIN];\n}};"
    );
    // each op's function lives in its helpers' namespace, where its
    // helper calls find that namespace's definitions first
    let space = |o: &FusedKernelOp| helpers.iter().position(|h| !o.op.helpers.is_empty() && *h == o.op.helpers);
    let vars = ["x", "y", "z"];
    for (j, o) in ops.iter().enumerate() {
        assert!((1..=3).contains(&o.args.len()), "fused op {j} has {} operands", o.args.len());
        if let Some(h) = space(o) {
            let _ = writeln!(body, "namespace xf_h{h} {{");
        }
        let _ = write!(body, "static __device__ __forceinline__ {} xf_fop{j}(", storage_type(o.out));
        for (k, a) in o.args.iter().enumerate() {
            let sep = if k == 0 { "" } else { ", " };
            let _ = write!(body, "{sep}const {} {}_s", storage_type(dtype_of(*a, j)), vars[k]);
        }
        body.push_str(") {\n");
        for (k, a) in o.args.iter().enumerate() {
            let d = dtype_of(*a, j);
            if o.op.raw {
                let _ = writeln!(body, "    const {} {v} = {v}_s;", storage_type(d), v = vars[k]);
            } else {
                let _ = writeln!(
                    body,
                    "    const {} {v} = {};",
                    super::compute_type(d),
                    load(d, &format!("{}_s", vars[k])),
                    v = vars[k]
                );
            }
        }
        if let Some(p) = o.op.param {
            let _ = writeln!(body, "    const long long p = {p}LL;");
            body.push_str("    (void)p;\n");
        }
        if o.op.raw {
            let _ = writeln!(body, "    return ({});\n}}", o.op.expr);
        } else {
            let _ = writeln!(body, "    return {};\n}}", store(o.out, &format!("({})", o.op.expr)));
        }
        if space(o).is_some() {
            body.push_str("}\n");
        }
    }
    // the entry point, named after the hash of everything above and below
    let mut entry = String::from("(");
    for (m, &j) in outputs.iter().enumerate() {
        assert!((j as usize) < ops.len(), "fused output {m} is op {j} of {}", ops.len());
        let _ = write!(entry, "{}* __restrict__ out{m}, ", storage_type(ops[j as usize].out));
    }
    for (k, d) in ins.iter().enumerate() {
        let _ = write!(entry, "const {}* __restrict__ in{k}, ", storage_type(*d));
    }
    let nin = ins.len();
    let _ = writeln!(entry, "const XfFused it) {{\n    XF_GRID_LOOP(i, it.n) {{\n        long long off[{nin}];");
    let _ = writeln!(
        entry,
        "        for (int k = 0; k < {nin}; ++k) off[k] = it.offsets[k];\n        long long r = i;\n        \
         for (int d = it.rank - 1; d >= 0; --d) {{\n            const long long s = it.shape[d];\n            \
         const long long q = r % s;\n            r /= s;\n            \
         for (int k = 0; k < {nin}; ++k) off[k] += q * it.strides[k][d];\n        }}"
    );
    for (k, d) in ins.iter().enumerate() {
        let _ = writeln!(entry, "        const {} a{k} = in{k}[off[{k}]];", storage_type(*d));
    }
    for (j, o) in ops.iter().enumerate() {
        let args: Vec<String> = o
            .args
            .iter()
            .map(|a| match a {
                FusedArg::In(k) => format!("a{k}"),
                FusedArg::Op(m) => format!("v{m}"),
            })
            .collect();
        let f = match space(o) {
            Some(h) => format!("xf_h{h}::xf_fop{j}"),
            None => format!("xf_fop{j}"),
        };
        let _ = writeln!(entry, "        const {} v{j} = {f}({});", storage_type(o.out), args.join(", "));
    }
    for (m, &j) in outputs.iter().enumerate() {
        let _ = writeln!(entry, "        out{m}[i] = v{j};");
    }
    entry.push_str("    }\n}\n");
    let hash = fnv1a(format!("{half}\n{body}\n{entry}").as_bytes());
    let name = format!("xf_fused{}_{hash:016x}", ops.len());
    let mut s = header(half, "");
    debug_assert!(s.contains(&format!("#define XF_MAXD {MAX_DIMS}")));
    s.push_str(&body);
    let _ = write!(s, "extern \"C\" __global__ void {name}{entry}");
    Kernel { name, source: s, needs_half: half }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(tag: &str, expr: &str, raw: bool, args: &[FusedArg], out: DType) -> FusedKernelOp {
        FusedKernelOp {
            op: MapOp { tag: tag.into(), expr: expr.into(), helpers: String::new(), raw, param: None },
            args: args.to_vec(),
            out,
        }
    }

    /// Names are derived from the source: equal groups, equal names;
    /// another dtype or op, another name; the source defines the name.
    #[test]
    fn names_follow_the_source() {
        use FusedArg::{In, Op};
        let chain = |d: DType, e: &str| {
            let ops = vec![
                op("sin", "sinf(x)", false, &[In(0)], d),
                op("mul", e, false, &[Op(0), In(1)], d),
                op("gt", "x > y", false, &[Op(1), In(0)], DType::Bool),
                op("select", "x ? y : z", true, &[Op(2), Op(1), In(1)], d),
            ];
            fused_kernel(&[d, d], &ops, &[3, 1])
        };
        let a = chain(DType::F32, "x * y");
        assert_eq!(a, chain(DType::F32, "x * y"));
        assert!(a.name.starts_with("xf_fused4_") && a.name.len() == "xf_fused4_".len() + 16, "{}", a.name);
        assert!(a.source.contains(&format!("void {}(", a.name)));
        assert_ne!(a.name, chain(DType::F64, "x * y").name);
        assert_ne!(a.name, chain(DType::F32, "x + y").name);
        let h = chain(DType::F16, "x * y");
        assert!(h.needs_half && h.source.contains("cuda_fp16.h"));
        assert!(!a.needs_half);
        // only the outputs are stored
        assert_eq!(a.source.matches("out0[i] = v3;").count(), 1);
        assert_eq!(a.source.matches("out1[i] = v1;").count(), 1);
        assert!(!a.source.contains("out2"));
    }
}
