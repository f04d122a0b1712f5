#!/usr/bin/env bash
# ruccl-mpi's tests: fmt and clippy (also of the library alone, without the `sim` feature,
# checking that neither ruccl-sim nor ruccl-perf is among the normal dependencies), the unit
# tests, the multi-process scenarios under `mpirun -np 2` and `-np 3` — the inter-process
# engine's (every scenario on a non-blocking and on a blocking communicator) and the
# hierarchical communicator's (uneven local rank counts: 2 + 1, 1 + 2 + 1) — and communicators
# sharing one engine concurrently (every result checked, never a wrong `Ok`), the process-death
# check, and smoke runs of both perf tools. Needs Open MPI and libclang
# (mpi/README.md, "Install"). Exits non-zero on any failure; every mpirun runs under `timeout`,
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
for exe in "$engine" "$hierarchical" "$concurrent"; do
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

step "perf tools smoke runs (every engine, 4 B .. 1 MiB, results checked)"
cargo build --features sim --bin mpi-allreduce-perf --bin hierarchical-perf
mpirun_bounded -np 2 target/debug/mpi-allreduce-perf -b 4 -e 1M -f 16 -n 3 -w 1 \
  -E mpi,mpi-nb,ruccl-b,ruccl,ruccl-dl >/dev/null
mpirun_bounded -np 4 target/debug/hierarchical-perf -l 2 -b 4 -e 1M -f 16 -n 3 -w 1 \
  -E mpi,hier,hier-dl,local,mpi-h >/dev/null

step "mpi tests passed in $((SECONDS - started)) s"
