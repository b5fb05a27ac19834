//! The shim's own semantics (the half types' conversions, erfinv, a block's
//! cooperation), checked through the emulation. Each test prints
//! "skipped: g++ not found" and returns where g++ is missing.

use super::*;
use crate::cuda_launch::{self as plans, Arg, Buf, Launch, Ptr, Step, Temp};
use crate::dtype::{DType, Element};
use crate::layout::{Layout, Shape};
use half::{bf16, f16};

/// `HostGpu::build`, or `None` (said on stderr) without g++.
pub(crate) fn gpu_for<'a>(kernels: impl IntoIterator<Item = &'a Kernel>) -> Option<HostGpu> {
    match HostGpu::build(kernels) {
        Ok(g) => Some(g),
        Err(HostError::NoCompiler(e)) => {
            eprintln!("skipped: g++ not found ({e})");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A one-launch plan of a hand-written kernel `name(out, in, n)` over `n`
/// elements of `from` into `n` of `to`.
fn convert_plan(name: &str, body: &str, from: &str, to: &str, dto: DType, n: usize) -> Plan {
    let kernel = Kernel {
        name: name.into(),
        source: format!(
            "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\nextern \"C\" __global__ void {name}({to}* out, const {from}* in, long long n) {{\n    \
             for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {{ const {from} x = in[i]; out[i] = {body}; }}\n}}\n"
        ),
        needs_half: true,
    };
    Plan {
        temps: vec![Temp::Array { dtype: dto, len: n }],
        steps: vec![Step::Launch(Launch {
            kernel,
            grid: [plans::blocks_1d(n), 1, 1],
            block: [plans::BLOCK, 1, 1],
            grid_stride: true,
            args: vec![Arg::Ptr(Ptr::at(Buf::Temp(0))), Arg::Ptr(Ptr::at(Buf::Input(0))), Arg::I64(n as i64)],
        })],
        outputs: vec![0],
    }
}

fn run1(gpu: &HostGpu, plan: &Plan, input: &CpuBuffer) -> CpuBuffer {
    match gpu.run(&[Job { plan, inputs: &[input], dest: None }]).unwrap().remove(0) {
        Outcome::Done { mut outputs, .. } => outputs.remove(0),
        o => panic!("{o:?}"),
    }
}

/// f32 and f64 values around every rounding case of the half types: the
/// bits of every f16 and bf16 and their midpoints (ties), plus and minus
/// one float ulp, the overflow thresholds, subnormals, signed zeros,
/// infinities, NaN and a spread of random bits.
fn rounding_cases() -> Vec<f64> {
    let mut v = Vec::new();
    for b in 0..=u16::MAX {
        for x in [f16::from_bits(b).to_f64(), bf16::from_bits(b).to_f64()] {
            v.push(x);
        }
        let (h0, h1) = (f16::from_bits(b).to_f64(), f16::from_bits(b.wrapping_add(1)).to_f64());
        let (g0, g1) = (bf16::from_bits(b).to_f64(), bf16::from_bits(b.wrapping_add(1)).to_f64());
        for m in [(h0 + h1) / 2.0, (g0 + g1) / 2.0] {
            if m.is_finite() {
                let f = m as f32;
                v.extend([
                    m,
                    f as f64,
                    f32::from_bits(f.to_bits() + 1) as f64,
                    f32::from_bits(f.to_bits().wrapping_sub(1)) as f64,
                ]);
                v.extend([m * (1.0 + 1e-15), m * (1.0 - 1e-15)]);
            }
        }
    }
    v.extend([65504.0, 65519.99, 65520.0, 1e300, -1e-300, 5.96e-8, 2.98e-8, 2.99e-8, f64::MIN_POSITIVE, 0.0, -0.0]);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push(f64::from_bits(s));
        v.push(f32::from_bits(s as u32) as f64);
    }
    v
}

/// The NaN-insensitive bits of a half value (any NaN as 0x7fff: the
/// device's canonical NaN, which `half` does not produce).
fn canonical(bits: u16, is_nan: bool) -> u16 {
    if is_nan {
        0x7fff
    } else {
        bits
    }
}

/// `__float2half_rn`, `__double2half`, `__float2bfloat16_rn` and
/// `__double2bfloat16` round to nearest-even directly from their argument
/// (as `half`'s `from_f32` and the crate's `Element::from_f64`), NaN to
/// the canonical 0x7fff;
/// `__half2float` and `__bfloat162float` are exact for every bit pattern.
#[test]
fn shim_half_conversions_round_to_nearest_even() {
    let cases = rounding_cases();
    let n = cases.len();
    let f32s = CpuBuffer::F32(cases.iter().map(|&x| x as f32).collect());
    let f64s = CpuBuffer::F64(cases.clone());
    let bits: Vec<u16> = (0..=u16::MAX).collect();
    let hs = CpuBuffer::F16(bits.iter().map(|&b| f16::from_bits(b)).collect());
    let bs = CpuBuffer::BF16(bits.iter().map(|&b| bf16::from_bits(b)).collect());
    let p = [
        convert_plan("f2h", "__float2half_rn(x)", "float", "__half", DType::F16, n),
        convert_plan("d2h", "__double2half(x)", "double", "__half", DType::F16, n),
        convert_plan("f2b", "__float2bfloat16_rn(x)", "float", "__nv_bfloat16", DType::BF16, n),
        convert_plan("d2b", "__double2bfloat16(x)", "double", "__nv_bfloat16", DType::BF16, n),
        convert_plan("h2f", "__half2float(x)", "__half", "float", DType::F32, bits.len()),
        convert_plan("b2f", "__bfloat162float(x)", "__nv_bfloat16", "float", DType::F32, bits.len()),
    ];
    let Some(gpu) = gpu_for(p.iter().flat_map(|p| p.kernels())) else { return };
    let f2h = run1(&gpu, &p[0], &f32s);
    let d2h = run1(&gpu, &p[1], &f64s);
    let f2b = run1(&gpu, &p[2], &f32s);
    let d2b = run1(&gpu, &p[3], &f64s);
    for (i, &x) in cases.iter().enumerate() {
        let xf = x as f32;
        let want = canonical(f16::from_f32(xf).to_bits(), xf.is_nan());
        assert_eq!(f2h.as_slice::<f16>()[i].to_bits(), want, "__float2half_rn({xf:e})");
        let want = canonical(<f16 as Element>::from_f64(x).to_bits(), x.is_nan());
        assert_eq!(d2h.as_slice::<f16>()[i].to_bits(), want, "__double2half({x:e})");
        let want = canonical(bf16::from_f32(xf).to_bits(), xf.is_nan());
        assert_eq!(f2b.as_slice::<bf16>()[i].to_bits(), want, "__float2bfloat16_rn({xf:e})");
        let want = canonical(<bf16 as Element>::from_f64(x).to_bits(), x.is_nan());
        assert_eq!(d2b.as_slice::<bf16>()[i].to_bits(), want, "__double2bfloat16({x:e})");
    }
    let h2f = run1(&gpu, &p[4], &hs);
    let b2f = run1(&gpu, &p[5], &bs);
    for &b in &bits {
        let (h, g) = (f16::from_bits(b).to_f32(), bf16::from_bits(b).to_f32());
        let (gh, gb) = (h2f.as_slice::<f32>()[b as usize], b2f.as_slice::<f32>()[b as usize]);
        assert!(gh.to_bits() == h.to_bits() || (h.is_nan() && gh.is_nan()), "__half2float({b:#06x})");
        assert!(gb.to_bits() == g.to_bits() || (g.is_nan() && gb.is_nan()), "__bfloat162float({b:#06x})");
    }
}

/// The shim's `erfinv` (which glibc lacks) within 4 ulp of the crate's f64
/// `special::erfinv` away from +-1 and within 1e-12 relative near it
/// (where the inverse's condition number grows), and erfinvf as the
/// rounded double; ends of the domain exact.
#[test]
fn shim_erfinv_matches_the_crate() {
    let mut xs: Vec<f64> = (-2000..=2000).map(|i| i as f64 / 2000.0).collect();
    xs.extend([1e-300, -1e-20, 1.0 - 1e-16, -(1.0 - 1e-12), 0.999_999, 1.5, -1.0, 1.0, f64::NAN, -0.0]);
    let n = xs.len();
    let p = [
        convert_plan("einv", "erfinv(x)", "double", "double", DType::F64, n),
        convert_plan("einvf", "erfinvf(x)", "float", "float", DType::F32, n),
    ];
    let Some(gpu) = gpu_for(p.iter().flat_map(|p| p.kernels())) else { return };
    let d = run1(&gpu, &p[0], &CpuBuffer::F64(xs.clone()));
    let f = run1(&gpu, &p[1], &CpuBuffer::F32(xs.iter().map(|&x| x as f32).collect()));
    for (i, &x) in xs.iter().enumerate() {
        let (got, want) = (d.as_slice::<f64>()[i], crate::special::erfinv(x));
        let tol = if x.abs() > 0.99 { 1e-12 * want.abs() } else { 4.0 * f64::EPSILON * want.abs() };
        let same = got == want || (got.is_nan() && want.is_nan()) || (got - want).abs() <= tol;
        assert!(same && got.is_sign_negative() == want.is_sign_negative(), "erfinv({x:e}) = {got:e}, want {want:e}");
        let xf = x as f32;
        let (got, want) = (f.as_slice::<f32>()[i], crate::special::erfinv(xf as f64) as f32);
        let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
        assert!(ulp <= 1 || (got.is_nan() && want.is_nan()) || got == want, "erfinvf({xf:e}) = {got:e}, want {want:e}");
    }
}

/// A block reduction in all three block sizes the plans use (32 threads,
/// 256 threads = 8 warps) and over more outputs than blocks: the sum of
/// 0..n per row, exact in f64, in i64 and with wrapping in i32.
#[test]
fn emulated_block_reduction_is_exact() {
    let sum = crate::cuda_source::Fold {
        tag: "sum".into(),
        acc: "double".into(),
        init: "0.0".into(),
        combine: "a + b".into(),
        finish: "a".into(),
        helpers: String::new(),
    };
    let cases: Vec<(usize, usize)> = vec![(1, 1), (3, 31), (5, 33), (2, 512), (3, 513), (1, 5000), (7, 0), (0, 4)];
    let mut jobs_data = Vec::new();
    for &(rows, n) in &cases {
        // transposed storage: the reduced axis is strided
        let l = Layout::contiguous(Shape::from([n, rows])).permute(&[1, 0]);
        let xt = CpuBuffer::F64((0..rows * n).map(|i| ((i / rows) % n.max(1)) as f64).collect());
        let p = plans::reduce(&sum, DType::F64, &l, &[1], DType::F64).unwrap();
        jobs_data.push((p, xt, rows, n));
    }
    let Some(gpu) = gpu_for(jobs_data.iter().flat_map(|(p, ..)| p.kernels())) else { return };
    let inputs: Vec<[&CpuBuffer; 1]> = jobs_data.iter().map(|(_, x, ..)| [x]).collect();
    let jobs: Vec<Job> =
        jobs_data.iter().zip(&inputs).map(|((p, ..), i)| Job { plan: p, inputs: i, dest: None }).collect();
    for (o, (_, _, rows, n)) in gpu.run(&jobs).unwrap().into_iter().zip(&jobs_data) {
        let Outcome::Done { outputs, .. } = o else { panic!("{o:?}") };
        let want = (n * n.saturating_sub(1) / 2) as f64;
        assert_eq!(outputs[0].as_slice::<f64>(), vec![want; *rows], "{rows} rows of {n}");
    }
}

/// A kernel whose threads wait at different barriers is reported, not run.
#[test]
fn emulation_reports_a_divergent_barrier() {
    let kernel = Kernel {
        name: "xf_divergent".into(),
        source: "extern \"C\" __global__ void xf_divergent(float* out) {\n    if (threadIdx.x < 16) __syncthreads();\n    out[threadIdx.x] = 1.0f;\n}\n".into(),
        needs_half: false,
    };
    let plan = Plan {
        temps: vec![Temp::Array { dtype: DType::F32, len: 32 }],
        steps: vec![Step::Launch(Launch {
            kernel,
            grid: [1, 1, 1],
            block: [32, 1, 1],
            grid_stride: false,
            args: vec![Arg::Ptr(Ptr::at(Buf::Temp(0)))],
        })],
        outputs: vec![0],
    };
    let Some(gpu) = gpu_for(plan.kernels()) else { return };
    match gpu.run(&[Job { plan: &plan, inputs: &[], dest: None }]) {
        Err(HostError::Run { job: Some(0), log }) => assert!(log.contains("wait at different barriers"), "{log}"),
        other => panic!("{other:?}"),
    }
}

/// A one-launch plan of the hand-written kernel `source` (named `name`)
/// with `args`, one block of 32 threads, writing 32 f32.
fn one_launch(name: &str, source: &str, args: Vec<Arg>) -> Plan {
    Plan {
        temps: vec![Temp::Array { dtype: DType::F32, len: 32 }],
        steps: vec![Step::Launch(Launch {
            kernel: Kernel { name: name.into(), source: source.into(), needs_half: false },
            grid: [1, 1, 1],
            block: [32, 1, 1],
            grid_stride: false,
            args,
        })],
        outputs: vec![0],
    }
}

/// A read past the end of an operand stops the run with the address
/// sanitizer's report, naming the job; an argument of another size than
/// its parameter's, or a missing one, is reported before the launch.
#[test]
fn emulation_reports_bad_accesses_and_arguments() {
    let past = one_launch(
        "xf_past_the_end",
        "extern \"C\" __global__ void xf_past_the_end(float* out, const float* x) { out[threadIdx.x] = x[threadIdx.x + 1]; }\n",
        vec![Arg::Ptr(Ptr::at(Buf::Temp(0))), Arg::Ptr(Ptr::at(Buf::Input(0)))],
    );
    let struct_arg = one_launch(
        "xf_struct_arg",
        "struct XfTwo { long long a, b; };\nextern \"C\" __global__ void xf_struct_arg(float* out, const XfTwo p) { out[threadIdx.x] = (float)(p.a + p.b); }\n",
        vec![Arg::Ptr(Ptr::at(Buf::Temp(0))), Arg::I64(3)],
    );
    let missing = one_launch(
        "xf_two_args",
        "extern \"C\" __global__ void xf_two_args(float* out, int k) { out[threadIdx.x] = (float)k; }\n",
        vec![Arg::Ptr(Ptr::at(Buf::Temp(0)))],
    );
    let Some(gpu) = gpu_for([&past, &struct_arg, &missing].into_iter().flat_map(|p| p.kernels())) else { return };
    let x = CpuBuffer::F32(vec![1.0; 32]);
    let run = |plan: &Plan| match gpu.run(&[Job { plan, inputs: &[&x], dest: None }]) {
        Err(HostError::Run { job: Some(0), log }) => log,
        other => panic!("{other:?}"),
    };
    if sanitized() {
        let log = run(&past);
        assert!(log.contains("heap-buffer-overflow"), "{log}");
    }
    let log = run(&struct_arg);
    assert!(log.contains("an argument of 8 bytes for a parameter of 16 bytes"), "{log}");
    let log = run(&missing);
    assert!(log.contains("xf_two_args takes 2 arguments, the plan passes 1"), "{log}");
}
