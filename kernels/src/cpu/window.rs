//! Windowed reductions (`reduce_window` sum, max, min) and the two
//! selections behind max pooling's derivatives: select-and-gather (the
//! JVP) and select-and-scatter-add (the VJP).
//!
//! Semantics (XLA's `ReduceWindow`), per operand axis: the operand is
//! dilated by `base_dilation` (holes between neighbours), padded by
//! `pad_lo` / `pad_hi` (negative amounts crop), and a window of `window`
//! taps spaced `window_dilation` apart moves by `stride`. Padding and holes
//! hold the reduction's identity, so a window reduces exactly the operand
//! elements its taps land on (its *valid taps*). The selections pick, in
//! each window, the first valid tap in row-major window order whose operand
//! value is the largest (smallest); with NaNs, as JAX's select-and-scatter
//! (`ge`/`le` select, see `beats`): each NaN reached takes the selection
//! and the next tap takes it from a NaN. A window without a valid tap
//! selects nothing.
//!
//! Every kernel reads any strided layout and writes a contiguous result.
//! Work is split over output rows (the last output axis) under `Par::Rayon`.

use super::reduce::Reducer;
use super::{for_run_chunks, Par};
use crate::conv_geom::{dilated, window_positions};
use crate::dtype::Element;
use crate::layout::{Layout, Shape};
use crate::pool::alloc_uninit;
use crate::pool::assume_init;

/// The geometry of a windowed op: one entry per operand axis in every field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WindowGeom {
    /// Operand shape.
    pub input: Vec<usize>,
    /// Window taps per axis (>= 1).
    pub window: Vec<usize>,
    /// Window strides (>= 1).
    pub strides: Vec<usize>,
    /// Padding before each axis of the dilated operand (negative crops).
    pub pad_lo: Vec<i64>,
    /// Padding after each axis of the dilated operand (negative crops).
    pub pad_hi: Vec<i64>,
    /// Operand (base) dilation (>= 1).
    pub base_dilation: Vec<usize>,
    /// Window dilation (>= 1).
    pub window_dilation: Vec<usize>,
}

impl WindowGeom {
    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.input.len()
    }

    /// The output shape: the window positions per axis (0 where the window
    /// does not fit), or `None` for a zero stride.
    pub fn output_shape(&self) -> Option<Shape> {
        (0..self.rank())
            .map(|a| {
                window_positions(
                    self.input[a],
                    self.base_dilation[a],
                    self.pad_lo[a],
                    self.pad_hi[a],
                    self.window[a],
                    self.window_dilation[a],
                    self.strides[a],
                )
            })
            .collect::<Option<Vec<usize>>>()
            .map(Shape::from)
    }

    /// The size of axis `a` after dilation and padding (may be negative).
    pub fn padded_len(&self, a: usize) -> i128 {
        dilated(self.input[a], self.base_dilation[a]) as i128 + self.pad_lo[a] as i128 + self.pad_hi[a] as i128
    }

    /// The window's extent along axis `a` after dilation.
    pub fn window_extent(&self, a: usize) -> usize {
        dilated(self.window[a], self.window_dilation[a])
    }

    /// The operand index that output position `o` reads with tap `k` along
    /// axis `a`, or `None` where that lands on padding or a hole.
    #[inline]
    pub fn input_index(&self, a: usize, o: usize, k: usize) -> Option<usize> {
        let p = (o * self.strides[a] + k * self.window_dilation[a]) as i64 - self.pad_lo[a];
        let d = self.base_dilation[a] as i64;
        if p < 0 || p % d != 0 {
            return None;
        }
        let i = (p / d) as usize;
        (i < self.input[a]).then_some(i)
    }
}

/// Walks the windows of a geometry over `N` layouts of the operand shape at
/// once: for each window, its valid taps' element offsets under each
/// layout, in row-major window order.
struct Walker<const N: usize> {
    /// Output shape (a rank-0 geometry walks one unit axis).
    out: Vec<usize>,
    /// Per axis, per output position `o`: `start[a][o]..start[a][o + 1]`
    /// indexes the valid taps of `offs[a]`.
    start: Vec<Vec<usize>>,
    /// Per axis, the offsets of each valid tap under each layout.
    offs: Vec<Vec<[isize; N]>>,
    /// The layouts' base offsets.
    base: [isize; N],
}

impl<const N: usize> Walker<N> {
    fn new(g: &WindowGeom, out: &Shape, layouts: [(&[isize], usize); N]) -> Walker<N> {
        let base = layouts.map(|(_, off)| off as isize);
        if g.rank() == 0 {
            return Walker { out: vec![1], start: vec![vec![0, 1]], offs: vec![vec![[0; N]]], base };
        }
        let mut start = Vec::with_capacity(g.rank());
        let mut offs = Vec::with_capacity(g.rank());
        for a in 0..g.rank() {
            let (mut st, mut of) = (Vec::with_capacity(out[a] + 1), Vec::new());
            st.push(0);
            for o in 0..out[a] {
                for k in 0..g.window[a] {
                    if let Some(i) = g.input_index(a, o, k) {
                        of.push(layouts.map(|(s, _)| i as isize * s[a]));
                    }
                }
                st.push(of.len());
            }
            start.push(st);
            offs.push(of);
        }
        Walker { out: out.to_vec(), start, offs, base }
    }

    fn row_len(&self) -> usize {
        *self.out.last().expect("rank >= 1")
    }

    fn taps(&self, a: usize, o: usize) -> &[[isize; N]] {
        &self.offs[a][self.start[a][o]..self.start[a][o + 1]]
    }

    /// Calls `f(k, bases, tail)` for the windows of output rows `first..`,
    /// `count` windows in all (whole rows), `k` counting from 0: the window's
    /// taps are `b + t` for `b` in `bases` (the leading axes' taps, row-major)
    /// and `t` in `tail` (the last axis's), in that nesting.
    fn for_windows(&self, first: usize, count: usize, mut f: impl FnMut(usize, &[[isize; N]], &[[isize; N]])) {
        let r = self.out.len();
        let len = self.row_len();
        if len == 0 || count == 0 {
            return;
        }
        // The leading output index of row `first`.
        let mut idx = vec![0usize; r - 1];
        let mut rem = first;
        for a in (0..r - 1).rev() {
            idx[a] = rem % self.out[a];
            rem /= self.out[a];
        }
        let (mut bases, mut next): (Vec<[isize; N]>, Vec<[isize; N]>) = (Vec::new(), Vec::new());
        let mut k = 0;
        for _ in 0..count / len {
            bases.clear();
            bases.push(self.base);
            for (a, &o) in idx.iter().enumerate() {
                next.clear();
                for b in &bases {
                    for t in self.taps(a, o) {
                        next.push(std::array::from_fn(|j| b[j] + t[j]));
                    }
                }
                std::mem::swap(&mut bases, &mut next);
            }
            for o in 0..len {
                f(k, &bases, self.taps(r - 1, o));
                k += 1;
            }
            for a in (0..r - 1).rev() {
                idx[a] += 1;
                if idx[a] < self.out[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
    }
}

/// Pooling's geometry: windows over the last two axes of a contiguous
/// operand only, without padding or dilation. Its windows are read straight
/// from the operand (`base + ky * w + kx`), without the [`Walker`]'s tap
/// lists.
struct Pool2d {
    /// Leading index blocks (`[.., h, w]` planes), output rows per plane
    /// and output row length.
    planes: usize,
    out: [usize; 2],
    /// Plane sizes, window and strides of the two axes.
    h: usize,
    w: usize,
    window: [usize; 2],
    strides: [usize; 2],
    /// The operand's offset.
    offset: usize,
}

impl Pool2d {
    fn of(g: &WindowGeom, lx: &Layout) -> Option<Pool2d> {
        let r = g.rank();
        if r < 2 || !lx.is_contiguous() {
            return None;
        }
        let plain = |a: usize| g.pad_lo[a] == 0 && g.pad_hi[a] == 0 && g.base_dilation[a] == 1;
        let lead_ok = (0..r - 2).all(|a| plain(a) && g.window[a] == 1 && g.strides[a] == 1);
        let tail_ok = (r - 2..r).all(|a| plain(a) && g.window_dilation[a] == 1);
        if !(lead_ok && tail_ok) {
            return None;
        }
        let out = g.output_shape()?;
        Some(Pool2d {
            planes: g.input[..r - 2].iter().product(),
            out: [out[r - 2], out[r - 1]],
            h: g.input[r - 2],
            w: g.input[r - 1],
            window: [g.window[r - 2], g.window[r - 1]],
            strides: [g.strides[r - 2], g.strides[r - 1]],
            offset: lx.offset,
        })
    }

    /// A fresh output with `f(base)` for each window, whose taps are
    /// `base + ky * w + kx` (row-major window order), in parallel over rows.
    fn map<U: Send>(&self, par: Par, f: impl Fn(usize) -> U + Sync) -> Vec<U> {
        let [oh, ow] = self.out;
        let mut out = alloc_uninit::<U>(self.planes * oh * ow);
        for_run_chunks(&mut out, ow, par, |first_row, dst| {
            for (i, row) in dst.chunks_mut(ow).enumerate() {
                let (plane, oy) = ((first_row + i) / oh, (first_row + i) % oh);
                let base = self.offset + (plane * self.h + oy * self.strides[0]) * self.w;
                for (ox, slot) in row.iter_mut().enumerate() {
                    slot.write(f(base + ox * self.strides[1]));
                }
            }
        });
        // SAFETY: for_run_chunks hands every whole row to the body once,
        // which writes each of its slots.
        unsafe { assume_init(out) }
    }

    /// The selected tap's element offset in the window at `base`.
    #[inline(always)]
    fn select<T: Element, const MAX: bool>(&self, x: &[T], base: usize) -> usize {
        let mut best = (base, x[base]);
        for ky in 0..self.window[0] {
            let row = &x[base + ky * self.w..][..self.window[1]];
            for (kx, &v) in row.iter().enumerate() {
                if beats::<T, MAX>(v, best.1) {
                    best = (base + ky * self.w + kx, v);
                }
            }
        }
        best.0
    }
}

/// Fills a fresh output of `out` elements, window by window, in parallel
/// over rows under `Par::Rayon`.
fn map_windows<U: Send, const N: usize>(
    w: &Walker<N>,
    par: Par,
    f: impl Fn(&[[isize; N]], &[[isize; N]]) -> U + Sync,
) -> Vec<U> {
    let n: usize = w.out.iter().product();
    let mut out = alloc_uninit::<U>(n);
    let len = w.row_len();
    for_run_chunks(&mut out, len, par, |first_row, dst| {
        w.for_windows(first_row, dst.len(), |k, bases, tail| {
            dst[k].write(f(bases, tail));
        });
    });
    // SAFETY: `for_windows` visits every window of every chunk once (whole
    // rows: `for_run_chunks` splits at row boundaries), writing its slot.
    unsafe { assume_init(out) }
}

/// `reduce_window`: folds the valid taps of each window of `x` (layout
/// `lx`) into `r`'s accumulator, from `r.init` (the identity, which padding
/// and holes hold). Returns the output, row-major.
///
/// # Panics
/// If the geometry has a zero stride (the caller checks it).
pub fn reduce_window<T, A, U, FF, FO>(x: &[T], lx: &Layout, g: &WindowGeom, par: Par, r: Reducer<A, FF, FO>) -> Vec<U>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
    U: Send,
    FF: Fn(A, T) -> A + Sync,
    FO: Fn(A) -> U + Sync,
{
    if let Some(p) = Pool2d::of(g, lx) {
        return p.map(par, |base| {
            let mut a = r.init;
            for ky in 0..p.window[0] {
                for &v in &x[base + ky * p.w..][..p.window[1]] {
                    a = (r.fold)(a, v);
                }
            }
            (r.finish)(a)
        });
    }
    let out = g.output_shape().expect("positive strides");
    let w = Walker::new(g, &out, [(&lx.strides, lx.offset)]);
    map_windows(&w, par, |bases, tail| {
        let mut a = r.init;
        for b in bases {
            for t in tail {
                a = (r.fold)(a, x[(b[0] + t[0]) as usize]);
            }
        }
        (r.finish)(a)
    })
}

/// True when the tap `a` takes the selection from the tap `b` selected so
/// far (earlier in the window): unless `b >= a` (`MAX`; `b <= a` else).
/// This is XLA's select-and-scatter with JAX's `ge` (`le`) select: ties
/// keep the first, a NaN is taken when reached and handed on to the next
/// tap (so a window's last NaN or the first number after it wins).
#[inline(always)]
fn beats<T: Element, const MAX: bool>(a: T, b: T) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    // (unordered, a NaN on either side, takes it)
    match b.partial_cmp(&a) {
        Some(Equal) => false,
        Some(Greater) => !MAX,
        Some(Less) => MAX,
        None => true,
    }
}

/// The selected tap of one window: its offsets under each layout, or
/// `None` for a window without valid taps.
#[inline(always)]
fn select<T: Element, const MAX: bool, const N: usize>(
    x: &[T],
    bases: &[[isize; N]],
    tail: &[[isize; N]],
) -> Option<[isize; N]> {
    let mut best: Option<([isize; N], T)> = None;
    for b in bases {
        for t in tail {
            let at: [isize; N] = std::array::from_fn(|j| b[j] + t[j]);
            let v = x[at[0] as usize];
            if best.is_none_or(|(_, bv)| beats::<T, MAX>(v, bv)) {
                best = Some((at, v));
            }
        }
    }
    best.map(|(at, _)| at)
}

/// `select_and_gather_add`: for each window of `x`, the element of `t`
/// (same shape as `x`) at the window's selected position, or zero where
/// the window selects nothing. `max` selects the maximum, else the minimum.
pub fn select_and_gather<T: Element>(
    t: &[T],
    lt: &Layout,
    x: &[T],
    lx: &Layout,
    g: &WindowGeom,
    max: bool,
    par: Par,
) -> Vec<T> {
    let out = g.output_shape().expect("positive strides");
    let w = Walker::new(g, &out, [(&lx.strides, lx.offset), (&lt.strides, lt.offset)]);
    let pick = |s: Option<[isize; 2]>| s.map_or(T::ZERO, |at| t[at[1] as usize]);
    if max {
        map_windows(&w, par, |b, tl| pick(select::<T, true, 2>(x, b, tl)))
    } else {
        map_windows(&w, par, |b, tl| pick(select::<T, false, 2>(x, b, tl)))
    }
}

/// `select_and_scatter_add`: a zero array shaped like `x` to which each
/// element of `ct` (shaped like the windows, contiguous row-major) is added
/// at its window's selected position of `x`. Sums run in f64 in row-major
/// window order and round once. `max` selects the maximum, else the minimum.
pub fn select_and_scatter<T: Element>(ct: &[T], x: &[T], lx: &Layout, g: &WindowGeom, max: bool, par: Par) -> Vec<T> {
    // The selected element per window, in parallel; then the sums, in order.
    let none = usize::MAX;
    let sel: Vec<usize> = if let Some(p) = Pool2d::of(g, lx) {
        // Every window has a valid tap (no padding); offsets into the
        // contiguous operand less its offset are dense indices.
        if max {
            p.map(par, |b| p.select::<T, true>(x, b) - p.offset)
        } else {
            p.map(par, |b| p.select::<T, false>(x, b) - p.offset)
        }
    } else {
        let out = g.output_shape().expect("positive strides");
        let dense = Shape::from(g.input.clone()).contiguous_strides();
        let w = Walker::new(g, &out, [(&lx.strides, lx.offset), (&dense, 0)]);
        if max {
            map_windows(&w, par, |b, tl| select::<T, true, 2>(x, b, tl).map_or(none, |at| at[1] as usize))
        } else {
            map_windows(&w, par, |b, tl| select::<T, false, 2>(x, b, tl).map_or(none, |at| at[1] as usize))
        }
    };
    if (0..g.rank()).all(|a| g.strides[a] >= g.window_extent(a)) {
        // Disjoint windows (pooling's usual stride = window): every element
        // gets at most one term, so its f64 sum is `0 + c`, rounded back.
        let mut res = crate::pool::filled(g.input.iter().product(), T::ZERO);
        for (&s, &c) in sel.iter().zip(ct) {
            if s != none {
                res[s] = T::from_f64(0.0 + c.to_f64());
            }
        }
        crate::pool::recycle(sel);
        return res;
    }
    let mut acc = crate::pool::filled(g.input.iter().product(), 0.0f64);
    for (&s, &c) in sel.iter().zip(ct) {
        if s != none {
            acc[s] += c.to_f64();
        }
    }
    crate::pool::recycle(sel);
    let res = crate::pool::from_fn(acc.len(), |i| T::from_f64(acc[i]));
    crate::pool::recycle(acc);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(input: &[usize], window: &[usize], strides: &[usize], pads: &[(i64, i64)]) -> WindowGeom {
        let r = input.len();
        WindowGeom {
            input: input.to_vec(),
            window: window.to_vec(),
            strides: strides.to_vec(),
            pad_lo: pads.iter().map(|p| p.0).collect(),
            pad_hi: pads.iter().map(|p| p.1).collect(),
            base_dilation: vec![1; r],
            window_dilation: vec![1; r],
        }
    }

    fn sum() -> Reducer<f64, impl Fn(f64, f64) -> f64 + Sync, impl Fn(f64) -> f64 + Sync> {
        Reducer { init: 0.0, fold: |a, x| a + x, finish: |a| a }
    }

    #[test]
    fn sums_and_maxima_of_small_windows() {
        // [1 2 3 4 5], window 2, stride 2, padding (1, 0): windows [pad 1] [2 3] [4 5]
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let l = Layout::contiguous(Shape::from([5]));
        let g = geom(&[5], &[2], &[2], &[(1, 0)]);
        assert_eq!(reduce_window(&x, &l, &g, Par::Seq, sum()), vec![1.0, 5.0, 9.0]);
        let max = Reducer { init: f64::NEG_INFINITY, fold: |a: f64, x: f64| a.max(x), finish: |a| a };
        assert_eq!(reduce_window(&x, &l, &g, Par::Seq, max), vec![1.0, 3.0, 5.0]);
        // base dilation 2: [1 _ 2 _ 3], window 2: every window holds one element
        let mut g = geom(&[3], &[2], &[1], &[(0, 0)]);
        g.base_dilation = vec![2];
        assert_eq!(
            reduce_window(&x[..3], &Layout::contiguous(Shape::from([3])), &g, Par::Seq, sum()),
            vec![1.0, 2.0, 2.0, 3.0]
        );
        // window dilation 2 on a 2-d operand: taps (0, 0) and (0, 2) of each row
        let y: Vec<f64> = (0..8).map(|v| v as f64).collect();
        let mut g = geom(&[2, 4], &[1, 2], &[1, 1], &[(0, 0), (0, 0)]);
        g.window_dilation = vec![1, 2];
        assert_eq!(
            reduce_window(&y, &Layout::contiguous(Shape::from([2, 4])), &g, Par::Seq, sum()),
            vec![2.0, 4.0, 10.0, 12.0]
        );
    }

    #[test]
    fn selection_takes_the_first_extreme_and_skips_padding() {
        // windows of 2 with stride 1 over [3 3 1 5], padded (1, 1) with nothing selectable
        let x = [3.0f32, 3.0, 1.0, 5.0];
        let t = [10.0f32, 20.0, 30.0, 40.0];
        let l = Layout::contiguous(Shape::from([4]));
        let g = geom(&[4], &[2], &[1], &[(1, 1)]);
        // windows: [pad 3] [3 3] [3 1] [1 5] [5 pad]
        assert_eq!(select_and_gather(&t, &l, &x, &l, &g, true, Par::Seq), vec![10.0, 10.0, 20.0, 40.0, 40.0]);
        assert_eq!(select_and_gather(&t, &l, &x, &l, &g, false, Par::Seq), vec![10.0, 10.0, 30.0, 30.0, 40.0]);
        let ct = [1.0f32, 2.0, 4.0, 8.0, 16.0];
        assert_eq!(select_and_scatter(&ct, &x, &l, &g, true, Par::Seq), vec![3.0, 4.0, 0.0, 24.0]);
        // NaNs as JAX 0.10 (jax.grad / jax.jvp of lax.reduce_window max and
        // min, checked): a NaN takes the selection, the next tap takes it
        // from the NaN
        let x = [1.0f64, f64::NAN, 2.0];
        let l = Layout::contiguous(Shape::from([3]));
        let g = geom(&[3], &[3], &[1], &[(0, 0)]);
        assert_eq!(select_and_gather(&[5.0, 6.0, 7.0], &l, &x, &l, &g, false, Par::Seq), vec![7.0]);
        let x = [1.0f64, f64::NAN, 3.0, 2.0];
        let l4 = Layout::contiguous(Shape::from([4]));
        let g = geom(&[4], &[2], &[1], &[(0, 0)]);
        assert_eq!(select_and_scatter(&[1.0, 1.0, 1.0], &x, &l4, &g, true, Par::Seq), vec![0.0, 1.0, 2.0, 0.0]);
        assert_eq!(select_and_scatter(&[1.0, 1.0, 1.0], &x, &l4, &g, false, Par::Seq), vec![0.0, 1.0, 1.0, 1.0]);
        let t = [1.0, 10.0, 100.0, 1000.0];
        assert_eq!(select_and_gather(&t, &l4, &x, &l4, &g, true, Par::Seq), vec![10.0, 100.0, 100.0]);
        let x = [f64::NAN, f64::NAN, 1.0, 1.0];
        assert_eq!(select_and_scatter(&[1.0, 1.0, 1.0], &x, &l4, &g, true, Par::Seq), vec![0.0, 1.0, 2.0, 0.0]);
        // padding is never selected: windows [pad -inf] and [NaN pad] take
        // the -inf and the NaN (XLA's CPU selection: the padding)
        let x = [f64::NEG_INFINITY, 1.0, f64::NAN];
        let g = geom(&[3], &[2], &[2], &[(1, 1)]);
        // windows [pad -inf] [1 NaN]
        assert_eq!(select_and_scatter(&[1.0, 1.0], &x, &l, &g, true, Par::Seq), vec![1.0, 0.0, 1.0]);
        let g = geom(&[3], &[2], &[2], &[(0, 1)]);
        // windows [-inf 1] [NaN pad]
        assert_eq!(select_and_scatter(&[1.0, 1.0], &x, &l, &g, true, Par::Seq), vec![0.0, 1.0, 1.0]);
        // a window entirely in padding selects nothing
        let x = [1.0f64, f64::NAN, 2.0];
        let g = geom(&[3], &[2], &[1], &[(3, 0)]);
        assert_eq!(select_and_gather(&[5.0, 6.0, 7.0], &l, &x, &l, &g, true, Par::Seq)[..2], [0.0, 0.0]);
    }

    #[test]
    fn disjoint_windows_scatter_like_the_sums() {
        // 2x2 windows, stride 2 (and 3, with padding): each element gets at
        // most one term; a -0.0 term gives +0.0 as the f64 sum 0 + (-0) does.
        let (h, w) = (5, 6);
        let x: Vec<f64> = (0..h * w).map(|v| ((v * 37) % 11) as f64).collect();
        let l = Layout::contiguous(Shape::from([h, w]));
        for (strides, pads) in [([2, 2], [(0, 0), (0, 0)]), ([3, 2], [(1, 0), (0, 1)])] {
            let g = geom(&[h, w], &[2, 2], &strides, &pads);
            let out = g.output_shape().unwrap();
            let ct: Vec<f64> = (0..out.numel()).map(|i| if i == 1 { -0.0 } else { i as f64 + 0.5 }).collect();
            let mut want = vec![0.0f64; h * w];
            for (i, &c) in ct.iter().enumerate() {
                let (oy, ox) = (i / out[1], i % out[1]);
                let mut best: Option<(usize, f64)> = None;
                for ky in 0..2 {
                    for kx in 0..2 {
                        let (Some(y), Some(x0)) = (g.input_index(0, oy, ky), g.input_index(1, ox, kx)) else {
                            continue;
                        };
                        let v = x[y * w + x0];
                        if best.is_none_or(|(_, b)| v > b) {
                            best = Some((y * w + x0, v));
                        }
                    }
                }
                if let Some((at, _)) = best {
                    want[at] += c;
                }
            }
            for par in [Par::Seq, Par::Rayon] {
                let got = select_and_scatter(&ct, &x, &l, &g, true, par);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn pooling_windows_match_the_general_walk() {
        // Windows over the last two axes of a contiguous operand (read
        // directly) against the same values through a transposed layout
        // (the general walk): overlapping and disjoint windows, ties and a NaN.
        let (a, h, w) = (3, 7, 8);
        let mut x: Vec<f64> = (0..a * h * w).map(|v| ((v * 37) % 5) as f64).collect();
        x[17] = f64::NAN;
        let lc = Layout::contiguous(Shape::from([a, h, w]));
        // The same logical array stored [w, h, a].
        let mut xt = vec![0.0; x.len()];
        for i in 0..a {
            for j in 0..h {
                for k in 0..w {
                    xt[(k * h + j) * a + i] = x[(i * h + j) * w + k];
                }
            }
        }
        let lt = Layout::contiguous(Shape::from([w, h, a])).permute(&[2, 1, 0]);
        let max = || Reducer { init: f64::NEG_INFINITY, fold: |a: f64, x: f64| a.max(x), finish: |a| a };
        for (window, strides) in [([1, 3, 2], [1, 2, 2]), ([1, 2, 2], [1, 2, 2]), ([1, 1, 3], [1, 1, 1])] {
            let g = geom(&[a, h, w], &window, &strides, &[(0, 0); 3]);
            let n = g.output_shape().unwrap().numel();
            let ct: Vec<f64> = (0..n).map(|i| i as f64 * 0.25 - 3.0).collect();
            let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
            for par in [Par::Seq, Par::Rayon] {
                let (s1, s2) = (reduce_window(&x, &lc, &g, par, sum()), reduce_window(&xt, &lt, &g, par, sum()));
                assert_eq!(bits(s1), bits(s2));
                let (m1, m2) = (reduce_window(&x, &lc, &g, par, max()), reduce_window(&xt, &lt, &g, par, max()));
                assert_eq!(bits(m1), bits(m2));
                for pick in [true, false] {
                    let s1 = select_and_scatter(&ct, &x, &lc, &g, pick, par);
                    let s2 = select_and_scatter(&ct, &xt, &lt, &g, pick, par);
                    assert_eq!(s1, s2, "window {window:?} strides {strides:?} max {pick}");
                }
            }
        }
    }

    #[test]
    fn strided_layouts_and_parallel_rows_match() {
        // a transposed 2-d operand, summed by 3x2 windows, sequentially and in parallel
        let (m, n) = (300, 400);
        let x: Vec<f64> = (0..m * n).map(|v| ((v * 7919) % 1000) as f64).collect();
        let lx = Layout::contiguous(Shape::from([m, n])).permute(&[1, 0]);
        let g = geom(&[n, m], &[3, 2], &[1, 2], &[(1, 1), (0, 1)]);
        let seq = reduce_window(&x, &lx, &g, Par::Seq, sum());
        let par = reduce_window(&x, &lx, &g, Par::Rayon, sum());
        assert_eq!(seq, par);
        let out = g.output_shape().unwrap();
        assert_eq!(out.to_vec(), vec![n, (m + 1 - 2) / 2 + 1]);
        // one window by hand: output (5, 7) covers rows 4..7 of the transposed
        // operand and its columns 14, 15
        let xr = &x;
        let want: f64 = (4..7).flat_map(|i| [14, 15].map(move |j| xr[j * n + i])).sum();
        assert_eq!(seq[5 * out[1] + 7], want);
        let s1 = select_and_scatter(&vec![1.0; out.numel()], &x, &lx, &g, true, Par::Seq);
        let s2 = select_and_scatter(&vec![1.0; out.numel()], &x, &lx, &g, true, Par::Rayon);
        assert_eq!(s1, s2);
        assert_eq!(s1.iter().sum::<f64>(), out.numel() as f64);
    }
}
