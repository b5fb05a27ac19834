"""W8 peer: gradient of a Cholesky-based Gaussian log-likelihood term, as a JAX
user and a torch.func user write it.

    loss(A, b) = sum_i ( logdet(A_i) + b_i^T A_i^-1 b_i )

over a batch of B=64 symmetric positive definite matrices A_i [n, n], n=64, and
vectors b_i [n], through a Cholesky factorization L_i of A_i and triangular
solves: logdet(A_i) = 2 sum(log(diag(L_i))), and A_i^-1 b_i = L_i^-T (L_i^-1 b_i)
by two triangular solves with L_i. The gradient is taken w.r.t. both A and b
(argnums=(0, 1)), in float32 and float64. Modes (one JSON line each per dtype):

  jax    "jit(grad) cholesky"  jax.jit(jax.grad(loss, argnums=(0, 1))) with
                               jnp.linalg.cholesky and jax.scipy.linalg.solve_triangular
                               (lower=True, then trans="T"); float64 via jax_enable_x64
  torch  "grad cholesky"       torch.func.grad(loss, argnums=(0, 1)) with
                               torch.linalg.cholesky and torch.linalg.solve_triangular
                               (upper=False on L, then upper=True on L.mT); no vmap:
                               both ops batch over the leading axis

Input data, the same for both libraries and both dtypes: numpy's
default_rng(seed=0) draws M [B, n, n] and then b [B, n], standard normal, in
float64; A_i = M_i M_i^T / n + I (symmetrized exactly, (A + A^T) / 2, so that
the float32 copy is symmetric to the bit too), then cast to the dtype and
converted to jax / torch arrays. The eigenvalues of A_i lie in about [1, 5].

Check, before any timing: in float64 JAX's and torch's gradients (dA and db)
must agree with each other to a relative 1e-8 (max |difference| / max |value|,
as peers.py's check), and both with the closed form dA = A^-1 - A^-1 b b^T A^-1,
db = 2 A^-1 b (numpy); otherwise the script exits with status 1 before
printing anything. float32 is compared with the float64 result (logged only).

Output: like /work/shared/bench/peers.py, ONE JSON line per measurement on
stdout with the fields workload ("W8_linalg_grad"), library, mode, dtype,
sizes ({"B": 64, "n": 64}), median_ms, min_ms, max_ms, reps, first_call_ms,
foreign_cpu, threads; nothing else goes to stdout (versions, thread settings,
checks and other diagnostics go to stderr). The timing protocol and thread
policy are peers.py's: OMP/MKL/OPENBLAS_NUM_THREADS and torch's intra-op
threads set to --threads (default 2, the machine's 2 cores; XLA:CPU sizes its
pool from the visible cores), one first call (for jit: includes tracing and
compilation, as the jit mode is measured before it is called anywhere else),
--warmup untimed calls, then median/min/max over reps = clamp(budget_s /
estimated call time, min_reps, max_reps) timed calls, each JAX call
synchronised with jax.block_until_ready; each measurement waits for a quiet
machine first and is retried when other processes were busy during it.

Run (outside the repo's build; the same virtual environment as peers.py):
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PEERS/bin/python benches/peers/w8_linalg.py > w8.jsonl
"""
import argparse
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batch", type=int, default=64, help="number of matrices B")
    p.add_argument("--n", type=int, default=64, help="matrix size n of A_i [n, n]")
    p.add_argument("--dtypes", default="float32,float64", help="comma-separated subset of float32,float64")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads for every library")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls after the first call")
    p.add_argument("--min-reps", type=int, default=10, help="never fewer timed repetitions")
    p.add_argument("--max-reps", type=int, default=300, help="never more timed repetitions")
    p.add_argument("--budget-s", type=float, default=1.0,
                   help="target timed seconds per measurement (sets reps within [min,max])")
    p.add_argument("--quiet-wait-s", type=float, default=20.0,
                   help="before each measurement wait up to this long for other processes to go idle")
    p.add_argument("--foreign-max", type=float, default=0.15,
                   help="CPU cores used by other processes above which the machine counts as busy")
    p.add_argument("--retries", type=int, default=1,
                   help="re-run a measurement that saw a busy machine, up to this many times")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    bad = set(args.dtypes) - {"float32", "float64"}
    if bad:
        p.error(f"unknown dtypes {sorted(bad)}")
    return args


ARGS = parse_args()

# Thread counts must be fixed through the environment before numpy / torch / jax are imported.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # needed for the float64 run; f32 stays f32 (dtypes are explicit)
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(ARGS.threads)

WORKLOAD = "W8_linalg_grad"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Timing (peers.py's protocol)
# --------------------------------------------------------------------------

def jax_sync(out):
    return jax.block_until_ready(out)


def no_sync(out):
    return out


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_sample():
    """(wall s, machine busy CPU s incl. steal, own process CPU s) or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), busy / _CLK_TCK, ru.ru_utime + ru.ru_stime


def _foreign(s0, s1):
    """Average number of cores used by other processes between two samples."""
    if s0 is None or s1 is None or s1[0] <= s0[0]:
        return None
    return max(0.0, ((s1[1] - s0[1]) - (s1[2] - s0[2])) / (s1[0] - s0[0]))


def wait_quiet():
    """Block (up to --quiet-wait-s) until other processes use < --foreign-max cores; returns the
    sample opening the last 0.3 s check window (the start of the foreign-CPU span)."""
    t_start = time.perf_counter()
    while True:
        s0 = _cpu_sample()
        time.sleep(0.3)
        f = _foreign(s0, _cpu_sample())
        waited = time.perf_counter() - t_start
        if f is None or f < ARGS.foreign_max or waited >= ARGS.quiet_wait_s:
            if waited > 1.0:
                log(f"  waited {waited:.1f}s for a quiet machine (foreign {f:.2f} cores)")
            return s0


def _measure_once(fn, sync, s_begin):
    t0 = time.perf_counter()
    sync(fn())
    first = time.perf_counter() - t0
    for _ in range(ARGS.warmup):
        sync(fn())
    t0 = time.perf_counter()
    sync(fn())
    est = time.perf_counter() - t0
    reps = max(ARGS.min_reps, min(ARGS.max_reps, int(ARGS.budget_s / max(est, 1e-9))))
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            sync(fn())
            times.append(time.perf_counter() - t0)
    finally:
        s1 = _cpu_sample()
        gc.enable()
    foreign = _foreign(s_begin, s1)
    ms = [t * 1e3 for t in times]
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms), "reps": reps,
            "_first_ms": first * 1e3, "foreign_cpu": None if foreign is None else round(foreign, 3)}


def measure(fn, sync=no_sync):
    """Time fn() on a quiet machine, retrying (up to --retries) when others were busy; keeps the
    least disturbed attempt. first_call_ms is the very first call's (compilation happens once)."""
    best = first_ms = None
    for attempt in range(ARGS.retries + 1):
        st = _measure_once(fn, sync, wait_quiet())
        first_ms = st["_first_ms"] if first_ms is None else first_ms
        if best is None or (st["foreign_cpu"] or 0) < (best["foreign_cpu"] or 0):
            best = st
        if st["foreign_cpu"] is None or st["foreign_cpu"] < ARGS.foreign_max:
            break
        log(f"  busy machine during timing (foreign {st['foreign_cpu']:.2f} cores), retry {attempt + 1}")
    del best["_first_ms"]
    best["first_call_ms"] = first_ms
    return best


def emit(library, mode, dtype, sizes, stats):
    rec = {"workload": WORKLOAD, "library": library, "mode": mode, "dtype": dtype, "sizes": sizes,
           **{k: round(v, 6) if isinstance(v, float) else v for k, v in stats.items()}}
    rec["threads"] = ARGS.threads
    print(json.dumps(rec), flush=True)


def rel_diff(a, b):
    """Max relative difference of two lists of arrays (max |a - b| / max |b|, per array)."""
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        assert x.shape == y.shape, (x.shape, y.shape)
        worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-30)))
    return worst


# --------------------------------------------------------------------------
# The loss, once per library
# --------------------------------------------------------------------------

def j_loss(A, b):
    L = jnp.linalg.cholesky(A)                                            # [B, n, n], lower
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)))
    y = jsl.solve_triangular(L, b[..., None], lower=True)                 # L^-1 b
    x = jsl.solve_triangular(L, y, lower=True, trans="T")                 # L^-T L^-1 b = A^-1 b
    return logdet + jnp.sum(b[..., None] * x)


def t_loss(A, b):
    L = torch.linalg.cholesky(A)
    logdet = 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum()
    y = torch.linalg.solve_triangular(L, b.unsqueeze(-1), upper=False)
    x = torch.linalg.solve_triangular(L.mT, y, upper=True)
    return logdet + (b.unsqueeze(-1) * x).sum()


j_grad = jax.jit(jax.grad(j_loss, argnums=(0, 1)))
t_grad = torch.func.grad(t_loss, argnums=(0, 1))


def make_data(B, n, seed):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((B, n, n))
    b = rng.standard_normal((B, n))
    A = M @ np.swapaxes(M, -1, -2) / n + np.eye(n)
    A = 0.5 * (A + np.swapaxes(A, -1, -2))
    return A, b


def closed_form(A, b):
    Ainv = np.linalg.inv(A)
    x = np.einsum("bij,bj->bi", Ainv, b)
    return Ainv - x[:, :, None] * x[:, None, :], 2.0 * x


# --------------------------------------------------------------------------

def main():
    log(f"python {platform.python_version()} numpy {np.__version__} jax {jax.__version__} "
        f"torch {torch.__version__}; platform {platform.platform()} cpus {os.cpu_count()} "
        f"jax devices {jax.devices()}")
    log(f"threads: torch {torch.get_num_threads()} (interop {torch.get_num_interop_threads()}), "
        + " ".join(f"{v}={os.environ.get(v)}" for v in
                   ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "XLA_FLAGS")))
    log(f"args {vars(ARGS)}")
    t_start = time.perf_counter()
    B, n = ARGS.batch, ARGS.n
    sizes = {"B": B, "n": n}
    A64, b64 = make_data(B, n, ARGS.seed)
    ev = np.linalg.eigvalsh(A64)
    log(f"A eigenvalues in [{ev.min():.3g}, {ev.max():.3g}]")

    # Check first (float64, untimed; the jitted JAX gradient of the other dtype is compiled
    # separately, so its first_call_ms below still includes tracing + compilation).
    ref = closed_form(A64, b64)
    jx = [np.asarray(g) for g in j_grad(jnp.asarray(A64), jnp.asarray(b64))]
    tc = [g.numpy() for g in t_grad(torch.from_numpy(A64), torch.from_numpy(b64))]
    ok = True
    for name, got, want in (("jax vs torch.func", jx, tc), ("jax vs closed form", jx, ref),
                            ("torch.func vs closed form", tc, ref)):
        d = rel_diff(got, want)
        ok &= d <= 1e-8
        log(f"check W8 float64 {name}: max rel diff {d:.3e} (tol 1e-08) {'OK' if d <= 1e-8 else 'MISMATCH'}")
    if not ok:
        log("W8: gradients disagree in float64, nothing timed")
        sys.exit(1)

    for dname in ARGS.dtypes:
        dt = np.dtype(dname)
        A_np, b_np = A64.astype(dt), b64.astype(dt)
        Aj, bj = jnp.asarray(A_np), jnp.asarray(b_np)
        if dname == "float64":
            # compiled above for the check: time a fresh jit so first_call_ms includes compilation
            fresh = jax.jit(jax.grad(j_loss, argnums=(0, 1)))
            st = measure(lambda: fresh(Aj, bj), jax_sync)
        else:
            st = measure(lambda: j_grad(Aj, bj), jax_sync)
        emit("jax", "jit(grad) cholesky", dname, sizes, st)
        At, bt = torch.from_numpy(A_np), torch.from_numpy(b_np)
        st_t = measure(lambda: t_grad(At, bt))
        gj = [np.asarray(g) for g in j_grad(Aj, bj)]
        gt = [g.numpy() for g in t_grad(At, bt)]
        assert all(g.dtype == dt for g in gj + gt), [g.dtype for g in gj + gt]
        emit("torch", "grad cholesky", dname, sizes, st_t)
        if dname == "float32":
            log(f"check W8 float32 vs float64 reference: jax {rel_diff(gj, ref):.3e}, "
                f"torch.func {rel_diff(gt, ref):.3e}, jax vs torch.func {rel_diff(gj, gt):.3e}")
    log(f"total {time.perf_counter() - t_start:.1f}s")


if __name__ == "__main__":
    main()
