//! Shared by the benchmarks: persistent rank threads driven through criterion's `iter_custom`,
//! and a record of every sample so that each benchmark can print the ratios of its targets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The command that stops the crew.
const STOP: u64 = u64::MAX;

/// `world` long-lived threads, one per rank, each running a round closure; rank 0's round runs
/// on the measuring thread. [`run`](Self::run) makes every rank run `iters` rounds and times rank
/// 0's: no thread is spawned per iteration.
pub struct Crew {
    shared: Arc<CrewShared>,
    helpers: Vec<JoinHandle<()>>,
    rank_zero: Box<dyn FnMut()>,
}

struct CrewShared {
    start: Barrier,
    iters: AtomicU64,
}

impl Crew {
    /// A crew whose rank `r` runs `make(r)` once per round.
    pub fn new(world: usize, mut make: impl FnMut(usize) -> Box<dyn FnMut() + Send>) -> Self {
        let shared = Arc::new(CrewShared {
            start: Barrier::new(world),
            iters: AtomicU64::new(0),
        });
        let helpers = (1..world)
            .map(|rank| {
                let shared = Arc::clone(&shared);
                let mut round = make(rank);
                std::thread::spawn(move || {
                    loop {
                        shared.start.wait();
                        let iters = shared.iters.load(Ordering::Acquire);
                        if iters == STOP {
                            break;
                        }
                        for _ in 0..iters {
                            round();
                        }
                    }
                })
            })
            .collect();
        Self {
            shared,
            helpers,
            rank_zero: make(0),
        }
    }

    /// Every rank runs `iters` rounds; returns how long rank 0 took.
    pub fn run(&mut self, iters: u64) -> Duration {
        self.shared.iters.store(iters, Ordering::Release);
        self.shared.start.wait();
        let start = Instant::now();
        for _ in 0..iters {
            (self.rank_zero)();
        }
        start.elapsed()
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.shared.iters.store(STOP, Ordering::Release);
        self.shared.start.wait();
        for helper in self.helpers.drain(..) {
            let _ = helper.join();
        }
    }
}

/// Per benchmark id, the per-iteration time of every sample criterion took, in order (warm-up
/// calls first, the measured samples last).
fn samples() -> &'static Mutex<BTreeMap<String, Vec<f64>>> {
    static SAMPLES: OnceLock<Mutex<BTreeMap<String, Vec<f64>>>> = OnceLock::new();
    SAMPLES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Remember that `iters` iterations of benchmark `id` took `elapsed`; returns `elapsed`.
pub fn record(id: &str, iters: u64, elapsed: Duration) -> Duration {
    let per_iteration = elapsed.as_secs_f64() / iters.max(1) as f64;
    samples()
        .lock()
        .unwrap()
        .entry(id.to_owned())
        .or_default()
        .push(per_iteration);
    elapsed
}

/// The median per-iteration time of the last `last` samples of `id`, in seconds.
pub fn median(id: &str, last: usize) -> Option<f64> {
    let samples = samples().lock().unwrap();
    let all = samples.get(id)?;
    let mut tail: Vec<f64> = all[all.len().saturating_sub(last)..].to_vec();
    tail.sort_by(f64::total_cmp);
    tail.get(tail.len() / 2).copied()
}

/// The 1-minute load average, as `uptime` shows it (`?` if unreadable).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// A time in the unit that reads best.
pub fn pretty(seconds: f64) -> String {
    if seconds < 1e-6 {
        format!("{:.1} ns", seconds * 1e9)
    } else if seconds < 1e-3 {
        format!("{:.2} µs", seconds * 1e6)
    } else {
        format!("{:.2} ms", seconds * 1e3)
    }
}
