//! # ruccl-fuzz
//!
//! The fuzz targets of ruCCL, as library code: each `fuzz_targets/<name>.rs` is one line that
//! hands the input to [`<name>::check`](plans::check), which decodes it into operations, runs them
//! against the real core and simulated device, and panics if any result differs from a simple
//! reference. `tests/replay.rs` feeds every file of `corpus/<name>/` to the same function on
//! stable, so CI replays the corpora without nightly.
//!
//! | module                  | target              | checks                                                 |
//! |-------------------------|---------------------|--------------------------------------------------------|
//! | [`plans`]               | `plans`             | `Plan::new`, `Plan::from_parts` and `verify` vs a brute-force element simulator; accepted plans on the device |
//! | [`sim_contract`]        | `sim_contract`      | `SimDevice` vs a sequential model of the v3 contract, or a typed error |
//! | [`rendezvous_script`]   | `rendezvous_script` | DESIGN.md's properties for mixed collectives under mismatches, faults, aborts, timeouts |
//! | [`fault_spec_parse`]    | `fault_spec_parse`  | fault spec/plan text: no panic, canonical round trip    |
//! | [`registry_ops`]        | `registry_ops`      | the registry's sharing and replacement rules            |
//! | [`msccl`]               | `msccl`             | MSCCL XML: `parse`/`check`/`lower` never panic and agree with `Plan::from_parts`; accepted plans export back |
//!
//! Inputs decode with [`bytes::Reader`], which never fails; [`bytes::Writer`] encodes readable
//! cases back into bytes for the seed corpora (`cargo run --example write_seeds`). Values are
//! checked against the sim crate's public references: its plan interpreter
//! ([`interpret`](ruccl_sim::conformance::interpret)) bit for bit, and its exact
//! [`reference`](ruccl_sim::conformance::reference) of each collective.

pub mod bytes;
pub mod fault_spec_parse;
pub mod harness;
pub mod msccl;
pub mod plans;
pub mod registry_ops;
pub mod rendezvous_script;
pub mod sim_contract;
pub mod values;

/// A target's check: decode the input, run it, panic on any violation.
pub type Check = fn(&[u8]);

/// Every target: its name (the `fuzz_targets/` file and `corpus/` folder) and its check.
pub const TARGETS: &[(&str, Check)] = &[
    ("plans", plans::check),
    ("rendezvous_script", rendezvous_script::check),
    ("sim_contract", sim_contract::check),
    ("fault_spec_parse", fault_spec_parse::check),
    ("registry_ops", registry_ops::check),
    ("msccl", msccl::check),
];

/// The readable seed inputs of every target: `(target, name, bytes)`. `examples/write_seeds.rs`
/// writes them to `corpus/<target>/seed-<name>`.
pub fn seed_inputs() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (name, case) in plans::seeds() {
        seeds.push(("plans", name, case.encode()));
    }
    for (name, script) in rendezvous_script::seeds() {
        seeds.push(("rendezvous_script", name, script.encode()));
    }
    for (name, case) in sim_contract::seeds() {
        seeds.push(("sim_contract", name, case.encode()));
    }
    for (name, bytes) in fault_spec_parse::seeds() {
        seeds.push(("fault_spec_parse", name, bytes));
    }
    for (name, operations) in registry_ops::seeds() {
        seeds.push(("registry_ops", name, registry_ops::encode(&operations)));
    }
    for (name, bytes) in msccl::seeds() {
        seeds.push(("msccl", name, bytes));
    }
    seeds
}

/// Regressions kept as readable cases (inputs found in an older input format, re-expressed):
/// `(target, name, bytes)`. `examples/write_seeds.rs` writes them to
/// `corpus/<target>/regression-<name>`; `tests/regressions.rs` replays each by name.
pub fn regression_inputs() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut regressions = Vec::new();
    for (name, script) in rendezvous_script::regressions() {
        regressions.push(("rendezvous_script", name, script.encode()));
    }
    for (name, case) in sim_contract::regressions() {
        regressions.push(("sim_contract", name, case.encode()));
    }
    regressions
}
