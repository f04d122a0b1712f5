//! [`InFlight`]: a pending non-blocking MPI operation together with the memory it reads and
//! writes, and the deadline-bounded wait for it.
//!
//! ## Who owns the memory
//!
//! MPI keeps raw pointers into a non-blocking operation's buffers until the operation completes,
//! and a pending collective can never be cancelled (`MPI_Cancel` is for point-to-point receives
//! only). So the buffers belong to the `InFlight` from the moment the operation is posted: they
//! come back only from [`InFlight::wait`] once `MPI_Test` reports completion. If the wait gives up
//! (deadline, MPI error) or the `InFlight` is dropped unfinished, the buffers are **leaked**, never
//! freed: a late peer can still complete the collective during any later MPI call of this
//! process (Open MPI progresses every pending operation from every call), writing into them.

use crate::engine::runtime::lock_mpi;
use crate::error::InterProcessError;
use mpi::ffi;
use std::ffi::c_int;
use std::time::{Duration, Instant};

/// Why a wait ended without the operation's result.
#[derive(Debug)]
pub(crate) enum WaitError {
    /// The deadline passed first.
    Expired,
    /// An error to return as it is: from MPI, or the agreed outcome of the generation.
    Failed(InterProcessError),
}

impl From<InterProcessError> for WaitError {
    fn from(error: InterProcessError) -> Self {
        WaitError::Failed(error)
    }
}

/// A posted non-blocking MPI operation and the memory it uses.
pub(crate) struct InFlight<K> {
    request: ffi::MPI_Request,
    /// `Some` until the operation completed and `wait` handed it back.
    keep: Option<K>,
}

impl<K> InFlight<K> {
    /// Takes ownership of `keep` for as long as `request` is pending.
    ///
    /// # Safety
    ///
    /// `request` comes from a non-blocking MPI call every one of whose buffers lies in heap memory
    /// owned by `keep` (vector or box contents, which stay where they are when `keep` moves), and
    /// nothing else reads or writes that memory through `keep` until `wait` returns it.
    pub(crate) unsafe fn new(request: ffi::MPI_Request, keep: K) -> Self {
        InFlight {
            request,
            keep: Some(keep),
        }
    }

    /// Polls `MPI_Test` until the operation completes (its memory comes back) or `deadline`
    /// passes. Each poll takes the MPI lock for that one call only.
    pub(crate) fn wait(mut self, deadline: Option<Instant>) -> Result<K, WaitError> {
        let mut backoff = Backoff::new();
        loop {
            let mut flag: c_int = 0;
            let code = {
                let _mpi = lock_mpi();
                // SAFETY: `self.request` is a live request handle this `InFlight` owns (MPI sets
                // it to MPI_REQUEST_NULL on completion, after which we never poll again);
                // `flag` is a local; MPI_STATUS_IGNORE is MPI's sentinel, never dereferenced
                // by us. The memory the operation uses is owned by `self.keep` (see `new`).
                unsafe { ffi::MPI_Test(&mut self.request, &mut flag, ffi::RSMPI_STATUS_IGNORE) }
            };
            if code != 0 {
                return Err(WaitError::Failed(mpi_error("MPI_Test", code)));
            }
            if flag != 0 {
                // Complete: MPI no longer touches the memory, so it may go back to the caller.
                return self.keep.take().ok_or_else(|| {
                    WaitError::Failed(InterProcessError::Mpi {
                        call: "MPI_Test",
                        code: 0,
                        message: "an operation completed twice".to_owned(),
                    })
                });
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Err(WaitError::Expired);
            }
            backoff.snooze(now);
        }
    }
}

impl<K> Drop for InFlight<K> {
    fn drop(&mut self) {
        if let Some(keep) = self.keep.take() {
            // Still pending: MPI may write into this memory at any later MPI call, so it must
            // outlive the process's use of MPI. Leak it (see the module docs).
            std::mem::forget(keep);
        }
    }
}

/// How a waiter spends the time between polls: a few back-to-back polls (a partner that is
/// already there answers within microseconds), then yielding the core between polls (with more
/// processes than cores the partner may need this core), then, once the wait has lasted
/// [`Backoff::SLEEP_AFTER`], short sleeps (a partner that is that late is not coming soon, and
/// polling flat out would steal its core).
struct Backoff {
    polls: u32,
    started: Instant,
}

impl Backoff {
    /// Polls with only a spin hint between them.
    const SPIN_POLLS: u32 = 64;
    /// Wait after which the waiter sleeps between polls.
    const SLEEP_AFTER: Duration = Duration::from_millis(2);
    /// The sleep between late polls: bounds the extra latency of a late partner.
    const SLEEP: Duration = Duration::from_micros(50);

    fn new() -> Self {
        Backoff {
            polls: 0,
            started: Instant::now(),
        }
    }

    fn snooze(&mut self, now: Instant) {
        self.polls = self.polls.saturating_add(1);
        if self.polls <= Self::SPIN_POLLS {
            std::hint::spin_loop();
        } else if now.duration_since(self.started) < Self::SLEEP_AFTER {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Self::SLEEP);
        }
    }
}

/// The error for MPI return code `code` of `call`. Takes the MPI lock itself (for
/// `MPI_Error_string`): never call it while holding the lock.
pub(crate) fn mpi_error(call: &'static str, code: c_int) -> InterProcessError {
    let mut text = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    let status = {
        let _mpi = lock_mpi();
        // SAFETY: `text` is a local vector of MPI_MAX_ERROR_STRING + 1 bytes, the most
        // MPI_Error_string writes; `len` is a local.
        unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr().cast(), &mut len) }
    };
    let message = if status == 0 {
        text.truncate(usize::try_from(len).unwrap_or(0).min(text.len()));
        String::from_utf8_lossy(&text).into_owned()
    } else {
        "unknown error code".to_owned()
    };
    InterProcessError::Mpi {
        call,
        code,
        message,
    }
}
