//! Property 7 (schedule), from the side of what the models run: the accessors of
//! `RingSchedule` describe exactly the steps the ring driver executes. (The core's proptests own
//! the tiling and bandwidth properties; this pins the accessors the models and the simulator's
//! ledger read, which the ring driver itself never calls.)
#![cfg(not(any(ruccl_loom, ruccl_shuttle)))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_core::{RingSchedule, balanced_ranges};

#[test]
fn the_schedule_accessors_describe_the_steps_the_ring_runs() {
    for world in 1..=8 {
        for length in 0..=3 * world + 2 {
            let schedule = RingSchedule::new(world, length);
            assert_eq!(schedule.world(), world);
            assert_eq!(schedule.length(), length);
            assert_eq!(schedule.chunks(), balanced_ranges(length, world).as_slice());
            let steps: Vec<_> = schedule.steps().collect();
            assert_eq!(steps.len(), schedule.step_count());
            assert_eq!(steps.len(), 2 * (world - 1));
            for (index, step) in steps.iter().enumerate() {
                assert_eq!(schedule.step(index).as_ref(), Some(step));
            }
            assert_eq!(schedule.step(steps.len()), None);
            assert_eq!(schedule.step(steps.len() + 1), None);
            let sent: usize = (0..world).map(|rank| schedule.elements_sent_by(rank)).sum();
            assert_eq!(sent, schedule.elements_moved());
            assert_eq!(schedule.elements_moved(), 2 * (world - 1) * length);
        }
    }
}
