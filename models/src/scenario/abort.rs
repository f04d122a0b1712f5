//! Aborts racing the ranks.

use super::{Group, HarnessArc, Stopping, Task, check, concurrently, run_and_check, teardown};
use crate::device::{census_check, faulty, held_schedule, lean};
use crate::properties::{self, Observed, Stops};
use crate::script::Script;
use crate::witness::{Flag, Witness};
use ruccl_core::sync::{Condvar, Mutex};
use ruccl_sim::FaultPlan;
use ruccl_sim::FaultSpec;
use ruccl_sim::fault::{DropTarget, FaultSite};

/// `abort` racing the ranks: the ranks follow `script` while one extra thread per entry of
/// `reasons` aborts the communicator with that reason. Depending on where an abort lands it races
/// a deposit, the last arrival of a generation, the schedule, a publication, ranks taking their
/// outputs, or ranks of g + 1 depositing while g delivers; where the script gives ranks
/// timeouts, it races their deadlines too.
///
/// Checks **abort** — the first stop wins and is sticky; a published generation is delivered
/// whole, every later one (and a later call, which fails fast) gets the stop — with
/// **agreement**, **reuse**, **no hang, no poison** and **resources** (the deposits an abort hands
/// back are released).
pub fn abort_racing_the_ranks(script: Script, reasons: &'static [&'static str]) {
    let group = Group::new(lean(), script, FaultPlan::none());
    let aborters = reasons
        .iter()
        .map(|&reason| {
            let group = HarnessArc::clone(&group);
            Box::new(move || group.communicator.abort(reason)) as Task<()>
        })
        .collect();
    run_and_check(
        group,
        aborters,
        Stopping {
            reasons,
            certain: true,
        },
    );
}

/// The reason [`abort_while_the_schedule_runs`] aborts with.
pub const DURING_THE_SCHEDULE: &str = "aborted while the schedule runs";

/// An abort that lands while the schedule runs: the device holds the schedule at `begin` (the
/// last arriver has released the state lock), a harness thread aborts, then lets it finish. The
/// runner must discard its outputs and every rank get the abort error — and the abort must get
/// the lock at all, which it could not if the schedule ran under it (the checkers report that
/// deadlock).
///
/// Checks **abort** (wins over a running generation, sticky, fails fast) with **agreement**,
/// **no hang, no poison** and **resources** (the discarded outputs are released).
pub fn abort_while_the_schedule_runs(world: usize) {
    let script = Script::all_reduce(world, 1, world + 1);
    let group = Group::new(held_schedule(lean()), script, FaultPlan::none());
    let aborter = HarnessArc::clone(&group);
    let abort = Box::new(move || {
        aborter.device.intercept().wait_until_running();
        aborter.communicator.abort(DURING_THE_SCHEDULE);
        aborter.device.intercept().release();
    }) as Task<()>;
    let stopping = Stopping {
        reasons: &[DURING_THE_SCHEDULE],
        certain: true,
    };
    let winner = run_and_check(group, vec![abort], stopping);
    properties::abort_wins_over_running_schedule(0, winner.as_ref());
}

/// The reason [`abort_releases_the_deposits`] aborts with.
pub const STRANDED: &str = "the other ranks never came";

/// An abort releases the deposits of the generation being collected: rank 0 calls, the other
/// ranks never do, and a harness thread aborts. Rank 0 gets the abort error, and its prepared
/// input — armed by the fault injector to panic when dropped — is released by the abort, with the
/// panic contained; a core that left it in its slot would keep it alive until the communicator is
/// dropped (the census sees it), and drop it — panicking — only then.
///
/// Checks **abort** (the deposits of an unpublished generation are released, contained), **no
/// hang, no poison** and **resources**.
pub fn abort_releases_the_deposits(world: usize) {
    let plan = FaultPlan::new(vec![
        FaultSpec::new(FaultSite::Drop(DropTarget::Prepared))
            .on_rank(0)
            .in_generation(0),
    ]);
    let script = Script::all_reduce(world, 1, world + 1);
    let group = Group::new(faulty(world, plan.clone()), script, plan);
    let rank = HarnessArc::clone(&group);
    let aborter = HarnessArc::clone(&group);
    let tasks: Vec<Task<Option<_>>> = vec![
        Box::new(move || Some(rank.call(0, 0))),
        Box::new(move || {
            aborter.communicator.abort(STRANDED);
            None
        }),
    ];
    let delivered: Vec<_> = concurrently(tasks).into_iter().flatten().collect();
    let observed = Observed {
        per_rank: vec![delivered],
    };
    let stops = Stops {
        reasons: &[STRANDED],
        script: &group.script,
    };
    let winner = properties::abort(&observed, stops, &[], |generation| {
        group.outcome(generation)
    });
    properties::abort_wins_over_running_schedule(0, winner.as_ref());
    census_check(&group.device, "once rank 0 returned");
    let teardown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || teardown(group)));
    if teardown.is_err() {
        properties::resources(
            "the communicator was dropped",
            &[(
                "a deposit of the aborted generation, dropped (panicking) only now".to_owned(),
                1,
            )],
            &[],
        );
    }
}

/// The reason [`abort_between_the_generations_in_flight`] aborts with.
pub const IN_FLIGHT: &str = "aborted with two generations in flight";

/// Executions of [`abort_between_the_generations_in_flight`] in which rank 0 was still inside
/// its call of generation 0 when the abort landed (its output published, perhaps not yet taken),
/// out of all.
pub static ABORT_IN_FLIGHT: Witness = Witness::new();

/// An abort between the two generations in flight: two ranks, two generations. A harness thread
/// aborts as soon as rank 1 has returned from generation 0 — which needs generation 0 published
/// — while rank 1 goes on into generation 1, so rank 1 may be depositing into (or waiting in)
/// generation 1 while rank 0 has not yet taken its output of generation 0. Rank 0 calls
/// generation 1 only after the abort (so generation 1 cannot complete first). Generation 0 must
/// be delivered whole (it was published before the abort); generation 1 must fail on both ranks
/// with the abort.
///
/// Checks **abort** (a published generation is delivered whole; the next one gets the abort)
/// with **reuse**, **agreement**, **no hang, no poison** and **resources** (rank 1's deposit into
/// generation 1, handed back by the abort, released). [`ABORT_IN_FLIGHT`] counts the executions
/// that hit the case.
pub fn abort_between_the_generations_in_flight() {
    let script = Script::all_reduce(2, 2, 3);
    let group = Group::new(lean(), script, FaultPlan::none());
    let returned = HarnessArc::new(Gate::new());
    let aborted = HarnessArc::new(Gate::new());
    let (rank0, rank1, aborter) = (
        HarnessArc::clone(&group),
        HarnessArc::clone(&group),
        HarnessArc::clone(&group),
    );
    let (returned_opener, aborted_waiter) =
        (HarnessArc::clone(&returned), HarnessArc::clone(&aborted));
    let zero_left = HarnessArc::new(Flag::default());
    let zero_left_seen = HarnessArc::clone(&zero_left);
    let tasks: Vec<Task<Option<Vec<_>>>> = vec![
        Box::new(move || {
            let first = rank0.call(0, 0);
            zero_left.raise();
            aborted_waiter.wait();
            Some(vec![first, rank0.call(0, 1)])
        }),
        Box::new(move || {
            let first = rank1.call(1, 0);
            returned_opener.open();
            Some(vec![first, rank1.call(1, 1)])
        }),
        Box::new(move || {
            returned.wait();
            ABORT_IN_FLIGHT.saw(!zero_left_seen.is_raised());
            aborter.communicator.abort(IN_FLIGHT);
            aborted.open();
            None
        }),
    ];
    let observed = Observed {
        per_rank: concurrently(tasks).into_iter().flatten().collect(),
    };
    let stopping = Stopping {
        reasons: &[IN_FLIGHT],
        certain: true,
    };
    let winner = check(&group, &observed, stopping);
    properties::published_delivered_whole(0, &observed.generation(0), &group.script.expected(0));
    properties::abort_wins_over_running_schedule(1, winner.as_ref());
    teardown(group);
}

/// A one-shot gate for harness threads, through the facade (the checkers see it).
pub(super) struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    /// A closed gate.
    pub(super) fn new() -> Self {
        Self {
            open: Mutex::new(false),
            opened: Condvar::new(),
        }
    }

    /// Open the gate (once is enough; later calls change nothing).
    pub(super) fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    /// Block until the gate is open.
    pub(super) fn wait(&self) {
        let mut open = self.open.lock();
        while !*open {
            open = self.opened.wait(open);
        }
    }
}
