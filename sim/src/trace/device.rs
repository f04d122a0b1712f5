//! [`TracingDevice`]: a decorator that times every call of any [`NativeCollectiveDevice`].

use super::tracer::{SpanKind, Tracer};
use crate::intercept::{Intercept, Intercepted};
use ruccl_core::{DeviceId, NativeCollectiveDevice, Plan, Step};

/// A device that behaves exactly like `D` and records a [`Span`](super::Span) for each `prepare`,
/// `begin`, `exchange` and `finish` in its [`Tracer`], on the track of the rank whose thread made
/// the call. `prepare` binds its thread to the rank of its device, so the plan's calls land on the
/// track of the rank that runs it (the last to arrive). Values and errors are `D`'s own.
pub type TracingDevice<D> = Intercepted<D, Tracing>;

/// The work of a [`TracingDevice`].
pub type TracedWork<W> = crate::intercept::InterceptedWork<W>;

/// The [`Intercept`] of a [`TracingDevice`]: the ranks' devices and the log.
#[derive(Clone, Debug)]
pub struct Tracing {
    devices: Vec<DeviceId>,
    tracer: Tracer,
}

impl<D> TracingDevice<D> {
    /// Wrap `inner`, which serves ranks on `devices` (rank `r` on `devices[r]`), logging to
    /// `tracer`.
    pub fn new(inner: D, devices: Vec<DeviceId>, tracer: Tracer) -> Self {
        Intercepted::with(inner, Tracing { devices, tracer })
    }

    /// The log.
    pub fn tracer(&self) -> &Tracer {
        &self.intercept().tracer
    }
}

impl<D: NativeCollectiveDevice> Intercept<D> for Tracing {
    fn prepare(
        &self,
        inner: &D,
        tensor: D::Tensor,
        device: DeviceId,
    ) -> Result<D::Prepared, D::Error> {
        if let Some(rank) = self.devices.iter().position(|&known| known == device) {
            self.tracer.bind_current_thread(rank);
        }
        let span = self.tracer.start(SpanKind::Prepare);
        let prepared = inner.prepare(tensor, device);
        span.finish(prepared.is_ok());
        prepared
    }

    fn begin(
        &self,
        inner: &D,
        devices: &[DeviceId],
        inputs: Vec<D::Prepared>,
        plan: &Plan,
    ) -> Result<D::Work, D::Error> {
        let span = self.tracer.start(SpanKind::Begin {
            world: devices.len(),
            elements: plan.buffer_len(),
        });
        let work = inner.begin(devices, inputs, plan);
        span.finish(work.is_ok());
        work
    }

    fn exchange(
        &self,
        inner: &D,
        work: &mut D::Work,
        index: usize,
        step: &Step,
    ) -> Result<(), D::Error> {
        let lengths = step.transfers.iter().map(|transfer| transfer.range.len());
        let span = self.tracer.start(SpanKind::Exchange {
            step: index,
            combine: step.combine,
            elements: lengths.clone().sum(),
            busiest: lengths.max().unwrap_or(0),
        });
        let outcome = inner.exchange(work, step);
        span.finish(outcome.is_ok());
        outcome
    }

    fn finish(&self, inner: &D, work: D::Work, plan: &Plan) -> Result<Vec<D::Tensor>, D::Error> {
        let span = self.tracer.start(SpanKind::Finish);
        let outputs = inner.finish(work, plan);
        span.finish(outputs.is_ok());
        outputs
    }
}
