//! The deadline used under both checkers: neither models time, so a deadline never passes and the
//! clock is never read (reading it would make a replay nondeterministic).

use std::time::Duration;

/// A deadline that never passes under a checker; the timeout is accepted and ignored.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(());

impl Deadline {
    /// A deadline that never passes.
    pub fn never() -> Self {
        Self(())
    }

    /// Under a checker, also a deadline that never passes.
    pub fn after(_timeout: Duration) -> Self {
        Self(())
    }

    /// Always `None`: no time passes under a checker.
    pub fn remaining(&self) -> Option<Duration> {
        None
    }

    /// Always `false`.
    pub fn expired(&self) -> bool {
        false
    }
}
