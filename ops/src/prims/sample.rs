//! Registry samples: each family declares, beside its rules, how to draw
//! valid applications of each of its primitives ([`Family::samples`]). The
//! generic rule tests (eval against an f64 reference, JVP against finite
//! differences, the transpose identity, vmap against a loop, CUDA against
//! the CPU) run over [`crate::prim::Prim::samples`], and a coverage test
//! checks that every variant of every family ([`Family::KINDS`]) is drawn.
//!
//! [`Family::samples`]: super::Family::samples
//! [`Family::KINDS`]: super::Family::KINDS

use crate::prim::Prim;
use crate::tensor::Tensor;
use std::rc::Rc;
use xform_kernels::DType;

/// A small deterministic generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Gen(u64);

impl Gen {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Gen {
        Gen(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// The next 64 random bits.
    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.u64() % (hi - lo + 1) as u64) as usize
    }
    /// Uniform in `[0, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// True with probability `p`.
    pub fn coin(&mut self, p: f64) -> bool {
        self.f64() < p
    }
    /// One of `xs`.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.int(0, xs.len() - 1)]
    }
    /// A shape of rank `0..=max_rank`, sizes `lo..=hi`.
    pub fn shape(&mut self, max_rank: usize, lo: usize, hi: usize) -> Vec<usize> {
        let r = self.int(0, max_rank);
        (0..r).map(|_| self.int(lo, hi)).collect()
    }
    /// Sizes in `0..=3` with size 0 rare, size 1 common (edge cases).
    pub fn dims(&mut self, rank: usize) -> Vec<usize> {
        (0..rank).map(|_| if self.coin(0.1) { 0 } else { self.int(1, 3) }).collect()
    }
    /// A random subset of `0..n`, in order.
    pub fn subset(&mut self, n: usize) -> Vec<usize> {
        (0..n).filter(|_| self.coin(0.5)).collect()
    }
    /// A random permutation of `0..n`.
    pub fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.int(0, i);
            p.swap(i, j);
        }
        p
    }
}

/// Where the values of an input come from.
#[derive(Copy, Clone, Debug)]
pub enum Dom {
    /// Uniform in `[lo, hi)`.
    Real(f64, f64),
    /// Magnitude in `[lo, hi)`, either sign (away from zero).
    AwayFromZero(f64, f64),
    /// Away from the jumps of floor / ceil (integers) and round (half
    /// integers): k / 2 + [0.15, 0.35).
    AwayFromInt(f64, f64),
    /// Small integers in `[lo, hi]` stored in the input dtype (ties for compare).
    Small(i64, i64),
    /// Any u32.
    Bits,
    /// Indices into an axis of size n: `[-n, n)`.
    Index(usize),
    /// Start indices: `[-n - 2, n + 2]` (exercising the wrap of negative
    /// starts and the clamp on both sides).
    Start(usize),
    /// Square matrices over the last two axes, entries in `[-1, 1)` and a
    /// diagonal of `n + 1 + [0, 1)`: diagonally dominant with a positive
    /// diagonal, so well conditioned, and positive definite once
    /// symmetrized (a factorization's and a solve's operands).
    DiagDominant,
    /// The `n` points `lo + (k + 1/2) (hi - lo) / n` in random order: no
    /// ties, neighbours `(hi - lo) / n` apart (max and min stay put under
    /// finite differences).
    Distinct(f64, f64),
    /// Matrices over the last two axes (`m x n`) with well-separated
    /// singular values (and, square and symmetrized, eigenvalues): the
    /// diagonal entries are `4 p + 2 + [0, 1)` for `p` a random order of
    /// `0..min(m, n)` (the same for every matrix of a stack), the others
    /// `[-1, 1) / max(m, n)`, a perturbation of norm below 1, so the values
    /// are at least 1 apart and above 1 (an eigen- or singular
    /// decomposition's operand, differentiable there).
    Spectrum,
}

/// A tensor of `shape`, `dtype` with values from `dom`, drawn from `seed`.
pub fn values(seed: u64, shape: &[usize], dtype: DType, dom: Dom) -> Tensor {
    let mut g = Gen::new(seed);
    let n: usize = shape.iter().product();
    let (rows, cols) = match shape {
        [.., r, c] => (*r, *c),
        [c] => (1, *c),
        [] => (1, 1),
    };
    let order = match dom {
        Dom::Distinct(..) => g.perm(n),
        Dom::Spectrum => g.perm(rows.min(cols)),
        _ => Vec::new(),
    };
    let v: Vec<f64> = (0..n)
        .map(|i| match dom {
            Dom::Real(lo, hi) => {
                if dtype.is_int() {
                    (lo + (hi - lo) * g.f64()).floor()
                } else if dtype == DType::Bool {
                    g.coin(0.5) as i32 as f64
                } else {
                    lo + (hi - lo) * g.f64()
                }
            }
            Dom::AwayFromZero(lo, hi) => {
                let m = lo + (hi - lo) * g.f64();
                let m = if dtype.is_int() { m.ceil().max(1.0) } else { m };
                if g.coin(0.5) {
                    -m
                } else {
                    m
                }
            }
            Dom::AwayFromInt(lo, hi) => (2.0 * (lo + (hi - lo) * g.f64())).floor() / 2.0 + 0.15 + 0.2 * g.f64(),
            Dom::Small(lo, hi) => {
                let k = g.int(0, (hi - lo) as usize) as i64 + lo;
                if dtype == DType::Bool {
                    (k.rem_euclid(2)) as f64
                } else {
                    k as f64
                }
            }
            Dom::Bits => g.u64() as u32 as f64,
            Dom::Index(m) => g.int(0, 2 * m - 1) as f64 - m as f64,
            Dom::Start(m) => g.int(0, 2 * m + 4) as f64 - m as f64 - 2.0,
            Dom::DiagDominant => {
                let c = shape.last().copied().unwrap_or(1);
                let r = if shape.len() >= 2 { shape[shape.len() - 2] } else { 1 };
                let u = g.f64();
                if (i % c) == (i / c) % r.max(1) && r == c {
                    c as f64 + 1.0 + u
                } else {
                    2.0 * u - 1.0
                }
            }
            Dom::Spectrum => {
                let (i, j) = ((i / cols) % rows, i % cols);
                let u = g.f64();
                if i == j {
                    4.0 * order[i] as f64 + 2.0 + u
                } else {
                    (2.0 * u - 1.0) / rows.max(cols) as f64
                }
            }
            Dom::Distinct(lo, hi) => {
                let v = lo + (hi - lo) * (order[i] as f64 + 0.5) / n as f64;
                if dtype.is_int() {
                    v.floor()
                } else {
                    v
                }
            }
        })
        .collect();
    Tensor::from_vec(v, shape.to_vec()).cast(dtype)
}

/// One drawn application: a primitive and its operands' shapes, dtypes
/// and value domains (fixed shapes, so that batching tests can stack
/// several draws).
#[derive(Clone, Debug)]
pub struct Case {
    /// The primitive with its parameters.
    pub prim: Prim,
    /// Shape, dtype and value domain of each operand.
    pub inputs: Vec<(Vec<usize>, DType, Dom)>,
    /// For a collective: the named axis (name, size) it runs under. The
    /// tests apply it under `vmap` with that `axis_name` over every
    /// operand's leading axis (of that size) and stack the results the
    /// same way: the collective as a function of all the examples' values.
    pub axis: Option<(String, usize)>,
}

impl Case {
    /// A case of `prim` on operands drawn from `inputs`.
    pub fn new(prim: impl Into<Prim>, inputs: Vec<(Vec<usize>, DType, Dom)>) -> Case {
        Case { prim: prim.into(), inputs, axis: None }
    }

    /// The case run under a named axis of `size` (see [`Case::axis`]).
    pub fn under_axis(mut self, name: &str, size: usize) -> Case {
        self.axis = Some((name.to_string(), size));
        self
    }

    /// Fresh operands for `seed`.
    pub fn operands(&self, seed: u64) -> Vec<Tensor> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, (s, d, dom))| values(seed.wrapping_mul(31).wrapping_add(i as u64), s, *d, *dom))
            .collect()
    }
}

/// Draws a [`Case`] for a dtype.
pub type Draw = Rc<dyn Fn(&mut Gen, DType) -> Case>;

/// One registry entry: a primitive (or one setting of its parameters) and
/// how to draw valid applications of it.
#[derive(Clone)]
pub struct Sample {
    /// The name tests report (the primitive's, with its parameter if any).
    pub name: String,
    /// The dtypes to draw with.
    pub dtypes: Vec<DType>,
    /// Operands the primitive is linear in (each with the others fixed).
    pub linear: Vec<usize>,
    /// Whether finite differences apply (float in, float out, smooth on
    /// the drawn domain).
    pub smooth: bool,
    /// The generator.
    pub draw: Draw,
}

impl std::fmt::Debug for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sample({})", self.name)
    }
}

impl Sample {
    /// An entry named `name`.
    pub fn new(
        name: impl Into<String>,
        dtypes: Vec<DType>,
        linear: Vec<usize>,
        smooth: bool,
        draw: impl Fn(&mut Gen, DType) -> Case + 'static,
    ) -> Sample {
        Sample { name: name.into(), dtypes, linear, smooth, draw: Rc::new(draw) }
    }
}

/// The float dtypes.
pub const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];
/// The integer dtypes.
pub const INTS: [DType; 3] = [DType::I32, DType::I64, DType::U32];

/// Floats and integers (not bool).
pub fn numeric() -> Vec<DType> {
    FLOATS.iter().chain(INTS.iter()).copied().collect()
}

/// Every dtype.
pub fn every_dtype() -> Vec<DType> {
    numeric().into_iter().chain([DType::Bool]).collect()
}

/// A generic value domain for `d`: [-2, 2) for floats, small integers
/// otherwise.
pub fn generic_dom(d: DType) -> Dom {
    if d.is_float() {
        Dom::Real(-2.0, 2.0)
    } else if d == DType::Bool {
        Dom::Small(0, 1)
    } else if d == DType::U32 {
        Dom::Small(0, 9)
    } else {
        Dom::Small(-9, 9)
    }
}
