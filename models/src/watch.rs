//! Deadlines for the real-thread runs: a test that calls [`watched`] fails — the whole test
//! process, with the ranks still inside a call and the generation each is in — once
//! [`STALL_LIMIT`] passes without any rank of its scenarios entering or leaving a call. A slip
//! that loses a wake-up or a publication then fails `cargo test` in seconds instead of hanging it.
//!
//! The watchdog is the harness's ([`ruccl_sim::watchdog`]), the one the core's tests use. Each
//! [`Group`](crate::scenario::Group) records its ranks' calls in the
//! [`Progress`](ruccl_sim::watchdog::Progress) of the test thread that built it. Under loom and
//! shuttle there is no clock to watch and the checker reports a deadlock itself: there the record
//! is a no-op.

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
pub use real::{STALL_LIMIT, Watched, watched};

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
pub(crate) use real::Watch;

#[cfg(any(ruccl_loom, ruccl_shuttle))]
pub(crate) use checked::Watch;

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
mod real {
    use ruccl_sim::watchdog::{Progress, Watchdog};
    use std::cell::RefCell;
    use std::fmt::Display;
    use std::time::Duration;

    /// How long a watched test may go without a rank entering or leaving a call. A generation
    /// takes milliseconds in a debug build on a loaded machine; a lost wake-up never ends.
    pub const STALL_LIMIT: Duration = Duration::from_secs(10);

    thread_local! {
        /// The progress of the test running on this thread, while it is [`watched`].
        static CURRENT: RefCell<Option<Progress>> = const { RefCell::new(None) };
    }

    /// A test under its watchdog, until dropped.
    pub struct Watched {
        _watchdog: Watchdog,
    }

    impl Drop for Watched {
        fn drop(&mut self) {
            CURRENT.with(|current| current.borrow_mut().take());
        }
    }

    /// Put the test running on this thread (named after its thread, as the test harness names
    /// it) under a watchdog of [`STALL_LIMIT`]; the scenarios it builds from now on record their
    /// ranks' calls for the watchdog's report.
    pub fn watched() -> Watched {
        let progress = Progress::default();
        CURRENT.with(|current| *current.borrow_mut() = Some(progress.clone()));
        let test = std::thread::current()
            .name()
            .map_or_else(|| "a models test".to_owned(), str::to_owned);
        Watched {
            _watchdog: Watchdog::arm(test, STALL_LIMIT, progress),
        }
    }

    /// Where a group's ranks are, for the watchdog of the test that built it (if any).
    #[derive(Default)]
    pub(crate) struct Watch(Option<Progress>);

    impl Watch {
        /// The progress of the test on this thread, if it is watched.
        pub(crate) fn current() -> Self {
            Self(CURRENT.with(|current| current.borrow().clone()))
        }

        /// Rank `rank` enters `what` of generation `generation`.
        pub(crate) fn enter(&self, rank: usize, generation: usize, what: impl Display) {
            if let Some(progress) = &self.0 {
                progress.enter(rank, generation as u64, what);
            }
        }

        /// Rank `rank` has returned.
        pub(crate) fn leave(&self, rank: usize) {
            if let Some(progress) = &self.0 {
                progress.leave(rank);
            }
        }
    }
}

#[cfg(any(ruccl_loom, ruccl_shuttle))]
mod checked {
    use std::fmt::Display;

    /// Nothing to record under a checker.
    #[derive(Default)]
    pub(crate) struct Watch;

    impl Watch {
        pub(crate) fn current() -> Self {
            Self
        }

        pub(crate) fn enter(&self, _rank: usize, _generation: usize, _what: impl Display) {}

        pub(crate) fn leave(&self, _rank: usize) {}
    }
}
