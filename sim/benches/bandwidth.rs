//! Simulated all-reduce time against plain copy loops, W = 4 ranks of f32, persistent rank threads.
//! Every all-reduce is the ring plan ([`Algorithm::Ring`], asked for by name through
//! `NativeCommunicator::collective`), whose traffic the copy loops reproduce.
//!
//! - `allreduce_vs_copy/SIZE`, 4 B … 64 MiB: the ring all-reduce (default device: all cores)
//!   against a copy loop over the same bytes (one rank's message, one thread).
//! - `ring_bound/64MiB`: the ring all-reduce with the device on one thread and on all cores, against a
//!   copy loop (one thread) moving the minimum memory traffic of the ring: per rank and step, a
//!   reduce-scatter transfer reads the source and reads and writes the destination chunk, an
//!   all-gather transfer reads the source and writes the destination chunk — `5(W-1)·n` element
//!   accesses over all ranks. A copy loop of `b` bytes reads `b` and writes `b`, so it copies half
//!   that traffic, chunk by chunk between the same `W` buffers of `n` elements the ranks use.
//!
//! The copy loops use `copy_from_slice` (`memcpy`) between buffers at the same offset modulo the
//! page size, the fast case of glibc's `memcpy`. The ratios are printed at the end.
//!
//! `cargo bench -p ruccl-sim --bench bandwidth`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails loudly

mod common;

use common::{Crew, load_average, median, pretty, record};
use criterion::{BenchmarkId, Criterion};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCommunicator, ReduceOperation,
};
use ruccl_sim::{HostTensors, HostValues, SimDevice, SimTensor};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WORLD: usize = 4;
/// 4 B … 64 MiB by factors of 16.
const SIZES: [usize; 7] = [4, 64, 1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20];
const BOUND_BYTES: usize = 64 << 20;
const SAMPLES: usize = 10;

fn all_reduce_crew(bytes: usize, threads: Option<usize>) -> Crew {
    let mut builder = SimDevice::builder();
    if let Some(threads) = threads {
        builder = builder.threads(threads);
    }
    let device = builder.build();
    let devices: Vec<DeviceId> = (0..WORLD as u32).map(DeviceId::new).collect();
    let communicator = Arc::new(NativeCommunicator::new(devices, device.clone()).unwrap());
    let length = bytes / 4;
    Crew::new(WORLD, |rank| {
        let communicator = Arc::clone(&communicator);
        let values = HostValues::F32((0..length).map(|index| (index % 7) as f32).collect());
        let mut tensor: Option<SimTensor> =
            Some(device.upload(DeviceId::new(rank as u32), &values).unwrap());
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        let ring = CollectiveOptions::default().with_algorithm(Algorithm::Ring);
        Box::new(move || {
            let input = tensor.take().unwrap();
            tensor = Some(communicator.collective(rank, input, sum, ring).unwrap());
        })
    })
}

/// `iters` copies of `bytes` from one buffer to another (one thread).
fn copy_message(bytes: usize, iters: u64) -> Duration {
    let length = bytes.div_ceil(4);
    let source = vec![1.0f32; length];
    let mut destination = vec![0.0f32; length];
    destination.copy_from_slice(&source);
    let start = Instant::now();
    for _ in 0..iters {
        destination.copy_from_slice(black_box(&source));
        black_box(&mut destination);
    }
    start.elapsed()
}

/// The ring's minimum traffic for `W` ranks of `length` elements, moved by copy loops: `5(W-1)`
/// half-chunk copies per rank, each from a rank's buffer to its successor's, at the same offset.
struct RingBoundCopy {
    buffers: Vec<Vec<f32>>,
}

impl RingBoundCopy {
    fn new(length: usize) -> Self {
        let buffers: Vec<Vec<f32>> = (0..WORLD).map(|rank| vec![rank as f32; length]).collect();
        Self { buffers }
    }

    fn run(&mut self, iters: u64) -> Duration {
        let length = self.buffers[0].len();
        let half_chunk = length / WORLD / 2;
        let pieces = length / half_chunk;
        let copies_per_rank = 5 * (WORLD - 1);
        let start = Instant::now();
        for _ in 0..iters {
            for copy in 0..copies_per_rank {
                for rank in 0..WORLD {
                    let piece = (copy + 2 * rank) % pieces;
                    let range = piece * half_chunk..(piece + 1) * half_chunk;
                    let successor = (rank + 1) % WORLD;
                    let (from, to) = pair(&mut self.buffers, rank, successor);
                    to[range.clone()].copy_from_slice(black_box(&from[range]));
                }
            }
        }
        start.elapsed()
    }
}

fn pair(buffers: &mut [Vec<f32>], from: usize, to: usize) -> (&[f32], &mut [f32]) {
    if from < to {
        let (low, high) = buffers.split_at_mut(to);
        (&low[from], &mut high[0])
    } else {
        let (low, high) = buffers.split_at_mut(from);
        (&high[0], &mut low[to])
    }
}

fn label(bytes: usize) -> String {
    match bytes {
        bytes if bytes >= 1 << 20 => format!("{}MiB", bytes >> 20),
        bytes if bytes >= 1 << 10 => format!("{}KiB", bytes >> 10),
        bytes => format!("{bytes}B"),
    }
}

fn bench_sizes(criterion: &mut Criterion) {
    for bytes in SIZES {
        let mut group = criterion.benchmark_group(format!("allreduce_vs_copy/{}", label(bytes)));
        group
            .sample_size(SAMPLES)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let mut crew = all_reduce_crew(bytes, None);
        let id = format!("all_reduce/{bytes}");
        group.bench_function(BenchmarkId::new("all_reduce", label(bytes)), |bencher| {
            bencher.iter_custom(|iters| record(&id, iters, crew.run(iters)));
        });
        drop(crew);
        let id = format!("copy_message/{bytes}");
        group.bench_function(BenchmarkId::new("copy_message", label(bytes)), |bencher| {
            bencher.iter_custom(|iters| record(&id, iters, copy_message(bytes, iters)));
        });
        group.finish();
    }
}

fn bench_bound(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("ring_bound/64MiB");
    group
        .sample_size(SAMPLES)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (name, threads) in [
        ("all_reduce_1_thread", Some(1)),
        ("all_reduce_all_cores", None),
    ] {
        let mut crew = all_reduce_crew(BOUND_BYTES, threads);
        group.bench_function(name, |bencher| {
            bencher.iter_custom(|iters| record(name, iters, crew.run(iters)));
        });
    }
    let mut copy = RingBoundCopy::new(BOUND_BYTES / 4);
    group.bench_function("copy_ring_bound", |bencher| {
        bencher.iter_custom(|iters| record("copy_ring_bound", iters, copy.run(iters)));
    });
    group.finish();
}

fn summary() {
    println!(
        "\nall-reduce (W = {WORLD}, f32) against copy loops, medians of the last {SAMPLES} samples (load average {}):",
        load_average()
    );
    println!(
        "{:>9}  {:>12}  {:>12}  {:>10}",
        "size", "all_reduce", "copy", "ratio"
    );
    for bytes in SIZES {
        if let (Some(all_reduce), Some(copy)) = (
            median(&format!("all_reduce/{bytes}"), SAMPLES),
            median(&format!("copy_message/{bytes}"), SAMPLES),
        ) {
            println!(
                "{:>9}  {:>12}  {:>12}  {:>10.2}",
                label(bytes),
                pretty(all_reduce),
                pretty(copy),
                all_reduce / copy
            );
        }
    }
    if let Some(bound) = median("copy_ring_bound", SAMPLES) {
        println!(
            "\n64 MiB against the ring's minimum traffic moved by a copy loop ({}):",
            pretty(bound)
        );
        for name in ["all_reduce_1_thread", "all_reduce_all_cores"] {
            if let Some(time) = median(name, SAMPLES) {
                println!(
                    "  {name:<22} {:>10}  {:.2}x the bound",
                    pretty(time),
                    time / bound
                );
            }
        }
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_sizes(&mut criterion);
    bench_bound(&mut criterion);
    criterion.final_summary();
    summary();
}
