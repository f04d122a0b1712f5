//! `hierarchical-perf`: the hierarchical all-reduce timed like nccl-tests, against plain
//! `MPI_Allreduce` with as many processes as the job has ranks — in one run.
//!
//! ```sh
//! mpirun -np 4 mpi/target/release/hierarchical-perf -l 2 -b 4 -e 64M -f 2 -n 20 -w 5
//! ```
//!
//! The job has `N` processes. The hierarchical engines use every `L`-th process (`-l L`, world
//! ranks `0, L, 2L, …`), each driving `L` local ranks (threads, simulated devices): `N/L`
//! processes × `L` ranks, `W = N` ranks in all, the same rank count as the `MPI_Allreduce` of all
//! `N` processes it is compared with. While an engine runs on the active processes only, the
//! others wait in a non-blocking barrier polled every 200 µs (a sleeping waiter, not a
//! spinning one, so they leave the cores to the active ones).
//!
//! Every wait of the tool's own bookkeeping (barriers, means, sums: `ruccl_mpi::bookkeeping`)
//! is non-blocking and bounded by the timeout `-T` (default 120 s), the one `hier-dl` gives each
//! call: a process that dies under `mpirun --enable-recovery` while the others wait there, or
//! in a `hier-dl` generation, is one error on every survivor at its timeout, and the tool
//! exits 1. (`mpi`, `hier` and `mpi-h` wait without a deadline, as MPI's blocking collectives
//! do.)
//! `RUCCL_MPI_PERF_DIE=PROCESS:SITE:GENERATION` plants such a death (`mpi/README.md`).
//!
//! Engines (`-E`, comma-separated; the first is what the ratios divide by):
//!
//! | engine    | one call                                                                         |
//! |-----------|----------------------------------------------------------------------------------|
//! | `mpi`     | `MPI_Allreduce` over all `N` processes: the baseline                              |
//! | `hier`    | the hierarchical all-reduce on `N/L` processes × `L` ranks, engine `Waiting::Blocking`, no timeout |
//! | `hier-dl` | the same on a `Waiting::Deadlines` engine, with a timeout on every call            |
//! | `local`   | the core's all-reduce over the `L` local ranks of each active process alone (the local phases' floor) |
//! | `mpi-h`   | `MPI_Allreduce` over the `N/L` active processes (the inter-process step's floor)  |
//!
//! Per size: `-w` warm-up calls per engine, then `-n` timed calls per engine in ten rounds that
//! take turns between the engines (a noisy stretch of a shared machine then hits them all);
//! `time` is the mean per call, averaged over the processes that ran it. `algbw = bytes / time`,
//! `busbw = algbw · 2(W-1)/W`. `#wrong` counts the elements, over all ranks, that differ from
//! the reference after one checked call with fresh inputs (f32 sums of small integers: exact).
//! Inputs are built before the timed calls; each call's output is the next call's input.

use mpi::collective::SystemOperation;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::{Communicator, CommunicatorCollectives};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCommunicator, ParseAlgorithmError,
    ReduceOperation,
};
use ruccl_mpi::bookkeeping::{
    self, Bookkeeping, Countdown, DIE_VARIABLE, Failure, Pace, PlannedDeath, leave,
};
use ruccl_mpi::report::{
    self, EXIT_FAILED, EXIT_OK, EXIT_USAGE, Row, Sweep, Written, format_summary, format_table,
    library_version, parse_size,
};
use ruccl_mpi::{
    HierarchicalCommunicator, HierarchicalOptions, MpiInterProcess, MpiRuntime, Waiting, lock_mpi,
};
use ruccl_sim::{HostValues, SimDevice, SimTensor};
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `eprintln!` that never panics: a closed or failing stderr has nowhere left to say anything.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        // One write of the whole line (see `ruccl_mpi::bookkeeping::leave`).
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

/// Rounds the timed calls of one size are split into, taking turns between the engines.
const ROUNDS: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    Mpi,
    Hierarchical,
    HierarchicalDeadline,
    Local,
    MpiActive,
}

impl Engine {
    const ALL: [Engine; 5] = [
        Engine::Mpi,
        Engine::Hierarchical,
        Engine::HierarchicalDeadline,
        Engine::Local,
        Engine::MpiActive,
    ];

    fn parse(name: &str) -> Option<Engine> {
        match name {
            "mpi" => Some(Engine::Mpi),
            "hier" => Some(Engine::Hierarchical),
            "hier-dl" => Some(Engine::HierarchicalDeadline),
            "local" => Some(Engine::Local),
            "mpi-h" => Some(Engine::MpiActive),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Engine::Mpi => "mpi",
            Engine::Hierarchical => "hier",
            Engine::HierarchicalDeadline => "hier-dl",
            Engine::Local => "local",
            Engine::MpiActive => "mpi-h",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Engine::Mpi => "MPI_Allreduce over every process",
            Engine::Hierarchical => {
                "ruccl-mpi hierarchical all-reduce, Waiting::Blocking engine, no timeout"
            }
            Engine::HierarchicalDeadline => {
                "ruccl-mpi hierarchical all-reduce, Waiting::Deadlines engine, a timeout on every call (-T)"
            }
            Engine::Local => "ruccl-core all-reduce over each active process's local ranks alone",
            Engine::MpiActive => "MPI_Allreduce over the active processes alone",
        }
    }

    /// Whether every process of the job runs it (else only the active ones).
    fn everywhere(self) -> bool {
        self == Engine::Mpi
    }

    /// Ranks the engine's all-reduce spans.
    fn world(self, options: &Options, processes: usize) -> usize {
        match self {
            Engine::Mpi | Engine::Hierarchical | Engine::HierarchicalDeadline => processes,
            Engine::Local => options.local,
            Engine::MpiActive => processes / options.local,
        }
    }
}

struct Options {
    sweep: Sweep,
    local: usize,
    threads: usize,
    /// The hierarchical communicator's shard threshold (`None`: its default).
    shards_from: Option<usize>,
    /// The local phases' algorithm (`hier`, `hier-dl`, `local`).
    algorithm: Algorithm,
    engines: Vec<Engine>,
    /// The timeout of every `hier-dl` call and of every bookkeeping wait (`-T`).
    timeout: Duration,
    /// A planted death (`RUCCL_MPI_PERF_DIE`).
    death: Option<PlannedDeath>,
}

/// The tool's name in its messages.
const TOOL: &str = "hierarchical-perf";

const USAGE: &str = "usage: mpirun -np N hierarchical-perf [-l LOCAL] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-t THREADS] [-S BYTES] [-A ALGORITHM] [-T SECONDS] [-E mpi,hier,hier-dl,local,mpi-h]
  N/LOCAL processes drive LOCAL ranks each (N must be a multiple of LOCAL);
  sizes take K, M, G suffixes (powers of 1024); -t: threads of one simulated-device call;
  -S: the size from which all-reduces take the shard route (default: the communicator's, 8M);
  -A: the local phases' algorithm (auto, ring, direct, halving-doubling; default auto);
  -T: the timeout of every hier-dl call and of every wait of the tool's bookkeeping (default 120);
  defaults: -l 2 -b 4 -e 64M -f 2 -n 20 -w 5 -c 1 -t 1 -E mpi,hier";

/// The options, or `None` for `--help`; a usage error's text.
fn parse(arguments: &[String]) -> Result<Option<Options>, String> {
    let tool_flags = ["-l", "-t", "-S", "-A", "-T", "-E"];
    let (sweep, flags) = match report::parse_command(arguments, &tool_flags)? {
        report::Command::Help => return Ok(None),
        report::Command::Run { sweep, flags } => (sweep, flags),
    };
    let mut options = Options {
        sweep,
        local: 2,
        threads: 1,
        shards_from: None,
        algorithm: Algorithm::Auto,
        engines: vec![Engine::Mpi, Engine::Hierarchical],
        timeout: bookkeeping::DEFAULT_TIMEOUT,
        death: None,
    };
    for (flag, value) in flags {
        let size = || parse_size(&value).ok_or_else(|| format!("bad size `{value}` for {flag}"));
        match flag.as_str() {
            "-l" => options.local = size()?,
            "-t" => options.threads = size()?,
            "-S" => options.shards_from = Some(size()?),
            "-T" => {
                options.timeout = bookkeeping::parse_seconds(&value)
                    .ok_or_else(|| format!("bad timeout `{value}` for -T: seconds above 0"))?;
            }
            "-A" => {
                options.algorithm = value
                    .parse()
                    .map_err(|error: ParseAlgorithmError| error.to_string())?;
            }
            _ => {
                options.engines = value
                    .split(',')
                    .map(|name| {
                        Engine::parse(name).ok_or_else(|| format!("unknown engine `{name}`"))
                    })
                    .collect::<Result<_, _>>()?;
            }
        }
    }
    if options.local == 0 || options.threads == 0 {
        return Err("-l and -t must be at least 1".to_owned());
    }
    let sites = Engine::ALL.map(Engine::name);
    options.death = PlannedDeath::from_env(&sites)?;
    Ok(Some(options))
}

/// Bytes one process holds at `bytes` per rank: each of its `local` ranks' tensor, the device's
/// copy and the staged buffers (about four copies each), and the MPI baselines' two buffers.
fn per_process(bytes: usize, local: usize) -> u64 {
    (bytes as u64).saturating_mul(4 * local as u64 + 2)
}

/// What one local rank's worker does on command.
enum Command {
    /// `calls` all-reduces, each output the next input; replies when done.
    Run(usize),
    /// One all-reduce of fresh inputs; replies with the output.
    Check,
}

/// One rank's all-reduce of its tensor, as a worker sees it.
type Step = Arc<dyn Fn(usize, SimTensor) -> Result<SimTensor, Failure> + Send + Sync>;

/// `L` worker threads, one per local rank, each holding its tensor between commands.
struct Team {
    commands: Vec<Sender<Command>>,
    replies: Receiver<Result<Option<Vec<f32>>, Failure>>,
    workers: Vec<JoinHandle<()>>,
}

impl Team {
    /// Workers for local ranks `0..ranks`, whose input is `pattern(rank)`, calling `step`.
    fn new(ranks: usize, pattern: impl Fn(usize) -> Vec<f32>, step: Step) -> Team {
        let (reply, replies) = channel();
        let reply = Arc::new(Mutex::new(reply));
        let mut commands = Vec::new();
        let mut workers = Vec::new();
        for rank in 0..ranks {
            let (command, inbox) = channel::<Command>();
            commands.push(command);
            let fresh = pattern(rank);
            let (step, reply) = (Arc::clone(&step), Arc::clone(&reply));
            workers.push(std::thread::spawn(move || {
                let device = DeviceId::new(rank as u32);
                let make = || SimTensor::new(device, HostValues::F32(fresh.clone()));
                let mut tensor = Some(make());
                for command in inbox {
                    let outcome = match command {
                        Command::Run(calls) => (0..calls)
                            .try_for_each(|_| {
                                let input = tensor.take().unwrap_or_else(make);
                                tensor = Some(step(rank, input)?);
                                Ok(())
                            })
                            .map(|()| None),
                        Command::Check => step(rank, make()).map(|output| match output.values() {
                            HostValues::F32(values) => Some(values.clone()),
                            _ => Some(Vec::new()),
                        }),
                    };
                    let sent = reply
                        .lock()
                        .map(|reply| reply.send(outcome).is_ok())
                        .unwrap_or(false);
                    if !sent {
                        return;
                    }
                }
            }));
        }
        Team {
            commands,
            replies,
            workers,
        }
    }

    /// Sends `command` to every worker and waits for every reply; the outputs, by arrival.
    fn order(&self, command: impl Fn() -> Command) -> Result<Vec<Vec<f32>>, Failure> {
        let gone = || Failure::here("a worker is gone");
        for sender in &self.commands {
            sender.send(command()).map_err(|_| gone())?;
        }
        let mut outputs = Vec::new();
        for _ in &self.commands {
            let reply = self.replies.recv().map_err(|_| gone())?;
            outputs.extend(reply?);
        }
        Ok(outputs)
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.commands.clear();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// Global rank `rank`'s element `index`: small integers, so every sum is exact.
fn element(rank: usize, index: usize) -> f32 {
    ((rank + index) % 7) as f32 - 3.0
}

/// The runner's communicators.
struct Bench {
    runtime: MpiRuntime,
    /// Barriers, means and sums, every wait bounded by `-T`.
    bookkeeping: Bookkeeping,
    /// Each engine's calls on this process (`Engine::ALL` order), for a planted death.
    countdowns: Vec<Arc<Countdown>>,
    world: SimpleCommunicator,
    /// The active processes (`None` on the others).
    active: Option<SimpleCommunicator>,
    hierarchical: Option<Arc<HierarchicalCommunicator<SimDevice, MpiInterProcess>>>,
    deadline: Option<Arc<HierarchicalCommunicator<SimDevice, MpiInterProcess>>>,
    local: Arc<NativeCommunicator<SimDevice>>,
    process: usize,
    processes: usize,
}

impl Bench {
    fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// `engine`'s call counter on this process.
    fn countdown(&self, engine: Engine) -> Arc<Countdown> {
        let index = Engine::ALL.iter().position(|e| *e == engine).unwrap_or(0);
        Arc::clone(&self.countdowns[index])
    }

    /// The first global rank of this process's local ranks.
    fn first_rank(&self, options: &Options) -> usize {
        self.process / options.local * options.local
    }

    /// The team that runs `engine` at `count` elements on this process (`None`: a plain MPI
    /// engine, run on this thread).
    fn team(&self, engine: Engine, count: usize, options: &Options) -> Option<Team> {
        let first = match engine {
            Engine::Local => 0,
            _ => self.first_rank(options),
        };
        let pattern = move |rank: usize| (0..count).map(|i| element(first + rank, i)).collect();
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        let step: Step = match engine {
            Engine::Mpi | Engine::MpiActive => return None,
            Engine::Hierarchical | Engine::HierarchicalDeadline => {
                let communicator = match engine {
                    Engine::Hierarchical => self.hierarchical.clone()?,
                    _ => self.deadline.clone()?,
                };
                let mut call = CollectiveOptions::default().with_algorithm(options.algorithm);
                if engine == Engine::HierarchicalDeadline {
                    call = call.with_timeout(options.timeout);
                }
                let countdown = self.countdown(engine);
                // The communicator's errors are agreed: every rank of every process gets the
                // same (a dead peer: each survivor's timeout).
                Arc::new(move |rank, tensor| {
                    if rank == 0 {
                        countdown.tick();
                    }
                    communicator
                        .collective(rank, tensor, sum, call)
                        .map_err(|error| Failure::everywhere(error.to_string()))
                })
            }
            Engine::Local => {
                let communicator = Arc::clone(&self.local);
                let call = CollectiveOptions::default().with_algorithm(options.algorithm);
                let countdown = self.countdown(engine);
                // The local ranks agree; the other processes know nothing of it.
                Arc::new(move |rank, tensor| {
                    if rank == 0 {
                        countdown.tick();
                    }
                    communicator
                        .collective(rank, tensor, sum, call)
                        .map_err(|error| Failure::here(error.to_string()))
                })
            }
        };
        Some(Team::new(options.local, pattern, step))
    }

    /// `calls` MPI_Allreduce of `buffer` (in place of `scratch`) on `communicator`, each
    /// counted by `countdown`.
    fn mpi_calls(
        communicator: &SimpleCommunicator,
        countdown: &Countdown,
        buffer: &mut Vec<f32>,
        scratch: &mut Vec<f32>,
        calls: usize,
    ) {
        let _mpi = lock_mpi();
        for _ in 0..calls {
            countdown.tick();
            communicator.all_reduce_into(&buffer[..], &mut scratch[..], SystemOperation::sum());
            std::mem::swap(buffer, scratch);
        }
    }

    /// Every engine at one size: warm-up, the timed calls in rounds taking turns, one check.
    fn measure(&self, bytes: usize, options: &Options) -> Result<Vec<Row>, Failure> {
        let count = (bytes / 4).max(1);
        let engines = &options.engines;
        let at = |engine: Engine| format!("{} at {bytes} B", engine.name());
        let teams: Vec<Option<Team>> = engines
            .iter()
            .map(|engine| {
                if self.is_active() || engine.everywhere() {
                    self.team(*engine, count, options)
                } else {
                    None
                }
            })
            .collect();
        let fresh: Vec<f32> = (0..count).map(|i| element(self.process, i)).collect();
        let (mut buffer, mut scratch) = (fresh.clone(), vec![0f32; count]);
        let (mpi, mpi_active) = (
            self.countdown(Engine::Mpi),
            self.countdown(Engine::MpiActive),
        );
        let run = |engine: Engine,
                   team: &Option<Team>,
                   buffer: &mut Vec<f32>,
                   scratch: &mut Vec<f32>,
                   calls: usize|
         -> Result<(), Failure> {
            match (engine, team) {
                (Engine::Mpi, _) => Self::mpi_calls(&self.world, &mpi, buffer, scratch, calls),
                (Engine::MpiActive, _) => {
                    if let Some(active) = &self.active {
                        Self::mpi_calls(active, &mpi_active, buffer, scratch, calls);
                    }
                }
                (_, Some(team)) => {
                    team.order(|| Command::Run(calls))?;
                }
                (_, None) => {}
            }
            Ok(())
        };
        let mut elapsed = vec![Duration::ZERO; engines.len()];
        let rounds = ROUNDS.min(options.sweep.iterations);
        for round in 0..=rounds {
            // Round 0 is the warm-up.
            let calls = if round == 0 {
                options.sweep.warmup
            } else {
                let round = round - 1;
                options.sweep.iterations / rounds
                    + usize::from(round < options.sweep.iterations % rounds)
            };
            for (index, engine) in engines.iter().enumerate() {
                self.bookkeeping
                    .barrier(Pace::Prompt)
                    .map_err(|error| Failure::from(error).context(format!("at {bytes} B")))?;
                let runs_here = engine.everywhere() || self.is_active();
                let started = Instant::now();
                if runs_here {
                    run(*engine, &teams[index], &mut buffer, &mut scratch, calls)
                        .map_err(|error| error.context(at(*engine)))?;
                }
                let took = started.elapsed();
                if round > 0 {
                    elapsed[index] += took;
                }
                if !engine.everywhere() {
                    self.idle_barrier(bytes)?;
                }
            }
        }
        let mut rows = Vec::new();
        for (index, engine) in engines.iter().enumerate() {
            let runs_here = engine.everywhere() || self.is_active();
            let mean = elapsed[index].as_secs_f64() / options.sweep.iterations as f64;
            let seconds = self
                .bookkeeping
                .average(if runs_here { Some(mean) } else { None })
                .map_err(|error| Failure::from(error).context(format!("at {bytes} B")))?;
            let mut wrong = 0u64;
            if options.sweep.check && runs_here {
                let world = engine.world(options, self.processes);
                // Every engine's ranks are numbered from 0 in its own world.
                let expected = |i: usize| -> f32 { (0..world).map(|rank| element(rank, i)).sum() };
                let outputs: Vec<Vec<f32>> = match (&teams[index], engine) {
                    (Some(team), _) => team
                        .order(|| Command::Check)
                        .map_err(|error| error.context(at(*engine)))?,
                    (None, Engine::Mpi) => {
                        let (mut buffer, mut scratch) =
                            (self.pattern(count, self.process), vec![0f32; count]);
                        Self::mpi_calls(&self.world, &mpi, &mut buffer, &mut scratch, 1);
                        vec![buffer]
                    }
                    (None, _) => {
                        let rank = self.process / options.local;
                        let (mut buffer, mut scratch) =
                            (self.pattern(count, rank), vec![0f32; count]);
                        if let Some(active) = &self.active {
                            Self::mpi_calls(active, &mpi_active, &mut buffer, &mut scratch, 1);
                        }
                        vec![buffer]
                    }
                };
                for output in outputs {
                    wrong += u64::from(output.len() != count);
                    wrong += output
                        .iter()
                        .enumerate()
                        .filter(|(i, value)| **value != expected(*i))
                        .count() as u64;
                }
            }
            if !engine.everywhere() {
                self.idle_barrier(bytes)?;
            }
            let wrong = self
                .bookkeeping
                .sum(wrong)
                .map_err(|error| Failure::from(error).context(format!("at {bytes} B")))?;
            rows.push(Row {
                bytes: count * 4,
                seconds,
                wrong,
            });
        }
        drop(teams);
        Ok(rows)
    }

    fn pattern(&self, count: usize, rank: usize) -> Vec<f32> {
        (0..count).map(|i| element(rank, i)).collect()
    }

    /// The barrier after a round the active processes ran alone: the others sleep between
    /// polls, leaving them the cores.
    fn idle_barrier(&self, bytes: usize) -> Result<(), Failure> {
        self.bookkeeping
            .barrier(Pace::Sleepy)
            .map_err(|error| Failure::from(error).context(format!("at {bytes} B")))
    }
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&arguments) {
        Ok(Some(options)) => options,
        Ok(None) => {
            // A closed or failing stdout has nowhere left to show the usage.
            let _ = report::write_out(&format!("{USAGE}\n"));
            return ExitCode::from(EXIT_OK);
        }
        Err(message) => {
            say!("hierarchical-perf: {message}\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match MpiRuntime::initialize() {
        Ok(runtime) => runtime,
        Err(error) => {
            say!("cannot initialise MPI: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let (process, processes) = (runtime.process(), runtime.processes());
    if processes % options.local != 0 {
        if process == 0 {
            say!(
                "hierarchical-perf: the job's {processes} processes are not a multiple of -l {}",
                options.local
            );
        }
        return ExitCode::from(EXIT_USAGE);
    }
    if let Some(death) = options.death.as_ref().filter(|d| d.process >= processes) {
        if process == 0 {
            say!(
                "hierarchical-perf: {DIE_VARIABLE} names process {}, the job has {processes}",
                death.process
            );
        }
        return ExitCode::from(EXIT_USAGE);
    }
    let largest = options.sweep.sizes().last().copied().unwrap_or(4);
    let what = format!("-e {largest} B (-l {})", options.local);
    let bookkeeping = match bookkeeping::start(
        &runtime,
        TOOL,
        options.timeout,
        options.death.as_ref(),
        per_process(largest, options.local),
        &what,
    ) {
        Ok(bookkeeping) => bookkeeping,
        Err(status) => return ExitCode::from(status),
    };
    match setup(runtime.clone(), bookkeeping, &options) {
        Ok(bench) => run(&bench, &options),
        Err(failure) => leave(&runtime, TOOL, &failure),
    }
}

fn setup(
    runtime: MpiRuntime,
    bookkeeping: Bookkeeping,
    options: &Options,
) -> Result<Bench, Failure> {
    let (process, processes) = (runtime.process(), runtime.processes());
    let active = process % options.local == 0;
    let color = active.then_some(0u16);
    let setup = Some(Instant::now() + options.timeout);
    // Setup errors are agreed, or each process's own deadline.
    let failed = |error: &dyn std::fmt::Display| Failure::everywhere(format!("setup: {error}"));
    let blocking = runtime
        .split(color, Waiting::Blocking, None)
        .map_err(|error| failed(&error))?;
    let deadlines = runtime
        .split(color, Waiting::Deadlines, setup)
        .map_err(|error| failed(&error))?;
    let world = runtime.world();
    let active_world = {
        let _mpi = lock_mpi();
        world.split_by_color(if active {
            Color::with_value(0)
        } else {
            Color::undefined()
        })
    };
    // No ledger and no census: the tool reads neither, and each is a lock per generation or per
    // value on the measured path.
    let device = SimDevice::builder()
        .threads(options.threads)
        .record_traffic(false)
        .census(false)
        .build();
    let devices: Vec<DeviceId> = (0..options.local as u32).map(DeviceId::new).collect();
    let mut hierarchical_options = HierarchicalOptions::default();
    if let Some(bytes) = options.shards_from {
        hierarchical_options = hierarchical_options.with_shards_from(bytes);
    }
    let hierarchical = |inter: Option<MpiInterProcess>, deadline| {
        inter
            .map(|inter| {
                let (devices, device) = (devices.clone(), device.clone());
                HierarchicalCommunicator::with_options(
                    devices,
                    device,
                    inter,
                    hierarchical_options,
                    deadline,
                )
                .map(Arc::new)
                .map_err(|error| failed(&error))
            })
            .transpose()
    };
    let local =
        NativeCommunicator::new(devices.clone(), device.clone()).map_err(|error| failed(&error))?;
    let countdowns = Engine::ALL
        .iter()
        .map(|engine| {
            Arc::new(Countdown::new(
                options.death.as_ref(),
                process,
                engine.name(),
            ))
        })
        .collect();
    Ok(Bench {
        bookkeeping,
        countdowns,
        hierarchical: hierarchical(blocking, None)?,
        deadline: hierarchical(deadlines, setup)?,
        local: Arc::new(local),
        active: active_world,
        world,
        runtime,
        process,
        processes,
    })
}

fn run(bench: &Bench, options: &Options) -> ExitCode {
    let sizes = options.sweep.sizes();
    let measured = report::sweep(&sizes, options.engines.len(), |bytes| {
        bench.measure(bytes, options)
    });
    let tables = match measured {
        Ok(tables) => tables,
        // Every process exits non-zero: each with the agreed error or its own timeout, or the
        // job ends (a failure of this process alone).
        Err(failure) => leave(&bench.runtime, TOOL, &failure),
    };
    let wrong: u64 = tables.iter().flatten().map(|row| row.wrong).sum();
    let mut code = if wrong == 0 { EXIT_OK } else { EXIT_FAILED };
    if bench.process == 0 {
        match report::write_out(&format_tables(options, bench.processes, &tables)) {
            Ok(Written::Done) => {}
            // Quietly, but not as a success: the results were not all written (as ruccl-perf).
            Ok(Written::Closed) => code = EXIT_FAILED,
            Err(error) => {
                say!("hierarchical-perf: cannot write the results: {error}");
                code = EXIT_FAILED;
            }
        }
        if wrong != 0 {
            say!("hierarchical-perf: {wrong} wrong values");
        }
    }
    ExitCode::from(code)
}

fn format_tables(options: &Options, processes: usize, tables: &[Vec<Row>]) -> String {
    let version = library_version();
    let mut out = String::new();
    let layout = format!(
        "{} processes x {} local ranks (hierarchical), {processes} processes (MPI)",
        processes / options.local,
        options.local
    );
    for (engine, rows) in options.engines.iter().zip(tables) {
        let heading = [
            format!("hierarchical-perf: {} ({version})", engine.describe()),
            format!(
                "{layout}; nRanks {} {} timeout: {} s",
                engine.world(options, processes),
                options.sweep.describe(),
                options.timeout.as_secs_f64()
            ),
        ];
        out.push_str(&format_table(
            &heading,
            engine.world(options, processes),
            rows,
        ));
    }
    let names: Vec<&str> = options.engines.iter().map(|engine| engine.name()).collect();
    out.push_str(&format_summary(&names, tables));
    out
}
