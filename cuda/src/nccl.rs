//! The NCCL baseline (feature `nccl`): the same all-reduce sweep through NCCL, one rank per GPU,
//! driven from one thread with `ncclGroupStart`/`ncclGroupEnd`, for the perf table's comparison
//! rows. NCCL refuses two ranks on one GPU, so it needs a machine with two or more.
//!
//! NCCL is loaded at run time like the driver: [`NcclBaseline::new`] checks that cudarc can load
//! it (it looks for `libnccl.so`; the pip wheel ships `libnccl.so.2`, so `gpu-check.sh` links
//! one to the other) before any NCCL call, so a missing library is a typed error, not a panic.

use crate::buffer::DeviceBuffer;
use crate::error::{CudaError, DriverResultExt};
use crate::host::{from_bytes, to_bytes};
use crate::probe::probe;
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{result, sys};
use ruccl_core::ElementType;
use ruccl_core::{DeviceId, ReduceOperation, RingSchedule};
use ruccl_sim::perf::pattern::{self, Expected};
use ruccl_sim::perf::{PerfRow, SweepConfig};
use std::ffi::c_int;
use std::sync::Arc;
use std::time::Instant;

/// Why the baseline could not run.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NcclBaselineError {
    /// The CUDA side failed.
    #[error(transparent)]
    Device(#[from] CudaError),
    /// cudarc cannot load the NCCL library.
    #[error(
        "NCCL is not available: {} could be loaded",
        crate::error::names(searched)
    )]
    NotFound {
        /// The library names tried.
        searched: Vec<String>,
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

/// One NCCL communicator per GPU, created with `ncclCommInitAll`.
pub struct NcclBaseline {
    comms: Vec<sys::ncclComm_t>,
    streams: Vec<Arc<CudaStream>>,
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
        probe()?;
        // SAFETY: only opens and closes the NCCL library candidates; no NCCL function is called.
        if !unsafe { sys::is_culib_present() } {
            return Err(NcclBaselineError::NotFound {
                searched: cudarc::get_lib_name_candidates("nccl"),
            });
        }
        let streams = ordinals
            .iter()
            .map(|&ordinal| {
                let context = CudaContext::new(ordinal).during("cuDevicePrimaryCtxRetain", None)?;
                context.new_stream().during("cuStreamCreate", None)
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        let devices: Vec<c_int> = ordinals.iter().map(|&o| o as c_int).collect();
        let mut comms = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `comms` has one slot per device and `devices` lists that many valid ordinals;
        // NCCL writes each slot once. Both vectors outlive the call.
        unsafe {
            result::comm_init_all(comms.as_mut_ptr(), devices.len() as c_int, devices.as_ptr())
        }
        .map_err(nccl("ncclCommInitAll"))?;
        Ok(Self { comms, streams })
    }

    /// NCCL's version code (e.g. `22805` for 2.28.5).
    pub fn version() -> Result<i32, NcclBaselineError> {
        result::get_nccl_version().map_err(nccl("ncclGetVersion"))
    }

    /// One row of `config`'s sweep at `bytes` per rank, as `ruccl_sim::perf::sweep` measures
    /// it: every rank uploads the sim harness's [`pattern::input`]; with `config.check`, one
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
        let buffers = self
            .streams
            .iter()
            .enumerate()
            .map(|(rank, stream)| {
                let values = to_bytes(&pattern::input(element_type, operation, rank, count));
                upload(stream, &values)
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        let mut wrong = None;
        if config.check {
            self.all_reduce(&buffers, element_type, operation, count)?;
            let expected = Expected::new(element_type, operation, world);
            let mut total = 0;
            for buffer in &buffers {
                let output = from_bytes(element_type, &download(buffer)?);
                total += expected.count_wrong(&output, count);
            }
            wrong = Some(total);
        }
        for _ in 0..config.warmup {
            self.all_reduce(&buffers, element_type, operation, count)?;
        }
        let start = Instant::now();
        for _ in 0..config.iterations {
            self.all_reduce(&buffers, element_type, operation, count)?;
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
        buffers: &[DeviceBuffer],
        element_type: ElementType,
        operation: ReduceOperation,
        count: usize,
    ) -> Result<(), NcclBaselineError> {
        result::group_start().map_err(nccl("ncclGroupStart"))?;
        let mut queued = Ok(());
        for ((comm, stream), buffer) in self.comms.iter().zip(&self.streams).zip(buffers) {
            let address = buffer.base_address() as *mut std::ffi::c_void;
            // SAFETY: `address` holds `count` elements of `element_type` on this comm's GPU
            // (allocated in its primary context, owned by `stream`); send and receive alias,
            // which NCCL supports (in place). The host waits for `stream` below before the
            // buffer can be reused or freed.
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
        for stream in &self.streams {
            stream.synchronize().during("cuStreamSynchronize", None)?;
        }
        Ok(())
    }
}

impl Drop for NcclBaseline {
    fn drop(&mut self) {
        for stream in &self.streams {
            crate::context::complete(stream).defer_into(stream.context());
        }
        for &comm in &self.comms {
            // SAFETY: each communicator came from `ncclCommInitAll` and is destroyed once, after
            // its stream is complete. Errors cannot be reported from `drop` and are ignored.
            let _ = unsafe { result::comm_destroy(comm) };
        }
    }
}

fn upload(stream: &Arc<CudaStream>, bytes: &[u8]) -> Result<DeviceBuffer, CudaError> {
    crate::buffer::upload_bytes(stream, bytes, DeviceId::new(0))
}

fn download(buffer: &DeviceBuffer) -> Result<Vec<u8>, CudaError> {
    crate::buffer::download_bytes(buffer, DeviceId::new(0))
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
