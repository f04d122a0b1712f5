//! The `ruccl-perf` command line. The binary is a thin `main` calling [`main`]; everything else is
//! here so that tests can parse and run commands into any writer.
//!
//! | file          | job                                                                |
//! |---------------|--------------------------------------------------------------------|
//! | `args.rs`     | [`Cli`] and the flags of each command (clap derive), every backend |
//! | `perf.rs`     | `all-reduce-perf`: the sweeps, their tables or JSON, trace, NCCL   |
//! | `run.rs`      | `run`: a scenario under a fault plan                               |
//! | `progress.rs` | the progress line on a terminal                                    |
//!
//! Exit status: 0 when everything ran and checked out (or the CUDA backend found no GPU and
//! printed `SKIP`); 1 when the run found wrong elements, ranks that disagreed, or could not
//! finish; 2 for a command line that makes no run.

mod args;
mod perf;
mod progress;
mod run;

pub use args::{
    BackendArgs, BaselineArgs, Cli, Command, Listed, ModelArgs, OutputArgs, PerfArgs, RunArgs,
    Selection,
};
pub use perf::sweep_configs;

use crate::scenario::ScenarioError;
use crate::sweep::SweepError;
use clap::Parser;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// How a command that ran to the end turned out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything checked out.
    Passed,
    /// The run finished but found a problem (wrong elements, ranks that disagreed).
    Failed(String),
}

/// Why a command could not run to the end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The options make no run (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// The sweep stopped.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// The scenario could not run.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// Writing the results failed.
    #[error("cannot write the results: {0}")]
    Output(#[source] std::io::Error),
    /// The backend could not make its devices (a CUDA driver that fails, say).
    #[error("{0}")]
    Backend(String),
    /// The NCCL baseline failed.
    #[error("NCCL baseline: {0}")]
    Baseline(String),
    /// Writing the trace file failed.
    #[error("cannot write the trace to {path}: {source}")]
    Trace {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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

/// Run `command`, writing results to `out`; `progress` draws a progress line on stderr.
pub fn execute(
    command: Command,
    out: &mut (dyn Write + Send),
    progress: bool,
) -> Result<Verdict, CliError> {
    match command {
        Command::AllReducePerf(args) => perf::all_reduce_perf(&args, out, progress),
        Command::Run(args) => run::scenario(&args, out),
    }
}

/// The binary's `main`: parse the process arguments, run, report, and return the exit status.
pub fn main() -> ExitCode {
    let command = Cli::parse().into_command();
    quiet_injected_panics();
    let progress = std::io::stderr().is_terminal();
    let mut stdout = std::io::stdout();
    match execute(command, &mut stdout, progress) {
        Ok(Verdict::Passed) => ExitCode::SUCCESS,
        Ok(Verdict::Failed(reason)) => {
            eprintln!("ruccl-perf: {reason}");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// Keep the panics a fault plan injects (`injected panic in ...`) off stderr: the rows report them,
/// as the error every rank received. Any other panic is reported as usual.
fn quiet_injected_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        if !message.is_some_and(|message| message.starts_with("injected panic")) {
            report(info);
        }
    }));
}

/// Seconds from the command line as a duration, or a usage error naming `flag`.
fn seconds(flag: &str, value: f64) -> Result<std::time::Duration, CliError> {
    std::time::Duration::try_from_secs_f64(value).map_err(|_| {
        CliError::Usage(format!(
            "{flag} must be a non-negative number of seconds, got {value}"
        ))
    })
}

/// Write the trace file `path` of `tracer` for `world` ranks.
fn write_trace(
    path: &std::path::Path,
    tracer: &ruccl_sim::Tracer,
    world: usize,
) -> Result<(), CliError> {
    crate::trace::write_trace(path, tracer, world).map_err(|source| CliError::Trace {
        path: path.to_owned(),
        source,
    })
}
