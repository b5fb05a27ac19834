//! The small-GEMM kernel of [`super::small_gemm`] for CPUs with AVX2 and
//! FMA but no AVX-512 (AMD Zen 1-3, Intel client cores).
//!
//! Same scheme as the AVX-512 kernel: a block of up to `ROW_BLOCK` rows of
//! C by up to two vectors of columns lives in registers (6 x 2 = 12 of the
//! 16 ymm registers, BLIS's Haswell shape) while `k` runs, each step
//! loading one row of B and broadcasting one element of A per row. Every
//! element is the same chain `acc = fma(a[i, p], b[p, j], acc)` from
//! `acc = 0` over `p = 0..k` as in the AVX-512 kernel, so both kernels
//! give the same bits, and any split of the rows gives the same bits.
//! The last vector of a panel narrower than two vectors is loaded and
//! stored through a lane mask (`vmaskmov`: masked-off lanes are not
//! accessed); full vectors go through plain loads and stores.

use super::small_gemm::for_blocks;

/// `-1` in the first `L` lanes, then zeros: `mask(len)` loads the window
/// starting `L - len` in (`len <= L`).
#[cfg(target_arch = "x86_64")]
static MASK_I32: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
#[cfg(target_arch = "x86_64")]
static MASK_I64: [i64; 8] = [-1, -1, -1, -1, 0, 0, 0, 0];

/// Lanes `0..len` of an f32 vector (`len <= 8`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn mask32(len: usize) -> std::arch::x86_64::__m256i {
    debug_assert!(len <= 8);
    // SAFETY: 8 - len..16 - len lies inside the 16-element table; the
    // load is unaligned and needs only AVX (callers run under AVX2).
    unsafe { std::arch::x86_64::_mm256_loadu_si256(MASK_I32.as_ptr().add(8 - len) as *const _) }
}

/// Lanes `0..len` of an f64 vector (`len <= 4`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn mask64(len: usize) -> std::arch::x86_64::__m256i {
    debug_assert!(len <= 4);
    // SAFETY: 4 - len..8 - len lies inside the 8-element table.
    unsafe { std::arch::x86_64::_mm256_loadu_si256(MASK_I64.as_ptr().add(4 - len) as *const _) }
}

/// The micro-kernel and the driver for one element width.
macro_rules! small_gemm_avx2 {
    ($gemm:ident, $micro:ident, $t:ty, $lanes:expr, $vec:ty, $set1:ident, $fmadd:ident, $loadu:ident,
     $storeu:ident, $maskload:ident, $maskstore:ident, $zero:ident, $mask:ident) => {
        /// Rows `0..MR` of C (at `c`, row stride `ldc`) by `NV` vectors of
        /// columns; with `MASKED`, the last vector holds only `tail` lanes.
        ///
        /// # Safety
        /// AVX2 and FMA are present; rows `0..MR` of A (`a_rs`, `a_cs`
        /// apart) over `p < k`, columns `0..(NV - 1) L + tail` of B's rows
        /// `p < k` (`b_rs` apart) and the same block of C are accessible.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $micro<const MR: usize, const NV: usize, const MASKED: bool>(
            a: *const $t,
            a_rs: isize,
            a_cs: isize,
            b: *const $t,
            b_rs: isize,
            k: usize,
            c: *mut $t,
            ldc: usize,
            tail: usize,
        ) {
            use std::arch::x86_64::*;
            const L: usize = $lanes;
            let last = $mask(tail);
            let mut acc: [[$vec; NV]; MR] = [[$zero(); NV]; MR];
            // SAFETY: the caller vouches for rows 0..MR of A over p < k, the
            // (masked) columns of B's rows p < k, and C's block.
            unsafe {
                for p in 0..k {
                    let bp = b.offset(p as isize * b_rs);
                    let mut bv: [$vec; NV] = [$zero(); NV];
                    for v in 0..NV {
                        bv[v] =
                            if MASKED && v == NV - 1 { $maskload(bp.add(v * L), last) } else { $loadu(bp.add(v * L)) };
                    }
                    let ap = a.offset(p as isize * a_cs);
                    for r in 0..MR {
                        let av = $set1(*ap.offset(r as isize * a_rs));
                        for v in 0..NV {
                            acc[r][v] = $fmadd(av, bv[v], acc[r][v]);
                        }
                    }
                }
                for r in 0..MR {
                    for v in 0..NV {
                        let at = c.add(r * ldc + v * L);
                        if MASKED && v == NV - 1 {
                            $maskstore(at, last, acc[r][v]);
                        } else {
                            $storeu(at, acc[r][v]);
                        }
                    }
                }
            }
        }

        /// `c[i * n + j] = sum_p a[i * a_rs + p * a_cs] * b[p * b_rs + j]`.
        ///
        /// # Safety
        /// AVX2 and FMA are present; the elements of A and B addressed for
        /// `i < m`, `p < k`, `j < n` are readable; `c` holds `m * n`
        /// writable elements; `k >= 1`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) unsafe fn $gemm(
            a: *const $t,
            a_rs: isize,
            a_cs: isize,
            b: *const $t,
            b_rs: isize,
            m: usize,
            k: usize,
            n: usize,
            c: *mut $t,
        ) {
            const L: usize = $lanes;
            for_blocks(m, n, 2 * L, |i0, mr, j0, width| {
                let (nv, tail) = (width.div_ceil(L), width - (width.div_ceil(L) - 1) * L);
                let masked = tail < L;
                // SAFETY: block rows i0..i0 + mr and columns j0..j0 + width
                // are inside the caller's m x n product.
                unsafe {
                    let (ab, bb, cb) = (a.offset(i0 as isize * a_rs), b.add(j0), c.add(i0 * n + j0));
                    macro_rules! call {
                        ($mr:literal) => {
                            match (nv, masked) {
                                (1, false) => $micro::<$mr, 1, false>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, tail),
                                (1, true) => $micro::<$mr, 1, true>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, tail),
                                (_, false) => $micro::<$mr, 2, false>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, tail),
                                (_, true) => $micro::<$mr, 2, true>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, tail),
                            }
                        };
                    }
                    match mr {
                        6 => call!(6),
                        4 => call!(4),
                        2 => call!(2),
                        _ => call!(1),
                    }
                }
            });
        }
    };
}

small_gemm_avx2!(
    gemm_f32,
    micro_f32,
    f32,
    8,
    __m256,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_maskload_ps,
    _mm256_maskstore_ps,
    _mm256_setzero_ps,
    mask32
);
small_gemm_avx2!(
    gemm_f64,
    micro_f64,
    f64,
    4,
    __m256d,
    _mm256_set1_pd,
    _mm256_fmadd_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_maskload_pd,
    _mm256_maskstore_pd,
    _mm256_setzero_pd,
    mask64
);
