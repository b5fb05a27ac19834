//! The structural elementwise primitives: `convert_element_type`,
//! `select`, `copy` and `stop_gradient`. Each result element depends on
//! the operands' elements at the same index only, so all of them batch
//! elementwise; none has math of its own to tabulate.

use super::cuda_c::CudaExpr;
use super::jit::{self, Blame, JitProps, RowFusion, RowQuery, RowRule};
use super::sample::{every_dtype, generic_dom, numeric, Case, Dom, Sample};
use super::{check_arity, check_same_dtypes, check_same_shapes, Family, Props, ViewKind};
use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
use smallvec::smallvec;
use std::mem::MaybeUninit;
use xform_kernels::cpu::assume_init;
use xform_kernels::cpu::elementwise::{map1, map3};
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::{convert_map_op, map_kernel, Kernel, MapOp};
use xform_kernels::pool::alloc_uninit;
use xform_kernels::{match_buffer, CpuBuffer, DType, Element, Layout, Shape};

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

/// Converts `x` to `dtype` (the CPU kernel, or the CUDA one).
pub(crate) fn lower_convert(dtype: DType, x: &Array) -> Result<Array> {
    if let Device::Cuda(_) = x.device() {
        return crate::backend::cuda_convert(dtype, x);
    }
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
    if let Device::Cuda(_) = a.device() {
        return crate::backend::cuda_map_raw("select", select_cuda(), &[p, a, b], a.dtype);
    }
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

    fn batch(&self, prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
        super::batching::batch_elementwise(prim, ins, bdims)
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

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: true, sink: false, thread_bound: false, lower_into: false }
    }

    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::elementwise_rows(q)
    }

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

// ---- fused CPU loops: the hook the jit's elementwise fusion calls -----------

/// A contiguous run of elements of one dtype, as a fused CPU loop reads it
/// (the dtypes elementwise fusion covers: f32, f64 and bool).
#[derive(Copy, Clone, Debug)]
pub enum Tile<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// f64 elements.
    F64(&'a [f64]),
    /// bool elements (predicates).
    Bool(&'a [bool]),
}

/// A contiguous run of elements a fused CPU loop writes one op's result
/// to: scratch, or a tile of an output array, whose elements may not be
/// initialized yet (they are written, never read).
#[derive(Debug)]
pub enum TileMut<'a> {
    /// f32 elements.
    F32(&'a mut [MaybeUninit<f32>]),
    /// f64 elements.
    F64(&'a mut [MaybeUninit<f64>]),
    /// bool elements.
    Bool(&'a mut [MaybeUninit<bool>]),
}

impl TileMut<'_> {
    /// Writes `src` at element `at` of this run.
    ///
    /// # Panics
    /// If the dtypes differ or it does not fit (a fusion bug).
    pub fn put(&mut self, at: usize, src: &Tile<'_>) {
        // a memcpy: the element loop compiles to 16-byte moves
        fn put<T: Copy>(d: &mut [MaybeUninit<T>], s: &[T]) {
            assert_eq!(d.len(), s.len(), "fused output tile of another length");
            // SAFETY: both slices hold `s.len()` elements of `T` (checked),
            // `d` is writable and borrowed exclusively, so it does not
            // overlap `s`; MaybeUninit<T> has the layout of T.
            unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr() as *mut T, s.len()) };
        }
        let n = src.len();
        match (self, src) {
            (TileMut::F32(d), Tile::F32(s)) => put(&mut d[at..at + n], s),
            (TileMut::F64(d), Tile::F64(s)) => put(&mut d[at..at + n], s),
            (TileMut::Bool(d), Tile::Bool(s)) => put(&mut d[at..at + n], s),
            _ => panic!("fused output written with another dtype"),
        }
    }
}

impl Tile<'_> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Tile::F32(v) => v.len(),
            Tile::F64(v) => v.len(),
            Tile::Bool(v) => v.len(),
        }
    }

    /// True if it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements' dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Tile::F32(_) => DType::F32,
            Tile::F64(_) => DType::F64,
            Tile::Bool(_) => DType::Bool,
        }
    }
}

/// `out[i] = f(x[i])` over contiguous slices, compiled for AVX-512 or AVX2
/// where the CPU has them, as the eager maps (Rust never contracts or
/// reassociates float operations, so the width changes no result). A
/// unary op is mostly arithmetic (tanh divides, exp and the logistic
/// evaluate polynomials), so 16 lanes pay: W1 small's f32 tanh over a
/// 64 x 64 array, jitted, measured 4.4 us with AVX2 and 2.7 with AVX-512.
#[inline(always)]
pub(crate) fn slice1<T: Copy, U, F: Fn(T) -> U>(x: &[T], out: &mut [MaybeUninit<U>], f: F) {
    #[cfg(target_arch = "x86_64")]
    {
        if xform_kernels::cpu::avx512() {
            // SAFETY: the CPU supports AVX-512F/DQ/BW/VL, AVX2 and FMA (checked above).
            unsafe { slice1_avx512(x, out, &f) };
            return;
        }
        if xform_kernels::cpu::avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            unsafe { slice1_avx2(x, out, &f) };
            return;
        }
    }
    for (o, a) in out.iter_mut().zip(x) {
        o.write(f(*a));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
unsafe fn slice1_avx512<T: Copy, U, F: Fn(T) -> U>(x: &[T], out: &mut [MaybeUninit<U>], f: &F) {
    for (o, a) in out.iter_mut().zip(x) {
        o.write(f(*a));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn slice1_avx2<T: Copy, U, F: Fn(T) -> U>(x: &[T], out: &mut [MaybeUninit<U>], f: &F) {
    for (o, a) in out.iter_mut().zip(x) {
        o.write(f(*a));
    }
}

/// `out[i] = f(a[i], b[i])` over contiguous slices (see [`slice1`]).
#[inline(always)]
pub(crate) fn slice2<A: Copy, B: Copy, U, F: Fn(A, B) -> U>(a: &[A], b: &[B], out: &mut [MaybeUninit<U>], f: F) {
    #[cfg(target_arch = "x86_64")]
    {
        if xform_kernels::cpu::avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            unsafe { slice2_avx2(a, b, out, &f) };
            return;
        }
    }
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        o.write(f(*x, *y));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn slice2_avx2<A: Copy, B: Copy, U, F: Fn(A, B) -> U>(a: &[A], b: &[B], out: &mut [MaybeUninit<U>], f: &F) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        o.write(f(*x, *y));
    }
}

/// The eager convert's element function (`convert_vec`).
fn convert_slice<S: Element, D: Element>(x: &[S], out: &mut [MaybeUninit<D>]) {
    if S::DTYPE.is_float() || D::DTYPE.is_float() {
        slice1(x, out, |a: S| D::from_f64(a.to_f64()));
    } else {
        slice1(x, out, |a: S| D::from_i64(a.to_i64()));
    }
}

/// Runs a fused CUDA kernel (generated for inputs of dtypes `in_dtypes`)
/// over `arrays` (CUDA arrays of one device and of logical shape `shape`,
/// any layouts), returning its outputs of dtypes `outs`, contiguous.
///
/// # Errors
/// Operands that do not match the kernel, a launch failure, or out of
/// memory (as the eager CUDA lowerings report them).
#[cfg(feature = "cuda")]
pub fn run_fused_cuda(
    kernel: &Kernel,
    in_dtypes: &[DType],
    arrays: &[&Array],
    shape: &Shape,
    outs: &[DType],
) -> Result<Vec<Array>> {
    crate::backend::cuda_fused(kernel, in_dtypes, arrays, shape, outs)
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

/// One CPU operand of a fused loop: its whole buffer and its layout (any
/// strides: a broadcast operand is read through stride 0), or, for an
/// operand whose buffer the loop writes an output over (a donor), the
/// buffer's address only.
#[derive(Debug)]
pub struct FusedIn<'a> {
    /// The operand's storage (empty for a donor: read it through `donor`).
    pub data: Tile<'a>,
    /// Where its elements lie in `data`.
    pub layout: &'a Layout,
    /// A donor's elements (contiguous, from offset 0), read a tile at a
    /// time before the loop writes that tile (see [`OutBase::tile`]).
    pub donor: Option<OutBase>,
}

/// Calls `f` with the CPU buffers of `arrays`, or returns `None` without
/// calling it when one is not an f32, f64 or bool CPU buffer. The arrays
/// with `donor[i]` set are opened for writing (the loop writes an output
/// over them: the caller made sure no one else holds them and that they
/// are contiguous from offset 0) and passed by address.
pub fn with_fused_inputs<R>(arrays: &[&Array], donor: &[bool], f: impl FnOnce(&[FusedIn<'_>]) -> R) -> Option<R> {
    enum Guard<'g> {
        Read(std::sync::RwLockReadGuard<'g, crate::array::Buffer>),
        Write(std::sync::RwLockWriteGuard<'g, crate::array::Buffer>),
    }
    let mut guards: smallvec::SmallVec<[Guard<'_>; 4]> = arrays
        .iter()
        .enumerate()
        .map(|(i, a)| if donor.get(i) == Some(&true) { Guard::Write(a.write()) } else { Guard::Read(a.read()) })
        .collect();
    let mut ins: smallvec::SmallVec<[FusedIn<'_>; 4]> = smallvec::SmallVec::with_capacity(arrays.len());
    for (g, a) in guards.iter_mut().zip(arrays) {
        let (data, donor) = match g {
            Guard::Read(g) => {
                let Ok(b) = g.cpu("fused") else { return None };
                let data = match b {
                    CpuBuffer::F32(v) => Tile::F32(v),
                    CpuBuffer::F64(v) => Tile::F64(v),
                    CpuBuffer::Bool(v) => Tile::Bool(v),
                    _ => return None,
                };
                (data, None)
            }
            Guard::Write(g) => {
                let Ok(b) = g.cpu_mut("fused") else { return None };
                let base = match b {
                    CpuBuffer::F32(v) => (Tile::F32(&[]), OutBase::F32(v.as_mut_ptr() as usize)),
                    CpuBuffer::F64(v) => (Tile::F64(&[]), OutBase::F64(v.as_mut_ptr() as usize)),
                    CpuBuffer::Bool(v) => (Tile::Bool(&[]), OutBase::Bool(v.as_mut_ptr() as usize)),
                    _ => return None,
                };
                (base.0, Some(base.1))
            }
        };
        ins.push(FusedIn { data, layout: &a.layout, donor });
    }
    Some(f(&ins))
}

enum OutVec {
    F32(Vec<MaybeUninit<f32>>),
    F64(Vec<MaybeUninit<f64>>),
    Bool(Vec<MaybeUninit<bool>>),
}

/// The address of an output's first element (an address, so that tasks
/// on other threads can each view their own range). Every access to an
/// output goes through short-lived views made from it, one tile at a time,
/// so a loop may read a tile of a donor operand and then write the same
/// tile of the output that reuses its buffer.
#[derive(Copy, Clone, Debug)]
pub enum OutBase {
    /// f32 elements at this address.
    F32(usize),
    /// f64 elements at this address.
    F64(usize),
    /// bool elements at this address.
    Bool(usize),
}

impl OutBase {
    /// A read-only view of elements `r` (initialized ones).
    ///
    /// # Safety
    /// The base's buffer outlives the view and elements `r` are initialized
    /// and lie inside it; nothing writes them while the view lives.
    pub unsafe fn tile<'a>(self, r: std::ops::Range<usize>) -> Tile<'a> {
        // SAFETY: in bounds, initialized and not written meanwhile (the
        // caller's contract).
        unsafe {
            match self {
                OutBase::F32(p) => Tile::F32(std::slice::from_raw_parts((p as *const f32).add(r.start), r.len())),
                OutBase::F64(p) => Tile::F64(std::slice::from_raw_parts((p as *const f64).add(r.start), r.len())),
                OutBase::Bool(p) => Tile::Bool(std::slice::from_raw_parts((p as *const bool).add(r.start), r.len())),
            }
        }
    }

    /// A view of elements `r` to write.
    ///
    /// # Safety
    /// The base's buffer outlives the view and is not moved or otherwise
    /// accessed meanwhile; `r` lies inside it; no other live view overlaps `r`.
    pub unsafe fn range<'a>(self, r: std::ops::Range<usize>) -> TileMut<'a> {
        // SAFETY: in bounds, unaliased and alive (the caller's contract);
        // MaybeUninit slots may be written through the view.
        unsafe {
            match self {
                OutBase::F32(p) => {
                    TileMut::F32(std::slice::from_raw_parts_mut((p as *mut MaybeUninit<f32>).add(r.start), r.len()))
                }
                OutBase::F64(p) => {
                    TileMut::F64(std::slice::from_raw_parts_mut((p as *mut MaybeUninit<f64>).add(r.start), r.len()))
                }
                OutBase::Bool(p) => {
                    TileMut::Bool(std::slice::from_raw_parts_mut((p as *mut MaybeUninit<bool>).add(r.start), r.len()))
                }
            }
        }
    }
}

impl OutVec {
    fn new(d: DType, n: usize) -> Option<OutVec> {
        Some(match d {
            DType::F32 => OutVec::F32(alloc_uninit(n)),
            DType::F64 => OutVec::F64(alloc_uninit(n)),
            DType::Bool => OutVec::Bool(alloc_uninit(n)),
            _ => return None,
        })
    }

    /// The address of the first element, for views made on other threads.
    fn base(&mut self) -> OutBase {
        match self {
            OutVec::F32(v) => OutBase::F32(v.as_mut_ptr() as usize),
            OutVec::F64(v) => OutBase::F64(v.as_mut_ptr() as usize),
            OutVec::Bool(v) => OutBase::Bool(v.as_mut_ptr() as usize),
        }
    }

    /// The finished buffer.
    ///
    /// # Safety
    /// Every element was written.
    unsafe fn finish(self) -> CpuBuffer {
        // SAFETY: every element was written (the caller's contract).
        unsafe {
            match self {
                OutVec::F32(v) => CpuBuffer::F32(assume_init(v)),
                OutVec::F64(v) => CpuBuffer::F64(assume_init(v)),
                OutVec::Bool(v) => CpuBuffer::Bool(assume_init(v)),
            }
        }
    }
}

/// Runs a fused loop over the `shape.numel()` elements of outputs of
/// `dtypes` (f32, f64 or bool; `None` otherwise): `body(range, outs)` must
/// write elements `range` of every output, through views made from `outs`
/// (element 0 is the output's first), a tile at a time. An output with
/// `dests[j]` set is written there (a donor operand's buffer, see
/// [`with_fused_inputs`]) and answers `None`; the others are fresh arrays.
/// Ranges start at multiples of `tile`; under rayon (when `numel * cost`
/// is worth it, as for the eager maps) the ranges are split across
/// threads, whole tiles each.
pub fn run_fused(
    dtypes: &[DType],
    dests: &[Option<OutBase>],
    shape: &Shape,
    cost: usize,
    tile: usize,
    body: impl Fn(std::ops::Range<usize>, &[OutBase]) + Sync,
) -> Option<smallvec::SmallVec<[Option<Array>; 2]>> {
    run_fused_shaped(dtypes, dests, |_| shape, shape.numel(), cost, tile, body)
}

/// [`run_fused`] whose outputs have shapes of their own (`shape_of(j)`),
/// over a range of `n` elements that `body` maps onto each output (the
/// jit's row groups: outputs of one value per row beside whole ones).
pub fn run_fused_shaped<'s>(
    dtypes: &[DType],
    dests: &[Option<OutBase>],
    shape_of: impl Fn(usize) -> &'s Shape,
    n: usize,
    cost: usize,
    tile: usize,
    body: impl Fn(std::ops::Range<usize>, &[OutBase]) + Sync,
) -> Option<smallvec::SmallVec<[Option<Array>; 2]>> {
    let mut outs: smallvec::SmallVec<[Option<OutVec>; 2]> = smallvec::SmallVec::with_capacity(dtypes.len());
    for (j, d) in dtypes.iter().enumerate() {
        outs.push(match dests.get(j).copied().flatten() {
            Some(_) => None,
            None => Some(OutVec::new(*d, shape_of(j).numel())?),
        });
    }
    let bases: smallvec::SmallVec<[OutBase; 4]> = outs
        .iter_mut()
        .zip(dtypes.iter().enumerate())
        .map(|(o, (j, _))| match o {
            Some(v) => v.base(),
            None => dests[j].expect("a destination where no fresh output"),
        })
        .collect();
    // each range is written by one task only
    xform_kernels::cpu::for_ranges(n, tile, cost, |r| body(r, &bases));
    let mut arrays = smallvec::SmallVec::with_capacity(outs.len());
    for (j, o) in outs.into_iter().enumerate() {
        // SAFETY: the ranges cover 0..n, and `body` writes every element
        // of every output that its range maps to.
        arrays.push(o.map(|o| Array::from_cpu(unsafe { o.finish() }, shape_of(j).clone())));
    }
    Some(arrays)
}
