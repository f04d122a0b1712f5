//! [`FaultyError`] and [`FaultPoint`]: what a [`FaultyDevice`](super::FaultyDevice) returns.

use std::fmt;

/// The call an injected error or panic struck.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultPoint {
    /// `prepare`.
    Prepare,
    /// `describe` (it cannot fail: a fault there panics).
    Describe,
    /// `begin`.
    Begin,
    /// `exchange` at this step.
    Exchange {
        /// The step, counted from 0 per generation.
        step: usize,
    },
    /// `finish`.
    Finish,
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultPoint::Prepare => f.write_str("prepare"),
            FaultPoint::Describe => f.write_str("describe"),
            FaultPoint::Begin => f.write_str("begin"),
            FaultPoint::Exchange { step } => write!(f, "exchange step {step}"),
            FaultPoint::Finish => f.write_str("finish"),
        }
    }
}

/// An error of a [`FaultyDevice`](super::FaultyDevice): an injected one, or the wrapped device's own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FaultyError<E> {
    /// A fault of the plan fired.
    #[error("injected error in {point}{} in generation {generation}", attributed(*.rank))]
    Injected {
        /// The call it struck.
        point: FaultPoint,
        /// The rank it is attributed to, if any.
        rank: Option<usize>,
        /// The generation.
        generation: u64,
    },
    /// The wrapped device failed; its message is kept as is.
    #[error(transparent)]
    Device(E),
    /// A phantom tensor (padding from an `outputs` fault, which a communicator never delivers)
    /// was handed back to the device.
    #[error("a phantom tensor from an injected output-count fault holds no device tensor")]
    PhantomTensor,
    /// `begin` found a prepared input lent to another `begin` that is still running (or that
    /// panicked while holding it).
    #[error("rank {rank}'s prepared input is in use by another begin")]
    PreparedInUse {
        /// The rank.
        rank: usize,
    },
}

pub(super) fn attributed(rank: Option<usize>) -> String {
    rank.map(|rank| format!(" on rank {rank}"))
        .unwrap_or_default()
}

/// The message of an injected panic at `point`, attributed to `rank`.
pub(super) fn injected_panic(point: FaultPoint, rank: Option<usize>, generation: u64) -> String {
    format!(
        "injected panic in {point}{} in generation {generation}",
        attributed(rank)
    )
}

/// The message of an armed value's panic in `Drop`; `what` names the value.
pub(super) fn drop_panic(what: &str, rank: Option<usize>, generation: u64) -> String {
    format!(
        "injected panic in drop of {what}{} in generation {generation}",
        attributed(rank)
    )
}
