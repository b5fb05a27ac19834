//! The launch of a fused elementwise kernel ([`crate::cuda_source::fused_kernel`]).

use super::params::too_many_dims;
use super::{unsupported, Arg, Buf, IterParamsOf, Plan, Ptr, Result};
use crate::cuda_source::{Kernel, MAX_DIMS, MAX_FUSED_INPUTS, MAX_FUSED_OUTPUTS};
use crate::dtype::DType;
use crate::layout::{coalesce_into, Layout, Strides};

/// The iteration parameters of a fused kernel (`XfFused`).
pub type FusedParams = IterParamsOf<MAX_FUSED_INPUTS>;

/// Operands of one shape, simplified for iteration as the map kernels'
/// (`layout::coalesce_into`), for any number of operands.
fn coalesce(shape: &[usize], layouts: &[&Layout]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut strides = vec![Strides::new(); layouts.len()];
    let dims = coalesce_into(shape, |k, d| layouts[k].strides[d], &mut strides);
    (dims.to_vec(), strides.into_iter().map(|s| s.to_vec()).collect())
}

/// Runs the fused kernel `kernel`, generated for inputs of dtypes
/// `in_dtypes` writing outputs of dtypes `outs`, over operands `Input(k)`
/// of dtypes and layouts `ins[k]` and logical shape `shape`; the outputs
/// are fresh and contiguous.
///
/// # Errors
/// Operands that do not match the kernel (count, dtype, shape) or a
/// merged rank over `MAX_DIMS`.
pub fn fused(
    kernel: &Kernel,
    in_dtypes: &[DType],
    ins: &[(DType, &Layout)],
    shape: &[usize],
    outs: &[DType],
) -> Result<Plan> {
    let mismatch = || unsupported(format!("operands that {} was not generated for", kernel.name));
    if ins.is_empty() || ins.len() != in_dtypes.len() || ins.len() > MAX_FUSED_INPUTS {
        return Err(mismatch());
    }
    if outs.is_empty() || outs.len() > MAX_FUSED_OUTPUTS {
        return Err(mismatch());
    }
    if ins.iter().zip(in_dtypes).any(|((d, l), want)| d != want || l.shape[..] != shape[..]) {
        return Err(mismatch());
    }
    let n: usize = shape.iter().product();
    let mut plan = Plan::default();
    let ys: Vec<usize> = outs.iter().map(|&d| plan.temp(d, n)).collect();
    plan.outputs = ys.clone();
    if n == 0 {
        return Ok(plan);
    }
    let layouts: Vec<&Layout> = ins.iter().map(|(_, l)| *l).collect();
    let (dims, strides) = coalesce(shape, &layouts);
    if dims.len() > MAX_DIMS {
        return Err(too_many_dims(dims.len()));
    }
    let mut p = Box::new(FusedParams {
        n: n as i64,
        rank: dims.len() as i32,
        pad: 0,
        shape: [0; MAX_DIMS],
        strides: [[0; MAX_DIMS]; MAX_FUSED_INPUTS],
        offsets: [0; MAX_FUSED_INPUTS],
    });
    for (d, &m) in p.shape.iter_mut().zip(&dims) {
        *d = m as i64;
    }
    for (k, (s, l)) in strides.iter().zip(&layouts).enumerate() {
        for (d, &v) in p.strides[k].iter_mut().zip(s) {
            *d = v as i64;
        }
        p.offsets[k] = l.offset as i64;
    }
    let mut args: Vec<Arg> = ys.iter().map(|&y| Arg::Ptr(Ptr::at(Buf::Temp(y)))).collect();
    args.extend((0..ins.len()).map(|k| Arg::Ptr(Ptr::at(Buf::Input(k)))));
    args.push(Arg::Fused(p));
    plan.launch_1d(kernel.clone(), n, args);
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Shape;

    /// Merging follows `Coalesced`: a contiguous operand and a row
    /// broadcast over [4, 3, 5] keep the broadcast axis apart.
    #[test]
    fn coalesces_like_the_map_kernels() {
        let full = Layout::contiguous(Shape::from([4, 3, 5]));
        let row = Layout { shape: Shape::from([4, 3, 5]), strides: [0, 5, 1].into_iter().collect(), offset: 2 };
        let (dims, strides) = coalesce(&[4, 3, 5], &[&full, &row]);
        assert_eq!(dims, vec![4, 15]);
        assert_eq!(strides, vec![vec![15, 1], vec![0, 1]]);
        let (dims, _) = coalesce(&[4, 3, 5], &[&full, &full]);
        assert_eq!(dims, vec![60]);
        let (dims, strides) = coalesce(&[], &[&Layout::contiguous(Shape::scalar())]);
        assert_eq!((dims, strides), (vec![1], vec![vec![1]]));
    }
}
