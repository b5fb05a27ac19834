//! CUDA tests.
//!
//! A test that needs something this machine may lack (the `cuda` feature,
//! libnvrtc, a GPU) is `#[ignore]`d with the reason, so a plain `cargo test`
//! lists it as ignored instead of counting a skip as a pass. Run with
//! `--include-ignored` (as `.ci/run` does for `cuda::nvrtc` when it has
//! installed NVRTC, and `scripts/cuda_device_run.sh` does on a GPU machine),
//! such a test fails when what it needs is missing.
//!
//! * `cuda::nvrtc`: every generated kernel (each op for each dtype it
//!   accepts, plus the structural kernels) compiles with NVRTC; no GPU
//!   needed.
//! * `cuda::device`: every registry primitive runs on the device (inputs
//!   often non-contiguous views) and is compared with the CPU result; grad,
//!   vmap(grad) and jacrev run on device tensors.
//! * The rest run everywhere.

#[cfg(not(feature = "cuda"))]
#[test]
#[ignore = "the CUDA tests need `cargo test --features cuda`"]
fn cuda_tests_need_the_cuda_feature() {
    panic!("built without the `cuda` feature: run `cargo test --features cuda --test suite cuda -- --include-ignored`");
}

/// The default device: parsed from "cpu" / "cuda" / "cuda:N", set per
/// thread, and used by constructors (the mechanism that runs each rule and
/// composition test body on every device).
#[test]
fn default_device_parses_and_applies_per_thread() {
    use xform::{DType, Device, Tensor};
    assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
    assert_eq!("cuda".parse::<Device>(), Ok(Device::Cuda(0)));
    assert_eq!(" cuda:3 ".parse::<Device>(), Ok(Device::Cuda(3)));
    assert!("tpu".parse::<Device>().unwrap_err().contains("tpu"));
    assert!("cuda:x".parse::<Device>().is_err());
    xform::set_default_device(Device::Cpu);
    assert_eq!(xform::default_device(), Device::Cpu);
    assert_eq!(Tensor::zeros([2], DType::F32).device(), Device::Cpu);
    // another thread keeps its own setting
    std::thread::spawn(|| {
        xform::set_default_device(Device::Cuda(1));
        assert_eq!(xform::default_device(), Device::Cuda(1));
    })
    .join()
    .unwrap();
    assert_eq!(xform::default_device(), Device::Cpu);
    #[cfg(not(feature = "cuda"))]
    {
        // asking for a GPU that is not there is a clear error, not a crash
        let r = std::thread::spawn(|| {
            xform::set_default_device(Device::Cuda(0));
            xform::catch(|| Tensor::zeros([2], DType::F32)).map(|_| ()).map_err(|e| e.to_string())
        })
        .join()
        .unwrap();
        let e = r.unwrap_err();
        assert!(e.contains("cuda"), "{e}");
    }
}

/// Without a device, moving a tensor there is an error value (with one, an
/// ordinal past the last device is).
#[cfg(feature = "cuda")]
#[test]
fn missing_device_is_an_error_value() {
    if xform::core::kernels::cuda::is_available() {
        // The error path for an ordinal past the last device.
        let n = xform::core::kernels::cuda::device_count();
        let e = xform::Tensor::from_vec(vec![1.0f32], [1]).try_to_device(xform::Device::Cuda(n)).unwrap_err();
        assert!(e.to_string().contains("no CUDA device"), "{e}");
        return;
    }
    let e = xform::Tensor::from_vec(vec![1.0f32, 2.0], [2]).try_to_device(xform::Device::Cuda(0)).unwrap_err();
    assert!(e.to_string().contains("no CUDA device"), "{e}");
}

/// An elementwise chain jit fuses into one CUDA kernel: a broadcast
/// row, a comparison and select, a conversion to another float and
/// back, two outputs (13 elementwise ops).
// jit and trace take `&X` for a tree `X` (here `Vec<Tensor>`)
#[allow(clippy::ptr_arg)]
pub(crate) fn chain(xs: &Vec<xform::Tensor>) -> Vec<xform::Tensor> {
    let (x, y, row) = (&xs[0], &xs[1], &xs[2]);
    let a = (&(&x.sin() * y) + row).tanh();
    let other = if x.dtype() == xform::DType::F64 { xform::DType::F32 } else { xform::DType::F64 };
    let w = a.cast(other).exp().cast(x.dtype());
    let s = xform::Tensor::where_(&a.gt(y), &w, &(&a * &a));
    vec![&(&s - y) / &x.exp(), a]
}
pub(crate) const CHAIN_OPS: f64 = 13.0;

/// The fused group of [`chain`] traced at CUDA abstract values of dtype
/// `d` (the program traced on the CPU, its values moved to `cuda:0`; no
/// device needed), grouped as the plan groups with CUDA fusion on.
pub(crate) fn chain_group(d: xform::DType) -> Vec<xform_exec::inspect::Item> {
    use xform::{Device, Tensor};
    let xs = vec![Tensor::zeros([37, 29], d), Tensor::zeros([37, 29], d), Tensor::zeros([29], d)];
    let mut p = xform::trace(chain, &xs);
    assert!(p.consts.is_empty(), "{p}");
    for a in &mut p.avals {
        a.device = Device::Cuda(0);
    }
    xform_exec::inspect::group_with(&p, true)
}

/// The chain the device tests jit is one fused CUDA group of all its
/// elementwise ops with two outputs (the broadcast of the row runs
/// before it), for every float dtype the device test uses.
#[test]
fn cuda_jit_chain_is_one_fused_cuda_group() {
    use xform_exec::inspect::Item;
    for d in [xform::DType::F32, xform::DType::F64, xform::DType::F16] {
        let items = chain_group(d);
        let groups: Vec<_> = items
            .iter()
            .filter_map(|it| match it {
                Item::Group { fused, .. } => Some(fused),
                Item::Eqn(_) | Item::Rows { .. } => None,
            })
            .collect();
        assert_eq!(groups.len(), 1, "{d}: {items:?}");
        assert_eq!(groups[0].ops.len(), CHAIN_OPS as usize, "{d}");
        assert_eq!(groups[0].outputs.len(), 2, "{d}");
        let k = &groups[0].cuda.as_ref().expect("a CUDA kernel").kernel;
        assert!(k.source.contains(&format!("void {}(", k.name)));
    }
}

/// Which plans replay as CUDA graphs (no device needed: the programs are
/// traced on the CPU and their values moved to `cuda:0`): the chain's plan
/// waits for its second call; a plan with a gather (whose index check
/// reads the device) is refused, naming it; `JitOptions::cuda_graphs`
/// off disables it; a CPU plan has no CUDA graph status.
#[cfg(feature = "cuda")]
#[test]
fn cuda_graph_capture_eligibility() {
    use xform::{Device, Tensor};
    use xform_exec::inspect::Plan;
    let on_cuda = |mut p: xform::Program| {
        for a in &mut p.avals {
            a.device = Device::Cuda(0);
        }
        p
    };
    let xs = vec![
        Tensor::zeros([37, 29], xform::DType::F32),
        Tensor::zeros([37, 29], xform::DType::F32),
        Tensor::zeros([29], xform::DType::F32),
    ];
    let cpu = xform::trace(chain, &xs);
    assert_eq!(Plan::compile(&cpu).unwrap().cuda_graph(), None);
    let p = on_cuda(cpu);
    let mut plan = Plan::compile(&p).unwrap();
    assert_eq!(plan.cuda_graph().as_deref(), Some("not captured yet"));
    plan.disable_cuda_graph();
    assert_eq!(plan.cuda_graph().as_deref(), Some("not captured: disabled"));
    let gather = |xs: &Vec<Tensor>| vec![xs[0].take(&xs[1], 0)];
    let ins = vec![Tensor::zeros([5, 3], xform::DType::F32), Tensor::zeros([4], xform::DType::I64)];
    let p = on_cuda(xform::trace(gather, &ins));
    let status = Plan::compile(&p).unwrap().cuda_graph().unwrap();
    assert!(status.starts_with("not captured: ") && status.contains("cannot be captured"), "{status}");
}

#[cfg(feature = "cuda")]
mod nvrtc {
    use xform::core::kernels::cuda::{compile, CudaError, Kernel};
    use xform::Prim;

    /// Fails (these tests run only when asked for) if libnvrtc cannot be loaded.
    fn require_nvrtc() {
        assert!(
            compile::nvrtc_available(),
            "libnvrtc not found: put it on LD_LIBRARY_PATH (see .ci/run) or run the tests without --include-ignored"
        );
    }

    #[test]
    #[ignore = "needs libnvrtc; .ci/run runs it with --include-ignored where it installed NVRTC"]
    fn cuda_every_generated_kernel_compiles_with_nvrtc() {
        let catalog = Prim::cuda_catalog();
        let mut names: Vec<&str> = catalog.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "two generated kernels share a name");
        // XFORM_CUDA_DUMP_DIR=dir writes every source there (for reading or
        // compiling by hand).
        if let Some(dir) = std::env::var_os("XFORM_CUDA_DUMP_DIR") {
            std::fs::create_dir_all(&dir).unwrap();
            for k in &catalog {
                std::fs::write(std::path::Path::new(&dir).join(format!("{}.cu", k.name)), &k.source).unwrap();
            }
        }
        require_nvrtc();
        let arch = compile::arch_for(None);
        use rayon::prelude::*;
        let failures: Vec<String> =
            catalog.par_iter().filter_map(|k| compile::compile_ptx(k, &arch).err().map(|e| e.to_string())).collect();
        assert!(
            failures.is_empty(),
            "{} of {} kernels failed to compile for {arch}:\n{}",
            failures.len(),
            catalog.len(),
            failures.join("\n\n")
        );
        println!(
            "compiled {} kernels for {arch} with NVRTC {:?} (headers from {:?})",
            catalog.len(),
            compile::nvrtc_version(),
            compile::half_include_dir()
        );
    }

    /// jit's fused CUDA kernels (NOTE: [cuda elementwise fusion]) for
    /// representative groups (every unary and binary op per dtype;
    /// comparisons, select and conversions among all dtypes with a
    /// broadcast operand and two outputs) compile.
    #[test]
    #[ignore = "needs libnvrtc; .ci/run runs it with --include-ignored where it installed NVRTC"]
    fn cuda_jit_fused_kernels_compile_with_nvrtc() {
        let mut kernels = xform_exec::inspect::sample_kernels();
        assert_eq!(kernels.len(), 2 * xform::DType::ALL.len());
        for d in [xform::DType::F32, xform::DType::F64, xform::DType::F16] {
            for it in crate::cuda::chain_group(d) {
                if let xform_exec::inspect::Item::Group { fused, .. } = it {
                    kernels.extend(fused.cuda.map(|c| c.kernel));
                }
            }
        }
        require_nvrtc();
        let arch = compile::arch_for(None);
        use rayon::prelude::*;
        let failures: Vec<String> = kernels
            .par_iter()
            .filter_map(|k| compile::compile_ptx(k, &arch).err().map(|e| format!("{e}\n{}", k.source)))
            .collect();
        assert!(failures.is_empty(), "{} fused kernels failed:\n{}", failures.len(), failures.join("\n\n"));
        println!("compiled {} fused jit kernels for {arch}", kernels.len());
    }

    #[test]
    #[ignore = "needs libnvrtc; .ci/run runs it with --include-ignored where it installed NVRTC"]
    fn cuda_nvrtc_rejects_a_broken_kernel_with_its_log() {
        require_nvrtc();
        let k = Kernel {
            name: "xf_broken".into(),
            source: "extern \"C\" __global__ void xf_broken(float* y) { y[0] = not_declared_anywhere; }\n".into(),
            needs_half: false,
        };
        match compile::compile_ptx(&k, compile::DEFAULT_ARCH) {
            Err(CudaError::Compile { kernel, log }) => {
                assert_eq!(kernel, "xf_broken");
                assert!(log.contains("not_declared_anywhere"), "log does not name the error: {log}");
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
    }
}

#[cfg(feature = "cuda")]
mod device {
    use crate::harness::{close, tol};
    use crate::registry::{entries, G};
    use xform::core::interp::bind;
    use xform::core::kernels::cuda;
    use xform::core::prim::ShapeOp;
    use xform::{grad, jacrev, vmap, DType, Device, Prim, Tensor};

    const DEV: Device = Device::Cuda(0);

    /// Fails (these tests run only when asked for) without a device.
    fn require_device() {
        assert!(
            cuda::is_available(),
            "no CUDA device (or no driver): run these tests on a GPU machine (scripts/cuda_device_run.sh)"
        );
    }

    /// The same values as `t` on the device, often through a non-contiguous
    /// view (transposed or reversed storage).
    fn on_device(t: &Tensor, g: &mut G) -> Tensor {
        let d = t.to_device(DEV);
        let r = t.rank();
        match g.int(0, 2) {
            0 if r >= 2 => {
                let p = g.perm(r);
                let mut inv = vec![0; r];
                for (i, &a) in p.iter().enumerate() {
                    inv[a] = i;
                }
                d.permute(&p).copy().permute(&inv)
            }
            1 if r >= 1 => {
                let axes: Vec<isize> = g.subset(r).into_iter().map(|a| a as isize).collect();
                d.flip(&axes).copy().flip(&axes)
            }
            _ => d,
        }
    }

    #[test]
    #[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
    fn cuda_every_primitive_matches_the_cpu() {
        require_device();
        let mut checked = 0;
        let mut failures = Vec::new();
        for e in entries() {
            for &d in &e.dtypes {
                for seed in 0..6u64 {
                    let mut g = G::new(seed * 7919 + 17);
                    let c = (e.gen)(&mut g, d);
                    let inputs = (c.make)(seed);
                    let dev_inputs: Vec<Tensor> = inputs.iter().map(|t| on_device(t, &mut g)).collect();
                    // A primitive without operands (iota) names its device.
                    let dev_prim = match &c.prim {
                        Prim::Shape(ShapeOp::Iota { shape, dim, dtype, .. }) => {
                            Prim::Shape(ShapeOp::Iota { shape: shape.clone(), dim: *dim, dtype: *dtype, device: DEV })
                        }
                        p => p.clone(),
                    };
                    // a collective runs under vmap of its axis name (`Case::apply`)
                    let want = c.apply(&inputs);
                    let got = if c.axis.is_some() {
                        c.apply(&dev_inputs)
                    } else {
                        bind(&dev_prim, &dev_inputs).map(|o| o.into_vec())
                    };
                    checked += 1;
                    match (want, got) {
                        (Ok(w), Ok(o)) => {
                            if w.len() != o.len() {
                                failures.push(format!(
                                    "{c:?}: {} outputs on the device, {} on the CPU",
                                    o.len(),
                                    w.len()
                                ));
                                continue;
                            }
                            for (i, (w, o)) in w.iter().zip(o.iter()).enumerate() {
                                if o.device() != DEV {
                                    failures.push(format!("{c:?}: output {i} is on {}", o.device()));
                                    continue;
                                }
                                if o.shape() != w.shape() || o.dtype() != w.dtype() {
                                    failures.push(format!(
                                        "{c:?}: output {i} is {} {}, the CPU gives {} {}",
                                        o.dtype(),
                                        o.shape(),
                                        w.dtype(),
                                        w.shape()
                                    ));
                                    continue;
                                }
                                let t = 4.0 * tol(o.dtype());
                                let oh = o.to_device(Device::Cpu);
                                if let Err(m) =
                                    close(&format!("{c:?} output {i}"), &oh.to_vec_f64(), &w.to_vec_f64(), t)
                                {
                                    failures.push(m);
                                }
                            }
                        }
                        (Err(we), Err(ge)) => {
                            if std::mem::discriminant(&we.kind) != std::mem::discriminant(&ge.kind) {
                                failures.push(format!("{c:?}: CPU error {we}, device error {ge}"));
                            }
                        }
                        (Ok(_), Err(ge)) => failures.push(format!("{c:?}: device error {ge}")),
                        (Err(we), Ok(_)) => failures.push(format!("{c:?}: the CPU fails ({we}), the device does not")),
                    }
                }
            }
        }
        assert!(failures.is_empty(), "{} of {checked} device runs differ:\n{}", failures.len(), failures.join("\n"));
        println!("{checked} primitive applications agree between CPU and cuda:0");
    }

    fn assert_close(what: &str, got: &Tensor, want: &Tensor, t: f64) {
        assert_eq!(got.device(), DEV, "{what}: result left the device");
        assert_eq!(got.shape(), want.shape(), "{what}");
        close(what, &got.to_device(Device::Cpu).to_vec_f64(), &want.to_vec_f64(), t).unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
    fn cuda_transforms_on_device_tensors() {
        require_device();
        let f = |x: &Tensor| (x.sin() * x).sum();
        let data: Vec<f64> = (0..12).map(|i| (i as f64 * 0.37).sin() * 2.0).collect();
        for dtype in [DType::F64, DType::F32] {
            let x = Tensor::from_vec(data.clone(), [3, 4]).cast(dtype);
            let xd = x.to_device(DEV);
            let t = 4.0 * tol(dtype);
            assert_close("grad", &grad(f)(&xd), &grad(f)(&x), t);
            let g = |r: &Tensor| (r.tanh() * r).sum();
            assert_close("vmap(grad)", &vmap(grad(g))(&xd), &vmap(grad(g))(&x), t);
            let h = |v: &Tensor| v.matmul(&v.permute(&[1, 0])).exp();
            assert_close("jacrev", &jacrev(h)(&xd), &jacrev(h)(&x), 10.0 * t);
        }
    }

    /// `n` values in [-2, 2), with NaN, infinities and signed zeros if `special`.
    fn values(n: usize, seed: u64, special: bool) -> Vec<f64> {
        let mut st = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let sp = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0];
        (0..n)
            .map(|i| {
                st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if special && i % 11 == 3 {
                    sp[(st >> 40) as usize % sp.len()]
                } else {
                    ((st >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 4.0
                }
            })
            .collect()
    }

    /// The chain's inputs, on the CPU and on the device (y a transposed
    /// view there, so the kernel reads it through its strides).
    fn chain_inputs(d: DType, seed: u64, special: bool) -> (Vec<Tensor>, Vec<Tensor>) {
        let (r, c) = (37, 29);
        let x = Tensor::from_vec(values(r * c, seed, special), [r, c]).cast(d);
        let yt = Tensor::from_vec(values(r * c, seed + 1, special), [c, r]).cast(d);
        let row = Tensor::from_vec(values(c, seed + 2, special), [c]).cast(d);
        let cpu = vec![x.clone(), yt.permute(&[1, 0]), row.clone()];
        let dev = vec![x.to_device(DEV), yt.to_device(DEV).permute(&[1, 0]), row.to_device(DEV)];
        (cpu, dev)
    }

    /// Bitwise equal (any NaN equals any NaN).
    fn assert_bits(what: &str, got: &[Tensor], want: &[Tensor]) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.shape(), g.dtype(), g.device()), (w.shape(), w.dtype(), w.device()), "{what}");
            let (g, w) = (g.to_device(Device::Cpu).to_vec_f64(), w.to_device(Device::Cpu).to_vec_f64());
            for (k, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{what}: element {k}: {a} vs {b}");
            }
        }
    }

    /// jit of an elementwise chain on cuda:0 runs one fused CUDA kernel
    /// (plan inspection) whose results equal the unfused CUDA kernels bit
    /// for bit (NaN, infinities and signed zeros included; f32, f64, f16),
    /// and the CPU within 4 f32 units in the last place per op (f32, and
    /// f64, whose chain takes an exp in f32: CUDA's `sinf`/`expf` are
    /// within 2 ulp, the CPU's vectorized `exp`/`tanh` within 4).
    #[test]
    #[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
    fn cuda_jit_fused_chain_equals_unfused_and_cpu() {
        require_device();
        use super::{chain, CHAIN_OPS};
        use xform_exec::inspect::{Plan, StepOp};
        for d in [DType::F32, DType::F64, DType::F16] {
            let (_, dev) = chain_inputs(d, 5, true);
            let p = xform::trace(chain, &dev);
            let elementwise = p
                .eqns
                .iter()
                .filter(|e| {
                    matches!(e.prim, Prim::Unary(_) | Prim::Binary(_) | Prim::Compare(_) | Prim::Elementwise(_))
                })
                .count();
            assert_eq!(elementwise, CHAIN_OPS as usize, "{d}: {p}");
            let plan = Plan::compile(&p).unwrap();
            let fused: Vec<usize> = plan
                .steps
                .iter()
                .filter_map(|s| match &s.op {
                    StepOp::Fused(f) => {
                        assert!(f.cuda.is_some(), "a CUDA group carries its kernel");
                        Some(f.ops.len())
                    }
                    StepOp::Prim(_) | StepOp::Rows(_) => None,
                })
                .collect();
            assert_eq!(fused, vec![CHAIN_OPS as usize], "{d}: one fused step of every elementwise op");
            let got = plan.run(&dev).unwrap();
            assert_bits(&format!("{d}: fused vs unfused program"), &got, &p.eval(&dev).unwrap());
            assert_bits(&format!("{d}: fused vs eager"), &got, &chain(&dev));
            assert_bits(&format!("{d}: jit vs fused plan"), &xform::jit(chain)(&dev), &got);

            // against the CPU in f32 and f64 (in f16 a 1-ulp difference of
            // `a` flips `a > y` now and then, which is no rounding error),
            // within 4 f32 ulp per op for f64 too: its chain takes an exp in
            // f32 (`cast(F32).exp()`: CUDA's expf against the CPU's
            // vectorized exp, a few f32 ulp apart), as the host emulation
            // of this kernel found (`emulation::fused`)
            let eps = match d {
                DType::F64 | DType::F32 => f32::EPSILON as f64,
                _ => continue,
            };
            let (cpu, dev) = chain_inputs(d, 9, false);
            let got = xform::jit(chain)(&dev);
            for (g, w) in got.iter().zip(chain(&cpu)) {
                assert_close(&format!("{d}: jit on cuda:0 vs the CPU"), g, &w, 4.0 * CHAIN_OPS * eps);
            }
        }
    }

    #[test]
    #[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
    fn cuda_gather_reports_out_of_range_indices() {
        require_device();
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).to_device(DEV);
        let idx = Tensor::from_vec(vec![0i64, 5, 1], [3]).to_device(DEV);
        let e = xform::lax::gather(&x, &idx, 0, 0).unwrap_err();
        assert!(e.to_string().contains("index 5 is out of range for an axis of size 3"), "{e}");
        assert_eq!(xform::core::interp::stack_depth(), 0);
    }

    #[test]
    #[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
    fn cuda_kernel_api_iota_and_round_trips() {
        require_device();
        use xform::core::kernels::{cpu, CpuBuffer, Shape};
        let shape = Shape::from([2, 3, 4]);
        for d in DType::ALL {
            let got = cuda::exec::iota(0, &shape, 1, d).unwrap().download().unwrap();
            let want = xform::core::kernels::with_dtype!(d, T => CpuBuffer::from_vec(
                cpu::shape::iota(&shape, 1, |i| <T as xform::core::kernels::Element>::from_i64(i as i64))));
            assert_eq!(got, want, "iota {d}");
            let up = cuda::CudaBuffer::upload(0, &want).unwrap();
            assert_eq!(up.dtype(), d);
            assert_eq!(up.download().unwrap(), want, "round trip {d}");
        }
        // Writes through a strided device view (in-place ops).
        let t = Tensor::from_vec((0..6).map(|v| v as f32).collect::<Vec<_>>(), [2, 3]).to_device(DEV);
        t.slice_axis(1, 1, 3, 1).copy_(&Tensor::from_vec(vec![10.0f32, 11.0, 12.0, 13.0], [2, 2]).to_device(DEV));
        assert_eq!(t.to_vec::<f32>(), vec![0.0, 10.0, 11.0, 3.0, 12.0, 13.0]);
    }

    /// jit on `cuda:0` replays as a CUDA graph from the second call
    /// (`JitEntry::cuda_graph`), with results those of the step-by-step
    /// replay (`cuda_graphs` off) on new argument values each call: bit
    /// for bit for the elementwise chain, within 1e-5 for an MLP's
    /// per-sample gradients (the capture's cuBLAS handle may pick another
    /// GEMM algorithm); a result stays valid after later calls (each is
    /// copied out of the graph's memory); calls from two threads; inside
    /// `vmap` of closed-over arguments (the staged write must not be
    /// functionalized); a plan with a gather runs step by step and says
    /// why.
    #[test]
    #[ignore = "needs a CUDA device; run scripts/cuda_device_run.sh"]
    fn cuda_jit_replays_as_a_cuda_graph() {
        require_device();
        use xform::{jitted, JitOptions, Key};
        let (n, d_in, h) = (16, 24, 32);
        let key = Key::new(3);
        let w1 = key.fold_in(1).normal([d_in, h], DType::F32).to_device(DEV);
        let w2 = key.fold_in(2).normal([h], DType::F32).to_device(DEV);
        let loss = move |x: &Tensor| (x.matmul(&w1).tanh().matmul(&w2) + x.sum()).sin();
        let f = move |xs: &Tensor| vmap(grad(loss.clone()))(xs);
        let graphed = jitted(f.clone(), JitOptions::default());
        let plain = jitted(f, JitOptions { cuda_graphs: false, ..JitOptions::default() });
        let batch = |seed: u64| key.fold_in(10 + seed as u32).normal([n, d_in], DType::F32).to_device(DEV);
        let close =
            |what: &str, got: &Tensor, want: &Tensor| assert_close(what, got, &want.to_device(Device::Cpu), 1e-5);
        let chained = jitted(super::chain, JitOptions::default());
        for call in 0..4u64 {
            let (_, dev) = chain_inputs(DType::F32, 20 + call, true);
            assert_bits(&format!("chain, call {call}"), &chained.call(&dev), &super::chain(&dev));
        }
        assert_eq!(chained.entries()[0].plan.cuda_graph.as_deref(), Some("captured"));
        let mut kept = Vec::new();
        for call in 0..4u64 {
            let x = batch(call);
            let got = graphed.call(&x);
            close(&format!("call {call}"), &got, &plain.call(&x));
            kept.push((x, got));
            let status = graphed.entries()[0].plan.cuda_graph.clone();
            let want = if call == 0 { "not captured yet" } else { "captured" };
            assert_eq!(status.as_deref(), Some(want), "after call {call}");
        }
        for (call, (x, got)) in kept.iter().enumerate() {
            close(&format!("call {call}, read after the later calls"), got, &plain.call(x));
        }
        // a jitted call on concrete closed-over arguments inside vmap
        let (x0, x1) = (batch(50), batch(51));
        let scales = Tensor::from_vec(vec![1.0f32, 2.0], [2]).to_device(DEV);
        let mapped = vmap(|s: &Tensor| graphed.call(&x0).sum() * s)(&scales);
        let want = plain.call(&x0).sum();
        close("inside vmap", &mapped.slice_axis(0, 0, 1, 1).squeeze(0), &want);
        close("after vmap", &graphed.call(&x1), &plain.call(&x1));
        assert_eq!(plain.entries()[0].plan.cuda_graph.as_deref(), Some("not captured: disabled"));
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (graphed, plain) = (&graphed, &plain);
                s.spawn(move || {
                    for k in 0..8 {
                        let x = batch(100 + 10 * t + k);
                        close("threads", &graphed.call(&x), &plain.call(&x));
                    }
                });
            }
        });
        let table = Tensor::from_vec((0..15).map(|v| v as f32).collect::<Vec<_>>(), [5, 3]).to_device(DEV);
        let take = jitted(move |i: &Tensor| table.take(i, 0) * 2.0, JitOptions::default());
        let idx = Tensor::from_vec(vec![4i64, 0, 2], [3]).to_device(DEV);
        for _ in 0..3 {
            assert_eq!(take.call(&idx).to_vec::<f32>(), vec![24.0, 26.0, 28.0, 0.0, 2.0, 4.0, 12.0, 14.0, 16.0]);
        }
        let status = take.entries()[0].plan.cuda_graph.clone().unwrap();
        assert!(status.starts_with("not captured: "), "{status}");
    }

    /// pmap over the GPUs (collectives through NCCL) equals vmap of the
    /// same name: on one GPU always, and over every GPU of the machine
    /// when it has several (an all-reduce, a gather and a gradient).
    #[test]
    #[ignore = "needs a CUDA device and NCCL; run scripts/cuda_device_run.sh"]
    fn cuda_pmap_through_nccl_equals_vmap() {
        use xform::lax::{all_gather, psum};
        use xform::{try_pmap_call, vmap_with, OrRaise, PmapOptions, VmapOptions};
        require_device();
        let f = |x: &Tensor| {
            let s = psum(&x.sin(), "d").or_raise();
            let g = grad(|x: &Tensor| (x * psum(x, "d").or_raise()).sum())(x);
            (s * x + g, all_gather(x, "d", 0, false).or_raise())
        };
        for n in [1, cuda::device_count()] {
            let xs = xform::Key::new(n as u64).normal([n, 5], DType::F64);
            let opts = PmapOptions::new().axis_name("d").cuda();
            let (a, b) = try_pmap_call(&f, &opts, &xs).expect("pmap over the GPUs");
            let (va, vb) = vmap_with(f, VmapOptions::new().axis_name("d"))(&xs);
            close("pmap psum/grad", &a.to_vec_f64(), &va.to_vec_f64(), 1e-12).unwrap();
            close("pmap all_gather", &b.to_vec_f64(), &vb.to_vec_f64(), 1e-12).unwrap();
            assert_eq!(a.device(), Device::Cpu, "the outputs are joined where the input lives");
        }
    }
}
