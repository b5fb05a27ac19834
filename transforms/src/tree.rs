//! Pytrees: nested containers of tensors that transforms flatten into a
//! list of leaves and rebuild.
//!
//! [`Tree`] is implemented for [`Tensor`], [`Key`], `()`, tuples up to 8,
//! `Vec`, arrays, `Option`, `Box` and `BTreeMap<String, _>`; user structs
//! get it from [`impl_tree!`](crate::impl_tree). `Tree::Map<T>` is the same
//! structure with every leaf replaced by a `T`: it is how Jacobians of
//! nested outputs are typed (`jacrev` of `Fn(&X) -> Y` gives `Y::Map<X>`).

use smallvec::SmallVec;
use std::collections::BTreeMap;
use xform_ops::{Key, Tensor};

/// A tree's leaves in flattening order, inline up to four: transformed
/// functions mostly take and return a few tensors, and flattening them on
/// every call should not allocate.
pub type Leaves = SmallVec<[Tensor; 4]>;

/// A nested container of tensors.
pub trait Tree: Sized {
    /// The same structure with each leaf replaced by a `T`.
    type Map<T>;

    /// Appends the leaves, in a fixed order.
    fn flatten_into(&self, out: &mut Leaves);

    /// A tree of the same structure with leaves taken in order from `leaves`.
    ///
    /// # Panics
    /// If `leaves` runs out.
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self;

    /// `Self::Map<T>` with leaves taken in order from `items`.
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T>;

    /// Appends each leaf's path (like `.0.w1[2]`), in leaf order.
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>);

    /// The leaves.
    fn leaves(&self) -> Leaves {
        let mut v = Leaves::new();
        self.flatten_into(&mut v);
        v
    }

    /// The leaf paths.
    fn paths(&self) -> Vec<String> {
        let mut v = Vec::new();
        self.leaf_paths("", &mut v);
        v
    }

    /// A tree shaped like `self` over `leaves`.
    ///
    /// # Panics
    /// If the number of leaves differs.
    fn with_leaves(&self, leaves: impl IntoIterator<Item = Tensor>) -> Self {
        let mut it = leaves.into_iter();
        let t = self.rebuild(&mut it);
        assert!(it.next().is_none(), "with_leaves: more leaves than the tree has");
        t
    }
}

fn take(leaves: &mut dyn Iterator<Item = Tensor>) -> Tensor {
    leaves.next().expect("pytree rebuilt from too few leaves")
}

impl Tree for Tensor {
    type Map<T> = T;
    fn flatten_into(&self, out: &mut Leaves) {
        out.push(self.clone());
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        take(leaves)
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> T {
        items.next().expect("too few items")
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        out.push(if prefix.is_empty() { "<root>".to_string() } else { prefix.to_string() });
    }
}

impl Tree for Key {
    type Map<T> = T;
    fn flatten_into(&self, out: &mut Leaves) {
        out.push(self.tensor().clone());
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        Key::from_tensor(take(leaves))
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> T {
        items.next().expect("too few items")
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        out.push(if prefix.is_empty() { "<root>".to_string() } else { prefix.to_string() });
    }
}

impl Tree for () {
    type Map<T> = ();
    fn flatten_into(&self, _: &mut Leaves) {}
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Self {}
    fn build_map<T>(&self, _: &mut dyn Iterator<Item = T>) {}
    fn leaf_paths(&self, _: &str, _: &mut Vec<String>) {}
}

macro_rules! tuple_tree {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Tree),+> Tree for ($($name,)+) {
            type Map<T> = ($($name::Map<T>,)+);
            fn flatten_into(&self, out: &mut Leaves) {
                $(self.$idx.flatten_into(out);)+
            }
            fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
                ($(self.$idx.rebuild(leaves),)+)
            }
            fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
                ($(self.$idx.build_map(items),)+)
            }
            fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
                $(self.$idx.leaf_paths(&format!("{prefix}.{}", $idx), out);)+
            }
        }
    };
}
tuple_tree!(A 0);
tuple_tree!(A 0, B 1);
tuple_tree!(A 0, B 1, C 2);
tuple_tree!(A 0, B 1, C 2, D 3);
tuple_tree!(A 0, B 1, C 2, D 3, E 4);
tuple_tree!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_tree!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_tree!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

impl<A: Tree> Tree for Vec<A> {
    type Map<T> = Vec<A::Map<T>>;
    fn flatten_into(&self, out: &mut Leaves) {
        for a in self {
            a.flatten_into(out);
        }
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        self.iter().map(|a| a.rebuild(leaves)).collect()
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
        self.iter().map(|a| a.build_map(items)).collect()
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        for (i, a) in self.iter().enumerate() {
            a.leaf_paths(&format!("{prefix}[{i}]"), out);
        }
    }
}

impl<A: Tree, const N: usize> Tree for [A; N] {
    type Map<T> = [A::Map<T>; N];
    fn flatten_into(&self, out: &mut Leaves) {
        for a in self {
            a.flatten_into(out);
        }
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        std::array::from_fn(|i| self[i].rebuild(leaves))
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
        std::array::from_fn(|i| self[i].build_map(items))
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        for (i, a) in self.iter().enumerate() {
            a.leaf_paths(&format!("{prefix}[{i}]"), out);
        }
    }
}

impl<A: Tree> Tree for Option<A> {
    type Map<T> = Option<A::Map<T>>;
    fn flatten_into(&self, out: &mut Leaves) {
        if let Some(a) = self {
            a.flatten_into(out);
        }
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        self.as_ref().map(|a| a.rebuild(leaves))
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
        self.as_ref().map(|a| a.build_map(items))
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        if let Some(a) = self {
            a.leaf_paths(prefix, out);
        }
    }
}

impl<A: Tree> Tree for Box<A> {
    type Map<T> = Box<A::Map<T>>;
    fn flatten_into(&self, out: &mut Leaves) {
        (**self).flatten_into(out)
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        Box::new((**self).rebuild(leaves))
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
        Box::new((**self).build_map(items))
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        (**self).leaf_paths(prefix, out)
    }
}

impl<A: Tree> Tree for BTreeMap<String, A> {
    type Map<T> = BTreeMap<String, A::Map<T>>;
    fn flatten_into(&self, out: &mut Leaves) {
        for a in self.values() {
            a.flatten_into(out);
        }
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        self.iter().map(|(k, a)| (k.clone(), a.rebuild(leaves))).collect()
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
        self.iter().map(|(k, a)| (k.clone(), a.build_map(items))).collect()
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        for (k, a) in self {
            a.leaf_paths(&format!("{prefix}[{k:?}]"), out);
        }
    }
}

/// Implements [`Tree`] for a struct whose fields are all trees, so that a
/// model's parameters are a plain struct:
///
/// ```
/// use xform_transforms::{impl_tree, Tree};
/// use xform_ops::{DType, Tensor};
///
/// #[derive(Clone)]
/// struct Linear { w: Tensor, b: Tensor }
/// impl_tree!(Linear { w, b });
///
/// let l = Linear { w: Tensor::zeros([2, 3], DType::F32), b: Tensor::zeros([3], DType::F32) };
/// assert_eq!(l.paths(), vec![".w", ".b"]);
/// ```
///
/// `Map<T>` of such a struct is a `BTreeMap` from the leaf path to `T`.
#[macro_export]
macro_rules! impl_tree {
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl $crate::Tree for $name {
            type Map<T> = ::std::collections::BTreeMap<String, T>;
            fn flatten_into(&self, out: &mut $crate::Leaves) {
                $($crate::Tree::flatten_into(&self.$field, out);)*
            }
            fn rebuild(&self, leaves: &mut dyn Iterator<Item = $crate::__Tensor>) -> Self {
                $name { $($field: $crate::Tree::rebuild(&self.$field, leaves),)* }
            }
            fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
                $crate::Tree::paths(self).into_iter().map(|p| (p, items.next().expect("too few items"))).collect()
            }
            fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
                $($crate::Tree::leaf_paths(&self.$field, &format!("{}.{}", prefix, stringify!($field)), out);)*
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use xform_ops::DType;

    #[derive(Clone)]
    struct Mlp {
        w: Tensor,
        b: Vec<Tensor>,
    }
    impl_tree!(Mlp { w, b });

    #[test]
    fn flatten_rebuild_roundtrip_and_paths() {
        let t = |v: f32| Tensor::full([1], v as f64, DType::F32);
        let tree = (t(1.0), vec![t(2.0), t(3.0)], Some(t(4.0)), None::<Tensor>, Mlp { w: t(5.0), b: vec![t(6.0)] });
        let leaves = tree.leaves();
        assert_eq!(leaves.len(), 6);
        assert_eq!(tree.paths(), vec![".0", ".1[0]", ".1[1]", ".2", ".4.w", ".4.b[0]"]);
        let doubled: Vec<Tensor> = leaves.iter().map(|l| l * 2.0).collect();
        let back = tree.with_leaves(doubled);
        assert_eq!(back.4.b[0].to_vec::<f32>(), vec![12.0]);
        let m = tree.build_map(&mut (0..6));
        assert_eq!(m.0, 0);
        assert_eq!(m.1, vec![1, 2]);
        assert_eq!(m.4[".b[0]"], 5);
    }
}
