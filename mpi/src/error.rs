//! The errors of the inter-process layer, and the description of one process's call that a
//! mismatch lists.

use ruccl_core::{ElementType, ReduceOperation};
use std::fmt;

/// Which collective a process called (the inter-process layer's own names until core v2's
/// `Collective` replaces them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveKind {
    /// In `n` per process, out `n`: the reduction over all processes.
    AllReduce,
    /// In `P·m` per process, out `m`: block `process` of the reduction.
    ReduceScatter,
    /// In `m` per process, out `P·m`: block `p` holds process `p`'s input.
    AllGather,
    /// In `n` per process (non-roots' contents ignored), out `n`: the root's input.
    Broadcast,
}

impl CollectiveKind {
    /// Every kind, in declaration order.
    pub const ALL: [CollectiveKind; 4] = [
        CollectiveKind::AllReduce,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllGather,
        CollectiveKind::Broadcast,
    ];

    /// The name nccl-tests uses for the collective, without `_perf`.
    pub const fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "all_reduce",
            CollectiveKind::ReduceScatter => "reduce_scatter",
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::Broadcast => "broadcast",
        }
    }
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one process asked for in one generation, as every process learns it when the calls
/// disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallDescription {
    /// The process's count of collectives on this communicator before this one.
    pub generation: u64,
    /// The collective.
    pub kind: CollectiveKind,
    /// The reduce operation, for the reducing collectives.
    pub operation: Option<ReduceOperation>,
    /// The element type of the input (`None` when the process failed locally before it had one).
    pub element: Option<ElementType>,
    /// Elements of the input.
    pub len: usize,
    /// The root, for a broadcast.
    pub root: Option<usize>,
    /// A word of the caller's own that every process must pass the same value of (0 unless
    /// given): a hierarchical communicator puts its own call there, so that calls which differ
    /// above the inter-process step differ here too.
    pub tag: u64,
}

impl fmt::Display for CallDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} #{}", self.kind, self.generation)?;
        if let Some(operation) = self.operation {
            write!(f, " {operation}")?;
        }
        if let Some(root) = self.root {
            write!(f, " root {root}")?;
        }
        match self.element {
            Some(element) => write!(f, " {} x {}", element, self.len)?,
            None => f.write_str(" (no input)")?,
        }
        if self.tag != 0 {
            write!(f, " tag {:#x}", self.tag)?;
        }
        Ok(())
    }
}

/// Which call of which communicator an inter-process call is: travels with the status of every
/// generation, so that calls of different communicators sharing one engine — or different
/// calls of one communicator, posted in different orders on different processes — never pair
/// up as one collective. A hierarchical communicator agrees on its `communicator` number at
/// creation; a direct caller of an engine passes none (all zeros) and must then keep its calls in
/// the same order on every process itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallIdentity {
    /// The communicator's number, the same on every process (0: none given).
    pub communicator: u64,
    /// The communicator's generation (its collectives before this one).
    pub generation: u64,
    /// The engine call within that generation (0, 1, …).
    pub step: u64,
}

impl fmt::Display for CallIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "communicator {} collective #{} step {}",
            self.communicator, self.generation, self.step
        )
    }
}

/// A failure a process met on its own before or while entering a collective (a device error, a
/// panic, a local mismatch, an invalid argument): the text every process will receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalFailure {
    message: String,
}

impl LocalFailure {
    /// A failure with this text (truncated to [`LocalFailure::MAX_BYTES`] when shared).
    pub fn new(message: impl fmt::Display) -> Self {
        LocalFailure {
            message: message.to_string(),
        }
    }

    /// The most bytes of a failure's text that reach the other processes; a longer text is cut
    /// at a character boundary and ends in `…`.
    pub const MAX_BYTES: usize = 4096;

    /// The text.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for LocalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A failure of an inter-process collective. Within one generation every process that returns an
/// error returns one with the same `Display` text, except where a deadline splits the job (see
/// [`InterProcessError::TimedOut`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InterProcessError {
    /// A process entered the collective with a [`LocalFailure`]; this is the lowest such
    /// process and its text. The communicator stays usable.
    #[error("process {process} failed: {message}")]
    Failed {
        /// The lowest process that failed.
        process: usize,
        /// Its failure's text.
        message: String,
    },
    /// The processes called different collectives (kind, operation, element type, length, root or
    /// generation differ). The communicator stays usable.
    #[error("processes called different collectives: {}", list_calls(.calls))]
    Mismatch {
        /// Each process's call, in process order.
        calls: Vec<CallDescription>,
    },
    /// Calls of different communicators that share the engine (or different calls of one
    /// communicator) met in one generation: the processes posted them in different orders, from
    /// concurrent threads. Nothing ran; every call that met another's fails with this variant
    /// (the processes of one such meeting with the same text). The communicator stays usable:
    /// the next generation of each communicator pairs up again.
    #[error("calls of different communicators met: {}", list_crossed(.calls))]
    Crossed {
        /// Each process's call, in process order.
        calls: Vec<CallIdentity>,
    },
    /// The caller's deadline passed before every process finished this generation. Sticky: the
    /// communicator is poisoned (a pending MPI collective cannot be cancelled) and every later
    /// call returns this same error. Processes that wait past their own deadlines for this
    /// generation report the same text; a process that had already finished before a peer gave
    /// up may have returned `Ok` — no finite exchange makes a deadline agreed, so treat a
    /// timeout as fatal for the job (see the crate docs).
    #[error(
        "inter-process collective #{generation} timed out before every process finished; the communicator is poisoned"
    )]
    TimedOut {
        /// The generation that timed out.
        generation: u64,
    },
    /// The processes created one communicator with different [`Waiting`](crate::Waiting) modes
    /// (blocking and non-blocking MPI collectives never match each other).
    #[error("processes created the communicator with different waiting modes: {modes}")]
    WaitingMismatch {
        /// The modes seen, e.g. `Blocking and Deadlines`.
        modes: String,
    },
    /// Creating the communicator did not finish before the deadline (a process never joined).
    #[error("creating the inter-process communicator timed out: a process never joined")]
    SetupTimedOut,
    /// An MPI call reported an error. Sticky, like a timeout: the communicator is poisoned.
    #[error("{call} failed with MPI error {code}: {message}; the communicator is poisoned")]
    Mpi {
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// `MPI_Error_string` of the code.
        message: String,
    },
    /// The engine broke one of its own invariants (a bug): the communicator is poisoned.
    #[error("internal error of the MPI engine: {message}; the communicator is poisoned")]
    Internal {
        /// What went wrong.
        message: String,
    },
    /// The MPI library does not provide `MPI_THREAD_SERIALIZED` (the rank that arrives last in a
    /// local generation calls MPI, so calls come from varying threads, one at a time).
    #[error("MPI provides thread support {provided}, ruCCL needs at least MPI_THREAD_SERIALIZED")]
    Threading {
        /// The level provided, as MPI names it.
        provided: &'static str,
    },
    /// MPI was initialised before [`MpiRuntime::initialize`](crate::MpiRuntime::initialize).
    #[error("MPI is already initialised; initialise it once, through MpiRuntime::initialize")]
    AlreadyInitialized,
}

impl InterProcessError {
    /// Whether the error poisons the communicator (every later call fails fast with it).
    pub fn is_sticky(&self) -> bool {
        matches!(
            self,
            InterProcessError::TimedOut { .. }
                | InterProcessError::SetupTimedOut
                | InterProcessError::Mpi { .. }
                | InterProcessError::Internal { .. }
        )
    }
}

fn list_crossed(calls: &[CallIdentity]) -> String {
    let calls: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(process, call)| format!("process {process}: {call}"))
        .collect();
    calls.join(", ")
}

fn list_calls(calls: &[CallDescription]) -> String {
    let calls: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(process, call)| format!("process {process}: {call}"))
        .collect();
    calls.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatch_text_lists_every_process_call_on_one_line() {
        let error = InterProcessError::Mismatch {
            calls: vec![
                CallDescription {
                    generation: 3,
                    kind: CollectiveKind::AllReduce,
                    operation: Some(ReduceOperation::Sum),
                    element: Some(ElementType::F32),
                    len: 4,
                    root: None,
                    tag: 0,
                },
                CallDescription {
                    generation: 3,
                    kind: CollectiveKind::Broadcast,
                    operation: None,
                    element: None,
                    len: 0,
                    root: Some(1),
                    tag: 0x2a,
                },
            ],
        };
        assert_eq!(
            error.to_string(),
            "processes called different collectives: process 0: all_reduce #3 sum float x 4, \
             process 1: broadcast #3 root 1 (no input) tag 0x2a"
        );
    }

    #[test]
    fn only_timeouts_and_mpi_errors_poison() {
        assert!(InterProcessError::TimedOut { generation: 0 }.is_sticky());
        assert!(
            !InterProcessError::Failed {
                process: 0,
                message: String::new()
            }
            .is_sticky()
        );
        assert!(!InterProcessError::Mismatch { calls: vec![] }.is_sticky());
    }
}
