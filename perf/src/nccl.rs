//! The NCCL baseline (feature `nccl`): the same all-reduce sweep through NCCL, one rank per GPU,
//! driven from one thread with `ncclGroupStart`/`ncclGroupEnd`, for the perf table's comparison
//! rows. NCCL refuses two ranks on one GPU, so it needs a machine with two or more.
//!
//! NCCL is loaded at run time like the driver: [`NcclBaseline::new`] checks that cudarc can load
//! it (it looks for `libnccl.so`; the pip wheel ships `libnccl.so.2`, so `gpu-check.sh` links
//! one to the other) before any NCCL call, so a missing library is a typed error, not a panic.
//! The buffers are the CUDA executor's own tensors (one rank per GPU, each in its GPU's primary
//! context), put there and read back through its harness adapter.

use crate::sweep::{PerfRow, SweepConfig};
use cudarc::driver::DriverError;
use cudarc::nccl::{result, sys};
use ruccl_core::{DeviceId, ElementType, ReduceOperation, RingSchedule};
use ruccl_cuda::{CudaCollective, CudaConfig, CudaError, CudaTensor, DeviceMap};
use ruccl_sim::HostTensors;
use ruccl_sim::pattern::{self, Expected};
use std::ffi::c_int;
use std::time::Instant;

/// Why the baseline could not run.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NcclBaselineError {
    /// The CUDA side failed.
    #[error(transparent)]
    Device(#[from] CudaError),
    /// cudarc cannot load the NCCL library.
    #[error("NCCL is not available: none of {} could be loaded", searched.join(", "))]
    NotFound {
        /// The library names tried.
        searched: Vec<String>,
    },
    /// Waiting for a GPU's stream failed.
    #[error("waiting for the stream of GPU {ordinal} failed: {error:?}")]
    Synchronize {
        /// The GPU.
        ordinal: usize,
        /// The driver's error.
        error: DriverError,
    },
    /// NCCL needs one rank per GPU, and at least two.
    #[error("the NCCL baseline needs two or more distinct GPUs, got {gpus}")]
    TooFewGpus {
        /// The number of GPUs given.
        gpus: usize,
    },
    /// An NCCL call failed.
    #[error("NCCL call {call} failed: {code:?}")]
    Nccl {
        /// The call.
        call: &'static str,
        /// NCCL's result code.
        code: sys::ncclResult_t,
    },
}

fn nccl(call: &'static str) -> impl Fn(result::NcclError) -> NcclBaselineError {
    move |error| NcclBaselineError::Nccl {
        call,
        code: error.0,
    }
}

/// One NCCL communicator per GPU, created with `ncclCommInitAll`, over the CUDA executor's
/// devices (rank `r` on device `r`, on the `r`-th GPU given).
pub struct NcclBaseline {
    comms: Vec<sys::ncclComm_t>,
    device: CudaCollective,
}

impl NcclBaseline {
    /// Communicators over `ordinals` (distinct GPUs, at least two), in rank order.
    pub fn new(ordinals: &[usize]) -> Result<Self, NcclBaselineError> {
        let mut distinct = ordinals.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        if ordinals.len() < 2 || distinct.len() != ordinals.len() {
            return Err(NcclBaselineError::TooFewGpus {
                gpus: distinct.len(),
            });
        }
        let map = DeviceMap::new(
            ordinals
                .iter()
                .enumerate()
                .map(|(rank, &ordinal)| (DeviceId::new(rank as u32), ordinal)),
        )
        .map_err(CudaError::from)?;
        // Probes the driver first: no GPU is a typed error, not a panic in cudarc.
        let device = CudaCollective::with_config(map, CudaConfig::from_env())?;
        // SAFETY: only opens and closes the NCCL library candidates; no NCCL function is called.
        if !unsafe { sys::is_culib_present() } {
            return Err(NcclBaselineError::NotFound {
                searched: cudarc::get_lib_name_candidates("nccl"),
            });
        }
        let devices: Vec<c_int> = ordinals.iter().map(|&o| o as c_int).collect();
        let mut comms = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `comms` has one slot per device and `devices` lists that many valid ordinals;
        // NCCL writes each slot once. Both vectors outlive the call.
        unsafe {
            result::comm_init_all(comms.as_mut_ptr(), devices.len() as c_int, devices.as_ptr())
        }
        .map_err(nccl("ncclCommInitAll"))?;
        Ok(Self { comms, device })
    }

    /// NCCL's version code (e.g. `22805` for 2.28.5).
    pub fn version() -> Result<i32, NcclBaselineError> {
        result::get_nccl_version().map_err(nccl("ncclGetVersion"))
    }

    /// One row of `config`'s sweep at `bytes` per rank, as [`sweep`](crate::sweep::sweep) measures
    /// it: every rank uploads the sim crate's [`pattern::input`]; with `config.check`, one
    /// all-reduce whose result is compared with the reference (`#wrong`); then `config.warmup`
    /// untimed and `config.iterations` timed all-reduces, in place. The world is this baseline's
    /// (one rank per GPU), not `config.world`; `model` prices the ring schedule with
    /// `config.link_model`, as the sweep does without a traffic ledger.
    pub fn measure(
        &self,
        config: &SweepConfig,
        bytes: usize,
    ) -> Result<PerfRow, NcclBaselineError> {
        let (element_type, operation) = (config.element_type, config.operation);
        let world = self.comms.len();
        let count = bytes / element_type.size();
        let tensors = (0..world)
            .map(|rank| {
                let values = pattern::input(element_type, operation, rank, count);
                self.device.upload(DeviceId::new(rank as u32), &values)
            })
            .collect::<Result<Vec<CudaTensor>, CudaError>>()?;
        let mut wrong = None;
        if config.check {
            self.all_reduce(&tensors, element_type, operation, count)?;
            let expected = Expected::new(element_type, operation, world);
            let mut total = 0;
            for tensor in &tensors {
                total += expected.count_wrong(&self.device.download(tensor)?, count);
            }
            wrong = Some(total);
        }
        for _ in 0..config.warmup {
            self.all_reduce(&tensors, element_type, operation, count)?;
        }
        let start = Instant::now();
        for _ in 0..config.iterations {
            self.all_reduce(&tensors, element_type, operation, count)?;
        }
        let elapsed = start.elapsed();
        let model_seconds = config
            .link_model
            .price_schedule(&RingSchedule::new(world, count), element_type.size());
        Ok(PerfRow {
            bytes: count * element_type.size(),
            count,
            element_type,
            operation,
            world,
            time_us: elapsed.as_secs_f64() * 1e6 / config.iterations.max(1) as f64,
            wrong,
            traffic_ratio: None,
            model_us: model_seconds * 1e6,
        })
    }

    /// One in-place all-reduce over every rank's buffer, completed on the host.
    fn all_reduce(
        &self,
        tensors: &[CudaTensor],
        element_type: ElementType,
        operation: ReduceOperation,
        count: usize,
    ) -> Result<(), NcclBaselineError> {
        result::group_start().map_err(nccl("ncclGroupStart"))?;
        let mut queued = Ok(());
        for (comm, tensor) in self.comms.iter().zip(tensors) {
            let address = tensor.device_address() as *mut std::ffi::c_void;
            let stream = tensor.stream();
            // SAFETY: `address` holds `count` elements of `element_type` on this comm's GPU
            // (allocated in its primary context, ordered on `stream`); send and receive alias,
            // which NCCL supports (in place). The host waits for `stream` below before the
            // tensor can be reused or freed.
            queued = unsafe {
                result::all_reduce(
                    address,
                    address,
                    count,
                    data_type(element_type),
                    reduce_op(operation),
                    *comm,
                    stream.cu_stream() as sys::cudaStream_t,
                )
            }
            .map(|_| ())
            .map_err(nccl("ncclAllReduce"));
            if queued.is_err() {
                break;
            }
        }
        let ended = result::group_end()
            .map(|_| ())
            .map_err(nccl("ncclGroupEnd"));
        queued?;
        ended?;
        for tensor in tensors {
            tensor
                .stream()
                .synchronize()
                .map_err(|error| NcclBaselineError::Synchronize {
                    ordinal: tensor.ordinal(),
                    error,
                })?;
        }
        Ok(())
    }
}

impl Drop for NcclBaseline {
    fn drop(&mut self) {
        for &comm in &self.comms {
            // SAFETY: each communicator came from `ncclCommInitAll` and is destroyed once; every
            // all-reduce on it was waited for. Errors cannot be reported from `drop` and are
            // ignored.
            let _ = unsafe { result::comm_destroy(comm) };
        }
    }
}

fn data_type(element_type: ElementType) -> sys::ncclDataType_t {
    match element_type {
        ElementType::F32 => sys::ncclDataType_t::ncclFloat32,
        ElementType::F64 => sys::ncclDataType_t::ncclFloat64,
        ElementType::F16 => sys::ncclDataType_t::ncclFloat16,
        ElementType::BF16 => sys::ncclDataType_t::ncclBfloat16,
        ElementType::I32 => sys::ncclDataType_t::ncclInt32,
        ElementType::I64 => sys::ncclDataType_t::ncclInt64,
    }
}

fn reduce_op(operation: ReduceOperation) -> sys::ncclRedOp_t {
    match operation {
        ReduceOperation::Sum => sys::ncclRedOp_t::ncclSum,
        ReduceOperation::Mean => sys::ncclRedOp_t::ncclAvg,
        ReduceOperation::Product => sys::ncclRedOp_t::ncclProd,
        ReduceOperation::Min => sys::ncclRedOp_t::ncclMin,
        ReduceOperation::Max => sys::ncclRedOp_t::ncclMax,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_needs_two_distinct_gpus() {
        assert!(matches!(
            NcclBaseline::new(&[0]),
            Err(NcclBaselineError::TooFewGpus { gpus: 1 })
        ));
        assert!(matches!(
            NcclBaseline::new(&[1, 1]),
            Err(NcclBaselineError::TooFewGpus { gpus: 1 })
        ));
    }

    #[test]
    fn every_operation_and_type_maps_to_its_nccl_counterpart() {
        assert_eq!(
            data_type(ElementType::BF16),
            sys::ncclDataType_t::ncclBfloat16
        );
        assert_eq!(reduce_op(ReduceOperation::Mean), sys::ncclRedOp_t::ncclAvg);
    }
}
