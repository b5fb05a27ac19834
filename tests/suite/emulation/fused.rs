//! jit's fused CUDA groups (`cuda_source::fused_kernel`, NOTE: [cuda
//! elementwise fusion]) emulated: each group's kernel against the same ops
//! run one kernel each (the eager CUDA kernels, chained in one plan) bit
//! for bit, and against the CPU's unfused evaluation: exactly for the
//! conversion, comparison and select groups, within 4 f32 ulp per op for
//! the suite's elementwise chain in f32 and f64 (as the device test
//! compares it). The groups: the chain of `cuda.rs` and the fuse_cuda sample
//! programs (every unary and binary op per dtype; conversions among all
//! dtypes, comparisons and select with a broadcast row and two outputs).

use super::{run_cases, storage, values, Case, Check, Want};
use crate::registry::G;
use xform::core::kernels::cuda_launch::{self as plans, Buf, Plan};
use xform::core::kernels::{Element, Layout};
use xform::core::prim::ElementwiseOp;
use xform::core::program::Atom;
use xform::{DType, Device, Prim, Program, Tensor};
use xform_exec::inspect::samples;
use xform_exec::inspect::{group_with, Item, Reg};

/// Inputs for the avals of `p`'s inputs: values in [-2, 2) (integers in
/// -20..20, positive for u32), NaN, infinities and signed zeros among the
/// floats if `special`.
fn inputs(p: &Program, seed: u64, special: bool) -> Vec<Tensor> {
    let mut g = G::new(seed);
    p.inputs
        .iter()
        .map(|v| {
            let a = &p.avals[v.0 as usize];
            let n = a.shape.numel();
            let sp = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0];
            let vals: Vec<f64> = (0..n)
                .map(|i| match a.dtype {
                    d if d.is_float() && special && i % 7 == 3 => sp[g.int(0, 4)],
                    d if d.is_float() => g.f64() * 4.0 - 2.0,
                    DType::U32 => g.int(0, 40) as f64,
                    DType::Bool => g.int(0, 1) as f64,
                    _ => g.int(0, 40) as f64 - 20.0,
                })
                .collect();
            xform::core::kernels::with_dtype!(a.dtype, T => Tensor::from_vec(vals.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>(), a.shape.clone()))
        })
        .collect()
}

/// The CPU value of every variable of `p` on `args`, one equation at a
/// time (the unfused CPU kernels; a broadcast stays a stride-0 view).
fn evaluate(p: &Program, args: &[Tensor]) -> Vec<Option<Tensor>> {
    let mut env: Vec<Option<Tensor>> = vec![None; p.avals.len()];
    for (v, a) in p.inputs.iter().zip(args) {
        env[v.0 as usize] = Some(a.clone());
    }
    let get = |env: &[Option<Tensor>], a: &Atom| match a {
        Atom::Var(v) => env[v.0 as usize].clone().expect("defined before use"),
        Atom::Const(k) => p.consts[*k].clone(),
    };
    for e in &p.eqns {
        let ins: Vec<Tensor> = e.inputs.iter().map(|a| get(&env, a)).collect();
        let outs = xform::core::interp::bind(&e.prim, &ins).unwrap_or_else(|err| panic!("{}: {err}", e.prim));
        for (v, o) in e.outputs.iter().zip(outs) {
            env[v.0 as usize] = Some(o);
        }
    }
    env
}

/// The group's ops as the eager CUDA kernels run them: one launch each,
/// chained through temporaries in one plan (a conversion as
/// `exec::convert`, every other op as its map kernel).
fn unfused(ops: &[xform_exec::inspect::FusedOp], outputs: &[u32], ins: &[(DType, &Layout)], shape: &[usize]) -> Plan {
    let mut plan = Plan::default();
    let contiguous = Layout::contiguous(xform::Shape::from(shape));
    let mut results: Vec<(usize, DType)> = Vec::new();
    for o in ops {
        let (bufs, args): (Vec<Buf>, Vec<(DType, &Layout)>) = o
            .args
            .iter()
            .map(|r| match r {
                Reg::In(i) => (Buf::Input(*i as usize), ins[*i as usize]),
                Reg::Op(m) => (Buf::Temp(results[*m as usize].0), (results[*m as usize].1, &contiguous)),
            })
            .unzip();
        let dtypes: Vec<DType> = args.iter().map(|(d, _)| *d).collect();
        let one = match &o.prim {
            Prim::Elementwise(ElementwiseOp::Convert(to)) => plans::convert(dtypes[0], args[0].1, *to),
            p => plans::map(&p.cuda_map_op(&dtypes).expect("a fusable op"), &args, o.dtype),
        }
        .expect("a plan");
        let t = plan.append(&one, &bufs).expect("its inputs")[0];
        results.push((t, o.dtype));
    }
    plan.outputs = outputs.iter().map(|&j| results[j as usize].0).collect();
    plan
}

/// The cases of every fused CUDA group of `p` on `args`: the group's
/// kernel against its ops run unfused, and, with `cpu` set, against the
/// CPU's values.
fn group_cases(what: &str, p: &Program, args: &[Tensor], cpu: Option<Check>, cases: &mut Vec<Case>) -> usize {
    let env = evaluate(p, args);
    let mut groups = 0;
    for it in group_with(p, true) {
        let Item::Group { ins, outs, fused, .. } = it else { continue };
        let Some(c) = fused.cuda.as_ref() else { continue };
        groups += 1;
        let arrays: Vec<xform::Array> = ins
            .iter()
            .map(|a| match a {
                Atom::Var(v) => env[v.0 as usize].clone().expect("computed"),
                Atom::Const(k) => p.consts[*k].clone(),
            })
            .map(|t| t.array().expect("a concrete tensor"))
            .collect();
        let layouts: Vec<(DType, &Layout)> = arrays.iter().map(|a| (a.dtype, &a.layout)).collect();
        let out_dtypes: Vec<DType> = fused.outputs.iter().map(|&j| fused.ops[j as usize].dtype).collect();
        let fused_plan = plans::fused(&c.kernel, &c.in_dtypes, &layouts, &fused.shape, &out_dtypes).expect("a plan");
        let unfused_plan = unfused(&fused.ops, &fused.outputs, &layouts, &fused.shape);
        let inputs: Vec<_> = arrays.iter().map(storage).collect();
        // the fused kernel's results, as the unfused kernels give them: the
        // unfused plan's run is the expectation, so both run and the
        // comparison is of the fused case against the unfused one's
        // outputs, appended as one plan
        let mut both = fused_plan.clone();
        let n_in = inputs.len();
        let unfused_outs = both.append(&unfused_plan, &(0..n_in).map(Buf::Input).collect::<Vec<_>>()).expect("inputs");
        both.outputs.extend(unfused_outs);
        let cpu_values: Vec<_> = outs.iter().map(|v| values(env[*v as usize].as_ref().expect("computed"))).collect();
        cases.push(Case {
            what: format!(
                "{what}: {} ({} ops, {} outputs), fused and unfused",
                c.kernel.name,
                fused.ops.len(),
                outs.len()
            ),
            plan: both,
            inputs: inputs.clone(),
            dest: None,
            want: Want::Pairs,
            check: Check::Exact,
        });
        if let Some(check) = cpu {
            cases.push(Case {
                what: format!("{what}: {} against the CPU", c.kernel.name),
                plan: fused_plan,
                inputs,
                dest: None,
                want: Want::Values(cpu_values),
                check,
            });
        }
    }
    groups
}

/// Every fused group emulated, against its unfused kernels and the CPU.
#[test]
fn emulated_fused_kernels_match_unfused_kernels_and_the_cpu() {
    let mut cases = Vec::new();
    // the suite's chain (13 ops, a broadcast row, a transposed operand, two outputs)
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let xs = vec![Tensor::zeros([37, 29], d), Tensor::zeros([37, 29], d), Tensor::zeros([29], d)];
        let mut p = xform::trace(crate::cuda::chain, &xs);
        for a in &mut p.avals {
            a.device = Device::Cuda(0);
        }
        // within 4 ulp per op, of f32 in f64 too: the chain of f64 takes
        // an exp in f32 (`cast(F32).exp()`), whose roundings (the host's
        // expf against the CPU's vectorized exp) reach its results
        let cpu = match d {
            DType::F32 | DType::F64 => Some(Check::Close(4.0 * crate::cuda::CHAIN_OPS * DType::F32.eps())),
            _ => None,
        };
        for (seed, special) in [(1, false), (2, true)] {
            let mut args = inputs(&p, seed, special);
            args[1] = args[1].permute(&[1, 0]).copy().permute(&[1, 0]);
            let n = group_cases(&format!("chain of {d}"), &p, &args, if special { None } else { cpu }, &mut cases);
            assert_eq!(n, 1, "the chain of {d} is one group");
        }
    }
    // every op per dtype; conversions, comparisons and select (exact)
    for d in DType::ALL {
        let every = samples::every_op(d);
        let n = group_cases(&format!("every op of {d}"), &every, &inputs(&every, 3, d.is_float()), None, &mut cases);
        assert_eq!(n, 1, "every op of {d}: one group");
        let mixed = samples::mixed(d);
        let n = group_cases(
            &format!("mixed {d}"),
            &mixed,
            &inputs(&mixed, 4, d.is_float()),
            Some(Check::Exact),
            &mut cases,
        );
        assert_eq!(n, 1, "mixed {d}: one group");
    }
    run_cases("fused groups", &cases, Vec::new());
}
