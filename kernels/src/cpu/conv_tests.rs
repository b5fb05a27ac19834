//! Tests of the CPU convolution against a direct loop over the definition,
//! on every path (by unit, in place, depthwise, by feature), with
//! contiguous and transposed operands.

use super::conv::{conv, conv_forward, Operand, OutLayout};
use super::Par;
use crate::conv_geom::{dilated, ConvGeometry};
use crate::cuda_source::conv::test_cases::{geom, reference};

/// The plain loop over the definition (the one the CUDA kernels are
/// checked against), values only.
fn naive(lhs: &[f64], rhs: &[f64], g: &ConvGeometry) -> Vec<f64> {
    reference(g, lhs, rhs).into_iter().map(|(v, _)| v).collect()
}

/// `[a, b, block]` contiguous copied into `[b, a, block]` (the two leading
/// axes swapped in memory), behind `pad` leading elements.
fn swapped(x: &[f64], a: usize, b: usize, block: usize, pad: usize) -> Vec<f64> {
    let mut y = vec![f64::NAN; pad + x.len()];
    for i in 0..a {
        for j in 0..b {
            y[pad + (j * a + i) * block..][..block].copy_from_slice(&x[(i * b + j) * block..][..block]);
        }
    }
    y
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{what}: element {i}: {a} vs {b}");
    }
}

/// Checks `g` on contiguous operands (through [`conv_forward`]) and on
/// operands whose leading axes are swapped in memory (through [`conv`]),
/// sequential and parallel; returns the layout [`conv`] chose.
fn check(g: &ConvGeometry) -> OutLayout {
    let lhs: Vec<f64> = (0..g.lhs_len()).map(|i| ((i * 7919) % 23) as f64 / 7.0 - 1.5).collect();
    let rhs: Vec<f64> = (0..g.rhs_len()).map(|i| ((i * 104729) % 17) as f64 / 5.0 - 1.6).collect();
    let want = naive(&lhs, &rhs, g);
    let (lb, rb): (usize, usize) = (g.input.iter().product(), g.kernel.iter().product());
    let (n, c, o, cg) = (g.batch, g.in_features, g.out_features, g.group_in_features());
    let lt = swapped(&lhs, n, c, lb, 3);
    let rt = swapped(&rhs, o, cg, rb, 5);
    let mut layout = OutLayout::BatchMajor;
    for par in [Par::Seq, Par::Rayon] {
        assert_close(&conv_forward(&lhs, &rhs, g, par), &want, &format!("{g:?} {par:?}"));
        let l = Operand { data: &lt[..], offset: 3, strides: [lb, n * lb] };
        let r = Operand { data: &rt[..], offset: 5, strides: [rb, o * rb] };
        let (got, how) = conv(l, r, g, par);
        layout = how;
        let got = match how {
            OutLayout::BatchMajor => got,
            // [O, N/bg, P] -> [N/bg, O, P].
            OutLayout::FeatureMajor => {
                let (nb, p) = (g.out_batch(), g.output.iter().product::<usize>());
                (0..got.len()).map(|i| got[(((i / p) % o) * nb + i / (o * p)) * p + i % p]).collect()
            }
        };
        assert_close(&got, &want, &format!("{g:?} {par:?}, transposed operands"));
    }
    layout
}

#[test]
fn matches_the_definition_for_every_option() {
    let one = [1, 1, 1];
    let none = [(0, 0); 3];
    // Plain 2-D, 1x1 in place, 3-D.
    check(&geom((2, 3, 4, 1, 1), [1, 6, 5], [1, 3, 2], one, none, one, one));
    check(&geom((2, 3, 4, 1, 1), [1, 4, 5], one, one, none, one, one));
    check(&geom((1, 2, 3, 1, 1), [4, 3, 5], [2, 2, 3], one, none, one, one));
    // Strides, asymmetric and negative padding, both dilations.
    check(&geom((2, 2, 3, 1, 1), [1, 7, 6], [1, 3, 2], [1, 2, 3], [(0, 0), (2, -1), (1, 2)], one, one));
    check(&geom((1, 2, 2, 1, 1), [1, 4, 5], [1, 2, 3], [1, 1, 2], [(0, 0), (1, 1), (0, 2)], [1, 2, 3], [1, 2, 1]));
    // Feature groups (grouped, depthwise) and batch groups.
    check(&geom((2, 6, 4, 2, 1), [1, 5, 5], [1, 3, 3], one, [(0, 0), (1, 1), (1, 1)], one, one));
    check(&geom((2, 3, 6, 3, 1), [1, 5, 4], [1, 2, 2], [1, 2, 1], none, one, one));
    // Depthwise (one feature per group): the direct loops.
    check(&geom((2, 4, 4, 4, 1), [1, 6, 5], [1, 3, 3], [1, 2, 1], [(0, 0), (1, 1), (2, 0)], one, [1, 1, 2]));
    check(&geom((2, 3, 3, 3, 1), [2, 4, 5], [2, 2, 3], one, none, [1, 2, 1], one));
    check(&geom((6, 2, 6, 1, 3), [1, 4, 4], [1, 2, 3], one, [(0, 0), (0, 1), (1, 0)], one, [1, 1, 2]));
    // A kernel larger than the input: no positions.
    check(&geom((1, 1, 1, 1, 1), [1, 2, 2], [1, 3, 3], one, none, one, one));
    // Many units, each im2col'd into per-thread scratch (by unit).
    check(&geom((9, 3, 5, 1, 1), [1, 9, 8], [1, 3, 3], one, [(0, 0), (1, 1), (1, 1)], one, one));
}

#[test]
fn kernel_gradients_sum_over_features() {
    // The kernel gradient of a 4x3-channel conv on 8x8 maps, 3x3 kernel:
    // lhs = the input seen as [C, N, ...], window = the 6x6 output
    // cotangent, 3x3 positions.
    let one = [1, 1, 1];
    let none = [(0, 0); 3];
    let g = geom((3, 4, 5, 1, 1), [1, 8, 8], [1, 6, 6], one, none, one, one);
    assert_eq!(check(&g), OutLayout::FeatureMajor);
    // With the forward's stride 2 (rhs dilation here) and padding 1.
    let g = geom((3, 4, 5, 1, 1), [1, 8, 7], [1, 4, 4], one, [(0, 0), (1, 0), (1, 1)], one, [1, 2, 2]);
    assert_eq!(check(&g), OutLayout::FeatureMajor);
    // vmap(grad)'s: one feature group per example, and a batch-grouped one.
    let g = geom((3, 4, 8, 4, 1), [1, 8, 8], [1, 6, 6], one, none, one, one);
    assert_eq!(check(&g), OutLayout::FeatureMajor);
    let g = geom((6, 2, 6, 1, 3), [1, 7, 7], [1, 5, 5], one, [(0, 0), (0, 1), (1, 0)], one, one);
    assert_eq!(check(&g), OutLayout::FeatureMajor);
    // 3-D, lhs dilation (a strided transposed convolution's kernel gradient).
    let g = geom((2, 3, 2, 1, 1), [3, 5, 5], [3, 7, 6], one, [(0, 0), (1, 1), (0, 1)], [1, 2, 2], one);
    assert_eq!(check(&g), OutLayout::FeatureMajor);
}

/// A random geometry; `wide` draws windows nearly as large as the padded
/// input (few output positions), the kernel gradient's shape.
fn random_geometry(next: &mut impl FnMut(u64) -> usize, wide: bool) -> ConvGeometry {
    let (mut input, mut kernel, mut stride, mut pad, mut ld, mut rd) =
        ([1; 3], [1; 3], [1; 3], [(0i64, 0i64); 3], [1; 3], [1; 3]);
    for a in 0..3 {
        if wide && a == 0 && next(2) == 0 {
            continue;
        }
        input[a] = 1 + next(if wide { 7 } else { 5 });
        stride[a] = 1 + next(3);
        ld[a] = 1 + next(2);
        rd[a] = 1 + next(2);
        let di = dilated(input[a], ld[a]) as i64;
        kernel[a] = if wide {
            // Leave 0-2 positions of slack in the padded input.
            let lo = next(3) as i64 - 1;
            let reach = (di + lo + next(3) as i64 - 1 - next(3) as i64).max(1);
            pad[a] = (lo, 0);
            1 + (reach as usize - 1) / rd[a]
        } else {
            1 + next(3)
        };
        let dk = dilated(kernel[a], rd[a]) as i64;
        let lo = if wide { pad[a].0 } else { next(4) as i64 - 1 };
        let hi = (dk - di - lo).max(-1) + next(3) as i64;
        pad[a] = (lo, hi);
    }
    let fg = 1 + next(2);
    let bg = if fg == 1 { 1 + next(3) } else { 1 };
    let extra = if wide { 4 } else { 2 };
    geom(
        (bg * (1 + next(extra)), fg * (1 + next(extra)), fg * bg * (1 + next(2)), fg, bg),
        input,
        kernel,
        stride,
        pad,
        ld,
        rd,
    )
}

#[test]
fn matches_the_definition_on_random_geometries() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 33) % n) as usize
    };
    let mut by_feature = 0;
    for i in 0..800 {
        let wide = i % 2 == 1;
        let g = random_geometry(&mut next, wide);
        if g.out_len() == 0 {
            continue;
        }
        by_feature += usize::from(check(&g) == OutLayout::FeatureMajor);
    }
    // Both paths are exercised, with strides, padding, dilations and groups.
    assert!(by_feature >= 100, "only {by_feature} geometries took the by-feature path");
}
