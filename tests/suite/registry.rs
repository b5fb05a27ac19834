//! The registry: every primitive with a generator of valid inputs. The
//! generic tests (eval against the f64 reference, JVP against finite
//! differences, batching against a loop for every placement of batch dims,
//! the transpose identity, second order) all run over this table.
//!
//! Adding a primitive adds one entry here.

use std::rc::Rc;
use xform::core::prim::{ArgOp, Axes, BinaryOp, CompareOp, ReduceOp, UnaryOp};
use xform::{DType, DotDims, Prim, Shape, Tensor};

/// A small deterministic generator (splitmix64).
pub struct G(u64);

impl G {
    pub fn new(seed: u64) -> G {
        G(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
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
    pub fn f64(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn coin(&mut self, p: f64) -> bool {
        self.f64() < p
    }
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
    pub fn subset(&mut self, n: usize) -> Vec<usize> {
        (0..n).filter(|_| self.coin(0.5)).collect()
    }
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
}

/// A tensor of `shape`, `dtype` with values from `dom`, drawn from `seed`.
pub fn values(seed: u64, shape: &[usize], dtype: DType, dom: Dom) -> Tensor {
    let mut g = G::new(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| match dom {
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
        })
        .collect();
    Tensor::from_vec(v, shape.to_vec()).cast(dtype)
}

/// One generated application: a primitive and a way to draw fresh inputs
/// of fixed shapes (so batching tests can stack several examples).
#[derive(Clone)]
pub struct Case {
    pub prim: Prim,
    pub make: Rc<dyn Fn(u64) -> Vec<Tensor>>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shapes: Vec<String> = (self.make)(0).iter().map(|t| format!("{}{}", t.dtype(), t.shape())).collect();
        write!(f, "{} on {}", self.prim, shapes.join(", "))
    }
}

fn case(prim: Prim, specs: Vec<(Vec<usize>, DType, Dom)>) -> Case {
    Case {
        prim,
        make: Rc::new(move |seed| {
            specs
                .iter()
                .enumerate()
                .map(|(i, (s, d, dom))| values(seed.wrapping_mul(31).wrapping_add(i as u64), s, *d, *dom))
                .collect()
        }),
    }
}

/// One primitive's registry entry.
pub struct Entry {
    pub name: String,
    /// dtypes the generator is run with.
    pub dtypes: Vec<DType>,
    pub gen: Rc<dyn Fn(&mut G, DType) -> Case>,
    /// Inputs the primitive is linear in (each with the others held fixed).
    pub linear: Vec<usize>,
    /// Whether finite differences apply (float in, float out, smooth on the domain).
    pub smooth: bool,
}

const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];
const INTS: [DType; 3] = [DType::I32, DType::I64, DType::U32];

fn all_numeric() -> Vec<DType> {
    FLOATS.iter().chain(INTS.iter()).copied().collect()
}

fn entry(
    name: impl Into<String>,
    dtypes: Vec<DType>,
    linear: Vec<usize>,
    smooth: bool,
    gen: impl Fn(&mut G, DType) -> Case + 'static,
) -> Entry {
    Entry { name: name.into(), dtypes, gen: Rc::new(gen), linear, smooth }
}

fn unary_entry(op: UnaryOp) -> Entry {
    let float_dom = match op {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => Dom::Real(0.2, 4.0),
        UnaryOp::Log1p => Dom::Real(-0.5, 3.0),
        UnaryOp::Tan => Dom::Real(-1.2, 1.2),
        UnaryOp::Abs | UnaryOp::Sign => Dom::AwayFromZero(0.1, 3.0),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => Dom::AwayFromInt(-4.0, 4.0),
        UnaryOp::IntegerPow(n) if n < 0 => Dom::AwayFromZero(0.5, 2.0),
        UnaryOp::Erf | UnaryOp::Expm1 => Dom::Real(-2.0, 2.0),
        _ => Dom::Real(-3.0, 3.0),
    };
    let dtypes: Vec<DType> = match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::IntegerPow(_) => all_numeric(),
        UnaryOp::Not => vec![DType::Bool, DType::I32, DType::I64, DType::U32],
        _ => FLOATS.to_vec(),
    };
    let linear = if op == UnaryOp::Neg { vec![0] } else { vec![] };
    entry(op.name(), dtypes, linear, op != UnaryOp::Not, move |g, d| {
        let shape = g.shape(3, 0, 3);
        let dom = if d.is_float() {
            float_dom
        } else if d == DType::Bool {
            Dom::Small(0, 1)
        } else if d == DType::U32 {
            Dom::Small(0, 9)
        } else {
            Dom::Small(-9, 9)
        };
        case(Prim::Unary(op), vec![(shape, d, dom)])
    })
}

fn binary_entry(op: BinaryOp) -> Entry {
    let dtypes: Vec<DType> = match op {
        BinaryOp::And | BinaryOp::Or => vec![DType::Bool, DType::I32, DType::I64, DType::U32],
        BinaryOp::Atan2 => FLOATS.to_vec(),
        _ => all_numeric(),
    };
    let linear = match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => vec![0, 1],
        BinaryOp::Div => vec![0],
        _ => vec![],
    };
    let smooth = !matches!(op, BinaryOp::And | BinaryOp::Or);
    entry(op.name(), dtypes, linear, smooth, move |g, d| {
        let shape = g.shape(3, 0, 3);
        let (da, db) = if d.is_float() {
            match op {
                BinaryOp::Div | BinaryOp::Rem => (Dom::Real(-3.0, 3.0), Dom::AwayFromZero(0.7, 2.0)),
                BinaryOp::Pow => (Dom::Real(0.5, 2.0), Dom::Real(-2.0, 2.0)),
                BinaryOp::Atan2 => (Dom::AwayFromZero(0.2, 2.0), Dom::Real(-2.0, 2.0)),
                _ => (Dom::Real(-3.0, 3.0), Dom::Real(-3.0, 3.0)),
            }
        } else if d == DType::Bool {
            (Dom::Small(0, 1), Dom::Small(0, 1))
        } else {
            let lo = if d == DType::U32 { 0 } else { -20 };
            match op {
                BinaryOp::Div | BinaryOp::Rem => (Dom::Small(lo, 20), Dom::Small(1, 7)),
                BinaryOp::Pow => (Dom::Small(if d == DType::U32 { 0 } else { -3 }, 3), Dom::Small(0, 4)),
                _ => (Dom::Small(lo, 20), Dom::Small(lo, 20)),
            }
        };
        case(Prim::Binary(op), vec![(shape.clone(), d, da), (shape, d, db)])
    })
}

fn compare_entry(op: CompareOp) -> Entry {
    let dtypes: Vec<DType> = all_numeric();
    entry(op.name(), dtypes, vec![], false, move |g, d| {
        let shape = g.shape(3, 0, 3);
        let dom = if d == DType::U32 { Dom::Small(0, 3) } else { Dom::Small(-2, 2) };
        case(Prim::Compare(op), vec![(shape.clone(), d, dom), (shape, d, dom)])
    })
}

fn float_dom(d: DType) -> Dom {
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

fn reduce_entry(op: ReduceOp) -> Entry {
    let linear = if op == ReduceOp::Sum { vec![0] } else { vec![] };
    entry(op.name(), all_numeric(), linear, true, move |g, d| {
        let r = g.int(0, 3);
        // max/min of an empty set is +-inf: keep their axes nonempty
        let shape: Vec<usize> = if op == ReduceOp::Sum { g.dims(r) } else { (0..r).map(|_| g.int(1, 3)).collect() };
        let axes: Axes = g.subset(r).into_iter().collect();
        let axes = if axes.is_empty() && r > 0 { smallvec::smallvec![g.int(0, r - 1)] } else { axes };
        if axes.is_empty() {
            // rank 0: reduce over nothing is the identity; use a rank-1 case
            return case(Prim::Reduce { op, axes: smallvec::smallvec![0] }, vec![(vec![3], d, float_dom(d))]);
        }
        case(Prim::Reduce { op, axes }, vec![(shape, d, float_dom(d))])
    })
}

fn all_entries() -> Vec<Entry> {
    let mut v: Vec<Entry> = UnaryOp::ALL.iter().map(|&op| unary_entry(op)).collect();
    for n in [-2, 0, 1, 2] {
        v.push(unary_entry(UnaryOp::IntegerPow(n)));
        let last = v.last_mut().unwrap();
        last.name = format!("integer_pow({n})");
    }
    v.push(entry(
        "convert_element_type",
        all_numeric().into_iter().chain([DType::Bool]).collect(),
        vec![0],
        true,
        |g, d| {
            let to = g.pick(&[
                DType::F64,
                DType::F32,
                DType::F16,
                DType::BF16,
                DType::I32,
                DType::I64,
                DType::U32,
                DType::Bool,
            ]);
            let shape = g.shape(3, 0, 3);
            let dom = if d == DType::U32 || to == DType::U32 { Dom::Real(0.0, 20.0) } else { Dom::Real(-20.0, 20.0) };
            let dom = if d.is_float() && !to.is_float() {
                Dom::AwayFromInt(if to == DType::U32 { 0.0 } else { -20.0 }, 20.0)
            } else {
                dom
            };
            let dom = if d == DType::Bool { Dom::Small(0, 1) } else { dom };
            case(Prim::Convert(to), vec![(shape, d, dom)])
        },
    ));
    v.extend(BinaryOp::ALL.iter().map(|&op| binary_entry(op)));
    v.extend(CompareOp::ALL.iter().map(|&op| compare_entry(op)));
    v.push(entry("select", all_numeric().into_iter().chain([DType::Bool]).collect(), vec![1, 2], true, |g, d| {
        let shape = g.shape(3, 0, 3);
        case(
            Prim::Select,
            vec![
                (shape.clone(), DType::Bool, Dom::Small(0, 1)),
                (shape.clone(), d, float_dom(d)),
                (shape, d, float_dom(d)),
            ],
        )
    }));
    v.push(reduce_entry(ReduceOp::Sum));
    v.push(reduce_entry(ReduceOp::Max));
    v.push(reduce_entry(ReduceOp::Min));
    for op in [ArgOp::Max, ArgOp::Min] {
        v.push(entry(
            op.name(),
            vec![DType::F64, DType::F32, DType::F16, DType::I32, DType::U32],
            vec![],
            false,
            move |g, d| {
                let r = g.int(1, 3);
                let shape: Vec<usize> = (0..r).map(|_| g.int(1, 4)).collect();
                let axis = g.int(0, r - 1);
                let index_dtype = g.pick(&[DType::I32, DType::I64]);
                case(Prim::ArgReduce { op, axis, index_dtype }, vec![(shape, d, float_dom(d))])
            },
        ));
    }
    v.push(entry("cumsum", all_numeric(), vec![0], true, |g, d| {
        let r = g.int(1, 3);
        let shape = g.dims(r);
        let axis = g.int(0, r - 1);
        case(Prim::Cumsum { axis, reverse: g.coin(0.5) }, vec![(shape, d, float_dom(d))])
    }));
    v.push(entry("broadcast_in_dim", all_numeric(), vec![0], true, |g, d| {
        let out_rank = g.int(0, 4);
        let out: Vec<usize> = g.dims(out_rank);
        let dims: Vec<usize> = g.subset(out_rank);
        let operand: Vec<usize> = dims.iter().map(|&k| if g.coin(0.3) { 1 } else { out[k] }).collect();
        case(
            Prim::BroadcastInDim { shape: Shape::from(out), dims: dims.into_iter().collect() },
            vec![(operand, d, float_dom(d))],
        )
    }));
    v.push(entry("reshape", all_numeric(), vec![0], true, |g, d| {
        let shape = g.shape(3, 1, 4);
        let n: usize = shape.iter().product();
        // a new factorization of n, with unit axes sprinkled in
        let mut factors = vec![];
        let mut m = n;
        let mut p = 2;
        while m > 1 {
            while m.is_multiple_of(p) {
                factors.push(p);
                m /= p;
            }
            p += 1;
        }
        let mut out: Vec<usize> = vec![];
        for f in factors {
            if out.is_empty() || g.coin(0.5) {
                out.push(f);
            } else {
                *out.last_mut().unwrap() *= f;
            }
        }
        if g.coin(0.3) {
            let at = g.int(0, out.len());
            out.insert(at, 1);
        }
        case(Prim::Reshape { shape: Shape::from(out) }, vec![(shape, d, float_dom(d))])
    }));
    v.push(entry("transpose", all_numeric(), vec![0], true, |g, d| {
        let r = g.int(0, 4);
        let shape = g.dims(r);
        case(Prim::Transpose { perm: g.perm(r).into_iter().collect() }, vec![(shape, d, float_dom(d))])
    }));
    v.push(entry("slice", all_numeric(), vec![0], true, |g, d| {
        let r = g.int(0, 3);
        let shape: Vec<usize> = (0..r).map(|_| g.int(0, 5)).collect();
        let mut start = Axes::new();
        let mut limit = Axes::new();
        let mut strides = Axes::new();
        for &n in &shape {
            let s = g.int(0, n);
            let l = g.int(s, n);
            start.push(s);
            limit.push(l);
            strides.push(g.int(1, 3));
        }
        case(Prim::Slice { start, limit, strides }, vec![(shape, d, float_dom(d))])
    }));
    v.push(entry("pad", all_numeric(), vec![0, 1], true, |g, d| {
        let r = g.int(0, 3);
        let shape: Vec<usize> = (0..r).map(|_| g.int(0, 3)).collect();
        let (mut low, mut high, mut interior) = (vec![], vec![], vec![]);
        for &n in &shape {
            let it = g.int(0, 2);
            let full = if n > 0 { n + (n - 1) * it } else { 0 } as i64;
            let lo = g.int(0, 4) as i64 - 2;
            let mut hi = g.int(0, 4) as i64 - 2;
            if lo + hi + full < 0 {
                hi = -(lo + full);
            }
            low.push(lo);
            high.push(hi);
            interior.push(it);
        }
        let prim = Prim::Pad {
            low: low.into_iter().collect(),
            high: high.into_iter().collect(),
            interior: interior.into_iter().collect(),
        };
        case(prim, vec![(shape, d, float_dom(d)), (vec![], d, float_dom(d))])
    }));
    v.push(entry("concatenate", all_numeric(), vec![0, 1, 2], true, |g, d| {
        let r = g.int(1, 3);
        let base = g.dims(r);
        let axis = g.int(0, r - 1);
        let k = g.int(1, 3);
        let specs = (0..k)
            .map(|_| {
                let mut s = base.clone();
                s[axis] = g.int(0, 3);
                (s, d, float_dom(d))
            })
            .collect();
        case(Prim::Concatenate { axis }, specs)
    }));
    v.push(entry("rev", all_numeric(), vec![0], true, |g, d| {
        let r = g.int(0, 3);
        let shape = g.dims(r);
        case(Prim::Rev { axes: g.subset(r).into_iter().collect() }, vec![(shape, d, float_dom(d))])
    }));
    v.push(entry("iota", vec![DType::F32, DType::F64, DType::I32, DType::I64, DType::U32], vec![], false, |g, d| {
        let r = g.int(1, 3);
        let shape = g.dims(r);
        case(
            Prim::Iota { shape: Shape::from(shape), dim: g.int(0, r - 1), dtype: d, device: xform::default_device() },
            vec![],
        )
    }));
    v.push(entry("copy", all_numeric(), vec![0], true, |g, d| {
        let shape = g.shape(3, 0, 3);
        case(Prim::Copy, vec![(shape, d, float_dom(d))])
    }));
    v.push(entry("stop_gradient", all_numeric(), vec![], false, |g, d| {
        let shape = g.shape(3, 0, 3);
        case(Prim::StopGradient, vec![(shape, d, float_dom(d))])
    }));
    v.push(entry("dynamic_slice", all_numeric(), vec![0], true, |g, d| {
        let r = g.int(0, 3);
        let shape: Vec<usize> = (0..r).map(|_| g.int(1, 4)).collect();
        let sizes: Vec<usize> = shape.iter().map(|&n| g.int(0, n)).collect();
        let idt = g.pick(&[DType::I32, DType::I64]);
        let mut specs = vec![(shape.clone(), d, float_dom(d))];
        specs.extend(shape.iter().map(|&n| (vec![], idt, Dom::Start(n))));
        case(Prim::DynamicSlice { sizes: sizes.into_iter().collect() }, specs)
    }));
    v.push(entry("dynamic_update_slice", all_numeric(), vec![0, 1], true, |g, d| {
        let r = g.int(0, 3);
        let shape: Vec<usize> = (0..r).map(|_| g.int(1, 4)).collect();
        let sizes: Vec<usize> = shape.iter().map(|&n| g.int(0, n)).collect();
        let idt = g.pick(&[DType::I32, DType::I64]);
        let mut specs = vec![(shape.clone(), d, float_dom(d)), (sizes, d, float_dom(d))];
        specs.extend(shape.iter().map(|&n| (vec![], idt, Dom::Start(n))));
        case(Prim::DynamicUpdateSlice, specs)
    }));
    for scatter in [false, true] {
        let name = if scatter { "scatter_add" } else { "gather" };
        let dtypes = if scatter { FLOATS.iter().chain(INTS.iter()).copied().collect() } else { all_numeric() };
        let linear = if scatter { vec![0, 2] } else { vec![0] };
        v.push(entry(name, dtypes, linear, true, move |g, d| {
            let bd = g.int(0, 2);
            let batch: Vec<usize> = (0..bd).map(|_| g.int(1, 3)).collect();
            let pre = g.int(0, 1);
            let post = g.int(0, 2);
            let mut xs = batch.clone();
            xs.extend((0..pre).map(|_| g.int(1, 3)));
            let axis = xs.len();
            let n = g.int(1, 4);
            xs.push(n);
            xs.extend((0..post).map(|_| g.int(0, 3)));
            let mut is = batch.clone();
            is.extend((0..g.int(0, 2)).map(|_| g.int(1, 3)));
            let idt = g.pick(&[DType::I32, DType::I64, DType::U32]);
            let idom = if idt == DType::U32 { Dom::Small(0, n as i64 - 1) } else { Dom::Index(n) };
            let mut out: Vec<usize> = xs[..axis].to_vec();
            out.extend_from_slice(&is[bd..]);
            out.extend_from_slice(&xs[axis + 1..]);
            if scatter {
                case(
                    Prim::ScatterAdd { axis, batch_dims: bd },
                    vec![(xs, d, float_dom(d)), (is, idt, idom), (out, d, float_dom(d))],
                )
            } else {
                case(Prim::Gather { axis, batch_dims: bd }, vec![(xs, d, float_dom(d)), (is, idt, idom)])
            }
        }));
    }
    v.push(entry("dot_general", all_numeric(), vec![0, 1], true, |g, d| {
        let nb = g.int(0, 1);
        let nc = g.int(0, 2);
        let (lf, rf) = (g.int(0, 2), g.int(0, 2));
        let bsz: Vec<usize> = (0..nb).map(|_| g.int(1, 3)).collect();
        let csz: Vec<usize> = (0..nc).map(|_| g.int(0, 3)).collect();
        // Roles per axis, then a random placement of the axes in each operand.
        let mut lroles: Vec<(char, usize)> =
            (0..nb).map(|i| ('b', i)).chain((0..nc).map(|i| ('c', i))).chain((0..lf).map(|i| ('f', i))).collect();
        let mut rroles: Vec<(char, usize)> =
            (0..nb).map(|i| ('b', i)).chain((0..nc).map(|i| ('c', i))).chain((0..rf).map(|i| ('f', i))).collect();
        let lp = g.perm(lroles.len());
        lroles = lp.iter().map(|&i| lroles[i]).collect();
        let rp = g.perm(rroles.len());
        rroles = rp.iter().map(|&i| rroles[i]).collect();
        let lfs: Vec<usize> = (0..lf).map(|_| g.int(1, 3)).collect();
        let rfs: Vec<usize> = (0..rf).map(|_| g.int(1, 3)).collect();
        let size = |(role, i): (char, usize), fs: &[usize]| match role {
            'b' => bsz[i],
            'c' => csz[i],
            _ => fs[i],
        };
        let ls: Vec<usize> = lroles.iter().map(|&r| size(r, &lfs)).collect();
        let rs: Vec<usize> = rroles.iter().map(|&r| size(r, &rfs)).collect();
        let pos = |roles: &[(char, usize)], role: char, i: usize| roles.iter().position(|&r| r == (role, i)).unwrap();
        let dims = DotDims {
            lhs_contract: (0..nc).map(|i| pos(&lroles, 'c', i)).collect(),
            rhs_contract: (0..nc).map(|i| pos(&rroles, 'c', i)).collect(),
            lhs_batch: (0..nb).map(|i| pos(&lroles, 'b', i)).collect(),
            rhs_batch: (0..nb).map(|i| pos(&rroles, 'b', i)).collect(),
        };
        let dom = if d.is_float() {
            Dom::Real(-2.0, 2.0)
        } else if d == DType::U32 {
            Dom::Small(0, 5)
        } else {
            Dom::Small(-5, 5)
        };
        case(Prim::DotGeneral(dims), vec![(ls, d, dom), (rs, d, dom)])
    }));
    v.push(entry("threefry2x32", vec![DType::U32], vec![], false, |g, _| {
        let shape = g.shape(2, 0, 3);
        case(Prim::Threefry2x32, (0..4).map(|_| (shape.clone(), DType::U32, Dom::Bits)).collect())
    }));
    v
}

/// The registry.
pub fn entries() -> Vec<Entry> {
    all_entries()
}

/// True if the registry covers `prim`'s name (used by the coverage test).
pub fn covers(name: &str) -> bool {
    entries().iter().any(|e| e.name == name || e.name.starts_with(&format!("{name}(")))
}

/// A primitive's derivatives at an edge point, where the generic
/// finite-difference checks cannot go (a tie, a kink, a zero exponent, a
/// singular power): the primitive applied to f64 scalars `at`, and the
/// gradient and Hessian of its output, as JAX 0.10 computes them in f64
/// (`jax.grad`, `jax.hessian`) unless `note` says otherwise.
pub struct EdgePoint {
    pub prim: Prim,
    pub at: Vec<f64>,
    pub grad: Vec<f64>,
    pub hessian: Vec<Vec<f64>>,
    /// Where xform deliberately differs from JAX, and why.
    pub note: &'static str,
    /// The primitive takes `at` as one vector (a reduction) rather than
    /// one scalar operand per entry.
    pub vector: bool,
}

/// The edge-point table (`edges.rs` runs it under grad, jacfwd, jacrev and
/// hessian).
pub fn edge_points() -> Vec<EdgePoint> {
    let (inf, ln2, ln4) = (f64::INFINITY, 2f64.ln(), 4f64.ln());
    let p = |prim: Prim, at: &[f64], grad: &[f64], hessian: &[&[f64]], note: &'static str| EdgePoint {
        prim,
        at: at.to_vec(),
        grad: grad.to_vec(),
        hessian: hessian.iter().map(|r| r.to_vec()).collect(),
        note,
        vector: false,
    };
    let (pow, max, min) = (Prim::Binary(BinaryOp::Pow), Prim::Binary(BinaryOp::Max), Prim::Binary(BinaryOp::Min));
    let un = |op| Prim::Unary(op);
    let red = |op| Prim::Reduce { op, axes: smallvec::smallvec![0] };
    let zero3: [&[f64]; 3] = [&[0.0; 3], &[0.0; 3], &[0.0; 3]];
    vec![
        // JAX's testPowSecondDerivative: the mixed partial at a zero exponent.
        p(pow.clone(), &[4.0, 0.0], &[0.0, ln4], &[&[0.0, 0.25], &[0.25, ln4 * ln4]], ""),
        p(
            pow.clone(),
            &[0.0, 0.0],
            &[0.0, 0.0],
            &[&[0.0, 0.0], &[0.0, 0.0]],
            "JAX gives NaN; its own test keeps a TODO that the gradient at 0^0 should be 0",
        ),
        p(pow.clone(), &[0.0, 2.0], &[0.0, 0.0], &[&[2.0, 0.0], &[0.0, 0.0]], ""),
        p(pow.clone(), &[0.0, 3.0], &[0.0, 0.0], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(pow, &[2.0, 3.0], &[12.0, 8.0 * ln2], &[&[12.0, 4.0 + 12.0 * ln2], &[4.0 + 12.0 * ln2, 8.0 * ln2 * ln2]], ""),
        // Ties split the derivative evenly (jax.lax.max, jnp.maximum).
        p(max.clone(), &[1.0, 1.0], &[0.5, 0.5], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(max, &[0.0, 0.0], &[0.5, 0.5], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(min, &[1.0, 1.0], &[0.5, 0.5], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(Prim::Binary(BinaryOp::Atan2), &[0.0, 1.0], &[1.0, 0.0], &[&[0.0, -1.0], &[-1.0, 0.0]], ""),
        p(Prim::Binary(BinaryOp::Rem), &[5.0, 3.0], &[1.0, -1.0], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(Prim::Binary(BinaryOp::Rem), &[-5.0, 3.0], &[1.0, 1.0], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(
            un(UnaryOp::Abs),
            &[0.0],
            &[0.0],
            &[&[0.0]],
            "sign(0) = 0, as torch.abs; JAX's abs takes the x >= 0 branch and gives 1",
        ),
        p(un(UnaryOp::Sqrt), &[0.0], &[inf], &[&[-inf]], ""),
        p(un(UnaryOp::Rsqrt), &[0.0], &[-inf], &[&[inf]], ""),
        p(un(UnaryOp::Log), &[0.0], &[inf], &[&[-inf]], ""),
        p(un(UnaryOp::IntegerPow(0)), &[0.0], &[0.0], &[&[0.0]], ""),
        p(un(UnaryOp::IntegerPow(2)), &[0.0], &[0.0], &[&[2.0]], ""),
        p(un(UnaryOp::IntegerPow(3)), &[0.0], &[0.0], &[&[0.0]], ""),
        p(un(UnaryOp::IntegerPow(-1)), &[0.0], &[-inf], &[&[inf]], ""),
        p(un(UnaryOp::Sign), &[0.0], &[0.0], &[&[0.0]], ""),
        // Reductions split ties among the maxima (minima) too.
        EdgePoint { vector: true, ..p(red(ReduceOp::Max), &[1.0, 1.0, 0.0], &[0.5, 0.5, 0.0], &zero3, "") },
        EdgePoint { vector: true, ..p(red(ReduceOp::Min), &[0.0, 0.0, 1.0], &[0.5, 0.5, 0.0], &zero3, "") },
        EdgePoint { vector: true, ..p(red(ReduceOp::Min), &[1.0, 1.0, 0.0], &[0.0, 0.0, 1.0], &zero3, "") },
    ]
}
