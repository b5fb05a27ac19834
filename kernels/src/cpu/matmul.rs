//! Batched matrix products `out[b] = a[b] @ b[b]` over strided 3-d operands
//! `a: [B, M, K]`, `b: [B, K, N]`, out `[B, M, N]` row-major.
//!
//! f32 and f64 use the operands' own strides (transposed views cost
//! nothing): outer products (k = 1) go to `outer`, small products to
//! `small_gemm` (both AVX-512), the rest to faer's GEMM. f16 and bf16
//! compute in f32 and round; integers use a plain triple loop. Callers fold
//! a batch whose other operand is shared into M (one GEMM instead of B).

use super::elementwise::map1;
use super::small_gemm;
use super::Par;
use crate::dtype::Float;
use crate::layout::{Layout, Shape};
use faer::{Accum, MatMut, MatRef};

/// Below this many multiply-adds per product, batched GEMMs run one per
/// rayon task instead of each splitting itself.
const SMALL_GEMM: usize = 1 << 18;

/// Below this many multiply-adds in all, everything stays on one thread
/// (about 40 us of work: waking the pool costs 25-30 us on the target).
const PAR_GEMM_MIN: usize = 1 << 21;

/// A band of output rows per thread needs at least this many rows (a few
/// of faer's 12- and 24-row register tiles) to be worth its own packing.
const MIN_BAND_ROWS: usize = 64;

fn dims(la: &Layout, lb: &Layout) -> (usize, usize, usize, usize) {
    debug_assert_eq!(la.rank(), 3);
    debug_assert_eq!(lb.rank(), 3);
    (la.shape[0], la.shape[1], la.shape[2], lb.shape[2])
}

/// An element faer multiplies natively.
pub trait FaerElem:
    faer::traits::ComplexField
    + super::outer::OuterElem
    + super::small_gemm::SmallGemmElem
    + Copy
    + Send
    + Sync
    + Default
    + 'static
{
}
/// Re-exported so callers can name the faer element bound.
pub use num_one::One;
impl FaerElem for f32 {}
impl FaerElem for f64 {}

/// One operand of a batched product: per batch entry an element offset,
/// and the row and column strides of the matrix at that offset.
#[derive(Clone, Debug)]
pub struct MatOperand {
    /// Element offset of each batch entry's matrix.
    pub offsets: Vec<isize>,
    /// Stride between rows.
    pub row_stride: isize,
    /// Stride between columns.
    pub col_stride: isize,
}

impl MatOperand {
    /// The batch entries of a 3-d `[B, R, C]` layout.
    pub fn of_layout(l: &Layout) -> MatOperand {
        let b = l.shape[0];
        MatOperand {
            offsets: (0..b).map(|i| l.offset as isize + i as isize * l.strides[0]).collect(),
            row_stride: l.strides[1],
            col_stride: l.strides[2],
        }
    }
}

/// Batched GEMM for f32 / f64 through faer on 3-d layouts
/// `[B, M, K] @ [B, K, N]`.
pub fn gemm<T: FaerElem + num_one::One>(a: &[T], la: &Layout, b: &[T], lb: &Layout, par: Par) -> Vec<T> {
    let (_, m, k, n) = dims(la, lb);
    gemm_offsets(a, &MatOperand::of_layout(la), b, &MatOperand::of_layout(lb), m, k, n, par)
}

/// Batched GEMM: `out[i] = A_i @ B_i` with `A_i` (m x k) and
/// `B_i` (k x n) located by `ma` and `mb`; out is `[B, m, n]` row-major.
pub fn gemm_offsets<T: FaerElem + num_one::One>(
    a: &[T],
    ma: &MatOperand,
    b: &[T],
    mb: &MatOperand,
    m: usize,
    k: usize,
    n: usize,
    par: Par,
) -> Vec<T> {
    // Every kernel writes every output element and reads none (faer with
    // Accum::Replace by its documented contract), so the output can start
    // uninitialized.
    let mut out = crate::pool::alloc_uninit::<T>(ma.offsets.len() * m * n);
    gemm_offsets_into(a, ma, b, mb, m, k, n, par, &mut out);
    // SAFETY: gemm_offsets_into wrote every element.
    unsafe { crate::pool::assume_init(out) }
}

/// [`gemm_offsets`] into `out` (`[B, m, n]` row-major, every element
/// written, none read).
///
/// # Panics
/// If `out` does not hold `B * m * n` elements.
#[allow(clippy::too_many_arguments)]
pub fn gemm_offsets_into<T: FaerElem + num_one::One>(
    a: &[T],
    ma: &MatOperand,
    b: &[T],
    mb: &MatOperand,
    m: usize,
    k: usize,
    n: usize,
    par: Par,
    out: &mut [std::mem::MaybeUninit<T>],
) {
    let batch = ma.offsets.len();
    assert_eq!(out.len(), batch * m * n, "gemm_offsets_into: output of {} elements for {batch} x {m} x {n}", out.len());
    if out.is_empty() {
        return;
    }
    let per = m * n * k.max(1);
    let total = batch * per;
    let threads = super::threads();
    let par = if total < PAR_GEMM_MIN { Par::Seq } else { par };
    if k == 1 {
        outer_products(a, ma, b, mb, m, n, par, threads, out);
        return;
    }
    // Small products skip faer's packing and set-up (see small_gemm).
    let direct = small_gemm::takes(m, k, n, mb.col_stride);
    // Rows `r0..r0 + dst.len() / n` of product `bi` into `dst`.
    let run = |bi: usize, r0: usize, dst: &mut [std::mem::MaybeUninit<T>], inner: faer::Par| {
        let rows = dst.len() / n;
        let pa = ma.offsets[bi] + r0 as isize * ma.row_stride;
        let pb = mb.offsets[bi];
        if direct {
            // SAFETY: as for faer below; dst is rows x n; `takes` checked
            // that the kernel is available.
            unsafe {
                small_gemm::gemm_direct(
                    a,
                    pa,
                    ma.row_stride,
                    ma.col_stride,
                    b,
                    pb,
                    mb.row_stride,
                    mb.col_stride,
                    rows,
                    k,
                    n,
                    dst,
                )
            };
            return;
        }
        // SAFETY: the caller's operands address elements inside `a` and `b`
        // (they come from validated arrays), and rows `r0..r0 + rows` of
        // A_i are among them; `dst` is an exclusive, row-major rows x n
        // block. faer reads and writes nothing else.
        unsafe {
            let lhs =
                MatRef::<T>::from_raw_parts(a.as_ptr().wrapping_offset(pa), rows, k, ma.row_stride, ma.col_stride);
            let rhs = MatRef::<T>::from_raw_parts(b.as_ptr().wrapping_offset(pb), k, n, mb.row_stride, mb.col_stride);
            let dst = MatMut::<T>::from_raw_parts_mut(dst.as_mut_ptr() as *mut T, rows, n, n as isize, 1);
            faer::linalg::matmul::matmul(dst, Accum::Replace, lhs, rhs, T::one(), inner);
        }
    };
    use rayon::prelude::*;
    match par {
        // Enough independent products to keep every thread busy: one product
        // per task, each on one thread (never faer's rayon inside rayon).
        // (The direct kernel never splits itself, so its products go here.)
        Par::Rayon if batch >= 2 * threads || (batch > 1 && (per < SMALL_GEMM || direct)) => {
            out.par_chunks_mut(m * n).enumerate().for_each(|(bi, dst)| run(bi, 0, dst, faer::Par::Seq));
        }
        // Large products: each thread computes a contiguous band of output
        // rows with faer's sequential kernel. Measured on the 2-core target
        // (n = 1024 f64, interleaved with numpy): 82 GFLOP/s, 1.01x numpy,
        // per-run range 74-84; faer's own parallel GEMM gave 72-89 (0.97x),
        // and dropped furthest when other tenants loaded the machine: it
        // shares one L3-sized packed panel between threads and syncs them
        // per block, where the sequential kernel blocks for each core's L2.
        // More bands than threads lose to repacking (4: 0.96x, 8: 0.88x).
        // On the later AVX-512 target, f32: 255-265 GFLOP/s against faer's
        // parallel split's 200-211; a split into column bands tied.
        Par::Rayon if m >= MIN_BAND_ROWS * threads => {
            let band = m.div_ceil(threads);
            out.par_chunks_mut(m * n).enumerate().for_each(|(bi, prod)| {
                prod.par_chunks_mut(band * n).enumerate().for_each(|(j, dst)| run(bi, j * band, dst, faer::Par::Seq));
            });
        }
        // Few output rows: faer splits the product itself.
        Par::Rayon => {
            for (bi, dst) in out.chunks_mut(m * n).enumerate() {
                run(bi, 0, dst, faer::Par::rayon(0));
            }
        }
        Par::Seq => {
            for (bi, dst) in out.chunks_mut(m * n).enumerate() {
                run(bi, 0, dst, faer::Par::Seq);
            }
        }
    }
    // (faer or the direct kernel wrote every element of every m x n block;
    // faer: Accum::Replace, and zeros when k == 0)
}

/// One product on the calling thread into an `m x n` block of rows
/// `dst_rs` apart (columns contiguous): `dst = A @ B`, or `dst += A @ B`
/// when `accumulate`, for `A[i, p] = a[pa + i a_rs + p a_cs]` and
/// `B[p, j] = b[pb + p b_rs + j b_cs]`. A contiguous block that is replaced
/// goes to the small-product kernel where it takes the shape, the rest to
/// faer's sequential GEMM. Convolutions call this per unit of work, inside
/// their own rayon loops.
///
/// # Safety
/// Every element addressed through the offsets and strides for `i < m`,
/// `p < k`, `j < n` lies inside `a` and `b`; `dst` points at `m` rows of
/// `n` writable elements, `dst_rs >= n` apart, that nothing else accesses
/// during the call, initialized when `accumulate`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_block<T: FaerElem + num_one::One>(
    a: &[T],
    pa: isize,
    a_rs: isize,
    a_cs: isize,
    b: &[T],
    pb: isize,
    b_rs: isize,
    b_cs: isize,
    (m, k, n): (usize, usize, usize),
    dst: *mut T,
    dst_rs: usize,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if !accumulate && dst_rs == n && small_gemm::takes(m, k, n, b_cs) {
        // SAFETY: the caller's contract; the block is contiguous (dst_rs == n).
        unsafe {
            let block = std::slice::from_raw_parts_mut(dst as *mut std::mem::MaybeUninit<T>, m * n);
            small_gemm::gemm_direct(a, pa, a_rs, a_cs, b, pb, b_rs, b_cs, m, k, n, block);
        }
        return;
    }
    let accum = if accumulate { Accum::Add } else { Accum::Replace };
    // SAFETY: the caller's contract; faer reads and writes nothing else.
    unsafe {
        let lhs = MatRef::<T>::from_raw_parts(a.as_ptr().wrapping_offset(pa), m, k, a_rs, a_cs);
        let rhs = MatRef::<T>::from_raw_parts(b.as_ptr().wrapping_offset(pb), k, n, b_rs, b_cs);
        let out = MatMut::<T>::from_raw_parts_mut(dst, m, n, dst_rs as isize, 1);
        faer::linalg::matmul::matmul(out, accum, lhs, rhs, T::one(), faer::Par::Seq);
    }
}

/// The products of a GEMM with k = 1 (outer products) into `out`, through
/// [`outer_batched`](super::outer::outer_batched): one kernel call for all
/// of them rather than one faer rank-one update per product. Strided
/// vectors are packed first (`m + n` elements per product).
#[allow(clippy::too_many_arguments)]
fn outer_products<T: FaerElem>(
    a: &[T],
    ma: &MatOperand,
    c: &[T],
    mc: &MatOperand,
    m: usize,
    n: usize,
    par: Par,
    threads: usize,
    out: &mut [std::mem::MaybeUninit<T>],
) {
    use super::outer::outer_batched;
    use rayon::prelude::*;
    use std::borrow::Cow;
    // The column of A_i (stride row_stride) and the row of B_i (stride
    // col_stride) as contiguous vectors: the operands themselves (the
    // usual case, nothing copied) or packed.
    fn vectors<'s, T: Copy>(
        data: &'s [T],
        offsets: &'s [isize],
        stride: isize,
        len: usize,
    ) -> (Cow<'s, [T]>, Cow<'s, [isize]>) {
        if stride == 1 || len <= 1 {
            (Cow::Borrowed(data), Cow::Borrowed(offsets))
        } else {
            let mut packed = crate::pool::vec_with_capacity(offsets.len() * len);
            packed
                .extend(offsets.iter().flat_map(|&o| (0..len).map(move |i| data[(o + i as isize * stride) as usize])));
            (Cow::Owned(packed), (0..offsets.len()).map(|b| (b * len) as isize).collect())
        }
    }
    let (av, a_offs) = vectors(a, &ma.offsets, ma.row_stride, m);
    let (cv, c_offs) = vectors(c, &mc.offsets, mc.col_stride, n);
    let batch = a_offs.len();
    match par {
        // Whole products per task.
        Par::Rayon if batch >= threads => {
            let per_task = batch.div_ceil(4 * threads);
            out.par_chunks_mut(per_task * m * n).enumerate().for_each(|(t, dst)| {
                let bs = t * per_task..(t * per_task + dst.len() / (m * n));
                outer_batched(&av, &a_offs[bs.clone()], &cv, &c_offs[bs], m, n, dst);
            });
        }
        // A few large products: bands of rows per task.
        Par::Rayon => {
            let band = m.div_ceil(2 * threads);
            for (b, prod) in out.chunks_mut(m * n).enumerate() {
                prod.par_chunks_mut(band * n).enumerate().for_each(|(j, dst)| {
                    let rows = dst.len() / n;
                    outer_batched(&av, &[a_offs[b] + (j * band) as isize], &cv, &c_offs[b..b + 1], rows, n, dst);
                });
            }
        }
        Par::Seq => outer_batched(&av, &a_offs, &cv, &c_offs, m, n, out),
    }
}

/// Runs one small product through faer's packed GEMM path, which does
/// faer's process-wide set-up: it reads the cache hierarchy from sysfs
/// (about 90 files) and `/proc/cpuinfo`, about 1.5 ms on the target machine.
/// [`super::threads`] runs it on the pool once, in the background.
pub(crate) fn warm_up() {
    // Above faer's threshold for its unpacked small-matrix kernels (16^3
    // multiply-adds), so the packed path and its set-up run.
    const N: usize = 17;
    let a = [0.0f32; N * N];
    let mut out = [0.0f32; N * N];
    // SAFETY: three N x N row-major views of local arrays of N * N elements.
    unsafe {
        let lhs = MatRef::<f32>::from_raw_parts(a.as_ptr(), N, N, N as isize, 1);
        let dst = MatMut::<f32>::from_raw_parts_mut(out.as_mut_ptr(), N, N, N as isize, 1);
        faer::linalg::matmul::matmul(dst, Accum::Replace, lhs, lhs, 1.0f32, faer::Par::Seq);
    }
}

/// `1` for the faer element types.
pub mod num_one {
    /// The multiplicative identity.
    pub trait One {
        /// 1.
        fn one() -> Self;
    }
    impl One for f32 {
        fn one() -> Self {
            1.0
        }
    }
    impl One for f64 {
        fn one() -> Self {
            1.0
        }
    }
}

/// Batched GEMM for f16 / bf16: widen to f32, multiply, round once.
pub fn gemm_half<T: Float<Compute = f32>>(a: &[T], la: &Layout, b: &[T], lb: &Layout, par: Par) -> Vec<T> {
    let wa = map1(a, la, par, |v: T| v.up());
    let wb = map1(b, lb, par, |v: T| v.up());
    let ca = Layout::contiguous(la.shape.clone());
    let cb = Layout::contiguous(lb.shape.clone());
    let out = gemm(&wa, &ca, &wb, &cb, par);
    let lo = Layout::contiguous(Shape::from([out.len()]));
    map1(&out, &lo, par, T::down)
}

/// Batched GEMM for integers (wrapping arithmetic, numpy-like).
pub fn gemm_int<T: Copy + Default>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    mul_add: impl Fn(T, T, T) -> T,
) -> Vec<T> {
    let (batch, m, k, n) = dims(la, lb);
    let mut out = crate::pool::filled(batch * m * n, T::default());
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::default();
                for p in 0..k {
                    let x = a[la.offset_of(&[bi, i, p])];
                    let y = b[lb.offset_of(&[bi, p, j])];
                    acc = mul_add(acc, x, y);
                }
                out[(bi * m + i) * n + j] = acc;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f64], la: &Layout, b: &[f64], lb: &Layout) -> Vec<f64> {
        gemm_int(a, la, b, lb, |acc, x, y| acc + x * y)
    }

    #[test]
    fn rank_one_products_match_naive() {
        // k == 1 (the per-example weight gradients of vmap(grad)): contiguous
        // and strided rhs rows, sequential and parallel.
        for (bt, m, n) in [(3, 5, 4), (2, 70, 300), (1, 1, 1)] {
            let a: Vec<f64> = (0..bt * m).map(|v| (v as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..bt * n).map(|v| (v as f64 * 0.11).cos()).collect();
            let la = Layout::contiguous(Shape::from([bt, m, 1]));
            let lb_rows = Layout::contiguous(Shape::from([bt, 1, n]));
            // the same values read through a [B, N, 1] buffer viewed as [B, 1, N]
            let lb_cols = Layout::contiguous(Shape::from([bt, n, 1])).permute(&[0, 2, 1]);
            for lb in [&lb_rows, &lb_cols] {
                for par in [Par::Seq, Par::Rayon] {
                    let got = gemm(&a, &la, &b, lb, par);
                    let want = naive(&a, &la, &b, lb);
                    assert_eq!(got, want, "bt={bt} m={m} n={n} strides={:?} {par:?}", lb.strides);
                }
            }
        }
    }

    #[test]
    fn row_bands_of_large_products_match_naive() {
        // Above PAR_GEMM_MIN, so Par::Rayon splits each product into bands
        // of rows (an odd m gives unequal bands); one and three products, a
        // row-major and a transposed lhs.
        let (m, k, n) = (161, 128, 128);
        assert!(m * k * n >= PAR_GEMM_MIN.max(SMALL_GEMM));
        for bt in [1, 3] {
            let a: Vec<f64> = (0..bt * m * k).map(|v| (v as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..bt * k * n).map(|v| (v as f64 * 0.11).cos()).collect();
            let lb = Layout::contiguous(Shape::from([bt, k, n]));
            let la_rows = Layout::contiguous(Shape::from([bt, m, k]));
            let la_cols = Layout::contiguous(Shape::from([bt, k, m])).permute(&[0, 2, 1]);
            for la in [&la_rows, &la_cols] {
                let want = naive(&a, la, &b, &lb);
                for par in [Par::Seq, Par::Rayon] {
                    let got = gemm(&a, la, &b, &lb, par);
                    let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max);
                    assert!(worst < 1e-10, "bt={bt} strides={:?} {par:?}: max abs diff {worst}", la.strides);
                }
            }
        }
    }

    #[test]
    fn faer_matches_naive_on_strided_operands() {
        let (bt, m, k, n) = (3, 5, 7, 4);
        let a: Vec<f64> = (0..bt * m * k).map(|v| (v as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..bt * k * n).map(|v| (v as f64 * 0.11).cos()).collect();
        let la = Layout::contiguous(Shape::from([bt, m, k]));
        // b stored as [B, N, K] and viewed transposed
        let lb = Layout::contiguous(Shape::from([bt, n, k])).permute(&[0, 2, 1]);
        for par in [Par::Seq, Par::Rayon] {
            let got = gemm(&a, &la, &b, &lb, par);
            let want = naive(&a, &la, &b, &lb);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-12);
            }
        }
        // a broadcast batch (stride 0) works too
        let la0 = Layout::contiguous(Shape::from([1, m, k])).broadcast_in_dim(&Shape::from([bt, m, k]), &[0, 1, 2]);
        let got = gemm(&a, &la0, &b, &lb, Par::Seq);
        assert_eq!(got.len(), bt * m * n);
        let want = naive(&a, &la0, &b, &lb);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12);
        }
    }
}
