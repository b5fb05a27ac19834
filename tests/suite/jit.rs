//! jit: the cache (keys, bounds, statistics), the results against eager
//! execution (registry samples and random programs, within 1 ulp), the
//! optimized programs, and composition with every transform.

use crate::harness::{assert_close, on_each_device, v};
use crate::registry::{entries, G};
use std::cell::Cell;
use xform::core::interp::{bind, stack_depth};
use xform::prelude::*;
use xform::{jit_with, jitted, jitted_static, try_jit, JitOptions};

/// Asserts `got` and `want` equal within one unit in the last place of
/// `dtype` per element (NaNs equal, zeros of either sign equal; integers
/// and bools exact).
#[track_caller]
fn within_ulp(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!((got.shape(), got.dtype()), (want.shape(), want.dtype()), "{what}");
    let eps = match want.dtype() {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 0.0,
    };
    for (k, (g, w)) in v(got).iter().zip(v(want)).enumerate() {
        let ok = g == &w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= eps * g.abs().max(w.abs());
        assert!(ok, "{what}: element {k}: jit {g}, eager {w}");
    }
}

fn x8() -> Tensor {
    Tensor::linspace(-1.0, 1.0, 8, DType::F32)
}

#[test]
fn traces_once_per_signature() {
    let traces = Cell::new(0);
    let f = jitted(
        |x: &Tensor| {
            traces.set(traces.get() + 1);
            (x.sin() * x).sum()
        },
        JitOptions::default(),
    );
    let a = x8();
    let want = (a.sin() * &a).sum();
    for _ in 0..3 {
        within_ulp("f(a)", &f.call(&a), &want);
    }
    assert_eq!(traces.get(), 1);
    // a new shape, then a new dtype: traced again; the old ones still hit
    f.call(&Tensor::linspace(0.0, 1.0, 3, DType::F32));
    f.call(&a.cast(DType::F64));
    f.call(&a);
    assert_eq!(traces.get(), 3);
    let s = f.stats();
    assert_eq!((s.hits, s.misses, s.entries, s.evictions), (3, 3, 3, 0));
    let e = f.entries();
    assert_eq!(e.len(), 3);
    // least recently used first: [3] f32, f64 [8], f32 [8]
    assert_eq!(e[0].avals[0].shape.dims(), &[3]);
    assert_eq!(e[1].avals[0].dtype, DType::F64);
    assert_eq!((e[2].avals[0].dtype, e[2].hits), (DType::F32, 3));
    assert_eq!(e[2].static_arg, "()");
    f.clear();
    assert_eq!(f.stats().entries, 0);
    f.call(&a);
    assert_eq!(traces.get(), 4);
}

/// Two trees with the same leaves in a different structure are two signatures.
#[test]
fn tree_structure_is_part_of_the_key() {
    let traces = Cell::new(0);
    let f = jitted(
        |(a, b): &(Vec<Tensor>, Vec<Tensor>)| {
            traces.set(traces.get() + 1);
            let s = |v: &Vec<Tensor>| v.iter().fold(Tensor::scalar(0.0f32), |acc, t| acc + t.sum());
            s(a) * 2.0 + s(b)
        },
        JitOptions::default(),
    );
    let t = || Tensor::ones([2], DType::F32);
    let one_two = (vec![t()], vec![t(), t()]);
    let two_one = (vec![t(), t()], vec![t()]);
    assert_eq!(f.call(&one_two).item::<f32>(), 8.0);
    assert_eq!(f.call(&two_one).item::<f32>(), 10.0);
    assert_eq!(f.call(&one_two).item::<f32>(), 8.0);
    assert_eq!(traces.get(), 2);
}

#[test]
fn cache_is_bounded_least_recently_used_out() {
    let f = jitted(|x: &Tensor| x * 2.0, JitOptions { cache_size: 2, ..JitOptions::default() });
    let n = |k: usize| Tensor::zeros([k], DType::F32);
    f.call(&n(1));
    f.call(&n(2));
    f.call(&n(1)); // [1] is now the most recent
    f.call(&n(3)); // evicts [2]
    let shapes: Vec<usize> = f.entries().iter().map(|e| e.avals[0].shape[0]).collect();
    assert_eq!(shapes, vec![1, 3]);
    assert_eq!(f.stats().evictions, 1);
    f.call(&n(2));
    assert_eq!(f.stats().misses, 4);
    f.set_capacity(1);
    assert_eq!(f.entries().len(), 1);
    assert_eq!(f.entries()[0].avals[0].shape[0], 2);
    assert_eq!(f.stats().capacity, 1);
}

/// A static argument keys the cache by value, and `f` may branch on it.
#[test]
fn static_arguments() {
    let traces = Cell::new(0);
    let f = jitted_static(
        |(power, negate): &(i32, bool), x: &Tensor| {
            traces.set(traces.get() + 1);
            let y = x.powi(*power);
            if *negate {
                -y
            } else {
                y
            }
        },
        JitOptions::default(),
    );
    let x = Tensor::from_vec(vec![2.0f64, -3.0], [2]);
    assert_eq!(f.call_static(&(3, false), &x).to_vec::<f64>(), vec![8.0, -27.0]);
    assert_eq!(f.call_static(&(2, true), &x).to_vec::<f64>(), vec![-4.0, -9.0]);
    assert_eq!(f.call_static(&(3, false), &x).to_vec::<f64>(), vec![8.0, -27.0]);
    assert_eq!(traces.get(), 2);
    let keys: Vec<String> = f.entries().iter().map(|e| e.static_arg.clone()).collect();
    assert_eq!(keys, vec!["(2, true)", "(3, false)"]);
    let g = xform::jit_static(|k: &usize, x: &Tensor| x.slice_axis(0, 0, *k as isize, 1).sum());
    assert_eq!(g(&1, &x).item::<f64>(), 2.0);
    assert_eq!(g(&2, &x).item::<f64>(), -1.0);
}

/// Every registry sample, jitted, equals its eager evaluation within one
/// ulp (the same kernels run, so in practice bit for bit).
#[test]
fn registry_samples_equal_eager() {
    on_each_device(|| {
        let mut g = G::new(23);
        for e in entries() {
            for &dtype in &e.dtypes {
                let case = (e.gen)(&mut g, dtype);
                let inputs = (case.make)(7);
                let eager = case.apply(&inputs).unwrap();
                let c = case.clone();
                let f = jit_with(move |xs: &Vec<Tensor>| c.apply(xs).unwrap(), JitOptions::default());
                let jitted = f(&inputs);
                let again = f(&inputs);
                if let Some((name, n)) = &case.axis {
                    // a collective jitted inside its map: the program runs
                    // through bind, where the map applies it (NOTE: [named axes])
                    let prim = case.prim.clone();
                    let inner =
                        jit_with(move |xs: &Vec<Tensor>| bind(&prim, xs).unwrap().to_vec(), JitOptions::default());
                    let opts = xform::VmapOptions::new().axis_name(name.as_str()).axis_size(*n);
                    let outer = xform::vmap_with(|xs: &Vec<Tensor>| inner(xs), opts);
                    for (k, (o, w)) in outer(&inputs).iter().zip(eager.iter()).enumerate() {
                        within_ulp(&format!("{case:?} jitted inside vmap, output {k}"), o, w);
                    }
                }
                assert_eq!(jitted.len(), eager.len());
                for ((j, a), w) in jitted.iter().zip(&again).zip(eager.iter()) {
                    within_ulp(&format!("{case:?}"), j, w);
                    within_ulp(&format!("{case:?} (replayed)"), a, w);
                }
            }
        }
    })
}

/// Random programs of elementwise, shape and reduction ops (with the
/// identities the passes remove, and repeated subexpressions), jitted,
/// equal eager execution within one ulp.
#[test]
fn random_programs_equal_eager() {
    for seed in 0..40u64 {
        let mut g = G::new(seed);
        let ops: Vec<usize> = (0..g.int(3, 14)).map(|_| g.int(0, 13)).collect();
        let c = Key::new(seed).normal([4, 6], DType::F32);
        let f = |x: &Tensor| {
            let mut y = x.clone();
            let mut outs = Vec::new();
            for &op in &ops {
                y = match op {
                    0 => y.sin(),
                    1 => (&y * 0.5).exp(),
                    2 => &y * 1.0,
                    3 => &y + 0.0,
                    4 => -(-&y),
                    5 => y.t().t(),
                    6 => y.reshape(&[24]).reshape(&[6, 4]).reshape(&[4, 6]),
                    7 => &y + &c,
                    8 => y.tanh() * y.tanh(),
                    9 => y.cast(DType::F32),
                    10 => &y - y.sum_axis(1, true),
                    11 => y.t().matmul(&c).matmul(&c.t()).t() * 0.01,
                    _ => {
                        outs.push(y.max_axis(0, false));
                        y.abs().sqrt()
                    }
                };
            }
            outs.push(y);
            outs
        };
        let x = Key::new(100 + seed).normal([4, 6], DType::F32);
        let want = f(&x);
        let jf = jitted(f, JitOptions::default());
        for round in 0..2 {
            let got = jf.call(&x);
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                within_ulp(&format!("seed {seed} ops {ops:?} output {k} round {round}"), a, b);
            }
        }
        let e = &jf.entries()[0];
        assert!(e.optimized_eqns <= e.traced_eqns, "seed {seed}: {} > {}", e.optimized_eqns, e.traced_eqns);
    }
}

/// The identities and repeated work of a traced function are gone from
/// its optimized program (`+ -0.0` is the exact float identity; `+ 0.0`
/// turns `-0.0` into `+0.0` and stays).
#[test]
fn optimized_program_drops_identities_and_repeats() {
    let f = jitted(
        |x: &Tensor| {
            let a = (&x.t().t() * 1.0 + -0.0).reshape(&[2, 3]).reshape(&[6]);
            let s1 = a.sin();
            let s2 = a.sin();
            let _unused = x.exp();
            -(-(&s1 + &s2))
        },
        JitOptions::default(),
    );
    let x = Tensor::linspace(-1.0, 1.0, 6, DType::F32);
    let p = f.program(&(), &x).unwrap();
    assert_eq!(p.eqns.len(), 2, "{p}"); // sin, add
    within_ulp("f", &f.call(&x), &(x.sin() * 2.0));
    let e = &f.entries()[0];
    assert!(e.traced_eqns >= 8, "{}", e.traced_eqns);
}

#[test]
fn composes_with_transforms() {
    on_each_device(|| {
        let f = |x: &Tensor| (x.sin() * x).sum();
        let xs = Key::new(3).normal([5, 3], DType::F64);
        let x = xs.select(0, 0);
        // grad(jit(f)), vmap(jit(f))
        assert_close(&v(&grad(jit(f))(&x)), &v(&grad(f)(&x)), 1e-15);
        assert_close(&v(&vmap(jit(f))(&xs)), &v(&vmap(f)(&xs)), 1e-15);
        // jit(vmap(grad(f))): one program
        let jg = jitted(vmap(grad(f)), JitOptions::default());
        assert_close(&v(&jg.call(&xs)), &v(&vmap(grad(f))(&xs)), 1e-15);
        let p = jg.program(&(), &xs).unwrap();
        assert!(p.consts.iter().all(|c| !c.is_tracer()) && !p.eqns.is_empty());
        // jit inside vmap of grad; hessian of jit
        let inner = jit(|x: &Tensor| x.sin() * x);
        let vg = vmap(grad(|x: &Tensor| inner(x).sum()));
        assert_close(&v(&vg(&xs)), &v(&vmap(grad(f))(&xs)), 1e-15);
        assert_close(&v(&hessian(jit(f))(&x)), &v(&hessian(f)(&x)), 1e-14);
        // nested jit, and grad of it
        let nested = jit(|x: &Tensor| jit(|y: &Tensor| y.exp() * 2.0)(x).sum() + jit(f)(x));
        let plain = |x: &Tensor| (x.exp() * 2.0).sum() + f(x);
        assert_close(&v(&nested(&x)), &v(&plain(&x)), 1e-15);
        assert_close(&v(&grad(&nested)(&x)), &v(&grad(plain)(&x)), 1e-15);
        assert_eq!(stack_depth(), 0);
    })
}

/// A jitted function that captures a tracer of an enclosing transform is
/// traced on each call and never cached.
#[test]
fn captured_tracers_are_not_cached() {
    let j = jitted(|(z, w): &(Tensor, Tensor)| z * w, JitOptions::default());
    let xs = Key::new(1).normal([4, 3], DType::F32);
    let z = Tensor::ones([3], DType::F32) * 2.0;
    let out = vmap(|x: &Tensor| {
        let g = jitted(|z: &Tensor| z * x, JitOptions::default());
        let r = g.call(&z) + j.call(&(z.clone(), x.clone()));
        assert_eq!(g.stats().entries, 0);
        r
    })(&xs);
    assert_close(&v(&out), &v(&(&xs * 4.0)), 1e-6);
    assert_eq!(j.stats().entries, 1);
}

/// In-place writes to the arguments are written back, as eagerly.
#[test]
fn mutation_is_written_back() {
    let f = |(x, acc): &(Tensor, Tensor)| {
        acc.add_(&x.sin());
        x.mul_scalar_(2.0);
        x.exp()
    };
    let jf = jitted(f, JitOptions::default());
    for round in 0..2 {
        let (x, acc) = (x8(), Tensor::ones([8], DType::F32));
        let (xe, acce) = (x8(), Tensor::ones([8], DType::F32));
        let y = jf.call(&(x.clone(), acc.clone()));
        let ye = f(&(xe.clone(), acce.clone()));
        within_ulp(&format!("y {round}"), &y, &ye);
        within_ulp(&format!("x {round}"), &x, &xe);
        within_ulp(&format!("acc {round}"), &acc, &acce);
    }
    assert_eq!(jf.stats().misses, 1);
}

#[test]
fn reading_a_value_inside_is_an_error() {
    let f = try_jit(|x: &Tensor| if x.sum().item::<f32>() > 0.0 { x * 2.0 } else { x.clone() });
    let err = f(&x8()).unwrap_err();
    assert!(err.to_string().contains("staged into a program (jit)"), "{err}");
    // the error names what the user called, not what it calls
    assert_eq!(err.op, "item", "{err}");
    assert_eq!(stack_depth(), 0);
    // shape errors inside are values too, and the stack is restored
    let g = try_jit(|x: &Tensor| x.matmul(&Tensor::ones([3], DType::F32)));
    assert!(g(&x8()).is_err());
    assert_eq!(stack_depth(), 0);
}

/// A captured tensor is a constant of the program: an eager write to it
/// afterwards is refused, never a stale number. An output that is a
/// captured constant is a fresh copy.
#[test]
fn captured_constants() {
    let c = Tensor::from_vec(vec![1.0f32, 2.0], [2]);
    let f = jit(|x: &Tensor| (x + &c, c.clone()));
    let x = Tensor::zeros([2], DType::F32);
    let (y, cc) = f(&x);
    assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0]);
    cc.add_scalar_(5.0); // a copy: the program's constant is untouched
    assert_eq!(f(&x).0.to_vec::<f32>(), vec![1.0, 2.0]);
    c.add_scalar_(1.0);
    let err = catch(|| f(&x)).unwrap_err();
    assert!(err.to_string().contains("modified by an in-place operation"), "{err}");
}

/// Control flow inside jit stays control flow in the program; a jit
/// inside a scan body or a cond branch is inlined into the body; grad
/// goes through both.
#[test]
fn control_flow_inside_and_around() {
    let step = jit(|(h, x): &(Tensor, Tensor)| (h * 0.9 + x).tanh());
    let run = |xs: &Tensor| {
        let h0 = Tensor::zeros([3], DType::F64);
        let (h, ()) = scan(|h: &Tensor, x: &Tensor| (step(&(h.clone(), x.clone())), ()), &h0, xs);
        cond(&h.sum().gt_scalar(0.0), |h: &Tensor| h.exp().sum(), |h: &Tensor| h.sin().sum(), &h)
    };
    let plain = |xs: &Tensor| {
        let mut h = Tensor::zeros([3], DType::F64);
        for i in 0..xs.dim(0) {
            h = (&h * 0.9 + xs.select(0, i as isize)).tanh();
        }
        let s = h.sum().item::<f64>();
        if s > 0.0 {
            h.exp().sum()
        } else {
            h.sin().sum()
        }
    };
    for seed in [1, 2] {
        let xs = Key::new(seed).normal([5, 3], DType::F64);
        let jr = jitted(run, JitOptions::default());
        assert_close(&v(&jr.call(&xs)), &v(&plain(&xs)), 1e-14);
        assert_close(&v(&jr.call(&xs)), &v(&run(&xs)), 0.0);
        let p = jr.program(&(), &xs).unwrap();
        let names: Vec<&str> = p.eqns.iter().map(|e| e.prim.name()).collect();
        assert!(names.contains(&"scan") && names.contains(&"cond"), "{p}");
        assert_close(&v(&grad(jit(run))(&xs)), &v(&grad(plain)(&xs)), 1e-12);
    }
}

/// One jitted function called from several threads: one trace per
/// signature, every result equal.
#[test]
fn shared_across_threads() {
    let traces = std::sync::atomic::AtomicUsize::new(0);
    let f = jitted(
        |x: &Tensor| {
            traces.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (x.sin() * x).sum()
        },
        JitOptions::default(),
    );
    let x = Tensor::linspace(-1.0, 1.0, 16, DType::F64);
    let want = (x.sin() * &x).sum().item::<f64>();
    f.call(&x);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let x = Tensor::linspace(-1.0, 1.0, 16, DType::F64);
                for _ in 0..20 {
                    assert_eq!(f.call(&x).item::<f64>(), want);
                }
            });
        }
    });
    assert_eq!(traces.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(f.stats().hits, 60);
}

/// Elementwise fusion (NOTE: [elementwise fusion]): a jitted chain of
/// elementwise ops with a broadcast row and a scalar, f32 and f64, on a
/// size that is not a multiple of the tile and one large enough to split
/// across threads, and `jit(vmap(grad))` of it, are bit-identical to eager
/// (NaNs and infinities included).
#[test]
fn fused_chains_are_bit_identical_to_eager() {
    let f = |x: &Tensor, r: &Tensor| {
        let y = (x.sin() * r + 0.5).exp() / (x.abs() + 1.0);
        y.tanh() * x - r
    };
    for d in [DType::F32, DType::F64] {
        for (rows, cols) in [(37usize, 29usize), (300, 700)] {
            let mut xv = v(&Key::new(9).normal([rows, cols], DType::F64));
            (xv[1], xv[cols + 2], xv[cols + 3]) = (f64::NAN, f64::INFINITY, f64::NEG_INFINITY);
            let x = Tensor::from_vec(xv, [rows, cols]).cast(d);
            let r = Key::new(10).normal([cols], d);
            let exact = |what: &str, got: &Tensor, want: &Tensor| {
                assert_eq!((got.shape(), got.dtype()), (want.shape(), want.dtype()), "{what}");
                for (k, (g, w)) in v(got).iter().zip(v(want)).enumerate() {
                    assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{what}: {k}: jit {g} eager {w}");
                }
            };
            exact("jit(f)", &jit(|x: &Tensor| f(x, &r))(&x), &f(&x, &r));
            let g = |x: &Tensor| f(x, &r).sum();
            exact("jit(vmap(grad))", &jit(vmap(grad(g)))(&x), &vmap(grad(g))(&x));
        }
    }
}

/// `jit(jacrev)` of an elementwise op after a linear map contracts the
/// identity seed, scaled, with the map: the `diagonal` pass computes it as
/// a scaling. Equal to eager values (bit for bit but for the sign of a
/// zero) where the cotangent is finite, and where it is not (the guard
/// falls back to the product): `sqrt` at 0 has an infinite derivative,
/// at a negative argument a NaN one. `jacrev` of the transposed map
/// (the seed on the other side of the product) too, and of relu (a
/// select of diagonals: scaled without a guard).
#[test]
fn jacrev_seed_products_are_scalings() {
    let n = 48;
    let a = Key::new(21).normal([n, n], DType::F32) * 0.2;
    let values = |got: &Tensor, want: &Tensor, what: &str| {
        assert_eq!(got.shape(), want.shape(), "{what}");
        for (k, (g, w)) in v(got).iter().zip(v(want)).enumerate() {
            let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()) || (*g == 0.0 && w == 0.0);
            assert!(same, "{what}: element {k}: jit {g}, eager {w}");
        }
    };
    let g = |x: &Tensor| a.matmul(x).tanh();
    let h = |x: &Tensor| a.matmul(x).sqrt();
    let ht = |x: &Tensor| x.matmul(&a).sqrt();
    let x = Key::new(22).normal([n], DType::F32);
    // relu's cotangent is a select of diagonals: a plain scaling
    let relu = |x: &Tensor| a.matmul(x).relu();
    let program = jitted(jacrev(relu), JitOptions::default()).program(&(), &x).unwrap();
    let products = program.eqns.iter().filter(|e| format!("{:?}", e.prim).contains("DotGeneral")).count();
    assert_eq!(products, 1, "only the forward map is a product:\n{program}");
    values(&jit(jacrev(relu))(&x), &jacrev(relu)(&x), "jacrev(relu(A x))");
    for program in [
        jitted(jacrev(g), JitOptions::default()).program(&(), &x).unwrap(),
        jitted(jacrev(ht), JitOptions::default()).program(&(), &x).unwrap(),
    ] {
        assert!(program.to_string().contains("cond"), "the product was not rewritten:\n{program}");
        let products = program.eqns.iter().filter(|e| format!("{:?}", e.prim).contains("DotGeneral")).count();
        assert_eq!(products, 1, "only the forward map is a product:\n{program}");
    }
    values(&jit(jacrev(g))(&x), &jacrev(g)(&x), "jacrev(tanh(A x))");
    let zero_at_3 = Tensor::from_vec((0..n).map(|i| if i == 3 { 0.0f32 } else { 1.0 }).collect::<Vec<_>>(), [n]);
    let x0 = Tensor::zeros([n], DType::F32);
    // composed: vmap of it, and grad through it (the cond's rules)
    let xs = Key::new(23).normal([3, n], DType::F32);
    let close = |got: &Tensor, want: &Tensor, what: &str| {
        for (k, (g, w)) in v(got).iter().zip(v(want)).enumerate() {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}: element {k}: jit {g}, eager {w}");
        }
    };
    close(&vmap(jit(jacrev(g)))(&xs), &vmap(jacrev(g))(&xs), "vmap(jit(jacrev))");
    let s = |x: &Tensor| jit(jacrev(g))(x).sum();
    close(&grad(s)(&x), &grad(|x: &Tensor| jacrev(g)(x).sum())(&x), "grad(jit(jacrev))");
    for (what, x) in [("finite", x.abs() + 1.0), ("zero", x0), ("one zero", zero_at_3), ("negative", -x.abs() - 1.0)] {
        // sqrt(A x): A x = 0 where x = 0; the columns of A are mixed
        // where only one x is 0 (finite but for rows where A x = 0)
        values(&jit(jacrev(h))(&x), &jacrev(h)(&x), &format!("jacrev(sqrt(A x)), x {what}"));
        values(&jit(jacrev(ht))(&x), &jacrev(ht)(&x), &format!("jacrev(sqrt(x A)), x {what}"));
    }
}

/// The address of a CPU tensor's f32 buffer.
fn buffer_addr(t: &Tensor) -> usize {
    let a = t.array().expect("concrete");
    let g = a.read();
    g.cpu("test").expect("cpu").as_slice::<f32>().as_ptr() as usize
}

/// Buffer planning (NOTE: [buffer planning]): a donated argument no one
/// else holds is written over (the result lives in its buffer); one the
/// caller still holds is not (its values stay); an intermediate read last
/// by an elementwise step is written over; results equal `call`'s, bit for
/// bit.
#[test]
fn donated_arguments_and_dead_intermediates_are_written_over() {
    let f = |x: &Tensor| (x * 0.5 + 1.0).exp().matmul(&x.transpose(0, 1)).tanh() - 0.25;
    let j = jitted(f, JitOptions::default());
    let x = Key::new(3).normal([24, 24], DType::F32);
    let want = f(&x);
    let same = |got: &Tensor| {
        assert_eq!(
            v(got).iter().map(|g| g.to_bits()).collect::<Vec<_>>(),
            v(&want).iter().map(|w| w.to_bits()).collect::<Vec<_>>()
        );
    };
    // plain calls: x is the caller's; the matmul's result is written over
    // by the tanh/sub step that reads it last
    same(&j.call(&x));
    let writes = j.entries()[0].plan.in_place_writes;
    assert_eq!(writes, 1, "the matmul's result is written over: {:?}", j.entries());
    // a clone kept: x is not written over, its values stay
    let kept = v(&x);
    same(&j.call_donated(x.clone()));
    assert_eq!(v(&x), kept);
    assert_eq!(j.entries()[0].plan.in_place_writes, writes + 1);
    // handed over: the fused x * 0.5 + 1.0, exp step writes over x too
    let x2 = Tensor::from_vec(kept.iter().map(|&e| e as f32).collect::<Vec<_>>(), [24, 24]);
    let addr = buffer_addr(&x2);
    let step = jitted(|x: &Tensor| (x * 0.5 + 1.0).exp(), JitOptions::default());
    let y = step.call_donated(x2);
    assert_eq!(buffer_addr(&y), addr, "the result lives in the donated buffer");
    let x3 = Tensor::from_vec(kept.iter().map(|&e| e as f32).collect::<Vec<_>>(), [24, 24]);
    let eager = (&x3 * 0.5 + 1.0).exp();
    assert_eq!(v(&y), v(&eager));
    assert_eq!(step.entries()[0].plan.in_place_writes, 1);
    // a view of the donated storage elsewhere: not written over
    let x4 = x3.clone().reshape(&[576]).reshape(&[24, 24]);
    let y4 = step.call_donated(x3);
    assert_ne!(buffer_addr(&y4), buffer_addr(&x4));
    assert_eq!(v(&x4), kept);
    assert_eq!(v(&y4), v(&eager));
}

/// Parallel sinks (NOTE: [parallel sinks]): `jit(vmap(grad))` of a
/// 3-layer MLP (W1 small's sizes) returns per-sample outer products no
/// step reads; the two whose results are not last run on a helper thread
/// while the replay goes on. Results are bit-identical to the replay with
/// `parallel_sinks` off and to eager, over repeated calls, calls from
/// several threads at once, and f64; with the option off no step is a
/// sink.
#[test]
fn sinks_run_beside_the_replay_bit_identical() {
    let per_sample = crate::harness::w1_per_sample;
    for d in [DType::F32, DType::F64] {
        let k = Key::new(21);
        let params = crate::harness::w1_params(&k, d);
        let args = (params, k.fold_in(7).normal([64, 32], d), k.fold_in(8).randint([64], 0, 10, DType::I32));
        let bits = |t: &(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)| -> Vec<Vec<u64>> {
            [&t.0, &t.1, &t.2, &t.3, &t.4, &t.5].iter().map(|x| v(x).iter().map(|e| e.to_bits()).collect()).collect()
        };
        let want = bits(&per_sample(&args));
        let par = jitted(per_sample, JitOptions::default());
        let seq = jitted(per_sample, JitOptions { parallel_sinks: false, ..JitOptions::default() });
        assert_eq!(bits(&seq.call(&args)), want, "{d:?}: sequential replay");
        for _ in 0..50 {
            assert_eq!(bits(&par.call(&args)), want, "{d:?}: replay with sinks");
        }
        assert_eq!(par.entries()[0].plan.sink_steps, 2, "{d:?}: {:?}", par.entries());
        assert_eq!(seq.entries()[0].plan.sink_steps, 0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..20 {
                        assert_eq!(bits(&par.call(&args)), want, "{d:?}: concurrent replays");
                    }
                });
            }
        });
        // replays on every pool thread at once (these run their sinks
        // themselves: a pool thread waiting for the helper's sink could
        // starve that sink's own pool tasks)
        use rayon::prelude::*;
        (0..4 * rayon::current_num_threads()).into_par_iter().for_each(|_| {
            assert_eq!(bits(&par.call(&args)), want, "{d:?}: replays on pool threads");
        });
    }
}

/// Replays whose sinks are big enough to use the pool themselves, on every
/// pool thread at once and from plain threads beside them, finish with the
/// same bits as eager (a pool thread never waits for the helper).
#[test]
fn big_sinks_on_pool_threads_finish() {
    let f = |(a, c): &(Tensor, Tensor)| {
        let outer = vmap(|(a, c): &(Tensor, Tensor)| a.unsqueeze(1).matmul(&c.unsqueeze(0)))(&(a.clone(), c.clone()));
        (outer, a.sin())
    };
    let k = Key::new(5);
    let args = (k.normal([64, 256], DType::F32), k.fold_in(1).normal([64, 256], DType::F32));
    let want = v(&f(&args).0);
    let jf = jitted(f, JitOptions::default());
    assert_eq!(v(&jf.call(&args).0), want);
    assert_eq!(jf.entries()[0].plan.sink_steps, 1, "{:?}", jf.entries());
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..8 {
                assert_eq!(v(&jf.call(&args).0), want, "plain thread");
            }
        });
        use rayon::prelude::*;
        (0..4 * rayon::current_num_threads()).into_par_iter().for_each(|_| {
            assert_eq!(v(&jf.call(&args).0), want, "pool thread");
        });
    });
}
