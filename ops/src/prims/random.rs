//! `threefry2x32`: the counter-based cipher behind random keys, elementwise
//! over four u32 operands of one shape, with two u32 outputs. It has no
//! tangent and no transpose; it batches elementwise.

use super::{check_arity, check_same_shapes};
use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::prim::Avals;
use crate::tensor::AvalRef;
use smallvec::{smallvec, SmallVec};
use xform_kernels::cpu::elementwise::to_contiguous;
use xform_kernels::cpu::random::threefry2x32;
use xform_kernels::cpu::Par;
use xform_kernels::{CpuBuffer, DType};

pub(crate) fn shape_threefry(ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("threefry2x32", ins, 4)?;
    check_same_shapes("threefry2x32", ins)?;
    if let Some(a) = ins.iter().find(|a| a.dtype != DType::U32) {
        return Err(Error::dtype("threefry2x32", "keys and counters must be uint32", &[a.dtype]));
    }
    let a = ins[0].to_owned();
    Ok(smallvec![a.clone(), a])
}

pub(crate) fn lower_threefry(ins: &[&Array]) -> Result<SmallVec<[Array; 2]>> {
    if let Device::Cuda(_) = ins[0].device() {
        return crate::backend::cuda_threefry(ins);
    }
    let vals: Vec<Vec<u32>> = ins
        .iter()
        .map(|a| a.with_cpu("threefry2x32", |b, l| to_contiguous(b.as_slice::<u32>(), l, Par::Seq)))
        .collect::<Result<_>>()?;
    let n = vals[0].len();
    let (mut y0, mut y1) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let (a, b) = threefry2x32(vals[0][i], vals[1][i], vals[2][i], vals[3][i]);
        y0.push(a);
        y1.push(b);
    }
    let shape = ins[0].shape().clone();
    Ok(smallvec![Array::from_cpu(CpuBuffer::U32(y0), shape.clone()), Array::from_cpu(CpuBuffer::U32(y1), shape)])
}
