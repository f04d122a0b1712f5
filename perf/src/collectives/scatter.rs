//! Scatter: a requested size of `n` elements is `m = n/W` per rank (rounded down); every rank
//! passes `W·m` (only the root's are read) and receives its block of `m`; busbw = algbw ·
//! (W-1)/W (nccl-tests' `ScatterGetBw`), algbw over `W·m`.

use super::{Counts, PerfCollective};
use ruccl_core::Collective;

/// nccl-tests' `scatter_perf`.
pub const SCATTER: PerfCollective = PerfCollective {
    command: "scatter-perf",
    nccl_name: "scatter",
    kind: Collective::Scatter { root: 0 },
    counts,
};

fn counts(count: usize, world: usize) -> Counts {
    let block = count / world.max(1);
    Counts {
        send: block * world,
        recv: block,
        param: block,
        root_only: false,
    }
}
