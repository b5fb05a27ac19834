#!/usr/bin/env python3
"""The JAX side of xform's differential test (tests/jax_diff).

A long-lived process: it reads one JSON request per line on stdin and
writes one JSON answer per line on stdout, so JAX is imported once for the
whole run.

Request:  {"id": N, "src": "<python source defining run(xs)>",
           "inputs": [{"shape": [...], "data": [...]}, ...], "eager": bool}
Answer:   {"id": N, "outputs": [{"shape": [...], "data": [...]}, ...]}
      or  {"id": N, "error": "<exception text>"}

`run(xs)` receives the inputs as a list of float64 jax arrays and returns
a list of arrays. The source is evaluated with `jax`, `jnp`, `lax`, `np`
and `jit` in scope (`jit` is `jax.jit`, or the identity for an eager
request: jitted levels of a case run unjitted in the eager reference). Everything runs in float64 (jax_enable_x64) on the CPU.
The first line written is {"ready": "<jax version>"}.
"""

import json
import os
import sys
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg  # noqa: E402,F401  (jax.scipy.linalg.expm in the programs)
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402


# One XLA compilation per case (jit) is much faster than op-by-op dispatch,
# which compiles every primitive at every new shape; XFORM_JAX_ORACLE_JIT=0
# runs eagerly instead, and so does a request with "eager": true (the Rust
# side asks for that when the jit answer differs: XLA's simplifier has been
# seen to fold take(dynamic_slice(x, s), i) into one gather that wraps a
# negative start but drops the clamp, so eager JAX is the reference).
JIT = os.environ.get("XFORM_JAX_ORACLE_JIT", "1") != "0"


def answer(obj):
    # NaN and infinities are written as NaN / Infinity (the Rust side reads them).
    sys.stdout.write(json.dumps(obj, allow_nan=True) + "\n")
    sys.stdout.flush()


def to_json(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": [float(v) for v in a.reshape(-1)]}


def main():
    answer({"ready": jax.__version__})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        rid = req.get("id")
        try:
            jit = JIT and not req.get("eager", False)
            # `jit(f)` in the source is jax.jit, or f itself when the
            # request runs eagerly (the reference: no XLA optimization)
            scope = {"jax": jax, "jnp": jnp, "lax": lax, "np": np,
                     "jit": jax.jit if jit else (lambda f: f)}
            exec(compile(req["src"], f"<case {rid}>", "exec"), scope)
            xs = [
                jnp.asarray(np.array(i["data"], dtype=np.float64).reshape(i["shape"]))
                for i in req["inputs"]
            ]
            run = jax.jit(scope["run"]) if jit else scope["run"]
            outs = run(xs)
            answer({"id": rid, "outputs": [to_json(o) for o in outs]})
        except Exception:  # report every failure to the Rust side
            answer({"id": rid, "error": traceback.format_exc(limit=4)})


if __name__ == "__main__":
    main()
