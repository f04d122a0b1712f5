//! A one-line progress indicator on stderr, drawn only when stderr is a terminal.

use crate::sweep::format_size;
use std::io::Write as _;
use std::time::Instant;

/// Shows which size a sweep is measuring; every call is a no-op when disabled.
#[derive(Debug)]
pub(crate) struct Progress {
    enabled: bool,
    started: Instant,
    drawn: bool,
}

impl Progress {
    /// A progress line on stderr if `enabled` (stderr is a terminal).
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            started: Instant::now(),
            drawn: false,
        }
    }

    /// Size `index` of `total` (`bytes` per rank) has started.
    pub(crate) fn show(&mut self, index: usize, total: usize, bytes: usize) {
        if !self.enabled {
            return;
        }
        let mut stderr = std::io::stderr().lock();
        // Progress is best effort: a failed write to the terminal is not worth failing for.
        let _ = write!(
            stderr,
            "\r\x1b[2K[{}/{}] measuring {} B per rank ({:.1} s)",
            index + 1,
            total,
            format_size(bytes),
            self.started.elapsed().as_secs_f64()
        );
        let _ = stderr.flush();
        self.drawn = true;
    }

    /// Erase the line (before printing a row, and at the end).
    pub(crate) fn clear(&mut self) {
        if self.enabled && self.drawn {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
            self.drawn = false;
        }
    }
}
