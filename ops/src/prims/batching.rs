//! Combinators shared by batch rules: find the batch size, move batch
//! dims, and batch any elementwise primitive.

use crate::error::{Error, Result};
use crate::interp::{bind, AxisName, Outs};
use crate::lax;
use crate::prim::{BDims, Prim};
use crate::tensor::Tensor;
use smallvec::SmallVec;

/// The axis a batch rule batches over: its size, and its name where the
/// map was given one (`VmapOptions::axis_name`).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchAxis {
    /// The number of examples.
    pub size: usize,
    /// The axis's name, which collectives refer to.
    pub name: Option<AxisName>,
}

/// The batch size: the size of the first batched operand's batch dim.
pub fn batch_size(ins: &[Tensor], bdims: &[Option<usize>]) -> Result<usize> {
    ins.iter()
        .zip(bdims)
        .find_map(|(x, b)| b.map(|d| x.shape()[d]))
        .ok_or_else(|| Error::invalid("vmap", "batch rule called with no batched operand"))
}

/// `x` with its batch dim at the front; an unbatched `x` is broadcast
/// (a stride-0 view, no copy) to `size` along a new leading axis.
pub fn to_front(x: &Tensor, bdim: Option<usize>, size: usize) -> Result<Tensor> {
    to_position(x, bdim, 0, size)
}

/// `x` with its batch dim at position `to`; unbatched operands are
/// broadcast (a stride-0 view) with the new axis there.
pub fn to_position(x: &Tensor, bdim: Option<usize>, to: usize, size: usize) -> Result<Tensor> {
    match bdim {
        Some(d) => lax::moveaxis(x, d, to),
        None => {
            let mut shape = x.shape();
            shape.0.insert(to, size);
            let dims: Vec<usize> = (0..shape.rank()).filter(|&a| a != to).collect();
            lax::broadcast_in_dim(x, &shape, &dims)
        }
    }
}

/// Physical axis of logical axis `a` when the batch dim sits at `bdim`.
#[inline]
pub fn physical(a: usize, bdim: usize) -> usize {
    if a < bdim {
        a
    } else {
        a + 1
    }
}

/// `n` outputs all batched at `d`.
#[inline]
fn same_bdims(n: usize, d: usize) -> BDims {
    let mut b = BDims::new();
    for _ in 0..n {
        b.push(Some(d));
    }
    b
}

/// Batches an elementwise primitive (operands of one logical shape): if
/// every batched operand has its batch dim at the same position, apply it
/// there, broadcasting unbatched operands into that position (no operand
/// is transposed); otherwise move batch dims to the front.
pub fn batch_elementwise(
    prim: &Prim,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    axis: &BatchAxis,
) -> Result<(Outs, BDims)> {
    let first = bdims.iter().flatten().next().copied();
    let Some(d) = first else {
        return Err(Error::invalid("vmap", "batch rule called with no batched operand"));
    };
    let shared = bdims.iter().all(|b| b.is_none() || *b == Some(d));
    if shared && bdims.iter().all(Option::is_some) {
        let outs = bind(prim, ins)?;
        let b = same_bdims(outs.len(), d);
        return Ok((outs, b));
    }
    let size = axis.size;
    let to = if shared { d } else { 0 };
    let mut moved: SmallVec<[Tensor; 4]> = SmallVec::new();
    for (x, b) in ins.iter().zip(bdims) {
        moved.push(to_position(x, *b, to, size)?);
    }
    let outs = bind(prim, &moved)?;
    let b = same_bdims(outs.len(), to);
    Ok((outs, b))
}
