//! The perf harness is generic over the device: `#wrong` is 0 on a correct device and counts the
//! corrupted elements of a broken one, in the sweep and in scenarios alike.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use half::{bf16, f16};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use ruccl_perf::scenario::{ScenarioConfig, run_scenario};
use ruccl_perf::sweep::{Instruments, PerfRow, SweepConfig, SweepEvent, sweep};
use ruccl_sim::{
    ElementType, HostTensors, HostValues, Intercept, Intercepted, SimDevice, SimError, SimTensor,
    Tracer,
};
use std::sync::Mutex;
use std::time::Duration;

/// Computes like the simulated device, then (if `corrupt`) corrupts element 0 of rank 0's
/// output; downloads of any other rank's tensor take `slow_download` longer.
#[derive(Clone, Debug, Default)]
struct Altered {
    corrupt: bool,
    slow_download: Duration,
}

type AlteredDevice = Intercepted<SimDevice, Altered>;

impl Altered {
    fn corrupting() -> AlteredDevice {
        let altered = Self {
            corrupt: true,
            ..Self::default()
        };
        Intercepted::with(SimDevice::new(), altered)
    }

    fn slow_to_download_off_rank_0(delay: Duration) -> AlteredDevice {
        let altered = Self {
            slow_download: delay,
            ..Self::default()
        };
        Intercepted::with(SimDevice::new(), altered)
    }
}

fn corrupt(values: HostValues) -> HostValues {
    fn bump<T: Copy>(mut values: Vec<T>, change: impl Fn(T) -> T) -> Vec<T> {
        if let Some(first) = values.first_mut() {
            *first = change(*first);
        }
        values
    }
    match values {
        HostValues::F32(values) => HostValues::F32(bump(values, |value| value + 1.0)),
        HostValues::F64(values) => HostValues::F64(bump(values, |value| value + 1.0)),
        HostValues::F16(values) => {
            HostValues::F16(bump(values, |value| f16::from_f32(value.to_f32() + 1.0)))
        }
        HostValues::BF16(values) => {
            HostValues::BF16(bump(values, |value| bf16::from_f32(value.to_f32() + 1.0)))
        }
        HostValues::I32(values) => HostValues::I32(bump(values, |value| value + 1)),
        HostValues::I64(values) => HostValues::I64(bump(values, |value| value + 1)),
    }
}

impl Intercept<SimDevice> for Altered {
    fn finish(
        &self,
        inner: &SimDevice,
        work: ruccl_sim::SimWork,
        operation: ReduceOperation,
    ) -> Result<Vec<SimTensor>, SimError> {
        let mut outputs = inner.finish(work, operation)?;
        if let Some(first) = outputs.first_mut().filter(|_| self.corrupt) {
            let device = first.device();
            let values =
                std::mem::replace(first, SimTensor::new(device, HostValues::F32(Vec::new())));
            *first = SimTensor::new(device, corrupt(values.into_values()));
        }
        Ok(outputs)
    }

    fn download(&self, inner: &SimDevice, tensor: &SimTensor) -> Result<HostValues, SimError> {
        if tensor.device() != DeviceId::new(0) {
            std::thread::sleep(self.slow_download);
        }
        inner.download(tensor)
    }
}

fn small_sweep(element_type: ElementType, operation: ReduceOperation) -> SweepConfig {
    SweepConfig {
        min_bytes: 8,
        max_bytes: 4096,
        step_factor: 8,
        world: 3,
        element_type,
        operation,
        iterations: 2,
        warmup: 1,
        ..SweepConfig::default()
    }
}

fn measure<D: HostTensors>(device: &D, config: &SweepConfig) -> Vec<PerfRow> {
    sweep(device, config, &Instruments::default(), &|_| {}).unwrap()
}

#[test]
fn a_correct_device_has_no_wrong_elements_in_any_type_or_operation() {
    for element_type in ElementType::ALL {
        for operation in ReduceOperation::ALL {
            let rows = measure(&SimDevice::new(), &small_sweep(element_type, operation));
            assert_eq!(rows.len(), 4, "8, 64, 512, 4096 bytes");
            for row in rows {
                assert_eq!(
                    row.wrong,
                    Some(0),
                    "{element_type} {operation} {} B",
                    row.bytes
                );
            }
        }
    }
}

#[test]
fn a_broken_device_has_wrong_elements() {
    for operation in ReduceOperation::ALL {
        let config = small_sweep(ElementType::F32, operation);
        let rows = measure(&Altered::corrupting(), &config);
        for row in &rows {
            // One corrupted element per size (every size has at least one element).
            assert_eq!(row.wrong, Some(1), "{operation} {} B", row.bytes);
        }
        let unchecked = measure(
            &Altered::corrupting(),
            &SweepConfig {
                check: false,
                ..config
            },
        );
        assert!(unchecked.iter().all(|row| row.wrong.is_none()));
    }
}

#[test]
fn rows_follow_nccl_tests_sizes_and_bandwidth() {
    let config = SweepConfig {
        min_bytes: 8,
        max_bytes: 128 << 20,
        ..SweepConfig::default()
    };
    let sizes = config.sizes();
    assert_eq!(sizes.len(), 13);
    assert_eq!((sizes[0], sizes[12]), (8, 128 << 20));
    // Rounded down to whole elements, repeats dropped.
    let doubles = SweepConfig {
        min_bytes: 4,
        max_bytes: 40,
        step_factor: 2,
        element_type: ElementType::F64,
        ..SweepConfig::default()
    };
    assert_eq!(doubles.sizes(), vec![0, 8, 16, 32]);
    let row = PerfRow {
        bytes: 1_000_000,
        count: 250_000,
        element_type: ElementType::F32,
        operation: ReduceOperation::Sum,
        world: 4,
        time_us: 100.0,
        wrong: Some(0),
        traffic_ratio: Some(1.0),
        model_us: 1.0,
    };
    assert!((row.algbw() - 10.0).abs() < 1e-9);
    assert!((row.busbw() - 15.0).abs() < 1e-9);
}

#[test]
fn the_sweep_reports_each_size_as_it_starts_and_ends() {
    let events = Mutex::new(Vec::new());
    let device = SimDevice::new();
    let instruments = Instruments {
        ledger: Some(device.ledger().clone()),
        tracer: None,
    };
    let rows = sweep(
        &device,
        &small_sweep(ElementType::I32, ReduceOperation::Sum),
        &instruments,
        &|event| {
            events.lock().unwrap().push(match event {
                SweepEvent::Started {
                    index,
                    total,
                    bytes,
                } => format!("start {index}/{total} {bytes}"),
                SweepEvent::Measured(row) => format!("row {}", row.bytes),
            });
        },
    )
    .unwrap();
    assert_eq!(
        events.into_inner().unwrap(),
        [
            "start 0/4 8",
            "row 8",
            "start 1/4 64",
            "row 64",
            "start 2/4 512",
            "row 512",
            "start 3/4 4096",
            "row 4096"
        ]
    );
    // The ledger gives the traffic ratio: 2 elements over 3 ranks exceed the bound, 1024 do not.
    assert!(rows[0].traffic_ratio.unwrap() > 1.0);
    assert!(rows[3].traffic_ratio.unwrap() < 1.01);
}

#[test]
fn scenarios_check_outputs_on_any_device() {
    let config = ScenarioConfig {
        world: 3,
        length: 100,
        generations: 3,
        ..ScenarioConfig::default()
    };
    let good = run_scenario(&SimDevice::new(), &config, &Tracer::new()).unwrap();
    let broken = run_scenario(&Altered::corrupting(), &config, &Tracer::new()).unwrap();
    for (good, broken) in good.iter().zip(&broken) {
        assert_eq!(good.ok_ranks, [0, 1, 2]);
        assert_eq!(good.wrong, 0);
        assert_eq!(broken.ok_ranks, [0, 1, 2]);
        assert_eq!(broken.wrong, 1);
        assert!(good.agreed() && broken.agreed());
        assert_eq!((good.moved, good.lower_bound), (400, 400));
    }
}

#[test]
fn without_warm_up_the_timed_loop_excludes_the_other_ranks_checks() {
    // Rank 0's check is fast, the others' downloads take 400 ms: were rank 0 to start its clock
    // right after its own check, its one timed all-reduce would wait for theirs.
    let delay = Duration::from_millis(400);
    let config = SweepConfig {
        min_bytes: 8,
        max_bytes: 8,
        world: 3,
        iterations: 1,
        warmup: 0,
        ..SweepConfig::default()
    };
    let rows = measure(&Altered::slow_to_download_off_rank_0(delay), &config);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].wrong, Some(0));
    let timed = Duration::from_secs_f64(rows[0].time_us / 1e6);
    assert!(
        timed < delay / 2,
        "the timed all-reduce took {timed:?}: it included the other ranks' {delay:?} checks"
    );
}
