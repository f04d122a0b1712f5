//! ruCCL's all-reduce against burn-collective 0.21's, side by side in one process.
//!
//! Every measurement starts `W` threads, one per rank (burn: one per peer), each calling
//! all-reduce (f32, sum) on its own tensor: ruCCL's ranks feed the output back in as the next
//! input, as nccl-tests' in-place loop does; burn's peers pass their own tensor every call (a
//! clone of its handle). Fed back, burn's peers would all pass the one result buffer burn hands
//! every peer, and its additions would read one buffer `W` times instead of `W` peers' data. After a few untimed calls (which also check the first result
//! is `W` everywhere) rank 0 picks a call count worth `--budget-ms`, and every rank times that
//! many calls from a common barrier; the figure is the slowest rank's mean time per call.
//!
//! The contenders, at every size, in an order rotated between rounds (so none always runs first
//! or last): ruCCL (`Auto`) on the simulated device in place and out of place, and burn's three
//! local strategies (centralized, binary tree, ring) on burn-ndarray. The table is the median over
//! the rounds of ruCCL's time over burn's best strategy's.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use burn_collective::{AllReduceStrategy, CollectiveConfig, PeerId};
use burn_ndarray::NdArray;
use burn_tensor::{Tensor, TensorData, TensorPrimitive};
use clap::Parser;
use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation};
use ruccl_sim::{HostTensors, HostValues, SimDevice};

type Burn = NdArray<f32>;
type BurnTensor = burn_tensor::ops::FloatTensor<Burn>;

/// ruCCL's all-reduce against burn-collective's, interleaved; prints the ratio table.
#[derive(Parser, Debug)]
struct Args {
    /// Worlds (ranks) to measure.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    worlds: Vec<usize>,
    /// Message sizes in bytes (K, M: powers of 1024); rounded down to whole f32 elements.
    #[arg(long, value_delimiter = ',', default_value = "4,1K,64K,1M,16M,64M", value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Rounds; each cell is the median over them.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Roughly how long one contender's timed calls take at one size.
    #[arg(long, default_value_t = 300)]
    budget_ms: u64,
    /// Also print every contender's mean time per call (µs) of every round.
    #[arg(long)]
    verbose: bool,
    /// Measure only ruCCL (in place and out of place), for profiling; prints times, no ratios.
    #[arg(long)]
    ruccl_only: bool,
}

fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let value: usize = digits.parse().map_err(|_| format!("not a size: {text}"))?;
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return Err(format!("unknown unit in {text}")),
    };
    value
        .checked_mul(1 << shift)
        .filter(|&bytes| bytes >= 4)
        .ok_or_else(|| format!("size out of range: {text}"))
}

/// Who is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Contender {
    RucclInPlace,
    RucclOutOfPlace,
    Burn(BurnStrategy),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum BurnStrategy {
    Centralized,
    Tree,
    Ring,
}

impl Contender {
    const ALL: [Contender; 5] = [
        Contender::RucclInPlace,
        Contender::RucclOutOfPlace,
        Contender::Burn(BurnStrategy::Centralized),
        Contender::Burn(BurnStrategy::Tree),
        Contender::Burn(BurnStrategy::Ring),
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::RucclInPlace => "ruccl in place",
            Contender::RucclOutOfPlace => "ruccl out of place",
            Contender::Burn(BurnStrategy::Centralized) => "burn centralized",
            Contender::Burn(BurnStrategy::Tree) => "burn tree(2)",
            Contender::Burn(BurnStrategy::Ring) => "burn ring",
        }
    }
}

/// What one measurement needs to know.
#[derive(Clone, Copy)]
struct Cell {
    world: usize,
    elements: usize,
    budget: Duration,
}

/// Untimed calls before the count is chosen.
const WARMUP_CALLS: usize = 3;

/// A rank's side of one measurement: one call, and the check of the first call's result.
trait RankLoop {
    fn call(&mut self) -> Result<(), String>;
    /// Whether the last output is `W` everywhere (every input was all ones).
    fn check_first(&mut self) -> Result<(), String>;

    /// `WARMUP_CALLS` calls, the first checked; how long the last took.
    fn warm(&mut self) -> Result<Duration, String> {
        self.call()?;
        self.check_first()?;
        let mut last = Duration::ZERO;
        for _ in 1..WARMUP_CALLS {
            let start = Instant::now();
            self.call()?;
            last = start.elapsed();
        }
        Ok(last)
    }

    /// `calls` calls.
    fn timed(&mut self, calls: usize) -> Result<(), String> {
        (0..calls).try_for_each(|_| self.call())
    }
}

/// Run one measurement: `make(rank)` builds each rank's loop on its own thread.
fn measure<L: RankLoop>(
    cell: Cell,
    make: impl Fn(usize) -> Result<L, String> + Sync,
) -> Result<Duration, String> {
    let barrier = Barrier::new(cell.world);
    let calls = AtomicUsize::new(0);
    let results: Vec<Result<Duration, String>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..cell.world)
            .map(|rank| {
                let (barrier, calls, make) = (&barrier, &calls, &make);
                scope.spawn(move || -> Result<Duration, String> {
                    let mut rank_loop = make(rank)?;
                    let last = rank_loop.warm()?;
                    if rank == 0 {
                        let per_call = last.max(Duration::from_nanos(100));
                        let count = (cell.budget.as_nanos() / per_call.as_nanos()).clamp(3, 20_000);
                        calls.store(count as usize, Ordering::SeqCst);
                    }
                    barrier.wait();
                    let count = calls.load(Ordering::SeqCst);
                    barrier.wait();
                    let start = Instant::now();
                    rank_loop.timed(count)?;
                    Ok(start.elapsed() / count as u32)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("a rank panicked".into()))
            })
            .collect()
    });
    results
        .into_iter()
        .try_fold(Duration::ZERO, |slowest, result| Ok(slowest.max(result?)))
}

/// Rank `rank`'s device (worlds are far below `u32::MAX`).
fn device_id(rank: usize) -> DeviceId {
    DeviceId::new(u32::try_from(rank).unwrap_or(u32::MAX))
}

struct RucclRank {
    communicator: Arc<NativeCommunicator<SimDevice>>,
    device: SimDevice,
    rank: usize,
    world: usize,
    tensor: Option<<SimDevice as ruccl_core::NativeCollectiveDevice>::Tensor>,
}

impl RankLoop for RucclRank {
    fn call(&mut self) -> Result<(), String> {
        let tensor = self.tensor.take().ok_or("no tensor")?;
        let output = self
            .communicator
            .all_reduce(self.rank, tensor, ReduceOperation::Sum)
            .map_err(|error| format!("ruCCL: {error}"))?;
        self.tensor = Some(output);
        Ok(())
    }

    fn check_first(&mut self) -> Result<(), String> {
        let first = self.tensor.as_ref().ok_or("no tensor")?;
        match self
            .device
            .download(first)
            .map_err(|error| error.to_string())?
        {
            HostValues::F32(values) if values.iter().all(|&v| v == self.world as f32) => Ok(()),
            _ => Err("ruCCL: wrong first result".into()),
        }
    }
}

fn ruccl(cell: Cell, in_place: bool) -> Result<Duration, String> {
    // As ruccl-perf builds its devices: no census or ledger on the measured path.
    let device = SimDevice::builder()
        .in_place(in_place)
        .record_traffic(false)
        .ledger_retention(Some(1))
        .census(false)
        .build();
    let devices = (0..cell.world).map(device_id).collect();
    let communicator = Arc::new(
        NativeCommunicator::new(devices, device.clone()).map_err(|error| error.to_string())?,
    );
    measure(cell, |rank| {
        let tensor = device
            .upload(device_id(rank), &HostValues::F32(vec![1.0; cell.elements]))
            .map_err(|error| error.to_string())?;
        Ok(RucclRank {
            communicator: communicator.clone(),
            device: device.clone(),
            rank,
            world: cell.world,
            tensor: Some(tensor),
        })
    })
}

struct BurnRank {
    peer: PeerId,
    world: usize,
    /// The peer's own values, passed (as a clone of the handle) to every call.
    own: BurnTensor,
    /// The last call's output.
    tensor: Option<BurnTensor>,
}

impl RankLoop for BurnRank {
    fn call(&mut self) -> Result<(), String> {
        // Drop the last output first, so the call may reuse its memory.
        drop(self.tensor.take());
        let output = burn_collective::all_reduce::<Burn>(
            self.peer,
            self.own.clone(),
            burn_collective::ReduceOperation::Sum,
        )
        .map_err(|error| format!("burn: {error:?}"))?;
        self.tensor = Some(output);
        Ok(())
    }

    fn check_first(&mut self) -> Result<(), String> {
        let first = self.tensor.clone().ok_or("no tensor")?;
        let data = Tensor::<Burn, 1>::from_primitive(TensorPrimitive::Float(first)).into_data();
        let values = data
            .to_vec::<f32>()
            .map_err(|error| format!("burn: {error:?}"))?;
        if values.iter().all(|&v| v == self.world as f32) {
            Ok(())
        } else {
            Err("burn: wrong first result".into())
        }
    }
}

impl Drop for BurnRank {
    fn drop(&mut self) {
        let _ = burn_collective::finish_collective::<Burn>(self.peer);
    }
}

fn burn(cell: Cell, strategy: BurnStrategy) -> Result<Duration, String> {
    burn_collective::reset_collective::<Burn>();
    let strategy = match strategy {
        BurnStrategy::Centralized => AllReduceStrategy::Centralized,
        BurnStrategy::Tree => AllReduceStrategy::Tree(2),
        BurnStrategy::Ring => AllReduceStrategy::Ring,
    };
    let config = CollectiveConfig::default()
        .with_num_devices(cell.world)
        .with_local_all_reduce_strategy(strategy);
    measure(cell, |rank| {
        let peer = PeerId::from(rank);
        let device = Default::default();
        burn_collective::register::<Burn>(peer, device, config.clone())
            .map_err(|error| format!("burn register: {error:?}"))?;
        let data = TensorData::new(vec![1.0f32; cell.elements], [cell.elements]);
        let tensor = Tensor::<Burn, 1>::from_data(data, &device)
            .into_primitive()
            .tensor();
        Ok(BurnRank {
            peer,
            world: cell.world,
            own: tensor,
            tensor: None,
        })
    })
}

fn run(contender: Contender, cell: Cell) -> Result<Duration, String> {
    match contender {
        Contender::RucclInPlace => ruccl(cell, true),
        Contender::RucclOutOfPlace => ruccl(cell, false),
        Contender::Burn(strategy) => burn(cell, strategy),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

fn label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.rounds == 0 || args.worlds.contains(&0) {
        eprintln!("error: --rounds and every world must be at least 1");
        return ExitCode::from(2);
    }
    // (world, bytes, contender) → one mean time per call (µs) per round.
    let mut times: BTreeMap<(usize, usize, Contender), Vec<f64>> = BTreeMap::new();
    let started = Instant::now();
    for round in 0..args.rounds {
        for &world in &args.worlds {
            for &bytes in &args.sizes {
                let cell = Cell {
                    world,
                    elements: bytes / 4,
                    budget: Duration::from_millis(args.budget_ms),
                };
                let mut order = Contender::ALL;
                order.rotate_left(round % Contender::ALL.len());
                for contender in order {
                    if args.ruccl_only && matches!(contender, Contender::Burn(_)) {
                        continue;
                    }
                    match run(contender, cell) {
                        Ok(time) => {
                            let micros = time.as_secs_f64() * 1e6;
                            if args.verbose {
                                eprintln!(
                                    "round {round} W={world} {:>8} {:<20} {micros:12.2} us",
                                    label(bytes),
                                    contender.name()
                                );
                            }
                            times
                                .entry((world, bytes, contender))
                                .or_default()
                                .push(micros);
                        }
                        Err(error) => {
                            eprintln!(
                                "error: W={world} {} {}: {error}",
                                label(bytes),
                                contender.name()
                            );
                            return ExitCode::FAILURE;
                        }
                    }
                }
            }
        }
    }
    let mut medians: BTreeMap<(usize, usize, Contender), f64> = BTreeMap::new();
    for (key, mut values) in times {
        medians.insert(key, median(&mut values));
    }
    if args.ruccl_only {
        for ((world, bytes, contender), micros) in &medians {
            println!(
                "W={world} {:>8} {:<20} {micros:12.1} us",
                label(*bytes),
                contender.name()
            );
        }
        return ExitCode::SUCCESS;
    }
    println!(
        "# all-reduce f32 sum, mean time per call; median of {} interleaved rounds; {:.0} s",
        args.rounds,
        started.elapsed().as_secs_f64()
    );
    for (title, place) in [
        ("ruCCL in place ÷ burn best", Contender::RucclInPlace),
        ("ruCCL out of place ÷ burn best", Contender::RucclOutOfPlace),
    ] {
        println!("\n## {title}\n");
        let header: Vec<String> = args.sizes.iter().map(|&bytes| label(bytes)).collect();
        println!("| W | {} |", header.join(" | "));
        println!("|---|{}", "---|".repeat(args.sizes.len()));
        for &world in &args.worlds {
            let cells: Vec<String> = args
                .sizes
                .iter()
                .map(|&bytes| {
                    let ours = medians[&(world, bytes, place)];
                    let best = [
                        BurnStrategy::Centralized,
                        BurnStrategy::Tree,
                        BurnStrategy::Ring,
                    ]
                    .into_iter()
                    .map(|strategy| medians[&(world, bytes, Contender::Burn(strategy))])
                    .fold(f64::INFINITY, f64::min);
                    format!("{:.2}", ours / best)
                })
                .collect();
            println!("| {world} | {} |", cells.join(" | "));
        }
    }
    println!("\n## mean time per call (µs), medians\n");
    let names: Vec<&str> = Contender::ALL.iter().map(|c| c.name()).collect();
    println!("| W | size | {} |", names.join(" | "));
    println!("|---|---|{}", "---:|".repeat(names.len()));
    for &world in &args.worlds {
        for &bytes in &args.sizes {
            let cells: Vec<String> = Contender::ALL
                .iter()
                .map(|&contender| format!("{:.1}", medians[&(world, bytes, contender)]))
                .collect();
            println!("| {world} | {} | {} |", label(bytes), cells.join(" | "));
        }
    }
    ExitCode::SUCCESS
}
