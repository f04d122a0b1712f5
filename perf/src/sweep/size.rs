//! Byte (and element) counts as nccl-tests writes them: `8`, `1K`, `128M`, `1G`.

use std::str::FromStr;

/// A count written as a number with an optional binary suffix: `K` (2^10), `M` (2^20), `G`
/// (2^30) or `T` (2^40), in either case, optionally followed by `B` or `iB` (`64KiB`, `1MB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub usize);

/// A string that is not a count.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size `{0}`: expected a whole number with an optional K, M, G or T suffix (powers of 1024), such as 8, 1K or 128M"
)]
pub struct ParseSizeError(pub String);

impl FromStr for Size {
    type Err = ParseSizeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || ParseSizeError(text.to_owned());
        let trimmed = text.trim();
        let digits_end = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(trimmed.len());
        let (digits, suffix) = trimmed.split_at(digits_end);
        let number: usize = digits.parse().map_err(|_| error())?;
        let suffix = suffix.to_ascii_lowercase();
        let unit = suffix
            .strip_suffix("ib")
            .or_else(|| suffix.strip_suffix('b'))
            .unwrap_or(&suffix);
        let shift = match unit {
            "" if suffix.is_empty() || suffix == "b" => 0,
            "k" => 10,
            "m" => 20,
            "g" => 30,
            "t" => 40,
            _ => return Err(error()),
        };
        number
            .checked_mul(1usize << shift)
            .map(Size)
            .ok_or_else(error)
    }
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
        for bad in [
            "",
            "K",
            "1.5M",
            "-1",
            "12X",
            "1KK",
            "1 K",
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
