//! The primitive families. Each file defines one family: its enum of
//! primitives (variants, names, parameters), and for each of them the shape
//! and dtype rule, the lowering (CPU kernels here, CUDA through
//! `crate::backend`, with the CUDA C of elementwise math written beside the
//! CPU expression), the JVP rule, the transpose rule, the batch rule, the
//! properties the transforms read ([`Props`]) and the registry samples the
//! generic tests draw ([`sample`]). A family implements [`Family`]; a
//! missing rule does not compile. `crate::prim` registers the families
//! (one line each) and derives `Prim` and its dispatchers from that list.

// The op-table macros come first: `unary.rs` and `binary.rs` use them.
#[macro_use]
mod unary_table;
pub mod batching;
pub mod binary;
pub mod collective;
pub mod compare;
pub mod control;
pub mod conv;
pub mod cuda_c;
pub mod decomp;
pub mod elementwise;
pub mod factor;
pub mod indexing;
pub mod jit;
pub mod linalg;
pub mod padding;
pub mod random;
pub mod reduce;
pub mod sample;
pub mod shape;
pub mod unary;
pub mod window;

use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::{AxisName, Outs};
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::AvalRef;
use crate::tensor::Tensor;
use batching::BatchAxis;
use jit::{Tile, TileMut};
use smallvec::SmallVec;
use std::fmt;
use xform_kernels::cuda_source::{Kernel, MapOp};
use xform_kernels::Layout;
use xform_kernels::{DType, Shape};

/// How the eager result of a view primitive shares its operand's storage,
/// and so how a write through the view reaches the operand (see
/// `crate::mutation`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ViewKind {
    /// Each element of the view is one element of the operand and each
    /// operand element appears at most once (reshape, transpose, rev): a
    /// write is the transpose rule applied to the written values.
    Reindex,
    /// A subset of the operand's elements (slice): a write replaces the
    /// selected elements and keeps the others.
    Select,
    /// Several view elements share one operand element (broadcast): a
    /// write through it is refused.
    Broadcast,
    /// The same elements without their derivative (stop_gradient, detach):
    /// a write changes the values, not the derivative of the operand.
    Detach,
}

/// What the transpose rule makes of a cotangent of ones: linearize seeds
/// `grad` of a scalar with ones and skips transposing what it knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OnesTranspose {
    /// Nothing known: run the transpose rule.
    Unknown,
    /// Each linear operand's cotangent is ones of its shape (the rule only
    /// moves or copies cotangent elements, one place each: add, sum,
    /// reshape, transpose).
    Ones,
    /// The linear operand's cotangent is the constant operand, where that
    /// is shaped and typed like the result (`1 * c` for mul).
    Constant,
}

/// The dtype classes an elementwise op has kernels for, derived from its
/// op-table entry: it accepts exactly these.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DtypeClasses {
    /// f64, f32, f16, bf16.
    pub float: bool,
    /// i32, i64, u32.
    pub int: bool,
    /// bool.
    pub bool: bool,
}

impl DtypeClasses {
    /// True if `d` is in one of the classes.
    pub fn accepts(self, d: DType) -> bool {
        if d.is_float() {
            self.float
        } else if d == DType::Bool {
            self.bool
        } else {
            self.int
        }
    }

    /// What an operand must be, for the error on another dtype.
    pub fn needs(self) -> &'static str {
        match (self.float, self.int, self.bool) {
            (true, false, false) => "floating-point",
            (true, true, _) => "numeric",
            (false, _, _) => "bool or integer",
            (true, false, true) => "floating-point or bool",
        }
    }
}

/// Static properties of a primitive, declared beside its rules; the
/// transforms read these instead of naming primitives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Props {
    /// Operands and results of one shape, each element computed on its
    /// own: vmap applies it to batched operands directly when their batch
    /// dims agree, without the batch rule.
    pub elementwise: bool,
    /// The eager result shares the operand's storage (see [`ViewKind`]).
    pub view: Option<ViewKind>,
    /// The transpose rule returns only tensors it computed, never an output
    /// cotangent or a view of one. Reverse mode copies a cotangent that may
    /// alias a tensor from outside the backward pass unless a rule of this
    /// kind came between. `false` is always safe (one copy too many).
    pub transpose_is_fresh: bool,
    /// What transposing a cotangent of ones gives.
    pub ones: OnesTranspose,
    /// It may refer to named axes ([`Family::axis_names`]): a collective,
    /// or control flow whose bodies may hold one.
    pub may_name_axes: bool,
}

impl Props {
    /// No property: not elementwise, no view, a transpose that may pass
    /// its cotangent on, nothing known of ones.
    pub const NONE: Props = Props {
        elementwise: false,
        view: None,
        transpose_is_fresh: false,
        ones: OnesTranspose::Unknown,
        may_name_axes: false,
    };
    /// An elementwise primitive (otherwise [`Props::NONE`]).
    pub const ELEMENTWISE: Props = Props { elementwise: true, ..Props::NONE };
    /// With [`Props::transpose_is_fresh`] set.
    pub const fn fresh(self) -> Props {
        Props { transpose_is_fresh: true, ..self }
    }
    /// With a view kind.
    pub const fn view(self, kind: ViewKind) -> Props {
        Props { view: Some(kind), ..self }
    }
    /// With what transposing ones gives.
    pub const fn ones(self, ones: OnesTranspose) -> Props {
        Props { ones, ..self }
    }
    /// With [`Props::may_name_axes`] set.
    pub const fn naming_axes(self) -> Props {
        Props { may_name_axes: true, ..self }
    }
}

/// A family of primitives: everything a primitive needs, in one place.
/// Each method is an exhaustive match over the family's enum, so a new
/// variant without a rule does not compile.
pub trait Family: Clone + fmt::Debug + PartialEq + Into<Prim> + 'static {
    /// The variants without their parameters.
    type Kind: Copy + fmt::Debug + PartialEq + 'static;
    /// Every kind, derived from the enum's definition (by
    /// [`family_enum!`](crate::family_enum) or the op table), never listed
    /// by hand: the coverage test checks each is sampled.
    const KINDS: &'static [Self::Kind];
    /// This primitive's kind.
    fn kind(&self) -> Self::Kind;
    /// The name programs print.
    fn name(&self) -> &'static str;
    /// Properties the transforms read.
    fn props(&self) -> Props;
    /// The parameters as programs print them (`[axes=(0,1)]`), or nothing.
    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    /// Checks the operands without computing the results' abstract values
    /// (what eager evaluation needs); by default the whole shape rule and
    /// the results' sizes ([`check_size`]). An override must refuse what
    /// that refuses (the elementwise families, whose results are shaped
    /// like an operand, skip the size check).
    #[inline]
    fn check(&self, ins: &[crate::tensor::AvalRef<'_>]) -> Result<()> {
        check_sizes(self.name(), &self.shape_rule(ins)?)
    }
    /// Checks the operands and computes the results' abstract values.
    fn shape_rule(&self, ins: &[crate::tensor::AvalRef<'_>]) -> Result<Avals>;
    /// Runs the CPU kernels (operands already checked, every one on the
    /// CPU: `backend::lower` sends other devices to `lower_device`).
    fn lower(&self, ins: &[&Array]) -> Result<Outs>;
    /// Runs on a device other than the CPU (operands already checked, all
    /// on that device), stating the work in `backend`'s kernels: the
    /// family's one way to reach a device, so that it names none. A
    /// lowering that only composes other primitives or changes layouts is
    /// the same on every device (it calls `lower`).
    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs>;
    /// Forward mode: results and their tangents (`None`: symbolic zero).
    fn jvp(&self, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)>;
    /// Cotangents of the linear operands, given the results' cotangents;
    /// an error naming the primitive where it is not linear.
    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents>;
    /// Batch rule: results and their batch dims, given the axis batched
    /// over (its size, and its name where `vmap` was given one: a
    /// collective over that name is a reduction or rearrangement along it,
    /// and is the one kind of primitive whose rule is called with no
    /// operand batched). Never loops over examples.
    fn batch(&self, prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)>;
    /// The axis names it refers to (a collective's; a control primitive's
    /// bodies'), which `bind` routes to the transform binding them (NOTE:
    /// [named axes]); none by default. Asked only where
    /// [`Props::may_name_axes`] is set.
    fn axis_names(&self) -> SmallVec<[AxisName; 2]> {
        SmallVec::new()
    }
    /// The cotangent of linear operand `i` as a sum of outer products (see
    /// NOTE: [factored cotangents]), where it has that form; `None` (the default, the
    /// one optional rule) where the transpose rule must form it.
    fn factor(&self, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<factor::Factor>> {
        let _ = (cts, args, i);
        Ok(None)
    }
    /// For a view primitive ([`Props::view`]): the layout of its result
    /// over an operand laid out as `layout`, or `None` where it must copy
    /// (a reshape the strides cannot express). `None` for the rest.
    fn view_layout(&self, layout: &Layout) -> Option<Layout>;
    /// The registry entries the generic rule tests draw from.
    fn samples() -> Vec<sample::Sample>;
    /// The CUDA kernels of this family's elementwise math on dtype `d`
    /// (structural kernels are the kernels crate's own catalog).
    fn cuda_kernels(d: xform_kernels::DType) -> Vec<Kernel>;

    // ---- what jit's compiler and runtime need (see `jit`) ----------------

    /// The facts jit's plan reads: CUDA graph capture, helper-thread
    /// sinks, thread-bound bodies, writing into a destination.
    fn jit_props(&self) -> jit::JitProps;
    /// jit's batch split (NOTE: [batch split] in the jit): given the axis
    /// along which each operand holds its rows of the batch, the axis
    /// along which each operand is cut and the results' row axis, or the
    /// operands (bits) whose rows cannot pass.
    fn split_rows(&self, q: &jit::RowQuery<'_>) -> std::result::Result<jit::RowRule, jit::Blame>;
    /// This primitive computing `len` rows along its result's axis `axis`
    /// (its parameters that hold that size set to `len`). With `cut`, its
    /// operands are cut as [`Family::split_rows`] said (`None`: it cannot
    /// run on a half); without, they are whole, and `None` unless its
    /// result does not vary along `axis` (a broadcast or an iota along
    /// another axis, made at the half's size rather than sliced). By
    /// default the same primitive on cut operands: right for parameters
    /// that hold no size, and safe for the rest, since the split checks
    /// each half's equation against the shape rule and is not taken where
    /// they disagree.
    fn at_rows(&self, axis: usize, len: usize, cut: bool) -> Option<Prim> {
        let _ = (axis, len);
        cut.then(|| self.clone().into())
    }
    /// How it joins a row group of jit's row fusion, besides as an
    /// elementwise map.
    fn row_fusion(&self) -> jit::RowFusion<'_>;
    /// For an elementwise primitive: applies it to contiguous tiles of
    /// equal length on the CPU, with the very element function its eager
    /// CPU lowering maps (so each result is bit-identical to eager), and
    /// returns true, having written every element of `out`; false,
    /// writing nothing, where it or these dtypes have no tile form (jit
    /// then does not fuse it). Called with empty tiles it only answers
    /// whether it would apply.
    fn cpu_tile(&self, ins: &[Tile<'_>], out: TileMut<'_>) -> bool;
    /// For a reduction over the last axis: each row of `row` elements of
    /// the tile `x` reduced into one element of `out`, with the bits of
    /// the eager lowering on the array the tile holds rows of (contiguous,
    /// or `strided`); `false` (nothing written) for another primitive or
    /// dtype. An empty `x` asks whether it applies.
    fn cpu_row_reduce(&self, x: &Tile<'_>, row: usize, strided: bool, out: TileMut<'_>) -> bool;
    /// For an elementwise primitive: the CUDA map operation its eager
    /// lowering runs on operands of dtypes `ins` (the same expression,
    /// widening and rounding), for a fused CUDA kernel (NOTE: [fused cuda
    /// kernels] in xform-kernels); `None` where it has none.
    fn cuda_map_op(&self, ins: &[DType]) -> Option<MapOp>;
    /// Runs the CPU lowering with its one result written into `out` (the
    /// result's dtype, contiguous, every element written) where it can,
    /// giving `None`; otherwise the result, to copy. Where
    /// [`jit::JitProps::lower_into`] is set; by default, the lowering.
    fn lower_into(&self, ins: &[&Array], out: TileMut<'_>) -> Result<Option<Array>> {
        let _ = out;
        let outs = crate::interp::lower_checked(&self.clone().into(), ins)?;
        outs[0].array().map(Some).ok_or_else(|| Error::invalid(self.name(), "a lowering returned a tracer"))
    }
    /// The work of one application, as jit's batch split weighs it:
    /// elements written (`out_elems`), times the multiply-adds per element
    /// where that is more than one (a product's contracted size).
    fn work(&self, ins: &[Shape], out_elems: usize) -> usize {
        let _ = ins;
        out_elems
    }
}

/// Declares a fieldless op enum with each variant's printed name, and
/// derives `name()` and `ALL` (every op, in declaration order) from it.
/// With `api = path` and a `fn name` per variant, it also derives one
/// function per op in a module `api` (re-exported by `crate::lax`) that
/// applies `path(op, a, b)`.
#[macro_export]
macro_rules! op_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident, api = $api:path {
            $( $(#[$vmeta:meta])* $variant:ident => $printed:literal fn $func:ident ),* $(,)?
        }
    ) => {
        $crate::op_enum! {
            $(#[$meta])*
            pub enum $name {
                $( $(#[$vmeta])* $variant => $printed ),*
            }
        }

        /// One function per op, re-exported by `crate::lax`.
        pub mod api {
            use super::*;
            $(
                $(#[$vmeta])*
                ///
                /// Operands of equal shapes and dtypes (`Tensor`'s methods
                /// broadcast and promote).
                pub fn $func(a: &Tensor, b: &Tensor) -> $crate::Result<Tensor> {
                    $api($name::$variant, a, b)
                }
            )*
        }
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $printed:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),*
        }

        impl $name {
            /// Every op, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The name programs print.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $printed ),*
                }
            }
        }
    };
}

/// Declares a family's enum and derives its kinds: a fieldless enum
/// `$kind` with one variant per variant of `$name`, `$kind::ALL`, and
/// `$name::kind()`. A new variant is thereby a new kind, which the
/// registry coverage test requires to be sampled.
#[macro_export]
macro_rules! family_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident, kinds $kind:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident $( { $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)? } )? $( ( $( $tty:ty ),* ) )?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $(
                $(#[$vmeta])*
                $variant $( { $( $(#[$fmeta])* $field : $fty ),* } )? $( ( $( $tty ),* ) )?
            ),*
        }

        #[doc = concat!("The variants of [`", stringify!($name), "`] without their parameters.")]
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $kind {
            $(
                #[doc = concat!("[`", stringify!($name), "::", stringify!($variant), "`].")]
                $variant
            ),*
        }

        impl $kind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [$kind] = &[$($kind::$variant),*];
        }

        impl $name {
            /// The variant without its parameters.
            pub fn kind(&self) -> $kind {
                match self {
                    $( $name::$variant { .. } => $kind::$variant ),*
                }
            }
        }
    };
}

/// Checks the operand count.
#[inline]
pub(crate) fn check_arity(op: &str, ins: &[AvalRef<'_>], n: usize) -> Result<()> {
    if ins.len() != n {
        return Err(Error::invalid(op, format!("expects {n} operand(s), got {}", ins.len())));
    }
    Ok(())
}

/// Checks that all operands have one shape.
#[inline]
pub(crate) fn check_same_shapes(op: &str, ins: &[AvalRef<'_>]) -> Result<()> {
    if let Some(first) = ins.first() {
        if ins[1..].iter().any(|a| a.shape != first.shape) {
            let shapes: Vec<&xform_kernels::Shape> = ins.iter().map(|a| a.shape).collect();
            return Err(Error::shape(op, "operands must have equal shapes", &shapes));
        }
    }
    Ok(())
}

/// Checks that all operands have one dtype.
#[inline]
pub(crate) fn check_same_dtypes(op: &str, ins: &[AvalRef<'_>]) -> Result<()> {
    if let Some(first) = ins.first() {
        if ins[1..].iter().any(|a| a.dtype != first.dtype) {
            let d: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
            return Err(Error::dtype(op, "operands must have equal dtypes", &d));
        }
    }
    Ok(())
}

/// Checks that an operand is an integer (index) type.
pub(crate) fn check_int(op: &str, what: &str, a: &AvalRef<'_>) -> Result<()> {
    if !a.dtype.is_int() {
        return Err(Error::dtype(op, format!("{what} must have an integer dtype"), &[a.dtype]));
    }
    Ok(())
}

/// Checks that `axis < rank`.
pub(crate) fn check_axis(op: &str, axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return Err(Error::axis(op, axis as isize, rank));
    }
    Ok(())
}

/// Checks that `axes` are in range and unique.
pub(crate) fn check_axes(op: &str, axes: &[usize], rank: usize) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        check_axis(op, a, rank)?;
        if axes[..i].contains(&a) {
            return Err(Error::invalid(op, format!("axis {a} is repeated in {axes:?}")));
        }
    }
    Ok(())
}

/// Checks that an array of `shape` and `dtype` can exist: its element
/// count, bytes and strides within `isize::MAX` (see
/// [`Shape::checked_numel`]). Every shape rule's outputs and every
/// constructor pass here, so no kernel sees an overflowed count.
pub fn check_size(op: &str, shape: &Shape, dtype: DType) -> Result<usize> {
    shape.checked_numel(dtype.size_bytes()).ok_or_else(|| {
        Error::overflow(
            op,
            format!(
                "a {dtype} array of shape {shape} is too large: its bytes or strides would pass isize::MAX ({})",
                isize::MAX
            ),
        )
    })
}

/// Checks that every result of a shape rule can exist (see [`check_size`]).
pub(crate) fn check_sizes(op: &str, outs: &Avals) -> Result<()> {
    for a in outs {
        check_size(op, &a.shape, a.dtype)?;
    }
    Ok(())
}

/// JVP of a primitive whose outputs have no tangent (integer or bool out,
/// or no derivative by definition).
pub(crate) fn no_tangent(prim: &Prim, primals: &[Tensor]) -> Result<(Outs, Tangents)> {
    let outs = crate::interp::bind(prim, primals)?;
    let n = outs.len();
    Ok((outs, smallvec::smallvec![None; n]))
}

/// JVP of a primitive linear in its single operand: apply it to the tangent.
pub(crate) fn linear_jvp(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let outs = crate::interp::bind(prim, primals)?;
    let t = match &tangents[0] {
        Some(t) => Some(crate::interp::bind1(prim, std::slice::from_ref(t))?),
        None => None,
    };
    Ok((outs, smallvec::smallvec![t]))
}

/// The transpose rule of a primitive that is not linear in any operand.
pub(crate) fn not_linear(name: &str) -> Result<Cotangents> {
    Err(Error::transform(name, format!("{name} is not linear in any operand, so it cannot be transposed")))
}

/// The batch rule of a primitive without operands.
pub(crate) fn never_batched(name: &str) -> Result<(Outs, BDims)> {
    Err(Error::invalid(name, format!("{name} has no operands, so it is never batched")))
}

/// One result as `Outs`.
#[inline]
pub(crate) fn one(a: Result<Array>) -> Result<Outs> {
    a.map(|a| smallvec::smallvec![Tensor::from_array(a)])
}

/// Writes `[name=value ...]` for a primitive's parameters.
pub(crate) fn axes_str(a: &[usize]) -> String {
    let v: Vec<String> = a.iter().map(|x| x.to_string()).collect();
    format!("({})", v.join(","))
}
