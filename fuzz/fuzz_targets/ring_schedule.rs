//! `cargo +nightly fuzz run ring_schedule`: see `ruccl_fuzz::ring_schedule`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruccl_fuzz::ring_schedule::check(data));
