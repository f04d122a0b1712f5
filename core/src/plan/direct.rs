//! [`Algorithm::Direct`](crate::Algorithm::Direct): every destination receives from every source
//! at once — in one step or two, the fewest of any algorithm.
//!
//! **One step** (every collective):
//!
//! - **All-reduce**: every rank sends its whole tensor to every other; each folds all `W` values
//!   in rank order (combining). Every rank builds the same fold, so outputs agree bitwise.
//! - **Reduce-scatter**: every rank sends block `q` to rank `q` (combining).
//! - **All-gather**: every rank sends its block to every other (overwriting).
//! - **Broadcast**: the root sends its tensor to every other rank (overwriting).
//! - **Reduce**: every other rank sends its tensor to the root, which folds them (combining).
//! - **Gather**: every other rank sends its block to the root (overwriting).
//! - **Scatter**: the root sends block `q` to rank `q` (overwriting).
//! - **All-to-all**: rank `j` sends its block `q` to rank `q`, landing as block `j` (overwriting,
//!   in place: every source another rank's block lands on is set aside first).
//!
//! **Two steps** (all-reduce, broadcast, reduce), over `W` balanced chunks of the tensor
//! ([`balanced_ranges`]), so that no rank moves the whole tensor `W-1` times:
//!
//! - **All-reduce** = a direct reduce-scatter (every rank sends chunk `q` to rank `q`,
//!   combining), then a direct all-gather (every rank sends its reduced chunk to every other,
//!   overwriting): every rank moves `n + (W-2)·⌈n/W⌉` elements against the one step's `(W-1)·n`.
//!   Chunk `q` is folded once, on rank `q`, over all `W` values in rank order — the tree the one
//!   step builds on every rank — so both variants give the same bits.
//! - **Broadcast** = the root scatters chunk `q` to the rank that owns it, then every rank sends
//!   its chunk to every rank but the root (overwriting).
//! - **Reduce** = a direct reduce-scatter, then every rank sends its reduced chunk to the root.
//!
//! For broadcast and reduce the root owns the last (smallest) chunk, as the root moves its own
//! chunk `W-1` times. Which variant [`Plan::new`](crate::Plan::new) builds is decided in
//! `mod.rs`: of those within [`TRAFFIC_BOUND`](crate::TRAFFIC_BOUND), the one with the least
//! time under the link model.

use super::{Step, Transfer, block};
use crate::{Collective, balanced_ranges};
use std::ops::Range;

/// Direct's schedules of `collective` on `world` ranks with inputs of `input_len` elements (the
/// layout was validated), fewest steps first: the one-step schedule, then the two-step one where
/// the collective has it. No step at all for one rank or empty tensors.
pub(super) fn variants(collective: Collective, world: usize, input_len: usize) -> Vec<Vec<Step>> {
    let one = one_step(collective, world, input_len);
    let two = match collective {
        Collective::AllReduce(_) => Some(all_reduce(world, input_len)),
        Collective::Broadcast { root } => Some(broadcast(world, root, input_len)),
        Collective::Reduce { root, .. } => Some(reduce(world, root, input_len)),
        _ => None,
    };
    std::iter::once(one).chain(two).collect()
}

/// Every ordered pair of distinct ranks.
fn pairs(world: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..world).flat_map(move |from| {
        (0..world)
            .filter(move |&to| to != from)
            .map(move |to| (from, to))
    })
}

/// The one-step schedule.
fn one_step(collective: Collective, world: usize, input_len: usize) -> Vec<Step> {
    let pairs = pairs(world);
    let others = |root: usize| (0..world).filter(move |&rank| rank != root);
    let step = match collective {
        Collective::AllReduce(_) => Step::of(
            true,
            pairs.map(|(from, to)| Transfer::new(from, to, 0..input_len)),
        ),
        Collective::ReduceScatter(_) => Step::of(
            true,
            pairs.map(|(from, to)| Transfer::new(from, to, block(to, input_len / world))),
        ),
        Collective::AllGather => Step::of(
            false,
            pairs.map(|(from, to)| Transfer::new(from, to, block(from, input_len))),
        ),
        Collective::Broadcast { root } => Step::of(
            false,
            others(root).map(|to| Transfer::new(root, to, 0..input_len)),
        ),
        Collective::Reduce { root, .. } => Step::of(
            true,
            others(root).map(|from| Transfer::new(from, root, 0..input_len)),
        ),
        Collective::Gather { root } => Step::of(
            false,
            others(root).map(|from| Transfer::new(from, root, block(from, input_len))),
        ),
        Collective::Scatter { root } => Step::of(
            false,
            others(root).map(|to| Transfer::new(root, to, block(to, input_len / world))),
        ),
        Collective::AllToAll => {
            let size = input_len / world;
            Step::of(
                false,
                pairs.map(|(from, to)| Transfer {
                    from,
                    to,
                    range: block(to, size),
                    at: from * size,
                }),
            )
        }
    };
    step.into_iter().collect()
}

/// Rank `rank`'s chunk when the root owns the last one: rank `root + 1 + v` owns chunk `v`.
fn rooted_chunk(chunks: &[Range<usize>], world: usize, root: usize, rank: usize) -> Range<usize> {
    chunks[(rank + world - root - 1) % world].clone()
}

/// Every rank sends `chunk(q)` to rank `q`, which folds all `W` values in rank order.
fn reduce_scatter(world: usize, chunk: impl Fn(usize) -> Range<usize>) -> Option<Step> {
    Step::of(
        true,
        pairs(world).map(|(from, to)| Transfer::new(from, to, chunk(to))),
    )
}

/// Reduce-scatter over balanced chunks (rank `q` owns chunk `q`), then all-gather of them.
fn all_reduce(world: usize, input_len: usize) -> Vec<Step> {
    let chunks = balanced_ranges(input_len, world);
    let gather = Step::of(
        false,
        pairs(world).map(|(from, to)| Transfer::new(from, to, chunks[from].clone())),
    );
    reduce_scatter(world, |rank| chunks[rank].clone())
        .into_iter()
        .chain(gather)
        .collect()
}

/// The root scatters every rank its chunk, then every rank passes its chunk to every rank but
/// the root, which holds them all.
fn broadcast(world: usize, root: usize, input_len: usize) -> Vec<Step> {
    let chunks = balanced_ranges(input_len, world);
    let chunk = |rank| rooted_chunk(&chunks, world, root, rank);
    let scatter = Step::of(
        false,
        (0..world)
            .filter(|&to| to != root)
            .map(|to| Transfer::new(root, to, chunk(to))),
    );
    let gather = Step::of(
        false,
        pairs(world)
            .filter(|&(_, to)| to != root)
            .map(|(from, to)| Transfer::new(from, to, chunk(from))),
    );
    scatter.into_iter().chain(gather).collect()
}

/// Reduce-scatter over balanced chunks, then every rank sends its reduced chunk to the root.
fn reduce(world: usize, root: usize, input_len: usize) -> Vec<Step> {
    let chunks = balanced_ranges(input_len, world);
    let chunk = |rank| rooted_chunk(&chunks, world, root, rank);
    let gather = Step::of(
        false,
        (0..world)
            .filter(|&from| from != root)
            .map(|from| Transfer::new(from, root, chunk(from))),
    );
    reduce_scatter(world, chunk)
        .into_iter()
        .chain(gather)
        .collect()
}
