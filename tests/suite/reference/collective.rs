//! The collectives from their definitions, on the stacked form the tests
//! run them in (`registry::Case::apply`): every operand's leading axis is
//! the named axis of size `n` (example `j`'s value is `x[j]`), and so is
//! the result's.

use super::{indices, Nd};
use xform::core::prim::CollectiveOp;

/// `op` over the examples `x[0..n]`, each example's result stacked.
pub fn apply(op: &CollectiveOp, ins: &[Nd], n: usize) -> Nd {
    if let CollectiveOp::AxisIndex { .. } = op {
        return Nd::new(vec![n], (0..n).map(|k| k as f64).collect());
    }
    let x = &ins[0];
    let ex = &x.shape[1..];
    // example j's element at `idx` (an index of one example)
    let at = |j: usize, idx: &[usize]| -> f64 {
        let mut full = vec![j];
        full.extend_from_slice(idx);
        x.at(&full)
    };
    let total = |idx: &[usize]| (0..n).map(|j| at(j, idx)).sum::<f64>();
    let (out_ex, f): (Vec<usize>, Box<dyn Fn(usize, &[usize]) -> f64 + '_>) = match op {
        CollectiveOp::Psum { .. } => (ex.to_vec(), Box::new(|_, i: &[usize]| total(i))),
        CollectiveOp::Pmax { .. } => {
            (ex.to_vec(), Box::new(|_, i: &[usize]| (0..n).map(|j| at(j, i)).fold(f64::NEG_INFINITY, f64::max)))
        }
        CollectiveOp::Pmin { .. } => {
            (ex.to_vec(), Box::new(|_, i: &[usize]| (0..n).map(|j| at(j, i)).fold(f64::INFINITY, f64::min)))
        }
        CollectiveOp::AllGather { axis, tiled, .. } => {
            let a = *axis;
            let mut s = ex.to_vec();
            if *tiled {
                let m = s[a];
                s[a] *= n;
                (
                    s,
                    Box::new(move |_, i: &[usize]| {
                        let mut src = i.to_vec();
                        src[a] = i[a] % m;
                        at(i[a] / m, &src)
                    }),
                )
            } else {
                s.insert(a, n);
                (
                    s,
                    Box::new(move |_, i: &[usize]| {
                        let mut src = i.to_vec();
                        let j = src.remove(a);
                        at(j, &src)
                    }),
                )
            }
        }
        CollectiveOp::PsumScatter { scatter_dimension, tiled, .. } => {
            let sd = *scatter_dimension;
            let mut s = ex.to_vec();
            let q = s[sd] / n.max(1);
            if *tiled {
                s[sd] = q;
                (
                    s,
                    Box::new(move |k, i: &[usize]| {
                        let mut src = i.to_vec();
                        src[sd] += k * q;
                        total(&src)
                    }),
                )
            } else {
                s.remove(sd);
                (
                    s,
                    Box::new(move |k, i: &[usize]| {
                        let mut src = i.to_vec();
                        src.insert(sd, k);
                        total(&src)
                    }),
                )
            }
        }
        CollectiveOp::AllToAll { split_axis, concat_axis, tiled, .. } => {
            let (sa, ca) = (*split_axis, *concat_axis);
            let mut s = ex.to_vec();
            if *tiled {
                let q = s[sa] / n.max(1);
                s[sa] = q;
                let pc = s[ca];
                s[ca] *= n;
                (
                    s,
                    Box::new(move |k, i: &[usize]| {
                        // piece (k, j) is chunk k of example j along sa; pieces concatenated along ca
                        let j = i[ca] / pc;
                        let mut p = i.to_vec();
                        p[ca] = i[ca] % pc;
                        p[sa] += k * q;
                        at(j, &p)
                    }),
                )
            } else {
                s.remove(sa);
                s.insert(ca, n);
                (
                    s,
                    Box::new(move |k, i: &[usize]| {
                        let mut p = i.to_vec();
                        let j = p.remove(ca);
                        p.insert(sa, k);
                        at(j, &p)
                    }),
                )
            }
        }
        CollectiveOp::Ppermute { perm, .. } => (
            ex.to_vec(),
            Box::new(move |k, i: &[usize]| match perm.iter().find(|(_, d)| *d == k) {
                Some((s, _)) => at(*s, i),
                None => 0.0,
            }),
        ),
        CollectiveOp::AxisIndex { .. } => unreachable!("handled above"),
    };
    let mut shape = vec![n];
    shape.extend_from_slice(&out_ex);
    let data = indices(&shape).iter().map(|idx| f(idx[0], &idx[1..])).collect();
    Nd::new(shape, data)
}
