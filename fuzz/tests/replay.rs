//! Every file of every committed corpus (`corpus/<target>/*`) replays through its target's check,
//! on stable, as an ordinary test; and every readable seed passes.
//!
//! `RUCCL_FUZZ_CORPUS=<folder>` replays `<folder>/<target>/*` instead, e.g. a grown corpus:
//! `RUCCL_FUZZ_CORPUS=$PWD/fuzz/grown cargo test --release --manifest-path fuzz/Cargo.toml --test replay`.

use ruccl_fuzz::TARGETS;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// The corpus files of `target`, sorted by name.
fn corpus_files(target: &str) -> Vec<PathBuf> {
    let root = std::env::var_os("RUCCL_FUZZ_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"),
        PathBuf::from,
    );
    let folder = root.join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap_or_else(|error| panic!("{}: {error}", folder.display()))
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|error| panic!("{}: {error}", folder.display()));
    files.retain(|path| path.is_file());
    files.sort();
    files
}

/// Replay every corpus file of `target`; fail listing every file whose check panicked.
fn replay(target: &str) {
    let check = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, check)| *check)
        .unwrap_or_else(|| panic!("no target {target}"));
    let files = corpus_files(target);
    assert!(!files.is_empty(), "corpus/{target} is empty");
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let bytes =
                std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            catch_unwind(AssertUnwindSafe(|| check(&bytes))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} corpus files of {target} fail: {failed:#?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn every_target_has_a_corpus_folder() {
    for (target, _) in TARGETS {
        assert!(!corpus_files(target).is_empty(), "corpus/{target} is empty");
    }
}

#[test]
fn the_plans_corpus_replays() {
    replay("plans");
}

#[test]
fn the_rendezvous_script_corpus_replays() {
    replay("rendezvous_script");
}

#[test]
fn the_sim_contract_corpus_replays() {
    replay("sim_contract");
}

#[test]
fn the_fault_spec_parse_corpus_replays() {
    replay("fault_spec_parse");
}

#[test]
fn the_registry_ops_corpus_replays() {
    replay("registry_ops");
}

#[test]
fn the_msccl_corpus_replays() {
    replay("msccl");
}

#[test]
fn the_readable_seeds_pass() {
    for (target, name, bytes) in ruccl_fuzz::seed_inputs() {
        let check = TARGETS
            .iter()
            .find(|(candidate, _)| *candidate == target)
            .map(|(_, check)| *check)
            .unwrap_or_else(|| panic!("no target {target}"));
        if catch_unwind(AssertUnwindSafe(|| check(&bytes))).is_err() {
            panic!("seed {target}/{name} fails");
        }
    }
}
