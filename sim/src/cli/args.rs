//! The command line, as clap derives: [`Cli`], its subcommands and their flags.

use crate::fault::FaultPlan;
use crate::host::ElementType;
use crate::perf::{DEFAULT_ALPHA_US, DEFAULT_BETA_GBPS, Size};
use clap::{ArgAction, Args, Parser, Subcommand};
use ruccl_core::ReduceOperation;
use std::path::PathBuf;

const ABOUT: &str = "ruCCL's all-reduce on simulated devices: an nccl-tests-style perf table, \
fault-injection scenarios and Perfetto traces";

const LONG_ABOUT: &str = "ruCCL's all-reduce on simulated devices.

Every rank is a thread calling all_reduce on one shared communicator; the last to arrive runs the \
ring on a simulated device whose memory is host memory. `all-reduce-perf` (the default) sweeps \
message sizes like nccl-tests' all_reduce_perf and prints its table; `run` drives a scenario, \
optionally under injected faults, and prints what every generation delivered.";

const EXAMPLES: &str = "Examples:
  ruccl-sim                                        the default sweep: 8 B to 128 MiB over 4 ranks
  ruccl-sim all-reduce-perf -b 8 -e 128M -f 2 -g 8 nccl-tests' classic sweep on 8 ranks
  ruccl-sim -b 1M -e 1M -d bf16 -o max --json      one size, one JSON document
  ruccl-sim run -g 4 -n 6 --fault exchange:step=2:rank=1:gen=3:panic
  ruccl-sim run -g 3 --trace trace.json            then open trace.json in ui.perfetto.dev";

/// `ruccl-sim [OPTIONS]` (a sweep) or `ruccl-sim <COMMAND>`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "ruccl-sim",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do (default: all-reduce-perf with the options given).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// all-reduce-perf's options, when no subcommand is named.
    #[command(flatten)]
    pub perf: PerfArgs,
}

impl Cli {
    /// The command to run: the subcommand, or `all-reduce-perf` with the top-level options.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::AllReducePerf(self.perf))
    }
}

/// The subcommands.
#[derive(Clone, Debug, Subcommand)]
pub enum Command {
    /// Sweep message sizes like nccl-tests' all_reduce_perf and print its table (the default).
    #[command(name = "all-reduce-perf", visible_alias = "perf", after_help = EXAMPLES)]
    AllReducePerf(PerfArgs),
    /// Run generations of one all-reduce, optionally under injected faults, one row per
    /// generation.
    #[command(after_help = FAULT_HELP)]
    Run(RunArgs),
}

const FAULT_HELP: &str =
    "Fault specs (--fault, repeatable; one spec or several separated by commas):
  site[:what=W][:step=S][:count=C][:rank=R][:gen=G][:error|:panic]
  sites: prepare, begin, exchange, finish (each needs error or panic),
         outputs:count=C (wrong number of outputs), drop:what=prepared|work|output (panic in Drop)
  e.g.   exchange:step=2:rank=1:gen=3:panic   prepare:rank=0:gen=1:error   drop:what=output:gen=2";

/// `all-reduce-perf`: nccl-tests' flags, with their meaning.
#[derive(Clone, Debug, Args)]
pub struct PerfArgs {
    /// Smallest message per rank, in bytes (K, M, G, T: powers of 1024)
    #[arg(
        short = 'b',
        long = "minbytes",
        value_name = "SIZE",
        default_value = "8"
    )]
    pub min_bytes: Size,
    /// Largest message per rank, in bytes
    #[arg(
        short = 'e',
        long = "maxbytes",
        value_name = "SIZE",
        default_value = "128M"
    )]
    pub max_bytes: Size,
    /// Multiply the message size by this between rows
    #[arg(
        short = 'f',
        long = "stepfactor",
        value_name = "FACTOR",
        default_value_t = 4,
        value_parser = clap::value_parser!(u32).range(2..)
    )]
    pub step_factor: u32,
    /// Number of ranks (simulated devices, one thread each)
    #[arg(
        short = 'g',
        long = "ranks",
        visible_alias = "ngpus",
        value_name = "RANKS",
        default_value_t = 4,
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub world: u32,
    /// Reduction: sum, prod, min, max or avg
    #[arg(short = 'o', long = "op", value_name = "OP", default_value = "sum")]
    pub operation: ReduceOperation,
    /// Element type: float, double, half, bfloat16, int32, int64 (or f32, f64, f16, bf16, i32, i64)
    #[arg(
        short = 'd',
        long = "datatype",
        value_name = "TYPE",
        default_value = "float"
    )]
    pub element_type: ElementType,
    /// Timed all-reduces per size
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "N",
        default_value_t = 20,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub iterations: u32,
    /// Untimed all-reduces per size before timing
    #[arg(
        short = 'w',
        long = "warmup_iters",
        value_name = "N",
        default_value_t = 1
    )]
    pub warmup: u32,
    /// Check one all-reduce per size against the reference: 1 (on) or 0 (off)
    #[arg(
        short = 'c',
        long = "check",
        value_name = "0|1",
        default_value_t = 1,
        value_parser = clap::value_parser!(u8).range(0..=1)
    )]
    pub check: u8,
    /// Threads the simulated device may use for one step [default: all cores]
    #[arg(long = "device-threads", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub device_threads: Option<u32>,
    /// Give up (and fail) when a rank waits longer than this, in seconds
    #[arg(long = "timeout", value_name = "SECONDS", default_value_t = 120.0)]
    pub timeout_s: f64,
    /// The link model beside the measurement.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where results go.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The α–β link model priced beside each measurement.
#[derive(Clone, Debug, Args)]
pub struct ModelArgs {
    /// Link model α: latency of one ring step, in microseconds
    #[arg(long = "alpha-us", value_name = "US", default_value_t = DEFAULT_ALPHA_US)]
    pub alpha_us: f64,
    /// Link model β: bandwidth of one link, in GB/s (10^9 bytes per second)
    #[arg(long = "beta-gbps", value_name = "GBPS", default_value_t = DEFAULT_BETA_GBPS)]
    pub beta_gbps: f64,
}

/// Output options shared by every command.
#[derive(Clone, Debug, Args)]
pub struct OutputArgs {
    /// Print one JSON document instead of the table
    #[arg(long)]
    pub json: bool,
    /// Write a Chrome trace-event file: one track per rank (open it in ui.perfetto.dev)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

/// `run`: one scenario.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Number of ranks
    #[arg(
        short = 'g',
        long = "ranks",
        value_name = "RANKS",
        default_value_t = 4,
        value_parser = clap::value_parser!(u32).range(1..=64)
    )]
    pub world: u32,
    /// Elements per rank (K, M suffixes: powers of 1024)
    #[arg(
        short = 'l',
        long = "length",
        value_name = "COUNT",
        default_value = "1K"
    )]
    pub length: Size,
    /// Element type: float, double, half, bfloat16, int32, int64 (or f32, f64, f16, bf16, i32, i64)
    #[arg(
        short = 'd',
        long = "datatype",
        value_name = "TYPE",
        default_value = "float"
    )]
    pub element_type: ElementType,
    /// Reduction: sum, prod, min, max or avg
    #[arg(short = 'o', long = "op", value_name = "OP", default_value = "sum")]
    pub operation: ReduceOperation,
    /// Generations every rank runs
    #[arg(
        short = 'n',
        long = "generations",
        value_name = "N",
        default_value_t = 4
    )]
    pub generations: u64,
    /// A fault to inject (repeatable), e.g. exchange:step=2:rank=1:gen=3:panic
    #[arg(long = "fault", value_name = "SPEC", action = ArgAction::Append)]
    pub faults: Vec<FaultPlan>,
    /// A rank waiting longer than this aborts the communicator, in seconds
    #[arg(long = "timeout", value_name = "SECONDS", default_value_t = 10.0)]
    pub timeout_s: f64,
    /// Where results go.
    #[command(flatten)]
    pub output: OutputArgs,
}

impl RunArgs {
    /// Every `--fault` in one plan, in the order given (earlier ones win where several match).
    pub fn plan(&self) -> FaultPlan {
        self.faults
            .iter()
            .flat_map(|plan| plan.specs().iter().copied())
            .fold(FaultPlan::none(), FaultPlan::with)
    }
}
