//! One example's pass: the loss linearized in the parameters, transposed
//! with the weights' cotangents kept factored, reduced to squared norms
//! per leaf (and, for a clipped sum, what the sum needs).
//!
//! NOTE: [ghost norms] Everything here runs inside `vmap` over the examples, so
//! it is written for one example and every op on an activation or a
//! cotangent is batched over the examples by the batch rules. A leaf's
//! cotangent arrives as a dense per-example tensor (from the ordinary
//! transpose rules: scales, every use without a factored form) and
//! as factors `A^T G` (from `Family::factor`: products, embedding
//! lookups and broadcasts (biases) that read the leaf itself, see NOTE: [factored cotangents]). Factors with
//! the same layout are one factor (their rows concatenated: a weight used
//! twice). A leaf with one factor and nothing else gets its norm from the
//! factor, by Gram matrices or by forming `A^T G`, whichever costs fewer
//! multiply-adds (the choice of Bu et al.'s mixed ghost clipping); any
//! other leaf forms its per-example cotangent (its factors materialized
//! and added), which is what `vmap(grad)` would have formed for it.

use super::NormMethod;
use smallvec::{smallvec, SmallVec};
use xform_ops::prim::{factor_rule, transpose_rule, Axes, LinearArg};
pub(crate) use xform_ops::prims::factor::in_layout;
use xform_ops::prims::factor::{Factor, FactorRows};
use xform_ops::prims::linalg::DotDims;
use xform_ops::prims::ViewKind;
use xform_ops::program_transforms::backward::Hook;
use xform_ops::{lax, Atom, Aval, DType, Eqn, Error, Prim, Program, Result, Shape, Tensor};

/// One step from a parameter to the value a product reads: a view op that
/// reindexes or selects (transpose, reshape, rev, slice; see
/// [`ViewKind`]), whose transpose takes the value's cotangent back
/// injectively, so it keeps norms and inner products.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    prim: Prim,
    operand: Aval,
}

/// The cotangent of a chain's start from that of its end.
pub(crate) fn pull_back(chain: &[Step], ct: Tensor) -> Result<Tensor> {
    let mut ct = ct;
    for s in chain.iter().rev() {
        let args = [LinearArg::Linear(&s.operand)];
        ct = transpose_rule(&s.prim, &[Some(ct)], &args)?
            .into_iter()
            .next()
            .flatten()
            .ok_or_else(|| Error::transform(s.prim.name(), "internal: a view's transpose gave no cotangent"))?;
    }
    Ok(ct)
}

/// A watched variable: a parameter's tangent, or a view of one.
pub(crate) struct Watched {
    /// The parameter (program input).
    pub(crate) input: usize,
    /// The views from the parameter to this variable.
    pub(crate) chain: Vec<Step>,
}

/// Collects the factors of the cotangents of the program's inputs and of
/// the views of them (see NOTE: [ghost norms]).
#[derive(Default)]
pub(crate) struct FactorHook {
    /// Per watched id, what it is.
    pub(crate) watched: Vec<Watched>,
    /// Per watched id, its factors so far.
    pub(crate) factors: Vec<Vec<Factor>>,
}

impl Hook for FactorHook {
    fn watch(&mut self, program: &Program) -> Vec<Option<usize>> {
        let mut ids: Vec<Option<usize>> = vec![None; program.avals.len()];
        self.watched.clear();
        for (i, v) in program.inputs.iter().enumerate() {
            ids[v.0 as usize] = Some(i);
            self.watched.push(Watched { input: i, chain: Vec::new() });
        }
        for eqn in &program.eqns {
            let ([Atom::Var(u)], [out]) = (&eqn.inputs[..], &eqn.outputs[..]) else {
                continue;
            };
            let Some(w) = ids[u.0 as usize] else {
                continue;
            };
            if matches!(eqn.prim.props().view, Some(ViewKind::Reindex | ViewKind::Select)) {
                let mut chain = self.watched[w].chain.clone();
                chain.push(Step { prim: eqn.prim.clone(), operand: program.aval(*u).clone() });
                ids[out.0 as usize] = Some(self.watched.len());
                self.watched.push(Watched { input: self.watched[w].input, chain });
            }
        }
        self.factors = (0..self.watched.len()).map(|_| Vec::new()).collect();
        ids
    }

    fn take(
        &mut self,
        eqn: &Eqn,
        cts: &[Option<Tensor>],
        args: &[LinearArg],
        inputs: &[Option<usize>],
    ) -> Result<bool> {
        // Only an equation linear in exactly one operand, that operand
        // watched: its whole cotangent is then that variable's.
        let mut linear = args.iter().enumerate().filter(|(_, a)| a.is_linear());
        let (Some((i, _)), None) = (linear.next(), linear.next()) else {
            return Ok(false);
        };
        let Some(id) = inputs[i] else {
            return Ok(false);
        };
        match factor_rule(&eqn.prim, cts, args, i)? {
            Some(f) => {
                self.factors[id].push(f);
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
    /// The factor whose product, taken back through the chain of views,
    /// is (a part of) the per-example cotangent.
    Factored(Factor, Vec<Step>),
}

/// The layout of a leaf's part, the same for every example (its tensors
/// travel through `vmap` as outputs; this travels beside them).
#[derive(Clone, Debug)]
pub(crate) enum PartLayout {
    /// One tensor: the dense cotangent.
    Dense,
    /// Two tensors, `A` and `G`, of a factor with this layout, whose
    /// product is taken back through `chain`.
    Factored { one_hot_k: Option<usize>, shape: Shape, axes: Axes, chain: Vec<Step> },
}

impl LeafPart {
    pub(crate) fn layout(&self) -> PartLayout {
        match self {
            LeafPart::Dense(_) => PartLayout::Dense,
            LeafPart::Factored(f, chain) => PartLayout::Factored {
                one_hot_k: match f.rows {
                    FactorRows::Dense(_) => None,
                    FactorRows::OneHot { k, .. } => Some(k),
                },
                shape: f.shape.clone(),
                axes: f.axes.clone(),
                chain: chain.clone(),
            },
        }
    }

    /// The part's tensors, in the order [`PartLayout`] says.
    pub(crate) fn tensors(self) -> SmallVec<[Tensor; 2]> {
        match self {
            LeafPart::Dense(d) => smallvec![d],
            LeafPart::Factored(f, _) => match f.rows {
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

/// Multiply-adds of the factor's squared norm by Gram matrices (the two
/// Grams and their inner product, or `|a|^2 |g|^2` for one row) and by its
/// product (forming it, then its sum of squares), per group.
fn costs(f: &Factor) -> (usize, usize) {
    let (_, m, k, n) = f.dims();
    let kn = k.saturating_mul(n);
    let mm = m.saturating_mul(m);
    match f.rows {
        FactorRows::Dense(_) if m == 1 => (k + n + 1, kn.saturating_mul(2)),
        FactorRows::Dense(_) => (mm.saturating_mul(k + n + 1), m.saturating_mul(kn).saturating_add(kn)),
        FactorRows::OneHot { .. } => (mm.saturating_mul(n + 1), kn.saturating_mul(2).saturating_add(m * n)),
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

/// True if the views of the groups read disjoint elements of the leaf, so
/// that their cotangents are orthogonal and the squared norms add: each
/// group's chain taken back from ones marks what it reads (concrete
/// values, computed once per call, not per example).
fn disjoint(chains: &[&[Step]], leaf: &Tensor) -> Result<bool> {
    if chains.len() < 2 {
        return Ok(true);
    }
    if chains.iter().any(|c| c.is_empty()) {
        return Ok(false);
    }
    let mut seen: Option<Tensor> = None;
    for c in chains {
        let end = c.last().expect("non-empty");
        let ones_at_end = lax::full(&view_shape(end)?, 1.0, leaf.dtype(), leaf.device())?;
        let mask = pull_back(c, ones_at_end)?;
        seen = Some(match seen {
            None => mask,
            Some(s) => {
                if total(&lax::mul(&s, &mask)?)?.item_f64() != 0.0 {
                    return Ok(false);
                }
                lax::add(&s, &mask)?
            }
        });
    }
    Ok(true)
}

/// The shape of a view step's result.
fn view_shape(step: &Step) -> Result<Shape> {
    let outs = xform_ops::prim::shape_rule(&step.prim, &[step.operand.as_ref()])?;
    Ok(outs[0].shape.clone())
}

/// A leaf's squared norm for one example, and its parts for a clipped sum:
/// from its dense cotangent (if any) and its factors, each with the id of
/// the watched variable it is for (see NOTE: [ghost norms]).
pub(crate) fn leaf_norm(
    dense: Option<Tensor>,
    factors: Vec<(Factor, usize)>,
    watched: &[Watched],
    leaf: &Tensor,
    method: NormMethod,
) -> Result<(Tensor, Vec<LeafPart>)> {
    // Factors of one watched variable and one layout are one factor.
    let mut groups: Vec<(usize, Vec<Factor>)> = Vec::new();
    for (f, id) in factors {
        match groups.iter_mut().find(|(gid, g)| *gid == id && same_layout(&g[0], &f)) {
            Some((_, g)) => g.push(f),
            None => groups.push((id, vec![f])),
        }
    }
    let chains: Vec<&[Step]> = groups.iter().map(|(id, _)| &watched[*id].chain[..]).collect();
    let add = |acc: Option<Tensor>, d: Tensor| -> Result<Option<Tensor>> {
        Ok(Some(match acc {
            None => d,
            Some(a) => lax::add(&a, &d)?,
        }))
    };
    if dense.is_none() && !groups.is_empty() && disjoint(&chains, leaf)? {
        // Orthogonal parts: the squared norms add.
        let mut sq: Option<Tensor> = None;
        let mut formed: Option<Tensor> = None;
        let mut parts = Vec::new();
        for (id, g) in groups {
            let f = concat_rows(g)?;
            let chain = &watched[id].chain;
            if use_gram(&f, method) {
                sq = add(sq, gram_sq_norm(&f)?)?;
                parts.push(LeafPart::Factored(f, chain.clone()));
            } else {
                // Cheaper to form (and then no larger than its factors).
                let d = pull_back(chain, f.materialize()?)?;
                sq = add(sq, sum_squares(&d)?)?;
                formed = add(formed, d)?;
            }
        }
        if let Some(d) = formed {
            parts.push(LeafPart::Dense(d));
        }
        return Ok((sq.expect("a group"), parts));
    }
    let mut acc = dense;
    for (id, g) in groups {
        for f in g {
            acc = add(acc, pull_back(&watched[id].chain, f.materialize()?)?)?;
        }
    }
    let d = match acc {
        Some(d) => d,
        // Unused: a zero gradient.
        None => lax::zeros_like(leaf)?,
    };
    Ok((sum_squares(&d)?, vec![LeafPart::Dense(d)]))
}
