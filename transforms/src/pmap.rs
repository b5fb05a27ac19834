//! `pmap`: a function mapped over a leading axis whose positions run on
//! separate devices, each on a thread of its own, with the collectives of
//! a named axis (`lax::psum(&x, "devices")`, `all_gather`, ...) exchanging
//! values among them.
//!
//! The devices are CPU devices: a process exposes
//! [`cpu_device_count`] of them (1 unless [`set_cpu_device_count`] or the
//! `XFORM_CPU_DEVICES` environment variable says more, as JAX's
//! `--xla_force_host_platform_device_count`), each running its shard on
//! its own thread with its own rayon pool (the machine's threads split
//! among the devices). They share the host's memory: a shard is handed to
//! its device as a copy (as JAX copies shards to devices), and a collective
//! hands the other devices its operand (`xform_ops::interp::Exchange`),
//! then every device runs the same batch rule `vmap` runs on the stacked
//! operands, so `pmap(f)` equals `vmap(f)` with the same axis name, bit
//! for bit in the collectives (the rest runs per device, as a loop over the
//! examples would: where vmap turns a product into one batched GEMM, the
//! last bit may differ, as it does between vmap and a loop).
//!
//! Where xform differs from JAX, deliberately: `pmap` called on tracers
//! of an enclosing transform (`grad(pmap(f))`, `vmap(pmap(f))`, `pmap`
//! inside `jit`) runs as `vmap` with the same axis name on the calling
//! thread (the same numbers, without device parallelism), since a
//! transform's tracers belong to its thread; JAX stages pmap as a
//! primitive instead. Collectives inside `f` over the names of maps
//! enclosing the `pmap` call are unbound on the device threads.
//!
//! `PmapOptions::cuda()` maps over GPUs instead (the `cuda` feature): one
//! shard per device `cuda:0..n`, each on a thread of its own; a
//! collective agrees on its operand through the same barrier (its timeout
//! and mismatch errors, which NCCL lacks) and then gathers the operands
//! through NCCL on every GPU, where the same batch rule runs. NCCL is
//! loaded at run time: its absence is an error naming it.

use crate::tree::{Leaves, Tree};
use crate::vmap::{mapped_axes, resolve_axes, try_vmap_call, Axes, VmapOptions};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use xform_ops::interp::{with_device_axis, DeviceAxis, Exchange};
use xform_ops::{catch, lax, panic_text, Array, AxisName, Device, Error, GroupMember, OrRaise, Result, Tensor};

static CPU_DEVICES: AtomicUsize = AtomicUsize::new(0);

/// The number of CPU devices this process exposes to [`pmap`]: set by
/// [`set_cpu_device_count`], else by the `XFORM_CPU_DEVICES` environment
/// variable, else 1.
pub fn cpu_device_count() -> usize {
    match CPU_DEVICES.load(Ordering::Relaxed) {
        0 => std::env::var("XFORM_CPU_DEVICES").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(1),
        n => n,
    }
}

/// Exposes `n` CPU devices (at least 1) to [`pmap`], as JAX's
/// `--xla_force_host_platform_device_count`.
pub fn set_cpu_device_count(n: usize) {
    CPU_DEVICES.store(n.max(1), Ordering::Relaxed);
}

/// Options of [`pmap_with`].
#[derive(Clone, Debug, Default)]
pub struct PmapOptions {
    /// The mapped axis of each input leaf, a tree prefix as `vmap`'s
    /// (default: 0 for all; `None` leaves are given whole to every device).
    pub in_axes: Axes,
    /// Where the mapped axis goes in each output leaf (default 0); `None`
    /// takes device 0's output (one that is the same on every device).
    pub out_axes: Axes,
    /// The name collectives inside `f` refer to the mapped axis by.
    pub axis_name: Option<String>,
    /// The devices to use (default: [`cpu_device_count`]); the mapped axis
    /// may be at most this long.
    pub devices: Option<usize>,
    /// How long a collective waits for the other devices before it fails
    /// naming those that did not arrive (default:
    /// `XFORM_COLLECTIVE_TIMEOUT` seconds, else 300 s).
    pub timeout: Option<Duration>,
    /// Map over CUDA devices `cuda:0..n` instead of CPU devices: each
    /// shard is copied to its GPU, runs there on a thread of its own, and
    /// collectives gather operands through NCCL (needs the `cuda` feature
    /// and NCCL at run time; the outputs are joined on the first input
    /// leaf's device).
    pub cuda: bool,
}

impl PmapOptions {
    /// The defaults: axis 0 of every input and output leaf, no name.
    pub fn new() -> PmapOptions {
        PmapOptions::default()
    }
    /// Sets `in_axes`.
    pub fn in_axes(mut self, axes: impl Into<Axes>) -> PmapOptions {
        self.in_axes = axes.into();
        self
    }
    /// Sets `out_axes`.
    pub fn out_axes(mut self, axes: impl Into<Axes>) -> PmapOptions {
        self.out_axes = axes.into();
        self
    }
    /// Names the mapped axis for collectives.
    pub fn axis_name(mut self, name: impl Into<String>) -> PmapOptions {
        self.axis_name = Some(name.into());
        self
    }
    /// Uses at most `n` devices.
    pub fn devices(mut self, n: usize) -> PmapOptions {
        self.devices = Some(n);
        self
    }
    /// Maps over CUDA devices, collectives through NCCL.
    pub fn cuda(mut self) -> PmapOptions {
        self.cuda = true;
        self
    }
    /// Sets the collectives' timeout.
    pub fn timeout(mut self, timeout: Duration) -> PmapOptions {
        self.timeout = Some(timeout);
        self
    }
}

/// Maps `f` over axis 0 of every input leaf, one position per CPU device,
/// each on its own thread (see the module's documentation).
///
/// ```
/// use xform_ops::{lax, DType, OrRaise, Tensor};
/// use xform_transforms::{pmap_with, set_cpu_device_count, PmapOptions};
/// set_cpu_device_count(4);
/// let xs = Tensor::arange(0.0, 8.0, 1.0, DType::F64).reshape(&[4, 2]);
/// let f = |x: &Tensor| lax::psum(&(x * x), "d").or_raise();
/// let ys = pmap_with(f, PmapOptions::new().axis_name("d"))(&xs);
/// assert_eq!(ys.to_vec::<f64>(), vec![56.0, 84.0, 56.0, 84.0, 56.0, 84.0, 56.0, 84.0]);
/// ```
pub fn pmap<X, Y>(f: impl Fn(&X) -> Y + Sync) -> impl Fn(&X) -> Y
where
    X: Tree + Sync,
    Y: Tree + Send,
{
    pmap_with(f, PmapOptions::default())
}

/// [`pmap`] with options.
pub fn pmap_with<X, Y>(f: impl Fn(&X) -> Y + Sync, opts: PmapOptions) -> impl Fn(&X) -> Y
where
    X: Tree + Sync,
    Y: Tree + Send,
{
    move |x: &X| try_pmap_call(&f, &opts, x).or_raise()
}

/// Calls `pmap_with(f, opts)` on `x`, returning errors instead of
/// panicking.
pub fn try_pmap_call<X, Y>(f: &(impl Fn(&X) -> Y + Sync), opts: &PmapOptions, x: &X) -> Result<Y>
where
    X: Tree + Sync,
    Y: Tree + Send,
{
    pmap_impl(f, opts, x, None)
}

/// `pmap` over an axis that continues past this process: `outer` is this
/// process's position among processes that each run the same call on
/// their own devices (`xform::distributed::Processes::pmap`). The axis
/// has `outer.size` x (this call's devices) positions, process-major:
/// device `k` of process `r` is position `r * devices + k`. `x` holds
/// this process's shards and the result its devices' outputs, as JAX's
/// multi-process `pmap` takes and returns the local devices' shards. A
/// collective gathers the devices' operands here, and the calling thread
/// (the one allowed to talk to the other processes) exchanges them with
/// the other processes through `outer.exchange`, whose name, if any, is
/// ignored: the axis takes `opts.axis_name`.
///
/// # Errors
/// As [`try_pmap_call`], and what the outer exchange raises (another
/// process failed, timed out, or gave other shapes).
pub fn try_pmap_spanning<X, Y>(
    f: &(impl Fn(&X) -> Y + Sync),
    opts: &PmapOptions,
    x: &X,
    outer: &DeviceAxis,
) -> Result<Y>
where
    X: Tree + Sync,
    Y: Tree + Send,
{
    pmap_impl(f, opts, x, Some(outer))
}

fn pmap_impl<X, Y>(f: &(impl Fn(&X) -> Y + Sync), opts: &PmapOptions, x: &X, outer: Option<&DeviceAxis>) -> Result<Y>
where
    X: Tree + Sync,
    Y: Tree + Send,
{
    let leaves = x.leaves();
    // tracers belong to their transform's thread: under a transform, pmap
    // is vmap of the same name (the same numbers, on this thread)
    if xform_ops::interp::stack_depth() > 0 || leaves.iter().any(Tensor::is_tracer) {
        if outer.is_some() {
            return Err(Error::invalid(
                "pmap",
                "a pmap spanning processes runs outside every transform (the other processes cannot join a \
                 trace): put the transforms inside the mapped function",
            ));
        }
        let vopts = VmapOptions {
            in_axes: opts.in_axes.clone(),
            out_axes: opts.out_axes.clone(),
            axis_name: opts.axis_name.clone(),
            ..VmapOptions::default()
        };
        return try_vmap_call(f, &vopts, x);
    }
    let (mapped, size) = mapped_axes("pmap", x, &leaves, &opts.in_axes, None)?;
    let Some(n) = size else {
        return Err(Error::batching("pmap", "no argument is mapped (all in_axes are None)"));
    };
    if n == 0 {
        return Err(Error::batching("pmap", "the mapped axis has no positions: it needs at least 1"));
    }
    let name: AxisName = opts.axis_name.as_deref().unwrap_or("").into();
    let timeout = opts.timeout.unwrap_or_else(xform_ops::interp::default_collective_timeout);
    let (base, total) = outer.map_or((0, n), |o| (o.index * n, o.size * n));
    let (funnel, requests) = match outer {
        Some(_) => {
            let (tx, rx) = mpsc::channel();
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let barrier = Arc::new(ThreadExchange::new(n, base, timeout, funnel));
    // where the positions run: CPU devices each in a pool of its own, or
    // GPUs whose collectives agree through the barrier and gather through
    // NCCL
    let (placement, exchange): (Placement, Arc<dyn Exchange>) = if opts.cuda {
        if outer.is_some() {
            return Err(Error::invalid(
                "pmap",
                "a pmap over CUDA devices spanning processes is not built: map this process's GPUs and reduce over \
                 the processes with Processes::run",
            ));
        }
        GroupMember::available()?;
        let group = cuda_group(n)?;
        let home = leaves.first().map_or(Device::Cpu, |l| l.device());
        let exchange = Arc::new(CudaExchange { barrier: barrier.clone(), group: (*group).clone() });
        (Placement::Cuda { home, _group: group }, exchange)
    } else {
        let devices = opts.devices.unwrap_or_else(cpu_device_count);
        if n > devices {
            return Err(Error::batching(
                "pmap",
                format!(
                    "the mapped axis has {n} positions but there are {devices} CPU device(s): it needs 1 to \
                     {devices} (set_cpu_device_count or XFORM_CPU_DEVICES exposes more)"
                ),
            ));
        }
        (Placement::Cpu(device_pools(n)?), barrier.clone())
    };
    let results: Vec<std::thread::Result<Result<(Y, Leaves)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let (leaves, mapped, barrier, exchange, name, placement) =
                    (&leaves, &mapped, &barrier, exchange.clone(), name.clone(), &placement);
                std::thread::Builder::new()
                    .name(format!("xform-{}-device-{k}", placement.kind()))
                    .stack_size(DEVICE_STACK)
                    .spawn_scoped(scope, move || {
                        // a failure at this position releases the others;
                        // the calling thread learns that it is done
                        let done = DoneOnDrop(barrier);
                        let abort = AbortOnDrop(barrier);
                        let r = placement.run(k, || {
                            catch(|| {
                                let shard = placement.shard(shard_of(leaves, mapped, k).or_raise(), k).or_raise();
                                let axis = DeviceAxis { name, index: base + k, size: total, exchange };
                                let y = with_device_axis(axis, || f(&x.with_leaves(shard)));
                                let outs = placement.home(y.leaves()).or_raise();
                                (y, outs)
                            })
                        });
                        if r.is_ok() {
                            std::mem::forget(abort);
                        }
                        drop(done);
                        r
                    })
                    .expect("a device thread")
            })
            .collect();
        if let (Some(outer), Some(rx)) = (outer, &requests) {
            serve_outer(&barrier, rx, outer, n);
        }
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut outs: Vec<(Y, Leaves)> = Vec::with_capacity(n);
    let mut errors: Vec<Error> = Vec::new();
    for r in results {
        match r {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(Err(e)) => errors.push(e),
            Ok(Ok(o)) => outs.push(o),
        }
    }
    // the failure that released the others, not their aborts
    if let Some(i) = errors.iter().position(|e| !is_abort(e)).or((!errors.is_empty()).then_some(0)) {
        return Err(errors.swap_remove(i));
    }
    let n_out = outs[0].1.len();
    let out_axes = resolve_axes("out_axes", &opts.out_axes, n_out, || outs[0].0.skeleton())?;
    let mut joined = Leaves::new();
    for (i, oa) in out_axes.iter().enumerate() {
        joined.push(match oa {
            None => outs[0].1[i].clone(),
            Some(a) => {
                let r = outs[0].1[i].rank() as isize + 1;
                let to = if *a < 0 { a + r } else { *a };
                if to < 0 || to >= r {
                    return Err(Error::batching("pmap", format!("out_axes {a} is out of range (rank {r})")));
                }
                let parts: Vec<Tensor> =
                    outs.iter().map(|o| lax::expand_dims(&o.1[i], to as usize)).collect::<Result<_>>()?;
                lax::concatenate(&parts, to as usize)?
            }
        });
    }
    let (y, _) = outs.swap_remove(0);
    Ok(y.with_leaves(joined))
}

/// Where a pmap's positions run.
enum Placement {
    /// CPU devices, each with a rayon pool of its own.
    Cpu(DevicePools),
    /// GPUs `cuda:0..n`; outputs go back to `home`, the input's device.
    Cuda { home: Device, _group: CudaGroup },
}

impl Placement {
    fn kind(&self) -> &'static str {
        match self {
            Placement::Cpu(_) => "cpu",
            Placement::Cuda { .. } => "cuda",
        }
    }

    /// Runs position `k`'s work (in its pool, on the CPU).
    fn run<R: Send>(&self, k: usize, f: impl FnOnce() -> R + Send) -> R {
        match self {
            Placement::Cpu(pools) => pools[k].install(f),
            Placement::Cuda { .. } => f(),
        }
    }

    /// Position `k`'s arguments on its device.
    fn shard(&self, shard: Leaves, k: usize) -> Result<Leaves> {
        match self {
            Placement::Cpu(_) => Ok(shard),
            Placement::Cuda { .. } => shard.iter().map(|l| l.try_to_device(Device::Cuda(k))).collect(),
        }
    }

    /// A position's outputs where they are joined.
    fn home(&self, outs: Leaves) -> Result<Leaves> {
        match self {
            Placement::Cpu(_) => Ok(outs),
            Placement::Cuda { home, .. } => outs.iter().map(|l| l.try_to_device(*home)).collect(),
        }
    }
}

/// A CUDA pmap's NCCL members, one per GPU (held by one call at a time:
/// calls on one communicator may not overlap; making one is a collective
/// initialization, so idle groups are kept).
type CudaGroup = Checkout<Arc<Vec<Mutex<GroupMember>>>>;

static IDLE_GROUPS: Idle<Arc<Vec<Mutex<GroupMember>>>> = Mutex::new(Vec::new());

fn cuda_group(n: usize) -> Result<CudaGroup> {
    Checkout::take(&IDLE_GROUPS, n, || {
        Ok(Arc::new(GroupMember::cuda_devices(n)?.into_iter().map(Mutex::new).collect()))
    })
}

/// The exchange of a CUDA pmap: the positions first agree on the
/// collective and its operand's shape and dtype through the barrier
/// (which times out naming a device that does not arrive, and refuses a
/// mismatch: NCCL can do neither), then gather the operands through NCCL.
struct CudaExchange {
    barrier: Arc<ThreadExchange>,
    group: Arc<Vec<Mutex<GroupMember>>>,
}

impl Exchange for CudaExchange {
    fn exchange(&self, index: usize, what: &str, value: Option<Array>) -> Result<Vec<Option<Array>>> {
        let n = self.group.len();
        let described = match &value {
            Some(a) => format!("{what} of {}{}", a.dtype.short_name(), a.shape()),
            None => what.to_string(),
        };
        self.barrier.exchange(index, &described, None)?;
        let Some(a) = value else {
            return Ok(vec![None; n]);
        };
        let member = self.group[index].lock().unwrap_or_else(|e| e.into_inner());
        let all = Tensor::from_array(member.all_gather(&a)?);
        (0..n).map(|k| Ok(lax::index_axis(&all, 0, k)?.array())).collect()
    }
}

/// What the devices of a spanning pmap ask of the calling thread.
enum Funnel {
    /// Exchange this collective's local operands with the other processes.
    Round(String, Vec<Option<Array>>),
    /// This collective failed among this process's devices: the other
    /// processes are told in its round.
    Failed(String, Error),
    /// A device's thread is done.
    Done,
}

/// The calling thread's part of a spanning pmap: it exchanges each
/// collective's local operands with the other processes (the devices'
/// threads may not talk to them) until every device is done.
fn serve_outer(exchange: &ThreadExchange, requests: &mpsc::Receiver<Funnel>, outer: &DeviceAxis, n: usize) {
    let mut done = 0;
    while done < n {
        match requests.recv() {
            Ok(Funnel::Done) => done += 1,
            Ok(Funnel::Round(what, values)) => {
                // a panic here must still end the round, or the devices
                // (and so this pmap) would wait forever
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    across_processes(outer, &what, values, n)
                }))
                .unwrap_or_else(|panic| {
                    let text = panic_text(&*panic);
                    Err(Error::invalid("pmap", format!("the exchange with the other processes panicked: {text}")))
                });
                exchange.deliver(r)
            }
            Ok(Funnel::Failed(what, e)) => {
                // the other processes take part in this round too: they
                // learn of the failure instead of pairing this process's
                // next round with theirs
                let _ = outer.exchange.exchange(outer.index, &failed_round(&what, &e), None);
                exchange.deliver(Err(e))
            }
            Err(_) => break,
        }
    }
}

/// The description of a round that failed in this process: it differs
/// from every other process's, which then all fail at this round.
fn failed_round(what: &str, e: &Error) -> String {
    format!("{what} [failed among this process's devices: {e}]")
}

/// One collective's operands of this process's devices exchanged with the
/// other processes: each process hands over its devices' operands stacked
/// (none for `axis_index`) and gets every position's, process-major.
fn across_processes(
    outer: &DeviceAxis,
    what: &str,
    values: Vec<Option<Array>>,
    n: usize,
) -> Result<Vec<Option<Array>>> {
    let mine: Vec<Tensor> = values.into_iter().flatten().map(Tensor::from_array).collect();
    // the device count is part of what every process must agree on
    let what = format!("{what} on {n} device(s) per {}", outer.exchange.noun());
    let stacked = || -> Result<Option<Array>> {
        if mine.is_empty() {
            return Ok(None);
        }
        let parts: Vec<Tensor> = mine.iter().map(|t| lax::expand_dims(t, 0)).collect::<Result<_>>()?;
        let all = lax::concatenate(&parts, 0)?;
        all.array().map(Some).ok_or_else(|| Error::invalid("pmap", "internal error: a traced operand"))
    };
    let stacked = match stacked() {
        Ok(s) => s,
        Err(e) => {
            // (operands of different shapes on this process's devices) the
            // other processes still get this round, marked failed
            let _ = outer.exchange.exchange(outer.index, &failed_round(&what, &e), None);
            return Err(e);
        }
    };
    let all = outer.exchange.exchange(outer.index, &what, stacked)?;
    let mut out = Vec::with_capacity(all.len() * n);
    for block in all {
        match block {
            None => out.extend(std::iter::repeat_n(None, n)),
            Some(b) => {
                let b = Tensor::from_array(b);
                for k in 0..n {
                    out.push(lax::index_axis(&b, 0, k)?.array());
                }
            }
        }
    }
    Ok(out)
}

/// The stack of a device's thread (transforms nest deeply on it).
const DEVICE_STACK: usize = 64 << 20;

/// Position `k`'s arguments: its slice of each mapped leaf and every
/// unmapped leaf, each a copy of its own on this device's thread.
fn shard_of(leaves: &Leaves, mapped: &[Option<usize>], k: usize) -> Result<Leaves> {
    let mut out = Leaves::new();
    for (l, m) in leaves.iter().zip(mapped) {
        out.push(match m {
            Some(a) => lax::copy(&lax::index_axis(l, *a, k)?)?,
            None => lax::copy(l)?,
        });
    }
    Ok(out)
}

/// Per-device resources made for `n` devices, kept between calls and held
/// by one call at a time (see [`Checkout`]).
type Idle<T> = Mutex<Vec<(usize, T)>>;

/// A set of per-device resources for `n` devices taken out of `idle` for
/// one call and put back when it returns: two calls at once never share
/// one (a device blocked in a collective holds its pool's worker, which
/// the other call's device would wait for; NCCL calls on one communicator
/// may not overlap).
struct Checkout<T: 'static> {
    n: usize,
    item: Option<T>,
    idle: &'static Idle<T>,
}

impl<T> Checkout<T> {
    /// An idle set for `n` devices, else a new one from `make`.
    fn take(idle: &'static Idle<T>, n: usize, make: impl FnOnce() -> Result<T>) -> Result<Checkout<T>> {
        let kept = {
            let mut sets = idle.lock().unwrap_or_else(|e| e.into_inner());
            sets.iter().position(|(m, _)| *m == n).map(|i| sets.swap_remove(i).1)
        };
        let item = match kept {
            Some(item) => item,
            None => make()?,
        };
        Ok(Checkout { n, item: Some(item), idle })
    }
}

impl<T> std::ops::Deref for Checkout<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.item.as_ref().expect("held until dropped")
    }
}

impl<T> Drop for Checkout<T> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            self.idle.lock().unwrap_or_else(|e| e.into_inner()).push((self.n, item));
        }
    }
}

/// One rayon pool per device, the machine's threads split among the
/// devices (at least one each).
type DevicePools = Checkout<Vec<rayon::ThreadPool>>;

static IDLE_POOLS: Idle<Vec<rayon::ThreadPool>> = Mutex::new(Vec::new());

fn device_pools(n: usize) -> Result<DevicePools> {
    Checkout::take(&IDLE_POOLS, n, || {
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let each = (threads / n).max(1);
        (0..n)
            .map(|k| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(each)
                    .stack_size(DEVICE_STACK)
                    .thread_name(move |t| format!("xform-cpu-device-{k}-worker-{t}"))
                    .build()
                    .map_err(|e| Error::invalid("pmap", format!("cannot start device {k}'s threads: {e}")))
            })
            .collect()
    })
}

const ABORTED: &str = "another device of this pmap failed first";

fn is_abort(e: &Error) -> bool {
    matches!(&e.kind, xform_ops::ErrorKind::Invalid { message } if message.contains(ABORTED))
}

/// Releases the other positions when a device's thread fails.
struct AbortOnDrop<'a>(&'a ThreadExchange);

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Tells a spanning pmap's calling thread that a device is done (however
/// its thread ends).
struct DoneOnDrop<'a>(&'a ThreadExchange);

impl Drop for DoneOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(tx) = &self.0.funnel {
            let _ = tx.lock().unwrap_or_else(|e| e.into_inner()).send(Funnel::Done);
        }
    }
}

/// The positions of one pmap call exchanging values through shared
/// memory: each deposits its value, waits for all, reads all, and waits
/// again before the slots are reused (a two-phase barrier that a failed
/// position breaks, and that fails after `timeout` naming the positions
/// that did not arrive). With a funnel (a pmap spanning processes), the
/// last to arrive hands the round to the calling thread, whose answer
/// (every process's values) all read.
struct ThreadExchange {
    /// This process's positions.
    n: usize,
    /// The axis position of local position 0.
    base: usize,
    timeout: Duration,
    funnel: Option<Mutex<mpsc::Sender<Funnel>>>,
    state: Mutex<Round>,
    turn: Condvar,
}

struct Round {
    values: Vec<Option<Array>>,
    what: Vec<Option<String>>,
    /// Positions that deposited in this round.
    arrived: usize,
    /// Positions that read this round's values.
    departed: usize,
    /// Rounds completed (a waiting position watches it change).
    generation: u64,
    /// The round's outcome, once known: every position's values.
    result: Option<Result<Arc<Vec<Option<Array>>>>>,
    aborted: bool,
}

impl ThreadExchange {
    fn new(n: usize, base: usize, timeout: Duration, funnel: Option<mpsc::Sender<Funnel>>) -> ThreadExchange {
        ThreadExchange {
            n,
            base,
            timeout,
            funnel: funnel.map(Mutex::new),
            state: Mutex::new(Round {
                values: vec![None; n],
                what: vec![None; n],
                arrived: 0,
                departed: 0,
                generation: 0,
                result: None,
                aborted: false,
            }),
            turn: Condvar::new(),
        }
    }

    fn abort(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.aborted = true;
        self.turn.notify_all();
    }

    /// Ends the current round with `result` (the calling thread's answer).
    fn deliver(&self, result: Result<Vec<Option<Array>>>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.result = Some(result.map(Arc::new));
        s.generation += 1;
        self.turn.notify_all();
    }

    /// Waits on the condition until `ready`, an abort, or (while `bounded`
    /// says the wait is for other positions) the deadline.
    fn wait<'a>(
        &'a self,
        mut s: std::sync::MutexGuard<'a, Round>,
        deadline: Instant,
        ready: impl Fn(&Round) -> bool,
        bounded: impl Fn(&Round) -> bool,
        what: &str,
    ) -> Result<std::sync::MutexGuard<'a, Round>> {
        while !ready(&s) && !s.aborted {
            let now = Instant::now();
            if bounded(&s) && now >= deadline {
                let missing: Vec<String> = s
                    .what
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.is_none())
                    .map(|(k, _)| (self.base + k).to_string())
                    .collect();
                s.aborted = true;
                self.turn.notify_all();
                return Err(Error::invalid(
                    "pmap",
                    format!(
                        "{what} timed out after {:.1} s waiting for device(s) {} (a device that is stuck or runs \
                         other collectives; PmapOptions::timeout or XFORM_COLLECTIVE_TIMEOUT sets the limit)",
                        self.timeout.as_secs_f64(),
                        if missing.is_empty() { "of the previous round".to_string() } else { missing.join(", ") }
                    ),
                ));
            }
            let left = if bounded(&s) { deadline - now } else { Duration::from_secs(3600) };
            s = self.turn.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        if s.aborted {
            return Err(Error::invalid("pmap", ABORTED));
        }
        Ok(s)
    }
}

impl Exchange for ThreadExchange {
    fn exchange(&self, index: usize, what: &str, value: Option<Array>) -> Result<Vec<Option<Array>>> {
        let k = index - self.base;
        let deadline = Instant::now() + self.timeout;
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // wait until the previous round's readers are gone
        let mut s = self.wait(s, deadline, |s| s.departed == 0, |_| true, what)?;
        s.values[k] = value;
        s.what[k] = Some(what.to_string());
        s.arrived += 1;
        let generation = s.generation;
        if s.arrived == self.n {
            let mismatch = s.what.iter().flatten().find(|w| w.as_str() != what).cloned();
            let values = s.values.clone();
            match (mismatch, &self.funnel) {
                (Some(other), funnel) => {
                    let e = Error::invalid(
                        "pmap",
                        format!(
                            "the devices ran different collectives at one step ({what} on one, {other} on \
                             another): every device must run the same sequence of collectives"
                        ),
                    );
                    match funnel {
                        None => {
                            s.result = Some(Err(e));
                            s.generation += 1;
                            self.turn.notify_all();
                        }
                        // the calling thread tells the other processes
                        Some(tx) => {
                            let tx = tx.lock().unwrap_or_else(|e| e.into_inner());
                            if tx.send(Funnel::Failed(what.to_string(), e)).is_err() {
                                s.aborted = true;
                                self.turn.notify_all();
                            }
                        }
                    }
                }
                (None, None) => {
                    s.result = Some(Ok(Arc::new(values)));
                    s.generation += 1;
                    self.turn.notify_all();
                }
                (None, Some(tx)) => {
                    let sent =
                        tx.lock().unwrap_or_else(|e| e.into_inner()).send(Funnel::Round(what.to_string(), values));
                    if sent.is_err() {
                        s.aborted = true;
                        self.turn.notify_all();
                    }
                }
            }
        }
        // the others' arrival is bounded by the timeout; the calling
        // thread's exchange with other processes has its own
        let mut s = self.wait(s, deadline, |s| s.generation != generation, |s| s.arrived < self.n, what)?;
        let result = s.result.clone().unwrap_or_else(|| Err(Error::invalid("pmap", "internal error: no result")));
        s.departed += 1;
        if s.departed == self.n {
            // the last reader clears the round
            s.arrived = 0;
            s.departed = 0;
            s.values.iter_mut().for_each(|v| *v = None);
            s.what.iter_mut().for_each(|w| *w = None);
            s.result = None;
            self.turn.notify_all();
        }
        result.map(|all| (*all).clone())
    }
}
