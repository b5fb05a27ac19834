//! The digits data set, compiled into the crate (feature `data`).

use super::permutation;
use crate::{Error, Tensor};
use std::sync::OnceLock;

/// The digits CSV: one image per line, 64 pixel values (row-major 8x8,
/// 0..=16) then the label 0..=9.
static DIGITS_CSV: &str = include_str!("../../data/digits/digits.csv");

/// Number of images in the digits data set.
pub const DIGITS_SAMPLES: usize = 1797;
/// Pixels per digits image (8x8).
pub const DIGITS_FEATURES: usize = 64;
/// Number of digit classes.
pub const DIGITS_CLASSES: usize = 10;
/// Size of the test set of [`digits`].
pub const DIGITS_TEST_SIZE: usize = 360;
/// The seed of the shuffle of [`digits`].
pub const DIGITS_SPLIT_SEED: u64 = 0;

/// The digits data split into a training and a test set.
#[derive(Clone, Debug)]
pub struct Digits {
    /// Training images, `f32 [n_train, 64]`, pixels scaled to `[0, 1]`
    /// (divided by 16).
    pub train_x: Tensor,
    /// Training labels, `i32 [n_train]` in `0..=9`.
    pub train_y: Tensor,
    /// Test images, `f32 [n_test, 64]`, scaled like the training images.
    pub test_x: Tensor,
    /// Test labels, `i32 [n_test]`.
    pub test_y: Tensor,
}

/// The parsed CSV: raw pixels (0..=16) and labels, in file order.
fn raw() -> &'static (Vec<u8>, Vec<u8>) {
    static RAW: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    RAW.get_or_init(|| {
        let mut pixels = Vec::with_capacity(DIGITS_SAMPLES * DIGITS_FEATURES);
        let mut labels = Vec::with_capacity(DIGITS_SAMPLES);
        for (i, line) in DIGITS_CSV.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            let fields: Vec<u8> = line
                .trim()
                .split(',')
                .map(|f| f.trim().parse::<u8>().unwrap_or_else(|e| panic!("digits.csv line {}: {e}", i + 1)))
                .collect();
            assert_eq!(fields.len(), DIGITS_FEATURES + 1, "digits.csv line {}: expected 65 fields", i + 1);
            pixels.extend_from_slice(&fields[..DIGITS_FEATURES]);
            labels.push(fields[DIGITS_FEATURES]);
        }
        assert_eq!(labels.len(), DIGITS_SAMPLES, "digits.csv: expected {DIGITS_SAMPLES} images");
        (pixels, labels)
    })
}

/// All 1797 images in file order: `f32 [1797, 64]` scaled to `[0, 1]`, and
/// `i32 [1797]` labels.
pub fn digits_all() -> (Tensor, Tensor) {
    let (pixels, labels) = raw();
    let x: Vec<f32> = pixels.iter().map(|&p| p as f32 / 16.0).collect();
    let y: Vec<i32> = labels.iter().map(|&l| l as i32).collect();
    (Tensor::from_vec(x, [DIGITS_SAMPLES, DIGITS_FEATURES]), Tensor::from_vec(y, [DIGITS_SAMPLES]))
}

/// The digits data with the standard split of this crate: the images are
/// shuffled by [`permutation`]`(1797, 0)`; the last 360 (20%) of the
/// shuffled order are the test set and the first 1437 the training set.
/// The split is the same on every machine and in every version.
///
/// ```
/// use xform::data::digits;
///
/// let d = digits();
/// assert_eq!(d.train_x.shape().dims(), &[1437, 64]);
/// assert_eq!(d.test_y.shape().dims(), &[360]);
/// ```
pub fn digits() -> Digits {
    digits_split(DIGITS_TEST_SIZE, DIGITS_SPLIT_SEED)
}

/// The digits data shuffled by [`permutation`]`(1797, seed)`, with the last
/// `test_size` images of the shuffled order as the test set.
///
/// # Panics
/// If `test_size` exceeds 1797.
#[track_caller]
pub fn digits_split(test_size: usize, seed: u64) -> Digits {
    if test_size > DIGITS_SAMPLES {
        Error::invalid("digits_split", format!("test_size {test_size} exceeds the {DIGITS_SAMPLES} images")).raise();
    }
    let (pixels, labels) = raw();
    let perm = permutation(DIGITS_SAMPLES, seed);
    let n_train = DIGITS_SAMPLES - test_size;
    let part = |idx: &[usize]| {
        let mut x = Vec::with_capacity(idx.len() * DIGITS_FEATURES);
        for &i in idx {
            x.extend(pixels[i * DIGITS_FEATURES..(i + 1) * DIGITS_FEATURES].iter().map(|&p| p as f32 / 16.0));
        }
        let y: Vec<i32> = idx.iter().map(|&i| labels[i] as i32).collect();
        (Tensor::from_vec(x, [idx.len(), DIGITS_FEATURES]), Tensor::from_vec(y, [idx.len()]))
    };
    let (train_x, train_y) = part(&perm[..n_train]);
    let (test_x, test_y) = part(&perm[n_train..]);
    Digits { train_x, train_y, test_x, test_y }
}
