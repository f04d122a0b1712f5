//! Keeps contained panics off the output.
//!
//! The fault injector panics on purpose, and the core contains every such panic. The default
//! panic hook still prints each one, and shuttle's hook (which wraps it) also prints a "failing
//! schedule" for it, although nothing failed: thousands of iterations would flood the log and
//! bury the one report that matters. [`silence_injected_panics`] installs a hook that swallows
//! panics whose message is the injector's (`injected panic …`) and hands every other panic to the
//! hook that was there before — under shuttle, shuttle's own, so a real failure still prints its
//! schedule and how to replay it.

use std::any::Any;
use std::panic;
use std::sync::Once;

/// The marker every panic of [`FaultyDevice`](ruccl_sim::FaultyDevice) starts with.
pub const INJECTED: &str = "injected panic";

/// Install (once per process) the hook that silences injected panics and forwards the others.
pub fn silence_injected_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Shuttle installs its hook (once) on its first execution, wrapping whatever hook is in
        // place then. Let it do so now, so that ours goes outside it and sees panics first.
        #[cfg(ruccl_shuttle)]
        shuttle::check_random(|| {}, 1);
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !is_injected(info.payload()) {
                previous(info);
            }
        }));
    });
}

/// Whether a panic payload is the fault injector's.
pub fn is_injected(payload: &(dyn Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    message.is_some_and(|text| text.starts_with(INJECTED))
}
