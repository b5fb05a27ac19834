//! Per-example gradient norms and clipped gradient sums (DP-SGD) without
//! per-example gradients.
//!
//! `vmap(grad(loss))` forms one gradient per example, batch x parameters of
//! memory, where DP-SGD needs only each example's gradient norm and then
//! the sum of the clipped gradients. [`per_example_grad_norms`] and
//! [`dp_clipped_grad`] compute those from the examples' activations and
//! output cotangents ("ghost clipping", Li et al. 2021; book-keeping, Bu et
//! al. 2022), for any model: the loss is linearized per example and its
//! backward pass keeps the cotangent of every parameter that a product or
//! an embedding lookup reads, or a broadcast adds (a bias), as a factored
//! sum of outer products (see NOTE: [factored cotangents] and
//! NOTE: [ghost norms]). Parameters used otherwise (scales, convolution
//! kernels on large maps) get their
//! per-example cotangent formed, which is what `vmap(grad)` forms for them.
//!
//! NOTE: [per-example losses] The loss is written for a batch, as for a plain
//! gradient: `loss(params, batch)` returns one loss per example, shape
//! `[B]` (PyTorch's `reduction="none"`), where every leaf of `batch` has
//! the examples on its leading axis. It is evaluated once per example, as
//! a batch of one under `vmap` (the functorch per-sample-gradient recipe),
//! so examples cannot interact (no batch norm), which DP-SGD requires
//! anyway, and the loss must accept any batch size.

mod ghost;

use crate::linearize::{linearize_flat, Ct};
use crate::tree::Tree;
use crate::vmap::vmap;
use ghost::{in_layout, leaf_norm, pull_back, FactorHook, PartLayout};
use smallvec::smallvec;
use std::cell::RefCell;
use xform_ops::prims::factor::{Factor, FactorRows};
use xform_ops::prims::linalg::DotDims;
use xform_ops::{catch, lax, Aval, DType, Error, Key, OrRaise, Result, Shape, Tensor};

/// How a factored parameter's per-example norm is computed.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum NormMethod {
    /// Per layer, whichever costs fewer multiply-adds: Gram matrices
    /// (`m^2 (k + n)` for `m` rows of an example) or forming the
    /// example's gradient (`m k n`). For one row per example (a dense
    /// layer on a vector) that is `|x|^2 |g|^2`.
    #[default]
    Auto,
    /// Always Gram matrices.
    Gram,
    /// Always form each example's gradient of the layer (what `vmap(grad)`
    /// does, layer by layer; for tests and comparison).
    Materialize,
}

/// How [`dp_clipped_grad`] forms the sum of clipped gradients.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ClipSum {
    /// Book-keeping (Bu et al. 2022): the norms' pass keeps each factored
    /// layer's activations and output cotangents, and the clipped sum is
    /// one product over the examples per layer. One forward and one
    /// backward pass.
    #[default]
    BookKeeping,
    /// A second backward pass of `sum_i c_i loss_i` over the whole batch,
    /// with the clip factors `c_i` as constants (Opacus's ghost clipping).
    SecondPass,
}

/// Options of [`dp_clipped_grad_with`].
#[derive(Copy, Clone, Debug)]
pub struct DpOptions {
    /// The clipping bound `C`: each example's gradient is scaled by
    /// `min(1, C / (norm + eps))`.
    pub max_norm: f64,
    /// Added to the norm in the clip factor (Opacus's 1e-6).
    pub eps: f64,
    /// How factored norms are computed.
    pub norm_method: NormMethod,
    /// How the clipped sum is formed.
    pub sum: ClipSum,
}

impl DpOptions {
    /// Clipping to `max_norm`, Opacus's `eps` of 1e-6, automatic norm
    /// method, book-keeping sum.
    pub fn new(max_norm: f64) -> DpOptions {
        DpOptions { max_norm, eps: 1e-6, norm_method: NormMethod::Auto, sum: ClipSum::BookKeeping }
    }
    /// With a norm method.
    pub fn norm_method(self, norm_method: NormMethod) -> DpOptions {
        DpOptions { norm_method, ..self }
    }
    /// With a way to form the clipped sum.
    pub fn sum(self, sum: ClipSum) -> DpOptions {
        DpOptions { sum, ..self }
    }
    /// With the stabilizer added to the norm in the clip factor.
    pub fn eps(self, eps: f64) -> DpOptions {
        DpOptions { eps, ..self }
    }
}

/// Each example's gradient norm.
#[derive(Clone, Debug)]
pub struct GradNorms<P> {
    /// The L2 norm of each example's whole gradient, `[B]`.
    pub norms: Tensor,
    /// Per parameter leaf, each example's norm of that leaf's gradient
    /// (`[B]` leaves in the parameters' tree).
    pub per_leaf: P,
    /// Each example's loss, `[B]`.
    pub loss: Tensor,
}

/// The sum of per-example gradients, each clipped to a norm of at most
/// `max_norm`.
#[derive(Clone, Debug)]
pub struct DpGrad<P> {
    /// `sum_i min(1, C / (|g_i| + eps)) g_i`, shaped like the parameters.
    pub sum: P,
    /// Each example's gradient norm before clipping, `[B]`.
    pub norms: Tensor,
    /// Each example's loss, `[B]`.
    pub loss: Tensor,
    /// The clipping bound `C`.
    pub max_norm: f64,
    /// The number of examples `B`.
    pub batch_size: usize,
}

impl<P: Tree> DpGrad<P> {
    /// The clipped sum divided by the batch size.
    pub fn mean(&self) -> P {
        let scale = 1.0 / self.batch_size.max(1) as f64;
        let leaves: Vec<Tensor> = self.sum.leaves().iter().map(|l| l * scale).collect();
        self.sum.with_leaves(leaves)
    }

    /// The clipped sum plus Gaussian noise of standard deviation
    /// `noise_multiplier * max_norm` per element (the Gaussian mechanism
    /// DP-SGD's accountant assumes), drawn from `key`: one key per leaf,
    /// split from `key`, so the same key gives the same noise.
    pub fn noisy_sum(&self, key: &Key, noise_multiplier: f64) -> P {
        if !(noise_multiplier >= 0.0 && noise_multiplier.is_finite()) {
            Error::invalid(
                "DpGrad::noisy_sum",
                format!("noise_multiplier must be finite and >= 0, got {noise_multiplier}"),
            )
            .raise();
        }
        let leaves = self.sum.leaves();
        let keys = key.split(leaves.len().max(1));
        let std = noise_multiplier * self.max_norm;
        let noisy: Vec<Tensor> =
            leaves.iter().zip(&keys).map(|(l, k)| l + &(k.normal(l.shape(), l.dtype()) * std)).collect();
        self.sum.with_leaves(noisy)
    }

    /// [`noisy_sum`](Self::noisy_sum) divided by `denominator`: DP-SGD's
    /// gradient. With Poisson sampling the denominator is the *expected*
    /// batch size (`sample_rate * dataset size`, as Opacus divides), not
    /// the size of the batch drawn, which would reveal it.
    pub fn noisy_mean(&self, key: &Key, noise_multiplier: f64, denominator: f64) -> P {
        if !(denominator > 0.0 && denominator.is_finite()) {
            Error::invalid("DpGrad::noisy_mean", format!("denominator must be positive, got {denominator}")).raise();
        }
        let s = self.noisy_sum(key, noise_multiplier);
        let leaves: Vec<Tensor> = s.leaves().iter().map(|l| l * (1.0 / denominator)).collect();
        s.with_leaves(leaves)
    }
}

/// Each example's gradient norm, over the whole parameter tree and per
/// leaf, without forming the per-example gradients (see the module docs).
///
/// `loss(params, batch)` returns one loss per example, `[B]` (NOTE:
/// [per-example losses]). The norms equal those of `vmap(grad)`'s per-example
/// gradients up to rounding.
///
/// ```
/// use xform_ops::{DType, Key, Tensor};
/// use xform_transforms::per_example_grad_norms;
///
/// let key = Key::new(0);
/// let w = key.fold_in(0).normal([3, 2], DType::F64);
/// let x = key.fold_in(1).normal([5, 3], DType::F64);
/// // Half the squared norm of each example's output.
/// let loss = |w: &Tensor, x: &Tensor| x.matmul(w).powf(2.0).sum_axis(1, false) * 0.5;
/// let n = per_example_grad_norms(loss)(&w, &x);
/// // The gradient of example i is x_i (x_i w)^T, of norm |x_i| |x_i w|.
/// let want: Vec<f64> = (0..5)
///     .map(|i| x.index(i).powf(2.0).sum().sqrt().item::<f64>() * x.index(i).matmul(&w).powf(2.0).sum().sqrt().item::<f64>())
///     .collect();
/// for (a, b) in n.norms.to_vec::<f64>().iter().zip(&want) {
///     assert!((a - b).abs() < 1e-12 * b);
/// }
/// ```
pub fn per_example_grad_norms<P: Tree, D: Tree>(loss: impl Fn(&P, &D) -> Tensor) -> impl Fn(&P, &D) -> GradNorms<P> {
    per_example_grad_norms_with(loss, NormMethod::Auto)
}

/// [`per_example_grad_norms`] with a norm method.
pub fn per_example_grad_norms_with<P: Tree, D: Tree>(
    loss: impl Fn(&P, &D) -> Tensor,
    method: NormMethod,
) -> impl Fn(&P, &D) -> GradNorms<P> {
    move |params: &P, batch: &D| {
        let pass = per_example_pass("per_example_grad_norms", &loss, params, batch, method, false).or_raise();
        let per_leaf: Vec<Tensor> = pass.sq.iter().map(Tensor::sqrt).collect();
        GradNorms { norms: pass.norms().or_raise(), per_leaf: params.with_leaves(per_leaf), loss: pass.loss }
    }
}

/// [`per_example_grad_norms`] returning errors as values.
pub fn try_per_example_grad_norms<P: Tree, D: Tree>(
    loss: impl Fn(&P, &D) -> Tensor,
) -> impl Fn(&P, &D) -> Result<GradNorms<P>> {
    let f = per_example_grad_norms(loss);
    move |p: &P, d: &D| catch(|| f(p, d))
}

/// The sum over examples of each example's gradient clipped to a norm of
/// at most `max_norm` (scaled by `min(1, max_norm / (norm + 1e-6))`, as
/// Opacus), without forming per-example gradients: DP-SGD's gradient
/// before noise (add it with [`DpGrad::noisy_sum`]).
///
/// `loss(params, batch)` returns one loss per example, `[B]` (NOTE:
/// [per-example losses]). The result equals `vmap(grad)`, clip and sum up to
/// rounding.
///
/// ```
/// use xform_ops::{DType, Key, Tensor};
/// use xform_transforms::dp_clipped_grad;
///
/// let key = Key::new(0);
/// let w = key.fold_in(0).normal([3, 2], DType::F64);
/// let x = key.fold_in(1).normal([5, 3], DType::F64);
/// let loss = |w: &Tensor, x: &Tensor| x.matmul(w).powf(2.0).sum_axis(1, false) * 0.5;
/// let g = dp_clipped_grad(loss, 0.1)(&w, &x);
/// // Every example is clipped here, so each contributes a gradient of norm 0.1.
/// assert!(g.norms.to_vec::<f64>().iter().all(|&n| n > 0.1));
/// assert!(g.sum.powf(2.0).sum().sqrt().item::<f64>() <= 5.0 * 0.1 + 1e-12);
/// let private = g.noisy_mean(&Key::new(7), 1.1, 5.0);
/// assert_eq!(private.shape(), w.shape());
/// ```
pub fn dp_clipped_grad<P: Tree, D: Tree>(
    loss: impl Fn(&P, &D) -> Tensor,
    max_norm: f64,
) -> impl Fn(&P, &D) -> DpGrad<P> {
    dp_clipped_grad_with(loss, DpOptions::new(max_norm))
}

/// [`dp_clipped_grad`] with options.
pub fn dp_clipped_grad_with<P: Tree, D: Tree>(
    loss: impl Fn(&P, &D) -> Tensor,
    opts: DpOptions,
) -> impl Fn(&P, &D) -> DpGrad<P> {
    move |params: &P, batch: &D| dp_call(&loss, &opts, params, batch).or_raise()
}

/// [`dp_clipped_grad`] returning errors as values.
pub fn try_dp_clipped_grad<P: Tree, D: Tree>(
    loss: impl Fn(&P, &D) -> Tensor,
    max_norm: f64,
) -> impl Fn(&P, &D) -> Result<DpGrad<P>> {
    let opts = DpOptions::new(max_norm);
    move |p: &P, d: &D| catch(|| dp_call(&loss, &opts, p, d))?
}

const DP: &str = "dp_clipped_grad";

fn dp_call<P: Tree, D: Tree>(
    loss: &impl Fn(&P, &D) -> Tensor,
    opts: &DpOptions,
    params: &P,
    batch: &D,
) -> Result<DpGrad<P>> {
    if !(opts.max_norm > 0.0 && opts.max_norm.is_finite()) {
        return Err(Error::invalid(DP, format!("max_norm must be positive and finite, got {}", opts.max_norm)));
    }
    if !(opts.eps >= 0.0 && opts.eps.is_finite()) {
        return Err(Error::invalid(DP, format!("eps must be finite and >= 0, got {}", opts.eps)));
    }
    let book = opts.sum == ClipSum::BookKeeping;
    let pass = per_example_pass(DP, loss, params, batch, opts.norm_method, book)?;
    let norms = pass.norms()?;
    // min(1, C / (norm + eps)), in the norms' dtype.
    let factor = lax::min(
        &lax::div(&lax::full_like(&norms, opts.max_norm)?, &lax::add(&norms, &lax::full_like(&norms, opts.eps)?)?)?,
        &lax::full_like(&norms, 1.0)?,
    )?;
    let leaves = params.leaves();
    let sum: Vec<Tensor> = match opts.sum {
        ClipSum::BookKeeping => {
            let mut parts = pass.parts.into_iter();
            let mut out = Vec::with_capacity(leaves.len());
            for (leaf, layouts) in leaves.iter().zip(&pass.layouts) {
                let mut acc: Option<Tensor> = None;
                for layout in layouts {
                    let s = weighted_sum(layout, &mut parts, &factor)?;
                    acc = Some(match acc {
                        None => s,
                        Some(a) => lax::add(&a, &s)?,
                    });
                }
                let s = match acc {
                    Some(s) => s,
                    None => lax::zeros_like(leaf)?,
                };
                out.push(if s.dtype() == leaf.dtype() { s } else { lax::convert(&s, leaf.dtype())? });
            }
            out
        }
        ClipSum::SecondPass => {
            let c = factor.stop_gradient();
            let g = crate::grad(|p: &P| {
                let l = loss(p, batch);
                let c = if c.dtype() == l.dtype() { c.clone() } else { lax::convert(&c, l.dtype()).or_raise() };
                (l * &c).sum()
            })(params);
            g.leaves().into_iter().collect()
        }
    };
    Ok(DpGrad { sum: params.with_leaves(sum), norms, loss: pass.loss, max_norm: opts.max_norm, batch_size: pass.batch })
}

/// `sum_i c_i part_i` of one leaf's parts (stacked over the examples).
fn weighted_sum(layout: &PartLayout, parts: &mut impl Iterator<Item = Tensor>, c: &Tensor) -> Result<Tensor> {
    let mut next = || parts.next().ok_or_else(|| Error::transform(DP, "internal: a leaf's part is missing"));
    let typed = |c: &Tensor, d: DType| if c.dtype() == d { Ok(c.clone()) } else { lax::convert(c, d) };
    match layout {
        PartLayout::Dense => {
            let d = next()?;
            let c = typed(c, d.dtype())?;
            lax::dot_general(
                &c,
                &d,
                DotDims { lhs_contract: smallvec![0], rhs_contract: smallvec![0], ..Default::default() },
            )
        }
        PartLayout::Factored { one_hot_k, shape, axes, chain } => {
            let (rows, g) = (next()?, next()?);
            let c = typed(c, g.dtype())?;
            // G [B, groups, m, n] scaled per example.
            let gc = lax::mul(&g, &lax::broadcast_in_dim(&c, &g.shape(), &[0])?)?;
            let (b, groups, m, n) = (g.shape()[0], g.shape()[1], g.shape()[2], g.shape()[3]);
            let p = match one_hot_k {
                None => lax::dot_general(
                    &rows,
                    &gc,
                    DotDims {
                        lhs_contract: smallvec![0, 2],
                        rhs_contract: smallvec![0, 2],
                        lhs_batch: smallvec![1],
                        rhs_batch: smallvec![1],
                    },
                )?,
                Some(k) => {
                    // Every example's rows are rows of one factor: its product.
                    let indices =
                        lax::reshape(&lax::transpose(&rows, &[1, 0, 2])?, &Shape::from(&[groups, b * m][..]))?;
                    let ct = lax::reshape(&lax::transpose(&gc, &[1, 0, 2, 3])?, &Shape::from(&[groups, b * m, n][..]))?;
                    let all = Factor {
                        rows: FactorRows::OneHot { indices, k: *k },
                        ct,
                        shape: shape.clone(),
                        axes: axes.clone(),
                    };
                    all.product()?
                }
            };
            pull_back(chain, in_layout(&p, shape, axes)?)
        }
    }
}

/// The per-example pass over a batch.
struct Pass {
    /// Each example's loss, `[B]`.
    loss: Tensor,
    /// Per leaf, each example's squared gradient norm, `[B]`.
    sq: Vec<Tensor>,
    /// Per leaf, the layouts of its parts (when asked for).
    layouts: Vec<Vec<PartLayout>>,
    /// The parts' tensors, stacked over the examples, leaf after leaf.
    parts: Vec<Tensor>,
    /// `B`.
    batch: usize,
}

impl Pass {
    /// The whole gradient's norm per example.
    fn norms(&self) -> Result<Tensor> {
        let mut acc: Option<Tensor> = None;
        for s in &self.sq {
            acc = Some(match acc {
                None => s.clone(),
                Some(a) => lax::add(&a, s)?,
            });
        }
        match acc {
            Some(a) => lax::sqrt(&a),
            None => lax::zeros_like(&self.loss),
        }
    }
}

/// Checks the parameters and the batch: float parameters; batch leaves
/// with one leading length, `B`.
fn check_inputs<P: Tree, D: Tree>(op: &str, params: &P, batch: &D) -> Result<usize> {
    for (path, leaf) in params.paths().iter().zip(params.leaves().iter()) {
        if !leaf.dtype().is_float() {
            return Err(Error::dtype(
                op,
                format!(
                    "differentiates every parameter leaf, and leaf {} is {} (not floating point); \
                     pass integer data in the batch or close over it",
                    if path.is_empty() { "(the root)" } else { path },
                    leaf.dtype()
                ),
                &[leaf.dtype()],
            ));
        }
    }
    let leaves = batch.leaves();
    let paths = batch.paths();
    let mut b: Option<(usize, &str)> = None;
    for (path, leaf) in paths.iter().zip(leaves.iter()) {
        let p = if path.is_empty() { "(the root)" } else { path };
        if leaf.rank() == 0 {
            return Err(Error::shape(
                op,
                format!("batch leaf {p} is a scalar; every batch leaf needs the examples on its leading axis"),
                &[&leaf.shape()],
            ));
        }
        match b {
            None => b = Some((leaf.dim(0), p)),
            Some((n, first)) if n != leaf.dim(0) => {
                return Err(Error::shape(
                    op,
                    format!(
                        "batch leaves disagree on the number of examples: {first} has {n}, {p} has {}",
                        leaf.dim(0)
                    ),
                    &[&leaf.shape()],
                ))
            }
            Some(_) => {}
        }
    }
    b.map(|(n, _)| n).ok_or_else(|| Error::invalid(op, "the batch has no tensors"))
}

/// The loss per example as a batch of one, linearized, transposed with
/// factored cotangents, reduced to squared norms (and parts, if `parts`),
/// all under `vmap` over the examples.
fn per_example_pass<P: Tree, D: Tree>(
    op: &'static str,
    loss: &impl Fn(&P, &D) -> Tensor,
    params: &P,
    batch: &D,
    method: NormMethod,
    parts: bool,
) -> Result<Pass> {
    let b = check_inputs(op, params, batch)?;
    let n_leaves = params.leaves().len();
    if b == 0 {
        // No example: nothing to differentiate, every sum is zero.
        let empty = |l: &Tensor| {
            lax::zeros_aval(&Aval { shape: Shape::from(&[0usize][..]), dtype: l.dtype(), device: l.device() })
        };
        let leaves = params.leaves();
        let dtype_leaf = leaves.first().cloned().unwrap_or_else(|| Tensor::zeros([0], DType::F32));
        let layouts = vec![vec![PartLayout::Dense]; n_leaves];
        let mut stacked = Vec::new();
        for l in leaves.iter() {
            let mut shape = vec![0usize];
            shape.extend_from_slice(l.shape().dims());
            stacked.push(lax::zeros_aval(&Aval { shape: Shape::from(shape), dtype: l.dtype(), device: l.device() })?);
        }
        let sq = leaves.iter().map(empty).collect::<Result<Vec<_>>>()?;
        return Ok(Pass {
            loss: empty(&dtype_leaf)?,
            sq,
            layouts,
            parts: if parts { stacked } else { vec![] },
            batch: 0,
        });
    }
    let layouts: RefCell<Vec<Vec<PartLayout>>> = RefCell::new(Vec::new());
    let one = |ex: &D| -> Vec<Tensor> {
        let leaves: Vec<Tensor> = ex.leaves().iter().map(|l| l.unsqueeze(0)).collect();
        let ex1 = ex.with_leaves(leaves);
        let lin = linearize_flat(op, |p: &P| loss(p, &ex1), params);
        let out = match &lin.out_leaves[..] {
            [l] if l.shape().dims() == [1] && l.dtype().is_float() => l.reshape(&[] as &[isize]),
            outs => Error::shape(
                op,
                format!(
                    "the loss must return one floating-point loss per example, shape [B] \
                     (reduction \"none\"); for a batch of one example it returned {} (a loss reduced over the batch?)",
                    outs.iter().map(|o| format!("{} {}", o.dtype(), o.shape())).collect::<Vec<_>>().join(", ")
                ),
                &outs.iter().map(|o| o.shape()).collect::<Vec<_>>().iter().collect::<Vec<_>>(),
            )
            .raise(),
        };
        lin.program.check_consts(op).or_raise();
        let mut hook = FactorHook::default();
        let dense =
            xform_ops::program_transforms::backward::transpose(&lin.program, None, &[Some(Ct::Ones)], Some(&mut hook))
                .or_raise();
        // Each parameter's factors, from it and from its views.
        let mut per_leaf: Vec<Vec<_>> = (0..n_leaves).map(|_| Vec::new()).collect();
        for (id, fs) in hook.factors.into_iter().enumerate() {
            per_leaf[hook.watched[id].input].extend(fs.into_iter().map(|f| (f, id)));
        }
        let mut sq = Vec::with_capacity(n_leaves);
        let mut tensors = Vec::new();
        let mut lay = Vec::new();
        for ((d, fs), leaf) in dense.into_iter().zip(per_leaf).zip(lin.in_leaves.iter()) {
            let (s, leaf_parts) = leaf_norm(d, fs, &hook.watched, leaf, method).or_raise();
            sq.push(s);
            if parts {
                lay.push(leaf_parts.iter().map(|p| p.layout()).collect());
                for p in leaf_parts {
                    tensors.extend(p.tensors());
                }
            }
        }
        *layouts.borrow_mut() = lay;
        let mut outs = Vec::with_capacity(1 + sq.len() + tensors.len());
        outs.push(out);
        outs.extend(sq);
        outs.extend(tensors);
        outs
    };
    let outs = vmap(one)(batch);
    let mut it = outs.into_iter();
    let loss_b = it.next().ok_or_else(|| Error::transform(op, "internal: no loss"))?;
    let sq: Vec<Tensor> = it.by_ref().take(n_leaves).collect();
    Ok(Pass { loss: loss_b, sq, layouts: layouts.into_inner(), parts: it.collect(), batch: b })
}
