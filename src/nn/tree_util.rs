//! Functions over whole pytrees of parameters: maps, arithmetic, norms,
//! random trees, and `stack` / `unstack` for ensembles.
//!
//! Every function here is generic over [`Tree`], so it works the same on a
//! [`Tensor`], a tuple, a `Vec`, an [`Mlp`](super::Mlp) or a user struct made
//! a tree with [`impl_tree!`](crate::impl_tree). Trees combined by the
//! two- and three-argument functions must have the same structure (the same
//! leaf paths); the arithmetic ones also require each pair of leaves to have
//! the same shape, so that a `[3]` leaf never silently broadcasts against a
//! `[1]` one. A mismatch raises an [`Error`](crate::Error) that names the
//! leaf.
//!
//! All of them are built from tensor operations, so they work under every
//! transform: `vmap(|g: &Mlp| tree_norm(g))(&per_example_grads)` gives one
//! norm per example.

use crate::{DType, Error, Key, Leaves, Tensor, Tree};

/// The leaves of `a` and `b`, after checking that the trees have the same
/// structure.
#[track_caller]
fn zip_leaves<T: Tree>(op: &str, a: &T, b: &T) -> (Leaves, Leaves) {
    let (la, lb) = (a.leaves(), b.leaves());
    check_structure(op, "the second tree", a, b, la.len(), lb.len());
    (la, lb)
}

/// Raises unless `a` and `b` have the same leaf paths.
#[track_caller]
fn check_structure<T: Tree>(op: &str, which: &str, a: &T, b: &T, na: usize, nb: usize) {
    let (pa, pb) = (a.paths(), b.paths());
    if na != nb || pa != pb {
        Error::invalid(
            op,
            format!("{which} has a different structure: leaves [{}] against [{}]", pb.join(", "), pa.join(", ")),
        )
        .raise();
    }
}

/// Raises unless each pair of leaves has the same shape.
#[track_caller]
fn check_shapes<T: Tree>(op: &str, tree: &T, la: &[Tensor], lb: &[Tensor]) {
    for (i, (x, y)) in la.iter().zip(lb).enumerate() {
        let (sx, sy) = (x.shape(), y.shape());
        if sx != sy {
            let path = &tree.paths()[i];
            Error::shape(op, format!("leaf {path} has different shapes in the two trees"), &[&sx, &sy]).raise();
        }
    }
}

/// Applies `f` to every leaf.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::tree_map;
///
/// let t = (Tensor::from_vec(vec![1.0f32, 2.0], [2]), vec![Tensor::scalar(3.0f32)]);
/// let doubled = tree_map(&t, |x| x * 2.0);
/// assert_eq!(doubled.0.to_vec::<f32>(), vec![2.0, 4.0]);
/// assert_eq!(doubled.1[0].item::<f32>(), 6.0);
/// ```
pub fn tree_map<T: Tree>(tree: &T, mut f: impl FnMut(&Tensor) -> Tensor) -> T {
    let out: Vec<Tensor> = tree.leaves().iter().map(&mut f).collect();
    tree.with_leaves(out)
}

/// Applies `f` to each pair of corresponding leaves of two trees of the
/// same structure (shapes are not checked: `f` may broadcast).
///
/// # Panics
/// If the trees differ in structure.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::tree_zip_map;
///
/// let a = vec![Tensor::from_vec(vec![1.0f64, 2.0], [2])];
/// let b = vec![Tensor::from_vec(vec![3.0f64, 5.0], [2])];
/// let m = tree_zip_map(&a, &b, |x, y| x.maximum(y) - x);
/// assert_eq!(m[0].to_vec::<f64>(), vec![2.0, 3.0]);
/// ```
#[track_caller]
pub fn tree_zip_map<T: Tree>(a: &T, b: &T, mut f: impl FnMut(&Tensor, &Tensor) -> Tensor) -> T {
    let (la, lb) = zip_leaves("tree_zip_map", a, b);
    let out: Vec<Tensor> = la.iter().zip(&lb).map(|(x, y)| f(x, y)).collect();
    a.with_leaves(out)
}

/// Applies `f` to each triple of corresponding leaves of three trees of
/// the same structure (for example parameters, gradients and an optimizer
/// moment).
///
/// # Panics
/// If the trees differ in structure.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::tree_map3;
///
/// let (p, g, m) = (Tensor::scalar(1.0f64), Tensor::scalar(2.0f64), Tensor::scalar(4.0f64));
/// let r = tree_map3(&p, &g, &m, |p, g, m| p - &(g * m));
/// assert_eq!(r.item::<f64>(), -7.0);
/// ```
#[track_caller]
pub fn tree_map3<T: Tree>(a: &T, b: &T, c: &T, mut f: impl FnMut(&Tensor, &Tensor, &Tensor) -> Tensor) -> T {
    let (la, lb) = zip_leaves("tree_map3", a, b);
    let lc = c.leaves();
    check_structure("tree_map3", "the third tree", a, c, la.len(), lc.len());
    let out: Vec<Tensor> = la.iter().zip(&lb).zip(&lc).map(|((x, y), z)| f(x, y, z)).collect();
    a.with_leaves(out)
}

/// `a + b`, leaf by leaf.
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
#[track_caller]
pub fn tree_add<T: Tree>(a: &T, b: &T) -> T {
    let (la, lb) = zip_leaves("tree_add", a, b);
    check_shapes("tree_add", a, &la, &lb);
    a.with_leaves(la.iter().zip(&lb).map(|(x, y)| x + y))
}

/// `a - b`, leaf by leaf.
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
#[track_caller]
pub fn tree_sub<T: Tree>(a: &T, b: &T) -> T {
    let (la, lb) = zip_leaves("tree_sub", a, b);
    check_shapes("tree_sub", a, &la, &lb);
    a.with_leaves(la.iter().zip(&lb).map(|(x, y)| x - y))
}

/// `s * a`, leaf by leaf (each leaf keeps its dtype).
pub fn tree_scale<T: Tree>(a: &T, s: f64) -> T {
    tree_map(a, |x| x * s)
}

/// `alpha * x + y`, leaf by leaf: a gradient step is
/// `tree_axpy(-lr, &grads, &params)`.
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
#[track_caller]
pub fn tree_axpy<T: Tree>(alpha: f64, x: &T, y: &T) -> T {
    let (lx, ly) = zip_leaves("tree_axpy", x, y);
    check_shapes("tree_axpy", x, &lx, &ly);
    x.with_leaves(lx.iter().zip(&ly).map(|(a, b)| a * alpha + b))
}

/// The inner product of two trees: the sum over all leaves of the sum of
/// their elementwise products, as a scalar tensor (f32 zero for a tree
/// without leaves).
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::tree_dot;
///
/// let a = (Tensor::from_vec(vec![1.0f64, 2.0], [2]), Tensor::scalar(3.0f64));
/// let b = (Tensor::from_vec(vec![4.0f64, 5.0], [2]), Tensor::scalar(6.0f64));
/// assert_eq!(tree_dot(&a, &b).item::<f64>(), 4.0 + 10.0 + 18.0);
/// ```
#[track_caller]
pub fn tree_dot<T: Tree>(a: &T, b: &T) -> Tensor {
    let (la, lb) = zip_leaves("tree_dot", a, b);
    check_shapes("tree_dot", a, &la, &lb);
    la.iter().zip(&lb).map(|(x, y)| (x * y).sum()).reduce(|s, t| s + t).unwrap_or_else(|| Tensor::scalar(0.0f32))
}

/// The global L2 norm of a tree: the square root of the sum of squares of
/// all its elements, as a scalar tensor.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::tree_norm;
///
/// let t = vec![Tensor::from_vec(vec![3.0f32], [1]), Tensor::from_vec(vec![4.0f32], [1])];
/// assert_eq!(tree_norm(&t).item::<f32>(), 5.0);
/// ```
pub fn tree_norm<T: Tree>(a: &T) -> Tensor {
    let sq = a.leaves().iter().map(|x| (x * x).sum()).reduce(|s, t| s + t).unwrap_or_else(|| Tensor::scalar(0.0f32));
    sq.sqrt()
}

/// A tree like `a` with every leaf zero (same shapes and dtypes).
pub fn tree_zeros_like<T: Tree>(a: &T) -> T {
    tree_map(a, |x| x.zeros_like())
}

/// A tree like `a` with every leaf one (same shapes and dtypes).
pub fn tree_ones_like<T: Tree>(a: &T) -> T {
    tree_map(a, |x| x.ones_like())
}

/// Linear interpolation `a + t * (b - a)`, leaf by leaf: `t = 0` gives
/// `a`, `t = 1` gives `b`. An exponential moving average of parameters is
/// `tree_lerp(&ema, &params, 1.0 - decay)`, and stochastic weight
/// averaging (SWA), after `n` models have been averaged, is one line:
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::{tree_lerp, Linear};
///
/// let k = Key::new(0).split(3);
/// let snapshots: Vec<Linear> = k.iter().map(|k| Linear::init(k, 4, 2, DType::F64)).collect();
/// let mut swa = snapshots[0].clone();
/// for (n, p) in snapshots.iter().enumerate().skip(1) {
///     swa = tree_lerp(&swa, p, 1.0 / (n + 1) as f64); // running mean of the snapshots
/// }
/// let mean_w = (&snapshots[0].w + &snapshots[1].w + &snapshots[2].w) / 3.0;
/// assert!((&swa.w - &mean_w).abs().max().item::<f64>() < 1e-12);
/// ```
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
#[track_caller]
pub fn tree_lerp<T: Tree>(a: &T, b: &T, t: f64) -> T {
    let (la, lb) = zip_leaves("tree_lerp", a, b);
    check_shapes("tree_lerp", a, &la, &lb);
    a.with_leaves(la.iter().zip(&lb).map(|(x, y)| x + &((y - x) * t)))
}

/// The elementwise mean of several trees of one structure (weight
/// averaging, model soups).
///
/// # Panics
/// If `trees` is empty, or the trees differ in structure or leaf shapes.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::tree_average;
///
/// let ts = vec![Tensor::from_vec(vec![1.0f32, 2.0], [2]), Tensor::from_vec(vec![3.0f32, 6.0], [2])];
/// assert_eq!(tree_average(&ts).to_vec::<f32>(), vec![2.0, 4.0]);
/// ```
#[track_caller]
pub fn tree_average<T: Tree>(trees: &[T]) -> T {
    let Some(first) = trees.first() else {
        Error::invalid("tree_average", "needs at least one tree").raise();
    };
    let mut acc = first.leaves();
    for t in &trees[1..] {
        let (_, l) = zip_leaves("tree_average", first, t);
        check_shapes("tree_average", first, &acc, &l);
        acc = acc.iter().zip(&l).map(|(a, b)| a + b).collect();
    }
    let n = trees.len() as f64;
    first.with_leaves(acc.iter().map(|a| a / n))
}

/// The number of elements over all leaves (a model's parameter count).
pub fn tree_numel<T: Tree>(a: &T) -> usize {
    a.leaves().iter().map(|l| l.numel()).sum()
}

/// A tree like `a` whose float leaves are independent standard normal
/// draws (leaf `i` from `key.fold_in(i)`); other leaves become zeros. This
/// is the Gaussian noise of DP-SGD or of perturbation methods.
pub fn tree_normal_like<T: Tree>(key: &Key, a: &T) -> T {
    let leaves = a.leaves();
    let out: Leaves = leaves
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if l.dtype().is_float() {
                key.fold_in(i as u32).normal(l.shape(), l.dtype()).to_device(l.device())
            } else {
                l.zeros_like()
            }
        })
        .collect();
    a.with_leaves(out)
}

/// `a` scaled so that its global norm ([`tree_norm`]) is at most
/// `max_norm`: unchanged if it already is, otherwise multiplied by
/// `max_norm / norm`. Under `vmap` over per-example gradients this is the
/// per-example clipping of DP-SGD.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::clip_by_global_norm;
///
/// let g = (Tensor::from_vec(vec![3.0f64], [1]), Tensor::from_vec(vec![4.0f64], [1])); // norm 5
/// let c = clip_by_global_norm(&g, 1.0);
/// assert!((c.0.item::<f64>() - 0.6).abs() < 1e-15 && (c.1.item::<f64>() - 0.8).abs() < 1e-15);
/// let same = clip_by_global_norm(&g, 10.0);
/// assert_eq!(same.0.item::<f64>(), 3.0);
/// ```
///
/// # Panics
/// If `max_norm` is not positive.
#[track_caller]
pub fn clip_by_global_norm<T: Tree>(a: &T, max_norm: f64) -> T {
    if max_norm.is_nan() || max_norm <= 0.0 {
        Error::invalid("clip_by_global_norm", format!("max_norm must be positive, got {max_norm}")).raise();
    }
    // max_norm / max(norm, max_norm): 1 when the norm is small enough.
    let factor = max_norm / tree_norm(a).clamp(max_norm, f64::INFINITY);
    tree_map(a, |x| x * &factor.cast(x.dtype()))
}

/// Stacks trees of one structure into one tree whose leaves gain a leading
/// axis of size `trees.len()`: `n` models become one model "of `n`", ready
/// for `vmap` (each leaf `i` of the result is `Tensor::stack` of the leaves
/// `i`). [`unstack`] is the inverse.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::{stack, unstack, Linear};
///
/// let models: Vec<Linear> = Key::new(0).split(5).iter().map(|k| Linear::init(k, 3, 2, DType::F32)).collect();
/// let ensemble = stack(&models);
/// assert_eq!(ensemble.w.shape().dims(), &[5, 3, 2]);
/// // All five models on one input, in one call:
/// let x = Tensor::ones([3], DType::F32);
/// let ys = vmap(|m: &Linear| m.forward(&x))(&ensemble);
/// assert_eq!(ys.shape().dims(), &[5, 2]);
/// let back = unstack(&ensemble);
/// assert_eq!(back[4].w.to_vec::<f32>(), models[4].w.to_vec::<f32>());
/// ```
///
/// # Panics
/// If `trees` is empty, or the trees differ in structure, in a leaf's shape
/// or in a leaf's dtype.
#[track_caller]
pub fn stack<T: Tree>(trees: &[T]) -> T {
    let Some(first) = trees.first() else {
        Error::invalid("stack", "needs at least one tree").raise();
    };
    let l0 = first.leaves();
    let all: Vec<Leaves> = trees
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let l = t.leaves();
            if k > 0 {
                check_structure("stack", &format!("tree {k}"), first, t, l0.len(), l.len());
                for (i, (a, b)) in l0.iter().zip(&l).enumerate() {
                    let (sa, sb) = (a.shape(), b.shape());
                    if sa != sb {
                        let path = &first.paths()[i];
                        Error::shape(
                            "stack",
                            format!("leaf {path} of tree {k} has another shape than in tree 0"),
                            &[&sa, &sb],
                        )
                        .raise();
                    }
                    if a.dtype() != b.dtype() {
                        let path = &first.paths()[i];
                        Error::dtype(
                            "stack",
                            format!("leaf {path} of tree {k} has another dtype than in tree 0"),
                            &[a.dtype(), b.dtype()],
                        )
                        .raise();
                    }
                }
            }
            l
        })
        .collect();
    let stacked: Vec<Tensor> = (0..l0.len())
        .map(|i| {
            let column: Vec<Tensor> = all.iter().map(|l| l[i].clone()).collect();
            Tensor::stack(&column, 0)
        })
        .collect();
    first.with_leaves(stacked)
}

/// Splits a stacked tree (see [`stack`]) along the leading axis of its
/// leaves: `n` trees, where `n` is the common leading size. The leaves of
/// the results are views of the stacked leaves.
///
/// # Panics
/// If the tree has no leaves, a leaf is a scalar, or the leaves' leading
/// sizes differ.
#[track_caller]
pub fn unstack<T: Tree>(tree: &T) -> Vec<T> {
    let leaves = tree.leaves();
    let paths = tree.paths();
    if leaves.is_empty() {
        Error::invalid("unstack", "the tree has no leaves, so the number of trees is unknown").raise();
    }
    let mut n = None;
    for (l, p) in leaves.iter().zip(&paths) {
        let s = l.shape();
        if s.rank() == 0 {
            Error::shape("unstack", format!("leaf {p} is a scalar and has no leading axis to split"), &[&s]).raise();
        }
        match n {
            None => n = Some((s[0], p)),
            Some((m, q)) if m != s[0] => Error::shape(
                "unstack",
                format!("leaves have different leading sizes: {q} has {m}, {p} has {}", s[0]),
                &[&leaves[0].shape(), &s],
            )
            .raise(),
            _ => {}
        }
    }
    let n = n.map_or(0, |(m, _)| m);
    (0..n).map(|i| tree.with_leaves(leaves.iter().map(|l| l.index(i as isize)))).collect()
}

/// Casts every float leaf to `dtype` (integer and bool leaves are kept).
pub fn tree_cast<T: Tree>(a: &T, dtype: DType) -> T {
    tree_map(a, |x| if x.dtype().is_float() { x.cast(dtype) } else { x.clone() })
}
