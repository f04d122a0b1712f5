//! A panic anywhere makes the exit status non-zero: the hook `main` installs notes every panic
//! that no fault plan injected (in its own test binary: the hook and the flag are process-wide).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_perf::cli::{Verdict, exit_status, unexpected_panic, watch_panics};

#[test]
fn a_panic_no_fault_injected_is_noted_and_an_injected_one_is_not() {
    watch_panics();
    let injected = std::thread::spawn(|| panic!("injected panic in begin in generation 0"));
    assert!(injected.join().is_err());
    assert!(!unexpected_panic());
    let bug = std::thread::spawn(|| panic!("index out of bounds"));
    assert!(bug.join().is_err());
    assert!(unexpected_panic());
    let mut stderr = Vec::new();
    assert_eq!(exit_status(&Ok(Verdict::Passed), &mut stderr), 101);
    assert!(String::from_utf8(stderr).unwrap().contains("a bug"));
}
