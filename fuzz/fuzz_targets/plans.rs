//! `cargo +nightly fuzz run plans`: see `ruccl_fuzz::plans`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruccl_fuzz::plans::check(data));
