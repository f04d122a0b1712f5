//! [`Algorithm::HalvingDoubling`](crate::Algorithm::HalvingDoubling) on a power-of-two world:
//! partners at distance `d` are `r` and `r XOR d`, and the tensor is cut into `W` chunks.
//!
//! - **Recursive halving** (reduce-scatter, combining): for `d = W/2, W/4, …, 1`, rank `r`
//!   holds partial sums of the `2d` chunks that share its bits above `d`; it keeps the half that
//!   contains chunk `r` and sends the other half to its partner. After `log2 W` steps, rank `r`
//!   holds chunk `r` complete.
//! - **Recursive doubling** (all-gather, overwriting): for `d = 1, 2, …, W/2`, rank `r` holds the
//!   `d` chunks that share its bits from `d` up, and sends them to its partner.
//! - **All-reduce** = halving then doubling over `W` balanced chunks of the tensor:
//!   `2·log2 W` steps, every rank sends `2(W-1)/W · n` elements (the bandwidth lower bound).
//! - **Broadcast** = a binomial scatter from the root (ranks numbered relative to it), then
//!   recursive doubling that skips every transfer whose receiver already holds the chunks.
//! - **Reduce** = recursive halving with ranks numbered relative to the root, then a binomial
//!   gather of the reduced chunks to it: `2·log2 W` steps.
//! - **Gather** = a binomial gather of the blocks: `log2 W` steps; **scatter** = a binomial
//!   scatter of the root's blocks: `log2 W` steps.
//! - **All-to-all** has no halving-doubling plan ([`Plan::new`](crate::Plan::new) refuses it).

use super::{Step, Transfer, block, span};
use crate::{Collective, balanced_ranges};
use std::ops::Range;

/// The halving-doubling schedule of `collective` on `world` ranks (a power of two) with inputs
/// of `input_len` elements (the layout was validated).
pub(super) fn steps(collective: Collective, world: usize, input_len: usize) -> Vec<Step> {
    match collective {
        Collective::AllReduce(_) => {
            let chunks = balanced_ranges(input_len, world);
            let mut steps = halving(world, &chunks, |rank| rank);
            steps.extend(doubling(world, &chunks, |rank| rank, |_, _| false));
            steps
        }
        Collective::ReduceScatter(_) => {
            let size = input_len / world;
            let blocks: Vec<Range<usize>> = (0..world).map(|index| block(index, size)).collect();
            halving(world, &blocks, |rank| rank)
        }
        Collective::Reduce { root, .. } => {
            // Relative rank v ends the halving with chunk v reduced; the gather brings them home.
            let chunks = balanced_ranges(input_len, world);
            let absolute = |relative: usize| (root + relative) % world;
            let mut steps = halving(world, &chunks, absolute);
            steps.extend(binomial_gather(world, absolute, |relative| {
                chunks[relative].clone()
            }));
            steps
        }
        Collective::Gather { root } => {
            let absolute = |relative: usize| (root + relative) % world;
            binomial_gather(world, absolute, |relative| {
                block(absolute(relative), input_len)
            })
        }
        Collective::Scatter { root } => {
            let absolute = |relative: usize| (root + relative) % world;
            let size = input_len / world;
            binomial_scatter(world, absolute, |relative| block(absolute(relative), size))
        }
        // Refused before any step is built (`Plan::built`).
        Collective::AllToAll => Vec::new(),
        Collective::AllGather => {
            let blocks: Vec<Range<usize>> =
                (0..world).map(|index| block(index, input_len)).collect();
            doubling(world, &blocks, |rank| rank, |_, _| false)
        }
        Collective::Broadcast { root } => {
            let chunks = balanced_ranges(input_len, world);
            let absolute = |relative: usize| (root + relative) % world;
            let mut steps = scatter(world, &chunks, absolute);
            // After the scatter, relative rank v holds chunks v .. v + lowbit(v) (the root: all),
            // so a receiver that is a multiple of 2d already holds what its partner would send.
            steps.extend(doubling(world, &chunks, absolute, |to, distance| {
                to % (2 * distance) == 0
            }));
            steps
        }
    }
}

/// Recursive halving over ranks numbered `0..W` (mapped to real ranks by `absolute`): `log2 W`
/// combining steps after which rank `v` holds chunk `v` reduced.
fn halving(world: usize, chunks: &[Range<usize>], absolute: impl Fn(usize) -> usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut distance = world / 2;
    while distance >= 1 {
        steps.extend(Step::of(
            true,
            (0..world).map(|rank| {
                let partner = rank ^ distance;
                // The half of this rank's 2d chunks that holds the partner's chunk.
                let first = (rank & !(2 * distance - 1)) + (partner & distance);
                Transfer::new(
                    absolute(rank),
                    absolute(partner),
                    span(chunks, first, first + distance),
                )
            }),
        ));
        distance /= 2;
    }
    steps
}

/// Recursive doubling over ranks numbered `0..W` (mapped to real ranks by `absolute`): rank `v`
/// sends the `d` chunks from `v & !(d-1)` to `v XOR d`, unless `skip(receiver, d)`.
fn doubling(
    world: usize,
    chunks: &[Range<usize>],
    absolute: impl Fn(usize) -> usize,
    skip: impl Fn(usize, usize) -> bool,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut distance = 1;
    while distance < world {
        steps.extend(Step::of(
            false,
            (0..world)
                .filter(|&rank| !skip(rank ^ distance, distance))
                .map(|rank| {
                    let first = rank & !(distance - 1);
                    Transfer::new(
                        absolute(rank),
                        absolute(rank ^ distance),
                        span(chunks, first, first + distance),
                    )
                }),
        ));
        distance *= 2;
    }
    steps
}

/// A binomial scatter from relative rank 0: for `d = W/2 … 1`, every multiple `v` of `2d` sends
/// chunks `v+d .. v+2d` to `v+d`.
fn scatter(world: usize, chunks: &[Range<usize>], absolute: impl Fn(usize) -> usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut distance = world / 2;
    while distance >= 1 {
        steps.extend(Step::of(
            false,
            (0..world).step_by(2 * distance).map(|rank| {
                Transfer::new(
                    absolute(rank),
                    absolute(rank + distance),
                    span(chunks, rank + distance, rank + 2 * distance),
                )
            }),
        ));
        distance /= 2;
    }
    steps
}

/// A binomial gather to relative rank 0: for `d = 1, 2, …, W/2`, every relative rank `v` with
/// `v mod 2d = d` sends the pieces of ranks `v .. v+d` to `v - d` (adjacent pieces merged).
fn binomial_gather(
    world: usize,
    absolute: impl Fn(usize) -> usize,
    piece: impl Fn(usize) -> Range<usize>,
) -> Vec<Step> {
    let distances = std::iter::successors(Some(1), |d| Some(d * 2)).take_while(|&d| d < world);
    distances
        .filter_map(|d| binomial_step(world, d, |v| (v + d, v), &absolute, &piece))
        .collect()
}

/// A binomial scatter from relative rank 0: for `d = W/2 … 1`, every multiple `v` of `2d` sends
/// the pieces of ranks `v+d .. v+2d` to `v+d` (adjacent pieces merged).
fn binomial_scatter(
    world: usize,
    absolute: impl Fn(usize) -> usize,
    piece: impl Fn(usize) -> Range<usize>,
) -> Vec<Step> {
    let distances = std::iter::successors(Some(world / 2), |d| Some(d / 2)).take_while(|&d| d >= 1);
    distances
        .filter_map(|d| binomial_step(world, d, |v| (v, v + d), &absolute, &piece))
        .collect()
}

/// One overwriting step at distance `d`: for every multiple `v` of `2d`, `ends(v)` names the
/// relative `(sender, receiver)`, and the pieces of ranks `v+d .. v+2d` move between them.
fn binomial_step(
    world: usize,
    d: usize,
    ends: impl Fn(usize) -> (usize, usize),
    absolute: &impl Fn(usize) -> usize,
    piece: &impl Fn(usize) -> Range<usize>,
) -> Option<Step> {
    Step::of(
        false,
        (0..world).step_by(2 * d).flat_map(|v| {
            let (from, to) = ends(v);
            merged((v + d..v + 2 * d).map(piece))
                .into_iter()
                .map(move |range| Transfer::new(absolute(from), absolute(to), range))
        }),
    )
}

/// `ranges` with every range that starts where the previous one ends joined to it.
fn merged(ranges: impl Iterator<Item = Range<usize>>) -> Vec<Range<usize>> {
    let mut joined: Vec<Range<usize>> = Vec::new();
    for range in ranges {
        match joined.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => joined.push(range),
        }
    }
    joined
}
