//! What a [`FaultyDevice`](super::FaultyDevice) injects, and when: fault specifications and
//! plans (a list of them, written by hand or drawn from a seed).

use super::FaultPoint;
use crate::rng::SplitMix64;
use ruccl_core::Plan;
use std::fmt;

/// What an injected fault does in a method that can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultAction {
    /// Return [`FaultyError::Injected`](super::FaultyError::Injected).
    Error,
    /// Panic.
    Panic,
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultAction::Error => "error",
            FaultAction::Panic => "panic",
        })
    }
}

/// Which device value panics when it is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropTarget {
    /// A rank's prepared input. `begin` takes the inputs and drops the decorator's wrappers
    /// first, in rank order, so an armed one panics inside `begin` — before a `begin` fault, and
    /// before the wrapped device sees the inputs; after an earlier failure (a mismatch, a
    /// `prepare` fault) the communicator drops it instead.
    Prepared,
    /// The generation's work. It is consumed by `finish`, so in a generation that gets that far
    /// the panic happens inside `finish`; after an earlier failure, where the communicator drops it.
    Work,
    /// A rank's output tensor, wherever it is dropped: by the communicator if it is never
    /// delivered, otherwise by the caller who received it.
    Output,
}

impl DropTarget {
    /// The value as an injected panic names it: `a prepared input`, `the work`, `an output`.
    pub fn victim(self) -> &'static str {
        match self {
            DropTarget::Prepared => "a prepared input",
            DropTarget::Work => "the work",
            DropTarget::Output => "an output",
        }
    }
}

impl fmt::Display for DropTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropTarget::Prepared => "prepared",
            DropTarget::Work => "work",
            DropTarget::Output => "output",
        })
    }
}

/// Where a fault strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultSite {
    /// `prepare`, on a rank's own thread.
    Prepare(FaultAction),
    /// `describe` of a rank's prepared input, on the rank's own thread. It cannot fail, so the
    /// fault is a panic; the communicator must still drop the prepared input.
    Describe,
    /// `begin`.
    Begin(FaultAction),
    /// `exchange` at step `step` of the generation's plan (`None`: the first step).
    Exchange {
        /// The step, `0..plan.steps().len()` (which depends on the collective, the algorithm,
        /// the world and the length); `None` matches every step, so the first one fails.
        step: Option<usize>,
        /// Error or panic.
        action: FaultAction,
    },
    /// `finish`, before the inner device's `finish` runs.
    Finish(FaultAction),
    /// `finish` returns `count` outputs instead of one per rank: the first `count` if fewer,
    /// padded with phantom tensors (that hold nothing) if more.
    Outputs {
        /// How many outputs to return.
        count: usize,
    },
    /// A device value panics in `Drop`.
    Drop(DropTarget),
}

impl FaultSite {
    /// The keyword that starts the site's text form.
    pub fn keyword(&self) -> &'static str {
        match self {
            FaultSite::Prepare(_) => "prepare",
            FaultSite::Describe => "describe",
            FaultSite::Begin(_) => "begin",
            FaultSite::Exchange { .. } => "exchange",
            FaultSite::Finish(_) => "finish",
            FaultSite::Outputs { .. } => "outputs",
            FaultSite::Drop(_) => "drop",
        }
    }

    /// The error-or-panic action of a site that has one (`prepare`, `begin`, `exchange`,
    /// `finish`; `describe`, which cannot fail, always panics).
    pub fn action(&self) -> Option<FaultAction> {
        match *self {
            FaultSite::Prepare(action)
            | FaultSite::Begin(action)
            | FaultSite::Finish(action)
            | FaultSite::Exchange { action, .. } => Some(action),
            FaultSite::Describe => Some(FaultAction::Panic),
            FaultSite::Outputs { .. } | FaultSite::Drop(_) => None,
        }
    }

    /// Whether an error-or-panic fault at this site strikes the call at `point`.
    pub fn strikes(&self, point: FaultPoint) -> bool {
        match (*self, point) {
            (FaultSite::Prepare(_), FaultPoint::Prepare)
            | (FaultSite::Describe, FaultPoint::Describe)
            | (FaultSite::Begin(_), FaultPoint::Begin)
            | (FaultSite::Finish(_), FaultPoint::Finish) => true,
            (FaultSite::Exchange { step, .. }, FaultPoint::Exchange { step: actual }) => {
                step.is_none_or(|step| step == actual)
            }
            _ => false,
        }
    }

    /// Whether the site belongs to one rank (`prepare`, `describe`, drops of a prepared input or
    /// an output):
    /// there `rank` selects which rank's call is hit. Elsewhere the call serves every rank at once
    /// and `rank` only names who the failure is attributed to.
    pub fn is_per_rank(&self) -> bool {
        matches!(
            self,
            FaultSite::Prepare(_)
                | FaultSite::Describe
                | FaultSite::Drop(DropTarget::Prepared | DropTarget::Output)
        )
    }

    /// Whether a `rank` can be given at all (not for `outputs` and `drop:what=work`).
    pub fn takes_rank(&self) -> bool {
        !matches!(
            self,
            FaultSite::Outputs { .. } | FaultSite::Drop(DropTarget::Work)
        )
    }
}

/// One fault: a site, and optionally the rank and generation it is limited to.
///
/// The text form (see [`FromStr`](std::str::FromStr)) is
/// `site[:what=W][:step=S][:count=C][:rank=R][:gen=G][:error|:panic]`, for example
/// `exchange:step=2:rank=1:gen=3:panic`, `prepare:rank=0:gen=1:error`, `finish:gen=2:panic`,
/// `describe:rank=1:gen=0:panic`,
/// `outputs:count=1:gen=0`, `drop:what=work:gen=4`.
///
/// A fault's generation is counted by the faulty device itself: a rank's `prepare` calls are
/// numbered 0, 1, 2, … per device, and `begin`, `exchange` and `finish` belong to the generation
/// rank 0's input was prepared in. For a communicator that is the communicator's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultSpec {
    /// Where it strikes.
    pub site: FaultSite,
    /// The rank (see [`FaultSite::is_per_rank`]); `None` for every rank. Ignored for a site
    /// that takes none ([`FaultSite::takes_rank`]), and then left out of the text form.
    pub rank: Option<usize>,
    /// The generation; `None` for every generation.
    pub generation: Option<u64>,
}

impl FaultSpec {
    /// A fault at `site` in every generation, on every rank.
    pub fn new(site: FaultSite) -> Self {
        Self {
            site,
            rank: None,
            generation: None,
        }
    }

    /// Limit the fault to `rank`.
    pub fn on_rank(mut self, rank: usize) -> Self {
        self.rank = Some(rank);
        self
    }

    /// Limit the fault to `generation`.
    pub fn in_generation(mut self, generation: u64) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Whether the fault applies to a call of `rank` in `generation`: the generation matches,
    /// and for a [per-rank](FaultSite::is_per_rank) site the rank does too (elsewhere the rank
    /// only names who the failure is attributed to).
    pub fn applies(&self, rank: Option<usize>, generation: u64) -> bool {
        let rank_matches = !self.site.is_per_rank() || self.rank.is_none() || self.rank == rank;
        rank_matches && self.generation.is_none_or(|wanted| wanted == generation)
    }
}

/// The faults a [`FaultyDevice`](super::FaultyDevice) injects. Where several match one call, the
/// first in the plan wins. The text form is the specs separated by commas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FaultPlan {
    specs: Vec<FaultSpec>,
}

/// The shape of a random plan: the faults it draws are placed within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandomPlan {
    /// The seed; one seed always gives the same plan.
    pub seed: u64,
    /// The number of ranks (ranks are drawn from `0..world`).
    pub world: usize,
    /// The number of exchange steps of the generations' plan (`plan.steps().len()`, which
    /// depends on the collective, the algorithm and the length): `exchange` steps are drawn from
    /// `0..steps`, and none at all when it is 0.
    pub steps: usize,
    /// Generations are drawn from `0..generations`.
    pub generations: u64,
    /// How many faults to draw.
    pub faults: usize,
}

impl RandomPlan {
    /// The shape for generations that all run `plan` (its world and its number of steps).
    pub fn for_plan(seed: u64, plan: &Plan, generations: u64, faults: usize) -> Self {
        Self {
            seed,
            world: plan.world(),
            steps: plan.steps().len(),
            generations,
            faults,
        }
    }
}

impl FaultPlan {
    /// A plan that injects nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// A plan of these faults.
    pub fn new(specs: Vec<FaultSpec>) -> Self {
        Self { specs }
    }

    /// Add a fault at the end (it loses to earlier ones matching the same call).
    pub fn with(mut self, spec: FaultSpec) -> Self {
        self.specs.push(spec);
        self
    }

    /// The faults, in priority order.
    pub fn specs(&self) -> &[FaultSpec] {
        &self.specs
    }

    /// Whether the plan injects nothing.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The spec that fires at a call of `rank` (`None`: a call that serves every rank) in
    /// `generation`, among those at a site `select` accepts: the first in the plan that
    /// [applies](FaultSpec::applies). The decorator and the [predictor](Self::predict) both
    /// decide through this.
    pub fn first(
        &self,
        rank: Option<usize>,
        generation: u64,
        select: impl Fn(&FaultSite) -> bool,
    ) -> Option<FaultSpec> {
        self.specs
            .iter()
            .find(|spec| select(&spec.site) && spec.applies(rank, generation))
            .copied()
    }

    /// A plan drawn from `shape.seed`: every fault has a concrete site, action, rank and
    /// generation (and step or count where the site needs one). Output counts never equal the
    /// world, and `exchange` is not drawn for a plan without steps.
    pub fn random(shape: RandomPlan) -> Self {
        let mut rng = SplitMix64::keyed(&[
            shape.seed,
            shape.world as u64,
            shape.steps as u64,
            shape.generations,
        ]);
        let world = shape.world.max(1);
        let steps = shape.steps;
        let specs = (0..shape.faults)
            .map(|_| {
                let action = if rng.coin() {
                    FaultAction::Error
                } else {
                    FaultAction::Panic
                };
                let kinds = if steps == 0 { 8 } else { 9 };
                let site = match rng.below(kinds) {
                    0 => FaultSite::Prepare(action),
                    1 => FaultSite::Begin(action),
                    2 => FaultSite::Finish(action),
                    3 => {
                        // Any count in 0..=world + 1 except world itself.
                        let count = rng.below(world as u64 + 1) as usize;
                        FaultSite::Outputs {
                            count: if count >= world { count + 1 } else { count },
                        }
                    }
                    4 => FaultSite::Drop(DropTarget::Prepared),
                    5 => FaultSite::Drop(DropTarget::Work),
                    6 => FaultSite::Drop(DropTarget::Output),
                    7 => FaultSite::Describe,
                    _ => FaultSite::Exchange {
                        step: Some(rng.below(steps as u64) as usize),
                        action,
                    },
                };
                FaultSpec {
                    site,
                    rank: site.takes_rank().then(|| rng.below(world as u64) as usize),
                    generation: Some(rng.below(shape.generations)),
                }
            })
            .collect();
        Self { specs }
    }
}
