//! [`HierarchicalCommunicator`]: every rank of every process of a job in one communicator. Each
//! process drives its local ranks (one thread each) through the verified core's
//! [`NativeCommunicator`]; between the local phases, one thread per process runs the
//! inter-process step on an [`InterProcess`] engine (MPI here).
//!
//! | file          | job                                                                  |
//! |---------------|----------------------------------------------------------------------|
//! | `mod.rs`      | the communicator: the phases of each collective, agreement, timeouts  |
//! | `meeting.rs`  | where local ranks hand their parts to the thread that calls MPI      |
//! | `layout.rs`   | the job's layout (local ranks per process) and its arithmetic        |
//! | `staging.rs`  | [`StagingDevice`], [`LayoutBuffer`]: what a device and a buffer provide |
//! | `error.rs`    | [`HierarchicalError`], [`ProcessCall`], the call's tag               |
//!
//! One generation, on every process (`L` local ranks, `W` ranks in the job):
//!
//! ```text
//! local rank r (its own thread)                     the last local rank to arrive (one per process)
//! ────────────────────────────────────────────────────────────────────────────────────────────────
//! phase 1: a NativeCommunicator collective
//!          (all-reduce: reduce-scatter into L shards)
//! stage its part out (or drop it), deposit  ──────▶ exchange: agree locally, then the engine's
//!                                                   collective(s) with Ok(data) or Err(failure)
//! take its part                            ◀──────  one outcome per local rank, the same error for all
//! phase 2: stage in; all-reduce: a NativeCommunicator
//!          all-gather of the shards
//! deposit Ok or its failure                ──────▶  closing: the engine's status agreement
//! return the output, or the agreed error   ◀──────
//! ```
//!
//! See `mpi/README.md` ("The hierarchical communicator") for the layouts, the agreement and the
//! timeouts.

mod error;
mod layout;
mod meeting;
mod staging;
#[cfg(test)]
mod tests;

pub use error::{HierarchicalError, ProcessCall};
pub use staging::{LayoutBuffer, StagingDevice};

use crate::error::{InterProcessError, LocalFailure};
use crate::inter_process::InterProcess;
use error::{SETUP_TAG, tag};
use layout::Layout;
use meeting::{Meeting, Missed, Outcome};
use ruccl_core::{
    Collective, CollectiveOptions, DeviceId, NativeCollectiveError, NativeCommunicator,
    ReduceOperation, TensorInfo,
};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

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
/// generation works (an abort, like the core's, is sticky).
///
/// ## Timeouts
///
/// [`CollectiveOptions::timeout`] bounds every wait of the call: for the local ranks (in the
/// local phases and the meetings) and for the other processes (the engine's deadline, the
/// earliest of the process's local ranks). When it passes, every waiting rank of every process
/// returns [`HierarchicalError::TimedOut`] with one text, and the communicator is poisoned:
/// every later call returns that error at once (the local communicator is aborted, the engine may
/// still hold a collective MPI cannot cancel). A rank that waits without a timeout for a process
/// that never calls waits for ever.
pub struct HierarchicalCommunicator<D, I>
where
    I: InterProcess,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    local: NativeCommunicator<D>,
    device: D,
    devices: Vec<DeviceId>,
    inter: I,
    layout: Layout,
    exchange: Exchange<D, I>,
    closing: Meeting<Status, ()>,
    ranks: Vec<RankSlot>,
    /// Set once by a timeout or a sticky engine error; every later call returns it.
    poisoned: OnceLock<HierarchicalError>,
}

/// The shard size from which an all-reduce on a uniform layout makes one engine call per shard
/// (no gluing, no cutting: two copies of the message saved) rather than one call on the glued
/// shards (one status agreement instead of `L`). Every process decides alike: it depends on the
/// agreed length and type and on the layout alone.
const SHARD_CALLS_FROM_BYTES: usize = 16 << 10;

/// The exchange's meeting: parts in, handouts out.
type Exchange<D, I> = Meeting<
    Part<<I as InterProcess>::Buffer>,
    Handout<<I as InterProcess>::Buffer, <D as ruccl_core::NativeCollectiveDevice>::Tensor>,
>;

/// A local rank's bookkeeping.
struct RankSlot {
    /// A call of this rank is in progress.
    busy: AtomicBool,
    /// Calls of this rank so far: the next one's generation.
    generation: AtomicU64,
    /// Closing agreements this rank took part in (a failed exchange skips the closing).
    closings: AtomicU64,
}

/// What a local rank asked for: the global collective and its input's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    collective: Collective,
    info: TensorInfo,
}

/// A local rank's deposit at the exchange.
struct Part<B> {
    request: Request,
    /// The rank's part (`None` where the step needs only rank 0's), or its failure's text.
    data: Result<Option<B>, String>,
    deadline: Option<Instant>,
}

/// What the exchange hands a local rank.
enum Handout<B, T> {
    /// Its shard of an all-reduce, for the local all-gather of phase 2 (then the closing).
    Shard(B),
    /// Its output, staged in and agreed on by the exchange's runner: the call is done.
    Output(T),
}

/// A local rank's deposit at the closing agreement.
struct Status {
    failure: Option<String>,
    deadline: Option<Instant>,
    tag: u64,
}

/// How a collective of `len` elements runs on `L` local ranks; the same on every local rank
/// that asked for the same thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Reducing, `len` divisible by `L`: a local reduce-scatter leaves each rank a shard, every
    /// shard goes to the engine (all-reduce: then a local all-gather).
    Shards,
    /// Everything else: the local collective leaves every rank the same vector (a local
    /// all-reduce where a reduce-scatter would need padding, an all-gather, a broadcast), and
    /// local rank 0's goes to the engine.
    Whole,
}

impl Request {
    fn route(&self, local: usize) -> Route {
        match self.collective {
            Collective::AllReduce(_) | Collective::ReduceScatter(_)
                if self.info.len % local == 0 =>
            {
                Route::Shards
            }
            _ => Route::Whole,
        }
    }

    /// The local collective of phase 1.
    fn local_collective(&self, layout: &Layout) -> Collective {
        match (self.collective, self.route(layout.local())) {
            (Collective::AllReduce(operation), Route::Shards)
            | (Collective::ReduceScatter(operation), Route::Shards) => {
                Collective::ReduceScatter(operation.combining())
            }
            (Collective::AllReduce(operation), Route::Whole)
            | (Collective::ReduceScatter(operation), Route::Whole) => {
                Collective::AllReduce(operation.combining())
            }
            (Collective::Broadcast { root }, _) => {
                let local_root = match layout.locate(root) {
                    Some((process, local)) if process == layout.process() => local,
                    _ => 0,
                };
                Collective::Broadcast { root: local_root }
            }
            (other, _) => other,
        }
    }

    /// Whether `rank`'s phase-1 output goes to the engine.
    fn needs_part(&self, local: usize, rank: usize) -> bool {
        rank == 0 || self.route(local) == Route::Shards
    }

    /// Whether phase 2 is a local all-gather of the rank's shard (else the rank's part is its
    /// output).
    fn gathers(&self, local: usize) -> bool {
        matches!(self.collective, Collective::AllReduce(_)) && self.route(local) == Route::Shards
    }

    fn tag(&self) -> u64 {
        tag(self.collective, self.info.len)
    }
}

impl<D, I> HierarchicalCommunicator<D, I>
where
    I: InterProcess,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    /// A communicator over this process's local ranks on `devices` (local rank `r` on
    /// `devices[r]`, driven through `device`) and every other process of `inter`'s job. Every
    /// process must call this, in the same order as its other collective calls on `inter`: the
    /// processes exchange their local rank counts (any number per process, at least one), waiting
    /// until `deadline`. A process whose devices are invalid fails here, and so does every other,
    /// with its reason.
    pub fn new(
        devices: Vec<DeviceId>,
        device: D,
        inter: I,
        deadline: Option<Instant>,
    ) -> Result<Self, HierarchicalError> {
        let local = NativeCommunicator::new(devices.clone(), device.clone());
        let count = match &local {
            Ok(local) => Ok(I::Buffer::from_words(vec![local.world_size() as i64])),
            Err(error) => Err(LocalFailure::new(error)),
        };
        let counts = inter
            .collective(Collective::AllGather, count, SETUP_TAG, deadline)
            .map_err(|error| HierarchicalError::Setup {
                reason: error.to_string(),
            })?;
        let local = local.map_err(|error| HierarchicalError::setup(&error))?;
        let counts: Option<Vec<usize>> = counts
            .into_words()
            .map(|words| words.into_iter().map(|w| usize::try_from(w).ok()).collect())
            .unwrap_or(None);
        let layout = counts
            .and_then(|counts| Layout::new(inter.process(), counts))
            .ok_or_else(|| HierarchicalError::Setup {
                reason: "the processes' local rank counts do not make a layout".to_owned(),
            })?;
        let ranks = layout.local();
        Ok(HierarchicalCommunicator {
            local,
            device,
            devices,
            inter,
            exchange: Meeting::new(ranks),
            closing: Meeting::new(ranks),
            ranks: (0..ranks)
                .map(|_| RankSlot {
                    busy: AtomicBool::new(false),
                    generation: AtomicU64::new(0),
                    closings: AtomicU64::new(0),
                })
                .collect(),
            layout,
            poisoned: OnceLock::new(),
        })
    }

    /// This process's index among the job's processes.
    pub fn process(&self) -> usize {
        self.layout.process()
    }

    /// The number of processes.
    pub fn processes(&self) -> usize {
        self.layout.counts().len()
    }

    /// This process's local rank count.
    pub fn local_ranks(&self) -> usize {
        self.layout.local()
    }

    /// Every process's local rank count, in process order.
    pub fn rank_counts(&self) -> &[usize] {
        self.layout.counts()
    }

    /// The number of ranks in the job, `W`.
    pub fn world_size(&self) -> usize {
        self.layout.world()
    }

    /// The global rank of this process's local rank `rank` (`None` outside its local ranks).
    pub fn global_rank(&self, rank: usize) -> Option<usize> {
        (rank < self.layout.local()).then(|| self.layout.global(rank))
    }

    /// This process's devices, in local rank order.
    pub fn devices(&self) -> &[DeviceId] {
        &self.devices
    }

    /// The local communicator of this process's ranks.
    pub fn local(&self) -> &NativeCommunicator<D> {
        &self.local
    }

    /// The inter-process engine.
    pub fn inter_process(&self) -> &I {
        &self.inter
    }

    /// The error every call returns since a timeout or a sticky engine error, if one happened.
    pub fn poisoned(&self) -> Option<&HierarchicalError> {
        self.poisoned.get()
    }

    /// Abort this process's local communicator: every generation not yet published, here, and
    /// every later one fails with the abort's text — on every rank of every process, as
    /// [`HierarchicalError::Failed`] naming this process. Sticky, like the core's abort.
    pub fn abort(&self, reason: impl Into<String>) {
        self.local.abort(reason);
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
        if let Some(error) = self.poisoned.get() {
            let _ = discard(tensor);
            return Err(error.clone());
        }
        let deadline = options.timeout.map(|timeout| Instant::now() + timeout);
        let (info, early) = match contain(|| self.device.tensor_info(&tensor)) {
            Ok(info) => (info, None),
            // The rank still takes part in the local phase, then reports this at the exchange.
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
        let request = Request { collective, info };
        let local = self.layout.local();

        // Phase 1: the local collective, then this rank's part (staged out, or dropped).
        let local_options = CollectiveOptions::default().with_algorithm(options.algorithm);
        let first = self.local.collective(
            rank,
            tensor,
            request.local_collective(&self.layout),
            with_remaining(local_options, deadline),
        );
        let data = match first {
            Ok(output) if early.is_some() => {
                let _ = discard(output);
                Err(early.unwrap_or_default())
            }
            Ok(output) if request.needs_part(local, rank) => {
                self.stage_out(rank, "its local result", output).map(Some)
            }
            Ok(output) => discard(output).map(|()| None).map_err(|panic| {
                format!("rank {rank}: dropping its local result panicked: {panic}")
            }),
            Err(NativeCollectiveError::TimedOut { .. }) => {
                return Err(self.time_out(generation));
            }
            Err(error) => Err(error.to_string()),
        };

        // The exchange: the last local rank to arrive runs the engine's step for everyone.
        let part = Part {
            request,
            data,
            deadline,
        };
        let handout = self
            .exchange
            .meet(rank, generation, part, deadline, |parts| {
                self.exchange_step(generation, parts)
            })
            .map_err(|missed| self.missed(missed, generation))??;
        let shard = match handout {
            Handout::Output(output) => return Ok(output),
            Handout::Shard(shard) => shard,
        };

        // Phase 2 of an all-reduce's shards: the local all-gather.
        let second = match self.stage_in(rank, "its shard", shard) {
            Ok(shard) => {
                let options = with_remaining(local_options, deadline);
                match self
                    .local
                    .collective(rank, shard, Collective::AllGather, options)
                {
                    Ok(output) => Ok(output),
                    Err(NativeCollectiveError::TimedOut { .. }) => {
                        return Err(self.time_out(generation));
                    }
                    Err(error) => Err(error.to_string()),
                }
            }
            Err(failure) => Err(failure),
        };

        // The closing agreement: a failure in phase 2 anywhere fails the generation everywhere.
        let closing = slot.closings.fetch_add(1, Ordering::Relaxed);
        let status = Status {
            failure: second.as_ref().err().cloned(),
            deadline,
            tag: request.tag(),
        };
        let agreed = self
            .closing
            .meet(rank, closing, status, deadline, |statuses| {
                self.closing_step(generation, statuses)
            })
            .map_err(|missed| self.missed(missed, generation))
            .and_then(|outcome| outcome);
        match (agreed, second) {
            (Ok(()), Ok(output)) => Ok(output),
            (Ok(()), Err(_)) => Err(internal("a closing agreement that missed a failure")),
            (Err(error), output) => {
                if let Ok(output) = output {
                    let _ = discard(output);
                }
                Err(error)
            }
        }
    }

    /// The exchange, run by the last local rank to arrive: agree locally, then the engine's
    /// collective(s); one handout per local rank. Where phase 2 is only staging (every route but
    /// an all-reduce's shards), the runner stages every rank's output in and runs the closing
    /// agreement itself, so that the generation needs no second meeting.
    fn exchange_step(
        &self,
        generation: u64,
        parts: Vec<Part<I::Buffer>>,
    ) -> Vec<Outcome<Handout<I::Buffer, D::Tensor>>> {
        let local = self.layout.local();
        let deadline = earliest(parts.iter().map(|part| part.deadline));
        let Some(request) = parts.first().map(|part| part.request) else {
            return vec![Err(internal("an exchange without parts"))];
        };
        let tag = request.tag();
        let failure = parts
            .iter()
            .find_map(|part| part.data.as_ref().err().cloned())
            .or_else(|| local_mismatch(&parts))
            .or_else(|| self.invalid(&request));
        let outcome = match failure {
            Some(text) => {
                let refused = self.inter.collective(
                    Collective::AllReduce(ReduceOperation::Sum),
                    Err(LocalFailure::new(text)),
                    tag,
                    deadline,
                );
                match refused {
                    Err(error) => Err(self.agreed(error, generation)),
                    Ok(_) => Err(internal("a failure the engine did not report")),
                }
            }
            None => {
                let data: Vec<Option<I::Buffer>> = parts
                    .into_iter()
                    .map(|part| part.data.ok().flatten())
                    .collect();
                self.run_inter(request, data, tag, deadline)
                    .map_err(|error| self.agreed(error, generation))
            }
        };
        let buffers = match outcome {
            Ok(buffers) if buffers.len() == local => Ok(buffers),
            Ok(_) => Err(internal("the exchange made the wrong number of parts")),
            Err(error) => Err(error),
        };
        let buffers = match buffers {
            Ok(buffers) => buffers,
            Err(error) => return (0..local).map(|_| Err(error.clone())).collect(),
        };
        if request.gathers(local) {
            return buffers.into_iter().map(|b| Ok(Handout::Shard(b))).collect();
        }
        // Phase 2 is staging alone: do it here, then close.
        let outputs: Vec<Result<D::Tensor, String>> = buffers
            .into_iter()
            .enumerate()
            .map(|(rank, buffer)| self.stage_in(rank, "its output", buffer))
            .collect();
        let failure = outputs
            .iter()
            .find_map(|output| output.as_ref().err().cloned());
        let status = match failure {
            Some(text) => Err(LocalFailure::new(text)),
            None => Ok(()),
        };
        match self.inter.agree(status, tag, deadline) {
            Ok(()) => outputs
                .into_iter()
                .map(|output| {
                    output
                        .map(Handout::Output)
                        .map_err(|_| internal("a closing agreement that missed a failure"))
                })
                .collect(),
            Err(error) => {
                let error = self.agreed(error, generation);
                for output in outputs.into_iter().flatten() {
                    let _ = discard(output);
                }
                (0..local).map(|_| Err(error.clone())).collect()
            }
        }
    }

    /// The engine's part of an agreed, valid request: the per-rank buffers of phase 2.
    fn run_inter(
        &self,
        request: Request,
        mut data: Vec<Option<I::Buffer>>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<Vec<I::Buffer>, InterProcessError> {
        let layout = &self.layout;
        let local = layout.local();
        let world = layout.world();
        let len = request.info.len;
        let missing = || InterProcessError::Internal {
            message: "a local part the exchange needs is missing".to_owned(),
        };
        let call =
            |collective, buffer| self.inter.collective(collective, Ok(buffer), tag, deadline);
        let route = request.route(local);
        match (request.collective, route) {
            (Collective::AllReduce(operation), Route::Shards)
                if layout.uniform()
                    && len / local * request.info.element.size() >= SHARD_CALLS_FROM_BYTES =>
            {
                // Shard r of every process covers the same elements: one engine call per shard,
                // no copy.
                let mut shards = Vec::with_capacity(local);
                for part in data {
                    let mut shard = call(
                        Collective::AllReduce(operation.combining()),
                        part.ok_or_else(missing)?,
                    )?;
                    scale(&mut shard, operation, world);
                    shards.push(shard);
                }
                Ok(shards)
            }
            (Collective::AllReduce(operation), route) => {
                let mut whole = match route {
                    Route::Shards => concatenate(data).ok_or_else(missing)?,
                    Route::Whole => data.swap_remove(0).ok_or_else(missing)?,
                };
                whole.resize(len);
                let mut reduced = call(Collective::AllReduce(operation.combining()), whole)?;
                scale(&mut reduced, operation, world);
                Ok(match route {
                    Route::Shards => split(reduced, local, len / local),
                    Route::Whole => copies(reduced, local),
                })
            }
            (Collective::ReduceScatter(operation), route) => {
                let mut whole = match route {
                    Route::Shards => concatenate(data).ok_or_else(missing)?,
                    Route::Whole => data.swap_remove(0).ok_or_else(missing)?,
                };
                whole.resize(len);
                let block = len / world;
                let spread = if layout.uniform() {
                    whole
                } else {
                    let slots = layout.counts().len() * layout.widest() * block;
                    whole.rearranged(slots, &layout.spread(block))
                };
                let mut mine = call(Collective::ReduceScatter(operation.combining()), spread)?;
                mine.resize(local * block);
                scale(&mut mine, operation, world);
                Ok(split(mine, local, block))
            }
            (Collective::AllGather, _) => {
                let mut gathered = data.swap_remove(0).ok_or_else(missing)?;
                let block = len;
                if !layout.uniform() {
                    gathered.resize(layout.widest() * block);
                }
                let all = call(Collective::AllGather, gathered)?;
                let all = if layout.uniform() {
                    all
                } else {
                    all.rearranged(world * block, &layout.compact(block))
                };
                Ok(copies(all, local))
            }
            (Collective::Broadcast { root }, _) => {
                let (process, _) = layout.locate(root).ok_or_else(missing)?;
                let input = data.swap_remove(0).ok_or_else(missing)?;
                let shared = call(Collective::Broadcast { root: process }, input)?;
                Ok(copies(shared, local))
            }
            (other, _) => Err(InterProcessError::Internal {
                message: format!("{other} reached the engine without being refused"),
            }),
        }
    }

    /// Why the agreed request cannot run on this job (every process finds the same reason).
    fn invalid(&self, request: &Request) -> Option<String> {
        let world = self.layout.world();
        match request.collective {
            Collective::AllReduce(_) | Collective::AllGather => None,
            Collective::ReduceScatter(_) if request.info.len % world == 0 => None,
            Collective::ReduceScatter(_) => Some(format!(
                "{} input of {} elements does not split into {world} equal blocks",
                request.collective, request.info.len
            )),
            Collective::Broadcast { root } if root < world => None,
            Collective::Broadcast { root } => Some(format!(
                "broadcast root {root} is outside the {world} ranks"
            )),
            other => Some(format!(
                "{other} is not offered by the hierarchical communicator"
            )),
        }
    }

    /// The closing agreement, run by the last local rank to arrive.
    fn closing_step(&self, generation: u64, statuses: Vec<Status>) -> Vec<Outcome<()>> {
        let local = self.layout.local();
        let deadline = earliest(statuses.iter().map(|status| status.deadline));
        let tag = statuses.first().map_or(0, |status| status.tag);
        let status = match statuses.into_iter().find_map(|status| status.failure) {
            Some(text) => Err(LocalFailure::new(text)),
            None => Ok(()),
        };
        let outcome = self
            .inter
            .agree(status, tag, deadline)
            .map_err(|error| self.agreed(error, generation));
        (0..local).map(|_| outcome.clone()).collect()
    }

    /// The job-wide error of an engine error every process received alike; sticky ones poison.
    fn agreed(&self, error: InterProcessError, generation: u64) -> HierarchicalError {
        match error {
            InterProcessError::Failed { process, message } => {
                HierarchicalError::Failed { process, message }
            }
            InterProcessError::Mismatch { calls } => HierarchicalError::Mismatch {
                calls: calls.iter().map(ProcessCall::from_description).collect(),
            },
            InterProcessError::TimedOut { .. } => self.time_out(generation),
            other if other.is_sticky() => self.poison(HierarchicalError::InterProcess(other)),
            other => HierarchicalError::InterProcess(other),
        }
    }

    /// A deadline passed in `generation`: poison.
    fn time_out(&self, generation: u64) -> HierarchicalError {
        self.poison(HierarchicalError::TimedOut { generation })
    }

    /// A meeting this rank could not complete.
    fn missed(&self, missed: Missed, generation: u64) -> HierarchicalError {
        match missed {
            Missed::Expired => self.time_out(generation),
            Missed::Broken => self
                .poisoned
                .get()
                .cloned()
                .unwrap_or_else(|| self.poison(internal("a meeting of the local ranks broke"))),
        }
    }

    /// Poison the communicator with `error` (the first poison wins, and is returned) and abort
    /// the local communicator so that no local rank waits for this generation any longer.
    fn poison(&self, error: HierarchicalError) -> HierarchicalError {
        let first = self.poisoned.get_or_init(|| error).clone();
        self.local.abort(first.to_string());
        first
    }

    fn stage_out(&self, rank: usize, what: &str, tensor: D::Tensor) -> Result<I::Buffer, String> {
        match contain(|| self.device.stage_out(tensor)) {
            Ok(Ok(buffer)) => Ok(buffer),
            Ok(Err(error)) => Err(format!("rank {rank}: staging {what} out failed: {error}")),
            Err(panic) => Err(format!("rank {rank}: staging {what} out panicked: {panic}")),
        }
    }

    fn stage_in(&self, rank: usize, what: &str, buffer: I::Buffer) -> Result<D::Tensor, String> {
        let device = self.devices.get(rank).copied().unwrap_or(DeviceId::new(0));
        match contain(|| self.device.stage_in(device, buffer)) {
            Ok(Ok(tensor)) => Ok(tensor),
            Ok(Err(error)) => Err(format!("rank {rank}: staging {what} in failed: {error}")),
            Err(panic) => Err(format!("rank {rank}: staging {what} in panicked: {panic}")),
        }
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

/// The earliest of the deadlines given.
fn earliest(deadlines: impl Iterator<Item = Option<Instant>>) -> Option<Instant> {
    deadlines.flatten().min()
}

/// The text of a local mismatch, if the local ranks asked for different things.
fn local_mismatch<B>(parts: &[Part<B>]) -> Option<String> {
    let first = parts.first()?.request;
    if parts.iter().all(|part| part.request == first) {
        return None;
    }
    let listed: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(rank, part)| {
            format!(
                "rank {rank}: {} of {}",
                part.request.collective, part.request.info
            )
        })
        .collect();
    Some(format!(
        "local ranks asked for different collectives: {}",
        listed.join(", ")
    ))
}

/// `Mean` divides the job-wide sum once, by the job's rank count.
fn scale<B: LayoutBuffer>(buffer: &mut B, operation: ReduceOperation, world: usize) {
    if operation == ReduceOperation::Mean {
        buffer.divide_by(world);
    }
}

/// The parts glued in rank order (`None` if one is missing or of another type).
fn concatenate<B: LayoutBuffer>(parts: Vec<Option<B>>) -> Option<B> {
    let mut parts = parts.into_iter();
    let mut whole = parts.next()??;
    for part in parts {
        if !whole.append(part?) {
            return None;
        }
    }
    Some(whole)
}

/// `buffer` cut into `parts` consecutive pieces of `size` elements (the last takes the rest).
fn split<B: LayoutBuffer>(mut buffer: B, parts: usize, size: usize) -> Vec<B> {
    let mut pieces = Vec::with_capacity(parts);
    for part in (1..parts).rev() {
        pieces.push(buffer.split_off(part * size));
    }
    pieces.push(buffer);
    pieces.reverse();
    pieces
}

/// `count` copies of `buffer` (the first is `buffer` itself).
fn copies<B: LayoutBuffer>(buffer: B, count: usize) -> Vec<B> {
    let mut copies: Vec<B> = (1..count).map(|_| buffer.duplicate()).collect();
    copies.insert(0, buffer);
    copies
}

/// Runs `call`, turning a panic into its message.
fn contain<T>(call: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(call)).map_err(panic_text)
}

/// Drops `value`, turning a panic of its `Drop` into its message.
fn discard<T>(value: T) -> Result<(), String> {
    contain(move || drop(value))
}

fn panic_text(payload: Box<dyn Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

fn internal(message: &str) -> HierarchicalError {
    HierarchicalError::InterProcess(InterProcessError::Internal {
        message: message.to_owned(),
    })
}
