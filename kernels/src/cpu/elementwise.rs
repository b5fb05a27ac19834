//! Elementwise maps over one, two or three operands of the same shape.
//!
//! The operands may have any layouts (broadcast axes have stride 0, so
//! broadcasting never materializes an input). Fast path: every operand
//! contiguous. Otherwise the axes are coalesced and the innermost run is a
//! tight loop, unit-stride where the layouts allow.

#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};
use super::{for_run_chunks, Par};
use crate::layout::{Coalesced, Layout};
use crate::pool::alloc_uninit;
use crate::pool::assume_init;
use std::mem::MaybeUninit;

#[inline(always)]
fn at<T: Copy>(x: &[T], base: usize, i: usize, stride: isize) -> T {
    x[(base as isize + i as isize * stride) as usize]
}

/// `dst[i] = f(src[i])` over contiguous slices, with AVX-512 or AVX2 and
/// FMA enabled when the CPU has them (detected once at run time), so that
/// the closures (the f32 math of `fastmath` included) vectorize 16 or 8
/// lanes wide.
#[inline(always)]
pub fn slice1<T: Copy, U, F: Fn(T) -> U>(src: &[T], dst: &mut [MaybeUninit<U>], f: &F) {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512() {
            // SAFETY: the CPU supports AVX-512F/DQ/BW/VL, AVX2 and FMA (checked above).
            unsafe { slice1_avx512(src, dst, f) };
            return;
        }
        if avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            unsafe { slice1_avx2(src, dst, f) };
            return;
        }
    }
    for (d, s) in dst.iter_mut().zip(src) {
        d.write(f(*s));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn slice1_avx2<T: Copy, U, F: Fn(T) -> U>(src: &[T], dst: &mut [MaybeUninit<U>], f: &F) {
    for (d, s) in dst.iter_mut().zip(src) {
        d.write(f(*s));
    }
}

/// `dst[i] = f(a[i], b[i])` over contiguous slices (AVX2 when available:
/// binary maps are memory-bound, and on short runs, like the rows of a
/// broadcast operand, 16-lane loops measured slower than 8-lane ones).
#[inline(always)]
pub fn slice2<A: Copy, B: Copy, U, F: Fn(A, B) -> U>(a: &[A], b: &[B], dst: &mut [MaybeUninit<U>], f: &F) {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            unsafe { slice2_avx2(a, b, dst, f) };
            return;
        }
    }
    for ((d, x), y) in dst.iter_mut().zip(a).zip(b) {
        d.write(f(*x, *y));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn slice2_avx2<A: Copy, B: Copy, U, F: Fn(A, B) -> U>(a: &[A], b: &[B], dst: &mut [MaybeUninit<U>], f: &F) {
    for ((d, x), y) in dst.iter_mut().zip(a).zip(b) {
        d.write(f(*x, *y));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
unsafe fn slice1_avx512<T: Copy, U, F: Fn(T) -> U>(src: &[T], dst: &mut [MaybeUninit<U>], f: &F) {
    // Elements up to the output's first 64-byte line on their own, so the
    // vector loop's stores do not split lines (malloc's buffers start 16
    // bytes into one; split 64-byte stores cost ~25% on a 64 x 64 map).
    let head = line_head(dst).min(dst.len());
    let (dh, dt) = dst.split_at_mut(head);
    for (d, s) in dh.iter_mut().zip(src) {
        d.write(f(*s));
    }
    for (d, s) in dt.iter_mut().zip(&src[head..]) {
        d.write(f(*s));
    }
}

/// Elements of `x` before its first 64-byte boundary, for a run long enough
/// to be worth a scalar head (short runs, like the rows of a broadcast
/// operand, lose more to the scalar head than to split stores).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn line_head<T>(x: &[T]) -> usize {
    if std::mem::size_of_val(x) < 2048 {
        return 0;
    }
    super::to_line(x.as_ptr())
}

/// `out[i] = f(x[i])` over the logical elements of `x`.
pub fn map1<T, U, F>(x: &[T], lx: &Layout, par: Par, f: F) -> Vec<U>
where
    T: Copy + Sync,
    U: Send,
    F: Fn(T) -> U + Sync,
{
    let n = lx.numel();
    let mut out = alloc_uninit::<U>(n);
    if let Some(r) = lx.contiguous_range() {
        let src = &x[r];
        for_run_chunks(&mut out, 1, par, |first, dst| {
            let n = dst.len();
            slice1(&src[first..first + n], dst, &f);
        });
    } else {
        let c = Coalesced::new(&lx.shape, [(&lx.strides[..], lx.offset)]);
        let len = c.inner_len();
        for_run_chunks(&mut out, len, par, |first, dst| {
            let mut k = 0;
            c.for_runs(first, dst.len() / len, |[o], n, [s]| {
                let d = &mut dst[k..k + n];
                if s == 1 {
                    slice1(&x[o..o + n], d, &f);
                } else {
                    for (i, d) in d.iter_mut().enumerate() {
                        d.write(f(at(x, o, i, s)));
                    }
                }
                k += n;
            });
        });
    }
    // SAFETY: every output slot was written above (the runs cover all n).
    unsafe { assume_init(out) }
}

/// `out[i] = f(a[i], b[i])`; `a` and `b` have the same logical shape.
pub fn map2<A, B, U, F>(a: &[A], la: &Layout, b: &[B], lb: &Layout, par: Par, f: F) -> Vec<U>
where
    A: Copy + Sync,
    B: Copy + Sync,
    U: Send,
    F: Fn(A, B) -> U + Sync,
{
    debug_assert_eq!(la.shape, lb.shape);
    let n = la.numel();
    let mut out = alloc_uninit::<U>(n);
    if let (Some(ra), Some(rb)) = (la.contiguous_range(), lb.contiguous_range()) {
        let (sa, sb) = (&a[ra], &b[rb]);
        for_run_chunks(&mut out, 1, par, |first, dst| {
            let n = dst.len();
            slice2(&sa[first..first + n], &sb[first..first + n], dst, &f);
        });
    } else {
        let c = Coalesced::new(&la.shape, [(&la.strides[..], la.offset), (&lb.strides[..], lb.offset)]);
        let len = c.inner_len();
        for_run_chunks(&mut out, len, par, |first, dst| {
            let mut k = 0;
            c.for_runs(first, dst.len() / len, |[oa, ob], n, [sa, sb]| {
                let d = &mut dst[k..k + n];
                match (sa, sb) {
                    (1, 1) => slice2(&a[oa..oa + n], &b[ob..ob + n], d, &f),
                    (1, 0) => {
                        let y = b[ob];
                        for (d, x) in d.iter_mut().zip(&a[oa..oa + n]) {
                            d.write(f(*x, y));
                        }
                    }
                    (0, 1) => {
                        let x = a[oa];
                        for (d, y) in d.iter_mut().zip(&b[ob..ob + n]) {
                            d.write(f(x, *y));
                        }
                    }
                    _ => {
                        for (i, d) in d.iter_mut().enumerate() {
                            d.write(f(at(a, oa, i, sa), at(b, ob, i, sb)));
                        }
                    }
                }
                k += n;
            });
        });
    }
    // SAFETY: every output slot was written above.
    unsafe { assume_init(out) }
}

/// `out[i] = f(a[i], b[i], c[i])`; all three have the same logical shape.
#[allow(clippy::too_many_arguments)]
pub fn map3<A, B, C, U, F>(a: &[A], la: &Layout, b: &[B], lb: &Layout, c: &[C], lc: &Layout, par: Par, f: F) -> Vec<U>
where
    A: Copy + Sync,
    B: Copy + Sync,
    C: Copy + Sync,
    U: Send,
    F: Fn(A, B, C) -> U + Sync,
{
    let n = la.numel();
    let mut out = alloc_uninit::<U>(n);
    let co = Coalesced::new(
        &la.shape,
        [(&la.strides[..], la.offset), (&lb.strides[..], lb.offset), (&lc.strides[..], lc.offset)],
    );
    let len = co.inner_len();
    for_run_chunks(&mut out, len, par, |first, dst| {
        let mut k = 0;
        co.for_runs(first, dst.len() / len, |[oa, ob, oc], n, [sa, sb, sc]| {
            let d = &mut dst[k..k + n];
            // Contiguous runs and broadcast scalars (select's zeros) get
            // loops the compiler vectorizes; other strides index.
            match (sa, sb, sc) {
                (1, 1, 1) => run3::<_, _, _, _, _, 1, 1, 1>(a, oa, b, ob, c, oc, d, &f),
                (1, 0, 1) => run3::<_, _, _, _, _, 1, 0, 1>(a, oa, b, ob, c, oc, d, &f),
                (1, 1, 0) => run3::<_, _, _, _, _, 1, 1, 0>(a, oa, b, ob, c, oc, d, &f),
                (1, 0, 0) => run3::<_, _, _, _, _, 1, 0, 0>(a, oa, b, ob, c, oc, d, &f),
                _ => {
                    for (i, d) in d.iter_mut().enumerate() {
                        d.write(f(at(a, oa, i, sa), at(b, ob, i, sb), at(c, oc, i, sc)));
                    }
                }
            }
            k += n;
        });
    });
    // SAFETY: every output slot was written above.
    unsafe { assume_init(out) }
}

/// One run of [`map3`] whose strides are the constants `SA`, `SB`, `SC`
/// (each 0 or 1), so that the loop vectorizes.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn run3<A: Copy, B: Copy, C: Copy, U, F: Fn(A, B, C) -> U, const SA: usize, const SB: usize, const SC: usize>(
    a: &[A],
    oa: usize,
    b: &[B],
    ob: usize,
    c: &[C],
    oc: usize,
    dst: &mut [MaybeUninit<U>],
    f: &F,
) {
    let n = dst.len();
    let span = |s: usize| if s == 0 { 1 } else { n };
    let (a, b, c) = (&a[oa..oa + span(SA)], &b[ob..ob + span(SB)], &c[oc..oc + span(SC)]);
    for (i, d) in dst.iter_mut().enumerate() {
        d.write(f(a[i * SA], b[i * SB], c[i * SC]));
    }
}

/// A contiguous copy of the logical elements of `x`.
pub fn to_contiguous<T: Copy + Send + Sync>(x: &[T], lx: &Layout, par: Par) -> Vec<T> {
    map1(x, lx, par, |v| v)
}

/// Writes the logical elements of `src` (layout `ls`) into `dst` through the
/// layout `ld` (same shape). `ld` must not overlap itself (callers check
/// [`Layout::has_internal_overlap`]); `src` must not alias `dst`.
pub fn write_strided<T: Copy>(dst: &mut [T], ld: &Layout, src: &[T], ls: &Layout) {
    let c = Coalesced::new(&ld.shape, [(&ld.strides[..], ld.offset), (&ls.strides[..], ls.offset)]);
    c.for_runs(0, c.runs(), |[od, os], n, [sd, ss]| {
        if sd == 1 && ss == 1 {
            dst[od..od + n].copy_from_slice(&src[os..os + n]);
        } else {
            for i in 0..n {
                dst[(od as isize + i as isize * sd) as usize] = at(src, os, i, ss);
            }
        }
    });
}

/// Fills the elements of `dst` reached through layout `ld` with `value`.
pub fn fill_strided<T: Copy>(dst: &mut [T], ld: &Layout, value: T) {
    let c = Coalesced::new(&ld.shape, [(&ld.strides[..], ld.offset)]);
    c.for_runs(0, c.runs(), |[od], n, [sd]| {
        for i in 0..n {
            dst[(od as isize + i as isize * sd) as usize] = value;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Shape;

    #[test]
    fn broadcast_and_transposed_operands() {
        let a: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let la = Layout::contiguous(Shape::from([2, 3]));
        let b = vec![10.0f32, 20.0, 30.0];
        let lb = Layout::contiguous(Shape::from([3])).broadcast_in_dim(&Shape::from([2, 3]), &[1]);
        let out = map2(&a, &la, &b, &lb, Par::Seq, |x, y| x + y);
        assert_eq!(out, vec![10.0, 21.0, 32.0, 13.0, 24.0, 35.0]);
        let t = la.permute(&[1, 0]);
        assert_eq!(to_contiguous(&a, &t, Par::Seq), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let big: Vec<f64> = (0..100_000).map(|v| v as f64).collect();
        let lbig = Layout::contiguous(Shape::from([400, 250])).permute(&[1, 0]);
        let seq = map1(&big, &lbig, Par::Seq, |v| v * 2.0);
        let par = map1(&big, &lbig, Par::Rayon, |v| v * 2.0);
        assert_eq!(seq, par);
        assert_eq!(seq[1], 500.0);
    }

    #[test]
    fn strided_write() {
        let mut dst = vec![0i32; 6];
        let ld = Layout::contiguous(Shape::from([2, 3])).slice(&[0, 1], &[2, 3], &[1, 1]);
        let src = vec![1, 2, 3, 4];
        write_strided(&mut dst, &ld, &src, &Layout::contiguous(Shape::from([2, 2])));
        assert_eq!(dst, vec![0, 1, 2, 0, 3, 4]);
    }
}
