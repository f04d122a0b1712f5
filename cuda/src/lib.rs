//! # ruccl-cuda
//!
//! The CUDA executor of ruCCL: a [`NativeCollectiveDevice`](ruccl_core::NativeCollectiveDevice)
//! on real GPUs, through [cudarc](https://docs.rs/cudarc) 0.19 with CUDA 12.0 bindings loaded at
//! run time (so it runs on CUDA 12.x and 13.x drivers). The verified core drives it with a plan per generation (every collective, every
//! algorithm); it only moves ranges between ranks (a peer copy per transfer, a local copy for a
//! transfer to its own rank) and folds elements locally (one kernel per segment, in the
//! contract's order), ordering everything with events, and recycles its device memory (a buffer
//! cache per logical device).
//!
//! With the `harness` feature (host values in and out, as tests and tools do):
//!
//! ```no_run
//! # #[cfg(feature = "harness")] {
//! use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation};
//! use ruccl_cuda::{CudaCollective, DeviceMap};
//! use ruccl_host::{HostTensors, HostValues};
//!
//! // Four logical ranks on GPU 0 (or `DeviceMap::one_per_gpu(n)` for one rank per GPU).
//! let device = CudaCollective::new(DeviceMap::logical(0, 4)?)?;
//! let communicator = NativeCommunicator::new(device.devices(), device.clone())?;
//! std::thread::scope(|scope| {
//!     for (rank, id) in device.devices().into_iter().enumerate() {
//!         let (device, communicator) = (&device, &communicator);
//!         scope.spawn(move || {
//!             let tensor = device.upload(id, &HostValues::F32(vec![rank as f32; 1024]))?;
//!             let sum = communicator.all_reduce(rank, tensor, ReduceOperation::Sum)?;
//!             Ok::<_, Box<dyn std::error::Error + Send + Sync>>(device.download(&sum)?)
//!         });
//!     }
//! });
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! | module       | job                                                                    |
//! |--------------|------------------------------------------------------------------------|
//! | `probe`      | find the driver without panicking ([`probe()`])                        |
//! | `mapping`    | [`DeviceMap`]: logical device → GPU ordinal                            |
//! | `config`     | [`CudaConfig`]: kernels, contexts, peer access, in place, cache, model |
//! | `context`    | the caller's current context saved and restored; waits never skipped   |
//! | `lane`       | one logical device's context, stream and kernels; peer access          |
//! | `kernels`    | the CUDA C source, the embedded PTX, launches ([`KernelSource`])       |
//! | `buffer`     | device allocations and device-to-device (peer) copies                  |
//! | `cache`      | per-device buffer pools: steady state allocates nothing ([`CacheStats`]) |
//! | `tensor`     | [`CudaTensor`], [`CudaPrepared`]                                       |
//! | `device`     | [`CudaCollective`] and its `prepare`/`begin`/`finish`                  |
//! | `schedule`   | one step, on the core's layout: staging, copies, folds (no CUDA)       |
//! | `exchange`   | one step queued: the stream/event ordering argument                    |
//! | `work`       | [`CudaWork`]: a generation's buffers and events                        |
//! | `bandwidth`  | [`CopyBandwidth`]: a GPU's own device-to-device copy baseline          |
//! | `host`       | feature `harness`: upload/download for harnesses (`HostTensors`)        |
//! | `topology`   | [`Topology`]: what was set up, for reports                             |
//! | `error`      | [`CudaError`]                                                          |
//!
//! Machines without a GPU or CUDA toolkit build this crate and run its tests: construction
//! returns a typed error ([`CudaError::is_no_gpu`]), and the tests that need a GPU are
//! `#[ignore]`d (run them with `--include-ignored`), so they count as ignored, not passed.

mod bandwidth;
mod buffer;
mod cache;
mod config;
mod context;
mod device;
mod error;
mod exchange;
#[cfg(feature = "harness")]
mod host;
pub mod kernels;
mod lane;
mod mapping;
mod probe;
mod schedule;
mod tensor;
mod topology;
mod work;

pub use bandwidth::CopyBandwidth;
pub use cache::{CacheStats, MAX_CACHED_BUFFERS};
pub use config::{
    ContextPolicy, CudaConfig, DEFAULT_CACHE_BYTES, IN_PLACE_ENV, REQUIRE_HARDWARE_ENV,
    hardware_required,
};
pub use device::CudaCollective;
pub use error::{CudaError, DriverCode, Result};
pub use kernels::KernelSource;
pub use mapping::{DeviceMap, DeviceMapError};
pub use probe::{DriverInfo, REQUIRED_DRIVER_VERSION, driver_candidates, probe};
pub use tensor::{CudaPrepared, CudaTensor};
pub use topology::{ContextKind, LaneInfo, PeerLink, PeerStatus, Topology};
pub use work::CudaWork;
