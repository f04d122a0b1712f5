//! The command line, as clap derives: [`Cli`], its subcommands and their flags. One argument
//! struct per kind of command (a sweep, a scenario), the same for every collective and backend.

use crate::backend::Backend;
use crate::collectives::{self, CollectiveName, PerfCollective};
use crate::sweep::Size;
use clap::{ArgAction, Args, Parser, Subcommand};
use ruccl_core::{Algorithm, ElementType, ReduceOperation};
use ruccl_sim::FaultPlan;
use std::path::PathBuf;
use std::str::FromStr;

const ABOUT: &str = "ruCCL's collectives as nccl-tests measures them — on simulated devices (the \
default) or CUDA GPUs — plus fault-injection scenarios and Perfetto traces";

const LONG_ABOUT: &str = "ruCCL's collectives as nccl-tests measures them.

Every rank is a thread calling the collective on one shared communicator; the last to arrive runs \
the plan on the backend's device: simulated devices whose memory is host memory (--backend sim, \
the default), or GPUs through the CUDA executor (--backend cuda, in a build with the `cuda` \
feature). `all-reduce-perf` (the default), `reduce-scatter-perf`, `all-gather-perf`, \
`broadcast-perf`, `reduce-perf`, `gather-perf`, `scatter-perf` and `alltoall-perf` sweep message sizes like nccl-tests' binaries and print its table, out of place \
and in place; `run` drives a scenario of any collective, optionally under injected faults, and \
prints what every generation delivered, as generations complete.";

/// The exit statuses, shown by every command's `--help` (README.md repeats them).
pub const EXIT_CODES: &str = "Exit status:
  0    everything ran and checked out (also: `run` generations that failed on every rank alike
       where a --fault fired, which is ruCCL's agreement working; the CUDA backend found no
       GPU and printed SKIP)
  1    wrong results (elements that differ from the reference, all-reduce ranks whose bits
       differ from rank 0's, `run` generations whose ranks disagreed or that failed with no
       --fault to explain it), an average bus bandwidth below 90 % of NCCL_TESTS_MIN_BW, or a
       failed run (a collective failed, a timeout, a device that could not be made, a thread
       that could not start, a resource limit such as ulimit -v, a standard output that is
       closed, full or closed early as by `| head`) — the last line on stderr says which
  2    a command line that makes no run (bad flags, an nccl-tests flag with a value ruccl-perf
       cannot honour, a fault that can never fire, a size that cannot fit in memory), before
       anything runs
  101  a panic that no --fault injected (a bug), after the run has ended and written its files
  130  SIGINT, SIGTERM or SIGHUP; the current size finishes, then the table's end, the JSON
       documents and the trace are written";

const EXAMPLES: &str = "Examples:
  ruccl-perf                                        the default: all-reduce, 8 B to 128 MiB, 4 ranks
  ruccl-perf all-reduce-perf -b 8 -e 128M -f 2 -g 8 nccl-tests' classic sweep on 8 ranks
  ruccl-perf reduce-scatter-perf -b 4 -e 64M -f 8   every collective has its nccl-tests name
  ruccl-perf broadcast-perf -r all -b 1K -e 1M      every root in turn
  ruccl-perf alltoall-perf -g 8 -b 8 -e 64M         all-to-all, nccl-tests' alltoall_perf
  ruccl-perf -b 1M -e 8M -f 1 -i 1M                 a linear sweep
  ruccl-perf -b 4 -e 4 -n 2000 -A direct            one size, one algorithm, 2000 iterations
  ruccl-perf -A all -g 8 -b 4 -e 16M --json         every algorithm in turn at every size
  ruccl-perf -d all -o all -b 4 -e 64K -f 64 --json every type and operation, one JSON document
  ruccl-perf --backend cuda -b 1K -e 256M           on GPUs (build with --features cuda)
  ruccl-perf run -g 4 -n 6 --fault exchange:step=2:gen=3:panic
  ruccl-perf run --collective all-gather -n 10000 --trace trace.json   (open it in ui.perfetto.dev)";

/// `ruccl-perf [OPTIONS]` (an all-reduce sweep) or `ruccl-perf <COMMAND>`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "ruccl-perf",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = format!("{EXIT_CODES}\n\n{EXAMPLES}"),
    args_conflicts_with_subcommands = true,
    args_override_self = true
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

/// The subcommands: a sweep per collective (nccl-tests' binaries) and the scenario runner.
#[derive(Clone, Debug, Subcommand)]
pub enum Command {
    /// Sweep message sizes like nccl-tests' all_reduce_perf (the default command).
    #[command(
        name = "all-reduce-perf",
        visible_aliases = ["perf", "all_reduce_perf"],
        after_help = format!("{EXIT_CODES}\n\n{EXAMPLES}")
    )]
    AllReducePerf(PerfArgs),
    /// Sweep message sizes like nccl-tests' reduce_scatter_perf.
    #[command(
        name = "reduce-scatter-perf",
        visible_alias = "reduce_scatter_perf",
        after_help = EXIT_CODES
    )]
    ReduceScatterPerf(PerfArgs),
    /// Sweep message sizes like nccl-tests' all_gather_perf.
    #[command(
        name = "all-gather-perf",
        visible_alias = "all_gather_perf",
        after_help = EXIT_CODES
    )]
    AllGatherPerf(PerfArgs),
    /// Sweep message sizes like nccl-tests' broadcast_perf (-r picks the root, or all).
    #[command(
        name = "broadcast-perf",
        visible_alias = "broadcast_perf",
        after_help = EXIT_CODES
    )]
    BroadcastPerf(PerfArgs),
    /// Sweep message sizes like nccl-tests' reduce_perf (-r picks the root, or all).
    #[command(name = "reduce-perf", visible_alias = "reduce_perf", after_help = EXIT_CODES)]
    ReducePerf(PerfArgs),
    /// Sweep message sizes like nccl-tests' gather_perf (-r picks the root, or all).
    #[command(name = "gather-perf", visible_alias = "gather_perf", after_help = EXIT_CODES)]
    GatherPerf(PerfArgs),
    /// Sweep message sizes like nccl-tests' scatter_perf (-r picks the root, or all).
    #[command(name = "scatter-perf", visible_alias = "scatter_perf", after_help = EXIT_CODES)]
    ScatterPerf(PerfArgs),
    /// Sweep message sizes like nccl-tests' alltoall_perf.
    #[command(
        name = "alltoall-perf",
        visible_aliases = ["alltoall_perf", "all-to-all-perf"],
        after_help = EXIT_CODES
    )]
    AlltoallPerf(PerfArgs),
    /// Check MSCCL XML schedules under MSCCL's own semantics: one line per file (PASS, FAIL
    /// with the violation, UNSUPPORTED for a collective with no defined result, UNREADABLE)
    /// and a summary; exit 0 all pass, 1 any violation, 2 any file unreadable.
    Verify(VerifyArgs),
    /// Write a built-in plan as MSCCL XML (to stdout, or -f FILE), for MSCCL's executors.
    Export(ExportArgs),
    /// Run generations of one collective, optionally under injected faults, one row per
    /// generation as it completes.
    #[command(after_help = format!("{FAULT_HELP}\n\n{EXIT_CODES}"))]
    Run(RunArgs),
}

impl Command {
    /// The sweep this command asks for: its collective and flags (`None` for `run`).
    pub fn sweep(&self) -> Option<(&'static PerfCollective, &PerfArgs)> {
        match self {
            Command::AllReducePerf(args) => Some((&collectives::ALL_REDUCE, args)),
            Command::ReduceScatterPerf(args) => Some((&collectives::REDUCE_SCATTER, args)),
            Command::AllGatherPerf(args) => Some((&collectives::ALL_GATHER, args)),
            Command::BroadcastPerf(args) => Some((&collectives::BROADCAST, args)),
            Command::ReducePerf(args) => Some((&collectives::REDUCE, args)),
            Command::GatherPerf(args) => Some((&collectives::GATHER, args)),
            Command::ScatterPerf(args) => Some((&collectives::SCATTER, args)),
            Command::AlltoallPerf(args) => Some((&collectives::ALL_TO_ALL, args)),
            Command::Run(_) | Command::Verify(_) | Command::Export(_) => None,
        }
    }
}

const FAULT_HELP: &str =
    "Fault specs (--fault, repeatable; one spec or several separated by commas):
  site[:what=W][:step=S][:count=C][:rank=R][:gen=G][:error|:panic]
  sites: prepare, begin, exchange, finish (each needs error or panic), describe (a panic),
         outputs:count=C (wrong number of outputs), drop:what=prepared|work|output (panic in Drop)
  rank= only where a call belongs to one rank (prepare, describe, drop:what=prepared|output): begin,
  exchange and finish run once for every rank, on the last to arrive.
  Every spec is checked against the run before it starts: a rank, generation or step outside
  it, a count above twice the world, or a spec an earlier one always pre-empts is refused.
  e.g.   exchange:step=2:gen=3:panic   prepare:rank=0:gen=1:error   drop:what=output:gen=2";

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

impl Listed for Algorithm {
    fn all() -> &'static [Self] {
        &[
            Algorithm::Auto,
            Algorithm::Ring,
            Algorithm::Direct,
            Algorithm::HalvingDoubling,
        ]
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
            if FP8_NAMES.contains(&item.trim().to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "`{}`: nccl-tests' fp8 types (f8e4m3, f8e5m2) are not supported by ruccl-perf",
                    item.trim()
                ));
            }
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

/// The root of a broadcast: one rank, or every rank in turn (`all`, or nccl-tests' `-1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Roots {
    /// One root.
    One(usize),
    /// Every rank in turn.
    All,
}

impl FromStr for Roots {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("all") || text == "-1" {
            return Ok(Roots::All);
        }
        text.parse().map(Roots::One).map_err(|_| {
            format!("invalid root `{text}`: expected a rank (0, 1, …), `all` or -1 (every rank)")
        })
    }
}

/// A sweep's flags: nccl-tests', with their meaning, for every collective and backend.
#[derive(Clone, Debug, Args)]
pub struct PerfArgs {
    /// Smallest message size, in bytes (K, M, G, T: powers of 1024). For reduce-scatter and
    /// all-gather the size is the whole buffer, W blocks, as in nccl-tests
    #[arg(
        short = 'b',
        long = "minbytes",
        value_name = "SIZE",
        default_value = "8"
    )]
    pub min_bytes: Size,
    /// Largest message size, in bytes (reduced, with a note, if it cannot fit in memory)
    #[arg(
        short = 'e',
        long = "maxbytes",
        value_name = "SIZE",
        default_value = "128M"
    )]
    pub max_bytes: Size,
    /// Multiply the size by this between rows; 1 sweeps linearly by -i
    #[arg(
        short = 'f',
        long = "stepfactor",
        value_name = "FACTOR",
        default_value_t = 4,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub step_factor: u32,
    /// Add this many bytes between rows of a linear sweep (-f 1)
    #[arg(
        short = 'i',
        long = "stepbytes",
        value_name = "SIZE",
        default_value = "1M"
    )]
    pub step_bytes: Size,
    /// Number of ranks [default: 4 simulated devices; CUDA: see --map]
    #[arg(
        short = 'g',
        long = "ranks",
        visible_alias = "ngpus",
        value_name = "RANKS",
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub world: Option<u32>,
    /// Reduction: sum, prod, min, max or avg; a comma-separated list, or all (ignored, with a
    /// note, by collectives that do not reduce) [default: sum]
    #[arg(short = 'o', long = "op", value_name = "OP")]
    pub operations: Option<Selection<ReduceOperation>>,
    /// Element type: float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64
    /// (or f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64); a comma-separated list, or all
    #[arg(
        short = 'd',
        long = "datatype",
        value_name = "TYPE",
        default_value = "float"
    )]
    pub element_types: Selection<ElementType>,
    /// Root of a broadcast: a rank, or all (also -1) for every rank in turn (ignored, with a
    /// note, by collectives without a root) [default: 0]
    #[arg(
        short = 'r',
        long = "root",
        value_name = "ROOT",
        allow_negative_numbers = true
    )]
    pub root: Option<Roots>,
    /// Algorithm every generation asks for: auto (the least modelled time per size), ring,
    /// direct or halving-doubling; a comma-separated list, or all, measures each in turn at
    /// every size, in one run, so their times compare under the same conditions (with all, one
    /// the world cannot run is skipped with a note; a size the core refuses an algorithm for
    /// its traffic is a skipped row)
    #[arg(
        short = 'A',
        long = "algorithm",
        value_name = "ALGORITHM",
        default_value = "auto"
    )]
    pub algorithms: Selection<Algorithm>,
    /// Timed collectives per size and placement
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "N",
        default_value_t = 20,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub iterations: u32,
    /// Untimed collectives at every size from the smallest to the largest, doubling, before the
    /// sweep (as nccl-tests 2.16.8 and later)
    #[arg(
        short = 'w',
        long = "warmup_iters",
        value_name = "N",
        default_value_t = 5
    )]
    pub warmup: u32,
    /// Checked collectives per size and placement (0: no check); checking stops at the first
    /// that finds something
    #[arg(short = 'c', long = "check", value_name = "N", default_value_t = 1)]
    pub checks: u32,
    /// Which time a row reports, each rank timing its own: 0 rank 0's, 1 the mean over ranks,
    /// 2 the least, 3 the most
    #[arg(
        short = 'a',
        long = "average",
        value_name = "0-3",
        default_value_t = 1,
        value_parser = clap::value_parser!(u8).range(0..=3)
    )]
    pub average: u8,
    /// Give up (and fail) when a rank waits longer than this, in seconds; 0: no timeout (as
    /// nccl-tests, whose default it is)
    #[arg(
        short = 'T',
        long = "timeout",
        value_name = "SECONDS",
        default_value_t = 0.0
    )]
    pub timeout_s: f64,
    /// Memory the sweep may use [default: MemAvailable in /proc/meminfo]
    #[arg(long = "memory-limit", value_name = "SIZE")]
    pub memory_limit: Option<Size>,
    /// Run an MSCCL XML schedule (checked, then lowered at every size) instead of a built-in
    /// algorithm; its collective must be the command's, its gpus the ranks (-g)
    #[arg(long = "schedule", value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// The devices to run on.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// The NCCL baseline (with --backend cuda).
    #[command(flatten)]
    pub baseline: BaselineArgs,
    /// Where results go.
    #[command(flatten)]
    pub output: OutputArgs,
    /// nccl-tests' other flags: accepted with the value that matches what ruccl-perf does,
    /// refused (naming them) with any other.
    #[command(flatten)]
    pub nccl_tests: NcclTestsArgs,
    /// Write nccl-tests' JSON document (its schema, version 3) to FILE, as nccl-tests' -J: the
    /// name must end in .json; an existing file is kept and FILE.0, FILE.1, … is written
    /// instead; the file appears complete (written aside, then renamed) when the run ends, also
    /// when it fails or is interrupted
    #[arg(short = 'J', long = "output_file", value_name = "FILE")]
    pub json_file: Option<PathBuf>,
    /// Append ruCCL's columns to the table — algorithm (what the plan resolved to), bound (the
    /// in-place time over the time the collective's minimum traffic takes at the host-memory
    /// copy and fold rates measured before the row; `-` on GPUs), model (the link model's time,
    /// us), asked (the algorithm asked for) — and a parked-generations line to the footer
    #[arg(long = "extra-columns")]
    pub extra_columns: bool,
}

/// nccl-tests' flags that ruccl-perf has no use for or no implementation of, so that command
/// lines written for nccl-tests either run (with the value that matches what ruccl-perf does)
/// or are refused with a message naming the flag. README.md's flag table lists each.
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = "nccl-tests flags accepted with one value")]
pub struct NcclTestsArgs {
    /// nccl-tests' threads per process: the ranks are -t × -g (each rank is a thread here)
    #[arg(short = 't', long = "nthreads", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// Aggregated iterations: 1 only
    #[arg(
        short = 'm',
        long = "agg_iters",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub agg_iters: Option<i64>,
    /// Run cycles: 1 only
    #[arg(
        short = 'N',
        long = "run_cycles",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub run_cycles: Option<i64>,
    /// Parallel init: 0 or 1 (no difference: one communicator is made once for all ranks)
    #[arg(
        short = 'p',
        long = "parallel_init",
        value_name = "0/1",
        allow_negative_numbers = true
    )]
    pub parallel_init: Option<i64>,
    /// Blocking collectives: 0 only
    #[arg(
        short = 'z',
        long = "blocking",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub blocking: Option<i64>,
    /// The CUDA null stream: 0 only
    #[arg(
        short = 'y',
        long = "stream_null",
        value_name = "0/1",
        allow_negative_numbers = true
    )]
    pub stream_null: Option<i64>,
    /// CUDA graph launches: 0 only
    #[arg(
        short = 'G',
        long = "cudagraph",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub cudagraph: Option<i64>,
    /// Report CPU time: 0 only
    #[arg(
        short = 'C',
        long = "report_cputime",
        value_name = "0/1",
        allow_negative_numbers = true
    )]
    pub report_cputime: Option<i64>,
    /// Report timestamps: 0 only
    #[arg(
        short = 'S',
        long = "report_timestamps",
        value_name = "0/1",
        allow_negative_numbers = true
    )]
    pub report_timestamps: Option<i64>,
    /// Buffer registration: 0 only
    #[arg(
        short = 'R',
        long = "local_register",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub local_register: Option<i64>,
    /// NCCL's CTA policy: not supported
    #[arg(
        short = 'x',
        long = "cta_policy",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub cta_policy: Option<i64>,
    /// NCCL's device implementation: 0 only
    #[arg(
        short = 'D',
        long = "device_implementation",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub device_implementation: Option<i64>,
    /// NCCL's device CTA count: not supported (long form only: -V is --version)
    #[arg(
        long = "device_cta_count",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub device_cta_count: Option<i64>,
    /// GPU memory report: 0 only
    #[arg(
        short = 'M',
        long = "memory",
        value_name = "0/1",
        allow_negative_numbers = true
    )]
    pub memory: Option<i64>,
    /// Misaligned buffers: 0 only
    #[arg(
        short = 'u',
        long = "unalign",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub unalign: Option<i64>,
    /// Per-iteration timing: 0 only
    #[arg(
        short = 'I',
        long = "per_iter_timing",
        value_name = "0/1",
        allow_negative_numbers = true
    )]
    pub per_iter_timing: Option<i64>,
    /// Per-iteration skip: 0 only
    #[arg(
        short = 'K',
        long = "per_iter_skip",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub per_iter_skip: Option<i64>,
}

impl NcclTestsArgs {
    /// The first flag given with a value ruccl-perf cannot honour, as a message naming it.
    pub fn unsupported(&self) -> Option<String> {
        let accepted: [(&str, Option<i64>, &[i64]); 16] = [
            ("-m/--agg_iters", self.agg_iters, &[1]),
            ("-N/--run_cycles", self.run_cycles, &[1]),
            ("-p/--parallel_init", self.parallel_init, &[0, 1]),
            ("-z/--blocking", self.blocking, &[0]),
            ("-y/--stream_null", self.stream_null, &[0]),
            ("-G/--cudagraph", self.cudagraph, &[0]),
            ("-C/--report_cputime", self.report_cputime, &[0]),
            ("-S/--report_timestamps", self.report_timestamps, &[0]),
            ("-R/--local_register", self.local_register, &[0]),
            ("-x/--cta_policy", self.cta_policy, &[]),
            (
                "-D/--device_implementation",
                self.device_implementation,
                &[0],
            ),
            ("--device_cta_count", self.device_cta_count, &[]),
            ("-M/--memory", self.memory, &[0]),
            ("-u/--unalign", self.unalign, &[0]),
            ("-I/--per_iter_timing", self.per_iter_timing, &[0]),
            ("-K/--per_iter_skip", self.per_iter_skip, &[0]),
        ];
        accepted.iter().find_map(|(flag, value, ok)| match value {
            Some(value) if !ok.contains(value) => Some(if ok.is_empty() {
                format!("nccl-tests' {flag} is not supported by ruccl-perf")
            } else {
                let values: Vec<String> = ok.iter().map(i64::to_string).collect();
                format!(
                    "nccl-tests' {flag} {value} is not supported by ruccl-perf (it accepts {} only; see README.md's flag table)",
                    values.join(" or ")
                )
            }),
            _ => None,
        })
    }
}

/// The fp8 element types of nccl-tests (`-d f8e4m3`, `-d f8e5m2`), which ruCCL does not have.
const FP8_NAMES: [&str; 6] = [
    "f8e4m3",
    "f8e5m2",
    "fp8_e4m3",
    "fp8_e5m2",
    "float8e4m3",
    "float8e5m2",
];

/// Which devices run the collective, and the backends' own options.
#[derive(Clone, Debug, Args)]
pub struct BackendArgs {
    /// The devices: sim (simulated, host memory) or cuda (GPUs; needs the `cuda` feature)
    #[arg(long, value_enum, value_name = "BACKEND", default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// sim: threads the simulated device may use for one step [default: all cores]
    #[arg(long = "device-threads", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub device_threads: Option<u32>,
    /// sim: the simulated device's link model α, latency per step in microseconds — what Auto
    /// resolves with and `model` prices [default: the device's own]
    #[arg(long = "alpha-us", value_name = "US")]
    pub alpha_us: Option<f64>,
    /// sim: the simulated device's link model γ, fixed cost per transfer (and per range copied
    /// aside) in microseconds [default: the device's own]
    #[arg(long = "gamma-us", value_name = "US")]
    pub gamma_us: Option<f64>,
    /// sim: the simulated device's link model β, bandwidth of its shared link in GB/s
    /// (10^9 bytes per second) [default: the device's own]
    #[arg(long = "beta-gbps", value_name = "GBPS")]
    pub beta_gbps: Option<f64>,
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
    /// cuda: also run the same all-reduce sweeps through NCCL, one rank per GPU (needs the
    /// `nccl` feature and two or more GPUs)
    #[arg(long)]
    pub nccl: bool,
}

/// Output options shared by every command.
#[derive(Clone, Debug, Args)]
pub struct OutputArgs {
    /// Print one JSON document instead of the table, streamed as rows come; it ends with what
    /// happened, also when the run fails or is interrupted
    #[arg(long)]
    pub json: bool,
    /// Stream a Chrome trace-event file as the run goes: one track per rank (open it in
    /// ui.perfetto.dev); the path is checked before anything runs, and the file is completed
    /// with what happened when the run fails or is interrupted
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

/// `verify`: MSCCL XML files to check.
#[derive(Clone, Debug, Args)]
pub struct VerifyArgs {
    /// The files
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

/// `export`: a built-in plan as MSCCL XML.
#[derive(Clone, Debug, Args)]
pub struct ExportArgs {
    /// The collective: all-reduce, reduce-scatter, all-gather, broadcast, reduce, gather,
    /// scatter or alltoall
    #[arg(short = 'k', long = "collective", value_name = "COLLECTIVE")]
    pub collective: CollectiveName,
    /// The algorithm: ring, direct or halving-doubling (auto resolves for the length)
    #[arg(
        short = 'A',
        long = "algorithm",
        value_name = "ALGORITHM",
        default_value = "auto"
    )]
    pub algorithm: Algorithm,
    /// Number of ranks (gpus)
    #[arg(
        short = 'g',
        long = "ranks",
        value_name = "RANKS",
        value_parser = clap::value_parser!(u32).range(1..=64)
    )]
    pub world: u32,
    /// Elements of every rank's input the plan is built for (its chunks); by default one per
    /// rank, or one block per rank where the input splits into W blocks
    #[arg(short = 'l', long = "length", value_name = "COUNT")]
    pub length: Option<Size>,
    /// Root of a rooted collective
    #[arg(short = 'r', long = "root", value_name = "ROOT", default_value_t = 0)]
    pub root: usize,
    /// Reduction: sum, prod, min, max or avg
    #[arg(short = 'o', long = "op", value_name = "OP", default_value = "sum")]
    pub operation: ReduceOperation,
    /// Write the XML to this file instead of stdout
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
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
    /// The collective: all-reduce, reduce-scatter, all-gather or broadcast
    #[arg(
        short = 'k',
        long = "collective",
        value_name = "COLLECTIVE",
        default_value = "all-reduce"
    )]
    pub collective: CollectiveName,
    /// Elements of every rank's input (K, M suffixes: powers of 1024); a reduce-scatter's must
    /// split into equal blocks, one per rank
    #[arg(
        short = 'l',
        long = "length",
        value_name = "COUNT",
        default_value = "1K"
    )]
    pub length: Size,
    /// Element type: float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64
    /// (or f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64)
    #[arg(
        short = 'd',
        long = "datatype",
        value_name = "TYPE",
        default_value = "float"
    )]
    pub element_type: ElementType,
    /// Reduction of all-reduce and reduce-scatter: sum, prod, min, max or avg
    #[arg(short = 'o', long = "op", value_name = "OP", default_value = "sum")]
    pub operation: ReduceOperation,
    /// Root of a broadcast
    #[arg(short = 'r', long = "root", value_name = "ROOT", default_value_t = 0)]
    pub root: usize,
    /// Algorithm every generation asks for: auto, ring, direct or halving-doubling
    #[arg(
        short = 'A',
        long = "algorithm",
        value_name = "ALGORITHM",
        default_value = "auto"
    )]
    pub algorithm: Algorithm,
    /// Generations every rank runs
    #[arg(
        short = 'n',
        long = "generations",
        value_name = "N",
        default_value_t = 4
    )]
    pub generations: u64,
    /// A fault to inject (repeatable), e.g. exchange:step=2:gen=3:panic
    #[arg(long = "fault", value_name = "SPEC", action = ArgAction::Append)]
    pub faults: Vec<FaultPlan>,
    /// A rank waiting longer than this aborts the communicator, in seconds; 0: no timeout
    #[arg(
        short = 'T',
        long = "timeout",
        value_name = "SECONDS",
        default_value_t = 10.0
    )]
    pub timeout_s: f64,
    /// Memory the scenario may use [default: MemAvailable in /proc/meminfo]
    #[arg(long = "memory-limit", value_name = "SIZE")]
    pub memory_limit: Option<Size>,
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
