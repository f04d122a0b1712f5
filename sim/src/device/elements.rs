//! Element arithmetic of the simulated device: how two elements combine under each
//! [`ReduceOperation`] and how `Mean` scales a sum, for every [`ElementType`](crate::host::ElementType).
//!
//! The semantics (integers wrap, unsigned ones compare as unsigned, integer `Mean` rounds toward
//! zero, float `Mean` divides once, halves round once through f32, a float NaN result is the one
//! quiet NaN) are documented on [`SimDevice`](crate::SimDevice).

use half::{bf16, f16};

/// An element type the simulated device computes on.
pub(crate) trait Element: Copy + Send + Sync + 'static {
    /// `a + b` in the element type (wrapping for integers).
    fn sum(a: Self, b: Self) -> Self;
    /// `a * b` in the element type (wrapping for integers).
    fn product(a: Self, b: Self) -> Self;
    /// The smaller of `a` and `b` (a NaN loses).
    fn min(a: Self, b: Self) -> Self;
    /// The larger of `a` and `b` (a NaN loses).
    fn max(a: Self, b: Self) -> Self;
    /// `self / world`: correctly rounded for floats, toward zero for integers. `world >= 1`.
    fn divide(self, world: usize) -> Self;
}

/// Implements [`Element`] for f32 or f64: IEEE arithmetic, one rounding per operation, with
/// what IEEE and the compiler leave to the operands' order fixed, so that a fold gives the same
/// bits however a loop orders a commutative operation's operands (the compiler may swap them,
/// and two ranks' loops differ): a NaN result is the one quiet NaN ([`f32::NAN`], whatever the
/// operands' payloads), and of `-0` and `+0`, `Min` takes `-0` and `Max` `+0`.
macro_rules! float_element {
    ($type:ty) => {
        impl Element for $type {
            fn sum(a: Self, b: Self) -> Self {
                (a + b).canonical()
            }
            fn product(a: Self, b: Self) -> Self {
                (a * b).canonical()
            }
            fn min(a: Self, b: Self) -> Self {
                if a == 0.0 && b == 0.0 {
                    // The sign bits or'ed: `-0` if either is.
                    <$type>::from_bits(a.to_bits() | b.to_bits())
                } else {
                    a.min(b).canonical()
                }
            }
            fn max(a: Self, b: Self) -> Self {
                if a == 0.0 && b == 0.0 {
                    // The sign bits and'ed: `+0` if either is.
                    <$type>::from_bits(a.to_bits() & b.to_bits())
                } else {
                    a.max(b).canonical()
                }
            }
            fn divide(self, world: usize) -> Self {
                // Worlds are small (ranks of one process), so the conversion is exact.
                (self / world as $type).canonical()
            }
        }

        impl Canonical for $type {
            fn canonical(self) -> Self {
                if self.is_nan() { <$type>::NAN } else { self }
            }
        }
    };
}

/// A float whose NaNs have one representative.
trait Canonical: Copy {
    /// `self`, or the quiet NaN of no payload if `self` is a NaN.
    fn canonical(self) -> Self;
}

float_element!(f32);
float_element!(f64);

/// Implements [`Element`] for a 16-bit float by computing in f32 (as [`f32`]'s [`Element`]
/// does, NaNs and zeros included) and rounding back once.
macro_rules! half_element {
    ($type:ty) => {
        impl Element for $type {
            fn sum(a: Self, b: Self) -> Self {
                <$type>::from_f32(f32::sum(a.to_f32(), b.to_f32()))
            }
            fn product(a: Self, b: Self) -> Self {
                <$type>::from_f32(f32::product(a.to_f32(), b.to_f32()))
            }
            fn min(a: Self, b: Self) -> Self {
                <$type>::from_f32(<f32 as Element>::min(a.to_f32(), b.to_f32()))
            }
            fn max(a: Self, b: Self) -> Self {
                <$type>::from_f32(<f32 as Element>::max(a.to_f32(), b.to_f32()))
            }
            fn divide(self, world: usize) -> Self {
                <$type>::from_f32(self.to_f32().divide(world))
            }
        }
    };
}

half_element!(f16);
half_element!(bf16);

/// Implements [`Element`] for an integer type, signed or unsigned.
macro_rules! integer_element {
    ($type:ty) => {
        impl Element for $type {
            fn sum(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            fn product(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            fn min(a: Self, b: Self) -> Self {
                Ord::min(a, b)
            }
            fn max(a: Self, b: Self) -> Self {
                Ord::max(a, b)
            }
            fn divide(self, world: usize) -> Self {
                // Divided in i128, where every element and every world fit: `/` truncates
                // toward zero, and the quotient's magnitude is at most the element's, so it
                // fits the type again (even `i8::MIN / 128`, which no i8 world could express).
                let world = i128::try_from(world.max(1)).unwrap_or(i128::MAX);
                <$type>::try_from(i128::from(self) / world).unwrap_or_default()
            }
        }
    };
}

integer_element!(i32);
integer_element!(i64);
integer_element!(i8);
integer_element!(u8);
integer_element!(u32);
integer_element!(u64);

#[cfg(test)]
mod tests {
    use super::Element;
    use half::{bf16, f16};

    #[test]
    fn integer_mean_rounds_toward_zero() {
        assert_eq!(7i32.divide(2), 3);
        assert_eq!((-7i32).divide(2), -3);
        assert_eq!((-1i64).divide(3), 0);
        assert_eq!(i64::MIN.divide(1), i64::MIN);
        assert_eq!(i8::MIN.divide(128), -1);
        assert_eq!(u64::MAX.divide(2), u64::MAX / 2);
        assert_eq!(200u8.divide(3), 66);
    }

    #[test]
    fn unsigned_min_and_max_compare_as_unsigned() {
        assert_eq!(<u8 as Element>::min(200, 3), 3);
        assert_eq!(<u64 as Element>::max(u64::MAX, 1), u64::MAX);
        assert_eq!(u32::sum(u32::MAX, 2), 1);
        assert_eq!(u8::product(16, 17), 16);
    }

    #[test]
    fn integer_sum_and_product_wrap() {
        assert_eq!(i32::sum(i32::MAX, 1), i32::MIN);
        assert_eq!(i64::product(i64::MAX, 2), -2);
    }

    #[test]
    fn half_types_round_once_per_combine() {
        // 2048 + 1 is not representable in f16 (11-bit significand); ties round to even.
        assert_eq!(
            f16::sum(f16::from_f32(2048.0), f16::from_f32(1.0)),
            f16::from_f32(2048.0)
        );
        assert_eq!(
            bf16::sum(bf16::from_f32(256.0), bf16::from_f32(3.0)),
            bf16::from_f32(260.0)
        );
    }

    #[test]
    fn float_min_and_max_prefer_numbers_over_nan() {
        assert_eq!(<f32 as Element>::min(f32::NAN, 1.0), 1.0);
        assert_eq!(<f64 as Element>::max(2.0, f64::NAN), 2.0);
    }

    /// Every float operation on `a, b` and on `b, a`: the same bits.
    fn order_free<T: Element + std::fmt::Debug>(a: T, b: T, bits: impl Fn(T) -> u64) {
        for (name, op) in [
            ("sum", T::sum as fn(T, T) -> T),
            ("product", T::product),
            ("min", T::min),
            ("max", T::max),
        ] {
            assert_eq!(bits(op(a, b)), bits(op(b, a)), "{name} {a:?} {b:?}");
        }
    }

    #[test]
    fn float_results_do_not_depend_on_the_operands_order() {
        let payloads = [0x7fc0_0001, 0xffc0_0002, 0x7f80_0003, 0xffff_ffff];
        let specials = [0.0, -0.0, 1.5, f32::INFINITY, f32::NEG_INFINITY];
        let values: Vec<f32> = payloads
            .iter()
            .map(|&bits| f32::from_bits(bits))
            .chain(specials)
            .collect();
        for &a in &values {
            for &b in &values {
                order_free(a, b, |v: f32| u64::from(v.to_bits()));
                order_free(f64::from(a), f64::from(b), f64::to_bits);
                let (ha, hb) = (f16::from_f32(a), f16::from_f32(b));
                order_free(ha, hb, |v: f16| u64::from(v.to_bits()));
                let (ba, bb) = (bf16::from_f32(a), bf16::from_f32(b));
                order_free(ba, bb, |v: bf16| u64::from(v.to_bits()));
            }
        }
        // The one NaN, and the zeros' order.
        let nan = f32::from_bits(0xffc0_0002);
        assert_eq!(f32::sum(nan, 1.0).to_bits(), f32::NAN.to_bits());
        assert_eq!(
            <f32 as Element>::min(0.0, -0.0).to_bits(),
            (-0.0f32).to_bits()
        );
        assert_eq!(<f32 as Element>::max(-0.0, 0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(
            <f64 as Element>::min(-0.0, -0.0).to_bits(),
            (-0.0f64).to_bits()
        );
    }
}
