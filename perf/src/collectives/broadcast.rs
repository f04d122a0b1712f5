//! Broadcast: every rank receives the root's `n` elements (the others' inputs are ignored);
//! busbw = algbw.

use super::{Counts, PerfCollective};
use ruccl_core::Collective;

/// nccl-tests' `broadcast_perf`.
pub const BROADCAST: PerfCollective = PerfCollective {
    command: "broadcast-perf",
    nccl_name: "broadcast",
    kind: Collective::Broadcast { root: 0 },
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
