//! W8: the gradient, in the matrices and the vectors, of
//! `sum_i (logdet(A_i) + b_iᵀ A_i⁻¹ b_i)` over 64 symmetric positive
//! definite matrices of size 64 (`A_i = M_i M_iᵀ / 64 + I`), through a
//! Cholesky factorization (`logdet = 2 sum log diag L`) and two triangular
//! solves, in f32 and f64: eager `grad` and `jit(grad)`. The peer is
//! `benches/peers/w8_linalg.py` (JAX jit, torch.func).

use super::{emit, measure};
use xform::linalg::{self, TriangularSpec};
use xform::prelude::*;

const B: usize = 64;
const N: usize = 64;

fn loss((a, b): &(Tensor, Tensor)) -> Tensor {
    let l = linalg::cholesky(a).or_raise();
    let logdet = linalg::diagonal(&l).or_raise().log().sum() * 2.0;
    let col = b.unsqueeze(-1);
    let lower = TriangularSpec { left_side: true, lower: true, transpose_a: false, unit_diagonal: false };
    let y = linalg::triangular_solve(&l, &col, lower).or_raise();
    let x = linalg::triangular_solve(&l, &y, TriangularSpec { transpose_a: true, ..lower }).or_raise();
    logdet + (&col * &x).sum()
}

pub fn w8() {
    let key = Key::new(8);
    let sizes = format!("{{\"B\": {B}, \"n\": {N}}}");
    for dtype in [DType::F32, DType::F64] {
        let m = key.normal([B, N, N], DType::F64);
        let a = &(m.matmul(&m.transpose(1, 2)) * (1.0 / N as f64)) + &Tensor::eye(N, DType::F64);
        let a = ((&a + &a.transpose(1, 2)) * 0.5).cast(dtype);
        let b = key.fold_in(1).normal([B, N], dtype);
        let x = (a, b);
        let g = grad(loss);
        let st = measure(|| drop(g(&x)), false);
        emit("W8_linalg_grad", "grad cholesky", dtype.name(), &sizes, &st, "");
        let jg = jit(grad(loss));
        let st = measure(|| drop(jg(&x)), false);
        emit("W8_linalg_grad", "jit(grad) cholesky", dtype.name(), &sizes, &st, "");
    }
}
