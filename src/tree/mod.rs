//! Pytree utilities, in the style of JAX's `jax.tree` / `jax.tree_util`
//! and `optax.tree_utils`: flatten and rebuild, maps, reductions,
//! arithmetic for optimizers, and [`stack`] / [`unstack`] for ensembles.
//!
//! A pytree is any [`Tree`]: a [`Tensor`], a tuple, a `Vec`, an array, an
//! `Option`, a `BTreeMap<String, _>`, or a struct with `#[derive(Tree)]`
//! (or [`impl_tree!`](crate::impl_tree)). Every function here is generic
//! over [`Tree`], and all of them except [`all_close`] are built from tensor
//! operations, so they work under every transform:
//! `vmap(|g: &Mlp| tree::norm(g))(&per_example_grads)` gives one norm per
//! example.
//!
//! | JAX / optax | xform |
//! |---|---|
//! | `jax.tree.map(f, t)`, `jax.tree.map(f, a, b)` | [`map`], [`map2`], [`map3`] |
//! | `jax.tree_util.tree_map_with_path` | [`map_with_path`] |
//! | `jax.tree.leaves`, `tree_leaves_with_path` | [`leaves`], [`leaves_with_path`], [`paths`] |
//! | `jax.tree.flatten`, `jax.tree.unflatten` | [`flatten`], [`unflatten`] ([`TreeDef`]) |
//! | `jax.tree.structure` | [`structure`] ([`Skeleton`]) |
//! | `jax.tree.reduce` | [`reduce`] |
//! | `optax.tree_utils.tree_add`, `tree_sub`, `tree_mul`, `tree_div` | [`add`], [`sub`], [`mul`], [`div`] |
//! | `tree_scale`, `tree_add_scalar_mul`, `tree_vdot`, `tree_l2_norm` | [`scale`], [`axpy`], [`dot`], [`norm`] |
//! | `tree_sum`, `tree_max`, `tree_min`, `tree_size` | [`sum`], [`max`], [`min`], [`numel`] |
//! | `tree_zeros_like`, `tree_ones_like`, `tree_full_like`, `tree_cast` | [`zeros_like`], [`ones_like`], [`full_like`], [`cast`] |
//! | `optax.clip_by_global_norm`, `optax.incremental_update` | [`clip_by_global_norm`], [`lerp`] |
//!
//! Trees combined by the functions of two or three trees must have the same
//! structure (the same leaf paths); the arithmetic ones also require each
//! pair of leaves to have the same shape, so that a `[3]` leaf never
//! silently broadcasts against a `[1]` one. A mismatch raises an
//! [`Error`] that names the leaf.
//!
//! `#[derive(Tree)]` (the same name as the trait, like serde's `Serialize`)
//! makes a struct a pytree; fields marked `#[tree(static)]` are not leaves:
//! they are cloned unchanged through every transform (an activation choice,
//! layer sizes).
//!
//! ```
//! use xform::prelude::*;
//! use xform::{nn::Activation, tree};
//!
//! #[derive(Clone, Tree)]
//! struct Layer {
//!     w: Tensor,
//!     b: Tensor,
//!     #[tree(static)]
//!     act: Activation,
//! }
//!
//! let l = Layer { w: Tensor::ones([2, 2], DType::F64), b: Tensor::zeros([2], DType::F64), act: Activation::Relu };
//! assert_eq!(tree::paths(&l), vec![".w", ".b"]);
//! let g = grad(|l: &Layer| l.act.apply(&(l.w.sum() + l.b.sum())))(&l);
//! assert_eq!(g.w.to_vec::<f64>(), vec![1.0; 4]);
//! assert_eq!(g.act, Activation::Relu); // carried through unchanged
//! ```

mod arith;
mod stack;

pub use arith::{
    add, all_close, average, axpy, cast, clip_by_global_norm, div, dot, full_like, lerp, max, min, mul, norm,
    normal_like, numel, ones_like, scale, sub, sum, zeros_like,
};
pub use stack::{stack, unstack};
pub use xform_transforms::tree::{DynStatic, Leaves, Prefix, Skeleton, StaticValue, Tree};

#[doc(hidden)]
pub use xform_transforms::tree::__Tensor;
#[doc(hidden)]
pub use xform_transforms::tree::{StaticByEq, StaticOpaque, StaticProbe};

use crate::{Error, Tensor};

/// The leaves of a tree, in flattening order (JAX's `jax.tree.leaves`).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::scalar(1.0f32), vec![Tensor::scalar(2.0f32), Tensor::scalar(3.0f32)]);
/// let v: Vec<f32> = tree::leaves(&t).iter().map(|l| l.item::<f32>()).collect();
/// assert_eq!(v, vec![1.0, 2.0, 3.0]);
/// ```
pub fn leaves<T: Tree>(tree: &T) -> Leaves {
    tree.leaves()
}

/// The path of every leaf, in flattening order: `.field`, `.0` (tuple
/// element), `[2]` (vector or array index), `["key"]` (map key), joined
/// (`.layers[0].w`); a lone tensor's path is `<root>`.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::scalar(1.0f32), vec![Tensor::scalar(2.0f32)]);
/// assert_eq!(tree::paths(&t), vec![".0", ".1[0]"]);
/// ```
pub fn paths<T: Tree>(tree: &T) -> Vec<String> {
    tree.paths()
}

/// Each leaf with its path (JAX's `tree_leaves_with_path`).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::scalar(1.0f32), Tensor::scalar(2.0f32));
/// let named = tree::leaves_with_path(&t);
/// assert_eq!(named[1].0, ".1");
/// assert_eq!(named[1].1.item::<f32>(), 2.0);
/// ```
pub fn leaves_with_path<T: Tree>(tree: &T) -> Vec<(String, Tensor)> {
    tree.paths().into_iter().zip(tree.leaves()).collect()
}

/// The number of leaves.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// assert_eq!(tree::num_leaves(&(Tensor::scalar(1.0f32), None::<Tensor>, vec![Tensor::scalar(2.0f32)])), 2);
/// ```
pub fn num_leaves<T: Tree>(tree: &T) -> usize {
    tree.leaves().len()
}

/// The tree's exact structure (JAX's `jax.tree.structure`): what a prefix
/// such as `vmap`'s `in_axes` is matched against.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree::{self, Skeleton};
///
/// let t = (Tensor::scalar(1.0f32), Vec::<Tensor>::new());
/// let expected = Skeleton::Node(vec![(".0".into(), Skeleton::Leaf), (".1".into(), Skeleton::Node(vec![]))]);
/// assert_eq!(tree::structure(&t), expected);
/// ```
pub fn structure<T: Tree>(tree: &T) -> Skeleton {
    tree.skeleton()
}

/// A tree's structure without its values (JAX's `PyTreeDef`), from
/// [`flatten`]: [`TreeDef::unflatten`] builds a tree of that structure over
/// new leaves. It holds a copy of the tree whose leaves all share one
/// scalar placeholder, so it does not keep the original tensors alive;
/// the tree's non-leaf contents (static fields) are kept.
#[derive(Clone)]
pub struct TreeDef<T: Tree> {
    template: T,
    num_leaves: usize,
}

impl<T: Tree> TreeDef<T> {
    /// The number of leaves a tree of this structure has.
    pub fn num_leaves(&self) -> usize {
        self.num_leaves
    }

    /// The leaf paths of the structure.
    pub fn paths(&self) -> Vec<String> {
        self.template.paths()
    }

    /// The exact structure.
    pub fn skeleton(&self) -> Skeleton {
        self.template.skeleton()
    }

    /// A tree of this structure over `leaves` (JAX's `jax.tree.unflatten`).
    ///
    /// # Panics
    /// If the number of leaves differs from [`num_leaves`](Self::num_leaves).
    #[track_caller]
    pub fn unflatten(&self, leaves: impl IntoIterator<Item = Tensor>) -> T {
        let leaves: Leaves = leaves.into_iter().collect();
        if leaves.len() != self.num_leaves {
            Error::invalid(
                "tree::unflatten",
                format!("the structure has {} leaves, {} were given", self.num_leaves, leaves.len()),
            )
            .raise();
        }
        self.template.with_leaves(leaves)
    }
}

impl<T: Tree> std::fmt::Debug for TreeDef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeDef").field("paths", &self.paths()).finish()
    }
}

/// The leaves and the structure of a tree (JAX's `jax.tree.flatten`);
/// [`unflatten`] is the inverse.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::scalar(1.0f64), vec![Tensor::scalar(2.0f64)]);
/// let (leaves, def) = tree::flatten(&t);
/// let doubled = tree::unflatten(&def, leaves.iter().map(|l| l * 2.0));
/// assert_eq!(doubled.1[0].item::<f64>(), 4.0);
/// assert_eq!(def.num_leaves(), 2);
/// ```
pub fn flatten<T: Tree>(tree: &T) -> (Leaves, TreeDef<T>) {
    let leaves = tree.leaves();
    let n = leaves.len();
    let placeholder = Tensor::scalar(0.0f32);
    let template = tree.with_leaves(std::iter::repeat_n(placeholder, n));
    (leaves, TreeDef { template, num_leaves: n })
}

/// A tree of `def`'s structure over `leaves` (JAX's `jax.tree.unflatten`).
///
/// # Panics
/// If the number of leaves differs from the structure's.
#[track_caller]
pub fn unflatten<T: Tree>(def: &TreeDef<T>, leaves: impl IntoIterator<Item = Tensor>) -> T {
    def.unflatten(leaves)
}

/// Raises unless `a` and `b` have the same leaf paths.
#[track_caller]
pub(crate) fn check_structure<T: Tree>(op: &str, which: &str, a: &T, b: &T, na: usize, nb: usize) {
    let (pa, pb) = (a.paths(), b.paths());
    if na != nb || pa != pb {
        Error::invalid(
            op,
            format!("{which} has a different structure: leaves [{}] against [{}]", pb.join(", "), pa.join(", ")),
        )
        .raise();
    }
}

/// The leaves of `a` and `b`, after checking that the trees have the same
/// structure.
#[track_caller]
pub(crate) fn zip_leaves<T: Tree>(op: &str, a: &T, b: &T) -> (Leaves, Leaves) {
    let (la, lb) = (a.leaves(), b.leaves());
    check_structure(op, "the second tree", a, b, la.len(), lb.len());
    (la, lb)
}

/// Raises unless each pair of leaves has the same shape.
#[track_caller]
pub(crate) fn check_shapes<T: Tree>(op: &str, tree: &T, la: &[Tensor], lb: &[Tensor]) {
    for (i, (x, y)) in la.iter().zip(lb).enumerate() {
        let (sx, sy) = (x.shape(), y.shape());
        if sx != sy {
            let path = &tree.paths()[i];
            Error::shape(op, format!("leaf {path} has different shapes in the two trees"), &[&sx, &sy]).raise();
        }
    }
}

/// Applies `f` to every leaf (JAX's `jax.tree.map(f, tree)`).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::from_vec(vec![1.0f32, 2.0], [2]), vec![Tensor::scalar(3.0f32)]);
/// let doubled = tree::map(&t, |x| x * 2.0);
/// assert_eq!(doubled.0.to_vec::<f32>(), vec![2.0, 4.0]);
/// assert_eq!(doubled.1[0].item::<f32>(), 6.0);
/// ```
pub fn map<T: Tree>(tree: &T, mut f: impl FnMut(&Tensor) -> Tensor) -> T {
    let out: Leaves = tree.leaves().iter().map(&mut f).collect();
    tree.with_leaves(out)
}

/// Applies `f` to every leaf and its path (JAX's `tree_map_with_path`):
/// for example weight decay on weights only.
///
/// ```
/// use xform::prelude::*;
/// use xform::{nn::Linear, tree};
///
/// let l = Linear { w: Tensor::ones([2, 2], DType::F32), b: Tensor::ones([2], DType::F32) };
/// let decayed = tree::map_with_path(&l, |path, x| if path.ends_with(".w") { x * 0.5 } else { x.clone() });
/// assert_eq!(decayed.w.to_vec::<f32>(), vec![0.5; 4]);
/// assert_eq!(decayed.b.to_vec::<f32>(), vec![1.0; 2]);
/// ```
pub fn map_with_path<T: Tree>(tree: &T, mut f: impl FnMut(&str, &Tensor) -> Tensor) -> T {
    let out: Leaves = tree.paths().iter().zip(tree.leaves().iter()).map(|(p, x)| f(p, x)).collect();
    tree.with_leaves(out)
}

/// Applies `f` to each pair of corresponding leaves of two trees of the
/// same structure (JAX's `jax.tree.map(f, a, b)`; shapes are not checked:
/// `f` may broadcast).
///
/// # Panics
/// If the trees differ in structure.
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let a = vec![Tensor::from_vec(vec![1.0f64, 2.0], [2])];
/// let b = vec![Tensor::from_vec(vec![3.0f64, 5.0], [2])];
/// let m = tree::map2(&a, &b, |x, y| x.maximum(y) - x);
/// assert_eq!(m[0].to_vec::<f64>(), vec![2.0, 3.0]);
/// ```
#[track_caller]
pub fn map2<T: Tree>(a: &T, b: &T, mut f: impl FnMut(&Tensor, &Tensor) -> Tensor) -> T {
    let (la, lb) = zip_leaves("tree::map2", a, b);
    let out: Leaves = la.iter().zip(&lb).map(|(x, y)| f(x, y)).collect();
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
/// use xform::tree;
///
/// let (p, g, m) = (Tensor::scalar(1.0f64), Tensor::scalar(2.0f64), Tensor::scalar(4.0f64));
/// let r = tree::map3(&p, &g, &m, |p, g, m| p - &(g * m));
/// assert_eq!(r.item::<f64>(), -7.0);
/// ```
#[track_caller]
pub fn map3<T: Tree>(a: &T, b: &T, c: &T, mut f: impl FnMut(&Tensor, &Tensor, &Tensor) -> Tensor) -> T {
    let (la, lb) = zip_leaves("tree::map3", a, b);
    let lc = c.leaves();
    check_structure("tree::map3", "the third tree", a, c, la.len(), lc.len());
    let out: Leaves = la.iter().zip(&lb).zip(&lc).map(|((x, y), z)| f(x, y, z)).collect();
    a.with_leaves(out)
}

/// Folds `f` over the leaves in order, from `init` (JAX's
/// `jax.tree.reduce(f, tree, init)`).
///
/// ```
/// use xform::prelude::*;
/// use xform::tree;
///
/// let t = (Tensor::from_vec(vec![1i32, 2, 3], [3]), Tensor::zeros([4, 5], DType::F32));
/// let largest_rank = tree::reduce(&t, 0, |r, leaf| r.max(leaf.rank()));
/// assert_eq!(largest_rank, 2);
/// ```
pub fn reduce<T: Tree, A>(tree: &T, init: A, f: impl FnMut(A, &Tensor) -> A) -> A {
    tree.leaves().iter().fold(init, f)
}
