//! Collectives over named axes (`VmapOptions::axis_name`), against the
//! numbers JAX 0.10.2 gives for the same programs (`jax.vmap(...,
//! axis_name='i')` with `jax.lax.psum` and friends, float64 on the CPU;
//! each JAX expression is written beside its numbers), and against their
//! definitions where JAX has a gap xform fills.

use xform::lax::{all_gather, all_to_all, axis_index, axis_size, pmax, pmean, pmin, ppermute, psum, psum_scatter};
use xform::{
    cond, grad, jacfwd, jit, jvp, trace, try_vmap_with, vmap, vmap_with, DType, ErrorKind, OrRaise, Tensor, VmapOptions,
};

fn named(name: &str) -> VmapOptions {
    VmapOptions::new().axis_name(name)
}

fn v64(x: &[f64]) -> Tensor {
    Tensor::from_vec(x.to_vec(), [x.len()])
}

fn close(got: &Tensor, want: &[f64], tol: f64) {
    let g = got.to_vec_f64();
    assert_eq!(g.len(), want.len(), "{g:?} vs {want:?}");
    for (a, b) in g.iter().zip(want) {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{g:?} vs {want:?}");
    }
}

#[test]
fn reductions_over_the_mapped_axis() {
    let xs = v64(&[1.0, 2.0, 3.0, 4.0]);
    // jax.vmap(lambda x: lax.psum(x, 'i'), axis_name='i')(xs) -> [10, 10, 10, 10]
    close(&vmap_with(|x: &Tensor| psum(x, "i").or_raise(), named("i"))(&xs), &[10.0; 4], 0.0);
    // pmean -> 2.5; pmax -> 4; pmin -> 1
    close(&vmap_with(|x: &Tensor| pmean(x, "i").or_raise(), named("i"))(&xs), &[2.5; 4], 0.0);
    close(&vmap_with(|x: &Tensor| pmax(x, "i").or_raise(), named("i"))(&xs), &[4.0; 4], 0.0);
    close(&vmap_with(|x: &Tensor| pmin(x, "i").or_raise(), named("i"))(&xs), &[1.0; 4], 0.0);
    // int: psum(arange(4)) -> 6 (int32); pmean -> 1.5 (a true division); bool sums as int32
    let ints = Tensor::from_vec(vec![0i32, 1, 2, 3], [4]);
    let s = vmap_with(|x: &Tensor| psum(x, "i").or_raise(), named("i"))(&ints);
    assert_eq!((s.dtype(), s.to_vec::<i32>()), (DType::I32, vec![6; 4]));
    close(&vmap_with(|x: &Tensor| pmean(x, "i").or_raise(), named("i"))(&ints), &[1.5; 4], 0.0);
    let bools = Tensor::from_vec(vec![true, false, true, true], [4]);
    let s = vmap_with(|x: &Tensor| psum(x, "i").or_raise(), named("i"))(&bools);
    assert_eq!((s.dtype(), s.to_vec::<i32>()), (DType::I32, vec![3; 4]));
    // a value that does not vary along the axis: psum(c) = n c (psum(2., 'i') -> 8), pmax(c) = c
    let opts = named("i").in_axes(None::<isize>).axis_size(4).out_axes(None::<isize>);
    let c = Tensor::scalar(2.0f64);
    assert_eq!(vmap_with(|c: &Tensor| psum(c, "i").or_raise(), opts.clone())(&c).item::<f64>(), 8.0);
    assert_eq!(vmap_with(|c: &Tensor| pmax(c, "i").or_raise(), opts.clone())(&c).item::<f64>(), 2.0);
    assert_eq!(vmap_with(|c: &Tensor| pmean(c, "i").or_raise(), opts)(&c).item::<f64>(), 2.0);
    // out_axes None: a reduction is the same for every example
    let total = vmap_with(|x: &Tensor| psum(x, "i").or_raise(), named("i").out_axes(None::<isize>))(&xs);
    assert_eq!(total.item::<f64>(), 10.0);
}

#[test]
fn rearrangements_over_the_mapped_axis() {
    let x = Tensor::arange(0.0, 8.0, 1.0, DType::F64).reshape(&[4, 2]);
    // all_gather(x, 'i', axis=0): every example gets the [4, 2] stack
    let g = vmap_with(|x: &Tensor| all_gather(x, "i", 0, false).or_raise(), named("i"))(&x);
    assert_eq!(g.shape().dims(), &[4, 4, 2]);
    close(&g.select(0, 2), &(0..8).map(|k| k as f64).collect::<Vec<_>>(), 0.0);
    // axis=1 (and -1): [2, 4]
    let g = vmap_with(|x: &Tensor| all_gather(x, "i", -1, false).or_raise(), named("i"))(&x);
    assert_eq!(g.shape().dims(), &[4, 2, 4]);
    close(&g.select(0, 3), &[0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0], 0.0);
    // tiled: concatenated, [8]
    let g = vmap_with(|x: &Tensor| all_gather(x, "i", 0, true).or_raise(), named("i"))(&x);
    close(&g.select(0, 1), &(0..8).map(|k| k as f64).collect::<Vec<_>>(), 0.0);

    // psum_scatter(arange(16).reshape(4,4), 'i') -> [24, 28, 32, 36]
    let y = Tensor::arange(0.0, 16.0, 1.0, DType::F64).reshape(&[4, 4]);
    let s = vmap_with(|x: &Tensor| psum_scatter(x, "i", 0, false).or_raise(), named("i"))(&y);
    close(&s, &[24.0, 28.0, 32.0, 36.0], 0.0);
    // tiled on (4, 8) -> [[48, 52], [56, 60], [64, 68], [72, 76]]
    let y = Tensor::arange(0.0, 32.0, 1.0, DType::F64).reshape(&[4, 8]);
    let s = vmap_with(|x: &Tensor| psum_scatter(x, "i", 0, true).or_raise(), named("i"))(&y);
    close(&s, &[48.0, 52.0, 56.0, 60.0, 64.0, 68.0, 72.0, 76.0], 0.0);
    // unmapped [0, 1, 2, 3] -> [0, 4, 8, 12]
    let opts = named("i").in_axes(None::<isize>).axis_size(4);
    let s = vmap_with(|x: &Tensor| psum_scatter(x, "i", 0, false).or_raise(), opts)(&v64(&[0.0, 1.0, 2.0, 3.0]));
    close(&s, &[0.0, 4.0, 8.0, 12.0], 0.0);
    // JAX does not check the scattered axis's size under vmap; xform does
    let e = try_vmap_with(|x: &Tensor| psum_scatter(x, "i", 0, false).or_raise(), named("i"))(&Tensor::zeros(
        [4, 3],
        DType::F64,
    ))
    .unwrap_err();
    assert!(e.to_string().contains("must be equal to the size of the named axis 'i' (4)"), "{e}");

    // all_to_all: out_k[j] = x_j[k] (a transpose between the examples and axis 0)
    let z = Tensor::arange(0.0, 9.0, 1.0, DType::F64).reshape(&[3, 3]);
    let t = vmap_with(|x: &Tensor| all_to_all(x, "i", 0, 0, false).or_raise(), named("i"))(&z);
    close(&t, &z.t().to_vec_f64(), 0.0);
    // a value that does not vary: example k gets slice k of it, n times (JAX's vmap gets the shape wrong)
    let opts = named("i").in_axes(None::<isize>).axis_size(3);
    let t = vmap_with(|x: &Tensor| all_to_all(x, "i", 0, 0, false).or_raise(), opts)(&v64(&[5.0, 6.0, 7.0]));
    assert_eq!(t.shape().dims(), &[3, 3]);
    close(&t, &[5.0, 5.0, 5.0, 6.0, 6.0, 6.0, 7.0, 7.0, 7.0], 0.0);

    // ppermute shift [(0,1),(1,2),(2,3),(3,0)] on [1,2,3,4] -> [4,1,2,3]
    let xs = v64(&[1.0, 2.0, 3.0, 4.0]);
    let shift = [(0, 1), (1, 2), (2, 3), (3, 0)];
    close(&vmap_with(|x: &Tensor| ppermute(x, "i", &shift).or_raise(), named("i"))(&xs), &[4.0, 1.0, 2.0, 3.0], 0.0);
    // a partial permutation: examples that receive nothing get zeros (as
    // on devices; JAX's vmap asserts a full permutation)
    close(
        &vmap_with(|x: &Tensor| ppermute(x, "i", &[(0, 1), (1, 2)]).or_raise(), named("i"))(&xs),
        &[0.0, 1.0, 2.0, 0.0],
        0.0,
    );
    // axis_index -> [0, 1, 2, 3] (int32); axis_size -> 4
    let idx = vmap_with(|x: &Tensor| axis_index("i").or_raise() + x.zeros_like().cast(DType::I32), named("i"))(&xs);
    assert_eq!((idx.dtype(), idx.to_vec::<i32>()), (DType::I32, vec![0, 1, 2, 3]));
    let n = vmap_with(|x: &Tensor| x * axis_size("i").or_raise() as f64, named("i"))(&xs);
    close(&n, &[4.0, 8.0, 12.0, 16.0], 0.0);
}

#[test]
fn nested_names() {
    // vmap over 'i' (2) of vmap over 'j' (3): psum over one name, both, and
    // the linear index i * 3 + j ([[0,1,2],[3,4,5]] in JAX)
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F64).reshape(&[2, 3]);
    let over = |names: &'static [&'static str]| {
        vmap_with(move |r: &Tensor| vmap_with(move |e: &Tensor| psum(e, names).or_raise(), named("j"))(r), named("i"))
    };
    close(&over(&["j"])(&x), &[3.0, 3.0, 3.0, 12.0, 12.0, 12.0], 0.0);
    close(&over(&["i"])(&x), &[3.0, 5.0, 7.0, 3.0, 5.0, 7.0], 0.0);
    close(&over(&["i", "j"])(&x), &[15.0; 6], 0.0);
    let lin = vmap_with(
        |r: &Tensor| {
            vmap_with(
                |e: &Tensor| {
                    let i = axis_index("i").or_raise();
                    let j = axis_index("j").or_raise();
                    i * 3 + j + e.zeros_like().cast(DType::I32)
                },
                named("j"),
            )(r)
        },
        named("i"),
    )(&x);
    assert_eq!(lin.to_vec::<i32>(), vec![0, 1, 2, 3, 4, 5]);
    // the same index from axis_index over both names (JAX's tuple form;
    // the first name the slowest), and the reverse order
    let both = |names: [&'static str; 2]| {
        vmap_with(
            move |r: &Tensor| {
                vmap_with(move |e: &Tensor| axis_index(names).or_raise() + e.zeros_like().cast(DType::I32), named("j"))(
                    r,
                )
            },
            named("i"),
        )(&x)
    };
    assert_eq!(both(["i", "j"]).to_vec::<i32>(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(both(["j", "i"]).to_vec::<i32>(), vec![0, 2, 4, 1, 3, 5]);
    // an unnamed map between: the collective reaches the outer name
    let mid = vmap_with(|r: &Tensor| vmap(|e: &Tensor| psum(e, "i").or_raise())(r), named("i"))(&x);
    close(&mid, &[3.0, 5.0, 7.0, 3.0, 5.0, 7.0], 0.0);
    // the inner map of one name shadows the outer
    let shadow = vmap_with(|r: &Tensor| vmap_with(|e: &Tensor| psum(e, "i").or_raise(), named("i"))(r), named("i"))(&x);
    close(&shadow, &[3.0, 3.0, 3.0, 12.0, 12.0, 12.0], 0.0);
}

#[test]
fn gradients_follow_jax() {
    let xs = v64(&[1.0, 2.0, 3.0, 4.0]);
    // vmap(grad(lambda x: psum(x, 'i')), axis_name='i')(xs) -> [4, 4, 4, 4]
    let g = vmap_with(grad(|x: &Tensor| psum(x, "i").or_raise()), named("i"))(&xs);
    close(&g, &[4.0; 4], 0.0);
    // vmap(grad(lambda x: psum(x, 'i') ** 2)) -> [80, 80, 80, 80] (n * 2 S)
    let g = vmap_with(grad(|x: &Tensor| psum(x, "i").or_raise().powi(2)), named("i"))(&xs);
    close(&g, &[80.0; 4], 1e-15);
    // grad(lambda xs: vmap(lambda x: psum(x, 'i') ** 2, axis_name='i')(xs).sum()) -> the same
    let outer = grad(|xs: &Tensor| vmap_with(|x: &Tensor| psum(x, "i").or_raise().powi(2), named("i"))(xs).sum());
    close(&outer(&xs), &[80.0; 4], 1e-15);
    // x * psum(x): [20, ...] both ways
    let g = vmap_with(grad(|x: &Tensor| x * psum(x, "i").or_raise()), named("i"))(&xs);
    close(&g, &[20.0; 4], 1e-15);
    // with xs = [10, 20, 30]: grad(pmean(x)^2) -> [40, 40, 40]; grad((x - pmean(x))^2) -> [-20, 0, 20]
    let ys = v64(&[10.0, 20.0, 30.0]);
    close(&vmap_with(grad(|x: &Tensor| pmean(x, "i").or_raise().powi(2)), named("i"))(&ys), &[40.0; 3], 1e-15);
    let g = vmap_with(grad(|x: &Tensor| (x - pmean(x, "i").or_raise()).powi(2)), named("i"))(&ys);
    close(&g, &[-20.0, 0.0, 20.0], 1e-15);
    // grad(sum vmap(x * axis_index)) -> [0, 1, 2, 3]
    let g = grad(|xs: &Tensor| {
        vmap_with(|x: &Tensor| x * axis_index("i").or_raise().cast(DType::F64), named("i"))(xs).sum()
    })(&xs);
    close(&g, &[0.0, 1.0, 2.0, 3.0], 0.0);
    // jvp: vmap(jvp(psum)) with tangent 1 -> [4, 4, 4, 4]; jacfwd(vmap psum) = ones(4, 4)
    let t = vmap_with(|x: &Tensor| jvp(|x: &Tensor| psum(x, "i").or_raise(), x, &x.ones_like()).1, named("i"))(&xs);
    close(&t, &[4.0; 4], 0.0);
    let j = jacfwd(|xs: &Tensor| vmap_with(|x: &Tensor| psum(x, "i").or_raise(), named("i"))(xs))(&xs);
    close(&j, &[1.0; 16], 0.0);
    // ppermute's transpose is the inverse permutation: ct [1,2,3] under
    // perm [(0,2),(1,0),(2,1)] gives [3, 1, 2]
    let perm = [(0, 2), (1, 0), (2, 1)];
    let ct = v64(&[1.0, 2.0, 3.0]);
    let g =
        grad(|xs: &Tensor| (vmap_with(|x: &Tensor| ppermute(x, "i", &perm).or_raise(), named("i"))(xs) * &ct).sum())(
            &v64(&[0.5, -1.0, 2.0]),
        );
    close(&g, &[3.0, 1.0, 2.0], 0.0);
    // pmax has a JVP in xform (JAX raises): ties share the tangent evenly
    let tie = v64(&[1.0, 3.0, 3.0]);
    let g = grad(|xs: &Tensor| vmap_with(|x: &Tensor| pmax(x, "i").or_raise(), named("i"))(xs).sum())(&tie);
    close(&g, &[0.0, 1.5, 1.5], 1e-15);
}

#[test]
fn transforms_compose_with_collectives() {
    let xs = v64(&[1.0, 2.0, 3.0, 4.0]);
    // jit outside the map, and inside it (the program runs through bind,
    // where the map applies the collective), at two sizes: the cache is keyed
    // by the named axes in force
    let f = jit(|xs: &Tensor| vmap_with(|x: &Tensor| all_gather(x, "i", 0, false).or_raise(), named("i"))(xs));
    assert_eq!(f(&xs).shape().dims(), &[4, 4]);
    let inner = jit(|x: &Tensor| all_gather(x, "i", 0, false).or_raise().sum() * x);
    let g = vmap_with(|x: &Tensor| inner(x), named("i"));
    close(&g(&xs), &[10.0, 20.0, 30.0, 40.0], 0.0);
    close(&g(&v64(&[1.0, 2.0])), &[3.0, 6.0], 0.0);
    close(&g(&xs), &[10.0, 20.0, 30.0, 40.0], 0.0);
    // jit on concrete values inside the map: still the map's collective
    let c = Tensor::scalar(2.0f64);
    let on_const = jit(|c: &Tensor| psum(c, "i").or_raise());
    let r = vmap_with(|x: &Tensor| x * on_const(&c), named("i"))(&xs);
    close(&r, &[8.0, 16.0, 24.0, 32.0], 0.0);
    // trace inside the map records the collective
    let p = vmap_with(
        |x: &Tensor| {
            let p = trace(|x: &Tensor| psum(x, "i").or_raise(), x);
            assert!(p.to_string().contains("psum[axes=(i)]"), "{p}");
            p.eval(std::slice::from_ref(x)).or_raise()[0].clone()
        },
        named("i"),
    )(&xs);
    close(&p, &[10.0; 4], 0.0);
    // control flow: a branch with a collective, under the map
    let r = vmap_with(
        |x: &Tensor| {
            let pred = x.gt(&Tensor::scalar(2.0f64));
            cond(&pred, |x: &Tensor| psum(x, "i").or_raise(), |x: &Tensor| x * 0.0, x)
        },
        named("i"),
    )(&xs);
    close(&r, &[0.0, 0.0, 10.0, 10.0], 0.0);
}

#[test]
fn unbound_names_are_clear_errors() {
    let xs = v64(&[1.0, 2.0]);
    let e = try_vmap_with(|x: &Tensor| psum(x, "j").or_raise(), named("i"))(&xs).unwrap_err();
    assert!(matches!(&e.kind, ErrorKind::UnboundAxis { name, .. } if name == "j"), "{e}");
    assert!(e.to_string().contains("unbound axis name 'j'") && e.to_string().contains("'i' (size 2)"), "{e}");
    assert_eq!(e.op, "psum");
    let e = xform::catch(|| psum(&xs, "i").or_raise()).unwrap_err();
    assert!(matches!(&e.kind, ErrorKind::UnboundAxis { .. }), "{e}");
    let e = xform::catch(|| axis_index("i").or_raise()).unwrap_err();
    assert!(e.to_string().contains("unbound axis name 'i'"), "{e}");
    let e = xform::catch(|| jit(|x: &Tensor| all_gather(x, "k", 0, false).or_raise())(&xs)).unwrap_err();
    assert!(e.to_string().contains("unbound axis name 'k'"), "{e}");
    // after an error the stack is restored: the next map works
    close(&vmap_with(|x: &Tensor| psum(x, "i").or_raise(), named("i"))(&xs), &[3.0, 3.0], 0.0);
    // chunking would split the axis a collective sees
    let e = try_vmap_with(|x: &Tensor| psum(x, "i").or_raise(), named("i").chunk_size(1))(&xs).unwrap_err();
    assert!(e.to_string().contains("chunk_size"), "{e}");
}

/// `max |a - b|` over every element of two lists of tensors.
fn max_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.shape(), y.shape());
            x.to_vec_f64().into_iter().zip(y.to_vec_f64()).map(|(p, q)| (p - q).abs()).collect::<Vec<_>>()
        })
        .fold(0.0, f64::max)
}

/// BatchNorm with statistics across the mapped axis (flax's `axis_name`):
/// per-example code gives the stacked batch's result, running statistics
/// and (summed over the examples) gradient, to f64 rounding.
#[test]
fn batch_norm_across_the_mapped_axis() {
    use xform::nn::{batch_norm, BatchNorm, BatchNormStats};
    let (n, d, c) = (6, 5, 3);
    let x = xform::Key::new(1).normal([n, d], DType::F64);
    let t = xform::Key::new(2).normal([n, c], DType::F64);
    let w = xform::Key::new(3).normal([d, c], DType::F64);
    let bn = BatchNorm::new(c, DType::F64).across("batch");
    let stats = BatchNormStats::new(c, DType::F64);
    // one example: h = x W, normalized across the batch, squared error
    let example = |(w, bn): &(Tensor, BatchNorm), x: &Tensor, t: &Tensor| {
        let (y, _) = bn.forward(&x.matmul(w), &stats, true);
        (y - t).powi(2).sum()
    };
    let batch = |(w, bn): &(Tensor, BatchNorm)| {
        let (y, _) = batch_norm(&x.matmul(w), bn.weight.as_ref(), bn.bias.as_ref(), &stats, true, 0.1, 1e-5);
        (y - &t).powi(2).sum()
    };
    // forward and running statistics equal the batch's
    let (y, s) = vmap_with(
        |x: &Tensor| bn.forward(&x.matmul(&w), &stats, true),
        named("batch").out_axes((0, None::<isize>)),
    )(&x);
    let (y_batch, s_batch) = batch_norm(&x.matmul(&w), bn.weight.as_ref(), bn.bias.as_ref(), &stats, true, 0.1, 1e-5);
    assert!(max_diff(&[y, s.mean, s.var], &[y_batch, s_batch.mean, s_batch.var]) < 1e-13);
    // per-example gradients, summed, are the batch loss's gradient
    let p = (w.clone(), bn.clone());
    let per = vmap_with(
        |(p, x, t): &((Tensor, BatchNorm), Tensor, Tensor)| grad(|p: &(Tensor, BatchNorm)| example(p, x, t))(p),
        named("batch").in_axes((None::<isize>, 0, 0)),
    )(&(p.clone(), x.clone(), t.clone()));
    let summed = [per.0.sum_axes(&[0], false), per.1.weight.unwrap().sum_axes(&[0], false)];
    let g = grad(batch)(&p);
    assert!(max_diff(&summed, &[g.0, g.1.weight.unwrap()]) < 1e-12);
    // evaluation uses the running statistics, like batch_norm's
    let y_eval = vmap_with(|x: &Tensor| bn.forward(&x.matmul(&w), &stats, false).0, named("batch"))(&x);
    let (y_eval_batch, _) = batch_norm(&x.matmul(&w), None, None, &stats, false, 0.1, 1e-5);
    assert!(max_diff(&[y_eval], &[y_eval_batch]) < 1e-13);
}

/// A contrastive (InfoNCE) loss: each example's function needs every
/// example's embedding (`all_gather`) and its own index (`axis_index`).
/// Per-example losses equal the batch formulation's rows; the summed
/// per-example gradients are the batch loss's gradient; and a part of the
/// model that does not mix examples (a regression head) keeps its exact
/// per-example gradients.
#[test]
fn info_nce_inside_a_per_example_function() {
    let (n, d, e) = (5, 4, 3);
    let tau = 0.5;
    let x = xform::Key::new(4).normal([n, d], DType::F64);
    let x2 = &x + xform::Key::new(5).normal([n, d], DType::F64) * 0.1;
    let y = xform::Key::new(6).normal([n], DType::F64);
    let params = (xform::Key::new(7).normal([d, e], DType::F64), xform::Key::new(8).normal([d], DType::F64));
    let embed = |w: &Tensor, v: &Tensor| {
        let z = v.matmul(w).tanh();
        let norm = (&z * &z).sum_axes(&[-1], true).sqrt();
        z / norm
    };
    // per example: InfoNCE against every example's second view + a head
    let example = |(w, head): &(Tensor, Tensor), a: &Tensor, b: &Tensor, y: &Tensor| {
        let z = embed(w, a);
        let zs = all_gather(&embed(w, b), "batch", 0, false).or_raise(); // [n, e]
        let logits = zs.matmul(&z) / tau; // [n]
        let me = axis_index("batch").or_raise();
        let k = axis_size("batch").or_raise();
        let onehot = Tensor::arange(0.0, k as f64, 1.0, DType::I32).eq(&me).cast(DType::F64);
        let nce = logits.logsumexp(0, false) - (&logits * onehot).sum();
        nce + (a.matmul(head) - y).powi(2)
    };
    let batch_rows = |(w, head): &(Tensor, Tensor)| {
        let (z, z2) = (embed(w, &x), embed(w, &x2));
        let logits = z.matmul(&z2.t()) / tau; // [n, n]
        let diag = (&logits * Tensor::eye(n, DType::F64)).sum_axes(&[1], false);
        logits.logsumexp(1, false) - diag + (x.matmul(head) - &y).powi(2)
    };
    let data = (x.clone(), x2.clone(), y.clone());
    let losses = vmap_with(
        |(p, (a, b, y)): &((Tensor, Tensor), (Tensor, Tensor, Tensor))| example(p, a, b, y),
        named("batch").in_axes((None::<isize>, 0)),
    )(&(params.clone(), data.clone()));
    assert!(max_diff(&[losses], &[batch_rows(&params)]) < 1e-13);
    let per = vmap_with(
        |(p, (a, b, y)): &((Tensor, Tensor), (Tensor, Tensor, Tensor))| {
            grad(|p: &(Tensor, Tensor)| example(p, a, b, y))(p)
        },
        named("batch").in_axes((None::<isize>, 0)),
    )(&(params.clone(), data.clone()));
    let g = grad(|p: &(Tensor, Tensor)| batch_rows(p).sum())(&params);
    assert!(max_diff(&[per.0.sum_axes(&[0], false), per.1.sum_axes(&[0], false)], &[g.0, g.1]) < 1e-12);
    // the head's per-example gradients are those of the head alone
    let want = xform::vmap_axes(head_only_fn, (None::<isize>, 0, 0), 0)(&(params.1.clone(), x.clone(), y.clone()));
    assert_eq!(per.1.to_vec_f64(), want.to_vec_f64());
}

fn head_only_fn((h, a, y): &(Tensor, Tensor, Tensor)) -> Tensor {
    grad(|h: &Tensor| (a.matmul(h) - y).powi(2))(h)
}

/// Reverse mode and second order through a collective: per example k,
/// d/dx_j psum(x)^2 = 2 S (jacrev); the Hessian of the summed loss
/// n S^2 is 2 n everywhere (hessian); jvp of grad agrees.
#[test]
fn jacrev_and_hessian_through_collectives() {
    let xs = v64(&[1.0, 2.0, 3.0]);
    let per_example = |xs: &Tensor| vmap_with(|x: &Tensor| psum(x, "i").or_raise().powi(2), named("i"))(xs);
    close(&xform::jacrev(per_example)(&xs), &[12.0; 9], 1e-15);
    let total = |xs: &Tensor| per_example(xs).sum();
    close(&xform::hessian(total)(&xs), &[6.0; 9], 1e-15);
    let (_, hv) = jvp(grad(total), &xs, &v64(&[1.0, 0.0, 0.0]));
    close(&hv, &[6.0; 3], 1e-15);
    // all_gather's transpose is psum_scatter: the gradient of a weighted sum
    // of every example's gathered rows is each example's weight column sum
    let w = Tensor::arange(0.0, 9.0, 1.0, DType::F64).reshape(&[3, 3]);
    let g = grad(|xs: &Tensor| {
        (vmap_with(|x: &Tensor| all_gather(x, "i", 0, false).or_raise(), named("i"))(xs) * &w).sum()
    })(&xs);
    close(&g, &[9.0, 12.0, 15.0], 0.0);
}

/// ppermute of a value that does not vary along the axis: a full
/// permutation leaves it (unbatched), a partial one zeroes the examples
/// that receive nothing.
#[test]
fn ppermute_of_an_unvarying_value() {
    let c = Tensor::scalar(2.0f64);
    let opts = named("i").in_axes(None::<isize>).axis_size(3);
    let full = vmap_with(|c: &Tensor| ppermute(c, "i", &[(0, 1), (1, 2), (2, 0)]).or_raise(), opts.clone())(&c);
    close(&full, &[2.0; 3], 0.0);
    let partial = vmap_with(|c: &Tensor| ppermute(c, "i", &[(0, 2)]).or_raise(), opts)(&c);
    close(&partial, &[0.0, 0.0, 2.0], 0.0);
}
