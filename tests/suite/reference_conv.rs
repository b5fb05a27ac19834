//! A naive f64 convolution written from XLA's definition of
//! `ConvGeneralDilated`: every output element is a sum over its group's
//! input features and the kernel taps, reading the lhs through its
//! dilation and padding by index arithmetic alone.

use super::reference::{indices, Nd};
use xform::core::prim::ConvParams;

/// `conv_general_dilated(lhs, rhs)` with parameters `p`.
pub fn conv(p: &ConvParams, lhs: &Nd, rhs: &Nd) -> Nd {
    let d = &p.dims;
    let n = lhs.shape.len() - 2;
    let (fg, bg) = (p.feature_group_count, p.batch_group_count);
    let batch = lhs.shape[d.lhs[0]];
    let (o_total, cg) = (rhs.shape[d.rhs[0]], rhs.shape[d.rhs[1]]);
    let per_group = o_total / (fg * bg);
    let ksizes: Vec<usize> = (0..n).map(|i| rhs.shape[d.rhs[2 + i]]).collect();
    let mut out_shape = vec![0; lhs.shape.len()];
    out_shape[d.out[0]] = batch / bg;
    out_shape[d.out[1]] = o_total;
    for i in 0..n {
        let inp = lhs.shape[d.lhs[2 + i]] as i64;
        let dil_in = if inp == 0 { 0 } else { 1 + p.lhs_dilation[i] as i64 * (inp - 1) };
        let k = ksizes[i] as i64;
        let dil_k = if k == 0 { 0 } else { 1 + p.rhs_dilation[i] as i64 * (k - 1) };
        let padded = dil_in + p.padding[i].0 + p.padding[i].1;
        out_shape[d.out[2 + i]] =
            if padded < dil_k { 0 } else { ((padded - dil_k) / p.strides[i] as i64 + 1) as usize };
    }
    let mut out = Nd::filled(out_shape.clone(), 0.0);
    for idx in indices(&out_shape) {
        let (b, o) = (idx[d.out[0]], idx[d.out[1]]);
        let group = o / per_group;
        let mut s = 0.0;
        for c in 0..cg {
            // Feature groups pick the lhs features; batch groups the example.
            let (lb, lc) = if bg > 1 { (group * (batch / bg) + b, c) } else { (b, group * cg + c) };
            'taps: for k in indices(&ksizes) {
                let mut li = vec![0; lhs.shape.len()];
                li[d.lhs[0]] = lb;
                li[d.lhs[1]] = lc;
                for i in 0..n {
                    // Position in the padded, dilated lhs.
                    let pos = (idx[d.out[2 + i]] * p.strides[i] + k[i] * p.rhs_dilation[i]) as i64 - p.padding[i].0;
                    let ld = p.lhs_dilation[i] as i64;
                    if pos < 0 || pos % ld != 0 || pos / ld >= lhs.shape[d.lhs[2 + i]] as i64 {
                        continue 'taps;
                    }
                    li[d.lhs[2 + i]] = (pos / ld) as usize;
                }
                let mut ri = vec![0; rhs.shape.len()];
                ri[d.rhs[0]] = o;
                ri[d.rhs[1]] = c;
                for i in 0..n {
                    ri[d.rhs[2 + i]] = k[i];
                }
                s += lhs.at(&li) * rhs.at(&ri);
            }
        }
        let flat = out.flat(&idx);
        out.data[flat] = s;
    }
    out
}
