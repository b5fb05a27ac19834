//! The batched matrix product's generated kernel (the path for integers,
//! and for floats where cuBLAS is absent or cannot take the operands).

use super::{unsupported, Arg, Buf, GemmParams, Launch, Plan, Ptr, Result, Step};
use crate::cuda_source as source;
use crate::dtype::DType;
use crate::layout::Layout;

/// Rows and columns of one tile of the kernel (`XF_TILE`): a block of
/// `TILE x TILE` threads computes one tile of the product.
const TILE: usize = 16;

/// The sizes `[batch, m, k, n]` of a product `[B, M, K] x [B, K, N]` of
/// dtypes `da` and `db`, or why the kernels cannot compute it.
///
/// # Errors
/// Operands of different dtypes, or shapes that are not such a product.
pub fn gemm_dims(da: DType, la: &Layout, db: DType, lb: &Layout) -> Result<[usize; 4]> {
    if da != db {
        return Err(unsupported(format!("matrix products of {da} with {db}")));
    }
    if la.rank() != 3 || lb.rank() != 3 || la.shape[0] != lb.shape[0] || la.shape[2] != lb.shape[1] {
        return Err(unsupported(format!("GEMM of shapes {} and {}", la.shape, lb.shape)));
    }
    Ok([la.shape[0], la.shape[1], la.shape[2], lb.shape[2]])
}

/// The batched product `[B, M, K] x [B, K, N] -> [B, M, N]` (contiguous)
/// of strided 3-d operands `Input(0)` (dtypes `da`, layout `la`) and
/// `Input(1)` (`db`, `lb`) by the tiled kernel (floats accumulate in float,
/// f64 in double; integers wrap).
pub fn gemm(da: DType, la: &Layout, db: DType, lb: &Layout) -> Result<Plan> {
    let [batch, m, k, n] = gemm_dims(da, la, db, lb)?;
    let mut plan = Plan::default();
    let c = plan.temp(da, batch * m * n);
    if batch * m * n == 0 {
        return Ok(plan.with_output(c));
    }
    let kernel = source::gemm_kernel(da).ok_or_else(|| unsupported(format!("matrix products of {da}")))?;
    let p = GemmParams {
        batch: batch as i64,
        m: m as i64,
        n: n as i64,
        k: k as i64,
        as0: la.strides[0] as i64,
        as1: la.strides[1] as i64,
        as2: la.strides[2] as i64,
        bs0: lb.strides[0] as i64,
        bs1: lb.strides[1] as i64,
        bs2: lb.strides[2] as i64,
        aoff: la.offset as i64,
        boff: lb.offset as i64,
    };
    // Columns: one block per tile (the kernel does not loop over them; a
    // grid has at most 2^31 - 1 blocks in x); rows and batches:
    // grid-stride loops over at most 65535 blocks.
    if n.div_ceil(TILE) > i32::MAX as usize {
        return Err(unsupported(format!("GEMM with {n} columns")));
    }
    let grid = [n.div_ceil(TILE) as u32, m.div_ceil(TILE).clamp(1, 65535) as u32, batch.clamp(1, 65535) as u32];
    let args = vec![
        Arg::Ptr(Ptr::at(Buf::Temp(c))),
        Arg::Ptr(Ptr::at(Buf::Input(0))),
        Arg::Ptr(Ptr::at(Buf::Input(1))),
        Arg::Gemm(Box::new(p)),
    ];
    let block = [TILE as u32, TILE as u32, 1];
    plan.steps.push(Step::Launch(Launch { kernel, grid, block, grid_stride: false, args }));
    Ok(plan.with_output(c))
}
