//! Convolution layers: [`Conv1d`], [`Conv2d`], [`Conv3d`] (one generic
//! [`Conv`]) and [`ConvTranspose2d`], with PyTorch's parameter layouts and
//! default initialization, on `lax::conv_general_dilated`.

use super::init::fan_in_uniform;
use crate::lax::{self, ConvDims, ConvOptions, Padding};
use crate::{DType, Error, Key, Leaves, OrRaise, Tensor, Tree};

/// Hyperparameters of a convolution layer. A pytree without leaves:
/// transforms carry it through unmapped, and [`stack`](super::stack)
/// keeps one copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvConfig {
    /// Window strides per spatial axis (PyTorch's `stride`).
    pub stride: Vec<usize>,
    /// Padding: explicit `(low, high)` per spatial axis, or SAME / VALID
    /// (PyTorch's `padding`, whose `'same'` matches SAME at stride 1).
    pub padding: Padding,
    /// Kernel dilation per spatial axis (PyTorch's `dilation`).
    pub dilation: Vec<usize>,
    /// Feature groups (PyTorch's `groups`; `in_channels` for depthwise).
    pub groups: usize,
}

impl ConvConfig {
    /// Stride 1, no padding, no dilation, one group, for `n` spatial axes.
    pub fn new(n: usize) -> ConvConfig {
        ConvConfig { stride: vec![1; n], padding: Padding::Valid, dilation: vec![1; n], groups: 1 }
    }
}

impl Tree for ConvConfig {
    type Map<T> = ();
    fn flatten_into(&self, _: &mut Leaves) {}
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Self {
        self.clone()
    }
    fn build_map<T>(&self, _: &mut dyn Iterator<Item = T>) -> Self::Map<T> {}
    fn leaf_paths(&self, _: &str, _: &mut Vec<String>) {}
    /// Itself: a jitted function traces again for another value.
    fn static_values<'a>(&'a self, out: &mut Vec<crate::tree::StaticValue<'a>>) {
        out.push(crate::tree::StaticValue::Eq(self));
    }
}

/// Raises the error of a layer whose channels or kernel cannot make weights.
#[track_caller]
fn check_channels(name: &str, in_channels: usize, out_channels: usize, kernel: &[usize], groups: usize) {
    if groups == 0 || !in_channels.is_multiple_of(groups) || !out_channels.is_multiple_of(groups) {
        Error::invalid(
            name,
            format!("in_channels {in_channels} and out_channels {out_channels} must be divisible by groups {groups}"),
        )
        .raise();
    }
    if in_channels == 0 || out_channels == 0 || kernel.contains(&0) {
        Error::invalid(name, format!("sizes must be positive: {in_channels} -> {out_channels}, kernel {kernel:?}"))
            .raise();
    }
}

/// Weights of `shape` and a bias of `bias_len`, both uniform in
/// `±1/sqrt(fan_in)` (PyTorch's defaults), from two keys split from `key`.
fn draw(key: &Key, shape: Vec<usize>, bias_len: usize, fan_in: usize, dtype: DType) -> (Tensor, Tensor) {
    let [kw, kb] = <[Key; 2]>::try_from(key.split(2)).expect("two keys");
    (fan_in_uniform(&kw, shape, fan_in, dtype), fan_in_uniform(&kb, [bias_len], fan_in, dtype))
}

/// A convolution layer over `N` spatial axes, channels first: input
/// `[batch, in_channels, spatial..]` or one example `[in_channels,
/// spatial..]`, weights `[out_channels, in_channels / groups, kernel..]`
/// (PyTorch's `ConvNd` layouts), output `[batch, out_channels, spatial..]`.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::Conv2d;
///
/// let conv = Conv2d::init(&Key::new(0), 1, 4, [3, 3], DType::F32);
/// let x = Key::new(1).normal([2, 1, 8, 8], DType::F32);
/// assert_eq!(conv.forward(&x).shape().dims(), &[2, 4, 6, 6]);
/// // Per-example gradients: each leaf gains a leading axis of 2.
/// let g = vmap(|x: &Tensor| grad(|c: &Conv2d| c.forward(x).sum())(&conv))(&x);
/// assert_eq!(g.w.shape().dims(), &[2, 4, 1, 3, 3]);
/// ```
#[derive(Clone, Debug)]
pub struct Conv<const N: usize> {
    /// Weights `[out_channels, in_channels / groups, kernel..]`.
    pub w: Tensor,
    /// Bias `[out_channels]`, or none.
    pub b: Option<Tensor>,
    /// Strides, padding, dilation, groups.
    pub config: ConvConfig,
}

/// A convolution over one spatial axis: `[N, C, L]`.
pub type Conv1d = Conv<1>;
/// A convolution over two spatial axes: `[N, C, H, W]`.
pub type Conv2d = Conv<2>;
/// A convolution over three spatial axes: `[N, C, D, H, W]`.
pub type Conv3d = Conv<3>;

impl<const N: usize> Tree for Conv<N> {
    type Map<T> = std::collections::BTreeMap<String, T>;
    fn flatten_into(&self, out: &mut Leaves) {
        self.w.flatten_into(out);
        self.b.flatten_into(out);
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        Conv { w: self.w.rebuild(leaves), b: self.b.rebuild(leaves), config: self.config.clone() }
    }
    fn build_map<T>(&self, items: &mut dyn Iterator<Item = T>) -> Self::Map<T> {
        self.paths().into_iter().map(|p| (p, items.next().expect("too few items"))).collect()
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        self.w.leaf_paths(&format!("{prefix}.w"), out);
        self.b.leaf_paths(&format!("{prefix}.b"), out);
    }
    fn static_values<'a>(&'a self, out: &mut Vec<crate::tree::StaticValue<'a>>) {
        self.config.static_values(out);
    }
}

impl<const N: usize> Conv<N> {
    /// A layer with PyTorch's default initialization: weights and bias
    /// uniform in `±1/sqrt(fan_in)`, `fan_in = in_channels * prod(kernel)`;
    /// stride 1, no padding, one group. Change the stride, padding and
    /// dilation with the `with_*` methods; groups change the weights' shape,
    /// so they are chosen at initialization ([`Conv::init_grouped`]).
    ///
    /// # Panics
    /// If a size is zero or `dtype` is not a float type.
    #[track_caller]
    pub fn init(key: &Key, in_channels: usize, out_channels: usize, kernel: [usize; N], dtype: DType) -> Conv<N> {
        Self::init_grouped(key, in_channels, out_channels, kernel, 1, dtype)
    }

    /// [`Conv::init`] with `groups` feature groups (`in_channels` and
    /// `out_channels` must be divisible by it; `groups == in_channels` is a
    /// depthwise convolution).
    ///
    /// # Panics
    /// If a size is zero, the channels are not divisible by `groups`, or
    /// `dtype` is not a float type.
    #[track_caller]
    pub fn init_grouped(
        key: &Key,
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; N],
        groups: usize,
        dtype: DType,
    ) -> Conv<N> {
        check_channels(&format!("Conv{N}d::init"), in_channels, out_channels, &kernel, groups);
        let mut shape = vec![out_channels, in_channels / groups];
        shape.extend(kernel);
        let (w, b) = draw(key, shape, out_channels, in_channels / groups * kernel.iter().product::<usize>(), dtype);
        let b = Some(b);
        Conv { w, b, config: ConvConfig { groups, ..ConvConfig::new(N) } }
    }

    /// The same layer with window strides `stride`.
    pub fn with_stride(mut self, stride: [usize; N]) -> Conv<N> {
        self.config.stride = stride.to_vec();
        self
    }

    /// The same layer with `padding` zeros on both sides of each spatial
    /// axis (PyTorch's `padding=(p, ..)`).
    pub fn with_padding(mut self, padding: [usize; N]) -> Conv<N> {
        self.config.padding = Padding::symmetric(&padding);
        self
    }

    /// The same layer with SAME, VALID or explicit padding.
    pub fn with_padding_mode(mut self, padding: Padding) -> Conv<N> {
        self.config.padding = padding;
        self
    }

    /// The same layer with kernel dilation `dilation`.
    pub fn with_dilation(mut self, dilation: [usize; N]) -> Conv<N> {
        self.config.dilation = dilation.to_vec();
        self
    }

    /// The same layer without its bias (PyTorch's `bias=False`).
    pub fn without_bias(mut self) -> Conv<N> {
        self.b = None;
        self
    }

    /// The layer applied to `[batch, in_channels, spatial..]` or to one
    /// example `[in_channels, spatial..]`.
    ///
    /// # Panics
    /// On shapes the convolution refuses (the error names them).
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let c = &self.config;
        let opts = ConvOptions {
            strides: c.stride.clone(),
            padding: c.padding.clone(),
            rhs_dilation: c.dilation.clone(),
            feature_group_count: c.groups,
            dims: Some(ConvDims::channels_first(N)),
            ..ConvOptions::default()
        };
        conv_forward(x, &self.w, self.b.as_ref(), &opts, N, &format!("Conv{N}d")).or_raise()
    }
}

/// `x` convolved with `w` (channels first, PyTorch's layouts) plus the bias
/// broadcast over the spatial axes; a rank `n + 1` input is one example.
fn conv_forward(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    opts: &ConvOptions,
    n: usize,
    layer: &str,
) -> crate::Result<Tensor> {
    let unbatched = x.rank() == n + 1;
    if !unbatched && x.rank() != n + 2 {
        return Err(Error::shape(
            layer,
            format!("expects [batch, channels, {n} spatial axes] or [channels, {n} spatial axes]"),
            &[&x.shape(), &w.shape()],
        ));
    }
    let x = if unbatched { x.unsqueeze(0) } else { x.clone() };
    let mut y = lax::conv_general_dilated(&x, w, opts)?;
    if let Some(b) = b {
        let mut shape = vec![b.numel() as isize];
        shape.extend(std::iter::repeat_n(1, n));
        y = y.try_add(&b.reshape(&shape))?;
    }
    Ok(if unbatched { y.squeeze(0) } else { y })
}

/// A transposed convolution over two spatial axes (PyTorch's
/// `ConvTranspose2d`, the gradient of a `Conv2d` with respect to its
/// input): weights `[in_channels, out_channels / groups, kH, kW]`, output
/// size `(in - 1) * stride - 2 * padding + dilation * (k - 1) +
/// output_padding + 1` per axis. It runs as a convolution of the input
/// dilated by the stride with the flipped kernel.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::ConvTranspose2d;
///
/// let up = ConvTranspose2d::init(&Key::new(0), 4, 2, [2, 2], DType::F32).with_stride([2, 2]);
/// let x = Key::new(1).normal([1, 4, 5, 5], DType::F32);
/// assert_eq!(up.forward(&x).shape().dims(), &[1, 2, 10, 10]);
/// ```
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct ConvTranspose2d {
    /// Weights `[in_channels, out_channels / groups, kH, kW]`.
    pub w: Tensor,
    /// Bias `[out_channels]`, or none.
    pub b: Option<Tensor>,
    /// Strides, padding (explicit `(p, p)` pairs: PyTorch's `padding`),
    /// dilation, groups.
    #[tree(static)]
    pub config: ConvConfig,
    /// Extra rows and columns at the high end (PyTorch's `output_padding`).
    #[tree(static)]
    pub output_padding: [usize; 2],
}

impl ConvTranspose2d {
    /// A layer with PyTorch's default initialization (uniform in
    /// `±1/sqrt(fan_in)` with PyTorch's `fan_in = out_channels / groups *
    /// kH * kW` for this weight layout), stride 1, no padding.
    ///
    /// # Panics
    /// If a size is zero or `dtype` is not a float type.
    #[track_caller]
    pub fn init(
        key: &Key,
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; 2],
        dtype: DType,
    ) -> ConvTranspose2d {
        Self::init_grouped(key, in_channels, out_channels, kernel, 1, dtype)
    }

    /// [`ConvTranspose2d::init`] with `groups` groups.
    ///
    /// # Panics
    /// As [`Conv::init_grouped`].
    #[track_caller]
    pub fn init_grouped(
        key: &Key,
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; 2],
        groups: usize,
        dtype: DType,
    ) -> ConvTranspose2d {
        check_channels("ConvTranspose2d::init", in_channels, out_channels, &kernel, groups);
        let shape = vec![in_channels, out_channels / groups, kernel[0], kernel[1]];
        // PyTorch's fan_in for this layout is the weight's second axis times the kernel.
        let (w, b) = draw(key, shape, out_channels, out_channels / groups * kernel.iter().product::<usize>(), dtype);
        ConvTranspose2d { w, b: Some(b), config: ConvConfig { groups, ..ConvConfig::new(2) }, output_padding: [0, 0] }
    }

    /// The same layer with strides `stride`.
    pub fn with_stride(mut self, stride: [usize; 2]) -> ConvTranspose2d {
        self.config.stride = stride.to_vec();
        self
    }

    /// The same layer with PyTorch's `padding` (removed from both sides of
    /// the output).
    pub fn with_padding(mut self, padding: [usize; 2]) -> ConvTranspose2d {
        self.config.padding = Padding::symmetric(&padding);
        self
    }

    /// The same layer with PyTorch's `output_padding`.
    pub fn with_output_padding(mut self, output_padding: [usize; 2]) -> ConvTranspose2d {
        self.output_padding = output_padding;
        self
    }

    /// The same layer with kernel dilation.
    pub fn with_dilation(mut self, dilation: [usize; 2]) -> ConvTranspose2d {
        self.config.dilation = dilation.to_vec();
        self
    }

    /// The same layer without its bias.
    pub fn without_bias(mut self) -> ConvTranspose2d {
        self.b = None;
        self
    }

    /// The layer applied to `[batch, in_channels, H, W]` or `[in_channels, H, W]`.
    ///
    /// # Panics
    /// On shapes the convolution refuses, and on hyperparameters PyTorch
    /// refuses: a stride or dilation of zero, an `output_padding` not
    /// smaller than either the stride or the dilation on some axis.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.try_forward(x).or_raise()
    }

    /// PyTorch's checks of the hyperparameters (made when the layer runs,
    /// as PyTorch makes them, since the builders may come in any order).
    fn check_hyperparameters(&self) -> crate::Result<()> {
        let layer = "ConvTranspose2d";
        let c = &self.config;
        for (what, v) in [("stride", &c.stride), ("dilation", &c.dilation)] {
            if v.len() != 2 || v.contains(&0) {
                return Err(Error::invalid(layer, format!("{what} must be two positive sizes, got {v:?}")));
            }
        }
        for i in 0..2 {
            let (p, s, d) = (self.output_padding[i], c.stride[i], c.dilation[i]);
            if p >= s && p >= d {
                return Err(Error::invalid(
                    layer,
                    format!(
                        "output_padding must be smaller than either the stride or the dilation (as PyTorch \
                         requires), but axis {i} has output_padding {p}, stride {s} and dilation {d}"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn try_forward(&self, x: &Tensor) -> crate::Result<Tensor> {
        let layer = "ConvTranspose2d";
        let c = &self.config;
        let g = c.groups;
        let ws = self.w.shape();
        if ws.rank() != 4 || g == 0 || !ws[0].is_multiple_of(g) {
            return Err(Error::shape(layer, format!("weights must be [in, out / {g}, kH, kW]"), &[&ws]));
        }
        let (cin, og, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
        self.check_hyperparameters()?;
        // [in, out/g, k] -> [out, in/g, k], flipped: the forward kernel of the equivalent convolution.
        let w = self
            .w
            .reshape(&[g as isize, (cin / g) as isize, og as isize, kh as isize, kw as isize])
            .permute(&[0, 2, 1, 3, 4])
            .reshape(&[(g * og) as isize, (cin / g) as isize, kh as isize, kw as isize])
            .flip(&[2, 3]);
        // PyTorch's padding p removes p from both sides of the output: the
        // equivalent convolution pads the dilated input by dilation * (k - 1) - p.
        let pads: [i64; 2] = match &c.padding {
            Padding::Explicit(p) if p.len() == 2 && p.iter().all(|&(a, b)| a == b && a >= 0) => [p[0].0, p[1].0],
            Padding::Valid => [0, 0],
            other => {
                return Err(Error::invalid(layer, format!("padding must be symmetric and non-negative, got {other:?}")))
            }
        };
        let padding = (0..2)
            .map(|i| {
                let k = (c.dilation[i] * ([kh, kw][i] - 1)) as i64;
                (k - pads[i], k - pads[i] + self.output_padding[i] as i64)
            })
            .collect();
        let opts = ConvOptions {
            padding: Padding::Explicit(padding),
            lhs_dilation: c.stride.clone(),
            rhs_dilation: c.dilation.clone(),
            feature_group_count: g,
            ..ConvOptions::default()
        };
        conv_forward(x, &w, self.b.as_ref(), &opts, 2, layer)
    }
}
