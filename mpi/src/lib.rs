//! # ruccl-mpi
//!
//! ruCCL beyond one machine: a [`HierarchicalCommunicator`] over every rank of every process of
//! a job, whose step between processes runs on MPI (rsmpi over the system's Open MPI), over host
//! memory.
//!
//! A process drives its local devices (one thread each) through the verified core's
//! [`NativeCommunicator`](ruccl_core::NativeCommunicator); processes join through an established
//! engine, never a home-made transport. An all-reduce is a local reduce-scatter, an
//! inter-process all-reduce of the shards, a local all-gather; reduce-scatter, all-gather and
//! broadcast compose the same way. Every collective agrees on a status across the job, so a
//! failure on any rank of any process reaches every rank of every process as one
//! [`HierarchicalError`] text, and a timeout anywhere is one [`HierarchicalError::TimedOut`]
//! everywhere.
//!
//! [`InterProcess`] is the step between processes as a trait (MPI here, NCCL later);
//! [`MpiInterProcess`] implements it: all-reduce, reduce-scatter, all-gather and broadcast of a
//! [`HostValues`] (`ruccl-host`'s, the values every harness adapter uploads and downloads) of
//! every [`ElementType`](ruccl_core::ElementType) under every
//! [`ReduceOperation`](ruccl_core::ReduceOperation). A device joins through [`StagingDevice`]
//! (with the `sim` feature, the simulated device and its fault decorator implement it), a
//! buffer through [`LayoutBuffer`].
//!
//! What MPI alone does not give, and the engine adds:
//!
//! - **Agreement across processes.** Every collective first agrees on a status: a process that
//!   failed locally still calls, with its error's text, and every process returns the same
//!   error (the lowest failing process's text); calls that differ across processes (kind,
//!   operation, type, length, root, the caller's tag) are one shared
//!   [`InterProcessError::Mismatch`], not undefined behaviour or a hang.
//! - **Deadlines.** Every wait of a call with a deadline is non-blocking MPI plus a test loop
//!   bounded by it. MPI cannot cancel a pending collective, so a timeout poisons the
//!   communicator (every later call fails fast with the same [`InterProcessError::TimedOut`])
//!   and the buffers MPI may still write are leaked, never freed. [`Waiting::Blocking`] uses
//!   MPI's blocking collectives for the data of generations where nobody passes a deadline.
//! - **One collective for small all-reduces.** The status travels in a fixed-size packet whose
//!   slot also carries an all-reduce of up to 64 bytes when nobody waits with a deadline.
//! - **Threads.** MPI is initialised at `MPI_THREAD_SERIALIZED`; any thread may call, and a
//!   process-wide lock ([`lock_mpi`]) serialises the MPI calls one at a time.
//! - **Sharing.** Every call carries its communicator's [`CallIdentity`]; hierarchical
//!   communicators sharing one engine get channels of their own on a `Deadlines` engine, and
//!   calls of different communicators that meet are [`InterProcessError::Crossed`], never a
//!   wrong result (`mpi/README.md`, "Communicators sharing an engine").
//! - **Launchers.** [`node_local_rank`] and [`local_devices`] give a process its devices on its
//!   machine, under `mpirun` with a hostfile or Slurm's `srun` (`mpi/README.md`).
//!
//! When a process dies, Open MPI 4.1 (no ULFM fault tolerance) does not report it to the
//! others: plain `mpirun` notices the exit and kills every other process of the job within
//! seconds; under `mpirun --enable-recovery` the survivors live on and each returns the same
//! [`InterProcessError::TimedOut`] at its own deadline (without one, it waits for ever).
//! `mpi/README.md` has the details and the measured behaviour.
//!
//! | module          | job                                                              |
//! |-----------------|------------------------------------------------------------------|
//! | `hierarchical`  | [`HierarchicalCommunicator`]: the phases, the meetings, the layouts |
//! | `inter_process` | the [`InterProcess`] trait and its contract                      |
//! | `engine`        | [`MpiRuntime`], [`MpiInterProcess`], [`Waiting`]: the trait on MPI |
//! | `agreement`     | the status words and the verdict every process reads from them   |
//! | `buffer`        | what MPI needs of a [`HostValues`]: pointers, packet bytes, `Mean` |
//! | `error`         | [`InterProcessError`], [`LocalFailure`], [`CallDescription`]      |
//! | `node`          | [`node_local_rank`], [`local_devices`]: a process's devices on its node |
//! | [`report`]      | the perf binaries' sizes and nccl-tests-style tables              |
//! | [`bookkeeping`] | the perf binaries' barriers and sums, bounded by their timeout    |

mod agreement;
pub mod bookkeeping;
mod buffer;
mod engine;
mod error;
mod hierarchical;
mod inter_process;
mod node;
pub mod report;

pub use engine::communicator::{MpiInterProcess, Waiting};
pub use engine::runtime::{MpiRuntime, lock_mpi};
pub use error::{CallDescription, CallIdentity, CollectiveKind, InterProcessError, LocalFailure};
pub use hierarchical::{
    HierarchicalCommunicator, HierarchicalError, HierarchicalOptions, LayoutBuffer, ProcessCall,
    StagingDevice,
};
pub use inter_process::InterProcess;
pub use node::{DeviceMapError, NodeLocal, local_devices, node_local_rank};
pub use ruccl_host::HostValues;
