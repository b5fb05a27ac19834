//! The convolution fallback kernel: `conv_general_dilated` in the canonical
//! geometry of [`crate::conv_geom`], every option (strides, negative and
//! asymmetric padding, lhs and rhs dilation, feature and batch groups),
//! one thread per output element. `crate::cuda::exec::conv_forward` runs it
//! when cuDNN is absent or declines a case.

use super::{is_half, kernel_name, load, prelude, storage_type, store, Kernel};
use crate::conv_geom::{ConvGeometry, SPATIAL};
use crate::dtype::DType;
use std::fmt::Write;

/// The `XfConv` parameter struct (its layout is [`ConvParams`]'s): 10
/// scalars, then 7 per-axis triples, all `long long`.
pub const CONV_STRUCT: &str = r#"struct XfConv {
    long long total;  // output elements
    long long threads; // work items: output positions x blocks of rb features
    long long rb;     // output features per work item (1 to XF_CONV_RB)
    long long o;      // output features O
    long long og;     // output features per group
    long long c;      // lhs features C
    long long cg;     // lhs features per feature group (rhs input features)
    long long fg;     // feature_group_count
    long long bg;     // batch_group_count
    long long nper;   // lhs batch per batch group, N / bg
    long long in[3], k[3], out[3], stride[3], plo[3], ldil[3], rdil[3];
};
"#;

/// The launch parameters of [`conv_kernel`], laid out as `XfConv`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvParams {
    /// Output elements.
    pub total: i64,
    /// Work items (threads of the grid-stride loop): each computes `rb`
    /// output features of one group at one output position.
    pub threads: i64,
    /// Output features per work item, `min(og, CONV_RB)`.
    pub rb: i64,
    /// Output features `O`.
    pub o: i64,
    /// Output features per group (at least 1).
    pub og: i64,
    /// lhs features `C`.
    pub c: i64,
    /// lhs features per feature group.
    pub cg: i64,
    /// `feature_group_count`.
    pub fg: i64,
    /// `batch_group_count`.
    pub bg: i64,
    /// lhs examples per batch group, `N / bg`.
    pub nper: i64,
    /// lhs spatial sizes.
    pub input: [i64; SPATIAL],
    /// rhs spatial sizes.
    pub kernel: [i64; SPATIAL],
    /// Output spatial sizes.
    pub output: [i64; SPATIAL],
    /// Window strides.
    pub stride: [i64; SPATIAL],
    /// Padding before each axis of the dilated lhs (negative crops).
    pub pad_lo: [i64; SPATIAL],
    /// lhs dilation.
    pub lhs_dilation: [i64; SPATIAL],
    /// rhs dilation.
    pub rhs_dilation: [i64; SPATIAL],
}

/// The most output features one work item of [`conv_kernel`] computes
/// (each lhs value it loads serves all of them).
pub const CONV_RB: usize = 4;

/// The parameters of [`conv_kernel`] for a checked geometry `g`.
pub fn conv_params(g: &ConvGeometry) -> ConvParams {
    let tri = |a: [usize; SPATIAL]| a.map(|v| v as i64);
    let og = g.group_out_features().max(1);
    let rb = og.min(CONV_RB);
    let groups = g.out_features / og;
    let threads = g.out_batch() * groups * og.div_ceil(rb) * g.output.iter().product::<usize>();
    ConvParams {
        total: g.out_len() as i64,
        threads: threads as i64,
        rb: rb as i64,
        o: g.out_features as i64,
        og: og as i64,
        c: g.in_features as i64,
        cg: g.group_in_features() as i64,
        fg: g.feature_groups as i64,
        bg: g.batch_groups as i64,
        nper: g.out_batch() as i64,
        input: tri(g.input),
        kernel: tri(g.kernel),
        output: tri(g.output),
        stride: tri(g.stride),
        pad_lo: g.pad_lo,
        lhs_dilation: tri(g.lhs_dilation),
        rhs_dilation: tri(g.rhs_dilation),
    }
}

/// The dtypes [`conv_kernel`] is generated for.
pub const CONV_DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// The direct convolution of dtype `d` (f16/bf16 accumulate in f32, f64 in
/// double): `out[nb, f, od, oh, ow] = sum over the group's input features
/// and the valid taps of lhs * rhs`, contiguous operands in the canonical
/// layouts. One work item computes up to [`CONV_RB`] output features of
/// one group at one output position (adjacent items: adjacent positions,
/// so loads and stores coalesce and the weights are uniform across a
/// warp). `None` for non-float dtypes.
pub fn conv_kernel(d: DType) -> Option<Kernel> {
    if !CONV_DTYPES.contains(&d) {
        return None;
    }
    let name = kernel_name("conv", "fwd", &[d]);
    let half = is_half(d);
    let t = storage_type(d);
    let acc = if d == DType::F64 { "double" } else { "float" };
    let xv = load(d, "x[ci * isp + xo]");
    let wv = load(d, "w[j * wstep + ci * ksp + wo]");
    let fin = store(d, "a[j]");
    let mut s = prelude(half);
    s.push_str(CONV_STRUCT);
    let _ = write!(
        s,
        r#"#define XF_CONV_RB {CONV_RB}
// The lhs coordinate that output position `o` and tap `k` read along
// axis `ax`, or -1 on padding or on a hole of the lhs dilation.
static __device__ __forceinline__ long long xf_conv_in(const XfConv& p, int ax, long long o, long long k) {{
    long long q = o * p.stride[ax] + k * p.rdil[ax] - p.plo[ax];
    if (q < 0 || q % p.ldil[ax] != 0) return -1;
    q /= p.ldil[ax];
    return q < p.in[ax] ? q : -1;
}}
extern "C" __global__ void {name}({t}* __restrict__ out, const {t}* __restrict__ lhs, const {t}* __restrict__ rhs, const XfConv p) {{
    const long long isp = p.in[0] * p.in[1] * p.in[2];
    const long long ksp = p.k[0] * p.k[1] * p.k[2];
    const long long osp = p.out[0] * p.out[1] * p.out[2];
    const long long nfb = (p.og + p.rb - 1) / p.rb;  // feature blocks per group
    const long long blocks = (p.o / p.og) * nfb;      // feature blocks in all
    const long long wstep = p.cg * ksp;               // one output feature's weights
    XF_GRID_LOOP(i, p.threads) {{
        long long r = i;
        const long long ow = r % p.out[2]; r /= p.out[2];
        const long long oh = r % p.out[1]; r /= p.out[1];
        const long long od = r % p.out[0]; r /= p.out[0];
        const long long fb = r % blocks;
        const long long nb = r / blocks;
        // Group g of the output reads feature group g (fg > 1) or batch
        // group g (bg > 1, examples nb + g * N/bg); one of fg, bg is 1.
        const long long g = fb / nfb;
        const long long j0 = (fb % nfb) * p.rb;
        const long long f0 = g * p.og + j0;
        const int cnt = (int)(p.og - j0 < p.rb ? p.og - j0 : p.rb);
        const long long n = nb + (p.bg > 1 ? g * p.nper : 0);
        const long long c0 = p.fg > 1 ? g * p.cg : 0;
        const {t}* x = lhs + (n * p.c + c0) * isp;
        const {t}* w = rhs + f0 * wstep;
        {acc} a[XF_CONV_RB];
        for (int j = 0; j < XF_CONV_RB; ++j) a[j] = 0;
        for (long long kd = 0; kd < p.k[0]; ++kd) {{
            const long long id = xf_conv_in(p, 0, od, kd);
            if (id < 0) continue;
            for (long long kh = 0; kh < p.k[1]; ++kh) {{
                const long long ih = xf_conv_in(p, 1, oh, kh);
                if (ih < 0) continue;
                for (long long kw = 0; kw < p.k[2]; ++kw) {{
                    const long long iw = xf_conv_in(p, 2, ow, kw);
                    if (iw < 0) continue;
                    const long long xo = (id * p.in[1] + ih) * p.in[2] + iw;
                    const long long wo = (kd * p.k[1] + kh) * p.k[2] + kw;
                    for (long long ci = 0; ci < p.cg; ++ci) {{
                        const {acc} xv = ({acc})({xv});
#pragma unroll
                        for (int j = 0; j < XF_CONV_RB; ++j) {{
                            if (j < cnt) a[j] += xv * ({acc})({wv});
                        }}
                    }}
                }}
            }}
        }}
        const long long o0 = (nb * p.o + f0) * osp + (od * p.out[1] + oh) * p.out[2] + ow;
        for (int j = 0; j < XF_CONV_RB; ++j) {{
            if (j < cnt) out[o0 + j * osp] = {fin};
        }}
    }}
}}
"#
    );
    Some(Kernel { name, source: s, needs_half: half })
}

/// Geometries covering every option, their data and a plain reference
/// loop, shared by the CPU emulation below and the device tests.
#[cfg(test)]
pub(crate) mod test_cases {
    use crate::conv_geom::ConvGeometry;

    /// A geometry from `(N, C, O, fg, bg)`, the spatial sizes, strides,
    /// `(lo, hi)` padding and dilations (the output sizes follow).
    pub(crate) fn geom(
        (n, c, o, fg, bg): (usize, usize, usize, usize, usize),
        input: [usize; 3],
        kernel: [usize; 3],
        stride: [usize; 3],
        pad: [(i64, i64); 3],
        ldil: [usize; 3],
        rdil: [usize; 3],
    ) -> ConvGeometry {
        ConvGeometry {
            batch: n,
            in_features: c,
            out_features: o,
            feature_groups: fg,
            batch_groups: bg,
            input,
            kernel,
            output: [0; 3],
            stride,
            pad_lo: pad.map(|p| p.0),
            pad_hi: pad.map(|p| p.1),
            lhs_dilation: ldil,
            rhs_dilation: rdil,
        }
        .with_output()
        .expect("a valid geometry")
    }

    /// Named geometries covering every option.
    pub(crate) fn cases() -> Vec<(&'static str, ConvGeometry)> {
        let z = [(0, 0); 3];
        let one = [1; 3];
        vec![
            ("1-d plain", geom((2, 3, 4, 1, 1), [1, 1, 9], [1, 1, 3], one, z, one, one)),
            (
                "2-d SAME stride 2",
                geom((2, 3, 5, 1, 1), [1, 7, 8], [1, 3, 3], [1, 2, 2], [(0, 0), (1, 1), (1, 1)], one, one),
            ),
            (
                "2-d asymmetric, negative padding",
                geom((1, 2, 3, 1, 1), [1, 6, 7], [1, 2, 3], one, [(0, 0), (2, 0), (-1, 1)], one, one),
            ),
            (
                "2-d lhs dilation",
                geom((2, 2, 3, 1, 1), [1, 4, 5], [1, 3, 3], one, [(0, 0), (2, 2), (1, 2)], [1, 2, 3], one),
            ),
            (
                "2-d rhs dilation",
                geom((1, 3, 2, 1, 1), [1, 9, 9], [1, 3, 2], [1, 1, 2], [(0, 0), (2, 2), (0, 1)], one, [1, 2, 3]),
            ),
            (
                "2-d feature groups",
                geom((2, 6, 9, 3, 1), [1, 5, 6], [1, 3, 2], one, [(0, 0), (1, 1), (0, 0)], one, one),
            ),
            (
                "2-d groups of 6 features",
                geom((2, 4, 12, 2, 1), [1, 5, 5], [1, 2, 3], [1, 1, 2], [(0, 0), (0, 1), (1, 1)], one, one),
            ),
            (
                "2-d depthwise",
                geom((2, 4, 8, 4, 1), [1, 6, 6], [1, 3, 3], [1, 2, 1], [(0, 0), (1, 1), (1, 1)], one, one),
            ),
            ("2-d batch groups", geom((6, 2, 6, 1, 3), [1, 5, 4], [1, 2, 2], one, [(0, 0), (0, 1), (1, 0)], one, one)),
            (
                "3-d everything",
                geom((2, 4, 4, 2, 1), [3, 4, 5], [2, 2, 3], [2, 1, 2], [(1, 0), (0, 2), (-1, 2)], [1, 2, 1], [1, 1, 2]),
            ),
            (
                "3-d batch groups, dilations",
                geom((4, 2, 4, 1, 2), [3, 3, 4], [2, 2, 2], [1, 2, 1], [(1, 1), (0, 0), (1, 1)], [2, 1, 1], [1, 2, 1]),
            ),
            ("window larger than the input", geom((1, 2, 2, 1, 1), [1, 2, 2], [1, 3, 3], one, z, one, one)),
            ("no input features", geom((2, 0, 3, 1, 1), [1, 3, 3], [1, 2, 2], one, z, one, one)),
        ]
    }

    /// `n` deterministic values in [-1, 1) (xorshift).
    pub(crate) fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            })
            .collect()
    }

    /// The plain loop over `g`: per output element, the value and the sum
    /// of the absolute products (the scale of its rounding error).
    pub(crate) fn reference(g: &ConvGeometry, x: &[f64], w: &[f64]) -> Vec<(f64, f64)> {
        let isp: usize = g.input.iter().product();
        let ksp: usize = g.kernel.iter().product();
        let (cg, og) = (g.group_in_features(), g.group_out_features());
        let mut out = Vec::with_capacity(g.out_len());
        for nb in 0..g.out_batch() {
            for f in 0..g.out_features {
                let grp = f / og;
                let n = if g.batch_groups > 1 { nb + grp * g.out_batch() } else { nb };
                let c0 = if g.feature_groups > 1 { grp * cg } else { 0 };
                for od in 0..g.output[0] {
                    for oh in 0..g.output[1] {
                        for ow in 0..g.output[2] {
                            let (mut v, mut a) = (0.0, 0.0);
                            for ci in 0..cg {
                                for kd in 0..g.kernel[0] {
                                    for kh in 0..g.kernel[1] {
                                        for kw in 0..g.kernel[2] {
                                            let (Some(i), Some(j), Some(k)) = (
                                                g.input_index(0, od, kd),
                                                g.input_index(1, oh, kh),
                                                g.input_index(2, ow, kw),
                                            ) else {
                                                continue;
                                            };
                                            let xi = (n * g.in_features + c0 + ci) * isp
                                                + (i * g.input[1] + j) * g.input[2]
                                                + k;
                                            let wi = (f * cg + ci) * ksp + (kd * g.kernel[1] + kh) * g.kernel[2] + kw;
                                            v += x[xi] * w[wi];
                                            a += (x[xi] * w[wi]).abs();
                                        }
                                    }
                                }
                            }
                            out.push((v, a));
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::test_cases::{cases, geom, reference, values};
    use super::*;

    #[test]
    fn conv_kernels_exist_for_the_float_dtypes_only() {
        for d in DType::ALL {
            let k = conv_kernel(d);
            assert_eq!(k.is_some(), CONV_DTYPES.contains(&d), "{d:?}");
            if let Some(k) = k {
                assert_eq!(k.name, format!("xf_conv_fwd_{}", d.short_name()));
                assert!(k.source.contains(CONV_STRUCT));
                assert_eq!(k.needs_half, matches!(d, DType::F16 | DType::BF16));
            }
        }
        // Half types accumulate in float, f64 in double.
        assert!(conv_kernel(DType::BF16).unwrap().source.contains("float a[XF_CONV_RB];"));
        assert!(conv_kernel(DType::F64).unwrap().source.contains("double a[XF_CONV_RB];"));
    }

    #[test]
    fn params_follow_the_geometry() {
        let g = geom((4, 6, 9, 3, 1), [1, 7, 5], [1, 3, 2], [1, 2, 1], [(0, 0), (1, -1), (2, 0)], [1, 1, 2], [1, 2, 1]);
        let p = conv_params(&g);
        assert_eq!((p.o, p.og, p.c, p.cg, p.fg, p.bg, p.nper), (9, 3, 6, 2, 3, 1, 4));
        // 7 + 1 - 1 = 7 wide, window 5, stride 2: 2; 9 + 2 = 11 wide, window 2: 10.
        assert_eq!(p.output, [1, 2, 10]);
        assert_eq!(p.total, 4 * 9 * 2 * 10);
        // og = 3: one block of 3 features per group and position.
        assert_eq!((p.rb, p.threads), (3, 4 * 3 * 2 * 10));
        assert_eq!(p.pad_lo, [0, 1, 2]);
        // Batch groups: the output batch is N / bg, the groups split O.
        let g = geom((6, 2, 4, 1, 2), [1, 1, 5], [1, 1, 3], [1; 3], [(0, 0); 3], [1; 3], [1; 3]);
        let p = conv_params(&g);
        assert_eq!((p.og, p.cg, p.nper, p.total), (2, 2, 3, 3 * 4 * 3));
        assert_eq!((p.rb, p.threads), (2, 3 * 2 * 3));
        // og = 10 in blocks of 4: 4, 4, 2.
        let g = geom((2, 3, 10, 1, 1), [1, 1, 5], [1, 1, 3], [1; 3], [(0, 0); 3], [1; 3], [1; 3]);
        let p = conv_params(&g);
        assert_eq!((p.rb, p.threads), (4, 2 * 3 * 3));
        // XfConv: 10 scalars and 7 triples of i64, no padding.
        assert_eq!(std::mem::size_of::<ConvParams>(), 8 * (10 + 7 * 3));
    }

    /// The generated kernel run on the host (`crate::cuda_host`: compiled
    /// by g++ against the CUDA shim, launched as `cuda_launch::conv`'s
    /// plan, as `cuda::exec` launches it), in f64 and f32, against the
    /// plain loop for every geometry in [`cases`]. Prints "skipped: g++
    /// not found" where g++ is missing.
    #[test]
    fn conv_kernel_matches_the_reference_on_the_cpu_under_gcc() {
        use crate::cuda_host::{Job, Outcome};
        use crate::dtype::CpuBuffer;
        let mut runs = Vec::new();
        for (d, tol) in [(DType::F64, 1e-13), (DType::F32, 2e-6)] {
            for (seed, (name, g)) in cases().into_iter().enumerate() {
                let (x, w) = (values(g.lhs_len(), 2 * seed as u64 + 1), values(g.rhs_len(), 2 * seed as u64 + 2));
                // Rounded to the kernel's dtype first, as the device sees them.
                let buf = |v: &[f64]| match d {
                    DType::F32 => CpuBuffer::F32(v.iter().map(|&a| a as f32).collect()),
                    _ => CpuBuffer::F64(v.to_vec()),
                };
                let (bx, bw) = (buf(&x), buf(&w));
                let as_f64 = |b: &CpuBuffer| -> Vec<f64> {
                    match b {
                        CpuBuffer::F32(v) => v.iter().map(|&a| a as f64).collect(),
                        CpuBuffer::F64(v) => v.clone(),
                        _ => unreachable!("a float buffer"),
                    }
                };
                let want = reference(&g, &as_f64(&bx), &as_f64(&bw));
                let plan = crate::cuda_launch::conv(&g, d).unwrap();
                runs.push((name, d, tol, plan, [bx, bw], want));
            }
        }
        let Some(gpu) = crate::cuda_host::tests::gpu_for(runs.iter().flat_map(|r| r.3.kernels())) else { return };
        let inputs: Vec<[&CpuBuffer; 2]> = runs.iter().map(|r| [&r.4[0], &r.4[1]]).collect();
        let jobs: Vec<Job> = runs.iter().zip(&inputs).map(|(r, i)| Job { plan: &r.3, inputs: i, dest: None }).collect();
        for (o, (name, d, tol, _, _, want)) in gpu.run(&jobs).unwrap().into_iter().zip(&runs) {
            let Outcome::Done { outputs, .. } = o else { panic!("{name} {d:?}: {o:?}") };
            let got: Vec<f64> = match &outputs[0] {
                CpuBuffer::F32(v) => v.iter().map(|&a| a as f64).collect(),
                CpuBuffer::F64(v) => v.clone(),
                b => panic!("{name}: a {:?} result", b.dtype()),
            };
            assert_eq!(got.len(), want.len(), "{name} {d:?}");
            for (i, (got, (v, a))) in got.iter().zip(want).enumerate() {
                assert!((got - v).abs() <= tol * a.max(1e-300), "{name} {d:?} element {i}: {got}, want {v}");
            }
        }
    }
}
