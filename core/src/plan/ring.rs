//! [`Algorithm::Ring`](crate::Algorithm::Ring): every transfer goes from rank `r` to rank
//! `(r + 1) mod W`, one block per rank per step — the bandwidth-optimal schedule.
//!
//! - **Reduce-scatter** (`W-1` combining steps): in step `s` rank `r` sends block
//!   `(r - 1 - s) mod W`, so block `b` starts at rank `b + 1`, travels once around the ring
//!   gathering one contribution per hop, and ends, complete, at rank `b`.
//! - **All-gather** (`W-1` overwriting steps): in step `s` rank `r` sends block `(r - s) mod W`,
//!   passing each rank's block once around the ring.
//! - **All-reduce** = reduce-scatter over `W` balanced chunks of the tensor, then all-gather of
//!   the reduced chunks: `2(W-1)` steps, every rank sends `2(W-1)/W · n` elements.
//! - **Broadcast** = the root scatters one balanced chunk to each rank (one step), then a ring
//!   all-gather of the chunks (`W-1` steps), skipping the root, which has them all.
//! - **Reduce** = a ring reduce-scatter over `W` balanced chunks, then every rank sends its
//!   reduced chunk to the root (one overwriting step): `W` steps.
//! - **Gather** (`W-1` overwriting steps): ranks numbered from the root, rank `v` passes on, in
//!   step `s`, block `v - s` towards the root, which every block reaches after `W - v` hops.
//! - **Scatter** (`W-1` overwriting steps): the reverse — the root sends the farthest rank's
//!   block first and every rank relays the blocks meant for ranks beyond it.
//! - **All-to-all** has no ring plan ([`Plan::new`](crate::Plan::new) refuses it).

use super::{Step, Transfer, block};
use crate::{Collective, balanced_ranges};
use std::ops::Range;

/// The ring schedule of `collective` on `world` ranks with inputs of `input_len` elements (the
/// layout was validated).
pub(super) fn steps(collective: Collective, world: usize, input_len: usize) -> Vec<Step> {
    match collective {
        Collective::AllReduce(_) => {
            let chunks = balanced_ranges(input_len, world);
            let mut steps = reduce_scatter(world, |chunk| chunks[chunk].clone());
            // After the reduce-scatter, rank r holds chunk r complete: the all-gather passes it on.
            steps.extend(all_gather(world, |chunk| chunks[chunk].clone()));
            steps
        }
        Collective::ReduceScatter(_) => {
            let size = input_len / world;
            reduce_scatter(world, |index| block(index, size))
        }
        Collective::AllGather => all_gather(world, |index| block(index, input_len)),
        Collective::Broadcast { root } => broadcast(world, root, input_len),
        Collective::Reduce { root, .. } => {
            let chunks = balanced_ranges(input_len, world);
            let mut steps = reduce_scatter(world, |chunk| chunks[chunk].clone());
            steps.extend(Step::of(
                false,
                (0..world)
                    .filter(|&rank| rank != root)
                    .map(|rank| Transfer::new(rank, root, chunks[rank].clone())),
            ));
            steps
        }
        Collective::Gather { root } => gather(world, root, input_len),
        Collective::Scatter { root } => scatter(world, root, input_len / world),
        // Refused before any step is built (`Plan::built`).
        Collective::AllToAll => Vec::new(),
    }
}

/// Blocks of `size` hop towards the root: in step `s` relative rank `v ≥ 1` sends block `v - s`
/// (relative), while there is one, to `v + 1`; the root is relative rank 0 (= `W`).
fn gather(world: usize, root: usize, size: usize) -> Vec<Step> {
    let absolute = |relative: usize| (root + relative) % world;
    (0..world.saturating_sub(1))
        .filter_map(|step| {
            Step::of(
                false,
                (1..world)
                    .filter(|&relative| relative > step)
                    .map(|relative| {
                        let owner = absolute(relative - step);
                        Transfer::new(
                            absolute(relative),
                            absolute(relative + 1),
                            block(owner, size),
                        )
                    }),
            )
        })
        .collect()
}

/// The root's blocks of `size` hop outwards: in step `s` relative rank `v` sends block
/// `W - 1 + v - s` (relative) to `v + 1` when that block is meant for a rank beyond `v`.
fn scatter(world: usize, root: usize, size: usize) -> Vec<Step> {
    let absolute = |relative: usize| (root + relative) % world;
    (0..world.saturating_sub(1))
        .filter_map(|step| {
            Step::of(
                false,
                (0..world - 1).filter_map(|relative| {
                    let target = (world - 1 + relative).checked_sub(step)?;
                    (relative < target && target < world).then(|| {
                        Transfer::new(
                            absolute(relative),
                            absolute(relative + 1),
                            block(absolute(target), size),
                        )
                    })
                }),
            )
        })
        .collect()
}

/// `W-1` combining steps after which rank `b` holds the reduction of chunk `b`.
fn reduce_scatter(world: usize, chunk: impl Fn(usize) -> Range<usize>) -> Vec<Step> {
    (0..world.saturating_sub(1))
        .filter_map(|step| {
            Step::of(
                true,
                (0..world).map(|rank| {
                    Transfer::new(
                        rank,
                        (rank + 1) % world,
                        chunk((rank + 2 * world - 1 - step) % world),
                    )
                }),
            )
        })
        .collect()
}

/// `W-1` overwriting steps after which every rank holds chunk `b` of rank `b`.
fn all_gather(world: usize, chunk: impl Fn(usize) -> Range<usize>) -> Vec<Step> {
    (0..world.saturating_sub(1))
        .filter_map(|step| {
            Step::of(
                false,
                (0..world).map(|rank| {
                    Transfer::new(
                        rank,
                        (rank + 1) % world,
                        chunk((rank + world - step) % world),
                    )
                }),
            )
        })
        .collect()
}

/// Scatter from the root, then a ring all-gather that never writes to the root. Chunks are
/// numbered by rank relative to the root: chunk `v` goes to rank `(root + v) mod W`.
fn broadcast(world: usize, root: usize, input_len: usize) -> Vec<Step> {
    let chunks = balanced_ranges(input_len, world);
    let absolute = |relative: usize| (root + relative) % world;
    let scatter = Step::of(
        false,
        (1..world)
            .map(|relative| Transfer::new(root, absolute(relative), chunks[relative].clone())),
    );
    let gather = (0..world.saturating_sub(1)).filter_map(|step| {
        Step::of(
            false,
            // The rank at relative position W-1 would send to the root: skipped.
            (0..world - 1).map(|relative| {
                Transfer::new(
                    absolute(relative),
                    absolute(relative + 1),
                    chunks[(relative + world - step) % world].clone(),
                )
            }),
        )
    });
    scatter.into_iter().chain(gather).collect()
}
