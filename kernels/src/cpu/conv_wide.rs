//! A convolution summed over its lhs features: the form for few output
//! positions and a large window, which is the kernel gradient.
//!
//! JAX's transpose rule computes a kernel's cotangent as a convolution of
//! the forward input (features and batch swapped: `[C, N, ...]`) with the
//! output cotangent as the window (`[O, N, ...]`), giving `[C, O, taps]`:
//! `P` output positions (the forward kernel's taps, a handful), a window of
//! `K` taps (the forward output positions, hundreds), and `N` lhs features
//! (the forward examples). By unit, each product would be
//! `[O, N * K] x [N * K, P]`, a few columns wide. Here the sum over the lhs
//! features comes first: for each feature `c`,
//! `out[O, (n, p)] += rhs[O, c, K] x patches_c[K, (n, p)]`, where
//! `patches_c` unrolls the windows of feature `c` of every lhs example `n`
//! (for the kernel gradient: the forward input's example `c`, all its
//! channels). The products are `[O/groups, K] x [K, N/bg * P]`, and the
//! result is laid out `[O, N/bg, P]`, which for the kernel gradient is the
//! kernel's own `[O, C, taps]`.
//!
//! Groups: feature group `g` reads lhs features `g * C/fg..` against its
//! output features; batch group `g` reads lhs examples `g * N/bg..`. Work
//! splits over groups, and a group's features split into partial sums
//! where there are fewer than two groups per thread.

use super::conv::{Operand, Patches, Scratch};
use super::matmul::{gemm_block, FaerElem, One};
use super::Par;
use crate::conv_geom::ConvGeometry;
use std::ops::Range;

/// Whether [`conv_wide`] suits `g` better than the products by unit: the
/// smaller of its GEMMs' depth and width is larger (both have
/// `O/groups` rows).
pub(super) fn takes(g: &ConvGeometry) -> bool {
    let taps: usize = g.kernel.iter().product();
    let p: usize = g.output.iter().product();
    let by_unit = (g.group_in_features() * taps).min(p);
    let by_feature = taps.min(g.out_batch() * p);
    by_feature > by_unit
}

/// The convolution of `lhs` and `rhs` by lhs feature (see the module docs),
/// laid out `[O, N/bg, OD, OH, OW]`. Needs at least one output element
/// and one tap per group.
pub(super) fn conv_wide<T: FaerElem + One + std::ops::AddAssign>(
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
    g: &ConvGeometry,
    par: Par,
) -> Vec<T> {
    let groups = g.groups();
    let (m, cg, nb) = (g.group_out_features(), g.group_in_features(), g.out_batch());
    let taps: usize = g.kernel.iter().product();
    let p: usize = g.output.iter().product();
    let cols = nb * p;
    debug_assert!(m * cols * taps * cg > 0);
    let patches = Patches::new(g);
    // Output rows of group `gr` over lhs features `cs` of the group into
    // `dst` (m rows of `cols`), replacing its contents.
    let run = |gr: usize, cs: Range<usize>, b: &mut Scratch<T>, dst: &mut [T]| {
        for (i, c) in cs.enumerate() {
            let feature = if g.feature_groups > 1 { gr * cg + c } else { c };
            for n in 0..nb {
                let example = if g.batch_groups > 1 { gr * nb + n } else { n };
                patches.plane(g, lhs.data, lhs.block(example, feature), &mut b[n * p..], cols);
            }
            let pa = (rhs.offset + gr * m * rhs.strides[0] + c * rhs.strides[1]) as isize;
            // SAFETY: plane wrote the taps x cols patch matrix into `b`; the
            // rhs rows of the group are m rows of `taps` contiguous elements
            // inside `rhs.data`; dst is an exclusive m x cols block, written
            // by the first product (i == 0) before the others add to it.
            unsafe {
                gemm_block(
                    rhs.data,
                    pa,
                    rhs.strides[0] as isize,
                    1,
                    b.written(),
                    0,
                    cols as isize,
                    1,
                    (m, taps, cols),
                    dst.as_mut_ptr(),
                    cols,
                    i > 0,
                )
            };
        }
    };
    let block = m * cols;
    let threads = super::threads();
    // At least two tasks per thread (whole groups, or chunks of a group's
    // features into partial sums), so that uneven tasks even out.
    let chunks = if par == Par::Seq || groups >= 2 * threads { 1 } else { (2 * threads).div_ceil(groups).min(cg) };
    // Zeros, not uninitialized: `run` hands the block to the GEMM as `&mut [T]`.
    let mut out = crate::pool::filled(groups * block, T::default());
    use rayon::prelude::*;
    if chunks == 1 {
        let scratch = || Scratch::new(taps * cols);
        if par == Par::Rayon {
            out.par_chunks_mut(block).enumerate().for_each_init(scratch, |b, (gr, dst)| run(gr, 0..cg, b, dst));
        } else {
            let mut b = scratch();
            out.chunks_mut(block).enumerate().for_each(|(gr, dst)| run(gr, 0..cg, &mut b, dst));
        }
        return out;
    }
    // Partial sums over chunks of each group's features, then their sum.
    let per = cg.div_ceil(chunks);
    let tasks: Vec<(usize, Range<usize>)> =
        (0..groups).flat_map(|gr| (0..cg).step_by(per).map(move |c0| (gr, c0..(c0 + per).min(cg)))).collect();
    let partials: Vec<Vec<T>> = tasks
        .par_iter()
        .map_init(
            || Scratch::new(taps * cols),
            |b, (gr, cs)| {
                let mut part = crate::pool::filled(block, T::default());
                run(*gr, cs.clone(), b, &mut part);
                part
            },
        )
        .collect();
    for ((gr, _), part) in tasks.iter().zip(partials) {
        for (o, v) in out[gr * block..][..block].iter_mut().zip(&part) {
            *o += *v;
        }
        crate::pool::recycle(part);
    }
    out
}
