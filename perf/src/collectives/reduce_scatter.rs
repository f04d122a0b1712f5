//! Reduce-scatter: a requested size of `n` elements is `m = n/W` per rank (rounded down); every
//! rank sends `W·m` and receives its block of `m`; busbw = algbw · (W-1)/W, algbw over `W·m`.

use super::{Counts, PerfCollective};
use ruccl_core::{Collective, ReduceOperation};

/// nccl-tests' `reduce_scatter_perf`.
pub const REDUCE_SCATTER: PerfCollective = PerfCollective {
    command: "reduce-scatter-perf",
    nccl_name: "reduce_scatter",
    kind: Collective::ReduceScatter(ReduceOperation::Sum),
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
