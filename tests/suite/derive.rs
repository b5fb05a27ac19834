//! `#[derive(Tree)]`: named, tuple, unit, generic structs and enums, with
//! static fields, against `impl_tree!` and under vmap, grad, jacrev, jacfwd.

use std::collections::BTreeMap;
use xform::nn::Activation;
use xform::prelude::*;
use xform::tree::{self, Prefix, Skeleton};

#[derive(Clone, Debug, Tree)]
struct Named {
    w: Tensor,
    b: Vec<Tensor>,
    #[tree(static)]
    act: Activation,
    #[tree(static)]
    sizes: Vec<usize>,
}

#[derive(Clone, Tree)]
struct Pair(Tensor, #[tree(static)] f64, Tensor);

#[derive(Clone, Debug, PartialEq, Tree)]
struct Unit;

#[derive(Clone, Tree)]
struct Generic<P> {
    inner: Vec<P>,
    scale: Tensor,
    #[tree(static)]
    name: String,
}

#[derive(Clone, Tree)]
enum Head {
    Lin {
        w: Tensor,
        #[tree(static)]
        act: Activation,
    },
    Affine(Tensor, Tensor),
    Zero,
}

// Below the facade, through the crate that defines the trait.
#[derive(Clone, Tree)]
#[tree(crate = xform_transforms)]
struct Low {
    x: Tensor,
}

#[derive(Clone)]
struct ByMacro {
    w: Tensor,
    b: Vec<Tensor>,
}
impl_tree!(ByMacro { w, b });

#[derive(Clone, Tree)]
struct ByDerive {
    w: Tensor,
    b: Vec<Tensor>,
}

fn v64(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), [v.len()])
}

fn named() -> Named {
    Named {
        w: v64(&[1.0, -2.0]),
        b: vec![v64(&[0.5, 1.5, -1.0]), v64(&[3.0])],
        act: Activation::Relu,
        sizes: vec![2, 3],
    }
}

#[test]
fn derive_gives_what_impl_tree_gives() {
    let (w, b) = (v64(&[1.0]), vec![v64(&[2.0]), v64(&[3.0])]);
    let m = ByMacro { w: w.clone(), b: b.clone() };
    let d = ByDerive { w, b };
    assert_eq!(m.paths(), d.paths());
    assert_eq!(m.skeleton(), d.skeleton());
    let bm: BTreeMap<String, usize> = m.build_map(&mut (0..3));
    let bd: BTreeMap<String, usize> = d.build_map(&mut (0..3));
    assert_eq!(bm, bd);
    assert_eq!(bd[".b[1]"], 2);
    let back = d.with_leaves(m.leaves().iter().map(|l| l * 10.0));
    assert_eq!(back.b[1].to_vec::<f64>(), vec![30.0]);
}

#[test]
fn static_fields_are_not_leaves_paths_or_nodes() {
    let n = named();
    assert_eq!(n.paths(), vec![".w", ".b[0]", ".b[1]"]);
    assert_eq!(n.leaves().len(), 3);
    let expected = Skeleton::Node(vec![
        (".w".into(), Skeleton::Leaf),
        (".b".into(), Skeleton::Node(vec![("[0]".into(), Skeleton::Leaf), ("[1]".into(), Skeleton::Leaf)])),
    ]);
    assert_eq!(n.skeleton(), expected);
    assert_eq!(n.skeleton(), Skeleton::from_paths(&n.paths()));
    // A prefix names only the leaf fields.
    let p = Prefix::Named(vec![("w".into(), Prefix::Leaf(0)), ("b".into(), Prefix::Leaf(1))]);
    assert_eq!(n.skeleton().expand_prefix(&p).unwrap(), vec![0, 1, 1]);
    // flatten / unflatten carry the static fields.
    let (leaves, def) = tree::flatten(&n);
    let back = def.unflatten(leaves.iter().map(|l| l + 1.0));
    assert_eq!(back.w.to_vec::<f64>(), vec![2.0, -1.0]);
    assert_eq!((back.act, back.sizes.clone()), (Activation::Relu, vec![2, 3]));
}

#[test]
fn grad_and_jacrev_keep_static_fields() {
    let n = named();
    // loss = sum(relu(w)) + sum(b0^2) + 2 * sum(b1)
    let loss = |m: &Named| m.act.apply(&m.w).sum() + (&m.b[0] * &m.b[0]).sum() + m.b[1].sum() * 2.0;
    let g = grad(loss)(&n);
    assert_eq!(g.w.to_vec::<f64>(), vec![1.0, 0.0]);
    assert_eq!(g.b[0].to_vec::<f64>(), vec![1.0, 3.0, -2.0]);
    assert_eq!(g.b[1].to_vec::<f64>(), vec![2.0]);
    assert_eq!((g.act, g.sizes), (Activation::Relu, vec![2, 3]));

    // jacrev of a [2] output: every leaf gains a leading axis of 2.
    let j: Named = jacrev(|m: &Named| &m.w * 3.0 + m.b[1].sum())(&n);
    assert_eq!(j.w.shape().dims(), &[2, 2]);
    assert_eq!(j.w.to_vec::<f64>(), vec![3.0, 0.0, 0.0, 3.0]);
    assert_eq!(j.b[0].to_vec::<f64>(), vec![0.0; 6]);
    assert_eq!(j.b[1].to_vec::<f64>(), vec![1.0, 1.0]);
    assert_eq!(j.act, Activation::Relu);

    // jacfwd agrees.
    let jf: Named = jacfwd(|m: &Named| &m.w * 3.0 + m.b[1].sum())(&n);
    assert!(tree::all_close(&j, &jf, 0.0, 1e-15));
}

#[test]
fn vmap_over_a_stacked_derived_struct() {
    let models: Vec<Named> = (0..3)
        .map(|i| Named {
            w: v64(&[i as f64, 1.0]),
            b: vec![v64(&[i as f64; 3]), v64(&[2.0])],
            act: Activation::Tanh,
            sizes: vec![i],
        })
        .collect();
    let stacked = tree::stack(&models);
    assert_eq!(stacked.w.shape().dims(), &[3, 2]);
    // The static fields are the first tree's, carried unmapped.
    assert_eq!(stacked.sizes, vec![0]);
    let sums = vmap(|m: &Named| m.w.sum() + m.b[0].sum())(&stacked);
    assert_eq!(sums.to_vec::<f64>(), vec![1.0, 5.0, 9.0]);
    // A derived struct as vmap's output: the static fields survive.
    let doubled = vmap(|m: &Named| tree::scale(m, 2.0))(&stacked);
    assert_eq!(doubled.b[0].shape().dims(), &[3, 3]);
    assert_eq!(doubled.b[0].to_vec::<f64>(), vec![0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 4.0, 4.0, 4.0]);
    assert_eq!((doubled.act, doubled.sizes.clone()), (Activation::Tanh, vec![0]));
    // Per-example gradients of a derived struct.
    let xs = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    let per = vmap(|x: &Tensor| grad(|m: &Named| (m.act.apply(&m.w) * x).sum())(&models[0]))(&xs);
    assert_eq!(per.w.shape().dims(), &[3, 2]);
    let d1 = 1.0 - 1f64.tanh().powi(2);
    let expect = [1.0, d1, 2.0, 2.0 * d1, 3.0, 3.0 * d1];
    for (a, e) in per.w.to_vec::<f64>().iter().zip(expect) {
        assert!((a - e).abs() < 1e-15, "{a} vs {e}");
    }
    assert_eq!(per.sizes, vec![0]);
}

#[test]
fn tuple_unit_generic_and_lower_crate_structs() {
    let p = Pair(v64(&[1.0, 2.0]), 2.5, v64(&[4.0]));
    assert_eq!(p.paths(), vec![".0", ".2"]);
    assert_eq!(p.skeleton(), Skeleton::Node(vec![(".0".into(), Skeleton::Leaf), (".2".into(), Skeleton::Leaf)]));
    let g = grad(|p: &Pair| (&p.0 * p.1).sum() + (&p.2 * &p.2).sum())(&p);
    assert_eq!((g.0.to_vec::<f64>(), g.1, g.2.to_vec::<f64>()), (vec![2.5, 2.5], 2.5, vec![8.0]));

    assert!(Unit.paths().is_empty());
    assert_eq!(Unit.skeleton(), Skeleton::Node(vec![]));
    let (x, u) = grad(|(x, _): &(Tensor, Unit)| (x * x).sum())(&(v64(&[3.0]), Unit));
    assert_eq!((x.to_vec::<f64>(), u), (vec![6.0], Unit));

    let gen = Generic { inner: vec![(v64(&[1.0]), v64(&[2.0]))], scale: v64(&[3.0]), name: "g".into() };
    assert_eq!(gen.paths(), vec![".inner[0].0", ".inner[0].1", ".scale"]);
    let g = grad(|t: &Generic<(Tensor, Tensor)>| (&t.inner[0].0 * &t.inner[0].1 * &t.scale).sum())(&gen);
    assert_eq!(g.inner[0].0.to_vec::<f64>(), vec![6.0]);
    assert_eq!(g.inner[0].1.to_vec::<f64>(), vec![3.0]);
    assert_eq!(g.scale.to_vec::<f64>(), vec![2.0]);
    assert_eq!(g.name, "g");
    let nested = Generic { inner: vec![named()], scale: v64(&[1.0]), name: "n".into() };
    assert_eq!(nested.paths(), vec![".inner[0].w", ".inner[0].b[0]", ".inner[0].b[1]", ".scale"]);

    let low = Low { x: v64(&[1.0, 2.0]) };
    assert_eq!(xform_transforms::Tree::paths(&low), vec![".x"]);
    assert_eq!(grad(|l: &Low| (&l.x * &l.x).sum())(&low).x.to_vec::<f64>(), vec![2.0, 4.0]);
}

#[test]
fn enums_name_the_variant() {
    let lin = Head::Lin { w: v64(&[1.0, -1.0]), act: Activation::Relu };
    let aff = Head::Affine(v64(&[2.0]), v64(&[3.0]));
    assert_eq!(lin.paths(), vec![".Lin.w"]);
    assert_eq!(aff.paths(), vec![".Affine.0", ".Affine.1"]);
    assert!(Head::Zero.paths().is_empty());
    assert_eq!(Head::Zero.skeleton(), Skeleton::Node(vec![(".Zero".into(), Skeleton::Node(vec![]))]));
    assert_eq!(
        lin.skeleton(),
        Skeleton::Node(vec![(".Lin".into(), Skeleton::Node(vec![(".w".into(), Skeleton::Leaf)]))])
    );
    let apply = |h: &Head| match h {
        Head::Lin { w, act } => act.apply(w).sum(),
        Head::Affine(a, b) => (a * b).sum(),
        Head::Zero => Tensor::scalar(0.0f64),
    };
    let Head::Lin { w, act } = grad(apply)(&lin) else { panic!("grad changed the variant") };
    assert_eq!((w.to_vec::<f64>(), act), (vec![1.0, 0.0], Activation::Relu));
    let Head::Affine(da, db) = grad(apply)(&aff) else { panic!("grad changed the variant") };
    assert_eq!((da.to_vec::<f64>(), db.to_vec::<f64>()), (vec![3.0], vec![2.0]));
    let m = aff.build_map(&mut (10..12));
    assert_eq!(m[".Affine.1"], 11);
}

/// A static field is part of jit's cache key, as a pytree's auxiliary data
/// is of JAX's: a new value traces again (and gives its own results), an
/// equal one hits; statics of nested trees (a `Vec` of structs, an enum's
/// variant) count, and one whose type is not `PartialEq` is carried
/// without being compared (fixed at the first trace, as documented).
#[test]
fn static_fields_key_the_jit_cache() {
    #[derive(Clone, Tree)]
    struct Scaled {
        w: Tensor,
        #[tree(static)]
        scale: i32,
        #[tree(static)]
        act: Activation,
    }
    let w = Tensor::from_vec(vec![0.5f32, -1.0], [2]);
    let f = xform::jitted(|p: &Scaled| p.act.apply(&(&p.w * p.scale as f64)), xform::JitOptions::default());
    let at = |scale, act| f.call(&Scaled { w: w.clone(), scale, act }).to_vec::<f32>();
    assert_eq!(at(2, Activation::Identity), [1.0, -2.0]);
    assert_eq!(at(3, Activation::Identity), [1.5, -3.0], "a new static value traces again");
    assert_eq!(at(3, Activation::Relu), [1.5, 0.0], "so does a new activation");
    assert_eq!(at(2, Activation::Identity), [1.0, -2.0]);
    let st = f.stats();
    assert_eq!((st.misses, st.hits, st.entries), (3, 1, 3));

    // nested: statics inside a Vec of derived structs and an enum
    let layers = |s: i32| {
        vec![
            Scaled { w: w.clone(), scale: 1, act: Activation::Identity },
            Scaled { w: w.clone(), scale: s, act: Activation::Identity },
        ]
    };
    let g = xform::jitted(
        |ls: &Vec<Scaled>| ls.iter().map(|l| &l.w * l.scale as f64).fold(Tensor::scalar(0.0f32), |a, b| a + b),
        xform::JitOptions::default(),
    );
    assert_eq!(g.call(&layers(1)).to_vec::<f32>(), [1.0, -2.0]);
    assert_eq!(g.call(&layers(4)).to_vec::<f32>(), [2.5, -5.0]);
    assert_eq!(g.stats().misses, 2);
    let head = |act| Head::Lin { w: w.clone(), act };
    let h = xform::jitted(
        |h: &Head| match h {
            Head::Lin { w, act } => act.apply(w),
            Head::Affine(a, b) => a * b,
            _ => Tensor::scalar(0.0f32),
        },
        xform::JitOptions::default(),
    );
    assert_eq!(h.call(&head(Activation::Relu)).to_vec::<f32>(), [0.5, 0.0]);
    assert_eq!(h.call(&head(Activation::Identity)).to_vec::<f32>(), [0.5, -1.0]);

    // a static of a type without PartialEq: carried, not compared
    #[derive(Clone)]
    struct Opaque(f64);
    #[derive(Clone, Tree)]
    struct WithOpaque {
        w: Tensor,
        #[tree(static)]
        o: Opaque,
    }
    let k = xform::jitted(|p: &WithOpaque| &p.w * p.o.0, xform::JitOptions::default());
    assert_eq!(k.call(&WithOpaque { w: w.clone(), o: Opaque(2.0) }).to_vec::<f32>(), [1.0, -2.0]);
    assert_eq!(k.call(&WithOpaque { w: w.clone(), o: Opaque(3.0) }).to_vec::<f32>(), [1.0, -2.0]);
    assert_eq!(k.stats().misses, 1);
    let mut vals = Vec::new();
    let wo = WithOpaque { w: w.clone(), o: Opaque(1.0) };
    wo.static_values(&mut vals);
    assert_eq!(vals, vec![tree::StaticValue::Opaque]);
    // a generic static is compared when its instance is PartialEq
    let mut vals = Vec::new();
    let gen = Generic { inner: vec![w.clone()], scale: w.clone(), name: "a".to_string() };
    gen.static_values(&mut vals);
    assert!(matches!(vals[..], [tree::StaticValue::Eq(_)]));
    // a NaN never equals itself: each call traces again
    let n = xform::jitted(|p: &Pair| &p.0 * p.1 + &p.2, xform::JitOptions::default());
    for _ in 0..3 {
        assert!(n.call(&Pair(w.clone(), f64::NAN, w.clone())).to_vec::<f32>()[0].is_nan());
    }
    assert_eq!((n.stats().misses, n.stats().hits), (3, 0));
}
