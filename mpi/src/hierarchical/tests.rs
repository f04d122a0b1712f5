//! The hierarchical communicator in one process, on an engine of one process (no MPI): every
//! collective against the core's own communicator over the same ranks, the fault sites, local
//! timeouts and refusals. The job-wide behaviour (several processes, uneven local rank counts)
//! is tested under `mpirun` by `tests/hierarchical.rs`. They run on the simulated device: with
//! the `sim` feature only.
#![cfg(feature = "sim")]

use super::*;
use crate::error::InterProcessError;
use ruccl_core::{Algorithm, ElementType, LinkModel, NativeCollectiveDevice, NativeCommunicator};
use ruccl_host::HostValues;
use ruccl_sim::fault::{GenerationCalls, Outcome as Predicted, every_site};
use ruccl_sim::{FaultPlan, FaultyDevice, FaultyTensor, SimDevice, SimTensor};
use std::sync::Arc;
use std::time::Duration;

/// The inter-process step of a job of one process: every collective hands its input back, a
/// failure comes back as process 0's.
struct Alone;

impl InterProcess for Alone {
    type Buffer = HostValues;

    fn process(&self) -> usize {
        0
    }

    fn processes(&self) -> usize {
        1
    }

    fn collective(
        &self,
        collective: Collective,
        input: Result<HostValues, LocalFailure>,
        _tag: u64,
        _deadline: Option<Instant>,
    ) -> Result<HostValues, InterProcessError> {
        let input = input.map_err(|failure| InterProcessError::Failed {
            process: 0,
            message: failure.message().to_owned(),
        })?;
        match collective {
            Collective::Broadcast { root } if root != 0 => Err(InterProcessError::Failed {
                process: 0,
                message: format!("root {root}"),
            }),
            _ => Ok(input),
        }
    }

    fn agree(
        &self,
        status: Result<(), LocalFailure>,
        _tag: u64,
        _deadline: Option<Instant>,
    ) -> Result<(), InterProcessError> {
        status.map_err(|failure| InterProcessError::Failed {
            process: 0,
            message: failure.message().to_owned(),
        })
    }
}

fn devices(ranks: usize) -> Vec<DeviceId> {
    (0..ranks as u32)
        .map(|index| DeviceId::new(10 + index))
        .collect()
}

/// Rank `rank`'s input: small integers, exact under every operation over a few ranks.
fn input(rank: usize, len: usize, operation: ReduceOperation) -> Vec<i64> {
    (0..len)
        .map(|index| match operation {
            ReduceOperation::Product => [1, -1, 2, 3][(rank + index) % 4],
            _ => ((rank * 7 + index * 3) % 11) as i64 - 5,
        })
        .collect()
}

fn values(tensor: &SimTensor) -> HostValues {
    tensor.values().clone()
}

/// Runs `call` on every local rank, each on its own thread.
fn on_every_rank<T: Send>(ranks: usize, call: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                let call = &call;
                scope.spawn(move || call(rank))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    })
}

#[test]
fn every_collective_matches_the_core_on_one_process() {
    let collectives = ReduceOperation::ALL
        .into_iter()
        .flat_map(|operation| {
            [
                Collective::AllReduce(operation),
                Collective::ReduceScatter(operation),
            ]
        })
        .chain([
            Collective::AllGather,
            Collective::Broadcast { root: 0 },
            Collective::Broadcast { root: 2 },
        ]);
    let collectives: Vec<Collective> = collectives.collect();
    // Both routes of the reductions: every reduction on shards, and none.
    for (ranks, shards_from) in [1, 2, 3]
        .into_iter()
        .flat_map(|r| [(r, 0), (r, usize::MAX)])
    {
        let device = SimDevice::new();
        let options = HierarchicalOptions::default().with_shards_from(shards_from);
        let ours = HierarchicalCommunicator::with_options(
            devices(ranks),
            device.clone(),
            Alone,
            options,
            None,
        )
        .unwrap();
        let core = NativeCommunicator::new(devices(ranks), device.clone()).unwrap();
        for collective in &collectives {
            if matches!(collective, Collective::Broadcast { root } if *root >= ranks) {
                continue;
            }
            // Lengths the local rank count divides (shards) and does not (a local all-reduce).
            for len in [0, 1, 5, 6, 7, 1000] {
                let len = match collective {
                    Collective::ReduceScatter(_) => len * ranks,
                    _ => len,
                };
                let operation = collective.operation().unwrap_or(ReduceOperation::Sum);
                let run = |rank: usize, hierarchical: bool| {
                    let tensor = SimTensor::new(
                        devices(ranks)[rank],
                        HostValues::I64(input(rank, len, operation)),
                    );
                    let options = CollectiveOptions::default();
                    if hierarchical {
                        ours.collective(rank, tensor, *collective, options)
                            .map(|output| values(&output))
                            .map_err(|error| error.to_string())
                    } else {
                        core.collective(rank, tensor, *collective, options)
                            .map(|output| values(&output))
                            .map_err(|error| error.to_string())
                    }
                };
                let got = on_every_rank(ranks, |rank| run(rank, true));
                let expected = on_every_rank(ranks, |rank| run(rank, false));
                assert_eq!(got, expected, "{collective} x {len} on {ranks} ranks");
            }
        }
    }
}

#[test]
fn every_fault_site_reaches_every_rank_as_one_text_and_the_next_generation_works() {
    let ranks = 2;
    let len = 6;
    // The shard route (threshold 0), whose local generation 0 is the reduce-scatter of phase 1
    // and 1 the all-gather of phase 2; the whole route (no threshold): one local all-reduce.
    let routes = [
        (
            0,
            vec![
                (0, Collective::ReduceScatter(ReduceOperation::Sum), len),
                (1, Collective::AllGather, len / ranks),
            ],
        ),
        (
            usize::MAX,
            vec![(0, Collective::AllReduce(ReduceOperation::Sum), len)],
        ),
    ];
    let model: LinkModel = SimDevice::new().link_model();
    for (shards_from, phases) in routes {
        for (generation, collective, phase_len) in phases {
            let requests = vec![(collective, Algorithm::Auto); ranks];
            let inputs = vec![
                TensorInfo {
                    len: phase_len,
                    element: ElementType::I64,
                };
                ranks
            ];
            let calls = GenerationCalls::new(generation, &requests, &inputs, model);
            let steps = calls.plan().unwrap().steps().len();
            for spec in every_site(ranks, steps, generation) {
                let plan = FaultPlan::new(vec![spec]);
                let expected = predicted(&plan, &calls, collective, len, ranks);
                check_fault(&plan, len, ranks, shards_from, expected);
            }
        }
    }
}

/// What every rank of a sum all-reduce of `len` receives when `plan` strikes the local
/// generation `calls` describes, whose collective is `collective`.
fn predicted(
    plan: &FaultPlan,
    calls: &GenerationCalls<'_>,
    collective: Collective,
    len: usize,
    ranks: usize,
) -> Vec<Received> {
    let sum = sum_of(len, ranks);
    match plan.predict(calls) {
        Predicted::Failed(error) => (0..ranks)
            .map(|_| Err(format!("process 0 failed: {error}")))
            .collect(),
        // An armed output of phase 1 panics when the step takes it: staged out where the step
        // needs it (every shard, rank 0's whole result), dropped elsewhere. The lowest such
        // rank's failure, shared.
        Predicted::Delivered { armed }
            if collective != Collective::AllGather && armed.contains(&true) =>
        {
            let rank = armed.iter().position(|armed| *armed).unwrap_or(0);
            let what = if rank == 0 || matches!(collective, Collective::ReduceScatter(_)) {
                "staging its local result out"
            } else {
                "dropping its local result"
            };
            let text = format!(
                "process 0 failed: rank {rank}: {what} panicked: injected panic in drop of an \
                 output on rank {rank} in generation 0"
            );
            (0..ranks).map(|_| Err(text.clone())).collect()
        }
        // An armed all-gather output is the caller's: delivered, armed.
        Predicted::Delivered { armed } => (0..ranks)
            .map(|rank| Ok((sum.clone(), armed[rank], 0)))
            .collect(),
    }
}

/// Runs a sum all-reduce of `len` under `plan` (then a clean one) and compares.
fn check_fault(
    plan: &FaultPlan,
    len: usize,
    ranks: usize,
    shards_from: usize,
    expected: Vec<Received>,
) {
    let device = FaultyDevice::new(SimDevice::new(), devices(ranks), plan.clone());
    let options = HierarchicalOptions::default().with_shards_from(shards_from);
    let ours = HierarchicalCommunicator::with_options(devices(ranks), device, Alone, options, None)
        .unwrap();
    let run = |rank: usize, generation: u64| {
        let values = HostValues::I64(input(rank, len, ReduceOperation::Sum));
        let tensor = FaultyTensor::new(SimTensor::new(devices(ranks)[rank], values));
        match ours.all_reduce(rank, tensor, ReduceOperation::Sum) {
            Ok(mut output) => {
                let armed = output.is_armed();
                output.disarm();
                let sum = output.get().map(values_of).unwrap_or_default();
                Ok((sum, armed, generation))
            }
            Err(error) => Err(error.to_string()),
        }
    };
    let got = on_every_rank(ranks, |rank| run(rank, 0));
    assert_eq!(got, expected, "`{plan}` on {len}");
    let next = on_every_rank(ranks, |rank| run(rank, 1));
    let sum = sum_of(len, ranks);
    let clean: Vec<_> = (0..ranks).map(|_| Ok((sum.clone(), false, 1))).collect();
    assert_eq!(next, clean, "the generation after `{plan}` on {len}");
}

fn sum_of(len: usize, ranks: usize) -> Vec<i64> {
    let inputs: Vec<Vec<i64>> = (0..ranks)
        .map(|rank| input(rank, len, ReduceOperation::Sum))
        .collect();
    (0..len)
        .map(|index| inputs.iter().map(|input| input[index]).sum())
        .collect()
}

/// What a rank of the fault test received: the output's values, whether it was armed, and the
/// round; or the error's text.
type Received = Result<(Vec<i64>, bool, u64), String>;

fn values_of(tensor: &SimTensor) -> Vec<i64> {
    match tensor.values() {
        HostValues::I64(values) => values.clone(),
        _ => Vec::new(),
    }
}

#[test]
fn a_local_rank_that_never_calls_times_out_every_rank_and_poisons() {
    let ours =
        Arc::new(HierarchicalCommunicator::new(devices(2), SimDevice::new(), Alone, None).unwrap());
    let tensor = |rank: usize| SimTensor::new(devices(2)[rank], HostValues::I64(vec![1; 4]));
    let options = CollectiveOptions::default().with_timeout(Duration::from_millis(50));
    let sum = Collective::AllReduce(ReduceOperation::Sum);
    let alone = ours.collective(0, tensor(0), sum, options);
    let expected = HierarchicalError::TimedOut { generation: 0 };
    assert_eq!(alone.err(), Some(expected.clone()));
    assert_eq!(ours.poisoned(), Some(&expected));
    // The late rank, and every later call, gets the same error at once.
    let late = ours.collective(1, tensor(1), sum, CollectiveOptions::default());
    assert_eq!(late.err(), Some(expected.clone()));
    let again = ours.collective(0, tensor(0), sum, options);
    assert_eq!(again.err(), Some(expected));
}

#[test]
fn a_step_slower_than_the_deadline_times_out_every_rank_of_the_process() {
    // Staging a part out takes longer than the deadline: the step, run inside the local
    // collective, outlasts every rank's wait.
    #[derive(Clone)]
    struct Slow(SimDevice);
    impl NativeCollectiveDevice for Slow {
        type Tensor = SimTensor;
        type Prepared = <SimDevice as NativeCollectiveDevice>::Prepared;
        type Work = <SimDevice as NativeCollectiveDevice>::Work;
        type Error = <SimDevice as NativeCollectiveDevice>::Error;
        fn prepare(&self, t: SimTensor, d: DeviceId) -> Result<Self::Prepared, Self::Error> {
            self.0.prepare(t, d)
        }
        fn describe(&self, input: &Self::Prepared) -> TensorInfo {
            self.0.describe(input)
        }
        fn begin(
            &self,
            d: &[DeviceId],
            inputs: Vec<Self::Prepared>,
            plan: &ruccl_core::Plan,
        ) -> Result<Self::Work, Self::Error> {
            self.0.begin(d, inputs, plan)
        }
        fn exchange(&self, w: &mut Self::Work, s: &ruccl_core::Step) -> Result<(), Self::Error> {
            self.0.exchange(w, s)
        }
        fn finish(
            &self,
            w: Self::Work,
            plan: &ruccl_core::Plan,
        ) -> Result<Vec<SimTensor>, Self::Error> {
            self.0.finish(w, plan)
        }
    }
    impl StagingDevice<HostValues> for Slow {
        fn tensor_info(&self, tensor: &SimTensor) -> TensorInfo {
            self.0.tensor_info(tensor)
        }
        fn stage_out(&self, tensor: SimTensor) -> Result<HostValues, Self::Error> {
            std::thread::sleep(Duration::from_millis(200));
            self.0.stage_out(tensor)
        }
        fn stage_in(&self, device: DeviceId, buffer: HostValues) -> Result<SimTensor, Self::Error> {
            self.0.stage_in(device, buffer)
        }
    }
    let ours =
        HierarchicalCommunicator::new(devices(2), Slow(SimDevice::new()), Alone, None).unwrap();
    let options = CollectiveOptions::default().with_timeout(Duration::from_millis(50));
    let got = on_every_rank(2, |rank| {
        let tensor = SimTensor::new(devices(2)[rank], HostValues::I64(vec![1; 4]));
        ours.collective(
            rank,
            tensor,
            Collective::AllReduce(ReduceOperation::Sum),
            options,
        )
        .map(|_| ())
    });
    let expected = Err(HierarchicalError::TimedOut { generation: 0 });
    assert_eq!(got, vec![expected.clone(), expected]);
}

#[test]
fn an_abort_fails_every_rank_and_stays() {
    let ours = HierarchicalCommunicator::new(devices(2), SimDevice::new(), Alone, None).unwrap();
    ours.abort("planted");
    for _ in 0..2 {
        let got = on_every_rank(2, |rank| {
            let tensor = SimTensor::new(devices(2)[rank], HostValues::F32(vec![1.0; 3]));
            ours.all_reduce(rank, tensor, ReduceOperation::Max)
                .map(|_| ())
                .map_err(|error| error.to_string())
        });
        let text = "process 0 failed: the communicator was aborted: planted".to_owned();
        assert_eq!(got, vec![Err(text.clone()), Err(text)]);
    }
}

#[test]
fn local_ranks_asking_for_different_roots_fail_together() {
    // Roots 5 and 6 are outside the job: both local phases broadcast from local rank 0, so the
    // core sees no difference; the exchange does, before it checks the root.
    let ours = HierarchicalCommunicator::new(devices(2), SimDevice::new(), Alone, None).unwrap();
    let got = on_every_rank(2, |rank| {
        let tensor = SimTensor::new(devices(2)[rank], HostValues::F32(vec![1.0; 3]));
        ours.broadcast(rank, tensor, 5 + rank)
            .map(|_| ())
            .map_err(|error| error.to_string())
    });
    let text = "process 0 failed: local ranks asked for different collectives: rank 0: \
                broadcast(root 5) of 3 × float, rank 1: broadcast(root 6) of 3 × float"
        .to_owned();
    assert_eq!(got, vec![Err(text.clone()), Err(text)]);
}

#[test]
fn a_root_outside_the_job_is_one_shared_failure() {
    let ours = HierarchicalCommunicator::new(devices(2), SimDevice::new(), Alone, None).unwrap();
    let got = on_every_rank(2, |rank| {
        let tensor = SimTensor::new(devices(2)[rank], HostValues::F32(vec![1.0; 3]));
        ours.broadcast(rank, tensor, 2)
            .map(|_| ())
            .map_err(|error| error.to_string())
    });
    let text = "process 0 failed: broadcast root 2 is outside the 2 ranks".to_owned();
    assert_eq!(got, vec![Err(text.clone()), Err(text)]);
}

#[test]
fn a_rank_outside_or_busy_is_refused_at_once() {
    let ours = HierarchicalCommunicator::new(devices(1), SimDevice::new(), Alone, None).unwrap();
    let tensor = || SimTensor::new(devices(1)[0], HostValues::F32(vec![1.0]));
    assert_eq!(
        ours.all_reduce(1, tensor(), ReduceOperation::Sum).err(),
        Some(HierarchicalError::RankOutOfRange { rank: 1, ranks: 1 })
    );
    ours.ranks[0].busy.store(true, Ordering::Relaxed);
    assert_eq!(
        ours.all_reduce(0, tensor(), ReduceOperation::Sum).err(),
        Some(HierarchicalError::RankBusy { rank: 0 })
    );
}

#[test]
fn invalid_devices_fail_the_creation() {
    let twice = vec![DeviceId::new(1), DeviceId::new(1)];
    let created = HierarchicalCommunicator::new(twice, SimDevice::new(), Alone, None);
    assert!(matches!(created, Err(HierarchicalError::Setup { .. })));
}
