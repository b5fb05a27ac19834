//! `threefry2x32`: the counter-based cipher behind random keys, elementwise
//! over four u32 operands of one shape, with two u32 outputs. It has no
//! tangent and no transpose; it batches elementwise.

use super::batching::BatchAxis;
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::sample::{Case, Dom, Sample};
use super::{check_arity, check_same_shapes, Family, Props};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::prim::Avals;
use crate::prim::{BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::AvalRef;
use crate::tensor::Tensor;
use smallvec::{smallvec, SmallVec};
use xform_kernels::cpu::elementwise::to_contiguous;
use xform_kernels::cpu::random::threefry2x32;
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::Kernel;
use xform_kernels::Layout;
use xform_kernels::{CpuBuffer, DType};

fn shape_threefry(ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("threefry2x32", ins, 4)?;
    check_same_shapes("threefry2x32", ins)?;
    if let Some(a) = ins.iter().find(|a| a.dtype != DType::U32) {
        return Err(Error::dtype("threefry2x32", "keys and counters must be uint32", &[a.dtype]));
    }
    let a = ins[0].to_owned();
    Ok(smallvec![a.clone(), a])
}

fn lower_threefry(ins: &[&Array]) -> Result<SmallVec<[Array; 2]>> {
    let vals: Vec<Vec<u32>> = ins
        .iter()
        .map(|a| a.with_cpu("threefry2x32", |b, l| to_contiguous(b.as_slice::<u32>(), l, Par::Seq)))
        .collect::<Result<_>>()?;
    let n = vals[0].len();
    let (mut y0, mut y1) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let (a, b) = threefry2x32(vals[0][i], vals[1][i], vals[2][i], vals[3][i]);
        y0.push(a);
        y1.push(b);
    }
    let shape = ins[0].shape().clone();
    Ok(smallvec![Array::from_cpu(CpuBuffer::U32(y0), shape.clone()), Array::from_cpu(CpuBuffer::U32(y1), shape)])
}

crate::family_enum! {
    /// The random-bit primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum RandomOp, kinds RandomKind {
        /// The Threefry-2x32 cipher, elementwise on u32: 4 in, 2 out.
        Threefry2x32,
    }
}

impl From<RandomOp> for Prim {
    fn from(op: RandomOp) -> Prim {
        Prim::Random(op)
    }
}

impl Family for RandomOp {
    type Kind = RandomKind;
    const KINDS: &'static [RandomKind] = RandomKind::ALL;

    fn kind(&self) -> RandomKind {
        RandomOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            RandomOp::Threefry2x32 => "threefry2x32",
        }
    }

    fn props(&self) -> Props {
        // elementwise, but with two results: batched by its rule
        match self {
            RandomOp::Threefry2x32 => Props::NONE,
        }
    }

    fn fmt_params(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            RandomOp::Threefry2x32 => shape_threefry(ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        match self {
            RandomOp::Threefry2x32 => lower_threefry(ins).map(|v| v.into_iter().map(Tensor::from_array).collect()),
        }
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        match self {
            RandomOp::Threefry2x32 => backend.threefry(ins).map(|v| v.into_iter().map(Tensor::from_array).collect()),
        }
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], _: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        super::no_tangent(prim, primals)
    }

    fn transpose(&self, _: &[Option<Tensor>], _: &[LinearArg]) -> Result<Cotangents> {
        super::not_linear(self.name())
    }

    fn batch(&self, prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        super::batching::batch_elementwise(prim, ins, bdims, axis)
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        let mut v = Vec::new();
        v.push(Sample::new("threefry2x32", vec![DType::U32], vec![], false, |g, _| {
            let shape = g.shape(2, 0, 3);
            Case::new(RandomOp::Threefry2x32, (0..4).map(|_| (shape.clone(), DType::U32, Dom::Bits)).collect())
        }));
        v
    }

    fn cuda_kernels(_: DType) -> Vec<Kernel> {
        // threefry: a structural kernel
        Vec::new()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        JitProps::MAP
    }

    /// Rows do not pass: the split keeps its operands whole.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::no_rows(q)
    }
}
