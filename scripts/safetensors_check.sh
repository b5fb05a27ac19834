#!/usr/bin/env bash
# safetensors interop, xform -> Python: runs the test
# `safetensors::files_for_python`, which writes safetensors files from
# xform trees, then reads them with Python's `safetensors` package and
# numpy (scripts/safetensors_fixtures.py check) and compares every name,
# dtype, shape, value (bit for bit) and the metadata. The other direction
# (Python -> xform) is the checked-in fixtures in tests/data/safetensors,
# made by `scripts/safetensors_fixtures.py make` and loaded by the suite.
#
# Environment: XFORM_ST_VENV (default ~/.cache/xform-st-venv; made, with
# safetensors and numpy from pip, if absent). Fails if Python's safetensors
# cannot be installed: an interop check that cannot run must not pass.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${XFORM_ST_VENV:-${HOME:-/root}/.cache/xform-st-venv}"
PY="$VENV/bin/python"

if ! { [ -x "$PY" ] && "$PY" -c "import safetensors, numpy" >/dev/null 2>&1; }; then
    echo "safetensors_check: installing safetensors and numpy into $VENV"
    [ -x "$PY" ] || python3 -m venv "$VENV" || {
        echo "safetensors_check: FAILED: cannot create a virtual environment at $VENV" >&2
        exit 1
    }
    "$PY" -m pip install --quiet safetensors numpy || {
        echo "safetensors_check: FAILED: pip could not install safetensors and numpy" >&2
        exit 1
    }
fi

OUT="$(mktemp -d "${TMPDIR:-/tmp}/xform-st-check.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
XFORM_ST_OUT="$OUT" cargo test -p xform --test suite -- --exact safetensors::files_for_python
"$PY" scripts/safetensors_fixtures.py check "$OUT"
