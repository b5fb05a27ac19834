//! Batch split: a CPU replay as two halves of its batch, one per core.
//!
//! NOTE: [batch split] A small per-sample program (W1 small: 64 samples,
//! some thirty steps of a few microseconds each) cannot use the second
//! core kernel by kernel: a cache-line round trip between the two cores of
//! the 2-core target takes 0.2-0.5 us and a hand-off several of them, so
//! lending half of a 3 us kernel to the other core saves about what it
//! costs. Such programs are mostly independent along a batch axis: the
//! forward pass, the loss per sample and the per-sample gradients never
//! mix two samples. The replay then runs two programs, each on its half of
//! the batch, one on the replaying thread and one on the sinks' helper
//! (`sinks.rs`): one hand-off per replay.
//!
//! [`SplitPlan::new`] decides, per variable, whether each half holds the
//! whole value ([`Part::Whole`]: the parameters and what is computed from
//! them alone) or only its own rows along one axis ([`Part::Rows`]). The
//! arguments whose leading axis has the batch's size start as rows; rules
//! per primitive carry rows through elementwise ops, broadcasts, reshapes,
//! transposes, slices and pads of other axes, reductions over other axes,
//! products over other axes and gathers and scatters along matched batch
//! axes. A whole operand combined with rows (a materialized broadcast, a
//! constant, a basis) is cut to the half's rows. An equation that would
//! mix rows (a reduction over the batch, a product contracting it, control
//! flow, random numbers) blames the arguments whose rows reached it, and
//! the analysis runs again without them: an argument such as a square
//! weight whose leading axis happens to have the batch's size drops out
//! at its first product. The split is taken when every output is whole or
//! split along its leading axis, the work on rows is at least
//! [`MIN_ROWS_WORK`] and eight times the work both halves repeat, and no
//! equation is big enough for its kernel to go parallel by itself (then
//! rayon already uses every core).
//!
//! Each half is its own program (its avals, the shapes in its parameters,
//! its cut constants), checked against the shape rules, and compiled into
//! its own plan. An output split along its leading axis is allocated whole
//! before the halves run, and each half writes its rows into it (a product
//! straight from its kernel, anything else copied), so nothing is
//! concatenated. Each half computes what the whole replay computes for its
//! rows, with the same kernels, which compute a row of a product, of an
//! elementwise op or of a reduction over other axes alone: the results are
//! the same bits as the unsplit replay (tested).

use super::plan::Plan;
use super::rows_out::Dst;
use super::sinks::Sinks;
use smallvec::{smallvec, SmallVec};
use std::collections::HashMap;
use std::sync::Arc;
use xform_ops::prim::{shape_rule, ShapeOp};
use xform_ops::prims::jit::{Blame, RowQuery};
use xform_ops::{
    Array, Atom, Aval, DType, Device, Eqn, Error, Prim, Program, ProgramBuilder, Result, Shape, Tensor, Var,
};

/// The least work on rows (elements written, times the contracted size for
/// a product) worth a hand-off. The split costs about 2.5 us on the 2-core
/// target (the other core pulls its half's operands and writes its rows
/// from and into lines this core holds). Jitted, split against whole: a
/// product 32x32x64 (2^16 of work, the bound before) 4.0 vs 1.5 us,
/// 128x32x64 (2^18) 5.3 vs 4.0 us, 256x32x64 (2^19) 6.9 vs 7.1 us; two
/// layers `tanh(tanh(x W1) W2)` of 64 rows (2^18.6) 10.0 vs 9.6 us, of
/// 128 rows (2^19.6) 14.0 vs 17.4 us. W1 small's per-sample gradients
/// (about 2^20): 45 vs 55 us.
pub const MIN_ROWS_WORK: usize = 1 << 19;

/// How each half holds a variable.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Part {
    /// The whole value, in both halves.
    Whole,
    /// Its own rows of the batch along this axis.
    Rows(usize),
}

/// What an equation does with rows: the axis along which each operand is
/// cut in a half (`None`: whole), and each result's part.
#[derive(Clone, Debug)]
struct Rule {
    ins: SmallVec<[Option<usize>; 4]>,
    outs: SmallVec<[Part; 2]>,
}

/// The rule of equation `e` for operands held as `parts`, the batch being
/// `rows` long: the primitive's own row rule (`Prim::split_rows`).
fn rule(p: &Program, e: &Eqn, parts: &[Part], rows: usize) -> std::result::Result<Rule, Blame> {
    let n_out = e.outputs.len();
    if parts.iter().all(|q| *q == Part::Whole) {
        return Ok(Rule { ins: smallvec![None; parts.len()], outs: smallvec![Part::Whole; n_out] });
    }
    let ins: SmallVec<[Shape; 4]> = e.inputs.iter().map(|a| p.atom_aval(*a).shape).collect();
    let outs: SmallVec<[Shape; 2]> = e.outputs.iter().map(|v| p.aval(*v).shape.clone()).collect();
    let axes: SmallVec<[Option<usize>; 4]> = parts
        .iter()
        .map(|q| match q {
            Part::Rows(a) => Some(*a),
            Part::Whole => None,
        })
        .collect();
    let r = e.prim.split_rows(&RowQuery { ins: &ins, outs: &outs, axes: &axes, rows })?;
    Ok(Rule { ins: r.ins, outs: smallvec![Part::Rows(r.out); n_out] })
}

/// The work of an equation, as the primitive weighs it (`Prim::work`).
fn work(p: &Program, e: &Eqn) -> usize {
    let out: usize = e.outputs.iter().map(|v| p.aval(*v).shape.numel()).sum();
    let ins: SmallVec<[Shape; 4]> = e.inputs.iter().map(|a| p.atom_aval(*a).shape).collect();
    e.prim.work(&ins, out)
}

/// The parts of every variable and the rules of every equation, for one
/// batch length.
struct Analysis {
    rows: usize,
    parts: Vec<Part>,
    rules: Vec<Rule>,
}

/// Carries the rows of the arguments in `seeds` (a bit per input) through
/// `p`; on an equation that mixes rows, the seeds to drop.
fn propagate(p: &Program, rows: usize, seeds: u64) -> std::result::Result<Analysis, u64> {
    let mut parts = vec![Part::Whole; p.avals.len()];
    let mut from = vec![0u64; p.avals.len()];
    for (i, v) in p.inputs.iter().enumerate().take(64) {
        if seeds & (1 << i) != 0 {
            parts[v.0 as usize] = Part::Rows(0);
            from[v.0 as usize] = 1 << i;
        }
    }
    let part = |parts: &[Part], a: &Atom| match a {
        Atom::Var(v) => parts[v.0 as usize],
        Atom::Const(_) => Part::Whole,
    };
    let origin = |from: &[u64], a: &Atom| match a {
        Atom::Var(v) => from[v.0 as usize],
        Atom::Const(_) => 0,
    };
    let mut rules = Vec::with_capacity(p.eqns.len());
    for e in &p.eqns {
        let ins: SmallVec<[Part; 4]> = e.inputs.iter().map(|a| part(&parts, a)).collect();
        match rule(p, e, &ins, rows) {
            Ok(r) => {
                let o = e.inputs.iter().fold(0, |m, a| m | origin(&from, a));
                for (v, q) in e.outputs.iter().zip(&r.outs) {
                    parts[v.0 as usize] = *q;
                    from[v.0 as usize] = if *q == Part::Whole { 0 } else { o };
                }
                rules.push(r);
            }
            Err(blame) => {
                let drop = (0..e.inputs.len())
                    .filter(|i| blame & (1 << i) != 0)
                    .fold(0, |m, i| m | origin(&from, &e.inputs[i]));
                return Err(if drop == 0 { seeds } else { drop });
            }
        }
    }
    // outputs are assembled along their leading axis
    let mut drop = 0;
    for a in &p.outputs {
        if let Atom::Var(v) = a {
            if matches!(parts[v.0 as usize], Part::Rows(ax) if ax != 0) {
                drop |= from[v.0 as usize];
            }
        }
    }
    if drop != 0 {
        return Err(drop);
    }
    Ok(Analysis { rows, parts, rules })
}

impl Analysis {
    /// Whether the split pays (see NOTE: [batch split]).
    fn worth(&self, p: &Program) -> bool {
        let (mut rows_work, mut whole_work, mut largest) = (0usize, 0usize, 0usize);
        for (e, r) in p.eqns.iter().zip(&self.rules) {
            let w = work(p, e);
            largest = largest.max(w);
            if r.outs.iter().any(|q| *q != Part::Whole) {
                rows_work = rows_work.saturating_add(w);
            } else {
                whole_work = whole_work.saturating_add(w);
            }
        }
        let assembled = p.outputs.iter().any(|a| matches!(a, Atom::Var(v) if self.parts[v.0 as usize] != Part::Whole));
        assembled
            && rows_work >= MIN_ROWS_WORK
            && whole_work.saturating_mul(8) <= rows_work
            && largest < 2 * xform_kernels::cpu::PAR_MIN_WORK
    }
}

/// The analysis of `p` for the first batch length that splits (the
/// leading sizes of its arguments, most bytes first), if one does.
fn analyze(p: &Program) -> Option<Analysis> {
    let on_cpu = p.avals.iter().all(|a| a.device == Device::Cpu) && p.consts.iter().all(|c| c.device() == Device::Cpu);
    // control flow runs interpreters over its bodies, which belong to the
    // thread that called the replay: never on the helper (as for sinks)
    let control = p.eqns.iter().any(|e| e.prim.jit_props().thread_bound);
    if !on_cpu || control {
        return None;
    }
    let mut lengths: Vec<(usize, usize)> = Vec::new();
    for v in p.inputs.iter().take(64) {
        let a = p.aval(*v);
        if a.shape.rank() == 0 || a.shape[0] < 2 {
            continue;
        }
        let bytes = a.shape.numel().saturating_mul(a.dtype.size_bytes());
        match lengths.iter_mut().find(|(n, _)| *n == a.shape[0]) {
            Some(l) => l.1 = l.1.saturating_add(bytes),
            None => lengths.push((a.shape[0], bytes)),
        }
    }
    lengths.sort_by_key(|&(n, bytes)| (std::cmp::Reverse(bytes), n));
    for &(rows, _) in lengths.iter().take(3) {
        let mut seeds: u64 = 0;
        for (i, v) in p.inputs.iter().enumerate().take(64) {
            let s = &p.aval(*v).shape;
            if s.rank() > 0 && s[0] == rows {
                seeds |= 1 << i;
            }
        }
        while seeds != 0 {
            match propagate(p, rows, seeds) {
                Ok(a) if a.worth(p) => return Some(a),
                Ok(_) => break,
                Err(drop) => seeds &= !drop,
            }
        }
    }
    None
}

/// `aval` as a half holds it: rows `len` long along the split axis.
fn half_aval(aval: &Aval, part: Part, len: usize) -> Aval {
    let mut a = aval.clone();
    if let Part::Rows(ax) = part {
        let mut dims: Vec<usize> = a.shape.dims().to_vec();
        dims[ax] = len;
        a.shape = dims.into();
    }
    a
}

/// Builds the program of one half: rows `at..at + len` of the batch.
struct HalfBuilder<'p> {
    p: &'p Program,
    an: &'p Analysis,
    at: usize,
    len: usize,
    b: ProgramBuilder,
    map: Vec<Option<Atom>>,
    /// The equation that defines each variable.
    producer: &'p [Option<usize>],
    /// Whole atoms already cut to the half's rows along an axis.
    cut: HashMap<(Atom, usize), Atom>,
}

impl HalfBuilder<'_> {
    fn atom(&mut self, a: Atom) -> Atom {
        match a {
            Atom::Var(v) => self.map[v.0 as usize].expect("defined before use"),
            Atom::Const(i) => self.b.constant(&self.p.consts[i]),
        }
    }

    /// A whole value cut to the half's rows along `axis`.
    fn cut(&mut self, a: Atom, axis: usize) -> Result<Atom> {
        if let Some(c) = self.cut.get(&(a, axis)) {
            return Ok(*c);
        }
        let (at, len) = (self.at, self.len);
        let aval = self.p.atom_aval(a);
        let half = half_aval(&aval, Part::Rows(axis), len);
        let made = match a {
            Atom::Const(i) => self.b.constant(&xform_ops::lax::slice_axis(&self.p.consts[i], axis, at, at + len)?),
            Atom::Var(v) => {
                // a broadcast or an iota along the axis is made at the half's
                // size; anything else is sliced
                let src = self.producer[v.0 as usize].map(|k| &self.p.eqns[k]);
                let remade = src.and_then(|e| Some((e.prim.at_rows(axis, len, false)?, e)));
                let (prim, ins): (Prim, SmallVec<[Atom; 4]>) = match remade {
                    Some((prim, e)) => (prim, e.inputs.iter().map(|x| self.atom(*x)).collect()),
                    None => {
                        let rank = aval.shape.rank();
                        let mut start: SmallVec<[usize; 4]> = smallvec![0; rank];
                        let mut limit: SmallVec<[usize; 4]> = aval.shape.dims().iter().copied().collect();
                        start[axis] = at;
                        limit[axis] = at + len;
                        let strides = smallvec![1; rank];
                        (ShapeOp::Slice { start, limit, strides }.into(), smallvec![self.atom(a)])
                    }
                };
                let out = self.b.new_var(half);
                self.b.push(prim, ins, smallvec![out]);
                Atom::Var(out)
            }
        };
        self.cut.insert((a, axis), made);
        Ok(made)
    }

    /// The half's program, or `None` if an equation's shape rule disagrees
    /// with the parts (the split is then not taken).
    fn build(mut self) -> Result<Option<Program>> {
        let (p, an) = (self.p, self.an);
        for v in &p.inputs {
            let a = half_aval(p.aval(*v), an.parts[v.0 as usize], self.len);
            self.map[v.0 as usize] = Some(Atom::Var(self.b.new_input(a)));
        }
        for (e, r) in p.eqns.iter().zip(&an.rules) {
            let mut ins: SmallVec<[Atom; 4]> = SmallVec::new();
            for (a, want) in e.inputs.iter().zip(&r.ins) {
                let whole = match a {
                    Atom::Var(v) => an.parts[v.0 as usize] == Part::Whole,
                    Atom::Const(_) => true,
                };
                ins.push(match want {
                    Some(axis) if whole => self.cut(*a, *axis)?,
                    _ => self.atom(*a),
                });
            }
            let prim = match r.outs.first() {
                Some(Part::Rows(c)) => match e.prim.at_rows(*c, self.len, true) {
                    Some(prim) => prim,
                    None => return Ok(None),
                },
                _ => e.prim.clone(),
            };
            let outs: SmallVec<[Var; 2]> = e
                .outputs
                .iter()
                .zip(&r.outs)
                .map(|(v, q)| self.b.new_var(half_aval(p.aval(*v), *q, self.len)))
                .collect();
            let avals: Vec<Aval> = ins
                .iter()
                .map(|a| match a {
                    Atom::Var(v) => self.b.aval(*v).clone(),
                    Atom::Const(i) => self.b.const_at(*i).expect("a constant of the builder").aval(),
                })
                .collect();
            let refs: Vec<_> = avals.iter().map(Aval::as_ref).collect();
            let agrees = shape_rule(&prim, &refs)
                .is_ok_and(|got| got.len() == outs.len() && got.iter().zip(&outs).all(|(g, v)| *g == *self.b.aval(*v)));
            if !agrees {
                return Ok(None);
            }
            for (v, nv) in e.outputs.iter().zip(&outs) {
                self.map[v.0 as usize] = Some(Atom::Var(*nv));
            }
            self.b.push(prim, ins, outs);
        }
        let outputs: Vec<Atom> = p.outputs.iter().map(|a| self.atom(*a)).collect();
        Ok(Some(self.b.finish(outputs)))
    }
}

/// An output allocated whole before the halves write their rows.
struct WholeOut {
    /// Its first element, on a 64-byte line.
    ptr: *mut u8,
    bytes: usize,
    /// The elements' dtype.
    dtype: DType,
    /// The array, once both halves wrote it.
    finish: Box<dyn FnOnce() -> Array>,
}

/// A buffer for an output of `aval`, its first element on a cache line:
/// the halves' rows then start on lines too (a row of a per-sample weight
/// gradient is a multiple of 64 bytes), and the product kernels store whole
/// aligned lines. Large buffers come from malloc 16 bytes past a page
/// boundary, so the buffer holds a line more and the array is a view at an
/// offset into it (tested: an assembled output starts on a line).
fn alloc_whole(aval: &Aval) -> Result<WholeOut> {
    let n = aval.shape.numel();
    let shape = aval.shape.clone();
    xform_ops::array::guard_alloc("jit", &aval.shape, aval.dtype, Device::Cpu, || {
        xform_kernels::with_dtype!(aval.dtype, T => {
            let size = std::mem::size_of::<T>();
            let mut v = xform_kernels::pool::alloc_uninit::<T>(n + 64 / size);
            // (the allocation is aligned for T, so the distance to the next
            // line is a whole number of elements)
            let skip = v.as_ptr().cast::<u8>().align_offset(64) / size;
            // SAFETY: skip < 64 / size, so the n elements after it lie in
            // the allocation.
            let ptr = unsafe { v.as_mut_ptr().add(skip) }.cast::<u8>();
            let finish = Box::new(move || {
                let len = v.len();
                // the elements around the array's
                let (head, rest) = v.split_at_mut(skip);
                for e in head.iter_mut().chain(rest[n..].iter_mut()) {
                    e.write(<T as xform_kernels::Element>::from_f64(0.0));
                }
                // SAFETY: called only after both halves wrote elements
                // skip..skip + n; the others were written just above.
                let buf = xform_kernels::CpuBuffer::from_vec(unsafe { xform_kernels::pool::assume_init(v) });
                let all = Array::from_cpu(buf, xform_ops::Shape::from(vec![len]));
                let strides = shape.contiguous_strides();
                all.with_layout(xform_kernels::Layout { shape, strides, offset: skip })
            }) as Box<dyn FnOnce() -> Array>;
            WholeOut { ptr, bytes: n * size, dtype: aval.dtype, finish }
        })
    })
}

/// A program replayed as two halves of its batch (NOTE: [batch split]).
pub(crate) struct SplitPlan {
    /// The batch's length, and the first row of the second half.
    rows: usize,
    mid: usize,
    /// Per argument: cut along its leading axis (else whole to both).
    cut: Vec<bool>,
    /// Per output: its whole aval if assembled from the halves' rows (else
    /// the first half's whole value is returned).
    assembled: Vec<Option<Aval>>,
    halves: [Arc<Plan>; 2],
}

impl std::fmt::Debug for SplitPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SplitPlan({} rows at {})", self.rows, self.mid)
    }
}

impl SplitPlan {
    /// The split of `p`, where one pays (NOTE: [batch split]).
    ///
    /// # Errors
    /// What cutting a constant or compiling a half's plan returns.
    pub(crate) fn new(p: &Program) -> Result<Option<SplitPlan>> {
        let Some(an) = analyze(p) else { return Ok(None) };
        let (rows, mid) = (an.rows, an.rows.div_ceil(2));
        let mut producer = vec![None; p.avals.len()];
        for (k, e) in p.eqns.iter().enumerate() {
            for v in &e.outputs {
                producer[v.0 as usize] = Some(k);
            }
        }
        let mut halves = Vec::with_capacity(2);
        for (at, len) in [(0, mid), (mid, rows - mid)] {
            let builder = HalfBuilder {
                p,
                an: &an,
                at,
                len,
                b: ProgramBuilder::new(),
                map: vec![None; p.avals.len()],
                producer: &producer,
                cut: HashMap::new(),
            };
            let Some(half) = builder.build()? else { return Ok(None) };
            let half = super::passes::dce::run(&half)?;
            let mut plan = Plan::compile(&half)?;
            plan.disable_sinks();
            halves.push(Arc::new(plan));
        }
        let second = halves.pop().expect("two halves");
        let first = halves.pop().expect("two halves");
        let part = |a: &Atom| match a {
            Atom::Var(v) => an.parts[v.0 as usize],
            Atom::Const(_) => Part::Whole,
        };
        Ok(Some(SplitPlan {
            rows,
            mid,
            cut: p.inputs.iter().map(|v| an.parts[v.0 as usize] != Part::Whole).collect(),
            assembled: p.outputs.iter().map(|a| (part(a) != Part::Whole).then(|| p.atom_aval(*a))).collect(),
            halves: [first, second],
        }))
    }

    /// The rows of each half.
    pub fn rows(&self) -> (usize, usize) {
        (self.mid, self.rows - self.mid)
    }

    /// Runs the halves, the second on the sinks' helper thread (or here,
    /// after the first, when the helper does not take it), and assembles
    /// the outputs.
    ///
    /// # Errors
    /// What a half's replay returns; out of memory for a whole output.
    pub(crate) fn run(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        let (mut first, mut second) = (Vec::with_capacity(args.len()), Vec::with_capacity(args.len()));
        for (t, &cut) in args.iter().zip(&self.cut) {
            let a = t.array().ok_or_else(|| Error::invalid("jit", "replay reached a tracer (internal error)"))?;
            if cut {
                let l = &a.layout;
                let rank = l.rank();
                let (mut start, mut limit): (Vec<usize>, Vec<usize>) = (vec![0; rank], l.shape.dims().to_vec());
                let step = vec![1; rank];
                limit[0] = self.mid;
                first.push(a.with_layout(l.slice(&start, &limit, &step)));
                (start[0], limit[0]) = (self.mid, self.rows);
                second.push(a.with_layout(l.slice(&start, &limit, &step)));
            } else {
                first.push(a.clone());
                second.push(a);
            }
        }
        let mut wholes: Vec<Option<WholeOut>> = Vec::with_capacity(self.assembled.len());
        for aval in &self.assembled {
            wholes.push(aval.as_ref().map(alloc_whole).transpose()?);
        }
        let dsts = |h: usize| -> Vec<Option<Dst>> {
            wholes
                .iter()
                .map(|w| {
                    w.as_ref().map(|w| {
                        let row = w.bytes / self.rows;
                        let (lo, hi) = if h == 0 { (0, self.mid * row) } else { (self.mid * row, w.bytes) };
                        // SAFETY: lo..hi lies inside the buffer (rows x row bytes),
                        // which outlives both halves (joined before it is
                        // assembled), and the halves' ranges are disjoint
                        unsafe { Dst::new(w.ptr.add(lo), hi - lo, w.dtype) }
                    })
                })
                .collect()
        };
        let (dsts0, dsts1) = (dsts(0), dsts(1));
        let plan1 = self.halves[1].clone();
        let mut sinks = Sinks::default();
        sinks.post(0, move || {
            plan1.run_into(second.into_iter().map(Tensor::from_array), &dsts1)?;
            Ok(SmallVec::new())
        });
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.halves[0].run_into(first.into_iter().map(Tensor::from_array), &dsts0)
        }));
        // the second half is done (or ran here) before anything returns:
        // it writes into `wholes`
        let theirs = sinks.join();
        let outs = match mine {
            Ok(r) => r?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        theirs?;
        let mut results = Vec::with_capacity(outs.len());
        for ((t, whole), aval) in outs.into_iter().zip(wholes).zip(&self.assembled) {
            results.push(match (t, whole, aval) {
                (_, Some(w), Some(_)) => Tensor::from_array((w.finish)()),
                (Some(t), None, None) => t,
                _ => return Err(Error::invalid("jit", "a split output was not assembled (internal error)")),
            });
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests;
