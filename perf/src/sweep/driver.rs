//! The nccl-tests-style sweep: all-reduce time per message size, through a real
//! [`NativeCommunicator`] with one persistent thread per rank, on any device that can upload and
//! download host values.
//!
//! Per size, every rank uploads its [`pattern::input`](ruccl_sim::pattern::input); then, with the
//! check on, one all-reduce whose outputs are downloaded and compared with the reference
//! (`#wrong`, summed over ranks);
//! then `warmup` untimed and `iterations` timed all-reduces, each feeding its output back as the
//! next input, so nothing but the collective runs in the loop (no host copy: on a GPU the loop
//! times device work only). Rank 0 times the iterations from the end of the last warm-up
//! all-reduce (with no warm-up, from a barrier after every rank's check) to the end of its last
//! timed one (a collective returns only once the generation is complete, device work included),
//! so the harness's own barriers stay out of the figure.

use super::gate::{Broken, Gate};
use super::row::PerfRow;
use ruccl_core::sync::Mutex;
use ruccl_core::{
    DeviceId, ElementType, NativeCollectiveError, NativeCommunicator, ReduceOperation, RingSchedule,
};
use ruccl_sim::contain::{call, release};
use ruccl_sim::pattern::{self, Expected};
use ruccl_sim::{HostTensors, Ledger, LinkModel, Tracer};
use std::time::{Duration, Instant};

/// What to sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepConfig {
    /// The smallest message, in bytes per rank (`-b`).
    pub min_bytes: usize,
    /// The largest message, in bytes per rank (`-e`).
    pub max_bytes: usize,
    /// Each size is the previous one times this (`-f`, at least 2).
    pub step_factor: usize,
    /// The number of ranks (`-g`).
    pub world: usize,
    /// The element type (`-d`).
    pub element_type: ElementType,
    /// The reduction (`-o`).
    pub operation: ReduceOperation,
    /// Timed all-reduces per size (`-n`, at least 1).
    pub iterations: usize,
    /// Untimed all-reduces per size before timing (`-w`).
    pub warmup: usize,
    /// Whether to check one all-reduce per size against the reference (`-c`).
    pub check: bool,
    /// A rank that waits longer than this for the others fails the sweep instead of hanging it.
    pub timeout: Duration,
    /// The model whose predicted time is printed beside the measured one.
    pub link_model: LinkModel,
}

impl Default for SweepConfig {
    /// The default sweep: 8 B to 128 MiB by factors of 4 over 4 ranks, f32 sum, 20 timed
    /// iterations after 5 warm-up ones (nccl-tests' counts), checked.
    fn default() -> Self {
        Self {
            min_bytes: 8,
            max_bytes: 128 << 20,
            step_factor: 4,
            world: 4,
            element_type: ElementType::F32,
            operation: ReduceOperation::Sum,
            iterations: 20,
            warmup: 5,
            check: true,
            timeout: Duration::from_secs(120),
            link_model: default_link_model(),
        }
    }
}

/// α = 2 µs per step, β = 24 GB/s per link: roughly GPUs in a ring over PCIe 4.0 x16.
pub fn default_link_model() -> LinkModel {
    LinkModel::new(DEFAULT_ALPHA_US * 1e-6, DEFAULT_BETA_GBPS * 1e9)
        .unwrap_or_else(|_| unreachable!("the default link model is valid"))
}

/// The default per-step latency α of the link model, in microseconds.
pub const DEFAULT_ALPHA_US: f64 = 2.0;
/// The default per-link bandwidth β of the link model, in GB/s (10⁹ bytes per second).
pub const DEFAULT_BETA_GBPS: f64 = 24.0;

impl SweepConfig {
    /// The message sizes in bytes, as nccl-tests makes them: from `min_bytes`, multiplied by
    /// `step_factor` while at most `max_bytes`, each rounded down to whole elements (repeats
    /// dropped).
    pub fn sizes(&self) -> Vec<usize> {
        let element = self.element_type.size();
        let factor = self.step_factor.max(2);
        let mut sizes: Vec<usize> = Vec::new();
        let mut bytes = self.min_bytes;
        while bytes <= self.max_bytes {
            let whole = bytes / element * element;
            if sizes.last() != Some(&whole) {
                sizes.push(whole);
            }
            match bytes.checked_mul(factor) {
                Some(next) if next > bytes => bytes = next,
                _ => break,
            }
        }
        sizes
    }

    /// Why the sweep cannot run, if it cannot.
    pub fn validate(&self) -> Result<(), SweepError> {
        let invalid = |reason: String| Err(SweepError::Config(reason));
        if self.world == 0 {
            return invalid("at least one rank is needed".to_owned());
        }
        if self.check && self.world > pattern::MAX_CHECKED_WORLD {
            return invalid(format!(
                "the check is exact for up to {} ranks; turn it off (-c 0) for {}",
                pattern::MAX_CHECKED_WORLD,
                self.world
            ));
        }
        if self.min_bytes > self.max_bytes {
            return invalid(format!(
                "the smallest size ({} B) exceeds the largest ({} B)",
                self.min_bytes, self.max_bytes
            ));
        }
        if self.step_factor < 2 {
            return invalid(format!(
                "the step factor must be at least 2, got {}",
                self.step_factor
            ));
        }
        if self.iterations == 0 {
            return invalid("at least one timed iteration is needed".to_owned());
        }
        Ok(())
    }
}

/// What the harness measures with, besides the clock.
#[derive(Clone, Debug, Default)]
pub struct Instruments {
    /// The device's traffic ledger, for the traffic ratio and the priced traffic; without one,
    /// the schedule is priced and no ratio is reported.
    pub ledger: Option<Ledger>,
    /// A log to record every rank's `all_reduce` calls in (with a
    /// [`TracingDevice`](ruccl_sim::TracingDevice) around the device, for a full trace).
    pub tracer: Option<Tracer>,
}

/// Progress of a sweep, reported from rank 0's thread.
#[derive(Clone, Copy, Debug)]
pub enum SweepEvent<'a> {
    /// Size number `index` of `total` (`bytes` per rank) is starting.
    Started {
        /// Position of the size, from 0.
        index: usize,
        /// The number of sizes.
        total: usize,
        /// Bytes per rank.
        bytes: usize,
    },
    /// A size was measured.
    Measured(&'a PerfRow),
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
    /// An all-reduce failed (every rank got this error).
    #[error("all-reduce of {bytes} bytes per rank failed: {error}")]
    Collective {
        /// Bytes per rank.
        bytes: usize,
        /// The error every rank received.
        error: NativeCollectiveError,
    },
    /// A rank's upload, download or drop of a tensor failed, or a rank stopped waiting because
    /// another one failed.
    #[error("rank {rank}, {bytes} bytes per rank: {message}")]
    Host {
        /// The rank.
        rank: usize,
        /// Bytes per rank.
        bytes: usize,
        /// What failed: the device's error or panic message, naming the call.
        message: String,
    },
    /// A rank thread of the harness panicked.
    #[error("rank thread {0} of the harness panicked")]
    Panicked(usize),
}

/// State shared by the rank threads of one sweep.
struct Shared<'a, D: HostTensors> {
    device: &'a D,
    config: &'a SweepConfig,
    instruments: &'a Instruments,
    devices: Vec<DeviceId>,
    communicator: NativeCommunicator<D>,
    gate: Gate,
    /// `wrong[i]`: wrong elements found so far at size `i`, over all ranks.
    wrong: Mutex<Vec<u64>>,
    sizes: Vec<usize>,
    expected: Expected,
    /// The first failure of any rank: what stopped the sweep (the others then fail too).
    failure: Mutex<Option<SweepError>>,
}

/// Run the sweep on `device` (one communicator, one thread per rank), calling `on_event` from rank
/// 0's thread as sizes start and finish. Returns one row per size.
pub fn sweep<D: HostTensors>(
    device: &D,
    config: &SweepConfig,
    instruments: &Instruments,
    on_event: &(dyn Fn(SweepEvent<'_>) + Sync),
) -> Result<Vec<PerfRow>, SweepError> {
    config.validate()?;
    let devices: Vec<DeviceId> = (0..config.world as u32).map(DeviceId::new).collect();
    let communicator = NativeCommunicator::new(devices.clone(), device.clone())
        .map_err(SweepError::Communicator)?;
    let sizes = config.sizes();
    let shared = Shared {
        device,
        config,
        instruments,
        devices,
        communicator,
        gate: Gate::new(config.world),
        wrong: Mutex::new(vec![0; sizes.len()]),
        expected: Expected::new(config.element_type, config.operation, config.world),
        sizes,
        failure: Mutex::new(None),
    };
    let outcomes: Vec<Result<Vec<PerfRow>, SweepError>> = std::thread::scope(|scope| {
        let shared = &shared;
        let handles: Vec<_> = (0..config.world)
            .map(|rank| scope.spawn(move || shared.rank_loop(rank, on_event)))
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| handle.join().unwrap_or(Err(SweepError::Panicked(rank))))
            .collect()
    });
    if let Some(failure) = shared.failure.into_inner() {
        return Err(failure);
    }
    // Rank 0 returns the rows; the others return none.
    let mut outcomes = outcomes.into_iter();
    let rows = outcomes.next().unwrap_or(Ok(Vec::new()))?;
    for outcome in outcomes {
        outcome?;
    }
    Ok(rows)
}

impl<D: HostTensors> Shared<'_, D> {
    /// One rank's thread: every size in turn. Rank 0 times and returns the rows.
    fn rank_loop(
        &self,
        rank: usize,
        on_event: &(dyn Fn(SweepEvent<'_>) + Sync),
    ) -> Result<Vec<PerfRow>, SweepError> {
        if let Some(tracer) = &self.instruments.tracer {
            tracer.bind_current_thread(rank);
        }
        let mut rows = Vec::new();
        let mut generation = 0;
        for (index, &bytes) in self.sizes.iter().enumerate() {
            if rank == 0 {
                on_event(SweepEvent::Started {
                    index,
                    total: self.sizes.len(),
                    bytes,
                });
            }
            let outcome = self.measure(rank, index, bytes, &mut generation);
            match outcome {
                Ok(Some(row)) => {
                    on_event(SweepEvent::Measured(&row));
                    rows.push(row);
                }
                Ok(None) => {}
                Err(error) => {
                    self.failure.lock().get_or_insert_with(|| error.clone());
                    // Let no other rank wait for this one.
                    self.gate.break_all();
                    self.communicator
                        .abort(format!("the sweep stopped: {error}"));
                    return Err(error);
                }
            }
        }
        Ok(rows)
    }

    /// One size on one rank; rank 0 returns the row.
    fn measure(
        &self,
        rank: usize,
        index: usize,
        bytes: usize,
        generation: &mut u64,
    ) -> Result<Option<PerfRow>, SweepError> {
        let config = self.config;
        let count = bytes / config.element_type.size();
        let host = |message: String| SweepError::Host {
            rank,
            bytes,
            message,
        };
        let broken = |Broken| host("stopped waiting: another rank failed".to_owned());
        let values = pattern::input(config.element_type, config.operation, rank, count);
        let mut tensor =
            call("upload", || self.device.upload(self.devices[rank], &values)).map_err(host)?;
        drop(values);
        self.gate.wait().map_err(broken)?;
        if config.check {
            tensor = self.all_reduce(rank, tensor, bytes, generation)?;
            let output = call("download", || self.device.download(&tensor)).map_err(host)?;
            let wrong = self.expected.count_wrong(&output, count);
            self.wrong.lock()[index] += wrong;
        }
        for _ in 0..config.warmup {
            tensor = self.all_reduce(rank, tensor, bytes, generation)?;
        }
        if config.check && config.warmup == 0 {
            // No warm-up all-reduce waited for the other ranks' checks: wait here, or the first
            // timed one would include their downloads and comparisons.
            self.gate.wait().map_err(broken)?;
        }
        let start = Instant::now();
        for _ in 0..config.iterations {
            tensor = self.all_reduce(rank, tensor, bytes, generation)?;
        }
        let elapsed = start.elapsed();
        release("drop of the tensor", tensor).map_err(host)?;
        // Every rank's check and every generation of this size are done past this point.
        self.gate.wait().map_err(broken)?;
        if rank != 0 {
            return Ok(None);
        }
        let traffic = self.instruments.ledger.as_ref().and_then(Ledger::last);
        let model = &config.link_model;
        let model_seconds = match &traffic {
            Some(traffic) => model.price_traffic(traffic),
            None => model.price_schedule(
                &RingSchedule::new(config.world, count),
                config.element_type.size(),
            ),
        };
        Ok(Some(PerfRow {
            bytes,
            count,
            element_type: config.element_type,
            operation: config.operation,
            world: config.world,
            time_us: elapsed.as_secs_f64() * 1e6 / config.iterations as f64,
            wrong: config.check.then(|| self.wrong.lock()[index]),
            traffic_ratio: traffic
                .as_ref()
                .and_then(|traffic| traffic.max_ratio_to_lower_bound()),
            model_us: model_seconds * 1e6,
        }))
    }

    fn all_reduce(
        &self,
        rank: usize,
        tensor: D::Tensor,
        bytes: usize,
        generation: &mut u64,
    ) -> Result<D::Tensor, SweepError> {
        let tracer = self.instruments.tracer.as_ref();
        let start = tracer.map(Tracer::now);
        let outcome = self.communicator.all_reduce_timeout(
            rank,
            tensor,
            self.config.operation,
            self.config.timeout,
        );
        if let (Some(tracer), Some(start)) = (tracer, start) {
            tracer.record_call(rank, *generation, start, tracer.now(), outcome.is_ok());
        }
        *generation += 1;
        outcome.map_err(|error| SweepError::Collective { bytes, error })
    }
}
