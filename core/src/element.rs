//! [`ElementType`]: the element types of device tensors, shared by every device and tool.

use std::fmt;
use std::str::FromStr;

/// The element types ruCCL devices support.
///
/// Non-exhaustive: more types may follow, so a `match` outside this crate needs a wildcard arm
/// (a device answers it with "unsupported"). [`ElementType::ALL`] lists them in a fixed order —
/// the original six first, later additions appended — so an index into it stays valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ElementType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Two's complement 32-bit integer.
    I32,
    /// Two's complement 64-bit integer.
    I64,
    /// Two's complement 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
}

impl ElementType {
    /// Every element type, the original six first (the order never changes; new types are
    /// appended).
    pub const ALL: [ElementType; 10] = [
        ElementType::F32,
        ElementType::F64,
        ElementType::F16,
        ElementType::BF16,
        ElementType::I32,
        ElementType::I64,
        ElementType::I8,
        ElementType::U8,
        ElementType::U32,
        ElementType::U64,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            ElementType::I8 | ElementType::U8 => 1,
            ElementType::F16 | ElementType::BF16 => 2,
            ElementType::F32 | ElementType::I32 | ElementType::U32 => 4,
            ElementType::F64 | ElementType::I64 | ElementType::U64 => 8,
        }
    }

    /// The name nccl-tests prints: `float`, `double`, `half`, `bfloat16`, `int32`, `int64`,
    /// `int8`, `uint8`, `uint32`, `uint64`.
    pub const fn nccl_name(self) -> &'static str {
        match self {
            ElementType::F32 => "float",
            ElementType::F64 => "double",
            ElementType::F16 => "half",
            ElementType::BF16 => "bfloat16",
            ElementType::I32 => "int32",
            ElementType::I64 => "int64",
            ElementType::I8 => "int8",
            ElementType::U8 => "uint8",
            ElementType::U32 => "uint32",
            ElementType::U64 => "uint64",
        }
    }

    /// Whether the type is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
        )
    }

    /// Whether the type is an integer type (signed or not).
    pub const fn is_integer(self) -> bool {
        !self.is_float()
    }

    /// Whether the type is an unsigned integer type.
    pub const fn is_unsigned(self) -> bool {
        matches!(self, ElementType::U8 | ElementType::U32 | ElementType::U64)
    }

    /// Bits per element.
    pub const fn bits(self) -> u32 {
        self.size() as u32 * 8
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name())
    }
}

/// A string that names no [`ElementType`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown element type `{0}`: expected one of float (f32), double (f64), half (f16), bfloat16 (bf16), int32 (i32), int64 (i64), int8 (i8), uint8 (u8), uint32 (u32), uint64 (u64)"
)]
pub struct ParseElementTypeError(pub String);

impl FromStr for ElementType {
    type Err = ParseElementTypeError;

    /// Accepts nccl-tests' names (`float`, `int8`, `uint64`, ...) and Rust's (`f32`, `bf16`,
    /// `i8`, `u64`, ...), in any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "float" | "f32" | "float32" => Ok(ElementType::F32),
            "double" | "f64" | "float64" => Ok(ElementType::F64),
            "half" | "f16" | "float16" => Ok(ElementType::F16),
            "bfloat16" | "bf16" => Ok(ElementType::BF16),
            "int32" | "i32" | "int" => Ok(ElementType::I32),
            "int64" | "i64" => Ok(ElementType::I64),
            "int8" | "i8" | "char" => Ok(ElementType::I8),
            "uint8" | "u8" => Ok(ElementType::U8),
            "uint32" | "u32" => Ok(ElementType::U32),
            "uint64" | "u64" => Ok(ElementType::U64),
            _ => Err(ParseElementTypeError(text.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ElementType;

    #[test]
    fn every_type_parses_from_its_nccl_name_and_its_rust_name() {
        let rust = [
            "f32", "f64", "f16", "bf16", "i32", "i64", "i8", "u8", "u32", "u64",
        ];
        for (element, rust) in ElementType::ALL.into_iter().zip(rust) {
            assert_eq!(element.nccl_name().parse(), Ok(element));
            assert_eq!(rust.to_uppercase().parse(), Ok(element));
            assert_eq!(element.bits(), 8 * element.size() as u32);
        }
        assert!("uint16".parse::<ElementType>().is_err());
    }

    #[test]
    fn sizes_and_kinds_follow_the_names() {
        assert_eq!(ElementType::I8.size(), 1);
        assert_eq!(ElementType::U8.size(), 1);
        assert_eq!(ElementType::U32.size(), 4);
        assert_eq!(ElementType::U64.size(), 8);
        assert!(ElementType::U32.is_unsigned() && ElementType::U32.is_integer());
        assert!(!ElementType::I8.is_unsigned() && !ElementType::I8.is_float());
        assert!(ElementType::BF16.is_float() && !ElementType::BF16.is_integer());
    }
}
