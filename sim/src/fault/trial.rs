//! A fault trial: generations of `i64` sums through one communicator over a
//! [`FaultyDevice`](super::FaultyDevice), one thread per rank, recording what every rank
//! received — the harness the fault tests of every device share (the simulated device's here,
//! the CUDA executor's on hardware), checked against the [predictor](FaultPlan::predict).

use super::predict::{GenerationCalls, Outcome};
use super::{FaultPlan, FaultyDevice};
use crate::contain::{call, release};
use crate::host::{HostTensors, HostValues};
use ruccl_core::sync::{Arc, thread};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, ElementType, LinkModel,
    NativeCollectiveDevice, NativeCommunicator, ReduceOperation, TensorInfo,
};
use std::time::Duration;

/// What one rank received from one all-reduce of a trial.
#[derive(Clone, Debug, PartialEq)]
pub enum Received {
    /// The output's values, and whether dropping the output panicked.
    Output {
        /// The downloaded output.
        values: HostValues,
        /// Whether the output's `Drop` panicked (a `drop:what=output` fault).
        drop_panicked: bool,
    },
    /// The error's text.
    Error(String),
    /// The harness itself failed around the call (an upload or a download); the text says how.
    Harness(String),
}

/// Rank `rank`'s input in `generation`: `length` `i64` elements, `rank·100 + index +
/// 1000·generation`, so an output betrays the generation and the ranks it came from.
pub fn trial_input(rank: usize, generation: u64, length: usize) -> HostValues {
    HostValues::I64(
        (0..length)
            .map(|index| element(rank, generation, index))
            .collect(),
    )
}

/// The sum of every rank's [`trial_input`] in `generation`, over `world` ranks.
pub fn trial_sum(world: usize, generation: u64, length: usize) -> HostValues {
    HostValues::I64(
        (0..length)
            .map(|index| {
                (0..world)
                    .map(|rank| element(rank, generation, index))
                    .sum()
            })
            .collect(),
    )
}

fn element(rank: usize, generation: u64, index: usize) -> i64 {
    (rank * 100 + index) as i64 + generation as i64 * 1000
}

/// What to run: `generations` all-reduce sums of `length` elements with `algorithm`, each rank
/// waiting at most `timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trial {
    /// Generations every rank runs.
    pub generations: u64,
    /// Elements per rank.
    pub length: usize,
    /// The algorithm every rank asks for (`Ring` has the most steps to fault).
    pub algorithm: Algorithm,
    /// How long a rank waits for the others before the communicator aborts.
    pub timeout: Duration,
}

impl Trial {
    /// Run the trial on `device` for ranks on `devices` (rank `r` on `devices[r]`): a new
    /// communicator, one thread per rank. `received[g][r]` is what rank `r` got in generation `g`.
    /// An armed output is dropped, contained, and reported as `drop_panicked`.
    pub fn run<D: HostTensors>(
        &self,
        device: &FaultyDevice<D>,
        devices: &[DeviceId],
    ) -> Result<Vec<Vec<Received>>, String> {
        let communicator = NativeCommunicator::new(devices.to_vec(), device.clone())
            .map_err(|error| format!("cannot make the communicator: {error}"))?;
        let communicator = Arc::new(communicator);
        let trial = *self;
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, &on)| {
                let (device, communicator) = (device.clone(), Arc::clone(&communicator));
                thread::spawn(move || {
                    (0..trial.generations)
                        .map(|generation| trial.one(&device, &communicator, rank, on, generation))
                        .collect::<Vec<Received>>()
                })
            })
            .collect();
        let mut per_rank = Vec::with_capacity(handles.len());
        for (rank, handle) in handles.into_iter().enumerate() {
            per_rank.push(
                handle
                    .join()
                    .map_err(|_| format!("rank thread {rank} of the trial panicked"))?,
            );
        }
        Ok((0..self.generations as usize)
            .map(|generation| {
                per_rank
                    .iter()
                    .filter_map(|received| received.get(generation).cloned())
                    .collect()
            })
            .collect())
    }

    fn one<D: HostTensors>(
        &self,
        device: &FaultyDevice<D>,
        communicator: &NativeCommunicator<FaultyDevice<D>>,
        rank: usize,
        on: DeviceId,
        generation: u64,
    ) -> Received {
        let input = trial_input(rank, generation, self.length);
        let tensor = match call("upload", || device.upload(on, &input)) {
            Ok(tensor) => tensor,
            Err(message) => return Received::Harness(message),
        };
        let options = CollectiveOptions::default()
            .with_algorithm(self.algorithm)
            .with_timeout(self.timeout);
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        let output = match communicator.collective(rank, tensor, sum, options) {
            Ok(output) => output,
            Err(error) => return Received::Error(error.to_string()),
        };
        match call("download", || device.download(&output)) {
            Ok(values) => Received::Output {
                values,
                drop_panicked: release("drop of the output", output).is_err(),
            },
            Err(message) => {
                let _ = release("drop of the output", output);
                Received::Harness(message)
            }
        }
    }

    /// Whether `received` is what `plan` predicts for every generation on `device`: the sum with
    /// the predicted outputs armed, or the predicted error on every rank. `Err` names the first
    /// generation and rank that differ.
    pub fn check<D: NativeCollectiveDevice>(
        &self,
        plan: &FaultPlan,
        device: &FaultyDevice<D>,
        received: &[Vec<Received>],
    ) -> Result<(), String> {
        let model: LinkModel = device.link_model();
        for (generation, ranks) in received.iter().enumerate() {
            let requests =
                vec![(Collective::AllReduce(ReduceOperation::Sum), self.algorithm); ranks.len()];
            let input = TensorInfo {
                len: self.length,
                element: ElementType::I64,
            };
            let inputs = vec![input; ranks.len()];
            let calls = GenerationCalls::new(generation as u64, &requests, &inputs, model);
            let outcome = plan.predict(&calls);
            for (rank, got) in ranks.iter().enumerate() {
                let right = match &outcome {
                    Outcome::Delivered { armed } => {
                        *got == Received::Output {
                            values: trial_sum(ranks.len(), generation as u64, self.length),
                            drop_panicked: armed.get(rank).copied().unwrap_or(false),
                        }
                    }
                    Outcome::Failed(error) => *got == Received::Error(error.to_string()),
                };
                if !right {
                    return Err(format!(
                        "`{plan}`: generation {generation}, rank {rank}: predicted {outcome:?}, \
                         received {got:?}"
                    ));
                }
            }
        }
        Ok(())
    }
}
