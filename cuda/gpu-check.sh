#!/usr/bin/env bash
# gpu-check.sh — check ruccl-cuda on real GPUs, in two halves, plus a rehearsal:
#
#   gpu-check.sh build     on a machine with Rust (no GPU needed): builds the test binaries and
#                          the perf tool, ruccl-perf with its CUDA backend and the NCCL baseline
#                          (release, stripped), into cuda/.gpu-bundle/
#   gpu-check.sh run       on the GPU machine (no Rust, no network needed): runs the bundle in
#                          hardware mode, prints a summary, exits non-zero on any failure
#   gpu-check.sh dry-run   here, without a GPU: the same flow on this checkout's debug test
#                          binaries (built by `cargo test` if needed); every hardware step is
#                          reported as skipped, the summary is printed, exit 0. CI runs this.
#   gpu-check.sh sweeps PERF   (what the perf-collectives step runs) a short checked sweep of
#                          every collective with the ruccl-perf at PERF, one `SWEEP:` line each
#
# The GPU machine of this project has the NVIDIA driver, nvcc and python3 with PyTorch, but no
# Rust toolchain, so the binaries are built here and carried there (the device tool's `carry`:
# ["cuda/.gpu-bundle"]); `run` needs only bash, coreutils and the driver.
#
# What `run` does, in order, each step under its own limit, every limit clipped by one global
# deadline (RUCCL_GPU_CHECK_DEADLINE seconds, default 450: well inside a 10-minute command, with
# room for the summary); a step the deadline leaves no time for is reported `skipped (deadline)`:
#   probe          the topology: GPUs, the context each logical rank got, peer access, NVRTC
#   unit           the crate's own tests (PTX/source checks, step layouts, cache, probe, tables)
#   hardware       every collective (all-reduce, reduce-scatter, all-gather, broadcast, reduce,
#                  gather, scatter, all-to-all) x algorithm x type x operation exact on every
#                  map, bitwise agreement across ranks and with the simulated device (rounding
#                  floats, wrapping integers), chained folds (all-reduce and reduce), staged
#                  steps, transfers that land elsewhere and local copies and folds (against the
#                  simulated device), generations chained on the device, the cache's steady
#                  state (no allocation; reduce and all-to-all too), validation, contexts, the
#                  caller's context, deferred errors, peer access, NVRTC
#   conformance    the sim crate's conformance suite (every collective it covers): logical ranks
#                  on each GPU with separate contexts and with the shared primary context;
#                  across GPUs too
#   faults         the sim crate's fault decorator around the executor, every fault site, ring and
#                  direct
#   copy-bandwidth each GPU's own device-to-device copy bandwidth (the perf tables' baseline)
#   perf           ruccl-perf --backend cuda: nccl-tests-style sweep (float sum, 1 KiB .. 256 MiB),
#                  out-of-place and in-place column groups from one run
#   perf-collectives every collective's sweep (all-reduce-perf, reduce-scatter-perf,
#                  all-gather-perf, broadcast-perf, reduce-perf, gather-perf, scatter-perf,
#                  alltoall-perf) at 2, 4 and 8 ranks, 4 B .. 64 MiB, checked (`#wrong` 0, exit
#                  0); a sweep this ruccl-perf lacks fails the step
#   nvcc-compile   the kernel source compiled by nvcc for compute_90 ...
#   nvcc-kernels   ... and the hardware test's main case re-run on that PTX
#   perf-all-types a short all-types/all-ops correctness sweep (with >= 2 GPUs, the NCCL baseline)
#
# Hardware mode sets RUCCL_CUDA_REQUIRE_HARDWARE=1: a missing GPU, a refused context (no fallback
# to the shared primary context), a missing kernel or NVRTC, and any skipped test FAIL the run;
# only `SKIP (allowed):` cases pass (a case that does not apply to the machine, like peer access
# with one GPU, or a typed mismatch of its software, like an NVRTC newer than the driver). Every
# step that is not `ok` fails the run, a step cut by the deadline included.
#
# The summary is always printed, also when the script is interrupted (INT/TERM) or a step hangs
# (each test binary also has a per-test watchdog, RUCCL_CUDA_TEST_TIMEOUT, set below the step's
# limit): step names, status, time, test counts, skips, and the first failure text of each failed
# step. Logs go to RUCCL_GPU_LOG (default $TMPDIR/ruccl-gpu-check); when $OUT is set, the summary
# is written to $OUT/gpu-check-summary.txt and every log is packed into $OUT/gpu-check-logs.tar.gz.
#
# Other knobs for `run`: RUCCL_CUDA_LOGICAL_RANKS (default 8), RUCCL_CUDA_CONFORMANCE=quick,
# RUCCL_CUDA_CONTEXTS=shared, RUCCL_CUDA_KERNELS, RUCCL_GPU_CHECK_VERBOSE=1 (echo every log).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
workspace=$(cd "$here/.." && pwd)
bundle=${RUCCL_GPU_BUNDLE:-$here/.gpu-bundle}

# test_binaries CARGO_ARGS...: build the crate's test harnesses with `cargo test --no-run` and
# print `key path` for each one the check runs (unit, hardware, conformance, faults), read from
# cargo's `Executable` lines.
test_binaries() {
    local output
    if ! output=$(cd "$workspace" && cargo test -p ruccl-cuda --lib --tests --no-run "$@" 2>&1); then
        printf '%s\n' "$output" >&2
        return 1
    fi
    printf '%s\n' "$output" |
        sed -nE -e 's/^ *Executable unittests src\/lib\.rs \((.*)\)$/unit \1/p' \
            -e 's/^ *Executable tests\/([a-z_]+)\.rs \((.*)\)$/\1 \2/p' |
        while read -r name path; do
            case "$name" in
            unit) ;;
            fault_injection) name=faults ;;
            hardware | conformance) ;;
            *) continue ;;
            esac
            [[ "$path" == /* ]] || path=$workspace/$path
            echo "$name $path"
        done
}

# The sweep of every collective (nccl-tests' names), and the worlds perf-collectives runs them at.
collective_sweeps=(all-reduce-perf reduce-scatter-perf all-gather-perf broadcast-perf
    reduce-perf gather-perf scatter-perf alltoall-perf)
sweep_worlds=(2 4 8)

# sweeps PERF: a short checked sweep of every collective on the CUDA backend at each of
# sweep_worlds (float, 4 B .. 64 MiB, out of place and in place), each followed by one line
# `SWEEP: NAME -g W: ok (peak busbw B GB/s)`, `FAILED (exit N)` or `not in this ruccl-perf`.
# Fails if any sweep failed or is missing.
sweeps() {
    local perf=$1 name world rc failed=0 commands output peak
    commands=$("$perf" help 2>&1)
    for name in "${collective_sweeps[@]}"; do
        if ! grep -qE "^ +$name( |$)" <<<"$commands"; then
            echo "SWEEP: $name: not in this ruccl-perf"
            failed=1
            continue
        fi
        for world in "${sweep_worlds[@]}"; do
            output=$("$perf" "$name" --backend cuda --require-gpu -g "$world" -b 4 -e 64M -f 16 \
                -n 2 -w 1 2>&1)
            rc=$?
            printf '%s\n' "$output"
            if ((rc == 0)); then
                peak=$(peak_busbw /dev/stdin <<<"$output")
                echo "SWEEP: $name -g $world: ok (peak busbw ${peak:-?} GB/s)"
            else
                echo "SWEEP: $name -g $world: FAILED (exit $rc)"
                failed=1
            fi
        done
    done
    return "$failed"
}

build() {
    set -e
    if [[ "$(uname -m)" != x86_64 ]]; then
        echo "gpu-check build: this machine is $(uname -m); the GPU machine is x86_64. Build on x86_64." >&2
        exit 1
    fi
    local target
    target=${CARGO_TARGET_DIR:-$workspace/target/cuda}
    export CARGO_TARGET_DIR=$target
    # Small binaries for the trip: no debug info, symbols stripped (release and bench profiles:
    # `cargo test --release` builds tests with `bench`, which inherits from `release`).
    export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols
    export CARGO_PROFILE_BENCH_DEBUG=false CARGO_PROFILE_BENCH_STRIP=symbols
    rm -rf "$bundle"
    mkdir -p "$bundle/bin" "$bundle/kernels"
    local binaries name path
    binaries=$(test_binaries --release)
    # The perf tool lives in the perf/ crate: its CUDA backend is this executor, `nccl` adds the
    # NCCL baseline (and implies `cuda`).
    (cd "$workspace" && cargo build -p ruccl-perf --release --features nccl --bin ruccl-perf)
    binaries+=$'\n'"ruccl-perf $target/release/ruccl-perf"
    while read -r name path; do
        cp "$path" "$bundle/bin/$name"
        printf '  %-16s <- %s\n' "$name" "$path"
    done <<<"$binaries"
    for name in unit hardware conformance faults ruccl-perf; do
        [[ -x "$bundle/bin/$name" ]] || {
            echo "gpu-check build: cargo produced no executable for $name" >&2
            exit 1
        }
    done
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

# --- the check (run and dry-run) ---------------------------------------------------------------

mode=""                                  # hardware | dry-run
deadline=${RUCCL_GPU_CHECK_DEADLINE:-450} # seconds for the whole check
reserve=20                               # of which kept for the summary and the packing
log_dir=${RUCCL_GPU_LOG:-${TMPDIR:-/tmp}/ruccl-gpu-check}
declare -a step_names=() step_statuses=() step_seconds=()
declare -A binary=()
current_pid="" current_step="" current_started=0 interrupted="" finished=0 completed=0
check_started=$SECONDS

# record NAME STATUS SECONDS
record() {
    step_names+=("$1")
    step_statuses+=("$2")
    step_seconds+=("$3")
}

# Whether a recorded status fails the run: in hardware mode anything but `ok` or `n/a`; in a
# dry run only what ran and failed.
is_failure() {
    case "$1" in
    ok* | n/a*) return 1 ;;
    skipped*) [[ $mode == hardware ]] ;;
    *) return 0 ;;
    esac
}

# count PATTERN LOG: occurrences of a fixed string in the log (0 when there is no log).
count() {
    [[ -f "$2" ]] || {
        echo 0
        return
    }
    grep -oF -- "$1" "$2" | wc -l | tr -d ' '
}

# tests LOG: `passed failed ignored` summed over libtest's `test result:` lines, or `- - -`.
tests() {
    [[ -f "$1" ]] && grep -qE '^test result:' "$1" || {
        echo "- - -"
        return
    }
    grep -E '^test result:' "$1" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/' |
        awk '{ p += $1; f += $2; i += $3 } END { print p, f, i }'
}

# first_failure LOG STATUS: the first watchdog line, panic (with its message), error line, or the
# last lines of the log, on one line, at most 400 characters.
first_failure() {
    local log=$1 status=$2 text=""
    [[ -f "$log" ]] || return 0
    if [[ "$status" == "TIMED OUT"* ]] && ! grep -q 'TIMEOUT: ' "$log"; then
        text="hit the step limit; last output: $(tail -n +3 "$log" | tail -n 3)"
        printf '%.400s' "$(printf '%s' "$text" | tr '\n' ' ' | tr -s ' ')"
        return 0
    fi
    text=$(grep -m1 -o 'TIMEOUT: .*' "$log")
    [[ -n "$text" ]] || text=$(grep -m1 -A3 -F 'panicked at' "$log" |
        grep -vE '^(note: |test |stack backtrace:|--$|$| +[0-9]+: | +at )')
    [[ -n "$text" ]] || text=$(grep -m1 -iE 'error|failed|cannot|refused|not found' "$log")
    [[ -n "$text" ]] || text="last output: $(tail -n +3 "$log" | tail -n 3)"
    text=$(printf '%s' "$text" | tr '\n' ' ' | tr -s ' ')
    printf '%.400s' "$text"
}

# run_step NAME LIMIT COMMAND...: run COMMAND, its output in $log_dir/NAME.log, under the smaller
# of LIMIT and what the deadline leaves; record ok, FAILED, TIMED OUT or skipped.
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$((deadline - (SECONDS - check_started) - reserve))
    if ((left < 15)); then
        printf '=== [%3ss] %s: skipped, the deadline leaves %ss\n' "$((SECONDS - check_started))" "$name" "$left"
        record "$name" "skipped (deadline)" 0
        return
    fi
    ((limit > left)) && limit=$left
    local log=$log_dir/$name.log
    printf '=== [%3ss] %s (limit %ss): %s\n' "$((SECONDS - check_started))" "$name" "$limit" "$*"
    printf '$ %s\n(limit %ss)\n' "$*" "$limit" >"$log"
    current_step=$name current_started=$SECONDS
    # The tests' watchdog fires first, naming the test that hangs.
    RUCCL_CUDA_TEST_TIMEOUT=$((limit > 40 ? limit - 15 : limit)) \
        timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1 &
    current_pid=$!
    wait "$current_pid"
    local rc=$? took=$((SECONDS - current_started))
    current_pid=""
    [[ "${RUCCL_GPU_CHECK_VERBOSE:-0}" == 1 ]] && cat "$log"
    local skips passed status
    skips=$(count 'SKIP: ' "$log")
    read -r passed _ _ <<<"$(tests "$log")"
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        status="TIMED OUT (${limit}s)"
    elif [[ $rc -ne 0 ]]; then
        status="FAILED (exit $rc)"
    elif [[ $mode == hardware && $skips -gt 0 ]]; then
        status="FAILED ($skips skipped)"
    elif [[ $skips -gt 0 && "$passed" != - && $skips -ge $passed ]]; then
        status="skipped (every test skipped)"
    else
        status=ok
    fi
    record "$name" "$status" "$took"
    printf '    %s in %ss\n' "$status" "$took"
}

# hardware_step NAME LIMIT COMMAND...: run_step on the GPU machine; in a dry run, reported as
# skipped without running.
hardware_step() {
    if [[ $mode == dry-run ]]; then
        printf '=== %s: skipped (dry run): %s\n' "$1" "${*:3}"
        record "$1" "skipped (dry run)" 0
        return
    fi
    run_step "$@"
}

# The summary: printed last, always (from the EXIT trap), and written to $OUT when it is set.
summary() {
    local failed=() i name status log counts passed failures ignored skips allowed
    echo "=== gpu-check summary: $mode, $((SECONDS - check_started)) s of a ${deadline} s deadline${interrupted:+, INTERRUPTED by $interrupted}"
    if [[ -f "$bundle/MANIFEST" && $mode == hardware ]]; then
        sed -n 's/^\(commit\|built\): */bundle \1: /p' "$bundle/MANIFEST"
    fi
    # (libtest prints a test's output after its `test name ... `, so markers can start mid-line.)
    if [[ -f "$log_dir/probe.log" ]] && grep -q 'TOPOLOGY: ' "$log_dir/probe.log"; then
        grep -o 'TOPOLOGY: .*' "$log_dir/probe.log" | sed 's/^TOPOLOGY: /topology: /'
    else
        echo "topology: not probed"
    fi
    if [[ -f "$log_dir/hardware.log" ]] && grep -q 'COLLECTIVES: ' "$log_dir/hardware.log"; then
        grep -o 'COLLECTIVES: .*' "$log_dir/hardware.log" | head -n1 | sed 's/^COLLECTIVES: /collectives run: /'
    fi
    printf '%-17s %-28s %5s %7s %7s %8s %6s %8s\n' step status time passed failed ignored skips allowed
    for i in "${!step_names[@]}"; do
        name=${step_names[$i]} status=${step_statuses[$i]}
        log=$log_dir/$name.log
        counts=$(tests "$log")
        read -r passed failures ignored <<<"$counts"
        skips=- allowed=-
        if [[ -f "$log" ]]; then
            skips=$(count 'SKIP: ' "$log")
            allowed=$(count 'SKIP (allowed): ' "$log")
        fi
        printf '%-17s %-28s %4ss %7s %7s %8s %6s %8s\n' "$name" "$status" "${step_seconds[$i]}" \
            "$passed" "$failures" "$ignored" "$skips" "$allowed"
        if is_failure "$status"; then
            failed+=("$name")
            [[ "$status" == skipped* ]] || echo "    first failure: $(first_failure "$log" "$status")"
        fi
    done
    local copy="" group label peak
    if [[ -f "$log_dir/copy-bandwidth.log" ]]; then
        grep -o 'BANDWIDTH: .*' "$log_dir/copy-bandwidth.log" | sed 's/^BANDWIDTH: /copy bandwidth: /'
        copy=$(grep -o 'BANDWIDTH: GPU 0: .* [0-9.]* GB/s' "$log_dir/copy-bandwidth.log" | head -n1 |
            sed -E 's/.* ([0-9.]+) GB\/s$/\1/')
    fi
    if [[ -f "$log_dir/perf-collectives.log" ]]; then
        grep -o 'SWEEP: .*' "$log_dir/perf-collectives.log" | sed 's/^SWEEP: /sweep: /'
    fi
    if [[ -f "$log_dir/perf.log" ]] && grep -qE '^ +[0-9]+ ' "$log_dir/perf.log"; then
        echo "perf (float sum; out-of-place and in-place groups):"
        grep -E '^#? *(size|[0-9]+ )|Avg bus bandwidth|Out of bounds' "$log_dir/perf.log" | head -n 30 | sed 's/^/  /'
        for group in 1 2; do
            label="out of place"
            ((group == 2)) && label="in place"
            peak=$(peak_busbw "$log_dir/perf.log" "$group")
            if [[ -n "$peak" && -n "$copy" ]]; then
                awk -v peak="$peak" -v copy="$copy" -v label="$label" 'BEGIN {
                    printf "  peak busbw %s: %.1f GB/s = %.2f x GPU 0 device-to-device copy (%.1f GB/s)\n",
                        label, peak, peak / copy, copy }'
            fi
        done
    fi
    grep -ho 'SKIP (allowed): .*' "$log_dir"/*.log 2>/dev/null | sed 's/^SKIP (allowed): /allowed skip: /' | sort -u | head -n 10
    echo "logs: $log_dir${OUT:+ (packed: $OUT/gpu-check-logs.tar.gz)}"
    if ((${#failed[@]} > 0)); then
        echo "gpu-check: FAILED: ${#failed[@]} of ${#step_names[@]} steps (${failed[*]})"
    elif [[ -n "$interrupted" ]]; then
        echo "gpu-check: INTERRUPTED by $interrupted"
    elif [[ $mode == dry-run ]]; then
        echo "gpu-check: dry run complete: the flow ran, the hardware steps were skipped"
    else
        echo "gpu-check: all ${#step_names[@]} steps passed"
    fi
    ((${#failed[@]} == 0))
}

# peak_busbw LOG [GROUP]: the largest value in a `busbw` column of a perf table (GROUP 1, the
# default: the out-of-place group; 2: the in-place group), the column found by the header line.
peak_busbw() {
    awk -v group="${2:-1}" '
        !column && /size/ && /busbw/ {
            offset = ($1 == "#") ? 1 : 0
            seen = 0
            for (i = 1; i <= NF; i++) if ($i == "busbw" && ++seen == group) column = i - offset
            next
        }
        column && /^ +[0-9]+ / && $column + 0 > peak { peak = $column + 0 }
        END { if (peak > 0) print peak }
    ' "$1"
}

# Pack every log (large ones cut to their head and tail) into one file under $OUT.
pack_logs() {
    [[ -n "${OUT:-}" && -d "${OUT:-}" ]] || return 0
    local log
    for log in "$log_dir"/*.log; do
        [[ -f "$log" ]] || continue
        if (($(wc -c <"$log") > 4 * 1024 * 1024)); then
            { head -c 1048576 "$log"; printf '\n[... cut by gpu-check ...]\n'; tail -c 2097152 "$log"; } >"$log.cut"
            mv "$log.cut" "$log"
        fi
    done
    if command -v tar >/dev/null; then
        tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$log_dir" --exclude=./lib . 2>/dev/null ||
            echo "gpu-check: could not pack the logs into $OUT" >&2
    else
        for log in "$log_dir"/*.log "$log_dir"/summary.txt; do
            [[ -f "$log" ]] && { echo "===== $(basename "$log")"; cat "$log"; }
        done >"$OUT/gpu-check-logs.txt"
    fi
}

# The EXIT trap: stop a step still running, print the summary, pack the logs, set the status.
on_exit() {
    local rc=$?
    ((finished)) && return
    finished=1
    if [[ -n "$current_pid" ]]; then
        stop_step
    fi
    if ((!completed)) && [[ -z "$interrupted" ]]; then
        # The script itself stopped early (an error in it, or a failed set-up).
        record gpu-check "FAILED (script exit $rc)" 0
    fi
    [[ -d "$log_dir" ]] || mkdir -p "$log_dir"
    echo
    if summary | tee "$log_dir/summary.txt"; then
        rc=0
    else
        rc=1
    fi
    [[ -n "$interrupted" ]] && rc=$([[ $interrupted == INT ]] && echo 130 || echo 143)
    if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
        cp "$log_dir/summary.txt" "$OUT/gpu-check-summary.txt" 2>/dev/null
    fi
    pack_logs
    exit "$rc"
}

# Stop the step that is running (TERM, then KILL after 5 s) and record it as interrupted.
stop_step() {
    local pid=$current_pid tries=0
    current_pid=""
    kill -TERM "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null && ((tries < 10)); do
        sleep 0.5
        tries=$((tries + 1))
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    record "$current_step" "INTERRUPTED (${interrupted:-exit})" "$((SECONDS - current_started))"
}

on_signal() {
    interrupted=$1
    exit 1 # runs on_exit
}

# Put the libraries the loader may not find on its path: libnvrtc.so.13 (the NVRTC test) from
# the CUDA toolkit first, a Python wheel's only where the toolkit has none; libnccl.so.2 (the
# NCCL baseline; cudarc looks for the unversioned libnccl.so, so that name is linked to it).
find_libraries() {
    local links=$log_dir/lib dirs="" name path
    mkdir -p "$links"
    for name in libnvrtc.so.13 libnccl.so.2; do
        path=$(find_library "$name")
        if [[ -z "$path" ]]; then
            echo "  $name: not found"
            continue
        fi
        echo "  $name: $path"
        # The real folder goes on the path (NVRTC finds libnvrtc-builtins beside itself).
        dirs=${dirs:+$dirs:}$(dirname "$path")
        [[ "$name" == libnccl.so.2 ]] && ln -sf "$path" "$links/libnccl.so"
    done
    export LD_LIBRARY_PATH=$links${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# find_library NAME: the toolkit's copy (beside nvcc, or under /usr/local/cuda*), else a Python
# wheel's (PyTorch's site-packages).
find_library() {
    local name=$1 dir nvcc
    local toolkit=()
    if nvcc=$(command -v nvcc 2>/dev/null); then
        nvcc=$(readlink -f "$nvcc")
        toolkit+=("${nvcc%/bin/nvcc}/lib64" "${nvcc%/bin/nvcc}/targets/x86_64-linux/lib")
    fi
    toolkit+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib)
    for dir in "${toolkit[@]}"; do
        if [[ -e "$dir/$name" ]]; then
            readlink -f "$dir/$name"
            return
        fi
    done
    command -v python3 >/dev/null || return 0
    python3 - "$name" <<'PY' 2>/dev/null
import glob, os, site, sys
name = sys.argv[1]
roots = set(site.getsitepackages() + [site.getusersitepackages()])
roots.update(p for p in sys.path if os.path.isdir(p))
for root in sorted(roots):
    hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", name), recursive=True))
    if hits:
        print(os.path.realpath(hits[0]))
        break
PY
}

check() {
    mode=$1
    trap on_exit EXIT
    trap 'on_signal INT' INT
    trap 'on_signal TERM' TERM
    rm -rf "$log_dir"
    mkdir -p "$log_dir"
    local name path
    if [[ $mode == hardware ]]; then
        [[ -x "$bundle/bin/hardware" ]] || {
            echo "gpu-check run: no bundle at $bundle; run 'gpu-check.sh build' on a Rust machine first" >&2
            exit 2
        }
        for name in unit hardware conformance faults ruccl-perf; do
            binary[$name]=$bundle/bin/$name
        done
        export RUCCL_CUDA_REQUIRE_HARDWARE=1 RUCCL_CUDA_REQUIRE_GPU=1
    else
        echo "=== locating this checkout's debug test binaries (cargo test --no-run)"
        local binaries
        binaries=$(test_binaries) || {
            echo "gpu-check dry-run: cargo could not build the tests" >&2
            exit 1
        }
        while read -r name path; do
            binary[$name]=$path
        done <<<"$binaries"
        binary[ruccl-perf]="ruccl-perf"
        unset RUCCL_CUDA_REQUIRE_HARDWARE RUCCL_CUDA_REQUIRE_GPU
    fi
    echo "=== ruccl-cuda gpu-check ($mode; deadline ${deadline}s; logs in $log_dir)"
    [[ $mode == hardware ]] && cat "$bundle/MANIFEST"
    echo "host:      $(uname -srm), $(ldd --version 2>/dev/null | head -n1)"
    local gpus=0
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
            sed 's/^/gpu:       /'
        gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
    else
        echo "gpu:       nvidia-smi not found"
    fi
    echo "libraries (toolkit first):"
    find_libraries
    local threads=(--test-threads=2 --nocapture)

    run_step probe 60 "${binary[hardware]}" --exact the_topology_report_names_gpus_contexts_and_peer_access \
        --nocapture --test-threads=1
    run_step unit 60 "${binary[unit]}" "${threads[@]}"
    local bandwidth=the_copy_bandwidth_baseline_is_measured_on_each_gpu
    hardware_step hardware 180 "${binary[hardware]}" --skip "$bandwidth" "${threads[@]}"
    hardware_step conformance 150 "${binary[conformance]}" "${threads[@]}"
    hardware_step faults 90 "${binary[faults]}" "${threads[@]}"
    # The baseline right before the sweeps, in the same run: each GPU's own device-to-device copy.
    hardware_step copy-bandwidth 30 "${binary[hardware]}" --exact "$bandwidth" --nocapture \
        --test-threads=1
    local sweep=(--backend cuda --require-gpu -b 1K -e 256M -f 4 -n 20 -w 5)
    hardware_step perf 90 "${binary[ruccl-perf]}" "${sweep[@]}"
    hardware_step perf-collectives 120 bash "$here/gpu-check.sh" sweeps "${binary[ruccl-perf]}"
    local source=$log_dir/ruccl_kernels.cu ptx=$log_dir/ruccl_kernels.nvcc.ptx
    if [[ $mode == dry-run ]] || command -v nvcc >/dev/null; then
        cat "$here/kernels/common.cuh" "$here/kernels/fold.cu" "$here/kernels/mean.cu" >"$source" 2>/dev/null ||
            cat "$bundle/kernels/common.cuh" "$bundle/kernels/fold.cu" "$bundle/kernels/mean.cu" >"$source"
        hardware_step nvcc-compile 60 nvcc -ptx -arch=compute_90 -o "$ptx" "$source"
        if [[ $mode == dry-run || -s "$ptx" ]]; then
            hardware_step nvcc-kernels 90 env RUCCL_CUDA_KERNELS="$ptx" "${binary[hardware]}" \
                every_collective_algorithm_type_and_operation "${threads[@]}"
        else
            record nvcc-kernels "skipped (nvcc produced no PTX)" 0
        fi
    else
        record nvcc-compile "skipped (nvcc not found)" 0
        record nvcc-kernels "skipped (nvcc not found)" 0
    fi
    local nccl=()
    ((gpus >= 2)) && nccl=(--nccl)
    hardware_step perf-all-types 90 "${binary[ruccl-perf]}" --backend cuda --require-gpu -d all -o all \
        -b 4 -e 4M -f 64 -n 3 -w 1 "${nccl[@]}"
    completed=1
    exit 0 # the EXIT trap prints the summary and sets the status
}

case "${1:-}" in
build) build ;;
run) check hardware ;;
dry-run) check dry-run ;;
sweeps) sweeps "${2:?usage: $0 sweeps PERF}" ;;
*)
    echo "usage: $0 build|run|dry-run|sweeps PERF" >&2
    exit 2
    ;;
esac
