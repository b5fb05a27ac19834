//! Forward mode: the JVP interpreter and `jvp`.
//!
//! A JVP tracer carries a primal (a value of the parent level) and a
//! tangent (`None` is a symbolic zero, which skips work). The interpreter
//! runs each primitive's JVP rule with the parent current, so primal work
//! goes to the parent and tangent work too, unless a staging interpreter
//! sits between (that is how `linearize` records the tangent program).

use crate::tree::Tree;
use smallvec::SmallVec;
use xform_ops::interp::{run_at_parent, with_interpreter};
use xform_ops::prim::jvp_rule;
use xform_ops::{Error, Interpreter, Level, OrRaise, Outs, Prim, Result, Tag, Tensor, Tracer, TracerData, Value};

/// The JVP interpreter (one instance per transform call).
pub(crate) struct JvpInterp {
    pub(crate) tag: Tag,
    /// How errors name it: "jvp", "grad", "jacfwd", ...
    pub(crate) label: &'static str,
}

impl JvpInterp {
    pub(crate) fn new(label: &'static str) -> JvpInterp {
        JvpInterp { tag: Tag::fresh(label), label }
    }

    /// A tracer of this interpreter (or the primal itself if the tangent is
    /// a symbolic zero).
    pub(crate) fn wrap(&self, primal: Tensor, tangent: Option<Tensor>) -> Tensor {
        match tangent {
            None => primal,
            Some(t) => {
                let aval = primal.aval();
                Tensor::from_tracer(Tracer { tag: self.tag, aval, data: TracerData::Dual { primal, tangent: t } })
            }
        }
    }

    /// Primal and tangent of `t` at this level.
    pub(crate) fn unwrap(&self, t: &Tensor) -> Result<(Tensor, Option<Tensor>)> {
        if let Value::Tracer(tr) = &*t.value() {
            if tr.tag.id == self.tag.id {
                let TracerData::Dual { primal, tangent } = &tr.data else { return Err(tr.wrong_data("dual")) };
                return Ok((primal.clone(), Some(tangent.clone())));
            }
        }
        Ok((t.clone(), None))
    }
}

impl Interpreter for JvpInterp {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn describe(&self) -> Option<String> {
        Some(self.label.to_string())
    }

    fn process(&self, level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
        // One and two operands (nearly every op) without operand lists.
        match inputs {
            [x] => {
                let (p, t) = self.unwrap(x)?;
                self.apply(level, prim, &[p], &[t])
            }
            [x, y] => {
                let ((px, tx), (py, ty)) = (self.unwrap(x)?, self.unwrap(y)?);
                self.apply(level, prim, &[px, py], &[tx, ty])
            }
            _ => {
                let mut primals: SmallVec<[Tensor; 4]> = SmallVec::new();
                let mut tangents: SmallVec<[Option<Tensor>; 4]> = SmallVec::new();
                for t in inputs {
                    let (p, d) = self.unwrap(t)?;
                    primals.push(p);
                    tangents.push(d);
                }
                self.apply(level, prim, &primals, &tangents)
            }
        }
    }
}

impl JvpInterp {
    /// Runs `prim`'s JVP rule on unwrapped primals and tangents and wraps
    /// the results.
    fn apply(&self, level: Level, prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Outs> {
        let (mut outs, touts) = run_at_parent(level, || jvp_rule(prim, primals, tangents))?;
        // Wrapped in place: no second list of outputs.
        for (o, t) in outs.iter_mut().zip(touts) {
            if t.is_some() {
                *o = self.wrap(o.clone(), t);
            }
        }
        Ok(outs)
    }
}

/// Checks that a tangent matches its primal (shape and float dtype).
pub(crate) fn check_tangent(op: &str, path: &str, primal: &Tensor, tangent: &Tensor) -> Result<()> {
    let (ps, ts) = (primal.shape(), tangent.shape());
    if ps != ts {
        return Err(Error::shape(op, format!("the tangent for {path} must have its primal's shape"), &[&ps, &ts]));
    }
    if primal.dtype() != tangent.dtype() {
        return Err(Error::dtype(
            op,
            format!("the tangent for {path} must have its primal's dtype"),
            &[primal.dtype(), tangent.dtype()],
        ));
    }
    Ok(())
}

/// Runs `f` under a fresh JVP interpreter on `(primal, tangent)` leaves and
/// returns the output leaves' primals and tangents (`None`: zero).
pub(crate) fn jvp_flat<X: Tree, Y: Tree>(
    label: &'static str,
    f: impl FnOnce(&X) -> Y,
    primals: &X,
    tangents: Vec<Option<Tensor>>,
) -> (Y, Vec<Tensor>, Vec<Option<Tensor>>) {
    let interp = JvpInterp::new(label);
    let leaves = primals.leaves();
    let (out, ps, ts, finals) = with_interpreter(&interp, || {
        let wrapped: Vec<Tensor> = leaves
            .iter()
            .cloned()
            .zip(tangents)
            .map(|(p, t)| if p.dtype().is_float() { interp.wrap(p, t) } else { p })
            .collect();
        let out = f(&primals.with_leaves(wrapped.clone()));
        let outs = out.leaves();
        let (ps, ts): (Vec<Tensor>, Vec<Option<Tensor>>) = outs.iter().map(|o| interp.unwrap(o).or_raise()).unzip();
        let finals = crate::functionalize::mutated_finals(&leaves, &wrapped, |w| interp.unwrap(w).or_raise().0);
        (out, ps, ts, finals)
    });
    crate::functionalize::write_back(label, &leaves, finals).or_raise();
    (out.with_leaves(ps.clone()), ps, ts)
}

/// Forward-mode derivative: `f(primals)` and the directional derivative
/// of `f` at `primals` along `tangents` (a tree like `primals`).
///
/// ```
/// use xform_ops::{DType, Tensor};
/// let x = Tensor::from_vec(vec![0.0f64, 1.0], [2]);
/// let v = Tensor::ones([2], DType::F64);
/// let (y, dy) = xform_transforms::jvp(|x: &Tensor| x.sin(), &x, &v);
/// assert!((dy.to_vec::<f64>()[1] - 1f64.cos()).abs() < 1e-12);
/// # let _ = y;
/// ```
///
/// # Panics
/// If a tangent's shape or dtype differs from its primal's.
#[track_caller]
pub fn jvp<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, primals: &X, tangents: &X) -> (Y, Y) {
    try_jvp(f, primals, tangents).or_raise()
}

/// [`jvp`] of the first output of `f`, and its second output (aux data,
/// not differentiated), like JAX's `jvp(f, ..., has_aux=True)`: returns
/// `(primal_out, tangent_out, aux)`.
///
/// ```
/// use xform_ops::{DType, Tensor};
/// let x = Tensor::from_vec(vec![0.0f64, 1.0], [2]);
/// let v = Tensor::ones([2], DType::F64);
/// let (y, dy, aux) = xform_transforms::jvp_with_aux(|x: &Tensor| (x * 2.0, x.sum()), &x, &v);
/// assert_eq!((dy.to_vec::<f64>(), aux.item::<f64>()), (vec![2.0, 2.0], 1.0));
/// # let _ = y;
/// ```
#[track_caller]
pub fn jvp_with_aux<X: Tree, Y: Tree, A: Tree>(f: impl FnOnce(&X) -> (Y, A), primals: &X, tangents: &X) -> (Y, Y, A) {
    let ((y, aux), (dy, _)) = try_jvp(f, primals, tangents).or_raise();
    (y, dy, aux)
}

/// [`jvp`] returning every xform error as a value: mismatched tangents, and
/// errors raised inside `f` (a panic that is not an xform error still
/// unwinds).
pub fn try_jvp<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, primals: &X, tangents: &X) -> Result<(Y, Y)> {
    xform_ops::catch(|| jvp_checked(f, primals, tangents))?
}

fn jvp_checked<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, primals: &X, tangents: &X) -> Result<(Y, Y)> {
    let (pl, tl) = (primals.leaves(), tangents.leaves());
    if pl.len() != tl.len() {
        return Err(Error::invalid("jvp", format!("{} primal leaves but {} tangent leaves", pl.len(), tl.len())));
    }
    let paths = primals.paths();
    for ((p, t), path) in pl.iter().zip(&tl).zip(&paths) {
        check_tangent("jvp", path, p, t)?;
    }
    let (out, ps, ts) = jvp_flat("jvp", f, primals, tl.into_iter().map(Some).collect());
    let tangents_out: Vec<Tensor> =
        ts.iter().zip(&ps).map(|(t, p)| xform_ops::lax::instantiate(t, p)).collect::<Result<_>>()?;
    Ok((out.with_leaves(ps), out.with_leaves(tangents_out)))
}
