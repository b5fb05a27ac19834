//! Attention: [`scaled_dot_product_attention`] and
//! [`MultiHeadAttention`], with PyTorch's semantics and mask conventions.
//!
//! NOTE: [mask conventions] PyTorch uses two opposite boolean conventions,
//! and xform keeps both so that code ports unchanged:
//! - `scaled_dot_product_attention`: a bool `attn_mask` is `true` where a
//!   query *may* attend to a key;
//! - `MultiHeadAttention`: a bool `attn_mask` or `key_padding_mask` is
//!   `true` where attention is *not* allowed (a padded key).
//!
//! A float mask is added to the scores in both (use `-inf` to forbid), so
//! [`causal_mask`], a float mask, means the same to both.
//!
//! A query row whose every score is `-inf` (fully masked) gets zero
//! attention weights and a zero output, with zero gradients: PyTorch's
//! `scaled_dot_product_attention` does the same since 2.5 (its
//! `_safe_softmax`, pytorch/pytorch#133882); earlier versions, and
//! `nn.MultiheadAttention` when it returns its weights, give NaN there.

use super::{init, Linear};
use crate::{DType, Device, Error, Key, Shape, Tensor};

/// `[l, s]` additive causal mask: 0 where key `j <= i` (query `i` may see
/// it), `-inf` above the diagonal, aligned at the top left as PyTorch's
/// `is_causal` (for `l = s`, `nn.Transformer.generate_square_subsequent_mask`).
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::causal_mask;
///
/// let m = causal_mask(2, 3, DType::F32).to_vec::<f32>();
/// assert_eq!(m, vec![0.0, f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0, 0.0, f32::NEG_INFINITY]);
/// ```
///
/// # Panics
/// If `dtype` is not a float type.
#[track_caller]
pub fn causal_mask(l: usize, s: usize, dtype: DType) -> Tensor {
    causal_on(l, s, dtype, crate::default_device())
}

#[track_caller]
fn causal_on(l: usize, s: usize, dtype: DType, device: Device) -> Tensor {
    if !dtype.is_float() {
        Error::dtype("causal_mask", "an additive mask needs a float dtype", &[dtype]).raise();
    }
    let rows = Tensor::arange(0.0, l as f64, 1.0, DType::I64).to_device(device).unsqueeze(1);
    let cols = Tensor::arange(0.0, s as f64, 1.0, DType::I64).to_device(device).unsqueeze(0);
    bool_to_bias(&cols.gt(&rows), dtype)
}

/// A bool mask as an additive one: `-inf` where `forbid`, 0 elsewhere.
fn bool_to_bias(forbid: &Tensor, dtype: DType) -> Tensor {
    let zero = Tensor::zeros(Shape::scalar(), dtype).to_device(forbid.device());
    Tensor::where_(forbid, &zero.full_like(f64::NEG_INFINITY), &zero)
}

/// Softmax over the last axis with fully masked rows (all `-inf`) giving
/// zeros instead of NaN, and zero gradients (see the module note).
fn safe_softmax(scores: &Tensor) -> Tensor {
    let dead = scores.stop_gradient().max_axis(-1, true).eq_scalar(f64::NEG_INFINITY);
    let zero = scores.zeros_like();
    let p = Tensor::where_(&dead, &zero, scores).softmax(-1);
    Tensor::where_(&dead, &zero, &p)
}

/// The attention probabilities `softmax(q k^T * scale + bias)` over the
/// keys, `[.., L, S]`.
fn attention_probs(q: &Tensor, k: &Tensor, bias: Option<Tensor>, scale: f64) -> Tensor {
    let scores = q.matmul(&k.transpose(-2, -1)) * scale;
    match bias {
        None => scores.softmax(-1),
        Some(b) => safe_softmax(&(scores + b)),
    }
}

/// Raises unless `mask`'s last two axes broadcast to `[l, s]`.
#[track_caller]
fn check_mask_ls(op: &str, what: &str, mask: &Tensor, l: usize, s: usize, q: &Tensor, k: &Tensor) {
    let m = mask.shape();
    let fits = |got: usize, want: usize| got == want || got == 1;
    if m.rank() < 2 || !fits(m[m.rank() - 2], l) || !fits(m[m.rank() - 1], s) {
        Error::shape(
            op,
            format!("{what} must broadcast to [.., L, S] = [.., {l}, {s}] (shapes: mask, query, key)"),
            &[&m, &q.shape(), &k.shape()],
        )
        .raise();
    }
}

/// Scaled dot-product attention (`torch.nn.functional.scaled_dot_product_attention`
/// without dropout): `softmax(q k^T * scale + mask) v` over the keys, with
/// `q: [.., L, E]`, `k: [.., S, E]`, `v: [.., S, Ev]` (leading axes
/// broadcast) giving `[.., L, Ev]`.
///
/// - `attn_mask`: bool, `true` where a query *may* attend (note the
///   convention: [mask conventions] in this module), or float, added to
///   the scores; it broadcasts to `[.., L, S]`.
/// - `is_causal`: query `i` sees keys `j <= i` (top-left aligned); it
///   cannot be combined with `attn_mask` (as in PyTorch).
/// - `scale`: defaults to `1 / sqrt(E)`.
///
/// The softmax is taken in the inputs' dtype. Fully masked rows give 0.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::scaled_dot_product_attention;
///
/// let q = Key::new(0).normal([2, 5, 8], DType::F32);
/// let (k, v) = (Key::new(1).normal([2, 7, 8], DType::F32), Key::new(2).normal([2, 7, 3], DType::F32));
/// let out = scaled_dot_product_attention(&q, &k, &v, None, false, None);
/// assert_eq!(out.shape().dims(), &[2, 5, 3]);
/// ```
///
/// # Panics
/// If a shape does not fit (the error names the op and the shapes), or
/// `is_causal` is combined with a mask.
#[track_caller]
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    is_causal: bool,
    scale: Option<f64>,
) -> Tensor {
    let op = "scaled_dot_product_attention";
    let (sq, sk, sv) = (q.shape(), k.shape(), v.shape());
    if sq.rank() < 2 || sk.rank() < 2 || sv.rank() < 2 {
        Error::shape(op, "query, key and value need at least two axes [.., L or S, E]", &[&sq, &sk, &sv]).raise();
    }
    let (l, e, s) = (sq[sq.rank() - 2], sq[sq.rank() - 1], sk[sk.rank() - 2]);
    if sk[sk.rank() - 1] != e {
        Error::shape(op, "query and key must have the same last axis E (shapes: query, key)", &[&sq, &sk]).raise();
    }
    if sv[sv.rank() - 2] != s {
        Error::shape(op, "key and value must have the same number S of keys (shapes: key, value)", &[&sk, &sv]).raise();
    }
    let scale = scale.unwrap_or(1.0 / (e.max(1) as f64).sqrt());
    let dt = q.dtype();
    let bias = match (attn_mask, is_causal) {
        (Some(_), true) => {
            Error::invalid(op, "an explicit attn_mask cannot be combined with is_causal (as in PyTorch)").raise()
        }
        (None, true) => Some(causal_on(l, s, dt, q.device())),
        (Some(m), false) => {
            check_mask_ls(op, "attn_mask", m, l, s, q, k);
            Some(if m.dtype() == DType::Bool { bool_to_bias(&m.logical_not(), dt) } else { m.cast(dt) })
        }
        (None, false) => None,
    };
    attention_probs(q, k, bias, scale).matmul(v)
}

/// The masks of [`MultiHeadAttention::forward`], PyTorch's conventions
/// (a bool `true` forbids; see [mask conventions] in this module).
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionMasks<'a> {
    /// `[N, S]` (`[S]` for one unbatched example): bool, `true` for a key
    /// to ignore (padding), or float, added to the scores.
    pub key_padding_mask: Option<&'a Tensor>,
    /// `[L, S]`, or `[N * num_heads, L, S]` (`[num_heads, L, S]`
    /// unbatched): bool, `true` where attention is forbidden, or float,
    /// added to the scores.
    pub attn_mask: Option<&'a Tensor>,
    /// Adds the causal mask ([`causal_mask`]). (PyTorch takes `is_causal`
    /// only as a hint beside an explicit causal `attn_mask`; here it builds
    /// the mask, and adds to `attn_mask` if both are given.)
    pub is_causal: bool,
}

/// Multi-head attention (`torch.nn.MultiheadAttention` with
/// `batch_first=True`, equal query, key and value widths, no dropout):
/// the query, key and value are projected by `in_proj` (the `[E, 3E]`
/// transpose of PyTorch's `in_proj_weight`: columns `0..E` for the query,
/// `E..2E` for the key, `2E..3E` for the value), split into `num_heads`
/// heads of `E / num_heads`, attended with [`scaled_dot_product_attention`]
/// per head, concatenated and projected by `out_proj`.
///
/// Its leaves are `.in_proj.w`, `.in_proj.b`, `.out_proj.w`, `.out_proj.b`.
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::{AttentionMasks, MultiHeadAttention};
///
/// let mha = MultiHeadAttention::init(&Key::new(0), 16, 4, DType::F32);
/// let x = Key::new(1).normal([2, 5, 16], DType::F32); // [N, L, E]
/// let y = mha.forward(&x, &x, &x, AttentionMasks::default());
/// assert_eq!(y.shape().dims(), &[2, 5, 16]);
/// ```
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct MultiHeadAttention {
    /// The packed input projection, `w: [E, 3E]`, `b: [3E]`.
    pub in_proj: Linear,
    /// The output projection, `w: [E, E]`, `b: [E]`.
    pub out_proj: Linear,
    /// The number of heads (dividing `E`).
    #[tree(static)]
    pub num_heads: usize,
}

impl MultiHeadAttention {
    /// PyTorch's initialization: `in_proj` weight Xavier uniform over the
    /// packed `[3E, E]` weight (bound `sqrt(6 / 4E)`), `out_proj` weight
    /// U(-1/sqrt(E), 1/sqrt(E)) (`Linear`'s), both biases zero.
    ///
    /// # Panics
    /// If `num_heads` is zero or does not divide `embed_dim`.
    #[track_caller]
    pub fn init(key: &Key, embed_dim: usize, num_heads: usize, dtype: DType) -> MultiHeadAttention {
        if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
            Error::invalid(
                "MultiHeadAttention",
                format!("embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"),
            )
            .raise();
        }
        let k = key.split(2);
        let e = embed_dim;
        let w_in = init::xavier_uniform(&k[0], [e, 3 * e], e, 3 * e, 1.0, dtype);
        let w_out = init::fan_in_uniform(&k[1], [e, e], e, dtype);
        let device = w_in.device();
        let zeros = |n: usize| Tensor::zeros([n], dtype).to_device(device);
        MultiHeadAttention {
            in_proj: Linear { w: w_in, b: zeros(3 * e) },
            out_proj: Linear { w: w_out, b: zeros(e) },
            num_heads,
        }
    }

    /// The embedding width `E`.
    pub fn embed_dim(&self) -> usize {
        self.out_proj.d_out()
    }

    /// The attention output `[N, L, E]` for `query: [N, L, E]`, `key` and
    /// `value: [N, S, E]` (or `[L, E]`, `[S, E]` for one example).
    ///
    /// # Panics
    /// If the shapes do not fit (the error names `MultiHeadAttention` and
    /// the shapes) or a mask is neither bool nor float.
    #[track_caller]
    pub fn forward(&self, query: &Tensor, key: &Tensor, value: &Tensor, masks: AttentionMasks) -> Tensor {
        self.attend(query, key, value, masks).0
    }

    /// [`MultiHeadAttention::forward`] and the attention weights averaged
    /// over the heads, `[N, L, S]` (`[L, S]` unbatched), as PyTorch's
    /// `need_weights=True, average_attn_weights=True`.
    #[track_caller]
    pub fn forward_with_weights(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        masks: AttentionMasks,
    ) -> (Tensor, Tensor) {
        let (out, probs) = self.attend(query, key, value, masks);
        (out, probs.mean_axis(-3, false))
    }

    /// The output and the per-head probabilities `[.., H, L, S]`.
    #[track_caller]
    fn attend(&self, query: &Tensor, key: &Tensor, value: &Tensor, masks: AttentionMasks) -> (Tensor, Tensor) {
        let op = "MultiHeadAttention";
        let e = self.embed_dim();
        let h = self.num_heads;
        let (sq, sk, sv) = (query.shape(), key.shape(), value.shape());
        let r = sq.rank();
        let batched = r == 3;
        if !(r == 2 || r == 3) || sk.rank() != r || sv.rank() != r {
            Error::shape(
                op,
                "query, key and value must all be [N, L or S, E] (batch_first) or all [L or S, E] (unbatched)",
                &[&sq, &sk, &sv],
            )
            .raise();
        }
        if sq[r - 1] != e || sk[r - 1] != e || sv[r - 1] != e {
            Error::shape(
                op,
                format!("query, key and value must have embed_dim E = {e} as last axis"),
                &[&sq, &sk, &sv],
            )
            .raise();
        }
        if sk[r - 2] != sv[r - 2] || (batched && (sk[0] != sq[0] || sv[0] != sq[0])) {
            Error::shape(op, "key and value must have the same [N, S] (and N the query's)", &[&sq, &sk, &sv]).raise();
        }
        let (l, s) = (sq[r - 2], sk[r - 2]);
        let lead: Vec<isize> = if batched { vec![sq[0] as isize] } else { vec![] };
        let (w, b) = (&self.in_proj.w, &self.in_proj.b);
        // [.., T, E] -> projected -> [.., H, T, E / H]
        let project = |x: &Tensor, i: usize, t: usize| {
            let y = x.matmul(&w.narrow(1, i * e, e)) + b.narrow(0, i * e, e);
            let mut dims = lead.clone();
            dims.extend([t as isize, h as isize, (e / h) as isize]);
            y.reshape(&dims).transpose(-3, -2)
        };
        let (q, k, v) = (project(query, 0, l), project(key, 1, s), project(value, 2, s));
        let bias = self.mask_bias(masks, &sq, &sk, l, s, query.dtype(), query.device());
        let probs = attention_probs(&q, &k, bias, 1.0 / ((e / h) as f64).sqrt());
        let mut dims = lead;
        dims.extend([l as isize, e as isize]);
        let heads = probs.matmul(&v).transpose(-3, -2).reshape(&dims);
        (self.out_proj.forward(&heads), probs)
    }

    /// The sum of the masks as one additive bias broadcasting to
    /// `[.., H, L, S]`, or `None` without masks.
    #[track_caller]
    fn mask_bias(
        &self,
        masks: AttentionMasks,
        sq: &Shape,
        sk: &Shape,
        l: usize,
        s: usize,
        dt: DType,
        device: Device,
    ) -> Option<Tensor> {
        let op = "MultiHeadAttention";
        let h = self.num_heads;
        let batched = sq.rank() == 3;
        let as_bias = |m: &Tensor, what: &str| match m.dtype() {
            DType::Bool => bool_to_bias(m, dt),
            d if d.is_float() => m.cast(dt),
            d => Error::dtype(op, format!("{what} must be bool or float"), &[d]).raise(),
        };
        let mut bias: Option<Tensor> = None;
        let mut add = |t: Tensor| bias = Some(bias.take().map_or(t.clone(), |b| b + &t));
        if let Some(m) = masks.attn_mask {
            let ms = m.shape();
            let n_h = if batched { sq[0] * h } else { h };
            let t = match ms.rank() {
                2 if ms[0] == l && ms[1] == s => as_bias(m, "attn_mask"),
                3 if ms[0] == n_h && ms[1] == l && ms[2] == s => {
                    let b = as_bias(m, "attn_mask");
                    if batched {
                        b.reshape(&[sq[0] as isize, h as isize, l as isize, s as isize])
                    } else {
                        b
                    }
                }
                _ => Error::shape(
                    op,
                    format!(
                        "attn_mask must be [L, S] = [{l}, {s}] or [{}, {l}, {s}] (shapes: attn_mask, query, key)",
                        if batched { "N * num_heads" } else { "num_heads" }
                    ),
                    &[&ms, sq, sk],
                )
                .raise(),
            };
            add(t);
        }
        if let Some(m) = masks.key_padding_mask {
            let ms = m.shape();
            let want: Vec<usize> = if batched { vec![sq[0], s] } else { vec![s] };
            if ms.dims() != want.as_slice() {
                Error::shape(
                    op,
                    format!("key_padding_mask must be {want:?} ([N, S], or [S] unbatched) (shapes: mask, query, key)"),
                    &[&ms, sq, sk],
                )
                .raise();
            }
            let dims: Vec<isize> =
                if batched { vec![sq[0] as isize, 1, 1, s as isize] } else { vec![1, 1, s as isize] };
            add(as_bias(m, "key_padding_mask").reshape(&dims));
        }
        if masks.is_causal {
            add(causal_on(l, s, dt, device));
        }
        bias
    }
}
