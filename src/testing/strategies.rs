//! proptest strategies for shapes, tensors and trees of tensors.
//!
//! Tensors are generated from a seed (values come from xform's own random
//! keys), so shrinking works on the shape and the seed rather than on
//! thousands of element values.

use proptest::prelude::*;
use xform_ops::{DType, Key, Shape, Tensor};

/// Shapes of rank `0..=max_rank` with each size in `0..=max_dim` (size-0
/// and size-1 axes included).
pub fn shape(max_rank: usize, max_dim: usize) -> impl Strategy<Value = Shape> {
    prop::collection::vec(0..=max_dim, 0..=max_rank).prop_map(Shape::from)
}

/// Shapes with every size at least 1.
pub fn nonempty_shape(max_rank: usize, max_dim: usize) -> impl Strategy<Value = Shape> {
    prop::collection::vec(1..=max_dim.max(1), 0..=max_rank).prop_map(Shape::from)
}

/// A tensor of `shape` and `dtype` with values uniform in `[lo, hi)`
/// (integers: in `[lo, hi)` rounded down; bool: either).
pub fn tensor_of(shape: Shape, dtype: DType, lo: f64, hi: f64) -> impl Strategy<Value = Tensor> {
    any::<u32>().prop_map(move |seed| random_tensor(seed as u64, &shape, dtype, lo, hi))
}

/// Tensors of a random shape (see [`shape`]) and `dtype` in `[lo, hi)`.
pub fn tensor(max_rank: usize, max_dim: usize, dtype: DType, lo: f64, hi: f64) -> impl Strategy<Value = Tensor> {
    (shape(max_rank, max_dim), any::<u32>()).prop_map(move |(s, seed)| random_tensor(seed as u64, &s, dtype, lo, hi))
}

/// Several tensors of one random shape (for elementwise functions).
pub fn same_shape_tensors(
    n: usize,
    max_rank: usize,
    max_dim: usize,
    dtype: DType,
    lo: f64,
    hi: f64,
) -> impl Strategy<Value = Vec<Tensor>> {
    (shape(max_rank, max_dim), any::<u32>()).prop_map(move |(s, seed)| {
        (0..n).map(|i| random_tensor(seed as u64 * 31 + i as u64, &s, dtype, lo, hi)).collect()
    })
}

/// A vector of 1 to `max_len` tensors of independent random shapes: a
/// simple pytree.
pub fn tree_of_tensors(
    max_len: usize,
    max_rank: usize,
    max_dim: usize,
    dtype: DType,
) -> impl Strategy<Value = Vec<Tensor>> {
    prop::collection::vec(tensor(max_rank, max_dim, dtype, -1.0, 1.0), 1..=max_len.max(1))
}

/// A tensor drawn from `seed`, uniform in `[lo, hi)` (cast to `dtype`).
pub fn random_tensor(seed: u64, shape: &Shape, dtype: DType, lo: f64, hi: f64) -> Tensor {
    let u = Key::new(seed).uniform(shape.clone(), DType::F64);
    let v = u * (hi - lo) + lo;
    match dtype {
        DType::Bool => v.lt_scalar((lo + hi) / 2.0),
        d if d.is_int() => v.floor().cast(d),
        d => v.cast(d),
    }
}
