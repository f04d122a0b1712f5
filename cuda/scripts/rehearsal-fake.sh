#!/usr/bin/env bash
# A fake of one bundle binary (named by how it is called: unit, hardware, conformance, faults,
# ruccl-perf) for `gpu-check.sh rehearse`: it speaks libtest's or ruccl-perf's output and
# misbehaves as RUCCL_REHEARSE_CASE says — pass, hang, crash, wrong, slow. No GPU involved.
set -u
me=$(basename "$0")
case=${RUCCL_REHEARSE_CASE:-pass}

tests_of() {
    case $me in
    unit) echo "kernels::tests::embedded_ptx_is_current probe::tests::a_missing_library schedule::tests::layouts" ;;
    hardware) echo "the_topology_report_names_gpus_contexts_and_peer_access the_copy_bandwidth_baseline_is_measured_on_each_gpu every_collective_algorithm_type_and_operation_is_exact_on_every_map all_reduce_outputs_agree_bit_for_bit_across_ranks logical_ranks_share_the_primary_context_by_default" ;;
    conformance) echo "the_cuda_executor_passes_the_conformance_suite_on_every_map the_cuda_executor_passes_the_conformance_suite_with_a_context_per_rank" ;;
    faults) echo "a_fault_at_any_site_fails_one_generation a_fault_in_a_direct_step_fails_one_generation the_decorator_with_an_empty_plan_is_transparent" ;;
    esac
}

# One test: its output, then libtest's result line (or a misbehaviour).
run_test() {
    local test=$1
    case "$case:$me:$test" in
    hang:hardware:every_collective*)
        # What the real watchdog does: name the test, end the process with 124.
        sleep "${RUCCL_CUDA_TEST_TIMEOUT:-5}"
        echo "TIMEOUT: $test still running after ${RUCCL_CUDA_TEST_TIMEOUT:-5} s; the watchdog ends the test process" >&2
        exit 124
        ;;
    hang:conformance:*)
        # A hang no watchdog catches, deaf to TERM: only the step's limit (and KILL) ends it.
        trap '' TERM
        while :; do sleep 1; done
        ;;
    crash:faults:a_fault_in_a_direct*)
        kill -SEGV $$
        ;;
    crash:unit:probe*)
        echo "SKIP: $test: no CUDA driver (libcuda.so.1 not found)"
        ;;
    wrong:conformance:*every_map)
        echo "thread '$test' panicked at cuda/tests/conformance.rs:48:9:"
        echo "conformance: all-gather W=5 ring f16: rank 3 element 17: expected 1.5, got 2"
        echo "test $test ... FAILED"
        return 1
        ;;
    slow:*:the_topology* | slow:*:the_copy*) ;;
    slow:*) sleep 6 ;;
    esac
    case $test in
    the_topology*)
        echo "TOPOLOGY: driver CUDA 12.8 (libcuda.so.1), 1 GPU(s); embedded PTX ISA 8.0; no NVRTC"
        echo "KERNELS: embedded PTX loaded by the driver (cuModuleLoadData); NVRTC fallback: unavailable"
        echo "CONTEXTS: policy SharedPrimary (ranks on one GPU share its primary context, a stream each); a context per rank is ContextPolicy::Separate (RUCCL_CUDA_CONTEXTS=separate)"
        echo "TOPOLOGY: logical: 8 ranks on 1 GPU (NVIDIA H200); contexts: 1 primary, 0 own, 7 shared; peer links: none (no cross-GPU pairs)"
        ;;
    the_copy*) echo "BANDWIDTH: GPU 0: device-to-device copy 1800.0 GB/s" ;;
    every_collective*) echo "COLLECTIVES: at W = 8: all-reduce(sum), reduce-scatter(sum), all-gather, broadcast(root 0), reduce(sum, root 0), gather(root 0), scatter(root 0), all-to-all" ;;
    esac
    echo "test $test ... ok"
}

libtest() {
    local exact=0 list=0 filter="" skips=() test selected=() arg
    while (($#)); do
        arg=$1
        shift
        case $arg in
        --exact) exact=1 ;;
        --list) list=1 ;;
        --skip) skips+=("$1") && shift ;;
        --*) ;;
        *) filter=$arg ;;
        esac
    done
    for test in $(tests_of); do
        if [[ -n $filter ]]; then
            if ((exact)); then [[ $test == "$filter" ]] || continue; else [[ $test == *"$filter"* ]] || continue; fi
        fi
        for arg in "${skips[@]}"; do [[ $test == *"$arg"* ]] && continue 2; done
        selected+=("$test")
    done
    if ((list)); then
        for test in "${selected[@]}"; do echo "$test: test"; done
        echo "${#selected[@]} tests, 0 benchmarks"
        return 0
    fi
    echo "running ${#selected[@]} tests"
    local passed=0 failed=0
    for test in "${selected[@]}"; do
        if run_test "$test"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    done
    local verdict=ok
    ((failed)) && verdict=FAILED
    echo "test result: $verdict. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s"
    ((failed == 0))
}

perf() {
    if [[ ${1:-} == help ]]; then
        printf 'Commands:\n'
        printf '  %s  Sweep\n' all-reduce-perf reduce-scatter-perf all-gather-perf broadcast-perf \
            reduce-perf gather-perf scatter-perf alltoall-perf run help
        return 0
    fi
    [[ $case == slow ]] && sleep 3
    local wrong=0 algorithm size name=${1:-all-reduce-perf}
    echo "# ruccl-perf $name on CUDA (rehearsal fake)"
    echo "#                                                              out-of-place                       in-place"
    echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong         algorithm     asked"
    for size in 1048576 16777216 268435456; do
        for algorithm in auto ring direct halving-doubling; do
            wrong=0
            [[ $case == wrong && $name == all-reduce-perf && $* == *-A* && $algorithm == ring &&
                $size == 268435456 ]] && wrong=3
            printf '%12d %13d %9s %7s %7s %8.1f %7.2f %7.2f %6d %8.1f %7.2f %7.2f %6d %17s %9s\n' \
                "$size" $((size / 4)) float sum -1 100.0 500.00 875.00 "$wrong" 100.0 500.00 875.00 0 \
                "${algorithm/auto/ring}" "$algorithm"
        done
    done
    echo "# Out of bounds values : 0 OK"
}

case $me in
ruccl-perf) perf "$@" ;;
*) libtest "$@" ;;
esac
