//! [`TracingDevice`]: a decorator that times every call of any [`NativeCollectiveDevice`].

use super::tracer::{SpanKind, Tracer};
use crate::host::{ElementType, HostTensors, HostValues};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use std::ops::Range;

/// A device that behaves exactly like `D` and records a [`Span`](super::Span) for each `prepare`,
/// `begin`, `exchange` and `finish` in its [`Tracer`], on the track of the rank whose thread made
/// the call. `prepare` binds its thread to the rank of its device, so the ring's calls land on the
/// track of the rank that runs it (the last to arrive). Values and errors are `D`'s own.
#[derive(Clone, Debug)]
pub struct TracingDevice<D> {
    inner: D,
    devices: Vec<DeviceId>,
    tracer: Tracer,
}

impl<D> TracingDevice<D> {
    /// Wrap `inner`, which serves ranks on `devices` (rank `r` on `devices[r]`), logging to
    /// `tracer`.
    pub fn new(inner: D, devices: Vec<DeviceId>, tracer: Tracer) -> Self {
        Self {
            inner,
            devices,
            tracer,
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The log.
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }
}

/// The work of a [`TracingDevice`]: `D`'s, and the number of the next step.
#[derive(Debug)]
pub struct TracedWork<W> {
    inner: W,
    next_step: usize,
}

impl<W> TracedWork<W> {
    /// The wrapped device's work.
    pub fn inner(&self) -> &W {
        &self.inner
    }
}

impl<D: NativeCollectiveDevice> NativeCollectiveDevice for TracingDevice<D> {
    type Tensor = D::Tensor;
    type Prepared = D::Prepared;
    type Work = TracedWork<D::Work>;
    type Error = D::Error;

    fn prepare(&self, tensor: D::Tensor, device: DeviceId) -> Result<D::Prepared, D::Error> {
        if let Some(rank) = self.devices.iter().position(|&known| known == device) {
            self.tracer.bind_current_thread(rank);
        }
        let span = self.tracer.start(SpanKind::Prepare);
        let prepared = self.inner.prepare(tensor, device);
        span.finish(prepared.is_ok());
        prepared
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: &[D::Prepared],
        operation: ReduceOperation,
    ) -> Result<Self::Work, D::Error> {
        let world = devices.len();
        let span = self.tracer.start(SpanKind::Begin { world, elements: 0 });
        match self.inner.begin(devices, inputs, operation) {
            Ok(inner) => {
                let elements = self.inner.elements(&inner);
                span.finish_as(SpanKind::Begin { world, elements }, true);
                Ok(TracedWork {
                    inner,
                    next_step: 0,
                })
            }
            Err(error) => {
                span.finish(false);
                Err(error)
            }
        }
    }

    fn elements(&self, work: &Self::Work) -> usize {
        self.inner.elements(&work.inner)
    }

    fn exchange(
        &self,
        work: &mut Self::Work,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), D::Error> {
        let step = work.next_step;
        work.next_step += 1;
        let span = self.tracer.start(SpanKind::Exchange {
            step,
            reduce,
            elements: ranges.iter().map(Range::len).sum(),
            busiest: ranges.iter().map(Range::len).max().unwrap_or(0),
        });
        let outcome = self.inner.exchange(&mut work.inner, ranges, reduce);
        span.finish(outcome.is_ok());
        outcome
    }

    fn finish(
        &self,
        work: Self::Work,
        operation: ReduceOperation,
    ) -> Result<Vec<D::Tensor>, D::Error> {
        let span = self.tracer.start(SpanKind::Finish);
        let outputs = self.inner.finish(work.inner, operation);
        span.finish(outputs.is_ok());
        outputs
    }
}

impl<D: HostTensors> HostTensors for TracingDevice<D> {
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<D::Tensor, D::Error> {
        self.inner.upload(device, values)
    }

    fn download(&self, tensor: &D::Tensor) -> Result<HostValues, D::Error> {
        self.inner.download(tensor)
    }

    fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        self.inner.supports(element_type, operation)
    }
}
