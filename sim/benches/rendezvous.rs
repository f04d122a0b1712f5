//! Rendezvous latency: a one-element all-reduce per generation, against one round of
//! `std::sync::Barrier` and one round of a minimal spin-then-yield barrier, for W = 2, 4, 8 ranks,
//! all with persistent threads (criterion's `iter_custom`; nothing is spawned per iteration).
//! The all-reduce runs three ways: on the default simulated device (its census and traffic
//! ledger kept), on one without those books (as the perf tool times it), and on a minimal host
//! device that checks nothing — what the core's rendezvous costs by itself. Each group holds the
//! five at one W; the ratios are printed at the end.
//!
//! `cargo bench -p ruccl-sim --bench rendezvous`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails loudly

mod common;

use common::{Crew, load_average, median, pretty, record};
use criterion::{BenchmarkId, Criterion};
use ruccl_core::{
    DeviceId, LinkModel, NativeCollectiveDevice, NativeCommunicator, Plan, ReduceOperation, Step,
    TensorInfo,
};
use ruccl_sim::{ElementType, HostTensors, HostValues, SimDevice, SimTensor};
use std::convert::Infallible;
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

/// The core's rendezvous by itself: a host device that checks nothing and sums f32 tensors in
/// place, each step reading a copy of the state before it (the contract's pre-step reads; it
/// folds in transfer order, not the contract's rank order, which a sum of ones does not see).
/// Plans are priced with the simulated device's model, so `Auto` picks the same ones.
#[derive(Clone)]
struct MinimalDevice {
    model: LinkModel,
}

impl NativeCollectiveDevice for MinimalDevice {
    type Tensor = Vec<f32>;
    type Prepared = Vec<f32>;
    /// Every rank's buffer, and the copy a step reads from.
    type Work = (Vec<Vec<f32>>, Vec<Vec<f32>>);
    type Error = Infallible;

    fn prepare(&self, tensor: Vec<f32>, _: DeviceId) -> Result<Vec<f32>, Infallible> {
        Ok(tensor)
    }

    fn describe(&self, input: &Vec<f32>) -> TensorInfo {
        TensorInfo {
            len: input.len(),
            element: ElementType::F32,
        }
    }

    fn begin(
        &self,
        _: &[DeviceId],
        inputs: Vec<Vec<f32>>,
        _: &Plan,
    ) -> Result<Self::Work, Infallible> {
        let before = inputs.clone();
        Ok((inputs, before))
    }

    fn exchange(&self, work: &mut Self::Work, step: &Step) -> Result<(), Infallible> {
        let (buffers, before) = work;
        for (copy, buffer) in before.iter_mut().zip(buffers.iter()) {
            copy.copy_from_slice(buffer);
        }
        for transfer in &step.transfers {
            let sources = &before[transfer.from][transfer.range.clone()];
            let targets = &mut buffers[transfer.to][transfer.range.clone()];
            for (target, source) in targets.iter_mut().zip(sources) {
                *target = if step.combine {
                    *target + source
                } else {
                    *source
                };
            }
        }
        Ok(())
    }

    fn finish(&self, work: Self::Work, _: &Plan) -> Result<Vec<Vec<f32>>, Infallible> {
        Ok(work.0)
    }

    fn link_model(&self) -> LinkModel {
        self.model
    }
}

/// Ranks that all-reduce one element per round on `device`, each feeding its output back.
fn all_reduce_crew_on<D: NativeCollectiveDevice>(
    world: usize,
    device: D,
    upload: impl Fn(&D, DeviceId) -> D::Tensor,
) -> Crew {
    let devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
    let communicator = Arc::new(NativeCommunicator::new(devices, device.clone()).unwrap());
    Crew::new(world, |rank| {
        let communicator = Arc::clone(&communicator);
        let mut tensor = Some(upload(&device, DeviceId::new(rank as u32)));
        Box::new(move || {
            let input = tensor.take().unwrap();
            let output = communicator
                .all_reduce(rank, input, ReduceOperation::Sum)
                .unwrap();
            tensor = Some(output);
        })
    })
}

fn upload_one(device: &SimDevice, id: DeviceId) -> SimTensor {
    device.upload(id, &HostValues::F32(vec![1.0])).unwrap()
}

fn all_reduce_crew(world: usize) -> Crew {
    all_reduce_crew_on(world, SimDevice::new(), upload_one)
}

fn all_reduce_bare_crew(world: usize) -> Crew {
    let device = SimDevice::builder()
        .census(false)
        .record_traffic(false)
        .build();
    all_reduce_crew_on(world, device, upload_one)
}

fn all_reduce_minimal_crew(world: usize) -> Crew {
    let device = MinimalDevice {
        model: SimDevice::new().model(),
    };
    all_reduce_crew_on(world, device, |_, _| vec![1.0])
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
        let crews: [(&str, MakeCrew); 5] = [
            ("all_reduce_1xf32", all_reduce_crew),
            ("all_reduce_1xf32_no_books", all_reduce_bare_crew),
            ("all_reduce_1xf32_minimal_device", all_reduce_minimal_crew),
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
        "\nrendezvous latency, medians of the last {SAMPLES} samples (load average {}); \
         ratios against std's Barrier and the spin-then-yield barrier:",
        load_average()
    );
    println!(
        "{:>3}  {:>22}  {:>10}  {:>10}  {:>10}  {:>10}",
        "W", "all_reduce on", "time", "Barrier", "/ Barrier", "/ spin-yield"
    );
    let contenders = [
        ("all_reduce_1xf32", "the simulated device"),
        ("all_reduce_1xf32_no_books", "it, without books"),
        ("all_reduce_1xf32_minimal_device", "a minimal device"),
    ];
    for world in WORLDS {
        let get = |name: &str| median(&format!("{name}/W={world}"), SAMPLES);
        let (Some(barrier), Some(spin)) = (get("std_barrier"), get("spin_yield_barrier")) else {
            continue;
        };
        println!(
            "{world:>3}  {:>22}  {:>10}  {:>10}",
            "(spin-yield barrier)",
            pretty(spin),
            pretty(barrier)
        );
        for (name, label) in contenders {
            if let Some(time) = get(name) {
                println!(
                    "{world:>3}  {label:>22}  {:>10}  {:>10}  {:>10.3}  {:>10.2}",
                    pretty(time),
                    "",
                    time / barrier,
                    time / spin
                );
            }
        }
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    summary();
}
