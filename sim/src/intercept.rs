//! [`Intercepted`]: the one shape of every pass-through decorator — wrap any device, intercept
//! some of its calls, pass the rest straight on.
//!
//! An [`Intercept`] lists the calls of [`NativeCollectiveDevice`] and [`HostTensors`], each
//! given the wrapped device, and each defaulting to passing the call on unchanged; an
//! implementation overrides only the calls it is about. [`Intercepted`] makes it a device with
//! the wrapped device's own tensors, inputs and errors. The trait is spelled out here once, so a
//! change to it is made here (and in the intercepts that override the changed call), not in every
//! decorator.
//!
//! ```
//! use ruccl_core::{DeviceId, NativeCollectiveDevice};
//! use ruccl_sim::{Intercept, Intercepted, SimDevice};
//!
//! /// Counts nothing, changes nothing: the smallest intercept.
//! #[derive(Clone)]
//! struct Transparent;
//!
//! impl<D: NativeCollectiveDevice> Intercept<D> for Transparent {}
//!
//! let device = Intercepted::with(SimDevice::new(), Transparent);
//! assert_eq!(device.inner().threads(), SimDevice::new().threads());
//! ```
//!
//! Users here: [`TracingDevice`](crate::TracingDevice) (times every call), the model checkers'
//! held schedule, and the deliberately wrong devices of the tests. The fault decorator
//! [`FaultyDevice`](crate::FaultyDevice) is the exception: it wraps the device's values
//! themselves (to make them panic when dropped, or to hand back phantom outputs), so it
//! implements the trait in full.

use crate::host::{ElementType, HostTensors, HostValues};
use ruccl_core::{
    DeviceId, LinkModel, NativeCollectiveDevice, Plan, ReduceOperation, Step, TensorInfo,
};

/// What a decorator does around the calls of the device `D` it wraps. Every method is given the
/// wrapped device (`inner`) and by default passes the call on unchanged.
pub trait Intercept<D: NativeCollectiveDevice>: Clone + Send + Sync + 'static {
    /// [`NativeCollectiveDevice::prepare`].
    fn prepare(
        &self,
        inner: &D,
        tensor: D::Tensor,
        device: DeviceId,
    ) -> Result<D::Prepared, D::Error> {
        inner.prepare(tensor, device)
    }

    /// [`NativeCollectiveDevice::describe`].
    fn describe(&self, inner: &D, input: &D::Prepared) -> TensorInfo {
        inner.describe(input)
    }

    /// [`NativeCollectiveDevice::begin`].
    fn begin(
        &self,
        inner: &D,
        devices: &[DeviceId],
        inputs: Vec<D::Prepared>,
        plan: &Plan,
    ) -> Result<D::Work, D::Error> {
        inner.begin(devices, inputs, plan)
    }

    /// [`NativeCollectiveDevice::exchange`]; `index` counts the generation's exchanges from 0.
    fn exchange(
        &self,
        inner: &D,
        work: &mut D::Work,
        index: usize,
        step: &Step,
    ) -> Result<(), D::Error> {
        let _ = index;
        inner.exchange(work, step)
    }

    /// [`NativeCollectiveDevice::finish`].
    fn finish(&self, inner: &D, work: D::Work, plan: &Plan) -> Result<Vec<D::Tensor>, D::Error> {
        inner.finish(work, plan)
    }

    /// [`NativeCollectiveDevice::link_model`].
    fn link_model(&self, inner: &D) -> LinkModel {
        inner.link_model()
    }

    /// [`HostTensors::upload`].
    fn upload(
        &self,
        inner: &D,
        device: DeviceId,
        values: &HostValues,
    ) -> Result<D::Tensor, D::Error>
    where
        D: HostTensors,
    {
        inner.upload(device, values)
    }

    /// [`HostTensors::download`].
    fn download(&self, inner: &D, tensor: &D::Tensor) -> Result<HostValues, D::Error>
    where
        D: HostTensors,
    {
        inner.download(tensor)
    }
}

/// The device `D` with the calls `I` intercepts: `D`'s tensors, prepared inputs and errors, and
/// `D`'s work with a step counter beside it.
#[derive(Clone, Debug, Default)]
pub struct Intercepted<D, I> {
    inner: D,
    intercept: I,
}

impl<D, I> Intercepted<D, I> {
    /// `inner`, with its calls going through `intercept`.
    pub fn with(inner: D, intercept: I) -> Self {
        Self { inner, intercept }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The intercept.
    pub fn intercept(&self) -> &I {
        &self.intercept
    }
}

/// The work of an [`Intercepted`] device: the wrapped device's, and the number of the next
/// exchange.
#[derive(Debug)]
pub struct InterceptedWork<W> {
    inner: W,
    next_step: usize,
}

impl<W> InterceptedWork<W> {
    /// The wrapped device's work.
    pub fn inner(&self) -> &W {
        &self.inner
    }
}

impl<D: NativeCollectiveDevice, I: Intercept<D>> NativeCollectiveDevice for Intercepted<D, I> {
    type Tensor = D::Tensor;
    type Prepared = D::Prepared;
    type Work = InterceptedWork<D::Work>;
    type Error = D::Error;

    fn prepare(&self, tensor: D::Tensor, device: DeviceId) -> Result<D::Prepared, D::Error> {
        self.intercept.prepare(&self.inner, tensor, device)
    }

    fn describe(&self, input: &D::Prepared) -> TensorInfo {
        self.intercept.describe(&self.inner, input)
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<D::Prepared>,
        plan: &Plan,
    ) -> Result<Self::Work, D::Error> {
        let inner = self.intercept.begin(&self.inner, devices, inputs, plan)?;
        Ok(InterceptedWork {
            inner,
            next_step: 0,
        })
    }

    fn exchange(&self, work: &mut Self::Work, step: &Step) -> Result<(), D::Error> {
        let index = work.next_step;
        work.next_step += 1;
        self.intercept
            .exchange(&self.inner, &mut work.inner, index, step)
    }

    fn finish(&self, work: Self::Work, plan: &Plan) -> Result<Vec<D::Tensor>, D::Error> {
        self.intercept.finish(&self.inner, work.inner, plan)
    }

    fn link_model(&self) -> LinkModel {
        self.intercept.link_model(&self.inner)
    }

    /// The inner device's, not intercepted: it is not part of a generation.
    fn assist(&self, rank: usize) {
        self.inner.assist(rank);
    }
}

impl<D: HostTensors, I: Intercept<D>> HostTensors for Intercepted<D, I> {
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<D::Tensor, D::Error> {
        self.intercept.upload(&self.inner, device, values)
    }

    fn download(&self, tensor: &D::Tensor) -> Result<HostValues, D::Error> {
        self.intercept.download(&self.inner, tensor)
    }

    fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        self.inner.supports(element_type, operation)
    }

    fn supports_type(&self, element_type: ElementType) -> bool {
        self.inner.supports_type(element_type)
    }

    fn release_cached(&self) {
        self.inner.release_cached();
    }
}
