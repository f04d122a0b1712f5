//! Reduce: every rank sends `n` elements and the root receives their reduction (`n`), the others
//! nothing; busbw = algbw (nccl-tests' `ReduceGetBw`).

use super::{Counts, PerfCollective};
use ruccl_core::{Collective, ReduceOperation};

/// nccl-tests' `reduce_perf`.
pub const REDUCE: PerfCollective = PerfCollective {
    command: "reduce-perf",
    nccl_name: "reduce",
    kind: Collective::Reduce {
        op: ReduceOperation::Sum,
        root: 0,
    },
    counts,
};

fn counts(count: usize, _world: usize) -> Counts {
    Counts {
        send: count,
        recv: count,
        param: count,
        root_only: true,
    }
}
