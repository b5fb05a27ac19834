//! Naive f64 reference implementations of every primitive, written from
//! the definitions (index loops, no views, no kernels), to check the
//! kernels against.

pub mod collective;
mod control;
mod window;

use xform::core::prim::{
    ArgOp, BinaryOp, CompareOp, ConvOp, DecompOp, ElementwiseOp, IndexOp, LinalgOp, RandomOp, ReduceOp, Reduction,
    ShapeOp, UnaryOp,
};
use xform::{DType, Prim, Tensor};

/// A dense row-major f64 array.
#[derive(Clone, Debug, PartialEq)]
pub struct Nd {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Nd {
    pub fn of(t: &Tensor) -> Nd {
        Nd { shape: t.shape().to_vec(), data: t.to_vec_f64() }
    }
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Nd {
        assert_eq!(shape.iter().product::<usize>(), data.len());
        Nd { shape, data }
    }
    pub fn filled(shape: Vec<usize>, v: f64) -> Nd {
        let n = shape.iter().product();
        Nd { shape, data: vec![v; n] }
    }
    fn strides(&self) -> Vec<usize> {
        let mut s = vec![1; self.shape.len()];
        for d in (0..self.shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * self.shape[d + 1];
        }
        s
    }
    pub fn at(&self, idx: &[usize]) -> f64 {
        self.data[self.flat(idx)]
    }
    pub fn flat(&self, idx: &[usize]) -> usize {
        idx.iter().zip(self.strides()).map(|(i, s)| i * s).sum()
    }
    fn set(&mut self, idx: &[usize], v: f64) {
        let k = self.flat(idx);
        self.data[k] = v;
    }
    fn map(&self, f: impl Fn(f64) -> f64) -> Nd {
        Nd { shape: self.shape.clone(), data: self.data.iter().map(|&v| f(v)).collect() }
    }
}

/// Every multi-index of `shape`, row-major.
pub fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    for mut k in 0..n {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = k % shape[d];
            k /= shape[d];
        }
        out.push(idx);
    }
    out
}

fn round_half_even(x: f64) -> f64 {
    x.round_ties_even()
}

fn erf(x: f64) -> f64 {
    // Abramowitz-Stegun 7.1.26 is too coarse; integrate the series instead.
    let mut sum = 0.0;
    let mut term = x;
    let mut n = 0.0;
    loop {
        let add = term / (2.0 * n + 1.0);
        sum += add;
        if add.abs() < 1e-17 * sum.abs().max(1e-300) || n > 200.0 {
            break;
        }
        n += 1.0;
        term *= -x * x / n;
    }
    if x.abs() > 5.0 {
        return x.signum();
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// erfc: `1 - erf(x)` by the series above for |x| < 2, the continued
/// fraction `e^{-x^2} / sqrt(pi) / (x + (1/2) / (x + (2/2) / (x + ...)))`
/// (200 terms, from the bottom up) for x >= 2, and `2 - erfc(-x)` below -2.
fn erfc(x: f64) -> f64 {
    if x <= -2.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.0 {
        return 1.0 - erf(x);
    }
    let mut f = x;
    for n in (1..=200).rev() {
        f = x + (n as f64 / 2.0) / f;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
}

/// erfinv by Newton's method on the series `erf` above.
fn erf_inv(x: f64) -> f64 {
    if x.abs() >= 1.0 {
        return if x.abs() == 1.0 { x * f64::INFINITY } else { f64::NAN };
    }
    let mut y = 0.0;
    for _ in 0..100 {
        let step = (erf(y) - x) / (2.0 / std::f64::consts::PI.sqrt() * (-y * y).exp());
        y -= step;
        if step.abs() < 1e-17 * y.abs().max(1e-300) {
            break;
        }
    }
    y
}

/// `ln Gamma(x)` for x > 0: the recurrence up to x >= 15, then Stirling's
/// series through x^-9.
fn lgamma(x: f64) -> f64 {
    let (mut z, mut shift) = (x, 0.0);
    while z < 15.0 {
        shift += z.ln();
        z += 1.0;
    }
    let (z2, ln2pi) = (z * z, (2.0 * std::f64::consts::PI).ln());
    let series = 1.0 / (12.0 * z) - 1.0 / (360.0 * z * z2) + 1.0 / (1260.0 * z * z2 * z2)
        - 1.0 / (1680.0 * z * z2 * z2 * z2)
        + 1.0 / (1188.0 * z * z2 * z2 * z2 * z2);
    (z - 0.5) * z.ln() - z + 0.5 * ln2pi + series - shift
}

/// digamma for x > 0: the recurrence up to x >= 15, then the asymptotic
/// series through x^-10.
fn digamma(x: f64) -> f64 {
    let (mut z, mut shift) = (x, 0.0);
    while z < 15.0 {
        shift += 1.0 / z;
        z += 1.0;
    }
    let w = 1.0 / (z * z);
    let series = w * (1.0 / 12.0 - w * (1.0 / 120.0 - w * (1.0 / 252.0 - w * (1.0 / 240.0 - w / 132.0))));
    z.ln() - 0.5 / z - series - shift
}

/// polygamma(n, x) for n >= 1, x > 0: (-1)^(n+1) n! sum_k (x + k)^-(n+1),
/// the first 30 terms summed, the tail by Euler-Maclaurin.
fn polygamma(n: u32, x: f64) -> f64 {
    if n == 0 {
        return digamma(x);
    }
    let s = (n + 1) as f64;
    let mut sum: f64 = (0..30).map(|k| (x + k as f64).powf(-s)).sum();
    let z = x + 30.0;
    // tail: z^(1-s)/(s-1) + z^-s/2 + sum_j B_2j/(2j)! s(s+1)...(s+2j-2) z^(-s-2j+1)
    sum += z.powf(1.0 - s) / (s - 1.0) + 0.5 * z.powf(-s);
    let bern = [1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0];
    let (mut rising, mut fact) = (s, 2.0);
    for (j, b) in bern.iter().enumerate() {
        let j = j as f64 + 1.0;
        sum += b / fact * rising * z.powf(-s - 2.0 * j + 1.0);
        rising *= (s + 2.0 * j - 1.0) * (s + 2.0 * j);
        fact *= (2.0 * j + 1.0) * (2.0 * j + 2.0);
    }
    let nfact: f64 = (1..=n).map(|k| k as f64).product();
    let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
    sign * nfact * sum
}

fn int_wrap(v: f64, d: DType) -> f64 {
    match d {
        DType::I32 => (v as i64 as i32) as f64,
        DType::U32 => (v as i64 as u32) as f64,
        _ => v,
    }
}

fn unary(op: UnaryOp, x: f64, d: DType) -> f64 {
    let int = d.is_int();
    match op {
        UnaryOp::Neg => int_wrap(-x, d),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Expm1 => x.exp_m1(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tan => x.tan(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Logistic => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => round_half_even(x),
        UnaryOp::Erf => erf(x),
        UnaryOp::Exp2 => x.exp2(),
        UnaryOp::Log2 => x.log2(),
        UnaryOp::Log10 => x.log10(),
        UnaryOp::Erfc => erfc(x),
        UnaryOp::Logit => (x / (1.0 - x)).ln(),
        UnaryOp::Sinc => {
            if x == 0.0 {
                1.0
            } else {
                (std::f64::consts::PI * x).sin() / (std::f64::consts::PI * x)
            }
        }
        UnaryOp::Asin => x.asin(),
        UnaryOp::Acos => x.acos(),
        UnaryOp::Atan => x.atan(),
        UnaryOp::Sinh => x.sinh(),
        UnaryOp::Cosh => x.cosh(),
        UnaryOp::Asinh => x.asinh(),
        UnaryOp::Acosh => x.acosh(),
        UnaryOp::Atanh => x.atanh(),
        UnaryOp::Cbrt => x.cbrt(),
        UnaryOp::ErfInv | UnaryOp::ErfInvXla => erf_inv(x),
        UnaryOp::Lgamma => lgamma(x),
        UnaryOp::Digamma => digamma(x),
        UnaryOp::Polygamma(n) => polygamma(n, x),
        UnaryOp::Not => match d {
            DType::Bool => 1.0 - x,
            DType::U32 => (u32::MAX as f64) - x,
            _ => -x - 1.0,
        },
        UnaryOp::IntegerPow(n) => {
            if int && n < 0 {
                if x == 1.0 {
                    1.0
                } else if x == -1.0 {
                    if n % 2 == 0 {
                        1.0
                    } else {
                        -1.0
                    }
                } else {
                    0.0
                }
            } else {
                int_wrap(x.powi(n), d)
            }
        }
    }
}

fn cast(x: f64, d: DType) -> f64 {
    match d {
        DType::Bool => (x != 0.0) as i32 as f64,
        DType::I32 => x.trunc().clamp(i32::MIN as f64, i32::MAX as f64),
        DType::I64 => x.trunc(),
        DType::U32 => x.trunc().clamp(0.0, u32::MAX as f64),
        _ => x,
    }
}

fn binary(op: BinaryOp, a: f64, b: f64, d: DType) -> f64 {
    let int = d.is_int();
    match op {
        BinaryOp::Add => int_wrap(a + b, d),
        BinaryOp::Sub => int_wrap(a - b, d),
        BinaryOp::Mul => int_wrap(a * b, d),
        BinaryOp::Div => {
            if int {
                if b == 0.0 {
                    if d == DType::U32 {
                        u32::MAX as f64
                    } else {
                        -1.0
                    }
                } else {
                    (a / b).trunc()
                }
            } else {
                a / b
            }
        }
        BinaryOp::Pow => {
            if int {
                if b < 0.0 {
                    if a == 1.0 {
                        1.0
                    } else if a == -1.0 {
                        if (b as i64) % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        }
                    } else {
                        0.0
                    }
                } else {
                    int_wrap(a.powi(b as i32), d)
                }
            } else {
                a.powf(b)
            }
        }
        BinaryOp::Max => nan_max(a, b),
        BinaryOp::Min => nan_min(a, b),
        BinaryOp::Rem => {
            if int && b == 0.0 {
                a
            } else {
                a % b
            }
        }
        BinaryOp::Atan2 => a.atan2(b),
        // 0 at a = 0 (scipy's convention), NaN b propagating
        BinaryOp::Xlogy => {
            if a == 0.0 && !b.is_nan() {
                0.0
            } else {
                a * b.ln()
            }
        }
        BinaryOp::Xlog1py => {
            if a == 0.0 && !b.is_nan() {
                0.0
            } else {
                a * b.ln_1p()
            }
        }
        BinaryOp::Logaddexp => {
            let m = a.max(b);
            if m == f64::NEG_INFINITY {
                m
            } else {
                m + ((a - m).exp() + (b - m).exp()).ln()
            }
        }
        BinaryOp::Hypot => (a * a + b * b).sqrt(),
        BinaryOp::And => match d {
            DType::Bool => ((a != 0.0) && (b != 0.0)) as i32 as f64,
            DType::U32 => ((a as u32) & (b as u32)) as f64,
            _ => ((a as i64) & (b as i64)) as f64,
        },
        BinaryOp::Or => match d {
            DType::Bool => ((a != 0.0) || (b != 0.0)) as i32 as f64,
            DType::U32 => ((a as u32) | (b as u32)) as f64,
            _ => ((a as i64) | (b as i64)) as f64,
        },
    }
}

/// Maximum that propagates NaN (numpy's `maximum`).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Minimum that propagates NaN (numpy's `minimum`).
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn compare(op: CompareOp, a: f64, b: f64) -> f64 {
    let r = match op {
        CompareOp::Eq => a == b,
        CompareOp::Ne => a != b,
        CompareOp::Lt => a < b,
        CompareOp::Le => a <= b,
        CompareOp::Gt => a > b,
        CompareOp::Ge => a >= b,
    };
    r as i32 as f64
}

/// A dynamic-slice start as JAX 0.10 resolves it, written independently of
/// the library: `jnp`'s wrap `s + n` for a negative start, then XLA's clamp
/// to `0..=n - block`.
fn jax_start(s: f64, n: usize, block: usize) -> usize {
    let s = if s < 0.0 { s + n as f64 } else { s };
    s.max(0.0).min((n - block) as f64) as usize
}

fn zip(a: &Nd, b: &Nd, f: impl Fn(f64, f64) -> f64) -> Nd {
    Nd { shape: a.shape.clone(), data: a.data.iter().zip(&b.data).map(|(x, y)| f(*x, *y)).collect() }
}

/// Applies `prim` to `ins` (with their dtypes) the naive way.
pub fn apply(prim: &Prim, ins: &[Nd], dtypes: &[DType]) -> Vec<Nd> {
    let d0 = dtypes.first().copied().unwrap_or(DType::F64);
    let one = |n: Nd| vec![n];
    match prim {
        Prim::Unary(op) => one(ins[0].map(|x| unary(*op, x, d0))),
        Prim::Elementwise(ElementwiseOp::Convert(d)) => one(ins[0].map(|x| cast(x, *d))),
        Prim::Binary(op) => one(zip(&ins[0], &ins[1], |a, b| binary(*op, a, b, d0))),
        Prim::Compare(op) => one(zip(&ins[0], &ins[1], |a, b| compare(*op, a, b))),
        Prim::Elementwise(ElementwiseOp::Select) => {
            let (p, t, f) = (&ins[0], &ins[1], &ins[2]);
            let data =
                p.data.iter().zip(&t.data).zip(&f.data).map(|((c, x), y)| if *c != 0.0 { *x } else { *y }).collect();
            one(Nd::new(t.shape.clone(), data))
        }
        Prim::Reduce(Reduction::Reduce { op, axes }) => {
            let x = &ins[0];
            let out_shape: Vec<usize> =
                x.shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect();
            let init = match op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Max => f64::NEG_INFINITY,
                ReduceOp::Min => f64::INFINITY,
            };
            let init = match (op, d0) {
                (ReduceOp::Max, d) if d.is_int() => min_of(d),
                (ReduceOp::Min, d) if d.is_int() => max_of(d),
                _ => init,
            };
            let mut out = Nd::filled(out_shape, init);
            for idx in indices(&x.shape) {
                let o: Vec<usize> =
                    idx.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &i)| i).collect();
                let v = x.at(&idx);
                let cur = out.at(&o);
                let new = match op {
                    ReduceOp::Sum => cur + v,
                    ReduceOp::Max => nan_max(cur, v),
                    ReduceOp::Min => nan_min(cur, v),
                };
                out.set(&o, new);
            }
            if matches!(op, ReduceOp::Sum) {
                out = out.map(|v| int_wrap(v, d0));
            }
            one(out)
        }
        Prim::Reduce(Reduction::ArgReduce { op, axis, .. }) => {
            let x = &ins[0];
            let mut out_shape = x.shape.clone();
            out_shape.remove(*axis);
            let mut out = Nd::filled(out_shape.clone(), 0.0);
            for o in indices(&out_shape) {
                let mut best = 0;
                let mut bv = f64::NAN;
                for j in 0..x.shape[*axis] {
                    let mut idx = o.clone();
                    idx.insert(*axis, j);
                    let v = x.at(&idx);
                    if j == 0 {
                        bv = v;
                        if v.is_nan() {
                            break;
                        }
                        continue;
                    }
                    if v.is_nan() {
                        best = j;
                        break;
                    }
                    let better = match op {
                        ArgOp::Max => v > bv,
                        ArgOp::Min => v < bv,
                    };
                    if better {
                        best = j;
                        bv = v;
                    }
                }
                out.set(&o, best as f64);
            }
            one(out)
        }
        Prim::Reduce(Reduction::Cumsum { axis, reverse }) => {
            let x = &ins[0];
            let mut out = x.clone();
            for idx in indices(&x.shape) {
                let mut s = 0.0;
                let n = x.shape[*axis];
                let range: Vec<usize> = if *reverse { (idx[*axis]..n).collect() } else { (0..=idx[*axis]).collect() };
                for j in range {
                    let mut k = idx.clone();
                    k[*axis] = j;
                    s += x.at(&k);
                }
                out.set(&idx, int_wrap(s, d0));
            }
            one(out)
        }
        Prim::Shape(ShapeOp::BroadcastInDim { shape, dims }) => {
            let x = &ins[0];
            let mut out = Nd::filled(shape.to_vec(), 0.0);
            for idx in indices(shape) {
                let src: Vec<usize> =
                    dims.iter().enumerate().map(|(i, &d)| if x.shape[i] == 1 { 0 } else { idx[d] }).collect();
                out.set(&idx, x.at(&src));
            }
            one(out)
        }
        Prim::Shape(ShapeOp::Reshape { shape }) => one(Nd::new(shape.to_vec(), ins[0].data.clone())),
        Prim::Shape(ShapeOp::Transpose { perm }) => {
            let x = &ins[0];
            let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
            let mut out = Nd::filled(shape.clone(), 0.0);
            for idx in indices(&shape) {
                let mut src = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    src[p] = idx[i];
                }
                out.set(&idx, x.at(&src));
            }
            one(out)
        }
        Prim::Shape(ShapeOp::Slice { start, limit, strides }) => {
            let x = &ins[0];
            let shape: Vec<usize> = (0..x.shape.len()).map(|d| (limit[d] - start[d]).div_ceil(strides[d])).collect();
            let mut out = Nd::filled(shape.clone(), 0.0);
            for idx in indices(&shape) {
                let src: Vec<usize> = idx.iter().enumerate().map(|(d, &i)| start[d] + i * strides[d]).collect();
                out.set(&idx, x.at(&src));
            }
            one(out)
        }
        Prim::Shape(ShapeOp::Pad { low, high, interior }) => {
            let (x, v) = (&ins[0], ins[1].data[0]);
            let shape: Vec<usize> = (0..x.shape.len())
                .map(|d| {
                    let n = x.shape[d] as i64;
                    (low[d] + high[d] + n + if n > 0 { (n - 1) * interior[d] as i64 } else { 0 }) as usize
                })
                .collect();
            let mut out = Nd::filled(shape.clone(), v);
            for idx in indices(&x.shape) {
                let pos: Vec<i64> =
                    idx.iter().enumerate().map(|(d, &i)| low[d] + i as i64 * (interior[d] as i64 + 1)).collect();
                if pos.iter().zip(&shape).all(|(&p, &n)| p >= 0 && p < n as i64) {
                    let p: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
                    out.set(&p, x.at(&idx));
                }
            }
            one(out)
        }
        Prim::Shape(ShapeOp::Concatenate { axis }) => {
            let mut shape = ins[0].shape.clone();
            shape[*axis] = ins.iter().map(|x| x.shape[*axis]).sum();
            let mut out = Nd::filled(shape, 0.0);
            let mut at = 0;
            for x in ins {
                for idx in indices(&x.shape) {
                    let mut o = idx.clone();
                    o[*axis] += at;
                    out.set(&o, x.at(&idx));
                }
                at += x.shape[*axis];
            }
            one(out)
        }
        Prim::Shape(ShapeOp::Rev { axes }) => {
            let x = &ins[0];
            let mut out = x.clone();
            for idx in indices(&x.shape) {
                let src: Vec<usize> = idx
                    .iter()
                    .enumerate()
                    .map(|(d, &i)| if axes.contains(&d) { x.shape[d] - 1 - i } else { i })
                    .collect();
                out.set(&idx, x.at(&src));
            }
            one(out)
        }
        Prim::Shape(ShapeOp::Iota { shape, dim, .. }) => {
            let mut out = Nd::filled(shape.to_vec(), 0.0);
            for idx in indices(shape) {
                out.set(&idx, idx[*dim] as f64);
            }
            one(out)
        }
        Prim::Elementwise(ElementwiseOp::Copy) | Prim::Elementwise(ElementwiseOp::StopGradient) => one(ins[0].clone()),
        Prim::Index(IndexOp::DynamicSlice { sizes }) => {
            let x = &ins[0];
            let starts: Vec<usize> =
                (0..sizes.len()).map(|d| jax_start(ins[1 + d].data[0], x.shape[d], sizes[d])).collect();
            let mut out = Nd::filled(sizes.to_vec(), 0.0);
            for idx in indices(sizes) {
                let src: Vec<usize> = idx.iter().zip(&starts).map(|(i, s)| i + s).collect();
                out.set(&idx, x.at(&src));
            }
            one(out)
        }
        Prim::Index(IndexOp::DynamicUpdateSlice) => {
            let (x, u) = (&ins[0], &ins[1]);
            let starts: Vec<usize> =
                (0..x.shape.len()).map(|d| jax_start(ins[2 + d].data[0], x.shape[d], u.shape[d])).collect();
            let mut out = x.clone();
            for idx in indices(&u.shape) {
                let dst: Vec<usize> = idx.iter().zip(&starts).map(|(i, s)| i + s).collect();
                out.set(&dst, u.at(&idx));
            }
            one(out)
        }
        Prim::Index(IndexOp::Gather { axis, batch_dims }) => {
            let (x, ix) = (&ins[0], &ins[1]);
            let mut shape: Vec<usize> = x.shape[..*axis].to_vec();
            shape.extend_from_slice(&ix.shape[*batch_dims..]);
            shape.extend_from_slice(&x.shape[axis + 1..]);
            let ni = ix.shape.len() - batch_dims;
            let mut out = Nd::filled(shape.clone(), 0.0);
            for idx in indices(&shape) {
                let pre = &idx[..*axis];
                let ii = &idx[*axis..axis + ni];
                let post = &idx[axis + ni..];
                let mut iidx: Vec<usize> = pre[..*batch_dims].to_vec();
                iidx.extend_from_slice(ii);
                let mut j = ix.at(&iidx) as i64;
                if j < 0 {
                    j += x.shape[*axis] as i64;
                }
                let mut src = pre.to_vec();
                src.push(j as usize);
                src.extend_from_slice(post);
                out.set(&idx, x.at(&src));
            }
            one(out)
        }
        Prim::Index(IndexOp::ScatterAdd { axis, batch_dims }) => {
            let (x, ix, u) = (&ins[0], &ins[1], &ins[2]);
            let ni = ix.shape.len() - batch_dims;
            let mut out = x.clone();
            for idx in indices(&u.shape) {
                let pre = &idx[..*axis];
                let ii = &idx[*axis..axis + ni];
                let post = &idx[axis + ni..];
                let mut iidx: Vec<usize> = pre[..*batch_dims].to_vec();
                iidx.extend_from_slice(ii);
                let mut j = ix.at(&iidx) as i64;
                if j < 0 {
                    j += x.shape[*axis] as i64;
                }
                let mut dst = pre.to_vec();
                dst.push(j as usize);
                dst.extend_from_slice(post);
                let v = out.at(&dst) + u.at(&idx);
                out.set(&dst, int_wrap(v, d0));
            }
            one(out)
        }
        Prim::Linalg(LinalgOp::DotGeneral(dd)) => {
            let (a, b) = (&ins[0], &ins[1]);
            let lf: Vec<usize> =
                (0..a.shape.len()).filter(|x| !dd.lhs_contract.contains(x) && !dd.lhs_batch.contains(x)).collect();
            let rf: Vec<usize> =
                (0..b.shape.len()).filter(|x| !dd.rhs_contract.contains(x) && !dd.rhs_batch.contains(x)).collect();
            let mut shape: Vec<usize> = dd.lhs_batch.iter().map(|&x| a.shape[x]).collect();
            shape.extend(lf.iter().map(|&x| a.shape[x]));
            shape.extend(rf.iter().map(|&x| b.shape[x]));
            let cshape: Vec<usize> = dd.lhs_contract.iter().map(|&x| a.shape[x]).collect();
            let nb = dd.lhs_batch.len();
            let mut out = Nd::filled(shape.clone(), 0.0);
            for idx in indices(&shape) {
                let mut s = 0.0;
                for c in indices(&cshape) {
                    let mut ia = vec![0; a.shape.len()];
                    let mut ib = vec![0; b.shape.len()];
                    for (k, (&la, &rb)) in dd.lhs_batch.iter().zip(&dd.rhs_batch).enumerate() {
                        ia[la] = idx[k];
                        ib[rb] = idx[k];
                    }
                    for (k, &x) in lf.iter().enumerate() {
                        ia[x] = idx[nb + k];
                    }
                    for (k, &x) in rf.iter().enumerate() {
                        ib[x] = idx[nb + lf.len() + k];
                    }
                    for (k, (&la, &rb)) in dd.lhs_contract.iter().zip(&dd.rhs_contract).enumerate() {
                        ia[la] = c[k];
                        ib[rb] = c[k];
                    }
                    s += a.at(&ia) * b.at(&ib);
                }
                out.set(&idx, int_wrap(s, d0));
            }
            one(out)
        }
        Prim::Conv(ConvOp::ConvGeneralDilated(p)) => one(super::reference_conv::conv(p, &ins[0], &ins[1])),
        Prim::Decomp(DecompOp::Cholesky) => one(super::reference_decomp::cholesky(&ins[0])),
        Prim::Decomp(DecompOp::TriangularSolve(s)) => {
            one(super::reference_decomp::triangular_solve(s, &ins[0], &ins[1]))
        }
        Prim::Decomp(DecompOp::Lu) => super::reference_decomp::lu(&ins[0]),
        Prim::Decomp(DecompOp::Qr { full_matrices }) => super::reference_decomp::qr(*full_matrices, &ins[0]),
        Prim::Decomp(DecompOp::Eigh) => super::reference_decomp::eigh(&ins[0]),
        Prim::Decomp(DecompOp::Svd { full_matrices, compute_uv }) => {
            super::reference_decomp::svd(*full_matrices, *compute_uv, &ins[0])
        }
        Prim::Random(RandomOp::Threefry2x32) => {
            let n = ins[0].data.len();
            let (mut y0, mut y1) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for i in 0..n {
                let (a, b) = xform::core::kernels::cpu::random::threefry2x32(
                    ins[0].data[i] as u32,
                    ins[1].data[i] as u32,
                    ins[2].data[i] as u32,
                    ins[3].data[i] as u32,
                );
                y0.push(a as f64);
                y1.push(b as f64);
            }
            vec![Nd::new(ins[0].shape.clone(), y0), Nd::new(ins[0].shape.clone(), y1)]
        }
        Prim::Window(op) => one(window::apply(op, ins, d0)),
        Prim::Control(op) => control::apply(op, ins, dtypes),
        Prim::Collective(_) => panic!("a collective's reference needs its axis size: reference::collective::apply"),
    }
}

fn min_of(d: DType) -> f64 {
    match d {
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        _ => 0.0,
    }
}

fn max_of(d: DType) -> f64 {
    match d {
        DType::I32 => i32::MAX as f64,
        DType::I64 => i64::MAX as f64,
        _ => u32::MAX as f64,
    }
}
