//! Inputs and the sequential reference of the all-reduce checks, and the comparison with its
//! tolerance (justified in the [module docs](super)).

use crate::host::{ElementType, HostValues};
use crate::rng::SplitMix64;
use half::{bf16, f16};
use ruccl_core::ReduceOperation;

/// One all-reduce of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Case {
    pub(crate) element_type: ElementType,
    pub(crate) operation: ReduceOperation,
    pub(crate) length: usize,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} n={}",
            self.operation, self.element_type, self.length
        )
    }
}

/// Rank `rank`'s input for case number `index` of a world's matrix: reproducible from the keys.
///
/// Floats are drawn from `[-1, 1)` (then rounded to the type), or for `Product` with a magnitude
/// in `[0.5, 2)` and a random sign, so no product of at most 8 ranks overflows or leaves the
/// normal range even in f16. Integers are half small (`-100..=100`, where rounding of `Mean` and
/// signs matter) and half arbitrary bit patterns (where wrapping matters).
pub(crate) fn input(seed: u64, world: usize, index: usize, case: Case, rank: usize) -> HostValues {
    let mut rng = SplitMix64::keyed(&[seed, world as u64, index as u64, rank as u64]);
    let length = case.length;
    let product = case.operation == ReduceOperation::Product;
    let mut float = || {
        if product {
            let magnitude = (2.0 * rng.unit() - 1.0).exp2();
            if rng.coin() { -magnitude } else { magnitude }
        } else {
            2.0 * rng.unit() - 1.0
        }
    };
    match case.element_type {
        ElementType::F32 => HostValues::F32((0..length).map(|_| float() as f32).collect()),
        ElementType::F64 => HostValues::F64((0..length).map(|_| float()).collect()),
        ElementType::F16 => HostValues::F16((0..length).map(|_| f16::from_f64(float())).collect()),
        ElementType::BF16 => {
            HostValues::BF16((0..length).map(|_| bf16::from_f64(float())).collect())
        }
        ElementType::I32 => {
            HostValues::I32((0..length).map(|_| integer(&mut rng) as i32).collect())
        }
        ElementType::I64 => HostValues::I64((0..length).map(|_| integer(&mut rng)).collect()),
    }
}

fn integer(rng: &mut SplitMix64) -> i64 {
    if rng.coin() {
        rng.below(201) as i64 - 100
    } else {
        rng.next_u64() as i64
    }
}

/// What every rank's output must be.
pub(crate) enum Expected {
    /// Integers: exactly these (an i32 case's values fit in i64).
    Exact(Vec<i64>),
    /// Floats: within `tolerance[i]` of `values[i]` (a tolerance of 0 asks for equality).
    Approx {
        values: Vec<f64>,
        tolerance: Vec<f64>,
    },
}

/// The machine epsilon of a float type (the gap from 1 to the next value), 0 for integers.
pub(crate) fn epsilon(element_type: ElementType) -> f64 {
    match element_type {
        ElementType::F32 => f64::from(f32::EPSILON),
        ElementType::F64 => f64::EPSILON,
        ElementType::F16 => (-10f64).exp2(),
        ElementType::BF16 => (-7f64).exp2(),
        ElementType::I32 | ElementType::I64 => 0.0,
    }
}

/// The sequential reference over `inputs` (one per rank, all of the case's type and length).
pub(crate) fn expected(case: Case, inputs: &[HostValues]) -> Expected {
    let world = inputs.len();
    if case.element_type.is_float() {
        expected_float(case, inputs)
    } else {
        let bits = if case.element_type == ElementType::I32 {
            32
        } else {
            64
        };
        let values = (0..case.length)
            .map(|index| {
                let column = inputs.iter().map(|input| integer_at(input, index));
                reduce_integers(column, case.operation, world, bits)
            })
            .collect();
        Expected::Exact(values)
    }
}

fn integer_at(values: &HostValues, index: usize) -> i64 {
    match values {
        HostValues::I32(values) => values.get(index).map_or(0, |&v| i64::from(v)),
        HostValues::I64(values) => values.get(index).copied().unwrap_or(0),
        _ => 0,
    }
}

/// Wrap `value` to a two's complement integer of `bits` bits.
fn wrap(value: i64, bits: u32) -> i64 {
    if bits == 32 {
        i64::from(value as i32)
    } else {
        value
    }
}

/// Reduce one element across ranks in the integers modulo `2^bits` (a commutative ring, so the
/// ring order cannot matter), `Mean` as the wrapped sum divided by the world, toward zero.
fn reduce_integers(
    column: impl Iterator<Item = i64>,
    operation: ReduceOperation,
    world: usize,
    bits: u32,
) -> i64 {
    let mut column = column;
    let first = column.next().unwrap_or(0);
    let folded = column.fold(first, |acc, value| match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => wrap(acc.wrapping_add(value), bits),
        ReduceOperation::Product => wrap(acc.wrapping_mul(value), bits),
        ReduceOperation::Min => acc.min(value),
        ReduceOperation::Max => acc.max(value),
    });
    if operation == ReduceOperation::Mean {
        folded / world.max(1) as i64
    } else {
        folded
    }
}

fn expected_float(case: Case, inputs: &[HostValues]) -> Expected {
    let world = inputs.len();
    let epsilon = epsilon(case.element_type);
    let w = world as f64;
    let mut values = Vec::with_capacity(case.length);
    let mut tolerance = Vec::with_capacity(case.length);
    let mut column = Vec::with_capacity(world);
    for index in 0..case.length {
        column.clear();
        column.extend(
            inputs
                .iter()
                .map(|input| input.get_f64(index).unwrap_or(0.0)),
        );
        let magnitude: f64 = column.iter().map(|value| value.abs()).sum();
        let (value, bound) = match case.operation {
            ReduceOperation::Sum => (compensated_sum(&column), w * epsilon * magnitude),
            ReduceOperation::Mean => {
                let mean = compensated_sum(&column) / w;
                (mean, epsilon * magnitude + epsilon * mean.abs())
            }
            ReduceOperation::Product => {
                let product: f64 = column.iter().product();
                (product, w * epsilon * product.abs())
            }
            ReduceOperation::Min => (column.iter().copied().fold(f64::INFINITY, f64::min), 0.0),
            ReduceOperation::Max => (
                column.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                0.0,
            ),
        };
        values.push(value);
        tolerance.push(bound);
    }
    Expected::Approx { values, tolerance }
}

/// Neumaier's compensated sum: the error is about one rounding of the result, independent of the
/// number of terms, so the f64 reference is far more accurate than any element type's result.
fn compensated_sum(values: &[f64]) -> f64 {
    let mut sum = 0.0f64;
    let mut compensation = 0.0f64;
    for &value in values {
        let total = sum + value;
        if sum.abs() >= value.abs() {
            compensation += (sum - total) + value;
        } else {
            compensation += (value - total) + sum;
        }
        sum = total;
    }
    sum + compensation
}

/// Compare one rank's output with the reference; `Err` describes the first mismatch and how many
/// elements are off.
pub(crate) fn compare(
    expected: &Expected,
    element_type: ElementType,
    got: &HostValues,
) -> Result<(), String> {
    if got.element_type() != element_type {
        return Err(format!(
            "the output holds {} elements, the input {}",
            got.element_type(),
            element_type
        ));
    }
    let length = match expected {
        Expected::Exact(values) => values.len(),
        Expected::Approx { values, .. } => values.len(),
    };
    if got.len() != length {
        return Err(format!(
            "the output has {} elements, the inputs {length}",
            got.len()
        ));
    }
    let mut first = None;
    let mut wrong = 0usize;
    for index in 0..length {
        let mismatch = match expected {
            Expected::Exact(values) => {
                let actual = integer_at(got, index);
                (actual != values[index])
                    .then(|| format!("expected {}, got {actual}", values[index]))
            }
            Expected::Approx { values, tolerance } => {
                let actual = got.get_f64(index).unwrap_or(f64::NAN);
                let error = (actual - values[index]).abs();
                // A NaN error (a NaN or infinite output) is never within the bound.
                let within = error <= tolerance[index];
                (!within).then(|| {
                    format!(
                        "expected {} ± {:e}, got {actual} (off by {error:e})",
                        values[index], tolerance[index]
                    )
                })
            }
        };
        if let Some(mismatch) = mismatch {
            wrong += 1;
            first.get_or_insert_with(|| format!("element {index}: {mismatch}"));
        }
    }
    match first {
        None => Ok(()),
        Some(first) => Err(format!(
            "{wrong} of {length} elements wrong; first at {first}"
        )),
    }
}
