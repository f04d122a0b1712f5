//! `ruccl-perf`: ruCCL's all-reduce as nccl-tests measures it, and fault scenarios. Everything
//! lives in [`ruccl_perf::cli`]; see `ruccl-perf --help`.

fn main() -> std::process::ExitCode {
    ruccl_perf::cli::main()
}
