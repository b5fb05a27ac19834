//! `conv_general_dilated`: XLA's convolution, with JAX's rules.
//!
//! One to three spatial axes, window strides, explicit padding (VALID and
//! SAME resolve to it in [`conv_general_dilated`]), lhs dilation
//! (transposed convolution), rhs dilation (atrous), feature groups
//! (grouped and depthwise) and batch groups, and any axis order
//! ([`ConvDims`]). It is bilinear: the JVP is two convolutions, and the
//! transposes with respect to either operand are convolutions again (the
//! lhs one runs the reversed kernel over the cotangent; the rhs one
//! correlates the lhs with the cotangent and swaps the roles of feature
//! and batch groups). The batch rule folds a mapped lhs axis into the
//! batch (or the features, when both operands are mapped) and a mapped rhs
//! axis into the output features with extra feature or batch groups, so
//! `vmap(grad)` of a CNN runs a few grouped convolutions, never a loop.
//!
//! Lowering describes the operands in the roles of [`ConvGeometry`]. The
//! CPU kernel (`kernels::cpu::conv`: im2col and GEMMs, or a sum over lhs
//! features for the kernel gradient's shape) reads an operand's own view
//! where its spatial axes form a contiguous block (the kernel gradient's
//! `[C, N, ...]` view of the forward input is read in place), else a
//! canonical copy, and may return its result as `[O, N, ...]`, which the
//! lowering views in the output's axis order. CUDA gets canonical copies.
//! f16 and bf16 compute in f32 and round once.

mod lower;

use lower::{lower_conv, lower_conv_device};

use super::batching::BatchAxis;
use super::factor::{Factor, FactorRows};
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::padding::Padding;
use super::sample::{Case, Dom, Sample, FLOATS};
use super::{check_arity, Family, Props};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::interp::Outs;
use crate::lax;
use crate::prim::{Avals, Axes, BDims, Cotangents, LinearArg, Prim, Tangents};
use crate::tensor::{Aval, AvalRef, Tensor};
use smallvec::{smallvec, SmallVec};
use std::fmt;
use xform_kernels::conv_geom::{dilated, window_positions, ConvGeometry, SPATIAL};
use xform_kernels::cuda_source::Kernel;
use xform_kernels::{DType, Layout, Shape};

/// Per-spatial-axis `(low, high)` padding.
pub type Pads = SmallVec<[(i64, i64); 3]>;

/// Which axis of each operand plays which role (JAX's
/// `ConvDimensionNumbers`): `lhs` is `[batch, feature, spatial...]`, `rhs`
/// `[out feature, in feature, spatial...]`, `out` `[batch, feature,
/// spatial...]`, each a permutation of the operand's axes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvDims {
    /// lhs axes: batch, feature, then spatial.
    pub lhs: Axes,
    /// rhs axes: output feature, input feature, then spatial.
    pub rhs: Axes,
    /// Output axes: batch, feature, then spatial.
    pub out: Axes,
}

impl ConvDims {
    /// Channels-first in every operand (`NCH..`, `OIH..`, `NCH..`) for
    /// `spatial` spatial axes: PyTorch's layout and JAX's default.
    pub fn channels_first(spatial: usize) -> ConvDims {
        let id: Axes = (0..spatial + 2).collect();
        ConvDims { lhs: id.clone(), rhs: id.clone(), out: id }
    }

    /// From JAX's strings, e.g. `("NHWC", "HWIO", "NHWC")`: `N`/`C` name
    /// the batch and feature axes of the lhs and output, `O`/`I` the
    /// rhs's, any other letter a spatial axis; the spatial axes pair up by
    /// letter, in the rhs string's order (as `lax.conv_dimension_numbers`).
    pub fn from_strings(lhs: &str, rhs: &str, out: &str) -> Result<ConvDims> {
        let op = "conv_general_dilated";
        let bad = |why: String| Error::invalid(op, format!("dimension numbers ({lhs:?}, {rhs:?}, {out:?}): {why}"));
        if lhs.len() != rhs.len() || lhs.len() != out.len() {
            return Err(bad("the three strings must have one letter per axis, equally many".into()));
        }
        let rhs_spatial: Vec<char> = rhs.chars().filter(|c| !matches!(c, 'O' | 'I')).collect();
        let perm = |spec: &str, pair: (char, char)| -> Result<Axes> {
            let chars: Vec<char> = spec.chars().collect();
            let find = |c: char| chars.iter().position(|&x| x == c);
            let (Some(a), Some(b)) = (find(pair.0), find(pair.1)) else {
                return Err(bad(format!("{spec:?} must contain {} and {}", pair.0, pair.1)));
            };
            let mut v: Axes = smallvec![a, b];
            for c in &rhs_spatial {
                match find(*c) {
                    Some(i) if i != a && i != b => v.push(i),
                    _ => return Err(bad(format!("{spec:?} lacks the spatial axis {c:?} of the rhs"))),
                }
            }
            let mut seen = v.clone();
            seen.sort_unstable();
            if seen.iter().enumerate().any(|(i, &x)| i != x) {
                return Err(bad(format!("{spec:?} repeats a letter")));
            }
            Ok(v)
        };
        Ok(ConvDims { lhs: perm(lhs, ('N', 'C'))?, rhs: perm(rhs, ('O', 'I'))?, out: perm(out, ('N', 'C'))? })
    }
}

/// The static parameters of `conv_general_dilated` (per spatial axis, in
/// the rhs's spatial order: [`ConvDims`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvParams {
    /// Window strides.
    pub strides: Axes,
    /// Explicit `(low, high)` padding of the dilated lhs; negative crops.
    pub padding: Pads,
    /// lhs (input) dilation: a transposed convolution.
    pub lhs_dilation: Axes,
    /// rhs (kernel) dilation: an atrous convolution.
    pub rhs_dilation: Axes,
    /// Axis roles.
    pub dims: ConvDims,
    /// Feature groups (`C` and `O` split into this many groups).
    pub feature_group_count: usize,
    /// Batch groups (`N` and `O` split into this many groups).
    pub batch_group_count: usize,
}

impl fmt::Display for ConvParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "strides={:?} padding={:?} lhs_dilation={:?} rhs_dilation={:?} dims=({:?},{:?},{:?})",
            self.strides.as_slice(),
            self.padding.as_slice(),
            self.lhs_dilation.as_slice(),
            self.rhs_dilation.as_slice(),
            self.dims.lhs.as_slice(),
            self.dims.rhs.as_slice(),
            self.dims.out.as_slice()
        )?;
        if self.feature_group_count != 1 {
            write!(f, " feature_group_count={}", self.feature_group_count)?;
        }
        if self.batch_group_count != 1 {
            write!(f, " batch_group_count={}", self.batch_group_count)?;
        }
        Ok(())
    }
}

/// What users pass to [`conv_general_dilated`]: [`ConvParams`] with
/// [`Padding`] that may still be SAME or VALID, and empty vectors meaning
/// "1 on every spatial axis". `Default` is a stride-1, VALID,
/// channels-first convolution without groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvOptions {
    /// Window strides (empty: all 1).
    pub strides: Vec<usize>,
    /// Padding.
    pub padding: Padding,
    /// lhs dilation (empty: all 1).
    pub lhs_dilation: Vec<usize>,
    /// rhs dilation (empty: all 1).
    pub rhs_dilation: Vec<usize>,
    /// Axis roles (`None`: channels-first).
    pub dims: Option<ConvDims>,
    /// Feature groups.
    pub feature_group_count: usize,
    /// Batch groups.
    pub batch_group_count: usize,
}

impl Default for ConvOptions {
    fn default() -> ConvOptions {
        ConvOptions {
            strides: Vec::new(),
            padding: Padding::Valid,
            lhs_dilation: Vec::new(),
            rhs_dilation: Vec::new(),
            dims: None,
            feature_group_count: 1,
            batch_group_count: 1,
        }
    }
}

const OP: &str = "conv_general_dilated";

/// The convolution of `lhs` and `rhs` (XLA's `ConvGeneralDilated`, JAX's
/// `lax.conv_general_dilated`), with SAME and VALID padding resolved
/// against the operands' shapes as JAX does.
pub fn conv_general_dilated(lhs: &Tensor, rhs: &Tensor, o: &ConvOptions) -> Result<Tensor> {
    if lhs.rank() != rhs.rank() || lhs.rank() < 2 {
        return Err(Error::shape(
            OP,
            "lhs and rhs must have the same rank, at least 2 (batch and feature axes)",
            &[&lhs.shape(), &rhs.shape()],
        ));
    }
    let n = lhs.rank() - 2;
    let dims = o.dims.clone().unwrap_or_else(|| ConvDims::channels_first(n));
    let ones = |v: &[usize]| -> Axes {
        if v.is_empty() {
            smallvec![1; n]
        } else {
            v.into()
        }
    };
    let strides = ones(&o.strides);
    let (lhs_dilation, rhs_dilation) = (ones(&o.lhs_dilation), ones(&o.rhs_dilation));
    let padding: Pads = match &o.padding {
        Padding::Explicit(p) => p.iter().copied().collect(),
        pad => {
            pad.check_no_lhs_dilation(OP, &lhs_dilation)?;
            check_dims(&dims, lhs.rank())?;
            let (ls, rs) = (lhs.shape(), rhs.shape());
            let input: Vec<usize> = (0..n).map(|i| ls[dims.lhs[2 + i]]).collect();
            let window: Vec<usize> = (0..n).map(|i| rs[dims.rhs[2 + i]]).collect();
            pad.resolve_dilated(OP, &input, &lhs_dilation, &window, &rhs_dilation, &strides)?.into_iter().collect()
        }
    };
    let p = ConvParams {
        strides,
        padding,
        lhs_dilation,
        rhs_dilation,
        dims,
        feature_group_count: o.feature_group_count,
        batch_group_count: o.batch_group_count,
    };
    bind_conv(lhs, rhs, p)
}

fn bind_conv(lhs: &Tensor, rhs: &Tensor, p: ConvParams) -> Result<Tensor> {
    crate::interp::bind1(&ConvOp::ConvGeneralDilated(p).into(), &[lhs.clone(), rhs.clone()])
}

// ---- shape rule ------------------------------------------------------------------

fn check_dims(d: &ConvDims, rank: usize) -> Result<()> {
    for (name, spec) in [("lhs", &d.lhs), ("rhs", &d.rhs), ("out", &d.out)] {
        let mut s = spec.clone();
        s.sort_unstable();
        if s.len() != rank || s.iter().enumerate().any(|(i, &x)| i != x) {
            return Err(Error::invalid(
                OP,
                format!("{name} dimension numbers {:?} are not a permutation of the {rank} axes", spec.as_slice()),
            ));
        }
    }
    if rank > SPATIAL + 2 {
        return Err(Error::invalid(OP, format!("{} spatial axes: at most {SPATIAL} are supported", rank - 2)));
    }
    Ok(())
}

/// Checks the operands and parameters; returns the output shape and the
/// canonical geometry.
fn geometry(p: &ConvParams, ls: &Shape, rs: &Shape) -> Result<(Shape, ConvGeometry)> {
    let shape_err = |why: String| Error::shape(OP, why, &[ls, rs]);
    if ls.rank() != rs.rank() || ls.rank() < 2 {
        return Err(shape_err("lhs and rhs must have the same rank, at least 2 (batch and feature axes)".into()));
    }
    let rank = ls.rank();
    check_dims(&p.dims, rank)?;
    let n = rank - 2;
    for (what, len) in [
        ("strides", p.strides.len()),
        ("padding", p.padding.len()),
        ("lhs_dilation", p.lhs_dilation.len()),
        ("rhs_dilation", p.rhs_dilation.len()),
    ] {
        if len != n {
            return Err(Error::invalid(OP, format!("{what} has {len} entries for {n} spatial axes ({p})")));
        }
    }
    for (what, v) in [("strides", &p.strides), ("lhs_dilation", &p.lhs_dilation), ("rhs_dilation", &p.rhs_dilation)] {
        if v.contains(&0) {
            return Err(Error::invalid(OP, format!("{what} {:?} must be positive", v.as_slice())));
        }
    }
    let (fg, bg) = (p.feature_group_count, p.batch_group_count);
    if fg == 0 || bg == 0 {
        return Err(Error::invalid(
            OP,
            format!("feature_group_count {fg} and batch_group_count {bg} must be positive"),
        ));
    }
    if fg > 1 && bg > 1 {
        return Err(Error::invalid(
            OP,
            format!("feature_group_count {fg} and batch_group_count {bg} cannot both exceed 1"),
        ));
    }
    let d = &p.dims;
    let (batch, c) = (ls[d.lhs[0]], ls[d.lhs[1]]);
    let (o, ci) = (rs[d.rhs[0]], rs[d.rhs[1]]);
    if !c.is_multiple_of(fg) {
        return Err(shape_err(format!("lhs features {c} are not divisible by feature_group_count {fg}")));
    }
    if c / fg != ci {
        return Err(shape_err(format!(
            "lhs features {c} / feature_group_count {fg} = {} must equal the rhs input features {ci}",
            c / fg
        )));
    }
    if !o.is_multiple_of(fg) {
        return Err(shape_err(format!("rhs output features {o} are not divisible by feature_group_count {fg}")));
    }
    if !batch.is_multiple_of(bg) {
        return Err(shape_err(format!("lhs batch {batch} is not divisible by batch_group_count {bg}")));
    }
    if !o.is_multiple_of(bg) {
        return Err(shape_err(format!("rhs output features {o} are not divisible by batch_group_count {bg}")));
    }
    // Canonical spatial axes: the leading ones of size 1.
    let lead = SPATIAL - n;
    let mut g = ConvGeometry {
        batch,
        in_features: c,
        out_features: o,
        feature_groups: fg,
        batch_groups: bg,
        input: [1; SPATIAL],
        kernel: [1; SPATIAL],
        output: [1; SPATIAL],
        stride: [1; SPATIAL],
        pad_lo: [0; SPATIAL],
        pad_hi: [0; SPATIAL],
        lhs_dilation: [1; SPATIAL],
        rhs_dilation: [1; SPATIAL],
    };
    let mut out = vec![0; rank];
    out[d.out[0]] = batch / bg;
    out[d.out[1]] = o;
    for i in 0..n {
        let (inp, win) = (ls[d.lhs[2 + i]], rs[d.rhs[2 + i]]);
        let (lo, hi) = p.padding[i];
        let padded = dilated(inp, p.lhs_dilation[i]) as i128 + lo as i128 + hi as i128;
        let window = dilated(win, p.rhs_dilation[i]) as i128;
        if padded < window {
            return Err(shape_err(format!(
                "spatial axis {i}: the dilated kernel ({window}) is larger than the padded input ({padded}) ({p})"
            )));
        }
        let positions = window_positions(inp, p.lhs_dilation[i], lo, hi, win, p.rhs_dilation[i], p.strides[i])
            .ok_or_else(|| Error::overflow(OP, format!("spatial axis {i} overflows ({p})")))?;
        let a = lead + i;
        g.input[a] = inp;
        g.kernel[a] = win;
        g.output[a] = positions;
        g.stride[a] = p.strides[i];
        g.pad_lo[a] = lo;
        g.pad_hi[a] = hi;
        g.lhs_dilation[a] = p.lhs_dilation[i];
        g.rhs_dilation[a] = p.rhs_dilation[i];
        out[d.out[2 + i]] = positions;
    }
    Ok((Shape::from(out), g))
}

fn shape_conv(p: &ConvParams, ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity(OP, ins, 2)?;
    let (a, b) = (&ins[0], &ins[1]);
    if a.dtype != b.dtype || !a.dtype.is_float() {
        return Err(Error::dtype(OP, "operands must share one floating-point dtype", &[a.dtype, b.dtype]));
    }
    let (shape, _) = geometry(p, a.shape, b.shape)?;
    Ok(smallvec![Aval { shape, dtype: a.dtype, device: a.device }])
}

// ---- JVP and transposes ---------------------------------------------------------

fn jvp_conv(p: &ConvParams, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
    let (a, b) = (&primals[0], &primals[1]);
    let out = bind_conv(a, b, p.clone())?;
    let ta = tangents[0].as_ref().map(|t| bind_conv(t, b, p.clone())).transpose()?;
    let tb = tangents[1].as_ref().map(|t| bind_conv(a, t, p.clone())).transpose()?;
    Ok((smallvec![out], smallvec![lax::add_any(ta, tb)?]))
}

/// JAX's `_reshape_axis_into`: moves axis `src` next to axis `dst` (an
/// index among the other axes) and merges the two, `src` major.
fn axis_into(src: usize, dst: usize, x: &Tensor) -> Result<Tensor> {
    let shape = x.shape();
    let mut perm: Vec<usize> = (0..x.rank()).filter(|&i| i != src).collect();
    perm.insert(dst, src);
    let mut new: Vec<usize> = perm.iter().filter(|&&i| i != src).map(|&i| shape[i]).collect();
    new[dst] *= shape[src];
    lax::reshape(&lax::transpose(x, &perm)?, &Shape::from(new))
}

/// JAX's `_reshape_axis_out_of`: splits axis `src` into `[size, rest]`.
fn axis_out_of(src: usize, size: usize, x: &Tensor) -> Result<Tensor> {
    let mut new = x.shape().to_vec();
    let rest = new[src] / size;
    new.splice(src..=src, [size, rest]);
    lax::reshape(x, &Shape::from(new))
}

/// Swaps the first two roles of a spec (JAX's `_conv_spec_transpose`).
fn spec_transpose(s: &Axes) -> Axes {
    let mut t = s.clone();
    t.swap(0, 1);
    t
}

fn spatial_sizes(shape: &Shape, spec: &Axes) -> Vec<usize> {
    spec[2..].iter().map(|&a| shape[a]).collect()
}

/// The cotangent of the lhs: the cotangent convolved with the reversed
/// kernel, strides and lhs dilation swapped (JAX's
/// `_conv_general_dilated_transpose_lhs`).
fn transpose_lhs(p: &ConvParams, ct: &Tensor, rhs: &Tensor, lhs: &Aval) -> Result<Tensor> {
    let d = &p.dims;
    let (fg, bg) = (p.feature_group_count, p.batch_group_count);
    let mut rhs = rhs.clone();
    let mut groups = fg;
    if fg > 1 || bg > 1 {
        let g = fg.max(bg);
        rhs = axis_out_of(d.rhs[0], g, &rhs)?;
        rhs = axis_into(d.rhs[0], d.rhs[1], &rhs)?;
        groups = g;
    }
    let in_sizes = spatial_sizes(&lhs.shape, &d.lhs);
    let win = spatial_sizes(&rhs.shape(), &d.rhs);
    let out = spatial_sizes(&ct.shape(), &d.out);
    let padding: Pads = (0..in_sizes.len())
        .map(|i| {
            let l = dilated(in_sizes[i], p.lhs_dilation[i]) as i64;
            let r = dilated(win[i], p.rhs_dilation[i]) as i64;
            let o = dilated(out[i], p.strides[i]) as i64;
            let before = r - p.padding[i].0 - 1;
            (before, l + r - 1 - o - before)
        })
        .collect();
    let spatial: Vec<usize> = d.rhs[2..].to_vec();
    let reversed = lax::rev(&rhs, &spatial)?;
    let q = ConvParams {
        strides: p.lhs_dilation.clone(),
        padding,
        lhs_dilation: p.strides.clone(),
        rhs_dilation: p.rhs_dilation.clone(),
        dims: ConvDims { lhs: d.out.clone(), rhs: spec_transpose(&d.rhs), out: d.lhs.clone() },
        feature_group_count: groups,
        batch_group_count: 1,
    };
    let mut r = bind_conv(ct, &reversed, q)?;
    if bg > 1 {
        r = axis_out_of(d.lhs[1], bg, &r)?;
        r = axis_into(d.lhs[1], d.lhs[0], &r)?;
    }
    Ok(r)
}

/// The cotangent of the rhs: the lhs correlated with the cotangent, roles
/// of batch and features swapped, feature and batch groups swapped (JAX's
/// `_conv_general_dilated_transpose_rhs`).
fn transpose_rhs(p: &ConvParams, ct: &Tensor, lhs: &Tensor, rhs: &Aval) -> Result<Tensor> {
    let d = &p.dims;
    if ct.shape().numel() == 0 {
        return lax::zeros_aval(rhs);
    }
    let (fg, bg) = if p.batch_group_count > 1 { (p.batch_group_count, 1) } else { (1, p.feature_group_count) };
    let in_sizes = spatial_sizes(&lhs.shape(), &d.lhs);
    let win = spatial_sizes(&rhs.shape, &d.rhs);
    let out = spatial_sizes(&ct.shape(), &d.out);
    let padding: Pads = (0..in_sizes.len())
        .map(|i| {
            let l = dilated(in_sizes[i], p.lhs_dilation[i]) as i64;
            let r = dilated(win[i], p.rhs_dilation[i]) as i64;
            let o = dilated(out[i], p.strides[i]) as i64;
            let lo = p.padding[i].0;
            (lo, (o - l) + (r - lo - 1))
        })
        .collect();
    let q = ConvParams {
        strides: p.rhs_dilation.clone(),
        padding,
        lhs_dilation: p.lhs_dilation.clone(),
        rhs_dilation: p.strides.clone(),
        dims: ConvDims { lhs: spec_transpose(&d.lhs), rhs: spec_transpose(&d.out), out: spec_transpose(&d.rhs) },
        feature_group_count: fg,
        batch_group_count: bg,
    };
    bind_conv(lhs, ct, q)
}

fn transpose_conv(p: &ConvParams, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let Some(ct) = &cts[0] else {
        return Ok(smallvec![None, None]);
    };
    match (&args[0], &args[1]) {
        (LinearArg::Linear(a), LinearArg::Const(b)) => Ok(smallvec![Some(transpose_lhs(p, ct, b, a)?), None]),
        (LinearArg::Const(a), LinearArg::Linear(b)) => Ok(smallvec![None, Some(transpose_rhs(p, ct, a, b)?)]),
        _ => Err(Error::transform(
            OP,
            "a convolution is linear in one operand at a time, so it cannot be transposed in both",
        )),
    }
}

/// The kernel's cotangent as patches times the output cotangent (NOTE:
/// [factor]): with `P` the lhs's windows, one row per output position
/// (`[positions, in features x window]`), and `G` the output cotangent
/// (`[positions, out features]`), the kernel's cotangent is `P^T G`.
/// Offered only where the Gram form costs less than forming the kernel's
/// cotangent, counting the patches (a convolution of the lhs with a one-hot
/// kernel, one group per input feature); and only without groups.
fn factor_conv(p: &ConvParams, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<Factor>> {
    let (Some(ct), 1, LinearArg::Const(lhs), LinearArg::Linear(rhs)) = (&cts[0], i, &args[0], &args[1]) else {
        return Ok(None);
    };
    if p.feature_group_count != 1 || p.batch_group_count != 1 {
        return Ok(None);
    }
    let d = &p.dims;
    let (ls, cs) = (lhs.shape(), ct.shape());
    let win = spatial_sizes(&rhs.shape, &d.rhs);
    let w: usize = win.iter().product();
    let c = ls[d.lhs[1]];
    let o = cs[d.out[1]];
    let m = cs[d.out[0]] * spatial_sizes(&cs, &d.out).iter().product::<usize>();
    let k = c * w;
    let (gram, patches, formed) = (
        m.saturating_mul(m).saturating_mul(k + o),
        m.saturating_mul(k).saturating_mul(w),
        m.saturating_mul(k).saturating_mul(o),
    );
    if gram.saturating_add(patches) >= formed {
        return Ok(None);
    }
    // The one-hot kernel [c * w, 1, win...]: output feature `g * w + j` of
    // group `g` (input feature `g`) reads window position `j`.
    let dev = lhs.device();
    let sq = Shape::from(&[c, w, w][..]);
    let eye = lax::convert(
        &lax::eq(&lax::iota(DType::I32, &sq, 1, dev)?, &lax::iota(DType::I32, &sq, 2, dev)?)?,
        lhs.dtype(),
    )?;
    let mut kshape = vec![c * w, 1];
    kshape.extend_from_slice(&win);
    let kernel = lax::reshape(&eye, &Shape::from(kshape))?;
    let q = ConvParams {
        dims: ConvDims { lhs: d.lhs.clone(), rhs: (0..d.rhs.len()).collect(), out: d.out.clone() },
        feature_group_count: c,
        ..p.clone()
    };
    let windows = bind_conv(lhs, &kernel, q)?;
    // Rows: [batch, out spatial...], columns: features.
    let rows: Axes = std::iter::once(d.out[0]).chain(d.out[2..].iter().copied()).chain([d.out[1]]).collect();
    let as_rows = |x: &Tensor, cols: usize| -> Result<Tensor> {
        lax::reshape(&lax::transpose(x, &rows)?, &Shape::from(&[1, m, cols][..]))
    };
    let a = as_rows(&windows, k)?;
    let g = as_rows(ct, o)?;
    // The product [in feature, window..., out feature].
    let axes: Axes = std::iter::once(d.rhs[1]).chain(d.rhs[2..].iter().copied()).chain([d.rhs[0]]).collect();
    let shape = Shape::from(axes.iter().map(|&a| rhs.shape[a]).collect::<Vec<_>>());
    Ok(Some(Factor { rows: FactorRows::Dense(a), ct: g, shape, axes }))
}

// ---- batching --------------------------------------------------------------------

fn batch_conv(p: &ConvParams, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    let (lhs, rhs) = (&ins[0], &ins[1]);
    let d = &p.dims;
    let (fg, bg) = (p.feature_group_count, p.batch_group_count);
    let with_groups = |fg: usize, bg: usize| ConvParams { feature_group_count: fg, batch_group_count: bg, ..p.clone() };
    match (bdims[0], bdims[1]) {
        (Some(lb), Some(rb)) => {
            let b = lhs.shape()[lb];
            let (new_lhs, q) = if bg > 1 {
                (axis_into(lb, d.lhs[0], lhs)?, with_groups(fg, bg * b))
            } else {
                (axis_into(lb, d.lhs[1], lhs)?, with_groups(fg * b, bg))
            };
            let new_rhs = axis_into(rb, d.rhs[0], rhs)?;
            let out = bind_conv(&new_lhs, &new_rhs, q)?;
            Ok((smallvec![axis_out_of(d.out[1], b, &out)?], smallvec![Some(d.out[1])]))
        }
        (Some(lb), None) => {
            let b = lhs.shape()[lb];
            let new_lhs = if bg == 1 {
                axis_into(lb, d.lhs[0], lhs)?
            } else {
                // Batch groups stay outermost: [groups, b * (N / groups)].
                let x = axis_out_of(d.lhs[0] + usize::from(lb <= d.lhs[0]), bg, lhs)?;
                let x = axis_into(lb + usize::from(d.lhs[0] < lb), d.lhs[0] + 1, &x)?;
                axis_into(d.lhs[0], d.lhs[0], &x)?
            };
            let out = bind_conv(&new_lhs, rhs, p.clone())?;
            Ok((smallvec![axis_out_of(d.out[0], b, &out)?], smallvec![Some(d.out[0])]))
        }
        (None, Some(rb)) => {
            let b = rhs.shape()[rb];
            if fg == 1 && bg == 1 {
                let new_rhs = axis_into(rb, d.rhs[0], rhs)?;
                let out = bind_conv(lhs, &new_rhs, p.clone())?;
                return Ok((smallvec![axis_out_of(d.out[1], b, &out)?], smallvec![Some(d.out[1])]));
            }
            // Groups stay outermost in the output features.
            let g = fg.max(bg);
            let x = axis_out_of(d.rhs[0] + usize::from(rb <= d.rhs[0]), g, rhs)?;
            let x = axis_into(rb + usize::from(d.rhs[0] < rb), d.rhs[0] + 1, &x)?;
            let new_rhs = axis_into(d.rhs[0], d.rhs[0], &x)?;
            let out = bind_conv(lhs, &new_rhs, p.clone())?;
            let out = axis_out_of(d.out[1], g, &out)?;
            let out = axis_out_of(d.out[1] + 1, b, &out)?;
            Ok((smallvec![axis_into(d.out[1], d.out[1] + 1, &out)?], smallvec![Some(d.out[1])]))
        }
        (None, None) => Err(Error::invalid(OP, "batch rule called with no batched operand")),
    }
}

// ---- the family ------------------------------------------------------------------

crate::family_enum! {
    /// The convolution primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum ConvOp, kinds ConvKind {
        /// XLA's general dilated convolution.
        ConvGeneralDilated(ConvParams),
    }
}

impl From<ConvOp> for Prim {
    fn from(op: ConvOp) -> Prim {
        Prim::Conv(op)
    }
}

impl Family for ConvOp {
    type Kind = ConvKind;
    const KINDS: &'static [ConvKind] = ConvKind::ALL;

    fn kind(&self) -> ConvKind {
        ConvOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            ConvOp::ConvGeneralDilated(_) => OP,
        }
    }

    fn props(&self) -> Props {
        match self {
            ConvOp::ConvGeneralDilated(_) => Props::NONE.fresh(),
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvOp::ConvGeneralDilated(p) => write!(f, "[{p}]"),
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            ConvOp::ConvGeneralDilated(p) => shape_conv(p, ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        match self {
            ConvOp::ConvGeneralDilated(p) => super::one(lower_conv(p, ins[0], ins[1])),
        }
    }

    fn lower_device(&self, ins: &[&Array], backend: &dyn crate::backend::Backend) -> Result<Outs> {
        match self {
            ConvOp::ConvGeneralDilated(p) => super::one(lower_conv_device(p, ins[0], ins[1], backend)),
        }
    }

    fn jvp(&self, _prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            ConvOp::ConvGeneralDilated(p) => jvp_conv(p, primals, tangents),
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            ConvOp::ConvGeneralDilated(p) => transpose_conv(p, cts, args),
        }
    }

    fn factor(&self, cts: &[Option<Tensor>], args: &[LinearArg], i: usize) -> Result<Option<Factor>> {
        match self {
            ConvOp::ConvGeneralDilated(p) => factor_conv(p, cts, args, i),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], _axis: &BatchAxis) -> Result<(Outs, BDims)> {
        match self {
            ConvOp::ConvGeneralDilated(p) => batch_conv(p, ins, bdims),
        }
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        vec![Sample::new(OP, FLOATS.to_vec(), vec![0, 1], true, |g, dt| {
            let n = g.int(1, 3);
            // Small sizes: the generic tests run finite differences over
            // every element.
            let fg = if g.coin(0.3) { g.int(2, 3) } else { 1 };
            let bg = if fg == 1 && g.coin(0.3) { g.int(2, 3) } else { 1 };
            let batch = bg * g.int(1, 2);
            let c = fg * g.int(1, 2);
            let o = fg * bg * g.int(1, 2);
            let mut p = ConvParams {
                strides: smallvec![],
                padding: smallvec![],
                lhs_dilation: smallvec![],
                rhs_dilation: smallvec![],
                dims: ConvDims { lhs: g.perm(n + 2).into(), rhs: g.perm(n + 2).into(), out: g.perm(n + 2).into() },
                feature_group_count: fg,
                batch_group_count: bg,
            };
            let (mut inp, mut win) = (Vec::new(), Vec::new());
            for _ in 0..n {
                let k = g.int(1, if n == 3 { 2 } else { 3 });
                let rd = if g.coin(0.3) { 2 } else { 1 };
                let ld = if g.coin(0.25) { 2 } else { 1 };
                let i = g.int(1, if n == 3 { 3 } else { 4 });
                let lo = g.int(0, 3) as i64 - 1;
                let dk = dilated(k, rd) as i64;
                let di = dilated(i, ld) as i64;
                // At least one window position.
                let hi_min = (dk - di - lo).max(-1);
                let hi = hi_min + g.int(0, 2) as i64;
                p.strides.push(g.int(1, 2));
                p.padding.push((lo, hi));
                p.lhs_dilation.push(ld);
                p.rhs_dilation.push(rd);
                inp.push(i);
                win.push(k);
            }
            let place = |spec: &Axes, lead: [usize; 2], sp: &[usize]| -> Vec<usize> {
                let mut s = vec![0; spec.len()];
                s[spec[0]] = lead[0];
                s[spec[1]] = lead[1];
                for (i, &a) in spec[2..].iter().enumerate() {
                    s[a] = sp[i];
                }
                s
            };
            let ls = place(&p.dims.lhs, [batch, c], &inp);
            let rs = place(&p.dims.rhs, [o, c / fg], &win);
            let dom = Dom::Real(-2.0, 2.0);
            Case::new(ConvOp::ConvGeneralDilated(p), vec![(ls, dt, dom), (rs, dt, dom)])
        })]
    }

    fn cuda_kernels(_: DType) -> Vec<Kernel> {
        // The convolution kernels are structural (the kernels crate's catalog).
        Vec::new()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        JitProps { graph_capture: false, sink: true, thread_bound: false, lower_into: false }
    }

    /// Rows do not pass: the split keeps its operands whole.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::no_rows(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimension_numbers_follow_jax() {
        // lax.conv_dimension_numbers((1,2,3,4), (5,6,7,8), ('NHWC', 'HWIO', 'NHWC'))
        //   == ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2))
        let d = ConvDims::from_strings("NHWC", "HWIO", "NHWC").unwrap();
        assert_eq!(
            (d.lhs.as_slice(), d.rhs.as_slice(), d.out.as_slice()),
            (&[0, 3, 1, 2][..], &[3, 2, 0, 1][..], &[0, 3, 1, 2][..])
        );
        let d = ConvDims::from_strings("NCHW", "OIHW", "NCHW").unwrap();
        assert_eq!(d, ConvDims::channels_first(2));
        assert!(ConvDims::from_strings("NCHW", "OIH", "NCHW").is_err());
        assert!(ConvDims::from_strings("NCHH", "OIHW", "NCHW").is_err());
    }
}
