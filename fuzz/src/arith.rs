//! Element arithmetic as [`SimDevice`](ruccl_sim::SimDevice)'s documentation states it, on one
//! value type for every element type: what the models of the `plans` and `sim_contract` targets
//! compute with, written from the documented table, not from the device's code.
//!
//! | operation        | floats (half types computed in f32, rounded once) | integers          |
//! |------------------|---------------------------------------------------|-------------------|
//! | `Sum`, `Product` | IEEE, rounded once per combine                     | wrapping          |
//! | `Min`, `Max`     | the smaller / larger value; a NaN loses to a number | the smaller / larger |
//! | `Mean`           | folds as `Sum`; then divided by `W` once            | sum / W toward zero |
//!
//! Two results [`Num::matches`] when their bits are equal, any NaN matching any NaN (IEEE leaves
//! payloads open), and under `Min` or `Max` a zero matching a zero of either sign (the two compare
//! equal, so "the smaller" may be either).

use half::{bf16, f16};
use ruccl_core::ReduceOperation;
use ruccl_sim::{ElementType, HostValues};

/// One element of any element type.
#[derive(Clone, Copy, Debug)]
pub enum Num {
    /// An f32 element.
    F32(f32),
    /// An f64 element.
    F64(f64),
    /// An f16 element.
    F16(f16),
    /// A bf16 element.
    BF16(bf16),
    /// An i32 element.
    I32(i32),
    /// An i64 element.
    I64(i64),
}

/// The smaller of two floats, a NaN losing to a number (either zero when they compare equal).
fn smaller<T: PartialOrd + Copy>(a: T, b: T, is_nan: impl Fn(T) -> bool) -> T {
    if is_nan(a) || b < a { b } else { a }
}

/// The larger of two floats, a NaN losing to a number.
fn larger<T: PartialOrd + Copy>(a: T, b: T, is_nan: impl Fn(T) -> bool) -> T {
    if is_nan(a) || b > a { b } else { a }
}

fn float32(operation: ReduceOperation, a: f32, b: f32) -> f32 {
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => a + b,
        ReduceOperation::Product => a * b,
        ReduceOperation::Min => smaller(a, b, f32::is_nan),
        ReduceOperation::Max => larger(a, b, f32::is_nan),
    }
}

fn float64(operation: ReduceOperation, a: f64, b: f64) -> f64 {
    match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => a + b,
        ReduceOperation::Product => a * b,
        ReduceOperation::Min => smaller(a, b, f64::is_nan),
        ReduceOperation::Max => larger(a, b, f64::is_nan),
    }
}

macro_rules! integer {
    ($operation:expr, $a:expr, $b:expr) => {
        match $operation {
            ReduceOperation::Sum | ReduceOperation::Mean => $a.wrapping_add($b),
            ReduceOperation::Product => $a.wrapping_mul($b),
            ReduceOperation::Min => $a.min($b),
            ReduceOperation::Max => $a.max($b),
        }
    };
}

impl Num {
    /// `left ⊕ right` under `operation` (`Mean` folds as `Sum`), or `None` if the two are of
    /// different types.
    pub fn combine(operation: ReduceOperation, left: Num, right: Num) -> Option<Num> {
        Some(match (left, right) {
            (Num::F32(a), Num::F32(b)) => Num::F32(float32(operation, a, b)),
            (Num::F64(a), Num::F64(b)) => Num::F64(float64(operation, a, b)),
            (Num::F16(a), Num::F16(b)) => {
                Num::F16(f16::from_f32(float32(operation, a.to_f32(), b.to_f32())))
            }
            (Num::BF16(a), Num::BF16(b)) => {
                Num::BF16(bf16::from_f32(float32(operation, a.to_f32(), b.to_f32())))
            }
            (Num::I32(a), Num::I32(b)) => Num::I32(integer!(operation, a, b)),
            (Num::I64(a), Num::I64(b)) => Num::I64(integer!(operation, a, b)),
            _ => return None,
        })
    }

    /// The `Mean` scaling: divided by `world` (at least 1, small), correctly rounded for floats,
    /// toward zero for integers.
    pub fn divide(self, world: usize) -> Num {
        match self {
            Num::F32(value) => Num::F32(value / world as f32),
            Num::F64(value) => Num::F64(value / world as f64),
            Num::F16(value) => Num::F16(f16::from_f32(value.to_f32() / world as f32)),
            Num::BF16(value) => Num::BF16(bf16::from_f32(value.to_f32() / world as f32)),
            Num::I32(value) => Num::I32(value / world as i32),
            Num::I64(value) => Num::I64(value / world as i64),
        }
    }

    /// The element type.
    pub fn element_type(self) -> ElementType {
        match self {
            Num::F32(_) => ElementType::F32,
            Num::F64(_) => ElementType::F64,
            Num::F16(_) => ElementType::F16,
            Num::BF16(_) => ElementType::BF16,
            Num::I32(_) => ElementType::I32,
            Num::I64(_) => ElementType::I64,
        }
    }

    /// `None` for a NaN, else the bits (and whether the value is a zero).
    fn bits(self) -> Option<(u64, bool)> {
        match self {
            Num::F32(v) => (!v.is_nan()).then_some((u64::from(v.to_bits()), v == 0.0)),
            Num::F64(v) => (!v.is_nan()).then_some((v.to_bits(), v == 0.0)),
            Num::F16(v) => (!v.is_nan()).then_some((u64::from(v.to_bits()), v.to_f32() == 0.0)),
            Num::BF16(v) => (!v.is_nan()).then_some((u64::from(v.to_bits()), v.to_f32() == 0.0)),
            Num::I32(v) => Some((u64::from(v as u32), false)),
            Num::I64(v) => Some((v as u64, false)),
        }
    }

    /// Whether a device result `self` is the model's `expected` for a generation folding with
    /// `operation` (see the module documentation).
    pub fn matches(self, expected: Num, operation: Option<ReduceOperation>) -> bool {
        if self.element_type() != expected.element_type() {
            return false;
        }
        match (self.bits(), expected.bits()) {
            (None, None) => true,
            (Some((got, got_zero)), Some((want, want_zero))) => {
                got == want
                    || (got_zero
                        && want_zero
                        && matches!(operation, Some(ReduceOperation::Min | ReduceOperation::Max)))
            }
            _ => false,
        }
    }

    /// Whether the two have the very same bits (NaN payloads included).
    pub fn same_bits(self, other: Num) -> bool {
        let raw = |num: Num| match num {
            Num::F32(v) => u64::from(v.to_bits()),
            Num::F64(v) => v.to_bits(),
            Num::F16(v) => u64::from(v.to_bits()),
            Num::BF16(v) => u64::from(v.to_bits()),
            Num::I32(v) => u64::from(v as u32),
            Num::I64(v) => v as u64,
        };
        self.element_type() == other.element_type() && raw(self) == raw(other)
    }
}

/// Every element of `values`.
pub fn nums(values: &HostValues) -> Vec<Num> {
    match values {
        HostValues::F32(values) => values.iter().map(|&v| Num::F32(v)).collect(),
        HostValues::F64(values) => values.iter().map(|&v| Num::F64(v)).collect(),
        HostValues::F16(values) => values.iter().map(|&v| Num::F16(v)).collect(),
        HostValues::BF16(values) => values.iter().map(|&v| Num::BF16(v)).collect(),
        HostValues::I32(values) => values.iter().map(|&v| Num::I32(v)).collect(),
        HostValues::I64(values) => values.iter().map(|&v| Num::I64(v)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::Num;
    use half::f16;
    use ruccl_core::ReduceOperation::{Max, Min, Sum};

    #[test]
    fn a_nan_loses_to_a_number_on_either_side() {
        let nan = Num::F32(f32::NAN);
        let one = Num::F32(1.0);
        for (a, b) in [(nan, one), (one, nan)] {
            assert!(Num::combine(Min, a, b).unwrap().same_bits(one));
            assert!(Num::combine(Max, a, b).unwrap().same_bits(one));
        }
    }

    #[test]
    fn zeros_of_either_sign_match_only_under_min_and_max() {
        let (plus, minus) = (Num::F64(0.0), Num::F64(-0.0));
        assert!(plus.matches(minus, Some(Min)));
        assert!(!plus.matches(minus, Some(Sum)));
        assert!(!plus.matches(minus, None));
    }

    #[test]
    fn half_sums_round_once() {
        let sum = Num::combine(
            Sum,
            Num::F16(f16::from_f32(2048.0)),
            Num::F16(f16::from_f32(1.0)),
        );
        assert!(sum.unwrap().same_bits(Num::F16(f16::from_f32(2048.0))));
    }

    #[test]
    fn mixed_types_do_not_combine() {
        assert!(Num::combine(Sum, Num::I32(1), Num::I64(1)).is_none());
    }
}
