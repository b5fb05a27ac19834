//! conv_general_dilated against JAX 0.10.2, per-example gradients of a CNN
//! without loops, the convolution layers, and the errors.

use xform::lax::{self, ConvDims, ConvOptions, Padding};
use xform::nn::{Conv1d, Conv2d, Conv3d, ConvTranspose2d};
use xform::prelude::*;
use xform::ErrorKind;

/// The inputs of `scripts`' generator: `(((i * a) % b) / (b / 3) - 1.5)`.
fn fill(shape: &[usize], a: usize, b: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| ((i * a) % b) as f64 / (b as f64 / 3.0) - 1.5).collect();
    Tensor::from_vec(v, shape.to_vec())
}

/// The plain sum and a position-weighted sum, to compare with JAX's.
fn stats(x: &Tensor) -> (f64, f64) {
    let v = x.to_vec_f64();
    (v.iter().sum(), v.iter().enumerate().map(|(i, x)| x * ((i % 7) + 1) as f64).sum())
}

fn close(got: (f64, f64), want: (f64, f64), what: &str) {
    for (g, w) in [(got.0, want.0), (got.1, want.1)] {
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{what}: {got:?} vs JAX {want:?}");
    }
}

/// Values and both cotangents against JAX. The numbers come from
/// `jax.vjp(lambda l, r: lax.conv_general_dilated(l, r, **kw), l, r)` in
/// float64 with the same `fill` inputs (l: (7919, 23), r: (104729, 17),
/// cotangent: (31, 11)); each triple is `stats` of the output, the lhs
/// cotangent and the rhs cotangent.
#[test]
fn conv_general_dilated_matches_jax_with_every_option() {
    let nhwc = ConvDims::from_strings("NHWC", "HWIO", "NHWC").unwrap();
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Vec<usize>, Vec<usize>, ConvOptions, Vec<usize>, [(f64, f64); 3])> = vec![
        (
            // window_strides=(2,1), padding=[(1,0),(2,1)], lhs_dilation=(1,2), rhs_dilation=(2,1)
            "strides, asymmetric padding, both dilations",
            vec![2, 3, 5, 6],
            vec![4, 3, 2, 3],
            ConvOptions {
                strides: vec![2, 1],
                padding: Padding::Explicit(vec![(1, 0), (2, 1)]),
                lhs_dilation: vec![1, 2],
                rhs_dilation: vec![2, 1],
                ..ConvOptions::default()
            },
            vec![2, 4, 2, 12],
            [
                (52.61892583120206, 201.79795396419445),
                (23.99197860962566, 108.19251336898392),
                (41.175889328063235, 128.9525691699605),
            ],
        ),
        (
            // window_strides=(1,2), padding="SAME", ("NHWC","HWIO","NHWC"), feature_group_count=2
            "NHWC, SAME, feature groups",
            vec![2, 5, 4, 4],
            vec![3, 2, 2, 6],
            ConvOptions {
                strides: vec![1, 2],
                padding: Padding::Same,
                dims: Some(nhwc),
                feature_group_count: 2,
                ..ConvOptions::default()
            },
            vec![2, 5, 2, 6],
            [
                (13.131713554987229, 124.67647058823535),
                (14.390374331550793, 62.24197860962563),
                (27.231225296442698, 75.05928853754945),
            ],
        ),
        (
            // 1-D, padding="VALID", batch_group_count=2
            "1-D, batch groups",
            vec![4, 2, 5],
            vec![6, 2, 3],
            ConvOptions { batch_group_count: 2, ..ConvOptions::default() },
            vec![2, 6, 3],
            [
                (1.6112531969309498, 4.488491048593359),
                (4.620320855614973, 51.48529411764706),
                (-0.6047430830039553, -22.517786561264828),
            ],
        ),
        (
            // 3-D, padding="SAME", feature_group_count=2
            "3-D, SAME, feature groups",
            vec![1, 2, 3, 4, 3],
            vec![2, 1, 2, 2, 2],
            ConvOptions { padding: Padding::Same, feature_group_count: 2, ..ConvOptions::default() },
            vec![1, 2, 3, 4, 3],
            [
                (23.996163682864456, 100.29475703324809),
                (5.7994652406417035, 36.08422459893045),
                (20.472332015810277, 84.37055335968381),
            ],
        ),
    ];
    for (what, ls, rs, opts, out_shape, want) in cases {
        let (l, r) = (fill(&ls, 7919, 23), fill(&rs, 104729, 17));
        let f = |(l, r): &(Tensor, Tensor)| lax::conv_general_dilated(l, r, &opts).unwrap();
        let out = f(&(l.clone(), r.clone()));
        assert_eq!(out.shape().dims(), out_shape.as_slice(), "{what}");
        close(stats(&out), want[0], what);
        let ct = fill(&out_shape, 31, 11);
        let (_, pull) = vjp(f, &(l, r));
        let (gl, gr) = pull(&ct);
        close(stats(&gl), want[1], what);
        close(stats(&gr), want[2], what);
    }
}

/// The functorch tutorial's CNN, small: conv-relu-conv-relu-mean-linear.
#[derive(Clone, Debug)]
struct Cnn {
    c1: Conv2d,
    c2: Conv2d,
    fc: xform::nn::Linear,
}
impl_tree!(Cnn { c1, c2, fc });

impl Cnn {
    fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.c1.forward(x).relu();
        let h = self.c2.forward(&h).relu();
        // Global average pooling over H, W.
        let h = h.mean_axes(&[-2, -1], false);
        self.fc.forward(&h)
    }
}

fn cnn() -> Cnn {
    let k = Key::new(7).split(3);
    Cnn {
        c1: Conv2d::init(&k[0], 1, 4, [3, 3], DType::F64).with_padding([1, 1]),
        c2: Conv2d::init_grouped(&k[1], 4, 6, [3, 3], 2, DType::F64).with_stride([2, 2]),
        fc: xform::nn::Linear::init(&k[2], 6, 3, DType::F64),
    }
}

#[test]
fn per_example_cnn_gradients_equal_a_loop_and_do_not_loop() {
    let model = cnn();
    let x = Key::new(1).normal([5, 1, 7, 7], DType::F64);
    let y = Tensor::from_vec(vec![0i32, 2, 1, 1, 0], [5]);
    let loss = |p: &Cnn, x: &Tensor, y: &Tensor| {
        xform::nn::softmax_cross_entropy(&p.forward(&x.unsqueeze(0)), &y.unsqueeze(0))
    };
    let per = vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Cnn| loss(p, x, y))(&model))(&(x.clone(), y.clone()));
    assert_eq!(per.c2.w.shape().dims(), &[5, 6, 2, 3, 3]);
    for i in 0..5 {
        let g = grad(|p: &Cnn| loss(p, &x.slice(s![i]), &y.slice(s![i])))(&model);
        for (a, b) in per.leaves().iter().zip(g.leaves()) {
            let (a, b) = (a.slice(s![i]).to_vec_f64(), b.to_vec_f64());
            for (p, q) in a.iter().zip(&b) {
                assert!((p - q).abs() <= 1e-12 * (1.0 + q.abs()), "example {i}: {p} vs {q}");
            }
        }
    }
    // The batched program has as many convolutions for 2 examples as for 9:
    // the batch rule folds the examples into groups, never a loop.
    let convs = |b: usize| {
        let xs = Key::new(2).normal([b, 1, 7, 7], DType::F64);
        let ys = Tensor::zeros([b], DType::I32);
        let prog = trace(
            |(x, y): &(Tensor, Tensor)| {
                vmap(|(x, y): &(Tensor, Tensor)| grad(|p: &Cnn| loss(p, x, y))(&model))(&(x.clone(), y.clone()))
            },
            &(xs, ys),
        );
        format!("{prog}").matches("conv_general_dilated").count()
    };
    let (two, nine) = (convs(2), convs(9));
    assert_eq!(two, nine);
    // Forward (2), lhs cotangent of the second (1), both weight cotangents (2).
    assert_eq!(two, 5, "convolutions in vmap(grad) of the CNN");
}

#[test]
fn layers_match_their_definitions() {
    // Conv1d and Conv3d against lax with channels-first dims.
    let k = Key::new(3);
    let c1 = Conv1d::init(&k, 2, 3, [3], DType::F64).with_stride([2]).with_dilation([2]);
    let x = Key::new(4).normal([2, 2, 9], DType::F64);
    let want = lax::conv_general_dilated(
        &x,
        &c1.w,
        &ConvOptions { strides: vec![2], rhs_dilation: vec![2], ..ConvOptions::default() },
    )
    .unwrap()
        + c1.b.as_ref().unwrap().reshape(&[3, 1]);
    assert_eq!(c1.forward(&x).to_vec_f64(), want.to_vec_f64());
    // One example in, one example out.
    assert_eq!(c1.forward(&x.slice(s![1])).to_vec_f64(), want.slice(s![1]).to_vec_f64());
    let c3 = Conv3d::init(&k, 2, 2, [2, 2, 2], DType::F32).with_padding([1, 0, 1]);
    assert_eq!(c3.forward(&Tensor::zeros([1, 2, 3, 3, 3], DType::F32)).shape().dims(), &[1, 2, 4, 2, 4]);
    // PyTorch's default init: |w|, |b| <= 1/sqrt(fan_in), fan_in = 2 * 3.
    let bound = 1.0 / 6f64.sqrt();
    assert!(c1.w.to_vec_f64().iter().chain(&c1.b.clone().unwrap().to_vec_f64()).all(|v| v.abs() <= bound));
}

/// `ConvTranspose2d` is the gradient of a `Conv2d` with respect to its
/// input: the adjoint identity `<conv(x), y> = <x, conv_t(y)>` with shared
/// weights, for strides, padding, output padding, dilation and groups.
#[test]
fn conv_transpose_is_the_adjoint_of_conv() {
    for (stride, pad, out_pad, dil, groups) in
        [([1, 1], [0, 0], [0, 0], [1, 1], 1), ([2, 2], [1, 0], [1, 0], [1, 1], 1), ([2, 1], [0, 1], [0, 0], [2, 1], 2)]
    {
        let conv = Conv2d::init_grouped(&Key::new(5), 4, 6, [3, 2], groups, DType::F64)
            .with_stride(stride)
            .with_padding(pad)
            .with_dilation(dil)
            .without_bias();
        let x = Key::new(6).normal([2, 4, 9, 8], DType::F64);
        let y_shape = conv.forward(&x).shape();
        // Input size the transpose gives back, then PyTorch's output padding.
        let up = ConvTranspose2d {
            w: conv.w.clone(),
            b: None,
            config: xform::nn::ConvConfig { groups, ..conv.config.clone() },
            output_padding: out_pad,
        };
        let y = Key::new(8).normal(y_shape.dims().to_vec(), DType::F64);
        let back = up.forward(&y);
        let (h, w) = (back.dim(2), back.dim(3));
        let fits = x.slice(s![.., .., 0..h.min(9), 0..w.min(8)]);
        // <conv(x), y> == <x, conv_t(y)> over the region both see.
        let lhs = (conv.forward(&x) * &y).sum().item::<f64>();
        let cropped = back.slice(s![.., .., 0..h.min(9), 0..w.min(8)]);
        let rhs = (&fits * &cropped).sum().item::<f64>();
        assert!((lhs - rhs).abs() < 1e-9 * (1.0 + lhs.abs()), "{stride:?} {pad:?}: {lhs} vs {rhs}");
    }
}

#[test]
fn bad_convolutions_are_clear_errors() {
    let x = Tensor::zeros([1, 4, 5, 5], DType::F32);
    let err = |r: xform::Result<Tensor>| r.unwrap_err();
    // A kernel larger than the padded input.
    let e = err(lax::conv_general_dilated(&x, &Tensor::zeros([2, 4, 7, 3], DType::F32), &ConvOptions::default()));
    assert!(
        e.to_string().contains("conv_general_dilated") && e.to_string().contains("larger than the padded input"),
        "{e}"
    );
    assert!(e.to_string().contains("[1, 4, 5, 5]"), "{e}");
    // Channels not divisible by the groups.
    let opts = ConvOptions { feature_group_count: 3, ..ConvOptions::default() };
    let e = err(lax::conv_general_dilated(&x, &Tensor::zeros([3, 1, 3, 3], DType::F32), &opts));
    assert!(e.to_string().contains("not divisible by feature_group_count 3"), "{e}");
    // rhs input features that do not match.
    let e = err(lax::conv_general_dilated(&x, &Tensor::zeros([2, 3, 3, 3], DType::F32), &ConvOptions::default()));
    assert!(e.to_string().contains("must equal the rhs input features 3"), "{e}");
    // Mismatched dimension numbers.
    assert!(ConvDims::from_strings("NCHW", "OIDW", "NCHW").is_err());
    let bad = ConvOptions { dims: Some(ConvDims::channels_first(3)), ..ConvOptions::default() };
    let e = err(lax::conv_general_dilated(&x, &Tensor::zeros([2, 4, 3, 3], DType::F32), &bad));
    assert!(e.to_string().contains("not a permutation"), "{e}");
    // Zero strides and dilations (negative ones do not type-check: usize).
    for opts in [
        ConvOptions { strides: vec![0, 1], ..ConvOptions::default() },
        ConvOptions { rhs_dilation: vec![1, 0], ..ConvOptions::default() },
        ConvOptions { lhs_dilation: vec![0, 1], ..ConvOptions::default() },
    ] {
        let e = err(lax::conv_general_dilated(&x, &Tensor::zeros([2, 4, 3, 3], DType::F32), &opts));
        assert!(e.to_string().contains("must be positive"), "{e}");
    }
    // Wrong count of per-axis parameters, mixed dtypes, integer operands.
    let e = err(lax::conv_general_dilated(
        &x,
        &Tensor::zeros([2, 4, 3, 3], DType::F32),
        &ConvOptions { strides: vec![1, 1, 1], ..ConvOptions::default() },
    ));
    assert!(e.to_string().contains("strides has 3 entries for 2 spatial axes"), "{e}");
    let e = err(lax::conv_general_dilated(&x, &Tensor::zeros([2, 4, 3, 3], DType::F64), &ConvOptions::default()));
    assert!(matches!(e.kind, ErrorKind::DType { .. }), "{e}");
    // The layer's error names the layer's shapes, and a panic from the layer is an Error.
    let conv = Conv2d::init(&Key::new(0), 3, 2, [3, 3], DType::F32);
    let r = catch(|| conv.forward(&x));
    assert!(r.is_err());
    assert_eq!(xform::core::interp::stack_depth(), 0);
}

/// Hyperparameters PyTorch refuses are refused by the layers too:
/// `ConvTranspose2d`'s `output_padding` must be smaller than either the
/// stride or the dilation on each axis ("output padding must be smaller
/// than either stride or dilation"), and its stride and dilation positive.
/// A padding string with lhs dilation in `conv_general_dilated` is refused
/// as JAX refuses it.
#[test]
fn hyperparameters_pytorch_and_jax_refuse() {
    let x = Tensor::zeros([1, 2, 4, 4], DType::F32);
    let up = |stride: [usize; 2], dil: [usize; 2], out_pad: [usize; 2]| {
        ConvTranspose2d::init(&Key::new(0), 2, 3, [3, 3], DType::F32)
            .with_stride(stride)
            .with_dilation(dil)
            .with_output_padding(out_pad)
    };
    for (stride, dil, out_pad) in [([1, 1], [1, 1], [1, 0]), ([2, 2], [1, 1], [0, 2]), ([2, 1], [2, 3], [2, 0])] {
        let e = catch(|| up(stride, dil, out_pad).forward(&x)).unwrap_err();
        assert!(e.to_string().contains("ConvTranspose2d") && e.to_string().contains("output_padding"), "{e}");
    }
    // smaller than the stride, or than the dilation: fine (PyTorch's rule)
    assert_eq!(up([2, 2], [1, 1], [1, 1]).forward(&x).shape().dims(), &[1, 3, 10, 10]);
    assert_eq!(up([1, 1], [2, 2], [1, 0]).forward(&x).shape().dims(), &[1, 3, 9, 8]);
    let e = catch(|| up([0, 1], [1, 1], [0, 0]).forward(&x)).unwrap_err();
    assert!(e.to_string().contains("stride must be two positive sizes"), "{e}");
    assert_eq!(xform::core::interp::stack_depth(), 0);

    let w = Tensor::zeros([3, 2, 3, 3], DType::F32);
    for padding in [Padding::Same, Padding::Valid] {
        let opts = ConvOptions { padding, lhs_dilation: vec![2, 1], ..ConvOptions::default() };
        let e = lax::conv_general_dilated(&x, &w, &opts).unwrap_err();
        assert!(e.to_string().contains("lhs dilation") && e.to_string().contains("explicit (low, high)"), "{e}");
    }
    // pooling: PyTorch's "pad should be at most half of effective kernel
    // size", and positive kernels and strides
    let img = Tensor::zeros([1, 1, 6, 6], DType::F32);
    let e = catch(|| xform::nn::MaxPool2d::new([2, 2]).with_padding([2, 1]).forward(&img)).unwrap_err();
    assert!(e.to_string().contains("MaxPool2d") && e.to_string().contains("at most half the kernel"), "{e}");
    let e = catch(|| xform::nn::AvgPool2d::new([3, 3]).with_padding([1, 2]).forward(&img)).unwrap_err();
    assert!(e.to_string().contains("AvgPool2d") && e.to_string().contains("at most half the kernel"), "{e}");
    let e = catch(|| xform::nn::MaxPool2d::new([2, 2]).with_stride([0, 1]).forward(&img)).unwrap_err();
    assert!(e.to_string().contains("must be positive"), "{e}");
    assert_eq!(xform::nn::MaxPool2d::new([3, 3]).with_padding([1, 1]).forward(&img).shape().dims(), &[1, 1, 2, 2]);
    // lhs dilation 1 with SAME is an ordinary convolution
    let opts = ConvOptions { padding: Padding::Same, lhs_dilation: vec![1, 1], ..ConvOptions::default() };
    assert_eq!(lax::conv_general_dilated(&x, &w, &opts).unwrap().shape().dims(), &[1, 3, 4, 4]);
}
