//! [`MpiRuntime`]: MPI initialised at `MPI_THREAD_SERIALIZED`, finalised when the last handle
//! (the runtime or any communicator made from it) is dropped; and the process-wide lock that
//! serialises every MPI call this crate makes.

use crate::engine::communicator::{MpiInterProcess, Waiting};
use crate::engine::in_flight::mpi_error;
use crate::error::InterProcessError;
use mpi::Threading;
use mpi::environment::Universe;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use std::ffi::c_int;
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

    /// A new communicator over the processes that pass the same `color` (`None`: this process
    /// takes part in none and gets `None`), ordered by their rank in `MPI_COMM_WORLD`. Every
    /// process of the job must call this, in the same order as its other collective setup calls.
    /// The split itself is `MPI_Comm_split`, a blocking collective over the whole job (no
    /// deadline); the duplicate of the group's communicator and the waiting-mode check then
    /// honour `deadline` as [`communicator`](Self::communicator) does.
    pub fn split(
        &self,
        color: Option<u16>,
        waiting: Waiting,
        deadline: Option<Instant>,
    ) -> Result<Option<MpiInterProcess>, InterProcessError> {
        let world = SimpleCommunicator::world().as_raw();
        let key = c_int::try_from(self.process()).unwrap_or(c_int::MAX);
        // SAFETY: reads of two `const` globals of rsmpi's C shim, statically initialised to
        // MPI_UNDEFINED and MPI_COMM_NULL; nothing writes them.
        let (undefined, null) = unsafe { (ffi::RSMPI_UNDEFINED, ffi::RSMPI_COMM_NULL) };
        let color = color.map_or(undefined, c_int::from);
        let mut group = null;
        let code = {
            let _mpi = lock_mpi();
            // SAFETY: `world` is MPI_COMM_WORLD, live while the runtime is; `group` is a local
            // MPI writes the new handle (or MPI_COMM_NULL) into.
            unsafe { ffi::MPI_Comm_split(world, color, key, &mut group) }
        };
        if code != 0 {
            return Err(mpi_error("MPI_Comm_split", code));
        }
        if group == null {
            return Ok(None);
        }
        let communicator = MpiInterProcess::duplicating(self.clone(), group, waiting, deadline);
        let _mpi = lock_mpi();
        // SAFETY: `group` is the handle MPI_Comm_split just created for this call alone; the
        // duplicate completed (or failed) above, so no operation of ours is pending on it.
        unsafe { ffi::MPI_Comm_free(&mut group) };
        communicator.map(Some)
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
