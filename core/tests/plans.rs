//! Plans and the symbolic checker: every built-in algorithm of every collective verifies on
//! every world up to 64 at edge lengths and moves the traffic its algorithm is known for; wrong
//! schedules are refused with a message naming rank, element and step; impossible requests are
//! typed errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use proptest::prelude::*;
use ruccl_core::{
    Algorithm, Collective, ElementType, LinkModel, Links, NativeCollectiveError, Plan, PlanParts,
    ReduceOperation, ScheduleViolation, Step, StepViolation, TensorInfo, Transfer, verify,
};

const SUM: ReduceOperation = ReduceOperation::Sum;

/// The collectives to check on `world` ranks: every kind, the rooted ones from the first,
/// middle and last rank.
fn collectives(world: usize) -> Vec<Collective> {
    let mut all = vec![
        Collective::AllReduce(SUM),
        Collective::ReduceScatter(ReduceOperation::Max),
        Collective::AllGather,
        Collective::AllToAll,
    ];
    let mut roots = vec![0, world / 2, world - 1];
    roots.dedup();
    for root in roots {
        all.extend([
            Collective::Broadcast { root },
            Collective::Reduce {
                op: ReduceOperation::Min,
                root,
            },
            Collective::Gather { root },
            Collective::Scatter { root },
        ]);
    }
    all
}

/// Edge input lengths for `collective` on `world` ranks: empty, one, around the world, a prime
/// (per block, for the collectives whose input splits into `W` blocks).
fn lengths(collective: Collective, world: usize) -> Vec<usize> {
    match collective {
        Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
            [0, 1, 2, 3, 7].iter().map(|m| m * world).collect()
        }
        Collective::AllGather | Collective::Gather { .. } => vec![0, 1, 2, 5],
        _ => {
            let mut lengths = vec![0, 1, world - 1, world, world + 1, 2 * world + 3, 97];
            lengths.sort_unstable();
            lengths.dedup();
            lengths
        }
    }
}

/// `(transfers, elements)` on the busiest link of every step of `plan` under `model`, summed.
fn busiest_totals(plan: &Plan, model: &LinkModel) -> (usize, usize) {
    plan.steps()
        .iter()
        .fold((0, 0), |(transfers, elements), step| {
            (
                transfers + model.busiest_transfers(step, plan.world()),
                elements + model.busiest_elements(step, plan.world()),
            )
        })
}

fn algorithms(world: usize) -> Vec<Algorithm> {
    Algorithm::BUILT_IN
        .into_iter()
        .filter(|&algorithm| algorithm != Algorithm::HalvingDoubling || world.is_power_of_two())
        .collect()
}

/// The plan of `algorithm`, or `None` where it refuses the size for moving more than
/// `TRAFFIC_BOUND` times the least traffic (`traffic_bound.rs` checks when); any other error
/// panics.
fn bounded(
    collective: Collective,
    algorithm: Algorithm,
    world: usize,
    length: usize,
) -> Option<Plan> {
    match Plan::new(collective, algorithm, world, length) {
        Ok(plan) => Some(plan),
        Err(NativeCollectiveError::InvalidCollective { reason, .. })
            if reason.contains("the least is refused") =>
        {
            None
        }
        Err(error) => panic!("{collective} via {algorithm}, W={world}, n={length}: {error}"),
    }
}

/// The algorithms that have a plan for `collective` on `world` ranks: only direct for all-to-all.
fn algorithms_for(collective: Collective, world: usize) -> Vec<Algorithm> {
    algorithms(world)
        .into_iter()
        .filter(|&algorithm| collective != Collective::AllToAll || algorithm == Algorithm::Direct)
        .collect()
}

#[test]
fn every_built_in_plan_verifies_on_every_world_up_to_64() {
    let mut checked = 0;
    for world in 1..=64 {
        for collective in collectives(world) {
            for length in lengths(collective, world) {
                for algorithm in algorithms_for(collective, world) {
                    let Some(plan) = bounded(collective, algorithm, world, length) else {
                        continue;
                    };
                    assert_eq!(plan.algorithm(), algorithm);
                    if let Err(violation) = verify(&plan) {
                        panic!("{collective} via {algorithm}, W={world}, n={length}: {violation}");
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 10000, "only {checked} plans checked");
}

#[test]
fn the_largest_built_in_plans_verify_at_a_large_prime_length() {
    // A large prime per block at W = 64: the checker's time for the biggest plans it takes on.
    let world = 64;
    let prime = 127;
    for collective in collectives(world) {
        let length = match collective {
            Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
                prime * world
            }
            Collective::AllGather | Collective::Gather { .. } => prime,
            _ => 8191,
        };
        for algorithm in algorithms_for(collective, world) {
            let plan = Plan::new(collective, algorithm, world, length).unwrap();
            if let Err(violation) = verify(&plan) {
                panic!("{collective} via {algorithm}, W={world}, n={length}: {violation}");
            }
        }
    }
}

#[test]
fn ring_and_halving_doubling_refuse_all_to_all_and_auto_takes_direct() {
    for algorithm in [Algorithm::Ring, Algorithm::HalvingDoubling] {
        let error = Plan::new(Collective::AllToAll, algorithm, 4, 8).unwrap_err();
        assert!(
            matches!(error, NativeCollectiveError::InvalidCollective { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("no all-to-all plan"), "{error}");
    }
    let auto = Plan::new(Collective::AllToAll, Algorithm::Auto, 4, 1 << 20).unwrap();
    assert_eq!(auto.algorithm(), Algorithm::Direct);
}

#[test]
fn rooted_collectives_give_an_output_only_where_the_contract_says() {
    let (world, m) = (4, 3);
    let reduce = Plan::new(
        Collective::Reduce { op: SUM, root: 2 },
        Algorithm::Ring,
        world,
        10,
    )
    .unwrap();
    let gather = Plan::new(Collective::Gather { root: 1 }, Algorithm::Direct, world, m).unwrap();
    let scatter = Plan::new(
        Collective::Scatter { root: 3 },
        Algorithm::HalvingDoubling,
        world,
        world * m,
    )
    .unwrap();
    for rank in 0..world {
        assert_eq!(reduce.output(rank).len(), if rank == 2 { 10 } else { 0 });
        assert_eq!(
            gather.output(rank).len(),
            if rank == 1 { world * m } else { 0 }
        );
        assert_eq!(scatter.output(rank), rank * m..(rank + 1) * m);
    }
    assert_eq!(reduce.output_len(), 10);
    // Direct all-to-all sends W-1 blocks from every rank, and none to itself.
    let all_to_all = Plan::new(Collective::AllToAll, Algorithm::Direct, world, world * m).unwrap();
    for rank in 0..world {
        assert_eq!(all_to_all.elements_sent_by(rank), (world - 1) * m);
    }
}

#[test]
fn an_all_to_all_block_landing_one_element_off_is_refused() {
    // Planted slip: one transfer's `at` off by one.
    let mut parts = Plan::new(Collective::AllToAll, Algorithm::Direct, 3, 6)
        .unwrap()
        .into_parts();
    parts.steps[0].transfers[1].at += 1;
    let violation = refused(parts);
    assert!(
        matches!(
            violation,
            ScheduleViolation::WrongContents { .. }
                | ScheduleViolation::BrokenStep {
                    violation: StepViolation::DoubleWrite { .. },
                    ..
                }
        ),
        "{violation}"
    );
}

#[test]
fn a_gather_block_sent_to_the_wrong_offset_at_the_root_is_refused() {
    // Planted slip: the root receives rank 2's block where rank 1's belongs.
    let mut parts = Plan::new(Collective::Gather { root: 0 }, Algorithm::Direct, 4, 2)
        .unwrap()
        .into_parts();
    let transfer = parts.steps[0]
        .transfers
        .iter_mut()
        .find(|transfer| transfer.from == 2)
        .unwrap();
    transfer.at = 2;
    // Rank 2's block lands on rank 1's slot: two writers of one element of the root.
    let violation = refused(parts);
    assert_eq!(
        violation.to_string(),
        "step 0: rank 0 element 2 is overwritten twice in one step, by rank 1 and rank 2"
    );
    // Without rank 1's transfer, the slot holds the wrong rank's block.
    let mut parts = Plan::new(Collective::Gather { root: 0 }, Algorithm::Direct, 4, 2)
        .unwrap()
        .into_parts();
    parts.steps[0]
        .transfers
        .retain(|transfer| transfer.from != 1);
    parts.steps[0].transfers[0].at = 2;
    let text = refused(parts).to_string();
    assert!(text.starts_with("rank 0 output element 2"), "{text}");
}

#[test]
fn local_copies_read_the_state_before_the_step() {
    // One rank, two elements: a step of two self-transfers swaps them (each reads the value from
    // before the step). Two swaps are the identity, a correct one-rank all-to-all; one swap is
    // not. A checker that read a source after the same step wrote it would see [x0, x0].
    let swap = Step {
        combine: false,
        transfers: vec![
            Transfer {
                from: 0,
                to: 0,
                range: 0..1,
                at: 1,
            },
            Transfer {
                from: 0,
                to: 0,
                range: 1..2,
                at: 0,
            },
        ],
    };
    let parts = |steps: Vec<Step>| PlanParts {
        collective: Collective::AllToAll,
        world: 1,
        input_len: 2,
        buffer_len: 2,
        placements: vec![0],
        outputs: std::iter::once(0..2).collect(),
        steps,
    };
    assert!(Plan::from_parts(parts(vec![swap.clone(), swap.clone()])).is_ok());
    let violation = refused(parts(vec![swap]));
    assert!(
        violation.to_string().starts_with(
            "rank 0 output element 0 (last written in step 0): holds rank 0's input element 1"
        ),
        "{violation}"
    );
}

#[test]
fn halving_doubling_is_refused_off_powers_of_two() {
    for world in [3, 5, 6, 7, 12] {
        let error = Plan::new(
            Collective::AllReduce(SUM),
            Algorithm::HalvingDoubling,
            world,
            8,
        )
        .unwrap_err();
        assert!(
            matches!(error, NativeCollectiveError::InvalidCollective { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("power-of-two"), "{error}");
    }
}

#[test]
fn impossible_requests_are_typed_errors() {
    let cases = [
        (
            Collective::ReduceScatter(SUM),
            Algorithm::Ring,
            4,
            10,
            "equal blocks",
        ),
        (
            Collective::Broadcast { root: 4 },
            Algorithm::Direct,
            4,
            10,
            "root 4",
        ),
        (
            Collective::AllReduce(SUM),
            Algorithm::Ring,
            0,
            10,
            "at least one rank",
        ),
        (
            Collective::AllReduce(SUM),
            Algorithm::Custom,
            2,
            10,
            "custom plan",
        ),
        (
            Collective::AllGather,
            Algorithm::Ring,
            4,
            usize::MAX,
            "overflow",
        ),
    ];
    let more = [
        (
            Collective::Reduce { op: SUM, root: 5 },
            Algorithm::Ring,
            4,
            10,
            "root 5",
        ),
        (
            Collective::Scatter { root: 0 },
            Algorithm::Direct,
            4,
            10,
            "equal blocks",
        ),
        (
            Collective::AllToAll,
            Algorithm::Direct,
            3,
            10,
            "equal blocks",
        ),
        (
            Collective::Gather { root: 1 },
            Algorithm::HalvingDoubling,
            3,
            10,
            "power-of-two",
        ),
    ];
    for (collective, algorithm, world, length, says) in cases.into_iter().chain(more) {
        let error = Plan::new(collective, algorithm, world, length).unwrap_err();
        assert!(
            matches!(error, NativeCollectiveError::InvalidCollective { .. }),
            "{error}"
        );
        assert!(error.to_string().contains(says), "`{error}` lacks `{says}`");
    }
}

#[test]
fn every_rank_sends_what_its_algorithm_is_known_for() {
    for world in [2, 3, 4, 5, 8, 16] {
        let n = 12 * world;
        let m = 3;
        for algorithm in algorithms(world) {
            let all_reduce = Plan::new(Collective::AllReduce(SUM), algorithm, world, n).unwrap();
            let reduce_scatter =
                Plan::new(Collective::ReduceScatter(SUM), algorithm, world, world * m).unwrap();
            let all_gather = Plan::new(Collective::AllGather, algorithm, world, m).unwrap();
            for rank in 0..world {
                let sent = all_reduce.elements_sent_by(rank);
                match algorithm {
                    // The all-reduce lower bound 2(W-1)/W · n, met exactly when W divides n.
                    Algorithm::Ring | Algorithm::HalvingDoubling => {
                        assert_eq!(sent, 2 * (world - 1) * n / world, "{algorithm} W={world}");
                    }
                    // Direct's one step up to six ranks (at a dozen elements per rank the model
                    // prefers it to two steps); from seven its two steps meet the bound too.
                    _ if world <= 6 => assert_eq!(sent, (world - 1) * n, "{algorithm} W={world}"),
                    _ => assert_eq!(sent, 2 * (world - 1) * n / world, "{algorithm} W={world}"),
                }
                assert_eq!(reduce_scatter.elements_sent_by(rank), (world - 1) * m);
                assert_eq!(all_gather.elements_sent_by(rank), (world - 1) * m);
                assert_eq!(all_gather.elements_received_by(rank), (world - 1) * m);
            }
            let expected_steps = match algorithm {
                Algorithm::Ring => 2 * (world - 1),
                Algorithm::Direct if world <= 6 => 1,
                Algorithm::Direct => 2,
                _ => 2 * world.trailing_zeros() as usize,
            };
            assert_eq!(all_reduce.steps().len(), expected_steps, "{algorithm}");
        }
        let broadcast =
            Plan::new(Collective::Broadcast { root: 1 }, Algorithm::Ring, world, n).unwrap();
        // Scatter, then ring all-gather: the root sends (W-1)/W · n twice, and receives nothing.
        assert_eq!(broadcast.elements_sent_by(1), 2 * (world - 1) * n / world);
        assert_eq!(broadcast.elements_received_by(1), 0);
    }
}

#[test]
fn auto_takes_direct_for_tiny_messages_and_a_bandwidth_optimal_algorithm_for_large_ones() {
    let model = LinkModel::default();
    let f32s = |len| TensorInfo {
        len,
        element: ElementType::F32,
    };
    let all_reduce = Collective::AllReduce(SUM);
    for world in [2, 3, 4, 8] {
        // At W = 8 direct refuses one element (7 sent against the ring's 2): W elements, its
        // two steps.
        let tiny = if world < 8 { 1 } else { world };
        let tiny =
            Plan::with_model(all_reduce, Algorithm::Auto, world, f32s(tiny), &model).unwrap();
        assert_eq!(tiny.algorithm(), Algorithm::Direct, "W={world}");
        let large =
            Plan::with_model(all_reduce, Algorithm::Auto, world, f32s(1 << 24), &model).unwrap();
        // From three ranks direct's two steps move what the ring and halving-doubling move, in
        // fewer steps.
        if world > 2 {
            assert_eq!(large.algorithm(), Algorithm::Direct, "W={world}");
            assert_eq!(large.steps().len(), 2, "W={world}");
        }
        // Whatever it picks is never slower under the model than any fixed algorithm.
        for length in [1, 1000, 1 << 16, 1 << 24] {
            let auto =
                Plan::with_model(all_reduce, Algorithm::Auto, world, f32s(length), &model).unwrap();
            for algorithm in algorithms(world) {
                let Ok(fixed) =
                    Plan::with_model(all_reduce, algorithm, world, f32s(length), &model)
                else {
                    continue;
                };
                assert!(model.plan_time(&auto, 4) <= model.plan_time(&fixed, 4));
            }
        }
    }
}

#[test]
fn a_shared_link_prices_the_step_total() {
    let shared = LinkModel::new(1e-6, 1e9, Links::Shared).unwrap();
    let per_rank = LinkModel::new(1e-6, 1e9, Links::PerRank).unwrap();
    let plan = Plan::new(Collective::AllReduce(SUM), Algorithm::Direct, 4, 1000).unwrap();
    let step = &plan.steps()[0];
    // Twelve transfers of the whole buffer, every rank's buffer copied aside once (each is
    // sent and overwritten in the same step), and every rank's buffer folded into once.
    assert_eq!(step.copied_aside(), 4 * 1000);
    assert_eq!(step.folded_elements(), 4 * 1000);
    assert_eq!(
        shared.busiest_elements(step, 4),
        12 * 1000 + 4 * 1000 + 4 * 1000
    );
    assert_eq!(per_rank.busiest_elements(step, 4), 3 * 1000);
    assert!(LinkModel::new(-1.0, 1e9, Links::Shared).is_err());
    assert!(LinkModel::new(1.0, 0.0, Links::Shared).is_err());
}

#[test]
fn a_fold_of_several_senders_reads_and_writes_the_receiver_once() {
    let transfer = |from, to, range| Transfer::new(from, to, range);
    let mut step = Step {
        combine: true,
        transfers: vec![
            transfer(0, 2, 0..4),
            transfer(1, 2, 2..6),
            transfer(3, 2, 0..6),
            transfer(2, 0, 0..3),
            transfer(1, 0, 5..7),
            transfer(3, 1, 4..4),
        ],
    };
    // Rank 2: 0..6 once, whoever sends; rank 0: 0..3 and 5..7 apart; rank 1: nothing.
    assert_eq!(step.folded_elements(), 6 + 3 + 2);
    step.combine = false;
    assert_eq!(step.folded_elements(), 0, "an overwrite folds into nothing");
    // So on a shared link, reduce-scatter folding all senders into a shard in one step (direct)
    // moves fewer elements than folding them in step by step, with the same transfers' bytes.
    let shared = LinkModel::new(0.0, 1e9, Links::Shared).unwrap();
    let elements = |algorithm| -> usize {
        let plan = Plan::new(Collective::ReduceScatter(SUM), algorithm, 8, 8 * 64).unwrap();
        busiest_totals(&plan, &shared).1
    };
    let moved = 56 * 64;
    assert_eq!(elements(Algorithm::Direct), moved + 8 * 64);
    assert_eq!(elements(Algorithm::Ring), moved + 7 * 8 * 64);
    assert_eq!(elements(Algorithm::HalvingDoubling), moved + 7 * 8 * 64);
}

#[test]
fn a_transfer_cost_prefers_fewer_transfers_when_the_bytes_tie() {
    // All-gather on a shared link: ring and direct make 56 transfers at W = 8,
    // halving-doubling 8 per step over 3 steps; all three move the same bytes.
    let collective = Collective::AllGather;
    let plain = LinkModel::new(0.0, 1e9, Links::Shared).unwrap();
    let costly = plain.with_transfer_cost(1e-6).unwrap();
    let input = TensorInfo {
        len: 64,
        element: ElementType::F32,
    };
    let plan = |algorithm| Plan::with_model(collective, algorithm, 8, input, &costly).unwrap();
    let transfers = |plan: &Plan, model: &LinkModel| busiest_totals(plan, model).0;
    assert_eq!(transfers(&plan(Algorithm::Ring), &costly), 56);
    assert_eq!(transfers(&plan(Algorithm::Direct), &costly), 56);
    assert_eq!(transfers(&plan(Algorithm::HalvingDoubling), &costly), 24);
    // Per rank: one send and one receive per ring step, seven of each in direct's one step.
    let per_rank = LinkModel::new(0.0, 1e9, Links::PerRank).unwrap();
    assert_eq!(transfers(&plan(Algorithm::Ring), &per_rank), 7);
    assert_eq!(transfers(&plan(Algorithm::Direct), &per_rank), 7);
    // Without γ the tie goes to the earlier built-in algorithm; with it, to the fewest transfers.
    let auto = |model: &LinkModel| {
        Plan::with_model(collective, Algorithm::Auto, 8, input, model)
            .unwrap()
            .algorithm()
    };
    assert_eq!(auto(&plain), Algorithm::BUILT_IN[0]);
    assert_eq!(auto(&costly), Algorithm::HalvingDoubling);
    let ring = plan(Algorithm::Ring);
    let step_bytes = 56 * 64 * 4;
    assert!(
        (costly.plan_time(&ring, 4) - (56e-6 + step_bytes as f64 / 1e9)).abs() < 1e-12,
        "γ per transfer plus the bytes"
    );
}

#[test]
fn ring_and_halving_doubling_all_reduce_tie_in_elements_and_halving_doubling_takes_fewer_steps() {
    // Both are bandwidth-optimal: on either kind of link they move (and fold) the same elements,
    // so the model can only tell them apart by steps and transfers, where halving-doubling has
    // fewer. No α, γ, β ≥ 0 prices ring below it (yet ring measured 1.21× faster at W = 8, 1 MiB).
    let shared = LinkModel::new(0.0, 1e9, Links::Shared).unwrap();
    let per_rank = LinkModel::new(0.0, 1e9, Links::PerRank).unwrap();
    for world in [4, 8, 16] {
        let n = 64 * world;
        let plan = |algorithm| Plan::new(Collective::AllReduce(SUM), algorithm, world, n).unwrap();
        let (ring, halving) = (plan(Algorithm::Ring), plan(Algorithm::HalvingDoubling));
        let log = world.trailing_zeros() as usize;
        // Shared: every rank sends and receives 2(W-1)/W·n, and folds (W-1)/W·n.
        assert_eq!(
            busiest_totals(&ring, &shared),
            (2 * (world - 1) * world, 3 * (world - 1) * n)
        );
        assert_eq!(
            busiest_totals(&halving, &shared),
            (2 * log * world, 3 * (world - 1) * n)
        );
        // Per rank: 2(W-1)/W·n on the busiest link, one transfer per step.
        assert_eq!(
            busiest_totals(&ring, &per_rank),
            (2 * (world - 1), 2 * (world - 1) * n / world)
        );
        assert_eq!(
            busiest_totals(&halving, &per_rank),
            (2 * log, 2 * (world - 1) * n / world)
        );
        assert!(ring.steps().len() > halving.steps().len(), "W={world}");
    }
}

#[test]
fn on_a_shared_link_every_broadcast_moves_the_buffer_once_per_receiver_and_direct_in_the_fewest_steps()
 {
    // So on a shared link no α, γ, β ≥ 0 prices another broadcast below direct (yet
    // halving-doubling measured 1.18× faster at W = 4, 16 MiB on the simulated device). From
    // seven ranks direct takes two steps: one would move W-1 times the tensor through the root.
    let shared = LinkModel::new(0.0, 1e9, Links::Shared).unwrap();
    for world in [2, 4, 8] {
        let n = 64 * world;
        for root in [0, world - 1] {
            let collective = Collective::Broadcast { root };
            for algorithm in algorithms(world) {
                let plan = Plan::new(collective, algorithm, world, n).unwrap();
                let (transfers, elements) = busiest_totals(&plan, &shared);
                assert_eq!(elements, (world - 1) * n, "{algorithm} W={world}");
                // Every receiver receives at least once: direct's one transfer each is the least.
                assert!(transfers >= world - 1, "{algorithm} W={world}");
                if algorithm == Algorithm::Direct && world <= 6 {
                    assert_eq!((transfers, plan.steps().len()), (world - 1, 1));
                } else if algorithm == Algorithm::Direct {
                    assert_eq!((transfers, plan.steps().len()), (world * (world - 1), 2));
                }
            }
        }
    }
}

#[test]
fn only_a_step_that_overwrites_its_own_sources_copies_them_aside() {
    for world in [2, 3, 4, 8] {
        for collective in collectives(world) {
            for algorithm in algorithms_for(collective, world) {
                let plan = Plan::new(collective, algorithm, world, 8 * world).unwrap();
                let aside: usize = plan.steps().iter().map(Step::copied_aside).sum();
                let expected = match (collective, algorithm) {
                    // One step folds every rank's whole tensor while sending it (to six ranks).
                    (Collective::AllReduce(_), Algorithm::Direct) if (2..=6).contains(&world) => {
                        world * 8 * world
                    }
                    // In place, every block but a rank's own is both sent and overwritten.
                    (Collective::AllToAll, Algorithm::Direct) => world * (world - 1) * 8,
                    _ => 0,
                };
                assert_eq!(aside, expected, "{collective} via {algorithm}, W={world}");
            }
        }
    }
    // A source read by several receivers is one copy; a sender nobody writes to needs none.
    let step = Step {
        combine: false,
        transfers: vec![
            Transfer::new(0, 1, 0..4),
            Transfer::new(0, 2, 0..4),
            Transfer::new(3, 0, 2..3),
            Transfer::new(3, 1, 6..8),
        ],
    };
    assert_eq!(step.overwritten_sources(), vec![(0, 0..4)]);
    assert_eq!(step.copied_aside(), 4);
}

// ---- planted wrong schedules: each is refused, naming where ----

fn ring_all_reduce(world: usize, length: usize) -> PlanParts {
    Plan::new(Collective::AllReduce(SUM), Algorithm::Ring, world, length)
        .unwrap()
        .into_parts()
}

fn refused(parts: PlanParts) -> ScheduleViolation {
    match Plan::from_parts(parts) {
        Ok(_) => panic!("a wrong schedule was accepted"),
        Err(violation) => violation,
    }
}

#[test]
fn a_missing_all_gather_step_leaves_a_rank_without_a_chunk() {
    let mut parts = ring_all_reduce(4, 8);
    parts.steps.pop();
    let violation = refused(parts);
    assert!(
        matches!(
            violation,
            ScheduleViolation::WrongContents { step: Some(_), .. }
        ),
        "{violation}"
    );
    let text = violation.to_string();
    assert!(
        text.contains("rank") && text.contains("element") && text.contains("step"),
        "{text}"
    );
}

#[test]
fn a_repeated_reduce_step_counts_contributions_twice() {
    let mut parts = ring_all_reduce(3, 6);
    let first = parts.steps[0].clone();
    parts.steps.insert(1, first);
    let violation = refused(parts);
    let text = violation.to_string();
    assert!(text.contains("more than one from each"), "{text}");
}

#[test]
fn a_reduce_step_that_overwrites_loses_contributions() {
    let mut parts = ring_all_reduce(3, 6);
    parts.steps[1].combine = false;
    let violation = refused(parts);
    assert!(violation.to_string().contains("lacks rank"), "{violation}");
}

#[test]
fn a_reassociated_fold_is_caught_as_bitwise_disagreement() {
    // Rank 1 folds ((x0 ⊕ x1) ⊕ x2); rank 0 ends with x0 ⊕ (x1 ⊕ x2): every element is still
    // reduced exactly once, but the two may round differently.
    let t = |from, to| Transfer::new(from, to, 0..1);
    let parts = PlanParts {
        collective: Collective::AllReduce(SUM),
        world: 3,
        input_len: 1,
        buffer_len: 1,
        placements: vec![0; 3],
        outputs: vec![0..1; 3],
        steps: vec![
            Step {
                combine: true,
                transfers: vec![t(0, 1), t(2, 1), t(1, 2)],
            },
            Step {
                combine: true,
                transfers: vec![t(2, 0)],
            },
            Step {
                combine: false,
                transfers: vec![t(1, 2)],
            },
        ],
    };
    let violation = refused(parts);
    assert_eq!(
        violation,
        ScheduleViolation::NotIdentical {
            rank: 1,
            element: 0,
            step: Some(0)
        }
    );
}

#[test]
fn a_transfer_outside_the_buffers_is_refused_before_it_runs() {
    let mut parts = ring_all_reduce(2, 4);
    parts.steps[0].transfers[0].range = 2..5;
    let violation = refused(parts);
    assert!(
        matches!(
            violation,
            ScheduleViolation::BrokenStep {
                step: 0,
                violation: StepViolation::OutOfBounds { end: 5, .. },
            }
        ),
        "{violation}"
    );
}

#[test]
#[allow(
    clippy::reversed_empty_ranges,
    reason = "an inverted range is the case under test"
)]
fn an_inverted_transfer_range_is_refused_and_an_empty_one_is_not() {
    let step = |range| Step {
        combine: false,
        transfers: vec![Transfer::new(0, 1, range)],
    };
    assert!(matches!(
        step(3..2).check(2, 4),
        Err(StepViolation::OutOfBounds {
            start: 3,
            end: 2,
            ..
        })
    ));
    assert_eq!(step(2..2).check(2, 4), Ok(()));
    assert_eq!(step(4..4).check(2, 4), Ok(()));
}

#[test]
fn two_writers_of_one_element_in_an_overwriting_step_are_refused() {
    let mut parts = Plan::new(Collective::Broadcast { root: 0 }, Algorithm::Direct, 3, 4)
        .unwrap()
        .into_parts();
    // Rank 2 also overwrites rank 1's tensor, which the root already sends there.
    parts.steps[0].transfers.push(Transfer::new(2, 1, 0..4));
    let violation = refused(parts);
    assert_eq!(
        violation,
        ScheduleViolation::BrokenStep {
            step: 0,
            violation: StepViolation::DoubleWrite {
                rank: 1,
                element: 0,
                first: 0,
                second: 2
            }
        }
    );
}

#[test]
fn sending_an_element_nobody_wrote_is_refused() {
    let mut parts = Plan::new(Collective::AllGather, Algorithm::Ring, 3, 2)
        .unwrap()
        .into_parts();
    // In the first step rank 0 sends rank 2's block, which it does not have yet.
    parts.steps[0].transfers[0].range = 4..6;
    let violation = refused(parts);
    assert!(
        matches!(
            violation,
            ScheduleViolation::ReadBeforeWrite {
                step: 0,
                rank: 0,
                element: 4
            }
        ),
        "{violation}"
    );
}

#[test]
fn a_broadcast_of_the_wrong_root_is_refused() {
    let mut parts = Plan::new(Collective::Broadcast { root: 0 }, Algorithm::Direct, 3, 4)
        .unwrap()
        .into_parts();
    parts.collective = Collective::Broadcast { root: 1 };
    let violation = refused(parts);
    let text = violation.to_string();
    assert!(text.contains("expected rank 1's input element 0"), "{text}");
}

#[test]
fn a_reduce_scatter_missing_one_transfer_lacks_that_contribution() {
    let mut parts = Plan::new(Collective::ReduceScatter(SUM), Algorithm::Direct, 4, 8)
        .unwrap()
        .into_parts();
    let dropped = parts.steps[0].transfers.remove(3);
    let violation = refused(parts);
    let text = violation.to_string();
    assert!(
        text.contains(&format!("lacks rank {}'s", dropped.from)),
        "{text}"
    );
    assert!(text.starts_with(&format!("rank {}", dropped.to)), "{text}");
}

#[test]
fn a_rank_copying_to_itself_instead_of_sending_leaves_the_receiver_without_its_chunk() {
    // Contract v3: a self-transfer is a local copy, so the plan is well formed — and wrong.
    let mut parts = ring_all_reduce(3, 3);
    parts.steps[2].transfers[1].to = parts.steps[2].transfers[1].from;
    assert!(matches!(
        refused(parts),
        ScheduleViolation::WrongContents { .. }
    ));
}

#[test]
fn a_layout_that_does_not_fit_is_refused() {
    let mut parts = ring_all_reduce(2, 4);
    parts.placements[1] = 1;
    assert!(matches!(
        refused(parts),
        ScheduleViolation::PlacementOutOfBounds { rank: 1, .. }
    ));
    let mut parts = ring_all_reduce(2, 4);
    parts.outputs.pop();
    assert!(matches!(
        refused(parts),
        ScheduleViolation::RankCount {
            what: "outputs",
            ..
        }
    ));
}

#[test]
#[allow(
    clippy::reversed_empty_ranges,
    reason = "an inverted range is the case under test"
)]
fn an_output_range_inverted_or_past_the_buffer_is_refused_even_of_the_right_length() {
    // A non-root rank of a reduce has an empty output: an inverted range is still refused.
    let mut parts = Plan::new(
        Collective::Reduce { op: SUM, root: 0 },
        Algorithm::Ring,
        2,
        4,
    )
    .unwrap()
    .into_parts();
    parts.outputs[1] = 3..2;
    assert!(matches!(
        refused(parts),
        ScheduleViolation::BadOutput {
            rank: 1,
            start: 3,
            end: 2,
            ..
        }
    ));
    // The right length, but running past the end of the buffer.
    let mut parts = ring_all_reduce(2, 4);
    let end = parts.buffer_len + 1;
    parts.outputs[0] = end - 4..end;
    assert!(matches!(
        refused(parts),
        ScheduleViolation::BadOutput { rank: 0, .. }
    ));
}

#[test]
fn a_right_custom_schedule_becomes_a_custom_plan() {
    // A two-step all-reduce of two ranks: rank 1 folds, then copies back.
    let t = |from, to| Transfer::new(from, to, 0..5);
    let plan = Plan::from_parts(PlanParts {
        collective: Collective::AllReduce(SUM),
        world: 2,
        input_len: 5,
        buffer_len: 5,
        placements: vec![0, 0],
        outputs: vec![0..5, 0..5],
        steps: vec![
            Step {
                combine: true,
                transfers: vec![t(0, 1)],
            },
            Step {
                combine: false,
                transfers: vec![t(1, 0)],
            },
        ],
    })
    .unwrap();
    assert_eq!(plan.algorithm(), Algorithm::Custom);
    assert_eq!(plan.steps().len(), 2);
}

proptest! {
    #[test]
    fn random_worlds_and_lengths_verify(world in 1usize..=24, length in 0usize..300) {
        for collective in collectives(world) {
            let length = match collective {
                Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
                    length / world * world
                }
                Collective::AllGather | Collective::Gather { .. } => length / world,
                _ => length,
            };
            for algorithm in algorithms_for(collective, world) {
                if let Some(plan) = bounded(collective, algorithm, world, length) {
                    prop_assert_eq!(verify(&plan), Ok(()));
                }
            }
        }
    }

    /// Any one transfer moved to another range or another rank makes a wrong schedule that the
    /// checker refuses, or an equivalent one it accepts — never a panic.
    #[test]
    fn mutated_plans_never_panic_the_checker(
        world in 2usize..=6,
        length in 1usize..40,
        algorithm in 0usize..3,
        step in 0usize..64,
        transfer in 0usize..64,
        start in 0usize..50,
        size in 0usize..20,
        to in 0usize..7,
    ) {
        let algorithm = algorithms(world)[algorithm % algorithms(world).len()];
        let mut parts = Plan::new(Collective::AllReduce(SUM), algorithm, world, length)
            .unwrap()
            .into_parts();
        let steps = parts.steps.len();
        if steps > 0 {
            let step = &mut parts.steps[step % steps];
            let count = step.transfers.len();
            let moved = &mut step.transfers[transfer % count];
            moved.range = start..start + size;
            moved.to = to;
        }
        let _ = Plan::from_parts(parts);
    }
}

// ---- the checker's dangerous direction: a fold order that differs on one rank ----

/// An all-reduce on `world` ranks of `length` elements whose ranks all fold in one step, in the
/// contract's order — except `rank`, which folds the senders in `first` one step before the
/// others. Every input stays at `0..n` (never written); each rank folds into a copy at `n..2n`.
fn split_fold(world: usize, length: usize, rank: usize, first: &[usize]) -> PlanParts {
    let n = length;
    let copy = Step {
        combine: false,
        transfers: (0..world)
            .map(|q| Transfer {
                from: q,
                to: q,
                range: 0..n,
                at: n,
            })
            .collect(),
    };
    let into = |from: usize, to: usize| Transfer {
        from,
        to,
        range: 0..n,
        at: n,
    };
    let early: Vec<Transfer> = first.iter().map(|&from| into(from, rank)).collect();
    let late: Vec<Transfer> = (0..world)
        .flat_map(|to| (0..world).map(move |from| (from, to)))
        .filter(|&(from, to)| from != to && !(to == rank && first.contains(&from)))
        .map(|(from, to)| into(from, to))
        .collect();
    let mut steps = vec![copy];
    steps.extend((!early.is_empty()).then_some(Step {
        combine: true,
        transfers: early,
    }));
    steps.push(Step {
        combine: true,
        transfers: late,
    });
    PlanParts {
        collective: Collective::AllReduce(SUM),
        world,
        input_len: n,
        buffer_len: 2 * n,
        placements: vec![0; world],
        outputs: vec![n..2 * n; world],
        steps,
    }
}

/// Whether folding `first` early at `rank` builds the contract's tree anyway: the contract's
/// order `[senders below, own, senders above]` is a left fold, so the early fold must be a
/// prefix of it — every sender below `rank` and the lowest ones above it.
fn same_tree(world: usize, rank: usize, first: &[usize]) -> bool {
    let order: Vec<usize> = (0..world).collect(); // `rank` itself stands for its own value
    let prefix = first.len() + 1;
    let mut early: Vec<usize> = first.to_vec();
    early.push(rank);
    early.sort_unstable();
    early == order[..prefix] || first.is_empty()
}

/// `plan`'s steps with every step's transfers reordered by `seed`.
fn shuffled(mut parts: PlanParts, seed: u64) -> PlanParts {
    let mut state = seed | 1;
    for step in &mut parts.steps {
        for index in (1..step.transfers.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            step.transfers
                .swap(index, (state % (index as u64 + 1)) as usize);
        }
    }
    parts
}

#[test]
fn a_fold_order_that_differs_on_exactly_one_rank_is_refused() {
    // Rank 2 of 3 folds rank 1's value before rank 0's: ((x1 ⊕ x2) … ) against ((x0 ⊕ x1) ⊕ x2).
    let refused_with = refused(split_fold(3, 4, 2, &[1]));
    assert!(
        matches!(
            refused_with,
            ScheduleViolation::NotIdentical { rank: 2, .. }
        ),
        "{refused_with}"
    );
    // Rank 0 folding rank 1 first builds the contract's tree: accepted.
    assert!(Plan::from_parts(split_fold(3, 4, 0, &[1])).is_ok());
}

proptest! {
    /// Every split of one rank's fold into two steps is refused exactly when it builds another
    /// tree than the contract's order, and then as a bitwise disagreement.
    #[test]
    fn one_rank_folding_in_another_order_is_refused_exactly_when_its_tree_differs(
        world in 2usize..=6,
        rank in 0usize..6,
        mask in 0u32..64,
        length in 1usize..4,
    ) {
        let rank = rank % world;
        let first: Vec<usize> = (0..world)
            .filter(|&q| q != rank && mask & (1 << q) != 0)
            .collect();
        let verdict = Plan::from_parts(split_fold(world, length, rank, &first));
        prop_assert_eq!(verdict.is_ok(), same_tree(world, rank, &first), "{:?}", verdict.err());
        if let Err(violation) = verdict {
            let is_not_identical = matches!(violation, ScheduleViolation::NotIdentical { .. });
            prop_assert!(is_not_identical, "{}", violation);
        }
    }

    /// The checker's answer does not depend on the order transfers are listed in a step: for
    /// every built-in plan, one rank's reordered fold, and mutated plans.
    #[test]
    fn the_verdict_does_not_depend_on_the_order_of_a_steps_transfers(
        world in 1usize..=6,
        length in 0usize..20,
        kind in 0usize..8,
        algorithm in 0usize..3,
        seed in any::<u64>(),
        mask in 0u32..64,
        mutate in any::<bool>(),
        position in any::<u64>(),
    ) {
        let collective = collectives(world)[kind % collectives(world).len()];
        let length = match collective {
            Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
                length * world
            }
            _ => length,
        };
        let algorithms = algorithms_for(collective, world);
        let algorithm = algorithms[algorithm % algorithms.len()];
        let Some(plan) = bounded(collective, algorithm, world, length) else {
            return Ok(());
        };
        let mut parts = plan.into_parts();
        if mutate && !parts.steps.is_empty() {
            // Shift one transfer's landing: an often wrong plan, checked in both orders too.
            let step = (position as usize) % parts.steps.len();
            let count = parts.steps[step].transfers.len();
            let moved = &mut parts.steps[step].transfers[(position >> 8) as usize % count];
            moved.at = moved.at.saturating_sub(1);
        }
        let listed = Plan::from_parts(parts.clone()).is_ok();
        prop_assert_eq!(Plan::from_parts(shuffled(parts, seed)).is_ok(), listed);
        if world >= 2 {
            let rank = (position as usize) % world;
            let first: Vec<usize> = (0..world)
                .filter(|&q| q != rank && mask & (1 << q) != 0)
                .collect();
            let crafted = split_fold(world, length.max(1), rank, &first);
            let listed = Plan::from_parts(crafted.clone()).is_ok();
            prop_assert_eq!(Plan::from_parts(shuffled(crafted, seed)).is_ok(), listed);
        }
    }
}

proptest! {
    /// A verified plan scaled by any factor verifies too (the scaled plan is never re-checked in
    /// use, so this is the check that the argument on `Plan::scaled` holds).
    #[test]
    fn a_scaled_plan_verifies_like_the_plan_it_scales(
        world in 1usize..=6,
        length in 0usize..12,
        kind in 0usize..20,
        algorithm in 0usize..3,
        factor in 1usize..5,
        mask in 0u32..64,
    ) {
        let collective = collectives(world)[kind % collectives(world).len()];
        let length = match collective {
            Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
                length * world
            }
            _ => length,
        };
        let algorithms = algorithms_for(collective, world);
        let algorithm = algorithms[algorithm % algorithms.len()];
        let Some(plan) = bounded(collective, algorithm, world, length) else {
            return Ok(());
        };
        let scaled = plan.scaled(factor).unwrap();
        prop_assert_eq!(scaled.input_len(), length * factor);
        prop_assert_eq!(verify(&scaled), Ok(()));
        if world >= 2 {
            let first: Vec<usize> = (1..world).filter(|&q| mask & (1 << q) != 0).collect();
            if let Ok(custom) = Plan::from_parts(split_fold(world, length.max(1), 0, &first)) {
                prop_assert_eq!(verify(&custom.scaled(factor).unwrap()), Ok(()));
            }
        }
    }
}

#[test]
fn scaling_by_zero_or_past_the_address_space_is_a_typed_error() {
    let plan = Plan::new(Collective::AllReduce(SUM), Algorithm::Ring, 4, 8).unwrap();
    for factor in [0, usize::MAX] {
        let error = plan.scaled(factor).unwrap_err();
        assert!(
            matches!(error, NativeCollectiveError::InvalidCollective { .. }),
            "{error}"
        );
    }
}

/// The steps of `collective`'s `algorithm` plan on `world` ranks of `len` elements.
fn steps_of(collective: Collective, algorithm: Algorithm, world: usize, len: usize) -> Vec<Step> {
    Plan::new(collective, algorithm, world, len)
        .unwrap()
        .steps()
        .to_vec()
}

#[test]
fn only_a_step_where_every_member_folds_every_other_members_same_range_is_a_clique() {
    for world in 2..=6 {
        // Direct's one-step all-reduce is a clique of the whole world, ranks ascending.
        let one = steps_of(Collective::AllReduce(SUM), Algorithm::Direct, world, 1);
        let clique = one[0].clique().unwrap();
        assert_eq!(clique.ranks, (0..world).collect::<Vec<_>>());
        assert_eq!(clique.range, 0..1);
        // No step of a ring, halving-doubling, or direct's two-step all-reduce, nor any step of
        // another collective's plan, is one.
        for collective in collectives(world) {
            for algorithm in [
                Algorithm::Ring,
                Algorithm::HalvingDoubling,
                Algorithm::Direct,
            ] {
                let len = 64 * world;
                let Ok(plan) = Plan::new(collective, algorithm, world, len) else {
                    continue;
                };
                let is_one_step_all_reduce = matches!(collective, Collective::AllReduce(_))
                    && algorithm == Algorithm::Direct
                    && plan.steps().len() == 1;
                for step in plan.steps() {
                    assert_eq!(
                        step.clique().is_some(),
                        is_one_step_all_reduce || (world == 2 && is_all_pairs(step)),
                        "{collective:?} {algorithm:?} W = {world}: {step:?}"
                    );
                }
            }
        }
    }
    let pairs = |ranks: &[usize], range: std::ops::Range<usize>| -> Vec<Transfer> {
        ranks
            .iter()
            .flat_map(|&from| ranks.iter().map(move |&to| (from, to)))
            .filter(|(from, to)| from != to)
            .map(|(from, to)| Transfer::new(from, to, range.clone()))
            .collect()
    };
    let clique = Step {
        combine: true,
        transfers: pairs(&[1, 3, 4], 2..9),
    };
    let found = clique.clique().unwrap();
    assert_eq!((found.ranks, found.range), (vec![1, 3, 4], 2..9));
    // Overwriting, a pair missing, a pair twice, a range that differs, or one landing elsewhere:
    // not a clique.
    let mut overwriting = clique.clone();
    overwriting.combine = false;
    let mut missing = clique.clone();
    missing.transfers.pop();
    let mut twice = missing.clone();
    twice.transfers.push(twice.transfers[0].clone());
    let mut other_range = clique.clone();
    other_range.transfers[2].range = 2..8;
    let mut elsewhere = clique.clone();
    elsewhere.transfers[1].at = 3;
    let mut local = clique.clone();
    local.transfers[0].to = local.transfers[0].from;
    let empty = Step {
        combine: true,
        transfers: pairs(&[0, 1], 4..4),
    };
    for step in [
        overwriting,
        missing,
        twice,
        other_range,
        elsewhere,
        local,
        empty,
    ] {
        assert_eq!(step.clique(), None, "{step:?}");
    }
}

/// Whether `step` is the two transfers of one range between ranks 0 and 1, combining.
fn is_all_pairs(step: &Step) -> bool {
    step.combine
        && step.transfers.len() == 2
        && step.transfers[0].range == step.transfers[1].range
        && step
            .transfers
            .iter()
            .all(|t| t.at == t.range.start && t.from != t.to)
}

#[test]
fn a_model_that_fuses_cliques_prices_them_as_one_pass_over_each_members_memory() {
    let shared = LinkModel::new(0.12e-6, 24e9, Links::Shared).unwrap();
    let fused = shared.with_fused_cliques();
    assert!(fused.fuses_cliques() && !shared.fuses_cliques());
    let input = TensorInfo {
        len: 1 << 20,
        element: ElementType::F32,
    };
    let all_reduce = Collective::AllReduce(SUM);
    for world in [2, 4, 8, 16] {
        // Unfused, every pair's whole tensor and the copies aside: direct takes two steps at a
        // megabyte (from W = 7 the traffic bound refuses the one step: W/2 > 3 times the
        // ring's link traffic). Fused, the one step reads and writes each member once, which is
        // what the bound counts of it too: direct takes it at any W.
        let plain = Plan::with_model(all_reduce, Algorithm::Direct, world, input, &shared).unwrap();
        assert_eq!(plain.steps().len(), 2, "W = {world}");
        let one = Plan::with_model(all_reduce, Algorithm::Direct, world, input, &fused).unwrap();
        assert_eq!(one.steps().len(), 1, "W = {world}");
        let one_step_time = fused.plan_time(&one, 4);
        let expected = fused.step_time(world, (world * input.len * 4) as u64);
        assert!(
            (one_step_time - expected).abs() < 1e-12,
            "{one_step_time} {expected}"
        );
        // Auto takes it: no other plan moves less of this device's memory.
        let auto = Plan::with_model(all_reduce, Algorithm::Auto, world, input, &fused).unwrap();
        assert_eq!(auto.steps(), one.steps(), "W = {world}");
    }
    // On per-rank links the flag changes nothing: the pairs' transfers cross the links, and the
    // bound counts them, so from W = 7 direct takes two steps even at a few elements.
    let per_rank = LinkModel::new(2e-6, 24e9, Links::PerRank).unwrap();
    let plan = Plan::with_model(all_reduce, Algorithm::Direct, 4, input, &per_rank).unwrap();
    assert_eq!(
        per_rank.plan_time(&plan, 4),
        per_rank.with_fused_cliques().plan_time(&plan, 4)
    );
    let small = TensorInfo { len: 64, ..input };
    for model in [per_rank, per_rank.with_fused_cliques(), shared] {
        let eight = Plan::with_model(all_reduce, Algorithm::Direct, 8, small, &model).unwrap();
        assert_eq!(eight.steps().len(), 2, "{model:?}");
    }
    let eight = Plan::with_model(all_reduce, Algorithm::Direct, 8, small, &fused).unwrap();
    assert_eq!(eight.steps().len(), 1);
}
