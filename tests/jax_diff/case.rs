//! A case: a program, a stack of transforms around it, and input values.
//!
//! Every level of the stack is a function from a list of tensors (the
//! inputs, as one pytree) to a list of tensors:
//! - `Grad`: the gradient of `scalarize(f(xs))` with respect to every input,
//!   where `scalarize(ys) = sum_i sum(sin(y_i))`;
//! - `Vmap`: `f` mapped over a batch axis of size `size`, at `in_axes[i]`
//!   of input i (`None`: not batched), with the batch axis of every output
//!   at `out_axis` (negative counts from the end), in xform now and then
//!   in chunks of `chunk` examples; half of the time named (`axis_name`:
//!   `i<k>`, or the name of a named vmap inside it, which shadows it), the
//!   names bound for the program's collectives;
//! - `Jvp`: `f`'s outputs followed by their tangents along `cos(3 x_i)`;
//! - `Jacfwd` / `Jacrev`: every block d out_j / d in_i (output-major);
//! - `Hessian`: every block of the Hessian of `scalarize(f(xs))`;
//! - `Functionalize`: `f` with its in-place ops functionalized (JAX: `f`);
//! - `Jit`: `jit(f)` (JAX: `jax.jit(f)`);
//! - `Checkpoint`: `checkpoint(f)` (JAX: `jax.checkpoint(f)`);
//! - `CustomJvp`: `f` with the custom JVP rule `jvp(f)` (JAX:
//!   `jax.custom_jvp` with that rule), and `CustomVjp`: `f` with the custom
//!   VJP `fwd = (f, inputs)`, `bwd = vjp(f)` (JAX: `jax.custom_vjp`): the
//!   same derivatives as `f`'s, through the custom-rule machinery, with
//!   the program's writes to its arguments inside (in JAX, the custom
//!   function returns the results, and the written arguments come from
//!   `f` as ordinary code: xform's semantics, where a custom rule gives the
//!   derivative of the results only);
//! - `JitCaptured` (outermost only): `jit` of `f` with its first input
//!   captured by the closure instead of passed, called once, then the
//!   captured tensor written in place (`c = c * 0.5 + 0.25`) and the
//!   function called again: xform must give `f` on the new value (JAX's
//!   reference), or refuse the call with its in-place error, never the
//!   value for the old one.
//!
//! The stack is drawn as raw choices and resolved against the shapes the
//! inner levels see (axes within the ranks, one input at least batched), so
//! any drawn stack is valid; shapes are tracked through every level to
//! keep the outputs small. The raw choices are drawn before the program:
//! the names and sizes of the named vmaps (`env`) come from them alone,
//! and the program's collectives use those names.

use crate::program::{self, Mix, Program};
use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq)]
pub enum Tf {
    Grad,
    /// `chunk`: xform's `chunk_size` (JAX's vmap has none; results must not change).
    Vmap {
        in_axes: Vec<Option<isize>>,
        out_axis: isize,
        size: usize,
        chunk: Option<usize>,
        /// `axis_name` (JAX: `jax.vmap(.., axis_name=..)`).
        name: Option<String>,
    },
    Jvp,
    Jacfwd,
    Jacrev,
    Hessian,
    Functionalize,
    Jit,
    Checkpoint,
    CustomJvp,
    CustomVjp,
    JitCaptured,
}

impl Tf {
    /// Forward-mode differentiation of what it wraps (JAX cannot apply it
    /// to a `custom_vjp` function).
    fn forward_mode(&self) -> bool {
        matches!(self, Tf::Jvp | Tf::Jacfwd | Tf::Hessian | Tf::CustomJvp)
    }
}

/// A case of the differential test. `stack[0]` is applied first (innermost).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub program: Program,
    pub stack: Vec<Tf>,
    /// The outermost function's input shapes (the program's with the batch
    /// axes of every vmap inserted) and values.
    pub shapes: Vec<Vec<usize>>,
    pub data: Vec<Vec<f64>>,
}

/// Elements allowed in the outputs of one level (bounds the cost of a case).
const MAX_OUT: usize = 1500;

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// Applies one transform to the (input shapes, output shapes) of a level.
fn apply(tf: &Tf, ins: &[Vec<usize>], outs: &[Vec<usize>]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    match tf {
        Tf::Grad => (ins.to_vec(), ins.to_vec()),
        Tf::Functionalize | Tf::Jit | Tf::Checkpoint | Tf::CustomJvp | Tf::CustomVjp | Tf::JitCaptured => {
            (ins.to_vec(), outs.to_vec())
        }
        Tf::Jvp => (ins.to_vec(), outs.iter().chain(outs).cloned().collect()),
        Tf::Jacfwd | Tf::Jacrev => (
            ins.to_vec(),
            outs.iter().flat_map(|o| ins.iter().map(move |i| o.iter().chain(i).copied().collect())).collect(),
        ),
        Tf::Hessian => (
            ins.to_vec(),
            ins.iter().flat_map(|a| ins.iter().map(move |c| a.iter().chain(c).copied().collect())).collect(),
        ),
        Tf::Vmap { in_axes, out_axis, size, .. } => {
            let ins2 = ins
                .iter()
                .zip(in_axes)
                .map(|(s, a)| {
                    let mut s = s.clone();
                    if let Some(a) = a {
                        let a = if *a < 0 { (*a + s.len() as isize + 1) as usize } else { *a as usize };
                        s.insert(a, *size);
                    }
                    s
                })
                .collect();
            let outs2 = outs
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    let a =
                        if *out_axis < 0 { (*out_axis + s.len() as isize + 1) as usize } else { *out_axis as usize };
                    s.insert(a, *size);
                    s
                })
                .collect();
            (ins2, outs2)
        }
    }
}

/// Whether a level of these shapes is small enough, with the named vmaps
/// still to come (`later`: their sizes) applied around it too.
fn fits(ins: &[Vec<usize>], outs: &[Vec<usize>], later: &[usize]) -> bool {
    let grow: usize = later.iter().map(|&n| n.max(1)).product();
    let total: usize = outs.iter().map(|s| numel(s)).sum();
    let rank_ok = ins.iter().chain(outs).all(|s| s.len() + later.len() <= 8);
    total * grow <= MAX_OUT && rank_ok
}

/// The transform a raw kind draws: vmap five times as often as the others
/// (so that named vmaps, half of them, are common).
fn kind(raw: u8) -> u8 {
    match raw % 16 {
        12..=15 => 1,
        k => k,
    }
}

/// A vmap's size and axis name, drawn from its seed (before the shapes it
/// maps are known: the program's collectives depend on them), and the
/// generator to draw the rest from. Half of the vmaps are named: `i<k>`
/// for the k-th level, or a quarter of the time the name of a named vmap
/// inside it (`inner`), which then shadows this one.
fn vmap_head(k: usize, seed: u64, inner: &[String]) -> (Mix, usize, Option<String>) {
    let mut m = Mix::new(seed);
    // An empty batch now and then.
    let size = if m.int(0, 9) == 0 { 0 } else { m.int(1, 3) };
    let name = m.coin().then(|| {
        if !inner.is_empty() && m.int(0, 3) == 0 {
            inner[m.int(0, inner.len() - 1)].clone()
        } else {
            format!("i{k}")
        }
    });
    (m, size, name)
}

/// The named vmaps of raw choices, innermost first: (raw position, name, size).
fn named_vmaps(raw: &[(u8, u64)]) -> Vec<(usize, String, usize)> {
    let mut named: Vec<(usize, String, usize)> = Vec::new();
    for (k, &(kd, seed)) in raw.iter().enumerate() {
        if kind(kd) == 1 {
            let inner: Vec<String> = named.iter().map(|v| v.1.clone()).collect();
            if let (_, size, Some(name)) = vmap_head(k, seed, &inner) {
                named.push((k, name, size));
            }
        }
    }
    named
}

/// Where the program of a stack drawn from `raw` runs: the names its named
/// vmaps bind (each name's innermost binding), and whether the stack
/// differentiates. Every named vmap of `raw` is kept by [`resolve`].
pub fn env(raw: &[(u8, u64)]) -> program::Env {
    let mut axes: Vec<(String, usize)> = Vec::new();
    let mut mapped_inside = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (k, name, size) in named_vmaps(raw) {
        if seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        // JAX traces a custom_vjp's bwd when it transposes, after the
        // vmaps around the custom_vjp are done: a name those bind is
        // unbound there (NameError) when reverse mode (grad, jacrev,
        // hessian) differentiates the vmap. xform runs the bwd inside them
        // (`grad(vmap(custom_vjp(f), axis_name))` is right), but JAX has
        // nothing to compare: no collectives over such a name.
        let custom_vjp_inside = raw[..k].iter().any(|&(kd, _)| kind(kd) == 10);
        let reverse_outside = raw[k + 1..].iter().any(|&(kd, _)| matches!(kind(kd), 0 | 4 | 5));
        if custom_vjp_inside && reverse_outside {
            continue;
        }
        if raw[..k].iter().any(|&(kd, _)| matches!(kind(kd), 1 | 3 | 4 | 5)) {
            mapped_inside.push(name.clone());
        }
        axes.push((name, size));
    }
    let diff = raw.iter().any(|&(k, _)| matches!(kind(k), 0 | 2 | 3 | 4 | 5));
    program::Env { axes, diff, mapped_inside }
}

/// Resolves raw choices `(kind, seed)` into a stack, outermost last.
/// Levels that would make the case too large are dropped, except named
/// vmaps (the program's collectives need their names): a level is kept
/// only if the named vmaps around it still fit.
fn resolve(program: &Program, core_outs: &[Vec<usize>], raw: &[(u8, u64)]) -> (Vec<Tf>, Vec<Vec<usize>>) {
    let mut ins = program.inputs.clone();
    let mut outs = core_outs.to_vec();
    let mut stack: Vec<Tf> = Vec::new();
    let named = named_vmaps(raw);
    let mut names: Vec<String> = Vec::new();
    for (k, &(kd, seed)) in raw.iter().enumerate() {
        let outermost = k + 1 == raw.len();
        let tf = match kind(kd) {
            0 => Tf::Grad,
            1 => {
                let (mut m, size, name) = vmap_head(k, seed, &names);
                let mut in_axes: Vec<Option<isize>> = ins
                    .iter()
                    .map(|s| {
                        let r = s.len();
                        match m.int(0, r + 1) {
                            k if k == r + 1 => None,
                            k if m.coin() => Some(k as isize - r as isize - 1),
                            k => Some(k as isize),
                        }
                    })
                    .collect();
                if in_axes.iter().all(Option::is_none) {
                    in_axes[0] = Some(0);
                }
                let min_rank = outs.iter().map(Vec::len).min().unwrap_or(0);
                let k = m.int(0, min_rank);
                let out_axis = if m.coin() { k as isize - min_rank as isize - 1 } else { k as isize };
                let chunk = if m.int(0, 3) == 0 { Some(m.int(1, 2)) } else { None };
                // a named map cannot be chunked (a collective would see
                // one chunk): a chunk of the whole batch or more
                let chunk = if name.is_some() { chunk.filter(|&c| c >= size) } else { chunk };
                if let Some(n) = &name {
                    names.push(n.clone());
                }
                Tf::Vmap { in_axes, out_axis, size, chunk, name }
            }
            2 => Tf::Jvp,
            3 => Tf::Jacfwd,
            4 => Tf::Jacrev,
            5 => Tf::Hessian,
            6 => Tf::Functionalize,
            7 => Tf::Jit,
            8 => Tf::Checkpoint,
            9 => Tf::CustomJvp,
            10 => Tf::CustomVjp,
            // the captured input must not be one the program writes (a
            // write to a captured tensor inside jit is refused)
            _ if outermost && !program.writes.iter().any(|w| w.input() == 0) => Tf::JitCaptured,
            _ => Tf::Jit,
        };
        // JAX differentiates a custom_vjp function in reverse mode only
        if tf.forward_mode() && stack.contains(&Tf::CustomVjp) {
            continue;
        }
        let is_named = matches!(&tf, Tf::Vmap { name: Some(_), .. });
        let later: Vec<usize> = named.iter().filter(|v| v.0 > k).map(|v| v.2).collect();
        let (i2, o2) = apply(&tf, &ins, &outs);
        if is_named || fits(&i2, &o2, &later) {
            ins = i2;
            outs = o2;
            stack.push(tf);
        }
    }
    (stack, ins)
}

/// Input values: uniform in [-2, 2), drawn from `seed`; a third of the
/// inputs take exact values half of the time (0, ±1, ±2, 0.5, 3: kinks of
/// relu and abs, ties, pow's exponent 0 or an integer at base 0).
fn values(shapes: &[Vec<usize>], seed: u64) -> Vec<Vec<f64>> {
    let mut m = Mix::new(seed);
    shapes
        .iter()
        .map(|s| {
            let edgy = m.int(0, 2) == 0;
            (0..numel(s))
                .map(|_| {
                    if edgy && m.coin() {
                        program::EDGE_VALUES[m.int(0, program::EDGE_VALUES.len() - 1)]
                    } else {
                        m.f64(-2.0, 2.0)
                    }
                })
                .collect()
        })
        .collect()
}

/// Cases with programs up to `depth` deep under up to `max_stack`
/// transforms. The stack's raw choices are drawn first: the program may
/// use the names of its named vmaps.
pub fn case(depth: u32, max_stack: usize) -> impl Strategy<Value = Case> {
    // for testing collectives: only stacks with a named vmap
    let only_named = std::env::var_os("XFORM_JAX_DIFF_NAMED").is_some_and(|v| v == "1");
    prop::collection::vec((any::<u8>(), any::<u64>()), 0..=max_stack)
        .prop_filter("a named vmap (XFORM_JAX_DIFF_NAMED=1)", move |raw| !only_named || !named_vmaps(raw).is_empty())
        .prop_flat_map(move |raw| (program::program(depth, env(&raw)), Just(raw), any::<u64>()))
        .prop_map(|(program, raw, seed)| {
            let core = crate::eval::core_shapes(&program);
            let (stack, shapes) = resolve(&program, &core, &raw);
            let data = values(&shapes, seed);
            Case { program, stack, shapes, data }
        })
}
