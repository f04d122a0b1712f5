//! [`Ready`]: which index ranges of a rank's output buffer hold the rank's current values.
//!
//! `begin` does not copy the inputs. Until a step writes an index, the rank's current value there
//! is still its input's; the first write reads the input instead (a combine reads the input and
//! the received value and writes the output: the same traffic as combining in place). `finish`
//! copies only the indices no step wrote, which for the ring schedule (W ≥ 2) is none.

use std::ops::Range;

/// A set of indices, kept as sorted, disjoint, non-adjacent, non-empty ranges — or every index
/// (an output copied whole in `begin`), which costs no allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ready {
    /// Every index is in the set; `ranges` is then unused.
    all: bool,
    ranges: Vec<Range<usize>>,
}

impl Ready {
    /// The set of every index.
    pub(crate) fn all() -> Self {
        Self {
            all: true,
            ranges: Vec::new(),
        }
    }

    /// Whether this is the set of every index.
    pub(crate) fn is_all(&self) -> bool {
        self.all
    }

    /// Add every index of `range` to the set.
    pub(crate) fn insert(&mut self, range: Range<usize>) {
        if range.is_empty() || self.all {
            return;
        }
        // The first kept range that reaches `range.start` (touching counts: they merge).
        let first = self.ranges.partition_point(|kept| kept.end < range.start);
        // One past the last kept range that starts no later than `range.end`.
        let last = self.ranges.partition_point(|kept| kept.start <= range.end);
        if first == last {
            self.ranges.insert(first, range);
            return;
        }
        let start = range.start.min(self.ranges[first].start);
        let end = range.end.max(self.ranges[last - 1].end);
        self.ranges.splice(first..last, std::iter::once(start..end));
    }

    /// Whether every index of `0..length` is in the set.
    pub(crate) fn covers(&self, length: usize) -> bool {
        self.all || length == 0 || self.ranges.first() == Some(&(0..length))
    }

    /// `range` cut into maximal pieces that are wholly in the set (`true`) or wholly outside it
    /// (`false`), in order. An empty `range` gives no pieces.
    pub(crate) fn pieces(&self, range: Range<usize>) -> Pieces<'_> {
        let ranges = if self.all {
            std::slice::from_ref(&EVERYTHING)
        } else {
            let next = self.ranges.partition_point(|kept| kept.end <= range.start);
            &self.ranges[next..]
        };
        Pieces {
            ranges,
            at: range.start,
            end: range.end,
        }
    }
}

/// Every index, as one range.
static EVERYTHING: Range<usize> = 0..usize::MAX;

/// The iterator of [`Ready::pieces`].
pub(crate) struct Pieces<'a> {
    /// Kept ranges that end after `at`, in order.
    ranges: &'a [Range<usize>],
    /// Where the next piece starts.
    at: usize,
    /// Where the pieces end.
    end: usize,
}

impl Iterator for Pieces<'_> {
    type Item = (Range<usize>, bool);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.end {
            return None;
        }
        let start = self.at;
        let piece = match self.ranges.first() {
            Some(kept) if kept.start <= start => {
                self.ranges = &self.ranges[1..];
                (start..kept.end.min(self.end), true)
            }
            Some(kept) => (start..kept.start.min(self.end), false),
            None => (start..self.end, false),
        };
        self.at = piece.0.end;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::Ready;

    fn pieces(ready: &Ready, range: std::ops::Range<usize>) -> Vec<(usize, usize, bool)> {
        ready
            .pieces(range)
            .map(|(piece, held)| (piece.start, piece.end, held))
            .collect()
    }

    #[test]
    fn inserts_merge_overlapping_and_touching_ranges() {
        let mut ready = Ready::default();
        ready.insert(4..6);
        ready.insert(0..2);
        ready.insert(8..9);
        assert_eq!(ready.ranges, vec![0..2, 4..6, 8..9]);
        ready.insert(2..4);
        assert_eq!(ready.ranges, vec![0..6, 8..9]);
        ready.insert(5..12);
        assert_eq!(ready.ranges, vec![0..12]);
        ready.insert(3..3);
        assert!(ready.covers(12) && !ready.covers(13));
    }

    #[test]
    fn pieces_alternate_between_held_and_missing() {
        let mut ready = Ready::default();
        ready.insert(2..4);
        ready.insert(6..8);
        assert_eq!(
            pieces(&ready, 0..10),
            vec![
                (0, 2, false),
                (2, 4, true),
                (4, 6, false),
                (6, 8, true),
                (8, 10, false)
            ]
        );
        assert_eq!(
            pieces(&ready, 3..7),
            vec![(3, 4, true), (4, 6, false), (6, 7, true)]
        );
        assert_eq!(pieces(&ready, 4..6), vec![(4, 6, false)]);
        assert!(pieces(&ready, 5..5).is_empty());
        assert_eq!(pieces(&Ready::all(), 3..7), vec![(3, 7, true)]);
        assert!(Ready::all().covers(100));
    }
}
