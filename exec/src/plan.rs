//! The replay plan: an optimized [`Program`] compiled for concrete inputs.
//!
//! NOTE: [replay plan] Each equation becomes a [`Step`]: the primitive,
//! its operands as slots (program variables) or constants, its result
//! slots, and the slots whose last reader it is. Replaying is a loop over
//! the steps that calls each primitive's lowering directly
//! (`interp::lower_checked`): no interpreter stack walk, no shape rule
//! (every equation's operands were checked once, when the plan was
//! compiled: the program was staged at these exact abstract values), no
//! operand lists built from tensors beyond a borrow per operand. A value
//! is dropped right after its last reader (its buffer goes back to the
//! pool, where the next allocation of its size finds it). Constants are read in
//! place, not copied into slots.
//!
//! NOTE: [buffer planning] Three ways a replay avoids allocating:
//! - Dead buffers are reused: a value is dropped at its last reader (the
//!   `free` list of that step), so its buffer returns to the size-keyed
//!   pool (`xform_kernels::pool`) and the next allocation of that size
//!   takes it without calling the allocator.
//! - In-place updates: an elementwise step (a fused group, or a single
//!   elementwise equation, which then runs as a fused step of one op)
//!   whose operand has the shape and dtype of a result and is read last
//!   by this step lists the pair in `reuse`. At run time the result is
//!   written over the operand's buffer when the operand's slot alone holds
//!   it (`Tensor::owns_its_buffer`: no other handle to the tensor, no view
//!   of its storage, contiguous from offset 0). The fused loop reads each
//!   tile of that operand before it writes the same tile of the result,
//!   so the update is exact.
//! - Donated inputs: [`Plan::run_donated`] takes the arguments by value
//!   (`Jitted::call_donated`); an argument the caller no longer holds is
//!   then written over like an intermediate. A plain [`Plan::run`] keeps
//!   a handle to each argument in its slot, so the check above always
//!   refuses the caller's tensors.
//!
//! [`Plan::in_place_writes`] counts the results written over an operand.
//! Steps whose results are only returned may run on a helper thread while
//! the replay goes on (NOTE: [parallel sinks] in `sinks.rs`).
//! On CUDA the loop is captured into a CUDA graph at the second call and
//! replayed as one launch (NOTE: [cuda graph replay] in `graph.rs`).

use super::fuse::{self, Fused, Item};
use super::fuse_rows::RowFused;
use super::graph::GraphReplay;
use super::rows_out::{self, Dst};
use super::sinks::{self, Sinks};
use smallvec::SmallVec;
use std::sync::Arc;
use xform_ops::interp::lower_checked;
use xform_ops::{Atom, Error, Prim, Program, Result, Tensor, Value};

/// What a step runs.
// A plan holds tens of steps, read on every replay: the primitive inline
// saves an indirection per step, the fused group is shared behind an Arc.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum StepOp {
    /// One primitive (with its parameters), through its lowering.
    Prim(Prim),
    /// A fused group of elementwise equations (NOTE: [elementwise fusion]).
    Fused(Arc<Fused>),
    /// A row group: elementwise equations with reductions over the last
    /// axis and broadcasts along it (NOTE: [row fusion]).
    Rows(Arc<RowFused>),
}

/// One equation of the plan, or one fused group of them.
#[derive(Clone, Debug)]
pub struct Step {
    /// What it runs.
    pub op: StepOp,
    /// Operands.
    pub ins: SmallVec<[Atom; 4]>,
    /// Result slots.
    pub outs: SmallVec<[u32; 2]>,
    /// Slots whose last reader this step is (dropped after it).
    pub free: SmallVec<[u32; 4]>,
    /// In-place candidates of a fused step: (operand, output) pairs where
    /// the output may be written over the operand's buffer (same shape and
    /// dtype, read last here); taken at run time when the slot alone holds
    /// its buffer (NOTE: [buffer planning]).
    pub reuse: SmallVec<[(u8, u8); 2]>,
    /// A sink: the step (a `StepOp::Prim`) may run on a helper thread
    /// (NOTE: [parallel sinks]).
    pub sink: bool,
    /// The program output this step writes straight into the caller's
    /// destination when `Plan::run_into` is given one (a product whose one
    /// result is that output and which no step reads; NOTE: [batch split]
    /// in `split.rs`).
    pub into: Option<u32>,
}

/// A compiled program for concrete inputs of its signature.
#[derive(Debug)]
pub struct Plan {
    /// The number of slots (the program's variables).
    pub slots: usize,
    /// The slot of each input, in order.
    pub inputs: Vec<u32>,
    /// Inputs no step or output reads (never loaded).
    pub unused_inputs: Vec<bool>,
    /// The steps, in execution order.
    pub steps: Vec<Step>,
    /// The outputs, and whether each must be copied (it may share storage
    /// with a constant of the program, which a caller's in-place write
    /// must not reach).
    pub outputs: Vec<(Atom, bool)>,
    /// The program's constants.
    pub consts: Vec<Tensor>,
    /// Results written over an operand's buffer, over all runs.
    in_place: std::sync::atomic::AtomicU64,
    /// The CUDA graph replay (NOTE: [cuda graph replay]).
    graph: GraphReplay,
    /// Whether sink steps may run on a helper thread (NOTE: [parallel
    /// sinks]; `JitOptions::parallel_sinks`).
    sinks: bool,
    /// Whether a step may split its loop in halves (`Fused::halves`,
    /// `RowFused::halves`): only then is the helper lent (NOTE: [paired
    /// halves]), which costs a queue per replay.
    lends: bool,
}

impl Plan {
    /// Compiles `p`, whose constants must be concrete.
    ///
    /// # Errors
    /// If a constant is a tracer, or an equation mixes devices.
    pub fn compile(p: &Program) -> Result<Plan> {
        if p.consts.iter().any(Tensor::is_tracer) {
            return Err(Error::invalid("jit", "a replay plan needs concrete constants"));
        }
        let slots = p.avals.len();
        // the plan's order: equations, and fused groups of them
        let last_read = fuse::last_reads(p);
        let items = fuse::grouped(p, cfg!(feature = "cuda"), &last_read);
        let reads = |it: &Item| -> SmallVec<[Atom; 4]> {
            match it {
                Item::Eqn(k) => p.eqns[*k].inputs.iter().copied().collect(),
                Item::Group { ins, .. } | Item::Rows { ins, .. } => ins.iter().copied().collect(),
            }
        };
        // the last step that reads each slot (usize::MAX: an output, never freed)
        let mut last = vec![None::<usize>; slots];
        for (k, it) in items.iter().enumerate() {
            for a in reads(it) {
                if let Atom::Var(v) = a {
                    last[v.0 as usize] = Some(k);
                }
            }
        }
        // read by some step (before outputs are marked: a sink's results
        // are returned, never read)
        let read: Vec<bool> = last.iter().map(Option::is_some).collect();
        for a in &p.outputs {
            if let Atom::Var(v) = a {
                last[v.0 as usize] = Some(usize::MAX);
            }
        }
        // may a slot share storage with a constant (through view primitives)?
        let mut aliases_const = vec![false; slots];
        // values that are views never holding a whole contiguous buffer
        // alone (broadcasts, transposes, slices...; a reshape may): not
        // worth an in-place attempt
        let mut view = vec![false; slots];
        for e in &p.eqns {
            if e.prim.aliases_operand() && !whole_view(p, e) {
                for v in &e.outputs {
                    view[v.0 as usize] = true;
                }
            }
        }
        let mut steps = Vec::with_capacity(items.len());
        for (k, it) in items.into_iter().enumerate() {
            let sink = matches!(it, Item::Eqn(j) if is_sink(p, j, &read));
            // an elementwise equation alone that reads an operand last runs
            // as a fused step of one op, so that it may write over it
            let it = match it {
                Item::Eqn(j) if fuse::fusable(p, j, false).is_some() => {
                    let e = &p.eqns[j];
                    let outs: SmallVec<[u32; 2]> = e.outputs.iter().map(|v| v.0).collect();
                    if reuse_pairs(p, &e.inputs, &outs, k, &last, &view).is_empty() {
                        it
                    } else {
                        fuse::make_group(p, vec![j], &last_read).pop().unwrap_or(it)
                    }
                }
                it => it,
            };
            let ins = reads(&it);
            let (op, outs, alias): (StepOp, SmallVec<[u32; 2]>, bool) = match it {
                Item::Eqn(j) => {
                    let e = &p.eqns[j];
                    check_devices(p, e)?;
                    let alias = e.prim.aliases_operand()
                        && e.inputs.iter().any(|a| match a {
                            Atom::Const(_) => true,
                            Atom::Var(v) => aliases_const[v.0 as usize],
                        });
                    (StepOp::Prim(e.prim.clone()), e.outputs.iter().map(|v| v.0).collect(), alias)
                }
                // fused results are fresh buffers or written over an
                // operand this step reads last (on the CPU; on CUDA fresh)
                Item::Group { outs, fused, .. } => (StepOp::Fused(Arc::new(fused)), outs.into_iter().collect(), false),
                // row steps write fresh outputs
                Item::Rows { outs, rows, .. } => (StepOp::Rows(Arc::new(rows)), outs.into_iter().collect(), false),
            };
            let reuse = match &op {
                StepOp::Fused(_) => reuse_pairs(p, &ins, &outs, k, &last, &view),
                StepOp::Prim(_) | StepOp::Rows(_) => SmallVec::new(),
            };
            let mut free: SmallVec<[u32; 4]> = SmallVec::new();
            for a in &ins {
                if let Atom::Var(v) = a {
                    if last[v.0 as usize] == Some(k) && !free.contains(&v.0) {
                        free.push(v.0);
                    }
                }
            }
            for v in &outs {
                aliases_const[*v as usize] = alias;
                // a result nothing reads is dropped at once
                if last[*v as usize].is_none() {
                    free.push(*v);
                }
            }
            steps.push(Step { op, ins: ins.iter().copied().collect(), outs, free, reuse, sink, into: None });
        }
        // a sink hands off only where steps after it give the main thread
        // work to overlap with
        let mut later_work = false;
        for step in steps.iter_mut().rev() {
            step.sink &= later_work;
            later_work |= !step.sink;
        }
        // a product whose one result is an output (listed once) that no
        // step reads may write it into a destination of `run_into`
        for (k, out) in p.outputs.iter().enumerate() {
            let Atom::Var(v) = out else { continue };
            if read[v.0 as usize] || p.outputs.iter().filter(|o| *o == out).count() > 1 {
                continue;
            }
            let product = |s: &Step| matches!(&s.op, StepOp::Prim(prim) if prim.jit_props().lower_into);
            if let Some(step) = steps.iter_mut().find(|s| product(s) && s.outs[..] == [v.0]) {
                step.into = Some(k as u32);
            }
        }
        let outputs = p
            .outputs
            .iter()
            .map(|a| {
                let copy = match a {
                    Atom::Const(_) => true,
                    Atom::Var(v) => aliases_const[v.0 as usize],
                };
                (*a, copy)
            })
            .collect();
        let graph = GraphReplay::new(p, &steps);
        let lends = steps.iter().any(|s| match &s.op {
            StepOp::Fused(f) => f.halves(),
            StepOp::Rows(r) => r.halves(),
            StepOp::Prim(_) => false,
        });
        Ok(Plan {
            lends,
            graph,
            slots,
            inputs: p.inputs.iter().map(|v| v.0).collect(),
            unused_inputs: p.inputs.iter().map(|v| last[v.0 as usize].is_none()).collect(),
            steps,
            outputs,
            consts: p.consts.clone(),
            in_place: Default::default(),
            sinks: true,
        })
    }

    /// The number of fused steps.
    pub fn fused_steps(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s.op, StepOp::Fused(_))).count()
    }

    /// How many results were written over an operand's buffer (an
    /// intermediate read last, or a donated argument), over all runs.
    pub fn in_place_writes(&self) -> u64 {
        self.in_place.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs the plan on concrete `args` of the program's signature (the
    /// caller checked them against it).
    ///
    /// # Errors
    /// What a lowering returns (out of memory, a CUDA failure), or a tracer
    /// argument (an internal error: the caller replays concrete inputs only).
    pub fn run(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        if let Some(r) = self.graph.run(self, args) {
            return r;
        }
        self.run_with(args.iter().cloned())
    }

    /// [`Plan::run`] on arguments handed over: an argument whose handle is
    /// the only one to its tensor (and whose tensor alone holds its
    /// buffer) may be written over by a step that reads it last, as
    /// JAX's donated arguments (`donate_argnums`).
    ///
    /// # Errors
    /// As [`Plan::run`].
    pub fn run_donated(&self, args: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if let Some(r) = self.graph.run(self, &args) {
            return r;
        }
        self.run_with(args)
    }

    /// On CUDA: whether the plan replays as a CUDA graph ("captured", "not
    /// captured yet", or "not captured: " and why); `None` elsewhere.
    pub fn cuda_graph(&self) -> Option<String> {
        self.graph.status()
    }

    /// The steps that may run on a helper thread (NOTE: [parallel sinks]).
    pub fn sink_steps(&self) -> usize {
        if self.sinks {
            self.steps.iter().filter(|s| s.sink).count()
        } else {
            0
        }
    }

    /// Runs every step on the replaying thread (`JitOptions::parallel_sinks`
    /// off).
    pub fn disable_sinks(&mut self) {
        self.sinks = false;
    }

    /// Replays step by step even on CUDA (`JitOptions::cuda_graphs` off).
    pub fn disable_cuda_graph(&mut self) {
        self.graph.disable();
    }

    fn run_with(&self, args: impl IntoIterator<Item = Tensor>) -> Result<Vec<Tensor>> {
        let outs = self.run_into(args, &[])?;
        Ok(outs.into_iter().map(|t| t.expect("no destination given")).collect())
    }

    /// The steps on `args`: the results as the slots (or constants) hold
    /// them, not copied (what a CUDA graph captures).
    #[cfg(feature = "cuda")]
    pub(crate) fn run_raw(&self, args: impl IntoIterator<Item = Tensor>) -> Result<Vec<Tensor>> {
        let outs = self.run_steps(args, &[])?;
        Ok(outs.into_iter().map(|t| t.expect("no destination given")).collect())
    }

    /// Runs the plan with some outputs written into the caller's memory
    /// (`dsts[k]` for output `k`, each the output's elements in row-major
    /// order): those come back as `None`, the others as [`Plan::run`]
    /// returns them. Runs every step on this thread.
    ///
    /// # Errors
    /// As [`Plan::run`].
    pub(crate) fn run_into(
        &self,
        args: impl IntoIterator<Item = Tensor>,
        dsts: &[Option<Dst>],
    ) -> Result<Vec<Option<Tensor>>> {
        let outs = self.run_steps(args, dsts)?;
        outs.into_iter()
            .zip(&self.outputs)
            .map(|(t, (_, copy))| match t {
                Some(t) if *copy => copy_of(&t).map(Some),
                t => Ok(t),
            })
            .collect()
    }

    /// The steps on `args`, outputs with a destination in `dsts` written
    /// there (`None` in the result).
    fn run_steps(&self, args: impl IntoIterator<Item = Tensor>, dsts: &[Option<Dst>]) -> Result<Vec<Option<Tensor>>> {
        let dst = |k: Option<u32>| k.and_then(|k| dsts.get(k as usize)).and_then(Option::as_ref);
        let mut written: SmallVec<[bool; 8]> = SmallVec::from_elem(false, dsts.len());
        let mut slots: SmallVec<[Option<Tensor>; 32]> = SmallVec::from_elem(None, self.slots);
        for ((slot, a), unused) in self.inputs.iter().zip(args).zip(&self.unused_inputs) {
            if !unused {
                slots[*slot as usize] = Some(a);
            }
        }
        // sinks go to a helper where the pool has another thread, unless
        // this is a pool thread (see NOTE: [parallel sinks])
        let offload = self.sinks && xform_kernels::cpu::threads() > 1 && !xform_kernels::cpu::on_pool_thread();
        let mut sinks = Sinks::default();
        // the helper also runs halves of mid-sized kernels (NOTE: [paired
        // halves] in xform_kernels::cpu::pair)
        let lender = (offload && self.lends).then(|| sinks.lender());
        let mut steps = || -> Result<()> {
            for (si, step) in self.steps.iter().enumerate() {
                let outs = {
                    let mut vals: SmallVec<[xform_ops::ValueRef<'_>; 4]> = SmallVec::new();
                    for s in &step.ins {
                        vals.push(match s {
                            Atom::Var(v) => slots[v.0 as usize].as_ref().expect("slot defined before use").value(),
                            Atom::Const(i) => self.consts[*i].value(),
                        });
                    }
                    let mut arrays: SmallVec<[&xform_ops::Array; 4]> = SmallVec::new();
                    for v in &vals {
                        match &**v {
                            Value::Array(a) => arrays.push(a),
                            Value::Tracer(_) => {
                                return Err(Error::invalid("jit", "replay reached a tracer (internal error)"));
                            }
                        }
                    }
                    match &step.op {
                        StepOp::Prim(prim) if dst(step.into).is_some() => {
                            let k = step.into.expect("checked") as usize;
                            rows_out::write_product(prim, &arrays, dst(step.into).expect("checked"))?;
                            written[k] = true;
                            SmallVec::new()
                        }
                        StepOp::Prim(prim) if step.sink && offload => {
                            // results come back at the join below
                            let (prim, ins): (Prim, SmallVec<[xform_ops::Array; 4]>) =
                                (prim.clone(), arrays.iter().map(|a| (*a).clone()).collect());
                            sinks.post(si, move || sinks::lower_sink(&prim, &ins));
                            SmallVec::new()
                        }
                        StepOp::Prim(prim) => lower_checked(prim, &arrays)?,
                        StepOp::Fused(f) => {
                            let mut donors: SmallVec<[Option<u32>; 4]> = SmallVec::from_elem(None, step.outs.len());
                            for &(i, j) in &step.reuse {
                                let owned = match step.ins[i as usize] {
                                    Atom::Var(v) => slots[v.0 as usize].as_ref().is_some_and(Tensor::owns_its_buffer),
                                    Atom::Const(_) => false,
                                };
                                if owned && donors[j as usize].is_none() && !donors.contains(&Some(i as u32)) {
                                    donors[j as usize] = Some(i as u32);
                                }
                            }
                            let n = donors.iter().flatten().count() as u64;
                            if n > 0 {
                                self.in_place.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                            }
                            f.run(&arrays, &donors)?
                        }
                        StepOp::Rows(r) => r.run(&arrays)?,
                    }
                };
                for (slot, t) in step.outs.iter().zip(outs) {
                    slots[*slot as usize] = Some(t);
                }
                for slot in &step.free {
                    slots[*slot as usize] = None;
                }
            }
            Ok(())
        };
        match &lender {
            Some(l) => xform_kernels::cpu::pair::lend(l, steps)?,
            None => steps()?,
        }
        for (si, arrays) in sinks.join()? {
            let step = &self.steps[si];
            for (slot, a) in step.outs.iter().zip(arrays) {
                if !step.free.contains(slot) {
                    slots[*slot as usize] = Some(Tensor::from_array(a));
                }
            }
        }
        let mut results = Vec::with_capacity(self.outputs.len());
        for (k, (s, _)) in self.outputs.iter().enumerate() {
            if written.get(k).copied().unwrap_or(false) {
                results.push(None);
                continue;
            }
            let t = match s {
                Atom::Var(v) => slots[v.0 as usize].clone().expect("output defined"),
                Atom::Const(i) => self.consts[*i].clone(),
            };
            match dst(Some(k as u32)) {
                Some(d) => {
                    rows_out::copy_into(&t, d)?;
                    results.push(None);
                }
                None => results.push(Some(t)),
            }
        }
        Ok(results)
    }
}

/// Whether equation `j` is a sink (NOTE: [parallel sinks]): a heavy
/// primitive on the CPU whose results no equation reads and that writes
/// at least `SINK_MIN_ELEMS` elements.
fn is_sink(p: &Program, j: usize, read: &[bool]) -> bool {
    let e = &p.eqns[j];
    let on_cpu = e.inputs.iter().all(|a| p.atom_aval(*a).device == xform_ops::Device::Cpu);
    let unread = e.outputs.iter().all(|v| !read[v.0 as usize]);
    let elems: usize = e.outputs.iter().map(|v| p.avals[v.0 as usize].shape.numel()).sum();
    sinks::heavy(&e.prim) && on_cpu && unread && elems >= sinks::SINK_MIN_ELEMS
}

/// The (operand, output) pairs of a fused step at plan position `k` whose
/// output may be written over the operand: a variable read last here
/// (not an output of the program), of the output's shape and dtype on the
/// CPU, not made by a view primitive other than a reshape.
fn reuse_pairs(
    p: &Program,
    ins: &[Atom],
    outs: &[u32],
    k: usize,
    last: &[Option<usize>],
    view: &[bool],
) -> SmallVec<[(u8, u8); 2]> {
    let mut pairs = SmallVec::new();
    for (j, o) in outs.iter().enumerate() {
        let want = &p.avals[*o as usize];
        for (i, a) in ins.iter().enumerate() {
            let Atom::Var(v) = a else { continue };
            let have = &p.avals[v.0 as usize];
            let taken = pairs.iter().any(|&(pi, _): &(u8, u8)| pi as usize == i);
            let candidate = !view[v.0 as usize] && last[v.0 as usize] == Some(k);
            if !taken && candidate && have == want && have.device == xform_ops::Device::Cpu {
                if let (Ok(i), Ok(j)) = (u8::try_from(i), u8::try_from(j)) {
                    pairs.push((i, j));
                }
                break;
            }
        }
    }
    pairs
}

/// Whether view equation `e` over a whole contiguous operand is itself
/// whole and contiguous (see `Prim::whole_view`).
fn whole_view(p: &Program, e: &xform_ops::Eqn) -> bool {
    e.inputs.first().is_some_and(|x| e.prim.whole_view(&p.atom_aval(*x).shape))
}

/// A fresh copy of a concrete tensor.
pub(crate) fn copy_of(t: &Tensor) -> Result<Tensor> {
    let v = t.value();
    let Value::Array(a) = &*v else { return Err(Error::invalid("jit", "copy of a tracer (internal error)")) };
    Ok(Tensor::from_array(a.contiguous_copy()?))
}

/// The error `Eval` raises for operands on different devices, raised when
/// the plan is compiled.
fn check_devices(p: &Program, e: &xform_ops::Eqn) -> Result<()> {
    let mut first = None;
    for a in &e.inputs {
        let d = p.atom_aval(*a).device;
        match first {
            None => first = Some(d),
            Some(f) if f != d => return Err(xform_ops::interp::mixed_devices(&e.prim, f, d)),
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::passes::testing::{build, push1, vector};
    use super::*;
    use xform_ops::prim::{BinaryOp, ShapeOp, UnaryOp};
    use xform_ops::{Aval, DType, Device, Shape};

    /// Each operand is freed after its last reader; the results are the
    /// program's.
    #[test]
    fn frees_after_last_reader() {
        let x = vector(6);
        let c = Tensor::full([6], 0.5, DType::F32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let k = b.constant(&c);
            let s = push1(b, Prim::Unary(UnaryOp::Sin), &[ins[0]], None);
            let m = push1(b, Prim::Binary(BinaryOp::Mul), &[s, k], None);
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[m], None);
            let a = push1(b, Prim::Binary(BinaryOp::Add), &[e, s], None);
            vec![a]
        });
        let plan = Plan::compile(&p).unwrap();
        let frees: Vec<Vec<u32>> = plan.steps.iter().map(|s| s.free.to_vec()).collect();
        // the four equations are one fused step (NOTE: [elementwise
        // fusion]), the last reader of x; s, m and e never become slots
        assert_eq!(frees, vec![vec![0]]);
        let got = plan.run(std::slice::from_ref(&x)).unwrap();
        let want = p.eval(&[x]).unwrap();
        assert_eq!(got[0].to_vec::<f32>(), want[0].to_vec::<f32>());
    }

    /// An output that is a constant, or a view of one, is a fresh copy: a
    /// write to it does not reach the plan's constant.
    #[test]
    fn outputs_aliasing_constants_are_copied() {
        let x = vector(4);
        let c = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4]);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let k = b.constant(&c);
            let aval = Aval { shape: Shape::from([2, 2]), dtype: DType::F32, device: Device::Cpu };
            let v = push1(b, Prim::Shape(ShapeOp::Reshape { shape: Shape::from([2, 2]) }), &[k], Some(aval));
            vec![k, v, ins[0]]
        });
        let plan = Plan::compile(&p).unwrap();
        assert_eq!(plan.outputs.iter().map(|o| o.1).collect::<Vec<_>>(), vec![true, true, false]);
        let outs = plan.run(std::slice::from_ref(&x)).unwrap();
        outs[0].add_scalar_(10.0);
        outs[1].add_scalar_(10.0);
        assert!(outs[2].same_node(&x));
        assert_eq!(c.to_vec::<f32>(), vec![1.0, 2.0, 3.0, 4.0]);
        p.check_consts("test").unwrap();
    }

    /// An elementwise step that reads an intermediate last writes over its
    /// buffer; a plain argument is never written over, a donated one no
    /// one else holds is; results are the program's, bit for bit.
    #[test]
    fn in_place_over_dead_buffers() {
        let x = vector(6);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let s = push1(b, Prim::Unary(UnaryOp::Sin), &[ins[0]], None);
            let aval = Aval { shape: Shape::from([12]), dtype: DType::F32, device: Device::Cpu };
            let r = push1(b, Prim::Shape(ShapeOp::Concatenate { axis: 0 }), &[s, s], Some(aval));
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[r], None);
            vec![push1(b, Prim::Binary(BinaryOp::Mul), &[e, e], None)]
        });
        let plan = Plan::compile(&p).unwrap();
        // sin (x read last), the concatenation, then exp * exp over it
        let reuse: Vec<usize> = plan.steps.iter().map(|s| s.reuse.len()).collect();
        assert_eq!(reuse, vec![1, 0, 1]);
        let want = p.eval(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>();
        assert_eq!(plan.run(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>(), want);
        assert_eq!(plan.in_place_writes(), 1, "the concatenation, not the caller's x");
        let mine = Tensor::from_vec(x.to_vec::<f32>(), [6]);
        assert_eq!(plan.run_donated(vec![mine]).unwrap()[0].to_vec::<f32>(), want);
        assert_eq!(plan.in_place_writes(), 3, "x handed over is written over too");
        assert_eq!(x.to_vec::<f32>(), Tensor::from_vec(x.to_vec::<f32>(), [6]).to_vec::<f32>());
    }
}
