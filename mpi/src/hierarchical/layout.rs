//! The job's layout — how many local ranks each process drives — and the arithmetic of the
//! layouts each collective uses between the local phases and the inter-process step. Pure
//! arithmetic, no devices and no MPI.
//!
//! Global rank `k` is local rank `k - offset(p)` of the process `p` whose ranks
//! `offset(p) .. offset(p) + count(p)` contain it: processes in order, their local ranks in
//! order. `W` is the total, `L = count(process)`, `Lmax` the largest count.

use std::ops::Range;

/// Every process's local rank count, and where this process stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// This process.
    process: usize,
    /// Local ranks per process, in process order (each at least 1).
    counts: Vec<usize>,
    /// `offsets[p]`: the global rank of process `p`'s local rank 0.
    offsets: Vec<usize>,
}

impl Layout {
    /// The layout of processes with these local rank counts, seen from `process`; `None` if a
    /// count is 0, the process is outside, or the total overflows.
    pub(crate) fn new(process: usize, counts: Vec<usize>) -> Option<Self> {
        if process >= counts.len() || counts.contains(&0) {
            return None;
        }
        let mut offsets = Vec::with_capacity(counts.len());
        let mut total = 0usize;
        for count in &counts {
            offsets.push(total);
            total = total.checked_add(*count)?;
        }
        Some(Layout {
            process,
            counts,
            offsets,
        })
    }

    /// This process.
    pub(crate) fn process(&self) -> usize {
        self.process
    }

    /// Local ranks per process.
    pub(crate) fn counts(&self) -> &[usize] {
        &self.counts
    }

    /// This process's local rank count, `L`.
    pub(crate) fn local(&self) -> usize {
        self.counts[self.process]
    }

    /// The total rank count, `W`.
    pub(crate) fn world(&self) -> usize {
        self.offsets[self.counts.len() - 1] + self.counts[self.counts.len() - 1]
    }

    /// The largest local rank count, `Lmax`.
    pub(crate) fn widest(&self) -> usize {
        self.counts.iter().copied().max().unwrap_or(1)
    }

    /// Whether every process drives as many local ranks.
    pub(crate) fn uniform(&self) -> bool {
        self.counts.iter().all(|count| *count == self.local())
    }

    /// The global rank of this process's local rank `rank`.
    pub(crate) fn global(&self, rank: usize) -> usize {
        self.offsets[self.process] + rank
    }

    /// The process and local rank of global rank `rank`, if it exists.
    pub(crate) fn locate(&self, rank: usize) -> Option<(usize, usize)> {
        let process = self
            .offsets
            .iter()
            .rposition(|offset| *offset <= rank)
            .filter(|process| rank < self.offsets[*process] + self.counts[*process])?;
        Some((process, rank - self.offsets[process]))
    }

    /// The per-process blocks of a vector of `W` blocks of `block` elements, spread into `P`
    /// slots of `Lmax` blocks: `(range in the compact vector, start in the spread one)`, for a
    /// reduce-scatter between processes whose local rank counts differ.
    pub(crate) fn spread(&self, block: usize) -> Vec<(Range<usize>, usize)> {
        let slot = self.widest() * block;
        (0..self.counts.len())
            .map(|process| {
                let start = self.offsets[process] * block;
                let len = self.counts[process] * block;
                (start..start + len, process * slot)
            })
            .collect()
    }

    /// The inverse of [`spread`](Self::spread): `(range in the spread vector, start in the
    /// compact one)`, for an all-gather between processes whose local rank counts differ.
    pub(crate) fn compact(&self, block: usize) -> Vec<(Range<usize>, usize)> {
        self.spread(block)
            .into_iter()
            .map(|(compact, spread)| (spread..spread + compact.len(), compact.start))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ranks_number_processes_in_order() {
        let layout = Layout::new(1, vec![1, 2, 1]).unwrap();
        assert_eq!(layout.world(), 4);
        assert_eq!(layout.local(), 2);
        assert_eq!(layout.widest(), 2);
        assert!(!layout.uniform());
        assert_eq!(layout.global(1), 2);
        let located: Vec<_> = (0..5).map(|rank| layout.locate(rank)).collect();
        assert_eq!(
            located,
            [Some((0, 0)), Some((1, 0)), Some((1, 1)), Some((2, 0)), None]
        );
    }

    #[test]
    fn a_layout_needs_ranks_everywhere() {
        assert_eq!(Layout::new(0, vec![2, 0]), None);
        assert_eq!(Layout::new(2, vec![2, 1]), None);
        assert!(Layout::new(0, vec![3, 3]).unwrap().uniform());
    }

    #[test]
    fn spread_and_compact_are_inverse_for_uneven_counts() {
        let layout = Layout::new(0, vec![2, 1]).unwrap();
        // W = 3 blocks of 4 elements → 2 slots of Lmax = 2 blocks.
        assert_eq!(layout.spread(4), vec![(0..8, 0), (8..12, 8)]);
        assert_eq!(layout.compact(4), vec![(0..8, 0), (8..12, 8)]);
        let layout = Layout::new(0, vec![1, 2, 1]).unwrap();
        assert_eq!(layout.spread(3), vec![(0..3, 0), (3..9, 6), (9..12, 12)]);
        assert_eq!(layout.compact(3), vec![(0..3, 0), (6..12, 3), (12..15, 9)]);
    }
}
