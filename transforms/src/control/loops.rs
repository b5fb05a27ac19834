//! `while_loop`, `fori_loop` and `scan` over pytrees.

use super::{avals, check_leaf_types, stage_fn};
use crate::tree::Tree;
use xform_ops::prim::{Body, ControlOp, Prim, RematPolicy};
use xform_ops::{bind, lax, staging, Aval, DType, Error, OrRaise, Program, Result, Shape, Tensor};

/// Options of [`while_loop_with`].
#[derive(Clone, Debug, Default)]
pub struct WhileOptions {
    /// Reverse mode through the loop records every iteration when 0 (the
    /// default: memory grows with the trip count). With `k > 0` it saves
    /// one carry every `k` iterations and recomputes each group of `k` in
    /// the backward pass.
    pub remat_every: usize,
}

/// Runs `body_fn` on the carry while `cond_fn` holds (JAX's
/// `lax.while_loop`): one primitive that every transform understands.
///
/// Unlike JAX, reverse mode works where the predicate's value is known
/// (eagerly, under grad and the other derivatives): xform runs the loop,
/// so its trip count is known, and records the iterations (or checkpoints
/// them: [`WhileOptions::remat_every`]). Under vmap a batched predicate
/// runs until every example is done, finished examples keeping their
/// carry; under trace the loop stays a loop (and reverse mode through it
/// is then an error, as in JAX).
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::{grad, while_loop};
/// // x doubled until it exceeds 10: the gradient is 2^trips.
/// let f = |x: &Tensor| while_loop(|c: &Tensor| c.sum().lt_scalar(10.0), |c: &Tensor| c * 2.0, x).sum();
/// let g = grad(f)(&Tensor::from_vec(vec![1.5f64], [1]));
/// assert_eq!(g.to_vec::<f64>(), vec![8.0]);
/// ```
///
/// # Panics
/// If `cond_fn` does not return a bool scalar, `body_fn` changes the
/// carry's structure or types (the message names the leaf), or a body
/// fails.
#[track_caller]
pub fn while_loop<C: Tree>(cond_fn: impl Fn(&C) -> Tensor, body_fn: impl Fn(&C) -> C, init: &C) -> C {
    try_while_loop_with(cond_fn, body_fn, init, &WhileOptions::default()).or_raise()
}

/// [`while_loop`] with options.
#[track_caller]
pub fn while_loop_with<C: Tree>(
    cond_fn: impl Fn(&C) -> Tensor,
    body_fn: impl Fn(&C) -> C,
    init: &C,
    options: &WhileOptions,
) -> C {
    try_while_loop_with(cond_fn, body_fn, init, options).or_raise()
}

/// [`while_loop_with`] returning an error instead of panicking.
pub fn try_while_loop_with<C: Tree>(
    cond_fn: impl Fn(&C) -> Tensor,
    body_fn: impl Fn(&C) -> C,
    init: &C,
    options: &WhileOptions,
) -> Result<C> {
    let op = "while_loop";
    let carry_avals = avals(init);
    let c = stage_fn(op, &carry_avals, |ins| cond_fn(&init.with_leaves(ins.iter().cloned())))?;
    let p = c.out.aval();
    if p.dtype != DType::Bool || p.shape.rank() != 0 {
        return Err(Error::shape(
            op,
            format!("cond_fun must return a bool scalar, got {p}; reduce it (`all`, `any`) or compare a scalar"),
            &[&p.shape],
        ));
    }
    let b = stage_fn(op, &carry_avals, |ins| body_fn(&init.with_leaves(ins.iter().cloned())))?;
    super::check_same_types(op, "the initial carry", init, "body_fun", &b.out)?;
    let mut operands = c.consts.clone();
    operands.extend(b.consts.iter().cloned());
    operands.extend(init.leaves().iter().cloned());
    let prim = Prim::Control(ControlOp::While {
        cond: Body::new(c.program),
        body: Body::new(b.program),
        cond_consts: c.consts.len(),
        body_consts: b.consts.len(),
        remat_every: options.remat_every,
    });
    let outs = bind(&prim, &operands)?;
    Ok(init.with_leaves(outs))
}

/// A loop bound of [`fori_loop`]: a number (static) or a tensor (dynamic).
#[derive(Clone, Debug)]
pub enum Bound<'a> {
    /// Known now: the loop is a `scan`, which reverse mode differentiates
    /// anywhere (also under vmap and trace).
    Static(i64),
    /// A scalar integer tensor: the loop is a `while_loop`.
    Dynamic(&'a Tensor),
}

impl From<i64> for Bound<'_> {
    fn from(v: i64) -> Self {
        Bound::Static(v)
    }
}

impl From<i32> for Bound<'_> {
    fn from(v: i32) -> Self {
        Bound::Static(v as i64)
    }
}

impl From<usize> for Bound<'_> {
    fn from(v: usize) -> Self {
        Bound::Static(v as i64)
    }
}

impl<'a> From<&'a Tensor> for Bound<'a> {
    fn from(v: &'a Tensor) -> Self {
        Bound::Dynamic(v)
    }
}

/// `body(i, carry)` for `i` in `lower..upper` (JAX's `lax.fori_loop`; `i`
/// is an i32 scalar, or the bound's dtype when a bound is a tensor). Static
/// bounds make a `scan`, tensor bounds a `while_loop`, as in JAX.
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::fori_loop;
/// let x = Tensor::from_vec(vec![1.0f32], [1]);
/// let y = fori_loop(0, 3, |_i: &Tensor, c: &Tensor| c * 3.0, &x);
/// assert_eq!(y.to_vec::<f32>(), vec![27.0]);
/// ```
///
/// # Panics
/// As [`scan`] and [`while_loop`]; a tensor bound that is not an integer
/// scalar.
#[track_caller]
pub fn fori_loop<'a, C: Tree>(
    lower: impl Into<Bound<'a>>,
    upper: impl Into<Bound<'a>>,
    body: impl Fn(&Tensor, &C) -> C,
    init: &C,
) -> C {
    try_fori_loop(lower.into(), upper.into(), body, init).or_raise()
}

/// [`fori_loop`] returning an error instead of panicking.
pub fn try_fori_loop<C: Tree>(
    lower: Bound<'_>,
    upper: Bound<'_>,
    body: impl Fn(&Tensor, &C) -> C,
    init: &C,
) -> Result<C> {
    let device = xform_ops::default_device();
    match (&lower, &upper) {
        (Bound::Static(lo), Bound::Static(hi)) => {
            // the index is an i32, as JAX's for Python int bounds
            let n = trip_count(*lo as i128, *hi as i128, DType::I32)?;
            let i = lax::iota(DType::I32, &Shape::from([n]), 0, device)?;
            let i = lax::add(&i, &lax::full_like(&i, *lo as f64)?)?;
            let (c, ()) = try_scan_with(|c: &C, i: &Tensor| (body(i, c), ()), init, &i, &ScanOptions::default())?;
            Ok(c)
        }
        _ => {
            let as_tensor = |b: &Bound<'_>, dtype: DType| -> Result<Tensor> {
                match b {
                    Bound::Static(v) => {
                        // (a tensor bound of another dtype is refused below)
                        let Some((lo, hi)) = dtype.int_range() else {
                            return lax::scalar(*v as f64, dtype, device);
                        };
                        if !(lo..=hi).contains(&(*v as i128)) {
                            return Err(Error::overflow(
                                "fori_loop",
                                format!(
                                    "the bound {v} does not fit the loop index's dtype {dtype} (the other bound's)"
                                ),
                            ));
                        }
                        // exact: an i64 scalar converted, not an f64 one
                        lax::convert(&Tensor::scalar(*v).try_to_device(device)?, dtype)
                    }
                    Bound::Dynamic(t) => {
                        let a = t.aval();
                        if a.shape.rank() != 0 || !a.dtype.is_int() {
                            return Err(Error::shape(
                                "fori_loop",
                                format!("a bound must be an integer scalar, got {a}"),
                                &[&a.shape],
                            ));
                        }
                        lax::convert(t, dtype)
                    }
                }
            };
            let dtype = [&lower, &upper]
                .iter()
                .find_map(|b| match b {
                    Bound::Dynamic(t) => Some(t.dtype()),
                    Bound::Static(_) => None,
                })
                .unwrap_or(DType::I32);
            // the tensor bound first: its error names what is wrong with it
            let (lo, hi) = match lower {
                Bound::Dynamic(_) => {
                    let lo = as_tensor(&lower, dtype)?;
                    (lo, as_tensor(&upper, dtype)?)
                }
                Bound::Static(_) => {
                    let hi = as_tensor(&upper, dtype)?;
                    (as_tensor(&lower, dtype)?, hi)
                }
            };
            // bounds whose values are known now: the trip count must fit
            // their dtype (under jit or vmap the loop runs as the bounds
            // say, one step at a time)
            if let (Some(l), Some(h)) = (known_int(&lo), known_int(&hi)) {
                trip_count(l, h, dtype)?;
            }
            let state = (lo, hi, init.with_leaves(init.leaves().iter().cloned()));
            let out = try_while_loop_with(
                |s: &(Tensor, Tensor, C)| s.0.lt(&s.1),
                |s: &(Tensor, Tensor, C)| {
                    let next = lax::add_scalar(&s.0, 1.0).or_raise();
                    (next, s.1.clone(), body(&s.0, &s.2))
                },
                &state,
                &WhileOptions::default(),
            )?;
            Ok(out.2)
        }
    }
}

/// The number of steps of a loop from `lo` to `hi` (exclusive; none if
/// `hi <= lo`) whose index has dtype `dtype`.
///
/// # Errors
/// `Overflow` where the count or an index value cannot be represented in
/// `dtype` (`fori_loop(i64::MIN, i64::MAX, ..)`: computed in the dtype,
/// `hi - lo` would wrap, and the loop would run a wrong number of times).
fn trip_count(lo: i128, hi: i128, dtype: DType) -> Result<usize> {
    if hi <= lo {
        return Ok(0);
    }
    let (min, max) = dtype.int_range().expect("an integer dtype");
    let count = hi - lo;
    if lo < min || hi - 1 > max || count > max {
        return Err(Error::overflow(
            "fori_loop",
            format!(
                "the loop from {lo} to {hi} takes {count} steps, which its index's dtype {dtype} cannot represent \
                 (it holds {min} to {max})"
            ),
        ));
    }
    usize::try_from(count).map_err(|_| Error::overflow("fori_loop", format!("{count} steps do not fit usize")))
}

/// The value of an integer scalar known at this level, widened.
fn known_int(t: &Tensor) -> Option<i128> {
    let a = xform_ops::lax::convert(&Tensor::from_array(t.known_array()?), DType::I64).ok()?;
    Some(a.to_vec::<i64>().first().copied()? as i128)
}

/// What reverse mode through a [`scan`] keeps.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ScanRemat {
    /// Every residual of every step, stacked (JAX's default): no
    /// recomputation.
    #[default]
    SaveResiduals,
    /// Only each step's carry: the backward pass recomputes each step's
    /// body from it (JAX's `scan` of a `checkpoint`ed body).
    SaveCarries,
    /// One carry every `k` steps: the backward pass recomputes each
    /// segment of `k` steps, keeping that segment's residuals while it
    /// transposes it.
    Every(usize),
}

/// Options of [`scan_with`].
#[derive(Clone, Debug)]
pub struct ScanOptions {
    /// The number of steps; needed only when `xs` has no leaves, and must
    /// match their leading axis otherwise.
    pub length: Option<usize>,
    /// Run from the last element of `xs` to the first (ys stay in xs's order).
    pub reverse: bool,
    /// JAX's unroll factor: recorded in staged programs (a later compiler
    /// may unroll); the eager loop runs one step at a time.
    pub unroll: usize,
    /// What reverse mode keeps.
    pub remat: ScanRemat,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions { length: None, reverse: false, unroll: 1, remat: ScanRemat::SaveResiduals }
    }
}

/// Scans `f` over the leading axis of `xs` with a carry (JAX's
/// `lax.scan`): returns the final carry and the stacked `ys`. One
/// primitive that every transform understands: its JVP is a scan, its
/// transpose a reverse scan, its batch rule batches carries and xs, and
/// reverse mode's memory is set by [`ScanOptions::remat`].
///
/// ```
/// use xform_ops::Tensor;
/// use xform_transforms::scan;
/// // Cumulative sum.
/// let xs = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
/// let (total, ys) = scan(|c: &Tensor, x: &Tensor| (c + x, c + x), &Tensor::scalar(0.0f32), &xs);
/// assert_eq!(total.item::<f32>(), 6.0);
/// assert_eq!(ys.to_vec::<f32>(), vec![1.0, 3.0, 6.0]);
/// ```
///
/// # Panics
/// If the xs leaves' leading axes differ (or no length is known), `f`
/// changes the carry's structure or types (the message names the leaf),
/// or `f` fails.
#[track_caller]
pub fn scan<C: Tree, X: Tree, Y: Tree>(f: impl Fn(&C, &X) -> (C, Y), init: &C, xs: &X) -> (C, Y) {
    try_scan_with(f, init, xs, &ScanOptions::default()).or_raise()
}

/// [`scan`] with options.
#[track_caller]
pub fn scan_with<C: Tree, X: Tree, Y: Tree>(
    f: impl Fn(&C, &X) -> (C, Y),
    init: &C,
    xs: &X,
    options: &ScanOptions,
) -> (C, Y) {
    try_scan_with(f, init, xs, options).or_raise()
}

/// [`scan_with`] returning an error instead of panicking.
pub fn try_scan_with<C: Tree, X: Tree, Y: Tree>(
    f: impl Fn(&C, &X) -> (C, Y),
    init: &C,
    xs: &X,
    options: &ScanOptions,
) -> Result<(C, Y)> {
    let op = "scan";
    let x_leaves = xs.leaves();
    let x_paths = xs.paths();
    let mut length = options.length;
    let mut slice_avals = Vec::with_capacity(x_leaves.len());
    for (x, path) in x_leaves.iter().zip(&x_paths) {
        let a = x.aval();
        if a.shape.rank() == 0 {
            return Err(Error::shape(
                op,
                format!("xs leaf {path} is a scalar; scan runs over a leading axis"),
                &[&a.shape],
            ));
        }
        let n = a.shape[0];
        match length {
            Some(l) if l != n => {
                return Err(Error::shape(
                    op,
                    format!("xs leaf {path} has leading axis {n}, but the scan's length is {l}"),
                    &[&a.shape],
                ))
            }
            _ => length = Some(n),
        }
        slice_avals.push(Aval { shape: Shape::from(a.shape.0[1..].to_vec()), dtype: a.dtype, device: a.device });
    }
    let Some(length) = length else {
        return Err(Error::invalid(op, "xs has no leaves, so ScanOptions::length must give the number of steps"));
    };
    let carry_avals = avals(init);
    let nk = carry_avals.len();
    let mut in_avals = carry_avals.clone();
    in_avals.extend(slice_avals.iter().cloned());
    let s = stage_fn(op, &in_avals, |ins| {
        let (c, x) = ins.split_at(nk);
        f(&init.with_leaves(c.iter().cloned()), &xs.with_leaves(x.iter().cloned()))
    })?;
    let (c_out, y_out) = &s.out;
    if c_out.paths() != init.paths() {
        return Err(Error::invalid(
            op,
            format!(
                "the body returns a carry with leaves [{}] but the initial carry has [{}]",
                c_out.paths().join(", "),
                init.paths().join(", ")
            ),
        ));
    }
    check_leaf_types(op, "the initial carry", &carry_avals, "the body's carry", &avals(c_out), &init.paths())?;
    let nc = s.consts.len();
    let body = match options.remat {
        ScanRemat::SaveResiduals | ScanRemat::Every(_) => s.program,
        ScanRemat::SaveCarries => checkpointed(s.program)?,
    };
    let mut carry: Vec<Tensor> = init.leaves().into_iter().collect();
    let xs_all: Vec<Tensor> = x_leaves.into_iter().collect();
    let outs = match options.remat {
        ScanRemat::Every(k) if k > 0 && k < length => segmented(&body, &s.consts, &carry, &xs_all, length, k, options)?,
        _ => {
            let mut operands = s.consts.clone();
            operands.append(&mut carry);
            operands.extend(xs_all);
            bind_scan(Body::new(body), nc, nk, length, options, &operands)?
        }
    };
    let (c, y) = outs.split_at(nk);
    Ok((init.with_leaves(c.iter().cloned()), y_out.with_leaves(y.iter().cloned())))
}

fn bind_scan(
    body: Body,
    consts: usize,
    carry: usize,
    length: usize,
    o: &ScanOptions,
    operands: &[Tensor],
) -> Result<Vec<Tensor>> {
    let prim =
        Prim::Control(ControlOp::Scan { body, consts, carry, length, reverse: o.reverse, unroll: o.unroll.max(1) });
    Ok(bind(&prim, operands)?.into_vec())
}

/// `body` as one `checkpoint` equation over the same inputs.
fn checkpointed(body: Program) -> Result<Program> {
    let body = Body::new(body);
    let avals = body.in_avals();
    staging::stage("checkpoint", &avals, |ins| {
        Ok(bind(&Prim::Control(ControlOp::Checkpoint { body: body.clone(), policy: RematPolicy::Nothing }), ins)?
            .into_vec())
    })
}

/// A scan of `length` steps as an outer scan over segments of `k` steps,
/// each a checkpointed inner scan (the outer scan stacks one carry per
/// segment; the backward pass recomputes a segment's residuals), plus a
/// plain scan over the remaining `length % k` steps.
fn segmented(
    body: &Program,
    consts: &[Tensor],
    carry: &[Tensor],
    xs: &[Tensor],
    length: usize,
    k: usize,
    o: &ScanOptions,
) -> Result<Vec<Tensor>> {
    let (nc, nk) = (consts.len(), carry.len());
    let (q, r) = (length / k, length % k);
    let body = Body::new(body.clone());
    let split = |x: &Tensor, from: usize, to: usize| lax::slice_axis(x, 0, from, to);
    let main_xs: Vec<Tensor> = xs
        .iter()
        .map(|x| {
            let mut shape = x.shape();
            shape.0[0] = k;
            shape.0.insert(0, q);
            lax::reshape(&split(x, 0, q * k)?, &shape)
        })
        .collect::<Result<_>>()?;
    let tail_xs: Vec<Tensor> = xs.iter().map(|x| split(x, q * k, length)).collect::<Result<_>>()?;
    // The outer body: a checkpoint of the inner scan over one segment.
    let seg_avals: Vec<Aval> = consts
        .iter()
        .chain(carry)
        .map(Tensor::aval)
        .chain(main_xs.iter().map(|x| {
            let a = x.aval();
            Aval { shape: Shape::from(a.shape.0[1..].to_vec()), dtype: a.dtype, device: a.device }
        }))
        .collect();
    let inner_o = ScanOptions { length: Some(k), ..o.clone() };
    let inner = staging::stage("scan", &seg_avals, |ins| bind_scan(body.clone(), nc, nk, k, &inner_o, ins))?;
    let outer_body = checkpointed(inner)?;
    let run_main = |c: &[Tensor]| -> Result<Vec<Tensor>> {
        let operands: Vec<Tensor> = consts.iter().chain(c).chain(&main_xs).cloned().collect();
        let mut outs = bind_scan(Body::new(outer_body.clone()), nc, nk, q, o, &operands)?;
        // ys [q, k, ...] -> [q * k, ...]
        for y in outs.iter_mut().skip(nk) {
            let mut shape = y.shape();
            let inner_len = shape.0.remove(1);
            shape.0[0] *= inner_len;
            *y = lax::reshape(y, &shape)?;
        }
        Ok(outs)
    };
    let run_tail = |c: &[Tensor]| -> Result<Vec<Tensor>> {
        let operands: Vec<Tensor> = consts.iter().chain(c).chain(&tail_xs).cloned().collect();
        bind_scan(body.clone(), nc, nk, r, &ScanOptions { length: Some(r), ..o.clone() }, &operands)
    };
    let (first, second) = if o.reverse {
        let t = run_tail(carry)?;
        let m = run_main(&t[..nk])?;
        (m, t)
    } else {
        let m = run_main(carry)?;
        let t = run_tail(&m[..nk])?;
        (m, t)
    };
    // The final carry comes from whichever ran last.
    let last = if o.reverse { &first } else { &second };
    let mut outs: Vec<Tensor> = last[..nk].to_vec();
    for (a, b) in first[nk..].iter().zip(&second[nk..]) {
        outs.push(lax::concatenate(&[a.clone(), b.clone()], 0)?);
    }
    Ok(outs)
}
