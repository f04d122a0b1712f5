//! The sequential all-reduce reference and the comparison with it: what the conformance suite,
//! the fuzz targets and the tests check a device's outputs against.
//!
//! ## Tolerance
//!
//! Per element, with `ε` the element type's machine epsilon ([`epsilon`]: 2⁻²³ f32, 2⁻⁵² f64,
//! 2⁻¹⁰ f16, 2⁻⁷ bf16), `W` the world and `ref` computed in f64 (sums compensated):
//!
//! | operation        | integers                         | floats                                |
//! |------------------|----------------------------------|---------------------------------------|
//! | `Sum`            | exact, wrapping                  | `\|got − ref\| ≤ W·ε·Σ\|xᵢ\|`           |
//! | `Mean`           | wrapping sum / W, toward zero    | `≤ ε·Σ\|xᵢ\| + ε·\|ref\|`               |
//! | `Product`        | exact, wrapping                  | `≤ W·ε·\|ref\|`                         |
//! | `Min`, `Max`     | exact                            | exact (a NaN loses to a number)       |
//!
//! Integers: the integers modulo 2^k form a commutative ring, so no combining order changes a
//! wrapped `Sum` or `Product`; `Mean` divides the wrapped sum by `W`, rounding toward zero (Rust's
//! and C's integer division). Floats: summing `W` terms in any order rounds `W−1` times, each with
//! relative error at most `u = ε/2` of a partial sum bounded by `Σ|xᵢ|`, so any association order
//! (ring, tree, a wider accumulator rounded once) stays within `(W−1)·u·Σ|xᵢ|`; a product rounds
//! `W−1` times with relative error `u` each; `Mean` adds the scaling, whether a device divides by
//! `W` (one rounding) or multiplies by a rounded `1/W` (two). The bounds allow about twice that,
//! which covers the f64 reference's own rounding for f64 elements. A device that forgets the
//! `Mean` scaling, drops a rank's contribution or combines twice is off by at least one input's
//! magnitude, far outside these bounds.
//!
//! ## Where the bounds hold
//!
//! The argument needs every rounding to be relative: no overflow, no partial result in the
//! subnormals. [`FloatDomain`] names inputs for which that is so at up to 64 ranks, even in f16:
//! sum terms of magnitude 0 or `[2⁻¹⁰, 512]`, multiples of 2⁻¹⁰ (no sum of 64 overflows f16, and a
//! non-zero sum is at least 2⁻¹⁰, so a `Mean` landing in f16's subnormals is off by at most
//! 2⁻²⁵ ≤ ε·Σ|xᵢ|); product factors `±(1 + j/1024)·2ᵈ` with `j < 16` and exponents whose running
//! sum over the ranks stays in `[-3, 3]`, so every partial product of consecutive ranks, in any
//! rotation, lies within `[2⁻⁹, 2¹²)`. `Min` and `Max` take any bit pattern, NaNs, infinities and
//! signed zeros included: they are exact. The conformance suite's own inputs (sums in `[-1, 1)`,
//! factors of magnitude `[0.5, 2)`, at most 8 ranks) stay within the bounds too.

use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::ReduceOperation;
use std::fmt;

/// What every rank's output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// Integers: exactly these (i32 values widened to i64).
    Exact(Vec<i64>),
    /// Float `Min`/`Max`: exactly these values (NaN: every input was NaN); signed zeros compare
    /// equal, since which zero wins a tie is not specified.
    Selected(Vec<f64>),
    /// Float `Sum`, `Mean`, `Product`: within `tolerance[i]` of `values[i]`.
    Approx {
        /// The f64 reference.
        values: Vec<f64>,
        /// The per-element bound.
        tolerance: Vec<f64>,
    },
}

impl Expected {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Expected::Exact(values) => values.len(),
            Expected::Selected(values) | Expected::Approx { values, .. } => values.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which inputs a float case may hold for its operation (see [the module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatDomain {
    /// Any bit pattern (`Min`, `Max`).
    Any,
    /// 0 or a multiple of 2⁻¹⁰ of magnitude `[2⁻¹⁰, 512]` (`Sum`, `Mean`).
    Terms,
    /// `±(1 + j/1024)·2ᵈ`, `j < 16`, running exponent in `[-3, 3]`, or 0 (`Product`).
    Factors,
}

impl FloatDomain {
    /// The domain of `operation`.
    pub fn of(operation: ReduceOperation) -> Self {
        match operation {
            ReduceOperation::Min | ReduceOperation::Max => FloatDomain::Any,
            ReduceOperation::Sum | ReduceOperation::Mean => FloatDomain::Terms,
            ReduceOperation::Product => FloatDomain::Factors,
        }
    }
}

/// The machine epsilon of a float type (the gap from 1 to the next value); 0 for integers.
pub fn epsilon(element_type: ElementType) -> f64 {
    match element_type {
        ElementType::F32 => f64::from(f32::EPSILON),
        ElementType::F64 => f64::EPSILON,
        ElementType::F16 => (-10f64).exp2(),
        ElementType::BF16 => (-7f64).exp2(),
        ElementType::I32 | ElementType::I64 => 0.0,
    }
}

/// Element `index` of an integer tensor, widened (0 for a float tensor or past the end).
pub fn integer_at(values: &HostValues, index: usize) -> i64 {
    match values {
        HostValues::I32(values) => values.get(index).map_or(0, |&value| i64::from(value)),
        HostValues::I64(values) => values.get(index).copied().unwrap_or(0),
        _ => 0,
    }
}

/// Integers as host values of `element_type`: i32 values are truncated, a float type holds
/// them rounded once ([`float_values`]).
pub fn integer_values(element_type: ElementType, values: &[i64]) -> HostValues {
    match element_type {
        ElementType::I32 => HostValues::I32(values.iter().map(|&value| value as i32).collect()),
        ElementType::I64 => HostValues::I64(values.to_vec()),
        float => {
            let values: Vec<f64> = values.iter().map(|&value| value as f64).collect();
            float_values(float, &values)
        }
    }
}

/// Values of one float type, built from f64 values and rounded once to the type (so the
/// reference reads back exactly what the device holds); an integer type gets f64 values.
pub fn float_values(element_type: ElementType, values: &[f64]) -> HostValues {
    match element_type {
        ElementType::F32 => HostValues::F32(values.iter().map(|&value| value as f32).collect()),
        ElementType::F16 => {
            HostValues::F16(values.iter().map(|&value| f16::from_f64(value)).collect())
        }
        ElementType::BF16 => {
            HostValues::BF16(values.iter().map(|&value| bf16::from_f64(value)).collect())
        }
        _ => HostValues::F64(values.to_vec()),
    }
}

/// The integer width of `element_type`'s arithmetic: 32 for i32, else 64.
fn bits(element_type: ElementType) -> u32 {
    if element_type == ElementType::I32 {
        32
    } else {
        64
    }
}

/// Reduce one column (one element across ranks) in the integers modulo `2^bits`, a commutative
/// ring, so no combining order can change the result; `Mean` is the wrapped sum divided by the
/// world, rounded toward zero.
pub fn reduce_integers(column: &[i64], operation: ReduceOperation, bits: u32) -> i64 {
    let wrap = |value: i64| {
        if bits == 32 {
            i64::from(value as i32)
        } else {
            value
        }
    };
    let Some((&first, rest)) = column.split_first() else {
        return 0;
    };
    let folded = rest.iter().fold(first, |acc, &value| match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => wrap(acc.wrapping_add(value)),
        ReduceOperation::Product => wrap(acc.wrapping_mul(value)),
        ReduceOperation::Min => acc.min(value),
        ReduceOperation::Max => acc.max(value),
    });
    if operation == ReduceOperation::Mean {
        // i64::MIN / -1 cannot happen: the world is positive.
        folded / column.len() as i64
    } else {
        folded
    }
}

/// The element-wise reduction of integer inputs (one per rank, of one length) in the arithmetic
/// of `element_type` (i32 or i64), as host values of that type.
pub fn integer_reduction(
    inputs: &[Vec<i64>],
    operation: ReduceOperation,
    element_type: ElementType,
) -> HostValues {
    let length = inputs.first().map_or(0, Vec::len);
    let mut column = Vec::with_capacity(inputs.len());
    let values: Vec<i64> = (0..length)
        .map(|index| {
            column.clear();
            column.extend(inputs.iter().map(|values| values[index]));
            reduce_integers(&column, operation, bits(element_type))
        })
        .collect();
    integer_values(element_type, &values)
}

/// The sequential reference over `inputs` (one per rank, all of one type and one length).
pub fn expected(operation: ReduceOperation, inputs: &[HostValues]) -> Expected {
    let Some(first) = inputs.first() else {
        return Expected::Exact(Vec::new());
    };
    let element_type = first.element_type();
    let length = first.len();
    let mut column = Vec::with_capacity(inputs.len());
    if !element_type.is_float() {
        let values = (0..length)
            .map(|index| {
                column.clear();
                column.extend(inputs.iter().map(|input| integer_at(input, index)));
                reduce_integers(&column, operation, bits(element_type))
            })
            .collect();
        return Expected::Exact(values);
    }
    let epsilon = epsilon(element_type);
    let world = inputs.len() as f64;
    let mut values = Vec::with_capacity(length);
    let mut tolerance = Vec::with_capacity(length);
    let mut column = Vec::with_capacity(inputs.len());
    for index in 0..length {
        column.clear();
        column.extend(
            inputs
                .iter()
                .map(|input| input.get_f64(index).unwrap_or(f64::NAN)),
        );
        let magnitude: f64 = column.iter().map(|value| value.abs()).sum();
        let (value, bound) = match operation {
            ReduceOperation::Sum => (compensated_sum(&column), world * epsilon * magnitude),
            ReduceOperation::Mean => {
                let mean = compensated_sum(&column) / world;
                (mean, epsilon * magnitude + epsilon * mean.abs())
            }
            ReduceOperation::Product => {
                let product: f64 = column.iter().product();
                (product, world * epsilon * product.abs())
            }
            ReduceOperation::Min => (select(&column, f64::min), 0.0),
            ReduceOperation::Max => (select(&column, f64::max), 0.0),
        };
        values.push(value);
        tolerance.push(bound);
    }
    match operation {
        ReduceOperation::Min | ReduceOperation::Max => Expected::Selected(values),
        _ => Expected::Approx { values, tolerance },
    }
}

/// Fold a column with `f64::min`/`max`, which let a number win over a NaN: the result is NaN
/// only if every element is.
fn select(column: &[f64], choose: fn(f64, f64) -> f64) -> f64 {
    column.iter().copied().reduce(choose).unwrap_or(f64::NAN)
}

/// Neumaier's compensated sum: off by about one rounding of the result, whatever the number of
/// terms, so the f64 reference is far more accurate than any element type's result.
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

/// How an output differs from the reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The first wrong element; `None` when the output has the wrong type or length.
    pub first: Option<usize>,
    /// How many elements are wrong (the whole length for a wrong type or length).
    pub wrong: usize,
    /// The number of elements compared.
    pub length: usize,
    /// What is wrong: the first element's expected and actual values, or the type or length.
    pub detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.first {
            Some(_) => write!(
                f,
                "{} of {} elements wrong; first at {}",
                self.wrong, self.length, self.detail
            ),
            None => f.write_str(&self.detail),
        }
    }
}

/// Compare one rank's output with the reference.
pub fn compare(
    expected: &Expected,
    element_type: ElementType,
    got: &HostValues,
) -> Result<(), Mismatch> {
    let length = expected.len();
    let whole = |detail: String| Mismatch {
        first: None,
        wrong: length.max(got.len()),
        length,
        detail,
    };
    if got.element_type() != element_type {
        return Err(whole(format!(
            "the output holds {} elements, the inputs {element_type}",
            got.element_type()
        )));
    }
    if got.len() != length {
        return Err(whole(format!(
            "the output has {} elements, the inputs {length}",
            got.len()
        )));
    }
    let mut mismatch: Option<Mismatch> = None;
    for index in 0..length {
        let wrong = match expected {
            Expected::Exact(values) => {
                let actual = integer_at(got, index);
                (actual != values[index])
                    .then(|| format!("expected {}, got {actual}", values[index]))
            }
            Expected::Selected(values) => {
                let actual = got.get_f64(index).unwrap_or(f64::NAN);
                let wanted = values[index];
                let same = if wanted.is_nan() {
                    actual.is_nan()
                } else {
                    actual == wanted
                };
                (!same).then(|| format!("expected {wanted}, got {actual}"))
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
        if let Some(wrong) = wrong {
            mismatch
                .get_or_insert_with(|| Mismatch {
                    first: Some(index),
                    wrong: 0,
                    length,
                    detail: format!("element {index}: {wrong}"),
                })
                .wrong += 1;
        }
    }
    mismatch.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::{Expected, Mismatch, compare, expected, integer_values, reduce_integers};
    use crate::host::{ElementType, HostValues};
    use half::f16;
    use ruccl_core::ReduceOperation;

    #[test]
    fn integer_mean_wraps_then_rounds_toward_zero() {
        assert_eq!(
            reduce_integers(&[i32::MAX as i64, 1, 0], ReduceOperation::Mean, 32),
            (i32::MIN / 3) as i64
        );
        assert_eq!(reduce_integers(&[-7, 0], ReduceOperation::Mean, 64), -3);
    }

    #[test]
    fn min_of_nans_and_a_number_is_the_number() {
        let inputs = [
            HostValues::F32(vec![f32::NAN]),
            HostValues::F32(vec![2.0]),
            HostValues::F32(vec![f32::NAN]),
        ];
        assert_eq!(
            expected(ReduceOperation::Min, &inputs),
            Expected::Selected(vec![2.0])
        );
        assert!(
            compare(
                &Expected::Selected(vec![f64::NAN]),
                ElementType::F32,
                &HostValues::F32(vec![f32::NAN])
            )
            .is_ok()
        );
    }

    #[test]
    fn a_sum_off_by_one_input_is_outside_the_bound() {
        let inputs = [
            HostValues::F16(vec![f16::from_f32(0.5)]),
            HostValues::F16(vec![f16::from_f32(0.25)]),
        ];
        let reference = expected(ReduceOperation::Sum, &inputs);
        let sum = HostValues::F16(vec![f16::from_f32(0.75)]);
        assert!(compare(&reference, ElementType::F16, &sum).is_ok());
        let short = HostValues::F16(vec![f16::from_f32(0.5)]);
        assert!(compare(&reference, ElementType::F16, &short).is_err());
    }

    #[test]
    fn a_mismatch_counts_every_wrong_element_and_names_the_first() {
        let reference = Expected::Exact(vec![1, 2, 3, 4]);
        let got = integer_values(ElementType::I64, &[1, 0, 3, 0]);
        let Err(mismatch) = compare(&reference, ElementType::I64, &got) else {
            panic!("two wrong elements pass");
        };
        assert_eq!((mismatch.first, mismatch.wrong), (Some(1), 2));
        assert_eq!(
            mismatch.to_string(),
            "2 of 4 elements wrong; first at element 1: expected 2, got 0"
        );
        let wrong_type = compare(&reference, ElementType::I64, &HostValues::I32(vec![1; 4]));
        assert!(matches!(wrong_type, Err(Mismatch { first: None, .. })));
    }
}
