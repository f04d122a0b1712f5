//! Using `ruccl-core` as a library: a minimal host-memory device implementing the executor trait,
//! four threads calling `all_reduce` and `all_gather` on one communicator, then an abort and a
//! timeout, each delivered to every rank alike.
//!
//! Run it with `cargo run -p ruccl-core --example host_memory`.

// An example's `main` may stop at the first surprise.
#![allow(clippy::expect_used)]

use ruccl_core::{
    DeviceId, ElementType, NativeCollectiveDevice, NativeCollectiveError, NativeCommunicator, Plan,
    ReduceOperation, Step, TensorInfo,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A tensor in "device memory": f64 values owned by one device.
#[derive(Debug)]
struct Tensor {
    device: DeviceId,
    values: Vec<f64>,
}

/// The device: every rank's buffer is a `Vec<f64>` on the host. Real executors move these
/// ranges between GPUs; the contract is the same.
#[derive(Clone)]
struct HostMemory;

/// One generation's working buffers.
struct Work {
    buffers: Vec<Vec<f64>>,
    devices: Vec<DeviceId>,
    operation: Option<ReduceOperation>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct HostError(String);

impl NativeCollectiveDevice for HostMemory {
    type Tensor = Tensor;
    type Prepared = Tensor;
    type Work = Work;
    type Error = HostError;

    fn prepare(&self, tensor: Tensor, device: DeviceId) -> Result<Tensor, HostError> {
        if tensor.device == device {
            Ok(tensor)
        } else {
            Err(HostError(format!(
                "tensor on {} given for {device}",
                tensor.device
            )))
        }
    }

    fn describe(&self, input: &Tensor) -> TensorInfo {
        TensorInfo {
            len: input.values.len(),
            element: ElementType::F64,
        }
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<Tensor>,
        plan: &Plan,
    ) -> Result<Work, HostError> {
        // One buffer per rank, its input at the plan's placement.
        let buffers = inputs
            .into_iter()
            .enumerate()
            .map(|(rank, input)| {
                let mut buffer = vec![0.0; plan.buffer_len()];
                let at = plan.placement(rank);
                buffer[at..at + input.values.len()].copy_from_slice(&input.values);
                buffer
            })
            .collect();
        Ok(Work {
            buffers,
            devices: devices.to_vec(),
            operation: plan.collective().operation(),
        })
    }

    fn exchange(&self, work: &mut Work, step: &Step) -> Result<(), HostError> {
        // Every transfer reads the state before the step...
        let before = work.buffers.clone();
        let mut received: BTreeMap<(usize, usize), BTreeMap<usize, f64>> = BTreeMap::new();
        for transfer in &step.transfers {
            for element in transfer.range.clone() {
                received
                    .entry((transfer.to, element))
                    .or_default()
                    .insert(transfer.from, before[transfer.from][element]);
            }
        }
        // ...then folds in ascending rank order (own value at its own position), or overwrites.
        for ((to, element), mut values) in received {
            work.buffers[to][element] = if step.combine {
                values.insert(to, before[to][element]);
                let mut ordered = values.into_values();
                let first = ordered.next().unwrap_or_default();
                ordered.fold(first, |acc, value| combine(work.operation, acc, value))
            } else {
                values.into_values().next().unwrap_or_default()
            };
        }
        Ok(())
    }

    fn finish(&self, work: Work, plan: &Plan) -> Result<Vec<Tensor>, HostError> {
        let world = work.buffers.len() as f64;
        let mean = work.operation == Some(ReduceOperation::Mean);
        Ok(work
            .buffers
            .into_iter()
            .zip(work.devices)
            .enumerate()
            .map(|(rank, (buffer, device))| {
                let mut values = buffer[plan.output(rank)].to_vec();
                if mean {
                    values.iter_mut().for_each(|value| *value /= world);
                }
                Tensor { device, values }
            })
            .collect())
    }
}

fn combine(operation: Option<ReduceOperation>, a: f64, b: f64) -> f64 {
    match operation {
        Some(ReduceOperation::Product) => a * b,
        Some(ReduceOperation::Min) => a.min(b),
        Some(ReduceOperation::Max) => a.max(b),
        _ => a + b,
    }
}

fn main() -> Result<(), NativeCollectiveError> {
    const WORLD: usize = 4;
    let devices: Vec<DeviceId> = (0..WORLD as u32).map(DeviceId::new).collect();
    let communicator = Arc::new(NativeCommunicator::new(devices.clone(), HostMemory)?);

    // Every rank, on its own thread: an all-reduce, then an all-gather of its rank number.
    let ranks: Vec<_> = (0..WORLD)
        .map(|rank| {
            let communicator = Arc::clone(&communicator);
            let device = devices[rank];
            thread::spawn(
                move || -> Result<(Vec<f64>, Vec<f64>), NativeCollectiveError> {
                    let mine = Tensor {
                        device,
                        values: vec![rank as f64 + 1.0; 3],
                    };
                    let summed = communicator.all_reduce(rank, mine, ReduceOperation::Sum)?;
                    let me = Tensor {
                        device,
                        values: vec![rank as f64],
                    };
                    let gathered = communicator.all_gather(rank, me)?;
                    Ok((summed.values, gathered.values))
                },
            )
        })
        .collect();
    for (rank, handle) in ranks.into_iter().enumerate() {
        let (summed, gathered) = handle.join().expect("a rank thread panicked")?;
        println!("rank {rank}: all-reduce {summed:?}, all-gather {gathered:?}");
        assert_eq!(summed, vec![10.0; 3]);
        assert_eq!(gathered, vec![0.0, 1.0, 2.0, 3.0]);
    }

    // A timeout: rank 0 calls alone. Its deadline aborts the communicator, naming the ranks
    // that never arrived; every later call fails fast with the same error.
    let lonely = Tensor {
        device: devices[0],
        values: vec![1.0],
    };
    let timed_out = communicator
        .all_reduce_timeout(0, lonely, ReduceOperation::Sum, Duration::from_millis(20))
        .expect_err("rank 0 called alone");
    println!("timeout: {timed_out}");
    let later = Tensor {
        device: devices[1],
        values: vec![1.0],
    };
    assert_eq!(
        communicator
            .all_reduce(1, later, ReduceOperation::Sum)
            .map(|t| t.values),
        Err(timed_out)
    );

    // An abort: a fresh communicator is aborted while two ranks wait for the others.
    let communicator = Arc::new(NativeCommunicator::new(devices.clone(), HostMemory)?);
    let waiting: Vec<_> = (0..2)
        .map(|rank| {
            let communicator = Arc::clone(&communicator);
            let device = devices[rank];
            thread::spawn(move || {
                let tensor = Tensor {
                    device,
                    values: vec![0.0],
                };
                communicator
                    .all_reduce(rank, tensor, ReduceOperation::Max)
                    .map(|t| t.values)
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(20));
    communicator.abort("the job is shutting down");
    for handle in waiting {
        let outcome = handle.join().expect("a rank thread panicked");
        println!("after abort: {outcome:?}");
        assert!(matches!(
            outcome,
            Err(NativeCollectiveError::Aborted { .. })
        ));
    }
    Ok(())
}
