//! Inputs and their reference reductions. Every element is a small positive integer that depends
//! on the rank and the generation, so a result betrays the generation it was computed from: a rank
//! handed another generation's data is caught by value.

use ruccl_core::ReduceOperation;
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

/// The operation every rank uses in `generation` (unless a scenario makes them disagree): all
/// five cycle, so a result also betrays an operation mixed up between generations.
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
}
