//! The simulated device's census (DESIGN property 9): every value it makes is counted until it is
//! dropped, a planted leak shows up by kind, and every path of a communicator — success,
//! mismatches, shape and invalid-collective errors, a fault at every site, an abort (before and
//! while the plan runs), a timeout (waiting for others, and while the plan runs) — returns the
//! count to zero.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCollectiveDevice,
    NativeCollectiveError, NativeCommunicator, Plan, ReduceOperation, TensorInfo,
};
use ruccl_sim::fault::{FaultPlan, FaultyDevice, Trial, every_site};
use ruccl_sim::{
    ElementType, HostTensors, HostValues, Intercept, Intercepted, SimDevice, SimError, SimPrepared,
    SimTensor, SimWork, ValueCounts,
};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn devices(world: usize) -> Vec<DeviceId> {
    (0..world as u32).map(DeviceId::new).collect()
}

/// What one rank asks for in a generation.
#[derive(Clone)]
struct Call {
    values: HostValues,
    collective: Collective,
    options: CollectiveOptions,
}

fn sum_of(values: HostValues) -> Call {
    Call {
        values,
        collective: Collective::AllReduce(ReduceOperation::Sum),
        options: CollectiveOptions::default(),
    }
}

/// One generation: rank `r` makes `calls[r]` on its own thread (uploading through `device`),
/// and drops its output. Returns what each rank got (`Ok` with the output's values).
fn generation<D: HostTensors>(
    communicator: &NativeCommunicator<D>,
    device: &D,
    calls: Vec<Call>,
) -> Vec<Result<HostValues, NativeCollectiveError>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = calls
            .into_iter()
            .enumerate()
            .map(|(rank, call)| {
                let on = communicator.devices()[rank];
                scope.spawn(move || {
                    let tensor = device.upload(on, &call.values).ok().unwrap();
                    communicator
                        .collective(rank, tensor, call.collective, call.options)
                        .map(|output| device.download(&output).ok().unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn the_census_counts_what_the_device_made_until_it_is_dropped() {
    let device = SimDevice::new();
    let tensor = device
        .upload(DeviceId::new(0), &HostValues::U8(vec![1]))
        .unwrap();
    let outside = SimTensor::new(DeviceId::new(0), HostValues::U8(vec![1]));
    assert!(tensor.is_counted() && !outside.is_counted());
    let copy = tensor.clone();
    let prepared = device.prepare(tensor, DeviceId::new(0)).unwrap();
    let census = device.census();
    assert_eq!(
        census.live,
        ValueCounts {
            tensors: 2,
            prepared: 1,
            works: 0
        }
    );
    let plan = Plan::new(
        Collective::AllReduce(ReduceOperation::Max),
        Algorithm::Ring,
        1,
        1,
    )
    .unwrap();
    let work = device
        .begin(&[DeviceId::new(0)], vec![prepared], &plan)
        .unwrap();
    // `begin` took the prepared input and its tensor's elements into the work.
    assert_eq!(
        device.census().live,
        ValueCounts {
            tensors: 1,
            prepared: 0,
            works: 1
        }
    );
    let outputs = device.finish(work, &plan).unwrap();
    assert_eq!(device.census().live.works, 0);
    drop((outputs, copy, outside));
    device.check_quiescent().unwrap();
    assert_eq!(
        device.census().created,
        ValueCounts {
            tensors: 3,
            prepared: 1,
            works: 1
        }
    );
    // Clones share the census; a device without one counts nothing.
    let quiet = SimDevice::builder().census(false).build();
    let tensor = quiet
        .upload(DeviceId::new(0), &HostValues::I8(vec![1]))
        .unwrap();
    assert!(!tensor.is_counted());
    assert_eq!(quiet.census().created.total(), 0);
}

/// Forgets the last rank's prepared input in `begin` (handing the wrapped device a clone): the
/// leak a communicator path that never drops a prepared input would cause.
#[derive(Clone)]
struct ForgetsAPreparedInput;

impl Intercept<SimDevice> for ForgetsAPreparedInput {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        mut inputs: Vec<SimPrepared>,
        plan: &ruccl_core::Plan,
    ) -> Result<SimWork, SimError> {
        if let Some(last) = inputs.pop() {
            inputs.push(last.clone());
            std::mem::forget(last);
        }
        inner.begin(devices, inputs, plan)
    }
}

#[test]
fn a_planted_leak_of_a_prepared_input_is_reported_by_kind() {
    let device = Intercepted::with(SimDevice::new(), ForgetsAPreparedInput);
    let communicator = NativeCommunicator::new(devices(2), device.clone()).unwrap();
    for _ in 0..3 {
        let calls = vec![sum_of(HostValues::I64(vec![1, 2])); 2];
        for got in generation(&communicator, &device, calls) {
            assert_eq!(got.unwrap(), HostValues::I64(vec![2, 4]));
        }
    }
    let census = device.inner().census();
    // Each forgotten preparation holds its tensor, too.
    assert_eq!(
        census.live,
        ValueCounts {
            tensors: 3,
            prepared: 3,
            works: 0
        }
    );
    let leak = device.inner().check_quiescent().unwrap_err();
    assert_eq!(
        leak.to_string(),
        "the simulated device is not quiescent: 3 tensors, 3 prepared inputs, 0 works still live, 0 dropped twice"
    );
}

#[test]
fn a_leaked_output_is_a_live_tensor() {
    let device = SimDevice::new();
    let communicator = NativeCommunicator::new(devices(1), device.clone()).unwrap();
    let tensor = device
        .upload(DeviceId::new(0), &HostValues::F32(vec![1.0]))
        .unwrap();
    let output = communicator
        .all_reduce(0, tensor, ReduceOperation::Sum)
        .unwrap();
    std::mem::forget(output);
    assert_eq!(device.census().live.tensors, 1);
    assert!(device.check_quiescent().is_err());
}

#[test]
fn success_mismatches_and_shape_errors_leave_nothing_alive() {
    let device = SimDevice::new();
    let communicator = NativeCommunicator::new(devices(3), device.clone()).unwrap();
    let values = |length: usize| HostValues::I32(vec![3; length]);
    let with = |collective, length| Call {
        values: values(length),
        collective,
        options: CollectiveOptions::default(),
    };
    let sum = Collective::AllReduce(ReduceOperation::Sum);
    let scenarios: Vec<(&str, Vec<Call>, bool)> = vec![
        ("success", vec![with(sum, 6); 3], true),
        (
            "every collective",
            vec![with(Collective::ReduceScatter(ReduceOperation::Min), 6); 3],
            true,
        ),
        ("all-gather", vec![with(Collective::AllGather, 2); 3], true),
        (
            "reduction mismatch",
            vec![
                with(sum, 6),
                with(Collective::AllReduce(ReduceOperation::Max), 6),
                with(sum, 6),
            ],
            false,
        ),
        (
            "collective mismatch",
            vec![
                with(sum, 6),
                with(sum, 6),
                with(Collective::Broadcast { root: 0 }, 6),
            ],
            false,
        ),
        (
            "algorithm mismatch",
            vec![
                with(sum, 6),
                Call {
                    options: CollectiveOptions::default().with_algorithm(Algorithm::Direct),
                    ..with(sum, 6)
                },
                with(sum, 6),
            ],
            false,
        ),
        (
            "shape mismatch",
            vec![with(sum, 6), with(sum, 5), with(sum, 6)],
            false,
        ),
        (
            "invalid collective",
            vec![with(Collective::ReduceScatter(ReduceOperation::Sum), 5); 3],
            false,
        ),
        (
            "invalid root",
            vec![with(Collective::Broadcast { root: 7 }, 4); 3],
            false,
        ),
        (
            "halving-doubling off a power of two",
            vec![
                Call {
                    options: CollectiveOptions::default()
                        .with_algorithm(Algorithm::HalvingDoubling),
                    ..with(sum, 6)
                };
                3
            ],
            false,
        ),
    ];
    for (name, calls, succeeds) in scenarios {
        let got = generation(&communicator, &device, calls);
        assert!(
            got.iter().all(|result| result.is_ok() == succeeds),
            "{name}: {got:?}"
        );
        device
            .check_quiescent()
            .unwrap_or_else(|leak| panic!("{name}: {leak}"));
    }
}

#[test]
fn a_fault_at_every_site_leaves_nothing_alive() {
    let world = 3;
    for algorithm in [Algorithm::Ring, Algorithm::Direct] {
        let input = TensorInfo {
            len: 5,
            element: ElementType::I64,
        };
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        let steps = Plan::with_model(sum, algorithm, world, input, &SimDevice::new().model())
            .unwrap()
            .steps()
            .len();
        for spec in every_site(world, steps, 0) {
            let plan = FaultPlan::new(vec![spec]);
            let device = FaultyDevice::new(SimDevice::new(), devices(world), plan.clone());
            let trial = Trial {
                generations: 2,
                length: 5,
                algorithm,
                timeout: Duration::from_secs(60),
            };
            let seen = trial.run(&device, &devices(world)).unwrap();
            trial.check(&plan, &device, &seen).unwrap();
            device
                .inner()
                .check_quiescent()
                .unwrap_or_else(|leak| panic!("`{plan}` via {algorithm}: {leak}"));
        }
    }
}

#[test]
fn an_abort_leaves_nothing_alive() {
    let device = SimDevice::new();
    let communicator = NativeCommunicator::new(devices(3), device.clone()).unwrap();
    std::thread::scope(|scope| {
        // Two ranks deposit and wait; the third never comes; then the communicator is aborted.
        let waiting: Vec<_> = (0..2)
            .map(|rank| {
                let (communicator, device) = (&communicator, &device);
                scope.spawn(move || {
                    let tensor = device
                        .upload(DeviceId::new(rank), &HostValues::U32(vec![1; 4]))
                        .unwrap();
                    communicator.all_reduce(rank as usize, tensor, ReduceOperation::Sum)
                })
            })
            .collect();
        while device.census().live.prepared < 2 {
            std::thread::yield_now();
        }
        communicator.abort("the test gives up");
        for rank in waiting {
            assert!(matches!(
                rank.join().unwrap(),
                Err(NativeCollectiveError::Aborted { .. })
            ));
        }
    });
    // And a later call fails fast, dropping its input.
    let tensor = device
        .upload(DeviceId::new(2), &HostValues::U32(vec![1; 4]))
        .unwrap();
    assert!(
        communicator
            .all_reduce(2, tensor, ReduceOperation::Sum)
            .is_err()
    );
    device.check_quiescent().unwrap();
}

#[test]
fn a_timeout_while_others_are_missing_leaves_nothing_alive() {
    let device = SimDevice::new();
    let communicator = NativeCommunicator::new(devices(2), device.clone()).unwrap();
    let tensor = device
        .upload(DeviceId::new(0), &HostValues::F64(vec![1.0; 3]))
        .unwrap();
    let alone =
        communicator.all_reduce_timeout(0, tensor, ReduceOperation::Sum, Duration::from_millis(20));
    assert!(matches!(alone, Err(NativeCollectiveError::TimedOut { .. })));
    device.check_quiescent().unwrap();
}

/// Holds `exchange` until the test says go, telling it when the plan has started.
#[derive(Clone)]
struct HeldExchange {
    started: mpsc::SyncSender<()>,
    go: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl Intercept<SimDevice> for HeldExchange {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        index: usize,
        step: &ruccl_core::Step,
    ) -> Result<(), SimError> {
        if index == 0 {
            let _ = self.started.send(());
            let _ = self.go.lock().unwrap().recv();
        }
        inner.exchange(work, step)
    }
}

fn held() -> (
    Intercepted<SimDevice, HeldExchange>,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let (started, plan_started) = mpsc::sync_channel(4);
    let (go, release) = mpsc::channel();
    let device = Intercepted::with(
        SimDevice::new(),
        HeldExchange {
            started,
            go: Arc::new(Mutex::new(release)),
        },
    );
    (device, plan_started, go)
}

#[test]
fn an_abort_or_a_timeout_while_the_plan_runs_leaves_nothing_alive() {
    for timeout in [None, Some(Duration::from_millis(50))] {
        let (device, plan_started, go) = held();
        let communicator = NativeCommunicator::new(devices(2), device.clone()).unwrap();
        let options = CollectiveOptions::default().with_algorithm(Algorithm::Ring);
        let options = match timeout {
            Some(timeout) => options.with_timeout(timeout),
            None => options,
        };
        let call = Call {
            values: HostValues::BF16(vec![half::bf16::ONE; 4]),
            collective: Collective::AllReduce(ReduceOperation::Mean),
            options,
        };
        std::thread::scope(|scope| {
            let running = scope.spawn(|| generation(&communicator, &device, vec![call; 2]));
            plan_started.recv().unwrap();
            match timeout {
                // The waiting rank's deadline passes while the plan is held: its timeout aborts
                // the communicator (waited for, not slept for: a loaded machine may not run
                // the waiter within any fixed sleep).
                Some(_) => {
                    let watchdog = std::time::Instant::now() + Duration::from_secs(60);
                    while !communicator.is_aborted() {
                        assert!(std::time::Instant::now() < watchdog, "no rank timed out");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                None => communicator.abort("aborted while the plan runs"),
            }
            go.send(()).unwrap();
            let got = running.join().unwrap();
            assert!(got.iter().all(Result::is_err), "{got:?}");
        });
        device
            .inner()
            .check_quiescent()
            .unwrap_or_else(|leak| panic!("timeout {timeout:?}: {leak}"));
    }
}

#[test]
fn a_panicking_device_leaves_nothing_alive() {
    // The device panics in `begin` after taking the inputs: they unwind with it.
    let device = FaultyDevice::new(SimDevice::new(), devices(2), "begin:panic".parse().unwrap());
    let communicator = NativeCommunicator::new(devices(2), device.clone()).unwrap();
    let tensors: Vec<_> = (0..2)
        .map(|rank| {
            device
                .upload(DeviceId::new(rank), &HostValues::I8(vec![1]))
                .unwrap()
        })
        .collect();
    let got = std::thread::scope(|scope| {
        let handles: Vec<_> = tensors
            .into_iter()
            .enumerate()
            .map(|(rank, tensor)| {
                let communicator = &communicator;
                scope.spawn(move || communicator.all_reduce(rank, tensor, ReduceOperation::Sum))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap().is_err())
            .collect::<Vec<_>>()
    });
    assert_eq!(got, [true, true]);
    assert_eq!(device.inner().census().created.prepared, 2);
    device.inner().check_quiescent().unwrap();
}
