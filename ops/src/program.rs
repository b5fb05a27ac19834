//! The Program IR: a typed SSA program, like a jaxpr. Produced by `trace`,
//! by linearize (the linear part of a function) and by `functionalize`;
//! evaluated through the current interpreter, so a program can itself be
//! transformed.

use crate::error::{Error, Result};
use crate::interp::bind;
use crate::prim::Prim;
use crate::provenance::push_guard;
pub use crate::provenance::VersionGuard;
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
    /// The storage version (see [`crate::Array::storage_version`]) of each
    /// concrete constant when it was captured (`u64::MAX`: not concrete).
    /// See [`Program::check_consts`].
    const_versions: Vec<u64>,
    /// Storages some constant was computed from while the program was
    /// staged (or that a staged decision read), with their versions then:
    /// checked with the constants (NOTE: [trace-time values] in
    /// `provenance`). Usually empty.
    guards: Vec<VersionGuard>,
}

/// The storage version of a concrete constant (`u64::MAX` for a tracer).
fn version_of(value: &crate::tensor::Value) -> u64 {
    match value {
        crate::tensor::Value::Array(a) => a.storage_version(),
        crate::tensor::Value::Tracer(_) => u64::MAX,
    }
}

impl Program {
    /// The axis names its equations refer to (collectives, also inside
    /// control-flow bodies): what must be bound where it runs (NOTE:
    /// [named axes]).
    pub fn axis_names(&self) -> smallvec::SmallVec<[crate::interp::AxisName; 2]> {
        let mut names = smallvec::SmallVec::new();
        for e in &self.eqns {
            for n in e.prim.axis_names() {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names
    }

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

    /// Replaces constant `i` (recording the version of its storage now).
    ///
    /// # Panics
    /// If there is no constant `i`.
    pub fn replace_const(&mut self, i: usize, t: Tensor) {
        if let Some(v) = self.const_versions.get_mut(i) {
            *v = version_of(&t.value());
        }
        self.consts[i] = t;
    }

    /// Keeps the first `n` outputs and drops every equation no kept output
    /// depends on (programs are pure, so a dead equation only costs time).
    pub fn keep_outputs(&mut self, n: usize) {
        self.outputs.truncate(n);
        let keep = self.live_eqns();
        let mut k = 0;
        self.eqns.retain(|_| {
            k += 1;
            keep[k - 1]
        });
    }

    /// Per equation, whether some output depends on it.
    pub fn live_eqns(&self) -> Vec<bool> {
        let mut live = vec![false; self.avals.len()];
        for a in &self.outputs {
            if let Atom::Var(v) = a {
                live[v.0 as usize] = true;
            }
        }
        let mut keep = vec![false; self.eqns.len()];
        for (k, eqn) in self.eqns.iter().enumerate().rev() {
            if eqn.outputs.iter().any(|v| live[v.0 as usize]) {
                keep[k] = true;
                for a in &eqn.inputs {
                    if let Atom::Var(v) = a {
                        live[v.0 as usize] = true;
                    }
                }
            }
        }
        keep
    }

    /// Checks that no concrete constant was written in place since it was
    /// captured. A program keeps its constants by reference (a copy of
    /// every residual would cost memory and time on every transformed
    /// call); an eager in-place write to one of them afterwards (or to any
    /// view of its storage) would silently change what the program
    /// computes, so it is refused here, as PyTorch refuses a backward pass
    /// over a tensor "modified by an inplace operation". Functionalized
    /// writes (under a transform) never change a captured value: they
    /// replace the tensor's node, not its storage.
    ///
    /// # Errors
    /// An in-place error naming `op` and the constant.
    pub fn check_consts(&self, op: &str) -> Result<()> {
        if let Some(g) = self.guards.iter().find(|g| g.is_stale()) {
            return Err(Error::in_place(
                op,
                format!(
                    "a tensor captured by the recorded program ({}) was modified by an in-place operation after \
                     the program was recorded (storage version {}, recorded at {}); a value the program computed \
                     from it when it was recorded would be stale. Copy the tensor before writing to it, or \
                     record the program again",
                    g.array.aval_ref().to_owned(),
                    g.array.storage_version(),
                    g.version
                ),
            ));
        }
        for (i, (c, &seen)) in self.consts.iter().zip(&self.const_versions).enumerate() {
            if seen == u64::MAX {
                continue;
            }
            let now = version_of(&c.value());
            if now != seen {
                return Err(Error::in_place(
                    op,
                    format!(
                        "a tensor captured by the recorded program (constant c{i}, {}) was modified by an \
                         in-place operation after the program was recorded (storage version {now}, recorded at \
                         {seen}); the program would compute with the new values. Copy the tensor before \
                         writing to it, or record the program again",
                        c.aval()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every storage this program depends on, with the version it saw:
    /// its concrete constants' and its guards (see [`VersionGuard`]).
    pub fn version_guards(&self) -> Vec<VersionGuard> {
        let mut out = self.guards.clone();
        for (c, &seen) in self.consts.iter().zip(&self.const_versions) {
            if let (crate::tensor::Value::Array(a), true) = (&*c.value(), seen != u64::MAX) {
                push_guard(&mut out, VersionGuard { array: a.clone(), version: seen });
            }
        }
        out
    }

    /// The program with its constants turned into leading inputs (in the
    /// constants' order), and the constants: a closed body for a
    /// higher-order primitive, whose captured values are then operands
    /// that every interpreter sees.
    pub fn hoist_consts(mut self) -> (Program, Vec<Tensor>) {
        let consts = std::mem::take(&mut self.consts);
        self.const_versions.clear();
        if consts.is_empty() {
            return (self, consts);
        }
        let mut inputs = Vec::with_capacity(consts.len() + self.inputs.len());
        for c in &consts {
            self.avals.push(c.aval());
            inputs.push(Var(self.avals.len() as u32 - 1));
        }
        let hoisted = inputs.clone();
        let map = |a: &mut Atom| {
            if let Atom::Const(i) = *a {
                *a = Atom::Var(hoisted[i]);
            }
        };
        for e in &mut self.eqns {
            e.inputs.iter_mut().for_each(map);
        }
        self.outputs.iter_mut().for_each(map);
        inputs.append(&mut self.inputs);
        self.inputs = inputs;
        (self, consts)
    }

    /// The program with unused inputs of abstract values `avals` inserted
    /// at input position `at`.
    pub fn insert_inputs(mut self, at: usize, avals: &[Aval]) -> Program {
        let mut new = Vec::with_capacity(avals.len());
        for a in avals {
            self.avals.push(a.clone());
            new.push(Var(self.avals.len() as u32 - 1));
        }
        let tail = self.inputs.split_off(at);
        self.inputs.extend(new);
        self.inputs.extend(tail);
        self
    }

    /// The abstract values of the inputs.
    pub fn in_avals(&self) -> Vec<Aval> {
        self.inputs.iter().map(|v| self.aval(*v).clone()).collect()
    }

    /// The abstract values of the outputs.
    pub fn out_avals(&self) -> Vec<Aval> {
        self.outputs.iter().map(|a| self.atom_aval(*a)).collect()
    }

    /// Evaluates the program on `args` through the current interpreter.
    ///
    /// # Errors
    /// If the arguments do not match the inputs' shapes and dtypes, a
    /// captured constant was written in place since it was recorded (see
    /// [`Program::check_consts`]), or an equation fails.
    pub fn eval(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_consts("Program::eval")?;
        // evaluated while a program is staged: a constant this one computed
        // from captured tensors when it was recorded (its guards) is
        // computed from them in that program too, besides being itself
        // (each equation's own reads are recorded as `bind` evaluates it)
        if crate::provenance::recording() && !self.guards.is_empty() {
            for c in &self.consts {
                if let crate::tensor::Value::Array(a) = &*c.value() {
                    let mut from = self.guards.clone();
                    push_guard(&mut from, VersionGuard::now(a));
                    crate::provenance::note_derived(a, &from);
                }
            }
        }
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

type KeyMap = HashMap<crate::tensor::ValueKey, usize, std::hash::BuildHasherDefault<KeyHasher>>;

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
    /// An empty builder. Its buffers are those of a program dropped earlier
    /// on this thread when there is one (the `spare` module), else new ones with
    /// room for a small program.
    pub fn new() -> Self {
        let (program, const_index, keep_alive) = spare::take();
        ProgramBuilder { program, const_index, keep_alive }
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
        let key = t.value_key();
        if let Some(&i) = self.const_index.get(&key) {
            return Atom::Const(i);
        }
        let value = t.value().clone();
        self.program.const_versions.push(version_of(&value));
        self.program.consts.push(Tensor::from_value(value));
        self.keep_alive.push(t.clone());
        let i = self.program.consts.len() - 1;
        self.const_index.insert(key, i);
        Atom::Const(i)
    }

    /// Adds version guards to the program (see [`VersionGuard`]).
    pub fn guard(&mut self, guards: impl IntoIterator<Item = VersionGuard>) {
        for g in guards {
            push_guard(&mut self.program.guards, g);
        }
    }

    /// Guards the program being built with every storage `old` depends on
    /// (a pass that folds or drops a constant of `old` keeps its check).
    pub fn inherit_guards(&mut self, old: &Program) {
        self.guard(old.version_guards());
    }

    /// The constant at index `i` of the program being built.
    pub fn const_at(&self, i: usize) -> Option<&Tensor> {
        self.program.consts.get(i)
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
    pub fn finish(mut self, outputs: impl IntoIterator<Item = Atom>) -> Program {
        self.program.outputs.extend(outputs);
        spare::give_keys(std::mem::take(&mut self.const_index), std::mem::take(&mut self.keep_alive));
        std::mem::take(&mut self.program)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        spare::give_program(self);
    }
}

/// Buffers of finished builders and dropped programs, reused by the next
/// builder on this thread.
///
/// Every `grad` or `vjp` call records a small program and drops it before
/// it returns; allocating and freeing its seven buffers (two of them over
/// glibc's per-thread cache size) cost more than recording the equations.
/// A few sets are kept, for nested transforms; buffers that grew large are
/// freed instead, so a big traced program does not pin memory.
mod spare {
    use super::{Atom, Eqn, KeyMap, Program, Var};
    use crate::tensor::{Aval, Tensor};
    use std::cell::RefCell;

    /// Sets kept per thread.
    const KEEP: usize = 4;
    /// Equations (and, times four, variables) above which a buffer is freed.
    const MAX_EQNS: usize = 256;

    struct Bufs {
        inputs: Vec<Var>,
        consts: Vec<Tensor>,
        eqns: Vec<Eqn>,
        outputs: Vec<Atom>,
        avals: Vec<Aval>,
        const_versions: Vec<u64>,
    }

    thread_local! {
        static PROGRAMS: RefCell<Vec<Bufs>> = const { RefCell::new(Vec::new()) };
        static KEYS: RefCell<Vec<(KeyMap, Vec<Tensor>)>> = const { RefCell::new(Vec::new()) };
    }

    /// Empty buffers for a builder: recycled ones, or new ones with room
    /// for about a dozen equations (growing from empty costs several
    /// reallocations per call).
    pub(super) fn take() -> (Program, KeyMap, Vec<Tensor>) {
        let bufs = PROGRAMS.try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop())).ok().flatten();
        let program = match bufs {
            Some(b) => Program {
                inputs: b.inputs,
                consts: b.consts,
                eqns: b.eqns,
                outputs: b.outputs,
                avals: b.avals,
                const_versions: b.const_versions,
                guards: Vec::new(),
            },
            None => Program {
                inputs: Vec::with_capacity(4),
                consts: Vec::with_capacity(8),
                eqns: Vec::with_capacity(16),
                outputs: Vec::with_capacity(4),
                avals: Vec::with_capacity(32),
                const_versions: Vec::with_capacity(8),
                guards: Vec::new(),
            },
        };
        let keys = KEYS.try_with(|k| k.try_borrow_mut().ok().and_then(|mut k| k.pop())).ok().flatten();
        let (const_index, keep_alive) = keys.unwrap_or_default();
        (program, const_index, keep_alive)
    }

    /// Keeps a dropped program's buffers (emptied) for reuse.
    pub(super) fn give_program(p: &mut Program) {
        if p.eqns.capacity() == 0 || p.eqns.capacity() > MAX_EQNS || p.avals.capacity() > 4 * MAX_EQNS {
            return;
        }
        // Emptied before the thread-local is borrowed: dropping constants
        // may drop other programs' tensors, never a program, but this keeps
        // the borrow short either way.
        p.inputs.clear();
        p.consts.clear();
        p.eqns.clear();
        p.outputs.clear();
        p.avals.clear();
        p.const_versions.clear();
        p.guards = Vec::new();
        let bufs = Bufs {
            inputs: std::mem::take(&mut p.inputs),
            consts: std::mem::take(&mut p.consts),
            eqns: std::mem::take(&mut p.eqns),
            outputs: std::mem::take(&mut p.outputs),
            avals: std::mem::take(&mut p.avals),
            const_versions: std::mem::take(&mut p.const_versions),
        };
        let _ = PROGRAMS.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < KEEP {
                    s.push(bufs);
                }
            }
        });
    }

    /// Keeps a finished builder's constant index (emptied) for reuse.
    pub(super) fn give_keys(mut index: KeyMap, mut keep_alive: Vec<Tensor>) {
        if index.capacity() > MAX_EQNS || keep_alive.capacity() > MAX_EQNS {
            return;
        }
        index.clear();
        keep_alive.clear();
        let _ = KEYS.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < KEEP {
                    s.push((index, keep_alive));
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prims::binary::BinaryOp;
    use smallvec::smallvec;

    fn add_const_program(x: &Tensor) -> Program {
        let mut b = ProgramBuilder::new();
        let v = b.new_input(x.aval());
        let c = b.constant(x);
        let o = b.new_var(x.aval());
        b.push(Prim::Binary(BinaryOp::Add), smallvec![Atom::Var(v), c], smallvec![o]);
        b.finish([Atom::Var(o)])
    }

    /// A builder that reuses a dropped program's buffers starts empty and
    /// records a correct program.
    #[test]
    fn recycled_buffers_start_empty() {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
        let first = add_const_program(&x);
        assert_eq!(first.eval(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>(), vec![2.0, 4.0]);
        drop(first);
        let fresh = ProgramBuilder::new();
        assert!(fresh.is_empty());
        let empty = fresh.finish([]);
        assert!(empty.eqns.capacity() > 0, "the dropped program's buffers are reused");
        assert!(empty.inputs.is_empty() && empty.consts.is_empty() && empty.outputs.is_empty());
        assert!(empty.avals.is_empty());
        drop(empty);
        let y = Tensor::from_vec(vec![5.0f32, -1.0], [2]);
        let second = add_const_program(&y);
        assert_eq!((second.eqns.len(), second.consts.len()), (1, 1));
        assert_eq!(second.eval(&[x]).unwrap()[0].to_vec::<f32>(), vec![6.0, 1.0]);
    }

    /// Dropping an output drops the equations only it needed.
    #[test]
    fn keep_outputs_drops_dead_equations() {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
        let mut b = ProgramBuilder::new();
        let v = b.new_input(x.aval());
        let (a, m) = (b.new_var(x.aval()), b.new_var(x.aval()));
        let add = Prim::Binary(BinaryOp::Add);
        b.push(add.clone(), smallvec![Atom::Var(v), Atom::Var(v)], smallvec![a]);
        b.push(Prim::Binary(BinaryOp::Mul), smallvec![Atom::Var(v), Atom::Var(v)], smallvec![m]);
        let mut p = b.finish([Atom::Var(a), Atom::Var(m)]);
        p.keep_outputs(1);
        assert_eq!((p.eqns.len(), p.outputs.len()), (1, 1));
        assert!(matches!(p.eqns[0].prim, Prim::Binary(BinaryOp::Add)));
        assert_eq!(p.eval(&[x]).unwrap()[0].to_vec::<f32>(), vec![2.0, 4.0]);
    }
}
