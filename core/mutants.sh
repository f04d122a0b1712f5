#!/usr/bin/env bash
# Mutation testing of core/src with the fast suite; the figures are in core/MUTANTS.md.
#
#   core/mutants.sh SET [cargo-mutants arguments]      SET: rendezvous | checker | rest | all
#
#   rendezvous  core/src/rendezvous/**, contain.rs, run.rs, registry.rs
#                                                      tests: --lib, collectives, errors, registry, threads
#   checker     core/src/plan/step.rs, core/src/verify/**   tests: --lib, plans (but its W = 64 timing test)
#   rest        core/src/** but the two sets above     tests: --lib --tests (but the W = 64 timing test)
#   all         core/src/**                            tests: --lib --tests (but the W = 64 timing test)
#
# Stage 1: cargo-mutants, one job (the machine is shared), each viable mutant against the core
#   crate's std tests for its SET (profile `mutants`: opt-level 1, so the checker's largest plans
#   verify in seconds); a mutant still running after 40 s is a timeout (the tests' watchdogs fail
#   a hang after 10 s). Results in mutants.out/ (or --output's).
# Stage 2: every mutant stage 1 missed is applied to this tree and run against the whole fast
#   suite — `cargo test -p ruccl-core` (every test target and the doc-tests) and the quick shuttle
#   profile (`RUCCL_MODELS_PROFILE=quick cargo shuttle`) — then reverted. The mutants that survive
#   it are listed in mutants.out/missed-by-fast-suite.txt: each needs a test that kills it or a
#   one-line argument that it is equivalent (core/MUTANTS.md). Stage 1's catches are the fast
#   suite's too (it is a subset), so the score is (stage-1 caught + stage-2 caught) over viable.
set -euo pipefail
cd "$(dirname "$0")/.."

set_name=${1:-}
shift || true
case "$set_name" in
rendezvous)
    files=(--file 'core/src/rendezvous/**' --file core/src/contain.rs --file core/src/run.rs
        --file core/src/registry.rs)
    tests=(--lib --test=collectives --test=errors --test=registry --test=threads)
    ;;
checker)
    files=(--file core/src/plan/step.rs --file 'core/src/verify/**')
    # The W = 64 prime-length plans are the checker's timing test (half a minute in debug);
    # stage 2 runs it on every survivor.
    tests=(--lib --test=plans -- --skip=the_largest_built_in_plans_verify_at_a_large_prime_length)
    ;;
rest)
    files=(--exclude 'core/src/rendezvous/**' --exclude core/src/contain.rs
        --exclude core/src/run.rs --exclude core/src/registry.rs
        --exclude core/src/plan/step.rs --exclude 'core/src/verify/**')
    tests=(--lib --tests -- --skip=the_largest_built_in_plans_verify_at_a_large_prime_length)
    ;;
all)
    files=()
    tests=(--lib --tests -- --skip=the_largest_built_in_plans_verify_at_a_large_prime_length)
    ;;
*)
    echo "usage: core/mutants.sh rendezvous|checker|rest|all [cargo-mutants arguments]" >&2
    exit 2
    ;;
esac

if ! git diff --quiet -- core/src; then
    echo "core/src has uncommitted changes: stage 2 applies mutants to it; commit first" >&2
    exit 2
fi

test_args=()
for arg in "${tests[@]}"; do test_args+=("--cargo-test-arg=$arg"); done

# Stage 1. cargo-mutants exits non-zero when a mutant is missed; stage 2 decides.
nice -n 10 cargo mutants --dir core --jobs 1 --timeout 40 --build-timeout 600 \
    --profile mutants --baseline skip "${test_args[@]}" "${files[@]}" "$@" || true

out=mutants.out
for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = --output ] || [ "${!i}" = -o ]; then
        j=$((i + 1))
        out="${!j}/mutants.out"
    fi
done
survivors="$out/missed-by-fast-suite.txt"
: >"$survivors"

# Stage 2.
trap 'git checkout -q -- core/src' EXIT
python3 - "$out" <<'PY' >"$out/stage2.tsv"
import json, sys
out = sys.argv[1]
for outcome in json.load(open(f"{out}/outcomes.json"))["outcomes"]:
    if outcome["summary"] != "MissedMutant":
        continue
    mutant = outcome["scenario"]["Mutant"]
    print(f'{mutant["file"]}\t{out}/{outcome["diff_path"]}\t{mutant["name"]}')
PY
while IFS=$'\t' read -r file diff name; do
    patch --quiet -p0 "$file" <"$diff"
    if nice -n 10 cargo test -q -p ruccl-core </dev/null >/dev/null 2>&1 &&
        RUCCL_MODELS_PROFILE=quick nice -n 10 timeout 900 cargo shuttle </dev/null >/dev/null 2>&1; then
        echo "missed by the fast suite: $name"
        echo "$name" >>"$survivors"
    else
        echo "caught by the fast suite: $name"
    fi
    git checkout -q -- "$file"
done <"$out/stage2.tsv"
echo "stage 1 missed $(wc -l <"$out/stage2.tsv"); the fast suite missed $(wc -l <"$survivors"): $survivors"
