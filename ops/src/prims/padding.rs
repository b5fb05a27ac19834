//! Padding of windowed primitives (convolution, reduce_window): explicit
//! `(low, high)` pairs per spatial axis, or JAX's "SAME" and "VALID".

use crate::error::{Error, Result};
use xform_kernels::conv_geom::dilated;

/// How a windowed op pads its input's spatial axes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Padding {
    /// No padding: only windows that fit the input.
    Valid,
    /// Pad so that the output has `ceil(input / stride)` positions per
    /// axis, the odd element going after (JAX's and TensorFlow's "SAME").
    Same,
    /// `(low, high)` per spatial axis; negative amounts crop.
    Explicit(Vec<(i64, i64)>),
}

impl Padding {
    /// `p[i]` on both sides of spatial axis `i` (PyTorch's `padding=(p, ..)`).
    pub fn symmetric(p: &[usize]) -> Padding {
        Padding::Explicit(p.iter().map(|&a| (a as i64, a as i64)).collect())
    }
}

impl From<Vec<(i64, i64)>> for Padding {
    fn from(p: Vec<(i64, i64)>) -> Padding {
        Padding::Explicit(p)
    }
}

impl From<&[(i64, i64)]> for Padding {
    fn from(p: &[(i64, i64)]) -> Padding {
        Padding::Explicit(p.to_vec())
    }
}

impl Padding {
    /// Explicit `(low, high)` pairs for inputs of `input` sizes (after any
    /// base dilation), windows of `window` sizes (after window dilation)
    /// and `strides`, as JAX's `padtype_to_pads`. `op` names the caller in
    /// the error for a wrong count of pairs or a zero stride.
    pub fn resolve(&self, op: &str, input: &[usize], window: &[usize], strides: &[usize]) -> Result<Vec<(i64, i64)>> {
        let n = input.len();
        match self {
            Padding::Valid => Ok(vec![(0, 0); n]),
            Padding::Same => {
                check_len(op, "window", window.len(), n)?;
                check_len(op, "strides", strides.len(), n)?;
                if strides.contains(&0) {
                    return Err(Error::invalid(op, format!("window strides {strides:?} must be positive")));
                }
                Ok((0..n)
                    .map(|i| {
                        let out = input[i].div_ceil(strides[i]);
                        let need = ((out.max(1) - 1) * strides[i] + window[i]).saturating_sub(input[i]) as i64;
                        (need / 2, need - need / 2)
                    })
                    .collect())
            }
            Padding::Explicit(p) => {
                if p.len() != n {
                    return Err(Error::invalid(
                        op,
                        format!("padding has {} (low, high) pairs for {n} spatial axes: {p:?}", p.len()),
                    ));
                }
                Ok(p.clone())
            }
        }
    }

    /// [`Padding::resolve`] for undilated sizes with per-axis dilations,
    /// as JAX's `reduce_window` resolves a padding string: from the
    /// *undilated* input sizes and the window sizes after window dilation
    /// (the base dilation does not enter: `x = [1, 2]`, window 3, stride
    /// 2, base dilation 2 pads `(0, 1)`, one window summing to 3).
    pub fn resolve_dilated(
        &self,
        op: &str,
        input: &[usize],
        base_dilation: &[usize],
        window: &[usize],
        window_dilation: &[usize],
        strides: &[usize],
    ) -> Result<Vec<(i64, i64)>> {
        for (what, len) in [
            ("base (lhs) dilation", base_dilation.len()),
            ("window", window.len()),
            ("window (rhs) dilation", window_dilation.len()),
            ("strides", strides.len()),
        ] {
            check_len(op, what, len, input.len())?;
        }
        let w: Vec<usize> = window.iter().zip(window_dilation).map(|(&n, &d)| dilated(n, d)).collect();
        self.resolve(op, input, &w, strides)
    }

    /// The error for a padding string ("SAME", "VALID") with an lhs (base)
    /// dilation above 1 in a convolution, which JAX refuses too: the
    /// padding a transposed convolution needs depends on what it
    /// transposes, so it is given explicitly (as `nn::ConvTranspose2d`
    /// does).
    pub fn check_no_lhs_dilation(&self, op: &str, lhs_dilation: &[usize]) -> Result<()> {
        let name = match self {
            Padding::Same => "SAME",
            Padding::Valid => "VALID",
            Padding::Explicit(_) => return Ok(()),
        };
        // (a zero dilation is refused by the positivity check)
        if lhs_dilation.iter().all(|&d| d <= 1) {
            return Ok(());
        }
        Err(Error::invalid(
            op,
            format!(
                "{name} padding with lhs dilation {lhs_dilation:?} is not defined (as in JAX): a transposed \
                 convolution's padding depends on the convolution it transposes; give explicit (low, high) \
                 pairs (as nn::ConvTranspose2d does)"
            ),
        ))
    }
}

/// The error for a per-axis parameter with the wrong number of entries.
fn check_len(op: &str, what: &str, len: usize, axes: usize) -> Result<()> {
    if len != axes {
        return Err(Error::invalid(op, format!("{what} has {len} entries for {axes} spatial axes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_padding_matches_jax() {
        // jax.lax.padtype_to_pads((5, 6), (3, 4), (2, 1), "SAME") == [(1, 1), (1, 2)]
        assert_eq!(Padding::Same.resolve("t", &[5, 6], &[3, 4], &[2, 1]).unwrap(), vec![(1, 1), (1, 2)]);
        // A window smaller than the stride needs no padding.
        assert_eq!(Padding::Same.resolve("t", &[4], &[1], &[2]).unwrap(), vec![(0, 0)]);
        assert_eq!(Padding::Valid.resolve("t", &[4, 4], &[3, 3], &[1, 1]).unwrap(), vec![(0, 0), (0, 0)]);
        assert!(Padding::Explicit(vec![(1, 1)]).resolve("t", &[4, 4], &[3, 3], &[1, 1]).is_err());
        let e = Padding::Same.resolve_dilated("t", &[4, 4], &[1, 1], &[3, 3], &[1, 1], &[1, 1, 1]).unwrap_err();
        assert!(e.to_string().contains("strides has 3 entries for 2 spatial axes"), "{e}");
        // the base dilation does not enter (jax.lax.reduce_window's
        // padtype_to_pads(operand.shape, dilated window, strides)); the
        // window dilation does: a window 3 dilated by 2 spans 5
        assert_eq!(Padding::Same.resolve_dilated("t", &[2], &[2], &[3], &[1], &[2]).unwrap(), vec![(0, 1)]);
        assert_eq!(Padding::Same.resolve_dilated("t", &[5], &[3], &[3], &[2], &[1]).unwrap(), vec![(2, 2)]);
        assert!(Padding::Same.check_no_lhs_dilation("t", &[1, 2]).is_err());
        assert!(Padding::Valid.check_no_lhs_dilation("t", &[2]).is_err());
        assert!(Padding::Same.check_no_lhs_dilation("t", &[1, 1]).is_ok());
        assert!(Padding::Explicit(vec![(1, 1)]).check_no_lhs_dilation("t", &[2]).is_ok());
    }
}
