//! `cargo +nightly fuzz run registry_ops`: see `ruccl_fuzz::registry_ops`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruccl_fuzz::registry_ops::check(data));
