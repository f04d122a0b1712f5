//! The sim crate's device conformance suite (every collective × algorithm × type × operation it
//! covers, crafted steps, validation), on the CUDA executor: logical ranks on each GPU sharing
//! its primary context (the default) and with a context each, and (with two or more GPUs) one
//! rank per GPU and ranks dealt round-robin over the GPUs.
//!
//! `RUCCL_CUDA_CONFORMANCE=quick` runs `ConformanceConfig::quick()`; by default the full matrix
//! runs, over the worlds each map can seat (up to 8 ranks).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use ruccl_cuda::{ContextPolicy, CudaConfig, DeviceMap};
use ruccl_sim::conformance::{self, ConformanceConfig};

fn config(max_world: usize) -> ConformanceConfig {
    let base = match std::env::var("RUCCL_CUDA_CONFORMANCE").as_deref() {
        Ok("quick") => ConformanceConfig::quick(),
        _ => ConformanceConfig::default(),
    };
    let mut worlds: Vec<usize> = base
        .worlds
        .iter()
        .copied()
        .filter(|&world| world <= max_world)
        .collect();
    if !worlds.contains(&2) {
        worlds.push(2);
        worlds.sort_unstable();
    }
    ConformanceConfig { worlds, ..base }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn the_cuda_executor_passes_the_conformance_suite_on_every_map() {
    let _watchdog = common::watchdog("conformance");
    let Some(gpus) = common::gpus("conformance") else {
        return;
    };
    for (name, map) in common::maps(gpus) {
        let device = common::executor(map.clone(), CudaConfig::from_env());
        let config = config(map.len());
        let report = conformance::run(&device, |world| common::first_devices(&map, world), &config);
        println!(
            "conformance, {name} (worlds {:?}):\n{report}",
            config.worlds
        );
        report.assert_passed();
    }
}

/// The same suite with every further logical rank on GPU 0 in a context of its own
/// ([`ContextPolicy::Separate`], the option; a refused context fails): copies between ranks are
/// then inter-context peer copies, as between GPUs.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn the_cuda_executor_passes_the_conformance_suite_with_a_context_per_rank() {
    let _watchdog = common::watchdog("conformance_separate");
    let Some(_) = common::gpus("conformance_separate") else {
        return;
    };
    let map = DeviceMap::logical(0, common::logical_ranks()).expect("a map");
    let device = common::executor(
        map.clone(),
        CudaConfig::from_env().with_contexts(ContextPolicy::Separate),
    );
    let config = config(map.len());
    let report = conformance::run(&device, |world| common::first_devices(&map, world), &config);
    println!("conformance, a context per logical rank:\n{report}");
    report.assert_passed();
}
