//! Running a case in xform, and printing it as Rust. The two are written
//! side by side, construct by construct, so the printed reproducer runs the
//! same calls as the test.

use crate::case::{Case, Tf};
use crate::program::{into_domain, Coll, Expr, Lin, MutOp, PRed, Program, Red, Un, View};
use std::rc::Rc;
use xform::core::prim::{BinaryOp, ReduceOp, UnaryOp};
use xform::lax::{Padding, WindowParams};
use xform::linalg::{self, TriangularSpec};
use xform::prelude::*;
use xform::{functionalize, jacfwd, jacrev, OrRaise};

// ---- shapes --------------------------------------------------------------------

/// The shape of an expression's value.
pub fn shape(e: &Expr, inputs: &[Vec<usize>]) -> Vec<usize> {
    match e {
        Expr::Input(i) => inputs[*i].clone(),
        Expr::Leaf { shape, .. } => shape.clone(),
        Expr::Unary(_, x)
        | Expr::Softmax { x, .. }
        | Expr::Inf { x, .. }
        | Expr::Cumsum { x, .. }
        | Expr::Flip { x, .. }
        | Expr::DynUpdate { x, .. } => shape(x, inputs),
        Expr::Mutate { target, .. } => shape(target, inputs),
        Expr::Collective { op, x } => op.shape(&shape(x, inputs)),
        Expr::Where { x, .. } | Expr::IndexAdd { x, .. } => shape(x, inputs),
        Expr::Pad { widths, x, .. } => {
            shape(x, inputs).iter().zip(widths).map(|(&n, (l, h))| (n as i64 + l + h) as usize).collect()
        }
        Expr::Var { axes, x, .. } => {
            let s = shape(x, inputs);
            (0..s.len()).filter(|a| !axes.contains(a)).map(|a| s[a]).collect()
        }
        Expr::Window { dims, strides, same, base, wdil, x, .. } => shape(x, inputs)
            .iter()
            .enumerate()
            .map(|(a, &n)| {
                crate::program::window_out(n, dims[a], strides[a], base[a], wdil[a], *same).expect("a valid window")
            })
            .collect(),
        Expr::Binary(_, x, y) | Expr::Pow { base: x, exp: y } => broadcast(&shape(x, inputs), &shape(y, inputs)),
        Expr::Reduce { axes, keepdims, x, .. } => {
            let s = shape(x, inputs);
            (0..s.len()).filter_map(|a| if axes.contains(&a) { keepdims.then_some(1) } else { Some(s[a]) }).collect()
        }
        Expr::Reshape { shape, .. } | Expr::Broadcast { shape, .. } => shape.clone(),
        Expr::Permute { perm, x } => {
            let s = shape(x, inputs);
            perm.iter().map(|&p| s[p]).collect()
        }
        Expr::Slice { axis, start, stop, step, x } => {
            let mut s = shape(x, inputs);
            s[*axis] = (stop - start).div_ceil(*step);
            s
        }
        Expr::Concat { axis, xs } => {
            let mut s = shape(&xs[0], inputs);
            s[*axis] = xs.iter().map(|x| shape(x, inputs)[*axis]).sum();
            s
        }
        Expr::Take { axis, idx, x } => {
            let mut s = shape(x, inputs);
            s[*axis] = idx.len();
            s
        }
        Expr::DynSlice { sizes, .. } | Expr::DynSliceAt { sizes, .. } => sizes.clone(),
        Expr::Linalg { op, a, b, .. } => {
            let sa = shape(a, inputs);
            let ra = sa.len();
            match (op, b) {
                (Lin::Cholesky | Lin::Inv | Lin::Lu | Lin::Pinv | Lin::QrR | Lin::Expm, _) => sa,
                (Lin::Det | Lin::LogDet | Lin::Nuclear | Lin::EigLogSum, _) => sa[..ra - 2].to_vec(),
                (Lin::TriSolve { .. }, Some(b)) => shape(b, inputs),
                (Lin::Solve, Some(b)) => {
                    let sb = shape(b, inputs);
                    let rb = sb.len();
                    if rb == 1 {
                        sa[..ra - 1].to_vec()
                    } else {
                        let mut s = broadcast(&sa[..ra - 2], &sb[..rb - 2]);
                        s.extend(&sb[rb - 2..]);
                        s
                    }
                }
                _ => unreachable!("the solves have a b"),
            }
        }
        Expr::Matmul(a, b) => {
            let (sa, sb) = (shape(a, inputs), shape(b, inputs));
            match (sa.len(), sb.len()) {
                (1, 1) => vec![],
                (1, _) => {
                    let mut s = sb.clone();
                    s.remove(s.len() - 2);
                    s
                }
                (_, 1) => sa[..sa.len() - 1].to_vec(),
                (ra, rb) => {
                    let mut s = broadcast(&sa[..ra - 2], &sb[..rb - 2]);
                    s.extend([sa[ra - 2], sb[rb - 1]]);
                    s
                }
            }
        }
    }
}

fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let x = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let y = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            x.max(y)
        })
        .collect()
}

/// The shapes of a program's outputs.
pub fn core_shapes(p: &Program) -> Vec<Vec<usize>> {
    p.outputs.iter().map(|e| shape(e, &p.inputs)).collect()
}

// ---- evaluation in xform ---------------------------------------------------------

fn isz(v: &[usize]) -> Vec<isize> {
    v.iter().map(|&a| a as isize).collect()
}

fn starts(s: &[i64]) -> Vec<Tensor> {
    s.iter().map(|&v| Tensor::scalar(v)).collect()
}

fn view(t: &Tensor, v: &View) -> Tensor {
    match v {
        View::Whole => t.clone(),
        View::Slice { axis, start, stop, step } => t.slice_axis(*axis as isize, *start as isize, *stop as isize, *step),
        View::Select { axis, index } => t.select(*axis as isize, *index),
        View::Permute(p) => t.permute(p),
    }
}

/// `Expr::Inf`'s constants: the mask (1 where an infinity goes) and the values.
pub fn inf_consts(inf: &[i8]) -> (Vec<f64>, Vec<f64>) {
    let mask = inf.iter().map(|&k| f64::from(k != 0)).collect();
    let vals = inf.iter().map(|&k| if k == 0 { 0.0 } else { f64::from(k) * f64::INFINITY }).collect();
    (mask, vals)
}

/// Runs a program's writes to its arguments `xs`, in order.
pub fn write_args(p: &Program, xs: &[Tensor]) {
    for w in &p.writes {
        let value = eval(&w.value, xs);
        let t = view(&xs[w.input()], &w.view);
        match w.op {
            MutOp::Add => t.add_(&value),
            MutOp::Sub => t.sub_(&value),
            MutOp::Mul => t.mul_(&value),
            MutOp::Copy => t.copy_(&value),
        };
    }
}

/// `x` mapped into `dom` as the Python side maps it: `c + r tanh(x)`.
fn into(x: &Tensor, dom: xform::core::prims::sample::Dom) -> Tensor {
    let (c, r) = into_domain(dom).expect("only ops over real domains are drawn");
    x.tanh() * r + c
}

/// A unary primitive on `x` mapped into its domain.
pub fn prim_unary(op: UnaryOp, x: &Tensor) -> Tensor {
    xform::lax::unary(op, &into(x, op.sample_dom())).or_raise()
}

/// A binary primitive on `a` and `b` mapped into their domains and
/// broadcast against each other (numpy's rule).
pub fn prim_binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Tensor {
    let (da, db) = op.sample_doms(DType::F64);
    let (a, b) = (into(a, da), into(b, db));
    let (sa, sb) = (a.shape().0.to_vec(), b.shape().0.to_vec());
    let rank = sa.len().max(sb.len());
    let dim = |s: &[usize], i: usize| if i + s.len() < rank { 1 } else { s[i + s.len() - rank] };
    let shape: Vec<usize> = (0..rank)
        .map(|i| match (dim(&sa, i), dim(&sb, i)) {
            (1, n) | (n, _) => n,
        })
        .collect();
    xform::lax::binary(op, &a.broadcast_to(shape.clone()), &b.broadcast_to(shape)).or_raise()
}

/// `Expr::Linalg`'s matrices from its operand `a` (`[..., n, n]`, `n =
/// rows.len()`): `tanh(a) + (n + 1) I`, NaN entries of `a` read as 0, the
/// rows in the order `rows`.
pub fn well_conditioned(a: &Tensor, rows: &[usize]) -> Tensor {
    let n = rows.len();
    let a = Tensor::where_(&a.ne(a), &a.zeros_like(), a);
    let t = a.tanh() + Tensor::eye(n, DType::F64) * (n as f64 + 1.0);
    if rows.iter().enumerate().all(|(i, &k)| i == k) {
        return t;
    }
    let idx: Vec<i64> = rows.iter().map(|&k| k as i64).collect();
    t.take(&Tensor::from_vec(idx, [n]), t.rank() as isize - 2)
}

/// A linear algebra function on the matrices `a` (and `b`).
pub fn linalg_op(op: Lin, a: &Tensor, b: Option<&Tensor>) -> Tensor {
    let b = || b.expect("the solves have a b");
    match op {
        Lin::Cholesky => linalg::cholesky(a),
        Lin::TriSolve { left_side, lower, transpose_a, unit_diagonal } => {
            linalg::triangular_solve(a, b(), TriangularSpec { left_side, lower, transpose_a, unit_diagonal })
        }
        Lin::Solve => linalg::solve(a, b()),
        Lin::Inv => linalg::inv(a),
        Lin::Det => linalg::det(a),
        Lin::LogDet => linalg::slogdet(a).map(|(_, logdet)| logdet),
        Lin::Lu => linalg::lu(a).map(|(f, _, _)| f),
        Lin::Pinv => linalg::pinv(a, None),
        Lin::Expm => linalg::expm(a),
        // (xform's R already has a non-negative diagonal)
        Lin::QrR => linalg::qr(a, linalg::QrMode::Reduced).map(|(_, r)| r),
        Lin::Nuclear => linalg::matrix_norm(a, linalg::MatrixNorm::Nuclear),
        Lin::EigLogSum => linalg::eigvalsh(a).map(|w| w.log().sum_axes(&[-1], false)),
    }
    .or_raise()
}

/// Evaluates an expression on the inputs `xs`.
pub fn eval(e: &Expr, xs: &[Tensor]) -> Tensor {
    let ev = |x: &Expr| eval(x, xs);
    match e {
        Expr::Input(i) => xs[*i].clone(),
        Expr::Leaf { .. } => unreachable!("leaves are numbered by Program::new"),
        Expr::Unary(op, x) => {
            let x = ev(x);
            match op {
                Un::Prim(op) => prim_unary(*op, &x),
                Un::Square => &x * &x,
                Un::RecipSq => 1.0 / (&x * &x + 1.0),
                Un::Relu => x.relu(),
                Un::Softplus => x.softplus(),
                Un::Abs => x.abs(),
            }
        }
        Expr::Binary(op, a, b) => prim_binary(*op, &ev(a), &ev(b)),
        Expr::Reduce { op, axes, keepdims, x } => {
            let x = ev(x);
            match op {
                Red::Sum => x.sum_axes(&isz(axes), *keepdims),
                Red::Mean => x.mean_axes(&isz(axes), *keepdims),
                Red::Max => x.max_axes(&isz(axes), *keepdims),
                Red::LogSumExp => x.logsumexp(axes[0] as isize, *keepdims),
            }
        }
        Expr::Softmax { axis, log: false, x } => ev(x).softmax(*axis as isize),
        Expr::Softmax { axis, log: true, x } => ev(x).log_softmax(*axis as isize),
        Expr::Inf { inf, x } => {
            let x = ev(x);
            let (mask, vals) = inf_consts(inf);
            let s = x.shape().dims().to_vec();
            Tensor::where_(
                &Tensor::from_vec(mask, s.clone()).gt(&Tensor::scalar(0.5f64)),
                &Tensor::from_vec(vals, s),
                &x,
            )
        }
        Expr::Pow { base, exp } => {
            let e = ev(exp);
            ev(base).pow(&e.maximum(&e.zeros_like()))
        }
        Expr::Cumsum { axis, x } => ev(x).cumsum(*axis as isize),
        Expr::Reshape { shape, x } => ev(x).reshape_to(shape.clone()),
        Expr::Permute { perm, x } => ev(x).permute(perm),
        Expr::Broadcast { shape, x } => ev(x).broadcast_to(shape.clone()),
        Expr::Slice { axis, start, stop, step, x } => {
            ev(x).slice_axis(*axis as isize, *start as isize, *stop as isize, *step)
        }
        Expr::Flip { axes, x } => ev(x).flip(&isz(axes)),
        Expr::Concat { axis, xs: parts } => Tensor::concat(&parts.iter().map(ev).collect::<Vec<_>>(), *axis as isize),
        Expr::Take { axis, idx, x } => ev(x).take(&Tensor::from_vec(idx.clone(), [idx.len()]), *axis as isize),
        Expr::DynSlice { starts: s, sizes, x } => ev(x).dynamic_slice(&starts(s), sizes),
        Expr::DynUpdate { starts: s, x, u } => ev(x).dynamic_update_slice(&ev(u), &starts(s)),
        Expr::Matmul(a, b) => ev(a).matmul(&ev(b)),
        Expr::DynSliceAt { scale, sizes, x, at } => {
            let at = ev(at);
            let starts: Vec<Tensor> = scale.iter().map(|k| (&at * *k).floor().cast(DType::I64)).collect();
            ev(x).dynamic_slice(&starts, sizes)
        }
        Expr::Where { a, b, x, y } => Tensor::where_(&ev(a).gt(&ev(b)), &ev(x), &ev(y)),
        Expr::Pad { widths, value, x } => ev(x).pad(widths, *value),
        Expr::IndexAdd { axis, idx, x, src } => {
            ev(x).index_add(*axis as isize, &Tensor::from_vec(idx.clone(), [idx.len()]), &ev(src))
        }
        Expr::Var { axes, ddof, keepdims, x } => ev(x).var_axes(&isz(axes), *ddof, *keepdims),
        Expr::Window { max, dims, strides, same, base, wdil, x } => {
            let x = ev(x);
            let padding = if *same { Padding::Same } else { Padding::Valid };
            let shape = x.shape().dims().to_vec();
            let w = WindowParams::dilated("reduce_window", &shape, dims, strides, &padding, base, wdil)
                .expect("a valid window");
            let op = if *max { ReduceOp::Max } else { ReduceOp::Sum };
            xform::lax::reduce_window(op, &x, &w).expect("reduce_window")
        }
        Expr::Mutate { op, view: v, target, value } => {
            let t = ev(target).copy();
            let value = ev(value);
            let w = view(&t, v);
            match op {
                MutOp::Add => w.add_(&value),
                MutOp::Sub => w.sub_(&value),
                MutOp::Mul => w.mul_(&value),
                MutOp::Copy => w.copy_(&value),
            };
            t
        }
        Expr::Collective { op, x } => collective(op, &ev(x)),
        Expr::Linalg { op, rows, a, b } => {
            let a = well_conditioned(&ev(a), rows);
            linalg_op(*op, &a, b.as_deref().map(ev).as_ref())
        }
    }
}

/// A collective on `x`.
pub fn collective(op: &Coll, x: &Tensor) -> Tensor {
    use xform::lax;
    match op {
        Coll::Reduce { op, names } => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            match op {
                PRed::Psum => lax::psum(x, names),
                PRed::Pmean => lax::pmean(x, names),
                PRed::Pmax => lax::pmax(x, names),
                PRed::Pmin => lax::pmin(x, names),
            }
        }
        Coll::AllGather { name, axis, tiled, .. } => lax::all_gather(x, name, *axis, *tiled),
        Coll::PsumScatter { name, dim, tiled, .. } => lax::psum_scatter(x, name, *dim as isize, *tiled),
        Coll::AllToAll { name, split, concat, tiled, .. } => {
            lax::all_to_all(x, name, *split as isize, *concat as isize, *tiled)
        }
        Coll::Ppermute { name, perm } => lax::ppermute(x, name, perm),
        Coll::AxisIndex { names, offset } => lax::axis_index(names.iter().map(String::as_str).collect::<Vec<_>>())
            .map(|i| x * (i + *offset as i32).cast(DType::F64)),
    }
    .or_raise()
}

/// `sum_i sum(sin(y_i))`: the scalar that grad and hessian differentiate.
pub fn scalarize(ys: &[Tensor]) -> Tensor {
    ys.iter().map(|y| y.sin().sum()).reduce(|a, b| a + b).expect("at least one output")
}

type Fun = Rc<dyn Fn(&Vec<Tensor>) -> Vec<Tensor>>;

/// One level of the stack around `f`.
fn wrap(tf: &Tf, f: Fun) -> Fun {
    match tf.clone() {
        Tf::Grad => Rc::new(move |xs| grad(|xs: &Vec<Tensor>| scalarize(&f(xs)))(xs)),
        Tf::Vmap { in_axes, out_axis, chunk, name, .. } => Rc::new(move |xs| {
            let opts = VmapOptions {
                in_axes: Axes::Leaves(in_axes.clone()),
                out_axes: Axes::All(Some(out_axis)),
                chunk_size: chunk,
                axis_name: name.clone(),
                ..Default::default()
            };
            vmap_with(|xs: &Vec<Tensor>| f(xs), opts)(xs)
        }),
        Tf::Jvp => Rc::new(move |xs| {
            let ts: Vec<Tensor> = xs.iter().map(|x| (x * 3.0).cos()).collect();
            let (y, t) = jvp(|xs: &Vec<Tensor>| f(xs), xs, &ts);
            y.into_iter().chain(t).collect()
        }),
        Tf::Jacfwd => Rc::new(move |xs| jacfwd(|xs: &Vec<Tensor>| f(xs))(xs).into_iter().flatten().collect()),
        Tf::Jacrev => Rc::new(move |xs| jacrev(|xs: &Vec<Tensor>| f(xs))(xs).into_iter().flatten().collect()),
        Tf::Hessian => {
            Rc::new(move |xs| hessian(|xs: &Vec<Tensor>| scalarize(&f(xs)))(xs).into_iter().flatten().collect())
        }
        Tf::Functionalize => Rc::new(move |xs| functionalize(|xs: &Vec<Tensor>| f(xs))(xs)),
        Tf::Jit => Rc::new(move |xs| jit(|xs: &Vec<Tensor>| f(xs))(xs)),
        Tf::Checkpoint => Rc::new(move |xs| checkpoint(|xs: &Vec<Tensor>| f(xs))(xs)),
        Tf::CustomJvp => Rc::new(move |xs| {
            let (f1, f2) = (f.clone(), f.clone());
            let g = custom_jvp(
                move |xs: &Vec<Tensor>| f1(xs),
                move |xs: &Vec<Tensor>, ts: &Vec<Tensor>| jvp(|xs: &Vec<Tensor>| f2(xs), xs, ts),
            );
            g.call(xs)
        }),
        Tf::CustomVjp => Rc::new(move |xs| {
            let (f1, f2, f3) = (f.clone(), f.clone(), f.clone());
            let g = custom_vjp(
                move |xs: &Vec<Tensor>| f1(xs),
                // the residuals: the arguments before f writes them
                move |xs: &Vec<Tensor>| {
                    let r: Vec<Tensor> = xs.iter().map(Tensor::copy).collect();
                    (f2(xs), r)
                },
                move |r: &Vec<Tensor>, ct: &Vec<Tensor>| {
                    let r: Vec<Tensor> = r.iter().map(Tensor::copy).collect();
                    xform::vjp(|xs: &Vec<Tensor>| f3(xs), &r).1(ct)
                },
            );
            g.call(xs)
        }),
        Tf::JitCaptured => Rc::new(move |xs| {
            let c = xs[0].copy();
            let g = jit(|rest: &Vec<Tensor>| {
                let all: Vec<Tensor> = std::iter::once(c.clone()).chain(rest.iter().cloned()).collect();
                f(&all)
            });
            let rest: Vec<Tensor> = xs[1..].to_vec();
            let _ = g(&rest);
            // written in place between the calls
            c.mul_scalar_(0.5);
            c.add_scalar_(0.25);
            g(&rest)
        }),
    }
}

/// Runs a case in xform: every output leaf's shape and values, or the
/// error (a raised xform error or any other panic) as text.
pub fn run(case: &Case) -> Result<Vec<(Vec<usize>, Vec<f64>)>, String> {
    let program = case.program.clone();
    let mut f: Fun = Rc::new(move |xs| {
        write_args(&program, xs);
        program.outputs.iter().map(|e| eval(e, xs)).collect()
    });
    for tf in &case.stack {
        f = wrap(tf, f);
    }
    let xs: Vec<Tensor> =
        case.shapes.iter().zip(&case.data).map(|(s, d)| Tensor::from_vec(d.clone(), s.clone())).collect();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        xform::catch(|| {
            let mut out: Vec<_> = f(&xs).iter().map(|y| (y.shape().dims().to_vec(), y.to_vec_f64())).collect();
            // A program that writes to its arguments: their values after the call too.
            if !case.program.writes.is_empty() {
                out.extend(xs.iter().map(|x| (x.shape().dims().to_vec(), x.to_vec_f64())));
            }
            out
        })
    }));
    let depth = xform::core::interp::stack_depth();
    match r {
        Ok(Ok(v)) if depth == 0 => Ok(v),
        Ok(Ok(_)) => Err(format!("xform left {depth} interpreters on the stack")),
        // An error leaves every argument as it was (nothing half-written).
        Ok(Err(e)) if xs.iter().zip(&case.data).any(|(x, d)| !same_values(&x.to_vec_f64(), d)) => {
            Err(format!("xform error left an argument written: {e}"))
        }
        Ok(Err(e)) => Err(format!("xform error: {e}")),
        Err(p) => Err(format!(
            "xform panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

fn same_values(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
}

// ---- Rust text -------------------------------------------------------------------

fn list<T: std::fmt::Debug>(v: &[T]) -> String {
    format!("{v:?}")
}

fn f64_lit(v: f64) -> String {
    match v {
        v if v == f64::INFINITY => "f64::INFINITY".into(),
        v if v == f64::NEG_INFINITY => "f64::NEG_INFINITY".into(),
        v => format!("{v:?}f64"),
    }
}

fn rust_shape(s: &[usize]) -> String {
    if s.is_empty() {
        "Vec::<usize>::new()".into()
    } else {
        format!("vec!{}", list(s).replacen(',', "usize,", 1).replacen("]", "usize]", if s.len() == 1 { 1 } else { 0 }))
    }
}

fn rust_view(v: &View) -> String {
    match v {
        View::Whole => String::new(),
        View::Slice { axis, start, stop, step } => format!(".slice_axis({axis}, {start}, {stop}, {step})"),
        View::Select { axis, index } => format!(".select({axis}, {index})"),
        View::Permute(p) => format!(".permute(&{})", list(p)),
    }
}

fn rust_starts(s: &[i64]) -> String {
    let v: Vec<String> = s.iter().map(|v| format!("Tensor::scalar({v}i64)")).collect();
    format!("&[{}]", v.join(", "))
}

/// The expression as Rust source over `xs: &Vec<Tensor>`.
pub fn rust(e: &Expr) -> String {
    match e {
        Expr::Input(i) => format!("xs[{i}].clone()"),
        Expr::Leaf { .. } => unreachable!("leaves are numbered by Program::new"),
        Expr::Unary(op, x) => {
            let x = rust(x);
            match op {
                Un::Prim(op) => format!("prim_unary(UnaryOp::{op:?}, &{x})"),
                Un::Square => format!("{{ let x = {x}; &x * &x }}"),
                Un::RecipSq => format!("{{ let x = {x}; 1.0 / (&x * &x + 1.0) }}"),
                Un::Relu => format!("({x}).relu()"),
                Un::Softplus => format!("({x}).softplus()"),
                Un::Abs => format!("({x}).abs()"),
            }
        }
        Expr::Binary(op, a, b) => format!("prim_binary(BinaryOp::{op:?}, &{}, &{})", rust(a), rust(b)),
        Expr::Reduce { op, axes, keepdims, x } => {
            let x = rust(x);
            match op {
                Red::Sum => format!("({x}).sum_axes(&{}, {keepdims})", list(axes)),
                Red::Mean => format!("({x}).mean_axes(&{}, {keepdims})", list(axes)),
                Red::Max => format!("({x}).max_axes(&{}, {keepdims})", list(axes)),
                Red::LogSumExp => format!("({x}).logsumexp({}, {keepdims})", axes[0]),
            }
        }
        Expr::Softmax { axis, log: false, x } => format!("({}).softmax({axis})", rust(x)),
        Expr::Softmax { axis, log: true, x } => format!("({}).log_softmax({axis})", rust(x)),
        Expr::Inf { inf, x } => {
            let (mask, vals) = inf_consts(inf);
            let vals: Vec<String> = vals.iter().map(|v| f64_lit(*v)).collect();
            format!(
                "{{ let x = {}; let s = x.shape().dims().to_vec(); Tensor::where_(&Tensor::from_vec(vec!{mask:?}, s.clone()).gt(&Tensor::scalar(0.5f64)), &Tensor::from_vec(vec![{}], s), &x) }}",
                rust(x),
                vals.join(", ")
            )
        }
        Expr::Pow { base, exp } => {
            format!("{{ let e = {}; ({}).pow(&e.maximum(&e.zeros_like())) }}", rust(exp), rust(base))
        }
        Expr::Cumsum { axis, x } => format!("({}).cumsum({axis})", rust(x)),
        Expr::Reshape { shape, x } => format!("({}).reshape_to({})", rust(x), rust_shape(shape)),
        Expr::Permute { perm, x } => format!("({}).permute(&{})", rust(x), list(perm)),
        Expr::Broadcast { shape, x } => format!("({}).broadcast_to({})", rust(x), rust_shape(shape)),
        Expr::Slice { axis, start, stop, step, x } => {
            format!("({}).slice_axis({axis}, {start}, {stop}, {step})", rust(x))
        }
        Expr::Flip { axes, x } => format!("({}).flip(&{})", rust(x), list(axes)),
        Expr::Concat { axis, xs } => {
            let parts: Vec<String> = xs.iter().map(rust).collect();
            format!("Tensor::concat(&[{}], {axis})", parts.join(", "))
        }
        Expr::Take { axis, idx, x } => {
            format!(
                "({}).take(&Tensor::from_vec(vec!{}, [{}]), {axis})",
                rust(x),
                list(idx).replace(']', "i64]"),
                idx.len()
            )
        }
        Expr::DynSlice { starts, sizes, x } => {
            format!("({}).dynamic_slice({}, &{})", rust(x), rust_starts(starts), list(sizes))
        }
        Expr::DynUpdate { starts, x, u } => {
            format!("({}).dynamic_update_slice(&{}, {})", rust(x), rust(u), rust_starts(starts))
        }
        Expr::Matmul(a, b) => format!("({}).matmul(&{})", rust(a), rust(b)),
        Expr::DynSliceAt { scale, sizes, x, at } => {
            let starts: Vec<String> =
                scale.iter().map(|k| format!("(&at * {}).floor().cast(DType::I64)", f64_lit(*k))).collect();
            format!(
                "{{ let at = {}; ({}).dynamic_slice(&[{}], &{}) }}",
                rust(at),
                rust(x),
                starts.join(", "),
                list(sizes)
            )
        }
        Expr::Where { a, b, x, y } => {
            format!("Tensor::where_(&({}).gt(&{}), &{}, &{})", rust(a), rust(b), rust(x), rust(y))
        }
        Expr::Pad { widths, value, x } => format!("({}).pad(&{widths:?}, {})", rust(x), f64_lit(*value)),
        Expr::IndexAdd { axis, idx, x, src } => format!(
            "({}).index_add({axis}, &Tensor::from_vec(vec!{}, [{}]), &{})",
            rust(x),
            list(idx).replace(']', "i64]"),
            idx.len(),
            rust(src)
        ),
        Expr::Var { axes, ddof, keepdims, x } => format!("({}).var_axes(&{}, {ddof}, {keepdims})", rust(x), list(axes)),
        Expr::Window { max, dims, strides, same, base, wdil, x } => format!(
            "{{ let x = {}; let w = xform::lax::WindowParams::dilated(\"reduce_window\", x.shape().dims(), &{}, &{}, &xform::lax::Padding::{}, &{}, &{}).unwrap(); xform::lax::reduce_window(xform::core::prim::ReduceOp::{}, &x, &w).unwrap() }}",
            rust(x),
            list(dims),
            list(strides),
            if *same { "Same" } else { "Valid" },
            list(base),
            list(wdil),
            if *max { "Max" } else { "Sum" }
        ),
        Expr::Mutate { op, view, target, value } => {
            let m = match op {
                MutOp::Add => "add_",
                MutOp::Sub => "sub_",
                MutOp::Mul => "mul_",
                MutOp::Copy => "copy_",
            };
            format!("{{ let t = ({}).copy(); let v = {}; t{}.{m}(&v); t }}", rust(target), rust(value), rust_view(view))
        }
        Expr::Collective { op, x } => {
            let x = rust(x);
            match op {
                Coll::Reduce { names, .. } => format!("lax::{}(&{x}, {names:?}).unwrap()", op.name()),
                Coll::AllGather { name, axis, tiled, .. } => {
                    format!("lax::all_gather(&{x}, {name:?}, {axis}, {tiled}).unwrap()")
                }
                Coll::PsumScatter { name, dim, tiled, .. } => {
                    format!("lax::psum_scatter(&{x}, {name:?}, {dim}, {tiled}).unwrap()")
                }
                Coll::AllToAll { name, split, concat, tiled, .. } => {
                    format!("lax::all_to_all(&{x}, {name:?}, {split}, {concat}, {tiled}).unwrap()")
                }
                Coll::Ppermute { name, perm } => format!("lax::ppermute(&{x}, {name:?}, &{perm:?}).unwrap()"),
                Coll::AxisIndex { names, offset } => {
                    format!("({x} * (lax::axis_index({names:?}).unwrap() + {offset}i32).cast(DType::F64))")
                }
            }
        }
        Expr::Linalg { op, rows, a, b } => rust_linalg(*op, rows, a, b.as_deref()),
    }
}

/// An `Expr::Linalg` as Rust source (through the test's helpers, as
/// `prim_unary` is).
fn rust_linalg(op: Lin, rows: &[usize], a: &Expr, b: Option<&Expr>) -> String {
    let b = b.map_or("None".to_string(), |b| format!("Some(&{})", rust(b)));
    format!("linalg_op(Lin::{op:?}, &well_conditioned(&{}, &{}), {b})", rust(a), list(rows))
}

/// A complete Rust program that runs the case and prints every output.
pub fn rust_reproducer(case: &Case) -> String {
    let mut s = String::new();
    s += "#![allow(unused_imports)]\nuse xform::prelude::*;\nuse xform::{functionalize, jacfwd, jacrev, lax, OrRaise};\n\n";
    s += "fn scalarize(ys: &[Tensor]) -> Tensor {\n    ys.iter().map(|y| y.sin().sum()).reduce(|a, b| a + b).unwrap()\n}\n\n";
    s += "fn main() {\n    let xs: Vec<Tensor> = vec![\n";
    for (sh, d) in case.shapes.iter().zip(&case.data) {
        let d: Vec<String> = d.iter().map(|v| f64_lit(*v)).collect();
        s += &format!("        Tensor::from_vec::<f64>(vec![{}], {}),\n", d.join(", "), rust_shape(sh));
    }
    s += "    ];\n";
    let outs: Vec<String> = case.program.outputs.iter().map(rust).collect();
    let mut writes = String::new();
    for w in &case.program.writes {
        let m = match w.op {
            MutOp::Add => "add_",
            MutOp::Sub => "sub_",
            MutOp::Mul => "mul_",
            MutOp::Copy => "copy_",
        };
        writes += &format!("let v = {}; xs[{}]{}.{m}(&v); ", rust(&w.value), w.input(), rust_view(&w.view));
    }
    s += &format!("    let f0 = |xs: &Vec<Tensor>| -> Vec<Tensor> {{ {writes}vec![{}] }};\n", outs.join(", "));
    for (k, tf) in case.stack.iter().enumerate() {
        let (p, n) = (k, k + 1);
        let body = match tf {
            Tf::Grad => format!("grad(|xs: &Vec<Tensor>| scalarize(&f{p}(xs)))(xs)"),
            Tf::Vmap { in_axes, out_axis, chunk, name, .. } => format!(
                "vmap_with(&f{p}, VmapOptions {{ in_axes: Axes::Leaves(vec!{in_axes:?}), out_axes: Axes::All(Some({out_axis})), chunk_size: {chunk:?}, axis_name: {}, ..Default::default() }})(xs)",
                name.as_ref().map_or("None".to_string(), |n| format!("Some({n:?}.into())"))
            ),
            Tf::Jvp => format!(
                "let ts: Vec<Tensor> = xs.iter().map(|x| (x * 3.0).cos()).collect(); let (y, t) = jvp(&f{p}, xs, &ts); y.into_iter().chain(t).collect()"
            ),
            Tf::Jacfwd => format!("jacfwd(&f{p})(xs).into_iter().flatten().collect()"),
            Tf::Jacrev => format!("jacrev(&f{p})(xs).into_iter().flatten().collect()"),
            Tf::Hessian => {
                format!("hessian(|xs: &Vec<Tensor>| scalarize(&f{p}(xs)))(xs).into_iter().flatten().collect()")
            }
            Tf::Functionalize => format!("functionalize(&f{p})(xs)"),
            Tf::Jit => format!("jit(&f{p})(xs)"),
            Tf::Checkpoint => format!("checkpoint(&f{p})(xs)"),
            Tf::CustomJvp => format!(
                "custom_jvp(&f{p}, |xs: &Vec<Tensor>, ts: &Vec<Tensor>| jvp(&f{p}, xs, ts)).call(xs)"
            ),
            Tf::CustomVjp => format!(
                "custom_vjp(&f{p}, |xs: &Vec<Tensor>| {{ let r: Vec<Tensor> = xs.iter().map(Tensor::copy).collect(); (f{p}(xs), r) }}, |r: &Vec<Tensor>, ct: &Vec<Tensor>| {{ let r: Vec<Tensor> = r.iter().map(Tensor::copy).collect(); xform::vjp(&f{p}, &r).1(ct) }}).call(xs)"
            ),
            Tf::JitCaptured => format!(
                "let c = xs[0].copy(); let g = jit(|rest: &Vec<Tensor>| {{ let all: Vec<Tensor> = std::iter::once(c.clone()).chain(rest.iter().cloned()).collect(); f{p}(&all) }}); let rest: Vec<Tensor> = xs[1..].to_vec(); let _ = g(&rest); c.mul_scalar_(0.5); c.add_scalar_(0.25); g(&rest)"
            ),
        };
        s += &format!("    let f{n} = |xs: &Vec<Tensor>| -> Vec<Tensor> {{ {body} }};\n");
    }
    s += &format!(
        "    for y in f{}(&xs) {{\n        println!(\"{{:?}} {{:?}}\", y.shape().dims(), y.to_vec_f64());\n    }}\n}}\n",
        case.stack.len()
    );
    if !case.program.writes.is_empty() {
        s = s.trim_end().trim_end_matches('}').to_string();
        s += "    // the arguments after the call (written back)\n";
        s += "    for x in &xs {\n        println!(\"{:?} {:?}\", x.shape().dims(), x.to_vec_f64());\n    }\n}\n";
    }
    s
}
