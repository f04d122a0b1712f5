//! Bounded memory: what a measurement will take, estimated before anything is allocated, against
//! what the machine has (`MemAvailable` of `/proc/meminfo`, or `--memory-limit`). A sweep whose
//! largest size does not fit has its `maxBytes` reduced with a printed note, as nccl-tests does;
//! one whose smallest size does not fit, and a scenario that does not fit, are refused with both
//! figures.

use crate::collectives::Counts;
use ruccl_host::mem_available;
use std::fmt;

/// Host copies of the larger of a rank's input and output that a measurement on the simulated
/// device can hold at once: the pattern it is made from, the input (in place: also the working
/// buffer), a working buffer (out of place), the output or a step's snapshot, the download of
/// the check, and an allocation the device keeps for reuse (its pool keeps what the last
/// generations dropped, at most `ruccl_sim::DEFAULT_POOL_BYTES` in all).
pub const SIM_COPIES: u64 = 6;

/// Host copies of the larger of a rank's buffers per rank that the host-memory bound
/// ([`crate::membound`]) holds right before a row: its source and its destination, together
/// the row's working set (`W` ranks' buffers). They are freed before the row's measurement
/// allocates anything, so they share the memory only with what the device's pool keeps (one
/// copy, counted in [`SIM_COPIES`]).
pub const BOUND_COPIES: u64 = 1;

/// What a row on the simulated device can hold at once, the bound's buffers counted: the
/// larger of the measurement's [`SIM_COPIES`] and the bound's [`BOUND_COPIES`] beside the
/// pool's copy.
pub const SIM_ROW_COPIES: u64 = if SIM_COPIES > BOUND_COPIES + 1 {
    SIM_COPIES
} else {
    BOUND_COPIES + 1
};

// The bound's buffers and the pool's copy fit in what a row is allowed.
const _: () = assert!(SIM_ROW_COPIES >= SIM_COPIES && SIM_ROW_COPIES > BOUND_COPIES);

/// Memory the tools keep for themselves and everything else, whatever the estimate.
const RESERVE: u64 = 256 << 20;

/// Bytes of plan, steps and ledger per pair of ranks (a direct plan has `W²` transfers).
const PER_RANK_PAIR: u64 = 512;

/// Memory a command may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from.
    pub source: BudgetSource,
}

/// Where a [`Budget`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetSource {
    /// `MemAvailable` in `/proc/meminfo`.
    MemAvailable,
    /// `--memory-limit`, below what the machine has.
    Flag,
    /// The address-space limit (`ulimit -v`, `RLIMIT_AS`) less what the process maps already
    /// and its rank threads' stacks.
    AddressSpace,
    /// Neither could be read: no limit is known.
    Unknown,
}

impl Budget {
    /// What `world` rank threads may use: the least of what `/proc/meminfo` says is available,
    /// the address space `ulimit -v` leaves ([`address_space_left`]) and `limit`
    /// (`--memory-limit`, which can only lower the others); no limit if none is known.
    pub fn new(limit: Option<u64>, world: usize) -> Self {
        let mut budget = match mem_available() {
            Some(bytes) => Self {
                bytes,
                source: BudgetSource::MemAvailable,
            },
            None => Self {
                bytes: u64::MAX,
                source: BudgetSource::Unknown,
            },
        };
        if let Some(bytes) = address_space_left(world)
            && bytes < budget.bytes
        {
            budget = Self {
                bytes,
                source: BudgetSource::AddressSpace,
            };
        }
        if let Some(bytes) = limit
            && bytes < budget.bytes
        {
            budget = Self {
                bytes,
                source: BudgetSource::Flag,
            };
        }
        budget
    }

    /// What a measurement may take: the budget less a reserve (a quarter of it, at most 1 GiB,
    /// at least 256 MiB; for an address-space budget, the reserve it was computed with).
    pub fn usable(&self) -> u64 {
        if self.source == BudgetSource::AddressSpace {
            // The reserve is taken already (see `address_space_left`).
            return self.bytes;
        }
        let reserve = (self.bytes / 4).clamp(RESERVE, 1 << 30);
        self.bytes.saturating_sub(reserve)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            BudgetSource::MemAvailable => write!(
                f,
                "{} available (MemAvailable in /proc/meminfo)",
                human(self.bytes)
            ),
            BudgetSource::Flag => write!(f, "{} allowed by --memory-limit", human(self.bytes)),
            BudgetSource::AddressSpace => write!(
                f,
                "{} of address space left by the limit (ulimit -v)",
                human(self.bytes)
            ),
            BudgetSource::Unknown => f.write_str("an unknown amount available"),
        }
    }
}

/// Address space a thread takes besides its stack: glibc's per-thread malloc arena
/// reservations, thread-local storage, guard pages (generous: running out aborts the process).
const PER_THREAD: u64 = 1 << 20;

/// Address space the process needs besides its measurements' buffers and its rank threads: the
/// simulated device's step threads, the progress bar, allocator slack.
const ADDRESS_RESERVE: u64 = 96 << 20;

/// The stack a rank thread gets: `RUST_MIN_STACK`, else Rust's default of 2 MiB.
pub fn thread_stack() -> u64 {
    std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(2 << 20)
}

/// Address space `world` rank threads leave for buffers under the address-space limit
/// (`ulimit -v`, "Max address space" in `/proc/self/limits`): the limit less what the process
/// maps now (`VmSize`), less each thread's stack and a megabyte (thread-local storage, guard
/// pages), less a reserve; `None` when there is no limit (or it cannot be read). Zero when even the threads do not fit: see
/// [`check_threads`].
pub fn address_space_left(world: usize) -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let limit = parse_address_limit(&limits)?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let mapped = parse_status_kib(&status, "VmSize:").unwrap_or(0);
    let threads = (world as u64 + 4).saturating_mul(thread_stack().saturating_add(PER_THREAD));
    Some(
        limit
            .saturating_sub(mapped)
            .saturating_sub(threads)
            .saturating_sub(ADDRESS_RESERVE),
    )
}

/// Under an address-space limit (`ulimit -v`), keep the C library's allocator to one arena: by
/// default glibc reserves 64 MiB of address space per thread's arena, which would take the room
/// [`address_space_left`] counts on for buffers and leave an allocation to fail (which aborts
/// the process) mid-run. Called once by `main`, before any thread starts; nothing without a
/// limit, or off glibc.
pub fn limit_arenas_under_address_limit() {
    let limited = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| parse_address_limit(&text))
        .is_some();
    if limited {
        one_arena();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn one_arena() {
    /// glibc's `M_ARENA_MAX` parameter of `mallopt` (malloc.h).
    const M_ARENA_MAX: std::ffi::c_int = -8;
    unsafe extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    // SAFETY: `mallopt` is glibc's documented, thread-safe tuning call; it takes two integers
    // and touches no memory of ours. A failure (0) leaves the default arenas: nothing to undo.
    let _ = unsafe { mallopt(M_ARENA_MAX, 1) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn one_arena() {}

/// Refuse, before any thread starts, a world whose rank threads cannot all start: under an
/// address-space limit (`ulimit -v`) that leaves no room for their stacks (a process that runs
/// out of address space mid-run is aborted by the C library, not failed), or with a stack
/// (`RUST_MIN_STACK`) no thread can have.
pub fn check_threads(world: usize) -> Result<(), String> {
    let stack = thread_stack();
    if stack > 1 << 40 {
        return Err(format!(
            "RUST_MIN_STACK={stack} asks every rank thread for a stack larger than 1 TiB"
        ));
    }
    match address_space_left(world) {
        Some(0) => Err(format!(
            "the address-space limit (ulimit -v) leaves too little for {world} rank threads of {} stack each and the run's buffers; raise the limit or use fewer ranks",
            human(stack)
        )),
        _ => Ok(()),
    }
}

/// "Max address space" of a `/proc/self/limits` text (the soft limit), in bytes; `None` when
/// unlimited.
pub fn parse_address_limit(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|line| line.starts_with("Max address space"))?;
    let soft = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?;
    soft.parse().ok()
}

/// A `kB` field of a `/proc/self/status` text, in bytes.
fn parse_status_kib(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(key))?;
    let value: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    value.checked_mul(1024)
}

/// The estimated peak of one measurement: `world` ranks, each holding `copies` copies of the
/// larger of its input and output (`counts`, elements of `element_size` bytes), plus
/// `extra_per_rank` bytes (a batch of inputs made ahead), plus the plans and traffic records.
pub fn estimate(
    counts: Counts,
    element_size: usize,
    world: usize,
    copies: u64,
    extra_per_rank: u64,
) -> u64 {
    let larger = (counts.send.max(counts.recv) as u64).saturating_mul(element_size as u64);
    let world = world as u64;
    larger
        .saturating_mul(copies)
        .saturating_add(extra_per_rank)
        .saturating_mul(world)
        .saturating_add(world.saturating_mul(world).saturating_mul(PER_RANK_PAIR))
}

/// Bytes as people read them: `512 B`, `1.5 KiB`, `16.0 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_grows_with_the_size_and_the_world() {
        let counts = |n| Counts {
            send: n,
            recv: n,
            param: n,
            root_only: false,
        };
        let small = estimate(counts(1 << 20), 4, 4, SIM_COPIES, 0);
        assert!(small >= 4 * 5 * (4 << 20));
        assert!(estimate(counts(2 << 20), 4, 4, SIM_COPIES, 0) > small);
        assert!(estimate(counts(1 << 20), 4, 8, SIM_COPIES, 0) > small);
        // Never overflows.
        assert_eq!(estimate(counts(usize::MAX), 8, 1024, 5, 0), u64::MAX);
    }

    #[test]
    fn the_address_space_limit_is_read_from_proc_limits() {
        let unlimited = "Limit                     Soft Limit           Hard Limit           Units\nMax address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_address_limit(unlimited), None);
        let limited = "Max address space         409600000            unlimited            bytes\n";
        assert_eq!(parse_address_limit(limited), Some(409_600_000));
        assert_eq!(
            parse_status_kib("VmPeak:\t  10 kB\nVmSize:\t  4 kB\n", "VmSize:"),
            Some(4096)
        );
    }

    #[test]
    fn the_flag_only_lowers_the_budget() {
        let free = Budget::new(None, 4);
        let raised = Budget::new(Some(u64::MAX / 2), 4);
        assert!(raised.bytes <= free.bytes.max(1));
        assert_ne!(raised.source, BudgetSource::Flag);
        let lowered = Budget::new(Some(1 << 20), 4);
        assert_eq!(
            (lowered.bytes, lowered.source),
            (1 << 20, BudgetSource::Flag)
        );
    }

    #[test]
    fn the_usable_budget_keeps_a_reserve() {
        let budget = Budget {
            bytes: 8 << 30,
            source: BudgetSource::Flag,
        };
        assert_eq!(budget.usable(), 7 << 30);
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(16 << 30), "16.0 GiB");
    }
}
