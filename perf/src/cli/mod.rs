//! The `ruccl-perf` command line. The binary is a thin `main` calling [`main`]; everything else is
//! here so that tests can parse and run commands into any writer.
//!
//! | file          | job                                                                   |
//! |---------------|-----------------------------------------------------------------------|
//! | `args.rs`     | [`Cli`] and the flags of each command (clap derive), every backend    |
//! | `perf.rs`     | the sweeps (`all-reduce-perf`, …): table or JSON, trace, NCCL         |
//! | `run.rs`      | `run`: a scenario under a fault plan, rows as generations complete    |
//! | `schedule.rs` | `verify` (MSCCL XML checked) and `export` (a plan as MSCCL XML)       |
//! | `output.rs`   | writing results: a closed pipe stops the run (and fails it)           |
//! | `progress.rs` | the progress bar on a terminal (indicatif)                            |
//!
//! Exit status ([`EXIT_CODES`], also in `--help` and README.md): 0 everything ran and checked
//! out; 1 wrong results, a bandwidth below `NCCL_TESTS_MIN_BW`, or a failed run — a resource
//! limit, a closed or full output included (stderr's last line says which); 2 a command line
//! that makes no run; 101 a panic no fault plan injected; 130 SIGINT, SIGTERM or SIGHUP.

mod args;
mod output;
mod perf;
mod progress;
mod run;
mod schedule;

pub use args::{
    BackendArgs, BaselineArgs, Cli, Command, EXIT_CODES, ExportArgs, Listed, NcclTestsArgs,
    OutputArgs, PerfArgs, Roots, RunArgs, Selection, VerifyArgs,
};
pub use perf::{sweep_configs, sweeps_on};

use crate::scenario::ScenarioError;
use crate::stop::{Stop, StopReason};
use crate::sweep::SweepError;
use crate::trace::TraceError;
use clap::Parser;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// How a command that ran to its end (or was stopped) turned out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything checked out.
    Passed,
    /// The run finished but its results are wrong: what was found (exit 1).
    Wrong(String),
    /// The run was stopped early; what it had was written (a signal: exit 130; a closed
    /// output: exit 1).
    Stopped(StopReason),
}

/// Why a command could not run to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The options make no run (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// The sweep failed.
    #[error("the run failed: {0}")]
    Sweep(#[from] SweepError),
    /// The scenario could not run.
    #[error("the run failed: {0}")]
    Scenario(#[from] ScenarioError),
    /// Writing the results failed (other than a closed pipe).
    #[error("cannot write the results: {0}")]
    Output(#[source] std::io::Error),
    /// The backend could not make its devices (a CUDA driver that fails, say).
    #[error("the run failed: {0}")]
    Backend(String),
    /// The NCCL baseline failed.
    #[error("the run failed: NCCL baseline: {0}")]
    Baseline(String),
    /// The trace file could not be written.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A resource limit of the process (`ulimit -v`, `RUST_MIN_STACK`) leaves the run no room.
    #[error("the run cannot start: {0}")]
    Resource(String),
}

impl CliError {
    /// A run that does not fit in `budget`, described by `message`: a usage error (exit 2) when
    /// the machine's memory or `--memory-limit` is too small, a [`CliError::Resource`] (exit 1)
    /// when the process's address-space limit is.
    pub(crate) fn does_not_fit(budget: &crate::memory::Budget, message: String) -> Self {
        if budget.source == crate::memory::BudgetSource::AddressSpace {
            CliError::Resource(message)
        } else {
            CliError::Usage(message)
        }
    }
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Run `command`, writing results to `out`; `progress` draws a progress bar on stderr.
pub fn execute(
    command: Command,
    out: &mut (dyn Write + Send),
    progress: bool,
) -> Result<Verdict, CliError> {
    execute_with(command, out, progress, &Stop::new())
}

/// [`execute`], stopping early when `stop` is set (by a Ctrl-C handler, say).
pub fn execute_with(
    command: Command,
    out: &mut (dyn Write + Send),
    progress: bool,
    stop: &Stop,
) -> Result<Verdict, CliError> {
    match &command {
        Command::Run(args) => run::scenario(args, out, progress, stop),
        Command::Verify(args) => schedule::verify(args, out),
        Command::Export(args) => schedule::export(args, out),
        other => match other.sweep() {
            Some((collective, args)) => perf::sweeps(collective, args, out, progress, stop),
            None => Err(CliError::Usage("no command".to_owned())),
        },
    }
}

/// Set by the panic hook when something panics that no fault plan injected.
static UNEXPECTED_PANIC: AtomicBool = AtomicBool::new(false);

/// Whether a panic that no fault plan injected has happened in this process.
pub fn unexpected_panic() -> bool {
    UNEXPECTED_PANIC.load(Ordering::SeqCst)
}

/// The stack the command's own thread gets at least (`RUST_MIN_STACK` may ask for more): a
/// smaller one (`ulimit -s 64` for the main thread) would overflow, which aborts the process.
pub const MIN_STACK: usize = 8 << 20;

/// The stack every other thread (ranks, the simulated device's step threads) gets at least:
/// Rust's default, whatever a smaller `RUST_MIN_STACK` (`=1`) asks for.
pub const MIN_THREAD_STACK: usize = 2 << 20;

/// The binary's `main`: parse the process arguments, run, report, and return the exit status.
/// The work runs on a thread with a stack of at least [`MIN_STACK`], whatever `ulimit -s` gave
/// the main thread.
pub fn main() -> ExitCode {
    crate::memory::limit_arenas_under_address_limit();
    let asked = std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok());
    if asked.is_none_or(|bytes| bytes < MIN_THREAD_STACK) {
        // SAFETY: no other thread runs yet (this is the first thing `main` does after reading
        // two /proc files), so nothing reads the environment concurrently; the standard library
        // reads RUST_MIN_STACK when it spawns its first thread, below.
        unsafe { std::env::set_var("RUST_MIN_STACK", MIN_THREAD_STACK.to_string()) };
    }
    let stack = asked.unwrap_or(MIN_STACK).max(MIN_STACK);
    let body = std::thread::Builder::new()
        .name("ruccl-perf".to_owned())
        .stack_size(stack)
        .spawn(run_main);
    match body.map(std::thread::JoinHandle::join) {
        Ok(Ok(code)) => code,
        Ok(Err(_)) => ExitCode::from(101),
        Err(error) => {
            let _ = writeln!(
                std::io::stderr(),
                "ruccl-perf: the run cannot start: cannot start its thread with a {stack}-byte stack: {error} (a resource limit? ulimit -v, RUST_MIN_STACK)"
            );
            ExitCode::from(1)
        }
    }
}

/// [`main`]'s work, on its own thread.
fn run_main() -> ExitCode {
    let command = Cli::parse().into_command();
    watch_panics();
    let stop = Stop::new();
    let on_signal = stop.clone();
    // The first SIGINT/SIGTERM/SIGHUP lets the run finish its size and write what it has; a
    // second one a second later ends the process at once. One sent to the process and to its
    // group at the same moment (as `timeout` and job control do) arrives twice: the echo within
    // the second is not a second request.
    let first: Mutex<Option<std::time::Instant>> = Mutex::new(None);
    let _ = ctrlc::set_handler(move || {
        let mut first = first.lock().unwrap_or_else(PoisonError::into_inner);
        match *first {
            Some(at) if at.elapsed() >= std::time::Duration::from_secs(1) => {
                std::process::exit(130)
            }
            Some(_) => {}
            None => {
                *first = Some(std::time::Instant::now());
                on_signal.request(StopReason::Interrupted);
            }
        }
    });
    let progress = std::io::stderr().is_terminal();
    let mut stdout = std::io::stdout();
    // Rust's stdout swallows writes to a closed descriptor (`>&-`): find out before running.
    let result = match stdout_open() {
        Ok(()) => execute_with(command, &mut stdout, progress, &stop),
        Err(error) => Err(CliError::Output(error)),
    };
    ExitCode::from(exit_status(&result, &mut std::io::stderr()))
}

/// Whether standard output is open. Started with it closed (`ruccl-perf >&-`), the Rust runtime
/// puts `/dev/null` there, opened read-write, and every result would be lost while the writes
/// seem to succeed; a shell's `>/dev/null` opens it write-only, which is fine.
fn stdout_open() -> std::io::Result<()> {
    let target = std::fs::read_link("/proc/self/fd/1");
    let flags = std::fs::read_to_string("/proc/self/fdinfo/1");
    let (Ok(target), Ok(flags)) = (target, flags) else {
        return Ok(());
    };
    let access = flags
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|octal| u32::from_str_radix(octal.trim(), 8).ok())
        .map(|flags| flags & 0o3);
    if target == std::path::Path::new("/dev/null") && access == Some(0o2) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "standard output is closed (started with >&-)",
        ));
    }
    Ok(())
}

/// The exit status of a command that ended with `result` ([`EXIT_CODES`]), writing the last
/// line saying why to `stderr` (nothing for a success or a closed output).
pub fn exit_status(result: &Result<Verdict, CliError>, stderr: &mut dyn Write) -> u8 {
    // A failing stderr has nowhere left to say anything.
    let code = match result {
        Ok(Verdict::Passed) => 0,
        Ok(Verdict::Stopped(StopReason::OutputClosed)) => {
            let _ = writeln!(
                stderr,
                "ruccl-perf: the output was closed before the run ended (broken pipe); the results are incomplete"
            );
            1
        }
        Ok(Verdict::Wrong(reason)) => {
            let _ = writeln!(stderr, "ruccl-perf: wrong results: {reason}");
            1
        }
        Ok(Verdict::Stopped(StopReason::Interrupted)) => {
            let _ = writeln!(stderr, "ruccl-perf: interrupted");
            130
        }
        Err(error) => {
            let _ = writeln!(stderr, "ruccl-perf: {error}");
            error.exit_code()
        }
    };
    if unexpected_panic() {
        let _ = writeln!(
            stderr,
            "ruccl-perf: a panic no --fault injected happened (see above): a bug"
        );
        return 101;
    }
    code
}

/// Keep the panics a fault plan injects (`injected panic in ...`) off stderr — the rows report
/// them, as the error every rank received — and note any other panic, which is reported as usual
/// and makes the exit status 101 ([`unexpected_panic`]). `main` installs it; it replaces the
/// process's panic hook.
pub fn watch_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        if !message.is_some_and(|message| message.starts_with("injected panic")) {
            UNEXPECTED_PANIC.store(true, Ordering::SeqCst);
            report(info);
        }
    }));
}

/// How long "no timeout" (`-T 0`, nccl-tests' meaning) waits: about a century.
pub const NO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);

/// Seconds from the command line as a duration (0: no timeout, as nccl-tests' `-T 0`;
/// anything beyond a century is no timeout too), or a usage error naming `flag`.
fn seconds(flag: &str, value: f64) -> Result<std::time::Duration, CliError> {
    if value == 0.0 || value >= NO_TIMEOUT.as_secs_f64() && value.is_finite() {
        return Ok(NO_TIMEOUT);
    }
    std::time::Duration::try_from_secs_f64(value).map_err(|_| {
        CliError::Usage(format!(
            "{flag} must be a non-negative number of seconds, got {value}"
        ))
    })
}

/// What happened, as the JSON document's and the trace's `outcome`.
fn outcome_json(outcome: &Result<Verdict, String>) -> serde_json::Value {
    let (status, message) = match outcome {
        Ok(Verdict::Passed) => ("passed", String::new()),
        Ok(Verdict::Wrong(reason)) => ("wrong", reason.clone()),
        Ok(Verdict::Stopped(StopReason::Interrupted)) => {
            ("interrupted", StopReason::Interrupted.describe().to_owned())
        }
        Ok(Verdict::Stopped(StopReason::OutputClosed)) => {
            ("stopped", StopReason::OutputClosed.describe().to_owned())
        }
        Err(message) => ("failed", message.clone()),
    };
    serde_json::json!({ "status": status, "message": message })
}
