//! Optimizers as pure functions over pytrees: `init` makes a state from the
//! parameters, `update` maps parameters, gradients and state to new
//! parameters and state. Nothing is mutated, and the states are pytrees
//! themselves, so a whole training step (gradient and update) can be
//! vmapped over an ensemble of models and their optimizer states.

use crate::tree;
use crate::{DType, Error, Leaves, Tensor, Tree};

/// Raises unless the parameters and gradients have the same structure and
/// leaf shapes; returns their leaves.
#[track_caller]
fn leaves2<T: Tree>(op: &str, params: &T, grads: &T) -> (Leaves, Leaves) {
    let (p, g) = (params.leaves(), grads.leaves());
    let paths = params.paths();
    if p.len() != g.len() || paths != grads.paths() {
        Error::invalid(
            op,
            format!(
                "the gradients' structure [{}] is not the parameters' [{}]",
                grads.paths().join(", "),
                paths.join(", ")
            ),
        )
        .raise();
    }
    for ((a, b), path) in p.iter().zip(&g).zip(&paths) {
        let (sa, sb) = (a.shape(), b.shape());
        if sa != sb {
            Error::shape(op, format!("the gradient of {path} has another shape than the parameter"), &[&sa, &sb])
                .raise();
        }
    }
    (p, g)
}

/// Stochastic gradient descent with optional (heavy-ball) momentum, as in
/// PyTorch: `v <- momentum * v + g`, `p <- p - lr * v` (with no momentum,
/// `p <- p - lr * g`).
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::Sgd;
///
/// let opt = Sgd { lr: 0.1, momentum: 0.9 };
/// let p = Tensor::from_vec(vec![1.0f64], [1]);
/// let g = Tensor::from_vec(vec![2.0f64], [1]);
/// let s = opt.init(&p);
/// let (p, s) = opt.update(&p, &g, &s); // v = 2, p = 1 - 0.2
/// let (p, _) = opt.update(&p, &g, &s); // v = 0.9 * 2 + 2 = 3.8, p = 0.8 - 0.38
/// assert!((p.to_vec::<f64>()[0] - 0.42).abs() < 1e-15);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// The learning rate.
    pub lr: f64,
    /// The momentum coefficient (0 for plain SGD).
    pub momentum: f64,
}

/// The state of [`Sgd`]: the velocity, present when momentum is used. It
/// is a pytree (with the velocity's leaves under `.velocity`).
#[derive(Clone, Debug)]
pub struct SgdState<T> {
    /// The running velocity, `None` for plain SGD.
    pub velocity: Option<T>,
}

impl<T: Tree> Tree for SgdState<T> {
    type Map<U> = Option<T::Map<U>>;
    fn flatten_into(&self, out: &mut Leaves) {
        self.velocity.flatten_into(out)
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        SgdState { velocity: self.velocity.rebuild(leaves) }
    }
    fn build_map<U>(&self, items: &mut dyn Iterator<Item = U>) -> Self::Map<U> {
        self.velocity.build_map(items)
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        self.velocity.leaf_paths(&format!("{prefix}.velocity"), out)
    }
    fn static_values<'a>(&'a self, out: &mut Vec<tree::StaticValue<'a>>) {
        self.velocity.static_values(out)
    }
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Sgd {
        Sgd { lr, momentum: 0.0 }
    }

    /// The initial state: a zero velocity if momentum is used.
    pub fn init<T: Tree>(&self, params: &T) -> SgdState<T> {
        SgdState { velocity: (self.momentum != 0.0).then(|| tree::zeros_like(params)) }
    }

    /// One step: the new parameters and state.
    ///
    /// # Panics
    /// If the gradients' structure or shapes differ from the parameters'.
    #[track_caller]
    pub fn update<T: Tree>(&self, params: &T, grads: &T, state: &SgdState<T>) -> (T, SgdState<T>) {
        let (p, g) = leaves2("Sgd::update", params, grads);
        if self.momentum == 0.0 {
            let new: Vec<Tensor> = p.iter().zip(&g).map(|(p, g)| p - &(g * self.lr)).collect();
            return (params.with_leaves(new), SgdState { velocity: None });
        }
        let v: Leaves = match &state.velocity {
            Some(v) => {
                let (_, vl) = leaves2("Sgd::update", params, v);
                vl.iter().zip(&g).map(|(v, g)| v * self.momentum + g).collect()
            }
            None => g.clone(),
        };
        let new: Vec<Tensor> = p.iter().zip(&v).map(|(p, v)| p - &(v * self.lr)).collect();
        (params.with_leaves(new), SgdState { velocity: Some(params.with_leaves(v)) })
    }
}

/// Adam (Kingma & Ba, 2015), with bias correction as in the paper, PyTorch
/// and optax:
///
/// ```text
/// t <- t + 1
/// m <- b1 m + (1 - b1) g
/// v <- b2 v + (1 - b2) g^2
/// p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
/// ```
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::{Adam, Mlp};
///
/// let params = Mlp::init(&Key::new(0), &[4, 8, 3], DType::F32);
/// let x = Key::new(1).normal([16, 4], DType::F32);
/// let y = Key::new(2).randint([16], 0, 3, DType::I32);
/// let loss = |p: &Mlp| xform::nn::softmax_cross_entropy(&p.forward(&x), &y);
///
/// let adam = Adam::new(0.05);
/// let (mut p, mut state) = (params.clone(), adam.init(&params));
/// for _ in 0..100 {
///     let g = grad(loss)(&p);
///     (p, state) = adam.update(&p, &g, &state);
/// }
/// // 16 random points are memorized: the loss falls from about 1.1.
/// assert!(loss(&p).item::<f32>() < 0.3 * loss(&params).item::<f32>());
/// assert_eq!(state.step.item::<i32>(), 100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    /// The learning rate.
    pub lr: f64,
    /// Decay of the first moment (0.9).
    pub b1: f64,
    /// Decay of the second moment (0.999).
    pub b2: f64,
    /// Added to the root of the second moment (1e-8).
    pub eps: f64,
}

/// The state of [`Adam`]: the step count and the two moment trees. It is a
/// pytree with leaves `.step`, `.m..` and `.v..`, so states stack and vmap
/// like parameters.
#[derive(Clone, Debug)]
pub struct AdamState<T> {
    /// The number of updates done, an i32 scalar.
    pub step: Tensor,
    /// The first-moment (mean) estimate.
    pub m: T,
    /// The second-moment (uncentered variance) estimate.
    pub v: T,
}

impl<T: Tree> Tree for AdamState<T> {
    type Map<U> = (U, T::Map<U>, T::Map<U>);
    fn flatten_into(&self, out: &mut Leaves) {
        out.push(self.step.clone());
        self.m.flatten_into(out);
        self.v.flatten_into(out);
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Tensor>) -> Self {
        let step = leaves.next().expect("pytree rebuilt from too few leaves");
        let m = self.m.rebuild(leaves);
        let v = self.v.rebuild(leaves);
        AdamState { step, m, v }
    }
    fn build_map<U>(&self, items: &mut dyn Iterator<Item = U>) -> Self::Map<U> {
        let s = items.next().expect("too few items");
        let m = self.m.build_map(items);
        let v = self.v.build_map(items);
        (s, m, v)
    }
    fn leaf_paths(&self, prefix: &str, out: &mut Vec<String>) {
        out.push(format!("{prefix}.step"));
        self.m.leaf_paths(&format!("{prefix}.m"), out);
        self.v.leaf_paths(&format!("{prefix}.v"), out);
    }
    fn static_values<'a>(&'a self, out: &mut Vec<tree::StaticValue<'a>>) {
        self.m.static_values(out);
        self.v.static_values(out);
    }
}

impl Adam {
    /// Adam with learning rate `lr` and the usual b1 = 0.9, b2 = 0.999,
    /// eps = 1e-8.
    pub fn new(lr: f64) -> Adam {
        Adam { lr, b1: 0.9, b2: 0.999, eps: 1e-8 }
    }

    /// The initial state: step 0 and zero moments.
    pub fn init<T: Tree>(&self, params: &T) -> AdamState<T> {
        AdamState { step: Tensor::scalar(0i32), m: tree::zeros_like(params), v: tree::zeros_like(params) }
    }

    /// One step: the new parameters and state.
    ///
    /// # Panics
    /// If the gradients' or the state's structure or shapes differ from the
    /// parameters'.
    #[track_caller]
    pub fn update<T: Tree>(&self, params: &T, grads: &T, state: &AdamState<T>) -> (T, AdamState<T>) {
        let (p, g) = leaves2("Adam::update", params, grads);
        let (_, m) = leaves2("Adam::update", params, &state.m);
        let (_, v) = leaves2("Adam::update", params, &state.v);
        let step = &state.step + 1;
        // Bias corrections 1 - b^t, as tensors so that the step count may be
        // batched (an ensemble's stacked states).
        let t = step.cast(DType::F64);
        let bc1 = 1.0 - Tensor::scalar(self.b1).pow(&t);
        let bc2 = 1.0 - Tensor::scalar(self.b2).pow(&t);
        let lr_t = self.lr / &bc1; // lr / (1 - b1^t)
        let inv_bc2 = 1.0 / &bc2;
        let (mut new_p, mut new_m, mut new_v) = (Vec::new(), Vec::new(), Vec::new());
        let mut cast_cache: Vec<(DType, Tensor, Tensor)> = Vec::new();
        for (((p, g), m), v) in p.iter().zip(&g).zip(&m).zip(&v) {
            let d = p.dtype();
            let (lr_d, ibc2_d) = match cast_cache.iter().find(|c| c.0 == d) {
                Some(c) => (c.1.clone(), c.2.clone()),
                None => {
                    let c = (d, lr_t.cast(d), inv_bc2.cast(d));
                    cast_cache.push(c.clone());
                    (c.1, c.2)
                }
            };
            let m2 = m * self.b1 + &(g * (1.0 - self.b1));
            let v2 = v * self.b2 + &((g * g) * (1.0 - self.b2));
            let denom = (&v2 * &ibc2_d).sqrt() + self.eps;
            new_p.push(p - &(&m2 * &lr_d / denom));
            new_m.push(m2);
            new_v.push(v2);
        }
        let state = AdamState { step, m: state.m.with_leaves(new_m), v: state.v.with_leaves(new_v) };
        (params.with_leaves(new_p), state)
    }
}
