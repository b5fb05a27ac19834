//! Printing a case as Python over JAX: the source the oracle runs (a
//! `run(xs)` function), and a standalone reproducer.

use crate::case::{Case, Tf};
use crate::program::{into_domain, Coll, Expr, Lin, MutOp, Red, Un, View};
use xform::core::prims::sample::Dom;
use xform::DType;

fn tuple(v: &[usize]) -> String {
    match v.len() {
        1 => format!("({},)", v[0]),
        _ => format!("({})", v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

fn f64_lit(v: f64) -> String {
    if v.is_nan() {
        "float('nan')".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "float('inf')".into()
        } else {
            "float('-inf')".into()
        }
    } else {
        format!("{v:?}")
    }
}

/// `(slice(None), ..., last)` selecting `last` on `axis`.
fn index(axis: usize, last: String) -> String {
    let mut parts = vec!["slice(None)".to_string(); axis];
    parts.push(last);
    format!("({},)", parts.join(", "))
}

/// `x` mapped into `dom` as the xform side maps it: `c + r tanh(x)` (the
/// constants printed with Rust's shortest round-trip digits).
fn into(x: &str, dom: Dom) -> String {
    let (c, r) = into_domain(dom).expect("only ops over real domains are drawn");
    format!("({c:?} + {r:?} * jnp.tanh({x}))")
}

/// The expression as Python over `xs` (a list of float64 arrays).
pub fn python(e: &Expr) -> String {
    match e {
        Expr::Input(i) => format!("xs[{i}]"),
        Expr::Leaf { .. } => unreachable!("leaves are numbered by Program::new"),
        Expr::Unary(op, x) => {
            let x = python(x);
            match op {
                Un::Prim(op) => {
                    let x = into(&x, op.sample_dom());
                    op.jax().replace("{x}", &x).replace("{p}", &op.param().unwrap_or_default())
                }
                Un::Square => format!("jnp.square({x})"),
                Un::RecipSq => format!("(1.0 / (jnp.square({x}) + 1.0))"),
                Un::Relu => format!("jax.nn.relu({x})"),
                Un::Softplus => format!("jax.nn.softplus({x})"),
                // xform's abs has derivative sign(0) = 0 at 0 (torch's; JAX's
                // abs gives 1 there: a documented difference, see
                // registry::edge_points), which `x * sign(x)` has in JAX.
                Un::Abs => format!("(lambda x: x * jnp.sign(x))({x})"),
            }
        }
        Expr::Binary(op, a, b) => {
            let (da, db) = op.sample_doms(DType::F64);
            op.jax().replace("{a}", &into(&python(a), da)).replace("{b}", &into(&python(b), db))
        }
        Expr::Reduce { op, axes, keepdims, x } => {
            let x = python(x);
            let k = if *keepdims { "True" } else { "False" };
            match op {
                Red::Sum => format!("jnp.sum({x}, axis={}, keepdims={k})", tuple(axes)),
                Red::Mean => format!("jnp.mean({x}, axis={}, keepdims={k})", tuple(axes)),
                Red::Max => format!("jnp.max({x}, axis={}, keepdims={k})", tuple(axes)),
                Red::LogSumExp => format!("jax.nn.logsumexp({x}, axis={}, keepdims={k})", axes[0]),
            }
        }
        Expr::Softmax { axis, log: false, x } => format!("jax.nn.softmax({}, axis={axis})", python(x)),
        Expr::Softmax { axis, log: true, x } => format!("jax.nn.log_softmax({}, axis={axis})", python(x)),
        Expr::Inf { inf, x } => {
            let (mask, vals) = crate::eval::inf_consts(inf);
            let mask: Vec<&str> = mask.iter().map(|&m| if m > 0.5 { "True" } else { "False" }).collect();
            let vals: Vec<String> = vals.iter().map(|v| f64_lit(*v)).collect();
            format!(
                "(lambda x: jnp.where(jnp.array([{}], dtype=bool).reshape(x.shape), jnp.array([{}], dtype=jnp.float64).reshape(x.shape), x))({})",
                mask.join(", "),
                vals.join(", "),
                python(x)
            )
        }
        // At 0^0 xform's pow has every derivative 0 (torch's; JAX gives NaN
        // there and keeps a TODO that it should be 0: a documented
        // difference, see registry::edge_points): the double `where` gives
        // JAX that convention at exactly 0^0 and leaves it unchanged elsewhere.
        Expr::Pow { base, exp } => format!(
            "(lambda b, e: (lambda m: jnp.where(m, 1.0, jnp.power(jnp.where(m, 1.0, b), jnp.where(m, 1.0, e))))((b == 0) & (e == 0)))({}, jnp.maximum({}, 0.0))",
            python(base),
            python(exp)
        ),
        Expr::Cumsum { axis, x } => format!("jnp.cumsum({}, axis={axis})", python(x)),
        Expr::Reshape { shape, x } => format!("jnp.reshape({}, {})", python(x), tuple(shape)),
        Expr::Permute { perm, x } => format!("jnp.transpose({}, {})", python(x), tuple(perm)),
        Expr::Broadcast { shape, x } => format!("jnp.broadcast_to({}, {})", python(x), tuple(shape)),
        Expr::Slice { axis, start, stop, step, x } => {
            format!("lax.slice_in_dim({}, {start}, {stop}, {step}, axis={axis})", python(x))
        }
        Expr::Flip { axes, x } => format!("jnp.flip({}, axis={})", python(x), tuple(axes)),
        Expr::Concat { axis, xs } => {
            let parts: Vec<String> = xs.iter().map(python).collect();
            format!("jnp.concatenate([{}], axis={axis})", parts.join(", "))
        }
        Expr::Take { axis, idx, x } => {
            format!("jnp.take({}, jnp.array({idx:?}, dtype=jnp.int64), axis={axis})", python(x))
        }
        Expr::DynSlice { starts, sizes, x } => {
            format!("lax.dynamic_slice({}, {starts:?}, {})", python(x), tuple(sizes))
        }
        Expr::DynUpdate { starts, x, u } => {
            format!("lax.dynamic_update_slice({}, {}, {starts:?})", python(x), python(u))
        }
        Expr::Matmul(a, b) => format!("jnp.matmul({}, {})", python(a), python(b)),
        Expr::DynSliceAt { scale, sizes, x, at } => {
            // `at` is printed once: a lambda binds it.
            let starts: Vec<String> =
                scale.iter().map(|k| format!("jnp.floor(at * {}).astype(jnp.int64)", f64_lit(*k))).collect();
            format!(
                "(lambda at: lax.dynamic_slice({}, [{}], {}))({})",
                python(x),
                starts.join(", "),
                tuple(sizes),
                python(at)
            )
        }
        Expr::Where { a, b, x, y } => {
            format!("jnp.where({} > {}, {}, {})", python(a), python(b), python(x), python(y))
        }
        Expr::Pad { widths, value, x } => {
            let w: Vec<String> = widths.iter().map(|(l, h)| format!("({l}, {h})")).collect();
            format!("jnp.pad({}, ({},), constant_values={})", python(x), w.join(", "), f64_lit(*value))
        }
        Expr::IndexAdd { axis, idx, x, src } => {
            format!("{}.at[{}].add({})", python(x), index(*axis, format!("jnp.array({idx:?})")), python(src))
        }
        Expr::Var { axes, ddof, keepdims, x } => format!(
            "jnp.var({}, axis={}, ddof={ddof}, keepdims={})",
            python(x),
            tuple(axes),
            if *keepdims { "True" } else { "False" }
        ),
        Expr::Window { max, dims, strides, same, base, wdil, x } => format!(
            "lax.reduce_window({}, {}, {}, {}, {}, {}, base_dilation={}, window_dilation={})",
            python(x),
            if *max { "-jnp.inf" } else { "0.0" },
            if *max { "lax.max" } else { "lax.add" },
            tuple(dims),
            tuple(strides),
            if *same { "'SAME'" } else { "'VALID'" },
            tuple(base),
            tuple(wdil)
        ),
        Expr::Mutate { op, view, target, value } => update(*op, view, &python(target), &python(value)),
        Expr::Collective { op, x } => {
            let x = python(x);
            let py = |b: bool| if b { "True" } else { "False" };
            match op {
                Coll::Reduce { names, .. } => format!("lax.{}({x}, {})", op.name(), axis_names(names)),
                Coll::AllGather { name, axis, tiled, .. } => {
                    format!("lax.all_gather({x}, '{name}', axis={axis}, tiled={})", py(*tiled))
                }
                Coll::PsumScatter { name, dim, tiled, .. } => {
                    format!("lax.psum_scatter({x}, '{name}', scatter_dimension={dim}, tiled={})", py(*tiled))
                }
                Coll::AllToAll { name, split, concat, tiled, .. } => {
                    format!("lax.all_to_all({x}, '{name}', {split}, {concat}, tiled={})", py(*tiled))
                }
                Coll::Ppermute { name, perm } => format!("lax.ppermute({x}, '{name}', perm={perm:?})"),
                Coll::AxisIndex { names, offset } => {
                    format!("({x} * (lax.axis_index({}) + {offset}).astype(jnp.float64))", axis_names(names))
                }
            }
        }
        Expr::Linalg { op, rows, a, b } => {
            // the matrices as `eval::well_conditioned` makes them
            let n = rows.len();
            let mut m = format!(
                "(jnp.tanh((lambda a: jnp.where(jnp.isnan(a), 0.0, a))({})) + {:?} * jnp.eye({n}))",
                python(a),
                n as f64 + 1.0
            );
            if rows.iter().enumerate().any(|(i, &k)| i != k) {
                m = format!("jnp.take({m}, jnp.array({rows:?}), axis=-2)");
            }
            let b = || python(b.as_deref().expect("the solves have a b"));
            let py = |b: bool| if b { "True" } else { "False" };
            match op {
                Lin::Cholesky => format!("jnp.linalg.cholesky({m})"),
                Lin::TriSolve { left_side, lower, transpose_a, unit_diagonal } => format!(
                    "jax.lax.linalg.triangular_solve({m}, {}, left_side={}, lower={}, transpose_a={}, unit_diagonal={})",
                    b(),
                    py(*left_side),
                    py(*lower),
                    py(*transpose_a),
                    py(*unit_diagonal)
                ),
                Lin::Solve => format!("jnp.linalg.solve({m}, {})", b()),
                Lin::Inv => format!("jnp.linalg.inv({m})"),
                Lin::Det => format!("jnp.linalg.det({m})"),
                Lin::LogDet => format!("jnp.linalg.slogdet({m})[1]"),
                Lin::Lu => format!("jax.lax.linalg.lu({m})[0]"),
                Lin::Pinv => format!("jnp.linalg.pinv({m})"),
                Lin::Expm => format!("jax.scipy.linalg.expm({m})"),
                Lin::QrR => {
                    format!("(lambda r: r * jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))[..., :, None])(jnp.linalg.qr({m})[1])")
                }
                Lin::Nuclear => format!("jnp.linalg.matrix_norm({m}, ord='nuc')"),
                Lin::EigLogSum => format!("jnp.sum(jnp.log(jnp.linalg.eigvalsh({m})), axis=-1)"),
            }
        }
    }
}

/// The pure form of `t.<view>.<op>_(v)`: `t.at[index].<op>(v)`, or for a
/// transposed view, the op on the transposed value, transposed back.
fn update(op: MutOp, view: &View, t: &str, v: &str) -> String {
    let at = |idx: String| match op {
        MutOp::Add => format!("{t}.at[{idx}].add({v})"),
        MutOp::Sub => format!("{t}.at[{idx}].add(-({v}))"),
        MutOp::Mul => format!("{t}.at[{idx}].multiply({v})"),
        MutOp::Copy => format!("{t}.at[{idx}].set({v})"),
    };
    match view {
        // A copy into the whole value (or a transposed view of it) replaces
        // it: the result is the value broadcast, batched only where the
        // value is (xform's copy_ keeps no batch axis of the target there;
        // JAX's `.at[...].set` would keep the target's, and refuse to write
        // the result into an argument vmap does not batch).
        View::Whole if op == MutOp::Copy => format!("jnp.broadcast_to({v}, jnp.shape({t}))"),
        View::Permute(p) if op == MutOp::Copy => {
            let inv = inverse(p);
            format!(
                "jnp.transpose(jnp.broadcast_to({v}, jnp.shape(jnp.transpose({t}, {}))), {})",
                tuple(p),
                tuple(&inv)
            )
        }
        View::Whole => at("...".into()),
        View::Slice { axis, start, stop, step } => at(index(*axis, format!("slice({start}, {stop}, {step})"))),
        View::Select { axis, index: i } => at(index(*axis, i.to_string())),
        View::Permute(p) => {
            let inv = inverse(p);
            format!(
                "jnp.transpose(jnp.transpose({t}, {}).at[...].{}, {})",
                tuple(p),
                match op {
                    MutOp::Add => format!("add({v})"),
                    MutOp::Sub => format!("add(-({v}))"),
                    MutOp::Mul => format!("multiply({v})"),
                    MutOp::Copy => format!("set({v})"),
                },
                tuple(&inv)
            )
        }
    }
}

/// The source the oracle runs: helpers, one function per level, `run`.
/// Every level returns `(outputs, arguments)`: the program writes to its
/// arguments functionally and returns their new values, and each transform
/// carries them as auxiliary data (vmap maps them back to their in_axes);
/// `run` returns the outputs, then (when the program writes) the arguments.
pub fn source(case: &Case) -> String {
    let mut s = String::new();
    s += "def scalarize(ys):\n    return sum(jnp.sum(jnp.sin(y)) for y in ys)\n\n";
    s += "def tangent(x):\n    return jnp.cos(x * 3.0)\n\n";
    s += "def scalar_aux(f):\n    return lambda xs: (lambda r: (scalarize(r[0]), r[1]))(f(xs))\n\n";
    let outs: Vec<String> = case.program.outputs.iter().map(python).collect();
    s += "def f0(xs):\n    xs = list(xs)\n";
    for w in &case.program.writes {
        let i = w.input();
        s += &format!("    xs[{i}] = {}\n", update(w.op, &w.view, &format!("xs[{i}]"), &python(&w.value)));
    }
    s += &format!("    return [{}], xs\n\n", outs.join(", "));
    for (k, tf) in case.stack.iter().enumerate() {
        let (p, n) = (k, k + 1);
        let body = match tf {
            Tf::Grad => format!("return jax.grad(scalar_aux(f{p}), has_aux=True)(xs)"),
            Tf::Vmap { in_axes, out_axis, name, .. } => {
                let ax: Vec<String> = in_axes.iter().map(|a| a.map_or("None".into(), |a| a.to_string())).collect();
                let ax = ax.join(", ");
                let name = name.as_ref().map_or(String::new(), |n| format!(", axis_name='{n}'"));
                format!("return jax.vmap(f{p}, in_axes=([{ax}],), out_axes=({out_axis}, [{ax}]){name})(xs)")
            }
            Tf::Jvp => format!(
                "y, t, a = jax.jvp(f{p}, (xs,), ([tangent(x) for x in xs],), has_aux=True)\n    return list(y) + list(t), a"
            ),
            Tf::Jacfwd => {
                format!("j, a = jax.jacfwd(f{p}, has_aux=True)(xs)\n    return jax.tree_util.tree_leaves(j), a")
            }
            Tf::Jacrev => {
                format!("j, a = jax.jacrev(f{p}, has_aux=True)(xs)\n    return jax.tree_util.tree_leaves(j), a")
            }
            Tf::Hessian => format!(
                "h, a = jax.hessian(scalar_aux(f{p}), has_aux=True)(xs)\n    return jax.tree_util.tree_leaves(h), a"
            ),
            Tf::Functionalize => format!("return f{p}(xs)  # functionalize: JAX is already pure"),
            // `jit` is jax.jit, or the identity in the oracle's eager reference
            Tf::Jit => format!("return jit(f{p})(xs)"),
            Tf::Checkpoint => format!("return jax.checkpoint(f{p})(xs)"),
            // The custom rules give the derivative of the results; the
            // arguments the function writes are differentiated as ordinary
            // code (xform's semantics: custom_jvp's documentation).
            Tf::CustomJvp => format!(
                "outs = lambda xs: f{p}(xs)[0]\n    g = jax.custom_jvp(outs)\n    g.defjvp(lambda primals, tangents: jax.jvp(outs, primals, tangents))\n    return g(xs), f{p}(xs)[1]"
            ),
            Tf::CustomVjp => format!(
                "outs = lambda xs: f{p}(xs)[0]\n    g = jax.custom_vjp(outs)\n    g.defvjp(lambda xs: (outs(xs), xs), lambda xs, ct: (jax.vjp(outs, xs)[1](ct)[0],))\n    return g(xs), f{p}(xs)[1]"
            ),
            // xform writes the captured tensor between two calls of the
            // jitted function: the second call computes with the new value
            // (the caller's first argument is untouched: the jitted
            // closure captured a copy)
            Tf::JitCaptured => format!(
                "ys = list(xs)\n    ys[0] = ys[0] * 0.5 + 0.25\n    r = f{p}(ys)\n    return r[0], [xs[0]] + list(r[1])[1:]"
            ),
        };
        s += &format!("def f{n}(xs):\n    {body}\n\n");
    }
    let args = if case.program.writes.is_empty() { "" } else { " + list(r[1])" };
    s += &format!("def run(xs):\n    r = f{}(xs)\n    return list(r[0]){args}\n", case.stack.len());
    s
}

/// A standalone Python script that runs the case in JAX and prints every output.
pub fn reproducer(case: &Case) -> String {
    let mut s = String::new();
    s += "import jax\nimport jax.numpy as jnp\nimport jax.scipy.linalg\nimport numpy as np\nfrom jax import lax\n";
    s += "jax.config.update(\"jax_enable_x64\", True)\n";
    s += "jit = jax.jit  # (lambda f: f) for the eager reference\n\n";
    s += &source(case);
    s += "\nxs = [\n";
    for (sh, d) in case.shapes.iter().zip(&case.data) {
        let d: Vec<String> = d.iter().map(|v| f64_lit(*v)).collect();
        s += &format!("    jnp.array(np.array([{}], dtype=np.float64).reshape({})),\n", d.join(", "), tuple(sh));
    }
    s += "]\nfor y in run(xs):\n    print(y.shape, np.asarray(y).reshape(-1).tolist())\n";
    s
}

/// Axis names as JAX takes them: one as a string, several as a tuple.
fn axis_names(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    if quoted.len() == 1 {
        quoted[0].clone()
    } else {
        format!("({},)", quoted.join(", "))
    }
}

/// The inverse of a permutation.
fn inverse(p: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; p.len()];
    for (i, &a) in p.iter().enumerate() {
        inv[a] = i;
    }
    inv
}
