//! Staging: the interpreter that records primitive applications on its
//! tracers into a [`Program`]; everything that does not depend on them is
//! computed by the parent and enters the program as a constant (constant
//! folding comes free). `trace` stages a whole function, `linearize`
//! records tangent work with it, and the control-flow primitives stage
//! their bodies (and the bodies their rules derive) with [`stage`].
//!
//! Visible stagings (jit, trace) record what their constants were computed
//! from: see NOTE: [trace-time values] in [`crate::provenance`].

use crate::error::{OrRaise, Result};
use crate::interp::{with_interpreter, Interpreter, Level, Outs, Tag};
use crate::prim::{shape_rule, Prim};
use crate::program::{Atom, Program, ProgramBuilder, Var};
use crate::provenance::{computed_from, reads_since, start_recording, stop_recording};
use crate::tensor::{Aval, Tensor, Tracer, TracerData, Value};
use smallvec::SmallVec;
use std::cell::RefCell;

/// The staging interpreter.
pub struct Staging {
    tag: Tag,
    builder: RefCell<ProgramBuilder>,
    /// Shown in errors, or hidden (internal recorders).
    visible: Option<&'static str>,
    /// For a visible one: where the thread's reads stood when it was made
    /// (see NOTE: [trace-time values]).
    reads_from: Option<usize>,
}

impl Staging {
    /// A staging interpreter named `name`; `visible` ones appear in the
    /// transforms errors list ("trace") and guard their programs against
    /// writes to what they computed from (NOTE: [trace-time values]),
    /// hidden ones do neither.
    pub fn new(name: &'static str, visible: bool) -> Staging {
        let reads_from = visible.then(start_recording);
        Staging {
            tag: Tag::fresh(name),
            builder: RefCell::new(ProgramBuilder::new()),
            visible: visible.then_some(name),
            reads_from,
        }
    }

    /// A new program input and its tracer.
    pub fn new_input(&self, aval: Aval) -> Tensor {
        let var = self.builder.borrow_mut().new_input(aval.clone());
        Tensor::from_tracer(Tracer { tag: self.tag, aval, data: TracerData::Staged { var } })
    }

    /// The atom for `t`: its variable if it is this level's tracer, else a constant.
    pub fn atom(&self, t: &Tensor) -> Result<Atom> {
        if let Value::Tracer(tr) = &*t.value() {
            if tr.tag.id == self.tag.id {
                let TracerData::Staged { var } = tr.data else { return Err(tr.wrong_data("staged")) };
                return Ok(Atom::Var(var));
            }
        }
        let mut b = self.builder.borrow_mut();
        if self.reads_from.is_some() {
            // a value computed while recording is guarded by what it was
            // computed from; any other constant by its own version, which
            // the program records with it
            if let Value::Array(a) = &*t.value() {
                if let Some(from) = computed_from(a) {
                    b.guard(from);
                }
            }
        }
        Ok(b.constant(t))
    }

    /// The finished program with these outputs.
    pub fn finish(&self, outputs: &[Tensor]) -> Result<Program> {
        let mut atoms: SmallVec<[Atom; 4]> = SmallVec::new();
        for t in outputs {
            atoms.push(self.atom(t)?);
        }
        let mut b = std::mem::take(&mut *self.builder.borrow_mut());
        if let Some(from) = self.reads_from {
            b.guard(reads_since(from));
        }
        Ok(b.finish(atoms))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.reads_from.is_some() {
            stop_recording();
        }
    }
}

impl Interpreter for Staging {
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

/// Stages `f` on inputs of abstract values `in_avals` into a program (with
/// the constants it captured). The staging interpreter sits on top of the
/// current stack, so ops on values of enclosing transforms alone run there
/// and enter as constants.
///
/// # Errors
/// What `f` returns or raises (a raised error is caught and returned; the
/// interpreter stack is restored either way).
pub fn stage(
    name: &'static str,
    in_avals: &[Aval],
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Program> {
    let staging = Staging::new(name, false);
    crate::error::catch(|| {
        with_interpreter(&staging, || {
            let ins: Vec<Tensor> = in_avals.iter().map(|a| staging.new_input(a.clone())).collect();
            let outs = f(&ins).or_raise();
            staging.finish(&outs).or_raise()
        })
    })
}
