//! Regenerate `kernels/ruccl_kernels.ptx` from the kernel source with NVRTC (no GPU needed).
//!
//! Run through `scripts/gen-ptx.sh`, which puts NVRTC 12.0 on the loader path. Usage:
//! `gen_ptx OUTPUT.ptx` writes the provenance header and the PTX; `gen_ptx --check OUTPUT.ptx`
//! fails if the file differs from what NVRTC produces now.

use ruccl_cuda::kernels::{compile_with_nvrtc, nvrtc_version, ptx_header};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (check, path) = match args.as_slice() {
        [path] => (false, path),
        [flag, path] if flag == "--check" => (true, path),
        _ => {
            eprintln!("usage: gen_ptx [--check] OUTPUT.ptx");
            return ExitCode::from(2);
        }
    };
    let Some(version) = nvrtc_version() else {
        eprintln!(
            "NVRTC is not loadable: put libnvrtc.so.12 on LD_LIBRARY_PATH (scripts/gen-ptx.sh does)"
        );
        return ExitCode::FAILURE;
    };
    let ptx = match compile_with_nvrtc() {
        Ok(ptx) => ptx,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let text = format!("{}{}", ptx_header(&format!("NVRTC {version}")), ptx);
    if check {
        return match std::fs::read_to_string(path) {
            Ok(existing) if existing == text => {
                println!("{path} is up to date (NVRTC {version})");
                ExitCode::SUCCESS
            }
            Ok(_) => {
                eprintln!("{path} differs from NVRTC {version}'s output: regenerate it");
                ExitCode::FAILURE
            }
            Err(error) => {
                eprintln!("cannot read {path}: {error}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(error) = std::fs::write(path, text) {
        eprintln!("cannot write {path}: {error}");
        return ExitCode::FAILURE;
    }
    println!("wrote {path} (NVRTC {version})");
    ExitCode::SUCCESS
}
