//! Many processes through MPI (feature `mpi`: the `mpi` crate over the
//! system's Open MPI): a named axis that spans the processes of
//! `MPI_COMM_WORLD`, as `jax.distributed` makes one of its processes.
//!
//! [`initialize`] starts MPI once per process; [`Processes::run`] runs a
//! function as this process's position of an axis whose positions are the
//! processes (rank order), so the collectives of part 1 (`lax::psum`,
//! `pmean`, `all_gather`, `axis_index`, ...) over that name communicate
//! with the other processes: each hands its operand to every process
//! (`MPI_Allgatherv` of the serialized array), and every process runs the
//! same batch rule `vmap` runs on the stacked operands, so every process
//! computes the same bits, and the result equals `vmap` of the function
//! over the processes' values.
//!
//! MPI is called from the thread that called [`initialize`] only (MPI's
//! `THREAD_FUNNELED` use): the process axis is bound on that thread, so a
//! `pmap` inside `run` maps its devices with a name of its own and reduces
//! over them first, then over the processes on the calling thread (a
//! collective over the process axis on a device thread is an unbound-name
//! error, not a deadlock). An axis spanning the devices of every process
//! at once (JAX's global device mesh) and GPUs through NCCL are not yet
//! built.
//!
//! ```no_run
//! use xform::prelude::*;
//! use xform::lax::psum;
//! let procs = xform::distributed::initialize().unwrap();
//! let x = Tensor::scalar(procs.rank() as f32);
//! let total = procs.run("procs", || psum(&x, "procs").or_raise());
//! // every process prints 0 + 1 + ... + (size - 1)
//! println!("rank {} of {}: {}", procs.rank(), procs.size(), total);
//! ```

use crate::{Error, Result, Tensor, Tree};
use mpi::datatype::PartitionMut;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use xform_ops::interp::{with_device_axis, DeviceAxis, Exchange};
use xform_ops::Array;

/// This process's view of `MPI_COMM_WORLD`: its rank, the number of
/// processes, and the process axis ([`Processes::run`]).
pub struct Processes {
    world: Arc<World>,
}

/// The world communicator and the thread allowed to call MPI.
struct World {
    comm: Mutex<SimpleCommunicator>,
    thread: std::thread::ThreadId,
    _universe: mpi::environment::Universe,
}

// SAFETY: MPI is initialized for the calling thread only (funneled); every
// use of the communicator first checks that it runs on `thread`, the
// thread that initialized MPI (`World::check_thread`), and goes through
// the mutex, so the handles are never used from another thread.
unsafe impl Send for World {}
// SAFETY: as for `Send`: shared references only reach MPI after the
// thread check, under the mutex.
unsafe impl Sync for World {}

impl World {
    fn check_thread(&self, op: &str) -> Result<()> {
        if std::thread::current().id() != self.thread {
            return Err(Error::invalid(
                op,
                "MPI is called only from the thread that called distributed::initialize (a collective over the \
                 process axis ran on another thread, e.g. a pmap device's)",
            ));
        }
        Ok(())
    }
}

/// Starts MPI (once per process; `mpirun -np N program` starts N).
///
/// # Errors
/// If MPI was already initialized, or cannot be.
pub fn initialize() -> Result<Processes> {
    let universe = mpi::initialize().ok_or_else(|| {
        Error::invalid("distributed::initialize", "MPI is already initialized in this process (initialize once)")
    })?;
    let comm = universe.world();
    let world = World { comm: Mutex::new(comm), thread: std::thread::current().id(), _universe: universe };
    Ok(Processes { world: Arc::new(world) })
}

impl Processes {
    /// This process's rank in `0..size()`.
    pub fn rank(&self) -> usize {
        self.world.comm.lock().unwrap_or_else(|e| e.into_inner()).rank() as usize
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.world.comm.lock().unwrap_or_else(|e| e.into_inner()).size() as usize
    }

    /// Runs `f` as this process's position (its rank) of the axis
    /// `axis_name`, whose positions are the processes: collectives over
    /// that name inside `f` communicate with the other processes, which
    /// must run the same collectives in the same order.
    pub fn run<R>(&self, axis_name: &str, f: impl FnOnce() -> R) -> R {
        let axis = DeviceAxis {
            name: axis_name.into(),
            index: self.rank(),
            size: self.size(),
            exchange: Arc::new(MpiExchange { world: self.world.clone() }),
        };
        with_device_axis(axis, f)
    }

    /// Rank `root`'s values of `tree` on every process (parameters
    /// broadcast once, so that every process starts from the same ones).
    ///
    /// # Errors
    /// A rank out of range, or what MPI or the serialization raise.
    pub fn broadcast<T: Tree>(&self, tree: &T, root: usize) -> Result<T> {
        let op = "distributed::broadcast";
        self.world.check_thread(op)?;
        if root >= self.size() {
            return Err(Error::invalid(op, format!("root {root} is not a rank of {} processes", self.size())));
        }
        let comm = self.world.comm.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = if comm.rank() as usize == root { crate::safetensors::to_bytes(tree)? } else { Vec::new() };
        let mut len = bytes.len() as u64;
        let root = comm.process_at_rank(root as i32);
        root.broadcast_into(&mut len);
        bytes.resize(len as usize, 0);
        root.broadcast_into(&mut bytes[..]);
        crate::safetensors::from_bytes(&bytes, tree)
    }
}

/// The process axis's exchange: every process's operand to every process.
struct MpiExchange {
    world: Arc<World>,
}

impl Exchange for MpiExchange {
    fn exchange(&self, index: usize, what: &str, value: Option<Array>) -> Result<Vec<Option<Array>>> {
        let op = "distributed";
        self.world.check_thread(op)?;
        let mut meta = BTreeMap::new();
        meta.insert("what".to_string(), what.to_string());
        let leaves: Vec<Tensor> = value.into_iter().map(Tensor::from_array).collect();
        let mine = crate::safetensors::to_bytes_with_metadata(&leaves, Some(&meta))?;
        let comm = self.world.comm.lock().unwrap_or_else(|e| e.into_inner());
        let n = comm.size() as usize;
        debug_assert_eq!(index, comm.rank() as usize);
        // the sizes, then the bytes
        let mut counts = vec![0i32; n];
        comm.all_gather_into(&(mine.len() as i32), &mut counts[..]);
        let displs: Vec<i32> = counts
            .iter()
            .scan(0i32, |acc, &c| {
                let d = *acc;
                *acc += c;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut all = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            comm.all_gather_varcount_into(&mine[..], &mut part);
        }
        drop(comm);
        let mut out = Vec::with_capacity(n);
        for (k, (&c, &d)) in counts.iter().zip(&displs).enumerate() {
            let bytes = &all[d as usize..(d + c) as usize];
            let theirs = crate::safetensors::metadata_from_bytes(bytes)?;
            if theirs.get("what").map(String::as_str) != Some(what) {
                return Err(Error::invalid(
                    op,
                    format!(
                        "the processes ran different collectives at one step ({what} here, {} on rank {k}): every \
                         process must run the same sequence of collectives",
                        theirs.get("what").map_or("nothing", String::as_str)
                    ),
                ));
            }
            let tensors = crate::safetensors::all_from_bytes(bytes)?;
            out.push(tensors.into_values().next().and_then(|t| t.array()));
        }
        Ok(out)
    }
}
