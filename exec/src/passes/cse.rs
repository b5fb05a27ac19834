//! Common subexpression elimination: an equation with the same primitive,
//! parameters and (renamed) operands as an earlier one is not computed
//! again; its outputs are the earlier one's. Programs are pure (random
//! bits come from explicit keys), so this never changes a result.

use super::Rebuild;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use xform_ops::{Atom, Prim, Program, Result, Var};

/// `p` with repeated equations computed once.
///
/// # Errors
/// None (the signature is the passes' common one).
pub fn run(p: &Program) -> Result<Program> {
    let mut r = Rebuild::new(p);
    // hash of (name, operands) -> earlier equations: (prim, operands, outputs)
    type Seen = Vec<(Prim, SmallVec<[Atom; 4]>, SmallVec<[Var; 2]>)>;
    let mut seen: HashMap<u64, Seen> = HashMap::new();
    for e in &p.eqns {
        let ins = r.atoms(&e.inputs);
        let key = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            e.prim.name().hash(&mut h);
            ins.hash(&mut h);
            h.finish()
        };
        let bucket = seen.entry(key).or_default();
        if let Some((_, _, outs)) = bucket.iter().find(|(prim, i, _)| *prim == e.prim && *i == ins) {
            for (o, n) in e.outputs.iter().zip(outs.clone()) {
                r.set(*o, Atom::Var(n));
            }
            continue;
        }
        let outs = r.emit(e.prim.clone(), ins.clone(), &e.outputs);
        bucket.push((e.prim.clone(), ins, outs));
    }
    Ok(r.finish())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_same, build, push1, vector};
    use super::*;
    use xform_ops::prim::{BinaryOp, ShapeOp, UnaryOp};
    use xform_ops::{Shape, Tensor};

    /// `sin(x)` twice is one `sin`; so is everything built on equal
    /// operands after the first merge (`sin(x) * sin(x)` twice).
    #[test]
    fn merges_repeated_equations_transitively() {
        let x = vector(9);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let s1 = push1(b, Prim::Unary(UnaryOp::Sin), &[ins[0]], None);
            let s2 = push1(b, Prim::Unary(UnaryOp::Sin), &[ins[0]], None);
            let m1 = push1(b, Prim::Binary(BinaryOp::Mul), &[s1, s1], None);
            let m2 = push1(b, Prim::Binary(BinaryOp::Mul), &[s2, s2], None);
            let c = push1(b, Prim::Unary(UnaryOp::Cos), &[ins[0]], None);
            vec![m1, m2, c]
        });
        let q = run(&p).unwrap();
        assert_eq!((p.eqns.len(), q.eqns.len()), (5, 3));
        assert_eq!(q.outputs[0], q.outputs[1]);
        assert_same(&p, &q, &[x]);
    }

    /// Different parameters or different operands are different equations.
    #[test]
    fn keeps_equations_that_differ() {
        let x = Tensor::linspace(0.0, 1.0, 6, xform_ops::DType::F32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let aval = |d: &[usize]| xform_ops::Aval {
                shape: Shape::from(d.to_vec()),
                dtype: xform_ops::DType::F32,
                device: xform_ops::Device::Cpu,
            };
            let r1 = push1(
                b,
                Prim::Shape(ShapeOp::Reshape { shape: Shape::from(vec![2, 3]) }),
                &[ins[0]],
                Some(aval(&[2, 3])),
            );
            let r2 = push1(
                b,
                Prim::Shape(ShapeOp::Reshape { shape: Shape::from(vec![3, 2]) }),
                &[ins[0]],
                Some(aval(&[3, 2])),
            );
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[ins[0]], None);
            let l = push1(b, Prim::Unary(UnaryOp::Exp), &[e], None);
            vec![r1, r2, e, l]
        });
        let q = run(&p).unwrap();
        assert_eq!(q.eqns.len(), 4);
        assert_same(&p, &q, &[x]);
    }
}
