//! The command line, as clap derives: [`Cli`], its subcommands and their flags. One argument
//! struct per command, the same for every backend.

use crate::backend::Backend;
use crate::sweep::{DEFAULT_ALPHA_US, DEFAULT_BETA_GBPS, Size};
use clap::{ArgAction, Args, Parser, Subcommand};
use ruccl_core::{ElementType, ReduceOperation};
use ruccl_sim::FaultPlan;
use std::path::PathBuf;
use std::str::FromStr;

const ABOUT: &str = "ruCCL's all-reduce as nccl-tests measures it — on simulated devices (the \
default) or CUDA GPUs — plus fault-injection scenarios and Perfetto traces";

const LONG_ABOUT: &str = "ruCCL's all-reduce as nccl-tests measures it.

Every rank is a thread calling all_reduce on one shared communicator; the last to arrive runs the \
ring on the backend's device: simulated devices whose memory is host memory (--backend sim, the \
default), or GPUs through the CUDA executor (--backend cuda, in a build with the `cuda` feature). \
`all-reduce-perf` (the default) sweeps message sizes like nccl-tests' all_reduce_perf and prints \
its table; `run` drives a scenario, optionally under injected faults, and prints what every \
generation delivered.

Exit status: 0 when everything ran and checked out (or the CUDA backend found no GPU and printed \
SKIP); 1 when the run found wrong elements, ranks that disagreed, or could not finish; 2 for a \
command line that makes no run.";

const EXAMPLES: &str = "Examples:
  ruccl-perf                                        the default sweep: 8 B to 128 MiB over 4 ranks
  ruccl-perf all-reduce-perf -b 8 -e 128M -f 2 -g 8 nccl-tests' classic sweep on 8 ranks
  ruccl-perf -b 1M -e 1M -d bf16 -o max --json      one size, one JSON document
  ruccl-perf -d all -o all -b 4 -e 4M -f 64         every type and operation
  ruccl-perf --backend cuda -b 1K -e 256M           on GPUs (build with --features cuda)
  ruccl-perf run -g 4 -n 6 --fault exchange:step=2:rank=1:gen=3:panic
  ruccl-perf run -g 3 --trace trace.json            then open trace.json in ui.perfetto.dev";

/// `ruccl-perf [OPTIONS]` (a sweep) or `ruccl-perf <COMMAND>`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "ruccl-perf",
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

/// A type with a finite list of values that `all` selects.
pub trait Listed: Sized + Copy + PartialEq + FromStr + 'static {
    /// Every value, in the order `all` runs them.
    fn all() -> &'static [Self];
}

impl Listed for ElementType {
    fn all() -> &'static [Self] {
        &ElementType::ALL
    }
}

impl Listed for ReduceOperation {
    fn all() -> &'static [Self] {
        &ReduceOperation::ALL
    }
}

/// One value, a comma-separated list, or `all` (nccl-tests' `-d all`, `-o all`); in the order
/// given, without repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection<T>(pub Vec<T>);

impl<T: Listed> FromStr for Selection<T>
where
    T::Err: std::fmt::Display,
{
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().eq_ignore_ascii_case("all") {
            return Ok(Selection(T::all().to_vec()));
        }
        let mut chosen: Vec<T> = Vec::new();
        for item in text.split(',') {
            let value = item
                .trim()
                .parse::<T>()
                .map_err(|error| error.to_string())?;
            if !chosen.contains(&value) {
                chosen.push(value);
            }
        }
        Ok(Selection(chosen))
    }
}

/// `all-reduce-perf`: nccl-tests' flags, with their meaning, for every backend.
#[derive(Clone, Debug, Args)]
pub struct PerfArgs {
    /// Smallest message per rank, in bytes (K, M, G, T: powers of 1024; at least one element)
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
    /// Number of ranks [default: 4 simulated devices; CUDA: see --map]
    #[arg(
        short = 'g',
        long = "ranks",
        visible_alias = "ngpus",
        value_name = "RANKS",
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub world: Option<u32>,
    /// Reduction: sum, prod, min, max or avg; a comma-separated list, or all
    #[arg(short = 'o', long = "op", value_name = "OP", default_value = "sum")]
    pub operations: Selection<ReduceOperation>,
    /// Element type: float, double, half, bfloat16, int32, int64 (or f32, f64, f16, bf16, i32,
    /// i64); a comma-separated list, or all
    #[arg(
        short = 'd',
        long = "datatype",
        value_name = "TYPE",
        default_value = "float"
    )]
    pub element_types: Selection<ElementType>,
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
        default_value_t = 5
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
    /// Give up (and fail) when a rank waits longer than this, in seconds
    #[arg(long = "timeout", value_name = "SECONDS", default_value_t = 120.0)]
    pub timeout_s: f64,
    /// The devices to run on.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// The NCCL baseline (with --backend cuda).
    #[command(flatten)]
    pub baseline: BaselineArgs,
    /// The link model beside the measurement.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where results go.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Which devices run the collective, and the backends' own options.
#[derive(Clone, Debug, Args)]
pub struct BackendArgs {
    /// The devices: sim (simulated, host memory) or cuda (GPUs; needs the `cuda` feature)
    #[arg(long, value_enum, value_name = "BACKEND", default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// sim: threads the simulated device may use for one step [default: all cores]
    #[arg(long = "device-threads", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub device_threads: Option<u32>,
    /// cuda: explicit device map, `device:gpu` pairs (e.g. `0:0,1:0,2:0,3:0`); ranks follow
    /// increasing device ids [default: 4 logical ranks on one GPU, else one rank per GPU; with
    /// -g, that many ranks round-robin over the GPUs]
    #[arg(long, value_name = "MAP", conflicts_with_all = ["world", "ranks_per_gpu"])]
    pub map: Option<String>,
    /// cuda: logical ranks per GPU on every visible GPU
    #[arg(long, value_name = "N", conflicts_with = "world", value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks_per_gpu: Option<u32>,
    /// cuda: fail (exit 1) instead of printing SKIP and exiting 0 when no CUDA driver or GPU is
    /// found
    #[arg(long)]
    pub require_gpu: bool,
}

/// The NCCL baseline.
#[derive(Clone, Debug, Args)]
pub struct BaselineArgs {
    /// cuda: also run the same sweeps through NCCL, one rank per GPU (needs the `nccl` feature
    /// and two or more GPUs)
    #[arg(long)]
    pub nccl: bool,
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
    /// Print one JSON document instead of the table (an array of documents when -d or -o
    /// names several)
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
        value_parser = clap::value_parser!(u32).range(1..=64)
    )]
    pub world: Option<u32>,
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
    /// The devices to run on.
    #[command(flatten)]
    pub backend: BackendArgs,
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
