//! Jacobians and Hessians: `jacfwd` is vmap of jvp over a basis of input
//! tangents, `jacrev` is vmap of the pullback over a basis of output
//! cotangents, `hessian` is `jacfwd(jacrev(f))`. The basis is processed in
//! chunks so that basis and result stay within a memory budget.
//!
//! For `f: Fn(&X) -> Y` the Jacobian is a `Y::Map<X>`: for each output
//! leaf, a tree like the input whose leaves have shape
//! `output.shape ++ input.shape` (for tensors in and out: one tensor).

use crate::jvp::jvp_flat;
use crate::linearize::{linearize_flat, Ct};
use crate::tree::Tree;
use crate::vmap::{vmap, vmap_with, VmapOptions};
use smallvec::SmallVec;
use xform_ops::{lax, Error, OrRaise, Result, Shape, Tensor};

/// Options of [`jacfwd_with`] and [`jacrev_with`].
#[derive(Clone, Debug)]
pub struct JacOptions {
    /// Upper bound in bytes on the basis and the partial result processed at
    /// once; larger Jacobians are computed in several chunks.
    pub max_bytes: usize,
}

impl Default for JacOptions {
    fn default() -> Self {
        JacOptions { max_bytes: 1 << 30 }
    }
}

/// Rows `[start, start + k)` of the identity over the concatenated leaves,
/// split into one `[k, leaf shape]` tensor per leaf (in each leaf's dtype,
/// on its device).
fn basis_chunk(leaves: &[Tensor], start: usize, k: usize) -> Result<Vec<Tensor>> {
    let mut off = 0;
    leaves
        .iter()
        .map(|l| {
            let n = l.numel();
            // row r is basis vector start + r: column (start + r) - off of this leaf
            let eye = Tensor::eye_nm(k, n, start as isize - off as isize, l.dtype());
            off += n;
            let mut leaf_shape = l.shape();
            leaf_shape.0.insert(0, k);
            lax::reshape(&eye.try_to_device(l.device())?, &leaf_shape)
        })
        .collect()
}

/// How many basis rows fit the budget, given the bytes each row costs.
fn rows_per_chunk(opts: &JacOptions, row_bytes: usize, total: usize) -> usize {
    (opts.max_bytes / row_bytes.max(1)).clamp(1, total.max(1))
}

/// Runs `per_chunk(start, k)` over the basis rows and concatenates each
/// result leaf along axis 0. An empty basis (zero elements in or out) is
/// one chunk of zero rows, so the result still has its shape (`[0, ...]`).
fn chunked(total: usize, chunk: usize, mut per_chunk: impl FnMut(usize, usize) -> Vec<Tensor>) -> Result<Vec<Tensor>> {
    if total == 0 {
        return Ok(per_chunk(0, 0));
    }
    let mut parts: Vec<Vec<Tensor>> = Vec::new();
    let mut start = 0;
    while start < total {
        let k = chunk.min(total - start);
        parts.push(per_chunk(start, k));
        start += k;
    }
    if parts.len() == 1 {
        return Ok(parts.pop().expect("one part"));
    }
    (0..parts[0].len()).map(|i| lax::concatenate(&parts.iter().map(|p| p[i].clone()).collect::<Vec<_>>(), 0)).collect()
}

/// A zero Jacobian block for an input or output that is not a float
/// (JAX's float0): shaped `out ++ in`, in the non-float leaf's dtype.
fn zero_block(out: &Tensor, input: &Tensor) -> Result<Tensor> {
    let mut s = out.shape().0.clone();
    s.extend_from_slice(&input.shape());
    let dtype = if input.dtype().is_float() { out.dtype() } else { input.dtype() };
    lax::full(&Shape(s), 0.0, dtype, input.device())
}

/// Forward-mode Jacobian.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let j = xform_transforms::jacfwd(|x: &Tensor| x * x)(&x);
/// assert_eq!(j.to_vec::<f64>(), vec![2.0, 0.0, 0.0, 4.0]);
/// ```
///
/// Integer and bool leaves of the argument are not differentiated: their
/// blocks are zeros in the leaf's dtype (JAX's float0 with `allow_int`).
/// An integer output is an error, as in JAX.
pub fn jacfwd<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y::Map<X> {
    jacfwd_with(f, JacOptions::default())
}

/// [`jacfwd`] with a memory budget.
pub fn jacfwd_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: JacOptions) -> impl Fn(&X) -> Y::Map<X> {
    move |x: &X| try_jacfwd(&|x: &X| (f(x), ()), &opts, x, "jacfwd", false).or_raise().0
}

/// [`jacfwd`] of the first output of `f`, and its second output (aux data,
/// not differentiated), like JAX's `jacfwd(f, has_aux=True)`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let (j, n) = xform_transforms::jacfwd_with_aux(|x: &Tensor| (x * 3.0, x.sum()))(&x);
/// assert_eq!((j.to_vec::<f64>(), n.item::<f64>()), (vec![3.0, 0.0, 0.0, 3.0], 3.0));
/// ```
pub fn jacfwd_with_aux<X: Tree, Y: Tree, A: Tree>(f: impl Fn(&X) -> (Y, A)) -> impl Fn(&X) -> (Y::Map<X>, A) {
    move |x: &X| try_jacfwd(&f, &JacOptions::default(), x, "jacfwd", false).or_raise()
}

/// Refuses an integer or bool output leaf, as JAX's jacfwd and jacrev do
/// ("requires real-valued outputs"), unless `int_outputs` (the outer
/// Jacobian of a Hessian, whose inner gradient has integer zeros for
/// integer arguments).
fn check_outputs<Y: Tree>(op: &str, y: &Y, leaves: &[Tensor], int_outputs: bool) -> Result<()> {
    if int_outputs || leaves.iter().all(|l| l.dtype().is_float()) {
        return Ok(());
    }
    let paths = y.paths();
    let (i, l) = leaves.iter().enumerate().find(|(_, l)| !l.dtype().is_float()).expect("a non-float leaf");
    Err(Error::transform(
        op,
        format!(
            "output {} has dtype {}; Jacobians need floating-point values (integer and bool arguments are \
             allowed and get zero blocks, integer outputs are not)",
            paths[i],
            l.dtype()
        ),
    ))
}

pub(crate) fn try_jacfwd<X: Tree, Y: Tree, A: Tree>(
    f: &impl Fn(&X) -> (Y, A),
    opts: &JacOptions,
    x: &X,
    op: &'static str,
    int_outputs: bool,
) -> Result<(Y::Map<X>, A)> {
    crate::grad::check_differentiable(op, x)?;
    let ins = x.leaves();
    let diff: SmallVec<[bool; 4]> = ins.iter().map(|l| l.dtype().is_float()).collect();
    let dins: Vec<Tensor> = ins.iter().filter(|l| l.dtype().is_float()).cloned().collect();
    if dins.is_empty() {
        // No leaves at all (an empty tree; one without float leaves was
        // refused above): every block is empty.
        let (y, aux) = f(x);
        check_outputs(op, &y, &y.leaves(), int_outputs)?;
        let blocks: Vec<X> = y
            .leaves()
            .iter()
            .map(|o| Ok(x.with_leaves(ins.iter().map(|l| zero_block(o, l)).collect::<Result<Vec<_>>>()?)))
            .collect::<Result<_>>()?;
        return Ok((y.build_map(&mut blocks.into_iter()), aux));
    }
    let total: usize = dins.iter().map(|l| l.numel()).sum();
    let row_bytes = dins.iter().map(|l| l.numel() * l.dtype().size_bytes()).sum::<usize>() * 2;
    let chunk = rows_per_chunk(opts, row_bytes, total);
    let mut primal: Option<(Y, A)> = None;
    // The final values of the arguments f mutated (see below).
    let mut finals: Vec<Option<Tensor>> = vec![None; ins.len()];
    let cols = chunked(total, chunk, |start, k| {
        let basis = basis_chunk(&dins, start, k).or_raise();
        // f runs once per chunk: each run gets fresh nodes over the
        // arguments' values, so that its writes to them are functionalized
        // into those nodes and every chunk starts from the caller's values;
        // the final values are written back once, after the last chunk, as
        // if f had run once.
        let fresh: Vec<Tensor> = ins.iter().map(|l| Tensor::from_value(l.value_cloned())).collect();
        let xs = x.with_leaves(fresh.iter().cloned());
        // The primal output and aux do not depend on the basis: out_axes
        // None returns them as they are (no broadcast along the basis).
        let per_basis = |t: &Vec<Tensor>| {
            let mut t = t.iter().cloned();
            let tangents: Vec<Option<Tensor>> = diff.iter().map(|&d| if d { t.next() } else { None }).collect();
            let (out, ps, ts) = jvp_flat("jacfwd", f, &xs, tangents);
            let tangents: Vec<Tensor> = ts.iter().zip(&ps).map(|(t, p)| lax::instantiate(t, p).or_raise()).collect();
            (out, tangents)
        };
        let ((y, aux), outs) = vmap_with(per_basis, VmapOptions::new().in_axes(0).out_axes((None, 0)))(&basis);
        primal.get_or_insert((y, aux));
        for (fin, n) in finals.iter_mut().zip(&fresh) {
            if n.version() > 0 {
                *fin = Some(n.clone());
            }
        }
        outs
    })?;
    crate::functionalize::write_back("jacfwd", &ins, finals)?;
    let (y, aux) = primal.expect("at least one chunk");
    let y_leaves = y.leaves();
    check_outputs(op, &y, &y_leaves, int_outputs)?;
    // cols: the tangents of y's leaves then aux's, each [N, out...]; block
    // for input i: rows of input i.
    let mut blocks = Vec::with_capacity(y_leaves.len());
    for (col, o) in cols.iter().zip(&y_leaves) {
        let mut off = 0;
        let mut per_input = Vec::with_capacity(ins.len());
        for l in &ins {
            if !l.dtype().is_float() || !o.dtype().is_float() {
                off += if l.dtype().is_float() { l.numel() } else { 0 };
                per_input.push(zero_block(o, l)?);
                continue;
            }
            let n = l.numel();
            let rows = lax::slice_axis(col, 0, off, off + n)?;
            off += n;
            let ls = l.shape();
            let os = Shape::from(&col.shape()[1..]);
            let mut s = ls.0.clone();
            s.extend_from_slice(&os);
            let r = lax::reshape(&rows, &Shape(s))?;
            let perm: Vec<usize> = (ls.rank()..ls.rank() + os.rank()).chain(0..ls.rank()).collect();
            per_input.push(lax::transpose(&r, &perm)?);
        }
        blocks.push(x.with_leaves(per_input));
    }
    Ok((y.build_map(&mut blocks.into_iter()), aux))
}

/// Reverse-mode Jacobian.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let j = xform_transforms::jacrev(|x: &Tensor| x.sum() * x)(&x);
/// assert_eq!(j.to_vec::<f64>(), vec![4.0, 1.0, 2.0, 5.0]);
/// ```
///
/// Integer and bool leaves get zero blocks, as in [`jacfwd`].
pub fn jacrev<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y::Map<X> {
    jacrev_with(f, JacOptions::default())
}

/// [`jacrev`] with a memory budget.
pub fn jacrev_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: JacOptions) -> impl Fn(&X) -> Y::Map<X> {
    move |x: &X| try_jacrev(&|x: &X| (f(x), ()), &opts, x).or_raise().0
}

/// [`jacrev`] of the first output of `f`, and its second output (aux data,
/// not differentiated), like JAX's `jacrev(f, has_aux=True)`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let (j, n) = xform_transforms::jacrev_with_aux(|x: &Tensor| (x * 3.0, x.sum()))(&x);
/// assert_eq!((j.to_vec::<f64>(), n.item::<f64>()), (vec![3.0, 0.0, 0.0, 3.0], 3.0));
/// ```
pub fn jacrev_with_aux<X: Tree, Y: Tree, A: Tree>(f: impl Fn(&X) -> (Y, A)) -> impl Fn(&X) -> (Y::Map<X>, A) {
    move |x: &X| try_jacrev(&f, &JacOptions::default(), x).or_raise()
}

pub(crate) fn try_jacrev<X: Tree, Y: Tree, A: Tree>(
    f: &impl Fn(&X) -> (Y, A),
    opts: &JacOptions,
    x: &X,
) -> Result<(Y::Map<X>, A)> {
    crate::grad::check_differentiable("jacrev", x)?;
    let ins = x.leaves();
    let lin = linearize_flat("jacrev", f, x);
    let (y, aux) = &lin.out;
    let ny = y.leaves().len();
    let outs: Vec<Tensor> = lin.out_leaves[..ny].to_vec();
    check_outputs("jacrev", y, &outs, false)?;
    let douts: Vec<Tensor> = outs.iter().filter(|o| o.dtype().is_float()).cloned().collect();
    let dins: Vec<&Tensor> = ins.iter().filter(|l| l.dtype().is_float()).collect();
    let total: usize = douts.iter().map(|l| l.numel()).sum();
    let row_bytes = (douts.iter().map(|o| o.numel() * o.dtype().size_bytes()).sum::<usize>()
        + dins.iter().map(|l| l.numel() * l.dtype().size_bytes()).sum::<usize>())
        * 2;
    let chunk = rows_per_chunk(opts, row_bytes, total);
    // One cotangent slot per output leaf (aux and non-float ones: none).
    let slots = |cts: &mut dyn Iterator<Item = Ct>| -> Vec<Option<Ct>> {
        let mut v: Vec<Option<Ct>> =
            outs.iter().map(|o| if o.dtype().is_float() { cts.next() } else { None }).collect();
        v.resize(lin.out_leaves.len(), None);
        v
    };
    let rows = if douts.is_empty() || dins.is_empty() {
        Vec::new()
    } else if douts.len() == 1 && total == 1 {
        // One output element (a scalar function, as in `hessian`): the one
        // row is a gradient. grad's symbolic seed of ones costs no kernels,
        // where a one-row basis under vmap costs a product by it per
        // cotangent and batched (sometimes transposed) copies.
        let grads = lin.pull_some("jacrev", &slots(&mut std::iter::once(Ct::Ones)))?;
        grads.iter().map(|g| lax::expand_dims(g, 0)).collect::<Result<Vec<_>>>()?
    } else {
        chunked(total, chunk, |start, k| {
            let basis = basis_chunk(&douts, start, k).or_raise();
            vmap(|cts: &Vec<Tensor>| {
                let cts = slots(&mut cts.iter().map(|c| Ct::Val(c.clone(), false)));
                lin.pull_some("jacrev", &cts).or_raise().to_vec()
            })(&basis)
        })?
    };
    // rows[i]: [M, in_i...] over the float outputs; block for output j: its
    // rows, reshaped.
    let mut blocks = Vec::with_capacity(ny);
    let mut off = 0;
    for o in &outs {
        let m = o.numel();
        let per_input: Vec<Tensor> = ins
            .iter()
            .enumerate()
            .map(|(i, l)| {
                if !l.dtype().is_float() || !o.dtype().is_float() {
                    return zero_block(o, l);
                }
                let part = lax::slice_axis(&rows[i], 0, off, off + m)?;
                let mut s = o.shape().0.clone();
                s.extend_from_slice(&l.shape());
                lax::reshape(&part, &Shape(s))
            })
            .collect::<Result<_>>()?;
        if o.dtype().is_float() {
            off += m;
        }
        blocks.push(x.with_leaves(per_input));
    }
    let y = y.with_leaves(outs.iter().cloned());
    let aux = aux.with_leaves(lin.out_leaves[ny..].iter().cloned());
    Ok((y.build_map(&mut blocks.into_iter()), aux))
}

/// The Hessian of a scalar function, `jacfwd(jacrev(f))`: for a tensor
/// argument of shape `s`, a tensor of shape `s ++ s`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let h = xform_transforms::hessian(|x: &Tensor| (x * x * x).sum())(&x);
/// assert_eq!(h.to_vec::<f64>(), vec![6.0, 0.0, 0.0, 12.0]);
/// ```
pub fn hessian<X: Tree>(f: impl Fn(&X) -> Tensor) -> impl Fn(&X) -> X::Map<X> {
    let g = jacrev(f);
    move |x: &X| try_jacfwd(&|x: &X| (g(x), ()), &JacOptions::default(), x, "hessian", true).or_raise().0
}

/// The Hessian of the first output of `f` and its second output (aux data),
/// like JAX's `hessian(f, has_aux=True)`.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let (h, y) = xform_transforms::hessian_with_aux(|x: &Tensor| {
///     let y = (x * x * x).sum();
///     (y.clone(), y)
/// })(&x);
/// assert_eq!((h.to_vec::<f64>(), y.item::<f64>()), (vec![6.0, 0.0, 0.0, 12.0], 9.0));
/// ```
pub fn hessian_with_aux<X: Tree, A: Tree>(f: impl Fn(&X) -> (Tensor, A)) -> impl Fn(&X) -> (X::Map<X>, A) {
    let g = jacrev_with_aux(f);
    move |x: &X| try_jacfwd(&g, &JacOptions::default(), x, "hessian", true).or_raise()
}
