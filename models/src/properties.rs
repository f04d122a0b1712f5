//! The properties of `DESIGN.md`, one checker function each, named after the property. A
//! scenario records what every rank got back and hands it to the checkers; a violation panics
//! with `property <name> violated: …`, which is what loom and shuttle report (with the schedule).
//!
//! | property (DESIGN.md)      | checker                                                     |
//! |---------------------------|-------------------------------------------------------------|
//! | 1. agreement              | [`agreement`]                                               |
//! | 2. reuse                  | [`reuse`]                                                   |
//! | 3. failure delivery       | [`failure_delivery`]                                        |
//! | 4. no hang, no poison     | [`no_hang_no_poison`], [`refuses_rank_outside_world`] (hangs: the checkers' deadlock report) |
//! | 5. abort                  | [`abort`], [`abort_fails_fast`], [`abort_wins_over_running_ring`] |
//! | 6. registry               | [`registry_same_list`], [`registry_distinct_lists`], [`registry_replaces_aborted`] |
//!
//! Property 7 (schedule) is a property of pure functions; the core's proptests check it.

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

/// **Agreement** (DESIGN.md property 1): in `generation`, either every rank got `Ok` holding
/// `reduction` — that generation's reduction — or every rank got an `Err` with the same
/// `Display` text. Never a mix, never other data.
pub fn agreement(generation: usize, deliveries: &[&Delivered], reduction: &[i64]) {
    let errors: Vec<String> = deliveries
        .iter()
        .filter_map(|delivered| delivered.as_ref().err().map(ToString::to_string))
        .collect();
    if errors.is_empty() {
        for (rank, delivered) in deliveries.iter().enumerate() {
            if let Ok(values) = delivered {
                if values.as_slice() != reduction {
                    violated(
                        "agreement",
                        format_args!(
                            "generation {generation}: rank {rank} got {values:?}, \
                             expected that generation's reduction {reduction:?}"
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
/// other — a fast rank re-entering for `k + 1` never disturbs `k` (nor takes its output), and `k +
/// 1` never starts before every rank has left `k`. `reductions[g]` is generation `g`'s reduction,
/// used to name the generation a misdirected output came from; an error that names a generation
/// must name the call's own.
pub fn reuse(observed: &Observed, reductions: &[Vec<i64>]) {
    for (rank, calls) in observed.per_rank.iter().enumerate() {
        for (call, delivered) in calls.iter().enumerate() {
            match delivered {
                Ok(values) if reductions.get(call) != Some(values) => {
                    // Not its own generation's: name the generation it came from, if any (an
                    // output of no generation at all is left to `agreement`).
                    if let Some(other) = reductions.iter().position(|reduction| reduction == values)
                    {
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
                    if let Some(named) = named_generation(error) {
                        if usize::try_from(named).ok() != Some(call) {
                            violated(
                                "reuse",
                                format_args!(
                                    "rank {rank}'s call {call} got an error of generation {named}: {error}"
                                ),
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The generation an error names, where it names one.
fn named_generation(error: &NativeCollectiveError) -> Option<u64> {
    match error {
        NativeCollectiveError::ReductionMismatch { generation, .. } => Some(*generation),
        _ => None,
    }
}

/// **Failure delivery** (DESIGN.md property 3): a generation the sim crate's predictor
/// ([`FaultPlan::predict`](ruccl_sim::FaultPlan::predict)) says fails — a prepare error or panic
/// on any rank, a `begin`/`exchange`/`finish` error or panic, a wrong output count, a panicking
/// drop, an operation mismatch — gives *every* rank exactly the predicted error; a generation
/// without a fault (the one after a failure included) gives every rank its reduction. Call
/// [`agreement`] too: it checks the errors are one and the same.
pub fn failure_delivery(
    generation: usize,
    deliveries: &[&Delivered],
    outcome: &Outcome,
    reduction: &[i64],
) {
    for (rank, delivered) in deliveries.iter().enumerate() {
        match (outcome, delivered) {
            (Outcome::Delivered { .. }, Ok(values)) if values.as_slice() == reduction => {}
            (Outcome::Failed(expected), Err(error)) if error == expected => {}
            (Outcome::Delivered { .. }, _) => violated(
                "failure delivery",
                format_args!(
                    "generation {generation} has no fault (or follows one) and must deliver                      {reduction:?}, but rank {rank} got {delivered:?}"
                ),
            ),
            (Outcome::Failed(expected), _) => violated(
                "failure delivery",
                format_args!(
                    "generation {generation} must fail on every rank with `{expected}`, but                      rank {rank} got {delivered:?}"
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

/// **Abort** (DESIGN.md property 5), over a scenario where `reasons` were passed to `abort`
/// (concurrently with the ranks): the first abort wins and is sticky — every error is the one
/// `Aborted` error, with one of `reasons`; once a generation fails, every later one fails with it;
/// a generation is delivered whole or not at all ([`agreement`] checks each). Returns the abort
/// error seen, if any generation got it.
pub fn abort(observed: &Observed, reasons: &[&str]) -> Option<NativeCollectiveError> {
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
                    "generation {generation} succeeded after an earlier one was aborted ({error})"
                ),
            ),
            (None, None) => {}
            (Some(error), Some(first)) if error != first => violated(
                "abort",
                format_args!("two abort errors: {first} then {error}; the first must stick"),
            ),
            (Some(error), _) => {
                let known = matches!(
                    error,
                    NativeCollectiveError::Aborted { reason } if reasons.contains(&reason.as_str())
                );
                if !known {
                    violated(
                        "abort",
                        format_args!("generation {generation} failed with {error}, not an abort"),
                    );
                }
                winner = Some(error.clone());
            }
        }
    }
    winner
}

/// **Abort** (DESIGN.md property 5): a generation whose ring was running when the abort landed
/// is not delivered — the runner discards its outputs and every rank gets the abort error.
/// `seen` is what [`abort`] returned for the scenario.
pub fn abort_wins_over_running_ring(generation: usize, seen: Option<&NativeCollectiveError>) {
    if seen.is_none() {
        violated(
            "abort",
            format_args!(
                "generation {generation} was delivered although an abort landed while its ring ran"
            ),
        );
    }
}

/// **Abort** (DESIGN.md property 5) with **no hang, no poison** (property 4): the deposits of
/// the generation being collected when the abort landed were released then, their panicking
/// drops contained — so dropping the communicator afterwards (`teardown_ok`) panics nowhere.
pub fn abort_released_the_deposits(teardown_ok: bool) {
    if !teardown_ok {
        violated(
            "abort",
            format_args!(
                "a deposit of the aborted generation was still held (and dropped, panicking) \
                 when the communicator was dropped"
            ),
        );
    }
}

/// **Abort** (DESIGN.md property 5), after the fact: the communicator reports itself aborted, and
/// a later call (`later` returns its result) fails fast — it returns at once, though no other rank
/// calls — with the same abort error as the one every aborted generation got, if any did.
pub fn abort_fails_fast<D: NativeCollectiveDevice>(
    communicator: &NativeCommunicator<D>,
    seen: Option<&NativeCollectiveError>,
    reasons: &[&str],
    later: Delivered,
) {
    if !communicator.is_aborted() {
        violated(
            "abort",
            format_args!("the communicator does not report the abort"),
        );
    }
    match later {
        Err(NativeCollectiveError::Aborted { reason }) if reasons.contains(&reason.as_str()) => {
            if let Some(seen) = seen {
                let again = NativeCollectiveError::Aborted { reason };
                if &again != seen {
                    violated(
                        "abort",
                        format_args!("a later call got {again}, the ranks got {seen}"),
                    );
                }
            }
        }
        other => violated(
            "abort",
            format_args!("a call after the abort got {other:?} instead of the abort error"),
        ),
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
