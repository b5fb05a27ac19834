#!/usr/bin/env python3
"""W9 in one sitting: xform's data-parallel DP-SGD step (benches/workloads/w9.rs)
in 1 process with 1 and 2 threads and in 2 processes under mpirun, then the
peer (benches/peers/w9_ddp.py: Opacus on PyTorch DDP over gloo), and a table:
each mode's median step time, the 2-process speedup over 1 process with 1
thread (the issue's goal: at least 1.7x), the bytes one process sends per
step, and xform / peer per mode (goal: xform faster than DDP).

Usage (from the repository root; Open MPI installed, the peers' venv):
    python3 scripts/compare_w9.py --python /path/to/venv/bin/python [--rounds 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_binary():
    out = subprocess.run(["cargo", "bench", "--bench", "workloads", "--features", "mpi", "--no-run",
                          "--message-format=json"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "workloads":
            return m["executable"]
    sys.exit("compare_w9: no workloads bench binary was built")


def lines(cmd, env=None):
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})}).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", required=True, help="python of a venv with torch and opacus")
    ap.add_argument("--rounds", type=int, default=1, help="alternate xform and the peer this many times")
    args = ap.parse_args()
    binary = bench_binary()
    mpirun = ["mpirun", "--oversubscribe", "-np", "2"]
    if os.geteuid() == 0:
        mpirun.insert(1, "--allow-run-as-root")
    peer_env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    runs = {}
    for _ in range(args.rounds):
        got = lines([binary, "--bench"], {"XFORM_BENCH": "W9"})
        got += lines(mpirun + [binary, "--bench"], {"XFORM_BENCH": "W9"})
        got += [json.loads(l) for l in subprocess.run(
            [args.python, os.path.join(ROOT, "benches/peers/w9_ddp.py")], cwd=ROOT, check=True,
            capture_output=True, text=True, env=peer_env).stdout.splitlines() if l.startswith("{")]
        for d in got:
            # threads per process, from the mode's name ("2 processes x 1 thread")
            threads = int(d["mode"].split(" x ")[1].split()[0])
            key = (d["library"], d["sizes"]["processes"], threads)
            runs.setdefault(key, []).append(d)
    med = {k: statistics.median(d["median_ms"] for d in v) for k, v in runs.items()}
    sent = {k: v[0].get("bytes_sent_per_step") for k, v in runs.items()}
    print(f"W9: one data-parallel DP-SGD step of the W5 CNN, global batch 64 ({args.rounds} round(s), medians)")
    print(f"{'library':8} {'mode':26} {'step ms':>9} {'vs 1x1':>7} {'MB sent':>8} {'xform/peer':>10}")
    modes = [(1, 1, "1 process x 1 thread"), (1, 2, "1 process x 2 threads"), (2, 1, "2 processes x 1 thread")]
    for lib in ("xform", "opacus"):
        base = med.get((lib, 1, 1))
        for procs, threads, name in modes:
            t = med.get((lib, procs, threads))
            if t is None:
                continue
            speed = f"{base / t:.2f}x" if base else "-"
            mb = f"{sent[(lib, procs, threads)] / 1e6:.1f}" if sent.get((lib, procs, threads)) else "-"
            peer = med.get(("opacus", procs, threads))
            ratio = f"{t / peer:.2f}" if lib == "xform" and peer else ""
            print(f"{lib:8} {name:26} {t:9.1f} {speed:>7} {mb:>8} {ratio:>10}")


if __name__ == "__main__":
    main()
