#!/usr/bin/env python3
"""safetensors files for xform's interop tests, made and checked with
Python's `safetensors` package and numpy (no torch).

    python scripts/safetensors_fixtures.py make tests/data/safetensors
        writes the fixtures that tests/suite/safetensors.rs loads (checked in)
    python scripts/safetensors_fixtures.py check DIR
        verifies, value for value, the files that the test
        `safetensors::files_for_python` wrote into DIR (run by
        scripts/safetensors_check.sh)

The values are the same on both sides (see `dtype_values` in
tests/suite/safetensors.rs); every one is exact in its dtype. bfloat16,
which numpy lacks, is written and read as its raw 16-bit patterns through
`safetensors.serialize_file` / `safetensors.deserialize`.
"""

import os
import sys

import numpy as np
import safetensors
from safetensors import TensorSpec


def bf16_bits(values):
    """The bfloat16 bit patterns of float32-exact, bfloat16-exact values."""
    bits = np.array(values, dtype=np.float32).view(np.uint32)
    assert np.all(bits & 0xFFFF == 0), "not exact in bfloat16"
    return (bits >> 16).astype(np.uint16)


def dtype_values():
    """name -> (numpy array; for BF16 the uint16 bit patterns, dtype name)."""
    return {
        "f32": (np.array([[-1.5, 0.0, 0.25], [1e-3, 3.4028235e38, -np.inf]], dtype=np.float32), "float32"),
        "f64": (np.array([1.0 / 3.0, -2.5e-300, 1e300], dtype=np.float64), "float64"),
        "f16": (np.array([[0.5, -2.0], [65504.0, 2.0**-14]], dtype=np.float16), "float16"),
        "bf16": (bf16_bits([1.0, -0.5, 2.0**100, 2.0**-7]), "bfloat16"),
        "i32": (np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32), "int32"),
        "i64": (np.array([-(2**63), 2**63 - 1], dtype=np.int64), "int64"),
        "u32": (np.array([0, 2**32 - 1], dtype=np.uint32), "uint32"),
        "bool": (np.array([[True, False], [False, True]]), "bool"),
        "scalar": (np.array(7.0, dtype=np.float32), "float32"),
        "empty": (np.zeros((0, 3), dtype=np.float32), "float32"),
    }


def mlp_values():
    """An [3, 4, 2] MLP saved with PyTorch-style names, weights [d_in, d_out]."""
    return {
        "layers.0.w": np.arange(12, dtype=np.float32).reshape(3, 4) / 8 - 0.5,
        "layers.0.b": np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32),
        "layers.1.w": np.arange(8, dtype=np.float32).reshape(4, 2) / 4 - 1,
        "layers.1.b": np.array([-1.0, 1.0], dtype=np.float32),
    }


def write(path, arrays, metadata=None):
    """Writes name -> (array, dtype name) with serialize_file (raw bytes,
    so bfloat16 needs no framework)."""
    keep = []
    specs = {}
    for name, (a, dtype) in arrays.items():
        a = np.array(a, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        keep.append(a)
        specs[name] = TensorSpec(dtype=dtype, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
    safetensors.serialize_file(specs, path, metadata=metadata)


def make(out):
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "dtypes.safetensors"), dtype_values(), {"made_by": "safetensors_fixtures.py"})
    mlp = {k: (v, "float32") for k, v in mlp_values().items()}
    write(os.path.join(out, "mlp.safetensors"), mlp, {"format": "pt"})
    write(os.path.join(out, "unsupported.safetensors"), {"u8": (np.array([1, 2], dtype=np.uint8), "uint8")})


NP_OF = {
    "F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32,
    "I64": np.int64, "U32": np.uint32, "BOOL": np.bool_, "BF16": np.uint16,
}
NAME_OF = {
    "float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16",
    "int32": "I32", "int64": "I64", "uint32": "U32", "bool": "BOOL",
}


def read(path):
    """name -> (array (BF16 as bit patterns), dtype), read from the raw bytes."""
    with open(path, "rb") as f:
        items = safetensors.deserialize(f.read())
    return {
        name: (np.frombuffer(bytes(t["data"]), dtype=NP_OF[t["dtype"]]).reshape(t["shape"]), t["dtype"])
        for name, t in items
    }


def same(name, got, want, dtype):
    ga, gd = got
    if gd != dtype or ga.shape != want.shape:
        sys.exit(f"{name}: got {gd} {ga.shape}, expected {dtype} {want.shape}")
    if ga.dtype.kind == "f":
        ok = np.array_equal(ga.view(f"u{ga.itemsize}"), want.astype(ga.dtype).view(f"u{ga.itemsize}"))
    else:
        ok = np.array_equal(ga, want.astype(ga.dtype))
    if not ok:
        sys.exit(f"{name}: values differ:\n{ga}\nexpected\n{want}")


def check(d):
    got = read(os.path.join(d, "dtypes.safetensors"))
    want = dtype_values()
    if sorted(got) != sorted(want):
        sys.exit(f"dtypes.safetensors names {sorted(got)}, expected {sorted(want)}")
    for name, (a, dtype) in want.items():
        same(name, got[name], a, NAME_OF[dtype])

    # A derived struct { mlp: Mlp, extra: BTreeMap, #[tree(static)] .. }.
    got = read(os.path.join(d, "model.safetensors"))
    want = {f"mlp.{k}": v for k, v in mlp_values().items()}
    want["extra.norm.weight"] = np.array([1.0, 2.0], dtype=np.float64)
    want["extra.steps"] = np.array(12, dtype=np.int64)
    if sorted(got) != sorted(want):
        sys.exit(f"model.safetensors names {sorted(got)}, expected {sorted(want)}")
    for name, a in want.items():
        same(name, got[name], a, NAME_OF[a.dtype.name])
    with safetensors.safe_open(os.path.join(d, "model.safetensors"), framework="numpy") as f:
        if f.metadata() != {"format": "pt", "step": "12"}:
            sys.exit(f"model.safetensors metadata {f.metadata()}")
    # numpy's own loader reads what it has dtypes for.
    from safetensors.numpy import load_file

    if not np.array_equal(load_file(os.path.join(d, "model.safetensors"))["mlp.layers.1.b"], [-1.0, 1.0]):
        sys.exit("safetensors.numpy.load_file disagrees")
    print(f"safetensors: the files xform wrote in {d} read back exactly in Python")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit(__doc__)
    (make if sys.argv[1] == "make" else check)(sys.argv[2])
