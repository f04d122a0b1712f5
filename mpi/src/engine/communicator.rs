//! [`MpiInterProcess`]: one generation is a status agreement, then the collective.
//!
//! ```text
//! every process                                   MPI (non-blocking, each wait bounded by the deadline)
//! ─────────────────────────────────────────────────────────────────────────────────────────────
//! validate own arguments → Ok(input) or a LocalFailure
//! status packet: failed?, deadline?, call, -call  ── Iallreduce (packet op) ──▶ verdict, the same everywhere
//!   (+ the data of an all-reduce ≤ 64 B)
//!   Proceed, data carried, no deadline anywhere → done: the packet holds the result
//!   Proceed otherwise → the collective on the input  ── Iallreduce / Ireduce_scatter_block / Iallgather / Ibcast
//!   Failed   → the lowest failing process's text     ── Ibcast from that process  → Err(Failed), everywhere
//!   Mismatch → every process's call description      ── Iallgather                → Err(Mismatch), everywhere
//! ```
//!
//! On a [`Waiting::Blocking`] communicator the status is non-blocking too, and what follows it is
//! blocking (`MPI_Allreduce`, ...) where the reduced status says no process waits with a
//! deadline: every process takes the same kind, and a deadline bounds every wait.
//!
//! The status goes first. A process that failed has no data to send, and calls that differ in
//! length or type must never reach MPI as a collective (a mismatched MPI collective is
//! erroneous: truncation, corruption or a hang); the packet is the same size for every call,
//! so it always matches.
//!
//! With a deadline anywhere, the collective is posted only once the status has completed, and
//! the data a small all-reduce put in the packet is ignored. A deadline must not let one
//! process finish what another abandoned: a process that gives up during the status has posted
//! nothing else, so a late peer completes the status, then waits for a collective nobody posts
//! and times out too, with the same text (`tests/multiprocess.rs`,
//! `a_process_that_never_calls_times_out_every_waiting_process`). If the packet's result
//! counted, that late peer would complete it and return `Ok` while the early one returned
//! `TimedOut` — the test catches exactly that. Without deadlines nobody gives up, so a small
//! all-reduce is one collective.
use crate::agreement::{self, Verdict};
use crate::buffer;
use crate::engine::in_flight::WaitError;
use crate::engine::packet::{self, PACKET_WORDS, PacketReduction};
use crate::engine::post::{self, Comm};
use crate::engine::reductions::{Reduction, Reductions, move_datatype};
use crate::engine::runtime::{MpiRuntime, lock_mpi};
use crate::error::{
    CallDescription, CallIdentity, CollectiveKind, InterProcessError, LocalFailure,
};
use crate::inter_process::InterProcess;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use ruccl_core::{Collective, ElementType, ReduceOperation};
use ruccl_host::HostValues;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Words that carry a failure's text: its length, then [`LocalFailure::MAX_BYTES`] bytes.
const TEXT_WORDS: usize = 1 + LocalFailure::MAX_BYTES / 8;

/// How a communicator's collectives wait; chosen when it is created, the same on every process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Waiting {
    /// Non-blocking MPI collectives polled by `MPI_Test` until done or until the caller's
    /// deadline: every call may pass one.
    Deadlines,
    /// Blocking MPI collectives for the data where no process passes a deadline: MPI's own
    /// (tuned, faster) algorithms for large messages. The status that starts every generation is
    /// non-blocking all the same, and a generation where any process passes a deadline runs
    /// non-blocking throughout, so that a call never waits past its caller's deadline here
    /// either (a dead peer under `mpirun --enable-recovery`: every survivor times out). A call
    /// without a deadline waits for ever for a process that never calls.
    Blocking,
}

/// [`InterProcess`] on MPI, over host memory: one communicator (a duplicate of
/// `MPI_COMM_WORLD`) and its user-defined reduction operations.
///
/// See [`InterProcess`] for the agreement, deadline and threading rules, and the crate docs for
/// what MPI does when a process dies.
pub struct MpiInterProcess {
    /// `Some` until dropped.
    resources: Option<Resources>,
    process: usize,
    processes: usize,
    /// Held for a whole collective: calls on one communicator are serialised, so every process
    /// posts its MPI operations in its own call order.
    state: Mutex<State>,
    /// The channels of the communicators that share this engine (`open_channel`): each a
    /// duplicate of this communicator, so that they run concurrently without meeting each
    /// other. Only on a `Waiting::Deadlines` engine (see `open_channel`).
    channels: Mutex<Vec<(u64, Arc<MpiInterProcess>)>>,
    /// Keeps MPI initialised until the resources are freed (dropped after them).
    _runtime: MpiRuntime,
}

/// What one communicator's collectives share.
struct State {
    /// The next collective's generation: collectives started on this communicator so far.
    generation: u64,
    /// Set once by a timeout or an MPI error and never cleared: every later call returns it.
    poisoned: Option<InterProcessError>,
    /// The last all-reduce's input, kept to receive the next all-reduce of the same type and
    /// length (MPI overwrites every element), so that a steady stream of all-reduces allocates
    /// nothing and touches no fresh pages.
    spare: Option<HostValues>,
    /// The last status packets (sent, received), reused so that a generation allocates none.
    packets: Option<post::Pair<Vec<i64>>>,
}

/// The MPI handles a communicator owns.
struct Resources {
    comm: Comm,
    reductions: Reductions,
    packet: PacketReduction,
}

/// What the status agreement leaves to do.
enum Agreed {
    /// Every process proceeds: run the collective on this input, on this communicator (blocking
    /// calls only on a blocking communicator where no process waits with a deadline).
    Run(HostValues, Comm),
    /// The packet carried the data: this is the (all-reduce) output.
    Done(HostValues),
}

// SAFETY: MPI handles are process-wide (valid on any thread); the runtime provides at least
// MPI_THREAD_SERIALIZED and every MPI call made through these handles holds `lock_mpi`, so the
// handles are never used by two threads at once.
unsafe impl Send for Resources {}
// SAFETY: as for `Send`: shared use goes through `lock_mpi`, one MPI call at a time.
unsafe impl Sync for Resources {}

impl MpiInterProcess {
    /// Duplicates `MPI_COMM_WORLD` (`MPI_Comm_idup`, waited for until `deadline`), returns
    /// MPI errors on it instead of aborting, and creates its reduction operations.
    pub(crate) fn new(
        runtime: MpiRuntime,
        waiting: Waiting,
        deadline: Option<Instant>,
    ) -> Result<Self, InterProcessError> {
        Self::duplicating(
            runtime,
            SimpleCommunicator::world().as_raw(),
            waiting,
            deadline,
        )
    }

    /// Like [`new`](Self::new), duplicating `parent` (a live communicator this process belongs
    /// to) instead of `MPI_COMM_WORLD`.
    pub(crate) fn duplicating(
        runtime: MpiRuntime,
        parent: ffi::MPI_Comm,
        waiting: Waiting,
        deadline: Option<Instant>,
    ) -> Result<Self, InterProcessError> {
        let slot = post::duplicate(parent)?
            .wait(deadline)
            .map_err(|stop| match stop {
                WaitError::Expired => InterProcessError::SetupTimedOut,
                WaitError::Failed(error) => error,
            })?;
        // SAFETY: the MPI_Comm_idup completed, so it wrote the new handle into the slot.
        let raw = unsafe { slot.assume_init_read() };
        let mpi_guard = lock_mpi();
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: `raw` is the communicator just created; `rank` and `size` are locals; the
        // error handler is MPI's predefined MPI_ERRORS_RETURN.
        let codes = unsafe {
            [
                ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN),
                ffi::MPI_Comm_rank(raw, &mut rank),
                ffi::MPI_Comm_size(raw, &mut size),
            ]
        };
        if let Some(code) = codes.into_iter().find(|code| *code != 0) {
            drop(mpi_guard);
            return Err(crate::engine::in_flight::mpi_error(
                "MPI_Comm_set_errhandler",
                code,
            ));
        }
        let processes = usize::try_from(size).unwrap_or(1).max(1);
        let reductions = Reductions::new();
        let packet = PacketReduction::new();
        drop(mpi_guard);
        let blocking = waiting == Waiting::Blocking;
        let comm = Comm {
            raw,
            processes,
            blocking,
        };
        let communicator = MpiInterProcess {
            resources: Some(Resources {
                comm,
                reductions,
                packet,
            }),
            process: usize::try_from(rank).unwrap_or(0),
            processes,
            state: Mutex::new(State {
                generation: 0,
                poisoned: None,
                spare: None,
                packets: None,
            }),
            channels: Mutex::new(Vec::new()),
            _runtime: runtime,
        };
        match communicator.agree_on_waiting(blocking, deadline) {
            Ok(()) => Ok(communicator),
            Err(error) => {
                if error.is_sticky() {
                    // A pending operation may still use the handle: `Drop` leaves it alone.
                    communicator.lock_state().poisoned = Some(error.clone());
                }
                Err(error)
            }
        }
    }

    /// The error every call returns since a timeout or an MPI error, if one happened.
    pub fn poisoned(&self) -> Option<InterProcessError> {
        self.lock_state().poisoned.clone()
    }

    /// Checks that every process asked for the same waiting mode: a non-blocking
    /// `MPI_Iallreduce` of `[mode, -mode]` under `MAX`, waited for until `deadline`.
    fn agree_on_waiting(
        &self,
        blocking: bool,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        let Some(resources) = &self.resources else {
            return Err(internal("a communicator without MPI resources"));
        };
        let mode = i64::from(blocking);
        let max = reduction(resources, ElementType::I64, ReduceOperation::Max)?;
        let probe = Comm {
            blocking: false,
            ..resources.comm
        };
        let words = HostValues::I64(vec![mode, -mode]);
        let (_, reduced) = post::all_reduce(probe, words, HostValues::I64(vec![0; 2]), max)?
            .wait(deadline)
            .map_err(|stop| match stop {
                WaitError::Expired => InterProcessError::SetupTimedOut,
                WaitError::Failed(error) => error,
            })?;
        match reduced {
            HostValues::I64(words) if words.len() == 2 && words[0] == -words[1] => Ok(()),
            HostValues::I64(_) => Err(InterProcessError::WaitingMismatch {
                modes: "Blocking and Deadlines".to_owned(),
            }),
            _ => Err(internal("a waiting mode of the wrong type")),
        }
    }

    /// The channel opened for `communicator`, if any.
    fn channel(&self, communicator: u64) -> Option<Arc<MpiInterProcess>> {
        if communicator == 0 {
            return None;
        }
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels
            .iter()
            .find(|(number, _)| *number == communicator)
            .map(|(_, channel)| Arc::clone(channel))
    }

    /// How this communicator's collectives wait.
    pub fn waiting(&self) -> Waiting {
        match &self.resources {
            Some(resources) if resources.comm.blocking => Waiting::Blocking,
            _ => Waiting::Deadlines,
        }
    }

    /// Collectives started on this communicator so far.
    pub fn generation(&self) -> u64 {
        self.lock_state().generation
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // State is updated by plain assignments that cannot panic half-way.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One generation: the status agreement, then `run` on the input if every process may
    /// proceed. An input of a type MPI cannot move is a local failure. Maps an expired wait to
    /// this generation's `TimedOut` and poisons on sticky errors.
    fn collective(
        &self,
        mut call: CallDescription,
        identity: CallIdentity,
        local: Result<HostValues, LocalFailure>,
        deadline: Option<Instant>,
        run: impl FnOnce(
            &Resources,
            Comm,
            &mut Option<HostValues>,
            HostValues,
        ) -> Result<HostValues, WaitError>,
    ) -> Result<HostValues, InterProcessError> {
        let mut state = self.lock_state();
        if let Some(error) = &state.poisoned {
            return Err(error.clone());
        }
        let Some(resources) = &self.resources else {
            return Err(internal("a communicator without MPI resources"));
        };
        let generation = state.generation;
        state.generation += 1;
        call.generation = generation;
        let local = local.and_then(|input| match move_datatype(input.element_type()) {
            Some(_) => Ok(input),
            None => Err(LocalFailure::new(format_args!(
                "the MPI engine cannot move {} elements",
                input.element_type()
            ))),
        });
        let state = &mut *state;
        let outcome = self
            .agree(
                resources,
                &mut state.packets,
                &call,
                &identity,
                local,
                deadline,
            )
            .and_then(|agreed| match agreed {
                Agreed::Run(input, comm) => run(resources, comm, &mut state.spare, input),
                Agreed::Done(output) => Ok(output),
            });
        outcome.map_err(|stop| {
            let error = match stop {
                WaitError::Expired => InterProcessError::TimedOut { generation },
                WaitError::Failed(error) => error,
            };
            if error.is_sticky() {
                state.poisoned = Some(error.clone());
            }
            error
        })
    }

    /// The status agreement (one packet `MPI_Iallreduce`, carrying a small all-reduce's data):
    /// what is left to do if every process proceeds, else the agreed error.
    fn agree(
        &self,
        resources: &Resources,
        packets: &mut Option<post::Pair<Vec<i64>>>,
        call: &CallDescription,
        identity: &CallIdentity,
        local: Result<HostValues, LocalFailure>,
        deadline: Option<Instant>,
    ) -> Result<Agreed, WaitError> {
        let words = agreement::contribution(
            self.process,
            self.processes,
            local.is_err(),
            deadline.is_some(),
            call,
            identity,
        );
        let carried = packet::carries_data(call);
        let data = local.as_ref().ok().filter(|_| carried);
        let (mut send, mut received) = packets.take().unwrap_or_default();
        packet::pack_into(&mut send, &words, data);
        received.clear();
        received.resize(PACKET_WORDS, 0);
        // The status is non-blocking on every communicator, so that a deadline bounds it even on
        // a blocking one; what follows is blocking only where the communicator is and nobody
        // waits with a deadline (the reduced status says so, the same everywhere).
        let status_comm = Comm {
            blocking: false,
            ..resources.comm
        };
        let (send, received) =
            post::all_reduce_packet(status_comm, send, received, &resources.packet)?
                .wait(deadline)?;
        let reduced = packet::status(&received);
        // A carried all-reduce's result, decoded into the input (same type and length) before
        // the packets go back for reuse. It counts only when nobody waits with a deadline: see
        // `packet.rs` for why a deadline anywhere needs the collective on its own.
        let mut local = local;
        let mut done = false;
        if let (Some(reduced), Ok(input)) = (&reduced, &mut local) {
            if carried
                && agreement::verdict(reduced, self.processes) == Verdict::Proceed
                && !agreement::any_deadline(reduced)
            {
                if !packet::unpack_into(&received, input) {
                    return Err(internal("a carried all-reduce that does not fit").into());
                }
                done = true;
            }
        }
        *packets = Some((send, received));
        let reduced = reduced.ok_or_else(|| internal("a status packet too short"))?;
        let comm = Comm {
            blocking: resources.comm.blocking && !agreement::any_deadline(&reduced),
            ..resources.comm
        };
        match agreement::verdict(&reduced, self.processes) {
            Verdict::Proceed => {
                let input = local.map_err(|_| internal("proceeding past a local failure"))?;
                Ok(if done {
                    Agreed::Done(input)
                } else {
                    Agreed::Run(input, comm)
                })
            }
            Verdict::Failed { process } => {
                let message = share_text(comm, process, local.err(), deadline)?;
                Err(InterProcessError::Failed { process, message }.into())
            }
            Verdict::Crossed => {
                let calls = gather_calls(comm, call, identity, deadline)?;
                let calls = calls.into_iter().map(|(_, identity)| identity).collect();
                Err(InterProcessError::Crossed { calls }.into())
            }
            Verdict::Mismatch => {
                let calls = gather_calls(comm, call, identity, deadline)?;
                let calls = calls.into_iter().map(|(call, _)| call).collect();
                Err(InterProcessError::Mismatch { calls }.into())
            }
        }
    }

    /// Describes the input for the status (`None` and 0 for a process that failed before it had
    /// one).
    fn describe(input: &Result<HostValues, LocalFailure>) -> (Option<ElementType>, usize) {
        match input {
            Ok(buffer) => (Some(buffer.element_type()), buffer.len()),
            Err(_) => (None, 0),
        }
    }

    /// The inherent form of [`InterProcess::all_reduce`].
    pub fn all_reduce(
        &self,
        input: Result<HostValues, LocalFailure>,
        operation: ReduceOperation,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        self.tagged_all_reduce(CallIdentity::default(), input, operation, 0, deadline)
    }

    /// The inherent form of [`InterProcess::reduce_scatter`].
    pub fn reduce_scatter(
        &self,
        input: Result<HostValues, LocalFailure>,
        operation: ReduceOperation,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        self.tagged_reduce_scatter(CallIdentity::default(), input, operation, 0, deadline)
    }

    /// The inherent form of [`InterProcess::all_gather`].
    pub fn all_gather(
        &self,
        input: Result<HostValues, LocalFailure>,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        self.tagged_all_gather(CallIdentity::default(), input, 0, deadline)
    }

    /// The inherent form of [`InterProcess::broadcast`].
    pub fn broadcast(
        &self,
        input: Result<HostValues, LocalFailure>,
        root: usize,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        self.tagged_broadcast(CallIdentity::default(), input, root, 0, deadline)
    }

    fn tagged_all_reduce(
        &self,
        identity: CallIdentity,
        input: Result<HostValues, LocalFailure>,
        operation: ReduceOperation,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        let kind = CollectiveKind::AllReduce;
        let (element, len) = Self::describe(&input);
        let call = describe(kind, Some(operation), element, len, None, tag);
        let local = input.and_then(|input| within_count(kind, input.len()).map(|()| input));
        let mut output = self.collective(
            call,
            identity,
            local,
            deadline,
            |resources, comm, spare, input| {
                let reduction = reduction(resources, input.element_type(), operation)?;
                let output = spare
                    .take()
                    .filter(|spare| {
                        spare.element_type() == input.element_type() && spare.len() == input.len()
                    })
                    .unwrap_or_else(|| input.zeros_like(input.len()));
                let (input, output) =
                    post::all_reduce(comm, input, output, reduction)?.wait(deadline)?;
                *spare = Some(input);
                Ok(output)
            },
        )?;
        if operation == ReduceOperation::Mean {
            buffer::divide_by(&mut output, self.processes);
        }
        Ok(output)
    }

    fn tagged_reduce_scatter(
        &self,
        identity: CallIdentity,
        input: Result<HostValues, LocalFailure>,
        operation: ReduceOperation,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        let kind = CollectiveKind::ReduceScatter;
        let (element, len) = Self::describe(&input);
        let call = describe(kind, Some(operation), element, len, None, tag);
        let processes = self.processes;
        let local = input.and_then(|input| {
            within_count(kind, input.len())?;
            if input.len() % processes != 0 {
                return Err(LocalFailure::new(format_args!(
                    "{kind} input of {} elements does not split into {processes} equal blocks",
                    input.len()
                )));
            }
            Ok(input)
        });
        let mut output = self.collective(
            call,
            identity,
            local,
            deadline,
            |resources, comm, _, input| {
                let reduction = reduction(resources, input.element_type(), operation)?;
                let output = input.zeros_like(input.len() / processes);
                let (_, output) =
                    post::reduce_scatter(comm, input, output, reduction)?.wait(deadline)?;
                Ok(output)
            },
        )?;
        if operation == ReduceOperation::Mean {
            buffer::divide_by(&mut output, processes);
        }
        Ok(output)
    }

    fn tagged_all_gather(
        &self,
        identity: CallIdentity,
        input: Result<HostValues, LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        let kind = CollectiveKind::AllGather;
        let (element, len) = Self::describe(&input);
        let call = describe(kind, None, element, len, None, tag);
        let processes = self.processes;
        let local = input.and_then(|input| {
            within_count(kind, input.len().saturating_mul(processes)).map(|()| input)
        });
        self.collective(call, identity, local, deadline, |_, comm, _, input| {
            let output = input.zeros_like(input.len() * processes);
            let (_, output) = post::all_gather(comm, input, output)?.wait(deadline)?;
            Ok(output)
        })
    }

    fn tagged_broadcast(
        &self,
        identity: CallIdentity,
        input: Result<HostValues, LocalFailure>,
        root: usize,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        let kind = CollectiveKind::Broadcast;
        let (element, len) = Self::describe(&input);
        let call = describe(kind, None, element, len, Some(root), tag);
        let processes = self.processes;
        let local = input.and_then(|input| {
            within_count(kind, input.len())?;
            if root >= processes {
                return Err(LocalFailure::new(format_args!(
                    "{kind} root {root} is outside the {processes} processes"
                )));
            }
            Ok(input)
        });
        self.collective(call, identity, local, deadline, |_, comm, _, input| {
            let output = post::broadcast(comm, input, root)?.wait(deadline)?;
            Ok(output)
        })
    }
}

impl InterProcess for MpiInterProcess {
    type Buffer = HostValues;

    fn process(&self) -> usize {
        self.process
    }

    fn processes(&self) -> usize {
        self.processes
    }

    fn collective(
        &self,
        collective: Collective,
        input: Result<HostValues, LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        self.collective_as(CallIdentity::default(), collective, input, tag, deadline)
    }

    fn agree(
        &self,
        status: Result<(), LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        self.agree_as(CallIdentity::default(), status, tag, deadline)
    }

    fn open_channel(
        &self,
        communicator: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        self.open(communicator, deadline)
    }

    /// Drops the channel (its `MPI_Comm_free`; a poisoned channel's handle is left alone).
    fn close_channel(&self, communicator: u64) {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels.retain(|(number, _)| *number != communicator);
    }

    /// The identity travels in the status words: calls whose identities differ are
    /// [`InterProcessError::Crossed`] on every process of the generation, before anything runs.
    /// A call of a communicator with a channel of its own ([`open_channel`](Self::open_channel))
    /// runs there.
    fn collective_as(
        &self,
        identity: CallIdentity,
        collective: Collective,
        input: Result<HostValues, LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        if let Some(channel) = self.channel(identity.communicator) {
            return channel.collective_as(identity, collective, input, tag, deadline);
        }
        match collective {
            Collective::AllReduce(operation) => {
                self.tagged_all_reduce(identity, input, operation, tag, deadline)
            }
            Collective::ReduceScatter(operation) => {
                self.tagged_reduce_scatter(identity, input, operation, tag, deadline)
            }
            Collective::AllGather => self.tagged_all_gather(identity, input, tag, deadline),
            Collective::Broadcast { root } => {
                self.tagged_broadcast(identity, input, root, tag, deadline)
            }
            // A collective of a later core: refused, but through the agreement (every process
            // learns it), as an all-reduce that carries the refusal.
            other => {
                let refusal = LocalFailure::new(format_args!(
                    "the MPI engine does not offer {other} between processes"
                ));
                let input = input.and(Err(refusal));
                self.tagged_all_reduce(identity, input, ReduceOperation::Sum, tag, deadline)
            }
        }
    }

    /// An all-reduce of no elements (`i64`, `Max`) with `tag`: the status packet alone when no
    /// process waits with a deadline, the packet and an empty `MPI_Iallreduce` otherwise (see
    /// the module docs for why a deadline needs the second).
    fn agree_as(
        &self,
        identity: CallIdentity,
        status: Result<(), LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        if let Some(channel) = self.channel(identity.communicator) {
            return channel.agree_as(identity, status, tag, deadline);
        }
        let input = status.map(|()| HostValues::I64(Vec::new()));
        self.tagged_all_reduce(identity, input, ReduceOperation::Max, tag, deadline)
            .map(|_| ())
    }
}

impl MpiInterProcess {
    /// [`InterProcess::open_channel`]: on a `Waiting::Deadlines` engine, a duplicate of this
    /// communicator (`MPI_Comm_idup`, posted under this communicator's lock so that it is in
    /// order with its collectives; waited for until `deadline`) for `communicator`'s calls. On
    /// a `Waiting::Blocking` engine none: a blocking collective holds the process-wide MPI lock
    /// while it waits, so two communicators blocking on different channels in different orders
    /// on two processes would deadlock; there, communicators share this one and calls that
    /// meet another's are `Crossed`.
    fn open(&self, communicator: u64, deadline: Option<Instant>) -> Result<(), InterProcessError> {
        if communicator == 0 || self.waiting() == Waiting::Blocking {
            return Ok(());
        }
        let state = self.lock_state();
        if let Some(error) = &state.poisoned {
            return Err(error.clone());
        }
        let Some(resources) = &self.resources else {
            return Err(internal("a communicator without MPI resources"));
        };
        let channel = MpiInterProcess::duplicating(
            self._runtime.clone(),
            resources.comm.raw,
            Waiting::Deadlines,
            deadline,
        )?;
        drop(state);
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels.retain(|(number, _)| *number != communicator);
        channels.push((communicator, Arc::new(channel)));
        Ok(())
    }
}

impl Drop for MpiInterProcess {
    fn drop(&mut self) {
        // The channels are duplicates of this communicator: freed first.
        self.channels
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let poisoned = self.lock_state().poisoned.is_some();
        if let Some(Resources {
            comm,
            reductions,
            packet,
        }) = self.resources.take()
        {
            let _mpi = lock_mpi();
            // Frees the user-defined operations and the packet datatype (MPI defers both until
            // pending operations complete).
            drop(reductions);
            drop(packet);
            if !poisoned {
                let mut raw = comm.raw;
                // SAFETY: `raw` is this communicator's own handle, created in `new` and used by
                // nothing else; no operation is pending on it (every wait completed, or the
                // communicator would be poisoned). A poisoned communicator's handle is left
                // alone: its pending collective may still refer to it.
                unsafe { ffi::MPI_Comm_free(&mut raw) };
            }
        }
    }
}

/// The failing `root`'s text, on every process (`MPI_Ibcast` of [`TEXT_WORDS`] words).
fn share_text(
    comm: Comm,
    root: usize,
    own: Option<LocalFailure>,
    deadline: Option<Instant>,
) -> Result<String, WaitError> {
    let words = match own {
        Some(failure) => encode_text(failure.message()),
        None => vec![0; TEXT_WORDS],
    };
    let shared = post::broadcast(comm, HostValues::I64(words), root)?.wait(deadline)?;
    match shared {
        HostValues::I64(words) => Ok(decode_text(&words)),
        _ => Err(internal("a shared text of the wrong type").into()),
    }
}

/// Every process's call description and identity, in process order (`MPI_Iallgather`).
fn gather_calls(
    comm: Comm,
    call: &CallDescription,
    identity: &CallIdentity,
    deadline: Option<Instant>,
) -> Result<Vec<(CallDescription, CallIdentity)>, WaitError> {
    let processes = comm.processes;
    let (_, gathered) = post::all_gather(
        comm,
        HostValues::I64(agreement::encode_call(call, identity).to_vec()),
        HostValues::I64(vec![0; agreement::CALL_FIELDS * processes]),
    )?
    .wait(deadline)?;
    let HostValues::I64(words) = gathered else {
        return Err(internal("gathered calls of the wrong type").into());
    };
    words
        .chunks(agreement::CALL_FIELDS)
        .map(|fields| {
            agreement::decode_call(fields)
                .ok_or_else(|| internal("a process sent a call this version cannot read").into())
        })
        .collect()
}

/// A failure's text as words: its byte length, then its bytes (little-endian, eight per word),
/// cut to [`LocalFailure::MAX_BYTES`] at a character boundary, ending in `…` when cut.
fn encode_text(text: &str) -> Vec<i64> {
    let mut bytes = text.as_bytes().to_vec();
    if bytes.len() > LocalFailure::MAX_BYTES {
        let mut end = LocalFailure::MAX_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        bytes.truncate(end);
        bytes.extend_from_slice("…".as_bytes());
    }
    let mut words = vec![0i64; TEXT_WORDS];
    words[0] = bytes.len() as i64;
    for (word, chunk) in words[1..].iter_mut().zip(bytes.chunks(8)) {
        let mut eight = [0u8; 8];
        eight[..chunk.len()].copy_from_slice(chunk);
        *word = i64::from_le_bytes(eight);
    }
    words
}

/// The inverse of [`encode_text`] (a length out of range is clamped).
fn decode_text(words: &[i64]) -> String {
    let len = words
        .first()
        .and_then(|len| usize::try_from(*len).ok())
        .unwrap_or(0)
        .min(LocalFailure::MAX_BYTES);
    let bytes: Vec<u8> = words
        .iter()
        .skip(1)
        .flat_map(|word| word.to_le_bytes())
        .take(len)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn describe(
    kind: CollectiveKind,
    operation: Option<ReduceOperation>,
    element: Option<ElementType>,
    len: usize,
    root: Option<usize>,
    tag: u64,
) -> CallDescription {
    CallDescription {
        generation: 0,
        kind,
        operation,
        element,
        len,
        root,
        tag,
    }
}

/// MPI counts are `int`: a longer buffer is a local failure, shared like any other.
fn within_count(kind: CollectiveKind, len: usize) -> Result<(), LocalFailure> {
    if c_int::try_from(len).is_ok() {
        Ok(())
    } else {
        Err(LocalFailure::new(format_args!(
            "{kind} of {len} elements exceeds MPI's count limit of {} elements",
            c_int::MAX
        )))
    }
}

fn reduction(
    resources: &Resources,
    element: ElementType,
    operation: ReduceOperation,
) -> Result<Reduction, InterProcessError> {
    resources
        .reductions
        .get(element, operation)
        .ok_or_else(|| internal("a reduction without its MPI operation"))
}

fn internal(message: &str) -> InterProcessError {
    InterProcessError::Internal {
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_text_survives_the_words() {
        for text in [
            "",
            "x",
            "device error in exchange step 2: ünïcödé",
            "12345678",
        ] {
            assert_eq!(decode_text(&encode_text(text)), text);
        }
    }

    #[test]
    fn a_long_failure_text_is_cut_at_a_character_boundary() {
        let text = "é".repeat(LocalFailure::MAX_BYTES);
        let shared = decode_text(&encode_text(&text));
        assert!(shared.len() <= LocalFailure::MAX_BYTES);
        assert!(shared.ends_with('…'));
        assert!(shared.trim_end_matches('…').chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_count_beyond_int_is_a_local_failure() {
        let too_long = c_int::MAX as usize + 1;
        let failure = within_count(CollectiveKind::AllGather, too_long).unwrap_err();
        assert!(failure.message().contains("exceeds MPI's count limit"));
        assert!(within_count(CollectiveKind::AllGather, 16).is_ok());
    }
}
