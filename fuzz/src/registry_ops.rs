//! Target `registry_ops`: arbitrary sequences of [`NativeCommunicators`] requests (valid, empty
//! and repeated device lists, the same devices in other orders, several threads asking at once),
//! aborts of communicators handed out, and all-reduces on them, against a sequential model.
//!
//! - An empty list or a repeated device is refused with `InvalidGroup` naming the list.
//! - A list gets the same communicator as long as it is not aborted; an aborted one is replaced by
//!   a fresh, healthy one, and holders of the old one keep it, aborted.
//! - Different lists never share a communicator; concurrent requests for one list agree.
//! - Aborts are sticky and the first reason wins: every rank of a later all-reduce gets it, while
//!   a healthy communicator reduces normally; after each all-reduce the device's census reads no
//!   live value.

use crate::bytes::{Reader, Writer};
use crate::harness::Watchdog;
use ruccl_core::sync::{Arc, thread};
use ruccl_core::{
    DeviceId, NativeCollectiveError, NativeCommunicator, NativeCommunicators, ReduceOperation,
};
use ruccl_sim::{HostTensors, HostValues, SimDevice};
use std::time::Duration;

/// The most operations per input.
pub const MAX_OPERATIONS: usize = 16;
/// The longest device list.
pub const MAX_LIST: usize = 5;
/// Device indices are drawn below this, so lists overlap and repeat.
pub const DEVICES: u8 = 6;
const TIMEOUT: Duration = Duration::from_secs(20);

/// One registry operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Ask for the communicator of this device list.
    Get(Vec<u8>),
    /// Ask for this list from `threads` threads at once.
    Concurrent {
        /// The device list.
        devices: Vec<u8>,
        /// How many threads, 2..=4.
        threads: usize,
    },
    /// Abort the communicator handed out `k`-th (modulo how many were).
    Abort(u8),
    /// Run one `Sum` all-reduce on every rank of the communicator handed out `k`-th.
    Reduce(u8),
}

impl Operation {
    fn decode(reader: &mut Reader<'_>) -> Self {
        let list = |reader: &mut Reader<'_>| -> Vec<u8> {
            (0..reader.below(MAX_LIST + 1))
                .map(|_| reader.byte() % DEVICES)
                .collect()
        };
        match reader.below(6) {
            0 | 1 => Operation::Get(list(reader)),
            2 => {
                let devices = list(reader);
                Operation::Concurrent {
                    devices,
                    threads: reader.between(2, 4),
                }
            }
            3 => Operation::Abort(reader.byte()),
            _ => Operation::Reduce(reader.byte()),
        }
    }

    fn encode(&self, writer: &mut Writer) {
        let list = |writer: &mut Writer, devices: &[u8]| {
            writer.below(devices.len(), MAX_LIST + 1);
            for &device in devices {
                writer.below(usize::from(device), usize::from(DEVICES));
            }
        };
        match self {
            Operation::Get(devices) => {
                writer.below(0, 6);
                list(writer, devices);
            }
            Operation::Concurrent { devices, threads } => {
                writer.below(2, 6);
                list(writer, devices);
                writer.between(*threads, 2, 4);
            }
            Operation::Abort(k) => {
                writer.below(3, 6);
                writer.byte(*k);
            }
            Operation::Reduce(k) => {
                writer.below(4, 6);
                writer.byte(*k);
            }
        }
    }
}

/// Decode a sequence of operations; every input decodes to one.
pub fn decode(reader: &mut Reader<'_>) -> Vec<Operation> {
    (0..reader.below(MAX_OPERATIONS + 1))
        .map(|_| Operation::decode(reader))
        .collect()
}

/// The bytes that decode to `operations`.
pub fn encode(operations: &[Operation]) -> Vec<u8> {
    let mut writer = Writer::new();
    writer.below(operations.len(), MAX_OPERATIONS + 1);
    for operation in operations {
        operation.encode(&mut writer);
    }
    writer.finish()
}

/// Decode `data` and check it; panics on any violation.
pub fn check(data: &[u8]) {
    let operations = decode(&mut Reader::new(data));
    crate::harness::on_own_thread(|| check_operations(&operations));
}

type Communicator = NativeCommunicator<SimDevice>;

/// One communicator handed out, as the model knows it.
struct Handed {
    devices: Vec<DeviceId>,
    communicator: Arc<Communicator>,
    /// The first abort's reason.
    aborted: Option<String>,
}

/// Run `operations` and check every answer against the model; panics on any violation.
pub fn check_operations(operations: &[Operation]) {
    let _watchdog = Watchdog::arm(TIMEOUT * 3, format!("registry operations {operations:?}"));
    let device = SimDevice::new();
    let registry = NativeCommunicators::new(device.clone());
    let mut handed: Vec<Handed> = Vec::new();
    for (step, operation) in operations.iter().enumerate() {
        let context = format!("operation {step} {operation:?} of {operations:?}");
        match operation {
            Operation::Get(indices) => {
                let devices = ids(indices);
                let answer = registry.communicator(devices.clone());
                record(&mut handed, &devices, answer, &context);
            }
            Operation::Concurrent {
                devices: indices,
                threads,
            } => {
                let devices = ids(indices);
                let answers: Vec<_> = thread::scope(|scope| {
                    let askers: Vec<_> = (0..*threads)
                        .map(|_| {
                            let (registry, devices) = (&registry, devices.clone());
                            scope.spawn(move || registry.communicator(devices))
                        })
                        .collect();
                    askers
                        .into_iter()
                        .map(|asker| {
                            asker
                                .join()
                                .unwrap_or_else(|_| panic!("{context}: a thread panicked"))
                        })
                        .collect()
                });
                let mut answers = answers.into_iter();
                if let Some(first) = answers.next() {
                    let first_handle = first.as_ref().ok().map(Arc::clone);
                    record(&mut handed, &devices, first, &context);
                    for other in answers {
                        match (&first_handle, other) {
                            (Some(first), Ok(other)) => {
                                assert!(
                                    Arc::ptr_eq(first, &other),
                                    "{context}: concurrent requests got different communicators"
                                );
                            }
                            (None, Err(NativeCollectiveError::InvalidGroup { .. })) => {}
                            (_, other) => {
                                panic!("{context}: concurrent requests disagree: {other:?}")
                            }
                        }
                    }
                }
            }
            Operation::Abort(k) => {
                let Some(index) = pick(&handed, *k) else {
                    continue;
                };
                let entry = &mut handed[index];
                let reason = format!("abort of handle {index} at operation {step}");
                entry.communicator.abort(reason.clone());
                entry.aborted.get_or_insert(reason);
                assert!(
                    entry.communicator.is_aborted(),
                    "{context}: not aborted after abort()"
                );
            }
            Operation::Reduce(k) => {
                let Some(index) = pick(&handed, *k) else {
                    continue;
                };
                reduce(&device, &handed[index], &context);
                if let Err(live) = device.check_quiescent() {
                    panic!("{context}: values outlive the all-reduce: {live}");
                }
            }
        }
    }
}

fn ids(indices: &[u8]) -> Vec<DeviceId> {
    indices
        .iter()
        .map(|&index| DeviceId::new(u32::from(index)))
        .collect()
}

fn pick(handed: &[Handed], k: u8) -> Option<usize> {
    (!handed.is_empty()).then(|| usize::from(k) % handed.len())
}

/// Check one answer of the registry for `devices` and remember a new communicator.
fn record(
    handed: &mut Vec<Handed>,
    devices: &[DeviceId],
    answer: Result<Arc<Communicator>, NativeCollectiveError>,
    context: &str,
) {
    let distinct = devices
        .iter()
        .enumerate()
        .all(|(rank, device)| !devices[..rank].contains(device));
    if devices.is_empty() || !distinct {
        match answer {
            Err(NativeCollectiveError::InvalidGroup {
                devices: named,
                reason,
            }) => {
                let indices: Vec<u32> = devices.iter().map(|device| device.index()).collect();
                assert_eq!(named, indices, "{context}: InvalidGroup names another list");
                assert!(
                    !reason.is_empty(),
                    "{context}: InvalidGroup without a reason"
                );
            }
            other => panic!("{context}: an invalid list got {other:?}"),
        }
        return;
    }
    let communicator = match answer {
        Ok(communicator) => communicator,
        Err(error) => panic!("{context}: a valid list was refused: {error}"),
    };
    assert_eq!(
        communicator.devices(),
        devices,
        "{context}: the communicator's devices"
    );
    assert_eq!(communicator.world_size(), devices.len(), "{context}");
    let current = handed
        .iter()
        .rev()
        .find(|entry| entry.devices == devices)
        .filter(|entry| entry.aborted.is_none());
    match current {
        Some(entry) => assert!(
            Arc::ptr_eq(&entry.communicator, &communicator),
            "{context}: a healthy communicator was replaced"
        ),
        None => {
            for entry in handed.iter() {
                assert!(
                    !Arc::ptr_eq(&entry.communicator, &communicator),
                    "{context}: got the communicator of {:?}{}",
                    entry.devices,
                    if entry.aborted.is_some() {
                        ", which is aborted"
                    } else {
                        ""
                    }
                );
            }
            assert!(
                !communicator.is_aborted(),
                "{context}: a fresh communicator is aborted"
            );
            handed.push(Handed {
                devices: devices.to_vec(),
                communicator,
                aborted: None,
            });
        }
    }
}

/// Every rank of `entry` all-reduces `[rank + 1]`: the sum, or the first abort's error.
fn reduce(device: &SimDevice, entry: &Handed, context: &str) {
    let communicator = &entry.communicator;
    let world = entry.devices.len();
    let results: Vec<_> = thread::scope(|scope| {
        let ranks: Vec<_> = (0..world)
            .map(|rank| {
                let values = HostValues::I64(vec![rank as i64 + 1]);
                let tensor = match device.upload(entry.devices[rank], &values) {
                    Ok(tensor) => tensor,
                    Err(error) => panic!("{context}: upload: {error}"),
                };
                scope.spawn(move || {
                    communicator.all_reduce_timeout(rank, tensor, ReduceOperation::Sum, TIMEOUT)
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|rank| {
                rank.join()
                    .unwrap_or_else(|_| panic!("{context}: a rank panicked"))
            })
            .collect()
    });
    let sum = (world * (world + 1) / 2) as i64;
    for (rank, result) in results.into_iter().enumerate() {
        match (&entry.aborted, result) {
            (None, Ok(output)) => assert_eq!(
                output.values(),
                &HostValues::I64(vec![sum]),
                "{context}: rank {rank}"
            ),
            (Some(reason), Err(NativeCollectiveError::Aborted { reason: got })) => {
                assert_eq!(
                    &got, reason,
                    "{context}: rank {rank} got another abort's reason"
                );
            }
            (expected, got) => panic!("{context}: rank {rank} got {got:?}; aborted: {expected:?}"),
        }
    }
}

/// Readable seeds.
pub fn seeds() -> Vec<(&'static str, Vec<Operation>)> {
    use Operation::*;
    vec![
        (
            "same_list_same_communicator",
            vec![Get(vec![0, 1, 2]), Get(vec![0, 1, 2]), Reduce(0)],
        ),
        (
            "other_order_other_communicator",
            vec![Get(vec![0, 1]), Get(vec![1, 0]), Reduce(0), Reduce(1)],
        ),
        (
            "aborted_is_replaced",
            vec![
                Get(vec![2, 3]),
                Abort(0),
                Reduce(0),
                Get(vec![2, 3]),
                Reduce(1),
                Abort(0),
            ],
        ),
        (
            "invalid_lists",
            vec![
                Get(vec![]),
                Get(vec![1, 1]),
                Concurrent {
                    devices: vec![4, 0, 4],
                    threads: 3,
                },
            ],
        ),
        (
            "concurrent_requests_agree",
            vec![
                Concurrent {
                    devices: vec![5, 4, 3, 2, 1],
                    threads: 4,
                },
                Reduce(0),
                Abort(0),
                Concurrent {
                    devices: vec![5, 4, 3, 2, 1],
                    threads: 2,
                },
            ],
        ),
        (
            "one_device",
            vec![Get(vec![3]), Reduce(0), Abort(0), Abort(0), Reduce(0)],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{decode, encode, seeds};
    use crate::bytes::Reader;

    #[test]
    fn seeds_decode_to_themselves() {
        for (name, operations) in seeds() {
            assert_eq!(
                decode(&mut Reader::new(&encode(&operations))),
                operations,
                "{name}"
            );
        }
    }
}
