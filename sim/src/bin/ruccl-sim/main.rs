//! `ruccl-sim`: ruCCL's all-reduce on simulated devices. Everything lives in
//! [`ruccl_sim::cli`]; see `ruccl-sim --help`.

fn main() -> std::process::ExitCode {
    ruccl_sim::cli::main()
}
