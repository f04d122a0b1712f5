#!/usr/bin/env bash
# Regenerate cuda/kernels/ruccl_kernels.ptx from cuda/kernels/{common.cuh,fold.cu,mean.cu}.
#
# Uses NVRTC 12.0 from PyPI's nvidia-cuda-nvrtc-cu12 wheel (NVRTC is a compiler library: it needs
# no GPU and no CUDA toolkit), so any x86-64 Linux machine with Python and cargo can run it.
# NVRTC 12.0 exactly: its PTX ISA (8.0) is the oldest that every CUDA 12.x and 13.x driver
# accepts (the lowest API the crate links, cuda-12000); a newer NVRTC would emit PTX that older
# drivers refuse.
#
#   scripts/gen-ptx.sh           regenerate the PTX
#   scripts/gen-ptx.sh --check   fail if the checked-in PTX is not what NVRTC produces now
#
# Env: RUCCL_NVRTC_LIB  a folder holding libnvrtc.so.12 (skips the wheel download)
set -euo pipefail
crate=$(cd "$(dirname "$0")/.." && pwd)
workspace=$(cd "$crate/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$workspace/target/cuda}
nvrtc_version=12.0.76
lib=${RUCCL_NVRTC_LIB:-}
if [[ -z "$lib" ]]; then
    wheel_dir=$CARGO_TARGET_DIR/nvrtc-$nvrtc_version
    lib=$wheel_dir/extracted/nvidia/cuda_nvrtc/lib
    if [[ ! -e "$lib/libnvrtc.so.12" ]]; then
        mkdir -p "$wheel_dir"
        python3 -m pip download --quiet --no-deps --only-binary=:all: \
            --dest "$wheel_dir" "nvidia-cuda-nvrtc-cu12==$nvrtc_version"
        python3 -m zipfile -e "$wheel_dir"/nvidia_cuda_nvrtc-*.whl "$wheel_dir/extracted"
    fi
fi
[[ -e "$lib/libnvrtc.so.12" ]] || { echo "no libnvrtc.so.12 in $lib" >&2; exit 1; }
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
args=("$crate/kernels/ruccl_kernels.ptx")
[[ "${1:-}" == "--check" ]] && args=(--check "${args[@]}")
cargo run --quiet -p ruccl-cuda --example gen_ptx -- "${args[@]}"
