//! All-to-all: a requested size of `n` elements is `m = n/W` per block (rounded down); every
//! rank sends `W·m` and receives `W·m` (block `j` from rank `j`); busbw = algbw · (W-1)/W
//! (nccl-tests' `AlltoAllGetBw`).

use super::{Counts, PerfCollective};
use ruccl_core::Collective;

/// nccl-tests' `alltoall_perf`.
pub const ALL_TO_ALL: PerfCollective = PerfCollective {
    command: "alltoall-perf",
    nccl_name: "alltoall",
    kind: Collective::AllToAll,
    counts,
};

fn counts(count: usize, world: usize) -> Counts {
    let block = count / world.max(1);
    Counts {
        send: block * world,
        recv: block * world,
        param: block,
        root_only: false,
    }
}
