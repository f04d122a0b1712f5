//! The matrix's cases and their seeded inputs, drawn from the domain the
//! [reference](mod@super::reference)'s bounds hold for.

use crate::host::{ElementType, HostValues};
use crate::rng::SplitMix64;
use half::{bf16, f16};
use ruccl_core::{Algorithm, Collective, ReduceOperation};

/// One generation of the matrix: a collective via an algorithm on inputs of one type and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Case {
    pub(crate) collective: Collective,
    pub(crate) algorithm: Algorithm,
    pub(crate) element_type: ElementType,
    /// Elements of every rank's input.
    pub(crate) length: usize,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} via {} {} n={}",
            self.collective, self.algorithm, self.element_type, self.length
        )
    }
}

/// Rank `rank`'s input for case number `index` of a world's matrix: reproducible from the keys.
///
/// - Float `Sum`, `Mean`, all-gather and broadcast: uniform in `[-1, 1)`, rounded to the type.
/// - Float `Product`: magnitude in `[0.5, 2)` with a random sign, so no product of up to 8 ranks
///   overflows or leaves the normal range, even in f16.
/// - Float `Min` and `Max`: like sums, but never zero (so no `+0`/`-0` tie, whose winner is not
///   specified), and one in 32 a NaN, one in 32 an infinity of either sign (a NaN must lose).
/// - Integers: half small (`-100..=100`, where rounding of `Mean` and signs matter; taken modulo
///   2^bits for the unsigned types), half arbitrary bit patterns (where wrapping matters).
pub(crate) fn input(seed: u64, world: usize, index: usize, case: Case, rank: usize) -> HostValues {
    let mut rng = SplitMix64::keyed(&[seed, world as u64, index as u64, rank as u64]);
    let length = case.length;
    let operation = case.collective.operation();
    let rng = &mut rng;
    match case.element_type {
        ElementType::F32 => {
            HostValues::F32((0..length).map(|_| float(rng, operation) as f32).collect())
        }
        ElementType::F64 => HostValues::F64((0..length).map(|_| float(rng, operation)).collect()),
        ElementType::F16 => HostValues::F16(
            (0..length)
                .map(|_| f16::from_f64(float(rng, operation)))
                .collect(),
        ),
        ElementType::BF16 => HostValues::BF16(
            (0..length)
                .map(|_| bf16::from_f64(float(rng, operation)))
                .collect(),
        ),
        ElementType::I32 => HostValues::I32((0..length).map(|_| integer(rng) as i32).collect()),
        ElementType::I64 => HostValues::I64((0..length).map(|_| integer(rng)).collect()),
        ElementType::I8 => HostValues::I8((0..length).map(|_| integer(rng) as i8).collect()),
        ElementType::U8 => HostValues::U8((0..length).map(|_| integer(rng) as u8).collect()),
        ElementType::U32 => HostValues::U32((0..length).map(|_| integer(rng) as u32).collect()),
        ElementType::U64 => HostValues::U64((0..length).map(|_| integer(rng) as u64).collect()),
        other => HostValues::zeros(other, length).unwrap_or(HostValues::F32(Vec::new())),
    }
}

/// One float input for a collective reducing with `operation` (see [`input`]).
fn float(rng: &mut SplitMix64, operation: Option<ReduceOperation>) -> f64 {
    match operation {
        Some(ReduceOperation::Product) => {
            let magnitude = (2.0 * rng.unit() - 1.0).exp2();
            if rng.coin() { -magnitude } else { magnitude }
        }
        Some(ReduceOperation::Min | ReduceOperation::Max) => match rng.below(32) {
            0 => f64::NAN,
            1 => {
                if rng.coin() {
                    f64::INFINITY
                } else {
                    f64::NEG_INFINITY
                }
            }
            // Away from zero even after rounding to f16 or bf16.
            _ => {
                let magnitude = 0.001 + 0.999 * rng.unit();
                if rng.coin() { -magnitude } else { magnitude }
            }
        },
        _ => 2.0 * rng.unit() - 1.0,
    }
}

/// One integer input (see [`input`]), as an i64 whose low bits the element type keeps.
fn integer(rng: &mut SplitMix64) -> i64 {
    if rng.coin() {
        rng.below(201) as i64 - 100
    } else {
        rng.next_u64() as i64
    }
}

/// The crafted input of `rank` for the exchange checks: `length` values of `element_type` whose
/// combinations show the order they were folded in.
///
/// Floats: every third element (shifted by the rank) is `±M`, with `M = 2^(p+1)` for a `p`-bit
/// significand, the others small integers `1..=7`: a sum of `M`, a small value and `-M` is the
/// small value or zero depending on the order, so a fold in another order changes the bits. No
/// value is zero (no signed-zero ties for `Min`/`Max`). The checks fold them with `Sum`, `Min`
/// and `Max`. Integers: `1 + 16·rank + index`, wrapped to the type.
pub(crate) fn crafted(element_type: ElementType, rank: usize, length: usize) -> HostValues {
    let big = match element_type {
        ElementType::F16 => 4096.0, // 2^12
        ElementType::BF16 => 512.0,
        ElementType::F32 => 33_554_432.0, // 2^25
        _ => 18_014_398_509_481_984.0,    // 2^54
    };
    let float = |index: usize| -> f64 {
        if (rank + index) % 3 == 0 {
            if (rank + index / 3) % 2 == 0 {
                big
            } else {
                -big
            }
        } else {
            (1 + (rank * 5 + index) % 7) as f64
        }
    };
    let integers: Vec<i64> = (0..length)
        .map(|index| (1 + 16 * rank + index) as i64)
        .collect();
    let floats: Vec<f64> = (0..length).map(float).collect();
    if element_type.is_float() {
        super::reference::float_values(element_type, &floats)
    } else {
        super::reference::integer_values(element_type, &integers)
    }
}
