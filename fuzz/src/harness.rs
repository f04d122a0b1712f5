//! What every threaded target needs around a run: quiet injected panics, a watchdog that turns a
//! hang into a crash, and a fresh thread to run on.

use std::panic::resume_unwind;
use std::panic::{self, PanicHookInfo};
use std::sync::Once;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// The prefix of every panic the fault decorator injects (in a call or in a `Drop`).
pub const INJECTED_PANIC: &str = "injected panic";

/// Let panics injected by a `FaultyDevice` unwind silently; hand every other panic to the hook
/// that was installed before (libFuzzer's, which aborts the process so the input is saved as a
/// crash; or the test harness's). Idempotent.
///
/// libfuzzer-sys installs a hook that aborts on *every* panic, so without this a panic that the
/// communicator contains by design would be reported as a crash.
pub fn pass_injected_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !is_injected(info) {
                previous(info);
            }
        }));
    });
}

fn is_injected(info: &PanicHookInfo<'_>) -> bool {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    message.is_some_and(|message| message.starts_with(INJECTED_PANIC))
}

/// Aborts the process if it is not dropped within its limit: a bound on a whole run, so that a
/// wait that never ends fails the run (and the fuzzer saves the input) instead of hanging it.
#[derive(Debug)]
pub struct Watchdog {
    done: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Start watching `what`; abort the process with a message naming it after `limit`.
    pub fn arm(limit: Duration, what: impl Into<String>) -> Self {
        let what = what.into();
        let (done, finished) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(limit) {
                eprintln!("watchdog: {what} still running after {limit:?}: something hangs");
                std::process::abort();
            }
        });
        Self {
            done: Some(done),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Disconnecting the channel ends the watcher at once.
        drop(self.done.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Run `run` on a thread of its own and return its result (re-raising its panic).
///
/// Thread-local values with destructors register them with glibc the first time a thread touches
/// them, in an allocation freed only when that thread exits. On libFuzzer's own thread that
/// allocation outlives the input and LeakSanitizer reports it as a leak; on a thread that ends with
/// the input, it is freed.
pub fn on_own_thread<R: Send>(run: impl FnOnce() -> R + Send) -> R {
    thread::scope(|scope| match scope.spawn(run).join() {
        Ok(result) => result,
        Err(payload) => resume_unwind(payload),
    })
}
