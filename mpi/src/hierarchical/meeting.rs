//! [`Meeting`]: where a process's local ranks hand their parts to one thread that calls the
//! inter-process engine, and take back what it got — used when a local phase failed before the
//! hook in the device's `finish` could make the step (`hook.rs`).
//!
//! One meeting per step (the exchange, the closing agreement). Every local rank of a generation
//! deposits; the **last to arrive** runs the step on every deposit, with the lock released, and
//! publishes one outcome per rank; each rank takes its own, and the last to take reopens the
//! meeting for the next generation. So the thread that calls MPI changes from generation to
//! generation (MPI at `MPI_THREAD_SERIALIZED`, see the crate docs).
//!
//! A rank deposits into generation `g + 1` of a meeting only after every rank took its outcome
//! of `g`: every hierarchical generation starts with a local collective of all ranks, which none
//! leaves before all entered it, hence before all left generation `g` of every meeting. The
//! wait for a reopening is there all the same (bounded by the deadline), so the meeting never
//! depends on that argument for its safety.
//!
//! **Deadlines.** A waiter gives up only while the meeting still collects (a rank is missing):
//! it then *breaks* the meeting — every waiter and every later deposit gets [`Missed::Broken`],
//! and the communicator is poisoned. Once the last rank arrived, waiters wait for its outcome
//! whatever their deadlines: the runner's own wait for other processes is bounded by the
//! earliest deadline of the generation, so the outcome comes, and the local ranks of a process
//! never split on a deadline here.
//!
//! **Built on the core's sync facade** (`ruccl_core::sync`: its `Mutex`, `Condvar` and
//! `Deadline`), so that loom and shuttle see every step (`models.rs`). No polling: a waiter
//! parks on the condition variable at once, woken by every change (publication, reopening,
//! break) or by its deadline; spurious wake-ups only re-check. A panic of the step is contained
//! as the core contains a device's: caught, its message kept, its payload dropped inside a
//! containment of its own.

use super::error::HierarchicalError;
use crate::error::InterProcessError;
use ruccl_core::sync::{Condvar, Deadline, Mutex, MutexGuard};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

/// One rank's outcome of a step.
pub(crate) type Outcome<X> = Result<X, HierarchicalError>;

/// The held lock of a meeting's round.
type Guard<'a, T, X> = MutexGuard<'a, Round<T, X>>;

/// Why a rank got no outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Missed {
    /// Its deadline passed while a rank was missing: it broke the meeting.
    Expired,
    /// The meeting was broken before (by a deadline, or a runner that panicked).
    Broken,
}

/// The meeting of `ranks` local ranks, depositing `T` and taking `X`.
pub(crate) struct Meeting<T, X> {
    ranks: usize,
    round: Mutex<Round<T, X>>,
    /// Notified (all) after every publication, reopening and break.
    changed: Condvar,
}

/// The one round of the meeting: the generation it collects or delivers.
///
/// Who may change what: a depositor sets its own `deposits[rank]` and bumps `arrived` while
/// `outcomes` is `None`; the last depositor sets `running`, takes every deposit, and — after the
/// step, lock released in between — publishes `outcomes`, clears `running` and sets `left`; each
/// rank takes its own outcome and decrements `left`; the taker that brings `left` to 0 clears
/// `outcomes` and `arrived` and bumps `generation` (the round reopens). `broken` is set once (a
/// deadline while collecting, a second deposit) and never cleared.
struct Round<T, X> {
    /// The generation the round collects or delivers.
    generation: u64,
    deposits: Vec<Option<T>>,
    arrived: usize,
    /// The last arriver is running the step (waiters no longer give up).
    running: bool,
    /// `Some` once published: one outcome per rank, taken out one by one.
    outcomes: Option<Vec<Option<Outcome<X>>>>,
    /// Outcomes not yet taken.
    left: usize,
    broken: bool,
}

impl<T: Send + 'static, X: Send + 'static> Meeting<T, X> {
    /// A meeting of `ranks` local ranks (at least one).
    pub(crate) fn new(ranks: usize) -> Self {
        let ranks = ranks.max(1);
        Meeting {
            ranks,
            round: Mutex::new(Round {
                generation: 0,
                deposits: (0..ranks).map(|_| None).collect(),
                arrived: 0,
                running: false,
                outcomes: None,
                left: 0,
                broken: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// The local ranks that meet.
    #[cfg(all(test, any(ruccl_loom, ruccl_shuttle)))]
    pub(crate) fn ranks(&self) -> usize {
        self.ranks
    }

    /// Deposit `rank`'s part of `generation` and take the rank's outcome. The last rank to
    /// arrive runs `run` on every deposit (in rank order), which returns one outcome per rank.
    /// Waiting for the others ends at `deadline` only while one of them is missing.
    pub(crate) fn meet(
        &self,
        rank: usize,
        generation: u64,
        deposit: T,
        deadline: Option<Instant>,
        run: impl FnOnce(Vec<T>) -> Vec<Outcome<X>>,
    ) -> Result<Outcome<X>, Missed> {
        let deadline = match deadline {
            Some(at) => Deadline::after(at.saturating_duration_since(Instant::now())),
            None => Deadline::never(),
        };
        // Wait until the meeting collects this generation (the previous one fully taken).
        let round = self.round.lock();
        if round.generation > generation {
            // A generation the meeting is done with: only a broken caller gets here.
            return Err(Missed::Broken);
        }
        let mut round = self
            .wait(round, &deadline, |round| round.generation == generation)
            .map_err(|round| self.expire(round))?;
        if round.outcomes.is_some() || rank >= self.ranks || round.deposits[rank].is_some() {
            // A second deposit for one rank: only a broken caller gets here.
            round.broken = true;
            self.changed.notify_all();
            return Err(Missed::Broken);
        }
        round.deposits[rank] = Some(deposit);
        round.arrived += 1;
        if round.arrived < self.ranks {
            let round = self
                .wait(round, &deadline, |round| {
                    round.generation == generation && round.outcomes.is_some()
                })
                .map_err(|round| self.expire(round))?;
            return Ok(self.take(round, rank));
        }
        // The last arriver: run the step with the lock released.
        round.running = true;
        let deposits: Vec<T> = round.deposits.iter_mut().filter_map(Option::take).collect();
        drop(round);
        let outcomes = contain(|| run(deposits)).unwrap_or_else(|panic| {
            let error = internal(&format!("the inter-process step panicked: {panic}"));
            (0..self.ranks).map(|_| Err(error.clone())).collect()
        });
        let mut round = self.round.lock();
        let mut outcomes: Vec<Option<Outcome<X>>> = outcomes.into_iter().map(Some).collect();
        outcomes.resize_with(self.ranks, || {
            Some(Err(internal("the inter-process step lost an outcome")))
        });
        round.outcomes = Some(outcomes);
        round.running = false;
        round.left = self.ranks;
        // Planted slip (models.rs): the waiters are never told of the publication.
        if !slip("lost_wakeup") {
            self.changed.notify_all();
        }
        Ok(self.take(round, rank))
    }

    /// Takes `rank`'s published outcome; the last taker reopens the meeting.
    fn take(&self, mut round: Guard<'_, T, X>, rank: usize) -> Outcome<X> {
        let outcome = round
            .outcomes
            .as_mut()
            .and_then(|outcomes| outcomes.get_mut(rank))
            .and_then(Option::take)
            .unwrap_or_else(|| Err(internal("an outcome taken twice")));
        round.left = round.left.saturating_sub(1);
        // Planted slip (models.rs): the meeting reopens before the last rank took its outcome.
        let reopen = if slip("reopen_early") {
            round.left <= 1
        } else {
            round.left == 0
        };
        if reopen {
            round.outcomes = None;
            round.arrived = 0;
            round.generation += 1;
            self.changed.notify_all();
        }
        outcome
    }

    /// A deadline passed while a rank was missing: break the meeting for everyone.
    fn expire(&self, mut round: Guard<'_, T, X>) -> Missed {
        if round.broken {
            return Missed::Broken;
        }
        round.broken = true;
        self.changed.notify_all();
        Missed::Expired
    }

    /// Parks until `ready` holds (`Ok`), or the meeting is broken or `deadline` passes while
    /// the step is not running (`Err`, the guard held).
    fn wait<'a>(
        &'a self,
        mut round: Guard<'a, T, X>,
        deadline: &Deadline,
        ready: impl Fn(&Round<T, X>) -> bool,
    ) -> Result<Guard<'a, T, X>, Guard<'a, T, X>> {
        loop {
            if round.broken {
                return Err(round);
            }
            if ready(&round) {
                return Ok(round);
            }
            // Planted slip (models.rs): a waiter gives up on its deadline while the step runs.
            let slip = slip("expire_while_running");
            if round.running && !slip {
                // The outcome is coming whatever the deadline: the runner's own waits are
                // bounded by the generation's earliest deadline.
                round = self.changed.wait(round);
                continue;
            }
            let (woken, expired) = self.changed.wait_until(round, deadline);
            round = woken;
            if expired && !round.broken && !ready(&round) && (slip || !round.running) {
                return Err(round);
            }
        }
    }
}

/// Whether the models plant the slip `name` (`RUCCL_MPI_SLIP`, read by checker builds only;
/// `models.rs` says which model catches which).
#[cfg(any(ruccl_loom, ruccl_shuttle))]
fn slip(name: &str) -> bool {
    std::env::var("RUCCL_MPI_SLIP").is_ok_and(|planted| planted == name)
}

/// No slips outside the checkers.
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
fn slip(_: &str) -> bool {
    false
}

/// Runs the step, containing a panic as the core contains a device's: the message (when the
/// payload is a string) comes back as the error, and the payload is dropped inside a
/// containment of its own (its `Drop` may panic too).
fn contain<R>(step: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(step)).map_err(|payload| {
        let message = describe_panic(payload.as_ref());
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
        message
    })
}

fn describe_panic(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

fn internal(message: &str) -> HierarchicalError {
    HierarchicalError::InterProcess(InterProcessError::Internal {
        message: message.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    #[test]
    fn the_last_arriver_runs_once_and_every_rank_takes_its_own_outcome() {
        let meeting = Arc::new(Meeting::<usize, usize>::new(3));
        let runs = Arc::new(AtomicU64::new(0));
        for generation in 0..50u64 {
            let handles: Vec<_> = (0..3)
                .map(|rank| {
                    let (meeting, runs) = (Arc::clone(&meeting), Arc::clone(&runs));
                    std::thread::spawn(move || {
                        meeting.meet(rank, generation, rank * 10, None, |deposits| {
                            runs.fetch_add(1, Ordering::Relaxed);
                            let sum: usize = deposits.iter().sum();
                            deposits.iter().map(|d| Ok(sum + d)).collect()
                        })
                    })
                })
                .collect();
            for (rank, handle) in handles.into_iter().enumerate() {
                assert_eq!(handle.join().unwrap(), Ok(Ok(30 + rank * 10)));
            }
        }
        assert_eq!(runs.load(Ordering::Relaxed), 50);
    }

    #[test]
    fn a_missing_rank_breaks_the_meeting_at_the_deadline_and_for_every_later_deposit() {
        let meeting = Meeting::<(), ()>::new(2);
        let started = Instant::now();
        let deadline = Some(started + Duration::from_millis(50));
        let alone = meeting.meet(0, 0, (), deadline, |_| vec![Ok(()), Ok(())]);
        assert_eq!(alone, Err(Missed::Expired));
        assert!(started.elapsed() >= Duration::from_millis(50));
        let late = meeting.meet(1, 0, (), None, |_| vec![Ok(()), Ok(())]);
        assert_eq!(late, Err(Missed::Broken));
    }

    #[test]
    fn a_panicking_step_gives_every_rank_an_error_instead_of_a_hang() {
        let meeting = Meeting::<(), ()>::new(1);
        let outcome = meeting.meet(0, 0, (), None, |_| panic!("planted"));
        assert!(matches!(
            outcome,
            Ok(Err(HierarchicalError::InterProcess(
                InterProcessError::Internal { ref message }
            ))) if message.contains("planted")
        ));
        // The meeting reopened for the next generation.
        assert_eq!(meeting.meet(0, 1, (), None, |_| vec![Ok(())]), Ok(Ok(())));
    }
}
