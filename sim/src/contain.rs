//! Host-side harness code calling into a device, each call contained: an error becomes its
//! message, a panic (in the call, in rendering the error, or in dropping a device value or the
//! panic's own payload) becomes a description of the panic. Nothing a device does unwinds into
//! the harness. The conformance suite and the perf tool's sweep and scenario runner call devices
//! through these.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Run device code; a panic becomes `Err("{what} panicked: message")`.
pub fn contained<T>(what: &str, call: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(call))
        .map_err(|payload| format!("{what} panicked: {}", panic_message(payload)))
}

/// Run a fallible device call; its error becomes `"{what} failed: message"`, a panic as in
/// [`contained`].
pub fn call<T, E: std::fmt::Display>(
    what: &str,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, String> {
    contained(what, || call().map_err(|error| error.to_string()))?
        .map_err(|message| format!("{what} failed: {message}"))
}

/// Drop a device value; a panicking `Drop` becomes `"{what} panicked: message"`.
pub fn release<T>(what: &str, value: T) -> Result<(), String> {
    contained(what, move || drop(value))
}

/// The text of a panic's payload (`&str` or `String`; anything else is described). The payload
/// is device data too: it is dropped here, contained.
pub fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let message = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-string payload".to_owned()
    };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    message
}
