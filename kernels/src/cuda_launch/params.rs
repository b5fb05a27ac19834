//! The parameter structs of the generated kernels, `#[repr(C)]` images of
//! the structs in the generated source, and their builders from layouts.

use super::{unsupported, Result, Unsupported};
use crate::cpu::indexing::GatherExtents;
use crate::cuda_source::{MAX_DIMS, MAX_OPERANDS};
use crate::layout::Coalesced;

/// The iteration parameters of a generated elementwise kernel over `N`
/// operands (`XfIter` with `N = MAX_OPERANDS`, `XfFused` with `N =
/// MAX_FUSED_INPUTS`): the merged shape, and per operand its strides and
/// offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IterParamsOf<const N: usize> {
    /// Elements in all.
    pub n: i64,
    /// Merged axes.
    pub rank: i32,
    /// Padding (0).
    pub pad: i32,
    /// The merged shape.
    pub shape: [i64; MAX_DIMS],
    /// Per operand, its strides over the merged shape.
    pub strides: [[i64; MAX_DIMS]; N],
    /// Per operand, the offset of its element 0.
    pub offsets: [i64; N],
}

/// `XfIter`.
pub type IterParams = IterParamsOf<MAX_OPERANDS>;

/// `XfRed`: the kept axes (one output element each) and the reduced ones.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedParams {
    /// Output elements.
    pub nout: i64,
    /// Reduced elements per output.
    pub nred: i64,
    /// Merged kept axes.
    pub krank: i32,
    /// Merged reduced axes.
    pub rrank: i32,
    /// Kept shape.
    pub kshape: [i64; MAX_DIMS],
    /// Kept strides.
    pub kstride: [i64; MAX_DIMS],
    /// Reduced shape.
    pub rshape: [i64; MAX_DIMS],
    /// Reduced strides.
    pub rstride: [i64; MAX_DIMS],
    /// The operand's offset.
    pub offset: i64,
}

/// `XfPad`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadParams {
    /// Output elements.
    pub n: i64,
    /// Axes.
    pub rank: i32,
    /// Padding (0).
    pub pad: i32,
    /// Output shape.
    pub oshape: [i64; MAX_DIMS],
    /// Operand shape.
    pub ishape: [i64; MAX_DIMS],
    /// Operand strides.
    pub istride: [i64; MAX_DIMS],
    /// Low padding per axis (negative crops).
    pub low: [i64; MAX_DIMS],
    /// Interior padding + 1 per axis.
    pub step: [i64; MAX_DIMS],
    /// Operand offset.
    pub ioffset: i64,
    /// Offset of the padding value in its buffer.
    pub voffset: i64,
}

/// `XfGather`: the operand as `[B, PRE, N, POST]`, the indices as `[B, I]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherParams {
    /// B.
    pub batch: i64,
    /// PRE.
    pub pre: i64,
    /// N.
    pub n: i64,
    /// POST.
    pub post: i64,
    /// I.
    pub count: i64,
    /// Gathered (or scattered) elements, `B * PRE * I * POST`.
    pub total: i64,
}

/// `XfGemm`: strided `a: [B, M, K]`, `b: [B, K, N]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmParams {
    /// B.
    pub batch: i64,
    /// M.
    pub m: i64,
    /// N.
    pub n: i64,
    /// K.
    pub k: i64,
    /// a's strides.
    pub as0: i64,
    /// a's strides.
    pub as1: i64,
    /// a's strides.
    pub as2: i64,
    /// b's strides.
    pub bs0: i64,
    /// b's strides.
    pub bs1: i64,
    /// b's strides.
    pub bs2: i64,
    /// a's offset.
    pub aoff: i64,
    /// b's offset.
    pub boff: i64,
}

/// The parameter structs: `#[repr(C)]`, integers only, no padding bytes
/// (the size test below checks each against its fields).
pub(super) trait Pod: Copy {}
impl<const N: usize> Pod for IterParamsOf<N> {}
impl Pod for RedParams {}
impl Pod for PadParams {}
impl Pod for GatherParams {}
impl Pod for GemmParams {}
impl Pod for super::WinParams {}
impl Pod for crate::cuda_source::conv::ConvParams {}

/// The bytes of a parameter struct, as the kernel receives it by value.
pub(super) fn bytes<T: Pod>(p: &T) -> &[u8] {
    // SAFETY: `T: Pod` is a `#[repr(C)]` struct of i64 and i32 fields
    // without padding (checked by `param_structs_have_no_padding`), so
    // all `size_of::<T>()` bytes behind the reference are initialized and
    // live as long as it.
    unsafe { std::slice::from_raw_parts((p as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

pub(super) fn too_many_dims(rank: usize) -> Unsupported {
    unsupported(format!("layouts of rank {rank} after merging axes (at most {MAX_DIMS})"))
}

pub(super) fn fill_dims(dst: &mut [i64; MAX_DIMS], src: impl IntoIterator<Item = i64>) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s;
    }
}

/// The iteration parameters of `N` operands of one logical shape (each
/// its strides and offset), axes merged as `Coalesced` merges them.
pub(super) fn iter_params<const N: usize>(shape: &[usize], ops: [(&[isize], usize); N]) -> Result<IterParams> {
    const { assert!(N <= MAX_OPERANDS) };
    let c = Coalesced::new(shape, ops);
    if c.shape.len() > MAX_DIMS {
        return Err(too_many_dims(c.shape.len()));
    }
    let mut p = IterParams {
        n: shape.iter().product::<usize>() as i64,
        rank: c.shape.len() as i32,
        pad: 0,
        shape: [0; MAX_DIMS],
        strides: [[0; MAX_DIMS]; MAX_OPERANDS],
        offsets: [0; MAX_OPERANDS],
    };
    fill_dims(&mut p.shape, c.shape.iter().map(|&n| n as i64));
    for k in 0..N {
        fill_dims(&mut p.strides[k], c.strides[k].iter().map(|&s| s as i64));
        p.offsets[k] = c.offsets[k] as i64;
    }
    Ok(p)
}

/// The reduction parameters: kept axes `ks`/`kt`, reduced `rs`/`rt`, each
/// merged, over an operand at `offset`.
pub(super) fn red_params(ks: &[usize], kt: &[isize], rs: &[usize], rt: &[isize], offset: usize) -> Result<RedParams> {
    let kept = Coalesced::new(ks, [(kt, 0)]);
    let red = Coalesced::new(rs, [(rt, 0)]);
    if kept.shape.len() > MAX_DIMS || red.shape.len() > MAX_DIMS {
        return Err(too_many_dims(kept.shape.len().max(red.shape.len())));
    }
    let mut p = RedParams {
        nout: ks.iter().product::<usize>() as i64,
        nred: rs.iter().product::<usize>() as i64,
        krank: kept.shape.len() as i32,
        rrank: red.shape.len() as i32,
        kshape: [0; MAX_DIMS],
        kstride: [0; MAX_DIMS],
        rshape: [0; MAX_DIMS],
        rstride: [0; MAX_DIMS],
        offset: offset as i64,
    };
    fill_dims(&mut p.kshape, kept.shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.kstride, kept.strides[0].iter().map(|&s| s as i64));
    fill_dims(&mut p.rshape, red.shape.iter().map(|&n| n as i64));
    fill_dims(&mut p.rstride, red.strides[0].iter().map(|&s| s as i64));
    Ok(p)
}

/// The gather (and scatter-add) parameters of extents `e`.
pub(super) fn gather_params(e: GatherExtents) -> GatherParams {
    GatherParams {
        batch: e.batch as i64,
        pre: e.pre as i64,
        n: e.n as i64,
        post: e.post as i64,
        count: e.count as i64,
        total: (e.batch * e.pre * e.count * e.post) as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FusedParams, WinParams};
    use super::*;
    use std::mem::size_of;

    /// Each struct is exactly its fields (no padding bytes for `bytes` to
    /// read), as laid out in the generated source.
    #[test]
    fn param_structs_have_no_padding() {
        assert_eq!(size_of::<IterParams>(), 16 + 8 * MAX_DIMS * (1 + MAX_OPERANDS) + 8 * MAX_OPERANDS);
        assert_eq!(size_of::<FusedParams>(), 16 + 8 * MAX_DIMS * (1 + crate::cuda_source::MAX_FUSED_INPUTS) + 8 * 16);
        assert_eq!(size_of::<RedParams>(), 24 + 8 * 4 * MAX_DIMS + 8);
        assert_eq!(size_of::<PadParams>(), 16 + 8 * 5 * MAX_DIMS + 16);
        assert_eq!(size_of::<GatherParams>(), 8 * 6);
        assert_eq!(size_of::<GemmParams>(), 8 * 12);
        assert_eq!(size_of::<WinParams>(), 32 + 8 * 9 * MAX_DIMS + 16);
    }
}
