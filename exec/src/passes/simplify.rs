//! Exact algebraic simplifications: rewrites that give the same result
//! for every input, bit for bit, NaNs and infinities included:
//!
//! - `x * 1` and `1 * x` -> `x`; `x + 0`, `0 + x` and `x - 0` -> `x`
//!   (a constant operand whose every element is one or zero; for floats
//!   the additive identity is `-0.0`, since `-0.0 + 0.0` is `+0.0`, so
//!   `x + c` needs every element of `c` to be `-0.0` and `x - c` every
//!   element `+0.0`);
//! - `neg(neg(x))` -> `x`;
//! - a conversion to the operand's own dtype -> the operand;
//! - `transpose(transpose(x, p), q)` -> one transpose by the composed
//!   permutation, or `x` when it is the identity; an identity transpose
//!   -> its operand;
//! - `reshape(reshape(x))` -> one reshape, or `x` when the shapes agree; a
//!   reshape to the operand's own shape, a broadcast that adds no axis,
//!   and a unit-step slice of the whole operand -> the operand.
//!
//! Not here, on purpose: `x * 0 -> 0` (`inf * 0` and `NaN * 0` are NaN),
//! `x - x -> 0` (NaN, inf), reassociation (rounding).

use super::Rebuild;
use std::collections::HashMap;
use xform_ops::prim::{BinaryOp, ElementwiseOp, ShapeOp, UnaryOp};
use xform_ops::{Atom, DType, Prim, Program, Result, Tensor, Var};

/// Above this many elements a constant is not read to see whether it is
/// all ones or zeros.
const MAX_INSPECTED: usize = 1 << 16;

/// `p` with the identities above applied.
///
/// # Errors
/// None (the signature is the passes' common one).
pub fn run(p: &Program) -> Result<Program> {
    let mut r = Rebuild::new(p);
    // new variable -> the single-operand primitive that made it, and its operand
    let mut made_by: HashMap<Var, (Prim, Atom)> = HashMap::new();
    for e in &p.eqns {
        let ins = r.atoms(&e.inputs);
        let out = e.outputs[0];
        let is = |a: Atom, v: f64, r: &Rebuild<'_>| r.const_value(a).is_some_and(|t| all_equal(t, v));
        // x + c == x, bit for bit, for c = -0.0 (floats) or 0 (integers)
        let add_zero = |a: Atom, r: &Rebuild<'_>| {
            r.const_value(a).is_some_and(|t| all_equal(t, if t.dtype().is_float() { -0.0 } else { 0.0 }))
        };
        let producer = |a: Atom| match a {
            Atom::Var(v) => made_by.get(&v).cloned(),
            Atom::Const(_) => None,
        };
        let same = match (&e.prim, ins.as_slice()) {
            (Prim::Binary(BinaryOp::Mul), &[x, y]) if is(y, 1.0, &r) => Some(x),
            (Prim::Binary(BinaryOp::Mul), &[x, y]) if is(x, 1.0, &r) => Some(y),
            (Prim::Binary(BinaryOp::Add), &[x, y]) if add_zero(y, &r) => Some(x),
            (Prim::Binary(BinaryOp::Add), &[x, y]) if add_zero(x, &r) => Some(y),
            (Prim::Binary(BinaryOp::Sub), &[x, y]) if is(y, 0.0, &r) => Some(x),
            (Prim::Unary(UnaryOp::Neg), &[x]) => match producer(x) {
                Some((Prim::Unary(UnaryOp::Neg), y)) => Some(y),
                _ => None,
            },
            (Prim::Elementwise(ElementwiseOp::Convert(d)), &[x]) if r.new_aval(x).dtype == *d => Some(x),
            (Prim::Shape(ShapeOp::Transpose { perm }), &[x]) if is_identity(perm) => Some(x),
            (Prim::Shape(ShapeOp::Reshape { shape }), &[x]) if r.new_aval(x).shape == *shape => Some(x),
            (Prim::Shape(ShapeOp::Slice { start, limit, strides }), &[x])
                if start.iter().all(|&s| s == 0)
                    && strides.iter().all(|&s| s == 1)
                    && limit.iter().copied().eq(r.new_aval(x).shape.iter().copied()) =>
            {
                Some(x)
            }
            (Prim::Shape(ShapeOp::BroadcastInDim { shape, dims }), &[x])
                if r.new_aval(x).shape == *shape && is_identity(dims) =>
            {
                Some(x)
            }
            _ => None,
        };
        if let Some(a) = same {
            r.set(out, a);
            continue;
        }
        // chains: one op over the first operand of the chain
        let chained = match (&e.prim, ins.as_slice()) {
            (Prim::Shape(ShapeOp::Transpose { perm }), &[x]) => match producer(x) {
                Some((Prim::Shape(ShapeOp::Transpose { perm: first }), y)) => {
                    let composed: xform_ops::prim::Axes = perm.iter().map(|&i| first[i]).collect();
                    Some(if is_identity(&composed) {
                        Err(y)
                    } else {
                        Ok((Prim::Shape(ShapeOp::Transpose { perm: composed }), y))
                    })
                }
                _ => None,
            },
            (Prim::Shape(ShapeOp::Reshape { shape }), &[x]) => match producer(x) {
                Some((Prim::Shape(ShapeOp::Reshape { .. }), y)) => {
                    Some(if r.new_aval(y).shape == *shape { Err(y) } else { Ok((e.prim.clone(), y)) })
                }
                _ => None,
            },
            _ => None,
        };
        match chained {
            Some(Err(y)) => r.set(out, y),
            Some(Ok((prim, y))) => {
                let v = r.emit(prim.clone(), smallvec::smallvec![y], &e.outputs)[0];
                made_by.insert(v, (prim, y));
            }
            None => {
                let vars = r.emit(e.prim.clone(), ins.clone(), &e.outputs);
                if let (true, &[x]) = (tracked(&e.prim), ins.as_slice()) {
                    made_by.insert(vars[0], (e.prim.clone(), x));
                }
            }
        }
    }
    Ok(r.finish())
}

/// The primitives whose chains the rules above shorten.
fn tracked(prim: &Prim) -> bool {
    matches!(
        prim,
        Prim::Unary(UnaryOp::Neg) | Prim::Shape(ShapeOp::Transpose { .. }) | Prim::Shape(ShapeOp::Reshape { .. })
    )
}

fn is_identity(axes: &[usize]) -> bool {
    axes.iter().enumerate().all(|(i, &a)| i == a)
}

/// True if `t` is a concrete numeric constant whose every element is `v`,
/// bit for bit (so `-0.0` is not `+0.0`).
fn all_equal(t: &Tensor, v: f64) -> bool {
    if t.is_tracer() || t.dtype() == DType::Bool || t.numel() > MAX_INSPECTED {
        return false;
    }
    t.to_vec_f64().iter().all(|&x| x.to_bits() == v.to_bits())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_same, build, push1, vector};
    use super::*;
    use xform_ops::{Aval, Device, Shape};

    fn aval(shape: &[usize], dtype: DType) -> Aval {
        Aval { shape: Shape::from(shape.to_vec()), dtype, device: Device::Cpu }
    }

    /// `x*1`, `1*x`, `x+0`, `0+x`, `x-0` are `x`; `x*0`, `x*2`, `0-x` stay.
    #[test]
    fn arithmetic_identities() {
        let x = Tensor::from_vec(vec![1.5f32, -0.0, f32::INFINITY, f32::NAN, -3.0], [5]);
        let (one, zero, two) =
            (Tensor::full([5], 1.0, DType::F32), Tensor::zeros([5], DType::F32), Tensor::full([5], 2.0, DType::F32));
        let neg_zero = Tensor::full([5], -0.0, DType::F32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let (o, z, t) = (b.constant(&one), b.constant(&zero), b.constant(&two));
            let nz = b.constant(&neg_zero);
            let x = ins[0];
            let a = push1(b, Prim::Binary(BinaryOp::Mul), &[x, o], None);
            let a = push1(b, Prim::Binary(BinaryOp::Mul), &[o, a], None);
            let a = push1(b, Prim::Binary(BinaryOp::Add), &[a, nz], None);
            let a = push1(b, Prim::Binary(BinaryOp::Sub), &[a, z], None);
            let kept1 = push1(b, Prim::Binary(BinaryOp::Mul), &[x, z], None);
            let kept2 = push1(b, Prim::Binary(BinaryOp::Mul), &[x, t], None);
            let kept3 = push1(b, Prim::Binary(BinaryOp::Sub), &[z, x], None);
            vec![a, kept1, kept2, kept3]
        });
        let q = super::super::dce::run(&run(&p).unwrap()).unwrap();
        assert_eq!(q.outputs[0], Atom::Var(q.inputs[0]));
        assert_eq!(q.eqns.len(), 3);
        assert_same(&p, &q, &[x]);
    }

    /// `x + (+0.0)` is kept: it turns `-0.0` into `+0.0`, so only `-0.0`
    /// is the float additive identity.
    #[test]
    fn positive_zero_sums_are_kept() {
        let x = Tensor::from_vec(vec![-0.0f32, 2.0], [2]);
        let zero = Tensor::zeros([2], DType::F32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let z = b.constant(&zero);
            vec![push1(b, Prim::Binary(BinaryOp::Add), &[ins[0], z], None)]
        });
        let q = run(&p).unwrap();
        assert_eq!(q.eqns.len(), 1);
        assert_same(&p, &q, &[x]);
    }

    /// An integer `x + 0` too.
    #[test]
    fn integer_identities() {
        let x = Tensor::from_vec(vec![3i32, -7, 0], [3]);
        let zero = Tensor::zeros([3], DType::I32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let z = b.constant(&zero);
            vec![push1(b, Prim::Binary(BinaryOp::Add), &[z, ins[0]], None)]
        });
        let q = run(&p).unwrap();
        assert!(q.eqns.is_empty());
        assert_same(&p, &q, &[x]);
    }

    /// `neg(neg(x))` is `x`; `neg(neg(neg(x)))` one neg; a conversion to the same dtype goes.
    #[test]
    fn negations_and_conversions() {
        let x = vector(4);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let n = |b: &mut xform_ops::ProgramBuilder, a| push1(b, Prim::Unary(UnaryOp::Neg), &[a], None);
            let n1 = n(b, ins[0]);
            let n2 = n(b, n1);
            let n3 = n(b, n2);
            let c = push1(b, Prim::Elementwise(ElementwiseOp::Convert(DType::F32)), &[n3], None);
            let d = push1(b, Prim::Elementwise(ElementwiseOp::Convert(DType::F64)), &[c], Some(aval(&[4], DType::F64)));
            vec![n2, c, d]
        });
        let q = super::super::dce::run(&run(&p).unwrap()).unwrap();
        assert_eq!(q.outputs[0], Atom::Var(q.inputs[0]));
        assert_eq!(q.eqns.len(), 2, "{q}");
        assert_same(&p, &q, &[x]);
    }

    /// Transposes compose (to the identity or one transpose); reshape
    /// chains are one reshape (or none).
    #[test]
    fn shape_chains() {
        let x = Tensor::linspace(0.0, 23.0, 24, DType::F32).reshape(&[2, 3, 4]);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let tr = |b: &mut xform_ops::ProgramBuilder, a, perm: [usize; 3], shape: [usize; 3]| {
                push1(
                    b,
                    Prim::Shape(ShapeOp::Transpose { perm: perm.into_iter().collect() }),
                    &[a],
                    Some(aval(&shape, DType::F32)),
                )
            };
            let rs = |b: &mut xform_ops::ProgramBuilder, a, shape: &[usize]| {
                push1(
                    b,
                    Prim::Shape(ShapeOp::Reshape { shape: Shape::from(shape.to_vec()) }),
                    &[a],
                    Some(aval(shape, DType::F32)),
                )
            };
            let t1 = tr(b, ins[0], [1, 2, 0], [3, 4, 2]);
            let back = tr(b, t1, [2, 0, 1], [2, 3, 4]);
            let t2 = tr(b, t1, [1, 0, 2], [4, 3, 2]);
            let r1 = rs(b, ins[0], &[6, 4]);
            let r2 = rs(b, r1, &[24]);
            let r3 = rs(b, r2, &[4, 6]);
            let r4 = rs(b, r3, &[2, 3, 4]);
            let same = rs(b, ins[0], &[2, 3, 4]);
            vec![back, t2, r3, r4, same]
        });
        let q = super::super::dce::run(&run(&p).unwrap()).unwrap();
        assert_eq!(q.outputs[0], Atom::Var(q.inputs[0]));
        assert_eq!(q.outputs[3], Atom::Var(q.inputs[0]));
        assert_eq!(q.outputs[4], Atom::Var(q.inputs[0]));
        // t2 is one transpose of x by [2, 1, 0]; r3 one reshape of x
        assert_eq!(q.eqns.len(), 2, "{q}");
        assert!(q
            .eqns
            .iter()
            .any(|e| e.prim == Prim::Shape(ShapeOp::Transpose { perm: [2, 1, 0].into_iter().collect() })));
        assert_same(&p, &q, &[x]);
    }

    /// A slice of the whole operand with unit steps is the operand; one
    /// that drops an element or steps by two stays.
    #[test]
    fn whole_slices() {
        let x = Tensor::linspace(0.0, 11.0, 12, DType::F32).reshape(&[3, 4]);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let sl = |b: &mut xform_ops::ProgramBuilder, limit: [usize; 2], strides: [usize; 2], shape: [usize; 2]| {
                let op = ShapeOp::Slice {
                    start: [0, 0].into_iter().collect(),
                    limit: limit.into_iter().collect(),
                    strides: strides.into_iter().collect(),
                };
                push1(b, Prim::Shape(op), &[ins[0]], Some(aval(&shape, DType::F32)))
            };
            vec![sl(b, [3, 4], [1, 1], [3, 4]), sl(b, [3, 3], [1, 1], [3, 3]), sl(b, [3, 4], [1, 2], [3, 2])]
        });
        let q = super::super::dce::run(&run(&p).unwrap()).unwrap();
        assert_eq!(q.outputs[0], Atom::Var(q.inputs[0]));
        assert_eq!(q.eqns.len(), 2, "{q}");
        assert_same(&p, &q, &[x]);
    }
}
