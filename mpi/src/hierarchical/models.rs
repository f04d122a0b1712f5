//! loom and shuttle models of the meeting (`meeting.rs`) together with the status agreement
//! (`agreement.rs`), against an in-memory inter-process engine the checkers schedule: every
//! "process" is a meeting of its local ranks (threads), and the runner of each meeting makes the
//! status agreement through [`Exchange`], built on the core's sync facade like the meeting.
//!
//! Compiled only under a checker (`--cfg ruccl_loom` or `--cfg ruccl_shuttle`); `run-models.sh`
//! runs every model under both, then each planted slip (`RUCCL_MPI_SLIP`, see `meeting.rs`)
//! against the models that must catch it: `lost_wakeup` (deadlock: the failure, split and
//! never-calls models), `reopen_early` (deadlock: the failure and split models),
//! `expire_while_running` (the split model only). `mpi/README.md`, "Model checking", has the
//! times.
//!
//! Properties, checked after every execution:
//!
//! - **agreement**: every rank of every process that returns, returns the same outcome — a
//!   failure on one process reaches every rank as that process's text; a mismatch across
//!   processes is one `Mismatch` everywhere;
//! - **no split on a deadline**: where deadlines pass (at any point, under a checker), every rank
//!   of every process still means one thing — all `Ok`, or all timed out (a broken meeting and
//!   the engine's `TimedOut` are both the communicator's `TimedOut`);
//! - **no hang**: every rank returns (loom and shuttle report a deadlock otherwise).

use super::error::HierarchicalError;
use super::meeting::{Meeting, Missed, Outcome};
use crate::agreement::{self, STATUS_WORDS, Verdict};
use crate::error::{CallDescription, CallIdentity, CollectiveKind, InterProcessError};
use ruccl_core::sync::{Arc, Condvar, Deadline, Mutex, thread};
use ruccl_core::{ElementType, ReduceOperation};

/// An in-memory engine of `processes` processes: one status agreement (one generation), each
/// process contributing the words `agreement::contribution` makes, the last to arrive reducing
/// them with `MAX` and publishing the verdict. A process whose deadline passes before every
/// process arrived abandons the generation: it and every later arrival return `TimedOut`, as on
/// MPI (where a late process completes the status, then waits for a collective nobody posts).
pub(crate) struct Exchange {
    processes: usize,
    state: Mutex<ExchangeState>,
    changed: Condvar,
}

/// One process's contribution: its status words, its failure's text, its call.
type Contribution = ([i64; STATUS_WORDS], Option<String>, CallDescription);

struct ExchangeState {
    /// Each process's contribution and its failure's text.
    contributions: Vec<Option<Contribution>>,
    /// The published outcome.
    outcome: Option<Result<(), InterProcessError>>,
    abandoned: bool,
}

impl Exchange {
    pub(crate) fn new(processes: usize) -> Self {
        Exchange {
            processes,
            state: Mutex::new(ExchangeState {
                contributions: (0..processes).map(|_| None).collect(),
                outcome: None,
                abandoned: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// `process` contributes an `Ok` status for `call` without waiting: a process that arrived
    /// before the model's threads start (keeps a model within loom's thread limit).
    pub(crate) fn arrived_ahead(&self, process: usize, call: CallDescription) {
        let words = agreement::contribution(
            process,
            self.processes,
            false,
            false,
            &call,
            &CallIdentity::default(),
        );
        self.state.lock().contributions[process] = Some((words, None, call));
    }

    /// `process`'s status agreement for `call`: `failure` is its lowest local rank's text.
    pub(crate) fn agree(
        &self,
        process: usize,
        failure: Option<String>,
        call: CallDescription,
        deadline: Option<Deadline>,
    ) -> Result<(), InterProcessError> {
        let timed_out = InterProcessError::TimedOut { generation: 0 };
        let words = agreement::contribution(
            process,
            self.processes,
            failure.is_some(),
            deadline.is_some(),
            &call,
            &CallIdentity::default(),
        );
        let mut state = self.state.lock();
        if state.abandoned {
            return Err(timed_out);
        }
        state.contributions[process] = Some((words, failure, call));
        if state.contributions.iter().all(Option::is_some) {
            let outcome = self.verdict(&state.contributions);
            state.outcome = Some(outcome.clone());
            self.changed.notify_all();
            return outcome;
        }
        loop {
            if let Some(outcome) = &state.outcome {
                return outcome.clone();
            }
            if state.abandoned {
                return Err(timed_out);
            }
            match &deadline {
                None => state = self.changed.wait(state),
                Some(deadline) => {
                    let (woken, expired) = self.changed.wait_until(state, deadline);
                    state = woken;
                    if expired && state.outcome.is_none() {
                        state.abandoned = true;
                        self.changed.notify_all();
                        return Err(timed_out);
                    }
                }
            }
        }
    }

    fn verdict(&self, contributions: &[Option<Contribution>]) -> Result<(), InterProcessError> {
        let mut reduced = [i64::MIN; STATUS_WORDS];
        for (words, _, _) in contributions.iter().flatten() {
            for (into, word) in reduced.iter_mut().zip(words) {
                *into = (*into).max(*word);
            }
        }
        match agreement::verdict(&reduced, self.processes) {
            Verdict::Proceed => Ok(()),
            Verdict::Failed { process } => Err(InterProcessError::Failed {
                process,
                message: contributions[process]
                    .as_ref()
                    .and_then(|(_, text, _)| text.clone())
                    .unwrap_or_default(),
            }),
            Verdict::Mismatch | Verdict::Crossed => Err(InterProcessError::Mismatch {
                calls: contributions
                    .iter()
                    .flatten()
                    .map(|(_, _, call)| *call)
                    .collect(),
            }),
        }
    }
}

/// What one local rank does in a model.
#[derive(Clone, Debug)]
pub(crate) struct RankPlan {
    /// Its local failure, if any.
    pub(crate) failure: Option<&'static str>,
    /// The length of the call it describes (processes that differ: a mismatch).
    pub(crate) len: usize,
    /// Whether it waits with a deadline.
    pub(crate) deadline: bool,
}

/// The outcome every rank of a model got, per process, in local rank order (`None`: a rank that
/// never called).
pub(crate) type Outcomes = Vec<Vec<Option<Result<Outcome<()>, Missed>>>>;

/// Runs one execution: `plans[p][r]` is local rank `r` of process `p` (`None`: it never calls);
/// each rank on its own thread (the first of process 0 on the model's own).
pub(crate) fn run(plans: Vec<Vec<Option<RankPlan>>>) -> Outcomes {
    run_with(plans, &[])
}

/// [`run`], with the processes of `ahead` having contributed an `Ok` status (of a call of 4
/// elements) before the threads start; their plans are empty.
pub(crate) fn run_with(plans: Vec<Vec<Option<RankPlan>>>, ahead: &[usize]) -> Outcomes {
    let processes = plans.len();
    let exchange = Arc::new(Exchange::new(processes));
    for process in ahead {
        exchange.arrived_ahead(*process, call_of(4));
    }
    let meetings: Vec<Arc<Meeting<RankPlan, ()>>> = plans
        .iter()
        .map(|ranks| Arc::new(Meeting::new(ranks.len())))
        .collect();
    let mut handles = Vec::new();
    let mut own = None;
    for (process, ranks) in plans.into_iter().enumerate() {
        for (rank, plan) in ranks.into_iter().enumerate() {
            let Some(plan) = plan else { continue };
            let (exchange, meeting) = (Arc::clone(&exchange), Arc::clone(&meetings[process]));
            let call = move || rank_call(&exchange, &meeting, process, rank, plan);
            if own.is_none() && process == 0 && rank == 0 {
                own = Some(call);
            } else {
                handles.push(((process, rank), thread::spawn(call)));
            }
        }
    }
    let mut outcomes: Outcomes = meetings
        .iter()
        .map(|meeting| vec![None; meeting.ranks()])
        .collect();
    if let Some(call) = own {
        outcomes[0][0] = Some(call());
    }
    for ((process, rank), handle) in handles {
        outcomes[process][rank] = Some(handle.join().unwrap_or(Err(Missed::Broken)));
    }
    outcomes
}

/// Local rank `rank` of `process`: deposits its plan; the runner agrees for the process.
fn rank_call(
    exchange: &Exchange,
    meeting: &Meeting<RankPlan, ()>,
    process: usize,
    rank: usize,
    plan: RankPlan,
) -> Result<Outcome<()>, Missed> {
    // The model's deadlines are the checker's timers; the instant is not modelled.
    let deadline = plan
        .deadline
        .then(|| std::time::Instant::now() + std::time::Duration::from_secs(1));
    let ranks = meeting.ranks();
    meeting.meet(rank, 0, plan, deadline, move |plans| {
        let failure = plans
            .iter()
            .find_map(|plan| plan.failure)
            .map(str::to_owned);
        let len = plans.first().map_or(0, |plan| plan.len);
        let timed = plans.iter().any(|plan| plan.deadline);
        let call = call_of(len);
        let deadline = timed.then(|| Deadline::after(std::time::Duration::from_secs(1)));
        let outcome =
            exchange
                .agree(process, failure, call, deadline)
                .map_err(|error| match error {
                    InterProcessError::Failed { process, message } => {
                        HierarchicalError::Failed { process, message }
                    }
                    InterProcessError::TimedOut { generation } => {
                        HierarchicalError::TimedOut { generation }
                    }
                    other => HierarchicalError::InterProcess(other),
                });
        (0..ranks).map(|_| outcome.clone()).collect()
    })
}

/// The call every rank of a model describes, of `len` elements.
fn call_of(len: usize) -> CallDescription {
    CallDescription {
        generation: 0,
        kind: CollectiveKind::AllReduce,
        operation: Some(ReduceOperation::Sum),
        element: Some(ElementType::F32),
        len,
        root: None,
        tag: 0,
    }
}

/// Every returned outcome of every rank is `expected` (ranks that never called excepted).
pub(crate) fn assert_everywhere(outcomes: &Outcomes, expected: &Result<Outcome<()>, Missed>) {
    for (process, ranks) in outcomes.iter().enumerate() {
        for (rank, outcome) in ranks.iter().enumerate() {
            if let Some(outcome) = outcome {
                assert_eq!(
                    outcome, expected,
                    "process {process} rank {rank}: {outcome:?}, expected {expected:?}"
                );
            }
        }
    }
}

/// What a rank's outcome means for the job: a meeting broken by a deadline and the engine's
/// `TimedOut` are one thing (the communicator maps both to its `TimedOut`).
fn meaning(outcome: &Result<Outcome<()>, Missed>) -> String {
    match outcome {
        Ok(Ok(())) => "ok".to_owned(),
        Ok(Err(HierarchicalError::TimedOut { .. })) | Err(_) => "timed out".to_owned(),
        Ok(Err(error)) => error.to_string(),
    }
}

/// Every rank of every process that returned means one thing.
pub(crate) fn assert_alike(outcomes: &Outcomes) {
    let meanings: Vec<String> = outcomes.iter().flatten().flatten().map(meaning).collect();
    assert!(
        meanings.windows(2).all(|pair| pair[0] == pair[1]),
        "the ranks split: {outcomes:?}"
    );
}

fn plan(failure: Option<&'static str>, len: usize, deadline: bool) -> Option<RankPlan> {
    Some(RankPlan {
        failure,
        len,
        deadline,
    })
}

/// Scenario: 2 + 1 ranks, rank 1 of process 0 fails locally: every rank of both processes
/// returns process 0's text.
pub(crate) fn a_failure_on_one_process_reaches_every_rank() {
    let outcomes = run(vec![
        vec![
            plan(None, 4, false),
            plan(Some("planted failure"), 4, false),
        ],
        vec![plan(None, 4, false)],
    ]);
    let expected = Ok(Err(HierarchicalError::Failed {
        process: 0,
        message: "planted failure".to_owned(),
    }));
    assert_everywhere(&outcomes, &expected);
}

/// Scenario: 1 + 1 ranks describing different lengths: one `Mismatch` everywhere.
pub(crate) fn a_mismatch_across_processes_is_one_error_everywhere() {
    let outcomes = run(vec![vec![plan(None, 4, false)], vec![plan(None, 8, false)]]);
    let first = outcomes[0][0].clone();
    assert!(
        matches!(
            first,
            Some(Ok(Err(HierarchicalError::InterProcess(
                InterProcessError::Mismatch { .. }
            ))))
        ),
        "{first:?}"
    );
    let Some(first) = first else { return };
    assert_everywhere(&outcomes, &first);
}

/// Scenario: process 0's two ranks wait with deadlines (which pass at any point under a
/// checker), process 1 arrived at the agreement already: both ranks end alike — both `Ok`, or
/// both timed out —, never split (a rank that gave up while the step ran would return timed out
/// beside an `Ok`).
pub(crate) fn deadlines_never_split_the_ranks() {
    let outcomes = run_with(
        vec![vec![plan(None, 4, true), plan(None, 4, true)], vec![]],
        &[1],
    );
    assert_alike(&outcomes);
}

/// Scenario: process 1 never calls; process 0's two ranks wait with deadlines: both time out
/// (a broken meeting or the engine's `TimedOut`), never `Ok`, never split.
pub(crate) fn a_process_that_never_calls_times_out_every_rank() {
    let outcomes = run(vec![
        vec![plan(None, 4, true), plan(None, 4, true)],
        vec![None],
    ]);
    assert_alike(&outcomes);
    let first = outcomes[0].iter().flatten().next().map(meaning);
    assert_eq!(first.as_deref(), Some("timed out"));
}

#[cfg(ruccl_loom)]
mod loom_models {
    use super::*;

    fn explore(bound: Option<usize>, model: fn()) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = bound;
        builder.check(model);
    }

    #[test]
    fn loom_a_failure_on_one_process_reaches_every_rank() {
        explore(Some(3), a_failure_on_one_process_reaches_every_rank);
    }

    #[test]
    fn loom_a_mismatch_across_processes_is_one_error_everywhere() {
        explore(None, a_mismatch_across_processes_is_one_error_everywhere);
    }

    #[test]
    fn loom_deadlines_never_split_the_ranks() {
        explore(Some(3), deadlines_never_split_the_ranks);
    }

    #[test]
    fn loom_a_process_that_never_calls_times_out_every_rank() {
        explore(Some(3), a_process_that_never_calls_times_out_every_rank);
    }
}

#[cfg(ruccl_shuttle)]
mod shuttle_models {
    use super::*;

    const ITERATIONS: usize = 2_000;

    fn explore(model: fn()) {
        shuttle::check_random(model, ITERATIONS);
        shuttle::check_pct(model, ITERATIONS, 3);
    }

    #[test]
    fn shuttle_a_failure_on_one_process_reaches_every_rank() {
        explore(a_failure_on_one_process_reaches_every_rank);
    }

    #[test]
    fn shuttle_a_mismatch_across_processes_is_one_error_everywhere() {
        explore(a_mismatch_across_processes_is_one_error_everywhere);
    }

    #[test]
    fn shuttle_deadlines_never_split_the_ranks() {
        explore(deadlines_never_split_the_ranks);
    }

    #[test]
    fn shuttle_a_process_that_never_calls_times_out_every_rank() {
        explore(a_process_that_never_calls_times_out_every_rank);
    }
}
