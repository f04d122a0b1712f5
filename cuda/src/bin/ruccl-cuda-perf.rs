//! `ruccl-cuda-perf`: the executor's all-reduce on real GPUs, as an nccl-tests-style table; with
//! `--nccl` (built with the `nccl` feature, two or more GPUs) the same sweep through NCCL.
//!
//! Flags follow nccl-tests (`-b`, `-e`, `-f`, `-n`, `-w`, `-d`, `-o`). Without a CUDA driver it
//! prints a `SKIP:` line and exits 0, unless `--require-gpu` is given. Exits 1 when any element
//! is wrong or any run fails.

use clap::Parser;
use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation};
use ruccl_cuda::perf::{PerfRow, SweepConfig, format_table, measure};
use ruccl_cuda::{CudaCollective, CudaConfig, DeviceMap, probe};
use ruccl_sim::host::ElementType;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "ruccl-cuda-perf",
    about = "ruCCL all-reduce on CUDA GPUs, nccl-tests style"
)]
struct Args {
    /// Smallest message per rank (bytes; K, M, G suffixes allowed).
    #[arg(short = 'b', long = "minbytes", default_value = "1K", value_parser = parse_bytes)]
    min_bytes: usize,
    /// Largest message per rank.
    #[arg(short = 'e', long = "maxbytes", default_value = "256M", value_parser = parse_bytes)]
    max_bytes: usize,
    /// Multiply the size by this each step.
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
    /// Explicit device map, `device:gpu` pairs (e.g. `0:0,1:0,2:0,3:0`).
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

fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, scale) = match text.char_indices().last() {
        Some((at, 'K' | 'k')) => (&text[..at], 1 << 10),
        Some((at, 'M' | 'm')) => (&text[..at], 1 << 20),
        Some((at, 'G' | 'g')) => (&text[..at], 1 << 30),
        _ => (text, 1),
    };
    let value: usize = digits
        .parse()
        .map_err(|_| format!("not a size: `{text}`"))?;
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("too large: `{text}`"))
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
        Some(map) => map.clone(),
        None => default_map(driver.device_count, args.ranks_per_gpu)?,
    };
    let device = CudaCollective::with_config(map.clone(), CudaConfig::from_env())
        .map_err(|e| e.to_string())?;
    let communicator =
        NativeCommunicator::new(device.devices(), device.clone()).map_err(|e| e.to_string())?;
    let mut title = vec![
        format!(
            "ruccl-cuda all-reduce: {} ranks, map {map}; driver CUDA {} ({})",
            communicator.world_size(),
            driver.version_string(),
            driver.library
        ),
        format!(
            "iterations {}, warm-up {}; time = wall clock per all-reduce",
            args.iterations, args.warmup
        ),
    ];
    title.extend(device.topology().to_string().lines().map(str::to_owned));
    let mut all_good = true;
    for &element_type in &types {
        for &operation in &operations {
            let config = SweepConfig {
                min_bytes: args.min_bytes,
                max_bytes: args.max_bytes,
                step_factor: args.step_factor,
                iterations: args.iterations,
                warmup: args.warmup,
                element_type,
                operation,
                timeout: Duration::from_secs(120),
            };
            let mut rows: Vec<PerfRow> = Vec::new();
            for bytes in config.sizes() {
                match measure(&device, &communicator, &config, bytes) {
                    Ok(row) => rows.push(row),
                    Err(error) => {
                        eprintln!("{element_type} {operation} {bytes} B: {error}");
                        all_good = false;
                        break;
                    }
                }
            }
            all_good &= rows.iter().all(|row| row.wrong == 0);
            print!("{}", format_table(&title, &rows));
            title.clear();
        }
    }
    if args.nccl {
        all_good &= nccl_baseline(args, &types, &operations, &driver.device_count);
    }
    Ok(all_good)
}

#[cfg(feature = "nccl")]
fn nccl_baseline(
    args: &Args,
    types: &[ElementType],
    operations: &[ReduceOperation],
    gpus: &usize,
) -> bool {
    use ruccl_cuda::nccl::NcclBaseline;
    let ordinals: Vec<usize> = (0..*gpus).collect();
    let baseline = match NcclBaseline::new(&ordinals) {
        Ok(baseline) => baseline,
        Err(error) => {
            println!("# NCCL baseline skipped: {error}");
            return true;
        }
    };
    let version = NcclBaseline::version().map_or_else(|e| e.to_string(), |v| v.to_string());
    let mut title = vec![format!(
        "NCCL {version} baseline: {gpus} ranks, one per GPU, in place, one thread"
    )];
    let mut all_good = true;
    for &element_type in types {
        for &operation in operations {
            let config = SweepConfig {
                min_bytes: args.min_bytes,
                max_bytes: args.max_bytes,
                step_factor: args.step_factor,
                element_type,
                operation,
                ..SweepConfig::default()
            };
            let mut rows = Vec::new();
            for bytes in config.sizes() {
                let count = bytes / element_type.size();
                match baseline.measure(element_type, operation, count, args.warmup, args.iterations)
                {
                    Ok(row) => rows.push(row),
                    Err(error) => {
                        eprintln!("NCCL {element_type} {operation} {bytes} B: {error}");
                        all_good = false;
                        break;
                    }
                }
            }
            // NCCL's avg rounds differently from the reference: its #wrong is informational.
            if operation != ReduceOperation::Mean {
                all_good &= rows.iter().all(|row| row.wrong == 0);
            }
            print!("{}", format_table(&title, &rows));
            title.clear();
        }
    }
    all_good
}

#[cfg(not(feature = "nccl"))]
fn nccl_baseline(_: &Args, _: &[ElementType], _: &[ReduceOperation], _: &usize) -> bool {
    println!("# NCCL baseline skipped: ruccl-cuda-perf was built without the `nccl` feature");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_nccl_tests_suffixes() {
        assert_eq!(parse_bytes("8"), Ok(8));
        assert_eq!(parse_bytes("1K"), Ok(1024));
        assert_eq!(parse_bytes("256M"), Ok(256 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert!(parse_bytes("x").is_err());
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
}
