//! Normalization layers with PyTorch's semantics: [`LayerNorm`],
//! [`GroupNorm`] and [`BatchNorm`] (functional: [`batch_norm`] takes the
//! running statistics and returns the updated ones).
//!
//! Statistics use the biased (population) variance, `eps` is added to the
//! variance inside the square root, and f16/bf16 inputs are normalized in
//! f32 and cast back (PyTorch accumulates them in f32 as well). The affine
//! parameters start at weight 1 and bias 0, as in PyTorch.

use crate::{DType, Error, Shape, Tensor};

/// The dtype the statistics of `x` are computed in: f32 for the half
/// types, `x`'s own otherwise.
#[track_caller]
fn compute_dtype(op: &str, x: &Tensor) -> DType {
    match x.dtype() {
        DType::F16 | DType::BF16 => DType::F32,
        d if d.is_float() => d,
        d => Error::dtype(op, "needs a float input", &[d]).raise(),
    }
}

/// `(x - mean) / sqrt(var + eps)` over `axes` (biased variance).
fn standardize(x: &Tensor, axes: &[isize], eps: f64) -> Tensor {
    let mean = x.mean_axes(axes, true);
    let d = x - &mean;
    let var = (&d * &d).mean_axes(axes, true);
    d * (var + eps).rsqrt()
}

/// A per-channel vector `[C]` shaped `[C, 1, ..]` to broadcast against
/// `[N, C, *]` of rank `rank`.
fn per_channel(p: &Tensor, rank: usize, dtype: DType) -> Tensor {
    let mut dims = vec![p.dim(0) as isize];
    dims.resize(rank - 1, 1);
    p.cast(dtype).reshape(&dims)
}

/// `y * weight + bias` with either absent.
fn affine(y: Tensor, weight: Option<Tensor>, bias: Option<Tensor>) -> Tensor {
    let y = match weight {
        Some(w) => y * w,
        None => y,
    };
    match bias {
        Some(b) => y + b,
        None => y,
    }
}

#[track_caller]
fn check_eps(op: &str, eps: f64) {
    if !(eps.is_finite() && eps >= 0.0) {
        Error::invalid(op, format!("eps must be finite and non-negative, got {eps}")).raise();
    }
}

/// Layer normalization (`torch.nn.LayerNorm`): each example is normalized
/// over its trailing axes `normalized_shape`, then scaled and shifted
/// elementwise by `weight` and `bias` (both shaped `normalized_shape`):
///
/// `y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias`.
///
/// It is a pytree whose leaves are `.weight` and `.bias` (when present).
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::LayerNorm;
///
/// let ln = LayerNorm::new(&[4], DType::F64);
/// let y = ln.forward(&Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [1, 4]));
/// assert!(y.mean().item::<f64>().abs() < 1e-12); // zero mean, unit variance
/// assert!((y.var().item::<f64>() - 1.25 / (1.25 + 1e-5)).abs() < 1e-12);
/// ```
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct LayerNorm {
    /// The elementwise scale, shaped `normalized_shape` (`None` without
    /// elementwise affine).
    pub weight: Option<Tensor>,
    /// The elementwise shift, shaped `normalized_shape`.
    pub bias: Option<Tensor>,
    /// The trailing axes normalized over.
    #[tree(static)]
    pub normalized_shape: Vec<usize>,
    /// Added to the variance (default 1e-5).
    #[tree(static)]
    pub eps: f64,
}

impl LayerNorm {
    /// PyTorch's default: affine with weight 1 and bias 0, `eps = 1e-5`.
    pub fn new(normalized_shape: &[usize], dtype: DType) -> LayerNorm {
        LayerNorm {
            weight: Some(Tensor::ones(normalized_shape.to_vec(), dtype)),
            bias: Some(Tensor::zeros(normalized_shape.to_vec(), dtype)),
            normalized_shape: normalized_shape.to_vec(),
            eps: 1e-5,
        }
    }

    /// Without weight and bias (`elementwise_affine=False`).
    pub fn without_affine(mut self) -> LayerNorm {
        self.weight = None;
        self.bias = None;
        self
    }

    /// Without the bias (`bias=False`).
    pub fn without_bias(mut self) -> LayerNorm {
        self.bias = None;
        self
    }

    /// The same layer with another `eps`.
    ///
    /// # Panics
    /// If `eps` is negative or not finite.
    #[track_caller]
    pub fn with_eps(mut self, eps: f64) -> LayerNorm {
        check_eps("LayerNorm", eps);
        self.eps = eps;
        self
    }

    /// Normalizes `x: [.., *normalized_shape]` (any leading axes, none for
    /// one example); the result has `x`'s shape and dtype.
    ///
    /// # Panics
    /// If `x`'s trailing axes are not `normalized_shape`, or `x` is not a
    /// float tensor.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let k = self.normalized_shape.len();
        let s = x.shape();
        if s.rank() < k || s[s.rank() - k..] != self.normalized_shape[..] {
            Error::shape(
                "LayerNorm",
                format!("the input's trailing axes must be normalized_shape {:?}", self.normalized_shape),
                &[&s, &Shape::from(&self.normalized_shape)],
            )
            .raise();
        }
        let dt = compute_dtype("LayerNorm", x);
        let axes: Vec<isize> = (s.rank() - k..s.rank()).map(|a| a as isize).collect();
        let y = standardize(&x.cast(dt), &axes, self.eps);
        affine(y, self.weight.as_ref().map(|w| w.cast(dt)), self.bias.as_ref().map(|b| b.cast(dt))).cast(x.dtype())
    }
}

/// Group normalization (`torch.nn.GroupNorm`): the channels (axis 1) of
/// `x: [N, C, *]` are split into `num_groups` groups of `C / num_groups`
/// consecutive channels; each example is normalized over each group's
/// channels and spatial positions, then scaled and shifted per channel.
/// `num_groups = 1` is layer normalization over `[C, *]` with per-channel
/// affine; `num_groups = C` is instance normalization.
///
/// For one example under `vmap`, give it a batch axis of 1
/// (`x.unsqueeze(0)`), as PyTorch requires `[N, C, *]`.
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct GroupNorm {
    /// The per-channel scale `[C]`.
    pub weight: Option<Tensor>,
    /// The per-channel shift `[C]`.
    pub bias: Option<Tensor>,
    /// The number of groups (dividing the number of channels).
    #[tree(static)]
    pub num_groups: usize,
    /// The number of channels `C`.
    #[tree(static)]
    pub num_channels: usize,
    /// Added to the variance (default 1e-5).
    #[tree(static)]
    pub eps: f64,
}

impl GroupNorm {
    /// PyTorch's default: affine with weight 1 and bias 0, `eps = 1e-5`.
    ///
    /// # Panics
    /// If `num_groups` is zero or does not divide `num_channels`.
    #[track_caller]
    pub fn new(num_groups: usize, num_channels: usize, dtype: DType) -> GroupNorm {
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            Error::invalid(
                "GroupNorm",
                format!("num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"),
            )
            .raise();
        }
        GroupNorm {
            weight: Some(Tensor::ones([num_channels], dtype)),
            bias: Some(Tensor::zeros([num_channels], dtype)),
            num_groups,
            num_channels,
            eps: 1e-5,
        }
    }

    /// Without weight and bias (`affine=False`).
    pub fn without_affine(mut self) -> GroupNorm {
        self.weight = None;
        self.bias = None;
        self
    }

    /// The same layer with another `eps`.
    ///
    /// # Panics
    /// If `eps` is negative or not finite.
    #[track_caller]
    pub fn with_eps(mut self, eps: f64) -> GroupNorm {
        check_eps("GroupNorm", eps);
        self.eps = eps;
        self
    }

    /// Normalizes `x: [N, C, *]`; the result has `x`'s shape and dtype.
    ///
    /// # Panics
    /// If `x` has fewer than two axes or `C` channels is not axis 1, or `x`
    /// is not a float tensor.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let s = x.shape();
        if s.rank() < 2 || s[1] != self.num_channels {
            Error::shape(
                "GroupNorm",
                format!("the input must be [N, C, *] with C = num_channels = {}", self.num_channels),
                &[&s],
            )
            .raise();
        }
        let dt = compute_dtype("GroupNorm", x);
        let grouped = x.cast(dt).reshape(&[s[0] as isize, self.num_groups as isize, -1]);
        let y = standardize(&grouped, &[-1], self.eps).reshape_to(s.clone());
        let r = s.rank();
        let w = self.weight.as_ref().map(|w| per_channel(w, r, dt));
        let b = self.bias.as_ref().map(|b| per_channel(b, r, dt));
        affine(y, w, b).cast(x.dtype())
    }
}

/// The running statistics of a [`BatchNorm`] layer, a pytree (`.mean`,
/// `.var`), passed to [`batch_norm`] and returned updated by it.
#[derive(Clone, Debug)]
pub struct BatchNormStats {
    /// The running mean per channel `[C]` (starts at 0).
    pub mean: Tensor,
    /// The running (unbiased) variance per channel `[C]` (starts at 1).
    pub var: Tensor,
}
crate::impl_tree!(BatchNormStats { mean, var });

impl BatchNormStats {
    /// PyTorch's initial statistics: mean 0, variance 1.
    pub fn new(num_features: usize, dtype: DType) -> BatchNormStats {
        BatchNormStats { mean: Tensor::zeros([num_features], dtype), var: Tensor::ones([num_features], dtype) }
    }
}

/// Batch normalization (`torch.nn.BatchNorm1d/2d/3d`) over the channel
/// axis 1 of `[N, C]` or `[N, C, *]`, as a functional layer: the affine
/// parameters are the pytree (`.weight`, `.bias`), the running statistics
/// a separate [`BatchNormStats`] passed to [`BatchNorm::forward`] (or
/// [`batch_norm`]) and returned updated.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::{BatchNorm, BatchNormStats};
///
/// let bn = BatchNorm::new(3, DType::F32);
/// let stats = BatchNormStats::new(3, DType::F32);
/// let x = Key::new(0).normal([8, 3, 4, 4], DType::F32);
/// let (y, stats) = bn.forward(&x, &stats, true); // train: batch statistics
/// assert_eq!(y.shape().dims(), &[8, 3, 4, 4]);
/// let (y_eval, same) = bn.forward(&x, &stats, false); // eval: running statistics
/// assert_eq!(same.mean.to_vec::<f32>(), stats.mean.to_vec::<f32>());
/// # let _ = y_eval;
/// ```
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct BatchNorm {
    /// The per-channel scale `[C]` (starts at 1).
    pub weight: Option<Tensor>,
    /// The per-channel shift `[C]` (starts at 0).
    pub bias: Option<Tensor>,
    /// The number of channels `C`.
    #[tree(static)]
    pub num_features: usize,
    /// Added to the variance (default 1e-5).
    #[tree(static)]
    pub eps: f64,
    /// The weight of the new batch in the running statistics (default 0.1).
    #[tree(static)]
    pub momentum: f64,
    /// Statistics across a named mapped axis (flax's `BatchNorm(axis_name=...)`):
    /// `forward` then takes one example `[C, *]` inside `vmap` with that
    /// `axis_name` and normalizes with the statistics of every example
    /// along it (see [`batch_norm_across`]). `None` (the default): `[N, C, *]`.
    #[tree(static)]
    pub axis_name: Option<String>,
}

impl BatchNorm {
    /// PyTorch's default: affine with weight 1 and bias 0, `eps = 1e-5`,
    /// `momentum = 0.1`.
    pub fn new(num_features: usize, dtype: DType) -> BatchNorm {
        BatchNorm {
            weight: Some(Tensor::ones([num_features], dtype)),
            bias: Some(Tensor::zeros([num_features], dtype)),
            num_features,
            eps: 1e-5,
            momentum: 0.1,
            axis_name: None,
        }
    }

    /// Statistics across the examples of the mapped axis `name` (see
    /// [`BatchNorm::axis_name`](BatchNorm#structfield.axis_name)): per-example
    /// code (`vmap(f, axis_name = name)`, per-sample gradients) gets batch
    /// statistics over the whole batch, as flax's `axis_name`.
    pub fn across(mut self, name: impl Into<String>) -> BatchNorm {
        self.axis_name = Some(name.into());
        self
    }

    /// Without weight and bias (`affine=False`).
    pub fn without_affine(mut self) -> BatchNorm {
        self.weight = None;
        self.bias = None;
        self
    }

    /// The initial running statistics for this layer, in `dtype`.
    pub fn init_stats(&self, dtype: DType) -> BatchNormStats {
        BatchNormStats::new(self.num_features, dtype)
    }

    /// [`batch_norm`] with this layer's parameters, `momentum` and `eps`.
    ///
    /// # Panics
    /// As [`batch_norm`].
    #[track_caller]
    pub fn forward(&self, x: &Tensor, stats: &BatchNormStats, train: bool) -> (Tensor, BatchNormStats) {
        let (w, b) = (self.weight.as_ref(), self.bias.as_ref());
        match &self.axis_name {
            None => batch_norm(x, w, b, stats, train, self.momentum, self.eps),
            Some(name) => batch_norm_across(x, w, b, stats, train, self.momentum, self.eps, name),
        }
    }
}

/// Checks what both forms of batch normalization take alike: statistics
/// `[C]`, weight and bias `[C]`, momentum in `[0, 1]`, eps; returns `[C]`.
#[track_caller]
fn check_batch_norm_args(
    op: &str,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    stats: &BatchNormStats,
    momentum: f64,
    eps: f64,
) -> Shape {
    let c = stats.mean.shape();
    if c.rank() != 1 || stats.var.shape() != c {
        Error::shape(op, "the running mean and variance must both be [C]", &[&c, &stats.var.shape()]).raise();
    }
    for (name, p) in [("weight", weight), ("bias", bias)] {
        if let Some(p) = p {
            if p.shape() != c {
                Error::shape(op, format!("the {name} must be [C] like the running statistics"), &[&p.shape(), &c])
                    .raise();
            }
        }
    }
    if !(0.0..=1.0).contains(&momentum) {
        Error::invalid(op, format!("momentum must be in [0, 1], got {momentum}")).raise();
    }
    check_eps(op, eps);
    c
}

/// Training's normalization of the deviations `d = x - mean` by the
/// batch's biased variance `var` (both kept dims), and the running
/// statistics updated with the batch's mean and unbiased variance over `n`
/// values per channel (no gradient, as PyTorch's `no_grad` update).
fn normalize_and_update(
    d: Tensor,
    mean: &Tensor,
    var: &Tensor,
    n: usize,
    stats: &BatchNormStats,
    momentum: f64,
    eps: f64,
) -> (Tensor, BatchNormStats) {
    let y = d * (var + eps).rsqrt();
    let c = stats.mean.dim(0) as isize;
    let flat = |t: &Tensor| t.reshape(&[c]).stop_gradient();
    let unbiased = flat(var) * (n as f64 / (n - 1) as f64);
    let update = |old: &Tensor, new: Tensor| old * (1.0 - momentum) + new.cast(old.dtype()) * momentum;
    (y, BatchNormStats { mean: update(&stats.mean, flat(mean)), var: update(&stats.var, unbiased) })
}

/// Functional batch normalization (`torch.nn.functional.batch_norm`) of
/// `x: [N, C]` or `[N, C, *]` over every axis but the channel axis 1:
///
/// - `train = true`: normalizes with the batch's mean and biased variance
///   and returns the running statistics updated as
///   `running = (1 - momentum) * running + momentum * batch`, with the
///   *unbiased* batch variance (`n / (n - 1)` times the biased one, `n =
///   N * prod(*)`) for the running variance. The update carries no
///   gradient (PyTorch updates under `no_grad`).
/// - `train = false`: normalizes with the running statistics and returns
///   them unchanged.
///
/// `y = (x - mean) / sqrt(var + eps) * weight + bias`, in `x`'s dtype
/// (f16/bf16 computed in f32); the statistics keep their own dtype.
///
/// Under `vmap` over stacked parameters and statistics (an ensemble) each
/// model normalizes the shared batch with its own statistics. Per-sample
/// gradients (`vmap` over the examples) see batches of one, so use eval
/// mode there, as with PyTorch's `torch.func` (or [`GroupNorm`]).
///
/// # Panics
/// If `x` is not `[N, C, ..]` with `C` the statistics' length, a parameter
/// is not `[C]`, `momentum` is outside `[0, 1]`, or `train` is set with
/// only one value per channel (PyTorch's "Expected more than 1 value per
/// channel when training").
#[track_caller]
pub fn batch_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    stats: &BatchNormStats,
    train: bool,
    momentum: f64,
    eps: f64,
) -> (Tensor, BatchNormStats) {
    let op = "BatchNorm";
    let s = x.shape();
    let c = check_batch_norm_args(op, weight, bias, stats, momentum, eps);
    if s.rank() < 2 || s[1] != c[0] {
        Error::shape(
            op,
            format!(
                "the input must be [N, C] or [N, C, *] with C = {} features (the running statistics' length)",
                c[0]
            ),
            &[&s, &c],
        )
        .raise();
    }
    let dt = compute_dtype(op, x);
    let r = s.rank();
    let xc = x.cast(dt);
    let (y, new_stats) = if train {
        let n = s.numel() / c[0];
        if n <= 1 {
            Error::shape(op, "expected more than 1 value per channel when training", &[&s]).raise();
        }
        let axes: Vec<isize> = std::iter::once(0).chain(2..r as isize).collect();
        let mean = xc.mean_axes(&axes, true);
        let d = &xc - &mean;
        let var = (&d * &d).mean_axes(&axes, true);
        normalize_and_update(d, &mean, &var, n, stats, momentum, eps)
    } else {
        let mean = per_channel(&stats.mean, r, dt);
        let var = per_channel(&stats.var, r, dt);
        ((xc - mean) * (var + eps).rsqrt(), stats.clone())
    };
    let w = weight.map(|w| per_channel(w, r, dt));
    let b = bias.map(|b| per_channel(b, r, dt));
    (affine(y, w, b).cast(x.dtype()), new_stats)
}

/// [`batch_norm`] of one example `x: [C]` or `[C, *]` inside
/// `vmap(f, axis_name = axis_name)`, with the statistics of every example
/// along that named axis (flax's `BatchNorm(axis_name=...)`): in training
/// the mean is `pmean` over the axis of each example's mean over `*`, and
/// the (biased) variance likewise of the squared deviations from it, so
/// the result equals [`batch_norm`] of the stacked batch `[N, C, *]`, and
/// per-example gradients through it see the batch as the stacked
/// computation does (the gradients of the example's share of the summed
/// loss, JAX's convention for collectives). The running statistics come
/// out the same for every example (map them with `out_axes` `None`).
/// Evaluation uses the running statistics, as [`batch_norm`].
///
/// # Panics
/// As [`batch_norm`], or if `axis_name` is not bound by an enclosing map.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn batch_norm_across(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    stats: &BatchNormStats,
    train: bool,
    momentum: f64,
    eps: f64,
    axis_name: &str,
) -> (Tensor, BatchNormStats) {
    use crate::lax::{axis_size, pmean};
    use crate::OrRaise;
    let op = "BatchNorm";
    let s = x.shape();
    let c = check_batch_norm_args(op, weight, bias, stats, momentum, eps);
    if s.rank() < 1 || s[0] != c[0] {
        Error::shape(
            op,
            format!(
                "across the named axis '{axis_name}', the input is one example [C] or [C, *] with C = {} features",
                c[0]
            ),
            &[&s, &c],
        )
        .raise();
    }
    let dt = compute_dtype(op, x);
    let r = s.rank();
    let xc = x.cast(dt);
    let (y, new_stats) = if train {
        let n = s.numel() / c[0] * axis_size(axis_name).or_raise();
        if n <= 1 {
            Error::shape(op, "expected more than 1 value per channel when training", &[&s]).raise();
        }
        // each example's mean over `*` (itself for `[C]`), then across the axis
        let local: Vec<isize> = (1..r as isize).collect();
        let local_mean = |t: &Tensor| if local.is_empty() { t.clone() } else { t.mean_axes(&local, true) };
        let mean = pmean(&local_mean(&xc), axis_name).or_raise();
        let d = &xc - &mean;
        let var = pmean(&local_mean(&(&d * &d)), axis_name).or_raise();
        normalize_and_update(d, &mean, &var, n, stats, momentum, eps)
    } else {
        let mean = per_channel(&stats.mean, r + 1, dt);
        let var = per_channel(&stats.var, r + 1, dt);
        ((xc - mean) * (var + eps).rsqrt(), stats.clone())
    };
    let w = weight.map(|w| per_channel(w, r + 1, dt));
    let b = bias.map(|b| per_channel(b, r + 1, dt));
    (affine(y, w, b).cast(x.dtype()), new_stats)
}
