//! [`balanced_ranges`]: how a tensor is cut into one chunk per rank.

use std::ops::Range;

/// Split `0..length` into `parts` contiguous ranges whose sizes differ by at most one (the first
/// `length % parts` ranges are one longer). Ranges may be empty when `length < parts`; zero parts
/// give no ranges.
pub fn balanced_ranges(length: usize, parts: usize) -> Vec<Range<usize>> {
    if parts == 0 {
        return Vec::new();
    }
    let base = length / parts;
    let longer = length % parts;
    let mut start = 0;
    (0..parts)
        .map(|part| {
            let size = base + usize::from(part < longer);
            let range = start..start + size;
            start += size;
            range
        })
        .collect()
}
