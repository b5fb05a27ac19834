//! The forward convolution on CUDA: cuDNN when the library loads and takes
//! the case (see [`super::cudnn`]), else the generated direct kernel
//! ([`crate::cuda_source::conv`]), which handles every option.
//!
//! Operands are contiguous buffers in the canonical layouts of
//! [`crate::conv_geom`] (lhs `[N, C, D, H, W]`, rhs `[O, C/fg, KD, KH, KW]`)
//! starting at element 0; the result is a fresh contiguous `[N/bg, O, OD,
//! OH, OW]`. `XFORM_CUDNN=0` in the environment forces the direct kernel.

use super::buffer::CudaBuffer;
use super::cudnn;
use super::device::CudaDevice;
use super::error::{CudaError, Result};
use super::exec;
use super::source::conv::ConvParams;
use crate::conv_geom::{window_positions, ConvGeometry, SPATIAL};
use crate::dtype::DType;
use crate::layout::Layout;
use cudarc::driver::DeviceRepr;
use std::sync::Arc;

// SAFETY: `ConvParams` is a plain `#[repr(C)]` struct of i64s whose layout
// matches `XfConv` in the generated source; it is passed by value.
unsafe impl DeviceRepr for ConvParams {}

/// Which implementation [`conv_forward_with`] may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPath {
    /// cuDNN if it loads and takes the case, else the direct kernel (what
    /// [`conv_forward`] does unless `XFORM_CUDNN=0`).
    Auto,
    /// The generated direct kernel only.
    Kernel,
    /// cuDNN only: an error if it is absent or declines the case.
    Cudnn,
}

/// Checks that `g` is a well-formed canonical geometry (positive strides,
/// dilations and group counts, divisible feature counts, output sizes that
/// follow from the rest). `Err` names the first problem.
pub fn check_geometry(g: &ConvGeometry) -> std::result::Result<(), String> {
    let (fg, bg) = (g.feature_groups, g.batch_groups);
    if fg == 0 || bg == 0 || (fg > 1 && bg > 1) {
        return Err(format!("feature_group_count {fg} and batch_group_count {bg}: both >= 1 and one of them 1"));
    }
    if !g.in_features.is_multiple_of(fg) || !g.out_features.is_multiple_of(fg) {
        return Err(format!(
            "{} lhs and {} rhs features are not divisible by {fg} feature groups",
            g.in_features, g.out_features
        ));
    }
    if !g.batch.is_multiple_of(bg) || !g.out_features.is_multiple_of(bg) {
        return Err(format!(
            "batch {} and {} output features are not divisible by {bg} batch groups",
            g.batch, g.out_features
        ));
    }
    for ax in 0..SPATIAL {
        if g.stride[ax] == 0 || g.lhs_dilation[ax] == 0 || g.rhs_dilation[ax] == 0 {
            return Err(format!("axis {ax}: strides and dilations must be positive"));
        }
        let want = window_positions(
            g.input[ax],
            g.lhs_dilation[ax],
            g.pad_lo[ax],
            g.pad_hi[ax],
            g.kernel[ax],
            g.rhs_dilation[ax],
            g.stride[ax],
        );
        if want != Some(g.output[ax]) {
            return Err(format!("axis {ax}: output size {} where the geometry gives {want:?}", g.output[ax]));
        }
    }
    Ok(())
}

/// True unless `XFORM_CUDNN` is set to `0` (or `false`/`off`).
pub fn cudnn_enabled() -> bool {
    !matches!(std::env::var("XFORM_CUDNN").as_deref().map(str::trim), Ok("0" | "false" | "off"))
}

fn check_operands(lhs: &CudaBuffer, rhs: &CudaBuffer, g: &ConvGeometry, dtype: DType) -> Result<Arc<CudaDevice>> {
    check_geometry(g).map_err(|m| CudaError::unsupported(format!("conv_general_dilated: {m}")))?;
    if lhs.dtype() != dtype || rhs.dtype() != dtype {
        return Err(CudaError::unsupported(format!(
            "conv_general_dilated of {} and {} as {dtype}",
            lhs.dtype(),
            rhs.dtype()
        )));
    }
    if lhs.len() < g.lhs_len() || rhs.len() < g.rhs_len() {
        return Err(CudaError::unsupported(format!(
            "conv_general_dilated: buffers of {} and {} elements for an lhs of {} and an rhs of {}",
            lhs.len(),
            rhs.len(),
            g.lhs_len(),
            g.rhs_len()
        )));
    }
    if lhs.ordinal() != rhs.ordinal() {
        return Err(CudaError::unsupported(format!(
            "operands on different devices (cuda:{} and cuda:{})",
            lhs.ordinal(),
            rhs.ordinal()
        )));
    }
    Ok(lhs.device().clone())
}

/// `conv_general_dilated` of the contiguous canonical operands `lhs` and
/// `rhs`, each starting at element 0 of its buffer (see
/// [`conv_forward_layouts`] for views), dtype `dtype` (f32, f64, f16 or
/// bf16), with geometry `g`: cuDNN
/// where it loads and supports the case, else the generated kernel. The
/// result is a fresh contiguous `[N/bg, O, OD, OH, OW]`.
///
/// # Errors
/// A malformed geometry, mismatched dtypes or short buffers
/// ([`CudaError::Unsupported`]), a dtype without a kernel, and device,
/// NVRTC or allocation failures.
pub fn conv_forward(lhs: &CudaBuffer, rhs: &CudaBuffer, g: &ConvGeometry, dtype: DType) -> Result<CudaBuffer> {
    let path = if cudnn_enabled() { ConvPath::Auto } else { ConvPath::Kernel };
    conv_forward_with(lhs, rhs, g, dtype, path)
}

/// [`conv_forward`] over operands given with their layouts (the other
/// launchers' convention): each must hold the canonical operand's elements
/// in row-major order; a view that does not start at element 0 of its
/// buffer, or is not contiguous, is copied first.
///
/// # Errors
/// As [`conv_forward`], and a layout whose size is not the operand's.
pub fn conv_forward_layouts(
    lhs: &CudaBuffer,
    ll: &Layout,
    rhs: &CudaBuffer,
    lr: &Layout,
    g: &ConvGeometry,
    dtype: DType,
) -> Result<CudaBuffer> {
    if ll.numel() != g.lhs_len() || lr.numel() != g.rhs_len() {
        return Err(CudaError::unsupported(format!(
            "conv_general_dilated: operands of shapes {} and {} for an lhs of {} and an rhs of {} elements",
            ll.shape,
            lr.shape,
            g.lhs_len(),
            g.rhs_len()
        )));
    }
    let at_zero = |l: &Layout, n: usize| l.contiguous_range() == Some(0..n);
    let (lc, rc);
    let lhs = if at_zero(ll, g.lhs_len()) {
        lhs
    } else {
        lc = exec::to_contiguous(lhs, ll)?;
        &lc
    };
    let rhs = if at_zero(lr, g.rhs_len()) {
        rhs
    } else {
        rc = exec::to_contiguous(rhs, lr)?;
        &rc
    };
    conv_forward(lhs, rhs, g, dtype)
}

/// [`conv_forward`] restricted to one implementation (tests compare them).
pub fn conv_forward_with(
    lhs: &CudaBuffer,
    rhs: &CudaBuffer,
    g: &ConvGeometry,
    dtype: DType,
    path: ConvPath,
) -> Result<CudaBuffer> {
    let dev = check_operands(lhs, rhs, g, dtype)?;
    let n = g.out_len();
    if n == 0 {
        return CudaBuffer::alloc(&dev, dtype, 0);
    }
    match path {
        ConvPath::Kernel => direct(&dev, lhs, rhs, g, dtype),
        ConvPath::Cudnn => cudnn::conv_forward(&dev, lhs, rhs, g, dtype),
        ConvPath::Auto => {
            if cudnn::available() {
                // Any cuDNN failure (an unsupported case, a missing engine, a
                // workspace that does not fit) falls back to the kernel.
                if let Ok(y) = cudnn::conv_forward(&dev, lhs, rhs, g, dtype) {
                    return Ok(y);
                }
            }
            direct(&dev, lhs, rhs, g, dtype)
        }
    }
}

/// The generated direct kernel ([`crate::cuda_launch::conv`]'s plan).
fn direct(
    dev: &Arc<CudaDevice>,
    lhs: &CudaBuffer,
    rhs: &CudaBuffer,
    g: &ConvGeometry,
    dtype: DType,
) -> Result<CudaBuffer> {
    // `check_operands` verified the dtypes and that the buffers hold the
    // canonical lhs and rhs, and `check_geometry` that every index the
    // kernel forms stays inside them
    let plan = crate::cuda_launch::conv(g, dtype)?;
    let mut out = exec::run(dev, &plan, &[lhs, rhs], None)?;
    Ok(out.swap_remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda_source::conv::test_cases::geom;

    #[test]
    fn malformed_geometries_are_named() {
        let ok = geom((2, 4, 4, 2, 1), [1, 5, 5], [1, 3, 3], [1; 3], [(0, 0); 3], [1; 3], [1; 3]);
        let bad = |f: &dyn Fn(&mut ConvGeometry)| {
            let mut g = ok.clone();
            f(&mut g);
            check_geometry(&g).unwrap_err()
        };
        assert!(bad(&|g| g.feature_groups = 3).contains("not divisible by 3 feature groups"));
        assert!(bad(&|g| g.batch_groups = 2).contains("one of them 1"));
        assert!(bad(&|g| g.stride[1] = 0).contains("positive"));
        assert!(bad(&|g| g.output[2] = 4).contains("output size 4"));
    }
}
