//! Inputs whose all-reduce is exact in every element type, and the reference result.
//!
//! Every input element is a small integer, chosen per operation so that every partial result of
//! the ring (whatever order it combines in) is an integer that f16 and bf16 represent exactly:
//! sums stay within ±256 for up to 32 ranks, products are powers of two up to 2⁸, minima and
//! maxima are inputs. Mean's reference applies the kernel's scaling exactly as `mean.cu` does it
//! (the reciprocal of the world size in the compute type, one rounding), so the comparison can be
//! exact: `#wrong` counts elements whose bits differ.

use half::{bf16, f16};
use ruccl_core::ReduceOperation;
use ruccl_sim::host::{ElementType, HostValues};

/// The integer rank `rank` contributes at index `index` for `operation`.
pub fn input_integer(operation: ReduceOperation, rank: usize, index: usize) -> i64 {
    let (rank, index) = (rank as i64, index as i64);
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => index % 7 - 3 + rank % 3,
        ReduceOperation::Product => {
            let magnitude = if rank < 8 && (index + rank) % 3 == 0 {
                2
            } else {
                1
            };
            if rank == 0 && index % 5 == 0 {
                -magnitude
            } else {
                magnitude
            }
        }
        ReduceOperation::Min | ReduceOperation::Max => (index * 7 + rank * 13) % 61 - 30,
    }
}

/// Rank `rank`'s input: `len` elements of `element_type`.
pub fn rank_values(
    element_type: ElementType,
    operation: ReduceOperation,
    rank: usize,
    len: usize,
) -> HostValues {
    integers_as(
        element_type,
        (0..len).map(|index| input_integer(operation, rank, index)),
    )
}

/// What every rank must hold after all-reducing [`rank_values`] over `world` ranks.
pub fn expected_values(
    element_type: ElementType,
    operation: ReduceOperation,
    world: usize,
    len: usize,
) -> HostValues {
    let reduced: Vec<i64> = (0..len)
        .map(|index| {
            let inputs = (0..world).map(|rank| input_integer(operation, rank, index));
            match operation {
                ReduceOperation::Sum | ReduceOperation::Mean => inputs.sum(),
                ReduceOperation::Product => inputs.product(),
                ReduceOperation::Min => inputs.min().unwrap_or(0),
                ReduceOperation::Max => inputs.max().unwrap_or(0),
            }
        })
        .collect();
    if operation != ReduceOperation::Mean || world <= 1 {
        return integers_as(element_type, reduced.into_iter());
    }
    let world_i64 = world as i64;
    let reciprocal_f32 = 1.0_f32 / world as f32;
    let reciprocal_f64 = 1.0_f64 / world as f64;
    match element_type {
        ElementType::F32 => HostValues::F32(
            reduced
                .iter()
                .map(|&sum| sum as f32 * reciprocal_f32)
                .collect(),
        ),
        ElementType::F64 => HostValues::F64(
            reduced
                .iter()
                .map(|&sum| sum as f64 * reciprocal_f64)
                .collect(),
        ),
        ElementType::F16 => HostValues::F16(
            reduced
                .iter()
                .map(|&sum| f16::from_f32(sum as f32 * reciprocal_f32))
                .collect(),
        ),
        ElementType::BF16 => HostValues::BF16(
            reduced
                .iter()
                .map(|&sum| bf16::from_f32(sum as f32 * reciprocal_f32))
                .collect(),
        ),
        ElementType::I32 => HostValues::I32(
            reduced
                .iter()
                .map(|&sum| (sum / world_i64) as i32)
                .collect(),
        ),
        ElementType::I64 => HostValues::I64(reduced.iter().map(|&sum| sum / world_i64).collect()),
    }
}

/// Small integers as values of `element_type` (exact for every value this module makes).
fn integers_as(element_type: ElementType, values: impl Iterator<Item = i64>) -> HostValues {
    match element_type {
        ElementType::F32 => HostValues::F32(values.map(|v| v as f32).collect()),
        ElementType::F64 => HostValues::F64(values.map(|v| v as f64).collect()),
        ElementType::F16 => HostValues::F16(values.map(|v| f16::from_f32(v as f32)).collect()),
        ElementType::BF16 => HostValues::BF16(values.map(|v| bf16::from_f32(v as f32)).collect()),
        ElementType::I32 => HostValues::I32(values.map(|v| v as i32).collect()),
        ElementType::I64 => HostValues::I64(values.collect()),
    }
}

/// Elements of `actual` whose bits differ from `expected` (or that are missing or extra, or all
/// of them when the element types differ).
pub fn count_wrong(actual: &HostValues, expected: &HostValues) -> usize {
    fn differing<T, B: PartialEq>(a: &[T], b: &[T], bits: impl Fn(&T) -> B) -> usize {
        let compared = a.iter().zip(b).filter(|(x, y)| bits(x) != bits(y)).count();
        compared + a.len().abs_diff(b.len())
    }
    match (actual, expected) {
        (HostValues::F32(a), HostValues::F32(b)) => differing(a, b, |v| v.to_bits()),
        (HostValues::F64(a), HostValues::F64(b)) => differing(a, b, |v| v.to_bits()),
        (HostValues::F16(a), HostValues::F16(b)) => differing(a, b, |v| v.to_bits()),
        (HostValues::BF16(a), HostValues::BF16(b)) => differing(a, b, |v| v.to_bits()),
        (HostValues::I32(a), HostValues::I32(b)) => differing(a, b, |v| *v),
        (HostValues::I64(a), HostValues::I64(b)) => differing(a, b, |v| *v),
        _ => actual.len().max(expected.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_results_stay_exact_in_bf16() {
        for operation in ReduceOperation::ALL {
            for world in 1..=32 {
                for index in 0..64 {
                    let mut partial = input_integer(operation, 0, index);
                    for rank in 1..world {
                        let value = input_integer(operation, rank, index);
                        partial = match operation {
                            ReduceOperation::Sum | ReduceOperation::Mean => partial + value,
                            ReduceOperation::Product => partial * value,
                            ReduceOperation::Min => partial.min(value),
                            ReduceOperation::Max => partial.max(value),
                        };
                        let as_bf16 = bf16::from_f32(partial as f32).to_f32() as i64;
                        assert_eq!(as_bf16, partial, "{operation} world {world} index {index}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_reference_sums_every_rank() {
        let expected = expected_values(ElementType::I32, ReduceOperation::Sum, 3, 4);
        let manual: Vec<i32> = (0..4)
            .map(|i| {
                (0..3)
                    .map(|r| input_integer(ReduceOperation::Sum, r, i) as i32)
                    .sum()
            })
            .collect();
        assert_eq!(expected, HostValues::I32(manual));
    }

    #[test]
    fn integer_mean_truncates_toward_zero() {
        let world = 4;
        let sums: Vec<i64> = (0..7)
            .map(|i| {
                (0..world)
                    .map(|r| input_integer(ReduceOperation::Mean, r, i))
                    .sum()
            })
            .collect();
        assert!(
            sums.iter().any(|sum| sum % 4 != 0 && *sum < 0),
            "covers negative remainders"
        );
        let HostValues::I64(means) =
            expected_values(ElementType::I64, ReduceOperation::Mean, world, 7)
        else {
            panic!("wrong type");
        };
        for (sum, mean) in sums.iter().zip(&means) {
            assert_eq!(*mean, sum / 4);
        }
    }

    #[test]
    fn float_mean_scales_by_the_reciprocal_in_the_compute_type() {
        let world = 3;
        let sum: i64 = (0..world)
            .map(|r| input_integer(ReduceOperation::Mean, r, 1))
            .sum();
        let HostValues::F32(means) =
            expected_values(ElementType::F32, ReduceOperation::Mean, world, 2)
        else {
            panic!("wrong type");
        };
        assert_eq!(means[1], sum as f32 * (1.0 / 3.0_f32));
        let HostValues::BF16(means) =
            expected_values(ElementType::BF16, ReduceOperation::Mean, world, 2)
        else {
            panic!("wrong type");
        };
        assert_eq!(means[1], bf16::from_f32(sum as f32 * (1.0 / 3.0_f32)));
    }

    #[test]
    fn a_world_of_one_returns_its_input_even_for_mean() {
        for operation in ReduceOperation::ALL {
            assert_eq!(
                expected_values(ElementType::F16, operation, 1, 9),
                rank_values(ElementType::F16, operation, 0, 9)
            );
        }
    }

    #[test]
    fn wrong_elements_are_counted_by_bits() {
        let expected = HostValues::F32(vec![1.0, 2.0, 0.0]);
        assert_eq!(count_wrong(&expected, &expected), 0);
        assert_eq!(
            count_wrong(&HostValues::F32(vec![1.0, 2.5, -0.0]), &expected),
            2
        );
        assert_eq!(count_wrong(&HostValues::F32(vec![1.0]), &expected), 2);
        assert_eq!(count_wrong(&HostValues::I32(vec![1, 2, 0]), &expected), 3);
    }
}
