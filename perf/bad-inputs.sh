#!/usr/bin/env bash
# The bad-input battery (issue 33): every flag, every subcommand, the environment, ulimit,
# closed and full streams and signals thrown at a built ruccl-perf. Each case names the exit
# status it must end with (0 all good; 1 a failure, wrong results or a resource limit; 2 a
# command line that makes no run; 130 SIGINT/SIGTERM); a case fails as a PANIC (status 101 or
# "panicked at" on stderr), an ABORT (killed by a signal: 134, 139, …), a HANG (past its time
# limit) or a WRONG exit status. Prints one line per failure and the counts; exits 1 if any.
#
#   perf/bad-inputs.sh [path/to/ruccl-perf]     (default: target/debug/ruccl-perf)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/debug/ruccl-perf}")
[ -x "$bin" ] || { echo "bad-inputs: no binary at $bin (cargo build -p ruccl-perf)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
limit=${BAD_INPUTS_TIMEOUT:-30}
started=$SECONDS
cases=0 panics=0 aborts=0 hangs=0 wrong=0

# verdict EXPECTED STATUS STDERR-FILE DESCRIPTION
verdict() {
  local expected=$1 status=$2 err=$3 what=$4 kind=
  cases=$((cases + 1))
  if [ "$status" -eq 101 ] || grep -q "panicked at" "$err"; then
    kind=PANIC; panics=$((panics + 1))
  elif [ "$status" -eq 124 ]; then
    kind=HANG; hangs=$((hangs + 1))
  elif [ "$status" -gt 128 ] && [ "$status" -ne "$expected" ]; then
    kind=ABORT; aborts=$((aborts + 1))
  elif [ "$status" -ne "$expected" ]; then
    kind=WRONG; wrong=$((wrong + 1))
  fi
  if [ -n "$kind" ]; then
    echo "$kind (exit $status, expected $expected): $what"
    sed 's/^/    /' "$err" | tail -n 5
  fi
}

# expect STATUS ARGS... : ruccl-perf ARGS, output discarded
expect() {
  local expected=$1; shift
  timeout -k 5 "$limit" "$bin" "$@" >/dev/null 2>"$work/err"
  verdict "$expected" $? "$work/err" "ruccl-perf $*"
}

# shell STATUS 'COMMAND' : a shell line ($P is the binary), for environments and streams
shell() {
  local expected=$1 line=$2
  P=$bin timeout -k 5 "$limit" bash -c "$line" 2>"$work/err"
  verdict "$expected" $? "$work/err" "$line"
}

small=(-b 8 -e 1K -n 1 -w 0)

# --- every flag of the sweeps: good values, bad values -------------------------------------
expect 0 "${small[@]}"
expect 0 -h
expect 0 --help
expect 0 -V
expect 0 --version
expect 2 --bogus
expect 2 -b
for flag in -b -e -i --memory-limit; do
  for bad in x -1 12X 1KK nan inf 1e999 0x 99999999999999999999T ''; do
    expect 2 "$flag" "$bad" -n 1 -w 0
  done
done
for good in 1.5K 1e3 0x10 '1 K' 8B 1KiB 2.7; do expect 0 -b "$good" -e 4K -n 1 -w 0; done
expect 2 -b 1M -e 1K
expect 0 -b 0 -e 0 -n 1 -w 1
expect 0 -b 1K -e 4K -f 1 -i 1e3 -n 1 -w 0
for bad in 0 -1 x 4294967296 1.5; do expect 2 -f "$bad" "${small[@]}"; done
for bad in 0 -1 x 1025 99999999999; do expect 2 -g "$bad" "${small[@]}"; done
expect 0 -g 1 "${small[@]}"
expect 0 -g 7 "${small[@]}"
for bad in x sum,x ''; do expect 2 -o "$bad" "${small[@]}"; done
expect 0 -o all "${small[@]}"
for bad in x float,x f8e4m3 f8e5m2 ''; do expect 2 -d "$bad" "${small[@]}"; done
expect 0 -d all -b 64 -e 64 -n 1 -w 0
for bad in x -2 1.5; do expect 2 broadcast-perf -r "$bad" "${small[@]}"; done
expect 2 broadcast-perf -r 9 -g 4 "${small[@]}"
expect 0 broadcast-perf -r -1 -g 3 "${small[@]}"
for bad in x ring,x ''; do expect 2 -A "$bad" "${small[@]}"; done
expect 2 -A halving-doubling -g 3 "${small[@]}"
expect 0 -A all -g 3 "${small[@]}"
for bad in 0 -1 x 4294967296; do expect 2 -n "$bad" -e 1K; done
for bad in -1 x 4294967296; do expect 2 -w "$bad" -e 1K; done
for bad in -1 x; do expect 2 -c "$bad" -e 1K; done
expect 0 -c 0 "${small[@]}"
for bad in 4 -1 x; do expect 2 -a "$bad" "${small[@]}"; done
for a in 0 1 2 3; do expect 0 -a "$a" "${small[@]}"; done
for bad in -1 x nan inf -inf; do expect 2 -T "$bad" "${small[@]}"; done
for good in 0 1e300 0.5 120; do expect 0 -T "$good" "${small[@]}"; done
expect 0 -n 3 -n 1 -w 2 -w 0 -b 8 -e 1K
expect 2 --memory-limit 0 "${small[@]}"
expect 2 --memory-limit 1T -b 4G -e 4G -n 1 -w 0
expect 0 --memory-limit 1T "${small[@]}"
expect 2 --backend x "${small[@]}"
expect 2 --backend cuda "${small[@]}" # a build without the cuda feature
for bad in 0 -1 x; do expect 2 --device-threads "$bad" "${small[@]}"; done
for flag in --alpha-us --gamma-us --beta-gbps; do
  for bad in -1 x nan inf; do expect 2 "$flag" "$bad" "${small[@]}"; done
done
expect 2 --beta-gbps 0 "${small[@]}"
expect 2 --map x --backend cuda "${small[@]}"
expect 2 --ranks-per-gpu 0 "${small[@]}"
expect 2 --nccl "${small[@]}"
expect 2 --trace /nonexistent/dir/trace.json "${small[@]}"
expect 0 --trace "$work/trace.json" "${small[@]}"
expect 2 -J /nonexistent/dir/out.json "${small[@]}"
expect 2 -J "$work/out.txt" "${small[@]}"
expect 0 -J "$work/out.json" "${small[@]}"
expect 0 -J "$work/out.json" "${small[@]}" # taken: out.json.0, as nccl-tests
expect 0 --json "${small[@]}"
expect 0 --extra-columns "${small[@]}"
# nccl-tests' other flags: the matching value runs, any other is refused by name.
expect 0 -t 2 -g 2 -m 1 -N 1 -p 1 -z 0 -y 0 -G 0 -C 0 -S 0 -R 0 -D 0 -M 0 -u 0 -I 0 -K 0 "${small[@]}"
for flag in -m -N -z -y -G -C -S -R -x -D --device_cta_count -M -u -I -K; do
  expect 2 "$flag" 7 "${small[@]}"
done
for bad in 0 x 1025; do expect 2 -t "$bad" "${small[@]}"; done
expect 2 -t 64 -g 64 "${small[@]}"

# --- every subcommand ------------------------------------------------------------------------
for sweep in all-reduce-perf reduce-scatter-perf all-gather-perf broadcast-perf reduce-perf \
  gather-perf scatter-perf alltoall-perf all_reduce_perf perf; do
  expect 0 "$sweep" -g 3 "${small[@]}"
  expect 2 "$sweep" -b x
  expect 2 "$sweep" --bogus
done
expect 2 nosuch-perf
for collective in all-reduce reduce-scatter all-gather broadcast reduce gather scatter all-to-all; do
  expect 0 run -k "$collective" -g 3 -l 3K -n 3
  expect 0 run -k "$collective" -g 3 -l 3K -n 20 --fault exchange:step=0:gen=7:panic
done
expect 2 run -k x
expect 2 run -g 0
expect 2 run -g 65
expect 2 run -r 7 -g 4
expect 2 run -r -1
expect 2 run -l x
expect 2 run -l 3 -k reduce-scatter -g 2
expect 2 run -n x
expect 2 run -n -1
expect 2 run -T -1
expect 0 run -T 0 -n 2
expect 2 run -d x
expect 2 run -o x
expect 2 run -A x
expect 2 run -A halving-doubling -g 3
expect 2 run --fault x
expect 2 run --fault exchange:step=99:gen=1:panic -n 3
expect 2 run --fault exchange:rank=1:panic
expect 2 run --memory-limit 1T -l 1G -g 4 -n 1
expect 2 run --trace /nonexistent/dir/t.json
expect 0 run --trace "$work/run-trace.json" -n 3
expect 0 run --json -n 3
expect 0 run -n 3 --fault begin:gen=1:error
expect 1 run -g 16 -l 64K -T 0.00001 -n 3 # generations time out with no --fault to explain it
expect 0 run -n 0
expect 2 run -n 3 extra-argument

# --- the environment ----------------------------------------------------------------------------
shell 1 'RUST_MIN_STACK=999999999999999 $P run -n 2 >/dev/null'
shell 1 'RUST_MIN_STACK=999999999999999 $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 0 'RUST_MIN_STACK=1 $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 0 'RUST_MIN_STACK=1 $P run -n 3 >/dev/null'
shell 0 'RUST_MIN_STACK=x $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 1 'NCCL_TESTS_MIN_BW=1e9 $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 0 'NCCL_TESTS_MIN_BW=0 $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 0 'NCCL_TESTS_MIN_BW=abc $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 1 'NCCL_TESTS_MIN_BW=1e9 $P -b 8 -e 1K -n 1 -w 0 -J '"$work"'/minbw.json | grep -q "FAILED" && test -s '"$work"'/minbw.json && exit 1; exit 3'
shell 0 'env -i $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 0 'HOME=/nonexistent TMPDIR=/nonexistent LANG=xx_XX.bogus TERM=dumb COLUMNS=x $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 0 'RUST_BACKTRACE=full RUST_LOG=trace $P -b 8 -e 1K -n 1 -w 0 >/dev/null'

# --- resource limits -----------------------------------------------------------------------------
for v in 50000 150000 250000 400000 700000; do
  shell 1 "ulimit -v $v; \$P -g 64 -e 1K -n 2 -w 0 >/dev/null || exit 1; exit 1"
  shell 1 "ulimit -v $v; \$P run -g 64 -n 2 >/dev/null || exit 1; exit 1"
  shell 1 "ulimit -v $v; \$P -g 8 -e 64M -n 1 -w 0 >/dev/null; s=\$?; [ \$s -le 1 ] && exit 1; exit \$s"
done
shell 0 'ulimit -s 64; $P -b 8 -e 1K -n 1 -w 0 >/dev/null'
shell 0 'ulimit -s 64; $P run -n 3 >/dev/null'
shell 2 'ulimit -s 64; $P --bogus'

# --- closed and full streams ----------------------------------------------------------------
shell 1 '$P -b 8 -e 1K -n 1 -w 0 >&-'
shell 1 '$P run -n 3 >&-'
shell 1 '$P -b 8 -e 1K -n 1 -w 0 >/dev/full'
shell 1 '$P run -n 3 >/dev/full'
shell 1 '$P --json -b 8 -e 1K -n 1 -w 0 >/dev/full'
shell 1 '$P -b 8 -e 64M -n 2 -w 1 | head -1 >/dev/null; exit ${PIPESTATUS[0]}'
shell 1 '$P run -n 100000000 -l 1 | head -3 >/dev/null; exit ${PIPESTATUS[0]}'
shell 0 '$P -b 8 -e 1K -n 1 -w 0 >/dev/null 2>&-'
shell 0 '$P -b 8 -e 1K -n 1 -w 0 >/dev/null 2>/dev/full'
shell 0 '$P -b 8 -e 1K -n 1 -w 0 >/dev/null <&-'
shell 2 '$P --bogus 2>&-'

# --- signals: the run stops, exits 130 and leaves complete files -----------------------------
for sig in INT TERM HUP; do
  for command in "-b 1K -e 64M -n 50 -w 1 -J $work/sig-$sig.json --trace $work/sig-$sig.trace.json" \
    "run -n 100000000 -l 1 --json --trace $work/sig-run-$sig.trace.json"; do
    rm -f "$work"/sig-*"$sig"*
    timeout -k 5 "$limit" "$bin" $command >"$work/out" 2>"$work/err" &
    pid=$!
    sleep 1.5
    kill -"$sig" "$pid" 2>/dev/null
    wait "$pid"
    status=$?
    for file in "$work"/sig-*"$sig"*.json "$work/out"; do
      case $file in
        */out) [[ $command == run* ]] || continue ;;
      esac
      if ! python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$file" 2>>"$work/err"; then
        echo "incomplete JSON: $file" >>"$work/err"
        status=99
      fi
    done
    verdict 130 "$status" "$work/err" "SIG$sig to ruccl-perf $command"
  done
done

seconds=$((SECONDS - started))
echo "bad-inputs: $cases cases in ${seconds} s: $panics panics, $aborts aborts, $hangs hangs, $wrong wrong exit statuses"
[ $((panics + aborts + hangs + wrong)) -eq 0 ]
