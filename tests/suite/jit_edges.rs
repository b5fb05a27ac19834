//! jit at the edges: views and broadcasts as arguments, empty and scalar
//! shapes, integers, bools and half floats, NaN, infinities and signed
//! zeros, tile boundaries, errors and panics inside `f`, mutation through
//! views, results that must not share storage that eager results would
//! not (NOTE: [output aliasing]), and a small cache under contention.
//! Values are compared with eager execution bit for bit (any NaN equals
//! any NaN).
use crate::harness::v;
use xform::core::interp::stack_depth;
use xform::prelude::*;
use xform::{jitted, try_jit, JitOptions};

fn bits(t: &Tensor) -> Vec<u64> {
    v(t).iter().map(|x| x.to_bits()).collect()
}

#[track_caller]
fn same(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!((got.shape(), got.dtype()), (want.shape(), want.dtype()), "{what}");
    let g = v(got);
    let w = v(want);
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{what}: element {k}: jit {a} eager {b}");
    }
}

/// Transposed, sliced, flipped, broadcast and narrowed arguments give eager's
/// bits, called plainly and donated (a donated view's base keeps its values).
#[test]
fn views_as_inputs() {
    let base = Key::new(1).normal([37, 45], DType::F32);
    let f = |x: &Tensor| ((x * 2.0 + 1.0).tanh() * x).exp() - x.sum_axes(&[1], true);
    for (name, x) in [
        ("t", base.t()),
        ("slice", base.slice(s![3.., ..40])),
        ("flip", base.flip(&[1])),
        ("col bcast", base.slice(s![.., 2]).broadcast_to([29, 37]).t()),
        ("narrow", base.narrow(1, 5, 30)),
    ] {
        let j = jitted(f, JitOptions::default());
        let want = f(&x);
        for _ in 0..3 {
            same(name, &j.call(&x), &want);
        }
        // donated view: base must keep its values
        let keep = bits(&base);
        same(name, &j.call_donated(x.clone()), &want);
        assert_eq!(bits(&base), keep, "{name}: base written over");
    }
}

/// Empty arrays (a sum of nothing is zero) and scalars.
#[test]
fn zero_size_and_scalars() {
    let f = |x: &Tensor| ((x.exp() * 2.0).sum(), x * x + 1.0);
    for x in [
        Tensor::zeros([0], DType::F32),
        Tensor::zeros([0, 3], DType::F64),
        Tensor::scalar(1.5f32),
        Tensor::zeros([3, 0, 2], DType::F32),
    ] {
        let j = jitted(f, JitOptions::default());
        let (a, b) = f(&x);
        for _ in 0..2 {
            let (ja, jb) = j.call(&x);
            same("sum", &ja, &a);
            same("sq", &jb, &b);
        }
    }
}

/// Wrapping integer arithmetic, comparisons, and f16/bf16 chains and sums.
#[test]
fn ints_bools_halves() {
    let x = Tensor::from_vec(vec![i32::MAX - 1, -5, 7, i32::MIN, 0, 3], [6]);
    let f = |x: &Tensor| (x * 3 + 7, (x * 2).sum(), x.gt(&(-x)));
    let j = jitted(f, JitOptions::default());
    let (a, b, c) = f(&x);
    let (ja, jb, jc) = j.call(&x);
    assert_eq!(ja.to_vec::<i32>(), a.to_vec::<i32>());
    assert_eq!(jb.to_vec::<i32>(), b.to_vec::<i32>());
    assert_eq!(jc.to_vec::<bool>(), c.to_vec::<bool>());
    for dt in [DType::F16, DType::BF16] {
        let x = Key::new(2).normal([257], DType::F32).cast(dt);
        let g = |x: &Tensor| ((x * 1.3 + 0.7).sin() * x - x.exp()).tanh() / (x * x + 1.0);
        let j = jitted(g, JitOptions::default());
        same("half", &j.call(&x), &g(&x));
        let h = |x: &Tensor| (x * 3.0).sum();
        let jh = jitted(h, JitOptions::default());
        same("half sum", &jh.call(&x), &h(&x));
    }
}

/// An argument, a constant and one value computed twice (merged by CSE) as
/// outputs: a write to one result reaches no other result, no argument and
/// no later call.
#[test]
fn identity_constant_duplicate_outputs() {
    let x = Key::new(3).normal([5, 4], DType::F32);
    let j = jitted(|x: &Tensor| (x.clone(), Tensor::ones([3], DType::F32), x.exp(), x.exp()), JitOptions::default());
    for _ in 0..2 {
        let (a, b, c, d) = j.call(&x);
        same("id", &a, &x);
        same("const", &b, &Tensor::ones([3], DType::F32));
        same("dup", &c, &x.exp());
        same("dup2", &d, &x.exp());
        // writing one output in place must not change the others nor x
        let keep = bits(&x);
        c.add_scalar_(1.0);
        same("dup2 after", &d, &x.exp());
        b.add_scalar_(1.0);
        let (_, b2, _, _) = j.call(&x);
        same("const after", &b2, &Tensor::ones([3], DType::F32));
        assert_eq!(bits(&x), keep);
        // `x.clone()` is x itself, in eager as under jit
        assert!(a.same_node(&x));
    }
}

/// A donated argument that is also returned keeps its values.
#[test]
fn donated_returned() {
    let j = jitted(|x: &Tensor| (x.clone(), x * 2.0), JitOptions::default());
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    let (a, b) = j.call_donated(x);
    assert_eq!(a.to_vec::<f32>(), vec![1.0, 2.0, 3.0]);
    assert_eq!(b.to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
    let j = jitted(|x: &Tensor| (x * 2.0, x.clone()), JitOptions::default());
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    let (b, a) = j.call_donated(x);
    assert_eq!(a.to_vec::<f32>(), vec![1.0, 2.0, 3.0]);
    assert_eq!(b.to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
}

/// A shape error inside `f` names the op, the shapes and jit; the
/// interpreter stack is restored and the cache still works.
#[test]
fn errors_restore() {
    let f = try_jit(|x: &Tensor| x.matmul(x));
    let bad = Tensor::zeros([2, 3], DType::F32);
    let e = f(&bad).unwrap_err();
    assert!(e.to_string().contains("matmul") && e.to_string().contains("jit"), "{e}");
    assert_eq!(stack_depth(), 0);
    let ok = Tensor::ones([2, 2], DType::F32);
    assert_eq!(f(&ok).unwrap().to_vec::<f32>(), vec![2.0; 4]);
    let e2 = f(&bad).unwrap_err();
    assert_eq!(e2.to_string(), e.to_string());
    assert_eq!(f(&ok).unwrap().to_vec::<f32>(), vec![2.0; 4]);
}

/// Broadcasts of columns against rows around the fused tile size.
#[test]
fn broadcast_shapes_tiles() {
    for (r, c) in [(1usize, 1usize), (4097, 1), (1, 4097), (33, 129), (300, 10)] {
        let a = Key::new(4).normal([r, 1], DType::F32);
        let b = Key::new(5).normal([1, c], DType::F32);
        let f = |(a, b): &(Tensor, Tensor)| {
            let m = (a + b).maximum(&(a * b));
            (m.exp() / (m.exp().sum_axes(&[1], true)), m.max_axes(&[0], false), (a - b).relu())
        };
        let j = jitted(f, JitOptions::default());
        let (x, y, z) = f(&(a.clone(), b.clone()));
        let (jx, jy, jz) = j.call(&(a, b));
        same("softmax", &jx, &x);
        same("max", &jy, &y);
        same("relu", &jz, &z);
    }
}

/// NaN, infinities, signed zeros and subnormals through the exact
/// simplifications (`x * 1`, `x - 0`, `neg(neg(x))`) and through `x + 0`,
/// which is not simplified (`-0 + 0` is `+0`): eager's bits.
#[test]
fn nan_inf_signed_zero() {
    let x = Tensor::from_vec(
        vec![f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, 1.0, -1.0, f32::MIN_POSITIVE / 4.0],
        [8],
    );
    let f =
        |x: &Tensor| (x.relu(), x * 1.0, x + 0.0, x - 0.0, x.maximum(&(-x)), x.max_axes(&[0], false), x * 0.0, -(-x));
    let j = jitted(f, JitOptions::default());
    let (a, b, c, d, e, g, h, i) = f(&x);
    let (ja, jb, jc, jd, je, jg, jh, ji) = j.call(&x);
    same("relu", &ja, &a);
    same("x*1", &jb, &b);
    same("x+0", &jc, &c);
    same("x-0", &jd, &d);
    same("max", &je, &e);
    same("maxr", &jg, &g);
    same("x*0", &jh, &h);
    same("negneg", &ji, &i);
}

/// `x * 1` and `-(-x)` simplify to `x`, yet their results are fresh as in
/// eager; `x` returned as is is the caller's tensor; a reshape is a view.
#[test]
fn simplified_outputs_do_not_alias_arguments() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    let j = jitted(|x: &Tensor| (x * 1.0, -(-x), x.clone(), x.reshape(&[3, 1])), JitOptions::default());
    let (a, b, c, d) = j.call(&x);
    a.add_scalar_(10.0);
    b.add_scalar_(100.0);
    assert_eq!(x.to_vec::<f32>(), vec![1.0, 2.0, 3.0]);
    c.add_scalar_(1.0);
    assert_eq!(x.to_vec::<f32>(), vec![2.0, 3.0, 4.0], "x.clone() is x, as in eager");
    assert!(d.shares_storage(&x), "a reshape of x is a view, as in eager");
}

/// Writes to a view of an argument, a mutated argument returned (the
/// caller's tensor, as eager), an argument that is a strided view of a
/// bigger tensor (written back through it), and donation with mutation.
#[test]
fn mutation_edges() {
    // a write to a view of the argument, and the argument returned
    let f = |x: &Tensor| {
        x.slice(s![1..3]).mul_scalar_(2.0);
        let y = x.exp();
        x.add_scalar_(1.0);
        (x.clone(), y)
    };
    let j = jitted(f, JitOptions::default());
    let base = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], [6]);
    let want_x = base.copy();
    let (wx, wy) = f(&want_x);
    for _ in 0..1 {
        let x = base.copy();
        let (gx, gy) = j.call(&x);
        assert_eq!(x.to_vec::<f32>(), want_x.to_vec::<f32>());
        assert_eq!(gx.to_vec::<f32>(), wx.to_vec::<f32>());
        assert_eq!(gy.to_vec::<f32>(), wy.to_vec::<f32>());
        assert!(gx.same_node(&x), "the mutated argument returned is the caller's tensor");
    }
    // the argument is a strided view of a bigger tensor: written back through it
    let big = Tensor::arange(0.0, 12.0, 1.0, DType::F32).reshape_to(vec![3, 4]);
    let col = big.slice(s![.., 1]);
    let g = jitted(
        |x: &Tensor| {
            x.mul_scalar_(10.0);
            x.sum()
        },
        JitOptions::default(),
    );
    let s1 = g.call(&col);
    assert_eq!(s1.item::<f32>(), 150.0);
    assert_eq!(big.to_vec::<f32>(), vec![0., 10., 2., 3., 4., 50., 6., 7., 8., 90., 10., 11.]);
    // donated and mutated
    let x = base.copy();
    let (gx, _) = j.call_donated(x.clone());
    assert_eq!(x.to_vec::<f32>(), want_x.to_vec::<f32>());
    assert_eq!(gx.to_vec::<f32>(), wx.to_vec::<f32>());
}

/// A panic in `f` propagates and leaves the stack and cache usable;
/// grad of jit on an empty input; vmap of jit over axis 1.
#[test]
fn user_panic_and_transforms() {
    let f = xform::try_jit(|x: &Tensor| {
        if x.shape()[0] == 3 {
            panic!("user panic in f");
        }
        x.exp()
    });
    let r = std::panic::catch_unwind(|| f(&Tensor::zeros([3], DType::F32)));
    assert!(r.is_err(), "the user's panic propagates");
    assert_eq!(stack_depth(), 0);
    assert_eq!(f(&Tensor::zeros([2], DType::F32)).unwrap().to_vec::<f32>(), vec![1.0, 1.0]);
    // grad of jit on an empty input; vmap of jit over axis 1
    let h = xform::jit(|x: &Tensor| (x.sin() * x).sum());
    let gz = grad(&h)(&Tensor::zeros([0], DType::F32));
    assert_eq!(gz.shape().dims(), &[0][..]);
    let m = Key::new(9).normal([3, 5], DType::F64);
    let hv = xform::jit(|x: &Tensor| (x.sin() * x).sum_axes(&[0], false));
    let got = vmap_axes(&hv, 1, 0)(&m);
    let want = (m.sin() * &m).sum_axes(&[0], false);
    assert_eq!(bits(&got), bits(&want));
}

/// Six threads calling with five signatures through a cache of two.
#[test]
fn threads_evicting() {
    let j = std::sync::Arc::new(jitted(
        |x: &Tensor| (x.exp() * 2.0 + x).sum_axes(&[0], false),
        JitOptions { cache_size: 2, ..JitOptions::default() },
    ));
    std::thread::scope(|s| {
        for t in 0..6usize {
            let j = j.clone();
            s.spawn(move || {
                for r in 0..20usize {
                    let n = 1 + (t + r) % 5;
                    let x = Key::new((t * 100 + r) as u64).normal([n, 3], DType::F32);
                    let want = (x.exp() * 2.0 + &x).sum_axes(&[0], false);
                    assert_eq!(bits(&j.call(&x)), bits(&want));
                }
            });
        }
    });
    let st = j.stats();
    assert_eq!(st.hits + st.misses, 120);
    assert!(j.entries().len() <= 2);
    j.clear();
    assert_eq!(j.entries().len(), 0);
}

type Mlp = (Tensor, Tensor, Tensor, Tensor);

fn mlp_loss(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    let h = (x.matmul(&p.0) + &p.1).tanh();
    let logits = h.matmul(&p.2) + &p.3;
    logits.logsumexp(0, false) - logits.take(y, 0)
}

/// Weights `[d_in, h]`, `[h, c]` scaled by `scale`, biases unscaled.
fn mlp_params(k: &Key, [d_in, h, c]: [usize; 3], scale: f64) -> Mlp {
    (
        k.fold_in(1).normal([d_in, h], DType::F32) * scale,
        k.fold_in(2).normal([h], DType::F32),
        k.fold_in(3).normal([h, c], DType::F32) * scale,
        k.fold_in(4).normal([c], DType::F32),
    )
}

fn per_sample((p, xs, ys): &(Mlp, Tensor, Tensor)) -> Mlp {
    let per_row = |(x, y): &(Tensor, Tensor)| grad(|p: &Mlp| mlp_loss(p, x, y))(p);
    vmap(per_row)(&(xs.clone(), ys.clone()))
}

/// Per-sample gradients at batch sizes around the batch split (one row
/// and odd sizes replayed whole, 64 and 129 split): bit-identical to
/// eager.
#[test]
fn per_sample_grads_at_odd_batch_sizes() {
    let k = Key::new(5);
    let p = mlp_params(&k, [64, 64, 5], 0.3);
    let j = jitted(per_sample, JitOptions::default());
    for b in [1usize, 2, 3, 33, 64, 129] {
        let args = (
            p.clone(),
            k.fold_in(10 + b as u32).normal([b, 64], DType::F32),
            k.fold_in(99).randint([b], 0, 5, DType::I32),
        );
        let want = per_sample(&args);
        for _ in 0..2 {
            let got = j.call(&args);
            for (g, w) in [(&got.0, &want.0), (&got.1, &want.1), (&got.2, &want.2), (&got.3, &want.3)] {
                same(&format!("batch {b}"), g, w);
            }
        }
    }
    let split: Vec<_> = j.entries().iter().map(|e| e.plan.batch_split).collect();
    assert_eq!(split, [None, None, None, None, Some((32, 32)), Some((65, 64))]);
}

/// Per-sample gradients of a two-layer MLP of W1 small's batch and width
/// (B = h = 64, d_in = 64) take the batch split (their outputs are fresh,
/// distinct per-parameter gradients: nothing for the split to break),
/// with eager's bits.
#[test]
fn per_sample_grads_take_the_batch_split() {
    let k = Key::new(7);
    let p = mlp_params(&k, [64, 64, 10], 0.2);
    let args = (p, k.fold_in(5).normal([64, 64], DType::F32), k.fold_in(6).randint([64], 0, 10, DType::I32));
    let j = jitted(per_sample, JitOptions::default());
    let (got, want) = (j.call(&args), per_sample(&args));
    for (g, w) in [(&got.0, &want.0), (&got.1, &want.1), (&got.2, &want.2), (&got.3, &want.3)] {
        same("per-sample gradient", g, w);
    }
    assert_eq!(j.entries()[0].plan.batch_split, Some((32, 32)));
}

/// W1 small itself (three tanh layers 32-64-64-10, B = 64, as the
/// benchmark's `jit(vmap(grad))`): its replay runs as two halves of the
/// batch (the README's claim), with eager's bits.
#[test]
fn w1_small_takes_the_batch_split() {
    use crate::harness::{w1_params, w1_per_sample as per_sample};
    let k = Key::new(11);
    let args = (
        w1_params(&k, DType::F32),
        k.fold_in(7).normal([64, 32], DType::F32),
        k.fold_in(8).randint([64], 0, 10, DType::I32),
    );
    let j = jitted(per_sample, JitOptions::default());
    let (got, want) = (j.call(&args), per_sample(&args));
    let pairs = [(&got.0, &want.0), (&got.1, &want.1), (&got.2, &want.2), (&got.3, &want.3), (&got.4, &want.4)];
    for (g, w) in pairs.into_iter().chain([(&got.5, &want.5)]) {
        same("W1 small per-sample gradient", g, w);
    }
    assert_eq!(j.entries()[0].plan.batch_split, Some((32, 32)));
}

/// Two donated arguments that are one tensor: neither result is computed
/// from a buffer the other wrote over.
#[test]
fn donated_arguments_that_alias_each_other() {
    let f = |(a, b): &(Tensor, Tensor)| ((a * 2.0 + 1.0).exp(), (b * 3.0 - 1.0).sin());
    let j = jitted(f, JitOptions::default());
    let x = Key::new(6).normal([64, 64], DType::F32);
    let (wa, wb) = f(&(x.clone(), x.clone()));
    let keep = bits(&x);
    let (ga, gb) = j.call_donated((x.clone(), x.clone()));
    same("a", &ga, &wa);
    same("b", &gb, &wb);
    assert_eq!(bits(&x), keep);
    let y = x.copy();
    let (ga, gb) = j.call_donated((y.clone(), y));
    same("a donated", &ga, &wa);
    same("b donated", &gb, &wb);
}

/// Control flow inside jit at edge lengths: a scan over zero steps, a
/// while loop that never runs, a cond on a scalar.
#[test]
fn control_flow_at_edge_lengths() {
    let f = |(c, xs): &(Tensor, Tensor)| {
        let (c2, ys) = scan(|c: &Tensor, x: &Tensor| (c * x + 1.0, c.exp()), c, xs);
        let w = while_loop(|c: &Tensor| c.sum().gt_scalar(100.0), |c: &Tensor| c * 0.5, &c2);
        (c2, ys, w)
    };
    let j = jitted(f, JitOptions::default());
    for n in [0usize, 1, 5] {
        let args = (Tensor::from_vec(vec![0.5f32, 2.0], [2]), Key::new(7).normal([n, 2], DType::F32));
        let (a, b, c) = f(&args);
        let (ja, jb, jc) = j.call(&args);
        same("carry", &ja, &a);
        same("ys", &jb, &b);
        same("while", &jc, &c);
    }
}

/// A write to a tensor `f` captures (not an argument) is a clear error on
/// every call, and the tensor keeps its values; jit of an empty `jacrev`.
#[test]
fn writing_a_captured_tensor_is_an_error() {
    let running = Tensor::zeros([3], DType::F32);
    let f = try_jit(|x: &Tensor| {
        running.add_(&(x * 0.1));
        x.exp()
    });
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    for _ in 0..2 {
        let e = f(&x).unwrap_err().to_string();
        assert!(e.contains("add_") && e.contains("jit"), "{e}");
        assert_eq!(running.to_vec::<f32>(), vec![0.0; 3]);
        assert_eq!(stack_depth(), 0);
    }
    let h = try_jit(|x: &Tensor| xform::jacrev(|y: &Tensor| y.exp())(x));
    assert_eq!(h(&Tensor::zeros([0], DType::F32)).unwrap().shape().dims(), &[0, 0][..]);
}

/// Arguments that overlap in memory where the function writes one in
/// place: jit treats each argument as its own value, so the write would not
/// be seen through the other as it is eagerly; the call is refused with an
/// error that names both leaves, before anything is written, and disjoint
/// views of one buffer still run.
#[test]
fn writes_to_arguments_that_overlap_are_refused() {
    let g = |(a, b): &(Tensor, Tensor)| {
        a.add_scalar_(1.0);
        b.add_scalar_(10.0);
        a.sum()
    };
    let j = try_jit(g);
    let x = Tensor::zeros([3], DType::F32);
    let err = j(&(x.clone(), x.clone())).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("argument leaf 0") && err.to_string().contains("leaf 1"), "{err}");
    assert_eq!(x.to_vec::<f32>(), [0.0; 3], "nothing written");
    // an argument and a slice of it
    let y = Tensor::zeros([4], DType::F32);
    assert!(j(&(y.clone(), y.slice(s![0..2]))).is_err());
    // disjoint slices of one buffer: the eager result
    let z = Tensor::zeros([4], DType::F32);
    let s = j(&(z.slice(s![0..2]), z.slice(s![2..4]))).unwrap();
    assert_eq!(s.item::<f32>(), 2.0);
    assert_eq!(z.to_vec::<f32>(), [1.0, 1.0, 10.0, 10.0]);
    // the two columns of a matrix interleave but share no element; an
    // empty slice overlaps nothing
    let m = Tensor::zeros([3, 2], DType::F32);
    let s = j(&(m.slice(s![.., 0]), m.slice(s![.., 1]))).unwrap();
    assert_eq!(s.item::<f32>(), 3.0);
    assert_eq!(m.to_vec::<f32>(), [1.0, 10.0, 1.0, 10.0, 1.0, 10.0]);
    let e = Tensor::zeros([4], DType::F32);
    assert!(j(&(e.clone(), e.slice(s![2..2]))).is_ok());
    // the same refusal from functionalize and vmap (every transform that
    // writes arguments back)
    let fg = xform::functionalize(g);
    let r = xform::catch(|| fg(&(x.clone(), x.clone())));
    assert!(r.is_err());
    assert_eq!(x.to_vec::<f32>(), [0.0; 3]);
    let xs = Tensor::zeros([2, 3], DType::F32);
    let r = xform::catch(|| vmap(g)(&(xs.clone(), xs.clone())));
    assert!(r.is_err_and(|e| e.to_string().contains("overlaps")));
    assert_eq!(xs.to_vec::<f32>(), [0.0; 6]);
    assert_eq!(stack_depth(), 0);
}

/// A view of a mutated argument returned (`x.add_(1.0); x.slice(..)`) is,
/// as eagerly, a view of the caller's tensor after the write-back: later
/// writes through it reach the argument.
#[test]
fn views_of_a_mutated_argument_stay_views() {
    let f = |x: &Tensor| {
        x.add_scalar_(1.0);
        (x.slice(s![0..2]), x.reshape(&[2, 2]).t(), x.exp())
    };
    let j = xform::jit(f);
    let (x, want) =
        (Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], [4]), Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], [4]));
    let (a, b, c) = j(&x);
    let (wa, wb, wc) = f(&want);
    same("slice", &a, &wa);
    same("reshape-transpose", &b, &wb);
    same("exp", &c, &wc);
    assert_eq!(x.to_vec::<f32>(), want.to_vec::<f32>());
    assert!(a.shares_storage(&x) && b.shares_storage(&x), "views of the argument");
    assert!(!c.shares_storage(&x));
    a.fill_(9.0);
    wa.fill_(9.0);
    assert_eq!(x.to_vec::<f32>(), want.to_vec::<f32>(), "a write through the view reaches the argument");
    assert_eq!(x.to_vec::<f32>(), [9.0, 9.0, 3.0, 4.0]);
    // `y.copy_(x)` gives `y` the value `x` has, but a view of `x` stays a
    // view of `x`, not of `y`
    let g = |(x, y): &(Tensor, Tensor)| {
        y.copy_(x);
        x.reshape(&[2, 2]).t()
    };
    let (x, y) = (Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4]), Tensor::zeros([4], DType::F32));
    let v = xform::jit(g)(&(x.clone(), y.clone()));
    assert_eq!(y.to_vec::<f32>(), [1.0, 2.0, 3.0, 4.0]);
    assert!(v.shares_storage(&x) && !v.shares_storage(&y));
    v.fill_(0.0);
    assert_eq!((x.to_vec::<f32>(), y.to_vec::<f32>()), (vec![0.0; 4], vec![1.0, 2.0, 3.0, 4.0]));
}
