//! `mpi-allreduce-perf`: the MPI baseline ruCCL's figures are compared with — f32 sum
//! all-reduce timed like nccl-tests, under `mpirun` with as many processes as asked.
//!
//! ```sh
//! mpirun -np 4 mpi/target/release/mpi-allreduce-perf -b 4 -e 64M -f 2 -n 20 -w 5
//! mpirun -np 2 mpi/target/release/mpi-allreduce-perf -b 4 -e 4 -n 10000 -w 1000 -E mpi,mpi-nb,ruccl
//! ```
//!
//! Engines (`-E`, comma-separated; the first is the one the ratios divide by):
//!
//! | engine   | one call                                                                     |
//! |----------|------------------------------------------------------------------------------|
//! | `mpi`    | `MPI_Allreduce` (blocking): the baseline                                     |
//! | `mpi-nb` | `MPI_Iallreduce`, then `MPI_Test` until done: what a deadline costs in MPI    |
//! | `ruccl-b` | `MpiInterProcess::all_reduce`, `Waiting::Blocking`: one blocking status packet (carrying the data up to 64 B), then `MPI_Allreduce` above |
//! | `ruccl`  | the same with `Waiting::Deadlines` and no deadline: non-blocking packet, then `MPI_Iallreduce` above 64 B |
//! | `ruccl-dl` | `Waiting::Deadlines` with a deadline: status packet, then `MPI_Iallreduce` at every size |
//!
//! Per size: `-w` warm-up calls per engine, then `-n` timed calls per engine, in ten rounds
//! that take turns between the engines (so that a noisy stretch of a shared machine hits all of
//! them); `time` is the mean per call, averaged over the processes (nccl-tests' default, `-a 1`).
//! `algbw = bytes / time`, `busbw = algbw · 2(P-1)/P`. `#wrong` counts
//! the elements, over all processes, that differ from the reference after one checked call.
//!
//! Every wait of the tool's own bookkeeping (barriers, means, sums: `ruccl_mpi::bookkeeping`)
//! is non-blocking and bounded by the timeout `-T` (default 120 s), the deadline `ruccl-dl`
//! gives each call: a process that dies under `mpirun --enable-recovery` while the others wait
//! there, or in a `ruccl-dl` generation, is one error on every survivor at its timeout, and the
//! tool exits 1. (`mpi`, `mpi-nb`, `ruccl-b` and `ruccl` wait without a deadline.)
//! `RUCCL_MPI_PERF_DIE=PROCESS:SITE:GENERATION` plants such a death (`mpi/README.md`).

use mpi::collective::SystemOperation;
use mpi::traits::CommunicatorCollectives;
use ruccl_core::ReduceOperation;
use ruccl_mpi::bookkeeping::{
    self, Bookkeeping, Countdown, DIE_VARIABLE, Failure, Pace, PlannedDeath, leave,
};
use ruccl_mpi::report::{
    self, Command, EXIT_FAILED, EXIT_OK, EXIT_USAGE, Row, Sweep, Written, format_summary,
    format_table, library_version,
};
use ruccl_mpi::{HostValues, MpiInterProcess, MpiRuntime, Waiting, lock_mpi};
use std::process::ExitCode;
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
    Blocking,
    NonBlocking,
    RucclBlocking,
    Ruccl,
    RucclDeadline,
}

impl Engine {
    const ALL: [Engine; 5] = [
        Engine::Blocking,
        Engine::NonBlocking,
        Engine::RucclBlocking,
        Engine::Ruccl,
        Engine::RucclDeadline,
    ];

    fn parse(name: &str) -> Option<Engine> {
        match name {
            "mpi" => Some(Engine::Blocking),
            "mpi-nb" => Some(Engine::NonBlocking),
            "ruccl-b" => Some(Engine::RucclBlocking),
            "ruccl" => Some(Engine::Ruccl),
            "ruccl-dl" => Some(Engine::RucclDeadline),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Engine::Blocking => "mpi",
            Engine::NonBlocking => "mpi-nb",
            Engine::RucclBlocking => "ruccl-b",
            Engine::Ruccl => "ruccl",
            Engine::RucclDeadline => "ruccl-dl",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Engine::Blocking => "MPI_Allreduce",
            Engine::NonBlocking => "MPI_Iallreduce + MPI_Test loop",
            Engine::RucclBlocking => {
                "ruccl-mpi all_reduce, Waiting::Blocking: blocking status packet (+ data up to 64 B)"
            }
            Engine::Ruccl => {
                "ruccl-mpi all_reduce, Waiting::Deadlines, none given: status packet (+ data up to 64 B)"
            }
            Engine::RucclDeadline => {
                "ruccl-mpi all_reduce, deadline: status packet, then MPI_Iallreduce"
            }
        }
    }
}

struct Options {
    sweep: Sweep,
    engines: Vec<Engine>,
    /// The deadline of every `ruccl-dl` call and of every bookkeeping wait, from its start (`-T`).
    timeout: Duration,
    /// A planted death (`RUCCL_MPI_PERF_DIE`).
    death: Option<PlannedDeath>,
}

/// The tool's name in its messages.
const TOOL: &str = "mpi-allreduce-perf";

const USAGE: &str = "usage: mpi-allreduce-perf [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-T SECONDS] [-E mpi,mpi-nb,ruccl-b,ruccl,ruccl-dl]
  sizes take K, M, G suffixes (powers of 1024); -T: the timeout of every ruccl-dl call and of
  every wait of the tool's bookkeeping; defaults: -b 4 -e 64M -f 2 -n 20 -w 5 -c 1 -T 120 -E mpi";

/// The options, or `None` for `--help`; a usage error's text.
fn parse(arguments: &[String]) -> Result<Option<Options>, String> {
    let (sweep, flags) = match report::parse_command(arguments, &["-E", "-T"])? {
        Command::Help => return Ok(None),
        Command::Run { sweep, flags } => (sweep, flags),
    };
    let mut options = Options {
        sweep,
        engines: vec![Engine::Blocking],
        timeout: bookkeeping::DEFAULT_TIMEOUT,
        death: None,
    };
    for (flag, value) in flags {
        if flag == "-T" {
            options.timeout = bookkeeping::parse_seconds(&value)
                .ok_or_else(|| format!("bad timeout `{value}` for -T: seconds above 0"))?;
            continue;
        }
        options.engines = value
            .split(',')
            .map(|name| Engine::parse(name).ok_or_else(|| format!("unknown engine `{name}`")))
            .collect::<Result<_, _>>()?;
    }
    options.death = PlannedDeath::from_env(&Engine::ALL.map(Engine::name))?;
    Ok(Some(options))
}

/// Bytes one process holds at `bytes` per call: the pattern, MPI's receive buffer, the ruCCL
/// engine's buffer, its spare and its output.
fn per_process(bytes: usize) -> u64 {
    (bytes as u64).saturating_mul(5)
}

/// The runner: the world communicator for the baselines, a ruCCL communicator, this process.
struct Bench {
    runtime: MpiRuntime,
    /// Barriers, means and sums, every wait bounded by `-T`.
    bookkeeping: Bookkeeping,
    /// Each engine's calls on this process (`Engine::ALL` order), for a planted death.
    countdowns: Vec<Countdown>,
    /// `ruccl-dl`'s deadline per call (`-T`).
    timeout: Duration,
    ruccl: MpiInterProcess,
    ruccl_blocking: MpiInterProcess,
    process: usize,
    processes: usize,
}

impl Bench {
    /// Runs `calls` all-reduces of `send` with `engine`, returning the last output.
    fn run(&self, engine: Engine, send: &[f32], calls: usize) -> Result<Vec<f32>, Failure> {
        let mut receive = vec![0f32; send.len()];
        let index = Engine::ALL.iter().position(|e| *e == engine).unwrap_or(0);
        let countdown = &self.countdowns[index];
        match engine {
            Engine::Blocking => {
                let world = self.runtime.world();
                let _mpi = lock_mpi();
                for _ in 0..calls {
                    countdown.tick();
                    world.all_reduce_into(send, &mut receive[..], SystemOperation::sum());
                }
            }
            Engine::NonBlocking => {
                let world = self.runtime.world();
                let _mpi = lock_mpi();
                for _ in 0..calls {
                    countdown.tick();
                    mpi::request::scope(|scope| {
                        let mut request = world.immediate_all_reduce_into(
                            scope,
                            send,
                            &mut receive[..],
                            SystemOperation::sum(),
                        );
                        loop {
                            match request.test() {
                                Ok(_) => break,
                                Err(pending) => request = pending,
                            }
                        }
                    });
                }
            }
            Engine::RucclBlocking | Engine::Ruccl | Engine::RucclDeadline => {
                let communicator = match engine {
                    Engine::RucclBlocking => &self.ruccl_blocking,
                    _ => &self.ruccl,
                };
                let timeout = (engine == Engine::RucclDeadline).then_some(self.timeout);
                // The first call's input is the pattern; later calls feed back the output (no
                // copy per call, and the spare buffer is reused as MPI_Allreduce reuses its
                // receive buffer).
                let mut buffer = HostValues::F32(send.to_vec());
                for _ in 0..calls {
                    countdown.tick();
                    // The engine's errors are agreed: every process gets the same (a dead
                    // peer: each survivor's timeout).
                    buffer = communicator
                        .all_reduce(
                            Ok(buffer),
                            ReduceOperation::Sum,
                            timeout.map(|timeout| Instant::now() + timeout),
                        )
                        .map_err(|error| Failure::everywhere(error.to_string()))?;
                }
                if let HostValues::F32(values) = buffer {
                    receive = values;
                }
            }
        }
        Ok(receive)
    }

    /// Every engine at one size: warm-up, then the timed calls in [`ROUNDS`] rounds that take
    /// turns between the engines (a noisy stretch of a shared machine then hits all engines,
    /// not just the one whose turn it was), then one checked call each.
    fn measure(&self, bytes: usize, options: &Options) -> Result<Vec<Row>, Failure> {
        let count = (bytes / 4).max(1);
        let at = |engine: &Engine| format!("{} at {bytes} B", engine.name());
        let bookkeeping = |error| Failure::from(error).context(format!("at {bytes} B"));
        // Process p's element i: small integers, so every sum is exact.
        let pattern =
            |p: usize| -> Vec<f32> { (0..count).map(|i| ((p + i) % 7) as f32 - 3.0).collect() };
        let send = pattern(self.process);
        let engines = &options.engines;
        for engine in engines {
            self.run(*engine, &send, options.sweep.warmup)
                .map_err(|error| error.context(at(engine)))?;
        }
        let rounds = ROUNDS.min(options.sweep.iterations);
        let mut elapsed = vec![Duration::ZERO; engines.len()];
        for round in 0..rounds {
            // Rounds share the calls out: the first ones take the remainder.
            let calls = options.sweep.iterations / rounds
                + usize::from(round < options.sweep.iterations % rounds);
            for (engine, elapsed) in engines.iter().zip(elapsed.iter_mut()) {
                self.bookkeeping
                    .barrier(Pace::Prompt)
                    .map_err(bookkeeping)?;
                let started = Instant::now();
                self.run(*engine, &send, calls)
                    .map_err(|error| error.context(at(engine)))?;
                *elapsed += started.elapsed();
            }
        }
        let mut rows = Vec::new();
        for (engine, elapsed) in engines.iter().zip(elapsed) {
            let mean = elapsed.as_secs_f64() / options.sweep.iterations as f64;
            let seconds = self.bookkeeping.average(Some(mean)).map_err(bookkeeping)?;
            let mut wrong = 0u64;
            if options.sweep.check {
                let output = self
                    .run(*engine, &send, 1)
                    .map_err(|error| error.context(at(engine)))?;
                let expected = |i: usize| -> f32 {
                    (0..self.processes)
                        .map(|p| ((p + i) % 7) as f32 - 3.0)
                        .sum()
                };
                wrong = output
                    .iter()
                    .enumerate()
                    .filter(|(i, value)| **value != expected(*i))
                    .count() as u64;
                wrong += u64::from(output.len() != count);
            }
            let wrong = self.bookkeeping.sum(wrong).map_err(bookkeeping)?;
            rows.push(Row {
                bytes: count * 4,
                seconds,
                wrong,
            });
        }
        Ok(rows)
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
            say!("mpi-allreduce-perf: {message}\n{USAGE}");
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
    if let Some(death) = options.death.as_ref().filter(|d| d.process >= processes) {
        if process == 0 {
            say!(
                "mpi-allreduce-perf: {DIE_VARIABLE} names process {}, the job has {processes}",
                death.process
            );
        }
        return ExitCode::from(EXIT_USAGE);
    }
    let largest = options.sweep.sizes().last().copied().unwrap_or(4);
    let what = format!("-e {largest} B ({processes} processes)");
    let bookkeeping = match bookkeeping::start(
        &runtime,
        TOOL,
        options.timeout,
        options.death.as_ref(),
        per_process(largest),
        &what,
    ) {
        Ok(bookkeeping) => bookkeeping,
        Err(status) => return ExitCode::from(status),
    };
    let setup = Some(Instant::now() + options.timeout);
    let communicators = runtime
        .communicator(Waiting::Deadlines, setup)
        .and_then(|ruccl| Ok((ruccl, runtime.communicator(Waiting::Blocking, setup)?)));
    let (ruccl, ruccl_blocking) = match communicators {
        Ok(communicators) => communicators,
        Err(error) => {
            let failure =
                Failure::everywhere(format!("cannot create the ruCCL communicators: {error}"));
            leave(&runtime, TOOL, &failure)
        }
    };
    let countdowns = Engine::ALL
        .iter()
        .map(|engine| Countdown::new(options.death.as_ref(), process, engine.name()))
        .collect();
    let bench = Bench {
        bookkeeping,
        countdowns,
        timeout: options.timeout,
        process: runtime.process(),
        processes: runtime.processes(),
        runtime,
        ruccl,
        ruccl_blocking,
    };
    let sizes = options.sweep.sizes();
    let measured = report::sweep(&sizes, options.engines.len(), |bytes| {
        bench.measure(bytes, &options)
    });
    let tables = match measured {
        Ok(tables) => tables,
        // Every process exits non-zero: each with the agreed error or its own timeout.
        Err(failure) => leave(&bench.runtime, TOOL, &failure),
    };
    let wrong: u64 = tables.iter().flatten().map(|row| row.wrong).sum();
    let mut code = if wrong == 0 { EXIT_OK } else { EXIT_FAILED };
    if bench.process == 0 {
        match report::write_out(&format_tables(&options, bench.processes, &tables)) {
            Ok(Written::Done) => {}
            // Quietly, but not as a success: the results were not all written (as ruccl-perf).
            Ok(Written::Closed) => code = EXIT_FAILED,
            Err(error) => {
                say!("mpi-allreduce-perf: cannot write the results: {error}");
                code = EXIT_FAILED;
            }
        }
        if wrong != 0 {
            say!("mpi-allreduce-perf: {wrong} wrong values");
        }
    }
    drop(bench);
    ExitCode::from(code)
}

fn format_tables(options: &Options, processes: usize, tables: &[Vec<Row>]) -> String {
    let version = library_version();
    let mut out = String::new();
    for (engine, rows) in options.engines.iter().zip(tables) {
        let heading = [
            format!("mpi-allreduce-perf: {} ({version})", engine.describe()),
            format!(
                "nProcs {processes} {} timeout: {} s",
                options.sweep.describe(),
                options.timeout.as_secs_f64()
            ),
        ];
        out.push_str(&format_table(&heading, processes, rows));
    }
    let names: Vec<&str> = options.engines.iter().map(|engine| engine.name()).collect();
    out.push_str(&format_summary(&names, tables));
    out
}
