//! Combinators shared by batch rules: find the batch size, move batch
//! dims, and batch any elementwise primitive.

use crate::error::{Error, Result};
use crate::interp::{bind, Outs};
use crate::lax;
use crate::prim::{BDims, Prim};
use crate::tensor::Tensor;
use smallvec::smallvec;

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
    match bdim {
        Some(d) => lax::moveaxis(x, d, 0),
        None => {
            let mut shape = x.shape();
            shape.0.insert(0, size);
            let dims: Vec<usize> = (1..shape.rank()).collect();
            lax::broadcast_in_dim(x, &shape, &dims)
        }
    }
}

/// `x` with its batch dim at position `to`; unbatched operands broadcast.
pub fn to_position(x: &Tensor, bdim: Option<usize>, to: usize, size: usize) -> Result<Tensor> {
    match bdim {
        Some(d) => lax::moveaxis(x, d, to),
        None => {
            let front = to_front(x, None, size)?;
            lax::moveaxis(&front, 0, to)
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

/// Batches an elementwise primitive (operands of one logical shape): if
/// every operand is batched at the same dim, apply it there; otherwise move
/// batch dims to the front and broadcast the unbatched operands.
pub fn batch_elementwise(prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>]) -> Result<(Outs, BDims)> {
    if let Some(Some(d)) = bdims.first() {
        if bdims.iter().all(|b| *b == Some(*d)) {
            let outs = bind(prim, ins)?;
            let n = outs.len();
            return Ok((outs, smallvec![Some(*d); n]));
        }
    }
    let size = batch_size(ins, bdims)?;
    let moved: Vec<Tensor> = ins.iter().zip(bdims).map(|(x, b)| to_front(x, *b, size)).collect::<Result<_>>()?;
    let outs = bind(prim, &moved)?;
    let n = outs.len();
    Ok((outs, smallvec![Some(0); n]))
}
