//! All-gather: a requested size of `n` elements is `m = n/W` per rank (rounded down); every rank
//! sends `m` and receives all `W·m`; busbw = algbw · (W-1)/W, algbw over `W·m`.

use super::{Counts, PerfCollective};
use ruccl_core::Collective;

/// nccl-tests' `all_gather_perf`.
pub const ALL_GATHER: PerfCollective = PerfCollective {
    command: "all-gather-perf",
    nccl_name: "all_gather",
    kind: Collective::AllGather,
    counts,
};

fn counts(count: usize, world: usize) -> Counts {
    let block = count / world.max(1);
    Counts {
        send: block,
        recv: block * world,
        param: block,
        root_only: false,
    }
}
