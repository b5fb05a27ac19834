//! `custom_jvp`, `custom_vjp` and `checkpoint` over pytrees.
//!
//! # Compared with JAX and PyTorch
//!
//! - [`custom_jvp`] is JAX's `jax.custom_jvp`: the rule gives the output
//!   tangent from the primals and input tangents; reverse mode transposes
//!   the rule's tangent part (so it must be linear in the tangents), and
//!   every transform composes with it (vmap batches the function and the
//!   rule like any code; grad of grad differentiates the rule).
//! - [`custom_vjp`] is JAX's `jax.custom_vjp` (`fwd` returns the output and
//!   residuals, `bwd` maps residuals and output cotangents to input
//!   cotangents) and PyTorch's `torch.autograd.Function` (`forward` saving
//!   tensors for `backward`). Forward mode through it needs a JVP rule
//!   ([`CustomVjp::with_jvp`], PyTorch's `jvp` staticmethod); without one,
//!   jvp / jacfwd of it is an error, as in JAX. `bwd` runs under the
//!   transforms in force, so it is differentiable itself (grad of grad), as
//!   with `create_graph=True` in PyTorch.
//! - Neither may differentiate a value its closures capture: pass it as an
//!   argument (JAX refuses the same; its `closure_convert` is not needed
//!   here, since xform hoists the captured values itself).
//! - A function that writes to its arguments in place (which JAX's pure
//!   functions cannot) leaves them written as its eager call would, under
//!   every transform: the final values are computed by the function's own
//!   code beside the custom rule's primitive, and differentiated as
//!   ordinary code (the custom rule gives the derivative of the results
//!   only; the rules' own writes to their arguments are not seen). The
//!   same holds for [`checkpoint`], whose body returns the final values
//!   with its results.

use super::{avals, check_leaf_types, check_same_types, stage_fn, stage_writing, write_back_written};
use crate::tree::Tree;
use xform_ops::prim::{Body, ControlOp, Prim, RematPolicy};
use xform_ops::{bind, Aval, Error, OrRaise, Program, Result, Tensor};

/// A function with a custom JVP rule; see [`custom_jvp`].
pub struct CustomJvp<F, R> {
    f: F,
    rule: R,
}

/// `f` with the JVP rule `rule(primals, tangents) -> (outputs, output
/// tangents)` (JAX's `jax.custom_jvp` with `defjvp`). See the module
/// documentation for how it compares with JAX and PyTorch.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{custom_jvp, grad};
/// // log(1 + exp(x)) with a stable derivative: sigmoid(x).
/// let softplus = custom_jvp(
///     |x: &Tensor| x.exp().log1p(),
///     |x: &Tensor, t: &Tensor| (x.exp().log1p(), x.sigmoid() * t),
/// );
/// let g = grad(|x: &Tensor| softplus.call(x).sum())(&Tensor::from_vec(vec![1000.0f64], [1]));
/// assert_eq!(g.to_vec::<f64>(), vec![1.0]);
/// ```
pub fn custom_jvp<F, R>(f: F, rule: R) -> CustomJvp<F, R> {
    CustomJvp { f, rule }
}

impl<F, R> CustomJvp<F, R> {
    /// Applies the function.
    ///
    /// # Panics
    /// If the rule's outputs or tangents do not match the function's
    /// outputs (the message names the leaf), or the function fails.
    #[track_caller]
    pub fn call<X: Tree, Y: Tree>(&self, x: &X) -> Y
    where
        F: Fn(&X) -> Y,
        R: Fn(&X, &X) -> (Y, Y),
    {
        self.try_call(x).or_raise()
    }

    /// [`CustomJvp::call`] returning an error instead of panicking.
    pub fn try_call<X: Tree, Y: Tree>(&self, x: &X) -> Result<Y>
    where
        F: Fn(&X) -> Y,
        R: Fn(&X, &X) -> (Y, Y),
    {
        let op = "custom_jvp";
        let in_avals = avals(x);
        let n = in_avals.len();
        let (fun, written) = stage_writing(op, &in_avals, |ins| (self.f)(&x.with_leaves(ins.iter().cloned())))?;
        let (fun, finals) = split_finals(fun);
        let rule_avals: Vec<Aval> = in_avals.iter().chain(&in_avals).cloned().collect();
        let rule = stage_fn(op, &rule_avals, |ins| {
            (self.rule)(&x.with_leaves(ins[..n].iter().cloned()), &x.with_leaves(ins[n..].iter().cloned()))
        })?;
        check_same_types(op, "the function", &fun.out, "the JVP rule's output", &rule.out.0)?;
        check_same_types(op, "the function", &fun.out, "the JVP rule's tangent", &rule.out.1)?;
        let mut operands = fun.consts.clone();
        operands.extend(rule.consts.iter().cloned());
        operands.extend(x.leaves().iter().cloned());
        let prim = Prim::Control(ControlOp::CustomJvp {
            fun: Body::new(fun.program),
            rule: Body::new(rule.program),
            fun_consts: fun.consts.len(),
            rule_consts: rule.consts.len(),
        });
        let y = bind(&prim, &operands)?;
        write_back_finals(op, finals, &fun.consts, x, &written)?;
        Ok(fun.out.with_leaves(y))
    }
}

/// No JVP rule (the default of [`custom_vjp`]).
pub struct NoJvp;

/// A function with a custom VJP; see [`custom_vjp`].
pub struct CustomVjp<F, Fw, B, J = NoJvp> {
    f: F,
    fwd: Fw,
    bwd: B,
    jvp: J,
}

/// `f` whose reverse-mode derivative is `fwd(x) -> (y, residuals)` then
/// `bwd(residuals, cotangent of y) -> cotangent of x` (JAX's
/// `jax.custom_vjp` with `defvjp`; PyTorch's `autograd.Function`). See the
/// module documentation for how it compares with JAX and PyTorch.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{custom_vjp, grad};
/// // A straight-through estimator: round forward, identity backward.
/// let ste = custom_vjp(
///     |x: &Tensor| x.round(),
///     |x: &Tensor| (x.round(), ()),
///     |_: &(), ct: &Tensor| ct.clone(),
/// );
/// let g = grad(|x: &Tensor| ste.call(x).sum())(&Tensor::from_vec(vec![0.3f32, 1.7], [2]));
/// assert_eq!(g.to_vec::<f32>(), vec![1.0, 1.0]);
/// ```
pub fn custom_vjp<F, Fw, B>(f: F, fwd: Fw, bwd: B) -> CustomVjp<F, Fw, B> {
    CustomVjp { f, fwd, bwd, jvp: NoJvp }
}

impl<F, Fw, B> CustomVjp<F, Fw, B, NoJvp> {
    /// Adds a JVP rule (as [`custom_jvp`]'s) for forward mode (jvp,
    /// jacfwd); reverse mode keeps using `fwd` and `bwd`.
    pub fn with_jvp<J>(self, jvp: J) -> CustomVjp<F, Fw, B, J> {
        CustomVjp { f: self.f, fwd: self.fwd, bwd: self.bwd, jvp }
    }
}

/// Stages a JVP rule, if there is one.
pub trait MaybeJvp<X, Y> {
    /// The staged rule (a closed program and its captured values), or `None`.
    fn stage(&self, x: &X, out: &Y) -> Result<Option<(Program, Vec<Tensor>)>>;
}

impl<X, Y> MaybeJvp<X, Y> for NoJvp {
    fn stage(&self, _: &X, _: &Y) -> Result<Option<(Program, Vec<Tensor>)>> {
        Ok(None)
    }
}

impl<X: Tree, Y: Tree, J: Fn(&X, &X) -> (Y, Y)> MaybeJvp<X, Y> for J {
    fn stage(&self, x: &X, out: &Y) -> Result<Option<(Program, Vec<Tensor>)>> {
        let op = "custom_vjp";
        let in_avals = avals(x);
        let n = in_avals.len();
        let all: Vec<Aval> = in_avals.iter().chain(&in_avals).cloned().collect();
        let s = stage_fn(op, &all, |ins| {
            self(&x.with_leaves(ins[..n].iter().cloned()), &x.with_leaves(ins[n..].iter().cloned()))
        })?;
        check_same_types(op, "the function", out, "the JVP rule's output", &s.out.0)?;
        check_same_types(op, "the function", out, "the JVP rule's tangent", &s.out.1)?;
        Ok(Some((s.program, s.consts)))
    }
}

impl<F, Fw, B, J> CustomVjp<F, Fw, B, J> {
    /// Applies the function.
    ///
    /// # Panics
    /// If `fwd`'s output differs from the function's, `bwd`'s cotangents
    /// differ from the inputs' types (the message names the leaf), or a
    /// function fails.
    #[track_caller]
    pub fn call<X: Tree, Y: Tree, R: Tree>(&self, x: &X) -> Y
    where
        F: Fn(&X) -> Y,
        Fw: Fn(&X) -> (Y, R),
        B: Fn(&R, &Y) -> X,
        J: MaybeJvp<X, Y>,
    {
        self.try_call(x).or_raise()
    }

    /// [`CustomVjp::call`] returning an error instead of panicking.
    pub fn try_call<X: Tree, Y: Tree, R: Tree>(&self, x: &X) -> Result<Y>
    where
        F: Fn(&X) -> Y,
        Fw: Fn(&X) -> (Y, R),
        B: Fn(&R, &Y) -> X,
        J: MaybeJvp<X, Y>,
    {
        let op = "custom_vjp";
        let in_avals = avals(x);
        let (fun, written) = stage_writing(op, &in_avals, |ins| (self.f)(&x.with_leaves(ins.iter().cloned())))?;
        let (fun, finals) = split_finals(fun);
        let fwd = stage_fn(op, &in_avals, |ins| (self.fwd)(&x.with_leaves(ins.iter().cloned())))?;
        check_same_types(op, "the function", &fun.out, "fwd's output", &fwd.out.0)?;
        let (y, r) = &fwd.out;
        let (r_avals, y_avals) = (avals(r), avals(y));
        let nr = r_avals.len();
        let bwd_avals: Vec<Aval> = r_avals.iter().chain(&y_avals).cloned().collect();
        let bwd = stage_fn(op, &bwd_avals, |ins| {
            (self.bwd)(&r.with_leaves(ins[..nr].iter().cloned()), &y.with_leaves(ins[nr..].iter().cloned()))
        })?;
        if bwd.out.paths() != x.paths() {
            return Err(Error::invalid(
                op,
                format!(
                    "bwd returns a tree with leaves [{}] but the inputs have [{}]",
                    bwd.out.paths().join(", "),
                    x.paths().join(", ")
                ),
            ));
        }
        check_leaf_types(op, "the input", &in_avals, "bwd's cotangent", &avals(&bwd.out), &x.paths())?;
        let jvp = self.jvp.stage(x, &fun.out)?;
        let jvp_consts = jvp.as_ref().map_or(0, |j| j.1.len());
        let mut operands = fun.consts.clone();
        operands.extend(fwd.consts.iter().cloned());
        operands.extend(bwd.consts.iter().cloned());
        if let Some(j) = &jvp {
            operands.extend(j.1.iter().cloned());
        }
        operands.extend(x.leaves().iter().cloned());
        let prim = Prim::Control(ControlOp::CustomVjp {
            fun: Body::new(fun.program),
            fwd: Body::new(fwd.program),
            bwd: Body::new(bwd.program),
            jvp: jvp.map(|j| Body::new(j.0)),
            consts: [fun.consts.len(), fwd.consts.len(), bwd.consts.len(), jvp_consts],
        });
        let y = bind(&prim, &operands)?;
        write_back_finals(op, finals, &fun.consts, x, &written)?;
        Ok(fun.out.with_leaves(y))
    }
}

/// A staged function whose program returns its results and then the final
/// values of the arguments it wrote: the program of its results alone (the
/// custom primitive's body) and, if it wrote any, the program of the final
/// values alone.
fn split_finals<Y: Tree>(mut s: super::Staged<Y>) -> (super::Staged<Y>, Option<Program>) {
    let n_out = s.out.leaves().len();
    if s.program.outputs.len() == n_out {
        return (s, None);
    }
    let mut finals = s.program.clone();
    finals.outputs.drain(..n_out);
    let n_finals = finals.outputs.len();
    finals.keep_outputs(n_finals);
    s.program.keep_outputs(n_out);
    (s, Some(finals))
}

/// Computes the final values of the arguments a custom function wrote
/// (its program `finals` on its captured values `consts` and the
/// arguments, as ordinary code that every transform sees) and writes them
/// back to the caller's arguments.
fn write_back_finals<X: Tree>(
    op: &str,
    finals: Option<Program>,
    consts: &[Tensor],
    x: &X,
    written: &[bool],
) -> Result<()> {
    let Some(p) = finals else {
        return Ok(());
    };
    let leaves = x.leaves();
    let operands: Vec<Tensor> = consts.iter().chain(leaves.iter()).cloned().collect();
    let values = p.eval(&operands)?;
    write_back_written(op, &leaves, written, values)
}

/// `f` checkpointed (JAX's `jax.checkpoint` / `remat`, PyTorch's
/// `torch.utils.checkpoint`): reverse mode keeps only its inputs and
/// recomputes the rest of its forward pass in the backward pass, trading
/// compute for memory. See [`checkpoint_with`] for other policies.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{checkpoint, grad};
/// let block = checkpoint(|x: &Tensor| x.sin().exp());
/// let g = grad(|x: &Tensor| block(x).sum())(&Tensor::from_vec(vec![0.5f64], [1]));
/// let want = 0.5f64.cos() * 0.5f64.sin().exp();
/// assert!((g.to_vec::<f64>()[0] - want).abs() < 1e-14);
/// ```
pub fn checkpoint<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y {
    checkpoint_with(f, RematPolicy::Nothing)
}

/// [`checkpoint`] with a policy: [`RematPolicy::Nothing`] saves only the
/// inputs; [`RematPolicy::Products`] also the results of matrix products
/// and convolutions (JAX's `dots_saveable`), which cost most to recompute.
pub fn checkpoint_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, policy: RematPolicy) -> impl Fn(&X) -> Y {
    move |x: &X| {
        let run = || -> Result<Y> {
            let (s, written) = stage_writing("checkpoint", &avals(x), |ins| f(&x.with_leaves(ins.iter().cloned())))?;
            let leaves = x.leaves();
            let mut operands = s.consts.clone();
            operands.extend(leaves.iter().cloned());
            let n_out = s.out.leaves().len();
            let prim = Prim::Control(ControlOp::Checkpoint { body: Body::new(s.program), policy });
            // the body returns the final values of the arguments it wrote
            // after its results
            let mut outs = bind(&prim, &operands)?.into_vec();
            let finals = outs.split_off(n_out);
            write_back_written("checkpoint", &leaves, &written, finals)?;
            Ok(s.out.with_leaves(outs))
        };
        run().or_raise()
    }
}
