//! Keeps a hot value on a cache line of its own.

use std::ops::Deref;

/// `T` aligned (and so padded) to 128 bytes: two 64-byte lines, since adjacent-line prefetch makes
/// neighbours of a contended line contend too. The rendezvous keeps here the state lock with the
/// state it guards (every rank writes it; the communicator's read-only fields stay off its
/// lines), each rank's next generation (only its own deposit writes it), each rank's delivery
/// slots (a waiter polls its own; the runner writes every other rank's) and the `aborting` flag
/// waiters also poll.
#[repr(align(128))]
pub(super) struct Padded<T>(pub(super) T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
