//! The collective matrix, run through a real [`NativeCommunicator`] with one thread per rank.
//!
//! Per world, the rank threads run every case of the matrix as successive generations of one
//! communicator; each uploads its own input, calls `collective` with the case's algorithm and the
//! configured timeout, downloads its output and posts it. The calling thread computes each case's
//! two references once — the [plan interpreter](mod@super::interpret) on the plan the core resolves,
//! and the [exact reference](mod@super::reference) — and checks every rank's output against both as
//! the results arrive, and, for the collectives whose ranks all receive the same thing, that they
//! did, bit for bit. The queue between them is bounded, so at most a few large outputs are in
//! memory at once.
//!
//! A device or a rendezvous that hangs cannot hang the suite: ranks stop waiting after the
//! configured timeout (the communicator then aborts), and if no result arrives for the configured
//! stall limit the suite records the hang — naming the ranks still inside a collective and the
//! generation each is in —, aborts the communicator and leaves the stuck threads behind.

use super::ConformanceConfig;
use super::inputs::{self, Case};
use super::interpret::{compare_bits, interpret, same_bits};
use super::reference::{self, Expected};
use super::report::{ConformanceFailure, ConformanceReport};
use crate::contain::{call, contained, release};
use crate::host::{ElementType, HostTensors, HostValues};
use ruccl_core::sync::{self, Arc, Condvar, Deadline, Mutex};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, LinkModel, NativeCommunicator, Plan,
    ReduceOperation, TensorInfo,
};
use std::collections::{BTreeMap, VecDeque};

/// The lengths (in elements per rank's output block: a reduce-scatter's input is `W` times
/// longer) every collective runs at in a world of `world` ranks: 0, 1, W-1, W, W+1 and the prime,
/// without repeats.
pub(crate) fn lengths(world: usize, prime: usize) -> Vec<usize> {
    let mut lengths = vec![0, 1, world.saturating_sub(1), world, world + 1, prime];
    lengths.sort_unstable();
    lengths.dedup();
    lengths
}

/// The collectives `kinds` stand for in a world: a reducing kind once per operation, a rooted
/// kind from a root that `root` picks.
fn collectives(kind: Collective, operations: &[ReduceOperation], root: usize) -> Vec<Collective> {
    let rooted = kind.with_root(root);
    if kind.operation().is_some() {
        operations
            .iter()
            .map(|&operation| rooted.with_operation(operation))
            .collect()
    } else {
        vec![rooted]
    }
}

/// Whether `algorithm` runs `collective` on `world` ranks with inputs of `length` (and can be
/// asked for by name): a fixed algorithm may have no plan for the collective or the world, or
/// refuse the size for its traffic ([`ruccl_core::TRAFFIC_BOUND`]).
fn runs(algorithm: Algorithm, collective: Collective, world: usize, length: usize) -> bool {
    match algorithm {
        Algorithm::Custom => false,
        Algorithm::Auto => true,
        fixed => Plan::new(collective, fixed, world, length).is_ok(),
    }
}

/// Every case of one world: every configured kind (reducing ones with every operation) × every
/// algorithm that runs on the world × every length; at the prime length every element type, at
/// the others one type per case, rotating (every type at every length with
/// [`ConformanceConfig::every_type_at_every_length`]); then the large cases.
pub(crate) fn matrix<D: HostTensors>(
    device: &D,
    world: usize,
    config: &ConformanceConfig,
) -> Vec<Case> {
    let types: Vec<ElementType> = config
        .element_types
        .iter()
        .copied()
        .filter(|&element_type| device.supports_type(element_type))
        .collect();
    let mut cases = Vec::new();
    let mut rotation = 0usize;
    for &kind in &config.kinds {
        for collective in collectives(kind, &config.operations, rotation % world.max(1)) {
            let supported: Vec<ElementType> = types
                .iter()
                .copied()
                .filter(|&element_type| {
                    collective
                        .operation()
                        .is_none_or(|operation| device.supports(element_type, operation))
                })
                .collect();
            if supported.is_empty() {
                continue;
            }
            for &algorithm in &config.algorithms {
                for length in lengths(world, config.prime_length) {
                    let length = match collective {
                        Collective::ReduceScatter(_)
                        | Collective::Scatter { .. }
                        | Collective::AllToAll => length * world,
                        _ => length,
                    };
                    if !runs(algorithm, collective, world, length) {
                        continue;
                    }
                    let every = config.every_type_at_every_length
                        || length == config.prime_length
                        || length == config.prime_length * world;
                    let chosen: Vec<ElementType> = if every {
                        supported.clone()
                    } else {
                        rotation += 1;
                        vec![supported[rotation % supported.len()]]
                    };
                    cases.extend(chosen.into_iter().map(|element_type| Case {
                        collective,
                        algorithm,
                        element_type,
                        length,
                    }));
                }
            }
            rotation += 1;
        }
    }
    for (element_type, operation) in config.large.chosen(world, config) {
        if device.supports_type(element_type) && device.supports(element_type, operation) {
            cases.push(Case {
                collective: Collective::AllReduce(operation),
                algorithm: Algorithm::Auto,
                element_type,
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
    /// Rank `rank` is done (all cases run, or it stopped after an abort).
    Exit { rank: usize },
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
        if !matches!(message, Message::Exit { .. }) {
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

/// Run the collective matrix of every configured world.
pub(crate) fn run_matrix<D: HostTensors>(
    device: &D,
    devices_for: &dyn Fn(usize) -> Vec<DeviceId>,
    config: &ConformanceConfig,
    report: &mut ConformanceReport,
) {
    for &world in &config.worlds {
        let devices = devices_for(world);
        let case = format!("W={world}");
        let failed = |detail: String| ConformanceFailure {
            check: "collective/devices".to_owned(),
            case: case.clone(),
            detail,
        };
        if devices.len() != world {
            report.check(Err(failed(format!(
                "the device list for {world} ranks has {} devices",
                devices.len()
            ))));
            continue;
        }
        let created = contained("clone of the device", || device.clone()).and_then(|clone| {
            let model = contained("link_model", || clone.link_model())?;
            NativeCommunicator::new(devices.clone(), clone)
                .map(|communicator| (communicator, model))
                .map_err(|error| error.to_string())
        });
        let (communicator, model) = match created {
            Ok(created) => created,
            Err(error) => {
                report.check(Err(failed(format!(
                    "no communicator over {devices:?}: {error}"
                ))));
                continue;
            }
        };
        let cases = matrix(device, world, config);
        let clone = match contained("clone of the device", || device.clone()) {
            Ok(clone) => clone,
            Err(detail) => {
                report.check(Err(failed(detail)));
                continue;
            }
        };
        let shared = Arc::new(World {
            device: clone,
            communicator,
            devices,
            cases,
            seed: config.seed,
            timeout: config.timeout,
            inbox: Inbox::new(2 * world),
        });
        if run_world(&shared, model, config, report) {
            // Its threads are left behind, stuck: the worlds after it would only pile up more.
            report.skipped.push(format!(
                "the collective matrix after W={world}: that world hung"
            ));
            return;
        }
    }
}

/// The fixed inputs of one world's rank threads.
struct World<D: HostTensors> {
    device: D,
    communicator: NativeCommunicator<D>,
    devices: Vec<DeviceId>,
    cases: Vec<Case>,
    seed: u64,
    timeout: std::time::Duration,
    inbox: Inbox,
}

/// One case's references and what its ranks delivered so far.
struct Pending {
    /// The interpreter's outputs, or why the suite could not interpret the case.
    bits: Result<Vec<HostValues>, String>,
    /// The exact references, one per rank.
    exact: Vec<Expected>,
    /// Outputs that arrived (successful or not).
    arrived: usize,
    /// The first successful output, which every other must equal bit for bit.
    first: Option<(usize, HostValues)>,
    /// Whether the ranks' outputs are the same bits so far.
    identical: Result<(), String>,
}

impl Pending {
    fn new(case: Case, world: usize, seed: u64, index: usize, model: &LinkModel) -> Self {
        let inputs: Vec<HostValues> = (0..world)
            .map(|rank| inputs::input(seed, world, index, case, rank))
            .collect();
        let input = TensorInfo {
            len: case.length,
            element: case.element_type,
        };
        let bits = Plan::with_model(case.collective, case.algorithm, world, input, model)
            .map_err(|error| format!("the suite cannot resolve the case's plan: {error}"))
            .and_then(|plan| {
                interpret(&plan, &inputs)
                    .map_err(|error| format!("the suite cannot interpret the plan: {error}"))
            });
        Self {
            bits,
            exact: reference::expected_outputs(case.collective, &inputs),
            arrived: 0,
            first: None,
            identical: Ok(()),
        }
    }
}

/// Whether every rank of `collective` receives the same output.
fn same_everywhere(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::AllReduce(_) | Collective::AllGather | Collective::Broadcast { .. }
    )
}

/// Run one world's cases and check what its ranks deliver; whether the world hung (the failure
/// is in the report).
fn run_world<D: HostTensors>(
    shared: &Arc<World<D>>,
    model: LinkModel,
    config: &ConformanceConfig,
    report: &mut ConformanceReport,
) -> bool {
    let world = shared.devices.len();
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            let shared = Arc::clone(shared);
            sync::thread::spawn(move || rank_thread(&shared, rank))
        })
        .collect();

    let mut pending: BTreeMap<usize, Pending> = BTreeMap::new();
    let mut received = vec![0usize; shared.cases.len()];
    // Per rank, how many cases it reported (it runs them in order, one generation each), and
    // whether its thread is done.
    let mut reported = vec![0usize; world];
    let mut done = vec![false; world];
    let mut exited = 0;
    let mut hung = false;
    while exited < world {
        let deadline = Deadline::after(config.stall);
        match shared.inbox.next(&deadline) {
            Some(Message::Exit { rank }) => {
                exited += 1;
                done[rank] = true;
            }
            Some(Message::Output {
                index,
                rank,
                outcome,
            }) => {
                let case = shared.cases[index];
                received[index] += 1;
                reported[rank] = index + 1;
                let entry = pending
                    .entry(index)
                    .or_insert_with(|| Pending::new(case, world, config.seed, index, &model));
                entry.arrived += 1;
                check_output(case, world, rank, outcome, entry, report);
                if entry.arrived == world {
                    if same_everywhere(case.collective) {
                        let identical = std::mem::replace(&mut entry.identical, Ok(()));
                        report.check(identical.map_err(|detail| ConformanceFailure {
                            check: "collective/identical".to_owned(),
                            case: format!("W={world} {case}"),
                            detail,
                        }));
                    }
                    pending.remove(&index);
                }
            }
            None => {
                hung = true;
                let stuck: Vec<String> = (0..world)
                    .filter(|&rank| !done[rank])
                    .map(|rank| match shared.cases.get(reported[rank]) {
                        Some(case) => {
                            format!("rank {rank} in generation {} ({case})", reported[rank])
                        }
                        None => format!("rank {rank} after its last generation"),
                    })
                    .collect();
                report.check(Err(ConformanceFailure {
                    check: "collective/hang".to_owned(),
                    case: format!("W={world}"),
                    detail: format!(
                        "no rank reported for {:?}: the device or the rendezvous hangs; stuck: {}",
                        config.stall,
                        stuck.join("; ")
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
                    check: "collective/thread".to_owned(),
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
    if let Some(first) = unfinished.first() {
        report.check(Err(ConformanceFailure {
            check: "collective/unfinished".to_owned(),
            case: format!("W={world}"),
            detail: format!(
                "{} cases never completed on every rank, first {first}",
                unfinished.len()
            ),
        }));
    }
    hung
}

/// Check one rank's outcome: the call succeeded, its output is the interpreter's bits and within
/// the exact reference's tolerance, and (where every rank receives the same) the same bits as
/// the first rank's that arrived.
fn check_output(
    case: Case,
    world: usize,
    rank: usize,
    outcome: Result<HostValues, String>,
    entry: &mut Pending,
    report: &mut ConformanceReport,
) {
    let failure = |check: &str, detail: String| ConformanceFailure {
        check: check.to_owned(),
        case: format!("W={world} {case} rank {rank}"),
        detail,
    };
    let values = match outcome {
        Ok(values) => values,
        Err(detail) => {
            report.check(Err(failure("collective/call", detail)));
            return;
        }
    };
    let bits = match &entry.bits {
        Ok(outputs) => match outputs.get(rank) {
            Some(want) => compare_bits(case.collective, want, &values)
                .map_err(|mismatch| format!("against the plan interpreter: {mismatch}")),
            None => Err("the interpreter has no output for this rank".to_owned()),
        },
        Err(detail) => Err(detail.clone()),
    };
    report.check(bits.map_err(|detail| failure("collective/bits", detail)));
    let exact = match entry.exact.get(rank) {
        Some(expected) => reference::compare(expected, case.element_type, &values)
            .map_err(|mismatch| format!("against the exact reference: {mismatch}")),
        None => Err("the exact reference has no output for this rank".to_owned()),
    };
    report.check(exact.map_err(|detail| failure("collective/reference", detail)));
    if !same_everywhere(case.collective) || entry.identical.is_err() {
        return;
    }
    match &entry.first {
        None => entry.first = Some((rank, values)),
        Some((first, witness)) => {
            if let Err(mismatch) = same_bits(witness, &values) {
                entry.identical = Err(format!(
                    "rank {rank}'s output differs from rank {first}'s: {mismatch}"
                ));
            }
        }
    }
}

/// One rank's run through its world's cases.
fn rank_thread<D: HostTensors>(world: &World<D>, rank: usize) {
    let size = world.devices.len();
    for (index, &case) in world.cases.iter().enumerate() {
        let values = inputs::input(world.seed, size, index, case, rank);
        let outcome = one_collective(world, rank, &values, case);
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
    world.inbox.post(Message::Exit { rank });
}

fn one_collective<D: HostTensors>(
    world: &World<D>,
    rank: usize,
    values: &HostValues,
    case: Case,
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
    let options = CollectiveOptions::default()
        .with_algorithm(case.algorithm)
        .with_timeout(world.timeout);
    let output = contained("collective", || {
        world
            .communicator
            .collective(rank, tensor, case.collective, options)
    })?
    .map_err(|error| format!("{} failed: {error}", case.collective))?;
    let downloaded = call("download", || world.device.download(&output));
    release("drop of the output", output)?;
    downloaded
}

/// Which large all-reduces to run; see [`ConformanceConfig::large`](super::ConformanceConfig::large).
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
