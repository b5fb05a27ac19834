//! Tree arithmetic and reductions: what optimizers, weight averaging and
//! gradient clipping are made of (optax's `tree_utils`).

use super::{check_shapes, map, zip_leaves};
use crate::{DType, Error, Key, Leaves, Tensor, Tree};

/// `op(a, b)` leaf by leaf, after checking structure and shapes.
#[track_caller]
fn zip_same_shape<T: Tree>(op: &str, a: &T, b: &T, f: impl Fn(&Tensor, &Tensor) -> Tensor) -> T {
    let (la, lb) = zip_leaves(op, a, b);
    check_shapes(op, a, &la, &lb);
    a.with_leaves(la.iter().zip(&lb).map(|(x, y)| f(x, y)))
}

/// `a + b`, leaf by leaf.
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let a = (Tensor::scalar(1.0f64), Tensor::from_vec(vec![1.0f64, 2.0], [2]));
/// let s = tree::add(&a, &a);
/// assert_eq!((s.0.item::<f64>(), s.1.to_vec::<f64>()), (2.0, vec![2.0, 4.0]));
/// ```
#[track_caller]
pub fn add<T: Tree>(a: &T, b: &T) -> T {
    zip_same_shape("tree::add", a, b, |x, y| x + y)
}

/// `a - b`, leaf by leaf.
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let (a, b) = (vec![Tensor::scalar(5.0f32)], vec![Tensor::scalar(3.0f32)]);
/// assert_eq!(tree::sub(&a, &b)[0].item::<f32>(), 2.0);
/// ```
#[track_caller]
pub fn sub<T: Tree>(a: &T, b: &T) -> T {
    zip_same_shape("tree::sub", a, b, |x, y| x - y)
}

/// `a * b`, leaf by leaf (elementwise).
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let a = Tensor::from_vec(vec![2.0f64, 3.0], [2]);
/// assert_eq!(tree::mul(&a, &a).to_vec::<f64>(), vec![4.0, 9.0]);
/// ```
#[track_caller]
pub fn mul<T: Tree>(a: &T, b: &T) -> T {
    zip_same_shape("tree::mul", a, b, |x, y| x * y)
}

/// `a / b`, leaf by leaf (elementwise).
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let (a, b) = (Tensor::from_vec(vec![3.0f64, 1.0], [2]), Tensor::from_vec(vec![2.0f64, 4.0], [2]));
/// assert_eq!(tree::div(&a, &b).to_vec::<f64>(), vec![1.5, 0.25]);
/// ```
#[track_caller]
pub fn div<T: Tree>(a: &T, b: &T) -> T {
    zip_same_shape("tree::div", a, b, |x, y| x / y)
}

/// `s * a`, leaf by leaf (each leaf keeps its dtype).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let a = (Tensor::scalar(2.0f32), Tensor::scalar(3.0f64));
/// let s = tree::scale(&a, 0.5);
/// assert_eq!((s.0.item::<f32>(), s.1.item::<f64>()), (1.0, 1.5));
/// ```
pub fn scale<T: Tree>(a: &T, s: f64) -> T {
    map(a, |x| x * s)
}

/// `alpha * x + y`, leaf by leaf: a gradient step is
/// `tree::axpy(-lr, &grads, &params)`.
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let (params, grads) = (Tensor::from_vec(vec![1.0f64, 2.0], [2]), Tensor::from_vec(vec![10.0f64, -10.0], [2]));
/// assert_eq!(tree::axpy(-0.1, &grads, &params).to_vec::<f64>(), vec![0.0, 3.0]);
/// ```
#[track_caller]
pub fn axpy<T: Tree>(alpha: f64, x: &T, y: &T) -> T {
    zip_same_shape("tree::axpy", x, y, |a, b| a * alpha + b)
}

/// The sum of all elements of all leaves, as a scalar tensor (f32 zero
/// for a tree without leaves; leaves of different dtypes promote).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::from_vec(vec![1.0f64, 2.0], [2]), Tensor::scalar(4.0f64));
/// assert_eq!(tree::sum(&t).item::<f64>(), 7.0);
/// ```
pub fn sum<T: Tree>(a: &T) -> Tensor {
    a.leaves().iter().map(Tensor::sum).reduce(|s, t| s + t).unwrap_or_else(|| Tensor::scalar(0.0f32))
}

/// The largest element over all leaves, as a scalar tensor.
///
/// # Panics
/// If the tree has no leaves, or a leaf has no elements.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::from_vec(vec![1.0f32, 7.0], [2]), Tensor::scalar(-3.0f32));
/// assert_eq!(tree::max(&t).item::<f32>(), 7.0);
/// assert_eq!(tree::min(&t).item::<f32>(), -3.0);
/// ```
#[track_caller]
pub fn max<T: Tree>(a: &T) -> Tensor {
    let m = a.leaves().iter().map(Tensor::max).reduce(|s, t| s.maximum(&t));
    m.unwrap_or_else(|| Error::invalid("tree::max", "the tree has no leaves").raise())
}

/// The smallest element over all leaves, as a scalar tensor.
///
/// # Panics
/// If the tree has no leaves, or a leaf has no elements.
#[track_caller]
pub fn min<T: Tree>(a: &T) -> Tensor {
    let m = a.leaves().iter().map(Tensor::min).reduce(|s, t| s.minimum(&t));
    m.unwrap_or_else(|| Error::invalid("tree::min", "the tree has no leaves").raise())
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
/// use xform::tree;
///
/// let a = (Tensor::from_vec(vec![1.0f64, 2.0], [2]), Tensor::scalar(3.0f64));
/// let b = (Tensor::from_vec(vec![4.0f64, 5.0], [2]), Tensor::scalar(6.0f64));
/// assert_eq!(tree::dot(&a, &b).item::<f64>(), 4.0 + 10.0 + 18.0);
/// ```
#[track_caller]
pub fn dot<T: Tree>(a: &T, b: &T) -> Tensor {
    let (la, lb) = zip_leaves("tree::dot", a, b);
    check_shapes("tree::dot", a, &la, &lb);
    la.iter().zip(&lb).map(|(x, y)| (x * y).sum()).reduce(|s, t| s + t).unwrap_or_else(|| Tensor::scalar(0.0f32))
}

/// The global L2 norm of a tree: the square root of the sum of squares of
/// all its elements, as a scalar tensor.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = vec![Tensor::from_vec(vec![3.0f32], [1]), Tensor::from_vec(vec![4.0f32], [1])];
/// assert_eq!(tree::norm(&t).item::<f32>(), 5.0);
/// ```
pub fn norm<T: Tree>(a: &T) -> Tensor {
    let sq = a.leaves().iter().map(|x| (x * x).sum()).reduce(|s, t| s + t).unwrap_or_else(|| Tensor::scalar(0.0f32));
    sq.sqrt()
}

/// A tree like `a` with every leaf zero (same shapes and dtypes).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let z = tree::zeros_like(&(Tensor::ones([2], DType::F32), Tensor::ones([], DType::I32)));
/// assert_eq!((z.0.to_vec::<f32>(), z.1.item::<i32>()), (vec![0.0, 0.0], 0));
/// ```
pub fn zeros_like<T: Tree>(a: &T) -> T {
    map(a, |x| x.zeros_like())
}

/// A tree like `a` with every leaf one (same shapes and dtypes).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// assert_eq!(tree::ones_like(&vec![Tensor::zeros([2], DType::F64)])[0].to_vec::<f64>(), vec![1.0, 1.0]);
/// ```
pub fn ones_like<T: Tree>(a: &T) -> T {
    map(a, |x| x.ones_like())
}

/// A tree like `a` with every element `value` (same shapes and dtypes).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// assert_eq!(tree::full_like(&Tensor::zeros([2], DType::F32), 0.5).to_vec::<f32>(), vec![0.5, 0.5]);
/// ```
pub fn full_like<T: Tree>(a: &T, value: f64) -> T {
    map(a, |x| x.full_like(value))
}

/// Linear interpolation `a + t * (b - a)`, leaf by leaf: `t = 0` gives
/// `a`, `t = 1` gives `b`. An exponential moving average of parameters is
/// `tree::lerp(&ema, &params, 1.0 - decay)` (optax's `incremental_update`),
/// and stochastic weight averaging (SWA), after `n` models have been
/// averaged, is one line:
///
/// ```
/// use xform::prelude::*;
/// use xform::{nn::Linear, tree};
///
/// let k = Key::new(0).split(3);
/// let snapshots: Vec<Linear> = k.iter().map(|k| Linear::init(k, 4, 2, DType::F64)).collect();
/// let mut swa = snapshots[0].clone();
/// for (n, p) in snapshots.iter().enumerate().skip(1) {
///     swa = tree::lerp(&swa, p, 1.0 / (n + 1) as f64); // running mean of the snapshots
/// }
/// let mean_w = (&snapshots[0].w + &snapshots[1].w + &snapshots[2].w) / 3.0;
/// assert!((&swa.w - &mean_w).abs().max().item::<f64>() < 1e-12);
/// ```
///
/// # Panics
/// If the trees differ in structure or a pair of leaves in shape.
#[track_caller]
pub fn lerp<T: Tree>(a: &T, b: &T, t: f64) -> T {
    zip_same_shape("tree::lerp", a, b, |x, y| x + &((y - x) * t))
}

/// The elementwise mean of several trees of one structure (weight
/// averaging, model soups).
///
/// # Panics
/// If `trees` is empty, or the trees differ in structure or leaf shapes.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let ts = vec![Tensor::from_vec(vec![1.0f32, 2.0], [2]), Tensor::from_vec(vec![3.0f32, 6.0], [2])];
/// assert_eq!(tree::average(&ts).to_vec::<f32>(), vec![2.0, 4.0]);
/// ```
#[track_caller]
pub fn average<T: Tree>(trees: &[T]) -> T {
    let Some(first) = trees.first() else {
        Error::invalid("tree::average", "needs at least one tree").raise();
    };
    let mut acc = first.leaves();
    for t in &trees[1..] {
        let (_, l) = zip_leaves("tree::average", first, t);
        check_shapes("tree::average", first, &acc, &l);
        acc = acc.iter().zip(&l).map(|(a, b)| a + b).collect();
    }
    let n = trees.len() as f64;
    first.with_leaves(acc.iter().map(|a| a / n))
}

/// The number of elements over all leaves (a model's parameter count;
/// optax's `tree_size`).
///
/// ```
/// use xform::prelude::*;
/// use xform::{nn::Linear, tree};
///
/// assert_eq!(tree::numel(&Linear::init(&Key::new(0), 3, 2, DType::F32)), 3 * 2 + 2);
/// ```
pub fn numel<T: Tree>(a: &T) -> usize {
    a.leaves().iter().map(|l| l.numel()).sum()
}

/// A tree like `a` whose float leaves are independent standard normal
/// draws (leaf `i` from `key.fold_in(i)`); other leaves become zeros. This
/// is the Gaussian noise of DP-SGD or of perturbation methods.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let noise = tree::normal_like(&Key::new(0), &(Tensor::zeros([1000], DType::F64), Tensor::scalar(1i32)));
/// assert!(noise.0.mean().item::<f64>().abs() < 0.1);
/// assert_eq!(noise.1.item::<i32>(), 0);
/// ```
pub fn normal_like<T: Tree>(key: &Key, a: &T) -> T {
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

/// `a` scaled so that its global norm ([`norm`]) is at most `max_norm`:
/// unchanged if it already is, otherwise multiplied by `max_norm / norm`.
/// Under `vmap` over per-example gradients this is the per-example
/// clipping of DP-SGD.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let g = (Tensor::from_vec(vec![3.0f64], [1]), Tensor::from_vec(vec![4.0f64], [1])); // norm 5
/// let c = tree::clip_by_global_norm(&g, 1.0);
/// assert!((c.0.item::<f64>() - 0.6).abs() < 1e-15 && (c.1.item::<f64>() - 0.8).abs() < 1e-15);
/// let same = tree::clip_by_global_norm(&g, 10.0);
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
    let factor = max_norm / norm(a).clamp(max_norm, f64::INFINITY);
    map(a, |x| x * &factor.cast(x.dtype()))
}

/// Casts every float leaf to `dtype` (integer and bool leaves are kept).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = tree::cast(&(Tensor::scalar(1.5f64), Tensor::scalar(2i32)), DType::F32);
/// assert_eq!((t.0.dtype(), t.1.dtype()), (DType::F32, DType::I32));
/// ```
pub fn cast<T: Tree>(a: &T, dtype: DType) -> T {
    map(a, |x| if x.dtype().is_float() { x.cast(dtype) } else { x.clone() })
}

/// True if the trees have the same structure and leaf shapes and every
/// pair of elements satisfies numpy's `allclose`:
/// `|a - b| <= atol + rtol * |b|` (equal infinities are close, NaNs never). It reads the
/// values, so it is for tests and checks, not for use under `vmap`.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let a = (Tensor::scalar(1.0f64), Tensor::from_vec(vec![2.0f64, 3.0], [2]));
/// let b = tree::map(&a, |x| x + 1e-9);
/// assert!(tree::all_close(&a, &b, 1e-7, 0.0));
/// assert!(!tree::all_close(&a, &tree::scale(&a, 2.0), 1e-7, 0.0));
/// ```
pub fn all_close<T: Tree>(a: &T, b: &T, rtol: f64, atol: f64) -> bool {
    let (la, lb) = (a.leaves(), b.leaves());
    if la.len() != lb.len() || a.paths() != b.paths() {
        return false;
    }
    la.iter().zip(&lb).all(|(x, y)| {
        x.shape() == y.shape()
            && x.to_vec_f64().iter().zip(y.to_vec_f64()).all(|(u, v)| *u == v || (u - v).abs() <= atol + rtol * v.abs())
    })
}
