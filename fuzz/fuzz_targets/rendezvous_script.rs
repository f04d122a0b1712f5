//! `cargo +nightly fuzz run rendezvous_script`: see `ruccl_fuzz::rendezvous_script`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruccl_fuzz::rendezvous_script::check(data));
