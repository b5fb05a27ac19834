//! The optimization passes of `jit`, run on the staged [`Program`] before
//! it is compiled into a replay plan. Each pass is a function
//! `fn(&Program) -> Result<Program>` in its own module that returns an
//! equivalent program (equal results on every input of the signature):
//!
//! - [`simplify`]: exact algebraic identities (`x*1`, `x+0`, `x-0`,
//!   `neg(neg(x))`, a conversion to the same dtype, a transpose of a
//!   transpose, a chain of reshapes, identity reshapes, transposes and
//!   broadcasts, a unit-step slice of the whole operand);
//! - [`fold`]: equations whose operands are all constants, evaluated once;
//! - [`diagonal`]: a product with a diagonal matrix made from a basis
//!   (`jacrev`'s identity seed times a broadcast cotangent) computed as a
//!   scaling, guarded by a finiteness check that falls back to the product;
//! - [`cse`]: equations with the same primitive, parameters and operands,
//!   computed once;
//! - [`dce`]: equations no output depends on, and constants no equation
//!   reads, dropped.
//!
//! Every pass rebuilds the program through a [`Rebuild`] (a renaming of
//! the old variables to atoms of the new program), so a pass only decides,
//! per equation, what its outputs become. Adding a pass: a module with a
//! `run` function and tests comparing the optimized program against the
//! original on random inputs, and one line in [`PIPELINE`].

pub mod cse;
pub mod dce;
pub mod diagonal;
pub mod fold;
pub mod simplify;

use smallvec::SmallVec;
use xform_ops::{Atom, Program, ProgramBuilder, Result, Tensor, Var};

/// A pass: an equivalent program.
pub type Pass = fn(&Program) -> Result<Program>;

/// The passes `jit` runs, in order (the pipeline runs until a round
/// removes no equation, at most [`MAX_ROUNDS`] rounds).
pub const PIPELINE: &[(&str, Pass)] = &[
    ("simplify", simplify::run),
    ("fold", fold::run),
    ("diagonal", diagonal::run),
    ("cse", cse::run),
    ("dce", dce::run),
];

/// The most rounds of [`PIPELINE`] one optimization runs.
pub const MAX_ROUNDS: usize = 3;

/// Runs [`PIPELINE`] on `p` until a round removes no equation.
///
/// # Errors
/// What a pass returns (none fails on a well-formed program; constant
/// folding leaves an equation in place when evaluating it fails).
pub fn optimize(p: &Program) -> Result<Program> {
    let mut cur = dce::run(p)?;
    for _ in 0..MAX_ROUNDS {
        let before = cur.eqns.len();
        for (_, pass) in PIPELINE {
            cur = pass(&cur)?;
        }
        if cur.eqns.len() == before {
            break;
        }
    }
    Ok(cur)
}

/// A program being rebuilt from an old one: the old inputs become the new
/// inputs (same order and abstract values), and each old variable is
/// renamed to an atom of the new program once its equation was decided.
/// Constants enter the new program only when an equation or an output
/// reads them, so unused ones disappear; the new program keeps the old
/// one's version guards (its constants' and its own), so a write to a
/// captured tensor after tracing is refused even where the passes folded
/// or dropped the constant.
pub struct Rebuild<'p> {
    old: &'p Program,
    b: ProgramBuilder,
    map: Vec<Option<Atom>>,
    /// Old variables whose value is a constant not yet entered into the
    /// new program (it is, when something reads it).
    pending: Vec<Option<Tensor>>,
}

impl<'p> Rebuild<'p> {
    /// A rebuild of `old` with its inputs defined.
    pub fn new(old: &'p Program) -> Self {
        let mut b = ProgramBuilder::new();
        // a pass may fold a constant into another or drop it (`x * c` with
        // `c` all ones): the new program still checks every storage the old
        // one did (NOTE: [trace-time values] in xform_ops::provenance)
        b.inherit_guards(old);
        let mut map = vec![None; old.avals.len()];
        for v in &old.inputs {
            let nv = b.new_input(old.aval(*v).clone());
            map[v.0 as usize] = Some(Atom::Var(nv));
        }
        let pending = vec![None; old.avals.len()];
        Rebuild { old, b, map, pending }
    }

    /// The new atom of an old atom.
    ///
    /// # Panics
    /// If an old variable is read before its equation was decided (the
    /// old program is not in execution order).
    pub fn atom(&mut self, a: Atom) -> Atom {
        match a {
            Atom::Var(v) => match self.map[v.0 as usize] {
                Some(a) => a,
                None => {
                    let t = self.pending[v.0 as usize].take().expect("variable defined before use");
                    let a = self.b.constant(&t);
                    self.map[v.0 as usize] = Some(a);
                    a
                }
            },
            Atom::Const(i) => self.b.constant(&self.old.consts[i]),
        }
    }

    /// The new atoms of old operands.
    pub fn atoms(&mut self, ins: &[Atom]) -> SmallVec<[Atom; 4]> {
        ins.iter().map(|a| self.atom(*a)).collect()
    }

    /// Renames old variable `v` to the new atom `a`.
    pub fn set(&mut self, v: Var, a: Atom) {
        self.map[v.0 as usize] = Some(a);
    }

    /// Renames old variable `v` to the constant `t`, entered into the new
    /// program only if something reads it.
    pub fn set_const(&mut self, v: Var, t: Tensor) {
        self.map[v.0 as usize] = None;
        self.pending[v.0 as usize] = Some(t);
    }

    /// The atom of a new constant.
    pub fn constant(&mut self, t: &Tensor) -> Atom {
        self.b.constant(t)
    }

    /// The constant an old atom stands for, if it is one (an old constant,
    /// or a variable renamed to a constant), without entering it into the
    /// new program.
    pub fn peek_const(&self, a: Atom) -> Option<&Tensor> {
        match a {
            Atom::Const(i) => self.old.consts.get(i),
            Atom::Var(v) => match self.map[v.0 as usize] {
                Some(Atom::Const(j)) => self.b.const_at(j),
                Some(Atom::Var(_)) => None,
                None => self.pending[v.0 as usize].as_ref(),
            },
        }
    }

    /// The tensor of a constant atom of the new program.
    pub fn const_value(&self, a: Atom) -> Option<&Tensor> {
        match a {
            Atom::Const(i) => self.b.const_at(i),
            Atom::Var(_) => None,
        }
    }

    /// The abstract value of an atom of the new program.
    pub fn new_aval(&self, a: Atom) -> xform_ops::Aval {
        match a {
            Atom::Var(v) => self.b.aval(v).clone(),
            Atom::Const(_) => self.const_value(a).expect("constant of the new program").aval(),
        }
    }

    /// Emits `prim` on new operands `ins` for the old equation whose
    /// outputs are `outs` (same abstract values); renames them and returns
    /// the new variables.
    pub fn emit(&mut self, prim: xform_ops::Prim, ins: SmallVec<[Atom; 4]>, outs: &[Var]) -> SmallVec<[Var; 2]> {
        let vars: SmallVec<[Var; 2]> = outs.iter().map(|v| self.b.new_var(self.old.aval(*v).clone())).collect();
        for (o, n) in outs.iter().zip(&vars) {
            self.map[o.0 as usize] = Some(Atom::Var(*n));
        }
        self.b.push(prim, ins, vars.clone());
        vars
    }

    /// Emits `prim` on new operands with a fresh output of abstract value
    /// `aval` (not the rename of an old variable).
    pub fn emit_new(&mut self, prim: xform_ops::Prim, ins: SmallVec<[Atom; 4]>, aval: xform_ops::Aval) -> Var {
        let v = self.b.new_var(aval);
        self.b.push(prim, ins, smallvec::smallvec![v]);
        v
    }

    /// Copies an old equation unchanged (operands renamed).
    pub fn copy_eqn(&mut self, e: &xform_ops::Eqn) -> SmallVec<[Var; 2]> {
        let ins = self.atoms(&e.inputs);
        self.emit(e.prim.clone(), ins, &e.outputs)
    }

    /// The finished program, with the old outputs renamed.
    pub fn finish(mut self) -> Program {
        let outs: SmallVec<[Atom; 4]> = self.old.outputs.iter().map(|a| self.atom(*a)).collect();
        self.b.finish(outs)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers of the passes' tests: programs built by hand, evaluated
    //! before and after a pass.

    use xform_ops::{Atom, DType, Prim, Program, ProgramBuilder, Tensor};

    /// Evaluates `p` and `q` on `args` and asserts equal results (equal
    /// values: NaNs equal, and zeros of either sign, see `simplify`).
    pub fn assert_same(p: &Program, q: &Program, args: &[Tensor]) {
        let a = p.eval(args).unwrap();
        let b = q.eval(args).unwrap();
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.shape(), x.dtype()), (y.shape(), y.dtype()));
            let (x, y) = (x.to_vec_f64(), y.to_vec_f64());
            for (u, v) in x.iter().zip(&y) {
                assert!(u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan()), "{x:?} vs {y:?}");
            }
        }
    }

    /// A program built with `body` on one input of `aval`.
    pub fn build(inputs: &[Tensor], body: impl FnOnce(&mut ProgramBuilder, &[Atom]) -> Vec<Atom>) -> Program {
        let mut b = ProgramBuilder::new();
        let ins: Vec<Atom> = inputs.iter().map(|t| Atom::Var(b.new_input(t.aval()))).collect();
        let outs = body(&mut b, &ins);
        b.finish(outs)
    }

    /// Pushes `prim` on `ins` with one output of the first operand's
    /// abstract value (or `aval`).
    pub fn push1(b: &mut ProgramBuilder, prim: Prim, ins: &[Atom], aval: Option<xform_ops::Aval>) -> Atom {
        let aval = aval.unwrap_or_else(|| match ins[0] {
            Atom::Var(v) => b.aval(v).clone(),
            Atom::Const(i) => b.const_at(i).expect("constant").aval(),
        });
        let o = b.new_var(aval);
        b.push(prim, ins.iter().copied().collect(), smallvec::smallvec![o]);
        Atom::Var(o)
    }

    /// A float32 vector of `n` values spread over [-2, 2] (zeros, halves).
    pub fn vector(n: usize) -> Tensor {
        Tensor::linspace(-2.0, 2.0, n, DType::F32)
    }
}
