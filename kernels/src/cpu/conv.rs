//! Convolution on the CPU: im2col plus GEMMs.
//!
//! Operands play the roles of [`ConvGeometry`]'s canonical layouts (lhs
//! `[N, C, D, H, W]`, rhs `[O, C/fg, KD, KH, KW]`), each given as an
//! [`Operand`]: a buffer, an offset and the strides of its two leading
//! axes, with every spatial block (a plane) contiguous. So a lowering can
//! hand over a transposed view (the kernel gradient reads the forward
//! input as `[C, N, ...]`) without copying it.
//!
//! Three ways to compute, chosen by [`conv`]:
//! - By unit (the usual one): each (output example, group) pair is one
//!   unit; its patches are unrolled into a `[C/fg * K, P]` matrix (`K`
//!   kernel taps, `P` output positions; padding and the holes of lhs
//!   dilation become zeros) in a per-thread scratch block that stays in
//!   cache, and the unit's output block `[O/groups, P]` is the group's
//!   weights `[O/groups, C/fg * K]` times it. Units run in parallel. A 1x1
//!   convolution with unit strides and no padding reads the lhs in place
//!   (its patch matrix is the input itself), as one batched GEMM. A
//!   depthwise convolution (one input and one output feature per group)
//!   runs direct loops over shifted input lines instead.
//! - By feature (`cpu/conv_wide.rs`), where the output has few
//!   positions and the window is large (the kernel gradient, whose
//!   "window" is the forward output cotangent): the sum runs over the lhs
//!   features, each a product `[O/groups, K] x [K, N/bg * P]`, accumulated
//!   into an output laid out `[O, N/bg, P]` ([`OutLayout::FeatureMajor`]).
//!   Both products contract the same terms; by unit, this geometry would
//!   give GEMMs `P` (a handful) columns wide.

use super::matmul::{gemm_block, gemm_offsets, FaerElem, MatOperand, One};
use super::Par;
use crate::conv_geom::{ConvGeometry, SPATIAL};
use std::mem::MaybeUninit;

/// One operand of a convolution: element `[i, j, spatial...]` of the
/// canonical role layout is at
/// `data[offset + i * strides[0] + j * strides[1] + s]`, where `s` is the
/// row-major index into a contiguous spatial block.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a, T> {
    /// The buffer.
    pub data: &'a [T],
    /// Offset of element `[0, 0, 0...]`.
    pub offset: usize,
    /// Strides of the two leading axes (lhs: batch, feature; rhs: output
    /// feature, input feature).
    pub strides: [usize; 2],
}

impl<'a, T> Operand<'a, T> {
    /// A contiguous operand of the canonical layout with leading sizes
    /// `[_, lead1]` and `block` elements per spatial block.
    pub fn contiguous(data: &'a [T], lead1: usize, block: usize) -> Operand<'a, T> {
        Operand { data, offset: 0, strides: [lead1 * block, block] }
    }

    /// Offset of the spatial block `[i, j]`.
    #[inline]
    pub(super) fn block(&self, i: usize, j: usize) -> usize {
        self.offset + i * self.strides[0] + j * self.strides[1]
    }
}

/// How [`conv`] lays out its result (contiguous, row-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutLayout {
    /// `[N/bg, O, OD, OH, OW]`, the canonical output.
    BatchMajor,
    /// `[O, N/bg, OD, OH, OW]`.
    FeatureMajor,
}

/// For one spatial axis, the input coordinate read by each (output
/// position, kernel tap) pair, row-major over `[output, kernel]`, or -1
/// on padding and dilation holes.
pub(super) fn axis_table(g: &ConvGeometry, ax: usize) -> Vec<isize> {
    let (o, k) = (g.output[ax], g.kernel[ax]);
    let mut t = Vec::with_capacity(o * k);
    for oi in 0..o {
        for ki in 0..k {
            t.push(g.input_index(ax, oi, ki).map_or(-1, |i| i as isize));
        }
    }
    t
}

/// For the innermost axis without lhs dilation, per kernel tap: the output
/// positions `lo..hi` that read the input, and the (possibly negative)
/// input index of output position 0, so that position `o` reads
/// `start + o * stride`.
fn row_runs(g: &ConvGeometry) -> Vec<(usize, usize, isize)> {
    let (ow, iw, s) = (g.output[2], g.input[2] as isize, g.stride[2] as isize);
    (0..g.kernel[2])
        .map(|e| {
            let start = (e * g.rhs_dilation[2]) as isize - g.pad_lo[2] as isize;
            // First o with start + o*s >= 0, first o with start + o*s >= iw.
            let first = |bound: isize| -> usize {
                if start >= bound {
                    0
                } else {
                    ((bound - start + s - 1) / s).min(ow as isize) as usize
                }
            };
            let (lo, hi) = (first(0), first(iw));
            (lo, hi.max(lo), start)
        })
        .collect()
}

/// Which input element each (output position, tap) pair reads, per axis:
/// the tables of [`axis_table`], and the runs of [`row_runs`] where the
/// innermost axis has no lhs dilation.
pub(super) struct Patches {
    tables: [Vec<isize>; SPATIAL],
    runs: Option<Vec<(usize, usize, isize)>>,
    /// Where every run is a whole output row read at unit stride: each
    /// tap's first input index.
    starts: Option<Vec<usize>>,
}

impl Patches {
    pub(super) fn new(g: &ConvGeometry) -> Patches {
        let runs = (g.lhs_dilation[2] == 1).then(|| row_runs(g));
        let ow = g.output[2];
        let starts = runs.as_ref().filter(|r| g.stride[2] == 1 && r.iter().all(|&(lo, hi, _)| lo == 0 && hi == ow));
        let starts = starts.map(|r| r.iter().map(|&(_, _, start)| start as usize).collect());
        Patches { tables: [axis_table(g, 0), axis_table(g, 1), axis_table(g, 2)], runs, starts }
    }

    /// Unrolls the windows of one input plane (at `x[base..]`, contiguous
    /// `[D, H, W]`) into `K` rows of `P` output positions: row `t` (kernel
    /// tap `t`, row-major) at `dst[t * row_stride..][..P]`. Padding and
    /// dilation holes become zeros.
    pub(super) fn plane<T: Copy + Default>(
        &self,
        g: &ConvGeometry,
        x: &[T],
        base: usize,
        dst: &mut [MaybeUninit<T>],
        row_stride: usize,
    ) {
        let [_, ih, iw] = g.input;
        let [kd, kh, kw] = g.kernel;
        let [od, oh, ow] = g.output;
        let (s, zero) = (g.stride[2] as isize, T::default());
        for a in 0..kd {
            for b in 0..kh {
                let row0 = (a * kh + b) * kw;
                for zo in 0..od {
                    let zi = self.tables[0][zo * kd + a];
                    for yo in 0..oh {
                        let yi = self.tables[1][yo * kh + b];
                        let col = (zo * oh + yo) * ow;
                        if zi < 0 || yi < 0 {
                            for e in 0..kw {
                                dst[(row0 + e) * row_stride + col..][..ow].fill(MaybeUninit::new(zero));
                            }
                            continue;
                        }
                        let line = &x[base + (zi as usize * ih + yi as usize) * iw..][..iw];
                        if let Some(starts) = &self.starts {
                            // No padding along the row: a window of the line per tap.
                            for (e, &st) in starts.iter().enumerate() {
                                copy_run(&mut dst[(row0 + e) * row_stride + col..][..ow], &line[st..st + ow]);
                            }
                            continue;
                        }
                        for e in 0..kw {
                            let out = &mut dst[(row0 + e) * row_stride + col..][..ow];
                            let Some(runs) = &self.runs else {
                                for (xo, slot) in out.iter_mut().enumerate() {
                                    let xi = self.tables[2][xo * kw + e];
                                    slot.write(if xi < 0 { zero } else { line[xi as usize] });
                                }
                                continue;
                            };
                            // Zeros, then a run of the input line, then zeros;
                            // output position o reads start + o * s (>= 0 for o >= lo).
                            let (lo, hi, start) = runs[e];
                            if lo > 0 {
                                out[..lo].fill(MaybeUninit::new(zero));
                            }
                            if hi < ow {
                                out[hi..].fill(MaybeUninit::new(zero));
                            }
                            // An empty run reads nothing (its start could be past the end).
                            if hi == lo {
                                continue;
                            }
                            let from = (start + lo as isize * s) as usize;
                            if s == 1 {
                                copy_run(&mut out[lo..hi], &line[from..from + (hi - lo)]);
                            } else {
                                for (slot, v) in out[lo..hi].iter_mut().zip(line[from..].iter().step_by(s as usize)) {
                                    slot.write(*v);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Copies `src` into `dst` (equal lengths). The runs of a few elements
/// (the kernel gradient's output rows) are copied inline: a `memcpy` call
/// per run would cost more than the copy.
#[inline(always)]
fn copy_run<T: Copy>(dst: &mut [MaybeUninit<T>], src: &[T]) {
    match (dst, src) {
        ([d0], [s0]) => {
            d0.write(*s0);
        }
        ([d0, d1], [s0, s1]) => {
            d0.write(*s0);
            d1.write(*s1);
        }
        ([d0, d1, d2], [s0, s1, s2]) => {
            d0.write(*s0);
            d1.write(*s1);
            d2.write(*s2);
        }
        ([d0, d1, d2, d3], [s0, s1, s2, s3]) => {
            d0.write(*s0);
            d1.write(*s1);
            d2.write(*s2);
            d3.write(*s3);
        }
        (dst, src) => {
            for (slot, v) in dst.iter_mut().zip(src) {
                slot.write(*v);
            }
        }
    }
}

/// A pool buffer that goes back to the pool when dropped (per-thread
/// scratch space of the rayon loops).
pub(super) struct Scratch<T>(Vec<MaybeUninit<T>>);

impl<T> Scratch<T> {
    pub(super) fn new(n: usize) -> Scratch<T> {
        Scratch(crate::pool::alloc_uninit(n))
    }

    /// The buffer as values.
    ///
    /// # Safety
    /// Every element the caller reads through the slice was written.
    pub(super) unsafe fn written(&self) -> &[T] {
        // SAFETY: MaybeUninit<T> has T's layout; the caller reads only
        // written elements.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const T, self.0.len()) }
    }
}

impl<T> std::ops::Deref for Scratch<T> {
    type Target = [MaybeUninit<T>];
    fn deref(&self) -> &[MaybeUninit<T>] {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [MaybeUninit<T>] {
        &mut self.0
    }
}

impl<T> Drop for Scratch<T> {
    fn drop(&mut self) {
        crate::pool::recycle(std::mem::take(&mut self.0));
    }
}

/// Whether the patch matrix of every unit is the unit's input block itself.
fn reads_in_place(g: &ConvGeometry) -> bool {
    (0..SPATIAL)
        .all(|a| g.kernel[a] == 1 && g.stride[a] == 1 && g.lhs_dilation[a] == 1 && g.pad_lo[a] == 0 && g.pad_hi[a] == 0)
}

/// The lhs example and first channel unit `(n, group)` reads.
fn unit_input(g: &ConvGeometry, n: usize, group: usize) -> (usize, usize) {
    if g.batch_groups > 1 {
        (group * g.out_batch() + n, 0)
    } else {
        (n, group * g.group_in_features())
    }
}

/// A depthwise convolution (one input and one output feature per group):
/// each output plane is a weighted sum of shifted input lines, computed
/// directly (a GEMM of one row would spend its time unrolling patches).
fn depthwise<T>(lhs: Operand<'_, T>, rhs: Operand<'_, T>, g: &ConvGeometry, par: Par) -> Vec<T>
where
    T: Copy + Default + Send + Sync + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    let groups = g.groups();
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [od, oh, ow] = g.output;
    let p = od * oh * ow;
    let tables = [axis_table(g, 0), axis_table(g, 1), axis_table(g, 2)];
    let taps = kd * kh * kw;
    let plane = id * ih * iw;
    let unit = |u: usize, dst: &mut [T]| {
        let (e, c0) = unit_input(g, u / groups, u % groups);
        let x = &lhs.data[lhs.block(e, c0)..][..plane];
        let w = &rhs.data[rhs.block(u % groups, 0)..][..taps];
        dst.fill(T::default());
        for (t, &wt) in w.iter().enumerate() {
            let (a, b, c) = (t / (kh * kw), (t / kw) % kh, t % kw);
            for zo in 0..od {
                let zi = tables[0][zo * kd + a];
                for yo in 0..oh {
                    let yi = tables[1][yo * kh + b];
                    if zi < 0 || yi < 0 {
                        continue;
                    }
                    let line = &x[(zi as usize * ih + yi as usize) * iw..][..iw];
                    let out = &mut dst[(zo * oh + yo) * ow..][..ow];
                    for (xo, o) in out.iter_mut().enumerate() {
                        let xi = tables[2][xo * kw + c];
                        if xi >= 0 {
                            *o = *o + wt * line[xi as usize];
                        }
                    }
                }
            }
        }
    };
    let mut out = crate::pool::from_fn(g.out_len(), |_| T::default());
    if par == Par::Rayon && out.len() > p {
        use rayon::prelude::*;
        out.par_chunks_mut(p).enumerate().for_each(|(u, dst)| unit(u, dst));
    } else {
        out.chunks_mut(p.max(1)).enumerate().for_each(|(u, dst)| unit(u, dst));
    }
    out
}

/// The rhs as rows of `C/fg * K` contiguous taps (GEMM weights): the
/// operand itself where its features are spaced `K` apart, else a packed
/// copy.
fn weight_rows<'a, T: Copy>(rhs: Operand<'a, T>, g: &ConvGeometry) -> (std::borrow::Cow<'a, [T]>, usize, usize) {
    let taps: usize = g.kernel.iter().product();
    let cg = g.group_in_features();
    if rhs.strides[1] == taps || cg == 1 {
        return (std::borrow::Cow::Borrowed(rhs.data), rhs.offset, rhs.strides[0]);
    }
    let mut packed = crate::pool::vec_with_capacity(g.rhs_len());
    for o in 0..g.out_features {
        for c in 0..cg {
            packed.extend_from_slice(&rhs.data[rhs.block(o, c)..][..taps]);
        }
    }
    (std::borrow::Cow::Owned(packed), 0, cg * taps)
}

/// The convolution of `lhs` and `rhs` described by `g` (operands as
/// [`Operand`] describes), for f32 and f64, and the layout of the result.
pub fn conv<T>(lhs: Operand<'_, T>, rhs: Operand<'_, T>, g: &ConvGeometry, par: Par) -> (Vec<T>, OutLayout)
where
    T: FaerElem + One + std::ops::Add<Output = T> + std::ops::AddAssign + std::ops::Mul<Output = T>,
{
    let groups = g.groups();
    let nb = g.out_batch();
    let units = nb * groups;
    let m = g.group_out_features();
    let k = g.group_in_features() * g.kernel.iter().product::<usize>();
    let p: usize = g.output.iter().product();
    if units * m * p == 0 {
        return (Vec::new(), OutLayout::BatchMajor);
    }
    if k == 0 {
        // No taps: every output is an empty sum.
        return (crate::pool::from_fn(units * m * p, |_| T::default()), OutLayout::BatchMajor);
    }
    if m == 1 && g.group_in_features() == 1 && !reads_in_place(g) {
        return (depthwise(lhs, rhs, g, par), OutLayout::BatchMajor);
    }
    if super::conv_wide::takes(g) {
        return (super::conv_wide::conv_wide(lhs, rhs, g, par), OutLayout::FeatureMajor);
    }
    let (w, w_off, w_rs) = weight_rows(rhs, g);
    if reads_in_place(g) {
        let wm = MatOperand {
            offsets: (0..units).map(|u| (w_off + (u % groups) * m * w_rs) as isize).collect(),
            row_stride: w_rs as isize,
            col_stride: 1,
        };
        let cols = MatOperand {
            offsets: (0..units)
                .map(|u| {
                    let (e, c0) = unit_input(g, u / groups, u % groups);
                    lhs.block(e, c0) as isize
                })
                .collect(),
            row_stride: lhs.strides[1] as isize,
            col_stride: 1,
        };
        return (gemm_offsets(&w, &wm, lhs.data, &cols, m, k, p, par), OutLayout::BatchMajor);
    }
    (by_unit(lhs, &w, w_off, w_rs, g, par), OutLayout::BatchMajor)
}

/// im2col and one GEMM per (output example, group) unit (see the module
/// docs); `w[w_off + o * w_rs..]` holds output feature `o`'s taps.
fn by_unit<T>(lhs: Operand<'_, T>, w: &[T], w_off: usize, w_rs: usize, g: &ConvGeometry, par: Par) -> Vec<T>
where
    T: FaerElem + One,
{
    let groups = g.groups();
    let units = g.out_batch() * groups;
    let m = g.group_out_features();
    let cg = g.group_in_features();
    let taps: usize = g.kernel.iter().product();
    let (k, p) = (cg * taps, g.output.iter().product::<usize>());
    let patches = Patches::new(g);
    let fill = |u: usize, col: &mut [MaybeUninit<T>]| {
        let (e, c0) = unit_input(g, u / groups, u % groups);
        for c in 0..cg {
            patches.plane(g, lhs.data, lhs.block(e, c0 + c), &mut col[c * taps * p..], p);
        }
    };
    let threads = super::threads();
    if par == Par::Seq || units >= 2 * threads {
        // One unit at a time per thread: its patches stay in cache.
        let mut out = crate::pool::alloc_uninit::<T>(units * m * p);
        let unit = |col: &mut Scratch<T>, u: usize, dst: &mut [MaybeUninit<T>]| {
            fill(u, col);
            let pa = (w_off + (u % groups) * m * w_rs) as isize;
            // SAFETY: fill wrote the k x p patch matrix; the weights' m rows of
            // k taps lie in `w`; dst is this unit's exclusive m x p block.
            unsafe {
                let b = col.written();
                gemm_block(
                    w,
                    pa,
                    w_rs as isize,
                    1,
                    b,
                    0,
                    p as isize,
                    1,
                    (m, k, p),
                    dst.as_mut_ptr() as *mut T,
                    p,
                    false,
                )
            };
        };
        if par == Par::Rayon {
            use rayon::prelude::*;
            out.par_chunks_mut(m * p)
                .enumerate()
                .for_each_init(|| Scratch::new(k * p), |col, (u, dst)| unit(col, u, dst));
        } else {
            let mut col = Scratch::new(k * p);
            out.chunks_mut(m * p).enumerate().for_each(|(u, dst)| unit(&mut col, u, dst));
        }
        // SAFETY: gemm_block wrote every m x p block.
        return unsafe { crate::pool::assume_init(out) };
    }
    // Fewer than two units per thread: unroll them all (a few), then
    // `gemm_offsets` splits the products between threads.
    let mut col = Scratch::<T>::new(units * k * p);
    {
        use rayon::prelude::*;
        col.par_chunks_mut(k * p).enumerate().for_each(|(u, dst)| fill(u, dst));
    }
    // SAFETY: fill wrote each of the k * p slots of every unit.
    let cols = unsafe { col.written() };
    let wm = MatOperand {
        offsets: (0..units).map(|u| (w_off + (u % groups) * m * w_rs) as isize).collect(),
        row_stride: w_rs as isize,
        col_stride: 1,
    };
    let cm = MatOperand {
        offsets: (0..units).map(|u| (u * k * p) as isize).collect(),
        row_stride: p as isize,
        col_stride: 1,
    };
    gemm_offsets(w, &wm, cols, &cm, m, k, p, par)
}

/// The convolution of contiguous canonical operands (see the module docs),
/// in the canonical output layout `[N/bg, O, OD, OH, OW]`.
pub fn conv_forward<T>(lhs: &[T], rhs: &[T], g: &ConvGeometry, par: Par) -> Vec<T>
where
    T: FaerElem + One + std::ops::Add<Output = T> + std::ops::AddAssign + std::ops::Mul<Output = T>,
{
    debug_assert_eq!(lhs.len(), g.lhs_len());
    debug_assert_eq!(rhs.len(), g.rhs_len());
    let block: usize = g.input.iter().product();
    let taps: usize = g.kernel.iter().product();
    let l = Operand::contiguous(lhs, g.in_features, block);
    let r = Operand::contiguous(rhs, g.group_in_features(), taps);
    match conv(l, r, g, par) {
        (out, OutLayout::BatchMajor) => out,
        (out, OutLayout::FeatureMajor) => {
            // [O, N/bg, P] -> [N/bg, O, P].
            let (o, nb, p) = (g.out_features, g.out_batch(), g.output.iter().product::<usize>());
            crate::pool::from_fn(out.len(), |i| {
                let (n, rest) = (i / (o * p), i % (o * p));
                out[((rest / p) * nb + n) * p + rest % p]
            })
        }
    }
}
