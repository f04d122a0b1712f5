//! `cargo +nightly fuzz run msccl`: see `ruccl_fuzz::msccl`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruccl_fuzz::msccl::check(data));
