use super::super::fuse::tests::{check, values};
use super::super::plan::{Plan, StepOp};
use xform_ops::{DType, Tensor};
use xform_transforms::{jitted, JitOptions, Tree};

/// The row steps of `plan`, as (ops, outputs).
fn row_steps(plan: &Plan) -> Vec<(usize, usize)> {
    let rows = |s: &StepOp| match s {
        StepOp::Rows(r) => Some((r.ops.len(), r.outputs.len())),
        _ => None,
    };
    plan.steps.iter().filter_map(|s| rows(&s.op)).collect()
}

/// `f`'s program on `x`, replayed through the plan and evaluated
/// eagerly (one primitive at a time), bitwise equal (`check`); returns
/// the plan's steps and its row steps.
fn rows_of<X: Tree, Y: Tree>(f: impl Fn(&X) -> Y, x: &X) -> (usize, Vec<(usize, usize)>) {
    let opts = JitOptions { batch_split: false, ..JitOptions::default() };
    let p = jitted(f, opts).program(&(), x).unwrap();
    let plan = check(&p, &x.leaves());
    (plan.steps.len(), row_steps(&plan))
}

fn matrix(shape: &[usize], seed: u64, d: DType) -> Tensor {
    let dims: Vec<isize> = shape.iter().map(|&n| n as isize).collect();
    values(shape.iter().product(), seed, d).reshape(&dims)
}

/// A stable logsumexp and a softmax over the last axis, with NaN,
/// infinities and signed zeros among the values; rows of 10 (a
/// remainder after 8 f64 lanes), 33 and 1024 elements, many chunks of
/// rows (300 x 10: three), f32 and f64.
#[test]
fn softmax_and_logsumexp_are_one_step_bitwise() {
    let lse = |x: &Tensor| x.logsumexp(-1, false);
    let softmax = |x: &Tensor| {
        let m = x.max_axis(-1, true).stop_gradient();
        let e = (x - &m).exp();
        &e / e.sum_axis(-1, true)
    };
    for d in [DType::F32, DType::F64] {
        for (k, shape) in [[7, 10], [5, 33], [300, 10], [2, 1024]].iter().enumerate() {
            let x = matrix(shape, k as u64, d);
            let (_, rows) = rows_of(lse, &x);
            assert_eq!(rows.len(), 1, "{shape:?} {d:?} logsumexp: one row step");
            let (steps, rows) = rows_of(softmax, &x);
            assert_eq!((steps, rows.len()), (1, 1), "{shape:?} {d:?} softmax: one step");
        }
    }
}

/// A rank-3 operand (rows along two leading axes), a vector (one row:
/// narrow values are scalars), a transposed operand (gathered through
/// its strides), a narrow operand from outside broadcast along rows, and
/// minima.
#[test]
fn shapes_strides_and_outside_operands() {
    let center = |(x, m): &(Tensor, Tensor)| {
        let y = (x - m).tanh();
        let lo = y.min_axis(-1, true);
        (&y - &lo, lo.reshape(&[-1]))
    };
    for d in [DType::F32, DType::F64] {
        let x3 = matrix(&[2, 3, 5], 1, d);
        let (_, rows) = rows_of(|x: &Tensor| x.logsumexp(-1, true) * 2.0, &x3);
        assert_eq!(rows.len(), 1);
        let v = matrix(&[12], 2, d);
        let (_, rows) = rows_of(|x: &Tensor| (x - x.max_axis(0, false)).exp().sum(), &v);
        assert_eq!(rows.len(), 1);
        let xt = matrix(&[10, 6], 3, d).t();
        let (_, rows) = rows_of(|x: &Tensor| x.logsumexp(-1, false), &xt);
        assert_eq!(rows.len(), 1);
        let arg = (matrix(&[6, 9], 4, d), matrix(&[6, 1], 5, d));
        let (_, rows) = rows_of(center, &arg);
        assert_eq!(rows, vec![(5, 2)], "sub, tanh, min, spread, sub; y - lo and lo as [6]");
    }
}

/// An f32 sum over the rows of an operand read through its strides (a
/// transpose, a slice of columns, a broadcast) fused with the next op:
/// eager sums a strided array's rows in order, not in the f64 lanes of
/// a contiguous one, and the row step must too. The values make the
/// orders differ: 1e30 + 1 - 1e30 + 1 is 1 in order and 0 in lanes
/// ((1e30 + 1) + (-1e30 + 1)); the probe that found it had the step
/// give 0 for eager's 2.
#[test]
fn strided_f32_row_sums_add_in_eager_order() {
    let sum2 = |x: &Tensor| x.sum_axis(-1, false) * 2.0;
    let row = [1e30f32, 1.0, -1e30, 1.0, 0.0, 3.0, 0.0, -0.0, 1e30, 1.0, -1e30, 1.0, 0.0, 0.0, 0.5, 0.25];
    // [8, 2] transposed: rows of 8 with stride 2
    let mut base = Vec::new();
    for v in &row[..8] {
        base.extend([*v, -*v * 0.5]);
    }
    let xt = Tensor::from_vec(base, [8, 2]).t();
    let (_, rows) = rows_of(sum2, &xt);
    assert_eq!(rows.len(), 1, "a row step: {rows:?}");
    // columns 0..16 of a [3, 20] array (rows of stride 1, not contiguous)
    let wide: Vec<f32> = (0..3).flat_map(|r| row.iter().map(move |v| v * (r + 1) as f32).chain([7.0; 4])).collect();
    let sliced = Tensor::from_vec(wide, [3, 20]).slice(xform_ops::s![.., 0..16]);
    rows_of(sum2, &sliced);
    // one row broadcast to four (stride 0 along the leading axis)
    let bcast = Tensor::from_vec(row.to_vec(), [1, 16]).broadcast_to([4, 16]);
    rows_of(sum2, &bcast);
    // a contiguous operand still adds in lanes (equal to eager's kernel)
    rows_of(sum2, &Tensor::from_vec(row.to_vec(), [2, 8]));
}

/// The per-sample gradient of a softmax cross-entropy (W1's loss): its
/// chain from the logits to their cotangent is one row step, and every
/// result equals eager execution bit for bit.
#[test]
fn cross_entropy_gradient_chain() {
    let w = matrix(&[16, 10], 6, DType::F32);
    let x = matrix(&[32, 16], 7, DType::F32);
    let y = Tensor::from_vec((0..32i32).map(|i| i * 7 % 10).collect::<Vec<_>>(), [32]);
    let per_sample = |(w, x, y): &(Tensor, Tensor, Tensor)| {
        xform_transforms::vmap(|(x, y): &(Tensor, Tensor)| {
            xform_transforms::grad(|w: &Tensor| {
                let logits = x.matmul(w);
                logits.logsumexp(0, false) - logits.take(y, 0)
            })(w)
        })(&(x.clone(), y.clone()))
    };
    let (_, rows) = rows_of(per_sample, &(w, x, y));
    assert_eq!(rows.len(), 1, "one row step: {rows:?}");
    assert!(rows[0].0 >= 6, "the loss chain's ops in one step: {rows:?}");
}
