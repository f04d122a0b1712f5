//! The reusable rendezvous: ranks deposit their prepared tensors, the last arriver runs the ring
//! outside the lock, and every rank leaves with its own output or the generation's one error.
//!
//! - [`state`]: the guarded state machine and its invariants (no device calls, no blocking).
//! - [`communicator`]: the public [`NativeCommunicator`] that drives it (waiting, spinning,
//!   running the ring, aborting).

mod communicator;
mod padded;
mod state;

pub use communicator::NativeCommunicator;
