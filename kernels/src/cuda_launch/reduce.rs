//! The reduction launches: reductions over axes, arg-reductions along one
//! axis, running folds.

use super::params::{iter_params, red_params};
use super::{unsupported, Arg, Buf, Launch, Plan, Ptr, Result, Step, BLOCK, MAX_BLOCKS};
use crate::cuda_source::{self as source, Fold, Kernel, Ranking};
use crate::dtype::DType;
use crate::layout::{Dims, Layout, Strides};

/// One block per output element (grid-stride over the outputs): 32
/// threads for short reductions, [`BLOCK`] for long ones.
fn launch_per_output(kernel: Kernel, nout: usize, nred: usize, args: Vec<Arg>) -> Step {
    let threads = if nred <= 512 { 32 } else { BLOCK };
    Step::Launch(Launch {
        kernel,
        grid: [nout.clamp(1, MAX_BLOCKS) as u32, 1, 1],
        block: [threads, 1, 1],
        grid_stride: true,
        args,
    })
}

fn check_axes(l: &Layout, axes: &[usize]) -> Result<()> {
    match axes.iter().find(|&&a| a >= l.rank()) {
        Some(a) => Err(unsupported(format!("reducing axis {a} of {}", l.shape))),
        None => Ok(()),
    }
}

/// Reduces a `d` operand laid out as `l` over `axes` with `f`; the result
/// (dtype `out`) has the kept axes, row-major.
pub fn reduce(f: &Fold, d: DType, l: &Layout, axes: &[usize], out: DType) -> Result<Plan> {
    check_axes(l, axes)?;
    let (ks, kt, rs, rt) = l.split_axes(axes);
    let p = red_params(&ks, &kt, &rs, &rt, l.offset)?;
    let mut plan = Plan::default();
    let y = plan.temp(out, p.nout as usize);
    if p.nout > 0 {
        let args = vec![Arg::Ptr(Ptr::at(Buf::Temp(y))), Arg::Ptr(Ptr::at(Buf::Input(0))), Arg::Red(Box::new(p))];
        let kernel = source::reduce_kernel(f, d, out);
        plan.steps.push(launch_per_output(kernel, p.nout as usize, p.nred as usize, args));
    }
    Ok(plan.with_output(y))
}

/// Index (dtype `index`) of the first extreme element along `axis` under
/// `r` (NaN counts as extreme) of a `d` operand laid out as `l`; the
/// result has `axis` removed.
pub fn arg_reduce(r: &Ranking, d: DType, l: &Layout, axis: usize, index: DType) -> Result<Plan> {
    check_axes(l, &[axis])?;
    let (ks, kt, _, _) = l.split_axes(&[axis]);
    let mut p = red_params(&ks, &kt, &[], &[], l.offset)?;
    p.nred = l.shape[axis] as i64;
    p.rrank = 1;
    p.rshape[0] = l.shape[axis] as i64;
    p.rstride[0] = l.strides[axis] as i64;
    let mut plan = Plan::default();
    let y = plan.temp(index, p.nout as usize);
    if p.nout > 0 {
        let args = vec![Arg::Ptr(Ptr::at(Buf::Temp(y))), Arg::Ptr(Ptr::at(Buf::Input(0))), Arg::Red(Box::new(p))];
        let kernel = source::arg_reduce_kernel(r, d, index);
        plan.steps.push(launch_per_output(kernel, p.nout as usize, p.nred as usize, args));
    }
    Ok(plan.with_output(y))
}

/// Running fold of `f` along `axis` (from the end when `reverse`) of a
/// `d` operand laid out as `l`: same shape out, dtype `out`, one thread
/// per line.
pub fn cumulative(f: &Fold, d: DType, l: &Layout, axis: usize, reverse: bool, out: DType) -> Result<Plan> {
    check_axes(l, &[axis])?;
    let n = l.numel();
    let mut plan = Plan::default();
    let y = plan.temp(out, n);
    if n == 0 {
        return Ok(plan.with_output(y));
    }
    let cs = l.shape.contiguous_strides();
    let (mut oshape, mut xs, mut ys) = (Dims::new(), Strides::new(), Strides::new());
    for a in 0..l.rank() {
        if a != axis {
            oshape.push(l.shape[a]);
            xs.push(l.strides[a]);
            ys.push(cs[a]);
        }
    }
    let params = iter_params(&oshape, [(&xs[..], l.offset), (&ys[..], 0)])?;
    let lines = params.n as usize;
    let args = vec![
        Arg::Ptr(Ptr::at(Buf::Temp(y))),
        Arg::Ptr(Ptr::at(Buf::Input(0))),
        Arg::Iter(Box::new(params)),
        Arg::I64(l.shape[axis] as i64),
        Arg::I64(l.strides[axis] as i64),
        Arg::I64(cs[axis] as i64),
        Arg::I32(reverse as i32),
    ];
    plan.launch_1d(source::cumulative_kernel(f, d, out), lines, args);
    Ok(plan.with_output(y))
}
