//! The traffic ledger counts what a real all-reduce moves, and the α–β cost model prices it as
//! the ring's closed form.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::sync::{Arc, thread};
use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation, RingSchedule};
use ruccl_sim::ledger::all_reduce_lower_bound;
use ruccl_sim::{ElementType, GenerationTraffic, HostTensors, HostValues, LinkModel, SimDevice};

/// Run one f32 sum all-reduce of `length` elements over `world` threads; return the record.
fn all_reduce(device: &SimDevice, world: usize, length: usize) -> GenerationTraffic {
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
                communicator
                    .all_reduce(rank, tensor, ReduceOperation::Sum)
                    .unwrap()
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    device.ledger().last().expect("the generation was recorded")
}

#[test]
fn every_generation_moves_exactly_two_w_minus_one_n_elements() {
    let device = SimDevice::new();
    for world in 1usize..=6 {
        for length in [0, 1, world.saturating_sub(1), world, world + 1, 97, 1000] {
            let traffic = all_reduce(&device, world, length);
            assert_eq!(traffic.world(), world);
            assert_eq!(traffic.length, length);
            assert_eq!(traffic.element_type, ElementType::F32);
            assert_eq!(traffic.steps.len(), 2 * (world - 1));
            assert_eq!(
                traffic.total_elements(),
                2 * (world - 1) * length,
                "W={world} n={length}"
            );
            assert_eq!(traffic.total_bytes(), 4 * traffic.total_elements() as u64);
            let schedule = RingSchedule::new(world, length);
            for rank in 0..world {
                assert_eq!(traffic.sent_by(rank), schedule.elements_sent_by(rank));
                assert_eq!(
                    traffic.received_by(rank),
                    traffic.sent_by((rank + world - 1) % world)
                );
            }
            assert_eq!(
                traffic.link_bytes().iter().sum::<u64>(),
                traffic.total_bytes()
            );
        }
    }
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
    assert_eq!(all_reduce_lower_bound(8, 800), 1400.0);
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
        .map(|r| (r.sequence, r.length))
        .collect();
    assert_eq!(kept, vec![(1, 20), (2, 30)]);
    assert_eq!(ledger.take().len(), 2);
    assert!(ledger.records().is_empty());
    assert_eq!(all_reduce(&device, 2, 5).sequence, 3);
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
fn the_priced_ring_equals_the_closed_form_when_the_world_divides_the_length() {
    let model = LinkModel::new(5e-6, 25e9).unwrap();
    let device = SimDevice::new();
    for world in 2..=8 {
        let length = world * 1024;
        let traffic = all_reduce(&device, world, length);
        let priced = model.price_traffic(&traffic);
        let closed = model.ring_closed_form(world, length, 4);
        assert!(close(priced, closed), "W={world}: {priced} vs {closed}");
        let planned = model.price_schedule(&RingSchedule::new(world, length), 4);
        assert!(close(planned, priced), "W={world}: {planned} vs {priced}");
    }
}

#[test]
fn an_uneven_length_is_priced_by_its_largest_chunk() {
    let model = LinkModel::new(1e-6, 1e9).unwrap();
    let device = SimDevice::new();
    for (world, length) in [(3, 1000), (4, 1001), (8, 5), (5, 2)] {
        let traffic = all_reduce(&device, world, length);
        let priced = model.price_traffic(&traffic);
        let steps = 2.0 * (world - 1) as f64;
        let largest = length.div_ceil(world) as f64;
        assert!(
            close(priced, steps * (1e-6 + largest * 4.0 / 1e9)),
            "W={world} n={length}"
        );
        let closed = model.ring_closed_form(world, length, 4);
        assert!(priced >= closed && priced - closed < steps * 4.0 / 1e9);
    }
    // One rank: nothing to send, nothing to wait for.
    assert_eq!(model.price_traffic(&all_reduce(&device, 1, 100)), 0.0);
    assert_eq!(model.ring_closed_form(1, 100, 4), 0.0);
}

#[test]
fn a_link_model_rejects_meaningless_parameters() {
    assert!(LinkModel::new(-1.0, 1.0).is_err());
    assert!(LinkModel::new(f64::NAN, 1.0).is_err());
    assert!(LinkModel::new(0.0, 0.0).is_err());
    assert!(LinkModel::new(0.0, f64::INFINITY).is_err());
    assert_eq!(
        LinkModel::new(0.0, -2.0).unwrap_err().to_string(),
        "link bandwidth β must be finite and positive, got -2 B/s"
    );
}
