//! Plans: one generation's buffer layout and schedule, as data.
//!
//! Every rank has one working buffer of [`Plan::buffer_len`] elements; rank `r`'s input starts
//! at [`Plan::placement`]`(r)` and its output is the range [`Plan::output`]`(r)` of its buffer once
//! every [`Step`] has run. A step is a set of [`Transfer`]s that happen at once: each reads its
//! range from the sender's buffer as it was *before* the step and delivers it to the same indices
//! of the receiver's buffer, which either overwrites them (at most one transfer writes an element
//! in an overwriting step) or, in a combining step, folds the received values into its own, in
//! ascending rank order with its own value at its own rank's position — the order every device
//! must follow, so that all ranks' all-reduce outputs are the same bits.
//!
//! | file                  | job                                                          |
//! |-----------------------|--------------------------------------------------------------|
//! | `mod.rs`              | [`Plan`], [`Step`], [`Transfer`], [`PlanParts`], resolution  |
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

use crate::error::NativeCollectiveError;
use crate::verify::{ScheduleViolation, verify};
use crate::{Algorithm, Collective, ElementType, LinkModel, TensorInfo};
use layout::Layout;
use std::ops::Range;

/// One transfer of a step: `range` of rank `from`'s buffer, as it was before the step, goes to
/// the same indices of rank `to`'s buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Transfer {
    /// The sending rank.
    pub from: usize,
    /// The receiving rank.
    pub to: usize,
    /// The elements sent, the same indices on both ranks.
    pub range: Range<usize>,
}

/// One step: transfers that happen at once, all reading the state from before the step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// `true`: every received element is folded into the receiver's own (in ascending rank
    /// order, the receiver's own value at its own rank's position); `false`: it overwrites it.
    pub combine: bool,
    /// The transfers of the step.
    pub transfers: Vec<Transfer>,
}

impl Step {
    /// The source ranges a device must read from a copy: every distinct `(from, range)` of a
    /// transfer whose range overlaps a range some transfer of this step writes on `from`. Since
    /// every transfer reads the state from before the step, those values must be set aside
    /// before the first write (direct all-reduce: every rank's whole buffer); ring and
    /// halving-doubling steps never need it. Sorted by `(from, start, end)`.
    pub fn overwritten_sources(&self) -> Vec<(usize, Range<usize>)> {
        let mut written: Vec<(usize, Range<usize>)> = self
            .transfers
            .iter()
            .map(|transfer| (transfer.to, transfer.range.clone()))
            .collect();
        written.sort_unstable_by_key(|(to, range)| (*to, range.start));
        let mut sources: Vec<(usize, Range<usize>)> = self
            .transfers
            .iter()
            .filter(|transfer| {
                // The writes on the sender, in start order: any that begins before this range
                // ends and ends after it begins overlaps it.
                let first = written.partition_point(|(to, _)| *to < transfer.from);
                written[first..]
                    .iter()
                    .take_while(|(to, range)| {
                        *to == transfer.from && range.start < transfer.range.end
                    })
                    .any(|(_, range)| range.end > transfer.range.start)
            })
            .map(|transfer| (transfer.from, transfer.range.clone()))
            .collect();
        sources.sort_unstable_by_key(|(from, range)| (*from, range.start, range.end));
        sources.dedup();
        sources
    }

    /// Elements of [`overwritten_sources`](Self::overwritten_sources): what a device copies
    /// aside in this step.
    pub fn copied_aside(&self) -> usize {
        self.overwritten_sources()
            .iter()
            .map(|(_, range)| range.len())
            .sum()
    }

    /// Elements of the receivers' buffers a combining step folds into, each counted once
    /// however many senders fold into it (0 for an overwriting step): a fold reads the
    /// receiver's value and writes the result, once per element when a device folds every
    /// sender in one pass. What a shared memory system carries beyond the transfers themselves
    /// ([`Links::Shared`](crate::Links::Shared)).
    pub fn folded_elements(&self) -> usize {
        if !self.combine {
            return 0;
        }
        let mut received: Vec<(usize, Range<usize>)> = self
            .transfers
            .iter()
            .filter(|transfer| !transfer.range.is_empty())
            .map(|transfer| (transfer.to, transfer.range.clone()))
            .collect();
        received.sort_unstable_by_key(|(to, range)| (*to, range.start));
        // The union per receiver: ranges sorted by start, merged where they overlap.
        let mut total = 0;
        let mut open: Option<(usize, Range<usize>)> = None;
        for (to, range) in received {
            match &mut open {
                Some((rank, current)) if *rank == to && range.start <= current.end => {
                    current.end = current.end.max(range.end);
                }
                _ => {
                    total += open.map_or(0, |(_, current)| current.len());
                    open = Some((to, range));
                }
            }
        }
        total + open.map_or(0, |(_, current)| current.len())
    }

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
    /// empty world, a broadcast root outside it, a reduce-scatter input not divisible by the
    /// world, halving-doubling on a world that is not a power of two, or `Custom` (a custom plan
    /// is built with [`Plan::from_parts`]).
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
        let build = |algorithm| Plan::built(collective, algorithm, world, input.len, &layout);
        match algorithm {
            Algorithm::Auto => {
                let mut best: Option<(f64, Plan)> = None;
                for candidate in Algorithm::BUILT_IN {
                    let Ok(plan) = build(candidate) else { continue };
                    let time = model.plan_time(&plan, input.element.size());
                    if best.as_ref().is_none_or(|(least, _)| time < *least) {
                        best = Some((time, plan));
                    }
                }
                // `Ring` and `Direct` take every valid layout, so a candidate always exists.
                best.map(|(_, plan)| plan)
                    .ok_or_else(|| invalid("no algorithm can run it".to_owned()))
            }
            Algorithm::Custom => Err(invalid(
                "a custom plan is built with Plan::from_parts and run with run_plan".to_owned(),
            )),
            fixed => build(fixed).map_err(invalid),
        }
    }

    /// The built-in plan of a fixed `algorithm` on a valid `layout`, or why there is none.
    fn built(
        collective: Collective,
        algorithm: Algorithm,
        world: usize,
        input_len: usize,
        layout: &Layout,
    ) -> Result<Plan, String> {
        let steps = match algorithm {
            Algorithm::Ring => ring::steps(collective, world, input_len),
            Algorithm::Direct => direct::steps(collective, world, input_len),
            Algorithm::HalvingDoubling => {
                if !world.is_power_of_two() {
                    return Err(format!(
                        "halving-doubling needs a power-of-two world, not {world} ranks"
                    ));
                }
                halving_doubling::steps(collective, world, input_len)
            }
            Algorithm::Auto | Algorithm::Custom => {
                return Err(format!("{algorithm} is not a fixed built-in algorithm"));
            }
        };
        Ok(Plan {
            collective,
            algorithm,
            world,
            input_len,
            layout: layout.clone(),
            steps,
        })
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

    /// Elements of every rank's output.
    pub fn output_len(&self) -> usize {
        self.layout.outputs.first().map_or(0, Range::len)
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

    /// Elements rank `rank` sends over the whole schedule.
    pub fn elements_sent_by(&self, rank: usize) -> usize {
        self.transfers()
            .filter(|transfer| transfer.from == rank)
            .map(|transfer| transfer.range.len())
            .sum()
    }

    /// Elements rank `rank` receives over the whole schedule.
    pub fn elements_received_by(&self, rank: usize) -> usize {
        self.transfers()
            .filter(|transfer| transfer.to == rank)
            .map(|transfer| transfer.range.len())
            .sum()
    }

    /// Elements all ranks send over the whole schedule.
    pub fn elements_moved(&self) -> usize {
        self.transfers().map(|transfer| transfer.range.len()).sum()
    }

    fn transfers(&self) -> impl Iterator<Item = &Transfer> {
        self.steps.iter().flat_map(|step| &step.transfers)
    }
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
