//! The elementwise comparisons (bool out, on equal shapes and dtypes): the
//! CPU predicate and the CUDA expression of each side by side, shape rule,
//! lowering, JVP (no tangent), batching (elementwise) and samples.

use super::batching::BatchAxis;
use super::cuda_c::CudaExpr;
use super::jit;
use super::jit::{Tile, TileMut};
use super::sample::{numeric, Case, Dom, Sample};
use super::{check_arity, check_same_dtypes, check_same_shapes, Family, Props};
use crate::array::Array;
use crate::error::Result;
use crate::interp::Outs;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use xform_kernels::cpu::elementwise::map2;
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::MapOp;
use xform_kernels::cuda_source::{map_kernel, Kernel};
use xform_kernels::{match_buffer, CpuBuffer, DType, Layout};

crate::op_enum! {
    /// The elementwise comparisons.
    pub enum CompareOp, api = compare {
        /// `a == b`.
        Eq => "eq" fn eq,
        /// `a != b`.
        Ne => "ne" fn ne,
        /// `a < b`.
        Lt => "lt" fn lt,
        /// `a <= b`.
        Le => "le" fn le,
        /// `a > b`.
        Gt => "gt" fn gt,
        /// `a >= b`.
        Ge => "ge" fn ge,
    }
}

/// Elementwise comparison of equal shapes and dtypes, bool out.
pub fn compare(op: CompareOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    crate::interp::bind1(&Prim::Compare(op), &[a.clone(), b.clone()])
}

impl CompareOp {
    /// The CPU predicate and the CUDA expression, side by side.
    pub(crate) fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareOp::Eq => a == b,
            CompareOp::Ne => a != b,
            CompareOp::Lt => a < b,
            CompareOp::Le => a <= b,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a >= b,
        }
    }

    /// The CUDA form (any dtype; bool out).
    pub fn cuda_expr(self) -> CudaExpr {
        CudaExpr::new(match self {
            CompareOp::Eq => "x == y",
            CompareOp::Ne => "x != y",
            CompareOp::Lt => "x < y",
            CompareOp::Le => "x <= y",
            CompareOp::Gt => "x > y",
            CompareOp::Ge => "x >= y",
        })
    }
}

/// Validates the operands of a comparison.
#[inline]
fn check_compare(op: CompareOp, ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity(op.name(), ins, 2)?;
    check_same_shapes(op.name(), ins)?;
    check_same_dtypes(op.name(), ins)
}

fn lower_compare(op: CompareOp, a: &Array, b: &Array) -> Result<Array> {
    let ga = a.read();
    let gb = b.read();
    let (ba, bb) = (ga.cpu(op.name())?, gb.cpu(op.name())?);
    let par = Par::for_work(a.layout.numel(), 1);
    let out = match_buffer!(ba, x => {
        let y = bb.as_slice();
        map2(x, &a.layout, y, &b.layout, par, |p, q| op.holds(p, q))
    });
    Ok(Array::from_cpu(CpuBuffer::Bool(out), a.shape().clone()))
}

impl From<CompareOp> for Prim {
    fn from(op: CompareOp) -> Prim {
        Prim::Compare(op)
    }
}

impl Family for CompareOp {
    type Kind = CompareOp;
    const KINDS: &'static [CompareOp] = CompareOp::ALL;

    fn kind(&self) -> CompareOp {
        *self
    }

    fn name(&self) -> &'static str {
        CompareOp::name(*self)
    }

    fn props(&self) -> Props {
        Props::ELEMENTWISE
    }

    fn fmt_params(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }

    #[inline]
    fn check(&self, ins: &[AvalRef<'_>]) -> Result<()> {
        check_compare(*self, ins)
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        check_compare(*self, ins)?;
        let mut a = ins[0].to_owned();
        a.dtype = DType::Bool;
        Ok(smallvec![a])
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(lower_compare(*self, ins[0], ins[1]))
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        super::one(backend.map(self.name(), Some(self.cuda_expr()), &ins[..2], DType::Bool))
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
        CompareOp::ALL
            .iter()
            .map(|&op| {
                Sample::new(op.name(), numeric(), vec![], false, move |g, d| {
                    let shape = g.shape(3, 0, 3);
                    // small integers, so that ties occur
                    let dom = if d == DType::U32 { Dom::Small(0, 3) } else { Dom::Small(-2, 2) };
                    Case::new(op, vec![(shape.clone(), d, dom), (shape, d, dom)])
                })
            })
            .collect()
    }

    fn cuda_kernels(d: DType) -> Vec<Kernel> {
        CompareOp::ALL
            .iter()
            .map(|op| map_kernel(&op.cuda_expr().map_op(op.name(), false), &[d, d], DType::Bool))
            .collect()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::elementwise_map!();

    fn cpu_tile(&self, ins: &[Tile<'_>], out: TileMut<'_>) -> bool {
        use xform_kernels::cpu::elementwise::slice2;
        match (ins, out) {
            ([Tile::F32(a), Tile::F32(b)], TileMut::Bool(o)) => slice2(a, b, o, &|p, q| self.holds(p, q)),
            ([Tile::F64(a), Tile::F64(b)], TileMut::Bool(o)) => slice2(a, b, o, &|p, q| self.holds(p, q)),
            _ => return false,
        }
        true
    }

    fn cuda_map_op(&self, ins: &[DType]) -> Option<MapOp> {
        match ins {
            [a, b] if a == b => Some(self.cuda_expr().map_op(self.name(), false)),
            _ => None,
        }
    }
}
