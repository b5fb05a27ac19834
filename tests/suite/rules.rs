//! The generic rule tests, over every registry entry:
//! - JVP against central finite differences (f64);
//! - reverse mode consistent with forward mode and finite differences;
//! - second order (jvp and vjp of jvp and vjp) against finite differences;
//! - the transpose identity for every input a primitive is linear in;
//! - a factored cotangent (`Prim::factor`, ghost clipping) equals the
//!   transpose rule's, wherever a primitive offers one;
//! - the batch rule against a loop, for every placement of the batch dim
//!   (none, first, last, middle) of every input;
//! - jvp of vmap equals vmap of jvp; vmap of vmap equals a double loop.

use crate::harness::{cases, close, run, tol};
use crate::registry::{entries, Case, Entry, G};
use xform::core::interp::bind;
use xform::testing::{check_grads_with, check_transpose, GradCheckOptions, Modes};
use xform::{jvp, vmap, vmap_with, Axes, DType, Key, Tensor, VmapOptions};

/// `prim` as a function of its float inputs, the other inputs held fixed.
fn as_fn(case: &Case, inputs: &[Tensor]) -> (Vec<usize>, impl Fn(&Vec<Tensor>) -> Vec<Tensor> + Clone) {
    let diff: Vec<usize> = (0..inputs.len()).filter(|&i| inputs[i].dtype().is_float()).collect();
    let fixed = inputs.to_vec();
    let case = case.clone();
    let d2 = diff.clone();
    let f = move |xs: &Vec<Tensor>| {
        let mut all = fixed.clone();
        for (k, &i) in d2.iter().enumerate() {
            all[i] = xs[k].clone();
        }
        case.apply(&all).unwrap_or_else(|e| e.raise())
    };
    (diff, f)
}

fn f64_entries() -> Vec<Entry> {
    entries().into_iter().filter(|e| e.smooth && e.dtypes.contains(&DType::F64)).collect()
}

fn grad_check(e: &Entry, order: usize, modes: Modes, n: u32) {
    run(&format!("{modes:?} order {order} {}", e.name), n, |seed| {
        let mut g = G::new(seed);
        let c = (e.gen)(&mut g, DType::F64);
        let inputs = (c.make)(seed);
        let (diff, f) = as_fn(&c, &inputs);
        let outs = f(&diff.iter().map(|&i| inputs[i].clone()).collect());
        if diff.is_empty() || outs.iter().any(|o| o.dtype() != DType::F64) {
            return Ok(()); // e.g. a conversion to another dtype
        }
        let x: Vec<Tensor> = diff.iter().map(|&i| inputs[i].clone()).collect();
        let opts =
            GradCheckOptions { seed, per_element_limit: Some(if order > 1 { 12 } else { 48 }), ..Default::default() };
        check_grads_with(f, &x, order, modes, &opts).map_err(|err| format!("{c:?}: {err}"))
    });
}

#[test]
fn jvp_matches_finite_differences() {
    for e in f64_entries() {
        grad_check(&e, 1, Modes::Fwd, cases(10));
    }
}

#[test]
fn vjp_matches_finite_differences_and_jvp() {
    for e in f64_entries() {
        grad_check(&e, 1, Modes::Rev, cases(10));
    }
}

#[test]
fn second_derivatives_match_finite_differences() {
    for e in f64_entries() {
        grad_check(&e, 2, Modes::Both, cases(3));
    }
}

#[test]
fn transpose_identity_for_every_linear_input() {
    for e in entries().into_iter().filter(|e| !e.linear.is_empty() && e.dtypes.contains(&DType::F64)) {
        run(&format!("transpose {}", e.name), cases(10), |seed| {
            let mut g = G::new(seed);
            let c = (e.gen)(&mut g, DType::F64);
            let inputs = (c.make)(seed);
            for &i in &e.linear {
                if i >= inputs.len() || !inputs[i].dtype().is_float() {
                    continue;
                }
                let fixed = inputs.clone();
                let case = c.clone();
                let lin = move |t: &Tensor| {
                    let mut all = fixed.clone();
                    all[i] = t.clone();
                    case.apply(&all).unwrap_or_else(|e| e.raise())
                };
                if lin(&inputs[i]).iter().any(|o| !o.dtype().is_float()) {
                    continue;
                }
                check_transpose(lin, &inputs[i]).map_err(|err| format!("{c:?} (linear in input {i}): {err}"))?;
            }
            Ok(())
        });
    }
}

/// Wherever a primitive offers its cotangent factored (`factor_rule`,
/// NOTE: [factor]), the factor's product is the transpose rule's cotangent
/// (f64, within 1e-12 of its largest element). The primitives known to
/// factor must do so on some sample.
#[test]
fn factored_cotangents_equal_the_transpose_rule() {
    use xform::core::prim::{factor_rule, transpose_rule, LinearArg};
    let factored = std::cell::RefCell::new(Vec::<String>::new());
    for e in entries().into_iter().filter(|e| !e.linear.is_empty() && e.dtypes.contains(&DType::F64)) {
        run(&format!("factor {}", e.name), cases(10), |seed| {
            let mut g = G::new(seed);
            let c = (e.gen)(&mut g, DType::F64);
            if c.axis.is_some() {
                return Ok(()); // collectives factor nothing (their rules bind collectives)
            }
            let inputs = (c.make)(seed);
            let out = bind(&c.prim, &inputs).unwrap_or_else(|e| e.raise()).into_vec();
            if out.len() != 1 || !out[0].dtype().is_float() {
                return Ok(());
            }
            let ct = Key::new(seed).normal(out[0].shape(), DType::F64);
            for &i in &e.linear {
                if i >= inputs.len() || !inputs[i].dtype().is_float() {
                    continue;
                }
                let aval = inputs[i].aval();
                let args: Vec<LinearArg> = inputs
                    .iter()
                    .enumerate()
                    .map(|(j, t)| if j == i { LinearArg::Linear(&aval) } else { LinearArg::Const(t) })
                    .collect();
                let cts = [Some(ct.clone())];
                let Some(f) = factor_rule(&c.prim, &cts, &args, i).map_err(|e| e.to_string())? else {
                    continue;
                };
                let want =
                    transpose_rule(&c.prim, &cts, &args).map_err(|e| e.to_string())?[i].clone().expect("a cotangent");
                let got = f.materialize().map_err(|e| e.to_string())?;
                if got.shape() != want.shape() {
                    return Err(format!("{c:?} (input {i}): factored shape {} vs {}", got.shape(), want.shape()));
                }
                let scale = want.abs().max().item_f64().max(1e-300);
                let err = (&got - &want).abs().max().item_f64() / scale;
                if err > 1e-12 {
                    return Err(format!("{c:?} (input {i}): factored cotangent differs by {err:e}"));
                }
                if !factored.borrow().contains(&e.name) {
                    factored.borrow_mut().push(e.name.clone());
                }
            }
            Ok(())
        });
    }
    let factored = factored.into_inner();
    for name in ["dot_general", "gather", "broadcast_in_dim"] {
        assert!(factored.iter().any(|f| f.starts_with(name)), "{name} never factored; factored: {factored:?}");
    }
}

/// Where to put an input's batch dim: none, first, last or in the middle.
#[derive(Copy, Clone, Debug)]
enum Place {
    None,
    First,
    Last,
    Middle,
}

impl Place {
    fn axis(self, rank: usize, g: &mut G) -> Option<usize> {
        match self {
            Place::None => None,
            Place::First => Some(0),
            Place::Last => Some(rank),
            Place::Middle => Some(if rank == 0 { 0 } else { g.int(1, rank.max(1)).min(rank) }),
        }
    }
}

/// `B` examples of the case stacked with the given batch axes; unbatched
/// inputs take example 0's value.
fn stacked(c: &Case, seed: u64, b: usize, axes: &[Option<usize>]) -> (Vec<Tensor>, Vec<Vec<Tensor>>) {
    let examples: Vec<Vec<Tensor>> = (0..b).map(|k| (c.make)(seed.wrapping_add(k as u64 * 1000))).collect();
    let n = examples[0].len();
    let mut batched = Vec::with_capacity(n);
    let mut per_example: Vec<Vec<Tensor>> = (0..b).map(|_| Vec::with_capacity(n)).collect();
    for i in 0..n {
        match axes[i] {
            None => {
                batched.push(examples[0][i].clone());
                for k in 0..b {
                    per_example[k].push(examples[0][i].clone());
                }
            }
            Some(a) => {
                let parts: Vec<Tensor> = examples.iter().map(|ex| ex[i].clone()).collect();
                batched.push(Tensor::stack(&parts, a as isize));
                for k in 0..b {
                    per_example[k].push(examples[k][i].clone());
                }
            }
        }
    }
    (batched, per_example)
}

fn check_vmap_case(c: &Case, seed: u64, b: usize, axes: Vec<Option<usize>>) -> Result<(), String> {
    let (batched, per_example) = stacked(c, seed, b, &axes);
    let case = c.clone();
    let f = move |xs: &Vec<Tensor>| case.apply(xs).unwrap_or_else(|e| e.raise());
    let opts = VmapOptions {
        in_axes: Axes::Leaves(axes.iter().map(|a| a.map(|a| a as isize)).collect()),
        axis_size: Some(b),
        ..Default::default()
    };
    let got = xform::catch(|| vmap_with(&f, opts.clone())(&batched))
        .map_err(|e| format!("{c:?} with batch axes {axes:?}: {e}"))?;
    for k in 0..b {
        let want = f(&per_example[k]);
        if got.len() != want.len() {
            return Err(format!("{c:?} axes {axes:?}: vmap gives {} outputs, the loop {}", got.len(), want.len()));
        }
        for (j, (o, w)) in got.iter().zip(&want).enumerate() {
            let ok = o.select(0, k as isize);
            if ok.shape() != w.shape() || ok.dtype() != w.dtype() {
                return Err(format!(
                    "{c:?} axes {axes:?}: example {k} output {j} is {} {}, the loop gives {} {}",
                    ok.dtype(),
                    ok.shape(),
                    w.dtype(),
                    w.shape()
                ));
            }
            close(
                &format!("{c:?} with batch axes {axes:?}, example {k}, output {j}"),
                &ok.to_vec_f64(),
                &w.to_vec_f64(),
                tol(w.dtype()),
            )?;
        }
    }
    Ok(())
}

#[test]
fn vmap_matches_a_loop_for_every_batch_dim_placement() {
    for e in entries() {
        let dtype = if e.dtypes.contains(&DType::F64) { DType::F64 } else { e.dtypes[0] };
        run(&format!("vmap {}", e.name), cases(6), |seed| {
            let mut g = G::new(seed);
            let c = (e.gen)(&mut g, dtype);
            let n = (c.make)(seed).len();
            let ranks: Vec<usize> = (c.make)(seed).iter().map(|t| t.rank()).collect();
            let b = g.int(1, 3);
            if n == 0 {
                return check_vmap_case(&c, seed, b, vec![]);
            }
            for i in 0..n {
                for p in [Place::None, Place::First, Place::Last, Place::Middle] {
                    let mut axes: Vec<Option<usize>> = (0..n)
                        .map(|k| {
                            let q = [Place::None, Place::First, Place::Last, Place::Middle][g.int(0, 3)];
                            q.axis(ranks[k], &mut g)
                        })
                        .collect();
                    axes[i] = p.axis(ranks[i], &mut g);
                    check_vmap_case(&c, seed, b, axes)?;
                }
            }
            Ok(())
        });
    }
}

#[test]
fn jvp_of_vmap_equals_vmap_of_jvp() {
    for e in f64_entries() {
        run(&format!("jvp∘vmap {}", e.name), cases(4), |seed| {
            let mut g = G::new(seed);
            let c = (e.gen)(&mut g, DType::F64);
            let b = 2;
            let ranks: Vec<usize> = (c.make)(seed).iter().map(|t| t.rank()).collect();
            let axes: Vec<Option<usize>> =
                ranks.iter().map(|&r| if g.coin(0.7) { Some(g.int(0, r)) } else { None }).collect();
            let (batched, _) = stacked(&c, seed, b, &axes);
            let diff: Vec<usize> = (0..batched.len()).filter(|&i| batched[i].dtype().is_float()).collect();
            if diff.is_empty() {
                return Ok(());
            }
            let case = c.clone();
            let all = batched.clone();
            let d2 = diff.clone();
            let f = move |xs: &Vec<Tensor>| {
                let mut a = all.clone();
                for (k, &i) in d2.iter().enumerate() {
                    a[i] = xs[k].clone();
                }
                a
            };
            let apply = move |a: &Vec<Tensor>| case.apply(a).unwrap_or_else(|e| e.raise());
            let opts = VmapOptions {
                in_axes: Axes::Leaves(axes.iter().map(|a| a.map(|a| a as isize)).collect()),
                axis_size: Some(b),
                ..Default::default()
            };
            let x: Vec<Tensor> = diff.iter().map(|&i| batched[i].clone()).collect();
            let t: Vec<Tensor> = x
                .iter()
                .enumerate()
                .map(|(k, xi)| xform::Key::new(seed + k as u64).normal(xi.shape(), DType::F64))
                .collect();
            let vf = vmap_with(|a: &Vec<Tensor>| apply(a), opts.clone());
            let (_, t1) = jvp(|xs: &Vec<Tensor>| vf(&f(xs)), &x, &t);
            // vmap of jvp: batch the tangents like their primals
            let tang_full: Vec<Tensor> = {
                let mut a: Vec<Tensor> = batched.iter().map(|b| b.zeros_like()).collect();
                for (k, &i) in diff.iter().enumerate() {
                    a[i] = t[k].clone();
                }
                a
            };
            let jv = vmap_with(
                |(p, tt): &(Vec<Tensor>, Vec<Tensor>)| {
                    let dd: Vec<Tensor> = diff.iter().map(|&i| p[i].clone()).collect();
                    let td: Vec<Tensor> = diff.iter().map(|&i| tt[i].clone()).collect();
                    let base = p.clone();
                    let d3 = diff.clone();
                    let g = |xs: &Vec<Tensor>| {
                        let mut a = base.clone();
                        for (k, &i) in d3.iter().enumerate() {
                            a[i] = xs[k].clone();
                        }
                        apply(&a)
                    };
                    jvp(g, &dd, &td).1
                },
                VmapOptions {
                    in_axes: Axes::Leaves(axes.iter().chain(axes.iter()).map(|a| a.map(|a| a as isize)).collect()),
                    axis_size: Some(b),
                    ..Default::default()
                },
            );
            let t2 = jv(&(batched.clone(), tang_full));
            if t1.len() != t2.len() {
                return Err(format!("{c:?}: {} tangent outputs, vmap(jvp) gives {}", t1.len(), t2.len()));
            }
            for (j, (a, bb)) in t1.iter().zip(&t2).enumerate() {
                close(&format!("{c:?} output {j}"), &a.to_vec_f64(), &bb.to_vec_f64(), 1e-10)?;
            }
            Ok(())
        });
    }
}

#[test]
fn vmap_of_vmap_equals_a_double_loop() {
    for e in entries() {
        let dtype = if e.dtypes.contains(&DType::F64) { DType::F64 } else { e.dtypes[0] };
        run(&format!("vmap∘vmap {}", e.name), cases(3), |seed| {
            let mut g = G::new(seed);
            let c = (e.gen)(&mut g, dtype);
            let n = (c.make)(seed).len();
            if n == 0 {
                return Ok(());
            }
            let (b1, b2) = (2, 3);
            // inner batch at axis 0 of each example, outer batch at axis 0
            let outer: Vec<Vec<Tensor>> = (0..b1)
                .map(|k| {
                    let (bt, _) = stacked(&c, seed.wrapping_add(k as u64 * 77), b2, &vec![Some(0); n]);
                    bt
                })
                .collect();
            let xs: Vec<Tensor> =
                (0..n).map(|i| Tensor::stack(&outer.iter().map(|o| o[i].clone()).collect::<Vec<_>>(), 0)).collect();
            let case = c.clone();
            let f = move |a: &Vec<Tensor>| case.apply(a).unwrap_or_else(|e| e.raise());
            let got = vmap(vmap(&f))(&xs);
            for k1 in 0..b1 {
                for k2 in 0..b2 {
                    let ex: Vec<Tensor> = xs.iter().map(|x| x.select(0, k1 as isize).select(0, k2 as isize)).collect();
                    let want = f(&ex);
                    if got.len() != want.len() {
                        return Err(format!("{c:?}: vmap∘vmap gives {} outputs, the loop {}", got.len(), want.len()));
                    }
                    for (j, (o, w)) in got.iter().zip(&want).enumerate() {
                        let oo = o.select(0, k1 as isize).select(0, k2 as isize);
                        close(
                            &format!("{c:?} [{k1},{k2}] output {j}"),
                            &oo.to_vec_f64(),
                            &w.to_vec_f64(),
                            tol(w.dtype()),
                        )?;
                    }
                }
            }
            Ok(())
        });
    }
}
