//! [`PerfRow`]: one measured size, out of place and in place, with nccl-tests' bandwidths.

use crate::membound::Bound;
use ruccl_core::{Algorithm, Collective, ElementType, Plan};

/// How the ranks of one placement's timed generations waited, from the communicator's
/// [`WaitStats`](ruccl_core::WaitStats) read before and after the timed loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waits {
    /// Timed generations published.
    pub generations: u64,
    /// Of those, the generations in which a rank parked instead of seeing the publication
    /// while it polled: the waiting policy's slow path (a futex wake-up on both sides).
    pub parked: u64,
}

/// One placement's figures (nccl-tests' `time algbw busbw #wrong`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Time of one collective, in microseconds, over the ranks as `-a` says.
    pub time_us: f64,
    /// Elements that differ from the reference, plus (all-reduce) ranks whose output bits differ
    /// from rank 0's; `None`: not checked.
    pub wrong: Option<u64>,
    /// How the ranks waited in the timed generations; `None`: not counted (a baseline).
    pub waits: Option<Waits>,
}

/// One measured size.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfRow {
    /// The collective, with its operation and root.
    pub collective: Collective,
    /// The element type.
    pub element_type: ElementType,
    /// The number of ranks.
    pub world: usize,
    /// The table's `size`: the larger of a rank's input and output, in bytes.
    pub bytes: usize,
    /// The table's `count`: nccl-tests' per-rank count (see
    /// [`Counts::param`](crate::collectives::Counts::param)).
    pub count: usize,
    /// The root column (`-1` without a root).
    pub root: i64,
    /// Inputs copied into fresh buffers: nccl-tests' out-of-place.
    pub out_of_place: Measured,
    /// The device working in the input's own allocation: nccl-tests' in-place.
    pub in_place: Measured,
    /// The algorithm the generations asked for (`-A`; `None` for a baseline that has none).
    pub asked: Option<Algorithm>,
    /// The algorithm the plan resolved to (`Auto` resolved).
    pub algorithm: Option<Algorithm>,
    /// The most any rank sent over the collective's per-rank lower bound, from the device's
    /// traffic ledger (`None`: no ledger, or a bound of zero).
    pub traffic_ratio: Option<f64>,
    /// The device's α–β link model's time for the generation, in microseconds.
    pub model_us: Option<f64>,
    /// A fingerprint of the resolved plan's layout and steps ([`schedule_fingerprint`]): rows of
    /// one run with the same fingerprint ran the same schedule, whatever their algorithms are
    /// called (at W = 2 every all-gather algorithm is the same step). `None`: no plan known.
    pub schedule: Option<u64>,
    /// The host-memory bound measured right before the row ([`crate::membound`]); `None`: none
    /// applies (GPUs, a baseline) or it was not measured.
    pub bound: Option<Bound>,
}

/// A fingerprint of what `plan` makes a device do — its buffer length, every rank's placement
/// and output, every step — and not what it is called: two plans with equal fingerprints do
/// the same work (up to a hash collision). Stable within one build of the tool, not across
/// builds.
pub fn schedule_fingerprint(plan: &Plan) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    plan.buffer_len().hash(&mut hasher);
    for rank in 0..plan.world() {
        plan.placement(rank).hash(&mut hasher);
        plan.output(rank).hash(&mut hasher);
    }
    plan.steps().hash(&mut hasher);
    hasher.finish()
}

impl PerfRow {
    /// Algorithm bandwidth, `size / time`, in GB/s (10⁹ bytes per second).
    pub fn algbw(&self, measured: &Measured) -> f64 {
        if measured.time_us > 0.0 {
            self.bytes as f64 / measured.time_us / 1e3
        } else {
            0.0
        }
    }

    /// Bus bandwidth, `algbw ·` the collective's factor ([`Collective::bus_factor`]), in GB/s.
    pub fn busbw(&self, measured: &Measured) -> f64 {
        self.algbw(measured) * self.collective.bus_factor(self.world)
    }

    /// Both placements, out of place first.
    pub fn placements(&self) -> [&Measured; 2] {
        [&self.out_of_place, &self.in_place]
    }

    /// The in-place time over the host-memory bound's time (the table's `bound`); `None`
    /// without a bound.
    pub fn times_bound(&self) -> Option<f64> {
        self.bound?.times(self.in_place.time_us)
    }

    /// Wrong elements over both placements (unchecked ones count none).
    pub fn wrong(&self) -> u64 {
        self.placements().iter().filter_map(|m| m.wrong).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruccl_core::ReduceOperation;

    fn row(collective: Collective) -> PerfRow {
        let measured = Measured {
            time_us: 100.0,
            wrong: Some(0),
            waits: None,
        };
        PerfRow {
            collective,
            element_type: ElementType::F32,
            world: 4,
            bytes: 1_000_000,
            count: 250_000,
            root: -1,
            out_of_place: measured,
            in_place: measured,
            asked: Some(Algorithm::Auto),
            algorithm: Some(Algorithm::Ring),
            traffic_ratio: Some(1.0),
            model_us: Some(1.0),
            schedule: None,
            bound: None,
        }
    }

    #[test]
    fn bus_bandwidth_uses_each_collectives_factor() {
        let all_reduce = row(Collective::AllReduce(ReduceOperation::Sum));
        assert!((all_reduce.algbw(&all_reduce.in_place) - 10.0).abs() < 1e-9);
        assert!((all_reduce.busbw(&all_reduce.in_place) - 15.0).abs() < 1e-9);
        let gather = row(Collective::AllGather);
        assert!((gather.busbw(&gather.in_place) - 7.5).abs() < 1e-9);
        let broadcast = row(Collective::Broadcast { root: 0 });
        assert!((broadcast.busbw(&broadcast.in_place) - 10.0).abs() < 1e-9);
    }

    fn fingerprint(collective: Collective, algorithm: Algorithm, world: usize) -> u64 {
        let plan = Plan::new(collective, algorithm, world, 1024).unwrap();
        schedule_fingerprint(&plan)
    }

    #[test]
    fn plans_that_do_the_same_work_share_a_fingerprint_whatever_their_names() {
        // At W = 2 an all-gather is one step in which each rank sends its block, by any
        // algorithm; ring and halving-doubling broadcast split the root's input alike, direct
        // sends it whole.
        let ring = fingerprint(Collective::AllGather, Algorithm::Ring, 2);
        assert_eq!(
            fingerprint(Collective::AllGather, Algorithm::Direct, 2),
            ring
        );
        assert_eq!(
            fingerprint(Collective::AllGather, Algorithm::HalvingDoubling, 2),
            ring
        );
        let root = Collective::Broadcast { root: 1 };
        let split = fingerprint(root, Algorithm::Ring, 2);
        assert_eq!(fingerprint(root, Algorithm::HalvingDoubling, 2), split);
        assert_ne!(fingerprint(root, Algorithm::Direct, 2), split);
        // Another root, another world, another algorithm: other work.
        assert_ne!(
            fingerprint(Collective::Broadcast { root: 0 }, Algorithm::Ring, 2),
            split
        );
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        assert_ne!(
            fingerprint(sum, Algorithm::Ring, 4),
            fingerprint(sum, Algorithm::Direct, 4)
        );
        assert_ne!(
            fingerprint(sum, Algorithm::Ring, 4),
            fingerprint(sum, Algorithm::Ring, 8)
        );
    }
}
