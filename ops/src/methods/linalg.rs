//! Matrix products: `matmul` with numpy's batch broadcasting, `dot`,
//! `outer` and the general `dot_general`.

use super::broadcast_shapes;
use crate::error::{Error, OrRaise, Result};
use crate::lax;
use crate::prim::{Axes, DotDims};
use crate::tensor::Tensor;
use smallvec::smallvec;
use xform_kernels::{DType, Shape};

fn promote(a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
    if a.dtype() == b.dtype() {
        return Ok((a.clone(), b.clone()));
    }
    let d = DType::promote(a.dtype(), b.dtype());
    Ok((lax::convert(a, d)?, lax::convert(b, d)?))
}

impl Tensor {
    /// Matrix product with numpy semantics: vectors are promoted to
    /// matrices and squeezed back; leading (batch) axes broadcast. A
    /// product with a plain matrix on the right is one GEMM however many
    /// batch axes the left has.
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        self.try_matmul(other).or_raise()
    }

    /// [`Tensor::matmul`] returning an error instead of panicking.
    pub fn try_matmul(&self, other: &Tensor) -> Result<Tensor> {
        // (errors of the products and broadcasts it is built on name matmul)
        self.matmul_unnamed(other).map_err(|e| e.named("matmul"))
    }

    fn matmul_unnamed(&self, other: &Tensor) -> Result<Tensor> {
        let (a, b) = promote(self, other)?;
        let (sa, sb) = (a.shape(), b.shape());
        let (ra, rb) = (sa.rank(), sb.rank());
        if ra == 0 || rb == 0 {
            return Err(Error::shape("matmul", "operands must have at least one axis", &[&sa, &sb]));
        }
        let ka = sa[ra - 1];
        let kb = if rb == 1 { sb[0] } else { sb[rb - 2] };
        if ka != kb {
            return Err(Error::shape("matmul", format!("contracted sizes differ ({ka} vs {kb})"), &[&sa, &sb]));
        }
        let dims = |lc: usize, rc: usize| DotDims {
            lhs_contract: smallvec![lc],
            rhs_contract: smallvec![rc],
            ..Default::default()
        };
        if rb == 1 {
            // [..., m, k] @ [k] -> [..., m]
            return lax::dot_general(&a, &b, dims(ra - 1, 0));
        }
        if ra == 1 {
            // [k] @ [..., k, n] -> [..., n]
            return lax::dot_general(&a, &b, dims(0, rb - 2));
        }
        if rb == 2 {
            // [..., m, k] @ [k, n]: batch axes fold into M (one GEMM)
            return lax::dot_general(&a, &b, dims(ra - 1, 0));
        }
        if ra == 2 {
            // [m, k] @ [..., k, n] -> [m, ..., n] -> [..., m, n]
            let r = lax::dot_general(&a, &b, dims(1, rb - 2))?;
            return lax::moveaxis(&r, 0, r.rank() - 2);
        }
        let batch = broadcast_shapes("matmul", &Shape::from(&sa[..ra - 2]), &Shape::from(&sb[..rb - 2]))?;
        let nb = batch.rank();
        let full = |mat: &[usize]| {
            let mut s = batch.clone();
            s.0.extend_from_slice(mat);
            s
        };
        let a = lax::broadcast_to(&a, &full(&sa[ra - 2..]))?;
        let b = lax::broadcast_to(&b, &full(&sb[rb - 2..]))?;
        let batch_axes: Axes = (0..nb).collect();
        lax::dot_general(
            &a,
            &b,
            DotDims {
                lhs_contract: smallvec![nb + 1],
                rhs_contract: smallvec![nb],
                lhs_batch: batch_axes.clone(),
                rhs_batch: batch_axes,
            },
        )
    }

    /// Inner product of two vectors (a scalar).
    #[track_caller]
    pub fn dot(&self, other: &Tensor) -> Tensor {
        if self.rank() != 1 || other.rank() != 1 {
            Error::shape("dot", "needs two vectors", &[&self.shape(), &other.shape()]).raise();
        }
        self.matmul(other)
    }

    /// Outer product of two vectors.
    #[track_caller]
    pub fn outer(&self, other: &Tensor) -> Tensor {
        if self.rank() != 1 || other.rank() != 1 {
            Error::shape("outer", "needs two vectors", &[&self.shape(), &other.shape()]).raise();
        }
        let (a, b) = promote(self, other).or_raise();
        lax::dot_general(&a, &b, DotDims::default()).or_raise()
    }

    /// The general product: contract `dims.lhs_contract` with
    /// `dims.rhs_contract`, pairing the batch axes; the result has axes
    /// `[batch..., lhs free..., rhs free...]`.
    #[track_caller]
    pub fn dot_general(&self, other: &Tensor, dims: DotDims) -> Tensor {
        lax::dot_general(self, other, dims).or_raise()
    }
}
