//! [`NativeCommunicator`]: one ordered device group and its reusable rendezvous.

use super::agreement::{CachedPlan, Request, agree};
use super::delivery::Deliveries;
use super::padded::Padded;
use super::state::{Batch, Delivery, Outcome, State, Submission, WaitStats};
use crate::contain::{device_call, discard, infallible_call};
use crate::error::{NativeCollectiveError, Phase};
use crate::run::run_plan;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Condvar, Deadline, Mutex, MutexGuard, SpinBudget};
use crate::{
    Collective, CollectiveOptions, DeviceId, LinkModel, NativeCollectiveDevice, Plan,
    ReduceOperation,
};
use std::fmt;
use std::time::Duration;

/// The held state lock.
type Guard<'a, D> = MutexGuard<'a, State<D>>;

/// An ordered group of distinct devices, one rank each, and the rendezvous that runs their
/// collectives generation after generation.
///
/// Each rank calls a collective ([`all_reduce`](Self::all_reduce),
/// [`reduce_scatter`](Self::reduce_scatter), [`all_gather`](Self::all_gather),
/// [`broadcast`](Self::broadcast), or the general [`collective`](Self::collective) and
/// [`run_plan`](Self::run_plan)) from its own thread. The last rank to arrive checks that every
/// rank asked for the same thing with tensors of the same shape, resolves the generation's
/// [`Plan`], and runs it on the device executor without holding the state lock; every rank then
/// receives its own output, or — if anything failed on any rank, mismatches included — the same
/// [`NativeCollectiveError`]. A rank may call again as soon as it has returned, even while other
/// ranks are still taking their outputs of the previous generation. How the ranks meet is told
/// in `core/src/rendezvous/README.md`.
pub struct NativeCommunicator<D: NativeCollectiveDevice> {
    devices: Vec<DeviceId>,
    device: D,
    /// The device's α–β model, read once: it resolves [`Algorithm::Auto`](crate::Algorithm::Auto).
    model: LinkModel,
    /// The rendezvous state. On cache lines of its own: every rank writes the lock, and a
    /// read-only field sharing a line with it (the devices, the model) would be fetched again
    /// by every core after every acquisition.
    state: Padded<Mutex<State<D>>>,
    /// Where the runner of a generation leaves the other ranks' results and each rank takes its
    /// own without the lock; written only under `state`'s lock (by `State::publish`).
    deliveries: Deliveries<D::Tensor>,
    /// Signalled after every transition a waiter may be waiting for (publish, abort), and only
    /// when `State::sleepers > 0`.
    changed: Condvar,
    /// Set once, under the lock, when the communicator is aborted: a waiter polling its delivery
    /// slot also polls this, so that an abort ends its polling at once. On a cache line of its
    /// own.
    aborting: Padded<AtomicBool>,
    /// How long a waiter polls its delivery slot before parking.
    spin: SpinBudget,
}

impl<D: NativeCollectiveDevice> NativeCommunicator<D> {
    /// A communicator over `devices`, rank `r` being `devices[r]`. Fails with
    /// [`NativeCollectiveError::InvalidGroup`] if the list is empty or names a device twice.
    pub fn new(devices: Vec<DeviceId>, device: D) -> Result<Self, NativeCollectiveError> {
        validate_group(&devices)?;
        let world = devices.len();
        let model = infallible_call(Phase::LinkModel, None, || device.link_model())?;
        Ok(Self {
            devices,
            device,
            model,
            state: Padded(Mutex::new(State::new(world))),
            deliveries: Deliveries::new(world),
            changed: Condvar::new(),
            aborting: Padded(AtomicBool::new(false)),
            spin: SpinBudget::for_world(world),
        })
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.devices.len()
    }

    /// The devices, in rank order.
    pub fn devices(&self) -> &[DeviceId] {
        &self.devices
    }

    /// Submit rank `rank`'s tensor to the next generation and wait for that rank's output: the
    /// element-wise `operation` over every rank's tensor of the same generation
    /// ([`Collective::AllReduce`], algorithm `Auto`, no timeout).
    ///
    /// Every rank of a generation receives either its output or the same error. Errors:
    /// [`RankOutOfRange`](NativeCollectiveError::RankOutOfRange) at once for a bad rank;
    /// [`ReductionMismatch`](NativeCollectiveError::ReductionMismatch),
    /// [`CollectiveMismatch`](NativeCollectiveError::CollectiveMismatch) or
    /// [`ShapeMismatch`](NativeCollectiveError::ShapeMismatch) if ranks disagree;
    /// [`InvalidCollective`](NativeCollectiveError::InvalidCollective) if the agreed collective
    /// cannot run; [`Device`](NativeCollectiveError::Device),
    /// [`Panicked`](NativeCollectiveError::Panicked) or
    /// [`OutputCount`](NativeCollectiveError::OutputCount) if the executor failed anywhere;
    /// [`Aborted`](NativeCollectiveError::Aborted) or
    /// [`TimedOut`](NativeCollectiveError::TimedOut) once the communicator is aborted.
    ///
    /// Blocks until every rank has called; see [`all_reduce_timeout`](Self::all_reduce_timeout)
    /// for a bounded wait.
    pub fn all_reduce(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let collective = Collective::AllReduce(operation);
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// Like [`all_reduce`](Self::all_reduce), but if this rank's generation has not been
    /// delivered within `timeout` of the rank starting to park (after its bounded polling: see
    /// [`SpinBudget`]), the communicator is aborted with
    /// [`TimedOut`](NativeCollectiveError::TimedOut) naming the ranks that had not arrived, and
    /// every rank of that generation (and every later call) receives that error.
    ///
    /// Under a model checker (`--cfg ruccl_loom` or `--cfg ruccl_shuttle`) the clock is never
    /// read: see [`sync`](crate::sync) for how a timed wait behaves there.
    pub fn all_reduce_timeout(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
        timeout: Duration,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let options = CollectiveOptions::default().with_timeout(timeout);
        self.collective(rank, tensor, Collective::AllReduce(operation), options)
    }

    /// Reduce-scatter: every rank's input of `W·m` elements is reduced element-wise, and rank
    /// `rank` receives block `rank` (`m` elements) of the result. An input length not divisible
    /// by the world is [`InvalidCollective`](NativeCollectiveError::InvalidCollective) for every
    /// rank. Errors as for [`all_reduce`](Self::all_reduce).
    pub fn reduce_scatter(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let collective = Collective::ReduceScatter(operation);
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// All-gather: every rank's input of `m` elements, concatenated in rank order (`W·m`
    /// elements), to every rank. Errors as for [`all_reduce`](Self::all_reduce).
    pub fn all_gather(
        &self,
        rank: usize,
        tensor: D::Tensor,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        self.collective(
            rank,
            tensor,
            Collective::AllGather,
            CollectiveOptions::default(),
        )
    }

    /// Broadcast: every rank receives rank `root`'s input. Every rank passes a tensor of the
    /// same length and type (a non-root's contents are ignored). A root outside the world is
    /// [`InvalidCollective`](NativeCollectiveError::InvalidCollective) for every rank; ranks
    /// naming different roots get [`CollectiveMismatch`](NativeCollectiveError::CollectiveMismatch).
    pub fn broadcast(
        &self,
        rank: usize,
        tensor: D::Tensor,
        root: usize,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let collective = Collective::Broadcast { root };
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// Reduce: rank `root` receives the element-wise reduction of every rank's input (`n`
    /// elements); every other rank receives an empty tensor. A root outside the world is
    /// [`InvalidCollective`](NativeCollectiveError::InvalidCollective) for every rank; ranks
    /// naming different roots get [`CollectiveMismatch`](NativeCollectiveError::CollectiveMismatch),
    /// different operations [`ReductionMismatch`](NativeCollectiveError::ReductionMismatch).
    pub fn reduce(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
        root: usize,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let collective = Collective::Reduce {
            op: operation,
            root,
        };
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// Gather: rank `root` receives every rank's input of `m` elements, concatenated in rank
    /// order (`W·m` elements); every other rank receives an empty tensor. Root errors as for
    /// [`reduce`](Self::reduce).
    pub fn gather(
        &self,
        rank: usize,
        tensor: D::Tensor,
        root: usize,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let collective = Collective::Gather { root };
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// Scatter: rank `r` receives block `r` (`m` elements) of rank `root`'s input of `W·m`
    /// elements. Every rank passes a tensor of the same length and type (a non-root's contents
    /// are ignored); a length not divisible by the world is
    /// [`InvalidCollective`](NativeCollectiveError::InvalidCollective). Root errors as for
    /// [`reduce`](Self::reduce).
    pub fn scatter(
        &self,
        rank: usize,
        tensor: D::Tensor,
        root: usize,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let collective = Collective::Scatter { root };
        self.collective(rank, tensor, collective, CollectiveOptions::default())
    }

    /// All-to-all: every rank's input is `W` blocks of `m` elements; rank `r` receives, as its
    /// block `j`, block `r` of rank `j`'s input. A length not divisible by the world is
    /// [`InvalidCollective`](NativeCollectiveError::InvalidCollective).
    pub fn all_to_all(
        &self,
        rank: usize,
        tensor: D::Tensor,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        self.collective(
            rank,
            tensor,
            Collective::AllToAll,
            CollectiveOptions::default(),
        )
    }

    /// The general entry: any collective, with `options` (algorithm, timeout). Every rank of a
    /// generation must ask for the same collective and algorithm. Errors as for
    /// [`all_reduce`](Self::all_reduce) and [`all_reduce_timeout`](Self::all_reduce_timeout).
    pub fn collective(
        &self,
        rank: usize,
        tensor: D::Tensor,
        collective: Collective,
        options: CollectiveOptions,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let request = Request::built_in(collective, options.algorithm);
        self.submit(rank, tensor, request, options.timeout)
    }

    /// Run a plan of one's own, built (and so verified) with [`Plan::from_parts`], through the
    /// same rendezvous. Every rank passes an equal plan (else
    /// [`CollectiveMismatch`](NativeCollectiveError::CollectiveMismatch)) for this world and
    /// its inputs' length (else [`InvalidCollective`](NativeCollectiveError::InvalidCollective)).
    pub fn run_plan(
        &self,
        rank: usize,
        tensor: D::Tensor,
        plan: Plan,
        timeout: Option<Duration>,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        self.submit(rank, tensor, Request::custom(plan), timeout)
    }

    /// Abort the communicator. The first abort wins and is sticky: every rank of every generation
    /// not yet published, and every later call, receives
    /// [`Aborted`](NativeCollectiveError::Aborted) with this `reason`. A generation already
    /// published is still delivered whole. A plan running right now has its outputs discarded.
    pub fn abort(&self, reason: impl Into<String>) {
        self.abort_with(NativeCollectiveError::Aborted {
            reason: reason.into(),
        });
    }

    /// How this communicator's ranks waited so far: generations published, and in how many of
    /// them a rank parked instead of seeing the publication while it polled (a benchmark's
    /// measure of whether the waiting policy fell back to the slow path).
    pub fn wait_stats(&self) -> WaitStats {
        self.state.lock().stats()
    }

    /// Whether the communicator has been aborted (by [`abort`](Self::abort) or a timeout).
    pub fn is_aborted(&self) -> bool {
        self.state.lock().aborted().is_some()
    }

    /// Submit `rank`'s tensor with `request` and wait for its delivery.
    fn submit(
        &self,
        rank: usize,
        tensor: D::Tensor,
        request: Request,
        timeout: Option<Duration>,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let Some(&device) = self.devices.get(rank) else {
            discard(tensor);
            return Err(NativeCollectiveError::RankOutOfRange {
                rank,
                world: self.world_size(),
            });
        };
        let submission = Submission {
            request,
            prepared: self.prepare(rank, tensor, device),
        };
        let mut state = self.state.lock();
        let refused = match state.aborted() {
            Some(error) => Some(error.clone()),
            None => self
                .deliveries
                .busy(rank)
                .then_some(NativeCollectiveError::RankBusy { rank }),
        };
        if let Some(error) = refused {
            drop(state);
            discard(submission);
            return Err(error);
        }
        self.deliveries.enter(rank);
        let (generation, batch) = state.deposit(rank, submission);
        let Some(batch) = batch else {
            return self.await_delivery(state, rank, generation, timeout);
        };
        drop(state);
        let (outcome, cache) = self.execute(generation, batch);
        let mut state = self.state.lock();
        if let Some(error) = state.aborted().cloned() {
            // An abort landed while the plan ran: it wins over this generation.
            drop(state);
            discard(outcome);
            return Err(error);
        }
        let (delivery, left) = state.publish(generation, outcome, cache, rank, &self.deliveries);
        self.announce(state);
        discard(left);
        delivery
    }

    /// Wait until `rank`'s delivery of `generation` is published (and take it) or an abort makes
    /// it never will be; time out `timeout` after the polling ends. Takes the guard of the
    /// deposit.
    fn await_delivery<'a>(
        &'a self,
        mut state: Guard<'a, D>,
        rank: usize,
        generation: u64,
        timeout: Option<Duration>,
    ) -> Delivery<D::Tensor> {
        // Poll the delivery slot without the lock first (under loom, only where a model asks
        // for it: the README's "How the checkers poll"). An abort ends the polling.
        let mut backoff = self.spin.backoff();
        if !backoff.is_completed() {
            drop(state);
            loop {
                if let Some(delivery) = self.deliveries.take(rank, generation) {
                    return delivery;
                }
                self.device.assist(rank);
                backoff.snooze();
                if backoff.is_completed() || self.aborting.load(Ordering::Acquire) {
                    break;
                }
            }
            state = self.state.lock();
        }
        // The clock is read only here, by a rank about to park: a runner and a waiter that
        // takes its delivery while polling never read it (the polling is bounded by the budget).
        let deadline = timeout.map_or_else(Deadline::never, Deadline::after);
        let taken = self.wait_for(state, generation, &deadline, |state| {
            // A published delivery is checked first: a published generation is delivered whole
            // even after an abort.
            self.deliveries
                .take(rank, generation)
                .or_else(|| state.aborted().map(|error| Err(error.clone())))
        });
        match taken {
            Ok((_, delivery)) => delivery,
            Err(state) => Err(self.time_out(state, rank, generation, timeout)),
        }
    }

    /// Prepare `tensor` on `device` and describe it, on the submitting rank's thread.
    fn prepare(
        &self,
        rank: usize,
        tensor: D::Tensor,
        device: DeviceId,
    ) -> Result<(D::Prepared, crate::TensorInfo), NativeCollectiveError> {
        let prepared = device_call(Phase::Prepare, Some(rank), || {
            self.device.prepare(tensor, device)
        })?;
        match infallible_call(Phase::Describe, Some(rank), || {
            self.device.describe(&prepared)
        }) {
            Ok(info) => Ok((prepared, info)),
            Err(failure) => {
                discard(prepared);
                Err(failure)
            }
        }
    }

    /// The last arriver's work, with the lock released: decide the generation and run its plan.
    /// The outcome is every rank's output, or the one error every rank receives; the plan is
    /// handed back to be kept for the next generation.
    fn execute(
        &self,
        generation: u64,
        batch: Batch<D::Prepared>,
    ) -> (Outcome<D::Tensor>, Option<Box<CachedPlan>>) {
        let mut cache = batch.cache;
        match agree(generation, batch.submissions, &self.model, &mut cache) {
            Ok(agreed) => {
                let outcome = run_plan(
                    &self.device,
                    &self.devices,
                    agreed.inputs,
                    agreed.plan.plan(),
                );
                (outcome, agreed.plan.into_kept())
            }
            Err(error) => (Err(error), cache),
        }
    }

    /// Park for `generation` until `ready` yields a value, or `deadline` passes. `ready` runs
    /// under the lock and is re-checked after every wake-up, spurious or not. On timeout the guard
    /// is handed back with `ready` still unsatisfied.
    fn wait_for<'a, R>(
        &'a self,
        mut state: Guard<'a, D>,
        generation: u64,
        deadline: &Deadline,
        mut ready: impl FnMut(&mut State<D>) -> Option<R>,
    ) -> Result<(Guard<'a, D>, R), Guard<'a, D>> {
        loop {
            if let Some(value) = ready(&mut state) {
                return Ok((state, value));
            }
            state.note_park(generation);
            state.sleepers += 1;
            let (woken, expired) = self.changed.wait_until(state, deadline);
            state = woken;
            state.sleepers -= 1;
            if expired {
                return match ready(&mut state) {
                    Some(value) => Ok((state, value)),
                    None => Err(state),
                };
            }
        }
    }

    /// Release the lock, then announce the transition just made under it to parked waiters
    /// (through the condition variable, only if some rank was parked when the lock was released:
    /// any rank parking later re-checks its condition under the lock first, and sees the
    /// transition). Polling waiters watch their delivery slots and `aborting` instead.
    fn announce(&self, state: Guard<'_, D>) {
        let wake = state.sleepers > 0;
        drop(state);
        if wake {
            self.changed.notify_all();
        }
    }

    /// `rank`'s deadline passed while waiting on `generation`: abort with `TimedOut` naming the
    /// stragglers, and return the communicator's abort error (this one, unless another abort won).
    fn time_out(
        &self,
        state: Guard<'_, D>,
        rank: usize,
        generation: u64,
        timeout: Option<Duration>,
    ) -> NativeCollectiveError {
        let error = NativeCollectiveError::TimedOut {
            rank,
            generation,
            timeout: timeout.unwrap_or_default(),
            missing: state.stragglers(generation),
        };
        self.abort_locked(state, error)
    }

    fn abort_with(&self, error: NativeCollectiveError) {
        let state = self.state.lock();
        self.abort_locked(state, error);
    }

    /// Record `error` as the abort if it is the first, wake everyone, drop the collecting
    /// generation's deposits outside the lock, and return the abort that won.
    fn abort_locked(
        &self,
        mut state: Guard<'_, D>,
        error: NativeCollectiveError,
    ) -> NativeCollectiveError {
        let (deposits, first) = state.abort(error.clone());
        if !first {
            return state.aborted().cloned().unwrap_or(error);
        }
        self.aborting.store(true, Ordering::Release);
        self.announce(state);
        discard(deposits);
        error
    }
}

fn validate_group(devices: &[DeviceId]) -> Result<(), NativeCollectiveError> {
    let invalid = |reason: String| NativeCollectiveError::InvalidGroup {
        devices: devices.iter().map(|device| device.index()).collect(),
        reason,
    };
    if devices.is_empty() {
        return Err(invalid(
            "a communicator needs at least one device".to_owned(),
        ));
    }
    for (rank, device) in devices.iter().enumerate() {
        if let Some(first) = devices[..rank].iter().position(|other| other == device) {
            return Err(invalid(format!(
                "{device} is given twice, as rank {first} and rank {rank}"
            )));
        }
    }
    Ok(())
}

impl<D: NativeCollectiveDevice> fmt::Debug for NativeCommunicator<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeCommunicator")
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}
