//! One example's pass: the loss linearized in the parameters, transposed
//! with the weights' cotangents kept factored, reduced to squared norms
//! per leaf (and, for a clipped sum, what the sum needs).
//!
//! NOTE: [ghost] Everything here runs inside `vmap` over the examples, so
//! it is written for one example and every op on an activation or a
//! cotangent is batched over the examples by the batch rules. A leaf's
//! cotangent arrives as a dense per-example tensor (from the ordinary
//! transpose rules: biases, scales, every use without a factored form) and
//! as factors `A^T G` (from `Family::factor`: products and embedding
//! lookups that read the leaf itself, see NOTE: [factor]). Factors with
//! the same layout are one factor (their rows concatenated: a weight used
//! twice). A leaf with one factor and nothing else gets its norm from the
//! factor, by Gram matrices or by forming `A^T G`, whichever costs fewer
//! multiply-adds (the choice of Bu et al.'s mixed ghost clipping); any
//! other leaf forms its per-example cotangent (its factors materialized
//! and added), which is what `vmap(grad)` would have formed for it.

use super::NormMethod;
use crate::linearize::InputHook;
use smallvec::{smallvec, SmallVec};
use xform_ops::prim::{factor_rule, Axes, LinearArg};
use xform_ops::prims::factor::{Factor, FactorRows};
use xform_ops::prims::linalg::DotDims;
use xform_ops::{lax, DType, Eqn, Result, Shape, Tensor};

/// Collects the factors of the cotangents of the program's inputs.
pub(crate) struct FactorHook {
    /// Per program input, its factors so far.
    pub(crate) factors: Vec<Vec<Factor>>,
}

impl InputHook for FactorHook {
    fn take(
        &mut self,
        eqn: &Eqn,
        cts: &[Option<Tensor>],
        args: &[LinearArg],
        inputs: &[Option<usize>],
    ) -> Result<bool> {
        // Only an equation linear in exactly one operand, that operand an
        // input: its whole cotangent is then that input's.
        let mut linear = args.iter().enumerate().filter(|(_, a)| a.is_linear());
        let (Some((i, _)), None) = (linear.next(), linear.next()) else {
            return Ok(false);
        };
        let Some(input) = inputs[i] else {
            return Ok(false);
        };
        match factor_rule(&eqn.prim, cts, args, i)? {
            Some(f) => {
                self.factors[input].push(f);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// What one leaf hands to the clipped sum, per example.
pub(crate) enum LeafPart {
    /// The per-example cotangent, leaf-shaped.
    Dense(Tensor),
    /// The factor whose product is the per-example cotangent.
    Factored(Factor),
}

/// The layout of a leaf's part, the same for every example (its tensors
/// travel through `vmap` as outputs; this travels beside them).
#[derive(Clone, Debug)]
pub(crate) enum PartLayout {
    /// One tensor: the dense cotangent.
    Dense,
    /// Two tensors, `A` and `G`, of a factor with this layout.
    Factored { one_hot_k: Option<usize>, shape: Shape, axes: Axes },
}

impl LeafPart {
    pub(crate) fn layout(&self) -> PartLayout {
        match self {
            LeafPart::Dense(_) => PartLayout::Dense,
            LeafPart::Factored(f) => PartLayout::Factored {
                one_hot_k: match f.rows {
                    FactorRows::Dense(_) => None,
                    FactorRows::OneHot { k, .. } => Some(k),
                },
                shape: f.shape.clone(),
                axes: f.axes.clone(),
            },
        }
    }

    /// The part's tensors, in the order [`PartLayout`] says.
    pub(crate) fn tensors(self) -> SmallVec<[Tensor; 2]> {
        match self {
            LeafPart::Dense(d) => smallvec![d],
            LeafPart::Factored(f) => match f.rows {
                FactorRows::Dense(a) => smallvec![a, f.ct],
                FactorRows::OneHot { indices, .. } => smallvec![indices, f.ct],
            },
        }
    }
}

/// Sum of all elements.
fn total(x: &Tensor) -> Result<Tensor> {
    let axes: Vec<usize> = (0..x.rank()).collect();
    lax::reduce_sum(x, &axes)
}

/// Sum of squares of all elements.
pub(crate) fn sum_squares(x: &Tensor) -> Result<Tensor> {
    total(&lax::mul(x, x)?)
}

/// `dot_general` over `[groups, .., ..]` operands, contracting axis `c`
/// of both, batched over axis 0.
fn grouped(a: &Tensor, b: &Tensor, c: usize) -> Result<Tensor> {
    lax::dot_general(
        a,
        b,
        DotDims {
            lhs_contract: smallvec![c],
            rhs_contract: smallvec![c],
            lhs_batch: smallvec![0],
            rhs_batch: smallvec![0],
        },
    )
}

/// The factor's product `A^T G`, `[groups, k, n]`.
fn product(f: &Factor) -> Result<Tensor> {
    let (groups, _, k, n) = f.dims();
    match &f.rows {
        FactorRows::Dense(a) => grouped(a, &f.ct, 1),
        FactorRows::OneHot { indices, .. } => {
            let zeros = lax::zeros_aval(&xform_ops::Aval {
                shape: Shape::from(&[groups, k, n][..]),
                dtype: f.ct.dtype(),
                device: f.ct.device(),
            })?;
            lax::scatter_add(&zeros, indices, &f.ct, 1, 1)
        }
    }
}

/// The product in the operand's own layout.
pub(crate) fn materialize(f: &Factor) -> Result<Tensor> {
    in_layout(&product(f)?, &f.shape, &f.axes)
}

/// A `[groups, k, n]` product reshaped to `shape` and permuted so that
/// the operand's axis `axes[i]` (at position `i` of `shape`) is axis
/// `axes[i]` of the result.
pub(crate) fn in_layout(p: &Tensor, shape: &Shape, axes: &[usize]) -> Result<Tensor> {
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

/// The Gram matrix `A A^T`, `[groups, m, m]`.
fn row_gram(rows: &FactorRows, dtype: DType) -> Result<Tensor> {
    match rows {
        FactorRows::Dense(a) => grouped(a, a, 2),
        FactorRows::OneHot { indices, .. } => {
            let m = indices.shape()[1];
            let groups = indices.shape()[0];
            let col = lax::reshape(indices, &Shape::from(&[groups, m, 1][..]))?;
            let row = lax::reshape(indices, &Shape::from(&[groups, 1, m][..]))?;
            let shape = Shape::from(&[groups, m, m][..]);
            let eq = lax::eq(
                &lax::broadcast_in_dim(&col, &shape, &[0, 1, 2])?,
                &lax::broadcast_in_dim(&row, &shape, &[0, 1, 2])?,
            )?;
            lax::convert(&eq, dtype)
        }
    }
}

/// Multiply-adds of the factor's squared norm by Gram matrices and by its
/// product, per group.
fn costs(f: &Factor) -> (usize, usize) {
    let (_, m, k, n) = f.dims();
    match f.rows {
        FactorRows::Dense(_) => (m.saturating_mul(m).saturating_mul(k + n), m.saturating_mul(k).saturating_mul(n)),
        FactorRows::OneHot { .. } => (m.saturating_mul(m).saturating_mul(n + 1), k.saturating_mul(n) + m * n),
    }
}

/// Whether the factor's squared norm comes from Gram matrices (else
/// from its product).
fn use_gram(f: &Factor, method: NormMethod) -> bool {
    let (gram, formed) = costs(f);
    match method {
        NormMethod::Auto => gram < formed,
        NormMethod::Gram => true,
        NormMethod::Materialize => false,
    }
}

/// The squared Frobenius norm of the factor's product from Gram matrices:
/// `sum((A A^T) * (G G^T))`, or `|a|^2 |g|^2` for one row per group.
fn gram_sq_norm(f: &Factor) -> Result<Tensor> {
    let (_, m, _, _) = f.dims();
    if let (1, FactorRows::Dense(a)) = (m, &f.rows) {
        let aa = lax::reduce_sum(&lax::mul(a, a)?, &[1, 2])?;
        let gg = lax::reduce_sum(&lax::mul(&f.ct, &f.ct)?, &[1, 2])?;
        return total(&lax::mul(&aa, &gg)?);
    }
    let ga = row_gram(&f.rows, f.ct.dtype())?;
    let gg = grouped(&f.ct, &f.ct, 2)?;
    total(&lax::mul(&ga, &gg)?)
}

/// Factors with one layout (same kind, operand layout and row length) are
/// one factor: their rows concatenated.
fn same_layout(a: &Factor, b: &Factor) -> bool {
    let kind = |f: &Factor| match f.rows {
        FactorRows::Dense(_) => None,
        FactorRows::OneHot { k, .. } => Some(k),
    };
    let (ga, _, ka, na) = a.dims();
    let (gb, _, kb, nb) = b.dims();
    kind(a) == kind(b) && a.shape == b.shape && a.axes == b.axes && (ga, ka, na) == (gb, kb, nb)
}

/// One factor of the rows of all of `fs` (all of one layout).
fn concat_rows(fs: Vec<Factor>) -> Result<Factor> {
    if fs.len() == 1 {
        return Ok(fs.into_iter().next().expect("one"));
    }
    let cts: Vec<Tensor> = fs.iter().map(|f| f.ct.clone()).collect();
    let ct = lax::concatenate(&cts, 1)?;
    let rows = match &fs[0].rows {
        FactorRows::Dense(_) => {
            let rows: Vec<Tensor> = fs
                .iter()
                .map(|f| match &f.rows {
                    FactorRows::Dense(a) => a.clone(),
                    FactorRows::OneHot { .. } => unreachable!("same_layout checks the kind"),
                })
                .collect();
            FactorRows::Dense(lax::concatenate(&rows, 1)?)
        }
        FactorRows::OneHot { k, .. } => {
            let idx: Vec<Tensor> = fs
                .iter()
                .map(|f| match &f.rows {
                    FactorRows::OneHot { indices, .. } => lax::convert(indices, DType::I64),
                    FactorRows::Dense(_) => unreachable!("same_layout checks the kind"),
                })
                .collect::<Result<_>>()?;
            FactorRows::OneHot { indices: lax::concatenate(&idx, 1)?, k: *k }
        }
    };
    let first = &fs[0];
    Ok(Factor { rows, ct, shape: first.shape.clone(), axes: first.axes.clone() })
}

/// A leaf's squared norm for one example, and its part for a clipped sum:
/// from its dense cotangent (if any) and its factors (see NOTE: [ghost]).
pub(crate) fn leaf_norm(
    dense: Option<Tensor>,
    mut factors: Vec<Factor>,
    leaf: &Tensor,
    method: NormMethod,
) -> Result<(Tensor, LeafPart)> {
    let mut groups: Vec<Vec<Factor>> = Vec::new();
    for f in factors.drain(..) {
        match groups.iter_mut().find(|g| same_layout(&g[0], &f)) {
            Some(g) => g.push(f),
            None => groups.push(vec![f]),
        }
    }
    if dense.is_none() && groups.len() == 1 {
        let f = concat_rows(groups.pop().expect("one group"))?;
        if use_gram(&f, method) {
            return Ok((gram_sq_norm(&f)?, LeafPart::Factored(f)));
        }
        // Cheaper to form (and then no larger than its factors, for the
        // clipped sum).
        let d = materialize(&f)?;
        return Ok((sum_squares(&d)?, LeafPart::Dense(d)));
    }
    let mut acc = dense;
    for g in groups {
        for f in g {
            let d = materialize(&f)?;
            acc = Some(match acc {
                None => d,
                Some(a) => lax::add(&a, &d)?,
            });
        }
    }
    let d = match acc {
        Some(d) => d,
        // Unused: a zero gradient.
        None => lax::zeros_like(leaf)?,
    };
    Ok((sum_squares(&d)?, LeafPart::Dense(d)))
}
