//! [`TracingDevice`]: a decorator that times every call of any [`NativeCollectiveDevice`].

use super::tracer::{SpanKind, Tracer};
use crate::intercept::{Intercept, Intercepted};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use std::ops::Range;

/// A device that behaves exactly like `D` and records a [`Span`](super::Span) for each `prepare`,
/// `begin`, `exchange` and `finish` in its [`Tracer`], on the track of the rank whose thread made
/// the call. `prepare` binds its thread to the rank of its device, so the ring's calls land on the
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
        inputs: &[D::Prepared],
        operation: ReduceOperation,
    ) -> Result<D::Work, D::Error> {
        let world = devices.len();
        let span = self.tracer.start(SpanKind::Begin { world, elements: 0 });
        let work = inner.begin(devices, inputs, operation);
        match &work {
            Ok(work) => {
                let elements = inner.elements(work);
                span.finish_as(SpanKind::Begin { world, elements }, true);
            }
            Err(_) => span.finish(false),
        }
        work
    }

    fn exchange(
        &self,
        inner: &D,
        work: &mut D::Work,
        step: usize,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), D::Error> {
        let span = self.tracer.start(SpanKind::Exchange {
            step,
            reduce,
            elements: ranges.iter().map(Range::len).sum(),
            busiest: ranges.iter().map(Range::len).max().unwrap_or(0),
        });
        let outcome = inner.exchange(work, ranges, reduce);
        span.finish(outcome.is_ok());
        outcome
    }

    fn finish(
        &self,
        inner: &D,
        work: D::Work,
        operation: ReduceOperation,
    ) -> Result<Vec<D::Tensor>, D::Error> {
        let span = self.tracer.start(SpanKind::Finish);
        let outputs = inner.finish(work, operation);
        span.finish(outputs.is_ok());
        outputs
    }
}
