//! `stack` and `unstack`: `n` trees of one structure to one tree whose
//! leaves have a leading axis of `n` (an ensemble for `vmap`), and back.

use super::check_structure;
use crate::{Error, Leaves, Tensor, Tree};

/// Stacks trees of one structure into one tree whose leaves gain a leading
/// axis of size `trees.len()`: `n` models become one model "of `n`", ready
/// for `vmap` (each leaf `i` of the result is `Tensor::stack` of the leaves
/// `i`). [`unstack`] is the inverse.
///
/// ```
/// use xform::prelude::*;
/// use xform::{nn::Linear, tree};
///
/// let models: Vec<Linear> = Key::new(0).split(5).iter().map(|k| Linear::init(k, 3, 2, DType::F32)).collect();
/// let ensemble = tree::stack(&models);
/// assert_eq!(ensemble.w.shape().dims(), &[5, 3, 2]);
/// // All five models on one input, in one call:
/// let x = Tensor::ones([3], DType::F32);
/// let ys = vmap(|m: &Linear| m.forward(&x))(&ensemble);
/// assert_eq!(ys.shape().dims(), &[5, 2]);
/// let back = tree::unstack(&ensemble);
/// assert_eq!(back[4].w.to_vec::<f32>(), models[4].w.to_vec::<f32>());
/// ```
///
/// # Panics
/// If `trees` is empty, or the trees differ in structure, in a leaf's shape
/// or in a leaf's dtype.
#[track_caller]
pub fn stack<T: Tree>(trees: &[T]) -> T {
    let Some(first) = trees.first() else {
        Error::invalid("tree::stack", "needs at least one tree").raise();
    };
    let l0 = first.leaves();
    let all: Vec<Leaves> = trees
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let l = t.leaves();
            if k > 0 {
                check_structure("tree::stack", &format!("tree {k}"), first, t, l0.len(), l.len());
                for (i, (a, b)) in l0.iter().zip(&l).enumerate() {
                    let (sa, sb) = (a.shape(), b.shape());
                    if sa != sb {
                        let path = &first.paths()[i];
                        Error::shape(
                            "tree::stack",
                            format!("leaf {path} of tree {k} has another shape than in tree 0"),
                            &[&sa, &sb],
                        )
                        .raise();
                    }
                    if a.dtype() != b.dtype() {
                        let path = &first.paths()[i];
                        Error::dtype(
                            "tree::stack",
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
        Error::invalid("tree::unstack", "the tree has no leaves, so the number of trees is unknown").raise();
    }
    let mut n = None;
    for (l, p) in leaves.iter().zip(&paths) {
        let s = l.shape();
        if s.rank() == 0 {
            Error::shape("tree::unstack", format!("leaf {p} is a scalar and has no leading axis to split"), &[&s])
                .raise();
        }
        match n {
            None => n = Some((s[0], p)),
            Some((m, q)) if m != s[0] => Error::shape(
                "tree::unstack",
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
