//! Reverse mode by linearize and transpose: `f` runs under a JVP
//! interpreter whose tangent work is recorded by the one partial
//! evaluation (`xform_ops::program_transforms::partial_eval::linearize_jvp`;
//! see NOTE: [partial evaluation] there), and the pullback is the one backward pass
//! over that linear program (`program_transforms::backward::transpose`).

use crate::jvp::JvpInterp;
use crate::tree::{Leaves, Tree};
use smallvec::SmallVec;
use xform_ops::interp::with_interpreter;
use xform_ops::program_transforms::backward;
pub(crate) use xform_ops::program_transforms::backward::Ct;
use xform_ops::program_transforms::partial_eval;
use xform_ops::{lax, Error, OrRaise, Program, Result, Tensor};

/// A function linearized at a point.
pub(crate) struct Linearized<Y> {
    /// The primal output tree.
    pub(crate) out: Y,
    /// The primal output leaves.
    pub(crate) out_leaves: Leaves,
    /// The primal input leaves.
    pub(crate) in_leaves: Leaves,
    /// Which input leaves are differentiable (float); the program has one
    /// input per such leaf, in order.
    pub(crate) diff: SmallVec<[bool; 4]>,
    /// Tangents in (of the differentiable leaves) to tangents out (one per
    /// output leaf).
    pub(crate) program: Program,
}

/// Linearizes `f` at `x` (see NOTE: [partial evaluation] in
/// `xform_ops::program_transforms::partial_eval`).
pub(crate) fn linearize_flat<X: Tree, Y: Tree>(label: &'static str, f: impl FnOnce(&X) -> Y, x: &X) -> Linearized<Y> {
    let jvp = JvpInterp::new(label);
    let in_leaves = x.leaves();
    let diff: SmallVec<[bool; 4]> = in_leaves.iter().map(|l| l.dtype().is_float()).collect();
    let tangent_in = in_leaves.iter().zip(&diff).map(|(l, &d)| d.then(|| l.aval()));
    let ((out, out_leaves, finals), mut program) = partial_eval::linearize_jvp(label, tangent_in, |ts| {
        Ok(with_interpreter(&jvp, || {
            let wrapped: Leaves = in_leaves
                .iter()
                .zip(ts)
                .map(|(l, t)| if t.is_some() { jvp.wrap(l.clone(), t.clone()) } else { l.clone() })
                .collect();
            let out = f(&x.with_leaves(wrapped.iter().cloned()));
            let mut out_leaves = Leaves::new();
            let mut tangents = partial_eval::TangentsOut::new();
            for o in out.leaves().iter() {
                let (p, t) = jvp.unwrap(o).or_raise();
                tangents.push((t, p.aval()));
                out_leaves.push(p);
            }
            let finals = crate::functionalize::mutated_finals(&in_leaves, &wrapped, |w| jvp.unwrap(w).or_raise().0);
            ((out, out_leaves, finals), tangents)
        }))
    })
    .or_raise();
    if finals.iter().any(Option::is_some) {
        // The write-back below changes the arguments' storage: residuals that
        // view it must keep the values they had.
        let mutated: Vec<xform_ops::Array> =
            in_leaves.iter().zip(&finals).filter(|(_, f)| f.is_some()).filter_map(|(l, _)| l.array()).collect();
        for i in 0..program.consts.len() {
            if let Some(a) = program.consts[i].array() {
                if mutated.iter().any(|m| m.shares_storage(&a)) {
                    program.replace_const(i, Tensor::from_array(a.contiguous_copy().or_raise()));
                }
            }
        }
    }
    crate::functionalize::write_back(label, &in_leaves, finals).or_raise();
    Linearized { out: out.with_leaves(out_leaves.iter().cloned()), out_leaves, in_leaves, diff, program }
}

/// Checks cotangent leaves against the output leaves they are for and
/// makes them backward-pass cotangents (none for non-float outputs).
fn check_cotangents(op: &str, outs: &[Tensor], cts: &[Tensor]) -> Result<SmallVec<[Option<Ct>; 4]>> {
    if cts.len() != outs.len() {
        return Err(Error::invalid(op, format!("expects {} cotangent leaves, got {}", outs.len(), cts.len())));
    }
    for (i, (ct, o)) in cts.iter().zip(outs).enumerate() {
        if ct.shape() != o.shape() || ct.dtype() != o.dtype() {
            return Err(Error::shape(
                op,
                format!("cotangent {i} must match output {i} ({} {}), got {}", o.dtype(), o.shape(), ct.dtype()),
                &[&o.shape(), &ct.shape()],
            ));
        }
    }
    Ok(cts.iter().zip(outs).map(|(c, o)| o.dtype().is_float().then(|| Ct::Val(c.clone(), false))).collect())
}

/// Transposes a linear program: cotangents of its inputs from cotangents of
/// its outputs (`None`: zero).
pub fn backward_pass(program: &Program, cts: &[Option<Tensor>]) -> Result<SmallVec<[Option<Tensor>; 4]>> {
    program.check_consts("backward_pass")?;
    let cts: SmallVec<[Option<Ct>; 4]> = cts.iter().map(|c| c.as_ref().map(|t| Ct::Val(t.clone(), false))).collect();
    backward::transpose(program, None, &cts, None)
}

impl<Y> Linearized<Y> {
    /// Input cotangent leaves (zeros for non-differentiable leaves) from
    /// output cotangent leaves.
    pub(crate) fn pull(&self, op: &str, cts: &[Tensor]) -> Result<Leaves> {
        let cts = check_cotangents(op, &self.out_leaves, cts)?;
        self.pull_some(op, &cts)
    }

    /// Input cotangent leaves from output cotangents already checked
    /// (`None`: zero, whose part of the program is not transposed at all).
    pub(crate) fn pull_some(&self, op: &str, cts: &[Option<Ct>]) -> Result<Leaves> {
        self.program.check_consts(op)?;
        let mut ins = backward::transpose(&self.program, None, cts, None)?.into_iter();
        let mut out = Leaves::new();
        for (l, &d) in self.in_leaves.iter().zip(&self.diff) {
            let ct = if d { ins.next().flatten() } else { None };
            out.push(match ct {
                Some(ct) => ct,
                None => lax::zeros_like(l)?,
            });
        }
        Ok(out)
    }

    /// Output tangent leaves from input tangent leaves (forward, linear).
    pub(crate) fn push(&self, op: &str, ts: &[Tensor]) -> Result<Vec<Tensor>> {
        if ts.len() != self.in_leaves.len() {
            return Err(Error::invalid(
                op,
                format!("expects {} tangent leaves, got {}", self.in_leaves.len(), ts.len()),
            ));
        }
        let mut args = Vec::new();
        for ((t, l), &d) in ts.iter().zip(&self.in_leaves).zip(&self.diff) {
            crate::jvp::check_tangent(op, "the argument", l, t)?;
            if d {
                args.push(t.clone());
            }
        }
        self.program.check_consts(op)?;
        self.program.eval(&args)
    }
}

/// `f(x)` and its pullback: the function taking a cotangent of the output
/// (a tree like it) to the cotangent of `x` (`J^T ct`). The pullback can be
/// called any number of times.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let (y, pullback) = xform_transforms::vjp(|x: &Tensor| x * x, &x);
/// let g = pullback(&Tensor::from_vec(vec![1.0f64, 1.0], [2]));
/// assert_eq!(g.to_vec::<f64>(), vec![2.0, 4.0]);
/// # let _ = y;
/// ```
pub fn vjp<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, x: &X) -> (Y, impl Fn(&Y) -> X) {
    let lin = linearize_flat("vjp", f, x);
    let out = lin.out.with_leaves(lin.out_leaves.clone());
    let template = x.with_leaves(lin.in_leaves.clone());
    let pullback = move |ct: &Y| {
        let leaves = lin.pull("vjp pullback", &ct.leaves()).or_raise();
        template.with_leaves(leaves)
    };
    (out, pullback)
}

/// `f(x)` and its linear approximation at `x`: the function taking a
/// tangent of `x` to the tangent of the output (`J t`), evaluated from a
/// recorded linear program (no re-run of `f`).
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![0.5f64], [1]);
/// let (y, f_lin) = xform_transforms::linearize(|x: &Tensor| x.exp(), &x);
/// let t = f_lin(&Tensor::from_vec(vec![2.0f64], [1]));
/// assert!((t.to_vec::<f64>()[0] - 2.0 * 0.5f64.exp()).abs() < 1e-12);
/// # let _ = y;
/// ```
pub fn linearize<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, x: &X) -> (Y, impl Fn(&X) -> Y) {
    let lin = linearize_flat("linearize", f, x);
    let out = lin.out.with_leaves(lin.out_leaves.clone());
    let template = lin.out.with_leaves(lin.out_leaves.clone());
    let f_lin = move |t: &X| {
        let leaves = lin.push("linearize", &t.leaves()).or_raise();
        template.with_leaves(leaves)
    };
    (out, f_lin)
}

/// [`vjp`] of the first output of `f`, and its second output (aux data, not
/// differentiated), like JAX's `vjp(f, x, has_aux=True)`: returns
/// `(primal_out, pullback, aux)`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let (y, pullback, aux) = xform_transforms::vjp_with_aux(|x: &Tensor| (x * x, x.sum()), &x);
/// let g = pullback(&Tensor::from_vec(vec![1.0f64, 1.0], [2]));
/// assert_eq!((g.to_vec::<f64>(), aux.item::<f64>()), (vec![2.0, 4.0], 3.0));
/// # let _ = y;
/// ```
pub fn vjp_with_aux<X: Tree, Y: Tree, A: Tree>(f: impl FnOnce(&X) -> (Y, A), x: &X) -> (Y, impl Fn(&Y) -> X, A) {
    let lin = linearize_flat("vjp", f, x);
    let (y, aux) = &lin.out;
    let ny = y.leaves().len();
    let y = y.with_leaves(lin.out_leaves[..ny].iter().cloned());
    let aux = aux.with_leaves(lin.out_leaves[ny..].iter().cloned());
    let template = x.with_leaves(lin.in_leaves.clone());
    let out_leaves: Leaves = lin.out_leaves[..ny].iter().cloned().collect();
    let pullback = move |ct: &Y| {
        let cts = ct.leaves();
        let all: SmallVec<[Option<Ct>; 4]> = check_cotangents("vjp pullback", &out_leaves, &cts)
            .or_raise()
            .into_iter()
            .chain(std::iter::repeat_n(None, lin.out_leaves.len() - ny))
            .collect();
        template.with_leaves(lin.pull_some("vjp pullback", &all).or_raise())
    };
    (y, pullback, aux)
}

/// [`linearize`] of the first output of `f`, and its second output (aux
/// data, not differentiated): returns `(primal_out, f_jvp, aux)`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![0.5f64], [1]);
/// let (y, f_lin, aux) = xform_transforms::linearize_with_aux(|x: &Tensor| (x * 3.0, x.exp()), &x);
/// assert_eq!(f_lin(&Tensor::from_vec(vec![2.0f64], [1])).to_vec::<f64>(), vec![6.0]);
/// # let _ = (y, aux);
/// ```
pub fn linearize_with_aux<X: Tree, Y: Tree, A: Tree>(f: impl FnOnce(&X) -> (Y, A), x: &X) -> (Y, impl Fn(&X) -> Y, A) {
    let mut lin = linearize_flat("linearize", f, x);
    let (y, aux) = &lin.out;
    let ny = y.leaves().len();
    let y = y.with_leaves(lin.out_leaves[..ny].iter().cloned());
    let aux = aux.with_leaves(lin.out_leaves[ny..].iter().cloned());
    // The aux tangents are never evaluated.
    lin.program.keep_outputs(ny);
    let template = y.with_leaves(lin.out_leaves[..ny].iter().cloned());
    let f_lin = move |t: &X| {
        let leaves = lin.push("linearize", &t.leaves()).or_raise();
        template.with_leaves(leaves)
    };
    (y, f_lin, aux)
}
