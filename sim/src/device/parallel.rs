//! Splitting one call's element loops across cores.
//!
//! The pieces of one step (or of the `Mean` scaling) write disjoint memory, so they can run on
//! any threads in any order. Above [`MIN_BYTES_PER_THREAD`] per extra thread, the pieces are cut
//! into one equal share per thread: the calling thread runs one share and rayon's pool (one
//! worker per core, started once per process and asleep between calls) runs the others, inside
//! `rayon::in_place_scope`, which borrows the buffers and returns only when every share is done,
//! so nothing outlives the call. Below that, or with one core, the pieces run on the calling
//! thread.
//!
//! Under a model checker (`--cfg ruccl_loom` / `--cfg ruccl_shuttle`) no other thread ever runs
//! a piece: the checkers must see every thread, and the pool's would be invisible to them.

/// Work below this many bytes per thread runs on fewer threads: handing a share to a sleeping
/// pool worker costs a wake-up (several microseconds, tens on a busy machine), about what a core
/// streams through this much memory.
pub(crate) const MIN_BYTES_PER_THREAD: usize = 512 << 10;

/// Shares are cut at multiples of this many elements, keeping vector loops whole.
const GRAIN: usize = 64;

/// A unit of element work that can be cut in two.
pub(crate) trait Piece: Send + Sized {
    /// Elements it touches.
    fn len(&self) -> usize;
    /// The first `at` elements and the rest; `at <= len()`.
    fn split_at(self, at: usize) -> (Self, Self);
}

impl<T: Send> Piece for &mut [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn split_at(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

/// How many threads `elements` elements of `element_bytes` bytes are worth, at most `threads`.
pub(crate) fn worth(elements: usize, element_bytes: usize, threads: usize) -> usize {
    let bytes = elements.saturating_mul(element_bytes.max(1));
    (bytes / MIN_BYTES_PER_THREAD).clamp(1, threads.max(1))
}

/// Run `run` on every piece, on up to `threads` threads when the pieces are worth it.
pub(crate) fn run_pieces<P: Piece>(
    pieces: Vec<P>,
    element_bytes: usize,
    threads: usize,
    run: impl Fn(P) + Sync,
) {
    let total: usize = pieces.iter().map(Piece::len).sum();
    let shares = worth(total, element_bytes, threads);
    if shares <= 1 {
        pieces.into_iter().for_each(run);
        return;
    }
    run_shares(share_out(pieces, total, shares), &run);
}

/// Cut `pieces` into at most `shares` lists of about `total / shares` elements each, in order.
fn share_out<P: Piece>(pieces: Vec<P>, total: usize, shares: usize) -> Vec<Vec<P>> {
    let quota = total.div_ceil(shares.max(1)).next_multiple_of(GRAIN);
    let mut lists = Vec::with_capacity(shares);
    let mut current = Vec::new();
    let mut room = quota;
    for mut piece in pieces {
        while piece.len() > room {
            let (head, tail) = piece.split_at(room);
            if head.len() > 0 {
                current.push(head);
            }
            lists.push(std::mem::take(&mut current));
            room = quota;
            piece = tail;
        }
        room -= piece.len();
        if piece.len() > 0 {
            current.push(piece);
        }
    }
    if !current.is_empty() {
        lists.push(current);
    }
    lists
}

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
fn run_shares<P: Piece>(mut lists: Vec<Vec<P>>, run: &(impl Fn(P) + Sync)) {
    let Some(mine) = lists.pop() else {
        return;
    };
    rayon::in_place_scope(|scope| {
        for list in lists {
            scope.spawn(move |_| list.into_iter().for_each(run));
        }
        mine.into_iter().for_each(run);
    });
}

#[cfg(any(ruccl_loom, ruccl_shuttle))]
fn run_shares<P: Piece>(lists: Vec<Vec<P>>, run: &(impl Fn(P) + Sync)) {
    lists.into_iter().flatten().for_each(run);
}

#[cfg(test)]
mod tests {
    use super::{Piece, share_out};

    #[test]
    fn shares_cover_every_element_once_in_order() {
        let mut first = vec![0u32; 1000];
        let mut second = vec![0u32; 37];
        let pieces: Vec<&mut [u32]> = vec![&mut first, &mut second];
        let lists = share_out(pieces, 1037, 3);
        assert_eq!(lists.len(), 3);
        let lengths: Vec<usize> = lists
            .iter()
            .map(|list| list.iter().map(Piece::len).sum())
            .collect();
        assert_eq!(lengths, vec![384, 384, 269]);
        for (index, list) in lists.into_iter().enumerate() {
            for piece in list {
                piece
                    .iter_mut()
                    .for_each(|value| *value += index as u32 + 1);
            }
        }
        assert!(first[..384].iter().all(|&value| value == 1));
        assert!(first[384..768].iter().all(|&value| value == 2));
        assert!(first[768..].iter().chain(&second).all(|&value| value == 3));
    }
}
