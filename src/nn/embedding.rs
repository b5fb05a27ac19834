//! Embedding tables: rows gathered by integer ids.

use super::init;
use crate::{DType, Error, ErrorKind, Key, Tensor};

/// A lookup table (`torch.nn.Embedding`): `forward(ids)` gathers the rows
/// `weight[ids]`, giving `[ids.., embedding_dim]`.
///
/// With `padding_idx`, that row starts at zero and receives no gradient
/// (its forward value is still the row, as in PyTorch).
///
/// ```
/// use xform::prelude::*;
/// use xform::nn::Embedding;
///
/// let emb = Embedding::init(&Key::new(0), 10, 4, DType::F32);
/// let ids = Tensor::from_vec(vec![1i32, 7, 1], [3]);
/// let e = emb.forward(&ids);
/// assert_eq!(e.shape().dims(), &[3, 4]);
/// assert_eq!(e.index(0).to_vec::<f32>(), emb.weight.index(1).to_vec::<f32>());
/// ```
#[derive(Clone, Debug, crate::Tree)]
#[tree(crate = crate)]
pub struct Embedding {
    /// The table, `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
    /// The row that receives no gradient, if any.
    #[tree(static)]
    pub padding_idx: Option<usize>,
}

impl Embedding {
    /// A table with N(0, 1) entries (PyTorch's default) and no padding row.
    ///
    /// # Panics
    /// If `dtype` is not a float type.
    #[track_caller]
    pub fn init(key: &Key, num_embeddings: usize, embedding_dim: usize, dtype: DType) -> Embedding {
        Embedding { weight: init::normal(key, [num_embeddings, embedding_dim], 0.0, 1.0, dtype), padding_idx: None }
    }

    /// The same table with row `idx` zeroed and excluded from the gradient
    /// (PyTorch's `padding_idx`).
    ///
    /// # Panics
    /// If `idx` is not a row of the table.
    #[track_caller]
    pub fn with_padding_idx(mut self, idx: usize) -> Embedding {
        let n = self.num_embeddings();
        if idx >= n {
            Error::invalid("Embedding", format!("padding_idx {idx} is not a row of a table of {n} embeddings")).raise();
        }
        let rows = Tensor::arange(0.0, n as f64, 1.0, DType::I64).to_device(self.weight.device());
        let keep = rows.ne_scalar(idx as i64).unsqueeze(1);
        self.weight = Tensor::where_(&keep, &self.weight, &self.weight.zeros_like());
        self.padding_idx = Some(idx);
        self
    }

    /// The number of rows.
    pub fn num_embeddings(&self) -> usize {
        self.weight.dim(0)
    }

    /// The width of a row.
    pub fn embedding_dim(&self) -> usize {
        self.weight.dim(1)
    }

    /// The rows at `ids` (an integer tensor of any shape): `[ids..,
    /// embedding_dim]`.
    ///
    /// # Panics
    /// If `ids` is not an integer tensor, or a concrete id is outside
    /// `[0, num_embeddings)` (an [`ErrorKind::IndexOutOfRange`] naming
    /// `Embedding`; traced ids, under `vmap` over them, are checked by the
    /// gather when they are evaluated).
    #[track_caller]
    pub fn forward(&self, ids: &Tensor) -> Tensor {
        if !ids.dtype().is_int() {
            Error::dtype("Embedding", "ids must be integers", &[ids.dtype()]).raise();
        }
        let n = self.num_embeddings();
        if !ids.is_tracer() {
            if let Some(bad) = ids.to_vec_f64().into_iter().find(|&i| i < 0.0 || i >= n as f64) {
                Error::new("Embedding", ErrorKind::IndexOutOfRange { index: bad as i64, size: n }).raise();
            }
        }
        let rows = self.weight.take(ids, 0);
        match self.padding_idx {
            None => rows,
            Some(p) => {
                let pad = ids.cast(DType::I64).eq_scalar(p as i64).unsqueeze(-1);
                Tensor::where_(&pad, &rows.stop_gradient(), &rows)
            }
        }
    }
}
