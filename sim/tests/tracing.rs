//! The tracing decorator, through a real communicator: every rank's `prepare` on its own track,
//! the plan's `begin`, every step and `finish` on the track of the one rank that ran it, each
//! step as the plan has it — without changing what the device computes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCommunicator, Plan, ReduceOperation,
    TensorInfo,
};
use ruccl_sim::trace::{SpanKind, timelines};
use ruccl_sim::{ElementType, HostTensors, HostValues, SimDevice, Tracer, TracingDevice};

const WORLD: usize = 3;
const LENGTH: usize = 7;

#[test]
fn every_device_call_lands_on_the_track_of_the_rank_that_made_it() {
    let devices: Vec<DeviceId> = (0..WORLD as u32).map(DeviceId::new).collect();
    let tracer = Tracer::new();
    let device = TracingDevice::new(SimDevice::new(), devices.clone(), tracer.clone());
    let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
    let collective = Collective::ReduceScatter(ReduceOperation::Sum);
    let generations = 3u64;
    std::thread::scope(|scope| {
        for (rank, &on) in devices.iter().enumerate() {
            let (communicator, device, tracer) = (&communicator, &device, &tracer);
            scope.spawn(move || {
                for generation in 0..generations {
                    let values = HostValues::I64(vec![rank as i64; LENGTH * WORLD]);
                    let tensor = device.upload(on, &values).unwrap();
                    let start = tracer.now();
                    let options = CollectiveOptions::default().with_algorithm(Algorithm::Ring);
                    let output = communicator.collective(rank, tensor, collective, options);
                    tracer.record_call(rank, generation, start, tracer.now(), output.is_ok());
                    assert_eq!(
                        device.download(&output.unwrap()).unwrap(),
                        HostValues::I64(vec![3; LENGTH])
                    );
                }
            });
        }
    });
    let input = TensorInfo {
        len: LENGTH * WORLD,
        element: ElementType::I64,
    };
    let plan = Plan::with_model(
        collective,
        Algorithm::Ring,
        WORLD,
        input,
        &SimDevice::new().model(),
    )
    .unwrap();
    let (calls, loose) = timelines(&tracer.spans());
    assert!(loose.is_empty(), "{loose:?}");
    assert_eq!(calls.len(), WORLD * generations as usize);
    for generation in 0..generations {
        let ran: Vec<_> = calls
            .iter()
            .filter(|call| call.generation == generation && call.ran_plan())
            .collect();
        assert_eq!(
            ran.len(),
            1,
            "generation {generation}: one rank runs the plan"
        );
        let runner = ran[0];
        let steps: Vec<(usize, bool, usize)> = runner
            .device_calls
            .iter()
            .filter_map(|span| match span.kind {
                SpanKind::Exchange {
                    step,
                    combine,
                    elements,
                    ..
                } => Some((step, combine, elements)),
                _ => None,
            })
            .collect();
        let planned: Vec<(usize, bool, usize)> = plan
            .steps()
            .iter()
            .enumerate()
            .map(|(index, step)| {
                let elements = step.transfers.iter().map(|t| t.range.len()).sum();
                (index, step.combine, elements)
            })
            .collect();
        assert_eq!(steps, planned);
        assert_eq!(runner.moved(), plan.elements_moved());
        assert!(matches!(
            runner.device_calls.last().map(|span| &span.kind),
            Some(SpanKind::Finish)
        ));
        assert!(runner.plan().is_some());
    }
    for call in &calls {
        assert!(call.ok);
        assert!(matches!(call.device_calls[0].kind, SpanKind::Prepare));
        assert!(
            call.device_calls
                .iter()
                .all(|span| span.rank == Some(call.rank))
        );
    }
    device.inner().check_quiescent().unwrap();
}
