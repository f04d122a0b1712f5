//! The reusable rendezvous: ranks deposit their prepared tensors, the last arriver decides the
//! generation and runs its plan outside the lock, and every rank leaves with its own output or
//! the generation's one error.
//!
//! - [`state`]: the guarded state machine and its invariants (no device calls, no blocking).
//! - [`delivery`]: the per-rank delivery slots a rank takes its result from without the lock.
//! - [`agreement`]: what the last arriver decides before any device call (mismatches, shapes,
//!   the plan), and in which order.
//! - [`communicator`]: the public [`NativeCommunicator`] that drives it (waiting, spinning,
//!   running the plan, aborting).

mod agreement;
mod communicator;
mod delivery;
mod padded;
mod state;

pub use communicator::NativeCommunicator;
pub use state::WaitStats;

/// Which of the two rounds, and which of a rank's two delivery slots, hold `generation`: at most
/// two generations are in flight (`README.md`, "Generations and rounds").
fn parity(generation: u64) -> usize {
    (generation % 2) as usize
}
