//! The batched outer-product kernel of [`super::outer`] for CPUs with AVX2
//! but no AVX-512 (8 f32 or 4 f64 lanes per vector).
//!
//! Rows of up to 8 whole vectors (`n % L == 0`, `n <= 8 L`: up to 64 f32
//! columns) are written row by row with unaligned stores and `c`'s
//! vectors held in registers (`in_registers`: a broadcast of `a[i]` and
//! `n / L` multiplies and stores per row, nothing loaded). These are
//! store-bound: the loop over aligned vectors of the flat run (below)
//! reached about 40 GB/s here, under the 50 GB/s of a plain `fill` of the
//! same buffer, and the register rows exceed the `fill`. In one run of a
//! warm loop on a Zen 3 core, against the flat run: 32 x 64 x 64 9.5
//! against 12.4-13.6 us, 32 x 32 x 64 3.4 against 5.8-6.1 us, 64 x 64 x 64
//! 16.6 against 24.2 us. Wider rows gained nothing measurable (16 x 256 x
//! 256, 4 MB, is memory-bound) and take the flat run.
//!
//! Other products at least one vector wide are written as their flat
//! `m * n` run in vectors aligned to 32 bytes (so that no store splits a
//! cache line): a vector that crosses from row `i` into row `i + 1` takes
//! its last lanes from the next row (a blend of `a[i]` and `a[i + 1]`, and
//! a masked load of the next row's first columns of `c`).
//!
//! A product whose rows are not a whole number of vectors and shorter
//! than four vectors, with `gcd(n, L) >= 2` (a classifier's 10 classes),
//! is periodic instead: `n / gcd` vectors cover `L / gcd` rows exactly, so
//! each vector `k` of a period is the same lanes of `c` (built once per
//! product) times a lane permutation of a few consecutive `a` values (one
//! `vpermps` of a vector of `a`), where the row path would blend and
//! mask-load nearly every vector. A period's patterns and `c` lanes are
//! held across its repeats (`whole_periods`; in registers up to 7
//! vectors): 32 x 64 x 10 2.15 against 3.2-3.4 us in the run above. Other narrow products (odd
//! `n < L`) are written element by element. Each element is the one
//! product `a[i] * c[j]` in every path: the same bits as the portable and
//! the AVX-512 kernels.

use super::small_gemm_avx2::{mask32, mask64};
use std::arch::x86_64::__m256i;
use std::mem::MaybeUninit;

/// The most vectors in a period: `n / gcd(n, L)` with `n < 4 L` and a
/// gcd of at least 2 (`periodic`).
const MAX_VECTORS: usize = 16;

/// The lane pattern of a periodic product (see the module doc): vector
/// `k` of a period starting at run position `phase` (`< n`, the column
/// of its first element) holds, in lane `l`, element `phase + k L + l` of
/// the period: row `(phase + k L + l) / n` of it (at most `L / g`) and
/// column `(phase + k L + l) % n`.
/// (Fixed arrays, of which the first `n / gcd(n, L)` vectors are used:
/// no allocation per call.)
struct Period {
    /// Per vector, the row of each lane as `vpermps` indices: f32 lane `l`
    /// takes element `r`; f64 lane `l` takes the pair `2 r, 2 r + 1`.
    rows: [__m256i; MAX_VECTORS],
    /// Per vector and lane, the column (`n < 32`).
    cols: [u8; MAX_VECTORS * 8],
}

impl Period {
    /// # Safety
    /// The CPU supports AVX (256-bit loads); `periodic(n, lanes)`.
    unsafe fn new(n: usize, lanes: usize, phase: usize) -> Period {
        use std::arch::x86_64::{_mm256_loadu_si256, _mm256_setzero_si256};
        // SAFETY: AVX per the contract.
        let mut pat = Period { rows: [unsafe { _mm256_setzero_si256() }; MAX_VECTORS], cols: [0; MAX_VECTORS * 8] };
        for k in 0..n / gcd(n, lanes) {
            let mut idx = [0i32; 8];
            for l in 0..lanes {
                let p = phase + k * lanes + l;
                pat.cols[k * lanes + l] = (p % n) as u8;
                let r = (p / n) as i32;
                if lanes == 8 {
                    idx[l] = r;
                } else {
                    (idx[2 * l], idx[2 * l + 1]) = (2 * r, 2 * r + 1);
                }
            }
            // SAFETY: reads the 32 bytes of `idx`; AVX per the contract.
            pat.rows[k] = unsafe { _mm256_loadu_si256(idx.as_ptr() as *const _) };
        }
        pat
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Whether a product `n` wide is written periodically with `lanes`-lane
/// vectors: rows not a whole number of vectors, shorter than four, and a
/// period of at most `lanes / 2` rows (so that a period's rows plus the
/// one its phase may reach fit in one vector of `a`).
fn periodic(n: usize, lanes: usize) -> bool {
    !n.is_multiple_of(lanes) && n < 4 * lanes && gcd(n, lanes) >= 2
}

macro_rules! outer_avx2 {
    ($name:ident, $t:ty, $vec:ty, $lanes:expr, $set1:ident, $mul:ident, $loadu:ident, $storeu:ident, $maskload:ident,
     $maskstore:ident, $blendv:ident, $cast:ident, $mask:ident, $to_ps:ident, $from_ps:ident) => {
        /// `dst[(b * m + i) * n + j] = a[a_offs[b] + i] * c[c_offs[b] + j]`.
        ///
        /// # Safety
        /// The CPU supports AVX2; for every `b`, `a_offs[b]..a_offs[b] + m`
        /// lies in `a` and `c_offs[b]..c_offs[b] + n` in `c`;
        /// `dst.len() == a_offs.len() * m * n`, `c_offs.len() ==
        /// a_offs.len()`, and `m, n >= 1`.
        #[target_feature(enable = "avx2")]
        pub(crate) unsafe fn $name(
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
            let out = dst.as_mut_ptr() as *mut $t;
            let run = m * n;
            if periodic(n, L) {
                // SAFETY: forwarded contract (AVX2, checked ranges).
                unsafe { periodic_run(a, a_offs, c, c_offs, m, n, out) };
                return;
            }
            if n % L == 0 && n / L <= 8 {
                // SAFETY: forwarded contract, with n = (n / L) L.
                unsafe {
                    match n / L {
                        1 => in_registers::<1>(a, a_offs, c, c_offs, m, out),
                        2 => in_registers::<2>(a, a_offs, c, c_offs, m, out),
                        3 => in_registers::<3>(a, a_offs, c, c_offs, m, out),
                        4 => in_registers::<4>(a, a_offs, c, c_offs, m, out),
                        5 => in_registers::<5>(a, a_offs, c, c_offs, m, out),
                        6 => in_registers::<6>(a, a_offs, c, c_offs, m, out),
                        7 => in_registers::<7>(a, a_offs, c, c_offs, m, out),
                        _ => in_registers::<8>(a, a_offs, c, c_offs, m, out),
                    }
                }
                return;
            }
            for (b, (&ao, &co)) in a_offs.iter().zip(c_offs).enumerate() {
                // SAFETY (whole block): the caller checked that rows
                // ao..ao + m of a, columns co..co + n of c and the m * n
                // block of product b lie in their slices. Stores stay inside
                // the run (full vectors end by it, the last one is masked);
                // loads of c read columns 0..n of it, a masked load's
                // disabled lanes (below column 0 for the next row's part)
                // are not accessed.
                unsafe {
                    let (pa, pc) = (a.as_ptr().offset(ao), c.as_ptr().offset(co));
                    let block = out.add(b * run);
                    if n < L {
                        for i in 0..m {
                            let s = *pa.add(i);
                            for j in 0..n {
                                *block.add(i * n + j) = s * *pc.add(j);
                            }
                        }
                        continue;
                    }
                    // before the first aligned vector: part of row 0 (start < L <= n)
                    let start = super::to_boundary(block, 32).min(run);
                    if start > 0 {
                        let lo = $mask(start);
                        $maskstore(block, lo, $mul($set1(*pa), $maskload(pc, lo)));
                    }
                    let mut p = start;
                    for i in 0..m {
                        let row = i * n;
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
                        let lo = $mask(first);
                        let mut cv = $maskload(pc.add(p - row), lo);
                        let mut av = s;
                        if len > first {
                            let hi = _mm256_andnot_si256(lo, $mask(len));
                            let next = $maskload(pc.wrapping_sub(first), hi);
                            cv = $blendv(cv, next, $cast(hi));
                            av = $blendv(s, $set1(*pa.add(i + 1)), $cast(hi));
                        }
                        let v = $mul(av, cv);
                        if len == L {
                            $storeu(block.add(p), v);
                        } else {
                            $maskstore(block.add(p), $mask(len), v);
                        }
                        p += len;
                    }
                }
            }

            /// `whole` periods of a periodic product from run position `p`
            /// (row `row`), with the period's `V` lane patterns and `c`
            /// vectors in registers; returns the position and row after them.
            ///
            /// # Safety
            /// As `periodic_run`'s, for the product at `block` (with its `a`
            /// rows at `pa`); `rows` holds `V` patterns and `c_rep` `V * L`
            /// elements.
            #[target_feature(enable = "avx2")]
            unsafe fn whole_periods<const V: usize>(
                (pa, m, block, period_rows): (*const $t, usize, *mut $t, usize),
                rows: &[__m256i],
                c_rep: *const $t,
                mut p: usize,
                mut row: usize,
                whole: usize,
            ) -> (usize, usize) {
                use std::arch::x86_64::*;
                // SAFETY: the loads read rows row..row + L of a below m
                // (masked at the end) and V * L elements of c_rep; the stores
                // write whole periods inside the block (the caller's count).
                unsafe {
                    let idx: [__m256i; V] = std::array::from_fn(|k| rows[k]);
                    let cv: [$vec; V] = std::array::from_fn(|k| $loadu(c_rep.add(k * L)));
                    for _ in 0..whole {
                        let av =
                            if row + L <= m { $loadu(pa.add(row)) } else { $maskload(pa.add(row), $mask(m - row)) };
                        let av = $to_ps(av);
                        for k in 0..V {
                            let lanes = $from_ps(_mm256_permutevar8x32_ps(av, idx[k]));
                            $storeu(block.add(p + k * L), $mul(lanes, cv[k]));
                        }
                        p += V * L;
                        row += period_rows;
                    }
                }
                (p, row)
            }

            /// Rows of `V` whole vectors: `c`'s vectors stay in registers,
            /// each row is one broadcast, `V` multiplies and `V` unaligned
            /// stores.
            ///
            /// # Safety
            /// As the kernel's, with `n == V * L`.
            #[target_feature(enable = "avx2")]
            unsafe fn in_registers<const V: usize>(
                a: &[$t],
                a_offs: &[isize],
                c: &[$t],
                c_offs: &[isize],
                m: usize,
                out: *mut $t,
            ) {
                use std::arch::x86_64::*;
                let n = V * L;
                for (b, (&ao, &co)) in a_offs.iter().zip(c_offs).enumerate() {
                    // SAFETY: rows ao..ao + m of a, columns co..co + n of c and
                    // the m * n block lie in their slices (the caller's
                    // contract).
                    unsafe {
                        let (pa, pc) = (a.as_ptr().offset(ao), c.as_ptr().offset(co));
                        let block = out.add(b * m * n);
                        let cv: [$vec; V] = std::array::from_fn(|v| $loadu(pc.add(v * L)));
                        for i in 0..m {
                            let s = $set1(*pa.add(i));
                            let row = block.add(i * n);
                            for (v, c) in cv.iter().enumerate() {
                                $storeu(row.add(v * L), $mul(s, *c));
                            }
                        }
                    }
                }
            }

            /// The periodic path (see the module doc) of the same call.
            ///
            /// # Safety
            /// As the kernel's, and `periodic(n, L)`.
            #[target_feature(enable = "avx2")]
            unsafe fn periodic_run(
                a: &[$t],
                a_offs: &[isize],
                c: &[$t],
                c_offs: &[isize],
                m: usize,
                n: usize,
                out: *mut $t,
            ) {
                use std::arch::x86_64::*;
                let run = m * n;
                let vectors = n / gcd(n, L);
                let period_rows = L / gcd(n, L);
                // by the phase of the first aligned vector (its run position < L)
                let mut periods: [Option<Period>; L] = [const { None }; L];
                let mut c_rep: [$t; 4 * L * L] = [0.0; 4 * L * L];
                for (b, (&ao, &co)) in a_offs.iter().zip(c_offs).enumerate() {
                    // SAFETY (whole block): rows ao..ao + m of a, columns
                    // co..co + n of c and the m * n block lie in their slices
                    // (the caller's contract). A period's vector of a starts at
                    // a row below m and loads through a mask that stops at m;
                    // the lanes it uses are rows of positions below `run`.
                    // Stores stay inside the run: the last vector is masked,
                    // and the head (before the first aligned vector) is scalar.
                    unsafe {
                        let (pa, pc) = (a.as_ptr().offset(ao), c.as_ptr().offset(co));
                        let block = out.add(b * run);
                        let start = super::to_boundary(block, 32).min(run);
                        for q in 0..start {
                            *block.add(q) = *pa.add(q / n) * *pc.add(q % n);
                        }
                        let pat = periods[start].get_or_insert_with(|| Period::new(n, L, start % n));
                        for (r, &j) in c_rep.iter_mut().zip(&pat.cols[..vectors * L]) {
                            *r = *pc.add(j as usize);
                        }
                        let (mut p, mut row) = (start, start / n);
                        // whole periods (no bound checks), then the last one's vectors
                        let whole = (run - start) / (vectors * L);
                        let rows = &pat.rows[..vectors];
                        let c_rep = c_rep.as_ptr();
                        let step = (pa, m, block, period_rows);
                        // n / gcd(n, L) is odd (L is a power of two) and below
                        // 2 L (n < 4 L, gcd >= 2): 1 to 15
                        (p, row) = match vectors {
                            1 => whole_periods::<1>(step, rows, c_rep, p, row, whole),
                            3 => whole_periods::<3>(step, rows, c_rep, p, row, whole),
                            5 => whole_periods::<5>(step, rows, c_rep, p, row, whole),
                            7 => whole_periods::<7>(step, rows, c_rep, p, row, whole),
                            9 => whole_periods::<9>(step, rows, c_rep, p, row, whole),
                            11 => whole_periods::<11>(step, rows, c_rep, p, row, whole),
                            13 => whole_periods::<13>(step, rows, c_rep, p, row, whole),
                            _ => whole_periods::<15>(step, rows, c_rep, p, row, whole),
                        };
                        if p < run {
                            let av = $to_ps($maskload(pa.add(row), $mask((m - row).min(L))));
                            for (k, idx) in rows.iter().enumerate() {
                                if p >= run {
                                    break;
                                }
                                let v = $mul($from_ps(_mm256_permutevar8x32_ps(av, *idx)), $loadu(c_rep.add(k * L)));
                                if p + L <= run {
                                    $storeu(block.add(p), v);
                                } else {
                                    $maskstore(block.add(p), $mask(run - p), v);
                                }
                                p += L;
                            }
                        }
                    }
                }
            }
        }
    };
}

outer_avx2!(
    outer_f32,
    f32,
    __m256,
    8,
    _mm256_set1_ps,
    _mm256_mul_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_maskload_ps,
    _mm256_maskstore_ps,
    _mm256_blendv_ps,
    _mm256_castsi256_ps,
    mask32,
    identity_ps,
    identity_ps
);
outer_avx2!(
    outer_f64,
    f64,
    __m256d,
    4,
    _mm256_set1_pd,
    _mm256_mul_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_maskload_pd,
    _mm256_maskstore_pd,
    _mm256_blendv_pd,
    _mm256_castsi256_pd,
    mask64,
    _mm256_castpd_ps,
    _mm256_castps_pd
);

#[inline(always)]
fn identity_ps(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    x
}
