//! The elementwise launches: maps over 1 to 3 operands, copies,
//! conversions, strided writes, Threefry and iota.

use super::params::iter_params;
use super::{unsupported, Arg, Buf, Plan, Ptr, Result};
use crate::cuda_source::{self as source, Kernel, MapOp};
use crate::dtype::DType;
use crate::layout::{Layout, Shape};

/// Runs map-family `kernel` over operands of one shape (`Input(k)` laid
/// out as `ins[k]`) into a fresh contiguous result (`param`: the kernel's
/// run-time scalar, if it takes one).
fn map_with(kernel: Kernel, ins: &[&Layout], out: DType, param: Option<i64>) -> Result<Plan> {
    let shape = &ins[0].shape;
    let n = shape.numel();
    let mut plan = Plan::default();
    let y = plan.temp(out, n);
    if n == 0 {
        return Ok(plan.with_output(y));
    }
    let lay = |k: usize| (&ins[k].strides[..], ins[k].offset);
    let params = match ins.len() {
        1 => iter_params(shape, [lay(0)])?,
        2 => iter_params(shape, [lay(0), lay(1)])?,
        3 => iter_params(shape, [lay(0), lay(1), lay(2)])?,
        k => return Err(unsupported(format!("elementwise maps over {k} operands"))),
    };
    let mut args = vec![Arg::Ptr(Ptr::at(Buf::Temp(y)))];
    args.extend((0..ins.len()).map(|k| Arg::Ptr(Ptr::at(Buf::Input(k)))));
    args.push(Arg::Iter(Box::new(params)));
    args.extend(param.map(Arg::I64));
    plan.launch_1d(kernel, n, args);
    Ok(plan.with_output(y))
}

/// `out[i] = op(x[i], y[i], ...)` over 1 to 3 operands of one shape
/// (dtypes and layouts `ins`), result dtype `out`, contiguous.
pub fn map(op: &MapOp, ins: &[(DType, &Layout)], out: DType) -> Result<Plan> {
    if !(1..=3).contains(&ins.len()) {
        return Err(unsupported(format!("elementwise maps over {} operands", ins.len())));
    }
    let dtypes: Vec<DType> = ins.iter().map(|(d, _)| *d).collect();
    let layouts: Vec<&Layout> = ins.iter().map(|(_, l)| *l).collect();
    map_with(source::map_kernel(op, &dtypes, out), &layouts, out, op.param)
}

/// A contiguous copy of the logical elements of a `d` operand laid out as `l`.
pub fn copy(d: DType, l: &Layout) -> Result<Plan> {
    map_with(source::copy_kernel(d), &[l], d, None)
}

/// The elements of a `from` operand laid out as `l`, converted to `to`
/// (the CPU's casting rules).
pub fn convert(from: DType, l: &Layout, to: DType) -> Result<Plan> {
    map_with(source::convert_kernel(from, to), &[l], to, None)
}

/// Writes the logical elements of `Input(0)` (laid out as `ls`) into
/// [`Buf::Dest`] through `ld` (same shape, dtype `d`; `ld` must not
/// overlap itself, the source must not alias the destination).
pub fn write(d: DType, ld: &Layout, ls: &Layout) -> Result<Plan> {
    if ld.shape != ls.shape {
        return Err(unsupported(format!("writing {} elements into {}", ls.shape, ld.shape)));
    }
    let mut plan = Plan::default();
    write_into(&mut plan, d, Buf::Dest, ld, Buf::Input(0), ls)?;
    Ok(plan)
}

/// Appends the strided write `dst[ld] = src[ls]` of dtype `d`.
pub(super) fn write_into(plan: &mut Plan, d: DType, dst: Buf, ld: &Layout, src: Buf, ls: &Layout) -> Result<()> {
    let n = ld.numel();
    if n > 0 {
        let params = iter_params(&ld.shape, [(&ld.strides[..], ld.offset), (&ls.strides[..], ls.offset)])?;
        let args = vec![Arg::Ptr(Ptr::at(dst)), Arg::Ptr(Ptr::at(src)), Arg::Iter(Box::new(params))];
        plan.launch_1d(source::write_kernel(d), n, args);
    }
    Ok(())
}

/// Appends the one-operand map `kernel` of operand `src` (laid out as `l`)
/// into a fresh contiguous temporary of dtype `out`; its index.
pub(super) fn map_into_temp(plan: &mut Plan, kernel: Kernel, src: Buf, l: &Layout, out: DType) -> Result<usize> {
    let n = l.numel();
    let t = plan.temp(out, n);
    if n > 0 {
        let params = iter_params(&l.shape, [(&l.strides[..], l.offset)])?;
        let args = vec![Arg::Ptr(Ptr::at(Buf::Temp(t))), Arg::Ptr(Ptr::at(src)), Arg::Iter(Box::new(params))];
        plan.launch_1d(kernel, n, args);
    }
    Ok(t)
}

/// Threefry-2x32 over four u32 operands of one shape (key0, key1,
/// counter0, counter1; layouts `ls`): the two output words, contiguous.
pub fn threefry(ls: [&Layout; 4]) -> Result<Plan> {
    let shape = &ls[0].shape;
    if ls.iter().any(|l| l.shape != *shape) {
        return Err(unsupported("threefry2x32 of operands of different shapes"));
    }
    let n = shape.numel();
    let mut plan = Plan::default();
    let (y0, y1) = (plan.temp(DType::U32, n), plan.temp(DType::U32, n));
    if n > 0 {
        let lay = |k: usize| (&ls[k].strides[..], ls[k].offset);
        let params = iter_params(shape, [lay(0), lay(1), lay(2), lay(3)])?;
        let mut args = vec![Arg::Ptr(Ptr::at(Buf::Temp(y0))), Arg::Ptr(Ptr::at(Buf::Temp(y1)))];
        args.extend((0..4).map(|k| Arg::Ptr(Ptr::at(Buf::Input(k)))));
        args.push(Arg::Iter(Box::new(params)));
        plan.launch_1d(source::threefry_kernel(), n, args);
    }
    Ok(plan.with_output(y0).with_output(y1))
}

/// `out[i] = i[dim]` over `shape` as `dtype`.
pub fn iota(shape: &Shape, dim: usize, dtype: DType) -> Result<Plan> {
    if dim >= shape.rank() {
        return Err(unsupported(format!("iota along axis {dim} of {shape}")));
    }
    let total = shape.numel();
    let mut plan = Plan::default();
    let y = plan.temp(dtype, total);
    if total > 0 {
        let inner: usize = shape[dim + 1..].iter().product();
        let args = vec![
            Arg::Ptr(Ptr::at(Buf::Temp(y))),
            Arg::I64(total as i64),
            Arg::I64(shape[dim] as i64),
            Arg::I64(inner as i64),
        ];
        plan.launch_1d(source::iota_kernel(dtype), total, args);
    }
    Ok(plan.with_output(y))
}
