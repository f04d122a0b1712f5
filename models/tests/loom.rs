//! loom: every interleaving — or, where a model is too large for that, every interleaving with at
//! most a few preemptions — of the scenarios. Run with `cargo loom` (see models/README.md, which
//! lists every model's executions and time).
//!
//! Each test names the properties its scenario checks (the scenario's docs say how); every
//! scenario also checks agreement, no hang and resources (the census) after every run.
//!
//! loom models at most 5 threads, the main one included: a deadline that parks spawns its timer
//! thread (`core/src/sync/checked_deadline.rs`), which counts.
#![cfg(ruccl_loom)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_core::sync::SpinBudget;
use ruccl_core::{Algorithm, Collective, ReduceOperation};
use ruccl_models::budget::Profile;
use ruccl_models::checkers::loom;
use ruccl_models::scenario::{self, TIMEOUT};
use ruccl_models::script::{Call, Script, Slip};
use ruccl_models::witness::Witness;
use ruccl_sim::FaultSpec;
use ruccl_sim::fault::every_site;
use ruccl_sim::fault::{FaultAction, FaultSite};

fn quick() -> bool {
    Profile::current().is_quick()
}

/// Explore `model` with at most `bound` preemptions (`None`: every interleaving). Refuses to
/// start if the facade's `Backoff` polls under loom: each poll is an unlock, an atomic load loom
/// branches on and a relock, which multiplies the state space (see models/README.md) — no model
/// here would finish in the CI budget. The lock-free read of a delivery slot is checked by the
/// models of [`explore_polling`].
fn explore(name: &str, bound: Option<usize>, model: impl Fn() + Sync + Send + 'static) {
    let polls = SpinBudget::for_world(2).polls();
    assert_eq!(
        polls, 0,
        "the sync facade polls ({polls} poll) under loom, which makes these models intractable: \
         core/src/sync/loom.rs `backoff` must return (0, 0) unless a model asks for one poll \
         (see models/README.md)"
    );
    loom::explore(name, bound, model);
}

/// Explore `model` with every waiter reading its delivery slot once without the lock before it
/// parks, so that loom checks that read (and the slot's `UnsafeCell`) against the publication.
fn explore_polling(name: &str, bound: Option<usize>, model: impl Fn() + Sync + Send + 'static) {
    ruccl_core::sync::poll_delivery_once(true);
    let polls = SpinBudget::for_world(2).polls();
    assert_eq!(polls, 1, "a polling model must poll exactly once");
    loom::explore(name, bound, move || {
        // The communicators of the model are built by the thread that set the poll.
        assert_eq!(SpinBudget::for_world(2).polls(), 1);
        model();
    });
    ruccl_core::sync::poll_delivery_once(false);
}

/// The preemption bound of a model whose full-profile bound is `full` (`None`: every
/// interleaving): `full`, at most 2 in the quick profile (mutation testing), and whatever
/// `RUCCL_LOOM_BOUND` says when it is set (`none`, or a number: to measure a model at another
/// bound while developing).
fn bound(full: Option<usize>) -> Option<usize> {
    match std::env::var("RUCCL_LOOM_BOUND") {
        Ok(bound) => bound.parse().ok(),
        Err(_) if quick() => Some(full.map_or(2, |full| full.min(2))),
        Err(_) => full,
    }
}

/// Every interleaving (bound 2 in the quick profile).
fn exhaustive() -> Option<usize> {
    bound(None)
}

/// Print how many executions hit a schedule-dependent case.
fn report(witness: &Witness, case: &str) {
    let (hits, executions) = witness.counts();
    eprintln!("[loom]   … {case}: in {hits} of {executions} executions");
}

/// `world` ranks, `generations` generations of `collective` over `length` elements: generation 0
/// fails by `slip` on the last rank, then every later generation succeeds, alternating the ring
/// and the one-step algorithm.
fn slipped(
    world: usize,
    generations: usize,
    collective: Collective,
    length: usize,
    slip: Slip,
) -> Script {
    Script::uniform(world, generations, move |generation| {
        let algorithm = if generation % 2 == 1 {
            Algorithm::Ring
        } else {
            Algorithm::Direct
        };
        Call::new(collective, length).via(algorithm)
    })
    .slip(0, world - 1, slip)
}

/// All-reduce, W = 2 × G = 3, a reduction mismatch in generation 0.
fn all_reduce_2x3() -> Script {
    let collective = Collective::AllReduce(ReduceOperation::Sum);
    slipped(2, 3, collective, 3, Slip::Operation)
}

// Agreement, reuse, failure delivery, no hang, resources — exhaustive.

/// Agreement, reuse, failure delivery (a reduction mismatch, then a generation that works),
/// no hang, resources: W = 3 × G = 2, every interleaving. One model for what v1 checked with two
/// of this size (success, mismatch): a failed generation is published exactly as a delivered one
/// (models/README.md, "One model for success and mismatch").
#[test]
fn mismatch_then_success_3x2_every_interleaving() {
    let script = Script::all_reduce(3, 2, 4).slip(0, 2, Slip::Operation);
    explore("mismatch then success W=3 G=2", exhaustive(), move || {
        scenario::run_script(script.clone());
    });
}

/// Agreement, reuse, failure delivery (a reduction mismatch), no hang, resources — all-reduce,
/// W = 2 × G = 3, every interleaving.
#[test]
fn all_reduce_2x3_every_interleaving() {
    let script = all_reduce_2x3();
    explore("all-reduce W=2 G=3", exhaustive(), move || {
        scenario::run_script(script.clone());
    });
}

/// Agreement, reuse, failure delivery (a shape mismatch), no hang, resources — reduce-scatter,
/// W = 2 × G = 3, every interleaving.
#[test]
fn reduce_scatter_2x3_every_interleaving() {
    let collective = Collective::ReduceScatter(ReduceOperation::Max);
    let script = slipped(2, 3, collective, 4, Slip::Length);
    explore("reduce-scatter W=2 G=3", exhaustive(), move || {
        scenario::run_script(script.clone());
    });
}

/// Agreement, reuse, failure delivery (an algorithm mismatch), no hang, resources — all-gather,
/// W = 2 × G = 3, every interleaving.
#[test]
fn all_gather_2x3_every_interleaving() {
    let script = slipped(2, 3, Collective::AllGather, 2, Slip::Algorithm);
    explore("all-gather W=2 G=3", exhaustive(), move || {
        scenario::run_script(script.clone());
    });
}

/// Agreement, reuse, failure delivery (a root mismatch), no hang, resources — broadcast,
/// W = 2 × G = 3, every interleaving.
#[test]
fn broadcast_2x3_every_interleaving() {
    let script = slipped(2, 3, Collective::Broadcast { root: 1 }, 3, Slip::Root);
    explore("broadcast W=2 G=3", exhaustive(), move || {
        scenario::run_script(script.clone());
    });
}

/// Agreement, reuse, failure delivery (a root mismatch), no hang, resources — contract v3's
/// reduce to one root, W = 2 × G = 3, every interleaving.
#[test]
fn reduce_2x3_every_interleaving() {
    let collective = Collective::Reduce {
        op: ReduceOperation::Sum,
        root: 1,
    };
    let script = slipped(2, 3, collective, 3, Slip::Root);
    explore("reduce W=2 G=3", exhaustive(), move || {
        scenario::run_script(script.clone());
    });
}

/// Failure delivery (a panic in the second exchange step), agreement, reuse, no hang or poison,
/// resources: W = 2 × G = 3, every interleaving.
#[test]
fn exchange_panic_then_clean_2x3_every_interleaving() {
    let spec = FaultSpec::new(FaultSite::Exchange {
        step: Some(1),
        action: FaultAction::Panic,
    })
    .in_generation(0);
    let script = Script::all_reduce(2, 3, 3).edit_all(0, |call| call.algorithm = Algorithm::Ring);
    explore(
        "exchange panic then clean W=2 G=3",
        exhaustive(),
        move || {
            scenario::fault_then_clean(script.clone(), spec);
        },
    );
}

/// Failure delivery at every fault site of the decorator (each in its own model), agreement,
/// reuse, no hang or poison (panicking drops included), resources: W = 2 × G = 2, every
/// interleaving.
#[test]
fn a_fault_at_every_site_then_a_clean_generation_every_interleaving() {
    let script = Script::all_reduce(2, 2, 3).edit_all(0, |call| call.algorithm = Algorithm::Ring);
    for spec in every_site(2, 2, 0) {
        let name = format!("fault at {spec} W=2 G=2");
        let script = script.clone();
        explore(&name, exhaustive(), move || {
            scenario::fault_then_clean(script.clone(), spec);
        });
    }
}

// Abort — exhaustive.

/// Abort wins over a running schedule (the lock is free while it runs), sticky, fails fast;
/// resources: W = 2, every interleaving.
#[test]
fn abort_while_the_schedule_runs_2_every_interleaving() {
    explore("abort during the schedule W=2", exhaustive(), || {
        scenario::abort_while_the_schedule_runs(2);
    });
}

/// Abort between the two generations in flight: a published generation is delivered whole, the
/// next one aborted; resources (the deposit of g + 1 released). Every interleaving.
#[test]
fn abort_between_the_generations_in_flight_every_interleaving() {
    explore(
        "abort with two generations in flight W=2",
        exhaustive(),
        || {
            scenario::abort_between_the_generations_in_flight();
        },
    );
    report(
        &scenario::ABORT_IN_FLIGHT,
        "abort while rank 0 was still in generation 0",
    );
}

/// Abort releases the deposits of the generation being collected (contained panicking drop);
/// resources: W = 2, every interleaving.
#[test]
fn an_abort_releases_the_deposits_every_interleaving() {
    explore("abort releases the deposits W=2", exhaustive(), || {
        scenario::abort_releases_the_deposits(2);
    });
}

/// Abort racing two ranks through two generations (first wins, sticky, fails fast, a published
/// generation delivered whole), agreement, reuse, resources. Every interleaving.
#[test]
fn abort_racing_the_ranks_2x2_every_interleaving() {
    let script = Script::all_reduce(2, 2, 3);
    explore("abort racing W=2 G=2", exhaustive(), move || {
        scenario::abort_racing_the_ranks(script.clone(), &["racing"]);
    });
}

/// Abort racing three ranks (4 threads), agreement, resources: every interleaving.
#[test]
fn abort_racing_the_ranks_3x1_every_interleaving() {
    let script = Script::all_reduce(3, 1, 4);
    explore("abort racing W=3 G=1", exhaustive(), move || {
        scenario::abort_racing_the_ranks(script.clone(), &["racing"]);
    });
}

/// The first of two aborts wins and sticks (4 threads): every interleaving.
#[test]
fn first_abort_wins_every_interleaving() {
    let script = Script::all_reduce(2, 1, 3);
    explore("two aborts W=2 G=1", exhaustive(), move || {
        scenario::abort_racing_the_ranks(script.clone(), &["first", "second"]);
    });
}

// Timeouts — exhaustive: the timer thread fires at every point loom can put it.

/// A deadline racing the other rank's arrival, the publication and the delivery (both ranks
/// wait with one): every rank gets its output or every rank the same `TimedOut`; resources.
/// W = 2 × G = 1, every interleaving.
#[test]
fn timeouts_racing_delivery_and_publication_every_interleaving() {
    let script = Script::all_reduce(2, 1, 3)
        .timing_out(0, TIMEOUT)
        .timing_out(1, TIMEOUT);
    explore("timeouts on both ranks W=2 G=1", exhaustive(), move || {
        scenario::timeouts(script.clone());
    });
}

/// The same through two generations (a deadline of g + 1 racing g's delivery too): bound 3.
#[test]
fn timeouts_racing_delivery_and_publication_2x2_bounded() {
    let script = Script::all_reduce(2, 2, 3)
        .timing_out(0, TIMEOUT)
        .timing_out(1, TIMEOUT);
    explore(
        "timeouts on both ranks W=2 G=2",
        bound(Some(3)),
        move || {
            scenario::timeouts(script.clone());
        },
    );
}

/// A deadline on one of three ranks (4 threads): agreement on `TimedOut` or outputs; resources.
/// W = 3 × G = 1, every interleaving.
#[test]
fn a_timeout_among_three_ranks_every_interleaving() {
    let script = Script::all_reduce(3, 1, 4).timing_out(1, TIMEOUT);
    explore("timeout on rank 1 of W=3 G=1", exhaustive(), move || {
        scenario::timeouts(script.clone());
    });
}

/// A timeout of a rank waiting in g + 1 while a rank of g has not yet taken its output: g
/// delivered whole, g + 1 timed out on both. Every interleaving.
#[test]
fn timeout_in_the_next_generation_every_interleaving() {
    explore("timeout in generation 1 W=2 G=2", exhaustive(), || {
        scenario::timeout_in_the_next_generation();
    });
    report(
        &scenario::TIMEOUT_IN_FLIGHT,
        "rank 1 timed out in generation 1 while rank 0 was still in generation 0",
    );
}

/// A deadline passing while the schedule runs (or before the last arrival): every rank gets the
/// waiter's `TimedOut`; the runner's outputs are released. W = 2, every interleaving.
#[test]
fn timeout_while_the_schedule_runs_every_interleaving() {
    explore("timeout during the schedule W=2", exhaustive(), || {
        scenario::timeout_while_the_schedule_runs(2);
    });
    report(
        &scenario::TIMEOUT_WHILE_RUNNING,
        "the deadline passed while the schedule ran",
    );
}

/// A deadline racing an abort (4 threads): the first stop wins on every rank. W = 2 × G = 1,
/// every interleaving.
#[test]
fn a_timeout_racing_an_abort_every_interleaving() {
    let script = Script::all_reduce(2, 1, 3).timing_out(0, TIMEOUT);
    explore("timeout racing an abort W=2 G=1", exhaustive(), move || {
        scenario::abort_racing_the_ranks(script.clone(), &["racing"]);
    });
}

// Delivery without the lock — every waiter reads its slot once without the lock before it
// parks, so loom checks that read (the slot's `UnsafeCell`, the `Release`/`Acquire` pair on its
// flag) against the publication. See models/README.md, "Delivery without the lock".

/// Agreement, reuse (a rank of g + 1 running ahead while a rank of g has not taken its output,
/// reading only its own generation's slot), failure delivery (a reduction mismatch), no hang,
/// resources — all-reduce W = 2 × G = 3, waiters polling. Every interleaving.
#[test]
fn lock_free_delivery_2x3_every_interleaving() {
    let script = all_reduce_2x3();
    explore_polling("polling: all-reduce W=2 G=3", exhaustive(), move || {
        scenario::run_script(script.clone());
    });
}

/// Abort racing two polling ranks through two generations: a generation published before the
/// abort is delivered whole from the slots, a later one aborted on every rank. Every
/// interleaving.
#[test]
fn lock_free_delivery_abort_racing_2x2_every_interleaving() {
    let script = Script::all_reduce(2, 2, 3);
    explore_polling("polling: abort racing W=2 G=2", exhaustive(), move || {
        scenario::abort_racing_the_ranks(script.clone(), &["racing"]);
    });
}

/// A timeout of a polling rank waiting in g + 1 while a rank of g has not yet taken its output:
/// g delivered whole, g + 1 timed out on both. Every interleaving.
#[test]
fn lock_free_delivery_timeout_in_the_next_generation_every_interleaving() {
    explore_polling(
        "polling: timeout in generation 1 W=2 G=2",
        exhaustive(),
        || {
            scenario::timeout_in_the_next_generation();
        },
    );
}

/// A second concurrent call of a polling rank is refused with `RankBusy` (the flag the rank
/// clears when it takes its delivery without the lock). Every interleaving.
#[test]
fn lock_free_delivery_rank_called_twice_every_interleaving() {
    explore_polling("polling: RankBusy W=2", exhaustive(), || {
        scenario::a_rank_called_twice_at_once(2);
    });
}

// RankBusy, registry — exhaustive.

/// A second concurrent call of a rank is refused with `RankBusy` and disturbs nothing; the next
/// generation works. Every interleaving.
#[test]
fn a_rank_called_twice_at_once_every_interleaving() {
    explore("RankBusy W=2", exhaustive(), || {
        scenario::a_rank_called_twice_at_once(2);
    });
}

/// Registry: concurrent lookups of one list share a communicator, another order does not.
#[test]
fn concurrent_lookups_every_interleaving() {
    explore("registry lookups, 3 callers", exhaustive(), || {
        scenario::concurrent_lookups(3);
    });
}

/// Registry and abort: an aborted communicator is replaced, never handed out again.
#[test]
fn aborted_communicator_is_replaced_every_interleaving() {
    explore("registry replacement", exhaustive(), || {
        scenario::aborted_communicator_is_replaced(false, 0);
    });
}

/// Registry and abort, then agreement and resources on the replacement.
#[test]
fn aborted_communicator_is_replaced_and_works_every_interleaving() {
    explore(
        "registry replacement, then 2 ranks on it",
        exhaustive(),
        || {
            scenario::aborted_communicator_is_replaced(true, 1);
        },
    );
}

// Larger worlds — bounded.

/// Agreement, reuse, no hang, resources: W = 3 × G = 3, bound 3.
#[test]
fn success_3x3_bounded() {
    let script = Script::all_reduce(3, 3, 4);
    explore("success W=3 G=3", bound(Some(3)), move || {
        scenario::run_script(script.clone());
    });
}

/// Agreement, reuse, no hang, resources: W = 4 × G = 2 (5 threads with none to spare), bound 2.
#[test]
fn success_4x2_bounded() {
    let script = Script::all_reduce(4, 2, 5);
    explore("success W=4 G=2", bound(Some(2)), move || {
        scenario::run_script(script.clone());
    });
}
