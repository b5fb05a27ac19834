//! The registry: every primitive with a generator of valid inputs. The
//! entries are declared by each primitive family beside its rules
//! (`Family::samples` in `ops/src/prims/<family>.rs`, collected by
//! `Prim::samples`); this file adapts them for the generic tests (eval
//! against the f64 reference, JVP against finite differences, batching
//! against a loop for every placement of batch dims, the transpose
//! identity, second order) and holds the edge-point table.

use std::f64::consts::{LOG10_E, PI};
use std::rc::Rc;
use xform::core::prim::{BinaryOp, ReduceOp, Reduction, UnaryOp};
pub use xform::core::prims::sample::Gen as G;
use xform::{DType, Prim, Tensor};

/// One generated application: a primitive and a way to draw fresh inputs
/// of fixed shapes (so batching tests can stack several examples).
#[derive(Clone)]
pub struct Case {
    pub prim: Prim,
    pub make: Rc<dyn Fn(u64) -> Vec<Tensor>>,
    /// A collective's named axis (name, size): see [`Case::apply`].
    pub axis: Option<(String, usize)>,
}

impl Case {
    /// The primitive applied to `inputs`. A collective runs under `vmap`
    /// with its axis name over every operand's leading axis (that axis's
    /// size), its results stacked along axis 0: the collective as a
    /// function of every example's value, which the generic tests check
    /// like any other primitive's.
    pub fn apply(&self, inputs: &[Tensor]) -> xform::Result<Vec<Tensor>> {
        match &self.axis {
            None => xform::core::interp::bind(&self.prim, inputs).map(|o| o.into_vec()),
            Some((name, n)) => {
                let prim = self.prim.clone();
                let f = move |xs: &Vec<Tensor>| {
                    xform::core::interp::bind(&prim, xs).unwrap_or_else(|e| e.raise()).into_vec()
                };
                let opts = xform::VmapOptions::new().axis_name(name.as_str()).axis_size(*n);
                xform::try_vmap_with(f, opts)(&inputs.to_vec())
            }
        }
    }
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shapes: Vec<String> = (self.make)(0).iter().map(|t| format!("{}{}", t.dtype(), t.shape())).collect();
        write!(f, "{} on {}", self.prim, shapes.join(", "))
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

/// The registry: every family's samples. While working on one primitive,
/// `XFORM_REGISTRY_ONLY=name` keeps only the entries whose name contains
/// `name` (CI never sets it).
pub fn entries() -> Vec<Entry> {
    let only = std::env::var("XFORM_REGISTRY_ONLY").ok();
    Prim::samples()
        .into_iter()
        .filter(|s| only.as_ref().is_none_or(|o| s.name.contains(o.as_str())))
        .map(|s| {
            let draw = s.draw.clone();
            Entry {
                name: s.name,
                dtypes: s.dtypes,
                linear: s.linear,
                smooth: s.smooth,
                gen: Rc::new(move |g: &mut G, d: DType| {
                    let c = draw(g, d);
                    let drawn = c.clone();
                    Case { prim: c.prim, axis: c.axis, make: Rc::new(move |seed| drawn.operands(seed)) }
                }),
            }
        })
        .collect()
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

/// The Euler-Mascheroni constant, zeta(2) and zeta(3).
const EULER: f64 = 0.5772156649015329;
const ZETA2: f64 = 1.6449340668482264;
const ZETA3: f64 = 1.2020569031595942;

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
    let bin = |op| Prim::Binary(op);
    let (nan, e, frac_1_sqrt2) = (f64::NAN, std::f64::consts::E, std::f64::consts::FRAC_1_SQRT_2);
    // hypot's Hessian at (3, -3): (I - u u^T) / h with u = (1, -1) / sqrt(2), h = 3 sqrt(2)
    let tie = 0.5 / (3.0 * 2f64.sqrt());
    let red = |op| Prim::Reduce(Reduction::Reduce { op, axes: smallvec::smallvec![0] });
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
        // The inverse and special functions at the ends of their domains,
        // at poles and at their roots (JAX 0.10's jax.grad / jax.hessian).
        p(un(UnaryOp::Cbrt), &[0.0], &[inf], &[&[-inf]], ""),
        p(un(UnaryOp::Acosh), &[1.0], &[inf], &[&[-inf]], ""),
        p(un(UnaryOp::Asin), &[1.0], &[inf], &[&[inf]], ""),
        p(un(UnaryOp::Atanh), &[0.0], &[1.0], &[&[0.0]], ""),
        p(un(UnaryOp::Log2), &[0.0], &[inf], &[&[-inf]], ""),
        p(un(UnaryOp::Exp2), &[0.0], &[ln2], &[&[ln2 * ln2]], ""),
        p(un(UnaryOp::ErfInv), &[0.0], &[std::f64::consts::PI.sqrt() / 2.0], &[&[0.0]], ""),
        p(un(UnaryOp::ErfInv), &[1.0], &[inf], &[&[inf]], ""),
        p(un(UnaryOp::ErfInvXla), &[0.0], &[std::f64::consts::PI.sqrt() / 2.0], &[&[0.0]], ""),
        p(un(UnaryOp::ErfInvXla), &[1.0], &[inf], &[&[inf]], ""),
        p(un(UnaryOp::Lgamma), &[1.0], &[-EULER], &[&[ZETA2]], ""),
        p(un(UnaryOp::Lgamma), &[0.0], &[f64::NAN], &[&[inf]], ""),
        p(un(UnaryOp::Digamma), &[1.0], &[ZETA2], &[&[-2.0 * ZETA3]], ""),
        p(un(UnaryOp::Digamma), &[0.0], &[inf], &[&[f64::NAN]], ""),
        // The ops of issue 46 (JAX 0.10.2's jax.grad / jax.hessian of
        // jax.scipy.special.xlogy, xlog1py, logit, erfc and jnp.logaddexp,
        // hypot, sinc, log10).
        p(bin(BinaryOp::Xlogy), &[0.0, 1.0], &[0.0, 0.0], &[&[0.0, 1.0], &[1.0, 0.0]], ""),
        p(bin(BinaryOp::Xlogy), &[0.0, 2.0], &[ln2, 0.0], &[&[0.0, 0.5], &[0.5, 0.0]], ""),
        p(bin(BinaryOp::Xlog1py), &[0.0, 0.0], &[0.0, 0.0], &[&[0.0, 1.0], &[1.0, 0.0]], ""),
        p(bin(BinaryOp::Logaddexp), &[0.0, 0.0], &[0.5, 0.5], &[&[0.25, -0.25], &[-0.25, 0.25]], ""),
        p(bin(BinaryOp::Logaddexp), &[inf, inf], &[1.0, 1.0], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(bin(BinaryOp::Logaddexp), &[-inf, -inf], &[nan, nan], &[&[nan, nan], &[nan, nan]], ""),
        p(bin(BinaryOp::Logaddexp), &[-inf, 0.0], &[0.0, 1.0], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(
            bin(BinaryOp::Logaddexp),
            &[inf, 1.0],
            &[1.0, e],
            &[&[0.0, 0.0], &[0.0, e]],
            "JAX's rule replaces +inf by 0 in exp(b - out), so d/db is e^(1 - 0) (as JAX)",
        ),
        p(bin(BinaryOp::Hypot), &[0.0, 0.0], &[0.5, 0.5], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(bin(BinaryOp::Hypot), &[-0.0, 0.0], &[0.5, 0.5], &[&[0.0, 0.0], &[0.0, 0.0]], ""),
        p(bin(BinaryOp::Hypot), &[0.0, 2.0], &[0.0, 1.0], &[&[0.5, 0.0], &[0.0, 0.0]], ""),
        p(
            bin(BinaryOp::Hypot),
            &[3.0, -3.0],
            &[frac_1_sqrt2, -frac_1_sqrt2],
            &[&[tie, tie], &[tie, tie]],
            "hypot is smooth at a tie |a| = |b|: this is its Hessian (PyTorch's); JAX's formula \
             splits the tangent between its max and min there and gives 0",
        ),
        p(un(UnaryOp::Sinc), &[0.0], &[0.0], &[&[-PI * PI / 3.0]], ""),
        p(un(UnaryOp::Sinc), &[1.0], &[-1.0], &[&[2.0]], ""),
        p(un(UnaryOp::Logit), &[0.5], &[4.0], &[&[0.0]], ""),
        p(un(UnaryOp::Erfc), &[0.0], &[-2.0 / PI.sqrt()], &[&[0.0]], ""),
        p(un(UnaryOp::Erfc), &[inf], &[-0.0], &[&[nan]], ""),
        p(un(UnaryOp::Erfc), &[-inf], &[-0.0], &[&[nan]], ""),
        p(un(UnaryOp::Log10), &[0.0], &[inf], &[&[-inf]], ""),
        p(un(UnaryOp::Log10), &[1.0], &[LOG10_E], &[&[-LOG10_E]], ""),
        // Reductions split ties among the maxima (minima) too.
        EdgePoint { vector: true, ..p(red(ReduceOp::Max), &[1.0, 1.0, 0.0], &[0.5, 0.5, 0.0], &zero3, "") },
        EdgePoint { vector: true, ..p(red(ReduceOp::Min), &[0.0, 0.0, 1.0], &[0.5, 0.5, 0.0], &zero3, "") },
        EdgePoint { vector: true, ..p(red(ReduceOp::Min), &[1.0, 1.0, 0.0], &[0.0, 0.0, 1.0], &zero3, "") },
    ]
}
