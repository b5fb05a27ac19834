//! The CUDA convolution against a plain CPU loop over `ConvGeometry`
//! (`crate::cuda_source::conv::test_cases`, which also checks the kernel's
//! indexing on the CPU under g++): the NVRTC compile of its kernels (no GPU
//! needed) and, on a device, the generated kernel and cuDNN for geometries
//! covering every option.

use super::compile::{compile_ptx, nvrtc_available, DEFAULT_ARCH};
use super::conv::{conv_forward, conv_forward_with, ConvPath};
use super::source::conv::test_cases::{self, cases, geom, reference};
use super::source::conv::{conv_kernel, CONV_DTYPES};
use super::{cudnn, is_available, CudaBuffer};
use crate::dtype::CpuBuffer;
use crate::dtype::DType;

#[test]
#[ignore = "needs libnvrtc; run with --include-ignored where it is installed"]
fn nvrtc_compiles_the_conv_kernel_for_every_dtype() {
    assert!(nvrtc_available(), "libnvrtc not found: put it on LD_LIBRARY_PATH");
    for d in CONV_DTYPES {
        let k = conv_kernel(d).unwrap();
        let ptx = compile_ptx(&k, DEFAULT_ARCH).unwrap_or_else(|e| panic!("{d:?}: {e}"));
        assert!(ptx.contains(&format!(".entry {}", k.name)), "{}: no entry point in the PTX", k.name);
    }
}

/// Deterministic values in [-1, 1) rounded to `d`.
fn values(n: usize, seed: u64, d: DType) -> CpuBuffer {
    let v = test_cases::values(n, seed);
    let mut b = CpuBuffer::full(d, n, 0.0);
    match &mut b {
        CpuBuffer::F32(x) => x.iter_mut().zip(&v).for_each(|(x, v)| *x = *v as f32),
        CpuBuffer::F64(x) => x.copy_from_slice(&v),
        CpuBuffer::F16(x) => x.iter_mut().zip(&v).for_each(|(x, v)| *x = half::f16::from_f64(*v)),
        CpuBuffer::BF16(x) => x.iter_mut().zip(&v).for_each(|(x, v)| *x = half::bf16::from_f64(*v)),
        _ => unreachable!("float dtypes only"),
    }
    b
}

fn to_f64(b: &CpuBuffer) -> Vec<f64> {
    match b {
        CpuBuffer::F32(x) => x.iter().map(|&v| v as f64).collect(),
        CpuBuffer::F64(x) => x.clone(),
        CpuBuffer::F16(x) => x.iter().map(|v| v.to_f64()).collect(),
        CpuBuffer::BF16(x) => x.iter().map(|v| v.to_f64()).collect(),
        _ => unreachable!("float dtypes only"),
    }
}

/// Relative tolerance against the sum of absolute products.
fn tolerance(d: DType) -> f64 {
    match d {
        DType::F64 => 1e-13,
        DType::F32 => 2e-5,
        DType::F16 => 4e-3,
        _ => 2e-2,
    }
}

fn compare(what: &str, got: &CudaBuffer, want: &[(f64, f64)], d: DType) -> Result<(), String> {
    let got = to_f64(&got.download().map_err(|e| format!("{what}: {e}"))?);
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, want {}", got.len(), want.len()));
    }
    for (i, (g, (v, a))) in got.iter().zip(want).enumerate() {
        if (g - v).abs() > tolerance(d) * a + 1e-30 {
            return Err(format!("{what}: element {i} is {g}, want {v} (scale {a})"));
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
fn cuda_conv_kernel_and_cudnn_match_a_cpu_loop() {
    assert!(is_available(), "no CUDA device");
    let have_cudnn = cudnn::available();
    let mut failures = Vec::new();
    let (mut checked, mut declined) = (0, Vec::new());
    for (name, g) in cases() {
        for (k, d) in CONV_DTYPES.into_iter().enumerate() {
            let xh = values(g.lhs_len(), 2 * k as u64 + 1, d);
            let wh = values(g.rhs_len(), 2 * k as u64 + 2, d);
            let want = reference(&g, &to_f64(&xh), &to_f64(&wh));
            let x = CudaBuffer::upload(0, &xh).unwrap();
            let w = CudaBuffer::upload(0, &wh).unwrap();
            let mut paths = vec![("kernel", ConvPath::Kernel), ("auto", ConvPath::Auto)];
            if have_cudnn {
                paths.push(("cudnn", ConvPath::Cudnn));
            }
            for (pname, path) in paths {
                let what = format!("{name} {d:?} {pname}");
                match conv_forward_with(&x, &w, &g, d, path) {
                    Ok(y) => {
                        checked += 1;
                        if let Err(m) = compare(&what, &y, &want, d) {
                            failures.push(m);
                        }
                    }
                    // cuDNN may decline a case (f64 and half types have few
                    // engines, 3-d convolutions fewer); a 1-d or 2-d f32
                    // one it must take whenever the plan exists.
                    Err(e)
                        if path == ConvPath::Cudnn
                            && (d != DType::F32 || cudnn::plan(&g).is_none_or(|p| p.x.len() == 5)) =>
                    {
                        declined.push(format!("{what}: {e}"))
                    }
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
            // The public entry point agrees with the path it picks.
            match conv_forward(&x, &w, &g, d) {
                Ok(y) => {
                    if let Err(m) = compare(&format!("{name} {d:?} conv_forward"), &y, &want, d) {
                        failures.push(m);
                    }
                }
                Err(e) => failures.push(format!("{name} {d:?} conv_forward: {e}")),
            }
        }
    }
    println!(
        "{checked} convolutions checked; cuDNN {}; declined by cuDNN: {declined:#?}",
        if have_cudnn { format!("{:?}", cudnn::version()) } else { "absent".into() }
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
fn cuda_conv_rejects_mismatched_operands() {
    assert!(is_available(), "no CUDA device");
    let g = geom((1, 2, 2, 1, 1), [1, 1, 4], [1, 1, 2], [1; 3], [(0, 0); 3], [1; 3], [1; 3]);
    let x = CudaBuffer::upload(0, &values(g.lhs_len(), 1, DType::F32)).unwrap();
    let w = CudaBuffer::upload(0, &values(g.rhs_len(), 2, DType::F64)).unwrap();
    let e = conv_forward(&x, &w, &g, DType::F32).unwrap_err();
    assert!(e.to_string().contains("conv_general_dilated of f32 and f64"), "{e}");
    let short = CudaBuffer::upload(0, &values(3, 3, DType::F32)).unwrap();
    let e = conv_forward(&short, &x, &g, DType::F32).unwrap_err();
    assert!(e.to_string().contains("buffers of 3"), "{e}");
}

#[test]
#[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
fn cuda_conv_reads_views_through_their_layouts() {
    use crate::layout::{Layout, Shape};
    assert!(is_available(), "no CUDA device");
    let (name, g) = cases().swap_remove(5);
    let d = DType::F32;
    let (xh, wh) = (values(g.lhs_len(), 7, d), values(g.rhs_len(), 8, d));
    let want = reference(&g, &to_f64(&xh), &to_f64(&wh));
    // The lhs 3 elements into a longer buffer; the rhs as the transpose
    // view of its [O, rest] matrix stored the other way round.
    let mut xv = vec![9.0f32; 3];
    xv.extend(xh.as_slice::<f32>());
    let x = CudaBuffer::upload(0, &CpuBuffer::from_vec(xv)).unwrap();
    let mut lx = Layout::contiguous(Shape::from([g.batch, g.in_features, g.input[0], g.input[1], g.input[2]]));
    lx.offset = 3;
    let (o, rest) = (g.out_features, g.rhs_len() / g.out_features);
    let wt: Vec<f32> = (0..rest * o).map(|i| wh.as_slice::<f32>()[(i % o) * rest + i / o]).collect();
    let w = CudaBuffer::upload(0, &CpuBuffer::from_vec(wt)).unwrap();
    let lw = Layout::contiguous(Shape::from([rest, o])).permute(&[1, 0]);
    let y = super::conv::conv_forward_layouts(&x, &lx, &w, &lw, &g, d).unwrap();
    compare(&format!("{name} through views"), &y, &want, d).unwrap();
}
