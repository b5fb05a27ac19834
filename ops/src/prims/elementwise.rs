//! The structural elementwise primitives: `convert_element_type`,
//! `select`, `copy` and `stop_gradient`. Each result element depends on
//! the operands' elements at the same index only, so all of them batch
//! elementwise; none has math of its own to tabulate.

use super::batching::BatchAxis;
use super::cuda_c::CudaExpr;
use super::jit::{self, RowFusion, Tile, TileMut};
use super::sample::{every_dtype, generic_dom, numeric, Case, Dom, Sample};
use super::{check_arity, check_same_dtypes, check_same_shapes, Family, Props, ViewKind};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use std::mem::MaybeUninit;
use xform_kernels::cpu::elementwise::{map1, map3, slice1};
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::{convert_map_op, map_kernel, Kernel, MapOp};
use xform_kernels::{match_buffer, CpuBuffer, DType, Element, Layout};

crate::family_enum! {
    /// The structural elementwise primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum ElementwiseOp, kinds ElementwiseKind {
        /// Elementwise dtype conversion to the given dtype.
        Convert(DType),
        /// `select(pred, on_true, on_false)` on equal shapes.
        Select,
        /// A copy into fresh contiguous storage.
        Copy,
        /// Identity whose tangent is zero: blocks differentiation.
        StopGradient,
    }
}

// ---- convert -------------------------------------------------------------------

fn convert_vec<S: Element, D: Element>(v: &[S], l: &Layout) -> Vec<D> {
    let par = Par::for_work(l.numel(), 1);
    if S::DTYPE.is_float() || D::DTYPE.is_float() {
        map1(v, l, par, |a: S| D::from_f64(a.to_f64()))
    } else {
        map1(v, l, par, |a: S| D::from_i64(a.to_i64()))
    }
}

/// Converts the CPU array `x` to `dtype`.
pub(crate) fn lower_convert(dtype: DType, x: &Array) -> Result<Array> {
    let out = x.with_cpu("convert_element_type", |b, l| {
        xform_kernels::with_dtype!(dtype, D => match_buffer!(b, v => CpuBuffer::from_vec(convert_vec::<_, D>(v, l))))
    })?;
    Ok(Array::from_cpu(out, x.shape().clone()))
}

fn jvp_convert(dtype: DType, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let y = lax::convert(&primals[0], dtype)?;
    let t = match &tangents[0] {
        Some(t) if dtype.is_float() && primals[0].dtype().is_float() => Some(lax::convert(t, dtype)?),
        _ => None,
    };
    Ok((smallvec![y], smallvec![t]))
}

// ---- select --------------------------------------------------------------------

/// Validates the operands of a select.
#[inline]
fn check_select(ins: &[AvalRef<'_>]) -> Result<()> {
    check_arity("select", ins, 3)?;
    check_same_shapes("select", ins)?;
    if ins[0].dtype != DType::Bool {
        return Err(Error::dtype("select", "the predicate must be bool", &[ins[0].dtype]));
    }
    check_same_dtypes("select", &ins[1..])
}

/// `select`'s CUDA form: data movement on storage values, no widening.
fn select_cuda() -> CudaExpr {
    CudaExpr::new("x ? y : z")
}

fn lower_select(p: &Array, a: &Array, b: &Array) -> Result<Array> {
    let gp = p.read();
    let ga = a.read();
    let gb = b.read();
    let (bp, ba, bb) = (gp.cpu("select")?, ga.cpu("select")?, gb.cpu("select")?);
    let pv: &[bool] = bp.as_slice();
    let par = Par::for_work(a.layout.numel(), 1);
    let out = match_buffer!(ba, x => {
        let y = bb.as_slice();
        CpuBuffer::from_vec(map3(pv, &p.layout, x, &a.layout, y, &b.layout, par, |c, t, f| if c { t } else { f }))
    });
    Ok(Array::from_cpu(out, a.shape().clone()))
}

fn jvp_select(primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let out = bind1(&Prim::Elementwise(ElementwiseOp::Select), primals)?;
    let t = match (&tangents[1], &tangents[2]) {
        (None, None) => None,
        (ta, tb) => {
            let ta = lax::instantiate(ta, &primals[1])?;
            let tb = lax::instantiate(tb, &primals[2])?;
            Some(lax::select(&primals[0], &ta, &tb)?)
        }
    };
    Ok((smallvec![out], smallvec![t]))
}

fn transpose_select(cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None, None]);
    };
    let Some(pred) = args[0].constant() else {
        return Err(Error::transform("select", "select is not linear in its predicate, so it cannot be transposed"));
    };
    let zero = lax::zeros_like(ct)?;
    let on_true = if args[1].is_linear() { Some(lax::select(pred, ct, &zero)?) } else { None };
    let on_false = if args[2].is_linear() { Some(lax::select(pred, &zero, ct)?) } else { None };
    Ok(smallvec![None, on_true, on_false])
}

// ---- the family ------------------------------------------------------------------

impl From<ElementwiseOp> for Prim {
    fn from(op: ElementwiseOp) -> Prim {
        Prim::Elementwise(op)
    }
}

impl Family for ElementwiseOp {
    type Kind = ElementwiseKind;
    const KINDS: &'static [ElementwiseKind] = ElementwiseKind::ALL;

    fn kind(&self) -> ElementwiseKind {
        ElementwiseOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            ElementwiseOp::Convert(_) => "convert_element_type",
            ElementwiseOp::Select => "select",
            ElementwiseOp::Copy => "copy",
            ElementwiseOp::StopGradient => "stop_gradient",
        }
    }

    fn props(&self) -> Props {
        match self {
            // a same-dtype convert may return the cotangent itself
            ElementwiseOp::Convert(_) => Props::ELEMENTWISE,
            ElementwiseOp::Select => Props::ELEMENTWISE.fresh(),
            // passes its cotangent on
            ElementwiseOp::Copy => Props::ELEMENTWISE,
            // eagerly returns its operand's storage
            ElementwiseOp::StopGradient => Props::ELEMENTWISE.view(ViewKind::Detach),
        }
    }

    fn fmt_params(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ElementwiseOp::Convert(d) => write!(f, "[new_dtype={d}]"),
            ElementwiseOp::Select | ElementwiseOp::Copy | ElementwiseOp::StopGradient => Ok(()),
        }
    }

    #[inline]
    fn check(&self, ins: &[AvalRef<'_>]) -> Result<()> {
        match self {
            ElementwiseOp::Select => check_select(ins),
            // a wider dtype may not fit
            ElementwiseOp::Convert(_) => super::check_sizes(self.name(), &self.shape_rule(ins)?),
            ElementwiseOp::Copy | ElementwiseOp::StopGradient => check_arity(self.name(), ins, 1),
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            ElementwiseOp::Select => check_select(ins)?,
            _ => check_arity(self.name(), ins, 1)?,
        }
        Ok(match self {
            ElementwiseOp::Convert(d) => {
                let mut a = ins[0].to_owned();
                a.dtype = *d;
                smallvec![a]
            }
            ElementwiseOp::Select => smallvec![ins[1].to_owned()],
            ElementwiseOp::Copy | ElementwiseOp::StopGradient => smallvec![ins[0].to_owned()],
        })
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        super::one(match self {
            ElementwiseOp::Convert(d) => lower_convert(*d, ins[0]),
            ElementwiseOp::Select => lower_select(ins[0], ins[1], ins[2]),
            ElementwiseOp::Copy => ins[0].contiguous_copy(),
            ElementwiseOp::StopGradient => Ok(ins[0].clone()),
        })
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        super::one(match self {
            ElementwiseOp::Convert(d) => backend.convert(*d, ins[0]),
            ElementwiseOp::Select => backend.map_raw("select", select_cuda(), &ins[..3], ins[1].dtype),
            ElementwiseOp::Copy => backend.contiguous_copy(ins[0]),
            ElementwiseOp::StopGradient => Ok(ins[0].clone()),
        })
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            ElementwiseOp::Convert(d) => jvp_convert(*d, primals, tangents),
            ElementwiseOp::Select => jvp_select(primals, tangents),
            ElementwiseOp::Copy => super::linear_jvp(prim, primals, tangents),
            ElementwiseOp::StopGradient => super::no_tangent(prim, primals),
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            ElementwiseOp::Convert(_) => {
                let to = args[0].aval().dtype;
                Ok(smallvec![cts[0].as_ref().map(|c| lax::convert(c, to)).transpose()?])
            }
            ElementwiseOp::Select => transpose_select(cts, args),
            ElementwiseOp::Copy => Ok(smallvec![cts[0].clone()]),
            ElementwiseOp::StopGradient => super::not_linear(self.name()),
        }
    }

    fn batch(&self, prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        super::batching::batch_elementwise(prim, ins, bdims, axis)
    }

    fn view_layout(&self, layout: &Layout) -> Option<Layout> {
        match self {
            // the same elements, without a derivative (`detach`)
            ElementwiseOp::StopGradient => Some(layout.clone()),
            ElementwiseOp::Convert(_) | ElementwiseOp::Select | ElementwiseOp::Copy => None,
        }
    }

    fn samples() -> Vec<Sample> {
        vec![
            Sample::new("convert_element_type", every_dtype(), vec![0], true, |g, d| {
                let to = g.pick(&[
                    DType::F64,
                    DType::F32,
                    DType::F16,
                    DType::BF16,
                    DType::I32,
                    DType::I64,
                    DType::U32,
                    DType::Bool,
                ]);
                let shape = g.shape(3, 0, 3);
                let dom =
                    if d == DType::U32 || to == DType::U32 { Dom::Real(0.0, 20.0) } else { Dom::Real(-20.0, 20.0) };
                let dom = if d.is_float() && !to.is_float() {
                    Dom::AwayFromInt(if to == DType::U32 { 0.0 } else { -20.0 }, 20.0)
                } else {
                    dom
                };
                let dom = if d == DType::Bool { Dom::Small(0, 1) } else { dom };
                Case::new(ElementwiseOp::Convert(to), vec![(shape, d, dom)])
            }),
            Sample::new("select", every_dtype(), vec![1, 2], true, |g, d| {
                let shape = g.shape(3, 0, 3);
                Case::new(
                    ElementwiseOp::Select,
                    vec![
                        (shape.clone(), DType::Bool, Dom::Small(0, 1)),
                        (shape.clone(), d, generic_dom(d)),
                        (shape, d, generic_dom(d)),
                    ],
                )
            }),
            Sample::new("copy", numeric(), vec![0], true, |g, d| {
                let shape = g.shape(3, 0, 3);
                Case::new(ElementwiseOp::Copy, vec![(shape, d, generic_dom(d))])
            }),
            Sample::new("stop_gradient", numeric(), vec![], false, |g, d| {
                let shape = g.shape(3, 0, 3);
                Case::new(ElementwiseOp::StopGradient, vec![(shape, d, generic_dom(d))])
            }),
        ]
    }

    fn cuda_kernels(d: DType) -> Vec<Kernel> {
        // convert and copy are the kernels crate's structural kernels
        vec![map_kernel(&select_cuda().map_op("select", true), &[DType::Bool, d, d], d)]
    }

    // ---- jit ----

    jit::elementwise_map!();

    fn row_fusion(&self) -> RowFusion<'_> {
        match self {
            ElementwiseOp::StopGradient => RowFusion::SameElements,
            ElementwiseOp::Convert(_) | ElementwiseOp::Select | ElementwiseOp::Copy => RowFusion::None,
        }
    }

    /// Covered: `select` on f32/f64/bool with a bool predicate, and
    /// `convert_element_type` among f32, f64 and bool.
    fn cpu_tile(&self, ins: &[Tile<'_>], out: TileMut<'_>) -> bool {
        match (self, ins, out) {
            (ElementwiseOp::Select, [Tile::Bool(p), x, y], out) => select_tile(p, x, y, out),
            (ElementwiseOp::Convert(d), [x], out) => {
                match (x, out) {
                    (Tile::F32(x), TileMut::F64(o)) if *d == DType::F64 => convert_slice(x, o),
                    (Tile::F64(x), TileMut::F32(o)) if *d == DType::F32 => convert_slice(x, o),
                    (Tile::Bool(x), TileMut::F32(o)) if *d == DType::F32 => convert_slice(x, o),
                    (Tile::Bool(x), TileMut::F64(o)) if *d == DType::F64 => convert_slice(x, o),
                    (Tile::F32(x), TileMut::Bool(o)) if *d == DType::Bool => convert_slice(x, o),
                    (Tile::F64(x), TileMut::Bool(o)) if *d == DType::Bool => convert_slice(x, o),
                    _ => return false,
                }
                true
            }
            _ => false,
        }
    }

    fn cpu_row_reduce(&self, _x: &Tile<'_>, _row: usize, _strided: bool, _out: TileMut<'_>) -> bool {
        false
    }

    /// Covered: `select` and `convert_element_type`, every dtype.
    fn cuda_map_op(&self, ins: &[DType]) -> Option<MapOp> {
        match (self, ins) {
            (ElementwiseOp::Select, [DType::Bool, a, b]) if a == b => Some(select_cuda().map_op("select", true)),
            (ElementwiseOp::Convert(to), [from]) => Some(convert_map_op(*from, *to)),
            _ => None,
        }
    }
}

// ---- fused forms: the tile functions fusion calls -------------------------

/// The eager convert's element function (`convert_vec`).
fn convert_slice<S: Element, D: Element>(x: &[S], out: &mut [MaybeUninit<D>]) {
    if S::DTYPE.is_float() || D::DTYPE.is_float() {
        slice1(x, out, &|a: S| D::from_f64(a.to_f64()));
    } else {
        slice1(x, out, &|a: S| D::from_i64(a.to_i64()));
    }
}

/// `select` on tiles: the eager element function (`if c { t } else { f }`).
fn select_tile(p: &[bool], x: &Tile<'_>, y: &Tile<'_>, out: TileMut<'_>) -> bool {
    fn sel<T: Copy>(p: &[bool], x: &[T], y: &[T], o: &mut [MaybeUninit<T>]) {
        for (((o, c), t), f) in o.iter_mut().zip(p).zip(x).zip(y) {
            o.write(if *c { *t } else { *f });
        }
    }
    match (x, y, out) {
        (Tile::F32(x), Tile::F32(y), TileMut::F32(o)) => sel(p, x, y, o),
        (Tile::F64(x), Tile::F64(y), TileMut::F64(o)) => sel(p, x, y, o),
        (Tile::Bool(x), Tile::Bool(y), TileMut::Bool(o)) => sel(p, x, y, o),
        _ => return false,
    }
    true
}
