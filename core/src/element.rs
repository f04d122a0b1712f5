//! [`ElementType`]: the element types of device tensors, shared by every device and tool.

use std::fmt;
use std::str::FromStr;

/// The element types ruCCL devices support.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
}

impl ElementType {
    /// Every element type.
    pub const ALL: [ElementType; 6] = [
        ElementType::F32,
        ElementType::F64,
        ElementType::F16,
        ElementType::BF16,
        ElementType::I32,
        ElementType::I64,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            ElementType::F16 | ElementType::BF16 => 2,
            ElementType::F32 | ElementType::I32 => 4,
            ElementType::F64 | ElementType::I64 => 8,
        }
    }

    /// The name nccl-tests prints: `float`, `double`, `half`, `bfloat16`, `int32`, `int64`.
    pub const fn nccl_name(self) -> &'static str {
        match self {
            ElementType::F32 => "float",
            ElementType::F64 => "double",
            ElementType::F16 => "half",
            ElementType::BF16 => "bfloat16",
            ElementType::I32 => "int32",
            ElementType::I64 => "int64",
        }
    }

    /// Whether the type is a floating-point type.
    pub const fn is_float(self) -> bool {
        !matches!(self, ElementType::I32 | ElementType::I64)
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
    "unknown element type `{0}`: expected one of float (f32), double (f64), half (f16), bfloat16 (bf16), int32 (i32), int64 (i64)"
)]
pub struct ParseElementTypeError(pub String);

impl FromStr for ElementType {
    type Err = ParseElementTypeError;

    /// Accepts nccl-tests' names and Rust's (`f32`, `bf16`, `i64`, ...), in any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "float" | "f32" | "float32" => Ok(ElementType::F32),
            "double" | "f64" | "float64" => Ok(ElementType::F64),
            "half" | "f16" | "float16" => Ok(ElementType::F16),
            "bfloat16" | "bf16" => Ok(ElementType::BF16),
            "int32" | "i32" | "int" => Ok(ElementType::I32),
            "int64" | "i64" => Ok(ElementType::I64),
            _ => Err(ParseElementTypeError(text.to_owned())),
        }
    }
}
