//! [`Hooked`]: the local device, with the inter-process step hooked into `finish`.
//!
//! The core runs a generation's plan on the thread of the last rank to arrive, lock released, and
//! ends it with the device's `finish`. Wrapping the device lets that same thread run the
//! inter-process step on the generation's outputs before the core publishes them: the local ranks
//! meet once per local collective — no extra hand-off between them — and the outputs they receive
//! are the job's. What the step needs besides the outputs (each rank's request and deadline) the
//! ranks register in [`Shared`] before they call the core.
//!
//! When the step fails between processes, `finish` fails with [`HookError::Agreed`] and the
//! agreed error is kept in [`Shared`]: the core hands every local rank "the device failed in
//! finish", and each rank returns the kept error instead — the text every process agreed on.
//! When the generation fails *before* the hook (a device error in an earlier phase, a local
//! mismatch, a wrong output count), no engine call was made; the local ranks then make it
//! through a [`Meeting`](super::meeting::Meeting), with the failure.

use super::error::HierarchicalError;
use super::staging::{LayoutBuffer, StagingDevice};
use super::step::{Handout, Part, Pending, Phase, Shared, discard, earliest, internal};
use crate::inter_process::InterProcess;
use ruccl_core::{DeviceId, LinkModel, NativeCollectiveDevice, Plan, Step, TensorInfo};
use std::sync::Arc;

/// Why a hooked device failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum HookError<E> {
    /// The device itself failed.
    #[error(transparent)]
    Device(E),
    /// The inter-process step failed; every local rank returns the error kept in [`Shared`].
    #[error("the generation failed between processes: {0}")]
    Agreed(HierarchicalError),
    /// The ranks' registrations do not describe one generation (a bug): no step was made.
    #[error("the local ranks' registrations do not describe one generation")]
    Unregistered,
}

/// A device whose `finish` runs the inter-process step (see the module docs).
pub(super) struct Hooked<D, I> {
    inner: D,
    shared: Arc<Shared<D, I>>,
}

impl<D: Clone, I> Clone for Hooked<D, I> {
    fn clone(&self) -> Self {
        Hooked {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<D, I> Hooked<D, I> {
    pub(super) fn new(inner: D, shared: Arc<Shared<D, I>>) -> Self {
        Hooked { inner, shared }
    }
}

impl<D, I> NativeCollectiveDevice for Hooked<D, I>
where
    I: InterProcess + 'static,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    type Tensor = D::Tensor;
    type Prepared = D::Prepared;
    type Work = D::Work;
    type Error = HookError<D::Error>;

    fn prepare(&self, tensor: D::Tensor, device: DeviceId) -> Result<D::Prepared, Self::Error> {
        self.inner
            .prepare(tensor, device)
            .map_err(HookError::Device)
    }

    fn describe(&self, input: &D::Prepared) -> TensorInfo {
        self.inner.describe(input)
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<D::Prepared>,
        plan: &Plan,
    ) -> Result<D::Work, Self::Error> {
        self.inner
            .begin(devices, inputs, plan)
            .map_err(HookError::Device)
    }

    fn exchange(&self, work: &mut D::Work, step: &Step) -> Result<(), Self::Error> {
        self.inner.exchange(work, step).map_err(HookError::Device)
    }

    fn finish(&self, work: D::Work, plan: &Plan) -> Result<Vec<D::Tensor>, Self::Error> {
        let outputs = self.inner.finish(work, plan).map_err(HookError::Device)?;
        if outputs.len() != self.shared.layout.local() {
            // The core reports the count; the ranks' meeting makes the step, with that failure.
            return Ok(outputs);
        }
        let pending = self
            .shared
            .registered()
            .filter(|pending| one_generation(pending))
            .ok_or(HookError::Unregistered)?;
        match pending.first().map(|first| first.phase) {
            Some(Phase::First) => self.after_first(outputs, &pending),
            Some(Phase::Second) => self.after_second(outputs, &pending),
            None => Err(HookError::Unregistered),
        }
    }

    fn link_model(&self) -> LinkModel {
        self.inner.link_model()
    }

    fn assist(&self, rank: usize) {
        self.inner.assist(rank);
    }
}

impl<D, I> Hooked<D, I>
where
    I: InterProcess + 'static,
    D: StagingDevice<I::Buffer>,
    I::Buffer: LayoutBuffer,
{
    /// After phase 1: the exchange on the outputs, then (where phase 2 is a local all-gather)
    /// the reduced shards staged in as this collective's outputs, or the final outputs.
    fn after_first(
        &self,
        outputs: Vec<D::Tensor>,
        pending: &[Pending],
    ) -> Result<Vec<D::Tensor>, HookError<D::Error>> {
        let shared = &self.shared;
        let local = shared.layout.local();
        let generation = pending.first().map_or(0, |first| first.generation);
        let parts = outputs
            .into_iter()
            .zip(pending)
            .enumerate()
            .map(|(rank, (output, registered))| {
                let data = if let Some(early) = &registered.early {
                    let _ = discard(output);
                    Err(early.clone())
                } else if registered.request.needs_part(local, rank) {
                    shared.stage_out(rank, "its local result", output).map(Some)
                } else {
                    discard(output).map(|()| None).map_err(|panic| {
                        format!("rank {rank}: dropping its local result panicked: {panic}")
                    })
                };
                Part {
                    request: registered.request,
                    data,
                    deadline: registered.deadline,
                }
            })
            .collect();
        let failed = |error: HierarchicalError| {
            shared.stash(generation, Phase::First, error.clone());
            HookError::Agreed(error)
        };
        let shards = match shared.exchange(generation, parts) {
            Ok(Handout::Outputs(outputs)) => return Ok(outputs),
            Ok(Handout::Shards(shards)) => shards,
            Err(error) => return Err(failed(error)),
        };
        let staged: Vec<Result<D::Tensor, String>> = shards
            .into_iter()
            .enumerate()
            .map(|(rank, shard)| shared.stage_in(rank, "its shard", shard))
            .collect();
        let Some(failure) = staged
            .iter()
            .find_map(|shard| shard.as_ref().err().cloned())
        else {
            return Ok(staged.into_iter().flatten().collect());
        };
        // A shard that cannot be staged in ends the generation here; the other processes go on
        // to their all-gather, then the closing agreement: close with the failure.
        for shard in staged.into_iter().flatten() {
            let _ = discard(shard);
        }
        let (tag, deadline) = closing_terms(pending);
        let error = match shared.close(generation, Some(failure), tag, deadline) {
            Err(error) => error,
            Ok(()) => internal("a closing agreement that missed a failure"),
        };
        Err(failed(error))
    }

    /// After phase 2 (an all-reduce's all-gather): the closing agreement.
    fn after_second(
        &self,
        outputs: Vec<D::Tensor>,
        pending: &[Pending],
    ) -> Result<Vec<D::Tensor>, HookError<D::Error>> {
        let generation = pending.first().map_or(0, |first| first.generation);
        let (tag, deadline) = closing_terms(pending);
        match self.shared.close(generation, None, tag, deadline) {
            Ok(()) => Ok(outputs),
            Err(error) => {
                for output in outputs {
                    let _ = discard(output);
                }
                self.shared.stash(generation, Phase::Second, error.clone());
                Err(HookError::Agreed(error))
            }
        }
    }
}

/// Whether every rank registered for the same generation and phase.
fn one_generation(pending: &[Pending]) -> bool {
    pending.first().is_some_and(|first| {
        pending
            .iter()
            .all(|other| other.generation == first.generation && other.phase == first.phase)
    })
}

/// The tag and deadline of a generation's closing agreement.
fn closing_terms(pending: &[Pending]) -> (u64, Option<std::time::Instant>) {
    let tag = pending.first().map_or(0, |first| first.request.tag());
    (tag, earliest(pending.iter().map(|p| p.deadline)))
}
