//! A scenario: generations of one collective through a real communicator, one thread per rank,
//! on any device (typically a [`FaultyDevice`](ruccl_sim::FaultyDevice) injecting a plan).
//!
//! It streams: each rank deposits what it saw in a generation into a collector, and the rank
//! that completes a generation hands its row over a bounded channel to the caller's thread,
//! which prints it. Rows complete in generation order (a rank deposits `g` before `g + 1`), the
//! collector holds only generations some rank has not finished yet (a rank more than
//! [`WINDOW`] generations ahead of the slowest waits, as can happen only once the communicator
//! is aborted and calls fail fast), and nothing is kept per generation once its row is out:
//! memory is constant in the number of generations and time linear.
//!
//! What the busiest rank sent comes from the [`Probe`] around the device, counted from the steps
//! that completed — also in a generation that failed part-way.

use crate::probe::{Probe, bind_rank};
use crate::stop::{Stop, StopReason};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, ElementType, NativeCollectiveError,
    NativeCommunicator,
};
use ruccl_sim::HostTensors;
use ruccl_sim::contain::{call, release};
use ruccl_sim::ledger::lower_bound_per_rank;
use ruccl_sim::pattern::{self, Check};
use std::collections::BTreeMap;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How many generations ahead of the slowest rank another rank may deposit before it waits.
pub const WINDOW: u64 = 1024;

/// Rows in flight between the ranks and the caller.
const CHANNEL_ROWS: usize = 1024;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioConfig {
    /// The number of ranks.
    pub world: usize,
    /// The collective every generation runs.
    pub collective: Collective,
    /// The algorithm every rank asks for.
    pub algorithm: Algorithm,
    /// Elements of every rank's input.
    pub length: usize,
    /// The element type.
    pub element_type: ElementType,
    /// How many generations every rank runs.
    pub generations: u64,
    /// A rank that waits longer than this aborts the communicator (so a hang shows as an error).
    pub timeout: Duration,
}

impl Default for ScenarioConfig {
    /// 4 ranks, f32 sum all-reduce of 1024 elements, `Auto`, 4 generations, 10 s timeout.
    fn default() -> Self {
        Self {
            world: 4,
            collective: Collective::AllReduce(ruccl_core::ReduceOperation::Sum),
            algorithm: Algorithm::Auto,
            length: 1024,
            element_type: ElementType::F32,
            generations: 4,
            timeout: Duration::from_secs(10),
        }
    }
}

impl ScenarioConfig {
    /// The collective's per-rank lower bound on elements the busiest rank sends.
    pub fn lower_bound(&self) -> f64 {
        lower_bound_per_rank(self.collective, self.world, self.length)
    }

    /// Why the scenario cannot run, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.world == 0 {
            return Err("at least one rank is needed".to_owned());
        }
        if self.world > pattern::MAX_CHECKED_WORLD {
            return Err(format!(
                "outputs are checked exactly for up to {} ranks",
                pattern::MAX_CHECKED_WORLD
            ));
        }
        if self
            .collective
            .output_len(self.world, self.length)
            .is_none()
        {
            return Err(format!(
                "a {} input of {} elements does not split into {} equal blocks (-l must be a multiple of -g)",
                self.collective, self.length, self.world
            ));
        }
        if let Some(root) = self.collective.root() {
            if root >= self.world {
                return Err(format!(
                    "the root (-r {root}) is outside the world of {} ranks",
                    self.world
                ));
            }
        }
        if self.collective == Collective::AllToAll
            && matches!(self.algorithm, Algorithm::Ring | Algorithm::HalvingDoubling)
        {
            return Err(format!(
                "all-to-all has a direct plan only, not {} (-A direct or auto)",
                self.algorithm
            ));
        }
        if self.algorithm == Algorithm::HalvingDoubling && !self.world.is_power_of_two() {
            return Err(format!(
                "halving-doubling (-A) needs a power-of-two number of ranks, not {}",
                self.world
            ));
        }
        Ok(())
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
    /// All-reduce ranks with `Ok` whose output bits differ from rank 0's.
    pub differing: u64,
    /// Elements the busiest rank sent or received in the plan's completed steps.
    pub sent: usize,
    /// The algorithm of the plan, if one began.
    pub algorithm: Option<Algorithm>,
    /// The longest any rank's call took, in microseconds.
    pub time_us: f64,
    /// Anything else the harness saw: a failed download, a panicking drop of an output.
    pub notes: Vec<String>,
}

impl GenerationRow {
    fn new(generation: u64) -> Self {
        Self {
            generation,
            ok_ranks: Vec::new(),
            errors: Vec::new(),
            wrong: 0,
            differing: 0,
            sent: 0,
            algorithm: None,
            time_us: 0.0,
            notes: Vec::new(),
        }
    }

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

    /// Wrong values: elements plus differing ranks.
    pub fn wrong_values(&self) -> u64 {
        self.wrong + self.differing
    }
}

/// What a whole scenario did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Generations whose rows came out.
    pub generations: u64,
    /// Generations every rank got `Ok` in.
    pub ok: u64,
    /// Generations that failed on every rank with the same error.
    pub failed_alike: u64,
    /// Generations whose ranks disagreed.
    pub disagreed: u64,
    /// Wrong values over all generations.
    pub wrong: u64,
    /// From the start to the last row.
    pub elapsed: Duration,
    /// Why the scenario stopped early, if it did.
    pub stopped: Option<StopReason>,
    /// The most generations the collector held at once (bounded by the ranks' spread, at most
    /// [`WINDOW`] and one more).
    pub peak_pending: usize,
}

impl Summary {
    /// Count `row` in.
    pub fn add(&mut self, row: &GenerationRow) {
        self.generations += 1;
        self.wrong += row.wrong_values();
        if row.errors.is_empty() {
            self.ok += 1;
        } else if row.agreed() {
            self.failed_alike += 1;
        } else {
            self.disagreed += 1;
        }
    }

    /// Wall-clock time per generation, in microseconds.
    pub fn mean_us(&self) -> f64 {
        if self.generations == 0 {
            0.0
        } else {
            self.elapsed.as_secs_f64() * 1e6 / self.generations as f64
        }
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
    /// A rank's thread could not be started (a resource limit: `ulimit -u`, `ulimit -v`, a
    /// huge `RUST_MIN_STACK`); the ranks already started were released.
    #[error(
        "cannot start rank {rank}'s thread: {message} (a resource limit? ulimit -u / ulimit -v, RUST_MIN_STACK)"
    )]
    ThreadSpawn {
        /// The rank.
        rank: usize,
        /// The system's error.
        message: String,
    },
}

/// What one rank saw in one generation.
struct Seen {
    outcome: Result<(u64, Option<u64>), String>,
    sent: usize,
    algorithm: Option<Algorithm>,
    time: Duration,
    notes: Vec<String>,
}

/// A generation some rank has not finished yet.
struct Partial {
    row: GenerationRow,
    deposits: usize,
    /// Each `Ok` rank's output fingerprint (all-reduce), by rank.
    prints: Vec<(usize, u64)>,
}

/// The generations in flight.
struct Collector {
    world: usize,
    pending: Mutex<BTreeMap<u64, Partial>>,
    drained: Condvar,
    peak: std::sync::atomic::AtomicUsize,
    /// Ranks that stopped early (a stop request, or a panic in the harness): the generations
    /// they never reached can no longer complete, so nobody waits for them.
    departed: std::sync::atomic::AtomicUsize,
}

/// Counts its rank as departed from the collector when the rank stops early, also by unwinding.
struct Departure<'a> {
    collector: &'a Collector,
    finished: bool,
}

impl Drop for Departure<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.collector
                .departed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Waiters also wake on their own now and then (see `deposit`): no lock is taken
            // here, which a rank unwinding from inside `deposit` could still hold.
            self.collector.drained.notify_all();
        }
    }
}

impl Collector {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Partial>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Rank `rank`'s view of `generation`; the rank completing it sends its row.
    fn deposit(&self, generation: u64, rank: usize, seen: Seen, rows: &SyncSender<GenerationRow>) {
        let mut pending = self.lock();
        while pending
            .keys()
            .next()
            .is_some_and(|&oldest| generation >= oldest.saturating_add(WINDOW))
        {
            if self.departed.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                // A rank stopped early: this generation can never complete.
                return;
            }
            pending = self
                .drained
                .wait_timeout(pending, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let partial = pending.entry(generation).or_insert_with(|| Partial {
            row: GenerationRow::new(generation),
            deposits: 0,
            prints: Vec::new(),
        });
        partial.deposits += 1;
        let held = pending.len();
        self.peak
            .fetch_max(held, std::sync::atomic::Ordering::Relaxed);
        let Some(partial) = pending.get_mut(&generation) else {
            return;
        };
        let row = &mut partial.row;
        row.time_us = row.time_us.max(seen.time.as_secs_f64() * 1e6);
        if seen.algorithm.is_some() {
            row.sent = seen.sent;
            row.algorithm = seen.algorithm;
        }
        row.notes.extend(seen.notes);
        match seen.outcome {
            Ok((wrong, print)) => {
                row.ok_ranks.push(rank);
                row.wrong += wrong;
                if let Some(print) = print {
                    partial.prints.push((rank, print));
                }
            }
            Err(message) => row.errors.push((rank, message)),
        }
        if partial.deposits < self.world {
            return;
        }
        let Some(mut done) = pending.remove(&generation) else {
            return;
        };
        done.row.ok_ranks.sort_unstable();
        done.row.errors.sort_by_key(|(rank, _)| *rank);
        done.prints.sort_unstable();
        if let Some(&(0, reference)) = done.prints.first() {
            done.row.differing = done
                .prints
                .iter()
                .filter(|(_, print)| *print != reference)
                .count() as u64;
        }
        // In generation order: see the module's note. A full channel makes this rank wait
        // for the printer, with the lock held, so every rank waits: bounded memory.
        let _ = rows.send(done.row);
        self.drained.notify_all();
    }
}

/// Run `config` on `device` behind `probe` (which counts each plan's traffic and may trace),
/// handing each generation's row to `on_row` as it completes (on the calling thread), until
/// the generations are done or `stop` is set.
pub fn run_scenario<D: HostTensors>(
    device: &D,
    config: &ScenarioConfig,
    probe: &Probe,
    stop: &Stop,
    on_row: &mut dyn FnMut(&GenerationRow),
) -> Result<Summary, ScenarioError> {
    config.validate().map_err(ScenarioError::Config)?;
    let devices: Vec<DeviceId> = (0..config.world as u32).map(DeviceId::new).collect();
    let probed = probe.wrap(device.clone());
    let communicator = NativeCommunicator::new(devices.clone(), probed.clone())
        .map_err(ScenarioError::Communicator)?;
    let collector = Collector {
        world: config.world,
        pending: Mutex::new(BTreeMap::new()),
        drained: Condvar::new(),
        peak: std::sync::atomic::AtomicUsize::new(0),
        departed: std::sync::atomic::AtomicUsize::new(0),
    };
    let (sender, receiver) = sync_channel(CHANNEL_ROWS);
    let started = Instant::now();
    let mut summary = Summary::default();
    let joined: Result<(), ScenarioError> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.world)
            .map(|rank| {
                let rows = sender.clone();
                let (communicator, probed, collector, devices) =
                    (&communicator, &probed, &collector, &devices);
                std::thread::Builder::new()
                    .name(format!("rank {rank}"))
                    .spawn_scoped(scope, move || {
                        bind_rank(rank);
                        let context = RankContext {
                            device: probed,
                            communicator,
                            probe,
                            config,
                            on: devices[rank],
                            rank,
                        };
                        context.run(collector, &rows, stop);
                    })
            })
            .collect();
        // A rank whose thread could not start never arrives: abort the communicator so the
        // ranks already started fail fast, and count it departed so nobody waits for its rows.
        let mut spawn_failure = None;
        for (rank, handle) in handles.iter().enumerate() {
            if let Err(error) = handle {
                spawn_failure.get_or_insert_with(|| ScenarioError::ThreadSpawn {
                    rank,
                    message: error.to_string(),
                });
                collector
                    .departed
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        if let Some(failure) = &spawn_failure {
            communicator.abort(failure.to_string());
            collector.drained.notify_all();
        }
        drop(sender);
        for row in &receiver {
            summary.add(&row);
            summary.elapsed = started.elapsed();
            on_row(&row);
        }
        let joined = handles
            .into_iter()
            .enumerate()
            .filter_map(|(rank, handle)| handle.ok().map(|handle| (rank, handle)))
            .try_for_each(|(rank, handle)| {
                handle.join().map_err(|_| ScenarioError::Panicked(rank))
            });
        match spawn_failure {
            Some(failure) => Err(failure),
            None => joined,
        }
    });
    joined?;
    summary.stopped = stop.requested();
    summary.peak_pending = collector.peak.into_inner();
    Ok(summary)
}

/// One rank's share of the scenario.
struct RankContext<'a, D: HostTensors> {
    device: &'a D,
    communicator: &'a NativeCommunicator<D>,
    probe: &'a Probe,
    config: &'a ScenarioConfig,
    on: DeviceId,
    rank: usize,
}

impl<D: HostTensors> RankContext<'_, D> {
    fn run(&self, collector: &Collector, rows: &SyncSender<GenerationRow>, stop: &Stop) {
        let mut departure = Departure {
            collector,
            finished: false,
        };
        let config = self.config;
        let values = pattern::collective_input(
            config.element_type,
            config.collective,
            self.rank,
            config.length,
            0,
        );
        let check = Check::new(config.element_type, config.collective, config.world, 0);
        let options = CollectiveOptions::default()
            .with_algorithm(config.algorithm)
            .with_timeout(config.timeout);
        for generation in 0..config.generations {
            if let Some(reason) = stop.requested() {
                self.communicator
                    .abort(format!("the scenario stopped: {}", reason.describe()));
                return;
            }
            let seen = self.one_call(generation, &values, &check, options);
            collector.deposit(generation, self.rank, seen, rows);
        }
        departure.finished = true;
    }

    /// This rank's call of `generation`: upload its input, run the collective, check and drop
    /// the output.
    fn one_call(
        &self,
        generation: u64,
        values: &ruccl_sim::HostValues,
        check: &Check,
        options: CollectiveOptions,
    ) -> Seen {
        let mut notes = Vec::new();
        let begun = self.probe.traffic().begun;
        let tensor = match call("upload", || self.device.upload(self.on, values)) {
            Ok(tensor) => tensor,
            Err(message) => {
                return Seen {
                    outcome: Err(format!("(harness) {message}")),
                    sent: 0,
                    algorithm: None,
                    time: Duration::ZERO,
                    notes,
                };
            }
        };
        let collective = self.config.collective;
        let name = crate::collectives::PerfCollective::of(collective)
            .map_or("collective", |c| c.nccl_name);
        let start = Instant::now();
        let outcome = self.probe.call(self.rank, generation, name, || {
            self.communicator
                .collective(self.rank, tensor, collective, options)
        });
        let time = start.elapsed();
        let traffic = self.probe.traffic();
        let (sent, algorithm) = if traffic.begun > begun {
            (traffic.busiest(), traffic.algorithm)
        } else {
            (0, None)
        };
        let outcome = match outcome {
            Ok(output) => {
                let judged = match call("download", || self.device.download(&output)) {
                    Ok(values) => {
                        let wrong = check.count_wrong(self.rank, self.config.length, &values);
                        let print = matches!(collective, Collective::AllReduce(_))
                            .then(|| pattern::fingerprint(&values));
                        (wrong, print)
                    }
                    Err(message) => {
                        notes.push(format!("rank {}: {message}", self.rank));
                        let length = collective
                            .output_len(self.config.world, self.config.length)
                            .unwrap_or(0);
                        (length as u64, None)
                    }
                };
                if let Err(message) = release("drop of the output", output) {
                    notes.push(format!("rank {}: {message}", self.rank));
                }
                Ok(judged)
            }
            Err(error) => Err(error.to_string()),
        };
        Seen {
            outcome,
            sent,
            algorithm,
            time,
            notes,
        }
    }
}
