//! Bounded memory: what a measurement will take, estimated before anything is allocated, against
//! what the machine has (`MemAvailable` of `/proc/meminfo`, or `--memory-limit`). A sweep whose
//! largest size does not fit has its `maxBytes` reduced with a printed note, as nccl-tests does;
//! one whose smallest size does not fit, and a scenario that does not fit, are refused with both
//! figures.

use crate::collectives::Counts;
use std::fmt;

/// Host copies of the larger of a rank's input and output that a measurement on the simulated
/// device can hold at once: the pattern it is made from, the input (in place: also the working
/// buffer), a working buffer (out of place), the output or a step's snapshot, the download of
/// the check, and an allocation the device keeps for reuse (its pool keeps what the last
/// generations dropped, at most `ruccl_sim::DEFAULT_POOL_BYTES` in all).
pub const SIM_COPIES: u64 = 6;

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
    /// `--memory-limit`.
    Flag,
    /// Neither could be read: no limit is known.
    Unknown,
}

impl Budget {
    /// `limit` if given, else what `/proc/meminfo` says is available, else no limit.
    pub fn new(limit: Option<u64>) -> Self {
        if let Some(bytes) = limit {
            return Self {
                bytes,
                source: BudgetSource::Flag,
            };
        }
        match mem_available() {
            Some(bytes) => Self {
                bytes,
                source: BudgetSource::MemAvailable,
            },
            None => Self {
                bytes: u64::MAX,
                source: BudgetSource::Unknown,
            },
        }
    }

    /// What a measurement may take: the budget less a reserve (a quarter of it, at most 1 GiB,
    /// at least 256 MiB).
    pub fn usable(&self) -> u64 {
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
            BudgetSource::Unknown => f.write_str("an unknown amount available"),
        }
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn parse_mem_available(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|line| line.starts_with("MemAvailable:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let value: u64 = fields.next()?.parse().ok()?;
    let unit = match fields.next() {
        Some("kB") | Some("KB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    value.checked_mul(unit)
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
    fn mem_available_is_read_in_kibibytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2 << 20));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
    }

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
