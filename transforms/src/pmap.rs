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
//! enclosing the `pmap` call are unbound on the device threads. CUDA
//! devices (one shard per GPU, collectives through NCCL) are not yet
//! supported: `pmap` runs on the CPU devices.

use crate::tree::{Leaves, Tree};
use crate::vmap::{mapped_axes, resolve_axes, try_vmap_call, Axes, VmapOptions};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use xform_ops::interp::{with_device_axis, DeviceAxis, Exchange};
use xform_ops::{catch, lax, Array, AxisName, Error, OrRaise, Result, Tensor};

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
    let leaves = x.leaves();
    let vopts = VmapOptions {
        in_axes: opts.in_axes.clone(),
        out_axes: opts.out_axes.clone(),
        axis_name: opts.axis_name.clone(),
        ..VmapOptions::default()
    };
    // tracers belong to their transform's thread: under a transform, pmap
    // is vmap of the same name (the same numbers, on this thread)
    if xform_ops::interp::stack_depth() > 0 || leaves.iter().any(Tensor::is_tracer) {
        return try_vmap_call(f, &vopts, x);
    }
    let (mapped, size) = mapped_axes("pmap", x, &leaves, &opts.in_axes, None)?;
    let Some(n) = size else {
        return Err(Error::batching("pmap", "no argument is mapped (all in_axes are None)"));
    };
    let devices = opts.devices.unwrap_or_else(cpu_device_count);
    if n == 0 || n > devices {
        return Err(Error::batching(
            "pmap",
            format!(
                "the mapped axis has {n} positions but there are {devices} CPU device(s): it needs 1 to {devices} \
                 (set_cpu_device_count or XFORM_CPU_DEVICES exposes more)"
            ),
        ));
    }
    let name: AxisName = opts.axis_name.as_deref().unwrap_or("").into();
    let exchange = Arc::new(ThreadExchange::new(n));
    let pools = device_pools(n);
    let results: Vec<std::thread::Result<Result<(Y, Leaves)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let (leaves, mapped, exchange, name, pool) =
                    (&leaves, &mapped, exchange.clone(), name.clone(), &pools[k]);
                std::thread::Builder::new()
                    .name(format!("xform-cpu-device-{k}"))
                    .stack_size(DEVICE_STACK)
                    .spawn_scoped(scope, move || {
                        // a failure at this position releases the others
                        let abort = AbortOnDrop(&exchange);
                        let r = pool.install(|| {
                            catch(|| {
                                let shard = shard_of(leaves, mapped, k).or_raise();
                                let axis = DeviceAxis { name, index: k, size: n, exchange: exchange.clone() };
                                let y = with_device_axis(axis, || f(&x.with_leaves(shard)));
                                let outs = y.leaves();
                                (y, outs)
                            })
                        });
                        if r.is_ok() {
                            std::mem::forget(abort);
                        }
                        r
                    })
                    .expect("a device thread")
            })
            .collect();
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

/// The stack of a device's thread (transforms nest deeply on it).
const DEVICE_STACK: usize = 64 << 20;

/// Position `k`'s arguments: its slice of each mapped leaf and every
/// unmapped leaf, each a copy of its own on this device's thread.
fn shard_of(leaves: &Leaves, mapped: &[Option<usize>], k: usize) -> Result<Leaves> {
    let mut out = Leaves::new();
    for (l, m) in leaves.iter().zip(mapped) {
        out.push(match m {
            Some(a) => {
                let part = lax::slice_axis(l, *a, k, k + 1)?;
                let mut shape = part.shape();
                shape.0.remove(*a);
                lax::copy(&lax::reshape(&part, &shape)?)?
            }
            None => lax::copy(l)?,
        });
    }
    Ok(out)
}

/// One rayon pool per device, the machine's threads split among `n`
/// devices (at least one each), made once per device count.
fn device_pools(n: usize) -> Arc<Vec<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<Vec<(usize, Arc<Vec<rayon::ThreadPool>>)>>> = OnceLock::new();
    let cache = POOLS.get_or_init(|| Mutex::new(Vec::new()));
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = c.iter().find(|(m, _)| *m == n) {
        return p.clone();
    }
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let each = (threads / n).max(1);
    let pools: Vec<rayon::ThreadPool> = (0..n)
        .map(|k| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(each)
                .stack_size(DEVICE_STACK)
                .thread_name(move |t| format!("xform-cpu-device-{k}-worker-{t}"))
                .build()
                .expect("a device's thread pool")
        })
        .collect();
    let p = Arc::new(pools);
    c.push((n, p.clone()));
    p
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

/// The positions of one pmap call exchanging values through shared
/// memory: each deposits its value, waits for all, reads all, and waits
/// again before the slots are reused (a two-phase barrier that a failed
/// position can break).
struct ThreadExchange {
    n: usize,
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
    aborted: bool,
}

impl ThreadExchange {
    fn new(n: usize) -> ThreadExchange {
        ThreadExchange {
            n,
            state: Mutex::new(Round {
                values: vec![None; n],
                what: vec![None; n],
                arrived: 0,
                departed: 0,
                generation: 0,
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
}

impl Exchange for ThreadExchange {
    fn exchange(&self, index: usize, what: &str, value: Option<Array>) -> Result<Vec<Option<Array>>> {
        let aborted = || Error::invalid("pmap", ABORTED);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // wait until the previous round's readers are gone
        while s.departed != 0 && !s.aborted {
            s = self.turn.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.aborted {
            return Err(aborted());
        }
        s.values[index] = value;
        s.what[index] = Some(what.to_string());
        s.arrived += 1;
        let generation = s.generation;
        if s.arrived == self.n {
            s.generation += 1;
            self.turn.notify_all();
        } else {
            while s.generation == generation && !s.aborted {
                s = self.turn.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            if s.aborted {
                return Err(aborted());
            }
        }
        let mismatch = s.what.iter().flatten().find(|w| w.as_str() != what).cloned();
        let all = s.values.clone();
        s.departed += 1;
        if s.departed == self.n {
            // the last reader clears the round
            s.arrived = 0;
            s.departed = 0;
            s.values.iter_mut().for_each(|v| *v = None);
            s.what.iter_mut().for_each(|w| *w = None);
            self.turn.notify_all();
        }
        match mismatch {
            Some(other) => Err(Error::invalid(
                "pmap",
                format!(
                    "the devices ran different collectives at one step ({what} here, {other} on another device): \
                     every device must run the same sequence of collectives"
                ),
            )),
            None => Ok(all),
        }
    }
}
