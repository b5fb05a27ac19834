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
//! [`Processes::pmap`] maps one axis over the CPU devices of every
//! process at once (JAX's multi-process `pmap`): each process gives its
//! own devices' shards, and a collective gathers its devices' operands
//! in the process, then exchanges them with the other processes.
//!
//! MPI is called from the thread that called [`initialize`] only (MPI's
//! `THREAD_FUNNELED` use): the process axis of [`Processes::run`] is bound
//! on that thread (a collective over it on a `pmap` device's thread is an
//! unbound-name error, not a deadlock), and a spanning `pmap`'s devices
//! hand their operands to that thread.
//!
//! Faults: every exchange waits at most [`Processes::set_timeout`] (default
//! `XFORM_COLLECTIVE_TIMEOUT` seconds, else 300) and then fails naming the
//! ranks that did not arrive; a rank whose function fails or panics inside
//! `run` tells the others, whose pending collective fails naming it and its
//! error; ranks that give operands of different shapes or dtypes, or run
//! different collectives, all get an error naming each rank's. After a
//! timeout or a failed rank the group of that `run` is broken: its later
//! collectives fail at once (a later `run` starts afresh). With the `cuda`
//! feature, [`Processes::use_gpu`] joins each process's GPU to an NCCL
//! group (NCCL's unique id sent through MPI), and collectives over the
//! process axis on GPU operands then travel GPU to GPU. The MPI library is linked when the `mpi`
//! feature is built: a process started where Open MPI is not installed
//! stops before `main` with the loader's message naming `libmpi.so`
//! (install Open MPI: `apt-get install openmpi-bin libopenmpi-dev`).
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
use mpi::point_to_point::{MatchedReceiveVec, Message, Status};
use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use xform_ops::interp::{with_device_axis, DeviceAxis, Exchange};
use xform_ops::{Array, DType, GroupMember};
use xform_transforms::{try_pmap_spanning, PmapOptions};

/// This process's view of `MPI_COMM_WORLD`: its rank, the number of
/// processes, and the process axis ([`Processes::run`]).
#[derive(Clone)]
pub struct Processes {
    world: Arc<World>,
}

/// The world communicator and the thread allowed to call MPI.
struct World {
    comm: Mutex<SimpleCommunicator>,
    thread: std::thread::ThreadId,
    rank: usize,
    size: usize,
    timeout: Mutex<Duration>,
    /// Groups started (`run`, `pmap`, `broadcast`): each group's messages
    /// carry a tag of its own, so a failed group's stray messages never
    /// reach a later one.
    groups: AtomicU64,
    /// This process's GPU in the NCCL group of every process
    /// ([`Processes::use_gpu`]).
    gpu: Mutex<Option<GroupMember>>,
    /// Sends not yet known to be complete, with their buffers: reaped by
    /// every later send, waited for (briefly) when MPI is finalized. A
    /// group's end does not wait for them: its messages reach the other
    /// ranks whenever they receive them.
    pending: Mutex<Vec<PendingSend>>,
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

/// The initialized group, while a [`Processes`] holds it.
static CURRENT: Mutex<Option<Weak<World>>> = Mutex::new(None);

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

/// Starts MPI (once per process; `mpirun -np N program` starts N). MPI
/// is finalized when the last clone of the returned [`Processes`] is
/// dropped.
///
/// # Errors
/// If MPI was already initialized, or cannot be.
pub fn initialize() -> Result<Processes> {
    let universe = mpi::initialize().ok_or_else(|| {
        Error::invalid(
            "distributed::initialize",
            "MPI is already initialized in this process (initialize once; distributed::current() returns the group)",
        )
    })?;
    let comm = universe.world();
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let world = Arc::new(World {
        comm: Mutex::new(comm),
        thread: std::thread::current().id(),
        rank,
        size,
        timeout: Mutex::new(xform_ops::interp::default_collective_timeout()),
        groups: AtomicU64::new(0),
        gpu: Mutex::new(None),
        pending: Mutex::new(Vec::new()),
        _universe: universe,
    });
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(&world));
    Ok(Processes { world })
}

/// The process group [`initialize`] started.
///
/// # Errors
/// If it was not initialized (or every `Processes` was dropped, which
/// finalizes MPI).
pub fn current() -> Result<Processes> {
    let world = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(Weak::upgrade);
    world.map(|world| Processes { world }).ok_or_else(|| {
        Error::invalid(
            "distributed::current",
            "the process group is not initialized: call xform::distributed::initialize() first (once per process, \
             launched with mpirun -np N)",
        )
    })
}

impl Processes {
    /// This process's rank in `0..size()`.
    pub fn rank(&self) -> usize {
        self.world.rank
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.world.size
    }

    /// How long every collective across processes waits for the others
    /// before it fails naming the ranks that did not arrive.
    pub fn set_timeout(&self, timeout: Duration) {
        *self.world.timeout.lock().unwrap_or_else(|e| e.into_inner()) = timeout;
    }

    /// The collectives' timeout ([`Processes::set_timeout`]).
    pub fn timeout(&self) -> Duration {
        *self.world.timeout.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins this process's GPU `cuda:ordinal` to an NCCL group of every
    /// process (the bootstrap: rank 0 makes NCCL's unique id and sends it
    /// through MPI): afterwards a collective over the process axis whose
    /// operand lives on that GPU agrees on it through MPI (with the
    /// timeout, failure notices and mismatch errors) and gathers the
    /// operands through NCCL, GPU to GPU. Every process calls it.
    ///
    /// # Errors
    /// CUDA support not built, NCCL or the device missing, another rank's
    /// failure.
    pub fn use_gpu(&self, ordinal: usize) -> Result<()> {
        let op = "distributed::use_gpu";
        self.world.check_thread(op)?;
        let group = self.group();
        let what = "the NCCL unique id from rank 0";
        // every rank checks NCCL first and rank 0 makes the id; a failure
        // anywhere reaches every rank before any enters NCCL's blocking
        // initialization
        let ready =
            GroupMember::available()
                .and_then(|()| if self.rank() == 0 { GroupMember::unique_id() } else { Ok(Vec::new()) });
        let (frame, ready) = match ready {
            Ok(id) => (message(what, &id), Ok(id)),
            Err(e) => (framed("failed", &e.to_string(), &[]), Err(e)),
        };
        let r = group.round(what, frame).and_then(|all| {
            let own = ready?;
            let id = match &all[0] {
                Some(theirs) => theirs.payload().to_vec(),
                None => own,
            };
            GroupMember::from_rank(ordinal, self.rank(), self.size(), &id)
        });
        if r.is_err() {
            group.fail("joining the NCCL group failed");
        } else {
            group.finish();
        }
        *self.world.gpu.lock().unwrap_or_else(|e| e.into_inner()) = Some(r?);
        Ok(())
    }

    /// A fresh group of exchanges (a tag of its own).
    fn group(&self) -> Arc<MpiExchange> {
        let n = self.world.groups.fetch_add(1, Ordering::Relaxed);
        Arc::new(MpiExchange {
            world: self.world.clone(),
            // MPI guarantees tags up to 32767
            tag: 1 + (n % 32_000) as i32,
            timeout: self.timeout(),
            state: Mutex::new(GroupState { broken: None, peers_know: false }),
        })
    }

    /// Runs `f` as this process's position (its rank) of the axis
    /// `axis_name`, whose positions are the processes: collectives over
    /// that name inside `f` communicate with the other processes, which
    /// must run the same collectives in the same order. A panic in `f` is
    /// told to the other processes (their pending collective fails naming
    /// this rank) and resumed here.
    pub fn run<R>(&self, axis_name: &str, f: impl FnOnce() -> R) -> R {
        self.run_group(axis_name, |_| f())
    }

    /// [`Processes::run`] for a function that may fail: its error is told
    /// to the other processes (their pending collective fails naming this
    /// rank and the error) and returned.
    ///
    /// # Errors
    /// `f`'s error, or a collective's (another rank failed, a timeout,
    /// mismatched operands).
    pub fn try_run<R>(&self, axis_name: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.world.check_thread("distributed::try_run")?;
        self.run_group(axis_name, |group| {
            let r = f();
            if let Err(e) = &r {
                group.notify_failure(&e.to_string());
            }
            r
        })
    }

    fn run_group<R>(&self, axis_name: &str, f: impl FnOnce(&MpiExchange) -> R) -> R {
        // before a group (and its tag) is taken: from another thread the
        // ranks' group counts would drift apart
        if let Err(e) = self.world.check_thread("distributed::run") {
            e.raise()
        }
        let group = self.group();
        let axis =
            DeviceAxis { name: axis_name.into(), index: self.rank(), size: self.size(), exchange: group.clone() };
        // an xform error raised inside (`or_raise`) is told with its
        // message and raised again; any other panic is told and resumed
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::catch(|| with_device_axis(axis, || f(&group)))
        }));
        match caught {
            Ok(Ok(r)) => {
                group.finish();
                r
            }
            Ok(Err(e)) => {
                group.fail(&e.to_string());
                e.raise()
            }
            Err(panic) => {
                group.fail(&xform_ops::panic_text(&*panic));
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// `pmap` over the CPU devices of every process at once: one axis of
    /// `size()` x devices positions (process-major: device `k` of rank `r`
    /// is position `r * devices + k`), as JAX's multi-process `pmap`. `x`
    /// holds this process's shards (its mapped axis as long as its
    /// devices) and the result its devices' outputs; every process must
    /// call it with the same function and as many devices. Call it from
    /// the thread that initialized MPI, outside any transform (the
    /// transforms go inside `f`).
    ///
    /// # Errors
    /// As `pmap`'s, and another rank's failure, a timeout, mismatched
    /// operands across processes.
    pub fn try_pmap<X, Y>(&self, f: &(impl Fn(&X) -> Y + Sync), opts: &PmapOptions, x: &X) -> Result<Y>
    where
        X: Tree + Sync,
        Y: Tree + Send,
    {
        self.world.check_thread("distributed::pmap")?;
        let group = self.group();
        let name = opts.axis_name.as_deref().unwrap_or("");
        let outer = DeviceAxis { name: name.into(), index: self.rank(), size: self.size(), exchange: group.clone() };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| try_pmap_spanning(f, opts, x, &outer))) {
            Ok(Ok(y)) => {
                group.finish();
                Ok(y)
            }
            Ok(Err(e)) => {
                group.fail(&e.to_string());
                Err(e)
            }
            Err(panic) => {
                group.fail(&xform_ops::panic_text(&*panic));
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// [`Processes::try_pmap`] as a function that panics on errors.
    pub fn pmap<'a, X, Y>(&'a self, f: impl Fn(&X) -> Y + Sync + 'a, opts: PmapOptions) -> impl Fn(&X) -> Y + 'a
    where
        X: Tree + Sync,
        Y: Tree + Send,
    {
        move |x: &X| crate::OrRaise::or_raise(self.try_pmap(&f, &opts, x))
    }

    /// Rank `root`'s values of `tree` on every process (parameters
    /// broadcast once, so that every process starts from the same ones).
    ///
    /// # Errors
    /// A rank out of range, another rank's failure or a timeout, or what
    /// the serialization raises.
    pub fn broadcast<T: Tree>(&self, tree: &T, root: usize) -> Result<T> {
        let op = "distributed::broadcast";
        self.world.check_thread(op)?;
        if root >= self.size() {
            return Err(Error::invalid(op, format!("root {root} is not a rank of {} processes", self.size())));
        }
        let group = self.group();
        let what = format!("broadcast from rank {root}");
        // the root's serialization error reaches every rank
        let (mine, local) = if self.rank() == root {
            match crate::safetensors::to_bytes(tree) {
                Ok(bytes) => (bytes, None),
                Err(e) => (Vec::new(), Some(e)),
            }
        } else {
            (Vec::new(), None)
        };
        let frame = match &local {
            Some(e) => framed("failed", &e.to_string(), &[]),
            None => message(&what, &mine),
        };
        let r = group.round(&what, frame).and_then(|all| match &all[root] {
            Some(theirs) => crate::safetensors::from_bytes(theirs.payload(), tree),
            None => match local {
                Some(e) => Err(e),
                None => crate::safetensors::from_bytes(&mine, tree),
            },
        });
        group.finish();
        r
    }
}

/// A message of a round: a header (its length, then `status` and `what`
/// as UTF-8 separated by a NUL) and the payload bytes, in one buffer.
fn message(what: &str, payload: &[u8]) -> Vec<u8> {
    framed("ok", what, payload)
}

fn framed(status: &str, what: &str, payload: &[u8]) -> Vec<u8> {
    let head = format!("{status}\0{what}");
    let mut out = Vec::with_capacity(8 + head.len() + payload.len());
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// A received message's status, `what` and payload.
fn unframe(bytes: &[u8]) -> Option<(&str, &str, &[u8])> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let head = std::str::from_utf8(bytes.get(8..8 + len)?).ok()?;
    let (status, what) = head.split_once('\0')?;
    Some((status, what, &bytes[8 + len..]))
}

/// A message received in a round (its payload is read in place).
struct Received {
    bytes: Vec<u8>,
    start: usize,
}

impl Received {
    fn payload(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

/// An operand as a payload: its dtype, rank and dimensions, then its
/// elements' bytes as they lie in memory (the processes of one job run on
/// one machine type: MPI's own byte-order conversion is not used), one
/// copy out of the array; [`decode`] is one copy back.
fn encode(t: &Tensor, out: &mut Vec<u8>) -> Result<()> {
    fn raw<T: xform_kernels::Element>(t: &Tensor, out: &mut Vec<u8>) -> Result<()> {
        let v: Vec<T> = t.try_to_vec()?;
        // SAFETY: xform's element types are plain values without padding
        // or pointers (floats, integers, bool as one byte), so their
        // memory is fully initialized bytes.
        let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(&v[..])) };
        out.extend_from_slice(bytes);
        Ok(())
    }
    let dtype = t.dtype();
    let code = DType::ALL.iter().position(|&d| d == dtype).unwrap_or(0) as u8;
    let dims = t.shape().dims().to_vec();
    out.reserve(2 + 8 * dims.len() + t.numel() * dtype.size_bytes());
    out.push(code);
    out.push(dims.len() as u8);
    for d in &dims {
        out.extend_from_slice(&(*d as u64).to_le_bytes());
    }
    match dtype {
        DType::F32 => raw::<f32>(t, out),
        DType::F64 => raw::<f64>(t, out),
        DType::F16 => raw::<half::f16>(t, out),
        DType::BF16 => raw::<half::bf16>(t, out),
        DType::I32 => raw::<i32>(t, out),
        DType::I64 => raw::<i64>(t, out),
        DType::U32 => raw::<u32>(t, out),
        DType::Bool => raw::<bool>(t, out),
    }
}

/// The operand [`encode`] wrote.
fn decode(bytes: &[u8]) -> Option<Tensor> {
    fn raw<T: xform_kernels::Element>(data: &[u8], dims: &[usize]) -> Option<Tensor> {
        let n: usize = dims.iter().product();
        if data.len() != n * std::mem::size_of::<T>() {
            return None;
        }
        let mut v: Vec<T> = Vec::with_capacity(n);
        // SAFETY: `v` has room for `n` elements, `data` holds exactly
        // `n` elements' bytes written by `encode` on a process of the same
        // machine type, and every bit pattern of the numeric types is a
        // value (bool is checked by the caller).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), v.as_mut_ptr().cast::<u8>(), data.len());
            v.set_len(n);
        }
        Some(Tensor::from_vec(v, dims.to_vec()))
    }
    let dtype = *DType::ALL.get(*bytes.first()? as usize)?;
    let rank = *bytes.get(1)? as usize;
    let mut dims = Vec::with_capacity(rank);
    for k in 0..rank {
        dims.push(u64::from_le_bytes(bytes.get(2 + 8 * k..10 + 8 * k)?.try_into().ok()?) as usize);
    }
    let data = bytes.get(2 + 8 * rank..)?;
    match dtype {
        DType::F32 => raw::<f32>(data, &dims),
        DType::F64 => raw::<f64>(data, &dims),
        DType::F16 => raw::<half::f16>(data, &dims),
        DType::BF16 => raw::<half::bf16>(data, &dims),
        DType::I32 => raw::<i32>(data, &dims),
        DType::I64 => raw::<i64>(data, &dims),
        DType::U32 => raw::<u32>(data, &dims),
        DType::Bool => {
            let n: usize = dims.iter().product();
            (data.len() == n && data.iter().all(|&b| b <= 1))
                .then(|| Tensor::from_vec(data.iter().map(|&b| b != 0).collect::<Vec<bool>>(), dims))
        }
    }
}

/// What a rank sends in a round.
enum Outgoing {
    /// The same message to every other rank.
    Same(Vec<u8>),
    /// Message `k` to rank `k` (this rank's own is not sent).
    Each(Vec<Vec<u8>>),
}

/// One group of exchanges across the processes (a `run`, a spanning
/// `pmap`, a `broadcast`): point-to-point messages under the group's tag,
/// sent without blocking and received by polling, so that a wait can
/// end at the timeout and name the ranks that did not arrive.
struct MpiExchange {
    world: Arc<World>,
    tag: i32,
    timeout: Duration,
    state: Mutex<GroupState>,
}

struct GroupState {
    /// Why the group can no longer exchange (a rank failed or timed out).
    broken: Option<String>,
    /// The last exchange failed alike at every rank (different
    /// collectives or operands, a failed rank's notice): a failure that
    /// follows from it needs no notice.
    peers_know: bool,
}

/// Non-blocking sends of one leaked buffer to several ranks: the buffer is
/// reclaimed once every send completed, and leaked if the group gives up
/// on them (MPI may still read it).
struct PendingSend {
    requests: Vec<Request<'static, [u8], StaticScope>>,
    buffer: *mut [u8],
}

// SAFETY: the requests are only tested under the world's `pending` mutex,
// from the thread allowed to call MPI (every path checks
// `World::check_thread` first) or when the world is dropped (its last
// handle, on that thread in a program that follows MPI's funneled use);
// the buffer is owned by the pending send alone.
unsafe impl Send for PendingSend {}

impl PendingSend {
    /// Tests the sends; true when all completed (the buffer is then freed).
    fn complete(&mut self) -> bool {
        let mut left = Vec::new();
        for r in self.requests.drain(..) {
            if let Err(r) = r.test() {
                left.push(r);
            }
        }
        self.requests = left;
        if self.requests.is_empty() {
            // SAFETY: every send that read the buffer completed, and the
            // buffer came from `Box::leak` in `MpiExchange::send_all`.
            unsafe { drop(Box::from_raw(self.buffer)) };
            true
        } else {
            false
        }
    }

    /// Gives up on the sends that did not complete: their buffer leaks.
    fn abandon(self) {
        for r in self.requests {
            // SAFETY: the request stays active inside MPI with a buffer
            // that is never freed (leaked), so MPI never reads freed
            // memory; dropping the handle unchecked only gives up the
            // ability to wait for it.
            let _ = unsafe { r.into_raw() };
        }
    }
}

impl MpiExchange {
    fn state(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `bytes` to every other rank without waiting for them.
    fn send_all(&self, comm: &SimpleCommunicator, bytes: Vec<u8>) {
        let others = (0..self.world.size).filter(|&k| k != self.world.rank).collect();
        self.send(comm, bytes, others);
    }

    /// Sends `bytes` to the ranks `to` without waiting for them.
    fn send(&self, comm: &SimpleCommunicator, bytes: Vec<u8>, to: Vec<usize>) {
        let buffer: &'static mut [u8] = Box::leak(bytes.into_boxed_slice());
        let ptr: *mut [u8] = buffer;
        let shared: &'static [u8] = buffer;
        let requests = to
            .into_iter()
            .map(|k| comm.process_at_rank(k as i32).immediate_send_with_tag(StaticScope, shared, self.tag))
            .collect();
        let mut send = PendingSend { requests, buffer: ptr };
        let mut pending = self.world.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain_mut(|p| !p.complete());
        if !send.complete() {
            pending.push(send);
        }
    }

    /// One round: `mine` to every rank and every other rank's message, in
    /// rank order (`None` at this rank's place).
    fn round(&self, what: &str, mine: Vec<u8>) -> Result<Vec<Option<Received>>> {
        self.round_of(what, Outgoing::Same(mine))
    }

    /// One round in which each rank gets its own message (`each[k]` to
    /// rank `k`; this rank's own is not sent).
    fn round_each(&self, what: &str, each: Vec<Vec<u8>>) -> Result<Vec<Option<Received>>> {
        self.round_of(what, Outgoing::Each(each))
    }

    fn round_of(&self, what: &str, outgoing: Outgoing) -> Result<Vec<Option<Received>>> {
        let op = "distributed";
        self.world.check_thread(op)?;
        if let Some(why) = &self.state().broken {
            return Err(Error::invalid(
                op,
                format!("{what}: this process group is broken by an earlier failure ({why}); start a new run"),
            ));
        }
        let comm = self.world.comm.lock().unwrap_or_else(|e| e.into_inner());
        let (me, n) = (self.world.rank, self.world.size);
        // MPI counts a message's elements in an i32: a larger one is told
        // to the others as this rank's failure
        let largest = match &outgoing {
            Outgoing::Same(m) => m.len(),
            Outgoing::Each(each) => {
                each.iter().enumerate().filter(|(k, _)| *k != me).map(|(_, m)| m.len()).max().unwrap_or(0)
            }
        };
        let too_big = (largest > i32::MAX as usize)
            .then(|| format!("{what}: a message of {largest} bytes is past MPI's limit of 2^31 - 1 bytes"));
        match (&too_big, outgoing) {
            (Some(e), _) => self.send_all(&comm, framed("failed", &format!("rank {me}: {e}"), &[])),
            (None, Outgoing::Same(mine)) => self.send_all(&comm, mine),
            (None, Outgoing::Each(each)) => {
                for (k, m) in each.into_iter().enumerate().filter(|(k, _)| *k != me) {
                    self.send(&comm, m, vec![k]);
                }
            }
        }
        let mut got: Vec<Option<Vec<u8>>> = vec![None; n];
        let deadline = Instant::now() + self.timeout;
        let mut idle = 0u32;
        loop {
            let mut progressed = false;
            for k in (0..n).filter(|&k| k != me) {
                if got[k].is_none() {
                    let probed: Option<(Message, Status)> =
                        comm.process_at_rank(k as i32).immediate_matched_probe_with_tag(self.tag);
                    if let Some(probed) = probed {
                        got[k] = Some(probed.matched_receive_vec::<u8>().0);
                        progressed = true;
                    }
                }
            }
            let missing: Vec<usize> = (0..n).filter(|&k| k != me && got[k].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let ranks = missing.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
                let why = format!(
                    "{what} timed out after {:.1} s waiting for rank(s) {ranks} (a process that is stuck, stopped, or \
                     runs other collectives; Processes::set_timeout or XFORM_COLLECTIVE_TIMEOUT sets the limit)",
                    self.timeout.as_secs_f64()
                );
                {
                    let mut state = self.state();
                    state.broken = Some(format!("rank {me}: {why}"));
                    state.peers_know = true;
                }
                // the late ranks learn of it at their next round
                self.send_all(&comm, framed("failed", &format!("rank {me}: {why}"), &[]));
                return Err(Error::invalid(op, why));
            }
            // spin briefly, then back off to sleeping (other processes and
            // this process's device threads may share the cores), at most
            // 200 µs at a time: a round's latency is part of every step
            idle = if progressed { 0 } else { idle + 1 };
            if idle < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50 * u64::from((idle / 64).min(4))));
            }
        }
        drop(comm);
        let mut out = Vec::with_capacity(n);
        let mut failed = Vec::new();
        let mut other = None;
        for (k, g) in got.into_iter().enumerate() {
            let Some(bytes) = g else {
                out.push(None);
                continue;
            };
            let (status, theirs, payload) = unframe(&bytes)
                .ok_or_else(|| Error::invalid(op, format!("{what}: rank {k} sent a message that is not xform's")))?;
            let start = bytes.len() - payload.len();
            if status == "failed" {
                failed.push(format!("rank {k} failed: {theirs}"));
            } else if theirs != what && other.is_none() {
                other = Some(format!(
                    "the processes ran different collectives at one step ({what} here, {theirs} on rank {k}): every \
                     process must run the same sequence of collectives"
                ));
            }
            out.push(Some(Received { bytes, start }));
        }
        let mut state = self.state();
        if !failed.is_empty() {
            let why = failed.join("; ");
            state.broken = Some(why.clone());
            state.peers_know = true;
            return Err(Error::invalid(op, format!("{what}: {why}")));
        }
        if let Some(e) = too_big {
            state.broken = Some(e.clone());
            state.peers_know = true;
            return Err(Error::invalid(op, e));
        }
        if let Some(e) = other {
            state.peers_know = true;
            return Err(Error::invalid(op, e));
        }
        state.peers_know = false;
        Ok(out)
    }

    /// Tells the other ranks that this one failed (unless they know), so
    /// that their pending collective fails instead of waiting.
    fn notify_failure(&self, error: &str) {
        if self.world.check_thread("distributed").is_err() {
            return;
        }
        {
            let mut state = self.state();
            if state.peers_know {
                return;
            }
            state.peers_know = true;
            state.broken.get_or_insert_with(|| format!("rank {} failed", self.world.rank));
        }
        let comm = self.world.comm.lock().unwrap_or_else(|e| e.into_inner());
        self.send_all(&comm, framed("failed", error, &[]));
    }

    /// The group's end after success: completed sends are reaped (the
    /// others stay pending: the other ranks receive them when they get
    /// there, and the next exchange or finalization reaps them).
    fn finish(&self) {
        if self.world.check_thread("distributed").is_ok() {
            let _comm = self.world.comm.lock().unwrap_or_else(|e| e.into_inner());
            self.world.pending.lock().unwrap_or_else(|e| e.into_inner()).retain_mut(|p| !p.complete());
        }
    }

    /// The group's end after a failure: the other ranks are told.
    fn fail(&self, error: &str) {
        self.notify_failure(error);
        self.finish();
    }
}

impl Drop for World {
    /// Before MPI is finalized: the pending sends get a short while to
    /// complete (another rank may still be receiving), then are given up.
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        let pending = self.pending.get_mut().unwrap_or_else(|e| e.into_inner());
        loop {
            pending.retain_mut(|p| !p.complete());
            if pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in pending.drain(..) {
            p.abandon();
        }
    }
}

/// The process axis's exchange: every process's operand to every process.
impl Exchange for MpiExchange {
    fn exchange(&self, index: usize, what: &str, value: Option<Array>) -> Result<Vec<Option<Array>>> {
        debug_assert_eq!(index, self.world.rank);
        if let Some(a) = value.as_ref().filter(|a| matches!(a.device(), xform_ops::Device::Cuda(_))) {
            let gpu = self.world.gpu.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(member) = gpu.as_ref().filter(|m| m.device() == a.device()) {
                // agree on the collective and the operand through MPI
                // (NCCL has no timeout), then gather GPU to GPU
                let described = format!("{what} of {}{}", a.dtype.short_name(), a.shape());
                self.round(&described, message(&described, &[]))?;
                let all = Tensor::from_array(member.all_gather(a)?);
                return (0..self.world.size).map(|k| Ok(all.select(0, k as isize).array())).collect();
            }
        }
        // no operand (axis_index) is an empty payload
        let mut msg = message(what, &[]);
        if let Some(a) = &value {
            encode(&Tensor::from_array(a.clone()), &mut msg)?;
        }
        let all = self.round(what, msg)?;
        let mut out = Vec::with_capacity(all.len());
        for (k, r) in all.into_iter().enumerate() {
            out.push(match r {
                None => value.clone(),
                Some(r) if r.payload().is_empty() => None,
                Some(r) => Some(decode(r.payload()).and_then(|t| t.array()).ok_or_else(|| {
                    Error::invalid("distributed", format!("{what}: rank {k} sent an operand that cannot be read"))
                })?),
            });
        }
        Ok(out)
    }

    /// Each rank gets only its own part (a message per rank), unless the
    /// parts live on a GPU of this process's NCCL group (then they are
    /// gathered GPU to GPU).
    fn exchange_each(&self, index: usize, what: &str, parts: Vec<Array>) -> Result<Vec<Array>> {
        if parts.iter().any(|a| matches!(a.device(), xform_ops::Device::Cuda(_))) {
            return xform_ops::interp::exchange_each_by_gather(self, index, what, parts);
        }
        let me = self.world.rank;
        let mut own = None;
        let mut each = Vec::with_capacity(parts.len());
        for (k, a) in parts.into_iter().enumerate() {
            let mut msg = message(what, &[]);
            if k == me {
                own = Some(a);
            } else {
                encode(&Tensor::from_array(a), &mut msg)?;
            }
            each.push(msg);
        }
        let all = self.round_each(what, each)?;
        let mut out = Vec::with_capacity(all.len());
        for (k, r) in all.into_iter().enumerate() {
            out.push(match r {
                None => {
                    own.take().ok_or_else(|| Error::invalid("distributed", format!("{what}: no part for rank {k}")))?
                }
                Some(r) => decode(r.payload()).and_then(|t| t.array()).ok_or_else(|| {
                    Error::invalid("distributed", format!("{what}: rank {k} sent a part that cannot be read"))
                })?,
            });
        }
        Ok(out)
    }

    fn noun(&self) -> &'static str {
        "rank"
    }
}
