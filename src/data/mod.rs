//! Data utilities for examples and tests: [`permutation`], [`batches`] and
//! [`poisson_batches`]
//! (always built), and with the `data` feature (on by default) a data set
//! shipped with xform, to train on real data with no download.
//!
//! `digits` (feature `data`): the UCI optical recognition of handwritten
//! digits data set (E. Alpaydin and C. Kaynak, 1998; CC BY 4.0): 1797
//! grey-level 8x8 images of the digits 0 to 9, each pixel an integer
//! 0..=16. The copy in `data/digits/` of the repository is the one that
//! scikit-learn ships (see `data/digits/README.md` for its source and
//! licence); it is compiled into the crate (260 KB), so the loader works
//! from any directory. A build with `default-features = false` leaves it
//! out.

use crate::{Error, Tensor};

#[cfg(feature = "data")]
mod digits;
#[cfg(feature = "data")]
pub use digits::{
    digits, digits_all, digits_split, Digits, DIGITS_CLASSES, DIGITS_FEATURES, DIGITS_SAMPLES, DIGITS_SPLIT_SEED,
    DIGITS_TEST_SIZE,
};

/// A pseudo-random permutation of `0..n`, the same on every platform: a
/// Fisher-Yates shuffle driven by SplitMix64 seeded with `seed` (position
/// `i`, from the last down, swaps with `next() % (i + 1)`).
///
/// ```
/// let p = xform::data::permutation(10, 7);
/// let mut s = p.clone();
/// s.sort();
/// assert_eq!(s, (0..10).collect::<Vec<_>>());
/// assert_eq!(p, xform::data::permutation(10, 7));
/// ```
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    p
}

/// The common leading size of `x` and `y` (an error naming `op` if they
/// differ or either is a scalar).
#[track_caller]
fn rows(op: &str, x: &Tensor, y: &Tensor) -> usize {
    let (sx, sy) = (x.shape(), y.shape());
    if sx.rank() == 0 || sy.rank() == 0 || sx[0] != sy[0] {
        Error::shape(op, "x and y must have the same leading size", &[&sx, &sy]).raise();
    }
    sx[0]
}

/// Minibatches of the rows of `x` and `y` (which must have the same length
/// along axis 0), in the order of [`permutation`]`(n, seed)`, or in order
/// when `seed` is `None`. Every batch has `batch_size` rows except the last,
/// which holds the remainder (drop it with `drop_last`).
///
/// ```
/// use xform::data::batches;
/// use xform::Tensor;
///
/// let x = Tensor::zeros([10, 3], xform::DType::F32);
/// let y = Tensor::from_vec((0..10).collect::<Vec<i32>>(), [10]);
/// let epoch = batches(&x, &y, 4, Some(1), true);
/// assert_eq!(epoch.len(), 10 / 4);
/// assert_eq!(epoch[0].0.shape().dims(), &[4, 3]);
/// ```
///
/// # Panics
/// If `batch_size` is zero or the leading sizes of `x` and `y` differ.
#[track_caller]
pub fn batches(x: &Tensor, y: &Tensor, batch_size: usize, seed: Option<u64>, drop_last: bool) -> Vec<(Tensor, Tensor)> {
    if batch_size == 0 {
        Error::invalid("batches", "batch_size must be at least 1").raise();
    }
    let n = rows("batches", x, y);
    let order: Vec<i64> = match seed {
        Some(s) => permutation(n, s).into_iter().map(|i| i as i64).collect(),
        None => (0..n as i64).collect(),
    };
    order
        .chunks(batch_size)
        .filter(|c| !drop_last || c.len() == batch_size)
        .map(|c| {
            if seed.is_none() {
                let (s, e) = (c[0] as usize, c[0] as usize + c.len());
                (x.narrow(0, s, e - s), y.narrow(0, s, e - s))
            } else {
                let idx = Tensor::from_vec(c.to_vec(), [c.len()]);
                (x.take(&idx, 0), y.take(&idx, 0))
            }
        })
        .collect()
}

/// An epoch of Poisson-sampled minibatches, as DP-SGD's privacy accounting
/// assumes (Opacus's `DPDataLoader`): `round(1 / sample_rate)` batches,
/// each holding every row independently with probability `sample_rate`,
/// so a batch's size varies (and may be zero). The draws come from `key`
/// (`key.fold_in(step)`'s uniforms), so one key gives one epoch.
///
/// ```
/// use xform::data::poisson_batches;
/// use xform::{DType, Key, Tensor};
///
/// let x = Tensor::zeros([1000, 3], DType::F32);
/// let y = Tensor::zeros([1000], DType::I32);
/// let epoch = poisson_batches(&x, &y, 0.05, &Key::new(0));
/// assert_eq!(epoch.len(), 20);
/// let mean = epoch.iter().map(|(x, _)| x.dim(0)).sum::<usize>() as f64 / 20.0;
/// assert!((mean - 50.0).abs() < 10.0, "{mean}");
/// ```
///
/// # Panics
/// If `sample_rate` is not in `(0, 1]` or the leading sizes of `x` and `y`
/// differ.
#[track_caller]
pub fn poisson_batches(x: &Tensor, y: &Tensor, sample_rate: f64, key: &crate::Key) -> Vec<(Tensor, Tensor)> {
    if !(sample_rate > 0.0 && sample_rate <= 1.0) {
        Error::invalid("poisson_batches", format!("sample_rate must be in (0, 1], got {sample_rate}")).raise();
    }
    let n = rows("poisson_batches", x, y);
    let steps = (1.0 / sample_rate).round().max(1.0) as u32;
    (0..steps)
        .map(|step| {
            let u = key.fold_in(step).uniform([n], crate::DType::F64).to_vec::<f64>();
            let rows: Vec<i64> = (0..n as i64).filter(|&i| u[i as usize] < sample_rate).collect();
            let idx = Tensor::from_vec(rows.clone(), [rows.len()]);
            (x.take(&idx, 0), y.take(&idx, 0))
        })
        .collect()
}
