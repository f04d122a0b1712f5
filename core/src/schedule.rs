//! The ring schedule, as data: which range every rank sends in every step, and whether the
//! receiver combines or overwrites.
//!
//! Reduce-scatter runs `W-1` combining steps: in step `s`, rank `r` sends chunk `(r - s) mod W`,
//! so after the phase rank `r` holds the full reduction of chunk `(r + 1) mod W`. All-gather then
//! runs `W-1` overwriting steps: in step `s`, rank `r` sends chunk `(r + 1 - s) mod W`, passing
//! each finished chunk once around the ring. Every rank sends `2(W-1)` ranges, `2(W-1)/W · n`
//! elements up to rounding: the bandwidth lower bound of all-reduce.

use std::ops::Range;

/// Split `0..length` into `parts` contiguous ranges whose sizes differ by at most one (the first
/// `length % parts` ranges are one longer). Ranges may be empty when `length < parts`; zero parts
/// give no ranges.
pub fn balanced_ranges(length: usize, parts: usize) -> Vec<Range<usize>> {
    if parts == 0 {
        return Vec::new();
    }
    let base = length / parts;
    let longer = length % parts;
    let mut start = 0;
    (0..parts)
        .map(|part| {
            let size = base + usize::from(part < longer);
            let range = start..start + size;
            start += size;
            range
        })
        .collect()
}

/// Which half of the all-reduce a step belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingPhase {
    /// Receivers combine what they receive with their own elements.
    ReduceScatter,
    /// Receivers overwrite their elements with what they receive.
    AllGather,
}

/// One step of the ring: every rank sends one range to its successor at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingStep {
    /// Position in the whole schedule, `0..2(W-1)`.
    pub index: usize,
    /// Reduce-scatter or all-gather.
    pub phase: RingPhase,
    /// `true` when receivers combine (reduce-scatter), `false` when they overwrite (all-gather).
    pub reduce: bool,
    /// `ranges[r]` is what rank `r` sends to rank `(r + 1) % W`.
    pub ranges: Vec<Range<usize>>,
}

/// The complete ring all-reduce schedule for a world and a tensor length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingSchedule {
    world: usize,
    length: usize,
    chunks: Vec<Range<usize>>,
}

impl RingSchedule {
    /// The schedule for `world` ranks (at least one is meaningful; zero gives no steps) reducing
    /// tensors of `length` elements.
    pub fn new(world: usize, length: usize) -> Self {
        Self {
            world,
            length,
            chunks: balanced_ranges(length, world),
        }
    }

    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Elements per rank's tensor.
    pub fn length(&self) -> usize {
        self.length
    }

    /// The balanced chunks the tensor is cut into, one per rank.
    pub fn chunks(&self) -> &[Range<usize>] {
        &self.chunks
    }

    /// Number of steps: `2(W-1)`, none for a world of one.
    pub fn step_count(&self) -> usize {
        2 * self.world.saturating_sub(1)
    }

    /// Step `index` (`0..step_count()`), or `None` past the end.
    pub fn step(&self, index: usize) -> Option<RingStep> {
        (index < self.step_count()).then(|| self.step_unchecked(index))
    }

    /// Step `index`, which the caller guarantees is below `step_count()` (so `world >= 2`).
    fn step_unchecked(&self, index: usize) -> RingStep {
        let world = self.world;
        let half = world - 1;
        let (phase, offset) = if index < half {
            (RingPhase::ReduceScatter, index)
        } else {
            // All-gather starts one chunk ahead: rank r owns the reduced chunk (r + 1) mod W.
            (RingPhase::AllGather, index - half + world - 1)
        };
        let ranges = (0..world)
            .map(|rank| self.chunks[(rank + world - offset % world) % world].clone())
            .collect();
        RingStep {
            index,
            phase,
            reduce: phase == RingPhase::ReduceScatter,
            ranges,
        }
    }

    /// All steps in order.
    pub fn steps(&self) -> impl ExactSizeIterator<Item = RingStep> + '_ {
        (0..self.step_count()).map(|index| self.step_unchecked(index))
    }

    /// Elements every rank sends in one generation: the sum of its ranges over all steps.
    pub fn elements_sent_by(&self, rank: usize) -> usize {
        self.steps().map(|step| step.ranges[rank].len()).sum()
    }

    /// Elements all ranks send in one generation: exactly `2(W-1)·n`.
    pub fn elements_moved(&self) -> usize {
        self.step_count() * self.length
    }
}
