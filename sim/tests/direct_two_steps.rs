//! Direct's two-step all-reduce, reduce and broadcast give the bits its one step gives: the
//! contract fixes the fold order (ascending ranks, the receiver's own value at its position),
//! and a direct reduce-scatter folds each chunk once, on its owner, in exactly that order.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation, Step, Transfer};
use ruccl_sim::HostValues;
use ruccl_sim::conformance::interpret::{interpret, run_steps, same_bits};

/// The one-step direct schedule of `collective` (a broadcast, reduce or all-reduce), built by
/// hand: Plan::new does not build it from seven ranks up, nor from three at large sizes.
fn one_step(collective: Collective, world: usize, length: usize) -> Vec<Step> {
    let pairs = (0..world).flat_map(|from| (0..world).map(move |to| (from, to)));
    let (combine, transfers): (bool, Vec<Transfer>) = match collective {
        Collective::AllReduce(_) => (
            true,
            pairs
                .filter(|(from, to)| from != to)
                .map(|(from, to)| Transfer::new(from, to, 0..length))
                .collect(),
        ),
        Collective::Reduce { root, .. } => (
            true,
            (0..world)
                .filter(|&from| from != root)
                .map(|from| Transfer::new(from, root, 0..length))
                .collect(),
        ),
        Collective::Broadcast { root } => (
            false,
            (0..world)
                .filter(|&to| to != root)
                .map(|to| Transfer::new(root, to, 0..length))
                .collect(),
        ),
        other => unreachable!("{other} has one direct variant"),
    };
    vec![Step { combine, transfers }]
}

/// Values whose float sums depend on the order they are added in.
fn inputs(world: usize, length: usize, double: bool) -> Vec<HostValues> {
    (0..world)
        .map(|rank| {
            let values = (0..length).map(move |index| {
                let seed = (rank * 7919 + index * 104_729) % 1009;
                let scale = [1e8, 1.0, -1e8, 3.5e-3][(rank + index) % 4];
                scale * (seed as f64 + 0.25)
            });
            if double {
                HostValues::F64(values.collect())
            } else {
                HostValues::F32(values.map(|value| value as f32).collect())
            }
        })
        .collect()
}

#[test]
fn two_step_direct_gives_the_one_step_bits_for_every_reducing_op_and_root() {
    let mut compared = 0;
    for world in 7..=12 {
        let mut collectives: Vec<Collective> = ReduceOperation::ALL
            .into_iter()
            .map(Collective::AllReduce)
            .collect();
        for root in [0, world / 2, world - 1] {
            collectives.push(Collective::Broadcast { root });
            collectives.extend(
                ReduceOperation::ALL
                    .into_iter()
                    .map(|op| Collective::Reduce { op, root }),
            );
        }
        for collective in collectives {
            for length in [world + 1, 97, 1000] {
                let plan = Plan::new(collective, Algorithm::Direct, world, length).unwrap();
                assert_eq!(plan.steps().len(), 2, "{collective}, W={world}, n={length}");
                for double in [false, true] {
                    let inputs = inputs(world, length, double);
                    let two = interpret(&plan, &inputs).unwrap();
                    let one =
                        run_steps(&plan, &one_step(collective, world, length), &inputs).unwrap();
                    for (rank, (two, one)) in two.iter().zip(&one).enumerate() {
                        if let Err(mismatch) = same_bits(one, two) {
                            panic!("{collective}, W={world}, n={length}, rank {rank}: {mismatch}");
                        }
                    }
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > 500, "only {compared} compared");
}

#[test]
fn the_ring_folds_in_another_order_so_the_comparison_can_fail() {
    // The same inputs through the ring's fold order give other bits somewhere: the test above
    // would notice a two-step plan that folded like the ring.
    let (world, length) = (8, 97);
    let sum = Collective::AllReduce(ReduceOperation::Sum);
    let ring = Plan::new(sum, Algorithm::Ring, world, length).unwrap();
    let inputs = inputs(world, length, false);
    let folded = interpret(&ring, &inputs).unwrap();
    let one = run_steps(&ring, &one_step(sum, world, length), &inputs).unwrap();
    assert!(same_bits(&one[0], &folded[0]).is_err());
}
