//! [`InterProcess`]: the step between processes that a hierarchical communicator runs between its
//! local phases, implemented on MPI by [`MpiInterProcess`](crate::MpiInterProcess) and open to a
//! GPU engine (NCCL) later.

use crate::error::{CallIdentity, InterProcessError, LocalFailure};
use ruccl_core::{Collective, ReduceOperation};
use std::sync::Arc;
use std::time::Instant;

/// Collectives among the processes of a job, one call per process per generation, each agreeing
/// on a status as well as on the data.
///
/// ## Agreement
///
/// Every call takes the process's local outcome: `Ok(buffer)`, or `Err(LocalFailure)` when the
/// process failed before it had anything to send (a device error, a panic, a local mismatch). A
/// process that failed still calls, so that the others learn it. Then, in every generation:
///
/// - if any process failed, every process returns
///   [`InterProcessError::Failed`] with the lowest failing process and its text;
/// - else, if the calls differ in kind, operation, element type, length, root or generation,
///   every process returns [`InterProcessError::Mismatch`] listing each process's call;
/// - else the collective runs and every process returns its output.
///
/// Neither error poisons the communicator: the next generation works. Validation of a process's
/// own arguments (a root out of range, a reduce-scatter length not divisible by the process
/// count) is a local failure, so it too reaches every process as one text.
///
/// ## Deadlines
///
/// Every wait for another process honours `deadline` (`None`: wait for ever). When it passes,
/// the call returns [`InterProcessError::TimedOut`] and the communicator is poisoned: later calls
/// return that error at once. A process whose peer timed out fails too, at its own deadline,
/// with the same text — except that a process that had already finished the generation before a
/// peer gave up keeps its `Ok` (a deadline cannot be agreed by any finite exchange). A timeout
/// therefore means: stop using the communicator, and usually end the job. Every engine honours
/// deadlines (`MpiInterProcess` made with `Waiting::Blocking` too: its status is non-blocking, and
/// a generation where any process passes a deadline runs non-blocking).
///
/// ## Threads
///
/// Any thread may call, one call at a time per communicator (a second concurrent call waits for
/// the first). In a hierarchical communicator the local rank that arrives last calls, so the
/// calling thread changes from generation to generation.
pub trait InterProcess: Send + Sync {
    /// The buffer the engine moves: host memory for MPI, device memory for a GPU engine.
    type Buffer: Send;

    /// This process's index in `0..processes()`.
    fn process(&self) -> usize;

    /// The number of processes.
    fn processes(&self) -> usize;

    /// The general entry: `collective` among the processes (a broadcast's `root` is a process;
    /// shapes as in [`Collective`], with processes for ranks), where every process must also
    /// pass the same `tag` — a word of the caller's own, agreed like the rest of the call: a
    /// hierarchical communicator describes its own call there, so that calls that differ above
    /// this step (a `Mean` reduced here as a `Sum`, another global root) are a
    /// [`Mismatch`](InterProcessError::Mismatch) too. A collective the engine does not offer is a
    /// local failure, shared like any other.
    fn collective(
        &self,
        collective: Collective,
        input: Result<Self::Buffer, LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError>;

    /// A status only, no data: `Ok` on every process if every process passed `Ok` (with the same
    /// `tag`), else the same [`Failed`](InterProcessError::Failed) (the lowest failing process's
    /// text) or [`Mismatch`](InterProcessError::Mismatch) everywhere. Deadlines as for the
    /// collectives.
    fn agree(
        &self,
        status: Result<(), LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError>;

    /// [`collective`](Self::collective) as call `identity` of a communicator sharing this engine:
    /// calls whose identities differ across processes never run as one collective — every
    /// process of that generation returns [`InterProcessError::Crossed`] — so any number of
    /// communicators may share an engine, from any threads, and get correct results or a typed
    /// error. The default ignores the identity: an engine that keeps it so is safe to share
    /// only among callers that keep one call order on every process.
    fn collective_as(
        &self,
        identity: CallIdentity,
        collective: Collective,
        input: Result<Self::Buffer, LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError> {
        let _ = identity;
        self.collective(collective, input, tag, deadline)
    }

    /// Gives communicator number `communicator` (agreed by every process, non-zero) a channel of
    /// its own on this engine, if the engine can, so that its calls never meet another
    /// communicator's: concurrent communicators then all get their results, where on a shared
    /// channel their calls may cross ([`InterProcessError::Crossed`]). A collective: every
    /// process calls it, in the same order as its other calls on this engine, waiting until
    /// `deadline`. The default opens nothing.
    fn open_channel(
        &self,
        communicator: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        let _ = (communicator, deadline);
        Ok(())
    }

    /// Closes the channel [`open_channel`](Self::open_channel) gave `communicator`, if any: the
    /// communicator is gone on this process (local; the default does nothing).
    fn close_channel(&self, communicator: u64) {
        let _ = communicator;
    }

    /// [`agree`](Self::agree) as call `identity` (see [`collective_as`](Self::collective_as)).
    fn agree_as(
        &self,
        identity: CallIdentity,
        status: Result<(), LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        let _ = identity;
        self.agree(status, tag, deadline)
    }

    /// The element-wise reduction of every process's `input` under `operation`, on every process
    /// (`Mean` divides the sum by [`processes`](Self::processes)).
    fn all_reduce(
        &self,
        input: Result<Self::Buffer, LocalFailure>,
        operation: ReduceOperation,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError> {
        self.collective(Collective::AllReduce(operation), input, 0, deadline)
    }

    /// Block `process()` (of `processes()` equal blocks) of the reduction of every process's
    /// `input`; the input's length must be a multiple of the process count.
    fn reduce_scatter(
        &self,
        input: Result<Self::Buffer, LocalFailure>,
        operation: ReduceOperation,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError> {
        self.collective(Collective::ReduceScatter(operation), input, 0, deadline)
    }

    /// Every process's `input` (all of one length), concatenated in process order.
    fn all_gather(
        &self,
        input: Result<Self::Buffer, LocalFailure>,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError> {
        self.collective(Collective::AllGather, input, 0, deadline)
    }

    /// `root`'s `input` on every process (the others' inputs give only the length and type).
    fn broadcast(
        &self,
        input: Result<Self::Buffer, LocalFailure>,
        root: usize,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError> {
        self.collective(Collective::Broadcast { root }, input, 0, deadline)
    }
}

/// A shared engine is an engine: several communicators (hierarchical communicators, each with its
/// own agreed identity, concurrently from any threads; or the application) may use one.
impl<I: InterProcess + ?Sized> InterProcess for Arc<I> {
    type Buffer = I::Buffer;

    fn process(&self) -> usize {
        I::process(self)
    }

    fn processes(&self) -> usize {
        I::processes(self)
    }

    fn collective(
        &self,
        collective: Collective,
        input: Result<Self::Buffer, LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError> {
        I::collective(self, collective, input, tag, deadline)
    }

    fn agree(
        &self,
        status: Result<(), LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        I::agree(self, status, tag, deadline)
    }

    fn collective_as(
        &self,
        identity: CallIdentity,
        collective: Collective,
        input: Result<Self::Buffer, LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<Self::Buffer, InterProcessError> {
        I::collective_as(self, identity, collective, input, tag, deadline)
    }

    fn open_channel(
        &self,
        communicator: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        I::open_channel(self, communicator, deadline)
    }

    fn close_channel(&self, communicator: u64) {
        I::close_channel(self, communicator)
    }

    fn agree_as(
        &self,
        identity: CallIdentity,
        status: Result<(), LocalFailure>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        I::agree_as(self, identity, status, tag, deadline)
    }
}
