//! [`Algorithm::Direct`](crate::Algorithm::Direct): one step in which every destination receives
//! from every source at once — the fewest steps, the most bytes per rank.
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

use super::{Step, Transfer, block};
use crate::Collective;

/// The one-step schedule of `collective` on `world` ranks with inputs of `input_len` elements
/// (the layout was validated); no step at all for one rank or empty tensors.
pub(super) fn steps(collective: Collective, world: usize, input_len: usize) -> Vec<Step> {
    let pairs = (0..world).flat_map(|from| {
        (0..world)
            .filter(move |&to| to != from)
            .map(move |to| (from, to))
    });
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
