//! The sweep driver, nccl-tests' `TimeTest` and `BenchTime`: collectives through real
//! [`NativeCommunicator`]s, one persistent thread per rank, on any device that can upload and
//! download host values.
//!
//! Two communicators serve the ranks: one over the device working **out of place** (every
//! generation copies its inputs into fresh buffers, nccl-tests' out-of-place) and one **in
//! place** (the device works in the input's own allocation where the plan allows it). For each
//! sweep, as nccl-tests: `warmup` untimed collectives at every size from the smallest to the
//! largest, doubling (a 0-byte size warms up at 0 and then 1); then per size, out of place and
//! then in place (sweeps that differ only in their algorithm take turns at each size, so that
//! one run compares them under the same conditions):
//!
//! 0. rank 0 empties both devices' caches of kept memory
//!    ([`release_cached`](ruccl_sim::HostTensors::release_cached)), and the ranks meet: what
//!    the warm-up and earlier rows left is freed here, not inside this row's timing;
//! 1. every rank uploads its [`pattern`](ruccl_sim::pattern) input and runs one untimed
//!    collective (nccl-tests' sync);
//! 2. a barrier; each rank times `iterations` collectives — an all-reduce or broadcast feeds
//!    its output back as the next input, so nothing but the collective runs in the loop; a
//!    reduce-scatter or all-gather, whose output cannot be its next input, takes inputs uploaded
//!    before a barrier, in batches that fit `batch_bytes` — and the time per collective is
//!    averaged over the ranks as `-a` says;
//! 3. `checks` times: fresh inputs (a new seed each), one collective, every rank's output
//!    compared with the reference; `#wrong` is the elements that differ plus, for an
//!    all-reduce, the ranks whose output bits differ from rank 0's. A check that finds
//!    something ends the checking, as in nccl-tests.
//!
//! Rank 0 reports each row as it is measured. A rank that fails (a collective's error, a
//! failed upload, [`Stop`]) breaks the barriers and aborts both communicators, so no rank
//! waits for it; the sweep returns the first failure.

use super::config::{Setup, SweepConfig};
use super::gate::{Broken, Gate};
use super::row::{Measured, PerfRow, Waits, schedule_fingerprint};
use crate::membound::{Bound, Meter, MinTraffic};
use crate::probe::Probe;
use crate::stop::{Stop, StopReason};
use ruccl_core::{
    Collective, CollectiveOptions, DeviceId, NativeCollectiveError, NativeCommunicator, Plan,
    TensorInfo,
};
use ruccl_sim::contain::{call, release};
use ruccl_sim::pattern::{self, Check};
use ruccl_sim::{GenerationTraffic, HostTensors, HostValues, Ledger, LinkModel};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// `mutex`, locked; a rank that panicked holding it left nothing half-written that matters.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The seed of the inputs timed collectives run on (checks use 1, 2, …).
const TIMED_SEED: usize = 0;

/// The device twice: working out of place and in place.
#[derive(Clone, Debug)]
pub struct Places<D> {
    /// Every generation copies its inputs into fresh buffers.
    pub out_of_place: D,
    /// The device works in the input's own allocation where the plan allows it.
    pub in_place: D,
}

/// Where a measurement runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// nccl-tests' out-of-place.
    OutOfPlace,
    /// nccl-tests' in-place.
    InPlace,
}

impl Place {
    /// `out-of-place` or `in-place`.
    pub fn name(self) -> &'static str {
        match self {
            Place::OutOfPlace => "out-of-place",
            Place::InPlace => "in-place",
        }
    }
}

/// What the sweep measures with, besides the clock.
#[derive(Clone, Debug)]
pub struct Instruments {
    /// The out-of-place device's traffic ledger (the rows' `traffic_ratio`); without one, the plan
    /// is priced instead and no ratio is reported. Rank 0 pauses it while the ranks time their
    /// generations: the ratio is the untimed sync generation's traffic (every generation of a
    /// size runs the same plan), and the timed ones pay nothing for the harness's books.
    pub ledger: Option<Ledger>,
    /// Threads to measure the host-memory bound with before each row ([`crate::membound`]);
    /// `None`: no bound (GPUs, or not shown).
    pub bound_threads: Option<usize>,
    /// The probe the devices are behind: it records every call when tracing.
    pub probe: Probe,
    /// Checked before every collective call.
    pub stop: Stop,
}

impl Default for Instruments {
    fn default() -> Self {
        Self {
            ledger: None,
            bound_threads: None,
            probe: Probe::new(0, false, None),
            stop: Stop::new(),
        }
    }
}

/// Progress of a sweep, reported from rank 0's thread.
#[derive(Clone, Copy, Debug)]
pub enum SweepEvent<'a> {
    /// A measurement is starting.
    Started {
        /// The sweep (type, operation, root), from 0.
        sweep: usize,
        /// The size's position in its sweep, from 0.
        index: u64,
        /// The number of sizes in the sweep.
        total: u64,
        /// The table's size, bytes.
        bytes: usize,
        /// Which placement.
        place: Place,
    },
    /// A size was measured.
    Measured(&'a PerfRow),
    /// A size was skipped: the core refuses the sweep's algorithm there
    /// ([`SweepConfig::refusal`]).
    Skipped {
        /// The sweep.
        config: &'a SweepConfig,
        /// The size.
        setup: &'a Setup,
        /// Why the core refuses it.
        reason: &'a str,
    },
}

/// Why a sweep stopped.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The configuration makes no sweep.
    #[error("invalid sweep: {0}")]
    Config(String),
    /// The communicator could not be made.
    #[error("cannot make the communicator: {0}")]
    Communicator(NativeCollectiveError),
    /// An imported schedule could not be lowered to a verified plan at a size.
    #[error("the schedule cannot run: {reason}")]
    Schedule {
        /// Why.
        reason: String,
    },
    /// A collective failed (every rank got this error).
    #[error("{collective} of {bytes} B ({place}) failed: {error}")]
    Collective {
        /// The collective.
        collective: Collective,
        /// The table's size.
        bytes: usize,
        /// Out of place or in place.
        place: &'static str,
        /// The error every rank received.
        error: NativeCollectiveError,
    },
    /// A rank's upload, download or drop of a tensor failed, or a rank stopped waiting because
    /// another one failed.
    #[error("rank {rank}, {bytes} B: {message}")]
    Host {
        /// The rank.
        rank: usize,
        /// The table's size.
        bytes: usize,
        /// What failed: the device's error or panic message, naming the call.
        message: String,
    },
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
    /// The sweep was asked to stop.
    #[error("stopped: {}", .0.describe())]
    Stopped(StopReason),
}

/// What rank 0 learns from one measurement.
struct Outcome {
    measured: Measured,
    traffic: Option<GenerationTraffic>,
}

/// What the ranks of one check pool.
#[derive(Default)]
struct Tally {
    /// Wrong elements so far in this check, over the ranks.
    wrong: u64,
    /// Each rank's output fingerprint (all-reduce).
    prints: Vec<Option<u64>>,
    /// Rank 0's verdict for the check just pooled: wrong elements plus differing ranks.
    decided: u64,
}

/// State shared by the rank threads.
struct Shared<'a, D: HostTensors> {
    places: &'a Places<D>,
    instruments: &'a Instruments,
    devices: Vec<DeviceId>,
    out_of_place: NativeCommunicator<D>,
    in_place: NativeCommunicator<D>,
    gate: Gate,
    times: Mutex<Vec<f64>>,
    tally: Mutex<Tally>,
    /// The first failure of any rank: what stopped the sweep.
    failure: Mutex<Option<SweepError>>,
}

/// Run `configs` (one sweep each, all over the same world) on `places`, one thread per rank,
/// calling `on_event` from rank 0's thread as measurements start and rows are measured. Rows are
/// not kept: a sweep of any length takes the memory of one size.
pub fn sweep<D: HostTensors>(
    places: &Places<D>,
    configs: &[SweepConfig],
    instruments: &Instruments,
    on_event: &(dyn Fn(SweepEvent<'_>) + Sync),
) -> Result<(), SweepError> {
    let Some(world) = configs.first().map(|config| config.world) else {
        return Ok(());
    };
    for config in configs {
        config.validate().map_err(SweepError::Config)?;
        if config.world != world {
            return Err(SweepError::Config(
                "every sweep of one run has the same world".to_owned(),
            ));
        }
    }
    let devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
    let communicator = |device: &D| {
        NativeCommunicator::new(devices.clone(), device.clone()).map_err(SweepError::Communicator)
    };
    let shared = Shared {
        places,
        instruments,
        out_of_place: communicator(&places.out_of_place)?,
        in_place: communicator(&places.in_place)?,
        devices,
        gate: Gate::new(world),
        times: Mutex::new(vec![0.0; world]),
        tally: Mutex::new(Tally {
            prints: vec![None; world],
            ..Tally::default()
        }),
        failure: Mutex::new(None),
    };
    let outcomes: Vec<Result<(), SweepError>> = std::thread::scope(|scope| {
        let shared = &shared;
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                std::thread::Builder::new()
                    .name(format!("rank {rank}"))
                    .spawn_scoped(scope, move || shared.rank_loop(rank, configs, on_event))
            })
            .collect::<Vec<_>>();
        // A rank whose thread could not start never arrives: release the ranks already
        // started, which would otherwise wait for it until the timeout.
        if let Some((rank, Err(error))) = handles
            .iter()
            .enumerate()
            .find(|(_, handle)| handle.is_err())
        {
            let reason = format!("cannot start rank {rank}'s thread: {error}");
            lock(&shared.failure).get_or_insert_with(|| SweepError::ThreadSpawn {
                rank,
                message: error.to_string(),
            });
            shared.gate.break_all();
            shared.out_of_place.abort(reason.clone());
            shared.in_place.abort(reason);
        }
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| match handle {
                Ok(handle) => handle.join().unwrap_or(Err(SweepError::Panicked(rank))),
                Err(error) => Err(SweepError::ThreadSpawn {
                    rank,
                    message: error.to_string(),
                }),
            })
            .collect()
    });
    if let Some(failure) = shared
        .failure
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(failure);
    }
    outcomes.into_iter().collect()
}

impl<D: HostTensors> Shared<'_, D> {
    /// One rank's thread: every sweep in turn; rank 0 reports the rows.
    fn rank_loop(
        &self,
        rank: usize,
        configs: &[SweepConfig],
        on_event: &(dyn Fn(SweepEvent<'_>) + Sync),
    ) -> Result<(), SweepError> {
        crate::probe::bind_rank(rank);
        let mut generation = 0;
        let mut first = 0;
        let outcome = configs
            .chunk_by(|one, next| one.interleaves_with(next))
            .try_for_each(|group| {
                let sweeps = self.interleaved(rank, first, group, &mut generation, on_event);
                first += group.len();
                sweeps
            });
        if let Err(error) = &outcome {
            lock(&self.failure).get_or_insert_with(|| error.clone());
            // Let no other rank wait for this one.
            self.gate.break_all();
            let reason = format!("the sweep stopped: {error}");
            self.out_of_place.abort(reason.clone());
            self.in_place.abort(reason);
        }
        outcome
    }

    /// The sweeps of `group` (numbered from `first`), which differ only in their algorithm
    /// ([`SweepConfig::interleaves_with`]): each warmed up, then size by size, every sweep in
    /// turn at each size — so algorithms compared in one run meet the same conditions.
    fn interleaved(
        &self,
        rank: usize,
        first: usize,
        group: &[SweepConfig],
        generation: &mut u64,
        on_event: &(dyn Fn(SweepEvent<'_>) + Sync),
    ) -> Result<(), SweepError> {
        let Some(lead) = group.first() else {
            return Ok(());
        };
        for config in group.iter().filter(|config| config.warmup > 0) {
            // nccl-tests (2.16.8 on): at every size from the smallest to the largest, doubling.
            let mut requested = config.sizes.min;
            loop {
                let setup = config.setup(requested);
                if config.refusal(&setup).is_none() {
                    self.warm_up(rank, config, &setup, generation)?;
                }
                let next = if requested == 0 {
                    Some(1)
                } else {
                    requested.checked_mul(2)
                };
                match next {
                    Some(next) if next <= config.sizes.max => requested = next,
                    _ => break,
                }
            }
        }
        let total = lead.sizes.count();
        let mut meter = (rank == 0)
            .then_some(self.instruments.bound_threads.map(Meter::new))
            .flatten();
        for (position, requested) in lead.sizes.iter().enumerate() {
            for (offset, config) in group.iter().enumerate() {
                let setup = config.setup(requested);
                // Every rank decides alike: the plan is the same on every rank.
                if let Some(reason) = config.refusal(&setup) {
                    if rank == 0 {
                        on_event(SweepEvent::Skipped {
                            config,
                            setup: &setup,
                            reason: &reason,
                        });
                    }
                    continue;
                }
                // Step 0 (see the module's docs): a caching allocator frees what ages out on a
                // later call — 64 MiB buffers a warm-up left made the next 1 MiB row's
                // out-of-place time 1.2 ms instead of 50–80 µs (W = 2).
                if rank == 0 {
                    self.places.out_of_place.release_cached();
                    self.places.in_place.release_cached();
                }
                self.gate(rank, &setup)?;
                let bound = self.bound(rank, config, &setup, meter.as_ref())?;
                let measuring = Instant::now();
                let mut outcomes = Vec::with_capacity(2);
                for place in [Place::OutOfPlace, Place::InPlace] {
                    if rank == 0 {
                        on_event(SweepEvent::Started {
                            sweep: first + offset,
                            index: position as u64,
                            total,
                            bytes: setup.bytes,
                            place,
                        });
                    }
                    outcomes.push(self.measure(rank, config, &setup, place, generation)?);
                }
                if let Some(meter) = meter.as_mut() {
                    meter.row_took(measuring.elapsed());
                }
                if let [Some(out_of_place), Some(in_place)] = &outcomes[..] {
                    let mut row = self.row(config, &setup, out_of_place, in_place);
                    row.bound = bound;
                    on_event(SweepEvent::Measured(&row));
                }
            }
        }
        Ok(())
    }

    /// The host-memory bound of `setup`'s row, measured by rank 0 with its `meter` while the
    /// other ranks wait at the gate (parked, using no core); `None` on the other ranks.
    fn bound(
        &self,
        rank: usize,
        config: &SweepConfig,
        setup: &Setup,
        meter: Option<&Meter>,
    ) -> Result<Option<Bound>, SweepError> {
        if self.instruments.bound_threads.is_none() {
            return Ok(None);
        }
        self.gate(rank, setup)?;
        let bound = meter.and_then(|meter| {
            let traffic = MinTraffic::of(
                config.collective(),
                config.world,
                setup.counts.send,
                config.element_type.size(),
            );
            let collectives = 2 * (1 + config.iterations + config.checks);
            meter.measure(config.world * setup.bytes, traffic, collectives)
        });
        self.gate(rank, setup)?;
        Ok(bound)
    }

    fn communicator(&self, place: Place) -> &NativeCommunicator<D> {
        match place {
            Place::OutOfPlace => &self.out_of_place,
            Place::InPlace => &self.in_place,
        }
    }

    fn host_error(rank: usize, setup: &Setup) -> impl Fn(String) -> SweepError {
        let bytes = setup.bytes;
        move |message| SweepError::Host {
            rank,
            bytes,
            message,
        }
    }

    fn gate(&self, rank: usize, setup: &Setup) -> Result<(), SweepError> {
        self.gate.wait().map_err(|Broken| {
            Self::host_error(rank, setup)("stopped waiting: another rank failed".to_owned())
        })
    }

    fn device(&self, place: Place) -> &D {
        match place {
            Place::OutOfPlace => &self.places.out_of_place,
            Place::InPlace => &self.places.in_place,
        }
    }

    /// Upload `values` as `rank`'s tensor on the device of `place` (a device works in place only
    /// on tensors of its own).
    fn upload(
        &self,
        rank: usize,
        setup: &Setup,
        place: Place,
        values: &HostValues,
    ) -> Result<D::Tensor, SweepError> {
        let device = self.device(place);
        call("upload", || device.upload(self.devices[rank], values))
            .map_err(Self::host_error(rank, setup))
    }

    fn release(&self, rank: usize, setup: &Setup, tensor: D::Tensor) -> Result<(), SweepError> {
        release("drop of a tensor", tensor).map_err(Self::host_error(rank, setup))
    }

    /// One collective call of `rank`, numbered `generation` (the rank's call count).
    fn collective(
        &self,
        rank: usize,
        config: &SweepConfig,
        setup: &Setup,
        place: Place,
        tensor: D::Tensor,
        generation: &mut u64,
    ) -> Result<D::Tensor, SweepError> {
        if let Some(reason) = self.instruments.stop.requested() {
            return Err(SweepError::Stopped(reason));
        }
        let collective = config.collective();
        let options = CollectiveOptions::default()
            .with_algorithm(config.algorithm)
            .with_timeout(config.timeout);
        let communicator = self.communicator(place);
        let number = *generation;
        *generation += 1;
        // An imported schedule: the verified plan for this size, the same on every rank.
        let plan = match &config.schedule {
            Some(schedule) => Some(
                schedule
                    .plan(setup.counts.send, config.operation)
                    .map_err(|reason| SweepError::Schedule { reason })?,
            ),
            None => None,
        };
        self.instruments
            .probe
            .call(rank, number, config.collective.nccl_name, || match plan {
                Some(plan) => communicator.run_plan(rank, tensor, plan, Some(config.timeout)),
                None => communicator.collective(rank, tensor, collective, options),
            })
            .map_err(|error| SweepError::Collective {
                collective,
                bytes: setup.bytes,
                place: place.name(),
                error,
            })
    }

    /// `config.warmup` untimed collectives out of place at `setup`'s size.
    fn warm_up(
        &self,
        rank: usize,
        config: &SweepConfig,
        setup: &Setup,
        generation: &mut u64,
    ) -> Result<(), SweepError> {
        let place = Place::OutOfPlace;
        let values = pattern::collective_input(
            config.element_type,
            config.collective(),
            rank,
            setup.counts.send,
            TIMED_SEED,
        );
        if setup.counts.feeds_back() {
            let mut tensor = self.upload(rank, setup, place, &values)?;
            for _ in 0..config.warmup {
                tensor = self.collective(rank, config, setup, place, tensor, generation)?;
            }
            self.release(rank, setup, tensor)
        } else {
            for _ in 0..config.warmup {
                let tensor = self.upload(rank, setup, place, &values)?;
                let output = self.collective(rank, config, setup, place, tensor, generation)?;
                self.release(rank, setup, output)?;
            }
            Ok(())
        }
    }

    /// One size at one placement on one rank; rank 0 returns the outcome.
    fn measure(
        &self,
        rank: usize,
        config: &SweepConfig,
        setup: &Setup,
        place: Place,
        generation: &mut u64,
    ) -> Result<Option<Outcome>, SweepError> {
        let collective = config.collective();
        let values = pattern::collective_input(
            config.element_type,
            collective,
            rank,
            setup.counts.send,
            TIMED_SEED,
        );
        // nccl-tests' sync: one untimed collective.
        let tensor = self.upload(rank, setup, place, &values)?;
        let output = self.collective(rank, config, setup, place, tensor, generation)?;
        // Rank 0 got the sync generation's output, so it is published and its waits counted;
        // the first timed one needs rank 0's next call: the difference to the reading after
        // the timed loop is exactly the timed generations'. The sync generation is recorded in
        // the ledger by now, too; the timed ones, which begin after the gate, are not.
        let waited_before = (rank == 0).then(|| self.communicator(place).wait_stats());
        let paused = match (&self.instruments.ledger, rank) {
            (Some(ledger), 0) => Some(ledger.pause()),
            _ => None,
        };
        let elapsed = if setup.counts.feeds_back() {
            drop(values);
            self.gate(rank, setup)?;
            let start = Instant::now();
            let mut tensor = output;
            for _ in 0..config.iterations {
                tensor = self.collective(rank, config, setup, place, tensor, generation)?;
            }
            let elapsed = start.elapsed();
            self.release(rank, setup, tensor)?;
            elapsed
        } else {
            self.release(rank, setup, output)?;
            let batch = config.batch(setup);
            let mut remaining = config.iterations;
            let mut elapsed = Duration::ZERO;
            while remaining > 0 {
                let count = batch.min(remaining);
                let inputs = (0..count)
                    .map(|_| self.upload(rank, setup, place, &values))
                    .collect::<Result<Vec<_>, _>>()?;
                self.gate(rank, setup)?;
                let start = Instant::now();
                for input in inputs {
                    let output = self.collective(rank, config, setup, place, input, generation)?;
                    self.release(rank, setup, output)?;
                }
                elapsed += start.elapsed();
                remaining -= count;
            }
            elapsed
        };
        lock(&self.times)[rank] = elapsed.as_secs_f64() / config.iterations as f64;
        self.gate(rank, setup)?;
        // Every rank has returned from its last timed call.
        drop(paused);
        let time_us = config.average.of(&lock(&self.times)) * 1e6;
        let waits = waited_before.map(|before| {
            let after = self.communicator(place).wait_stats();
            Waits {
                generations: after.generations.saturating_sub(before.generations),
                parked: after
                    .parked_generations
                    .saturating_sub(before.parked_generations),
            }
        });
        let traffic = match (&self.instruments.ledger, rank, place) {
            (Some(ledger), 0, Place::OutOfPlace) => ledger.last(),
            _ => None,
        };
        let wrong = self.check(rank, config, setup, place, generation)?;
        Ok((rank == 0).then_some(Outcome {
            measured: Measured {
                time_us,
                wrong,
                waits,
            },
            traffic,
        }))
    }

    /// Up to `config.checks` checked collectives; every rank returns the same count.
    fn check(
        &self,
        rank: usize,
        config: &SweepConfig,
        setup: &Setup,
        place: Place,
        generation: &mut u64,
    ) -> Result<Option<u64>, SweepError> {
        let collective = config.collective();
        let mut wrong = None;
        for check in 0..config.checks {
            let seed = check + 1;
            let values = pattern::collective_input(
                config.element_type,
                collective,
                rank,
                setup.counts.send,
                seed,
            );
            let tensor = self.upload(rank, setup, place, &values)?;
            drop(values);
            let output = self.collective(rank, config, setup, place, tensor, generation)?;
            let device = self.device(place);
            let downloaded = call("download", || device.download(&output))
                .map_err(Self::host_error(rank, setup))?;
            self.release(rank, setup, output)?;
            let mine = Check::new(config.element_type, collective, config.world, seed).count_wrong(
                rank,
                setup.counts.send,
                &downloaded,
            );
            let print = matches!(collective, Collective::AllReduce(_))
                .then(|| pattern::fingerprint(&downloaded));
            drop(downloaded);
            {
                let mut tally = lock(&self.tally);
                tally.wrong += mine;
                tally.prints[rank] = print;
            }
            self.gate(rank, setup)?;
            if rank == 0 {
                let mut tally = lock(&self.tally);
                let reference = tally.prints.first().copied().flatten();
                let differing = tally
                    .prints
                    .iter()
                    .filter(|print| print.is_some() && **print != reference)
                    .count() as u64;
                tally.decided = tally.wrong + differing;
                tally.wrong = 0;
            }
            self.gate(rank, setup)?;
            let total = lock(&self.tally).decided;
            wrong = Some(total);
            if total > 0 {
                break;
            }
        }
        Ok(wrong)
    }

    /// Rank 0's row from both placements' outcomes.
    fn row(
        &self,
        config: &SweepConfig,
        setup: &Setup,
        out_of_place: &Outcome,
        in_place: &Outcome,
    ) -> PerfRow {
        let model = self.places.out_of_place.link_model();
        let plan = planned(config, setup, &model);
        let (algorithm, traffic_ratio, model_seconds) = match (&out_of_place.traffic, &plan) {
            (Some(traffic), _) => (
                Some(traffic.algorithm),
                traffic.max_ratio_to_lower_bound(),
                Some(traffic.priced(&model)),
            ),
            (None, Some(plan)) => (
                Some(plan.algorithm()),
                None,
                Some(model.plan_time(plan, config.element_type.size())),
            ),
            (None, None) => (None, None, None),
        };
        PerfRow {
            collective: config.collective(),
            element_type: config.element_type,
            world: config.world,
            bytes: setup.bytes,
            count: setup.counts.param,
            root: config.root_column(),
            out_of_place: out_of_place.measured,
            in_place: in_place.measured,
            asked: Some(config.algorithm),
            algorithm,
            traffic_ratio,
            model_us: model_seconds.map(|seconds| seconds * 1e6),
            schedule: plan.as_ref().map(schedule_fingerprint),
            bound: None,
        }
    }
}

/// The plan the core resolves for `setup` with the device's `model` (an imported schedule's,
/// with `--schedule`).
fn planned(config: &SweepConfig, setup: &Setup, model: &LinkModel) -> Option<Plan> {
    if let Some(schedule) = &config.schedule {
        return schedule.plan(setup.counts.send, config.operation).ok();
    }
    let input = TensorInfo {
        len: setup.counts.send,
        element: config.element_type,
    };
    Plan::with_model(
        config.collective(),
        config.algorithm,
        config.world,
        input,
        model,
    )
    .ok()
}
