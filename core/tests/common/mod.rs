//! A small host-memory test device with scripted faults, shared by the core's integration tests.
#![allow(dead_code)] // each test binary uses a different part of it

use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, ElementType, LinkModel,
    NativeCollectiveDevice, NativeCollectiveError, Plan, ReduceOperation, Step, TensorInfo,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::Duration;

/// How long one generation of a test may go without progress before its [`Watchdog`] fails the
/// test binary. A healthy generation here takes microseconds to milliseconds, even in a debug
/// build on a loaded machine; a lost wake-up never ends.
pub const GENERATION_LIMIT: Duration = Duration::from_secs(10);

// The watchdog is the harness's (`ruccl_sim::watchdog`), shared with the models' real-thread runs
// and the conformance suite's tests; the core cannot depend on the harness, so its tests compile
// the same file.
#[path = "../../../sim/src/watchdog.rs"]
mod watchdog;
pub use watchdog::{Progress, Watchdog};

/// The test running on this thread (the test harness names its threads after the tests).
pub fn current_test() -> String {
    std::thread::current().name().unwrap_or("a test").to_owned()
}

/// Make one call on the test thread — a lone rank, a late caller — under a watchdog: if it has
/// not returned within [`GENERATION_LIMIT`], the binary fails naming `rank` and the generation.
pub fn lone_call<D: NativeCollectiveDevice, T>(
    communicator: &ruccl_core::NativeCommunicator<D>,
    rank: usize,
    what: &str,
    call: impl FnOnce(&ruccl_core::NativeCommunicator<D>) -> T,
) -> T {
    let progress = Progress::default();
    progress.enter(rank, communicator.wait_stats().generations, what);
    let _watchdog = Watchdog::arm(
        format!("a lone call of {}", current_test()),
        GENERATION_LIMIT,
        progress,
    );
    call(communicator)
}

/// Where a scripted fault fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    Prepare {
        rank: usize,
    },
    Begin,
    Exchange {
        step: usize,
    },
    Finish,
    /// `finish` returns this many outputs instead of one per rank.
    OutputCount(usize),
}

/// What the fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Fail,
    Panic,
}

#[derive(Default)]
struct Script {
    fault: Option<(Site, Action)>,
    /// Set while `exchange` must block until released (simulating a hung device).
    hang: bool,
    /// The number of `exchange` calls currently blocked.
    hung: usize,
    /// Panic in `clone` once this many more clones have happened.
    clone_panics_after: Option<usize>,
    /// Let the work's `Drop` panic in the next generation.
    bomb_work: bool,
    /// `describe` panics for this rank's tensor once.
    describe_panics_for: Option<usize>,
    /// `link_model` panics.
    link_model_panics: bool,
}

/// The test device: each rank's tensor is a `Vec<i64>` tagged with its device.
#[derive(Default)]
pub struct TestDevice {
    script: Arc<(Mutex<Script>, Condvar)>,
    /// Calls of `assist`, by any clone.
    assists: Arc<AtomicUsize>,
}

impl Clone for TestDevice {
    fn clone(&self) -> Self {
        let mut script = self.script.0.lock().unwrap();
        if let Some(left) = script.clone_panics_after.as_mut() {
            if *left == 0 {
                script.clone_panics_after = None;
                drop(script);
                panic!("injected panic in clone");
            }
            *left -= 1;
        }
        Self {
            script: Arc::clone(&self.script),
            assists: Arc::clone(&self.assists),
        }
    }
}

/// A tensor on one device. With `bomb` set, dropping it panics.
#[derive(Debug, PartialEq)]
pub struct Tensor {
    pub device: DeviceId,
    pub values: Vec<i64>,
    pub bomb: bool,
}

impl Tensor {
    pub fn new(device: u32, values: Vec<i64>) -> Self {
        Self {
            device: DeviceId::new(device),
            values,
            bomb: false,
        }
    }

    pub fn bomb(device: u32, values: Vec<i64>) -> Self {
        let mut tensor = Self::new(device, values);
        tensor.bomb = true;
        tensor
    }

    /// Defuse and return the values.
    pub fn into_values(mut self) -> Vec<i64> {
        self.bomb = false;
        std::mem::take(&mut self.values)
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        if self.bomb && !std::thread::panicking() {
            panic!("injected panic in tensor drop");
        }
    }
}

pub struct Work {
    buffers: Vec<Vec<i64>>,
    devices: Vec<DeviceId>,
    operation: Option<ReduceOperation>,
    bomb: bool,
    step: usize,
}

impl Drop for Work {
    fn drop(&mut self) {
        if self.bomb && !std::thread::panicking() {
            panic!("injected panic in work drop");
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("test device: {0}")]
pub struct TestError(pub String);

impl TestDevice {
    pub fn inject(&self, site: Site, action: Action) {
        self.script.0.lock().unwrap().fault = Some((site, action));
    }

    pub fn fault_pending(&self) -> bool {
        self.script.0.lock().unwrap().fault.is_some()
    }

    pub fn panic_on_clone_after(&self, clones: usize) {
        self.script.0.lock().unwrap().clone_panics_after = Some(clones);
    }

    /// Make the next `describe` of a tensor on `rank`'s device panic.
    pub fn panic_in_describe(&self, rank: usize) {
        self.script.0.lock().unwrap().describe_panics_for = Some(rank);
    }

    /// Make `link_model` panic.
    pub fn panic_in_link_model(&self) {
        self.script.0.lock().unwrap().link_model_panics = true;
    }

    pub fn bomb_next_work(&self) {
        self.script.0.lock().unwrap().bomb_work = true;
    }

    /// Make `exchange` block until `release`.
    /// How many times a waiting rank offered its thread (`assist`), by any clone.
    pub fn assists(&self) -> usize {
        self.assists.load(Ordering::SeqCst)
    }

    pub fn hang(&self) {
        self.script.0.lock().unwrap().hang = true;
    }

    pub fn release(&self) {
        self.script.0.lock().unwrap().hang = false;
        self.script.1.notify_all();
    }

    /// Block until some `exchange` call is hung.
    pub fn wait_until_hung(&self) {
        let mut script = self.script.0.lock().unwrap();
        while script.hung == 0 {
            script = self.script.1.wait(script).unwrap();
        }
    }

    fn fire(&self, site: Site) -> Result<(), TestError> {
        let mut script = self.script.0.lock().unwrap();
        match script.fault {
            Some((at, action)) if at == site => {
                script.fault = None;
                drop(script);
                match action {
                    Action::Fail => Err(TestError(format!("injected failure at {site:?}"))),
                    Action::Panic => panic!("injected panic at {site:?}"),
                }
            }
            _ => Ok(()),
        }
    }
}

fn combine(operation: ReduceOperation, into: &mut i64, value: i64) {
    *into = match operation.combining() {
        ReduceOperation::Sum | ReduceOperation::Mean => into.wrapping_add(value),
        ReduceOperation::Product => into.wrapping_mul(value),
        ReduceOperation::Min => (*into).min(value),
        ReduceOperation::Max => (*into).max(value),
    };
}

impl NativeCollectiveDevice for TestDevice {
    type Tensor = Tensor;
    type Prepared = Tensor;
    type Work = Work;
    type Error = TestError;

    fn prepare(&self, tensor: Tensor, device: DeviceId) -> Result<Tensor, TestError> {
        let rank = device.index() as usize;
        self.fire(Site::Prepare { rank })?;
        if tensor.device != device {
            return Err(TestError(format!(
                "tensor on {} given for {device}",
                tensor.device
            )));
        }
        Ok(tensor)
    }

    fn describe(&self, input: &Tensor) -> TensorInfo {
        let rank = input.device.index() as usize;
        let mut script = self.script.0.lock().unwrap();
        if script.describe_panics_for == Some(rank) {
            script.describe_panics_for = None;
            drop(script);
            panic!("injected panic in describe");
        }
        TensorInfo {
            len: input.values.len(),
            element: ElementType::I64,
        }
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<Tensor>,
        plan: &Plan,
    ) -> Result<Work, TestError> {
        self.fire(Site::Begin)?;
        let mut buffers = Vec::with_capacity(inputs.len());
        for (rank, input) in inputs.iter().enumerate() {
            if input.values.len() != plan.input_len() || input.device != devices[rank] {
                return Err(TestError(format!(
                    "rank {rank}'s input does not fit the plan"
                )));
            }
            let mut buffer = vec![0; plan.buffer_len()];
            let at = plan.placement(rank);
            buffer[at..at + input.values.len()].copy_from_slice(&input.values);
            buffers.push(buffer);
        }
        // The inputs are read: dropping them here (a bomb panics inside `begin`).
        drop(inputs);
        let bomb = std::mem::take(&mut self.script.0.lock().unwrap().bomb_work);
        Ok(Work {
            buffers,
            devices: devices.to_vec(),
            operation: plan.collective().operation(),
            bomb,
            step: 0,
        })
    }

    fn assist(&self, _rank: usize) {
        self.assists.fetch_add(1, Ordering::SeqCst);
    }

    fn link_model(&self) -> LinkModel {
        if self.script.0.lock().unwrap().link_model_panics {
            panic!("injected panic in link_model");
        }
        LinkModel::default()
    }

    fn exchange(&self, work: &mut Work, step: &Step) -> Result<(), TestError> {
        let index = work.step;
        work.step += 1;
        {
            let mut script = self.script.0.lock().unwrap();
            script.hung += 1;
            self.script.1.notify_all();
            while script.hang {
                script = self.script.1.wait(script).unwrap();
            }
            script.hung -= 1;
        }
        self.fire(Site::Exchange { step: index })?;
        // Every transfer reads the state before the step.
        let before = work.buffers.clone();
        // (receiver, element) -> every (sender, value) it receives, in sender order.
        let mut received: BTreeMap<(usize, usize), BTreeMap<usize, i64>> = BTreeMap::new();
        // Keys order the fold: a sender's rank, the receiver's own value at `2·to`, a
        // self-transfer right after it (contract v3: `2·to + 1`).
        for transfer in &step.transfers {
            let key = 2 * transfer.from + usize::from(transfer.from == transfer.to);
            for (element, target) in transfer.range.clone().zip(transfer.at..) {
                received
                    .entry((transfer.to, target))
                    .or_default()
                    .insert(key, before[transfer.from][element]);
            }
        }
        for ((to, element), mut values) in received {
            work.buffers[to][element] = if step.combine {
                values.insert(2 * to, before[to][element]);
                let operation = work.operation.unwrap_or(ReduceOperation::Sum);
                let mut folded = values.into_values();
                let first = folded.next().unwrap_or_default();
                folded.fold(first, |mut into, value| {
                    combine(operation, &mut into, value);
                    into
                })
            } else {
                values.into_values().next().unwrap_or_default()
            };
        }
        Ok(())
    }

    fn finish(&self, mut work: Work, plan: &Plan) -> Result<Vec<Tensor>, TestError> {
        self.fire(Site::Finish)?;
        let world = work.buffers.len() as i64;
        let mean = work.operation == Some(ReduceOperation::Mean);
        let mut outputs: Vec<Tensor> = std::mem::take(&mut work.buffers)
            .into_iter()
            .zip(&work.devices)
            .enumerate()
            .map(|(rank, (buffer, device))| {
                let mut values = buffer[plan.output(rank)].to_vec();
                if mean {
                    values.iter_mut().for_each(|value| *value /= world);
                }
                Tensor::new(device.index(), values)
            })
            .collect();
        let wrong = {
            let mut script = self.script.0.lock().unwrap();
            match script.fault {
                Some((Site::OutputCount(count), _)) => {
                    script.fault = None;
                    Some(count)
                }
                _ => None,
            }
        };
        if let Some(count) = wrong {
            outputs.resize_with(count, || Tensor::new(0, Vec::new()));
        }
        Ok(outputs)
    }
}

/// The expected all-reduce of `inputs`, by a sequential reference.
pub fn reference(inputs: &[Vec<i64>], operation: ReduceOperation) -> Vec<i64> {
    let mut result = inputs[0].clone();
    for input in &inputs[1..] {
        for (into, &value) in result.iter_mut().zip(input) {
            combine(operation, into, value);
        }
    }
    if operation == ReduceOperation::Mean {
        result
            .iter_mut()
            .for_each(|value| *value /= inputs.len() as i64);
    }
    result
}

pub type Outcome = Result<Vec<i64>, NativeCollectiveError>;

/// Run one generation: rank `r` submits `inputs[r]` with `operations[r]` from its own thread.
pub fn run_generation<D>(
    communicator: &ruccl_core::NativeCommunicator<D>,
    inputs: Vec<Tensor>,
    operations: &[ReduceOperation],
) -> Vec<Outcome>
where
    D: NativeCollectiveDevice<Tensor = Tensor>,
{
    let progress = Progress::default();
    let generation = communicator.wait_stats().generations;
    let _watchdog = Watchdog::arm(
        format!("an all-reduce generation of {}", current_test()),
        GENERATION_LIMIT,
        progress.clone(),
    );
    std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .into_iter()
            .zip(operations)
            .enumerate()
            .map(|(rank, (tensor, &operation))| {
                let progress = progress.clone();
                scope.spawn(move || {
                    progress.enter(rank, generation, format!("all-reduce({operation})"));
                    let delivered = communicator
                        .all_reduce(rank, tensor, operation)
                        .map(Tensor::into_values);
                    progress.leave(rank);
                    delivered
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    })
}

/// What one rank asks for in [`run_requests`].
#[derive(Clone, Debug)]
pub enum Ask {
    /// A built-in collective with an algorithm.
    Built(Collective, Algorithm),
    /// A custom plan.
    Custom(Plan),
}

/// Run one generation: rank `r` submits `inputs[r]` asking for `asks[r]`, from its own thread.
pub fn run_requests<D>(
    communicator: &ruccl_core::NativeCommunicator<D>,
    inputs: Vec<Tensor>,
    asks: &[Ask],
) -> Vec<Outcome>
where
    D: NativeCollectiveDevice<Tensor = Tensor>,
{
    let progress = Progress::default();
    let generation = communicator.wait_stats().generations;
    let _watchdog = Watchdog::arm(
        format!("a generation of {}", current_test()),
        GENERATION_LIMIT,
        progress.clone(),
    );
    std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .into_iter()
            .zip(asks)
            .enumerate()
            .map(|(rank, (tensor, ask))| {
                let progress = progress.clone();
                scope.spawn(move || {
                    let what = match &ask {
                        Ask::Built(collective, algorithm) => {
                            format!("{collective} via {algorithm}")
                        }
                        Ask::Custom(plan) => format!("a custom plan of {}", plan.collective()),
                    };
                    progress.enter(rank, generation, what);
                    let delivered = match ask.clone() {
                        Ask::Built(collective, algorithm) => communicator.collective(
                            rank,
                            tensor,
                            collective,
                            CollectiveOptions::default().with_algorithm(algorithm),
                        ),
                        Ask::Custom(plan) => communicator.run_plan(rank, tensor, plan, None),
                    };
                    progress.leave(rank);
                    delivered.map(Tensor::into_values)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    })
}

/// What every rank must receive from `collective` over `inputs` (a sequential reference).
pub fn expected(collective: Collective, inputs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let world = inputs.len();
    match collective {
        Collective::AllReduce(operation) => vec![reference(inputs, operation); world],
        Collective::ReduceScatter(operation) => {
            let reduced = reference(inputs, operation);
            let block = reduced.len() / world;
            (0..world)
                .map(|rank| reduced[rank * block..(rank + 1) * block].to_vec())
                .collect()
        }
        Collective::AllGather => vec![inputs.concat(); world],
        Collective::Broadcast { root } => vec![inputs[root].clone(); world],
        Collective::Reduce { op, root } => (0..world)
            .map(|rank| {
                if rank == root {
                    reference(inputs, op)
                } else {
                    Vec::new()
                }
            })
            .collect(),
        Collective::Gather { root } => (0..world)
            .map(|rank| {
                if rank == root {
                    inputs.concat()
                } else {
                    Vec::new()
                }
            })
            .collect(),
        Collective::Scatter { root } => {
            let block = inputs[root].len() / world;
            (0..world)
                .map(|rank| inputs[root][rank * block..(rank + 1) * block].to_vec())
                .collect()
        }
        Collective::AllToAll => {
            let block = inputs.first().map_or(0, Vec::len) / world;
            (0..world)
                .map(|rank| {
                    inputs
                        .iter()
                        .flat_map(|input| input[rank * block..(rank + 1) * block].iter().copied())
                        .collect()
                })
                .collect()
        }
        _ => unreachable!("no other collective exists"),
    }
}

/// Inputs for `world` ranks: rank r holds `[r+1, r+2, ...]` of `length` elements.
pub fn ramp(world: usize, length: usize, offset: i64) -> Vec<Vec<i64>> {
    (0..world)
        .map(|rank| {
            (0..length as i64)
                .map(|i| rank as i64 + 1 + i + offset)
                .collect()
        })
        .collect()
}

pub fn tensors(inputs: &[Vec<i64>]) -> Vec<Tensor> {
    inputs
        .iter()
        .enumerate()
        .map(|(rank, values)| Tensor::new(rank as u32, values.clone()))
        .collect()
}

pub fn devices(world: usize) -> Vec<DeviceId> {
    (0..world as u32).map(DeviceId::new).collect()
}

/// Silence the default panic message for injected panics (they are expected), keep the rest.
pub fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !text.starts_with("injected") {
                default(info);
            }
        }));
    });
}
