//! [`FaultyDevice`]: a decorator that wraps *any* [`NativeCollectiveDevice`] and injects the
//! faults of a [`FaultPlan`] — errors and panics in `prepare`, `begin`, `exchange` (at a chosen
//! step), `finish`, a wrong number of outputs, and panics in the `Drop` of a prepared input (when
//! `begin` takes it), of the work, or of an output — for a chosen rank and generation.
//!
//! | file         | job                                                  |
//! |--------------|------------------------------------------------------|
//! | `mod.rs`     | the decorator and its trait impls                    |
//! | `values.rs`  | [`FaultyTensor`], [`FaultyPrepared`], [`FaultyWork`] |
//! | `error.rs`   | [`FaultyError`], [`FaultPoint`]                      |
//! | `plan.rs`    | [`FaultSpec`], [`FaultPlan`], seeded random plans    |
//! | `parse.rs`   | the text form of specs and plans                     |
//! | `predict.rs` | [`FaultPlan::predict`]: the one outcome predictor    |
//! | `trial.rs`   | [`Trial`]: the fault tests' shared harness           |
//!
//! ## Generations
//!
//! The decorator counts generations itself. Each device's `prepare` calls are numbered 0, 1, 2, …;
//! a prepared input carries its number, and `begin` (with the `exchange` and `finish` calls on
//! its work) belongs to the number rank 0's input carries. Driven by a communicator, whose ranks
//! each prepare once per generation, that is the communicator's generation — also when a
//! generation fails in `prepare` and never reaches `begin`.

mod error;
mod parse;
mod plan;
mod predict;
mod trial;
mod values;

pub use error::{FaultPoint, FaultyError};
pub use parse::{ParseFaultError, ParsePlanError};
pub use plan::{DropTarget, FaultAction, FaultPlan, FaultSite, FaultSpec, RandomPlan};
pub use predict::{GenerationCalls, Outcome, every_site};
pub use trial::{Received, Trial, trial_input, trial_sum};
pub use values::{FaultyPrepared, FaultyTensor, FaultyWork};

use crate::host::{ElementType, HostTensors, HostValues};
use error::{drop_panic, injected_panic};
use ruccl_core::sync::{Arc, Mutex};
use ruccl_core::{
    DeviceId, ElementType as Element, LinkModel, NativeCollectiveDevice, Plan, ReduceOperation,
    Step, TensorInfo,
};
use std::collections::BTreeMap;
use std::fmt;

/// A fault that fired (or, for a drop fault, a value that was armed to panic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiredFault {
    /// The spec that fired.
    pub spec: FaultSpec,
    /// The rank of the call (per-rank sites) or the spec's rank (others).
    pub rank: Option<usize>,
    /// The generation it fired in.
    pub generation: u64,
}

/// The decorator's shared state; clones of a [`FaultyDevice`] share one.
struct Shared {
    /// Rank `r`'s device is `devices[r]`; used to name the rank of a `prepare`.
    devices: Vec<DeviceId>,
    plan: FaultPlan,
    tally: Mutex<Tally>,
}

/// Counters, under the lock.
#[derive(Default)]
struct Tally {
    /// The number of `prepare` calls per device so far: the next one's generation.
    prepares: BTreeMap<DeviceId, u64>,
    /// `begin` calls so far: the generation of a `begin` without inputs.
    begins: u64,
    /// Every fault that fired, in order.
    fired: Vec<FiredFault>,
}

/// A device that behaves like `D` except where its [`FaultPlan`] injects a fault.
///
/// Its values wrap `D`'s: [`FaultyTensor`], [`FaultyPrepared`], [`FaultyWork`]. Its error is
/// [`FaultyError`], whose `Device` variant displays `D`'s error unchanged. Clones share the plan
/// and the counters, through [`ruccl_core::sync`], so the decorator runs under loom and shuttle
/// (create it inside the model there). Only `prepare`, `begin` and a fault that fires take the
/// counters' lock; `exchange` and `finish` read the immutable plan without it.
pub struct FaultyDevice<D> {
    inner: D,
    shared: Arc<Shared>,
}

impl<D: Clone> Clone for FaultyDevice<D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<D> fmt::Debug for FaultyDevice<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyDevice")
            .field("devices", &self.shared.devices)
            .field("plan", &self.shared.plan.to_string())
            .finish_non_exhaustive()
    }
}

impl<D: NativeCollectiveDevice> FaultyDevice<D> {
    /// Wrap `inner`, which serves ranks on `devices` (rank `r` on `devices[r]`), injecting `plan`.
    /// A `prepare` on a device outside `devices` has no rank: only rank-free faults hit it.
    pub fn new(inner: D, devices: Vec<DeviceId>, plan: FaultPlan) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared {
                devices,
                plan,
                tally: Mutex::new(Tally::default()),
            }),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.shared.plan
    }

    /// Every fault that fired so far (drop faults: every value armed), in order.
    pub fn fired(&self) -> Vec<FiredFault> {
        self.shared.tally.lock().fired.clone()
    }

    fn log(&self, spec: FaultSpec, rank: Option<usize>, generation: u64) {
        let rank = if spec.site.is_per_rank() {
            rank
        } else {
            spec.rank
        };
        self.shared.tally.lock().fired.push(FiredFault {
            spec,
            rank,
            generation,
        });
    }

    /// Fire the error-or-panic fault, if any, planned for `point`.
    fn strike(
        &self,
        point: FaultPoint,
        rank: Option<usize>,
        generation: u64,
    ) -> Result<(), FaultyError<D::Error>> {
        let spec = self
            .shared
            .plan
            .first(rank, generation, |site| site.strikes(point));
        let Some(spec) = spec else {
            return Ok(());
        };
        let Some(action) = spec.site.action() else {
            return Ok(());
        };
        self.log(spec, rank, generation);
        let rank = if spec.site.is_per_rank() {
            rank
        } else {
            spec.rank
        };
        match action {
            FaultAction::Error => Err(FaultyError::Injected {
                point,
                rank,
                generation,
            }),
            FaultAction::Panic => panic!("{}", injected_panic(point, rank, generation)),
        }
    }

    /// The panic message for a value to be dropped, if a drop fault targets it.
    fn arm(&self, target: DropTarget, rank: Option<usize>, generation: u64) -> Option<String> {
        let spec = self
            .shared
            .plan
            .first(rank, generation, |site| *site == FaultSite::Drop(target))?;
        self.log(spec, rank, generation);
        Some(drop_panic(target.victim(), rank, generation))
    }
}

impl<D: NativeCollectiveDevice> NativeCollectiveDevice for FaultyDevice<D> {
    type Tensor = FaultyTensor<D::Tensor>;
    type Prepared = FaultyPrepared<D::Prepared>;
    type Work = FaultyWork<D::Work>;
    type Error = FaultyError<D::Error>;

    fn prepare(
        &self,
        mut tensor: Self::Tensor,
        device: DeviceId,
    ) -> Result<Self::Prepared, Self::Error> {
        let rank = self.shared.devices.iter().position(|&d| d == device);
        let generation = {
            let mut tally = self.shared.tally.lock();
            let count = tally.prepares.entry(device).or_insert(0);
            let generation = *count;
            *count += 1;
            generation
        };
        self.strike(FaultPoint::Prepare, rank, generation)?;
        let inner = tensor.inner.take().ok_or(FaultyError::PhantomTensor)?;
        // An armed wrapper (an output handed back in) panics here, as a device's would.
        drop(tensor);
        let prepared = self
            .inner
            .prepare(inner, device)
            .map_err(FaultyError::Device)?;
        Ok(FaultyPrepared {
            inner: Some(prepared),
            rank,
            generation,
            bomb: self.arm(DropTarget::Prepared, rank, generation),
        })
    }

    fn describe(&self, input: &Self::Prepared) -> TensorInfo {
        // A `describe` fault is always a panic (the site has no error action), so `strike`
        // returns only when nothing is planned here.
        let _ = self.strike(FaultPoint::Describe, input.rank, input.generation);
        match &input.inner {
            Some(inner) => self.inner.describe(inner),
            // Unreachable: only `begin`, which consumes the input, takes `inner`.
            None => TensorInfo {
                len: 0,
                element: Element::F32,
            },
        }
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<Self::Prepared>,
        plan: &Plan,
    ) -> Result<Self::Work, Self::Error> {
        let generation = {
            let mut tally = self.shared.tally.lock();
            let begins = tally.begins;
            tally.begins += 1;
            inputs.first().map_or(begins, |input| input.generation)
        };
        // The wrapped device takes the inner values; the wrappers are dropped here, in rank
        // order, before anything else: an armed one panics now, as a device's prepared input
        // that panics when `begin` drops it (the later ones stay quiet while that unwinds).
        let mut values = Vec::with_capacity(inputs.len());
        for (rank, mut input) in inputs.into_iter().enumerate() {
            values.push(
                input
                    .inner
                    .take()
                    .ok_or(FaultyError::PreparedInUse { rank })?,
            );
        }
        self.strike(FaultPoint::Begin, None, generation)?;
        let work = self
            .inner
            .begin(devices, values, plan)
            .map_err(FaultyError::Device)?;
        Ok(FaultyWork {
            inner: Some(work),
            generation,
            next_step: 0,
            bomb: self.arm(DropTarget::Work, None, generation),
        })
    }

    fn exchange(&self, work: &mut Self::Work, step: &Step) -> Result<(), Self::Error> {
        let index = work.next_step;
        work.next_step += 1;
        self.strike(FaultPoint::Exchange { step: index }, None, work.generation)?;
        match work.inner.as_mut() {
            Some(inner) => self
                .inner
                .exchange(inner, step)
                .map_err(FaultyError::Device),
            // Unreachable: only `finish`, which consumes the work, takes `inner`.
            None => Ok(()),
        }
    }

    fn finish(&self, mut work: Self::Work, plan: &Plan) -> Result<Vec<Self::Tensor>, Self::Error> {
        let generation = work.generation;
        self.strike(FaultPoint::Finish, None, generation)?;
        let Some(inner) = work.inner.take() else {
            // Unreachable: a work reaches `finish` once, with its inner work.
            return Ok(Vec::new());
        };
        let outputs = self
            .inner
            .finish(inner, plan)
            .map_err(FaultyError::Device)?;
        // An armed work panics here: a device that drops its work inside `finish`.
        drop(work);
        let mut outputs: Vec<Self::Tensor> = outputs.into_iter().map(FaultyTensor::new).collect();
        if let Some(spec) = self.shared.plan.first(None, generation, |site| {
            matches!(site, FaultSite::Outputs { .. })
        }) {
            if let FaultSite::Outputs { count } = spec.site {
                self.log(spec, None, generation);
                outputs.truncate(count);
                outputs.resize_with(count, FaultyTensor::phantom);
            }
        }
        for (rank, output) in outputs.iter_mut().enumerate() {
            output.bomb = self.arm(DropTarget::Output, Some(rank), generation);
        }
        Ok(outputs)
    }

    fn link_model(&self) -> LinkModel {
        self.inner.link_model()
    }

    /// The inner device's, with no fault: it is not part of a generation.
    fn assist(&self, rank: usize) {
        self.inner.assist(rank);
    }
}

impl<D: HostTensors> HostTensors for FaultyDevice<D> {
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<Self::Tensor, Self::Error> {
        self.inner
            .upload(device, values)
            .map(FaultyTensor::new)
            .map_err(FaultyError::Device)
    }

    fn download(&self, tensor: &Self::Tensor) -> Result<HostValues, Self::Error> {
        let inner = tensor.get().ok_or(FaultyError::PhantomTensor)?;
        self.inner.download(inner).map_err(FaultyError::Device)
    }

    fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        self.inner.supports(element_type, operation)
    }

    fn release_cached(&self) {
        self.inner.release_cached();
    }

    fn supports_type(&self, element_type: ElementType) -> bool {
        self.inner.supports_type(element_type)
    }
}
