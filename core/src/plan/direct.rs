//! [`Algorithm::Direct`](crate::Algorithm::Direct): one step in which every destination receives
//! from every source at once — the fewest steps, the most bytes per rank.
//!
//! - **All-reduce**: every rank sends its whole tensor to every other; each folds all `W` values
//!   in rank order (combining). Every rank builds the same fold, so outputs agree bitwise.
//! - **Reduce-scatter**: every rank sends block `q` to rank `q` (combining).
//! - **All-gather**: every rank sends its block to every other (overwriting).
//! - **Broadcast**: the root sends its tensor to every other rank (overwriting).

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
    let step = match collective {
        Collective::AllReduce(_) => Step::of(
            true,
            pairs.map(|(from, to)| Transfer {
                from,
                to,
                range: 0..input_len,
            }),
        ),
        Collective::ReduceScatter(_) => Step::of(
            true,
            pairs.map(|(from, to)| Transfer {
                from,
                to,
                range: block(to, input_len / world),
            }),
        ),
        Collective::AllGather => Step::of(
            false,
            pairs.map(|(from, to)| Transfer {
                from,
                to,
                range: block(from, input_len),
            }),
        ),
        Collective::Broadcast { root } => Step::of(
            false,
            (0..world).filter(|&to| to != root).map(|to| Transfer {
                from: root,
                to,
                range: 0..input_len,
            }),
        ),
    };
    step.into_iter().collect()
}
