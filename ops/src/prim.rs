//! The closed set of primitives: the families of `crate::prims`, each
//! registered by one line of `families!`, which derives the [`Prim`] enum
//! and every dispatcher (an exhaustive `match` over the families, each
//! family's rules an exhaustive `match` over its own enum). A primitive
//! without a shape rule, lowering, JVP rule, transpose rule (an explicit
//! "not linear" error where it has none), batch rule or property does not
//! compile.

use crate::array::Array;
use crate::error::Result;
use crate::interp::{AxisName, Outs};
use crate::prims::batching::BatchAxis;
use crate::prims::jit::{Blame, JitProps, RowFusion, RowQuery, RowRule};
use crate::prims::jit::{Tile, TileMut};
use crate::prims::sample::Sample;
use crate::prims::{Family, OnesTranspose, Props, ViewKind};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::SmallVec;
use std::fmt;
use xform_kernels::cuda_source::{Kernel, MapOp};
use xform_kernels::{DType, Layout, Shape};

pub use crate::prims::binary::BinaryOp;
pub use crate::prims::collective::{CollectiveKind, CollectiveOp};
pub use crate::prims::compare::CompareOp;
pub use crate::prims::control::{Body, ControlKind, ControlOp, RematPolicy};
pub use crate::prims::conv::{ConvDims, ConvKind, ConvOp, ConvOptions, ConvParams};
pub use crate::prims::decomp::{DecompKind, DecompOp, TriangularSpec};
pub use crate::prims::elementwise::{ElementwiseKind, ElementwiseOp};
pub use crate::prims::indexing::{IndexKind, IndexOp};
pub use crate::prims::linalg::{DotDims, LinalgKind, LinalgOp};
pub use crate::prims::random::{RandomKind, RandomOp};
pub use crate::prims::reduce::{ArgOp, ReduceOp, Reduction, ReductionKind};
pub use crate::prims::shape::{ShapeKind, ShapeOp};
pub use crate::prims::unary::{UnaryKind, UnaryOp};
pub use crate::prims::window::{SelectOp, WindowKind, WindowOp, WindowParams};

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

/// Registers the families: derives [`Prim`] (one variant per family),
/// [`PrimKind`], and the dispatchers. Adding a family is one line here.
macro_rules! families {
    ($( $(#[$doc:meta])* $variant:ident($family:ty), )*) => {
        /// A primitive with its static parameters: one variant per family.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Prim {
            $( $(#[$doc])* $variant($family), )*
        }

        /// A primitive without its parameters: its family and kind.
        #[derive(Copy, Clone, Debug, PartialEq)]
        pub enum PrimKind {
            $( $(#[$doc])* $variant(<$family as Family>::Kind), )*
        }

        impl Prim {
            /// Every kind of every family, derived from the families' enums.
            pub fn all_kinds() -> Vec<PrimKind> {
                let mut v = Vec::new();
                $( v.extend(<$family as Family>::KINDS.iter().map(|k| PrimKind::$variant(*k))); )*
                v
            }

            /// This primitive's kind.
            pub fn kind(&self) -> PrimKind {
                match self { $( Prim::$variant(p) => PrimKind::$variant(p.kind()), )* }
            }

            /// The primitive's name as programs print it.
            pub fn name(&self) -> &'static str {
                match self { $( Prim::$variant(p) => p.name(), )* }
            }

            /// The properties the transforms read.
            #[inline]
            pub fn props(&self) -> Props {
                match self { $( Prim::$variant(p) => p.props(), )* }
            }

            /// The axis names it refers to (see [`Family::axis_names`]):
            /// none unless [`Props::may_name_axes`].
            pub fn axis_names(&self) -> SmallVec<[AxisName; 2]> {
                if !self.props().may_name_axes {
                    return SmallVec::new();
                }
                match self { $( Prim::$variant(p) => p.axis_names(), )* }
            }

            /// For a view primitive, the layout of its result over an
            /// operand laid out as `layout` (`None`: not a view, or a copy).
            pub fn view_layout(&self, layout: &Layout) -> Option<Layout> {
                match self { $( Prim::$variant(p) => p.view_layout(layout), )* }
            }

            /// Every registry sample of every family.
            pub fn samples() -> Vec<Sample> {
                let mut v = Vec::new();
                $( v.extend(<$family as Family>::samples()); )*
                v
            }

            /// Every CUDA kernel the lowerings can launch: the kernels
            /// crate's structural ones plus each family's for each dtype
            /// (generated CUDA C, for the tests that compile them all with
            /// NVRTC; generating it needs no GPU and no feature).
            pub fn cuda_catalog() -> Vec<Kernel> {
                let mut v = xform_kernels::cuda_source::builtin_catalog();
                for d in DType::ALL {
                    $( v.extend(<$family as Family>::cuda_kernels(d)); )*
                }
                v
            }

            /// What jit's plan reads (see [`JitProps`]).
            #[inline]
            pub fn jit_props(&self) -> JitProps {
                match self { $( Prim::$variant(p) => p.jit_props(), )* }
            }

            /// jit's batch split's row rule (see [`Family::split_rows`]).
            pub fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
                match self { $( Prim::$variant(p) => p.split_rows(q), )* }
            }

            /// This primitive at `len` rows along its result's `axis` (see
            /// [`Family::at_rows`]).
            pub fn at_rows(&self, axis: usize, len: usize, cut: bool) -> Option<Prim> {
                match self { $( Prim::$variant(p) => p.at_rows(axis, len, cut), )* }
            }

            /// How it joins a row group of jit's row fusion (see
            /// [`Family::row_fusion`]).
            pub fn row_fusion(&self) -> RowFusion<'_> {
                match self { $( Prim::$variant(p) => p.row_fusion(), )* }
            }

            /// Applies an elementwise primitive to CPU tiles (see
            /// [`Family::cpu_tile`]).
            #[inline]
            pub fn cpu_tile(&self, ins: &[Tile<'_>], out: TileMut<'_>) -> bool {
                match self { $( Prim::$variant(p) => p.cpu_tile(ins, out), )* }
            }

            /// Reduces rows of a CPU tile (see [`Family::cpu_row_reduce`]).
            #[inline]
            pub fn cpu_row_reduce(&self, x: &Tile<'_>, row: usize, strided: bool, out: TileMut<'_>) -> bool {
                match self { $( Prim::$variant(p) => p.cpu_row_reduce(x, row, strided, out), )* }
            }

            /// The CUDA map operation of an elementwise primitive (see
            /// [`Family::cuda_map_op`]).
            pub fn cuda_map_op(&self, ins: &[DType]) -> Option<MapOp> {
                match self { $( Prim::$variant(p) => p.cuda_map_op(ins), )* }
            }

            /// Runs the CPU lowering into `out` where it can (see
            /// [`Family::lower_into`]).
            pub fn lower_into(&self, ins: &[&Array], out: TileMut<'_>) -> Result<Option<Array>> {
                match self { $( Prim::$variant(p) => p.lower_into(ins, out), )* }
            }

            /// The work of one application (see [`Family::work`]).
            pub fn work(&self, ins: &[Shape], out_elems: usize) -> usize {
                match self { $( Prim::$variant(p) => p.work(ins, out_elems), )* }
            }

            fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self { $( Prim::$variant(p) => p.fmt_params(f), )* }
            }
        }

        /// Checks the operands without computing the outputs' abstract
        /// values (what `Eval` needs); fast for the elementwise families.
        #[inline]
        pub fn check(prim: &Prim, ins: &[AvalRef<'_>]) -> Result<()> {
            match prim { $( Prim::$variant(p) => p.check(ins), )* }
        }

        fn family_shape_rule(prim: &Prim, ins: &[AvalRef<'_>]) -> Result<Avals> {
            match prim { $( Prim::$variant(p) => p.shape_rule(ins), )* }
        }

        /// Runs the kernels (operands already checked by [`shape_rule`]) on
        /// the operands' device (`backend::lower` chooses).
        pub fn lower(prim: &Prim, ins: &[&Array]) -> Result<Outs> {
            crate::backend::lower(prim, ins)
        }

        /// The family's CPU lowering (every operand on the CPU).
        pub(crate) fn lower_cpu(prim: &Prim, ins: &[&Array]) -> Result<Outs> {
            match prim { $( Prim::$variant(p) => p.lower(ins), )* }
        }

        /// The family's device lowering through `backend` (every operand on
        /// its device).
        pub(crate) fn lower_device(prim: &Prim, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
            match prim { $( Prim::$variant(p) => p.lower_device(ins, backend), )* }
        }

        /// Forward-mode rule: outputs and their tangents, given the primals
        /// and their tangents (`None`: symbolic zero). Runs with the parent
        /// current.
        pub fn jvp_rule(prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
            match prim { $( Prim::$variant(p) => p.jvp(prim, primals, tangents), )* }
        }

        /// Transpose rule: cotangents of the linear inputs, given the output
        /// cotangents (`None`: zero). Non-linear primitives return an error.
        pub fn transpose_rule(prim: &Prim, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
            match prim { $( Prim::$variant(p) => p.transpose(cts, args), )* }
        }

        /// The cotangent of linear operand `i` factored as outer products
        /// (ghost clipping; see NOTE: [factored cotangents]), or `None` where the
        /// transpose rule must form it.
        pub fn factor_rule(prim: &Prim, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<crate::prims::factor::Factor>> {
            match prim { $( Prim::$variant(p) => p.factor(cts, args, i), )* }
        }

        /// Batch rule: outputs and their batch dims, given the (physical)
        /// operands and theirs and the axis batched over. Never loops over
        /// examples.
        pub fn batch_rule(prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
            match prim { $( Prim::$variant(p) => p.batch(prim, ins, bdims, axis), )* }
        }
    };
}

families! {
    /// Elementwise unary math (`prims/unary.rs`).
    Unary(UnaryOp),
    /// Elementwise binary arithmetic and logic (`prims/binary.rs`).
    Binary(BinaryOp),
    /// Elementwise comparisons, bool out (`prims/compare.rs`).
    Compare(CompareOp),
    /// convert, select, copy, stop_gradient (`prims/elementwise.rs`).
    Elementwise(ElementwiseOp),
    /// Reductions, arg-reductions, cumsum (`prims/reduce.rs`).
    Reduce(Reduction),
    /// Structural primitives (`prims/shape.rs`).
    Shape(ShapeOp),
    /// Runtime-indexed slicing, gather, scatter-add (`prims/indexing.rs`).
    Index(IndexOp),
    /// dot_general (`prims/linalg.rs`).
    Linalg(LinalgOp),
    /// Matrix factorizations and triangular solves (`prims/decomp.rs`).
    Decomp(DecompOp),
    /// conv_general_dilated (`prims/conv.rs`).
    Conv(ConvOp),
    /// Random bits (`prims/random.rs`).
    Random(RandomOp),
    /// reduce_window, select-and-gather / select-and-scatter-add (`prims/window.rs`).
    Window(WindowOp),
    /// Control flow, custom derivative rules, checkpoint (`prims/control/`).
    Control(ControlOp),
    /// Collectives over named axes (`prims/collective.rs`).
    Collective(CollectiveOp),
}

impl Prim {
    /// True for the elementwise primitives (operands and results of one
    /// shape, each element on its own): batched without their rule when
    /// batch dims agree.
    #[inline]
    pub fn is_elementwise(&self) -> bool {
        self.props().elementwise
    }

    /// True for the primitives that eagerly return a view of their operand
    /// (no copy): broadcast, reshape of compatible strides, transpose,
    /// slice, rev.
    #[inline]
    pub fn is_view(&self) -> bool {
        matches!(self.props().view, Some(k) if k != ViewKind::Detach)
    }

    /// True for a primitive that may refer to named axes (a collective,
    /// control flow), which `bind` routes by name as well as by operand.
    #[inline]
    pub fn may_name_axes(&self) -> bool {
        self.props().may_name_axes
    }

    /// True when the eager result may share the operand's storage (the
    /// views and stop_gradient).
    #[inline]
    pub fn aliases_operand(&self) -> bool {
        self.props().view.is_some()
    }

    /// For a view primitive: whether its result over a whole contiguous
    /// operand of `shape` is itself whole and contiguous (a reshape,
    /// stop_gradient), so that it may hold a buffer alone; from its own
    /// [`Family::view_layout`].
    pub fn whole_view(&self, shape: &Shape) -> bool {
        let n = shape.numel();
        self.view_layout(&Layout::contiguous(shape.clone()))
            .is_some_and(|l| l.is_contiguous() && l.offset == 0 && l.shape.numel() == n)
    }

    /// True when the transpose rule returns only tensors it computed (see
    /// [`Props::transpose_is_fresh`]).
    #[inline]
    pub fn transpose_is_fresh(&self) -> bool {
        self.props().transpose_is_fresh
    }

    /// What transposing a cotangent of ones gives (see [`OnesTranspose`]).
    #[inline]
    pub fn ones_transpose(&self) -> OnesTranspose {
        self.props().ones
    }
}

impl fmt::Display for Prim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        self.fmt_params(f)
    }
}

/// Checks the operands and computes the outputs' abstract values (whose
/// sizes are checked for overflow: see `prims::check_size`).
pub fn shape_rule(prim: &Prim, ins: &[AvalRef<'_>]) -> Result<Avals> {
    let outs = family_shape_rule(prim, ins)?;
    crate::prims::check_sizes(prim.name(), &outs)?;
    Ok(outs)
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
