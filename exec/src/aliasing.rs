//! Which outputs of an optimized program a call copies, so that its
//! results share storage only where eager execution's would.
//!
//! NOTE: [output aliasing] Eager results are fresh tensors except where
//! `f` returns an argument, a view of one, or one tensor twice; a caller
//! may then write any result in place (PyTorch semantics) and expects
//! that write to reach exactly what it would reach eagerly. The passes
//! can add sharing that the traced program did not have: `x * 1` becomes
//! `x` (a result that is the caller's argument), and common subexpression
//! elimination makes `(x.exp(), x.exp())` one value returned twice. Such an
//! output is copied after each call (`Compiled::copied`). Constants are
//! not this module's concern: the plan copies an output that shares
//! storage with a constant of the program (`Plan::outputs`) whatever the
//! trace said, as a constant is the same buffer on every call.

use xform_ops::{Atom, Program};

/// Where a value's storage comes from: an argument, a constant, or the
/// result of a primitive that is not a view (followed back through the
/// primitives whose result may share storage with their operand).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Root {
    Input(usize),
    Const,
    Fresh(u32),
}

/// The storage root of each output of `p`.
fn output_roots(p: &Program) -> Vec<Root> {
    // every variable its own root, until an input or a view says otherwise
    let mut roots: Vec<Root> = (0..p.avals.len() as u32).map(Root::Fresh).collect();
    for (i, v) in p.inputs.iter().enumerate() {
        roots[v.0 as usize] = Root::Input(i);
    }
    let root_of = |roots: &[Root], a: &Atom| match a {
        Atom::Var(v) => roots[v.0 as usize],
        Atom::Const(_) => Root::Const,
    };
    for e in &p.eqns {
        if let (true, Some(a)) = (e.prim.aliases_operand(), e.inputs.first()) {
            let r = root_of(&roots, a);
            for v in &e.outputs {
                roots[v.0 as usize] = r;
            }
        }
    }
    p.outputs.iter().map(|a| root_of(&roots, a)).collect()
}

/// The indices among the first `n_out` outputs of `optimized` that must be
/// copied after a call: those that share storage with an argument, or with
/// an earlier output, where the same outputs of `traced` (the program as
/// `f` built it, with the same inputs and outputs) did not.
pub(crate) fn outputs_to_copy(traced: &Program, optimized: &Program, n_out: usize) -> Vec<usize> {
    let was = output_roots(traced);
    let now = output_roots(optimized);
    let n = n_out.min(was.len()).min(now.len());
    let mut copied: Vec<usize> = Vec::new();
    for k in 0..n {
        let copy = match now[k] {
            Root::Const => false,
            Root::Input(_) if now[k] != was[k] => true,
            // against the earlier outputs that are returned as they are
            r => (0..k).any(|j| !copied.contains(&j) && now[j] == r && was[j] != was[k]),
        };
        if copy {
            copied.push(k);
        }
    }
    copied
}

/// Whether some of the first `n_out` outputs of `p` (the program as traced:
/// sharing the passes add is undone by `outputs_to_copy`) share storage
/// with an argument (an argument returned, or a view of one) or with each
/// other (one value returned twice, or views of it): a replay that
/// assembles each output into its own buffer (NOTE: [batch split]) would
/// break that sharing, so such a program is replayed whole.
pub(crate) fn outputs_share_storage(p: &Program, n_out: usize) -> bool {
    let roots = output_roots(p);
    let roots = &roots[..n_out.min(roots.len())];
    roots.iter().enumerate().any(|(k, r)| match r {
        Root::Input(_) => true,
        Root::Const => false,
        Root::Fresh(_) => roots[..k].contains(r),
    })
}

#[cfg(test)]
mod tests {
    use super::super::passes::testing::{build, push1, vector};
    use super::*;
    use xform_ops::prim::{ShapeOp, UnaryOp};
    use xform_ops::{Aval, DType, Device, Prim, Shape};

    fn square() -> Option<Aval> {
        Some(Aval { shape: Shape::from([2, 2]), dtype: DType::F32, device: Device::Cpu })
    }

    /// Argument passthrough and duplicates that the trace had are kept;
    /// those only the optimized program has are copied.
    #[test]
    fn sharing_the_passes_added_is_copied() {
        let x = vector(4);
        let traced = build(std::slice::from_ref(&x), |b, ins| {
            let e1 = push1(b, Prim::Unary(UnaryOp::Exp), &[ins[0]], None);
            let e2 = push1(b, Prim::Unary(UnaryOp::Exp), &[ins[0]], None);
            let n = push1(b, Prim::Unary(UnaryOp::Neg), &[ins[0]], None);
            let nn = push1(b, Prim::Unary(UnaryOp::Neg), &[n], None);
            let r = push1(b, Prim::Shape(ShapeOp::Reshape { shape: Shape::from([2, 2]) }), &[ins[0]], square());
            vec![ins[0], e1, e2, e1, nn, r]
        });
        let optimized = build(std::slice::from_ref(&x), |b, ins| {
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[ins[0]], None);
            let r = push1(b, Prim::Shape(ShapeOp::Reshape { shape: Shape::from([2, 2]) }), &[ins[0]], square());
            vec![ins[0], e, e, e, ins[0], r]
        });
        // x as traced: kept; e2 merged into e1: copied; e1 returned twice
        // as traced: kept; neg(neg(x)) now x: copied; a reshape of x: kept
        assert_eq!(outputs_to_copy(&traced, &optimized, 6), vec![2, 4]);
        assert_eq!(outputs_to_copy(&traced, &traced, 6), Vec::<usize>::new());
        // an argument, a value twice, a view of an argument
        assert!(outputs_share_storage(&optimized, 1));
        assert!(outputs_share_storage(&optimized, 3));
        assert!(outputs_share_storage(&traced, 1));
    }

    /// Fresh values, each returned once, share nothing; a reshape of one
    /// returned beside it shares its storage.
    #[test]
    fn fresh_outputs_share_nothing() {
        let x = vector(4);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[ins[0]], None);
            let n = push1(b, Prim::Unary(UnaryOp::Neg), &[ins[0]], None);
            let r = push1(b, Prim::Shape(ShapeOp::Reshape { shape: Shape::from([2, 2]) }), &[e], square());
            vec![e, n, r]
        });
        assert!(!outputs_share_storage(&p, 2));
        assert!(outputs_share_storage(&p, 3));
    }
}
