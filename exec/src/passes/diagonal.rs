//! Products with a diagonal matrix, as scalings.
//!
//! `jacrev` seeds its backward pass with the identity: the cotangent of an
//! elementwise op is `eye * broadcast(v)` (or `eye / broadcast(v)`, or a
//! multiple of the identity), a diagonal matrix, which the next linear map
//! then contracts in a GEMM of `n^3` multiply-adds of which `n^2` are not
//! by zero (W3's `jacrev(tanh(A x))` spent 90% of its time there). This
//! pass finds
//!
//! ```text
//! g = mul(D, broadcast_in_dim(v))     D a constant [n, n], zero off its diagonal
//!     (or mul(broadcast_in_dim(v), D), div(D, broadcast_in_dim(v)), or
//!     select(broadcast_in_dim(p), D1, D2): relu's)
//! h = dot_general(O, g)               (or (g, O)): one contracted axis, no batch axes
//! ```
//!
//! and computes `h` as the scaling of `O` along its contracted axis by
//! `s = diag(D) op v` (`select(p, diag(D1), diag(D2))`):
//! `h[a, b] = O[a, b] * s[b]` (transposed as the axes say). That is the GEMM's result when every other term of its sums is a
//! zero, `O[a, k] * (0 op v[k'])`: the one term that is not is the same
//! product, and adding zeros to it leaves it unchanged (only the sign of
//! a zero result may differ: the GEMM adds signed zeros in its own
//! order). The other terms are zeros when every `0 op v[k]` is (for
//! `mul`, `v` finite; for `div`, `v` neither zero nor NaN) and `O` is
//! finite. The rewrite is guarded: `h` becomes a `cond` on
//! `sum(0 op v) [+ sum(O * 0)] == 0` (NaN exactly when a term is not a
//! zero) between the original product (taken then, so infinities and NaNs
//! spread as they did) and the scaling. A `select` is zero off its
//! diagonal whatever `p` is, so only a variable `O` is checked, and with a
//! constant `O` the scaling replaces the product outright. A constant `O`
//! that is not finite is not rewritten.
//!
//! Only on the CPU (on CUDA the predicate would be read on the host: a
//! synchronization per call), for f32 and f64, and for products of at
//! least [`MIN_WORK`] multiply-adds (a small GEMM is left as it is: the
//! predicate and the `cond` are steps of their own).

use super::Rebuild;
use smallvec::{smallvec, SmallVec};
use std::collections::HashMap;
use std::sync::Arc;
use xform_ops::prim::{
    Axes, BinaryOp, Body, CompareOp, ControlOp, ElementwiseOp, LinalgOp, ReduceOp, Reduction, ShapeOp,
};
use xform_ops::{Atom, Aval, DType, Device, Prim, Program, ProgramBuilder, Result, Shape, Tensor, Var};

/// The fewest multiply-adds (`m * n * k`) of a product this pass rewrites.
pub const MIN_WORK: usize = 1 << 15;

/// The most elements of a constant read to see whether it is diagonal (or
/// finite).
const MAX_INSPECTED: usize = 1 << 22;

/// An operand of the op that makes a diagonal matrix.
#[derive(Clone)]
enum Operand {
    /// A constant diagonal matrix `D`, and its diagonal.
    Diagonal { matrix: Tensor, d: Tensor },
    /// `broadcast_in_dim(v)`.
    Broadcast,
}

/// A diagonal matrix `g = prim(operands)`: `mul(D, b)`, `mul(b, D)`,
/// `div(D, b)` or `select(b, D1, D2)` with `b = broadcast_in_dim(v)`.
#[derive(Clone)]
struct Diagonal {
    prim: Prim,
    operands: SmallVec<[Operand; 3]>,
    /// The vector `v`, an atom of the old program.
    v: Atom,
    /// The broadcast that made `broadcast_in_dim(v)`.
    broadcast: Prim,
}

impl Diagonal {
    /// Does a finite product need `0 op v` checked? (`select` picks one of
    /// two zeros off the diagonal whatever `v` is.)
    fn guards_v(&self) -> bool {
        !matches!(self.prim, Prim::Elementwise(ElementwiseOp::Select))
    }

    /// `prim` on the operands with each diagonal matrix replaced by its
    /// diagonal (`diagonal`) or by zeros (not), and the broadcast by `v`;
    /// `b` enters a constant.
    fn on_vectors(&self, b: &mut dyn FnMut(&Tensor) -> Atom, v: Atom, diagonal: bool) -> SmallVec<[Atom; 4]> {
        self.operands
            .iter()
            .map(|o| match o {
                Operand::Diagonal { d, .. } if diagonal => b(d),
                Operand::Diagonal { d, .. } => b(&Tensor::zeros(d.shape().to_vec(), d.dtype())),
                Operand::Broadcast => v,
            })
            .collect()
    }
}

/// `p` with its products by diagonal matrices turned into guarded scalings.
///
/// # Errors
/// None (the signature is the passes' common one).
pub fn run(p: &Program) -> Result<Program> {
    let diagonals = find_diagonals(p);
    if diagonals.is_empty() {
        return Ok(p.clone());
    }
    let mut r = Rebuild::new(p);
    for e in &p.eqns {
        if let Some(rw) = rewrite_of(p, e, &diagonals) {
            emit_guarded(&mut r, p, e, &rw);
        } else {
            r.copy_eqn(e);
        }
    }
    Ok(r.finish())
}

/// The variables of `p` that are diagonal matrices of the form above.
fn find_diagonals(p: &Program) -> HashMap<Var, Diagonal> {
    let mut broadcasts: HashMap<Var, (Atom, Prim)> = HashMap::new();
    let mut found = HashMap::new();
    for e in &p.eqns {
        if let (Prim::Shape(ShapeOp::BroadcastInDim { shape, dims }), &[v]) = (&e.prim, e.inputs.as_slice()) {
            let from = p.atom_aval(v);
            let square = shape.len() == 2 && shape[0] == shape[1];
            if square && from.shape.len() == 1 && from.shape[0] == shape[0] && dims.len() == 1 {
                broadcasts.insert(e.outputs[0], (v, e.prim.clone()));
            }
            continue;
        }
        // which operand positions are the broadcast (one) and diagonal constants
        let layout: &[bool] = match (&e.prim, e.inputs.len()) {
            (Prim::Binary(BinaryOp::Mul), 2) => {
                if matches!(e.inputs[0], Atom::Const(_)) {
                    &[false, true]
                } else {
                    &[true, false]
                }
            }
            // x / D is not diagonal (x / 0)
            (Prim::Binary(BinaryOp::Div), 2) => &[false, true],
            (Prim::Elementwise(ElementwiseOp::Select), 3) => &[true, false, false],
            _ => continue,
        };
        let out = p.aval(e.outputs[0]);
        if !on_cpu_float(out) {
            continue;
        }
        let mut v = None;
        let operands: Option<SmallVec<[Operand; 3]>> = e
            .inputs
            .iter()
            .zip(layout)
            .map(|(a, &is_broadcast)| match (a, is_broadcast) {
                (Atom::Var(bv), true) => {
                    v = Some(broadcasts.get(bv)?.clone());
                    Some(Operand::Broadcast)
                }
                (Atom::Const(i), false) => {
                    let matrix = p.consts[*i].clone();
                    let d = diagonal_of(&matrix, out.dtype)?;
                    Some(Operand::Diagonal { matrix, d })
                }
                _ => None,
            })
            .collect();
        if let (Some(operands), Some((v, broadcast))) = (operands, v) {
            found.insert(e.outputs[0], Diagonal { prim: e.prim.clone(), operands, v, broadcast });
        }
    }
    found
}

fn on_cpu_float(a: &Aval) -> bool {
    a.device == Device::Cpu && matches!(a.dtype, DType::F32 | DType::F64)
}

/// The diagonal of `t` if it is a concrete square matrix of `dtype` whose
/// every element off the diagonal is a zero (of either sign).
fn diagonal_of(t: &Tensor, dtype: DType) -> Option<Tensor> {
    let shape = t.shape();
    if t.is_tracer() || t.dtype() != dtype || shape.len() != 2 || shape[0] != shape[1] || t.numel() > MAX_INSPECTED {
        return None;
    }
    let n = shape[0];
    let values = t.to_vec_f64();
    let off_zero = values.iter().enumerate().all(|(i, x)| i / n == i % n || *x == 0.0);
    if !off_zero {
        return None;
    }
    let diag = (0..n).map(|i| values[i * n + i]);
    // f32 -> f64 -> f32 is exact
    Some(match dtype {
        DType::F32 => Tensor::from_vec(diag.map(|x| x as f32).collect::<Vec<_>>(), [n]),
        _ => Tensor::from_vec(diag.collect::<Vec<_>>(), [n]),
    })
}

/// A product to rewrite: the diagonal operand, which side it is on, and
/// the other operand with its contracted axis.
struct Rewrite {
    diag: Diagonal,
    /// True if the diagonal matrix is the lhs.
    diag_lhs: bool,
    other: Atom,
    /// The contracted axis of the other operand.
    other_axis: usize,
}

fn rewrite_of(p: &Program, e: &xform_ops::Eqn, diagonals: &HashMap<Var, Diagonal>) -> Option<Rewrite> {
    let Prim::Linalg(LinalgOp::DotGeneral(dims)) = &e.prim else { return None };
    let &[lhs, rhs] = e.inputs.as_slice() else { return None };
    let one_contraction = dims.lhs_contract.len() == 1 && dims.rhs_contract.len() == 1;
    if !one_contraction || !dims.lhs_batch.is_empty() || !dims.rhs_batch.is_empty() {
        return None;
    }
    let out = p.aval(e.outputs[0]);
    let (la, ra) = (p.atom_aval(lhs), p.atom_aval(rhs));
    if !on_cpu_float(out)
        || la.shape.len() != 2
        || ra.shape.len() != 2
        || la.dtype != out.dtype
        || ra.dtype != out.dtype
    {
        return None;
    }
    if la.shape[0] * la.shape[1] * ra.shape[1 - dims.rhs_contract[0]] < MIN_WORK {
        return None;
    }
    let diag_of = |a: Atom| match a {
        Atom::Var(v) => diagonals.get(&v).cloned(),
        Atom::Const(_) => None,
    };
    let (diag, diag_lhs, other, other_axis) = match (diag_of(lhs), diag_of(rhs)) {
        (_, Some(d)) => (d, false, lhs, dims.lhs_contract[0]),
        (Some(d), None) => (d, true, rhs, dims.rhs_contract[0]),
        (None, None) => return None,
    };
    // a constant operand must be finite (its products with the zeros of
    // the diagonal matrix are then zeros); a variable one is checked when
    // the program runs
    if let Atom::Const(i) = other {
        let c = &p.consts[i];
        if c.is_tracer() || c.numel() > MAX_INSPECTED || !c.to_vec_f64().iter().all(|x| x.is_finite()) {
            return None;
        }
    }
    Some(Rewrite { diag, diag_lhs, other, other_axis })
}

/// Emits, for the product `e`, the finiteness predicate and the `cond`
/// between the original product (branch 0) and the scaling (branch 1);
/// the scaling alone when nothing needs checking (a `select` of
/// diagonals against a constant).
fn emit_guarded(r: &mut Rebuild<'_>, p: &Program, e: &xform_ops::Eqn, rw: &Rewrite) {
    let v = r.atom(rw.diag.v);
    let other = r.atom(rw.other);
    let other_is_var = matches!(other, Atom::Var(_));
    let v_aval = r.new_aval(v);
    let other_aval = r.new_aval(other);
    let out_aval = p.aval(e.outputs[0]).clone();
    let vector = Aval { shape: v_aval.shape.clone(), ..out_aval.clone() };
    let scalar = Aval { shape: Shape::from(Vec::<usize>::new()), ..out_aval.clone() };
    // sum(prim(0, v)) [+ sum(other * 0)]: NaN when a term of the product
    // off the diagonal is not a zero
    let mut total = None;
    if rw.diag.guards_v() {
        let ins = rw.diag.on_vectors(&mut |t| r.constant(t), v, false);
        let t = r.emit_new(rw.diag.prim.clone(), ins, vector.clone());
        total = Some(sum_all(r, Atom::Var(t), &vector));
    }
    if other_is_var {
        let zeros = r.constant(&Tensor::zeros(other_aval.shape.clone(), other_aval.dtype));
        let z = r.emit_new(Prim::Binary(BinaryOp::Mul), smallvec![other, zeros], other_aval.clone());
        let t = sum_all(r, Atom::Var(z), &other_aval);
        total = Some(match total {
            Some(s) => Atom::Var(r.emit_new(Prim::Binary(BinaryOp::Add), smallvec![s, t], scalar.clone())),
            None => t,
        });
    }
    // the branches take (v, other) when other is a variable, else (v)
    let mut in_avals = vec![v_aval.clone()];
    if other_is_var {
        in_avals.push(other_aval.clone());
    }
    let const_other = if other_is_var { None } else { r.const_value(other).cloned() };
    let scaling = branch(&in_avals, const_other.as_ref(), |b, v, o| {
        let ins = rw.diag.on_vectors(&mut |t| b.constant(t), v, true);
        let s = push(b, rw.diag.prim.clone(), &ins, vector.clone());
        // the other operand scaled along its contracted axis (read in its
        // own layout), then transposed if that axis is not where the
        // diagonal's free axis is in the result (last when the diagonal
        // is the rhs)
        let axis: Axes = smallvec![rw.other_axis];
        let bcast = Prim::Shape(ShapeOp::BroadcastInDim { shape: other_aval.shape.clone(), dims: axis });
        let sb = push(b, bcast, &[s], other_aval.clone());
        let scaled =
            push(b, Prim::Binary(BinaryOp::Mul), &if rw.diag_lhs { [sb, o] } else { [o, sb] }, other_aval.clone());
        let want_axis = if rw.diag_lhs { 0 } else { 1 };
        if rw.other_axis == want_axis {
            scaled
        } else {
            push(b, Prim::Shape(ShapeOp::Transpose { perm: smallvec![1, 0] }), &[scaled], out_aval.clone())
        }
    });
    let Some(total) = total else {
        inline(r, &scaling, &[v], e.outputs[0]);
        return;
    };
    let zero = r.constant(&Tensor::zeros(Shape::from(Vec::<usize>::new()), out_aval.dtype));
    let pred_aval = Aval { shape: Shape::from(Vec::<usize>::new()), dtype: DType::Bool, device: out_aval.device };
    let pred = r.emit_new(Prim::Compare(CompareOp::Eq), smallvec![total, zero], pred_aval);
    let product = branch(&in_avals, const_other.as_ref(), |b, v, o| {
        let n = v_aval.shape[0];
        let bc = push(b, rw.diag.broadcast.clone(), &[v], Aval { shape: Shape::from([n, n]), ..v_aval.clone() });
        let ins: SmallVec<[Atom; 4]> = rw
            .diag
            .operands
            .iter()
            .map(|op| match op {
                Operand::Diagonal { matrix, .. } => b.constant(matrix),
                Operand::Broadcast => bc,
            })
            .collect();
        let g = push(b, rw.diag.prim.clone(), &ins, Aval { shape: Shape::from([n, n]), ..out_aval.clone() });
        push(b, e.prim.clone(), &if rw.diag_lhs { [g, o] } else { [o, g] }, out_aval.clone())
    });
    let branches: Arc<[Body]> = vec![Body::new(product), Body::new(scaling)].into();
    let mut ins: SmallVec<[Atom; 4]> = smallvec![Atom::Var(pred), v];
    if other_is_var {
        ins.push(other);
    }
    r.emit(Prim::Control(ControlOp::Cond { branches }), ins, &e.outputs);
}

/// The sum of every element of `x`.
fn sum_all(r: &mut Rebuild<'_>, x: Atom, aval: &Aval) -> Atom {
    let axes: Axes = (0..aval.shape.len()).collect();
    let scalar = Aval { shape: Shape::from(Vec::<usize>::new()), ..aval.clone() };
    Atom::Var(r.emit_new(Prim::Reduce(Reduction::Reduce { op: ReduceOp::Sum, axes }), smallvec![x], scalar))
}

/// Emits the equations of the one-output program `body` on `ins`, its
/// output renamed to the old variable `out`.
fn inline(r: &mut Rebuild<'_>, body: &Program, ins: &[Atom], out: Var) {
    let mut map: HashMap<Var, Atom> = body.inputs.iter().copied().zip(ins.iter().copied()).collect();
    let atom = |a: Atom, r: &mut Rebuild<'_>, map: &HashMap<Var, Atom>| match a {
        Atom::Var(v) => map[&v],
        Atom::Const(i) => r.constant(&body.consts[i]),
    };
    for e in &body.eqns {
        let new_ins: SmallVec<[Atom; 4]> = e.inputs.iter().map(|a| atom(*a, r, &map)).collect();
        let v = r.emit_new(e.prim.clone(), new_ins, body.aval(e.outputs[0]).clone());
        map.insert(e.outputs[0], Atom::Var(v));
    }
    let result = atom(body.outputs[0], r, &map);
    r.set(out, result);
}

/// A branch body on inputs `in_avals` (`v`, then the other operand when it
/// is a variable; else the other operand is the constant `other`).
fn branch(
    in_avals: &[Aval],
    other: Option<&Tensor>,
    body: impl FnOnce(&mut ProgramBuilder, Atom, Atom) -> Atom,
) -> Program {
    let mut b = ProgramBuilder::new();
    let ins: Vec<Atom> = in_avals.iter().map(|a| Atom::Var(b.new_input(a.clone()))).collect();
    let o = match other {
        Some(t) => b.constant(t),
        None => ins[1],
    };
    let out = body(&mut b, ins[0], o);
    b.finish([out])
}

fn push(b: &mut ProgramBuilder, prim: Prim, ins: &[Atom], aval: Aval) -> Atom {
    let o = b.new_var(aval);
    b.push(prim, ins.iter().copied().collect(), smallvec![o]);
    Atom::Var(o)
}

#[cfg(test)]
mod tests {
    use super::super::testing::build;
    use super::*;
    use xform_ops::DotDims;

    /// One placement of the pattern: which side the diagonal matrix is
    /// on, the other operand's contracted axis, the `mul`'s operand order,
    /// the broadcast axis, and whether the other operand is an input.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        diag_lhs: bool,
        other_axis: usize,
        d_first: bool,
        bcast_axis: usize,
        other_input: bool,
        dtype: DType,
        op: BinaryOp,
    }

    const N: usize = 32;
    const M: usize = 40;

    fn matrix(rows: usize, cols: usize, seed: f64, dtype: DType) -> Tensor {
        let v: Vec<f64> = (0..rows * cols).map(|i| (i as f64 * 0.731 + seed).sin() * 3.0).collect();
        Tensor::from_vec(v, [rows, cols]).cast(dtype)
    }

    /// A diagonal constant: the identity, or a diagonal with zeros,
    /// negatives and an infinity (the diagonal may hold anything).
    fn diag_matrix(identity: bool, dtype: DType) -> Tensor {
        let mut v = vec![0.0f64; N * N];
        for i in 0..N {
            v[i * N + i] = if identity { 1.0 } else { [0.0, -1.5, 2.25, f64::INFINITY, -0.0][i % 5] };
        }
        // an off-diagonal negative zero is still zero
        v[1] = -0.0;
        Tensor::from_vec(v, [N, N]).cast(dtype)
    }

    /// The program `dot(other, mul(D, broadcast(v)))` of `case` (inputs
    /// `v`, then `other` when it is an input).
    fn program(case: Case, d: &Tensor, other: &Tensor) -> Program {
        let v = Tensor::zeros([N], case.dtype);
        let mut inputs = vec![v];
        if case.other_input {
            inputs.push(other.clone());
        }
        build(&inputs, |b, ins| {
            let aval =
                |shape: &[usize]| Aval { shape: Shape::from(shape.to_vec()), dtype: case.dtype, device: Device::Cpu };
            let sq = aval(&[N, N]);
            let dims: Axes = smallvec![case.bcast_axis];
            let bc =
                push(b, Prim::Shape(ShapeOp::BroadcastInDim { shape: sq.shape.clone(), dims }), &[ins[0]], sq.clone());
            let dc = b.constant(d);
            let g = push(b, Prim::Binary(case.op), &if case.d_first { [dc, bc] } else { [bc, dc] }, sq);
            let o = if case.other_input { ins[1] } else { b.constant(other) };
            let other_free = other.shape()[1 - case.other_axis];
            let (dims, ins, out) = if case.diag_lhs {
                let dims = DotDims {
                    lhs_contract: smallvec![1],
                    rhs_contract: smallvec![case.other_axis],
                    ..Default::default()
                };
                (dims, [g, o], aval(&[N, other_free]))
            } else {
                let dims = DotDims {
                    lhs_contract: smallvec![case.other_axis],
                    rhs_contract: smallvec![0],
                    ..Default::default()
                };
                (dims, [o, g], aval(&[other_free, N]))
            };
            vec![push(b, Prim::Linalg(LinalgOp::DotGeneral(dims)), &ins, out)]
        })
    }

    /// Equal values: bit for bit, except that NaNs are equal and a zero
    /// may have either sign.
    fn assert_equal_values(p: &Program, q: &Program, args: &[Tensor], what: &str) {
        let (a, b) = (p.eval(args).unwrap(), q.eval(args).unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.shape(), x.dtype()), (y.shape(), y.dtype()));
            for (i, (u, w)) in x.to_vec_f64().iter().zip(y.to_vec_f64()).enumerate() {
                let same = u.to_bits() == w.to_bits() || (u.is_nan() && w.is_nan()) || (*u == 0.0 && w == 0.0);
                assert!(same, "{what}: element {i}: {u} (product) vs {w} (rewritten)");
            }
        }
    }

    fn has_cond(p: &Program) -> bool {
        p.eqns.iter().any(|e| matches!(e.prim, Prim::Control(ControlOp::Cond { .. })))
    }

    fn has_dot(p: &Program) -> bool {
        p.eqns.iter().any(|e| matches!(e.prim, Prim::Linalg(_)))
    }

    /// Every placement, identity and general diagonals, f32 and f64: the
    /// rewritten program equals the product on finite vectors (the
    /// scaling) and on vectors with an infinity or a NaN (the product,
    /// through the guard), and with an infinite element in an input
    /// operand.
    #[test]
    fn scalings_equal_the_products() {
        let mut cases = 0;
        for bits in 0..48u32 {
            for dtype in [DType::F32, DType::F64] {
                // div only as D / v (v / D is not diagonal)
                let op = if bits >= 32 { BinaryOp::Div } else { BinaryOp::Mul };
                let case = Case {
                    op,
                    diag_lhs: bits & 1 != 0,
                    other_axis: (bits >> 1 & 1) as usize,
                    d_first: bits & 4 != 0 || op == BinaryOp::Div,
                    bcast_axis: (bits >> 3 & 1) as usize,
                    other_input: bits & 16 != 0,
                    dtype,
                };
                let other = if case.other_axis == 0 { matrix(N, M, 0.3, dtype) } else { matrix(M, N, 0.3, dtype) };
                for identity in [true, false] {
                    let d = diag_matrix(identity, dtype);
                    let p = program(case, &d, &other);
                    let q = super::super::dce::run(&run(&p).unwrap()).unwrap();
                    assert!(has_cond(&q) && !has_dot(&q), "{case:?}: not rewritten:\n{q}");
                    let finite: Vec<f64> = (0..N).map(|i| (i as f64 * 0.37).cos() - 0.25).collect();
                    let mut with_inf = finite.clone();
                    with_inf[5] = f64::NEG_INFINITY;
                    let mut with_nan = finite.clone();
                    with_nan[N - 1] = f64::NAN;
                    let mut with_zero = finite.clone();
                    with_zero[2] = 0.0;
                    let vs = [("finite", &finite), ("inf", &with_inf), ("nan", &with_nan), ("zero", &with_zero)];
                    for (what, v) in vs {
                        let v = Tensor::from_vec(v.clone(), [N]).cast(dtype);
                        let mut args = vec![v.clone()];
                        if case.other_input {
                            args.push(other.clone());
                        }
                        assert_equal_values(&p, &q, &args, &format!("{case:?} identity={identity} v {what}"));
                        if case.other_input {
                            let mut o = other.to_vec_f64();
                            o[7] = f64::INFINITY;
                            let o = Tensor::from_vec(o, other.shape().to_vec()).cast(dtype);
                            let what = format!("{case:?} identity={identity} v {what}, other with inf");
                            assert_equal_values(&p, &q, &[v, o], &what);
                        }
                    }
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 192);
    }

    /// relu's jacrev: `select(broadcast(p), D1, D2)` of two diagonal
    /// constants is diagonal whatever `p` is: with a constant other operand
    /// the scaling replaces the product (no `cond`), with an input one the
    /// guard checks that operand; equal values either way, with infinities
    /// and NaNs in the input operand too.
    #[test]
    fn selects_of_diagonals_are_scalings() {
        for (other_input, diag_lhs) in [(false, false), (false, true), (true, false), (true, true)] {
            let dtype = DType::F32;
            let other = matrix(M, N, 0.4, dtype);
            let (d1, d2) = (diag_matrix(false, dtype), diag_matrix(true, dtype));
            let p_vec = Tensor::from_vec((0..N).map(|i| i % 3 == 0).collect::<Vec<_>>(), [N]);
            let mut inputs = vec![p_vec.clone()];
            if other_input {
                inputs.push(other.clone());
            }
            let p = build(&inputs, |b, ins| {
                let sq = |d: DType| Aval { shape: Shape::from([N, N]), dtype: d, device: Device::Cpu };
                let dims: Axes = smallvec![1];
                let bc = push(
                    b,
                    Prim::Shape(ShapeOp::BroadcastInDim { shape: Shape::from([N, N]), dims }),
                    &[ins[0]],
                    sq(DType::Bool),
                );
                let (c1, c2) = (b.constant(&d1), b.constant(&d2));
                let g = push(b, Prim::Elementwise(ElementwiseOp::Select), &[bc, c1, c2], sq(dtype));
                let o = if other_input { ins[1] } else { b.constant(&other) };
                // other [M, N] contracted on axis 1
                let (dims, ins, out) = if diag_lhs {
                    (
                        DotDims { lhs_contract: smallvec![1], rhs_contract: smallvec![1], ..Default::default() },
                        [g, o],
                        [N, M],
                    )
                } else {
                    (
                        DotDims { lhs_contract: smallvec![1], rhs_contract: smallvec![0], ..Default::default() },
                        [o, g],
                        [M, N],
                    )
                };
                let out = Aval { shape: Shape::from(out), dtype, device: Device::Cpu };
                vec![push(b, Prim::Linalg(LinalgOp::DotGeneral(dims)), &ins, out)]
            });
            let q = super::super::dce::run(&run(&p).unwrap()).unwrap();
            assert!(!has_dot(&q), "not rewritten:\n{q}");
            assert_eq!(has_cond(&q), other_input, "{q}");
            let mut args = vec![p_vec.clone()];
            if other_input {
                args.push(other.clone());
            }
            assert_equal_values(&p, &q, &args, &format!("select, other input {other_input}, lhs {diag_lhs}"));
            if other_input {
                let mut o = other.to_vec_f64();
                (o[3], o[N + 1]) = (f64::INFINITY, f64::NAN);
                let o = Tensor::from_vec(o, [M, N]).cast(dtype);
                assert_equal_values(&p, &q, &[p_vec.clone(), o], "select, other with inf and NaN");
            }
        }
    }

    /// The finite path is the scaling: on finite inputs the results are
    /// the products' bit for bit wherever they are not zero.
    #[test]
    fn identity_seed_scales_the_rows() {
        let case = Case {
            diag_lhs: false,
            other_axis: 0,
            d_first: true,
            bcast_axis: 1,
            other_input: false,
            dtype: DType::F32,
            op: BinaryOp::Mul,
        };
        let a = matrix(N, M, 0.9, DType::F32);
        let p = program(case, &diag_matrix(true, DType::F32), &a);
        let q = run(&p).unwrap();
        let v = Tensor::from_vec((0..N).map(|i| i as f32 * 0.5 - 3.0).collect::<Vec<_>>(), [N]);
        let got = q.eval(std::slice::from_ref(&v)).unwrap()[0].to_vec_f64();
        // h[a, b] = A[b, a] * v[b]
        let (av, vv) = (a.to_vec_f64(), v.to_vec_f64());
        for i in 0..M {
            for j in 0..N {
                let want = (av[j * M + i] as f32 * vv[j] as f32) as f64;
                assert_eq!(got[i * N + j].to_bits(), want.to_bits(), "({i}, {j})");
            }
        }
    }

    /// Left alone: a constant with a nonzero off its diagonal, a constant
    /// other operand that is not finite, a product below `MIN_WORK`, and
    /// a dot with batch axes.
    #[test]
    fn non_diagonal_products_are_kept() {
        let case = Case {
            diag_lhs: false,
            other_axis: 1,
            d_first: true,
            bcast_axis: 1,
            other_input: false,
            dtype: DType::F32,
            op: BinaryOp::Mul,
        };
        let other = matrix(M, N, 0.1, DType::F32);
        let mut d = diag_matrix(true, DType::F32).to_vec_f64();
        d[N + 3] = 1e-30;
        let d = Tensor::from_vec(d, [N, N]).cast(DType::F32);
        let q = run(&program(case, &d, &other)).unwrap();
        assert!(!has_cond(&q) && has_dot(&q));
        let mut o = other.to_vec_f64();
        o[0] = f64::NAN;
        let o = Tensor::from_vec(o, [M, N]).cast(DType::F32);
        let q = run(&program(case, &diag_matrix(true, DType::F32), &o)).unwrap();
        assert!(!has_cond(&q) && has_dot(&q));
        let small = matrix(2, N, 0.1, DType::F32);
        let q = run(&program(case, &diag_matrix(true, DType::F32), &small)).unwrap();
        assert!(!has_cond(&q) && has_dot(&q), "{} multiply-adds is below MIN_WORK", 2 * N * N);
        // v / D
        let q =
            run(&program(Case { d_first: false, op: BinaryOp::Div, ..case }, &diag_matrix(true, DType::F32), &other))
                .unwrap();
        assert!(!has_cond(&q) && has_dot(&q));
    }
}
