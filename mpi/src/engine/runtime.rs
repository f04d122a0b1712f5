//! [`MpiRuntime`]: MPI initialised at `MPI_THREAD_SERIALIZED`, finalised when the last handle
//! (the runtime or any communicator made from it) is dropped; and the process-wide lock that
//! serialises every MPI call this crate makes.

use crate::engine::communicator::{MpiInterProcess, Waiting};
use crate::error::InterProcessError;
use mpi::Threading;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Serialises MPI calls. Held for one MPI call at a time (never across a wait), so a
/// communicator waiting for a slow peer never blocks another communicator's progress.
static MPI_LOCK: Mutex<()> = Mutex::new(());

/// Takes the process-wide MPI lock. Every MPI call this crate makes holds it; an application
/// that makes MPI calls of its own on other threads while ruCCL communicators are in use must
/// hold it too, because the runtime asks MPI only for `MPI_THREAD_SERIALIZED`.
pub fn lock_mpi() -> MutexGuard<'static, ()> {
    // The guarded value is `()`: a panic while it was held cannot have left it inconsistent.
    MPI_LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The MPI environment of this process.
///
/// ## Threading level
///
/// The runtime asks for `MPI_THREAD_SERIALIZED`: MPI may be called from any thread, never from
/// two at once. That is what a hierarchical communicator needs — the local rank that arrives
/// last calls MPI, so the thread changes from generation to generation (`FUNNELED`, main thread
/// only, would need a hand-off to a dedicated thread on every generation), and [`lock_mpi`]
/// serialises the calls. `MPI_THREAD_MULTIPLE` is not needed, and in Open MPI it turns on
/// locking inside the library for every call. Open MPI 4.1 (Debian 12) provides every level.
///
/// Cloning is cheap: clones share the environment, which is finalised when the last clone and
/// the last communicator made from it are dropped.
#[derive(Clone)]
pub struct MpiRuntime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    /// `Some` until dropped; dropping the universe calls `MPI_Finalize`.
    universe: Option<Universe>,
    process: usize,
    processes: usize,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        let _mpi = lock_mpi();
        drop(self.universe.take());
    }
}

impl MpiRuntime {
    /// Initialises MPI (`MPI_Init_thread` asking for `MPI_THREAD_SERIALIZED`).
    ///
    /// Fails if MPI was initialised already or provides less than `SERIALIZED`.
    pub fn initialize() -> Result<Self, InterProcessError> {
        let _mpi = lock_mpi();
        let (universe, provided) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or(InterProcessError::AlreadyInitialized)?;
        if provided < Threading::Serialized {
            drop(universe);
            return Err(InterProcessError::Threading {
                provided: threading_name(provided),
            });
        }
        let world = universe.world();
        let process = usize::try_from(world.rank()).unwrap_or(0);
        let processes = usize::try_from(world.size()).unwrap_or(1);
        Ok(MpiRuntime {
            inner: Arc::new(RuntimeInner {
                universe: Some(universe),
                process,
                processes,
            }),
        })
    }

    /// This process's rank in `MPI_COMM_WORLD`.
    pub fn process(&self) -> usize {
        self.inner.process
    }

    /// The size of `MPI_COMM_WORLD`.
    pub fn processes(&self) -> usize {
        self.inner.processes
    }

    /// A new communicator over every process of the job (`MPI_Comm_idup` of
    /// `MPI_COMM_WORLD`, then a check that every process asked for the same `waiting`, both
    /// waited for until `deadline`): every process must call this, in the same order as its
    /// other collective setup calls.
    pub fn communicator(
        &self,
        waiting: Waiting,
        deadline: Option<Instant>,
    ) -> Result<MpiInterProcess, InterProcessError> {
        MpiInterProcess::new(self.clone(), waiting, deadline)
    }

    /// `MPI_COMM_WORLD`, for MPI calls of the application's own (hold [`lock_mpi`] around
    /// them when ruCCL communicators may be in use on other threads).
    pub fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    /// Ends the whole job (`MPI_Abort` on `MPI_COMM_WORLD`): the response to a
    /// [`TimedOut`](InterProcessError::TimedOut) when the job cannot go on without the
    /// communicator. Open MPI's `mpirun` then kills every process and exits with `code`.
    pub fn abort_job(&self, code: i32) -> ! {
        let _mpi = lock_mpi();
        SimpleCommunicator::world().abort(code)
    }
}

/// MPI's name for a threading level.
fn threading_name(threading: Threading) -> &'static str {
    match threading {
        Threading::Single => "MPI_THREAD_SINGLE",
        Threading::Funneled => "MPI_THREAD_FUNNELED",
        Threading::Serialized => "MPI_THREAD_SERIALIZED",
        Threading::Multiple => "MPI_THREAD_MULTIPLE",
    }
}
