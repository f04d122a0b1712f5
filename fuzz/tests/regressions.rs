//! Inputs the fuzzers found, each kept in `corpus/<target>/regression-<name>` and replayed here
//! under a name that says what it reproduces. A finding in `core/` or `sim/` that is not fixed yet
//! is `#[ignore]`d with the bug named; the fuzz crate's own model bugs are fixed in `src/`.
//!
//! Findings of an input format since replaced are kept as readable cases (`regressions()` in the
//! target's module, written by `examples/write_seeds.rs`) that rebuild the same situation in the
//! current format.

use std::path::Path;

fn replay(target: &str, name: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
        .join(format!("regression-{name}"));
    let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let check = ruccl_fuzz::TARGETS
        .iter()
        .find(|(candidate, _)| *candidate == target)
        .map(|(_, check)| *check)
        .unwrap_or_else(|| panic!("no target {target}"));
    check(&bytes);
}

/// `rendezvous_script` (v1 format, re-expressed), found in its first minute: generation 2 plans
/// `finish:error` (an every-generation fault) and `drop:what=work`. The decorator's `finish`
/// returns the injected error and drops the armed work on the way out, so every rank gets `Panicked
/// { phase: Finish, message: "injected panic in drop of the work in generation 2" }`, not the
/// finish error. Agreement held; the fuzz model predicted the wrong error and now knows that an
/// armed work's panic replaces a `finish` error (a `finish` panic still wins).
#[test]
fn a_finish_error_with_an_armed_work_delivers_the_work_panic() {
    replay("rendezvous_script", "finish_error_with_armed_work");
}

/// `rendezvous_script` (v1 format, re-expressed), found after half a minute as a LeakSanitizer
/// report of 32 bytes from glibc's `__cxa_thread_atexit_impl`: the script's sticky probes (and
/// bad-rank probes) called the communicator from libFuzzer's own thread, where the first touch of a
/// thread-local with a destructor registers it in an allocation that outlives the input. Not a leak
/// in the core; the targets now run every input on a thread of their own
/// (`harness::on_own_thread`). The script — an abort before phase 0 with stickiness probed, then a
/// concurrent abort racing four generations of a fresh communicator — must pass.
#[test]
fn sticky_probes_after_an_abort_before_and_a_concurrent_abort_agree() {
    replay("rendezvous_script", "sticky_probes_on_the_fuzzing_thread");
}

/// `sim_contract` (v1 format, re-expressed), found at once: a NaN element in an input made the
/// harness's "prepare keeps the tensor unchanged" check fail, since `SimTensor`'s `PartialEq`
/// follows IEEE (NaN ≠ NaN). The device was right; the harness now compares bit patterns (any NaN
/// matching any NaN).
#[test]
fn prepare_keeps_nan_elements() {
    replay("sim_contract", "nan_inputs_through_prepare");
}

/// `sim_contract` (v1 format, re-expressed), found after 20 s: an exchange whose ranges are
/// `0..usize::MAX` on two ranks. The harness's own list of acceptable errors overflowed; the device
/// answered `RangeOutOfBounds`, as it should.
#[test]
fn ranges_of_maximal_length_are_out_of_bounds() {
    replay("sim_contract", "ranges_of_maximal_length");
}

/// `rendezvous_script` (v1 format, re-expressed), found after 45 s as a LeakSanitizer report of a
/// thread handle (48 bytes) spawned for a concurrent abort of five ranks' single generation. The
/// harness left that thread to `thread::scope`, which returns once the closure has returned but
/// before the thread has exited and dropped its handle; the harness now joins it. The script must
/// pass.
#[test]
fn a_concurrent_abort_of_five_ranks_agrees() {
    replay(
        "rendezvous_script",
        "concurrent_abort_thread_exits_before_the_check",
    );
}

/// `sim_contract`, found in the first seconds of the v2 target: a generation begun with the ring
/// all-gather plan for 2 ranks × 2 elements (buffers of 4) and finished with the all-gather plan
/// for 2 ranks × 7. `SimDevice::finish` compared only the collective and the world, then sliced
/// each rank's output `0..14` out of a buffer of 4 and panicked ("range end index 14 out of range
/// for slice of length 4") — the device promises typed errors, never panics. Fixed in
/// `sim/src/device/mod.rs`: `finish` also compares the input and buffer lengths and answers
/// `PlanChanged`.
#[test]
fn finish_with_a_plan_for_longer_inputs_is_plan_changed() {
    replay("sim_contract", "finish_with_a_longer_plan");
}

/// `plans`, found after 40 s: the direct all-reduce of `Product` on 7 ranks × 12 f32 elements, NaNs
/// among the inputs. Every rank folds the same tree `((x0 ⊕ x1) ⊕ …) ⊕ x6`, and every element
/// matches it, but rank 5's output differed from rank 0's in NaN payloads: the device folds through
/// other kernels depending on where the receiver's own value falls (`Accumulate`, `AccumulateLeft`,
/// `Combine`), and Rust leaves the payload of an operation on two NaNs open, so the compiled loops
/// may propagate either operand's. Not a fault of the plan; DESIGN.md's bitwise agreement holds up
/// to NaN payloads, and the target now compares ranks with any NaN matching any NaN.
#[test]
fn nan_payloads_may_differ_across_ranks_of_one_tree() {
    replay("plans", "nan_payloads_of_a_direct_product");
}
