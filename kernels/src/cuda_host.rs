//! Host emulation of the generated CUDA kernels: the kernels' sources,
//! unchanged, compiled by g++ against a small shim for the CUDA built-ins
//! they use (`cuda_host/shim.h`), and the launch plans of
//! [`crate::cuda_launch`] (the ones `cuda::exec` runs on a device) run on
//! the host by an emulated launch (`cuda_host/runner.cpp`). No GPU, CUDA
//! toolkit or `cuda` feature is needed: the tests compare each kernel
//! family with the CPU kernels on the host, so that the kernels' index
//! arithmetic, dtype conversions, edge sizes and the parameter packing are
//! checked without a device.
//!
//! How it runs: [`HostGpu::build`] compiles the distinct kernels of a set
//! of plans into one executable (a few translation units, each kernel in a
//! namespace of its own, with a table of entry points), once; [`HostGpu::run`]
//! writes the jobs (plans with their operands) to a file, runs them all in
//! that executable and reads the results back. The executable is built
//! with the address and undefined-behaviour sanitizers (where g++ can link
//! them), so an access outside a buffer or a signed overflow in a kernel
//! fails the run with the sanitizer's report, naming the job and step.
//!
//! What the emulation is faithful to: the kernels' own code (index
//! arithmetic, loads and stores, widening and rounding of the half types
//! to nearest-even, integer wrapping, the launch's grid and block sizes),
//! a block's cooperation (barriers and warp shuffles: the block's threads
//! run as fibers that switch only there, so a missing or divergent barrier
//! is reported), the atomics (in a fixed order). What it is not: the math
//! library (the host's libm, not CUDA's: transcendental results may differ
//! in the last bits; see the shim), the schedule (blocks run one after
//! another, so no race between blocks shows, and float atomics sum in one
//! order), the grid of a grid-stride launch (shrunk to
//! [`GRID_STRIDE_BLOCKS`] blocks so its loops take several turns), and
//! anything of the device itself: streams, CUDA graphs, cuBLAS and cuDNN
//! calls, memory limits, occupancy, timing.

use crate::cuda_launch::Plan;
use crate::cuda_source::Kernel;
use crate::dtype::CpuBuffer;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod build;
mod jobs;
#[cfg(test)]
pub(crate) mod tests;

/// Blocks the emulation runs of a grid-stride launch (see the module doc).
pub const GRID_STRIDE_BLOCKS: u32 = 2;

/// The shim that lets g++ compile the generated kernels as host C++.
pub const SHIM: &str = include_str!("cuda_host/shim.h");

/// True if the emulation's executables are built with the address and
/// undefined-behaviour sanitizers (g++ can link them here).
pub fn sanitized() -> bool {
    !build::sanitize_flags().is_empty()
}

/// Why the emulation could not run.
#[derive(Debug)]
pub enum HostError {
    /// g++ could not be started (tests skip the emulation then, saying so).
    NoCompiler(String),
    /// g++ rejected a unit or the link (its diagnostics).
    Compile {
        /// What was compiled.
        what: String,
        /// g++'s output.
        log: String,
    },
    /// The emulated run stopped: a sanitizer report, a barrier deadlock, a
    /// launch past the device's limits, or an argument of the wrong size.
    Run {
        /// The job that was running, if known.
        job: Option<usize>,
        /// The runner's output (the report).
        log: String,
    },
    /// A plan that does not fit its job (a missing operand), or a file
    /// that could not be written or read.
    Invalid(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::NoCompiler(e) => write!(f, "g++ not found ({e})"),
            HostError::Compile { what, log } => write!(f, "g++ failed on {what}:\n{log}"),
            HostError::Run { job: Some(j), log } => write!(f, "the emulated run failed in job {j}:\n{log}"),
            HostError::Run { job: None, log } => write!(f, "the emulated run failed:\n{log}"),
            HostError::Invalid(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for HostError {}

/// One plan to run, with its operands: `inputs[k]` is the plan's
/// `Buf::Input(k)` (the whole storage; the layouts the plan was built with
/// address its elements), `dest` the destination of an in-place plan.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// Its operands.
    pub inputs: &'a [&'a CpuBuffer],
    /// The destination an in-place plan writes into (its contents before).
    pub dest: Option<&'a CpuBuffer>,
}

/// What a job gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The plan's results, and the destination after an in-place plan.
    Done {
        /// The results, in the plan's order.
        outputs: Vec<CpuBuffer>,
        /// The destination's storage afterwards.
        dest: Option<CpuBuffer>,
    },
    /// The plan's index check failed, as `CudaError::IndexOutOfRange`.
    IndexOutOfRange {
        /// The first bad index (row-major).
        index: i64,
        /// The size of the indexed axis.
        size: usize,
    },
}

/// An executable holding a set of kernels, compiled for the host, and the
/// directory it lives in (removed on drop).
#[derive(Debug)]
pub struct HostGpu {
    dir: PathBuf,
    exe: PathBuf,
    ids: HashMap<String, u64>,
    runs: std::sync::atomic::AtomicUsize,
}

impl HostGpu {
    /// Compiles the distinct kernels of `kernels` (by name) into one
    /// executable.
    ///
    /// # Errors
    /// [`HostError::NoCompiler`] without g++; [`HostError::Compile`] if g++
    /// rejects a kernel (two kernels of one name and different sources
    /// are [`HostError::Invalid`]).
    pub fn build<'a>(kernels: impl IntoIterator<Item = &'a Kernel>) -> Result<HostGpu, HostError> {
        build::build(kernels)
    }

    /// The kernels of `plans`, compiled (see [`HostGpu::build`]).
    ///
    /// # Errors
    /// As [`HostGpu::build`].
    pub fn for_plans<'a>(plans: impl IntoIterator<Item = &'a Plan>) -> Result<HostGpu, HostError> {
        build::build(plans.into_iter().flat_map(|p| p.kernels()))
    }

    /// Runs `jobs` (their kernels compiled into this executable), in
    /// order, spread over a few runner processes; one outcome per job.
    ///
    /// # Errors
    /// [`HostError::Run`] when a run stops (see there), naming the job;
    /// [`HostError::Invalid`] for a job that does not fit its plan or a
    /// kernel this executable lacks.
    pub fn run(&self, jobs: &[Job<'_>]) -> Result<Vec<Outcome>, HostError> {
        jobs::run(self, jobs)
    }

    fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for HostGpu {
    /// Removes the build directory, unless `XFORM_CUDA_HOST_KEEP` is set
    /// (then it says where it is, for reading the units or rerunning the
    /// runner on the kept job files).
    fn drop(&mut self) {
        if std::env::var_os("XFORM_CUDA_HOST_KEEP").is_some() {
            eprintln!("kept the host emulation's build in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
