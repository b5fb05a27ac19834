//! Differentiating with respect to some arguments: JAX's `argnums`.
//!
//! A function of several arguments takes them as one tuple,
//! `f(&(params, x, y))`. [`Arg::<I>`](Arg) selects element `I`, and a tuple
//! of them selects several: `grad_argnums(loss, Arg::<0>)` is JAX's
//! `grad(loss, argnums=0)` and returns the gradient for `params` alone;
//! `(Arg::<0>, Arg::<2>)` gives a pair. The other arguments are constants
//! of the differentiated function: nothing is computed for them (where
//! `grad(loss)` over the whole tuple would also compute the gradient for
//! the data).
//!
//! Every transform gets the selection through [`restrict`], which the
//! `_argnums` functions here use: `f` as a function of the selected
//! arguments alone, with the others fixed.

use crate::tree::{Leaves, Tree};
use crate::{grad, hessian, jacfwd, jacrev, jvp, value_and_grad};
use xform_ops::{Error, OrRaise, Result, Tensor};

/// Selects element `I` of a tuple argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arg<const I: usize>;

/// A selection of elements of a tuple argument `X`: [`Arg<I>`](Arg), or a
/// tuple of up to four of them (each element at most once).
pub trait Argnums<X: Tree> {
    /// The selected arguments (one, or a tuple).
    type Out: Tree;
    /// Appends the selected positions, in selection order.
    fn indices(&self, out: &mut Vec<usize>);
    /// The selected arguments of `x`.
    fn pick(&self, x: &X) -> Self::Out;
    /// `x` with the selected arguments replaced by `sel`.
    fn put(&self, x: &X, sel: &Self::Out) -> X;
}

/// A copy of a tree (its leaves are shared handles).
fn clone_tree<T: Tree>(t: &T) -> T {
    t.with_leaves(t.leaves())
}

/// `x` with the `len` leaves from `start` replaced by the leaves of `sel`.
fn splice<X: Tree, S: Tree>(x: &X, start: usize, len: usize, sel: &S) -> X {
    let leaves = x.leaves();
    let new = sel.leaves();
    assert_eq!(new.len(), len, "argnums: the replacement has {} leaves where the argument has {len}", new.len());
    let mut out = Leaves::new();
    out.extend(leaves[..start].iter().cloned());
    out.extend(new);
    out.extend(leaves[start + len..].iter().cloned());
    x.with_leaves(out)
}

macro_rules! arg_impl {
    (($($T:ident $t:tt),+); $I:tt => $O:ident) => {
        impl<$($T: Tree),+> Argnums<($($T,)+)> for Arg<$I> {
            type Out = $O;
            fn indices(&self, out: &mut Vec<usize>) {
                out.push($I);
            }
            fn pick(&self, x: &($($T,)+)) -> $O {
                clone_tree(&x.$I)
            }
            fn put(&self, x: &($($T,)+), sel: &$O) -> ($($T,)+) {
                let (mut start, mut len) = (0, 0);
                $(
                    #[allow(clippy::comparison_chain, unused_comparisons)]
                    if $t < $I {
                        start += x.$t.leaves().len();
                    } else if $t == $I {
                        len = x.$t.leaves().len();
                    }
                )+
                splice(x, start, len, sel)
            }
        }
    };
}

macro_rules! arg_impls {
    ($tuple:tt; $($I:tt => $O:ident),+) => {
        $(arg_impl!($tuple; $I => $O);)+
    };
}
arg_impls!((A 0); 0 => A);
arg_impls!((A 0, B 1); 0 => A, 1 => B);
arg_impls!((A 0, B 1, C 2); 0 => A, 1 => B, 2 => C);
arg_impls!((A 0, B 1, C 2, D 3); 0 => A, 1 => B, 2 => C, 3 => D);
arg_impls!((A 0, B 1, C 2, D 3, E 4); 0 => A, 1 => B, 2 => C, 3 => D, 4 => E);
arg_impls!((A 0, B 1, C 2, D 3, E 4, F 5); 0 => A, 1 => B, 2 => C, 3 => D, 4 => E, 5 => F);
arg_impls!((A 0, B 1, C 2, D 3, E 4, F 5, G 6); 0 => A, 1 => B, 2 => C, 3 => D, 4 => E, 5 => F, 6 => G);
arg_impls!((A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7); 0 => A, 1 => B, 2 => C, 3 => D, 4 => E, 5 => F, 6 => G, 7 => H);

macro_rules! selection_tuple {
    ($($S:ident $s:tt),+) => {
        impl<X: Tree, $($S: Argnums<X>),+> Argnums<X> for ($($S,)+) {
            type Out = ($($S::Out,)+);
            fn indices(&self, out: &mut Vec<usize>) {
                $(self.$s.indices(out);)+
            }
            fn pick(&self, x: &X) -> Self::Out {
                ($(self.$s.pick(x),)+)
            }
            fn put(&self, x: &X, sel: &Self::Out) -> X {
                let x = clone_tree(x);
                $(let x = self.$s.put(&x, &sel.$s);)+
                x
            }
        }
    };
}
selection_tuple!(S 0);
selection_tuple!(S 0, T 1);
selection_tuple!(S 0, T 1, U 2);
selection_tuple!(S 0, T 1, U 2, V 3);

/// Checks that no argument is selected twice (its gradient would go to
/// one of the copies only).
fn check_distinct<X: Tree, S: Argnums<X>>(op: &str, argnums: &S) -> Result<()> {
    let mut idx = Vec::new();
    argnums.indices(&mut idx);
    for (k, i) in idx.iter().enumerate() {
        if idx[..k].contains(i) {
            return Err(Error::invalid(op, format!("argnums selects argument {i} more than once ({idx:?})")));
        }
    }
    Ok(())
}

/// `f` as a function of the selected arguments alone, the others fixed at
/// their values in `x`, and the selected arguments: any transform applies
/// to the pair, so `argnums` composes with `has_aux`, `try_` forms and
/// options.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{restrict, value_and_grad_with_aux, Arg};
/// let loss = |(w, x): &(Tensor, Tensor)| {
///     let y = w * x;
///     (y.sum(), y)
/// };
/// let args = (Tensor::scalar(2.0f64), Tensor::from_vec(vec![1.0f64, 3.0], [2]));
/// let (g, w) = restrict(loss, &args, Arg::<0>);
/// let ((value, y), dw) = value_and_grad_with_aux(g)(&w);
/// assert_eq!((value.item::<f64>(), dw.item::<f64>()), (8.0, 4.0));
/// # let _ = y;
/// ```
///
/// # Panics
/// If `argnums` selects an argument twice.
pub fn restrict<'a, X: Tree, Y, S: Argnums<X> + 'a>(
    f: impl Fn(&X) -> Y + 'a,
    x: &'a X,
    argnums: S,
) -> (impl Fn(&S::Out) -> Y + 'a, S::Out) {
    check_distinct("argnums", &argnums).or_raise();
    let sel = argnums.pick(x);
    (move |s: &S::Out| f(&argnums.put(x, s)), sel)
}

/// The gradient with respect to the selected arguments: JAX's
/// `grad(f, argnums=...)`.
///
/// ```
/// use xform_ops::{DType, Tensor};
/// use xform_transforms::{grad_argnums, Arg};
/// // Labels are integers: they may sit in the argument, undifferentiated.
/// let loss = |(w, x, labels): &(Tensor, Tensor, Tensor)| {
///     (x.matmul(w) - labels.cast(DType::F64)).powf(2.0).sum()
/// };
/// let w = Tensor::from_vec(vec![1.0f64, 0.0], [2]);
/// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
/// let labels = Tensor::from_vec(vec![0i64, 1], [2]);
/// let dw = grad_argnums(loss, Arg::<0>)(&(w.clone(), x.clone(), labels.clone()));
/// assert_eq!(dw.to_vec::<f64>(), vec![14.0, 20.0]); // 2 x^T (x w - labels)
/// let (dw2, dx) = grad_argnums(loss, (Arg::<0>, Arg::<1>))(&(w, x, labels));
/// assert_eq!(dx.shape().dims(), &[2, 2]);
/// # let _ = dw2;
/// ```
pub fn grad_argnums<X: Tree, S: Argnums<X>>(f: impl Fn(&X) -> Tensor, argnums: S) -> impl Fn(&X) -> S::Out {
    move |x: &X| {
        let (g, sel) = restrict(&f, x, &argnums);
        grad(g)(&sel)
    }
}

/// The value and the gradient with respect to the selected arguments.
pub fn value_and_grad_argnums<X: Tree, S: Argnums<X>>(
    f: impl Fn(&X) -> Tensor,
    argnums: S,
) -> impl Fn(&X) -> (Tensor, S::Out) {
    move |x: &X| {
        let (g, sel) = restrict(&f, x, &argnums);
        value_and_grad(g)(&sel)
    }
}

/// The forward-mode Jacobian with respect to the selected arguments.
pub fn jacfwd_argnums<X: Tree, Y: Tree, S: Argnums<X>>(
    f: impl Fn(&X) -> Y,
    argnums: S,
) -> impl Fn(&X) -> Y::Map<S::Out> {
    move |x: &X| {
        let (g, sel) = restrict(&f, x, &argnums);
        jacfwd(g)(&sel)
    }
}

/// The reverse-mode Jacobian with respect to the selected arguments.
pub fn jacrev_argnums<X: Tree, Y: Tree, S: Argnums<X>>(
    f: impl Fn(&X) -> Y,
    argnums: S,
) -> impl Fn(&X) -> Y::Map<S::Out> {
    move |x: &X| {
        let (g, sel) = restrict(&f, x, &argnums);
        jacrev(g)(&sel)
    }
}

/// The Hessian with respect to the selected arguments.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{hessian_argnums, Arg};
/// let f = |(a, b): &(Tensor, Tensor)| (a * a * b).sum();
/// let (a, b) = (Tensor::from_vec(vec![1.0f64, 2.0], [2]), Tensor::from_vec(vec![3.0f64, 4.0], [2]));
/// let h = hessian_argnums(f, Arg::<0>)(&(a, b));
/// assert_eq!(h.to_vec::<f64>(), vec![6.0, 0.0, 0.0, 8.0]);
/// ```
pub fn hessian_argnums<X: Tree, S: Argnums<X>>(
    f: impl Fn(&X) -> Tensor,
    argnums: S,
) -> impl Fn(&X) -> <S::Out as Tree>::Map<S::Out> {
    move |x: &X| {
        let (g, sel) = restrict(&f, x, &argnums);
        hessian(g)(&sel)
    }
}

/// `f(x)` and the pullback to the selected arguments.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{vjp_argnums, Arg};
/// let f = |(a, b): &(Tensor, Tensor)| a * b;
/// let (a, b) = (Tensor::from_vec(vec![1.0f64, 2.0], [2]), Tensor::from_vec(vec![3.0f64, 4.0], [2]));
/// let (y, pullback) = vjp_argnums(f, &(a, b), Arg::<1>);
/// assert_eq!(pullback(&Tensor::from_vec(vec![1.0f64, 1.0], [2])).to_vec::<f64>(), vec![1.0, 2.0]);
/// # let _ = y;
/// ```
pub fn vjp_argnums<X: Tree, Y: Tree, S: Argnums<X>>(
    f: impl Fn(&X) -> Y,
    x: &X,
    argnums: S,
) -> (Y, impl Fn(&Y) -> S::Out) {
    check_distinct("vjp", &argnums).or_raise();
    let sel = argnums.pick(x);
    let lin = crate::linearize::linearize_flat("vjp", |s: &S::Out| f(&argnums.put(x, s)), &sel);
    let out = lin.out.with_leaves(lin.out_leaves.clone());
    let pullback = move |ct: &Y| {
        let leaves = lin.pull("vjp pullback", &ct.leaves()).or_raise();
        sel.with_leaves(leaves)
    };
    (out, pullback)
}

/// `f(primals)` and its derivative along `tangents`, a tangent for each
/// selected argument (the others are held fixed).
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{jvp_argnums, Arg};
/// let f = |(a, b): &(Tensor, Tensor)| a * b;
/// let (a, b) = (Tensor::from_vec(vec![1.0f64, 2.0], [2]), Tensor::from_vec(vec![3.0f64, 4.0], [2]));
/// let (y, dy) = jvp_argnums(f, &(a, b), Arg::<0>, &Tensor::from_vec(vec![1.0f64, 0.0], [2]));
/// assert_eq!(dy.to_vec::<f64>(), vec![3.0, 0.0]);
/// # let _ = y;
/// ```
pub fn jvp_argnums<X: Tree, Y: Tree, S: Argnums<X>>(
    f: impl Fn(&X) -> Y,
    primals: &X,
    argnums: S,
    tangents: &S::Out,
) -> (Y, Y) {
    let (g, sel) = restrict(&f, primals, &argnums);
    jvp(g, &sel, tangents)
}

impl<X: Tree, S: Argnums<X>> Argnums<X> for &S {
    type Out = S::Out;
    fn indices(&self, out: &mut Vec<usize>) {
        (**self).indices(out)
    }
    fn pick(&self, x: &X) -> S::Out {
        (**self).pick(x)
    }
    fn put(&self, x: &X, sel: &S::Out) -> X {
        (**self).put(x, sel)
    }
}
