//! [`HierarchicalCommunicator`]: every rank of every process of a job in one communicator. Each
//! process drives its local ranks (one thread each) through the verified core's
//! [`NativeCommunicator`]; between the local phases, one thread per process runs the
//! inter-process step on an [`InterProcess`] engine (MPI here).
//!
//! | file          | job                                                                  |
//! |---------------|----------------------------------------------------------------------|
//! | `mod.rs`      | the communicator: what a local rank does in each collective          |
//! | `step.rs`     | the inter-process steps (exchange, closing), the routes, the requests |
//! | `hook.rs`     | the local device, with the inter-process step hooked into `finish`   |
//! | `meeting.rs`  | where local ranks meet to make the step after a local failure         |
//! | `models.rs`   | loom/shuttle models of the meeting and the status agreement (checkers only) |
//! | `layout.rs`   | the job's layout (local ranks per process) and its arithmetic        |
//! | `staging.rs`  | [`StagingDevice`], [`LayoutBuffer`]: what a device and a buffer provide |
//! | `error.rs`    | [`HierarchicalError`], [`ProcessCall`], the call's tag               |
//!
//! One generation, on every process (`L` local ranks, `W` ranks in the job):
//!
//! ```text
//! every local rank (its own thread)         the last local rank to arrive, inside the core's run
//! ───────────────────────────────────────────────────────────────────────────────────────────────
//! register its request and deadline
//! phase 1: a NativeCommunicator collective ─▶ after the device's finish: stage the outputs out,
//!          (all-reduce: a reduce-scatter)     the engine's collective(s) — Ok(data), or Err(the
//!                                             lowest local rank's failure) —, stage back in;
//!                                             unless these are an all-reduce's shards, the
//!                                             closing agreement too
//! all-reduce shards: register again,
//! phase 2: NativeCommunicator all-gather  ──▶ after the device's finish: the closing agreement
//! return the output, or the agreed error
//! ```
//!
//! A local failure before the hook (so no engine call yet) sends the local ranks to a meeting
//! whose last arriver makes the engine call with the failure.
//!
//! See `mpi/README.md` ("The hierarchical communicator") for the layouts, the agreement and the
//! timeouts.

mod error;
mod hook;
mod layout;
mod meeting;
#[cfg(all(test, any(ruccl_loom, ruccl_shuttle)))]
mod models;
mod staging;
mod step;
#[cfg(test)]
mod tests;

pub use error::{HierarchicalError, ProcessCall};
pub use staging::{LayoutBuffer, StagingDevice};

use crate::error::LocalFailure;
use crate::inter_process::InterProcess;
use error::SETUP_TAG;
use hook::Hooked;
use layout::Layout;
use meeting::{Meeting, Missed};
use ruccl_core::{
    Collective, CollectiveOptions, DeviceId, NativeCollectiveError, NativeCommunicator,
    ReduceOperation, TensorInfo,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use step::{Part, Pending, Phase, Request, Shared, contain, discard, internal};

/// The next communicator number this process proposes at a creation (0 stays for callers of an
/// engine that give no identity).
static NEXT_COMMUNICATOR: AtomicU64 = AtomicU64::new(1);

/// A communicator over every rank of every process of a job: each process's local ranks on its
/// own devices, processes joined by an inter-process engine.
///
/// Ranks are numbered across the job: processes in order, each process's local ranks in order
/// ([`global_rank`](Self::global_rank)). Each local rank calls from its own thread with its
/// *local* index, as on a [`NativeCommunicator`]; a broadcast's root is a *global* rank. Shapes
/// are those of [`Collective`] with `W` = [`world_size`](Self::world_size) ranks.
///
/// ## Agreement
///
/// Every collective agrees on a status across the job, so every rank of every process returns
/// its output, or the same [`HierarchicalError`] text: a device error or panic in either local
/// phase, a mismatch among a process's ranks or across processes, an abort, an argument the job
/// cannot honour, a failed staging — on any rank of any process. After such a failure the next
/// generation works (an abort is sticky).
///
/// ## Timeouts
///
/// [`CollectiveOptions::timeout`] bounds every wait of the call: for the local ranks (the local
/// phases) and for the other processes (the engine's deadline, the earliest of the process's
/// local ranks). When it passes, every waiting rank of every process returns
/// [`HierarchicalError::TimedOut`] with one text, and the communicator is poisoned: every later
/// call returns that error at once (the local communicator is aborted, the engine may still hold
/// a collective MPI cannot cancel). A rank that waits without a timeout for a process that never
/// calls waits for ever.
pub struct HierarchicalCommunicator<D, I>
where
    I: InterProcess + 'static,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    local: NativeCommunicator<Hooked<D, I>>,
    shared: Arc<Shared<D, I>>,
    /// The exchange of a generation that failed before the hook could make it.
    failed_exchange: Meeting<Part<I::Buffer>, ()>,
    /// The closing agreement of an all-reduce whose all-gather failed before the hook.
    failed_closing: Meeting<Status, ()>,
    ranks: Vec<RankSlot>,
    /// Set once by [`abort`](Self::abort): every later generation fails with it.
    aborted: OnceLock<String>,
    /// [`HierarchicalOptions::shards_from`], the same on every process.
    shards_from: usize,
}

/// How a [`HierarchicalCommunicator`] is made; every process must pass the same options (checked
/// at creation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HierarchicalOptions {
    /// The message size (bytes) from which an all-reduce or reduce-scatter takes the shard route
    /// — a local reduce-scatter, the shards between processes, a local all-gather — rather than
    /// the whole route — a local all-reduce, one engine call, copies —, which costs one local
    /// hand-off less. Default: 8 MiB (measured: the whole route wins up to 4 MiB, the shard
    /// route from 16 MiB).
    pub shards_from: usize,
}

impl Default for HierarchicalOptions {
    fn default() -> Self {
        HierarchicalOptions {
            shards_from: step::SHARDS_FROM_BYTES,
        }
    }
}

impl HierarchicalOptions {
    /// These options with the shard threshold `bytes`.
    pub fn with_shards_from(mut self, bytes: usize) -> Self {
        self.shards_from = bytes;
        self
    }
}

/// A local rank's bookkeeping.
struct RankSlot {
    /// A call of this rank is in progress.
    busy: AtomicBool,
    /// Calls of this rank so far: the next one's generation.
    generation: AtomicU64,
    /// This rank's uses of the two failure meetings so far.
    failed_exchanges: AtomicU64,
    failed_closings: AtomicU64,
}

/// A local rank's deposit at the failure closing meeting.
struct Status {
    failure: String,
    deadline: Option<Instant>,
    tag: u64,
}

impl<D, I> HierarchicalCommunicator<D, I>
where
    I: InterProcess + 'static,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    /// A communicator over this process's local ranks on `devices` (local rank `r` on
    /// `devices[r]`, driven through `device`) and every other process of `inter`'s job, with the
    /// default [`HierarchicalOptions`]. Every process must call this, in the same order as its
    /// other collective calls on `inter`: the processes exchange their local rank counts (any
    /// number per process, at least one), waiting until `deadline`. A process whose devices are
    /// invalid fails here, and so does every other, with its reason.
    pub fn new(
        devices: Vec<DeviceId>,
        device: D,
        inter: I,
        deadline: Option<Instant>,
    ) -> Result<Self, HierarchicalError> {
        Self::with_options(
            devices,
            device,
            inter,
            HierarchicalOptions::default(),
            deadline,
        )
    }

    /// Like [`new`](Self::new), with `options` (the same on every process, else every process
    /// fails with [`HierarchicalError::Setup`]).
    pub fn with_options(
        devices: Vec<DeviceId>,
        device: D,
        inter: I,
        options: HierarchicalOptions,
        deadline: Option<Instant>,
    ) -> Result<Self, HierarchicalError> {
        let valid = NativeCommunicator::new(devices.clone(), device.clone()).map(|_| ());
        let threshold = i64::try_from(options.shards_from).unwrap_or(i64::MAX);
        // This process's proposal for the communicator's number; the largest proposal wins, and
        // every later proposal of this process is above it.
        let proposal = NEXT_COMMUNICATOR.fetch_add(1, Ordering::Relaxed);
        let proposal = i64::try_from(proposal).unwrap_or(i64::MAX);
        let mine = match &valid {
            Ok(()) => Ok(I::Buffer::from_words(vec![
                devices.len() as i64,
                threshold,
                proposal,
            ])),
            Err(error) => Err(LocalFailure::new(error)),
        };
        let words = inter
            .collective(Collective::AllGather, mine, SETUP_TAG, deadline)
            .map_err(|error| HierarchicalError::Setup {
                reason: error.to_string(),
            })?;
        valid.map_err(|error| HierarchicalError::setup(&error))?;
        let words = words.into_words().unwrap_or_default();
        if words
            .chunks(3)
            .any(|three| three.get(1) != Some(&threshold))
        {
            return Err(HierarchicalError::Setup {
                reason: "the processes asked for different shard thresholds".to_owned(),
            });
        }
        let communicator = words
            .chunks(3)
            .filter_map(|three| three.get(2))
            .filter_map(|number| u64::try_from(*number).ok())
            .max()
            .unwrap_or(0);
        NEXT_COMMUNICATOR.fetch_max(communicator.saturating_add(1), Ordering::Relaxed);
        let counts: Option<Vec<usize>> = words
            .chunks(3)
            .map(|three| usize::try_from(three[0]).ok())
            .collect();
        let layout = counts
            .and_then(|counts| Layout::new(inter.process(), counts))
            .ok_or_else(|| HierarchicalError::Setup {
                reason: "the processes' local rank counts do not make a layout".to_owned(),
            })?;
        // Every process got here with the same words, so every process opens the channel.
        inter
            .open_channel(communicator, deadline)
            .map_err(|error| HierarchicalError::Setup {
                reason: error.to_string(),
            })?;
        let ranks = layout.local();
        let shared = Arc::new(Shared::new(
            device.clone(),
            devices.clone(),
            inter,
            layout,
            communicator,
        ));
        let local = NativeCommunicator::new(devices, Hooked::new(device, Arc::clone(&shared)))
            .map_err(|error| HierarchicalError::setup(&error))?;
        Ok(HierarchicalCommunicator {
            local,
            shared,
            failed_exchange: Meeting::new(ranks),
            failed_closing: Meeting::new(ranks),
            ranks: (0..ranks)
                .map(|_| RankSlot {
                    busy: AtomicBool::new(false),
                    generation: AtomicU64::new(0),
                    failed_exchanges: AtomicU64::new(0),
                    failed_closings: AtomicU64::new(0),
                })
                .collect(),
            aborted: OnceLock::new(),
            shards_from: options.shards_from,
        })
    }

    /// This process's index among the job's processes.
    pub fn process(&self) -> usize {
        self.shared.layout.process()
    }

    /// The number of processes.
    pub fn processes(&self) -> usize {
        self.shared.layout.counts().len()
    }

    /// This process's local rank count.
    pub fn local_ranks(&self) -> usize {
        self.shared.layout.local()
    }

    /// Every process's local rank count, in process order.
    pub fn rank_counts(&self) -> &[usize] {
        self.shared.layout.counts()
    }

    /// The number of ranks in the job, `W`.
    pub fn world_size(&self) -> usize {
        self.shared.layout.world()
    }

    /// The global rank of this process's local rank `rank` (`None` outside its local ranks).
    pub fn global_rank(&self, rank: usize) -> Option<usize> {
        (rank < self.local_ranks()).then(|| self.shared.layout.global(rank))
    }

    /// This process's devices, in local rank order.
    pub fn devices(&self) -> &[DeviceId] {
        &self.shared.devices
    }

    /// The inter-process engine.
    pub fn inter_process(&self) -> &I {
        &self.shared.inter
    }

    /// The error every call returns since a timeout or a sticky engine error, if one happened.
    pub fn poisoned(&self) -> Option<&HierarchicalError> {
        self.shared.poisoned()
    }

    /// Abort: every generation this process's local ranks enter from now on fails, on every rank
    /// of every process, as [`HierarchicalError::Failed`] naming this process with the text
    /// `the communicator was aborted: {reason}`. The first abort wins; it is sticky. A
    /// generation some local rank had already entered runs on (its ranks agree on it).
    pub fn abort(&self, reason: impl Into<String>) {
        let _ = self.aborted.set(reason.into());
    }

    /// All-reduce: every rank receives the element-wise `operation` over every rank's tensor of
    /// the job (`Mean` divides the sum by `W`, once, as the simulated device does).
    pub fn all_reduce(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
    ) -> Result<D::Tensor, HierarchicalError> {
        let collective = Collective::AllReduce(operation);
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// Reduce-scatter: every rank's input of `W·m` elements is reduced, and global rank `k`
    /// receives block `k` (`m` elements).
    pub fn reduce_scatter(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
    ) -> Result<D::Tensor, HierarchicalError> {
        let collective = Collective::ReduceScatter(operation);
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// All-gather: every rank's input of `m` elements, concatenated in global rank order (`W·m`
    /// elements), to every rank.
    pub fn all_gather(
        &self,
        rank: usize,
        tensor: D::Tensor,
    ) -> Result<D::Tensor, HierarchicalError> {
        let options = CollectiveOptions::default();
        self.collective(rank, tensor, Collective::AllGather, options)
    }

    /// Broadcast: every rank receives the input of global rank `root` (every rank passes a
    /// tensor of the same length and type; a non-root's contents are ignored).
    pub fn broadcast(
        &self,
        rank: usize,
        tensor: D::Tensor,
        root: usize,
    ) -> Result<D::Tensor, HierarchicalError> {
        let collective = Collective::Broadcast { root };
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// The general entry: any of the four collectives with `options` (the local phases'
    /// algorithm, and the timeout of the whole call). Every rank of every process must ask for
    /// the same collective on inputs of the same length and type.
    pub fn collective(
        &self,
        rank: usize,
        tensor: D::Tensor,
        collective: Collective,
        options: CollectiveOptions,
    ) -> Result<D::Tensor, HierarchicalError> {
        let Some(slot) = self.ranks.get(rank) else {
            let _ = discard(tensor);
            return Err(HierarchicalError::RankOutOfRange {
                rank,
                ranks: self.ranks.len(),
            });
        };
        if slot.busy.swap(true, Ordering::Acquire) {
            let _ = discard(tensor);
            return Err(HierarchicalError::RankBusy { rank });
        }
        let _busy = Busy(&slot.busy);
        let generation = slot.generation.fetch_add(1, Ordering::Relaxed);
        if let Some(error) = self.shared.poisoned() {
            let _ = discard(tensor);
            return Err(error.clone());
        }
        let deadline = options.timeout.map(|timeout| Instant::now() + timeout);
        let (info, early) = match contain(|| self.shared.device.tensor_info(&tensor)) {
            Ok(info) => (info, None),
            // The rank still takes part in the local phase, then fails the generation.
            Err(panic) => (
                TensorInfo {
                    len: 0,
                    element: ruccl_core::ElementType::F32,
                },
                Some(format!(
                    "rank {rank}: describing its tensor panicked: {panic}"
                )),
            ),
        };
        let early = early.or_else(|| {
            self.aborted
                .get()
                .map(|reason| format!("the communicator was aborted: {reason}"))
        });
        let request = Request {
            collective,
            info,
            shards_from: self.shards_from,
        };
        let local_options = CollectiveOptions::default().with_algorithm(options.algorithm);
        let pending = Pending {
            generation,
            phase: Phase::First,
            request,
            deadline,
            early,
        };

        // Phase 1; its last arriver makes the inter-process step inside the device's finish.
        self.shared.register(rank, pending.clone());
        let first = self.local.collective(
            rank,
            tensor,
            request.local_collective(&self.shared.layout),
            with_remaining(local_options, deadline),
        );
        let shard = match first {
            Ok(output) if request.gathers(self.local_ranks()) => output,
            Ok(output) => return Ok(output),
            Err(error) => return Err(self.failed(slot, rank, &pending, error)),
        };

        // Phase 2 of an all-reduce's shards; its last arriver makes the closing agreement.
        let pending = Pending {
            phase: Phase::Second,
            early: None,
            ..pending
        };
        self.shared.register(rank, pending.clone());
        let options = with_remaining(local_options, deadline);
        match self
            .local
            .collective(rank, shard, Collective::AllGather, options)
        {
            Ok(output) => Ok(output),
            Err(error) => Err(self.failed(slot, rank, &pending, error)),
        }
    }

    /// The local collective of `pending`'s phase failed on every local rank with `error`: the
    /// agreed error the hook kept, or — when the hook never ran — the step made by a meeting
    /// with the failure. A local timeout poisons.
    fn failed(
        &self,
        slot: &RankSlot,
        rank: usize,
        pending: &Pending,
        error: NativeCollectiveError,
    ) -> HierarchicalError {
        let generation = pending.generation;
        if matches!(error, NativeCollectiveError::TimedOut { .. }) {
            return self.time_out(generation);
        }
        if let Some(agreed) = self.shared.stashed(generation, pending.phase) {
            return agreed;
        }
        if let Some(poisoned) = self.shared.poisoned() {
            return poisoned.clone();
        }
        let local = self.local_ranks();
        let failure = error.to_string();
        let deadline = pending.deadline;
        let met = match pending.phase {
            Phase::First => {
                let count = slot.failed_exchanges.fetch_add(1, Ordering::Relaxed);
                let part = Part {
                    request: pending.request,
                    data: Err(failure),
                    deadline,
                };
                self.failed_exchange
                    .meet(rank, count, part, deadline, |parts| {
                        let outcome = match self.shared.exchange(generation, parts) {
                            Err(error) => error,
                            Ok(_) => internal("an exchange that missed a failure"),
                        };
                        (0..local).map(|_| Err(outcome.clone())).collect()
                    })
            }
            Phase::Second => {
                let count = slot.failed_closings.fetch_add(1, Ordering::Relaxed);
                let status = Status {
                    failure,
                    deadline,
                    tag: pending.request.tag(),
                };
                self.failed_closing
                    .meet(rank, count, status, deadline, |statuses| {
                        let deadline = step::earliest(statuses.iter().map(|s| s.deadline));
                        let tag = statuses.first().map_or(0, |status| status.tag);
                        let failure = statuses.into_iter().next().map(|status| status.failure);
                        let outcome = match self.shared.close(generation, failure, tag, deadline) {
                            Err(error) => error,
                            Ok(()) => internal("a closing agreement that missed a failure"),
                        };
                        (0..local).map(|_| Err(outcome.clone())).collect()
                    })
            }
        };
        match met {
            Ok(Err(error)) => error,
            Ok(Ok(())) => internal("a failed generation without an error"),
            Err(Missed::Expired) => self.time_out(generation),
            Err(Missed::Broken) => self
                .shared
                .poisoned()
                .cloned()
                .unwrap_or_else(|| self.poison(internal("a meeting of the local ranks broke"))),
        }
    }

    /// A deadline passed in `generation`: poison.
    fn time_out(&self, generation: u64) -> HierarchicalError {
        self.poison(HierarchicalError::TimedOut { generation })
    }

    /// Poison the communicator with `error` (the first poison wins, and is returned) and abort
    /// the local communicator so that no local rank waits for this generation any longer.
    fn poison(&self, error: HierarchicalError) -> HierarchicalError {
        let first = self.shared.poison(error);
        self.local.abort(first.to_string());
        first
    }
}

/// Closes the communicator's channel on the engine (`InterProcess::close_channel`).
impl<D, I> Drop for HierarchicalCommunicator<D, I>
where
    I: InterProcess + 'static,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    fn drop(&mut self) {
        self.shared.inter.close_channel(self.shared.communicator());
    }
}

/// Clears a rank's busy flag when its call returns, however it returns.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// `options` with the time left until `deadline` (none left: zero).
fn with_remaining(options: CollectiveOptions, deadline: Option<Instant>) -> CollectiveOptions {
    match deadline {
        Some(deadline) => options.with_timeout(deadline.saturating_duration_since(Instant::now())),
        None => options,
    }
}
