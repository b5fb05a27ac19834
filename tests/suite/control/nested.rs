//! Control flow nested in control flow, under nested transforms: a scan
//! whose body branches, iterates and calls custom rules, against finite
//! differences, closed forms and loops of the untransformed call.

use super::{m64, t64};
use crate::harness::{assert_close, on_each_device, v};
use xform::prelude::*;
use xform::testing::{check_grads, Modes};
use xform::{ScanRemat, WhileOptions};

/// sqrt(a) by Newton's method until |y^2 - a| < 1e-13 (a > 0): the
/// derivative of the converged iterate is 1 / (2 sqrt a).
fn newton_sqrt(a: &Tensor) -> Tensor {
    let (_, y) = while_loop(
        |(a, y): &(Tensor, Tensor)| (y * y - a).abs().gt_scalar(1e-13),
        |(a, y): &(Tensor, Tensor)| (a.clone(), (y + a / y) * 0.5),
        &(a.clone(), a.clone() * 0.5 + 0.5),
    );
    y
}

#[test]
fn newton_iterations_differentiate_to_the_closed_form() {
    on_each_device(|| {
        let a = t64(&[2.0, 0.25, 9.0]);
        let per = |a: &Tensor| newton_sqrt(a);
        let ys = vmap(per)(&a);
        assert_close(&v(&ys), &[2f64.sqrt(), 0.5, 3.0], 1e-13);
        let want: Vec<f64> = v(&a).iter().map(|a| 0.5 / a.sqrt()).collect();
        // reverse mode through the data-dependent trip count, per example and under vmap
        for (i, &ai) in v(&a).iter().enumerate() {
            let g = grad(per)(&Tensor::scalar(ai));
            assert_close(&[g.item_f64()], &[want[i]], 1e-9);
        }
        let g = vmap(grad(per))(&a);
        assert_close(&v(&g), &want, 1e-9);
        // second derivative: -1 / (4 a^1.5)
        let h = grad(|a: &Tensor| grad(per)(a))(&Tensor::scalar(2.0f64));
        assert_close(&[h.item_f64()], &[-0.25 / 2f64.powf(1.5)], 1e-8);
        let opts = WhileOptions { remat_every: 2 };
        let g = grad(|a: &Tensor| {
            xform::while_loop_with(
                |(a, y): &(Tensor, Tensor)| (y * y - a).abs().gt_scalar(1e-13),
                |(a, y): &(Tensor, Tensor)| (a.clone(), (y + a / y) * 0.5),
                &(a.clone(), a.clone() * 0.5 + 0.5),
                &opts,
            )
            .1
        })(&Tensor::scalar(9.0f64));
        assert_close(&[g.item_f64()], &[1.0 / 6.0], 1e-9);
    })
}

/// A scan whose body branches on the data (cond), switches on an integer
/// xs leaf, and uses a custom_jvp (whose rule is the true derivative, so
/// finite differences agree) and a checkpoint.
fn mixed_full(c0: &Tensor, xs: &Tensor, kinds: &Tensor, remat: ScanRemat) -> (Tensor, Tensor) {
    let softplus =
        custom_jvp(|x: &Tensor| x.exp().log1p(), |x: &Tensor, t: &Tensor| (x.exp().log1p(), x.sigmoid() * t));
    let block = checkpoint(|x: &Tensor| (x * 1.3).tanh());
    let o = ScanOptions { remat, ..ScanOptions::default() };
    let (c, ys) = scan_with(
        |(c, n): &(Tensor, Tensor), (x, k): &(Tensor, Tensor)| {
            let h = cond(&x.sum().gt_scalar(0.0), |h: &Tensor| h.sin() + x, |h: &Tensor| h * x * 0.5, c);
            let h = switch(k, &[&|h: &Tensor| softplus.call(h), &|h: &Tensor| block(h), &|h: &Tensor| h * h], &h);
            let y = h.sum();
            ((h, n + 1), y)
        },
        &(c0.clone(), Tensor::scalar(0i32)),
        &(xs.clone(), kinds.clone()),
        &o,
    );
    ((c.0 * ys.sum()).sum(), c.1)
}

fn mixed(c0: &Tensor, xs: &Tensor, kinds: &Tensor, remat: ScanRemat) -> Tensor {
    mixed_full(c0, xs, kinds, remat).0
}

fn seqs() -> (Tensor, Tensor) {
    let xs = Key::new(40).normal([3, 6, 2], DType::F64);
    let kinds = Tensor::from_vec(vec![0i32, 1, 2, 5, -1, 1, 2, 2, 0, 1, 0, 1, 1, 0, 2, 2, 1, 0], [3, 6]);
    (xs, kinds)
}

#[test]
fn scan_of_cond_switch_custom_jvp_and_checkpoint_under_every_transform() {
    on_each_device(|| {
        let (xss, kinds) = seqs();
        let c0 = t64(&[0.2, -0.3]);
        for remat in [ScanRemat::SaveResiduals, ScanRemat::SaveCarries, ScanRemat::Every(4)] {
            // the integer carry counts the steps, eagerly and under vmap
            let (_, n) = mixed_full(&c0, &xss.select(0, 1), &kinds.select(0, 1), remat);
            assert_eq!(n.item::<i32>(), 6);
            let (_, ns) = vmap(|(x, k): &(Tensor, Tensor)| mixed_full(&c0, x, k, remat))(&(xss.clone(), kinds.clone()));
            assert_eq!(ns.to_vec::<i32>(), vec![6, 6, 6]);
            // finite differences, forward and reverse, to second order (data of one sequence)
            let (x, k) = (xss.select(0, 0), kinds.select(0, 0));
            check_grads(|c: &Tensor| mixed(c, &x, &k, remat), &c0, 2, Modes::Both).unwrap();
            check_grads(|x: &Tensor| mixed(&c0, x, &k, remat), &x, 1, Modes::Both).unwrap();
            // per-sequence gradients: vmap(grad) equals a loop of grad, and so does grad(vmap)
            let per = vmap(|(x, k): &(Tensor, Tensor)| grad(|c: &Tensor| mixed(c, x, k, remat))(&c0))(&(
                xss.clone(),
                kinds.clone(),
            ));
            let whole = grad(|xs: &Tensor| {
                vmap(|(x, k): &(Tensor, Tensor)| mixed(&c0, x, k, remat))(&(xs.clone(), kinds.clone())).sum()
            })(&xss);
            for i in 0..3 {
                let (x, k) = (xss.select(0, i), kinds.select(0, i));
                let g = grad(|c: &Tensor| mixed(c, &x, &k, remat))(&c0);
                assert_close(&v(&per.select(0, i)), &v(&g), 1e-12);
                let gx = grad(|x: &Tensor| mixed(&c0, x, &k, remat))(&x);
                assert_close(&v(&whole.select(0, i)), &v(&gx), 1e-12);
            }
            // jvp of vmap and vmap of vmap
            let ts = Key::new(41).normal([3, 6, 2], DType::F64);
            let (_, tys) = jvp(
                |xs: &Tensor| vmap(|(x, k): &(Tensor, Tensor)| mixed(&c0, x, k, remat))(&(xs.clone(), kinds.clone())),
                &xss,
                &ts,
            );
            for i in 0..3 {
                let k = kinds.select(0, i);
                let (_, ty) = jvp(|x: &Tensor| mixed(&c0, x, &k, remat), &xss.select(0, i), &ts.select(0, i));
                assert_close(&[v(&tys)[i as usize]], &v(&ty), 1e-12);
            }
            let c0s = m64(&[0.2, -0.3, 0.5, 0.1], &[2, 2]);
            let got = vmap(|c: &Tensor| {
                vmap(|(x, k): &(Tensor, Tensor)| mixed(c, x, k, remat))(&(xss.clone(), kinds.clone()))
            })(&c0s);
            assert_eq!(got.shape().dims(), &[2, 3]);
            for a in 0..2 {
                for b in 0..3 {
                    let want = mixed(&c0s.select(0, a), &xss.select(0, b), &kinds.select(0, b), remat);
                    assert_close(&[v(&got.select(0, a))[b as usize]], &[want.item_f64()], 1e-13);
                }
            }
        }
    })
}

#[test]
fn custom_vjp_inside_a_scan_uses_bwd_at_every_step() {
    on_each_device(|| {
        // a straight-through round: forward rounds, backward is the identity
        let ste = custom_vjp(|x: &Tensor| x.round(), |x: &Tensor| (x.round(), ()), |_: &(), ct: &Tensor| ct.clone());
        let f = |c: &Tensor| scan(|c: &Tensor, w: &Tensor| (ste.call(&(c * w)), ()), c, &t64(&[1.5, 2.0, 0.5])).0;
        let c = Tensor::scalar(1.2f64);
        // forward: round(1.8) = 2, round(4) = 4, round(2) = 2
        assert_eq!(f(&c).item_f64(), 2.0);
        // backward: the identity through each round, so d/dc = 1.5 * 2 * 0.5
        assert_close(&[grad(f)(&c).item_f64()], &[1.5], 1e-15);
        let cs = t64(&[1.2, -0.7, 3.1]);
        assert_close(&v(&vmap(grad(f))(&cs)), &[1.5, 1.5, 1.5], 1e-15);
    })
}

#[test]
fn scan_unroll_changes_nothing_but_the_recorded_parameter() {
    let xs = Key::new(42).normal([5, 3], DType::F64);
    let run = |unroll: usize, c: &Tensor| {
        let o = ScanOptions { unroll, ..ScanOptions::default() };
        scan_with(|c: &Tensor, x: &Tensor| ((c * x).sin() + c, c.sum()), c, &xs, &o)
    };
    let c0 = t64(&[0.1, 0.2, 0.3]);
    let (a, ya) = run(1, &c0);
    let (b, yb) = run(2, &c0);
    assert_close(&v(&a), &v(&b), 0.0);
    assert_close(&v(&ya), &v(&yb), 0.0);
    let ga = grad(|c: &Tensor| run(1, c).0.sum())(&c0);
    let gb = grad(|c: &Tensor| run(2, c).0.sum())(&c0);
    assert_close(&v(&ga), &v(&gb), 1e-15);
    let text = trace(|c: &Tensor| run(2, c), &c0).to_string();
    assert!(text.contains("unroll=2"), "{text}");
}

#[test]
fn derivatives_over_trees_and_reused_linear_maps() {
    // hessian of sin(a b) through a cond, w.r.t. a tuple: [[-b^2 s, c - ab s], [c - ab s, -a^2 s]]
    let (a, b) = (0.5f64, 0.3f64);
    let (s, c) = ((a * b).sin(), (a * b).cos());
    let h = hessian(|p: &(Tensor, Tensor)| {
        cond(
            &Tensor::scalar(true),
            |p: &(Tensor, Tensor)| (&p.0 * &p.1).sin().sum(),
            |p: &(Tensor, Tensor)| p.0.sum(),
            p,
        )
    })(&(t64(&[a]), t64(&[b])));
    assert_close(&v(&h.0 .0), &[-b * b * s], 1e-15);
    assert_close(&v(&h.0 .1), &[c - a * b * s], 1e-15);
    assert_close(&v(&h.1 .0), &[c - a * b * s], 1e-15);
    assert_close(&v(&h.1 .1), &[-a * a * s], 1e-15);
    // the linear map of a while_loop, applied twice, gives the Jacobian's columns
    let grow = |x: &Tensor| while_loop(|x: &Tensor| x.sum().lt_scalar(10.0), |x: &Tensor| x * 1.5 + x.sin(), x);
    let x = t64(&[0.7, 1.1]);
    let (_, lin) = linearize(grow, &x);
    let j = v(&jacfwd(grow)(&x));
    assert_close(&v(&lin(&t64(&[1.0, 0.0]))), &[j[0], j[2]], 1e-14);
    assert_close(&v(&lin(&t64(&[0.0, 1.0]))), &[j[1], j[3]], 1e-14);
    // vjp of a scan's ys only: ys_i = c_{i-1} x_i with c the running sum, so
    // d/dx sum(ys) = [x2 + x3, x1 + x3, x1 + x2]
    let (_, back) = vjp(
        |x: &Tensor| scan(|c: &Tensor, x: &Tensor| (c + x, c * x), &Tensor::scalar(0.0f64), x).1,
        &t64(&[1.0, 2.0, 3.0]),
    );
    assert_close(&v(&back(&t64(&[1.0, 1.0, 1.0]))), &[5.0, 4.0, 3.0], 1e-15);
}
