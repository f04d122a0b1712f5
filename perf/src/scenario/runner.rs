//! A scenario: a number of generations of one all-reduce through a real communicator, one thread
//! per rank, on any device (typically a [`FaultyDevice`](ruccl_sim::FaultyDevice) injecting a plan),
//! reporting per generation which ranks got `Ok`, the error they shared, whether the outputs are
//! right, and how many elements the ring moved against the lower bound.
//!
//! The device is wrapped in a [`TracingDevice`] for the run, so the elements moved are counted
//! from the steps that completed — also in a generation that failed part-way.

use ruccl_core::{
    DeviceId, ElementType, NativeCollectiveError, NativeCommunicator, ReduceOperation,
};
use ruccl_sim::HostTensors;
use ruccl_sim::contain::{call, release};
use ruccl_sim::pattern::{self, Expected};
use ruccl_sim::trace::{Tracer, TracingDevice, timelines};
use std::time::Duration;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioConfig {
    /// The number of ranks.
    pub world: usize,
    /// Elements per rank.
    pub length: usize,
    /// The element type.
    pub element_type: ElementType,
    /// The reduction.
    pub operation: ReduceOperation,
    /// How many generations every rank runs.
    pub generations: u64,
    /// A rank that waits longer than this aborts the communicator (so a hang shows as an error).
    pub timeout: Duration,
}

impl Default for ScenarioConfig {
    /// 4 ranks, 1024 f32 elements, sum, 4 generations, 10 s timeout.
    fn default() -> Self {
        Self {
            world: 4,
            length: 1024,
            element_type: ElementType::F32,
            operation: ReduceOperation::Sum,
            generations: 4,
            timeout: Duration::from_secs(10),
        }
    }
}

/// What one generation did.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationRow {
    /// The generation, from 0.
    pub generation: u64,
    /// The ranks whose call returned `Ok`, in order.
    pub ok_ranks: Vec<usize>,
    /// The ranks whose call failed, with the error's text, in rank order.
    pub errors: Vec<(usize, String)>,
    /// Elements, over the ranks that got `Ok`, that differ from the reference.
    pub wrong: u64,
    /// Elements the completed ring steps moved, over all links.
    pub moved: usize,
    /// The all-reduce lower bound over all links, `2(W-1)·n` elements.
    pub lower_bound: usize,
    /// Anything else the harness saw: a failed download, a panicking drop of an output.
    pub notes: Vec<String>,
}

impl GenerationRow {
    /// The error every failing rank received, if they all received the same one.
    pub fn shared_error(&self) -> Option<&str> {
        let (_, first) = self.errors.first()?;
        self.errors
            .iter()
            .all(|(_, message)| message == first)
            .then_some(first.as_str())
    }

    /// Whether the generation kept the agreement property: every rank `Ok`, or every rank the
    /// same error.
    pub fn agreed(&self) -> bool {
        self.errors.is_empty() || (self.ok_ranks.is_empty() && self.shared_error().is_some())
    }
}

/// Why a scenario could not run.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The configuration makes no scenario.
    #[error("invalid scenario: {0}")]
    Config(String),
    /// The communicator could not be made.
    #[error("cannot make the communicator: {0}")]
    Communicator(NativeCollectiveError),
    /// A rank thread of the harness panicked.
    #[error("rank thread {0} of the harness panicked")]
    Panicked(usize),
}

/// What one rank saw in one generation.
struct Seen {
    outcome: Result<u64, String>,
    notes: Vec<String>,
}

/// Run `config` on `device`, tracing into `tracer` (export it for a trace file).
pub fn run_scenario<D: HostTensors>(
    device: &D,
    config: &ScenarioConfig,
    tracer: &Tracer,
) -> Result<Vec<GenerationRow>, ScenarioError> {
    if config.world == 0 {
        return Err(ScenarioError::Config(
            "at least one rank is needed".to_owned(),
        ));
    }
    if config.world > pattern::MAX_CHECKED_WORLD {
        return Err(ScenarioError::Config(format!(
            "outputs are checked exactly for up to {} ranks",
            pattern::MAX_CHECKED_WORLD
        )));
    }
    let devices: Vec<DeviceId> = (0..config.world as u32).map(DeviceId::new).collect();
    let traced = TracingDevice::new(device.clone(), devices.clone(), tracer.clone());
    let communicator = NativeCommunicator::new(devices.clone(), traced.clone())
        .map_err(ScenarioError::Communicator)?;
    let expected = Expected::new(config.element_type, config.operation, config.world);
    let per_rank: Vec<Result<Vec<Seen>, ScenarioError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.world)
            .map(|rank| {
                let (communicator, traced, expected, devices) =
                    (&communicator, &traced, &expected, &devices);
                scope.spawn(move || {
                    tracer.bind_current_thread(rank);
                    (0..config.generations)
                        .map(|generation| {
                            one_call(
                                traced,
                                communicator,
                                expected,
                                config,
                                devices[rank],
                                rank,
                                generation,
                            )
                        })
                        .collect::<Vec<Seen>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| handle.join().map_err(|_| ScenarioError::Panicked(rank)))
            .collect()
    });
    let per_rank = per_rank.into_iter().collect::<Result<Vec<_>, _>>()?;
    let (calls, _) = timelines(&tracer.spans());
    let lower_bound = 2 * config.world.saturating_sub(1) * config.length;
    Ok((0..config.generations)
        .map(|generation| {
            let mut row = GenerationRow {
                generation,
                ok_ranks: Vec::new(),
                errors: Vec::new(),
                wrong: 0,
                moved: calls
                    .iter()
                    .filter(|call| call.generation == generation)
                    .map(|call| call.moved())
                    .sum(),
                lower_bound,
                notes: Vec::new(),
            };
            for (rank, seen) in per_rank.iter().enumerate() {
                let Some(seen) = seen.get(generation as usize) else {
                    continue;
                };
                match &seen.outcome {
                    Ok(wrong) => {
                        row.ok_ranks.push(rank);
                        row.wrong += wrong;
                    }
                    Err(message) => row.errors.push((rank, message.clone())),
                }
                row.notes.extend(seen.notes.iter().cloned());
            }
            row
        })
        .collect())
}

/// Rank `rank`'s call of `generation`: upload its input, all-reduce, check and drop the output.
fn one_call<D: HostTensors>(
    device: &TracingDevice<D>,
    communicator: &NativeCommunicator<TracingDevice<D>>,
    expected: &Expected,
    config: &ScenarioConfig,
    on: DeviceId,
    rank: usize,
    generation: u64,
) -> Seen {
    let mut notes = Vec::new();
    let values = pattern::input(config.element_type, config.operation, rank, config.length);
    let tensor = match call("upload", || device.upload(on, &values)) {
        Ok(tensor) => tensor,
        Err(message) => {
            return Seen {
                outcome: Err(format!("(harness) {message}")),
                notes,
            };
        }
    };
    let tracer = device.tracer();
    let start = tracer.now();
    let outcome = communicator.all_reduce_timeout(rank, tensor, config.operation, config.timeout);
    tracer.record_call(rank, generation, start, tracer.now(), outcome.is_ok());
    let outcome = match outcome {
        Ok(output) => {
            let wrong = match call("download", || device.download(&output)) {
                Ok(values) => expected.count_wrong(&values, config.length),
                Err(message) => {
                    notes.push(format!("rank {rank}: {message}"));
                    config.length as u64
                }
            };
            if let Err(message) = release("drop of the output", output) {
                notes.push(format!("rank {rank}: {message}"));
            }
            Ok(wrong)
        }
        Err(error) => Err(error.to_string()),
    };
    Seen { outcome, notes }
}
