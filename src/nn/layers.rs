//! Layers whose parameters are plain pytree structs: [`Linear`] and
//! [`Mlp`], with initializers from random keys.

use crate::{impl_tree, DType, Error, Key, Leaves, Tensor, Tree};

/// A fully connected layer `y = x @ w + b`.
///
/// The parameters are a pytree (`w` then `b`), so `grad` of a loss with
/// respect to a `Linear` is a `Linear`, and [`stack`](super::stack) makes
/// an ensemble of them.
#[derive(Clone, Debug)]
pub struct Linear {
    /// Weights, `[d_in, d_out]`.
    pub w: Tensor,
    /// Bias, `[d_out]`.
    pub b: Tensor,
}
impl_tree!(Linear { w, b });

impl Linear {
    /// A layer with PyTorch's default initialization (`torch.nn.Linear`):
    /// weight and bias both U(-1/sqrt(d_in), 1/sqrt(d_in)) (the weight's
    /// `kaiming_uniform_(a=sqrt(5))`; see [`init`](super::init)). The
    /// weight is stored `[d_in, d_out]`, the transpose of PyTorch's.
    ///
    /// ```
    /// use xform::prelude::*;
    /// use xform::nn::Linear;
    ///
    /// let layer = Linear::init(&Key::new(0), 64, 32, DType::F32);
    /// assert_eq!(layer.w.shape().dims(), &[64, 32]);
    /// assert!(layer.w.abs().max().item::<f32>() <= 0.125); // 1 / sqrt(64)
    /// let std = layer.w.std_axes(&[0, 1], 0, false).item::<f32>();
    /// assert!((std - 0.125 / 3f32.sqrt()).abs() < 0.005); // a uniform's std: bound / sqrt(3)
    /// ```
    ///
    /// # Panics
    /// If `dtype` is not a float type.
    #[track_caller]
    pub fn init(key: &Key, d_in: usize, d_out: usize, dtype: DType) -> Linear {
        let k = key.split(2);
        let w = super::init::fan_in_uniform(&k[0], [d_in, d_out], d_in, dtype);
        let b = super::init::fan_in_uniform(&k[1], [d_out], d_in, dtype);
        Linear { w, b }
    }

    /// `x @ w + b` for one example `x: [d_in]` (giving `[d_out]`) or a
    /// batch `[.., d_in]` (giving `[.., d_out]`).
    ///
    /// ```
    /// use xform::prelude::*;
    /// use xform::nn::Linear;
    ///
    /// let l = Linear {
    ///     w: Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]),
    ///     b: Tensor::from_vec(vec![0.5f64, -0.5], [2]),
    /// };
    /// let y = l.forward(&Tensor::from_vec(vec![1.0f64, 1.0], [2]));
    /// assert_eq!(y.to_vec::<f64>(), vec![4.5, 5.5]);
    /// ```
    ///
    /// # Panics
    /// If the last axis of `x` is not `d_in`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.w) + &self.b
    }

    /// The input width (the second-to-last axis of `w`).
    pub fn d_in(&self) -> usize {
        self.w.dim(-2)
    }

    /// The output width (the last axis of `w`).
    pub fn d_out(&self) -> usize {
        self.w.dim(-1)
    }
}

/// The nonlinearity between the layers of an [`Mlp`].
///
/// It is a pytree without leaves (configuration, not parameters), so a
/// struct holding one still works with [`impl_tree!`](crate::impl_tree),
/// the transforms and [`stack`](super::stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Activation {
    /// `tanh(x)` (the default).
    #[default]
    Tanh,
    /// `max(x, 0)`.
    Relu,
    /// The exact Gaussian error linear unit `x * Phi(x)`.
    Gelu,
    /// No nonlinearity.
    Identity,
}

impl Activation {
    /// The activation applied elementwise to `x`.
    pub fn apply(&self, x: &Tensor) -> Tensor {
        match self {
            Activation::Tanh => x.tanh(),
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu(),
            Activation::Identity => x.clone(),
        }
    }
}

impl Tree for Activation {
    type Map<T> = ();
    fn flatten_into(&self, _: &mut Leaves) {}
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Self {
        *self
    }
    fn build_map<T>(&self, _: &mut dyn Iterator<Item = T>) -> Self::Map<T> {}
    fn leaf_paths(&self, _: &str, _: &mut Vec<String>) {}
    /// Itself: a jitted function traces again for another value.
    fn static_values<'a>(&'a self, out: &mut Vec<crate::tree::StaticValue<'a>>) {
        out.push(crate::tree::StaticValue::Eq(self));
    }
}

/// A multilayer perceptron: [`Linear`] layers with an [`Activation`]
/// between them and none after the last (it returns logits).
///
/// Its leaves are `.layers[0].w`, `.layers[0].b`, `.layers[1].w`, ...
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::{softmax_cross_entropy, Mlp};
///
/// let mlp = Mlp::init(&Key::new(0), &[64, 32, 10], DType::F32);
/// let x = Key::new(1).uniform([8, 64], DType::F32);
/// let y = Tensor::from_vec(vec![0i32, 1, 2, 3, 4, 5, 6, 7], [8]);
/// let loss = |p: &Mlp| softmax_cross_entropy(&p.forward(&x), &y);
/// let g: Mlp = grad(loss)(&mlp); // a gradient shaped like the model
/// assert_eq!(g.layers[1].w.shape().dims(), &[32, 10]);
/// ```
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct Mlp {
    /// The layers, first to last.
    pub layers: Vec<Linear>,
    /// The nonlinearity after every layer but the last (a static field:
    /// not a leaf, carried through transforms unchanged).
    #[tree(static)]
    pub activation: Activation,
}

impl Mlp {
    /// An MLP with layer widths `sizes` (`[d_in, hidden.., d_out]`), each
    /// layer initialized by [`Linear::init`] from its own key split from
    /// `key`, and tanh activations.
    ///
    /// # Panics
    /// If `sizes` has fewer than two entries or `dtype` is not a float type.
    #[track_caller]
    pub fn init(key: &Key, sizes: &[usize], dtype: DType) -> Mlp {
        if sizes.len() < 2 {
            Error::invalid("Mlp::init", format!("needs at least an input and an output size, got {sizes:?}")).raise();
        }
        let keys = key.split(sizes.len() - 1);
        let layers = sizes.windows(2).zip(&keys).map(|(io, k)| Linear::init(k, io[0], io[1], dtype)).collect();
        Mlp { layers, activation: Activation::Tanh }
    }

    /// The same model with another activation.
    pub fn with_activation(mut self, activation: Activation) -> Mlp {
        self.activation = activation;
        self
    }

    /// The logits for one example `[d_in]` or a batch `[.., d_in]`.
    ///
    /// # Panics
    /// If the last axis of `x` is not the input width.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let n = self.layers.len();
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(&h);
            if i + 1 < n {
                h = self.activation.apply(&h);
            }
        }
        h
    }

    /// The layer widths `[d_in, hidden.., d_out]`.
    pub fn sizes(&self) -> Vec<usize> {
        let mut s: Vec<usize> = self.layers.first().map(|l| vec![l.d_in()]).unwrap_or_default();
        s.extend(self.layers.iter().map(|l| l.d_out()));
        s
    }
}
