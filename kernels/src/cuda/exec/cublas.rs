//! The batched matrix product through cuBLAS (the float types, when
//! libcublas is present and takes the operands' strides): device-only,
//! the one launch path here that the host emulation does not run.

use crate::cuda::buffer::CudaBuffer;
use crate::cuda::device::CudaDevice;
use crate::cuda::error::{CudaError, Result};
use crate::layout::Layout;
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use std::sync::Arc;

/// How cuBLAS (column-major) sees the row-major matrix `M` (`rows x cols`,
/// element `(i, j)` at `i * rs + j * cs`) when it needs the operand `M^T`:
/// `Some((transposed, ld))`, or `None` if the strides fit neither form.
pub(super) fn blas_operand(rows: usize, cols: usize, rs: isize, cs: isize) -> Option<(bool, i32)> {
    let fits = |ld: isize| ld >= 1 && ld <= i32::MAX as isize;
    // Rows contiguous: M^T is column-major cols x rows with ld = rs.
    if (cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols.max(1) as isize) {
        let ld = if rows <= 1 { cols.max(1) as isize } else { rs };
        if fits(ld) {
            return Some((false, ld as i32));
        }
    }
    // Columns contiguous: M is column-major rows x cols with ld = cs.
    if (rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows.max(1) as isize) {
        let ld = if cols <= 1 { rows.max(1) as isize } else { cs };
        if fits(ld) {
            return Some((true, ld as i32));
        }
    }
    None
}

/// Element offsets of a 3-d operand usable by cuBLAS (non-negative batch
/// stride), with its row and column strides.
pub(super) fn blas_batch_stride(l: &Layout) -> Option<i64> {
    let s = if l.shape[0] <= 1 { 0 } else { l.strides[0] };
    (s >= 0).then_some(s as i64)
}

pub(super) fn gemm_cublas(
    dev: &Arc<CudaDevice>,
    a: &CudaBuffer,
    la: &Layout,
    b: &CudaBuffer,
    lb: &Layout,
) -> Result<CudaBuffer> {
    let (batch, m, k, n) = (la.shape[0], la.shape[1], la.shape[2], lb.shape[2]);
    let mut c = CudaBuffer::alloc(dev, a.dtype(), batch * m * n)?;
    let (opa, lda) = blas_operand(m, k, la.strides[1], la.strides[2]).expect("checked by the caller");
    let (opb, ldb) = blas_operand(k, n, lb.strides[1], lb.strides[2]).expect("checked by the caller");
    let sa = blas_batch_stride(la).expect("checked by the caller");
    let sb = blas_batch_stride(lb).expect("checked by the caller");
    let op = |t: bool| {
        if t {
            cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let blas = dev.blas().expect("checked by the caller").lock().unwrap_or_else(|e| e.into_inner());
    // C^T (n x m, column-major) = op(B^T) (n x k) * op(A^T) (k x m).
    macro_rules! call {
        ($av:expr, $bv:expr, $cv:expr, $one:expr, $zero:expr) => {{
            let cfg = StridedBatchedConfig {
                gemm: GemmConfig {
                    transa: op(opb),
                    transb: op(opa),
                    m: n as i32,
                    n: m as i32,
                    k: k as i32,
                    alpha: $one,
                    lda: ldb,
                    ldb: lda,
                    beta: $zero,
                    ldc: n as i32,
                },
                batch_size: batch as i32,
                stride_a: sb,
                stride_b: sa,
                stride_c: (m * n) as i64,
            };
            let av = $av.slice.slice(la.offset..);
            let bv = $bv.slice.slice(lb.offset..);
            // SAFETY: the operand views start at each layout's element 0 and
            // `blas_operand` checked that the leading dimensions and the
            // (non-negative) strides describe exactly the elements of the
            // validated layouts; C is a fresh buffer of batch * m * n.
            unsafe { blas.gemm_strided_batched(cfg, &bv, &av, &mut $cv.slice) }
                .map_err(|e| CudaError::Blas { message: e.to_string() })?;
        }};
    }
    match (a, b, &mut c) {
        (CudaBuffer::F32(x), CudaBuffer::F32(y), CudaBuffer::F32(z)) => call!(x, y, z, 1.0f32, 0.0f32),
        (CudaBuffer::F64(x), CudaBuffer::F64(y), CudaBuffer::F64(z)) => call!(x, y, z, 1.0f64, 0.0f64),
        (CudaBuffer::F16(x), CudaBuffer::F16(y), CudaBuffer::F16(z)) => {
            call!(x, y, z, half::f16::ONE, half::f16::ZERO)
        }
        (CudaBuffer::BF16(x), CudaBuffer::BF16(y), CudaBuffer::BF16(z)) => {
            call!(x, y, z, half::bf16::ONE, half::bf16::ZERO)
        }
        _ => return Err(CudaError::unsupported(format!("cuBLAS GEMM of {}", a.dtype()))),
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blas_operand_forms() {
        // row-major 3 x 4
        assert_eq!(blas_operand(3, 4, 4, 1), Some((false, 4)));
        // its transpose view (4 x 3 with strides 1, 4)
        assert_eq!(blas_operand(4, 3, 1, 4), Some((true, 4)));
        // a column slice of a wider matrix
        assert_eq!(blas_operand(3, 2, 5, 1), Some((false, 5)));
        // reversed or broadcast inner strides need a copy
        assert_eq!(blas_operand(3, 4, 4, -1), None);
        assert_eq!(blas_operand(3, 4, 0, 1), None);
        // unit dims accept any stride
        assert_eq!(blas_operand(1, 4, 99, 1), Some((false, 4)));
        assert_eq!(blas_operand(3, 1, 7, 99), Some((false, 7)));
    }
}
