//! The α–β (latency–bandwidth) model that prices a [`Plan`] from its own transfers, and so
//! resolves [`Algorithm::Auto`](crate::Algorithm::Auto).
//!
//! A step costs `α + b/β`, where `b` is the bytes on the step's busiest link; a plan costs the sum
//! of its steps (every step pays `α`: it is a synchronisation, even with little data). What a
//! "link" is depends on the machine, [`Links`]:
//!
//! - [`Links::PerRank`]: every rank has one port to the fabric, full duplex (a GPU's NVLink or
//!   PCIe port). `b` is the most any one rank sends, or receives, in the step. One step of direct
//!   all-reduce then costs `α + (W-1)·n·s/β` and the ring `2(W-1)·(α + n·s/(W·β))`: direct wins
//!   for small messages, ring and halving-doubling for large ones.
//! - [`Links::Shared`]: every transfer crosses one shared memory system (ranks simulated in host
//!   memory). `b` is the step's total, plus the elements the step copies aside because it
//!   overwrites their sender's buffer in the same step ([`Step::copied_aside`]): through one
//!   memory system, that copy costs as much as a transfer. One step of direct all-reduce then
//!   moves `W·n` elements more than its transfers, which makes it lose to the ring and
//!   halving-doubling from a few hundred bytes on a shared link.

use crate::{Plan, Step};

/// What one step's busiest link carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Links {
    /// One full-duplex port per rank: the most bytes one rank sends or receives.
    #[default]
    PerRank,
    /// One link shared by every transfer: the step's total bytes, copies aside included.
    Shared,
}

/// The α–β link model: per-step latency `α` (seconds), bandwidth `β` (bytes per second) of the
/// busiest link, and what a link is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkModel {
    alpha: f64,
    beta: f64,
    links: Links,
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

impl Default for LinkModel {
    /// A PCIe-class machine: `α` = 2 µs per step, `β` = 24 GB/s per rank's port.
    fn default() -> Self {
        Self {
            alpha: 2e-6,
            beta: 24e9,
            links: Links::PerRank,
        }
    }
}

impl LinkModel {
    /// A model with per-step latency `alpha` seconds and bandwidth `beta` bytes per second on
    /// each of `links`.
    pub fn new(alpha: f64, beta: f64, links: Links) -> Result<Self, LinkModelError> {
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(LinkModelError::Latency(alpha));
        }
        if !(beta.is_finite() && beta > 0.0) {
            return Err(LinkModelError::Bandwidth(beta));
        }
        Ok(Self { alpha, beta, links })
    }

    /// α, seconds per step.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// β, bytes per second on a link.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// What a link is.
    pub fn links(&self) -> Links {
        self.links
    }

    /// The time of a step whose busiest link carries `bytes`: `α + bytes/β` seconds.
    pub fn step_time(&self, bytes: u64) -> f64 {
        self.alpha + bytes as f64 / self.beta
    }

    /// The elements on the busiest link of `step`, among `world` ranks (see [`Links`]).
    pub fn busiest_elements(&self, step: &Step, world: usize) -> usize {
        match self.links {
            Links::Shared => {
                let moved: usize = step
                    .transfers
                    .iter()
                    .map(|transfer| transfer.range.len())
                    .sum();
                moved + step.copied_aside()
            }
            Links::PerRank => {
                let mut sent = vec![0usize; world];
                let mut received = vec![0usize; world];
                for transfer in &step.transfers {
                    if let Some(count) = sent.get_mut(transfer.from) {
                        *count += transfer.range.len();
                    }
                    if let Some(count) = received.get_mut(transfer.to) {
                        *count += transfer.range.len();
                    }
                }
                sent.into_iter().chain(received).max().unwrap_or(0)
            }
        }
    }

    /// The modelled time of `plan` for elements of `element_size` bytes, in seconds.
    pub fn plan_time(&self, plan: &Plan, element_size: usize) -> f64 {
        plan.steps()
            .iter()
            .map(|step| {
                let elements = self.busiest_elements(step, plan.world());
                self.step_time(elements.saturating_mul(element_size) as u64)
            })
            .sum()
    }
}
