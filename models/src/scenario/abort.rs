//! Aborts racing the ranks.

use super::{Calls, Group, HarnessArc, Shape, Task, concurrently, rank_tasks};
use crate::device::{faulty, held_ring, lean};
use crate::properties::{self, Delivered, Observed};
use ruccl_sim::fault::{DropTarget, FaultSite};
use ruccl_sim::{FaultPlan, FaultSpec};

/// `abort` racing the ranks: the ranks run `shape.generations` generations while one extra
/// thread per entry of `reasons` aborts the communicator with that reason. Depending on where an
/// abort lands it races the last arrival of a generation, the ring, or ranks leaving a published
/// generation.
///
/// Checks **abort** — the first abort wins and is sticky; a published generation is delivered
/// whole, every later one (and a later call, which fails fast) gets the abort error — with
/// **agreement**, **reuse** and **no hang, no poison**.
pub fn abort_racing_the_ranks(shape: Shape, reasons: &'static [&'static str]) {
    let group = Group::new(lean(), Calls::uniform(shape));
    let mut tasks: Vec<Task<Option<Vec<Delivered>>>> = rank_tasks(&group)
        .into_iter()
        .map(|task| Box::new(move || Some(task())) as Task<_>)
        .collect();
    for &reason in reasons {
        let group = HarnessArc::clone(&group);
        tasks.push(Box::new(move || {
            group.communicator.abort(reason);
            None
        }));
    }
    let observed = Observed {
        per_rank: concurrently(tasks).into_iter().flatten().collect(),
    };
    let calls = &group.calls;
    properties::no_hang_no_poison(&observed, shape.generations, &group.communicator);
    properties::reuse(&observed, &calls.reductions());
    for generation in 0..shape.generations {
        properties::agreement(
            generation,
            &observed.generation(generation),
            &calls.reduction(generation),
        );
    }
    let winner = properties::abort(&observed, reasons);
    let later = group.call(0, shape.generations);
    properties::abort_fails_fast(&group.communicator, winner.as_ref(), reasons, later);
}

/// The reason [`abort_while_the_ring_runs`] aborts with.
pub const DURING_THE_RING: &str = "aborted while the ring runs";

/// An abort that lands while the ring runs: the device holds the ring at `begin` (the last
/// arriver has released the state lock), a harness thread aborts, then lets the ring finish. The
/// runner must discard its outputs and every rank get the abort error — and the abort must get
/// the lock at all, which it could not if the ring ran under it (the checkers report that
/// deadlock).
///
/// Checks **abort** (wins over a running generation, sticky, fails fast) with **agreement** and
/// **no hang, no poison**.
pub fn abort_while_the_ring_runs(world: usize) {
    let shape = Shape::new(world, 1);
    let group = Group::new(held_ring(lean()), Calls::uniform(shape));
    let mut tasks: Vec<Task<Option<Vec<Delivered>>>> = rank_tasks(&group)
        .into_iter()
        .map(|task| Box::new(move || Some(task())) as Task<_>)
        .collect();
    let aborter = HarnessArc::clone(&group);
    tasks.push(Box::new(move || {
        aborter.device.intercept().wait_until_running();
        aborter.communicator.abort(DURING_THE_RING);
        aborter.device.intercept().release();
        None
    }));
    let observed = Observed {
        per_rank: concurrently(tasks).into_iter().flatten().collect(),
    };
    properties::no_hang_no_poison(&observed, 1, &group.communicator);
    properties::agreement(0, &observed.generation(0), &group.calls.reduction(0));
    let reasons = &[DURING_THE_RING];
    let winner = properties::abort(&observed, reasons);
    properties::abort_wins_over_running_ring(0, winner.as_ref());
    let later = group.call(0, 1);
    properties::abort_fails_fast(&group.communicator, winner.as_ref(), reasons, later);
}

/// The reason [`abort_releases_the_deposits`] aborts with.
pub const STRANDED: &str = "the other ranks never came";

/// An abort releases the deposits of the generation being collected: rank 0 calls, the other
/// ranks never do, and a harness thread aborts. Rank 0 gets the abort error, and its prepared
/// input — armed by the fault injector to panic when dropped — is dropped by the abort, with the
/// panic contained; a core that left it in its slot would drop it (and panic) only when the
/// communicator itself is dropped, here in the harness.
///
/// Checks **abort** (the deposits of an unpublished generation are released, contained) and **no
/// hang, no poison**.
pub fn abort_releases_the_deposits(world: usize) {
    let plan = FaultPlan::new(vec![
        FaultSpec::new(FaultSite::Drop(DropTarget::Prepared))
            .on_rank(0)
            .in_generation(0),
    ]);
    let group = Group::new(faulty(world, plan), Calls::uniform(Shape::new(world, 1)));
    let rank = HarnessArc::clone(&group);
    let aborter = HarnessArc::clone(&group);
    let tasks: Vec<Task<Option<Delivered>>> = vec![
        Box::new(move || Some(rank.call(0, 0))),
        Box::new(move || {
            aborter.communicator.abort(STRANDED);
            None
        }),
    ];
    let delivered: Vec<Delivered> = concurrently(tasks).into_iter().flatten().collect();
    let observed = Observed {
        per_rank: vec![delivered],
    };
    let winner = properties::abort(&observed, &[STRANDED]);
    properties::abort_wins_over_running_ring(0, winner.as_ref());
    let teardown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(group)));
    properties::abort_released_the_deposits(teardown.is_ok());
}
