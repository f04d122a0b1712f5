//! The host-memory bound of a row (the table's `bound` column with `--extra-columns`): how fast
//! this machine copies and folds host memory with the simulated device's threads, measured in
//! the same run right before each row, and how long the row's collective would take if it moved
//! only its minimum traffic at those rates.
//!
//! - [`MinTraffic`]: nccl-tests' lower bound per rank (`ruccl_sim::ledger::lower_bound_per_rank`:
//!   the bus factor times the larger of input and output) times the `W` ranks, in bytes, split
//!   into what must be folded and what need only be copied: an all-reduce half and half (its
//!   reduce-scatter part folds, its all-gather part copies), a reduce-scatter and a reduce all
//!   folded, the others all copied.
//! - [`Rates`]: bytes per second of `dst.copy_from_slice(&src)` and of the fold `dst[i] += src[i]`
//!   on `f32` (bytes of `src`), over two buffers that together are as large as the row's
//!   working set (`W` times a rank's buffer: what the ranks' buffers take in place, so the
//!   loops meet the caches the collective meets: with the working set in each of two buffers,
//!   twice the footprint, the bound came out slower than ruCCL's own in-place all-reduce at
//!   16 MiB, W = 2 — 0.4–0.7 times it — on the 2-vCPU VM), each cut into equal shares, one per thread, under [`std::thread::scope`]:
//!   the device's threads (`SimDevice::threads`, `--device-threads`), fewer where a share
//!   would be under [`MIN_BYTES_PER_THREAD`]. The clock
//!   runs from a start line the threads spin at until the last share is done, so no thread's
//!   wake-up is timed.
//!   The fold is the device's own accumulate (the received block folded into the working
//!   buffer: two streams read, one written back) rather than a three-buffer triad
//!   `a = b + c`, which would take a third buffer and describe no step the device runs. The
//!   fold is measured on `f32` whatever the row's type, compiled for the widest vectors the CPU
//!   runs (AVX-512, AVX2, else the baseline), as the device's kernels are.
//! - [`Bound::seconds`]: `folded / fold rate + copied / copy rate`.
//!
//! [`Meter::measure`] first touches the buffers (every page faulted, by the thread that will
//! use it: untimed, and not counted below — about one more pass) and times one pass of each
//! loop; then it takes the best of [`REPS`] more repetitions of each, alternating copy and
//! fold, a repetition being as many passes as fill [`REPETITION`] where the budget allows. The
//! budget is [`SHARE`] of the row's own measuring time, estimated before the row as the larger
//! of the previous row's measured time and the row's collectives (`2 × (1 + iterations +
//! checks)`) times the bound estimated from the first passes — both at most the row's time,
//! since sizes grow and no collective beats its bound; where it is short, the repetitions are
//! shortened down to one pass. That floor, `2 × (1 + REPS)` passes, is 2–8 bound times (a
//! pass streams half the working set; the bound moves `2(W-1)/W` of it for an all-reduce,
//! `(W-1)/W` for a reduce-scatter or an all-gather): 5–18 % of a `-n 20` row (44 collectives)
//! that ran at its bound, less as the row runs slower. The thread start is not counted
//! either: on rows of a few microseconds it takes more than the share.
//!
//! The buffers are allocated per row and freed before the row allocates anything
//! ([`crate::memory::BOUND_COPIES`] counts them); nothing is allocated in the timed loops.

use ruccl_core::Collective;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The timed repetitions of each loop (the first pass of each counts as one more).
pub const REPS: usize = 3;

/// How long a repetition should take, when the row's time allows it.
pub const REPETITION: Duration = Duration::from_millis(1);

/// The share of the row's own measuring time the bound may take.
pub const SHARE: f64 = 0.1;

/// Buffers below this many bytes per thread are measured on fewer threads: a share below it
/// streams through in a few microseconds, about what releasing a thread from the start line
/// and counting it done costs. (The device splits a step only from 512 KiB per thread, but its
/// `W` rank threads run at once: a collective uses the cores at every size that matters here.)
pub const MIN_BYTES_PER_THREAD: usize = 64 << 10;

/// The bytes a collective must move at the least, over all ranks, by kind of work.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MinTraffic {
    /// Bytes folded into another buffer (a reduction's operands).
    pub folded: f64,
    /// Bytes copied.
    pub copied: f64,
}

impl MinTraffic {
    /// The minimum traffic of `collective` over `world` ranks with inputs of `input_len`
    /// elements of `element_size` bytes: nccl-tests' per-rank lower bound times `world`,
    /// split by what the collective does with it.
    pub fn of(collective: Collective, world: usize, input_len: usize, element_size: usize) -> Self {
        let per_rank = ruccl_sim::ledger::lower_bound_per_rank(collective, world, input_len);
        let bytes = per_rank * world as f64 * element_size as f64;
        match collective {
            Collective::AllReduce(_) => Self {
                folded: bytes / 2.0,
                copied: bytes / 2.0,
            },
            Collective::ReduceScatter(_) | Collective::Reduce { .. } => Self {
                folded: bytes,
                copied: 0.0,
            },
            _ => Self {
                folded: 0.0,
                copied: bytes,
            },
        }
    }

    /// Both kinds, in bytes.
    pub fn total(&self) -> f64 {
        self.folded + self.copied
    }
}

/// Host-memory rates, bytes per second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Bytes copied per second (`dst.copy_from_slice(&src)`).
    pub copy: f64,
    /// Bytes of `src` folded per second (`dst[i] += src[i]`, `f32`).
    pub fold: f64,
}

/// A row's host-memory bound: its minimum traffic at the measured rates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bound {
    /// The rates measured right before the row.
    pub rates: Rates,
    /// The collective's minimum traffic.
    pub traffic: MinTraffic,
}

impl Bound {
    /// `folded / fold rate + copied / copy rate`, in seconds; `None` when the collective moves
    /// nothing (`W = 1`, an empty tensor) or a rate it needs was not measured.
    pub fn seconds(&self) -> Option<f64> {
        let part = |bytes: f64, rate: f64| {
            if bytes <= 0.0 {
                Some(0.0)
            } else {
                (rate > 0.0 && rate.is_finite()).then(|| bytes / rate)
            }
        };
        let seconds = part(self.traffic.folded, self.rates.fold)?
            + part(self.traffic.copied, self.rates.copy)?;
        (seconds > 0.0).then_some(seconds)
    }

    /// `time_us` (a measured time, µs) over the bound's time: how many times the bound a
    /// collective took; `None` where [`seconds`](Self::seconds) is.
    pub fn times(&self, time_us: f64) -> Option<f64> {
        self.seconds().map(|seconds| time_us / (seconds * 1e6))
    }
}

/// Measures the bound before each row of a sweep, rank 0's: keeps the previous row's time for
/// the next row's budget.
#[derive(Clone, Debug)]
pub struct Meter {
    threads: usize,
    previous_row: Duration,
}

impl Meter {
    /// A meter using `threads` threads (the simulated device's; at least one).
    pub fn new(threads: usize) -> Self {
        Self {
            threads: threads.max(1),
            previous_row: Duration::ZERO,
        }
    }

    /// The threads it measures with.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Record how long the row just measured took (its measuring time, both placements): the
    /// next row's budget is at least [`SHARE`] of it.
    pub fn row_took(&mut self, elapsed: Duration) {
        self.previous_row = elapsed;
    }

    /// Measure the rates over two buffers of `working_bytes` together and return the bound of
    /// `traffic` for a row of `collectives` collective calls; `None` when `traffic` is nothing
    /// (no measurement is made) or a helper thread could not start.
    pub fn measure(
        &self,
        working_bytes: usize,
        traffic: MinTraffic,
        collectives: usize,
    ) -> Option<Bound> {
        if traffic.total() <= 0.0 {
            return None;
        }
        let len = (working_bytes / 2 / size_of::<f32>()).max(1);
        let bytes = (len * size_of::<f32>()) as f64;
        // Zeroed and untouched: the touch's writes fault the pages in, each share's by its
        // thread.
        let mut src = vec![0.0_f32; len];
        let mut dst = vec![0.0_f32; len];
        let threads = (len * size_of::<f32>() / MIN_BYTES_PER_THREAD).clamp(1, self.threads);
        let shares = shares(&mut src, &mut dst, threads);
        let rates = on_crew(shares, |crew| {
            crew.run(Job::Touch);
            let started = Instant::now();
            let mut copy = crew.run(Job::Copy(1));
            let mut fold = crew.run(Job::Fold(1));
            let rates = |copy: Duration, fold: Duration| Rates {
                copy: bytes / copy.as_secs_f64().max(1e-9),
                fold: bytes / fold.as_secs_f64().max(1e-9),
            };
            let estimate = Bound {
                rates: rates(copy, fold),
                traffic,
            }
            .seconds()
            .unwrap_or(0.0);
            let row = (estimate * collectives as f64).max(self.previous_row.as_secs_f64());
            let budget = (SHARE * row - started.elapsed().as_secs_f64()).max(0.0);
            let passes = passes_per_repetition(budget, copy.max(fold).as_secs_f64());
            for _ in 0..REPS {
                copy = copy.min(crew.run(Job::Copy(passes)) / passes as u32);
                fold = fold.min(crew.run(Job::Fold(passes)) / passes as u32);
            }
            rates(copy, fold)
        })?;
        Some(Bound { rates, traffic })
    }
}

/// How many passes each of the [`REPS`] timed repetitions of each loop takes when `budget`
/// seconds are left and one pass takes `pass` seconds: as many as fill [`REPETITION`] where the
/// budget allows, fewer where it does not, never none.
pub fn passes_per_repetition(budget: f64, pass: f64) -> usize {
    let per_rep = (budget / (2 * REPS) as f64).min(REPETITION.as_secs_f64());
    ((per_rep / pass.max(1e-9)).floor() as usize).max(1)
}

/// `src` and `dst` cut into `threads` equal shares (the last ones one element shorter where
/// the length does not divide).
fn shares<'a>(
    mut src: &'a mut [f32],
    mut dst: &'a mut [f32],
    threads: usize,
) -> Vec<(&'a mut [f32], &'a mut [f32])> {
    let threads = threads.clamp(1, src.len().max(1));
    let mut cut = Vec::with_capacity(threads);
    for share in 0..threads {
        let len = src.len() / (threads - share) + usize::from(src.len() % (threads - share) > 0);
        let (mine, rest) = std::mem::take(&mut src).split_at_mut(len);
        src = rest;
        let (theirs, others) = std::mem::take(&mut dst).split_at_mut(len);
        dst = others;
        cut.push((mine, theirs));
    }
    cut
}

/// What the threads do with their shares in one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Job {
    /// Write every element (faulting the pages in): `src` ones, `dst` zeros.
    Touch,
    /// Copy `src` into `dst`, this many times.
    Copy(usize),
    /// Fold `src` into `dst`, this many times.
    Fold(usize),
    /// Leave.
    Stop,
}

impl Job {
    fn run(self, src: &mut [f32], dst: &mut [f32]) {
        match self {
            Job::Touch => {
                src.fill(1.0);
                dst.fill(0.0);
            }
            Job::Copy(passes) => {
                for _ in 0..passes {
                    black_box(&mut *dst).copy_from_slice(black_box(&*src));
                }
            }
            Job::Fold(passes) => {
                for _ in 0..passes {
                    fold(black_box(&mut *dst), black_box(&*src));
                }
            }
            Job::Stop => {}
        }
    }
}

/// `dst[i] += src[i]`, compiled for the widest vectors this CPU runs, as the device's own
/// kernels are (in the caches, baseline SSE2 folds slower than the device does). Ones added to
/// whole numbers below 2^24: exact, never subnormal.
fn fold(dst: &mut [f32], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU runs AVX-512 F, checked just above: `fold_avx512`'s one
            // requirement.
            return unsafe { fold_avx512(dst, src) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU runs AVX2, checked just above: `fold_avx2`'s one requirement.
            return unsafe { fold_avx2(dst, src) };
        }
    }
    fold_loop(dst, src);
}

/// The fold's loop, inlined into each compilation of it.
#[inline(always)]
fn fold_loop(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += *s;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fold_avx2(dst: &mut [f32], src: &[f32]) {
    fold_loop(dst, src);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fold_avx512(dst: &mut [f32], src: &[f32]) {
    fold_loop(dst, src);
}

/// The rounds. A round opens under the lock (the caller sets the job, helpers wake up and
/// count themselves ready: untimed); once all are ready the caller starts the clock and lets
/// them go through `go`, and stops it when `finished` counts every helper done — both spun on,
/// so neither a wake-up nor a sleep is timed.
#[derive(Debug, Default)]
struct Rounds {
    /// Rounds opened.
    round: u64,
    /// The current round's job.
    job: Option<Job>,
    /// Helpers ready for the current round.
    ready: usize,
}

/// The crew's shared state: the rounds (under the lock) and the start line and finish count.
#[derive(Debug, Default)]
struct Line {
    rounds: Mutex<Rounds>,
    changed: Condvar,
    /// The round the helpers may start (set by the caller once all are ready).
    go: AtomicU64,
    /// Helpers done with the current round.
    finished: AtomicUsize,
}

impl Line {
    fn lock(&self) -> MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, rounds: MutexGuard<'a, Rounds>) -> MutexGuard<'a, Rounds> {
        self.changed
            .wait(rounds)
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long a thread spins at the start line or for the finish before it yields its core
/// between polls. Short: where the machine is shared, the other thread may be waiting for this
/// very core (spinning 200 µs added 200 µs to every pass of the rows of 1–4 MiB on the loaded
/// 2-vCPU VM).
const SPIN: Duration = Duration::from_micros(10);

/// Spin until `done` holds; after [`SPIN`], yield the core between polls.
fn spin_until(done: impl Fn() -> bool) {
    let start = Instant::now();
    let mut spins = 0_u32;
    while !done() {
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 && start.elapsed() > SPIN {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The caller's side of the helpers: its own share, and the line they share.
struct Crew<'a, 'b> {
    mine: (&'a mut [f32], &'a mut [f32]),
    helpers: usize,
    line: &'b Line,
}

impl Crew<'_, '_> {
    /// Run `job` on every share, the caller's included; the wall time from the start line
    /// until the last share is done.
    fn run(&mut self, job: Job) -> Duration {
        let round = {
            let mut rounds = self.line.lock();
            rounds.round += 1;
            rounds.job = Some(job);
            rounds.ready = 0;
            rounds.round
        };
        self.line.changed.notify_all();
        {
            let mut rounds = self.line.lock();
            while rounds.ready < self.helpers {
                rounds = self.line.wait(rounds);
            }
        }
        self.line.finished.store(0, Ordering::Relaxed);
        let start = Instant::now();
        self.line.go.store(round, Ordering::Release);
        job.run(self.mine.0, self.mine.1);
        spin_until(|| self.line.finished.load(Ordering::Acquire) >= self.helpers);
        start.elapsed()
    }
}

/// Start a helper thread for every share but the first, run `measure` with the crew, stop the
/// helpers; `None` if a helper could not start.
fn on_crew<T>(
    mut shares: Vec<(&mut [f32], &mut [f32])>,
    measure: impl FnOnce(&mut Crew<'_, '_>) -> T,
) -> Option<T> {
    let line = Line::default();
    let helpers = shares.split_off(1.min(shares.len()));
    let mine = shares.pop()?;
    std::thread::scope(|scope| {
        let line = &line;
        let mut started = 0;
        let mut failed = false;
        for (src, dst) in helpers {
            let helper = std::thread::Builder::new()
                .name("membound".to_owned())
                .spawn_scoped(scope, move || help(src, dst, line));
            match helper {
                Ok(_) => started += 1,
                Err(_) => failed = true,
            }
        }
        let mut crew = Crew {
            mine,
            helpers: started,
            line,
        };
        let outcome = (!failed).then(|| measure(&mut crew));
        crew.run(Job::Stop);
        outcome
    })
}

/// A helper: each round's job on its share, until [`Job::Stop`].
fn help(src: &mut [f32], dst: &mut [f32], line: &Line) {
    let mut seen = 0;
    loop {
        let job = {
            let mut rounds = line.lock();
            while rounds.round == seen {
                rounds = line.wait(rounds);
            }
            seen = rounds.round;
            rounds.ready += 1;
            rounds.job.unwrap_or(Job::Stop)
        };
        line.changed.notify_all();
        spin_until(|| line.go.load(Ordering::Acquire) >= seen);
        job.run(src, dst);
        line.finished.fetch_add(1, Ordering::Release);
        if job == Job::Stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruccl_core::ReduceOperation;

    const SUM: ReduceOperation = ReduceOperation::Sum;

    /// `MinTraffic::of` at W = 4, f32 (4 B), for an input of `input_len` elements.
    fn at_four(collective: Collective, input_len: usize) -> MinTraffic {
        MinTraffic::of(collective, 4, input_len, 4)
    }

    #[test]
    fn the_minimum_traffic_of_every_collective_is_the_bound_times_the_ranks_split_by_work() {
        let folded = |bytes| MinTraffic {
            folded: bytes,
            copied: 0.0,
        };
        let copied = |bytes| MinTraffic {
            folded: 0.0,
            copied: bytes,
        };
        // All-reduce of 1024 elements: 2·3/4·1024 = 1536 per rank, · 4 ranks · 4 B = 24576 B,
        // half folded (reduce-scatter), half copied (all-gather).
        assert_eq!(
            at_four(Collective::AllReduce(SUM), 1024),
            MinTraffic {
                folded: 12288.0,
                copied: 12288.0
            }
        );
        // (W-1)/W of the larger of input and output (1024): 768 per rank, 12288 B in all.
        assert_eq!(
            at_four(Collective::ReduceScatter(SUM), 1024),
            folded(12288.0)
        );
        assert_eq!(at_four(Collective::AllGather, 256), copied(12288.0));
        assert_eq!(
            at_four(Collective::Gather { root: 1 }, 256),
            copied(12288.0)
        );
        assert_eq!(
            at_four(Collective::Scatter { root: 2 }, 1024),
            copied(12288.0)
        );
        assert_eq!(at_four(Collective::AllToAll, 1024), copied(12288.0));
        // A factor of one: the whole buffer per rank, 1024 · 4 · 4 B.
        assert_eq!(
            at_four(Collective::Broadcast { root: 3 }, 1024),
            copied(16384.0)
        );
        assert_eq!(
            at_four(Collective::Reduce { op: SUM, root: 0 }, 1024),
            folded(16384.0)
        );
        // Element size counts; one rank or nothing moves nothing.
        assert_eq!(
            MinTraffic::of(Collective::AllGather, 4, 256, 8),
            copied(24576.0)
        );
        assert_eq!(
            MinTraffic::of(Collective::AllReduce(SUM), 1, 1024, 4),
            MinTraffic::default()
        );
        assert_eq!(
            at_four(Collective::AllReduce(SUM), 0),
            MinTraffic::default()
        );
    }

    #[test]
    fn the_bound_time_is_folded_over_the_fold_rate_plus_copied_over_the_copy_rate() {
        let rates = Rates {
            copy: 2e9,
            fold: 1e9,
        };
        let bound = |traffic| Bound { rates, traffic };
        let all_reduce = bound(at_four(Collective::AllReduce(SUM), 1 << 20));
        // 12 MiB folded at 1 GB/s, 12 MiB copied at 2 GB/s.
        let expected = 12.0 * 1048576.0 / 1e9 + 12.0 * 1048576.0 / 2e9;
        assert!((all_reduce.seconds().unwrap() - expected).abs() < 1e-12);
        assert!((all_reduce.times(expected * 3e6).unwrap() - 3.0).abs() < 1e-9);
        let reduce = bound(at_four(Collective::Reduce { op: SUM, root: 0 }, 1 << 20));
        assert!((reduce.seconds().unwrap() - 16.0 * 1048576.0 / 1e9).abs() < 1e-12);
        let gather = bound(at_four(Collective::AllGather, 1 << 18));
        assert!((gather.seconds().unwrap() - 12.0 * 1048576.0 / 2e9).abs() < 1e-12);
        // A copy-only collective needs no fold rate; a fold it needs and lacks gives none.
        let unmeasured_fold = Rates {
            copy: 2e9,
            fold: 0.0,
        };
        let copy_only = Bound {
            rates: unmeasured_fold,
            traffic: at_four(Collective::Broadcast { root: 0 }, 1024),
        };
        assert!(copy_only.seconds().is_some());
        let folds = Bound {
            rates: unmeasured_fold,
            traffic: at_four(Collective::AllReduce(SUM), 1024),
        };
        assert_eq!(folds.seconds(), None);
        assert_eq!(bound(MinTraffic::default()).seconds(), None);
    }

    #[test]
    fn repetitions_fill_the_budget_up_to_a_millisecond_each_never_under_one_pass() {
        // Plenty of time, short passes: repetitions of a millisecond (100 passes of 10 µs).
        assert_eq!(passes_per_repetition(1.0, 10e-6), 100);
        // Eight passes' time for each of the six repetitions: eight passes each.
        let pass = 1.0 / 65536.0;
        assert_eq!(
            passes_per_repetition(2.0 * REPS as f64 * 8.0 * pass, pass),
            8
        );
        // Long passes, or no time left: one each.
        assert_eq!(passes_per_repetition(10.0, 0.03), 1);
        assert_eq!(passes_per_repetition(0.0, 0.03), 1);
    }

    #[test]
    fn shares_are_equal_and_cover_the_buffers() {
        let mut src = vec![0.0_f32; 10];
        let mut dst = vec![0.0_f32; 10];
        let cut = shares(&mut src, &mut dst, 3);
        let lens: Vec<(usize, usize)> = cut.iter().map(|(s, d)| (s.len(), d.len())).collect();
        assert_eq!(lens, [(4, 4), (3, 3), (3, 3)]);
        let mut one = vec![0.0_f32; 1];
        let mut other = vec![0.0_f32; 1];
        assert_eq!(shares(&mut one, &mut other, 4).len(), 1);
    }

    #[test]
    fn the_meter_measures_positive_rates_with_several_threads_and_leaves_the_values_exact() {
        let traffic = at_four(Collective::AllReduce(SUM), 1 << 16);
        for threads in [1, 2, 3] {
            let bound = Meter::new(threads)
                .measure(4 << 20, traffic, 10)
                .expect("measured");
            assert!(
                bound.rates.copy > 0.0 && bound.rates.fold > 0.0,
                "{bound:?}"
            );
            assert!(bound.seconds().unwrap() > 0.0);
        }
        assert_eq!(
            Meter::new(2).measure(1 << 20, MinTraffic::default(), 10),
            None
        );
        // The folds of every share ran: after a touch, a copy and two folds, all threes.
        let mut src = vec![0.0_f32; 1001];
        let mut dst = vec![0.0_f32; 1001];
        on_crew(shares(&mut src, &mut dst, 3), |crew| {
            crew.run(Job::Touch);
            crew.run(Job::Copy(1));
            crew.run(Job::Fold(2));
        })
        .unwrap();
        assert!(dst.iter().all(|&value| value == 3.0));
    }
}
