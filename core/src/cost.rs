//! The α–β (latency–bandwidth) model that prices a [`Plan`] from its own transfers, and so
//! resolves [`Algorithm::Auto`](crate::Algorithm::Auto).
//!
//! A step costs `α + γ·k + b/β`, where `b` is the bytes and `k` the transfers on the step's busiest
//! link; a plan costs the sum of its steps (every step pays `α`: it is a synchronisation, even
//! with little data). `γ`, the fixed cost of one transfer (a copy issued, a loop started), is 0
//! unless a device sets it ([`LinkModel::with_transfer_cost`]): then, of two plans that move the
//! same bytes in the same number of steps, the one with fewer, larger transfers is cheaper. What a
//! "link" is depends on the machine, [`Links`]:
//!
//! - [`Links::PerRank`]: every rank has one port to the fabric, full duplex (a GPU's NVLink or
//!   PCIe port). `b` is the most any one rank sends, or receives, in the step, and `k` the most
//!   transfers one rank sends or receives. One step of direct
//!   all-reduce then costs `α + (W-1)·n·s/β` and the ring `2(W-1)·(α + n·s/(W·β))`: direct wins
//!   for small messages, ring and halving-doubling for large ones.
//! - [`Links::Shared`]: every transfer crosses one shared memory system (ranks simulated in host
//!   memory). `b` is the step's total, plus the elements the step copies aside because it
//!   overwrites their sender's buffer in the same step ([`Step::copied_aside`]): through one
//!   memory system, that copy costs as much as a transfer, so `k` counts every non-empty
//!   transfer of the step and every range copied aside. One step of direct all-reduce then
//!   moves `W·n` elements more than its transfers, which makes it lose to the ring and
//!   halving-doubling from a few hundred bytes on a shared link. A combining step also reads
//!   and writes the receivers' elements it folds into, once each however many senders fold
//!   into them ([`Step::folded_elements`]), so `b` counts those too: a reduce-scatter that folds
//!   all `W-1` senders into a rank's shard in one step crosses the memory system less than one
//!   that folds them in over `W-1` steps (or `log₂ W`, shard halves each time), although their
//!   transfers carry the same bytes.
//!
//! A local copy (a self-transfer, contract v3) uses no rank's port on [`Links::PerRank`], and
//! crosses the memory system like any transfer on [`Links::Shared`].

use crate::{Clique, Plan, Step};

/// What one step's busiest link carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Links {
    /// One full-duplex port per rank: the most bytes one rank sends or receives.
    #[default]
    PerRank,
    /// One link shared by every transfer: the step's total bytes, copies aside and the
    /// receivers' elements a combining step folds into included.
    Shared,
}

/// The α–β link model: per-step latency `α` (seconds), bandwidth `β` (bytes per second) of the
/// busiest link, per-transfer cost `γ` (seconds, 0 by default), and what a link is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkModel {
    alpha: f64,
    beta: f64,
    transfer_cost: f64,
    links: Links,
    fused_cliques: bool,
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
    /// γ is negative, infinite or NaN.
    #[error("per-transfer cost γ must be finite and non-negative, got {0} s")]
    TransferCost(f64),
}

impl Default for LinkModel {
    /// A PCIe-class machine: `α` = 2 µs per step, `β` = 24 GB/s per rank's port.
    fn default() -> Self {
        Self {
            alpha: 2e-6,
            beta: 24e9,
            transfer_cost: 0.0,
            links: Links::PerRank,
            fused_cliques: false,
        }
    }
}

impl LinkModel {
    /// A model with per-step latency `alpha` seconds and bandwidth `beta` bytes per second on
    /// each of `links`, and no per-transfer cost.
    pub fn new(alpha: f64, beta: f64, links: Links) -> Result<Self, LinkModelError> {
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(LinkModelError::Latency(alpha));
        }
        if !(beta.is_finite() && beta > 0.0) {
            return Err(LinkModelError::Bandwidth(beta));
        }
        Ok(Self {
            alpha,
            beta,
            transfer_cost: 0.0,
            links,
            fused_cliques: false,
        })
    }

    /// The same model with a fixed cost of `seconds` per transfer on the busiest link (`γ`).
    ///
    /// ```
    /// use ruccl_core::{LinkModel, Links};
    ///
    /// let model = LinkModel::new(1e-6, 1e9, Links::Shared)?.with_transfer_cost(0.1e-6)?;
    /// // One step, three transfers, a kilobyte: 1 µs + 3 · 0.1 µs + 1 µs.
    /// assert!((model.step_time(3, 1000) - 2.3e-6).abs() < 1e-12);
    /// assert!(model.with_transfer_cost(-1.0).is_err());
    /// # Ok::<(), ruccl_core::LinkModelError>(())
    /// ```
    pub fn with_transfer_cost(self, seconds: f64) -> Result<Self, LinkModelError> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(LinkModelError::TransferCost(seconds));
        }
        Ok(Self {
            transfer_cost: seconds,
            ..self
        })
    }

    /// α, seconds per step.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// β, bytes per second on a link.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// γ, seconds per transfer on a link.
    pub fn transfer_cost(&self) -> f64 {
        self.transfer_cost
    }

    /// The same model for a device that runs a [clique](Step::clique) as one fold stored on
    /// every rank of the group, on a [shared](Links::Shared) link: such a step costs one
    /// transfer per rank of the group and its range once per rank (each rank's elements read
    /// once and written once), instead of every pair's transfer, the copies aside and the
    /// folds. No effect on per-rank links, where the pairs' transfers cross the links anyway.
    pub fn with_fused_cliques(self) -> Self {
        Self {
            fused_cliques: true,
            ..self
        }
    }

    /// Whether [`with_fused_cliques`](Self::with_fused_cliques) holds.
    pub fn fuses_cliques(&self) -> bool {
        self.fused_cliques
    }

    /// The clique `step` is, where this model runs it fused (a [shared](Links::Shared) link
    /// and [`with_fused_cliques`](Self::with_fused_cliques)); `None` elsewhere.
    pub(crate) fn fused_clique(&self, step: &Step) -> Option<Clique> {
        (self.fused_cliques && self.links == Links::Shared)
            .then(|| step.clique())
            .flatten()
    }

    /// What a link is.
    pub fn links(&self) -> Links {
        self.links
    }

    /// The time of a step whose busiest link carries `transfers` transfers and `bytes` bytes:
    /// `α + γ·transfers + bytes/β` seconds.
    pub fn step_time(&self, transfers: usize, bytes: u64) -> f64 {
        self.alpha + self.transfer_cost * transfers as f64 + bytes as f64 / self.beta
    }

    /// The transfers on the busiest link of `step`, among `world` ranks (see [`Links`]): the
    /// non-empty transfers and the ranges copied aside on a shared link, the most non-empty
    /// transfers one rank sends or receives on per-rank links.
    pub fn busiest_transfers(&self, step: &Step, world: usize) -> usize {
        self.busiest(step, world).0
    }

    /// The elements on the busiest link of `step`, among `world` ranks (see [`Links`]).
    pub fn busiest_elements(&self, step: &Step, world: usize) -> usize {
        self.busiest(step, world).1
    }

    /// `(transfers, elements)` on the busiest link of `step`: on per-rank links each is the most
    /// one rank sends or receives (not necessarily the same rank's).
    fn busiest(&self, step: &Step, world: usize) -> (usize, usize) {
        let moving = step
            .transfers
            .iter()
            .filter(|transfer| !transfer.range.is_empty());
        match self.links {
            Links::Shared => {
                if let Some(clique) = self.fused_clique(step) {
                    let ranks = clique.ranks.len();
                    return (ranks, ranks.saturating_mul(clique.range.len()));
                }
                let aside = step.overwritten_sources();
                let ranges = moving
                    .map(|transfer| &transfer.range)
                    .chain(aside.iter().map(|(_, range)| range))
                    .filter(|range| !range.is_empty());
                let (transfers, elements) = ranges.fold((0, 0), |(transfers, elements), range| {
                    (transfers + 1, elements + range.len())
                });
                (transfers, elements + step.folded_elements())
            }
            Links::PerRank => {
                // Per rank: (transfers, elements) sent, then received; a local copy uses no link.
                let mut sent = vec![(0usize, 0usize); world];
                let mut received = vec![(0usize, 0usize); world];
                for transfer in moving.filter(|transfer| transfer.crosses_a_link()) {
                    let len = transfer.range.len();
                    for (tally, rank) in [(&mut sent, transfer.from), (&mut received, transfer.to)]
                    {
                        if let Some((count, elements)) = tally.get_mut(rank) {
                            *count += 1;
                            *elements += len;
                        }
                    }
                }
                let all = || sent.iter().chain(&received);
                (
                    all().map(|&(count, _)| count).max().unwrap_or(0),
                    all().map(|&(_, elements)| elements).max().unwrap_or(0),
                )
            }
        }
    }

    /// The modelled time of `plan` for elements of `element_size` bytes, in seconds.
    pub fn plan_time(&self, plan: &Plan, element_size: usize) -> f64 {
        self.steps_time(plan.steps(), plan.world(), element_size)
    }

    /// The modelled time of `steps` among `world` ranks for elements of `element_size` bytes.
    pub(crate) fn steps_time(&self, steps: &[Step], world: usize, element_size: usize) -> f64 {
        steps
            .iter()
            .map(|step| {
                let (transfers, elements) = self.busiest(step, world);
                self.step_time(transfers, elements.saturating_mul(element_size) as u64)
            })
            .sum()
    }
}
