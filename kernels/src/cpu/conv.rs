//! Convolution on the CPU: im2col plus one batched GEMM.
//!
//! Operands are in the canonical layouts of [`ConvGeometry`] (lhs
//! `[N, C, D, H, W]`, rhs `[O, C/fg, KD, KH, KW]`, contiguous), and so is the
//! result (`[N/bg, O, OD, OH, OW]`). Each (output example, group) pair is
//! one unit: its patches are unrolled into a `[C/fg * K, P]` matrix (`K`
//! kernel taps, `P` output positions; padding and the holes of lhs dilation
//! become zeros), and the unit's output block `[O/groups, P]` is the group's
//! weights `[O/groups, C/fg * K]` times that matrix. All units run as one
//! batched GEMM (`matmul::gemm_offsets`: faer, or the small-product kernel,
//! split over rayon above its threshold). A 1x1 convolution with unit
//! strides and no padding reads the lhs in place: its patch matrix is the
//! input itself. A depthwise convolution (one input and one output feature
//! per group) runs direct loops over shifted input lines instead.

use super::matmul::{gemm_offsets, FaerElem, MatOperand, One};
use super::Par;
use crate::conv_geom::{ConvGeometry, SPATIAL};
use std::mem::MaybeUninit;

/// For one spatial axis, the input coordinate read by each (output
/// position, kernel tap) pair, row-major over `[output, kernel]`, or -1
/// on padding and dilation holes.
fn axis_table(g: &ConvGeometry, ax: usize) -> Vec<isize> {
    let (o, k) = (g.output[ax], g.kernel[ax]);
    let mut t = Vec::with_capacity(o * k);
    for oi in 0..o {
        for ki in 0..k {
            t.push(g.input_index(ax, oi, ki).map_or(-1, |i| i as isize));
        }
    }
    t
}

/// For the innermost axis without lhs dilation, per kernel tap: the output
/// positions `lo..hi` that read the input, and the (possibly negative)
/// input index of output position 0, so that position `o` reads
/// `start + o * stride`.
fn row_runs(g: &ConvGeometry) -> Vec<(usize, usize, isize)> {
    let (ow, iw, s) = (g.output[2], g.input[2] as isize, g.stride[2] as isize);
    (0..g.kernel[2])
        .map(|e| {
            let start = (e * g.rhs_dilation[2]) as isize - g.pad_lo[2] as isize;
            // First o with start + o*s >= 0, first o with start + o*s >= iw.
            let first = |bound: isize| -> usize {
                if start >= bound {
                    0
                } else {
                    ((bound - start + s - 1) / s).min(ow as isize) as usize
                }
            };
            let (lo, hi) = (first(0), first(iw));
            (lo, hi.max(lo), start)
        })
        .collect()
}

/// Whether the patch matrix of every unit is the unit's input block itself.
fn reads_in_place(g: &ConvGeometry) -> bool {
    (0..SPATIAL)
        .all(|a| g.kernel[a] == 1 && g.stride[a] == 1 && g.lhs_dilation[a] == 1 && g.pad_lo[a] == 0 && g.pad_hi[a] == 0)
}

/// The lhs example and first channel unit `(n, group)` reads.
fn unit_input(g: &ConvGeometry, n: usize, group: usize) -> (usize, usize) {
    if g.batch_groups > 1 {
        (group * g.out_batch() + n, 0)
    } else {
        (n, group * g.group_in_features())
    }
}

/// Writes the `[cg * K, P]` patch matrix of one unit into `dst`.
fn im2col_unit<T: Copy + Default>(
    g: &ConvGeometry,
    tables: &[Vec<isize>; SPATIAL],
    x: &[T],
    example: usize,
    c0: usize,
    dst: &mut [MaybeUninit<T>],
) {
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [od, oh, ow] = g.output;
    let p = od * oh * ow;
    let plane = id * ih * iw;
    let runs = (g.lhs_dilation[2] == 1).then(|| row_runs(g));
    let mut row = 0;
    for c in 0..g.group_in_features() {
        let base = (example * g.in_features + c0 + c) * plane;
        for a in 0..kd {
            for b in 0..kh {
                for e in 0..kw {
                    let out = &mut dst[row * p..(row + 1) * p];
                    let mut q = 0;
                    for zo in 0..od {
                        let zi = tables[0][zo * kd + a];
                        for yo in 0..oh {
                            let yi = tables[1][yo * kh + b];
                            if zi < 0 || yi < 0 {
                                for slot in &mut out[q..q + ow] {
                                    slot.write(T::default());
                                }
                                q += ow;
                                continue;
                            }
                            let line = base + (zi as usize * ih + yi as usize) * iw;
                            let dst = &mut out[q..q + ow];
                            q += ow;
                            if let Some(r) = &runs {
                                // Zeros, then a run of the input line, then zeros.
                                let (lo, hi, start) = r[e];
                                for slot in &mut dst[..lo] {
                                    slot.write(T::default());
                                }
                                // Input index of output position o: src + o * stride (>= 0 for o >= lo).
                                let src = line as isize + start;
                                let s = g.stride[2] as isize;
                                // An empty run reads nothing (its slice could start past the end).
                                if hi > lo && s == 1 {
                                    let from = (src + lo as isize) as usize;
                                    for (slot, v) in dst[lo..hi].iter_mut().zip(&x[from..from + (hi - lo)]) {
                                        slot.write(*v);
                                    }
                                } else {
                                    for (o, slot) in (lo..hi).zip(dst[lo..hi].iter_mut()) {
                                        slot.write(x[(src + o as isize * s) as usize]);
                                    }
                                }
                                for slot in &mut dst[hi..] {
                                    slot.write(T::default());
                                }
                            } else {
                                for (xo, slot) in dst.iter_mut().enumerate() {
                                    let xi = tables[2][xo * kw + e];
                                    slot.write(if xi < 0 { T::default() } else { x[line + xi as usize] });
                                }
                            }
                        }
                    }
                    row += 1;
                }
            }
        }
    }
}

/// A depthwise convolution (one input and one output feature per group):
/// each output plane is a weighted sum of shifted input lines, computed
/// directly (a GEMM of one row would spend its time unrolling patches).
fn depthwise<T>(lhs: &[T], rhs: &[T], g: &ConvGeometry, par: Par) -> Vec<T>
where
    T: Copy + Default + Send + Sync + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    let groups = g.groups();
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [od, oh, ow] = g.output;
    let p = od * oh * ow;
    let tables = [axis_table(g, 0), axis_table(g, 1), axis_table(g, 2)];
    let taps = kd * kh * kw;
    let plane = id * ih * iw;
    let unit = |u: usize, dst: &mut [T]| {
        let (e, c0) = unit_input(g, u / groups, u % groups);
        let x = &lhs[(e * g.in_features + c0) * plane..][..plane];
        let w = &rhs[(u % groups) * taps..][..taps];
        dst.fill(T::default());
        for (t, &wt) in w.iter().enumerate() {
            let (a, b, c) = (t / (kh * kw), (t / kw) % kh, t % kw);
            for zo in 0..od {
                let zi = tables[0][zo * kd + a];
                for yo in 0..oh {
                    let yi = tables[1][yo * kh + b];
                    if zi < 0 || yi < 0 {
                        continue;
                    }
                    let line = &x[(zi as usize * ih + yi as usize) * iw..][..iw];
                    let out = &mut dst[(zo * oh + yo) * ow..][..ow];
                    for (xo, o) in out.iter_mut().enumerate() {
                        let xi = tables[2][xo * kw + c];
                        if xi >= 0 {
                            *o = *o + wt * line[xi as usize];
                        }
                    }
                }
            }
        }
    };
    let mut out = crate::pool::from_fn(g.out_len(), |_| T::default());
    if par == Par::Rayon && out.len() > p {
        use rayon::prelude::*;
        out.par_chunks_mut(p).enumerate().for_each(|(u, dst)| unit(u, dst));
    } else {
        out.chunks_mut(p.max(1)).enumerate().for_each(|(u, dst)| unit(u, dst));
    }
    out
}

/// The convolution of `lhs` and `rhs` described by `g`, in canonical
/// layouts (see the module docs), for f32 and f64.
pub fn conv_forward<T>(lhs: &[T], rhs: &[T], g: &ConvGeometry, par: Par) -> Vec<T>
where
    T: FaerElem + One + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    debug_assert_eq!(lhs.len(), g.lhs_len());
    debug_assert_eq!(rhs.len(), g.rhs_len());
    let groups = g.groups();
    let nb = g.out_batch();
    let units = nb * groups;
    let m = g.group_out_features();
    let k = g.group_in_features() * g.kernel.iter().product::<usize>();
    let p: usize = g.output.iter().product();
    // Weights of each unit's group: rows of `k` taps.
    let w = MatOperand {
        offsets: (0..units).map(|u| ((u % groups) * m * k) as isize).collect(),
        row_stride: k as isize,
        col_stride: 1,
    };
    if units * m * p == 0 {
        return Vec::new();
    }
    if k == 0 {
        // No taps: every output is an empty sum.
        return crate::pool::from_fn(units * m * p, |_| T::default());
    }
    if m == 1 && g.group_in_features() == 1 && !reads_in_place(g) {
        return depthwise(lhs, rhs, g, par);
    }
    if reads_in_place(g) {
        let plane = p as isize;
        let cols = MatOperand {
            offsets: (0..units)
                .map(|u| {
                    let (e, c0) = unit_input(g, u / groups, u % groups);
                    (e * g.in_features + c0) as isize * plane
                })
                .collect(),
            row_stride: plane,
            col_stride: 1,
        };
        return gemm_offsets(rhs, &w, lhs, &cols, m, k, p, par);
    }
    let tables = [axis_table(g, 0), axis_table(g, 1), axis_table(g, 2)];
    let mut col = crate::pool::alloc_uninit::<T>(units * k * p);
    let fill = |u: usize, dst: &mut [MaybeUninit<T>]| {
        let (e, c0) = unit_input(g, u / groups, u % groups);
        im2col_unit(g, &tables, lhs, e, c0, dst);
    };
    if par == Par::Rayon && units > 1 {
        use rayon::prelude::*;
        col.par_chunks_mut(k * p).enumerate().for_each(|(u, dst)| fill(u, dst));
    } else {
        col.chunks_mut(k * p).enumerate().for_each(|(u, dst)| fill(u, dst));
    }
    // SAFETY: im2col_unit wrote each of the k * p slots of every unit.
    let col = unsafe { super::assume_init(col) };
    let cols = MatOperand {
        offsets: (0..units).map(|u| (u * k * p) as isize).collect(),
        row_stride: p as isize,
        col_stride: 1,
    };
    gemm_offsets(rhs, &w, &col, &cols, m, k, p, par)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv_geom::dilated;

    /// A direct loop over the definition.
    fn naive(lhs: &[f64], rhs: &[f64], g: &ConvGeometry) -> Vec<f64> {
        let mut out = vec![0.0; g.out_len()];
        let [id, ih, iw] = g.input;
        let [kd, kh, kw] = g.kernel;
        let [od, oh, ow] = g.output;
        let (m, cg) = (g.group_out_features(), g.group_in_features());
        for n in 0..g.out_batch() {
            for o in 0..g.out_features {
                let group = o / m;
                let (e, c0) = unit_input(g, n, group);
                for z in 0..od {
                    for y in 0..oh {
                        for x in 0..ow {
                            let mut s = 0.0;
                            for c in 0..cg {
                                for a in 0..kd {
                                    for b in 0..kh {
                                        for f in 0..kw {
                                            let (Some(zi), Some(yi), Some(xi)) = (
                                                g.input_index(0, z, a),
                                                g.input_index(1, y, b),
                                                g.input_index(2, x, f),
                                            ) else {
                                                continue;
                                            };
                                            let li = (((e * g.in_features + c0 + c) * id + zi) * ih + yi) * iw + xi;
                                            let ri = (((o * cg + c) * kd + a) * kh + b) * kw + f;
                                            s += lhs[li] * rhs[ri];
                                        }
                                    }
                                }
                            }
                            out[(((n * g.out_features + o) * od + z) * oh + y) * ow + x] = s;
                        }
                    }
                }
            }
        }
        out
    }

    fn geometry(
        batch: usize,
        c: usize,
        o: usize,
        fg: usize,
        bg: usize,
        input: [usize; 3],
        kernel: [usize; 3],
        stride: [usize; 3],
        pad: [(i64, i64); 3],
        ld: [usize; 3],
        rd: [usize; 3],
    ) -> ConvGeometry {
        ConvGeometry {
            batch,
            in_features: c,
            out_features: o,
            feature_groups: fg,
            batch_groups: bg,
            input,
            kernel,
            output: [0; 3],
            stride,
            pad_lo: pad.map(|p| p.0),
            pad_hi: pad.map(|p| p.1),
            lhs_dilation: ld,
            rhs_dilation: rd,
        }
        .with_output()
        .expect("a valid geometry")
    }

    fn check(g: &ConvGeometry) {
        let lhs: Vec<f64> = (0..g.lhs_len()).map(|i| ((i * 7919) % 23) as f64 / 7.0 - 1.5).collect();
        let rhs: Vec<f64> = (0..g.rhs_len()).map(|i| ((i * 104729) % 17) as f64 / 5.0 - 1.6).collect();
        let want = naive(&lhs, &rhs, g);
        for par in [Par::Seq, Par::Rayon] {
            let got = conv_forward(&lhs, &rhs, g, par);
            assert_eq!(got.len(), want.len(), "{g:?}");
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{g:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn matches_the_definition_for_every_option() {
        let one = [1, 1, 1];
        let none = [(0, 0); 3];
        // Plain 2-D, 1x1 in place, 3-D.
        check(&geometry(2, 3, 4, 1, 1, [1, 6, 5], [1, 3, 2], one, none, one, one));
        check(&geometry(2, 3, 4, 1, 1, [1, 4, 5], one, one, none, one, one));
        check(&geometry(1, 2, 3, 1, 1, [4, 3, 5], [2, 2, 3], one, none, one, one));
        // Strides, asymmetric and negative padding, both dilations.
        check(&geometry(2, 2, 3, 1, 1, [1, 7, 6], [1, 3, 2], [1, 2, 3], [(0, 0), (2, -1), (1, 2)], one, one));
        check(&geometry(
            1,
            2,
            2,
            1,
            1,
            [1, 4, 5],
            [1, 2, 3],
            [1, 1, 2],
            [(0, 0), (1, 1), (0, 2)],
            [1, 2, 3],
            [1, 2, 1],
        ));
        // Feature groups (grouped, depthwise) and batch groups.
        check(&geometry(2, 6, 4, 2, 1, [1, 5, 5], [1, 3, 3], one, [(0, 0), (1, 1), (1, 1)], one, one));
        check(&geometry(2, 3, 6, 3, 1, [1, 5, 4], [1, 2, 2], [1, 2, 1], none, one, one));
        // Depthwise (one feature per group): the direct loops.
        check(&geometry(2, 4, 4, 4, 1, [1, 6, 5], [1, 3, 3], [1, 2, 1], [(0, 0), (1, 1), (2, 0)], one, [1, 1, 2]));
        check(&geometry(2, 3, 3, 3, 1, [2, 4, 5], [2, 2, 3], one, none, [1, 2, 1], one));
        check(&geometry(6, 2, 6, 1, 3, [1, 4, 4], [1, 2, 3], one, [(0, 0), (0, 1), (1, 0)], one, [1, 1, 2]));
        // A kernel larger than the input: no positions.
        check(&geometry(1, 1, 1, 1, 1, [1, 2, 2], [1, 3, 3], one, none, one, one));
    }

    #[test]
    fn matches_the_definition_on_random_geometries() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 33) % n) as usize
        };
        for _ in 0..400 {
            let (mut input, mut kernel, mut stride, mut pad, mut ld, mut rd) =
                ([1; 3], [1; 3], [1; 3], [(0i64, 0i64); 3], [1; 3], [1; 3]);
            for a in 0..3 {
                input[a] = 1 + next(5);
                kernel[a] = 1 + next(3);
                stride[a] = 1 + next(3);
                ld[a] = 1 + next(2);
                rd[a] = 1 + next(2);
                let (di, dk) = (dilated(input[a], ld[a]) as i64, dilated(kernel[a], rd[a]) as i64);
                let lo = next(4) as i64 - 1;
                let hi = (dk - di - lo).max(-1) + next(3) as i64;
                pad[a] = (lo, hi);
            }
            let fg = 1 + next(2);
            let bg = if fg == 1 { 1 + next(2) } else { 1 };
            check(&geometry(
                bg * (1 + next(2)),
                fg * (1 + next(2)),
                fg * bg * (1 + next(2)),
                fg,
                bg,
                input,
                kernel,
                stride,
                pad,
                ld,
                rd,
            ));
        }
    }
}
