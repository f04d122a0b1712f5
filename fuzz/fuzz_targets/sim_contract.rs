//! `cargo +nightly fuzz run sim_contract`: see `ruccl_fuzz::sim_contract`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruccl_fuzz::sim_contract::check(data));
