//! scan: eager (forward, reverse, empty, trees, no xs), every derivative
//! against JAX's lax.scan, vmap of carries, xs and captured constants,
//! the remat options, and trace keeping the (reverse) scan.

use super::{count, m64, t64};
use crate::harness::{assert_close, on_each_device, v};
use xform::prelude::*;
use xform::{ScanOptions, ScanRemat};

// W = jnp.array([[0.5, -0.3], [0.8, 0.2]]); H0 = jnp.array([0.1, -0.4])
// XS = jnp.array([[0.3,-0.1],[0.7,0.2],[-0.5,0.9],[0.05,-0.6],[1.1,0.4],[-0.2,0.35],[0.6,-0.8]])
// def step(w):
//     def s(h, x):
//         h2 = jnp.tanh(h @ w + x)
//         return h2, jnp.sin(h2) * x
//     return s
// run = lambda h0, xs, w, reverse=False: lax.scan(step(w), h0, xs, reverse=reverse)
// def loss(h0, xs, w, reverse=False):
//     h, ys = run(h0, xs, w, reverse)
//     return jnp.sum(h * jnp.array([1.0, -0.5])) + jnp.sum(ys)
fn w() -> Tensor {
    m64(&[0.5, -0.3, 0.8, 0.2], &[2, 2])
}
fn h0() -> Tensor {
    t64(&[0.1, -0.4])
}
fn xs() -> Tensor {
    m64(&[0.3, -0.1, 0.7, 0.2, -0.5, 0.9, 0.05, -0.6, 1.1, 0.4, -0.2, 0.35, 0.6, -0.8], &[7, 2])
}

fn opts(reverse: bool, remat: ScanRemat) -> ScanOptions {
    ScanOptions { reverse, remat, ..ScanOptions::default() }
}

fn run(h0: &Tensor, xs: &Tensor, w: &Tensor, o: &ScanOptions) -> (Tensor, Tensor) {
    scan_with(
        |h: &Tensor, x: &Tensor| {
            let h2 = (h.matmul(w) + x).tanh();
            let y = h2.sin() * x;
            (h2, y)
        },
        h0,
        xs,
        o,
    )
}

fn loss(p: &(Tensor, Tensor, Tensor), o: &ScanOptions) -> Tensor {
    let (h, ys) = run(&p.0, &p.1, &p.2, o);
    (h * t64(&[1.0, -0.5])).sum() + ys.sum()
}

fn params() -> (Tensor, Tensor, Tensor) {
    (h0(), xs(), w())
}

/// JAX's values, forward then reverse.
struct Ref {
    h: [f64; 2],
    ys: [f64; 14],
    loss: f64,
    grad_h0: [f64; 2],
    grad_xs: [f64; 14],
    grad_w: [f64; 4],
    jvp: f64,
    jac_h0: [f64; 4],
    hess_h0: [f64; 4],
}

// for rev in [False, True]:
//   run(H0, XS, W, rev); loss(H0, XS, W, rev); jax.grad(loss, argnums=(0, 1, 2))(H0, XS, W, rev)
//   jax.jvp(lambda h0: loss(h0, XS, W, rev), (H0,), (jnp.array([1.0, -2.0]),))[1]
//   jax.jacfwd(lambda h0: run(h0, XS, W, rev)[0])(H0); jax.hessian(lambda h0: loss(h0, XS, W, rev))(H0)
const REFS: [Ref; 2] = [
    Ref {
        h: [0.7065174684772549, -0.6978389476003274],
        ys: [
            0.008995952246502256,
            0.020549208821573222,
            0.3356513899851737,
            0.02959156867701774,
            0.06501890701505848,
            0.5464714275767915,
            0.02253091314986622,
            0.2367606889375137,
            0.7621397728664575,
            0.07033628619115205,
            -0.06162747143009339,
            0.05385091523327356,
            0.3895132826980418,
            0.5140506561478333,
        ],
        loss: 4.049270440393579,
        grad_h0: [0.2016190270037323, 0.3513072166019175],
        grad_xs: [
            0.4585628909628165,
            -0.16326153910404723,
            0.6807235300064047,
            0.05300332764776486,
            -0.5937400330231176,
            0.987526758652599,
            0.4182136499730306,
            -0.5287093241884742,
            0.9870225839780352,
            0.953125668071803,
            0.6199438264390905,
            0.9495650757787983,
            1.3785902545205864,
            -1.2135483281566222,
        ],
        grad_w: [0.42588083887918043, 1.002625582893767, -0.2546191676115353, -0.2911132752228557],
        jvp: -0.5009954062001025,
        jac_h0: [0.007400954600606767, 0.0016650337437101824, -0.0021515186998279224, 0.001180413746553782],
        hess_h0: [-0.015717836062105035, -0.021627871013952055, -0.021627871013952058, -0.16137945754575148],
    },
    Ref {
        h: [0.7588412846024966, -0.21230015858727475],
        ys: [
            0.2064243312515713,
            0.021070897261729858,
            0.4400888318042558,
            0.08553572508809583,
            0.2699608648417802,
            0.4452964218800833,
            0.03152837103349373,
            0.344442273323782,
            0.727474994300126,
            0.20138123028576255,
            0.10444987822863344,
            0.03834349459210797,
            0.18789725161284596,
            0.5281883873808016,
        ],
        loss: 4.4970743167812035,
        grad_h0: [0.2317344457514936, 0.21758977574463925],
        grad_xs: [
            1.204576436464291,
            -0.7815222323613732,
            1.1523992843399813,
            0.8137915033093792,
            -0.7253590384288818,
            1.430640634023333,
            0.4516891181551898,
            -0.8573585420221299,
            1.053477762544194,
            0.6087045625398482,
            -0.5264835565579085,
            0.7839798943668703,
            0.6414674444734407,
            -0.8855080393109293,
        ],
        grad_w: [-0.38730715629981555, -0.04002156689895472, 0.4330974013628773, -1.158814869137907],
        jvp: -0.20344510573778474,
        jac_h0: [0.0011847035622650944, 0.001548538281925436, 0.00035388135074157246, 0.001780051221173395],
        hess_h0: [-0.1422715829395966, -0.12715065165717446, -0.12715065165717446, -0.26946636708196486],
    },
];

/// The same scan as a Rust loop over rows.
fn run_ref(h0: &Tensor, xs: &Tensor, w: &Tensor, reverse: bool) -> (Tensor, Tensor) {
    let n = xs.shape()[0];
    let mut h = h0.clone();
    let mut ys = vec![None; n];
    let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
    for i in order {
        let x = xs.select(0, i as isize);
        h = (h.matmul(w) + &x).tanh();
        ys[i] = Some(h.sin() * &x);
    }
    let ys: Vec<Tensor> = ys.into_iter().map(Option::unwrap).collect();
    (h, Tensor::stack(&ys, 0))
}

#[test]
fn scan_eager_forward_and_reverse() {
    on_each_device(|| {
        for (reverse, r) in [(false, &REFS[0]), (true, &REFS[1])] {
            let o = opts(reverse, ScanRemat::SaveResiduals);
            let (h, ys) = run(&h0(), &xs(), &w(), &o);
            assert_eq!(ys.shape().dims(), &[7, 2]);
            assert_close(&v(&h), &r.h, 1e-14);
            assert_close(&v(&ys), &r.ys, 1e-14);
            let (hr, ysr) = run_ref(&h0(), &xs(), &w(), reverse);
            assert_close(&v(&h), &v(&hr), 1e-15);
            assert_close(&v(&ys), &v(&ysr), 1e-15);
            assert_close(&[loss(&params(), &o).item_f64()], &[r.loss], 1e-14);
        }
    })
}

#[test]
fn scan_of_length_zero_trees_and_no_xs() {
    on_each_device(|| {
        // length 0: the initial carry and empty ys; its gradient is the loss's weights
        let empty = Tensor::zeros([0, 2], DType::F64);
        let (h, ys) = run(&h0(), &empty, &w(), &ScanOptions::default());
        assert_eq!(v(&h), v(&h0()));
        assert_eq!(ys.shape().dims(), &[0, 2]);
        let g = grad(|p: &(Tensor, Tensor, Tensor)| loss(p, &ScanOptions::default()))(&(h0(), empty.clone(), w()));
        assert_eq!(v(&g.0), vec![1.0, -0.5]);
        assert_eq!(g.1.shape().dims(), &[0, 2]);
        assert_eq!(v(&g.2), vec![0.0; 4]);
        // xs a tuple, ys a tree, the carry a tuple
        let a = m64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
        let b = t64(&[0.5, -1.0, 2.0]);
        let body = |(s, p): &(Tensor, Tensor), (a, b): &(Tensor, Tensor)| {
            let s2 = s + a * b;
            let p2 = p * b;
            ((s2.clone(), p2.clone()), (s2.sum(), (-a, p2)))
        };
        let init = (t64(&[0.0, 1.0]), Tensor::scalar(1.0f64));
        for reverse in [false, true] {
            let ((s, p), (sums, (na, ps))) =
                scan_with(body, &init, &(a.clone(), b.clone()), &opts(reverse, ScanRemat::SaveResiduals));
            let (av, bv) = (v(&a), v(&b));
            let mut sr = [0.0, 1.0];
            let mut pr = 1.0;
            let (mut sums_r, mut ps_r) = (vec![0.0; 3], vec![0.0; 3]);
            let order: Vec<usize> = if reverse { vec![2, 1, 0] } else { vec![0, 1, 2] };
            for i in order {
                sr = [sr[0] + av[2 * i] * bv[i], sr[1] + av[2 * i + 1] * bv[i]];
                pr *= bv[i];
                sums_r[i] = sr[0] + sr[1];
                ps_r[i] = pr;
            }
            assert_close(&v(&s), &sr, 1e-15);
            assert_close(&[p.item_f64()], &[pr], 1e-15);
            assert_close(&v(&sums), &sums_r, 1e-15);
            assert_close(&v(&na), &av.iter().map(|x| -x).collect::<Vec<_>>(), 0.0);
            assert_close(&v(&ps), &ps_r, 1e-15);
        }
        // no xs: ScanOptions::length gives the number of steps
        let o = ScanOptions { length: Some(4), ..ScanOptions::default() };
        let (c, ys) = scan_with(|c: &Tensor, _: &()| (c * 1.5 + 1.0, c.clone()), &Tensor::scalar(2.0f64), &(), &o);
        assert_eq!(c.item_f64(), 2.0 * 1.5f64.powi(4) + 1.5f64.powi(3) + 1.5f64.powi(2) + 1.5 + 1.0);
        assert_close(&v(&ys), &[2.0, 4.0, 7.0, 11.5], 0.0);
        // and its derivative: d c_4 / d c_0 = 1.5^4
        let g = grad(|c: &Tensor| scan_with(|c: &Tensor, _: &()| (c * 1.5 + 1.0, ()), c, &(), &o).0)(&Tensor::scalar(
            2.0f64,
        ));
        assert_close(&[g.item_f64()], &[1.5f64.powi(4)], 1e-15);
    })
}

#[test]
fn scan_derivatives_match_jax() {
    on_each_device(|| {
        for (reverse, r) in [(false, &REFS[0]), (true, &REFS[1])] {
            let o = opts(reverse, ScanRemat::SaveResiduals);
            let g = grad(|p: &(Tensor, Tensor, Tensor)| loss(p, &o))(&params());
            assert_close(&v(&g.0), &r.grad_h0, 1e-13);
            assert_close(&v(&g.1), &r.grad_xs, 1e-13);
            assert_close(&v(&g.2), &r.grad_w, 1e-13);
            let lh = |h: &Tensor| loss(&(h.clone(), xs(), w()), &o);
            let (val, tan) = jvp(lh, &h0(), &t64(&[1.0, -2.0]));
            assert_close(&[val.item_f64()], &[r.loss], 1e-14);
            assert_close(&[tan.item_f64()], &[r.jvp], 1e-13);
            let (_, lin) = linearize(lh, &h0());
            assert_close(&[lin(&t64(&[1.0, -2.0])).item_f64()], &[r.jvp], 1e-13);
            let carry = |h: &Tensor| run(h, &xs(), &w(), &o).0;
            assert_close(&v(&jacfwd(carry)(&h0())), &r.jac_h0, 1e-13);
            assert_close(&v(&jacrev(carry)(&h0())), &r.jac_h0, 1e-13);
            assert_close(&v(&hessian(lh)(&h0())), &r.hess_h0, 1e-12);
            // jacfwd and jacrev of the stacked ys w.r.t. xs agree: [7, 2, 7, 2]
            let ys_of = |x: &Tensor| run(&h0(), x, &w(), &o).1;
            let jf = jacfwd(ys_of)(&xs());
            assert_eq!(jf.shape().dims(), &[7, 2, 7, 2]);
            assert_close(&v(&jf), &v(&jacrev(ys_of)(&xs())), 1e-13);
        }
    })
}

#[test]
fn scan_remat_options_give_equal_gradients() {
    on_each_device(|| {
        for (reverse, r) in [(false, &REFS[0]), (true, &REFS[1])] {
            for remat in [
                ScanRemat::SaveResiduals,
                ScanRemat::SaveCarries,
                ScanRemat::Every(1),
                ScanRemat::Every(2),
                ScanRemat::Every(3),
                ScanRemat::Every(7),
                ScanRemat::Every(9),
            ] {
                let o = opts(reverse, remat);
                let what = format!("{remat:?} reverse={reverse}");
                let (h, ys) = run(&h0(), &xs(), &w(), &o);
                assert_close(&v(&h), &r.h, 1e-14);
                assert_close(&v(&ys), &r.ys, 1e-14);
                let g = grad(|p: &(Tensor, Tensor, Tensor)| loss(p, &o))(&params());
                eprintln!("{what}");
                assert_close(&v(&g.0), &r.grad_h0, 1e-13);
                assert_close(&v(&g.1), &r.grad_xs, 1e-13);
                assert_close(&v(&g.2), &r.grad_w, 1e-13);
                // second order through the recomputation
                let lh = |h: &Tensor| loss(&(h.clone(), xs(), w()), &o);
                assert_close(&v(&hessian(lh)(&h0())), &r.hess_h0, 1e-12);
            }
        }
    })
}

#[test]
fn vmap_of_scan_batches_carries_xs_and_constants() {
    on_each_device(|| {
        let o = ScanOptions::default();
        let key = Key::new(20);
        // batched carry only
        let h0s = key.fold_in(1).normal([3, 2], DType::F64);
        let (hs, yss) = vmap(|h: &Tensor| run(h, &xs(), &w(), &o))(&h0s);
        for i in 0..3 {
            let (h, ys) = run_ref(&h0s.select(0, i), &xs(), &w(), false);
            assert_close(&v(&hs.select(0, i)), &v(&h), 1e-14);
            assert_close(&v(&yss.select(0, i)), &v(&ys), 1e-14);
        }
        // batched xs only
        let xss = key.fold_in(2).normal([3, 7, 2], DType::F64);
        let (hs, yss) = vmap(|x: &Tensor| run(&h0(), x, &w(), &o))(&xss);
        for i in 0..3 {
            let (h, ys) = run_ref(&h0(), &xss.select(0, i), &w(), false);
            assert_close(&v(&hs.select(0, i)), &v(&h), 1e-14);
            assert_close(&v(&yss.select(0, i)), &v(&ys), 1e-14);
        }
        // batched constant: the body captures a batched weight
        let ws = key.fold_in(3).normal([3, 2, 2], DType::F64);
        let (hs, yss) = vmap(|w: &Tensor| run(&h0(), &xs(), w, &opts(true, ScanRemat::SaveResiduals)))(&ws);
        for i in 0..3 {
            let (h, ys) = run_ref(&h0(), &xs(), &ws.select(0, i), true);
            assert_close(&v(&hs.select(0, i)), &v(&h), 1e-14);
            assert_close(&v(&yss.select(0, i)), &v(&ys), 1e-14);
        }
        // vmap(vmap): carry batched at one level, xs at the other
        let got = vmap(|h: &Tensor| vmap(|x: &Tensor| run(h, x, &w(), &o).0)(&xss))(&h0s);
        assert_eq!(got.shape().dims(), &[3, 3, 2]);
        for i in 0..3 {
            for j in 0..3 {
                let (h, _) = run_ref(&h0s.select(0, i), &xss.select(0, j), &w(), false);
                assert_close(&v(&got.select(0, i).select(0, j)), &v(&h), 1e-14);
            }
        }
    })
}

#[test]
fn vmap_of_grad_of_scan_equals_a_loop_of_grad() {
    on_each_device(|| {
        let xss = Key::new(21).normal([4, 7, 2], DType::F64);
        for remat in [ScanRemat::SaveResiduals, ScanRemat::Every(3)] {
            let o = opts(false, remat);
            // per-example gradients w.r.t. the shared (h0, w), over a batch of sequences
            let per = vmap(|x: &Tensor| {
                grad(|p: &(Tensor, Tensor)| loss(&(p.0.clone(), x.clone(), p.1.clone()), &o))(&(h0(), w()))
            })(&xss);
            assert_eq!(per.1.shape().dims(), &[4, 2, 2]);
            for i in 0..4 {
                let x = xss.select(0, i);
                let g = grad(|p: &(Tensor, Tensor)| loss(&(p.0.clone(), x.clone(), p.1.clone()), &o))(&(h0(), w()));
                assert_close(&v(&per.0.select(0, i)), &v(&g.0), 1e-13);
                assert_close(&v(&per.1.select(0, i)), &v(&g.1), 1e-13);
            }
            // grad(vmap) of the summed losses w.r.t. the xs batch equals the per-row gradients
            let whole = grad(|xss: &Tensor| vmap(|x: &Tensor| loss(&(h0(), x.clone(), w()), &o))(xss).sum())(&xss);
            for i in 0..4 {
                let g = grad(|x: &Tensor| loss(&(h0(), x.clone(), w()), &o))(&xss.select(0, i));
                assert_close(&v(&whole.select(0, i)), &v(&g), 1e-13);
            }
        }
        // jvp(vmap) equals a loop of jvp
        let ts = Key::new(22).normal([4, 7, 2], DType::F64);
        let f = |x: &Tensor| run(&h0(), x, &w(), &ScanOptions::default()).0;
        let (_, tys) = jvp(vmap(f), &xss, &ts);
        for i in 0..4 {
            let (_, ty) = jvp(f, &xss.select(0, i), &ts.select(0, i));
            assert_close(&v(&tys.select(0, i)), &v(&ty), 1e-13);
        }
    })
}

#[test]
fn trace_of_grad_keeps_scans_and_the_transpose_is_a_reverse_scan() {
    let o = ScanOptions::default();
    let f = |x: &Tensor| loss(&(h0(), x.clone(), w()), &o);
    let prog = trace(grad(f), &xs());
    let text = prog.to_string();
    assert!(text.contains("scan["), "{text}");
    assert!(text.contains("reverse=True"), "the transpose is a reverse scan: {text}");
    // not unrolled: the 7 steps do not appear as 7 copies of the body
    assert!(count(&text, "tanh") <= 2, "{text}");
    let top_scans = prog.eqns.iter().filter(|e| e.prim.name() == "scan").count();
    assert!((1..=3).contains(&top_scans), "{top_scans} scans at the top level: {text}");
    let g = prog.eval(&[xs()]).unwrap();
    assert_close(&v(&g[0]), &REFS[0].grad_xs, 1e-13);
    // a reverse scan's transpose runs forward
    let ro = opts(true, ScanRemat::SaveResiduals);
    let rprog = trace(grad(|x: &Tensor| loss(&(h0(), x.clone(), w()), &ro)), &xs());
    let rtext = rprog.to_string();
    assert!(rtext.contains("reverse=True") && rtext.contains("reverse=False"), "{rtext}");
    assert_close(&v(&rprog.eval(&[xs()]).unwrap()[0]), &REFS[1].grad_xs, 1e-13);
    // trace of the scan itself: one scan equation
    let p = trace(|x: &Tensor| run(&h0(), x, &w(), &o), &xs());
    assert_eq!(p.eqns.iter().filter(|e| e.prim.name() == "scan").count(), 1, "{p}");
    assert_eq!(count(&p.to_string(), "tanh"), 1, "{p}");
}
