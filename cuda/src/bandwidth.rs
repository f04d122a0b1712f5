//! [`CudaCollective::copy_bandwidth`]: a GPU's own device-to-device copy bandwidth, measured on
//! the executor's stream — the baseline the perf tool puts next to a collective's bus bandwidth
//! in the same run.

use crate::buffer::copy_async;
use crate::context::{SavedContext, complete};
use crate::device::CudaCollective;
use crate::error::{CudaError, DriverResultExt, Result};
use cudarc::driver::sys::CUevent_flags;

/// One measurement of device-to-device copy bandwidth on one GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct CopyBandwidth {
    /// The GPU ordinal.
    pub gpu: usize,
    /// Bytes per copy.
    pub bytes: usize,
    /// Timed copies.
    pub iterations: u32,
    /// Seconds for all timed copies, between two events on the stream.
    pub seconds: f64,
}

impl CopyBandwidth {
    /// Bytes copied per second (each copy reads and writes `bytes`; like nccl-tests' algbw, the
    /// figure counts them once).
    pub fn bytes_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * f64::from(self.iterations) / self.seconds
        } else {
            0.0
        }
    }

    /// [`CopyBandwidth::bytes_per_second`] in GB/s (10⁹ bytes).
    pub fn gb_per_second(&self) -> f64 {
        self.bytes_per_second() / 1e9
    }
}

impl CudaCollective {
    /// Measure GPU `gpu`'s device-to-device copy bandwidth: `iterations` copies of `bytes` bytes
    /// (each at least 1) between two buffers of the first logical device on that GPU, after one
    /// untimed copy, timed by two events on its stream. The buffers come from that device's
    /// cache and go back to it. [`CudaError::UnknownGpu`] when no logical device runs there.
    pub fn copy_bandwidth(
        &self,
        gpu: usize,
        bytes: usize,
        iterations: u32,
    ) -> Result<CopyBandwidth> {
        let (bytes, iterations) = (bytes.max(1), iterations.max(1));
        let lane = self
            .lanes()
            .find(|lane| lane.ordinal == gpu)
            .ok_or(CudaError::UnknownGpu { ordinal: gpu })?;
        let (stream, device) = (&lane.stream, lane.device);
        let _restore = SavedContext::save();
        let source = lane.take_buffer(bytes)?;
        let target = lane.take_buffer(bytes)?;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = lane
            .context()
            .new_event(timing)
            .during("cuEventCreate", Some(device))?;
        let end = lane
            .context()
            .new_event(timing)
            .during("cuEventCreate", Some(device))?;
        let copy = || {
            // SAFETY: two distinct buffers of this lane, each of `bytes` bytes (checked by
            // `copy_async`), used only on this lane's stream, and kept until it is complete
            // below. Their contents are never read back: only the copy's duration matters.
            unsafe { copy_async((&target, 0), (&source, 0), bytes, stream, device) }
        };
        copy()?;
        start
            .record(stream)
            .during("cuEventRecord (start)", Some(device))?;
        for _ in 0..iterations {
            copy()?;
        }
        end.record(stream)
            .during("cuEventRecord (end)", Some(device))?;
        complete(stream).into_result(device)?;
        let milliseconds = start
            .elapsed_ms(&end)
            .during("cuEventElapsedTime", Some(device))?;
        Ok(CopyBandwidth {
            gpu,
            bytes,
            iterations,
            seconds: f64::from(milliseconds) / 1e3,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_counts_every_timed_copy_once() {
        let measured = CopyBandwidth {
            gpu: 0,
            bytes: 1 << 30,
            iterations: 4,
            seconds: 2e-3,
        };
        assert_eq!(
            measured.bytes_per_second(),
            4.0 * (1u64 << 30) as f64 / 2e-3
        );
        assert!((measured.gb_per_second() - 2147.483648).abs() < 1e-6);
        let instant = CopyBandwidth {
            seconds: 0.0,
            ..measured
        };
        assert_eq!(instant.bytes_per_second(), 0.0);
    }
}
