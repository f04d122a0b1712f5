//! [`HostValues`]: a vector of elements of one type, on the host.

use crate::ElementType;
use half::{bf16, f16};

/// A vector of elements of one type, on the host.
///
/// Non-exhaustive, like [`ElementType`]: a `match` outside this crate needs a wildcard arm. The
/// methods here cover every variant, so callers rarely need to match at all.
///
/// ```
/// use ruccl_host::HostValues;
///
/// let mut left = HostValues::I32(vec![1, 2]);
/// assert_eq!(left.append(HostValues::I32(vec![3])), Ok(()));
/// // Another element type is handed back, and nothing changes.
/// assert_eq!(left.append(HostValues::U8(vec![4])), Err(HostValues::U8(vec![4])));
/// assert_eq!(left.slice(1..3), Some(HostValues::I32(vec![2, 3])));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum HostValues {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
    /// i8 elements.
    I8(Vec<i8>),
    /// u8 elements.
    U8(Vec<u8>),
    /// u32 elements.
    U32(Vec<u32>),
    /// u64 elements.
    U64(Vec<u64>),
}

/// Run `$body` with `$values` bound to the vector of whichever variant.
macro_rules! with_values {
    ($self:expr, $values:ident => $body:expr) => {
        match $self {
            HostValues::F32($values) => $body,
            HostValues::F64($values) => $body,
            HostValues::F16($values) => $body,
            HostValues::BF16($values) => $body,
            HostValues::I32($values) => $body,
            HostValues::I64($values) => $body,
            HostValues::I8($values) => $body,
            HostValues::U8($values) => $body,
            HostValues::U32($values) => $body,
            HostValues::U64($values) => $body,
        }
    };
}
pub(crate) use with_values;

impl HostValues {
    /// The element type.
    pub fn element_type(&self) -> ElementType {
        match self {
            HostValues::F32(_) => ElementType::F32,
            HostValues::F64(_) => ElementType::F64,
            HostValues::F16(_) => ElementType::F16,
            HostValues::BF16(_) => ElementType::BF16,
            HostValues::I32(_) => ElementType::I32,
            HostValues::I64(_) => ElementType::I64,
            HostValues::I8(_) => ElementType::I8,
            HostValues::U8(_) => ElementType::U8,
            HostValues::U32(_) => ElementType::U32,
            HostValues::U64(_) => ElementType::U64,
        }
    }

    /// `length` zeros of `element_type` (`None` for a type this crate does not know).
    pub fn zeros(element_type: ElementType, length: usize) -> Option<HostValues> {
        Some(match element_type {
            ElementType::F32 => HostValues::F32(vec![0.0; length]),
            ElementType::F64 => HostValues::F64(vec![0.0; length]),
            ElementType::F16 => HostValues::F16(vec![f16::ZERO; length]),
            ElementType::BF16 => HostValues::BF16(vec![bf16::ZERO; length]),
            ElementType::I32 => HostValues::I32(vec![0; length]),
            ElementType::I64 => HostValues::I64(vec![0; length]),
            ElementType::I8 => HostValues::I8(vec![0; length]),
            ElementType::U8 => HostValues::U8(vec![0; length]),
            ElementType::U32 => HostValues::U32(vec![0; length]),
            ElementType::U64 => HostValues::U64(vec![0; length]),
            _ => return None,
        })
    }

    /// `length` zeros of this element type.
    pub fn zeros_like(&self, length: usize) -> HostValues {
        with_values!(self, values => {
            // An empty vector of the same element type; nothing of `values` is copied.
            let mut zeros = values[..0].to_vec();
            zeros.resize(length, Default::default());
            zeros.into()
        })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        with_values!(self, values => values.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the elements (the length times the element type's size).
    pub fn byte_len(&self) -> usize {
        self.len() * self.element_type().size()
    }

    /// Remove every element, keeping the allocation.
    pub fn clear(&mut self) {
        with_values!(self, values => values.clear())
    }

    /// The bytes of the allocation behind the values (its capacity, not its length).
    pub fn allocated_bytes(&self) -> usize {
        fn bytes<T>(values: &Vec<T>) -> usize {
            values.capacity() * size_of::<T>()
        }
        with_values!(self, values => bytes(values))
    }

    /// Trims to `length` elements, or pads with zeros up to it.
    pub fn resize(&mut self, length: usize) {
        with_values!(self, values => values.resize(length, Default::default()))
    }

    /// Splits off the elements from `at` on, as values of the same type (all of them if `at` is
    /// 0; none, rather than a panic, if `at` is past the end).
    pub fn split_off(&mut self, at: usize) -> HostValues {
        with_values!(self, values => values.split_off(at.min(values.len())).into())
    }

    /// Appends `other`'s elements; if its element type differs, hands it back and changes
    /// nothing.
    pub fn append(&mut self, other: HostValues) -> Result<(), HostValues> {
        /// Moves `from`'s elements onto `into`.
        fn glue<T>(into: &mut Vec<T>, mut from: Vec<T>) -> Result<(), HostValues> {
            into.append(&mut from);
            Ok(())
        }
        match (self, other) {
            (HostValues::F32(into), HostValues::F32(from)) => glue(into, from),
            (HostValues::F64(into), HostValues::F64(from)) => glue(into, from),
            (HostValues::F16(into), HostValues::F16(from)) => glue(into, from),
            (HostValues::BF16(into), HostValues::BF16(from)) => glue(into, from),
            (HostValues::I32(into), HostValues::I32(from)) => glue(into, from),
            (HostValues::I64(into), HostValues::I64(from)) => glue(into, from),
            (HostValues::I8(into), HostValues::I8(from)) => glue(into, from),
            (HostValues::U8(into), HostValues::U8(from)) => glue(into, from),
            (HostValues::U32(into), HostValues::U32(from)) => glue(into, from),
            (HostValues::U64(into), HostValues::U64(from)) => glue(into, from),
            (_, other) => Err(other),
        }
    }

    /// Elements `range`, as values of the same type (`None` if the range is not inside).
    pub fn slice(&self, range: std::ops::Range<usize>) -> Option<HostValues> {
        Some(with_values!(self, values => values.get(range)?.to_vec().into()))
    }

    /// Element `index` widened to f64 (exact for every type but 64-bit integers beyond 2^53).
    pub fn get_f64(&self, index: usize) -> Option<f64> {
        match self {
            HostValues::F32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::F64(values) => values.get(index).copied(),
            HostValues::F16(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::BF16(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::I32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::I64(values) => values.get(index).map(|&v| v as f64),
            HostValues::I8(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::U8(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::U32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::U64(values) => values.get(index).map(|&v| v as f64),
        }
    }

    /// Element `index` of an integer tensor, exactly (`None` past the end or for a float tensor).
    pub fn get_integer(&self, index: usize) -> Option<i128> {
        match self {
            HostValues::I32(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::I64(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::I8(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::U8(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::U32(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::U64(values) => values.get(index).map(|&v| i128::from(v)),
            _ => None,
        }
    }

    /// The bits of element `index`, zero-extended (`None` past the end): two elements hold the
    /// same value bit for bit exactly when these are equal.
    pub fn get_bits(&self, index: usize) -> Option<u64> {
        match self {
            HostValues::F32(values) => values.get(index).map(|&v| u64::from(v.to_bits())),
            HostValues::F64(values) => values.get(index).map(|&v| v.to_bits()),
            HostValues::F16(values) => values.get(index).map(|&v| u64::from(v.to_bits())),
            HostValues::BF16(values) => values.get(index).map(|&v| u64::from(v.to_bits())),
            HostValues::I32(values) => values.get(index).map(|&v| u64::from(v as u32)),
            HostValues::I64(values) => values.get(index).map(|&v| v as u64),
            HostValues::I8(values) => values.get(index).map(|&v| u64::from(v as u8)),
            HostValues::U8(values) => values.get(index).map(|&v| u64::from(v)),
            HostValues::U32(values) => values.get(index).map(|&v| u64::from(v)),
            HostValues::U64(values) => values.get(index).copied(),
        }
    }

    /// Whether element `index` is a NaN (never for integers).
    pub fn is_nan(&self, index: usize) -> bool {
        self.element_type().is_float() && self.get_f64(index).is_some_and(f64::is_nan)
    }
}

/// `From<Vec<T>>` for each element type: the vector is moved, not copied.
macro_rules! from_vec {
    ($($variant:ident($type:ty)),* $(,)?) => {$(
        impl From<Vec<$type>> for HostValues {
            fn from(values: Vec<$type>) -> Self {
                HostValues::$variant(values)
            }
        }
    )*};
}

from_vec!(
    F32(f32),
    F64(f64),
    F16(f16),
    BF16(bf16),
    I32(i32),
    I64(i64),
    I8(i8),
    U8(u8),
    U32(u32),
    U64(u64),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_and_zeros_like_have_the_type_and_length_asked_for() {
        for element in ElementType::ALL {
            let zeros = HostValues::zeros(element, 3);
            assert_eq!(zeros.as_ref().map(HostValues::element_type), Some(element));
            assert_eq!(
                zeros.as_ref().map(HostValues::byte_len),
                Some(3 * element.size())
            );
            let like = zeros.map(|zeros| zeros.zeros_like(5));
            assert_eq!(like, HostValues::zeros(element, 5));
        }
    }

    #[test]
    fn split_off_and_resize_cut_where_asked_and_never_panic() {
        let mut values = HostValues::I64(vec![1, 2, 3, 4, 5]);
        assert_eq!(values.split_off(3), HostValues::I64(vec![4, 5]));
        assert_eq!(values.split_off(9), HostValues::I64(vec![]));
        values.resize(5);
        assert_eq!(values, HostValues::I64(vec![1, 2, 3, 0, 0]));
        values.resize(1);
        assert_eq!(values, HostValues::I64(vec![1]));
        assert_eq!(values.split_off(0), HostValues::I64(vec![1]));
        assert!(values.is_empty());
    }

    #[test]
    fn append_glues_one_type_and_hands_back_another() {
        let mut values = HostValues::F32(vec![1.0]);
        assert_eq!(
            values.append(HostValues::I32(vec![2])),
            Err(HostValues::I32(vec![2]))
        );
        assert_eq!(values.append(HostValues::F32(vec![2.0])), Ok(()));
        assert_eq!(values, HostValues::F32(vec![1.0, 2.0]));
    }

    #[test]
    fn clear_keeps_the_allocation() {
        let mut values = HostValues::U32(Vec::with_capacity(8));
        values.resize(8);
        values.clear();
        assert!(values.is_empty());
        assert_eq!(values.allocated_bytes(), 32);
    }

    #[test]
    fn element_accessors_read_each_type_exactly() {
        let values = HostValues::from(vec![-1_i8, 7]);
        assert_eq!(values.get_integer(0), Some(-1));
        assert_eq!(values.get_bits(0), Some(0xff));
        assert_eq!(values.get_f64(1), Some(7.0));
        assert_eq!(values.get_f64(2), None);
        let floats = HostValues::from(vec![f32::NAN, 1.0]);
        assert!(floats.is_nan(0) && !floats.is_nan(1));
        assert_eq!(floats.get_integer(1), None);
    }
}
