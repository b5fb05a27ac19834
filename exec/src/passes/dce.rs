//! Dead code elimination: keeps only the equations some output depends on
//! (programs are pure: a dead equation only costs time), and only the
//! constants a kept equation or an output reads.

use super::Rebuild;
use xform_ops::{Program, Result};

/// The live part of `p`.
///
/// # Errors
/// None (the signature is the passes' common one).
pub fn run(p: &Program) -> Result<Program> {
    let live_eqns = p.live_eqns();
    let mut r = Rebuild::new(p);
    for (k, keep) in live_eqns.iter().enumerate() {
        if *keep {
            r.copy_eqn(&p.eqns[k]);
        }
    }
    Ok(r.finish())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_same, build, push1, vector};
    use super::*;
    use xform_ops::prim::{BinaryOp, UnaryOp};
    use xform_ops::{Prim, Tensor};

    /// An equation no output reads goes, with the constant only it read;
    /// the results do not change.
    #[test]
    fn drops_dead_equations_and_constants() {
        let x = vector(7);
        let c = Tensor::full([7], 3.0, xform_ops::DType::F32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let k = b.constant(&c);
            let dead = push1(b, Prim::Binary(BinaryOp::Mul), &[ins[0], k], None);
            let _dead2 = push1(b, Prim::Unary(UnaryOp::Exp), &[dead], None);
            let y = push1(b, Prim::Unary(UnaryOp::Sin), &[ins[0]], None);
            vec![y, ins[0]]
        });
        let q = run(&p).unwrap();
        assert_eq!((p.eqns.len(), q.eqns.len()), (3, 1));
        assert_eq!((p.consts.len(), q.consts.len()), (1, 0));
        assert_same(&p, &q, &[x]);
    }

    /// A program whose outputs are its input and a constant has no equation left.
    #[test]
    fn outputs_that_are_inputs_or_constants() {
        let x = vector(3);
        let c = Tensor::full([2], 1.5, xform_ops::DType::F64);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let k = b.constant(&c);
            let _ = push1(b, Prim::Unary(UnaryOp::Neg), &[ins[0]], None);
            vec![ins[0], k]
        });
        let q = run(&p).unwrap();
        assert!(q.eqns.is_empty());
        assert_eq!(q.consts.len(), 1);
        assert_same(&p, &q, &[x]);
    }
}
