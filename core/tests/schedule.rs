//! DESIGN property 7 (schedule): `balanced_ranges` tiles `0..n` evenly, and the ring schedule,
//! run symbolically, combines every element of every rank exactly once and delivers it to every
//! rank, at the bandwidth lower bound.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use proptest::prelude::*;
use ruccl_core::{RingPhase, RingSchedule, RingStep, balanced_ranges};

/// Check that `ranges` tile `0..length` in order with sizes differing by at most one.
fn assert_tiles(ranges: &[std::ops::Range<usize>], length: usize, parts: usize) {
    assert_eq!(ranges.len(), parts);
    let mut next = 0;
    for range in ranges {
        assert_eq!(range.start, next, "ranges must be contiguous: {ranges:?}");
        next = range.end;
    }
    assert_eq!(next, if parts == 0 { 0 } else { length });
    if let (Some(min), Some(max)) = (
        ranges.iter().map(|range| range.len()).min(),
        ranges.iter().map(|range| range.len()).max(),
    ) {
        assert!(max - min <= 1, "sizes differ by more than one: {ranges:?}");
    }
}

/// Run the schedule over symbolic tensors: element `i` of rank `r` is the set (bit mask) of ranks
/// whose contribution it holds. A combine of two overlapping sets would count a rank twice.
/// Returns the final masks per rank, or a description of the first double count.
fn run_symbolically(
    world: usize,
    length: usize,
    steps: impl IntoIterator<Item = RingStep>,
) -> Result<Vec<Vec<u64>>, String> {
    let mut masks: Vec<Vec<u64>> = (0..world).map(|rank| vec![1u64 << rank; length]).collect();
    for step in steps {
        // Every send reads the state from before the step.
        let sends: Vec<Vec<u64>> = (0..world)
            .map(|rank| masks[rank][step.ranges[rank].clone()].to_vec())
            .collect();
        for (rank, sent) in sends.into_iter().enumerate() {
            let destination = (rank + 1) % world;
            let range = step.ranges[rank].clone();
            for (offset, incoming) in sent.into_iter().enumerate() {
                let element = &mut masks[destination][range.start + offset];
                if step.reduce {
                    if *element & incoming != 0 {
                        return Err(format!(
                            "step {}: element {} on rank {destination} would count ranks {:#b} twice",
                            step.index,
                            range.start + offset,
                            *element & incoming
                        ));
                    }
                    *element |= incoming;
                } else {
                    *element = incoming;
                }
            }
        }
    }
    Ok(masks)
}

/// Every element of every rank holds every rank's contribution.
fn all_delivered(world: usize, masks: &[Vec<u64>]) -> Result<(), String> {
    let full = if world == 64 {
        u64::MAX
    } else {
        (1u64 << world) - 1
    };
    for (rank, rank_masks) in masks.iter().enumerate() {
        if let Some(index) = rank_masks.iter().position(|&mask| mask != full) {
            return Err(format!(
                "rank {rank} element {index} holds {:#b}, not every rank",
                rank_masks[index]
            ));
        }
    }
    Ok(())
}

fn check_schedule(world: usize, length: usize) {
    let schedule = RingSchedule::new(world, length);
    let masks = run_symbolically(world, length, schedule.steps())
        .unwrap_or_else(|why| panic!("W={world} n={length}: {why}"));
    if let Err(why) = all_delivered(world, &masks) {
        panic!("W={world} n={length}: {why}");
    }
    // Shape: 2(W-1) steps, W-1 of each phase, reduce exactly in reduce-scatter.
    assert_eq!(schedule.step_count(), 2 * (world - 1));
    for step in schedule.steps() {
        assert_eq!(step.ranges.len(), world);
        assert_eq!(step.reduce, step.phase == RingPhase::ReduceScatter);
        assert_eq!(
            step.phase == RingPhase::ReduceScatter,
            step.index < world - 1
        );
    }
    // Traffic: exactly 2(W-1)·n in all, and each rank within rounding of 2(W-1)/W·n.
    let per_rank: Vec<usize> = (0..world)
        .map(|rank| schedule.elements_sent_by(rank))
        .collect();
    assert_eq!(per_rank.iter().sum::<usize>(), 2 * (world - 1) * length);
    assert_eq!(schedule.elements_moved(), 2 * (world - 1) * length);
    let (low, high) = (length / world, length.div_ceil(world));
    for (rank, &sent) in per_rank.iter().enumerate() {
        assert!(
            (2 * (world - 1) * low..=2 * (world - 1) * high).contains(&sent),
            "W={world} n={length}: rank {rank} sends {sent}"
        );
    }
}

#[test]
fn every_world_up_to_64_at_edge_lengths_combines_once_and_delivers_everywhere() {
    for world in 1..=64usize {
        let large = if world <= 8 { 100_003 } else { 20_011 };
        let mut lengths = vec![
            0,
            1,
            world - 1,
            world,
            world + 1,
            2 * world + 3,
            97,
            1_009,
            large,
        ];
        lengths.sort_unstable();
        lengths.dedup();
        for length in lengths {
            check_schedule(world, length);
        }
    }
}

#[test]
fn zero_parts_give_no_ranges() {
    assert!(balanced_ranges(10, 0).is_empty());
    assert_eq!(RingSchedule::new(0, 10).step_count(), 0);
}

#[test]
fn a_world_of_one_has_no_steps() {
    let schedule = RingSchedule::new(1, 5);
    assert_eq!(schedule.steps().len(), 0);
    assert_eq!(schedule.chunks().to_vec(), vec![0..5]);
}

#[test]
fn the_symbolic_run_catches_a_repeated_reduce_step() {
    let schedule = RingSchedule::new(4, 10);
    let mut steps: Vec<RingStep> = schedule.steps().collect();
    steps.insert(1, steps[0].clone());
    let outcome = run_symbolically(4, 10, steps);
    assert!(outcome.unwrap_err().contains("twice"));
}

#[test]
fn the_symbolic_run_catches_a_missing_all_gather_step() {
    let schedule = RingSchedule::new(4, 10);
    let mut steps: Vec<RingStep> = schedule.steps().collect();
    steps.pop();
    let masks = run_symbolically(4, 10, steps).unwrap();
    assert!(
        all_delivered(4, &masks)
            .unwrap_err()
            .contains("not every rank")
    );
}

proptest! {
    #[test]
    fn balanced_ranges_tile_evenly(length in 0usize..200_000, parts in 0usize..300) {
        assert_tiles(&balanced_ranges(length, parts), length, parts);
    }

    #[test]
    fn balanced_ranges_tile_evenly_when_shorter_than_the_world(parts in 1usize..300, short in 0usize..300) {
        let length = short % parts;
        assert_tiles(&balanced_ranges(length, parts), length, parts);
    }

    #[test]
    fn any_world_and_length_combines_once_and_delivers_everywhere(world in 1usize..=64, length in 0usize..2_000) {
        check_schedule(world, length);
    }
}
