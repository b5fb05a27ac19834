//! Shape manipulation. The view methods (reshape, flatten, transpose,
//! permute, t, moveaxis, broadcast_to, squeeze, unsqueeze, slice_axis,
//! narrow, select, index, flip, slice) share storage with `self` when it is
//! concrete, as in PyTorch: an in-place write through one is seen by the
//! other. `concat`, `stack`, `pad` and `split` copy.

use super::{norm_axes, norm_axis};
use crate::error::{Error, OrRaise, Result};
use crate::lax;
use crate::mutation::make_view;
use crate::prim::{Amounts, Axes, ElementwiseOp, Prim, ShapeOp};
use crate::tensor::Tensor;
use std::borrow::Borrow;
use xform_kernels::Shape;

/// Resolves a shape with at most one -1 against `numel` elements.
pub fn infer_shape(op: &str, dims: &[isize], numel: usize, from: &Shape) -> Result<Shape> {
    let mut out = Vec::with_capacity(dims.len());
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in dims.iter().enumerate() {
        if d == -1 {
            if infer.is_some() {
                return Err(Error::invalid(op, "at most one dimension can be -1"));
            }
            infer = Some(i);
            out.push(1);
        } else if d < 0 {
            return Err(Error::invalid(op, format!("invalid dimension {d}")));
        } else {
            // A product past usize::MAX cannot match numel: refused below.
            known = known.saturating_mul(d as usize);
            out.push(d as usize);
        }
    }
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::shape(op, format!("cannot infer the -1 in {dims:?}"), &[from]));
        }
        out[i] = numel / known;
    }
    let s = Shape::from(out);
    if s.numel() != numel {
        return Err(Error::shape(op, format!("cannot reshape {numel} elements to {s}"), &[from, &s]));
    }
    Ok(s)
}

impl Tensor {
    /// The size of one axis (negative counts from the end).
    ///
    /// # Panics
    /// If the axis is out of range.
    #[track_caller]
    pub fn dim(&self, axis: isize) -> usize {
        self.with_shape(|s| norm_axis("dim", axis, s.rank()).map(|a| s[a])).unwrap_or_else(|e| e.raise())
    }

    /// The same elements in a new shape (one entry may be -1). A view when
    /// the strides allow, otherwise a copy (PyTorch's `reshape`).
    #[track_caller]
    pub fn reshape(&self, dims: &[isize]) -> Tensor {
        self.try_reshape(dims).or_raise()
    }

    /// [`Tensor::reshape`] returning an error instead of panicking.
    pub fn try_reshape(&self, dims: &[isize]) -> Result<Tensor> {
        let from = self.shape();
        let s = infer_shape("reshape", dims, from.numel(), &from)?;
        if s == from {
            return Ok(self.clone());
        }
        make_view(self, &[Prim::Shape(ShapeOp::Reshape { shape: s })])
    }

    /// Reshape to an exact shape.
    #[track_caller]
    pub fn reshape_to(&self, shape: impl Into<Shape>) -> Tensor {
        let s = shape.into();
        let d: Vec<isize> = s.iter().map(|&x| x as isize).collect();
        self.reshape(&d)
    }

    /// All elements as one axis.
    pub fn flatten(&self) -> Tensor {
        self.reshape(&[-1])
    }

    /// Axes `a` and `b` swapped (a view).
    #[track_caller]
    pub fn transpose(&self, a: isize, b: isize) -> Tensor {
        let r = self.rank();
        let (a, b) = (norm_axis("transpose", a, r).or_raise(), norm_axis("transpose", b, r).or_raise());
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Axes permuted: axis `i` of the result is axis `perm[i]` (a view).
    #[track_caller]
    pub fn permute(&self, perm: &[usize]) -> Tensor {
        if perm.iter().enumerate().all(|(i, &p)| i == p) && perm.len() == self.rank() {
            return self.clone();
        }
        make_view(self, &[Prim::Shape(ShapeOp::Transpose { perm: perm.into() })]).or_raise()
    }

    /// The last two axes swapped (a matrix transpose); a vector is returned
    /// unchanged.
    pub fn t(&self) -> Tensor {
        if self.rank() < 2 {
            return self.clone();
        }
        self.transpose(-2, -1)
    }

    /// Axis `from` moved to position `to` (a view).
    #[track_caller]
    pub fn moveaxis(&self, from: isize, to: isize) -> Tensor {
        let r = self.rank();
        let (f, t) = (norm_axis("moveaxis", from, r).or_raise(), norm_axis("moveaxis", to, r).or_raise());
        let mut perm: Vec<usize> = (0..r).filter(|&d| d != f).collect();
        perm.insert(t, f);
        self.permute(&perm)
    }

    /// Numpy-style broadcast to `shape` (a stride-0 view, never a copy).
    #[track_caller]
    pub fn broadcast_to(&self, shape: impl Into<Shape>) -> Tensor {
        self.try_broadcast_to(shape).or_raise()
    }

    /// [`Tensor::broadcast_to`] returning an error instead of panicking.
    pub fn try_broadcast_to(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let own = self.shape();
        if own == shape {
            return Ok(self.clone());
        }
        let b = super::broadcast_shapes("broadcast_to", &own, &shape)?;
        if b != shape {
            return Err(Error::shape("broadcast_to", "cannot broadcast to this shape", &[&own, &shape]));
        }
        let dims: Axes = (shape.rank() - own.rank()..shape.rank()).collect();
        make_view(self, &[Prim::Shape(ShapeOp::BroadcastInDim { shape, dims })]).map_err(|e| e.named("broadcast_to"))
    }

    /// Removes axis `axis`, which must have size 1 (a view).
    #[track_caller]
    pub fn squeeze(&self, axis: isize) -> Tensor {
        let mut s = self.shape();
        let a = norm_axis("squeeze", axis, s.rank()).or_raise();
        if s[a] != 1 {
            Error::shape("squeeze", format!("axis {axis} has size {}, not 1", s[a]), &[&s]).raise();
        }
        s.0.remove(a);
        make_view(self, &[Prim::Shape(ShapeOp::Reshape { shape: s })]).or_raise()
    }

    /// Inserts a unit axis at `axis` (which may be `rank`; negative counts
    /// from the end of the result) (a view).
    #[track_caller]
    pub fn unsqueeze(&self, axis: isize) -> Tensor {
        let mut s = self.shape();
        let a = norm_axis("unsqueeze", axis, s.rank() + 1).or_raise();
        s.0.insert(a, 1);
        make_view(self, &[Prim::Shape(ShapeOp::Reshape { shape: s })]).or_raise()
    }

    /// `start..end` with `step` along `axis` (negative bounds count from
    /// the end, bounds clip like Python slices) (a view).
    #[track_caller]
    pub fn slice_axis(&self, axis: isize, start: isize, end: isize, step: usize) -> Tensor {
        self.try_slice_axis(axis, start, end, step).or_raise()
    }

    /// [`Tensor::slice_axis`] returning an error instead of panicking.
    pub fn try_slice_axis(&self, axis: isize, start: isize, end: isize, step: usize) -> Result<Tensor> {
        let shape = self.shape();
        let a = norm_axis("slice", axis, shape.rank())?;
        if step == 0 {
            return Err(Error::invalid("slice", "step must be at least 1"));
        }
        let n = shape[a] as isize;
        let clip = |v: isize| -> usize { (if v < 0 { v + n } else { v }).clamp(0, n) as usize };
        let (s, e) = (clip(start), clip(end).max(clip(start)));
        let mut st: Axes = smallvec::smallvec![0; shape.rank()];
        let mut lim: Axes = shape.iter().copied().collect();
        let mut stp: Axes = smallvec::smallvec![1; shape.rank()];
        st[a] = s;
        lim[a] = e;
        stp[a] = step;
        make_view(self, &[Prim::Shape(ShapeOp::Slice { start: st, limit: lim, strides: stp })])
    }

    /// `len` elements from `start` along `axis` (a view).
    #[track_caller]
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Tensor {
        let a = norm_axis("narrow", axis, self.rank()).or_raise();
        let n = self.shape()[a];
        if start.checked_add(len).is_none_or(|end| end > n) {
            Error::shape("narrow", format!("{start}+{len} exceeds axis {axis} of size {n}"), &[&self.shape()]).raise();
        }
        self.slice_axis(axis, start as isize, (start + len) as isize, 1)
    }

    /// Element `index` along `axis`, removing the axis (a view).
    #[track_caller]
    pub fn select(&self, axis: isize, index: isize) -> Tensor {
        self.try_select(axis, index).or_raise()
    }

    /// [`Tensor::select`] returning an error instead of panicking.
    pub fn try_select(&self, axis: isize, index: isize) -> Result<Tensor> {
        let shape = self.shape();
        let a = norm_axis("select", axis, shape.rank())?;
        let n = shape[a] as isize;
        let i = if index < 0 { index + n } else { index };
        if i < 0 || i >= n {
            return Err(Error::new(
                "select",
                crate::ErrorKind::IndexOutOfRange { index: index as i64, size: n as usize },
            ));
        }
        let mut st: Axes = smallvec::smallvec![0; shape.rank()];
        let mut lim: Axes = shape.iter().copied().collect();
        st[a] = i as usize;
        lim[a] = i as usize + 1;
        let out = shape.without_axis(a);
        make_view(
            self,
            &[
                Prim::Shape(ShapeOp::Slice { start: st, limit: lim, strides: smallvec::smallvec![1; shape.rank()] }),
                Prim::Shape(ShapeOp::Reshape { shape: out }),
            ],
        )
    }

    /// Element `i` along the first axis (a view): `x.index(0)` is `x[0]`.
    #[track_caller]
    pub fn index(&self, i: isize) -> Tensor {
        self.select(0, i)
    }

    /// The given axes reversed (a view).
    #[track_caller]
    pub fn flip(&self, axes: &[isize]) -> Tensor {
        let ax = norm_axes("flip", axes, self.rank()).or_raise();
        if ax.is_empty() {
            return self.clone();
        }
        make_view(self, &[Prim::Shape(ShapeOp::Rev { axes: ax.into_iter().collect() })]).or_raise()
    }

    /// Joined along `axis` (which may be negative), promoting to one
    /// dtype. Takes a slice of tensors or of references: `&[a, b]`,
    /// `&[&a, &b]`, `&vec_of_tensors`, `&vec_of_refs`. (A slice rather than
    /// `impl AsRef<[T]>`, so that `&[a, b]` does not trip clippy's
    /// `needless_borrows_for_generic_args`; an empty literal needs its
    /// type: `&[] as &[Tensor]`.)
    ///
    /// ```
    /// use xform_ops::Tensor;
    ///
    /// let (a, b) = (Tensor::ones([2], xform_ops::DType::F32), Tensor::zeros([1], xform_ops::DType::F32));
    /// assert_eq!(Tensor::concat(&[&a, &b], 0).to_vec::<f32>(), [1.0, 1.0, 0.0]);
    /// let owned: Vec<Tensor> = vec![b, a];
    /// assert_eq!(Tensor::concat(&owned, 0).to_vec::<f32>(), [0.0, 1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn concat<T: Borrow<Tensor>>(tensors: &[T], axis: isize) -> Tensor {
        Tensor::try_concat(tensors, axis).or_raise()
    }

    /// [`Tensor::concat`] returning an error instead of panicking.
    pub fn try_concat<T: Borrow<Tensor>>(tensors: &[T], axis: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::invalid("concat", "needs at least one tensor"))?.borrow();
        let a = norm_axis("concat", axis, first.rank())?;
        let d = tensors.iter().map(|t| t.borrow().dtype()).reduce(xform_kernels::DType::promote).expect("nonempty");
        let ts: Vec<Tensor> = tensors.iter().map(|t| lax::convert(t.borrow(), d)).collect::<Result<_>>()?;
        let out = lax::concatenate(&ts, a).map_err(|e| e.named("concat"))?;
        if ts.len() == 1 {
            lax::copy(&out)
        } else {
            Ok(out)
        }
    }

    /// Stacked along a new axis `axis`; takes the lists
    /// [`Tensor::concat`] takes.
    #[track_caller]
    pub fn stack<T: Borrow<Tensor>>(tensors: &[T], axis: isize) -> Tensor {
        Tensor::try_stack(tensors, axis).or_raise()
    }

    /// [`Tensor::stack`] returning an error instead of panicking.
    pub fn try_stack<T: Borrow<Tensor>>(tensors: &[T], axis: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::invalid("stack", "needs at least one tensor"))?.borrow();
        let a = norm_axis("stack", axis, first.rank() + 1)?;
        let shape = first.shape();
        if let Some(t) = tensors.iter().map(Borrow::borrow).find(|t: &&Tensor| t.shape() != shape) {
            return Err(Error::shape("stack", "all tensors must have one shape", &[&shape, &t.shape()]));
        }
        let ex: Vec<Tensor> = tensors.iter().map(|t| lax::expand_dims(t.borrow(), a)).collect::<Result<_>>()?;
        Tensor::try_concat(&ex, a as isize)
    }

    /// The slices along `axis`, as separate tensors (views).
    #[track_caller]
    pub fn unstack(&self, axis: isize) -> Vec<Tensor> {
        let a = norm_axis("unstack", axis, self.rank()).or_raise();
        (0..self.shape()[a] as isize).map(|i| self.select(axis, i)).collect()
    }

    /// Splits `axis` into pieces of the given sizes (views).
    #[track_caller]
    pub fn split(&self, axis: isize, sizes: &[usize]) -> Vec<Tensor> {
        let a = norm_axis("split", axis, self.rank()).or_raise();
        let n = self.shape()[a];
        if sizes.iter().try_fold(0usize, |t, &s| t.checked_add(s)) != Some(n) {
            Error::shape("split", format!("sizes {sizes:?} do not add up to {n}"), &[&self.shape()]).raise();
        }
        let mut at = 0;
        sizes
            .iter()
            .map(|&s| {
                let t = self.narrow(axis, at, s);
                at += s;
                t
            })
            .collect()
    }

    /// Pads each axis with `(before, after)` copies of `value` (negative
    /// amounts crop).
    #[track_caller]
    pub fn pad(&self, widths: &[(i64, i64)], value: f64) -> Tensor {
        if widths.len() != self.rank() {
            Error::shape(
                "pad",
                format!("needs one (before, after) pair per axis, got {}", widths.len()),
                &[&self.shape()],
            )
            .raise();
        }
        super::check_scalar_fits("pad", value, self.dtype()).or_raise();
        let v = lax::scalar(value, self.dtype(), self.device()).or_raise();
        let low: Amounts = widths.iter().map(|w| w.0).collect();
        let high: Amounts = widths.iter().map(|w| w.1).collect();
        lax::pad(self, &v, &low, &high, &vec![0; self.rank()]).or_raise()
    }

    /// A tensor that is `self` for the value and a constant for
    /// differentiation (JAX's `stop_gradient`): a value, not linked to
    /// `self` for writes under transforms (see [`Tensor::detach`]).
    pub fn stop_gradient(&self) -> Tensor {
        crate::interp::bind1(&Prim::Elementwise(ElementwiseOp::StopGradient), std::slice::from_ref(self)).or_raise()
    }

    /// [`Tensor::stop_gradient`] as PyTorch's `detach`: a view sharing
    /// `self`'s storage, so an in-place write through it changes `self`'s
    /// values (under a transform too, as eagerly), but not `self`'s
    /// derivative.
    pub fn detach(&self) -> Tensor {
        make_view(self, &[Prim::Elementwise(ElementwiseOp::StopGradient)]).or_raise()
    }
}
