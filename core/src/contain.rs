//! Containment of device panics: every call into device code, and every drop of a device value,
//! goes through here so that no panic unwinds into the rendezvous.

use crate::error::{NativeCollectiveError, Phase};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Run a fallible device call. An `Err` becomes [`NativeCollectiveError::Device`] (its message
/// rendered inside the containment, since `Display` is device code too); a panic becomes
/// [`NativeCollectiveError::Panicked`].
pub(crate) fn device_call<T, E: std::error::Error>(
    phase: Phase,
    rank: Option<usize>,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, NativeCollectiveError> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        call().map_err(|error| error.to_string())
    }));
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(message)) => Err(NativeCollectiveError::Device {
            phase,
            rank,
            message,
        }),
        Err(payload) => Err(panicked(phase, rank, payload)),
    }
}

/// Run an infallible device call (`describe`, `clone`, `link_model`); a panic becomes
/// `Panicked`.
pub(crate) fn infallible_call<T>(
    phase: Phase,
    rank: Option<usize>,
    call: impl FnOnce() -> T,
) -> Result<T, NativeCollectiveError> {
    catch_unwind(AssertUnwindSafe(call)).map_err(|payload| panicked(phase, rank, payload))
}

/// Drop a value whose failure to drop cannot change an outcome already decided (an error is
/// being delivered anyway). The panic is contained and its error discarded.
pub(crate) fn discard<T>(value: T) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}

fn panicked(
    phase: Phase,
    rank: Option<usize>,
    payload: Box<dyn Any + Send>,
) -> NativeCollectiveError {
    let message = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    };
    // The payload is device data too: its drop is contained like any other.
    discard(payload);
    NativeCollectiveError::Panicked {
        phase,
        rank,
        message,
    }
}
