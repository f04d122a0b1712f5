//! The NCCL baseline (feature `nccl`): the same all-reduce sweeps through NCCL, one rank per GPU,
//! driven from one thread with `ncclGroupStart`/`ncclGroupEnd`, for the perf table's comparison
//! rows. NCCL refuses two ranks on one GPU, so it needs a machine with two or more.
//!
//! NCCL is loaded at run time like the driver: [`NcclBaseline::new`] checks that cudarc can load
//! it (it looks for `libnccl.so`; the pip wheel ships `libnccl.so.2`, so `gpu-check.sh` links
//! one to the other) before any NCCL call, so a missing library is a typed error, not a panic.
//! The buffers are the CUDA executor's own tensors (one rank per GPU, each in its GPU's primary
//! context), put there and read back through its harness adapter.

use crate::sweep::{Measured, PerfRow, SweepConfig};
use cudarc::driver::DriverError;
use cudarc::nccl::{result, sys};
use ruccl_core::{DeviceId, ElementType, LinkModel, Plan, ReduceOperation, TensorInfo};
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
    /// NCCL has no data type for this element type.
    #[error("NCCL has no data type for {0}")]
    UnsupportedType(ElementType),
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

    /// One row of `config`'s all-reduce sweep at `bytes` per rank, as
    /// [`sweep`](crate::sweep::sweep) measures it: every rank uploads the sim crate's
    /// [`pattern::input`]; `config.warmup` untimed and `config.iterations` timed all-reduces out
    /// of place (into a second buffer) and then in place; with checks, one all-reduce each
    /// compared with the reference (`#wrong`). The world is this baseline's (one rank per GPU),
    /// not `config.world`; `model` prices the plan the default link model resolves.
    pub fn measure(
        &self,
        config: &SweepConfig,
        bytes: usize,
    ) -> Result<PerfRow, NcclBaselineError> {
        let (element_type, operation) = (config.element_type, config.operation);
        let world = self.comms.len();
        let count = bytes / element_type.size();
        let upload = || {
            (0..world)
                .map(|rank| {
                    let values = pattern::input(element_type, operation, rank, count);
                    self.device.upload(DeviceId::new(rank as u32), &values)
                })
                .collect::<Result<Vec<CudaTensor>, CudaError>>()
        };
        let sends = upload()?;
        let receives = upload()?;
        let mut placements = Vec::with_capacity(2);
        for in_place in [false, true] {
            let targets = if in_place { &sends } else { &receives };
            for _ in 0..config.warmup {
                self.all_reduce(&sends, targets, element_type, operation, count)?;
            }
            let start = Instant::now();
            for _ in 0..config.iterations {
                self.all_reduce(&sends, targets, element_type, operation, count)?;
            }
            let elapsed = start.elapsed();
            let mut wrong = None;
            if config.checks > 0 {
                let fresh = upload()?;
                let targets = if in_place { &fresh } else { &receives };
                self.all_reduce(&fresh, targets, element_type, operation, count)?;
                let expected = Expected::new(element_type, operation, world);
                let mut total = 0;
                for tensor in targets {
                    total += expected.count_wrong(&self.device.download(tensor)?, count);
                }
                wrong = Some(total);
            }
            placements.push(Measured {
                time_us: elapsed.as_secs_f64() * 1e6 / config.iterations.max(1) as f64,
                wrong,
                waits: None,
            });
        }
        let input = TensorInfo {
            len: count,
            element: element_type,
        };
        let model = LinkModel::default();
        let plan =
            Plan::with_model(config.collective(), config.algorithm, world, input, &model).ok();
        Ok(PerfRow {
            collective: config.collective(),
            element_type,
            world,
            bytes: count * element_type.size(),
            count,
            root: -1,
            out_of_place: placements[0],
            in_place: placements[1],
            asked: None,
            algorithm: None,
            traffic_ratio: None,
            model_us: plan.map(|plan| model.plan_time(&plan, element_type.size()) * 1e6),
            schedule: None,
            bound: None,
        })
    }

    /// One all-reduce from every rank's `sends` buffer into its `receives` buffer (the same
    /// tensors: in place), completed on the host.
    fn all_reduce(
        &self,
        sends: &[CudaTensor],
        receives: &[CudaTensor],
        element_type: ElementType,
        operation: ReduceOperation,
        count: usize,
    ) -> Result<(), NcclBaselineError> {
        result::group_start().map_err(nccl("ncclGroupStart"))?;
        let nccl_type = data_type(element_type)?;
        let mut queued = Ok(());
        for ((comm, send), receive) in self.comms.iter().zip(sends).zip(receives) {
            let source = send.device_address() as *mut std::ffi::c_void;
            let target = receive.device_address() as *mut std::ffi::c_void;
            let stream = send.stream();
            // SAFETY: both addresses hold `count` elements of `element_type` on this comm's GPU
            // (allocated in its primary context, ordered on `stream`); they may alias, which
            // NCCL supports (in place). The host waits for `stream` below before either tensor
            // can be reused or freed.
            queued = unsafe {
                result::all_reduce(
                    source,
                    target,
                    count,
                    nccl_type,
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
        for tensor in sends {
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

fn data_type(element_type: ElementType) -> Result<sys::ncclDataType_t, NcclBaselineError> {
    Ok(match element_type {
        ElementType::F32 => sys::ncclDataType_t::ncclFloat32,
        ElementType::F64 => sys::ncclDataType_t::ncclFloat64,
        ElementType::F16 => sys::ncclDataType_t::ncclFloat16,
        ElementType::BF16 => sys::ncclDataType_t::ncclBfloat16,
        ElementType::I32 => sys::ncclDataType_t::ncclInt32,
        ElementType::I64 => sys::ncclDataType_t::ncclInt64,
        ElementType::I8 => sys::ncclDataType_t::ncclInt8,
        ElementType::U8 => sys::ncclDataType_t::ncclUint8,
        ElementType::U32 => sys::ncclDataType_t::ncclUint32,
        ElementType::U64 => sys::ncclDataType_t::ncclUint64,
        other => return Err(NcclBaselineError::UnsupportedType(other)),
    })
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
            data_type(ElementType::BF16).unwrap(),
            sys::ncclDataType_t::ncclBfloat16
        );
        assert_eq!(
            data_type(ElementType::U64).unwrap(),
            sys::ncclDataType_t::ncclUint64
        );
        assert_eq!(reduce_op(ReduceOperation::Mean), sys::ncclRedOp_t::ncclAvg);
    }
}
