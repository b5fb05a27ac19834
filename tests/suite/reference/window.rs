//! The windowed primitives the naive way: for every window, every tap in
//! row-major order, from the definition of XLA's ReduceWindow (dilate the
//! operand, pad it, place dilated windows at strided positions).

use super::{indices, int_wrap, max_of, min_of, nan_max, nan_min, Nd};
use xform::core::prim::{ReduceOp, SelectOp, WindowOp, WindowParams};
use xform::DType;

/// The windows' shape.
fn out_shape(x: &[usize], w: &WindowParams) -> Vec<usize> {
    (0..x.len())
        .map(|d| {
            let dil = |n: usize, k: usize| if n == 0 { 0 } else { (n - 1) * k + 1 };
            let padded = dil(x[d], w.base_dilation[d]) as i64 + w.padding[d].0 + w.padding[d].1;
            let win = dil(w.dims[d], w.window_dilation[d]) as i64;
            ((padded - win) / w.strides[d] as i64 + 1) as usize
        })
        .collect()
}

/// The operand element tap `k` of window `o` reads, or `None` on padding or
/// a hole of the base dilation.
fn tap(x: &[usize], w: &WindowParams, o: &[usize], k: &[usize]) -> Option<Vec<usize>> {
    let mut at = Vec::with_capacity(x.len());
    for d in 0..x.len() {
        let p = (o[d] * w.strides[d] + k[d] * w.window_dilation[d]) as i64 - w.padding[d].0;
        let b = w.base_dilation[d] as i64;
        if p < 0 || p % b != 0 || p / b >= x[d] as i64 {
            return None;
        }
        at.push((p / b) as usize);
    }
    Some(at)
}

/// The first maximum (minimum) of `x` over window `o`; a tap takes the
/// selection unless the one selected so far is `>=` it (`<=`), as JAX's
/// select-and-scatter (so a NaN is taken, and handed on to the next tap).
fn selected(x: &Nd, w: &WindowParams, o: &[usize], select: SelectOp) -> Option<Vec<usize>> {
    let mut best: Option<(Vec<usize>, f64)> = None;
    for k in indices(&w.dims) {
        if let Some(at) = tap(&x.shape, w, o, &k) {
            let v = x.at(&at);
            let wins = match &best {
                None => true,
                // unless the selected one is >= (<=) the tap; NaN: unordered
                Some((_, b)) => match (select, b.partial_cmp(&v)) {
                    (_, None) => true,
                    (SelectOp::Max, Some(o)) => o == std::cmp::Ordering::Less,
                    (SelectOp::Min, Some(o)) => o == std::cmp::Ordering::Greater,
                },
            };
            if wins {
                best = Some((at, v));
            }
        }
    }
    best.map(|(at, _)| at)
}

pub fn apply(op: &WindowOp, ins: &[Nd], d: DType) -> Nd {
    match op {
        WindowOp::ReduceWindow { op, window: w } => {
            let x = &ins[0];
            let shape = out_shape(&x.shape, w);
            let init = match op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Max if d.is_int() => min_of(d),
                ReduceOp::Min if d.is_int() => max_of(d),
                ReduceOp::Max => f64::NEG_INFINITY,
                ReduceOp::Min => f64::INFINITY,
            };
            let mut out = Nd::filled(shape.clone(), init);
            for o in indices(&shape) {
                let mut acc = init;
                for k in indices(&w.dims) {
                    if let Some(at) = tap(&x.shape, w, &o, &k) {
                        let v = x.at(&at);
                        acc = match op {
                            ReduceOp::Sum => acc + v,
                            ReduceOp::Max => nan_max(acc, v),
                            ReduceOp::Min => nan_min(acc, v),
                        };
                    }
                }
                out.set(&o, if *op == ReduceOp::Sum { int_wrap(acc, d) } else { acc });
            }
            out
        }
        WindowOp::SelectAndGatherAdd { select, window: w } => {
            let (t, x) = (&ins[0], &ins[1]);
            let shape = out_shape(&x.shape, w);
            let mut out = Nd::filled(shape.clone(), 0.0);
            for o in indices(&shape) {
                if let Some(at) = selected(x, w, &o, *select) {
                    out.set(&o, t.at(&at));
                }
            }
            out
        }
        WindowOp::SelectAndScatterAdd { select, window: w } => {
            let (ct, x) = (&ins[0], &ins[1]);
            let mut out = Nd::filled(x.shape.clone(), 0.0);
            for o in indices(&ct.shape) {
                if let Some(at) = selected(x, w, &o, *select) {
                    let v = out.at(&at) + ct.at(&o);
                    out.set(&at, v);
                }
            }
            out
        }
    }
}
