//! `dot_general`: contraction over paired axes with paired batch axes. The
//! output axes are `[batch..., lhs free..., rhs free...]`.
//!
//! Lowering permutes both operands (views) to `[B, M, K]` and `[B, K, N]`,
//! merging axes without a copy where the strides allow, and runs one
//! batched GEMM. The batch rule turns a batched operand whose partner is
//! unbatched into a free axis, so `vmap(x @ W)` is a single GEMM.

use super::batching::physical;
use super::batching::BatchAxis;
use super::factor::{Factor, FactorRows};
use super::jit::TileMut;
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::sample::{numeric, Case, Dom, Sample};
use super::{check_arity, check_axes, Family, Props};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::lax;
use crate::prim::Prim;
use crate::prim::{Avals, Axes, BDims, Cotangents, LinearArg, Tangents};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::{smallvec, SmallVec};
use std::fmt;
use xform_kernels::cpu::matmul::{gemm, gemm_half, gemm_int};
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::Kernel;
use xform_kernels::{CpuBuffer, DType, Layout, Shape};

/// Which axes of `dot_general` contract and which are batch axes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DotDims {
    /// Contracted axes of the lhs.
    pub lhs_contract: Axes,
    /// Contracted axes of the rhs (paired with `lhs_contract`).
    pub rhs_contract: Axes,
    /// Batch axes of the lhs.
    pub lhs_batch: Axes,
    /// Batch axes of the rhs (paired with `lhs_batch`).
    pub rhs_batch: Axes,
}

impl DotDims {
    /// A matrix product `[m, k] @ [k, n]`.
    pub fn matmul() -> DotDims {
        DotDims { lhs_contract: smallvec![1], rhs_contract: smallvec![0], ..Default::default() }
    }

    /// The lhs (or rhs) free axes: neither contracted nor batch.
    pub fn free(&self, rank: usize, lhs: bool) -> Axes {
        let (c, b) = if lhs { (&self.lhs_contract, &self.lhs_batch) } else { (&self.rhs_contract, &self.rhs_batch) };
        (0..rank).filter(|a| !c.contains(a) && !b.contains(a)).collect()
    }
}

impl fmt::Display for DotDims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "contract=({:?},{:?}) batch=({:?},{:?})",
            self.lhs_contract.as_slice(),
            self.rhs_contract.as_slice(),
            self.lhs_batch.as_slice(),
            self.rhs_batch.as_slice()
        )
    }
}

// ---- shape rule ----------------------------------------------------------------

fn shape_dot_general(d: &DotDims, ins: &[AvalRef<'_>]) -> Result<Avals> {
    let op = "dot_general";
    check_arity(op, ins, 2)?;
    let (a, b) = (&ins[0], &ins[1]);
    if a.dtype != b.dtype || a.dtype == DType::Bool {
        return Err(Error::dtype(op, "operands must share one numeric dtype", &[a.dtype, b.dtype]));
    }
    if d.lhs_contract.len() != d.rhs_contract.len() || d.lhs_batch.len() != d.rhs_batch.len() {
        return Err(Error::invalid(op, format!("unpaired axes in {d}")));
    }
    let la: Axes = d.lhs_contract.iter().chain(d.lhs_batch.iter()).copied().collect();
    let ra: Axes = d.rhs_contract.iter().chain(d.rhs_batch.iter()).copied().collect();
    check_axes(op, &la, a.rank())?;
    check_axes(op, &ra, b.rank())?;
    for (x, y) in d.lhs_contract.iter().zip(&d.rhs_contract).chain(d.lhs_batch.iter().zip(&d.rhs_batch)) {
        if a.shape[*x] != b.shape[*y] {
            return Err(Error::shape(
                op,
                format!("lhs axis {x} (size {}) does not match rhs axis {y} (size {})", a.shape[*x], b.shape[*y]),
                &[a.shape, b.shape],
            ));
        }
    }
    Ok(smallvec![Aval { shape: result_shape(d, a.shape, b.shape), dtype: a.dtype, device: a.device }])
}

// ---- lowering --------------------------------------------------------------------

/// `x` permuted by `perm` and merged into a 3-d `[p, q, r]` layout, as a
/// view when possible.
fn as_3d(x: &Array, perm: &[usize], p: usize, q: usize, r: usize) -> Result<Array> {
    let v = x.with_layout(x.layout.permute(perm));
    let target = Shape::from([p, q, r]);
    if let Some(l) = v.layout.reshape(&target) {
        return Ok(v.with_layout(l));
    }
    let c = v.contiguous_copy()?;
    Ok(c.with_layout(Layout::contiguous(target)))
}

/// `axes` of `l` as one strided dimension `(size, stride)`, if their
/// strides allow it without a copy.
fn merge(l: &Layout, axes: &[usize]) -> Option<(usize, isize)> {
    let size: usize = axes.iter().map(|&a| l.shape[a]).product();
    let dims: SmallVec<[(usize, isize); 6]> =
        axes.iter().map(|&a| (l.shape[a], l.strides[a])).filter(|(n, _)| *n != 1).collect();
    if size == 0 || dims.is_empty() {
        return Some((size, 1));
    }
    for w in dims.windows(2) {
        if w[0].1 != w[1].1 * w[1].0 as isize {
            return None;
        }
    }
    Some((size, dims.last().expect("nonempty").1))
}

/// A copy of `x` whose `axes` are contiguous (and so merge), seen in the
/// original axis order.
fn with_contiguous_axes(x: &Array, axes: &[usize]) -> Result<Array> {
    let rank = x.layout.rank();
    let mut perm: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    let c = x.with_layout(x.layout.permute(&perm)).contiguous_copy()?;
    let mut inv = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    Ok(c.with_layout(c.layout.permute(&inv)))
}

/// The smallest split of `axes` whose tail merges into one strided
/// dimension (the head is looped over as extra batch entries).
fn split_free(l: &Layout, axes: &[usize]) -> (usize, usize, isize) {
    for j in 0..=axes.len() {
        if let Some((n, s)) = merge(l, &axes[j..]) {
            return (j, n, s);
        }
    }
    unreachable!("an empty group always merges")
}

/// CPU lowering of `dot_general` for f32 / f64: no operand is copied unless
/// its contracted axes cannot merge; free axes that cannot merge become
/// extra batch entries, and the result is a permuted view of `[batch, M, N]`.
fn dot_general_faer<
    T: xform_kernels::cpu::matmul::FaerElem + xform_kernels::cpu::matmul::One + xform_kernels::Element,
>(
    d: &DotDims,
    a: &Array,
    b: &Array,
    shape: &Shape,
    into: Option<&mut [std::mem::MaybeUninit<T>]>,
) -> Result<Option<Array>> {
    let a =
        if merge(&a.layout, &d.lhs_contract).is_none() { with_contiguous_axes(a, &d.lhs_contract)? } else { a.clone() };
    let b =
        if merge(&b.layout, &d.rhs_contract).is_none() { with_contiguous_axes(b, &d.rhs_contract)? } else { b.clone() };
    let (la, lb) = (&a.layout, &b.layout);
    let lf = d.free(la.rank(), true);
    let rf = d.free(lb.rank(), false);
    let (k, ka) = merge(la, &d.lhs_contract).expect("made contiguous");
    let (_, kb) = merge(lb, &d.rhs_contract).expect("made contiguous");
    let (jl, m, ms) = split_free(la, &lf);
    let (jr, n, ns) = split_free(lb, &rf);
    // Loop dims: (size, lhs stride, rhs stride). (Inline vectors here and
    // below: a small product's call is mostly this bookkeeping.)
    let mut loops: SmallVec<[(usize, isize, isize); 6]> =
        d.lhs_batch.iter().zip(&d.rhs_batch).map(|(&x, &y)| (la.shape[x], la.strides[x], lb.strides[y])).collect();
    loops.extend(lf[..jl].iter().map(|&x| (la.shape[x], la.strides[x], 0)));
    loops.extend(rf[..jr].iter().map(|&y| (lb.shape[y], 0, lb.strides[y])));
    let count: usize = loops.iter().map(|l| l.0).product();
    let (mut oa, mut ob) = (Vec::with_capacity(count), Vec::with_capacity(count));
    if count > 0 {
        let mut idx: SmallVec<[usize; 6]> = smallvec![0; loops.len()];
        let (mut pa, mut pb) = (la.offset as isize, lb.offset as isize);
        for _ in 0..count {
            oa.push(pa);
            ob.push(pb);
            for t in (0..loops.len()).rev() {
                idx[t] += 1;
                pa += loops[t].1;
                pb += loops[t].2;
                if idx[t] < loops[t].0 {
                    break;
                }
                pa -= loops[t].1 * loops[t].0 as isize;
                pb -= loops[t].2 * loops[t].0 as isize;
                idx[t] = 0;
            }
        }
    }
    use xform_kernels::cpu::matmul::{gemm_offsets, gemm_offsets_into, MatOperand};
    let ma = MatOperand { offsets: oa, row_stride: ms, col_stride: ka };
    let mb = MatOperand { offsets: ob, row_stride: kb, col_stride: ns };
    let par = Par::for_work(count * m * n * k, 1);
    // Storage order: [batch, lhs looped, rhs looped, lhs merged, rhs merged].
    let nb = d.lhs_batch.len();
    let mut storage: SmallVec<[usize; 6]> = loops.iter().map(|l| l.0).collect();
    storage.extend(lf[jl..].iter().map(|&x| la.shape[x]));
    storage.extend(rf[jr..].iter().map(|&y| lb.shape[y]));
    let mut perm: SmallVec<[usize; 6]> = (0..nb).collect();
    let rest = nb + jl + jr;
    perm.extend((0..lf.len()).map(|t| if t < jl { nb + t } else { rest + (t - jl) }));
    perm.extend((0..rf.len()).map(|t| if t < jr { nb + jl + t } else { rest + (lf.len() - jl) + (t - jr) }));
    let (ga, gb) = (a.read(), b.read());
    let (ba, bb) = (ga.cpu("dot_general")?, gb.cpu("dot_general")?);
    let (sa, sb) = (ba.as_slice::<T>(), bb.as_slice::<T>());
    // storage in the result's own order: the kernel writes `into` directly
    if let Some(dst) = into.filter(|dst| perm.iter().enumerate().all(|(i, &p)| i == p) && dst.len() == shape.numel()) {
        gemm_offsets_into(sa, &ma, sb, &mb, m, k, n, par, dst);
        return Ok(None);
    }
    let out = gemm_offsets(sa, &ma, sb, &mb, m, k, n, par);
    let arr = Array::from_cpu(CpuBuffer::from_vec(out), Shape::from(&storage[..]));
    let view = arr.with_layout(arr.layout.permute(&perm));
    debug_assert_eq!(view.shape(), shape);
    Ok(Some(view))
}

/// `dot_general` of CPU operands written into `dst`, the result's elements
/// in row-major order, where the kernel can write there directly: f32 or
/// f64 operands whose product is stored in the result's own order (a
/// matrix product, batched products, batched outer products; not one whose
/// free axes interleave). Returns `None` when it wrote `dst`, else the
/// result computed as [`lower`](crate::prim::lower) does (nothing written;
/// the caller copies it).
///
/// # Errors
/// As the lowering (the operands were checked against `d`'s shape rule
/// when their program was staged, as for `lower`).
pub fn dot_general_into<T>(
    d: &DotDims,
    a: &Array,
    b: &Array,
    dst: &mut [std::mem::MaybeUninit<T>],
) -> Result<Option<Array>>
where
    T: xform_kernels::cpu::matmul::FaerElem + xform_kernels::cpu::matmul::One + xform_kernels::Element,
{
    // (CPU arrays only: the plan writes into host memory)
    if a.dtype != T::DTYPE {
        return lower_dot_general(d, a, b).map(Some);
    }
    dot_general_faer::<T>(d, a, b, &result_shape(d, a.shape(), b.shape()), Some(dst))
}

/// The result's shape: batch axes, then the lhs's free axes, then the rhs's.
fn result_shape(d: &DotDims, sa: &Shape, sb: &Shape) -> Shape {
    let mut shape: SmallVec<[usize; 6]> = d.lhs_batch.iter().map(|&x| sa[x]).collect();
    shape.extend(d.free(sa.rank(), true).iter().map(|&x| sa[x]));
    shape.extend(d.free(sb.rank(), false).iter().map(|&x| sb[x]));
    Shape::from(&shape[..])
}

/// The operands of the product `d` of `a` and `b` as batched matrices
/// `[B, M, K]` and `[B, K, N]` (views where the strides allow, else
/// contiguous copies): what the GEMM kernels take (the CPU's for integers
/// and for strided views, CUDA's always; the host emulation of the CUDA
/// kernels too).
///
/// # Errors
/// Out of memory for a copy.
pub fn gemm_operands(d: &DotDims, a: &Array, b: &Array) -> Result<(Array, Array)> {
    let (sa, sb) = (a.shape(), b.shape());
    let (lf, rf) = (d.free(sa.rank(), true), d.free(sb.rank(), false));
    let size = |s: &Shape, ax: &[usize]| ax.iter().map(|&x| s[x]).product::<usize>();
    let (bt, m, k, n) = (size(sa, &d.lhs_batch), size(sa, &lf), size(sa, &d.lhs_contract), size(sb, &rf));
    let pa: Axes = d.lhs_batch.iter().chain(lf.iter()).chain(d.lhs_contract.iter()).copied().collect();
    let pb: Axes = d.rhs_batch.iter().chain(d.rhs_contract.iter()).chain(rf.iter()).copied().collect();
    Ok((as_3d(a, &pa, bt, m, k)?, as_3d(b, &pb, bt, k, n)?))
}

fn lower_dot_general(d: &DotDims, a: &Array, b: &Array) -> Result<Array> {
    let shape = result_shape(d, a.shape(), b.shape());
    match a.dtype {
        DType::F32 => return Ok(dot_general_faer::<f32>(d, a, b, &shape, None)?.expect("computed fresh")),
        DType::F64 => return Ok(dot_general_faer::<f64>(d, a, b, &shape, None)?.expect("computed fresh")),
        DType::F16 | DType::BF16 => {
            // Compute in f32, round once.
            let wide = |x: &Array| super::elementwise::lower_convert(DType::F32, x);
            let out = dot_general_faer::<f32>(d, &wide(a)?, &wide(b)?, &shape, None)?.expect("computed fresh");
            return super::elementwise::lower_convert(a.dtype, &out);
        }
        _ => {}
    }
    let (a3, b3) = gemm_operands(d, a, b)?;
    let (bt, m, k, n) = (a3.shape()[0], a3.shape()[1], a3.shape()[2], b3.shape()[2]);
    let par = Par::for_work(bt * m * n * k, 1);
    let ga = a3.read();
    let gb = b3.read();
    let (ba, bb) = (ga.cpu("dot_general")?, gb.cpu("dot_general")?);
    let (la, lb) = (&a3.layout, &b3.layout);
    let out = match (ba, bb) {
        (CpuBuffer::F32(x), CpuBuffer::F32(y)) => CpuBuffer::F32(gemm(x, la, y, lb, par)),
        (CpuBuffer::F64(x), CpuBuffer::F64(y)) => CpuBuffer::F64(gemm(x, la, y, lb, par)),
        (CpuBuffer::F16(x), CpuBuffer::F16(y)) => CpuBuffer::F16(gemm_half(x, la, y, lb, par)),
        (CpuBuffer::BF16(x), CpuBuffer::BF16(y)) => CpuBuffer::BF16(gemm_half(x, la, y, lb, par)),
        (CpuBuffer::I32(x), CpuBuffer::I32(y)) => {
            CpuBuffer::I32(gemm_int(x, la, y, lb, |acc: i32, p, q| acc.wrapping_add(p.wrapping_mul(q))))
        }
        (CpuBuffer::I64(x), CpuBuffer::I64(y)) => {
            CpuBuffer::I64(gemm_int(x, la, y, lb, |acc: i64, p, q| acc.wrapping_add(p.wrapping_mul(q))))
        }
        (CpuBuffer::U32(x), CpuBuffer::U32(y)) => {
            CpuBuffer::U32(gemm_int(x, la, y, lb, |acc: u32, p, q| acc.wrapping_add(p.wrapping_mul(q))))
        }
        _ => unreachable!("checked by the shape rule"),
    };
    Ok(Array::from_cpu(out, shape))
}

// ---- JVP -----------------------------------------------------------------------------

fn jvp_dot_general(d: &DotDims, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let (a, b) = (&primals[0], &primals[1]);
    let out = lax::dot_general(a, b, d.clone())?;
    if !a.dtype().is_float() {
        return Ok((smallvec![out], smallvec![None]));
    }
    let ta = tangents[0].as_ref().map(|t| lax::dot_general(t, b, d.clone())).transpose()?;
    let tb = tangents[1].as_ref().map(|t| lax::dot_general(a, t, d.clone())).transpose()?;
    Ok((smallvec![out], smallvec![lax::add_any(ta, tb)?]))
}

// ---- transpose -------------------------------------------------------------------------

/// The cotangent of one operand: contract `ct` with the other operand over
/// the other's free axes, then permute into the operand's axis order.
fn transpose_operand(d: &DotDims, ct: &Tensor, other: &Tensor, this: &Aval, lhs: bool) -> Result<Tensor> {
    transpose_summed(d, ct, other, this, lhs, 0)
}

/// The cotangent of one operand of `dot_general(d)`, summed over `summed`
/// leading axes that `ct` and `other` both carry (one product per element
/// of those axes, added): those axes are contracted too, so the sum costs
/// one product. A scan's transpose uses it for a constant operand (a
/// weight): the contributions of every step in one product, not one
/// product and one add per step.
pub(crate) fn transpose_summed(
    d: &DotDims,
    ct: &Tensor,
    other: &Tensor,
    this: &Aval,
    lhs: bool,
    summed: usize,
) -> Result<Tensor> {
    let other_rank = other.rank() - summed;
    let nb = d.lhs_batch.len();
    let (this_c, this_b, other_c, other_b) = if lhs {
        (&d.lhs_contract, &d.lhs_batch, &d.rhs_contract, &d.rhs_batch)
    } else {
        (&d.rhs_contract, &d.rhs_batch, &d.lhs_contract, &d.lhs_batch)
    };
    let this_free: Axes = (0..this.shape.rank()).filter(|a| !this_c.contains(a) && !this_b.contains(a)).collect();
    let other_free: Axes = (0..other_rank).filter(|a| !other_c.contains(a) && !other_b.contains(a)).collect();
    // ct axes: [batch, lhs free, rhs free]
    let lf = if lhs { this_free.len() } else { other_free.len() };
    let ct_other_free: Axes =
        if lhs { (nb + lf..nb + lf + other_free.len()).collect() } else { (nb..nb + lf).collect() };
    // The lhs's cotangent is `ct . rhs` (axes [batch, lhs free, rhs's
    // contracted]), the rhs's is `lhs . ct` (axes [batch, lhs's contracted,
    // rhs free]): each comes out in its operand's own axis order for a
    // plain matrix product, so no transposed view is left for the
    // accumulating add to walk across (the per-example weight gradients of
    // vmap(grad) through a scan add one per step).
    let mut oc: Axes = other_c.clone();
    oc.sort_unstable();
    let partners = oc.iter().map(|o| this_c[other_c.iter().position(|x| x == o).expect("paired axis")]);
    let mut src: Axes = this_b.clone();
    let shift = |ax: &Axes| -> Axes { (0..summed).chain(ax.iter().map(|&a| a + summed)).collect() };
    let batch = |ax: &Axes| -> Axes { ax.iter().map(|&a| a + summed).collect() };
    let ct_batch: Axes = (0..nb).collect();
    let r = if lhs {
        let dims = DotDims {
            lhs_contract: shift(&ct_other_free),
            rhs_contract: shift(&other_free),
            lhs_batch: batch(&ct_batch),
            rhs_batch: batch(other_b),
        };
        src.extend(this_free.iter().copied());
        src.extend(partners);
        lax::dot_general(ct, other, dims)?
    } else {
        let dims = DotDims {
            lhs_contract: shift(&other_free),
            rhs_contract: shift(&ct_other_free),
            lhs_batch: batch(other_b),
            rhs_batch: batch(&ct_batch),
        };
        src.extend(partners);
        src.extend(this_free.iter().copied());
        lax::dot_general(other, ct, dims)?
    };
    let mut perm: Axes = smallvec![0; src.len()];
    for (k, &axis) in src.iter().enumerate() {
        perm[axis] = k;
    }
    lax::transpose(&r, &perm)
}

fn transpose_dot_general(d: &DotDims, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None]);
    };
    match (&args[0], &args[1]) {
        (LinearArg::Linear(a), LinearArg::Const(b)) => Ok(smallvec![Some(transpose_operand(d, ct, b, a, true)?), None]),
        (LinearArg::Const(a), LinearArg::Linear(b)) => {
            Ok(smallvec![None, Some(transpose_operand(d, ct, a, b, false)?)])
        }
        _ => Err(Error::transform(
            "dot_general",
            "dot_general is linear in one operand at a time, so it cannot be transposed in both",
        )),
    }
}

/// `x` with its axes in the order `perm`, merged into `[groups, rows, cols]`
/// (no transpose for the identity).
fn as_matrices(x: &Tensor, perm: &[usize], dims: [usize; 3]) -> Result<Tensor> {
    let x = if perm.iter().enumerate().all(|(i, &p)| i == p) { x.clone() } else { lax::transpose(x, perm)? };
    lax::reshape(&x, &Shape::from(&dims[..]))
}

/// The cotangent of the linear operand `i` of `dot_general(d)` as
/// `A^T G` (NOTE: [factored cotangents]): `A` is the other operand with its batch axes
/// first, then its free axes (the rows), then its contracted axes; `G` is
/// the output cotangent with its batch axes, the other operand's free axes
/// and this operand's free axes.
fn factor_dot_general(d: &DotDims, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<Factor>> {
    let Some(g) = &cts[0] else {
        return Ok(None);
    };
    let (this, other, lhs) = match (i, &args[0], &args[1]) {
        (0, LinearArg::Linear(a), LinearArg::Const(b)) => (*a, *b, true),
        (1, LinearArg::Const(a), LinearArg::Linear(b)) => (*b, *a, false),
        _ => return Ok(None),
    };
    let (this_c, this_b, other_c, other_b) = if lhs {
        (&d.lhs_contract, &d.lhs_batch, &d.rhs_contract, &d.rhs_batch)
    } else {
        (&d.rhs_contract, &d.rhs_batch, &d.lhs_contract, &d.lhs_batch)
    };
    let this_free = d.free(this.shape.rank(), lhs);
    let other_free = d.free(other.rank(), !lhs);
    let nb = this_b.len();
    // The cotangent's axes: [batch, lhs free, rhs free].
    let (lf, rf) = if lhs { (this_free.len(), other_free.len()) } else { (other_free.len(), this_free.len()) };
    let (g_other, g_this): (Axes, Axes) = if lhs {
        ((nb + lf..nb + lf + rf).collect(), (nb..nb + lf).collect())
    } else {
        ((nb..nb + lf).collect(), (nb + lf..nb + lf + rf).collect())
    };
    let os = other.shape();
    let size = |ax: &Axes, s: &Shape| ax.iter().map(|&a| s[a]).product::<usize>();
    let groups = size(this_b, &this.shape);
    let (m, k, n) = (size(&other_free, &os), size(this_c, &this.shape), size(&this_free, &this.shape));
    let perm_a: Axes = other_b.iter().chain(&other_free).chain(other_c).copied().collect();
    let a = as_matrices(other, &perm_a, [groups, m, k])?;
    let perm_g: Axes = (0..nb).chain(g_other.iter().copied()).chain(g_this.iter().copied()).collect();
    let ct = as_matrices(g, &perm_g, [groups, m, n])?;
    let axes: Axes = this_b.iter().chain(this_c).chain(&this_free).copied().collect();
    let shape = Shape::from(axes.iter().map(|&a| this.shape[a]).collect::<Vec<_>>());
    Ok(Some(Factor { rows: FactorRows::Dense(a), ct, shape, axes }))
}

// ---- batching ------------------------------------------------------------------------

fn batch_dot_general(d: &DotDims, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    let (a, b) = (&ins[0], &ins[1]);
    let nb = d.lhs_batch.len();
    let shift = |ax: &Axes, bd: usize| -> Axes { ax.iter().map(|&x| physical(x, bd)).collect() };
    match (bdims[0], bdims[1]) {
        (Some(ba), Some(bb)) => {
            let a = lax::moveaxis(a, ba, 0)?;
            let b = lax::moveaxis(b, bb, 0)?;
            let dims = DotDims {
                lhs_contract: shift(&d.lhs_contract, 0),
                rhs_contract: shift(&d.rhs_contract, 0),
                lhs_batch: std::iter::once(0).chain(shift(&d.lhs_batch, 0)).collect(),
                rhs_batch: std::iter::once(0).chain(shift(&d.rhs_batch, 0)).collect(),
            };
            Ok((smallvec![lax::dot_general(&a, &b, dims)?], smallvec![Some(0)]))
        }
        (Some(ba), None) => {
            let dims =
                DotDims { lhs_contract: shift(&d.lhs_contract, ba), lhs_batch: shift(&d.lhs_batch, ba), ..d.clone() };
            let free = dims.free(a.rank(), true);
            let pos = free.iter().position(|&x| x == ba).expect("batch axis is free");
            Ok((smallvec![lax::dot_general(a, b, dims)?], smallvec![Some(nb + pos)]))
        }
        (None, Some(bb)) => {
            let dims =
                DotDims { rhs_contract: shift(&d.rhs_contract, bb), rhs_batch: shift(&d.rhs_batch, bb), ..d.clone() };
            let lf = dims.free(a.rank(), true).len();
            let free = dims.free(b.rank(), false);
            let pos = free.iter().position(|&x| x == bb).expect("batch axis is free");
            Ok((smallvec![lax::dot_general(a, b, dims)?], smallvec![Some(nb + lf + pos)]))
        }
        (None, None) => Err(Error::invalid("dot_general", "batch rule called with no batched operand")),
    }
}

// ---- the family ------------------------------------------------------------------

crate::family_enum! {
    /// The linear algebra primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum LinalgOp, kinds LinalgKind {
        /// Generalized matrix product.
        DotGeneral(DotDims),
    }
}

impl From<LinalgOp> for Prim {
    fn from(op: LinalgOp) -> Prim {
        Prim::Linalg(op)
    }
}

impl Family for LinalgOp {
    type Kind = LinalgKind;
    const KINDS: &'static [LinalgKind] = LinalgKind::ALL;

    fn kind(&self) -> LinalgKind {
        LinalgOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            LinalgOp::DotGeneral(_) => "dot_general",
        }
    }

    fn props(&self) -> Props {
        match self {
            LinalgOp::DotGeneral(_) => Props::NONE.fresh(),
        }
    }

    fn fmt_params(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinalgOp::DotGeneral(d) => write!(f, "[{d}]"),
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            LinalgOp::DotGeneral(d) => shape_dot_general(d, ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        match self {
            LinalgOp::DotGeneral(d) => super::one(lower_dot_general(d, ins[0], ins[1])),
        }
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        match self {
            LinalgOp::DotGeneral(d) => {
                let (a, b) = (ins[0], ins[1]);
                let (a3, b3) = gemm_operands(d, a, b)?;
                super::one(backend.gemm(&a3, &b3, result_shape(d, a.shape(), b.shape())))
            }
        }
    }

    fn jvp(&self, _prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            LinalgOp::DotGeneral(d) => jvp_dot_general(d, primals, tangents),
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            LinalgOp::DotGeneral(d) => transpose_dot_general(d, cts, args),
        }
    }

    fn factor(&self, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<Factor>> {
        match self {
            LinalgOp::DotGeneral(d) => factor_dot_general(d, cts, args, i),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], _axis: &BatchAxis) -> Result<(Outs, BDims)> {
        match self {
            LinalgOp::DotGeneral(d) => batch_dot_general(d, ins, bdims),
        }
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        let mut v = Vec::new();
        v.push(Sample::new("dot_general", numeric(), vec![0, 1], true, |g, d| {
            let nb = g.int(0, 1);
            let nc = g.int(0, 2);
            let (lf, rf) = (g.int(0, 2), g.int(0, 2));
            let bsz: Vec<usize> = (0..nb).map(|_| g.int(1, 3)).collect();
            let csz: Vec<usize> = (0..nc).map(|_| g.int(0, 3)).collect();
            // Roles per axis, then a random placement of the axes in each operand.
            let mut lroles: Vec<(char, usize)> =
                (0..nb).map(|i| ('b', i)).chain((0..nc).map(|i| ('c', i))).chain((0..lf).map(|i| ('f', i))).collect();
            let mut rroles: Vec<(char, usize)> =
                (0..nb).map(|i| ('b', i)).chain((0..nc).map(|i| ('c', i))).chain((0..rf).map(|i| ('f', i))).collect();
            let lp = g.perm(lroles.len());
            lroles = lp.iter().map(|&i| lroles[i]).collect();
            let rp = g.perm(rroles.len());
            rroles = rp.iter().map(|&i| rroles[i]).collect();
            let lfs: Vec<usize> = (0..lf).map(|_| g.int(1, 3)).collect();
            let rfs: Vec<usize> = (0..rf).map(|_| g.int(1, 3)).collect();
            let size = |(role, i): (char, usize), fs: &[usize]| match role {
                'b' => bsz[i],
                'c' => csz[i],
                _ => fs[i],
            };
            let ls: Vec<usize> = lroles.iter().map(|&r| size(r, &lfs)).collect();
            let rs: Vec<usize> = rroles.iter().map(|&r| size(r, &rfs)).collect();
            let pos =
                |roles: &[(char, usize)], role: char, i: usize| roles.iter().position(|&r| r == (role, i)).unwrap();
            let dims = DotDims {
                lhs_contract: (0..nc).map(|i| pos(&lroles, 'c', i)).collect(),
                rhs_contract: (0..nc).map(|i| pos(&rroles, 'c', i)).collect(),
                lhs_batch: (0..nb).map(|i| pos(&lroles, 'b', i)).collect(),
                rhs_batch: (0..nb).map(|i| pos(&rroles, 'b', i)).collect(),
            };
            let dom = if d.is_float() {
                Dom::Real(-2.0, 2.0)
            } else if d == DType::U32 {
                Dom::Small(0, 5)
            } else {
                Dom::Small(-5, 5)
            };
            Case::new(LinalgOp::DotGeneral(dims), vec![(ls, d, dom), (rs, d, dom)])
        }));
        v
    }

    fn cuda_kernels(_: DType) -> Vec<Kernel> {
        // GEMM: a structural kernel (and cuBLAS where present)
        Vec::new()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: true, sink: true, thread_bound: false, lower_into: true }
    }

    /// Rows along a batch axis pass with the other operand's matching
    /// batch axis; rows along a free axis pass where the other operand is
    /// whole; an operand with rows along a contracted axis is dropped.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        let LinalgOp::DotGeneral(d) = self;
        let (lf, rf) = (d.free(q.ins[0].rank(), true), d.free(q.ins[1].rank(), false));
        let nb = d.lhs_batch.len();
        let contracted = (0..2)
            .filter(|&i| q.axis(i).is_some_and(|a| if i == 0 { &d.lhs_contract } else { &d.rhs_contract }.contains(&a)))
            .fold(0, |m, i| m | 1 << i);
        if contracted != 0 {
            return Err(contracted);
        }
        match (q.axis(0), q.axis(1)) {
            (Some(a), r) => {
                if let Some(k) = d.lhs_batch.iter().position(|&x| x == a) {
                    let b = d.rhs_batch[k];
                    if r.is_some_and(|c| c != b) {
                        return Err(q.split());
                    }
                    q.rows_at(smallvec![Some(a), Some(b)], k)
                } else if let Some(k) = lf.iter().position(|&x| x == a) {
                    if r.is_some() {
                        return Err(q.split());
                    }
                    q.rows_at(smallvec![Some(a), None], nb + k)
                } else {
                    Err(1)
                }
            }
            (None, Some(b)) => {
                if let Some(k) = d.rhs_batch.iter().position(|&x| x == b) {
                    q.rows_at(smallvec![Some(d.lhs_batch[k]), Some(b)], k)
                } else if let Some(k) = rf.iter().position(|&x| x == b) {
                    q.rows_at(smallvec![None, Some(b)], nb + lf.len() + k)
                } else {
                    Err(2)
                }
            }
            (None, None) => Err(0),
        }
    }

    /// A product's work: elements written times the contracted size.
    fn work(&self, ins: &[Shape], out_elems: usize) -> usize {
        let LinalgOp::DotGeneral(d) = self;
        let s = &ins[0];
        out_elems.saturating_mul(d.lhs_contract.iter().map(|&a| s[a]).product::<usize>().max(1))
    }

    /// f32 and f64 products on the CPU write straight into `out`.
    fn lower_into(&self, ins: &[&Array], out: TileMut<'_>) -> Result<Option<Array>> {
        let LinalgOp::DotGeneral(d) = self;
        let [a, b] = ins else { return Err(Error::invalid("dot_general", "expects 2 operands")) };
        match out {
            TileMut::F32(o) => dot_general_into::<f32>(d, a, b, o),
            TileMut::F64(o) => dot_general_into::<f64>(d, a, b, o),
            TileMut::Bool(_) => lower_dot_general(d, a, b).map(Some),
        }
    }
}
