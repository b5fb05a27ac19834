//! The Program IR: a typed SSA program, like a jaxpr. Produced by `trace`,
//! by linearize (the linear part of a function) and by `functionalize`;
//! evaluated through the current interpreter, so a program can itself be
//! transformed.

use crate::error::{Error, Result};
use crate::interp::bind;
use crate::prim::Prim;
use crate::tensor::{Aval, Tensor};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;

/// A variable: an index into the program's abstract values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

/// An equation operand: a variable or one of the program's constants.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Atom {
    /// A variable.
    Var(Var),
    /// The constant at this index of `Program::consts`.
    Const(usize),
}

/// One equation: `outputs = prim(inputs)`.
#[derive(Clone, Debug)]
pub struct Eqn {
    /// The primitive and its parameters.
    pub prim: Prim,
    /// Operands.
    pub inputs: SmallVec<[Atom; 4]>,
    /// Results.
    pub outputs: SmallVec<[Var; 2]>,
}

/// A typed SSA program.
#[derive(Clone, Default)]
pub struct Program {
    /// Input variables, in argument order.
    pub inputs: Vec<Var>,
    /// Captured constants (concrete arrays or values of enclosing transforms).
    pub consts: Vec<Tensor>,
    /// Equations in execution order.
    pub eqns: Vec<Eqn>,
    /// Results, in order.
    pub outputs: Vec<Atom>,
    /// The abstract value of each variable, indexed by `Var.0`.
    pub avals: Vec<Aval>,
}

impl Program {
    /// The abstract value of a variable.
    pub fn aval(&self, v: Var) -> &Aval {
        &self.avals[v.0 as usize]
    }

    /// The abstract value of an atom.
    pub fn atom_aval(&self, a: Atom) -> Aval {
        match a {
            Atom::Var(v) => self.aval(v).clone(),
            Atom::Const(i) => self.consts[i].aval(),
        }
    }

    /// Evaluates the program on `args` through the current interpreter.
    ///
    /// # Errors
    /// If the arguments do not match the inputs' shapes and dtypes, or an
    /// equation fails.
    pub fn eval(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        if args.len() != self.inputs.len() {
            return Err(Error::invalid(
                "Program::eval",
                format!("expects {} arguments, got {}", self.inputs.len(), args.len()),
            ));
        }
        let mut env: Vec<Option<Tensor>> = vec![None; self.avals.len()];
        for (i, (v, a)) in self.inputs.iter().zip(args).enumerate() {
            let want = self.aval(*v);
            let (shape, dtype) = (a.shape(), a.dtype());
            if shape != want.shape || dtype != want.dtype {
                return Err(Error::shape(
                    "Program::eval",
                    format!("argument {i} must be {want}, got {dtype}{shape}"),
                    &[&want.shape, &shape],
                ));
            }
            env[v.0 as usize] = Some(a.clone());
        }
        let read = |env: &Vec<Option<Tensor>>, a: &Atom| -> Tensor {
            match a {
                Atom::Var(v) => env[v.0 as usize].clone().expect("variable defined before use"),
                Atom::Const(i) => self.consts[*i].clone(),
            }
        };
        for e in &self.eqns {
            let ins: SmallVec<[Tensor; 4]> = e.inputs.iter().map(|a| read(&env, a)).collect();
            let outs = bind(&e.prim, &ins)?;
            for (v, t) in e.outputs.iter().zip(outs) {
                env[v.0 as usize] = Some(t);
            }
        }
        Ok(self.outputs.iter().map(|a| read(&env, a)).collect())
    }

    /// True if no equation is an in-place op (xform's IR has none: this is
    /// what `functionalize` guarantees) and, if `views` is false, none is a
    /// view op either.
    pub fn has_view_ops(&self) -> bool {
        self.eqns.iter().any(|e| e.prim.is_view())
    }
}

fn var_name(v: Var) -> String {
    // a, b, ..., z, ba, bb, ... (as jaxprs print)
    let mut n = v.0 as usize;
    let mut s = Vec::new();
    loop {
        s.push(b'a' + (n % 26) as u8);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let atom = |a: &Atom| match a {
            Atom::Var(v) => var_name(*v),
            Atom::Const(i) => format!("c{i}"),
        };
        f.write_str("{ lambda ")?;
        for (i, c) in self.consts.iter().enumerate() {
            write!(f, "c{i}:{} ", c.aval())?;
        }
        f.write_str("; ")?;
        let ins: Vec<String> = self.inputs.iter().map(|v| format!("{}:{}", var_name(*v), self.aval(*v))).collect();
        writeln!(f, "{}. let", ins.join(" "))?;
        for e in &self.eqns {
            let outs: Vec<String> = e.outputs.iter().map(|v| format!("{}:{}", var_name(*v), self.aval(*v))).collect();
            let ins: Vec<String> = e.inputs.iter().map(atom).collect();
            writeln!(f, "    {} = {} {}", outs.join(" "), e.prim, ins.join(" "))?;
        }
        let outs: Vec<String> = self.outputs.iter().map(atom).collect();
        write!(f, "  in ({}) }}", outs.join(", "))
    }
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Hashes the (pointer, version, base version) keys of constants: one multiply, as the
/// keys are already well spread (std's SipHash costs more than the rest of
/// recording an equation).
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type KeyMap = HashMap<(*const (), u64, u64), usize, std::hash::BuildHasherDefault<KeyHasher>>;

/// Builds a [`Program`] equation by equation (used by the staging
/// interpreters).
#[derive(Default)]
pub struct ProgramBuilder {
    program: Program,
    const_index: KeyMap,
    /// The tensors the keys point at, kept alive so that no key is reused.
    keep_alive: Vec<Tensor>,
}

impl ProgramBuilder {
    /// An empty builder, with room for a small program (a transformed tiny
    /// function records about a dozen equations; growing from empty cost
    /// several reallocations per call).
    pub fn new() -> Self {
        let mut b = Self::default();
        b.program.eqns.reserve(16);
        b.program.avals.reserve(32);
        b.program.inputs.reserve(4);
        b
    }

    /// A fresh variable of abstract value `aval`.
    pub fn new_var(&mut self, aval: Aval) -> Var {
        self.program.avals.push(aval);
        Var(self.program.avals.len() as u32 - 1)
    }

    /// A fresh input variable.
    pub fn new_input(&mut self, aval: Aval) -> Var {
        let v = self.new_var(aval);
        self.program.inputs.push(v);
        v
    }

    /// The atom for a constant. The program keeps the tensor's current
    /// value (a later functionalized write to the tensor does not change
    /// the program); the same value is stored once.
    pub fn constant(&mut self, t: &Tensor) -> Atom {
        // A view's value changes when its base is written, without a new
        // version of its own: reading it syncs it, and the base version it
        // was synced to is part of the key.
        let value = t.value();
        let seen = t.view_link().map_or(0, |l| l.seen_version.get());
        let key = (t.0.as_ptr(), t.version(), seen);
        if let Some(&i) = self.const_index.get(&key) {
            return Atom::Const(i);
        }
        self.program.consts.push(Tensor::from_value(value.clone()));
        drop(value);
        self.keep_alive.push(t.clone());
        let i = self.program.consts.len() - 1;
        self.const_index.insert(key, i);
        Atom::Const(i)
    }

    /// Appends an equation.
    pub fn push(&mut self, prim: Prim, inputs: SmallVec<[Atom; 4]>, outputs: SmallVec<[Var; 2]>) {
        self.program.eqns.push(Eqn { prim, inputs, outputs });
    }

    /// The abstract value of a variable.
    pub fn aval(&self, v: Var) -> &Aval {
        self.program.aval(v)
    }

    /// Number of equations so far.
    pub fn len(&self) -> usize {
        self.program.eqns.len()
    }

    /// True if no equation was recorded.
    pub fn is_empty(&self) -> bool {
        self.program.eqns.is_empty()
    }

    /// Finishes the program with these outputs.
    pub fn finish(mut self, outputs: Vec<Atom>) -> Program {
        self.program.outputs = outputs;
        self.program
    }
}
