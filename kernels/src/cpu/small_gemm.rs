//! Unpacked, register-blocked GEMM for small products (AVX-512, or AVX2
//! and FMA: `small_gemm_avx2`, the same bits).
//!
//! faer's GEMM packs both operands and pays a fixed cost per call, which
//! dominates products like the 64 x 64 x 10 layers of a small MLP. Here
//! `C = A @ B` is computed straight from the operands: a block of up to 6
//! rows of C by up to 4 vectors of columns lives in registers while `k`
//! runs, each step loading one row of B and broadcasting one element of A
//! per row. B's rows must be contiguous
//! (a transposed B is packed first: `cpu/pack.rs`); A may have any strides.

use std::mem::MaybeUninit;

/// The most rows of C a micro-kernel call computes (every row's sums run
/// over `k` in the same order whatever the block, so a product split at a
/// multiple of this is computed in the same blocks).
pub const ROW_BLOCK: usize = 6;

/// Tiles an `m x n` product for the micro-kernels: panels of `panel`
/// columns, each in blocks of `ROW_BLOCK` rows, then 4, 2 or 1 (the
/// kernels' instances); calls `block(i0, rows, j0, width)` for each.
#[inline(always)]
pub(crate) fn for_blocks(m: usize, n: usize, panel: usize, mut block: impl FnMut(usize, usize, usize, usize)) {
    let mut j0 = 0;
    while j0 < n {
        let width = (n - j0).min(panel);
        let mut i0 = 0;
        while i0 < m {
            let rows = match m - i0 {
                r if r >= ROW_BLOCK => ROW_BLOCK,
                4.. => 4,
                2.. => 2,
                _ => 1,
            };
            block(i0, rows, j0, width);
            i0 += rows;
        }
        j0 += panel;
    }
}

/// Largest `m * n * k` sent here rather than to faer (above it, packing
/// pays for itself).
pub const SMALL_GEMM_MAX: usize = 1 << 18;

/// Element types with a direct small-GEMM kernel.
pub trait SmallGemmElem: Copy + Default + Send + Sync + 'static {
    /// `c[i * n + j] = sum_p a[i * a_rs + p * a_cs] * b[p * b_rs + j]`.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; every element addressed through `a` and
    /// `b` for `i < m`, `p < k`, `j < n` is readable; `c` holds `m * n`
    /// writable elements.
    #[allow(clippy::too_many_arguments)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn gemm_avx512(
        a: *const Self,
        a_rs: isize,
        a_cs: isize,
        b: *const Self,
        b_rs: isize,
        m: usize,
        k: usize,
        n: usize,
        c: *mut Self,
    );

    /// As [`SmallGemmElem::gemm_avx512`], with AVX2 and FMA: the same bits.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; otherwise as `gemm_avx512`, and
    /// `k >= 1`.
    #[allow(clippy::too_many_arguments)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn gemm_avx2(
        a: *const Self,
        a_rs: isize,
        a_cs: isize,
        b: *const Self,
        b_rs: isize,
        m: usize,
        k: usize,
        n: usize,
        c: *mut Self,
    );
}

/// Whether this CPU runs the direct kernel (AVX-512F, or AVX2 and FMA).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::has_avx512f() || super::avx2()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Largest `k * n` of a B with strided columns that is packed for the
/// direct kernel (`cpu/pack.rs`); larger ones go to faer. On a Zen 3 core
/// (AVX2) in a warm loop, B transposed, direct with packing against faer:
/// 32 x 64 x 64 3.42 against 3.45 us, 64 x 64 x 64 5.80 against 6.27 us,
/// 2 x 64 x 64 1.22 against 1.54 us, 32 x 10 x 64 0.67 against 0.91 us
/// (with the former element-by-element packing, 32 x 64 x 64 took 8.8 us).
const PACK_B_MAX: usize = 4096;

/// Whether [`gemm_direct`] takes a product of these sizes and B column
/// stride (else the caller uses faer). Not for k = 0 (faer writes the
/// zeros) nor a matrix-vector product
/// (`n == 1`): the kernel vectorizes along n, and faer's own matvec path is
/// 3.5x faster there (256 x 256: 4.1 against 14.3 us); from n = 2 on, the
/// direct kernel was as fast or faster at every size measured up to
/// `SMALL_GEMM_MAX` (64^3: 2.8 us both in a warm loop, 3.2 against 4.1 us
/// as an op; 64 x 64 x 10: 1.0 against 1.3 us).
pub fn takes(m: usize, k: usize, n: usize, b_cs: isize) -> bool {
    k >= 1 && n >= 2 && m * n * k <= SMALL_GEMM_MAX && (b_cs == 1 || k * n <= PACK_B_MAX) && available()
}

/// `dst = A @ B` (row-major `m x n`) for `A[i, p] = a[a_off + i a_rs + p a_cs]`
/// and `B[p, j] = b[b_off + p b_rs + j b_cs]`; a B with strided columns is
/// packed first. Call it only when [`takes`] is true.
///
/// # Safety
/// Every element addressed through the offsets and strides for `i < m`,
/// `p < k`, `j < n` lies inside `a` and `b`, `dst.len() == m * n`, and
/// [`available`] is true.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_direct<T: SmallGemmElem>(
    a: &[T],
    a_off: isize,
    a_rs: isize,
    a_cs: isize,
    b: &[T],
    b_off: isize,
    b_rs: isize,
    b_cs: isize,
    m: usize,
    k: usize,
    n: usize,
    dst: &mut [MaybeUninit<T>],
) {
    debug_assert_eq!(dst.len(), m * n);
    debug_assert!(available());
    #[cfg(target_arch = "x86_64")]
    {
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            // An empty sum; the kernel's block pointers would step past
            // empty operands.
            dst.iter_mut().for_each(|d| {
                d.write(T::default());
            });
            return;
        }
        let mut packed: Vec<T> = Vec::new();
        let (bp, b_rs) = if b_cs == 1 {
            (b.as_ptr().wrapping_offset(b_off), b_rs)
        } else {
            packed.reserve_exact(k * n);
            // SAFETY: B[p, j] lies inside b (the caller's contract); packed
            // has room for k * n elements, all written before `set_len`;
            // `available` implies AVX.
            unsafe {
                super::pack::pack_rows(b.as_ptr().wrapping_offset(b_off), b_rs, b_cs, k, n, packed.as_mut_ptr());
                packed.set_len(k * n);
            }
            (packed.as_ptr(), n as isize)
        };
        let (ap, cp) = (a.as_ptr().wrapping_offset(a_off), dst.as_mut_ptr() as *mut T);
        if super::has_avx512f() {
            // SAFETY: AVX-512F is present; the caller vouches for the
            // elements of A and of B (or B was packed into `packed`, k x n
            // contiguous), and dst holds m * n elements.
            unsafe { T::gemm_avx512(ap, a_rs, a_cs, bp, b_rs, m, k, n, cp) };
        } else {
            // SAFETY: as above; without AVX-512F, `available` (the caller's
            // contract) means AVX2 and FMA; k >= 1 here.
            unsafe { T::gemm_avx2(ap, a_rs, a_cs, bp, b_rs, m, k, n, cp) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs, k);
        unreachable!("gemm_direct without a direct kernel");
    }
}

/// The micro-kernel of `MR` rows by `NV` vectors of columns, the driver
/// tiling C with it, and the element's `SmallGemmElem` impl, for one width.
macro_rules! small_gemm {
    ($gemm:ident, $micro:ident, $gemm2:path, $t:ty, $lanes:expr, $mask:ty, $set1:ident, $fmadd:ident, $maskz_loadu:ident,
     $mask_storeu:ident, $zero:ident) => {
        /// Rows `0..MR` of C (at `c`, row stride `ldc`) by `NV` vectors of
        /// columns, the last ones limited by `masks`.
        ///
        /// # Safety
        /// As for `gemm_avx512`, restricted to this block.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $micro<const MR: usize, const NV: usize>(
            a: *const $t,
            a_rs: isize,
            a_cs: isize,
            b: *const $t,
            b_rs: isize,
            k: usize,
            c: *mut $t,
            ldc: usize,
            masks: [$mask; 4],
        ) {
            use std::arch::x86_64::*;
            const L: usize = $lanes;
            let mut acc = [[$zero(); NV]; MR];
            // SAFETY: the caller vouches for rows 0..MR of A over p < k, the
            // masked columns of B's rows p < k, and C's block.
            unsafe {
                for p in 0..k {
                    let bp = b.offset(p as isize * b_rs);
                    let mut bv = [$zero(); NV];
                    for v in 0..NV {
                        bv[v] = $maskz_loadu(masks[v], bp.add(v * L));
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
                        $mask_storeu(c.add(r * ldc + v * L), masks[v], acc[r][v]);
                    }
                }
            }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $gemm(
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
            for_blocks(m, n, 4 * L, |i0, mr, j0, width| {
                let masks: [$mask; 4] = std::array::from_fn(|v| {
                    let lanes = width.saturating_sub(v * L).min(L);
                    ((1u32 << lanes) - 1) as $mask
                });
                // SAFETY: block rows i0..i0 + mr and columns j0..j0 + width
                // are inside the caller's m x n product.
                unsafe {
                    let (ab, bb, cb) = (a.offset(i0 as isize * a_rs), b.add(j0), c.add(i0 * n + j0));
                    macro_rules! call {
                        ($mr:literal) => {
                            match width.div_ceil(L) {
                                1 => $micro::<$mr, 1>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, masks),
                                2 => $micro::<$mr, 2>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, masks),
                                3 => $micro::<$mr, 3>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, masks),
                                _ => $micro::<$mr, 4>(ab, a_rs, a_cs, bb, b_rs, k, cb, n, masks),
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

        impl SmallGemmElem for $t {
            #[cfg(target_arch = "x86_64")]
            unsafe fn gemm_avx512(
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
                // SAFETY: forwarded contract.
                unsafe { $gemm(a, a_rs, a_cs, b, b_rs, m, k, n, c) }
            }

            #[cfg(target_arch = "x86_64")]
            unsafe fn gemm_avx2(
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
                // SAFETY: forwarded contract.
                unsafe { $gemm2(a, a_rs, a_cs, b, b_rs, m, k, n, c) }
            }
        }
    };
}

small_gemm!(
    gemm_f32,
    micro_f32,
    super::small_gemm_avx2::gemm_f32,
    f32,
    16,
    u16,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_maskz_loadu_ps,
    _mm512_mask_storeu_ps,
    _mm512_setzero_ps
);
small_gemm!(
    gemm_f64,
    micro_f64,
    super::small_gemm_avx2::gemm_f64,
    f64,
    8,
    u8,
    _mm512_set1_pd,
    _mm512_fmadd_pd,
    _mm512_maskz_loadu_pd,
    _mm512_mask_storeu_pd,
    _mm512_setzero_pd
);

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: SmallGemmElem + Into<f64>>(from: impl Fn(f64) -> T, tol: f64) {
        if !available() {
            eprintln!("skipped: neither AVX-512 nor AVX2 and FMA on this CPU");
            return;
        }
        let shapes = [
            (1, 1, 1),
            (1, 7, 1),
            (5, 3, 17),
            (6, 10, 64),
            (64, 64, 10),
            (64, 10, 64),
            (13, 33, 70),
            (7, 2, 129),
            (64, 32, 64),
        ];
        for &(m, k, n) in &shapes {
            for &(a_t, b_t) in &[(false, false), (true, false), (false, true), (true, true)] {
                let a: Vec<T> = (0..m * k + 3).map(|i| from(((i * 7) % 11) as f64 * 0.25 - 1.0)).collect();
                let b: Vec<T> = (0..k * n + 5).map(|i| from(((i * 5) % 13) as f64 * 0.125 - 0.5)).collect();
                let (a_rs, a_cs) = if a_t { (1, m as isize) } else { (k as isize, 1) };
                let (b_rs, b_cs) = if b_t { (1, k as isize) } else { (n as isize, 1) };
                let mut dst = vec![MaybeUninit::<T>::uninit(); m * n];
                // SAFETY: offsets 3 and 5 plus the strided extents stay in
                // a (m k + 3) and b (k n + 5); available() was checked.
                unsafe { gemm_direct(&a, 3, a_rs, a_cs, &b, 5, b_rs, b_cs, m, k, n, &mut dst) };
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|p| {
                                let x: f64 = a[(3 + i as isize * a_rs + p as isize * a_cs) as usize].into();
                                let y: f64 = b[(5 + p as isize * b_rs + j as isize * b_cs) as usize].into();
                                x * y
                            })
                            .sum();
                        // SAFETY: gemm_direct wrote all m * n elements.
                        let got: f64 = unsafe { dst[i * n + j].assume_init() }.into();
                        assert!(
                            (got - want).abs() <= tol * (1.0 + want.abs()),
                            "{m}x{k}x{n} a_t {a_t} b_t {b_t} [{i},{j}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn small_products_match_naive_for_every_block_shape() {
        check::<f32>(|v| v as f32, 1e-5);
        check::<f64>(|v| v, 1e-12);
    }

    /// The AVX2 kernel gives the dispatched kernel's bits (on an AVX-512
    /// CPU: the AVX-512 kernel's), at every block shape and panel tail.
    #[cfg(target_arch = "x86_64")]
    fn avx2_bits<T: SmallGemmElem + PartialEq + std::fmt::Debug>(from: impl Fn(f64) -> T) {
        for &(m, k, n) in &[(1, 1, 1), (7, 3, 5), (6, 10, 64), (64, 64, 10), (13, 33, 70), (11, 17, 9), (5, 2, 31)] {
            let a: Vec<T> = (0..m * k).map(|i| from((((i * 7919) % 1000) as f64 - 500.0) / 37.0)).collect();
            let b: Vec<T> = (0..k * n).map(|i| from((((i * 104729) % 1000) as f64 - 500.0) / 53.0)).collect();
            let mut want = vec![MaybeUninit::<T>::uninit(); m * n];
            let mut got = vec![T::default(); m * n];
            // SAFETY: contiguous a (m x k) and b (k x n), dst m x n; both
            // kernels were checked available, and k >= 1.
            unsafe {
                gemm_direct(&a, 0, k as isize, 1, &b, 0, n as isize, 1, m, k, n, &mut want);
                T::gemm_avx2(a.as_ptr(), k as isize, 1, b.as_ptr(), n as isize, m, k, n, got.as_mut_ptr());
            }
            // SAFETY: gemm_direct wrote all m * n elements.
            let want: Vec<T> = want.into_iter().map(|w| unsafe { w.assume_init() }).collect();
            assert_eq!(got, want, "{m}x{k}x{n}");
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_kernel_gives_the_same_bits() {
        if !crate::cpu::avx2() {
            eprintln!("skipped: no AVX2 and FMA on this CPU");
            return;
        }
        avx2_bits::<f32>(|v| v as f32);
        avx2_bits::<f64>(|v| v);
    }
}
