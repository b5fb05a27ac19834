//! The launches that move elements between positions: pad, concatenate,
//! dynamic_update_slice, gather and scatter-add.

use super::elementwise::{map_into_temp, write_into};
use super::params::{fill_dims, gather_params, too_many_dims};
use super::{unsupported, Arg, Buf, PadParams, Plan, Ptr, Result, Step};
use crate::cpu::indexing::GatherExtents;
use crate::cuda_source::{self as source, MAX_DIMS};
use crate::dtype::DType;
use crate::layout::{Layout, Shape};

/// Appends a copy of operand `buf` (dtype `d`, layout `l`) into a fresh
/// contiguous temporary; its index.
fn copy_into_temp(plan: &mut Plan, d: DType, buf: Buf, l: &Layout) -> Result<usize> {
    map_into_temp(plan, source::copy_kernel(d), buf, l, d)
}

/// The address of the logical element 0 of operand `buf` read as a
/// contiguous array: in place if its layout is contiguous, else a copy.
fn contiguous_ptr(plan: &mut Plan, d: DType, buf: Buf, l: &Layout) -> Result<Ptr> {
    match l.contiguous_range() {
        Some(r) => Ok(Ptr { buf, offset: r.start }),
        None => Ok(Ptr::at(Buf::Temp(copy_into_temp(plan, d, buf, l)?))),
    }
}

/// Pads a `d` operand (`Input(0)`, laid out as `lx`) with the scalar
/// element `lv.offset` of `Input(1)`: `low`/`high` at each end of each
/// axis (negative crops), `interior` between neighbours. Semantics of
/// `crate::cpu::shape::pad`.
pub fn pad(d: DType, lx: &Layout, lv: &Layout, low: &[i64], high: &[i64], interior: &[usize]) -> Result<Plan> {
    let rank = lx.rank();
    if low.len() != rank || high.len() != rank || interior.len() != rank {
        return Err(unsupported(format!(
            "padding {} with {} / {} / {} amounts",
            lx.shape,
            low.len(),
            high.len(),
            interior.len()
        )));
    }
    let out_shape = crate::cpu::shape::pad_shape(&lx.shape, low, high, interior)
        .ok_or_else(|| unsupported("pad to a negative size"))?;
    if rank > MAX_DIMS {
        return Err(too_many_dims(rank));
    }
    let n = out_shape.numel();
    let mut plan = Plan::default();
    let y = plan.temp(d, n);
    if n == 0 {
        return Ok(plan.with_output(y));
    }
    let mut p = PadParams {
        n: n as i64,
        rank: rank as i32,
        pad: 0,
        oshape: [0; MAX_DIMS],
        ishape: [0; MAX_DIMS],
        istride: [0; MAX_DIMS],
        low: [0; MAX_DIMS],
        step: [0; MAX_DIMS],
        ioffset: lx.offset as i64,
        voffset: lv.offset as i64,
    };
    fill_dims(&mut p.oshape, out_shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.ishape, lx.shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.istride, lx.strides.iter().map(|&s| s as i64));
    fill_dims(&mut p.low, low.iter().copied());
    fill_dims(&mut p.step, interior.iter().map(|&i| i as i64 + 1));
    let args = vec![
        Arg::Ptr(Ptr::at(Buf::Temp(y))),
        Arg::Ptr(Ptr::at(Buf::Input(0))),
        Arg::Ptr(Ptr::at(Buf::Input(1))),
        Arg::Pad(Box::new(p)),
    ];
    plan.launch_1d(source::pad_kernel(d), n, args);
    Ok(plan.with_output(y))
}

/// Concatenates `parts` (`Input(k)` of dtype and layout `parts[k]`, one
/// dtype) along `axis` into `out_shape`: one strided write per part.
pub fn concatenate(parts: &[(DType, &Layout)], axis: usize, out_shape: &Shape) -> Result<Plan> {
    let Some(&(d, _)) = parts.first() else { return Err(unsupported("concatenating no operands")) };
    if let Some((other, _)) = parts.iter().find(|(e, _)| *e != d) {
        return Err(unsupported(format!("writing {other} into {d}")));
    }
    if axis >= out_shape.rank() || parts.iter().any(|(_, l)| l.rank() != out_shape.rank()) {
        return Err(unsupported(format!("concatenating along axis {axis} into {out_shape}")));
    }
    let mut plan = Plan::default();
    let out = plan.temp(d, out_shape.numel());
    let slots = Layout::concat_slots(out_shape, axis, parts.iter().map(|(_, l)| l.shape[axis]));
    for (k, ((_, lx), dst)) in parts.iter().zip(&slots).enumerate() {
        if dst.shape != lx.shape {
            return Err(unsupported(format!("writing {} elements into {}", lx.shape, dst.shape)));
        }
        write_into(&mut plan, d, Buf::Temp(out), dst, Buf::Input(k), lx)?;
    }
    Ok(plan.with_output(out))
}

/// A contiguous copy of the `d` operand `Input(0)` (layout `lx`) with the
/// block at `start` replaced by `Input(1)` (layout `lu`).
pub fn dynamic_update_slice(d: DType, lx: &Layout, lu: &Layout, start: &[usize]) -> Result<Plan> {
    let rank = lx.rank();
    let fits = start.len() == rank
        && lu.rank() == rank
        && (0..rank).all(|a| start[a].checked_add(lu.shape[a]).is_some_and(|end| end <= lx.shape[a]));
    if !fits {
        return Err(unsupported(format!("updating {} with {} at {start:?}", lx.shape, lu.shape)));
    }
    let mut plan = Plan::default();
    let out = copy_into_temp(&mut plan, d, Buf::Input(0), lx)?;
    let full = Layout::contiguous(lx.shape.clone());
    let limit: Vec<usize> = start.iter().zip(lu.shape.iter()).map(|(s, n)| s + n).collect();
    let dst = full.slice(start, &limit, &vec![1; rank]);
    write_into(&mut plan, d, Buf::Temp(out), &dst, Buf::Input(1), lu)?;
    Ok(plan.with_output(out))
}

/// The indices (`buf`, dtype `d`, layout `l`) as a fresh contiguous i64
/// temporary, checked against `[-n, n)` when `check` (the first bad one
/// in row-major order is reported by a [`Step::CheckIndices`]).
fn checked_indices(plan: &mut Plan, d: DType, buf: Buf, l: &Layout, n: usize, check: bool) -> Result<usize> {
    let count = l.numel();
    let iv = map_into_temp(plan, source::convert_kernel(d, DType::I64), buf, l, DType::I64)?;
    if !check || count == 0 {
        return Ok(iv);
    }
    let flag = plan.flag();
    let args = vec![
        Arg::Ptr(Ptr::at(Buf::Temp(iv))),
        Arg::I64(count as i64),
        Arg::I64(n as i64),
        Arg::Ptr(Ptr::at(Buf::Temp(flag))),
    ];
    plan.launch_1d(source::check_indices_kernel(), count, args);
    plan.steps.push(Step::CheckIndices { flag, indices: Buf::Temp(iv), size: n });
    Ok(iv)
}

fn check_extents(what: &str, x: &Layout, idx: &Layout, e: GatherExtents) -> Result<()> {
    if x.numel() != e.batch * e.pre * e.n * e.post || idx.numel() != e.batch * e.count {
        return Err(unsupported(format!("{what} of {} at {} indices as {e:?}", x.shape, idx.shape)));
    }
    Ok(())
}

/// Gather with `tf.gather` semantics (see `crate::cpu::indexing`): the `d`
/// operand `Input(0)` (layout `lx`) viewed as `[B, PRE, N, POST]`, the
/// indices `Input(1)` (integer dtype `di`, layout `lidx`) as `[B, I]`; an
/// index outside `[-N, N)` stops the plan.
pub fn gather(d: DType, lx: &Layout, di: DType, lidx: &Layout, e: GatherExtents) -> Result<Plan> {
    check_extents("gather", lx, lidx, e)?;
    let mut plan = Plan::default();
    // The CPU loop visits indices only when some (batch, pre) pair exists.
    let iv = checked_indices(&mut plan, di, Buf::Input(1), lidx, e.n, e.batch * e.pre > 0)?;
    let p = gather_params(e);
    let total = p.total as usize;
    let y = plan.temp(d, total);
    if total == 0 {
        return Ok(plan.with_output(y));
    }
    let xp = contiguous_ptr(&mut plan, d, Buf::Input(0), lx)?;
    let args =
        vec![Arg::Ptr(Ptr::at(Buf::Temp(y))), Arg::Ptr(xp), Arg::Ptr(Ptr::at(Buf::Temp(iv))), Arg::Gather(Box::new(p))];
    plan.launch_1d(source::gather_kernel(d), total, args);
    Ok(plan.with_output(y))
}

/// Scatter-add of the updates `Input(2)` (layout `lu`, viewed as `[B, PRE,
/// I, POST]`) into a copy of the `d` operand `Input(0)` (layout `lx`) at
/// the indices `Input(1)` (dtype `di`, layout `lidx`), with atomics (f32,
/// f64, i32, i64, u32; the caller widens the half types); an index
/// outside `[-N, N)` stops the plan.
pub fn scatter_add(d: DType, lx: &Layout, di: DType, lidx: &Layout, lu: &Layout, e: GatherExtents) -> Result<Plan> {
    check_extents("scatter_add", lx, lidx, e)?;
    let kernel =
        source::scatter_add_kernel(d).ok_or_else(|| unsupported(format!("scatter_add of {d} (widen to f32 first)")))?;
    if lu.numel() != e.batch * e.pre * e.count * e.post {
        return Err(unsupported(format!("scatter_add of {} updates as {e:?}", lu.shape)));
    }
    let mut plan = Plan::default();
    let iv = checked_indices(&mut plan, di, Buf::Input(1), lidx, e.n, true)?;
    let out = copy_into_temp(&mut plan, d, Buf::Input(0), lx)?;
    let p = gather_params(e);
    let total = p.total as usize;
    if total == 0 {
        return Ok(plan.with_output(out));
    }
    let up = contiguous_ptr(&mut plan, d, Buf::Input(2), lu)?;
    let args = vec![
        Arg::Ptr(Ptr::at(Buf::Temp(out))),
        Arg::Ptr(Ptr::at(Buf::Temp(iv))),
        Arg::Ptr(up),
        Arg::Gather(Box::new(p)),
    ];
    plan.launch_1d(kernel, total, args);
    Ok(plan.with_output(out))
}
