use super::*;
use xform_transforms::{grad, jit, jitted, vmap, JitOptions, Tree};

/// Deterministic values in [-0.5, 0.5).
fn values(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    Tensor::from_vec(v, shape.to_vec())
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.cast(DType::F64).to_vec::<f64>().iter().map(|x| x.to_bits()).collect()
}

/// Runs `f` jitted with and without the batch split, several times
/// (the helper takes the second half on some calls and not on others),
/// asserts every output bitwise equal, and also runs the split plan on
/// this thread alone; returns the rows of each half.
fn split_rows<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y + Clone, x: &X) -> Option<(usize, usize)> {
    let split = jitted(f.clone(), JitOptions::default());
    let whole = jitted(f, JitOptions { batch_split: false, ..JitOptions::default() });
    for _ in 0..4 {
        let (a, b) = (split.call(x).leaves(), whole.call(x).leaves());
        assert_eq!(a.len(), b.len());
        for (k, (a, b)) in a.iter().zip(b.iter()).enumerate() {
            assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()), "output {k}");
            assert!(bits(a) == bits(b), "output {k} differs from the unsplit replay");
        }
    }
    // the plan itself, without the thread-count gate of `jit`
    let p = split.program(&(), x).unwrap();
    let leaves = x.leaves();
    let want = Plan::compile(&p).unwrap().run(&leaves).unwrap();
    if let Some(sp) = SplitPlan::new(&p).unwrap() {
        let got = sp.run(&leaves).unwrap();
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(bits(a) == bits(b), "output {k} of SplitPlan::run differs");
        }
        // an assembled output starts on a cache line
        for (t, whole) in got.iter().zip(&sp.assembled) {
            let first = t.array().unwrap().with_cpu("test", |buf, l| {
                xform_kernels::match_buffer!(buf, v => v.as_ptr() as usize + l.offset * t.dtype().size_bytes())
            });
            assert!(whole.is_none() || first.unwrap() % 64 == 0, "an assembled output off its line");
        }
    }
    split.entries()[0].plan.batch_split
}

type Mlp = (Tensor, Tensor, Tensor, Tensor);

fn mlp(d_in: usize, h: usize, c: usize) -> Mlp {
    (values(&[d_in, h], 1), values(&[h], 2), values(&[h, c], 3), values(&[c], 4))
}

/// Per-sample gradients of a softmax cross-entropy MLP (W1's shape): a
/// weight whose leading axis has the batch's length (h = B = 64) drops
/// out at its first product; an odd batch splits 17 + 16.
#[test]
fn per_sample_gradients_split_bitwise() {
    let per_sample = |(p, xs, ys): &(Mlp, Tensor, Tensor)| {
        vmap(|(x, y): &(Tensor, Tensor)| {
            grad(|p: &Mlp| {
                let logits = (x.matmul(&p.0) + &p.1).tanh().matmul(&p.2) + &p.3;
                logits.logsumexp(0, false) - logits.take(y, 0)
            })(p)
        })(&(xs.clone(), ys.clone()))
    };
    for (b, d_in, h, c) in [(64, 64, 64, 10), (33, 200, 64, 10)] {
        let ys = Tensor::from_vec((0..b as i32).map(|i| i % c as i32).collect::<Vec<_>>(), [b]);
        let x = (mlp(d_in, h, c), values(&[b, d_in], 5), ys);
        assert_eq!(split_rows(per_sample, &x), Some((b.div_ceil(2), b / 2)), "B = {b}");
    }
}

/// Gathers with batch axes, reshapes through a transpose, slices,
/// concatenation, padding and reductions over other axes keep rows.
#[test]
fn indexing_and_shape_ops_keep_rows() {
    let f = |(x, idx, w): &(Tensor, Tensor, Tensor)| {
        let g = x.take_along_axis(idx, 1);
        let y = x.reshape(&[1024, 8, 5]).permute(&[0, 2, 1]).reshape(&[1024, 40]);
        let z = Tensor::concat(&[&y, &x.narrow(1, 0, 8)], 1).pad(&[(0, 0), (1, 2)], 0.5);
        let s = (z.exp() * 0.5).sum_axis(1, true);
        let m = x.matmul(w).tanh();
        let back = Tensor::zeros_like(x).scatter_add(idx, &g, 1, 1);
        (g, z * &s, m, back)
    };
    let idx = Tensor::from_vec((0..1024 * 3i32).map(|i| i * 7 % 40).collect::<Vec<_>>(), [1024, 3]);
    let x = (values(&[1024, 40], 6), idx, values(&[40, 16], 7));
    assert_eq!(split_rows(f, &x), Some((512, 512)));
}

/// Outputs that share storage as eager results do (an argument
/// returned, a view of one, one value returned twice) keep sharing it:
/// assembled from the halves into fresh buffers they would not, so such
/// a program is replayed whole. (The same program without them splits.)
#[test]
fn outputs_sharing_storage_are_not_split_apart() {
    let x = values(&[512, 512], 13);
    let heavy = |x: &Tensor| (x * 1.5).tanh().exp() * x;
    assert_eq!(split_rows(heavy, &x), Some((256, 256)));
    let g = jit(|x: &Tensor| (x.clone(), heavy(x), x.reshape(&[512, 2, 256])));
    let (a, b, c) = g(&x);
    assert!(a.same_node(&x), "the argument itself");
    assert!(c.shares_storage(&x), "a view of the argument");
    assert!(bits(&b) == bits(&heavy(&x)));
    let twice = jit(|x: &Tensor| {
        let y = heavy(x);
        (y.clone(), y.reshape(&[-1]))
    });
    let (p, q) = twice(&x);
    assert!(p.shares_storage(&q), "one value returned twice");
    p.fill_(2.0);
    assert_eq!(q.to_vec::<f32>()[..3], [2.0; 3]);
}

/// What mixes rows is not split: a reduction over the batch, a
/// normalization by the batch's mean, an output with the batch along a
/// later axis; nor a program too small to pay for the hand-off, nor
/// one with control flow.
#[test]
fn what_mixes_rows_is_not_split() {
    let w = values(&[64, 64], 8);
    let x = values(&[256, 64], 9);
    let reduce = |(x, w): &(Tensor, Tensor)| x.matmul(w).tanh().sum_axis(0, false);
    let normalize = |(x, w): &(Tensor, Tensor)| {
        let h = x.matmul(w);
        &h - h.mean_axis(0, true)
    };
    let later = |(x, w): &(Tensor, Tensor)| x.matmul(w).tanh().t();
    for rows in [split_rows(reduce, &(x.clone(), w.clone())), split_rows(normalize, &(x.clone(), w.clone()))] {
        assert_eq!(rows, None);
    }
    assert_eq!(split_rows(later, &(x, w)), None);
    let tiny = |x: &Tensor| (x.sin() * x).exp();
    assert_eq!(split_rows(tiny, &values(&[8], 10)), None);
    // control flow stays on the replaying thread, even on whole values
    let branch = |(x, w): &(Tensor, Tensor)| {
        let w = xform_transforms::cond(&w.sum().gt_scalar(0.0), |w: &Tensor| w * 2.0, |w: &Tensor| w * -1.0, w);
        x.matmul(&w).tanh()
    };
    assert_eq!(split_rows(branch, &(values(&[256, 64], 11), values(&[64, 64], 12))), None);
}
