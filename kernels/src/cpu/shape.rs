//! Kernels for the structural primitives that need a copy: pad, concatenate,
//! iota, dynamic_update_slice. (Transpose, broadcast, slice, reversal and
//! most reshapes are layouts, not kernels.)

use super::elementwise::{fill_strided, write_strided};
use crate::layout::{Layout, Shape, Strides};

/// Output shape of `pad`: `low + high + n + (n - 1) * interior` per axis.
/// `None` if some axis would have negative size.
pub fn pad_shape(shape: &Shape, low: &[i64], high: &[i64], interior: &[usize]) -> Option<Shape> {
    let mut out = Vec::with_capacity(shape.rank());
    for d in 0..shape.rank() {
        let total = padded_len(shape[d], low[d], high[d], interior[d]);
        if total < 0 || total > isize::MAX as i128 {
            return None;
        }
        out.push(total as usize);
    }
    Some(Shape::from(out))
}

/// The padded length of one axis of size `n`, exact (i128 holds every
/// combination of the operands, so it never overflows).
pub fn padded_len(n: usize, low: i64, high: i64, interior: usize) -> i128 {
    let n = n as i128;
    let inner = if n > 0 { (n - 1) * interior as i128 } else { 0 };
    low as i128 + high as i128 + n + inner
}

/// Pads `x` with `value`: `low`/`high` elements at each end of each axis
/// (negative values crop), `interior` elements between neighbours.
pub fn pad<T: Copy>(x: &[T], lx: &Layout, low: &[i64], high: &[i64], interior: &[usize], value: T) -> Vec<T> {
    let out_shape = pad_shape(&lx.shape, low, high, interior).expect("pad shape checked by caller");
    let mut out = crate::pool::filled(out_shape.numel(), value);
    if out.is_empty() || lx.numel() == 0 {
        return out;
    }
    let ostr = out_shape.contiguous_strides();
    // The input elements that land inside the output, and where they land.
    let (mut start, mut limit) = (vec![0usize; lx.rank()], vec![0usize; lx.rank()]);
    let mut dst_offset = 0isize;
    let mut dst_strides = Strides::new();
    for d in 0..lx.rank() {
        // In i128: padding amounts near i64::MIN/MAX that cancel out are
        // valid and must not overflow here.
        let (low, step) = (low[d] as i128, interior[d] as i128 + 1);
        let n = lx.shape[d] as i128;
        let on = out_shape[d] as i128;
        // position of input i: low + i * step, kept while 0 <= pos < on
        let first = if low >= 0 { 0 } else { (-low + step - 1) / step };
        let last = if on - low <= 0 { 0 } else { ((on - 1 - low) / step + 1).min(n) };
        let (first, last) = (first.min(n), last.max(first.min(n)));
        if first == last {
            return out; // no input element lands inside the output
        }
        start[d] = first as usize;
        limit[d] = last as usize;
        dst_offset += (low + first * step) as isize * ostr[d];
        dst_strides.push(ostr[d] * step as isize);
    }
    let src = lx.slice(&start, &limit, &vec![1; lx.rank()]);
    if src.numel() == 0 {
        return out;
    }
    let dst = Layout { shape: src.shape.clone(), strides: dst_strides, offset: dst_offset as usize };
    write_strided(&mut out, &dst, x, &src);
    out
}

/// Concatenates `parts` (each a slice and its layout) along `axis`.
pub fn concatenate<T: Copy + Default>(parts: &[(&[T], &Layout)], axis: usize, out_shape: &Shape) -> Vec<T> {
    let mut out = crate::pool::filled(out_shape.numel(), T::default());
    let slots = Layout::concat_slots(out_shape, axis, parts.iter().map(|(_, lx)| lx.shape[axis]));
    for ((x, lx), dst) in parts.iter().zip(&slots) {
        if dst.numel() > 0 {
            write_strided(&mut out, dst, x, lx);
        }
    }
    out
}

/// `out[i] = i[dim]` over `shape`, converted by `conv`.
pub fn iota<T>(shape: &Shape, dim: usize, conv: impl Fn(usize) -> T) -> Vec<T> {
    let n = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let total = shape.numel();
    crate::pool::from_fn(total, |k| conv((k / inner) % n))
}

/// A copy of `operand` with the block at `start` replaced by `update`.
pub fn dynamic_update_slice<T: Copy + Send + Sync>(
    operand: &[T],
    lo: &Layout,
    update: &[T],
    lu: &Layout,
    start: &[usize],
) -> Vec<T> {
    let mut out = super::elementwise::to_contiguous(operand, lo, super::Par::Seq);
    let full = Layout::contiguous(lo.shape.clone());
    let limit: Vec<usize> = start.iter().zip(lu.shape.iter()).map(|(s, n)| s + n).collect();
    let dst = full.slice(start, &limit, &vec![1; full.rank()]);
    if dst.numel() > 0 {
        write_strided(&mut out, &dst, update, lu);
    }
    out
}

/// Fills `dst` through layout `ld` (helper re-exported for in-place fill).
pub fn fill<T: Copy>(dst: &mut [T], ld: &Layout, value: T) {
    fill_strided(dst, ld, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_low_high_interior_and_crop() {
        let x = vec![1, 2, 3];
        let l = Layout::contiguous(Shape::from([3]));
        assert_eq!(pad(&x, &l, &[1], &[2], &[1], 0), vec![0, 1, 0, 2, 0, 3, 0, 0]);
        assert_eq!(pad(&x, &l, &[-1], &[0], &[0], 0), vec![2, 3]);
        assert_eq!(pad(&x, &l, &[-2], &[-1], &[1], 9), vec![2, 9]);
        assert_eq!(pad(&x, &l, &[-1], &[1], &[1], 9), vec![9, 2, 9, 3, 9]);
        assert_eq!(pad_shape(&Shape::from([3]), &[-5], &[0], &[0]), None);
        // Overflowing widths are refused; widths that cancel are exact.
        assert_eq!(pad_shape(&Shape::from([3]), &[i64::MAX], &[i64::MAX], &[0]), None);
        assert_eq!(pad_shape(&Shape::from([3]), &[0], &[0], &[usize::MAX]), None);
        assert_eq!(pad_shape(&Shape::from([3]), &[i64::MIN + 2], &[i64::MAX - 1], &[0]), Some(Shape::from([3])));
    }

    #[test]
    fn concat_and_iota() {
        let a = [1, 2];
        let b = [3, 4, 5, 6];
        let la = Layout::contiguous(Shape::from([2, 1]));
        let lb = Layout::contiguous(Shape::from([2, 2]));
        let out = concatenate(&[(&a[..], &la), (&b[..], &lb)], 1, &Shape::from([2, 3]));
        assert_eq!(out, vec![1, 3, 4, 2, 5, 6]);
        assert_eq!(iota(&Shape::from([2, 3]), 1, |i| i as i32), vec![0, 1, 2, 0, 1, 2]);
    }
}
