//! The perf harness is generic over the device: `#wrong` is 0 on a correct device and counts the
//! corrupted elements — and the all-reduce ranks whose bits differ from rank 0's — of a broken
//! one, for every collective, in the sweep and in scenarios alike; the sweep runs nccl-tests'
//! sequence of collectives; scenarios stream with bounded memory; fault plans are checked
//! against what the decorator really does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use half::{bf16, f16};
use ruccl_core::{Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation};
use ruccl_perf::collectives::{self, PerfCollective};
use ruccl_perf::probe::Probe;
use ruccl_perf::scenario::faults::FaultRun;
use ruccl_perf::scenario::{GenerationRow, ScenarioConfig, check_faults, run_scenario};
use ruccl_perf::stop::{Stop, StopReason};
use ruccl_perf::sweep::{
    Instruments, PerfRow, Places, Sizes, Step, SweepConfig, SweepError, SweepEvent, sweep,
};
use ruccl_sim::fault::{FaultPlan, RandomPlan};
use ruccl_sim::{
    ElementType, FaultyDevice, HostTensors, HostValues, Intercept, Intercepted, SimDevice,
    SimError, SimTensor,
};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// How a broken device breaks rank `rank`'s output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// Add one to element 0.
    Bump,
    /// Turn every +0.0 into -0.0: the same values, other bits.
    NegateZeros,
}

/// Computes like the simulated device, then damages rank `rank`'s output.
#[derive(Clone, Debug)]
struct Broken {
    rank: usize,
    damage: Damage,
}

fn broken(rank: usize, damage: Damage, in_place: bool) -> Intercepted<SimDevice, Broken> {
    let device = SimDevice::builder().in_place(in_place).build();
    Intercepted::with(device, Broken { rank, damage })
}

fn damaged(values: HostValues, damage: Damage) -> HostValues {
    fn first<T: Copy>(mut values: Vec<T>, change: impl Fn(T) -> T) -> Vec<T> {
        if let Some(first) = values.first_mut() {
            *first = change(*first);
        }
        values
    }
    match (values, damage) {
        (HostValues::F32(v), Damage::NegateZeros) => HostValues::F32(
            v.into_iter()
                .map(|x| if x == 0.0 { -0.0 } else { x })
                .collect(),
        ),
        (HostValues::F32(v), _) => HostValues::F32(first(v, |x| x + 1.0)),
        (HostValues::F64(v), _) => HostValues::F64(first(v, |x| x + 1.0)),
        (HostValues::F16(v), _) => HostValues::F16(first(v, |x| f16::from_f32(x.to_f32() + 1.0))),
        (HostValues::BF16(v), _) => {
            HostValues::BF16(first(v, |x| bf16::from_f32(x.to_f32() + 1.0)))
        }
        (HostValues::I32(v), _) => HostValues::I32(first(v, |x| x + 1)),
        (HostValues::I64(v), _) => HostValues::I64(first(v, |x| x + 1)),
        (HostValues::I8(v), _) => HostValues::I8(first(v, |x| x.wrapping_add(1))),
        (HostValues::U8(v), _) => HostValues::U8(first(v, |x| x.wrapping_add(1))),
        (HostValues::U32(v), _) => HostValues::U32(first(v, |x| x.wrapping_add(1))),
        (HostValues::U64(v), _) => HostValues::U64(first(v, |x| x.wrapping_add(1))),
        (other, _) => other,
    }
}

impl Intercept<SimDevice> for Broken {
    fn finish(
        &self,
        inner: &SimDevice,
        work: ruccl_sim::SimWork,
        plan: &Plan,
    ) -> Result<Vec<SimTensor>, SimError> {
        let mut outputs = inner.finish(work, plan)?;
        if let Some(output) = outputs.get_mut(self.rank) {
            let device = output.device();
            let values =
                std::mem::replace(output, SimTensor::new(device, HostValues::F32(Vec::new())));
            *output = SimTensor::new(device, damaged(values.into_values(), self.damage));
        }
        Ok(outputs)
    }
}

fn sim_places() -> Places<SimDevice> {
    Places {
        out_of_place: SimDevice::builder().in_place(false).build(),
        in_place: SimDevice::builder().in_place(true).build(),
    }
}

fn small(collective: &'static PerfCollective, element_type: ElementType) -> SweepConfig {
    SweepConfig {
        collective,
        element_type,
        world: 3,
        sizes: Sizes {
            min: 24,
            max: 4096,
            step: Step::Factor(8),
        },
        iterations: 2,
        warmup: 1,
        ..SweepConfig::default()
    }
}

fn measure<D: HostTensors>(places: &Places<D>, configs: &[SweepConfig]) -> Vec<PerfRow> {
    try_measure(places, configs, &Instruments::default()).unwrap()
}

fn try_measure<D: HostTensors>(
    places: &Places<D>,
    configs: &[SweepConfig],
    instruments: &Instruments,
) -> Result<Vec<PerfRow>, SweepError> {
    let rows = Mutex::new(Vec::new());
    sweep(places, configs, instruments, &|event| {
        if let SweepEvent::Measured(row) = event {
            rows.lock().unwrap().push(row.clone());
        }
    })?;
    Ok(rows.into_inner().unwrap())
}

#[test]
fn a_correct_device_has_no_wrong_values_in_any_collective_type_or_operation() {
    let mut configs = Vec::new();
    for collective in collectives::ALL {
        for element_type in ElementType::ALL {
            let operations: &[ReduceOperation] = if collective.reduces() {
                &ReduceOperation::ALL
            } else {
                &[ReduceOperation::Sum]
            };
            for &operation in operations {
                configs.push(SweepConfig {
                    operation,
                    root: 2,
                    ..small(collective, element_type)
                });
            }
        }
    }
    let rows = measure(&sim_places(), &configs);
    assert_eq!(rows.len(), configs.len() * 3, "24, 192, 1536 bytes each");
    for row in rows {
        assert_eq!(row.out_of_place.wrong, Some(0), "{row:?}");
        assert_eq!(row.in_place.wrong, Some(0), "{row:?}");
    }
}

#[test]
fn a_broken_device_has_wrong_elements_in_every_collective_type_and_placement() {
    let kinds = collectives::ALL
        .into_iter()
        .flat_map(|collective| ElementType::ALL.into_iter().map(move |ty| (collective, ty)));
    for (collective, element_type) in kinds {
        let places = Places {
            out_of_place: broken(1, Damage::Bump, false),
            in_place: broken(1, Damage::Bump, true),
        };
        let config = SweepConfig {
            root: 1,
            ..small(collective, element_type)
        };
        for row in measure(&places, std::slice::from_ref(&config)) {
            // One corrupted element; for an all-reduce, rank 1's bits also differ from rank 0's.
            let expected = if collective.nccl_name == "all_reduce" {
                2
            } else {
                1
            };
            assert_eq!(
                row.out_of_place.wrong,
                Some(expected),
                "{collective} {row:?}"
            );
            assert_eq!(row.in_place.wrong, Some(expected), "{collective} {row:?}");
        }
        let unchecked = SweepConfig {
            checks: 0,
            ..config
        };
        let rows = measure(&places, &[unchecked]);
        assert!(rows.iter().all(|row| row.out_of_place.wrong.is_none()));
    }
}

#[test]
fn ranks_whose_all_reduce_bits_differ_from_rank_0s_count_as_wrong() {
    // -0.0 == +0.0 as values: only the bits tell rank 2 apart. The sum pattern has zeros.
    let places = Places {
        out_of_place: broken(2, Damage::NegateZeros, false),
        in_place: broken(2, Damage::NegateZeros, true),
    };
    let config = SweepConfig {
        sizes: Sizes {
            min: 4096,
            max: 4096,
            step: Step::Factor(2),
        },
        ..small(&collectives::ALL_REDUCE, ElementType::F32)
    };
    let rows = measure(&places, &[config]);
    assert_eq!(rows[0].out_of_place.wrong, Some(1), "{rows:?}");
    assert_eq!(rows[0].in_place.wrong, Some(1), "{rows:?}");
}

#[test]
fn sizes_and_bus_bandwidth_follow_each_collective() {
    for collective in collectives::ALL {
        let config = SweepConfig {
            world: 4,
            sizes: Sizes {
                min: 100,
                max: 100,
                step: Step::Factor(2),
            },
            ..small(collective, ElementType::F32)
        };
        let row = &measure(&sim_places(), std::slice::from_ref(&config))[0];
        // 25 floats; split over 4 ranks for every collective but all-reduce, broadcast and
        // reduce: 6 each.
        let (bytes, count) = match collective.nccl_name {
            "all_reduce" | "broadcast" | "reduce" => (100, 25),
            _ => (96, 6),
        };
        assert_eq!((row.bytes, row.count), (bytes, count), "{collective}");
        let factor = config.collective().bus_factor(4);
        let measured = &row.in_place;
        assert!((row.busbw(measured) - row.algbw(measured) * factor).abs() < 1e-12);
        assert_eq!(row.root, if collective.rooted() { 0 } else { -1 });
    }
}

/// Computes like the simulated device, calling `hook` with each generation's plan first.
#[derive(Clone)]
struct BeforeBegin {
    hook: std::sync::Arc<dyn Fn(&Plan) + Send + Sync>,
}

fn before_begin(hook: impl Fn(&Plan) + Send + Sync + 'static) -> BeforeBegin {
    BeforeBegin {
        hook: std::sync::Arc::new(hook),
    }
}

impl Intercept<SimDevice> for BeforeBegin {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        inputs: Vec<ruccl_sim::SimPrepared>,
        plan: &Plan,
    ) -> Result<ruccl_sim::SimWork, SimError> {
        (self.hook)(plan);
        inner.begin(devices, inputs, plan)
    }
}

#[test]
fn the_sweep_runs_nccl_tests_sequence_of_collectives() {
    // Warm-up at every size from the smallest to the largest, doubling (out of place), as
    // nccl-tests 2.16.8 on; per size and placement one sync, the timed iterations, the checks.
    // Each generation's input length, in order.
    let lengths = std::sync::Arc::new(Mutex::new(Vec::new()));
    let seen = lengths.clone();
    let device = Intercepted::with(
        SimDevice::new(),
        before_begin(move |plan| seen.lock().unwrap().push(plan.input_len())),
    );
    let places = Places {
        out_of_place: device.clone(),
        in_place: device,
    };
    let config = SweepConfig {
        sizes: Sizes {
            min: 16,
            max: 64,
            step: Step::Factor(4),
        },
        iterations: 3,
        warmup: 2,
        checks: 2,
        ..small(&collectives::ALL_REDUCE, ElementType::F32)
    };
    measure(&places, &[config]);
    let seen = lengths.lock().unwrap().clone();
    let per_place = |n: usize| vec![n; 1 + 3 + 2];
    // 16, 32 and 64 bytes of floats, twice each.
    let mut expected = vec![4, 4, 8, 8, 16, 16];
    for n in [4, 16] {
        expected.extend(per_place(n));
        expected.extend(per_place(n));
    }
    assert_eq!(seen, expected);
}

#[test]
fn checking_stops_at_the_first_check_that_finds_something() {
    let places = Places {
        out_of_place: broken(0, Damage::Bump, false),
        in_place: broken(0, Damage::Bump, true),
    };
    let config = SweepConfig {
        sizes: Sizes {
            min: 64,
            max: 64,
            step: Step::Factor(2),
        },
        iterations: 1,
        warmup: 0,
        checks: 5,
        ..small(&collectives::ALL_REDUCE, ElementType::F32)
    };
    let ledger = places.out_of_place.inner().ledger().clone();
    let rows = measure(&places, &[config]);
    // Rank 0's one damaged element, and ranks 1 and 2, whose bits differ from rank 0's.
    assert_eq!(rows[0].out_of_place.wrong, Some(3));
    // Sync, one timed, one check: the first check found the damage.
    assert_eq!(ledger.recorded(), 3);
}

#[test]
fn the_in_place_group_works_in_the_inputs_own_allocation() {
    let places = sim_places();
    let address = |values: &HostValues| match values {
        HostValues::F32(values) => values.as_ptr() as usize,
        _ => 0,
    };
    for (device, shares) in [(&places.in_place, true), (&places.out_of_place, false)] {
        let communicator =
            ruccl_core::NativeCommunicator::new(vec![DeviceId::new(0)], device.clone()).unwrap();
        let input = device
            .upload(DeviceId::new(0), &HostValues::F32(vec![1.0; 1024]))
            .unwrap();
        let before = address(input.values());
        let output = communicator
            .all_reduce(0, input, ReduceOperation::Sum)
            .unwrap();
        assert_eq!(address(output.values()) == before, shares);
    }
}

#[test]
fn a_failing_device_fails_the_sweep_with_the_shared_error() {
    let ranks: Vec<DeviceId> = (0..3).map(DeviceId::new).collect();
    let plan: FaultPlan = "exchange:gen=4:error".parse().unwrap();
    let faulty = FaultyDevice::new(SimDevice::new(), ranks, plan);
    let places = Places {
        out_of_place: faulty.clone(),
        in_place: faulty,
    };
    let config = small(&collectives::ALL_REDUCE, ElementType::F32);
    let error = try_measure(&places, &[config], &Instruments::default()).unwrap_err();
    assert!(matches!(&error, SweepError::Collective { .. }), "{error:?}");
    assert!(
        error.to_string().contains("injected error in exchange"),
        "{error}"
    );
}

#[test]
fn a_stop_request_ends_the_sweep_before_its_next_collective() {
    let stop = Stop::new();
    stop.request(StopReason::Interrupted);
    let instruments = Instruments {
        stop,
        ..Instruments::default()
    };
    let config = small(&collectives::ALL_GATHER, ElementType::F32);
    let error = try_measure(&sim_places(), &[config], &instruments).unwrap_err();
    assert!(
        matches!(error, SweepError::Stopped(StopReason::Interrupted)),
        "{error:?}"
    );
}

fn scenario(world: usize, generations: u64) -> ScenarioConfig {
    ScenarioConfig {
        world,
        length: 96,
        generations,
        ..ScenarioConfig::default()
    }
}

fn rows_of<D: HostTensors>(device: &D, config: &ScenarioConfig) -> Vec<GenerationRow> {
    let mut rows = Vec::new();
    let probe = Probe::new(config.world, true, None);
    run_scenario(device, config, &probe, &Stop::new(), &mut |row| {
        rows.push(row.clone())
    })
    .unwrap();
    rows
}

#[test]
fn scenarios_check_outputs_of_every_collective_on_any_device() {
    for collective in collectives::ALL {
        // Rank 1 is damaged, and the root: a reduce or gather delivers only there.
        let config = ScenarioConfig {
            collective: collective.collective(ReduceOperation::Sum, 1),
            ..scenario(3, 3)
        };
        let good = rows_of(&SimDevice::new(), &config);
        let bad = rows_of(&broken(1, Damage::Bump, true), &config);
        assert_eq!(good.len(), 3);
        for (good, bad) in good.iter().zip(&bad) {
            assert_eq!(good.ok_ranks, [0, 1, 2]);
            assert_eq!(good.wrong_values(), 0, "{collective}");
            assert!(good.agreed() && bad.agreed());
            let expected = if collective.nccl_name == "all_reduce" {
                2
            } else {
                1
            };
            assert_eq!(bad.wrong_values(), expected, "{collective}");
            // No rank can move less than the lower bound (the busiest rank sends or receives).
            let bound = config.lower_bound();
            assert!(good.sent as f64 >= bound, "{collective}: {good:?}");
        }
    }
}

#[test]
fn scenario_rows_come_in_order_as_generations_complete_with_bounded_state() {
    let config = scenario(3, 500);
    let probe = Probe::new(3, true, None);
    let mut generations = Vec::new();
    let summary = run_scenario(
        &SimDevice::new(),
        &config,
        &probe,
        &Stop::new(),
        &mut |row| generations.push(row.generation),
    )
    .unwrap();
    assert_eq!(generations, (0..500).collect::<Vec<u64>>());
    assert_eq!((summary.generations, summary.ok), (500, 500));
    // Ranks of a live communicator are at most a generation or two apart.
    assert!(summary.peak_pending <= 3, "{summary:?}");
}

#[test]
fn fault_checks_agree_with_what_the_decorator_fires() {
    // Every spec the check accepts fires at least once on the real decorator, and a plan with a
    // spec that fires nowhere is refused.
    let mut accepted = 0;
    for seed in 0..60 {
        let world = 2 + (seed as usize % 3);
        let generations = 4;
        let config = ScenarioConfig {
            algorithm: ruccl_core::Algorithm::Ring,
            timeout: std::time::Duration::from_secs(20),
            ..scenario(world, generations)
        };
        let steps = Plan::new(config.collective, config.algorithm, world, config.length)
            .unwrap()
            .steps()
            .len();
        let plan = FaultPlan::random(RandomPlan {
            seed,
            world,
            steps,
            generations,
            faults: 3,
        });
        // Random plans name a rank on every site; keep it only where a call belongs to a rank.
        let plan = plan
            .specs()
            .iter()
            .map(|spec| {
                let mut spec = *spec;
                if !spec.site.is_per_rank() {
                    spec.rank = None;
                }
                spec
            })
            .fold(FaultPlan::none(), FaultPlan::with);
        let run = FaultRun {
            world,
            generations,
            steps,
        };
        let ranks: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
        let faulty = FaultyDevice::new(SimDevice::new(), ranks, plan.clone());
        rows_of(&faulty, &config);
        let fired: BTreeSet<usize> = faulty
            .fired()
            .iter()
            .filter_map(|fired| plan.specs().iter().position(|spec| *spec == fired.spec))
            .collect();
        let all_fired = fired.len() == plan.specs().len();
        let checked = check_faults(&plan, run);
        match &checked {
            Ok(()) => {
                accepted += 1;
                assert!(all_fired, "seed {seed}: `{plan}` accepted, fired {fired:?}");
            }
            Err(reason) if reason.contains("can never fire") => {
                assert!(
                    !all_fired,
                    "seed {seed}: `{plan}` refused ({reason}) yet all fired"
                );
            }
            Err(_) => {}
        }
    }
    assert!(accepted > 10, "only {accepted} plans accepted");
}

#[test]
fn the_device_keeps_its_link_model_behind_the_probe() {
    let device = SimDevice::new();
    let probe = Probe::new(2, true, None);
    assert_eq!(probe.wrap(device.clone()).link_model(), device.link_model());
    let _ = Collective::AllGather;
}

/// Whether each of the backend's placements works in the input's allocation.
struct InPlaceProbe;

impl ruccl_perf::backend::OnDevice for InPlaceProbe {
    type Output = (bool, bool);

    fn run<D: HostTensors>(
        self,
        places: &Places<D>,
        _: &ruccl_perf::backend::Devices,
    ) -> Result<(bool, bool), ruccl_perf::cli::CliError> {
        let places = (places as &dyn std::any::Any)
            .downcast_ref::<Places<SimDevice>>()
            .expect("the sim backend's devices");
        let shares = |device: &SimDevice| {
            let communicator =
                ruccl_core::NativeCommunicator::new(vec![DeviceId::new(0)], device.clone())
                    .unwrap();
            let input = device
                .upload(DeviceId::new(0), &HostValues::F32(vec![1.0; 64]))
                .unwrap();
            let address = |values: &HostValues| match values {
                HostValues::F32(values) => values.as_ptr() as usize,
                _ => 0,
            };
            let before = address(input.values());
            let output = communicator
                .all_reduce(0, input, ReduceOperation::Sum)
                .unwrap();
            address(output.values()) == before
        };
        Ok((shares(&places.out_of_place), shares(&places.in_place)))
    }
}

#[test]
fn the_sim_backend_builds_an_out_of_place_and_an_in_place_device() {
    use clap::Parser;
    let cli = ruccl_perf::cli::Cli::try_parse_from(["ruccl-perf"]).unwrap();
    let ran = ruccl_perf::backend::run_on(&cli.perf.backend, Some(1), InPlaceProbe).unwrap();
    assert_eq!(ran, ruccl_perf::backend::Ran::Ran((false, true)));
}

/// Uploads on rank 2's device take `delay`.
#[derive(Clone, Debug)]
struct SlowRank2 {
    delay: std::time::Duration,
}

impl Intercept<SimDevice> for SlowRank2 {
    fn upload(
        &self,
        inner: &SimDevice,
        device: DeviceId,
        values: &HostValues,
    ) -> Result<SimTensor, SimError> {
        if device == DeviceId::new(2) {
            std::thread::sleep(self.delay);
        }
        inner.upload(device, values)
    }
}

#[test]
fn a_stopped_scenario_ends_even_with_ranks_far_ahead() {
    // The first generation times out waiting for slow rank 2, which aborts the communicator:
    // ranks 0 and 1 then fail fast and run up to the collector's window ahead of rank 2, where
    // they wait for it. A stop request must still end the run, and the collector never holds
    // more than the window.
    let device = Intercepted::with(
        SimDevice::new(),
        SlowRank2 {
            delay: std::time::Duration::from_millis(20),
        },
    );
    let config = ScenarioConfig {
        world: 3,
        length: 8,
        generations: 100_000,
        timeout: std::time::Duration::from_millis(1),
        ..ScenarioConfig::default()
    };
    let stop = Stop::new();
    let probe = Probe::new(3, true, None);
    let mut rows = 0;
    let summary = run_scenario(&device, &config, &probe, &stop, &mut |_| {
        rows += 1;
        if rows == 10 {
            stop.request(StopReason::Interrupted);
        }
    })
    .unwrap();
    assert_eq!(summary.stopped, Some(StopReason::Interrupted));
    assert!(summary.generations < 100_000);
    let window = ruccl_perf::scenario::WINDOW as usize;
    assert!(summary.peak_pending <= window + 1, "{summary:?}");
}

#[test]
fn every_row_counts_the_timed_generations_in_which_a_rank_parked() {
    let config = SweepConfig {
        world: 2,
        sizes: Sizes {
            min: 4,
            max: 4,
            step: Step::Factor(2),
        },
        iterations: 2,
        warmup: 0,
        checks: 0,
        ..SweepConfig::default()
    };
    // A runner that takes half a second: the other rank's polls (a few hundred, most of them
    // yields) are spent long before, and it parks — unless every one of its yields waited
    // milliseconds for a core, which is why only one park of the four is required.
    let slow = |in_place| {
        let device = SimDevice::builder().in_place(in_place).build();
        Intercepted::with(
            device,
            before_begin(|_| std::thread::sleep(std::time::Duration::from_millis(500))),
        )
    };
    let places = Places {
        out_of_place: slow(false),
        in_place: slow(true),
    };
    let rows = measure(&places, std::slice::from_ref(&config));
    let [row] = &rows[..] else {
        panic!("one size, one row: {rows:?}")
    };
    let waits: Vec<_> = row
        .placements()
        .iter()
        .map(|measured| measured.waits.expect("the sweep counts waits"))
        .collect();
    // Exactly the timed generations: not the sync collective before them, nor anything after.
    assert!(
        waits.iter().all(|waits| waits.generations == 2),
        "{waits:?}"
    );
    assert!(
        waits.iter().map(|waits| waits.parked).sum::<u64>() >= 1,
        "{waits:?}"
    );
    // A fast device: counted too, never more than the timed generations.
    for row in measure(&sim_places(), std::slice::from_ref(&config)) {
        for measured in row.placements() {
            let waits = measured.waits.expect("the sweep counts waits");
            assert_eq!(waits.generations, 2, "{row:?}");
            assert!(waits.parked <= 2, "{row:?}");
        }
    }
}

#[test]
fn the_bound_is_measured_before_each_row_only_when_asked_and_holds_the_rows_minimum_traffic() {
    let config = small(&collectives::ALL_REDUCE, ElementType::F32);
    // No threads for the bound (a GPU backend, or nothing shows it): no bound.
    for row in measure(&sim_places(), std::slice::from_ref(&config)) {
        assert_eq!(row.bound, None, "{row:?}");
        assert_eq!(row.times_bound(), None);
    }
    let instruments = Instruments {
        bound_threads: Some(2),
        ..Instruments::default()
    };
    let rows = try_measure(&sim_places(), &[config], &instruments).unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        let bound = row.bound.expect("a bound on every row");
        // All-reduce over W = 3: 2·2/3 of the rank's elements per rank, · 3 ranks, half of it
        // folded and half copied.
        let half = (row.bytes * 2) as f64;
        assert!((bound.traffic.folded - half).abs() < 1e-6, "{bound:?}");
        assert!((bound.traffic.copied - half).abs() < 1e-6, "{bound:?}");
        assert!(
            bound.rates.copy > 0.0 && bound.rates.fold > 0.0,
            "{bound:?}"
        );
        let seconds = half / bound.rates.fold + half / bound.rates.copy;
        let times = row.in_place.time_us / (seconds * 1e6);
        assert!((row.times_bound().unwrap() - times).abs() <= 1e-9 * times);
    }
}
