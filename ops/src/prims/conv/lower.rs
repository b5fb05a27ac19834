//! Lowering of `conv_general_dilated`: the operands described in the roles
//! of [`ConvGeometry`], read in place or as canonical copies (see the
//! parent module's docs), then the CPU kernel or a device backend's (cuDNN
//! on CUDA).

use super::{geometry, ConvParams, OP};
use crate::array::Array;
use crate::backend::Backend;
use crate::error::Result;
use xform_kernels::conv_geom::{ConvGeometry, SPATIAL};
use xform_kernels::cpu::conv::{self as kconv, OutLayout};
use xform_kernels::cpu::Par;
use xform_kernels::{CpuBuffer, DType, Layout, Shape};

/// `x` with its axes in `spec` order, contiguous, seen as 5-d canonical.
fn canonical(x: &Array, spec: &[usize], lead: [usize; 2]) -> Result<Array> {
    let v = x.with_layout(x.layout.permute(spec)).contiguous()?;
    let mut shape: Vec<usize> = lead.to_vec();
    shape.extend(std::iter::repeat_n(1, SPATIAL + 2 - spec.len()));
    shape.extend(spec[2..].iter().map(|&a| x.shape()[a]));
    let mut layout = Layout::contiguous(Shape::from(shape));
    layout.offset = v.layout.offset;
    Ok(v.with_layout(layout))
}

/// The convolution of CPU operands.
pub(super) fn lower_conv(p: &ConvParams, lhs: &Array, rhs: &Array) -> Result<Array> {
    conv_with(p, lhs, rhs, |g, shape| {
        let d = &p.dims;
        Ok(match lhs.dtype {
            DType::F32 | DType::F64 => conv_cpu((lhs, &d.lhs), (rhs, &d.rhs), g, shape)?,
            _ => {
                // Compute in f32, round once.
                let wide = |x: &Array, spec: &[usize], lead: [usize; 2]| {
                    crate::prims::elementwise::lower_convert(DType::F32, &canonical(x, spec, lead)?)
                };
                let l = wide(lhs, &d.lhs, [g.batch, g.in_features])?;
                let r = wide(rhs, &d.rhs, [g.out_features, g.group_in_features()])?;
                let id: Vec<usize> = (0..SPATIAL + 2).collect();
                let (out, major) = conv_cpu((&l, &id), (&r, &id), g, shape)?;
                (crate::prims::elementwise::lower_convert(lhs.dtype, &out)?, major)
            }
        })
    })
}

/// The convolution of operands on `backend`'s device: canonical copies,
/// then its kernel (batch-major).
pub(super) fn lower_conv_device(p: &ConvParams, lhs: &Array, rhs: &Array, backend: &dyn Backend) -> Result<Array> {
    conv_with(p, lhs, rhs, |g, shape| {
        let d = &p.dims;
        let l = canonical(lhs, &d.lhs, [g.batch, g.in_features])?;
        let r = canonical(rhs, &d.rhs, [g.out_features, g.group_in_features()])?;
        Ok((backend.conv(&l, &r, g, shape(OutLayout::BatchMajor))?, OutLayout::BatchMajor))
    })
}

/// The geometry, the result's canonical shape and the permutation back to
/// the requested output layout around `core`, which computes the result
/// in the roles' order (batch- or feature-major, as it says).
fn conv_with(
    p: &ConvParams,
    lhs: &Array,
    rhs: &Array,
    core: impl FnOnce(&ConvGeometry, &dyn Fn(OutLayout) -> Shape) -> Result<(Array, OutLayout)>,
) -> Result<Array> {
    let (out_shape, g) = geometry(p, lhs.shape(), rhs.shape())?;
    let d = &p.dims;
    // The result's leading axes in role order: [N/bg, O, spatial...], or
    // [O, N/bg, spatial...] where the CPU kernel summed by feature.
    let lead = |major: OutLayout| match major {
        OutLayout::BatchMajor => [g.out_batch(), g.out_features],
        OutLayout::FeatureMajor => [g.out_features, g.out_batch()],
    };
    let shape = |major: OutLayout| -> Shape {
        let mut canon: Vec<usize> = lead(major).to_vec();
        canon.extend(d.out[2..].iter().map(|&a| out_shape[a]));
        Shape::from(canon)
    };
    let (result, major) = core(&g, &shape)?;
    // Role j of the output sits at axis `at[j]` of the result.
    let mut at: Vec<usize> = (0..out_shape.rank()).collect();
    if major == OutLayout::FeatureMajor {
        at.swap(0, 1);
    }
    let mut perm = vec![0; out_shape.rank()];
    for (j, &axis) in d.out.iter().enumerate() {
        perm[axis] = at[j];
    }
    Ok(result.with_layout(result.layout.permute(&perm)))
}

/// `x`'s offset and the strides of its two leading roles (axes `spec[0]`
/// and `spec[1]`), where its spatial axes (`spec[2..]`, in that order) form
/// one contiguous block and those strides are not negative: the kernel
/// reads such a view in place.
fn in_place_roles(x: &Array, spec: &[usize]) -> Option<(usize, [usize; 2])> {
    let (shape, strides) = (x.shape(), &x.layout.strides);
    let mut block = 1isize;
    for &a in spec[2..].iter().rev() {
        if shape[a] != 1 && strides[a] != block {
            return None;
        }
        block *= shape[a] as isize;
    }
    // A stride of a size-1 axis is never followed.
    let lead = |a: usize| if shape[a] == 1 { Some(0) } else { usize::try_from(strides[a]).ok() };
    Some((x.layout.offset, [lead(spec[0])?, lead(spec[1])?]))
}

/// The CPU convolution of f32 or f64 operands with their axes in role order
/// `spec`: views read in place where [`in_place_roles`] allows, otherwise
/// canonical copies; the result has shape `shape(layout)`.
fn conv_cpu(
    (lhs, ls): (&Array, &[usize]),
    (rhs, rs): (&Array, &[usize]),
    g: &ConvGeometry,
    shape: impl Fn(OutLayout) -> Shape,
) -> Result<(Array, OutLayout)> {
    let work = g.out_len() * g.group_in_features() * g.kernel.iter().product::<usize>();
    let par = Par::for_work(work, 1);
    let operand = |x: &Array, spec: &[usize], lead: [usize; 2]| -> Result<(Array, usize, [usize; 2])> {
        if let Some((offset, strides)) = in_place_roles(x, spec) {
            return Ok((x.clone(), offset, strides));
        }
        let c = canonical(x, spec, lead)?;
        let block: usize = c.shape()[2..].iter().product();
        let offset = c.layout.offset;
        Ok((c, offset, [lead[1] * block, block]))
    };
    let (l, lo, lst) = operand(lhs, ls, [g.batch, g.in_features])?;
    let (r, ro, rst) = operand(rhs, rs, [g.out_features, g.group_in_features()])?;
    let (gl, gr) = (l.read(), r.read());
    let (bl, br) = (gl.cpu(OP)?, gr.cpu(OP)?);
    let (out, major) = match (bl, br) {
        (CpuBuffer::F32(x), CpuBuffer::F32(w)) => {
            let (out, major) = kconv::conv(
                kconv::Operand { data: x, offset: lo, strides: lst },
                kconv::Operand { data: w, offset: ro, strides: rst },
                g,
                par,
            );
            (CpuBuffer::F32(out), major)
        }
        (CpuBuffer::F64(x), CpuBuffer::F64(w)) => {
            let (out, major) = kconv::conv(
                kconv::Operand { data: x, offset: lo, strides: lst },
                kconv::Operand { data: w, offset: ro, strides: rst },
                g,
                par,
            );
            (CpuBuffer::F64(out), major)
        }
        _ => unreachable!("f32 or f64 by the caller"),
    };
    Ok((Array::from_cpu(out, shape(major)), major))
}
