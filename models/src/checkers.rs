//! Runners for the checkers that count what they explored and time it, printing one line per
//! model to stderr (the `cargo loom` / `cargo shuttle` aliases pass `--nocapture`):
//!
//! ```text
//! [loom] success W=3 G=2 (no preemption bound): 123456 executions in 61.2 s
//! [shuttle random] faults W≤8 G≤8: 4000 iterations in 9.8 s
//! ```
//!
//! Both silence injected panics first ([`crate::quiet`]).

use crate::quiet::silence_injected_panics;
use std::time::Instant;

/// What one model run explored.
#[derive(Clone, Copy, Debug)]
pub struct Explored {
    /// Complete executions (loom) or iterations (shuttle).
    pub executions: usize,
    /// Wall time.
    pub seconds: f64,
}

fn report(checker: &str, name: &str, detail: &str, explored: Explored) -> Explored {
    eprintln!(
        "[{checker}] {name}{detail}: {} executions in {:.1} s",
        explored.executions, explored.seconds
    );
    explored
}

/// Run `check`, which returns the number of executions it completed. If it fails, print how far
/// it got — the number of the failing execution and the time — and resume the panic (whose
/// report, with shuttle, includes the schedule to replay).
fn run_reported(
    checker: &str,
    name: &str,
    detail: &str,
    started: Instant,
    counted: &dyn Fn() -> usize,
    check: impl FnOnce() -> usize,
) -> Explored {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
        Ok(executions) => report(
            checker,
            name,
            detail,
            Explored {
                executions,
                seconds: started.elapsed().as_secs_f64(),
            },
        ),
        Err(payload) => {
            eprintln!(
                "[{checker}] {name}{detail}: FAILED in execution {} after {:.1} s",
                counted(),
                started.elapsed().as_secs_f64()
            );
            std::panic::resume_unwind(payload)
        }
    }
}

/// The loom runner.
#[cfg(ruccl_loom)]
#[allow(
    clippy::disallowed_types,
    reason = "the execution counter lives outside the model, where the checker's types cannot"
)]
pub mod loom {
    use super::{Explored, Instant, run_reported, silence_injected_panics};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Branches one execution may take before loom gives up on it (loom's default is 1 000;
    /// W = 4 × G = 2 needs more).
    const MAX_BRANCHES: usize = 100_000;

    /// Explore every interleaving of `model` — all of them with `preemption_bound: None`, those
    /// with at most that many preemptions otherwise. Counts the executions.
    pub fn explore(
        name: &str,
        preemption_bound: Option<usize>,
        model: impl Fn() + Sync + Send + 'static,
    ) -> Explored {
        silence_injected_panics();
        let executions = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&executions);
        let mut builder = ::loom::model::Builder::new();
        builder.preemption_bound = preemption_bound;
        builder.max_branches = MAX_BRANCHES;
        let detail = match preemption_bound {
            None => " (no preemption bound)".to_owned(),
            Some(bound) => format!(" (preemption bound {bound})"),
        };
        let started = Instant::now();
        let seen = Arc::clone(&executions);
        run_reported(
            "loom",
            name,
            &detail,
            started,
            &|| seen.load(Ordering::Relaxed),
            || {
                builder.check(move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                    model();
                });
                executions.load(Ordering::Relaxed)
            },
        )
    }
}

/// The shuttle runners: the random and the PCT scheduler (those behind `shuttle::check_random`
/// and `shuttle::check_pct`), seeded so that CI explores the same schedules every run. Setting
/// `SHUTTLE_RANDOM_SEED` explores others; a failure prints its schedule for `shuttle::replay`
/// (and the random scheduler its seed).
#[cfg(ruccl_shuttle)]
#[allow(
    clippy::disallowed_types,
    reason = "the execution counter lives outside the model, where the checker's types cannot"
)]
pub mod shuttle {
    use super::{Explored, Instant, run_reported, silence_injected_panics};
    use ::shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
    use ::shuttle::{Config, Runner};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A seed per model, from its name: stable across runs and distinct between models.
    fn seed(name: &str) -> u64 {
        name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// `iterations` random schedules of `model` (as `shuttle::check_random`).
    pub fn random(
        name: &str,
        iterations: usize,
        model: impl Fn() + Send + Sync + 'static,
    ) -> Explored {
        let scheduler = RandomScheduler::new_from_seed(seed(name), iterations);
        run(
            Runner::new(scheduler, Config::new()),
            "shuttle random",
            name,
            model,
        )
    }

    /// `iterations` PCT schedules of `model` with bug depth `depth` (as `shuttle::check_pct`).
    pub fn pct(
        name: &str,
        iterations: usize,
        depth: usize,
        model: impl Fn() + Send + Sync + 'static,
    ) -> Explored {
        let scheduler = PctScheduler::new_from_seed(seed(name), depth, iterations);
        let checker = format!("shuttle pct depth {depth}");
        run(Runner::new(scheduler, Config::new()), &checker, name, model)
    }

    fn run<S: Scheduler + 'static>(
        runner: Runner<S>,
        checker: &str,
        name: &str,
        model: impl Fn() + Send + Sync + 'static,
    ) -> Explored {
        silence_injected_panics();
        let executions = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&executions);
        run_reported(
            checker,
            name,
            "",
            Instant::now(),
            &|| executions.load(Ordering::Relaxed),
            || {
                runner.run(move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                    model();
                })
            },
        )
    }
}
