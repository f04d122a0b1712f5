#!/usr/bin/env bash
# Regenerate cuda/kernels/ruccl_kernels.ptx from cuda/kernels/{common.cuh,fold.cu,mean.cu}.
#
# Uses NVRTC 13.0 from PyPI's nvidia-cuda-nvrtc wheel (NVRTC is a compiler library: it needs no
# GPU and no CUDA toolkit), so any x86-64 Linux machine with Python and cargo can run it.
# NVRTC 13.0 exactly: its PTX ISA (9.0) is the newest that the targeted driver (580, CUDA 13.0)
# accepts; a newer NVRTC would emit PTX that driver refuses.
#
#   scripts/gen-ptx.sh           regenerate the PTX
#   scripts/gen-ptx.sh --check   fail if the checked-in PTX is not what NVRTC produces now
#
# Env: RUCCL_NVRTC_LIB  a folder holding libnvrtc.so.13 (skips the wheel download)
set -euo pipefail
crate=$(cd "$(dirname "$0")/.." && pwd)
workspace=$(cd "$crate/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$workspace/target/cuda}
nvrtc_version=13.0.88
lib=${RUCCL_NVRTC_LIB:-}
if [[ -z "$lib" ]]; then
    wheel_dir=$CARGO_TARGET_DIR/nvrtc-$nvrtc_version
    lib=$wheel_dir/extracted/nvidia/cu13/lib
    if [[ ! -e "$lib/libnvrtc.so.13" ]]; then
        mkdir -p "$wheel_dir"
        python3 -m pip download --quiet --no-deps --only-binary=:all: \
            --dest "$wheel_dir" "nvidia-cuda-nvrtc==$nvrtc_version"
        python3 -m zipfile -e "$wheel_dir"/nvidia_cuda_nvrtc-*.whl "$wheel_dir/extracted"
    fi
fi
[[ -e "$lib/libnvrtc.so.13" ]] || { echo "no libnvrtc.so.13 in $lib" >&2; exit 1; }
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
args=("$crate/kernels/ruccl_kernels.ptx")
[[ "${1:-}" == "--check" ]] && args=(--check "${args[@]}")
cargo run --quiet -p ruccl-cuda --example gen_ptx -- "${args[@]}"
