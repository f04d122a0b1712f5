//! Calibrates the simulated device's link model (`SIM_ALPHA_SECONDS`, `SIM_TRANSFER_SECONDS`,
//! `SIM_BETA_BYTES_PER_SECOND` in `sim/src/device/mod.rs`) from the device alone, and checks
//! what `Auto` would pick with it.
//!
//! Every built-in plan (collective × ring, direct, halving-doubling × W = 2, 4, 8 × 4 B … 1 MiB
//! of f32) runs through the device's trait on one thread — `begin`, one `exchange` per step,
//! `finish`, no rendezvous — and its time per generation is the median of many, the plans of a
//! group taking turns generation by generation. Within one
//! (collective, W, size) the algorithms share everything but their steps, so the fit works on
//! the differences from each group's mean: time = α·steps + γ·transfers + bytes/β, where
//! `transfers` counts the non-empty transfers and the ranges copied aside and `bytes` the
//! elements moved and copied aside, as [`LinkModel`] prices a shared link. Least squares,
//! weighted by 1/(group mean time), so that small and large messages count alike.
//!
//! It prints the fitted α, γ, β; then, per group, the algorithm the fitted model picks, the
//! fastest measured one, and the ratio (picked / fastest) — what `auto_vs_fixed.py` measures
//! through the whole rendezvous, here without the threads' noise.
//!
//! `cargo bench -p ruccl-sim --bench device_model`; in the environment, `POOL_BYTES=0` makes a
//! device that keeps no allocations for reuse, `ONLY=text` measures only the groups whose name
//! (as printed) contains `text`, and `MAX_BYTES=16777216` adds sizes past 1 MiB, by factors of 4
//! up to that many bytes per rank, at most 64 MiB (the fit then weighs them like the others).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails loudly

use ruccl_core::{Algorithm, Collective, DeviceId, LinkModel, Links, NativeCollectiveDevice, Plan};
use ruccl_sim::{HostTensors, HostValues, SimDevice};
use std::hint::black_box;
use std::time::{Duration, Instant};

const WORLDS: [usize; 3] = [2, 4, 8];
const FIXED: [Algorithm; 3] = [
    Algorithm::Ring,
    Algorithm::Direct,
    Algorithm::HalvingDoubling,
];
/// 4 B … 1 MiB by factors of 4.
const SIZES: [usize; 10] = [
    4,
    16,
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];
/// The most `MAX_BYTES` may ask for, per rank.
const MAX_BYTES_LIMIT: usize = 64 << 20;
/// Generations of one plan in a row, the first not counted ([`time_plans`]).
const BATCH: usize = 4;
/// Time spent per plan, at least.
const BUDGET: Duration = Duration::from_millis(40);

/// One measured plan and the quantities the model prices.
struct Sample {
    algorithm: Algorithm,
    steps: f64,
    transfers: f64,
    bytes: f64,
    seconds: f64,
}

/// The median time of one generation of each of `plans` on `device`, inputs made outside the
/// timing. The plans take turns, [`BATCH`] generations each, so that whatever drifts during a
/// group (the allocations the device keeps, the caches, the machine) weighs on all of them
/// alike — a plan measured whole after another ran on that one's leftovers (halving-doubling
/// measured after direct looked 1.4–1.5× slower than ring at W = 4, 4 MiB per rank). The first
/// generation of each turn is not counted: it pays for the
/// switch (the device lays out steps it did not run last time), which a communicator running
/// one plan generation after generation does not.
fn time_plans(device: &SimDevice, plans: &[Plan]) -> Vec<f64> {
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); plans.len()];
    let values: Vec<HostValues> = plans
        .iter()
        .map(|plan| HostValues::F32((0..plan.input_len()).map(|i| (i % 7) as f32).collect()))
        .collect();
    let started = Instant::now();
    let budget = BUDGET * plans.len() as u32;
    while started.elapsed() < budget || times[0].len() < 20 {
        for ((plan, values), times) in plans.iter().zip(&values).zip(&mut times) {
            time_generation(device, plan, values);
            for _ in 1..BATCH {
                times.push(time_generation(device, plan, values));
            }
        }
    }
    times
        .into_iter()
        .map(|mut times| {
            times.sort_by(f64::total_cmp);
            times[times.len() / 2]
        })
        .collect()
}

/// One generation of `plan` over `values` on every rank, timed from `begin` to `finish`.
fn time_generation(device: &SimDevice, plan: &Plan, values: &HostValues) -> f64 {
    let devices: Vec<DeviceId> = (0..plan.world() as u32).map(DeviceId::new).collect();
    let inputs: Vec<_> = devices
        .iter()
        .map(|&id| {
            device
                .prepare(device.upload(id, values).unwrap(), id)
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let mut work = device.begin(&devices, inputs, plan).unwrap();
    for step in plan.steps() {
        device.exchange(&mut work, step).unwrap();
    }
    let outputs = device.finish(work, plan).unwrap();
    let seconds = start.elapsed().as_secs_f64();
    black_box(outputs);
    seconds
}

/// Solve the 3×3 system `a·x = b` by Gaussian elimination with partial pivoting.
fn solve(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> [f64; 3] {
    for column in 0..3 {
        let pivot = (column..3)
            .max_by(|&i, &j| a[i][column].abs().total_cmp(&a[j][column].abs()))
            .unwrap();
        a.swap(column, pivot);
        b.swap(column, pivot);
        let pivot_row = a[column];
        for row in column + 1..3 {
            let factor = a[row][column] / pivot_row[column];
            for (entry, &above) in a[row].iter_mut().zip(&pivot_row).skip(column) {
                *entry -= factor * above;
            }
            b[row] -= factor * b[column];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let rest: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - rest) / a[row][row];
    }
    x
}

fn main() {
    // The device as the perf tool builds it (ledger of one generation), on one thread so that the
    // fit sees the device's own costs.
    let mut builder = SimDevice::builder().ledger_retention(Some(1)).threads(1);
    if let Ok(bytes) = std::env::var("POOL_BYTES") {
        builder = builder.pool_bytes(bytes.parse().expect("POOL_BYTES: a number of bytes"));
    }
    let device = builder.build();
    let only = std::env::var("ONLY").unwrap_or_default();
    let max_bytes: usize = std::env::var("MAX_BYTES").map_or(0, |bytes| {
        bytes.parse().expect("MAX_BYTES: a number of bytes")
    });
    // An all-gather at W = 8 holds 64 inputs' worth of outputs, and a copy of them.
    assert!(
        max_bytes <= MAX_BYTES_LIMIT,
        "MAX_BYTES: at most {MAX_BYTES_LIMIT} bytes per rank"
    );
    let largest = SIZES[SIZES.len() - 1];
    let sizes: Vec<usize> = SIZES
        .into_iter()
        .chain(
            std::iter::successors(Some(largest * 4), |bytes| bytes.checked_mul(4))
                .take_while(|&bytes| bytes <= max_bytes),
        )
        .collect();
    let shared = LinkModel::new(0.0, 1.0, Links::Shared).expect("a valid model");
    let mut groups: Vec<(String, Vec<Sample>)> = Vec::new();
    for world in WORLDS {
        for collective in Collective::KINDS {
            for &bytes in &sizes {
                let elements = (bytes / 4).max(1);
                let input_len = match collective {
                    Collective::ReduceScatter(_) => elements.next_multiple_of(world),
                    _ => elements,
                };
                let name = format!("{collective} W={world} {bytes} B");
                if !name.contains(&only) {
                    continue;
                }
                let (algorithms, plans): (Vec<Algorithm>, Vec<Plan>) = FIXED
                    .into_iter()
                    .filter_map(|algorithm| {
                        let plan = Plan::new(collective, algorithm, world, input_len).ok()?;
                        Some((algorithm, plan))
                    })
                    .unzip();
                let times = time_plans(&device, &plans);
                let mut samples = Vec::new();
                for ((algorithm, plan), seconds) in algorithms.into_iter().zip(&plans).zip(times) {
                    // Counted as the model counts them on a shared link (its α and β do not
                    // matter here).
                    let (mut transfers, mut moved) = (0, 0);
                    for step in plan.steps() {
                        transfers += shared.busiest_transfers(step, world);
                        moved += shared.busiest_elements(step, world);
                    }
                    samples.push(Sample {
                        algorithm,
                        steps: plan.steps().len() as f64,
                        transfers: transfers as f64,
                        bytes: (moved * 4) as f64,
                        seconds,
                    });
                }
                if samples.len() > 1 {
                    groups.push((name, samples));
                }
            }
        }
    }
    // Weighted least squares on the differences from each group's mean.
    let (mut a, mut b) = ([[0.0; 3]; 3], [0.0; 3]);
    for (_, samples) in &groups {
        let n = samples.len() as f64;
        let mean = |f: &dyn Fn(&Sample) -> f64| samples.iter().map(f).sum::<f64>() / n;
        let (steps, transfers, bytes, seconds) = (
            mean(&|s| s.steps),
            mean(&|s| s.transfers),
            mean(&|s| s.bytes),
            mean(&|s| s.seconds),
        );
        let weight = 1.0 / (seconds * seconds);
        for s in samples {
            let x = [s.steps - steps, s.transfers - transfers, s.bytes - bytes];
            let y = s.seconds - seconds;
            for i in 0..3 {
                for j in 0..3 {
                    a[i][j] += weight * x[i] * x[j];
                }
                b[i] += weight * x[i] * y;
            }
        }
    }
    let [alpha, gamma, inverse_beta] = solve(a, b);
    println!(
        "# fitted on {} groups: alpha {:.3} us per step, gamma {:.3} us per transfer, beta {:.2} GB/s",
        groups.len(),
        alpha * 1e6,
        gamma * 1e6,
        1e-9 / inverse_beta
    );
    let configured = SimDevice::new().model();
    // Too few groups (ONLY), or data that fit no bandwidth: compare with the configured model.
    let model = LinkModel::new(alpha.max(0.0), 1.0 / inverse_beta, Links::Shared)
        .and_then(|model| model.with_transfer_cost(gamma.max(0.0)))
        .unwrap_or_else(|error| {
            println!("# no fit ({error}); the fitted columns repeat the configured model");
            configured
        });
    println!(
        "# the device's configured model: alpha {:.3} us, gamma {:.3} us, beta {:.2} GB/s",
        configured.alpha() * 1e6,
        configured.transfer_cost() * 1e6,
        configured.beta() * 1e-9
    );
    println!(
        "# group | measured us (ring, direct, halving-doubling) | fitted pick | configured pick | fastest | fitted/fastest | configured/fastest"
    );
    let mut worst = (1.0f64, 1.0f64);
    let mut misses = (0, 0);
    for (name, samples) in &groups {
        let fastest = samples
            .iter()
            .min_by(|x, y| x.seconds.total_cmp(&y.seconds))
            .unwrap();
        let pick = |model: &LinkModel| {
            samples
                .iter()
                .min_by(|x, y| {
                    let price = |s: &Sample| {
                        model.alpha() * s.steps
                            + model.transfer_cost() * s.transfers
                            + s.bytes / model.beta()
                    };
                    price(x).total_cmp(&price(y))
                })
                .unwrap()
        };
        let (fitted, configured_pick) = (pick(&model), pick(&configured));
        let ratios = (
            fitted.seconds / fastest.seconds,
            configured_pick.seconds / fastest.seconds,
        );
        worst = (worst.0.max(ratios.0), worst.1.max(ratios.1));
        misses.0 += usize::from(ratios.0 > 1.10);
        misses.1 += usize::from(ratios.1 > 1.10);
        let times: Vec<String> = samples
            .iter()
            .map(|s| format!("{}={:.2}", s.algorithm, s.seconds * 1e6))
            .collect();
        println!(
            "{name} | {} | {} | {} | {} | {:.2} | {:.2}",
            times.join(" "),
            fitted.algorithm,
            configured_pick.algorithm,
            fastest.algorithm,
            ratios.0,
            ratios.1
        );
    }
    println!(
        "# picks above 1.10 of the fastest: fitted {} (worst {:.2}), configured {} (worst {:.2}), of {} groups",
        misses.0,
        worst.0,
        misses.1,
        worst.1,
        groups.len()
    );
}
