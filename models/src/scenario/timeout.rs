//! Deadlines on some ranks. Under a checker a deadline is a timer thread the checker schedules
//! like any other (`core/src/sync/checked_deadline.rs`): it passes at any point after its wait
//! began — before the waiter parks, while it sleeps, in the same instant the generation is
//! published or aborted — and loom explores every such point. On real threads it is the clock.
//!
//! In this design a rank never waits to *enter* a generation (two rounds by parity: a deposit
//! always finds its round open); the waits a deadline can cut are a rank's wait for its delivery
//! — while others have not arrived, while the schedule runs, while the generation is being
//! published — including a rank of g + 1 waiting while a rank of g has not yet taken its output.

use super::{Group, HarnessArc, Stopping, Task, check, concurrently, run_and_check, teardown};
use crate::device::{held_schedule, lean};
use crate::properties::{self, Observed};
use crate::script::Script;
use crate::witness::{Flag, Witness};
use ruccl_core::sync::thread;
use ruccl_sim::FaultPlan;
use std::time::Duration;

/// The timeout the models give; under a checker its length is not modelled.
pub const TIMEOUT: Duration = Duration::from_millis(1);

/// The ranks follow `script`, whose calls give some ranks deadlines. In every generation either
/// every rank gets its output, or every rank gets the same `TimedOut` (naming the generation the
/// rank whose deadline passed was waiting on), and every later generation gets it too.
///
/// Checks **abort** for timeouts (a deadline aborts the communicator with `TimedOut`; a
/// published generation is never split by one rank's deadline: the slip of checking the
/// deadline before the delivery splits it), **agreement**, **reuse**, **failure delivery** for
/// the generations before, **no hang, no poison** and **resources** (the deposits the timeout
/// hands back are released).
pub fn timeouts(script: Script) {
    let group = Group::new(lean(), script, FaultPlan::none());
    run_and_check(group, Vec::new(), Stopping::default());
}

/// Executions of [`timeout_in_the_next_generation`] in which rank 1 timed out in generation 1
/// while rank 0 was still inside its call of generation 0, out of all.
pub static TIMEOUT_IN_FLIGHT: Witness = Witness::new();

/// A timeout of a rank waiting in g + 1: two ranks, two generations, rank 1 with a deadline in
/// generation 1 only. Rank 1 may deposit into generation 1 and time out there while rank 0 has
/// not yet taken its output of generation 0: generation 0 is still delivered whole to rank 0,
/// and generation 1 fails on both ranks with rank 1's `TimedOut` naming generation 1 and rank 0
/// as missing.
///
/// Checks **abort** for timeouts and **reuse** (g + 1's timeout never reaches a rank of g) with
/// **agreement**, **no hang, no poison** and **resources**. [`TIMEOUT_IN_FLIGHT`] counts the
/// executions that hit the case.
pub fn timeout_in_the_next_generation() {
    let script = Script::all_reduce(2, 2, 3).edit(1, 1, |call| call.timeout = Some(TIMEOUT));
    let group = Group::new(lean(), script, FaultPlan::none());
    let zero_left = HarnessArc::new(Flag::default());
    let zero_left_seen = HarnessArc::clone(&zero_left);
    let (rank0, rank1) = (HarnessArc::clone(&group), HarnessArc::clone(&group));
    let tasks: Vec<Task<Vec<_>>> = vec![
        Box::new(move || {
            let first = rank0.call(0, 0);
            zero_left.raise();
            vec![first, rank0.call(0, 1)]
        }),
        Box::new(move || {
            let first = rank1.call(1, 0);
            let second = rank1.call(1, 1);
            let left = zero_left_seen.is_raised();
            TIMEOUT_IN_FLIGHT.saw(second.is_err() && !left);
            vec![first, second]
        }),
    ];
    let observed = Observed {
        per_rank: concurrently(tasks),
    };
    check(&group, &observed, Stopping::default());
    properties::published_delivered_whole(0, &observed.generation(0), &group.script.expected(0));
    teardown(group);
}

/// Executions of [`timeout_while_the_schedule_runs`] in which the deadline passed while the
/// schedule ran (the `TimedOut` names no missing rank), out of all.
pub static TIMEOUT_WHILE_RUNNING: Witness = Witness::new();

/// A deadline that passes while the schedule runs: every rank waits with a deadline, the device
/// holds the schedule at `begin`, and a harness thread lets it go on only once the communicator
/// is aborted — so once every rank has arrived, some waiter's deadline must pass while the
/// schedule runs (the runner itself never waits; it may also pass earlier, before the last rank
/// arrived). The runner discards its outputs, and every rank gets that waiter's `TimedOut` —
/// naming no missing rank when it passed while the schedule ran.
///
/// Checks **abort** for timeouts (a stop wins over a running schedule; the lock is free while it
/// runs, or the timer thread could not mark the deadline), **agreement**, **no hang, no poison**
/// and **resources** (the discarded outputs are released). [`TIMEOUT_WHILE_RUNNING`] counts the
/// executions where the deadline passed while the schedule ran.
pub fn timeout_while_the_schedule_runs(world: usize) {
    assert!(
        world >= 2,
        "harness: a world of one has no waiter whose deadline could pass"
    );
    let script = Script::all_reduce(world, 1, world + 1).edit_all(0, |call| {
        call.timeout = Some(TIMEOUT);
    });
    let group = Group::new(held_schedule(lean()), script, FaultPlan::none());
    let releaser = HarnessArc::clone(&group);
    let release = Box::new(move || {
        let hold = releaser.device.intercept();
        // Until the communicator is aborted: a deadline passing before the last arrival leaves
        // the schedule never to run; one passing while it is held is what this is about.
        while !releaser.communicator.is_aborted() {
            thread::yield_now();
        }
        hold.release();
    }) as Task<()>;
    let winner = run_and_check(group, vec![release], Stopping::default());
    properties::abort_wins_over_running_schedule(0, winner.as_ref());
    TIMEOUT_WHILE_RUNNING.saw(matches!(
        winner,
        Some(ruccl_core::NativeCollectiveError::TimedOut { ref missing, .. }) if missing.is_empty()
    ));
}
