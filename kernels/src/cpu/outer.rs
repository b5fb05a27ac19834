//! Batched outer products `out[b] = a[b] ⊗ c[b]` (a GEMM with k = 1): the
//! per-sample weight gradients of `vmap(grad)`.
//!
//! The work is one multiply and one store per output element, so the time
//! is the stores'. faer routes k = 1 to its rank-one update, one call per
//! product with AVX2 stores. Here one call writes every product: each row
//! with 16-lane (f32) or 8-lane (f64) AVX-512 stores aligned to 64-byte
//! lines, its lines prefetched ahead when the output is large. A product with fewer
//! columns than lanes is written as its flat `m * n` run: a group of `L`
//! rows is `n` full vectors, each a lane permutation of `2 L` values of `a`
//! times a repetition of `c` (the permutations depend only on `n` and the
//! run's alignment, so they are built once per call). W1 small's three
//! products (64 samples; 10x64, 64x64, 64x32 f32), warm loop: 47.5 us
//! through faer, 30 us here; a 64 x 10 product alone: 11.0 -> 4.3 us.
//! Without AVX-512, `outer_avx2` writes the same flat runs 8 (f32) or 4
//! (f64) lanes at a time.

use std::mem::MaybeUninit;

/// Element types with a batched outer-product kernel.
pub trait OuterElem: Copy + Send + Sync + std::ops::Mul<Output = Self> + 'static {
    /// `dst[(b * m + i) * n + j] = a[a_offs[b] + i] * c[c_offs[b] + j]`
    /// for every batch entry `b`, with AVX-512.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; for every `b`, `a_offs[b] >= 0`,
    /// `a_offs[b]..a_offs[b] + m`
    /// lies in `a` and `c_offs[b]..c_offs[b] + n` in `c`;
    /// `dst.len() == a_offs.len() * m * n` and `c_offs.len() == a_offs.len()`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn outer_avx512(
        a: &[Self],
        a_offs: &[isize],
        c: &[Self],
        c_offs: &[isize],
        m: usize,
        n: usize,
        dst: &mut [MaybeUninit<Self>],
    );

    /// As [`OuterElem::outer_avx512`], with AVX2 (`outer_avx2`).
    ///
    /// # Safety
    /// The CPU supports AVX2; otherwise as `outer_avx512`, and `m, n >= 1`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn outer_avx2(
        a: &[Self],
        a_offs: &[isize],
        c: &[Self],
        c_offs: &[isize],
        m: usize,
        n: usize,
        dst: &mut [MaybeUninit<Self>],
    );
}

/// `dst[(b * m + i) * n + j] = a[a_offs[b] + i] * c[c_offs[b] + j]`: the
/// outer products of contiguous `m`- and `n`-vectors for each batch entry.
///
/// Panics when an offset range falls outside its slice or `dst` has the
/// wrong length.
pub fn outer_batched<T: OuterElem>(
    a: &[T],
    a_offs: &[isize],
    c: &[T],
    c_offs: &[isize],
    m: usize,
    n: usize,
    dst: &mut [MaybeUninit<T>],
) {
    let batch = a_offs.len();
    assert_eq!(c_offs.len(), batch, "outer_batched: {} offsets of a, {} of c", batch, c_offs.len());
    let len = batch.checked_mul(m).and_then(|x| x.checked_mul(n));
    assert_eq!(Some(dst.len()), len, "outer_batched: output of {} elements for {batch} x {m} x {n}", dst.len());
    let inside = |o: isize, len: usize, data: usize| o >= 0 && (o as usize).checked_add(len).is_some_and(|e| e <= data);
    assert!(a_offs.iter().all(|&o| inside(o, m, a.len())), "outer_batched: a out of range");
    assert!(c_offs.iter().all(|&o| inside(o, n, c.len())), "outer_batched: c out of range");
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512f() {
        // SAFETY: AVX-512F is present and the ranges were checked above.
        unsafe { T::outer_avx512(a, a_offs, c, c_offs, m, n, dst) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::avx2() {
        // SAFETY: AVX2 is present, the ranges were checked above and m, n >= 1.
        unsafe { T::outer_avx2(a, a_offs, c, c_offs, m, n, dst) };
        return;
    }
    outer_portable(a, a_offs, c, c_offs, m, n, dst);
}

/// [`outer_batched`] without vector intrinsics (checked arguments).
fn outer_portable<T: OuterElem>(
    a: &[T],
    a_offs: &[isize],
    c: &[T],
    c_offs: &[isize],
    m: usize,
    n: usize,
    dst: &mut [MaybeUninit<T>],
) {
    for (b, out) in dst.chunks_exact_mut(m * n).enumerate() {
        let (ao, co) = (a_offs[b] as usize, c_offs[b] as usize);
        let cb = &c[co..co + n];
        for (row, &s) in out.chunks_exact_mut(n).zip(&a[ao..ao + m]) {
            for (o, &v) in row.iter_mut().zip(cb) {
                o.write(s * v);
            }
        }
    }
}

/// The lane patterns of a product narrower than a vector of `L` lanes,
/// whose flat run is written in aligned vectors from element `start`: in a
/// group of `L` rows, vector `k`'s lane `l` is element
/// `p = start + k * L + l` of the group's run, so row `p / n` (below `2 L`:
/// two vectors of `a`) and column `p % n`.
#[cfg(target_arch = "x86_64")]
struct NarrowPattern<I> {
    rows: Vec<I>,
    cols: Vec<I>,
}

#[cfg(target_arch = "x86_64")]
impl<I> NarrowPattern<I> {
    fn new(n: usize, lanes: usize, start: usize, load: impl Fn(&[i64]) -> I) -> Self {
        let at = |k: usize, f: &dyn Fn(usize) -> usize| -> Vec<i64> {
            (0..lanes).map(|l| f(start + k * lanes + l) as i64).collect()
        };
        NarrowPattern {
            rows: (0..n).map(|k| load(&at(k, &|p| p / n))).collect(),
            cols: (0..n).map(|k| load(&at(k, &|p| p % n))).collect(),
        }
    }
}

/// How far ahead of the stores their lines are prefetched. The destination
/// is rarely still in L2 (a small call's buffers come back from L3; a large
/// call's are in DRAM): prefetching 1 KiB ahead overlaps those misses.
/// W1 (interleaved runs): small 0.088 -> 0.085 ms, medium f32 16.6 -> 14.3
/// ms, f64 51.3 -> 43.4 ms; 512 B and 2 KiB ahead measured the same or
/// slower. The `_MM_HINT_ET0` hint compiles to `prefetcht0` (stable Rust
/// cannot enable `prfchw`); a `prefetchw` through inline assembly measured
/// no better (f64 medium 45.6-46.6 ms).
const PREFETCH_AHEAD: usize = 1024;

/// The smallest output (bytes) whose stores are prefetched. A smaller one
/// is most likely a buffer the pool handed back warm (last call's result of
/// the same size, still in L2 or L3), where the prefetches only take issue
/// slots: W1 small (1.77 MB in three products), replays interleaved in one
/// process, p10 64.6 -> 61.6 us and median 80.2 -> 75.2 without them.
const PREFETCH_MIN_BYTES: usize = 8 << 20;

/// Prefetches the lines `PREFETCH_AHEAD` bytes past the `len` bytes at `p`
/// (a hint: addresses past the buffer are harmless).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ahead(p: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let ahead = p.wrapping_add(PREFETCH_AHEAD);
    let mut off = 0;
    while off < len {
        // SAFETY: prefetching is a hint that never faults, for any address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(off) as *const i8) };
        off += 64;
    }
}

/// One kernel body for both widths (`$lanes` elements per vector of `$t`),
/// and the element's `OuterElem` impl.
macro_rules! outer_kernel {
    ($name:ident, $avx2:path, $t:ty, $lanes:expr, $mask:ty, $set1:ident, $mul:ident, $loadu:ident, $storeu:ident,
     $maskz_loadu:ident, $mask_loadu:ident, $blend:ident, $mask_storeu:ident, $permute:ident, $permute2:ident,
     $zero:ident, $load_idx:expr) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn $name(
            a: &[$t],
            a_offs: &[isize],
            c: &[$t],
            c_offs: &[isize],
            m: usize,
            n: usize,
            dst: &mut [MaybeUninit<$t>],
        ) {
            use std::arch::x86_64::*;
            const L: usize = $lanes;
            let mask = |len: usize| ((1u32 << len) - 1) as $mask;
            let out = dst.as_mut_ptr() as *mut $t;
            let prefetch = std::mem::size_of_val(dst) >= PREFETCH_MIN_BYTES;
            // Every store is to whole, aligned 64-byte lines where it can be:
            // large buffers come from malloc 16 bytes past a page boundary,
            // and a line-splitting 64-byte store costs ~30% here.
            if n >= L {
                // Wide: the block's flat run in aligned vectors (a row's
                // edges fall mid-line unless n is a multiple of L and the
                // block starts on a line: per row, masked edge stores would
                // write the line they share twice); a vector across two
                // rows takes its last lanes from the next row. Each lane is
                // still one product a[i] * c[j].
                for (b, (&ao, &co)) in a_offs.iter().zip(c_offs).enumerate() {
                    // SAFETY (whole block): the caller checked that rows
                    // ao..ao + m of a, columns co..co + n of c and the
                    // m * n block of product b lie in their slices. A vector
                    // at run position p inside row i reads columns
                    // p - i n.. of c; one crossing into row i + 1 (which
                    // exists: its lanes lie inside the run) reads that
                    // row's first columns through a masked load whose
                    // masked-off lanes, below column 0, are not accessed
                    // (AVX-512 masked loads touch only their enabled lanes).
                    // Stores stay inside the run: full vectors end by it,
                    // the last one is masked.
                    unsafe {
                        let (pa, pc) = (a.as_ptr().offset(ao), c.as_ptr().offset(co));
                        let block = out.add(b * m * n);
                        let run = m * n;
                        // before the first line: part of row 0 (start < L <= n)
                        let start = super::to_line(block).min(run);
                        if start > 0 {
                            let s0 = $set1(*pa);
                            $mask_storeu(block, mask(start), $mul(s0, $maskz_loadu(mask(start), pc)));
                        }
                        let mut p = start;
                        for i in 0..m {
                            let row = i * n;
                            if prefetch {
                                prefetch_ahead(block.add(row) as *const u8, n * std::mem::size_of::<$t>());
                            }
                            let s = $set1(*pa.add(i));
                            while p + L <= row + n {
                                $storeu(block.add(p), $mul(s, $loadu(pc.add(p - row))));
                                p += L;
                            }
                            if p == row + n {
                                continue;
                            }
                            // lanes ..first from this row, first..len from the next
                            let (first, len) = (row + n - p, L.min(run - p));
                            let lo = mask(first);
                            let mut cv = $maskz_loadu(lo, pc.add(p - row));
                            let mut av = s;
                            if len > first {
                                let hi = mask(len) & !lo;
                                cv = $mask_loadu(cv, hi, pc.wrapping_sub(first));
                                av = $blend(hi, s, $set1(*pa.add(i + 1)));
                            }
                            let v = $mul(av, cv);
                            if len == L {
                                $storeu(block.add(p), v);
                            } else {
                                $mask_storeu(block.add(p), mask(len), v);
                            }
                            p += len;
                        }
                    }
                }
            } else {
                // Narrow: a group of L rows is n vectors of the flat run,
                // each from two vectors of a and a repetition of c; the
                // pattern depends on where the first aligned line starts.
                let mut patterns: [Option<NarrowPattern<__m512i>>; L] = Default::default();
                let mut c_rep = [$zero(); L];
                let run_len = m * n;
                for (b, (&ao, &co)) in a_offs.iter().zip(c_offs).enumerate() {
                    let block = out.wrapping_add(b * m * n);
                    let start = super::to_line(block).min(run_len);
                    let pat = patterns[start].get_or_insert_with(|| NarrowPattern::new(n, L, start, $load_idx));
                    // SAFETY (whole block): as above. Group g reads rows
                    // g L..g L + 2 L of a through masks that stop at m (a
                    // masked load reads nothing past its mask); vectors
                    // write elements start..m n of the block, the last one
                    // through a mask, and scalar writes elements 0..start.
                    unsafe {
                        let (pa, pc) = (a.as_ptr().offset(ao), c.as_ptr().offset(co));
                        let cv = $maskz_loadu(mask(n), pc);
                        for k in 0..n {
                            c_rep[k] = $permute(pat.cols[k], cv);
                        }
                        let load_rows = |r0: usize| {
                            let lo = $maskz_loadu(mask(m.saturating_sub(r0).min(L)), pa.add(r0.min(m)));
                            let hi = $maskz_loadu(mask(m.saturating_sub(r0 + L).min(L)), pa.add((r0 + L).min(m)));
                            (lo, hi)
                        };
                        // Whole groups of L rows, then the vectors left, the
                        // last one (shorter than L) through a mask.
                        let groups = (run_len - start) / (L * n);
                        for g in 0..groups {
                            let (lo, hi) = load_rows(g * L);
                            let run = block.add(start + g * L * n);
                            if prefetch {
                                prefetch_ahead(run as *const u8, L * n * std::mem::size_of::<$t>());
                            }
                            for k in 0..n {
                                $storeu(run.add(k * L), $mul($permute2(lo, pat.rows[k], hi), c_rep[k]));
                            }
                        }
                        let (lo, hi) = load_rows(groups * L);
                        let mut p = start + groups * L * n;
                        for k in 0..n {
                            if p >= run_len {
                                break;
                            }
                            let x = $mul($permute2(lo, pat.rows[k], hi), c_rep[k]);
                            if p + L <= run_len {
                                $storeu(block.add(p), x);
                            } else {
                                $mask_storeu(block.add(p), mask(run_len - p), x);
                            }
                            p += L;
                        }
                        let scalar = |p: usize| *block.add(p) = *pa.add(p / n) * *pc.add(p % n);
                        (0..start).for_each(scalar);
                    }
                }
            }
        }

        impl OuterElem for $t {
            #[cfg(target_arch = "x86_64")]
            unsafe fn outer_avx512(
                a: &[$t],
                a_offs: &[isize],
                c: &[$t],
                c_offs: &[isize],
                m: usize,
                n: usize,
                dst: &mut [MaybeUninit<$t>],
            ) {
                // SAFETY: forwarded contract.
                unsafe { $name(a, a_offs, c, c_offs, m, n, dst) }
            }

            #[cfg(target_arch = "x86_64")]
            unsafe fn outer_avx2(
                a: &[$t],
                a_offs: &[isize],
                c: &[$t],
                c_offs: &[isize],
                m: usize,
                n: usize,
                dst: &mut [MaybeUninit<$t>],
            ) {
                // SAFETY: forwarded contract.
                unsafe { $avx2(a, a_offs, c, c_offs, m, n, dst) }
            }
        }
    };
}

outer_kernel!(
    outer_f32,
    super::outer_avx2::outer_f32,
    f32,
    16,
    u16,
    _mm512_set1_ps,
    _mm512_mul_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_maskz_loadu_ps,
    _mm512_mask_loadu_ps,
    _mm512_mask_blend_ps,
    _mm512_mask_storeu_ps,
    _mm512_permutexvar_ps,
    _mm512_permutex2var_ps,
    _mm512_setzero_ps,
    |v: &[i64]| {
        let lanes: [i32; 16] = std::array::from_fn(|l| v[l] as i32);
        // SAFETY: reads 64 bytes from a local array of 64 bytes; the
        // closure runs only inside the AVX-512 kernel (the CPU has it).
        unsafe { std::arch::x86_64::_mm512_loadu_si512(lanes.as_ptr() as *const _) }
    }
);

outer_kernel!(
    outer_f64,
    super::outer_avx2::outer_f64,
    f64,
    8,
    u8,
    _mm512_set1_pd,
    _mm512_mul_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    _mm512_maskz_loadu_pd,
    _mm512_mask_loadu_pd,
    _mm512_mask_blend_pd,
    _mm512_mask_storeu_pd,
    _mm512_permutexvar_pd,
    _mm512_permutex2var_pd,
    _mm512_setzero_pd,
    |v: &[i64]| {
        // SAFETY: reads 64 bytes from a slice of 8 i64; the closure runs
        // only inside the AVX-512 kernel (the CPU has it).
        unsafe { std::arch::x86_64::_mm512_loadu_si512(v.as_ptr() as *const _) }
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy)]
    enum Path {
        Dispatched,
        Avx2,
        Portable,
    }

    fn check<T: OuterElem + Into<f64>>(from: impl Fn(f64) -> T) {
        for &(batch, m, n) in &[
            (3, 5, 1),
            (2, 17, 10),
            (4, 33, 7),
            (2, 16, 16),
            (3, 9, 37),
            (1, 64, 64),
            (2, 1, 3),
            (2, 40, 3),
            (3, 7, 15),
            (2, 31, 8),
            (2, 5, 17),
            (3, 3, 31),
            (1, 2, 100),
            // whole vectors: c in registers (1 to 8 vectors), then wider rows (the flat run)
            (2, 3, 24),
            (2, 3, 32),
            (2, 3, 40),
            (2, 3, 48),
            (2, 3, 56),
            (2, 3, 72),
            (2, 3, 128),
            // periodic widths (gcd with the lanes >= 2, not a multiple)
            (3, 9, 6),
            (2, 13, 12),
            (2, 7, 14),
            (3, 5, 2),
            (2, 11, 4),
            (2, 9, 18),
            (2, 5, 26),
            (1, 3, 30),
            (2, 5, 22),
            (4, 64, 10),
        ] {
            // Offsets with gaps, so every product reads its own vectors.
            let a: Vec<T> = (0..batch * (m + 3)).map(|i| from(i as f64 * 0.25 - 3.0)).collect();
            let c: Vec<T> = (0..batch * (n + 2)).map(|i| from(1.5 - i as f64 * 0.125)).collect();
            let a_offs: Vec<isize> = (0..batch).map(|b| (b * (m + 3) + 1) as isize).collect();
            let c_offs: Vec<isize> = (0..batch).map(|b| (b * (n + 2) + 2) as isize).collect();
            // Every phase of the output against 64-byte lines.
            let len = batch * m * n;
            let mut store = vec![MaybeUninit::<T>::uninit(); len + 16];
            // Every path (the dispatched one: AVX-512 where the CPU has
            // it; AVX2; the portable one) at each phase.
            for (skip, path) in (0..16).flat_map(|s| [(s, Path::Dispatched), (s, Path::Avx2), (s, Path::Portable)]) {
                let dst = &mut store[skip..skip + len];
                match path {
                    Path::Portable => outer_portable(&a, &a_offs, &c, &c_offs, m, n, dst),
                    Path::Dispatched => outer_batched(&a, &a_offs, &c, &c_offs, m, n, dst),
                    #[cfg(target_arch = "x86_64")]
                    Path::Avx2 if crate::cpu::avx2() => {
                        // SAFETY: AVX2 is present; the offsets address
                        // m- and n-vectors inside a and c; dst is batch m n.
                        unsafe { T::outer_avx2(&a, &a_offs, &c, &c_offs, m, n, dst) }
                    }
                    Path::Avx2 => continue,
                }
                for b in 0..batch {
                    for i in 0..m {
                        for j in 0..n {
                            // SAFETY: the call above wrote every element.
                            let got: f64 = unsafe { dst[(b * m + i) * n + j].assume_init() }.into();
                            let want: f64 = a[a_offs[b] as usize + i].into() * c[c_offs[b] as usize + j].into();
                            // bits: a zero's sign too
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "batch {batch} m {m} n {n} skip {skip} {path:?}: [{b}, {i}, {j}]"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn outer_products_match_naive_for_every_width() {
        // The values are exact in f32 (multiples of 1/32 with few digits),
        // so results must be equal, not just close.
        check::<f32>(|v| v as f32);
        check::<f64>(|v| v);
    }
}
