//! Elementwise fusion of the replay plan on CUDA: a fused group of CUDA
//! equations runs as one generated NVRTC kernel.
//!
//! NOTE: [cuda elementwise fusion] Grouping is the CPU's (NOTE:
//! [elementwise fusion]) with the device in the group's key: an
//! elementwise equation (unary, binary, comparison, `select`,
//! `convert_element_type`) on a CUDA device, whose operands all have its
//! shape and device and whose primitive has a CUDA form for these dtypes
//! (`Prim::cuda_map_op`, every dtype), joins the open group of its shape
//! and device. When the group closes, its kernel is generated once, at
//! plan compile time (`xform_kernels::cuda_source::fused_kernel`): each op
//! is the expression its eager CUDA kernel runs, in its compute type,
//! rounded to its storage dtype after every op, so a fused group's results
//! equal the unfused CUDA kernels' bit for bit. Fusion never contracts
//! `a*b+c` into an FMA: fused kernels compile with `--fmad=false`, as
//! every generated kernel does, so a multiply rounds before the add (on
//! the CPU Rust never contracts either). Operands are read through their
//! layouts (offset and strides; a broadcast feeding the group stays a view
//! read with stride 0); only the group's outputs (values read after it or
//! returned) are written, to fresh contiguous buffers. The kernel is named
//! after a hash of its source, and the device caches compiled functions by
//! name, so a group compiles once per process and device however many
//! plans contain it.
//!
//! A group over the kernel's limits (`MAX_FUSED_INPUTS` operands,
//! `MAX_FUSED_OUTPUTS` outputs) is not fused: its equations run as plain
//! steps. Without the `cuda` feature no CUDA group forms.

use super::fuse::{Fused, Reg};
use xform_kernels::cuda_source::{fused_kernel, FusedArg, FusedKernelOp, Kernel, MAX_FUSED_INPUTS, MAX_FUSED_OUTPUTS};
use xform_ops::{Atom, DType, Device, Eqn, Program};

/// The generated kernel of a fused CUDA group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaFused {
    /// The kernel (name and source).
    pub kernel: Kernel,
    /// The dtypes of the step's operands, in order.
    pub in_dtypes: Vec<DType>,
}

/// True if equation `e`, whose result has abstract value `out` on a CUDA
/// device, can join a fused CUDA group (see the module docs).
pub fn fusable(p: &Program, e: &Eqn) -> bool {
    if e.outputs.len() != 1 {
        return false;
    }
    let out = &p.avals[e.outputs[0].0 as usize];
    if !matches!(out.device, Device::Cuda(_)) || out.shape.numel() == 0 {
        return false;
    }
    let mut dtypes: smallvec::SmallVec<[DType; 3]> = smallvec::SmallVec::new();
    for a in &e.inputs {
        let av = p.atom_aval(*a);
        if av.device != out.device || av.shape != out.shape {
            return false;
        }
        dtypes.push(av.dtype);
    }
    e.prim.cuda_map_op(&dtypes).is_some()
}

/// The kernel of a fused CUDA group reading `ins`, or `None` when it is
/// over the kernel's limits (or an op has no CUDA form, which
/// [`fusable`] already refused).
pub fn kernel(p: &Program, ins: &[Atom], fused: &Fused) -> Option<CudaFused> {
    if ins.len() > MAX_FUSED_INPUTS || fused.outputs.len() > MAX_FUSED_OUTPUTS || fused.outputs.is_empty() {
        return None;
    }
    let in_dtypes: Vec<DType> = ins.iter().map(|a| p.atom_aval(*a).dtype).collect();
    let mut ops: Vec<FusedKernelOp> = Vec::with_capacity(fused.ops.len());
    for o in &fused.ops {
        let arg_dtypes: Vec<DType> = o
            .args
            .iter()
            .map(|a| match a {
                Reg::In(i) => in_dtypes[*i as usize],
                Reg::Op(m) => fused.ops[*m as usize].dtype,
            })
            .collect();
        let args = o
            .args
            .iter()
            .map(|a| match a {
                Reg::In(i) => FusedArg::In(*i),
                Reg::Op(m) => FusedArg::Op(*m),
            })
            .collect();
        ops.push(FusedKernelOp { op: o.prim.cuda_map_op(&arg_dtypes)?, args, out: o.dtype });
    }
    let kernel = fused_kernel(&in_dtypes, &ops, &fused.outputs);
    Some(CudaFused { kernel, in_dtypes })
}

#[cfg(feature = "cuda")]
impl Fused {
    /// Runs the group's CUDA kernel on the step's operands (CUDA arrays
    /// of the planned shapes, dtypes and device, any layouts).
    ///
    /// # Errors
    /// A launch or compile failure (NVRTC missing), out of memory, or
    /// operands the kernel was not generated for (an internal error).
    pub fn run_cuda(&self, k: &CudaFused, arrays: &[&xform_ops::Array]) -> xform_ops::Result<xform_ops::Outs> {
        let dtypes: Vec<DType> = self.outputs.iter().map(|&j| self.ops[j as usize].dtype).collect();
        let outs = xform_ops::prims::jit::run_fused_cuda(&k.kernel, &k.in_dtypes, arrays, &self.shape, &dtypes)?;
        Ok(outs.into_iter().map(xform_ops::Tensor::from_array).collect())
    }
}

/// The fused kernels of a few representative CUDA programs (every unary
/// and binary op with a CUDA form, per dtype; comparisons, `select` and
/// conversions among all dtypes; a broadcast operand; two outputs): what
/// the NVRTC compile test of the suite compiles (`cuda::nvrtc`). Built
/// through the plan's own grouping, as if the `cuda` feature were on.
pub fn sample_kernels() -> Vec<Kernel> {
    samples::programs()
        .iter()
        .flat_map(|p| super::fuse::group_with(p, true))
        .filter_map(|it| match it {
            super::fuse::Item::Group { fused, .. } => fused.cuda.map(|c| c.kernel),
            super::fuse::Item::Eqn(_) | super::fuse::Item::Rows { .. } => None,
        })
        .collect()
}

/// Hand-built programs on `cuda:0` for [`sample_kernels`] and the tests
/// (the suite's host emulation of the fused kernels runs them too).
pub mod samples {
    use smallvec::smallvec;
    use xform_ops::prim::{BinaryOp, CompareOp, ElementwiseOp, ShapeOp, UnaryOp};
    use xform_ops::{Atom, Aval, DType, Device, Prim, Program, ProgramBuilder, Shape};

    const DEV: Device = Device::Cuda(0);

    fn aval(shape: &[usize], d: DType) -> Aval {
        Aval { shape: Shape::from(shape), dtype: d, device: DEV }
    }

    fn push(b: &mut ProgramBuilder, prim: Prim, ins: &[Atom], out: Aval) -> Atom {
        let o = b.new_var(out);
        b.push(prim, ins.iter().copied().collect(), smallvec![o]);
        Atom::Var(o)
    }

    /// Every unary op with a CUDA form for `d`, chained, then every binary
    /// op, over [3, 5] (non-float dtypes skip what they refuse).
    pub fn every_op(d: DType) -> Program {
        let mut b = ProgramBuilder::new();
        let full = aval(&[3, 5], d);
        let x = Atom::Var(b.new_input(full.clone()));
        let y = Atom::Var(b.new_input(full.clone()));
        let mut v = x;
        let mut seen = std::collections::HashSet::new();
        for op in UnaryOp::examples() {
            if !seen.insert(op.kind()) && !matches!(op, UnaryOp::IntegerPow(_)) {
                continue;
            }
            if Prim::Unary(op).cuda_map_op(&[d]).is_some() {
                v = push(&mut b, Prim::Unary(op), &[v], full.clone());
            }
        }
        for &op in BinaryOp::ALL {
            if Prim::Binary(op).cuda_map_op(&[d, d]).is_some() {
                v = push(&mut b, Prim::Binary(op), &[v, y], full.clone());
            }
        }
        b.finish([v])
    }

    /// Comparisons, `select` and conversions: `x` of dtype `d` converted
    /// to every dtype and back, compared, selected; a row of `d`
    /// broadcast into the group; two outputs (the selected value and the
    /// predicate).
    pub fn mixed(d: DType) -> Program {
        let mut b = ProgramBuilder::new();
        let full = aval(&[4, 6], d);
        let x = Atom::Var(b.new_input(full.clone()));
        let row = Atom::Var(b.new_input(aval(&[6], d)));
        let bc = ShapeOp::BroadcastInDim { shape: Shape::from([4, 6]), dims: [1usize].into_iter().collect() };
        let r = push(&mut b, Prim::Shape(bc), &[row], full.clone());
        let mut v = x;
        for to in DType::ALL {
            let w = push(&mut b, Prim::Elementwise(ElementwiseOp::Convert(to)), &[v], aval(&[4, 6], to));
            v = push(&mut b, Prim::Elementwise(ElementwiseOp::Convert(d)), &[w], full.clone());
        }
        let mut pred = None;
        for &op in CompareOp::ALL {
            let c = push(&mut b, Prim::Compare(op), &[v, r], aval(&[4, 6], DType::Bool));
            pred = Some(match pred {
                None => c,
                Some(p) => {
                    push(&mut b, Prim::Elementwise(ElementwiseOp::Select), &[c, p, c], aval(&[4, 6], DType::Bool))
                }
            });
        }
        let pred = pred.expect("comparisons");
        let s = push(&mut b, Prim::Elementwise(ElementwiseOp::Select), &[pred, v, r], full);
        b.finish([s, pred])
    }

    /// The sample programs: [`every_op`] and [`mixed`] for every dtype.
    pub fn programs() -> Vec<Program> {
        DType::ALL.iter().flat_map(|&d| [every_op(d), mixed(d)]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fuse::{group_with, Item};
    use super::samples::{every_op, mixed, programs};
    use super::*;
    use xform_ops::Prim;

    fn groups(p: &Program, cuda: bool) -> Vec<(Vec<usize>, Fused)> {
        group_with(p, cuda)
            .into_iter()
            .filter_map(|it| match it {
                Item::Group { eqns, fused, .. } => Some((eqns, fused)),
                Item::Eqn(_) | Item::Rows { .. } => None,
            })
            .collect()
    }

    /// Every sample program is one group with a kernel whose source
    /// defines its name, names one function per op, and stores exactly the
    /// group's outputs; the names are deterministic and distinct.
    #[test]
    fn sample_groups_are_well_formed() {
        for p in programs() {
            let gs = groups(&p, true);
            assert_eq!(gs.len(), 1, "one group: {p}");
            let (eqns, f) = &gs[0];
            let c = f.cuda.as_ref().expect("a CUDA kernel");
            let k = &c.kernel;
            assert!(k.source.contains(&format!("extern \"C\" __global__ void {}(", k.name)), "{}", k.name);
            assert!(k.name.starts_with(&format!("xf_fused{}_", eqns.len())), "{}", k.name);
            for j in 0..f.ops.len() {
                assert!(k.source.contains(&format!(" xf_fop{j}(")), "{}: op {j}", k.name);
            }
            for m in 0..f.outputs.len() {
                assert!(k.source.contains(&format!("out{m}[i] = ")), "{}", k.name);
            }
            assert!(!k.source.contains(&format!("out{}[i]", f.outputs.len())));
            assert_eq!(k.needs_half, k.source.contains("cuda_fp16.h"));
            assert_eq!(c.in_dtypes.len(), k.source.matches("__restrict__ in").count());
        }
        let a = sample_kernels();
        let b = sample_kernels();
        assert_eq!(a, b, "generation is deterministic");
        let mut names: Vec<&str> = a.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), a.len(), "distinct groups, distinct names");
        assert_eq!(a.len(), 2 * DType::ALL.len());
    }

    /// The mixed group: the broadcast stays outside (a view operand), two
    /// outputs; f32 reads x and the broadcast row.
    #[test]
    fn broadcast_operand_and_two_outputs() {
        let p = mixed(DType::F32);
        let items = group_with(&p, true);
        assert!(matches!(items[0], Item::Eqn(0)), "the broadcast runs first, unfused");
        let Item::Group { ins, outs, fused, .. } = &items[1] else { panic!("a group") };
        assert_eq!(ins.len(), 2);
        assert_eq!(outs.len(), 2);
        assert_eq!(fused.outputs.len(), 2);
        assert_eq!(fused.cuda.as_ref().unwrap().in_dtypes, vec![DType::F32, DType::F32]);
        // the f16 conversions make it a half kernel
        assert!(fused.cuda.as_ref().unwrap().kernel.needs_half);
    }

    /// Without CUDA fusion (the feature off) CUDA groups do not form; CPU
    /// groups never carry a kernel.
    #[test]
    fn cuda_groups_need_the_flag() {
        let p = every_op(DType::F32);
        assert!(groups(&p, false).is_empty());
        assert_eq!(super::super::fuse::group_with(&p, cfg!(feature = "cuda")).len() == 1, cfg!(feature = "cuda"));
    }

    /// A group over the input limit runs unfused (plain steps).
    #[test]
    fn over_the_limit_runs_unfused() {
        use smallvec::smallvec;
        use xform_ops::prim::BinaryOp;
        use xform_ops::{Aval, ProgramBuilder, Shape};
        let av = Aval { shape: Shape::from([8]), dtype: DType::F32, device: Device::Cuda(0) };
        let mut b = ProgramBuilder::new();
        let ins: Vec<Atom> = (0..MAX_FUSED_INPUTS + 1).map(|_| Atom::Var(b.new_input(av.clone()))).collect();
        let mut v = ins[0];
        for x in &ins[1..] {
            let o = b.new_var(av.clone());
            b.push(Prim::Binary(BinaryOp::Add), smallvec![v, *x], smallvec![o]);
            v = Atom::Var(o);
        }
        let p = b.finish([v]);
        let items = group_with(&p, true);
        assert_eq!(items.len(), MAX_FUSED_INPUTS);
        assert!(items.iter().all(|it| matches!(it, Item::Eqn(_))));
    }
}

#[cfg(all(test, feature = "cuda"))]
mod nvrtc_tests {
    use xform_kernels::cuda::compile;

    /// The sample fused kernels compile (ignored unless asked for: needs
    /// libnvrtc; the suite's `cuda::nvrtc` runs the same check in CI).
    #[test]
    #[ignore = "needs libnvrtc; run with --include-ignored where it is installed"]
    fn sample_kernels_compile_with_nvrtc() {
        assert!(compile::nvrtc_available(), "libnvrtc not found: put it on LD_LIBRARY_PATH");
        let failures: Vec<String> = super::sample_kernels()
            .iter()
            .filter_map(|k| compile::compile_ptx(k, compile::DEFAULT_ARCH).err().map(|e| format!("{e}\n{}", k.source)))
            .collect();
        assert!(failures.is_empty(), "{} fused kernels failed:\n{}", failures.len(), failures.join("\n\n"));
    }
}
