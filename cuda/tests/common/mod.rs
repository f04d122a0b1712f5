//! Shared helpers of the hardware tests: build the executor or skip, and the device maps to run
//! on (logical ranks on each GPU; across GPUs when there are several).
//!
//! Every test that needs a GPU is `#[ignore = "needs a GPU: ..."]`, so a plain `cargo test`
//! counts it as ignored, never as passed; `--include-ignored` runs them (`gpu-check.sh run`
//! does, with `RUCCL_CUDA_REQUIRE_HARDWARE=1`). Run that way without a CUDA driver or GPU, a
//! hardware test prints `SKIP: ...` and returns, unless `RUCCL_CUDA_REQUIRE_HARDWARE=1` or the
//! older `RUCCL_CUDA_REQUIRE_GPU=1`, which turn the skip into a failure. Under
//! `RUCCL_CUDA_REQUIRE_HARDWARE=1` *every* [`skip`] fails; only [`allowed_skip`]s — a case that
//! does not apply to this machine, or a typed mismatch of its software — still pass.
//!
//! Every hardware test runs under a [`watchdog`], and every collective it starts has a timeout,
//! so a hang ends the test binary with a `TIMEOUT:` line naming the test, well before the check
//! script's step limit.

#![allow(dead_code)] // each test binary uses its own subset

use half::{bf16, f16};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCollectiveError, NativeCommunicator,
    ReduceOperation,
};
use ruccl_cuda::{CudaCollective, CudaConfig, DeviceMap, REQUIRE_HARDWARE_ENV, probe};
use ruccl_sim::host::{ElementType, HostTensors, HostValues};
use ruccl_sim::pattern::{self, Expected};
use std::sync::mpsc;
use std::time::Duration;

/// How long one collective may take before it fails with a timeout.
pub const COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether every skip must fail the test (`RUCCL_CUDA_REQUIRE_HARDWARE=1`).
pub fn hardware_required() -> bool {
    ruccl_cuda::hardware_required()
}

/// Whether a missing GPU must fail the test instead of skipping it.
pub fn gpu_required() -> bool {
    hardware_required() || std::env::var("RUCCL_CUDA_REQUIRE_GPU").is_ok_and(|value| value == "1")
}

/// Skip `test` for `reason`: prints `SKIP: test: reason`. Under
/// `RUCCL_CUDA_REQUIRE_HARDWARE=1` a skip means the run did not check what it was meant to, so
/// this panics instead.
pub fn skip(test: &str, reason: impl std::fmt::Display) {
    assert!(
        !hardware_required(),
        "{test}: would skip ({reason}), but {REQUIRE_HARDWARE_ENV}=1 allows no skip"
    );
    println!("SKIP: {test}: {reason}");
}

/// A skip that is right even on the hardware run: the case does not apply to this machine (peer
/// access with one GPU), or its software has a typed, known mismatch (an NVRTC newer than the
/// driver). Prints `SKIP (allowed): test: reason`, which the check script counts apart.
pub fn allowed_skip(test: &str, reason: impl std::fmt::Display) {
    println!("SKIP (allowed): {test}: {reason}");
}

/// The longest a hardware test may run: `RUCCL_CUDA_TEST_TIMEOUT` seconds (the check script sets
/// it below its step limit), by default 240.
pub fn test_timeout() -> Duration {
    std::env::var("RUCCL_CUDA_TEST_TIMEOUT")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .filter(|&seconds| seconds > 0)
        .map_or(Duration::from_secs(240), Duration::from_secs)
}

/// Ends the whole test process (exit status 124, after a `TIMEOUT:` line naming the test) if it
/// is still alive [`test_timeout`] after it was armed. A hung device call cannot be cancelled
/// from its thread, so ending the process is the only way to report it before the step limit.
/// Disarmed when dropped.
#[must_use = "the watchdog is disarmed as soon as it is dropped"]
pub struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

/// Arm a [`Watchdog`] for `test`.
pub fn watchdog(test: &str) -> Watchdog {
    let limit = test_timeout();
    let (disarm, disarmed) = mpsc::channel::<()>();
    let test = test.to_owned();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = disarmed.recv_timeout(limit) {
            // Straight to the stream, not `eprintln!`: libtest captures the macros' output
            // (also on threads a test spawns) and would lose the line when the process exits.
            let line = format!(
                "TIMEOUT: {test} still running after {} s; the watchdog ends the test process\n",
                limit.as_secs()
            );
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            std::process::exit(124);
        }
    });
    Watchdog { _disarm: disarm }
}

/// The number of GPUs, or `None` (after printing the skip line) where there is no usable driver.
pub fn gpus(test: &str) -> Option<usize> {
    match probe() {
        Ok(driver) => Some(driver.device_count),
        Err(error) if error.is_no_gpu() && !gpu_required() => {
            println!("SKIP: {test}: {error}");
            None
        }
        Err(error) => panic!("{test}: no usable GPU: {error}"),
    }
}

/// Logical ranks per GPU for the one-GPU maps (`RUCCL_CUDA_LOGICAL_RANKS`, default 8).
pub fn logical_ranks() -> usize {
    std::env::var("RUCCL_CUDA_LOGICAL_RANKS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|&ranks| ranks >= 2)
        .unwrap_or(8)
}

/// The maps the hardware tests cover, each with a name for messages: every GPU alone with
/// [`logical_ranks`] logical ranks; with two or more GPUs also one rank per GPU, and twice as
/// many ranks as GPUs dealt round-robin (neighbours alternate GPUs, and ranks sharing a GPU
/// use separate contexts).
pub fn maps(gpus: usize) -> Vec<(String, DeviceMap)> {
    let mut maps: Vec<(String, DeviceMap)> = (0..gpus)
        .filter_map(|gpu| {
            let map = DeviceMap::logical(gpu, logical_ranks()).ok()?;
            Some((format!("{} logical ranks on GPU {gpu}", map.len()), map))
        })
        .collect();
    if gpus >= 2 {
        if let Ok(map) = DeviceMap::one_per_gpu(gpus) {
            maps.push((format!("one rank on each of {gpus} GPUs"), map));
        }
        let ordinals: Vec<usize> = (0..gpus).collect();
        if let Ok(map) = DeviceMap::round_robin(2 * gpus, &ordinals) {
            maps.push((
                format!("{} ranks round-robin over {gpus} GPUs", map.len()),
                map,
            ));
        }
    }
    maps
}

/// The executor for `map`, configured from the environment (`RUCCL_CUDA_KERNELS`,
/// `RUCCL_CUDA_CONTEXTS`). Panics on any error: callers have already checked for a GPU.
pub fn executor(map: DeviceMap, config: CudaConfig) -> CudaCollective {
    match CudaCollective::with_config(map.clone(), config) {
        Ok(device) => device,
        Err(error) => panic!("cannot build the CUDA executor for {map}: {error}"),
    }
}

/// Run `collective` with `algorithm` over `inputs[r]` on rank `r` of `communicator`, one thread
/// per rank; each rank's downloaded output or error text.
pub fn collective(
    device: &CudaCollective,
    communicator: &NativeCommunicator<CudaCollective>,
    inputs: &[HostValues],
    collective: Collective,
    algorithm: Algorithm,
) -> Vec<Result<HostValues, String>> {
    let options = CollectiveOptions::default()
        .with_algorithm(algorithm)
        .with_timeout(COLLECTIVE_TIMEOUT);
    std::thread::scope(|scope| {
        let handles: Vec<_> = communicator
            .devices()
            .iter()
            .zip(inputs)
            .enumerate()
            .map(|(rank, (&id, values))| {
                scope.spawn(move || -> Result<HostValues, String> {
                    let tensor = device.upload(id, values).map_err(|e| e.to_string())?;
                    let output = communicator
                        .collective(rank, tensor, collective, options)
                        .map_err(|e: NativeCollectiveError| e.to_string())?;
                    device.download(&output).map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("rank panicked".to_owned()))
            })
            .collect()
    })
}

/// All-reduce `inputs[r]` on rank `r` of `communicator` with the algorithm `Auto` picks.
pub fn all_reduce(
    device: &CudaCollective,
    communicator: &NativeCommunicator<CudaCollective>,
    inputs: &[HostValues],
    operation: ReduceOperation,
) -> Vec<Result<HostValues, String>> {
    collective(
        device,
        communicator,
        inputs,
        Collective::AllReduce(operation),
        Algorithm::Auto,
    )
}

/// The built-in algorithms that can run a world of `world` ranks.
pub fn algorithms(world: usize) -> Vec<Algorithm> {
    Algorithm::BUILT_IN
        .into_iter()
        .filter(|&algorithm| algorithm != Algorithm::HalvingDoubling || world.is_power_of_two())
        .collect()
}

/// Every kind of collective ([`Collective::KINDS`], all eight), with `operation` where it
/// reduces, and roots spread over the world: the last rank for broadcast and gather, the middle
/// one for reduce and scatter.
pub fn collectives(world: usize, operation: ReduceOperation) -> [Collective; 8] {
    Collective::KINDS.map(|kind| {
        let root = match kind {
            Collective::Reduce { .. } | Collective::Scatter { .. } => world / 2,
            _ => world.saturating_sub(1),
        };
        kind.with_operation(operation).with_root(root)
    })
}

/// The input length per rank for a case of about `len` elements: `len · world` where the
/// collective splits its input into `world` blocks (reduce-scatter, scatter, all-to-all), so
/// each block has `len` elements; `len` elsewhere.
pub fn input_len(collective: Collective, world: usize, len: usize) -> usize {
    match collective {
        Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
            len * world
        }
        _ => len,
    }
}

/// A tensor's elements as the bytes they are in device memory, for bitwise comparisons (`==` on
/// floats would call `-0.0` and `0.0` equal).
pub fn bits(values: &HostValues) -> Vec<u8> {
    values.to_ne_bytes()
}

/// Bytes of `element_type` elements as host values (the inverse of [`bits`]).
pub fn from_bits(element_type: ElementType, bytes: &[u8]) -> HostValues {
    HostValues::from_ne_bytes(element_type, bytes)
        .unwrap_or_else(|| panic!("no values of {element_type}"))
}

/// An integer type's arithmetic as the kernels do it, written independently of the simulated
/// device's: sums and products wrap in the type's own width, min and max in its own order
/// (unsigned types as unsigned), and `Mean` divides the wrapped sum by the world toward zero.
trait KernelInteger: Copy + Ord {
    /// `value` modulo 2^bits, as this type holds it.
    fn wrap(value: i64) -> Self;
    fn sum(self, other: Self) -> Self;
    fn product(self, other: Self) -> Self;
    /// `self / world`, toward zero.
    fn mean(self, world: usize) -> Self;
}

macro_rules! kernel_integer {
    ($type:ty) => {
        impl KernelInteger for $type {
            fn wrap(value: i64) -> Self {
                value as $type
            }
            fn sum(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn product(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
            fn mean(self, world: usize) -> Self {
                // In i128, where every value and every world fit (i8's -128 over 128 too).
                (i128::from(self) / world as i128) as $type
            }
        }
    };
}
kernel_integer!(i8);
kernel_integer!(i32);
kernel_integer!(i64);
kernel_integer!(u8);
kernel_integer!(u32);
kernel_integer!(u64);

/// [`kernel_reference`] for an integer type `T`: rank `r`'s pattern input wrapped into `T`,
/// folded over the ranks in rank order.
fn integer_reference<T: KernelInteger>(
    operation: ReduceOperation,
    world: usize,
    len: usize,
) -> Vec<T> {
    (0..len)
        .map(|index| {
            let column = (0..world.max(1))
                .map(|rank| T::wrap(pattern::input_integer(operation, rank, index)));
            let folded = column
                .reduce(|acc, value| match operation {
                    ReduceOperation::Sum | ReduceOperation::Mean => acc.sum(value),
                    ReduceOperation::Product => acc.product(value),
                    ReduceOperation::Min => acc.min(value),
                    ReduceOperation::Max => acc.max(value),
                })
                .unwrap_or_else(|| T::wrap(0));
            if operation == ReduceOperation::Mean {
                folded.mean(world.max(1))
            } else {
                folded
            }
        })
        .collect()
}

/// The first `world` devices of `map`, in order: rank `r` on the `r`-th.
pub fn first_devices(map: &DeviceMap, world: usize) -> Vec<DeviceId> {
    map.devices().take(world).collect()
}

/// Rank `rank`'s input for the exactness checks: the sim perf harness's pattern, whose
/// reduction is exact in every type.
pub fn input(
    element_type: ElementType,
    operation: ReduceOperation,
    rank: usize,
    len: usize,
) -> HostValues {
    pattern::input(element_type, operation, rank, len)
}

/// What the kernels must produce, bit for bit, from [`input`]s over `world` ranks: the exact
/// reduction (sim's [`Expected`]), with `Mean` divided as `kernels/mean.cu` and the simulated
/// device divide — one correctly rounded division in the compute type (f32 for f16 and bf16),
/// one rounding to storage; integers wrapped in their own width and divided with truncation
/// toward zero. (Sim's `#wrong` check allows `Mean` the element type's rounding, so it accepts
/// this too; `tests/reference.rs` checks that.)
pub fn kernel_reference(
    element_type: ElementType,
    operation: ReduceOperation,
    world: usize,
    len: usize,
) -> HostValues {
    let reduced = if operation == ReduceOperation::Mean {
        ReduceOperation::Sum
    } else {
        operation
    };
    let exact = Expected::new(element_type, reduced, world);
    // Every exact value is a small integer, so each conversion below is exact.
    let values = (0..len).map(|index| exact.at(index));
    let scale = operation == ReduceOperation::Mean;
    let world = world.max(1);
    let scaled_f32 = |sum: f64| {
        if scale {
            sum as f32 / world as f32
        } else {
            sum as f32
        }
    };
    match element_type {
        ElementType::F32 => HostValues::F32(values.map(scaled_f32).collect()),
        ElementType::F64 => HostValues::F64(
            values
                .map(|sum| if scale { sum / world as f64 } else { sum })
                .collect(),
        ),
        ElementType::F16 => {
            HostValues::F16(values.map(|sum| f16::from_f32(scaled_f32(sum))).collect())
        }
        ElementType::BF16 => {
            HostValues::BF16(values.map(|sum| bf16::from_f32(scaled_f32(sum))).collect())
        }
        ElementType::I32 => HostValues::I32(integer_reference(operation, world, len)),
        ElementType::I64 => HostValues::I64(integer_reference(operation, world, len)),
        ElementType::I8 => HostValues::I8(integer_reference(operation, world, len)),
        ElementType::U8 => HostValues::U8(integer_reference(operation, world, len)),
        ElementType::U32 => HostValues::U32(integer_reference(operation, world, len)),
        ElementType::U64 => HostValues::U64(integer_reference(operation, world, len)),
        other => panic!("no kernel reference for {other}"),
    }
}

/// What `collective` must give rank `rank` from [`input`]s of `len` elements over `world`
/// ranks, bit for bit: the all-reduce's [`kernel_reference`] (at the root only, for a reduce),
/// block `rank` of it for a reduce-scatter, every rank's input in rank order for an all-gather
/// (at the root only, for a gather), the root's input for a broadcast, block `rank` of the
/// root's input for a scatter, and block `rank` of every rank's input in rank order for an
/// all-to-all. A rank that receives nothing (not the root of a reduce or gather) gets no
/// elements.
pub fn collective_reference(
    collective: Collective,
    element_type: ElementType,
    world: usize,
    rank: usize,
    len: usize,
) -> HostValues {
    let operation = collective.operation().unwrap_or(ReduceOperation::Sum);
    let size = element_type.size();
    let block = len / world.max(1);
    // Block `index` of a rank's input or output, as bytes.
    let block_of =
        |bytes: &[u8], index: usize| bytes[index * block * size..][..block * size].to_vec();
    let input_bits = |from: usize| bits(&input(element_type, operation, from, len));
    match collective {
        Collective::Reduce { root, .. } | Collective::Gather { root } if rank != root => {
            from_bits(element_type, &[])
        }
        Collective::AllReduce(_) | Collective::Reduce { .. } => {
            kernel_reference(element_type, operation, world, len)
        }
        Collective::ReduceScatter(_) => {
            let all = bits(&kernel_reference(element_type, operation, world, len));
            from_bits(element_type, &block_of(&all, rank))
        }
        Collective::AllGather | Collective::Gather { .. } => {
            let gathered: Vec<u8> = (0..world).flat_map(input_bits).collect();
            from_bits(element_type, &gathered)
        }
        Collective::Broadcast { root } => input(element_type, operation, root, len),
        Collective::Scatter { root } => from_bits(element_type, &block_of(&input_bits(root), rank)),
        Collective::AllToAll => {
            let exchanged: Vec<u8> = (0..world)
                .flat_map(|from| block_of(&input_bits(from), rank))
                .collect();
            from_bits(element_type, &exchanged)
        }
        _ => panic!("no reference for {collective}"),
    }
}
