//! [`WindowParams`]: a window's per-axis parameters, their checks and the
//! kernels' geometry.

use crate::error::{Error, Result};
use crate::prim::Axes;
use crate::prims::padding::Padding;
use smallvec::{smallvec, SmallVec};
use std::fmt;
use xform_kernels::cpu::window::WindowGeom;
use xform_kernels::Shape;

/// A window over every axis of an operand: the arguments of JAX's
/// `lax.reduce_window`, one entry per operand axis in each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowParams {
    /// Window taps per axis (>= 1).
    pub dims: Axes,
    /// Window strides (>= 1).
    pub strides: Axes,
    /// `(low, high)` padding of the base-dilated operand; negative crops.
    pub padding: SmallVec<[(i64, i64); 4]>,
    /// Operand (base) dilation (>= 1): `d - 1` holes between neighbours.
    pub base_dilation: Axes,
    /// Window dilation (>= 1): taps `d` apart.
    pub window_dilation: Axes,
}

impl WindowParams {
    /// A window of `dims` moving by `strides` over an operand of `shape`,
    /// padded as `padding` says (resolved against `shape`), undilated.
    ///
    /// # Errors
    /// As [`WindowParams::dilated`].
    pub fn new(
        op: &str,
        shape: &[usize],
        dims: &[usize],
        strides: &[usize],
        padding: &Padding,
    ) -> Result<WindowParams> {
        let ones = vec![1; shape.len()];
        WindowParams::dilated(op, shape, dims, strides, padding, &ones, &ones)
    }

    /// [`WindowParams::new`] with base and window dilations ("SAME" padding
    /// is resolved as JAX's `reduce_window` resolves it: `padtype_to_pads`
    /// of the undilated operand and the dilated window).
    ///
    /// # Errors
    /// An error naming `op` and the shape for a parameter without one
    /// entry per axis, a zero window size, stride or dilation, or a window
    /// larger than the padded operand.
    pub fn dilated(
        op: &str,
        shape: &[usize],
        dims: &[usize],
        strides: &[usize],
        padding: &Padding,
        base_dilation: &[usize],
        window_dilation: &[usize],
    ) -> Result<WindowParams> {
        let r = shape.len();
        let lens = [dims.len(), strides.len(), base_dilation.len(), window_dilation.len()];
        if lens.iter().any(|&n| n != r) {
            return Err(Error::invalid(op, per_axis_message(shape, lens, None)));
        }
        let pads = padding.resolve_dilated(op, shape, base_dilation, dims, window_dilation, strides)?;
        let w = WindowParams {
            dims: dims.into(),
            strides: strides.into(),
            padding: pads.into_iter().collect(),
            base_dilation: base_dilation.into(),
            window_dilation: window_dilation.into(),
        };
        w.output_shape(op, &Shape::from(shape.to_vec()))?;
        Ok(w)
    }

    /// The identity window (size, stride, dilations 1, no padding) over
    /// `rank` axes.
    pub fn identity(rank: usize) -> WindowParams {
        WindowParams {
            dims: smallvec![1; rank],
            strides: smallvec![1; rank],
            padding: smallvec![(0, 0); rank],
            base_dilation: smallvec![1; rank],
            window_dilation: smallvec![1; rank],
        }
    }

    /// This window with a size-1 window inserted at axis `at` (a batch axis).
    pub fn with_unit_axis(&self, at: usize) -> WindowParams {
        let mut w = self.clone();
        w.dims.insert(at, 1);
        w.strides.insert(at, 1);
        w.padding.insert(at, (0, 0));
        w.base_dilation.insert(at, 1);
        w.window_dilation.insert(at, 1);
        w
    }

    /// The kernels' geometry over an operand of `input` shape.
    pub fn geom(&self, input: &Shape) -> WindowGeom {
        WindowGeom {
            input: input.to_vec(),
            window: self.dims.to_vec(),
            strides: self.strides.to_vec(),
            pad_lo: self.padding.iter().map(|p| p.0).collect(),
            pad_hi: self.padding.iter().map(|p| p.1).collect(),
            base_dilation: self.base_dilation.to_vec(),
            window_dilation: self.window_dilation.to_vec(),
        }
    }

    /// Checks the window against an operand of `input` shape and gives the
    /// windows' shape (one position per window per axis).
    ///
    /// # Errors
    /// As [`WindowParams::dilated`], naming `op`.
    pub fn output_shape(&self, op: &str, input: &Shape) -> Result<Shape> {
        let r = input.rank();
        let lens = [self.dims.len(), self.strides.len(), self.base_dilation.len(), self.window_dilation.len()];
        if lens.iter().any(|&n| n != r) || self.padding.len() != r {
            return Err(Error::invalid(op, per_axis_message(input, lens, Some(self.padding.len()))));
        }
        for (what, v) in [
            ("window dimensions", &self.dims),
            ("window strides", &self.strides),
            ("base dilations", &self.base_dilation),
            ("window dilations", &self.window_dilation),
        ] {
            if v.contains(&0) {
                return Err(Error::shape(
                    op,
                    format!("{what} {:?} must be positive (operand shape {input})", v.as_slice()),
                    &[input],
                ));
            }
        }
        let g = self.geom(input);
        for a in 0..r {
            let (padded, extent) = (g.padded_len(a), g.window_extent(a));
            // (a one-tap window over an empty axis gives an empty axis, as
            // in JAX: vmap over an empty batch adds such a window)
            if padded < extent as i128 && !(extent == 1 && padded == 0) {
                let (lo, hi) = self.padding[a];
                return Err(Error::shape(
                    op,
                    format!(
                        "axis {a}: the window ({} taps, dilation {}: {extent} wide) is larger than the padded \
                         input ({} elements, base dilation {}, padding ({lo}, {hi}): {padded} wide)",
                        self.dims[a], self.window_dilation[a], input[a], self.base_dilation[a]
                    ),
                    &[input],
                ));
            }
        }
        Ok(g.output_shape().expect("strides checked"))
    }
}

fn per_axis_message(shape: &[usize], lens: [usize; 4], pads: Option<usize>) -> String {
    let pads = pads.map_or(String::new(), |p| format!(", padding {p}"));
    format!(
        "needs one window parameter per operand axis: the operand has shape {shape:?} (rank {}), but there are \
         {} window dimensions, {} strides{pads}, {} base dilations and {} window dilations",
        shape.len(),
        lens[0],
        lens[1],
        lens[2],
        lens[3]
    )
}

impl fmt::Display for WindowParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pads: Vec<String> = self.padding.iter().map(|(l, h)| format!("({l},{h})")).collect();
        write!(
            f,
            "dims={} strides={} padding=({}) base_dilation={} window_dilation={}",
            crate::prims::axes_str(&self.dims),
            crate::prims::axes_str(&self.strides),
            pads.join(","),
            crate::prims::axes_str(&self.base_dilation),
            crate::prims::axes_str(&self.window_dilation)
        )
    }
}
