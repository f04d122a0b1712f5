//! [`Shared`]: what the local ranks and the device hook share — the engine, the layout, the
//! requests of the generation in flight — and the inter-process steps themselves: the exchange
//! (the engine's collective(s) between the local phases) and the closing agreement.
//!
//! Each step is run by one thread per process: on the success path by the local collective's
//! last arriver, inside the device's `finish` (`hook.rs`); after a local failure by the last
//! local rank to reach a meeting (`meeting.rs`). Either way the process makes the same engine
//! calls in the same order, so the processes' calls pair up.

use super::error::{HierarchicalError, ProcessCall, tag};
use super::layout::Layout;
use super::staging::{LayoutBuffer, StagingDevice};
use crate::error::{CallIdentity, InterProcessError, LocalFailure};
use crate::inter_process::InterProcess;
use ruccl_core::{Collective, DeviceId, ReduceOperation, TensorInfo};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// The default message size from which a reduction takes the shard route (a local
/// reduce-scatter, the shards between processes, a local all-gather): below it, the whole route
/// (a local all-reduce, one engine call, copies) costs one local hand-off less, which wins; above
/// it the shard route moves less memory. Measured on the 2-vCPU VM, each size in runs of its
/// own: the whole route is faster up to 4 MiB
/// (median of six to eight runs 0.77–0.82 of `MPI_Allreduce` against the shard route's
/// 0.84–1.03); at 8 MiB both are below 1.0 once warm and the shard route varies less
/// (0.80–0.82 against 0.71–0.90); from 16 MiB the shard route wins.
pub(super) const SHARDS_FROM_BYTES: usize = 8 << 20;

/// What a local rank asked for: the global collective and its input's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub(super) collective: Collective,
    pub(super) info: TensorInfo,
    /// The communicator's shard threshold (agreed by every process at creation).
    pub(super) shards_from: usize,
}

/// How a collective of `len` elements runs on `L` local ranks; the same on every local rank
/// that asked for the same thing. Every process decides alike for what crosses between
/// processes: the engine calls depend on the agreed length and type, the layout and the agreed
/// threshold, never on the route (a process's local rank count may differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Reducing, at least the shard threshold, `len` divisible by `L`: a local reduce-scatter
    /// leaves each rank a shard, every shard goes to the engine (all-reduce: then a local
    /// all-gather).
    Shards,
    /// Everything else: the local collective leaves every rank the same vector (a local
    /// all-reduce for a smaller reduction or where a reduce-scatter would need padding, an
    /// all-gather, a broadcast), and local rank 0's goes to the engine.
    Whole,
}

impl Request {
    pub(super) fn route(&self, local: usize) -> Route {
        match self.collective {
            Collective::AllReduce(_) | Collective::ReduceScatter(_)
                if self.info.len % local == 0
                    && self.info.len.saturating_mul(self.info.element.size())
                        >= self.shards_from =>
            {
                Route::Shards
            }
            _ => Route::Whole,
        }
    }

    /// The local collective of phase 1.
    pub(super) fn local_collective(&self, layout: &Layout) -> Collective {
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
    pub(super) fn needs_part(&self, local: usize, rank: usize) -> bool {
        rank == 0 || self.route(local) == Route::Shards
    }

    /// Whether phase 2 is a local all-gather of the rank's shard (else the exchange's outputs
    /// are final).
    pub(super) fn gathers(&self, local: usize) -> bool {
        matches!(self.collective, Collective::AllReduce(_)) && self.route(local) == Route::Shards
    }

    pub(super) fn tag(&self) -> u64 {
        tag(self.collective, self.info.len)
    }
}

/// A local rank's part of the exchange.
pub(super) struct Part<B> {
    pub(super) request: Request,
    /// The rank's part (`None` where the step needs only rank 0's), or its failure's text.
    pub(super) data: Result<Option<B>, String>,
    pub(super) deadline: Option<Instant>,
}

/// Which local phase a generation's local collective is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Before the exchange.
    First,
    /// An all-reduce's all-gather of the shards, before the closing agreement.
    Second,
}

/// What a local rank registers before each local collective, for the hook to read.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) generation: u64,
    pub(super) phase: Phase,
    pub(super) request: Request,
    pub(super) deadline: Option<Instant>,
    /// A failure of the rank's own before the local phase (its tensor could not be described).
    pub(super) early: Option<String>,
}

/// An agreed error of a generation's step, kept for the local ranks when the hook made the step
/// and the local collective could only report "the device failed".
#[derive(Clone, Debug)]
struct Stashed {
    generation: u64,
    phase: Phase,
    error: HierarchicalError,
}

/// What the local ranks, the hook and the meetings share.
pub(super) struct Shared<D, I> {
    pub(super) device: D,
    pub(super) devices: Vec<DeviceId>,
    pub(super) inter: I,
    pub(super) layout: Layout,
    /// This communicator's number, agreed by every process at creation: every engine call
    /// carries it (with the generation and the step), so communicators sharing an engine never
    /// pair up.
    communicator: u64,
    /// The generation whose engine calls are being made, and how many it made so far. Only the
    /// one thread per process that makes a generation's step touches it.
    steps: Mutex<(u64, u64)>,
    /// `pending[r]`: what local rank `r` registered for its current local collective.
    pending: Mutex<Vec<Option<Pending>>>,
    stash: Mutex<Option<Stashed>>,
    /// Set once by a timeout or a sticky engine error; every later call returns it.
    poisoned: OnceLock<HierarchicalError>,
}

impl<D, I> Shared<D, I>
where
    I: InterProcess,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    pub(super) fn new(
        device: D,
        devices: Vec<DeviceId>,
        inter: I,
        layout: Layout,
        communicator: u64,
    ) -> Self {
        let ranks = layout.local();
        Shared {
            device,
            devices,
            inter,
            layout,
            communicator,
            steps: Mutex::new((0, 0)),
            pending: Mutex::new(vec![None; ranks]),
            stash: Mutex::new(None),
            poisoned: OnceLock::new(),
        }
    }

    /// The communicator's number, agreed at creation.
    pub(super) fn communicator(&self) -> u64 {
        self.communicator
    }

    /// The identity of `generation`'s next engine call: the steps of one generation count from 0.
    fn identity(&self, generation: u64) -> CallIdentity {
        let mut steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        if steps.0 != generation {
            *steps = (generation, 0);
        }
        let step = steps.1;
        steps.1 += 1;
        CallIdentity {
            communicator: self.communicator,
            generation,
            step,
        }
    }

    /// Registers what `rank` asks its next local collective for.
    pub(super) fn register(&self, rank: usize, pending: Pending) {
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = table.get_mut(rank) {
            *slot = Some(pending);
        }
    }

    /// What every local rank registered (`None` where one is missing).
    pub(super) fn registered(&self) -> Option<Vec<Pending>> {
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        table.iter().cloned().collect()
    }

    /// The agreed error the hook kept for `generation`'s `phase`, if it made that step.
    pub(super) fn stashed(&self, generation: u64, phase: Phase) -> Option<HierarchicalError> {
        let stash = self.stash.lock().unwrap_or_else(PoisonError::into_inner);
        stash
            .as_ref()
            .filter(|kept| kept.generation == generation && kept.phase == phase)
            .map(|kept| kept.error.clone())
    }

    pub(super) fn stash(&self, generation: u64, phase: Phase, error: HierarchicalError) {
        let mut stash = self.stash.lock().unwrap_or_else(PoisonError::into_inner);
        *stash = Some(Stashed {
            generation,
            phase,
            error,
        });
    }

    pub(super) fn poisoned(&self) -> Option<&HierarchicalError> {
        self.poisoned.get()
    }

    /// Poison with `error`; the first poison wins and is returned.
    pub(super) fn poison(&self, error: HierarchicalError) -> HierarchicalError {
        self.poisoned.get_or_init(|| error).clone()
    }

    /// A deadline passed in `generation`: poison.
    pub(super) fn time_out(&self, generation: u64) -> HierarchicalError {
        self.poison(HierarchicalError::TimedOut { generation })
    }

    /// The exchange: agree locally, then the engine's collective(s), one buffer per local rank;
    /// where phase 2 is staging alone, stage every rank's output in and close too. Every
    /// outcome is the same error where the generation failed.
    pub(super) fn exchange(
        &self,
        generation: u64,
        parts: Vec<Part<I::Buffer>>,
    ) -> Result<Handout<I::Buffer, D::Tensor>, HierarchicalError> {
        let local = self.layout.local();
        let deadline = earliest(parts.iter().map(|part| part.deadline));
        let Some(request) = parts.first().map(|part| part.request) else {
            return Err(internal("an exchange without parts"));
        };
        let tag = request.tag();
        let failure = parts
            .iter()
            .find_map(|part| part.data.as_ref().err().cloned())
            .or_else(|| local_mismatch(&parts))
            .or_else(|| self.invalid(&request));
        let buffers = match failure {
            Some(text) => {
                let refused = self.inter.collective_as(
                    self.identity(generation),
                    Collective::AllReduce(ReduceOperation::Sum),
                    Err(LocalFailure::new(text)),
                    tag,
                    deadline,
                );
                return match refused {
                    Err(error) => Err(self.agreed(error, generation)),
                    Ok(_) => Err(internal("a failure the engine did not report")),
                };
            }
            None => {
                let data: Vec<Option<I::Buffer>> = parts
                    .into_iter()
                    .map(|part| part.data.ok().flatten())
                    .collect();
                self.run_inter(generation, request, data, tag, deadline)
                    .map_err(|error| self.agreed(error, generation))?
            }
        };
        if buffers.len() != local {
            return Err(internal("the exchange made the wrong number of parts"));
        }
        if request.gathers(local) {
            return Ok(Handout::Shards(buffers));
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
        match self.close(generation, failure, tag, deadline) {
            Ok(()) => outputs
                .into_iter()
                .collect::<Result<Vec<_>, String>>()
                .map(Handout::Outputs)
                .map_err(|_| internal("a closing agreement that missed a failure")),
            Err(error) => {
                for output in outputs.into_iter().flatten() {
                    let _ = discard(output);
                }
                Err(error)
            }
        }
    }

    /// The closing agreement: `failure`, the lowest local rank's, or `Ok`, agreed across the job.
    pub(super) fn close(
        &self,
        generation: u64,
        failure: Option<String>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), HierarchicalError> {
        let status = match failure {
            Some(text) => Err(LocalFailure::new(text)),
            None => Ok(()),
        };
        self.inter
            .agree_as(self.identity(generation), status, tag, deadline)
            .map_err(|error| self.agreed(error, generation))
    }

    /// The engine's part of an agreed, valid request: one buffer per local rank.
    fn run_inter(
        &self,
        generation: u64,
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
        let call = |collective, buffer| {
            let identity = self.identity(generation);
            self.inter
                .collective_as(identity, collective, Ok(buffer), tag, deadline)
        };
        let route = request.route(local);
        match (request.collective, route) {
            (Collective::AllReduce(operation), Route::Shards) if layout.uniform() => {
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
            // Another communicator's call met this one: not agreed across the job (each process
            // met a different call), but never a wrong result; the next generation pairs again.
            crossed @ InterProcessError::Crossed { .. } => HierarchicalError::InterProcess(crossed),
            other if other.is_sticky() => self.poison(HierarchicalError::InterProcess(other)),
            other => HierarchicalError::InterProcess(other),
        }
    }

    pub(super) fn stage_out(
        &self,
        rank: usize,
        what: &str,
        tensor: D::Tensor,
    ) -> Result<I::Buffer, String> {
        match contain(|| self.device.stage_out(tensor)) {
            Ok(Ok(buffer)) => Ok(buffer),
            Ok(Err(error)) => Err(format!("rank {rank}: staging {what} out failed: {error}")),
            Err(panic) => Err(format!("rank {rank}: staging {what} out panicked: {panic}")),
        }
    }

    pub(super) fn stage_in(
        &self,
        rank: usize,
        what: &str,
        buffer: I::Buffer,
    ) -> Result<D::Tensor, String> {
        let device = self.devices.get(rank).copied().unwrap_or(DeviceId::new(0));
        match contain(|| self.device.stage_in(device, buffer)) {
            Ok(Ok(tensor)) => Ok(tensor),
            Ok(Err(error)) => Err(format!("rank {rank}: staging {what} in failed: {error}")),
            Err(panic) => Err(format!("rank {rank}: staging {what} in panicked: {panic}")),
        }
    }
}

/// What the exchange hands the local ranks.
pub(super) enum Handout<B, T> {
    /// An all-reduce's reduced shards, for the local all-gather of phase 2.
    Shards(Vec<B>),
    /// The outputs, staged in and agreed on: the generation is done.
    Outputs(Vec<T>),
}

/// The earliest of the deadlines given.
pub(super) fn earliest(deadlines: impl Iterator<Item = Option<Instant>>) -> Option<Instant> {
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
pub(super) fn contain<T>(call: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(call)).map_err(panic_text)
}

/// Drops `value`, turning a panic of its `Drop` into its message.
pub(super) fn discard<T>(value: T) -> Result<(), String> {
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

pub(super) fn internal(message: &str) -> HierarchicalError {
    HierarchicalError::InterProcess(InterProcessError::Internal {
        message: message.to_owned(),
    })
}
