//! `cargo +nightly fuzz run fault_spec_parse`: see `ruccl_fuzz::fault_spec_parse`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruccl_fuzz::fault_spec_parse::check(data));
