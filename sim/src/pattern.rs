//! The perf check: inputs whose all-reduce every element type computes exactly, and a streaming
//! count of the elements that differ (`#wrong` in the perf tool's table).
//!
//! Every input element is a small integer, chosen per operation so that every partial result of
//! the ring, in whatever order a device combines, is an integer that even bf16 represents
//! exactly, for up to [`MAX_CHECKED_WORLD`] ranks: sums stay within ±4·W, a product has at most one
//! factor of 2 and one of −1, minima and maxima are inputs. So every result but `Mean`'s is exact
//! and compared bit for bit (as a value); `Mean` divides an exact sum by `W` once and is allowed
//! the element type's rounding (one unit in the last place), whether a device divides or multiplies
//! by a rounded `1/W`.
//!
//! The pattern is periodic in the index, so the reference is one period long and generating or
//! checking hundreds of megabytes stays a streaming pass. It is the
//! [conformance reference](crate::conformance::reference) specialised to these inputs: exact
//! where that one allows rounding (these results have none), and one period long.

use crate::conformance::reference::{epsilon, reduce_integer_column, reduce_integers};
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::ReduceOperation;

/// The largest world the check is exact for (bf16 holds integers up to 256 exactly).
pub const MAX_CHECKED_WORLD: usize = 64;

/// The period of the pattern, in elements, for `operation`.
fn period(operation: ReduceOperation) -> usize {
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => 9,
        ReduceOperation::Product => 40,
        ReduceOperation::Min | ReduceOperation::Max => 61,
    }
}

/// The integer rank `rank` contributes at `index` for `operation`.
pub fn input_integer(operation: ReduceOperation, rank: usize, index: usize) -> i64 {
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => ((index + 3 * rank) % 9) as i64 - 4,
        ReduceOperation::Product => {
            // At most one of ranks 0..8 doubles an index, and only rank 0 negates.
            let magnitude = if rank < 8 && (index + rank) % 8 == 0 {
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
        ReduceOperation::Min | ReduceOperation::Max => ((index * 7 + rank * 13) % 61) as i64 - 30,
    }
}

/// The exact reduction at `index` over `world` ranks, as a real number (`Mean` not rounded).
fn reduced(operation: ReduceOperation, world: usize, index: usize) -> f64 {
    let column: Vec<i64> = (0..world)
        .map(|rank| input_integer(operation, rank, index))
        .collect();
    match operation {
        ReduceOperation::Mean => column.iter().sum::<i64>() as f64 / world.max(1) as f64,
        // Far from wrapping: |sums| ≤ 4·W, |products| ≤ 2.
        _ => reduce_integers(&column, operation, 64) as f64,
    }
}

/// Rank `rank`'s input: `length` elements of `element_type`.
pub fn input(
    element_type: ElementType,
    operation: ReduceOperation,
    rank: usize,
    length: usize,
) -> HostValues {
    let one_period: Vec<i64> = (0..period(operation))
        .map(|index| input_integer(operation, rank, index))
        .collect();
    // Streamed into the element type: a sweep's largest input is hundreds of megabytes.
    let repeated = one_period.iter().copied().cycle().take(length);
    match element_type {
        ElementType::F32 => HostValues::F32(repeated.map(|value| value as f32).collect()),
        ElementType::F64 => HostValues::F64(repeated.map(|value| value as f64).collect()),
        ElementType::F16 => {
            HostValues::F16(repeated.map(|value| f16::from_f64(value as f64)).collect())
        }
        ElementType::BF16 => {
            HostValues::BF16(repeated.map(|value| bf16::from_f64(value as f64)).collect())
        }
        ElementType::I32 => HostValues::I32(repeated.map(|value| value as i32).collect()),
        ElementType::I64 => HostValues::I64(repeated.collect()),
        ElementType::I8 => HostValues::I8(repeated.map(|value| value as i8).collect()),
        ElementType::U8 => HostValues::U8(repeated.map(|value| value as u8).collect()),
        ElementType::U32 => HostValues::U32(repeated.map(|value| value as u32).collect()),
        ElementType::U64 => HostValues::U64(repeated.map(|value| value as u64).collect()),
        // A type this crate does not know: f64 values, which the check counts as all wrong.
        _ => HostValues::F64(repeated.map(|value| value as f64).collect()),
    }
}

/// What every rank must hold after an all-reduce of [`input`]s over `world` ranks.
#[derive(Clone, Debug)]
pub struct Expected {
    element_type: ElementType,
    operation: ReduceOperation,
    /// One period of exact results.
    period: Vec<f64>,
}

impl Expected {
    /// The reference for `world` ranks reducing `element_type` with `operation`.
    pub fn new(element_type: ElementType, operation: ReduceOperation, world: usize) -> Self {
        let period = (0..period(operation))
            .map(|index| reference_value(element_type, operation, world, index))
            .collect();
        Self {
            element_type,
            operation,
            period,
        }
    }

    /// The expected value at `index`.
    pub fn at(&self, index: usize) -> f64 {
        self.period[index % self.period.len()]
    }

    /// How far an element may be from [`at`](Self::at): 0 but for floating-point `Mean`, which
    /// may be off by the element type's rounding.
    fn tolerance(&self, expected: f64) -> f64 {
        if self.operation != ReduceOperation::Mean || !self.element_type.is_float() {
            return 0.0;
        }
        epsilon(self.element_type) * expected.abs()
    }

    /// The number of elements of `values` that differ from the reference (a length or element
    /// type mismatch makes every element of the longer of the two wrong).
    pub fn count_wrong(&self, values: &HostValues, length: usize) -> u64 {
        if values.element_type() != self.element_type || values.len() != length {
            return length.max(values.len()) as u64;
        }
        let wrong = match values {
            HostValues::F32(values) => self.count(values, |&value| f64::from(value)),
            HostValues::F64(values) => self.count(values, |&value| value),
            HostValues::F16(values) => self.count(values, |&value| f64::from(value)),
            HostValues::BF16(values) => self.count(values, |&value| f64::from(value)),
            HostValues::I32(values) => self.count(values, |&value| f64::from(value)),
            HostValues::I64(values) => self.count(values, |&value| value as f64),
            HostValues::I8(values) => self.count(values, |&value| f64::from(value)),
            HostValues::U8(values) => self.count(values, |&value| f64::from(value)),
            HostValues::U32(values) => self.count(values, |&value| f64::from(value)),
            HostValues::U64(values) => self.count(values, |&value| value as f64),
        };
        wrong as u64
    }

    fn count<T>(&self, values: &[T], widen: impl Fn(&T) -> f64) -> usize {
        let tolerances: Vec<f64> = self
            .period
            .iter()
            .map(|&value| self.tolerance(value))
            .collect();
        values
            .chunks(self.period.len())
            .map(|chunk| {
                chunk
                    .iter()
                    .zip(self.period.iter().zip(&tolerances))
                    .filter(|(value, (expected, tolerance))| {
                        let distance = (widen(value) - **expected).abs();
                        // A NaN distance is never within tolerance.
                        distance.is_nan() || distance > **tolerance
                    })
                    .count()
            })
            .sum()
    }
}

/// The exact result rounded as the element type stores it (integer `Mean` toward zero).
fn reference_value(
    element_type: ElementType,
    operation: ReduceOperation,
    world: usize,
    index: usize,
) -> f64 {
    let exact = reduced(operation, world, index);
    match element_type {
        ElementType::F32 => f64::from(exact as f32),
        ElementType::F64 => exact,
        ElementType::F16 => f64::from(f16::from_f64(exact)),
        ElementType::BF16 => f64::from(bf16::from_f64(exact)),
        // Integers wrap in their own type (the unsigned ones hold the negative inputs modulo
        // 2^bits), so their reference is the typed reduction of the wrapped inputs.
        integer if integer.is_integer() => {
            let column: Vec<i128> = (0..world)
                .map(|rank| i128::from(input_integer(operation, rank, index)))
                .collect();
            reduce_integer_column(&column, operation, integer) as f64
        }
        _ => exact,
    }
}

#[cfg(test)]
mod tests {
    use super::{Expected, MAX_CHECKED_WORLD, input, input_integer};
    use crate::host::{ElementType, HostValues};
    use ruccl_core::ReduceOperation;

    #[test]
    fn partial_results_stay_exact_in_bf16() {
        for operation in ReduceOperation::ALL {
            for index in 0..200 {
                let mut partial: i64 = if operation == ReduceOperation::Product {
                    1
                } else {
                    0
                };
                for rank in 0..MAX_CHECKED_WORLD {
                    let value = input_integer(operation, rank, index);
                    partial = match operation {
                        ReduceOperation::Product => partial * value,
                        _ => partial + value,
                    };
                    assert!(
                        partial.abs() <= 256,
                        "{operation} {index} {rank}: {partial}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_reference_counts_wrong_elements() {
        let world = 3;
        let operation = ReduceOperation::Sum;
        let expected = Expected::new(ElementType::F32, operation, world);
        let length = 20;
        let sum: Vec<f32> = (0..length)
            .map(|index| {
                (0..world)
                    .map(|rank| input_integer(operation, rank, index) as f32)
                    .sum()
            })
            .collect();
        assert_eq!(
            expected.count_wrong(&HostValues::F32(sum.clone()), length),
            0
        );
        let mut broken = sum;
        broken[7] += 1.0;
        broken[19] = f32::NAN;
        assert_eq!(expected.count_wrong(&HostValues::F32(broken), length), 2);
        assert_eq!(
            expected.count_wrong(&HostValues::I32(vec![0; length]), length),
            20
        );
        assert_eq!(
            input(ElementType::I64, operation, 1, 4),
            HostValues::I64(vec![-1, 0, 1, 2])
        );
    }
}
