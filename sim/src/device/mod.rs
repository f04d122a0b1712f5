//! [`SimDevice`]: host memory standing in for device memory, strict about the executor contract.
//!
//! | file           | job                                                          |
//! |----------------|--------------------------------------------------------------|
//! | `mod.rs`       | the device, its work, the trait impls                        |
//! | `tensor.rs`    | [`SimTensor`], [`SimPrepared`]                               |
//! | `error.rs`     | [`SimError`], one variant per contract violation             |
//! | `validate.rs`  | the checks `begin` runs before touching data                 |
//! | `layouts.rs`   | the last generation's laid-out steps (per thread), reused    |
//! | `memory.rs`    | the per-rank working buffers of one generation                |
//! | `kernels.rs`   | the fused element loops, in the CPU's widest vectors         |
//! | `parallel.rs`  | splitting a call's loops across cores (not under checkers)   |
//! | `crew.rs`      | waiting ranks running shares of the running step (likewise)  |
//! | `pool.rs`      | the caching allocator: large allocations reused, bounded     |
//! | `elements.rs`  | element arithmetic, `Mean` scaling and its rounding          |
//! | `census.rs`    | [`Census`]: the live values per kind, double drops           |
//!
//! ## Speed
//!
//! A plan that works in place (all-reduce, reduce-scatter, broadcast) runs in the inputs' own
//! allocations: `begin` copies nothing. A step copies aside only the sources it also writes (none
//! in a ring step), and each write is one pass over the receiver's elements (a copy; or a fold of
//! every sender, block by block, so that the receiver is read and written once however many senders
//! it has); a step of more than a megabyte per thread is cut across cores as a whole, one share
//! per core, and the ranks waiting for the generation take shares while they poll
//! ([`assist`](NativeCollectiveDevice::assist), `crew.rs`), each thread its CPU's share first:
//! no sleeping thread to wake for a step of a few megabytes, and each share's elements stay on
//! one core from generation to generation; a smaller step runs on rank 0's thread when every
//! rank has a core (`parallel.rs`). A [clique](ruccl_core::Step::clique) — direct's one-step all-reduce — is
//! folded once per element and stored on every member, with nothing set aside: each member's memory
//! read once and written once, `2W·n` in all against the two-step plan's `(3W-1)·n`; the device's
//! model says so ([`LinkModel::with_fused_cliques`]), and the core's
//! [`TRAFFIC_BOUND`](ruccl_core::TRAFFIC_BOUND) counts it as such, so `Auto` takes it at every
//! world. Out of place, a whole input is copied into its fresh buffer only when the first step
//! needs it: a first step that is a clique of those ranks folds from the inputs straight into the
//! fresh buffers. A clique whose members' memory takes the caches or more (32 MiB and up,
//! `memory.rs`) folds short runs of every member in turn (the prefetchers follow every member at
//! once), and out of place, beyond 32 MiB, writes its outputs with stores that go around the
//! caches (no line read before it is overwritten, no input evicted by an output). A step equal to
//! the one the last generation run on the same thread ran at the same position reuses its checked
//! layout (`layouts.rs`). Fresh buffers, copies aside and uploads reuse large allocations the
//! device is done with (`pool.rs`; [`release_cached`](HostTensors::release_cached) frees them), so
//! a steady run touches no fresh pages, and a fresh one of 4 MiB or more is advised onto huge
//! pages before its first touch (`pages.rs`); a small value holds no handle to those shared books, so a
//! small generation writes nothing the device's clones share but the ledger and the census (if
//! kept).

mod census;
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
mod crew;
mod elements;
mod error;
mod kernels;
mod layouts;
mod memory;
mod pages;
mod parallel;
mod pool;
mod tensor;
mod validate;

pub use census::{Census, DoubleDrop, NotQuiescent, ValueCounts, ValueKind};
pub use error::SimError;
pub use tensor::{SimPrepared, SimTensor};

use crate::host::{ElementType, HostTensors, HostValues};
use crate::ledger::{GenerationTraffic, Ledger, StepTraffic};
use census::{Registry, Token};
use layouts::Cursor;
use memory::{Keeping, Memory};
use pool::Pool;
use ruccl_core::{
    Collective, DeviceId, LinkModel, Links, NativeCollectiveDevice, Plan, ReduceOperation, Step,
    TensorInfo,
};

/// How many generations a device's ledger keeps unless told otherwise.
pub const DEFAULT_LEDGER_RETENTION: usize = 4096;

/// How many bytes of allocations a device keeps for reuse unless told otherwise
/// ([`SimDeviceBuilder::pool_bytes`]): one generation's buffers at W = 8 and 64 MiB per rank, out
/// of place (512 MiB), twice over. A cap, not a reservation: the pool holds only what recent
/// generations dropped and frees what is not taken again soon.
pub const DEFAULT_POOL_BYTES: usize = 1 << 30;

/// A simulated device: every rank's working buffer is a host buffer owned by its [`DeviceId`],
/// and every method checks the executor contract instead of trusting the caller.
///
/// - `prepare` checks the tensor lives on the named device.
/// - `begin` checks one input per rank of the plan, each on its rank's device, one element type,
///   the plan's input length, a layout inside the buffers, and that the operation is supported
///   for the element type (all are, unless configured otherwise with
///   [`SimDeviceBuilder::unsupported`]).
/// - `exchange` checks every transfer names two distinct ranks of the world and a range inside
///   the buffers, that an overwriting step writes no element twice and a combining step delivers
///   no sender's value to an element twice; every transfer reads the pre-step state, and folds
///   follow the contract's order (ascending ranks, the receiver's own value at its own position).
/// - `finish` checks the plan is the one the generation began with, applies the `Mean` scaling,
///   hands each rank its output range and records the generation's traffic in the [`Ledger`].
///
/// Every violation is a [`SimError`]; nothing panics.
///
/// ## Arithmetic
///
/// Every operation is supported on every element type (unless configured otherwise):
///
/// | operation | floats (f32, f64, f16, bf16)                   | integers (i8, i32, i64; u8, u32, u64) |
/// |-----------|------------------------------------------------|--------------------------------------|
/// | `Sum`     | IEEE addition, rounded once per combine        | wrapping (modulo 2^bits)             |
/// | `Product` | IEEE multiplication, rounded once per combine  | wrapping (modulo 2^bits)             |
/// | `Min`     | the smaller value; a NaN loses to a number; `-0` below `+0` | the smaller value (unsigned types compare as unsigned) |
/// | `Max`     | the larger value; a NaN loses to a number; `+0` above `-0`  | the larger value (likewise)          |
/// | `Mean`    | the `Sum`, then **divided** by `W` (one correctly rounded division) | the wrapping `Sum`, then divided by `W`, **rounded toward zero** |
///
/// f16 and bf16 compute in f32 and round back once; f32 carries more than twice their precision
/// plus two bits, so each result is the correctly rounded result in the half type. A combining
/// step folds, per element, the senders below the receiver in ascending order, then the
/// receiver's own value, then the senders above it, from the left (`((a ⊕ b) ⊕ own) ⊕ c`), one
/// rounding per `⊕`: so every rank's all-reduce output is the same bits. A float NaN result is
/// always the quiet NaN with no payload (`f32::NAN`; in the half types, what it rounds to):
/// which operand's payload IEEE hardware passes on depends on the operands' order, which the
/// compiler may swap in a commutative operation, so that ranks folding the same values in two
/// loops (direct's one-step all-reduce on a model that does not fuse cliques) got different
/// NaNs in release builds.
///
/// ## Census
///
/// The device counts the values it makes — tensors (uploaded inputs, outputs), prepared inputs
/// and works — from creation to drop, and catches a value dropped twice: [`SimDevice::census`]
/// reads the counts, [`SimDevice::check_quiescent`] names what is still live. Tensors made
/// outside the device with [`SimTensor::new`] are not counted (a prepared input made from one
/// is). Clones of a device share one census.
///
/// ```
/// use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation};
/// use ruccl_sim::{HostTensors, HostValues, SimDevice};
///
/// let device = SimDevice::new();
/// let communicator = NativeCommunicator::new(vec![DeviceId::new(0)], device.clone())?;
/// let input = device.upload(DeviceId::new(0), &HostValues::I32(vec![1, 2]))?;
/// assert_eq!(device.census().live.tensors, 1);
/// let output = communicator.all_reduce(0, input, ReduceOperation::Sum)?;
/// assert_eq!(device.census().live.tensors, 1); // the input went into the work, the output came out
/// drop(output);
/// device.check_quiescent()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// ## Memory
///
/// Host memory fresh from the system costs a page fault per page on first touch, which on a VM
/// costs more than copying the page. Like a GPU framework's caching allocator, the device keeps
/// the large allocations it is done with — inputs it copied out of, buffers it cut outputs
/// from, copies aside, and the tensors it made once they are dropped — up to
/// [`DEFAULT_POOL_BYTES`] ([`SimDeviceBuilder::pool_bytes`]), and builds the next buffers in
/// them.
///
/// Clones share the ledger, the census and the kept allocations. The ledger is behind a lock from
/// [`ruccl_core::sync`] (the census and the kept allocations are harness bookkeeping behind std's,
/// outside the checkers' view), so the device runs unchanged under loom and shuttle (create it
/// inside the model there); under those checkers it never spawns threads.
#[derive(Clone, Debug)]
pub struct SimDevice {
    config: Config,
    ledger: Ledger,
    /// `None` when the device was built without a census.
    census: Option<Registry>,
    /// Large allocations kept for reuse.
    pool: Pool,
}

/// The device's fixed settings.
#[derive(Clone, Copy, Debug)]
struct Config {
    /// Bit `type_index * 5 + operation_index` is set for each unsupported combination.
    unsupported: u64,
    /// Whether `finish` records traffic in the ledger.
    record_traffic: bool,
    /// The most threads one call may use for its element loops (1 under a checker).
    threads: usize,
    /// Whether `begin` may use an input's allocation as the working buffer.
    in_place: bool,
    /// The model `Auto` prices plans with on this device.
    model: LinkModel,
}

impl Default for SimDevice {
    fn default() -> Self {
        Self::new()
    }
}

impl SimDevice {
    /// A device supporting every operation on every element type, working in place, and
    /// keeping the last [`DEFAULT_LEDGER_RETENTION`] generations in its ledger.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for a device with other settings.
    pub fn builder() -> SimDeviceBuilder {
        SimDeviceBuilder {
            unsupported: 0,
            record_traffic: true,
            retention: Some(DEFAULT_LEDGER_RETENTION),
            threads: None,
            in_place: true,
            model: None,
            census: true,
            pool_bytes: DEFAULT_POOL_BYTES,
        }
    }

    /// The traffic ledger this device (and all its clones) record into.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The most threads one call uses for its element loops.
    pub fn threads(&self) -> usize {
        self.config.threads
    }

    /// Whether `begin` accepts `operation` on `element_type` elements.
    pub fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        support_bit(element_type, operation).is_some_and(|bit| self.config.unsupported & bit == 0)
    }

    /// Whether the device holds `element_type` elements at all: every type of
    /// [`ElementType::ALL`].
    pub fn supports_type(&self, element_type: ElementType) -> bool {
        ElementType::ALL.contains(&element_type)
    }

    /// The α–β model of this simulated machine (see [`SimDeviceBuilder::link_model`]).
    pub fn model(&self) -> LinkModel {
        self.config.model
    }

    /// The values this device and its clones have alive now, per kind, and every double drop
    /// (all zero for a device built without a census, [`SimDeviceBuilder::census`]).
    pub fn census(&self) -> Census {
        self.census
            .as_ref()
            .map(Registry::census)
            .unwrap_or_default()
    }

    /// `Ok` when no value this device made is alive and none was dropped twice; otherwise an
    /// error naming how many of each kind are still live.
    pub fn check_quiescent(&self) -> Result<(), NotQuiescent> {
        self.census().quiescent()
    }

    /// Bytes of allocations kept for reuse now (at most the builder's
    /// [`pool_bytes`](SimDeviceBuilder::pool_bytes)).
    pub fn pooled_bytes(&self) -> usize {
        self.pool.kept_bytes()
    }

    fn token(&self, kind: ValueKind) -> Option<Token> {
        self.census.as_ref().map(|census| census.token(kind))
    }

    fn keeping(&self) -> Keeping<'_> {
        Keeping {
            census: self.census.as_ref(),
            pool: &self.pool,
        }
    }
}

/// The simulated machine's model: every transfer crosses one host memory system, so a step's
/// cost is its total bytes and transfers ([`Links::Shared`]); α is the per-step cost of the
/// device's own bookkeeping, γ the fixed cost of one transfer or range copied aside (a loop
/// started, a step laid out), β the host's copy bandwidth. Fitted to the device alone on one
/// thread of a 2-vCPU VM by `cargo bench -p ruccl-sim --bench device_model`: every built-in
/// plan × W = 2, 4, 8 × 4 B … 1 MiB. Since the device reuses its laid-out steps the same bench
/// fits smaller α and γ; adopting them made `Auto` worse through the rendezvous (125 of 144
/// cells within 1.10 of the best fixed algorithm, against 128), so these stay.
fn default_model() -> LinkModel {
    LinkModel::new(SIM_ALPHA_SECONDS, SIM_BETA_BYTES_PER_SECOND, Links::Shared)
        .and_then(|model| model.with_transfer_cost(SIM_TRANSFER_SECONDS))
        .map(LinkModel::with_fused_cliques)
        .unwrap_or_default()
}

/// α of the default simulated machine, seconds per step.
const SIM_ALPHA_SECONDS: f64 = 0.12e-6;
/// γ of the default simulated machine, seconds per transfer or range copied aside.
const SIM_TRANSFER_SECONDS: f64 = 0.11e-6;
/// β of the default simulated machine, bytes per second over all transfers of a step.
const SIM_BETA_BYTES_PER_SECOND: f64 = 24e9;

/// Settings for a [`SimDevice`].
#[derive(Clone, Debug)]
pub struct SimDeviceBuilder {
    unsupported: u64,
    record_traffic: bool,
    retention: Option<usize>,
    threads: Option<usize>,
    in_place: bool,
    model: Option<LinkModel>,
    census: bool,
    pool_bytes: usize,
}

impl SimDeviceBuilder {
    /// Make `begin` reject `operation` on `element_type` with
    /// [`SimError::UnsupportedOperation`] (to exercise that error path in harnesses).
    pub fn unsupported(mut self, element_type: ElementType, operation: ReduceOperation) -> Self {
        self.unsupported |= support_bit(element_type, operation).unwrap_or(0);
        self
    }

    /// Whether `finish` records traffic in the ledger; on by default. Turning it off removes the
    /// ledger's lock from the collective path (fewer interleavings for a model checker); to stop
    /// recording for a while instead, [`Ledger::pause`] it.
    pub fn record_traffic(mut self, record: bool) -> Self {
        self.record_traffic = record;
        self
    }

    /// How many generations the ledger keeps (`None`: all; the default is
    /// [`DEFAULT_LEDGER_RETENTION`]).
    pub fn ledger_retention(mut self, retention: Option<usize>) -> Self {
        self.retention = retention;
        self
    }

    /// The most threads one call may use for its element loops (at least 1). The default is the
    /// machine's available parallelism; a call uses more than one thread only for writes of at
    /// least a megabyte per thread. Under a model checker the device always uses one.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads.max(1));
        self
    }

    /// Whether `begin` may use an input's own allocation as the rank's working buffer when the
    /// plan works in place (on by default); off, every generation works in fresh buffers
    /// (nccl-tests' out-of-place), its inputs copied in — or folded straight into them, where
    /// the first step is a clique of those ranks over their whole buffers.
    pub fn in_place(mut self, in_place: bool) -> Self {
        self.in_place = in_place;
        self
    }

    /// The α–β model the device reports to communicators, which `Auto` resolves with. The
    /// default models the simulator itself: one shared host memory system.
    pub fn link_model(mut self, model: LinkModel) -> Self {
        self.model = Some(model);
        self
    }

    /// Whether the device keeps a [census](SimDevice::census) of its live values; on by
    /// default. Off, values carry no token and the census reads zero (one lock operation less per
    /// value made and dropped, for a model checker's state space).
    pub fn census(mut self, census: bool) -> Self {
        self.census = census;
        self
    }

    /// How many bytes of large allocations (64 KiB and up) the device keeps for reuse;
    /// [`DEFAULT_POOL_BYTES`] by default, 0 keeps none. The oldest is freed first.
    pub fn pool_bytes(mut self, bytes: usize) -> Self {
        self.pool_bytes = bytes;
        self
    }

    /// The device.
    pub fn build(self) -> SimDevice {
        let threads = if ruccl_core::sync::CHECKED {
            1
        } else {
            self.threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            })
        };
        SimDevice {
            config: Config {
                unsupported: self.unsupported,
                record_traffic: self.record_traffic,
                threads,
                in_place: self.in_place,
                model: self.model.unwrap_or_else(default_model),
            },
            ledger: Ledger::new(self.retention),
            census: self.census.then(Registry::new),
            pool: Pool::new(self.pool_bytes),
        }
    }
}

/// The bit of `(element_type, operation)` in `Config::unsupported`; `None` for a type the
/// device does not know. 10 types × 5 operations fit in 64 bits.
fn support_bit(element_type: ElementType, operation: ReduceOperation) -> Option<u64> {
    let type_index = ElementType::ALL
        .iter()
        .position(|&candidate| candidate == element_type)?;
    let operation_index = ReduceOperation::ALL
        .iter()
        .position(|&candidate| candidate == operation)?;
    1u64.checked_shl((type_index * ReduceOperation::ALL.len() + operation_index) as u32)
}

/// One generation in flight: the per-rank working buffers and the traffic so far.
#[derive(Debug)]
pub struct SimWork {
    /// `devices[r]` is rank `r`'s device; outputs are returned on it.
    devices: Vec<DeviceId>,
    collective: Collective,
    element_type: ElementType,
    input_len: usize,
    buffer_len: usize,
    memory: Memory,
    steps: Vec<StepTraffic>,
    /// Whether the generation's traffic goes into the ledger: the device records traffic and
    /// the ledger was not paused when the generation began.
    recording: bool,
    /// Where the generation is in its steps, and the last generation's to reuse.
    cursor: Cursor,
    /// The work's entry in the census.
    _token: Option<Token>,
}

impl SimWork {
    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.devices.len()
    }

    /// The traffic of the steps exchanged so far.
    pub fn steps(&self) -> &[StepTraffic] {
        &self.steps
    }

    /// Elements per rank's working buffer.
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// The collective of the plan given to `begin`.
    pub fn collective(&self) -> Collective {
        self.collective
    }

    /// A copy of rank `rank`'s working buffer as it is now (`None` for a rank outside the
    /// world): for inspecting a generation in tests and for deliberately wrong devices.
    pub fn buffer(&self, rank: usize) -> Option<HostValues> {
        self.memory.buffer(rank)
    }
}

impl NativeCollectiveDevice for SimDevice {
    type Tensor = SimTensor;
    type Prepared = SimPrepared;
    type Work = SimWork;
    type Error = SimError;

    fn prepare(&self, tensor: SimTensor, device: DeviceId) -> Result<SimPrepared, SimError> {
        if tensor.device() != device {
            return Err(SimError::TensorOnWrongDevice {
                expected: device,
                actual: tensor.device(),
            });
        }
        Ok(SimPrepared::new(tensor, self.census.as_ref()))
    }

    fn describe(&self, input: &SimPrepared) -> TensorInfo {
        TensorInfo {
            len: input.tensor().len(),
            element: input.tensor().element_type(),
        }
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<SimPrepared>,
        plan: &Plan,
    ) -> Result<SimWork, SimError> {
        let element_type = validate::begin(devices, &inputs, plan)?;
        if let Some(operation) = plan.collective().operation() {
            if !self.supports(element_type, operation) {
                return Err(SimError::UnsupportedOperation {
                    operation,
                    element_type,
                });
            }
        }
        let memory = Memory::new(element_type, inputs, plan, self.config.in_place, &self.pool)?;
        let recording = self.config.record_traffic && !self.ledger.is_paused();
        Ok(SimWork {
            devices: devices.to_vec(),
            collective: plan.collective(),
            element_type,
            input_len: plan.input_len(),
            buffer_len: plan.buffer_len(),
            memory,
            steps: Vec::with_capacity(if recording { plan.steps().len() } else { 0 }),
            recording,
            cursor: Cursor::start(),
            _token: self.token(ValueKind::Work),
        })
    }

    fn exchange(&self, work: &mut SimWork, step: &Step) -> Result<(), SimError> {
        let world = work.world();
        let laid_out = work.cursor.next(step, world, work.buffer_len)?;
        let combining = work
            .collective
            .operation()
            .map_or(ReduceOperation::Sum, ReduceOperation::combining);
        work.memory.step(
            &laid_out.layout,
            laid_out.clique.as_ref(),
            combining,
            parallel::Team::new(self.config.threads, world),
            &self.pool,
        );
        if work.recording {
            work.steps.push(laid_out.traffic.clone());
        }
        Ok(())
    }

    fn finish(&self, work: SimWork, plan: &Plan) -> Result<Vec<SimTensor>, SimError> {
        // Another input or buffer length would read outputs from outside the buffers.
        if plan.collective() != work.collective
            || plan.world() != work.world()
            || plan.input_len() != work.input_len
            || plan.buffer_len() != work.buffer_len
        {
            return Err(SimError::PlanChanged {
                begun: work.collective,
                begun_world: work.world(),
                finished: plan.collective(),
                finished_world: plan.world(),
            });
        }
        let SimWork {
            devices,
            collective,
            element_type,
            input_len,
            memory,
            steps,
            recording,
            cursor,
            ..
        } = work;
        cursor.finish();
        let mean = collective.operation() == Some(ReduceOperation::Mean);
        let divide_by = mean.then_some(devices.len());
        let outputs = memory.into_outputs(
            &devices,
            plan,
            divide_by,
            parallel::Team::new(self.config.threads, devices.len()),
            self.keeping(),
        );
        if recording {
            self.ledger.record(GenerationTraffic {
                sequence: 0,
                devices,
                collective,
                algorithm: plan.algorithm(),
                input_len,
                element_type,
                steps,
            });
        }
        Ok(outputs)
    }

    fn link_model(&self) -> LinkModel {
        self.config.model
    }

    /// Runs unclaimed shares of the step another rank is running, if one is posted (`crew.rs`);
    /// nothing under a model checker, where a step never leaves its thread.
    fn assist(&self, rank: usize) {
        #[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
        crew::help(rank);
        #[cfg(any(ruccl_loom, ruccl_shuttle))]
        let _ = rank;
    }
}

impl HostTensors for SimDevice {
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<SimTensor, SimError> {
        Ok(SimTensor::counted(
            device,
            self.pool.copied_values(values),
            self.keeping(),
        ))
    }

    fn download(&self, tensor: &SimTensor) -> Result<HostValues, SimError> {
        Ok(tensor.values().clone())
    }

    fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        SimDevice::supports(self, element_type, operation)
    }

    fn supports_type(&self, element_type: ElementType) -> bool {
        SimDevice::supports_type(self, element_type)
    }

    /// Frees every allocation the device keeps for reuse ([`SimDevice::pooled_bytes`] drops to
    /// 0).
    fn release_cached(&self) {
        self.pool.clear();
    }
}
