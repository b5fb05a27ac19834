//! The programs: a small expression tree over a few f64 inputs, and the
//! proptest strategies that generate it.
//!
//! Generation is shape-directed: `expr(shape, depth)` builds an expression
//! whose result has exactly `shape`, choosing its children's shapes to fit
//! (the other operand of a broadcasting op, the operand of a reduction with
//! the reduced axes put back, a reshape's source with the same element
//! count, ...), so every generated program is valid in both xform and JAX.
//! Collectives (`collective`) name the axes the named vmaps of the case's
//! stack bind (`Env`, drawn first), and those whose shape depends on an
//! axis's size know it.
//! Every constructor is chosen lazily (`prop_flat_map` on the choice), so
//! only the chosen branch's children are built; the leaf is choice 0, so
//! shrinking moves towards smaller programs.
//!
//! Values stay away from points where a derivative is not defined or where
//! the two libraries may legitimately differ: logarithms, square roots,
//! divisions and powers are of `1 + x²`, exponentials of `tanh x`, the
//! inverse trigonometric and special functions of values inside their
//! domains (`tanh(x) / 2`, `1 + x²`, `2 + x²`), the linear algebra
//! functions of diagonally dominant matrices (`Expr::Linalg`), and
//! element values are continuous random numbers (no exact ties, except
//! where one input is broadcast against itself: `max` and `min` split the
//! tangent at a tie in both libraries).

use proptest::prelude::*;
use proptest::sample::select;
use std::sync::Arc;
use xform::core::prim::{BinaryOp, UnaryOp};
use xform::core::prims::sample::{Dom, Gen};
use xform::DType;

/// Sizes of the generated arrays: every axis has 1..=MAX_DIM elements.
pub const MAX_DIM: usize = 3;
/// Largest rank of an intermediate value.
pub const MAX_RANK: usize = 4;

/// A unary function of the programs: every elementwise unary primitive
/// that takes floats, derived from the op table (`UnaryOp::examples`, with
/// each op's JAX spelling `UnaryOp::jax` and its domain
/// `UnaryOp::sample_dom`), so a new op is compared with JAX without an
/// edit here; and a few functions the methods compose from primitives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Un {
    /// The primitive on its operand mapped into the op's domain
    /// ([`into_domain`]).
    Prim(UnaryOp),
    Square,
    /// `1 / (1 + x²)`.
    RecipSq,
    /// `relu` (derivative 0 at 0, as `jax.nn.relu`).
    Relu,
    Softplus,
    /// `abs` over both signs (derivative 0 at 0, as JAX's `sign`; the
    /// primitive's own entry sees positive values only).
    Abs,
}

/// Where a domain of the op tables lies, as `c + r tanh(x)`: the smooth map
/// of any real `x` into it (`None`: a domain of integers, jumps or
/// bits, whose ops are not compared).
pub fn into_domain(dom: Dom) -> Option<(f64, f64)> {
    match dom {
        Dom::Real(lo, hi) | Dom::AwayFromZero(lo, hi) => Some(((lo + hi) / 2.0, (hi - lo) / 2.0)),
        _ => None,
    }
}

/// The unary functions the programs draw from.
pub fn unary_ops() -> Vec<Un> {
    let mut ops: Vec<Un> = UnaryOp::examples()
        .into_iter()
        .filter(|op| op.accepts(DType::F64) && into_domain(op.sample_dom()).is_some())
        .map(Un::Prim)
        .collect();
    ops.extend([Un::Square, Un::RecipSq, Un::Relu, Un::Softplus, Un::Abs]);
    ops
}

/// A binary primitive of the programs: every one that takes floats,
/// derived from the op table (its JAX spelling `BinaryOp::jax`, its
/// operands' domains `BinaryOp::sample_doms`); a new op is compared with
/// JAX without an edit here.
pub type Bin = BinaryOp;

/// The binary primitives the programs draw from.
pub fn binary_ops() -> Vec<Bin> {
    BinaryOp::ALL
        .iter()
        .copied()
        .filter(|op| {
            let (a, b) = op.sample_doms(DType::F64);
            op.accepts(DType::F64) && into_domain(a).is_some() && into_domain(b).is_some()
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Red {
    Sum,
    Mean,
    Max,
    /// logsumexp over one axis.
    LogSumExp,
}

/// How an in-place op combines the view's old value with the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MutOp {
    Add,
    Sub,
    Mul,
    /// `copy_`: the view is overwritten.
    Copy,
}

/// A linear algebra function of `xform::linalg` (JAX's `jnp.linalg` and
/// `jax.lax.linalg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lin {
    Cholesky,
    /// `triangular_solve(a, b, ..)` with these flags.
    TriSolve {
        left_side: bool,
        lower: bool,
        transpose_a: bool,
        unit_diagonal: bool,
    },
    /// `solve(a, b)`, `b` a vector `[n]` or matrices `[..., n, k]`.
    Solve,
    Inv,
    Det,
    /// `slogdet`'s log-determinant.
    LogDet,
    /// `lu`'s packed factors.
    Lu,
    /// `pinv` (of an invertible matrix, through the SVD and its custom rule).
    Pinv,
    /// `expm` (`jax.scipy.linalg.expm`).
    Expm,
    /// `qr`'s R with its rows' signs made those of its diagonal (JAX's
    /// LAPACK factors leave them free; xform's diagonal is non-negative).
    QrR,
    /// The nuclear norm (the sum of the singular values).
    Nuclear,
    /// The sum of the logarithms of `eigvalsh`'s eigenvalues (of the
    /// symmetrized matrix, positive definite).
    EigLogSum,
}

/// The view of a fresh copy that an in-place op writes through.
#[derive(Clone, Debug, PartialEq)]
pub enum View {
    Whole,
    /// `slice_axis(axis, start, stop, step)`.
    Slice {
        axis: usize,
        start: usize,
        stop: usize,
        step: usize,
    },
    /// `select(axis, index)` (index may be negative).
    Select {
        axis: usize,
        index: isize,
    },
    /// `permute(perm)`.
    Permute(Vec<usize>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// The i-th input.
    Input(usize),
    /// An input not yet numbered (only while generating).
    Leaf {
        shape: Vec<usize>,
        slot: usize,
    },
    Unary(Un, Box<Expr>),
    /// numpy broadcasting between the operands.
    Binary(Bin, Box<Expr>, Box<Expr>),
    Reduce {
        op: Red,
        axes: Vec<usize>,
        keepdims: bool,
        x: Box<Expr>,
    },
    /// softmax, or with `log`, log_softmax.
    Softmax {
        axis: usize,
        log: bool,
        x: Box<Expr>,
    },
    /// `where(mask, ±inf, x)` with a constant pattern (`inf[i]`: 0 keeps
    /// x's element, 1 is +inf, -1 is -inf): infinities fed to logsumexp,
    /// softmax and log_softmax, with derivative 0 where they are.
    Inf {
        inf: Vec<i8>,
        x: Box<Expr>,
    },
    /// `base ** max(exp, 0)`: bases that may be 0 or negative, exponents
    /// that may be exactly 0 or an integer (inputs take such values now and
    /// then). The exponent is kept >= 0 (at a tie, max passes half the
    /// derivative, so the mixed partial at exponent 0 is still tested): at
    /// base 0 a negative exponent makes inf, whose derivative JAX gives as
    /// NaN (0 * inf) and xform as 0, a singular point where neither is right.
    Pow {
        base: Box<Expr>,
        exp: Box<Expr>,
    },
    Cumsum {
        axis: usize,
        x: Box<Expr>,
    },
    Reshape {
        shape: Vec<usize>,
        x: Box<Expr>,
    },
    Permute {
        perm: Vec<usize>,
        x: Box<Expr>,
    },
    Broadcast {
        shape: Vec<usize>,
        x: Box<Expr>,
    },
    /// Static strided slice along one axis.
    Slice {
        axis: usize,
        start: usize,
        stop: usize,
        step: usize,
        x: Box<Expr>,
    },
    Flip {
        axes: Vec<usize>,
        x: Box<Expr>,
    },
    Concat {
        axis: usize,
        xs: Vec<Expr>,
    },
    /// `take(indices, axis)` with constant indices in `[-n, n)`.
    Take {
        axis: usize,
        idx: Vec<i64>,
        x: Box<Expr>,
    },
    /// `dynamic_slice` with constant starts (negative and past the end
    /// too: they wrap, then clamp).
    DynSlice {
        starts: Vec<i64>,
        sizes: Vec<usize>,
        x: Box<Expr>,
    },
    DynUpdate {
        starts: Vec<i64>,
        x: Box<Expr>,
        u: Box<Expr>,
    },
    /// `dynamic_slice` at starts computed from data: `floor(at * k_d)` as
    /// i64 for a scalar expression `at` (per-example starts under vmap).
    DynSliceAt {
        scale: Vec<f64>,
        sizes: Vec<usize>,
        x: Box<Expr>,
        at: Box<Expr>,
    },
    /// numpy `matmul` (vectors promoted, batch axes broadcast).
    Matmul(Box<Expr>, Box<Expr>),
    /// `where(a > b, x, y)` (all four of the result's shape).
    Where {
        a: Box<Expr>,
        b: Box<Expr>,
        x: Box<Expr>,
        y: Box<Expr>,
    },
    /// Constant padding by `(before, after)` per axis.
    Pad {
        widths: Vec<(i64, i64)>,
        value: f64,
        x: Box<Expr>,
    },
    /// `index_add(axis, idx, src)`: rows of `src` added at `idx` (duplicates
    /// accumulate).
    IndexAdd {
        axis: usize,
        idx: Vec<i64>,
        x: Box<Expr>,
        src: Box<Expr>,
    },
    /// Variance over `axes` with `ddof` (every reduced axis has >= 2 elements).
    Var {
        axes: Vec<usize>,
        ddof: usize,
        keepdims: bool,
        x: Box<Expr>,
    },
    /// `reduce_window` (sum, or max with -inf as its init value) over every
    /// axis, with "SAME" (`same`) or "VALID" padding and base and window
    /// dilations (JAX's `lax.reduce_window`; window dilation only for sums,
    /// whose VJP JAX has with it).
    Window {
        max: bool,
        dims: Vec<usize>,
        strides: Vec<usize>,
        same: bool,
        base: Vec<usize>,
        wdil: Vec<usize>,
        x: Box<Expr>,
    },
    /// `{ let t = target.copy(); t.<view>.<op>_(value); t }`; in JAX the pure
    /// `t.at[view].<op>(value)`.
    Mutate {
        op: MutOp,
        view: View,
        target: Box<Expr>,
        value: Box<Expr>,
    },
    /// A collective over names bound by the named vmaps of the stack
    /// (`xform::lax::psum` and friends; JAX's `jax.lax` ones).
    Collective {
        op: Coll,
        x: Box<Expr>,
    },
    /// A linear algebra function of the well-conditioned matrices made
    /// from `a` (`[..., n, n]`, `n = rows.len()`): `tanh(a) + (n + 1) I`
    /// (diagonally dominant: for cholesky, positive definite once
    /// symmetrized; for the triangular solves, a triangle with a diagonal
    /// in `(n, n + 2)`), its rows put in the order `rows` (a permutation,
    /// the identity for cholesky and triangular_solve), so that `lu` pivots
    /// (always on a strictly largest entry: no ties); `b`, for the
    /// solves, as generated (NaN and infinities included: they propagate
    /// through the solves alike). NaN entries of `a` (a negative base's
    /// `pow`) are read as 0: which entries of a factorization of a matrix
    /// holding NaN are NaN depends on the algorithm (LAPACK computes
    /// `0 * NaN` where xform skips it; xform's cholesky makes the whole
    /// factor NaN, LAPACK's only the entries that depend on the NaN).
    Linalg {
        op: Lin,
        rows: Vec<usize>,
        a: Box<Expr>,
        b: Option<Box<Expr>>,
    },
}

/// A reduction over named axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PRed {
    Psum,
    Pmean,
    Pmax,
    Pmin,
}

/// A collective. `size` is the size of the named axis where the program
/// runs (the shape of the result depends on it).
#[derive(Clone, Debug, PartialEq)]
pub enum Coll {
    /// psum / pmean / pmax / pmin over one name or several.
    Reduce { op: PRed, names: Vec<String> },
    /// `all_gather(x, name, axis, tiled)` (`axis` counted in the result, may be negative).
    AllGather { name: String, size: usize, axis: isize, tiled: bool },
    /// `psum_scatter(x, name, dim, tiled)`.
    PsumScatter { name: String, size: usize, dim: usize, tiled: bool },
    /// `all_to_all(x, name, split, concat, tiled)`.
    AllToAll { name: String, size: usize, split: usize, concat: usize, tiled: bool },
    /// `ppermute(x, name, perm)` with a full permutation of the positions.
    Ppermute { name: String, perm: Vec<(usize, usize)> },
    /// `x * float(axis_index(names) + offset)` (over several names: the
    /// index into their product, the first the slowest).
    AxisIndex { names: Vec<String>, offset: usize },
}

impl Coll {
    /// Its name in xform and JAX.
    pub fn name(&self) -> &'static str {
        match self {
            Coll::Reduce { op: PRed::Psum, .. } => "psum",
            Coll::Reduce { op: PRed::Pmean, .. } => "pmean",
            Coll::Reduce { op: PRed::Pmax, .. } => "pmax",
            Coll::Reduce { op: PRed::Pmin, .. } => "pmin",
            Coll::AllGather { .. } => "all_gather",
            Coll::PsumScatter { .. } => "psum_scatter",
            Coll::AllToAll { .. } => "all_to_all",
            Coll::Ppermute { .. } => "ppermute",
            Coll::AxisIndex { .. } => "axis_index",
        }
    }

    /// The shape of its result on an operand of shape `x`.
    pub fn shape(&self, x: &[usize]) -> Vec<usize> {
        let mut s = x.to_vec();
        match self {
            Coll::Reduce { .. } | Coll::Ppermute { .. } | Coll::AxisIndex { .. } => {}
            Coll::AllGather { size, axis, tiled: false, .. } => {
                let a = if *axis < 0 { (*axis + s.len() as isize + 1) as usize } else { *axis as usize };
                s.insert(a, *size);
            }
            Coll::AllGather { size, axis, tiled: true, .. } => {
                let a = if *axis < 0 { (*axis + s.len() as isize) as usize } else { *axis as usize };
                s[a] *= size;
            }
            Coll::PsumScatter { dim, tiled: false, .. } => {
                s.remove(*dim);
            }
            Coll::PsumScatter { size, dim, tiled: true, .. } => s[*dim] /= size,
            Coll::AllToAll { size, split, concat, tiled: false, .. } => {
                s.remove(*split);
                s.insert(*concat, *size);
            }
            Coll::AllToAll { size, split, concat, tiled: true, .. } => {
                s[*split] /= size;
                s[*concat] *= size;
            }
        }
        s
    }
}

/// An in-place write to one of the function's own arguments, made before
/// the outputs are computed: `xs[target].<view>.<op>_(value)`. In JAX the
/// function is pure and returns the updated arguments after its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgWrite {
    /// `Expr::Input` (a leaf while generating).
    pub target: Expr,
    pub view: View,
    pub op: MutOp,
    /// Always a unary op at the top, so the value never aliases an
    /// argument (an eager in-place op refuses overlapping operands).
    pub value: Expr,
}

/// A program: inputs of the given shapes, writes to them in order, and one
/// or two outputs (computed after the writes).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub inputs: Vec<Vec<usize>>,
    pub writes: Vec<ArgWrite>,
    pub outputs: Vec<Expr>,
}

impl ArgWrite {
    pub fn input(&self) -> usize {
        match self.target {
            Expr::Input(i) => i,
            _ => unreachable!("targets are numbered by Program::new"),
        }
    }
}

fn b(e: Expr) -> Box<Expr> {
    Box::new(e)
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// A deterministic generator for choices that need no shrinking of their
/// own (which dims of a shape become 1, a reshape's source, ...): the
/// registry's splitmix64 (`Gen`), seeded so that its streams are this
/// test's from before it reused `Gen` (the same programs per seed).
pub struct Mix(Gen);

impl Mix {
    pub fn new(seed: u64) -> Mix {
        // `Gen::new` XORs its own constant in; undo it.
        Mix(Gen::new(seed ^ 0x2545_F491_4F6C_DD1D ^ 0x9E37_79B9_7F4A_7C15))
    }
    pub fn next(&mut self) -> u64 {
        self.0.u64()
    }
    /// Uniform in `lo..=hi`.
    pub fn int(&mut self, lo: usize, hi: usize) -> usize {
        self.0.int(lo, hi)
    }
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// Uniform in `[lo, hi)`.
    pub fn f64(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.0.f64()
    }
}

/// Exact values where derivatives have kinks or special cases (relu and
/// abs at 0, pow with exponent 0 or an integer at base 0, ties).
pub const EDGE_VALUES: [f64; 8] = [0.0, 0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0];

/// A shape that broadcasts to `s`: some axes set to 1, some leading axes dropped.
fn broadcast_source(s: &[usize], m: &mut Mix) -> Vec<usize> {
    let drop = if s.is_empty() { 0 } else { m.int(0, s.len()) };
    s[drop..].iter().map(|&d| if m.int(0, 2) == 0 { 1 } else { d }).collect()
}

/// A shape with the same element count as `s` (its prime factors regrouped
/// into 1..=3 axes, with a unit axis now and then).
fn reshape_source(s: &[usize], m: &mut Mix) -> Vec<usize> {
    let mut f: Vec<usize> = Vec::new();
    for &d in s {
        let mut d = d;
        for p in [2, 3, 5, 7] {
            while d % p == 0 {
                f.push(p);
                d /= p;
            }
        }
        if d > 1 {
            f.push(d);
        }
    }
    shuffle(&mut f, m);
    let rank = m.int(if f.is_empty() { 0 } else { 1 }, 3);
    let mut out = vec![1usize; rank];
    for (k, p) in f.into_iter().enumerate() {
        let r = if rank == 0 { 0 } else { (k + m.int(0, rank - 1)) % rank };
        if rank > 0 {
            out[r] *= p;
        }
    }
    if out.iter().any(|&d| d > 9) {
        return vec![numel(s)];
    }
    out
}

fn perm(n: usize, m: &mut Mix) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    shuffle(&mut p, m);
    p
}

/// Shuffles `v` in place (Fisher-Yates over the mix).
fn shuffle<T>(v: &mut [T], m: &mut Mix) {
    for i in (1..v.len()).rev() {
        let j = m.int(0, i);
        v.swap(i, j);
    }
}

/// A leaf of `shape`: an input of exactly that shape. Leaves of one shape
/// and one of two slots share an input, so programs reuse values (and
/// inputs meet themselves, broadcast or not) as real ones do; the inputs
/// are numbered once the program is built (`Program::new`).
fn leaf(shape: &[usize]) -> BoxedStrategy<Expr> {
    let shape = shape.to_vec();
    (0usize..2).prop_map(move |slot| Expr::Leaf { shape: shape.clone(), slot }).boxed()
}

/// Number of constructors `build` knows (0 is the leaf).
const CHOICES: usize = 26;
/// The choice of a collective: drawn only where names are bound.
const COLLECTIVE: usize = CHOICES;

/// Where a program runs: the names the named vmaps of its stack bind (the
/// innermost binding of each name, whose size the program sees), and
/// whether a transform of the stack differentiates it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Env {
    pub axes: Vec<(String, usize)>,
    /// grad, jvp, jacfwd, jacrev or hessian in the stack.
    pub diff: bool,
    /// The names whose vmap has another batching transform (vmap, jacfwd,
    /// jacrev, hessian) inside it.
    pub mapped_inside: Vec<String>,
}

/// The output size of `reduce_window` along an axis of `n` elements: a
/// window of `w` taps `wd` apart, moving by `st`, over the input dilated
/// by `bd`, padded for "SAME" as JAX's `reduce_window` pads (from the
/// undilated size and the dilated window: `padtype_to_pads`), or not
/// ("VALID"); `None` where the window does not fit.
pub fn window_out(n: usize, w: usize, st: usize, bd: usize, wd: usize, same: bool) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let nd = (n - 1) * bd + 1;
    let wdl = (w - 1) * wd + 1;
    let pad = if same { (((n.div_ceil(st)).max(1) - 1) * st + wdl).saturating_sub(n) } else { 0 };
    let padded = nd + pad;
    (padded >= wdl).then(|| (padded - wdl) / st + 1)
}

/// An expression whose value has exactly `shape`, at most `depth` deep,
/// with collectives over the names `env` binds.
pub fn expr(shape: Vec<usize>, depth: u32, env: Arc<Env>) -> BoxedStrategy<Expr> {
    if depth == 0 {
        return leaf(&shape);
    }
    // Choice 0 (the leaf) a seventh of the time; the rest uniformly; and
    // where names are bound, a collective a fifth of the time.
    let choice = if env.axes.is_empty() {
        prop_oneof![1 => Just(0usize), 6 => 1..CHOICES].boxed()
    } else {
        prop_oneof![1 => Just(0usize), 6 => 1..CHOICES, 2 => Just(COLLECTIVE)].boxed()
    };
    (choice, any::<u64>()).prop_flat_map(move |(c, seed)| build(shape.clone(), depth, c, seed, env.clone())).boxed()
}

fn build(s: Vec<usize>, depth: u32, choice: usize, seed: u64, env: Arc<Env>) -> BoxedStrategy<Expr> {
    let mut m = Mix::new(seed);
    let d = depth - 1;
    let r = s.len();
    let env2 = env.clone();
    let sub = move |shape: Vec<usize>| expr(shape, d, env2.clone());
    match choice {
        COLLECTIVE => collective(&s, &env, &mut m, &sub),
        1 | 2 => (select(unary_ops()), sub(s.clone())).prop_map(|(op, x)| Expr::Unary(op, b(x))).boxed(),
        3 | 4 => {
            let other = broadcast_source(&s, &mut m);
            let swap = m.coin();
            (select(binary_ops()), sub(s.clone()), sub(other))
                .prop_map(
                    move |(op, x, y)| if swap { Expr::Binary(op, b(y), b(x)) } else { Expr::Binary(op, b(x), b(y)) },
                )
                .boxed()
        }
        5 if r < MAX_RANK => {
            // Put back 1 or 2 reduced axes (or, with keepdims, widen unit axes).
            let op = [Red::Sum, Red::Mean, Red::Max, Red::LogSumExp][m.int(0, 3)];
            let units: Vec<usize> = (0..r).filter(|&a| s[a] == 1).collect();
            let keepdims = !units.is_empty() && m.coin();
            let (src, axes) = if keepdims {
                let a = units[m.int(0, units.len() - 1)];
                let mut src = s.clone();
                src[a] = m.int(2, MAX_DIM);
                (src, vec![a])
            } else {
                let k = if op == Red::LogSumExp || r + 2 > MAX_RANK { 1 } else { m.int(1, 2) };
                let mut src = s.clone();
                let mut axes = Vec::new();
                for _ in 0..k {
                    let a = m.int(0, src.len());
                    src.insert(a, m.int(1, MAX_DIM));
                    axes.iter_mut().for_each(|x: &mut usize| {
                        if *x >= a {
                            *x += 1
                        }
                    });
                    axes.push(a);
                }
                axes.sort();
                (src, axes)
            };
            // An empty reduced axis now and then (sums only: the others
            // have no identity, or make -inf everywhere downstream).
            let (src, op) = if op == Red::Sum && !keepdims && m.int(0, 5) == 0 {
                let mut src = src;
                src[axes[0]] = 0;
                (src, op)
            } else {
                (src, op)
            };
            let inject = op == Red::LogSumExp && m.coin();
            let inf = inf_pattern(numel(&src), &mut m);
            sub(src)
                .prop_map(move |x| {
                    let x = if inject { Expr::Inf { inf: inf.clone(), x: b(x) } } else { x };
                    Expr::Reduce { op, axes: axes.clone(), keepdims, x: b(x) }
                })
                .boxed()
        }
        6 if r >= 1 => {
            let axis = m.int(0, r - 1);
            if m.coin() {
                let log = m.coin();
                // +inf too: a row holding one is NaN throughout, in JAX's
                // softmax and log_softmax (x - max is NaN at the inf) and in
                // xform's, which follow them.
                let inf = m.coin().then(|| inf_pattern(numel(&s), &mut m));
                sub(s.clone())
                    .prop_map(move |x| {
                        let x = match &inf {
                            Some(inf) => Expr::Inf { inf: inf.clone(), x: b(x) },
                            None => x,
                        };
                        Expr::Softmax { axis, log, x: b(x) }
                    })
                    .boxed()
            } else {
                sub(s.clone()).prop_map(move |x| Expr::Cumsum { axis, x: b(x) }).boxed()
            }
        }
        7 => {
            let src = if numel(&s) == 0 { vec![0] } else { reshape_source(&s, &mut m) };
            let shape = s.clone();
            sub(src).prop_map(move |x| Expr::Reshape { shape: shape.clone(), x: b(x) }).boxed()
        }
        8 if r >= 2 => {
            // x has shape src with s[i] = src[perm[i]].
            let p = perm(r, &mut m);
            let mut src = vec![0; r];
            for i in 0..r {
                src[p[i]] = s[i];
            }
            sub(src).prop_map(move |x| Expr::Permute { perm: p.clone(), x: b(x) }).boxed()
        }
        9 => {
            let src = broadcast_source(&s, &mut m);
            let shape = s.clone();
            sub(src).prop_map(move |x| Expr::Broadcast { shape: shape.clone(), x: b(x) }).boxed()
        }
        10 if r >= 1 => {
            let axis = m.int(0, r - 1);
            let (start, step) = (m.int(0, 2), m.int(1, 2));
            let stop = if s[axis] == 0 { start } else { start + step * (s[axis] - 1) + 1 };
            let mut src = s.clone();
            src[axis] = stop + m.int(0, 1);
            sub(src).prop_map(move |x| Expr::Slice { axis, start, stop, step, x: b(x) }).boxed()
        }
        11 if r >= 1 => {
            let axes: Vec<usize> = (0..r).filter(|_| m.coin()).collect();
            sub(s.clone()).prop_map(move |x| Expr::Flip { axes: axes.clone(), x: b(x) }).boxed()
        }
        12 if r >= 1 && s.iter().any(|&n| n >= 2) => {
            let cands: Vec<usize> = (0..r).filter(|&a| s[a] >= 2).collect();
            let axis = cands[m.int(0, cands.len() - 1)];
            let cut = m.int(1, s[axis] - 1);
            let (mut s1, mut s2) = (s.clone(), s.clone());
            s1[axis] = cut;
            s2[axis] = s[axis] - cut;
            (sub(s1), sub(s2)).prop_map(move |(x, y)| Expr::Concat { axis, xs: vec![x, y] }).boxed()
        }
        13 if r >= 1 => {
            let axis = m.int(0, r - 1);
            let n = m.int(1, MAX_DIM + 1);
            let idx: Vec<i64> = (0..s[axis]).map(|_| m.int(0, 2 * n - 1) as i64 - n as i64).collect();
            let mut src = s.clone();
            src[axis] = n;
            sub(src).prop_map(move |x| Expr::Take { axis, idx: idx.clone(), x: b(x) }).boxed()
        }
        14 if r >= 1 => {
            let src: Vec<usize> = s.iter().map(|&n| n + m.int(0, 2)).collect();
            let starts: Vec<i64> = src.iter().map(|&n| m.int(0, 2 * n + 4) as i64 - n as i64 - 2).collect();
            let sizes = s.clone();
            sub(src).prop_map(move |x| Expr::DynSlice { starts: starts.clone(), sizes: sizes.clone(), x: b(x) }).boxed()
        }
        15 if r >= 1 => {
            let us: Vec<usize> = s.iter().map(|&n| m.int(n.min(1), n)).collect();
            let starts: Vec<i64> = s.iter().map(|&n| m.int(0, 2 * n + 4) as i64 - n as i64 - 2).collect();
            (sub(s.clone()), sub(us))
                .prop_map(move |(x, u)| Expr::DynUpdate { starts: starts.clone(), x: b(x), u: b(u) })
                .boxed()
        }
        16 => {
            let (sa, sb) = matmul_sources(&s, &mut m);
            (sub(sa), sub(sb)).prop_map(|(x, y)| Expr::Matmul(b(x), b(y))).boxed()
        }
        17 if numel(&s) > 0 => {
            let (view, vshape) = view_of(&s, &mut m);
            let value_shape = broadcast_source(&vshape, &mut m);
            let op = [MutOp::Add, MutOp::Sub, MutOp::Mul, MutOp::Copy][m.int(0, 3)];
            (sub(s.clone()), sub(value_shape))
                .prop_map(move |(t, v)| Expr::Mutate { op, view: view.clone(), target: b(t), value: b(v) })
                .boxed()
        }
        18 => {
            let (x, y) = (sub(s.clone()), sub(s.clone()));
            (sub(s.clone()), sub(s.clone()), x, y)
                .prop_map(|(a, c, x, y)| Expr::Where { a: b(a), b: b(c), x: b(x), y: b(y) })
                .boxed()
        }
        19 if r >= 1 && s.iter().any(|&n| n >= 2) && numel(&s) > 0 => {
            let widths: Vec<(i64, i64)> = s
                .iter()
                .map(|&n| {
                    let lo = m.int(0, (n - 1).min(2));
                    let hi = m.int(0, (n - 1 - lo).min(2));
                    (lo as i64, hi as i64)
                })
                .collect();
            let src: Vec<usize> = s.iter().zip(&widths).map(|(&n, (l, h))| n - (l + h) as usize).collect();
            let value = [0.0, 1.5, -0.25][m.int(0, 2)];
            sub(src).prop_map(move |x| Expr::Pad { widths: widths.clone(), value, x: b(x) }).boxed()
        }
        20 if r >= 1 && numel(&s) > 0 => {
            let axis = m.int(0, r - 1);
            let k = m.int(1, MAX_DIM);
            let idx: Vec<i64> = (0..k).map(|_| m.int(0, s[axis] - 1) as i64).collect();
            let mut src = s.clone();
            src[axis] = k;
            (sub(s.clone()), sub(src))
                .prop_map(move |(x, u)| Expr::IndexAdd { axis, idx: idx.clone(), x: b(x), src: b(u) })
                .boxed()
        }
        21 if r < MAX_RANK => {
            let a = m.int(0, r);
            let mut src = s.clone();
            src.insert(a, m.int(2, MAX_DIM));
            let ddof = m.int(0, 1);
            sub(src).prop_map(move |x| Expr::Var { axes: vec![a], ddof, keepdims: false, x: b(x) }).boxed()
        }
        22 if r >= 1 => {
            let src: Vec<usize> = s.iter().map(|&n| n + m.int(0, 2)).collect();
            let scale: Vec<f64> = s.iter().map(|_| [1.0, -1.5, 2.5][m.int(0, 2)]).collect();
            let sizes = s.clone();
            (sub(src), sub(vec![]))
                .prop_map(move |(x, at)| Expr::DynSliceAt {
                    scale: scale.clone(),
                    sizes: sizes.clone(),
                    x: b(x),
                    at: b(at),
                })
                .boxed()
        }
        23 => {
            // Bases that are exactly 0 (relu), negative or anything;
            // exponents from inputs, which are 0 or an integer now and then.
            let relu = m.coin();
            (sub(s.clone()), sub(broadcast_source(&s, &mut m)))
                .prop_map(move |(x, e)| {
                    let base = if relu { Expr::Unary(Un::Relu, b(x)) } else { x };
                    Expr::Pow { base: b(base), exp: b(e) }
                })
                .boxed()
        }
        24 if r >= 1 && numel(&s) > 0 => {
            // per axis, the first window (input size, taps, stride,
            // dilations, in a random order) that gives the axis its size
            let max = m.coin();
            let same = m.coin();
            let mut axes = Vec::new();
            for &out in &s {
                let mut cands: Vec<[usize; 5]> = Vec::new();
                for n in 1..=6 {
                    for w in 1..=3 {
                        for st in 1..=2 {
                            for bd in 1..=2 {
                                for wd in 1..=if max { 1 } else { 2 } {
                                    if window_out(n, w, st, bd, wd, same) == Some(out) {
                                        cands.push([n, w, st, bd, wd]);
                                    }
                                }
                            }
                        }
                    }
                }
                if cands.is_empty() {
                    break;
                }
                axes.push(cands[m.int(0, cands.len() - 1)]);
            }
            if axes.len() < r {
                return sub(s.clone()).prop_map(|x| Expr::Unary(Un::Prim(UnaryOp::Sin), b(x))).boxed();
            }
            let col = |k: usize| axes.iter().map(|a| a[k]).collect::<Vec<usize>>();
            let (src, dims, strides, base, wdil) = (col(0), col(1), col(2), col(3), col(4));
            sub(src)
                .prop_map(move |x| Expr::Window {
                    max,
                    dims: dims.clone(),
                    strides: strides.clone(),
                    same,
                    base: base.clone(),
                    wdil: wdil.clone(),
                    x: b(x),
                })
                .boxed()
        }
        25 if r <= 3 && numel(&s) > 0 => linalg(&s, &mut m, &sub)
            .unwrap_or_else(|| (select(unary_ops()), sub(s.clone())).prop_map(|(op, x)| Expr::Unary(op, b(x))).boxed()),
        // A constructor that does not apply to this shape: a unary op.
        _ if choice != 0 => (select(unary_ops()), sub(s.clone())).prop_map(|(op, x)| Expr::Unary(op, b(x))).boxed(),
        _ => leaf(&s),
    }
}

fn coll(op: Coll, x: Expr) -> Expr {
    Expr::Collective { op, x: b(x) }
}

/// `x * (axis_index(name) + 1)`: varies along the axis.
fn vary(x: Expr, name: &str) -> Expr {
    coll(Coll::AxisIndex { names: vec![name.to_string()], offset: 1 }, x)
}

/// A collective whose value has shape `s` (an operand generated by
/// `sub`), over names of `env`. Those whose result's shape depends on the
/// axis's size take a fitting operand, or gather more than `s` holds and
/// `take` (or sum) from it. JAX's gaps are avoided (xform fills them, so
/// there is nothing to compare; `tests/suite/collectives.rs` tests them):
/// - pmax / pmin have no JVP in JAX: drawn only where nothing differentiates;
/// - all_to_all of a value that does not vary along the axis has the wrong
///   shape in JAX's vmap (and under differentiation, its tangent or
///   cotangent may not vary): the operand and the result are multiplied by
///   `axis_index + 1`, so both and their tangents and cotangents vary;
/// - all_to_all untiled with split_axis != concat_axis: JAX's transpose
///   gets the cotangent's shape wrong under `vmap(grad(..))`: drawn only
///   where nothing differentiates;
/// - all_to_all, and tiled psum_scatter, over an axis of size 0: JAX
///   divides by the size (ZeroDivisionError);
/// - ppermute with a partial permutation: JAX's vmap asserts a full one;
/// - untiled psum_scatter under a vmap of another axis inside the named
///   one (jacfwd, jacrev and hessian map too), where that vmap's batch
///   dimension follows the scattered one: JAX's `_reduce_scatter_batcher`
///   moves the batch dimension up (`d += 1`) where the scattered dimension
///   it removes is before it (an IndexError, or a wrong axis): untiled
///   psum_scatter only where nothing maps inside the named vmap, and
///   untiled all_gather (whose transpose it is) there only where nothing
///   differentiates;
/// - a name whose vmap has a custom_vjp inside and reverse mode outside:
///   JAX traces the bwd after the vmap is done (an unbound name); such
///   names are left out of the `Env` (`case::env`).
fn collective(
    s: &[usize],
    env: &Env,
    m: &mut Mix,
    sub: &dyn Fn(Vec<usize>) -> BoxedStrategy<Expr>,
) -> BoxedStrategy<Expr> {
    let r = s.len();
    let (name, n) = env.axes[m.int(0, env.axes.len() - 1)].clone();
    let mapped_inside = env.mapped_inside.contains(&name);
    // `take` of `len` elements along `axis` from an axis of `from` (>= 1):
    // indices in [-from, from)
    let take_idx = |len: usize, from: usize, m: &mut Mix| -> Vec<i64> {
        (0..len).map(|_| m.int(0, 2 * from - 1) as i64 - from as i64).collect()
    };
    let kind = m.int(0, 9);
    match kind {
        // all_gather, untiled: the new axis of size n at `a`
        3 | 4 if n >= 1 && (r >= 1 || !(env.diff && mapped_inside)) => {
            let tiled = r >= 1 && (kind == 4 || (env.diff && mapped_inside));
            if !tiled {
                let direct: Vec<usize> = (0..r).filter(|&a| s[a] == n).collect();
                let pick = if !direct.is_empty() {
                    m.int(0, 2)
                } else if r >= 1 {
                    m.int(1, 2)
                } else {
                    2
                };
                let pick = if pick == 2 && r >= MAX_RANK { 1 } else { pick };
                let neg = m.coin();
                let axis_of = move |a: usize, rank: usize| if neg { a as isize - rank as isize } else { a as isize };
                match pick {
                    0 => {
                        let a = direct[m.int(0, direct.len() - 1)];
                        let mut src = s.to_vec();
                        src.remove(a);
                        let op = Coll::AllGather { name, size: n, axis: axis_of(a, r), tiled: false };
                        sub(src).prop_map(move |x| coll(op.clone(), x)).boxed()
                    }
                    1 => {
                        let a = m.int(0, r - 1);
                        let mut src = s.to_vec();
                        src.remove(a);
                        let idx = take_idx(s[a], n, m);
                        let op = Coll::AllGather { name, size: n, axis: axis_of(a, r), tiled: false };
                        sub(src)
                            .prop_map(move |x| Expr::Take { axis: a, idx: idx.clone(), x: b(coll(op.clone(), x)) })
                            .boxed()
                    }
                    _ => {
                        let a = m.int(0, r);
                        let op = Coll::AllGather { name, size: n, axis: axis_of(a, r + 1), tiled: false };
                        sub(s.to_vec())
                            .prop_map(move |x| Expr::Reduce {
                                op: Red::Sum,
                                axes: vec![a],
                                keepdims: false,
                                x: b(coll(op.clone(), x)),
                            })
                            .boxed()
                    }
                }
            } else {
                let a = m.int(0, r - 1);
                let axis = if m.coin() { a as isize - r as isize } else { a as isize };
                let op = Coll::AllGather { name, size: n, axis, tiled: true };
                let mut src = s.to_vec();
                if s[a].is_multiple_of(n) && s[a] > 0 && m.coin() {
                    src[a] = s[a] / n;
                    sub(src).prop_map(move |x| coll(op.clone(), x)).boxed()
                } else {
                    src[a] = m.int(1, 2);
                    let idx = take_idx(s[a], n * src[a], m);
                    sub(src)
                        .prop_map(move |x| Expr::Take { axis: a, idx: idx.clone(), x: b(coll(op.clone(), x)) })
                        .boxed()
                }
            }
        }
        // psum_scatter: untiled, the scattered axis (of size n) removed;
        // tiled, divided by n
        5 if (r < MAX_RANK && !mapped_inside && m.coin()) || (r >= 1 && n >= 1) => {
            let tiled = !(r < MAX_RANK && !mapped_inside && (n == 0 || r == 0 || m.coin()));
            let mut src = s.to_vec();
            let dim = if tiled {
                let d = m.int(0, r - 1);
                src[d] *= n;
                d
            } else {
                let d = m.int(0, r);
                src.insert(d, n);
                d
            };
            let op = Coll::PsumScatter { name, size: n, dim, tiled };
            sub(src).prop_map(move |x| coll(op.clone(), x)).boxed()
        }
        // all_to_all on an operand that varies along the axis, its result
        // made to vary too (see above)
        6 | 7 if n >= 1 && r >= 1 => {
            let tiled = m.coin();
            let same = r < 2 || m.coin() || (!tiled && env.diff);
            let split = m.int(0, r - 1);
            let concat = if same { split } else { (split + m.int(1, r - 1)) % r };
            // the result's shape before a `take` along `concat`: s, with
            // s[concat] a multiple of n (tiled) or n (untiled)
            let fits = if tiled { s[concat].is_multiple_of(n) && s[concat] > 0 } else { s[concat] == n };
            let mut res = s.to_vec();
            let take = if fits && m.coin() {
                None
            } else {
                res[concat] = if tiled { n * m.int(1, 2) } else { n };
                Some(take_idx(s[concat], res[concat], m))
            };
            let src = if tiled {
                let mut src = res.clone();
                src[concat] /= n;
                src[split] *= n;
                src
            } else {
                let mut src = res.clone();
                src.remove(concat);
                src.insert(split, n);
                src
            };
            let op = Coll::AllToAll { name: name.clone(), size: n, split, concat, tiled };
            sub(src)
                .prop_map(move |x| {
                    let y = vary(coll(op.clone(), vary(x, &name)), &name);
                    match &take {
                        Some(idx) => Expr::Take { axis: concat, idx: idx.clone(), x: b(y) },
                        None => y,
                    }
                })
                .boxed()
        }
        8 => {
            let p = perm(n, m);
            let mut pairs: Vec<(usize, usize)> = (0..n).map(|k| (k, p[k])).collect();
            shuffle(&mut pairs, m);
            let op = Coll::Ppermute { name, perm: pairs };
            sub(s.to_vec()).prop_map(move |x| coll(op.clone(), x)).boxed()
        }
        9 => {
            // one name, or now and then several (each once)
            let mut names = vec![name];
            for (a, _) in &env.axes {
                if !names.contains(a) && m.int(0, 2) == 0 {
                    names.push(a.clone());
                }
            }
            shuffle(&mut names, m);
            let op = Coll::AxisIndex { names, offset: m.int(0, 1) };
            sub(s.to_vec()).prop_map(move |x| coll(op.clone(), x)).boxed()
        }
        // psum / pmean over one name or several; pmax / pmin where nothing
        // differentiates (and where a shape-changing one does not apply)
        _ => {
            let ops: &[PRed] =
                if env.diff { &[PRed::Psum, PRed::Pmean] } else { &[PRed::Psum, PRed::Pmean, PRed::Pmax, PRed::Pmin] };
            let op = ops[m.int(0, ops.len() - 1)];
            let mut names: Vec<String> = env.axes.iter().filter(|_| m.int(0, 2) == 0).map(|(a, _)| a.clone()).collect();
            if !names.contains(&name) {
                names.push(name);
            }
            shuffle(&mut names, m);
            let op = Coll::Reduce { op, names };
            sub(s.to_vec()).prop_map(move |x| coll(op.clone(), x)).boxed()
        }
    }
}

/// A linear algebra function (`Expr::Linalg`, one of the twelve drawn (eleven slots)
/// uniformly) whose value has shape `s` (rank <= 3, no empty axis), on
/// matrices of 1..=MAX_DIM rows with 0 or 1 leading batch axes; `None`
/// where the drawn one does not fit. Where its own result does not have
/// the shape, a shape op makes it: det and the log-determinant broadcast
/// to a matrix shape; cholesky, inv and lu multiply a matrix operand
/// (`matmul`), or are summed over their matrix axes; a vector solve is
/// summed to a scalar; a triangular solve of one row or column is
/// reshaped to a vector or a scalar.
fn linalg(s: &[usize], m: &mut Mix, sub: &dyn Fn(Vec<usize>) -> BoxedStrategy<Expr>) -> Option<BoxedStrategy<Expr>> {
    let r = s.len();
    let small = |n: usize| (1..=MAX_DIM).contains(&n);
    let lead: Vec<usize> = s[..r.saturating_sub(2)].to_vec();
    let with = |batch: &[usize], n: usize| batch.iter().copied().chain([n, n]).collect::<Vec<usize>>();
    let lin = |op: Lin, rows: Vec<usize>, a: Expr, b: Option<Expr>| Expr::Linalg {
        op,
        rows,
        a: Box::new(a),
        b: b.map(Box::new),
    };
    let size = m.int(1, MAX_DIM);
    match m.int(0, 10) {
        // det, the log-determinant, the nuclear norm and the eigenvalues'
        // log-sum, of a batch of 0 or 1 axes
        k @ (0 | 1 | 7 | 8) => {
            let op = match k {
                0 => Lin::Det,
                1 => Lin::LogDet,
                7 => Lin::Nuclear,
                _ => Lin::EigLogSum,
            };
            let out: Vec<usize> = match r {
                0 | 1 => s.to_vec(),
                _ if m.coin() => vec![],
                _ => vec![if m.coin() { 1 } else { s[r - 1] }],
            };
            let rows = if op == Lin::EigLogSum { (0..size).collect() } else { perm(size, m) };
            let shape = s.to_vec();
            Some(
                sub(with(&out, size))
                    .prop_map(move |a| {
                        let d = lin(op, rows.clone(), a, None);
                        if r >= 2 {
                            Expr::Broadcast { shape: shape.clone(), x: b(d) }
                        } else {
                            d
                        }
                    })
                    .boxed(),
            )
        }
        // the square ones: cholesky, inv, lu, pinv, and qr's R or expm
        // (by the parity of the size drawn above: no draw of their own)
        k @ (2..=4 | 9 | 10) => {
            let op = match k {
                2 => Lin::Cholesky,
                3 => Lin::Inv,
                4 => Lin::Lu,
                9 => Lin::Pinv,
                _ if size.is_multiple_of(2) => Lin::QrR,
                _ => Lin::Expm,
            };
            let rows = |n: usize, m: &mut Mix| if op == Lin::Cholesky { (0..n).collect() } else { perm(n, m) };
            if r >= 2 && s[r - 1] == s[r - 2] && small(s[r - 1]) {
                let rows = rows(s[r - 1], m);
                Some(sub(s.to_vec()).prop_map(move |a| lin(op, rows.clone(), a, None)).boxed())
            } else if r >= 2 && small(s[r - 2]) {
                let n = s[r - 2];
                let rows = rows(n, m);
                Some(
                    (sub(with(&lead, n)), sub(s.to_vec()))
                        .prop_map(move |(a, y)| Expr::Matmul(b(lin(op, rows.clone(), a, None)), b(y)))
                        .boxed(),
                )
            } else if r <= 1 {
                let rows = rows(size, m);
                Some(
                    sub(with(s, size))
                        .prop_map(move |a| Expr::Reduce {
                            op: Red::Sum,
                            axes: vec![r, r + 1],
                            keepdims: false,
                            x: b(lin(op, rows.clone(), a, None)),
                        })
                        .boxed(),
                )
            } else {
                None
            }
        }
        // solve: matrices b (the matrices a with b's batch, or one, or a
        // batch of one), or a vector b
        5 => {
            let vector = r <= 1 || (r == 2 && small(s[1]) && (m.coin() || !small(s[0])));
            if vector {
                let n = if r == 0 { size } else { s[r - 1] };
                if !small(n) {
                    return None;
                }
                let rows = perm(n, m);
                let batch = if r == 2 { vec![s[0]] } else { vec![] };
                Some(
                    (sub(with(&batch, n)), sub(vec![n]))
                        .prop_map(move |(a, y)| {
                            let x = lin(Lin::Solve, rows.clone(), a, Some(y));
                            if r == 0 {
                                Expr::Reduce { op: Red::Sum, axes: vec![0], keepdims: false, x: b(x) }
                            } else {
                                x
                            }
                        })
                        .boxed(),
                )
            } else if small(s[r - 2]) {
                let n = s[r - 2];
                let rows = perm(n, m);
                let batch = if lead.is_empty() { vec![] } else { [vec![], vec![1], lead.clone()][m.int(0, 2)].clone() };
                Some(
                    (sub(with(&batch, n)), sub(s.to_vec()))
                        .prop_map(move |(a, y)| lin(Lin::Solve, rows.clone(), a, Some(y)))
                        .boxed(),
                )
            } else {
                None
            }
        }
        // triangular_solve, its flags at random: b of the result's shape
        // (a row or a column reshaped where the result is a vector or a scalar)
        _ => {
            let (lower, transpose_a, unit_diagonal) = (m.coin(), m.coin(), m.coin());
            let (left_side, bs) = match r {
                0 => (m.coin(), vec![1, 1]),
                1 => {
                    let left = m.coin();
                    (left, if left { vec![s[0], 1] } else { vec![1, s[0]] })
                }
                _ => {
                    let left = match (small(s[r - 2]), small(s[r - 1])) {
                        (true, true) => m.coin(),
                        (l, true) => l,
                        (true, false) => true,
                        (false, false) => return None,
                    };
                    (left, s.to_vec())
                }
            };
            let k = if left_side { bs[bs.len() - 2] } else { bs[bs.len() - 1] };
            if !small(k) {
                return None;
            }
            let op = Lin::TriSolve { left_side, lower, transpose_a, unit_diagonal };
            let batch = bs[..bs.len() - 2].to_vec();
            let shape = s.to_vec();
            Some(
                (sub(with(&batch, k)), sub(bs.clone()))
                    .prop_map(move |(a, y)| {
                        let x = lin(op, (0..k).collect(), a, Some(y));
                        if r <= 1 {
                            Expr::Reshape { shape: shape.clone(), x: b(x) }
                        } else {
                            x
                        }
                    })
                    .boxed(),
            )
        }
    }
}

/// Where `Expr::Inf` puts infinities: each element kept, +inf or -inf
/// (a whole row of -inf now and then).
fn inf_pattern(n: usize, m: &mut Mix) -> Vec<i8> {
    let all = m.int(0, 3);
    (0..n)
        .map(|_| match all {
            0 => -1,
            _ => [0, 0, 1, -1][m.int(0, 3)],
        })
        .collect()
}

/// Operand shapes of a numpy matmul whose result has shape `s`.
fn matmul_sources(s: &[usize], m: &mut Mix) -> (Vec<usize>, Vec<usize>) {
    let k = if m.int(0, 7) == 0 { 0 } else { m.int(1, MAX_DIM) };
    match s.len() {
        0 => (vec![k], vec![k]),
        1 => {
            if m.coin() {
                (vec![k], vec![k, s[0]])
            } else {
                (vec![s[0], k], vec![k])
            }
        }
        r => {
            let batch = &s[..r - 2];
            let (mr, n) = (s[r - 2], s[r - 1]);
            let mut full = batch.to_vec();
            let mut other = broadcast_source(batch, m);
            if m.coin() {
                std::mem::swap(&mut full, &mut other);
            }
            full.extend([mr, k]);
            other.extend([k, n]);
            (full, other)
        }
    }
}

/// A view of a tensor of shape `s` and the view's shape.
fn view_of(s: &[usize], m: &mut Mix) -> (View, Vec<usize>) {
    let r = s.len();
    match if r == 0 || s.contains(&0) { 0 } else { m.int(0, 3) } {
        1 => {
            let axis = m.int(0, r - 1);
            let n = s[axis];
            let start = m.int(0, n - 1);
            let step = m.int(1, 2);
            let stop = m.int(start + 1, n);
            let len = (stop - start).div_ceil(step);
            let mut v = s.to_vec();
            v[axis] = len;
            (View::Slice { axis, start, stop, step }, v)
        }
        2 => {
            let axis = m.int(0, r - 1);
            let n = s[axis] as isize;
            let index = m.int(0, 2 * n as usize - 1) as isize - n;
            let mut v = s.to_vec();
            v.remove(axis);
            (View::Select { axis, index }, v)
        }
        3 if r >= 2 => {
            let p = perm(r, m);
            let v = p.iter().map(|&i| s[i]).collect();
            (View::Permute(p), v)
        }
        _ => (View::Whole, s.to_vec()),
    }
}

impl Program {
    /// Numbers the leaves of `outputs`: one input per distinct (shape, slot),
    /// in order of first appearance.
    pub fn new(mut writes: Vec<ArgWrite>, mut outputs: Vec<Expr>) -> Program {
        let mut keys: Vec<(Vec<usize>, usize)> = Vec::new();
        for w in &mut writes {
            number(&mut w.target, &mut keys);
            number(&mut w.value, &mut keys);
        }
        for e in &mut outputs {
            number(e, &mut keys);
        }
        Program { inputs: keys.into_iter().map(|(s, _)| s).collect(), writes, outputs }
    }
}

fn number(e: &mut Expr, keys: &mut Vec<(Vec<usize>, usize)>) {
    if let Expr::Leaf { shape, slot } = e {
        let key = (shape.clone(), *slot);
        let i = keys.iter().position(|k| *k == key).unwrap_or_else(|| {
            keys.push(key);
            keys.len() - 1
        });
        *e = Expr::Input(i);
        return;
    }
    match e {
        Expr::Input(_) | Expr::Leaf { .. } => {}
        Expr::Unary(_, x)
        | Expr::Reduce { x, .. }
        | Expr::Softmax { x, .. }
        | Expr::Inf { x, .. }
        | Expr::Cumsum { x, .. }
        | Expr::Reshape { x, .. }
        | Expr::Permute { x, .. }
        | Expr::Broadcast { x, .. }
        | Expr::Slice { x, .. }
        | Expr::Flip { x, .. }
        | Expr::Take { x, .. }
        | Expr::DynSlice { x, .. } => number(x, keys),
        Expr::Pad { x, .. } | Expr::Var { x, .. } | Expr::Window { x, .. } | Expr::Collective { x, .. } => {
            number(x, keys)
        }
        Expr::Where { a, b, x, y } => {
            for e in [a, b, x, y] {
                number(e, keys);
            }
        }
        Expr::Binary(_, x, y)
        | Expr::DynUpdate { x, u: y, .. }
        | Expr::Matmul(x, y)
        | Expr::Pow { base: x, exp: y }
        | Expr::IndexAdd { x, src: y, .. }
        | Expr::DynSliceAt { x, at: y, .. } => {
            number(x, keys);
            number(y, keys);
        }
        Expr::Mutate { target, value, .. } => {
            number(target, keys);
            number(value, keys);
        }
        Expr::Concat { xs, .. } => xs.iter_mut().for_each(|x| number(x, keys)),
        Expr::Linalg { a, b, .. } => {
            number(a, keys);
            if let Some(b) = b {
                number(b, keys);
            }
        }
    }
}

/// A shape of rank 0..=3 with sizes 1..=MAX_DIM, or now and then an
/// empty axis (size 0).
fn random_shape(m: &mut Mix) -> Vec<usize> {
    let empty = m.int(0, 9) == 0;
    let mut s: Vec<usize> = (0..m.int(usize::from(empty), 3)).map(|_| m.int(1, MAX_DIM)).collect();
    if empty {
        let a = m.int(0, s.len() - 1);
        s[a] = 0;
    }
    s
}

/// A write to an argument of a random shape (a leaf, so an input), through
/// a view, of a value at most `depth` deep.
fn arg_write(depth: u32, seed: u64, env: Arc<Env>) -> BoxedStrategy<ArgWrite> {
    let mut m = Mix::new(seed);
    let shape = random_shape(&mut m);
    let (view, vshape) = view_of(&shape, &mut m);
    let value_shape = broadcast_source(&vshape, &mut m);
    let op = [MutOp::Add, MutOp::Sub, MutOp::Mul, MutOp::Copy][m.int(0, 3)];
    (leaf(&shape), select(unary_ops()), expr(value_shape, depth, env))
        .prop_map(move |(target, un, v)| ArgWrite { target, view: view.clone(), op, value: Expr::Unary(un, b(v)) })
        .boxed()
}

/// A program of one or two outputs of random shapes, up to `depth` deep,
/// which writes to its own arguments first a third of the time, with
/// collectives over the names `env` binds.
pub fn program(depth: u32, env: Env) -> impl Strategy<Value = Program> {
    let env = Arc::new(env);
    (1usize..=2, any::<u64>(), prop_oneof![2 => Just(0usize), 1 => 1usize..=2]).prop_flat_map(move |(n, seed, nw)| {
        let mut m = Mix::new(seed);
        let outs: Vec<BoxedStrategy<Expr>> = (0..n).map(|_| expr(random_shape(&mut m), depth, env.clone())).collect();
        let writes: Vec<BoxedStrategy<ArgWrite>> =
            (0..nw).map(|_| arg_write(depth.saturating_sub(2), m.next(), env.clone())).collect();
        (writes, outs).prop_map(|(w, o)| Program::new(w, o))
    })
}

/// The operands of an expression.
fn children(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Input(_) | Expr::Leaf { .. } => vec![],
        Expr::Unary(_, x)
        | Expr::Reduce { x, .. }
        | Expr::Softmax { x, .. }
        | Expr::Inf { x, .. }
        | Expr::Cumsum { x, .. }
        | Expr::Reshape { x, .. }
        | Expr::Permute { x, .. }
        | Expr::Broadcast { x, .. }
        | Expr::Slice { x, .. }
        | Expr::Flip { x, .. }
        | Expr::Take { x, .. }
        | Expr::DynSlice { x, .. }
        | Expr::Pad { x, .. }
        | Expr::Var { x, .. }
        | Expr::Window { x, .. }
        | Expr::Collective { x, .. } => vec![x],
        Expr::Where { a, b, x, y } => vec![a, b, x, y],
        Expr::Binary(_, x, y)
        | Expr::DynUpdate { x, u: y, .. }
        | Expr::Matmul(x, y)
        | Expr::Pow { base: x, exp: y }
        | Expr::IndexAdd { x, src: y, .. }
        | Expr::DynSliceAt { x, at: y, .. }
        | Expr::Mutate { target: x, value: y, .. } => vec![x, y],
        Expr::Concat { xs, .. } => xs.iter().collect(),
        Expr::Linalg { a, b, .. } => std::iter::once(&**a).chain(b.as_deref()).collect(),
    }
}

impl Program {
    /// The collectives of the program (the writes' values and the outputs).
    pub fn collectives(&self) -> Vec<&Coll> {
        let mut todo: Vec<&Expr> = self.writes.iter().map(|w| &w.value).chain(&self.outputs).collect();
        let mut out = Vec::new();
        while let Some(e) = todo.pop() {
            if let Expr::Collective { op, .. } = e {
                out.push(op);
            }
            todo.extend(children(e));
        }
        out
    }
}
