//! The exact reference of every collective and the comparison with it, within a stated
//! tolerance: what the conformance suite, the fuzz targets and the tests check a device's outputs
//! against. (The suite's bit-for-bit reference, which runs the plan itself, is
//! [`interpret`](mod@super::interpret); this one knows nothing of plans and fold orders, so each
//! checks the other.)
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
//! | `Min`, `Max`     | exact (unsigned as unsigned)     | exact (a NaN loses to a number)       |
//!
//! All-gather and broadcast copy: their outputs are exact ([`expected_outputs`]).
//!
//! Integers (i8, i32, i64, u8, u32, u64): the integers modulo 2^k form a commutative ring, so no
//! combining order changes a wrapped `Sum` or `Product`; `Mean` divides the wrapped sum by `W`, rounding toward zero (Rust's
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
use ruccl_core::{Collective, ReduceOperation};
use std::fmt;
use std::ops::Range;

/// What every rank's output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// Integers: exactly these (narrower values widened to i64; u64 values as the i64 of the same
    /// bits, which [`integer_at`] reads them as too).
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

    /// Elements `range` of the reference (clamped to it), for one rank's share.
    pub fn slice(&self, range: Range<usize>) -> Expected {
        let clamp = |length: usize| {
            range.start.min(length)..range.end.min(length).max(range.start.min(length))
        };
        match self {
            Expected::Exact(values) => Expected::Exact(values[clamp(values.len())].to_vec()),
            Expected::Selected(values) => Expected::Selected(values[clamp(values.len())].to_vec()),
            Expected::Approx { values, tolerance } => {
                let range = clamp(values.len());
                Expected::Approx {
                    values: values[range.clone()].to_vec(),
                    tolerance: tolerance[range].to_vec(),
                }
            }
        }
    }

    /// What a copy of `values` must hold: exactly its integers, or exactly its floats (a NaN
    /// matching any NaN).
    pub fn copied(values: &HostValues) -> Expected {
        let length = values.len();
        if values.element_type().is_float() {
            Expected::Selected(
                (0..length)
                    .map(|index| values.get_f64(index).unwrap_or(f64::NAN))
                    .collect(),
            )
        } else {
            Expected::Exact((0..length).map(|index| integer_at(values, index)).collect())
        }
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
        _ => 0.0,
    }
}

/// The smallest positive (subnormal) value of a float type; 0 for integers.
pub fn smallest_subnormal(element_type: ElementType) -> f64 {
    match element_type {
        ElementType::F32 => f64::from(f32::from_bits(1)),
        ElementType::F64 => f64::from_bits(1),
        ElementType::F16 => f16::from_bits(1).to_f64(),
        ElementType::BF16 => bf16::from_bits(1).to_f64(),
        _ => 0.0,
    }
}

/// Element `index` of an integer tensor, widened to i64 (u64 values as the i64 of the same
/// bits); 0 for a float tensor or past the end.
pub fn integer_at(values: &HostValues, index: usize) -> i64 {
    values.get_integer(index).map_or(0, |value| value as i64)
}

/// Integers as host values of `element_type`: narrower types keep the low bits (two's
/// complement), a float type holds them rounded once ([`float_values`]).
pub fn integer_values(element_type: ElementType, values: &[i64]) -> HostValues {
    match element_type {
        ElementType::I32 => HostValues::I32(values.iter().map(|&value| value as i32).collect()),
        ElementType::I64 => HostValues::I64(values.to_vec()),
        ElementType::I8 => HostValues::I8(values.iter().map(|&value| value as i8).collect()),
        ElementType::U8 => HostValues::U8(values.iter().map(|&value| value as u8).collect()),
        ElementType::U32 => HostValues::U32(values.iter().map(|&value| value as u32).collect()),
        ElementType::U64 => HostValues::U64(values.iter().map(|&value| value as u64).collect()),
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

/// `value` modulo 2^bits of an integer `element_type`, in that type's range (two's complement
/// for the signed types); a float type leaves it unchanged.
pub fn wrap_integer(element_type: ElementType, value: i128) -> i128 {
    if !element_type.is_integer() {
        return value;
    }
    let bits = element_type.bits();
    let modulus = 1i128 << bits;
    let low = value.rem_euclid(modulus);
    if !element_type.is_unsigned() && low >= modulus / 2 {
        low - modulus
    } else {
        low
    }
}

/// Reduce one column (one element across ranks, each a value of the integer `element_type`) in
/// that type's arithmetic: `Sum` and `Product` modulo 2^bits (a commutative ring, so no combining
/// order can change them), `Min` and `Max` as the type orders its values (unsigned types as
/// unsigned), `Mean` the wrapped sum divided by the world, rounded toward zero. An empty column
/// reduces to 0.
pub fn reduce_integer_column(
    column: &[i128],
    operation: ReduceOperation,
    element_type: ElementType,
) -> i128 {
    let wrap = |value: i128| wrap_integer(element_type, value);
    let Some((&first, rest)) = column.split_first() else {
        return 0;
    };
    let folded = rest
        .iter()
        .fold(wrap(first), |acc, &value| match operation {
            ReduceOperation::Sum | ReduceOperation::Mean => wrap(acc + wrap(value)),
            // Operands below 2^64 in magnitude: the i128 product wraps modulo 2^128, a multiple of
            // every element type's modulus, so the wrapped result is exact.
            ReduceOperation::Product => wrap(acc.wrapping_mul(wrap(value))),
            ReduceOperation::Min => acc.min(wrap(value)),
            ReduceOperation::Max => acc.max(wrap(value)),
        });
    if operation == ReduceOperation::Mean {
        // `/` truncates toward zero; the world is positive.
        folded / column.len() as i128
    } else {
        folded
    }
}

/// The signed integer type of `bits` bits (32: i32, else i64), for [`reduce_integers`].
fn signed_type(bits: u32) -> ElementType {
    if bits == 32 {
        ElementType::I32
    } else {
        ElementType::I64
    }
}

/// Reduce one column (one element across ranks) in the signed integers modulo `2^bits` (32 or
/// 64), as [`reduce_integer_column`] does for i32 or i64.
pub fn reduce_integers(column: &[i64], operation: ReduceOperation, bits: u32) -> i64 {
    let column: Vec<i128> = column.iter().map(|&value| i128::from(value)).collect();
    reduce_integer_column(&column, operation, signed_type(bits)) as i64
}

/// The element-wise reduction of integer inputs (one per rank, of one length, each value taken
/// modulo 2^bits of `element_type`) in the arithmetic of the integer `element_type`, as host
/// values of that type.
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
            column.extend(inputs.iter().map(|values| i128::from(values[index])));
            reduce_integer_column(&column, operation, element_type) as i64
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
    if !element_type.is_float() {
        let mut column = Vec::with_capacity(inputs.len());
        let values = (0..length)
            .map(|index| {
                column.clear();
                column.extend(
                    inputs
                        .iter()
                        .map(|input| input.get_integer(index).unwrap_or(0)),
                );
                reduce_integer_column(&column, operation, element_type) as i64
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

/// What every rank's output of `collective` over `inputs` (one per rank, all of one type and
/// one length) must be, in rank order: the reduction (all of it, block `rank` of `W` for a
/// reduce-scatter, at the root only for a reduce), every input concatenated in rank order
/// (all-gather; at the root only for a gather), the root's input (broadcast) or block `rank` of
/// it (scatter), or block `rank` of every input in rank order (all-to-all). A rank that receives
/// nothing expects an empty output. A collective this crate does not know gives no outputs.
pub fn expected_outputs(collective: Collective, inputs: &[HostValues]) -> Vec<Expected> {
    let world = inputs.len();
    match collective {
        Collective::AllReduce(operation) => vec![expected(operation, inputs); world],
        Collective::ReduceScatter(operation) => {
            let reduced = expected(operation, inputs);
            let block = reduced.len() / world.max(1);
            (0..world)
                .map(|rank| reduced.slice(rank * block..(rank + 1) * block))
                .collect()
        }
        Collective::AllGather => {
            let parts: Vec<Expected> = inputs.iter().map(Expected::copied).collect();
            vec![concatenated(&parts); world]
        }
        Collective::Broadcast { root } => match inputs.get(root) {
            Some(input) => vec![Expected::copied(input); world],
            None => Vec::new(),
        },
        Collective::Reduce { op, root } if root < world => {
            let reduced = expected(op, inputs);
            (0..world)
                .map(|rank| {
                    if rank == root {
                        reduced.clone()
                    } else {
                        reduced.slice(0..0)
                    }
                })
                .collect()
        }
        Collective::Gather { root } if root < world => {
            let parts: Vec<Expected> = inputs.iter().map(Expected::copied).collect();
            let gathered = concatenated(&parts);
            (0..world)
                .map(|rank| {
                    if rank == root {
                        gathered.clone()
                    } else {
                        gathered.slice(0..0)
                    }
                })
                .collect()
        }
        Collective::Scatter { root } => match inputs.get(root) {
            Some(input) => {
                let whole = Expected::copied(input);
                let block = whole.len() / world.max(1);
                (0..world)
                    .map(|rank| whole.slice(rank * block..(rank + 1) * block))
                    .collect()
            }
            None => Vec::new(),
        },
        Collective::AllToAll => {
            let blocks: Vec<Expected> = inputs.iter().map(Expected::copied).collect();
            let block = blocks.first().map_or(0, Expected::len) / world.max(1);
            (0..world)
                .map(|rank| {
                    let parts: Vec<Expected> = blocks
                        .iter()
                        .map(|input| input.slice(rank * block..(rank + 1) * block))
                        .collect();
                    concatenated(&parts)
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Copies, one after another (every part of one kind: `Exact` or `Selected`).
fn concatenated(parts: &[Expected]) -> Expected {
    let mut exact = Vec::new();
    let mut selected = Vec::new();
    for part in parts {
        match part {
            Expected::Exact(values) => exact.extend_from_slice(values),
            Expected::Selected(values) => selected.extend_from_slice(values),
            Expected::Approx { values, .. } => selected.extend_from_slice(values),
        }
    }
    if selected.is_empty() {
        Expected::Exact(exact)
    } else {
        Expected::Selected(selected)
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
                (actual != values[index]).then(|| {
                    format!(
                        "expected {}, got {}",
                        show_integer(element_type, values[index]),
                        show_integer(element_type, actual)
                    )
                })
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

/// An [`Expected::Exact`] value as the element type writes it (u64 from its i64 bits).
fn show_integer(element_type: ElementType, value: i64) -> String {
    if element_type == ElementType::U64 {
        (value as u64).to_string()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Expected, Mismatch, compare, expected, expected_outputs, integer_values,
        reduce_integer_column, reduce_integers, wrap_integer,
    };
    use crate::host::{ElementType, HostValues};
    use half::f16;
    use ruccl_core::{Collective, ReduceOperation};

    #[test]
    fn unsigned_and_narrow_integers_wrap_and_order_in_their_own_type() {
        assert_eq!(wrap_integer(ElementType::U8, 256 + 7), 7);
        assert_eq!(wrap_integer(ElementType::I8, 128), -128);
        assert_eq!(wrap_integer(ElementType::U64, -1), i128::from(u64::MAX));
        let column = [200, 100];
        assert_eq!(
            reduce_integer_column(&column, ReduceOperation::Sum, ElementType::U8),
            44
        );
        assert_eq!(
            reduce_integer_column(&column, ReduceOperation::Mean, ElementType::U8),
            22
        );
        let big = [i128::from(u64::MAX), 1];
        assert_eq!(
            reduce_integer_column(&big, ReduceOperation::Max, ElementType::U64),
            i128::from(u64::MAX)
        );
        assert_eq!(
            reduce_integer_column(&big, ReduceOperation::Product, ElementType::U64),
            i128::from(u64::MAX)
        );
        assert_eq!(
            reduce_integer_column(&[-128, -1], ReduceOperation::Product, ElementType::I8),
            -128
        );
    }

    #[test]
    fn every_collective_has_an_exact_reference_per_rank() {
        let inputs = [HostValues::U8(vec![1, 2]), HostValues::U8(vec![255, 4])];
        let outputs = |collective| expected_outputs(collective, &inputs);
        assert_eq!(
            outputs(Collective::ReduceScatter(ReduceOperation::Sum)),
            vec![Expected::Exact(vec![0]), Expected::Exact(vec![6])]
        );
        assert_eq!(
            outputs(Collective::AllGather),
            vec![Expected::Exact(vec![1, 2, 255, 4]); 2]
        );
        assert_eq!(
            outputs(Collective::Broadcast { root: 1 }),
            vec![Expected::Exact(vec![255, 4]); 2]
        );
        assert_eq!(
            outputs(Collective::Reduce {
                op: ReduceOperation::Max,
                root: 1
            }),
            vec![Expected::Exact(vec![]), Expected::Exact(vec![255, 4])]
        );
        assert_eq!(
            outputs(Collective::Gather { root: 0 }),
            vec![Expected::Exact(vec![1, 2, 255, 4]), Expected::Exact(vec![])]
        );
        assert_eq!(
            outputs(Collective::Scatter { root: 1 }),
            vec![Expected::Exact(vec![255]), Expected::Exact(vec![4])]
        );
        assert_eq!(
            outputs(Collective::AllToAll),
            vec![Expected::Exact(vec![1, 255]), Expected::Exact(vec![2, 4])]
        );
        let reference = &outputs(Collective::AllReduce(ReduceOperation::Max))[0];
        assert!(compare(reference, ElementType::U8, &HostValues::U8(vec![255, 4])).is_ok());
    }

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
