//! One step, checked and laid out before any element moves, independently of the element type.
//!
//! The contract says every transfer reads the state from *before* the step. A transfer's source
//! can only change during the step if some transfer of the same step writes to the sender within
//! that range; only such sources are copied aside ([`StepLayout::snapshots`]) before any write,
//! everything else is read in place. Writes are then laid out per receiving rank:
//!
//! - an overwriting step copies each transfer's range (at most one transfer writes an element,
//!   which is checked);
//! - a combining step cuts each receiver's incoming ranges at every range boundary into segments
//!   covered by one fixed set of senders (no sender twice, which is checked), and folds each
//!   segment as the contract orders it: the senders below the receiver, the receiver's own value,
//!   the senders above it.

use super::error::SimError;
use ruccl_core::Step;
use std::collections::BTreeMap;
use std::ops::Range;

/// Where a write reads `len` elements from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Rank `rank`'s buffer from `start`, untouched by the step.
    Live {
        /// The sending rank.
        rank: usize,
        /// The first element.
        start: usize,
    },
    /// Snapshot `index`, from `offset`.
    Copied {
        /// Index into [`StepLayout::snapshots`].
        index: usize,
        /// Offset into it.
        offset: usize,
    },
}

impl Source {
    /// The same source, `by` elements further on.
    fn advanced(self, by: usize) -> Source {
        match self {
            Source::Live { rank, start } => Source::Live {
                rank,
                start: start + by,
            },
            Source::Copied { index, offset } => Source::Copied {
                index,
                offset: offset + by,
            },
        }
    }
}

/// What one write does to `range` of rank `to`'s buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// Overwrite with the source.
    Copy(Source),
    /// Fold `before`, then the receiver's own values, then `after`, from the left.
    Fold {
        /// Senders below the receiver, ascending.
        before: Vec<Source>,
        /// Senders above the receiver, ascending.
        after: Vec<Source>,
    },
}

/// One write of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    /// The receiving rank.
    pub(crate) to: usize,
    /// The elements written.
    pub(crate) range: Range<usize>,
    /// How.
    pub(crate) kind: WriteKind,
}

/// A checked step: what to copy aside, then what to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StepLayout {
    /// Source ranges a write of this step changes: copied before any write, `(rank, range)`.
    pub(crate) snapshots: Vec<(usize, Range<usize>)>,
    /// The writes; they touch disjoint elements, so their order does not matter.
    pub(crate) writes: Vec<Write>,
}

impl StepLayout {
    /// Check `step` for a world of `world` ranks with buffers of `buffer_len` elements, and lay
    /// out its snapshots and writes. Empty transfers are ignored.
    pub(crate) fn new(step: &Step, world: usize, buffer_len: usize) -> Result<Self, SimError> {
        for (transfer, moved) in step.transfers.iter().enumerate() {
            for rank in [moved.from, moved.to] {
                if rank >= world {
                    return Err(SimError::NoSuchRank {
                        transfer,
                        rank,
                        world,
                    });
                }
            }
            if moved.from == moved.to {
                return Err(SimError::SelfTransfer {
                    transfer,
                    rank: moved.from,
                });
            }
            let range = &moved.range;
            if range.start > range.end {
                return Err(SimError::InvertedRange {
                    transfer,
                    start: range.start,
                    end: range.end,
                });
            }
            if range.end > buffer_len {
                return Err(SimError::RangeOutOfBounds {
                    transfer,
                    start: range.start,
                    end: range.end,
                    buffer_len,
                });
            }
        }
        let moved: Vec<Moved> = step
            .transfers
            .iter()
            .filter(|transfer| !transfer.range.is_empty())
            .map(|transfer| Moved {
                from: transfer.from,
                to: transfer.to,
                range: transfer.range.clone(),
                source: Source::Live {
                    rank: transfer.from,
                    start: transfer.range.start,
                },
            })
            .collect();
        check_single_writers(&moved, step.combine)?;
        let mut layout = StepLayout::default();
        let moved = layout.snapshot_changing_sources(moved, world);
        if step.combine {
            layout.lay_out_folds(moved);
        } else {
            layout.writes = moved
                .into_iter()
                .map(|moved| Write {
                    to: moved.to,
                    range: moved.range,
                    kind: WriteKind::Copy(moved.source),
                })
                .collect();
        }
        Ok(layout)
    }

    /// Copy aside every source range that a write of this step overlaps, and read from the copy.
    fn snapshot_changing_sources(&mut self, mut moved: Vec<Moved>, world: usize) -> Vec<Moved> {
        let mut written: Vec<Vec<Range<usize>>> = vec![Vec::new(); world];
        for transfer in &moved {
            written[transfer.to].push(transfer.range.clone());
        }
        for ranges in &mut written {
            ranges.sort_unstable_by_key(|range| range.start);
        }
        // One copy per distinct source range, however many receivers read it (what
        // `Step::copied_aside` counts, and the ledger records).
        let mut copies: BTreeMap<(usize, usize, usize), usize> = BTreeMap::new();
        for transfer in &mut moved {
            let changes = written[transfer.from]
                .iter()
                .take_while(|range| range.start < transfer.range.end)
                .any(|range| range.end > transfer.range.start);
            if changes {
                let key = (transfer.from, transfer.range.start, transfer.range.end);
                let index = *copies.entry(key).or_insert_with(|| {
                    self.snapshots.push((transfer.from, transfer.range.clone()));
                    self.snapshots.len() - 1
                });
                transfer.source = Source::Copied { index, offset: 0 };
            }
        }
        moved
    }

    /// Cut every receiver's incoming ranges into segments of one sender set, and fold each.
    fn lay_out_folds(&mut self, mut moved: Vec<Moved>) {
        moved.sort_unstable_by_key(|transfer| (transfer.to, transfer.from));
        for incoming in moved.chunk_by(|a, b| a.to == b.to) {
            let to = incoming[0].to;
            let mut cuts: Vec<usize> = incoming
                .iter()
                .flat_map(|transfer| [transfer.range.start, transfer.range.end])
                .collect();
            cuts.sort_unstable();
            cuts.dedup();
            for segment in cuts.windows(2) {
                let (start, end) = (segment[0], segment[1]);
                let mut before = Vec::new();
                let mut after = Vec::new();
                // `incoming` is sorted by sender, so both lists come out ascending.
                for transfer in incoming
                    .iter()
                    .filter(|transfer| transfer.range.start <= start && end <= transfer.range.end)
                {
                    let source = transfer.source.advanced(start - transfer.range.start);
                    if transfer.from < to {
                        before.push(source);
                    } else {
                        after.push(source);
                    }
                }
                if before.is_empty() && after.is_empty() {
                    continue;
                }
                self.writes.push(Write {
                    to,
                    range: start..end,
                    kind: WriteKind::Fold { before, after },
                });
            }
        }
    }
}

/// A non-empty transfer being laid out.
#[derive(Clone, Debug)]
struct Moved {
    from: usize,
    to: usize,
    range: Range<usize>,
    source: Source,
}

/// Overwriting: no element written twice. Combining: no sender reaches an element twice.
fn check_single_writers(moved: &[Moved], combine: bool) -> Result<(), SimError> {
    let mut order: Vec<&Moved> = moved.iter().collect();
    // Overwrites may not overlap for one receiver at all; folds only for one (receiver, sender).
    let group = |transfer: &Moved| (transfer.to, if combine { transfer.from } else { 0 });
    order.sort_unstable_by_key(|transfer| (group(transfer), transfer.range.start));
    for pair in order.windows(2) {
        let (first, second) = (pair[0], pair[1]);
        if group(first) != group(second) || second.range.start >= first.range.end {
            continue;
        }
        let element = second.range.start;
        return Err(if combine {
            SimError::DuplicateSource {
                rank: first.to,
                element,
                from: first.from,
            }
        } else {
            SimError::DoubleWrite {
                rank: first.to,
                element,
            }
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Source, StepLayout, Write, WriteKind};
    use crate::SimError;
    use ruccl_core::{Step, Transfer};

    fn transfer(from: usize, to: usize, range: std::ops::Range<usize>) -> Transfer {
        Transfer { from, to, range }
    }

    #[test]
    fn a_ring_step_reads_every_source_in_place() {
        let step = Step {
            combine: true,
            transfers: vec![
                transfer(0, 1, 0..2),
                transfer(1, 2, 2..4),
                transfer(2, 0, 4..6),
            ],
        };
        let layout = StepLayout::new(&step, 3, 6).unwrap();
        assert!(layout.snapshots.is_empty());
        assert_eq!(
            layout.writes[0],
            Write {
                to: 0,
                range: 4..6,
                kind: WriteKind::Fold {
                    before: vec![],
                    after: vec![Source::Live { rank: 2, start: 4 }],
                },
            }
        );
    }

    #[test]
    fn a_source_written_in_the_same_step_is_copied_first() {
        // Both ranks send the whole buffer to each other: each source is also written.
        let step = Step {
            combine: true,
            transfers: vec![transfer(0, 1, 0..4), transfer(1, 0, 0..4)],
        };
        let layout = StepLayout::new(&step, 2, 4).unwrap();
        assert_eq!(layout.snapshots, vec![(0, 0..4), (1, 0..4)]);
    }

    #[test]
    fn overlapping_senders_cut_the_receiver_into_segments_in_fold_order() {
        let step = Step {
            combine: true,
            transfers: vec![transfer(2, 1, 0..4), transfer(0, 1, 2..6)],
        };
        let layout = StepLayout::new(&step, 3, 6).unwrap();
        let kinds: Vec<(std::ops::Range<usize>, usize, usize)> = layout
            .writes
            .iter()
            .map(|write| match &write.kind {
                WriteKind::Fold { before, after } => {
                    (write.range.clone(), before.len(), after.len())
                }
                WriteKind::Copy(_) => unreachable!(),
            })
            .collect();
        assert_eq!(kinds, vec![(0..2, 0, 1), (2..4, 1, 1), (4..6, 1, 0)]);
    }

    #[test]
    fn two_writers_of_one_element_are_refused() {
        let step = Step {
            combine: false,
            transfers: vec![transfer(0, 2, 0..3), transfer(1, 2, 2..4)],
        };
        assert_eq!(
            StepLayout::new(&step, 3, 4),
            Err(SimError::DoubleWrite {
                rank: 2,
                element: 2
            })
        );
    }

    #[test]
    fn one_sender_twice_in_a_fold_is_refused() {
        let step = Step {
            combine: true,
            transfers: vec![transfer(0, 1, 0..3), transfer(0, 1, 1..2)],
        };
        assert_eq!(
            StepLayout::new(&step, 2, 4),
            Err(SimError::DuplicateSource {
                rank: 1,
                element: 1,
                from: 0
            })
        );
    }
}
