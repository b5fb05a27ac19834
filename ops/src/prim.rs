//! The closed set of primitives and the dispatchers for their rules.
//!
//! Each dispatcher is an exhaustive `match` over [`Prim`]; each family file
//! under `prims/` matches exhaustively over its own ops. A primitive without
//! a shape rule, lowering, JVP rule, transpose rule (an explicit "not
//! linear" error where it has none) or batch rule does not compile.

use crate::array::{Array, Device};
use crate::error::Result;
use crate::interp::Outs;
use crate::prims::{binary, indexing, linalg, random, reduce, shape, unary};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::SmallVec;
use std::fmt;
use xform_kernels::{DType, Shape};

pub use crate::prims::binary::{BinaryOp, CompareOp};
pub use crate::prims::linalg::DotDims;
pub use crate::prims::reduce::{ArgOp, ReduceOp};
pub use crate::prims::unary::UnaryOp;

/// A list of axes.
pub type Axes = SmallVec<[usize; 4]>;
/// Signed per-axis amounts (padding).
pub type Amounts = SmallVec<[i64; 4]>;
/// Output abstract values of a shape rule.
pub type Avals = SmallVec<[Aval; 2]>;
/// Tangents (`None` is a symbolic zero).
pub type Tangents = SmallVec<[Option<Tensor>; 2]>;
/// Batch dimensions (`None`: unbatched).
pub type BDims = SmallVec<[Option<usize>; 4]>;
/// Cotangents for the inputs of a transposed primitive (`None`: zero or
/// not a linear input).
pub type Cotangents = SmallVec<[Option<Tensor>; 4]>;

/// A primitive with its static parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Prim {
    /// Elementwise unary math (`unary.rs`).
    Unary(UnaryOp),
    /// Elementwise dtype conversion (`unary.rs`).
    Convert(DType),
    /// Binary arithmetic and logic on equal shapes (`binary.rs`).
    Binary(BinaryOp),
    /// Comparisons on equal shapes, bool out (`binary.rs`).
    Compare(CompareOp),
    /// `select(pred, on_true, on_false)` on equal shapes (`binary.rs`).
    Select,
    /// Sum, max or min over sorted unique axes (`reduce.rs`).
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// Reduced axes, sorted, unique.
        axes: Axes,
    },
    /// Index of the max or min along one axis (`reduce.rs`).
    ArgReduce {
        /// argmax or argmin.
        op: ArgOp,
        /// The reduced axis.
        axis: usize,
        /// Integer dtype of the result.
        index_dtype: DType,
    },
    /// Cumulative sum along one axis (`reduce.rs`).
    Cumsum {
        /// The axis.
        axis: usize,
        /// Sum from the end.
        reverse: bool,
    },
    /// Broadcast: operand axis `i` becomes output axis `dims[i]` (`shape.rs`).
    BroadcastInDim {
        /// Output shape.
        shape: Shape,
        /// Strictly increasing output axes of the operand's axes.
        dims: Axes,
    },
    /// Same elements, new shape (`shape.rs`).
    Reshape {
        /// Output shape.
        shape: Shape,
    },
    /// Axis permutation: output axis `i` is operand axis `perm[i]` (`shape.rs`).
    Transpose {
        /// The permutation.
        perm: Axes,
    },
    /// Strided static slice (`shape.rs`).
    Slice {
        /// First index per axis.
        start: Axes,
        /// One past the last index per axis.
        limit: Axes,
        /// Step per axis (>= 1).
        strides: Axes,
    },
    /// Pad with a scalar operand: low/high (negative crops) and interior (`shape.rs`).
    Pad {
        /// Elements before each axis.
        low: Amounts,
        /// Elements after each axis.
        high: Amounts,
        /// Elements between neighbours.
        interior: Axes,
    },
    /// Join operands along an axis (`shape.rs`).
    Concatenate {
        /// The axis.
        axis: usize,
    },
    /// Reverse the given axes (`shape.rs`).
    Rev {
        /// The axes.
        axes: Axes,
    },
    /// `out[i] = i[dim]` (`shape.rs`).
    Iota {
        /// Output shape.
        shape: Shape,
        /// The counting axis.
        dim: usize,
        /// Output dtype.
        dtype: DType,
        /// Output device.
        device: Device,
    },
    /// A copy into fresh contiguous storage (`shape.rs`).
    Copy,
    /// Identity whose tangent is zero: blocks differentiation (`shape.rs`).
    StopGradient,
    /// Slice at runtime start indices (scalar operands), clamped to fit (`indexing.rs`).
    DynamicSlice {
        /// Slice sizes.
        sizes: Axes,
    },
    /// Replace a block at runtime start indices, clamped to fit (`indexing.rs`).
    DynamicUpdateSlice,
    /// `tf.gather`-style indexing of one axis with matched batch axes (`indexing.rs`).
    Gather {
        /// The indexed operand axis.
        axis: usize,
        /// Leading axes matched between operand and indices.
        batch_dims: usize,
    },
    /// The transpose of gather: add updates at indexed positions (`indexing.rs`).
    ScatterAdd {
        /// The indexed operand axis.
        axis: usize,
        /// Leading axes matched between operand and indices.
        batch_dims: usize,
    },
    /// Generalized matrix product (`linalg.rs`).
    DotGeneral(DotDims),
    /// The Threefry-2x32 cipher, elementwise on u32: 4 in, 2 out (`random.rs`).
    Threefry2x32,
}

impl Prim {
    /// The primitive's name as programs print it.
    pub fn name(&self) -> &'static str {
        match self {
            Prim::Unary(op) => op.name(),
            Prim::Convert(_) => "convert_element_type",
            Prim::Binary(op) => op.name(),
            Prim::Compare(op) => op.name(),
            Prim::Select => "select",
            Prim::Reduce { op, .. } => op.name(),
            Prim::ArgReduce { op, .. } => op.name(),
            Prim::Cumsum { .. } => "cumsum",
            Prim::BroadcastInDim { .. } => "broadcast_in_dim",
            Prim::Reshape { .. } => "reshape",
            Prim::Transpose { .. } => "transpose",
            Prim::Slice { .. } => "slice",
            Prim::Pad { .. } => "pad",
            Prim::Concatenate { .. } => "concatenate",
            Prim::Rev { .. } => "rev",
            Prim::Iota { .. } => "iota",
            Prim::Copy => "copy",
            Prim::StopGradient => "stop_gradient",
            Prim::DynamicSlice { .. } => "dynamic_slice",
            Prim::DynamicUpdateSlice => "dynamic_update_slice",
            Prim::Gather { .. } => "gather",
            Prim::ScatterAdd { .. } => "scatter_add",
            Prim::DotGeneral(_) => "dot_general",
            Prim::Threefry2x32 => "threefry2x32",
        }
    }

    /// True for the elementwise primitives (operands and results of one
    /// shape, each element on its own): batched by `batch_elementwise`.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Prim::Unary(_)
                | Prim::Convert(_)
                | Prim::Binary(_)
                | Prim::Compare(_)
                | Prim::Select
                | Prim::Copy
                | Prim::StopGradient
        )
    }

    /// True for the primitives that eagerly return a view of their operand
    /// (no copy): broadcast, reshape of compatible strides, transpose,
    /// slice, rev.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Prim::BroadcastInDim { .. }
                | Prim::Reshape { .. }
                | Prim::Transpose { .. }
                | Prim::Slice { .. }
                | Prim::Rev { .. }
        )
    }

    /// True when the transpose rule returns only tensors it computed, never
    /// an output cotangent or a view of one. Reverse mode copies a
    /// cotangent that may alias a tensor from outside the backward pass
    /// unless a rule of this kind came between. Exhaustive, so that a new
    /// primitive decides; `false` is always safe (one copy too many).
    pub fn transpose_is_fresh(&self) -> bool {
        match self {
            // neg, the one linear unary op, makes a new tensor
            Prim::Unary(_) => true,
            // add and sub pass their cotangent on; mul and div scale it
            Prim::Binary(op) => matches!(op, BinaryOp::Mul | BinaryOp::Div),
            Prim::Select | Prim::Cumsum { .. } | Prim::DotGeneral(_) => true,
            // zeros with the cotangent written in
            Prim::DynamicSlice { .. } | Prim::Gather { .. } => true,
            // a same-dtype convert, a sum over no axes, zero padding: may
            // return the cotangent itself; the rest return views or pass it on
            Prim::Convert(_)
            | Prim::Reduce { .. }
            | Prim::BroadcastInDim { .. }
            | Prim::Reshape { .. }
            | Prim::Transpose { .. }
            | Prim::Slice { .. }
            | Prim::Pad { .. }
            | Prim::Concatenate { .. }
            | Prim::Rev { .. }
            | Prim::Copy
            | Prim::DynamicUpdateSlice
            | Prim::ScatterAdd { .. } => false,
            // not linear: no transpose rule
            Prim::Compare(_) | Prim::ArgReduce { .. } | Prim::Iota { .. } | Prim::StopGradient | Prim::Threefry2x32 => {
                false
            }
        }
    }
}

fn axes_str(a: &[usize]) -> String {
    let v: Vec<String> = a.iter().map(|x| x.to_string()).collect();
    format!("({})", v.join(","))
}

impl fmt::Display for Prim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            Prim::Unary(UnaryOp::IntegerPow(n)) => write!(f, "[y={n}]"),
            Prim::Convert(d) => write!(f, "[new_dtype={d}]"),
            Prim::Reduce { axes, .. } => write!(f, "[axes={}]", axes_str(axes)),
            Prim::ArgReduce { axis, index_dtype, .. } => write!(f, "[axis={axis} index_dtype={index_dtype}]"),
            Prim::Cumsum { axis, reverse } => write!(f, "[axis={axis} reverse={reverse}]"),
            Prim::BroadcastInDim { shape, dims } => write!(f, "[shape={shape} dims={}]", axes_str(dims)),
            Prim::Reshape { shape } => write!(f, "[shape={shape}]"),
            Prim::Transpose { perm } => write!(f, "[perm={}]", axes_str(perm)),
            Prim::Slice { start, limit, strides } => {
                write!(f, "[start={} limit={} strides={}]", axes_str(start), axes_str(limit), axes_str(strides))
            }
            Prim::Pad { low, high, interior } => {
                write!(f, "[low={low:?} high={high:?} interior={}]", axes_str(interior))
            }
            Prim::Concatenate { axis } => write!(f, "[axis={axis}]"),
            Prim::Rev { axes } => write!(f, "[axes={}]", axes_str(axes)),
            Prim::Iota { shape, dim, dtype, .. } => write!(f, "[shape={shape} dim={dim} dtype={dtype}]"),
            Prim::DynamicSlice { sizes } => write!(f, "[sizes={}]", axes_str(sizes)),
            Prim::Gather { axis, batch_dims } | Prim::ScatterAdd { axis, batch_dims } => {
                write!(f, "[axis={axis} batch_dims={batch_dims}]")
            }
            Prim::DotGeneral(d) => write!(f, "[{d}]"),
            _ => Ok(()),
        }
    }
}

/// Checks the operands without computing the outputs' abstract values
/// (what `Eval` needs): a fast path for the elementwise primitives, the full
/// shape rule for the rest.
#[inline]
pub fn check(prim: &Prim, ins: &[AvalRef<'_>]) -> Result<()> {
    match prim {
        Prim::Unary(op) => unary::check_unary(*op, ins),
        Prim::Binary(op) => binary::check_binary(*op, ins),
        Prim::Compare(op) => binary::check_compare(*op, ins),
        Prim::Select => binary::check_select(ins),
        _ => shape_rule(prim, ins).map(|_| ()),
    }
}

/// Checks the operands and computes the outputs' abstract values (whose
/// sizes are checked for overflow: see `prims::check_size`).
pub fn shape_rule(prim: &Prim, ins: &[AvalRef<'_>]) -> Result<Avals> {
    let outs = family_shape_rule(prim, ins)?;
    for a in &outs {
        crate::prims::check_size(prim.name(), &a.shape, a.dtype)?;
    }
    Ok(outs)
}

fn family_shape_rule(prim: &Prim, ins: &[AvalRef<'_>]) -> Result<Avals> {
    match prim {
        Prim::Unary(op) => unary::shape_unary(*op, ins),
        Prim::Convert(d) => unary::shape_convert(*d, ins),
        Prim::Binary(op) => binary::shape_binary(*op, ins),
        Prim::Compare(op) => binary::shape_compare(*op, ins),
        Prim::Select => binary::shape_select(ins),
        Prim::Reduce { op, axes } => reduce::shape_reduce(*op, axes, ins),
        Prim::ArgReduce { op, axis, index_dtype } => reduce::shape_arg_reduce(*op, *axis, *index_dtype, ins),
        Prim::Cumsum { axis, .. } => reduce::shape_cumsum(*axis, ins),
        Prim::BroadcastInDim { shape, dims } => shape::shape_broadcast_in_dim(shape, dims, ins),
        Prim::Reshape { shape } => shape::shape_reshape(shape, ins),
        Prim::Transpose { perm } => shape::shape_transpose(perm, ins),
        Prim::Slice { start, limit, strides } => shape::shape_slice(start, limit, strides, ins),
        Prim::Pad { low, high, interior } => shape::shape_pad(low, high, interior, ins),
        Prim::Concatenate { axis } => shape::shape_concatenate(*axis, ins),
        Prim::Rev { axes } => shape::shape_rev(axes, ins),
        Prim::Iota { shape, dim, dtype, device } => shape::shape_iota(shape, *dim, *dtype, *device, ins),
        Prim::Copy | Prim::StopGradient => shape::shape_copy(ins),
        Prim::DynamicSlice { sizes } => indexing::shape_dynamic_slice(sizes, ins),
        Prim::DynamicUpdateSlice => indexing::shape_dynamic_update_slice(ins),
        Prim::Gather { axis, batch_dims } => indexing::shape_gather(*axis, *batch_dims, ins),
        Prim::ScatterAdd { axis, batch_dims } => indexing::shape_scatter_add(*axis, *batch_dims, ins),
        Prim::DotGeneral(d) => linalg::shape_dot_general(d, ins),
        Prim::Threefry2x32 => random::shape_threefry(ins),
    }
}

/// Runs the kernels (operands already checked by [`shape_rule`]).
pub fn lower(prim: &Prim, ins: &[&Array]) -> Result<Outs> {
    let one = |a: Result<Array>| a.map(|a| smallvec::smallvec![Tensor::from_array(a)]);
    match prim {
        Prim::Unary(op) => one(unary::lower_unary(*op, ins[0])),
        Prim::Convert(d) => one(unary::lower_convert(*d, ins[0])),
        Prim::Binary(op) => one(binary::lower_binary(*op, ins[0], ins[1])),
        Prim::Compare(op) => one(binary::lower_compare(*op, ins[0], ins[1])),
        Prim::Select => one(binary::lower_select(ins[0], ins[1], ins[2])),
        Prim::Reduce { op, axes } => one(reduce::lower_reduce(*op, axes, ins[0])),
        Prim::ArgReduce { op, axis, index_dtype } => one(reduce::lower_arg_reduce(*op, *axis, *index_dtype, ins[0])),
        Prim::Cumsum { axis, reverse } => one(reduce::lower_cumsum(*axis, *reverse, ins[0])),
        Prim::BroadcastInDim { shape, dims } => one(shape::lower_broadcast_in_dim(shape, dims, ins[0])),
        Prim::Reshape { shape } => one(shape::lower_reshape(shape, ins[0])),
        Prim::Transpose { perm } => one(shape::lower_transpose(perm, ins[0])),
        Prim::Slice { start, limit, strides } => one(shape::lower_slice(start, limit, strides, ins[0])),
        Prim::Pad { low, high, interior } => one(shape::lower_pad(low, high, interior, ins[0], ins[1])),
        Prim::Concatenate { axis } => one(shape::lower_concatenate(*axis, ins)),
        Prim::Rev { axes } => one(shape::lower_rev(axes, ins[0])),
        Prim::Iota { shape, dim, dtype, device } => one(shape::lower_iota(shape, *dim, *dtype, *device)),
        Prim::Copy => one(ins[0].contiguous_copy()),
        Prim::StopGradient => one(Ok(ins[0].clone())),
        Prim::DynamicSlice { sizes } => one(indexing::lower_dynamic_slice(sizes, ins)),
        Prim::DynamicUpdateSlice => one(indexing::lower_dynamic_update_slice(ins)),
        Prim::Gather { axis, batch_dims } => one(indexing::lower_gather(*axis, *batch_dims, ins[0], ins[1])),
        Prim::ScatterAdd { axis, batch_dims } => {
            one(indexing::lower_scatter_add(*axis, *batch_dims, ins[0], ins[1], ins[2]))
        }
        Prim::DotGeneral(d) => one(linalg::lower_dot_general(d, ins[0], ins[1])),
        Prim::Threefry2x32 => random::lower_threefry(ins).map(|v| v.into_iter().map(Tensor::from_array).collect()),
    }
}

/// Forward-mode rule: outputs and their tangents, given the primals and
/// their tangents (`None`: symbolic zero). Runs with the parent current.
pub fn jvp_rule(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    match prim {
        Prim::Unary(op) => unary::jvp_unary(*op, primals, tangents),
        Prim::Convert(d) => unary::jvp_convert(*d, primals, tangents),
        Prim::Binary(op) => binary::jvp_binary(*op, primals, tangents),
        Prim::Compare(_) => no_tangent(prim, primals),
        Prim::Select => binary::jvp_select(primals, tangents),
        Prim::Reduce { op, axes } => reduce::jvp_reduce(*op, axes, primals, tangents),
        Prim::ArgReduce { .. } => no_tangent(prim, primals),
        Prim::Cumsum { .. } => linear_jvp(prim, primals, tangents),
        Prim::BroadcastInDim { .. } | Prim::Reshape { .. } | Prim::Transpose { .. } | Prim::Slice { .. } => {
            linear_jvp(prim, primals, tangents)
        }
        Prim::Pad { .. } => shape::jvp_pad(prim, primals, tangents),
        Prim::Concatenate { .. } => shape::jvp_concatenate(prim, primals, tangents),
        Prim::Rev { .. } | Prim::Copy => linear_jvp(prim, primals, tangents),
        Prim::Iota { .. } | Prim::StopGradient => no_tangent(prim, primals),
        Prim::DynamicSlice { .. } => indexing::jvp_dynamic_slice(prim, primals, tangents),
        Prim::DynamicUpdateSlice => indexing::jvp_dynamic_update_slice(primals, tangents),
        Prim::Gather { .. } => indexing::jvp_gather(prim, primals, tangents),
        Prim::ScatterAdd { .. } => indexing::jvp_scatter_add(prim, primals, tangents),
        Prim::DotGeneral(d) => linalg::jvp_dot_general(d, primals, tangents),
        Prim::Threefry2x32 => no_tangent(prim, primals),
    }
}

/// The input to a transposed primitive: a linear (unknown) operand, known
/// only by its abstract value, or a constant. Borrowed from the program
/// being transposed (nothing is cloned per equation).
#[derive(Clone, Copy, Debug)]
pub enum LinearArg<'a> {
    /// The operand the primitive is linear in.
    Linear(&'a Aval),
    /// A known operand.
    Const(&'a Tensor),
}

impl LinearArg<'_> {
    /// True for a linear operand.
    pub fn is_linear(&self) -> bool {
        matches!(self, LinearArg::Linear(_))
    }
    /// The constant, if this is one.
    pub fn constant(&self) -> Option<&Tensor> {
        match self {
            LinearArg::Const(t) => Some(t),
            LinearArg::Linear(_) => None,
        }
    }
    /// Shape, dtype and device.
    pub fn aval(&self) -> Aval {
        match self {
            LinearArg::Linear(a) => (*a).clone(),
            LinearArg::Const(t) => t.aval(),
        }
    }
}

/// Transpose rule: cotangents of the linear inputs, given the output
/// cotangents (`None`: zero). Non-linear primitives return an error.
pub fn transpose_rule(prim: &Prim, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    match prim {
        Prim::Unary(op) => unary::transpose_unary(*op, cts, args),
        Prim::Convert(_) => unary::transpose_convert(cts, args),
        Prim::Binary(op) => binary::transpose_binary(*op, cts, args),
        Prim::Compare(_) => not_linear(prim),
        Prim::Select => binary::transpose_select(cts, args),
        Prim::Reduce { op, axes } => reduce::transpose_reduce(*op, axes, cts, args),
        Prim::ArgReduce { .. } => not_linear(prim),
        Prim::Cumsum { axis, reverse } => reduce::transpose_cumsum(*axis, *reverse, cts, args),
        Prim::BroadcastInDim { shape: _, dims } => shape::transpose_broadcast_in_dim(dims, cts, args),
        Prim::Reshape { .. } => shape::transpose_reshape(cts, args),
        Prim::Transpose { perm } => shape::transpose_transpose(perm, cts, args),
        Prim::Slice { start, limit, strides } => shape::transpose_slice(start, limit, strides, cts, args),
        Prim::Pad { low, high, interior } => shape::transpose_pad(low, high, interior, cts, args),
        Prim::Concatenate { axis } => shape::transpose_concatenate(*axis, cts, args),
        Prim::Rev { axes } => shape::transpose_rev(axes, cts, args),
        Prim::Iota { .. } => not_linear(prim),
        Prim::Copy => shape::transpose_copy(cts, args),
        Prim::StopGradient => not_linear(prim),
        Prim::DynamicSlice { .. } => indexing::transpose_dynamic_slice(cts, args),
        Prim::DynamicUpdateSlice => indexing::transpose_dynamic_update_slice(cts, args),
        Prim::Gather { axis, batch_dims } => indexing::transpose_gather(*axis, *batch_dims, cts, args),
        Prim::ScatterAdd { axis, batch_dims } => indexing::transpose_scatter_add(*axis, *batch_dims, cts, args),
        Prim::DotGeneral(d) => linalg::transpose_dot_general(d, cts, args),
        Prim::Threefry2x32 => not_linear(prim),
    }
}

/// Batch rule: outputs and their batch dims, given the (physical) operands
/// and theirs. Never loops over examples.
pub fn batch_rule(prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    use crate::prims::batching::batch_elementwise;
    match prim {
        // The primitives of `Prim::is_elementwise`.
        Prim::Unary(_)
        | Prim::Convert(_)
        | Prim::Binary(_)
        | Prim::Compare(_)
        | Prim::Select
        | Prim::Copy
        | Prim::StopGradient => batch_elementwise(prim, ins, bdims),
        Prim::Reduce { op, axes } => reduce::batch_reduce(*op, axes, ins, bdims),
        Prim::ArgReduce { op, axis, index_dtype } => reduce::batch_arg_reduce(*op, *axis, *index_dtype, ins, bdims),
        Prim::Cumsum { axis, reverse } => reduce::batch_cumsum(*axis, *reverse, ins, bdims),
        Prim::BroadcastInDim { shape, dims } => shape::batch_broadcast_in_dim(shape, dims, ins, bdims),
        Prim::Reshape { shape } => shape::batch_reshape(shape, ins, bdims),
        Prim::Transpose { perm } => shape::batch_transpose(perm, ins, bdims),
        Prim::Slice { start, limit, strides } => shape::batch_slice(start, limit, strides, ins, bdims),
        Prim::Pad { low, high, interior } => shape::batch_pad(low, high, interior, ins, bdims),
        Prim::Concatenate { axis } => shape::batch_concatenate(*axis, ins, bdims),
        Prim::Rev { axes } => shape::batch_rev(axes, ins, bdims),
        Prim::Iota { .. } => Err(crate::Error::invalid("iota", "iota has no operands, so it is never batched")),
        Prim::DynamicSlice { sizes } => indexing::batch_dynamic_slice(sizes, ins, bdims),
        Prim::DynamicUpdateSlice => indexing::batch_dynamic_update_slice(ins, bdims),
        Prim::Gather { axis, batch_dims } => indexing::batch_gather(*axis, *batch_dims, ins, bdims),
        Prim::ScatterAdd { axis, batch_dims } => indexing::batch_scatter_add(*axis, *batch_dims, ins, bdims),
        Prim::DotGeneral(d) => linalg::batch_dot_general(d, ins, bdims),
        Prim::Threefry2x32 => batch_elementwise(prim, ins, bdims),
    }
}

/// JVP of a primitive whose outputs have no tangent (integer or bool out).
fn no_tangent(prim: &Prim, primals: &[Tensor]) -> Result<(Outs, Tangents)> {
    let outs = crate::interp::bind(prim, primals)?;
    let n = outs.len();
    Ok((outs, smallvec::smallvec![None; n]))
}

/// JVP of a primitive linear in its single operand: apply it to the tangent.
fn linear_jvp(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let outs = crate::interp::bind(prim, primals)?;
    let t = match &tangents[0] {
        Some(t) => Some(crate::interp::bind1(prim, std::slice::from_ref(t))?),
        None => None,
    };
    Ok((outs, smallvec::smallvec![t]))
}

/// The transpose rule of a primitive that is not linear in any operand.
fn not_linear(prim: &Prim) -> Result<Cotangents> {
    Err(crate::Error::transform(
        prim.name(),
        format!("{} is not linear in any operand, so it cannot be transposed", prim.name()),
    ))
}
