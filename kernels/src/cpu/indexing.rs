//! Gather and scatter-add with `tf.gather` semantics: the first `batch_dims`
//! axes of operand and indices are matched, and one operand axis is indexed.
//!
//! With `operand` viewed as `[B, PRE, N, POST]` and `indices` as `[B, I]`:
//! `gather: out[b, pre, i, post] = operand[b, pre, idx[b, i], post]`, and
//! `scatter_add: out = operand; out[b, pre, idx[b, i], post] += upd[b, pre, i, post]`.
//! Negative indices count from the end; anything outside `[-N, N)` is an error.

/// The four extents `[B, PRE, N, POST]` of an operand and the index count `I`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GatherExtents {
    /// Product of the batch axes.
    pub batch: usize,
    /// Product of the operand axes between the batch axes and the indexed one.
    pub pre: usize,
    /// Size of the indexed axis.
    pub n: usize,
    /// Product of the operand axes after the indexed one.
    pub post: usize,
    /// Product of the index axes after the batch axes.
    pub count: usize,
}

/// An index outside `[-n, n)`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IndexOutOfRange {
    /// The offending index.
    pub index: i64,
    /// The size of the indexed axis.
    pub size: usize,
}

#[inline]
fn resolve(i: i64, n: usize) -> Result<usize, IndexOutOfRange> {
    let j = if i < 0 { i + n as i64 } else { i };
    if j < 0 || j >= n as i64 {
        Err(IndexOutOfRange { index: i, size: n })
    } else {
        Ok(j as usize)
    }
}

/// Gather from a contiguous operand with contiguous indices (as i64).
pub fn gather<T: Copy + Default>(operand: &[T], idx: &[i64], e: GatherExtents) -> Result<Vec<T>, IndexOutOfRange> {
    let mut out = crate::pool::vec_with_capacity(e.batch * e.pre * e.count * e.post);
    for b in 0..e.batch {
        for p in 0..e.pre {
            for i in 0..e.count {
                let j = resolve(idx[b * e.count + i], e.n)?;
                let src = ((b * e.pre + p) * e.n + j) * e.post;
                out.extend_from_slice(&operand[src..src + e.post]);
            }
        }
    }
    Ok(out)
}

/// Scatter-add `updates` into a copy of a contiguous `operand`.
pub fn scatter_add<T: Copy>(
    operand: Vec<T>,
    idx: &[i64],
    updates: &[T],
    e: GatherExtents,
    add: impl Fn(T, T) -> T,
) -> Result<Vec<T>, IndexOutOfRange> {
    let mut out = operand;
    for b in 0..e.batch {
        for i in 0..e.count {
            let j = resolve(idx[b * e.count + i], e.n)?;
            for p in 0..e.pre {
                let dst = ((b * e.pre + p) * e.n + j) * e.post;
                let src = ((b * e.pre + p) * e.count + i) * e.post;
                for (o, u) in out[dst..dst + e.post].iter_mut().zip(&updates[src..src + e.post]) {
                    *o = add(*o, *u);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_rows_and_accumulate_back() {
        // operand [3, 2], take rows [2, 0, 2]
        let op = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let e = GatherExtents { batch: 1, pre: 1, n: 3, post: 2, count: 3 };
        let g = gather(&op, &[2, 0, -1], e).unwrap();
        assert_eq!(g, vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
        let s = scatter_add(vec![0.0; 6], &[2, 0, 2], &g, e, |a, b| a + b).unwrap();
        assert_eq!(s, vec![1.0, 2.0, 0.0, 0.0, 10.0, 12.0]);
        assert_eq!(gather(&op, &[3], GatherExtents { count: 1, ..e }), Err(IndexOutOfRange { index: 3, size: 3 }));
    }
}
