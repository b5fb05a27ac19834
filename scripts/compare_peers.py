#!/usr/bin/env python3
"""Runs xform's benchmark workloads and the peers' (JAX, PyTorch) in one sitting
and prints a table of median ratios, xform / peer, with the issue's targets.

Usage (from the repository root):
    python3 scripts/compare_peers.py --python /path/to/venv/bin/python [--rounds 3]
The venv needs numpy, jax and torch, and opacus for W7's Opacus rows (see
shared/bench/README.md). Results are
kept in --out (default target/bench) as xform.N.jsonl and peers.N.jsonl per
round N; with --reuse-peers / --reuse-xform existing files are used instead.

With --rounds R the two suites alternate R times (xform, peers, xform, ...),
so that a slow spell of a shared machine falls on both sides; each library's
median is then the median of its per-round medians, and the table also gives
the range of the per-round ratios.

W7 (one DP-SGD gradient) gets tables of its own, one per model: time and
peak_rss_growth_mb of each mode, and xform's dp mode over each (the issue's
targets: time <= 1.5x and peak <= 1.3x xform's own non-private batch gradient,
faster than torch.func and Opacus ghost clipping).
"""
import statistics
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (workload, dtype, size name or None, xform mode, jax mode, torch mode, target text)
ROWS = [
    ("W1_per_sample_grad", "float32", "small", "vmap(grad)", "jit(vmap(grad))", "torch.func vmap(grad)",
     "<= 0.5x jax, <= 0.1x torch"),
    ("W1_per_sample_grad", "float32", "medium", "vmap(grad)", "jit(vmap(grad))", "torch.func vmap(grad)", "<= 0.3x jax"),
    ("W1_per_sample_grad", "float64", "medium", "vmap(grad)", "jit(vmap(grad))", "torch.func vmap(grad)", "<= 0.3x jax"),
    ("W2_ensemble_forward", "float32", None, "vmap", "jit(vmap)", "torch.func vmap", "<= 1.0x jax"),
    ("W3_jacobian_hessian", "float32", None, "jacfwd(g)", "jit(jacfwd(g))", "torch.func jacfwd(g)", "<= 1.0x jax"),
    ("W3_jacobian_hessian", "float32", None, "jacrev(g)", "jit(jacrev(g))", "torch.func jacrev(g)", "<= 1.0x jax"),
    ("W3_jacobian_hessian", "float32", None, "hessian(f)", "jit(hessian(f))", "torch.func hessian(f)", "<= 1.0x jax"),
    ("dispatch_overhead", "float32", None, "vmap(grad(sin(x)*x)) [8]", "jit(vmap(grad(sin(x)*x))) [8], call+block",
     "torch.func vmap(grad(sin(x)*x)) [8]", "<= 5 us"),
]

# jit (issue 23): (workload, dtype, size name or None, xform jit mode, xform eager mode, jax mode,
# target jit / eager, target jit / jax jit)
JIT_ROWS = [
    ("W1_per_sample_grad", "float32", "small", "jit(vmap(grad))", "vmap(grad)", "jit(vmap(grad))", 0.6, 0.12),
    ("W3_jacobian_hessian", "float32", None, "jit(jacfwd(g))", "jacfwd(g)", "jit(jacfwd(g))", None, 0.6),
    ("W3_jacobian_hessian", "float32", None, "jit(jacrev(g))", "jacrev(g)", "jit(jacrev(g))", None, 0.6),
    ("W3_jacobian_hessian", "float32", None, "jit(hessian(f))", "hessian(f)", "jit(hessian(f))", None, 0.6),
]
JIT_DISPATCH = ("dispatch_overhead", "float32", None, "jit(vmap(grad(sin(x)*x))) [8]")

DISPATCH = ("dispatch_overhead", "float32", None, "vmap(grad(sin(x)*x)) [8]")

# W7, one DP-SGD gradient (per-example clip to C, sum, / B): xform's dp mode beside xform's own
# non-private batch gradient (the peers emit no W7 batch ref) and beside the peers' modes.
# (workload, [(library, mode, time target, peak memory target)]); a target is "xform dp / this <= x".
W7_DP = "dp"
W7_CLIP = "vmap(grad)+clip+sum"  # stands in for dp (marked) where the xform output has no dp line
W7_ROWS = [
    ("W7_dp_sgd_step", [
        ("xform", "vmap(grad)+clip+sum", None, None),
        ("xform", "grad(mean loss) batch ref", 1.5, 1.3),
        ("jax", "jit(vmap(grad)+clip+sum)", None, None),
        ("torch", "torch.func vmap(grad)+clip+sum", 1.0, None),
        ("opacus", "ghost clipping (GradSampleModuleFastGradientClipping)", 1.0, None),
        ("opacus", "GradSampleModule hooks + clip+sum", None, None),
    ]),
    ("W7_dp_sgd_step_mlp", [
        ("xform", "vmap(grad)+clip+sum", None, None),
        ("xform", "grad(mean loss) batch ref", 1.5, 1.3),
    ]),
]


def load(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def find(recs, lib, workload, dtype, name, mode):
    for r in recs:
        if (r["library"] == lib and r["workload"] == workload and r["dtype"] == dtype and r["mode"] == mode
                and (name is None or r["sizes"].get("name") == name)):
            return r
    return None


def find_rounds(rounds, lib, workload, dtype, name, mode):
    """The record of each round (None where missing)."""
    return [find(recs, lib, workload, dtype, name, mode) for recs in rounds]


def median_of(recs, key="median_ms"):
    vals = [r[key] for r in recs if r is not None]
    return statistics.median(vals) if vals else None


def ratio_text(xs, ps, key="median_ms", invert=False):
    """Ratio of the medians over rounds, and the range of per-round ratios."""
    x, p = median_of(xs, key), median_of(ps, key)
    if x is None or p is None:
        return None, ""
    per = [(a[key] / b[key]) if not invert else (b[key] / a[key]) for a, b in zip(xs, ps) if a and b]
    r = x / p if not invert else p / x
    spread = f" [{min(per):.2f}-{max(per):.2f}]" if len(per) > 1 else ""
    return r, spread


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--python", default=os.environ.get("PEERS_PYTHON", "python3"), help="python with numpy, jax, torch")
    p.add_argument("--peers", default=os.path.join(ROOT, "..", "shared", "bench", "peers.py"))
    p.add_argument("--out", default=os.path.join(ROOT, "target", "bench"))
    p.add_argument("--rounds", type=int, default=1, help="alternate the two suites this many times")
    p.add_argument("--reuse-peers", action="store_true")
    p.add_argument("--reuse-xform", action="store_true")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    xfs = [os.path.join(args.out, f"xform.{i}.jsonl") for i in range(args.rounds)]
    pes = [os.path.join(args.out, f"peers.{i}.jsonl") for i in range(args.rounds)]
    for i in range(args.rounds):
        if not args.reuse_xform:
            with open(xfs[i], "w") as f:
                subprocess.run(["cargo", "bench", "--bench", "workloads"], cwd=ROOT, stdout=f, check=True)
                if i == 0:
                    # Peak memory is not noisy: measured once, in a process of its own.
                    f.flush()
                    subprocess.run(["cargo", "bench", "--bench", "workloads"], cwd=ROOT, stdout=f, check=True,
                                   env={**os.environ, "XFORM_BENCH": "W1mem"})
        if not args.reuse_peers:
            with open(pes[i], "w") as f:
                subprocess.run([args.python, args.peers], stdout=f, check=True, env=env)
    xr, pr = [load(f) for f in xfs], [load(f) for f in pes]
    n = args.rounds
    print(f"{n} round(s); medians over rounds, [range of per-round ratios]")
    print(f"{'workload':22s} {'dtype':8s} {'size':7s} {'mode':26s} {'xform ms':>10s} {'jax jit ms':>11s} {'ratio':>17s}"
          f" {'torch ms':>10s} {'ratio':>17s}  target")
    for w, d, nm, xm, jm, tm, target in ROWS:
        xs = find_rounds(xr, "xform", w, d, nm, xm)
        if median_of(xs) is None:
            continue
        cols = []
        for lib, mode in (("jax", jm), ("torch", tm)):
            ps = find_rounds(pr, lib, w, d, nm, mode)
            r, spread = ratio_text(xs, ps)
            cols.append((median_of(ps), r, spread))
        text = ""
        for med, r, spread in cols:
            med_ = f"{med:10.4f}" if med is not None else "         -"
            r_ = f"{r:6.3f}{spread:11s}" if r is not None else f"{'-':>17s}"
            text += f" {med_} {r_}"
        print(f"{w:22s} {d:8s} {nm or '':7s} {xm[:26]:26s} {median_of(xs):10.4f}{text}  {target}")
    for d in ("float64", "float32"):
        xs = find_rounds(xr, "xform", "W4_gemm", d, None, "matmul")
        ns = find_rounds(pr, "numpy", "W4_gemm", d, None, "matmul")
        r, spread = ratio_text(xs, ns, key="gflops")
        if r is not None:
            print(f"W4_gemm n=1024 {d}: xform {median_of(xs, 'gflops'):.1f} GFLOP/s, numpy {median_of(ns, 'gflops'):.1f}"
                  f" GFLOP/s, ratio {r:.3f}{spread} (target >= 0.9)")
    ds = [r for r in find_rounds(xr, "xform", *DISPATCH) if r]
    if ds:
        per = ", ".join(f"{r['median_ms'] * 1e3:.2f}" for r in ds)
        print(f"dispatch: {median_of(ds) * 1e3:.2f} us per call (per round: {per}; target <= 5 us)")
    m = find(xr[0], "xform", "W1_memory", "float32", "medium", "vmap(grad) peak RSS")
    if m:
        print(f"W1 medium peak RSS {m['peak_rss_mb']:.0f} MiB = {m['peak_over_output_plus_inputs']:.2f}x "
              f"(output {m['output_mb']:.0f} MiB + inputs {m['inputs_mb']:.1f} MiB; target <= 1.5x)")
    firsts = [r["first_call_ms"] for recs in xr for r in recs
              if r["workload"] == "W1_per_sample_grad" and r["sizes"].get("name") == "small"]
    if firsts:
        print(f"W1 small first call: {statistics.median(firsts):.3f} ms (max {max(firsts):.3f}; target <= 5 ms;"
              f" JAX jit compiles for ~480 ms)")
    print_jit(xr, pr)
    print_w7(xr, pr)
    return 0


def print_jit(xr, pr):
    """xform's jitted modes against xform eager and JAX jit."""
    print(f"\njit: {'workload':20s} {'mode':18s} {'jit ms':>9s} {'eager ms':>9s} {'jit/eager':>16s}"
          f" {'jax jit ms':>10s} {'jit/jax':>16s}  targets")
    for w, d, nm, jm, em, pm, t_eager, t_jax in JIT_ROWS:
        js = find_rounds(xr, "xform", w, d, nm, jm)
        if median_of(js) is None:
            continue
        es = find_rounds(xr, "xform", w, d, nm, em)
        ps = find_rounds(pr, "jax", w, d, nm, pm)
        cells = []
        for other in (es, ps):
            r, spread = ratio_text(js, other)
            med = median_of(other)
            cells.append((f"{med:9.4f}" if med is not None else f"{'-':>9s}",
                          f"{r:5.3f}{spread:11s}" if r is not None else f"{'-':>16s}"))
        targets = ", ".join(t for t in (f"<= {t_eager}x eager" if t_eager else "",
                                        f"<= {t_jax}x jax jit" if t_jax else "") if t)
        print(f"jit: {w:20s} {jm[:18]:18s} {median_of(js):9.4f} {cells[0][0]} {cells[0][1]} {cells[1][0]:>10s}"
              f" {cells[1][1]}  {targets}")
    ds = [r for r in find_rounds(xr, "xform", *JIT_DISPATCH) if r]
    if ds:
        print(f"jit: dispatch jitted {median_of(ds) * 1e3:.2f} us per call (target <= 1 us)")


def print_w7(xr, pr):
    """The W7 tables: time and peak_rss_growth_mb of every mode, and xform dp's ratios to each."""
    def med(recs, key):
        return median_of(recs, key) if any(r and key in r for r in recs) else None

    def fmt(v, width, prec):
        return f"{v:{width}.{prec}f}" if v is not None else f"{'-':>{width}s}"

    for w, rows in W7_ROWS:
        dp_mode = W7_DP
        dps = find_rounds(xr, "xform", w, "float32", None, dp_mode)
        if median_of(dps) is None:
            dp_mode = W7_CLIP
            dps = find_rounds(xr, "xform", w, "float32", None, dp_mode)
            if median_of(dps) is None:
                continue
        dp_peak = med(dps, "peak_rss_growth_mb")
        c = next(r for r in dps if r)["sizes"].get("C")
        print(f"\n{w} (C={c}): ratios are xform {dp_mode} / the row's mode [range over rounds];"
              f" peak, first = peak_rss_growth_mb, first_call_peak_rss_growth_mb (MB)")
        if dp_mode != W7_DP:
            print(f"  (no xform '{W7_DP}' line: '{W7_CLIP}' stands in for it)")
        print(f"{'library':8s} {'mode':54s} {'median ms':>10s} {'time ratio':>17s} {'peak':>8s} {'first':>8s}"
              f" {'peak ratio':>10s}  target")
        for lib, mode, t_target, m_target in [("xform", dp_mode, None, None)] + [
                r for r in rows if r[:2] != ("xform", dp_mode)]:
            is_dp = (lib, mode) == ("xform", dp_mode)
            ps = dps if is_dp else find_rounds(xr if lib == "xform" else pr, lib, w, "float32", None, mode)
            if median_of(ps) is None:
                continue
            r, spread = (None, "") if is_dp else ratio_text(dps, ps)
            peak = med(ps, "peak_rss_growth_mb")
            m_ratio = dp_peak / peak if not is_dp and dp_peak is not None and peak else None
            target = []
            if t_target is not None and r is not None:
                target.append(f"time <= {t_target}x: {'yes' if r <= t_target else 'NO'}")
            if m_target is not None and m_ratio is not None:
                target.append(f"peak <= {m_target}x: {'yes' if m_ratio <= m_target else 'NO'}")
            r_ = f"{r:6.3f}{spread:11s}" if r is not None else f"{'-':>17s}"
            print(f"{lib:8s} {mode[:54]:54s} {median_of(ps):10.3f} {r_} {fmt(peak, 8, 1)} "
                  f"{fmt(med(ps, 'first_call_peak_rss_growth_mb'), 8, 1)} {fmt(m_ratio, 10, 3)}  "
                  f"{', '.join(target)}".rstrip())

if __name__ == "__main__":
    sys.exit(main())
