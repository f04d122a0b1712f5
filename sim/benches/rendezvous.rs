//! Rendezvous latency: a one-element all-reduce per generation on simulated devices, against one
//! round of `std::sync::Barrier` and one round of a minimal spin-then-yield barrier, for W = 2, 4,
//! 8 ranks, all with persistent threads (criterion's `iter_custom`; nothing is spawned per
//! iteration). Each group holds the three at one W; the ratios are printed at the end.
//!
//! `cargo bench -p ruccl-sim --bench rendezvous`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails loudly

mod common;

use common::{Crew, load_average, median, pretty, record};
use criterion::{BenchmarkId, Criterion};
use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation};
use ruccl_sim::{HostTensors, HostValues, SimDevice, SimTensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const WORLDS: [usize; 3] = [2, 4, 8];
/// Builds the crew of one contender for a world.
type MakeCrew = fn(usize) -> Crew;
const SAMPLES: usize = 30;

/// The minimal spin-then-yield barrier: an arrival counter and a generation; the last to arrive
/// resets the counter and bumps the generation, the others spin on the generation (with the CPU's
/// spin hint for a while, then yielding the core each poll).
struct SpinYieldBarrier {
    parties: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

/// Polls with the spin hint before a waiter starts yielding.
const SPINS_BEFORE_YIELD: u32 = 128;

impl SpinYieldBarrier {
    fn new(parties: usize) -> Self {
        Self {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0;
        while self.generation.load(Ordering::Acquire) == generation {
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

fn all_reduce_crew(world: usize) -> Crew {
    let device = SimDevice::new();
    let devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
    let communicator = Arc::new(NativeCommunicator::new(devices, device.clone()).unwrap());
    Crew::new(world, |rank| {
        let communicator = Arc::clone(&communicator);
        let id = DeviceId::new(rank as u32);
        let mut tensor: Option<SimTensor> =
            Some(device.upload(id, &HostValues::F32(vec![1.0])).unwrap());
        Box::new(move || {
            let input = tensor.take().unwrap();
            let output = communicator
                .all_reduce(rank, input, ReduceOperation::Sum)
                .unwrap();
            tensor = Some(output);
        })
    })
}

fn std_barrier_crew(world: usize) -> Crew {
    let barrier = Arc::new(Barrier::new(world));
    Crew::new(world, |_| {
        let barrier = Arc::clone(&barrier);
        Box::new(move || {
            barrier.wait();
        })
    })
}

fn spin_barrier_crew(world: usize) -> Crew {
    let barrier = Arc::new(SpinYieldBarrier::new(world));
    Crew::new(world, |_| {
        let barrier = Arc::clone(&barrier);
        Box::new(move || barrier.wait())
    })
}

fn bench(criterion: &mut Criterion) {
    for world in WORLDS {
        let mut group = criterion.benchmark_group(format!("rendezvous/W={world}"));
        group
            .sample_size(SAMPLES)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let crews: [(&str, MakeCrew); 3] = [
            ("all_reduce_1xf32", all_reduce_crew),
            ("std_barrier", std_barrier_crew),
            ("spin_yield_barrier", spin_barrier_crew),
        ];
        for (name, make) in crews {
            let mut crew = make(world);
            let id = format!("{name}/W={world}");
            group.bench_function(BenchmarkId::new(name, world), |bencher| {
                bencher.iter_custom(|iters| record(&id, iters, crew.run(iters)));
            });
        }
        group.finish();
    }
}

fn summary() {
    println!(
        "\nrendezvous latency, medians of the last {SAMPLES} samples (load average {}):",
        load_average()
    );
    println!(
        "{:>3}  {:>12}  {:>12}  {:>12}  {:>14}  {:>14}",
        "W", "all_reduce", "Barrier", "spin-yield", "ar / Barrier", "ar / spin-yield"
    );
    for world in WORLDS {
        let get = |name: &str| median(&format!("{name}/W={world}"), SAMPLES);
        if let (Some(all_reduce), Some(barrier), Some(spin)) = (
            get("all_reduce_1xf32"),
            get("std_barrier"),
            get("spin_yield_barrier"),
        ) {
            println!(
                "{world:>3}  {:>12}  {:>12}  {:>12}  {:>14.3}  {:>14.2}",
                pretty(all_reduce),
                pretty(barrier),
                pretty(spin),
                all_reduce / barrier,
                all_reduce / spin
            );
        }
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    summary();
}
