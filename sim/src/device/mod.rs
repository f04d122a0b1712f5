//! [`SimDevice`]: host memory standing in for device memory, strict about the executor contract.
//!
//! | file           | job                                                        |
//! |----------------|------------------------------------------------------------|
//! | `mod.rs`       | the device, its work, the trait impls                      |
//! | `tensor.rs`    | [`SimTensor`], [`SimPrepared`]                             |
//! | `error.rs`     | [`SimError`], one variant per contract violation           |
//! | `validate.rs`  | the checks `begin` and `exchange` run before touching data |
//! | `memory.rs`    | per-rank inputs and output buffers of one generation       |
//! | `ready.rs`     | which output elements hold current values                  |
//! | `exchange.rs`  | one ring step, planned as kernels, with pre-step reads     |
//! | `kernels.rs`   | the fused element loops                                    |
//! | `parallel.rs`  | splitting a call's loops across cores (not under checkers) |
//! | `pool.rs`      | recycled output buffers (not under checkers)               |
//! | `elements.rs`  | element arithmetic, `Mean` scaling and its rounding        |
//!
//! ## Speed
//!
//! `begin` does not copy a large input: the work shares the prepared tensor, and the first step
//! that writes an element of a rank reads that rank's input in the same pass (a small input, under
//! 64 KiB, is simply copied). A step is one fused loop per transfer (reduce-scatter: read two,
//! write one; all-gather: read one, write one), so the ring moves exactly the memory traffic its
//! schedule implies, into recycled output buffers, split across cores when a step is large.

mod elements;
mod error;
mod exchange;
mod kernels;
mod memory;
mod parallel;
mod pool;
mod ready;
mod tensor;
mod validate;

pub use error::SimError;
pub use tensor::{SimPrepared, SimTensor};

use crate::host::{ElementType, HostTensors, HostValues};
use crate::ledger::{GenerationTraffic, Ledger, StepTraffic};
use memory::Memory;
use pool::Pool;
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use std::ops::Range;

/// How many generations a device's ledger keeps unless told otherwise.
pub const DEFAULT_LEDGER_RETENTION: usize = 4096;

/// A simulated device: every rank's tensor is a host buffer owned by its [`DeviceId`], and every
/// method checks the executor contract instead of trusting the caller.
///
/// - `prepare` checks the tensor lives on the named device.
/// - `begin` checks one input per device, at least one rank, each input on its rank's device, one
///   element type and one length, and that the operation is supported for the element type (all
///   are, unless configured otherwise with [`SimDeviceBuilder::unsupported`]).
/// - `exchange` checks one range per rank, each within the tensors, and (unless disabled) that the
///   step is balanced; every send reads the pre-step state, and data only moves from rank `r` to
///   `(r + 1) % W` — there is no way to express anything else.
/// - `finish` checks the operation is the one the generation began with, applies the `Mean`
///   scaling and records the generation's traffic in the [`Ledger`].
///
/// Every violation is a [`SimError`]; nothing panics.
///
/// ## Arithmetic
///
/// Every operation is supported on every element type (unless configured otherwise):
///
/// | operation | floats (f32, f64, f16, bf16)                   | integers (i32, i64)                  |
/// |-----------|------------------------------------------------|--------------------------------------|
/// | `Sum`     | IEEE addition, rounded once per combine        | two's complement, wrapping           |
/// | `Product` | IEEE multiplication, rounded once per combine  | two's complement, wrapping           |
/// | `Min`     | the smaller value; a NaN loses to a number     | the smaller value                    |
/// | `Max`     | the larger value; a NaN loses to a number      | the larger value                     |
/// | `Mean`    | the `Sum`, then **divided** by `W` (one correctly rounded division) | the wrapping `Sum`, then divided by `W`, **rounded toward zero** |
///
/// f16 and bf16 compute in f32 and round back once; f32 carries more than twice their precision
/// plus two bits, so each result is the correctly rounded result in the half type.
///
/// Clones share the ledger (and the pool of recycled buffers). The shared state is behind locks
/// from [`ruccl_core::sync`], so the device runs unchanged under loom and shuttle (create it inside
/// the model there); under those checkers it never spawns threads and keeps no pool.
#[derive(Clone, Debug)]
pub struct SimDevice {
    config: Config,
    ledger: Ledger,
    pool: Pool,
}

/// The device's fixed settings.
#[derive(Clone, Copy, Debug)]
struct Config {
    /// Bit `type_index * 5 + operation_index` is set for each unsupported combination.
    unsupported: u64,
    /// Whether `exchange` rejects steps whose ranges differ in length by more than one.
    balanced_steps: bool,
    /// Whether `finish` records traffic in the ledger.
    record_traffic: bool,
    /// The most threads one call may use for its element loops (1 under a checker).
    threads: usize,
}

impl Default for SimDevice {
    fn default() -> Self {
        Self::new()
    }
}

impl SimDevice {
    /// A device supporting every operation on every element type, checking balanced steps, and
    /// keeping the last [`DEFAULT_LEDGER_RETENTION`] generations in its ledger.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for a device with other settings.
    pub fn builder() -> SimDeviceBuilder {
        SimDeviceBuilder {
            unsupported: 0,
            balanced_steps: true,
            record_traffic: true,
            retention: Some(DEFAULT_LEDGER_RETENTION),
            threads: None,
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
        self.config.unsupported & support_bit(element_type, operation) == 0
    }
}

/// Settings for a [`SimDevice`].
#[derive(Clone, Debug)]
pub struct SimDeviceBuilder {
    unsupported: u64,
    balanced_steps: bool,
    record_traffic: bool,
    retention: Option<usize>,
    threads: Option<usize>,
}

impl SimDeviceBuilder {
    /// Make `begin` reject `operation` on `element_type` with
    /// [`SimError::UnsupportedOperation`] (to exercise that error path in harnesses).
    pub fn unsupported(mut self, element_type: ElementType, operation: ReduceOperation) -> Self {
        self.unsupported |= support_bit(element_type, operation);
        self
    }

    /// Whether `exchange` rejects a step whose ranges differ in length by more than one
    /// ([`SimError::UnbalancedStep`]); on by default. The ring schedule is always balanced.
    pub fn balanced_steps(mut self, check: bool) -> Self {
        self.balanced_steps = check;
        self
    }

    /// Whether `finish` records traffic in the ledger; on by default. Turning it off removes the
    /// ledger's lock from the collective path (fewer interleavings for a model checker).
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
    /// machine's available parallelism; a call uses more than one thread only for steps of at
    /// least a megabyte per thread. Under a model checker the device always uses one.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads.max(1));
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
                balanced_steps: self.balanced_steps,
                record_traffic: self.record_traffic,
                threads,
            },
            ledger: Ledger::new(self.retention),
            pool: Pool::default(),
        }
    }
}

fn support_bit(element_type: ElementType, operation: ReduceOperation) -> u64 {
    let type_index = ElementType::ALL
        .iter()
        .position(|&candidate| candidate == element_type)
        .unwrap_or(0);
    let operation_index = ReduceOperation::ALL
        .iter()
        .position(|&candidate| candidate == operation)
        .unwrap_or(0);
    1 << (type_index * ReduceOperation::ALL.len() + operation_index)
}

/// One generation in flight: the per-rank output buffers and the traffic so far.
#[derive(Debug)]
pub struct SimWork {
    /// `devices[r]` is rank `r`'s device; outputs are returned on it.
    devices: Vec<DeviceId>,
    operation: ReduceOperation,
    element_type: ElementType,
    length: usize,
    memory: Memory,
    steps: Vec<StepTraffic>,
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

    /// Elements per rank.
    pub fn length(&self) -> usize {
        self.length
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// The operation given to `begin`.
    pub fn operation(&self) -> ReduceOperation {
        self.operation
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
        Ok(SimPrepared::new(tensor, Some(self.pool.clone())))
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: &[SimPrepared],
        operation: ReduceOperation,
    ) -> Result<SimWork, SimError> {
        let shape = validate::begin(devices, inputs)?;
        if !self.supports(shape.element_type, operation) {
            return Err(SimError::UnsupportedOperation {
                operation,
                element_type: shape.element_type,
            });
        }
        let memory = Memory::new(shape.element_type, inputs, shape.length, &self.pool);
        Ok(SimWork {
            devices: devices.to_vec(),
            operation,
            element_type: shape.element_type,
            length: shape.length,
            memory,
            steps: Vec::with_capacity(2 * devices.len().saturating_sub(1)),
        })
    }

    fn elements(&self, work: &SimWork) -> usize {
        work.length
    }

    fn exchange(
        &self,
        work: &mut SimWork,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), SimError> {
        validate::ranges(
            ranges,
            work.world(),
            work.length,
            self.config.balanced_steps,
        )?;
        let combining = reduce.then(|| work.operation.combining());
        work.memory.step(ranges, combining, self.config.threads);
        work.steps.push(StepTraffic {
            reduce,
            sent: ranges.iter().map(Range::len).collect(),
        });
        Ok(())
    }

    fn finish(
        &self,
        work: SimWork,
        operation: ReduceOperation,
    ) -> Result<Vec<SimTensor>, SimError> {
        if operation != work.operation {
            return Err(SimError::OperationChanged {
                begun: work.operation,
                finished: operation,
            });
        }
        let SimWork {
            devices,
            operation,
            element_type,
            length,
            memory,
            steps,
        } = work;
        let divide_by = (operation == ReduceOperation::Mean).then_some(devices.len());
        let outputs = memory.into_outputs(&devices, divide_by, self.config.threads);
        if self.config.record_traffic {
            self.ledger.record(GenerationTraffic {
                sequence: 0,
                devices,
                length,
                element_type,
                operation,
                steps,
            });
        }
        Ok(outputs)
    }
}

impl HostTensors for SimDevice {
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<SimTensor, SimError> {
        Ok(SimTensor::new(device, values.clone()))
    }

    fn download(&self, tensor: &SimTensor) -> Result<HostValues, SimError> {
        Ok(tensor.values().clone())
    }

    fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        SimDevice::supports(self, element_type, operation)
    }
}
