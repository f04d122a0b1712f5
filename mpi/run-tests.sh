#!/usr/bin/env bash
# ruccl-mpi's tests: fmt and clippy (also of the library alone, without the `sim` feature,
# checking that neither ruccl-sim nor ruccl-perf is among the normal dependencies), the unit
# tests, the multi-process scenarios under `mpirun -np 2` and `-np 3` — the inter-process
# engine's (every scenario on a non-blocking and on a blocking communicator) and the
# hierarchical communicator's (uneven local rank counts: 2 + 1, 1 + 2 + 1) — and communicators
# sharing one engine concurrently (every result checked, never a wrong `Ok`), the process-death
# checks (plain `mpirun` ends the job; under `--enable-recovery` every survivor gets one error
# within its timeout + 1 s, on both engines; and the same of both perf tools, a process killed
# between two generations and during the tools' own bookkeeping), smoke runs and the guards of
# both perf tools, and the meeting's loom and shuttle models with their planted slips
# (run-models.sh). Needs Open MPI and libclang (mpi/README.md, "Install"). Exits non-zero on any failure; every mpirun runs under `timeout`,
# and every wait inside the tests has a deadline, so nothing hangs.
#
#   mpi/run-tests.sh                        everything
#   RUCCL_MPI_TEST_TIMEOUT=600 mpi/run-tests.sh   a longer bound per mpirun (default 300 s)
set -euo pipefail
cd "$(dirname "$0")"

limit=${RUCCL_MPI_TEST_TIMEOUT:-300}
# --oversubscribe: more processes than cores (CI machines have 2). Root needs its own flag.
mpirun_flags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then
  mpirun_flags+=(--allow-run-as-root)
fi
started=$SECONDS
step() { printf '\n=== [mpi %4ss] %s\n' "$((SECONDS - started))" "$*"; }
mpirun_bounded() { timeout -k 10 "$limit" mpirun "${mpirun_flags[@]}" "$@"; }

step "cargo fmt --check, clippy (all targets, -D warnings)"
cargo fmt --check
cargo clippy --all-targets -- -D warnings

# The tests turn the `sim` feature on (a dev-dependency on this crate); the library and
# mpi-allreduce-perf build without it, the default.
step "without the sim feature: library lint-clean, neither ruccl-sim nor ruccl-perf a normal dependency"
cargo clippy -- -D warnings
if cargo tree -e normal | grep -E 'ruccl-(sim|perf)'; then
  echo "a harness crate is a normal dependency of ruccl-mpi" >&2
  exit 1
fi

step "docs"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features sim

step "unit tests, and the scenarios as one process (the ones that need a peer say so)"
cargo test

# The test binaries among the artifacts (the perf tools' binaries are built for the tests too).
artifacts=$(cargo test --tests --no-run --message-format=json 2>/dev/null)
test_binary() {
  grep "\"kind\":\[\"test\"\],\"crate_types\":\[\"bin\"\],\"name\":\"$1\"" <<<"$artifacts" |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1
}
engine=$(test_binary multiprocess)
hierarchical=$(test_binary hierarchical)
concurrent=$(test_binary concurrent)
nodes=$(test_binary nodes)
for exe in "$engine" "$hierarchical" "$concurrent" "$nodes"; do
  if [ -z "$exe" ] || [ ! -x "$exe" ]; then
    echo "cannot find the multi-process test binaries" >&2
    exit 1
  fi
done

for processes in 2 3; do
  step "inter-process engine scenarios under mpirun -np $processes"
  mpirun_bounded -np "$processes" "$engine"
  step "hierarchical scenarios under mpirun -np $processes"
  mpirun_bounded -np "$processes" "$hierarchical"
  step "2 and 3 communicators sharing one engine, concurrently, under mpirun -np $processes"
  mpirun_bounded -np "$processes" "$concurrent"
done

step "simulated nodes, each with its own device list (mpirun's MPMD form): 2 + 3 devices on 1 + 1 processes, 4 + 1 on 2 + 1"
mpirun_bounded -np 1 -x RUCCL_TEST_NODE=0 -x RUCCL_TEST_NODE_DEVICES=0,1 "$nodes" : \
  -np 1 -x RUCCL_TEST_NODE=1 -x RUCCL_TEST_NODE_DEVICES=0,1,2 "$nodes"
mpirun_bounded -np 2 -x RUCCL_TEST_NODE=0 -x RUCCL_TEST_NODE_DEVICES=0,1,2,3 "$nodes" : \
  -np 1 -x RUCCL_TEST_NODE=1 -x RUCCL_TEST_NODE_DEVICES=5 "$nodes"

step "process death: one process aborts while every rank of the others waits in a hierarchical all-reduce; mpirun must end the job promptly"
death_started=$SECONDS
set +e
output=$(timeout -k 10 60 mpirun "${mpirun_flags[@]}" -np 3 "$hierarchical" --die 2>&1)
code=$?
set -e
waited=$((SECONDS - death_started))
echo "mpirun exited with $code after ${waited} s"
if [ "$code" = 0 ] || [ "$code" = 124 ] || [ "$code" = 137 ]; then
  echo "$output" >&2
  echo "expected mpirun to end the job with the dead process's status (not 0, not a timeout)" >&2
  exit 1
fi
if ! grep -q "aborting on purpose" <<<"$output"; then
  echo "$output" >&2
  echo "the process-death scenario did not run" >&2
  exit 1
fi
if grep -q "SURVIVOR RETURNED" <<<"$output"; then
  echo "$output" >&2
  echo "a surviving process returned from its collective: expected the job to be killed" >&2
  exit 1
fi
if [ "$waited" -ge 30 ]; then
  echo "the job took ${waited} s to end: expected mpirun to notice the death within seconds" >&2
  exit 1
fi

# Under --enable-recovery mpirun keeps the survivors alive (Open MPI 4.1 has no ULFM: nothing
# tells them of the death) and exits 0 whatever the processes return, so each process's exit
# status is echoed by a wrapper. A build whose mpirun lacks the option skips these checks.
recovery=yes
if ! timeout -k 10 60 mpirun "${mpirun_flags[@]}" --enable-recovery -np 1 true >/dev/null 2>&1; then
  recovery=
fi
for engine in "" --blocking; do
  step "process death under mpirun --enable-recovery ${engine:-(deadlines engine)}: every survivor returns the same error within timeout + 1 s and exits non-zero"
  if [ -z "$recovery" ]; then
    echo "SKIP: this Open MPI's mpirun has no --enable-recovery (mpirun --enable-recovery -np 1 true failed)"
    continue
  fi
  set +e
  output=$(timeout -k 10 60 mpirun "${mpirun_flags[@]}" --enable-recovery -np 3 \
    sh -c '"$0" "$@"; echo "EXIT $?"' "$hierarchical" --die --timeout 2 $engine 2>&1)
  set -e
  survivors=$(grep "SURVIVOR RETURNED" <<<"$output" || true)
  echo "$survivors"
  texts=$(sed 's/.*: \[/[/' <<<"$survivors" | sort -u | wc -l)
  slow=$(sed -n 's/.* after \([0-9.]*\) s:.*/\1/p' <<<"$survivors" | awk '$1 >= 3' | wc -l)
  failed_exits=$(grep -c "^EXIT [1-9]" <<<"$output" || true)
  if [ "$(grep -c . <<<"$survivors")" != 2 ] || [ "$texts" != 1 ] || [ "$slow" != 0 ] ||
    grep -q "Ok(())" <<<"$survivors" || [ "$failed_exits" -lt 2 ]; then
    echo "$output" >&2
    echo "expected both survivors to return one error within 3 s and exit non-zero" >&2
    exit 1
  fi
done

step "perf tools smoke runs (every engine, 4 B .. 1 MiB, results checked)"
cargo build --features sim --bin mpi-allreduce-perf --bin hierarchical-perf
mpirun_bounded -np 2 target/debug/mpi-allreduce-perf -b 4 -e 1M -f 16 -n 3 -w 1 \
  -E mpi,mpi-nb,ruccl-b,ruccl,ruccl-dl >/dev/null
mpirun_bounded -np 4 target/debug/hierarchical-perf -l 2 -b 4 -e 1M -f 16 -n 3 -w 1 \
  -E mpi,hier,hier-dl,local,mpi-h >/dev/null

# The tools themselves: a process dies where RUCCL_MPI_PERF_DIE says (PROCESS:SITE:GENERATION,
# SITE an engine or the tool's bookkeeping), timeout -T 2; every survivor must print the same
# error and exit 1 within -T + 1 s of the death (the dying process prints the time; the wrapper
# prints each process's exit time).
tool_death() {
  local die=$1 what=$2
  shift 2
  step "$what under mpirun --enable-recovery -np 3 (RUCCL_MPI_PERF_DIE=$die, -T 2): every survivor prints the same error within 3 s of the death and exits 1"
  if [ -z "$recovery" ]; then
    echo "SKIP: this Open MPI's mpirun has no --enable-recovery"
    return
  fi
  set +e
  output=$(timeout -k 10 60 mpirun "${mpirun_flags[@]}" --enable-recovery -np 3 \
    -x RUCCL_MPI_PERF_DIE="$die" sh -c '"$0" "$@"; echo "EXIT $? $(date +%s.%N)"' "$@" -T 2 2>&1)
  local code=$?
  set -e
  local died errors texts exits late
  died=$(sed -n 's/.*RUCCL_MPI_PERF_DIE: dying on purpose .* at \([0-9.]*\) s since the epoch$/\1/p' <<<"$output")
  errors=$(grep -E '^\[process [0-9]+\] [a-z-]+-perf: ' <<<"$output" || true)
  texts=$(sed 's/^\[process [0-9]*\] //' <<<"$errors" | sort -u | grep -c . || true)
  exits=$(sed -n 's/^EXIT \([0-9]*\) \([0-9.]*\)$/\1 \2/p' <<<"$output")
  echo "$errors"
  awk -v died="${died:-0}" '{ printf "exit %s, %.2f s after the death\n", $1, $2 - died }' <<<"$exits"
  late=$(awk -v died="${died:-0}" '$1 == 1 && $2 - died > 3.0' <<<"$exits" | grep -c . || true)
  if [ "$code" = 124 ] || [ "$code" = 137 ] || [ -z "$died" ] ||
    [ "$(grep -c . <<<"$errors")" != 2 ] || [ "$texts" != 1 ] ||
    [ "$(awk '$1 == 1' <<<"$exits" | grep -c .)" != 2 ] ||
    [ "$(awk '$1 == 134' <<<"$exits" | grep -c .)" != 1 ] || [ "$late" != 0 ]; then
    echo "$output" >&2
    echo "expected the planted death, then both survivors to print one error and exit 1 within 3 s of it" >&2
    exit 1
  fi
}
tool_death 1:hier-dl:5 "hierarchical-perf, a process dies between two hier-dl generations" \
  target/debug/hierarchical-perf -l 1 -b 4 -e 64K -f 16 -n 3 -w 1 -E hier-dl
tool_death 1:bookkeeping:7 "hierarchical-perf, a process dies at a bookkeeping barrier" \
  target/debug/hierarchical-perf -l 1 -b 4 -e 64K -f 16 -n 3 -w 1 -E hier-dl
tool_death 1:ruccl-dl:5 "mpi-allreduce-perf, a process dies between two ruccl-dl generations" \
  target/debug/mpi-allreduce-perf -b 4 -e 64K -f 16 -n 3 -w 1 -E ruccl-dl
tool_death 2:bookkeeping:4 "mpi-allreduce-perf, a process dies at a bookkeeping mean" \
  target/debug/mpi-allreduce-perf -b 4 -e 64K -f 16 -n 3 -w 1 -E ruccl-dl

step "hierarchical-perf, a process dies under plain mpirun: the job ends promptly, non-zero"
death_started=$SECONDS
set +e
timeout -k 10 60 mpirun "${mpirun_flags[@]}" -np 3 -x RUCCL_MPI_PERF_DIE=1:hier-dl:5 \
  target/debug/hierarchical-perf -l 1 -b 4 -e 64K -f 16 -n 3 -w 1 -E hier-dl >/dev/null 2>&1
code=$?
set -e
echo "mpirun exited with $code after $((SECONDS - death_started)) s"
if [ "$code" = 0 ] || [ "$code" = 124 ] || [ "$code" = 137 ] || [ $((SECONDS - death_started)) -ge 30 ]; then
  echo "expected mpirun to end the job non-zero within seconds" >&2
  exit 1
fi

step "perf tools' front end: --help 0, bad options 2, memory beyond the machine 2, a full disk 1, a closed pipe 1 (quietly)"
expect_exit() {
  local want=$1
  shift
  set +e
  "$@" >/dev/null 2>&1
  local got=$?
  set -e
  if [ "$got" != "$want" ]; then
    echo "expected exit $want, got $got: $*" >&2
    exit 1
  fi
}
stderr_file=$(mktemp)
for tool in mpi-allreduce-perf hierarchical-perf; do
  exe=target/debug/$tool
  one=(-E mpi)
  if [ "$tool" = hierarchical-perf ]; then
    one+=(-l 1)
  fi
  expect_exit 0 "$exe" --help
  expect_exit 2 "$exe" -b 1M -e 8
  expect_exit 2 "$exe" -c abc
  expect_exit 2 "$exe" -x 1
  expect_exit 2 "$exe" -T 0
  expect_exit 2 env RUCCL_MPI_PERF_DIE=1:nowhere:0 "$exe"
  expect_exit 2 mpirun_bounded -np 2 "$exe" -b 16G -e 16G
  # Without mpirun (one process), so that the tool itself writes to the file and the pipe.
  expect_exit 1 sh -c '"$0" "$@" >/dev/full' "$exe" -b 4 -e 64K -n 2 -w 1 "${one[@]}"
  set +e
  # The reader closes its end at once; the tool writes only after measuring, so into a pipe
  # nobody reads.
  "$exe" -b 4 -e 1M -n 2 -w 1 "${one[@]}" 2>"$stderr_file" | (exec 0<&-; sleep 2)
  code=${PIPESTATUS[0]}
  set -e
  if [ "$code" != 1 ] || [ -s "$stderr_file" ]; then
    cat "$stderr_file" >&2
    echo "$tool: expected a quiet exit 1 on a closed pipe, got $code" >&2
    exit 1
  fi
done
rm -f "$stderr_file"

step "the meeting's models under loom and shuttle, and the three planted slips each caught (run-models.sh)"
./run-models.sh

step "mpi tests passed in $((SECONDS - started)) s"
