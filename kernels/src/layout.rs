//! Shapes, strided layouts and the iteration engine every CPU kernel uses.
//!
//! A [`Layout`] maps a multi-index to an element offset:
//! `offset + sum(index[d] * strides[d])`. Views (transpose, broadcast, slice,
//! reversal, most reshapes) are layouts over the same storage; kernels accept
//! any layout and read the elements in row-major logical order.

use smallvec::SmallVec;
use std::fmt;
use std::ops::{Deref, DerefMut};

/// Inline storage for dimensions: most arrays have rank 4 or less.
pub type Dims = SmallVec<[usize; 4]>;
/// Strides in elements; negative for reversed views, 0 for broadcast ones.
pub type Strides = SmallVec<[isize; 4]>;

/// The shape of an array: its size along each axis.
#[derive(Eq, Default)]
pub struct Shape(pub Dims);

// Hashes the dims as a slice, consistent with the comparison below.
impl std::hash::Hash for Shape {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0[..].hash(state);
    }
}

// Compared element by element: the derived slice comparison calls `bcmp`,
// which costs more than the loop for the few axes shapes have (every
// shape check of every op compares shapes).
impl PartialEq for Shape {
    #[inline]
    fn eq(&self, other: &Shape) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(other.0.iter()).all(|(a, b)| a == b)
    }
}

// Shapes are cloned on every op (avals, layouts): inline dims are copied
// with fixed moves, where the derived clone extends element by element and
// `from_slice` calls memmove (each ~4-7% of a transformed tiny call).
impl Clone for Shape {
    #[inline]
    fn clone(&self) -> Shape {
        Shape(copy_small(&self.0))
    }
}

/// A copy of a small vector of plain values: ranks up to 4 with fixed-size
/// moves and no call.
#[inline(always)]
pub(crate) fn copy_small<T: Copy + Default>(v: &SmallVec<[T; 4]>) -> SmallVec<[T; 4]> {
    let n = v.len();
    if n > 4 {
        return SmallVec::from_slice(v);
    }
    let mut buf = [T::default(); 4];
    // Unrolled on purpose: a loop here is turned back into a memmove call.
    if n > 0 {
        buf[0] = v[0];
    }
    if n > 1 {
        buf[1] = v[1];
    }
    if n > 2 {
        buf[2] = v[2];
    }
    if n > 3 {
        buf[3] = v[3];
    }
    SmallVec::from_buf_and_len(buf, n)
}

impl Shape {
    /// The shape of a scalar (rank 0).
    pub fn scalar() -> Shape {
        Shape(Dims::new())
    }
    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// Number of elements (1 for a scalar). It saturates at `usize::MAX`
    /// for a shape no array can have (see [`Shape::checked_numel`]), so
    /// comparing counts never overflows.
    pub fn numel(&self) -> usize {
        self.0.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }
    /// Number of elements of an array of this shape whose elements take
    /// `itemsize` bytes, or `None` if no array can have it: its bytes, or
    /// the span of its contiguous strides (the sizes' product with zeros
    /// counted as one), would pass `isize::MAX`, the most a Rust
    /// allocation or an `isize` stride can address.
    pub fn checked_numel(&self, itemsize: usize) -> Option<usize> {
        let span = self.0.iter().try_fold(itemsize.max(1), |n, &d| n.checked_mul(d.max(1)))?;
        if span > isize::MAX as usize {
            return None;
        }
        Some(self.numel())
    }
    /// Row-major strides of a contiguous array of this shape.
    pub fn contiguous_strides(&self) -> Strides {
        let n = self.0.len();
        if n <= 4 {
            // Inline ranks (nearly every array) without pushes and a reverse.
            let mut buf = [0isize; 4];
            let mut acc = 1isize;
            for d in (0..n).rev() {
                buf[d] = acc;
                acc *= self.0[d].max(1) as isize;
            }
            return Strides::from_buf_and_len(buf, n);
        }
        let mut strides = Strides::new();
        let mut acc = 1isize;
        for d in (0..n).rev() {
            strides.push(acc);
            acc *= self.0[d].max(1) as isize;
        }
        strides.reverse();
        strides
    }
    /// This shape without axis `axis` (which must exist).
    #[inline]
    pub fn without_axis(&self, axis: usize) -> Shape {
        let mut dims = Dims::new();
        for (i, &n) in self.0.iter().enumerate() {
            if i != axis {
                dims.push(n);
            }
        }
        Shape(dims)
    }
    /// The dims as a slice.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
}

impl Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.0
    }
}
impl DerefMut for Shape {
    fn deref_mut(&mut self) -> &mut [usize] {
        &mut self.0
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Shape {
        Shape(Dims::from_slice(d))
    }
}
impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Shape {
        Shape(Dims::from_vec(d))
    }
}
impl From<Dims> for Shape {
    fn from(d: Dims) -> Shape {
        Shape(d)
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Shape {
        Shape(Dims::from_slice(&d))
    }
}
impl<const N: usize> From<&[usize; N]> for Shape {
    fn from(d: &[usize; N]) -> Shape {
        Shape(Dims::from_slice(d))
    }
}
impl From<&Vec<usize>> for Shape {
    fn from(d: &Vec<usize>) -> Shape {
        Shape(Dims::from_slice(d))
    }
}
impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Shape {
        s.clone()
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Shape {
        Shape::scalar()
    }
}

/// Where the elements of an array live in its storage.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    /// Logical shape.
    pub shape: Shape,
    /// Element strides per axis.
    pub strides: Strides,
    /// Offset of the element at index 0 (the first in logical order).
    pub offset: usize,
}

impl Clone for Layout {
    #[inline]
    fn clone(&self) -> Layout {
        Layout { shape: self.shape.clone(), strides: copy_small(&self.strides), offset: self.offset }
    }
}

impl Layout {
    /// A fresh row-major layout at offset 0.
    pub fn contiguous(shape: Shape) -> Layout {
        let strides = shape.contiguous_strides();
        Layout { shape, strides, offset: 0 }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// The kept axes (in order) and the `axes` to reduce over, each as sizes
    /// and strides: `(kept_shape, kept_strides, reduced_shape, reduced_strides)`.
    pub fn split_axes(&self, axes: &[usize]) -> (Dims, Strides, Dims, Strides) {
        let (mut ks, mut kt, mut rs, mut rt) = (Dims::new(), Strides::new(), Dims::new(), Strides::new());
        for d in 0..self.rank() {
            if axes.contains(&d) {
                rs.push(self.shape[d]);
                rt.push(self.strides[d]);
            } else {
                ks.push(self.shape[d]);
                kt.push(self.strides[d]);
            }
        }
        (ks, kt, rs, rt)
    }

    /// The destination of each part of a concatenation along `axis`: the
    /// slices of a contiguous `out_shape` layout, one per size in `sizes`.
    pub fn concat_slots(out_shape: &Shape, axis: usize, sizes: impl IntoIterator<Item = usize>) -> Vec<Layout> {
        let full = Layout::contiguous(out_shape.clone());
        let ones = vec![1; full.rank()];
        let mut at = 0usize;
        sizes
            .into_iter()
            .map(|n| {
                let mut start = vec![0; full.rank()];
                let mut limit: Vec<usize> = out_shape.to_vec();
                start[axis] = at;
                limit[axis] = at + n;
                at += n;
                full.slice(&start, &limit, &ones)
            })
            .collect()
    }

    /// True if the elements are row-major and dense from `offset` on.
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1isize;
        for d in (0..self.shape.len()).rev() {
            let n = self.shape[d];
            if n == 0 {
                return true;
            }
            if n != 1 {
                if self.strides[d] != expected {
                    return false;
                }
                expected *= n as isize;
            }
        }
        true
    }

    /// The storage range `offset..offset+numel` if the layout is contiguous.
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        // One pass over the axes (every kernel call asks this of each
        // operand): the element count and the contiguity check together.
        let mut n = 1usize;
        let mut contiguous = true;
        for (&d, &s) in self.shape.iter().zip(self.strides.iter()).rev() {
            if d == 0 {
                return Some(0..0);
            }
            contiguous &= d == 1 || s == n as isize;
            n *= d;
        }
        contiguous.then(|| self.offset..self.offset + n)
    }

    /// True if two different indices can reach the same element (a broadcast
    /// axis of size > 1). Writes through such a layout are refused.
    pub fn has_internal_overlap(&self) -> bool {
        self.shape.iter().zip(self.strides.iter()).any(|(&n, &s)| n > 1 && s == 0)
    }

    /// The smallest and one-past-largest storage offsets this layout touches
    /// (empty range for an empty array).
    pub fn storage_span(&self) -> std::ops::Range<usize> {
        if self.numel() == 0 {
            return self.offset..self.offset;
        }
        let (mut lo, mut hi) = (self.offset as isize, self.offset as isize);
        for (&n, &s) in self.shape.iter().zip(self.strides.iter()) {
            let ext = (n as isize - 1) * s;
            if ext < 0 {
                lo += ext;
            } else {
                hi += ext;
            }
        }
        lo as usize..hi as usize + 1
    }

    /// Offset of a multi-index.
    pub fn offset_of(&self, index: &[usize]) -> usize {
        let mut off = self.offset as isize;
        for (i, s) in index.iter().zip(self.strides.iter()) {
            off += *i as isize * s;
        }
        off as usize
    }

    /// Axes permuted: axis `d` of the result is axis `perm[d]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: Shape(perm.iter().map(|&p| self.shape[p]).collect()),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Broadcast to `shape`: axis `d` of `self` becomes axis `dims[d]` of the
    /// result (where it must have the same size or size 1); every other axis
    /// has stride 0.
    pub fn broadcast_in_dim(&self, shape: &Shape, dims: &[usize]) -> Layout {
        let mut strides: Strides = smallvec::smallvec![0; shape.len()];
        for (d, &od) in dims.iter().enumerate() {
            strides[od] = if self.shape[d] == 1 && shape[od] != 1 { 0 } else { self.strides[d] };
        }
        Layout { shape: shape.clone(), strides, offset: self.offset }
    }

    /// Strided slice: `start[d]..limit[d]` with step `step[d]` (>= 1).
    pub fn slice(&self, start: &[usize], limit: &[usize], step: &[usize]) -> Layout {
        let mut offset = self.offset as isize;
        let mut shape = Dims::with_capacity(self.rank());
        let mut strides = Strides::with_capacity(self.rank());
        for d in 0..self.rank() {
            let n = limit[d].saturating_sub(start[d]).div_ceil(step[d]);
            if n > 0 {
                offset += start[d] as isize * self.strides[d];
            }
            shape.push(n);
            strides.push(self.strides[d] * step[d] as isize);
        }
        let empty = shape.contains(&0);
        Layout { shape: Shape(shape), strides, offset: if empty { 0 } else { offset.max(0) as usize } }
    }

    /// The given axes reversed (a view with negative strides).
    pub fn rev(&self, axes: &[usize]) -> Layout {
        let mut out = self.clone();
        for &a in axes {
            let n = self.shape[a];
            if n > 0 {
                out.offset = (out.offset as isize + (n as isize - 1) * self.strides[a]) as usize;
            }
            out.strides[a] = -self.strides[a];
        }
        out
    }

    /// The same elements under a new shape without copying, if the strides
    /// allow it (numpy's no-copy reshape); `None` means a copy is needed.
    pub fn reshape(&self, new_shape: &Shape) -> Option<Layout> {
        if self.is_contiguous() {
            return Some(Layout {
                shape: new_shape.clone(),
                strides: new_shape.contiguous_strides(),
                offset: self.offset,
            });
        }
        if self.numel() == 0 {
            return None;
        }
        // Group old axes into runs that are contiguous among themselves and
        // split each run into the new axes that cover the same elements.
        let old: Vec<(usize, isize)> =
            self.shape.iter().zip(self.strides.iter()).filter(|(&n, _)| n != 1).map(|(&n, &s)| (n, s)).collect();
        let new: Vec<usize> = new_shape.iter().copied().collect();
        let mut strides: Strides = smallvec::smallvec![0; new.len()];
        let (mut oi, mut ni) = (0usize, 0usize);
        while ni < new.len() && new[ni] == 1 {
            strides[ni] = 1;
            ni += 1;
        }
        while oi < old.len() {
            // One run of old axes [oi, oj) whose product equals new axes [ni, nj).
            let (mut op, mut np) = (old[oi].0, 1usize);
            let mut oj = oi + 1;
            let mut nj = ni;
            loop {
                if np < op {
                    if nj >= new.len() {
                        return None;
                    }
                    np *= new[nj];
                    nj += 1;
                } else if np > op {
                    if oj >= old.len() {
                        return None;
                    }
                    op *= old[oj].0;
                    oj += 1;
                } else {
                    break;
                }
            }
            // The old run must be contiguous among itself.
            for k in oi..oj - 1 {
                if old[k].1 != old[k + 1].1 * old[k + 1].0 as isize {
                    return None;
                }
            }
            let mut s = old[oj - 1].1;
            for k in (ni..nj).rev() {
                strides[k] = s;
                s *= new[k] as isize;
            }
            oi = oj;
            ni = nj;
            while ni < new.len() && new[ni] == 1 {
                strides[ni] = 1;
                ni += 1;
            }
        }
        if ni != new.len() {
            return None;
        }
        Some(Layout { shape: new_shape.clone(), strides, offset: self.offset })
    }
}

/// Layouts of several operands of one shape, simplified for iteration:
/// size-1 axes dropped and adjacent axes merged where every operand allows.
#[derive(Clone, Debug)]
pub struct Coalesced<const N: usize> {
    /// Merged shape (outermost first); never empty (a scalar becomes `[1]`).
    pub shape: Dims,
    /// Per operand, the merged strides.
    pub strides: [Strides; N],
    /// Per operand, the starting offset.
    pub offsets: [usize; N],
}

/// The merged shape of operands of one shape (`stride(k, d)`: operand
/// `k`'s stride on axis `d`), each operand's merged strides pushed onto the
/// (empty) `strides[k]`: size-1 axes dropped, adjacent axes merged where
/// every operand allows. Never empty: a scalar becomes `[1]`, an empty
/// shape `[0]` (strides `[1]`). [`Coalesced`] for a fixed number of
/// operands; the jit's fused CUDA kernels for any.
pub fn coalesce_into(shape: &[usize], stride: impl Fn(usize, usize) -> isize, strides: &mut [Strides]) -> Dims {
    let mut dims = Dims::new();
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let mergeable = !dims.is_empty()
            && strides.iter().enumerate().all(|(k, s)| *s.last().expect("an axis") == stride(k, d) * n as isize);
        if mergeable {
            *dims.last_mut().expect("an axis") *= n;
            for (k, s) in strides.iter_mut().enumerate() {
                *s.last_mut().expect("an axis") = stride(k, d);
            }
        } else {
            dims.push(n);
            for (k, s) in strides.iter_mut().enumerate() {
                s.push(stride(k, d));
            }
        }
    }
    if dims.is_empty() || shape.contains(&0) {
        let empty = shape.contains(&0);
        dims = smallvec::smallvec![if empty { 0 } else { 1 }];
        for s in strides.iter_mut() {
            *s = smallvec::smallvec![1];
        }
    }
    dims
}

impl<const N: usize> Coalesced<N> {
    /// Coalesce operands that all have the shape `shape`.
    pub fn new(shape: &[usize], layouts: [(&[isize], usize); N]) -> Self {
        let mut strides: [Strides; N] = std::array::from_fn(|_| Strides::new());
        let dims = coalesce_into(shape, |k, d| layouts[k].0[d], &mut strides);
        Coalesced { shape: dims, strides, offsets: std::array::from_fn(|k| layouts[k].1) }
    }

    /// Length of the innermost run.
    pub fn inner_len(&self) -> usize {
        *self.shape.last().unwrap()
    }

    /// Number of innermost runs.
    pub fn runs(&self) -> usize {
        self.shape[..self.shape.len() - 1].iter().product()
    }

    /// Innermost stride of each operand.
    pub fn inner_strides(&self) -> [isize; N] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap())
    }

    /// Calls `f(offsets, len, inner_strides)` for runs `first..first+count` in
    /// row-major order.
    #[inline]
    pub fn for_runs(&self, first: usize, count: usize, mut f: impl FnMut([usize; N], usize, [isize; N])) {
        let outer = &self.shape[..self.shape.len() - 1];
        let len = self.inner_len();
        if len == 0 || count == 0 {
            return;
        }
        let inner = self.inner_strides();
        // Odometer over the outer axes, started at `first`.
        let mut idx: Dims = smallvec::smallvec![0; outer.len()];
        let mut rem = first;
        for d in (0..outer.len()).rev() {
            idx[d] = rem % outer[d];
            rem /= outer[d];
        }
        let mut offs: [isize; N] = std::array::from_fn(|k| {
            let mut o = self.offsets[k] as isize;
            for d in 0..outer.len() {
                o += idx[d] as isize * self.strides[k][d];
            }
            o
        });
        for r in 0..count {
            f(offs.map(|o| o as usize), len, inner);
            if r + 1 == count {
                break;
            }
            // Advance the odometer.
            let mut d = outer.len();
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                for k in 0..N {
                    offs[k] += self.strides[k][d];
                }
                if idx[d] < outer[d] {
                    break;
                }
                for k in 0..N {
                    offs[k] -= self.strides[k][d] * outer[d] as isize;
                }
                idx[d] = 0;
            }
        }
    }
}

/// Calls `f(index)` for every multi-index of `shape` in row-major order
/// (for the less common kernels, where clarity beats speed).
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut index: Dims = smallvec::smallvec![0; shape.len()];
    loop {
        f(&index);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(l: &Layout) -> Vec<usize> {
        let mut v = vec![];
        for_each_index(&l.shape, |i| v.push(l.offset_of(i)));
        v
    }

    #[test]
    fn reshape_views_match_copy_order() {
        let base = Layout::contiguous(Shape::from([2, 3, 4]));
        let t = base.slice(&[0, 0, 0], &[2, 3, 2], &[1, 1, 1]); // [2,3,2], strides [12,4,1]
                                                                // merging the first two axes works without a copy
        let r = t.reshape(&Shape::from([6, 2])).unwrap();
        assert_eq!(offsets(&r), offsets(&t));
        // merging the last two does not
        assert!(t.reshape(&Shape::from([2, 6])).is_none());
        // splitting and unit axes work
        let s = t.reshape(&Shape::from([2, 3, 1, 2, 1])).unwrap();
        assert_eq!(offsets(&s), offsets(&t));
        let p = base.permute(&[1, 0, 2]); // [3,2,4], strides [4,12,1]
        let u = p.reshape(&Shape::from([3, 1, 2, 2, 2])).unwrap();
        assert_eq!(offsets(&u), offsets(&p));
        assert!(p.reshape(&Shape::from([3, 8])).is_none());
    }

    #[test]
    fn coalesced_runs_visit_row_major_offsets() {
        let base = Layout::contiguous(Shape::from([4, 5, 6]));
        for l in
            [base.clone(), base.permute(&[2, 0, 1]), base.slice(&[1, 0, 2], &[4, 5, 6], &[2, 2, 1]), base.rev(&[1])]
        {
            let c = Coalesced::new(&l.shape, [(&l.strides[..], l.offset)]);
            let mut got = vec![];
            c.for_runs(0, c.runs(), |[o], n, [s]| {
                for i in 0..n {
                    got.push((o as isize + i as isize * s) as usize);
                }
            });
            assert_eq!(got, offsets(&l));
            // starting mid-way gives the tail
            if c.runs() > 2 {
                let mut tail = vec![];
                c.for_runs(2, c.runs() - 2, |[o], n, [s]| {
                    for i in 0..n {
                        tail.push((o as isize + i as isize * s) as usize);
                    }
                });
                assert_eq!(tail[..], got[2 * c.inner_len()..]);
            }
        }
    }

    #[test]
    fn checked_numel_refuses_sizes_past_isize_max() {
        let big = 1usize << 32;
        assert_eq!(Shape::from([big, big]).numel(), usize::MAX, "saturates");
        assert_eq!(Shape::from([big, big]).checked_numel(1), None);
        assert_eq!(Shape::from([1 << 61]).checked_numel(4), None); // 2^63 bytes
        assert_eq!(Shape::from([1 << 61]).checked_numel(2), Some(1 << 61));
        assert_eq!(Shape::from([big, big, 0]).checked_numel(1), None, "its strides overflow");
        assert_eq!(Shape::from([big, 0]).checked_numel(8), Some(0));
        assert_eq!(Shape::scalar().checked_numel(8), Some(1));
    }

    #[test]
    fn span_and_overlap() {
        let base = Layout::contiguous(Shape::from([3, 4]));
        assert_eq!(base.storage_span(), 0..12);
        assert_eq!(base.rev(&[0, 1]).storage_span(), 0..12);
        let b = base.slice(&[0, 0], &[1, 4], &[1, 1]).broadcast_in_dim(&Shape::from([5, 4]), &[0, 1]);
        assert!(b.has_internal_overlap());
    }
}
