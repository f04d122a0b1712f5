//! A rank called twice at once.

use super::abort::Gate;
use super::{Group, HarnessArc, Stopping, Task, check, concurrently, teardown};
use crate::device::lean;
use crate::properties::{self, Delivered, Observed};
use crate::script::Script;
use ruccl_core::NativeCollectiveError;
use ruccl_sim::FaultPlan;

/// `RankBusy`: two threads call as rank 0 at once, in generation 0; the other ranks call only
/// once one of the two has been refused (a core that refused neither, or both, leaves them
/// waiting: a deadlock the checkers report). Then every rank runs generation 1 as usual. The
/// refused call is answered at once with `RankBusy` and changes nothing: the other call of rank
/// 0 gets generation 0's output, and generation 1 works normally — rank 0 is not left busy and
/// its next call joins generation 1, not 2.
///
/// Checks **no hang, no poison** (a second concurrent call is refused, not queued) with
/// **reuse**, **agreement** and **resources** (the refused call's input is released).
pub fn a_rank_called_twice_at_once(world: usize) {
    assert!(world >= 2, "harness: a world of two at least");
    let script = Script::all_reduce(world, 2, world + 1);
    let group = Group::new(lean(), script, FaultPlan::none());
    let gate = HarnessArc::new(Gate::new());
    let mut tasks: Vec<Task<Delivered>> = Vec::with_capacity(world + 1);
    for _ in 0..2 {
        let (group, gate) = (HarnessArc::clone(&group), HarnessArc::clone(&gate));
        tasks.push(Box::new(move || {
            let delivered = group.call(0, 0);
            if matches!(delivered, Err(NativeCollectiveError::RankBusy { .. })) {
                gate.open();
            }
            delivered
        }));
    }
    for rank in 1..world {
        let (group, gate) = (HarnessArc::clone(&group), HarnessArc::clone(&gate));
        tasks.push(Box::new(move || {
            gate.wait();
            group.call(rank, 0)
        }));
    }
    let mut first = concurrently(tasks).into_iter();
    let (Some(one), Some(other)) = (first.next(), first.next()) else {
        unreachable!("two calls of rank 0 were made");
    };
    let expected = group.script.expected(0);
    properties::refuses_a_busy_rank(0, &one, &other, &expected[0]);
    let served = if one.is_ok() { one } else { other };
    let mut per_rank: Vec<Vec<Delivered>> = std::iter::once(vec![served])
        .chain(first.map(|delivered| vec![delivered]))
        .collect();
    let second: Vec<Task<Delivered>> = (0..world)
        .map(|rank| {
            let group = HarnessArc::clone(&group);
            Box::new(move || group.call(rank, 1)) as Task<Delivered>
        })
        .collect();
    for (row, delivered) in per_rank.iter_mut().zip(concurrently(second)) {
        row.push(delivered);
    }
    let observed = Observed { per_rank };
    check(&group, &observed, Stopping::default());
    teardown(group);
}
