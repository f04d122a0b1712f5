//! Writing results: every write is flushed (rows appear as they are measured), the first failure
//! is kept, and a closed pipe (`ruccl-perf | head`) asks the run to stop; the command then exits 1
//! saying the output was closed.

use crate::stop::{Stop, StopReason};
use std::io::{ErrorKind, Write};

/// Where a command's results go.
pub(crate) struct Printer<'a> {
    out: &'a mut (dyn Write + Send),
    stop: Stop,
    failed: Option<std::io::Error>,
    closed: bool,
}

impl<'a> Printer<'a> {
    /// Results to `out`; a closed pipe sets `stop`.
    pub(crate) fn new(out: &'a mut (dyn Write + Send), stop: &Stop) -> Self {
        Self {
            out,
            stop: stop.clone(),
            failed: None,
            closed: false,
        }
    }

    /// Write `text` and flush, unless an earlier write failed.
    pub(crate) fn write(&mut self, text: &str) {
        if self.failed.is_some() || self.closed {
            return;
        }
        let written = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush());
        match written {
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                self.stop.request(StopReason::OutputClosed);
            }
            Err(error) => {
                self.failed = Some(error);
                // Nothing more can be shown: stop measuring.
                self.stop.request(StopReason::OutputClosed);
            }
        }
    }

    /// The first write error other than a closed pipe.
    pub(crate) fn take_error(&mut self) -> Option<std::io::Error> {
        self.failed.take()
    }
}
