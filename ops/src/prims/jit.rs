//! What jit's compiler and runtime need of each primitive, stated by its
//! family beside its other rules ([`Family::jit_props`],
//! [`Family::split_rows`], [`Family::at_rows`], [`Family::row_fusion`],
//! [`Family::cpu_tile`], [`Family::cpu_row_reduce`],
//! [`Family::cuda_map_op`]): the jit names no primitive to decide whether
//! an equation is split over a batch, fused, captured into a CUDA graph or
//! handed to its helper thread, so a new primitive states each of these or
//! does not compile.
//!
//! [`Family::jit_props`]: super::Family::jit_props
//! [`Family::split_rows`]: super::Family::split_rows
//! [`Family::at_rows`]: super::Family::at_rows
//! [`Family::row_fusion`]: super::Family::row_fusion
//! [`Family::cpu_tile`]: super::Family::cpu_tile
//! [`Family::cpu_row_reduce`]: super::Family::cpu_row_reduce
//! [`Family::cuda_map_op`]: super::Family::cuda_map_op

use smallvec::{smallvec, SmallVec};
use std::mem::MaybeUninit;
use xform_kernels::{DType, Shape};

/// Facts of a primitive that jit's plan reads. Every family states every
/// field (there is no default), so a new primitive decides each.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct JitProps {
    /// Its CUDA lowering only enqueues device work on the stream (no data
    /// made on the host, no synchronization, no interpreter), so a plan of
    /// such steps may be captured once as a CUDA graph and replayed.
    pub graph_capture: bool,
    /// A pure CPU lowering with no state bound to the calling thread, and
    /// heavy enough (not elementwise, which the plan fuses, nor a view) to
    /// be worth handing to the jit's helper thread as a sink.
    pub sink: bool,
    /// Runs interpreters (control flow's bodies), which belong to the
    /// thread that called the replay: a program holding one is never split
    /// across threads.
    pub thread_bound: bool,
    /// Its CPU lowering can write its one result straight into a
    /// destination the runtime provides ([`Family::lower_into`]): a result
    /// that is a program output then needs no copy.
    ///
    /// [`Family::lower_into`]: super::Family::lower_into
    pub lower_into: bool,
}

/// How a primitive joins a row group of jit's row fusion (a reduction over
/// the last axis with the elementwise work around it, one row at a time).
/// Elementwise primitives join as maps through `cpu_tile`; this states the
/// other ways in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RowFusion<'a> {
    /// It does not join.
    None,
    /// A reduction over `axes`, whose rows [`Family::cpu_row_reduce`]
    /// computes.
    ///
    /// [`Family::cpu_row_reduce`]: super::Family::cpu_row_reduce
    Reduce {
        /// The reduced axes.
        axes: &'a [usize],
    },
    /// A broadcast placing operand axis `i` at result axis `dims[i]`.
    Broadcast {
        /// Where each operand axis goes.
        dims: &'a [usize],
    },
    /// Its result holds its operand's elements in the same row-major order
    /// (a reshape, stop_gradient): in a group it is its operand's value.
    SameElements,
}

/// States, inside a family's `Family` impl, that its primitives have no
/// elementwise fused form: `cpu_tile` is `false` and `cuda_map_op` `None`
/// (jit runs each as a step of its own).
macro_rules! no_map_form {
    () => {
        fn cpu_tile(&self, _: &[$crate::prims::jit::Tile<'_>], _: $crate::prims::jit::TileMut<'_>) -> bool {
            false
        }

        fn cuda_map_op(&self, _: &[xform_kernels::DType]) -> Option<xform_kernels::cuda_source::MapOp> {
            None
        }
    };
}
pub(crate) use no_map_form;

/// States, inside a family's `Family` impl, that its primitives join no
/// row group other than as elementwise maps: `row_fusion` is
/// [`RowFusion::None`] and `cpu_row_reduce` `false`.
macro_rules! no_row_form {
    () => {
        fn row_fusion(&self) -> $crate::prims::jit::RowFusion<'_> {
            $crate::prims::jit::RowFusion::None
        }

        fn cpu_row_reduce(
            &self,
            _: &$crate::prims::jit::Tile<'_>,
            _: usize,
            _: bool,
            _: $crate::prims::jit::TileMut<'_>,
        ) -> bool {
            false
        }
    };
}
pub(crate) use no_row_form;

impl JitProps {
    /// An elementwise map's facts: a kernel launch CUDA graphs capture,
    /// fused rather than handed to the helper thread, bound to no thread,
    /// with no lowering into a destination.
    pub const MAP: JitProps = JitProps { graph_capture: true, sink: false, thread_bound: false, lower_into: false };
}

/// States, inside a family's `Family` impl, that its primitives are
/// elementwise maps to jit: [`JitProps::MAP`] and the elementwise row rule
/// ([`elementwise_rows`]).
macro_rules! elementwise_map {
    () => {
        fn jit_props(&self) -> $crate::prims::jit::JitProps {
            $crate::prims::jit::JitProps::MAP
        }

        fn split_rows(
            &self,
            q: &$crate::prims::jit::RowQuery<'_>,
        ) -> std::result::Result<$crate::prims::jit::RowRule, $crate::prims::jit::Blame> {
            $crate::prims::jit::elementwise_rows(q)
        }
    };
}
pub(crate) use elementwise_map;

/// Which operands (a bit per operand) an equation cannot take as rows.
pub type Blame = u32;

/// What the batch split asks a primitive: its operands' and results'
/// shapes, the axis along which each operand holds its rows of the batch
/// (`None`: held whole, in both halves; at least one holds rows), and the
/// batch's length.
#[derive(Debug)]
pub struct RowQuery<'a> {
    /// The operands' shapes.
    pub ins: &'a [Shape],
    /// The results' shapes.
    pub outs: &'a [Shape],
    /// Each operand's row axis, or `None` for a whole operand.
    pub axes: &'a [Option<usize>],
    /// The batch's length.
    pub rows: usize,
}

impl RowQuery<'_> {
    /// Operand `i`'s row axis (`None`: whole, or no such operand).
    pub fn axis(&self, i: usize) -> Option<usize> {
        self.axes.get(i).copied().flatten()
    }

    /// Every operand that holds rows, as blame bits.
    pub fn split(&self) -> Blame {
        self.axes.iter().enumerate().filter(|(_, a)| a.is_some()).fold(0, |m, (i, _)| m | 1 << i)
    }

    /// The rule: operands cut along `ins` (`None`: whole), every result's
    /// rows along axis `out`.
    pub fn rows_at(&self, ins: SmallVec<[Option<usize>; 4]>, out: usize) -> Result<RowRule, Blame> {
        Ok(RowRule { ins, out })
    }
}

/// A primitive's answer to the batch split: along which axis each operand
/// is cut to a half's rows (`None`: whole), and the results' row axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowRule {
    /// Each operand's cut axis, or `None` for whole.
    pub ins: SmallVec<[Option<usize>; 4]>,
    /// The axis along which every result holds its rows.
    pub out: usize,
}

/// The batch split's row rule of an elementwise primitive: operands with
/// rows along one axis give results with rows along it; whole operands of
/// the result's shape are cut too. Operands with rows along different
/// axes: the first axis wins (a batch is most often leading; a bias of the
/// batch's length broadcast along a later axis is the one to drop).
pub(crate) fn elementwise_rows(q: &RowQuery<'_>) -> Result<RowRule, Blame> {
    let a = (0..q.axes.len()).filter_map(|i| q.axis(i)).min().ok_or(0 as Blame)?;
    let other: Blame = (0..q.axes.len()).filter(|&i| q.axis(i).is_some_and(|b| b != a)).fold(0, |m, i| m | 1 << i);
    if other != 0 {
        return Err(other);
    }
    let out = &q.outs[0];
    let mut ins = SmallVec::new();
    for (i, s) in q.ins.iter().enumerate() {
        ins.push(match q.axis(i) {
            Some(_) => Some(a),
            None if s.rank() == 0 => None,
            None if s == out => Some(a),
            None => return Err(q.split()),
        });
    }
    q.rows_at(ins, a)
}

/// The batch split's rule of a primitive whose rows do not pass (every
/// operand that holds rows is blamed).
pub(crate) fn no_rows(q: &RowQuery<'_>) -> Result<RowRule, Blame> {
    Err(q.split())
}

/// A single operand's cut axis.
pub(crate) fn one_operand(axis: usize) -> SmallVec<[Option<usize>; 4]> {
    smallvec![Some(axis)]
}

// ---- the fused forms' vocabulary: tiles of elements ---------------------

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

/// Runs a fused CUDA kernel (generated for inputs of dtypes `in_dtypes`)
/// over `arrays` (CUDA arrays of one device and of logical shape `shape`,
/// any layouts), returning its outputs of dtypes `outs`, contiguous.
///
/// # Errors
/// Operands that do not match the kernel, a launch failure, or out of
/// memory (as the eager CUDA lowerings report them).
#[cfg(feature = "cuda")]
pub fn run_fused_cuda(
    kernel: &xform_kernels::cuda_source::Kernel,
    in_dtypes: &[DType],
    arrays: &[&crate::array::Array],
    shape: &Shape,
    outs: &[DType],
) -> crate::error::Result<Vec<crate::array::Array>> {
    let device = arrays.first().map_or(crate::array::Device::Cpu, |a| a.device());
    crate::backend::of(device)?.fused(kernel, in_dtypes, arrays, shape, outs)
}
