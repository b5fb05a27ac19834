//! Packing a strided matrix into contiguous rows: the small-GEMM kernel
//! reads B row by row, so a transposed B (`B = W^T`, the backward product
//! of a dense layer, `dX = dY W^T`) is packed first.
//!
//! A transposed B has contiguous columns (`rs == 1`): it is packed in 8 x 8
//! (4-byte elements) or 4 x 4 (8-byte elements) blocks, each read as rows
//! of the source, transposed in registers (AVX unpacks, shuffles and lane
//! permutes: moves only, so the bits are kept, NaN payloads included) and
//! stored as rows of the packed matrix. Edges and other strides are
//! copied element by element. 64 x 64 f32 in a warm loop: about 0.3 us
//! against about 5 us for the element-by-element copy in row order (one
//! strided read per element).

/// `dst[p * n + j] = src[p * rs + j * cs]` for `p < k`, `j < n`.
///
/// # Safety
/// Every `src[p * rs + j * cs]` is readable and `dst` holds `k * n`
/// writable elements; on x86_64 the CPU supports AVX.
pub(crate) unsafe fn pack_rows<T: Copy>(src: *const T, rs: isize, cs: isize, k: usize, n: usize, dst: *mut T) {
    #[cfg(target_arch = "x86_64")]
    if rs == 1 {
        let size = std::mem::size_of::<T>();
        if size == 4 {
            // SAFETY: the caller's contract (AVX included); 4-byte elements
            // are moved as f32 bit patterns (no arithmetic).
            unsafe { by_blocks(src as *const f32, cs, k, n, dst as *mut f32, 8, block_f32) };
            return;
        }
        if size == 8 {
            // SAFETY: as above, as f64 bit patterns.
            unsafe { by_blocks(src as *const f64, cs, k, n, dst as *mut f64, 4, block_f64) };
            return;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { copy_block(src, rs, cs, 0..k, 0..n, n, dst) };
}

/// The elements `p` in `ps`, `j` in `js` of [`pack_rows`], one by one
/// (`j` innermost: the packed rows are written in order).
///
/// # Safety
/// As [`pack_rows`]'s for these elements.
unsafe fn copy_block<T: Copy>(
    src: *const T,
    rs: isize,
    cs: isize,
    ps: std::ops::Range<usize>,
    js: std::ops::Range<usize>,
    n: usize,
    dst: *mut T,
) {
    for p in ps {
        for j in js.clone() {
            // SAFETY: the caller's contract.
            unsafe { *dst.add(p * n + j) = *src.offset(p as isize * rs + j as isize * cs) };
        }
    }
}

/// [`pack_rows`] with `rs == 1` in `t x t` blocks, each packed by
/// `block(src, cs, dst, n)` (block rows `j` of the source at `src + j cs`,
/// packed rows `p` at `dst + p n`); the edges element by element.
///
/// # Safety
/// As [`pack_rows`]'s, with `rs == 1`; `block` may be called under it for
/// any `t x t` block inside the matrix.
#[cfg(target_arch = "x86_64")]
unsafe fn by_blocks<T: Copy>(
    src: *const T,
    cs: isize,
    k: usize,
    n: usize,
    dst: *mut T,
    t: usize,
    block: unsafe fn(*const T, isize, *mut T, usize),
) {
    let (kb, nb) = (k - k % t, n - n % t);
    for j0 in (0..nb).step_by(t) {
        for p0 in (0..kb).step_by(t) {
            // SAFETY: source columns j0..j0 + t hold elements p0..p0 + t of
            // B's rows (p0 + t <= k); packed rows p0..p0 + t hold columns
            // j0..j0 + t (j0 + t <= n).
            unsafe { block(src.offset(j0 as isize * cs + p0 as isize), cs, dst.add(p0 * n + j0), n) };
        }
    }
    // SAFETY: the caller's contract, for the edges.
    unsafe {
        copy_block(src, 1, cs, kb..k, 0..n, n, dst);
        copy_block(src, 1, cs, 0..kb, nb..n, n, dst);
    }
}

/// One 8 x 8 block of 4-byte elements: 8 source rows `cs` apart
/// transposed into 8 packed rows `n` apart.
///
/// # Safety
/// The block's elements are readable and writable there; AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn block_f32(src: *const f32, cs: isize, dst: *mut f32, n: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.offset(i as isize * cs)));
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        // per 128-bit lane: columns 0 and 4, 1 and 5, 2 and 6, 3 and 7 of
        // rows 0-3 (s0-s3) and rows 4-7 (s4-s7)
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let cols = [
            _mm256_permute2f128_ps::<0x20>(s0, s4),
            _mm256_permute2f128_ps::<0x20>(s1, s5),
            _mm256_permute2f128_ps::<0x20>(s2, s6),
            _mm256_permute2f128_ps::<0x20>(s3, s7),
            _mm256_permute2f128_ps::<0x31>(s0, s4),
            _mm256_permute2f128_ps::<0x31>(s1, s5),
            _mm256_permute2f128_ps::<0x31>(s2, s6),
            _mm256_permute2f128_ps::<0x31>(s3, s7),
        ];
        for (i, c) in cols.iter().enumerate() {
            _mm256_storeu_ps(dst.add(i * n), *c);
        }
    }
}

/// One 4 x 4 block of 8-byte elements, as [`block_f32`].
///
/// # Safety
/// As [`block_f32`]'s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn block_f64(src: *const f64, cs: isize, dst: *mut f64, n: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let r: [__m256d; 4] = std::array::from_fn(|i| _mm256_loadu_pd(src.offset(i as isize * cs)));
        let t0 = _mm256_unpacklo_pd(r[0], r[1]);
        let t1 = _mm256_unpackhi_pd(r[0], r[1]);
        let t2 = _mm256_unpacklo_pd(r[2], r[3]);
        let t3 = _mm256_unpackhi_pd(r[2], r[3]);
        let cols = [
            _mm256_permute2f128_pd::<0x20>(t0, t2),
            _mm256_permute2f128_pd::<0x20>(t1, t3),
            _mm256_permute2f128_pd::<0x31>(t0, t2),
            _mm256_permute2f128_pd::<0x31>(t1, t3),
        ];
        for (i, c) in cols.iter().enumerate() {
            _mm256_storeu_pd(dst.add(i * n), *c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block and edge of `pack_rows` for each stride kind, against
    /// the definition, bit for bit (NaN payloads included).
    fn check<T: Copy + PartialEq + std::fmt::Debug>(from_bits: impl Fn(u64) -> T) {
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("avx") {
            eprintln!("skipped: no AVX on this CPU");
            return;
        }
        for &(k, n) in &[(1, 1), (8, 8), (16, 24), (13, 9), (7, 17), (64, 64), (10, 64), (64, 10), (3, 2)] {
            let len = k * n + 7;
            let src: Vec<T> = (0..len as u64).map(|i| from_bits(0x7fc0_0001 + i * 3)).collect();
            for (rs, cs) in [(1, k as isize + 2), (1, k as isize), (n as isize, 1), (2 * n as isize, 2)] {
                let needed = (k as isize - 1) * rs + (n as isize - 1) * cs + 1;
                if needed as usize > len {
                    continue;
                }
                let mut dst = vec![from_bits(0); k * n];
                // SAFETY: every addressed source element is below `needed`
                // <= len; dst holds k n; AVX was checked above.
                unsafe { pack_rows(src.as_ptr(), rs, cs, k, n, dst.as_mut_ptr()) };
                for p in 0..k {
                    for j in 0..n {
                        let want = src[(p as isize * rs + j as isize * cs) as usize];
                        assert_eq!(dst[p * n + j], want, "k {k} n {n} rs {rs} cs {cs}: [{p}, {j}]");
                    }
                }
            }
        }
    }

    #[test]
    fn packs_every_block_and_edge() {
        check::<u32>(|b| b as u32);
        check::<u64>(|b| b | (b << 32));
    }
}
