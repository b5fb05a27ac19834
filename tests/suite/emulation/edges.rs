//! Edge cases the registry's small samples do not reach: every elementwise
//! op and conversion on special values (NaN, infinities, signed zeros,
//! ties, subnormals, the integer extremes) through broadcast and reversed
//! layouts, over more elements than a block; reductions over 0 to 2000
//! elements (one warp, several, the 256-thread blocks) and over more
//! outputs than the emulated grid's blocks; empty arrays and scalars;
//! gather and scatter-add with negative, repeated and out-of-range
//! indices; GEMM tiles cut by the matrix edges, an empty contraction,
//! strided operands and wrapping integers; windows with padding and
//! dilation over more than a block; Threefry with a broadcast key; strided
//! in-place writes.

use super::{case_of, relayout, run_cases, storage, Case, Check, Want};
use crate::registry::G;
use std::slice::from_ref;
use xform::core::kernels::cuda_launch as plans;
use xform::core::kernels::{Element, Layout, Shape};
use xform::core::prim::{
    ArgOp, BinaryOp, CompareOp, DotDims, ElementwiseOp, IndexOp, LinalgOp, RandomOp, ReduceOp, Reduction, SelectOp,
    ShapeOp, UnaryOp, WindowOp, WindowParams,
};
use xform::core::prims::padding::Padding;
use xform::{DType, Prim, Tensor};

/// A tensor of dtype `d` and `shape` from `vals` (converted as the CPU
/// converts: floats round, integers saturate).
fn tensor(d: DType, shape: &[usize], vals: &[f64]) -> Tensor {
    xform::core::kernels::with_dtype!(d, T => Tensor::from_vec(vals.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>(), shape.to_vec()))
}

/// Values at the edges of dtype `d`'s arithmetic.
fn specials(d: DType) -> Vec<f64> {
    match d {
        DType::Bool => vec![0.0, 1.0],
        DType::U32 => vec![0.0, 1.0, 2.0, 3.0, 7.0, 100.0, 2147483648.0, 4294967294.0, 4294967295.0],
        DType::I32 => vec![0.0, 1.0, -1.0, 2.0, -2.0, 7.0, -7.0, 100.0, 2147483647.0, -2147483648.0, -2147483647.0],
        DType::I64 => {
            vec![0.0, 1.0, -1.0, 2.0, -7.0, 100.0, 9.2e18, -9.2e18, 9223372036854775807.0, -9223372036854775808.0]
        }
        _ => {
            let big = match d {
                DType::F16 => 65504.0,
                DType::F32 | DType::BF16 => 3.0e38,
                _ => 1.0e300,
            };
            let tiny = match d {
                DType::F16 => 6.0e-8,
                DType::F32 => 1.0e-40,
                DType::BF16 => 1.0e-40,
                _ => 1.0e-310,
            };
            vec![
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                0.0,
                -0.0,
                1.0,
                -1.0,
                0.5,
                -0.5,
                1.5,
                2.5,
                -2.5,
                3.0,
                0.1,
                -7.25,
                100.0,
                tiny,
                -tiny,
                big,
                -big,
            ]
        }
    }
}

/// A case from `case_of`, which every edge case has.
fn must(c: Result<Option<Case>, String>) -> Case {
    c.unwrap_or_else(|e| panic!("{e}")).expect("a CUDA kernel")
}

/// Every unary, binary and comparison op with a CUDA form, every dtype,
/// on all pairs of special values (the first operand broadcast along
/// rows, the second along columns: stride-0 layouts, 81 to 400 elements),
/// and again through a reversed view; every conversion between two dtypes
/// of the special values of the source and of the destination.
fn elementwise_cases(cases: &mut Vec<Case>, problems: &mut Vec<String>) {
    for d in DType::ALL {
        let s = specials(d);
        let n = s.len();
        let col = tensor(d, &[n, 1], &s).broadcast_to([n, n]);
        let row = tensor(d, &[1, n], &s).broadcast_to([n, n]);
        let flipped = |t: &Tensor| t.flip(&[0, 1]).copy().flip(&[0, 1]);
        let mut push = |what: String, prim: Prim, ins: Vec<Tensor>| match case_of(what, &prim, &ins, &ins) {
            Ok(Some(c)) => cases.push(c),
            Ok(None) => problems.push(format!("{prim}: no kernel")),
            Err(e) => problems.push(e),
        };
        for op in UnaryOp::examples() {
            let p = Prim::Unary(op);
            if p.cuda_map_op(&[d]).is_some() {
                push(format!("{p} of {d} specials (broadcast)"), p.clone(), vec![col.clone()]);
                push(format!("{p} of {d} specials (reversed)"), p, vec![flipped(&row.copy())]);
            }
        }
        for &op in BinaryOp::ALL {
            let p = Prim::Binary(op);
            if p.cuda_map_op(&[d, d]).is_some() {
                push(format!("{p} of {d} special pairs"), p.clone(), vec![col.clone(), row.clone()]);
                push(format!("{p} of {d} special pairs (reversed)"), p, vec![flipped(&col.copy()), row.clone()]);
            }
        }
        for &op in CompareOp::ALL {
            let p = Prim::Compare(op);
            push(format!("{p} of {d} special pairs"), p, vec![col.clone(), row.clone()]);
        }
        let pred =
            tensor(DType::Bool, &[n, n], &(0..n * n).map(|i| ((i * 7) % 3 == 0) as u8 as f64).collect::<Vec<_>>());
        push(
            format!("select of {d}"),
            Prim::Elementwise(ElementwiseOp::Select),
            vec![flipped(&pred), col.clone(), row.clone()],
        );
        for to in DType::ALL {
            let mut vals = s.clone();
            vals.extend(specials(to).into_iter().map(|v| v * 1.25));
            let x = tensor(d, &[vals.len()], &vals);
            let p = Prim::Elementwise(ElementwiseOp::Convert(to));
            push(format!("convert {d} -> {to} of specials"), p, vec![x.flip(&[0]).copy().flip(&[0])]);
        }
    }
}

/// `n` values in [-2, 2) of dtype `d` (integers: -50..50), from `seed`.
fn values_of(d: DType, n: usize, seed: u64) -> Vec<f64> {
    let mut g = G::new(seed);
    (0..n)
        .map(|_| if d.is_float() { g.f64() * 4.0 - 2.0 } else { g.int(0, 99) as f64 - 50.0 })
        .map(|v| if d == DType::U32 { v.abs() } else { v })
        .map(|v| if d == DType::Bool { (v > 0.0) as u8 as f64 } else { v })
        .collect()
}

/// Maps over more elements than the emulated grid's threads (the
/// grid-stride loops turn), and over none and one.
fn large_map_cases(cases: &mut Vec<Case>) {
    for d in [DType::F32, DType::F16, DType::I64, DType::U32] {
        for n in [0usize, 1, 255, 256, 257, 1000, 1537] {
            let x = tensor(d, &[n], &values_of(d, n, n as u64));
            let y = tensor(d, &[n], &values_of(d, n, n as u64 + 1));
            let add = Prim::Binary(BinaryOp::Add);
            let reversed = x.flip(&[0]).copy().flip(&[0]);
            cases.push(must(case_of(format!("add of {n} {d}"), &add, &[x.clone(), y.clone()], &[reversed, y])));
            let conv = Prim::Elementwise(ElementwiseOp::Convert(DType::BF16));
            cases.push(must(case_of(format!("convert of {n} {d} to bf16"), &conv, from_ref(&x), from_ref(&x))));
        }
    }
}

/// Reductions of every kind over [rows, n] read transposed, n from 0 to
/// 2000 (a warp, part of one, several, the 256-thread blocks), more rows
/// than the emulated grid's blocks; over the first axis, all axes, and
/// non-adjacent axes of a 3-d array; max/min/argmax/argmin over NaN,
/// infinities and ties.
fn reduction_cases(cases: &mut Vec<Case>) {
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I64] {
        for &(rows, n) in &[(1usize, 0usize), (3, 1), (5, 31), (2, 32), (3, 33), (2, 512), (3, 513), (1, 2000), (0, 5)]
        {
            let vals = values_of(d, rows * n, (rows * 1000 + n) as u64);
            let x = tensor(d, &[n, rows], &vals).permute(&[1, 0]);
            let what = |p: &Prim| format!("{p} of {d}[{rows}, {n}] (transposed)");
            // over the first axis: n outputs (more than the emulated grid's
            // blocks), each a block's cooperation; up to 513 of them
            let all_axes: &[&[usize]] = if n <= 513 { &[&[1], &[0], &[0, 1]] } else { &[&[1], &[0, 1]] };
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                for &axes in all_axes {
                    let p = Prim::Reduce(Reduction::Reduce { op, axes: axes.iter().copied().collect() });
                    cases.push(must(case_of(what(&p), &p, from_ref(&x), from_ref(&x))));
                }
            }
            if n > 0 {
                for op in [ArgOp::Max, ArgOp::Min] {
                    let p = Prim::Reduce(Reduction::ArgReduce { op, axis: 1, index_dtype: DType::I32 });
                    cases.push(must(case_of(what(&p), &p, from_ref(&x), from_ref(&x))));
                }
            }
            for reverse in [false, true] {
                let p = Prim::Reduce(Reduction::Cumsum { axis: 1, reverse });
                cases.push(must(case_of(what(&p), &p, from_ref(&x), from_ref(&x))));
            }
        }
        let x = tensor(d, &[4, 3, 5], &values_of(d, 60, 7));
        let p = Prim::Reduce(Reduction::Reduce { op: ReduceOp::Sum, axes: [0usize, 2].into_iter().collect() });
        cases.push(must(case_of(format!("{p} of {d}[4, 3, 5]"), &p, from_ref(&x), &[x.flip(&[1]).copy().flip(&[1])])));
        if d.is_float() {
            // NaN, infinities and ties along rows of 40 (the first NaN or
            // extreme wins; NaN propagates through max and min)
            let s = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0, 1.0, -0.0, 0.0, 2.0];
            let vals: Vec<f64> =
                (0..3 * 40).map(|i| if (i * 7) % 5 == 0 { s[(i * 3) % s.len()] } else { 1.0 }).collect();
            let x = tensor(d, &[3, 40], &vals);
            for p in [
                Prim::Reduce(Reduction::ArgReduce { op: ArgOp::Max, axis: 1, index_dtype: DType::I64 }),
                Prim::Reduce(Reduction::ArgReduce { op: ArgOp::Min, axis: 1, index_dtype: DType::U32 }),
                Prim::Reduce(Reduction::Reduce { op: ReduceOp::Max, axes: [1usize].into_iter().collect() }),
                Prim::Reduce(Reduction::Reduce { op: ReduceOp::Min, axes: [1usize].into_iter().collect() }),
            ] {
                cases.push(must(case_of(format!("{p} of {d} specials"), &p, from_ref(&x), from_ref(&x))));
            }
        }
    }
}

/// Pad, concatenate, dynamic_update_slice, gather and scatter-add at their
/// edges, iota in every dtype.
fn indexing_cases(cases: &mut Vec<Case>) {
    let mut g = G::new(99);
    for d in [DType::F32, DType::F16, DType::BF16, DType::I64, DType::Bool, DType::U32] {
        let x = tensor(d, &[5, 7], &values_of(d, 35, 3));
        let v = tensor(d, &[], &[1.0]);
        for (low, high, interior) in [
            (vec![-2i64, 1], vec![3i64, -4], vec![0usize, 2]),
            (vec![0, 0], vec![0, 0], vec![3, 0]),
            (vec![-5, 0], vec![0, 0], vec![0, 0]),
        ] {
            let p = Prim::Shape(ShapeOp::Pad {
                low: low.into_iter().collect(),
                high: high.into_iter().collect(),
                interior: interior.into_iter().collect(),
            });
            let views = [relayout(&x, &mut g), v.clone()];
            cases.push(must(case_of(format!("{p} of {d}[5, 7]"), &p, &[x.clone(), v.clone()], &views)));
        }
        let parts = [tensor(d, &[5, 0], &[]), x.clone(), tensor(d, &[5, 2], &values_of(d, 10, 4))];
        let p = Prim::Shape(ShapeOp::Concatenate { axis: 1 });
        let views: Vec<Tensor> = parts.iter().map(|t| relayout(t, &mut g)).collect();
        cases.push(must(case_of(format!("{p} of {d} with an empty part"), &p, &parts, &views)));
        let u = tensor(d, &[2, 3], &values_of(d, 6, 5));
        let starts = [tensor(DType::I32, &[], &[4.0]), tensor(DType::I64, &[], &[-2.0])];
        let p = Prim::Index(IndexOp::DynamicUpdateSlice);
        let ins = [x.clone(), u.clone(), starts[0].clone(), starts[1].clone()];
        let views =
            [relayout(&x, &mut g), u.permute(&[1, 0]).copy().permute(&[1, 0]), starts[0].clone(), starts[1].clone()];
        cases.push(must(case_of(format!("{p} of {d} at clamped starts"), &p, &ins, &views)));
        // gather along axis 1 after one batch axis, negative and repeated indices
        for (idx, shape) in
            [(vec![-1.0, 0.0, 6.0, -7.0, 3.0, 3.0, 2.0, -2.0, 5.0, 0.0], vec![5usize, 2]), (vec![], vec![5, 0])]
        {
            for di in [DType::I32, DType::I64, DType::U32] {
                if di == DType::U32 && idx.iter().any(|&i| i < 0.0) {
                    continue;
                }
                let i = tensor(di, &shape, &idx);
                let p = Prim::Index(IndexOp::Gather { axis: 1, batch_dims: 1 });
                let views = [relayout(&x, &mut g), relayout(&i, &mut g)];
                cases.push(must(case_of(format!("{p} of {d} by {di}{shape:?}"), &p, &[x.clone(), i.clone()], &views)));
                if d != DType::Bool {
                    let u = tensor(d, &shape, &values_of(d, shape.iter().product(), 8));
                    let p = Prim::Index(IndexOp::ScatterAdd { axis: 1, batch_dims: 1 });
                    let views = [relayout(&x, &mut g), relayout(&i, &mut g), relayout(&u, &mut g)];
                    cases.push(must(case_of(format!("{p} of {d} by {di}{shape:?}"), &p, &[x.clone(), i, u], &views)));
                }
            }
        }
        // an index out of range: the plan's check finds the first one
        let bad = tensor(DType::I64, &[4], &[1.0, 7.0, -9.0, 8.0]);
        let p = Prim::Index(IndexOp::Gather { axis: 1, batch_dims: 0 });
        cases.push(must(case_of(
            format!("{p} of {d} out of range"),
            &p,
            &[x.clone(), bad.clone()],
            &[x.clone(), bad.clone()],
        )));
        if d != DType::Bool {
            let u = tensor(d, &[5, 4], &values_of(d, 20, 9));
            let p = Prim::Index(IndexOp::ScatterAdd { axis: 1, batch_dims: 0 });
            cases.push(must(case_of(
                format!("{p} of {d} out of range"),
                &p,
                &[x.clone(), bad.clone(), u.clone()],
                &[x.clone(), bad, u],
            )));
        }
    }
    for d in DType::ALL {
        if d == DType::Bool {
            continue;
        }
        for (shape, dim) in [(vec![3usize, 700], 1usize), (vec![300, 2, 1], 0), (vec![0, 4], 1)] {
            let p = Prim::Shape(ShapeOp::Iota {
                shape: Shape::from(&shape[..]),
                dim,
                dtype: d,
                device: xform::Device::Cpu,
            });
            cases.push(must(case_of(format!("{p}"), &p, &[], &[])));
        }
    }
}

/// GEMM tiles cut by the matrix edges (sizes 1, 15, 17, 33), an empty
/// contraction, a batch, transposed and reversed operands, wrapping
/// integers.
fn gemm_cases(cases: &mut Vec<Case>) {
    let mut g = G::new(5);
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U32] {
        for &(b, m, k, n) in
            &[(1usize, 1usize, 1usize, 1usize), (1, 17, 15, 33), (3, 5, 0, 4), (2, 16, 17, 16), (1, 40, 3, 2)]
        {
            let a = tensor(d, &[b, m, k], &values_of(d, b * m * k, (m * 100 + k) as u64));
            let bm = tensor(d, &[b, k, n], &values_of(d, b * k * n, (n * 100 + k) as u64));
            let dims = DotDims {
                lhs_contract: [2usize].into_iter().collect(),
                rhs_contract: [1usize].into_iter().collect(),
                lhs_batch: [0usize].into_iter().collect(),
                rhs_batch: [0usize].into_iter().collect(),
            };
            let p = Prim::Linalg(LinalgOp::DotGeneral(dims));
            let views = [relayout(&a, &mut g), relayout(&bm, &mut g)];
            let mut c = must(case_of(format!("{p} of {d}[{b}, {m}, {k}] x [{b}, {k}, {n}]"), &p, &[a, bm], &views));
            if !d.is_float() {
                c.check = Check::Exact;
            }
            cases.push(c);
        }
        if !d.is_float() {
            // products and sums that wrap
            let big = if d == DType::U32 { 4.0e9 } else { 2.0e9 };
            let a = tensor(d, &[3, 4], &(0..12).map(|i| big - i as f64 * 1.0e8).collect::<Vec<_>>());
            let b = tensor(d, &[4, 2], &(0..8).map(|i| big - i as f64 * 3.0e8).collect::<Vec<_>>());
            let p = Prim::Linalg(LinalgOp::DotGeneral(DotDims::matmul()));
            cases.push(must(case_of(format!("{p} of {d} wrapping"), &p, &[a.clone(), b.clone()], &[a, b])));
        }
    }
}

/// Windows over [2, 37, 41] (more than a block of windows) with padding,
/// strides and dilations; select-and-gather and select-and-scatter-add
/// with ties and NaN.
fn window_cases(cases: &mut Vec<Case>) {
    let mut g = G::new(11);
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32] {
        let shape = [2usize, 37, 41];
        let vals: Vec<f64> = values_of(d, 2 * 37 * 41, 12)
            .iter()
            .enumerate()
            .map(|(i, &v)| if d.is_float() && i % 97 == 5 { f64::NAN } else { v.round() })
            .collect();
        let x = tensor(d, &shape, &vals);
        let configs = [
            ([1usize, 3, 3], [1usize, 2, 2], Padding::Same, [1usize, 1, 1], [1usize, 1, 1]),
            ([1, 2, 4], [1, 3, 1], Padding::Explicit(vec![(0, 0), (2, 1), (-1, 3)]), [1, 2, 1], [1, 1, 2]),
            ([2, 1, 5], [1, 1, 4], Padding::Valid, [1, 1, 1], [1, 1, 1]),
        ];
        for (dims, strides, padding, bdil, wdil) in configs {
            let w = WindowParams::dilated("window", &shape, &dims, &strides, &padding, &bdil, &wdil).expect("a window");
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                let p = Prim::Window(WindowOp::ReduceWindow { op, window: w.clone() });
                let views = [relayout(&x, &mut g)];
                cases.push(must(case_of(format!("{p} of {d}"), &p, from_ref(&x), &views)));
            }
            if !d.is_float() || bdil != [1, 1, 1] {
                continue;
            }
            let out = w.output_shape("window", &Shape::from(&shape[..])).expect("windows");
            for select in [SelectOp::Max, SelectOp::Min] {
                let t = tensor(d, &shape, &values_of(d, 2 * 37 * 41, 13));
                let p = Prim::Window(WindowOp::SelectAndGatherAdd { select, window: w.clone() });
                let views = [relayout(&t, &mut g), relayout(&x, &mut g)];
                cases.push(must(case_of(format!("{p} of {d}"), &p, &[t, x.clone()], &views)));
                let ct = tensor(d, &out, &values_of(d, out.numel(), 14));
                let p = Prim::Window(WindowOp::SelectAndScatterAdd { select, window: w.clone() });
                let views = [relayout(&ct, &mut g), relayout(&x, &mut g)];
                cases.push(must(case_of(format!("{p} of {d}"), &p, &[ct, x.clone()], &views)));
            }
        }
    }
}

/// Threefry over 700 counters with a broadcast (stride-0) key.
fn threefry_cases(cases: &mut Vec<Case>) {
    let n = 700;
    let k0 = tensor(DType::U32, &[], &[42.0]).broadcast_to([n]);
    let k1 = tensor(DType::U32, &[1], &[4294967295.0]).broadcast_to([n]);
    let c0 = tensor(DType::U32, &[n], &(0..n).map(|i| (i * 7919) as f64).collect::<Vec<_>>());
    let c1 = tensor(DType::U32, &[n], &(0..n).map(|i| (4294967295 - i) as f64).collect::<Vec<_>>());
    let p = Prim::Random(RandomOp::Threefry2x32);
    let ins = [k0, k1, c0.flip(&[0]).copy().flip(&[0]), c1];
    cases.push(must(case_of(format!("{p} of {n} counters, broadcast keys"), &p, &ins, &ins)));
}

/// In-place strided writes (`exec::write_strided`, what `copy_` runs):
/// into a transposed, a reversed and a strided view of a larger storage.
fn write_cases(cases: &mut Vec<Case>) {
    for d in [DType::F32, DType::F16, DType::I64, DType::Bool, DType::U32] {
        let src = tensor(d, &[6, 5], &values_of(d, 30, 21));
        let dsts: [(&str, Layout); 3] = [
            ("transposed", Layout::contiguous(Shape::from([5, 6])).permute(&[1, 0])),
            ("reversed", Layout::contiguous(Shape::from([6, 5])).rev(&[0, 1])),
            ("strided", Layout::contiguous(Shape::from([13, 11])).slice(&[1, 0], &[13, 10], &[2, 2])),
        ];
        for (how, ld) in dsts {
            let len = if how == "strided" { 143 } else { 30 };
            let dst = tensor(d, &[len], &values_of(d, len, 22));
            let plan = plans::write(d, &ld, &Layout::contiguous(Shape::from([6, 5]))).expect("a plan");
            // the CPU: copy_ through the same view
            let view = xform::Tensor::from_array(dst.copy().array().expect("an array").with_layout(ld.clone()));
            view.copy_(&src);
            let want_storage = storage(&view.array().expect("an array"));
            let src_array = src.array().expect("an array");
            cases.push(Case {
                what: format!("write of {d} through a {how} view"),
                plan,
                inputs: vec![storage(&src_array)],
                dest: Some(storage(&dst.array().expect("an array"))),
                want: Want::Values(vec![want_storage]),
                check: Check::Exact,
            });
        }
    }
}

/// Every edge case above.
#[test]
fn emulated_kernels_at_their_edges_match_the_cpu() {
    let (mut cases, mut problems) = (Vec::new(), Vec::new());
    elementwise_cases(&mut cases, &mut problems);
    large_map_cases(&mut cases);
    reduction_cases(&mut cases);
    indexing_cases(&mut cases);
    gemm_cases(&mut cases);
    window_cases(&mut cases);
    threefry_cases(&mut cases);
    write_cases(&mut cases);
    run_cases("edges", &cases, problems);
}
