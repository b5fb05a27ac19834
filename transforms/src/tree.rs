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

    /// The tree's structure without its leaves: what a prefix (vmap's
    /// `in_axes`) is matched against. The default rebuilds it from the leaf
    /// paths, which loses subtrees without leaves (an empty `Vec`, a `None`);
    /// every implementation in xform, [`impl_tree!`](crate::impl_tree) and
    /// `#[derive(Tree)]` give the exact one.
    fn skeleton(&self) -> Skeleton {
        Skeleton::from_paths(&self.paths())
    }

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

/// The structure of a tree: leaves and nodes, each node's children named by
/// the path segment that leads to them (`.0`, `.w`, `[2]`, `["k"]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skeleton {
    /// A leaf.
    Leaf,
    /// A node and its children, in flattening order.
    Node(Vec<(String, Skeleton)>),
}

impl Skeleton {
    /// The number of leaves.
    pub fn num_leaves(&self) -> usize {
        match self {
            Skeleton::Leaf => 1,
            Skeleton::Node(children) => children.iter().map(|(_, c)| c.num_leaves()).sum(),
        }
    }

    /// A node of `children`, each named by its segment.
    pub fn node(children: impl IntoIterator<Item = (String, Skeleton)>) -> Skeleton {
        Skeleton::Node(children.into_iter().collect())
    }

    /// The skeleton implied by leaf paths (a tree with a single leaf at
    /// the root has the path `<root>`).
    pub fn from_paths(paths: &[String]) -> Skeleton {
        fn build(paths: &[&str]) -> Skeleton {
            if paths.len() == 1 && paths[0].is_empty() {
                return Skeleton::Leaf;
            }
            let mut children: Vec<(String, Vec<&str>)> = Vec::new();
            for p in paths {
                let (head, rest) = split_segment(p);
                match children.last_mut() {
                    Some((h, v)) if h == head => v.push(rest),
                    _ => children.push((head.to_string(), vec![rest])),
                }
            }
            Skeleton::Node(children.into_iter().map(|(h, v)| (h, build(&v))).collect())
        }
        if paths.len() == 1 && paths[0] == "<root>" {
            return Skeleton::Leaf;
        }
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        build(&refs)
    }

    /// Expands a prefix of this tree to one value per leaf: a value at a
    /// subtree applies to every leaf under it (JAX's tree prefixes, as in
    /// `vmap`'s `in_axes`). The error names the path where the prefix does
    /// not fit.
    pub fn expand_prefix<T: Clone>(&self, prefix: &Prefix<T>) -> std::result::Result<Vec<T>, String> {
        let mut out = Vec::with_capacity(self.num_leaves());
        self.expand_into(prefix, "", &mut out)?;
        Ok(out)
    }

    fn expand_into<T: Clone>(
        &self,
        prefix: &Prefix<T>,
        path: &str,
        out: &mut Vec<T>,
    ) -> std::result::Result<(), String> {
        let here = || if path.is_empty() { "the root".to_string() } else { path.to_string() };
        match (prefix, self) {
            (Prefix::Leaf(v), s) => {
                out.extend(std::iter::repeat_n(v.clone(), s.num_leaves()));
                Ok(())
            }
            (_, Skeleton::Leaf) => Err(format!("the prefix has children at {}, where the tree has a leaf", here())),
            (Prefix::Node(ps), Skeleton::Node(children)) => {
                if ps.len() != children.len() {
                    let names: Vec<&str> = children.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(format!(
                        "the prefix has {} entries at {}, where the tree has {} children ({})",
                        ps.len(),
                        here(),
                        children.len(),
                        names.join(", ")
                    ));
                }
                for (p, (name, c)) in ps.iter().zip(children) {
                    c.expand_into(p, &format!("{path}{name}"), out)?;
                }
                Ok(())
            }
            (Prefix::Named(ps), Skeleton::Node(children)) => {
                for (key, _) in ps {
                    if !children.iter().any(|(n, _)| segment_matches(n, key)) {
                        let names: Vec<&str> = children.iter().map(|(n, _)| n.as_str()).collect();
                        return Err(format!(
                            "the prefix names {key:?} at {}, which has no such child (children: {})",
                            here(),
                            names.join(", ")
                        ));
                    }
                }
                for (name, c) in children {
                    match ps.iter().find(|(k, _)| segment_matches(name, k)) {
                        Some((_, p)) => c.expand_into(p, &format!("{path}{name}"), out)?,
                        None => {
                            return Err(format!(
                                "the prefix at {} names some children but not {name}; name every child",
                                here()
                            ))
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

/// True if the path segment `seg` (`.w`, `[2]`, `["k"]`) is the child a
/// prefix names `key` (`w` or `.w`, `2` or `[2]`, `k` or `["k"]`).
fn segment_matches(seg: &str, key: &str) -> bool {
    if seg == key {
        return true;
    }
    let bare = seg.trim_start_matches('.').trim_start_matches('[').trim_end_matches(']').trim_matches('"');
    bare == key
}

/// Splits the first segment off a path: `.0.w` -> (`.0`, `.w`).
fn split_segment(path: &str) -> (&str, &str) {
    let rest = &path[1.min(path.len())..];
    let end = if path.starts_with("[\"") {
        // A map key may contain '.' or '[': it ends at the closing `"]`.
        path.find("\"]").map_or(path.len(), |i| i + 2)
    } else {
        rest.find(['.', '[']).map_or(path.len(), |i| i + 1)
    };
    path.split_at(end)
}

/// A prefix of a tree (see [`Skeleton::expand_prefix`]): a value that
/// applies to a whole subtree, or one entry per child, by position or by
/// name.
#[derive(Clone, Debug, PartialEq)]
pub enum Prefix<T> {
    /// One value for every leaf of the subtree.
    Leaf(T),
    /// One entry per child, in order.
    Node(Vec<Prefix<T>>),
    /// Entries by child name (`w` or `.w` for a field, `0` for a tuple
    /// element or vector index, `k` for a map key); every child must be named.
    Named(Vec<(String, Prefix<T>)>),
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
    fn skeleton(&self) -> Skeleton {
        Skeleton::Leaf
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
    fn skeleton(&self) -> Skeleton {
        Skeleton::Leaf
    }
}

impl Tree for () {
    type Map<T> = ();
    fn flatten_into(&self, _: &mut Leaves) {}
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Self {}
    fn build_map<T>(&self, _: &mut dyn Iterator<Item = T>) {}
    fn leaf_paths(&self, _: &str, _: &mut Vec<String>) {}
    fn skeleton(&self) -> Skeleton {
        Skeleton::Node(Vec::new())
    }
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
            fn skeleton(&self) -> Skeleton {
                Skeleton::Node(vec![$((format!(".{}", $idx), self.$idx.skeleton()),)+])
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
    fn skeleton(&self) -> Skeleton {
        Skeleton::node(self.iter().enumerate().map(|(i, a)| (format!("[{i}]"), a.skeleton())))
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
    fn skeleton(&self) -> Skeleton {
        Skeleton::node(self.iter().enumerate().map(|(i, a)| (format!("[{i}]"), a.skeleton())))
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
    /// `Some(a)` is `a`'s structure; `None` is an empty node (JAX's `None`).
    fn skeleton(&self) -> Skeleton {
        self.as_ref().map_or(Skeleton::Node(Vec::new()), Tree::skeleton)
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
    fn skeleton(&self) -> Skeleton {
        (**self).skeleton()
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
    fn skeleton(&self) -> Skeleton {
        Skeleton::node(self.iter().map(|(k, a)| (format!("[{k:?}]"), a.skeleton())))
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
            fn skeleton(&self) -> $crate::tree::Skeleton {
                $crate::tree::Skeleton::Node(vec![
                    $((format!(".{}", stringify!($field)), $crate::Tree::skeleton(&self.$field)),)*
                ])
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

    #[test]
    fn skeletons_are_exact_and_match_the_paths_when_no_subtree_is_empty() {
        let t = |v: f32| Tensor::full([1], v as f64, DType::F32);
        let mut map = BTreeMap::new();
        map.insert("a.b".to_string(), t(0.0));
        let tree = (t(1.0), vec![t(2.0), t(3.0)], Mlp { w: t(5.0), b: vec![t(6.0)] }, map);
        let sk = tree.skeleton();
        assert_eq!(sk, Skeleton::from_paths(&tree.paths()));
        assert_eq!(sk.num_leaves(), 6);
        // Empty subtrees are kept by the exact skeleton.
        let with_none = (t(1.0), None::<Tensor>, Vec::<Tensor>::new(), t(2.0));
        let Skeleton::Node(children) = with_none.skeleton() else { panic!("a node") };
        assert_eq!(children.len(), 4);
    }

    #[test]
    fn prefixes_expand_to_their_subtrees_and_name_the_path_on_error() {
        let t = |v: f32| Tensor::full([1], v as f64, DType::F32);
        let tree = (t(1.0), None::<Tensor>, Mlp { w: t(5.0), b: vec![t(6.0), t(7.0)] });
        let sk = tree.skeleton();
        let p = Prefix::Node(vec![Prefix::Leaf(0), Prefix::Leaf(9), Prefix::Leaf(1)]);
        assert_eq!(sk.expand_prefix(&p).unwrap(), vec![0, 1, 1, 1]);
        let deep = Prefix::Node(vec![
            Prefix::Leaf(0),
            Prefix::Leaf(0),
            Prefix::Named(vec![
                ("b".into(), Prefix::Node(vec![Prefix::Leaf(3), Prefix::Leaf(4)])),
                (".w".into(), Prefix::Leaf(2)),
            ]),
        ]);
        assert_eq!(sk.expand_prefix(&deep).unwrap(), vec![0, 2, 3, 4]);
        let short = Prefix::Node(vec![Prefix::Leaf(0), Prefix::Leaf(1)]);
        let e = sk.expand_prefix(&short).unwrap_err();
        assert!(e.contains("2 entries at the root") && e.contains("3 children"), "{e}");
        let bad = Prefix::Node(vec![Prefix::Node(vec![Prefix::Leaf(0)]), Prefix::Leaf(0), Prefix::Leaf(0)]);
        let e = sk.expand_prefix(&bad).unwrap_err();
        assert!(e.contains("at .0, where the tree has a leaf"), "{e}");
        let wrong =
            Prefix::Node(vec![Prefix::Leaf(0), Prefix::Leaf(0), Prefix::Named(vec![("x".into(), Prefix::Leaf(0))])]);
        let e = sk.expand_prefix(&wrong).unwrap_err();
        assert!(e.contains("\"x\" at .2"), "{e}");
    }
}
