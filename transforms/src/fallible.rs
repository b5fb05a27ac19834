//! The `try_` forms: every transform with its errors as values.
//!
//! NOTE: [errors] xform reports bad input as an [`Error`](xform_ops::Error)
//! naming the op, the shapes and the transforms in force. The plain forms
//! (`grad(f)(&x)`) *raise* it: it unwinds like a panic, the interpreter
//! stack is popped on the way, and [`catch`](xform_ops::catch) (or the
//! default panic hook, printing the message) receives it. The `try_` forms
//! here return it as `Err`: errors found before `f` runs (in_axes that do
//! not fit, tangents of the wrong shape), errors raised by ops inside `f`
//! (shape and dtype errors, a tracer read under vmap), and errors found
//! after (a non-scalar output for grad). Other panics (a bug in the user's
//! closure, `unwrap` on `None`) are not xform errors and still unwind
//! through a `try_` form. After an `Err` the interpreter stack is as before
//! the call (each `try_` test checks it).

use crate::tree::Tree;
use crate::vmap::{try_vmap_call, VmapOptions};
use crate::{
    functionalize, grad, grad_with_aux, hessian, jacfwd, jacrev, linearize, trace, value_and_grad,
    value_and_grad_with_aux, vjp,
};
use xform_ops::{catch, Program, Result, Tensor};

/// [`vmap`](crate::vmap) returning errors as values.
///
/// ```
/// use xform_ops::{DType, Tensor};
/// let xs = Tensor::zeros([3, 2], DType::F32);
/// let err = xform_transforms::try_vmap(|x: &Tensor| x.matmul(&Tensor::ones([5], DType::F32)))(&xs).unwrap_err();
/// assert!(err.to_string().contains("matmul"), "{err}");
/// ```
pub fn try_vmap<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Result<Y> {
    try_vmap_with(f, VmapOptions::default())
}

/// [`vmap_with`](crate::vmap_with) returning errors as values.
pub fn try_vmap_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: VmapOptions) -> impl Fn(&X) -> Result<Y> {
    move |x: &X| catch(|| try_vmap_call(&f, &opts, x))?
}

/// [`grad`] returning errors as values.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let err = xform_transforms::try_grad(|x: &Tensor| x * 2.0)(&x).unwrap_err();
/// assert!(err.to_string().contains("must return a scalar"), "{err}");
/// ```
pub fn try_grad<X: Tree>(f: impl Fn(&X) -> Tensor) -> impl Fn(&X) -> Result<X> {
    let g = grad(f);
    move |x: &X| catch(|| g(x))
}

/// [`value_and_grad`] returning errors as values.
pub fn try_value_and_grad<X: Tree>(f: impl Fn(&X) -> Tensor) -> impl Fn(&X) -> Result<(Tensor, X)> {
    let g = value_and_grad(f);
    move |x: &X| catch(|| g(x))
}

/// [`grad_with_aux`] returning errors as values.
pub fn try_grad_with_aux<X: Tree, A: Tree>(f: impl Fn(&X) -> (Tensor, A)) -> impl Fn(&X) -> Result<(X, A)> {
    let g = grad_with_aux(f);
    move |x: &X| catch(|| g(x))
}

/// [`value_and_grad_with_aux`] returning errors as values.
pub fn try_value_and_grad_with_aux<X: Tree, A: Tree>(
    f: impl Fn(&X) -> (Tensor, A),
) -> impl Fn(&X) -> Result<((Tensor, A), X)> {
    let g = value_and_grad_with_aux(f);
    move |x: &X| catch(|| g(x))
}

/// [`jacfwd`] returning errors as values.
pub fn try_jacfwd<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Result<Y::Map<X>> {
    let j = jacfwd(f);
    move |x: &X| catch(|| j(x))
}

/// [`jacrev`] returning errors as values.
pub fn try_jacrev<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Result<Y::Map<X>> {
    let j = jacrev(f);
    move |x: &X| catch(|| j(x))
}

/// [`hessian`] returning errors as values.
pub fn try_hessian<X: Tree>(f: impl Fn(&X) -> Tensor) -> impl Fn(&X) -> Result<X::Map<X>> {
    let h = hessian(f);
    move |x: &X| catch(|| h(x))
}

/// [`vjp`] returning errors as values; the pullback does too (a cotangent
/// of the wrong shape is an `Err`).
///
/// ```
/// use xform_ops::{DType, Tensor};
/// let x = Tensor::ones([2], DType::F64);
/// let (_, pullback) = xform_transforms::try_vjp(|x: &Tensor| x * 3.0, &x).unwrap();
/// assert!(pullback(&Tensor::ones([3], DType::F64)).is_err());
/// assert_eq!(pullback(&Tensor::ones([2], DType::F64)).unwrap().to_vec::<f64>(), vec![3.0, 3.0]);
/// ```
pub fn try_vjp<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, x: &X) -> Result<(Y, impl Fn(&Y) -> Result<X>)> {
    let (y, pullback) = catch(|| vjp(f, x))?;
    Ok((y, move |ct: &Y| catch(|| pullback(ct))))
}

/// [`linearize`] returning errors as values; so does the linear function.
pub fn try_linearize<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, x: &X) -> Result<(Y, impl Fn(&X) -> Result<Y>)> {
    let (y, f_lin) = catch(|| linearize(f, x))?;
    Ok((y, move |t: &X| catch(|| f_lin(t))))
}

/// [`trace`] returning errors as values.
pub fn try_trace<X: Tree, Y: Tree>(f: impl FnOnce(&X) -> Y, example: &X) -> Result<Program> {
    catch(|| trace(f, example))
}

/// [`functionalize`] returning errors as values.
pub fn try_functionalize<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Result<Y> {
    let g = functionalize(f);
    move |x: &X| catch(|| g(x))
}
