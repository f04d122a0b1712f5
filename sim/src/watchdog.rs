//! Deadlines for tests that run ranks on real threads: a [`Watchdog`] fails the whole test
//! process — naming the ranks still inside a call and the generation each is in, as its
//! [`Progress`] recorded them — once the section it guards has made no progress for its limit.
//! A slip that loses a wake-up then fails in seconds, saying who waits, instead of hanging
//! `cargo test` until an outer timeout.
//!
//! Used by the core's integration tests (which compile this file into their `common` module: the
//! core cannot depend on this crate), by the models' real-thread runs and by the conformance
//! suite's tests. Test support only: nothing in a production path arms a watchdog. Real threads
//! and the real clock, so it does not exist under the model checkers' cfgs.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Who is inside which call, and when that last changed.
struct Ranks {
    /// Rank → "rank r in generation g (what)".
    inside: BTreeMap<usize, String>,
    /// The last time a rank entered or left a call (or the progress was made).
    changed: Instant,
}

/// Where each rank of a test is: which call it is inside and in which generation. Cloning shares
/// it (the ranks' threads record, the watchdog reads).
#[derive(Clone)]
pub struct Progress(Arc<Mutex<Ranks>>);

impl Default for Progress {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Ranks {
            inside: BTreeMap::new(),
            changed: Instant::now(),
        })))
    }
}

impl Progress {
    fn ranks(&self) -> MutexGuard<'_, Ranks> {
        // A panicking rank thread cannot make the report unreadable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Rank `rank` enters `what` of generation `generation`.
    pub fn enter(&self, rank: usize, generation: u64, what: impl Display) {
        let mut ranks = self.ranks();
        ranks.inside.insert(
            rank,
            format!("rank {rank} in generation {generation} ({what})"),
        );
        ranks.changed = Instant::now();
    }

    /// Rank `rank` has returned from its call.
    pub fn leave(&self, rank: usize) {
        let mut ranks = self.ranks();
        ranks.inside.remove(&rank);
        ranks.changed = Instant::now();
    }

    /// How long since a rank last entered or left a call.
    fn quiet_for(&self) -> Duration {
        self.ranks().changed.elapsed()
    }

    /// The ranks still inside a call, one clause each.
    pub fn stuck(&self) -> String {
        let ranks = self.ranks();
        if ranks.inside.is_empty() {
            "no rank is inside a call".to_owned()
        } else {
            ranks
                .inside
                .values()
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        }
    }
}

/// Fails the whole test process, with exit status 101 and the ranks still inside a call, once
/// the section it guards — from [`arm`](Self::arm) until the watchdog is dropped — has gone
/// `limit` without any rank entering or leaving a call. A section that records no progress at
/// all has `limit` from the arming.
pub struct Watchdog {
    disarm: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Guard `what` for `limit` of no progress, reporting `progress` if it fires.
    pub fn arm(what: impl Display, limit: Duration, progress: Progress) -> Self {
        let (disarm, disarmed) = mpsc::channel::<()>();
        let what = what.to_string();
        let thread = std::thread::spawn(move || {
            loop {
                let left = limit.saturating_sub(progress.quiet_for());
                if left.is_zero() {
                    break;
                }
                match disarmed.recv_timeout(left) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            // Straight to the process's stderr: the test harness captures `eprintln!` of the
            // test's threads, and the capture dies with the process.
            let report = format!(
                "\nwatchdog: {what} made no progress for {limit:?}; stuck: {}\n",
                progress.stuck()
            );
            let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
            std::process::exit(101);
        });
        Self {
            disarm: Some(disarm),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.disarm.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
