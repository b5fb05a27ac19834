//! Matrix factorizations and triangular solves (`jax.lax.linalg`'s
//! `cholesky` and `triangular_solve`), over stacks of matrices: the
//! operands' last two axes are the matrices, the leading ones a batch
//! (as JAX's and torch's linalg take them). f32 and f64.
//!
//! The rules are JAX's (`jax/_src/lax/linalg.py`): Cholesky's JVP is
//! `L phi(L⁻¹ Σ̇ L⁻ᵀ)` (Murray 2016, arXiv:1602.07527) with `phi` the lower
//! triangle with its diagonal halved; a triangular solve is linear in its
//! right-hand side (transposed by the solve with `op(A)` transposed) and
//! differentiated in `A` through two solves or a solve and a product,
//! whichever is cheaper. Both batch by moving the examples' axis to the
//! front; a solve whose matrix is shared by the examples folds them into
//! the right-hand side's columns (left side) or rows (right side), so
//! that `vmap` over right-hand sides is one solve.
//!
//! What a matrix without a factor gives (decided once, as JAX on the
//! CPU): `cholesky` of a matrix that is not positive definite is NaN in
//! the lower triangle of that matrix's factor, zeros above (the others of
//! the stack are unaffected); a triangular solve with a zero on the diagonal divides by
//! it (inf or NaN in the solution, as LAPACK's `trsm`). Neither panics or
//! errs: the shapes and dtypes are the only errors.
//!
//! On CUDA the factorization runs on the CPU (the operands copied to the
//! host and the results back).

mod orthogonal;

use super::batching::{to_front, BatchAxis};
use super::jit::{self, Blame, JitProps, RowQuery, RowRule};
use super::sample::{Case, Dom, Sample};
use super::{check_arity, Family, Props};
use crate::array::{Array, Device};
use crate::error::{Error, Result};
use crate::interp::{bind1, Outs};
use crate::lax;
use crate::prim::{Avals, BDims, Cotangents, DotDims, LinearArg, Prim, Tangents};
use crate::tensor::{AvalRef, Tensor};
pub use orthogonal::{eigh, qr, singular_values, svd};
use smallvec::smallvec;
use std::fmt;
pub use xform_kernels::cpu::decomp::TriangularSpec;
use xform_kernels::cpu::decomp::{self as kernel, DecompElem};
use xform_kernels::cpu::elementwise::to_contiguous;
use xform_kernels::cpu::Par;
use xform_kernels::cuda_source::Kernel;
use xform_kernels::{CpuBuffer, DType, Layout, Shape};

crate::family_enum! {
    /// The decomposition primitives.
    #[derive(Clone, Debug, PartialEq)]
    pub enum DecompOp, kinds DecompKind {
        /// The lower Cholesky factor of the symmetrized operand
        /// `(A + Aᵀ) / 2` (`jnp.linalg.cholesky`, `lax.linalg.cholesky`
        /// with its default `symmetrize_input=True`), zeros above the
        /// diagonal.
        Cholesky,
        /// `X` with `op(A) X = B` or `X op(A) = B` for a triangular `A`.
        TriangularSolve(TriangularSpec),
        /// The LU factorization with partial pivoting: the factors in one
        /// matrix, the row swaps and the permutation they make.
        Lu,
        /// The QR factorization `A = Q R` (`R`'s diagonal non-negative),
        /// reduced or complete.
        Qr {
            /// `Q` is `m x m` (complete) rather than `m x min(m, n)`.
            full_matrices: bool,
        },
        /// The eigenvectors and ascending eigenvalues of the symmetrized
        /// operand.
        Eigh,
        /// The singular values (descending) and, when asked, the singular
        /// vectors `U` and `Vᵀ`, thin or complete.
        Svd {
            /// `U` and `Vᵀ` are square (complete) rather than thin.
            full_matrices: bool,
            /// The singular vectors are results too.
            compute_uv: bool,
        },
    }
}

impl From<DecompOp> for Prim {
    fn from(op: DecompOp) -> Prim {
        Prim::Decomp(op)
    }
}

// ---- the lax functions ------------------------------------------------------

/// The lower Cholesky factor `L` of each matrix of `x` (`[..., n, n]`):
/// `L Lᵀ = (A + Aᵀ) / 2`, zeros above the diagonal
/// (`jax.numpy.linalg.cholesky`). A matrix that is not positive definite
/// gets NaN in its factor's lower triangle.
pub fn cholesky(x: &Tensor) -> Result<Tensor> {
    bind1(&DecompOp::Cholesky.into(), std::slice::from_ref(x))
}

/// Solves the triangular systems `op(A) X = B` (`left_side`) or
/// `X op(A) = B`, `op(A)` being `A` or `Aᵀ` (`transpose_a`), reading only
/// `A`'s lower or upper triangle (`lower`) and, unless `unit_diagonal`,
/// its diagonal (`jax.lax.linalg.triangular_solve`). `a` is `[..., k, k]`
/// and `b` `[..., m, n]` with the same leading axes, `k` being `m` (left
/// side) or `n`.
pub fn triangular_solve(a: &Tensor, b: &Tensor, spec: TriangularSpec) -> Result<Tensor> {
    bind1(&DecompOp::TriangularSolve(spec).into(), &[a.clone(), b.clone()])
}

/// The LU factorization with partial pivoting of each matrix of `a`
/// (`[..., m, n]`; `jax.lax.linalg.lu`): `(lu, pivots, permutation)` with
/// `a[permutation] = L U`, `L` the unit lower triangle of `lu`'s first
/// `k = min(m, n)` columns and `U` the upper triangle of its first `k`
/// rows; `pivots` (i32 `[..., k]`) are LAPACK's row swaps, `permutation`
/// (i32 `[..., m]`) their product. A singular matrix factors (a zero on
/// `U`'s diagonal), as LAPACK's `getrf`.
pub fn lu(a: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let mut outs = crate::interp::bind(&DecompOp::Lu.into(), std::slice::from_ref(a))?;
    let perm = outs.pop().expect("three results");
    let piv = outs.pop().expect("three results");
    let f = outs.pop().expect("three results");
    Ok((f, piv, perm))
}

/// The diagonals `[..., n]` of square matrices `[..., n, n]`
/// (`jnp.diagonal(x, axis1=-2, axis2=-1)`): a strided slice of the
/// flattened matrices.
pub fn diagonal(x: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    let r = s.rank();
    if r < 2 || s[r - 1] != s[r - 2] {
        return Err(Error::shape("diagonal", "needs square matrices [..., n, n]", &[&s]));
    }
    let n = s[r - 1];
    let mut flat: Vec<usize> = s.dims()[..r - 2].to_vec();
    flat.push(n * n);
    let x = lax::reshape(x, &Shape::from(flat))?;
    let mut limit: Vec<usize> = x.shape().dims().to_vec();
    let mut strides = vec![1; r - 1];
    limit[r - 2] = n * n;
    strides[r - 2] = n + 1;
    lax::slice(&x, &vec![0; r - 1], &limit, &strides)
}

// ---- shape ------------------------------------------------------------------

/// `[..., n, n]` of f32 or f64: the batch axes and `n`.
fn square<'a>(op: &str, what: &str, a: &'a AvalRef<'_>) -> Result<(&'a [usize], usize)> {
    check_float(op, a)?;
    let d = a.shape.dims();
    let r = d.len();
    if r < 2 || d[r - 1] != d[r - 2] {
        return Err(Error::shape(op, format!("{what} must be square matrices [..., n, n]"), &[a.shape]));
    }
    Ok((&d[..r - 2], d[r - 1]))
}

fn check_float(op: &str, a: &AvalRef<'_>) -> Result<()> {
    if !matches!(a.dtype, DType::F32 | DType::F64) {
        return Err(Error::dtype(op, "needs f32 or f64 matrices", &[a.dtype]));
    }
    Ok(())
}

fn shape_cholesky(ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("cholesky", ins, 1)?;
    square("cholesky", "the operand", &ins[0])?;
    Ok(smallvec![ins[0].to_owned()])
}

fn shape_lu(ins: &[AvalRef<'_>]) -> Result<Avals> {
    check_arity("lu", ins, 1)?;
    let a = &ins[0];
    check_float("lu", a)?;
    let d = a.shape.dims();
    let r = d.len();
    if r < 2 {
        return Err(Error::shape("lu", "needs matrices [..., m, n]", &[a.shape]));
    }
    let (m, n) = (d[r - 2], d[r - 1]);
    let ints = |last: usize| {
        let mut s = d[..r - 2].to_vec();
        s.push(last);
        crate::tensor::Aval { shape: Shape::from(s), dtype: DType::I32, device: a.device }
    };
    Ok(smallvec![a.to_owned(), ints(m.min(n)), ints(m)])
}

fn shape_triangular_solve(spec: &TriangularSpec, ins: &[AvalRef<'_>]) -> Result<Avals> {
    let op = "triangular_solve";
    check_arity(op, ins, 2)?;
    let (a, b) = (&ins[0], &ins[1]);
    let (batch, k) = square(op, "a", a)?;
    check_float(op, b)?;
    if a.dtype != b.dtype {
        return Err(Error::dtype(op, "needs a and b of one dtype", &[a.dtype, b.dtype]));
    }
    let d = b.shape.dims();
    let r = d.len();
    let side = if spec.left_side { "rows" } else { "columns" };
    if r < 2 || &d[..r - 2] != batch || (if spec.left_side { d[r - 2] } else { d[r - 1] }) != k {
        return Err(Error::shape(
            op,
            format!(
                "b must be [..., m, n] with a's leading axes and {k} {side} (a is [..., {k}, {k}], solved on the {} side)",
                if spec.left_side { "left" } else { "right" }
            ),
            &[a.shape, b.shape],
        ));
    }
    Ok(smallvec![b.to_owned()])
}

// ---- lowering ---------------------------------------------------------------

/// The elements of a CPU array in row-major order, as `T`.
fn elems<T: xform_kernels::Element>(a: &Array) -> Result<Vec<T>> {
    a.with_cpu("decomp", |b, l| to_contiguous(b.as_slice::<T>(), l, Par::Seq))
}

fn lower_cholesky(x: &Array) -> Result<Array> {
    let d = x.shape().dims();
    let n = d[d.len() - 1];
    let batch = if n == 0 { 0 } else { x.shape().numel() / (n * n) };
    fn run<T: DecompElem + xform_kernels::Element>(x: &Array, batch: usize, n: usize) -> Result<Vec<T>> {
        Ok(kernel::cholesky(&elems::<T>(x)?, batch, n, Par::Rayon))
    }
    let out = match x.dtype {
        DType::F32 => CpuBuffer::F32(run(x, batch, n)?),
        _ => CpuBuffer::F64(run(x, batch, n)?),
    };
    Ok(Array::from_cpu(out, x.shape().clone()))
}

fn lower_triangular_solve(spec: TriangularSpec, a: &Array, b: &Array) -> Result<Array> {
    let d = b.shape().dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    let batch = d[..d.len() - 2].iter().product();
    fn run<T: DecompElem + xform_kernels::Element>(
        a: &Array,
        b: &Array,
        batch: usize,
        m: usize,
        n: usize,
        spec: TriangularSpec,
    ) -> Result<Vec<T>> {
        Ok(kernel::triangular_solve(&elems::<T>(a)?, &elems::<T>(b)?, batch, m, n, spec, Par::Rayon))
    }
    let out = match b.dtype {
        DType::F32 => CpuBuffer::F32(run(a, b, batch, m, n, spec)?),
        _ => CpuBuffer::F64(run(a, b, batch, m, n, spec)?),
    };
    Ok(Array::from_cpu(out, b.shape().clone()))
}

fn lower_lu(a: &Array) -> Result<Outs> {
    let d = a.shape().dims();
    let r = d.len();
    let (m, n) = (d[r - 2], d[r - 1]);
    let batch: usize = d[..r - 2].iter().product();
    let (f, piv, perm) = match a.dtype {
        DType::F32 => {
            let (f, p, q) = kernel::lu(&elems::<f32>(a)?, batch, m, n, Par::Rayon);
            (CpuBuffer::F32(f), p, q)
        }
        _ => {
            let (f, p, q) = kernel::lu(&elems::<f64>(a)?, batch, m, n, Par::Rayon);
            (CpuBuffer::F64(f), p, q)
        }
    };
    let ints = |v: Vec<i32>, last: usize| {
        let mut s = d[..r - 2].to_vec();
        s.push(last);
        Tensor::from_array(Array::from_cpu(CpuBuffer::I32(v), Shape::from(s)))
    };
    Ok(smallvec![Tensor::from_array(Array::from_cpu(f, a.shape().clone())), ints(piv, m.min(n)), ints(perm, m)])
}

// ---- helpers of the rules ---------------------------------------------------

/// The batched matrix product `a @ b` over equal leading axes.
fn bmm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let r = a.rank();
    let batch: crate::prim::Axes = (0..r - 2).collect();
    lax::dot_general(
        a,
        b,
        DotDims {
            lhs_contract: smallvec![r - 1],
            rhs_contract: smallvec![r - 2],
            lhs_batch: batch.clone(),
            rhs_batch: batch,
        },
    )
}

/// Each matrix transposed (the last two axes swapped).
fn mt(x: &Tensor) -> Result<Tensor> {
    let r = x.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    lax::transpose(x, &perm)
}

/// A mask of the matrices of `x` from `row - column` (i32, one matrix),
/// made for one matrix and broadcast (a view) over the stack.
fn matrix_mask(x: &Tensor, mask: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let r = x.rank();
    let s = x.shape();
    let one = Shape::from([s[r - 2], s[r - 1]]);
    let row = lax::iota(DType::I32, &one, 0, x.device())?;
    let col = lax::iota(DType::I32, &one, 1, x.device())?;
    lax::broadcast_in_dim(&mask(&lax::sub(&row, &col)?)?, &s, &[r - 2, r - 1])
}

/// Where `row - column` compares with `k` as `keep` says: the rest zero.
fn keep_where(x: &Tensor, keep: impl Fn(&Tensor, &Tensor) -> Result<Tensor>, k: i32) -> Result<Tensor> {
    let m = matrix_mask(x, |d| keep(d, &lax::full_like(d, k as f64)?))?;
    lax::select(&m, x, &lax::zeros_like(x)?)
}

/// The triangle of `x` a solve reads: lower or upper, with the diagonal
/// unless it is a unit diagonal.
fn read_triangle(x: &Tensor, lower: bool, unit: bool) -> Result<Tensor> {
    let k = i32::from(unit);
    if lower {
        keep_where(x, lax::ge, k)
    } else {
        keep_where(x, lax::le, -k)
    }
}

/// Murray's `phi`: the lower triangle with its diagonal halved.
fn phi(x: &Tensor) -> Result<Tensor> {
    let below = matrix_mask(x, |d| lax::gt(d, &lax::zeros_like(d)?))?;
    let on = matrix_mask(x, |d| lax::eq(d, &lax::zeros_like(d)?))?;
    let lower = lax::select(&below, x, &lax::zeros_like(x)?)?;
    lax::select(&on, &lax::mul_scalar(x, 0.5)?, &lower)
}

/// The identity matrices `[..., n, n]` of `x`'s leading axes and dtype.
fn eye_like(x: &Tensor, lead: &[usize], n: usize) -> Result<Tensor> {
    let mut s = lead.to_vec();
    s.extend([n, n]);
    let s = Shape::from(s);
    let r = s.rank();
    let row = lax::iota(DType::I32, &s, r - 2, x.device())?;
    let col = lax::iota(DType::I32, &s, r - 1, x.device())?;
    lax::convert(&lax::eq(&row, &col)?, x.dtype())
}

/// `x` padded with zeros after its last two axes' ends.
fn pad_matrices(x: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
    if rows == 0 && cols == 0 {
        return Ok(x.clone());
    }
    let r = x.rank();
    let mut high = vec![0i64; r];
    high[r - 2] = rows as i64;
    high[r - 1] = cols as i64;
    let zero = lax::full(&Shape::scalar(), 0.0, x.dtype(), x.device())?;
    lax::pad(x, &zero, &vec![0; r], &high, &vec![0; r])
}

fn spec(left_side: bool, lower: bool, transpose_a: bool) -> TriangularSpec {
    TriangularSpec { left_side, lower, transpose_a, unit_diagonal: false }
}

// ---- rules ------------------------------------------------------------------

fn jvp_cholesky(x: &Tensor, t: Option<&Tensor>) -> Result<(Outs, Tangents)> {
    let l = cholesky(x)?;
    let Some(t) = t else {
        return Ok((smallvec![l], smallvec![None]));
    };
    // the tangent of the symmetrized operand
    let sigma = lax::mul_scalar(&lax::add(t, &mt(t)?)?, 0.5)?;
    // L⁻¹ Σ̇ L⁻ᵀ, by a right solve and a left solve
    let tmp = triangular_solve(&l, &sigma, spec(false, true, true))?;
    let inner = triangular_solve(&l, &tmp, spec(true, true, false))?;
    let dl = bmm(&l, &phi(&inner)?)?;
    Ok((smallvec![l], smallvec![Some(dl)]))
}

fn jvp_triangular_solve(
    s: TriangularSpec,
    primals: &[Tensor],
    tangents: &[Option<Tensor>],
) -> Result<(Outs, Tangents)> {
    let (a, b) = (&primals[0], &primals[1]);
    let x = triangular_solve(a, b, s)?;
    let from_b = tangents[1].as_ref().map(|tb| triangular_solve(a, tb, s)).transpose()?;
    let from_a = match &tangents[0] {
        None => None,
        Some(ta) => {
            // -d op(A), on the triangle the solve reads
            let g = lax::neg(&read_triangle(ta, s.lower, s.unit_diagonal)?)?;
            let g = if s.transpose_a { mt(&g)? } else { g };
            let inv = |rhs: &Tensor| triangular_solve(a, rhs, s);
            let d = x.shape();
            let (m, n) = (d[d.rank() - 2], d[d.rank() - 1]);
            // whichever order is cheaper (a solve costs about a product)
            Some(match (s.left_side, s.left_side && m > n || !s.left_side && m < n) {
                (true, true) => inv(&bmm(&g, &x)?)?,
                (true, false) => bmm(&inv(&g)?, &x)?,
                (false, true) => inv(&bmm(&x, &g)?)?,
                (false, false) => bmm(&x, &inv(&g)?)?,
            })
        }
    };
    Ok((smallvec![x], smallvec![lax::add_any(from_a, from_b)?]))
}

/// JAX's LU JVP (De Hoog, Anderssen and Lukas): with `L` and `U` made
/// square (`L` padded to `m x m` with the identity, `U` to `n x n`) and
/// `X = L⁻¹ P Ȧ U⁻¹`, `L̇ = L tril(X, -1)` and `U̇ = triu(X) U`, whose sum
/// is the factors' tangent; the pivots and permutation have none.
fn jvp_lu(a: &Tensor, t: Option<&Tensor>) -> Result<(Outs, Tangents)> {
    let (f, piv, perm) = lu(a)?;
    let Some(t) = t else {
        return Ok((smallvec![f, piv, perm], smallvec![None, None, None]));
    };
    let s = a.shape();
    let r = s.rank();
    let (m, n) = (s[r - 2], s[r - 1]);
    let k = m.min(n);
    let lead = &s.dims()[..r - 2];
    // P Ȧ: the tangent's rows in the permutation's order
    let x = lax::gather(t, &perm, r - 2, r - 2)?;
    let strict_lower = |y: &Tensor| keep_where(y, lax::ge, 1);
    let upper = |y: &Tensor| keep_where(y, lax::le, 0);
    let l = pad_matrices(&strict_lower(&lax::slice_axis(&f, r - 1, 0, k)?)?, 0, m - k)?;
    let l = lax::add(&l, &eye_like(a, lead, m)?)?;
    let u = pad_matrices(&upper(&lax::slice_axis(&f, r - 2, 0, k)?)?, n - k, 0)?;
    let u = if n > k {
        // ones on the padded rows' diagonal
        let tail = eye_like(a, lead, n - k)?;
        let mut low = vec![0i64; r];
        low[r - 2] = k as i64;
        low[r - 1] = k as i64;
        let zero = lax::full(&Shape::scalar(), 0.0, a.dtype(), a.device())?;
        lax::add(&u, &lax::pad(&tail, &zero, &low, &vec![0; r], &vec![0; r])?)?
    } else {
        u
    };
    let la = triangular_solve(
        &l,
        &x,
        TriangularSpec { left_side: true, lower: true, transpose_a: false, unit_diagonal: true },
    )?;
    let lau = triangular_solve(&u, &la, spec(false, false, false))?;
    let dl = bmm(&l, &strict_lower(&lau)?)?;
    let du = bmm(&upper(&lau)?, &u)?;
    Ok((smallvec![f, piv, perm], smallvec![Some(lax::add(&dl, &du)?), None, None]))
}

fn transpose_triangular_solve(s: TriangularSpec, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
    let (LinearArg::Const(a), LinearArg::Linear(_)) = (&args[0], &args[1]) else {
        return Err(Error::invalid(
            "triangular_solve",
            "is linear in its right-hand side only: the matrix must be a known operand",
        ));
    };
    let ct_b = match &cts[0] {
        None => None,
        Some(ct) => Some(triangular_solve(a, ct, TriangularSpec { transpose_a: !s.transpose_a, ..s })?),
    };
    Ok(smallvec![None, ct_b])
}

fn batch_triangular_solve(
    s: TriangularSpec,
    ins: &[Tensor],
    bdims: &[Option<usize>],
    axis: &BatchAxis,
) -> Result<(Outs, BDims)> {
    let (a, b) = (&ins[0], &ins[1]);
    match (bdims[0], bdims[1]) {
        // one matrix for every example: the examples become more
        // columns (left side) or rows (right side) of one solve
        (None, Some(bb)) => {
            let r = b.rank();
            let to = if s.left_side { r - 1 } else { r - 2 };
            let y = lax::moveaxis(b, bb, to)?;
            let ys = y.shape();
            let mut flat: Vec<usize> = ys.dims()[..r - 3].to_vec();
            if s.left_side {
                flat.extend([ys[r - 3], ys[r - 2] * ys[r - 1]]);
            } else {
                flat.extend([ys[r - 3] * ys[r - 2], ys[r - 1]]);
            }
            let x = triangular_solve(a, &lax::reshape(&y, &Shape::from(flat))?, s)?;
            Ok((smallvec![lax::reshape(&x, &ys)?], smallvec![Some(to)]))
        }
        (ba, bb) => {
            let a = to_front(a, ba, axis.size)?;
            let b = to_front(b, bb, axis.size)?;
            Ok((smallvec![triangular_solve(&a, &b, s)?], smallvec![Some(0)]))
        }
    }
}

// ---- the family ---------------------------------------------------------------

impl Family for DecompOp {
    type Kind = DecompKind;
    const KINDS: &'static [DecompKind] = DecompKind::ALL;

    fn kind(&self) -> DecompKind {
        DecompOp::kind(self)
    }

    fn name(&self) -> &'static str {
        match self {
            DecompOp::Cholesky => "cholesky",
            DecompOp::TriangularSolve(_) => "triangular_solve",
            DecompOp::Lu => "lu",
            DecompOp::Qr { .. } => "qr",
            DecompOp::Eigh => "eigh",
            DecompOp::Svd { .. } => "svd",
        }
    }

    fn props(&self) -> Props {
        Props::NONE
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecompOp::Cholesky | DecompOp::Lu | DecompOp::Eigh => Ok(()),
            DecompOp::Qr { full_matrices } => write!(f, "[full_matrices={full_matrices}]"),
            DecompOp::Svd { full_matrices, compute_uv } => {
                write!(f, "[full_matrices={full_matrices} compute_uv={compute_uv}]")
            }
            DecompOp::TriangularSolve(s) => write!(
                f,
                "[left_side={} lower={} transpose_a={} unit_diagonal={}]",
                s.left_side, s.lower, s.transpose_a, s.unit_diagonal
            ),
        }
    }

    fn shape_rule(&self, ins: &[AvalRef<'_>]) -> Result<Avals> {
        match self {
            DecompOp::Cholesky => shape_cholesky(ins),
            DecompOp::TriangularSolve(s) => shape_triangular_solve(s, ins),
            DecompOp::Lu => shape_lu(ins),
            DecompOp::Qr { full_matrices } => orthogonal::shape_qr(*full_matrices, ins),
            DecompOp::Eigh => orthogonal::shape_eigh(ins),
            DecompOp::Svd { full_matrices, compute_uv } => orthogonal::shape_svd(*full_matrices, *compute_uv, ins),
        }
    }

    fn lower(&self, ins: &[&Array]) -> Result<Outs> {
        let out = match self {
            DecompOp::Cholesky => lower_cholesky(ins[0])?,
            DecompOp::TriangularSolve(s) => lower_triangular_solve(*s, ins[0], ins[1])?,
            DecompOp::Lu => return lower_lu(ins[0]),
            DecompOp::Qr { full_matrices } => return orthogonal::lower_qr(*full_matrices, ins[0]),
            DecompOp::Eigh => return orthogonal::lower_eigh(ins[0]),
            DecompOp::Svd { full_matrices, compute_uv } => {
                return orthogonal::lower_svd(*full_matrices, *compute_uv, ins[0])
            }
        };
        Ok(smallvec![Tensor::from_array(out)])
    }

    /// On the CPU: the operands are copied to the host, factored there
    /// and the results copied back (no device factorization yet).
    fn lower_device(&self, ins: &[&Array], _: &dyn crate::backend::Backend) -> Result<Outs> {
        let device = ins[0].device();
        let host: Vec<Array> = ins.iter().map(|a| a.to_device(Device::Cpu)).collect::<Result<_>>()?;
        let refs: Vec<&Array> = host.iter().collect();
        self.lower(&refs)?
            .into_iter()
            .map(|t| {
                let a = t.array().ok_or_else(|| Error::internal(self.name(), "a result that is not concrete"))?;
                Ok(Tensor::from_array(a.to_device(device)?))
            })
            .collect()
    }

    fn jvp(&self, _prim: &Prim, primals: &[Tensor], tangents: &[Option<Tensor>]) -> Result<(Outs, Tangents)> {
        match self {
            DecompOp::Cholesky => jvp_cholesky(&primals[0], tangents[0].as_ref()),
            DecompOp::TriangularSolve(s) => jvp_triangular_solve(*s, primals, tangents),
            DecompOp::Lu => jvp_lu(&primals[0], tangents[0].as_ref()),
            DecompOp::Qr { full_matrices } => orthogonal::jvp_qr(*full_matrices, &primals[0], tangents[0].as_ref()),
            DecompOp::Eigh => orthogonal::jvp_eigh(&primals[0], tangents[0].as_ref()),
            DecompOp::Svd { full_matrices, compute_uv } => {
                orthogonal::jvp_svd(*full_matrices, *compute_uv, &primals[0], tangents[0].as_ref())
            }
        }
    }

    fn transpose(&self, cts: &[Option<Tensor>], args: &[LinearArg]) -> Result<Cotangents> {
        match self {
            DecompOp::TriangularSolve(s) => transpose_triangular_solve(*s, cts, args),
            _ => super::not_linear(self.name()),
        }
    }

    fn batch(&self, _prim: &Prim, ins: &[Tensor], bdims: &[Option<usize>], axis: &BatchAxis) -> Result<(Outs, BDims)> {
        match self {
            DecompOp::TriangularSolve(s) => batch_triangular_solve(*s, ins, bdims, axis),
            // one operand, every result batched in front
            _ => {
                let outs = crate::interp::bind(&self.clone().into(), &[to_front(&ins[0], bdims[0], axis.size)?])?;
                let dims = outs.iter().map(|_| Some(0)).collect();
                Ok((outs, dims))
            }
        }
    }

    fn view_layout(&self, _: &Layout) -> Option<Layout> {
        None
    }

    fn samples() -> Vec<Sample> {
        let floats = vec![DType::F64, DType::F32];
        let mut v = Vec::new();
        v.push(Sample::new("cholesky", floats.clone(), vec![], true, |g, d| {
            let mut s = g.shape(2, 1, 2);
            let n = g.int(1, 3);
            s.extend([n, n]);
            Case::new(DecompOp::Cholesky, vec![(s, d, Dom::DiagDominant)])
        }));
        v.push(Sample::new("lu", floats.clone(), vec![], true, |g, d| {
            // distinct positive entries: rows are swapped, and no pivot
            // ties under finite differences
            let mut s = g.shape(1, 1, 2);
            s.extend([g.int(1, 3), g.int(1, 3)]);
            Case::new(DecompOp::Lu, vec![(s, d, Dom::Distinct(0.5, 3.0))])
        }));
        // operands with well-separated spectra: the results and their
        // derivatives are unique there (a complete Q or U only when it is
        // the thin one, m <= n or m == n: past that it is arbitrary)
        let matrix = |g: &mut super::sample::Gen| {
            let mut s = g.shape(1, 1, 2);
            let (m, n) = (g.int(1, 3), g.int(1, 3));
            s.extend([m, n]);
            (s, m, n)
        };
        v.push(Sample::new("qr", floats.clone(), vec![], true, move |g, d| {
            let (s, m, n) = matrix(g);
            let full_matrices = m <= n && g.coin(0.5);
            Case::new(DecompOp::Qr { full_matrices }, vec![(s, d, Dom::Spectrum)])
        }));
        v.push(Sample::new("eigh", floats.clone(), vec![], true, |g, d| {
            let mut s = g.shape(1, 1, 2);
            let n = g.int(1, 3);
            s.extend([n, n]);
            Case::new(DecompOp::Eigh, vec![(s, d, Dom::Spectrum)])
        }));
        v.push(Sample::new("svd", floats.clone(), vec![], true, move |g, d| {
            let (s, m, n) = matrix(g);
            let compute_uv = g.coin(0.7);
            let full_matrices = m == n && g.coin(0.5);
            Case::new(DecompOp::Svd { full_matrices, compute_uv }, vec![(s, d, Dom::Spectrum)])
        }));
        v.push(Sample::new("triangular_solve", floats, vec![1], true, |g, d| {
            let spec = TriangularSpec {
                left_side: g.coin(0.5),
                lower: g.coin(0.5),
                transpose_a: g.coin(0.5),
                unit_diagonal: g.coin(0.3),
            };
            let batch = g.shape(1, 1, 2);
            let (m, n) = (g.int(1, 3), g.int(1, 3));
            let k = if spec.left_side { m } else { n };
            let a: Vec<usize> = batch.iter().copied().chain([k, k]).collect();
            let b: Vec<usize> = batch.iter().copied().chain([m, n]).collect();
            Case::new(DecompOp::TriangularSolve(spec), vec![(a, d, Dom::DiagDominant), (b, d, Dom::Real(-2.0, 2.0))])
        }));
        v
    }

    fn cuda_kernels(_: DType) -> Vec<Kernel> {
        // no kernels of its own (see lower_device)
        Vec::new()
    }

    // ---- jit ----

    jit::no_row_form!();

    jit::no_map_form!();

    fn jit_props(&self) -> JitProps {
        // the device lowering synchronizes with the host: no graph capture
        JitProps { graph_capture: false, sink: true, thread_bound: false, lower_into: false }
    }

    /// Rows do not pass: the split keeps its operands whole.
    fn split_rows(&self, q: &RowQuery<'_>) -> std::result::Result<RowRule, Blame> {
        jit::no_rows(q)
    }
}
