//! Constant folding: an equation whose operands are all concrete
//! constants is evaluated once, when the program is optimized, and its
//! outputs become constants. (Staging already computes everything that
//! does not depend on the inputs; what is left to fold is what the other
//! passes expose, and programs built by other means, such as linearize's.)
//!
//! An equation that would make a constant of more than
//! [`MAX_FOLDED_ELEMENTS`] elements, larger than its operands together
//! (a broadcast or a pad of a small constant), is left in place: folding
//! it would trade a cheap kernel for memory held as long as the program.
//! An equation whose evaluation fails is left in place too (it then fails,
//! or not, when the program runs, as it would have).

use super::Rebuild;
use smallvec::SmallVec;
use xform_ops::{Program, Result, Tensor};

/// Above this many elements, a folded constant must be no larger than
/// the operands it is computed from.
pub const MAX_FOLDED_ELEMENTS: usize = 1 << 16;

/// `p` with its constant equations evaluated.
///
/// # Errors
/// None (an equation that fails to evaluate is kept).
pub fn run(p: &Program) -> Result<Program> {
    let mut r = Rebuild::new(p);
    for e in &p.eqns {
        let consts: Option<SmallVec<[Tensor; 4]>> =
            e.inputs.iter().map(|a| r.peek_const(*a).filter(|t| !t.is_tracer()).cloned()).collect();
        let foldable = match &consts {
            // a collective is its map's to apply, wherever the program runs
            Some(_) if !e.prim.axis_names().is_empty() => false,
            Some(c) if !c.is_empty() => {
                let in_elems: usize = c.iter().map(Tensor::numel).sum();
                e.outputs.iter().all(|v| {
                    let n = p.aval(*v).shape.numel();
                    n <= MAX_FOLDED_ELEMENTS || n <= in_elems
                })
            }
            _ => false,
        };
        if foldable {
            let c = consts.expect("checked");
            if let Ok(outs) = xform_ops::bind(&e.prim, &c) {
                for (v, t) in e.outputs.iter().zip(outs) {
                    r.set_const(*v, t);
                }
                continue;
            }
        }
        r.copy_eqn(e);
    }
    Ok(r.finish())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_same, build, push1, vector};
    use super::*;
    use xform_ops::prim::{BinaryOp, ShapeOp, UnaryOp};
    use xform_ops::{Aval, DType, Device, Prim, Shape};

    /// `exp(c) * x` with `c` constant: the `exp` is computed once, and its
    /// value is the eager one.
    #[test]
    fn folds_constant_equations() {
        let x = vector(5);
        let c = Tensor::linspace(0.0, 1.0, 5, DType::F32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let k = b.constant(&c);
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[k], None);
            let s = push1(b, Prim::Binary(BinaryOp::Add), &[e, k], None);
            vec![push1(b, Prim::Binary(BinaryOp::Mul), &[s, ins[0]], None)]
        });
        let q = run(&p).unwrap();
        assert_eq!(q.eqns.len(), 1);
        assert_eq!(q.consts.len(), 1);
        let want = (c.exp() + &c).to_vec::<f32>();
        assert_eq!(q.consts[0].to_vec::<f32>(), want);
        assert_same(&p, &q, &[x]);
    }

    /// A broadcast of a scalar constant into a large shape stays an equation.
    #[test]
    fn keeps_large_materializations() {
        let n = MAX_FOLDED_ELEMENTS + 1;
        let x = Tensor::zeros([n], DType::F32);
        let c = Tensor::scalar(2.0f32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let k = b.constant(&c);
            let aval = Aval { shape: Shape::from([n]), dtype: DType::F32, device: Device::Cpu };
            let bc = Prim::Shape(ShapeOp::BroadcastInDim { shape: Shape::from([n]), dims: Default::default() });
            let big = push1(b, bc, &[k], Some(aval));
            vec![push1(b, Prim::Binary(BinaryOp::Add), &[big, ins[0]], None)]
        });
        let q = run(&p).unwrap();
        assert_eq!(q.eqns.len(), 2);
        assert_same(&p, &q, &[x]);
    }
}
