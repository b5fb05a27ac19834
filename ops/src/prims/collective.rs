//! Collectives over named axes (`jax.lax`'s parallel operators): `psum`,
//! `pmax`, `pmin`, `all_gather`, `psum_scatter`, `all_to_all`, `ppermute`
//! and `axis_index`, with `pmean` and `axis_size` composed from them.
//!
//! NOTE: [named axes] `vmap(f, axis_name = "i")` binds the name `i` to its
//! axis: its interpreter states it (`Interpreter::named_axis`), the stack
//! entry keeps it, and `bind` routes a primitive that names axes (a
//! collective, or control flow whose bodies hold one: `Props::may_name_axes`)
//! to the first level that owns an operand *or* binds one of its names,
//! since a collective over the map's axis is the map's to apply even on an
//! operand that does not vary along it (`psum(2.0, "i")` is `2 n`), or on
//! none (`axis_index`). There the batch rule, which is told the axis it
//! batches over (`BatchAxis`: size and name), computes the collective as
//! a reduction or rearrangement along the batch dim; over another name it
//! applies the collective to the batched value with its axis parameters
//! moved past the batch dim, and the enclosing map of that name applies it.
//! The innermost binding of a name wins (nested maps of one name shadow).
//! A collective that reaches `Eval` is unbound: the error names the axis
//! and the names in force. Shape rules read a name's size from the stack
//! (`interp::axis_size`), so a program staged inside a map records the
//! map's size; jit keys its cache by the named axes in force and runs such
//! a program through `bind`, where the map applies its collectives.
//!
//! Semantics follow JAX 0.10 under `vmap` (every example gets the same
//! result of a reduction; the transpose of `psum` is `psum`, so
//! `vmap(grad(f), axis_name)` is each example's share of the gradient of
//! the sum over examples). Where xform goes past JAX, deliberately:
//! `pmax`/`pmin` have a JVP (ties share the tangent evenly, as `max`
//! reductions do; JAX has none), `ppermute` under vmap takes partial
//! permutations (examples that receive nothing get zeros, as on devices;
//! JAX's vmap asserts a full permutation), `all_to_all` of a value that
//! does not vary along the axis has the right shape, and `psum_scatter`
//! checks the scattered axis's size under vmap too.

use super::batching::{to_front, BatchAxis};
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::sample::{Case, Dom, Sample, FLOATS};
use super::{check_arity, Family, Props};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::{axis_size, bind, bind1, device_axis, unbound_axis, AxisName, DeviceAxis, Outs};
use crate::lax;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::{smallvec, SmallVec};
use std::fmt;
use std::sync::Arc;
use xform_kernels::cuda_source::Kernel;
use xform_kernels::{CpuBuffer, DType, Layout, Shape};

/// Axis names of a reduction over several axes.
pub type AxisNames = SmallVec<[AxisName; 2]>;

crate::family_enum! {
    /// The collectives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum CollectiveOp, kinds CollectiveKind {
        /// Sum over the named axes: every position gets the total.
        Psum {
            /// The axes reduced over.
            axes: AxisNames,
        },
        /// Elementwise maximum over the named axes.
        Pmax {
            /// The axes reduced over.
            axes: AxisNames,
        },
        /// Elementwise minimum over the named axes.
        Pmin {
            /// The axes reduced over.
            axes: AxisNames,
        },
        /// Every position's value, stacked along a new axis `axis` (or
        /// concatenated along `axis` when `tiled`).
        AllGather {
            /// The axis gathered over.
            axis_name: AxisName,
            /// Where the gathered axis goes.
            axis: usize,
            /// Concatenate instead of stacking.
            tiled: bool,
        },
        /// The sum over the axis, scattered: position `k` gets slice `k`
        /// (chunk `k` when `tiled`) of it along `scatter_dimension`.
        PsumScatter {
            /// The axis reduced and scattered over.
            axis_name: AxisName,
            /// The operand axis (of the axis's size, or a multiple when tiled) split among positions.
            scatter_dimension: usize,
            /// Keep the axis, chunked, instead of removing it.
            tiled: bool,
        },
        /// Position `k` gets, at index `j` of `concat_axis`, slice `k` of
        /// position `j`'s operand along `split_axis` (chunks when `tiled`).
        AllToAll {
            /// The axis exchanged over.
            axis_name: AxisName,
            /// The operand axis split among positions.
            split_axis: usize,
            /// The result axis the positions' pieces are stacked along.
            concat_axis: usize,
            /// Chunks and concatenation instead of slices and stacking.
            tiled: bool,
        },
        /// Position `dst` gets position `src`'s value for each `(src, dst)`
        /// pair; positions that receive nothing get zeros.
        Ppermute {
            /// The axis permuted over.
            axis_name: AxisName,
            /// `(source, destination)` pairs, each source and destination at most once.
            perm: Arc<[(usize, usize)]>,
        },
        /// The position along the axis, an int32 scalar.
        AxisIndex {
            /// The axis.
            axis_name: AxisName,
        },
    }
}

impl From<CollectiveOp> for Prim {
    fn from(op: CollectiveOp) -> Prim {
        Prim::Collective(op)
    }
}

/// Axis names as a collective takes them: one (`"i"`) or several
/// (`["i", "j"]`, `&names[..]`).
pub trait IntoAxisNames {
    /// The names, in order.
    fn into_axis_names(self) -> AxisNames;
}

impl IntoAxisNames for &str {
    fn into_axis_names(self) -> AxisNames {
        smallvec![AxisName::from(self)]
    }
}

impl IntoAxisNames for &String {
    fn into_axis_names(self) -> AxisNames {
        smallvec![AxisName::from(self.as_str())]
    }
}

impl IntoAxisNames for AxisName {
    fn into_axis_names(self) -> AxisNames {
        smallvec![self]
    }
}

impl IntoAxisNames for &[&str] {
    fn into_axis_names(self) -> AxisNames {
        self.iter().map(|n| AxisName::from(*n)).collect()
    }
}

impl<const N: usize> IntoAxisNames for [&str; N] {
    fn into_axis_names(self) -> AxisNames {
        self.iter().map(|n| AxisName::from(*n)).collect()
    }
}

impl IntoAxisNames for Vec<&str> {
    fn into_axis_names(self) -> AxisNames {
        self.iter().map(|n| AxisName::from(*n)).collect()
    }
}

// ---- the user API (re-exported by `lax`) --------------------------------

/// The sum of `x` over the named axes: under `vmap(f, axis_name = "i")`,
/// every example gets the sum over the examples (`jax.lax.psum`). Bool is
/// summed as int32.
pub fn psum(x: &Tensor, axes: impl IntoAxisNames) -> Result<Tensor> {
    let x = if x.dtype() == DType::Bool { lax::convert(x, DType::I32)? } else { x.clone() };
    bind1(&CollectiveOp::Psum { axes: named("psum", axes)? }.into(), &[x])
}

/// The mean of `x` over the named axes (`jax.lax.pmean`): [`psum`] divided
/// by the axes' sizes; integers give float32 (a true division, as JAX).
pub fn pmean(x: &Tensor, axes: impl IntoAxisNames) -> Result<Tensor> {
    let axes = named("pmean", axes)?;
    let mut n = 1usize;
    for a in &axes {
        n *= axis_size(a).ok_or_else(|| unbound_axis("pmean", a))?;
    }
    let x = if x.dtype().is_float() { x.clone() } else { lax::convert(x, DType::F32)? };
    let s = bind1(&CollectiveOp::Psum { axes }.into(), &[x])?;
    lax::div(&s, &lax::full_like(&s, n as f64)?)
}

/// The elementwise maximum of `x` over the named axes (`jax.lax.pmax`).
pub fn pmax(x: &Tensor, axes: impl IntoAxisNames) -> Result<Tensor> {
    bind1(&CollectiveOp::Pmax { axes: named("pmax", axes)? }.into(), std::slice::from_ref(x))
}

/// The elementwise minimum of `x` over the named axes (`jax.lax.pmin`).
pub fn pmin(x: &Tensor, axes: impl IntoAxisNames) -> Result<Tensor> {
    bind1(&CollectiveOp::Pmin { axes: named("pmin", axes)? }.into(), std::slice::from_ref(x))
}

/// Every position's `x` along the named axis, stacked at `axis` (`axis`
/// may be negative, counted in the result), or concatenated along `axis`
/// when `tiled` (`jax.lax.all_gather`).
pub fn all_gather(x: &Tensor, axis_name: &str, axis: isize, tiled: bool) -> Result<Tensor> {
    let rank = x.rank() + usize::from(!tiled);
    let axis = resolve("all_gather", axis, rank)?;
    bind1(&CollectiveOp::AllGather { axis_name: axis_name.into(), axis, tiled }.into(), std::slice::from_ref(x))
}

/// The sum over the named axis, scattered along `scatter_dimension`
/// (`jax.lax.psum_scatter`): position `k` gets slice `k` (untiled; the
/// dimension must be the axis's size) or chunk `k` (tiled; a multiple).
pub fn psum_scatter(x: &Tensor, axis_name: &str, scatter_dimension: isize, tiled: bool) -> Result<Tensor> {
    let s = resolve("psum_scatter", scatter_dimension, x.rank())?;
    bind1(
        &CollectiveOp::PsumScatter { axis_name: axis_name.into(), scatter_dimension: s, tiled }.into(),
        std::slice::from_ref(x),
    )
}

/// Exchanges slices among the positions of the named axis
/// (`jax.lax.all_to_all`): position `k` gets, at index `j` of
/// `concat_axis`, slice `k` along `split_axis` of position `j`'s `x`
/// (untiled: `split_axis` is the axis's size, removed, and a new axis of
/// that size is inserted at `concat_axis` of the result; tiled: chunks,
/// concatenated).
pub fn all_to_all(x: &Tensor, axis_name: &str, split_axis: isize, concat_axis: isize, tiled: bool) -> Result<Tensor> {
    let split_axis = resolve("all_to_all", split_axis, x.rank())?;
    let concat_axis = resolve("all_to_all", concat_axis, x.rank())?;
    bind1(
        &CollectiveOp::AllToAll { axis_name: axis_name.into(), split_axis, concat_axis, tiled }.into(),
        std::slice::from_ref(x),
    )
}

/// Sends each position's `x` to another (`jax.lax.ppermute`): position
/// `dst` gets position `src`'s value for each `(src, dst)` pair of `perm`;
/// positions that receive nothing get zeros.
pub fn ppermute(x: &Tensor, axis_name: &str, perm: &[(usize, usize)]) -> Result<Tensor> {
    bind1(&CollectiveOp::Ppermute { axis_name: axis_name.into(), perm: perm.into() }.into(), std::slice::from_ref(x))
}

/// This position's index along the named axis, an int32 scalar
/// (`jax.lax.axis_index`). Over several names, the index into their
/// product, the first name the slowest (`axis_index(["i", "j"])` is
/// `i * size(j) + j`, as JAX linearizes a tuple of names).
pub fn axis_index(axes: impl IntoAxisNames) -> Result<Tensor> {
    let names = named("axis_index", axes)?;
    let mut index: Option<Tensor> = None;
    for name in &names {
        let own = bind1(&CollectiveOp::AxisIndex { axis_name: name.clone() }.into(), &[])?;
        index = Some(match index {
            None => own,
            Some(outer) => {
                let size = axis_size(name).ok_or_else(|| unbound_axis("axis_index", name))?;
                let scaled = lax::mul(&outer, &lax::full_like(&outer, size as f64)?)?;
                lax::add(&scaled, &own)?
            }
        });
    }
    index.ok_or_else(|| Error::invalid("axis_index", "axis_index needs at least one axis name"))
}

/// The size of the named axis (`jax.lax.axis_size`, `psum(1, name)`).
pub fn axis_size_of(axis_name: &str) -> Result<usize> {
    axis_size(axis_name).ok_or_else(|| unbound_axis("axis_size", axis_name))
}

fn named(op: &str, axes: impl IntoAxisNames) -> Result<AxisNames> {
    let axes = axes.into_axis_names();
    if axes.is_empty() {
        return Err(Error::invalid(op, format!("{op} needs at least one axis name")));
    }
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].contains(a) {
            return Err(Error::invalid(op, format!("axis name '{a}' is repeated")));
        }
    }
    Ok(axes)
}

fn resolve(op: &str, axis: isize, rank: usize) -> Result<usize> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    if a < 0 || a >= rank as isize {
        return Err(Error::axis(op, axis, rank));
    }
    Ok(a as usize)
}

// ---- shape rules ----------------------------------------------------------

impl CollectiveOp {
    /// The names it refers to.
    pub fn names(&self) -> AxisNames {
        match self {
            CollectiveOp::Psum { axes } | CollectiveOp::Pmax { axes } | CollectiveOp::Pmin { axes } => axes.clone(),
            CollectiveOp::AllGather { axis_name, .. }
            | CollectiveOp::PsumScatter { axis_name, .. }
            | CollectiveOp::AllToAll { axis_name, .. }
            | CollectiveOp::Ppermute { axis_name, .. }
            | CollectiveOp::AxisIndex { axis_name } => smallvec![axis_name.clone()],
        }
    }

    /// The result's abstract value, with each name's size from `size_of`
    /// (`None`: unbound).
    fn result(&self, ins: &[AvalRef<'_>], size_of: &dyn Fn(&str) -> Option<usize>) -> Result<Aval> {
        let op = self.name();
        let size = |n: &AxisName| size_of(n).ok_or_else(|| unbound_axis(op, n));
        if let CollectiveOp::AxisIndex { axis_name } = self {
            check_arity(op, ins, 0)?;
            size(axis_name)?;
            return Ok(Aval { shape: Shape::scalar(), dtype: DType::I32, device: crate::device::default_device() });
        }
        check_arity(op, ins, 1)?;
        let x = &ins[0];
        let mut shape: Vec<usize> = x.shape.to_vec();
        let rank = shape.len();
        match self {
            CollectiveOp::Psum { axes } | CollectiveOp::Pmax { axes } | CollectiveOp::Pmin { axes } => {
                if x.dtype == DType::Bool {
                    return Err(Error::dtype(op, "operand must be numeric (lax::psum sums bool as int32)", &[x.dtype]));
                }
                for a in axes {
                    size(a)?;
                }
            }
            CollectiveOp::AllGather { axis_name, axis, tiled } => {
                let n = size(axis_name)?;
                if *tiled {
                    super::check_axis(op, *axis, rank)?;
                    shape[*axis] *= n;
                } else {
                    super::check_axis(op, *axis, rank + 1)?;
                    shape.insert(*axis, n);
                }
            }
            CollectiveOp::PsumScatter { axis_name, scatter_dimension: s, tiled } => {
                let n = size(axis_name)?;
                super::check_axis(op, *s, rank)?;
                scatter_sizes(op, axis_name, n, *s, *tiled, x.shape)?;
                if *tiled {
                    shape[*s] /= n;
                } else {
                    shape.remove(*s);
                }
            }
            CollectiveOp::AllToAll { axis_name, split_axis: s, concat_axis: c, tiled } => {
                let n = size(axis_name)?;
                super::check_axis(op, *s, rank)?;
                super::check_axis(op, *c, rank)?;
                scatter_sizes(op, axis_name, n, *s, *tiled, x.shape)?;
                if *tiled {
                    shape[*s] /= n;
                    shape[*c] *= n;
                } else {
                    shape.remove(*s);
                    shape.insert(*c, n);
                }
            }
            CollectiveOp::Ppermute { axis_name, perm } => {
                let n = size(axis_name)?;
                check_perm(axis_name, perm, n)?;
            }
            CollectiveOp::AxisIndex { .. } => unreachable!("handled above"),
        }
        Ok(Aval { shape: Shape::from(shape), dtype: x.dtype, device: x.device })
    }
}

/// Checks that axis `s` of `shape` is the axis's size `n` (or, tiled, a
/// multiple of it).
fn scatter_sizes(op: &str, name: &str, n: usize, s: usize, tiled: bool, shape: &Shape) -> Result<()> {
    let m = shape[s];
    let ok = if tiled { n > 0 && m.is_multiple_of(n) } else { m == n };
    if !ok {
        let need = if tiled { "a multiple of" } else { "equal to" };
        return Err(Error::shape(
            op,
            format!("axis {s} (size {m}) must be {need} the size of the named axis '{name}' ({n})"),
            &[shape],
        ));
    }
    Ok(())
}

/// Checks a permutation's pairs against an axis of size `n`.
fn check_perm(name: &str, perm: &[(usize, usize)], n: usize) -> Result<()> {
    for (i, &(src, dst)) in perm.iter().enumerate() {
        if src >= n || dst >= n {
            return Err(Error::invalid(
                "ppermute",
                format!("pair ({src}, {dst}) is out of range for the named axis '{name}' of size {n}"),
            ));
        }
        if perm[..i].iter().any(|&(s, d)| s == src || d == dst) {
            return Err(Error::invalid(
                "ppermute",
                format!("pair ({src}, {dst}) repeats a source or a destination: perm must be a (partial) permutation"),
            ));
        }
    }
    Ok(())
}

// ---- batch rules ----------------------------------------------------------

/// `x` (batched at `b`, or not) reduced along the batch axis: the sum over
/// the examples (`n x` where `x` does not vary), max or min.
fn reduce_examples(kind: CollectiveKind, x: &Tensor, b: Option<usize>, n: usize) -> Result<Tensor> {
    match (kind, b) {
        (CollectiveKind::Psum, Some(d)) => lax::reduce_sum(x, &[d]),
        (CollectiveKind::Psum, None) => lax::mul_scalar(x, n as f64),
        (CollectiveKind::Pmax, Some(d)) => lax::reduce_max(x, &[d]),
        (CollectiveKind::Pmin, Some(d)) => lax::reduce_min(x, &[d]),
        (_, _) => Ok(x.clone()),
    }
}

/// Merges axes `a` and `a + 1` of `x` into one (row-major).
fn merge(x: &Tensor, a: usize) -> Result<Tensor> {
    let mut s = x.shape();
    let m = s[a] * s[a + 1];
    s.0.remove(a + 1);
    s.0[a] = m;
    lax::reshape(x, &s)
}

/// Splits axis `a` of `x` into `(n, size / n)`.
fn split(x: &Tensor, a: usize, n: usize) -> Result<Tensor> {
    let mut s = x.shape();
    let m = s[a];
    s.0[a] = m / n;
    s.0.insert(a, n);
    lax::reshape(x, &s)
}

/// A host vector as an int32 tensor on `like`'s device.
fn int_vector(v: Vec<i32>, like: &Tensor) -> Result<Tensor> {
    let n = v.len();
    let a = Array::from_cpu(CpuBuffer::I32(v), Shape::from(vec![n]));
    Ok(Tensor::from_array(a.to_device(like.device())?))
}

impl CollectiveOp {
    /// The collective with its axis parameters moved one place right (the
    /// operand gained a leading batch axis).
    fn shifted(&self) -> CollectiveOp {
        let mut op = self.clone();
        match &mut op {
            CollectiveOp::AllGather { axis, .. } => *axis += 1,
            CollectiveOp::PsumScatter { scatter_dimension, .. } => *scatter_dimension += 1,
            CollectiveOp::AllToAll { split_axis, concat_axis, .. } => {
                *split_axis += 1;
                *concat_axis += 1;
            }
            _ => {}
        }
        op
    }

    /// The batch rule over an axis this collective does not name: the
    /// collective applied to the batched value (for an enclosing map), its
    /// axis parameters moved past the batch dim.
    fn batch_other(&self, x: &Tensor, b: usize) -> Result<(Outs, BDims)> {
        match self {
            CollectiveOp::Psum { .. }
            | CollectiveOp::Pmax { .. }
            | CollectiveOp::Pmin { .. }
            | CollectiveOp::Ppermute { .. } => {
                Ok((bind(&self.clone().into(), std::slice::from_ref(x))?, smallvec![Some(b)]))
            }
            _ => {
                let x = lax::moveaxis(x, b, 0)?;
                Ok((bind(&self.shifted().into(), &[x])?, smallvec![Some(0)]))
            }
        }
    }

    /// The batch rule over the axis named in the collective (`x` batched at
    /// `b`, or not varying along it).
    fn batch_own(&self, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        let n = axis.size;
        let own = axis.name.as_ref().expect("a named axis");
        // the per-example shapes are checked here, with this axis's size
        // (the shape rule at this level cannot see it)
        let logical: Vec<Aval> = ins
            .iter()
            .zip(bdims)
            .map(|(x, b)| {
                let mut a = x.aval();
                if let Some(d) = b {
                    a.shape.0.remove(*d);
                }
                a
            })
            .collect();
        let refs: Vec<AvalRef<'_>> = logical.iter().map(Aval::as_ref).collect();
        self.result(&refs, &|name| if name == &**own { Some(n) } else { axis_size(name) })?;
        if let CollectiveOp::AxisIndex { .. } = self {
            let dev = crate::device::default_device();
            return Ok((smallvec![lax::iota(DType::I32, &Shape::from(vec![n]), 0, dev)?], smallvec![Some(0)]));
        }
        let (x, b) = (&ins[0], bdims[0]);
        match self {
            CollectiveOp::Psum { axes } | CollectiveOp::Pmax { axes } | CollectiveOp::Pmin { axes } => {
                let r = reduce_examples(self.kind(), x, b, n)?;
                let rest: AxisNames = axes.iter().filter(|a| *a != own).cloned().collect();
                let r = if rest.is_empty() {
                    r
                } else {
                    let mut op = self.clone();
                    match &mut op {
                        CollectiveOp::Psum { axes } | CollectiveOp::Pmax { axes } | CollectiveOp::Pmin { axes } => {
                            *axes = rest
                        }
                        _ => unreachable!(),
                    }
                    bind1(&op.into(), &[r])?
                };
                Ok((smallvec![r], smallvec![None]))
            }
            CollectiveOp::AllGather { axis: a, tiled, .. } => {
                // the examples' axis, moved to where the gathered axis goes
                let y = to_front(x, b, n)?;
                let y = lax::moveaxis(&y, 0, *a)?;
                let y = if *tiled { merge(&y, *a)? } else { y };
                let y = if b.is_none() { lax::copy(&y)? } else { y };
                Ok((smallvec![y], smallvec![None]))
            }
            CollectiveOp::PsumScatter { scatter_dimension: s, tiled, .. } => {
                let total = reduce_examples(CollectiveKind::Psum, x, b, n)?;
                let y = if *tiled { split(&total, *s, n)? } else { total };
                Ok((smallvec![y], smallvec![Some(*s)]))
            }
            CollectiveOp::AllToAll { split_axis: s, concat_axis: c, tiled, .. } => {
                // X[j, ...] with j the sending example
                let xj = to_front(x, b, n)?;
                let y = if *tiled {
                    // chunk k of axis s: (j, .., k, q, ..) -> (k, j, .. q ..)
                    let z = split(&xj, 1 + s, n)?;
                    let z = lax::moveaxis(&z, 1 + s, 0)?;
                    // j next to axis c of the piece, then merged into it
                    let z = lax::moveaxis(&z, 1, 1 + c)?;
                    merge(&z, 1 + c)?
                } else {
                    // (j, .., k@s, ..) -> (k, j, ..) -> (k, .., j@c, ..)
                    let z = lax::moveaxis(&xj, 1 + s, 0)?;
                    lax::moveaxis(&z, 1, 1 + c)?
                };
                Ok((smallvec![y], smallvec![Some(0)]))
            }
            CollectiveOp::Ppermute { perm, .. } => {
                let mut src = vec![-1i32; n];
                for &(s, d) in perm.iter() {
                    src[d] = s as i32;
                }
                let full = src.iter().all(|&s| s >= 0);
                let (x, d) = match b {
                    Some(d) => (x.clone(), d),
                    // a full permutation of equal values changes nothing
                    None if full => return Ok((smallvec![x.clone()], smallvec![None])),
                    None => (to_front(x, None, n)?, 0),
                };
                let idx = int_vector(src.iter().map(|&s| s.max(0)).collect(), &x)?;
                let y = lax::gather(&x, &idx, d, 0)?;
                if full {
                    return Ok((smallvec![y], smallvec![Some(d)]));
                }
                // examples that receive nothing get zeros
                let mask: Vec<i32> = src.iter().map(|&s| i32::from(s >= 0)).collect();
                let m = lax::convert(&int_vector(mask, &x)?, x.dtype())?;
                let m = lax::broadcast_in_dim(&m, &y.shape(), &[d])?;
                Ok((smallvec![lax::mul(&y, &m)?], smallvec![Some(d)]))
            }
            CollectiveOp::AxisIndex { .. } => unreachable!("handled above"),
        }
    }
}

impl CollectiveOp {
    /// The collective over a device-mapped axis, at this thread's position:
    /// every position's operand is exchanged, stacked along a leading axis
    /// and given to the same batch rule `vmap` runs (so `pmap` computes
    /// what `vmap` does, bit for bit), and this position's part of the
    /// result is kept.
    fn across_devices(&self, ins: &[&Array], dev: &DeviceAxis) -> Result<Outs> {
        // a position knows its index: nothing to exchange
        if let CollectiveOp::AxisIndex { .. } = self {
            return Ok(smallvec![lax::convert(&Tensor::scalar(dev.index as f64), crate::DType::I32)?]);
        }
        if let Some(y) = self.scattered_across_devices(ins, dev)? {
            return Ok(smallvec![y]);
        }
        let what = format!("{self:?}");
        let all = dev.exchange.exchange(dev.index, &what, ins.first().map(|a| (*a).clone()))?;
        let axis = BatchAxis { size: dev.size, name: Some(dev.name.clone()) };
        let (outs, bdims) = if ins.is_empty() {
            self.batch_own(&[], &[], &axis)?
        } else {
            let mut parts = Vec::with_capacity(all.len());
            for a in all {
                let a = a.ok_or_else(|| Error::invalid(self.name(), "internal error: a position gave no operand"))?;
                parts.push(Tensor::from_array(a));
            }
            self.check_same_operands(&parts, dev)?;
            let parts: Vec<Tensor> = parts.iter().map(|p| lax::expand_dims(p, 0)).collect::<Result<_>>()?;
            let stacked = lax::concatenate(&parts, 0)?;
            self.batch_own(&[stacked], &[Some(0)], &axis)?
        };
        let mut mine = Outs::new();
        for (o, b) in outs.into_iter().zip(bdims) {
            mine.push(match b {
                None => o,
                Some(d) => lax::index_axis(&o, d, dev.index)?,
            });
        }
        Ok(mine)
    }
}

impl CollectiveOp {
    /// A reduce-scatter or an all-to-all over a device-mapped axis (`None`
    /// for the other collectives): each position sends every other only
    /// the chunk that one keeps (chunk `k` of the scattered or split axis
    /// to position `k`: for two positions half the bytes of gathering
    /// every operand), and computes its result from the chunks it got as
    /// the batch rule would (the same sums in the same order: still
    /// `vmap`'s result bit for bit).
    fn scattered_across_devices(&self, ins: &[&Array], dev: &DeviceAxis) -> Result<Option<Tensor>> {
        let (s, tiled) = match self {
            CollectiveOp::PsumScatter { scatter_dimension, tiled, .. } => (*scatter_dimension, *tiled),
            CollectiveOp::AllToAll { split_axis, tiled, .. } => (*split_axis, *tiled),
            _ => return Ok(None),
        };
        let n = dev.size;
        // the per-position shape rule with this axis's size (a tiled
        // axis must be a multiple of it) before anything is cut
        let own = &*dev.name;
        self.result(&[ins[0].aval_ref()], &|name| if name == own { Some(n) } else { axis_size(name) })?;
        let x = Tensor::from_array(ins[0].clone());
        let lost = || Error::invalid(self.name(), "internal error: a chunk is not concrete");
        let mut parts = Vec::with_capacity(n);
        for k in 0..n {
            let chunk = if tiled {
                let c = x.shape()[s] / n;
                lax::slice_axis(&x, s, k * c, (k + 1) * c)?
            } else {
                lax::index_axis(&x, s, k)?
            };
            parts.push(chunk.array().ok_or_else(lost)?);
        }
        let got = dev.exchange.exchange_each(dev.index, &format!("{self:?}"), parts)?;
        let got: Vec<Tensor> = got.into_iter().map(Tensor::from_array).collect();
        self.check_same_operands(&got, dev)?;
        let stack_at = |a: usize| -> Result<Tensor> {
            let rows: Vec<Tensor> = got.iter().map(|g| lax::expand_dims(g, a)).collect::<Result<_>>()?;
            lax::concatenate(&rows, a)
        };
        let y = match self {
            // the batch rule's sum over the stacked positions
            CollectiveOp::PsumScatter { .. } => lax::reduce_sum(&stack_at(0)?, &[0])?,
            CollectiveOp::AllToAll { concat_axis: c, .. } if tiled => lax::concatenate(&got, *c)?,
            CollectiveOp::AllToAll { concat_axis: c, .. } => stack_at(*c)?,
            _ => unreachable!("matched above"),
        };
        Ok(Some(y))
    }

    /// Every position of a device-mapped axis must give an operand of one
    /// shape and dtype (as the examples of a vmap have): a mismatch is
    /// reported with each position's, the same error at every position.
    fn check_same_operands(&self, parts: &[Tensor], dev: &DeviceAxis) -> Result<()> {
        let first = &parts[0];
        if parts.iter().all(|p| p.dtype() == first.dtype() && p.shape() == first.shape()) {
            return Ok(());
        }
        let each: Vec<String> =
            parts.iter().enumerate().map(|(k, p)| format!("{} {k}: {}", dev.exchange.noun(), p.aval())).collect();
        Err(Error::invalid(
            self.name(),
            format!(
                "over axis '{}', the {}s gave operands of different shapes or dtypes ({}): every {} must give the same",
                dev.name,
                dev.exchange.noun(),
                each.join(", "),
                dev.exchange.noun()
            ),
        ))
    }
}

// ---- the family -----------------------------------------------------------

impl Family for CollectiveOp {
    type Kind = CollectiveKind;
    const KINDS: &'static [CollectiveKind] = CollectiveKind::ALL;

    fn kind(&self) -> CollectiveKind {
        CollectiveOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            CollectiveOp::Psum { .. } => "psum",
            CollectiveOp::Pmax { .. } => "pmax",
            CollectiveOp::Pmin { .. } => "pmin",
            CollectiveOp::AllGather { .. } => "all_gather",
            CollectiveOp::PsumScatter { .. } => "psum_scatter",
            CollectiveOp::AllToAll { .. } => "all_to_all",
            CollectiveOp::Ppermute { .. } => "ppermute",
            CollectiveOp::AxisIndex { .. } => "axis_index",
        }
    }

    fn props(&self) -> Props {
        Props::NONE.naming_axes()
    }

    fn axis_names(&self) -> SmallVec<[AxisName; 2]> {
        self.names()
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |f: &mut fmt::Formatter<'_>, axes: &[AxisName]| -> fmt::Result {
            let v: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
            write!(f, "axes=({})", v.join(","))
        };
        f.write_str("[")?;
        match self {
            CollectiveOp::Psum { axes } | CollectiveOp::Pmax { axes } | CollectiveOp::Pmin { axes } => names(f, axes)?,
            CollectiveOp::AllGather { axis_name, axis, tiled } => {
                write!(f, "axis_name={axis_name} axis={axis} tiled={tiled}")?
            }
            CollectiveOp::PsumScatter { axis_name, scatter_dimension, tiled } => {
                write!(f, "axis_name={axis_name} scatter_dimension={scatter_dimension} tiled={tiled}")?
            }
            CollectiveOp::AllToAll { axis_name, split_axis, concat_axis, tiled } => {
                write!(f, "axis_name={axis_name} split_axis={split_axis} concat_axis={concat_axis} tiled={tiled}")?
            }
            CollectiveOp::Ppermute { axis_name, perm } => write!(f, "axis_name={axis_name} perm={perm:?}")?,
            CollectiveOp::AxisIndex { axis_name } => write!(f, "axis_name={axis_name}")?,
        }
        f.write_str("]")
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        Ok(smallvec![self.result(ins, &|n| axis_size(n))?])
    }

    /// Reached where no transform binds the names (a bound name is its
    /// map's to apply): over a device-mapped axis this thread runs a
    /// position of (`pmap`), the positions exchange their values;
    /// otherwise the unbound-name error.
    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        let names = self.names();
        if let Some(dev) = names.iter().find_map(|n| device_axis(n)) {
            return self.across_devices(ins, &dev);
        }
        let name = names.iter().find(|n| axis_size(n).is_none()).unwrap_or(&names[0]);
        Err(unbound_axis(self.name(), name))
    }

    fn lower_device(&self, ins: &[&Array], _: &dyn crate::backend::Backend) -> Result<Outs> {
        self.lower(ins)
    }

    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            CollectiveOp::AxisIndex { .. } => super::no_tangent(prim, primals),
            CollectiveOp::Pmax { axes } | CollectiveOp::Pmin { axes } => {
                // ties share the tangent evenly (as max reductions do)
                let out = bind1(prim, primals)?;
                let Some(t) = &tangents[0] else { return Ok((smallvec![out], smallvec![None])) };
                let x = &primals[0];
                let hit = lax::convert(&lax::eq(x, &out)?, x.dtype())?;
                let psum =
                    |v: &Tensor| bind1(&CollectiveOp::Psum { axes: axes.clone() }.into(), std::slice::from_ref(v));
                let num = psum(&lax::mul(t, &hit)?)?;
                let den = psum(&hit)?;
                Ok((smallvec![out], smallvec![Some(lax::div(&num, &den)?)]))
            }
            _ => super::linear_jvp(prim, primals, tangents),
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        let Some(ct) = &cts[0] else { return Ok(smallvec![None; args.len()]) };
        let t: CollectiveOp = match self {
            // psum's transpose is psum (JAX: psum as psum + pbroadcast)
            CollectiveOp::Psum { axes } => CollectiveOp::Psum { axes: axes.clone() },
            CollectiveOp::AllGather { axis_name, axis, tiled } => {
                CollectiveOp::PsumScatter { axis_name: axis_name.clone(), scatter_dimension: *axis, tiled: *tiled }
            }
            CollectiveOp::PsumScatter { axis_name, scatter_dimension, tiled } => {
                CollectiveOp::AllGather { axis_name: axis_name.clone(), axis: *scatter_dimension, tiled: *tiled }
            }
            CollectiveOp::AllToAll { axis_name, split_axis, concat_axis, tiled } => CollectiveOp::AllToAll {
                axis_name: axis_name.clone(),
                split_axis: *concat_axis,
                concat_axis: *split_axis,
                tiled: *tiled,
            },
            CollectiveOp::Ppermute { axis_name, perm } => CollectiveOp::Ppermute {
                axis_name: axis_name.clone(),
                perm: perm.iter().map(|&(s, d)| (d, s)).collect::<Vec<_>>().into(),
            },
            CollectiveOp::Pmax { .. } | CollectiveOp::Pmin { .. } | CollectiveOp::AxisIndex { .. } => {
                return super::not_linear(self.name())
            }
        };
        Ok(smallvec![Some(bind1(&t.into(), std::slice::from_ref(ct))?)])
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        let own = axis.name.as_ref().is_some_and(|n| self.names().contains(n));
        if own {
            return self.batch_own(ins, bdims, axis);
        }
        match (ins.first(), bdims.first().copied().flatten()) {
            (Some(x), Some(b)) => self.batch_other(x, b),
            _ => Err(Error::invalid(self.name(), "internal error: batch rule called with nothing batched")),
        }
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        // Each case runs under `vmap` over the operands' leading axis
        // named "i" (`Case::under_axis`), as a function of every example's
        // value: the generic tests check it like any other primitive.
        let floats = FLOATS.to_vec();
        let mut v = Vec::new();
        let axes = || -> AxisNames { smallvec![AxisName::from("i")] };
        v.push(Sample::new("psum", floats.clone(), vec![0], true, move |g, d| {
            let n = g.int(1, 4);
            let shape = [vec![n], g.shape(2, 0, 3)].concat();
            Case::new(CollectiveOp::Psum { axes: axes() }, vec![(shape, d, Dom::Real(-2.0, 2.0))]).under_axis("i", n)
        }));
        for (name, op) in [("pmax", CollectiveKind::Pmax), ("pmin", CollectiveKind::Pmin)] {
            v.push(Sample::new(name, floats.clone(), vec![], true, move |g, d| {
                let n = g.int(1, 4);
                let shape = [vec![n], g.shape(2, 1, 3)].concat();
                let p = if op == CollectiveKind::Pmax {
                    CollectiveOp::Pmax { axes: axes() }
                } else {
                    CollectiveOp::Pmin { axes: axes() }
                };
                Case::new(p, vec![(shape, d, Dom::Distinct(-2.0, 2.0))]).under_axis("i", n)
            }));
        }
        v.push(Sample::new("all_gather", floats.clone(), vec![0], true, |g, d| {
            let n = g.int(1, 3);
            let rest = g.shape(2, 1, 3);
            let tiled = g.coin(0.5) && !rest.is_empty();
            let axis = if tiled { g.int(0, rest.len() - 1) } else { g.int(0, rest.len()) };
            let shape = [vec![n], rest].concat();
            Case::new(
                CollectiveOp::AllGather { axis_name: "i".into(), axis, tiled },
                vec![(shape, d, Dom::Real(-2.0, 2.0))],
            )
            .under_axis("i", n)
        }));
        v.push(Sample::new("psum_scatter", floats.clone(), vec![0], true, |g, d| {
            let n = g.int(1, 3);
            let mut rest = g.shape(2, 1, 3);
            let tiled = g.coin(0.5);
            let s = g.int(0, rest.len());
            rest.insert(s, if tiled { n * g.int(1, 2) } else { n });
            let shape = [vec![n], rest].concat();
            Case::new(
                CollectiveOp::PsumScatter { axis_name: "i".into(), scatter_dimension: s, tiled },
                vec![(shape, d, Dom::Real(-2.0, 2.0))],
            )
            .under_axis("i", n)
        }));
        v.push(Sample::new("all_to_all", floats.clone(), vec![0], true, |g, d| {
            let n = g.int(1, 3);
            let mut rest = g.shape(2, 1, 3);
            let tiled = g.coin(0.5);
            let s = g.int(0, rest.len());
            rest.insert(s, if tiled { n * g.int(1, 2) } else { n });
            let c = g.int(0, rest.len() - 1);
            let shape = [vec![n], rest].concat();
            Case::new(
                CollectiveOp::AllToAll { axis_name: "i".into(), split_axis: s, concat_axis: c, tiled },
                vec![(shape, d, Dom::Real(-2.0, 2.0))],
            )
            .under_axis("i", n)
        }));
        v.push(Sample::new("ppermute", floats.clone(), vec![0], true, |g, d| {
            let n = g.int(1, 4);
            let dst = g.perm(n);
            // a full permutation, or a partial one (some examples receive zeros)
            let keep = if g.coin(0.5) { n } else { g.int(0, n) };
            let perm: Vec<(usize, usize)> = (0..keep).map(|s| (s, dst[s])).collect();
            let shape = [vec![n], g.shape(2, 1, 3)].concat();
            Case::new(
                CollectiveOp::Ppermute { axis_name: "i".into(), perm: perm.into() },
                vec![(shape, d, Dom::Real(-2.0, 2.0))],
            )
            .under_axis("i", n)
        }));
        v.push(Sample::new("axis_index", vec![DType::I32], vec![], false, |g, _| {
            let n = g.int(1, 4);
            Case::new(CollectiveOp::AxisIndex { axis_name: "i".into() }, vec![]).under_axis("i", n)
        }));
        v
    }

    fn cuda_kernels(_: DType) -> Vec<Kernel> {
        // applied by the maps that bind their names, never lowered
        Vec::new()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        // never in a replay plan: a program with collectives runs through
        // `bind` (NOTE: [named axes])
        JitProps { graph_capture: false, sink: false, thread_bound: true, lower_into: false }
    }

    /// Rows do not pass: the split keeps its operands whole.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::no_rows(q)
    }
}
