//! A step's rules, stated once: what a [`Transfer`] and a [`Step`] are, when a step is valid
//! on a layout, which sources a device must set aside, and the order a fold takes its operands.
//! Every executor drives its steps through [`StepLayout`] (the simulated device, the CUDA
//! executor) and the symbolic checker [`verify`](crate::verify) states the same rules on symbols.
//!
//! # The rules
//! - A transfer reads `range` of rank `from`'s buffer **as it was before the step** and lands at
//!   `at..at + range.len()` of rank `to`'s buffer; `from == to` is a local copy or fold.
//! - Both ranks are in the world, the range is not inverted, and both the source range and the
//!   target range lie inside the buffers ([`StepViolation`]).
//! - An **overwriting** step writes every target element from at most one transfer.
//! - A **combining** step folds into every target element the values received, each sender at
//!   most once, in the contract's order: the senders below the receiver ascending, the receiver's
//!   own value, a self-transfer's value, the senders above ascending ([`Write::operands`]).
//! - A source that a write of the same step overlaps on its own rank must be set aside before the
//!   first write ([`StepLayout::snapshots`]); every other source is read in place.

use std::collections::BTreeMap;
use std::ops::Range;

/// One transfer of a step: `range` of rank `from`'s buffer, as it was before the step, lands at
/// `at..at + range.len()` of rank `to`'s buffer. `from == to` is a local copy (or fold).
///
/// ```
/// use ruccl_core::Transfer;
///
/// // The v2 meaning: the same indices on both ranks.
/// assert_eq!(Transfer::new(0, 1, 4..8).target(), 4..8);
/// // Contract v3: block 1 of rank 0 lands as block 0 of rank 1.
/// let moved = Transfer { from: 0, to: 1, range: 4..8, at: 0 };
/// assert_eq!(moved.target(), 0..4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Transfer {
    /// The sending rank.
    pub from: usize,
    /// The receiving rank (the sender itself for a local copy).
    pub to: usize,
    /// The elements read from the sender's buffer.
    pub range: Range<usize>,
    /// Where they land in the receiver's buffer: `at..at + range.len()`.
    pub at: usize,
}

impl Transfer {
    /// A transfer that lands at the same indices it is read from (`at = range.start`).
    pub fn new(from: usize, to: usize, range: Range<usize>) -> Transfer {
        let at = range.start;
        Transfer {
            from,
            to,
            range,
            at,
        }
    }

    /// The elements written on the receiver: `at..at + range.len()` (saturating; an inverted
    /// range gives an empty target).
    pub fn target(&self) -> Range<usize> {
        self.at..self.at.saturating_add(self.range.len())
    }

    /// Whether the transfer moves anything between two ranks (a local copy is not link
    /// traffic, and an empty range moves nothing).
    pub fn crosses_a_link(&self) -> bool {
        self.from != self.to && !self.range.is_empty()
    }
}

/// One step: transfers that happen at once, all reading the state from before the step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// `true`: every received element is folded into the receiver's own (see
    /// [`Write::operands`] for the order); `false`: it overwrites it.
    pub combine: bool,
    /// The transfers of the step.
    pub transfers: Vec<Transfer>,
}

/// A step in which every rank of `ranks` folds every other's `range` into its own
/// ([`Step::clique`]): every one of them ends with the same fold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Clique {
    /// The ranks of the group, ascending: the fold's order.
    pub ranks: Vec<usize>,
    /// The elements every rank of the group sends, and folds at the same indices.
    pub range: Range<usize>,
}

/// Why a step cannot run on a layout: the rule it breaks and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepViolation {
    /// A transfer names a rank outside the world.
    #[error("transfer {transfer}: rank {rank} is outside the world of {world} ranks")]
    NoSuchRank {
        /// The transfer's index in the step.
        transfer: usize,
        /// The rank named.
        rank: usize,
        /// The world.
        world: usize,
    },
    /// A transfer's range is inverted, or its source or target leaves the buffers.
    #[error(
        "transfer {transfer} (rank {from} to rank {to}): elements {start}..{end} landing at {at} are not ranges inside the buffers of {buffer_len} elements"
    )]
    OutOfBounds {
        /// The transfer's index in the step.
        transfer: usize,
        /// The sender.
        from: usize,
        /// The receiver.
        to: usize,
        /// The source range's start.
        start: usize,
        /// The source range's end.
        end: usize,
        /// Where the range lands on the receiver.
        at: usize,
        /// The buffer length.
        buffer_len: usize,
    },
    /// Two transfers of one overwriting step write the same element.
    #[error(
        "rank {rank} element {element} is overwritten twice in one step, by rank {first} and rank {second}"
    )]
    DoubleWrite {
        /// The receiving rank.
        rank: usize,
        /// The element (buffer index).
        element: usize,
        /// One sender.
        first: usize,
        /// The other sender.
        second: usize,
    },
    /// One sender's value reaches the same element twice in one combining step.
    #[error(
        "rank {rank} element {element} receives rank {from}'s value twice in one combining step"
    )]
    DuplicateSource {
        /// The receiving rank.
        rank: usize,
        /// The element (buffer index).
        element: usize,
        /// The sender.
        from: usize,
    },
}

impl Step {
    /// Check every transfer of this step against a world of `world` ranks with buffers of
    /// `buffer_len` elements: ranks in the world, ranges inside both buffers, and single writers
    /// (no element overwritten twice; no sender folded into an element twice).
    pub fn check(&self, world: usize, buffer_len: usize) -> Result<(), StepViolation> {
        for (index, transfer) in self.transfers.iter().enumerate() {
            for rank in [transfer.from, transfer.to] {
                if rank >= world {
                    return Err(StepViolation::NoSuchRank {
                        transfer: index,
                        rank,
                        world,
                    });
                }
            }
            let range = &transfer.range;
            let target_end = transfer.at.checked_add(range.len());
            if range.start > range.end
                || range.end > buffer_len
                || target_end.is_none_or(|end| end > buffer_len)
            {
                return Err(StepViolation::OutOfBounds {
                    transfer: index,
                    from: transfer.from,
                    to: transfer.to,
                    start: range.start,
                    end: range.end,
                    at: transfer.at,
                    buffer_len,
                });
            }
        }
        self.check_single_writers()
    }

    /// Overwriting: no element written twice. Combining: no sender reaches an element twice.
    fn check_single_writers(&self) -> Result<(), StepViolation> {
        let mut order: Vec<&Transfer> = self.non_empty().collect();
        // Overwrites may not overlap for one receiver at all; folds only for one (receiver, sender).
        let group =
            |transfer: &Transfer| (transfer.to, if self.combine { transfer.from } else { 0 });
        order.sort_unstable_by_key(|transfer| (group(transfer), transfer.at));
        for pair in order.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            if group(first) != group(second) || second.at >= first.target().end {
                continue;
            }
            let element = second.at;
            return Err(if self.combine {
                StepViolation::DuplicateSource {
                    rank: first.to,
                    element,
                    from: first.from,
                }
            } else {
                StepViolation::DoubleWrite {
                    rank: first.to,
                    element,
                    first: first.from,
                    second: second.from,
                }
            });
        }
        Ok(())
    }

    fn non_empty(&self) -> impl Iterator<Item = &Transfer> {
        self.transfers
            .iter()
            .filter(|transfer| !transfer.range.is_empty())
    }

    /// The source ranges a device must read from a copy: every distinct `(from, range)` of a
    /// non-empty transfer whose range overlaps a range some transfer of this step writes on
    /// `from` (its target). Since every transfer reads the state from before the step, those
    /// values must be set aside before the first write (direct all-reduce: every rank's whole
    /// buffer); ring and halving-doubling steps never need it. Sorted by `(from, start, end)`.
    pub fn overwritten_sources(&self) -> Vec<(usize, Range<usize>)> {
        let written = self.written_by_rank();
        let mut sources: Vec<(usize, Range<usize>)> = self
            .non_empty()
            .filter(|transfer| overlaps_any(&written, transfer.from, &transfer.range))
            .map(|transfer| (transfer.from, transfer.range.clone()))
            .collect();
        sources.sort_unstable_by_key(|(from, range)| (*from, range.start, range.end));
        sources.dedup();
        sources
    }

    /// The step as a clique, if it is one: a combining step in which every rank of a group of
    /// two or more sends the same non-empty range to every other rank of the group, landing
    /// where it is read (`at = range.start`), and nothing else moves. Every receiver then folds
    /// the same values in the same order — the group's, ranks ascending ([`Write::operands`]) —
    /// so a device may fold each element once and store the result on every rank of the group,
    /// reading each rank's range once and writing it once, with nothing set aside (every value
    /// a fold reads is read before that element is written). The one-step direct all-reduce is
    /// a clique of the whole world.
    pub fn clique(&self) -> Option<Clique> {
        let first = self.transfers.first()?;
        let range = first.range.clone();
        if !self.combine
            || range.is_empty()
            || self
                .transfers
                .iter()
                .any(|transfer| transfer.range != range || transfer.at != range.start)
        {
            return None;
        }
        let mut ranks: Vec<usize> = self
            .transfers
            .iter()
            .map(|transfer| transfer.from)
            .collect();
        ranks.sort_unstable();
        ranks.dedup();
        let size = ranks.len();
        // Every ordered pair of distinct members exactly once: `size·(size-1)` transfers, each
        // between two members, no pair twice.
        if size < 2 || self.transfers.len() != size * (size - 1) {
            return None;
        }
        let member = |rank: usize| ranks.binary_search(&rank).ok();
        let mut seen = vec![false; size * size];
        for transfer in &self.transfers {
            let (Some(from), Some(to)) = (member(transfer.from), member(transfer.to)) else {
                return None;
            };
            let pair = &mut seen[from * size + to];
            if from == to || *pair {
                return None;
            }
            *pair = true;
        }
        Some(Clique { ranks, range })
    }

    /// Every non-empty target `(to, range)`, sorted by `(to, start)`.
    fn written_by_rank(&self) -> Vec<(usize, Range<usize>)> {
        let mut written: Vec<(usize, Range<usize>)> = self
            .non_empty()
            .map(|transfer| (transfer.to, transfer.target()))
            .collect();
        written.sort_unstable_by_key(|(to, range)| (*to, range.start));
        written
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
        // The union per receiver: ranges sorted by start, merged where they overlap.
        let mut total = 0;
        let mut open: Option<(usize, Range<usize>)> = None;
        for (to, range) in self.written_by_rank() {
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

    /// Check this step (see [`check`](Self::check)) and lay it out for a device: what to set
    /// aside, then every write with its operands in the contract's order.
    pub fn lay_out(&self, world: usize, buffer_len: usize) -> Result<StepLayout, StepViolation> {
        self.check(world, buffer_len)?;
        let written = self.written_by_rank();
        let mut layout = StepLayout::default();
        // One copy per distinct source range, however many receivers read it (what
        // `copied_aside` counts).
        let mut copies: BTreeMap<(usize, usize, usize), usize> = BTreeMap::new();
        let mut pieces: Vec<Piece> = Vec::new();
        for (index, transfer) in self.transfers.iter().enumerate() {
            if transfer.range.is_empty() {
                continue;
            }
            let source = if overlaps_any(&written, transfer.from, &transfer.range) {
                let key = (transfer.from, transfer.range.start, transfer.range.end);
                let snapshot = *copies.entry(key).or_insert_with(|| {
                    layout
                        .snapshots
                        .push((transfer.from, transfer.range.clone()));
                    layout.snapshots.len() - 1
                });
                Source::Copied {
                    snapshot,
                    offset: 0,
                }
            } else {
                Source::Live {
                    rank: transfer.from,
                    start: transfer.range.start,
                }
            };
            pieces.push(Piece {
                transfer: index,
                from: transfer.from,
                offset: 0,
                source,
            });
        }
        if self.combine {
            layout.lay_out_folds(self, pieces);
        } else {
            layout.writes = pieces
                .into_iter()
                .map(|piece| {
                    let target = self.transfers[piece.transfer].target();
                    Write {
                        to: self.transfers[piece.transfer].to,
                        range: target,
                        kind: WriteKind::Copy(piece),
                    }
                })
                .collect();
        }
        Ok(layout)
    }
}

/// Whether `range` on `rank` overlaps any of `written` (sorted by `(rank, start)`).
fn overlaps_any(written: &[(usize, Range<usize>)], rank: usize, range: &Range<usize>) -> bool {
    let first = written.partition_point(|(to, _)| *to < rank);
    written[first..]
        .iter()
        .take_while(|(to, target)| *to == rank && target.start < range.end)
        .any(|(_, target)| target.end > range.start)
}

/// Where a write reads its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Rank `rank`'s buffer from `start`: nothing in the step writes it.
    Live {
        /// The sending rank.
        rank: usize,
        /// The first element.
        start: usize,
    },
    /// A range set aside before the step's first write: [`StepLayout::snapshots`]`[snapshot]`
    /// from element `offset`.
    Copied {
        /// Index into [`StepLayout::snapshots`].
        snapshot: usize,
        /// Offset into it.
        offset: usize,
    },
}

impl Source {
    /// The same source, `by` elements further on.
    pub fn advanced(self, by: usize) -> Source {
        match self {
            Source::Live { rank, start } => Source::Live {
                rank,
                start: start + by,
            },
            Source::Copied { snapshot, offset } => Source::Copied {
                snapshot,
                offset: offset + by,
            },
        }
    }
}

/// The part of one transfer that feeds one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The transfer's index in [`Step::transfers`].
    pub transfer: usize,
    /// Its sender.
    pub from: usize,
    /// How far into the transfer's range the write's first element is.
    pub offset: usize,
    /// Where the device reads it.
    pub source: Source,
}

/// One operand of a fold, in the contract's order ([`Write::operands`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// The receiver's own value, before the step.
    Own,
    /// A received (or locally copied) value.
    Received(Piece),
}

/// What one write does to its range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// Overwrite with one transfer's values.
    Copy(Piece),
    /// Fold, from the left: `before`, then the receiver's own value, then `after`.
    Fold {
        /// Senders below the receiver, ascending.
        before: Vec<Piece>,
        /// A self-transfer of the receiver, then the senders above it, ascending.
        after: Vec<Piece>,
    },
}

/// One write of a step: `range` of rank `to`'s buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The receiving rank.
    pub to: usize,
    /// The elements written.
    pub range: Range<usize>,
    /// How.
    pub kind: WriteKind,
}

impl Write {
    /// The operands in the order the contract folds them: for a fold, the senders below the
    /// receiver ascending, [`Operand::Own`], a self-transfer, the senders above ascending —
    /// `((x0 ⊕ x1) ⊕ x2) …`; for a copy, its one piece.
    pub fn operands(&self) -> impl Iterator<Item = Operand> + '_ {
        let (before, own, after): (&[Piece], bool, &[Piece]) = match &self.kind {
            WriteKind::Copy(piece) => (std::slice::from_ref(piece), false, &[]),
            WriteKind::Fold { before, after } => (before, true, after),
        };
        before
            .iter()
            .map(|piece| Operand::Received(*piece))
            .chain(own.then_some(Operand::Own))
            .chain(after.iter().map(|piece| Operand::Received(*piece)))
    }
}

/// A checked step laid out for a device: set aside [`snapshots`](Self::snapshots), then apply
/// [`writes`](Self::writes) (disjoint, so in any order or at once).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepLayout {
    /// `(rank, range)` source ranges a write of this step changes, distinct: copy each before
    /// any write.
    pub snapshots: Vec<(usize, Range<usize>)>,
    /// The writes; they touch disjoint elements.
    pub writes: Vec<Write>,
}

impl StepLayout {
    /// Cut every receiver's incoming target ranges at every boundary into segments of one sender
    /// set, and fold each in the contract's order.
    fn lay_out_folds(&mut self, step: &Step, mut pieces: Vec<Piece>) {
        let to = |piece: &Piece| step.transfers[piece.transfer].to;
        pieces.sort_unstable_by_key(|piece| (to(piece), piece.from));
        for incoming in pieces.chunk_by(|a, b| to(a) == to(b)) {
            let receiver = to(&incoming[0]);
            let mut cuts: Vec<usize> = incoming
                .iter()
                .flat_map(|piece| {
                    let target = step.transfers[piece.transfer].target();
                    [target.start, target.end]
                })
                .collect();
            cuts.sort_unstable();
            cuts.dedup();
            for segment in cuts.windows(2) {
                let (start, end) = (segment[0], segment[1]);
                let mut before = Vec::new();
                let mut after = Vec::new();
                // `incoming` is sorted by sender, so both lists come out ascending, and a
                // self-transfer (sender == receiver) comes first in `after`.
                for piece in incoming {
                    let target = step.transfers[piece.transfer].target();
                    if target.start > start || end > target.end {
                        continue;
                    }
                    let by = start - target.start;
                    let piece = Piece {
                        offset: piece.offset + by,
                        source: piece.source.advanced(by),
                        ..*piece
                    };
                    if piece.from < receiver {
                        before.push(piece);
                    } else {
                        after.push(piece);
                    }
                }
                if before.is_empty() && after.is_empty() {
                    continue;
                }
                self.writes.push(Write {
                    to: receiver,
                    range: start..end,
                    kind: WriteKind::Fold { before, after },
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(combine: bool, transfers: Vec<Transfer>) -> Step {
        Step { combine, transfers }
    }

    #[test]
    fn a_ring_step_reads_every_source_in_place() {
        let ring = step(
            true,
            vec![
                Transfer::new(0, 1, 0..2),
                Transfer::new(1, 2, 2..4),
                Transfer::new(2, 0, 4..6),
            ],
        );
        let layout = ring.lay_out(3, 6).unwrap();
        assert!(layout.snapshots.is_empty());
        let first = &layout.writes[0];
        assert_eq!((first.to, first.range.clone()), (0, 4..6));
        let operands: Vec<Operand> = first.operands().collect();
        assert_eq!(operands.len(), 2);
        assert_eq!(operands[0], Operand::Own);
        assert!(matches!(
            operands[1],
            Operand::Received(Piece {
                from: 2,
                source: Source::Live { rank: 2, start: 4 },
                ..
            })
        ));
    }

    #[test]
    fn a_source_written_in_the_same_step_is_copied_first() {
        let swap = step(
            true,
            vec![Transfer::new(0, 1, 0..4), Transfer::new(1, 0, 0..4)],
        );
        assert_eq!(
            swap.lay_out(2, 4).unwrap().snapshots,
            vec![(0, 0..4), (1, 0..4)]
        );
    }

    #[test]
    fn a_self_transfer_folds_right_after_the_receivers_own_value() {
        // Rank 1 folds rank 0's block, its own, its own other block, then rank 2's.
        let fold = step(
            true,
            vec![
                Transfer {
                    from: 2,
                    to: 1,
                    range: 0..2,
                    at: 0,
                },
                Transfer {
                    from: 1,
                    to: 1,
                    range: 2..4,
                    at: 0,
                },
                Transfer {
                    from: 0,
                    to: 1,
                    range: 0..2,
                    at: 0,
                },
            ],
        );
        let layout = fold.lay_out(3, 4).unwrap();
        let order: Vec<Option<usize>> = layout.writes[0]
            .operands()
            .map(|operand| match operand {
                Operand::Own => None,
                Operand::Received(piece) => Some(piece.from),
            })
            .collect();
        assert_eq!(order, vec![Some(0), None, Some(1), Some(2)]);
    }

    #[test]
    fn a_local_copy_onto_its_own_source_is_set_aside() {
        // Rank 0 moves elements 0..3 one place up: the source overlaps the target.
        let shift = step(
            false,
            vec![Transfer {
                from: 0,
                to: 0,
                range: 0..3,
                at: 1,
            }],
        );
        let layout = shift.lay_out(1, 4).unwrap();
        assert_eq!(layout.snapshots, vec![(0, 0..3)]);
        assert_eq!(layout.writes[0].range, 1..4);
    }

    #[test]
    fn overlapping_senders_cut_the_receiver_into_segments_in_fold_order() {
        let fold = step(
            true,
            vec![
                Transfer::new(2, 1, 0..4),
                Transfer {
                    from: 0,
                    to: 1,
                    range: 0..4,
                    at: 2,
                },
            ],
        );
        let layout = fold.lay_out(3, 6).unwrap();
        let shapes: Vec<(Range<usize>, usize)> = layout
            .writes
            .iter()
            .map(|write| (write.range.clone(), write.operands().count()))
            .collect();
        assert_eq!(shapes, vec![(0..2, 2), (2..4, 3), (4..6, 2)]);
    }

    #[test]
    fn bad_transfers_are_typed_errors() {
        let cases = [
            (
                step(false, vec![Transfer::new(0, 3, 0..1)]),
                "outside the world",
            ),
            (
                step(
                    false,
                    vec![Transfer {
                        from: 0,
                        to: 1,
                        range: 0..2,
                        at: 3,
                    }],
                ),
                "not ranges",
            ),
            (
                step(
                    false,
                    vec![Transfer {
                        from: 0,
                        to: 1,
                        range: 0..1,
                        at: usize::MAX,
                    }],
                ),
                "not ranges",
            ),
            (
                step(
                    false,
                    vec![
                        Transfer::new(0, 2, 0..3),
                        Transfer {
                            from: 1,
                            to: 2,
                            range: 0..2,
                            at: 2,
                        },
                    ],
                ),
                "overwritten twice",
            ),
            (
                step(
                    true,
                    vec![
                        Transfer::new(0, 1, 0..3),
                        Transfer {
                            from: 0,
                            to: 1,
                            range: 3..4,
                            at: 1,
                        },
                    ],
                ),
                "twice in one combining step",
            ),
        ];
        for (bad, message) in cases {
            let error = bad.lay_out(3, 4).unwrap_err();
            assert!(error.to_string().contains(message), "{error}");
        }
    }

    /// Rank `rank`'s element `element` before the step, as a symbol.
    fn symbol(rank: usize, element: usize) -> String {
        format!("r{rank}e{element}")
    }

    /// What `step` leaves in every buffer by its definition: every transfer reads the state
    /// before the step; a combining step folds, from the left, the senders below the receiver
    /// ascending, the receiver's own value, a self-transfer, the senders above ascending; an
    /// overwriting step copies. `(a+b)` is a fold: the order shows.
    fn by_definition(step: &Step, world: usize, buffer_len: usize) -> Vec<Vec<String>> {
        let before: Vec<Vec<String>> = (0..world)
            .map(|rank| {
                (0..buffer_len)
                    .map(|element| symbol(rank, element))
                    .collect()
            })
            .collect();
        let mut after = before.clone();
        let mut received: BTreeMap<(usize, usize), BTreeMap<usize, String>> = BTreeMap::new();
        for transfer in &step.transfers {
            let key = 2 * transfer.from + usize::from(transfer.from == transfer.to);
            for (element, target) in transfer.range.clone().zip(transfer.at..) {
                received
                    .entry((transfer.to, target))
                    .or_default()
                    .insert(key, before[transfer.from][element].clone());
            }
        }
        for ((to, element), mut values) in received {
            if step.combine {
                values.insert(2 * to, before[to][element].clone());
            }
            let mut values = values.into_values();
            let first = values.next().unwrap_or_default();
            after[to][element] = if step.combine {
                values.fold(first, |into, value| format!("({into}+{value})"))
            } else {
                first
            };
        }
        after
    }

    /// What a device following `layout` leaves: snapshots first, then the writes in `order`,
    /// each reading the live buffers as they are then. Checks every piece against its transfer.
    fn by_layout(
        step: &Step,
        layout: &StepLayout,
        world: usize,
        buffer_len: usize,
        order: &[usize],
    ) -> Vec<Vec<String>> {
        let mut buffers: Vec<Vec<String>> = (0..world)
            .map(|rank| {
                (0..buffer_len)
                    .map(|element| symbol(rank, element))
                    .collect()
            })
            .collect();
        let snapshots: Vec<Vec<String>> = layout
            .snapshots
            .iter()
            .map(|(rank, range)| buffers[*rank][range.clone()].to_vec())
            .collect();
        for &index in order {
            let write = &layout.writes[index];
            let values: Vec<String> = (0..write.range.len())
                .map(|j| {
                    let value = |operand: Operand| match operand {
                        Operand::Own => buffers[write.to][write.range.start + j].clone(),
                        Operand::Received(piece) => {
                            let transfer = &step.transfers[piece.transfer];
                            assert_eq!(piece.from, transfer.from);
                            assert_eq!(transfer.to, write.to);
                            assert_eq!(write.range.start, transfer.at + piece.offset);
                            assert!(piece.offset + write.range.len() <= transfer.range.len());
                            match piece.source {
                                Source::Live { rank, start } => {
                                    assert_eq!(
                                        (rank, start),
                                        (transfer.from, transfer.range.start + piece.offset)
                                    );
                                    buffers[rank][start + j].clone()
                                }
                                Source::Copied { snapshot, offset } => {
                                    assert_eq!(
                                        layout.snapshots[snapshot],
                                        (transfer.from, transfer.range.clone())
                                    );
                                    assert_eq!(offset, piece.offset);
                                    snapshots[snapshot][offset + j].clone()
                                }
                            }
                        }
                    };
                    let mut operands = write.operands().map(value);
                    let first = operands.next().unwrap_or_default();
                    operands.fold(first, |into, value| format!("({into}+{value})"))
                })
                .collect();
            buffers[write.to][write.range.clone()].clone_from_slice(&values);
        }
        buffers
    }

    #[test]
    fn a_laid_out_step_leaves_what_the_step_defines_in_any_order_of_its_writes() {
        // SplitMix64: random steps of up to five transfers over at most four ranks and eight
        // elements; those `check` accepts are laid out and run both ways.
        let mut state = 0x5EED_0036_u64;
        let mut draw = |n: usize| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            usize::try_from((z ^ (z >> 31)) % n as u64).unwrap_or(0)
        };
        let mut checked = 0;
        for _ in 0..20_000 {
            let world = 1 + draw(4);
            let buffer_len = 1 + draw(8);
            let transfers = (0..1 + draw(5))
                .map(|_| {
                    let start = draw(buffer_len + 1);
                    let end = start + draw(buffer_len + 1 - start);
                    Transfer {
                        from: draw(world),
                        to: draw(world),
                        range: start..end,
                        at: draw(buffer_len + 1 - (end - start)),
                    }
                })
                .collect();
            let step = step(draw(2) == 0, transfers);
            let Ok(layout) = step.lay_out(world, buffer_len) else {
                continue;
            };
            checked += 1;
            let want = by_definition(&step, world, buffer_len);
            let forward: Vec<usize> = (0..layout.writes.len()).collect();
            let backward: Vec<usize> = forward.iter().rev().copied().collect();
            for order in [forward, backward] {
                assert_eq!(
                    by_layout(&step, &layout, world, buffer_len, &order),
                    want,
                    "{step:?}"
                );
            }
        }
        assert!(checked > 5_000, "only {checked} steps were valid");
    }

    #[test]
    fn a_self_transfer_is_no_link_traffic() {
        assert!(!Transfer::new(2, 2, 0..4).crosses_a_link());
        assert!(!Transfer::new(0, 1, 3..3).crosses_a_link());
        assert!(Transfer::new(0, 1, 0..1).crosses_a_link());
    }
}
