//! Indexing: numpy-style multi-axis slicing (`x.slice(s![1, 0..2, ..])`),
//! take, take_along_axis, one_hot, index_add, dynamic slices, and the
//! general gather / scatter_add.

use super::norm_axis;
use crate::error::{Error, ErrorKind, OrRaise, Result};
use crate::lax;
use crate::mutation::make_view;
use crate::prim::{Axes, Prim, ShapeOp};
use crate::tensor::Tensor;
use xform_kernels::{DType, Shape};

/// One entry of a multi-axis index (see the `s!` macro).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Idx {
    /// The whole axis (`..`).
    All,
    /// One element; the axis is removed (`3`, `-1`).
    At(isize),
    /// Python's `start:end:step`: bounds may be negative (counting from the
    /// end) and clip to the axis as Python's do; a negative step walks
    /// backward from `start` (default: the last element) down to just
    /// above `end` (default: past the first element).
    Range {
        /// First index (default 0, or the last index for a negative step).
        start: Option<isize>,
        /// Where to stop, exclusive (default: past the end in the
        /// direction of the step).
        end: Option<isize>,
        /// Step (nonzero; negative walks backward).
        step: isize,
    },
    /// A new unit axis (numpy's `None`).
    NewAxis,
}

impl Idx {
    /// A range with a step: `Idx::step(0..6, 2)` is Python's `0:6:2`.
    pub fn step(r: std::ops::Range<isize>, step: isize) -> Idx {
        Idx::Range { start: Some(r.start), end: Some(r.end), step }
    }

    /// Python's `slice(start, stop, step)`, each bound optional:
    /// `Idx::range(5, 1, -2)` is `5:1:-2`, `Idx::range(-1, None, -3)` is
    /// `-1::-3`, `Idx::range(None, None, -1)` is `::-1`. (In `s!`, write
    /// `..;-1`, `-1..;-3` or `5..1;-2`; the last is a reversed Rust range,
    /// which clippy flags, so `Idx::range` reads better there.)
    pub fn range(start: impl Into<Option<isize>>, end: impl Into<Option<isize>>, step: isize) -> Idx {
        Idx::Range { start: start.into(), end: end.into(), step }
    }

    /// This range (or `..`) with `step`; what `s![a..b; step]` builds.
    ///
    /// # Panics
    /// On a single index or a new axis: a step needs a range.
    #[track_caller]
    pub fn with_step(self, step: isize) -> Idx {
        match self {
            Idx::All => Idx::Range { start: None, end: None, step },
            Idx::Range { start, end, .. } => Idx::Range { start, end, step },
            Idx::At(_) | Idx::NewAxis => {
                crate::Error::invalid("slice", format!("a step needs a range, not {self:?}")).raise()
            }
        }
    }
}

/// Resolves Python's `start:end:step` on an axis of size `n`, as
/// `slice.indices(n)` does: the first index taken and the number taken.
/// A negative step clips the bounds to `-1..=n-1` (so `-1` as a resolved
/// end means "past the first element"), a positive one to `0..=n`.
fn resolve(start: Option<isize>, end: Option<isize>, step: isize, n: usize) -> (usize, usize) {
    let (n, st) = (n as i128, step as i128);
    let (lo, hi) = if st < 0 { (-1, n - 1) } else { (0, n) };
    let norm = |v: isize| -> i128 {
        let v = v as i128;
        (if v < 0 { v + n } else { v }).clamp(lo, hi)
    };
    let b = start.map_or(if st < 0 { hi } else { lo }, norm);
    let e = end.map_or(if st < 0 { lo } else { hi }, norm);
    let len = if st > 0 && e > b {
        (e - b + st - 1) / st
    } else if st < 0 && b > e {
        (b - e - 1) / -st + 1
    } else {
        0
    };
    (if len == 0 { 0 } else { b as usize }, len as usize)
}

/// `i` as an isize, saturating: an index past isize::MAX (`usize::MAX`)
/// must stay out of range, not wrap to -1 (the last element).
fn sat(i: i128) -> isize {
    i.clamp(isize::MIN as i128, isize::MAX as i128) as isize
}

macro_rules! idx_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Idx {
            fn from(i: $t) -> Idx {
                Idx::At(sat(i as i128))
            }
        }
        impl From<std::ops::Range<$t>> for Idx {
            fn from(r: std::ops::Range<$t>) -> Idx {
                Idx::Range { start: Some(sat(r.start as i128)), end: Some(sat(r.end as i128)), step: 1 }
            }
        }
        impl From<std::ops::RangeFrom<$t>> for Idx {
            fn from(r: std::ops::RangeFrom<$t>) -> Idx {
                Idx::Range { start: Some(sat(r.start as i128)), end: None, step: 1 }
            }
        }
        impl From<std::ops::RangeTo<$t>> for Idx {
            fn from(r: std::ops::RangeTo<$t>) -> Idx {
                Idx::Range { start: None, end: Some(sat(r.end as i128)), step: 1 }
            }
        }
        impl From<std::ops::RangeInclusive<$t>> for Idx {
            fn from(r: std::ops::RangeInclusive<$t>) -> Idx {
                Idx::Range { start: Some(sat(*r.start() as i128)), end: Some(sat(*r.end() as i128 + 1)), step: 1 }
            }
        }
    )*};
}
idx_from_int!(i32, i64, isize, usize, u32);

impl From<std::ops::RangeFull> for Idx {
    fn from(_: std::ops::RangeFull) -> Idx {
        Idx::All
    }
}

/// Builds a multi-axis index for [`Tensor::slice`]: `s![1, 0..2, .., -1]`.
/// A step follows a range after `;`, as in Python's `start:end:step`:
/// `s![.., ..;-1]` is numpy's `x[:, ::-1]`, `s![1..;2]` is `x[1::2]`,
/// `s![-1..;-3]` is `x[-1::-3]`.
#[macro_export]
macro_rules! s {
    ($($e:expr $(; $step:expr)?),* $(,)?) => {
        &[$($crate::Idx::from($e)$(.with_step($step))?),*][..]
    };
}

impl Tensor {
    /// Numpy-style basic indexing: one [`Idx`] per leading axis (missing
    /// trailing axes are kept whole). Steps may be negative, with Python's
    /// semantics (`x.slice(s![.., ..;-1])` is `x[:, ::-1]`; out-of-range
    /// bounds clip; a range that takes nothing gives a size-0 axis). A
    /// view, also with negative steps (`rev` then a slice, as in lax):
    /// writes through it reach `self`.
    ///
    /// ```
    /// use xform_ops::{s, Idx, Tensor};
    ///
    /// let x = Tensor::from_vec((0..6).map(|i| i as f32).collect(), [6]);
    /// assert_eq!(x.slice(s![..;-1]).to_vec::<f32>(), [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
    /// assert_eq!(x.slice(s![-1..;-3]).to_vec::<f32>(), [5.0, 2.0]);
    /// assert_eq!(x.slice(&[Idx::range(5, 1, -2)]).to_vec::<f32>(), [5.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn slice(&self, index: &[Idx]) -> Tensor {
        self.try_slice(index).or_raise()
    }

    /// [`Tensor::slice`] returning an error instead of panicking.
    pub fn try_slice(&self, index: &[Idx]) -> Result<Tensor> {
        let shape = self.shape();
        let used = index.iter().filter(|i| !matches!(i, Idx::NewAxis)).count();
        if used > shape.rank() {
            return Err(Error::shape(
                "slice",
                format!("{used} indices for a tensor of rank {}", shape.rank()),
                &[&shape],
            ));
        }
        let r = shape.rank();
        let mut start: Axes = smallvec::smallvec![0; r];
        let mut limit: Axes = shape.iter().copied().collect();
        let mut step: Axes = smallvec::smallvec![1; r];
        // A negative step is `rev` then a positive-step slice of the
        // reversed axis (as lax does), so the result stays a view.
        let mut reversed: Axes = Axes::new();
        let mut out = Vec::new();
        let mut axis = 0;
        for i in index {
            match *i {
                Idx::NewAxis => {
                    out.push(1);
                    continue;
                }
                Idx::All => out.push(shape[axis]),
                Idx::At(k) => {
                    let n = shape[axis] as isize;
                    let j = if k < 0 { k + n } else { k };
                    if j < 0 || j >= n {
                        return Err(Error::new(
                            "slice",
                            ErrorKind::IndexOutOfRange { index: k as i64, size: n as usize },
                        ));
                    }
                    start[axis] = j as usize;
                    limit[axis] = j as usize + 1;
                }
                Idx::Range { start: s, end: e, step: st } => {
                    if st == 0 {
                        return Err(Error::invalid("slice", "step must not be zero"));
                    }
                    let n = shape[axis];
                    let (first, len) = resolve(s, e, st, n);
                    let abs = st.unsigned_abs();
                    // In the reversed axis, index `first` is `n - 1 - first`.
                    let b = if st < 0 && len > 0 { n - 1 - first } else { first };
                    if st < 0 {
                        reversed.push(axis);
                    }
                    start[axis] = b;
                    limit[axis] = if len == 0 { b } else { b + (len - 1) * abs + 1 };
                    step[axis] = if len <= 1 { 1 } else { abs };
                    out.push(len);
                }
            }
            axis += 1;
        }
        out.extend_from_slice(&shape[axis..]);
        let mut ops = Vec::new();
        if !reversed.is_empty() {
            ops.push(Prim::Shape(ShapeOp::Rev { axes: reversed }));
        }
        let sliced: Shape = Shape((0..r).map(|d| (limit[d] - start[d]).div_ceil(step[d])).collect());
        if sliced != shape {
            ops.push(Prim::Shape(ShapeOp::Slice { start, limit, strides: step }));
        }
        let out = Shape::from(out);
        if out != sliced {
            ops.push(Prim::Shape(ShapeOp::Reshape { shape: out }));
        }
        if ops.is_empty() {
            return Ok(self.clone());
        }
        make_view(self, &ops)
    }

    /// Elements at `indices` along `axis` (numpy's `take`): the result has
    /// `indices`' axes in place of `axis`. Negative indices count from the
    /// end; out-of-range indices are an error.
    #[track_caller]
    pub fn take(&self, indices: &Tensor, axis: isize) -> Tensor {
        let a = norm_axis("take", axis, self.rank()).or_raise();
        if indices.numel() == 0 && self.shape()[a] > 0 {
            // Nothing taken: zeros of the result's shape, not linked to
            // `self` (jnp.take's shortcut), so no derivative flows back
            // (not even `0 * NaN`).
            let s = self.shape();
            let shape: Vec<usize> = s[..a].iter().chain(indices.shape().iter()).chain(&s[a + 1..]).copied().collect();
            return lax::full(&Shape::from(shape), 0.0, self.dtype(), self.device()).or_raise();
        }
        lax::gather(self, indices, a, 0).or_raise()
    }

    /// Numpy's `take_along_axis`: `indices` has `self`'s rank, and picks
    /// along `axis` per position of the other axes (which broadcast).
    #[track_caller]
    pub fn take_along_axis(&self, indices: &Tensor, axis: isize) -> Tensor {
        self.try_take_along_axis(indices, axis).or_raise()
    }

    /// [`Tensor::take_along_axis`] returning an error instead of panicking.
    pub fn try_take_along_axis(&self, indices: &Tensor, axis: isize) -> Result<Tensor> {
        let r = self.rank();
        if indices.rank() != r {
            return Err(Error::shape(
                "take_along_axis",
                "indices must have the operand's rank",
                &[&self.shape(), &indices.shape()],
            ));
        }
        let a = norm_axis("take_along_axis", axis, r)?;
        let x = lax::moveaxis(self, a, r - 1)?;
        let idx = lax::moveaxis(indices, a, r - 1)?;
        let (xs, is) = (x.shape(), idx.shape());
        let lead = super::broadcast_shapes("take_along_axis", &Shape::from(&xs[..r - 1]), &Shape::from(&is[..r - 1]))?;
        let with = |last: usize| {
            let mut s = lead.clone();
            s.0.push(last);
            s
        };
        let x = lax::broadcast_to(&x, &with(xs[r - 1]))?;
        let idx = lax::broadcast_to(&idx, &with(is[r - 1]))?;
        let g = lax::gather(&x, &idx, r - 1, r - 1)?;
        lax::moveaxis(&g, r - 1, a)
    }

    /// `tf.gather(self, indices, axis, batch_dims)`: the first `batch_dims`
    /// axes of `self` and `indices` are matched, then `axis` is indexed.
    #[track_caller]
    pub fn gather(&self, indices: &Tensor, axis: usize, batch_dims: usize) -> Tensor {
        lax::gather(self, indices, axis, batch_dims).or_raise()
    }

    /// The transpose of [`Tensor::gather`]: a copy of `self` with `updates`
    /// added at the gathered positions (repeated indices accumulate).
    #[track_caller]
    pub fn scatter_add(&self, indices: &Tensor, updates: &Tensor, axis: usize, batch_dims: usize) -> Tensor {
        lax::scatter_add(self, indices, updates, axis, batch_dims).or_raise()
    }

    /// PyTorch's `index_add`: a copy of `self` with `source[.., i, ..]`
    /// added at `self[.., indices[i], ..]` along `axis`.
    #[track_caller]
    pub fn index_add(&self, axis: isize, indices: &Tensor, source: &Tensor) -> Tensor {
        let a = norm_axis("index_add", axis, self.rank()).or_raise();
        let src = lax::convert(source, self.dtype()).or_raise();
        lax::scatter_add(self, indices, &src, a, 0).or_raise()
    }

    /// One-hot encoding of integer indices: a new last axis of size `n`.
    #[track_caller]
    pub fn one_hot(&self, n: usize, dtype: DType) -> Tensor {
        if !self.dtype().is_int() {
            Error::dtype("one_hot", "needs integer indices", &[self.dtype()]).raise();
        }
        let mut shape = self.shape();
        shape.0.push(n);
        let r = shape.rank();
        let iota = lax::iota(self.dtype(), &Shape::from([n]), 0, self.device()).or_raise();
        let i = lax::broadcast_in_dim(&iota, &shape, &[r - 1]).or_raise();
        let dims: Vec<usize> = (0..r - 1).collect();
        let x = lax::broadcast_in_dim(self, &shape, &dims).or_raise();
        lax::convert(&lax::eq(&x, &i).or_raise(), dtype).or_raise()
    }

    /// A block of `sizes` starting at runtime indices `starts` (scalar
    /// integer tensors, one per axis), resolved as in JAX: a negative start
    /// counts from the end of its axis (it is wrapped once by the axis
    /// length), then the start is clamped so the block fits. On
    /// `x = [0, 1, 2, 3]`, starts `[-1]` and sizes `[2]` give `[2, 3]`.
    #[track_caller]
    pub fn dynamic_slice(&self, starts: &[Tensor], sizes: &[usize]) -> Tensor {
        lax::dynamic_slice(self, starts, sizes).or_raise()
    }

    /// A copy of `self` with the block at runtime `starts` replaced by
    /// `update`; the starts are resolved as in [`Tensor::dynamic_slice`]
    /// (wrapped if negative, then clamped so the update fits).
    #[track_caller]
    pub fn dynamic_update_slice(&self, update: &Tensor, starts: &[Tensor]) -> Tensor {
        let u = lax::convert(update, self.dtype()).or_raise();
        lax::dynamic_update_slice(self, &u, starts).or_raise()
    }
}
