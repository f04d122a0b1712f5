//! Running a [`Script`] with real threads and checking what every rank received.

use super::model::{Expect, GenerationInputs, predict};
use super::{PhasePlan, Script};
use crate::harness::{Watchdog, pass_injected_panics};
use ruccl_core::sync::{Arc, thread};
use ruccl_core::{
    CollectiveOptions, DeviceId, NativeCollectiveError, NativeCommunicator, NativeCommunicators,
    ReduceOperation,
};
use ruccl_sim::conformance::reference::integer_values;
use ruccl_sim::fault::{FaultPlan, FaultyDevice};
use ruccl_sim::{ElementType, FaultyTensor, HostTensors, HostValues, SimDevice, SimTensor};
use std::time::{Duration, Instant};

type Device = FaultyDevice<SimDevice>;
type Communicator = NativeCommunicator<Device>;

/// The timeout of a straggler's peers: they must time out, and soon.
pub const SHORT_TIMEOUT: Duration = Duration::from_millis(1);
/// The timeout of every other timed call: never reached unless something hangs.
pub const GENEROUS_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a straggler waits for its peers to time out before the run counts as hung.
const STRAGGLER_PATIENCE: Duration = Duration::from_secs(20);
/// The bound on a whole script.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);
/// The reason of an abort before a phase.
pub const ABORT_BEFORE: &str = "fuzz: abort before the phase";
/// The reason of an abort racing the ranks.
pub const ABORT_CONCURRENT: &str = "fuzz: concurrent abort";

/// What one rank received in one generation: its output's values and whether the output was armed
/// to panic on drop, or the error.
type Seen = Result<(HostValues, bool), NativeCollectiveError>;

/// Run `script` and check every property; panics on any violation.
pub fn run_script(script: &Script) {
    pass_injected_panics();
    let _watchdog = Watchdog::arm(SCRIPT_LIMIT, format!("rendezvous script {script:?}"));
    let devices: Vec<DeviceId> = (0..script.world as u32)
        .map(|rank| DeviceId::new(rank + 10))
        .collect();
    let plan = script.plan();
    let device = FaultyDevice::new(SimDevice::new(), devices.clone(), plan.clone());
    let registry = NativeCommunicators::new(device.clone());
    let mut runner = Runner {
        script,
        plan: &plan,
        devices,
        device,
        t: 0,
        communicator_generation: 0,
        previous: None,
    };
    for (index, phase) in script.phases.iter().enumerate() {
        let communicator = match registry.communicator(runner.devices.clone()) {
            Ok(communicator) => communicator,
            Err(error) => panic!("the registry refused {:?}: {error}", runner.devices),
        };
        runner.phase(index, phase, communicator);
    }
}

struct Runner<'a> {
    script: &'a Script,
    plan: &'a FaultPlan,
    devices: Vec<DeviceId>,
    device: Device,
    /// The device generation of the next generation: every rank's count of calls so far.
    t: u64,
    /// Generations the current communicator has closed.
    communicator_generation: u64,
    /// The previous phase's communicator.
    previous: Option<Arc<Communicator>>,
}

impl Runner<'_> {
    fn phase(&mut self, index: usize, phase: &PhasePlan, communicator: Arc<Communicator>) {
        let world = self.script.world;
        let context = format!("phase {index} of {:?}", self.script);
        assert_eq!(communicator.world_size(), world, "{context}");
        assert_eq!(communicator.devices(), self.devices.as_slice(), "{context}");
        if let Some(previous) = &self.previous {
            if previous.is_aborted() {
                assert!(
                    !Arc::ptr_eq(previous, &communicator),
                    "{context}: the registry handed out an aborted communicator again"
                );
                assert!(
                    !communicator.is_aborted(),
                    "{context}: a fresh communicator is aborted"
                );
                self.communicator_generation = 0;
            } else {
                assert!(
                    Arc::ptr_eq(previous, &communicator),
                    "{context}: the registry replaced a healthy communicator"
                );
            }
        }
        self.previous = Some(Arc::clone(&communicator));

        if let Some(k) = phase.bad_rank {
            let rank = world + usize::from(k);
            let tensor = self.upload(0, self.script.element_type, &[0]);
            let error = communicator
                .all_reduce(rank, tensor, ReduceOperation::Sum)
                .err();
            assert_eq!(
                error,
                Some(NativeCollectiveError::RankOutOfRange { rank, world }),
                "{context}: rank {rank}"
            );
        }
        if phase.abort_before {
            communicator.abort(ABORT_BEFORE);
        }

        let first_t = self.t;
        let seen = self.run_ranks(phase, &communicator, first_t);
        let terminal = self.check_phase(&context, phase, &communicator, first_t, &seen);

        self.t += phase.generations.len() as u64;
        if phase.sticky_probe && phase.ends_aborted() {
            let Some(terminal) = terminal else {
                panic!("{context}: the phase should have ended aborted");
            };
            for rank in 0..world {
                let tensor = self.upload(rank, self.script.element_type, &[0]);
                let error = communicator
                    .all_reduce_timeout(rank, tensor, ReduceOperation::Max, GENEROUS_TIMEOUT)
                    .err();
                assert_eq!(
                    error.as_ref(),
                    Some(&terminal),
                    "{context}: rank {rank} calling the aborted communicator again"
                );
            }
            self.t += 1;
        }
        // Every rank has returned and dropped what it received: whatever failed, every value
        // the device made is gone, each dropped once (DESIGN.md property 9).
        if let Err(live) = self.device.inner().check_quiescent() {
            panic!("{context}: values outlive the phase: {live}");
        }
    }

    fn upload(
        &self,
        rank: usize,
        element_type: ElementType,
        values: &[i64],
    ) -> FaultyTensor<SimTensor> {
        let values = integer_values(element_type, values);
        match self.device.upload(self.devices[rank], &values) {
            Ok(tensor) => tensor,
            Err(error) => panic!("upload on rank {rank}: {error}"),
        }
    }

    /// One thread per rank runs the phase's generations back to back (plus an aborter, if the
    /// phase races one). `seen[g][r]`.
    fn run_ranks(
        &self,
        phase: &PhasePlan,
        communicator: &Communicator,
        first_t: u64,
    ) -> Vec<Vec<Seen>> {
        let world = self.script.world;
        let per_rank: Vec<Vec<Seen>> = thread::scope(|scope| {
            let aborter = phase.concurrent_abort.map(|yields| {
                scope.spawn(move || {
                    for _ in 0..yields {
                        thread::yield_now();
                    }
                    communicator.abort(ABORT_CONCURRENT);
                })
            });
            let ranks: Vec<_> = (0..world)
                .map(|rank| {
                    scope.spawn(move || self.rank_thread(rank, phase, communicator, first_t))
                })
                .collect();
            let seen = ranks
                .into_iter()
                .enumerate()
                .map(|(rank, handle)| match handle.join() {
                    Ok(seen) => seen,
                    Err(_) => panic!("rank {rank}'s thread panicked"),
                })
                .collect();
            // Joined explicitly, not by the scope: the scope returns once a thread's closure has
            // returned, before the thread has exited and freed its handle, which LeakSanitizer
            // would then report.
            if let Some(aborter) = aborter {
                if aborter.join().is_err() {
                    panic!("the aborting thread panicked");
                }
            }
            seen
        });
        (0..phase.generations.len())
            .map(|index| per_rank.iter().map(|seen| seen[index].clone()).collect())
            .collect()
    }

    fn rank_thread(
        &self,
        rank: usize,
        phase: &PhasePlan,
        communicator: &Communicator,
        first_t: u64,
    ) -> Vec<Seen> {
        phase
            .generations
            .iter()
            .enumerate()
            .map(|(index, generation)| {
                let t = first_t + index as u64;
                if let Some((stalled, yields)) = generation.stall {
                    if stalled == rank {
                        for _ in 0..yields {
                            thread::yield_now();
                        }
                    }
                }
                if generation.straggler == Some(rank) {
                    wait_until_aborted(communicator, rank, t);
                }
                let (element_type, values) = self.script.input(t, rank, generation);
                let tensor = self.upload(rank, element_type, &values);
                let request = generation.request_of(rank);
                let options = CollectiveOptions::default().with_algorithm(request.algorithm);
                let options = match generation.straggler {
                    Some(straggler) if straggler != rank => options.with_timeout(SHORT_TIMEOUT),
                    _ if generation.untimed => options,
                    _ => options.with_timeout(GENEROUS_TIMEOUT),
                };
                let result = communicator.collective(rank, tensor, request.collective, options);
                result.map(|mut output| {
                    let armed = output.is_armed();
                    output.disarm();
                    match self.device.download(&output) {
                        Ok(values) => (values, armed),
                        Err(error) => panic!("rank {rank} got an output it cannot read: {error}"),
                    }
                })
            })
            .collect()
    }

    fn predictions(&self, phase: &PhasePlan, first_t: u64) -> Vec<Expect> {
        let world = self.script.world;
        phase
            .generations
            .iter()
            .enumerate()
            .map(|(index, generation)| {
                let t = first_t + index as u64;
                let inputs: Vec<HostValues> = (0..world)
                    .map(|rank| {
                        let (element_type, values) = self.script.input(t, rank, generation);
                        integer_values(element_type, &values)
                    })
                    .collect();
                predict(
                    self.plan,
                    &GenerationInputs {
                        device_generation: t,
                        communicator_generation: self.communicator_generation + index as u64,
                        requests: (0..world)
                            .map(|rank| {
                                let request = generation.request_of(rank);
                                (request.collective, request.algorithm)
                            })
                            .collect(),
                        inputs: &inputs,
                        model: self.device.inner().model(),
                    },
                )
            })
            .collect()
    }

    /// Every generation as predicted up to a switch, then the one abort error that won for every
    /// rank of every later generation. Returns the abort error the communicator holds, if any.
    fn check_phase(
        &mut self,
        context: &str,
        phase: &PhasePlan,
        communicator: &Communicator,
        first_t: u64,
        seen: &[Vec<Seen>],
    ) -> Option<NativeCollectiveError> {
        let predictions = self.predictions(phase, first_t);
        let straggler_at = phase
            .generations
            .iter()
            .position(|generation| generation.straggler.is_some());
        let mut terminal: Option<NativeCollectiveError> = None;
        let mut switch = None;
        for (index, (row, expect)) in seen.iter().zip(&predictions).enumerate() {
            let here = || {
                format!(
                    "{context}\ngeneration {index} (device generation {}): seen {row:?}\npredicted {expect:?}",
                    first_t + index as u64
                )
            };
            if let Some(terminal) = &terminal {
                for (rank, got) in row.iter().enumerate() {
                    assert_eq!(
                        got.as_ref().err(),
                        Some(terminal),
                        "{}\nrank {rank} after the abort",
                        here()
                    );
                }
                continue;
            }
            if matches_prediction(row, expect) {
                continue;
            }
            let Some(Err(error)) = row.first() else {
                panic!(
                    "{}\nrank 0 got an output, but not the predicted one",
                    here()
                );
            };
            for (rank, got) in row.iter().enumerate() {
                assert_eq!(
                    got.as_ref().err(),
                    Some(error),
                    "{}\nagreement: rank {rank} differs from rank 0",
                    here()
                );
            }
            let allowed = match error {
                NativeCollectiveError::Aborted { reason } if phase.abort_before => {
                    reason == ABORT_BEFORE
                }
                NativeCollectiveError::Aborted { reason } => {
                    phase.concurrent_abort.is_some() && reason == ABORT_CONCURRENT
                }
                // The first peer to time out waits either to enter the straggler's generation
                // (while some rank still leaves the one before) or for the straggler to arrive:
                // either way some rank is missing.
                NativeCollectiveError::TimedOut {
                    rank,
                    generation,
                    timeout,
                    missing,
                } => {
                    !phase.abort_before
                        && !missing.is_empty()
                        && straggler_at == Some(index)
                        && phase.generations[index].straggler != Some(*rank)
                        && *generation == self.communicator_generation + index as u64
                        && *timeout == SHORT_TIMEOUT
                }
                _ => false,
            };
            assert!(
                allowed,
                "{}\nan error other than the predicted one or an abort that may win here",
                here()
            );
            switch = Some(index);
            terminal = Some(error.clone());
        }
        if phase.abort_before {
            assert_eq!(
                switch,
                Some(0),
                "{context}: an abort before the phase fails all of it"
            );
        }
        if let Some(straggler_at) = straggler_at {
            assert!(
                switch.is_some_and(|switch| switch <= straggler_at),
                "{context}: the straggler's generation {straggler_at} should have timed out"
            );
        }
        let aborted = communicator.is_aborted();
        assert_eq!(aborted, phase.ends_aborted(), "{context}: is_aborted()");
        if aborted && terminal.is_none() {
            // Every generation was delivered before the concurrent abort landed.
            terminal = Some(NativeCollectiveError::Aborted {
                reason: ABORT_CONCURRENT.to_owned(),
            });
        }
        self.communicator_generation += switch.unwrap_or(phase.generations.len()) as u64;
        terminal
    }
}

/// Whether every rank got what `expect` says.
fn matches_prediction(row: &[Seen], expect: &Expect) -> bool {
    match expect {
        Expect::Ok { .. } => row.iter().enumerate().all(
            |(rank, seen)| matches!(seen, Ok((got, armed)) if expect.admits(rank, got, *armed)),
        ),
        Expect::Err(error) => row.iter().all(|seen| seen.as_ref().err() == Some(error)),
    }
}

/// A straggler arrives only after its peers gave up on it.
fn wait_until_aborted(communicator: &Communicator, rank: usize, t: u64) {
    let started = Instant::now();
    while !communicator.is_aborted() {
        assert!(
            started.elapsed() < STRAGGLER_PATIENCE,
            "straggler rank {rank} in device generation {t}: its peers never timed out"
        );
        thread::sleep(Duration::from_micros(50));
    }
}
