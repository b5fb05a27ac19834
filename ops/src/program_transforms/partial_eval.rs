//! The one partial evaluation: a JVP split into its primal part and its
//! tangent part, a linear program.
//!
//! NOTE: [partial evaluation] The JVP runs with its tangents tracers of a hidden
//! staging interpreter pushed just below it ([`linearize_jvp`]). Primal work
//! has no staged inputs, so it falls through to the level below that
//! staging and runs there: eagerly under reverse mode (`linearize`,
//! `grad`, `vjp`: concrete values), into a second staging for a
//! control-flow body (`split_program`: scan's known body). Tangent work
//! is recorded into a linear [`Program`] whose constants are the primal
//! residuals it reads. Transposing that program
//! ([`super::backward::transpose`]) gives the pullback. Every op goes
//! through the current interpreter, so `grad(grad(f))`, `vmap(grad(f))`
//! and `jacfwd(jacrev(f))` need no special case.

use super::evaluate::jvp_eval;
use crate::error::{OrRaise, Result};
use crate::interp::with_interpreter;
use crate::lax;
use crate::program::Program;
use crate::staging::Staging;
use crate::tensor::{Aval, Tensor};
use smallvec::SmallVec;

/// Each output's tangent (`None`: a symbolic zero) and abstract value, as
/// a JVP hands them to [`linearize_jvp`] (inline for up to four outputs:
/// reverse mode calls it once per `grad`).
pub type TangentsOut = SmallVec<[(Option<Tensor>, Aval); 4]>;

/// Runs `jvp` with tangent tracers of a hidden staging interpreter, one
/// for each input `tangent_in` gives an abstract value (`None`: a symbolic
/// zero tangent), and records the tangent work (see NOTE: [partial evaluation]).
/// `jvp` computes the primal outputs and their tangents by whichever JVP
/// it runs (the JVP interpreter over a function, the primitives' rules
/// over a program) and returns its own result with each output's tangent
/// (`None`: zero) and abstract value. Returns that result and the linear
/// program from the given tangents to every output's tangent (zeros where
/// it is zero), whose constants are the residuals.
///
/// # Errors
/// What `jvp` returns, or a failure to make the zero tangents.
pub fn linearize_jvp<R>(
    label: &'static str,
    tangent_in: impl IntoIterator<Item = Option<Aval>>,
    jvp: impl FnOnce(&[Option<Tensor>]) -> Result<(R, TangentsOut)>,
) -> Result<(R, Program)> {
    let staging = Staging::new(label, false);
    with_interpreter(&staging, || {
        let ts: SmallVec<[Option<Tensor>; 4]> =
            tangent_in.into_iter().map(|a| a.map(|a| staging.new_input(a))).collect();
        let (result, touts) = jvp(&ts)?;
        let mut tangents: SmallVec<[Tensor; 4]> = SmallVec::with_capacity(touts.len());
        for (t, aval) in touts {
            tangents.push(match t {
                Some(t) => t,
                None => lax::zeros_aval(&aval)?,
            });
        }
        Ok((result, staging.finish(&tangents)?))
    })
}

/// The JVP of `p`, split: `known` maps the primal inputs to the primal
/// outputs followed by residuals; `unknown` maps the residuals followed by
/// the tangents of the inputs `mask` selects to the tangents of every
/// output (zeros where they are zero). This is [`linearize_jvp`] of the
/// program's JVP with the primal work staged too (a second staging below),
/// its residuals hoisted from constants into inputs. Returns `(known,
/// unknown, number of residuals)`.
pub(crate) fn split_program(p: &Program, mask: &[bool]) -> Result<(Program, Program, usize)> {
    let primal = Staging::new("partial_eval", false);
    let in_avals = p.in_avals();
    let out_avals = p.out_avals();
    crate::error::catch(|| {
        with_interpreter(&primal, || {
            let ps: Vec<Tensor> = in_avals.iter().map(|a| primal.new_input(a.clone())).collect();
            let tangent_in = in_avals.iter().zip(mask).map(|(a, &m)| m.then(|| a.clone()));
            let (outs, unknown) = linearize_jvp("partial_eval", tangent_in, |ts| {
                let (outs, touts) = jvp_eval(p, &ps, ts)?;
                Ok((outs, touts.into_iter().zip(out_avals.iter().cloned()).collect()))
            })
            .or_raise();
            let (unknown, residuals) = unknown.hoist_consts();
            let nres = residuals.len();
            let mut all = outs;
            all.extend(residuals);
            (primal.finish(&all).or_raise(), unknown, nres)
        })
    })
}
