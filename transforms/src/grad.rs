//! Gradients: `grad`, `value_and_grad` and their `_with_aux` forms, all
//! vjp with a ones cotangent.

use crate::linearize::{linearize_flat, Ct};
use crate::tree::Tree;
use smallvec::SmallVec;
use xform_ops::{Error, OrRaise, Result, Tensor};

fn check_scalar(op: &str, y: &Tensor) -> Result<()> {
    if y.rank() != 0 {
        return Err(Error::transform(
            op,
            format!(
                "the function must return a scalar, but it returned shape {}; use vjp or jacrev for other outputs",
                y.shape()
            ),
        ));
    }
    if !y.dtype().is_float() {
        return Err(Error::transform(op, format!("the function must return a float, but it returned {}", y.dtype())));
    }
    Ok(())
}

/// Refuses an argument that has leaves but no floating-point one: there
/// is nothing to differentiate (JAX and PyTorch raise too; integer and
/// bool leaves beside float ones get zero gradients, JAX's `allow_int`).
/// An argument without leaves has an empty gradient, as in JAX.
pub(crate) fn check_differentiable<X: Tree>(op: &str, x: &X) -> Result<()> {
    let leaves = x.leaves();
    if leaves.is_empty() || leaves.iter().any(|l| l.dtype().is_float()) {
        return Ok(());
    }
    let paths = x.paths();
    let shown: Vec<String> =
        paths.iter().zip(leaves.iter()).take(4).map(|(p, l)| format!("{p}: {}", l.aval())).collect();
    let more = if leaves.len() > 4 { format!(", and {} more", leaves.len() - 4) } else { String::new() };
    Err(Error::transform(
        op,
        format!(
            "the argument has no floating-point leaf to differentiate ({}{more}); integer and bool leaves get zero \
             derivatives only beside float ones. Pass the values to differentiate as floats (`x.cast(DType::F32)`), \
             or select the arguments to differentiate with `{op}_argnums`",
            shown.join(", ")
        ),
    ))
}

/// Value, aux and gradient, all at once.
fn value_grad_aux<X: Tree, A: Tree>(
    op: &'static str,
    f: impl FnOnce(&X) -> (Tensor, A),
    x: &X,
) -> Result<((Tensor, A), X)> {
    check_differentiable(op, x)?;
    let lin = linearize_flat(op, f, x);
    let y = lin.out_leaves[0].clone();
    check_scalar(op, &y)?;
    // Only the scalar output is differentiated: the aux outputs get no
    // cotangent, so their part of the linear program is skipped.
    let mut cts: SmallVec<[Option<Ct>; 4]> = SmallVec::new();
    cts.push(Some(Ct::Ones));
    cts.resize(lin.out_leaves.len(), None);
    let g = lin.pull_some(op, &cts)?;
    Ok((lin.out, x.with_leaves(g)))
}

/// The gradient of a scalar function, as a tree like its argument.
///
/// ```
/// use xform_ops::Tensor;
/// let f = |x: &Tensor| (x.sin() * x).sum();
/// let x = Tensor::from_vec(vec![0.5f64, 1.0], [2]);
/// let g = xform_transforms::grad(f)(&x);
/// let want = 0.5f64.cos() * 0.5 + 0.5f64.sin();
/// assert!((g.to_vec::<f64>()[0] - want).abs() < 1e-12);
/// ```
///
/// Integer and bool leaves of the argument are not differentiated (JAX's
/// `allow_int` with float0, Equinox's `filter_grad`): their gradient is
/// zeros in the leaf's own dtype, so `(params, labels)` can be one argument.
/// An argument with leaves but no float leaf is an error (nothing to
/// differentiate), as in JAX and PyTorch.
/// Gradients with respect to some arguments only: [`grad_argnums`](crate::grad_argnums).
///
/// # Panics
/// If `f` returns a non-scalar or non-float value (see [`try_grad`](crate::try_grad)).
pub fn grad<X: Tree>(f: impl Fn(&X) -> Tensor) -> impl Fn(&X) -> X {
    move |x: &X| value_grad_aux("grad", |x: &X| (f(x), ()), x).or_raise().1
}

/// The value and gradient of a scalar function.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![3.0f32], [1]);
/// let (v, g) = xform_transforms::value_and_grad(|x: &Tensor| (x * x).sum())(&x);
/// assert_eq!((v.item::<f32>(), g.to_vec::<f32>()), (9.0, vec![6.0]));
/// ```
pub fn value_and_grad<X: Tree>(f: impl Fn(&X) -> Tensor) -> impl Fn(&X) -> (Tensor, X) {
    move |x: &X| {
        let ((v, ()), g) = value_grad_aux("value_and_grad", |x: &X| (f(x), ()), x).or_raise();
        (v, g)
    }
}

/// The gradient of the first output of `f`, and its second output (the
/// "aux" data, not differentiated), like JAX's `has_aux=True`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![2.0f64], [1]);
/// let (g, aux) = xform_transforms::grad_with_aux(|x: &Tensor| ((x * x).sum(), x * 10.0))(&x);
/// assert_eq!(g.to_vec::<f64>(), vec![4.0]);
/// assert_eq!(aux.to_vec::<f64>(), vec![20.0]);
/// ```
pub fn grad_with_aux<X: Tree, A: Tree>(f: impl Fn(&X) -> (Tensor, A)) -> impl Fn(&X) -> (X, A) {
    move |x: &X| {
        let ((_, aux), g) = value_grad_aux("grad", &f, x).or_raise();
        (g, aux)
    }
}

/// Value, aux and gradient of the first output of `f`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![2.0f64], [1]);
/// let ((v, aux), g) = xform_transforms::value_and_grad_with_aux(|x: &Tensor| ((x * x).sum(), x.exp()))(&x);
/// assert_eq!((v.item::<f64>(), g.to_vec::<f64>()), (4.0, vec![4.0]));
/// # let _ = aux;
/// ```
pub fn value_and_grad_with_aux<X: Tree, A: Tree>(f: impl Fn(&X) -> (Tensor, A)) -> impl Fn(&X) -> ((Tensor, A), X) {
    move |x: &X| value_grad_aux("value_and_grad", &f, x).or_raise()
}
