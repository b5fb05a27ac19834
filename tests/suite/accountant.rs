//! The RDP accountant (`xform::dp::accountant`) against Opacus 1.6.0: a
//! table of epsilons and best orders, and of noise multipliers for target
//! epsilons, computed by Opacus's own accountant (tests/data/rdp, written by
//! scripts/opacus_rdp_table.py); the special functions against scipy; and
//! the errors.

use xform::dp::accountant::{
    epsilon, epsilon_and_order, erfc, erfcx, log_add, log_erfc, log_sub, noise_multiplier_for_epsilon,
    noise_multiplier_for_epsilon_within, Phase, RdpAccountant, DEFAULT_ORDERS,
};
use xform::ErrorKind;

const RDP_TABLE: &str = include_str!("../data/rdp/opacus_rdp.csv");
const NOISE_TABLE: &str = include_str!("../data/rdp/opacus_noise.csv");

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / b.abs()
    }
}

fn parse(s: &str) -> f64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// The rows of opacus_rdp.csv: (history, delta, epsilon, order).
fn rdp_rows() -> Vec<(Vec<Phase>, f64, f64, f64)> {
    let mut lines = RDP_TABLE.lines();
    assert_eq!(lines.next(), Some("history,delta,epsilon,order"));
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 4, "{line}");
            let history = f[0]
                .split(';')
                .map(|p| {
                    let v: Vec<&str> = p.split(':').collect();
                    Phase { noise_multiplier: parse(v[0]), sample_rate: parse(v[1]), steps: v[2].parse().unwrap() }
                })
                .collect();
            (history, parse(f[1]), parse(f[2]), parse(f[3]))
        })
        .collect()
}

#[test]
fn epsilon_and_best_order_match_opacus_table() {
    let rows = rdp_rows();
    assert!(rows.len() >= 250, "{} rows", rows.len());
    let mut worst = (0.0, String::new());
    for (history, delta, eps, order) in &rows {
        let mut acc = RdpAccountant::new();
        for p in history {
            acc.step_n(p.noise_multiplier, p.sample_rate, p.steps).unwrap();
        }
        assert_eq!(acc.history(), &history[..]);
        let got = acc.epsilon_and_order(*delta).unwrap();
        let case = format!("{history:?} delta {delta}: xform {got:?}, Opacus ({eps}, {order})");
        if eps.is_infinite() {
            assert_eq!(got.epsilon, *eps, "{case}");
        } else {
            let r = rel(got.epsilon, *eps);
            assert!(r <= 1e-6, "{case}: relative error {r:e}");
            if r > worst.0 {
                worst = (r, case.clone());
            }
        }
        assert_eq!(got.order, *order, "{case}");
        if let [p] = history[..] {
            let one = epsilon_and_order(p.sample_rate, p.noise_multiplier, p.steps, *delta).unwrap();
            assert_eq!(one, got, "{case}");
        }
    }
    // Measured: 1.9e-11, at 100000 steps (each step's RDP rounds a little
    // differently: scipy's log_ndtr and binom against ours).
    assert!(worst.0 <= 1e-10, "worst relative error {:e}: {}", worst.0, worst.1);
}

#[test]
fn noise_multiplier_search_matches_opacus() {
    let mut lines = NOISE_TABLE.lines();
    assert_eq!(lines.next(), Some("target_epsilon,q,steps,delta,sigma"));
    let mut n = 0;
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let (target, q, steps, delta, opacus) =
            (parse(f[0]), parse(f[1]), f[2].parse().unwrap(), parse(f[3]), parse(f[4]));
        let sigma = noise_multiplier_for_epsilon(target, q, steps, delta).unwrap();
        let eps = epsilon(q, sigma, steps, delta).unwrap();
        assert!(rel(eps, target) <= 1e-6 && eps <= target, "{line}: sigma {sigma} gives {eps}");
        // Slightly less noise misses the target: sigma is the smallest.
        assert!(epsilon(q, sigma * (1.0 - 1e-9), steps, delta).unwrap() > target, "{line}");
        // Opacus stops within its tolerance (0.01) below the target.
        let eps_opacus = epsilon(q, opacus, steps, delta).unwrap();
        assert!(eps_opacus <= target && eps_opacus >= target - 0.01, "{line}: Opacus's sigma gives {eps_opacus}");
        assert!(opacus >= sigma, "{line}: {opacus} < {sigma}");
        // Opacus's own search, step for step.
        let coarse = noise_multiplier_for_epsilon_within(target, q, steps, delta, 0.01).unwrap();
        assert_eq!(coarse, opacus, "{line}");
        n += 1;
    }
    assert_eq!(n, 12);
}

#[test]
fn merged_history_is_one_call() {
    let mut acc = RdpAccountant::default();
    for _ in 0..1000 {
        acc.step(1.1, 0.004).unwrap();
    }
    assert_eq!(acc.history(), &[Phase { noise_multiplier: 1.1, sample_rate: 0.004, steps: 1000 }]);
    assert_eq!(acc.epsilon_and_order(1e-5).unwrap(), epsilon_and_order(0.004, 1.1, 1000, 1e-5).unwrap());
    assert_eq!(acc.epsilon(1e-6).unwrap(), epsilon(0.004, 1.1, 1000, 1e-6).unwrap());

    // Only consecutive equal steps merge, as in Opacus.
    let mut acc = RdpAccountant::new();
    acc.step(1.0, 0.01).unwrap();
    acc.step(1.0, 0.01).unwrap();
    acc.step(2.0, 0.01).unwrap();
    acc.step(1.0, 0.01).unwrap();
    acc.step_n(1.0, 0.01, 0).unwrap();
    let steps: Vec<(f64, u64)> = acc.history().iter().map(|p| (p.noise_multiplier, p.steps)).collect();
    assert_eq!(steps, [(1.0, 2), (2.0, 1), (1.0, 1)]);
    // Phases add in RDP, so the order of phases does not change epsilon.
    let mut swapped = RdpAccountant::new();
    swapped.step(2.0, 0.01).unwrap();
    swapped.step_n(1.0, 0.01, 3).unwrap();
    assert!(rel(swapped.epsilon(1e-5).unwrap(), acc.epsilon(1e-5).unwrap()) < 1e-14);
}

#[test]
fn edge_cases() {
    // No steps: nothing spent (Opacus returns (0, 0)).
    let spent = RdpAccountant::new().epsilon_and_order(1e-5).unwrap();
    assert_eq!((spent.epsilon, spent.order), (0.0, 0.0));
    // No noise: infinite epsilon, first order (as Opacus).
    let spent = epsilon_and_order(0.5, 0.0, 1, 1e-5).unwrap();
    assert_eq!((spent.epsilon, spent.order), (f64::INFINITY, 1.1));
    // No subsampling: the Gaussian mechanism, RDP(alpha) = T alpha / (2 sigma^2).
    let (sigma, steps, delta) = (3.0f64, 50u64, 1e-6f64);
    let expect = DEFAULT_ORDERS
        .iter()
        .map(|&a| steps as f64 * a / (2.0 * sigma * sigma) - (delta.ln() + a.ln()) / (a - 1.0) + ((a - 1.0) / a).ln())
        .fold(f64::INFINITY, f64::min);
    assert!(rel(epsilon(1.0, sigma, steps, delta).unwrap(), expect) < 1e-14);
    // Nothing sampled: only the conversion's floor, at the largest order;
    // so no noise is needed for a target above it.
    let spent = epsilon_and_order(0.0, 1.0, 10, 1e-5).unwrap();
    assert_eq!(spent.order, 63.0);
    assert!(rel(spent.epsilon, 0.10286725121127971) < 1e-12);
    assert_eq!(noise_multiplier_for_epsilon(1.0, 0.0, 10, 1e-5).unwrap(), 0.0);
    // Epsilon falls as the noise grows, and grows with steps and sample rate.
    let e = |q: f64, s: f64, t: u64| epsilon(q, s, t, 1e-5).unwrap();
    assert!(e(0.01, 1.0, 100) > e(0.01, 1.5, 100));
    assert!(e(0.01, 1.0, 100) < e(0.01, 1.0, 200));
    assert!(e(0.01, 1.0, 100) < e(0.02, 1.0, 100));
}

#[test]
fn bad_input_errors_name_the_function_and_value() {
    let check = |r: xform::Result<f64>, op: &str, value: &str| {
        let e = r.expect_err("expected an error");
        assert!(matches!(e.kind, ErrorKind::Invalid { .. }), "{e}");
        assert_eq!(e.op, op);
        let s = e.to_string();
        assert!(s.starts_with(&format!("{op}: ")) && s.contains(value), "{s}");
    };
    check(epsilon(1.5, 1.0, 10, 1e-5), "epsilon", "sample_rate must be in [0, 1], got 1.5");
    check(epsilon(-0.1, 1.0, 10, 1e-5), "epsilon", "got -0.1");
    check(epsilon(f64::NAN, 1.0, 10, 1e-5), "epsilon", "sample_rate must be in [0, 1], got NaN");
    check(epsilon(0.1, -1.0, 10, 1e-5), "epsilon", "noise_multiplier must be finite and non-negative, got -1");
    check(epsilon(0.1, f64::INFINITY, 10, 1e-5), "epsilon", "got inf");
    check(epsilon(0.1, 1.0, 10, 0.0), "epsilon", "delta must be in (0, 1), got 0");
    check(epsilon(0.1, 1.0, 10, 1.0), "epsilon", "got 1");
    check(epsilon(0.1, 1.0, 10, f64::NAN), "epsilon", "got NaN");

    let op = "noise_multiplier_for_epsilon";
    check(noise_multiplier_for_epsilon(0.0, 0.01, 100, 1e-5), op, "target_epsilon must be positive and finite, got 0");
    check(noise_multiplier_for_epsilon(f64::INFINITY, 0.01, 100, 1e-5), op, "got inf");
    check(noise_multiplier_for_epsilon(1.0, 2.0, 100, 1e-5), op, "sample_rate must be in [0, 1], got 2");
    check(noise_multiplier_for_epsilon(1.0, 0.01, 100, -1e-5), op, "delta must be in (0, 1), got -0.00001");
    // Below the RDP-to-DP conversion's floor (0.1029 at delta 1e-5).
    check(noise_multiplier_for_epsilon(0.1, 0.01, 100, 1e-5), op, "target_epsilon 0.1 is unreachable");
    // Above the floor but past Opacus's largest sigma (1e6).
    check(noise_multiplier_for_epsilon(0.102867252, 1.0, 100, 1e-5), op, "needs a noise multiplier above 1000000");
    let op = "noise_multiplier_for_epsilon_within";
    check(noise_multiplier_for_epsilon_within(1.0, 0.01, 100, 1e-5, 0.0), op, "epsilon_tolerance must be positive");

    let mut acc = RdpAccountant::new();
    let r = acc.step(f64::NAN, 0.1).map(|_| 0.0);
    check(r, "RdpAccountant::step", "noise_multiplier must be finite and non-negative, got NaN");
    check(acc.step(1.0, 1.01).map(|_| 0.0), "RdpAccountant::step", "got 1.01");
    assert!(acc.history().is_empty());
    check(acc.epsilon(2.0), "RdpAccountant::epsilon", "delta must be in (0, 1), got 2");
}

/// (x, erfc(x), erfcx(x)) from scipy 1.17 (the JAX venv):
/// ```python
/// import scipy.special as sp
/// for x in xs: print((x, float(sp.erfc(x)), float(sp.erfcx(x))))
/// ```
// 0.7071 is near 1/sqrt(2) on purpose: scipy switches formulas there.
#[allow(clippy::approx_constant)]
const ERFC: [(f64, f64, f64); 25] = [
    (-6.0, 2.0, 8622463094230390.0),
    (-3.0, 1.9999779095030015, 16205.988853999586),
    (-1.5, 1.9661051464753108, 18.653886256262734),
    (-0.5, 1.5204998778130465, 1.952360489182557),
    (-0.46875, 1.4926134732179381, 1.859402416871422),
    (-0.1, 1.1124629160182848, 1.123643354199209),
    (0.0, 1.0, 1.0),
    (1e-10, 0.999999999887162, 0.9999999998871619),
    (0.1, 0.8875370839817152, 0.8964569799691268),
    (0.3, 0.6713732405408726, 0.7345993345676554),
    (0.46875, 0.507386526782062, 0.632069689249556),
    (0.47, 0.5062549491139179, 0.6314005166600344),
    (0.5, 0.4795001221869535, 0.6156903441929258),
    (0.7071, 0.31731514890591805, 0.5231592183956041),
    (1.0, 0.15729920705028516, 0.427583576155807),
    (1.5, 0.03389485352468927, 0.3215854164543176),
    (2.0, 0.004677734981047266, 0.2553956763105058),
    (3.0, 2.2090496998585445e-05, 0.17900115118138998),
    (3.99, 1.6739211364520824e-08, 0.1373240409142297),
    (4.0, 1.541725790028002e-08, 0.1369994576250614),
    (4.01, 1.4196939421371057e-08, 0.13667636742994915),
    (5.0, 1.5374597944280347e-12, 0.11070463773306861),
    (8.0, 1.1224297172982928e-29, 0.06998516620088094),
    (15.0, 7.212994172451209e-100, 0.03752960638850577),
    (26.0, 5.663192408856145e-296, 0.02168358485056291),
];

#[test]
fn erfc_and_erfcx_match_scipy() {
    let mut worst: f64 = 0.0;
    for (x, c, cx) in ERFC {
        let (r, rx) = (rel(erfc(x), c), rel(erfcx(x), cx));
        assert!(r <= 2e-15 && rx <= 2e-15, "x = {x}: erfc {} ({r:e}), erfcx {} ({rx:e})", erfc(x), erfcx(x));
        worst = worst.max(r).max(rx);
    }
    assert!(worst <= 2e-15, "{worst:e}");
    assert_eq!(erfc(f64::INFINITY), 0.0);
    assert_eq!(erfc(f64::NEG_INFINITY), 2.0);
    assert_eq!(erfcx(f64::NEG_INFINITY), f64::INFINITY);
    assert!(erfc(f64::NAN).is_nan() && erfcx(f64::NAN).is_nan() && log_erfc(f64::NAN).is_nan());
}

/// (x, ln(erfc(x))) as Opacus computes it (`_log_erfc`), scipy 1.17:
/// ```python
/// import math, scipy.special as sp
/// for x in xs: print((x, float(math.log(2) + sp.log_ndtr(-x * 2**0.5))))
/// ```
#[allow(clippy::approx_constant)] // ln(erfc(-30)) is ln 2 in f64
const LOG_ERFC: [(f64, f64); 12] = [
    (-30.0, 0.6931471805599453),
    (-2.0, 0.6908055736465877),
    (0.0, 0.0),
    (0.5, -0.7350111298370848),
    (1.0, -1.849605509933249),
    (2.0, -5.36494126461664),
    (5.0, -27.200889545537446),
    (10.0, -102.87988902484493),
    (30.0, -903.9741171106442),
    (100.0, -10005.177585122668),
    (1000.0, -1000007.4801207221),
    (100000.0, -10000000012.085293),
];

#[test]
fn log_erfc_matches_scipy() {
    for (x, want) in LOG_ERFC {
        let got = log_erfc(x);
        if want == 0.0 {
            assert_eq!(got, 0.0);
        } else {
            assert!(rel(got, want) <= 2e-15, "x = {x}: {got} vs {want} ({:e})", rel(got, want));
        }
    }
    assert_eq!(log_erfc(f64::INFINITY), f64::NEG_INFINITY);
}

#[test]
fn log_space_add_and_sub() {
    // ln(e^a + e^b) and ln(e^a - e^b), checked against direct sums where
    // those do not overflow, and at scales where they would.
    for (a, b) in [(0.0f64, 0.0f64), (1.0, -2.0), (-3.5, 2.25), (-700.0, -701.0), (30.0, -30.0)] {
        let sum = (a.exp() + b.exp()).ln();
        assert!((log_add(a, b) - sum).abs() <= 4e-16 * sum.abs().max(1.0), "{a} {b}");
        if a > b {
            let diff = (a.exp() - b.exp()).ln();
            assert!((log_sub(a, b) - diff).abs() <= 4e-16 * diff.abs().max(1.0), "{a} {b}");
        }
    }
    assert!((log_add(1e4, 1e4) - (1e4 + std::f64::consts::LN_2)).abs() <= 4e-12);
    assert!((log_sub(1e4 + std::f64::consts::LN_2, 1e4) - 1e4).abs() <= 4e-12);
    assert_eq!(log_add(f64::NEG_INFINITY, f64::NEG_INFINITY), f64::NEG_INFINITY);
    assert_eq!(log_sub(7.0, f64::NEG_INFINITY), 7.0);
    assert_eq!(log_sub(7.0, 7.0), f64::NEG_INFINITY);
    // e^(x - y) overflows: ln(e^x - e^y) = x to within rounding (Opacus: x).
    assert_eq!(log_sub(1000.0, -1000.0), 1000.0);
    assert!(log_sub(1.0, 2.0).is_nan()); // negative: Opacus raises ValueError
    assert!(log_add(f64::NAN, 0.0).is_nan());
}
