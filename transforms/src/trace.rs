//! Staging: the trace interpreter records primitive applications on its
//! tracers into a [`Program`]; everything that does not depend on them is
//! computed eagerly by the parent and enters the program as a constant
//! (constant folding comes free). `trace(f, &x)` stages a whole function;
//! `linearize` uses the same interpreter to record tangent work.

use crate::tree::Tree;
use smallvec::SmallVec;
use std::cell::RefCell;
use xform_ops::interp::with_interpreter;
use xform_ops::prim::shape_rule;
use xform_ops::{
    Atom, Aval, Interpreter, Level, OrRaise, Outs, Prim, Program, ProgramBuilder, Result, Tag, Tensor, Tracer,
    TracerData, Value, Var,
};

/// The staging interpreter.
pub(crate) struct TraceInterp {
    pub(crate) tag: Tag,
    pub(crate) builder: RefCell<ProgramBuilder>,
    /// Shown in errors, or hidden (linearize's internal recorder).
    visible: Option<&'static str>,
}

impl TraceInterp {
    pub(crate) fn new(name: &'static str, visible: bool) -> TraceInterp {
        TraceInterp {
            tag: Tag::fresh(name),
            builder: RefCell::new(ProgramBuilder::new()),
            visible: visible.then_some(name),
        }
    }

    /// A new program input and its tracer.
    pub(crate) fn new_input(&self, aval: Aval) -> Tensor {
        let var = self.builder.borrow_mut().new_input(aval.clone());
        Tensor::from_tracer(Tracer { tag: self.tag, aval, data: TracerData::Staged { var } })
    }

    /// The atom for `t`: its variable if it is this level's tracer, else a constant.
    pub(crate) fn atom(&self, t: &Tensor) -> Result<Atom> {
        if let Value::Tracer(tr) = &*t.value() {
            if tr.tag.id == self.tag.id {
                let TracerData::Staged { var } = tr.data else { return Err(tr.wrong_data("staged")) };
                return Ok(Atom::Var(var));
            }
        }
        Ok(self.builder.borrow_mut().constant(t))
    }

    /// The finished program with these outputs.
    pub(crate) fn finish(&self, outputs: &[Tensor]) -> Result<Program> {
        let mut atoms: SmallVec<[Atom; 4]> = SmallVec::new();
        for t in outputs {
            atoms.push(self.atom(t)?);
        }
        let b = std::mem::take(&mut *self.builder.borrow_mut());
        Ok(b.finish(atoms))
    }
}

impl Interpreter for TraceInterp {
    fn tag(&self) -> Tag {
        self.tag
    }

    fn describe(&self) -> Option<String> {
        self.visible.map(str::to_string)
    }

    fn process(&self, _level: Level, prim: &Prim, inputs: &[Tensor]) -> Result<Outs> {
        let out_avals = Tensor::with_avals(inputs, |refs| shape_rule(prim, refs))?;
        let mut ins: SmallVec<[Atom; 4]> = SmallVec::new();
        for t in inputs {
            ins.push(self.atom(t)?);
        }
        let mut b = self.builder.borrow_mut();
        let mut vars: SmallVec<[Var; 2]> = SmallVec::new();
        let mut outs = Outs::new();
        for aval in out_avals {
            let var = b.new_var(aval.clone());
            vars.push(var);
            outs.push(Tensor::from_tracer(Tracer { tag: self.tag, aval, data: TracerData::Staged { var } }));
        }
        b.push(prim.clone(), ins, vars);
        Ok(outs)
    }
}

/// Stages `f` at the shapes and dtypes of `example` into a [`Program`] that
/// prints like a jaxpr and can be evaluated (and transformed) later with
/// [`Program::eval`] on the flattened leaves.
///
/// Operations that do not depend on the inputs are computed now and appear
/// as constants.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
/// let prog = xform_transforms::trace(|x: &Tensor| (x.sin() * x).sum(), &x);
/// assert_eq!(prog.eqns.len(), 3);
/// println!("{prog}");
/// ```
pub fn trace<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, example: &X) -> Program {
    let interp = TraceInterp::new("trace", true);
    with_interpreter(&interp, || {
        let inputs: Vec<Tensor> = example.leaves().iter().map(|l| interp.new_input(l.aval())).collect();
        let y = f(&example.with_leaves(inputs));
        interp.finish(&y.leaves()).or_raise()
    })
}
