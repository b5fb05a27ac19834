//! Elementwise fusion of the replay plan (CPU).
//!
//! NOTE: [elementwise fusion] A maximal group of elementwise equations
//! (unary, binary, comparisons, `select`, `convert_element_type`) of one
//! result shape on the CPU, on f32/f64 (bool for predicates), runs as one
//! fused step: one pass over memory, tile by tile (`TILE` elements), each
//! op applied to the tile in a small scratch buffer, and only the group's
//! outputs (values read after the group or returned by the program)
//! written to full buffers (an op whose value is a fresh output writes
//! its tile there directly, and later ops read it back from there); the
//! intermediates never materialize. Broadcasts feeding the group stay
//! what they are eagerly, views: the fused loop reads such an operand
//! through its strides (stride 0 on broadcast axes), so a broadcast never
//! materializes either; one along leading axes repeats a block, gathered
//! once and then doubled (`gather`), and where the block divides the tile
//! (a bias row) every tile holds the same elements: gathered at a range's
//! first tile only.
//!
//! Results are bit-identical to eager execution: each op applies the very
//! element function its eager CPU lowering maps (`Prim::cpu_tile`), and
//! fusion never contracts `a*b+c` into an FMA, nor reassociates anything:
//! each op rounds to its dtype as eagerly.
//!
//! Grouping walks the program in order with one open group: a fusable
//! equation of the group's shape joins it; one of another shape closes it
//! and opens the next; any other equation runs before the open group
//! (which is placed after it) unless it reads a value of the group, which
//! closes the group first. A group of one equation stays a plain step.
//! What is not covered on the CPU (other dtypes, an operand the tile hook
//! refuses) runs as before, one step per equation. A group may also take
//! row reductions and the ops around them (`fuse_rows`, NOTE: [row
//! fusion]). Equations on a CUDA
//! device group the same way (the device is part of the group's key) and
//! run as one generated kernel per group (`fuse_cuda`, NOTE: [cuda
//! elementwise fusion]).

use crate::tiles::{run_fused, with_fused_inputs, FusedIn, OutBase};
use smallvec::SmallVec;
use xform_ops::prims::jit::{Tile, TileMut};
use xform_ops::{Array, Atom, DType, Device, Error, Prim, Program, Result, Shape};

/// Elements per tile: 1024 f64 scratch values are 8 KiB per op, so a
/// group's scratch stays in L1/L2.
pub const TILE: usize = 1024;

/// Where an op of a fused step reads an operand.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Reg {
    /// The step's operand of this index.
    In(u32),
    /// The result of the group's op of this index.
    Op(u32),
}

/// One op of a fused step.
#[derive(Clone, Debug)]
pub struct FusedOp {
    /// The elementwise primitive.
    pub prim: Prim,
    /// Its operands.
    pub args: SmallVec<[Reg; 3]>,
    /// Its result dtype.
    pub dtype: DType,
}

/// A fused step: ops over one shape, run tile by tile.
#[derive(Clone, Debug)]
pub struct Fused {
    /// The shape of every operand and result.
    pub shape: Shape,
    /// The ops, in program order.
    pub ops: Vec<FusedOp>,
    /// The op whose result each output of the step is.
    pub outputs: Vec<u32>,
    /// On a CUDA device, the group's generated kernel (NOTE: [cuda
    /// elementwise fusion]); `None` on the CPU.
    pub cuda: Option<Box<super::fuse_cuda::CudaFused>>,
}

/// A program equation, or a group of them, in the order the plan runs.
#[derive(Debug)]
pub enum Item {
    /// One equation (its index in the program).
    Eqn(usize),
    /// A fused group: its equations (indices, program order), the atoms
    /// it reads from outside, the variables it writes, and the kernel.
    Group {
        /// Its equations' indices, in program order.
        eqns: Vec<usize>,
        /// The atoms it reads from outside, in the order of its operands.
        ins: Vec<Atom>,
        /// The variables it writes (those read after it).
        outs: Vec<u32>,
        /// The fused kernel.
        fused: Fused,
    },
    /// A row group (NOTE: [row fusion] in `fuse_rows.rs`): its
    /// equations, the atoms it reads, the variables it writes, and the step.
    Rows {
        /// Its equations' indices, in program order.
        eqns: Vec<usize>,
        /// The atoms it reads from outside, in the order of its operands.
        ins: Vec<Atom>,
        /// The variables it writes (those read after it).
        outs: Vec<u32>,
        /// The row step.
        rows: super::fuse_rows::RowFused,
    },
}

/// The dtypes a tile holds.
pub(super) fn tile_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::Bool)
}

/// An empty tile of dtype `d` (for asking `cpu_tile` whether it applies).
fn empty(d: DType) -> Tile<'static> {
    match d {
        DType::F32 => Tile::F32(&[]),
        DType::F64 => Tile::F64(&[]),
        _ => Tile::Bool(&[]),
    }
}

/// The shape and device of equation `k` when it can join a fused group
/// (on CUDA only if `cuda`: NOTE: [cuda elementwise fusion]).
pub(crate) fn fusable(p: &Program, k: usize, cuda: bool) -> Option<(Shape, Device)> {
    let e = &p.eqns[k];
    if !e.prim.is_elementwise() {
        return None;
    }
    if e.outputs.len() != 1 {
        return None;
    }
    let out = &p.avals[e.outputs[0].0 as usize];
    if let Device::Cuda(_) = out.device {
        return (cuda && super::fuse_cuda::fusable(p, e)).then(|| (out.shape.clone(), out.device));
    }
    if out.device != Device::Cpu || !tile_dtype(out.dtype) || out.shape.numel() == 0 {
        return None;
    }
    let mut ins: SmallVec<[Tile<'static>; 3]> = SmallVec::new();
    for a in &e.inputs {
        let av = p.atom_aval(*a);
        if av.device != Device::Cpu || !tile_dtype(av.dtype) || av.shape != out.shape {
            return None;
        }
        ins.push(empty(av.dtype));
    }
    let probe = match out.dtype {
        DType::F32 => TileMut::F32(&mut []),
        DType::F64 => TileMut::F64(&mut []),
        _ => TileMut::Bool(&mut []),
    };
    e.prim.cpu_tile(&ins, probe).then(|| (out.shape.clone(), Device::Cpu))
}

/// Groups the program's equations (see the module docs), CUDA equations
/// too if `cuda`.
pub fn group_with(p: &Program, cuda: bool) -> Vec<Item> {
    grouped(p, cuda, &last_reads(p))
}

/// The index of the last equation that reads each variable (`usize::MAX`
/// for an output of the program, 0 for a variable nothing reads).
pub(crate) fn last_reads(p: &Program) -> Vec<usize> {
    let mut last = vec![0; p.avals.len()];
    for (k, e) in p.eqns.iter().enumerate() {
        for a in &e.inputs {
            if let Atom::Var(v) = a {
                last[v.0 as usize] = k;
            }
        }
    }
    for a in &p.outputs {
        if let Atom::Var(v) = a {
            last[v.0 as usize] = usize::MAX;
        }
    }
    last
}

/// [`group_with`] given [`last_reads`].
pub(crate) fn grouped(p: &Program, cuda: bool, last_read: &[usize]) -> Vec<Item> {
    let mut items = Vec::with_capacity(p.eqns.len());
    let mut open: Vec<usize> = Vec::new();
    let mut shape: Option<(Shape, Device)> = None;
    // which equation defines each variable
    let mut def = vec![usize::MAX; p.avals.len()];
    for (k, e) in p.eqns.iter().enumerate() {
        for v in &e.outputs {
            def[v.0 as usize] = k;
        }
    }
    // whether the open group took row ops (NOTE: [row fusion])
    let mut rows = false;
    let close = |open: &mut Vec<usize>, items: &mut Vec<Item>, rows: &mut bool, shape: &Option<(Shape, Device)>| {
        match (open.len(), shape) {
            (0, _) => {}
            (2.., Some((full, _))) if *rows => {
                items.push(super::fuse_rows::make_rows(p, full, std::mem::take(open), last_read));
            }
            (1, _) => items.push(Item::Eqn(open[0])),
            _ => items.extend(make_group(p, std::mem::take(open), last_read)),
        }
        open.clear();
        *rows = false;
    };
    for k in 0..p.eqns.len() {
        let f = fusable(p, k, cuda);
        if f.is_some() && f == shape {
            open.push(k);
            continue;
        }
        if let Some((full, device)) = &shape {
            if super::fuse_rows::joins_open(p, k, full, *device, &open, &def) {
                open.push(k);
                rows = true;
                continue;
            }
        }
        // a reduction over the last axis opens a row group
        let opened = match f {
            Some(s) => Some((s, false)),
            None => super::fuse_rows::opens(p, k).map(|s| ((s, Device::Cpu), true)),
        };
        match opened {
            Some((s, row_group)) => {
                close(&mut open, &mut items, &mut rows, &shape);
                open.push(k);
                shape = Some(s);
                rows = row_group;
            }
            None => {
                let reads_group = p.eqns[k].inputs.iter().any(|a| match a {
                    Atom::Var(v) => open.contains(&def[v.0 as usize]),
                    Atom::Const(_) => false,
                });
                if reads_group {
                    close(&mut open, &mut items, &mut rows, &shape);
                    shape = None;
                }
                items.push(Item::Eqn(k));
            }
        }
    }
    close(&mut open, &mut items, &mut rows, &shape);
    items
}

/// The fused step of equations `eqns` (program order; one where the plan
/// writes its result over an operand), or the equations as plain steps
/// when they are a CUDA group over the kernel's limits.
pub(crate) fn make_group(p: &Program, eqns: Vec<usize>, last_read: &[usize]) -> Vec<Item> {
    let mut ins: Vec<Atom> = Vec::new();
    let mut ops: Vec<FusedOp> = Vec::with_capacity(eqns.len());
    // op index of each variable defined in the group
    let mut local = std::collections::HashMap::new();
    for &k in &eqns {
        let e = &p.eqns[k];
        let args = e
            .inputs
            .iter()
            .map(|a| {
                if let Atom::Var(v) = a {
                    if let Some(&j) = local.get(&v.0) {
                        return Reg::Op(j);
                    }
                }
                let i = ins.iter().position(|x| x == a).unwrap_or_else(|| {
                    ins.push(*a);
                    ins.len() - 1
                });
                Reg::In(i as u32)
            })
            .collect();
        let v = e.outputs[0].0;
        local.insert(v, ops.len() as u32);
        ops.push(FusedOp { prim: e.prim.clone(), args, dtype: p.avals[v as usize].dtype });
    }
    // outputs: group values read after the group's last equation or by
    // the program (an equation between its first and last that reads one
    // of its values would have closed it, see `grouped`)
    let end = *eqns.last().expect("a group has equations");
    let mut outs = Vec::new();
    let mut outputs = Vec::new();
    for &k in &eqns {
        let v = p.eqns[k].outputs[0];
        if last_read[v.0 as usize] > end {
            outs.push(v.0);
            outputs.push(local[&v.0]);
        }
    }
    let out = &p.avals[p.eqns[eqns[0]].outputs[0].0 as usize];
    let mut fused = Fused { shape: out.shape.clone(), ops, outputs, cuda: None };
    if let Device::Cuda(_) = out.device {
        match super::fuse_cuda::kernel(p, &ins, &fused) {
            Some(k) => fused.cuda = Some(Box::new(k)),
            None => return eqns.into_iter().map(Item::Eqn).collect(),
        }
    }
    vec![Item::Group { eqns, ins, outs, fused }]
}

/// The most scratch tiles a thread keeps between fused loops.
pub(super) const MAX_SPARE: usize = 32;

thread_local! {
    /// Scratch tiles of finished fused loops, for the next ones.
    pub(super) static SPARE: std::cell::RefCell<Vec<Scratch>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Scratch storage for one tile of one dtype: `TILE` elements from the
/// first 64-byte line boundary of a slightly longer buffer (vector stores
/// that split lines cost about a quarter more).
pub(super) enum Scratch {
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
}

impl Scratch {
    /// A tile of scratch of dtype `d`: one of `spare` (the thread's
    /// [`SPARE`], at most `MAX_SPARE` tiles: about 256 KiB of f64), or a
    /// new one.
    pub(super) fn take(spare: &mut Vec<Scratch>, d: DType) -> Scratch {
        match spare.iter().rposition(|x| x.dtype() == d) {
            Some(at) => spare.swap_remove(at),
            None => match d {
                DType::F32 => Scratch::F32(vec![0.0; TILE + LINE]),
                DType::F64 => Scratch::F64(vec![0.0; TILE + LINE]),
                _ => Scratch::Bool(vec![false; TILE + LINE]),
            },
        }
    }

    fn dtype(&self) -> DType {
        match self {
            Scratch::F32(_) => DType::F32,
            Scratch::F64(_) => DType::F64,
            Scratch::Bool(_) => DType::Bool,
        }
    }

    pub(super) fn tile(&self, n: usize) -> Tile<'_> {
        match self {
            Scratch::F32(v) => Tile::F32(&v[lined(v)..][..n]),
            Scratch::F64(v) => Tile::F64(&v[lined(v)..][..n]),
            Scratch::Bool(v) => Tile::Bool(&v[lined(v)..][..n]),
        }
    }

    pub(super) fn tile_mut(&mut self, n: usize) -> TileMut<'_> {
        match self {
            Scratch::F32(v) => TileMut::F32(writable(lined_mut(v, n))),
            Scratch::F64(v) => TileMut::F64(writable(lined_mut(v, n))),
            Scratch::Bool(v) => TileMut::Bool(writable(lined_mut(v, n))),
        }
    }

    /// The tile to gather an operand into.
    pub(super) fn gather_into(&mut self, n: usize) -> GatherDst<'_> {
        match self {
            Scratch::F32(v) => GatherDst::F32(lined_mut(v, n)),
            Scratch::F64(v) => GatherDst::F64(lined_mut(v, n)),
            Scratch::Bool(v) => GatherDst::Bool(lined_mut(v, n)),
        }
    }
}

/// Slack elements a scratch buffer holds to start its tile on a line.
const LINE: usize = 64;

/// Elements of `v` before its first 64-byte line boundary.
fn lined<T>(v: &[T]) -> usize {
    (64 - v.as_ptr() as usize % 64) % 64 / std::mem::size_of::<T>().max(1)
}

/// `n` elements of `v` from its first line boundary.
fn lined_mut<T>(v: &mut [T], n: usize) -> &mut [T] {
    let at = lined(v);
    &mut v[at..at + n]
}

/// `v` as a tile an op writes.
fn writable<T>(v: &mut [T]) -> &mut [std::mem::MaybeUninit<T>] {
    // SAFETY: MaybeUninit<T> has the layout of T, and the view is only
    // written with initialized values (`Prim::cpu_tile` writes results),
    // so `v` stays initialized for its later reads.
    unsafe { &mut *(v as *mut [T] as *mut [std::mem::MaybeUninit<T>]) }
}

/// A scratch tile an operand is gathered into.
pub(super) enum GatherDst<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    Bool(&'a mut [bool]),
}

/// Copies elements `start..start + out.len()` (row-major order) of a
/// strided operand into `out`, a run along the innermost axis at a time
/// (a copy where its stride is 1, a fill where it is 0: a broadcast row or
/// column).
pub(super) fn gather<T: Copy>(
    data: &[T],
    shape: &[usize],
    strides: &[isize],
    offset: usize,
    start: usize,
    out: &mut [T],
) {
    let rank = shape.len();
    if rank == 0 || strides.iter().all(|s| *s == 0) {
        out.fill(data[offset]);
        return;
    }
    // A broadcast along leading axes (a bias row) repeats a block of
    // `period` elements: gather one block, then double the filled prefix
    // (one copy per doubling, not one per short row).
    let lead = strides.iter().position(|s| *s != 0).unwrap_or(rank);
    let period: usize = shape[lead..].iter().product();
    if lead > 0 && period > 0 && out.len() >= 2 * period {
        gather(data, shape, strides, offset, start, &mut out[..period]);
        let mut filled = period;
        while filled < out.len() {
            let more = filled.min(out.len() - filled);
            out.copy_within(..more, filled);
            filled += more;
        }
        return;
    }
    let mut idx: SmallVec<[usize; 6]> = SmallVec::from_elem(0, rank);
    let mut rem = start;
    let mut off = offset as isize;
    for ax in (0..rank).rev() {
        idx[ax] = rem % shape[ax];
        rem /= shape[ax];
        off += idx[ax] as isize * strides[ax];
    }
    let (inner, is) = (shape[rank - 1], strides[rank - 1]);
    let mut done = 0;
    while done < out.len() {
        if rank >= 2 && inner > 0 && idx[rank - 1] == 0 && out.len() - done >= inner {
            // whole rows along the next axis out, carried once at the end
            // (a broadcast column, [64, 1] -> [64, 10], fills 64 rows of 10)
            let rows = (shape[rank - 2] - idx[rank - 2]).min((out.len() - done) / inner);
            let rs = strides[rank - 2];
            for (r, dst) in out[done..done + rows * inner].chunks_exact_mut(inner).enumerate() {
                copy_run(data, off + r as isize * rs, is, dst);
            }
            done += rows * inner;
            idx[rank - 2] += rows;
            off += rows as isize * rs;
            carry(&mut idx, &mut off, shape, strides, rank - 2);
            continue;
        }
        let run = (inner - idx[rank - 1]).min(out.len() - done);
        copy_run(data, off, is, &mut out[done..done + run]);
        done += run;
        idx[rank - 1] += run;
        off += run as isize * is;
        carry(&mut idx, &mut off, shape, strides, rank - 1);
    }
}

/// `dst[k] = data[at + k * stride]`: a copy where the stride is 1, a fill
/// where it is 0.
fn copy_run<T: Copy>(data: &[T], at: isize, stride: isize, dst: &mut [T]) {
    match stride {
        1 => dst.copy_from_slice(&data[at as usize..at as usize + dst.len()]),
        0 => dst.fill(data[at as usize]),
        _ => {
            for (k, d) in dst.iter_mut().enumerate() {
                *d = data[(at + k as isize * stride) as usize];
            }
        }
    }
}

/// Moves the index `idx` (at element offset `off`) on from axis `ax`
/// reaching its end: resets it and steps the next axis out, as far out as
/// axes end (the outermost may reach its end: the last element was done).
fn carry(idx: &mut [usize], off: &mut isize, shape: &[usize], strides: &[isize], mut ax: usize) {
    while idx[ax] == shape[ax] && ax > 0 {
        *off -= strides[ax] * shape[ax] as isize;
        idx[ax] = 0;
        ax -= 1;
        idx[ax] += 1;
        *off += strides[ax];
    }
}

/// Whether element `e` of `layout` (row-major order) depends on `e` modulo
/// a period that divides `TILE` only: every axis before the innermost run
/// of axes with nonzero strides has stride 0 (a broadcast along leading
/// axes), and that run's size divides `TILE`. Tiles start at multiples of
/// `TILE`, so each then holds the same elements (a shorter last tile, a
/// prefix of them).
fn tile_periodic(layout: &xform_kernels::Layout) -> bool {
    let lead = layout.strides.iter().position(|s| *s != 0).unwrap_or(layout.shape.len());
    let period: usize = layout.shape[lead..].iter().product();
    lead > 0 && period > 0 && TILE.is_multiple_of(period)
}

impl Fused {
    /// The loop's cost per element, as `for_ranges` weighs it: 2 per op.
    fn cost(&self) -> usize {
        2 * self.ops.len()
    }

    /// Whether the loop runs in halves where a pair is lent (NOTE: [paired
    /// halves] in `xform_kernels::cpu::pair`).
    pub fn halves(&self) -> bool {
        xform_kernels::cpu::pair::halves(self.shape.numel(), TILE, self.cost())
    }

    /// Runs the fused loop on the step's operands (CPU arrays of the
    /// planned shapes and dtypes). Output `j` with `donors[j] = Some(i)` is
    /// written over operand `i`'s buffer (the plan checked that nothing
    /// else holds it, that it is contiguous with the group's shape and the
    /// output's dtype, and that this step reads it last) and is returned
    /// as that array; the others are fresh.
    ///
    /// # Errors
    /// Out of memory, or an operand not on the CPU in a tile dtype (an
    /// internal error: the plan was compiled for these avals).
    pub fn run(&self, arrays: &[&Array], donors: &[Option<u32>]) -> Result<xform_ops::Outs> {
        #[cfg(feature = "cuda")]
        if let Some(k) = &self.cuda {
            return self.run_cuda(k, arrays);
        }
        let dtypes: SmallVec<[DType; 4]> = self.outputs.iter().map(|&j| self.ops[j as usize].dtype).collect();
        let mut is_donor: SmallVec<[bool; 8]> = SmallVec::from_elem(false, arrays.len());
        for i in donors.iter().flatten() {
            is_donor[*i as usize] = true;
        }
        let cost = self.cost();
        // the output each op writes in place of its scratch: a fresh one
        // (one written over a donor waits for the tile's last read of it)
        let mut direct: SmallVec<[Option<usize>; 8]> = SmallVec::from_elem(None, self.ops.len());
        for (k, &j) in self.outputs.iter().enumerate() {
            if donors.get(k).copied().flatten().is_none() && direct[j as usize].is_none() {
                direct[j as usize] = Some(k);
            }
        }
        let outs = with_fused_inputs(arrays, &is_donor, |ins| {
            let dests: SmallVec<[Option<OutBase>; 4]> = (0..dtypes.len())
                .map(|j| donors.get(j).copied().flatten().and_then(|i| ins[i as usize].donor))
                .collect();
            run_fused(&dtypes, &dests, &self.shape, cost, TILE, |r, o| self.body(ins, &direct, r, o))
        })
        .flatten()
        .ok_or_else(|| Error::invalid("jit", "a fused step got an operand it was not planned for (internal error)"))?;
        Ok(outs
            .into_iter()
            .enumerate()
            .map(|(j, o)| match o {
                Some(a) => xform_ops::Tensor::from_array(a),
                None => {
                    let i = donors[j].expect("a written-over output has a donor") as usize;
                    xform_ops::Tensor::from_array(arrays[i].clone())
                }
            })
            .collect())
    }

    /// Elements `r` of every output, tile by tile: the operands' tiles are
    /// read (a donor's in place: its tile of the output is written only
    /// after every op of the tile ran), the ops applied, each into scratch
    /// or, for an op whose result is a fresh output (`to_out[op]`), into
    /// that output's tile directly; then the other outputs' tiles are
    /// copied out of scratch.
    fn body(&self, ins: &[FusedIn<'_>], to_out: &[Option<usize>], r: std::ops::Range<usize>, outs: &[OutBase]) {
        // (The per-call state lives in small inline vectors and the scratch
        // tiles come from the thread's spares in one borrow: a dispatch-
        // sized step, a few ops on 8 elements, spends most of its time
        // here rather than in the ops.)
        let mut srcs: SmallVec<[Src; 4]> = SmallVec::with_capacity(ins.len());
        let mut scratch: SmallVec<[Option<Scratch>; 8]> = SmallVec::with_capacity(self.ops.len());
        SPARE.with(|spare| {
            let mut spare = spare.borrow_mut();
            for i in ins {
                srcs.push(match (i.donor, i.layout.contiguous_range()) {
                    (Some(base), _) => Src::Donor(base),
                    (None, Some(c)) => Src::Direct(c.start),
                    // operands whose every tile reads the same elements (a
                    // broadcast along leading axes of a block that divides
                    // the tile) are gathered at the first tile only
                    (None, None) => Src::Gather(Scratch::take(&mut spare, i.data.dtype()), tile_periodic(i.layout)),
                });
            }
            for (o, d) in self.ops.iter().zip(to_out) {
                scratch.push(d.is_none().then(|| Scratch::take(&mut spare, o.dtype)));
            }
        });
        let mut t = r.start;
        while t < r.end {
            let n = TILE.min(r.end - t);
            for (inp, src) in ins.iter().zip(srcs.iter_mut()) {
                let Src::Gather(g, same) = src else { continue };
                if *same && t > r.start {
                    continue;
                }
                let l = inp.layout;
                let (shape, strides, off) = (&l.shape[..], &l.strides[..], l.offset);
                match (inp.data, g.gather_into(n)) {
                    (Tile::F32(d), GatherDst::F32(s)) => gather(d, shape, strides, off, t, s),
                    (Tile::F64(d), GatherDst::F64(s)) => gather(d, shape, strides, off, t, s),
                    (Tile::Bool(d), GatherDst::Bool(s)) => gather(d, shape, strides, off, t, s),
                    _ => unreachable!("gather scratch has its operand's dtype"),
                }
            }
            let tiles: SmallVec<[Tile<'_>; 4]> = ins
                .iter()
                .zip(&srcs)
                .map(|(inp, src)| match src {
                    // SAFETY: the donor's elements t..t+n are initialized (a
                    // whole array) and in bounds (contiguous, the group's
                    // shape); the output tile over them is written only
                    // after the last use of this view (the ops below; the
                    // tiles are dropped before the outputs are written),
                    // and other threads handle other ranges.
                    Src::Donor(base) => unsafe { base.tile(t..t + n) },
                    Src::Direct(s) => match inp.data {
                        Tile::F32(d) => Tile::F32(&d[s + t..s + t + n]),
                        Tile::F64(d) => Tile::F64(&d[s + t..s + t + n]),
                        Tile::Bool(d) => Tile::Bool(&d[s + t..s + t + n]),
                    },
                    Src::Gather(g, _) => g.tile(n),
                })
                .collect();
            for (j, op) in self.ops.iter().enumerate() {
                let (done, rest) = scratch.split_at_mut(j);
                // elementwise ops take at most three operands (select)
                let mut args = [Tile::F32(&[]); 3];
                for (arg, a) in args.iter_mut().zip(&op.args) {
                    *arg = match a {
                        Reg::In(i) => tiles[*i as usize],
                        Reg::Op(m) => match (&done[*m as usize], to_out[*m as usize]) {
                            (Some(s), _) => s.tile(n),
                            // SAFETY: op m wrote elements t..t+n of this
                            // fresh output above (this task's range), and
                            // its view of them is gone; no op writes them
                            // again.
                            (None, Some(k)) => unsafe { outs[k].tile(t..t + n) },
                            (None, None) => unreachable!("an op without scratch writes an output"),
                        },
                    };
                }
                let dst = match (&mut rest[0], to_out[j]) {
                    (Some(s), _) => s.tile_mut(n),
                    // SAFETY: elements t..t+n lie in this fresh output (this
                    // task's range); only this op writes them, and no view
                    // of them is alive (later ops read them after this one).
                    (None, Some(k)) => unsafe { outs[k].range(t..t + n) },
                    (None, None) => unreachable!("an op without scratch writes an output"),
                };
                let applied = op.prim.cpu_tile(&args[..op.args.len()], dst);
                assert!(applied, "a fused op was planned for these dtypes");
            }
            // no view of a donor's tile lives on while the outputs are written
            drop(tiles);
            for (k, (base, &j)) in outs.iter().zip(&self.outputs).enumerate() {
                let Some(s) = &scratch[j as usize] else { continue };
                if to_out[j as usize] == Some(k) {
                    continue;
                }
                // SAFETY: elements t..t+n lie in the output (this task's
                // range); no other view of them is alive (the donor views
                // were dropped above; other tasks write other ranges).
                let mut view = unsafe { base.range(t..t + n) };
                view.put(0, &s.tile(n));
            }
            t += n;
        }
        SPARE.with(|spare| {
            let mut spare = spare.borrow_mut();
            let gathered = srcs.into_iter().filter_map(|s| match s {
                Src::Gather(g, _) => Some(g),
                _ => None,
            });
            for g in gathered.chain(scratch.into_iter().flatten()) {
                if spare.len() < MAX_SPARE {
                    spare.push(g);
                }
            }
        });
    }
}

/// Where a fused loop reads an operand's tiles.
enum Src {
    /// A donor's buffer (contiguous from its start), read before the
    /// output's tile is written over it.
    Donor(OutBase),
    /// A contiguous run from this element of the operand's storage.
    Direct(usize),
    /// Gathered through its strides into scratch; `true` when every tile
    /// holds the same elements (gathered at the first tile only).
    Gather(Scratch, bool),
}

#[cfg(test)]
pub(crate) mod tests;
