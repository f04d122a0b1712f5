#!/usr/bin/env bash
# gpu-check.sh — check ruccl-cuda on real GPUs, in two halves:
#
#   gpu-check.sh build   on a machine with Rust (no GPU needed): builds the hardware test
#                        binaries and the perf tool, ruccl-perf with its CUDA backend and NCCL
#                        baseline (release, stripped), into cuda/.gpu-bundle/
#   gpu-check.sh run     on the GPU machine (no Rust, no network needed): runs them from the
#                        bundle, prints a summary, exits non-zero on any failure
#
# The GPU machine of this project has the NVIDIA driver, nvcc and python3 with PyTorch, but no
# Rust toolchain, so the binaries are built here and carried there (the device tool's `carry`:
# ["cuda/.gpu-bundle"]); `run` needs only bash, coreutils and the driver. It finishes in well
# under 8 minutes on one H200 (each step has its own timeout).
#
# What `run` does, in order (each step's output is also kept in $RUCCL_GPU_LOG, default
# /tmp/ruccl-gpu-check):
#   1. unit        the crate's own tests (PTX/source checks, probe, mapping, tables) on the GPU host
#   2. hardware    exact all-reduce for every type and operation on every map, exchange ordering,
#                  generations chained on the device, validation, contexts, peer access, NVRTC
#   3. conformance the sim crate's conformance suite: logical ranks on each GPU; across GPUs if
#                  there are several
#   4. faults      the sim crate's fault decorator and fault trial around the executor, every
#                  fault site, checked against the sim crate's outcome predictor
#   5. nvcc        (if nvcc exists) the kernel source compiled by nvcc for sm_90, and step 2's
#                  main test re-run on that PTX
#   6. perf        ruccl-perf --backend cuda: nccl-tests-style sweep (float sum, 1 KiB .. 256 MiB),
#                  a short all-types/all-ops correctness sweep, and with >= 2 GPUs the NCCL
#                  baseline
#
# Environment for `run`: RUCCL_CUDA_LOGICAL_RANKS (default 8), RUCCL_CUDA_CONFORMANCE=quick,
# RUCCL_GPU_LOG. Every hardware test runs with RUCCL_CUDA_REQUIRE_GPU=1: no GPU is a failure.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=${RUCCL_GPU_BUNDLE:-$here/.gpu-bundle}

build() {
    set -e
    if [[ "$(uname -m)" != x86_64 ]]; then
        echo "gpu-check build: this machine is $(uname -m); the GPU machine is x86_64. Build on x86_64." >&2
        exit 1
    fi
    local workspace target
    workspace=$(cd "$here/.." && pwd)
    target=${CARGO_TARGET_DIR:-$workspace/target/cuda}
    export CARGO_TARGET_DIR=$target
    # Small binaries for the trip: no debug info, symbols stripped (release and bench profiles:
    # `cargo test --release` builds tests with `bench`, which inherits from `release`).
    export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols
    export CARGO_PROFILE_BENCH_DEBUG=false CARGO_PROFILE_BENCH_STRIP=symbols
    rm -rf "$bundle"
    mkdir -p "$bundle/bin" "$bundle/kernels"
    local tests_json perf_json
    tests_json=$(mktemp)
    perf_json=$(mktemp)
    (cd "$workspace" && cargo test -p ruccl-cuda --release --lib --tests --no-run \
        --message-format=json-render-diagnostics >"$tests_json")
    (cd "$workspace" && cargo build -p ruccl-perf --release --features nccl \
        --bin ruccl-perf --message-format=json-render-diagnostics >"$perf_json")
    # Pick the executables out of cargo's JSON messages: test harnesses (profile.test) named
    # after their target, and the perf binary.
    python3 - "$tests_json" "$perf_json" "$bundle/bin" <<'PY'
import json, shutil, sys, os
tests_json, perf_json, out = sys.argv[1:4]
wanted = {"ruccl_cuda": "unit", "hardware": "hardware", "conformance": "conformance",
          "fault_injection": "faults", "ruccl-perf": "ruccl-perf"}
found = {}
for path in (tests_json, perf_json):
    for line in open(path):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        manifest = message.get("manifest_path", "")
        name = message["target"]["name"]
        is_test = message["profile"]["test"]
        key = wanted.get(name)
        if key is None or (key == "ruccl-perf") == is_test:
            continue
        if not manifest.endswith("/perf/Cargo.toml" if key == "ruccl-perf" else "/cuda/Cargo.toml"):
            continue
        found[key] = message["executable"]
missing = sorted(set(wanted.values()) - set(found))
if missing:
    sys.exit(f"gpu-check build: cargo produced no executable for {missing}")
for key, source in sorted(found.items()):
    shutil.copy2(source, os.path.join(out, key))
    print(f"  {key:16} <- {source}")
PY
    rm -f "$tests_json" "$perf_json"
    cp "$here"/kernels/*.cu "$here"/kernels/*.cuh "$here"/kernels/*.ptx "$bundle/kernels/"
    cp "$here/gpu-check.sh" "$bundle/gpu-check.sh"
    {
        echo "built:     $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
        echo "commit:    $(git -C "$workspace" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$workspace" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
        echo "rustc:     $(rustc --version)"
        echo "glibc:     $(ldd --version 2>/dev/null | head -n1)"
        echo "cudarc:    0.19, cuda-13000 bindings, dynamic loading; ruccl-perf built with feature nccl"
    } >"$bundle/MANIFEST"
    echo "gpu-check build: bundle ready in $bundle ($(du -sh "$bundle" | cut -f1))"
    cat "$bundle/MANIFEST"
}

# --- run ---------------------------------------------------------------------------------------

declare -a step_names=() step_results=() step_seconds=()
log_dir=${RUCCL_GPU_LOG:-/tmp/ruccl-gpu-check}

# step NAME TIMEOUT_SECONDS COMMAND...: run it, tee its output to the log, record the outcome.
step() {
    local name=$1 limit=$2
    shift 2
    echo
    echo "=== $name: $* (limit ${limit}s)"
    local started=$SECONDS rc
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log_dir/$name.log"
    rc=${PIPESTATUS[0]}
    step_names+=("$name")
    step_seconds+=($((SECONDS - started)))
    if [[ $rc -eq 0 ]]; then
        step_results+=("ok")
    elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
        step_results+=("TIMED OUT")
    else
        step_results+=("FAILED (exit $rc)")
    fi
}

# Put the libraries that only Python wheels ship on the loader path: libnvrtc.so.13 (the NVRTC
# kernel-source test) and libnccl.so.2 (the NCCL baseline; cudarc looks for the unversioned
# libnccl.so, so that name is linked to it).
find_wheel_libraries() {
    local links=$log_dir/lib
    mkdir -p "$links"
    local found
    found=$(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()])
roots.update(p for p in sys.path if os.path.isdir(p))
try:
    import torch
    roots.add(os.path.dirname(os.path.dirname(torch.__file__)))
except Exception:
    pass
toolkit = glob.glob("/usr/local/cuda*/lib64") + glob.glob("/usr/local/cuda*/targets/*/lib")
for name in ("libnvrtc.so.13", "libnccl.so.2"):
    hits = [hit for root in sorted(roots)
            for hit in glob.glob(os.path.join(root, "nvidia", "**", name), recursive=True)]
    hits += [os.path.join(d, name) for d in sorted(toolkit) if os.path.exists(os.path.join(d, name))]
    if hits:
        print(name, hits[0])
PY
)
    local dirs=""
    while read -r name path; do
        [[ -n "$name" ]] || continue
        # The real folder goes on the path (NVRTC finds libnvrtc-builtins beside itself).
        dirs=${dirs:+$dirs:}$(dirname "$path")
        [[ "$name" == libnccl.so.2 ]] && ln -sf "$path" "$links/libnccl.so"
        echo "  $name: $path"
    done <<<"$found"
    export LD_LIBRARY_PATH=$links${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

run() {
    [[ -x "$bundle/bin/hardware" ]] || {
        echo "gpu-check run: no bundle at $bundle; run 'gpu-check.sh build' on a Rust machine first" >&2
        exit 2
    }
    rm -rf "$log_dir"
    mkdir -p "$log_dir"
    local bin=$bundle/bin
    echo "=== ruccl-cuda gpu-check"
    cat "$bundle/MANIFEST"
    echo "host:      $(uname -srm), $(ldd --version 2>/dev/null | head -n1)"
    local gpus=0
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader \
            | sed 's/^/gpu:       /'
        gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
        nvidia-smi topo -m 2>/dev/null | sed 's/^/topo:      /' | head -n 12
    else
        echo "gpu:       nvidia-smi not found"
    fi
    echo "libraries from Python wheels:"
    find_wheel_libraries
    export RUCCL_CUDA_REQUIRE_GPU=1
    local threads=(--test-threads=2 --nocapture)

    step unit 60 "$bin/unit" "${threads[@]}"
    step hardware 240 "$bin/hardware" "${threads[@]}"
    step conformance 240 "$bin/conformance" "${threads[@]}"
    step faults 120 "$bin/faults" "${threads[@]}"
    if command -v nvcc >/dev/null; then
        local source=$log_dir/ruccl_kernels.cu ptx=$log_dir/ruccl_kernels.nvcc.ptx
        cat "$bundle/kernels/common.cuh" "$bundle/kernels/combine.cu" "$bundle/kernels/mean.cu" >"$source"
        step nvcc-compile 120 nvcc -ptx -arch=compute_90 -o "$ptx" "$source"
        if [[ -s "$ptx" ]]; then
            step nvcc-kernels 180 env RUCCL_CUDA_KERNELS="$ptx" "$bin/hardware" \
                every_type_and_operation "${threads[@]}"
        fi
    else
        echo "(nvcc not found: the nvcc cross-check is skipped)"
    fi
    step perf 240 "$bin/ruccl-perf" --backend cuda --require-gpu -b 1K -e 256M -f 4 -n 20 -w 5
    local nccl=()
    [[ $gpus -ge 2 ]] && nccl=(--nccl)
    step perf-all-types 180 "$bin/ruccl-perf" --backend cuda --require-gpu -d all -o all -b 4 -e 4M -f 64 \
        -n 3 -w 1 "${nccl[@]}"

    echo
    echo "=== summary (logs in $log_dir)"
    local failed=0 i
    for i in "${!step_names[@]}"; do
        printf '  %-16s %-18s %4ss\n' "${step_names[$i]}" "${step_results[$i]}" "${step_seconds[$i]}"
        [[ "${step_results[$i]}" == ok ]] || failed=1
    done
    echo "  skips:"
    grep -h "SKIP" "$log_dir"/*.log | sort | uniq -c | sed 's/^/    /' || echo "    none"
    echo "  test totals:"
    grep -hE "^test result:" "$log_dir"/*.log | sed 's/^/    /'
    echo "  perf (float sum):"
    grep -E "^ +[0-9]+ |Avg bus bandwidth|Out of bounds" "$log_dir/perf.log" | sed 's/^/    /'
    if [[ $failed -ne 0 ]]; then
        echo "gpu-check: FAILED"
        exit 1
    fi
    echo "gpu-check: all steps passed"
}

case "${1:-}" in
build) build ;;
run) run ;;
*)
    echo "usage: $0 build|run" >&2
    exit 2
    ;;
esac
