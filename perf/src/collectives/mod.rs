//! The collectives the tools measure, each a small plug-in as in nccl-tests (`all_reduce.cu`,
//! `all_gather.cu`, …): one [`PerfCollective`] per file, filling in what differs — its names, how
//! a requested size splits into per-rank send and receive counts, whether it takes a reduce
//! operation or a root. Everything else (the sweep, the check, the table) is shared.
//!
//! | file                | collective       | busbw factor | send / recv per rank        |
//! |---------------------|------------------|--------------|-----------------------------|
//! | `all_reduce.rs`     | all-reduce       | `2(W-1)/W`   | `n` / `n`                   |
//! | `reduce_scatter.rs` | reduce-scatter   | `(W-1)/W`    | `W·m` / `m`, `m = n/W`      |
//! | `all_gather.rs`     | all-gather       | `(W-1)/W`    | `m` / `W·m`, `m = n/W`      |
//! | `broadcast.rs`      | broadcast        | `1`          | `n` / `n`                   |
//! | `reduce.rs`         | reduce           | `1`          | `n` / `n` at the root, else 0 |
//! | `gather.rs`         | gather           | `(W-1)/W`    | `m` / `W·m` at the root, else 0 |
//! | `scatter.rs`        | scatter          | `(W-1)/W`    | `W·m` / `m`, `m = n/W`      |
//! | `all_to_all.rs`     | all-to-all       | `(W-1)/W`    | `W·m` / `W·m`, `m = n/W`    |
//!
//! `n` is the requested size in elements (nccl-tests' `-b`/`-e`), rounded down as nccl-tests
//! rounds it. The bus factors are the core's ([`Collective::bus_factor`]).

mod all_gather;
mod all_reduce;
mod all_to_all;
mod broadcast;
mod gather;
mod reduce;
mod reduce_scatter;
mod scatter;

pub use all_gather::ALL_GATHER;
pub use all_reduce::ALL_REDUCE;
pub use all_to_all::ALL_TO_ALL;
pub use broadcast::BROADCAST;
pub use gather::GATHER;
pub use reduce::REDUCE;
pub use reduce_scatter::REDUCE_SCATTER;
pub use scatter::SCATTER;

use ruccl_core::{Collective, ReduceOperation};
use std::fmt;
use std::str::FromStr;

/// Every collective the tools measure, in the order their subcommands are listed.
pub const ALL: [&PerfCollective; 8] = [
    &ALL_REDUCE,
    &REDUCE_SCATTER,
    &ALL_GATHER,
    &BROADCAST,
    &REDUCE,
    &GATHER,
    &SCATTER,
    &ALL_TO_ALL,
];

/// Per-rank element counts of one measurement, as nccl-tests' `getCollByteCount` makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Elements of every rank's input.
    pub send: usize,
    /// Elements of every rank's output.
    pub recv: usize,
    /// The table's `count` column: the count the collective call takes (nccl-tests'
    /// `paramcount`: the per-rank send count of an all-gather, the per-rank receive count of a
    /// reduce-scatter, `n` otherwise).
    pub param: usize,
    /// Only the root receives `recv` elements; every other rank receives none (reduce, gather).
    pub root_only: bool,
}

impl Counts {
    /// Whether every rank's output can be fed back as its next input (same length everywhere).
    pub fn feeds_back(&self) -> bool {
        self.send == self.recv && !self.root_only
    }

    /// Elements rank `rank`'s output holds, with the root at `root`.
    pub fn recv_at(&self, rank: usize, root: usize) -> usize {
        if self.root_only && rank != root {
            0
        } else {
            self.recv
        }
    }
}

/// One collective as the tools measure it: the plug-in each file fills in.
#[derive(Debug)]
pub struct PerfCollective {
    /// The subcommand: `all-reduce-perf`.
    pub command: &'static str,
    /// nccl-tests' name, `all_reduce` (its binary is `all_reduce_perf`).
    pub nccl_name: &'static str,
    /// The collective with a stand-in operation and root ([`PerfCollective::collective`] sets
    /// them).
    pub kind: Collective,
    /// The per-rank counts for a requested `count` of elements over `world` ranks.
    pub counts: fn(count: usize, world: usize) -> Counts,
}

impl PerfCollective {
    /// Whether the collective reduces (takes `-o`).
    pub fn reduces(&self) -> bool {
        self.kind.operation().is_some()
    }

    /// Whether the collective has a root (takes `-r`).
    pub fn rooted(&self) -> bool {
        self.kind.root().is_some()
    }

    /// The collective with `operation` (reducing ones) and `root` (rooted ones).
    pub fn collective(&self, operation: ReduceOperation, root: usize) -> Collective {
        self.kind.with_operation(operation).with_root(root)
    }

    /// The collective `collective` is an instance of.
    pub fn of(collective: Collective) -> Option<&'static PerfCollective> {
        ALL.into_iter().find(|candidate| {
            std::mem::discriminant(&candidate.kind) == std::mem::discriminant(&collective)
        })
    }
}

impl fmt::Display for PerfCollective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name)
    }
}

/// A name that is no collective.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown collective `{0}`: expected all-reduce, reduce-scatter, all-gather, broadcast, reduce, gather, scatter or alltoall (nccl-tests' all_reduce etc. work too)"
)]
pub struct ParseCollectiveError(pub String);

/// A collective named on the command line (`run --collective`).
#[derive(Clone, Copy, Debug)]
pub struct CollectiveName(pub &'static PerfCollective);

impl PartialEq for CollectiveName {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl FromStr for CollectiveName {
    type Err = ParseCollectiveError;

    /// Accepts `all-reduce`, `all_reduce`, `allreduce`, `all-reduce-perf`, `all_reduce_perf`
    /// (and likewise for the others), in any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let key: String = text
            .trim()
            .to_ascii_lowercase()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let key = key.strip_suffix("perf").unwrap_or(&key);
        ALL.into_iter()
            .find(|candidate| candidate.nccl_name.replace('_', "") == key)
            .map(CollectiveName)
            .ok_or_else(|| ParseCollectiveError(text.to_owned()))
    }
}
