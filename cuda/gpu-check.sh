#!/usr/bin/env bash
# gpu-check.sh — check ruccl-cuda on a real GPU in two halves, plus a rehearsal of the second:
#
#   gpu-check.sh build     on a machine with Rust (no GPU needed): the release test binaries and
#                          ruccl-perf (CUDA backend), stripped, into cuda/.gpu-bundle/
#   gpu-check.sh run       on the GPU machine (no Rust, no network): the bundle in hardware mode,
#                          within one budget; prints a summary; exit 0 all passed, 1 something
#                          failed, 3 nothing failed but something was NOT RUN (cut for time)
#   gpu-check.sh dry-run   here, without a GPU: the same flow on this checkout's debug test
#                          binaries (unit tests run; hardware steps only list their tests); exit 0
#   gpu-check.sh rehearse  here, without a GPU or bundle: `run` against fake binaries that pass,
#                          hang, crash, skip and print wrong results; shows each case's summary and
#                          $OUT files and checks each failure class was reported as such
#
# The budget (RUCCL_GPU_CHECK_BUDGET seconds, default 420) is divided up front, in priority
# order; time a step leaves unused passes to the next; nothing ever runs past the budget:
#   env            20  driver, the CUDA version it supports, the device (nvidia-smi); libraries;
#                      the probe: contexts, kernels (embedded PTX or the NVRTC fallback)
#   unit           15  the crate's own tests (PTX/ISA, step layouts, cache, probe, tables)
#   hardware      110  every collective x algorithm x type x operation exact at W = 1..8 on one
#                      GPU, bitwise against the simulated device, contexts, peer access, errors
#   conformance    60  the sim crate's conformance suite: shared context and a context per rank
#   faults         40  the fault decorator around the executor (every site; ring and direct)
#   copy-bandwidth 15  GPU 0's device-to-device copy: the bound the schedules are measured against
#   schedules      80  every collective's sweep at W = 8 with each algorithm (auto, ring, direct,
#                      halving-doubling): peak busbw per schedule as a multiple of the copy bound
#   nccl           30  NCCL through PyTorch at W = 1 beside ruccl-perf at W = 1 (NCCL refuses
#                      several ranks on one GPU, so W = 1 is the only comparison one GPU allows)
#   nvcc           30  the kernel source through nvcc, and the main exactness test on that PTX
#   (reserve       20  the summary and packing the logs)
# A step the budget leaves no time for is NOT RUN; a step stopped at its limit is CUT: what it
# finished counts, the rest is listed NOT RUN — neither is FAILED. Failures are FAILED (a test
# failed, or any `SKIP:` in hardware mode), HUNG (a test's watchdog fired: `TIMEOUT:`), CRASHED
# (killed by a signal) and WRONG RESULTS (a perf table's #wrong is not 0).
#
# Hardware mode sets RUCCL_CUDA_REQUIRE_HARDWARE=1 and runs the GPU tests, which plain
# `cargo test` ignores, with --include-ignored. The summary is printed last, always (also on
# INT/TERM); its first lines name the driver, the CUDA version it supports and the device. With
# $OUT set it is also $OUT/gpu-check-summary.txt, and every log is packed into
# $OUT/gpu-check-logs.tar.gz. Logs: RUCCL_GPU_LOG (default $TMPDIR/ruccl-gpu-check).
#
# Knobs: RUCCL_CUDA_LOGICAL_RANKS (default 8), RUCCL_CUDA_CONFORMANCE=quick,
# RUCCL_CUDA_CONTEXTS=separate (a context per rank instead of one shared context per GPU),
# RUCCL_CUDA_KERNELS, RUCCL_GPU_CHECK_VERBOSE=1 (echo every log).
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
        echo "cudarc:    0.19, cuda-12000 bindings (any CUDA 12.x or 13.x driver), dynamic loading; ruccl-perf built with feature nccl"
    } >"$bundle/MANIFEST"
    echo "gpu-check build: bundle ready in $bundle ($(du -sh "$bundle" | cut -f1))"
    cat "$bundle/MANIFEST"
}

# --- the check (run and dry-run) ---------------------------------------------------------------

mode=""                                    # hardware | dry-run
budget=${RUCCL_GPU_CHECK_BUDGET:-420}      # seconds for the whole check
# Every step's share of a 420 s budget, in priority order (scaled when the budget differs).
plan=(env:20 unit:15 hardware:110 conformance:60 faults:40 copy-bandwidth:15 schedules:80 nccl:30
    nvcc:30)
reserve_share=20
log_dir=${RUCCL_GPU_LOG:-${TMPDIR:-/tmp}/ruccl-gpu-check}
declare -a step_names=() step_statuses=() step_seconds=() step_limits=()
declare -A binary=() share=() not_run=()
current_pid="" current_step="" current_started=0 current_limit=0 interrupted="" finished=0
completed=0 bank=0
check_started=$SECONDS

# scaled SHARE: SHARE seconds of a 420 s budget, scaled to this budget.
scaled() { echo $(($1 * budget / 420)); }

# record NAME STATUS SECONDS [LIMIT]
record() {
    step_names+=("$1")
    step_statuses+=("$2")
    step_seconds+=("$3")
    step_limits+=("${4:--}")
}

# Whether a status fails the run. CUT and NOT RUN never do (they make it incomplete); `skipped`
# only in hardware mode.
is_failure() {
    case "$1" in
    ok* | n/a* | CUT* | "NOT RUN"*) return 1 ;;
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

# results LOG: `passed failed` counted from libtest's per-test lines (`test NAME ... ok`), which
# are there also when a step was cut before libtest's own `test result:` line.
results() {
    [[ -f "$1" ]] || {
        echo "- -"
        return
    }
    local passed failed
    passed=$(grep -cE '^test .* \.\.\. ok$' "$1")
    failed=$(grep -cE '^test .* \.\.\. FAILED$' "$1")
    if ((passed + failed == 0)) && ! grep -qE '^test result:' "$1"; then
        echo "- -"
    else
        echo "$passed $failed"
    fi
}

# wrong LOG: the sum of the #wrong columns of every perf table in the log.
wrong() {
    [[ -f "$1" ]] || {
        echo 0
        return
    }
    awk '
        /size/ && /busbw/ && /#wrong/ {
            offset = ($1 == "#") ? 1 : 0
            n = 0
            for (i = 1; i <= NF; i++) if ($i == "#wrong") columns[++n] = i - offset
            next
        }
        n && /^ +[0-9]+ / { for (j = 1; j <= n; j++) total += $(columns[j]) }
        END { print total + 0 }
    ' "$1"
}

# first_failure LOG STATUS: the watchdog line, the first panic (with its message), an error line,
# or the last output, on one line, at most 400 characters.
first_failure() {
    local log=$1 status=$2 text=""
    [[ -f "$log" ]] || return 0
    text=$(grep -m1 -o 'TIMEOUT: .*' "$log")
    [[ -n "$text" ]] || text=$(grep -m1 -o 'WRONG: .*' "$log")
    [[ -n "$text" ]] || text=$(grep -m1 -A3 -F 'panicked at' "$log" |
        grep -vE '^(note: |test |stack backtrace:|--$|$| +[0-9]+: | +at )')
    [[ -n "$text" ]] || [[ "$status" != FAILED*skipped* ]] || text=$(grep -m1 -o 'SKIP: .*' "$log")
    [[ -n "$text" ]] || text=$(grep -m1 -iE 'error|failed|cannot|refused|not found' "$log")
    [[ -n "$text" ]] || text="last output: $(tail -n +3 "$log" | tail -n 3)"
    text=$(printf '%s' "$text" | tr '\n' ' ' | tr -s ' ')
    printf '%.400s' "$text"
}

# listed LOG: the tests a libtest binary listed for the step (`NAME: test` lines of --list).
listed() { sed -n 's/^\(.*\): test$/\1/p' "$1" 2>/dev/null; }

# run_step NAME KIND COMMAND...: run COMMAND (KIND `tests`: a libtest binary, whose tests are
# listed first so that what a cut leaves undone can be named; `tool`: anything else), output in
# $log_dir/NAME.log, under its share of the budget plus what earlier steps left unused, never
# past the budget. Records the status (see is_failure).
run_step() {
    local name=$1 kind=$2
    shift 2
    local elapsed=$((SECONDS - check_started))
    local left=$((budget - elapsed - $(scaled "$reserve_share")))
    local limit=$(($(scaled "${share[$name]}") + bank))
    ((limit > left)) && limit=$left
    local least=$(($(scaled 10) > 2 ? $(scaled 10) : 2))
    if ((limit < least)); then
        printf '=== [%3ss] %s: NOT RUN: the budget leaves %ss\n' "$elapsed" "$name" "$left"
        record "$name" "NOT RUN (budget)" 0 "$limit"
        return
    fi
    local log=$log_dir/$name.log list=$log_dir/$name.list
    printf '=== [%3ss] %s (limit %ss): %s\n' "$elapsed" "$name" "$limit" "$*"
    printf '$ %s\n(limit %ss)\n' "$*" "$limit" >"$log"
    current_step=$name current_started=$SECONDS current_limit=$limit
    if [[ $kind == tests ]]; then
        timeout --kill-after=2 10 "$@" --list >"$list" 2>&1
    fi
    # The tests' own watchdog fires first and names the test that hangs; TERM at the limit less
    # the grace, KILL at the limit.
    local grace=$((limit / 4 < 5 ? limit / 4 : 5))
    local run_for=$((limit - grace - (SECONDS - current_started)))
    ((run_for < 1)) && run_for=1
    RUCCL_CUDA_TEST_TIMEOUT=$((limit * 3 / 4 > 1 ? limit * 3 / 4 : 1)) \
        timeout --kill-after="$((grace > 0 ? grace : 1))" "$run_for" "$@" >>"$log" 2>&1 &
    current_pid=$!
    wait "$current_pid"
    local rc=$? took=$((SECONDS - current_started))
    current_pid=""
    bank=$((limit - took > 0 ? limit - took : 0))
    [[ "${RUCCL_GPU_CHECK_VERBOSE:-0}" == 1 ]] && cat "$log"
    local status skips bad signal
    skips=$(count 'SKIP: ' "$log")
    bad=$(wrong "$log")
    if grep -q 'TIMEOUT: ' "$log"; then
        status="HUNG (watchdog)"
    elif ((rc == 124 || rc == 137)); then
        status="CUT at its ${limit}s limit"
    elif ((rc > 128)); then
        signal=$(kill -l "$((rc - 128))" 2>/dev/null || echo "$((rc - 128))")
        status="CRASHED (signal $signal)"
    elif ((rc != 0)); then
        status="FAILED (exit $rc)"
    elif ((bad > 0)); then
        status="WRONG RESULTS ($bad wrong)"
    elif [[ $mode == hardware && $skips -gt 0 ]]; then
        status="FAILED ($skips skipped)"
    elif grep -q '^N/A: ' "$log"; then
        status="n/a ($(grep -m1 -o '^N/A: .*' "$log" | cut -c6-))"
    else
        status=ok
    fi
    if [[ $kind == tests && -s "$list" ]]; then
        local test missing=()
        local hung
        hung=$(grep -m1 -o 'TIMEOUT: [^ ]*' "$log" | cut -c10-)
        while read -r test; do
            [[ -n "$hung" && $test == "$hung"* ]] && continue # reported as HUNG, not as not run
            grep -qxF -e "test $test ... ok" -e "test $test ... FAILED" "$log" || missing+=("$test")
        done < <(listed "$list")
        if ((${#missing[@]} > 0)) && [[ $status == ok* || $status == n/a* ]]; then
            status="FAILED (${#missing[@]} tests gave no result)"
        fi
        not_run[$name]=${missing[*]}
    fi
    if [[ $kind == tool ]] && grep -q '^PLANNED: ' "$log"; then
        local item left_out=()
        for item in $(grep -m1 '^PLANNED: ' "$log" | cut -c10-); do
            grep -qE "^SCHEDULE: $item( |:)" "$log" || left_out+=("$item")
        done
        not_run[$name]=${left_out[*]}
    fi
    record "$name" "$status" "$took" "$limit"
    printf '    %s in %ss\n' "$status" "$took"
}

# hardware_step NAME KIND COMMAND...: run_step on the GPU machine; in a dry run only listed.
hardware_step() {
    if [[ $mode == dry-run ]]; then
        local what=""
        if [[ $2 == tests ]]; then
            what=", $(timeout 10 "${@:3}" --list 2>/dev/null | grep -c ': test$') tests listed"
        fi
        printf '=== %s: skipped (dry run%s): %s\n' "$1" "$what" "${*:3}"
        record "$1" "skipped (dry run$what)" 0
        return
    fi
    run_step "$@"
}

# grab PATTERN LOG...: every match of `PATTERN.*` in the logs, without the marker.
grab() {
    local pattern=$1
    shift
    cat "$@" 2>/dev/null | grep -o "$pattern.*" | sed "s/^$pattern//"
}

# The summary: printed last, always (from the EXIT trap), and written to $OUT when it is set.
summary() {
    local failed=() cut=() i name status log passed failures skips allowed
    echo "=== gpu-check summary: $mode, $((SECONDS - check_started)) s of a ${budget} s budget${interrupted:+, INTERRUPTED by $interrupted}"
    local driver cuda devices
    driver=$(grab 'FACT driver: ' "$log_dir/env.log" | head -n1)
    cuda=$(grab 'FACT cuda: ' "$log_dir/env.log" | head -n1)
    echo "driver: ${driver:-unknown}; supports CUDA ${cuda:-unknown} (bindings: CUDA 12.0 API, any 12.x or 13.x driver)"
    devices=$(grab 'FACT gpu: ' "$log_dir/env.log")
    if [[ -n "$devices" ]]; then
        printf '%s\n' "$devices" | sed 's/^/device: /'
    else
        echo "device: unknown (the env step did not report one)"
    fi
    grab 'KERNELS: ' "$log_dir/env.log" | head -n1 | sed 's/^/kernels: /'
    grab 'CONTEXTS: ' "$log_dir/env.log" | head -n1 | sed 's/^/contexts: /'
    grab 'TOPOLOGY: ' "$log_dir/env.log" | sed 's/^/topology: /'
    if [[ -f "$bundle/MANIFEST" && $mode == hardware ]]; then
        sed -n 's/^\(commit\|built\): */bundle \1: /p' "$bundle/MANIFEST"
    fi
    grab 'COLLECTIVES: ' "$log_dir/hardware.log" | head -n1 | sed 's/^/collectives run: /'
    local shares="" entry
    for entry in "${plan[@]}"; do shares+="${entry%%:*} $(scaled "${entry#*:}"), "; done
    echo "plan (s): ${shares}reserve $(scaled "$reserve_share")"
    printf '%-15s %-36s %5s %5s %6s %6s %7s %5s %7s\n' step status time limit passed failed "not run" skips allowed
    for i in "${!step_names[@]}"; do
        name=${step_names[$i]} status=${step_statuses[$i]}
        log=$log_dir/$name.log
        read -r passed failures <<<"$(results "$log")"
        local missing=${not_run[$name]:-}
        local count_missing=-
        [[ -n "${not_run[$name]+set}" ]] && count_missing=$(wc -w <<<"$missing" | tr -d ' ')
        skips=- allowed=-
        if [[ -f "$log" ]]; then
            skips=$(count 'SKIP: ' "$log")
            allowed=$(count 'SKIP (allowed): ' "$log")
        fi
        printf '%-15s %-36s %4ss %4ss %6s %6s %7s %5s %7s\n' "$name" "$status" "${step_seconds[$i]}" \
            "${step_limits[$i]}" "$passed" "$failures" "$count_missing" "$skips" "$allowed"
        if is_failure "$status"; then
            failed+=("$name")
            [[ "$status" == skipped* ]] || echo "    first failure: $(first_failure "$log" "$status")"
        elif [[ "$status" == CUT* || "$status" == "NOT RUN"* ]]; then
            cut+=("$name")
        fi
        if [[ -n "$missing" ]]; then
            local why="cut for time, not failed"
            [[ "$status" == CUT* || "$status" == "NOT RUN"* ]] || why="the step ended early"
            [[ "$status" == CRASHED* ]] && why="the crash was in the first of these; the rest never ran"
            echo "    NOT RUN ($why): $(printf '%.300s' "$missing")"
        fi
    done
    local copy
    grab 'BANDWIDTH: ' "$log_dir/copy-bandwidth.log" | sed 's/^/copy bandwidth: /'
    copy=$(grab 'BANDWIDTH: GPU 0: ' "$log_dir/copy-bandwidth.log" | head -n1 |
        sed -nE 's/.* ([0-9.]+) GB\/s$/\1/p')
    # One line per collective: each algorithm's peak busbw, and its multiple of the copy bound.
    grab 'SCHEDULE: ' "$log_dir/schedules.log" | awk -v copy="$copy" '{
        line = "schedule:"
        for (i = 1; i <= NF; i++) {
            split($i, pair, "=")
            if (pair[2] != "" && pair[2] + 0 == pair[2] && copy > 0 && $i !~ /^W=/)
                line = line sprintf(" %s=%s (%.2fx)", pair[1], pair[2], pair[2] / copy)
            else line = line " " $i
        }
        print line
    }'
    [[ -n "$copy" ]] && echo "schedule: (x: busbw as a multiple of GPU 0's device-to-device copy, ${copy} GB/s)"
    grab 'NCCL: ' "$log_dir/nccl.log" | sed 's/^/nccl: /'
    grab 'SKIP (allowed): ' "$log_dir"/*.log | sort -u | head -n 10 | sed 's/^/allowed skip: /'
    echo "logs: $log_dir${OUT:+ (packed: $OUT/gpu-check-logs.tar.gz)}"
    if ((${#failed[@]} > 0)); then
        echo "gpu-check: FAILED: ${#failed[@]} of ${#step_names[@]} steps (${failed[*]})${cut[*]:+; NOT RUN in full: ${cut[*]}}"
        return 1
    elif [[ -n "$interrupted" ]]; then
        echo "gpu-check: INTERRUPTED by $interrupted"
        return 1
    elif ((${#cut[@]} > 0)); then
        echo "gpu-check: INCOMPLETE: nothing failed; NOT RUN in full (cut for time): ${cut[*]}"
        return 3
    elif [[ $mode == dry-run ]]; then
        echo "gpu-check: dry run complete: the flow ran, the hardware steps were only listed"
    else
        echo "gpu-check: all ${#step_names[@]} steps passed"
    fi
    return 0
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
    tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$log_dir" --exclude=./lib . 2>/dev/null ||
        echo "gpu-check: could not pack the logs into $OUT" >&2
}

# The EXIT trap: stop a step still running, print the summary, pack the logs, set the status.
on_exit() {
    local rc=$?
    ((finished)) && return
    finished=1
    [[ -n "$current_pid" ]] && stop_step
    if ((!completed)) && [[ -z "$interrupted" ]]; then
        record gpu-check "FAILED (script exit $rc)" 0 # the script itself stopped early
    fi
    [[ -d "$log_dir" ]] || mkdir -p "$log_dir"
    echo
    summary | tee "$log_dir/summary.txt"
    rc=${PIPESTATUS[0]}
    [[ -n "$interrupted" ]] && rc=$([[ $interrupted == INT ]] && echo 130 || echo 143)
    if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
        cp "$log_dir/summary.txt" "$OUT/gpu-check-summary.txt" 2>/dev/null
    fi
    pack_logs
    exit "$rc"
}

# Stop the step that is running (TERM, then KILL after 3 s) and record it as interrupted.
stop_step() {
    local pid=$current_pid tries=0
    current_pid=""
    kill -TERM "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null && ((tries < 6)); do
        sleep 0.5
        tries=$((tries + 1))
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    record "$current_step" "INTERRUPTED (${interrupted:-exit})" "$((SECONDS - current_started))" "$current_limit"
}

on_signal() {
    interrupted=$1
    exit 1 # runs on_exit
}

# Put the libraries the loader may not find on its path: NVRTC (only the fallback for PTX the
# driver refuses: libnvrtc.so.12, else .so.13; the CUDA toolkit's first, a Python wheel's only
# where the toolkit has none) and libnccl.so.2 (NCCL, for the nccl step). cudarc's first name
# for each is the unversioned one (libnvrtc.so, libnccl.so), so that name is linked to the find.
# Prints `  NAME: PATH` or `  NAME: not found` per library.
find_libraries() {
    local links=$log_dir/lib dirs="" name path
    mkdir -p "$links"
    for name in libnvrtc.so.12 libnvrtc.so.13 libnccl.so.2; do
        [[ $name == libnvrtc.so.13 && -e "$links/libnvrtc.so" ]] && continue
        path=$(find_library "$name")
        if [[ -z "$path" ]]; then
            echo "  $name: not found"
            continue
        fi
        echo "  $name: $path"
        # The real folder goes on the path (NVRTC finds libnvrtc-builtins beside itself).
        dirs=${dirs:+$dirs:}$(dirname "$path")
        ln -sf "$path" "$links/${name%.so.*}.so"
    done
    export LD_LIBRARY_PATH=$links${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# find_library NAME: the toolkit's copy (beside nvcc, or under /usr/local/cuda*), else a Python
# wheel's (PyTorch's site-packages).
find_library() {
    local name=$1 dir nvcc
    local toolkit=(${RUCCL_GPU_LIBRARY_DIR:+"$RUCCL_GPU_LIBRARY_DIR"})
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
    timeout 20 python3 - "$name" <<'PY' 2>/dev/null
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

# facts HARDWARE: the env step — the driver, the CUDA version it supports and the device
# (nvidia-smi; `FACT` lines the summary starts with), then the probe test (topology, kernels,
# context policy).
facts() {
    local hardware=$1 smi
    if command -v nvidia-smi >/dev/null; then
        timeout 15 nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id --format=csv,noheader |
            sed 's/^/FACT gpu: /'
        timeout 15 nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1 |
            sed 's/^/FACT driver: /'
        smi=$(timeout 15 nvidia-smi 2>&1)
        grep -o 'CUDA Version: *[0-9.]*' <<<"$smi" | head -n1 | sed 's/CUDA Version: */FACT cuda: /'
    else
        echo "FACT gpu: nvidia-smi not found"
    fi
    echo "FACT host: $(uname -srm), $(ldd --version 2>/dev/null | head -n1)"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    "$hardware" --exact the_topology_report_names_gpus_contexts_and_peer_access --include-ignored \
        --nocapture --test-threads=1
}

# The sweep of every collective (nccl-tests' names), and the world the schedules step runs at.
collective_sweeps=(all-reduce-perf reduce-scatter-perf all-gather-perf broadcast-perf
    reduce-perf gather-perf scatter-perf alltoall-perf)
schedule_world=8

# schedules PERF: every collective's sweep at W = schedule_world with every algorithm (-A all:
# auto, ring, direct, halving-doubling), 1 MiB .. 256 MiB, checked; one line per schedule,
# `SCHEDULE: NAME W=8 ALGORITHM: peak busbw B GB/s` (the summary adds the multiple of the copy
# bound), `WRONG: ...` for a table with wrong values. Fails if a sweep fails or is missing.
schedules() {
    local perf=$1 name rc failed=0 commands output
    commands=$("$perf" help 2>&1)
    echo "PLANNED: ${collective_sweeps[*]}"
    for name in "${collective_sweeps[@]}"; do
        if ! grep -qE "^ +$name( |$)" <<<"$commands"; then
            echo "SCHEDULE: $name: not in this ruccl-perf"
            failed=1
            continue
        fi
        output=$("$perf" "$name" --backend cuda --require-gpu -g "$schedule_world" -A all \
            -b 1M -e 256M -f 16 -n 5 -w 1 2>&1)
        rc=$?
        printf '%s\n' "$output"
        awk -v name="$name" -v world="$schedule_world" '
            /size/ && /busbw/ {
                offset = ($1 == "#") ? 1 : 0
                nb = nw = 0
                for (i = 1; i <= NF; i++) {
                    if ($i == "busbw") busbw[++nb] = i - offset
                    if ($i == "#wrong") wrongs[++nw] = i - offset
                }
                asked = ($NF == "asked")
                next
            }
            nb && /^ +[0-9]+ / {
                algorithm = asked ? $NF : "auto"
                if (!(algorithm in peak)) order[++n] = algorithm
                for (j = 1; j <= nb; j++) if ($(busbw[j]) + 0 > peak[algorithm]) peak[algorithm] = $(busbw[j]) + 0
                for (j = 1; j <= nw; j++) if ($(wrongs[j]) + 0 > 0) bad[algorithm] += $(wrongs[j])
            }
            END {
                line = ""
                for (k = 1; k <= n; k++) {
                    a = order[k]
                    line = line sprintf(" %s=%.2f", a, peak[a])
                    if (bad[a] > 0) printf "WRONG: %s W=%d %s: %d wrong values\n", name, world, a, bad[a]
                }
                if (n) printf "SCHEDULE: %s W=%d peak busbw GB/s:%s\n", name, world, line
            }' <<<"$output"
        if ((rc != 0)); then
            echo "SCHEDULE: $name W=$schedule_world: FAILED (exit $rc)"
            failed=1
        fi
    done
    return "$failed"
}

# nccl PERF: NCCL at W = 1 (PyTorch's, through torch.distributed on one process: NCCL refuses
# several ranks on one GPU) beside ruccl-perf's all-reduce at W = 1, same sizes. `N/A:` when
# there is no PyTorch with CUDA.
nccl() {
    local perf=$1 python=${RUCCL_GPU_PYTHON:-python3}
    if ! "$python" -c 'import torch, torch.distributed; assert torch.cuda.is_available()' 2>/dev/null; then
        echo "N/A: no python3 with a CUDA PyTorch to drive NCCL"
        return 0
    fi
    echo "NCCL: W=1 only: NCCL refuses several ranks on one GPU"
    "$python" "$here/scripts/nccl_w1.py" || return
    local output
    output=$("$perf" all-reduce-perf --backend cuda --require-gpu -g 1 -b 1M -e 256M -f 16 -n 20 -w 5 2>&1)
    local rc=$?
    printf '%s\n' "$output"
    awk '
        /size/ && /algbw/ { offset = ($1 == "#") ? 1 : 0; for (i = 1; i <= NF; i++) if ($i == "algbw" && !c) c = i - offset; next }
        c && /^ +[0-9]+ / { printf "NCCL: ruccl W=1 all-reduce float sum %d B: algbw %.2f GB/s\n", $1, $(c) }
    ' <<<"$output"
    return "$rc"
}

# nvcc HARDWARE: the kernel source through nvcc (compute_90), then the main exactness test on it.
nvcc_step() {
    local hardware=$1 source=$log_dir/ruccl_kernels.cu ptx=$log_dir/ruccl_kernels.nvcc.ptx
    cat "$here/kernels/common.cuh" "$here/kernels/fold.cu" "$here/kernels/mean.cu" >"$source" || return
    nvcc -ptx -arch=compute_90 -o "$ptx" "$source" || return
    RUCCL_CUDA_KERNELS=$ptx "$hardware" every_collective_algorithm_type_and_operation \
        --include-ignored --test-threads=1
}

check() {
    mode=$1
    trap on_exit EXIT
    trap 'on_signal INT' INT
    trap 'on_signal TERM' TERM
    rm -rf "$log_dir"
    mkdir -p "$log_dir"
    local entry name path
    for entry in "${plan[@]}"; do share[${entry%%:*}]=${entry#*:}; done
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
    export RUCCL_GPU_LOG=$log_dir
    echo "=== ruccl-cuda gpu-check ($mode; budget ${budget}s; logs in $log_dir)"
    [[ $mode == hardware ]] && cat "$bundle/MANIFEST"
    echo "libraries (toolkit first):"
    find_libraries | tee "$log_dir/libraries.txt"
    local tests=(--include-ignored --test-threads=2 --show-output)
    local bandwidth=the_copy_bandwidth_baseline_is_measured_on_each_gpu
    local topology=the_topology_report_names_gpus_contexts_and_peer_access
    run_step env tool bash "$here/gpu-check.sh" facts "${binary[hardware]}"
    run_step unit tests "${binary[unit]}" "${tests[@]}"
    hardware_step hardware tests "${binary[hardware]}" --skip "$bandwidth" --skip "$topology" "${tests[@]}"
    hardware_step conformance tests "${binary[conformance]}" --include-ignored --test-threads=1 --show-output
    hardware_step faults tests "${binary[faults]}" --include-ignored --test-threads=1 --show-output
    hardware_step copy-bandwidth tests "${binary[hardware]}" --exact "$bandwidth" --include-ignored \
        --show-output --test-threads=1
    hardware_step schedules tool bash "$here/gpu-check.sh" schedules "${binary[ruccl-perf]}"
    if [[ $mode == dry-run ]] || grep -q 'libnccl.so.2: /' "$log_dir/libraries.txt"; then
        hardware_step nccl tool bash "$here/gpu-check.sh" nccl "${binary[ruccl-perf]}"
    else
        record nccl "n/a (no NCCL library found)" 0
    fi
    if [[ $mode == dry-run ]] || command -v nvcc >/dev/null; then
        hardware_step nvcc tool bash "$here/gpu-check.sh" nvcc "${binary[hardware]}"
    else
        record nvcc "n/a (nvcc not found)" 0
    fi
    completed=1
    exit 0 # the EXIT trap prints the summary and sets the status
}

# rehearse: `run` against fake binaries (scripts/rehearsal-fake.sh), one case each, with a
# budget of 60 s per case; shows each case's summary and $OUT files, and checks that each
# failure class was reported as such. Needs neither a GPU nor a bundle.
rehearse() {
    local dir started=$SECONDS name
    dir=$(mktemp -d "${TMPDIR:-/tmp}/ruccl-rehearsal.XXXXXX")
    mkdir -p "$dir/bundle/bin" "$dir/fakebin" "$dir/lib"
    for name in unit hardware conformance faults ruccl-perf; do
        cp "$here/scripts/rehearsal-fake.sh" "$dir/bundle/bin/$name"
    done
    echo "commit:    rehearsal (fake binaries)" >"$dir/bundle/MANIFEST"
    : >"$dir/lib/libnccl.so.2"
    cat >"$dir/fakebin/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
case "$*" in
*index,name*) echo "0, NVIDIA H200, 143771 MiB, 00000000:19:00.0" ;;
*driver_version*) echo "570.133.20" ;;
*) echo "| NVIDIA-SMI 570.133.20   Driver Version: 570.133.20   CUDA Version: 12.8 |" ;;
esac
SMI
    cat >"$dir/fakebin/python" <<'PY'
#!/usr/bin/env bash
[[ $1 == -c ]] && exit 0
echo "NCCL: version 2.26.2 (PyTorch 2.7.0, rehearsal fake)"
echo "NCCL: nccl W=1 all-reduce float sum 268435456 B: algbw 1700.00 GB/s"
PY
    chmod +x "$dir/fakebin/nvidia-smi" "$dir/fakebin/python"
    # case: expected exit status, then the patterns its summary must show.
    local -A expect=(
        [pass]="0|^gpu-check: all 9 steps passed"
        [hang]="1|^hardware +HUNG \(watchdog\)|^conformance +CUT at|first failure: TIMEOUT: every_collective|NOT RUN \(the step ended early\): all_reduce|NOT RUN \(cut for time, not failed\): the_cuda_executor"
        [crash]="1|^faults +CRASHED \(signal SEGV\)|^unit +FAILED \(1 skipped\)|first failure: SKIP: probe"
        [wrong]="1|^schedules +WRONG RESULTS \(3 wrong\)|^nccl +ok|^conformance +FAILED \(exit 1\)|first failure: .*expected 1.5, got 2"
        [slow]="3|^gpu-check: INCOMPLETE: nothing failed|^unit +CUT at|^hardware +CUT at|NOT RUN \(cut for time, not failed\)"
    )
    local case rc pattern ok=0 total=0 took out
    for case in pass hang crash wrong slow; do
        out=$dir/out-$case
        mkdir -p "$out"
        echo
        echo "################ rehearsal case: $case"
        local began=$SECONDS
        RUCCL_REHEARSE_CASE=$case OUT=$out RUCCL_GPU_BUNDLE=$dir/bundle RUCCL_GPU_LOG=$dir/log-$case \
            RUCCL_GPU_CHECK_BUDGET=60 RUCCL_GPU_PYTHON=$dir/fakebin/python \
            RUCCL_GPU_LIBRARY_DIR=$dir/lib PATH=$dir/fakebin:$PATH \
            bash "$here/gpu-check.sh" run >"$dir/console-$case.txt" 2>&1
        rc=$? took=$((SECONDS - began))
        echo "--- \$OUT/gpu-check-summary.txt (exit $rc, ${took} s):"
        cat "$out/gpu-check-summary.txt"
        echo "--- \$OUT files:"
        (cd "$out" && ls -l | tail -n +2)
        echo "--- in gpu-check-logs.tar.gz: $(tar -tzf "$out/gpu-check-logs.tar.gz" | grep -v '/$' | sort | tr '\n' ' ')"
        local verdict="as expected" want=${expect[$case]}
        [[ $rc == "${want%%|*}" ]] || verdict="MISMATCH: exit $rc, expected ${want%%|*}"
        IFS='|' read -r -a patterns <<<"${want#*|}"
        for pattern in "${patterns[@]}"; do
            grep -qE "$pattern" "$out/gpu-check-summary.txt" || verdict="MISMATCH: no line matches /$pattern/"
        done
        ((took <= 60 + 5)) || verdict="MISMATCH: took ${took} s of a 60 s budget"
        total=$((total + 1))
        [[ $verdict == "as expected" ]] && ok=$((ok + 1))
        echo "REHEARSAL: $case: $verdict (exit $rc, ${took} s)"
    done
    echo
    echo "rehearsal: $ok of $total cases reported as expected, in $((SECONDS - started)) s (files in $dir)"
    ((ok == total))
}

case "${1:-}" in
build) build ;;
run) check hardware ;;
dry-run) check dry-run ;;
rehearse) rehearse ;;
facts) facts "${2:?usage: $0 facts HARDWARE}" ;;
schedules) schedules "${2:?usage: $0 schedules PERF}" ;;
nccl) nccl "${2:?usage: $0 nccl PERF}" ;;
nvcc) nvcc_step "${2:?usage: $0 nvcc HARDWARE}" ;;
*)
    echo "usage: $0 build|run|dry-run|rehearse" >&2
    exit 2
    ;;
esac
