//! Tests of the special functions against 60-digit mpmath values (mpmath
//! 1.3 in the JAX venv; scipy 1.17.1 deviates from mpmath by up to 6e-12 in
//! digamma and 7e-8 in polygamma at these points, so mpmath is the
//! reference), identities, special values, and the CUDA C source.

use super::*;

#[allow(clippy::excessive_precision)]
const DIGAMMA: &[(f64, f64)] = &[
    (0.5, -1.9635100260214235),
    (1.0, -0.5772156649015329),
    (1.4616321449683622, -9.241265521729427e-17),
    (1.46, -0.0015805619870834522),
    (1.47, 0.008066489011364869),
    (1.5, 0.03648997397857652),
    (2.0, 0.42278433509846713),
    (3.3, 1.0348224890596216),
    (9.99, 2.250700372831201),
    (10.0, 2.251752589066721),
    (10.5, 2.3030010342976865),
    (100.0, 4.600161852738087),
    (1000000.0, 13.815510057964191),
    (1000000000000000.0, 34.538776394910684),
    (1e+300, 690.7755278982137),
    (1e-300, -9.999999999999999e+299),
    (1e-08, -100000000.57721564),
    (0.25, -4.2274535333762655),
    (0.9, -0.7549269499470513),
    (7.0, 1.8727843350984672),
    (30.5, 3.401243668961661),
    (5e-05, -20000.577133421204),
    (-0.5, 0.03648997397857652),
    (-1.5, 0.7031566406452432),
    (-2.7, -1.1153471291406896),
    (-0.1, 9.245073050052948),
    (-1e-300, 9.999999999999999e+299),
    (-10.3, 4.662403493582087),
    (-1000000.3, 16.098012025764003),
    (-1000000000000000.5, 34.538776394910684),
    (-123.456, 5.256979172582265),
    (-0.999999, -999999.5771842643),
];
#[allow(clippy::excessive_precision)]
const POLYGAMMA: &[(u32, f64, f64)] = &[
    (1, 0.5, 4.934802200544679),
    (1, 1.0, 1.6449340668482264),
    (1, 1.5, 0.9348022005446793),
    (1, 2.5, 0.49035775610023485),
    (1, 7.25, 0.14787923315893217),
    (1, 15.0, 0.0689382278476838),
    (1, 1000.0, 0.0010005001666666333),
    (1, 1000000.0, 1.0000005000001667e-06),
    (1, 1e-05, 10000000001.644909),
    (1, -0.5, 8.934802200544679),
    (1, -1.5, 9.379246644989124),
    (1, -2.3, 14.725912160961292),
    (1, -0.01, 10001.669304101071),
    (1, -7.9, 103.23693140003948),
    (1, -1000000.3, 15.079412699597643),
    (1, -1000000000000000.5, 9.869604401089358),
    (2, 0.5, -16.82879664423432),
    (2, 1.0, -2.4041138063191885),
    (2, 1.5, -0.82879664423432),
    (2, 2.5, -0.2362040516417274),
    (2, 7.25, -0.02182895229519774),
    (2, 15.0, -0.004750602716551555),
    (2, 1000.0, -1.0010004999998333e-06),
    (2, 1000000.0, -1.0000010000005e-12),
    (2, 1e-05, -2000000000000002.0),
    (2, -0.5, -0.82879664423432),
    (2, -1.5, -0.2362040516417274),
    (2, -2.3, 68.71379252927031),
    (2, -0.01, 1999997.5296818325),
    (2, -7.9, -1998.6737828651746),
    (2, -1000000.3, 68.83754367872378),
    (2, -1000000000000000.5, -9.99999999999998e-31),
    (3, 0.5, 97.40909103400244),
    (3, 1.0, 6.493939402266829),
    (3, 1.5, 1.4090910340024372),
    (3, 2.5, 0.22390584881725206),
    (3, 7.25, 0.0064330375979401565),
    (3, 15.0, 0.0006544797782827373),
    (3, 1000.0, 2.003001999999e-09),
    (3, 1000000.0, 2.000003000002e-18),
    (3, 1e-05, 5.999999999999999e+20),
    (3, -0.5, 193.40909103400244),
    (3, -1.5, 194.59427621918763),
    (3, -2.3, 768.9350646661422),
    (3, -0.01, 600000006.7490292),
    (3, -7.9, 60014.24854014009),
    (3, -1000000.3, 769.020913879981),
    (3, -1000000000000000.5, 194.8181820680049),
    (4, 0.5, -771.4742498266672),
    (4, 1.0, -24.88626612344088),
    (4, 1.5, -3.4742498266672253),
    (4, 2.5, -0.3137559995067314),
    (4, 7.25, -0.0028387579634221853),
    (4, 15.0, -0.00013519619187519276),
    (4, 1000.0, -6.0120099999930004e-12),
    (4, 1000000.0, -6.00001200001e-24),
    (4, 1e-05, -2.399999999999999e+26),
    (4, -0.5, -3.4742498266672253),
    (4, -1.5, -0.3137559995067314),
    (4, -2.3, 9738.671736569251),
    (4, -0.01, 239999999973.85574),
    (4, -7.9, -2399973.835948204),
    (4, -1000000.3, 9738.76029413981),
    (4, -35.6, -2037.3985450893442),
    (7, 0.5, 1290440.218185598),
    (7, 1.0, 5060.54987523764),
    (7, 1.5, 200.21818559806496),
    (7, 2.5, 3.565236352523131),
    (7, 7.25, 0.0010730756065806684),
    (7, 15.0, 5.2840831298028196e-06),
    (7, 1000.0, 7.2252335999496e-19),
    (7, 1000000.0, 7.2000252000336e-40),
    (7, 1e-05, 5.039999999999997e+43),
    (7, -0.5, 2580680.218185598),
    (7, -1.5, 2580876.8711348437),
    (7, -2.3, 76905683.92058922),
    (7, -0.01, 5.04e+19),
    (7, -7.9, 504000014104.2119),
    (7, -1000000.3, 76905684.23787186),
    (7, -35.6, 7990964.664584027),
    (12, 0.5, -3923983571677.6094),
    (12, 1.0, -479060379.8898314),
    (12, 1.5, -2464477.6094268286),
    (12, 2.5, -3256.697980402698),
    (12, 7.25, -0.0038994915353453554),
    (12, 15.0, -4.482203061279089e-07),
    (12, 1000.0, -4.01568197165838e-29),
    (12, 1000000.0, -3.9917039501318915e-65),
    (12, 1e-05, -4.7900159999999946e+73),
    (12, -0.5, -2464477.6094268286),
    (12, -1.5, -3256.697980402698),
    (12, -2.3, 3004370635081333.5),
    (12, -0.01, 4.790015999999999e+34),
    (12, -7.9, -4.790015999998475e+21),
    (12, -1000000.3, 3004370629018842.0),
    (12, -35.6, -71010055016664.19),
];
#[allow(clippy::excessive_precision)]
const ZETA: &[(f64, f64, f64)] = &[
    (2.0, 1.0, 1.6449340668482264),
    (3.0, 0.5, 8.41439832211716),
    (2.5, 0.1, 317.3277936562428),
    (1.5, 3.0, 1.2588219580922146),
    (10.0, 0.3, 169350.9508709071),
    (50.0, 2.0, 8.881784210930816e-16),
    (200.0, 1.5, 6.049899898193749e-36),
    (1.0001, 1.0, 10000.577222947539),
    (4.0, 100000000.0, 3.333333383333334e-25),
    (2.0, -0.5, 8.934802200544679),
    (3.0, -2.25, -61.94847488703008),
    (6.0, -100.7, 1380.5014537781128),
    (2.0, 1e+300, 1e-300),
];
#[allow(clippy::excessive_precision)]
const ERFINV: &[(f64, f64)] = &[
    (0.0, 0.0),
    (1e-300, 8.86226925452758e-301),
    (1e-10, 8.862269254527581e-11),
    (1e-05, 8.862269254759594e-06),
    (0.001, 0.0008862271574665521),
    (0.1, 0.08885599049425769),
    (0.25, 0.2253120550121781),
    (0.5, 0.4769362762044699),
    (0.6, 0.5951160814499948),
    (0.75, 0.8134198475976185),
    (0.9, 1.1630871536766743),
    (0.95, 1.3859038243496777),
    (0.99, 1.8213863677184494),
    (0.999, 2.3267537655135246),
    (0.9999, 2.75106390571208),
    (0.99999, 3.123413274341571),
    (0.99999999, 4.052237243268763),
    (0.999999999999, 5.042031898572696),
    (0.9999999999999998, 5.805018683193453),
    (0.9999999999999999, 5.8635847487551676),
    (-0.3, -0.2724627147267543),
    (-0.8, -0.9061938024368233),
    (-0.999999, -3.458910737275499),
    (0.3333, 0.30453778217181826),
    (0.123456789, 0.10985100172334483),
    (0.9990234375, 2.331467773621948),
    (0.8427007929497149, 1.0),
    (0.99999999, 4.052237243268763),
];
#[allow(clippy::excessive_precision)]
const ERFINV32: &[(f64, f64)] = &[
    (0.0, 0.0),
    (0.0, 0.0),
    (1.000000013351432e-10, 8.862269372851566e-11),
    (9.999999747378752e-06, 8.862269030879841e-06),
    (0.0010000000474974513, 0.0008862271995601054),
    (0.10000000149011612, 0.08885599182530649),
    (0.25, 0.2253120550121781),
    (0.5, 0.4769362762044699),
    (0.6000000238418579, 0.5951161115589819),
    (0.75, 0.8134198475976185),
    (0.8999999761581421, 1.1630870719457722),
    (0.949999988079071, 1.385903752236077),
    (0.9900000095367432, 1.8213866009002777),
    (0.9990000128746033, 2.3267563267961546),
    (0.9998999834060669, 2.7510354379032873),
    (0.9999899864196777, 3.123205771165071),
    (-0.30000001192092896, -0.2724627261055238),
    (-0.800000011920929, -0.9061938264523502),
    (-0.9999989867210388, -3.45707472603595),
    (0.33329999446868896, 0.3045377767934454),
    (0.12345679104328156, 0.10985100355613983),
    (0.9990234375, 2.331467773621948),
    (0.8427007794380188, 0.9999999674501286),
    (0.699999988079071, 0.7328690598827589),
    (0.8500000238418579, 1.0179025243802249),
    (0.9700000286102295, 1.5344858888791884),
    (0.9999998807907104, 3.7439211627767994),
    (0.9999999403953552, 3.832506856900711),
    (9.999999350456404e-39, 8.862268678884556e-39),
    (0.0005000000237487257, 0.0004431135127748556),
];
#[allow(clippy::excessive_precision)]
const LGAMMA: &[(f64, f64)] = &[
    (0.5, 0.5723649429247001),
    (1.0, 0.0),
    (2.0, 0.0),
    (1.5, -0.12078223763524522),
    (2.5, 0.2846828704729192),
    (3.7, 1.428072326665388),
    (10.0, 12.801827480081469),
    (100.5, 361.4355404677776),
    (1000000.0, 12815504.569147611),
    (1000000000000000.0, 3.3538776394910668e+16),
    (1e+300, 6.897755278982137e+302),
    (1e-300, 690.7755278982137),
    (1e-08, 18.42068073818021),
    (-0.5, 1.2655121234846454),
    (-1.5, 0.860047015376481),
    (-2.5, -0.056243716497674054),
    (-2.4570247, 5.792758455100296e-08),
    (-0.1, 2.3689613327287886),
    (-10.3, -14.457515440024208),
    (-100.7, -365.61225576180533),
    (-1e-08, 18.42068074972452),
    (0.999, 0.0005780385328913802),
    (1.001, -0.0005763935982833062),
    (1.999, -0.0004224618006921073),
    (2.001, 0.000423106734800117),
    (171.6, 709.6573587630563),
    (1e+305, 7.012884533631839e+307),
];
#[allow(clippy::excessive_precision)]
const DIGAMMA32: &[(f64, f64)] = &[
    (0.5, -1.9635100260214235),
    (1.0, -0.5772156649015329),
    (1.4616321325302124, -1.203605254910667e-08),
    (1.4600000381469727, -0.0015805250181043615),
    (1.4700000286102295, 0.008066516486231664),
    (1.5, 0.03648997397857652),
    (2.0, 0.42278433509846713),
    (3.299999952316284, 1.0348224722033545),
    (9.989999771118164, 2.250700348735219),
    (10.0, 2.251752589066721),
    (10.5, 2.3030010342976865),
    (100.0, 4.600161852738087),
    (1000000.0, 13.815510057964191),
    (999999986991104.0, 34.53877638190179),
    (9.99999993922529e-09, -100000001.18496275),
    (0.25, -4.2274535333762655),
    (0.8999999761581421, -0.7549269957839768),
    (7.0, 1.8727843350984672),
    (30.5, 3.401243668961661),
    (4.999999873689376e-05, -20000.577638663715),
    (-0.5, 0.03648997397857652),
    (-1.5, 0.7031566406452432),
    (-2.700000047683716, -1.115347833399486),
    (-0.10000000149011612, 9.24507289817653),
    (-10.300000190734863, 4.662400635061494),
    (-1000000.3125, 15.91465647063689),
    (-123.45600128173828, 5.256966287851885),
    (-0.9999989867210388, -986894.6360365143),
];

/// |got - want| / |want| (0 when both are equal, including infinities).
fn rel(got: f64, want: f64) -> f64 {
    if got == want {
        0.0
    } else {
        ((got - want) / want).abs()
    }
}

/// Distance in f32 ulps (u32::MAX if one is NaN or the signs differ).
fn ulps32(a: f32, b: f32) -> u32 {
    if a == b {
        return 0;
    }
    if a.is_nan() || b.is_nan() || a.is_sign_negative() != b.is_sign_negative() {
        return u32::MAX;
    }
    a.to_bits().abs_diff(b.to_bits())
}

/// Distance in f64 ulps (u64::MAX if one is NaN or the signs differ); NaN == NaN.
fn ulps64(a: f64, b: f64) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() || a.is_sign_negative() != b.is_sign_negative() {
        return u64::MAX;
    }
    a.to_bits().abs_diff(b.to_bits())
}

#[test]
fn special_digamma_matches_mpmath() {
    // Relative 4e-15 where |ψ| >= 0.5, else absolute 1e-15 (near the root
    // 1.4616... and its reflections such as ψ(-0.5) = 0.036).
    let (mut worst_rel, mut worst_abs) = (0.0f64, 0.0f64);
    for &(x, want) in DIGAMMA {
        let got = digamma(x);
        if want.abs() < 0.5 {
            worst_abs = worst_abs.max((got - want).abs());
        } else {
            worst_rel = worst_rel.max(rel(got, want));
        }
    }
    println!("digamma: max rel {worst_rel:e}, max abs near the root {worst_abs:e}");
    assert!(worst_rel <= 4e-15, "{worst_rel:e}");
    assert!(worst_abs <= 1e-15, "{worst_abs:e}");
}

#[test]
fn special_digamma_f32_within_one_ulp() {
    let worst = DIGAMMA32.iter().map(|&(x, want)| ulps32(digamma_f32(x as f32), want as f32)).max().unwrap();
    println!("digamma_f32: max {worst} ulp");
    assert!(worst <= 1, "{worst}");
}

#[test]
fn special_digamma_edges() {
    for x in [0.0, -0.0, -1.0, -2.0, -1e20, f64::NEG_INFINITY, f64::NAN] {
        assert!(digamma(x).is_nan(), "digamma({x})");
        assert!(digamma_f32(x as f32).is_nan(), "digamma_f32({x})");
    }
    assert_eq!(digamma(f64::INFINITY), f64::INFINITY);
    assert_eq!(digamma_f32(f32::INFINITY), f32::INFINITY);
    // Subnormal and tiny arguments: ψ(x) ~ -1/x, overflowing below 1/f64::MAX.
    assert_eq!(digamma(1e-320), f64::NEG_INFINITY);
    assert_eq!(digamma(-1e-320), f64::INFINITY);
    assert!(rel(digamma(-1e-308), 1e308) < 1e-15);
}

#[test]
fn special_polygamma_matches_mpmath() {
    let mut worst = 0.0f64;
    for &(n, x, want) in POLYGAMMA {
        let e = rel(polygamma(n, x), want);
        assert!(e <= 1e-14, "polygamma({n}, {x}) = {} want {want}: {e:e}", polygamma(n, x));
        worst = worst.max(e);
        let (g32, w32) = (polygamma_f32(n, x as f32), polygamma(n, (x as f32) as f64) as f32);
        assert!(g32 == w32 || (g32.is_nan() && w32.is_nan()));
    }
    println!("polygamma: max rel {worst:e}");
}

#[test]
fn special_polygamma_edges() {
    for x in [0.0, -1.0, -7.0] {
        assert_eq!(polygamma(1, x), f64::INFINITY);
        assert_eq!(polygamma(3, x), f64::INFINITY);
        assert!(polygamma(2, x).is_nan());
        assert!(polygamma_f32(4, x as f32).is_nan());
    }
    assert_eq!(polygamma(1, f64::INFINITY).to_bits(), 0.0f64.to_bits());
    assert_eq!(polygamma(2, f64::INFINITY).to_bits(), (-0.0f64).to_bits());
    for n in [1, 2] {
        assert!(polygamma(n, f64::NEG_INFINITY).is_nan());
        assert!(polygamma(n, f64::NAN).is_nan());
    }
    assert_eq!(polygamma(0, 2.5), digamma(2.5));
    assert_eq!(polygamma(1, 1e-300), f64::INFINITY);
    // n! overflows past 170 and huge n never loop long.
    assert_eq!(polygamma(171, 0.5), f64::INFINITY);
    assert_eq!(polygamma(u32::MAX, 2.0), 0.0);
    assert_eq!(polygamma(u32::MAX - 1, 1.0), f64::NEG_INFINITY);
}

#[test]
fn special_hurwitz_zeta_matches_mpmath() {
    let mut worst = 0.0f64;
    for &(s, q, want) in ZETA {
        let e = rel(hurwitz_zeta(s, q), want);
        assert!(e <= 1e-14, "zeta({s}, {q}) = {} want {want}: {e:e}", hurwitz_zeta(s, q));
        worst = worst.max(e);
    }
    println!("hurwitz_zeta: max rel {worst:e}");
    assert_eq!(hurwitz_zeta(1.0, 2.0), f64::INFINITY);
    assert_eq!(hurwitz_zeta(2.0, -3.0), f64::INFINITY);
    assert_eq!(hurwitz_zeta(2.0, f64::INFINITY), 0.0);
    for (s, q) in [(0.5, 1.0), (3.0, -3.0), (2.5, -0.5), (2.5, 0.0), (2.0, f64::NEG_INFINITY), (f64::NAN, 1.0)] {
        assert!(hurwitz_zeta(s, q).is_nan(), "zeta({s}, {q})");
    }
}

#[test]
fn special_recurrences_hold() {
    // ψ(x+1) = ψ(x) + 1/x and ψ^(n)(x+1) = ψ^(n)(x) + (-1)^n n!/x^(n+1),
    // relative to the largest term (8e-15).
    let mut worst = 0.0f64;
    for i in 0..200 {
        let x = -20.0 + 0.2137 * i as f64;
        let (l, r) = (digamma(x + 1.0), digamma(x) + 1.0 / x);
        let scale = l.abs().max(digamma(x).abs()).max(1.0 / x.abs());
        worst = worst.max((l - r).abs() / scale);
        for n in 1..=4u32 {
            let fact: f64 = (1..=n).map(f64::from).product();
            let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
            let term = sign * fact / x.powi(n as i32 + 1);
            let (a, b) = (polygamma(n, x + 1.0), polygamma(n, x));
            let scale = a.abs().max(b.abs()).max(term.abs());
            worst = worst.max((a - (b + term)).abs() / scale);
        }
    }
    println!("recurrences: max error {worst:e} of the largest term");
    assert!(worst <= 8e-15, "{worst:e}");
}

#[test]
fn special_erfinv_matches_mpmath() {
    let worst = ERFINV.iter().map(|&(x, want)| ulps64(erfinv(x), want)).max().unwrap();
    let worst32 = ERFINV32.iter().map(|&(x, want)| ulps32(erfinv_f32(x as f32), want as f32)).max().unwrap();
    println!("erfinv: max {worst} ulp (f64), {worst32} ulp (f32)");
    assert!(worst <= 4, "{worst}");
    assert!(worst32 <= 4, "{worst32}");
    // Odd, with ±1 -> ±inf and NaN outside [-1, 1].
    for &(x, _) in ERFINV {
        assert_eq!(erfinv(-x).to_bits(), (-erfinv(x)).to_bits());
    }
    assert_eq!(erfinv(1.0), f64::INFINITY);
    assert_eq!(erfinv(-1.0), f64::NEG_INFINITY);
    assert_eq!(erfinv_f32(-1.0), f32::NEG_INFINITY);
    assert_eq!(erfinv(-0.0).to_bits(), (-0.0f64).to_bits());
    for x in [1.5, -1.0000001, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
        assert!(erfinv(x).is_nan() && erfinv_f32(x as f32).is_nan(), "erfinv({x})");
    }
}

#[test]
fn special_lgamma_matches_mpmath() {
    // Relative 4e-15 or absolute 1e-15 (libm's lgamma is only absolutely
    // accurate next to its zeros 1, 2, -2.457...).
    let (mut worst, mut worst_abs) = (0.0f64, 0.0f64);
    for &(x, want) in LGAMMA {
        let d = (lgamma(x) - want).abs();
        assert!(d <= (4e-15 * want.abs()).max(1e-15), "lgamma({x}) = {} want {want}", lgamma(x));
        if want.abs() >= 0.25 {
            worst = worst.max(rel(lgamma(x), want));
        } else {
            worst_abs = worst_abs.max(d);
        }
        let x32 = x as f32;
        assert_eq!(lgamma_f32(x32), lgamma(x32 as f64) as f32, "lgamma_f32({x32})");
    }
    println!("lgamma: max rel {worst:e} where |lgamma| >= 0.25, else max abs {worst_abs:e}");
    for x in [0.0, -0.0, -1.0, -3.0, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(lgamma(x), f64::INFINITY, "lgamma({x})");
        assert_eq!(lgamma_f32(x as f32), f32::INFINITY, "lgamma_f32({x})");
    }
    assert!(lgamma(f64::NAN).is_nan() && lgamma_f32(f32::NAN).is_nan());
}

/// (x, scipy.special.erfc(x)) from scipy 1.17.1, the tails included (where
/// `1 - erf(x)` is 0 or all rounding).
#[allow(clippy::excessive_precision)]
const ERFC: &[(f64, f64)] = &[
    (-3.0, 1.9999779095030015),
    (-0.3, 1.3286267594591274),
    (0.0, 1.0),
    (0.3, 0.6713732405408726),
    (1.0, 0.15729920705028516),
    (5.0, 1.5374597944280347e-12),
    (10.0, 2.0884875837625446e-45),
    (15.0, 7.212994172451209e-100),
    (26.5, 2.2109076642637343e-307),
];

#[test]
fn special_erfc_keeps_its_tail() {
    for &(x, want) in ERFC {
        assert!(rel(erfc(x), want) <= 4e-15, "erfc({x}) = {}, scipy {want}", erfc(x));
        // the f32 version rounds the f64 value once
        assert_eq!(erfc_f32(x as f32), erfc(x) as f32, "erfc_f32({x})");
    }
    assert!(erfc(10.0) > 0.0 && erfc_f32(10.0) > 0.0, "not flushed to 0");
    assert_eq!((erfc(f64::INFINITY), erfc(f64::NEG_INFINITY)), (0.0, 2.0));
    assert!(erfc(f64::NAN).is_nan() && erfc_f32(f32::NAN).is_nan());
    // ln(erfc) where erfc itself underflows
    assert!(log_erfc(40.0).is_finite() && erfc(40.0) == 0.0);
    assert!(rel(erfcx(10.0) * (-100f64).exp(), erfc(10.0)) < 1e-13);
}

/// Points where the C and Rust versions are compared.
fn c_points() -> Vec<f64> {
    let mut xs: Vec<f64> = DIGAMMA.iter().map(|p| p.0).collect();
    xs.extend([0.0, -3.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-320, -1e-309, 0.3, 12.5]);
    xs
}

/// Compiles `helpers` with gcc as C (device qualifiers defined away) and a
/// `main` printing digamma and polygamma (n = 0..=5) of `ty` at
/// [`c_points`]; returns the printed numbers, or None without gcc.
fn run_c(helpers: &str, ty: &str) -> Option<Vec<f64>> {
    let dir = std::env::temp_dir().join(format!("xform_special_{}_{ty}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let list: Vec<String> =
        c_points().iter().map(|x| format!("{x:e}").replace("inf", "HUGE_VAL").replace("NaN", "NAN")).collect();
    let fmt = if ty == "double" { "%.17g" } else { "%.9g" };
    let src = format!(
        "#include <math.h>\n#include <stdio.h>\n#define __device__\n#define __forceinline__ inline\n{helpers}\n\
         int main(void) {{\n    const double xs[] = {{{}}};\n    for (unsigned i = 0; i < sizeof xs / sizeof xs[0]; ++i) {{\n\
         {ty} x = ({ty})xs[i];\n        printf(\"{fmt}\\n\", (double)xf_digamma(x));\n\
         for (int n = 0; n <= 5; ++n) printf(\"{fmt}\\n\", (double)xf_polygamma(n, x));\n    }}\n    return 0;\n}}\n",
        list.join(", ")
    );
    let (c, exe) = (dir.join("special.c"), dir.join("special"));
    std::fs::write(&c, src).ok()?;
    let status = std::process::Command::new("gcc")
        .args(["-std=c99", "-O0", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-x", "c"])
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .arg("-lm")
        .status();
    let status = match status {
        Ok(s) => s,
        Err(_) => {
            println!("gcc not found: the C check of cuda_helpers was skipped");
            return None;
        }
    };
    assert!(status.success(), "gcc rejected the {ty} helpers");
    let out = std::process::Command::new(&exe).output().expect("run the compiled C");
    let _ = std::fs::remove_dir_all(&dir);
    Some(String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().parse::<f64>().expect("a number")).collect())
}

#[test]
fn special_cuda_source_matches_cpu_under_gcc() {
    let Some(c64) = run_c(&cuda_helpers(true), "double") else { return };
    let Some(c32) = run_c(&cuda_helpers(false), "float") else { return };
    let (mut i, mut worst64, mut worst32) = (0, 0u64, 0u32);
    for x in c_points() {
        let want64 = std::iter::once(digamma(x)).chain((0..=5).map(|n| polygamma(n, x)));
        let xf = x as f32;
        let want32 = std::iter::once(digamma_f32(xf)).chain((0..=5).map(|n| polygamma_f32(n, xf)));
        for (w64, w32) in want64.zip(want32) {
            let (g64, g32) = (c64[i], c32[i] as f32);
            worst64 = worst64.max(ulps64(g64, w64));
            let d32 = if g32.is_nan() && w32.is_nan() { 0 } else { ulps32(g32, w32) };
            worst32 = worst32.max(d32);
            assert!(ulps64(g64, w64) <= 2 && d32 <= 1, "x = {x}: C {g64} / {g32}, Rust {w64} / {w32}");
            i += 1;
        }
    }
    println!("C vs Rust: max {worst64} ulp (double), {worst32} ulp (float)");
    // Both parts together are valid C++ (overloads, one core).
    let both = format!(
        "#include <cmath>\n#define __device__\n#define __forceinline__ inline\n{}{}",
        cuda_helpers(false),
        cuda_helpers(true)
    );
    let cpp = std::env::temp_dir().join(format!("xform_special_{}.cpp", std::process::id()));
    std::fs::write(&cpp, both).expect("write the C++ check");
    if let Ok(s) =
        std::process::Command::new("g++").args(["-fsyntax-only", "-Wall", "-Werror", "-x", "c++"]).arg(&cpp).status()
    {
        assert!(s.success(), "g++ rejected the combined helpers");
    }
    let _ = std::fs::remove_file(&cpp);
}

#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs libnvrtc; run with --include-ignored where it is installed"]
fn special_nvrtc_compiles_helpers() {
    use crate::cuda::compile::{compile_ptx, DEFAULT_ARCH};
    use crate::cuda::source::map_kernel;
    use crate::cuda::MapOp;
    use crate::DType;
    assert!(crate::cuda::nvrtc_available(), "libnvrtc not found: put it on LD_LIBRARY_PATH");
    for (d, double) in [(DType::F32, false), (DType::F64, true), (DType::F16, false)] {
        for (tag, expr) in [("digamma", "xf_digamma(x)"), ("polygamma", "xf_polygamma((int)x, y)")] {
            let helpers = cuda_helpers(double);
            let op = MapOp { tag: tag.into(), expr: expr.into(), helpers, raw: false, param: None };
            let ins: &[DType] = if tag == "digamma" { &[d] } else { &[d, d] };
            let k = map_kernel(&op, ins, d);
            if let Err(e) = compile_ptx(&k, DEFAULT_ARCH) {
                panic!("{tag} {d:?}: {e}");
            }
        }
    }
}
