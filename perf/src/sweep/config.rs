//! [`SweepConfig`]: what one sweep measures — a collective, its element type, operation, root and
//! algorithm, nccl-tests' sizes ([`Sizes`]), iterations, warm-up, checks and averaging.

use crate::collectives::{Counts, PerfCollective};
use crate::schedule::Schedule;
use ruccl_core::{
    Algorithm, Collective, ElementType, NativeCollectiveError, Plan, ReduceOperation,
};
use ruccl_sim::pattern;
use std::sync::Arc;
use std::time::Duration;

/// How the sizes grow: nccl-tests' `-f` (a factor above 1) or `-i` (a fixed step, with `-f 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Each size is the previous one times this (at least 2).
    Factor(usize),
    /// Each size is the previous one plus this many bytes (at least 1).
    Bytes(usize),
}

/// nccl-tests' message sizes: from `min` to `max` bytes, growing by `step`. Each is the requested
/// size; [`SweepConfig::setup`] rounds it down to whole elements (and, for reduce-scatter and
/// all-gather, to a multiple of the world) as nccl-tests does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// The first size, in bytes (`-b`).
    pub min: usize,
    /// No size is larger, in bytes (`-e`).
    pub max: usize,
    /// The growth.
    pub step: Step,
}

impl Sizes {
    /// The requested sizes, lazily (a linear sweep may have very many).
    pub fn iter(&self) -> impl Iterator<Item = usize> + use<> {
        let Sizes { min, max, step } = *self;
        let mut next = Some(min).filter(|&size| size <= max);
        std::iter::from_fn(move || {
            let size = next?;
            let grown = match step {
                Step::Factor(factor) => size.checked_mul(factor).filter(|&n| n > size),
                Step::Bytes(bytes) => size.checked_add(bytes).filter(|&n| n > size),
            };
            next = grown.filter(|&grown| grown <= max);
            Some(size)
        })
    }

    /// How many sizes there are.
    pub fn count(&self) -> u64 {
        if self.min > self.max {
            return 0;
        }
        match self.step {
            Step::Factor(_) => self.iter().count() as u64,
            Step::Bytes(bytes) => ((self.max - self.min) / bytes.max(1)) as u64 + 1,
        }
    }

    /// Why these sizes make no sweep, if they make none.
    pub fn validate(&self) -> Result<(), String> {
        if self.min > self.max {
            return Err(format!(
                "the smallest size ({} B, -b) exceeds the largest ({} B, -e)",
                self.min, self.max
            ));
        }
        match self.step {
            Step::Factor(factor) if factor < 2 => Err(format!(
                "the step factor (-f) must be at least 2, or 1 for a linear sweep, got {factor}"
            )),
            Step::Factor(_) if self.min == 0 && self.max > 0 => Err(
                "-b 0 with a step factor never grows: start at 1 B or more, or sweep linearly (-f 1 -i BYTES)"
                    .to_owned(),
            ),
            Step::Bytes(0) => {
                Err("the step (-i) of a linear sweep (-f 1) must be at least 1 B".to_owned())
            }
            _ => Ok(()),
        }
    }
}

/// Which rank's time a row reports, nccl-tests' `-a`: each rank times its own iterations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Average {
    /// `-a 0`: rank 0's.
    Rank0,
    /// `-a 1` (the default): the mean over ranks.
    #[default]
    Mean,
    /// `-a 2`: the least.
    Min,
    /// `-a 3`: the most.
    Max,
}

impl Average {
    /// nccl-tests' number for it.
    pub fn code(self) -> u8 {
        match self {
            Average::Rank0 => 0,
            Average::Mean => 1,
            Average::Min => 2,
            Average::Max => 3,
        }
    }

    /// The mode of nccl-tests' number, if it names one.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Average::Rank0),
            1 => Some(Average::Mean),
            2 => Some(Average::Min),
            3 => Some(Average::Max),
            _ => None,
        }
    }

    /// The time this mode reports from every rank's (`times[r]` is rank `r`'s).
    pub fn of(self, times: &[f64]) -> f64 {
        let fold = |f: fn(f64, f64) -> f64| times.iter().copied().reduce(f).unwrap_or(0.0);
        match self {
            Average::Rank0 => times.first().copied().unwrap_or(0.0),
            Average::Mean => times.iter().sum::<f64>() / times.len().max(1) as f64,
            Average::Min => fold(f64::min),
            Average::Max => fold(f64::max),
        }
    }
}

/// One measurement's sizes: the requested bytes, and what they become for the collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The size asked for, in bytes.
    pub requested: usize,
    /// Per-rank element counts.
    pub counts: Counts,
    /// The table's `size`: the larger of a rank's input and output, in bytes.
    pub bytes: usize,
}

/// What one sweep measures.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// The collective.
    pub collective: &'static PerfCollective,
    /// The reduce operation (reducing collectives).
    pub operation: ReduceOperation,
    /// The root (broadcast).
    pub root: usize,
    /// The algorithm every generation asks for (`-A`; `Auto` by default).
    pub algorithm: Algorithm,
    /// The element type.
    pub element_type: ElementType,
    /// The number of ranks.
    pub world: usize,
    /// The sizes.
    pub sizes: Sizes,
    /// Timed collectives per size and placement (`-n`, at least 1).
    pub iterations: usize,
    /// Untimed collectives at every size from the smallest to the largest, doubling, before the
    /// sweep (`-w`).
    pub warmup: usize,
    /// Checked collectives per size and placement (`-c`; 0 checks nothing).
    pub checks: usize,
    /// Which rank's time is reported (`-a`).
    pub average: Average,
    /// A rank that waits longer than this fails the sweep instead of hanging it.
    pub timeout: Duration,
    /// Bytes per rank that inputs made ahead of a timed batch may take (reduce-scatter and
    /// all-gather, whose outputs cannot be fed back as inputs); at least one input is made.
    pub batch_bytes: usize,
    /// An imported MSCCL schedule every generation runs instead of a built-in algorithm
    /// (`--schedule`; the algorithm is then `Custom`).
    pub schedule: Option<Arc<Schedule>>,
}

impl Default for SweepConfig {
    /// The default sweep: all-reduce, f32 sum, 8 B to 128 MiB by factors of 4 over 4 ranks, 20
    /// timed iterations after 5 warm-up ones (nccl-tests' counts), checked once, averaged.
    fn default() -> Self {
        Self {
            collective: &crate::collectives::ALL_REDUCE,
            operation: ReduceOperation::Sum,
            root: 0,
            algorithm: Algorithm::Auto,
            element_type: ElementType::F32,
            world: 4,
            sizes: Sizes {
                min: 8,
                max: 128 << 20,
                step: Step::Factor(4),
            },
            iterations: 20,
            warmup: 5,
            checks: 1,
            average: Average::Mean,
            timeout: Duration::from_secs(120),
            batch_bytes: 64 << 20,
            schedule: None,
        }
    }
}

impl SweepConfig {
    /// Whether `other` is this sweep with another algorithm: the driver then measures the two in
    /// turn at every size rather than one after the other.
    pub fn interleaves_with(&self, other: &SweepConfig) -> bool {
        // Destructured so that a new field must be placed here: compared or not.
        let SweepConfig {
            collective,
            operation,
            root,
            algorithm: _,
            element_type,
            world,
            sizes,
            iterations,
            warmup,
            checks,
            average,
            timeout,
            batch_bytes,
            schedule,
        } = self;
        std::ptr::eq(*collective, other.collective)
            && *operation == other.operation
            && *root == other.root
            && *element_type == other.element_type
            && *world == other.world
            && *sizes == other.sizes
            && *iterations == other.iterations
            && *warmup == other.warmup
            && *checks == other.checks
            && *average == other.average
            && *timeout == other.timeout
            && *batch_bytes == other.batch_bytes
            && match (schedule, &other.schedule) {
                (Some(mine), Some(theirs)) => Arc::ptr_eq(mine, theirs),
                (mine, theirs) => mine.is_none() && theirs.is_none(),
            }
    }

    /// The collective every generation runs.
    pub fn collective(&self) -> Collective {
        self.collective.collective(self.operation, self.root)
    }

    /// The reduce operation as the table names it (`none` for collectives that do not reduce).
    pub fn operation_name(&self) -> &'static str {
        self.collective()
            .operation()
            .map_or("none", |op| op.nccl_name())
    }

    /// The root as the table shows it (`-1` for collectives without one, as nccl-tests).
    pub fn root_column(&self) -> i64 {
        if self.collective.rooted() {
            self.root as i64
        } else {
            -1
        }
    }

    /// What `requested` bytes become: whole elements, split per rank as the collective splits.
    pub fn setup(&self, requested: usize) -> Setup {
        let element = self.element_type.size();
        let counts = (self.collective.counts)(requested / element, self.world);
        Setup {
            requested,
            counts,
            bytes: counts.send.max(counts.recv) * element,
        }
    }

    /// Why the core refuses this sweep's fixed algorithm at `setup`'s size, if it does: every
    /// plan of it would move more than [`ruccl_core::TRAFFIC_BOUND`] times the least traffic
    /// (direct with fewer elements than a large world has ranks, say). The sweep skips that
    /// size with a note instead of stopping. `Auto` and imported schedules are never refused.
    pub fn refusal(&self, setup: &Setup) -> Option<String> {
        if self.schedule.is_some() || self.algorithm == Algorithm::Auto {
            return None;
        }
        let plan = Plan::new(
            self.collective(),
            self.algorithm,
            self.world,
            setup.counts.send,
        );
        plan.err().map(|error| match error {
            NativeCollectiveError::InvalidCollective { reason, .. } => reason,
            other => other.to_string(),
        })
    }

    /// Inputs made ahead of a timed batch, for a collective whose output cannot be fed back.
    pub fn batch(&self, setup: &Setup) -> usize {
        let input = setup.counts.send * self.element_type.size();
        (self.batch_bytes / input.max(1)).clamp(1, self.iterations.max(1))
    }

    /// Why the sweep cannot run, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.world == 0 {
            return Err("at least one rank is needed".to_owned());
        }
        if self.checks > 0 && self.world > pattern::MAX_CHECKED_WORLD {
            return Err(format!(
                "the check is exact for up to {} ranks; turn it off (-c 0) for {}",
                pattern::MAX_CHECKED_WORLD,
                self.world
            ));
        }
        if self.collective.rooted() && self.root >= self.world {
            return Err(format!(
                "the root (-r {}) is outside the world of {} ranks",
                self.root, self.world
            ));
        }
        if self.collective.kind == Collective::AllToAll
            && matches!(self.algorithm, Algorithm::Ring | Algorithm::HalvingDoubling)
        {
            return Err(format!(
                "all-to-all has a direct plan only, not {} (-A direct or auto)",
                self.algorithm
            ));
        }
        if self.algorithm == Algorithm::HalvingDoubling && !self.world.is_power_of_two() {
            return Err(format!(
                "halving-doubling (-A) needs a power-of-two number of ranks, not {}",
                self.world
            ));
        }
        if self.iterations == 0 {
            return Err("at least one timed iteration (-n) is needed".to_owned());
        }
        self.sizes.validate()
    }
}

/// The algorithms `configs` ask for, each once, in order, comma-separated: `auto`, or
/// `auto,ring,direct` for a run that measures several in turn.
pub fn algorithms_asked(configs: &[SweepConfig]) -> String {
    let mut asked: Vec<Algorithm> = Vec::new();
    for config in configs {
        if !asked.contains(&config.algorithm) {
            asked.push(config.algorithm);
        }
    }
    asked
        .iter()
        .map(|algorithm| algorithm.name())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::{ALL_GATHER, REDUCE_SCATTER};

    #[test]
    fn geometric_sizes_stop_at_the_largest_and_never_overflow() {
        let sizes = Sizes {
            min: 8,
            max: 128 << 20,
            step: Step::Factor(4),
        };
        let all: Vec<usize> = sizes.iter().collect();
        assert_eq!(all.len(), 13);
        assert_eq!((all[0], all[12]), (8, 128 << 20));
        assert_eq!(sizes.count(), 13);
        let huge = Sizes {
            min: 1 << 62,
            max: usize::MAX,
            step: Step::Factor(4),
        };
        assert_eq!(huge.iter().count(), 1);
    }

    #[test]
    fn linear_sizes_step_by_bytes_lazily() {
        let sizes = Sizes {
            min: 1000,
            max: 5000,
            step: Step::Bytes(1500),
        };
        assert_eq!(sizes.iter().collect::<Vec<_>>(), [1000, 2500, 4000]);
        assert_eq!(sizes.count(), 3);
        let endless = Sizes {
            min: 1,
            max: usize::MAX,
            step: Step::Bytes(1),
        };
        assert_eq!(endless.count(), usize::MAX as u64);
        assert_eq!(endless.iter().nth(9), Some(10));
    }

    #[test]
    fn sizes_that_never_grow_are_refused() {
        let zero = Sizes {
            min: 0,
            max: 64,
            step: Step::Factor(2),
        };
        assert!(zero.validate().unwrap_err().contains("never grows"));
        let flat = Sizes {
            min: 8,
            max: 64,
            step: Step::Bytes(0),
        };
        assert!(flat.validate().is_err());
    }

    #[test]
    fn sizes_round_down_per_collective_as_nccl_tests() {
        let config = |collective| SweepConfig {
            collective,
            world: 4,
            ..SweepConfig::default()
        };
        // 100 B of f32: 25 elements; split over 4 ranks, 6 each.
        let all_reduce = config(&crate::collectives::ALL_REDUCE).setup(100);
        assert_eq!((all_reduce.counts.send, all_reduce.bytes), (25, 100));
        let scatter = config(&REDUCE_SCATTER).setup(100);
        assert_eq!(
            (scatter.counts.send, scatter.counts.recv, scatter.bytes),
            (24, 6, 96)
        );
        let gather = config(&ALL_GATHER).setup(100);
        assert_eq!(
            (gather.counts.send, gather.counts.recv, gather.counts.param),
            (6, 24, 6)
        );
    }

    #[test]
    fn averages_follow_nccl_tests_modes() {
        let times = [4.0, 1.0, 7.0];
        assert_eq!(Average::Rank0.of(&times), 4.0);
        assert_eq!(Average::Mean.of(&times), 4.0);
        assert_eq!(Average::Min.of(&times), 1.0);
        assert_eq!(Average::Max.of(&times), 7.0);
        assert_eq!(Average::from_code(3), Some(Average::Max));
        assert_eq!(Average::from_code(4), None);
    }
}
