//! The all-reduce matrix's cases and their seeded inputs, drawn from the domain the
//! [reference](super::reference)'s bounds hold for.

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
