//! One step of a plan as the CUDA executor queues it. The core checks the step and lays it out
//! ([`Step::lay_out`]: the rules, the sources a write overlaps, the fold segments and their
//! operand order); this module adds only what is CUDA's own: where each copy reads and lands
//! (staging and scratch offsets), an accumulator for folds beyond one launch's fan-in, the
//! launches of a fold, and the buffers a generation takes. Pure data (no CUDA), so it is tested
//! without a GPU; `exchange.rs` queues it.
//!
//! # Copies, and what is staged
//! - In an **overwriting** step every write of the core's layout is one copy straight into the
//!   receiver's working buffer, at the transfer's target; a self-transfer is a local copy on the
//!   rank's own stream. A write whose source the core set aside (one of its snapshots: a range
//!   some write of the step overlaps on its own rank) reads it from the sender's **staging**
//!   buffer, filled on the sender's stream before any write of the step. Only those; every other
//!   source is read in place (a ring or halving-doubling all-gather, a broadcast: none is staged;
//!   a direct all-to-all, which works in place: every source).
//! - In a **combining** step nothing is staged, whatever the core's snapshots: received ranges
//!   land in the receiver's **scratch** buffer, and the only writes of a working buffer are its
//!   own rank's folds — queued on its stream after its outgoing copies, which (with the folds'
//!   own reads) are the only reads of that buffer, since a sender pushes. Stream order puts every
//!   read of the step before the fold that overwrites it, so a direct all-reduce, where every
//!   source is also a fold's destination, sends straight from the working buffers. A
//!   self-transfer is a fold operand: read in place when no write of the step overlaps its source
//!   (the core's [`Source::Live`]), else copied into scratch among the rank's own outgoing copies,
//!   before any fold.
//!
//! # Folds
//! Each fold is one of the core's [`WriteKind::Fold`] segments, its operands in the contract's
//! order ([`Write::operands`](ruccl_core::Write::operands)). A fold of more than [`FOLD_MAX`]
//! operands is chained ([`launches`]) through an accumulator range in the receiver's scratch,
//! which gives the same bits because every launch rounds to storage after every operation, as
//! one long fold does.

use crate::error::{CudaError, Result};
use crate::kernels::FOLD_MAX;
use ruccl_core::{Operand, Piece, Plan, Source, Step, WriteKind};
use std::ops::Range;

/// Where a copy reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// The sender's working buffer from element `start`: nothing the step writes.
    Buffer {
        /// The first element.
        start: usize,
    },
    /// The sender's staging buffer from element `offset`: a range as it was before the step.
    Staging {
        /// The first element in the staging buffer.
        offset: usize,
    },
}

/// Where a copy lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Land {
    /// The receiver's working buffer from element `start` (an overwriting step).
    Buffer {
        /// The first element.
        start: usize,
    },
    /// The receiver's scratch buffer from element `offset` (a combining step; a fold reads it).
    Scratch {
        /// The first element in the scratch buffer.
        offset: usize,
    },
}

/// One copy, queued on the sender's stream (a local copy when `from == to`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Send {
    /// The sending rank.
    pub(crate) from: usize,
    /// The receiving rank.
    pub(crate) to: usize,
    /// The elements moved.
    pub(crate) len: usize,
    /// Where the copy reads.
    pub(crate) read: Read,
    /// Where it lands.
    pub(crate) land: Land,
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

/// Where one operand of a fold is, on the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// The receiver's own elements (the fold's destination).
    Own,
    /// The receiver's working buffer from element `start`: a self-transfer's source, which no
    /// write of the step overlaps.
    Buffer {
        /// The element that feeds the segment's first.
        start: usize,
    },
    /// The receiver's scratch from element `offset`: a range copied there in this step.
    Scratch {
        /// The element of the scratch buffer that holds the segment's first element.
        offset: usize,
        /// The rank it came from (for messages and tests).
        from: usize,
    },
}

/// One fold: a segment of a receiver's buffer becomes the left fold of its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fold {
    /// The receiving rank.
    pub(crate) to: usize,
    /// The elements folded.
    pub(crate) range: Range<usize>,
    /// The operands in the contract's order; at least two.
    pub(crate) inputs: Vec<Input>,
    /// Where a chained fold ([`launches`]) keeps its partial result in the receiver's scratch:
    /// `Some(element)` exactly when there are more than [`FOLD_MAX`] inputs.
    pub(crate) accumulator: Option<usize>,
}

/// A step checked by the core and laid out for the streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StepQueue {
    /// Copies aside, by rank (overwriting steps only).
    pub(crate) stages: Vec<Stage>,
    /// Every copy, by sender, then receiver.
    pub(crate) sends: Vec<Send>,
    /// Every fold, by receiver, then range (combining steps only).
    pub(crate) folds: Vec<Fold>,
    /// `senders[r]`: the other ranks that copy into `r` in this step, ascending.
    pub(crate) senders: Vec<Vec<usize>>,
    /// Elements of scratch each rank needs in this step.
    pub(crate) scratch: Vec<usize>,
    /// Elements of staging each rank needs in this step.
    pub(crate) staging: Vec<usize>,
}

impl StepQueue {
    /// Check `step` for `world` ranks with working buffers of `buffer_len` elements
    /// ([`Step::lay_out`]; a violation is [`CudaError::Step`]) and lay it out for the streams.
    pub(crate) fn new(step: &Step, world: usize, buffer_len: usize) -> Result<Self> {
        let layout = step.lay_out(world, buffer_len)?;
        let mut queue = StepQueue {
            stages: Vec::new(),
            sends: Vec::new(),
            folds: Vec::new(),
            senders: vec![Vec::new(); world],
            scratch: vec![0; world],
            staging: vec![0; world],
        };
        // Staging offsets of the snapshots an overwrite reads, and scratch offsets of the
        // transfers a fold reads from scratch, each given on first use.
        let mut staged = vec![None; layout.snapshots.len()];
        let mut landed = vec![None; step.transfers.len()];
        for write in &layout.writes {
            match &write.kind {
                WriteKind::Copy(piece) => {
                    let read = match piece.source {
                        Source::Live { start, .. } => Read::Buffer { start },
                        Source::Copied { snapshot, offset } => Read::Staging {
                            offset: queue.stage(&layout.snapshots, &mut staged, snapshot) + offset,
                        },
                    };
                    queue.sends.push(Send {
                        from: piece.from,
                        to: write.to,
                        len: write.range.len(),
                        read,
                        land: Land::Buffer {
                            start: write.range.start,
                        },
                    });
                }
                WriteKind::Fold { .. } => {
                    let inputs = write
                        .operands()
                        .map(|operand| match operand {
                            Operand::Own => Input::Own,
                            Operand::Received(piece) => {
                                queue.input(step, write.to, piece, &mut landed)
                            }
                        })
                        .collect();
                    queue.folds.push(Fold {
                        to: write.to,
                        range: write.range.clone(),
                        inputs,
                        accumulator: None,
                    });
                }
            }
        }
        queue.add_accumulators();
        for send in queue.sends.iter().filter(|send| send.from != send.to) {
            queue.senders[send.to].push(send.from);
        }
        for senders in &mut queue.senders {
            senders.sort_unstable();
            senders.dedup();
        }
        queue.sends.sort_by_key(|send| (send.from, send.to));
        Ok(queue)
    }

    /// The staging offset of `snapshots[snapshot]`, staging it on first use.
    fn stage(
        &mut self,
        snapshots: &[(usize, Range<usize>)],
        staged: &mut [Option<usize>],
        snapshot: usize,
    ) -> usize {
        let (rank, range) = &snapshots[snapshot];
        *staged[snapshot].get_or_insert_with(|| {
            let offset = self.staging[*rank];
            self.staging[*rank] += range.len();
            self.stages.push(Stage {
                rank: *rank,
                range: range.clone(),
                offset,
            });
            offset
        })
    }

    /// Where a fold on `to` finds `piece`: a self-transfer's source that nothing in the step
    /// writes, in place; anything else in scratch, where one copy per transfer (queued on first
    /// use) puts the transfer's whole range.
    fn input(
        &mut self,
        step: &Step,
        to: usize,
        piece: Piece,
        landed: &mut [Option<usize>],
    ) -> Input {
        if let Source::Live { rank, start } = piece.source {
            if rank == to {
                return Input::Buffer { start };
            }
        }
        let transfer = &step.transfers[piece.transfer];
        let first = *landed[piece.transfer].get_or_insert_with(|| {
            let offset = self.scratch[to];
            self.scratch[to] += transfer.range.len();
            // Read in place even where the core set the source aside: the sender's own folds,
            // the only writes of its buffer, follow this copy on its stream.
            self.sends.push(Send {
                from: transfer.from,
                to,
                len: transfer.range.len(),
                read: Read::Buffer {
                    start: transfer.range.start,
                },
                land: Land::Scratch { offset },
            });
            offset
        });
        Input::Scratch {
            offset: first + piece.offset,
            from: piece.from,
        }
    }

    /// Give every fold of more than [`FOLD_MAX`] inputs an accumulator: one range per receiver,
    /// after everything else in its scratch, as long as its longest such fold.
    fn add_accumulators(&mut self) {
        let chained = |fold: &&mut Fold| fold.inputs.len() > FOLD_MAX;
        let mut longest = vec![0; self.scratch.len()];
        for fold in self.folds.iter_mut().filter(chained) {
            longest[fold.to] = longest[fold.to].max(fold.range.len());
        }
        for fold in self.folds.iter_mut().filter(chained) {
            fold.accumulator = Some(self.scratch[fold.to]);
        }
        for (scratch, longest) in self.scratch.iter_mut().zip(longest) {
            *scratch += longest;
        }
    }

    /// The other ranks that copy into `rank` in this step, ascending.
    pub(crate) fn senders_to(&self, rank: usize) -> &[usize] {
        &self.senders[rank]
    }
}

/// Elements of scratch and of staging each rank needs for the largest step of `plan`:
/// `(scratch, staging)`, per rank. Checks every step on the way (as [`StepQueue::new`]).
pub(crate) fn plan_needs(plan: &Plan) -> Result<(Vec<usize>, Vec<usize>)> {
    let world = plan.world();
    let mut scratch = vec![0; world];
    let mut staging = vec![0; world];
    for step in plan.steps() {
        let queue = StepQueue::new(step, world, plan.buffer_len())?;
        for rank in 0..world {
            scratch[rank] = scratch[rank].max(queue.scratch[rank]);
            staging[rank] = staging[rank].max(queue.staging[rank]);
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
    use ruccl_core::{Algorithm, Collective, ReduceOperation, StepViolation, Transfer};

    fn transfer(from: usize, to: usize, range: Range<usize>) -> Transfer {
        Transfer::new(from, to, range)
    }

    /// A transfer landing at `at` on the receiver.
    fn landing(from: usize, to: usize, range: Range<usize>, at: usize) -> Transfer {
        Transfer {
            from,
            to,
            range,
            at,
        }
    }

    fn step(combine: bool, transfers: Vec<Transfer>) -> Step {
        Step { combine, transfers }
    }

    const fn scratch(offset: usize, from: usize) -> Input {
        Input::Scratch { offset, from }
    }

    const fn send(from: usize, to: usize, len: usize, read: Read, land: Land) -> Send {
        Send {
            from,
            to,
            len,
            read,
            land,
        }
    }

    /// Every built-in plan for worlds 1..=`max_world`: every kind of collective (roots first,
    /// middle and last), every algorithm that has a plan, a few lengths each.
    fn built_in_plans(max_world: usize) -> Vec<Plan> {
        let mut plans = Vec::new();
        for world in 1..=max_world {
            for kind in Collective::KINDS {
                let mut roots = vec![0, world / 2, world - 1];
                roots.dedup();
                if kind.root().is_none() {
                    roots.truncate(1);
                }
                for collective in roots.into_iter().map(|root| kind.with_root(root)) {
                    for algorithm in Algorithm::BUILT_IN {
                        for len in [0, 1, world, 3 * world + 1, 64] {
                            // A whole number of blocks where the collective splits its input.
                            let len = match collective.output_len(world, len) {
                                Some(_) => len,
                                None => len - len % world,
                            };
                            if let Ok(plan) = Plan::new(collective, algorithm, world, len) {
                                plans.push(plan);
                            }
                        }
                    }
                }
            }
        }
        plans
    }

    #[test]
    fn built_in_plans_cover_all_eight_collectives_and_their_roots() {
        let plans = built_in_plans(4);
        for kind in Collective::KINDS {
            for algorithm in [Algorithm::Direct, Algorithm::Ring] {
                let found = plans.iter().any(|plan| {
                    plan.algorithm() == algorithm
                        && plan.collective().with_root(0) == kind
                        && plan.collective().root().is_none_or(|root| root == 3)
                        && plan.world() == 4
                });
                // All-to-all has a direct plan only.
                let expected = algorithm == Algorithm::Direct || kind != Collective::AllToAll;
                assert_eq!(found, expected, "{kind} {algorithm}");
            }
        }
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
        let queue = StepQueue::new(&ring, 3, 6).unwrap();
        assert!(queue.stages.is_empty());
        assert_eq!(queue.scratch, vec![2, 2, 2]);
        assert_eq!(queue.senders, vec![vec![2], vec![0], vec![1]]);
        assert_eq!(
            queue.folds,
            vec![
                Fold {
                    to: 0,
                    range: 4..6,
                    inputs: vec![Input::Own, scratch(0, 2)],
                    accumulator: None
                },
                Fold {
                    to: 1,
                    range: 0..2,
                    inputs: vec![scratch(0, 0), Input::Own],
                    accumulator: None
                },
                Fold {
                    to: 2,
                    range: 2..4,
                    inputs: vec![scratch(0, 1), Input::Own],
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
        let step = &plan.steps()[0];
        assert!(
            !step.overwritten_sources().is_empty(),
            "the core sets every source aside"
        );
        let queue = StepQueue::new(step, 4, 10).unwrap();
        assert!(
            queue.stages.is_empty(),
            "the folds follow the sends on each stream"
        );
        assert!(
            queue
                .sends
                .iter()
                .all(|send| send.read == Read::Buffer { start: 0 })
        );
        assert_eq!(queue.scratch, vec![30; 4]);
        let fold = queue.folds.iter().find(|fold| fold.to == 2).unwrap();
        assert_eq!(fold.range, 0..10);
        assert_eq!(
            fold.inputs,
            vec![scratch(0, 0), scratch(10, 1), Input::Own, scratch(20, 3)]
        );
    }

    #[test]
    fn an_overwriting_swap_of_one_range_stages_both_sources() {
        let swap = step(false, vec![transfer(0, 1, 0..4), transfer(1, 0, 2..6)]);
        let queue = StepQueue::new(&swap, 2, 8).unwrap();
        assert_eq!(
            queue.stages,
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
        assert_eq!(queue.staging, vec![4, 4]);
        assert!(
            queue
                .sends
                .iter()
                .all(|send| matches!(send.land, Land::Buffer { .. }))
        );
        // Disjoint ranges need no copy.
        let apart = step(false, vec![transfer(0, 1, 0..4), transfer(1, 0, 4..8)]);
        assert!(StepQueue::new(&apart, 2, 8).unwrap().stages.is_empty());
    }

    #[test]
    fn transfers_that_land_elsewhere_read_at_their_range_and_write_at_their_target() {
        // Overwriting: rank 0's 0..2 lands at 5..7 of rank 1 (read in place); rank 1's 5..7
        // lands at 2..4 of rank 0 (its source is written: staged).
        let moved = step(false, vec![landing(0, 1, 0..2, 5), landing(1, 0, 5..7, 2)]);
        let queue = StepQueue::new(&moved, 2, 8).unwrap();
        assert_eq!(
            queue.sends,
            vec![
                send(
                    0,
                    1,
                    2,
                    Read::Buffer { start: 0 },
                    Land::Buffer { start: 5 }
                ),
                send(
                    1,
                    0,
                    2,
                    Read::Staging { offset: 0 },
                    Land::Buffer { start: 2 }
                ),
            ]
        );
        assert_eq!(
            queue.stages,
            vec![Stage {
                rank: 1,
                range: 5..7,
                offset: 0
            }]
        );
        // Combining: two senders' ranges land shifted and overlap on rank 1's 3..5.
        let folded = step(true, vec![landing(0, 1, 4..8, 1), landing(2, 1, 0..4, 3)]);
        let queue = StepQueue::new(&folded, 3, 8).unwrap();
        assert!(queue.stages.is_empty());
        assert_eq!(queue.senders[1], vec![0, 2]);
        let folds: Vec<(Range<usize>, Vec<Input>)> = queue
            .folds
            .iter()
            .map(|fold| (fold.range.clone(), fold.inputs.clone()))
            .collect();
        // Rank 0's 4..8 sits at scratch 0..4, rank 2's 0..4 at 4..8.
        assert_eq!(
            folds,
            vec![
                (1..3, vec![scratch(0, 0), Input::Own]),
                (3..5, vec![scratch(2, 0), Input::Own, scratch(4, 2)]),
                (5..7, vec![Input::Own, scratch(6, 2)]),
            ]
        );
        let reads: Vec<(usize, Read)> = queue.sends.iter().map(|s| (s.from, s.read)).collect();
        assert_eq!(
            reads,
            vec![
                (0, Read::Buffer { start: 4 }),
                (2, Read::Buffer { start: 0 })
            ]
        );
    }

    #[test]
    fn a_local_copy_runs_on_its_own_rank_and_is_staged_only_when_it_overlaps_a_write() {
        // Rank 0 copies 0..2 to 4..6 of its own buffer: nothing writes 0..2, read in place.
        let apart = step(false, vec![landing(0, 0, 0..2, 4)]);
        let queue = StepQueue::new(&apart, 1, 6).unwrap();
        assert!(queue.stages.is_empty());
        assert_eq!(queue.senders, vec![Vec::<usize>::new()], "no other rank");
        assert_eq!(
            queue.sends,
            vec![send(
                0,
                0,
                2,
                Read::Buffer { start: 0 },
                Land::Buffer { start: 4 }
            )]
        );
        // Rank 0 shifts 0..3 one place up, onto its own source: staged first.
        let shift = step(false, vec![landing(0, 0, 0..3, 1)]);
        let queue = StepQueue::new(&shift, 1, 4).unwrap();
        assert_eq!(queue.staging, vec![3]);
        assert_eq!(queue.sends[0].read, Read::Staging { offset: 0 });
        assert_eq!(queue.sends[0].land, Land::Buffer { start: 1 });
    }

    #[test]
    fn a_self_transfer_folds_right_after_the_receivers_own_value() {
        // Rank 1 folds rank 0's block, its own, its own block 2..4 (which nothing writes: read in
        // place), then rank 2's.
        let fold = step(
            true,
            vec![
                landing(2, 1, 0..2, 0),
                landing(1, 1, 2..4, 0),
                landing(0, 1, 0..2, 0),
            ],
        );
        let queue = StepQueue::new(&fold, 3, 4).unwrap();
        assert_eq!(
            queue.folds,
            vec![Fold {
                to: 1,
                range: 0..2,
                inputs: vec![
                    scratch(0, 0),
                    Input::Own,
                    Input::Buffer { start: 2 },
                    scratch(2, 2)
                ],
                accumulator: None
            }]
        );
        assert_eq!(queue.senders[1], vec![0, 2], "no wait on itself");
        assert!(queue.sends.iter().all(|send| send.from != send.to));
        // Folding 0..2 into 1..3 of the same rank: the source is written, so it is copied to
        // scratch on the rank's own stream (before any fold), not staged.
        let shifted = step(true, vec![landing(0, 0, 0..2, 1)]);
        let queue = StepQueue::new(&shifted, 1, 4).unwrap();
        assert!(queue.stages.is_empty());
        assert_eq!(
            queue.sends,
            vec![send(
                0,
                0,
                2,
                Read::Buffer { start: 0 },
                Land::Scratch { offset: 0 }
            )]
        );
        assert_eq!(queue.folds[0].inputs, vec![Input::Own, scratch(0, 0)]);
        assert_eq!(queue.folds[0].range, 1..3);
    }

    #[test]
    fn a_direct_all_to_all_stages_every_source_and_lands_each_block_at_its_senders_position() {
        let (world, block) = (3, 2);
        let plan = Plan::new(
            Collective::AllToAll,
            Algorithm::Direct,
            world,
            world * block,
        )
        .unwrap();
        let step = &plan.steps()[0];
        let queue = StepQueue::new(step, world, world * block).unwrap();
        // Every block but a rank's own leaves it and another lands on it.
        assert_eq!(queue.staging, vec![(world - 1) * block; world]);
        assert_eq!(queue.stages.len(), world * (world - 1));
        for send in &queue.sends {
            let Read::Staging { offset } = send.read else {
                panic!("{send:?} reads in place")
            };
            let stage = queue
                .stages
                .iter()
                .find(|stage| stage.rank == send.from && stage.offset == offset)
                .unwrap();
            assert_eq!(
                stage.range,
                send.to * block..(send.to + 1) * block,
                "{send:?}"
            );
            assert_eq!(
                send.land,
                Land::Buffer {
                    start: send.from * block
                }
            );
        }
    }

    #[test]
    fn overwriting_steps_stage_the_cores_snapshots_and_combining_steps_nothing() {
        let mut staged = 0;
        for plan in built_in_plans(9) {
            for step in plan.steps() {
                let queue = StepQueue::new(step, plan.world(), plan.buffer_len()).unwrap();
                let stages: Vec<(usize, Range<usize>)> = queue
                    .stages
                    .iter()
                    .map(|stage| (stage.rank, stage.range.clone()))
                    .collect();
                let expected = if step.combine {
                    Vec::new()
                } else {
                    step.overwritten_sources()
                };
                assert_eq!(
                    stages,
                    expected,
                    "{} {} W={}",
                    plan.collective(),
                    plan.algorithm(),
                    plan.world()
                );
                staged += stages.len();
            }
        }
        println!("{staged} staged sources over every built-in plan up to W = 9");
    }

    #[test]
    fn step_violations_are_the_cores_typed_errors() {
        let check = |combine, transfers| StepQueue::new(&step(combine, transfers), 3, 8);
        assert!(matches!(
            check(true, vec![transfer(0, 3, 0..1)]),
            Err(CudaError::Step(StepViolation::NoSuchRank { rank: 3, .. }))
        ));
        assert!(matches!(
            check(false, vec![landing(0, 1, 4..6, 7)]),
            Err(CudaError::Step(StepViolation::OutOfBounds {
                transfer: 0,
                ..
            }))
        ));
        assert!(matches!(
            check(false, vec![transfer(0, 2, 0..3), landing(1, 2, 5..7, 2)]),
            Err(CudaError::Step(StepViolation::DoubleWrite {
                rank: 2,
                element: 2,
                ..
            }))
        ));
        assert!(matches!(
            check(true, vec![transfer(0, 1, 0..3), landing(0, 1, 5..6, 1)]),
            Err(CudaError::Step(StepViolation::DuplicateSource {
                rank: 1,
                element: 1,
                from: 0
            }))
        ));
        // Two senders to one element is what a fold is; a rank may send to itself.
        assert!(check(true, vec![transfer(0, 2, 0..3), transfer(1, 2, 2..4)]).is_ok());
        assert!(check(false, vec![landing(1, 1, 0..2, 4)]).is_ok());
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
        // One-step direct all-reduce, by hand: Plan::new takes two steps at this world.
        let world = FOLD_MAX + 4;
        let mut parts = Plan::new(
            Collective::AllReduce(ReduceOperation::Sum),
            Algorithm::Ring,
            world,
            5,
        )
        .unwrap()
        .into_parts();
        parts.steps = vec![step(
            true,
            (0..world)
                .flat_map(|from| {
                    (0..world)
                        .filter(move |&to| to != from)
                        .map(move |to| transfer(from, to, 0..5))
                })
                .collect(),
        )];
        let plan = Plan::from_parts(parts).unwrap();
        let queue = StepQueue::new(&plan.steps()[0], world, 5).unwrap();
        for fold in &queue.folds {
            assert_eq!(fold.inputs.len(), world);
            assert_eq!(fold.accumulator, Some((world - 1) * 5));
        }
        assert_eq!(queue.scratch, vec![world * 5; world]);
        let (scratch, staging) = plan_needs(&plan).unwrap();
        assert_eq!((scratch[0], staging[0]), (world * 5, 0));
    }

    /// A stand-in for the device, on host values: runs a queue as `exchange.rs` does — stages,
    /// then copies (in the given order, reading live buffers), then folds through their
    /// launches (in the given order, each launch element by element, reading an element of
    /// every input right before writing it, as a kernel thread does) — with `op` as the fold's
    /// operator. It also asserts what the `unsafe` blocks rely on: a copy within one buffer
    /// reads apart from where it lands, and a fold's inputs in the working buffer are its own
    /// segment or apart from it.
    fn run_queue(
        queue: &StepQueue,
        buffers: &mut [Vec<i64>],
        op: fn(i64, i64) -> i64,
        reverse: bool,
    ) {
        let world = buffers.len();
        let apart = |a: usize, b: usize, len: usize| a + len <= b || b + len <= a;
        let mut staging: Vec<Vec<i64>> = (0..world).map(|r| vec![0; queue.staging[r]]).collect();
        let mut scratch: Vec<Vec<i64>> = (0..world).map(|r| vec![0; queue.scratch[r]]).collect();
        for stage in &queue.stages {
            let values = buffers[stage.rank][stage.range.clone()].to_vec();
            staging[stage.rank][stage.offset..stage.offset + values.len()].copy_from_slice(&values);
        }
        let mut sends: Vec<&Send> = queue.sends.iter().collect();
        let mut folds: Vec<&Fold> = queue.folds.iter().collect();
        if reverse {
            sends.reverse();
            folds.reverse();
        }
        for send in sends {
            if let (true, Read::Buffer { start }, Land::Buffer { start: at }) =
                (send.from == send.to, send.read, send.land)
            {
                assert!(apart(start, at, send.len), "{send:?} overlaps itself");
            }
            let values = match send.read {
                Read::Buffer { start } => buffers[send.from][start..start + send.len].to_vec(),
                Read::Staging { offset } => staging[send.from][offset..offset + send.len].to_vec(),
            };
            match send.land {
                Land::Buffer { start } => {
                    buffers[send.to][start..start + send.len].copy_from_slice(&values)
                }
                Land::Scratch { offset } => {
                    scratch[send.to][offset..offset + send.len].copy_from_slice(&values)
                }
            }
        }
        for fold in folds {
            let (to, len) = (fold.to, fold.range.len());
            for input in &fold.inputs {
                if let Input::Buffer { start } = *input {
                    assert!(apart(start, fold.range.start, len), "{fold:?}");
                }
            }
            for launch in launches(fold.inputs.len()) {
                let mut elements: Vec<usize> = (0..len).collect();
                if reverse {
                    elements.reverse();
                }
                for i in elements {
                    let read = |input: &Input| match *input {
                        Input::Own => buffers[to][fold.range.start + i],
                        Input::Buffer { start } => buffers[to][start + i],
                        Input::Scratch { offset, .. } => scratch[to][offset + i],
                    };
                    let mut values = launch.operands.clone().map(|j| read(&fold.inputs[j]));
                    let first = if launch.from_accumulator {
                        scratch[to][fold.accumulator.unwrap() + i]
                    } else {
                        values.next().unwrap()
                    };
                    let result = values.fold(first, op);
                    if launch.into_accumulator {
                        scratch[to][fold.accumulator.unwrap() + i] = result;
                    } else {
                        buffers[to][fold.range.start + i] = result;
                    }
                }
            }
        }
    }

    /// The values folded into one element, each keyed by its place in the contract's order:
    /// `(rank, 0)` is the receiver's own value, `(rank, 1)` a transfer's from `rank`.
    type Terms = Vec<((usize, u8), i64)>;

    /// The contract's step on host values, written from its text and nothing else: every
    /// transfer reads `range` of its sender's buffer as it was before the step and lands at
    /// `at..`; an overwriting step copies it there, a combining step folds every element that
    /// receives anything over the senders below the receiver ascending, the receiver's own value,
    /// a self-transfer's value, the senders above ascending. (The step was checked: one writer
    /// per overwritten element, one value per sender per folded element.)
    fn reference_step(step: &Step, buffers: &mut [Vec<i64>], op: fn(i64, i64) -> i64) {
        let before = buffers.to_vec();
        // (receiver, element) -> the terms that fold into it.
        let mut terms: Vec<Vec<Terms>> = before
            .iter()
            .map(|buffer| vec![Vec::new(); buffer.len()])
            .collect();
        for transfer in &step.transfers {
            for (i, element) in transfer.target().enumerate() {
                let value = before[transfer.from][transfer.range.start + i];
                if step.combine {
                    terms[transfer.to][element].push(((transfer.from, 1), value));
                } else {
                    buffers[transfer.to][element] = value;
                }
            }
        }
        for (to, elements) in terms.iter_mut().enumerate() {
            for (element, terms) in elements.iter_mut().enumerate() {
                if terms.is_empty() {
                    continue;
                }
                terms.push(((to, 0), before[to][element]));
                terms.sort_unstable_by_key(|(key, _)| *key);
                let mut values = terms.iter().map(|(_, value)| *value);
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

    /// Lay `step` out and run it on the stand-in in both orders; each must give the reference.
    fn check_step(step: &Step, start: &[Vec<i64>], case: &str) {
        let (world, buffer_len) = (start.len(), start.first().map_or(0, Vec::len));
        let queue = StepQueue::new(step, world, buffer_len).unwrap();
        let mut reference = start.to_vec();
        reference_step(step, &mut reference, ordered);
        for reverse in [false, true] {
            let mut device = start.to_vec();
            run_queue(&queue, &mut device, ordered, reverse);
            assert_eq!(device, reference, "{case} (reversed {reverse}): {step:?}");
        }
    }

    #[test]
    fn every_built_in_plan_laid_out_computes_what_the_contract_says_step_by_step() {
        let wide = built_in_plans(FOLD_MAX + 3)
            .into_iter()
            .filter(|plan| plan.world() > FOLD_MAX && plan.algorithm() == Algorithm::Direct);
        let mut seen = std::collections::HashSet::new();
        for plan in built_in_plans(9).into_iter().chain(wide) {
            seen.insert(plan.collective().with_root(0));
            let mut buffers = initial(plan.world(), plan.buffer_len());
            for (index, step) in plan.steps().iter().enumerate() {
                let case = format!(
                    "{} {} W={} n={}: step {index}",
                    plan.collective(),
                    plan.algorithm(),
                    plan.world(),
                    plan.input_len()
                );
                check_step(step, &buffers, &case);
                reference_step(step, &mut buffers, ordered);
            }
        }
        assert_eq!(seen.len(), Collective::KINDS.len(), "{seen:?}");
    }

    #[test]
    fn custom_steps_that_stage_overlap_shift_and_copy_locally_compute_what_the_contract_says() {
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
            // Blocks that land elsewhere, a local shift onto its own source, a local copy apart.
            step(
                false,
                vec![
                    landing(0, 1, 0..3, 5),
                    landing(1, 0, 5..8, 0),
                    landing(2, 2, 0..5, 1),
                    landing(1, 1, 0..2, 3),
                ],
            ),
            // Folds with self-transfers: one read in place, one onto its own source, and shifted
            // senders around them.
            step(
                true,
                vec![
                    landing(0, 0, 6..8, 0),
                    landing(1, 0, 0..4, 1),
                    landing(2, 0, 3..6, 2),
                    landing(1, 1, 0..4, 2),
                    landing(2, 1, 4..8, 0),
                    landing(0, 2, 0..8, 0),
                ],
            ),
        ];
        for (index, step) in steps.iter().enumerate() {
            check_step(step, &initial(3, 8), &format!("custom step {index}"));
        }
    }

    /// A small deterministic generator (xorshift64*), so the random steps are the same in every
    /// run.
    struct Random(u64);

    impl Random {
        fn below(&mut self, bound: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % bound.max(1)
        }
    }

    #[test]
    fn random_steps_with_offsets_and_local_transfers_compute_what_the_contract_says() {
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        let (mut accepted, mut refused) = (0, 0);
        for case in 0..4000 {
            let world = 1 + random.below(4);
            let buffer_len = 1 + random.below(10);
            let transfers = (0..random.below(6))
                .map(|_| {
                    let len = random.below(4);
                    let start = random.below(buffer_len + 1);
                    landing(
                        random.below(world),
                        random.below(world),
                        start..start + len,
                        random.below(buffer_len + 1),
                    )
                })
                .collect();
            let step = step(random.below(2) == 1, transfers);
            match step.lay_out(world, buffer_len) {
                Ok(_) => {
                    accepted += 1;
                    check_step(
                        &step,
                        &initial(world, buffer_len),
                        &format!("random case {case}"),
                    );
                }
                Err(violation) => {
                    refused += 1;
                    let error = StepQueue::new(&step, world, buffer_len).unwrap_err();
                    assert!(
                        matches!(&error, CudaError::Step(seen) if *seen == violation),
                        "{error}"
                    );
                }
            }
        }
        println!("{accepted} random steps run, {refused} refused as the core refuses them");
        assert!(accepted > 1000 && refused > 100, "{accepted} {refused}");
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
