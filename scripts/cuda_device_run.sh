#!/usr/bin/env bash
# Build the CUDA test binaries and the benchmark here, run them on a GPU
# machine that has an NVIDIA driver but no Rust toolchain (and possibly no
# network, no NVRTC and no cuBLAS).
#
#   scripts/cuda_device_run.sh build [DIR] [--with-nvrtc] [--with-cudnn]   # here
#   DIR/run.sh [cuda|suite|device-suite|bench|all]...        # on the GPU machine
#   scripts/cuda_device_run.sh run [DIR] [PHASE]...          # same, from a checkout
#
# DIR defaults to target/cuda-bundle. `build` fills it with:
#   bin/      the release test executables built with `--features cuda` (the
#             suite, the kernels crate's unit tests) and the benchmark,
#             stripped of debug info;
#   ptx/      every generated kernel compiled to PTX for compute_90 with NVRTC
#             (the run points XFORM_CUDA_PTX_CACHE here, so the GPU machine
#             needs no NVRTC; the driver JIT-compiles PTX for the device);
#   include/  cuda_fp16.h / cuda_bf16.h and friends (only used if NVRTC is
#             there after all, for a kernel missing from ptx/);
#   lib/      libnvrtc (only with --with-nvrtc: about 100 MB);
#   cudnn/    libcudnn*.so.9 from the nvidia-cudnn-cu13 wheel (only with
#             --with-cudnn: about 850 MB, without the RNN/attention library);
#   run.sh    the runner.
# NVRTC comes from the PyPI wheels nvidia-cuda-nvrtc / nvidia-cuda-runtime,
# pinned to CUDA 13.0 so its PTX (ISA 9.0) loads under any CUDA 13 driver.
# GEMMs use cuBLAS when libcublas is on the GPU machine, else a generated
# kernel. The convolution uses cuDNN when run.sh finds libcudnn.so.9 (the
# bundle's cudnn/, the loader's path, a pip-installed nvidia-cudnn wheel of
# any python3 on the machine, /usr/local/cuda*/lib64), else a generated
# kernel. The binaries need only glibc (the CUDA libraries load at run time).
#
# Phases of run.sh: `cuda` (default): the suite's CUDA tests (every primitive
# on the device against the CPU, transforms on device tensors; these are
# #[ignore]d in a plain run and included here, so a missing GPU fails), the
# kernels crate's CUDA unit tests, and the NVRTC tests when the bundle has
# lib/ (they run strictly at build time); `suite`: the whole suite (the rule and
# composition tests run each body on the CPU and then on the GPU);
# `device-suite`: the whole suite again with XFORM_DEFAULT_DEVICE=cuda:0, so
# every test's tensors start on the GPU; `bench`: the benchmark; `all`: all
# of them. Exit status: non-zero if any phase failed.
set -euo pipefail

usage() {
    sed -n '2,12p' "$0" >&2
    exit 2
}

repo="$(cd "$(dirname "$0")/.." && pwd)"

# Writes DIR/run.sh.
write_runner() {
    local dir="$1"
    cat >"$dir/run.sh" <<'RUNNER'
#!/usr/bin/env bash
# Runs the bundled CUDA tests and benchmark on this (GPU) machine.
# Usage: run.sh [cuda|suite|device-suite|bench|all]...   (default: cuda)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export XFORM_CUDA_PTX_CACHE="${XFORM_CUDA_PTX_CACHE:-$here/ptx}"
# The bundled PTX targets compute_90 (runs on sm_90 and newer GPUs).
export XFORM_CUDA_ARCH="${XFORM_CUDA_ARCH:-compute_90}"
if [ -d "$here/include" ]; then
    export XFORM_CUDA_INCLUDE="${XFORM_CUDA_INCLUDE:-$here/include}"
fi
if [ -d "$here/lib" ]; then
    export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# cuDNN for the convolution: the first directory holding libcudnn.so.9.
cudnn_dir=""
ld_path="${LD_LIBRARY_PATH:-}"
for d in "$here/cudnn" ${ld_path//:/ } \
    $(python3 -c 'import nvidia.cudnn as m, os; print(" ".join(os.path.join(p, "lib") for p in m.__path__))' 2>/dev/null) \
    /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu; do
    if [ -e "$d/libcudnn.so.9" ]; then
        cudnn_dir="$d"
        break
    fi
done
if [ -z "$cudnn_dir" ] && ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then
    cudnn_dir="(the loader's cache)"
elif [ -n "$cudnn_dir" ]; then
    export LD_LIBRARY_PATH="$cudnn_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NCCL for pmap over GPUs: the first directory holding libnccl.so.2 (the
# loader's path, a pip-installed nvidia-nccl wheel of any python3, torch's
# among them, /usr/lib). cudarc loads it as libnccl.so: a link is made here.
nccl_dir=""
for d in ${ld_path//:/ } \
    $(python3 -c 'import nvidia.nccl as m, os; print(" ".join(os.path.join(p, "lib") for p in m.__path__))' 2>/dev/null) \
    /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu; do
    if [ -e "$d/libnccl.so.2" ]; then
        nccl_dir="$d"
        break
    fi
done
nccl_skip=()
if [ -n "$nccl_dir" ]; then
    mkdir -p "$here/nccl-link"
    ln -sf "$nccl_dir/libnccl.so.2" "$here/nccl-link/libnccl.so"
    export LD_LIBRARY_PATH="$here/nccl-link:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    nccl_skip=(--skip cuda_pmap_through_nccl)
fi
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(cuda)
echo "== GPU"
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found)"
echo "== $(ls "$XFORM_CUDA_PTX_CACHE" 2>/dev/null | wc -l) precompiled kernels in $XFORM_CUDA_PTX_CACHE"
echo "== cuDNN: ${cudnn_dir:-not found (the convolution runs its generated kernel)}"
echo "== NCCL: ${nccl_dir:-not found: the pmap-over-GPUs test is SKIPPED (not run, not passed)}"
status=0
run() {
    echo "== $*"
    if ! "$@"; then
        echo "== FAILED: $*"
        status=1
    fi
}
for phase in "${phases[@]}"; do
    case "$phase" in
        cuda)
            # The device tests are #[ignore]d in a plain run (no GPU there):
            # include them, so a missing device fails instead of passing.
            run "$here/bin/suite" cuda --include-ignored --skip cuda::nvrtc "${nccl_skip[@]}" --nocapture
            # The kernels crate's device tests are #[ignore]d too.
            for t in "$here"/bin/unit-*; do
                [ -x "$t" ] && run "$t" cuda --include-ignored --skip nvrtc --skip cudnn_library --skip nccl_library
            done
            if [ -n "$nccl_dir" ]; then
                for t in "$here"/bin/unit-*; do
                    [ -x "$t" ] && run "$t" nccl_library --include-ignored
                done
            else
                echo "== SKIPPED (no NCCL on this machine): cuda_pmap_through_nccl_equals_vmap, nccl_library_loads_with_every_symbol"
            fi
            if [ -n "$cudnn_dir" ]; then
                for t in "$here"/bin/unit-*; do
                    [ -x "$t" ] && run "$t" cudnn_library --include-ignored
                done
            fi
            if [ -d "$here/lib" ]; then
                run "$here/bin/suite" cuda::nvrtc --include-ignored
                for t in "$here"/bin/unit-*; do
                    [ -x "$t" ] && run "$t" nvrtc --include-ignored
                done
            else
                echo "== NVRTC tests not run here (no lib/ in the bundle; they ran at build time)"
            fi
            ;;
        suite) run "$here/bin/suite" ;;
        device-suite) run env XFORM_DEFAULT_DEVICE=cuda:0 "$here/bin/suite" ;;
        bench)
            for b in "$here"/bin/bench-*; do
                [ -x "$b" ] && run "$b" --bench
            done
            ;;
        all)
            "$0" cuda suite device-suite bench || status=1
            ;;
        *)
            echo "unknown phase $phase (cuda, suite, device-suite, bench, all)" >&2
            status=2
            ;;
    esac
done
echo "== done, status $status"
exit $status
RUNNER
    chmod +x "$dir/run.sh"
}

# Installs (once) the pinned NVRTC wheels into a venv and exports the paths.
nvrtc_env() {
    local venv="${XFORM_CUDA_VENV:-${HOME:-/root}/.cache/xform-cuda-venv}"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        'nvidia-cuda-nvrtc==13.0.*' 'nvidia-cuda-runtime==13.0.*'
    local site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    cuda_lib="$site/nvidia/cu13/lib"
    cuda_include="$site/nvidia/cu13/include"
    [ -e "$cuda_lib/libnvrtc.so.13" ] || {
        echo "libnvrtc.so.13 not found under $cuda_lib" >&2
        exit 1
    }
    export LD_LIBRARY_PATH="$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export XFORM_CUDA_INCLUDE="$cuda_include"
}

# Installs (once) the cuDNN wheel into the same venv (517 MB download) and
# sets cudnn_lib.
cudnn_env() {
    local venv="${XFORM_CUDA_VENV:-${HOME:-/root}/.cache/xform-cuda-venv}"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps 'nvidia-cudnn-cu13==9.*'
    local site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    cudnn_lib="$site/nvidia/cudnn/lib"
    [ -e "$cudnn_lib/libcudnn.so.9" ] || {
        echo "libcudnn.so.9 not found under $cudnn_lib" >&2
        exit 1
    }
}

# Prints "name<TAB>kind<TAB>executable" for each test/bench executable in
# cargo's JSON messages on stdin.
executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    kind = "bench" if "bench" in t["kind"] else ("unit" if "lib" in t["kind"] else t["kind"][0])
    print(t["name"], kind, m["executable"], sep="\t")
'
}

build() {
    local dir="$repo/target/cuda-bundle" with_nvrtc=0 with_cudnn=0
    for a in "$@"; do
        case "$a" in
            --with-nvrtc) with_nvrtc=1 ;;
            --with-cudnn) with_cudnn=1 ;;
            -*) usage ;;
            *) dir="$a" ;;
        esac
    done
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    rm -rf "$dir/bin" "$dir/ptx" "$dir/include" "$dir/lib" "$dir/cudnn"
    mkdir -p "$dir/bin" "$dir/ptx"
    cd "$repo"
    nvrtc_env

    echo "== building the CUDA test binaries (release)"
    local list
    list="$(mktemp)"
    cargo test --release --features cuda --no-run --message-format=json-render-diagnostics | executables >"$list"
    cargo test --release -p xform-kernels --features cuda --lib --no-run --message-format=json-render-diagnostics |
        executables >>"$list"
    if [ -d benches ]; then
        echo "== building the benchmark"
        cargo bench --features cuda --no-run --message-format=json-render-diagnostics | executables >>"$list"
    fi
    local name kind exe dest
    while IFS=$'\t' read -r name kind exe; do
        case "$kind" in
            test) [ "$name" = suite ] || continue; dest="$dir/bin/suite" ;;
            unit) [ "$name" = xform_kernels ] || continue; dest="$dir/bin/unit-$name" ;;
            bench) dest="$dir/bin/bench-$name" ;;
            *) continue ;;
        esac
        cp "$exe" "$dest"
        strip --strip-debug "$dest" 2>/dev/null || true
        echo "   $dest"
    done <"$list"
    rm -f "$list"
    [ -x "$dir/bin/suite" ] || {
        echo "the suite binary was not built" >&2
        exit 1
    }

    echo "== precompiling every kernel to PTX (compute_90)"
    XFORM_CUDA_PTX_CACHE="$dir/ptx" XFORM_CUDA_ARCH=compute_90 \
        "$dir/bin/suite" cuda::nvrtc::cuda_every_generated_kernel_compiles_with_nvrtc --exact --include-ignored --nocapture
    echo "   $(ls "$dir/ptx" | wc -l) kernels in $dir/ptx"

    mkdir -p "$dir/include"
    cp -r "$XFORM_CUDA_INCLUDE"/. "$dir/include/"
    if [ "$with_nvrtc" = 1 ]; then
        mkdir -p "$dir/lib"
        cp -L "$cuda_lib"/libnvrtc.so.13 "$cuda_lib"/libnvrtc-builtins.so.* "$dir/lib/"
    fi
    if [ "$with_cudnn" = 1 ]; then
        cudnn_env
        mkdir -p "$dir/cudnn"
        local f
        for f in "$cudnn_lib"/libcudnn*.so.9; do
            case "$f" in */libcudnn_adv.so.9) continue ;; esac
            cp -L "$f" "$dir/cudnn/"
        done
    fi
    write_runner "$dir"
    echo "== bundle: $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine run: $dir/run.sh"
}

case "${1:-}" in
    build)
        shift
        build "$@"
        ;;
    run)
        shift
        dir="$repo/target/cuda-bundle"
        if [ $# -gt 0 ] && [ -d "$1" ]; then
            dir="$1"
            shift
        fi
        [ -x "$dir/run.sh" ] || {
            echo "no bundle at $dir: run '$0 build' first" >&2
            exit 1
        }
        exec "$dir/run.sh" "$@"
        ;;
    *) usage ;;
esac
