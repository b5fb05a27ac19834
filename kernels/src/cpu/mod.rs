//! CPU kernels: generic over the element type, any strided layout in,
//! contiguous row-major out.
//!
//! Parallelism is an explicit [`Par`] argument that the caller picks with
//! [`Par::for_work`]; kernels never decide on their own, and a kernel that
//! runs a rayon loop never calls faer with `Par::rayon` inside it. The one
//! exception is a thread the caller lends ([`pair::lend`]): then a few
//! kernels below rayon's threshold split in two halves (NOTE: [paired
//! halves]).

pub mod conv;
#[cfg(test)]
mod conv_tests;
mod conv_wide;
pub mod decomp;
pub mod elementwise;
pub mod indexing;
pub mod matmul;
pub mod orthogonal;
pub mod outer;
#[cfg(target_arch = "x86_64")]
mod outer_avx2;
mod pack;
pub mod pair;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod small_gemm;
#[cfg(target_arch = "x86_64")]
mod small_gemm_avx2;
pub mod window;

use std::mem::MaybeUninit;

/// Whether a kernel may split its work over the rayon pool.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Par {
    /// Run on the calling thread.
    Seq,
    /// Split over the global rayon pool.
    Rayon,
}

/// Below this many "cheap element operations" a kernel runs sequentially.
/// Measured on the 2-core target machine: waking the rayon pool costs about
/// 25-30 us there, and a parallel add only wins from about 2^20 elements,
/// an f32 exp (cost 8) from about 2^16.
pub const PAR_MIN_WORK: usize = 1 << 19;

/// The rayon pool's size, looked up once.
///
/// The first lookup (the first kernel that asks whether to split its work)
/// also starts `matmul::warm_up` on the pool, so that faer's one-time
/// set-up (about 1.5 ms) is not paid by the first product on the caller's
/// thread.
pub fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        rayon::spawn(matmul::warm_up);
        rayon::current_num_threads()
    })
}

/// Whether the calling thread is one of rayon's pool threads. A thread that
/// blocks there waiting for another thread's kernel can starve that
/// kernel of the pool (every pool thread waiting, the kernel's rayon tasks
/// queued), so the jit's helper is not used from one.
pub fn on_pool_thread() -> bool {
    rayon::current_thread_index().is_some()
}

impl Par {
    /// `Rayon` when `elems * cost` (cost: 1 for an add, ~8 for exp or sin)
    /// is worth splitting and more than one thread exists.
    #[inline]
    pub fn for_work(elems: usize, cost: usize) -> Par {
        // The pool size first: the first kernel of the process starts the
        // pool and its warm-up (see `threads`) while the caller is still
        // making its inputs.
        if threads() > 1 && elems.saturating_mul(cost) >= PAR_MIN_WORK {
            Par::Rayon
        } else {
            Par::Seq
        }
    }
}

/// True if the CPU has AVX-512F (cached by std): the outer-product and
/// small-GEMM kernels use it, and their AVX2 versions otherwise.
#[inline]
pub(crate) fn has_avx512f() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// True if the CPU has the AVX-512 subsets the compiler vectorizes with
/// (F, DQ, BW, VL), and AVX2 and FMA (cached by std): elementwise loops
/// compiled with these enabled run 16 f32 lanes wide. Enabling them never
/// changes a result: Rust neither contracts `a * b + c` into an FMA nor
/// reassociates float operations, whatever the target features.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn avx512() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx512f") && has!("avx512dq") && has!("avx512bw") && has!("avx512vl") && avx2()
}

/// True if the CPU has AVX2 and FMA (cached by std).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Elements of `T` from `p` to the next 64-byte line boundary (0 when
/// aligned): kernels write up to it separately so that their vector stores
/// do not split lines (malloc's large buffers start 16 bytes into one).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn to_line<T>(p: *const T) -> usize {
    to_boundary(p, 64)
}

/// Elements of `T` from `p` to the next multiple of `bytes` (0 when
/// aligned); the AVX2 kernels align their 32-byte vectors with it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn to_boundary<T>(p: *const T, bytes: usize) -> usize {
    (bytes - p as usize % bytes) % bytes / std::mem::size_of::<T>().max(1)
}

/// Calls `body(range)` for ranges of `0..n` that start at multiples of
/// `step` and cover it, for a loop of `cost` per element (as for
/// [`Par::for_work`]): one range on this thread, two halves where a pair
/// is lent and the work is worth it (NOTE: [paired halves]), or up to four
/// ranges per thread over rayon's pool, in parallel (for loops that write
/// disjoint ranges of their outputs through raw addresses, such as the
/// jit's fused loops).
pub fn for_ranges(n: usize, step: usize, cost: usize, body: impl Fn(std::ops::Range<usize>) + Sync) {
    let step = step.max(1);
    let steps = n.div_ceil(step);
    let tasks = match Par::for_work(n, cost) {
        Par::Seq if pair::halves(n, step, cost) && pair::lent() => {
            let half = (steps / 2) * step;
            pair::join(|| body(0..half), || body(half..n));
            return;
        }
        Par::Seq => 1,
        Par::Rayon => (threads() * 4).min(steps),
    };
    if tasks <= 1 {
        body(0..n);
        return;
    }
    use rayon::prelude::*;
    let per = steps.div_ceil(tasks) * step;
    (0..tasks).into_par_iter().for_each(|t| {
        let start = (t * per).min(n);
        body(start..(start + per).min(n));
    });
}

/// Splits `out` into chunks of whole runs of `run_len` elements and calls
/// `body(first_run, chunk)` for each, in parallel under `Par::Rayon`.
pub(crate) fn for_run_chunks<U: Send>(
    out: &mut [MaybeUninit<U>],
    run_len: usize,
    par: Par,
    body: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync,
) {
    if out.is_empty() || run_len == 0 {
        return;
    }
    let runs = out.len() / run_len;
    let tasks = match par {
        Par::Seq => 1,
        Par::Rayon => (threads() * 4).min(runs).max(1),
    };
    if tasks == 1 {
        body(0, out);
        return;
    }
    use rayon::prelude::*;
    let runs_per_task = runs.div_ceil(tasks);
    out.par_chunks_mut(runs_per_task * run_len).enumerate().for_each(|(i, chunk)| body(i * runs_per_task, chunk));
}
