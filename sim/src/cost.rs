//! The α–β (latency–bandwidth) link model: a step in which every rank sends to its successor at
//! once costs `α + b/β`, where `b` is the most bytes any one link carries in that step; a
//! generation costs the sum of its steps.
//!
//! For the ring all-reduce of `n` elements of `size` bytes over `W` ranks that gives the closed
//! form `2(W-1)(α + n·size/(W·β))` exactly when `W` divides `n`. Otherwise the largest chunk has
//! `⌈n/W⌉` elements and every step waits for it, so the priced time is
//! `2(W-1)(α + ⌈n/W⌉·size/β)`: above the closed form by less than `2(W-1)·size/β`. Every step
//! pays `α`, even one whose ranges are all empty (`n < W`): it is still a synchronisation.

use crate::ledger::GenerationTraffic;
use ruccl_core::RingSchedule;

/// Parameters of the α–β link model. Times are in seconds, bandwidth in bytes per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkModel {
    alpha: f64,
    beta: f64,
}

/// Parameters that make no link model.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkModelError {
    /// α is negative, infinite or NaN.
    #[error("link latency α must be finite and non-negative, got {0} s")]
    Latency(f64),
    /// β is not positive, infinite or NaN.
    #[error("link bandwidth β must be finite and positive, got {0} B/s")]
    Bandwidth(f64),
}

impl LinkModel {
    /// A model with per-step latency `alpha` seconds and per-link bandwidth `beta` bytes/second.
    pub fn new(alpha: f64, beta: f64) -> Result<Self, LinkModelError> {
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(LinkModelError::Latency(alpha));
        }
        if !(beta.is_finite() && beta > 0.0) {
            return Err(LinkModelError::Bandwidth(beta));
        }
        Ok(Self { alpha, beta })
    }

    /// α, seconds per step.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// β, bytes per second per link.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// One step whose busiest link carries `bytes`: `α + bytes/β` seconds.
    pub fn step_time(&self, bytes: u64) -> f64 {
        self.alpha + bytes as f64 / self.beta
    }

    /// The time of a recorded generation: each step waits for its busiest link.
    pub fn price_traffic(&self, traffic: &GenerationTraffic) -> f64 {
        let size = traffic.element_type.size() as u64;
        traffic
            .steps
            .iter()
            .map(|step| self.step_time(step.max_link_elements() as u64 * size))
            .sum()
    }

    /// The time of a schedule, without running it, for elements of `element_size` bytes.
    pub fn price_schedule(&self, schedule: &RingSchedule, element_size: usize) -> f64 {
        schedule
            .steps()
            .map(|step| {
                let busiest = step.ranges.iter().map(|range| range.len()).max();
                self.step_time((busiest.unwrap_or(0) * element_size) as u64)
            })
            .sum()
    }

    /// The closed form for a ring all-reduce, `2(W-1)(α + n·size/(W·β))` seconds (0 for `W ≤ 1`).
    pub fn ring_closed_form(&self, world: usize, length: usize, element_size: usize) -> f64 {
        if world <= 1 {
            return 0.0;
        }
        let steps = 2.0 * (world - 1) as f64;
        let bytes_per_step = length as f64 * element_size as f64 / world as f64;
        steps * (self.alpha + bytes_per_step / self.beta)
    }
}
