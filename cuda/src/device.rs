//! [`CudaCollective`]: the CUDA executor, and its [`NativeCollectiveDevice`] implementation.
//!
//! | method     | what it queues (rank `r`'s work on its stream `S_r`)                             |
//! |------------|-----------------------------------------------------------------------------------|
//! | `prepare`  | records `ready` on the tensor's producer stream (no copy, no host wait)           |
//! | `begin`    | `S_r` waits `ready`; clones the input into a new output; takes scratch; records `free` |
//! | `exchange` | peer copies, then combine kernels or copies (see `exchange.rs`)                   |
//! | `finish`   | the Mean kernel; then completes every `S_r` and checks for asynchronous errors     |
//!
//! Every entry point (these four, construction, [`CudaCollective::synchronize`] and the
//! harnesses' upload and download) saves the calling thread's current context first and
//! restores it on return, on every path: the executor never leaves its contexts current on a
//! caller's thread (`context.rs`).

use crate::buffer::{self, DeviceBuffer, copy_async};
use crate::config::CudaConfig;
use crate::context::{SavedContext, complete};
use crate::error::{CudaError, DriverResultExt, Result};
use crate::kernels::{CombineOp, check_ptx_isa};
use crate::lane::{Lane, build_lanes, lane_of};
use crate::mapping::DeviceMap;
use crate::probe::{DriverInfo, probe};
use crate::tensor::{CudaPrepared, CudaTensor};
use crate::topology::Topology;
use crate::work::{CudaWork, RankWork};
use cudarc::driver::CudaStream;
use ruccl_core::ElementType;
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// The CUDA executor: real GPUs behind the verified core.
///
/// Cheap to clone (one `Arc`); every clone drives the same contexts and streams. Build it with a
/// [`DeviceMap`] saying which GPU each logical device runs on; several logical devices may share
/// a GPU.
#[derive(Clone)]
pub struct CudaCollective {
    shared: Arc<Shared>,
}

struct Shared {
    driver: DriverInfo,
    map: DeviceMap,
    lanes: BTreeMap<DeviceId, Arc<Lane>>,
    topology: Topology,
}

impl CudaCollective {
    /// An executor for `map` with the default configuration. Probes for the driver first: on a
    /// machine without one this is a typed error ([`CudaError::is_no_gpu`]), never a panic.
    pub fn new(map: DeviceMap) -> Result<Self> {
        Self::with_config(map, CudaConfig::default())
    }

    /// An executor for `map` with `config`. The kernels' PTX is checked against the driver's
    /// ISA ceiling before it is loaded ([`CudaError::PtxTooNew`]).
    pub fn with_config(map: DeviceMap, config: CudaConfig) -> Result<Self> {
        let driver = probe()?;
        let _restore = SavedContext::save();
        map.check_ordinals(driver.device_count)?;
        let ptx = config.kernels.ptx()?;
        check_ptx_isa(&ptx, &config.kernels.origin(), driver.version)?;
        let (lanes, topology) = build_lanes(&map, &config, &ptx)?;
        Ok(Self {
            shared: Arc::new(Shared {
                driver,
                map,
                lanes,
                topology,
            }),
        })
    }

    /// The driver the executor runs on.
    pub fn driver(&self) -> &DriverInfo {
        &self.shared.driver
    }

    /// The device map it was built with.
    pub fn device_map(&self) -> &DeviceMap {
        &self.shared.map
    }

    /// The logical devices, in increasing order.
    pub fn devices(&self) -> Vec<DeviceId> {
        self.shared.map.devices().collect()
    }

    /// Contexts and peer links, as set up.
    pub fn topology(&self) -> &Topology {
        &self.shared.topology
    }

    /// The stream of `device`: where collectives queue its work and where its tensors live.
    pub fn stream(&self, device: DeviceId) -> Result<Arc<CudaStream>> {
        let stream: &Arc<CudaStream> = &self.lane(device)?.stream;
        Ok(Arc::clone(stream))
    }

    /// Wait on the host until `device`'s stream has completed all queued work. An error an
    /// earlier drop deferred into the device's context is reported (as [`CudaError::Driver`]),
    /// but never instead of the wait.
    pub fn synchronize(&self, device: DeviceId) -> Result<()> {
        let lane = self.lane(device)?;
        let _restore = SavedContext::save();
        complete(&lane.stream).into_result(device)
    }

    /// A new tensor on `device` holding `bytes` (`len` elements of `element_type`, as they lie
    /// in device memory), copied from the host; returns once the copy is complete. For harnesses.
    pub(crate) fn upload_bytes(
        &self,
        device: DeviceId,
        element_type: ElementType,
        len: usize,
        bytes: &[u8],
    ) -> Result<CudaTensor> {
        let lane = self.lane(device)?;
        let _restore = SavedContext::save();
        let buffer = buffer::upload_bytes(&lane.stream, bytes, device)?;
        CudaTensor::from_buffer(buffer, element_type, len, device, lane.ordinal)
    }

    /// A tensor's bytes, copied to the host after all work queued on its stream. For harnesses.
    pub(crate) fn download_bytes(&self, tensor: &CudaTensor) -> Result<Vec<u8>> {
        let _restore = SavedContext::save();
        buffer::download_bytes(tensor.buffer(), tensor.device())
    }

    pub(crate) fn lane(&self, device: DeviceId) -> Result<&Arc<Lane>> {
        lane_of(&self.shared.lanes, device)
    }

    /// The lane of `device`, checked to be on the GPU a tensor's memory is on.
    fn lane_for(
        &self,
        rank: Option<usize>,
        device: DeviceId,
        tensor: &CudaTensor,
    ) -> Result<&Arc<Lane>> {
        if tensor.device() != device {
            return Err(CudaError::WrongDevice {
                rank,
                expected: device,
                actual: tensor.device(),
            });
        }
        let lane = self.lane(device)?;
        if tensor.ordinal() != lane.ordinal {
            return Err(CudaError::WrongGpu {
                rank,
                device,
                expected_ordinal: lane.ordinal,
                actual_ordinal: tensor.ordinal(),
            });
        }
        Ok(lane)
    }
}

impl fmt::Debug for CudaCollective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaCollective")
            .field("driver", &self.shared.driver)
            .field("map", &self.shared.map)
            .finish_non_exhaustive()
    }
}

/// Check a generation's shapes: one input per device, at least one rank, and every input of rank
/// 0's element type and length. Returns that type and length.
pub(crate) fn validate_shapes(
    devices: usize,
    inputs: &[(ElementType, usize)],
) -> Result<(ElementType, usize)> {
    if devices != inputs.len() {
        return Err(CudaError::WorldMismatch {
            devices,
            inputs: inputs.len(),
        });
    }
    let Some(&(element_type, len)) = inputs.first() else {
        return Err(CudaError::EmptyWorld);
    };
    for (rank, &(actual_type, actual_len)) in inputs.iter().enumerate() {
        if actual_type != element_type {
            return Err(CudaError::ElementTypeMismatch {
                rank,
                expected: element_type,
                actual: actual_type,
            });
        }
        if actual_len != len {
            return Err(CudaError::LengthMismatch {
                rank,
                expected: len,
                actual: actual_len,
            });
        }
    }
    if len.checked_mul(element_type.size()).is_none() {
        return Err(CudaError::TooLarge { len, element_type });
    }
    Ok((element_type, len))
}

impl NativeCollectiveDevice for CudaCollective {
    type Tensor = CudaTensor;
    type Prepared = CudaPrepared;
    type Work = CudaWork;
    type Error = CudaError;

    fn prepare(&self, tensor: CudaTensor, device: DeviceId) -> Result<CudaPrepared> {
        self.lane_for(None, device, &tensor)?;
        let _restore = SavedContext::save();
        let ready = tensor
            .stream()
            .record_event(None)
            .during("cuEventRecord (producer)", Some(device))?;
        Ok(CudaPrepared::new(tensor, ready))
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: &[CudaPrepared],
        operation: ReduceOperation,
    ) -> Result<CudaWork> {
        let shapes: Vec<_> = inputs
            .iter()
            .map(|input| (input.tensor().element_type(), input.tensor().len()))
            .collect();
        let (element_type, len) = validate_shapes(devices.len(), &shapes)?;
        // Every check before anything is queued.
        let lanes = devices
            .iter()
            .zip(inputs)
            .enumerate()
            .map(|(rank, (&device, input))| {
                self.lane_for(Some(rank), device, input.tensor()).cloned()
            })
            .collect::<Result<Vec<_>>>()?;
        let size = element_type.size();
        let bytes = len * size; // validate_shapes checked it does not overflow
        let scratch_bytes = len.div_ceil(devices.len()) * size;
        let _restore = SavedContext::save();

        let mut work = CudaWork {
            ranks: Vec::with_capacity(devices.len()),
            element_type,
            len,
            op: CombineOp::of(operation),
            synchronized: false,
        };
        // On an error below, `work` (and any buffer not yet in it) drops, completing the streams
        // that already have work queued before anything is freed.
        for (lane, input) in lanes.into_iter().zip(inputs) {
            let (stream, device) = (&lane.stream, lane.device);
            stream
                .wait(input.ready())
                .during("cuStreamWaitEvent (producer)", Some(device))?;
            let output = DeviceBuffer::alloc(stream, bytes, device)?;
            // SAFETY: distinct allocations (`copy_async` checks both hold `bytes` bytes); the
            // input's producer work is complete before the copy (S_r waited `ready`), and nothing
            // writes the new output until later steps queued after this copy on S_r. The input
            // lives until after `finish`, which completes S_r.
            unsafe {
                copy_async(
                    (&output, 0),
                    (input.tensor().buffer(), 0),
                    bytes,
                    stream,
                    device,
                )?;
            }
            let scratch = lane.take_scratch(scratch_bytes)?;
            let sent = lane
                .context()
                .new_event(None)
                .during("cuEventCreate", Some(device))?;
            let free = lane
                .context()
                .new_event(None)
                .during("cuEventCreate", Some(device))?;
            free.record(stream)
                .during("cuEventRecord (scratch free)", Some(device))?;
            work.ranks.push(RankWork {
                lane,
                output: Some(output),
                scratch: Some(scratch),
                retired: Vec::new(),
                sent,
                free,
            });
        }
        Ok(work)
    }

    fn elements(&self, work: &CudaWork) -> usize {
        work.len
    }

    fn exchange(&self, work: &mut CudaWork, ranges: &[Range<usize>], reduce: bool) -> Result<()> {
        let _restore = SavedContext::save();
        crate::exchange::exchange(work, ranges, reduce)
    }

    fn finish(&self, mut work: CudaWork, operation: ReduceOperation) -> Result<Vec<CudaTensor>> {
        let _restore = SavedContext::save();
        let world = work.world();
        let bytes = work.len * work.element_type.size(); // checked by `begin`
        if operation == ReduceOperation::Mean && world > 1 {
            let world_arg = u32::try_from(world).map_err(|_| CudaError::WorldTooLarge { world })?;
            for rank in &work.ranks {
                let output = rank.output.as_ref().ok_or(CudaError::WorkFinished)?;
                let data = output.span(0, bytes)?;
                // SAFETY: `data` is checked to hold `work.len` elements of the work's type, in
                // this lane's context; the kernel is queued on the lane's stream after every
                // earlier step's write of it, and nothing else touches it before the
                // synchronisation below.
                unsafe {
                    rank.lane.kernels.mean(
                        &rank.lane.stream,
                        rank.lane.device,
                        work.element_type,
                        data,
                        work.len,
                        world_arg,
                    )?;
                }
            }
        }
        work.synchronize()?;
        let mut outputs = Vec::with_capacity(world);
        for rank in &mut work.ranks {
            let output = rank.output.take().ok_or(CudaError::WorkFinished)?;
            outputs.push(CudaTensor::from_buffer(
                output,
                work.element_type,
                work.len,
                rank.lane.device,
                rank.lane.ordinal,
            )?);
            if let Some(scratch) = rank.scratch.take() {
                rank.lane.return_scratch(scratch);
            }
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_rejects_a_device_count_that_differs_from_the_inputs() {
        assert!(matches!(
            validate_shapes(3, &[(ElementType::F32, 4); 2]),
            Err(CudaError::WorldMismatch {
                devices: 3,
                inputs: 2
            })
        ));
    }

    #[test]
    fn begin_rejects_an_empty_world() {
        assert!(matches!(
            validate_shapes(0, &[]),
            Err(CudaError::EmptyWorld)
        ));
    }

    #[test]
    fn begin_names_the_first_rank_with_another_type_or_length() {
        let inputs = [
            (ElementType::BF16, 8),
            (ElementType::BF16, 8),
            (ElementType::F16, 8),
        ];
        assert!(matches!(
            validate_shapes(3, &inputs),
            Err(CudaError::ElementTypeMismatch {
                rank: 2,
                expected: ElementType::BF16,
                actual: ElementType::F16
            })
        ));
        let inputs = [(ElementType::I64, 8), (ElementType::I64, 7)];
        assert!(matches!(
            validate_shapes(2, &inputs),
            Err(CudaError::LengthMismatch {
                rank: 1,
                expected: 8,
                actual: 7
            })
        ));
    }

    #[test]
    fn begin_accepts_matching_shapes_including_empty_tensors() {
        let inputs = [(ElementType::I32, 0); 4];
        assert_eq!(
            validate_shapes(4, &inputs).ok(),
            Some((ElementType::I32, 0))
        );
    }

    #[test]
    fn begin_rejects_tensors_whose_byte_size_overflows() {
        let inputs = [(ElementType::F64, usize::MAX / 4)];
        assert!(matches!(
            validate_shapes(1, &inputs),
            Err(CudaError::TooLarge { .. })
        ));
    }

    #[test]
    fn constructing_without_a_driver_is_a_typed_error_not_a_panic() {
        let map = DeviceMap::logical(0, 2).expect("a valid map");
        match CudaCollective::new(map) {
            Ok(device) => println!("a GPU is present: {:?}", device.driver()),
            Err(error) => {
                assert!(error.is_no_gpu(), "unexpected error: {error}");
                assert!(
                    !crate::config::hardware_required(),
                    "{error}, and {} is set",
                    crate::config::REQUIRE_HARDWARE_ENV
                );
                println!("SKIP: {error}");
            }
        }
    }
}
