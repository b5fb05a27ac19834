//! Reductions over axes, arg-reductions over one axis, and cumulative sums.

use super::{for_run_chunks, Par};
use crate::layout::{Coalesced, Dims, Layout, Shape};
use crate::pool::alloc_uninit;
use crate::pool::assume_init;

/// How to reduce: an accumulator `A` started at `init`, fed elements with
/// `fold`, and turned into the result with `finish`.
pub struct Reducer<A, FF, FO> {
    /// The accumulator's starting value.
    pub init: A,
    /// Adds one element to an accumulator.
    pub fold: FF,
    /// Turns an accumulator into a result element.
    pub finish: FO,
}

/// Reduces `x` over `axes`; the result has the kept axes, row-major.
pub fn reduce<T, A, U, FF, FO>(x: &[T], lx: &Layout, axes: &[usize], par: Par, r: Reducer<A, FF, FO>) -> Vec<U>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
    U: Send,
    FF: Fn(A, T) -> A + Sync,
    FO: Fn(A) -> U + Sync,
{
    // rows of a contiguous array: eight at a time, each in the order below
    if let Some((range, row_len)) = trailing_rows(lx, axes) {
        return fold_rows(&x[range], row_len, par, r);
    }
    let (ks, kt, rs, rt) = lx.split_axes(axes);
    let nout: usize = ks.iter().product();
    let nred: usize = rs.iter().product();
    let kept = Coalesced::new(&ks, [(&kt[..], lx.offset)]);
    let red = Coalesced::new(&rs, [(&rt[..], 0)]);
    // Iterate in memory order: if the fastest-moving input axis is a kept one
    // (e.g. summing the rows of a row-major matrix), accumulate whole rows.
    let kept_inner_unit = nout > 1 && kept.inner_strides()[0] == 1;
    let red_inner_unit = nred > 1 && red.inner_strides()[0] == 1;
    if kept_inner_unit && !red_inner_unit {
        let len = kept.inner_len();
        let mut acc = crate::pool::filled(nout, r.init);
        let chunks: Vec<(usize, &mut [A])> = {
            let runs_per_task = match par {
                Par::Seq => kept.runs(),
                Par::Rayon => kept.runs().div_ceil(rayon::current_num_threads() * 2).max(1),
            };
            acc.chunks_mut(runs_per_task * len).enumerate().map(|(i, c)| (i * runs_per_task, c)).collect()
        };
        let work = |(first, chunk): (usize, &mut [A])| {
            red.for_runs(0, red.runs(), |[ro], rn, [rstride]| {
                for j in 0..rn {
                    let roff = ro as isize + j as isize * rstride;
                    let mut k = 0;
                    kept.for_runs(first, chunk.len() / len, |[ko], n, _| {
                        let base = (ko as isize + roff) as usize;
                        for (a, v) in chunk[k..k + n].iter_mut().zip(&x[base..base + n]) {
                            *a = (r.fold)(*a, *v);
                        }
                        k += n;
                    });
                }
            });
        };
        match par {
            Par::Seq => chunks.into_iter().for_each(work),
            Par::Rayon => {
                use rayon::prelude::*;
                chunks.into_par_iter().for_each(work)
            }
        }
        let out = crate::pool::from_fn(nout, |i| (r.finish)(acc[i]));
        crate::pool::recycle(acc);
        return out;
    }
    let mut out = alloc_uninit::<U>(nout);
    let klen = kept.inner_len();
    for_run_chunks(&mut out, klen, par, |first, dst| {
        let mut k = 0;
        kept.for_runs(first, dst.len() / klen, |[ko], n, [ks]| {
            for i in 0..n {
                let base = ko as isize + i as isize * ks;
                let mut a = r.init;
                red.for_runs(0, red.runs(), |[ro], rn, [rstride]| {
                    let start = (base + ro as isize) as usize;
                    if rstride == 1 {
                        for v in &x[start..start + rn] {
                            a = (r.fold)(a, *v);
                        }
                    } else {
                        for j in 0..rn {
                            a = (r.fold)(a, x[(start as isize + j as isize * rstride) as usize]);
                        }
                    }
                });
                dst[k + i].write((r.finish)(a));
            }
            k += n;
        });
    });
    // SAFETY: every output slot was written above.
    unsafe { assume_init(out) }
}

/// Index of the first extreme element along `axis` (`better(a, b)`: a beats
/// b). NaN counts as extreme, as in numpy. The result has `axis` removed.
pub fn arg_reduce<T, I, FB>(x: &[T], lx: &Layout, axis: usize, par: Par, better: FB, to_index: fn(usize) -> I) -> Vec<I>
where
    T: Copy + Sync + crate::Element,
    I: Send,
    FB: Fn(T, T) -> bool + Sync,
{
    let (ks, kt, _, _) = lx.split_axes(&[axis]);
    let n = lx.shape[axis];
    let s = lx.strides[axis];
    let nout: usize = ks.iter().product();
    let kept = Coalesced::new(&ks, [(&kt[..], lx.offset)]);
    let mut out = alloc_uninit::<I>(nout);
    let klen = kept.inner_len();
    for_run_chunks(&mut out, klen, par, |first, dst| {
        let mut k = 0;
        kept.for_runs(first, dst.len() / klen, |[ko], m, [ks]| {
            for i in 0..m {
                let base = ko as isize + i as isize * ks;
                let mut best = 0usize;
                let mut bv = x[base as usize];
                if !bv.is_nan() {
                    for j in 1..n {
                        let v = x[(base + j as isize * s) as usize];
                        if v.is_nan() {
                            best = j;
                            break;
                        }
                        if better(v, bv) {
                            best = j;
                            bv = v;
                        }
                    }
                }
                dst[k + i].write(to_index(best));
            }
            k += m;
        });
    });
    // SAFETY: every output slot was written above.
    unsafe { assume_init(out) }
}

/// Running fold along `axis` (from the end when `reverse`), same shape out.
pub fn cumulative<T, A, U, FF, FO>(x: &[T], lx: &Layout, axis: usize, reverse: bool, r: Reducer<A, FF, FO>) -> Vec<U>
where
    T: Copy,
    A: Copy,
    U: Copy + Default,
    FF: Fn(A, T) -> A,
    FO: Fn(A) -> U,
{
    let shape = &lx.shape;
    let n = shape[axis];
    let out_strides = shape.contiguous_strides();
    let mut out = crate::pool::filled(lx.numel(), U::default());
    let mut outer: Dims = shape.0.clone();
    outer[axis] = 1;
    crate::layout::for_each_index(&outer, |idx| {
        let xb = lx.offset_of(idx) as isize;
        let ob: isize = idx.iter().zip(out_strides.iter()).map(|(&i, &s)| i as isize * s).sum();
        let mut a = r.init;
        for jj in 0..n {
            let j = if reverse { n - 1 - jj } else { jj };
            a = (r.fold)(a, x[(xb + j as isize * lx.strides[axis]) as usize]);
            out[(ob + j as isize * out_strides[axis]) as usize] = (r.finish)(a);
        }
    });
    out
}

/// The f64 sum of one row as [`sum_rows`] adds it: eight interleaved
/// lanes, then the lanes pairwise and the remainder (the jit's row fusion
/// sums a tile's rows with it, to the same bits).
#[inline]
pub fn sum_row<T: Copy>(row: &[T], to: impl Fn(T) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += to(x);
        }
    }
    let mut rest = 0.0f64;
    for &x in chunks.remainder() {
        rest += to(x);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + rest
}

/// Sums of the consecutive rows of `row_len` elements of `v` (a reduction
/// over the trailing axes of a contiguous array), each accumulated in f64
/// in eight interleaved lanes, so the adds vectorize instead of forming one
/// dependency chain (the generic [`reduce`] folds one element at a time).
/// For f32 and the half types, whose elements f64 holds exactly, the lane
/// order changes the f64 sum by rounding far below the result's precision.
pub fn sum_rows<T, U, FT, FO>(v: &[T], row_len: usize, par: Par, to: FT, finish: FO) -> Vec<U>
where
    T: Copy + Sync,
    U: Copy + Send,
    FT: Fn(T) -> f64 + Sync,
    FO: Fn(f64) -> U + Sync,
{
    let row_sum = |row: &[T]| -> U { finish(sum_row(row, &to)) };
    let rows = v.len().checked_div(row_len).unwrap_or(0);
    let mut out = crate::pool::filled(rows, finish(0.0));
    match par {
        Par::Seq => {
            for (o, row) in out.iter_mut().zip(v.chunks_exact(row_len.max(1))) {
                *o = row_sum(row);
            }
        }
        Par::Rayon => {
            use rayon::prelude::*;
            out.par_iter_mut().zip(v.par_chunks_exact(row_len.max(1))).for_each(|(o, row)| *o = row_sum(row));
        }
    }
    out
}

/// For a contiguous `l` reduced over its trailing axes (at least one
/// element per row): the data's range and the row length.
pub fn trailing_rows(l: &Layout, axes: &[usize]) -> Option<(std::ops::Range<usize>, usize)> {
    let rank = l.rank();
    let k = axes.len();
    if k == 0 || axes.iter().enumerate().any(|(i, &a)| a != rank - k + i) {
        return None;
    }
    let row_len: usize = l.shape.dims()[rank - k..].iter().product();
    if row_len == 0 {
        return None;
    }
    l.contiguous_range().map(|r| (r, row_len))
}

/// Rows folded at once by [`fold_rows_into`].
const FOLD_ROWS: usize = 8;

/// The first `dst.len()` rows of `row_len` elements of `v`, each folded by
/// `r` in order into its slot of `dst`, eight rows at once (their
/// dependency chains interleave; each row's own order, and so its bits,
/// is that of the sequential fold). `fold_rows` runs it per task; the
/// jit's row fusion per tile of rows.
pub fn fold_rows_into<T, A, U, FF, FO>(
    v: &[T],
    row_len: usize,
    dst: &mut [std::mem::MaybeUninit<U>],
    r: &Reducer<A, FF, FO>,
) where
    T: Copy,
    A: Copy,
    FF: Fn(A, T) -> A,
    FO: Fn(A) -> U,
{
    let mut row = 0;
    let mut groups = dst.chunks_exact_mut(FOLD_ROWS);
    for group in &mut groups {
        let x = &v[row * row_len..(row + FOLD_ROWS) * row_len];
        let mut acc = [r.init; FOLD_ROWS];
        for j in 0..row_len {
            for (i, a) in acc.iter_mut().enumerate() {
                *a = (r.fold)(*a, x[i * row_len + j]);
            }
        }
        for (d, a) in group.iter_mut().zip(acc) {
            d.write((r.finish)(a));
        }
        row += FOLD_ROWS;
    }
    for d in groups.into_remainder() {
        let a = v[row * row_len..(row + 1) * row_len].iter().fold(r.init, |a, x| (r.fold)(a, *x));
        d.write((r.finish)(a));
        row += 1;
    }
}

/// [`reduce`] over the consecutive rows of `row_len` elements of `v` (the
/// trailing axes of a contiguous array): each row folded one element after
/// another in order, as the strided path folds it, so with the same bits.
/// Eight rows go at once: their eight dependency chains interleave where
/// one row after the other would wait on each (short rows: a row-wise max
/// over ten classes).
fn fold_rows<T, A, U, FF, FO>(v: &[T], row_len: usize, par: Par, r: Reducer<A, FF, FO>) -> Vec<U>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
    U: Send,
    FF: Fn(A, T) -> A + Sync,
    FO: Fn(A) -> U + Sync,
{
    if v.is_empty() {
        return Vec::new();
    }
    let rows = v.len() / row_len;
    let mut out = alloc_uninit::<U>(rows);
    // rows first_row.. into dst
    let block = |first_row: usize, dst: &mut [std::mem::MaybeUninit<U>]| {
        fold_rows_into(&v[first_row * row_len..], row_len, dst, &r)
    };
    match par {
        Par::Seq => block(0, &mut out),
        Par::Rayon => {
            use rayon::prelude::*;
            // whole groups of rows per task, unless there are few (long)
            // rows: then a row or a few per task
            let per_task = rows.div_ceil(rayon::current_num_threads() * 4).max(1);
            let per_task = if per_task >= FOLD_ROWS { per_task.next_multiple_of(FOLD_ROWS) } else { per_task };
            out.par_chunks_mut(per_task).enumerate().for_each(|(t, dst)| block(t * per_task, dst));
        }
    }
    // SAFETY: every row's slot was written above.
    unsafe { assume_init(out) }
}

/// The shape of a reduction's result (axes removed).
pub fn reduced_shape(shape: &Shape, axes: &[usize]) -> Shape {
    Shape(shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(x: &[f64], l: &Layout, axes: &[usize], par: Par) -> Vec<f64> {
        reduce(x, l, axes, par, Reducer { init: 0.0, fold: |a, v| a + v, finish: |a| a })
    }

    #[test]
    fn sums_over_each_axis_set_in_both_orders() {
        let x: Vec<f64> = (0..24).map(|v| v as f64).collect();
        let l = Layout::contiguous(Shape::from([2, 3, 4]));
        assert_eq!(sum(&x, &l, &[0, 1, 2], Par::Seq), vec![276.0]);
        assert_eq!(sum(&x, &l, &[2], Par::Seq), vec![6.0, 22.0, 38.0, 54.0, 70.0, 86.0]);
        let by0 = sum(&x, &l, &[0], Par::Seq);
        assert_eq!(by0[0], 12.0);
        assert_eq!(by0[11], 11.0 + 23.0);
        assert_eq!(sum(&x, &l, &[0], Par::Rayon), by0);
        let t = l.permute(&[2, 0, 1]);
        let r = sum(&x, &t, &[1], Par::Seq); // [4,3]
        assert_eq!(r[0], 0.0 + 12.0);
        assert_eq!(r[5], 9.0 + 21.0); // [1, 2]
        assert_eq!(sum(&x, &l, &[], Par::Seq), x);
    }

    #[test]
    fn sum_rows_matches_the_generic_sum() {
        let x: Vec<f32> = (0..7 * 37).map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.3).collect();
        let l = Layout::contiguous(Shape::from([7, 37]));
        let want: Vec<f32> = reduce(
            &x,
            &l,
            &[1],
            Par::Seq,
            Reducer { init: 0.0f64, fold: |a, v: f32| a + v as f64, finish: |a| a as f32 },
        );
        for par in [Par::Seq, Par::Rayon] {
            let got: Vec<f32> = sum_rows(&x, 37, par, |v| v as f64, |a| a as f32);
            assert_eq!(got, want);
        }
        assert!(sum_rows(&x[..0], 0, Par::Seq, |v: f32| v as f64, |a| a as f32).is_empty());
    }

    #[test]
    fn fold_rows_matches_the_generic_reduce_bitwise() {
        // a max whose result depends on the order: NaN payloads and the
        // sign of equal zeros pass through as the sequential fold leaves them
        let max = || Reducer {
            init: f32::NEG_INFINITY,
            fold: |a: f32, x: f32| {
                if a.is_nan() || x.is_nan() {
                    a + x
                } else if x > a {
                    x
                } else {
                    a
                }
            },
            finish: |a: f32| a,
        };
        let specials = [0.0f32, -0.0, f32::NAN, -f32::NAN, f32::from_bits(0x7fc0_1234), f32::INFINITY];
        for (rows, row_len) in [(1, 1), (3, 1), (8, 10), (17, 10), (64, 10), (9, 3), (40, 33), (1000, 2), (3, 5000)] {
            let x: Vec<f32> =
                (0..rows * row_len)
                    .map(|i| {
                        if i % 7 == 3 {
                            specials[(i / 7) % specials.len()]
                        } else {
                            ((i * 7919) % 1000) as f32 - 500.0
                        }
                    })
                    .collect();
            // each row folded in order, as the strided path folds it: the
            // same rows stored transposed, reduced over the leading axis
            let l = Layout::contiguous(Shape::from([rows, row_len]));
            let xt: Vec<f32> = (0..row_len * rows).map(|i| x[(i % rows) * row_len + i / rows]).collect();
            let lt = Layout::contiguous(Shape::from([row_len, rows])).permute(&[1, 0]);
            let want: Vec<f32> = reduce(&xt, &lt, &[1], Par::Seq, max());
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let by_row: Vec<f32> =
                x.chunks(row_len).map(|row| row.iter().fold(f32::NEG_INFINITY, |a, v| (max().fold)(a, *v))).collect();
            assert_eq!(bits(&by_row), bits(&want), "{rows} x {row_len}: the strided path");
            for par in [Par::Seq, Par::Rayon] {
                let got: Vec<f32> = fold_rows(&x, row_len, par, max());
                assert_eq!(bits(&got), bits(&want), "{rows} x {row_len} {par:?}");
                let got: Vec<f32> = reduce(&x, &l, &[1], par, max());
                assert_eq!(bits(&got), bits(&want), "{rows} x {row_len} {par:?}: reduce over rows");
            }
        }
        assert!(fold_rows(&[] as &[f32], 0, Par::Seq, max()).is_empty());
    }

    #[test]
    fn argmax_first_and_nan() {
        let x = vec![1.0f32, 3.0, 3.0, f32::NAN, 0.0, 2.0];
        let l = Layout::contiguous(Shape::from([2, 3]));
        let r = arg_reduce(&x, &l, 1, Par::Seq, |a, b| a > b, |i| i as i64);
        assert_eq!(r, vec![1, 0]);
    }

    #[test]
    fn cumsum_reverse() {
        let x = vec![1i32, 2, 3, 4];
        let l = Layout::contiguous(Shape::from([2, 2]));
        let r = cumulative(&x, &l, 0, true, Reducer { init: 0, fold: |a, v| a + v, finish: |a| a });
        assert_eq!(r, vec![4, 6, 3, 4]);
    }
}
