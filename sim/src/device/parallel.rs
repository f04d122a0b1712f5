//! Splitting one call's element loops across cores.
//!
//! The pieces of one step (or of the `Mean` scaling) write disjoint memory, so they can run on
//! any threads in any order. Above [`MIN_BYTES_PER_THREAD`] per extra thread, the pieces are cut
//! into one equal share per thread, claimed one at a time (each thread starting from its CPU's:
//! [`Job`]) by whichever thread comes: the calling thread (the last rank to arrive),
//! ranks waiting for the generation's outcome, to which the step is posted while it runs
//! ([`crew`](super::crew)), and, for a step of [`POOL_FROM_BYTES`] or more, rayon's pool (one
//! worker per core, started once per process and asleep between calls). The call returns only
//! when every share is done and no other thread is inside the step, so nothing outlives the
//! borrow of the buffers; a share's panic is raised again on the calling thread. A step too
//! small to split runs on one thread: rank 0's, when every rank has a core and the step is
//! large enough to be worth the hand-over ([`run_owned`]), else the calling thread.
//!
//! Under a model checker (`--cfg ruccl_loom` / `--cfg ruccl_shuttle`) no other thread ever runs
//! a piece: the checkers must see every thread, and the pool's would be invisible to them.

/// Work below this many bytes per thread runs on fewer threads: handing a share to a sleeping
/// pool worker costs a wake-up (several microseconds, tens on a busy machine), about what a core
/// streams through this much memory.
pub(crate) const MIN_BYTES_PER_THREAD: usize = 512 << 10;

/// Shares are cut at multiples of this many elements, keeping vector loops whole.
const GRAIN: usize = 64;

/// A unit of element work that can be cut in two.
pub(crate) trait Piece: Send + Sized {
    /// Elements it touches.
    fn len(&self) -> usize;
    /// The first `at` elements and the rest; `at <= len()`.
    fn split_at(self, at: usize) -> (Self, Self);
}

impl<T: Send> Piece for &mut [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn split_at(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

/// The threads one call's loops may use, and whether its ranks fit them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Team {
    /// The most threads the call's loops use (1 under a checker).
    pub(crate) threads: usize,
    /// Whether every rank of the generation has a core of its own (`world <= threads`): then
    /// the ranks that wait poll on their cores, and a step too small to split can be handed to
    /// rank 0's thread ([`run_owned`]); otherwise rank 0 may be waiting for a core.
    pub(crate) ranks_fit: bool,
}

impl Team {
    /// Up to `threads` threads for a generation of `world` ranks.
    pub(crate) fn new(threads: usize, world: usize) -> Self {
        Self {
            threads,
            ranks_fit: world <= threads,
        }
    }
}

/// How many threads `elements` elements of `element_bytes` bytes are worth, at most `threads`.
pub(crate) fn worth(elements: usize, element_bytes: usize, threads: usize) -> usize {
    let bytes = elements.saturating_mul(element_bytes.max(1));
    (bytes / MIN_BYTES_PER_THREAD).clamp(1, threads.max(1))
}

/// Run `run` on every piece, on up to `threads` threads when the pieces are worth it.
pub(crate) fn run_pieces<P: Piece>(
    pieces: Vec<P>,
    element_bytes: usize,
    team: Team,
    run: impl Fn(P) + Sync,
) {
    let total: usize = pieces.iter().map(Piece::len).sum();
    let shares = worth(total, element_bytes, team.threads);
    if shares <= 1 {
        let bytes = total.saturating_mul(element_bytes);
        if team.threads > 1 && team.ranks_fit && bytes >= OWNED_FROM_BYTES {
            run_owned(pieces, &run);
        } else {
            pieces.into_iter().for_each(run);
        }
        return;
    }
    let bytes = total.saturating_mul(element_bytes);
    run_shares(share_out(pieces, total, shares), bytes, &run);
}

/// Cut `pieces` into at most `shares` lists of about `total / shares` elements each, in order.
fn share_out<P: Piece>(pieces: Vec<P>, total: usize, shares: usize) -> Vec<Vec<P>> {
    let quota = total.div_ceil(shares.max(1)).next_multiple_of(GRAIN);
    let mut lists = Vec::with_capacity(shares);
    let mut current = Vec::new();
    let mut room = quota;
    for mut piece in pieces {
        while piece.len() > room {
            let (head, tail) = piece.split_at(room);
            if head.len() > 0 {
                current.push(head);
            }
            lists.push(std::mem::take(&mut current));
            room = quota;
            piece = tail;
        }
        room -= piece.len();
        if piece.len() > 0 {
            current.push(piece);
        }
    }
    if !current.is_empty() {
        lists.push(current);
    }
    lists
}

/// From how many bytes a step's shares are also offered to rayon's pool, whose sleeping workers
/// a wake-up costs; below it only the calling thread and waiting ranks run them (a rank that
/// waits polls through about 250 yields before it parks, so in a loop of collectives the other
/// ranks are there to help). At 1 MiB per rank, W = 2, the pool's wake-up took as long as the
/// share it ran.
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
const POOL_FROM_BYTES: usize = 4 << 20;

/// From how many bytes a step too small to split is handed to rank 0's thread ([`run_owned`]).
/// Below it the hand-over costs about what it saves.
const OWNED_FROM_BYTES: usize = 16 << 10;

/// How long the calling thread waits for rank 0's thread to take a step handed to it before
/// running it itself: a few of that thread's polls (each one a yield of its core at most), so a
/// rank 0 that has parked costs a step no more than this.
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
const HAND_OVER_PATIENCE: std::time::Duration = std::time::Duration::from_micros(2);

#[cfg(any(ruccl_loom, ruccl_shuttle))]
fn run_owned<P: Piece>(pieces: Vec<P>, run: &(impl Fn(P) + Sync)) {
    pieces.into_iter().for_each(run);
}

/// Run a step too small to split on rank 0's thread, if that is not this one and it takes the
/// step within [`HAND_OVER_PATIENCE`]; else here. The last rank to arrive — which runs the plan
/// — changes from generation to generation, and a step's elements would move between cores
/// with it: on the 2-vCPU VM of `perf/PERF.md`, in its slow placement, W = 2 at 64 KiB and
/// 256 KiB took 9.3 and 28 µs in place and 67 and 270 out of place; handed to rank 0, 5.7 and 14,
/// 6.8 and 17–23 (in the fast placement, out of place, 18 and 57 against 5.3 and 16).
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
fn run_owned<P: Piece>(pieces: Vec<P>, run: &(impl Fn(P) + Sync)) {
    if super::crew::home() == 0 {
        pieces.into_iter().for_each(run);
        return;
    }
    let job = Job::new(vec![pieces], run);
    let task = || {
        if super::crew::home() == 0 {
            job.work();
        }
    };
    let posted = super::crew::run_posted(&task, || {
        let start = std::time::Instant::now();
        while job.taken.load(std::sync::atomic::Ordering::Acquire) == 0
            && start.elapsed() < HAND_OVER_PATIENCE
        {
            std::hint::spin_loop();
        }
        job.work();
        job.wait();
    });
    if !posted {
        job.work();
    }
    job.raise();
}

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
fn run_shares<P: Piece>(lists: Vec<Vec<P>>, bytes: usize, run: &(impl Fn(P) + Sync)) {
    let job = Job::new(lists, run);
    let task = || job.work();
    let posted = super::crew::run_posted(&task, || {
        if bytes >= POOL_FROM_BYTES {
            for _ in 1..job.lists.len() {
                rayon::spawn(|| super::crew::help(0));
            }
        }
        job.work();
        job.wait();
    });
    if !posted {
        rayon::in_place_scope(|scope| {
            for _ in 1..job.lists.len() {
                scope.spawn(|_| job.work());
            }
            job.work();
        });
    }
    job.raise();
}

/// One step's shares, claimed one at a time by any thread that calls [`Job::work`], each thread
/// starting from the share of the CPU it runs on ([`claimer`]), so that in a loop of
/// collectives each share's elements stay in one core's caches, whichever thread runs there.
/// On the 2-vCPU VM of `perf/PERF.md`, in the VM placement where moving lines between the cores
/// is slow, first-come claiming ran W = 2, 1 MiB in 55–64 µs in place and 300–490 out of place;
/// claiming by the rank a thread waited as, 28–33 and 40–41 (4 MiB: 223–241 and 930–1 470 µs
/// against 108–119 and 141–194). With more ranks than cores a rank's thread moves between
/// cores, and by rank W = 4, 1 MiB out of place took 76–94 µs in seven runs and 754–766 in two;
/// by CPU, 79–89 in every one of nine (`ruccl-perf -g 4 -b 1M -e 4M -n 300` and `-b 256K -e
/// 16M -n 200`, alternated), and 4 MiB in place 228–247 against 221–481.
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
struct Job<'r, P, F> {
    /// Share `i`, until a thread takes it: taking it is claiming it.
    lists: Vec<std::sync::Mutex<Option<Vec<P>>>>,
    /// Shares taken (claimed) so far.
    taken: std::sync::atomic::AtomicUsize,
    /// Shares run to the end (or to a panic).
    done: std::sync::atomic::AtomicUsize,
    /// The first share's panic, raised again by the calling thread.
    panic: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
    run: &'r F,
}

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
impl<'r, P: Piece, F: Fn(P) + Sync> Job<'r, P, F> {
    fn new(lists: Vec<Vec<P>>, run: &'r F) -> Self {
        Self {
            lists: lists
                .into_iter()
                .map(|list| std::sync::Mutex::new(Some(list)))
                .collect(),
            taken: std::sync::atomic::AtomicUsize::new(0),
            done: std::sync::atomic::AtomicUsize::new(0),
            panic: std::sync::Mutex::new(None),
            run,
        }
    }

    /// Claim and run shares until none is left unclaimed, starting from share [`claimer`]
    /// modulo the number of shares (a step's shares depend only on its size and the team, so
    /// the same share in every generation). Never panics: a share's panic is kept for
    /// [`Job::raise`].
    fn work(&self) {
        use std::sync::atomic::Ordering;
        use std::sync::{MutexGuard, PoisonError};
        let shares = self.lists.len();
        // A CPU's number or a rank: far from overflowing when added to a share's index.
        let first = claimer();
        for offset in 0..shares {
            let index = (first + offset) % shares;
            // Taking a share's list is claiming it: one thread takes it, every later one finds
            // `None`. No code that can panic runs under these locks.
            let Some(list) = self.lists[index]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            else {
                continue;
            };
            self.taken.fetch_add(1, Ordering::Release);
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                list.into_iter().for_each(self.run);
            }));
            if let Err(payload) = ran {
                let mut panic: MutexGuard<'_, _> =
                    self.panic.lock().unwrap_or_else(PoisonError::into_inner);
                panic.get_or_insert(payload);
            }
            // Release: whoever sees the count sees the share's writes.
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    /// Wait until every share is done, spinning briefly, then yielding the core (a helper that
    /// claimed a share may need it, when ranks outnumber cores).
    fn wait(&self) {
        use std::sync::atomic::Ordering;
        let mut polls = 0u32;
        while self.done.load(Ordering::Acquire) < self.lists.len() {
            if polls < 64 {
                std::hint::spin_loop();
                polls += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Raise the first share's panic on this thread, if any share panicked.
    fn raise(self) {
        let panic = self
            .panic
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }
}

/// Who this thread claims shares as: the CPU it runs on; where that cannot be read, the rank
/// the thread last waited as ([`crew::home`](super::crew::home)).
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
fn claimer() -> usize {
    current_cpu().unwrap_or_else(super::crew::home)
}

/// The CPU this thread runs on now.
#[cfg(all(target_os = "linux", not(any(ruccl_loom, ruccl_shuttle))))]
fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` takes no arguments and touches no memory of the caller's; it
    // returns the CPU's number, or -1 on failure (refused below).
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// Elsewhere the CPU is not read: shares go by rank.
#[cfg(all(not(target_os = "linux"), not(any(ruccl_loom, ruccl_shuttle))))]
fn current_cpu() -> Option<usize> {
    None
}

#[cfg(any(ruccl_loom, ruccl_shuttle))]
fn run_shares<P: Piece>(lists: Vec<Vec<P>>, _bytes: usize, run: &(impl Fn(P) + Sync)) {
    lists.into_iter().flatten().for_each(run);
}

#[cfg(test)]
mod tests {
    use super::{Piece, share_out};

    #[test]
    fn shares_cover_every_element_once_in_order() {
        let mut first = vec![0u32; 1000];
        let mut second = vec![0u32; 37];
        let pieces: Vec<&mut [u32]> = vec![&mut first, &mut second];
        let lists = share_out(pieces, 1037, 3);
        assert_eq!(lists.len(), 3);
        let lengths: Vec<usize> = lists
            .iter()
            .map(|list| list.iter().map(Piece::len).sum())
            .collect();
        assert_eq!(lengths, vec![384, 384, 269]);
        for (index, list) in lists.into_iter().enumerate() {
            for piece in list {
                piece
                    .iter_mut()
                    .for_each(|value| *value += index as u32 + 1);
            }
        }
        assert!(first[..384].iter().all(|&value| value == 1));
        assert!(first[384..768].iter().all(|&value| value == 2));
        assert!(first[768..].iter().chain(&second).all(|&value| value == 3));
    }

    /// Shares run by waiting threads: not under a checker, where a step never leaves its
    /// thread.
    #[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
    mod crew {
        use super::super::{Team, run_pieces};
        use std::sync::Mutex;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::thread::ThreadId;
        use std::time::{Duration, Instant};

        /// Held by each of these tests: a helper of one would take shares of another's step.
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

        /// Yield until `done`; fail (not hang) after ten seconds.
        fn until(what: &str, done: impl Fn() -> bool) {
            let start = Instant::now();
            while !done() {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "waited 10 s for {what}"
                );
                std::thread::yield_now();
            }
        }

        fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
            ONE_AT_A_TIME
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        /// Elements of a step cut into two shares of a megabyte each: below `POOL_FROM_BYTES`, so
        /// no pool worker is offered them, only the caller and whoever helps.
        const TWO_SHARES: usize = 512 << 10;

        /// A thread standing in for waiting rank 1: offers itself until `stop`.
        fn wait_and_help(stop: &AtomicBool) {
            wait_and_help_as(1, stop);
        }

        /// A thread standing in for waiting rank `rank`: offers itself until `stop`.
        fn wait_and_help_as(rank: usize, stop: &AtomicBool) {
            while !stop.load(Ordering::Acquire) {
                crate::device::crew::help(rank);
                std::hint::spin_loop();
            }
        }

        /// On the caller's thread, wait (at most ten seconds) until another thread has started a
        /// share, so that a helper cannot miss the step by arriving after the caller ran it all.
        fn hold_the_caller(caller: ThreadId, started_elsewhere: &AtomicBool) {
            if std::thread::current().id() == caller {
                let start = Instant::now();
                while !started_elsewhere.load(Ordering::Acquire)
                    && start.elapsed() < Duration::from_secs(10)
                {
                    std::thread::yield_now();
                }
            } else {
                started_elsewhere.store(true, Ordering::Release);
            }
        }

        #[test]
        fn a_waiting_thread_runs_a_share_of_the_step_and_every_element_is_written_once() {
            let _serial = one_at_a_time();
            let mut values = vec![0u32; TWO_SHARES];
            let caller = std::thread::current().id();
            let stop = AtomicBool::new(false);
            // Another test's step may hold the process-wide slot (a panicking one holds it while
            // the panic is printed), and then rayon's pool runs the share: try again, for up to ten
            // seconds (a broken crew leaves every share to the caller, which fails at once).
            let start = Instant::now();
            let mut attempt = 0;
            while start.elapsed() < Duration::from_secs(10) {
                attempt += 1;
                let ran_on = Mutex::new(Vec::new());
                let started = AtomicBool::new(false);
                std::thread::scope(|scope| {
                    scope.spawn(|| wait_and_help(&stop));
                    run_pieces(
                        vec![&mut values[..]],
                        4,
                        Team::new(2, 2),
                        |piece: &mut [u32]| {
                            hold_the_caller(caller, &started);
                            let on_pool = rayon::current_thread_index().is_some();
                            ran_on
                                .lock()
                                .unwrap()
                                .push((std::thread::current().id(), on_pool));
                            piece.iter_mut().for_each(|value| *value += 1);
                        },
                    );
                    stop.store(true, Ordering::Release);
                });
                stop.store(false, Ordering::Release);
                assert!(values.iter().all(|&value| value == attempt));
                // Any waiting thread may help (another test's as well), rayon's workers only when
                // the step was not posted.
                let ran_on = ran_on.into_inner().unwrap();
                if ran_on
                    .iter()
                    .any(|&(thread, on_pool)| thread != caller && !on_pool)
                {
                    return;
                }
                assert!(
                    ran_on.iter().any(|&(thread, _)| thread != caller),
                    "every share ran on the caller: the waiting thread never helped"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            panic!("the step never reached the waiting thread in ten seconds");
        }

        /// Pins this thread to one CPU until dropped, then gives it back the CPUs it had.
        #[cfg(target_os = "linux")]
        struct Pinned {
            before: libc::cpu_set_t,
        }

        #[cfg(target_os = "linux")]
        impl Pinned {
            /// The CPUs this thread may run on now.
            fn allowed() -> Vec<usize> {
                // SAFETY: `cpu_set_t` is a plain bit array, valid all zeros.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: `set` is this frame's own, `size_of` its length; 0 is this thread.
                let got =
                    unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
                assert_eq!(got, 0, "sched_getaffinity");
                (0..libc::CPU_SETSIZE as usize)
                    // SAFETY: `cpu` is below `CPU_SETSIZE`, inside `set`.
                    .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
                    .collect()
            }

            /// Run this thread on `cpu` only (one of [`Pinned::allowed`]).
            fn to(cpu: usize) -> Self {
                // SAFETY: as in `allowed`.
                let mut before: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: as in `allowed`.
                let mut only: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: both sets are this frame's own, `size_of` their length, and `cpu` is
                // below `CPU_SETSIZE` (it came from `allowed`); 0 is this thread.
                unsafe {
                    assert_eq!(
                        libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut before),
                        0
                    );
                    libc::CPU_SET(cpu, &mut only);
                    assert_eq!(
                        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &only),
                        0,
                        "pin to CPU {cpu}"
                    );
                }
                Self { before }
            }
        }

        #[cfg(target_os = "linux")]
        impl Drop for Pinned {
            fn drop(&mut self) {
                // SAFETY: `before` is this guard's own set, `size_of` its length; 0 is this
                // thread. A failure leaves the thread pinned: nothing else to do in a test.
                unsafe {
                    libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.before);
                }
            }
        }

        #[cfg(target_os = "linux")]
        #[test]
        fn a_thread_takes_the_share_of_the_cpu_it_runs_on_first() {
            let _serial = one_at_a_time();
            let mut values: Vec<u32> = (0..TWO_SHARES as u32).collect();
            let caller = std::thread::current().id();
            let allowed = Pinned::allowed();
            // A CPU of each parity, where this thread may run on one: of two shares, a thread on
            // an even CPU takes the first first, one on an odd CPU the second.
            let cpus: Vec<usize> = [0, 1]
                .into_iter()
                .filter_map(|parity| allowed.iter().copied().find(|cpu| cpu % 2 == parity))
                .collect();
            assert!(!cpus.is_empty());
            for cpu in cpus {
                let _pinned = Pinned::to(cpu);
                // Another test's helper may take a share of this step: try again then.
                let mut checked = false;
                for _ in 0..100 {
                    let ran = Mutex::new(Vec::new());
                    run_pieces(
                        vec![&mut values[..]],
                        4,
                        Team::new(2, 2),
                        |piece: &mut [u32]| {
                            ran.lock()
                                .unwrap()
                                .push((std::thread::current().id(), piece[0]));
                        },
                    );
                    let ran = ran.into_inner().unwrap();
                    if ran.iter().all(|&(thread, _)| thread == caller) {
                        let first: Vec<u32> = ran.iter().map(|&(_, first)| first).collect();
                        let expected = (cpu % 2) as u32 * (TWO_SHARES as u32 / 2);
                        assert_eq!(first.first(), Some(&expected), "CPU {cpu}: {first:?}");
                        checked = true;
                        break;
                    }
                }
                assert!(checked, "other threads took a share of every attempt");
            }
        }

        /// Which threads ran the pieces of one unsplit step of `len` u32 run by a thread that
        /// waited as `caller_rank`, for a `team`, while a thread waits as rank 0.
        fn unsplit_step_ran_on(len: usize, caller_rank: usize, team: Team) -> (bool, bool) {
            let mut values = vec![0u32; len];
            let stop = AtomicBool::new(false);
            crate::device::crew::help(caller_rank);
            let caller = std::thread::current().id();
            let ran = Mutex::new(Vec::new());
            let polling = AtomicBool::new(false);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    polling.store(true, Ordering::Release);
                    wait_and_help_as(0, &stop);
                });
                // Hand the step over only once rank 0's thread polls.
                until("the helper to start", || polling.load(Ordering::Acquire));
                run_pieces(vec![&mut values[..]], 4, team, |piece: &mut [u32]| {
                    ran.lock().unwrap().push(std::thread::current().id());
                    piece.iter_mut().for_each(|value| *value += 1);
                });
                stop.store(true, Ordering::Release);
            });
            assert!(values.iter().all(|&value| value == 1));
            let ran = ran.into_inner().unwrap();
            assert_eq!(ran.len(), 1, "an unsplit step is one piece here");
            (ran[0] == caller, ran[0] != caller)
        }

        #[test]
        fn a_step_too_small_to_split_goes_to_rank_0s_thread_when_every_rank_has_a_core() {
            let _serial = one_at_a_time();
            // 16 384 u32: 64 KiB, one share, above `OWNED_FROM_BYTES`. The waiting thread may
            // miss the hand-over (descheduled on a busy machine; another test's step holding
            // the slot): it must take it at least once in many tries.
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                let (_, elsewhere) = unsplit_step_ran_on(16_384, 1, Team::new(2, 2));
                if elsewhere {
                    return;
                }
            }
            panic!("rank 0's thread never took the step in ten seconds");
        }

        #[test]
        fn a_step_too_small_to_split_stays_on_the_caller_otherwise() {
            let _serial = one_at_a_time();
            // The caller is rank 0's thread; ranks outnumber cores; the step is below
            // `OWNED_FROM_BYTES` (1 024 u32: 4 KiB). Each a few times: a hand-over, where
            // there must be none, happens in most tries.
            for (len, caller_rank, team) in [
                (16_384, 0, Team::new(2, 2)),
                (16_384, 1, Team::new(2, 4)),
                (1_024, 1, Team::new(2, 2)),
            ] {
                for _ in 0..20 {
                    let (here, _) = unsplit_step_ran_on(len, caller_rank, team);
                    assert!(here, "{len} u32 from rank {caller_rank}, {team:?}");
                }
            }
        }

        #[test]
        fn every_element_is_written_while_another_step_holds_the_slot() {
            let _serial = one_at_a_time();
            let (holding, stop) = (AtomicBool::new(false), AtomicBool::new(false));
            let written = std::thread::scope(|scope| {
                // Another step, posted until `stop`: these must run without the slot.
                scope.spawn(|| {
                    let task = || {};
                    let start = Instant::now();
                    while !crate::device::crew::run_posted(&task, || {
                        holding.store(true, Ordering::Release);
                        until("the test to finish", || stop.load(Ordering::Acquire));
                    }) && start.elapsed() < Duration::from_secs(10)
                    {
                        std::thread::yield_now();
                    }
                });
                until("the other step to hold the slot", || {
                    holding.load(Ordering::Acquire)
                });
                crate::device::crew::help(1);
                // Split in two shares (rayon's pool), and unsplit handed to rank 0 (here).
                let written: Vec<bool> = [TWO_SHARES, 16_384]
                    .into_iter()
                    .map(|len| {
                        let mut values = vec![0u32; len];
                        run_pieces(vec![&mut values[..]], 4, Team::new(2, 2), |piece| {
                            piece.iter_mut().for_each(|value| *value += 1);
                        });
                        values.iter().all(|&value| value == 1)
                    })
                    .collect();
                stop.store(true, Ordering::Release);
                written
            });
            assert_eq!(
                written,
                [true, true],
                "split, unsplit: every element written once"
            );
        }

        #[test]
        fn a_share_panicking_on_a_helper_is_raised_by_the_caller_and_spares_the_helper() {
            let _serial = one_at_a_time();
            let mut values = vec![0u32; TWO_SHARES];
            let caller = std::thread::current().id();
            let (started, stop) = (AtomicBool::new(false), AtomicBool::new(false));
            let (raised, helper) = std::thread::scope(|scope| {
                let helper = scope.spawn(|| wait_and_help(&stop));
                let raised = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_pieces(
                        vec![&mut values[..]],
                        4,
                        Team::new(2, 2),
                        |_: &mut [u32]| {
                            hold_the_caller(caller, &started);
                            if std::thread::current().id() != caller {
                                panic!("planted panic in a helper's share");
                            }
                        },
                    )
                }));
                stop.store(true, Ordering::Release);
                (raised, helper.join())
            });
            let payload = raised.expect_err("the caller returned as if every share had run");
            assert_eq!(
                payload.downcast_ref::<&str>(),
                Some(&"planted panic in a helper's share")
            );
            assert!(helper.is_ok(), "the helper's thread unwound");
        }
    }
}
