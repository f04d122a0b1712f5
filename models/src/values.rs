//! Inputs and the outputs every collective must deliver. Every element is a small positive
//! integer that depends on the rank and the generation, so a result betrays the generation (and,
//! for all-gather and broadcast, the ranks) it was computed from: a rank handed another
//! generation's data is caught by value.

use ruccl_core::{Collective, ReduceOperation};
use ruccl_sim::conformance::reference::reduce_integers;

/// Element `index` of `rank`'s input in `generation`.
pub fn element(rank: usize, generation: u64, index: usize) -> i64 {
    // Small enough that W = 8 products stay exact for the first generations; later ones wrap
    // (the simulated device and the reference both wrap) and stay distinct in practice.
    let generation = i64::try_from(generation).unwrap_or(i64::MAX / 16);
    let rank = i64::try_from(rank).unwrap_or(0);
    let index = i64::try_from(index).unwrap_or(0);
    1 + index + 3 * rank + 7 * generation
}

/// `rank`'s input in `generation`: `length` elements.
pub fn input(rank: usize, generation: u64, length: usize) -> Vec<i64> {
    (0..length)
        .map(|index| element(rank, generation, index))
        .collect()
}

/// A reduce operation per generation: all five cycle, so a result also betrays an operation mixed
/// up between generations.
pub fn operation(generation: u64) -> ReduceOperation {
    let all = ReduceOperation::ALL;
    let index = usize::try_from(generation % all.len() as u64).unwrap_or(0);
    all[index]
}

/// The reduction of every rank's input of `generation` under `operation`, as the simulated
/// device computes it on `i64`: the sim crate's reference
/// ([`reduce_integers`]: wrapping `Sum` and `Product`, `Mean` = wrapping sum divided by the
/// world, rounded toward zero).
pub fn reduction(
    operation: ReduceOperation,
    world: usize,
    generation: u64,
    length: usize,
) -> Vec<i64> {
    let mut column = Vec::with_capacity(world);
    (0..length)
        .map(|index| {
            column.clear();
            column.extend((0..world).map(|rank| element(rank, generation, index)));
            reduce_integers(&column, operation, 64)
        })
        .collect()
}

/// What every rank receives from `collective` over `world` ranks' inputs of `generation`, each
/// `length` elements long, in rank order — the contract of DESIGN.md, computed sequentially:
/// all-reduce, the reduction; reduce-scatter, block `r` of it; all-gather, every input in rank
/// order; broadcast, the root's input; reduce and gather, those at the root and nothing
/// elsewhere; scatter, block `r` of the root's input; all-to-all, block `r` of every input. A collective that cannot run on these inputs (a root
/// outside the world, a length not divisible by the world) has no outputs: empty.
pub fn outputs(
    collective: Collective,
    world: usize,
    generation: u64,
    length: usize,
) -> Vec<Vec<i64>> {
    match collective {
        Collective::AllReduce(operation) => {
            vec![reduction(operation, world, generation, length); world]
        }
        Collective::ReduceScatter(operation) => {
            if world == 0 || length % world != 0 {
                return Vec::new();
            }
            let reduced = reduction(operation, world, generation, length);
            let block = length / world;
            (0..world)
                .map(|rank| reduced[rank * block..(rank + 1) * block].to_vec())
                .collect()
        }
        Collective::AllGather => {
            let gathered: Vec<i64> = (0..world)
                .flat_map(|rank| input(rank, generation, length))
                .collect();
            vec![gathered; world]
        }
        Collective::Broadcast { root } if root < world => {
            vec![input(root, generation, length); world]
        }
        Collective::Reduce { op, root } if root < world => {
            let reduced = reduction(op, world, generation, length);
            (0..world)
                .map(|rank| {
                    if rank == root {
                        reduced.clone()
                    } else {
                        Vec::new()
                    }
                })
                .collect()
        }
        Collective::Gather { root } if root < world => {
            let gathered: Vec<i64> = (0..world)
                .flat_map(|rank| input(rank, generation, length))
                .collect();
            (0..world)
                .map(|rank| {
                    if rank == root {
                        gathered.clone()
                    } else {
                        Vec::new()
                    }
                })
                .collect()
        }
        Collective::Scatter { root } if root < world && length % world == 0 => {
            let whole = input(root, generation, length);
            let block = length / world;
            (0..world)
                .map(|rank| whole[rank * block..(rank + 1) * block].to_vec())
                .collect()
        }
        Collective::AllToAll if world > 0 && length % world == 0 => {
            let block = length / world;
            let inputs: Vec<Vec<i64>> = (0..world)
                .map(|rank| input(rank, generation, length))
                .collect();
            (0..world)
                .map(|rank| {
                    inputs
                        .iter()
                        .flat_map(|values| values[rank * block..(rank + 1) * block].to_vec())
                        .collect()
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_of_different_generations_differ() {
        for operation in ReduceOperation::ALL {
            for world in 1..=8 {
                let first = reduction(operation, world, 3, 4);
                let second = reduction(operation, world, 4, 4);
                assert_ne!(first, second, "{operation} W={world}");
            }
        }
    }

    #[test]
    fn mean_rounds_toward_zero() {
        // Ranks 0 and 1, element 0 of generation 0: 1 and 4; the mean 2.5 rounds to 2.
        assert_eq!(reduction(ReduceOperation::Mean, 2, 0, 1), vec![2]);
    }

    #[test]
    fn reduce_scatter_hands_each_rank_its_block_of_the_reduction() {
        let sum = reduction(ReduceOperation::Sum, 3, 1, 6);
        let blocks = outputs(Collective::ReduceScatter(ReduceOperation::Sum), 3, 1, 6);
        assert_eq!(blocks.concat(), sum);
        assert_eq!(blocks.len(), 3);
        assert!(blocks.iter().all(|block| block.len() == 2));
    }

    #[test]
    fn zero_length_reduce_scatter_gives_every_rank_an_empty_block() {
        let blocks = outputs(Collective::ReduceScatter(ReduceOperation::Sum), 3, 0, 0);
        assert_eq!(blocks, vec![Vec::<i64>::new(); 3]);
    }

    #[test]
    fn all_gather_and_broadcast_betray_the_ranks_they_came_from() {
        let gathered = outputs(Collective::AllGather, 2, 0, 2);
        assert_eq!(gathered[1], vec![1, 2, 4, 5]);
        let broadcast = outputs(Collective::Broadcast { root: 1 }, 2, 0, 2);
        assert_eq!(broadcast[0], vec![4, 5]);
        assert!(outputs(Collective::Broadcast { root: 2 }, 2, 0, 2).is_empty());
    }
}
