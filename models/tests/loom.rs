//! loom: every interleaving — or, where a model is too large for that, every interleaving with at
//! most a few preemptions — of the scenarios. Run with `cargo loom` (see models/README.md).
//!
//! Preemption bounds: empirically (CHESS, loom's own guidance, and the bugs planted for
//! models/README.md) concurrency bugs need very few preemptions; every classic barrier bug
//! planted there is found with a bound of 2. Bound 2 is what tokio's CI runs with; we use 2 or 3
//! where the budget allows it.
#![cfg(ruccl_loom)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_core::sync::Backoff;
use ruccl_models::budget::Profile;
use ruccl_models::checkers::loom;
use ruccl_models::scenario::{self, Shape};
use ruccl_sim::FaultSpec;
use ruccl_sim::fault::every_site;
use ruccl_sim::fault::{FaultAction, FaultSite};

fn quick() -> bool {
    Profile::current().is_quick()
}

/// Explore `model` with at most `bound` preemptions (`None`: every interleaving). Refuses to
/// start if the facade's `Backoff` spins under loom: each spin poll reads the `progress` atomic,
/// whose every possible value loom explores, and that multiplies the state space by hundreds
/// (W = 2 × G = 2: 52 874 executions instead of 90; see models/README.md) — no model here would
/// finish in the CI budget.
fn explore(name: &str, bound: Option<usize>, model: impl Fn() + Sync + Send + 'static) {
    let polls = Backoff::for_world(2).polls();
    assert_eq!(
        polls, 0,
        "the sync facade spins ({polls} poll) under loom, which makes these models intractable: \
         core/src/sync/loom.rs `backoff` must return (0, 0) (see models/README.md)"
    );
    loom::explore(name, bound, model);
}

/// No bound in the full profile; bound 2 in the quick one (mutation testing).
fn exhaustive() -> Option<usize> {
    quick().then_some(2)
}

// Exhaustive: no preemption bound.

#[test]
fn success_2x3_every_interleaving() {
    explore("success W=2 G=3", exhaustive(), || {
        scenario::all_succeed(Shape::new(2, 3));
    });
}

#[test]
fn success_3x2_every_interleaving() {
    explore("success W=3 G=2", exhaustive(), || {
        scenario::all_succeed(Shape::new(3, 2));
    });
}

#[test]
fn mismatched_operations_2x3_every_interleaving() {
    explore("mismatch W=2 G=3", exhaustive(), || {
        scenario::mismatched_operations(Shape::new(2, 3));
    });
}

#[test]
fn mismatched_operations_3x2_every_interleaving() {
    explore("mismatch W=3 G=2", exhaustive(), || {
        scenario::mismatched_operations(Shape::new(3, 2));
    });
}

#[test]
fn exchange_panic_then_clean_2x3_every_interleaving() {
    let spec = FaultSpec::new(FaultSite::Exchange {
        step: Some(1),
        action: FaultAction::Panic,
    })
    .in_generation(0);
    explore(
        "exchange panic then clean W=2 G=3",
        exhaustive(),
        move || {
            scenario::fault_then_clean(Shape::new(2, 3), spec);
        },
    );
}

#[test]
fn abort_while_the_ring_runs_2_every_interleaving() {
    explore("abort during the ring W=2", exhaustive(), || {
        scenario::abort_while_the_ring_runs(2);
    });
}

#[test]
fn concurrent_lookups_every_interleaving() {
    explore("registry lookups, 3 callers", None, || {
        scenario::concurrent_lookups(3);
    });
}

#[test]
fn aborted_communicator_is_replaced_every_interleaving() {
    explore("registry replacement", None, || {
        scenario::aborted_communicator_is_replaced(false, 0);
    });
}

// Bounded.

#[test]
fn success_3x3_bounded() {
    explore("success W=3 G=3", Some(3), || {
        scenario::all_succeed(Shape::new(3, 3));
    });
}

#[test]
fn success_4x2_bounded() {
    explore("success W=4 G=2", Some(2), || {
        scenario::all_succeed(Shape::new(4, 2));
    });
}

#[test]
fn a_fault_at_every_site_then_a_clean_generation_every_interleaving() {
    for spec in every_site(2, 0) {
        let name = format!("fault at {spec} W=2 G=2");
        explore(&name, exhaustive(), move || {
            scenario::fault_then_clean(Shape::new(2, 2), spec);
        });
    }
}

#[test]
fn abort_racing_the_ranks_2x2_bounded() {
    explore("abort racing W=2 G=2", Some(3), || {
        scenario::abort_racing_the_ranks(Shape::new(2, 2), &["racing"]);
    });
}

#[test]
fn abort_racing_the_ranks_3x1_bounded() {
    explore("abort racing W=3 G=1", Some(3), || {
        scenario::abort_racing_the_ranks(Shape::new(3, 1), &["racing"]);
    });
}

#[test]
fn first_abort_wins_bounded() {
    explore("two aborts W=2 G=1", Some(3), || {
        scenario::abort_racing_the_ranks(Shape::new(2, 1), &["first", "second"]);
    });
}

#[test]
fn aborted_communicator_is_replaced_and_works_bounded() {
    explore(
        "registry replacement, then 2 ranks on it",
        exhaustive(),
        || {
            scenario::aborted_communicator_is_replaced(true, 1);
        },
    );
}

#[test]
fn an_abort_releases_the_deposits_every_interleaving() {
    explore("abort releases the deposits W=2", exhaustive(), || {
        scenario::abort_releases_the_deposits(2);
    });
}
