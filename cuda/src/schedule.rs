//! One step of a plan, checked and laid out before anything is queued: which source ranges are
//! staged, where every transfer reads and writes, and every fold with its operands in the
//! contract's order. Pure data (no CUDA), so it is tested without a GPU; `exchange.rs` queues it.
//!
//! # What is staged
//! Every transfer reads the state from before the step. A transfer's source range can only
//! change during the step if the step *writes* that range of the sender's buffer:
//!
//! - In an **overwriting** step the writes are transfers (peer copies straight into the
//!   receiver's working buffer). A transfer whose source range overlaps a range some transfer
//!   writes into its sender is **staged**: copied aside into the sender's staging buffer before
//!   any write of the step, and sent from there. Only those; every other source is read in place
//!   (a ring or halving-doubling all-gather, a broadcast: none is staged).
//! - In a **combining** step no transfer writes a working buffer: received ranges land in the
//!   receiver's scratch buffer, and the only writes are the receiver's folds — queued on the
//!   receiver's own stream *after* its own outgoing copies, which are the only reads of its
//!   buffer (a sender pushes on its own stream). Stream order already puts every read of the step
//!   before the fold that overwrites it, so nothing is staged: a direct all-reduce, where every
//!   source is also a fold's destination, sends straight from the working buffers.
//!
//! # Folds
//! A combining step cuts each receiver's incoming ranges at every range boundary into segments
//! with one fixed set of senders, and folds each segment left to right over its operands: the
//! senders below the receiver ascending, the receiver's own elements at its own position, the
//! senders above ascending — `((x0 ⊕ x1) ⊕ x2) ...`. A fold of more than
//! [`FOLD_MAX`] operands is chained ([`launches`]) through an accumulator range in the
//! receiver's scratch, which gives the same bits because every launch rounds to storage after
//! every operation, as one long fold does.

use crate::error::{CudaError, Result};
use crate::kernels::FOLD_MAX;
use ruccl_core::{Plan, Step};
use std::ops::Range;

/// Where a send reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The sender's working buffer at the transfer's own indices: nothing in the step writes them.
    Live,
    /// The sender's staging buffer from element `offset`: the range as it was before the step.
    Staged {
        /// The first element in the staging buffer.
        offset: usize,
    },
}

/// Where a send writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The receiver's working buffer at the transfer's own indices (an overwriting step).
    Buffer,
    /// The receiver's scratch buffer from element `offset` (a combining step; a fold reads it).
    Scratch {
        /// The first element in the scratch buffer.
        offset: usize,
    },
}

/// One transfer, as queued: a copy on the sender's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Send {
    /// The sending rank.
    pub(crate) from: usize,
    /// The receiving rank.
    pub(crate) to: usize,
    /// The elements moved (the same indices on both ranks).
    pub(crate) range: Range<usize>,
    /// Where the copy reads.
    pub(crate) source: Source,
    /// Where it writes.
    pub(crate) target: Target,
}

/// A source range copied aside, on its rank's stream, before any write of the step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stage {
    /// The rank whose working buffer is read.
    pub(crate) rank: usize,
    /// The elements copied.
    pub(crate) range: Range<usize>,
    /// Where they go in the rank's staging buffer.
    pub(crate) offset: usize,
}

/// One operand of a fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operand {
    /// The receiver's own elements (the fold's destination).
    Own,
    /// A received range in the receiver's scratch, from element `offset` (the segment's first).
    Scratch {
        /// The element of the scratch buffer that holds the segment's first element.
        offset: usize,
        /// The rank it came from (for messages and tests).
        from: usize,
    },
}

/// One fold: a segment of a receiver's buffer becomes the left fold of its operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fold {
    /// The receiving rank.
    pub(crate) to: usize,
    /// The elements folded.
    pub(crate) range: Range<usize>,
    /// The operands in the contract's order; at least two.
    pub(crate) operands: Vec<Operand>,
    /// Where a chained fold ([`launches`]) keeps its partial result in the receiver's scratch:
    /// `Some(element)` exactly when there are more than [`FOLD_MAX`] operands.
    pub(crate) accumulator: Option<usize>,
}

/// A step checked and laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StepLayout {
    /// Whether the step folds (else it overwrites).
    pub(crate) combine: bool,
    /// Copies aside, by rank.
    pub(crate) stages: Vec<Stage>,
    /// Every non-empty transfer, by sender, then receiver, then range.
    pub(crate) sends: Vec<Send>,
    /// Every fold, by receiver, then range (combining steps only).
    pub(crate) folds: Vec<Fold>,
    /// Elements of scratch each rank needs in this step.
    pub(crate) scratch: Vec<usize>,
    /// Elements of staging each rank needs in this step.
    pub(crate) staging: Vec<usize>,
}

impl StepLayout {
    /// Check `step` for `world` ranks with working buffers of `buffer_len` elements and lay it
    /// out. Refused: a rank outside the world or a transfer to its own sender
    /// ([`CudaError::TransferRanks`]), a reversed range or one past the buffers
    /// ([`CudaError::TransferOutOfBounds`]), an element written twice in an overwriting step
    /// ([`CudaError::DoubleWrite`]) or reached twice by one sender in a combining step
    /// ([`CudaError::DuplicateSource`]). Empty transfers are ignored.
    pub(crate) fn new(step: &Step, world: usize, buffer_len: usize) -> Result<Self> {
        for (transfer, moved) in step.transfers.iter().enumerate() {
            if moved.from >= world || moved.to >= world || moved.from == moved.to {
                return Err(CudaError::TransferRanks {
                    transfer,
                    from: moved.from,
                    to: moved.to,
                    world,
                });
            }
            if moved.range.start > moved.range.end || moved.range.end > buffer_len {
                return Err(CudaError::TransferOutOfBounds {
                    transfer,
                    range: moved.range.clone(),
                    buffer_len,
                });
            }
        }
        let mut moved: Vec<(usize, usize, Range<usize>)> = step
            .transfers
            .iter()
            .filter(|transfer| !transfer.range.is_empty())
            .map(|transfer| (transfer.from, transfer.to, transfer.range.clone()))
            .collect();
        check_single_writers(&mut moved, step.combine)?;
        let mut layout = StepLayout {
            combine: step.combine,
            stages: Vec::new(),
            sends: Vec::with_capacity(moved.len()),
            folds: Vec::new(),
            scratch: vec![0; world],
            staging: vec![0; world],
        };
        // Written ranges per rank, sorted by start (they are disjoint in an overwriting step).
        let mut written: Vec<Vec<Range<usize>>> = vec![Vec::new(); world];
        if !step.combine {
            for (_, to, range) in &moved {
                written[*to].push(range.clone());
            }
            for ranges in &mut written {
                ranges.sort_unstable_by_key(|range| range.start);
            }
        }
        // Scratch offsets are assigned by receiver, then sender, then range.
        moved.sort_unstable_by_key(|(from, to, range)| (*to, *from, range.start));
        let mut scratch_offsets = Vec::with_capacity(moved.len());
        for (_, to, range) in &moved {
            scratch_offsets.push(layout.scratch[*to]);
            if step.combine {
                layout.scratch[*to] += range.len();
            }
        }
        if step.combine {
            layout.lay_out_folds(&moved, &scratch_offsets);
        }
        for ((from, to, range), scratch_offset) in moved.into_iter().zip(scratch_offsets) {
            let changes = written[from]
                .iter()
                .take_while(|written| written.start < range.end)
                .any(|written| written.end > range.start);
            let source = if changes {
                let offset = layout.staging[from];
                layout.staging[from] += range.len();
                layout.stages.push(Stage {
                    rank: from,
                    range: range.clone(),
                    offset,
                });
                Source::Staged { offset }
            } else {
                Source::Live
            };
            let target = if step.combine {
                Target::Scratch {
                    offset: scratch_offset,
                }
            } else {
                Target::Buffer
            };
            layout.sends.push(Send {
                from,
                to,
                range,
                source,
                target,
            });
        }
        layout.stages.sort_by_key(|stage| stage.rank);
        layout
            .sends
            .sort_by_key(|send| (send.from, send.to, send.range.start));
        Ok(layout)
    }

    /// Cut every receiver's incoming ranges (`moved`, sorted by receiver then sender, with their
    /// scratch offsets) into segments of one sender set, and fold each in the contract's order.
    fn lay_out_folds(&mut self, moved: &[(usize, usize, Range<usize>)], offsets: &[usize]) {
        let mut start = 0;
        while start < moved.len() {
            let to = moved[start].1;
            let end = start + moved[start..].iter().take_while(|m| m.1 == to).count();
            let incoming = &moved[start..end];
            let incoming_offsets = &offsets[start..end];
            let mut cuts: Vec<usize> = incoming
                .iter()
                .flat_map(|(_, _, range)| [range.start, range.end])
                .collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut chained = 0;
            let first_fold = self.folds.len();
            for segment in cuts.windows(2) {
                let (low, high) = (segment[0], segment[1]);
                let mut operands = Vec::new();
                let mut own_placed = false;
                // `incoming` is sorted by sender, so the operands come out ascending.
                for ((from, _, range), offset) in incoming.iter().zip(incoming_offsets) {
                    if !(range.start <= low && high <= range.end) {
                        continue;
                    }
                    if *from > to && !own_placed {
                        operands.push(Operand::Own);
                        own_placed = true;
                    }
                    operands.push(Operand::Scratch {
                        offset: offset + (low - range.start),
                        from: *from,
                    });
                }
                if operands.is_empty() {
                    continue;
                }
                if !own_placed {
                    operands.push(Operand::Own);
                }
                if operands.len() > FOLD_MAX {
                    chained = chained.max(high - low);
                }
                self.folds.push(Fold {
                    to,
                    range: low..high,
                    operands,
                    accumulator: None,
                });
            }
            if chained > 0 {
                let accumulator = self.scratch[to];
                self.scratch[to] += chained;
                for fold in &mut self.folds[first_fold..] {
                    if fold.operands.len() > FOLD_MAX {
                        fold.accumulator = Some(accumulator);
                    }
                }
            }
            start = end;
        }
    }

    /// Whether `rank` receives anything in this step.
    pub(crate) fn receives(&self, rank: usize) -> bool {
        self.sends.iter().any(|send| send.to == rank)
    }

    /// The distinct ranks that send to `rank` in this step, ascending.
    pub(crate) fn senders_to(&self, rank: usize) -> Vec<usize> {
        let mut senders: Vec<usize> = self
            .sends
            .iter()
            .filter(|send| send.to == rank)
            .map(|send| send.from)
            .collect();
        senders.sort_unstable();
        senders.dedup();
        senders
    }
}

/// Overwriting: no element written twice. Combining: no sender reaches an element twice.
/// Sorts `moved` on the way.
fn check_single_writers(moved: &mut [(usize, usize, Range<usize>)], combine: bool) -> Result<()> {
    let group =
        |(from, to, _): &(usize, usize, Range<usize>)| (*to, if combine { *from } else { 0 });
    moved.sort_unstable_by_key(|transfer| (group(transfer), transfer.2.start));
    for pair in moved.windows(2) {
        let (first, second) = (&pair[0], &pair[1]);
        if group(first) != group(second) || second.2.start >= first.2.end {
            continue;
        }
        let (rank, element) = (first.1, second.2.start);
        return Err(if combine {
            CudaError::DuplicateSource {
                rank,
                element,
                from: first.0,
            }
        } else {
            CudaError::DoubleWrite { rank, element }
        });
    }
    Ok(())
}

/// Elements of scratch and of staging each rank needs for the largest step of `plan`:
/// `(scratch, staging)`, per rank. Checks every step on the way (as [`StepLayout::new`]).
pub(crate) fn plan_needs(plan: &Plan) -> Result<(Vec<usize>, Vec<usize>)> {
    let world = plan.world();
    let mut scratch = vec![0; world];
    let mut staging = vec![0; world];
    for step in plan.steps() {
        let layout = StepLayout::new(step, world, plan.buffer_len())?;
        for rank in 0..world {
            scratch[rank] = scratch[rank].max(layout.scratch[rank]);
            staging[rank] = staging[rank].max(layout.staging[rank]);
        }
    }
    Ok((scratch, staging))
}

/// The device buffers one rank's part of a generation takes from its pool, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RankBuffers {
    /// The working buffer, or `None` when the rank works in its input's own allocation.
    pub(crate) working: Option<usize>,
    /// Scratch for the plan's largest combining step.
    pub(crate) scratch: usize,
    /// Staging for the plan's largest overwriting step.
    pub(crate) staging: usize,
    /// The copy `finish` makes of the rank's output range, when that is not the whole buffer.
    pub(crate) output_copy: Option<usize>,
}

/// What every rank of a generation of `plan` takes from its pool, for elements of
/// `element_size` bytes, working in place where `in_place` and the layout allow (the buffer is
/// exactly the input, at placement 0). The layout must have been checked to lie within the
/// buffers; sizes that overflow are [`CudaError::TooLarge`].
pub(crate) fn generation_buffers(
    plan: &Plan,
    element: ruccl_core::ElementType,
    in_place: bool,
) -> Result<Vec<RankBuffers>> {
    let (scratch, staging) = plan_needs(plan)?;
    let bytes = |len: usize| {
        len.checked_mul(element.size()).ok_or(CudaError::TooLarge {
            len,
            element_type: element,
        })
    };
    let whole = 0..plan.buffer_len();
    (0..plan.world())
        .map(|rank| {
            let own_allocation =
                in_place && plan.buffer_len() == plan.input_len() && plan.placement(rank) == 0;
            let output = plan.output(rank);
            Ok(RankBuffers {
                working: if own_allocation {
                    None
                } else {
                    Some(bytes(plan.buffer_len())?)
                },
                scratch: bytes(scratch[rank])?,
                staging: bytes(staging[rank])?,
                output_copy: if output == whole {
                    None
                } else {
                    Some(bytes(output.len())?)
                },
            })
        })
        .collect()
}

/// One kernel launch of a fold over some operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    /// The operands it folds, after the accumulator when `from_accumulator`.
    pub(crate) operands: Range<usize>,
    /// Whether its first source is the accumulator (the fold so far).
    pub(crate) from_accumulator: bool,
    /// Whether it writes the accumulator (else the fold's destination: the last launch).
    pub(crate) into_accumulator: bool,
}

/// The launches that fold `count` operands in order, each taking at most [`FOLD_MAX`] sources:
/// one launch when they fit; else the first [`FOLD_MAX`] into the accumulator, then the
/// accumulator and up to `FOLD_MAX - 1` more at a time, the last into the destination. The
/// destination is written only by the last launch, so an `Own` operand in any launch is still
/// the receiver's value from before the step.
pub(crate) fn launches(count: usize) -> Vec<Launch> {
    if count <= FOLD_MAX {
        return vec![Launch {
            operands: 0..count,
            from_accumulator: false,
            into_accumulator: false,
        }];
    }
    let mut launches = vec![Launch {
        operands: 0..FOLD_MAX,
        from_accumulator: false,
        into_accumulator: true,
    }];
    let mut next = FOLD_MAX;
    while next < count {
        let end = (next + FOLD_MAX - 1).min(count);
        launches.push(Launch {
            operands: next..end,
            from_accumulator: true,
            into_accumulator: end < count,
        });
        next = end;
    }
    launches
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruccl_core::{Algorithm, Collective, ReduceOperation, Transfer};

    fn transfer(from: usize, to: usize, range: Range<usize>) -> Transfer {
        Transfer::new(from, to, range)
    }

    fn step(combine: bool, transfers: Vec<Transfer>) -> Step {
        Step { combine, transfers }
    }

    const fn scratch(offset: usize, from: usize) -> Operand {
        Operand::Scratch { offset, from }
    }

    /// Every built-in plan for worlds 1..=`max_world` and a few lengths per collective.
    fn built_in_plans(max_world: usize) -> Vec<Plan> {
        let collectives = [
            Collective::AllReduce(ReduceOperation::Sum),
            Collective::ReduceScatter(ReduceOperation::Sum),
            Collective::AllGather,
            Collective::Broadcast { root: 0 },
        ];
        let mut plans = Vec::new();
        for world in 1..=max_world {
            for collective in collectives {
                let collective = match collective {
                    Collective::Broadcast { .. } => Collective::Broadcast { root: world / 2 },
                    other => other,
                };
                for algorithm in Algorithm::BUILT_IN {
                    for len in [0, 1, world, 3 * world + 1, 64] {
                        let len = match collective {
                            Collective::ReduceScatter(_) => len - len % world,
                            _ => len,
                        };
                        if let Ok(plan) = Plan::new(collective, algorithm, world, len) {
                            plans.push(plan);
                        }
                    }
                }
            }
        }
        plans
    }

    #[test]
    fn a_ring_step_stages_nothing_and_folds_in_rank_order() {
        let ring = step(
            true,
            vec![
                transfer(0, 1, 0..2),
                transfer(1, 2, 2..4),
                transfer(2, 0, 4..6),
            ],
        );
        let layout = StepLayout::new(&ring, 3, 6).unwrap();
        assert!(layout.stages.is_empty());
        assert_eq!(layout.scratch, vec![2, 2, 2]);
        assert_eq!(
            layout.folds,
            vec![
                Fold {
                    to: 0,
                    range: 4..6,
                    operands: vec![Operand::Own, scratch(0, 2)],
                    accumulator: None
                },
                Fold {
                    to: 1,
                    range: 0..2,
                    operands: vec![scratch(0, 0), Operand::Own],
                    accumulator: None
                },
                Fold {
                    to: 2,
                    range: 2..4,
                    operands: vec![scratch(0, 1), Operand::Own],
                    accumulator: None
                },
            ]
        );
    }

    #[test]
    fn a_direct_all_reduce_sends_from_the_working_buffers_and_folds_every_rank_in_order() {
        let plan = Plan::new(
            Collective::AllReduce(ReduceOperation::Sum),
            Algorithm::Direct,
            4,
            10,
        )
        .unwrap();
        let layout = StepLayout::new(&plan.steps()[0], 4, 10).unwrap();
        assert!(
            layout.stages.is_empty(),
            "the folds follow the sends on each stream"
        );
        assert!(layout.sends.iter().all(|send| send.source == Source::Live));
        assert_eq!(layout.scratch, vec![30; 4]);
        let fold = layout.folds.iter().find(|fold| fold.to == 2).unwrap();
        assert_eq!(fold.range, 0..10);
        assert_eq!(
            fold.operands,
            vec![scratch(0, 0), scratch(10, 1), Operand::Own, scratch(20, 3)]
        );
    }

    #[test]
    fn an_overwriting_swap_of_one_range_stages_both_sources() {
        let swap = step(false, vec![transfer(0, 1, 0..4), transfer(1, 0, 2..6)]);
        let layout = StepLayout::new(&swap, 2, 8).unwrap();
        assert_eq!(
            layout.stages,
            vec![
                Stage {
                    rank: 0,
                    range: 0..4,
                    offset: 0
                },
                Stage {
                    rank: 1,
                    range: 2..6,
                    offset: 0
                }
            ]
        );
        assert_eq!(layout.staging, vec![4, 4]);
        assert!(
            layout
                .sends
                .iter()
                .all(|send| send.target == Target::Buffer)
        );
        // Disjoint ranges need no copy.
        let apart = step(false, vec![transfer(0, 1, 0..4), transfer(1, 0, 4..8)]);
        assert!(StepLayout::new(&apart, 2, 8).unwrap().stages.is_empty());
    }

    #[test]
    fn a_source_is_staged_exactly_when_its_overwriting_step_writes_it_in_every_built_in_plan() {
        let mut staged = 0;
        for plan in built_in_plans(9) {
            for step in plan.steps() {
                let layout = StepLayout::new(step, plan.world(), plan.buffer_len()).unwrap();
                for send in &layout.sends {
                    let written = !step.combine
                        && step.transfers.iter().any(|other| {
                            other.to == send.from
                                && other.range.start < send.range.end
                                && send.range.start < other.range.end
                        });
                    assert_eq!(
                        matches!(send.source, Source::Staged { .. }),
                        written,
                        "{} {} W={}: {send:?}",
                        plan.collective(),
                        plan.algorithm(),
                        plan.world()
                    );
                    staged += usize::from(written);
                }
            }
        }
        println!("{staged} staged sources over every built-in plan up to W = 9");
    }

    #[test]
    fn overlapping_senders_cut_the_receiver_into_segments_in_fold_order() {
        let overlapping = step(true, vec![transfer(2, 1, 0..4), transfer(0, 1, 2..6)]);
        let layout = StepLayout::new(&overlapping, 3, 6).unwrap();
        let folds: Vec<(Range<usize>, Vec<Operand>)> = layout
            .folds
            .iter()
            .map(|fold| (fold.range.clone(), fold.operands.clone()))
            .collect();
        // Rank 0's range sits at scratch 0..4 (senders first by rank), rank 2's at 4..8.
        assert_eq!(
            folds,
            vec![
                (0..2, vec![Operand::Own, scratch(4, 2)]),
                (2..4, vec![scratch(0, 0), Operand::Own, scratch(6, 2)]),
                (4..6, vec![scratch(2, 0), Operand::Own]),
            ]
        );
    }

    #[test]
    fn bad_transfers_are_typed_errors() {
        let check = |combine, transfers| StepLayout::new(&step(combine, transfers), 3, 8);
        assert!(matches!(
            check(true, vec![transfer(0, 3, 0..1)]),
            Err(CudaError::TransferRanks { to: 3, .. })
        ));
        assert!(matches!(
            check(false, vec![transfer(1, 1, 0..1)]),
            Err(CudaError::TransferRanks { from: 1, to: 1, .. })
        ));
        assert!(matches!(
            check(false, vec![transfer(0, 1, 4..9)]),
            Err(CudaError::TransferOutOfBounds { transfer: 0, .. })
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = vec![transfer(0, 1, 0..1), transfer(0, 1, 5..4)];
        assert!(matches!(
            check(false, reversed),
            Err(CudaError::TransferOutOfBounds { transfer: 1, .. })
        ));
        assert!(matches!(
            check(false, vec![transfer(0, 2, 0..3), transfer(1, 2, 2..4)]),
            Err(CudaError::DoubleWrite {
                rank: 2,
                element: 2
            })
        ));
        assert!(matches!(
            check(true, vec![transfer(0, 1, 0..3), transfer(0, 1, 1..2)]),
            Err(CudaError::DuplicateSource {
                rank: 1,
                element: 1,
                from: 0
            })
        ));
        // Two senders to one element is what a fold is.
        assert!(check(true, vec![transfer(0, 2, 0..3), transfer(1, 2, 2..4)]).is_ok());
    }

    #[test]
    fn launches_cover_every_operand_once_in_order_within_the_fan_in() {
        assert_eq!(launches(2).len(), 1);
        assert_eq!(launches(FOLD_MAX).len(), 1);
        for count in 2..=5 * FOLD_MAX {
            let plan = launches(count);
            let mut next = 0;
            for (index, launch) in plan.iter().enumerate() {
                let last = index + 1 == plan.len();
                assert_eq!(launch.operands.start, next, "{count}: {plan:?}");
                assert_eq!(launch.from_accumulator, index > 0, "{count}");
                assert_eq!(launch.into_accumulator, !last, "{count}");
                let sources = launch.operands.len() + usize::from(launch.from_accumulator);
                assert!((2..=FOLD_MAX).contains(&sources), "{count}: {plan:?}");
                next = launch.operands.end;
            }
            assert_eq!(next, count);
        }
    }

    #[test]
    fn a_fold_beyond_the_fan_in_gets_an_accumulator_after_the_received_ranges() {
        let world = FOLD_MAX + 4;
        let plan = Plan::new(
            Collective::AllReduce(ReduceOperation::Sum),
            Algorithm::Direct,
            world,
            5,
        )
        .unwrap();
        let layout = StepLayout::new(&plan.steps()[0], world, 5).unwrap();
        for fold in &layout.folds {
            assert_eq!(fold.operands.len(), world);
            assert_eq!(fold.accumulator, Some((world - 1) * 5));
        }
        assert_eq!(layout.scratch, vec![world * 5; world]);
        let (scratch, staging) = plan_needs(&plan).unwrap();
        assert_eq!((scratch[0], staging[0]), (world * 5, 0));
    }

    /// A stand-in for the device, on host values: runs a layout exactly as `exchange.rs` queues
    /// it — stages, then sends (in the given order, reading live buffers), then folds through
    /// their launches — with `op` as the fold's operator.
    fn run_layout(
        layout: &StepLayout,
        buffers: &mut [Vec<i64>],
        op: fn(i64, i64) -> i64,
        reverse_sends: bool,
    ) {
        let world = buffers.len();
        let mut staging: Vec<Vec<i64>> = (0..world).map(|r| vec![0; layout.staging[r]]).collect();
        let mut scratch: Vec<Vec<i64>> = (0..world).map(|r| vec![0; layout.scratch[r]]).collect();
        for stage in &layout.stages {
            let values = buffers[stage.rank][stage.range.clone()].to_vec();
            staging[stage.rank][stage.offset..stage.offset + values.len()].copy_from_slice(&values);
        }
        let mut sends: Vec<&Send> = layout.sends.iter().collect();
        if reverse_sends {
            sends.reverse();
        }
        for send in sends {
            let values = match send.source {
                Source::Live => buffers[send.from][send.range.clone()].to_vec(),
                Source::Staged { offset } => {
                    staging[send.from][offset..offset + send.range.len()].to_vec()
                }
            };
            match send.target {
                Target::Buffer => buffers[send.to][send.range.clone()].copy_from_slice(&values),
                Target::Scratch { offset } => {
                    scratch[send.to][offset..offset + values.len()].copy_from_slice(&values)
                }
            }
        }
        for fold in &layout.folds {
            let (to, len) = (fold.to, fold.range.len());
            for launch in launches(fold.operands.len()) {
                let mut results = Vec::with_capacity(len);
                for i in 0..len {
                    let read = |operand: &Operand| match operand {
                        Operand::Own => buffers[to][fold.range.start + i],
                        Operand::Scratch { offset, .. } => scratch[to][offset + i],
                    };
                    let mut values = launch.operands.clone().map(|j| read(&fold.operands[j]));
                    let first = if launch.from_accumulator {
                        scratch[to][fold.accumulator.unwrap() + i]
                    } else {
                        values.next().unwrap()
                    };
                    results.push(values.fold(first, op));
                }
                if launch.into_accumulator {
                    let a = fold.accumulator.unwrap();
                    scratch[to][a..a + len].copy_from_slice(&results);
                } else {
                    buffers[to][fold.range.clone()].copy_from_slice(&results);
                }
            }
        }
    }

    /// The contract's step, on host values: every transfer reads the pre-step state; a
    /// combining step folds each received element's senders ascending with the receiver's own
    /// value at its own position.
    fn reference_step(step: &Step, buffers: &mut [Vec<i64>], op: fn(i64, i64) -> i64) {
        let before = buffers.to_vec();
        let world = buffers.len();
        for to in 0..world {
            for element in 0..before[to].len() {
                let mut senders: Vec<usize> = step
                    .transfers
                    .iter()
                    .filter(|t| t.to == to && t.range.contains(&element))
                    .map(|t| t.from)
                    .collect();
                if senders.is_empty() {
                    continue;
                }
                if !step.combine {
                    buffers[to][element] = before[senders[0]][element];
                    continue;
                }
                senders.push(to);
                senders.sort_unstable();
                let mut values = senders.iter().map(|&rank| before[rank][element]);
                let first = values.next().unwrap();
                buffers[to][element] = values.fold(first, op);
            }
        }
    }

    /// Neither commutative nor associative: any other order or grouping changes the result.
    fn ordered(a: i64, b: i64) -> i64 {
        a.wrapping_mul(31).wrapping_add(b) ^ 0x5a5a
    }

    fn initial(world: usize, len: usize) -> Vec<Vec<i64>> {
        (0..world)
            .map(|rank| (0..len).map(|i| (rank * 1000 + i) as i64 * 7 + 3).collect())
            .collect()
    }

    #[test]
    fn every_built_in_plan_laid_out_computes_what_the_contract_says_step_by_step() {
        for plan in built_in_plans(9).into_iter().chain(
            built_in_plans(FOLD_MAX + 3)
                .into_iter()
                .filter(|plan| plan.world() > FOLD_MAX && plan.algorithm() == Algorithm::Direct),
        ) {
            let world = plan.world();
            for reverse in [false, true] {
                let mut device = initial(world, plan.buffer_len());
                let mut reference = device.clone();
                for (index, step) in plan.steps().iter().enumerate() {
                    let layout = StepLayout::new(step, world, plan.buffer_len()).unwrap();
                    run_layout(&layout, &mut device, ordered, reverse);
                    reference_step(step, &mut reference, ordered);
                    assert_eq!(
                        device,
                        reference,
                        "{} {} W={} n={}: step {index}",
                        plan.collective(),
                        plan.algorithm(),
                        world,
                        plan.input_len()
                    );
                }
            }
        }
    }

    #[test]
    fn custom_steps_that_stage_and_overlap_compute_what_the_contract_says() {
        let steps = [
            // Swaps and a rotation over one range, overwriting: every source is also written.
            step(
                false,
                vec![
                    transfer(0, 1, 0..6),
                    transfer(1, 2, 0..6),
                    transfer(2, 0, 0..6),
                ],
            ),
            step(false, vec![transfer(0, 1, 1..5), transfer(1, 0, 3..7)]),
            // Overlapping senders folding into one receiver, which also sends what it folds.
            step(
                true,
                vec![
                    transfer(2, 1, 0..4),
                    transfer(0, 1, 2..8),
                    transfer(1, 0, 0..8),
                    transfer(1, 2, 5..6),
                ],
            ),
        ];
        for step in &steps {
            for reverse in [false, true] {
                let mut device = initial(3, 8);
                let mut reference = device.clone();
                let layout = StepLayout::new(step, 3, 8).unwrap();
                run_layout(&layout, &mut device, ordered, reverse);
                reference_step(step, &mut reference, ordered);
                assert_eq!(device, reference, "{step:?}");
            }
        }
    }

    /// One rank's steady state through its pool, as the executor and a caller go: the caller
    /// uploads its input (or feeds the last output back when it has the input's size, as a
    /// training loop or the perf sweep does); `begin` takes the working buffer (unless in
    /// place), scratch and staging; `finish` takes the output copy, then releases scratch,
    /// staging, a consumed input and a working buffer it did not hand out; the caller drops an
    /// output it does not feed back. Returns the misses of each generation.
    fn misses_per_generation(plan: &Plan, in_place: bool, generations: usize) -> Vec<Vec<u64>> {
        use crate::cache::tests::Fake;
        use crate::cache::{BufferCache, HasSize};
        let element = ruccl_core::ElementType::BF16;
        let needs = generation_buffers(plan, element, in_place).unwrap();
        let input_bytes = plan.input_len() * element.size();
        let mut caches: Vec<BufferCache<Fake>> = (0..plan.world())
            .map(|_| BufferCache::new(usize::MAX, 64))
            .collect();
        let take = |cache: &mut BufferCache<Fake>, bytes: usize| {
            // Empty buffers never reach the cache (`Pool::take`).
            if bytes == 0 {
                Fake(0, 0)
            } else {
                cache.take(bytes).unwrap_or(Fake(bytes, 0))
            }
        };
        let give = |cache: &mut BufferCache<Fake>, buffer: Fake| {
            if buffer.size() > 0 {
                drop(cache.give(buffer));
            }
        };
        let mut fed_back: Vec<Option<Fake>> = (0..plan.world()).map(|_| None).collect();
        let mut misses = Vec::new();
        for _ in 0..generations {
            let before: Vec<u64> = caches.iter().map(|cache| cache.stats().misses).collect();
            for (rank, cache) in caches.iter_mut().enumerate() {
                let need = &needs[rank];
                let input = match fed_back[rank].take() {
                    Some(output) => output,
                    None => take(cache, input_bytes),
                };
                let (working, consumed) = match need.working {
                    None => (input, None),
                    Some(bytes) => (take(cache, bytes), Some(input)),
                };
                let scratch = take(cache, need.scratch);
                let staging = take(cache, need.staging);
                let copy = need.output_copy.map(|bytes| take(cache, bytes));
                give(cache, scratch);
                give(cache, staging);
                if let Some(input) = consumed {
                    give(cache, input);
                }
                let output = match copy {
                    Some(copy) => {
                        give(cache, working);
                        copy
                    }
                    None => working,
                };
                if output.size() == input_bytes {
                    fed_back[rank] = Some(output);
                } else {
                    give(cache, output);
                }
            }
            misses.push(
                caches
                    .iter()
                    .zip(before)
                    .map(|(cache, before)| cache.stats().misses - before)
                    .collect(),
            );
        }
        misses
    }

    #[test]
    fn steady_state_generations_of_every_built_in_plan_allocate_nothing() {
        for plan in built_in_plans(8) {
            for in_place in [true, false] {
                let misses = misses_per_generation(&plan, in_place, 4);
                for (generation, misses) in misses.iter().enumerate().skip(1) {
                    assert!(
                        misses.iter().all(|&count| count == 0),
                        "{} {} W={} n={} in place {in_place}: generation {generation} \
                         allocated {misses:?}",
                        plan.collective(),
                        plan.algorithm(),
                        plan.world(),
                        plan.input_len()
                    );
                }
            }
        }
    }

    #[test]
    fn in_place_plans_take_no_working_buffer_and_partial_outputs_take_a_copy() {
        let plan = Plan::new(
            Collective::ReduceScatter(ReduceOperation::Sum),
            Algorithm::Ring,
            4,
            8,
        )
        .unwrap();
        let element = ruccl_core::ElementType::F32;
        let needs = generation_buffers(&plan, element, true).unwrap();
        assert_eq!(needs[0].working, None);
        assert_eq!(needs[0].output_copy, Some(2 * 4));
        let needs = generation_buffers(&plan, element, false).unwrap();
        assert_eq!(needs[0].working, Some(8 * 4));
        let gather = Plan::new(Collective::AllGather, Algorithm::Ring, 4, 8).unwrap();
        let needs = generation_buffers(&gather, element, true).unwrap();
        assert_eq!(
            needs[1].working,
            Some(32 * 4),
            "all-gather cannot work in its input"
        );
        assert_eq!(needs[1].output_copy, None, "its output is the whole buffer");
        // The first generation allocates; the cache makes the rest free.
        let misses = misses_per_generation(&gather, true, 2);
        assert!(misses[0].iter().all(|&count| count > 0));
    }
}
