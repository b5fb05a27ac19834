//! Control flow, custom derivative rules and rematerialization: the
//! higher-order primitives, which carry their bodies as closed
//! [`Program`]s (constants hoisted into operands, so that a value an
//! enclosing transform traces is an operand every interpreter sees; see
//! [`crate::program::Program::hoist_consts`]).
//!
//! NOTE: [control flow] xform runs eagerly, so a rule often knows the
//! value that decides the control flow (a predicate, an index, a trip
//! count): then it runs only what is taken, equation by equation with each
//! primitive's own rule at the current level (`program_transforms::evaluate`), and nothing of
//! the control flow remains (grad through a `cond` records only the taken
//! branch; reverse mode through a `while_loop` records its iterations).
//! Where the value is not known (a staged or batched predicate), the rule
//! binds the primitive again with transformed bodies (the JVP of a body,
//! its batched form, its transpose: staged from the same evaluators), so
//! trace and functionalize keep control flow as control flow, and a
//! batched predicate becomes a select (cond) or a masked loop (while),
//! as in JAX. `scan` always stays a scan: its JVP splits the body into a
//! known (primal) scan that stacks residuals and a linear (tangent) scan,
//! whose transpose is a reverse scan.

mod cond;
mod custom;
mod loops;
mod remat;
mod samples;

use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
pub(crate) use super::Family;
use super::Props;
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::prim::{Avals, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::prims::batching::BatchAxis;
use crate::program::Program;
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;
use xform_kernels::cuda_source::Kernel;
use xform_kernels::{DType, Layout};

pub use remat::RematPolicy;

/// A body: a closed program (its only constants are concrete arrays; a
/// captured tracer is an operand), shared by the primitive's copies. Two
/// bodies are equal when they are the same program.
#[derive(Clone)]
pub struct Body(pub Arc<Program>);

impl Body {
    /// A body from a closed program.
    pub fn new(p: Program) -> Body {
        debug_assert!(p.consts.iter().all(|c| !c.is_tracer()), "a body captures no tracer");
        Body(Arc::new(p))
    }
}

impl std::ops::Deref for Body {
    type Target = Program;
    fn deref(&self) -> &Program {
        &self.0
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

crate::family_enum! {
    /// The higher-order primitives. Operand layouts (each body's inputs are
    /// the named slices, in order):
    /// - `cond`: `[index, operands...]`; every branch takes `operands`.
    /// - `while`: `[cond_consts, body_consts, carry]`; `cond` takes
    ///   `[cond_consts, carry]` to a bool scalar, `body` `[body_consts,
    ///   carry]` to the carry.
    /// - `scan`: `[consts, carry, xs]` to `[carry, ys]`; the body takes
    ///   `[consts, carry, x]` to `[carry, y]`.
    /// - `custom_jvp`: `[fun_consts, rule_consts, xs]`; `fun` takes
    ///   `[fun_consts, xs]`, `rule` `[rule_consts, xs, tangents]` to
    ///   `[ys, tangents of ys]`.
    /// - `custom_vjp`: `[fun, fwd, bwd, jvp consts, xs]`; `fwd` takes
    ///   `[fwd_consts, xs]` to `[ys, residuals]`, `bwd` `[bwd_consts,
    ///   residuals, cotangents of ys]` to the cotangents of `xs`.
    /// - `custom_vjp_call` (its linear part): `[bwd_consts, jvp_consts,
    ///   residuals, xs, tangents]` to the tangents of `ys`.
    /// - `checkpoint`: the body's inputs.
    #[derive(Clone, Debug, PartialEq)]
    pub enum ControlOp, kinds ControlKind {
        /// `switch` (and `cond`, whose index is a bool): runs the branch
        /// the index selects, clamped to the branches.
        Cond {
            /// The branches, index order.
            branches: Arc<[Body]>,
        },
        /// `while_loop`.
        While {
            /// The predicate.
            cond: Body,
            /// The step.
            body: Body,
            /// Leading operands for `cond`.
            cond_consts: usize,
            /// Operands after those, for `body`.
            body_consts: usize,
            /// Reverse mode checkpoints every this many iterations (0: records every one).
            remat_every: usize,
        },
        /// `scan` (and `fori_loop` with static bounds).
        Scan {
            /// The step: `[consts, carry, x]` to `[carry, y]`.
            body: Body,
            /// Leading constant operands.
            consts: usize,
            /// Carry operands after those (the rest are xs).
            carry: usize,
            /// Steps.
            length: usize,
            /// Steps run from the last element of xs to the first.
            reverse: bool,
            /// Steps per loop iteration in compiled code (JAX's; kept for
            /// staged programs, the eager loop runs one at a time).
            unroll: usize,
        },
        /// A function with a user JVP rule.
        CustomJvp {
            /// The function.
            fun: Body,
            /// The rule: `[consts, xs, tangents]` to `[ys, tangents of ys]`.
            rule: Body,
            /// Leading operands for `fun`.
            fun_consts: usize,
            /// Operands after those, for `rule`.
            rule_consts: usize,
        },
        /// A function with a user VJP (and optionally a JVP rule).
        CustomVjp {
            /// The function.
            fun: Body,
            /// Forward pass: `[consts, xs]` to `[ys, residuals]`.
            fwd: Body,
            /// Backward pass: `[consts, residuals, cotangents of ys]` to cotangents of xs.
            bwd: Body,
            /// A JVP rule for forward mode, as `custom_jvp`'s.
            jvp: Option<Body>,
            /// The constant operands of `fun`, `fwd`, `bwd` and `jvp`, in order.
            consts: [usize; 4],
        },
        /// The tangent map of a `custom_vjp` function: transposed by its
        /// `bwd`, evaluated by its JVP rule where one is given.
        CustomVjpCall {
            /// The transpose.
            bwd: Body,
            /// The forward evaluation, if given.
            jvp: Option<Body>,
            /// Leading operands for `bwd`.
            bwd_consts: usize,
            /// Operands after those, for `jvp`.
            jvp_consts: usize,
            /// Residual operands after those.
            residuals: usize,
        },
        /// `checkpoint` (remat): its JVP saves only what the policy says and
        /// its transpose recomputes the rest.
        Checkpoint {
            /// The function.
            body: Body,
            /// What reverse mode saves.
            policy: RematPolicy,
        },
    }
}

impl From<ControlOp> for Prim {
    fn from(op: ControlOp) -> Prim {
        Prim::Control(op)
    }
}

impl ControlOp {
    /// Every body it holds.
    pub fn bodies(&self) -> SmallVec<[&Body; 4]> {
        let mut v: SmallVec<[&Body; 4]> = SmallVec::new();
        match self {
            ControlOp::Cond { branches } => v.extend(branches.iter()),
            ControlOp::While { cond, body, .. } => v.extend([cond, body]),
            ControlOp::Scan { body, .. } | ControlOp::Checkpoint { body, .. } => v.push(body),
            ControlOp::CustomJvp { fun, rule, .. } => v.extend([fun, rule]),
            ControlOp::CustomVjp { fun, fwd, bwd, jvp, .. } => {
                v.extend([fun, fwd, bwd]);
                v.extend(jvp.as_ref());
            }
            ControlOp::CustomVjpCall { bwd, jvp, .. } => {
                v.push(bwd);
                v.extend(jvp.as_ref());
            }
        }
        v
    }
}

/// Binds a control primitive.
pub(crate) fn bind_control(op: ControlOp, ins: &[Tensor]) -> Result<Outs> {
    crate::interp::bind(&Prim::Control(op), ins)
}

/// The operand slices `parts`, concatenated.
pub(crate) fn cat(parts: &[&[Tensor]]) -> Vec<Tensor> {
    parts.iter().flat_map(|p| p.iter().cloned()).collect()
}

/// The abstract-value slices `parts`, concatenated.
pub(crate) fn cat_refs<'a>(parts: &[&[AvalRef<'a>]]) -> Vec<AvalRef<'a>> {
    parts.iter().flat_map(|p| p.iter().copied()).collect()
}

/// Runs `f` at level 0 (the body of a lowering: every operand concrete).
pub(crate) fn at_eval<R>(f: impl FnOnce() -> R) -> R {
    let _g = crate::interp::set_current(0);
    f()
}

/// Tensors of concrete operands.
pub(crate) fn tensors(ins: &[&Array]) -> Vec<Tensor> {
    ins.iter().map(|a| Tensor::from_array((*a).clone())).collect()
}

/// Checks that operand avals match a body's inputs.
pub(crate) fn check_inputs(op: &str, what: &str, body: &Program, ins: &[AvalRef<'_>]) -> Result<()> {
    if body.inputs.len() != ins.len() {
        return Err(Error::invalid(op, format!("{what} takes {} operands, got {}", body.inputs.len(), ins.len())));
    }
    for (i, (v, a)) in body.inputs.iter().zip(ins).enumerate() {
        let want = body.aval(*v);
        if want.shape != *a.shape || want.dtype != a.dtype {
            return Err(Error::shape(
                op,
                format!("operand {i} of {what} must be {want}, got {}{}", a.dtype.short_name(), a.shape),
                &[&want.shape, a.shape],
            ));
        }
    }
    Ok(())
}

fn indent(s: &str, by: &str) -> String {
    s.lines().collect::<Vec<_>>().join(&format!("\n{by}"))
}

impl Family for ControlOp {
    type Kind = ControlKind;
    const KINDS: &'static [ControlKind] = ControlKind::ALL;

    fn kind(&self) -> ControlKind {
        ControlOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            ControlOp::Cond { .. } => "cond",
            ControlOp::While { .. } => "while",
            ControlOp::Scan { .. } => "scan",
            ControlOp::CustomJvp { .. } => "custom_jvp_call",
            ControlOp::CustomVjp { .. } => "custom_vjp_call",
            ControlOp::CustomVjpCall { .. } => "custom_vjp_tangent",
            ControlOp::Checkpoint { .. } => "checkpoint",
        }
    }

    fn props(&self) -> Props {
        // its bodies may hold collectives (see `axis_names`)
        Props::NONE.naming_axes()
    }

    fn axis_names(&self) -> SmallVec<[crate::interp::AxisName; 2]> {
        let mut names = SmallVec::new();
        for b in self.bodies() {
            for n in b.axis_names() {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const IN: &str = "  ";
        let body = |f: &mut fmt::Formatter<'_>, name: &str, p: &Program| -> fmt::Result {
            write!(f, "\n    {IN}{name}={}", indent(&p.to_string(), &format!("    {IN}")))
        };
        f.write_str("[")?;
        match self {
            ControlOp::Cond { branches } => {
                write!(f, "\n    {IN}branches=(")?;
                for b in branches.iter() {
                    write!(f, "\n    {IN}  {}", indent(&b.to_string(), &format!("    {IN}  ")))?;
                }
                write!(f, "\n    {IN})")?;
            }
            ControlOp::While { cond, body: b, cond_consts, body_consts, remat_every } => {
                write!(f, "cond_nconsts={cond_consts} body_nconsts={body_consts}")?;
                if *remat_every > 0 {
                    write!(f, " remat_every={remat_every}")?;
                }
                body(f, "cond_jaxpr", cond)?;
                body(f, "body_jaxpr", b)?;
            }
            ControlOp::Scan { body: b, consts, carry, length, reverse, unroll } => {
                write!(
                    f,
                    "length={length} num_consts={consts} num_carry={carry} reverse={} unroll={unroll}",
                    if *reverse { "True" } else { "False" }
                )?;
                body(f, "jaxpr", b)?;
            }
            ControlOp::CustomJvp { fun, rule, .. } => {
                body(f, "call_jaxpr", fun)?;
                body(f, "jvp", rule)?;
            }
            ControlOp::CustomVjp { fun, fwd, bwd, jvp, .. } => {
                body(f, "call_jaxpr", fun)?;
                body(f, "fwd", fwd)?;
                body(f, "bwd", bwd)?;
                if let Some(j) = jvp {
                    body(f, "jvp", j)?;
                }
            }
            ControlOp::CustomVjpCall { bwd, jvp, residuals, .. } => {
                write!(f, "num_res={residuals}")?;
                body(f, "bwd", bwd)?;
                if let Some(j) = jvp {
                    body(f, "jvp", j)?;
                }
            }
            ControlOp::Checkpoint { body: b, policy } => {
                write!(f, "policy={policy}")?;
                body(f, "jaxpr", b)?;
            }
        }
        write!(f, "\n    ]")
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            ControlOp::Cond { branches } => cond::shape_rule(branches, ins),
            ControlOp::While { .. } | ControlOp::Scan { .. } => loops::shape_rule(self, ins),
            ControlOp::CustomJvp { .. } | ControlOp::CustomVjp { .. } | ControlOp::CustomVjpCall { .. } => {
                custom::shape_rule(self, ins)
            }
            ControlOp::Checkpoint { body, .. } => {
                check_inputs("checkpoint", "the body", body, ins)?;
                Ok(body.out_avals().into_iter().collect())
            }
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        let ins = tensors(ins);
        at_eval(|| match self {
            ControlOp::Cond { branches } => cond::eval(branches, &ins),
            ControlOp::While { .. } | ControlOp::Scan { .. } => loops::eval(self, &ins),
            ControlOp::CustomJvp { .. } | ControlOp::CustomVjp { .. } | ControlOp::CustomVjpCall { .. } => {
                custom::eval(self, &ins)
            }
            ControlOp::Checkpoint { body, .. } => Ok(body.eval(&ins)?.into_iter().collect()),
        })
    }

    /// Control flow evaluates its bodies through the interpreters, whose
    /// equations each run on their operands' device.
    fn lower_device(&self, ins: &[&Array], _: &dyn crate::backend::Backend) -> Result<Outs> {
        self.lower(ins)
    }

    fn jvp(&self, _prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        let (outs, touts) = match self {
            ControlOp::Cond { branches } => cond::jvp(branches, primals, tangents)?,
            ControlOp::While { .. } | ControlOp::Scan { .. } => loops::jvp(self, primals, tangents)?,
            ControlOp::CustomJvp { .. } | ControlOp::CustomVjp { .. } | ControlOp::CustomVjpCall { .. } => {
                custom::jvp(self, primals, tangents)?
            }
            ControlOp::Checkpoint { body, policy } => remat::jvp(body, *policy, primals, tangents)?,
        };
        // Integer and bool outputs have no tangent.
        let touts = touts.into_iter().zip(&outs).map(|(t, o)| t.filter(|_| o.dtype().is_float())).collect();
        Ok((outs.into_iter().collect(), touts))
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            ControlOp::Cond { branches } => cond::transpose(branches, cts, args),
            ControlOp::While { .. } | ControlOp::Scan { .. } => loops::transpose(self, cts, args),
            ControlOp::CustomJvp { .. } | ControlOp::CustomVjp { .. } | ControlOp::CustomVjpCall { .. } => {
                custom::transpose(self, cts, args)
            }
            ControlOp::Checkpoint { body, .. } => remat::transpose(body, cts, args),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        let (outs, b) = match self {
            ControlOp::Cond { branches } => cond::batch(branches, ins, bdims, axis)?,
            ControlOp::While { .. } | ControlOp::Scan { .. } => loops::batch(self, ins, bdims, axis)?,
            ControlOp::CustomJvp { .. } | ControlOp::CustomVjp { .. } | ControlOp::CustomVjpCall { .. } => {
                custom::batch(self, ins, bdims, axis)?
            }
            ControlOp::Checkpoint { body, policy } => remat::batch(body, *policy, ins, bdims, axis)?,
        };
        Ok((outs.into_iter().collect(), b.into_iter().collect()))
    }

    fn view_layout(&self, _layout: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<super::sample::Sample> {
        samples::samples()
    }

    fn cuda_kernels(_d: DType) -> Vec<Kernel> {
        Vec::new()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: false, sink: false, thread_bound: true, lower_into: false }
    }

    /// Rows do not pass: the split keeps its operands whole.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::no_rows(q)
    }
}

/// A body's inputs batched at `bdims` moved so each batched one sits at 0
/// (`None`s broadcast where `force` says so); returns the moved operands
/// and their new batch dims.
pub(crate) fn move_to_front(
    ins: &[Tensor],
    bdims: &[Option<usize>],
    force: &[bool],
    size: usize,
) -> Result<(Vec<Tensor>, Vec<Option<usize>>)> {
    let mut out = Vec::with_capacity(ins.len());
    let mut b = Vec::with_capacity(ins.len());
    for ((x, d), &f) in ins.iter().zip(bdims).zip(force) {
        if d.is_some() || f {
            out.push(super::batching::to_position(x, *d, 0, size)?);
            b.push(Some(0));
        } else {
            out.push(x.clone());
            b.push(None);
        }
    }
    Ok((out, b))
}

/// The abstract values of tensors.
pub(crate) fn avals_of(ts: &[Tensor]) -> Vec<Aval> {
    ts.iter().map(Tensor::aval).collect()
}
