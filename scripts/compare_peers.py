#!/usr/bin/env python3
"""Runs xform's benchmark workloads and the peers' (JAX, PyTorch) in one sitting
and prints a table of median ratios, xform / peer, with the issue's targets.

Usage (from the repository root):
    python3 scripts/compare_peers.py --python /path/to/venv/bin/python
The venv needs numpy, jax and torch (see shared/bench/README.md). Results are
kept in --out (default target/bench) as xform.jsonl and peers.jsonl; with
--reuse-peers an existing peers.jsonl is used instead of running peers.py.
"""
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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--python", default=os.environ.get("PEERS_PYTHON", "python3"), help="python with numpy, jax, torch")
    p.add_argument("--peers", default=os.path.join(ROOT, "..", "shared", "bench", "peers.py"))
    p.add_argument("--out", default=os.path.join(ROOT, "target", "bench"))
    p.add_argument("--reuse-peers", action="store_true")
    p.add_argument("--reuse-xform", action="store_true")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    xf, pe = os.path.join(args.out, "xform.jsonl"), os.path.join(args.out, "peers.jsonl")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    if not args.reuse_xform:
        with open(xf, "w") as f:
            subprocess.run(["cargo", "bench", "--bench", "workloads"], cwd=ROOT, stdout=f, check=True)
            f.flush()
            subprocess.run(["cargo", "bench", "--bench", "workloads"], cwd=ROOT, stdout=f, check=True,
                           env={**os.environ, "XFORM_BENCH": "W1mem"})
    if not args.reuse_peers:
        with open(pe, "w") as f:
            subprocess.run([args.python, args.peers], stdout=f, check=True, env=env)
    x, q = load(xf), load(pe)
    print(f"{'workload':22s} {'dtype':8s} {'size':7s} {'mode':26s} {'xform ms':>10s} {'jax jit ms':>11s} {'ratio':>7s}"
          f" {'torch ms':>10s} {'ratio':>7s}  target")
    for w, d, n, xm, jm, tm, target in ROWS:
        r = find(x, "xform", w, d, n, xm)
        j = find(q, "jax", w, d, n, jm)
        t = find(q, "torch", w, d, n, tm)
        if r is None:
            continue
        jr = f"{r['median_ms'] / j['median_ms']:7.3f}" if j else "      -"
        tr = f"{r['median_ms'] / t['median_ms']:7.3f}" if t else "      -"
        jm_ = f"{j['median_ms']:11.4f}" if j else "          -"
        tm_ = f"{t['median_ms']:10.4f}" if t else "         -"
        print(f"{w:22s} {d:8s} {n or '':7s} {xm[:26]:26s} {r['median_ms']:10.4f} {jm_} {jr} {tm_} {tr}  {target}")
    for d in ("float64", "float32"):
        r = find(x, "xform", "W4_gemm", d, None, "matmul")
        npy = find(q, "numpy", "W4_gemm", d, None, "matmul")
        if r and npy:
            print(f"W4_gemm n=1024 {d}: xform {r['gflops']:.1f} GFLOP/s, numpy {npy['gflops']:.1f} GFLOP/s, "
                  f"ratio {r['gflops'] / npy['gflops']:.3f} (target >= 0.9)")
    m = find(x, "xform", "W1_memory", "float32", "medium", "vmap(grad) peak RSS")
    if m:
        print(f"W1 medium peak RSS {m['peak_rss_mb']:.0f} MiB = {m['peak_over_output_plus_inputs']:.2f}x "
              f"(output {m['output_mb']:.0f} MiB + inputs {m['inputs_mb']:.1f} MiB; target <= 1.5x)")
    for r in x:
        if r["workload"] == "W1_per_sample_grad" and r["sizes"].get("name") == "small":
            print(f"W1 small first call: {r['first_call_ms']:.3f} ms (target <= 5 ms; JAX jit compiles for ~480 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
