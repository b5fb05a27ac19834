//! Losses and metrics. All are compositions of tensor operations, so they
//! can be differentiated (to any order) and vmapped.

use crate::{DType, Error, ErrorKind, Tensor};

/// Checks `labels` against `logits` (`[.., C]` and integer `[..]`).
#[track_caller]
fn check_labels(op: &str, logits: &Tensor, labels: &Tensor) {
    if !labels.dtype().is_int() {
        Error::dtype(op, "labels must be integer class indices", &[labels.dtype()]).raise();
    }
    let (sl, sy) = (logits.shape(), labels.shape());
    if sl.rank() == 0 || sl[..sl.rank() - 1] != sy[..] {
        Error::shape(
            op,
            "logits must be [.., classes] and labels [..] (the logits' shape without its last axis)",
            &[&sl, &sy],
        )
        .raise();
    }
}

/// The softmax cross-entropy of each example: `-log_softmax(logits)[label]`,
/// with `logits: [.., C]` and integer `labels: [..]` in `[0, C)`; the
/// result has the labels' shape.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::softmax_cross_entropy_per_example;
///
/// let logits = Tensor::from_vec(vec![0.0f64, 0.0, 2.0, 0.0], [2, 2]);
/// let labels = Tensor::from_vec(vec![1i32, 0], [2]);
/// let l = softmax_cross_entropy_per_example(&logits, &labels);
/// let want = [2f64.ln(), (1.0 + (-2f64).exp()).ln()];
/// assert!(l.to_vec::<f64>().iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-15));
/// ```
///
/// # Panics
/// If the labels are not integers, their shape is not the logits' without
/// the last axis, or a concrete label is out of range.
///
/// A label outside `[0, C)` is an [`ErrorKind::IndexOutOfRange`] error
/// when the labels are concrete (also inside a transform of the logits).
/// Traced labels (`vmap` over the labels) cannot be read, so there an
/// out-of-range label gives a NaN loss for its example (and a zero
/// gradient), never the loss of another class.
#[track_caller]
pub fn softmax_cross_entropy_per_example(logits: &Tensor, labels: &Tensor) -> Tensor {
    let op = "softmax_cross_entropy";
    check_labels(op, logits, labels);
    let classes = logits.shape()[logits.rank() - 1];
    let lsm = logits.log_softmax(-1);
    if !labels.is_tracer() {
        let bad = labels.to_vec_f64().into_iter().find(|&l| l < 0.0 || l >= classes as f64);
        if let Some(l) = bad {
            Error::new(op, ErrorKind::IndexOutOfRange { index: l as i64, size: classes }).raise();
        }
        return -lsm.take_along_axis(&labels.unsqueeze(-1), -1).squeeze(-1);
    }
    let valid = labels.ge_scalar(0).logical_and(&labels.lt_scalar(classes as i64));
    let safe = Tensor::where_(&valid, labels, &labels.zeros_like());
    let loss = -lsm.take_along_axis(&safe.unsqueeze(-1), -1).squeeze(-1);
    Tensor::where_(&valid, &loss, &loss.full_like(f64::NAN))
}

/// The mean softmax cross-entropy over the examples (a scalar): logits
/// `[B, C]` with labels `[B]`, or one example's logits `[C]` with a scalar
/// label. See [`softmax_cross_entropy_per_example`].
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::softmax_cross_entropy;
///
/// let logits = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
/// let loss = softmax_cross_entropy(&logits, &Tensor::scalar(2i32));
/// let want = (1f32.exp() + 2f32.exp() + 3f32.exp()).ln() - 3.0;
/// assert!((loss.item::<f32>() - want).abs() < 1e-6);
/// // Its gradient with respect to the logits is softmax - one_hot:
/// let g = grad(|z: &Tensor| softmax_cross_entropy(z, &Tensor::scalar(2i32)))(&logits);
/// let p = logits.softmax(0).to_vec::<f32>();
/// assert!((g.to_vec::<f32>()[2] - (p[2] - 1.0)).abs() < 1e-6);
/// ```
///
/// # Panics
/// As [`softmax_cross_entropy_per_example`].
#[track_caller]
pub fn softmax_cross_entropy(logits: &Tensor, labels: &Tensor) -> Tensor {
    softmax_cross_entropy_per_example(logits, labels).mean()
}

/// The mean squared error `mean((pred - target)^2)`, a scalar.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::mse;
///
/// let p = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
/// let t = Tensor::from_vec(vec![1.0f64, 0.0, 0.0], [3]);
/// assert_eq!(mse(&p, &t).item::<f64>(), 13.0 / 3.0);
/// ```
///
/// # Panics
/// If the shapes differ (broadcasting `[B, 1]` against `[B]` is a classic
/// silent bug, so it is refused).
#[track_caller]
pub fn mse(pred: &Tensor, target: &Tensor) -> Tensor {
    let (sp, st) = (pred.shape(), target.shape());
    if sp != st {
        Error::shape("mse", "prediction and target must have the same shape", &[&sp, &st]).raise();
    }
    let d = pred - target;
    (&d * &d).mean()
}

/// The fraction of examples whose largest logit is at the label, as an f32
/// scalar tensor (`.item_f64()` reads it). It works under `vmap`, for
/// example over the models of an ensemble.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::accuracy;
///
/// let logits = Tensor::from_vec(vec![0.9f32, 0.1, 0.2, 0.8, 0.6, 0.4], [3, 2]);
/// let labels = Tensor::from_vec(vec![0i32, 1, 1], [3]);
/// assert!((accuracy(&logits, &labels).item_f64() - 2.0 / 3.0).abs() < 1e-6);
/// ```
///
/// # Panics
/// If the shapes do not fit (as for [`softmax_cross_entropy`]).
#[track_caller]
pub fn accuracy(logits: &Tensor, labels: &Tensor) -> Tensor {
    check_labels("accuracy", logits, labels);
    logits.argmax(-1).eq(&labels.cast(DType::I64)).cast(DType::F32).mean()
}
