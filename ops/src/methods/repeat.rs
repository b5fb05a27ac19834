//! numpy's `repeat` and `tile`, built from broadcast and reshape (or a
//! gather, for per-element counts), so every transform works on them with
//! no rule of their own.

use super::norm_axis;
use crate::error::{Error, OrRaise, Result};
use crate::lax;
use crate::tensor::Tensor;
use xform_kernels::Shape;

impl Tensor {
    /// Each element repeated `repeats` times along `axis` (numpy's and
    /// jnp's `repeat`): `[1, 2].repeat(2, Some(0))` is `[1, 1, 2, 2]`. With
    /// `axis` `None` the tensor is flattened first. PyTorch calls this
    /// `repeat_interleave`; PyTorch's `Tensor.repeat` is [`Tensor::tile`].
    /// For a count per element see [`Tensor::repeat_each`].
    ///
    /// ```
    /// use xform_ops::Tensor;
    ///
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]);
    /// assert_eq!(x.repeat(2, Some(1)).to_vec::<f32>(), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    /// assert_eq!(x.repeat(2, None).shape().dims(), &[8]);
    /// ```
    #[track_caller]
    pub fn repeat(&self, repeats: usize, axis: Option<isize>) -> Tensor {
        self.try_repeat(repeats, axis).or_raise()
    }

    /// [`Tensor::repeat`] returning an error instead of panicking.
    pub fn try_repeat(&self, repeats: usize, axis: Option<isize>) -> Result<Tensor> {
        let (x, a) = flat_or_axis(self, "repeat", axis)?;
        let s = x.shape();
        // [.., n, ..] -> [.., n, repeats, ..] (a broadcast) -> [.., n * repeats, ..]
        let mut wide = s.clone();
        wide.0.insert(a + 1, repeats);
        let dims: Vec<usize> = (0..s.rank()).map(|d| if d <= a { d } else { d + 1 }).collect();
        // (errors name the user's call, not the broadcast and reshape)
        let b = lax::broadcast_in_dim(&x, &wide, &dims).map_err(|e| e.named("repeat"))?;
        let mut out = s;
        out.0[a] *= repeats;
        lax::reshape(&b, &out).map_err(|e| e.named("repeat"))
    }

    /// Element `i` along `axis` repeated `repeats[i]` times (jnp's `repeat`
    /// with an array of counts; one count applies to every element):
    /// `[1, 2, 3].repeat_each(&[2, 0, 1], Some(0))` is `[1, 1, 3]`. With
    /// `axis` `None` the tensor is flattened first. A gather, so its
    /// derivative adds the cotangents of the copies.
    ///
    /// # Panics
    /// If `repeats` has neither one entry nor one per element along `axis`.
    #[track_caller]
    pub fn repeat_each(&self, repeats: &[usize], axis: Option<isize>) -> Tensor {
        self.try_repeat_each(repeats, axis).or_raise()
    }

    /// [`Tensor::repeat_each`] returning an error instead of panicking.
    pub fn try_repeat_each(&self, repeats: &[usize], axis: Option<isize>) -> Result<Tensor> {
        if let [r] = repeats {
            return self.try_repeat(*r, axis);
        }
        let (x, a) = flat_or_axis(self, "repeat_each", axis)?;
        let n = x.shape()[a];
        if repeats.len() != n {
            return Err(Error::shape(
                "repeat_each",
                format!("{} repeats for an axis of size {n}", repeats.len()),
                &[&x.shape()],
            ));
        }
        let idx: Vec<i64> = repeats.iter().enumerate().flat_map(|(i, &r)| std::iter::repeat_n(i as i64, r)).collect();
        let len = idx.len();
        let idx = Tensor::from_vec(idx, [len]).to_device(x.device());
        lax::gather(&x, &idx, a, 0)
    }

    /// The whole tensor repeated `reps[d]` times along each axis `d`
    /// (numpy's and jnp's `tile`, PyTorch's `Tensor.repeat`): with fewer
    /// `reps` than axes, the leading axes get 1; with more, `self` gains
    /// leading unit axes. `[1, 2].tile(&[2, 2])` is `[[1, 2, 1, 2], [1, 2, 1, 2]]`.
    ///
    /// ```
    /// use xform_ops::Tensor;
    ///
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
    /// assert_eq!(x.tile(&[2]).to_vec::<f32>(), [1.0, 2.0, 1.0, 2.0]);
    /// assert_eq!(x.tile(&[2, 1]).shape().dims(), &[2, 2]);
    /// ```
    #[track_caller]
    pub fn tile(&self, reps: &[usize]) -> Tensor {
        self.try_tile(reps).or_raise()
    }

    /// [`Tensor::tile`] returning an error instead of panicking.
    pub fn try_tile(&self, reps: &[usize]) -> Result<Tensor> {
        let s = self.shape();
        let r = s.rank().max(reps.len());
        let dims: Vec<usize> = std::iter::repeat_n(1, r - s.rank()).chain(s.iter().copied()).collect();
        let reps: Vec<usize> = std::iter::repeat_n(1, r - reps.len()).chain(reps.iter().copied()).collect();
        // [a0, a1, ..] -> [reps0, a0, reps1, a1, ..] (a broadcast) -> [reps0 * a0, ..]
        // (errors name the user's call, not the broadcast and reshapes)
        let named = |e: Error| e.named("tile");
        let x = lax::reshape(self, &Shape::from(dims.clone())).map_err(named)?;
        let wide: Vec<usize> = (0..r).flat_map(|d| [reps[d], dims[d]]).collect();
        let into: Vec<usize> = (0..r).map(|d| 2 * d + 1).collect();
        let b = lax::broadcast_in_dim(&x, &Shape::from(wide), &into).map_err(named)?;
        let out: Vec<usize> = (0..r).map(|d| reps[d] * dims[d]).collect();
        lax::reshape(&b, &Shape::from(out)).map_err(named)
    }
}

/// `x` flattened with axis 0 (for `axis` `None`), or `x` with `axis`
/// resolved.
fn flat_or_axis(x: &Tensor, op: &str, axis: Option<isize>) -> Result<(Tensor, usize)> {
    match axis {
        None => Ok((lax::reshape(x, &Shape::from([x.shape().numel()]))?, 0)),
        Some(a) => Ok((x.clone(), norm_axis(op, a, x.rank())?)),
    }
}
