#!/usr/bin/env bash
# The meeting's models (src/hierarchical/models.rs) under loom and under shuttle: every model
# must pass, then each planted slip (RUCCL_MPI_SLIP, read by checker builds only) must be caught
# by the models listed for it below, under both checkers. Called by run-tests.sh; runs on its
# own too. Each checker builds into its own target directory (target/loom, target/shuttle), so
# the normal build is left alone.
set -euo pipefail
cd "$(dirname "$0")"

export CARGO_TERM_COLOR=never
models=(
  a_failure_on_one_process_reaches_every_rank
  a_mismatch_across_processes_is_one_error_everywhere
  deadlines_never_split_the_ranks
  a_process_that_never_calls_times_out_every_rank
)
# slip: the models that must catch it (mpi/README.md, "Model checking").
declare -A catchers=(
  [lost_wakeup]="a_failure_on_one_process_reaches_every_rank deadlines_never_split_the_ranks a_process_that_never_calls_times_out_every_rank"
  [reopen_early]="a_failure_on_one_process_reaches_every_rank deadlines_never_split_the_ranks"
  [expire_while_running]="deadlines_never_split_the_ranks"
)

for checker in loom shuttle; do
  started=$SECONDS
  binary=$(CARGO_TARGET_DIR=target/$checker RUSTFLAGS="--cfg ruccl_$checker" \
    cargo test --release --lib --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
  if [ -z "$binary" ]; then
    echo "cannot build the $checker models" >&2
    exit 1
  fi
  echo "$checker: built in $((SECONDS - started)) s"
  for model in "${models[@]}"; do
    test=hierarchical::models::${checker}_models::${checker}_$model
    begun=$(date +%s%N)
    if ! "$binary" --exact "$test" --test-threads 1 >/dev/null 2>&1; then
      "$binary" --exact "$test" --test-threads 1 >&2 || true
      echo "$checker: $model FAILED" >&2
      exit 1
    fi
    echo "$checker: $model ok ($(((($(date +%s%N) - begun)) / 1000000)) ms)"
  done
  for slip in "${!catchers[@]}"; do
    for model in ${catchers[$slip]}; do
      test=hierarchical::models::${checker}_models::${checker}_$model
      # A caught slip may abort the binary (a panic during loom's unwinding): bash -c keeps the
      # shell's report of that out of the log.
      if RUCCL_MPI_SLIP=$slip bash -c '"$0" --exact "$1" --test-threads 1; exit $?' "$binary" "$test" \
        >/dev/null 2>&1; then
        echo "$checker: the slip $slip was not caught by $model" >&2
        exit 1
      fi
      echo "$checker: slip $slip caught by $model"
    done
  done
done
