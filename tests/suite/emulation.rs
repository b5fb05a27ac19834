//! The generated CUDA kernels, run on the host (`xform_kernels::cuda_host`:
//! the kernels' sources compiled by g++ against a small shim for the CUDA
//! built-ins, the launch plans `cuda::exec` runs on a device run by an
//! emulated launch, under the address and undefined-behaviour sanitizers
//! where g++ can link them)
//! and compared with the CPU kernels: every kernel family on the
//! registry's samples (inputs read through transposed, reversed and
//! strided layouts of their storage), on edge sizes (`edges.rs`) and as
//! jit's fused groups (`fused.rs`). No GPU, toolkit or `cuda` feature is
//! needed; a machine without g++ prints "skipped: g++ not found" (the
//! tests did not run), except where `XFORM_REQUIRE_GXX` is set, as CI
//! sets it: there a missing g++ fails them.
//!
//! Results must match the CPU bit for bit where both compute exactly the
//! same thing (data movement, integers and bool, comparisons, conversions,
//! selections, max/min, and the float ops IEEE arithmetic rounds once:
//! add, sub, mul, div, rem, sqrt, 1/sqrt, floor, ceil, round, sign, abs;
//! f16 and bf16 computing in f32 and rounding once, as on the CPU). Where
//! they round differently they must be close (see [`check_for`]): the
//! transcendental functions (the emulation calls the host's libm, the CPU
//! its own vectorized or special-function code, a device CUDA's math
//! library: each a few ulp from exact) and sums taken in another order
//! (reductions, products, cumulative and windowed sums, scatter-add's
//! atomics).
//!
//! This module is not named after CUDA, so that `.ci/run`'s second pass
//! (`cargo test --features cuda --test suite cuda`) does not run it again.

mod edges;
mod fused;
mod lowering;

pub use crate::prims_eval::relayout;
use crate::registry::{entries, G};
use xform::core::kernels::cpu::{elementwise::to_contiguous, Par};
use xform::core::kernels::cuda_host::{HostError, HostGpu, Job, Outcome};
use xform::core::kernels::cuda_launch::Plan;
use xform::core::kernels::CpuBuffer;
use xform::core::prim::{BinaryOp, IndexOp, ReduceOp, Reduction, UnaryOp, WindowOp};
use xform::{Array, DType, Prim, Tensor};

/// Seeds per registry entry and dtype (each case reads its operands through
/// a layout drawn from its seed).
const SEEDS: u64 = 4;

/// How an emulated result must match the CPU's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Check {
    /// Bit for bit (any NaN matches any NaN; -0 and +0 differ).
    Exact,
    /// `|got - want| <= tol * (1 + |want|)`; NaN matches NaN, an infinity
    /// only itself.
    Close(f64),
}

/// What the CPU gives.
#[derive(Clone, Debug)]
pub enum Want {
    /// The results' elements, row-major.
    Values(Vec<CpuBuffer>),
    /// An index out of range (the plan's index check must find it).
    IndexError { index: i64, size: usize },
    /// The plan's results in two halves that must agree (a kernel and
    /// others computing the same).
    Pairs,
}

/// One emulated application and the CPU's answer.
pub struct Case {
    pub what: String,
    pub plan: Plan,
    /// The operands' storages (the plan's `Buf::Input(k)`).
    pub inputs: Vec<CpuBuffer>,
    /// The storage an in-place plan writes into.
    pub dest: Option<CpuBuffer>,
    pub want: Want,
    pub check: Check,
}

/// The storage of a CPU array (what a device buffer would hold).
pub fn storage(a: &Array) -> CpuBuffer {
    a.read().cpu("emulation").expect("a CPU array").clone()
}

/// The elements of a CPU tensor, row-major.
pub fn values(t: &Tensor) -> CpuBuffer {
    let a = t.array().expect("a concrete tensor");
    let g = a.read();
    let b = g.cpu("emulation").expect("a CPU array");
    xform::core::kernels::match_buffer!(b, v => CpuBuffer::from_vec(to_contiguous(v, &a.layout, Par::Seq)))
}

/// How closely a result of `prim` in dtype `out` must match the CPU's;
/// `terms` bounds the number of terms a sum in it adds (the operands'
/// elements). Exhaustive over the families and the elementwise ops, so a
/// new op decides.
pub fn check_for(prim: &Prim, out: DType, terms: usize) -> Check {
    if !out.is_float() {
        return Check::Exact;
    }
    // The transcendental functions: the host's libm (glibc: within 1 ulp)
    // against the CPU's own code (its vectorized exp/tanh within 4 ulp, its
    // special functions), with room for a device's (CUDA: 1 to 4 ulp).
    let libm = Check::Close(16.0 * out.eps());
    // Sums in another order: a few ulp of the sum's terms each.
    let sums = Check::Close(4.0 * terms.max(1) as f64 * out.eps());
    match prim {
        Prim::Unary(op) => match op {
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Not => Check::Exact,
            UnaryOp::Exp
            | UnaryOp::Exp2
            | UnaryOp::Expm1
            | UnaryOp::Log
            | UnaryOp::Log2
            | UnaryOp::Log1p
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Tan
            | UnaryOp::Asin
            | UnaryOp::Acos
            | UnaryOp::Atan
            | UnaryOp::Sinh
            | UnaryOp::Cosh
            | UnaryOp::Tanh
            | UnaryOp::Asinh
            | UnaryOp::Acosh
            | UnaryOp::Atanh
            | UnaryOp::Logistic
            | UnaryOp::Cbrt
            | UnaryOp::Erf
            | UnaryOp::ErfInv
            | UnaryOp::ErfInvXla
            | UnaryOp::Lgamma
            | UnaryOp::Digamma
            | UnaryOp::Polygamma(_)
            | UnaryOp::Log10
            | UnaryOp::Erfc
            | UnaryOp::Logit
            | UnaryOp::Sinc => libm,
            // repeated products, perhaps in another order
            UnaryOp::IntegerPow(_) => libm,
        },
        Prim::Binary(op) => match op {
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Max
            | BinaryOp::Min
            | BinaryOp::Rem
            | BinaryOp::And
            | BinaryOp::Or => Check::Exact,
            BinaryOp::Pow
            | BinaryOp::Atan2
            | BinaryOp::Xlogy
            | BinaryOp::Xlog1py
            | BinaryOp::Logaddexp
            | BinaryOp::Hypot => libm,
        },
        Prim::Compare(_) | Prim::Elementwise(_) | Prim::Shape(_) | Prim::Random(_) => Check::Exact,
        Prim::Index(IndexOp::ScatterAdd { .. }) => sums,
        Prim::Index(_) => Check::Exact,
        Prim::Reduce(Reduction::Reduce { op: ReduceOp::Sum, .. } | Reduction::Cumsum { .. }) => sums,
        Prim::Reduce(_) => Check::Exact,
        Prim::Linalg(_) => sums,
        Prim::Window(WindowOp::ReduceWindow { op: ReduceOp::Sum, .. } | WindowOp::SelectAndScatterAdd { .. }) => sums,
        Prim::Window(_) => Check::Exact,
        Prim::Conv(_) | Prim::Control(_) | Prim::Collective(_) => sums,
        // factorizations and substitutions in another order, divisions
        Prim::Decomp(_) => Check::Close(64.0 * terms.max(1) as f64 * out.eps()),
    }
}

/// The case of `prim` on `ins` (the CPU computes on them, the emulation
/// reads them through `views`, the same values in other layouts), or why
/// there is none: `Ok(None)` where the lowering launches no kernel.
pub fn case_of(what: String, prim: &Prim, ins: &[Tensor], views: &[Tensor]) -> Result<Option<Case>, String> {
    let want = match xform::core::interp::bind(prim, ins) {
        Ok(outs) => Want::Values(outs.iter().map(values).collect()),
        Err(e) => match e.kind {
            xform::ErrorKind::IndexOutOfRange { index, size } => Want::IndexError { index, size },
            _ => return Err(format!("{what}: the CPU fails: {e}")),
        },
    };
    let arrays: Vec<Array> = views.iter().map(|t| t.array().expect("a concrete tensor")).collect();
    let avals = xform::core::prim::shape_rule(prim, &arrays.iter().map(|a| a.aval_ref()).collect::<Vec<_>>())
        .map_err(|e| format!("{what}: {e}"))?;
    let lowered = match lowering::lower(prim, &arrays, &avals) {
        None => return Ok(None),
        Some(Err(e)) => return Err(format!("{what}: no plan: {e}")),
        Some(Ok(l)) => l,
    };
    let terms = ins.iter().map(|t| t.shape().numel()).max().unwrap_or(1);
    let check = check_for(prim, avals[0].dtype, terms);
    Ok(Some(Case {
        what,
        plan: lowered.plan,
        inputs: lowered.operands.iter().map(storage).collect(),
        dest: None,
        want,
        check,
    }))
}

/// The registry's cases of the primitives `family` selects: each entry,
/// each dtype, [`SEEDS`] seeds, operands relaid out as drawn. Returns the
/// cases and the problems met building them.
pub fn registry_cases(family: impl Fn(&Prim) -> bool) -> (Vec<Case>, Vec<String>) {
    let (mut cases, mut problems) = (Vec::new(), Vec::new());
    for e in entries() {
        for &d in &e.dtypes {
            for seed in 0..SEEDS {
                let mut g = G::new(seed * 7919 + 17);
                let c = (e.gen)(&mut g, d);
                if !family(&c.prim) {
                    continue;
                }
                let ins = (c.make)(seed);
                let views: Vec<Tensor> = ins.iter().map(|t| relayout(t, &mut g)).collect();
                let what = format!("{c:?} (seed {seed}, layouts {})", layouts(&views));
                match case_of(what, &c.prim, &ins, &views) {
                    Ok(Some(case)) => cases.push(case),
                    Ok(None) => {}
                    Err(p) => problems.push(p),
                }
            }
        }
    }
    (cases, problems)
}

/// The operands' layouts, for failure messages.
pub fn layouts(ts: &[Tensor]) -> String {
    ts.iter()
        .map(|t| {
            let a = t.array().expect("a concrete tensor");
            format!("{:?}@{}", &a.layout.strides[..], a.layout.offset)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The bits of element `i` (a NaN as one value).
fn bits(b: &CpuBuffer, i: usize) -> u64 {
    match b {
        CpuBuffer::F32(v) if v[i].is_nan() => u64::MAX,
        CpuBuffer::F64(v) if v[i].is_nan() => u64::MAX,
        CpuBuffer::F16(v) if v[i].is_nan() => u64::MAX,
        CpuBuffer::BF16(v) if v[i].is_nan() => u64::MAX,
        CpuBuffer::F32(v) => v[i].to_bits() as u64,
        CpuBuffer::F64(v) => v[i].to_bits(),
        CpuBuffer::F16(v) => v[i].to_bits() as u64,
        CpuBuffer::BF16(v) => v[i].to_bits() as u64,
        CpuBuffer::I32(v) => v[i] as u64,
        CpuBuffer::I64(v) => v[i] as u64,
        CpuBuffer::U32(v) => v[i] as u64,
        CpuBuffer::Bool(v) => v[i] as u64,
    }
}

fn value(b: &CpuBuffer, i: usize) -> f64 {
    xform::core::kernels::match_buffer!(b, v => xform::core::kernels::Element::to_f64(v[i]))
}

/// The first difference between `got` and `want` under `check`.
pub fn compare(got: &CpuBuffer, want: &CpuBuffer, check: Check) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.len() != want.len() {
        return Err(format!("{} {} elements, the CPU gives {} {}", got.len(), got.dtype(), want.len(), want.dtype()));
    }
    for i in 0..got.len() {
        let ok = match check {
            Check::Exact => bits(got, i) == bits(want, i),
            Check::Close(t) => {
                let (g, w) = (value(got, i), value(want, i));
                (g.is_nan() && w.is_nan()) || g == w || (w.is_finite() && (g - w).abs() <= t * (1.0 + w.abs()))
            }
        };
        if !ok {
            return Err(format!(
                "element {i}: {} (bits {:#x}), the CPU gives {} (bits {:#x}); {check:?}",
                value(got, i),
                bits(got, i),
                value(want, i),
                bits(want, i)
            ));
        }
    }
    Ok(())
}

/// Runs `cases` in one emulated executable and checks each against the
/// CPU; fails listing every difference (and `problems`, met building the
/// cases). Returns the number of cases run, or `None` without g++.
pub fn run_cases(name: &str, cases: &[Case], problems: Vec<String>) -> Option<usize> {
    let t0 = std::time::Instant::now();
    let gpu = match HostGpu::for_plans(cases.iter().map(|c| &c.plan)) {
        Ok(g) => g,
        Err(HostError::NoCompiler(e)) => {
            if std::env::var_os("XFORM_REQUIRE_GXX").is_some() {
                panic!("{name}: g++ not found ({e}), and XFORM_REQUIRE_GXX asks for the emulation to run");
            }
            println!("skipped: g++ not found ({e}): {name} did not run");
            return None;
        }
        Err(e) => panic!("{name}: {e}"),
    };
    let built = t0.elapsed();
    let inputs: Vec<Vec<&CpuBuffer>> = cases.iter().map(|c| c.inputs.iter().collect()).collect();
    let jobs: Vec<Job<'_>> =
        cases.iter().zip(&inputs).map(|(c, ins)| Job { plan: &c.plan, inputs: ins, dest: c.dest.as_ref() }).collect();
    let outcomes = match gpu.run(&jobs) {
        Ok(o) => o,
        Err(HostError::Run { job: Some(j), log }) => {
            panic!("{name}: the emulation stopped in {}:\n{log}", cases[j].what)
        }
        Err(e) => panic!("{name}: {e}"),
    };
    let mut failures = problems;
    for (c, o) in cases.iter().zip(outcomes) {
        let r = match (&c.want, o) {
            (Want::Values(want), Outcome::Done { outputs, dest }) => {
                let got: Vec<CpuBuffer> = dest.into_iter().chain(outputs).collect();
                if got.len() != want.len() {
                    Err(format!("{} results, the CPU gives {}", got.len(), want.len()))
                } else {
                    got.iter()
                        .zip(want)
                        .enumerate()
                        .try_for_each(|(k, (g, w))| compare(g, w, c.check).map_err(|e| format!("result {k}: {e}")))
                }
            }
            (Want::Pairs, Outcome::Done { outputs, .. }) => {
                let (a, b) = outputs.split_at(outputs.len() / 2);
                a.iter()
                    .zip(b)
                    .enumerate()
                    .try_for_each(|(k, (x, y))| compare(x, y, c.check).map_err(|e| format!("result {k}: {e}")))
            }
            (Want::IndexError { index, size }, Outcome::IndexOutOfRange { index: gi, size: gs }) => {
                if (*index, *size) == (gi, gs) {
                    Ok(())
                } else {
                    Err(format!("index {gi} of {gs} out of range, the CPU names {index} of {size}"))
                }
            }
            (Want::IndexError { index, size }, o) => {
                Err(format!("{o:?}, the CPU finds index {index} of {size} out of range"))
            }
            (Want::Values(_) | Want::Pairs, o) => Err(format!("{o:?}, where values were expected")),
        };
        if let Err(e) = r {
            failures.push(format!("{}: {e}", c.what));
        }
    }
    let kernels: std::collections::HashSet<&str> =
        cases.iter().flat_map(|c| c.plan.kernels().map(|k| k.name.as_str())).collect();
    println!(
        "{name}: {} cases, {} kernels emulated (built in {:.1} s, run in {:.1} s)",
        cases.len(),
        kernels.len(),
        built.as_secs_f64(),
        (t0.elapsed() - built).as_secs_f64()
    );
    assert!(failures.is_empty(), "{name}: {} of {} differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    Some(cases.len())
}

/// Every elementwise primitive (unary, binary, comparison, convert,
/// select, copy) in every dtype it takes.
#[test]
fn emulated_elementwise_kernels_match_the_cpu() {
    let (cases, problems) =
        registry_cases(|p| matches!(p, Prim::Unary(_) | Prim::Binary(_) | Prim::Compare(_) | Prim::Elementwise(_)));
    run_cases("elementwise", &cases, problems);
}

/// Reductions, arg-reductions, cumulative sums and the window kernels.
#[test]
fn emulated_reduction_and_window_kernels_match_the_cpu() {
    let (cases, problems) = registry_cases(|p| matches!(p, Prim::Reduce(_) | Prim::Window(_)));
    run_cases("reductions and windows", &cases, problems);
}

/// Pad, concatenate, the copies of reshape and dynamic_slice, iota,
/// dynamic_update_slice, gather, scatter-add, the GEMM kernel, Threefry.
#[test]
fn emulated_data_movement_gemm_and_random_kernels_match_the_cpu() {
    let (cases, problems) =
        registry_cases(|p| matches!(p, Prim::Shape(_) | Prim::Index(_) | Prim::Linalg(_) | Prim::Random(_)));
    run_cases("data movement, GEMM and Threefry", &cases, problems);
}
