//! `ruccl-cuda-perf`: the executor's all-reduce on real GPUs, as an nccl-tests-style table; with
//! `--nccl` (built with the `nccl` feature, two or more GPUs) the same sweep through NCCL.
//!
//! The sweep, its rows, the input pattern, the `#wrong` check and the table are
//! `ruccl_sim::perf`'s, run on [`CudaCollective`]; this binary adds the CUDA-specific parts: the
//! driver probe and `SKIP`, the device map, the title (driver, map, topology) and the NCCL
//! baseline. Flags follow nccl-tests (`-b`, `-e`, `-f`, `-n`, `-w`, `-d`, `-o`). Without a CUDA
//! driver it prints a `SKIP:` line and exits 0, unless `--require-gpu` is given. Exits 1 when any
//! element is wrong or any run fails.

use clap::Parser;
use ruccl_core::ElementType;
use ruccl_core::sync::Mutex;
use ruccl_core::{DeviceId, ReduceOperation};
use ruccl_cuda::{CudaCollective, CudaConfig, DeviceMap, probe};
use ruccl_sim::perf::{Instruments, PerfRow, Size, SweepConfig, SweepEvent, sweep, table};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "ruccl-cuda-perf",
    about = "ruCCL all-reduce on CUDA GPUs, nccl-tests style"
)]
struct Args {
    /// Smallest message per rank (bytes; K, M, G suffixes allowed; at least one element).
    #[arg(short = 'b', long = "minbytes", default_value = "1K")]
    min_bytes: Size,
    /// Largest message per rank.
    #[arg(short = 'e', long = "maxbytes", default_value = "256M")]
    max_bytes: Size,
    /// Multiply the size by this each step (at least 2).
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4)]
    step_factor: usize,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    iterations: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    warmup: usize,
    /// Element type (float, double, half, bfloat16, int32, int64), or `all`.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    datatype: String,
    /// Reduction (sum, avg, prod, min, max), or `all`.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    op: String,
    /// Explicit device map, `device:gpu` pairs (e.g. `0:0,1:0,2:0,3:0`); ranks follow increasing
    /// device ids.
    #[arg(long)]
    map: Option<DeviceMap>,
    /// Logical ranks per GPU on every visible GPU (default: 4 on one GPU, else 1).
    #[arg(long)]
    ranks_per_gpu: Option<usize>,
    /// Also run the NCCL baseline (needs the `nccl` feature and two or more GPUs).
    #[arg(long)]
    nccl: bool,
    /// Fail (exit 1) instead of skipping when no CUDA driver or GPU is found.
    #[arg(long)]
    require_gpu: bool,
}

fn parse_list<T>(text: &str, all: &[T]) -> Result<Vec<T>, String>
where
    T: Clone + std::str::FromStr,
    T::Err: std::fmt::Display,
{
    if text.eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    text.split(',')
        .map(|item| item.trim().parse::<T>().map_err(|error| error.to_string()))
        .collect()
}

fn default_map(gpus: usize, ranks_per_gpu: Option<usize>) -> Result<DeviceMap, String> {
    let per_gpu = ranks_per_gpu
        .unwrap_or(if gpus == 1 { 4 } else { 1 })
        .max(1);
    let pairs = (0..gpus).flat_map(|gpu| {
        (0..per_gpu).map(move |slot| (DeviceId::new((gpu * per_gpu + slot) as u32), gpu))
    });
    DeviceMap::new(pairs).map_err(|error| error.to_string())
}

/// `map` with its devices renumbered `0..W` in increasing order, each on the same GPU: the sweep
/// addresses rank `r` as device `r`.
fn ranked(map: &DeviceMap) -> Result<DeviceMap, String> {
    DeviceMap::new(
        map.iter()
            .enumerate()
            .map(|(rank, (_, gpu))| (DeviceId::new(rank as u32), gpu)),
    )
    .map_err(|error| error.to_string())
}

/// The sweep of one element type and operation over `world` ranks. Every size holds at least one
/// element (nccl-tests would measure an empty message where `-b` is below the element size).
fn sweep_config(
    args: &Args,
    world: usize,
    element_type: ElementType,
    operation: ReduceOperation,
) -> SweepConfig {
    SweepConfig {
        min_bytes: args.min_bytes.0.max(element_type.size()),
        max_bytes: args.max_bytes.0,
        step_factor: args.step_factor,
        world,
        element_type,
        operation,
        iterations: args.iterations,
        warmup: args.warmup,
        check: true,
        timeout: Duration::from_secs(120),
        ..SweepConfig::default()
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("ruccl-cuda-perf: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `#`-prefixed title lines.
fn comment(lines: &[String]) -> String {
    lines.iter().map(|line| format!("# {line}\n")).collect()
}

/// Whether every checked row is right.
fn all_right(rows: &[PerfRow]) -> bool {
    rows.iter().all(|row| row.wrong.unwrap_or(0) == 0)
}

/// Run every requested sweep; `Ok(false)` when some element was wrong or some size failed.
fn run(args: &Args) -> Result<bool, String> {
    let types = parse_list(&args.datatype, &ElementType::ALL)?;
    let operations = parse_list(&args.op, &ReduceOperation::ALL)?;
    let driver = match probe() {
        Ok(driver) => driver,
        Err(error) if !args.require_gpu && error.is_no_gpu() => {
            println!("SKIP: no CUDA driver or GPU: {error}");
            return Ok(true);
        }
        Err(error) => return Err(error.to_string()),
    };
    let map = match &args.map {
        Some(map) => ranked(map)?,
        None => default_map(driver.device_count, args.ranks_per_gpu)?,
    };
    let world = map.len();
    // Refuse bad flags once, before any GPU work (they are the same for every type and operation).
    if let (Some(&element_type), Some(&operation)) = (types.first(), operations.first()) {
        sweep_config(args, world, element_type, operation)
            .validate()
            .map_err(|error| error.to_string())?;
    }
    let device = CudaCollective::with_config(map.clone(), CudaConfig::from_env())
        .map_err(|e| e.to_string())?;
    let mut title = vec![
        format!(
            "ruccl-cuda all-reduce: {world} ranks, map {map}; driver CUDA {} ({})",
            driver.version_string(),
            driver.library
        ),
        "time = wall clock per all-reduce (device work included); traffic: - (no ledger on a \
         GPU); model = the link model's time for the ring schedule"
            .to_owned(),
    ];
    title.extend(device.topology().to_string().lines().map(str::to_owned));
    print!("{}", comment(&title));
    let description = format!("ruccl-cuda ({world} ranks, map {map})");
    let mut all_good = true;
    for &element_type in &types {
        for &operation in &operations {
            let config = sweep_config(args, world, element_type, operation);
            print!("{}", table::header(&config, &description));
            let rows = Mutex::new(Vec::new());
            let on_event = |event: SweepEvent<'_>| {
                if let SweepEvent::Measured(row) = event {
                    print!("{}", table::row(row));
                    rows.lock().push(row.clone());
                }
            };
            if let Err(error) = sweep(&device, &config, &Instruments::default(), &on_event) {
                eprintln!("{element_type} {operation}: {error}");
                all_good = false;
            }
            let rows = rows.into_inner();
            all_good &= all_right(&rows);
            print!("{}", table::footer(&rows));
        }
    }
    if args.nccl {
        all_good &= nccl_baseline(args, &types, &operations, driver.device_count);
    }
    Ok(all_good)
}

#[cfg(feature = "nccl")]
fn nccl_baseline(
    args: &Args,
    types: &[ElementType],
    operations: &[ReduceOperation],
    gpus: usize,
) -> bool {
    use ruccl_cuda::nccl::NcclBaseline;
    let ordinals: Vec<usize> = (0..gpus).collect();
    let baseline = match NcclBaseline::new(&ordinals) {
        Ok(baseline) => baseline,
        Err(error) => {
            println!("# NCCL baseline skipped: {error}");
            return true;
        }
    };
    let version = NcclBaseline::version().map_or_else(|e| e.to_string(), |v| v.to_string());
    let description = format!("NCCL {version} ({gpus} ranks, one per GPU, in place, one thread)");
    let mut all_good = true;
    for &element_type in types {
        for &operation in operations {
            let config = sweep_config(args, gpus, element_type, operation);
            print!("{}", table::header(&config, &description));
            let mut rows = Vec::new();
            for bytes in config.sizes() {
                match baseline.measure(&config, bytes) {
                    Ok(row) => {
                        print!("{}", table::row(&row));
                        rows.push(row);
                    }
                    Err(error) => {
                        eprintln!("NCCL {element_type} {operation} {bytes} B: {error}");
                        all_good = false;
                        break;
                    }
                }
            }
            // NCCL's avg may round differently from the reference: its #wrong is informational.
            if operation != ReduceOperation::Mean {
                all_good &= all_right(&rows);
            }
            print!("{}", table::footer(&rows));
        }
    }
    all_good
}

#[cfg(not(feature = "nccl"))]
fn nccl_baseline(_: &Args, _: &[ElementType], _: &[ReduceOperation], _: usize) -> bool {
    println!("# NCCL baseline skipped: ruccl-cuda-perf was built without the `nccl` feature");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["ruccl-cuda-perf"].iter().chain(extra))
    }

    #[test]
    fn sizes_accept_nccl_tests_suffixes() {
        let parsed = args(&["-b", "8", "-e", "256M"]);
        assert_eq!((parsed.min_bytes.0, parsed.max_bytes.0), (8, 256 << 20));
        let defaults = args(&[]);
        assert_eq!(
            (defaults.min_bytes.0, defaults.max_bytes.0),
            (1 << 10, 256 << 20)
        );
        assert_eq!(args(&["-e", "2g"]).max_bytes.0, 2 << 30);
        assert!(Args::try_parse_from(["ruccl-cuda-perf", "-b", "x"]).is_err());
    }

    #[test]
    fn all_selects_every_type_and_lists_are_comma_separated() {
        assert_eq!(
            parse_list("all", &ElementType::ALL),
            Ok(ElementType::ALL.to_vec())
        );
        assert_eq!(
            parse_list("sum,max", &ReduceOperation::ALL),
            Ok(vec![ReduceOperation::Sum, ReduceOperation::Max])
        );
        assert!(parse_list::<ElementType>("float,quad", &ElementType::ALL).is_err());
    }

    #[test]
    fn the_default_map_puts_four_logical_ranks_on_a_lone_gpu() {
        let map = default_map(1, None).unwrap();
        assert_eq!(map.to_string(), "0:0,1:0,2:0,3:0");
        let map = default_map(2, None).unwrap();
        assert_eq!(map.to_string(), "0:0,1:1");
        let map = default_map(2, Some(2)).unwrap();
        assert_eq!(map.to_string(), "0:0,1:0,2:1,3:1");
    }

    #[test]
    fn an_explicit_map_is_renumbered_in_rank_order() {
        let map: DeviceMap = "7:1,3:0,5:0".parse().unwrap();
        assert_eq!(ranked(&map).unwrap().to_string(), "0:0,1:0,2:1");
    }

    #[test]
    fn the_sweep_follows_the_flags_and_holds_at_least_one_element() {
        let parsed = args(&["-b", "4", "-e", "4M", "-f", "64", "-n", "3", "-w", "1"]);
        let config = sweep_config(&parsed, 4, ElementType::F64, ReduceOperation::Mean);
        assert_eq!(config.sizes(), vec![8, 512, 32 << 10, 2 << 20]);
        assert_eq!((config.iterations, config.warmup, config.world), (3, 1, 4));
        assert!(config.check);
        assert_eq!(config.validate().map_err(|e| e.to_string()), Ok(()));
        let floats = sweep_config(&parsed, 4, ElementType::F32, ReduceOperation::Sum);
        assert_eq!(floats.sizes(), vec![4, 256, 16 << 10, 1 << 20]);
        let defaults = sweep_config(&args(&[]), 2, ElementType::F32, ReduceOperation::Sum);
        let sizes = defaults.sizes();
        assert_eq!(sizes.first(), Some(&1024));
        assert_eq!(sizes.last(), Some(&(256 << 20)));
        assert_eq!((defaults.iterations, defaults.warmup), (20, 5));
    }

    #[test]
    fn a_step_factor_below_two_is_refused_before_any_gpu_work() {
        let config = sweep_config(
            &args(&["-f", "1"]),
            2,
            ElementType::F32,
            ReduceOperation::Sum,
        );
        assert!(config.validate().is_err());
    }

    #[test]
    fn unchecked_rows_count_as_right() {
        let row = |wrong| PerfRow {
            bytes: 8,
            count: 2,
            element_type: ElementType::F32,
            operation: ReduceOperation::Sum,
            world: 2,
            time_us: 1.0,
            wrong,
            traffic_ratio: None,
            model_us: 1.0,
        };
        assert!(all_right(&[row(Some(0)), row(None)]));
        assert!(!all_right(&[row(Some(0)), row(Some(3))]));
    }
}
