//! Dropout with an explicit random key.

use crate::{Error, Key, Leaves, Shape, Tensor, Tree};

/// Inverted dropout (`torch.nn.functional.dropout`): in training, each
/// element of `x` is zeroed with probability `p` and the kept ones are
/// scaled by `1 / (1 - p)`, so the expectation is `x`; out of training it
/// is the identity. `p = 1` gives zeros (`x * 0`, as PyTorch), `p = 0` the
/// identity.
///
/// The mask is `key.bernoulli(1 - p)` over `x`'s shape, so one key gives
/// one mask: under `vmap` over examples with a shared key every example
/// gets the same mask (JAX's semantics); map over split keys as well
/// (`vmap` over `(x, Key::split_tensor(n))`) for independent masks.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::dropout;
///
/// let x = Tensor::ones([1000], DType::F32);
/// let y = dropout(&x, 0.25, &Key::new(0), true);
/// let kept = y.ne_scalar(0.0).cast(DType::F32).mean().item::<f32>();
/// assert!((kept - 0.75).abs() < 0.05);
/// assert!((y.max().item::<f32>() - 4.0 / 3.0).abs() < 1e-6);
/// assert_eq!(dropout(&x, 0.25, &Key::new(0), false).to_vec::<f32>(), x.to_vec::<f32>());
/// ```
///
/// # Panics
/// If `p` is outside `[0, 1]` or `x` is not a float tensor.
#[track_caller]
pub fn dropout(x: &Tensor, p: f64, key: &Key, train: bool) -> Tensor {
    if !(0.0..=1.0).contains(&p) {
        Error::invalid("Dropout", format!("the probability must be in [0, 1], got {p}")).raise();
    }
    if !x.dtype().is_float() {
        Error::dtype("Dropout", "needs a float input", &[x.dtype()]).raise();
    }
    if !train || p == 0.0 {
        return x.clone();
    }
    if p == 1.0 {
        return x * 0.0;
    }
    let keep = Tensor::full(Shape::scalar(), 1.0 - p, x.dtype()).to_device(x.device());
    // x * (mask / (1 - p)), as PyTorch (a NaN dropped stays NaN, as there).
    let noise = key.bernoulli(&keep, x.shape()).cast(x.dtype()) * (1.0 / (1.0 - p));
    x * &noise
}

/// The dropout layer: a probability, no parameters (a pytree without
/// leaves, so it can sit in a model struct). See [`dropout`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// The probability of zeroing an element.
    pub p: f64,
}

impl Dropout {
    /// A dropout layer with probability `p`.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    #[track_caller]
    pub fn new(p: f64) -> Dropout {
        if !(0.0..=1.0).contains(&p) {
            Error::invalid("Dropout", format!("the probability must be in [0, 1], got {p}")).raise();
        }
        Dropout { p }
    }

    /// [`dropout`] with this layer's probability.
    #[track_caller]
    pub fn forward(&self, x: &Tensor, key: &Key, train: bool) -> Tensor {
        dropout(x, self.p, key, train)
    }
}

impl Tree for Dropout {
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
