//! The traffic ledger counts what a real collective moves, per link, step and rank, exactly as
//! the plan says; the α–β model prices a recorded generation as it prices the plan, and the ring
//! as its closed form.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::sync::{Arc, thread};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCommunicator, Plan, ReduceOperation,
    TensorInfo,
};
use ruccl_sim::ledger::lower_bound_per_rank;
use ruccl_sim::{
    ElementType, GenerationTraffic, HostTensors, HostValues, LinkModel, Links, SimDevice,
};

const SUM: Collective = Collective::AllReduce(ReduceOperation::Sum);

/// Run one generation of `collective` via `algorithm` on f32 inputs of `length` elements over
/// `world` threads; return the plan the core resolved (as the suite resolves it) and the record.
fn run(
    device: &SimDevice,
    world: usize,
    collective: Collective,
    algorithm: Algorithm,
    length: usize,
) -> (Plan, GenerationTraffic) {
    let devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
    let communicator = Arc::new(NativeCommunicator::new(devices.clone(), device.clone()).unwrap());
    let handles: Vec<_> = devices
        .iter()
        .enumerate()
        .map(|(rank, &id)| {
            let communicator = Arc::clone(&communicator);
            let device = device.clone();
            thread::spawn(move || {
                let tensor = device
                    .upload(id, &HostValues::F32(vec![rank as f32; length]))
                    .unwrap();
                let options = CollectiveOptions::default().with_algorithm(algorithm);
                communicator
                    .collective(rank, tensor, collective, options)
                    .unwrap()
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let input = TensorInfo {
        len: length,
        element: ElementType::F32,
    };
    let plan = Plan::with_model(collective, algorithm, world, input, &device.model()).unwrap();
    let traffic = device.ledger().last().expect("the generation was recorded");
    (plan, traffic)
}

fn all_reduce(device: &SimDevice, world: usize, length: usize) -> GenerationTraffic {
    run(device, world, SUM, Algorithm::Ring, length).1
}

#[test]
fn a_ring_all_reduce_moves_exactly_two_w_minus_one_n_elements_around_the_ring() {
    let device = SimDevice::new();
    for world in 1usize..=6 {
        for length in [0, 1, world.saturating_sub(1), world, world + 1, 97, 1000] {
            let (plan, traffic) = run(&device, world, SUM, Algorithm::Ring, length);
            assert_eq!(traffic.world(), world);
            assert_eq!(traffic.input_len, length);
            assert_eq!(traffic.element_type, ElementType::F32);
            assert_eq!(
                (traffic.collective, traffic.algorithm),
                (SUM, Algorithm::Ring)
            );
            assert_eq!(traffic.steps.len(), plan.steps().len());
            assert_eq!(
                traffic.total_elements(),
                2 * (world - 1) * length,
                "W={world} n={length}"
            );
            assert_eq!(traffic.total_bytes(), 4 * traffic.total_elements() as u64);
            for rank in 0..world {
                assert_eq!(traffic.sent_by(rank), plan.elements_sent_by(rank));
                assert_eq!(traffic.received_by(rank), plan.elements_received_by(rank));
            }
            // Every link of the ring, and only those, carries something (once n ≥ W).
            for (&(from, to), &elements) in &traffic.link_elements() {
                assert_eq!(to, (from + 1) % world, "W={world} n={length}");
                assert!(elements > 0);
            }
            if length >= world && world > 1 {
                assert_eq!(traffic.link_elements().len(), world);
            }
        }
    }
}

#[test]
fn the_ledger_counts_every_link_of_every_collective_as_its_plan() {
    let device = SimDevice::new();
    let collectives = [
        SUM,
        Collective::ReduceScatter(ReduceOperation::Max),
        Collective::AllGather,
        Collective::Broadcast { root: 2 },
    ];
    for world in [3usize, 4] {
        for collective in collectives {
            for algorithm in Algorithm::BUILT_IN {
                if algorithm == Algorithm::HalvingDoubling && !world.is_power_of_two() {
                    continue;
                }
                let (plan, traffic) = run(&device, world, collective, algorithm, 6 * world);
                let mut planned = std::collections::BTreeMap::new();
                for transfer in plan.steps().iter().flat_map(|step| &step.transfers) {
                    *planned.entry((transfer.from, transfer.to)).or_insert(0) +=
                        transfer.range.len();
                }
                assert_eq!(
                    traffic.link_elements(),
                    planned,
                    "{collective} via {algorithm}, W={world}"
                );
                assert_eq!(traffic.algorithm, algorithm);
                for (step, recorded) in plan.steps().iter().zip(&traffic.steps) {
                    assert_eq!(recorded.combine, step.combine);
                }
            }
        }
    }
    // Direct all-reduce: every ordered pair of ranks carries the whole tensor once.
    let (_, traffic) = run(&device, 4, SUM, Algorithm::Direct, 10);
    assert_eq!(traffic.link_elements().len(), 12);
    assert!(
        traffic
            .link_elements()
            .values()
            .all(|&elements| elements == 10)
    );
}

#[test]
fn each_rank_sends_the_lower_bound_when_the_world_divides_the_length() {
    let device = SimDevice::new();
    let traffic = all_reduce(&device, 4, 1000);
    assert_eq!(traffic.lower_bound_per_rank(), 1500.0);
    for rank in 0..4 {
        assert_eq!(traffic.ratio_to_lower_bound(rank), Some(1.0));
    }
    // Uneven: some rank sends more than its share, never more than one element per step.
    let traffic = all_reduce(&device, 4, 1001);
    let worst = traffic.max_ratio_to_lower_bound().unwrap();
    assert!(worst > 1.0 && worst <= (1501.5 + 6.0) / 1501.5, "{worst}");
    // A world of one moves nothing and has no bound to compare with.
    assert_eq!(all_reduce(&device, 1, 10).ratio_to_lower_bound(0), None);
    assert_eq!(lower_bound_per_rank(SUM, 8, 800), 1400.0);
    assert_eq!(lower_bound_per_rank(Collective::AllGather, 4, 100), 300.0);
    // Direct's one step sends W-1 times the tensor: (W-1)·n against 2(W-1)/W·n, W/2 times the
    // bound. It is a clique, which this device folds once and stores on every rank (each rank's
    // memory read and written once, against two steps' (3W-1)·n elements of memory traffic in
    // all), so its model keeps the one step at any size while the link bound allows it.
    for length in [40, 1000] {
        let (plan, direct) = run(&device, 4, SUM, Algorithm::Direct, length);
        assert_eq!(plan.steps().len(), 1);
        assert_eq!(direct.max_ratio_to_lower_bound(), Some(2.0));
        assert_eq!(direct.busiest_rank_elements(), plan.busiest_rank_elements());
    }
    // A model that does not fuse cliques prices the pairs' transfers: at a thousand elements,
    // direct's two steps cost less and meet the bound.
    let unfused = SimDevice::builder()
        .link_model(
            LinkModel::new(0.12e-6, 24e9, Links::Shared)
                .and_then(|model| model.with_transfer_cost(0.11e-6))
                .unwrap(),
        )
        .build();
    let (plan, direct) = run(&unfused, 4, SUM, Algorithm::Direct, 1000);
    assert_eq!(plan.steps().len(), 2);
    assert_eq!(direct.max_ratio_to_lower_bound(), Some(1.0));
    // From seven ranks one step moves W/2 > TRAFFIC_BOUND times the bound over links. Where
    // cliques are not fused the core refuses it: direct takes two steps (a reduce-scatter, then
    // an all-gather), which meet the bound. This device's model fuses the clique, and the core
    // bounds it by what it moves there (each rank's memory once each way): one step at W = 8,
    // its links' traffic recorded as it is, W/2 times the bound.
    let (plan, direct) = run(&unfused, 8, SUM, Algorithm::Direct, 1000);
    assert_eq!(plan.steps().len(), 2);
    assert_eq!(direct.max_ratio_to_lower_bound(), Some(1.0));
    assert_eq!(direct.busiest_rank_elements(), plan.busiest_rank_elements());
    let (plan, direct) = run(&device, 8, SUM, Algorithm::Direct, 1000);
    assert_eq!(plan.steps().len(), 1);
    assert_eq!(direct.max_ratio_to_lower_bound(), Some(4.0));
    assert_eq!(direct.busiest_rank_elements(), plan.busiest_rank_elements());
}

#[test]
fn the_ledger_keeps_generations_in_order_within_its_retention() {
    let device = SimDevice::builder().ledger_retention(Some(2)).build();
    for length in [10, 20, 30] {
        all_reduce(&device, 2, length);
    }
    let ledger = device.ledger();
    assert_eq!(ledger.recorded(), 3);
    let kept: Vec<(u64, usize)> = ledger
        .records()
        .iter()
        .map(|r| (r.sequence, r.input_len))
        .collect();
    assert_eq!(kept, vec![(1, 20), (2, 30)]);
    assert_eq!(ledger.take().len(), 2);
    assert!(ledger.records().is_empty());
    assert_eq!(all_reduce(&device, 2, 5).sequence, 3);
}

#[test]
fn a_generation_that_begins_while_the_ledger_is_paused_is_not_recorded() {
    let device = SimDevice::new();
    all_reduce(&device, 2, 10);
    let ledger = device.ledger();
    let (first, second) = (ledger.pause(), ledger.pause());
    assert!(ledger.is_paused());
    let last = all_reduce(&device, 2, 20);
    assert_eq!(
        (last.sequence, last.input_len),
        (0, 10),
        "recorded while paused"
    );
    assert_eq!(ledger.recorded(), 1);
    drop(first);
    assert!(ledger.is_paused(), "resumed while a pause was still held");
    drop(second);
    let resumed = all_reduce(&device, 2, 30);
    assert_eq!((resumed.sequence, resumed.input_len), (1, 30));
}

#[test]
fn a_device_told_not_to_record_keeps_an_empty_ledger() {
    let device = SimDevice::builder().record_traffic(false).build();
    let devices = vec![DeviceId::new(0)];
    let communicator = NativeCommunicator::new(devices, device.clone()).unwrap();
    let tensor = device
        .upload(DeviceId::new(0), &HostValues::I32(vec![1, 2]))
        .unwrap();
    communicator
        .all_reduce(0, tensor, ReduceOperation::Max)
        .unwrap();
    assert_eq!(device.ledger().recorded(), 0);
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

#[test]
fn a_recorded_generation_is_priced_as_its_plan_on_every_kind_of_link() {
    let device = SimDevice::new();
    for links in [Links::PerRank, Links::Shared] {
        let model = LinkModel::new(3e-6, 10e9, links)
            .unwrap()
            .with_transfer_cost(0.4e-6)
            .unwrap();
        for collective in [
            SUM,
            Collective::AllGather,
            Collective::Broadcast { root: 1 },
        ] {
            for algorithm in Algorithm::BUILT_IN {
                let (plan, traffic) = run(&device, 4, collective, algorithm, 37);
                let priced = traffic.priced(&model);
                let planned = model.plan_time(&plan, 4);
                assert!(
                    close(priced, planned),
                    "{collective} via {algorithm} on {links:?}: {priced} vs {planned}"
                );
            }
        }
    }
}

#[test]
fn the_priced_ring_equals_the_closed_form_when_the_world_divides_the_length() {
    let (alpha, beta) = (5e-6, 25e9);
    let model = LinkModel::new(alpha, beta, Links::PerRank).unwrap();
    let device = SimDevice::new();
    for world in 2..=8 {
        let length = world * 1024;
        let priced = all_reduce(&device, world, length).priced(&model);
        // 2(W-1) steps, each rank sending and receiving one chunk of n/W elements of 4 bytes.
        let steps = 2.0 * (world - 1) as f64;
        let closed = steps * (alpha + (length / world) as f64 * 4.0 / beta);
        assert!(close(priced, closed), "W={world}: {priced} vs {closed}");
    }
}

#[test]
fn an_uneven_length_is_priced_by_its_largest_chunk() {
    let model = LinkModel::new(1e-6, 1e9, Links::PerRank).unwrap();
    let device = SimDevice::new();
    for (world, length) in [(3, 1000), (4, 1001), (8, 5), (5, 2)] {
        let traffic = all_reduce(&device, world, length);
        let priced = traffic.priced(&model);
        // Steps in which every chunk is empty are not in the plan at all.
        let steps = traffic.steps.len() as f64;
        let largest = length.div_ceil(world) as f64;
        assert!(
            close(priced, steps * (1e-6 + largest * 4.0 / 1e9)),
            "W={world} n={length}"
        );
    }
    // One rank: nothing to send, nothing to wait for.
    assert_eq!(all_reduce(&device, 1, 100).priced(&model), 0.0);
}

#[test]
fn a_link_model_rejects_meaningless_parameters() {
    let links = Links::PerRank;
    let model = LinkModel::new(0.0, 1.0, links).unwrap();
    for gamma in [-1e-6, f64::NAN, f64::INFINITY] {
        assert!(model.with_transfer_cost(gamma).is_err(), "γ = {gamma}");
    }
    assert!(LinkModel::new(-1.0, 1.0, links).is_err());
    assert!(LinkModel::new(f64::NAN, 1.0, links).is_err());
    assert!(LinkModel::new(0.0, 0.0, links).is_err());
    assert!(LinkModel::new(0.0, f64::INFINITY, links).is_err());
    assert_eq!(
        LinkModel::new(0.0, -2.0, links).unwrap_err().to_string(),
        "link bandwidth β must be finite and positive, got -2 B/s"
    );
}
