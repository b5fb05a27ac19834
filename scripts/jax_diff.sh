#!/usr/bin/env bash
# The differential test against JAX (tests/jax_diff): makes (or reuses) a
# virtual environment with JAX outside the repository, then runs the
# ignored test `random_programs_match_jax` against it.
#
#   scripts/jax_diff.sh                      # 100 cases, seed 0 (about 1 s a case)
#   PROPTEST_CASES=500 XFORM_JAX_DIFF_SEED=random scripts/jax_diff.sh
#
# Environment: XFORM_JAX_VENV (default ~/.cache/xform-jax-venv),
# PROPTEST_CASES, XFORM_JAX_DIFF_SEED (a number or `random`). Fails (exit
# non-zero) if JAX cannot be installed: a differential test that cannot run
# must not pass.
set -euo pipefail
cd "$(dirname "$0")/.."

JAX_VERSION=0.10.2
VENV="${XFORM_JAX_VENV:-${HOME:-/root}/.cache/xform-jax-venv}"
PY="$VENV/bin/python"

have_jax() {
    [ -x "$PY" ] && "$PY" -c "import jax, numpy, sys; sys.exit(jax.__version__ != '$JAX_VERSION')" >/dev/null 2>&1
}

if ! have_jax; then
    echo "jax_diff: installing jax==$JAX_VERSION into $VENV"
    if [ ! -x "$PY" ]; then
        python3 -m venv "$VENV" || {
            echo "jax_diff: FAILED: cannot create a virtual environment at $VENV (python3 -m venv)" >&2
            exit 1
        }
    fi
    "$PY" -m pip install --quiet --disable-pip-version-check "jax==$JAX_VERSION" numpy || {
        echo "jax_diff: FAILED: pip could not install jax==$JAX_VERSION (the differential test cannot run)" >&2
        exit 1
    }
    have_jax || {
        echo "jax_diff: FAILED: jax==$JAX_VERSION is not importable from $PY after installing it" >&2
        exit 1
    }
fi

export XFORM_JAX_PYTHON="$PY"
export PROPTEST_CASES="${PROPTEST_CASES:-100}"
cargo test --test jax_diff -- --ignored --nocapture
