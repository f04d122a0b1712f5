//! [`Gate`]: a reusable barrier for the harness's rank threads that any of them can break, so
//! that a rank failing outside the collective (an upload, a download) cannot strand the others.

use ruccl_core::sync::{Condvar, Mutex};

/// A barrier for `parties` threads, reusable round after round, that [`break_all`](Self::break_all)
/// opens for good: every waiter, now and later, returns [`Broken`].
#[derive(Debug)]
pub(crate) struct Gate {
    parties: usize,
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    /// Threads waiting in the current round.
    waiting: usize,
    /// Rounds completed; a waiter leaves when this moves past the round it joined.
    round: u64,
    /// Set once by `break_all`, never cleared.
    broken: bool,
}

/// The gate was broken: another rank failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Broken;

impl Gate {
    /// A gate for `parties` threads.
    pub(crate) fn new(parties: usize) -> Self {
        Self {
            parties: parties.max(1),
            state: Mutex::new(GateState::default()),
            changed: Condvar::new(),
        }
    }

    /// Wait until all parties have arrived in this round, or the gate is broken.
    pub(crate) fn wait(&self) -> Result<(), Broken> {
        let mut state = self.state.lock();
        if state.broken {
            return Err(Broken);
        }
        let round = state.round;
        state.waiting += 1;
        if state.waiting == self.parties {
            state.waiting = 0;
            state.round += 1;
            drop(state);
            self.changed.notify_all();
            return Ok(());
        }
        while state.round == round && !state.broken {
            state = self.changed.wait(state);
        }
        if state.round == round {
            Err(Broken)
        } else {
            Ok(())
        }
    }

    /// Break the gate for every waiter, now and later.
    pub(crate) fn break_all(&self) {
        self.state.lock().broken = true;
        self.changed.notify_all();
    }
}
