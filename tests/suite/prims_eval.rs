//! Every primitive, every listed dtype: the kernels against the naive f64
//! reference, on random shapes (size-0 and size-1 axes included), with
//! inputs that are often non-contiguous views (transposed, sliced,
//! reversed, broadcast).

use crate::harness::{cases, close, run, tol};
use crate::reference::{apply, Nd};
use crate::registry::{entries, Case, G};
use xform::core::interp::bind;
use xform::core::prim::shape_rule;
use xform::{Prim, Tensor};

/// The same values in a different layout: a transposed, sliced, reversed
/// or broadcast view of some other storage.
fn relayout(t: &Tensor, g: &mut G) -> Tensor {
    let r = t.rank();
    match g.int(0, 4) {
        0 if r >= 2 => {
            let p = g.perm(r);
            let mut inv = vec![0; r];
            for (i, &a) in p.iter().enumerate() {
                inv[a] = i;
            }
            t.permute(&p).copy().permute(&inv)
        }
        1 if r >= 1 => {
            // embed in a larger array and slice it back out, with a step
            let pads: Vec<(i64, i64)> = (0..r).map(|_| (g.int(0, 2) as i64, g.int(0, 2) as i64)).collect();
            let step = g.int(1, 2);
            let big = if step == 1 {
                t.pad(&pads, 7.0)
            } else {
                // interleave garbage: every other element along axis 0
                let mut low = vec![0i64; r];
                let mut high = vec![0i64; r];
                let mut interior = vec![0usize; r];
                for k in 0..r {
                    low[k] = pads[k].0;
                    high[k] = pads[k].1;
                }
                interior[0] = 1;
                let v = xform::lax::scalar(7.0, t.dtype(), t.device()).unwrap();
                xform::lax::pad(t, &v, &low, &high, &interior).unwrap()
            };
            let mut out = big;
            for k in 0..r {
                let s = pads[k].0 as isize;
                let n = t.shape()[k] as isize;
                let st = if k == 0 { step } else { 1 };
                out = out.slice_axis(k as isize, s, s + (n - 1).max(0) * st as isize + 1, st);
                if n == 0 {
                    out = out.slice_axis(k as isize, 0, 0, 1);
                }
            }
            out
        }
        2 if r >= 1 => {
            let axes: Vec<isize> = g.subset(r).into_iter().map(|a| a as isize).collect();
            t.flip(&axes).copy().flip(&axes)
        }
        3 if r >= 1 && t.shape().contains(&1) => {
            // a stride-0 broadcast of the unit axes (same values)
            let shape = t.shape();
            let unit = shape.iter().position(|&n| n == 1).unwrap();
            let mut small = shape.clone();
            small[unit] = 1;
            t.broadcast_to(shape)
        }
        _ => t.clone(),
    }
}

pub fn check_case(c: &Case, seed: u64, g: &mut G) -> Result<(), String> {
    let inputs = (c.make)(seed);
    let inputs: Vec<Tensor> = inputs.iter().map(|t| relayout(t, g)).collect();
    let dtypes: Vec<_> = inputs.iter().map(|t| t.dtype()).collect();
    let nds: Vec<Nd> = inputs.iter().map(Nd::of).collect();
    let outs = bind(&c.prim, &inputs).map_err(|e| format!("{c:?}: {e}"))?;
    let avals: Vec<_> = inputs.iter().map(|t| t.aval()).collect();
    let refs: Vec<_> = avals.iter().map(|a| a.as_ref()).collect();
    let expect_avals = shape_rule(&c.prim, &refs).map_err(|e| e.to_string())?;
    let want = apply(&c.prim, &nds, &dtypes);
    if outs.len() != want.len() || outs.len() != expect_avals.len() {
        return Err(format!(
            "{c:?}: {} outputs, the reference gives {}, the shape rule {}",
            outs.len(),
            want.len(),
            expect_avals.len()
        ));
    }
    for (i, ((o, w), a)) in outs.iter().zip(&want).zip(&expect_avals).enumerate() {
        if o.shape() != a.shape || o.dtype() != a.dtype {
            return Err(format!("{c:?}: output {i} is {} {}, the shape rule says {a}", o.dtype(), o.shape()));
        }
        if o.shape().to_vec() != w.shape {
            return Err(format!("{c:?}: output {i} has shape {}, the reference {:?}", o.shape(), w.shape));
        }
        // The reference computes in f64 from the (already rounded) inputs;
        // round it to the output dtype for a fair comparison.
        let want_rounded = Tensor::from_vec(w.data.clone(), w.shape.clone()).cast(o.dtype()).to_vec_f64();
        close(&format!("{c:?} output {i}"), &o.to_vec_f64(), &want_rounded, tol(o.dtype()))?;
    }
    Ok(())
}

#[test]
fn every_primitive_matches_the_f64_reference() {
    for e in entries() {
        for &d in &e.dtypes {
            run(&format!("eval {} {d}", e.name), cases(12), |seed| {
                let mut g = G::new(seed);
                let c = (e.gen)(&mut g, d);
                check_case(&c, seed, &mut g)
            });
        }
    }
}

/// Fails to compile when a primitive is added without a registry entry
/// name here, and checks that each has one.
#[test]
fn registry_covers_every_primitive() {
    fn name_of(p: &Prim) -> &'static str {
        match p {
            Prim::Unary(op) => op.name(),
            Prim::Convert(_) => "convert_element_type",
            Prim::Binary(op) => op.name(),
            Prim::Compare(op) => op.name(),
            Prim::Select => "select",
            Prim::Reduce { op, .. } => op.name(),
            Prim::ArgReduce { op, .. } => op.name(),
            Prim::Cumsum { .. } => "cumsum",
            Prim::BroadcastInDim { .. } => "broadcast_in_dim",
            Prim::Reshape { .. } => "reshape",
            Prim::Transpose { .. } => "transpose",
            Prim::Slice { .. } => "slice",
            Prim::Pad { .. } => "pad",
            Prim::Concatenate { .. } => "concatenate",
            Prim::Rev { .. } => "rev",
            Prim::Iota { .. } => "iota",
            Prim::Copy => "copy",
            Prim::StopGradient => "stop_gradient",
            Prim::DynamicSlice { .. } => "dynamic_slice",
            Prim::DynamicUpdateSlice => "dynamic_update_slice",
            Prim::Gather { .. } => "gather",
            Prim::ScatterAdd { .. } => "scatter_add",
            Prim::DotGeneral(_) => "dot_general",
            Prim::Threefry2x32 => "threefry2x32",
        }
    }
    use xform::core::prim::{ArgOp, BinaryOp, CompareOp, ReduceOp, UnaryOp};
    let mut samples: Vec<Prim> = UnaryOp::ALL.iter().map(|&o| Prim::Unary(o)).collect();
    samples.extend(BinaryOp::ALL.iter().map(|&o| Prim::Binary(o)));
    samples.extend(CompareOp::ALL.iter().map(|&o| Prim::Compare(o)));
    samples.extend([
        Prim::Convert(xform::DType::F32),
        Prim::Select,
        Prim::Reduce { op: ReduceOp::Sum, axes: Default::default() },
        Prim::Reduce { op: ReduceOp::Max, axes: Default::default() },
        Prim::Reduce { op: ReduceOp::Min, axes: Default::default() },
        Prim::ArgReduce { op: ArgOp::Max, axis: 0, index_dtype: xform::DType::I32 },
        Prim::ArgReduce { op: ArgOp::Min, axis: 0, index_dtype: xform::DType::I32 },
        Prim::Cumsum { axis: 0, reverse: false },
        Prim::BroadcastInDim { shape: Default::default(), dims: Default::default() },
        Prim::Reshape { shape: Default::default() },
        Prim::Transpose { perm: Default::default() },
        Prim::Slice { start: Default::default(), limit: Default::default(), strides: Default::default() },
        Prim::Pad { low: Default::default(), high: Default::default(), interior: Default::default() },
        Prim::Concatenate { axis: 0 },
        Prim::Rev { axes: Default::default() },
        Prim::Iota { shape: Default::default(), dim: 0, dtype: xform::DType::F32, device: xform::Device::Cpu },
        Prim::Copy,
        Prim::StopGradient,
        Prim::DynamicSlice { sizes: Default::default() },
        Prim::DynamicUpdateSlice,
        Prim::Gather { axis: 0, batch_dims: 0 },
        Prim::ScatterAdd { axis: 0, batch_dims: 0 },
        Prim::DotGeneral(Default::default()),
        Prim::Threefry2x32,
    ]);
    for p in &samples {
        assert_eq!(name_of(p), p.name());
        assert!(crate::registry::covers(p.name()), "no registry entry for {}", p.name());
    }
}
