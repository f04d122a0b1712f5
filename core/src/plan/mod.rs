//! Plans: one generation's buffer layout and schedule, as data.
//!
//! Every rank has one working buffer of [`Plan::buffer_len`] elements; rank `r`'s input starts
//! at [`Plan::placement`]`(r)` and its output is the range [`Plan::output`]`(r)` of its buffer once
//! every [`Step`] has run. A step is a set of [`Transfer`]s that happen at once: each reads its
//! range from the sender's buffer as it was *before* the step and delivers it to its target
//! range of the receiver's buffer, which either overwrites it or folds into it in the order the
//! contract fixes, so that all ranks' all-reduce outputs are the same bits. The rules are stated
//! once, in `step.rs` ([`Step::lay_out`]).
//!
//! | file                  | job                                                          |
//! |-----------------------|--------------------------------------------------------------|
//! | `mod.rs`              | [`Plan`], [`PlanParts`], resolution, [`TRAFFIC_BOUND`]       |
//! | `step.rs`             | [`Transfer`], [`Step`], a step's rules and [`StepLayout`]    |
//! | `layout.rs`           | buffer length, placements and outputs per collective         |
//! | `ring.rs`             | [`Algorithm::Ring`] for every collective                     |
//! | `direct.rs`           | [`Algorithm::Direct`] for every collective                   |
//! | `halving_doubling.rs` | [`Algorithm::HalvingDoubling`] for every collective          |
//!
//! Built-in plans are correct by construction, and the symbolic checker
//! [`verify`](crate::verify) proves it for every algorithm, collective and world up to 64 in the
//! crate's tests; a plan built from a user's own steps ([`Plan::from_parts`]) is verified before
//! it exists.

mod direct;
mod halving_doubling;
mod layout;
mod ring;
mod step;

use crate::error::NativeCollectiveError;
use crate::verify::{ScheduleViolation, verify};
use crate::{Algorithm, Collective, ElementType, LinkModel, TensorInfo};
use layout::Layout;
use std::ops::Range;
pub use step::{
    Clique, Operand, Piece, Source, Step, StepLayout, StepViolation, Transfer, Write, WriteKind,
};

impl Step {
    /// A step with the non-empty ones of `transfers`, or `None` if none is.
    fn of(combine: bool, transfers: impl IntoIterator<Item = Transfer>) -> Option<Step> {
        let transfers: Vec<Transfer> = transfers
            .into_iter()
            .filter(|transfer| !transfer.range.is_empty())
            .collect();
        (!transfers.is_empty()).then_some(Step { combine, transfers })
    }
}

/// One generation's verified layout and schedule.
///
/// ```
/// use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation, verify};
///
/// let plan = Plan::new(Collective::AllReduce(ReduceOperation::Sum), Algorithm::Ring, 4, 1000)?;
/// assert_eq!(plan.steps().len(), 6); // 2(W-1)
/// assert_eq!(plan.elements_sent_by(0), 1500); // 2(W-1)/W · n
/// assert!(verify(&plan).is_ok());
/// # Ok::<(), ruccl_core::NativeCollectiveError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    collective: Collective,
    /// Never `Auto`.
    algorithm: Algorithm,
    world: usize,
    input_len: usize,
    layout: Layout,
    steps: Vec<Step>,
}

/// The raw parts of a plan, for a schedule of one's own: build them, then
/// [`Plan::from_parts`] verifies them. [`Plan::into_parts`] gives a built-in plan's parts to
/// start from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanParts {
    /// The collective the schedule claims to compute.
    pub collective: Collective,
    /// The number of ranks.
    pub world: usize,
    /// Elements of every rank's input.
    pub input_len: usize,
    /// Elements of every rank's working buffer.
    pub buffer_len: usize,
    /// `placements[r]`: where rank `r`'s input starts in its buffer.
    pub placements: Vec<usize>,
    /// `outputs[r]`: the part of rank `r`'s buffer it receives.
    pub outputs: Vec<Range<usize>>,
    /// The schedule.
    pub steps: Vec<Step>,
}

impl Plan {
    /// The plan of `algorithm` for `collective` on `world` ranks with inputs of `input_len`
    /// elements. `Auto` resolves with the default [`LinkModel`] for 4-byte elements; see
    /// [`Plan::with_model`].
    ///
    /// Fails with [`NativeCollectiveError::InvalidCollective`] for an impossible request: an
    /// empty world, a root outside it, an input that must split into `W` equal blocks
    /// (reduce-scatter, scatter, all-to-all) and does not, halving-doubling on a world that is
    /// not a power of two, an algorithm that has no plan for the collective (ring and
    /// halving-doubling all-to-all), an algorithm none of whose schedules keeps its busiest
    /// rank within [`TRAFFIC_BOUND`] times the least traffic (the reason names the ratio and the
    /// better algorithm; [`Plan::with_model`] counts a clique its model fuses as that model
    /// moves it), or `Custom` (a custom plan is built with [`Plan::from_parts`]).
    pub fn new(
        collective: Collective,
        algorithm: Algorithm,
        world: usize,
        input_len: usize,
    ) -> Result<Plan, NativeCollectiveError> {
        let input = TensorInfo {
            len: input_len,
            element: ElementType::F32,
        };
        Plan::with_model(collective, algorithm, world, input, &LinkModel::default())
    }

    /// Like [`Plan::new`], resolving `Auto` to the built-in algorithm with the least modelled
    /// time under `model` for `input` (its length and element size); ties go to the earlier of
    /// [`Algorithm::BUILT_IN`].
    pub fn with_model(
        collective: Collective,
        algorithm: Algorithm,
        world: usize,
        input: TensorInfo,
        model: &LinkModel,
    ) -> Result<Plan, NativeCollectiveError> {
        let invalid = |reason: String| NativeCollectiveError::InvalidCollective {
            collective,
            algorithm,
            world,
            input_len: input.len,
            reason,
        };
        let layout = Layout::new(collective, world, input.len).map_err(invalid)?;
        let mut plans = Plan::bounded(collective, world, input, &layout, model).into_iter();
        match algorithm {
            Algorithm::Auto => {
                let mut best: Option<(f64, Plan)> = None;
                for plan in plans.filter_map(|(_, plan)| plan.ok()) {
                    let time = model.plan_time(&plan, input.element.size());
                    if best.as_ref().is_none_or(|(least, _)| time < *least) {
                        best = Some((time, plan));
                    }
                }
                // The plan that moves the least is within the bound, so one always exists.
                best.map(|(_, plan)| plan)
                    .ok_or_else(|| invalid("no algorithm can run it".to_owned()))
            }
            Algorithm::Custom => Err(invalid(
                "a custom plan is built with Plan::from_parts and run with run_plan".to_owned(),
            )),
            fixed => plans
                .find(|(candidate, _)| *candidate == fixed)
                .map_or_else(
                    || Err(format!("{fixed} is not a fixed built-in algorithm")),
                    |(_, plan)| plan,
                )
                .map_err(invalid),
        }
    }

    /// Every built-in algorithm's plan on a valid `layout`, in [`Algorithm::BUILT_IN`]'s order,
    /// or why it has none: of an algorithm's schedules ([`schedules`]) whose busiest rank moves
    /// at most [`TRAFFIC_BOUND`] times the least any schedule of any built-in algorithm moves
    /// ([`Plan::busiest_rank_elements`], but a step `model` runs as a fused clique counts each
    /// member's range once each way), the one with the least time under `model` for
    /// `input`'s elements (of equal times, the one with fewer steps). Only direct has more than
    /// one schedule: one step where latency dominates, two where bandwidth does.
    fn bounded(
        collective: Collective,
        world: usize,
        input: TensorInfo,
        layout: &Layout,
        model: &LinkModel,
    ) -> Vec<(Algorithm, Result<Plan, String>)> {
        let input_len = input.len;
        let schedules: Vec<_> = Algorithm::BUILT_IN
            .into_iter()
            .map(|algorithm| {
                let measured = schedules(collective, algorithm, world, input_len).map(|variants| {
                    variants
                        .into_iter()
                        .map(|steps| (busiest_rank_elements(&steps, world, model), steps))
                        .collect::<Vec<_>>()
                });
                (algorithm, measured)
            })
            .collect();
        let (better, least) = schedules
            .iter()
            .filter_map(|(algorithm, variants)| {
                let least = variants
                    .as_ref()
                    .ok()?
                    .iter()
                    .map(|(elements, _)| *elements);
                Some((*algorithm, least.min()?))
            })
            .min_by_key(|&(_, elements)| elements)
            .unwrap_or((Algorithm::Ring, 0));
        let bound = least.saturating_mul(TRAFFIC_BOUND);
        schedules
            .into_iter()
            .map(|(algorithm, variants)| {
                let plan = variants.and_then(|variants| {
                    let fewest = variants.iter().map(|(elements, _)| *elements).min();
                    let priced =
                        |steps: &[Step]| model.steps_time(steps, world, input.element.size());
                    let mut within = variants.into_iter().filter(|(e, _)| *e <= bound);
                    let chosen = within.next().map(|(_, first)| {
                        // Fewest steps first, so a tie keeps the earlier.
                        within.fold(first, |best, (_, steps)| {
                            if priced(&steps) < priced(&best) {
                                steps
                            } else {
                                best
                            }
                        })
                    });
                    let Some(steps) = chosen else {
                        let fewest = fewest.unwrap_or(0);
                        return Err(format!(
                            "its busiest rank would move {fewest} elements, {:.1}× the {least} \
                             of {better}; a plan moving more than {TRAFFIC_BOUND}× the least is \
                             refused: use {better}",
                            fewest as f64 / least as f64
                        ));
                    };
                    Ok(Plan {
                        collective,
                        algorithm,
                        world,
                        input_len,
                        layout: layout.clone(),
                        steps,
                    })
                });
                (algorithm, plan)
            })
            .collect()
    }

    /// A plan from a user's own layout and steps, with algorithm [`Algorithm::Custom`], after
    /// [`verify`] accepted it: a wrong schedule never becomes a plan.
    pub fn from_parts(parts: PlanParts) -> Result<Plan, ScheduleViolation> {
        let PlanParts {
            collective,
            world,
            input_len,
            buffer_len,
            placements,
            outputs,
            steps,
        } = parts;
        let plan = Plan {
            collective,
            algorithm: Algorithm::Custom,
            world,
            input_len,
            layout: Layout {
                buffer_len,
                placements,
                outputs,
            },
            steps,
        };
        verify(&plan)?;
        Ok(plan)
    }

    /// This plan with every element stretched to `factor` consecutive elements: inputs of
    /// `factor ×` the length, every range, landing offset, placement and output scaled by
    /// `factor`. Fails with [`NativeCollectiveError::InvalidCollective`] if a scaled length
    /// overflows, or for `factor` 0.
    ///
    /// It needs no new proof, which is what makes it cheap for plans too large to check element
    /// by element (an imported schedule at 64 MiB): every step moves and folds elements one by
    /// one, so element `i·k + r` of the scaled plan goes through exactly the transfers and folds
    /// element `i` goes through in this plan, with every input symbol `x[q][j]` replaced by
    /// `x[q][j·k + r]`. What each collective defines for an output element is block-affine in
    /// the same way (a reduction of index `e`; rank `e / n`'s element `e mod n`; block `r` of the
    /// root's or of every input), so the scaled plan meets its contract exactly when this one
    /// does, with the same fold trees on every rank — and this one was verified when it was
    /// built.
    ///
    /// ```
    /// use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation, verify};
    ///
    /// let plan = Plan::new(Collective::AllToAll, Algorithm::Direct, 4, 8)?;
    /// let wide = plan.scaled(1000)?;
    /// assert_eq!(wide.input_len(), 8000);
    /// assert_eq!(verify(&wide), Ok(()));
    /// # Ok::<(), ruccl_core::NativeCollectiveError>(())
    /// ```
    pub fn scaled(&self, factor: usize) -> Result<Plan, NativeCollectiveError> {
        let invalid = |reason: String| NativeCollectiveError::InvalidCollective {
            collective: self.collective,
            algorithm: self.algorithm,
            world: self.world,
            input_len: self.input_len,
            reason,
        };
        if factor == 0 {
            return Err(invalid("a plan cannot be scaled by 0".to_owned()));
        }
        let overflow = || invalid(format!("scaling by {factor} overflows the address space"));
        let times = |value: usize| value.checked_mul(factor).ok_or_else(overflow);
        let range = |range: &Range<usize>| {
            Ok::<_, NativeCollectiveError>(times(range.start)?..times(range.end)?)
        };
        let steps = self
            .steps
            .iter()
            .map(|step| {
                let transfers = step
                    .transfers
                    .iter()
                    .map(|transfer| {
                        Ok(Transfer {
                            from: transfer.from,
                            to: transfer.to,
                            range: range(&transfer.range)?,
                            at: times(transfer.at)?,
                        })
                    })
                    .collect::<Result<Vec<_>, NativeCollectiveError>>()?;
                Ok(Step {
                    combine: step.combine,
                    transfers,
                })
            })
            .collect::<Result<Vec<_>, NativeCollectiveError>>()?;
        Ok(Plan {
            collective: self.collective,
            algorithm: self.algorithm,
            world: self.world,
            input_len: times(self.input_len)?,
            layout: Layout {
                buffer_len: times(self.layout.buffer_len)?,
                placements: self
                    .layout
                    .placements
                    .iter()
                    .map(|&placement| times(placement))
                    .collect::<Result<_, _>>()?,
                outputs: self
                    .layout
                    .outputs
                    .iter()
                    .map(range)
                    .collect::<Result<_, _>>()?,
            },
            steps,
        })
    }

    /// The plan's parts, to inspect or to edit into a schedule of one's own.
    pub fn into_parts(self) -> PlanParts {
        PlanParts {
            collective: self.collective,
            world: self.world,
            input_len: self.input_len,
            buffer_len: self.layout.buffer_len,
            placements: self.layout.placements,
            outputs: self.layout.outputs,
            steps: self.steps,
        }
    }

    /// The collective this plan computes.
    pub fn collective(&self) -> Collective {
        self.collective
    }

    /// The algorithm, resolved: never `Auto`.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Elements of every rank's input.
    pub fn input_len(&self) -> usize {
        self.input_len
    }

    /// Elements of every rank's working buffer.
    pub fn buffer_len(&self) -> usize {
        self.layout.buffer_len
    }

    /// Elements of the largest output of any rank (the root's, for reduce and gather).
    pub fn output_len(&self) -> usize {
        self.layout
            .outputs
            .iter()
            .map(Range::len)
            .max()
            .unwrap_or(0)
    }

    /// Where rank `rank`'s input starts in its buffer (0 for a rank outside the world).
    pub fn placement(&self, rank: usize) -> usize {
        self.layout.placements.get(rank).copied().unwrap_or(0)
    }

    /// Every rank's placement, in rank order.
    pub fn placements(&self) -> &[usize] {
        &self.layout.placements
    }

    /// The part of rank `rank`'s buffer it receives (empty for a rank outside the world).
    pub fn output(&self, rank: usize) -> Range<usize> {
        self.layout.outputs.get(rank).cloned().unwrap_or(0..0)
    }

    /// Every rank's output range, in rank order.
    pub fn outputs(&self) -> &[Range<usize>] {
        &self.layout.outputs
    }

    /// The schedule.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Elements rank `rank` sends to other ranks over the whole schedule (local copies are not
    /// counted).
    pub fn elements_sent_by(&self, rank: usize) -> usize {
        self.transfers()
            .filter(|transfer| transfer.from == rank)
            .map(|transfer| transfer.range.len())
            .sum()
    }

    /// Elements rank `rank` receives from other ranks over the whole schedule.
    pub fn elements_received_by(&self, rank: usize) -> usize {
        self.transfers()
            .filter(|transfer| transfer.to == rank)
            .map(|transfer| transfer.range.len())
            .sum()
    }

    /// Elements all ranks send to other ranks over the whole schedule.
    pub fn elements_moved(&self) -> usize {
        self.transfers().map(|transfer| transfer.range.len()).sum()
    }

    /// The traffic of the plan's busiest rank: the most elements any one rank sends, or
    /// receives, to or from other ranks over the whole schedule — the measure
    /// [`TRAFFIC_BOUND`] holds every built-in plan to.
    ///
    /// ```
    /// use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation};
    ///
    /// let sum = Collective::AllReduce(ReduceOperation::Sum);
    /// let ring = Plan::new(sum, Algorithm::Ring, 4, 1000)?;
    /// assert_eq!(ring.busiest_rank_elements(), 1500); // 2(W-1)/W · n
    /// let direct = Plan::new(sum, Algorithm::Direct, 4, 1000)?;
    /// assert_eq!(direct.busiest_rank_elements(), 3000); // (W-1) · n: one step, within 3×
    /// # Ok::<(), ruccl_core::NativeCollectiveError>(())
    /// ```
    pub fn busiest_rank_elements(&self) -> usize {
        // The default model's links are per rank: it fuses no step.
        busiest_rank_elements(&self.steps, self.world, &LinkModel::default())
    }

    /// Every transfer between two ranks (local copies left out).
    fn transfers(&self) -> impl Iterator<Item = &Transfer> {
        self.steps
            .iter()
            .flat_map(|step| &step.transfers)
            .filter(|transfer| transfer.crosses_a_link())
    }
}

/// The schedules of a fixed built-in `algorithm` for a valid layout, fewest steps first (only
/// direct has more than one), or why it has none.
fn schedules(
    collective: Collective,
    algorithm: Algorithm,
    world: usize,
    input_len: usize,
) -> Result<Vec<Vec<Step>>, String> {
    if collective == Collective::AllToAll && algorithm != Algorithm::Direct {
        return Err(format!(
            "{algorithm} has no all-to-all plan: every block goes to its own rank, which only direct does in one step"
        ));
    }
    match algorithm {
        Algorithm::Ring => Ok(vec![ring::steps(collective, world, input_len)]),
        Algorithm::Direct => Ok(direct::variants(collective, world, input_len)),
        Algorithm::HalvingDoubling if !world.is_power_of_two() => Err(format!(
            "halving-doubling needs a power-of-two world, not {world} ranks"
        )),
        Algorithm::HalvingDoubling => {
            Ok(vec![halving_doubling::steps(collective, world, input_len)])
        }
        Algorithm::Auto | Algorithm::Custom => {
            Err(format!("{algorithm} is not a fixed built-in algorithm"))
        }
    }
}

/// How many times the least traffic of any built-in plan for the same collective, world and
/// length a built-in plan may move through its busiest rank
/// ([`Plan::busiest_rank_elements`]). Every algorithm builds a schedule within it — of
/// several (only [`Algorithm::Direct`] has two), the one with the least modelled time — and is
/// refused with [`NativeCollectiveError::InvalidCollective`] where none is, so `Auto` never
/// runs such a plan. The crate's tests check every collective, algorithm, world up to 16 and edge length:
/// the ring is never refused there.
///
/// Why 3: a step saved is worth a few latencies, bytes cost time in proportion, so a plan may
/// trade some bytes for fewer steps but not without limit. One-step direct all-reduce moves
/// `(W-1)·n` against the ring's `2(W-1)/W·n`, `W/2` times as much: at 3 its one step stays
/// possible up to six ranks, where it wins small sizes, and from seven ranks only the two-step
/// variant is (`n + (W-2)·⌈n/W⌉`, the ring's figure when `W` divides `n`), which the model
/// prefers at large sizes from three ranks anyway; unbounded, the one step at eight ranks moved
/// four times the ring's bytes at every size. A model that runs a clique as one fold stored on
/// every member ([`LinkModel::with_fused_cliques`], the simulated device's) is held to what that
/// moves: each member's range once each way, `n` per rank, the least of any all-reduce, so the
/// one step stays possible there at every world. What is refused is
/// tensors of a few elements on many ranks, where no chunking spreads the load: direct
/// all-reduce, broadcast and reduce of up to about `W/5` elements (from eight, six and five
/// ranks up: one element there), and halving-doubling broadcast and reduce of one to three
/// elements from 16 ranks up (a binomial tree sends them `log₂ W` times from one rank, the ring
/// once).
pub const TRAFFIC_BOUND: usize = 3;

/// The most elements any one of `world` ranks sends, or receives, to or from other ranks over
/// `steps` (local copies left out) — except that a step `model` runs as one fused clique
/// ([`LinkModel::with_fused_cliques`]) counts the clique's range once sent and once received
/// by each member (its memory read once and written once), not the pairs' transfers.
fn busiest_rank_elements(steps: &[Step], world: usize, model: &LinkModel) -> usize {
    let mut sent = vec![0usize; world];
    let mut received = vec![0usize; world];
    let mut count = |from: usize, to: usize, len: usize| {
        if let Some(elements) = sent.get_mut(from) {
            *elements += len;
        }
        if let Some(elements) = received.get_mut(to) {
            *elements += len;
        }
    };
    for step in steps {
        if let Some(clique) = model.fused_clique(step) {
            for &rank in &clique.ranks {
                count(rank, rank, clique.range.len());
            }
            continue;
        }
        for transfer in step
            .transfers
            .iter()
            .filter(|transfer| transfer.crosses_a_link())
        {
            count(transfer.from, transfer.to, transfer.range.len());
        }
    }
    sent.into_iter().chain(received).max().unwrap_or(0)
}

/// Block `index` of `blocks` blocks of `size` elements.
fn block(index: usize, size: usize) -> Range<usize> {
    index * size..(index + 1) * size
}

/// The elements of consecutive `chunks[first..last]` (which tile a range), as one range.
fn span(chunks: &[Range<usize>], first: usize, last: usize) -> Range<usize> {
    match (
        chunks.get(first),
        last.checked_sub(1).and_then(|end| chunks.get(end)),
    ) {
        (Some(start), Some(end)) if first < last => start.start..end.end,
        _ => 0..0,
    }
}
