//! The matrix exponential (`jax.scipy.linalg.expm`): scaling and squaring
//! with a Padé approximant, JAX's algorithm step for step (Al-Mohy and
//! Higham's order choice by the 1-norm), so that it agrees with JAX to
//! rounding and runs under every transform: the approximant's order and
//! the number of squarings are data (selected per matrix, as JAX's
//! `lax.switch` and `lax.cond` are under `vmap`), not control flow.

use super::spectral::MatrixNorm;
use super::{matrix_norm, solve, square};
use crate::{lax, DType, Result, Tensor};
use xform_kernels::Shape;

/// At most this many squarings (JAX's default `max_squarings`); a matrix
/// needing more gets NaN, as in JAX.
const MAX_SQUARINGS: usize = 16;

/// A Padé approximant's `(U, V)` of `a` (`b` its coefficients, low order
/// first): `U = a (Σ b_odd a^(2k))`, `V = Σ b_even a^(2k)`, with JAX's
/// grouping of the products and sums.
fn pade(a: &Tensor, eye: &Tensor, b: &[f64]) -> Result<(Tensor, Tensor)> {
    let a2 = a.try_matmul(a)?;
    // the even powers a², a⁴, ... that the order needs, up to a⁶ (a⁸ for 9)
    let mut powers = vec![eye.clone(), a2.clone()];
    let order = b.len() - 1;
    let highest = if order == 13 { 3 } else { order / 2 };
    for k in 2..=highest {
        let next = if k == 2 { a2.try_matmul(&a2)? } else { powers[k - 1].try_matmul(&a2)? };
        powers.push(next);
    }
    // start + Σ_k c_k p_k from the highest power down, added left to
    // right as JAX writes the sums
    let sum_after = |start: Option<Tensor>, terms: &[(f64, usize)]| -> Result<Tensor> {
        let mut acc = start;
        for &(c, p) in terms {
            let t = lax::mul_scalar(&powers[p], c)?;
            acc = Some(match acc {
                None => t,
                Some(s) => lax::add(&s, &t)?,
            });
        }
        Ok(acc.expect("a term"))
    };
    let sum = |terms: &[(f64, usize)]| sum_after(None, terms);
    if order == 13 {
        let u_high = powers[3].try_matmul(&sum(&[(b[13], 3), (b[11], 2), (b[9], 1)])?)?;
        let u = a.try_matmul(&sum_after(Some(u_high), &[(b[7], 3), (b[5], 2), (b[3], 1), (b[1], 0)])?)?;
        let v_high = powers[3].try_matmul(&sum(&[(b[12], 3), (b[10], 2), (b[8], 1)])?)?;
        let v = sum_after(Some(v_high), &[(b[6], 3), (b[4], 2), (b[2], 1), (b[0], 0)])?;
        return Ok((u, v));
    }
    let odd: Vec<(f64, usize)> = (0..=order / 2).rev().map(|k| (b[2 * k + 1], k)).collect();
    let even: Vec<(f64, usize)> = (0..=order / 2).rev().map(|k| (b[2 * k], k)).collect();
    Ok((a.try_matmul(&sum(&odd)?)?, sum(&even)?))
}

const PADE3: [f64; 4] = [120., 60., 12., 1.];
const PADE5: [f64; 6] = [30240., 15120., 3360., 420., 30., 1.];
const PADE7: [f64; 8] = [17297280., 8648640., 1995840., 277200., 25200., 1512., 56., 1.];
const PADE9: [f64; 10] =
    [17643225600., 8821612800., 2075673600., 302702400., 30270240., 2162160., 110880., 3960., 90., 1.];
const PADE13: [f64; 14] = [
    64764752532480000.,
    32382376266240000.,
    7771770303897600.,
    1187353796428800.,
    129060195264000.,
    10559470521600.,
    670442572800.,
    33522128640.,
    1323241920.,
    40840800.,
    960960.,
    16380.,
    182.,
    1.,
];

/// The exponential of each square matrix (`jax.scipy.linalg.expm`): the
/// matrix is scaled by `2^-s` until its 1-norm is below the approximant's
/// bound, a Padé approximant of the order the 1-norm calls for (3 to 13 in
/// f64, 3 to 7 in f32, JAX's thresholds) is solved for, and the result
/// squared `s` times. A matrix whose norm needs more than 16 squarings
/// (`‖a‖₁` at or above about `7.0e5` in f64, `5.1e5` in f32) gives NaN,
/// as JAX. Differentiable
/// through the composition (the order and the squarings are piecewise
/// constant in `a`).
pub fn expm(a: &Tensor) -> Result<Tensor> {
    let n = square("expm", a)?;
    if n == 0 {
        return Ok(a.clone());
    }
    let shape = a.shape();
    let r = shape.rank();
    let lead: Vec<usize> = (0..r - 2).collect();
    let per_matrix = |x: &Tensor| lax::broadcast_in_dim(x, &shape, &lead);
    let norm = matrix_norm(a, MatrixNorm::One)?.stop_gradient();
    let (max_norm, bounds, orders): (f64, &[f64], Vec<&[f64]>) = if a.dtype() == DType::F64 {
        (
            5.371920351148152,
            &[1.495585217958292e-2, 2.53939833006323e-1, 9.504178996162932e-1, 2.097847961257068],
            vec![&PADE3, &PADE5, &PADE7, &PADE9, &PADE13],
        )
    } else {
        (3.92572478313866, &[4.258730016922831e-1, 1.880152677804762], vec![&PADE3, &PADE5, &PADE7])
    };
    // s = max(0, floor(log2(‖a‖₁ / bound))), a scaled by 2^-s
    let s = lax::floor(&lax::log2(&lax::mul_scalar(&norm, 1.0 / max_norm)?)?)?;
    let s = lax::max(&s, &lax::zeros_like(&s)?)?;
    let scale = lax::pow(&lax::full_like(&s, 2.0)?, &s)?;
    let scaled = lax::div(a, &per_matrix(&scale)?)?;
    // the order: the number of thresholds at or below the (unscaled) norm
    let mut idx = lax::zeros_like(&norm)?;
    for &t in bounds {
        let at_or_above = lax::convert(&lax::ge(&norm, &lax::full_like(&norm, t)?)?, a.dtype())?;
        idx = lax::add(&idx, &at_or_above)?;
    }
    let eye = lax::broadcast_to(&Tensor::eye(n, a.dtype()).try_to_device(a.device())?, &shape)?;
    let (mut u, mut v) = pade(&scaled, &eye, orders[0])?;
    for (k, b) in orders.iter().enumerate().skip(1) {
        let (uk, vk) = pade(&scaled, &eye, b)?;
        let pick = per_matrix(&lax::eq(&idx, &lax::full_like(&idx, k as f64)?)?)?;
        u = lax::select(&pick, &uk, &u)?;
        v = lax::select(&pick, &vk, &v)?;
    }
    let p = lax::add(&u, &v)?;
    let q = lax::add(&lax::neg(&u)?, &v)?;
    let mut out = solve(&q, &p)?;
    for i in 0..MAX_SQUARINGS {
        let more = per_matrix(&lax::gt(&s, &lax::full_like(&s, i as f64)?)?)?;
        out = lax::select(&more, &out.try_matmul(&out)?, &out)?;
    }
    let too_many = per_matrix(&lax::gt(&s, &lax::full_like(&s, MAX_SQUARINGS as f64)?)?)?;
    lax::select(&too_many, &lax::full(&Shape::from(shape.dims().to_vec()), f64::NAN, a.dtype(), a.device())?, &out)
}
