//! All-reduce: every rank sends `n` elements and receives their reduction, `n` elements;
//! busbw = algbw · 2(W-1)/W.

use super::{Counts, PerfCollective};
use ruccl_core::{Collective, ReduceOperation};

/// nccl-tests' `all_reduce_perf`.
pub const ALL_REDUCE: PerfCollective = PerfCollective {
    command: "all-reduce-perf",
    nccl_name: "all_reduce",
    kind: Collective::AllReduce(ReduceOperation::Sum),
    counts,
};

fn counts(count: usize, _world: usize) -> Counts {
    Counts {
        send: count,
        recv: count,
        param: count,
        root_only: false,
    }
}
