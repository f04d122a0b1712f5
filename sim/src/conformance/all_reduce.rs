//! The all-reduce matrix, run through a real [`NativeCommunicator`] with one thread per rank.
//!
//! Per world, the rank threads run every case of the matrix as successive generations of one
//! communicator; each uploads its own input, calls `all_reduce_timeout`, downloads its output
//! and posts it. The calling thread computes each case's reference once and compares every rank's
//! output with it as the results arrive. The queue between them is bounded, so at most a few
//! large outputs are in memory at once.
//!
//! A device that hangs cannot hang the suite: ranks stop waiting after the configured timeout
//! (the communicator then aborts), and if no result arrives for twice that long the suite records
//! the hang, aborts the communicator and leaves the stuck threads behind.

use super::ConformanceConfig;
use super::inputs::{self, Case};
use super::reference::{self, Expected};
use super::report::{ConformanceFailure, ConformanceReport};
use crate::contain::{call, contained, release};
use crate::host::{ElementType, HostTensors, HostValues};
use ruccl_core::sync::{self, Arc, Condvar, Deadline, Mutex};
use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation};
use std::collections::{BTreeMap, VecDeque};

/// The lengths every (operation, element type) pair is run at in a world of `world` ranks:
/// 0, 1, W-1, W, W+1 and the prime, without repeats.
pub(crate) fn lengths(world: usize, prime: usize) -> Vec<usize> {
    let mut lengths = vec![0, 1, world.saturating_sub(1), world, world + 1, prime];
    lengths.sort_unstable();
    lengths.dedup();
    lengths
}

/// Every case of one world: the small matrix, then the large cases chosen for this world.
pub(crate) fn matrix<D: HostTensors>(
    device: &D,
    world: usize,
    config: &ConformanceConfig,
) -> Vec<Case> {
    let mut cases = Vec::new();
    for &element_type in &config.element_types {
        for &operation in &config.operations {
            if !device.supports(element_type, operation) {
                continue;
            }
            for length in lengths(world, config.prime_length) {
                cases.push(Case {
                    element_type,
                    operation,
                    length,
                });
            }
        }
    }
    for (element_type, operation) in config.large.chosen(world, config) {
        if device.supports(element_type, operation) {
            cases.push(Case {
                element_type,
                operation,
                length: config.large_length,
            });
        }
    }
    cases
}

/// What a rank thread posts.
enum Message {
    /// Rank `rank`'s output (or why there is none) for case number `index`.
    Output {
        index: usize,
        rank: usize,
        outcome: Result<HostValues, String>,
    },
    /// A rank is done (all cases run, or it stopped after an abort).
    Exit,
}

/// The bounded queue from the rank threads to the checking thread.
struct Inbox {
    state: Mutex<Queue>,
    changed: Condvar,
    capacity: usize,
}

struct Queue {
    messages: VecDeque<Message>,
    /// Set when the checker stops reading; posting then never blocks.
    closed: bool,
}

impl Inbox {
    fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(Queue {
                messages: VecDeque::new(),
                closed: false,
            }),
            changed: Condvar::new(),
            capacity: capacity.max(1),
        }
    }

    fn post(&self, message: Message) {
        let mut queue = self.state.lock();
        // An exit is always accepted at once, so the checker never misses one.
        if !matches!(message, Message::Exit) {
            while queue.messages.len() >= self.capacity && !queue.closed {
                queue = self.changed.wait(queue);
            }
        }
        queue.messages.push_back(message);
        self.changed.notify_all();
    }

    /// The next message, or `None` if none arrived before `deadline`.
    fn next(&self, deadline: &Deadline) -> Option<Message> {
        let mut queue = self.state.lock();
        loop {
            if let Some(message) = queue.messages.pop_front() {
                self.changed.notify_all();
                return Some(message);
            }
            let (woken, expired) = self.changed.wait_until(queue, deadline);
            queue = woken;
            if expired && queue.messages.is_empty() {
                return None;
            }
        }
    }

    fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }
}

/// Run the all-reduce matrix of every configured world.
pub(crate) fn all_reduces<D: HostTensors>(
    device: &D,
    devices_for: &dyn Fn(usize) -> Vec<DeviceId>,
    config: &ConformanceConfig,
    report: &mut ConformanceReport,
) {
    for &world in &config.worlds {
        let devices = devices_for(world);
        let case = format!("W={world}");
        if devices.len() != world {
            report.check(Err(ConformanceFailure {
                check: "all_reduce/devices".to_owned(),
                case,
                detail: format!(
                    "the device list for {world} ranks has {} devices",
                    devices.len()
                ),
            }));
            continue;
        }
        let created = contained("clone of the device", || device.clone()).and_then(|clone| {
            NativeCommunicator::new(devices.clone(), clone).map_err(|error| error.to_string())
        });
        let communicator = match created {
            Ok(communicator) => Arc::new(communicator),
            Err(error) => {
                report.check(Err(ConformanceFailure {
                    check: "all_reduce/devices".to_owned(),
                    case,
                    detail: format!("no communicator over {devices:?}: {error}"),
                }));
                continue;
            }
        };
        let cases = matrix(device, world, config);
        run_world(device, &communicator, &devices, cases, config, report);
    }
}

/// The fixed inputs of one world's rank threads.
struct World<D: HostTensors> {
    device: D,
    communicator: Arc<NativeCommunicator<D>>,
    devices: Vec<DeviceId>,
    cases: Vec<Case>,
    seed: u64,
    timeout: std::time::Duration,
    inbox: Inbox,
}

fn run_world<D: HostTensors>(
    device: &D,
    communicator: &Arc<NativeCommunicator<D>>,
    devices: &[DeviceId],
    cases: Vec<Case>,
    config: &ConformanceConfig,
    report: &mut ConformanceReport,
) {
    let world = devices.len();
    let device = match contained("clone of the device", || device.clone()) {
        Ok(device) => device,
        Err(detail) => {
            report.check(Err(ConformanceFailure {
                check: "all_reduce/devices".to_owned(),
                case: format!("W={world}"),
                detail,
            }));
            return;
        }
    };
    let shared = Arc::new(World {
        device,
        communicator: Arc::clone(communicator),
        devices: devices.to_vec(),
        cases,
        seed: config.seed,
        timeout: config.timeout,
        inbox: Inbox::new(2 * world),
    });
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            let shared = Arc::clone(&shared);
            sync::thread::spawn(move || rank_thread(&shared, rank))
        })
        .collect();

    // Per case: its reference (computed on the first output) and how many outputs arrived.
    let mut pending: BTreeMap<usize, (Expected, usize)> = BTreeMap::new();
    let mut received = vec![0usize; shared.cases.len()];
    let mut exited = 0;
    let mut hung = false;
    while exited < world {
        let deadline = Deadline::after(config.timeout.saturating_mul(2));
        match shared.inbox.next(&deadline) {
            Some(Message::Exit) => exited += 1,
            Some(Message::Output {
                index,
                rank,
                outcome,
            }) => {
                let case = shared.cases[index];
                received[index] += 1;
                let entry = pending.entry(index).or_insert_with(|| {
                    let inputs: Vec<HostValues> = (0..world)
                        .map(|rank| inputs::input(config.seed, world, index, case, rank))
                        .collect();
                    (reference::expected(case.operation, &inputs), 0)
                });
                entry.1 += 1;
                let verdict = outcome.and_then(|values| {
                    reference::compare(&entry.0, case.element_type, &values)
                        .map_err(|mismatch| mismatch.to_string())
                });
                if entry.1 == world {
                    pending.remove(&index);
                }
                report.check(verdict.map_err(|detail| ConformanceFailure {
                    check: "all_reduce".to_owned(),
                    case: format!("W={world} {case} rank {rank}"),
                    detail,
                }));
            }
            None => {
                hung = true;
                report.check(Err(ConformanceFailure {
                    check: "all_reduce/hang".to_owned(),
                    case: format!("W={world}"),
                    detail: format!(
                        "no rank reported for {:?}: the device or the rendezvous hangs",
                        config.timeout.saturating_mul(2)
                    ),
                }));
                shared
                    .communicator
                    .abort("the conformance suite gave up on a hung generation");
                shared.inbox.close();
                break;
            }
        }
    }
    if !hung {
        for (rank, handle) in handles.into_iter().enumerate() {
            if handle.join().is_err() {
                report.check(Err(ConformanceFailure {
                    check: "all_reduce/thread".to_owned(),
                    case: format!("W={world} rank {rank}"),
                    detail: "the rank thread panicked".to_owned(),
                }));
            }
        }
    }
    let unfinished: Vec<String> = received
        .iter()
        .enumerate()
        .filter(|&(_, &count)| count < world)
        .map(|(index, count)| format!("{} ({count} of {world} ranks)", shared.cases[index]))
        .collect();
    if !unfinished.is_empty() {
        report.check(Err(ConformanceFailure {
            check: "all_reduce/unfinished".to_owned(),
            case: format!("W={world}"),
            detail: format!(
                "{} cases never completed on every rank, first {}",
                unfinished.len(),
                unfinished[0]
            ),
        }));
    }
}

/// One rank's run through its world's cases.
fn rank_thread<D: HostTensors>(world: &World<D>, rank: usize) {
    let size = world.devices.len();
    for (index, &case) in world.cases.iter().enumerate() {
        let values = inputs::input(world.seed, size, index, case, rank);
        let outcome = one_all_reduce(world, rank, &values, case.operation);
        let stop = outcome.is_err() && world.communicator.is_aborted();
        world.inbox.post(Message::Output {
            index,
            rank,
            outcome,
        });
        if stop {
            break;
        }
    }
    world.inbox.post(Message::Exit);
}

fn one_all_reduce<D: HostTensors>(
    world: &World<D>,
    rank: usize,
    values: &HostValues,
    operation: ReduceOperation,
) -> Result<HostValues, String> {
    let device = world.devices[rank];
    let tensor = match call("upload", || world.device.upload(device, values)) {
        Ok(tensor) => tensor,
        Err(message) => {
            // Without a tensor this rank cannot take part: let the others fail fast.
            world
                .communicator
                .abort(format!("rank {rank} could not upload its input: {message}"));
            return Err(message);
        }
    };
    let output = contained("all_reduce", || {
        world
            .communicator
            .all_reduce_timeout(rank, tensor, operation, world.timeout)
    })?
    .map_err(|error| format!("all_reduce failed: {error}"))?;
    let downloaded = call("download", || world.device.download(&output));
    release("drop of the output", output)?;
    downloaded
}

/// Which large cases to run; see [`ConformanceConfig::large`](super::ConformanceConfig::large).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LargeCases {
    /// None.
    Skip,
    /// Four, spread over element types, operations and worlds of at least two ranks: f32 sum on
    /// the largest configured world, bf16 mean on the middle one, i64 product on the second
    /// smallest, f16 max on the smallest (worlds 8, 5, 3 and 2 by default).
    Sample,
    /// Every operation × element type × configured world.
    Every,
    /// Exactly these (element type, operation, world) triples.
    Only(Vec<(ElementType, ReduceOperation, usize)>),
}

impl LargeCases {
    /// The (element type, operation) pairs to run at the large length in `world`.
    fn chosen(
        &self,
        world: usize,
        config: &ConformanceConfig,
    ) -> Vec<(ElementType, ReduceOperation)> {
        let wanted = |element_type, operation| {
            config.element_types.contains(&element_type) && config.operations.contains(&operation)
        };
        match self {
            LargeCases::Skip => Vec::new(),
            LargeCases::Every => config
                .element_types
                .iter()
                .flat_map(|&element_type| {
                    config
                        .operations
                        .iter()
                        .map(move |&operation| (element_type, operation))
                })
                .collect(),
            LargeCases::Only(triples) => triples
                .iter()
                .filter(|&&(element_type, operation, at)| {
                    at == world && wanted(element_type, operation)
                })
                .map(|&(element_type, operation, _)| (element_type, operation))
                .collect(),
            LargeCases::Sample => {
                let mut worlds: Vec<usize> = config.worlds.clone();
                worlds.sort_unstable();
                worlds.dedup();
                let multi: Vec<usize> = worlds.iter().copied().filter(|&w| w >= 2).collect();
                let pick = |position: usize| multi.get(position.min(multi.len().saturating_sub(1)));
                let samples = [
                    (ElementType::F32, ReduceOperation::Sum, multi.last()),
                    (
                        ElementType::BF16,
                        ReduceOperation::Mean,
                        pick(multi.len() / 2),
                    ),
                    (ElementType::I64, ReduceOperation::Product, pick(1)),
                    (ElementType::F16, ReduceOperation::Max, multi.first()),
                ];
                samples
                    .into_iter()
                    .filter(|&(element_type, operation, at)| {
                        at == Some(&world) && wanted(element_type, operation)
                    })
                    .map(|(element_type, operation, _)| (element_type, operation))
                    .collect()
            }
        }
    }
}
