//! The properties of `DESIGN.md`, one checker function each, named after the property. A
//! scenario records what every rank got back and hands it to the checkers; a violation panics
//! with `property <name> violated: …`, which is what loom and shuttle report (with the schedule).
//!
//! | property (DESIGN.md)      | checker                                                     |
//! |---------------------------|-------------------------------------------------------------|
//! | 1. agreement              | [`agreement`]                                               |
//! | 2. reuse                  | [`reuse`]                                                   |
//! | 3. failure delivery       | [`failure_delivery`]                                        |
//! | 4. no hang, no poison     | [`no_hang_no_poison`], [`refuses_rank_outside_world`], [`refuses_a_busy_rank`] (hangs: the checkers' deadlock report) |
//! | 5. abort (timeouts too)   | [`abort`], [`timed_out`], [`abort_fails_fast`], [`abort_wins_over_running_schedule`] |
//! | 6. registry               | [`registry_same_list`], [`registry_distinct_lists`], [`registry_replaces_aborted`] |
//! | 9. resources              | [`resources`]                                               |
//!
//! Properties 7 (schedules) and 8 (bitwise agreement on hardware) are properties of pure
//! functions and of devices: the core's `verify` proptests and the sim crate's conformance suite
//! own them. Every model here runs real plans on the simulated device, which rejects a schedule
//! that breaks the contract.

use crate::script::Script;
use ruccl_core::sync::Arc;
use ruccl_core::{NativeCollectiveDevice, NativeCollectiveError, NativeCommunicator};
use ruccl_sim::fault::Outcome;

/// What one call returned: the output's elements, or the error.
pub type Delivered = Result<Vec<i64>, NativeCollectiveError>;

/// Everything a scenario's ranks got back: `per_rank[r][k]` is rank `r`'s `k`-th call, which
/// belongs to generation `k` (every rank calls once per generation, in order).
#[derive(Clone, Debug)]
pub struct Observed {
    /// One row per rank, one entry per call.
    pub per_rank: Vec<Vec<Delivered>>,
}

impl Observed {
    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.per_rank.len()
    }

    /// The number of generations every rank took part in.
    pub fn generations(&self) -> usize {
        self.per_rank.iter().map(Vec::len).min().unwrap_or(0)
    }

    /// What every rank got in generation `generation`, in rank order.
    pub fn generation(&self, generation: usize) -> Vec<&Delivered> {
        self.per_rank
            .iter()
            .filter_map(|calls| calls.get(generation))
            .collect()
    }
}

fn violated(property: &str, detail: std::fmt::Arguments<'_>) -> ! {
    panic!("property {property} violated: {detail}")
}

/// **Agreement** (DESIGN.md property 1): in `generation`, either every rank got `Ok` holding its
/// own output of that generation (`expected[r]`), or every rank got an `Err` with the same
/// `Display` text. Never a mix, never other data.
pub fn agreement(generation: usize, deliveries: &[&Delivered], expected: &[Vec<i64>]) {
    let errors: Vec<String> = deliveries
        .iter()
        .filter_map(|delivered| delivered.as_ref().err().map(ToString::to_string))
        .collect();
    if errors.is_empty() {
        for (rank, delivered) in deliveries.iter().enumerate() {
            if let Ok(values) = delivered {
                if expected.get(rank) != Some(values) {
                    violated(
                        "agreement",
                        format_args!(
                            "generation {generation}: rank {rank} got {values:?}, expected its \
                             output of that generation {:?}",
                            expected.get(rank)
                        ),
                    );
                }
            }
        }
        return;
    }
    if errors.len() != deliveries.len() {
        violated(
            "agreement",
            format_args!(
                "generation {generation}: some ranks got Ok and others an error: {deliveries:?}"
            ),
        );
    }
    if errors.iter().any(|error| *error != errors[0]) {
        violated(
            "agreement",
            format_args!("generation {generation}: ranks got different errors: {errors:?}"),
        );
    }
}

/// **Reuse** (DESIGN.md property 2): a rank's `k`-th call is answered from generation `k` and no
/// other — a rank running ahead into `k + 1` never disturbs `k` (nor takes its output), and
/// nothing of `k + 1` reaches a rank of `k`. `expected[g][r]` is rank `r`'s output of generation
/// `g`, used to name the generation a misdirected output came from; an error that names a
/// generation must name the call's own (a timeout: the call's own or an earlier one, whose abort
/// this call inherits).
pub fn reuse(observed: &Observed, expected: &[Vec<Vec<i64>>]) {
    for (rank, calls) in observed.per_rank.iter().enumerate() {
        for (call, delivered) in calls.iter().enumerate() {
            let own = expected.get(call).and_then(|outputs| outputs.get(rank));
            match delivered {
                Ok(values) if own != Some(values) => {
                    // Not its own generation's: name the generation it came from, if any (an
                    // output of no generation at all is left to `agreement`).
                    let other = expected
                        .iter()
                        .position(|outputs| outputs.get(rank) == Some(values));
                    if let Some(other) = other {
                        violated(
                            "reuse",
                            format_args!(
                                "rank {rank}'s call {call} got generation {other}'s output"
                            ),
                        );
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    let named = named_generation(error).and_then(|g| usize::try_from(g).ok());
                    let ok = match (named, error) {
                        (None, _) => true,
                        (Some(named), NativeCollectiveError::TimedOut { .. }) => named <= call,
                        (Some(named), _) => named == call,
                    };
                    if !ok {
                        violated(
                            "reuse",
                            format_args!(
                                "rank {rank}'s call {call} got an error of generation {named:?}: \
                                 {error}"
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// The generation an error names, where it names one.
fn named_generation(error: &NativeCollectiveError) -> Option<u64> {
    match error {
        NativeCollectiveError::ReductionMismatch { generation, .. }
        | NativeCollectiveError::CollectiveMismatch { generation, .. }
        | NativeCollectiveError::ShapeMismatch { generation, .. }
        | NativeCollectiveError::TimedOut { generation, .. } => Some(*generation),
        _ => None,
    }
}

/// **Failure delivery** (DESIGN.md property 3): a generation the sim crate's predictor
/// ([`FaultPlan::predict`](ruccl_sim::FaultPlan::predict)) says fails — any mismatch of kind,
/// operation, root, algorithm or shape, an invalid collective, a prepare error or panic on any
/// rank, a `begin`/`exchange`/`finish` error or panic, a wrong output count, a panicking drop —
/// gives *every* rank exactly the predicted error; a generation without a fault (the one after a
/// failure included) gives every rank its output. Call [`agreement`] too.
pub fn failure_delivery(
    generation: usize,
    deliveries: &[&Delivered],
    outcome: &Outcome,
    expected: &[Vec<i64>],
) {
    for (rank, delivered) in deliveries.iter().enumerate() {
        match (outcome, delivered) {
            (Outcome::Delivered { .. }, Ok(values)) if expected.get(rank) == Some(values) => {}
            (Outcome::Failed(expected), Err(error)) if error == expected => {}
            (Outcome::Delivered { .. }, _) => violated(
                "failure delivery",
                format_args!(
                    "generation {generation} has no fault (or follows one) and must deliver \
                     {:?}, but rank {rank} got {delivered:?}",
                    expected.get(rank)
                ),
            ),
            (Outcome::Failed(expected), _) => violated(
                "failure delivery",
                format_args!(
                    "generation {generation} must fail on every rank with `{expected}`, but \
                     rank {rank} got {delivered:?}"
                ),
            ),
        }
    }
}

/// **No hang, no poison** (DESIGN.md property 4): every rank of the scenario returned from every
/// one of its `generations` calls (a rank that never returns is a deadlock, which loom and
/// shuttle report on their own), no panic escaped into a rank (it would have failed the join),
/// and the state lock is free afterwards — a panicking `Drop` anywhere included.
pub fn no_hang_no_poison<D: NativeCollectiveDevice>(
    observed: &Observed,
    generations: usize,
    communicator: &NativeCommunicator<D>,
) {
    for (rank, calls) in observed.per_rank.iter().enumerate() {
        if calls.len() != generations {
            violated(
                "no hang, no poison",
                format_args!(
                    "rank {rank} returned from {} of its {generations} calls",
                    calls.len()
                ),
            );
        }
    }
    // Takes the state lock: it must be free (and, with the facade's lock, unpoisonable).
    let _ = communicator.is_aborted();
}

/// **No hang, no poison** (DESIGN.md property 4), for a call that cannot take part: a rank
/// outside `0..world` is refused at once — without waiting for anyone — with `RankOutOfRange`
/// naming the rank and the world.
pub fn refuses_rank_outside_world(world: usize, delivered: &Delivered) {
    match delivered {
        Err(NativeCollectiveError::RankOutOfRange {
            rank,
            world: reported,
        }) if *rank == world && *reported == world => {}
        other => violated(
            "no hang, no poison",
            format_args!("rank {world} of a world of {world} got {other:?}"),
        ),
    }
}

/// **No hang, no poison** (DESIGN.md property 4) with **reuse** (property 2), for a rank called
/// twice at once from two threads: exactly one of the two calls (`first`, `second`) is refused,
/// at once, with `RankBusy` naming the rank, and the other takes part in the generation as if the
/// refused call had never been made — it gets its output, `expected`.
pub fn refuses_a_busy_rank(rank: usize, first: &Delivered, second: &Delivered, expected: &[i64]) {
    let busy = |delivered: &Delivered| matches!(delivered, Err(NativeCollectiveError::RankBusy { rank: named }) if *named == rank);
    let served = |delivered: &Delivered| delivered.as_deref() == Ok(expected);
    let one_each = (busy(first) && served(second)) || (busy(second) && served(first));
    if !one_each {
        violated(
            "no hang, no poison",
            format_args!(
                "two concurrent calls of rank {rank}: one must be refused with RankBusy and the \
                 other get {expected:?}, but they got {first:?} and {second:?}"
            ),
        );
    }
}

/// What may stop a communicator in a scenario: `abort` with one of `reasons`, or a rank's
/// deadline where the script gives it one.
#[derive(Clone, Copy, Debug)]
pub struct Stops<'a> {
    /// The reasons `abort` is called with.
    pub reasons: &'a [&'a str],
    /// The calls, to tell which ranks wait with a timeout.
    pub script: &'a Script,
}

impl Stops<'_> {
    /// Whether `error` is a stop this scenario can cause (checked further by [`timed_out`]).
    pub fn includes(&self, error: &NativeCollectiveError) -> bool {
        match error {
            NativeCollectiveError::Aborted { reason } => self.reasons.contains(&reason.as_str()),
            NativeCollectiveError::TimedOut {
                rank, generation, ..
            } => usize::try_from(*generation)
                .is_ok_and(|generation| self.script.times_out(generation, *rank)),
            _ => false,
        }
    }
}

/// **Abort** (DESIGN.md property 5), timeouts included, over a scenario: the first stop (an
/// abort, or a rank's deadline) wins and is sticky — every generation from the first one it
/// reaches on gets that one error on every rank ([`agreement`] checks each is whole), and no
/// generation after it succeeds; every generation before it is what `outcome(g)` predicts
/// ([`failure_delivery`]). A `TimedOut` names the first generation it reached ([`timed_out`]).
/// Returns the stop seen, if any generation got it.
pub fn abort(
    observed: &Observed,
    stops: Stops<'_>,
    expected: &[Vec<Vec<i64>>],
    outcome: impl Fn(usize) -> Outcome,
) -> Option<NativeCollectiveError> {
    let mut winner: Option<NativeCollectiveError> = None;
    for generation in 0..observed.generations() {
        let deliveries = observed.generation(generation);
        let failed = deliveries
            .iter()
            .find_map(|delivered| delivered.as_ref().err());
        match (failed, &winner) {
            (None, Some(error)) => violated(
                "abort",
                format_args!(
                    "generation {generation} succeeded after an earlier one was stopped ({error})"
                ),
            ),
            (Some(error), Some(first)) if error != first => violated(
                "abort",
                format_args!("two stops: {first} then {error}; the first must stick"),
            ),
            (Some(_), Some(_)) => {}
            (Some(error), None) if stops.includes(error) => {
                timed_out(generation, error, observed.world());
                winner = Some(error.clone());
            }
            (_, None) => {
                let own = expected.get(generation).map_or(&[][..], Vec::as_slice);
                failure_delivery(generation, &deliveries, &outcome(generation), own);
            }
        }
    }
    winner
}

/// **Abort** (DESIGN.md property 5) for a timeout: a `TimedOut` that `generation` is the first to
/// get names that generation (the one its rank was waiting on: everything before it was
/// published, or that rank would not have reached it) and, as missing, ranks of the world other
/// than its own, in order.
pub fn timed_out(generation: usize, error: &NativeCollectiveError, world: usize) {
    let NativeCollectiveError::TimedOut {
        rank,
        generation: named,
        missing,
        ..
    } = error
    else {
        return;
    };
    let in_order = missing.windows(2).all(|pair| pair[0] < pair[1]);
    let plausible = missing.iter().all(|&other| other < world && other != *rank);
    if usize::try_from(*named).ok() != Some(generation) || !in_order || !plausible {
        violated(
            "abort",
            format_args!(
                "generation {generation} is the first to time out, but got `{error}` (the \
                 generation waited on, and missing ranks other than the waiter's own, in order, \
                 expected)"
            ),
        );
    }
}

/// **Abort** (DESIGN.md property 5): a generation not yet published when the abort (or a waiter's
/// deadline) landed — its schedule running, say — is not delivered: the runner discards its
/// outputs and every rank gets the stop. `seen` is what [`abort`] returned for the scenario.
pub fn abort_wins_over_running_schedule(generation: usize, seen: Option<&NativeCollectiveError>) {
    if seen.is_none() {
        violated(
            "abort",
            format_args!(
                "generation {generation} was delivered although a stop landed before it was \
                 published"
            ),
        );
    }
}

/// **Abort** (DESIGN.md property 5): a generation published before the abort landed is
/// delivered whole — every rank gets its output (`expected[r]`), also a rank that had not taken it
/// yet when the abort came.
pub fn published_delivered_whole(
    generation: usize,
    deliveries: &[&Delivered],
    expected: &[Vec<i64>],
) {
    let whole = deliveries
        .iter()
        .enumerate()
        .all(|(rank, delivered)| delivered.as_ref().ok() == expected.get(rank));
    if !whole {
        violated(
            "abort",
            format_args!(
                "generation {generation} was published before the abort and must be delivered \
                 whole, but the ranks got {deliveries:?}"
            ),
        );
    }
}

/// **Abort** (DESIGN.md property 5), after the fact: if the communicator reports itself aborted,
/// a later call (`later` returns its result) fails fast — it returns at once, though no other rank
/// calls — with the stop every stopped generation got, or (if the stop came after the last
/// generation) an abort with one of the scenario's reasons. `must_be_aborted`: the scenario
/// aborts for sure.
pub fn abort_fails_fast<D: NativeCollectiveDevice>(
    communicator: &NativeCommunicator<D>,
    seen: Option<&NativeCollectiveError>,
    stops: Stops<'_>,
    must_be_aborted: bool,
    later: impl FnOnce() -> Delivered,
) {
    if !communicator.is_aborted() {
        if must_be_aborted || seen.is_some() {
            violated(
                "abort",
                format_args!("the communicator does not report the abort"),
            );
        }
        return;
    }
    match (later(), seen) {
        (Err(error), Some(seen)) if &error == seen => {}
        (Err(error), None) if stops.includes(&error) => {}
        (other, _) => violated(
            "abort",
            format_args!(
                "a call after the abort got {other:?}, the stopped generations got {seen:?}"
            ),
        ),
    }
}

/// **Resources** (DESIGN.md property 9): every device value — input tensor, prepared input,
/// work, output, deposit — was dropped exactly once, `when` (e.g. "once every rank returned",
/// "after the communicator was dropped"). `live` lists the kinds still alive with their counts;
/// `double` the drops of values already dropped.
pub fn resources(when: &str, live: &[(String, i64)], double: &[String]) {
    if !live.is_empty() || !double.is_empty() {
        violated(
            "resources",
            format_args!("{when}: device values still alive {live:?}, dropped twice {double:?}"),
        );
    }
}

/// **Registry** (DESIGN.md property 6): concurrent `communicator(devices)` calls for one device
/// list returned the same communicator.
pub fn registry_same_list<T>(handles: &[Arc<T>]) {
    if let Some(first) = handles.first() {
        if handles.iter().any(|handle| !Arc::ptr_eq(first, handle)) {
            violated(
                "registry",
                format_args!("concurrent calls for one device list got different communicators"),
            );
        }
    }
}

/// **Registry** (DESIGN.md property 6): different device lists (the same devices in another
/// order included) never share a communicator.
pub fn registry_distinct_lists<T>(one: &Arc<T>, other: &Arc<T>) {
    if Arc::ptr_eq(one, other) {
        violated(
            "registry",
            format_args!("two different device lists share one communicator"),
        );
    }
}

/// **Registry** and **abort** (DESIGN.md properties 5 and 6): a communicator asked for after the
/// previous one for its list was aborted is a different, live one.
pub fn registry_replaces_aborted<D: NativeCollectiveDevice>(
    aborted: &Arc<NativeCommunicator<D>>,
    replacement: &Arc<NativeCommunicator<D>>,
) {
    if Arc::ptr_eq(aborted, replacement) || replacement.is_aborted() {
        violated(
            "registry",
            format_args!("the registry handed out an aborted communicator"),
        );
    }
}
