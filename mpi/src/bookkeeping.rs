//! What the perf binaries (`mpi-allreduce-perf`, `hierarchical-perf`) do between their timed
//! calls, shared by both, with every wait bounded by the tool's timeout (`-T`, the timeout the
//! tools' deadline engines give each call): the barriers before and after each engine's round,
//! the means and sums of the figures, the memory check; how a tool leaves after a failure; and
//! a planted death for the process-death check (`RUCCL_MPI_PERF_DIE`). Tools only; nothing in
//! the communicator uses it.
//!
//! Bookkeeping never blocks in MPI: a barrier is `MPI_Ibarrier` polled until the timeout, a
//! reduction is an all-reduce on a [`Waiting::Deadlines`] engine of its own with a deadline.
//! So a peer that dies between two generations or during the bookkeeping, under
//! `mpirun --enable-recovery`, is a [`BookkeepingError`] on every survivor at its timeout, and
//! the tool reports it and exits non-zero ([`leave`]) instead of waiting for ever.

use crate::report::{EXIT_FAILED, EXIT_USAGE};
use crate::{InterProcessError, MpiInterProcess, MpiRuntime, Waiting, lock_mpi};
use mpi::traits::CommunicatorCollectives;
use ruccl_core::ReduceOperation;
use ruccl_host::HostValues;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The tools' default timeout (`-T`): of every call of a deadline engine (`hier-dl`,
/// `ruccl-dl`) and of every bookkeeping wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A timeout argument in seconds (`2`, `0.5`): positive and finite; `None` otherwise.
pub fn parse_seconds(text: &str) -> Option<Duration> {
    let seconds: f64 = text.parse().ok()?;
    (seconds.is_finite() && seconds > 0.0 && seconds <= 1e9)
        .then(|| Duration::from_secs_f64(seconds))
}

/// A failed bookkeeping step: the same text on every process that reached the step (the step's
/// number and operation are the same on every process; the engine's errors are agreed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BookkeepingError {
    /// A barrier's timeout passed before every process arrived (a process died or hangs).
    #[error(
        "bookkeeping step #{step} ({operation}) timed out after {} s before every process arrived",
        .timeout.as_secs_f64()
    )]
    TimedOut {
        /// The step: the bookkeeping operations this process started before it, from 0.
        step: u64,
        /// What the step was.
        operation: &'static str,
        /// The timeout it waited.
        timeout: Duration,
    },
    /// A reduction failed on the bookkeeping engine (its `TimedOut` when a process never came).
    #[error("bookkeeping step #{step} ({operation}): {source}")]
    Engine {
        /// The step.
        step: u64,
        /// What the step was.
        operation: &'static str,
        /// The engine's error.
        source: InterProcessError,
    },
}

/// How the process waits for an `MPI_Ibarrier`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Polls back to back, yielding the core between polls: the barrier before a timed round,
    /// whose waiters leave together.
    Prompt,
    /// Sleeps 200 µs between polls: a process that waits while others are measured leaves them
    /// the cores.
    Sleepy,
}

/// The bookkeeping of one tool process: barriers and reductions over every process of the job,
/// each bounded by the timeout, numbered (the steps) for the planted death.
pub struct Bookkeeping {
    runtime: MpiRuntime,
    engine: MpiInterProcess,
    timeout: Duration,
    steps: Countdown,
}

impl Bookkeeping {
    /// The bookkeeping engine (a `Waiting::Deadlines` duplicate of `MPI_COMM_WORLD`, created
    /// within `timeout`): every process calls this, first among its collective setup calls.
    /// `death` plants a death at a bookkeeping step (site `bookkeeping`).
    pub fn new(
        runtime: &MpiRuntime,
        timeout: Duration,
        death: Option<&PlannedDeath>,
    ) -> Result<Self, InterProcessError> {
        let engine = runtime.communicator(Waiting::Deadlines, Some(Instant::now() + timeout))?;
        Ok(Bookkeeping {
            runtime: runtime.clone(),
            engine,
            timeout,
            steps: Countdown::new(death, runtime.process(), BOOKKEEPING),
        })
    }

    /// The timeout of every wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A barrier of every process of the job, waited for at `pace` until the timeout.
    pub fn barrier(&self, pace: Pace) -> Result<(), BookkeepingError> {
        let operation = match pace {
            Pace::Prompt => "barrier",
            Pace::Sleepy => "idle barrier",
        };
        let step = self.steps.tick();
        let deadline = Instant::now() + self.timeout;
        let request = {
            let _mpi = lock_mpi();
            self.runtime.world().immediate_barrier()
        };
        let mut pending = request;
        loop {
            let tested = {
                let _mpi = lock_mpi();
                pending.test()
            };
            match tested {
                Ok(_) => return Ok(()),
                Err(request) => pending = request,
            }
            if Instant::now() >= deadline {
                // MPI cannot cancel a collective; the request stays pending (a barrier has no
                // buffers to keep alive) and the tool leaves.
                std::mem::forget(pending);
                return Err(BookkeepingError::TimedOut {
                    step,
                    operation,
                    timeout: self.timeout,
                });
            }
            match pace {
                Pace::Prompt => std::thread::yield_now(),
                Pace::Sleepy => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }

    /// The sum over every process of `values`, on the bookkeeping engine, within the timeout.
    fn all_reduce(
        &self,
        operation: &'static str,
        values: HostValues,
        reduce: ReduceOperation,
    ) -> Result<HostValues, BookkeepingError> {
        let step = self.steps.tick();
        self.engine
            .all_reduce(Ok(values), reduce, Some(Instant::now() + self.timeout))
            .map_err(|source| BookkeepingError::Engine {
                step,
                operation,
                source,
            })
    }

    /// The mean of `value` over the processes that have one (0 if none has).
    pub fn average(&self, value: Option<f64>) -> Result<f64, BookkeepingError> {
        let mine = vec![value.unwrap_or(0.0), f64::from(u8::from(value.is_some()))];
        match self.all_reduce("mean", HostValues::F64(mine), ReduceOperation::Sum)? {
            HostValues::F64(sum) if sum.len() == 2 && sum[1] > 0.0 => Ok(sum[0] / sum[1]),
            _ => Ok(0.0),
        }
    }

    /// The sum of `value` over every process.
    pub fn sum(&self, value: u64) -> Result<u64, BookkeepingError> {
        let mine = vec![i64::try_from(value).unwrap_or(i64::MAX)];
        match self.all_reduce("sum", HostValues::I64(mine), ReduceOperation::Sum)? {
            HostValues::I64(sum) => Ok(sum
                .first()
                .map_or(0, |sum| u64::try_from(*sum).unwrap_or(0))),
            _ => Ok(0),
        }
    }

    /// Whether `flag` holds on any process.
    pub fn any(&self, flag: bool) -> Result<bool, BookkeepingError> {
        self.any_of("any", flag)
    }

    /// [`any`](Self::any), the step named `operation`.
    fn any_of(&self, operation: &'static str, flag: bool) -> Result<bool, BookkeepingError> {
        let mine = vec![i64::from(flag)];
        match self.all_reduce(operation, HostValues::I64(mine), ReduceOperation::Max)? {
            HostValues::I64(any) => Ok(any.first().is_some_and(|any| *any != 0)),
            _ => Ok(false),
        }
    }

    /// [`check_memory`](crate::report::check_memory) for the job: every process needs
    /// `per_process` bytes at the largest size, and the processes sharing a node
    /// ([`node_local_rank`](crate::node_local_rank)) share its `MemAvailable`. Agreed over the
    /// job: if any node is short, every process gets [`Refused`] — with the text on the first
    /// process of that node, `None` elsewhere.
    pub fn check_job_memory(&self, per_process: u64, what: &str) -> Result<(), Refused> {
        let node = crate::node_local_rank()
            .map_err(|error| Refused::Failed(Failure::here(error.to_string())))?;
        let needed = per_process.saturating_mul(node.ranks as u64);
        let mine = crate::report::check_memory(needed, ruccl_host::mem_available(), what);
        let refused = self
            .any_of("memory check", mine.is_err())
            .map_err(|error| Refused::Failed(Failure::from(error)))?;
        match (mine, refused) {
            (Err(message), _) => Err(Refused::Usage((node.rank == 0).then_some(message))),
            (Ok(()), false) => Ok(()),
            (Ok(()), true) => Err(Refused::Usage(None)),
        }
    }
}

/// How both perf tools start, after their own options are checked: the bookkeeping engine
/// ([`Bookkeeping::new`]), then the job's memory check for `per_process` bytes at the largest
/// size, `what` naming it ([`Bookkeeping::check_job_memory`]). A job that cannot run is
/// `Err(EXIT_USAGE)`, its text printed as `[process P] tool: text` on the process that owns it;
/// a failure ends the tool ([`leave`]).
pub fn start(
    runtime: &MpiRuntime,
    tool: &str,
    timeout: Duration,
    death: Option<&PlannedDeath>,
    per_process: u64,
    what: &str,
) -> Result<Bookkeeping, u8> {
    let bookkeeping = match Bookkeeping::new(runtime, timeout, death) {
        Ok(bookkeeping) => bookkeeping,
        Err(error) => {
            let failure = Failure::everywhere(format!("cannot start the bookkeeping: {error}"));
            leave(runtime, tool, &failure)
        }
    };
    match bookkeeping.check_job_memory(per_process, what) {
        Ok(()) => Ok(bookkeeping),
        Err(Refused::Usage(message)) => {
            if let Some(message) = message {
                say(runtime, tool, &message);
            }
            Err(EXIT_USAGE)
        }
        Err(Refused::Failed(failure)) => leave(runtime, tool, &failure),
    }
}

/// Why a tool does not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Options this job cannot run (exit [`EXIT_USAGE`]): the text
    /// on the process that prints it, `None` elsewhere.
    Usage(Option<String>),
    /// The job failed while deciding ([`leave`] with it).
    Failed(Failure),
}

/// A failure that ends a tool (exit [`EXIT_FAILED`]), and whether the other processes meet it
/// too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong, one line.
    pub text: String,
    /// Whether every other process of the job returns this failure too, or times out at its own
    /// deadline (the communicators' agreed errors, a bookkeeping timeout): then each process
    /// reports it and leaves. Otherwise (a local error) the process ends the job.
    pub everywhere: bool,
}

impl Failure {
    /// A failure every process meets, or times out at its own deadline.
    pub fn everywhere(text: impl Into<String>) -> Self {
        Failure {
            text: text.into(),
            everywhere: true,
        }
    }

    /// A failure of this process alone.
    pub fn here(text: impl Into<String>) -> Self {
        Failure {
            text: text.into(),
            everywhere: false,
        }
    }

    /// The same failure, its text after `context: `.
    pub fn context(self, context: impl std::fmt::Display) -> Self {
        Failure {
            text: format!("{context}: {}", self.text),
            ..self
        }
    }
}

impl From<BookkeepingError> for Failure {
    fn from(error: BookkeepingError) -> Self {
        Failure::everywhere(error.to_string())
    }
}

/// Ends the tool after `failure`: prints `[process P] tool: text` on standard error, then —
/// for a failure every process meets — exits [`EXIT_FAILED`] without finalising MPI (a dead
/// peer would hang `MPI_Finalize`'s closing exchange; plain `mpirun` then ends the job, and
/// under `--enable-recovery` every other survivor reports the same failure at its own
/// timeout), or — for a failure of this process alone — ends the job (`MPI_Abort`), so that the
/// others do not wait for it.
pub fn leave(runtime: &MpiRuntime, tool: &str, failure: &Failure) -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    say(runtime, tool, &failure.text);
    if failure.everywhere {
        std::process::exit(i32::from(EXIT_FAILED));
    }
    runtime.abort_job(i32::from(EXIT_FAILED))
}

/// `[process P] tool: text` on standard error, in one write of the whole line: the processes
/// share the launcher's stream, and a line written piece by piece (stderr is unbuffered) can be
/// cut by another process's line.
fn say(runtime: &MpiRuntime, tool: &str, text: &str) {
    use std::io::Write as _;
    let line = format!("[process {}] {tool}: {text}\n", runtime.process());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The environment variable that plants a death (test-only in spirit: the process-death check
/// of `run-tests.sh`): `PROCESS:SITE:GENERATION` makes process `PROCESS` abort (SIGABRT, as a
/// crash would) right before its call number `GENERATION` (from 0, warm-up and check calls
/// included) at `SITE` — an engine's name (`-E`; in `hierarchical-perf` the call of local rank
/// 0), or `bookkeeping` (the bookkeeping steps: barriers, means, sums, the memory check).
pub const DIE_VARIABLE: &str = "RUCCL_MPI_PERF_DIE";

/// The site name of the bookkeeping steps in [`DIE_VARIABLE`].
pub const BOOKKEEPING: &str = "bookkeeping";

/// A death planted by [`DIE_VARIABLE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedDeath {
    /// The process that dies.
    pub process: usize,
    /// Where: an engine's name, or [`BOOKKEEPING`].
    pub site: String,
    /// Before which of its calls there (from 0).
    pub generation: u64,
}

impl PlannedDeath {
    /// Parses `PROCESS:SITE:GENERATION`, `SITE` one of `sites` or [`BOOKKEEPING`].
    pub fn parse(text: &str, sites: &[&str]) -> Result<Self, String> {
        let bad = || {
            format!(
                "bad {DIE_VARIABLE} `{text}`: PROCESS:SITE:GENERATION, SITE one of {}, {BOOKKEEPING}",
                sites.join(", ")
            )
        };
        let mut parts = text.split(':');
        let (Some(process), Some(site), Some(generation), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        if site != BOOKKEEPING && !sites.contains(&site) {
            return Err(bad());
        }
        Ok(PlannedDeath {
            process: process.parse().map_err(|_| bad())?,
            site: site.to_owned(),
            generation: generation.parse().map_err(|_| bad())?,
        })
    }

    /// [`DIE_VARIABLE`] from the environment: `None` when unset or empty.
    pub fn from_env(sites: &[&str]) -> Result<Option<Self>, String> {
        match std::env::var(DIE_VARIABLE) {
            Ok(text) if !text.is_empty() => Self::parse(&text, sites).map(Some),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("bad {DIE_VARIABLE}")),
        }
    }
}

/// Counts one site's calls on one process, and ends the process at its planted death.
#[derive(Debug)]
pub struct Countdown {
    site: &'static str,
    process: usize,
    die_at: Option<u64>,
    calls: AtomicU64,
}

impl Countdown {
    /// The counter of `site` on `process`, dying where `death` says (if it names them).
    pub fn new(death: Option<&PlannedDeath>, process: usize, site: &'static str) -> Self {
        let die_at = death
            .filter(|death| death.process == process && death.site == site)
            .map(|death| death.generation);
        Countdown {
            site,
            process,
            die_at,
            calls: AtomicU64::new(0),
        }
    }

    /// Counts a call and returns its number; aborts the process instead if it is the planted one,
    /// after saying so on standard error with the time (seconds since the epoch, so that a check
    /// can measure how long the survivors took).
    pub fn tick(&self) -> u64 {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        if self.die_at == Some(call) {
            use std::io::Write as _;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |since| since.as_secs_f64());
            let _ = std::io::stdout().flush();
            let line = format!(
                "[process {}] {DIE_VARIABLE}: dying on purpose before {} call #{call} at {now:.3} s since the epoch\n",
                self.process, self.site
            );
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
            std::process::abort();
        }
        call
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_positive_seconds() {
        assert_eq!(parse_seconds("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_seconds("0.5"), Some(Duration::from_millis(500)));
        for bad in ["0", "-1", "abc", "", "inf", "NaN", "1e300"] {
            assert_eq!(parse_seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_planted_death_names_a_process_a_site_and_a_generation() {
        let sites = ["mpi", "hier-dl"];
        assert_eq!(
            PlannedDeath::parse("1:hier-dl:3", &sites),
            Ok(PlannedDeath {
                process: 1,
                site: "hier-dl".to_owned(),
                generation: 3
            })
        );
        assert_eq!(
            PlannedDeath::parse("0:bookkeeping:0", &sites).map(|death| death.site),
            Ok(BOOKKEEPING.to_owned())
        );
        for bad in [
            "",
            "1",
            "1:hier-dl",
            "1:hier:3",
            "x:mpi:1",
            "1:mpi:-1",
            "1:mpi:2:3",
        ] {
            assert!(PlannedDeath::parse(bad, &sites).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_countdown_counts_its_own_site_on_its_own_process_only() {
        let death = PlannedDeath {
            process: 1,
            site: "mpi".to_owned(),
            generation: 0,
        };
        // Another process, another site: counts, never dies (dying would abort this test).
        for countdown in [
            Countdown::new(Some(&death), 0, "mpi"),
            Countdown::new(Some(&death), 1, BOOKKEEPING),
            Countdown::new(None, 1, "mpi"),
        ] {
            assert_eq!((countdown.tick(), countdown.tick()), (0, 1));
        }
        assert_eq!(Countdown::new(Some(&death), 1, "mpi").die_at, Some(0));
    }

    #[test]
    fn a_failure_keeps_whether_every_process_meets_it() {
        let timed_out = BookkeepingError::TimedOut {
            step: 4,
            operation: "barrier",
            timeout: Duration::from_millis(1500),
        };
        assert_eq!(
            timed_out.to_string(),
            "bookkeeping step #4 (barrier) timed out after 1.5 s before every process arrived"
        );
        let failure = Failure::from(timed_out).context("hier-dl at 4 B");
        assert!(failure.everywhere);
        assert!(
            failure
                .text
                .starts_with("hier-dl at 4 B: bookkeeping step #4")
        );
        assert!(!Failure::here("a worker is gone").context("x").everywhere);
    }
}
