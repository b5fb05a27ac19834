//! `trace(f, &x)`: stages a whole function into a [`Program`] with the
//! staging interpreter (`xform_ops::staging`, which `linearize` also uses
//! to record tangent work, and the control-flow primitives to stage their
//! bodies).

use crate::tree::Tree;
use xform_ops::interp::with_interpreter;
use xform_ops::staging::Staging;
use xform_ops::{OrRaise, Program, Tensor};

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
    let interp = Staging::new("trace", true);
    with_interpreter(&interp, || {
        let inputs: Vec<Tensor> = example.leaves().iter().map(|l| interp.new_input(l.aval())).collect();
        let y = f(&example.with_leaves(inputs));
        interp.finish(&y.leaves()).or_raise()
    })
}
