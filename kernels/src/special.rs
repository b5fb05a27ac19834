//! Scalar special functions for elementwise primitives (digamma,
//! polygamma, erfinv and XLA's erfinv, lgamma, erfc with erfcx and `ln(erfc)`) on the CPU,
//! and [`cuda_helpers`], the CUDA C device source of the same digamma /
//! polygamma algorithms.
//!
//! Conventions follow `jax.scipy.special` / XLA where JAX is right, and the
//! true limit where JAX returns NaN without reason (see each function).
//! No function panics; every input, NaN and ±inf included, gives a value.
//!
//! NOTE: [special one algorithm, two languages] digamma and polygamma are
//! written once in Rust here and once as C in [`cuda_helpers`], operation
//! for operation in the same order with the same constants (the C is
//! generated from this module's constant tables), so the two agree up to
//! the last-bit differences of `log` / `tan` / `pow` between the C library
//! and CUDA. The f32 versions compute in f64 and round once, on both sides.
//! The test `special_cuda_source_matches_cpu_under_gcc` compiles the C with gcc
//! and compares it with the Rust functions.

use std::f64::consts::PI;
use std::fmt::Write;

mod erfc;
mod erfinv_xla;
pub use erfc::{erfc, erfc_f32, erfcx, log_erfc};
pub use erfinv_xla::{erfinv_xla, erfinv_xla_f32, fma_emulated, LOG1P_DEN, LOG1P_NUM, LOG1P_SMALL};

/// `B_2k / (2k)` for k = 1..=8: digamma's asymptotic series
/// ψ(x) ~ ln x - 1/(2x) - Σ B_2k / (2k x^2k).
#[allow(clippy::excessive_precision)]
const DIGAMMA_ASYMP: [f64; 8] = [
    0.08333333333333333,
    -0.008333333333333333,
    0.003968253968253968,
    -0.004166666666666667,
    0.007575757575757576,
    -0.02109279609279609,
    0.08333333333333334,
    -0.4432598039215686,
];

/// `B_2j / (2j)!` for j = 1..=12: the Euler-Maclaurin tail of the Hurwitz zeta.
#[allow(clippy::excessive_precision)]
const ZETA_EM: [f64; 12] = [
    0.08333333333333333,
    -0.001388888888888889,
    3.3068783068783064e-05,
    -8.267195767195768e-07,
    2.08767569878681e-08,
    -5.284190138687493e-10,
    1.338253653068468e-11,
    -3.3896802963225827e-13,
    8.586062056277845e-15,
    -2.174868698558062e-16,
    5.5090028283602295e-18,
    -1.3954464685812525e-19,
];

/// Digamma shifts its argument up to at least this before the series
/// (8 terms at x >= 10 leave a relative error below 1e-17).
const DIGAMMA_SHIFT: f64 = 10.0;

/// The digamma function ψ(x) = Γ'(x)/Γ(x).
///
/// As XLA: NaN at the poles 0, -1, -2, ... (and at -0), NaN at -inf and
/// NaN, +inf at +inf. For x < 0 the reflection
/// ψ(x) = ψ(1 - x) - π / tan(πx), with πx first reduced by the nearest
/// integer (exact), so large negative x keep full accuracy. For x > 0 the
/// recurrence ψ(x) = ψ(x + 1) - 1/x up to x >= 10, then the asymptotic
/// series. Accuracy: relative ~1e-15, absolute ~1e-15 near the positive
/// root 1.4616...
pub fn digamma(x: f64) -> f64 {
    if x.is_nan() || x == f64::NEG_INFINITY {
        return f64::NAN;
    }
    if x == f64::INFINITY {
        return f64::INFINITY;
    }
    if x <= 0.0 && x == x.floor() {
        return f64::NAN;
    }
    if x < 0.0 {
        // tan has period π: tan(πx) = tan(πr) with r = x - round(x) exact.
        let r = x - x.round();
        // π / tan(πr) = 1/r - π²r/3 + O(r³) for tiny r (πr may be subnormal).
        let cot = if r.abs() < 1e-8 { 1.0 / r - PI * PI * r / 3.0 } else { PI / (PI * r).tan() };
        return digamma_pos(1.0 - x) - cot;
    }
    digamma_pos(x)
}

/// ψ(x) for finite x > 0: recurrence, then the asymptotic series.
fn digamma_pos(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < DIGAMMA_SHIFT {
        acc += 1.0 / x;
        x += 1.0;
    }
    let z = 1.0 / (x * x);
    let mut p = DIGAMMA_ASYMP[DIGAMMA_ASYMP.len() - 1];
    for &c in DIGAMMA_ASYMP.iter().rev().skip(1) {
        p = p * z + c;
    }
    x.ln() - 0.5 / x - p * z - acc
}

/// [`digamma`] of an f32, computed in f64 and rounded once (so within one
/// f32 ulp of the true value, except where the f64 value is itself only
/// absolutely accurate, next to the root 1.4616...).
pub fn digamma_f32(x: f32) -> f32 {
    digamma(x as f64) as f32
}

/// The Hurwitz zeta function ζ(s, q) = Σ_{k>=0} (q + k)^-s for s > 1.
///
/// * q > 0: direct sum up to q + N >= s + 10 (stopping early once the
///   rest is below 1e-17 of the sum), then the Euler-Maclaurin tail with 12
///   Bernoulli terms (as Cephes' `zeta`). +inf gives 0.
/// * q < 0 (not an integer), integer s: the series still converges; split
///   at the sign change, with p = q - floor(q) in (0, 1),
///   ζ(s, q) = ζ(s, p) + (-1)^s (ζ(s, 1 - p) - ζ(s, 1 - q)),
///   which stays accurate for any |q| (absolutely where odd s cancel). Non-integer s gives NaN (complex).
/// * Poles q = 0, -1, -2, ...: +inf for even integer s, NaN otherwise (the
///   two sides have opposite signs), as JAX's `zeta`.
/// * s = 1 gives +inf, s < 1 NaN (the series diverges), NaN gives NaN,
///   q = -inf NaN.
pub fn hurwitz_zeta(s: f64, q: f64) -> f64 {
    if s.is_nan() || q.is_nan() || s < 1.0 || q == f64::NEG_INFINITY {
        return f64::NAN;
    }
    if s == 1.0 {
        return f64::INFINITY;
    }
    if q == f64::INFINITY {
        return 0.0;
    }
    if q > 0.0 {
        return zeta_pos(s, q);
    }
    if s != s.floor() {
        return f64::NAN;
    }
    let even = s % 2.0 == 0.0;
    if q == q.floor() {
        return if even { f64::INFINITY } else { f64::NAN };
    }
    // p and 1 - p, the latter as ceil(q) - q, exact (Sterbenz) where small.
    let (p, pc) = (q - q.floor(), q.ceil() - q);
    let (a, b, c) = (zeta_pos(s, p), zeta_pos(s, pc), zeta_pos(s, 1.0 - q));
    // c is the smallest: add it last (odd s: a - b may cancel, to ~c).
    if even {
        (a + b) - c
    } else {
        (a - b) + c
    }
}

/// ζ(s, q) for s > 1 and finite q > 0.
fn zeta_pos(s: f64, q: f64) -> f64 {
    let target = s + 10.0;
    let mut sum = 0.0;
    let mut a = q;
    while a < target {
        let t = a.powf(-s);
        sum += t;
        // The rest is below ∫_a^∞ x^-s dx = t a / (s - 1).
        if t * (a / (s - 1.0)) <= 1e-17 * sum {
            return sum;
        }
        a += 1.0;
    }
    let b = a.powf(-s);
    let mut tail = a.powf(1.0 - s) / (s - 1.0) + 0.5 * b;
    // fac = (s)_{2j-1} a^{-s-2j+1}, the (2j-1)-th derivative's size.
    let mut fac = s * b / a;
    for (j, &c) in ZETA_EM.iter().enumerate() {
        tail += c * fac;
        let k = 2.0 * j as f64 + 1.0;
        fac *= (s + k) * (s + k + 1.0) / (a * a);
    }
    sum + tail
}

/// The polygamma function ψ^(n)(x), the n-th derivative of [`digamma`]
/// (n = 0 is digamma itself), as ψ^(n)(x) = (-1)^(n+1) n! ζ(n + 1, x) with
/// [`hurwitz_zeta`], so negative non-integer x of any size are accurate.
///
/// Poles x = 0, -1, ...: +inf for odd n, NaN for even n (the sides differ
/// in sign), as JAX. x = +inf gives 0 (-0 for even n), the limit, where JAX
/// gives NaN; x = -inf gives NaN (no limit; JAX gives +inf for odd n).
/// Beyond n = 170, n! overflows f64 and the result is ±inf or 0.
pub fn polygamma(n: u32, x: f64) -> f64 {
    if n == 0 {
        return digamma(x);
    }
    let z = hurwitz_zeta(n as f64 + 1.0, x);
    let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
    if z == 0.0 || z.is_nan() {
        return sign * z;
    }
    let mut fact = 1.0;
    let mut k = 2;
    while k <= n && fact < f64::INFINITY {
        fact *= k as f64;
        k += 1;
    }
    sign * fact * z
}

/// [`polygamma`] of an f32, computed in f64 and rounded once.
pub fn polygamma_f32(n: u32, x: f32) -> f32 {
    polygamma(n, x as f64) as f32
}

/// Giles' single-precision coefficients for w < 5 (in `w - 2.5`), highest first.
#[allow(clippy::excessive_precision)]
pub const ERFINV_F32_CENTRAL: [f32; 9] = [
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
];

/// Giles' single-precision coefficients for w >= 5 (in `sqrt(w) - 3`).
#[allow(clippy::excessive_precision)]
pub const ERFINV_F32_TAIL: [f32; 9] = [
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
];

/// Giles' double-precision coefficients for w < 6.25 (in `w - 3.125`).
#[allow(clippy::excessive_precision)]
pub const ERFINV_F64_CENTRAL: [f64; 23] = [
    -3.6444120640178196996e-21,
    -1.685059138182016589e-19,
    1.2858480715256400167e-18,
    1.115787767802518096e-17,
    -1.333171662854620906e-16,
    2.0972767875968561637e-17,
    6.6376381343583238325e-15,
    -4.0545662729752068639e-14,
    -8.1519341976054721522e-14,
    2.6335093153082322977e-12,
    -1.2975133253453532498e-11,
    -5.4154120542946279317e-11,
    1.051212273321532285e-09,
    -4.1126339803469836976e-09,
    -2.9070369957882005086e-08,
    4.2347877827932403518e-07,
    -1.3654692000834678645e-06,
    -1.3882523362786468719e-05,
    0.0001867342080340571352,
    -0.00074070253416626697512,
    -0.0060336708714301490533,
    0.24015818242558961693,
    1.6536545626831027356,
];

/// For 6.25 <= w < 16 (in `sqrt(w) - 3.25`).
#[allow(clippy::excessive_precision)]
pub const ERFINV_F64_MID: [f64; 19] = [
    2.2137376921775787049e-09,
    9.0756561938885390979e-08,
    -2.7517406297064545428e-07,
    1.8239629214389227755e-08,
    1.5027403968909827627e-06,
    -4.013867526981545969e-06,
    2.9234449089955446044e-06,
    1.2475304481671778723e-05,
    -4.7318229009055733981e-05,
    6.8284851459573175448e-05,
    2.4031110387097893999e-05,
    -0.0003550375203628474796,
    0.00095328937973738049703,
    -0.0016882755560235047313,
    0.0024914420961078508066,
    -0.0037512085075692412107,
    0.005370914553590063617,
    1.0052589676941592334,
    3.0838856104922207635,
];

/// For w >= 16 (in `sqrt(w) - 5`).
#[allow(clippy::excessive_precision)]
pub const ERFINV_F64_TAIL: [f64; 17] = [
    -2.7109920616438573243e-11,
    -2.5556418169965252055e-10,
    1.5076572693500548083e-09,
    -3.7894654401267369937e-09,
    7.6157012080783393804e-09,
    -1.4960026627149240478e-08,
    2.9147953450901080826e-08,
    -6.7711997758452339498e-08,
    2.2900482228026654717e-07,
    -9.9298272942317002539e-07,
    4.5260625972231537039e-06,
    -1.9681778105531670567e-05,
    7.5995277030017761139e-05,
    -0.00021503011930044477347,
    -0.00013871931833623122026,
    1.0103004648645343977,
    4.8499064014085844221,
];

/// Horner's rule, coefficients highest first.
fn horner64(c: &[f64], t: f64) -> f64 {
    c.iter().fold(0.0, |p, &ci| p * t + ci)
}

/// The inverse error function: erfinv(erf(y)) = y.
///
/// M. Giles' double-precision approximation ("Approximating the erfinv
/// function", GPU Computing Gems, 2011; the polynomials XLA uses) in
/// w = -ln((1 - x)(1 + x)), the product form keeping w accurate as |x| -> 1.
/// erfinv(±1) = ±inf, NaN for |x| > 1 and NaN, odd (erfinv(-0) = -0).
pub fn erfinv(x: f64) -> f64 {
    let a = x.abs();
    if a.is_nan() || a > 1.0 {
        return f64::NAN;
    }
    if a == 1.0 {
        return f64::INFINITY.copysign(x);
    }
    let w = -((1.0 - x) * (1.0 + x)).ln();
    let p = if w < 6.25 {
        horner64(&ERFINV_F64_CENTRAL, w - 3.125)
    } else if w < 16.0 {
        horner64(&ERFINV_F64_MID, w.sqrt() - 3.25)
    } else {
        horner64(&ERFINV_F64_TAIL, w.sqrt() - 5.0)
    };
    p * x
}

/// [`erfinv`] of an f32 with Giles' single-precision polynomials, computed
/// in f32 (as XLA's f32 erfinv and CUDA's `erfinvf`).
pub fn erfinv_f32(x: f32) -> f32 {
    let a = x.abs();
    if a.is_nan() || a > 1.0 {
        return f32::NAN;
    }
    if a == 1.0 {
        return f32::INFINITY.copysign(x);
    }
    let w = -((1.0 - x) * (1.0 + x)).ln();
    let (c, t) = if w < 5.0 { (&ERFINV_F32_CENTRAL, w - 2.5) } else { (&ERFINV_F32_TAIL, w.sqrt() - 3.0) };
    c.iter().fold(0.0f32, |p, &ci| p * t + ci) * x
}

/// ln |Γ(x)| (`scipy.special.gammaln`, `lax.lgamma`) from the `libm`
/// crate: +inf at the poles 0, -1, -2, ... and at ±inf, NaN at NaN.
pub fn lgamma(x: f64) -> f64 {
    libm::lgamma(x)
}

/// ln |Γ(x)| of an f32, computed by [`lgamma`] in f64 and rounded once
/// (`libm::lgammaf` is 8 ulp off next to the zero at -2.457...).
pub fn lgamma_f32(x: f32) -> f32 {
    libm::lgamma(x as f64) as f32
}

/// CUDA C device functions `xf_digamma(T x)` and `xf_polygamma(int n, T x)`
/// for `T` = `double` (`double` true) or `float`, the algorithms of
/// [`digamma`] and [`polygamma`] (see NOTE: [special one algorithm, two
/// languages]). Both types compute in double (cores `xf_digamma_f64`,
/// `xf_hurwitz_zeta_f64`, `xf_polygamma_f64`) and `float` rounds once, as
/// [`digamma_f32`]. Negative `n` gives NaN. erfinv and lgamma need no
/// helper: CUDA has `erfinv(f)` and `lgamma(f)`.
///
/// Include guards make the float and double parts combinable in one
/// translation unit (C++ overloads); either alone is also valid C.
pub fn cuda_helpers(double: bool) -> String {
    let mut s = String::from(CUDA_CORE_HEAD);
    // Digamma's series by Horner's rule, highest coefficient first.
    let d = &DIGAMMA_ASYMP;
    let _ = writeln!(s, "    double p = {:e};", d[d.len() - 1]);
    for c in d.iter().rev().skip(1) {
        let _ = writeln!(s, "    p = p * z + {c:e};");
    }
    s.push_str(CUDA_CORE_MID);
    for (j, c) in ZETA_EM.iter().enumerate() {
        let k = 2 * j + 1;
        let _ = writeln!(s, "    tail += {c:e} * fac;\n    fac *= (s + {k}.0) * (s + {k}.0 + 1.0) / (a * a);");
    }
    s.push_str(CUDA_CORE_TAIL);
    let ty = if double { "double" } else { "float" };
    let _ = write!(
        s,
        "#ifndef XF_SPECIAL_{guard}\n#define XF_SPECIAL_{guard}\n\
static __device__ __forceinline__ {ty} xf_digamma({ty} x) {{ return ({ty})xf_digamma_f64((double)x); }}\n\
static __device__ __forceinline__ {ty} xf_polygamma(int n, {ty} x) {{ return ({ty})xf_polygamma_f64(n, (double)x); }}\n\
#endif\n",
        guard = ty.to_uppercase()
    );
    s
}

const CUDA_CORE_HEAD: &str = "#ifndef XF_SPECIAL_CORE
#define XF_SPECIAL_CORE
#ifdef HUGE_VAL
#define XF_INF_F64 HUGE_VAL
#else
#define XF_INF_F64 __longlong_as_double(0x7ff0000000000000LL)
#endif
static __device__ __forceinline__ double xf_digamma_pos_f64(double x) {
    double acc = 0.0;
    while (x < 10.0) {
        acc += 1.0 / x;
        x += 1.0;
    }
    double z = 1.0 / (x * x);
";

const CUDA_CORE_MID: &str = "    return log(x) - 0.5 / x - p * z - acc;
}
static __device__ __forceinline__ double xf_digamma_f64(double x) {
    const double pi = 3.141592653589793;
    if (x != x || x == -XF_INF_F64) return nan(\"\");
    if (x == XF_INF_F64) return XF_INF_F64;
    if (x <= 0.0 && x == floor(x)) return nan(\"\");
    if (x < 0.0) {
        double r = x - round(x);
        double cot = fabs(r) < 1e-8 ? 1.0 / r - pi * pi * r / 3.0 : pi / tan(pi * r);
        return xf_digamma_pos_f64(1.0 - x) - cot;
    }
    return xf_digamma_pos_f64(x);
}
static __device__ __forceinline__ double xf_zeta_pos_f64(double s, double q) {
    double target = s + 10.0;
    double sum = 0.0;
    double a = q;
    while (a < target) {
        double t = pow(a, -s);
        sum += t;
        if (t * (a / (s - 1.0)) <= 1e-17 * sum) return sum;
        a += 1.0;
    }
    double b = pow(a, -s);
    double tail = pow(a, 1.0 - s) / (s - 1.0) + 0.5 * b;
    double fac = s * b / a;
";

const CUDA_CORE_TAIL: &str = "    return sum + tail;
}
static __device__ __forceinline__ double xf_hurwitz_zeta_f64(double s, double q) {
    if (s != s || q != q || s < 1.0 || q == -XF_INF_F64) return nan(\"\");
    if (s == 1.0) return XF_INF_F64;
    if (q == XF_INF_F64) return 0.0;
    if (q > 0.0) return xf_zeta_pos_f64(s, q);
    if (s != floor(s)) return nan(\"\");
    int even = fmod(s, 2.0) == 0.0;
    if (q == floor(q)) return even ? XF_INF_F64 : nan(\"\");
    double p = q - floor(q), pc = ceil(q) - q;
    double a = xf_zeta_pos_f64(s, p), b = xf_zeta_pos_f64(s, pc), c = xf_zeta_pos_f64(s, 1.0 - q);
    return even ? (a + b) - c : (a - b) + c;
}
static __device__ __forceinline__ double xf_polygamma_f64(int n, double x) {
    if (n < 0) return nan(\"\");
    if (n == 0) return xf_digamma_f64(x);
    double z = xf_hurwitz_zeta_f64((double)n + 1.0, x);
    double sign = n % 2 == 1 ? 1.0 : -1.0;
    if (z == 0.0 || z != z) return sign * z;
    double fact = 1.0;
    for (int k = 2; k <= n && fact < XF_INF_F64; ++k) fact *= (double)k;
    return sign * fact * z;
}
#endif
";

#[cfg(test)]
mod tests;
