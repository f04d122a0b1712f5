//! Timing the executor's all-reduce through the real communicator, one thread per rank.
//!
//! Per message size: every rank uploads [`rank_values`](super::rank_values()), runs one checked
//! all-reduce (its download against the reference gives `#wrong`), then `warmup` untimed and
//! `iterations` timed all-reduces, each feeding its output back as the next input (no host copy
//! in the loop). `time` is the wall-clock span of the timed loop, between two barriers shared by
//! all ranks, divided by `iterations`; `finish` completes the streams, so it covers the GPU work.

use super::pattern::{count_wrong, expected_values, rank_values};
use super::table::PerfRow;
use crate::{CudaCollective, CudaError, CudaTensor};
use ruccl_core::{DeviceId, NativeCollectiveError, NativeCommunicator, ReduceOperation};
use ruccl_sim::host::{ElementType, HostTensors};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// What to sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepConfig {
    /// The smallest message, in bytes per rank.
    pub min_bytes: usize,
    /// The largest message, in bytes per rank.
    pub max_bytes: usize,
    /// Each size is the previous one times this (at least 2).
    pub step_factor: usize,
    /// Timed all-reduces per size.
    pub iterations: usize,
    /// Untimed all-reduces per size before timing.
    pub warmup: usize,
    /// The element type.
    pub element_type: ElementType,
    /// The reduction.
    pub operation: ReduceOperation,
    /// A rank that waits longer than this for the others fails (so a broken rank cannot hang
    /// the sweep).
    pub timeout: Duration,
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            min_bytes: 1 << 10,
            max_bytes: 1 << 28,
            step_factor: 4,
            iterations: 20,
            warmup: 5,
            element_type: ElementType::F32,
            operation: ReduceOperation::Sum,
            timeout: Duration::from_secs(120),
        }
    }
}

impl SweepConfig {
    /// The message sizes, in bytes, each a whole number of elements (at least one).
    pub fn sizes(&self) -> Vec<usize> {
        let size = self.element_type.size();
        let factor = self.step_factor.max(2);
        let mut sizes = Vec::new();
        let mut bytes = self.min_bytes.max(size);
        while bytes <= self.max_bytes {
            let whole = bytes / size * size;
            if sizes.last() != Some(&whole) {
                sizes.push(whole);
            }
            match bytes.checked_mul(factor) {
                Some(next) => bytes = next,
                None => break,
            }
        }
        sizes
    }
}

/// A failed measurement.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The executor failed (upload, download, construction).
    #[error(transparent)]
    Device(#[from] CudaError),
    /// The communicator failed (the message includes the device's error).
    #[error(transparent)]
    Collective(#[from] NativeCollectiveError),
    /// A rank's thread panicked.
    #[error("rank {rank}'s thread panicked")]
    Panicked {
        /// The rank.
        rank: usize,
    },
}

/// Measure one message size of `bytes` per rank over `communicator` (whose devices are
/// `device`'s, in rank order).
pub fn measure(
    device: &CudaCollective,
    communicator: &NativeCommunicator<CudaCollective>,
    config: &SweepConfig,
    bytes: usize,
) -> Result<PerfRow, SweepError> {
    let world = communicator.world_size();
    let count = bytes / config.element_type.size();
    let barrier = Barrier::new(world + 1);
    let (elapsed, results) = std::thread::scope(|scope| {
        let handles: Vec<_> = communicator
            .devices()
            .iter()
            .enumerate()
            .map(|(rank, &id)| {
                let barrier = &barrier;
                scope
                    .spawn(move || run_rank(device, communicator, config, rank, id, count, barrier))
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        let elapsed = start.elapsed();
        let results: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| handle.join().unwrap_or(Err(SweepError::Panicked { rank })))
            .collect();
        (elapsed, results)
    });
    let mut wrong = 0;
    for result in results {
        wrong += result?;
    }
    Ok(PerfRow {
        bytes: count * config.element_type.size(),
        count,
        element_type: config.element_type,
        operation: config.operation,
        world,
        time_us: elapsed.as_secs_f64() * 1e6 / config.iterations.max(1) as f64,
        wrong,
    })
}

/// One rank's part: check, warm up, then the timed loop between the two barriers. Always reaches
/// both barriers, even after a failure (which also aborts the communicator, so the other ranks
/// fail fast instead of waiting for it).
fn run_rank(
    device: &CudaCollective,
    communicator: &NativeCommunicator<CudaCollective>,
    config: &SweepConfig,
    rank: usize,
    id: DeviceId,
    count: usize,
    barrier: &Barrier,
) -> Result<usize, SweepError> {
    let world = communicator.world_size();
    let (element_type, operation) = (config.element_type, config.operation);
    let reduce = |tensor: CudaTensor| -> Result<CudaTensor, SweepError> {
        Ok(communicator.all_reduce_timeout(rank, tensor, operation, config.timeout)?)
    };
    let abort_on_error = |error: SweepError| {
        communicator.abort(format!("perf sweep: rank {rank} failed: {error}"));
        error
    };
    let checked = (|| {
        let input = device.upload(id, &rank_values(element_type, operation, rank, count))?;
        let output = reduce(input)?;
        let expected = expected_values(element_type, operation, world, count);
        let wrong = count_wrong(&device.download(&output)?, &expected);
        let mut tensor = output;
        for _ in 0..config.warmup {
            tensor = reduce(tensor)?;
        }
        Ok((tensor, wrong))
    })()
    .map_err(abort_on_error);
    barrier.wait();
    let timed = checked.and_then(|(mut tensor, wrong)| {
        for _ in 0..config.iterations {
            tensor = reduce(tensor).map_err(abort_on_error)?;
        }
        Ok(wrong)
    });
    barrier.wait();
    timed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_grow_by_the_factor_and_hold_whole_elements() {
        let config = SweepConfig {
            min_bytes: 6,
            max_bytes: 200,
            step_factor: 4,
            element_type: ElementType::F64,
            ..SweepConfig::default()
        };
        assert_eq!(config.sizes(), vec![8, 32, 128]);
    }

    #[test]
    fn a_step_factor_below_two_still_terminates() {
        let config = SweepConfig {
            min_bytes: 4,
            max_bytes: 64,
            step_factor: 1,
            ..SweepConfig::default()
        };
        assert_eq!(config.sizes(), vec![4, 8, 16, 32, 64]);
    }

    #[test]
    fn the_default_sweep_spans_one_kib_to_256_mib() {
        let sizes = SweepConfig::default().sizes();
        assert_eq!(sizes.first(), Some(&1024));
        assert_eq!(sizes.last(), Some(&(256 << 20)));
    }
}
