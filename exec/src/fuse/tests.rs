use super::super::passes::testing::{build, push1};
use super::super::plan::{Plan, StepOp};
use super::*;
use xform_ops::prim::{BinaryOp, CompareOp, ElementwiseOp, ShapeOp, UnaryOp};
use xform_ops::{Aval, ProgramBuilder, Tensor};

/// Bitwise equal (any NaN equals any NaN: payloads are not compared).
pub(crate) fn assert_bits(got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.shape(), g.dtype()), (w.shape(), w.dtype()));
        for (i, (a, b)) in g.to_vec_f64().iter().zip(w.to_vec_f64()).enumerate() {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "element {i}: fused {a} eager {b}");
        }
    }
}

/// Runs `p` through the plan (fused) and through `Program::eval`
/// (eager, one primitive at a time) and asserts bitwise equal results.
pub(crate) fn check(p: &Program, args: &[Tensor]) -> Plan {
    let plan = Plan::compile(p).unwrap();
    assert_bits(&plan.run(args).unwrap(), &p.eval(args).unwrap());
    plan
}

fn fused_steps(plan: &Plan) -> Vec<usize> {
    plan.steps.iter().filter_map(|s| if let StepOp::Fused(f) = &s.op { Some(f.ops.len()) } else { None }).collect()
}

/// `n` values with NaN, infinities, signed zeros, tiny and huge ones.
pub(crate) fn values(n: usize, seed: u64, d: DType) -> Tensor {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e-30, 1e30, 1.0, -1.0];
    let v: Vec<f64> = (0..n)
        .map(|i| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            if i % 13 == 5 {
                special[(state >> 3) as usize % special.len()]
            } else {
                (u - 0.5) * 8.0
            }
        })
        .collect();
    Tensor::from_vec(v, [n]).cast(d)
}

fn aval(shape: &[usize], d: DType) -> Aval {
    Aval { shape: Shape::from(shape), dtype: d, device: Device::Cpu }
}

/// Random chains of unary, binary, compare/select and convert ops over
/// a 2-d shape whose size is not a multiple of the tile, with a
/// broadcast row and a broadcast scalar constant among the operands:
/// bit-identical to eager, f32 and f64.
#[test]
fn random_chains_are_bit_identical() {
    let unary = [UnaryOp::Sin, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Neg, UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Abs];
    let binary = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Pow];
    let (r, c) = (37usize, 29usize);
    for d in [DType::F32, DType::F64] {
        for seed in 0..12u64 {
            let x = values(r * c, seed, d).reshape_to([r, c]);
            let y = values(r * c, seed + 100, d).reshape_to([r, c]);
            let row = values(c, seed + 200, d);
            let scalar = values(1, seed + 300, d).reshape_to(Shape::scalar());
            let p = build(&[x.clone(), y.clone(), row.clone()], |b: &mut ProgramBuilder, ins| {
                let full = aval(&[r, c], d);
                let bc = |b: &mut ProgramBuilder, a, dims: &[usize]| {
                    let op =
                        ShapeOp::BroadcastInDim { shape: Shape::from([r, c]), dims: dims.iter().copied().collect() };
                    push1(b, Prim::Shape(op), &[a], Some(full.clone()))
                };
                let k = b.constant(&scalar);
                let mut pool = vec![ins[0], ins[1], bc(b, ins[2], &[1]), bc(b, k, &[])];
                let mut st = seed;
                let mut pick = |n: usize| {
                    st = st.wrapping_mul(2862933555777941757).wrapping_add(3037000493);
                    (st >> 33) as usize % n
                };
                for _ in 0..10 {
                    let a = pool[pool.len() - 1 - pick(pool.len().min(3))];
                    let bb = pool[pick(pool.len())];
                    let v = match pick(5) {
                        0 | 1 => push1(b, Prim::Unary(unary[pick(unary.len())]), &[a], None),
                        2 | 3 => push1(b, Prim::Binary(binary[pick(binary.len())]), &[a, bb], None),
                        _ => {
                            let m = push1(b, Prim::Compare(CompareOp::Gt), &[a, bb], Some(aval(&[r, c], DType::Bool)));
                            let other = if d == DType::F32 { DType::F64 } else { DType::F32 };
                            let w = push1(
                                b,
                                Prim::Elementwise(ElementwiseOp::Convert(other)),
                                &[a],
                                Some(aval(&[r, c], other)),
                            );
                            let w = push1(b, Prim::Unary(UnaryOp::Exp), &[w], None);
                            let w = push1(b, Prim::Elementwise(ElementwiseOp::Convert(d)), &[w], Some(full.clone()));
                            push1(b, Prim::Elementwise(ElementwiseOp::Select), &[m, w, bb], Some(full.clone()))
                        }
                    };
                    pool.push(v);
                }
                vec![*pool.last().unwrap()]
            });
            let plan = check(&p, &[x, y, row]);
            assert_eq!(fused_steps(&plan).len(), 1, "one fused group: {p}");
        }
    }
}

/// A chain of N elementwise ops becomes one fused step (plan
/// inspection), here one over 2^17 elements, split across threads.
#[test]
fn a_chain_is_one_step() {
    for n in [1000usize, 1 << 17] {
        let x = values(n, 7, DType::F32);
        let p = build(std::slice::from_ref(&x), |b, ins| {
            let s = push1(b, Prim::Unary(UnaryOp::Sin), &[ins[0]], None);
            let m = push1(b, Prim::Binary(BinaryOp::Mul), &[s, ins[0]], None);
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[m], None);
            let a = push1(b, Prim::Binary(BinaryOp::Add), &[e, s], None);
            let t = push1(b, Prim::Unary(UnaryOp::Tanh), &[a], None);
            vec![push1(b, Prim::Binary(BinaryOp::Div), &[t, m], None)]
        });
        let plan = check(&p, &[x]);
        assert_eq!(plan.steps.len(), 1);
        assert_eq!(fused_steps(&plan), vec![6]);
    }
}

/// A group with two outputs; an intermediate read outside the group
/// (by a transpose) stays an output of the group, not fused away.
#[test]
fn outputs_and_outside_readers() {
    for d in [DType::F32, DType::F64] {
        let x = values(6 * 200, 3, d).reshape_to([6, 200]);
        let y = values(6 * 200, 4, d).reshape_to([6, 200]);
        let p = build(&[x.clone(), y.clone()], |b, ins| {
            let s = push1(b, Prim::Unary(UnaryOp::Sin), &[ins[0]], None);
            let m = push1(b, Prim::Binary(BinaryOp::Mul), &[s, ins[1]], None);
            let tr = push1(
                b,
                Prim::Shape(ShapeOp::Transpose { perm: [1, 0].into_iter().collect() }),
                &[s],
                Some(aval(&[200, 6], d)),
            );
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[m], None);
            let a = push1(b, Prim::Binary(BinaryOp::Add), &[e, m], None);
            let q = push1(b, Prim::Binary(BinaryOp::Sub), &[a, ins[1]], None);
            vec![tr, a, q]
        });
        let plan = check(&p, &[x, y]);
        assert_eq!(fused_steps(&plan), vec![2, 3]);
        let outs: Vec<usize> = plan.steps.iter().map(|s| s.outs.len()).collect();
        // sin/mul write s (read by the transpose) and m (read after);
        // exp/add/sub write a and q (program outputs), e stays inside
        assert_eq!(outs, vec![2, 1, 2]);
    }
}

/// Not covered (integers, a non-elementwise op between) runs unfused,
/// with equal results.
#[test]
fn fallbacks() {
    let x = Tensor::from_vec((0..50).collect::<Vec<i32>>(), [50]);
    let p = build(std::slice::from_ref(&x), |b, ins| {
        let n = push1(b, Prim::Unary(UnaryOp::Neg), &[ins[0]], None);
        vec![push1(b, Prim::Binary(BinaryOp::Mul), &[n, ins[0]], None)]
    });
    let plan = check(&p, &[x]);
    assert!(fused_steps(&plan).is_empty());
}

/// Strided operands (a transposed view, a reversed view, a broadcast
/// column) are gathered a row run at a time: bit-identical to eager,
/// over sizes that split rows across tiles.
#[test]
fn strided_operands() {
    for (r, c) in [(3usize, 5usize), (37, 29), (40, 1000)] {
        let x = values(r * c, 11, DType::F32).reshape_to([c, r]);
        let y = values(r * c, 12, DType::F32).reshape_to([r, c]);
        let col = values(r, 13, DType::F32);
        let p = build(&[x.clone(), y.clone(), col.clone()], |b, ins| {
            let full = aval(&[r, c], DType::F32);
            let t = push1(
                b,
                Prim::Shape(ShapeOp::Transpose { perm: [1, 0].into_iter().collect() }),
                &[ins[0]],
                Some(full.clone()),
            );
            let rev = push1(b, Prim::Shape(ShapeOp::Rev { axes: [0, 1].into_iter().collect() }), &[ins[1]], None);
            let bc = push1(
                b,
                Prim::Shape(ShapeOp::BroadcastInDim { shape: Shape::from([r, c]), dims: [0].into_iter().collect() }),
                &[ins[2]],
                Some(full.clone()),
            );
            let s = push1(b, Prim::Unary(UnaryOp::Sin), &[t], None);
            let m = push1(b, Prim::Binary(BinaryOp::Mul), &[s, rev], None);
            vec![push1(b, Prim::Binary(BinaryOp::Sub), &[m, bc], None)]
        });
        let plan = check(&p, &[x, y, col]);
        assert_eq!(fused_steps(&plan), vec![3]);
    }
}

/// Broadcasts along leading axes whose block divides the tile (a row of
/// 64, a [4, 8] block, a scalar) are gathered at a range's first tile
/// only; results stay bit-identical, with a shorter last tile and with
/// a block that does not divide the tile (gathered every tile).
#[test]
fn rank3_strided_operands_cross_rows_and_planes() {
    // tiles of 1024 start mid-row and mid-plane; rows are gathered whole
    // where they fit, then carried into the outer axes
    for (a, b, c) in [(6usize, 50usize, 7usize), (3, 5, 300), (70, 3, 11)] {
        let x = values(a * b * c, 21, DType::F32).reshape_to([c, a, b]);
        let mid = values(a * c, 22, DType::F64).reshape_to([a, c]);
        let p = build(&[x.clone(), mid.clone()], |bld, ins| {
            let t = push1(
                bld,
                Prim::Shape(ShapeOp::Transpose { perm: [1, 2, 0].into_iter().collect() }),
                &[ins[0]],
                Some(aval(&[a, b, c], DType::F32)),
            );
            let wide = push1(
                bld,
                Prim::Elementwise(ElementwiseOp::Convert(DType::F64)),
                &[t],
                Some(aval(&[a, b, c], DType::F64)),
            );
            let bc = push1(
                bld,
                Prim::Shape(ShapeOp::BroadcastInDim {
                    shape: Shape::from([a, b, c]),
                    dims: [0, 2].into_iter().collect(),
                }),
                &[ins[1]],
                Some(aval(&[a, b, c], DType::F64)),
            );
            let e = push1(bld, Prim::Unary(UnaryOp::Exp), &[wide], None);
            vec![push1(bld, Prim::Binary(BinaryOp::Mul), &[e, bc], None)]
        });
        let plan = check(&p, &[x, mid]);
        assert_eq!(fused_steps(&plan), vec![3]);
    }
}

#[test]
fn tile_periodic_broadcasts() {
    for (lead, block) in [(70usize, vec![64usize]), (100, vec![4, 8]), (33, vec![]), (50, vec![3, 7])] {
        let inner: usize = block.iter().product();
        let full: Vec<usize> = std::iter::once(lead).chain(block.iter().copied()).collect();
        let x = values(lead * inner, 21, DType::F64).reshape_to(full.clone());
        let row = values(inner, 22, DType::F64).reshape_to(block.clone());
        let p = build(&[x.clone(), row.clone()], |b, ins| {
            let bc = push1(
                b,
                Prim::Shape(ShapeOp::BroadcastInDim {
                    shape: Shape::from(full.clone()),
                    dims: (1..full.len()).collect(),
                }),
                &[ins[1]],
                Some(aval(&full, DType::F64)),
            );
            let e = push1(b, Prim::Unary(UnaryOp::Exp), &[ins[0]], None);
            vec![push1(b, Prim::Binary(BinaryOp::Mul), &[e, bc], None)]
        });
        let plan = check(&p, &[x, row]);
        assert_eq!(fused_steps(&plan), vec![2]);
    }
    let periodic = |shape: &[usize], strides: &[isize]| {
        tile_periodic(&xform_kernels::Layout {
            shape: Shape::from(shape.to_vec()),
            strides: strides.iter().copied().collect(),
            offset: 0,
        })
    };
    assert!(periodic(&[70, 64], &[0, 1]));
    assert!(periodic(&[9, 4, 8], &[0, 8, 1]));
    assert!(periodic(&[9, 4, 8], &[0, 1, 0]));
    assert!(periodic(&[5, 5], &[0, 0]));
    assert!(!periodic(&[70, 64], &[64, 1]), "not a broadcast");
    assert!(!periodic(&[70, 3, 7], &[0, 7, 1]), "21 does not divide the tile");
    assert!(!periodic(&[70, 64], &[1, 0]), "a column broadcast varies along the tile");
}

/// A broadcast along leading axes whose block does not divide the tile
/// (W1's [64, 10] logits plus a bias of 10) is gathered one block, then
/// by doubling copies, at every phase of the block against the tile;
/// an output that later ops of the group read (written straight to
/// the output's tile) reads back what was written. Bitwise as eager.
#[test]
fn broadcast_blocks_are_gathered_by_doubling() {
    for (lead, block, dims) in [
        (64usize, vec![10usize], vec![1usize]),
        (9, vec![300], vec![1]),
        (5, vec![700], vec![1]),
        (7, vec![3, 50], vec![1, 2]),
        (4, vec![3, 130], vec![2]),
    ] {
        let full: Vec<usize> = std::iter::once(lead).chain(block.iter().copied()).collect();
        let src: Vec<usize> = dims.iter().map(|&d| full[d]).collect();
        let n: usize = full.iter().product();
        let x = values(n, 31, DType::F32).reshape_to(full.clone());
        let row = values(src.iter().product(), 32, DType::F32).reshape_to(src.clone());
        let p = build(&[x.clone(), row.clone()], |b, ins| {
            let shape = Shape::from(full.clone());
            let bc = push1(
                b,
                Prim::Shape(ShapeOp::BroadcastInDim { shape, dims: dims.iter().copied().collect() }),
                &[ins[1]],
                Some(aval(&full, DType::F32)),
            );
            let s = push1(b, Prim::Binary(BinaryOp::Add), &[ins[0], bc], None);
            let t = push1(b, Prim::Unary(UnaryOp::Tanh), &[s], None);
            let tt = push1(b, Prim::Binary(BinaryOp::Mul), &[t, t], None);
            vec![t, push1(b, Prim::Binary(BinaryOp::Sub), &[tt, bc], None)]
        });
        let plan = check(&p, &[x, row]);
        assert_eq!(fused_steps(&plan), vec![4], "{full:?}");
    }
    let mut out = vec![0.0f32; 32];
    let data: Vec<f32> = (0..7).map(|i| i as f32).collect();
    // a [5, 7] row broadcast from element 3 of the block on
    gather(&data, &[5, 7], &[0, 1], 0, 3, &mut out);
    let want: Vec<f32> = (3..35).map(|e| (e % 7) as f32).collect();
    assert_eq!(out, want);
}
