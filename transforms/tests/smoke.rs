use xform_ops::{DType, Tensor};
use xform_transforms::*;

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

#[test]
fn compositions() {
    let x = Tensor::from_vec(vec![0.3f64, -1.2, 2.0], [3]);
    let f = |x: &Tensor| (x.sin() * x).sum();
    let g = grad(f)(&x);
    let want: Vec<f64> = [0.3f64, -1.2, 2.0].iter().map(|v| v.cos() * v + v.sin()).collect();
    close(&g.to_vec::<f64>(), &want, 1e-12);
    // second derivative: d2/dx2 (x sin x) = 2 cos x - x sin x
    let gg = grad(|x: &Tensor| grad(f)(x).sum())(&x);
    let want2: Vec<f64> = [0.3f64, -1.2, 2.0].iter().map(|v| 2.0 * v.cos() - v * v.sin()).collect();
    close(&gg.to_vec::<f64>(), &want2, 1e-12);
    // vmap(grad) per-example
    let xs = Tensor::from_vec(vec![0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6], [2, 3]);
    let pg = vmap(grad(f))(&xs);
    let rows: Vec<f64> = [0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6].iter().map(|v| v.cos() * v + v.sin()).collect();
    close(&pg.to_vec::<f64>(), &rows, 1e-12);
    // hessian
    let h = hessian(f)(&x);
    assert_eq!(h.shape().dims(), &[3, 3]);
    let hv = h.to_vec::<f64>();
    close(&[hv[0], hv[4], hv[8]], &want2, 1e-12);
    assert_eq!(hv[1], 0.0);
    // jacfwd == jacrev
    let a = Tensor::from_vec((0..12).map(|v| (v as f64 * 0.37).sin()).collect::<Vec<_>>(), [4, 3]);
    let g2 = |x: &Tensor| a.matmul(x).tanh();
    let jf = jacfwd(g2)(&x);
    let jr = jacrev(g2)(&x);
    close(&jf.to_vec::<f64>(), &jr.to_vec::<f64>(), 1e-12);
    // perturbation confusion: d/dx [x * d/dy (x + y)] at y = 1 is 1
    let d = grad(|x: &Tensor| {
        let inner = grad(|y: &Tensor| (x + y).sum())(&Tensor::scalar(1.0f64));
        (x * &inner).sum()
    })(&Tensor::scalar(2.0f64));
    assert_eq!(d.item::<f64>(), 1.0);
    let p = trace(f, &x);
    assert_eq!(
        p.to_string(),
        "{ lambda ; a:f64[3]. let\n    b:f64[3] = sin a\n    c:f64[3] = mul b a\n    d:f64[] = reduce_sum[axes=(0)] c\n  in (d) }"
    );
    let y = p.eval(std::slice::from_ref(&x)).unwrap();
    assert_eq!(y.len(), 1);
    close(&y[0].to_vec::<f64>(), &f(&x).to_vec::<f64>(), 1e-15);
    let e = xform_ops::catch(|| vmap(|x: &Tensor| x + &Tensor::zeros([4], DType::F64))(&xs)).unwrap_err();
    assert_eq!(e.to_string(), "add: shapes cannot be broadcast together (shapes [3], [4]) [under vmap(size 2)]");
    assert_eq!(xform_ops::interp::stack_depth(), 0);
}
