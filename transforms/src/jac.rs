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
use crate::vmap::vmap;
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

fn check_float_leaves(op: &str, what: &str, leaves: &[Tensor], paths: impl FnOnce() -> Vec<String>) -> Result<()> {
    if leaves.iter().all(|l| l.dtype().is_float()) {
        return Ok(());
    }
    for (l, p) in leaves.iter().zip(paths()) {
        if !l.dtype().is_float() {
            return Err(Error::transform(
                op,
                format!("{what} {p} has dtype {}; Jacobians need floating-point values", l.dtype()),
            ));
        }
    }
    Ok(())
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

/// Forward-mode Jacobian.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let j = xform_transforms::jacfwd(|x: &Tensor| x * x)(&x);
/// assert_eq!(j.to_vec::<f64>(), vec![2.0, 0.0, 0.0, 4.0]);
/// ```
pub fn jacfwd<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y::Map<X> {
    jacfwd_with(f, JacOptions::default())
}

/// [`jacfwd`] with a memory budget.
pub fn jacfwd_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: JacOptions) -> impl Fn(&X) -> Y::Map<X> {
    move |x: &X| try_jacfwd(&f, &opts, x).or_raise()
}

fn try_jacfwd<X: Tree, Y: Tree>(f: &impl Fn(&X) -> Y, opts: &JacOptions, x: &X) -> Result<Y::Map<X>> {
    let ins = x.leaves();
    check_float_leaves("jacfwd", "argument", &ins, || x.paths())?;
    let total: usize = ins.iter().map(|l| l.numel()).sum();
    let row_bytes = ins.iter().map(|l| l.numel() * l.dtype().size_bytes()).sum::<usize>() * 2;
    let chunk = rows_per_chunk(opts, row_bytes, total);
    let mut out_template: Option<Y> = None;
    // The final values of the arguments f mutated (see below).
    let mut finals: Vec<Option<Tensor>> = vec![None; ins.len()];
    let cols = chunked(total, chunk, |start, k| {
        let basis = basis_chunk(&ins, start, k).or_raise();
        // f runs once per chunk: each run gets fresh nodes over the
        // arguments' values, so that its writes to them are functionalized
        // into those nodes and every chunk starts from the caller's values;
        // the final values are written back once, after the last chunk, as
        // if f had run once.
        let fresh: Vec<Tensor> = ins.iter().map(|l| Tensor::from_value(l.value_cloned())).collect();
        let xs = x.with_leaves(fresh.iter().cloned());
        let (y, outs) = vmap(|t: &Vec<Tensor>| {
            let (y, ps, ts) = jvp_flat("jacfwd", f, &xs, t.iter().cloned().map(Some).collect());
            let tangents: Vec<Tensor> = ts.iter().zip(&ps).map(|(t, p)| lax::instantiate(t, p).or_raise()).collect();
            // Only y's structure and dtypes are used below: scalars stand in
            // for its leaves, so that vmap does not broadcast the primal
            // output along the basis and copy it (a wasted N-fold copy).
            let template = y.with_leaves(y.leaves().iter().map(|l| lax::scalar(0.0, l.dtype(), l.device()).or_raise()));
            (template, tangents)
        })(&basis);
        out_template.get_or_insert(y);
        for (fin, n) in finals.iter_mut().zip(&fresh) {
            if n.version() > 0 {
                *fin = Some(n.clone());
            }
        }
        outs
    })?;
    crate::functionalize::write_back("jacfwd", &ins, finals)?;
    // The template's leaves are scalars (with a basis axis from vmap) of the
    // output leaves' dtypes.
    let y = out_template.expect("at least one chunk");
    check_float_leaves("jacfwd", "output", &y.leaves(), || y.paths())?;
    // cols[j]: [N, out_j...]; block for input i: rows of input i.
    let mut blocks = Vec::with_capacity(cols.len());
    for col in &cols {
        let mut off = 0;
        let mut per_input = Vec::with_capacity(ins.len());
        for l in &ins {
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
    Ok(y.build_map(&mut blocks.into_iter()))
}

/// Reverse-mode Jacobian.
///
/// ```
/// use xform_ops::Tensor;
/// let x = Tensor::from_vec(vec![1.0f64, 2.0], [2]);
/// let j = xform_transforms::jacrev(|x: &Tensor| x.sum() * x)(&x);
/// assert_eq!(j.to_vec::<f64>(), vec![4.0, 1.0, 2.0, 5.0]);
/// ```
pub fn jacrev<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y) -> impl Fn(&X) -> Y::Map<X> {
    jacrev_with(f, JacOptions::default())
}

/// [`jacrev`] with a memory budget.
pub fn jacrev_with<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, opts: JacOptions) -> impl Fn(&X) -> Y::Map<X> {
    move |x: &X| try_jacrev(&f, &opts, x).or_raise()
}

fn try_jacrev<X: Tree, Y: Tree>(f: &impl Fn(&X) -> Y, opts: &JacOptions, x: &X) -> Result<Y::Map<X>> {
    let ins = x.leaves();
    check_float_leaves("jacrev", "argument", &ins, || x.paths())?;
    let lin = linearize_flat("jacrev", f, x);
    let outs = lin.out_leaves.clone();
    check_float_leaves("jacrev", "output", &outs, || lin.out.paths())?;
    let total: usize = outs.iter().map(|l| l.numel()).sum();
    let row_bytes = (outs.iter().map(|o| o.numel() * o.dtype().size_bytes()).sum::<usize>()
        + ins.iter().map(|l| l.numel() * l.dtype().size_bytes()).sum::<usize>())
        * 2;
    let chunk = rows_per_chunk(opts, row_bytes, total);
    let rows = if outs.len() == 1 && total == 1 {
        // One output element (a scalar function, as in `hessian`): the one
        // row is a gradient. grad's symbolic seed of ones costs no kernels,
        // where a one-row basis under vmap costs a product by it per
        // cotangent and batched (sometimes transposed) copies.
        let grads = lin.pull_some("jacrev", &[Some(Ct::Ones)])?;
        grads.iter().map(|g| lax::expand_dims(g, 0)).collect::<Result<Vec<_>>>()?
    } else {
        chunked(total, chunk, |start, k| {
            let basis = basis_chunk(&outs, start, k).or_raise();
            vmap(|cts: &Vec<Tensor>| lin.pull("jacrev", cts).or_raise().to_vec())(&basis)
        })?
    };
    // rows[i]: [M, in_i...]; block for output j: its rows, reshaped.
    let mut blocks = Vec::with_capacity(outs.len());
    let mut off = 0;
    for o in &outs {
        let m = o.numel();
        let per_input: Vec<Tensor> = ins
            .iter()
            .zip(&rows)
            .map(|(l, r)| {
                let part = lax::slice_axis(r, 0, off, off + m)?;
                let mut s = o.shape().0.clone();
                s.extend_from_slice(&l.shape());
                lax::reshape(&part, &Shape(s))
            })
            .collect::<Result<_>>()?;
        off += m;
        blocks.push(x.with_leaves(per_input));
    }
    Ok(lin.out.build_map(&mut blocks.into_iter()))
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
    jacfwd(jacrev(f))
}
