//! The geometry of a convolution in canonical form, shared by the CPU and
//! CUDA kernels.
//!
//! The lowering permutes the operands into canonical layouts before a
//! kernel runs: lhs `[N, C, D, H, W]`, rhs `[O, C/fg, KD, KH, KW]`, output
//! `[N/bg, O, OD, OH, OW]`, each contiguous row-major. One- and
//! two-dimensional convolutions are three-dimensional ones whose leading
//! spatial sizes are 1 (with stride and dilation 1 and no padding there),
//! so every kernel handles exactly three spatial axes.
//!
//! Semantics (XLA's `ConvGeneralDilated`): the lhs is dilated by
//! `lhs_dilation` (holes of zeros between elements), padded by
//! `pad_lo`/`pad_hi` (negative padding crops), and the window, dilated by
//! `rhs_dilation`, moves by `stride`. With `fg = feature_group_count` the
//! lhs features split into `fg` groups of `C/fg`, output features into `fg`
//! groups of `O/fg`, and group `g` of the output reads only group `g` of
//! the input. With `bg = batch_group_count` the lhs batch splits into `bg`
//! groups of `N/bg` (group-major: example `b + g*(N/bg)`), output features
//! into `bg` groups, and output feature group `g` reads batch group `g`.

/// Spatial rank every kernel sees.
pub const SPATIAL: usize = 3;

/// A convolution in canonical form (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    /// lhs batch size `N` (before batch grouping).
    pub batch: usize,
    /// lhs feature count `C`.
    pub in_features: usize,
    /// rhs output feature count `O`.
    pub out_features: usize,
    /// `feature_group_count`.
    pub feature_groups: usize,
    /// `batch_group_count`.
    pub batch_groups: usize,
    /// lhs spatial sizes, before dilation and padding.
    pub input: [usize; SPATIAL],
    /// rhs spatial sizes, before dilation.
    pub kernel: [usize; SPATIAL],
    /// Output spatial sizes.
    pub output: [usize; SPATIAL],
    /// Window strides.
    pub stride: [usize; SPATIAL],
    /// Padding before each spatial axis of the dilated lhs (may be negative).
    pub pad_lo: [i64; SPATIAL],
    /// Padding after each spatial axis of the dilated lhs (may be negative).
    pub pad_hi: [i64; SPATIAL],
    /// lhs (base) dilation.
    pub lhs_dilation: [usize; SPATIAL],
    /// rhs (window) dilation.
    pub rhs_dilation: [usize; SPATIAL],
}

/// `0` for an empty axis, else `1 + dilation * (n - 1)`.
pub fn dilated(n: usize, dilation: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 + dilation * (n - 1)
    }
}

/// The number of window positions along one axis: `floor((in_padded -
/// window) / stride) + 1`, or 0 when the window does not fit. `None` for
/// a zero stride or on overflow.
pub fn window_positions(
    input: usize,
    lhs_dilation: usize,
    pad_lo: i64,
    pad_hi: i64,
    window: usize,
    rhs_dilation: usize,
    stride: usize,
) -> Option<usize> {
    if stride == 0 {
        return None;
    }
    let padded = (dilated(input, lhs_dilation) as i128) + pad_lo as i128 + pad_hi as i128;
    let win = dilated(window, rhs_dilation) as i128;
    if padded < win {
        return Some(0);
    }
    usize::try_from((padded - win) / stride as i128 + 1).ok()
}

impl ConvGeometry {
    /// The same geometry with `output` computed from the other fields, or
    /// `None` where a stride is zero or a size overflows.
    pub fn with_output(mut self) -> Option<ConvGeometry> {
        for a in 0..SPATIAL {
            self.output[a] = window_positions(
                self.input[a],
                self.lhs_dilation[a],
                self.pad_lo[a],
                self.pad_hi[a],
                self.kernel[a],
                self.rhs_dilation[a],
                self.stride[a],
            )?;
        }
        Some(self)
    }

    /// Output batch size `N / bg`.
    pub fn out_batch(&self) -> usize {
        self.batch / self.batch_groups
    }

    /// lhs features per feature group, `C / fg` (the rhs input features).
    pub fn group_in_features(&self) -> usize {
        self.in_features / self.feature_groups
    }

    /// Number of groups (`fg * bg`; one of the two is 1).
    pub fn groups(&self) -> usize {
        self.feature_groups * self.batch_groups
    }

    /// Output features per group.
    pub fn group_out_features(&self) -> usize {
        self.out_features / self.groups()
    }

    /// Elements of the lhs.
    pub fn lhs_len(&self) -> usize {
        self.batch * self.in_features * self.input.iter().product::<usize>()
    }

    /// Elements of the rhs.
    pub fn rhs_len(&self) -> usize {
        self.out_features * self.group_in_features() * self.kernel.iter().product::<usize>()
    }

    /// Elements of the output.
    pub fn out_len(&self) -> usize {
        self.out_batch() * self.out_features * self.output.iter().product::<usize>()
    }

    /// The input coordinate read by output position `o` and kernel tap `k`
    /// along spatial axis `ax`, or `None` where that falls on padding or on
    /// a hole of the lhs dilation.
    #[inline]
    pub fn input_index(&self, ax: usize, o: usize, k: usize) -> Option<usize> {
        let p = (o * self.stride[ax] + k * self.rhs_dilation[ax]) as i64 - self.pad_lo[ax];
        if p < 0 {
            return None;
        }
        let d = self.lhs_dilation[ax] as i64;
        if p % d != 0 {
            return None;
        }
        let i = (p / d) as usize;
        (i < self.input[ax]).then_some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_positions_follow_xla() {
        // 28 wide, 3-tap window, stride 1, no padding: 26.
        assert_eq!(window_positions(28, 1, 0, 0, 3, 1, 1), Some(26));
        // SAME padding of a 5-wide input, stride 2: ceil(5/2) = 3.
        assert_eq!(window_positions(5, 1, 1, 1, 3, 1, 2), Some(3));
        // lhs dilation 2 of 3 elements is 5 wide.
        assert_eq!(window_positions(3, 2, 0, 0, 2, 1, 1), Some(4));
        // A window larger than the padded input: no positions.
        assert_eq!(window_positions(2, 1, 0, 0, 3, 1, 1), Some(0));
        // Negative padding crops.
        assert_eq!(window_positions(6, 1, -1, -1, 2, 1, 1), Some(3));
    }
}
