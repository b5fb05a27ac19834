//! Transforms composed in every order, against independent references:
//! loops, finite differences, known closed forms.

use crate::harness::on_each_device;
use crate::harness::{assert_close as close, v};
use xform::prelude::*;
use xform::testing::{check_grads, check_vmap, Modes};
use xform::{jacfwd_with, JacOptions};

fn x3() -> Tensor {
    Tensor::from_vec(vec![0.3f64, -1.2, 2.0], [3])
}

/// f(x) = sum(sin(x) * x); f' = cos x * x + sin x; f'' = 2 cos x - x sin x;
/// f''' = -3 sin x - x cos x.
fn f(x: &Tensor) -> Tensor {
    (x.sin() * x).sum()
}

#[test]
fn grad_of_grad_of_grad() {
    on_each_device(|| {
        let x = x3();
        let d1 = grad(f)(&x);
        let d2 = grad(|x: &Tensor| grad(f)(x).sum())(&x);
        let d3 = grad(|x: &Tensor| grad(|x: &Tensor| grad(f)(x).sum())(x).sum())(&x);
        let xs = v(&x);
        close(&v(&d1), &xs.iter().map(|x| x.cos() * x + x.sin()).collect::<Vec<_>>(), 1e-12);
        close(&v(&d2), &xs.iter().map(|x| 2.0 * x.cos() - x * x.sin()).collect::<Vec<_>>(), 1e-12);
        close(&v(&d3), &xs.iter().map(|x| -3.0 * x.sin() - x * x.cos()).collect::<Vec<_>>(), 1e-12);
    })
}

#[test]
fn per_sample_gradients_equal_a_loop() {
    on_each_device(|| {
        // a small MLP loss per example, parameters shared
        let key = Key::new(1);
        let w1 = key.fold_in(1).normal([4, 5], DType::F64);
        let w2 = key.fold_in(2).normal([5, 3], DType::F64);
        let xs = key.fold_in(3).normal([6, 4], DType::F64);
        let ys = Tensor::from_vec(vec![0i32, 2, 1, 1, 0, 2], [6]);
        let loss = |p: &(Tensor, Tensor), x: &Tensor, y: &Tensor| {
            let logits = x.matmul(&p.0).tanh().matmul(&p.1);
            -logits.log_softmax(-1).take(y, 0)
        };
        let params = (w1, w2);
        let per = vmap_with(
            |(x, y): &(Tensor, Tensor)| grad(|p: &(Tensor, Tensor)| loss(p, x, y))(&params),
            VmapOptions::default(),
        )(&(xs.clone(), ys.clone()));
        assert_eq!(per.0.shape().dims(), &[6, 4, 5]);
        for i in 0..6 {
            let xi = xs.select(0, i);
            let yi = ys.select(0, i);
            let gi = grad(|p: &(Tensor, Tensor)| loss(p, &xi, &yi))(&params);
            close(&v(&per.0.select(0, i)), &v(&gi.0), 1e-12);
            close(&v(&per.1.select(0, i)), &v(&gi.1), 1e-12);
        }
    })
}

#[test]
fn grad_of_vmap_and_vmap_inside_grad() {
    on_each_device(|| {
        let xs = Key::new(2).normal([4, 3], DType::F64);
        // d/dX sum_i f(X_i) = per-row f'
        let g = grad(|xs: &Tensor| vmap(f)(xs).sum())(&xs);
        let rows = vmap(grad(f))(&xs);
        close(&v(&g), &v(&rows), 1e-12);
        check_grads(|xs: &Tensor| vmap(|x: &Tensor| x.tanh() * x.sum())(xs), &xs, 2, Modes::Both).unwrap();
    })
}

#[test]
fn hessian_vector_products_and_vjp_of_jvp() {
    on_each_device(|| {
        let x = x3();
        let h = hessian(f)(&x);
        let t = Tensor::from_vec(vec![1.0f64, -2.0, 0.5], [3]);
        let (_, hvp) = jvp(grad(f), &x, &t);
        close(&v(&hvp), &v(&h.matmul(&t)), 1e-12);
        // vjp of jvp: d/dx <jvp(f)(x, t)> pulled back
        let (_, pb) = vjp(|x: &Tensor| jvp(f, x, &t).1, &x);
        close(&v(&pb(&Tensor::scalar(1.0f64))), &v(&hvp), 1e-12);
        // reverse-over-reverse: grad of <grad f, t>
        let rr = grad(|x: &Tensor| (grad(f)(x) * &t).sum())(&x);
        close(&v(&rr), &v(&hvp), 1e-12);
    })
}

#[test]
fn jacobians_agree_and_hessians_are_symmetric() {
    on_each_device(|| {
        let key = Key::new(3);
        let a = key.normal([4, 3], DType::F64);
        let g = |x: &Tensor| a.matmul(x).tanh() * x.sum();
        let x = x3();
        let jf = jacfwd(g)(&x);
        let jr = jacrev(g)(&x);
        assert_eq!(jf.shape().dims(), &[4, 3]);
        close(&v(&jf), &v(&jr), 1e-12);
        // chunked under a tiny budget gives the same
        let jc = jacfwd_with(g, JacOptions { max_bytes: 50 })(&x);
        close(&v(&jc), &v(&jf), 1e-12);
        let jrc = xform::jacrev_with(g, JacOptions { max_bytes: 50 })(&x);
        close(&v(&jrc), &v(&jf), 1e-12);
        let s = |x: &Tensor| (a.matmul(x).tanh() * x.sum()).sum();
        let h = hessian(s)(&x);
        close(&v(&h), &v(&h.t().copy()), 1e-12);
        let hrr = jacrev(jacrev(s))(&x);
        close(&v(&h), &v(&hrr), 1e-12);
        let hff = jacfwd(jacfwd(s))(&x);
        close(&v(&h), &v(&hff), 1e-12);
    })
}

#[test]
fn jacrev_of_one_output_element_is_a_gradient_that_aliases_nothing() {
    on_each_device(|| {
        let c = Tensor::from_vec(vec![2.0f64, -1.0, 0.5], [3]);
        let x = x3();
        // shapes [] and [1, 1] out: [] ++ [3] and [1, 1] ++ [3]
        let j = jacrev(|x: &Tensor| (x * &c).sum())(&x);
        assert_eq!(j.shape().dims(), &[3]);
        close(&v(&j), &[2.0, -1.0, 0.5], 0.0);
        j.add_scalar_(1.0);
        close(&v(&c), &[2.0, -1.0, 0.5], 0.0);
        let j = jacrev(|x: &Tensor| (x * x).sum().reshape(&[1, 1]))(&x);
        assert_eq!(j.shape().dims(), &[1, 1, 3]);
        close(&v(&j), &v(&(&x * 2.0)), 1e-15);
        // agrees with the basis path of a two-element output
        let two = jacrev(|x: &Tensor| Tensor::stack(&[x.sin().sum(), x.sum()], 0))(&x);
        let one = jacrev(|x: &Tensor| x.sin().sum())(&x);
        close(&v(&two.select(0, 0)), &v(&one), 1e-15);
        // an input the output does not depend on gets zeros
        let p = (x3(), Tensor::from_vec(vec![4.0f64], [1]));
        let (jx, jy) = jacrev(|p: &(Tensor, Tensor)| p.0.exp().sum())(&p);
        close(&v(&jx), &v(&x.exp()), 1e-15);
        close(&v(&jy), &[0.0], 0.0);
    })
}

#[test]
fn vmap_of_hessian_and_jacobians_of_pytrees() {
    on_each_device(|| {
        let xs = Key::new(4).normal([5, 3], DType::F64);
        let hs = vmap(hessian(f))(&xs);
        assert_eq!(hs.shape().dims(), &[5, 3, 3]);
        for i in 0..5 {
            close(&v(&hs.select(0, i)), &v(&hessian(f)(&xs.select(0, i))), 1e-12);
        }
        // pytree input and output: Y::Map<X>
        let p = (x3(), Tensor::from_vec(vec![1.5f64, -0.5], [2]));
        let fun = |p: &(Tensor, Tensor)| (p.0.sum() * &p.1, p.0.sin());
        let (j_out0, j_out1) = jacrev(fun)(&p);
        assert_eq!(j_out0.0.shape().dims(), &[2, 3]); // d out0 / d p.0
        assert_eq!(j_out0.1.shape().dims(), &[2, 2]); // d out0 / d p.1
        assert_eq!(j_out1.0.shape().dims(), &[3, 3]);
        close(&v(&j_out0.0), &[1.5, 1.5, 1.5, -0.5, -0.5, -0.5], 1e-12);
        close(&v(&j_out0.1), &[1.1, 0.0, 0.0, 1.1], 1e-12);
        let (f0, f1) = jacfwd(fun)(&p);
        close(&v(&f0.0), &v(&j_out0.0), 1e-12);
        close(&v(&f1.0), &v(&j_out1.0), 1e-12);
        close(&v(&f1.1), &[0.0; 6], 0.0);
        // hessian over a pytree: blocks
        let s = |p: &(Tensor, Tensor)| (p.0.sum() * p.1.sum()).powi(2);
        let ((h00, h01), (h10, h11)) = hessian(s)(&p);
        assert_eq!(
            (h00.shape().dims(), h01.shape().dims(), h10.shape().dims(), h11.shape().dims()),
            (&[3, 3][..], &[3, 2][..], &[2, 3][..], &[2, 2][..])
        );
        // s = (a b)^2 with a = sum p0 = 1.1, b = sum p1 = 1: d2s/da db = 4ab
        close(&v(&h01), &[4.4; 6], 1e-12);
        close(&v(&h11), &[2.0 * 1.1 * 1.1; 4], 1e-12);
    })
}

#[test]
fn perturbation_confusion_is_avoided() {
    on_each_device(|| {
        // d/dx [x * d/dy (x + y)]|_{y=1} = 1 (not 2)
        let d = grad(|x: &Tensor| {
            let inner = grad(|y: &Tensor| (x + y).sum())(&Tensor::scalar(1.0f64));
            (x * &inner).sum()
        })(&Tensor::scalar(2.0f64));
        assert_eq!(d.item::<f64>(), 1.0);
        // the same under jvp
        let (_, t) = jvp(
            |x: &Tensor| {
                let (_, ty) = jvp(|y: &Tensor| x * y, &Tensor::scalar(3.0f64), &Tensor::scalar(1.0f64));
                x * &ty
            },
            &Tensor::scalar(2.0f64),
            &Tensor::scalar(1.0f64),
        );
        assert_eq!(t.item::<f64>(), 4.0); // d/dx x * x = 2x
    })
}

#[test]
fn closures_capture_outer_tracers_at_two_levels() {
    on_each_device(|| {
        let a = Key::new(5).normal([3, 4], DType::F64);
        let b = Key::new(6).normal([2, 4], DType::F64);
        // out[i, j] = sum(a[i] * b[j] * a[i].sum())
        let out = vmap(|ai: &Tensor| {
            let s = ai.sum();
            #[allow(clippy::let_and_return)] // the temporary must not outlive `s`
            let inner = vmap(|bj: &Tensor| (ai * bj * &s).sum())(&b);
            inner
        })(&a);
        assert_eq!(out.shape().dims(), &[3, 2]);
        for i in 0..3 {
            for j in 0..2 {
                let (ai, bj) = (a.select(0, i), b.select(0, j));
                let want = (&ai * &bj * &ai.sum()).sum().item::<f64>();
                close(&[out.slice(s![i, j]).item::<f64>()], &[want], 1e-12);
            }
        }
        // grad through a vmap that captures the differentiated value
        let g = grad(|w: &Tensor| vmap(|bj: &Tensor| (w * bj).sum().tanh())(&b).sum())(&a.select(0, 0));
        let mut want = vec![0.0; 4];
        for j in 0..2 {
            let bj = b.select(0, j);
            let gj = grad(|w: &Tensor| (w * &bj).sum().tanh())(&a.select(0, 0));
            for (k, x) in v(&gj).iter().enumerate() {
                want[k] += x;
            }
        }
        close(&v(&g), &want, 1e-12);
    })
}

#[test]
fn vmap_over_keys_equals_a_loop_over_keys() {
    on_each_device(|| {
        let keys = Key::new(7).split_tensor(4);
        let draws = vmap(|k: &Tensor| {
            let key = Key::from_tensor(k.clone());
            (key.normal([3], DType::F32), key.uniform([2], DType::F64), key.split_tensor(2))
        })(&keys);
        for i in 0..4 {
            let key = Key::from_tensor(keys.select(0, i).copy());
            assert_eq!(draws.0.select(0, i).to_vec::<f32>(), key.normal([3], DType::F32).to_vec::<f32>());
            assert_eq!(draws.1.select(0, i).to_vec::<f64>(), key.uniform([2], DType::F64).to_vec::<f64>());
            assert_eq!(draws.2.select(0, i).to_vec::<u32>(), key.split_tensor(2).to_vec::<u32>());
        }
        // fold_in with a batched key too
        let folded = vmap(|k: &Tensor| Key::from_tensor(k.clone()).fold_in(3).tensor().clone())(&keys);
        assert_eq!(
            folded.select(0, 2).to_vec::<u32>(),
            Key::from_tensor(keys.select(0, 2).copy()).fold_in(3).tensor().to_vec::<u32>()
        );
    })
}

#[test]
fn vmap_options_and_nested_axes() {
    on_each_device(|| {
        let x = Key::new(8).normal([3, 4], DType::F64);
        let y = Key::new(9).normal([4], DType::F64);
        // in_axes per argument, negative axes, out_axes
        let f2 = |(a, b): &(Tensor, Tensor)| (a * b).sum();
        let r = vmap_with(f2, VmapOptions { in_axes: Axes::Args(vec![Some(-1), None]), ..Default::default() })(&(
            x.t().copy(),
            y.clone(),
        ));
        close(&v(&r), &v(&x.matmul(&y)), 1e-12);
        let o = vmap_with(|a: &Tensor| a * 2.0, VmapOptions { out_axes: Axes::All(Some(1)), ..Default::default() })(&x);
        close(&v(&o), &v(&(x.t() * 2.0)), 1e-12);
        // axis_size with no batched input broadcasts the result
        let c = vmap_with(
            |a: &Tensor| a.sum(),
            VmapOptions { in_axes: Axes::All(None), axis_size: Some(5), ..Default::default() },
        )(&y);
        assert_eq!(c.shape().dims(), &[5]);
        // chunked vmap equals unchunked
        let big = Key::new(10).normal([10, 3], DType::F64);
        let a = vmap(grad(f))(&big);
        let b = vmap_with(grad(f), VmapOptions { chunk_size: Some(3), ..Default::default() })(&big);
        close(&v(&a), &v(&b), 1e-12);
        // a captured batched value under an unbatched argument
        check_vmap(|x: &Tensor| x.softmax(-1).matmul(&y.reshape(&[4, 1])), &x, Axes::Zero).unwrap();
    })
}

#[test]
fn vmap_errors_name_the_argument_path() {
    on_each_device(|| {
        let x = Tensor::zeros([3, 2], DType::F32);
        let z = Tensor::zeros([4, 2], DType::F32);
        let e = catch(|| vmap(|(a, b): &(Tensor, Tensor)| a + b)(&(x.clone(), z.clone()))).unwrap_err();
        assert!(e.to_string().contains("inconsistent batch sizes along the mapped axes (.0: 3, .1: 4)"), "{e}");
        let e = catch(|| {
            vmap_with(|a: &Tensor| a.sum(), VmapOptions { in_axes: Axes::All(Some(2)), ..Default::default() })(&x)
        })
        .unwrap_err();
        assert!(e.to_string().contains("in_axes 2 is out of range for argument <root> of shape [3, 2]"), "{e}");
        let e = catch(|| {
            vmap_with(
                |p: &(Tensor, Tensor)| &p.0 + &p.1,
                VmapOptions { in_axes: Axes::Args(vec![Some(0)]), ..Default::default() },
            )(&(x.clone(), x.clone()))
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("in_axes does not fit the tree: the prefix has 1 entries at the root, where the tree has 2 children (.0, .1)"),
            "{e}"
        );
        let e = catch(|| {
            vmap_with(|a: &Tensor| a * 2.0, VmapOptions { out_axes: Axes::All(None), ..Default::default() })(&x)
        })
        .unwrap_err();
        assert!(e.to_string().contains("output <root> varies across the batch, but its out_axes is None"), "{e}");
        let e = catch(|| {
            vmap_with(|a: &Tensor| a * 2.0, VmapOptions { in_axes: Axes::All(None), ..Default::default() })(&x)
        })
        .unwrap_err();
        assert!(e.to_string().contains("give axis_size"), "{e}");
        let e = catch(|| vmap_with(|a: &Tensor| a.sum(), VmapOptions { axis_size: Some(4), ..Default::default() })(&x))
            .unwrap_err();
        assert!(e.to_string().contains("<root>: 3, axis_size: 4"), "{e}");
        assert_eq!(xform::core::interp::stack_depth(), 0);
    })
}

#[test]
fn grad_errors() {
    on_each_device(|| {
        let e = catch(|| grad(|x: &Tensor| x * 2.0)(&Tensor::ones([3], DType::F32))).unwrap_err();
        assert!(e.to_string().contains("the function must return a scalar, but it returned shape [3]"), "{e}");
        // Integer arguments beside float ones are allowed (zero gradients,
        // JAX's allow_int); an integer loss is not.
        let e = catch(|| grad(|x: &Tensor| x.cast(DType::I32).sum())(&Tensor::ones([3], DType::F32))).unwrap_err();
        assert!(e.to_string().contains("the function must return a float, but it returned int32"), "{e}");
        let g = grad(|p: &(Tensor, Tensor)| p.0.sum())(&(Tensor::ones([2], DType::F32), Tensor::ones([2], DType::I64)));
        assert_eq!((g.0.to_vec::<f32>(), g.1.to_vec::<i64>()), (vec![1.0, 1.0], vec![0, 0]));
        // An argument with nothing to differentiate is an error (JAX and
        // PyTorch raise; it returned zeros) that says how to select what to
        // differentiate, for each derivative transform.
        let ints = (Tensor::ones([3], DType::I32), Tensor::scalar(true));
        let loss = |p: &(Tensor, Tensor)| p.0.cast(DType::F32).sum();
        let vector = |p: &(Tensor, Tensor)| p.0.cast(DType::F32) * 2.0;
        let fails = |f: &dyn Fn()| {
            catch(|| {
                f();
                Tensor::scalar(0.0f32)
            })
            .unwrap_err()
        };
        let errors = [
            ("grad", fails(&|| drop(grad(loss)(&ints)))),
            ("value_and_grad", fails(&|| drop(value_and_grad(loss)(&ints)))),
            ("jacfwd", fails(&|| drop(jacfwd(vector)(&ints)))),
            ("jacrev", fails(&|| drop(jacrev(vector)(&ints)))),
            ("hessian", fails(&|| drop(hessian(loss)(&ints)))),
        ];
        for (op, e) in errors {
            assert_eq!(e.op, op, "{e}");
            let m = e.to_string();
            assert!(
                m.contains("no floating-point leaf") && m.contains(".0: i32[3]") && m.contains(".1: bool[]"),
                "{m}"
            );
            assert!(m.contains(&format!("{op}_argnums")) && m.contains("cast"), "{m}");
        }
        assert_eq!(xform::core::interp::stack_depth(), 0);
        // an argument without leaves has an empty gradient, as in JAX
        assert_eq!(grad(|_: &()| Tensor::scalar(1.0f32))(&()), ());
        let e = catch(|| jvp(|x: &Tensor| x.sin(), &Tensor::ones([3], DType::F32), &Tensor::ones([2], DType::F32)))
            .unwrap_err();
        assert!(e.to_string().contains("the tangent for <root> must have its primal's shape"), "{e}");
    })
}

#[test]
fn value_and_grad_aux_and_linearize() {
    on_each_device(|| {
        let x = x3();
        let (val, g) = value_and_grad(f)(&x);
        close(&[val.item::<f64>()], &[v(&f(&x))[0]], 1e-15);
        close(&v(&g), &v(&grad(f)(&x)), 1e-15);
        let ((val2, aux), g2) = value_and_grad_with_aux(|x: &Tensor| (f(x), x.cos()))(&x);
        close(&v(&val2), &v(&val), 0.0);
        close(&v(&aux), &v(&x.cos()), 0.0);
        close(&v(&g2), &v(&g), 0.0);
        let (y, lin) = linearize(|x: &Tensor| x.sin() * x, &x);
        let t = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
        let (_, want) = jvp(|x: &Tensor| x.sin() * x, &x, &t);
        close(&v(&lin(&t)), &v(&want), 1e-15);
        close(&v(&lin(&(&t * 2.0))), &v(&(&want * 2.0)), 1e-15); // callable many times
        close(&v(&y), &v(&(x.sin() * &x)), 0.0);
    })
}

/// grad's ones seed is symbolic: it passes through sums, reshapes,
/// transposes and adds and makes `1 * c` just `c`. The gradients are the
/// same numbers, and a gradient that is such a `c` is a copy, never the
/// captured, auxiliary or input tensor itself.
#[test]
fn grad_seed_of_ones_needs_no_kernels_and_aliases_nothing() {
    on_each_device(|| {
        let x = x3();
        let c = Tensor::from_vec(vec![2.0f64, -3.0, 0.5], [3]);
        // through a sum: the gradient is c, a new tensor
        let g = grad(|x: &Tensor| (x * &c).sum())(&x);
        close(&v(&g), &v(&c), 0.0);
        assert!(!g.same_node(&c));
        g.add_scalar_(1.0);
        close(&v(&c), &[2.0, -3.0, 0.5], 0.0);
        // through a reshape, a transpose and an add
        let m = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
        let g = grad(|m: &Tensor| (m.reshape(&[3, 2]).t().reshape(&[2, 3]) + m * 2.0).sum())(&m);
        close(&v(&g), &[3.0; 6], 0.0);
        // a broadcast's transpose sums: each element was used four times
        let g = grad(|x: &Tensor| x.broadcast_to([4, 3]).sum())(&x);
        close(&v(&g), &[4.0; 3], 0.0);
        // a scalar function: identity, and a product with a captured scalar
        let s = Tensor::scalar(0.7f64);
        close(&v(&grad(|x: &Tensor| x.clone())(&s)), &[1.0], 0.0);
        let k = Tensor::scalar(-4.0f64);
        let g = grad(|x: &Tensor| x * &k)(&s);
        close(&v(&g), &[-4.0], 0.0);
        assert!(!g.same_node(&k));
        // the auxiliary output is not the gradient's storage either
        let ((_, aux), g) = value_and_grad_with_aux(|x: &Tensor| {
            let e = x.exp().stop_gradient();
            ((x * &e).sum(), e)
        })(&x);
        close(&v(&g), &v(&aux), 0.0);
        g.add_scalar_(1.0);
        close(&v(&aux), &v(&x.exp()), 0.0);
        // a scaled loss: the seed becomes the scale, then a broadcast and a
        // matrix product (which makes a new tensor)
        let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
        let w = Tensor::from_vec(vec![0.5f64, -1.0, 2.0], [3, 1]);
        let g = grad(|w: &Tensor| a.matmul(w).sum() * 0.5)(&w);
        close(&v(&g), &[2.5, 3.5, 4.5], 1e-15);
        let g = grad(|w: &Tensor| a.matmul(w).mean())(&w);
        close(&v(&g), &[2.5, 3.5, 4.5], 1e-15);
        // c through a reshape's transpose is still c's storage: copied
        let g = grad(|x: &Tensor| (x.reshape(&[3, 1]) * c.reshape(&[3, 1])).sum())(&x);
        close(&v(&g), &v(&c), 0.0);
        g.add_scalar_(1.0);
        close(&v(&c), &[2.0, -3.0, 0.5], 0.0);
        // and through a gather's transpose (a scatter into zeros): new
        let idx = Tensor::from_vec(vec![2i64, 0], [2]);
        let c2 = Tensor::from_vec(vec![5.0f64, 7.0], [2]);
        let g = grad(|x: &Tensor| (x.take(&idx, 0) * &c2).sum())(&x);
        close(&v(&g), &[7.0, 0.0, 5.0], 0.0);
        g.add_scalar_(1.0);
        close(&v(&c2), &[5.0, 7.0], 0.0);
        // the input itself: d/dx (x * x) for scalar x is x + x, a new tensor
        let g = grad(|x: &Tensor| x * x)(&s);
        close(&v(&g), &[1.4], 1e-15);
        // and the symbolic seed composes: second derivatives and vmap
        let d2 = grad(|x: &Tensor| grad(|x: &Tensor| (x * x * x).sum())(x).sum())(&x);
        close(&v(&d2), &v(&x).iter().map(|x| 6.0 * x).collect::<Vec<_>>(), 1e-12);
        let per = vmap(grad(|x: &Tensor| x.sin() * x))(&x);
        close(&v(&per), &v(&x).iter().map(|x| x.cos() * x + x.sin()).collect::<Vec<_>>(), 1e-12);
    })
}

#[test]
fn traced_programs_print_evaluate_and_transform() {
    on_each_device(|| {
        let x = x3();
        let prog = trace(f, &x);
        let text = prog.to_string();
        assert_eq!(text, "{ lambda ; a:f64[3]. let\n    b:f64[3] = sin a\n    c:f64[3] = mul b a\n    d:f64[] = reduce_sum[axes=(0)] c\n  in (d) }");
        close(&v(&prog.eval(std::slice::from_ref(&x)).unwrap()[0]), &v(&f(&x)), 0.0);
        // a program is transformed like any function
        let g = grad(|x: &Tensor| prog.eval(std::slice::from_ref(x)).unwrap().remove(0))(&x);
        close(&v(&g), &v(&grad(f)(&x)), 1e-15);
        let xs = Key::new(11).normal([4, 3], DType::F64);
        let vs = vmap(|x: &Tensor| prog.eval(std::slice::from_ref(x)).unwrap().remove(0))(&xs);
        close(&v(&vs), &v(&vmap(f)(&xs)), 1e-15);
        // constants fold: work that does not depend on the input is done once
        let c = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
        let p2 = trace(|x: &Tensor| x * &c.exp(), &x);
        assert_eq!(p2.eqns.len(), 1);
        assert_eq!(p2.consts.len(), 1);
        // a program of a gradient
        let pg = trace(grad(f), &x);
        close(&v(&pg.eval(std::slice::from_ref(&x)).unwrap()[0]), &v(&grad(f)(&x)), 1e-15);
    })
}

#[test]
fn jacobians_of_integer_outputs_are_refused() {
    on_each_device(|| {
        let e = catch(|| jacrev(|x: &Tensor| x.argmax(0))(&x3())).unwrap_err();
        assert!(e.to_string().contains("output <root> has dtype int64; Jacobians need floating-point values"), "{e}");
        let e = catch(|| jacfwd(|x: &Tensor| (x.sin(), x.argmax(0)))(&x3())).unwrap_err();
        assert!(e.to_string().contains("output .1 has dtype int64; Jacobians need floating-point values"), "{e}");
    })
}
