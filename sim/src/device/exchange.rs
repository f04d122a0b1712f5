//! One ring step on typed per-rank buffers: every rank sends a range to its successor, all sends
//! reading the state from before the step.
//!
//! No buffer is snapshotted wholesale. Rank `r`'s buffer is written only in its predecessor's
//! send range `ranges[r - 1]`, so rank `r`'s own send range `ranges[r]` can be read in place unless
//! the two overlap; only then is the send range copied first. The regular ring schedule never
//! overlaps (each step sends distinct chunks), so it moves every element exactly once.

use super::elements::Element;
use ruccl_core::ReduceOperation;
use std::ops::Range;

/// Apply one step to `buffers` (one per rank, all of one length) with ranges already validated
/// (one per rank, in bounds). `reduce` is the combining operation, or `None` to overwrite.
pub(crate) fn step<T: Element>(
    buffers: &mut [Vec<T>],
    ranges: &[Range<usize>],
    reduce: Option<ReduceOperation>,
) {
    match reduce {
        None => transfer(buffers, ranges, |dst: &mut [T], src: &[T]| {
            dst.copy_from_slice(src)
        }),
        Some(ReduceOperation::Sum | ReduceOperation::Mean) => {
            transfer(buffers, ranges, |dst, src| combine(dst, src, T::sum))
        }
        Some(ReduceOperation::Product) => {
            transfer(buffers, ranges, |dst, src| combine(dst, src, T::product))
        }
        Some(ReduceOperation::Min) => {
            transfer(buffers, ranges, |dst, src| combine(dst, src, T::min))
        }
        Some(ReduceOperation::Max) => {
            transfer(buffers, ranges, |dst, src| combine(dst, src, T::max))
        }
    }
}

/// `dst[i] = op(dst[i], src[i])` for equally long slices.
fn combine<T: Copy>(dst: &mut [T], src: &[T], op: impl Fn(T, T) -> T) {
    for (mine, &theirs) in dst.iter_mut().zip(src) {
        *mine = op(*mine, theirs);
    }
}

/// Run every send of one step through `apply(destination slice, source slice)`.
fn transfer<T: Copy>(
    buffers: &mut [Vec<T>],
    ranges: &[Range<usize>],
    mut apply: impl FnMut(&mut [T], &[T]),
) {
    let world = buffers.len();
    // Send ranges that this same step also writes (the predecessor's range overlaps them) are
    // copied before anything is written. With one rank, it is its own predecessor.
    let saved: Vec<Option<Vec<T>>> = (0..world)
        .map(|rank| {
            let sent = &ranges[rank];
            let received = &ranges[(rank + world - 1) % world];
            overlaps(sent, received).then(|| buffers[rank][sent.clone()].to_vec())
        })
        .collect();
    for (source, saved) in saved.iter().enumerate() {
        let range = ranges[source].clone();
        if range.is_empty() {
            continue;
        }
        let destination = (source + 1) % world;
        match saved {
            Some(copy) => apply(&mut buffers[destination][range], copy),
            None => {
                // No overlap, so the source range is still in its pre-step state, and a
                // non-empty range that is not saved cannot belong to a one-rank world (where
                // source == destination and the range overlaps itself).
                let (from, to) = source_and_destination(buffers, source, destination);
                apply(&mut to[range.clone()], &from[range]);
            }
        }
    }
}

/// Whether two ranges share an index (empty ranges share none).
fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end && !a.is_empty() && !b.is_empty()
}

/// Borrow `buffers[source]` shared and `buffers[destination]` mutably; `source != destination`.
fn source_and_destination<T>(
    buffers: &mut [Vec<T>],
    source: usize,
    destination: usize,
) -> (&[T], &mut [T]) {
    if source < destination {
        let (low, high) = buffers.split_at_mut(destination);
        (&low[source], &mut high[0])
    } else {
        let (low, high) = buffers.split_at_mut(source);
        (&high[0], &mut low[destination])
    }
}

#[cfg(test)]
mod tests {
    use super::step;
    use ruccl_core::ReduceOperation;

    #[test]
    fn overlapping_sends_read_the_pre_step_state() {
        let mut buffers = vec![vec![1i64, 2, 3], vec![10, 20, 30], vec![100, 200, 300]];
        // Every rank sends and receives 0..2: each destination adds its predecessor's old values.
        step(
            &mut buffers,
            &[0..2, 0..2, 0..2],
            Some(ReduceOperation::Sum),
        );
        assert_eq!(
            buffers,
            vec![vec![101, 202, 3], vec![11, 22, 30], vec![110, 220, 300]]
        );
    }

    #[test]
    fn partially_overlapping_overwrites_read_the_pre_step_state() {
        let mut buffers = vec![vec![1i32, 2, 3, 4], vec![5, 6, 7, 8]];
        step(&mut buffers, &[1..3, 2..4], None);
        assert_eq!(buffers, vec![vec![1, 2, 7, 8], vec![5, 2, 3, 8]]);
    }

    #[test]
    fn a_single_rank_combines_with_its_own_pre_step_values() {
        let mut buffers = vec![vec![3.0f32, 4.0]];
        let one_rank = [std::ops::Range { start: 0, end: 2 }];
        step(&mut buffers, &one_rank, Some(ReduceOperation::Product));
        assert_eq!(buffers, vec![vec![9.0, 16.0]]);
    }
}
