//! [`PerfRow`]: one measured message size, with nccl-tests' bandwidth definitions.

use ruccl_core::{ElementType, ReduceOperation};

/// One measured message size.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfRow {
    /// Bytes per rank.
    pub bytes: usize,
    /// Elements per rank.
    pub count: usize,
    /// The element type.
    pub element_type: ElementType,
    /// The reduction.
    pub operation: ReduceOperation,
    /// The number of ranks.
    pub world: usize,
    /// Mean time of one all-reduce, in microseconds.
    pub time_us: f64,
    /// Elements, over all ranks, that differ from the reference (`None`: not checked).
    pub wrong: Option<u64>,
    /// The most any rank sent over the all-reduce lower bound `2(W-1)/W · n`, from the traffic
    /// ledger (`None`: no ledger, or a bound of zero).
    pub traffic_ratio: Option<f64>,
    /// The link model's time for the generation's traffic, in microseconds.
    pub model_us: f64,
}

/// nccl-tests' all-reduce bus factor, `2(W-1)/W` (0 for a world of one, which moves nothing).
pub fn bus_factor(world: usize) -> f64 {
    if world == 0 {
        return 0.0;
    }
    2.0 * (world - 1) as f64 / world as f64
}

impl PerfRow {
    /// Algorithm bandwidth, `bytes / time`, in GB/s (10⁹ bytes per second).
    pub fn algbw(&self) -> f64 {
        if self.time_us > 0.0 {
            self.bytes as f64 / self.time_us / 1e3
        } else {
            0.0
        }
    }

    /// Bus bandwidth, `algbw · 2(W-1)/W`, in GB/s.
    pub fn busbw(&self) -> f64 {
        self.algbw() * bus_factor(self.world)
    }
}
