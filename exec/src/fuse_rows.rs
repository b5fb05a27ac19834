//! Row fusion of the replay plan (CPU): elementwise chains through
//! reductions over the last axis and broadcasts back along it.
//!
//! NOTE: [row fusion] An open fused group of full shape `[..., C]` (see
//! NOTE: [elementwise fusion]) also takes the equations that work on its
//! rows one at a time:
//! - elementwise equations on one value per row (shape `[...]` or
//!   `[..., 1]`: *narrow* values),
//! - sums, maxima and minima over the last axis (full to narrow),
//! - broadcasts of a narrow value along the last axis (narrow to full),
//! - reshapes between the two narrow shapes and `stop_gradient` of a
//!   value of the group, which compute nothing: the result is the
//!   operand's value under another aval.
//!
//! A softmax, a logsumexp or a cross-entropy over classes is then one
//! step instead of a dozen (W1 small's loss and its gradient: fifteen
//! steps of a few hundred elements each, about 0.2-1 us apiece, mostly
//! fixed costs). The step runs over chunks of whole rows (`TILE / C` rows,
//! or one row): each op applies to its chunk in scratch, a narrow op to
//! one element per row; only the group's outputs are written to full
//! buffers. The last axis is at most `TILE` long (a longer row is better
//! reduced by the reduction's own kernel) and at least 2 (else full and
//! narrow values would have the same shape).
//!
//! Results are bit-identical to eager execution: an elementwise op applies
//! its eager element function (`Prim::cpu_tile`), a reduction reduces each
//! row as the eager lowering reduces the rows of the same array
//! (`Prim::cpu_row_reduce`: an f32 sum of a contiguous array's rows in the
//! same f64 lanes; one of an operand read through its strides, and every
//! other reduction, by the same sequential fold), and a broadcast copies
//! bits.

use super::fuse::{self, gather, GatherDst, Item, Reg, Scratch, MAX_SPARE, SPARE, TILE};
use crate::tiles::{run_fused_shaped, with_fused_inputs, FusedIn, OutBase};
use smallvec::SmallVec;
use std::collections::HashMap;
use xform_ops::prims::jit::RowFusion;
use xform_ops::prims::jit::{Tile, TileMut};
use xform_ops::{Array, Atom, DType, Device, Error, Prim, Program, Result, Shape};

/// What one op of a row step computes.
#[derive(Clone, Debug)]
pub enum RowKind {
    /// An elementwise primitive, over the full rows or (`narrow`) over one
    /// value per row.
    Map {
        /// The primitive.
        prim: Prim,
        /// Its operands.
        args: SmallVec<[Reg; 3]>,
        /// Whether it works on narrow values.
        narrow: bool,
    },
    /// A reduction over the last axis: one value per row.
    Reduce {
        /// The reduction (`Reduce { op, axes: [last] }`).
        prim: Prim,
        /// Its full operand.
        arg: Reg,
    },
    /// Each row's value repeated along the row (a broadcast of a narrow value).
    Spread {
        /// The narrow operand.
        arg: Reg,
    },
}

/// One op of a row step.
#[derive(Clone, Debug)]
pub struct RowOp {
    /// What it computes.
    pub kind: RowKind,
    /// Its result dtype.
    pub dtype: DType,
}

impl RowOp {
    /// Whether its result holds one value per row.
    fn narrow(&self) -> bool {
        match self.kind {
            RowKind::Map { narrow, .. } => narrow,
            RowKind::Reduce { .. } => true,
            RowKind::Spread { .. } => false,
        }
    }
}

/// A row step: ops over the rows of one full shape (NOTE: [row fusion]).
#[derive(Clone, Debug)]
pub struct RowFused {
    /// The full shape.
    pub shape: Shape,
    /// The length of a row (the last axis).
    pub row: usize,
    /// The number of rows.
    pub rows: usize,
    /// The ops, in program order.
    pub ops: Vec<RowOp>,
    /// Whether each operand is narrow (else it has the full shape).
    pub narrow_in: Vec<bool>,
    /// Each output: the op whose result it is, and its shape (full, or
    /// either narrow shape).
    pub outputs: Vec<(u32, Shape)>,
}

/// Whether a group of full shape `full` on `device` may take row ops.
pub(crate) fn row_capable(full: &Shape, device: Device) -> bool {
    device == Device::Cpu && full.rank() >= 1 && (2..=TILE).contains(&full[full.rank() - 1])
}

/// Whether `s` holds one value per row of `full`: its leading axes, with
/// or without a trailing 1.
fn narrow_of(full: &Shape, s: &Shape) -> bool {
    let lead = &full.dims()[..full.rank() - 1];
    let d = s.dims();
    d == lead || (d.len() == lead.len() + 1 && &d[..lead.len()] == lead && d[lead.len()] == 1)
}

/// How an equation joins a row group.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Join {
    /// An elementwise op on narrow values.
    Narrow,
    /// A reduction over the last axis.
    Reduce,
    /// A broadcast of a narrow value along the last axis.
    Spread,
    /// A reshape between narrow shapes or a `stop_gradient` of a group
    /// value: the operand's value.
    Alias,
}

/// How equation `k` joins an open row group of full shape `full` (see
/// [`row_capable`]), if it can; `in_group(a)`: whether `a` is a value of
/// the group.
fn joins(p: &Program, k: usize, full: &Shape, in_group: impl Fn(&Atom) -> bool) -> Option<Join> {
    let e = &p.eqns[k];
    if e.outputs.len() != 1 || e.inputs.is_empty() {
        return None;
    }
    let out = &p.avals[e.outputs[0].0 as usize];
    let x = p.atom_aval(e.inputs[0]);
    if out.device != Device::Cpu || x.device != Device::Cpu || !fuse::tile_dtype(out.dtype) {
        return None;
    }
    if let Some((s, _)) = fuse::fusable(p, k, false) {
        return (narrow_of(full, &s)).then_some(Join::Narrow);
    }
    match e.prim.row_fusion() {
        RowFusion::Reduce { axes } => {
            let last = axes.len() == 1 && axes[0] == full.rank() - 1;
            let row = full[full.rank() - 1];
            let probe = match x.dtype {
                DType::F32 => e.prim.cpu_row_reduce(&Tile::F32(&[]), row, false, TileMut::F32(&mut [])),
                DType::F64 => e.prim.cpu_row_reduce(&Tile::F64(&[]), row, false, TileMut::F64(&mut [])),
                _ => false,
            };
            (last && probe && x.shape == *full && x.dtype == out.dtype).then_some(Join::Reduce)
        }
        RowFusion::Broadcast { dims } => {
            // the operand's axes stay where they are: it varies along the
            // leading axes and is constant along the last
            let kept = dims.iter().enumerate().all(|(i, d)| i == *d);
            (out.shape == *full && narrow_of(full, &x.shape) && kept && x.dtype == out.dtype).then_some(Join::Spread)
        }
        RowFusion::SameElements => {
            let same = x.shape == out.shape || (narrow_of(full, &x.shape) && narrow_of(full, &out.shape));
            (same && x.dtype == out.dtype && in_group(&e.inputs[0])).then_some(Join::Alias)
        }
        RowFusion::None => None,
    }
}

/// Whether equation `k` joins the open group `open` of full shape `full`
/// on `device` as a row op (`def`: the equation defining each variable).
pub(crate) fn joins_open(p: &Program, k: usize, full: &Shape, device: Device, open: &[usize], def: &[usize]) -> bool {
    let in_group = |a: &Atom| match a {
        Atom::Var(v) => open.contains(&def[v.0 as usize]),
        Atom::Const(_) => false,
    };
    !open.is_empty() && row_capable(full, device) && joins(p, k, full, in_group).is_some()
}

/// The full shape of the row group that equation `k` opens: a reduction
/// over the last axis of a row-capable operand.
pub(crate) fn opens(p: &Program, k: usize) -> Option<Shape> {
    let e = &p.eqns[k];
    let x = p.atom_aval(*e.inputs.first()?);
    let reduce = matches!(e.prim.row_fusion(), RowFusion::Reduce { .. });
    (reduce && row_capable(&x.shape, x.device) && joins(p, k, &x.shape, |_| false) == Some(Join::Reduce))
        .then(|| x.shape.clone())
}

/// The row step of equations `eqns` (program order) of a group of full
/// shape `full` (NOTE: [row fusion]).
pub(crate) fn make_rows(p: &Program, full: &Shape, eqns: Vec<usize>, last_read: &[usize]) -> Item {
    let mut ins: Vec<Atom> = Vec::new();
    let mut narrow_in = Vec::new();
    let mut ops: Vec<RowOp> = Vec::with_capacity(eqns.len());
    // the register holding each variable of the group
    let mut local: HashMap<u32, Reg> = HashMap::new();
    for &k in &eqns {
        let e = &p.eqns[k];
        let mut args: SmallVec<[Reg; 3]> = SmallVec::new();
        for a in &e.inputs {
            if let Some(r) = var(a).and_then(|v| local.get(&v)) {
                args.push(*r);
                continue;
            }
            let i = ins.iter().position(|x| x == a).unwrap_or_else(|| {
                ins.push(*a);
                narrow_in.push(p.atom_aval(*a).shape != *full);
                ins.len() - 1
            });
            args.push(Reg::In(i as u32));
        }
        let v = e.outputs[0].0;
        let dtype = p.avals[v as usize].dtype;
        let in_group = |a: &Atom| var(a).is_some_and(|v| local.contains_key(&v));
        let kind = match joins(p, k, full, in_group) {
            Some(Join::Alias) => {
                local.insert(v, args[0]);
                continue;
            }
            Some(Join::Narrow) => RowKind::Map { prim: e.prim.clone(), args, narrow: true },
            Some(Join::Reduce) => RowKind::Reduce { prim: e.prim.clone(), arg: args[0] },
            Some(Join::Spread) => RowKind::Spread { arg: args[0] },
            None => RowKind::Map { prim: e.prim.clone(), args, narrow: false },
        };
        local.insert(v, Reg::Op(ops.len() as u32));
        ops.push(RowOp { kind, dtype });
    }
    // outputs: group values read after the group or by the program
    let end = *eqns.last().expect("a group has equations");
    let (mut outs, mut outputs) = (Vec::new(), Vec::new());
    for &k in &eqns {
        let v = p.eqns[k].outputs[0].0;
        if last_read[v as usize] > end {
            let Reg::Op(j) = local[&v] else { unreachable!("an alias joins only on a value of the group") };
            outs.push(v);
            outputs.push((j, p.avals[v as usize].shape.clone()));
        }
    }
    let row = full[full.rank() - 1];
    let rows = full.numel() / row;
    Item::Rows { eqns, ins, outs, rows: RowFused { shape: full.clone(), row, rows, ops, narrow_in, outputs } }
}

/// The variable an atom names, if it is one.
fn var(a: &Atom) -> Option<u32> {
    match a {
        Atom::Var(v) => Some(v.0),
        Atom::Const(_) => None,
    }
}

/// Where a row step reads an operand's chunks.
enum Src {
    /// A contiguous run from this element of the operand's storage.
    Direct(usize),
    /// Gathered through its strides into scratch.
    Gather(Scratch),
}

impl RowFused {
    /// Runs the row step on its operands (CPU arrays of the planned shapes
    /// and dtypes); every output is fresh.
    ///
    /// # Errors
    /// Out of memory, or an operand not on the CPU in a tile dtype (an
    /// internal error: the plan was compiled for these avals).
    pub fn run(&self, arrays: &[&Array]) -> Result<xform_ops::Outs> {
        let dtypes: SmallVec<[DType; 4]> = self.outputs.iter().map(|(j, _)| self.ops[*j as usize].dtype).collect();
        let donors: SmallVec<[bool; 8]> = SmallVec::from_elem(false, arrays.len());
        let cost = self.cost();
        let outs = with_fused_inputs(arrays, &donors, |ins| {
            run_fused_shaped(
                &dtypes,
                &[],
                |j| &self.outputs[j].1,
                self.rows,
                cost,
                self.chunk(),
                |r, o| self.body(ins, r, o),
            )
        })
        .flatten()
        .ok_or_else(|| Error::invalid("jit", "a row step got an operand it was not planned for (internal error)"))?;
        Ok(outs.into_iter().map(|o| xform_ops::Tensor::from_array(o.expect("a fresh output"))).collect())
    }

    /// The loop's cost per row, as `for_ranges` weighs it: 2 per op and
    /// element.
    fn cost(&self) -> usize {
        2 * self.ops.len() * self.row
    }

    /// Whether the loop runs in halves where a pair is lent (NOTE: [paired
    /// halves] in `xform_kernels::cpu::pair`).
    pub fn halves(&self) -> bool {
        xform_kernels::cpu::pair::halves(self.rows, self.chunk(), self.cost())
    }

    /// Rows per chunk: as many whole rows as a scratch tile holds.
    fn chunk(&self) -> usize {
        (TILE / self.row).max(1)
    }

    /// Elements of rows `r` of every output, a chunk of rows at a time.
    fn body(&self, ins: &[FusedIn<'_>], r: std::ops::Range<usize>, outs: &[OutBase]) {
        let chunk = self.chunk();
        let width = |narrow: bool| if narrow { 1 } else { self.row };
        let mut srcs: SmallVec<[Src; 4]> = SmallVec::with_capacity(ins.len());
        let mut scratch: SmallVec<[Scratch; 8]> = SmallVec::with_capacity(self.ops.len());
        SPARE.with(|spare| {
            let mut spare = spare.borrow_mut();
            for i in ins {
                srcs.push(match i.layout.contiguous_range() {
                    Some(c) => Src::Direct(c.start),
                    None => Src::Gather(Scratch::take(&mut spare, i.data.dtype())),
                });
            }
            for o in &self.ops {
                scratch.push(Scratch::take(&mut spare, o.dtype));
            }
        });
        let mut a = r.start;
        while a < r.end {
            let n = chunk.min(r.end - a);
            for ((inp, src), narrow) in ins.iter().zip(srcs.iter_mut()).zip(&self.narrow_in) {
                let Src::Gather(g) = src else { continue };
                let w = width(*narrow);
                let l = inp.layout;
                let (shape, strides, off) = (&l.shape[..], &l.strides[..], l.offset);
                match (inp.data, g.gather_into(n * w)) {
                    (Tile::F32(d), GatherDst::F32(s)) => gather(d, shape, strides, off, a * w, s),
                    (Tile::F64(d), GatherDst::F64(s)) => gather(d, shape, strides, off, a * w, s),
                    (Tile::Bool(d), GatherDst::Bool(s)) => gather(d, shape, strides, off, a * w, s),
                    _ => unreachable!("gather scratch has its operand's dtype"),
                }
            }
            let tiles: SmallVec<[Tile<'_>; 4]> = ins
                .iter()
                .zip(&srcs)
                .zip(&self.narrow_in)
                .map(|((inp, src), narrow)| {
                    let (w, len) = (width(*narrow), n * width(*narrow));
                    match src {
                        Src::Direct(s) => match inp.data {
                            Tile::F32(d) => Tile::F32(&d[s + a * w..][..len]),
                            Tile::F64(d) => Tile::F64(&d[s + a * w..][..len]),
                            Tile::Bool(d) => Tile::Bool(&d[s + a * w..][..len]),
                        },
                        Src::Gather(g) => g.tile(len),
                    }
                })
                .collect();
            for (j, op) in self.ops.iter().enumerate() {
                let (done, rest) = scratch.split_at_mut(j);
                let arg = |reg: &Reg| match reg {
                    Reg::In(i) => tiles[*i as usize],
                    Reg::Op(m) => done[*m as usize].tile(n * width(self.ops[*m as usize].narrow())),
                };
                let dst = rest[0].tile_mut(n * width(op.narrow()));
                let applied = match &op.kind {
                    RowKind::Map { prim, args, .. } => {
                        let mut xs = [Tile::F32(&[]); 3];
                        for (x, r) in xs.iter_mut().zip(args) {
                            *x = arg(r);
                        }
                        prim.cpu_tile(&xs[..args.len()], dst)
                    }
                    RowKind::Reduce { prim, arg: x } => {
                        // rows of an operand read through its strides reduce
                        // as eager reduces that strided array
                        let strided = matches!(x, Reg::In(i) if matches!(srcs[*i as usize], Src::Gather(_)));
                        prim.cpu_row_reduce(&arg(x), self.row, strided, dst)
                    }
                    RowKind::Spread { arg: x } => spread(&arg(x), self.row, dst),
                };
                assert!(applied, "a row op was planned for these dtypes");
            }
            for ((j, _), base) in self.outputs.iter().zip(outs) {
                let w = width(self.ops[*j as usize].narrow());
                // SAFETY: elements a*w..(a+n)*w lie in this fresh output
                // (rows a..a+n of this task's range); only this task
                // writes them, and no other view of them is alive.
                let mut view = unsafe { base.range(a * w..(a + n) * w) };
                view.put(0, &scratch[*j as usize].tile(n * w));
            }
            a += n;
        }
        SPARE.with(|spare| {
            let mut spare = spare.borrow_mut();
            let gathered = srcs.into_iter().filter_map(|s| match s {
                Src::Gather(g) => Some(g),
                Src::Direct(_) => None,
            });
            for g in gathered.chain(scratch) {
                if spare.len() < MAX_SPARE {
                    spare.push(g);
                }
            }
        });
    }
}

/// Each element of `x` repeated `row` times into `out` (a broadcast along
/// the last axis); `false` for mismatched dtypes.
fn spread(x: &Tile<'_>, row: usize, out: TileMut<'_>) -> bool {
    fn fill<T: Copy>(x: &[T], row: usize, out: &mut [std::mem::MaybeUninit<T>]) {
        for (v, dst) in x.iter().zip(out.chunks_exact_mut(row)) {
            dst.fill(std::mem::MaybeUninit::new(*v));
        }
    }
    match (x, out) {
        (Tile::F32(x), TileMut::F32(o)) => fill(x, row, o),
        (Tile::F64(x), TileMut::F64(o)) => fill(x, row, o),
        (Tile::Bool(x), TileMut::Bool(o)) => fill(x, row, o),
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests;
