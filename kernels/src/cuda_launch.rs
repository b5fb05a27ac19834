//! What each launch of a generated kernel passes: the kernel, its launch
//! configuration, its parameter structs and the buffers it reads and
//! writes, as a [`Plan`] built from dtypes and layouts alone.
//!
//! Every launcher of `crate::cuda::exec` (the `cuda` feature) builds its
//! plan here and runs it on the device (allocating the temporaries,
//! resolving each buffer to a device pointer, launching); the host
//! emulation of [`crate::cuda_host`] runs the same plans with the kernels
//! compiled by g++. So the parameter packing, the argument order, the
//! temporaries and the sequence of kernels of a multi-kernel op are one
//! piece of code that the default build tests without a device. What stays
//! device-only: cuBLAS and cuDNN calls (`exec::gemm` decides on cuBLAS
//! there), streams and CUDA graphs.
//!
//! The parameter structs are `#[repr(C)]` images of the structs in the
//! generated source (`XfIter`, `XfRed`, `XfPad`, `XfGather`, `XfGemm`,
//! `XfWin`, `XfFused`, `XfConv`): integers only, without padding bytes.

use crate::cuda_source::Kernel;
use crate::dtype::DType;

mod conv;
mod elementwise;
mod fused;
mod gemm;
mod indexing;
mod params;
mod reduce;
mod window;

pub use conv::conv;
pub use elementwise::{convert, copy, iota, map, threefry, write};
pub use fused::{fused, FusedParams};
pub use gemm::{gemm, gemm_dims};
pub use indexing::{concatenate, dynamic_update_slice, gather, pad, scatter_add};
pub use params::{GatherParams, GemmParams, IterParams, IterParamsOf, PadParams, RedParams};
pub use reduce::{arg_reduce, cumulative, reduce};
pub use window::{reduce_window, select_and_gather, select_and_scatter, WinParams};

/// Threads per block of the one-dimensional kernels.
pub const BLOCK: u32 = 256;

/// Most blocks of a one-dimensional grid (the kernels' loops stride over
/// the grid, so a larger problem takes several turns).
pub const MAX_BLOCKS: usize = 1 << 20;

/// A launch or plan that cannot be built: the operands do not fit what the
/// kernels support (the message says what).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

/// The result of a plan builder.
pub type Result<T> = std::result::Result<T, Unsupported>;

fn unsupported(msg: impl Into<String>) -> Unsupported {
    Unsupported(msg.into())
}

/// A buffer a launch reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    /// The plan's operand of this index (its whole storage: the layouts in
    /// the parameters address elements of it).
    Input(usize),
    /// The temporary of this index (see [`Plan::temps`]).
    Temp(usize),
    /// The destination an in-place plan ([`write()`]) writes through.
    Dest,
}

/// A pointer argument: element `offset` of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ptr {
    /// The buffer.
    pub buf: Buf,
    /// Elements from its start.
    pub offset: usize,
}

impl Ptr {
    /// The start of `buf`.
    pub fn at(buf: Buf) -> Ptr {
        Ptr { buf, offset: 0 }
    }
}

/// One kernel argument, in the order of the kernel's signature (the
/// parameter structs boxed: up to 2.3 KB each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// A buffer.
    Ptr(Ptr),
    /// A `long long`.
    I64(i64),
    /// An `int`.
    I32(i32),
    /// `XfIter`.
    Iter(Box<IterParams>),
    /// `XfRed`.
    Red(Box<RedParams>),
    /// `XfPad`.
    Pad(Box<PadParams>),
    /// `XfGather`.
    Gather(Box<GatherParams>),
    /// `XfGemm`.
    Gemm(Box<GemmParams>),
    /// `XfWin`.
    Win(Box<WinParams>),
    /// `XfFused`.
    Fused(Box<FusedParams>),
    /// `XfConv`.
    Conv(Box<crate::cuda_source::conv::ConvParams>),
}

impl Arg {
    /// The argument's bytes as the kernel receives them (pointers have
    /// none here: the executor supplies the address).
    pub fn value_bytes(&self) -> Option<Vec<u8>> {
        Some(match self {
            Arg::Ptr(_) => return None,
            Arg::I64(v) => v.to_ne_bytes().to_vec(),
            Arg::I32(v) => v.to_ne_bytes().to_vec(),
            Arg::Iter(p) => params::bytes(&**p).to_vec(),
            Arg::Red(p) => params::bytes(&**p).to_vec(),
            Arg::Pad(p) => params::bytes(&**p).to_vec(),
            Arg::Gather(p) => params::bytes(&**p).to_vec(),
            Arg::Gemm(p) => params::bytes(&**p).to_vec(),
            Arg::Win(p) => params::bytes(&**p).to_vec(),
            Arg::Fused(p) => params::bytes(&**p).to_vec(),
            Arg::Conv(p) => params::bytes(&**p).to_vec(),
        })
    }
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The generated kernel.
    pub kernel: Kernel,
    /// Blocks per grid dimension.
    pub grid: [u32; 3],
    /// Threads per block dimension.
    pub block: [u32; 3],
    /// True if the kernel's loops stride over the whole grid (`x`), so a
    /// grid of any size computes the same result (the host emulation runs
    /// a smaller one, so that the loops take several turns).
    pub grid_stride: bool,
    /// The arguments.
    pub args: Vec<Arg>,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Launch a kernel.
    Launch(Launch),
    /// Read the flag temporary `flag` (the smallest position of a bad
    /// index, `u64::MAX` if none, from `check_indices_kernel`): if set,
    /// stop with an index-out-of-range error naming element `flag` of the
    /// i64 `indices` and the axis size `size`.
    CheckIndices {
        /// The flag temporary.
        flag: usize,
        /// The checked indices (i64).
        indices: Buf,
        /// The size of the indexed axis.
        size: usize,
    },
}

/// A temporary a plan allocates (device memory is not initialized: a
/// kernel writes every element it later reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temp {
    /// `len` elements of `dtype`.
    Array {
        /// The dtype.
        dtype: DType,
        /// Its elements.
        len: usize,
    },
    /// One u64 holding `u64::MAX` (an index check's result).
    Flag,
}

/// The launches of one operation over operands given by dtypes and
/// layouts: the temporaries to allocate, the steps in order, and which
/// temporaries are the results (fresh, contiguous).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The temporaries, in order of allocation.
    pub temps: Vec<Temp>,
    /// The steps.
    pub steps: Vec<Step>,
    /// The results: indices into `temps` (each a [`Temp::Array`]).
    pub outputs: Vec<usize>,
}

impl Plan {
    /// Adds a temporary of `len` elements of `dtype`; its index.
    fn temp(&mut self, dtype: DType, len: usize) -> usize {
        self.temps.push(Temp::Array { dtype, len });
        self.temps.len() - 1
    }

    /// Adds a one-element flag temporary; its index.
    fn flag(&mut self) -> usize {
        self.temps.push(Temp::Flag);
        self.temps.len() - 1
    }

    /// Appends a one-dimensional grid-stride launch over `n` items.
    fn launch_1d(&mut self, kernel: Kernel, n: usize, args: Vec<Arg>) {
        self.steps.push(Step::Launch(Launch {
            kernel,
            grid: [blocks_1d(n), 1, 1],
            block: [BLOCK, 1, 1],
            grid_stride: true,
            args,
        }));
    }

    /// A plan whose result is temporary `t`.
    fn with_output(mut self, t: usize) -> Plan {
        self.outputs.push(t);
        self
    }

    /// Appends `other`'s temporaries and steps, its `Input(k)` reading
    /// `inputs[k]` of this plan (an operand, a temporary, the
    /// destination); returns `other`'s results as temporaries of this plan
    /// (not added to [`Plan::outputs`]): how a composite operation (the
    /// half types' scatter-add through f32, a chain of maps) is one plan.
    ///
    /// # Errors
    /// If `other` reads an input `inputs` lacks.
    pub fn append(&mut self, other: &Plan, inputs: &[Buf]) -> Result<Vec<usize>> {
        let base = self.temps.len();
        let map = |b: Buf| match b {
            Buf::Input(k) => {
                inputs.get(k).copied().ok_or_else(|| unsupported(format!("appending a plan that reads input {k}")))
            }
            Buf::Temp(t) => Ok(Buf::Temp(base + t)),
            Buf::Dest => Ok(Buf::Dest),
        };
        self.temps.extend(other.temps.iter().copied());
        for step in &other.steps {
            self.steps.push(match step {
                Step::Launch(l) => {
                    let mut l = l.clone();
                    for a in &mut l.args {
                        if let Arg::Ptr(p) = a {
                            p.buf = map(p.buf)?;
                        }
                    }
                    Step::Launch(l)
                }
                Step::CheckIndices { flag, indices, size } => {
                    Step::CheckIndices { flag: base + flag, indices: map(*indices)?, size: *size }
                }
            });
        }
        Ok(other.outputs.iter().map(|&o| base + o).collect())
    }

    /// The kernels the plan launches, in order.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.steps.iter().filter_map(|s| match s {
            Step::Launch(l) => Some(&l.kernel),
            Step::CheckIndices { .. } => None,
        })
    }
}

/// Blocks of [`BLOCK`] threads covering `n` items (1 to [`MAX_BLOCKS`]).
pub fn blocks_1d(n: usize) -> u32 {
    n.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, Shape};

    /// Plans name their temporaries and launches in the order the device
    /// runs them: a gather of a non-contiguous operand converts and checks
    /// its indices, then copies the operand, then gathers.
    #[test]
    fn gather_plan_converts_checks_copies_then_gathers() {
        use crate::cpu::indexing::GatherExtents;
        let lx = Layout::contiguous(Shape::from([3, 4])).permute(&[1, 0]);
        let li = Layout::contiguous(Shape::from([2]));
        let e = GatherExtents { batch: 1, pre: 1, n: 4, post: 3, count: 2 };
        let p = gather(DType::F32, &lx, DType::I32, &li, e).unwrap();
        let names: Vec<&str> = p.kernels().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["xf_map1_convert_i32_i64", "xf_check_indices_i64", "xf_map1_copy_f32_f32", "xf_gather_f32"]);
        assert!(matches!(p.steps[2], Step::CheckIndices { flag: 1, indices: Buf::Temp(0), size: 4 }));
        assert_eq!(p.outputs, vec![2]);
        assert_eq!(p.temps[2], Temp::Array { dtype: DType::F32, len: 6 });
        // a contiguous operand is read in place, from its offset
        let lx = Layout { offset: 5, ..Layout::contiguous(Shape::from([4, 3])) };
        let p = gather(DType::F32, &lx, DType::I64, &li, e).unwrap();
        let Some(Step::Launch(l)) = p.steps.last() else { panic!("{p:?}") };
        assert_eq!(l.args[1], Arg::Ptr(Ptr { buf: Buf::Input(0), offset: 5 }));
    }

    /// A one-dimensional launch covers its items with blocks of [`BLOCK`]
    /// threads, at most [`MAX_BLOCKS`] (the grid-stride loops cover the rest).
    #[test]
    fn one_dimensional_grids_cover_their_items() {
        assert_eq!(blocks_1d(0), 1);
        assert_eq!(blocks_1d(1), 1);
        assert_eq!(blocks_1d(257), 2);
        assert_eq!(blocks_1d(1 << 40), MAX_BLOCKS as u32);
    }

    /// An empty result launches nothing.
    #[test]
    fn empty_results_launch_nothing() {
        let l = Layout::contiguous(Shape::from([0, 3]));
        let p = copy(DType::F16, &l).unwrap();
        assert!(p.steps.is_empty());
        assert_eq!(p.temps, vec![Temp::Array { dtype: DType::F16, len: 0 }]);
    }
}
