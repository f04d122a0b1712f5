//! [`CudaCollective`]: the CUDA executor, and its [`NativeCollectiveDevice`] implementation.
//!
//! | method     | what it does (rank `r`'s work is queued on its stream `S_r`)                      |
//! |------------|------------------------------------------------------------------------------------|
//! | `prepare`  | checks the tensor's device; captures its producer stream if it is not `S_r`       |
//! | `describe` | the tensor's length and element type                                               |
//! | `begin`    | checks everything first; then per rank: the working buffer — the input itself (in place) or one from the pool holding the input at its placement (one copy) —, scratch and staging sized for the plan's largest step, two events |
//! | `exchange` | staging copies, a copy per transfer (peer or local), a fold per (receiver, segment) (`exchange.rs`) |
//! | `finish`   | the Mean division on each output range; output copies where a rank's output is part of its buffer; completes every `S_r` and checks for asynchronous errors; the outputs, in rank order |
//!
//! Device memory comes from each logical device's pool and goes back to it (`cache.rs`): from
//! the second generation of a shape on, nothing is allocated.
//!
//! Every entry point (these four, construction, [`CudaCollective::synchronize`] and the
//! harnesses' upload and download) saves the calling thread's current context first and
//! restores it on return, on every path: the executor never leaves its contexts current on a
//! caller's thread (`context.rs`).

#[cfg(feature = "harness")]
use crate::buffer;
use crate::buffer::copy_async;
use crate::cache::CacheStats;
use crate::config::CudaConfig;
use crate::context::{SavedContext, Scoped, complete};
use crate::error::{CudaError, DriverResultExt, Result};
use crate::kernels::{KernelSource, check_ptx_isa, nvrtc_available, supports, supports_type};
use crate::lane::{Lane, build_lanes, lane_of};
use crate::mapping::DeviceMap;
use crate::probe::{DriverInfo, probe};
use crate::schedule::generation_buffers;
use crate::tensor::{CudaPrepared, CudaTensor};
use crate::topology::Topology;
use crate::work::{CudaWork, RankWork};
use cudarc::driver::CudaStream;
use ruccl_core::{
    DeviceId, ElementType, LinkModel, NativeCollectiveDevice, Plan, ReduceOperation, Step,
    TensorInfo,
};
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
    config: CudaConfig,
    lanes: BTreeMap<DeviceId, Arc<Lane>>,
    topology: Topology,
    /// Where the loaded kernels came from ([`CudaCollective::kernel_origin`]).
    kernel_origin: String,
}

/// Whether `error` is the driver refusing PTX: an ISA newer than it accepts, or a failed
/// `cuModuleLoadData` — what the NVRTC fallback may repair.
fn refused_ptx(error: &CudaError) -> bool {
    matches!(
        error,
        CudaError::PtxTooNew { .. }
            | CudaError::Driver {
                call: "cuModuleLoadData",
                ..
            }
    )
}

impl CudaCollective {
    /// An executor for `map` with the default configuration. Probes for the driver first: on a
    /// machine without one this is a typed error ([`CudaError::is_no_gpu`]), never a panic.
    pub fn new(map: DeviceMap) -> Result<Self> {
        Self::with_config(map, CudaConfig::default())
    }

    /// An executor for `map` with `config`. The kernels' PTX is checked against the driver's
    /// ISA ceiling before it is loaded ([`CudaError::PtxTooNew`]), then loaded by the driver
    /// (`cuModuleLoadData`; no NVRTC). Only where the driver refuses the *embedded* PTX (too new,
    /// or `cuModuleLoadData` fails) and NVRTC is loadable are the kernels compiled at run time
    /// instead — a fallback [`CudaCollective::kernel_origin`] names; without NVRTC the refusal is
    /// the error.
    pub fn with_config(map: DeviceMap, config: CudaConfig) -> Result<Self> {
        let driver = probe()?;
        let _restore = SavedContext::save();
        map.check_ordinals(driver.device_count)?;
        let (lanes, topology, kernel_origin) = match Self::load(&map, &config, driver.version) {
            Err(error) if config.kernels == KernelSource::Embedded && refused_ptx(&error) => {
                if !nvrtc_available() {
                    return Err(error);
                }
                let fallback = config.clone().with_kernels(KernelSource::Nvrtc);
                let (lanes, topology, origin) = Self::load(&map, &fallback, driver.version)?;
                let origin =
                    format!("{origin} (fallback: the driver refused the embedded PTX: {error})");
                (lanes, topology, origin)
            }
            other => other?,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                driver,
                map,
                config,
                lanes,
                topology,
                kernel_origin,
            }),
        })
    }

    /// Get `config`'s PTX, check its ISA against the driver's, and build the lanes with it.
    fn load(
        map: &DeviceMap,
        config: &CudaConfig,
        driver_version: i32,
    ) -> Result<(BTreeMap<DeviceId, Arc<Lane>>, Topology, String)> {
        let ptx = config.kernels.ptx()?;
        let origin = config.kernels.origin();
        check_ptx_isa(&ptx, &origin, driver_version)?;
        let (lanes, topology) = build_lanes(map, config, &ptx)?;
        Ok((lanes, topology, origin))
    }

    /// Where the loaded kernels came from: `embedded PTX`, a PTX file, `NVRTC x.y`, or NVRTC
    /// with the reason it replaced the embedded PTX (the fallback).
    pub fn kernel_origin(&self) -> &str {
        &self.shared.kernel_origin
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

    /// The configuration it was built with.
    pub fn config(&self) -> &CudaConfig {
        &self.shared.config
    }

    /// Whether `begin` works in the inputs' own allocations where the plan allows
    /// ([`CudaConfig::in_place`]).
    pub fn in_place(&self) -> bool {
        self.shared.config.in_place
    }

    /// What `device`'s buffer cache has done so far and holds now (`cache.rs`): after the first
    /// generation of a shape, further generations of it add hits and no misses.
    pub fn cache_stats(&self, device: DeviceId) -> Result<CacheStats> {
        Ok(self.lane(device)?.pool.stats())
    }

    /// Free every idle cached buffer of every logical device (each after its stream is
    /// complete). Buffers in use stay; they return to the cache when released.
    pub fn trim_caches(&self) {
        let _restore = SavedContext::save();
        for lane in self.shared.lanes.values() {
            lane.pool.trim();
        }
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
    /// A type without kernels is [`CudaError::UnsupportedElementType`], before anything is
    /// allocated.
    #[cfg(feature = "harness")]
    pub(crate) fn upload_bytes(
        &self,
        device: DeviceId,
        element_type: ElementType,
        len: usize,
        bytes: &[u8],
    ) -> Result<CudaTensor> {
        if !supports_type(element_type) {
            return Err(CudaError::UnsupportedElementType { element_type });
        }
        let lane = self.lane(device)?;
        let _restore = SavedContext::save();
        let buffer = lane.take_buffer(bytes.len())?;
        let buffer = buffer::upload_bytes(buffer, &lane.stream, bytes, device)?;
        CudaTensor::from_buffer(buffer, element_type, len, device, lane.ordinal)
    }

    /// A tensor's bytes, copied to the host after all work queued on its stream. For harnesses.
    #[cfg(feature = "harness")]
    pub(crate) fn download_bytes(&self, tensor: &CudaTensor) -> Result<Vec<u8>> {
        let _restore = SavedContext::save();
        buffer::download_bytes(tensor.buffer(), tensor.device())
    }

    pub(crate) fn lane(&self, device: DeviceId) -> Result<&Arc<Lane>> {
        lane_of(&self.shared.lanes, device)
    }

    /// Every lane, in device order.
    pub(crate) fn lanes(&self) -> impl Iterator<Item = &Arc<Lane>> {
        self.shared.lanes.values()
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

/// Check a generation's inputs against the plan's input length: at least one rank, every
/// input of rank 0's element type and of `input_len` elements. Returns the element type.
pub(crate) fn validate_shapes(
    input_len: usize,
    inputs: &[(ElementType, usize)],
) -> Result<ElementType> {
    let Some(&(element_type, _)) = inputs.first() else {
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
        if actual_len != input_len {
            return Err(CudaError::LengthMismatch {
                rank,
                expected: input_len,
                actual: actual_len,
            });
        }
    }
    Ok(element_type)
}

/// Check that every rank's input and output lie within its working buffer, and that the buffer's
/// size in bytes fits the address space. Returns the buffer's size in bytes.
pub(crate) fn validate_layout(plan: &Plan, element_type: ElementType) -> Result<usize> {
    let (buffer_len, input_len) = (plan.buffer_len(), plan.input_len());
    let out_of_bounds = |rank, what, range: Range<usize>| CudaError::LayoutOutOfBounds {
        rank,
        what,
        range,
        buffer_len,
    };
    for rank in 0..plan.world() {
        let placement = plan.placement(rank);
        let input = placement..placement.saturating_add(input_len);
        if placement
            .checked_add(input_len)
            .is_none_or(|end| end > buffer_len)
        {
            return Err(out_of_bounds(rank, "input", input));
        }
        let output = plan.output(rank);
        if output.start > output.end || output.end > buffer_len {
            return Err(out_of_bounds(rank, "output", output));
        }
    }
    buffer_len
        .checked_mul(element_type.size())
        .ok_or(CudaError::TooLarge {
            len: buffer_len,
            element_type,
        })
}

impl NativeCollectiveDevice for CudaCollective {
    type Tensor = CudaTensor;
    type Prepared = CudaPrepared;
    type Work = CudaWork;
    type Error = CudaError;

    fn prepare(&self, tensor: CudaTensor, device: DeviceId) -> Result<CudaPrepared> {
        let lane = self.lane_for(None, device, &tensor)?;
        if Arc::ptr_eq(tensor.stream(), &lane.stream) {
            // The collective is queued on the producer stream itself: stream order is the
            // capture, and no event is needed.
            return Ok(CudaPrepared::new(tensor, None));
        }
        let _restore = SavedContext::save();
        let ready = tensor
            .stream()
            .record_event(None)
            .during("cuEventRecord (producer)", Some(device))?;
        Ok(CudaPrepared::new(tensor, Some(Scoped::new(ready))))
    }

    fn describe(&self, input: &CudaPrepared) -> TensorInfo {
        TensorInfo {
            len: input.tensor().len(),
            element: input.tensor().element_type(),
        }
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<CudaPrepared>,
        plan: &Plan,
    ) -> Result<CudaWork> {
        let world = plan.world();
        if devices.len() != world || inputs.len() != world {
            return Err(CudaError::WorldMismatch {
                devices: devices.len(),
                inputs: inputs.len(),
                world,
            });
        }
        // Every check before anything is queued.
        let shapes: Vec<_> = inputs
            .iter()
            .map(|input| (input.tensor().element_type(), input.tensor().len()))
            .collect();
        let element_type = validate_shapes(plan.input_len(), &shapes)?;
        if !supports_type(element_type) {
            return Err(CudaError::UnsupportedElementType { element_type });
        }
        let operation = plan.collective().operation();
        if let Some(operation) = operation {
            if !supports(element_type, operation) {
                return Err(CudaError::Unsupported {
                    element_type,
                    operation,
                });
            }
        }
        let lanes = devices
            .iter()
            .zip(&inputs)
            .enumerate()
            .map(|(rank, (&device, input))| {
                self.lane_for(Some(rank), device, input.tensor()).cloned()
            })
            .collect::<Result<Vec<_>>>()?;
        let buffer_bytes = validate_layout(plan, element_type)?;
        let needs = generation_buffers(plan, element_type, self.in_place())?;
        let size = element_type.size();
        let input_bytes = plan.input_len() * size; // within the buffer: checked above
        let _restore = SavedContext::save();

        let mut work = CudaWork {
            ranks: Vec::with_capacity(world),
            element_type,
            operation,
            buffer_len: plan.buffer_len(),
            in_place: true,
            synchronized: false,
        };
        // On an error below, `work` drops, completing the streams that already have work queued
        // before anything is released; inputs not yet taken return to their pools untouched.
        for (rank, ((lane, input), need)) in lanes.into_iter().zip(inputs).zip(needs).enumerate() {
            let (stream, device) = (&lane.stream, lane.device);
            let (tensor, ready) = input.into_parts();
            if let Some(ready) = ready {
                stream
                    .wait(&ready)
                    .during("cuStreamWaitEvent (producer)", Some(device))?;
            }
            let placement = plan.placement(rank);
            // A tensor of another executor over the same GPUs can live in another context, where
            // this lane's kernels cannot reach it: such an input is copied, never worked in.
            let foreign = tensor.context_handle() != lane.context().cu_ctx();
            let working = match need.working {
                None if foreign => Some(buffer_bytes),
                other => other,
            };
            let (buffer, input) = match working {
                None => (tensor.into_buffer(), None),
                Some(bytes) => (lane.take_buffer(bytes)?, Some(tensor.into_buffer())),
            };
            let state = RankWork {
                scratch: lane.take_buffer(need.scratch)?,
                staging: lane.take_buffer(need.staging)?,
                begun: Some(lane.take_event()?),
                sent: Some(lane.take_event()?),
                lane,
                buffer: Some(buffer),
                input,
                output: None,
                retired: Vec::new(),
            };
            work.ranks.push(state);
            let Some(state) = work.ranks.last() else {
                return Err(CudaError::WorkFinished);
            };
            if let Some(input) = &state.input {
                work.in_place = false;
                // SAFETY: distinct allocations (`copy_async` checks the input holds
                // `input_bytes` and the working buffer `placement * size + input_bytes`); the
                // input's producer work precedes the copy on this stream (it is the producer
                // stream, or waited `ready`), and every later access of the working buffer is
                // queued after this copy on `S_r` or waits `begun`, recorded after it
                // (`exchange.rs`). The input stays in the work until the streams are complete.
                unsafe {
                    copy_async(
                        (state.buffer()?, placement * size),
                        (input, 0),
                        input_bytes,
                        &state.lane.stream,
                        state.lane.device,
                    )?;
                }
            }
        }
        Ok(work)
    }

    fn exchange(&self, work: &mut CudaWork, step: &Step) -> Result<()> {
        let _restore = SavedContext::save();
        crate::exchange::exchange(work, step)
    }

    fn finish(&self, mut work: CudaWork, plan: &Plan) -> Result<Vec<CudaTensor>> {
        let world = work.world();
        if plan.world() != world || plan.buffer_len() != work.buffer_len {
            return Err(CudaError::PlanMismatch {
                expected: world,
                expected_len: work.buffer_len,
                actual: plan.world(),
                actual_len: plan.buffer_len(),
            });
        }
        validate_layout(plan, work.element_type)?;
        let _restore = SavedContext::save();
        let (element_type, size) = (work.element_type, work.element_type.size());
        if work.operation == Some(ReduceOperation::Mean) && world > 1 {
            let world_arg = u32::try_from(world).map_err(|_| CudaError::WorldTooLarge { world })?;
            for (rank, state) in work.ranks.iter().enumerate() {
                let output = plan.output(rank);
                let data = state
                    .buffer()?
                    .span(output.start * size, output.len() * size)?;
                // SAFETY: `data` is checked to hold `output.len()` elements of the work's type
                // in this rank's working buffer, in this lane's context; the kernel is queued on
                // the lane's stream, where every earlier step's write of the buffer is ordered
                // before it (`exchange.rs`, 3), and nothing else touches it before the
                // synchronisation below.
                unsafe {
                    state.lane.kernels.mean(
                        &state.lane.stream,
                        state.lane.device,
                        element_type,
                        data,
                        output.len(),
                        world_arg,
                    )?;
                }
            }
        }
        // A rank whose output is part of its buffer (reduce-scatter) gets a copy of that part.
        for (rank, state) in work.ranks.iter_mut().enumerate() {
            let output = plan.output(rank);
            if output == (0..work.buffer_len) {
                continue;
            }
            let copy = state.lane.take_buffer(output.len() * size)?;
            // SAFETY: distinct allocations, both ranges checked by `copy_async`; queued on the
            // rank's stream after every write of its buffer (`exchange.rs`, 3) and completed by
            // the synchronisation below before the copy is handed out.
            unsafe {
                copy_async(
                    (&copy, 0),
                    (state.buffer()?, output.start * size),
                    output.len() * size,
                    &state.lane.stream,
                    state.lane.device,
                )?;
            }
            state.output = Some(copy);
        }
        work.synchronize()?;
        let mut outputs = Vec::with_capacity(world);
        for (rank, state) in work.ranks.iter_mut().enumerate() {
            let buffer = match state.output.take() {
                Some(copy) => copy,
                None => state.buffer.take().ok_or(CudaError::WorkFinished)?,
            };
            outputs.push(CudaTensor::from_buffer(
                buffer,
                element_type,
                plan.output(rank).len(),
                state.lane.device,
                state.lane.ordinal,
            )?);
        }
        // The work drops here: scratch, staging, consumed inputs and working buffers not handed
        // out return to their pools, the events to their lanes.
        Ok(outputs)
    }

    fn link_model(&self) -> LinkModel {
        self.shared.config.effective_link_model()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruccl_core::{Algorithm, Collective};

    #[test]
    fn begin_rejects_an_empty_world() {
        assert!(matches!(
            validate_shapes(4, &[]),
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
            validate_shapes(8, &inputs),
            Err(CudaError::ElementTypeMismatch {
                rank: 2,
                expected: ElementType::BF16,
                actual: ElementType::F16
            })
        ));
        let inputs = [(ElementType::I64, 8), (ElementType::I64, 7)];
        assert!(matches!(
            validate_shapes(8, &inputs),
            Err(CudaError::LengthMismatch {
                rank: 1,
                expected: 8,
                actual: 7
            })
        ));
        // Every rank is held to the plan's length, rank 0 included.
        assert!(matches!(
            validate_shapes(9, &inputs),
            Err(CudaError::LengthMismatch { rank: 0, .. })
        ));
    }

    #[test]
    fn begin_accepts_matching_shapes_including_empty_tensors() {
        let inputs = [(ElementType::I32, 0); 4];
        assert_eq!(validate_shapes(0, &inputs).ok(), Some(ElementType::I32));
    }

    #[test]
    fn every_built_in_layout_fits_its_buffers_and_sizes_them_in_bytes() {
        for collective in [
            Collective::AllReduce(ReduceOperation::Sum),
            Collective::ReduceScatter(ReduceOperation::Max),
            Collective::AllGather,
            Collective::Broadcast { root: 2 },
        ] {
            let plan = Plan::new(collective, Algorithm::Ring, 4, 16).expect("a plan");
            let bytes = validate_layout(&plan, ElementType::F64).expect("in bounds");
            assert_eq!(bytes, plan.buffer_len() * 8, "{collective}");
        }
    }

    #[test]
    fn a_layout_whose_bytes_overflow_is_too_large() {
        let plan = Plan::new(
            Collective::AllReduce(ReduceOperation::Sum),
            Algorithm::Direct,
            1,
            usize::MAX / 4,
        )
        .expect("a plan of one rank");
        assert!(matches!(
            validate_layout(&plan, ElementType::F64),
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
                println!("no GPU here: construction is a typed error: {error}");
            }
        }
    }
}
