//! Factored cotangents of a linear operand, for per-example gradient norms
//! without per-example gradients (ghost clipping).
//!
//! NOTE: [factored cotangents] The cotangent a product gives its weight operand is a sum
//! of outer products: for `y = x W` with `x [m, k]` and the output
//! cotangent `g [m, n]`, `W`'s cotangent is `x^T g`, `m` outer products of
//! a row of `x` with a row of `g`. A family whose transpose has that form
//! for an operand says so in `Family::factor`, returning the two sides
//! instead of their product. Reverse mode with per-example norms (run under
//! `vmap`, so `m` counts one example's rows) then computes
//! `|x^T g|^2 = sum((x x^T) * (g g^T))` from the two `[m, m]` Gram matrices
//! when that is cheaper than forming `x^T g`, and a clipped sum over
//! examples contracts the examples' sides in one product, never forming a
//! gradient per example. Where an operand's cotangent has no such form the
//! rule returns `None` and the transpose rule runs.

use crate::error::Result;
use crate::lax;
use crate::prim::{Axes, DotDims};
use crate::tensor::Aval;
use crate::tensor::Tensor;
use smallvec::smallvec;
use xform_kernels::Shape;

/// The row side `A` of a factored cotangent `A^T G`.
#[derive(Clone, Debug)]
pub enum FactorRows {
    /// Rows `[groups, m, k]`.
    Dense(Tensor),
    /// One-hot rows given by integer `indices [groups, m]`, each in
    /// `0..k` (an embedding lookup: row `i` of `A` is `e_{indices[i]}`).
    OneHot {
        /// The index of each row's one.
        indices: Tensor,
        /// The row length.
        k: usize,
    },
}

/// An operand's cotangent as `A^T G` per group: with `A` `[groups, m, k]`
/// and `G` `[groups, m, n]`, the product `[groups, k, n]` reshaped to
/// `shape` holds, at position `i`, the operand's axis `axes[i]`.
#[derive(Clone, Debug)]
pub struct Factor {
    /// `A`, the rows paired with the operand's contracted axes.
    pub rows: FactorRows,
    /// `G`, `[groups, m, n]`: the output cotangent's rows.
    pub ct: Tensor,
    /// The product's axes: the operand's `axes[i]` has length `shape[i]`.
    pub shape: Shape,
    /// The operand axis at each position of `shape` (a permutation).
    pub axes: Axes,
}

impl Factor {
    /// `(groups, m, k, n)`.
    pub fn dims(&self) -> (usize, usize, usize, usize) {
        let c = self.ct.shape();
        let k = match &self.rows {
            FactorRows::Dense(a) => a.shape()[2],
            FactorRows::OneHot { k, .. } => *k,
        };
        (c[0], c[1], k, c[2])
    }
}

impl Factor {
    /// The product `A^T G`, `[groups, k, n]`.
    pub fn product(&self) -> Result<Tensor> {
        let (groups, _, k, n) = self.dims();
        match &self.rows {
            FactorRows::Dense(a) => lax::dot_general(
                a,
                &self.ct,
                DotDims {
                    lhs_contract: smallvec![1],
                    rhs_contract: smallvec![1],
                    lhs_batch: smallvec![0],
                    rhs_batch: smallvec![0],
                },
            ),
            FactorRows::OneHot { indices, .. } => {
                let zeros = lax::zeros_aval(&Aval {
                    shape: Shape::from(&[groups, k, n][..]),
                    dtype: self.ct.dtype(),
                    device: self.ct.device(),
                })?;
                lax::scatter_add(&zeros, indices, &self.ct, 1, 1)
            }
        }
    }

    /// The product in the operand's own layout: what the transpose rule
    /// gives.
    pub fn materialize(&self) -> Result<Tensor> {
        in_layout(&self.product()?, &self.shape, &self.axes)
    }
}

/// A `[groups, k, n]` product reshaped to `shape` and permuted so that the
/// operand's axis `axes[i]` (at position `i` of `shape`) is axis `axes[i]`
/// of the result.
pub fn in_layout(p: &Tensor, shape: &Shape, axes: &[usize]) -> Result<Tensor> {
    let p = lax::reshape(p, shape)?;
    let mut perm: Axes = smallvec![0; axes.len()];
    for (pos, &ax) in axes.iter().enumerate() {
        perm[ax] = pos;
    }
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        Ok(p)
    } else {
        lax::transpose(&p, &perm)
    }
}
