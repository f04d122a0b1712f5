//! Target `ring_schedule`: any world (1..=64), length, operation, element type and values →
//! the ring all-reduce on a [`SimDevice`] equals the sequential reference on every rank, the ledger
//! records exactly the [`RingSchedule`]'s traffic (`2(W-1)·n` elements in total, each rank within
//! rounding of the `2(W-1)/W·n` lower bound), and the schedule combines every rank's element
//! exactly once before delivering it everywhere.
//!
//! Worlds of up to [`MAX_THREADED_WORLD`] ranks may run through a real [`NativeCommunicator`],
//! one thread per rank; larger ones (and the others, by choice) drive the device directly with
//! the schedule, as the communicator's ring driver does. One to [`MAX_GENERATIONS`] generations
//! run back to back on one device (and one communicator), each with fresh values, so a device
//! that recycles buffers must never leak one generation's elements into another. A *large* case
//! (worlds up to [`MAX_LARGE_WORLD`], lengths up to [`MAX_LARGE_LENGTH`]) reaches the sizes where
//! a device may recycle or split its buffers.

use crate::bytes::{Reader, Writer};
use crate::harness::Watchdog;
use crate::values::{RawSource, all_reduce_inputs};
use ruccl_core::sync::thread;
use ruccl_core::{
    DeviceId, NativeCollectiveDevice, NativeCommunicator, ReduceOperation, RingSchedule,
};
use ruccl_sim::conformance::reference::{compare, expected};
use ruccl_sim::ledger::all_reduce_lower_bound;
use ruccl_sim::{ElementType, HostTensors, HostValues, SimDevice, SimTensor};
use std::time::Duration;

/// The largest world.
pub const MAX_WORLD: usize = 64;
/// The largest tensor length (a world of 64 then moves about 32 Ki elements).
pub const MAX_LENGTH: usize = 256;
/// The largest world of a large case.
pub const MAX_LARGE_WORLD: usize = 4;
/// The largest tensor length of a large case: 16 Ki elements, 32 KiB to 128 KiB per tensor.
pub const MAX_LARGE_LENGTH: usize = 1 << 14;
/// The most generations run on one device.
pub const MAX_GENERATIONS: usize = 3;
/// The largest world run through a communicator, one thread per rank.
pub const MAX_THREADED_WORLD: usize = 8;
/// How long a rank may wait in the communicator before the run counts as hung.
const RANK_TIMEOUT: Duration = Duration::from_secs(30);

/// One to three all-reduces of one shape to check.
#[derive(Clone, Debug, PartialEq)]
pub struct RingCase {
    /// Whether the case is large: fewer ranks, longer tensors.
    pub large: bool,
    /// Ranks, `1..=64` (`1..=4` when large).
    pub world: usize,
    /// Elements per tensor, `0..=256` (`0..=16384` when large).
    pub length: usize,
    /// The element type.
    pub element_type: ElementType,
    /// The reduce operation.
    pub operation: ReduceOperation,
    /// Generations run back to back on one device, `1..=3`.
    pub generations: usize,
    /// Rank 0's device index; rank `r` is on `first_device + r` (or reversed).
    pub first_device: u8,
    /// Whether device indices fall with the rank instead of rising.
    pub reverse_devices: bool,
    /// Whether to run through a communicator with one thread per rank (worlds up to
    /// [`MAX_THREADED_WORLD`]) rather than driving the device directly.
    pub threaded: bool,
    /// Seeds the values after the explicit ones.
    pub seed: u64,
    /// The first raw value draws (generation by generation; within one, element-major: element 0
    /// of every rank, then element 1, ...).
    pub explicit: Vec<u32>,
}

impl RingCase {
    /// Decode a case; every input decodes to one.
    pub fn decode(reader: &mut Reader<'_>) -> Self {
        let large = reader.flag();
        let (max_world, max_length) = Self::limits(large);
        let world = reader.between(1, max_world);
        let length = reader.below(max_length + 1);
        let element_type = reader.pick(&ElementType::ALL);
        let operation = reader.pick(&ReduceOperation::ALL);
        let generations = reader.between(1, MAX_GENERATIONS);
        let first_device = reader.byte();
        let reverse_devices = reader.flag();
        let threaded = reader.flag();
        let seed = reader.u64();
        let explicit = reader
            .rest()
            .chunks_exact(4)
            .map(|chunk| u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
            .collect();
        Self {
            large,
            world,
            length,
            element_type,
            operation,
            generations,
            first_device,
            reverse_devices,
            threaded,
            seed,
            explicit,
        }
    }

    /// The bytes that decode to this case.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        writer.flag(self.large);
        let (max_world, max_length) = Self::limits(self.large);
        writer.between(self.world, 1, max_world);
        writer.below(self.length, max_length + 1);
        writer.pick(&self.element_type, &ElementType::ALL);
        writer.pick(&self.operation, &ReduceOperation::ALL);
        writer.between(self.generations, 1, MAX_GENERATIONS);
        writer.byte(self.first_device);
        writer.flag(self.reverse_devices);
        writer.flag(self.threaded);
        writer.u64(self.seed);
        for raw in &self.explicit {
            writer.u32(*raw);
        }
        writer.finish()
    }

    /// The largest world and length.
    fn limits(large: bool) -> (usize, usize) {
        if large {
            (MAX_LARGE_WORLD, MAX_LARGE_LENGTH)
        } else {
            (MAX_WORLD, MAX_LENGTH)
        }
    }

    /// Rank `r`'s device.
    pub fn devices(&self) -> Vec<DeviceId> {
        (0..self.world as u32)
            .map(|rank| {
                let offset = if self.reverse_devices {
                    self.world as u32 - 1 - rank
                } else {
                    rank
                };
                DeviceId::new(u32::from(self.first_device) + offset)
            })
            .collect()
    }
}

/// Decode `data` and check it; panics on any violation.
pub fn check(data: &[u8]) {
    let case = RingCase::decode(&mut Reader::new(data));
    crate::harness::on_own_thread(|| check_case(&case));
}

/// Check one case; panics on any violation.
pub fn check_case(case: &RingCase) {
    let RingCase {
        world,
        length,
        element_type,
        operation,
        ..
    } = *case;
    check_schedule_shape(world, length);
    let devices = case.devices();
    let mut source = RawSource::new(&case.explicit, case.seed);
    let inputs: Vec<Vec<HostValues>> = (0..case.generations)
        .map(|_| all_reduce_inputs(&mut source, world, length, element_type, operation))
        .collect();
    let device = SimDevice::new();
    let outputs = if case.threaded && world <= MAX_THREADED_WORLD {
        through_communicator(&device, &devices, &inputs, operation)
    } else {
        inputs
            .iter()
            .map(|inputs| direct(&device, &devices, inputs, operation))
            .collect()
    };
    for (generation, (inputs, outputs)) in inputs.iter().zip(&outputs).enumerate() {
        let reference = expected(operation, inputs);
        assert_eq!(outputs.len(), world, "{case:?}: one output per rank");
        for (rank, output) in outputs.iter().enumerate() {
            assert_eq!(
                output.device(),
                devices[rank],
                "{case:?}: rank {rank}'s output device"
            );
            if let Err(mismatch) = compare(&reference, element_type, output.values()) {
                let column: Vec<Option<f64>> = inputs
                    .iter()
                    .map(|input| mismatch.first.and_then(|index| input.get_f64(index)))
                    .collect();
                panic!(
                    "{operation} of {world} × {length} {element_type}, generation {generation}: rank {rank}: {mismatch}\nthat element's inputs, by rank: {column:?}"
                );
            }
        }
    }
    check_ledger(&device, &devices, case);
}

/// Run every generation through one communicator, one thread per rank; `outputs[g][r]`.
fn through_communicator(
    device: &SimDevice,
    devices: &[DeviceId],
    inputs: &[Vec<HostValues>],
    operation: ReduceOperation,
) -> Vec<Vec<SimTensor>> {
    let _watchdog = Watchdog::arm(RANK_TIMEOUT * 2, "a ring_schedule all-reduce");
    let communicator = match NativeCommunicator::new(devices.to_vec(), device.clone()) {
        Ok(communicator) => communicator,
        Err(error) => panic!("a communicator over {devices:?}: {error}"),
    };
    let communicator = &communicator;
    let per_rank: Vec<Vec<SimTensor>> = thread::scope(|scope| {
        let ranks: Vec<_> = (0..devices.len())
            .map(|rank| {
                scope.spawn(move || {
                    inputs
                        .iter()
                        .enumerate()
                        .map(|(generation, inputs)| {
                            let tensor = upload(device, devices[rank], &inputs[rank]);
                            match communicator.all_reduce_timeout(
                                rank,
                                tensor,
                                operation,
                                RANK_TIMEOUT,
                            ) {
                                Ok(output) => output,
                                Err(error) => {
                                    panic!("rank {rank} failed in generation {generation}: {error}")
                                }
                            }
                        })
                        .collect()
                })
            })
            .collect();
        ranks
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| match handle.join() {
                Ok(outputs) => outputs,
                Err(_) => panic!("rank {rank}'s thread panicked"),
            })
            .collect()
    });
    let mut per_rank: Vec<_> = per_rank.into_iter().map(Vec::into_iter).collect();
    (0..inputs.len())
        .map(|_| per_rank.iter_mut().filter_map(Iterator::next).collect())
        .collect()
}

/// Drive the device with the ring schedule, as the communicator's driver does.
fn direct(
    device: &SimDevice,
    devices: &[DeviceId],
    inputs: &[HostValues],
    operation: ReduceOperation,
) -> Vec<SimTensor> {
    let prepared: Vec<_> = inputs
        .iter()
        .zip(devices)
        .map(|(values, &on)| {
            device
                .prepare(upload(device, on, values), on)
                .unwrap_or_else(|error| panic!("prepare on {on}: {error}"))
        })
        .collect();
    let mut work = device
        .begin(devices, &prepared, operation)
        .unwrap_or_else(|error| panic!("begin: {error}"));
    let length = device.elements(&work);
    assert_eq!(
        length,
        inputs.first().map_or(0, HostValues::len),
        "elements"
    );
    for step in RingSchedule::new(devices.len(), length).steps() {
        device
            .exchange(&mut work, &step.ranges, step.reduce)
            .unwrap_or_else(|error| panic!("exchange step {}: {error}", step.index));
    }
    device
        .finish(work, operation)
        .unwrap_or_else(|error| panic!("finish: {error}"))
}

fn upload(device: &SimDevice, on: DeviceId, values: &HostValues) -> SimTensor {
    device
        .upload(on, values)
        .unwrap_or_else(|error| panic!("upload on {on}: {error}"))
}

/// The schedule itself: balanced chunks that tile `0..n`, and — run on sets of contributing ranks
/// instead of numbers — every reduce-scatter combine joins disjoint sets (each rank's element is
/// combined exactly once) and every rank ends with every rank's contribution.
fn check_schedule_shape(world: usize, length: usize) {
    let schedule = RingSchedule::new(world, length);
    let chunks = schedule.chunks();
    assert_eq!(chunks.len(), world, "one chunk per rank");
    let mut next = 0;
    for chunk in chunks {
        assert_eq!(chunk.start, next, "chunks {chunks:?} tile 0..{length}");
        next = chunk.end;
    }
    assert_eq!(next, length, "chunks {chunks:?} tile 0..{length}");
    let sizes = chunks.iter().map(|chunk| chunk.len());
    let (smallest, largest) = (sizes.clone().min(), sizes.max());
    assert!(
        largest.unwrap_or(0) - smallest.unwrap_or(0) <= 1,
        "unbalanced chunks {chunks:?}"
    );
    assert_eq!(schedule.step_count(), 2 * (world - 1));
    assert_eq!(schedule.elements_moved(), 2 * (world - 1) * length);

    // contributors[r][i]: the set of ranks whose element i rank r's buffer holds (bit per rank).
    let mut contributors: Vec<Vec<u64>> =
        (0..world).map(|rank| vec![1u64 << rank; length]).collect();
    for step in schedule.steps() {
        assert_eq!(
            step.ranges.len(),
            world,
            "step {} has one range per rank",
            step.index
        );
        // Every send reads the pre-step state: copy the sent ranges before writing any.
        let sent_sets: Vec<Vec<u64>> = step
            .ranges
            .iter()
            .enumerate()
            .map(|(rank, range)| contributors[rank][range.clone()].to_vec())
            .collect();
        for (rank, (range, sent_set)) in step.ranges.iter().zip(&sent_sets).enumerate() {
            let successor = (rank + 1) % world;
            for (index, &sent) in range.clone().zip(sent_set) {
                let held = &mut contributors[successor][index];
                if step.reduce {
                    assert_eq!(
                        *held & sent,
                        0,
                        "step {}: rank {successor} combines element {index} from ranks {sent:#b} into {held:#b} twice",
                        step.index
                    );
                    *held |= sent;
                } else {
                    *held = sent;
                }
            }
        }
    }
    let everyone = if world == 64 {
        u64::MAX
    } else {
        (1u64 << world) - 1
    };
    for (rank, held) in contributors.iter().enumerate() {
        if let Some(index) = held.iter().position(|&set| set != everyone) {
            panic!(
                "world {world}, length {length}: rank {rank} ends with element {index} of ranks {:#b} only",
                held[index]
            );
        }
    }
}

/// The ledger holds one record per generation, each with exactly the schedule's traffic.
fn check_ledger(device: &SimDevice, devices: &[DeviceId], case: &RingCase) {
    let (world, length) = (case.world, case.length);
    let records = device.ledger().records();
    assert_eq!(records.len(), case.generations, "one record per generation");
    let schedule = RingSchedule::new(world, length);
    // What each rank sends over the whole schedule, summed from the steps themselves.
    let mut scheduled = vec![0usize; world];
    for step in schedule.steps() {
        for (total, range) in scheduled.iter_mut().zip(&step.ranges) {
            *total += range.len();
        }
    }
    for rank in [0, world - 1] {
        assert_eq!(
            schedule.elements_sent_by(rank),
            scheduled[rank],
            "rank {rank}"
        );
    }
    let bound = all_reduce_lower_bound(world, length);
    for (rank, &sent) in scheduled.iter().enumerate() {
        assert!(
            (sent as f64 - bound).abs() < 2.0,
            "rank {rank} sends {sent} elements, the lower bound is {bound}"
        );
    }
    for (generation, traffic) in records.iter().enumerate() {
        let context = format!("the ledger's generation {generation}");
        assert_eq!(traffic.devices, devices, "{context}");
        assert_eq!(traffic.length, length, "{context}");
        assert_eq!(traffic.element_type, case.element_type, "{context}");
        assert_eq!(traffic.operation, case.operation, "{context}");
        assert_eq!(
            traffic.steps.len(),
            schedule.step_count(),
            "{context}: 2(W-1) exchanges"
        );
        for (step, recorded) in schedule.steps().zip(&traffic.steps) {
            assert_eq!(
                recorded.reduce, step.reduce,
                "{context}, step {}",
                step.index
            );
            let sent: Vec<usize> = step.ranges.iter().map(|range| range.len()).collect();
            assert_eq!(recorded.sent, sent, "{context}, step {}", step.index);
        }
        assert_eq!(
            traffic.total_elements(),
            2 * (world - 1) * length,
            "{context}: total traffic is the lower bound 2(W-1)·n"
        );
        assert_eq!(
            traffic.link_elements(),
            scheduled,
            "{context}: per-link traffic"
        );
        for rank in [0, world - 1] {
            assert_eq!(
                traffic.sent_by(rank),
                scheduled[rank],
                "{context}: rank {rank}"
            );
            assert_eq!(traffic.received_by((rank + 1) % world), scheduled[rank]);
        }
    }
}

/// Readable seed cases: the edges of the schedule (one rank, fewer elements than ranks, uneven
/// chunks, the largest world) across the operations and element types.
pub fn seeds() -> Vec<(&'static str, RingCase)> {
    let case = |world, length, element_type, operation, threaded| RingCase {
        large: false,
        world,
        length,
        element_type,
        operation,
        generations: 1,
        first_device: 0,
        reverse_devices: false,
        threaded,
        seed: 0x5EED,
        explicit: Vec::new(),
    };
    use ElementType::*;
    use ReduceOperation::*;
    vec![
        ("one_rank_empty", case(1, 0, I32, Sum, true)),
        ("one_rank_product", case(1, 5, F32, Product, true)),
        ("two_ranks_one_element", case(2, 1, I64, Sum, true)),
        ("fewer_elements_than_ranks", case(5, 3, F64, Mean, true)),
        ("uneven_chunks_f16_mean", case(7, 50, F16, Mean, true)),
        (
            "eight_threads_bf16_product",
            case(8, 31, BF16, Product, true),
        ),
        ("eight_direct_i32_mean", case(8, 256, I32, Mean, false)),
        (
            "thirteen_ranks_f32_max_specials",
            RingCase {
                explicit: vec![1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 2, 6, 10],
                ..case(13, 40, F32, Max, false)
            },
        ),
        (
            "thirty_three_ranks_i64_product",
            case(33, 100, I64, Product, false),
        ),
        ("sixty_four_ranks_bf16_sum", case(64, 256, BF16, Sum, false)),
        (
            "sixty_four_ranks_f16_product",
            case(64, 64, F16, Product, false),
        ),
        (
            "sixty_four_ranks_f64_min_reversed",
            RingCase {
                first_device: 200,
                reverse_devices: true,
                ..case(64, 63, F64, Min, false)
            },
        ),
        (
            "integer_extremes_sum",
            RingCase {
                explicit: vec![2, 6, 10, 14, 18, 22, 26, 3, 7],
                ..case(3, 9, I32, Sum, true)
            },
        ),
        (
            "three_generations_reuse_one_communicator",
            RingCase {
                generations: 3,
                ..case(4, 33, I64, Max, true)
            },
        ),
        (
            "large_f64_sum_three_generations",
            RingCase {
                large: true,
                generations: 3,
                ..case(3, 12_000, F64, Sum, true)
            },
        ),
        (
            "large_f16_mean_two_generations_direct",
            RingCase {
                large: true,
                generations: 2,
                ..case(4, MAX_LARGE_LENGTH, F16, Mean, false)
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{RingCase, seeds};
    use crate::bytes::Reader;

    #[test]
    fn seeds_decode_to_themselves() {
        for (name, case) in seeds() {
            assert_eq!(
                RingCase::decode(&mut Reader::new(&case.encode())),
                case,
                "{name}"
            );
        }
    }
}
