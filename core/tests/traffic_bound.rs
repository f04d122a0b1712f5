//! Every built-in plan's busiest rank moves at most `TRAFFIC_BOUND` times the least any built-in
//! plan of the same collective, world and length moves; direct builds a variant within the bound
//! (the model's choice between them) and is refused exactly when none is.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{
    Algorithm, Collective, NativeCollectiveError, Plan, ReduceOperation, TRAFFIC_BOUND,
};

/// Every collective, the rooted ones from the first, middle and last rank.
fn collectives(world: usize) -> Vec<Collective> {
    let op = ReduceOperation::Sum;
    let mut all = vec![
        Collective::AllReduce(op),
        Collective::ReduceScatter(op),
        Collective::AllGather,
        Collective::AllToAll,
    ];
    let mut roots = vec![0, world / 2, world - 1];
    roots.dedup();
    for root in roots {
        all.extend([
            Collective::Broadcast { root },
            Collective::Reduce { op, root },
            Collective::Gather { root },
            Collective::Scatter { root },
        ]);
    }
    all
}

/// The sizes: 0, 1, `W-1`, `W`, `W+1`, 1000, `4096·W` and a prime — per rank's block for the
/// collectives whose input splits into `W` blocks.
fn lengths(collective: Collective, world: usize) -> Vec<usize> {
    let sizes = [0, 1, world - 1, world, world + 1, 1000, 4096 * world, 997];
    match collective {
        Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
            sizes.iter().map(|size| size * world).collect()
        }
        _ => sizes.to_vec(),
    }
}

/// What each of direct's variants moves through its busiest rank, fewest steps first, worked
/// out by hand: one step moves the whole tensor (or a block) `W-1` times through one rank; two
/// steps (all-reduce, broadcast, reduce) cut it into `W` balanced chunks, the root's the last.
fn direct_variants(collective: Collective, world: usize, length: usize) -> Vec<usize> {
    if world == 1 {
        return vec![0];
    }
    let others = world - 1;
    let (floor, ceil) = (length / world, length.div_ceil(world));
    match collective {
        Collective::AllReduce(_) => vec![others * length, length + (world - 2) * ceil],
        Collective::Broadcast { .. } => vec![
            others * length,
            (length + (world - 2) * floor).max((world - 2) * ceil),
        ],
        Collective::Reduce { .. } => vec![
            others * length,
            (length + (world - 2) * floor).max(others * ceil),
        ],
        Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
            vec![others * (length / world)]
        }
        Collective::AllGather | Collective::Gather { .. } => vec![others * length],
        _ => unreachable!("a collective this test does not know"),
    }
}

#[test]
fn every_built_in_plan_is_within_the_traffic_bound_and_direct_refuses_exactly_when_no_variant_is() {
    let (mut built, mut refused, mut two_steps) = (0, 0, 0);
    for world in 1..=16 {
        for collective in collectives(world) {
            for length in lengths(collective, world) {
                let case = format!("{collective}, W={world}, n={length}");
                let plans: Vec<(Algorithm, Result<Plan, NativeCollectiveError>)> =
                    Algorithm::BUILT_IN
                        .into_iter()
                        .map(|algorithm| {
                            (algorithm, Plan::new(collective, algorithm, world, length))
                        })
                        .collect();
                let others = plans
                    .iter()
                    .filter(|(algorithm, _)| *algorithm != Algorithm::Direct)
                    .filter_map(|(_, plan)| plan.as_ref().ok())
                    .map(Plan::busiest_rank_elements)
                    .min();
                let variants = direct_variants(collective, world, length);
                let least = variants.iter().copied().chain(others).min().unwrap();
                let bound = TRAFFIC_BOUND * least;
                for (algorithm, plan) in &plans {
                    let Ok(plan) = plan else { continue };
                    let traffic = plan.busiest_rank_elements();
                    assert!(
                        traffic <= bound,
                        "{case}: {algorithm} moves {traffic}, more than {TRAFFIC_BOUND} × {least}"
                    );
                    built += 1;
                }
                let fits = variants.iter().position(|&traffic| traffic <= bound);
                match (fits, &plans[0]) {
                    (Some(_), (Algorithm::Direct, Ok(plan))) => {
                        // A variant that fits (which one is the model's choice), with its steps:
                        // one, or two (none at all when nothing moves).
                        let traffic = plan.busiest_rank_elements();
                        let variant = variants
                            .iter()
                            .position(|&elements| elements == traffic && elements <= bound);
                        let Some(variant) = variant else {
                            panic!("{case}: direct moves {traffic}, no variant within {bound}");
                        };
                        assert!(plan.steps().len() <= variant + 1, "{case}");
                        if variant == 1 && plan.steps().len() == 2 {
                            two_steps += 1;
                        }
                    }
                    (None, (Algorithm::Direct, Err(error))) => {
                        assert!(
                            matches!(error, NativeCollectiveError::InvalidCollective { .. }),
                            "{case}: {error}"
                        );
                        let text = error.to_string();
                        assert!(text.contains("refused: use "), "{case}: {text}");
                        assert!(text.contains('×'), "{case}: {text}");
                        refused += 1;
                    }
                    (fits, (algorithm, plan)) => {
                        panic!("{case}: {algorithm} gave {plan:?}, a variant fits: {fits:?}")
                    }
                }
            }
        }
    }
    assert!(built > 4000, "only {built} plans built");
    assert!(refused > 50, "only {refused} direct refusals");
    assert!(two_steps > 100, "only {two_steps} two-step direct plans");
}

#[test]
fn direct_takes_one_step_where_latency_dominates_and_two_where_bandwidth_does() {
    // The default model (2 µs a step, 24 GB/s a port): at a megabyte of f32 the one step's
    // (W-1)·n elements through one port cost more than a second step from three ranks on
    // (at two both variants move n, and the second step only adds its latency); at a few
    // elements per rank the second step's latency is the cost, so the one step stays, up to
    // the six ranks it is within the traffic bound.
    let sum = Collective::AllReduce(ReduceOperation::Sum);
    for world in 2..=16 {
        let plan = Plan::new(sum, Algorithm::Direct, world, 1 << 20).unwrap();
        let steps = if world == 2 { 1 } else { 2 };
        assert_eq!(plan.steps().len(), steps, "W={world}, 1 Mi elements");
        let ring = Plan::new(sum, Algorithm::Ring, world, 1 << 20).unwrap();
        // Within a chunk of the ring's 2(W-1)/W · n.
        let chunk = (1usize << 20).div_ceil(world);
        assert!(plan.busiest_rank_elements() <= ring.busiest_rank_elements() + chunk);
        if world <= 6 {
            let small = Plan::new(sum, Algorithm::Direct, world, 4 * world).unwrap();
            assert_eq!(small.steps().len(), 1, "W={world}, 4 elements per rank");
        }
    }
}

#[test]
fn direct_refuses_a_tensor_smaller_than_a_large_world_and_names_the_better_algorithm() {
    let sum = Collective::AllReduce(ReduceOperation::Sum);
    let error = Plan::new(sum, Algorithm::Direct, 16, 1).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("15 elements, 7.5× the 2 of ring") && text.contains("use ring"),
        "{text}"
    );
    // Auto skips it and takes a plan that builds.
    assert_ne!(
        Plan::new(sum, Algorithm::Auto, 16, 1).unwrap().algorithm(),
        Algorithm::Direct
    );
}

#[test]
fn halving_doubling_refuses_one_element_broadcast_and_reduce_on_sixteen_ranks() {
    // A binomial tree sends the element log2 16 = 4 times from one rank; the ring's busiest rank
    // sends it once.
    let op = ReduceOperation::Sum;
    for collective in [
        Collective::Broadcast { root: 0 },
        Collective::Reduce { op, root: 0 },
    ] {
        let error = Plan::new(collective, Algorithm::HalvingDoubling, 16, 1).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("4 elements, 4.0× the 1 of ring"), "{text}");
        let plan = Plan::new(collective, Algorithm::HalvingDoubling, 16, 16).unwrap();
        assert!(
            plan.busiest_rank_elements() <= TRAFFIC_BOUND * 16,
            "{collective}"
        );
    }
}
