//! Every primitive, every listed dtype: the kernels against the naive f64
//! reference, on random shapes (size-0 and size-1 axes included), with
//! inputs that are often non-contiguous views (transposed, sliced,
//! reversed, broadcast).

use crate::harness::{cases, close, run, tol};
use crate::reference::{apply, Nd};
use crate::registry::{entries, Case, G};
use xform::core::prim::shape_rule;
use xform::{DType, Prim, Tensor};

/// The same values in a different layout: a transposed, sliced, reversed
/// or broadcast view of some other storage (the emulation of the CUDA
/// kernels reads its inputs through these too).
pub fn relayout(t: &Tensor, g: &mut G) -> Tensor {
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
            // a stride-0 broadcast along the unit axes (same values)
            let shape = t.shape();
            let kept: Vec<usize> = (0..r).filter(|&a| shape[a] != 1).collect();
            let squeezed = t.reshape_to(kept.iter().map(|&a| shape[a]).collect::<Vec<_>>());
            xform::lax::broadcast_in_dim(&squeezed, &shape, &kept).unwrap()
        }
        _ => t.clone(),
    }
}

/// The shape rule of a collective on stacked operands (leading axis: the
/// named axis of size `n`), run where the name is bound, with the axis
/// put back in front of each result.
fn named_avals(prim: &Prim, stacked: &[xform::Aval], name: &str, n: usize) -> Result<Vec<xform::Aval>, String> {
    let per: Vec<xform::Aval> = stacked
        .iter()
        .map(|a| {
            let mut a = a.clone();
            a.shape.0.remove(0);
            a
        })
        .collect();
    let got = std::cell::RefCell::new(None);
    let opts = xform::VmapOptions::new().axis_name(name).axis_size(n).in_axes(None::<isize>);
    xform::vmap_with(
        |_: &Vec<Tensor>| {
            let refs: Vec<_> = per.iter().map(|a| a.as_ref()).collect();
            *got.borrow_mut() = Some(shape_rule(prim, &refs));
            Vec::<Tensor>::new()
        },
        opts,
    )(&Vec::new());
    let avals = got.into_inner().expect("ran").map_err(|e| e.to_string())?;
    Ok(avals
        .into_iter()
        .map(|mut a| {
            a.shape.0.insert(0, n);
            a
        })
        .collect())
}

pub fn check_case(c: &Case, seed: u64, g: &mut G) -> Result<(), String> {
    let inputs = (c.make)(seed);
    let inputs: Vec<Tensor> = inputs.iter().map(|t| relayout(t, g)).collect();
    let dtypes: Vec<_> = inputs.iter().map(|t| t.dtype()).collect();
    let nds: Vec<Nd> = inputs.iter().map(Nd::of).collect();
    let outs = c.apply(&inputs).map_err(|e| format!("{c:?}: {e}"))?;
    let avals: Vec<_> = inputs.iter().map(|t| t.aval()).collect();
    let refs: Vec<_> = avals.iter().map(|a| a.as_ref()).collect();
    let (expect_avals, want) = match (&c.axis, &c.prim) {
        (Some((name, n)), Prim::Collective(op)) => {
            (named_avals(&c.prim, &avals, name, *n)?, vec![crate::reference::collective::apply(op, &nds, *n)])
        }
        _ => (shape_rule(&c.prim, &refs).map_err(|e| e.to_string())?.into_vec(), apply(&c.prim, &nds, &dtypes)),
    };
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

/// Every kind of every family (`Prim::all_kinds`, derived from the
/// families' enums, not listed here) is drawn by some registry entry, and
/// each entry is named after what it draws.
#[test]
fn registry_covers_every_primitive() {
    let mut drawn = Vec::new();
    for e in entries() {
        for &d in &e.dtypes {
            for seed in 0..4 {
                let c = (e.gen)(&mut G::new(seed), d);
                let name = c.prim.name();
                assert!(e.name == name || e.name.starts_with(&format!("{name}(")), "entry {} draws {}", e.name, c.prim);
                drawn.push(c.prim.kind());
            }
        }
    }
    let kinds = Prim::all_kinds();
    assert!(kinds.len() >= 60, "only {} kinds", kinds.len());
    for k in kinds {
        assert!(drawn.contains(&k), "no registry entry draws {k:?}");
    }
}

/// Every elementwise op has a CUDA form for each dtype it accepts on the
/// CPU (checked in the default build: the CUDA C is generated without the
/// `cuda` feature), and the catalog of generated kernels names each once.
#[test]
fn every_elementwise_op_has_its_cuda_source() {
    use xform::core::prims::{binary, unary};
    for op in xform::core::prim::UnaryOp::examples() {
        for d in DType::ALL {
            assert_eq!(op.accepts(d), unary::cuda_expr(op, d).is_some(), "{} on {d}", op.name());
        }
    }
    for &op in xform::core::prim::BinaryOp::ALL {
        for d in DType::ALL {
            assert_eq!(op.accepts(d), binary::cuda_expr(op, d).is_some(), "{} on {d}", op.name());
        }
    }
    let catalog = Prim::cuda_catalog();
    let mut names: Vec<&str> = catalog.iter().map(|k| k.name.as_str()).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "two generated kernels share a name");
    for op in xform::core::prim::UnaryOp::examples() {
        let tag = op.name();
        assert!(
            catalog.iter().any(|k| k.name.contains(tag) && k.source.contains("extern \"C\"")),
            "no kernel for {tag}"
        );
    }
}
