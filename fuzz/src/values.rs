//! Element values drawn from fuzz input: the first ones given explicitly by the input, the rest
//! from a seeded generator, each mapped into the domain its reference can check exactly or
//! within a stated bound (see the sim crate's [reference](ruccl_sim::conformance::reference)).

use ruccl_core::ReduceOperation;
use ruccl_sim::conformance::reference::{FloatDomain, float_values, integer_values};
use ruccl_sim::{ElementType, HostValues};

/// SplitMix64: a tiny, seedable generator for the values past the explicit ones.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Raw 32-bit draws: the explicit ones first, then the generator's.
#[derive(Clone, Debug)]
pub struct RawSource<'a> {
    explicit: &'a [u32],
    next: usize,
    generator: SplitMix64,
}

impl<'a> RawSource<'a> {
    /// Draws `explicit` first, then values seeded by `seed`.
    pub fn new(explicit: &'a [u32], seed: u64) -> Self {
        Self {
            explicit,
            next: 0,
            generator: SplitMix64(seed),
        }
    }

    /// The next raw draw.
    pub fn draw(&mut self) -> u32 {
        let raw = match self.explicit.get(self.next) {
            Some(&raw) => raw,
            None => (self.generator.next() >> 32) as u32,
        };
        self.next += 1;
        raw
    }
}

/// The inputs of one all-reduce: `world` tensors of `length` elements of `element_type`, drawn
/// element by element across the ranks (element 0 of every rank, then element 1, ...), so that
/// a `Product` factor's exponent can walk across the ranks of one element.
pub fn all_reduce_inputs(
    source: &mut RawSource<'_>,
    world: usize,
    length: usize,
    element_type: ElementType,
    operation: ReduceOperation,
) -> Vec<HostValues> {
    if element_type.is_float() {
        let domain = FloatDomain::of(operation);
        let mut columns = vec![Vec::with_capacity(length); world];
        for _ in 0..length {
            let mut walk = 0;
            for column in columns.iter_mut() {
                column.push(float(source.draw(), domain, element_type, &mut walk));
            }
        }
        columns
            .iter()
            .map(|values| float_values(element_type, values))
            .collect()
    } else {
        let mut columns = vec![Vec::with_capacity(length); world];
        for _ in 0..length {
            for column in columns.iter_mut() {
                column.push(integer(source.draw(), element_type));
            }
        }
        columns
            .iter()
            .map(|values| integer_values(element_type, values))
            .collect()
    }
}

/// `length` elements of `element_type` for a device-level check that compares bit for bit:
/// integers as in [`integer`], floats of any bit pattern (NaNs, infinities, signed zeros and
/// subnormals included) or small dyadic values.
pub fn any_values(
    source: &mut RawSource<'_>,
    element_type: ElementType,
    length: usize,
) -> HostValues {
    if element_type.is_float() {
        let values: Vec<f64> = (0..length)
            .map(|_| float(source.draw(), FloatDomain::Any, element_type, &mut 0))
            .collect();
        float_values(element_type, &values)
    } else {
        let values: Vec<i64> = (0..length)
            .map(|_| integer(source.draw(), element_type))
            .collect();
        integer_values(element_type, &values)
    }
}

/// An integer of `element_type` (as i64; narrower types keep its low bits): small, arbitrary
/// bits, an extreme, or 16-bit.
pub fn integer(raw: u32, element_type: ElementType) -> i64 {
    let wide = matches!(element_type, ElementType::I64 | ElementType::U64);
    let payload = raw >> 2;
    match raw & 3 {
        0 => i64::from(payload % 17) - 8,
        1 if wide => u64::from(payload).wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64,
        1 => i64::from(raw as i32),
        2 => {
            let (min, max) = if wide {
                (i64::MIN, i64::MAX)
            } else {
                (i64::from(i32::MIN), i64::from(i32::MAX))
            };
            [min, max, -1, 0, 1, min + 1, max - 1][payload as usize % 7]
        }
        _ => i64::from((raw >> 16) as i16),
    }
}

/// A float value for `domain`, exact in f64; `walk` is the running `Product` exponent of the
/// element across the ranks drawn so far.
fn float(raw: u32, domain: FloatDomain, element_type: ElementType, walk: &mut i32) -> f64 {
    match domain {
        FloatDomain::Terms => term(raw),
        FloatDomain::Factors => factor(raw, walk),
        FloatDomain::Any => match raw & 3 {
            0 | 3 => term(raw >> 2),
            1 => [
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                -0.0,
                0.0,
                f64::MAX,
                f64::MIN,
                f64::MIN_POSITIVE,
                1.0,
                -1.0,
                5e-324,
            ][(raw >> 2) as usize % 11],
            _ => bit_pattern(raw >> 2, element_type),
        },
    }
}

/// `±k·2⁻ᵉ`, `k ≤ 512`, `e ≤ 10`: 0 or a magnitude in `[2⁻¹⁰, 512]`, a multiple of 2⁻¹⁰.
fn term(raw: u32) -> f64 {
    let sign = if raw & 1 == 1 { -1.0 } else { 1.0 };
    let k = f64::from((raw >> 1) % 513);
    let e = (raw >> 11) % 11;
    sign * k / f64::from(1u32 << e)
}

/// `±(1 + j/1024)·2ᵈ`, `j < 16`, `d` one of -1, 0, +1, chosen so that the running sum of `d`
/// over the ranks (`walk`) stays within `[-3, 3]`; or 0 (one draw in 256).
fn factor(raw: u32, walk: &mut i32) -> f64 {
    if raw & 0xFF == 0 {
        return 0.0;
    }
    let sign = if (raw >> 8) & 1 == 1 { -1.0 } else { 1.0 };
    let j = f64::from((raw >> 9) % 16);
    let mut step = ((raw >> 13) % 3) as i32 - 1;
    if (*walk + step).abs() > 3 {
        step = -step;
    }
    *walk += step;
    sign * (1.0 + j / 1024.0) * [0.5, 1.0, 2.0][(step + 1) as usize]
}

/// Any bit pattern of the type, widened exactly to f64 (NaN payloads aside).
fn bit_pattern(raw: u32, element_type: ElementType) -> f64 {
    match element_type {
        ElementType::F16 => half::f16::from_bits(raw as u16).to_f64(),
        ElementType::BF16 => half::bf16::from_bits(raw as u16).to_f64(),
        ElementType::F32 => f64::from(f32::from_bits(raw.rotate_left(9))),
        _ => f64::from_bits(u64::from(raw).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    }
}

/// Whether `got` holds the same type, length and bits as `expected`, any NaN matching any NaN
/// (Rust leaves a NaN result's payload open).
pub fn same_bits(got: &HostValues, expected: &HostValues) -> bool {
    got.element_type() == expected.element_type()
        && got.len() == expected.len()
        && (0..got.len()).all(|index| {
            got.get_bits(index) == expected.get_bits(index)
                || (got.is_nan(index) && expected.is_nan(index))
        })
}

#[cfg(test)]
mod tests {
    use super::{factor, same_bits, term};
    use ruccl_sim::HostValues;

    #[test]
    fn nans_match_whatever_their_payload_but_zeros_keep_their_sign() {
        let quiet = HostValues::F32(vec![f32::NAN, 0.0]);
        let payload = HostValues::F32(vec![f32::from_bits(0x7FC0_0001), 0.0]);
        assert!(same_bits(&quiet, &payload));
        assert!(!same_bits(&quiet, &HostValues::F32(vec![f32::NAN, -0.0])));
        assert!(!same_bits(&quiet, &HostValues::F64(vec![f64::NAN, 0.0])));
    }

    #[test]
    fn terms_are_zero_or_multiples_of_a_1024th_up_to_512() {
        for raw in (0..u32::MAX).step_by(65_521) {
            let value = term(raw);
            assert!(value == 0.0 || (value.abs() >= 1.0 / 1024.0 && value.abs() <= 512.0));
            assert_eq!((value * 1024.0).fract(), 0.0);
        }
    }

    #[test]
    fn factor_exponents_walk_within_three() {
        let mut walk = 0;
        for raw in (1..u32::MAX).step_by(40_503) {
            let value = factor(raw | 1, &mut walk);
            assert!(walk.abs() <= 3);
            assert!(value.abs() >= 0.5 && value.abs() < 4.0, "{value}");
        }
    }
}
