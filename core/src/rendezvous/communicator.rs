//! [`NativeCommunicator`]: one ordered device group and its reusable rendezvous.

use super::padded::Padded;
use super::state::{Delivery, Outcome, State, Submission};
use crate::contain::{device_call, discard};
use crate::error::{NativeCollectiveError, Phase};
use crate::ring::ring_all_reduce;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Backoff, Condvar, Deadline, Mutex, MutexGuard};
use crate::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use std::fmt;
use std::time::Duration;

/// The held state lock.
type Guard<'a, D> = MutexGuard<'a, State<D>>;

/// An ordered group of distinct devices, one rank each, and the rendezvous that runs their
/// all-reduces generation after generation.
///
/// Each rank calls [`all_reduce`](Self::all_reduce) from its own thread. The last rank to arrive
/// runs the ring on the device executor, without holding the state lock; every rank then
/// receives its own output, or — if anything failed on any rank — the same
/// [`NativeCollectiveError`]. A rank may call again as soon as it has returned; it waits until
/// every rank has left the previous generation.
pub struct NativeCommunicator<D: NativeCollectiveDevice> {
    devices: Vec<DeviceId>,
    device: D,
    state: Mutex<State<D>>,
    /// Signalled after every transition a waiter may be waiting for (publish, close, abort), and
    /// only when `State::sleepers > 0`.
    changed: Condvar,
    /// Bumped after the same transitions, once the lock is released, so that waiters can spin
    /// on it without touching the lock before they park. On a cache line of its own.
    progress: Padded<AtomicUsize>,
    /// How a waiter polls `progress` before parking.
    backoff: Backoff,
}

impl<D: NativeCollectiveDevice> NativeCommunicator<D> {
    /// A communicator over `devices`, rank `r` being `devices[r]`. Fails with
    /// [`NativeCollectiveError::InvalidGroup`] if the list is empty or names a device twice.
    pub fn new(devices: Vec<DeviceId>, device: D) -> Result<Self, NativeCollectiveError> {
        validate_group(&devices)?;
        let world = devices.len();
        Ok(Self {
            devices,
            device,
            state: Mutex::new(State::new(world)),
            changed: Condvar::new(),
            progress: Padded(AtomicUsize::new(0)),
            backoff: Backoff::for_world(world),
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
    /// element-wise `operation` over every rank's tensor of the same generation.
    ///
    /// Every rank of a generation receives either its output or the same error. Errors:
    /// [`RankOutOfRange`](NativeCollectiveError::RankOutOfRange) at once for a bad rank;
    /// [`ReductionMismatch`](NativeCollectiveError::ReductionMismatch) if ranks disagree on the
    /// operation; [`Device`](NativeCollectiveError::Device),
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
        self.collective(rank, tensor, operation, None)
    }

    /// Like [`all_reduce`](Self::all_reduce), but if this rank's generation has not been
    /// delivered within `timeout`, the communicator is aborted with
    /// [`TimedOut`](NativeCollectiveError::TimedOut) naming the ranks that had not arrived, and
    /// every rank of that generation (and every later call) receives that error.
    ///
    /// Under a model checker (`--cfg ruccl_loom` or `--cfg ruccl_shuttle`) time is not modelled
    /// and the timeout never fires.
    pub fn all_reduce_timeout(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
        timeout: Duration,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        self.collective(rank, tensor, operation, Some(timeout))
    }

    /// Abort the communicator. The first abort wins and is sticky: every rank of every generation
    /// not yet published, and every later call, receives
    /// [`Aborted`](NativeCollectiveError::Aborted) with this `reason`. A generation already
    /// published is still delivered whole. A ring running right now has its outputs discarded.
    pub fn abort(&self, reason: impl Into<String>) {
        self.abort_with(NativeCollectiveError::Aborted {
            reason: reason.into(),
        });
    }

    /// Whether the communicator has been aborted (by [`abort`](Self::abort) or a timeout).
    pub fn is_aborted(&self) -> bool {
        self.state.lock().aborted().is_some()
    }

    fn collective(
        &self,
        rank: usize,
        tensor: D::Tensor,
        operation: ReduceOperation,
        timeout: Option<Duration>,
    ) -> Result<D::Tensor, NativeCollectiveError> {
        let Some(&device) = self.devices.get(rank) else {
            discard(tensor);
            return Err(NativeCollectiveError::RankOutOfRange {
                rank,
                world: self.world_size(),
            });
        };
        let deadline = timeout.map_or_else(Deadline::never, Deadline::after);
        let prepared = device_call(Phase::Prepare, Some(rank), || {
            self.device.prepare(tensor, device)
        });
        let submission = Submission {
            operation,
            prepared,
        };

        let state = self.state.lock();
        let entered = self.wait_for(state, &deadline, |state| {
            (state.aborted().is_some() || state.may_enter(rank)).then_some(())
        });
        let mut state = match entered {
            Ok((state, ())) => state,
            Err(state) => {
                let generation = state.joining_generation();
                discard(submission);
                return Err(self.time_out(state, rank, generation, timeout));
            }
        };
        if let Some(error) = state.aborted().cloned() {
            drop(state);
            discard(submission);
            return Err(error);
        }
        let (generation, submissions) = state.deposit(rank, submission);
        let mut published = false;
        if let Some(submissions) = submissions {
            drop(state);
            let outcome = self.execute(generation, submissions);
            state = self.state.lock();
            if let Some(error) = state.aborted().cloned() {
                // An abort landed while the ring ran: it wins over this generation.
                drop(state);
                discard(outcome);
                return Err(error);
            }
            state.publish(outcome);
            published = true;
        }
        self.leave(state, rank, generation, &deadline, timeout, published)
    }

    /// Wait until `rank`'s delivery of `generation` is published (and take it) or an abort makes
    /// it never will be. `published` says the caller has just published the generation, which
    /// must be announced once the lock is released.
    fn leave(
        &self,
        state: Guard<'_, D>,
        rank: usize,
        generation: u64,
        deadline: &Deadline,
        timeout: Option<Duration>,
        published: bool,
    ) -> Delivery<D::Tensor> {
        let taken = self.wait_for(state, deadline, |state| {
            // A published delivery is checked first: a published generation is delivered whole
            // even after an abort.
            match state.take(rank, generation) {
                Some(taken) => Some(taken),
                None => state.aborted().map(|error| (Err(error.clone()), false)),
            }
        });
        match taken {
            Ok((state, (delivery, closed))) => {
                if published || closed {
                    self.announce(state);
                }
                delivery
            }
            Err(state) => Err(self.time_out(state, rank, generation, timeout)),
        }
    }

    /// The last arriver's work: check the submissions agree and run the ring (lock released).
    /// The outcome is every rank's output, or the one error every rank receives.
    fn execute(
        &self,
        generation: u64,
        submissions: Vec<Submission<D::Prepared>>,
    ) -> Outcome<D::Tensor> {
        let (inputs, operation) = self.agreed_inputs(generation, submissions)?;
        ring_all_reduce(&self.device, &self.devices, inputs, operation)
    }

    /// The prepared inputs and the operation every rank agreed on, or the generation's error:
    /// a mismatch of operations first, then the lowest rank's `prepare` failure.
    fn agreed_inputs(
        &self,
        generation: u64,
        submissions: Vec<Submission<D::Prepared>>,
    ) -> Result<(Vec<D::Prepared>, ReduceOperation), NativeCollectiveError> {
        // `submissions` holds one entry per rank and a world has at least one rank.
        let agreed = submissions
            .first()
            .map_or(ReduceOperation::Sum, |entry| entry.operation);
        if submissions.iter().any(|entry| entry.operation != agreed) {
            let operations = submissions.iter().map(|entry| entry.operation).collect();
            discard(submissions);
            return Err(NativeCollectiveError::ReductionMismatch {
                generation,
                operations,
            });
        }
        let mut inputs = Vec::with_capacity(submissions.len());
        let mut failure = None;
        for submission in submissions {
            match submission.prepared {
                Ok(prepared) if failure.is_none() => inputs.push(prepared),
                Ok(prepared) => discard(prepared),
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) => {
                discard(inputs);
                Err(error)
            }
            None => Ok((inputs, agreed)),
        }
    }

    /// Wait (spinning first, then parking) until `ready` yields a value, or `deadline` passes.
    /// `ready` runs under the lock and is re-checked after every wake-up, spurious or not.
    /// On timeout the guard is handed back with `ready` still unsatisfied.
    fn wait_for<'a, R>(
        &'a self,
        mut state: Guard<'a, D>,
        deadline: &Deadline,
        mut ready: impl FnMut(&mut State<D>) -> Option<R>,
    ) -> Result<(Guard<'a, D>, R), Guard<'a, D>> {
        if let Some(value) = ready(&mut state) {
            return Ok((state, value));
        }
        // Poll without the lock first: every transition a waiter wants bumps `progress` once
        // the transition is visible under the lock. `polls` bounds polls and re-checks alike.
        let polls = self.backoff.polls();
        let mut done = 0;
        while done < polls {
            let seen = self.progress.load(Ordering::Acquire);
            drop(state);
            while done < polls && self.progress.load(Ordering::Acquire) == seen {
                self.backoff.pause(done);
                done += 1;
            }
            done = done.saturating_add(1);
            state = self.state.lock();
            if let Some(value) = ready(&mut state) {
                return Ok((state, value));
            }
        }
        loop {
            state.sleepers += 1;
            let (woken, expired) = self.changed.wait_until(state, deadline);
            state = woken;
            state.sleepers -= 1;
            if let Some(value) = ready(&mut state) {
                return Ok((state, value));
            }
            if expired {
                return Err(state);
            }
        }
    }

    /// Release the lock, then announce the transition just made under it to spinning waiters
    /// (through `progress`) and to parked ones (through the condition variable, only if some rank
    /// was parked when the lock was released: any rank parking later re-checks its condition
    /// under the lock first, and sees the transition).
    fn announce(&self, state: Guard<'_, D>) {
        let wake = state.sleepers > 0;
        drop(state);
        self.progress.fetch_add(1, Ordering::Release);
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
            missing: state.stragglers(),
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
