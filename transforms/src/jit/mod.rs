//! `jit(f)`: stage `f` once per input signature into a [`Program`],
//! optimize it, and replay it.
//!
//! NOTE: [jit cache] A jitted function keeps a cache of compiled
//! signatures. The key is what a trace depends on: the input tree's
//! structure (`Skeleton`) and static values (`Tree::static_values`: the
//! `#[tree(static)]` fields whose types are `PartialEq`, compared with it,
//! as JAX compares a pytree's auxiliary data), each leaf's shape, dtype
//! and device, the default device (where tensors `f` creates are placed),
//! and, for [`jit_static`], the static argument (compared with `PartialEq`,
//! as JAX hashes its `static_argnums`). A call whose key is absent traces `f` with
//! the staging interpreter (the user's Rust code runs once per signature;
//! its side effects, such as prints, happen then only), and hands the
//! program to the execution layer (`xform_exec::Executable`: the passes,
//! the replay plan, fusion, the batch split). The cache holds at
//! most [`JitOptions::cache_size`] signatures, least recently used out
//! first; [`Jitted`] shows its statistics and entries, clears it and
//! resizes it.
//!
//! What the key does not see is fixed at the first trace, as in JAX: the
//! values of tensors `f` captures (they enter the program as constants;
//! writing one in place afterwards is an error on the next call, see
//! `Program::check_consts`, but only where the tensor itself is a constant
//! of the program: a value computed from it during the trace, such as
//! `c.exp()`, is a fresh constant that a later write to `c` does not
//! reach; pass values that change as arguments), the static fields of the
//! output tree and those of the input tree that are not compared (a type
//! without `PartialEq`, or a generic field: pass such a value through
//! [`jit_static`]), and
//! Rust control flow on anything but shapes.
//!
//! NOTE: [jit composition] With concrete inputs, a call replays the plan
//! (no interpreter is involved; the inputs' signature was checked by the
//! cache lookup). With tracers of enclosing transforms (`vmap(jit(f))`,
//! `grad(jit(f))`, a jit inside another's trace), the optimized program is
//! evaluated through `bind`, equation by equation, so each enclosing
//! interpreter applies its rules: jit is transparent to transforms, and a
//! jit inside a jit is inlined into the outer program. A function that
//! captures a tracer of an enclosing transform is traced on every call
//! (its program holds that tracer) and not cached. Transforms inside `f`
//! (`jit(vmap(grad(g)))`) run during the trace and stage into one program.
//!
//! In-place writes to the arguments inside `f` are functionalized while
//! tracing (the stack is not empty); the final values of mutated
//! arguments are extra outputs of the program and are written back to the
//! caller's tensors after each call, as `functionalize` does. Reading a
//! value on the Rust side (`item`, `to_vec`) inside `f` is an error that
//! says the tensor is being staged and has no value yet, as under `trace`.

mod cache;

use crate::functionalize::write_back;
use crate::tree::{StaticValue, Tree};
use cache::{Cache, Slot};
pub use cache::{JitEntry, JitStats};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};
use xform_exec::{ExecOptions, Executable};
use xform_ops::interp::with_interpreter;
use xform_ops::staging::Staging;
use xform_ops::{catch, OrRaise, Program, Result, Tensor};

/// Options of [`jit_with`], [`jitted`] and [`jitted_static`].
#[derive(Clone, Debug)]
pub struct JitOptions {
    /// The most signatures kept compiled (least recently used out first;
    /// at least 1). Default 64.
    pub cache_size: usize,
    /// Run the optimizer's passes (`xform_exec`) on the traced program
    /// (default true); without them the program is replayed as traced.
    pub optimize: bool,
    /// On CUDA, replay a signature as a captured CUDA graph from its
    /// second call, when every step can be captured (default true; NOTE:
    /// [cuda graph replay] in `exec/src/graph.rs`).
    pub cuda_graphs: bool,
    /// On the CPU, run sink steps (results that are only returned, such as
    /// per-sample weight gradients) on a helper thread
    /// while the replay goes on, and lend that thread to mid-sized CPU
    /// kernels for half their work (default true; NOTE: [parallel sinks]
    /// in `xform_exec`'s `sinks.rs`, and [paired halves]).
    /// Off, every step runs on the calling thread (and `batch_split` is
    /// off too).
    pub parallel_sinks: bool,
    /// On the CPU, replay a program that never mixes the rows of a batch
    /// (per-sample gradients, a forward pass) as two halves of the batch,
    /// the second on the helper thread of `parallel_sinks` (default true;
    /// NOTE: [batch split] in `xform_exec`'s `split.rs`). The results are the same
    /// bits either way.
    pub batch_split: bool,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions { cache_size: 64, optimize: true, cuda_graphs: true, parallel_sinks: true, batch_split: true }
    }
}

/// One compiled signature.
pub(crate) struct Compiled<Y> {
    /// The optimized program (outputs, then the final values of the
    /// mutated arguments), its replay plan and batch split.
    exec: Executable,
    /// The output tree, its leaves placeholders.
    template: Y,
    /// Number of output leaves.
    n_out: usize,
    /// Leaf indices of the arguments `f` mutated, in the order of the
    /// extra outputs.
    mutated: Vec<usize>,
    /// Outputs copied after each call: the passes made them share storage
    /// with an argument or another output where eager results would not
    /// (`Executable::outputs_to_copy`).
    copied: Vec<usize>,
    /// `(k, i)`: output `k` is argument `i`, which `f` mutated and
    /// returned; a call returns the caller's tensor there, written back,
    /// as eager execution does.
    returned_args: Vec<(usize, usize)>,
    /// `(k, i, views)`: output `k` is a view of argument `i`, which `f`
    /// mutated; a call returns those views of the caller's tensor, written
    /// back, as eager execution does (the view primitives its trace
    /// recorded, applied again with `Tensor::apply_views`).
    returned_views: Vec<(usize, usize, Vec<xform_ops::Prim>)>,
}

/// A jitted function with its cache in view: [`Jitted::call`] (or
/// [`Jitted::call_static`]) runs it, [`Jitted::stats`] and
/// [`Jitted::entries`] show the cache, [`Jitted::clear`] empties it.
/// [`jit`] is the same without the handle.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{jitted, JitOptions};
///
/// let f = jitted(|x: &Tensor| (x.sin() * x).sum(), JitOptions::default());
/// let a = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
/// let b = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
/// f.call(&a);
/// f.call(&a); // same signature: replayed
/// f.call(&b); // a new shape: traced again
/// let s = f.stats();
/// assert_eq!((s.hits, s.misses, s.entries), (1, 2, 2));
/// f.clear();
/// assert_eq!(f.stats().entries, 0);
/// ```
pub struct Jitted<S, X, Y, F> {
    f: F,
    opts: JitOptions,
    cache: Mutex<Cache<S, Compiled<Y>>>,
    _x: PhantomData<fn(&X)>,
}

/// `f` compiled per input signature (see NOTE: [jit cache] and NOTE:
/// [jit composition] in this module): traced once per signature, its
/// program optimized and replayed. Results equal eager execution.
///
/// Chains of elementwise ops run fused, as one loop over memory (NOTE:
/// [elementwise fusion] in `fuse.rs`). Fusion does not contract: `a * b + c`
/// stays a multiply rounded to the dtype and then an add, never one fused
/// multiply-add (which rounds once and so can differ from eager execution
/// in the last bit); nor does it reassociate or otherwise rewrite
/// arithmetic. Each op applies the element function its eager kernel
/// applies, so fused results are bit-identical to eager ones.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{grad, jit, vmap};
///
/// let f = jit(vmap(grad(|x: &Tensor| (x.sin() * x).sum())));
/// let x = Tensor::from_vec(vec![0.5f32, 1.0, 1.5, 2.0], [2, 2]);
/// let g = f(&x); // traced, optimized, replayed
/// let h = f(&x); // replayed
/// assert_eq!(g.to_vec::<f32>(), h.to_vec::<f32>());
/// ```
pub fn jit<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y {
    jit_with(f, JitOptions::default())
}

/// [`jit`] with options.
pub fn jit_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: JitOptions) -> impl Fn(&X) -> Y {
    let j = jitted(f, opts);
    move |x: &X| j.call(x)
}

/// [`jit`] returning errors as values (errors of the trace, of the passes
/// and of the replay).
pub fn try_jit<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Result<Y> {
    let j = jitted(f, JitOptions::default());
    move |x: &X| j.try_call(x)
}

/// `jit` with a static first argument, JAX's `static_argnums`: `f(&s, &x)`
/// is traced once per value of `s` (compared with `PartialEq`) and
/// signature of `x`; `s` is an ordinary Rust value (a size, a flag, a
/// mode), which `f` may branch on.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::jit_static;
///
/// let f = jit_static(|p: &u32, x: &Tensor| x.powi(*p as i32));
/// let x = Tensor::from_vec(vec![2.0f32], [1]);
/// assert_eq!(f(&3, &x).to_vec::<f32>(), vec![8.0]);
/// assert_eq!(f(&2, &x).to_vec::<f32>(), vec![4.0]);
/// ```
pub fn jit_static<S, X, Y, F>(f: F) -> impl Fn(&S, &X) -> Y
where
    S: PartialEq + Clone + std::fmt::Debug,
    X: Tree,
    Y: Tree,
    F: Fn(&S, &X) -> Y,
{
    let j = jitted_static(f, JitOptions::default());
    move |s: &S, x: &X| j.call_static(s, x)
}

/// The [`Jitted`] handle of `jit_with(f, opts)`.
pub fn jitted<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: JitOptions) -> Jitted<(), X, Y, impl Fn(&(), &X) -> Y> {
    jitted_static(move |_: &(), x: &X| f(x), opts)
}

/// The [`Jitted`] handle of a function with a static first argument (see
/// [`jit_static`]).
pub fn jitted_static<S, X, Y, F>(f: F, opts: JitOptions) -> Jitted<S, X, Y, F>
where
    S: PartialEq + Clone + std::fmt::Debug,
    X: Tree,
    Y: Tree,
    F: Fn(&S, &X) -> Y,
{
    let cache = Mutex::new(Cache::new(opts.cache_size));
    Jitted { f, opts, cache, _x: PhantomData }
}

impl<X: Tree, Y: Tree, F: Fn(&(), &X) -> Y> Jitted<(), X, Y, F> {
    /// Calls the jitted function.
    ///
    /// # Panics
    /// Raises what the trace, the passes or the replay raise.
    #[track_caller]
    pub fn call(&self, x: &X) -> Y {
        self.call_static(&(), x)
    }

    /// [`Jitted::call`] returning errors as values.
    ///
    /// # Errors
    /// What the trace, the passes or the replay raise.
    pub fn try_call(&self, x: &X) -> Result<Y> {
        self.try_call_static(&(), x)
    }

    /// Calls the jitted function on arguments handed over (JAX's
    /// `donate_argnums`, see NOTE: [buffer planning]): a step that reads
    /// an argument last may write its result over the argument's buffer,
    /// so `params = step.call_donated(params)` updates in place rather
    /// than allocating. Where JAX deletes a donated array and raises on a
    /// later use, here the argument was moved: a later use does not
    /// compile. An argument the caller still holds elsewhere (a clone of
    /// the tensor, a view of its storage) is not written over (checked at
    /// each call), and the results equal [`Jitted::call`]'s.
    ///
    /// ```
    /// use xform_ops::Tensor;
    /// use xform_transforms::{jitted, JitOptions};
    ///
    /// let step = jitted(|p: &Tensor| p * 0.5 + 1.0, JitOptions::default());
    /// let mut p = Tensor::from_vec(vec![2.0f32, 4.0], [2]);
    /// for _ in 0..3 {
    ///     p = step.call_donated(p);
    /// }
    /// assert_eq!(p.to_vec::<f32>(), vec![2.0, 2.25]);
    /// // the first call traced; each call wrote its result over `p`
    /// assert_eq!(step.entries()[0].plan.in_place_writes, 3);
    /// ```
    ///
    /// A donated argument cannot be used afterwards:
    ///
    /// ```compile_fail,E0382
    /// use xform_ops::Tensor;
    /// use xform_transforms::{jitted, JitOptions};
    ///
    /// let step = jitted(|p: &Tensor| p * 0.5, JitOptions::default());
    /// let p = Tensor::from_vec(vec![2.0f32], [1]);
    /// let q = step.call_donated(p);
    /// drop(q);
    /// let _ = p.sum(); // error: p was moved into the call
    /// ```
    ///
    /// # Panics
    /// Raises what the trace, the passes or the replay raise.
    #[track_caller]
    pub fn call_donated(&self, x: X) -> Y {
        self.call_static_donated(&(), x)
    }
}

impl<S, X, Y, F> Jitted<S, X, Y, F>
where
    S: PartialEq + Clone + std::fmt::Debug,
    X: Tree,
    Y: Tree,
    F: Fn(&S, &X) -> Y,
{
    /// Calls the jitted function with static argument `s`.
    ///
    /// # Panics
    /// Raises what the trace, the passes or the replay raise.
    #[track_caller]
    pub fn call_static(&self, s: &S, x: &X) -> Y {
        let leaves = x.leaves();
        let c = self.compiled(s, x, &leaves);
        run(&c, &leaves).or_raise()
    }

    /// [`Jitted::call_static`] on arguments handed over (see
    /// [`Jitted::call_donated`]).
    ///
    /// # Panics
    /// Raises what the trace, the passes or the replay raise.
    #[track_caller]
    pub fn call_static_donated(&self, s: &S, x: X) -> Y {
        let leaves = x.leaves();
        let c = self.compiled(s, &x, &leaves);
        drop(x);
        run_donated(&c, leaves.into_vec()).or_raise()
    }

    /// [`Jitted::call_static`] returning errors as values.
    ///
    /// # Errors
    /// What the trace, the passes or the replay raise.
    pub fn try_call_static(&self, s: &S, x: &X) -> Result<Y> {
        catch(|| self.call_static(s, x))
    }

    /// The optimized program of the signature of `(s, x)` (traced and
    /// cached if it was not): its outputs are the output leaves, then the
    /// final values of the arguments `f` mutates.
    ///
    /// # Errors
    /// What the trace or the passes raise.
    pub fn program(&self, s: &S, x: &X) -> Result<Program> {
        catch(|| self.compiled(s, x, &x.leaves()).exec.program().clone())
    }

    /// The cache's statistics.
    pub fn stats(&self) -> JitStats {
        self.lock().stats()
    }

    /// The compiled signatures, least recently used first.
    pub fn entries(&self) -> Vec<JitEntry> {
        self.lock()
            .slots
            .iter()
            .map(|s| JitEntry {
                avals: s.avals.clone(),
                skeleton: s.skeleton.clone(),
                static_arg: format!("{:?}", s.static_arg),
                default_device: s.default_device,
                traced_eqns: s.compiled.exec.traced_eqns(),
                optimized_eqns: s.compiled.exec.program().eqns.len(),
                hits: s.hits,
                plan: s.compiled.exec.stats(),
            })
            .collect()
    }

    /// Drops every compiled signature (the statistics stay); the next call
    /// of each traces again.
    pub fn clear(&self) {
        self.lock().slots.clear();
    }

    /// Sets the most signatures kept (at least 1), evicting the least
    /// recently used beyond it.
    pub fn set_capacity(&self, n: usize) {
        let mut c = self.lock();
        c.capacity = n.max(1);
        c.shrink();
    }

    fn lock(&self) -> MutexGuard<'_, Cache<S, Compiled<Y>>> {
        // A panic while the lock is held leaves the cache consistent (no
        // user code runs under it).
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The compiled entry of this call's signature: from the cache, or
    /// traced now (outside the lock: `f` may call this jitted function on
    /// another signature) and cached when it holds no tracer.
    #[track_caller]
    fn compiled(&self, s: &S, x: &X, leaves: &[Tensor]) -> Arc<Compiled<Y>> {
        let skeleton = || x.skeleton();
        let device = xform_ops::default_device();
        let mut statics = Vec::new();
        x.static_values(&mut statics);
        let axes = xform_ops::interp::axis_env();
        let key = cache::Key { static_arg: s, statics: &statics, device, axes: &axes };
        if let Some(c) = self.lock().get(key, leaves, &skeleton) {
            return c;
        }
        self.lock().misses += 1;
        let c = Arc::new(compile(&self.f, s, x, leaves, &self.opts).or_raise());
        if c.exec.cacheable() {
            let slot = Slot {
                static_arg: s.clone(),
                statics: statics.iter().map(StaticValue::to_owned_key).collect(),
                skeleton: skeleton(),
                avals: leaves.iter().map(Tensor::aval).collect(),
                default_device: device,
                axes: axes.to_vec(),
                hits: 0,
                compiled: c.clone(),
            };
            self.lock().insert(slot, leaves);
        }
        c
    }
}

/// Traces `f(s, x)` at the signature of `leaves`, optimizes the program
/// and compiles its plan.
fn compile<S, X: Tree, Y: Tree>(
    f: &impl Fn(&S, &X) -> Y,
    s: &S,
    x: &X,
    leaves: &[Tensor],
    opts: &JitOptions,
) -> Result<Compiled<Y>> {
    let staging = Staging::new("jit", true);
    let placeholder = Tensor::scalar(0.0f32);
    let (template, traced, n_out, mutated, (returned_args, returned_views)) = catch(|| {
        with_interpreter(&staging, || {
            let ins: Vec<Tensor> = leaves.iter().map(|l| staging.new_input(l.aval())).collect();
            let y = f(s, &x.with_leaves(ins.iter().cloned()));
            let mut outs: Vec<Tensor> = y.leaves().to_vec();
            let n_out = outs.len();
            let mut mutated = Vec::new();
            for (i, t) in ins.iter().enumerate() {
                if t.version() > 0 {
                    mutated.push(i);
                    outs.push(t.clone());
                }
            }
            // outputs that are a mutated argument itself (`x.add_(1); x`),
            // or a view of one (`x.add_(1); x.slice(..)`: its view link, by
            // identity, not by program variable: `y.copy_(x)` gives `y`
            // `x`'s variable without making views of one views of the other)
            let mut returned_args: Vec<(usize, usize)> = Vec::new();
            let mut returned_views: Vec<(usize, usize, Vec<xform_ops::Prim>)> = Vec::new();
            for (k, o) in outs[..n_out].iter().enumerate() {
                returned_args.extend(mutated.iter().filter(|&&i| o.same_node(&ins[i])).map(|&i| (k, i)));
                if let Some((base, ops)) = o.view_of() {
                    if let Some(&i) = mutated.iter().find(|&&i| base.same_node(&ins[i])) {
                        returned_views.push((k, i, ops));
                    }
                }
            }
            let program = staging.finish(&outs).or_raise();
            let template = y.with_leaves(std::iter::repeat_n(placeholder.clone(), n_out));
            (template, program, n_out, mutated, (returned_args, returned_views))
        })
    })?;
    let eopts = ExecOptions {
        optimize: opts.optimize,
        cuda_graphs: opts.cuda_graphs,
        parallel_sinks: opts.parallel_sinks,
        batch_split: opts.batch_split,
    };
    let exec = Executable::compile(&traced, n_out, &eopts)?;
    // an output replaced by the caller's argument after the call needs no copy
    let mut copied = exec.outputs_to_copy().to_vec();
    copied.retain(|k| !returned_args.iter().any(|(r, _)| r == k) && !returned_views.iter().any(|(r, ..)| r == k));
    Ok(Compiled { exec, template, n_out, mutated, copied, returned_args, returned_views })
}

/// [`run`] on leaves handed over: the plan may write over those no one
/// else holds. A function that mutates its arguments writes them back
/// (a caller's clone sees the writes), so it runs as [`run`].
fn run_donated<Y: Tree>(c: &Compiled<Y>, leaves: Vec<Tensor>) -> Result<Y> {
    if !c.mutated.is_empty() {
        return run(c, &leaves);
    }
    let outs = c.exec.run_donated(leaves)?;
    Ok(c.template.with_leaves(unshared(c, outs)?.into_iter().take(c.n_out)))
}

/// Runs a compiled signature on the call's leaves (the plan for concrete
/// inputs, the program through `bind` for tracers) and writes mutated
/// arguments back.
fn run<Y: Tree>(c: &Compiled<Y>, leaves: &[Tensor]) -> Result<Y> {
    let outs = c.exec.run(leaves)?;
    if !c.mutated.is_empty() {
        let mut finals: Vec<Option<Tensor>> = vec![None; leaves.len()];
        for (k, &i) in c.mutated.iter().enumerate() {
            finals[i] = Some(outs[c.n_out + k].clone());
        }
        write_back("jit", leaves, finals)?;
    }
    let mut outs = unshared(c, outs)?;
    for &(k, i) in &c.returned_args {
        outs[k] = leaves[i].clone();
    }
    for (k, i, views) in &c.returned_views {
        outs[*k] = leaves[*i].apply_views(views)?;
    }
    Ok(c.template.with_leaves(outs.into_iter().take(c.n_out)))
}

/// `outs` with the outputs of `c.copied` replaced by copies.
fn unshared<Y>(c: &Compiled<Y>, mut outs: Vec<Tensor>) -> Result<Vec<Tensor>> {
    for &k in &c.copied {
        outs[k] = xform_ops::lax::copy(&outs[k])?;
    }
    Ok(outs)
}
