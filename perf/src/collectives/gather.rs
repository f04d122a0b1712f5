//! Gather: a requested size of `n` elements is `m = n/W` per rank (rounded down); every rank
//! sends `m` and the root receives all `W·m`, the others nothing; busbw = algbw · (W-1)/W
//! (nccl-tests' `GatherGetBw`), algbw over `W·m`.

use super::{Counts, PerfCollective};
use ruccl_core::Collective;

/// nccl-tests' `gather_perf`.
pub const GATHER: PerfCollective = PerfCollective {
    command: "gather-perf",
    nccl_name: "gather",
    kind: Collective::Gather { root: 0 },
    counts,
};

fn counts(count: usize, world: usize) -> Counts {
    let block = count / world.max(1);
    Counts {
        send: block,
        recv: block * world,
        param: block,
        root_only: true,
    }
}
