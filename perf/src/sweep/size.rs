//! Byte (and element) counts as nccl-tests reads them (`parsesize` of its `src/common.cu`): a
//! number — decimal, with a fraction or an exponent (`1.5M`, `1e9`), or hexadecimal (`0x10`) —
//! and an optional `K`, `M` or `G` (powers of 1024), rounded down to a whole count.

use std::str::FromStr;

/// A count written as nccl-tests writes one: a number (`8`, `1.5`, `1e9`, `0x10`), then, after
/// optional spaces, an optional binary suffix `K` (2^10), `M` (2^20), `G` (2^30) or (ruCCL's
/// own) `T` (2^40), in either case, optionally followed by `B` or `iB` (`64KiB`, `1MB`, also
/// ruCCL's own); rounded down to a whole count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub usize);

/// A string that is not a count.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size `{0}`: expected a non-negative number (8, 1.5, 1e9, 0x10) with an optional K, M, G or T suffix (powers of 1024), such as 8, 1K, 1.5M or 128M"
)]
pub struct ParseSizeError(pub String);

impl FromStr for Size {
    type Err = ParseSizeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || ParseSizeError(text.to_owned());
        let trimmed = text.trim();
        let (number, suffix) = leading_number(trimmed).ok_or_else(error)?;
        let suffix = suffix.trim_start().to_ascii_lowercase();
        let unit = suffix
            .strip_suffix("ib")
            .or_else(|| suffix.strip_suffix('b'))
            .unwrap_or(&suffix);
        let shift = match unit {
            "" => 0,
            "k" => 10,
            "m" => 20,
            "g" => 30,
            "t" => 40,
            _ => return Err(error()),
        };
        let value = (number * (1u64 << shift) as f64).floor();
        // `usize::MAX as f64` rounds up to 2^64: anything at or above it does not fit.
        if !(value >= 0.0 && value < usize::MAX as f64) {
            return Err(error());
        }
        Ok(Size(value as usize))
    }
}

/// The number `text` starts with (hexadecimal after `0x`, else decimal with an optional
/// fraction and exponent) and the rest; `None` if it starts with none, or a sign.
fn leading_number(text: &str) -> Option<(f64, &str)> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        let end = hex
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(hex.len());
        let value = u64::from_str_radix(&hex[..end], 16).ok()?;
        return Some((value as f64, &hex[end..]));
    }
    if !text.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-')))
        .unwrap_or(text.len());
    // The longest prefix that is a number (`1e` in `1eK` is not).
    (1..=end).rev().find_map(|at| {
        text[..at]
            .parse::<f64>()
            .ok()
            .map(|value| (value, &text[at..]))
    })
}

/// `bytes` the short way nccl-tests users read it: `8`, `1K`, `128M` when exact, else the number.
pub fn format_size(bytes: usize) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        let unit = 1usize << shift;
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::{Size, format_size};

    #[test]
    fn suffixes_are_powers_of_1024_in_any_case() {
        let parse = |text: &str| text.parse::<Size>().map(|size| size.0);
        assert_eq!(parse("8"), Ok(8));
        assert_eq!(parse("1K"), Ok(1024));
        assert_eq!(parse("128M"), Ok(128 << 20));
        assert_eq!(parse("1g"), Ok(1 << 30));
        assert_eq!(parse("64KiB"), Ok(64 << 10));
        assert_eq!(parse("2MB"), Ok(2 << 20));
        assert_eq!(parse("16B"), Ok(16));
        assert_eq!(parse(" 4k "), Ok(4096));
        // nccl-tests' syntax: fractions, exponents, hexadecimal, a space before the unit.
        assert_eq!(parse("1.5M"), Ok(3 << 19));
        assert_eq!(parse("1e9"), Ok(1_000_000_000));
        assert_eq!(parse("0x10"), Ok(16));
        assert_eq!(parse("1 K"), Ok(1024));
        assert_eq!(parse("2.7"), Ok(2));
        for bad in [
            "",
            "K",
            "-1",
            "+1",
            "12X",
            "1KK",
            "nan",
            "inf",
            "0x",
            "1e999",
            "99999999999999999999T",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn formatting_uses_the_largest_exact_unit() {
        assert_eq!(format_size(8), "8");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(4096), "4K");
        assert_eq!(format_size(128 << 20), "128M");
    }
}
