//! [`Pool`]: recycled output buffers, so that a large generation does not fault in fresh pages.
//!
//! A fresh multi-megabyte `Vec` comes from `mmap`: every 4 KiB page faults (and is zeroed by the
//! kernel) on first touch, which costs about a third of the ring's own memory traffic. Real devices
//! keep their memory; the simulated device keeps the buffers of dropped inputs (a
//! [`SimPrepared`](super::SimPrepared) holding the last reference to its tensor gives its
//! elements back here) and hands them out as the next generation's output buffers. Their old
//! contents are never read: [`Ready`](super::ready::Ready) tracks which elements were written.
//!
//! Only buffers of at least [`MIN_POOLED_BYTES`] are pooled (small ones come from the allocator's
//! free lists at no cost), a buffer is reused only for a tensor at least half its length, and the
//! pool keeps at most `W` buffers for the largest world `W` it has served (a generation takes
//! `W` output buffers and gives back its `W` inputs).
//!
//! Under a model checker (`--cfg ruccl_loom` / `--cfg ruccl_shuttle`) there is no pool: its lock
//! would add scheduling points to every generation for no behaviour worth checking.

use super::memory::Stored;
use crate::host::HostValues;

/// Buffers smaller than this are not pooled.
pub(crate) const MIN_POOLED_BYTES: usize = 1 << 16;

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
mod enabled {
    use super::{MIN_POOLED_BYTES, Stored};
    use crate::host::HostValues;
    use ruccl_core::sync::{Arc, Mutex};

    /// Shared by a device, its clones and the prepared inputs it made.
    #[derive(Clone, Default)]
    pub(crate) struct Pool {
        shelf: Arc<Mutex<Shelf>>,
    }

    /// The pooled buffers, under the lock.
    #[derive(Default)]
    struct Shelf {
        buffers: Vec<HostValues>,
        /// At most this many buffers are kept: the largest world served so far.
        capacity: usize,
    }

    impl Pool {
        /// A buffer of `length` elements of `T` (contents unspecified), recycled if the pool has
        /// a fit.
        pub(crate) fn take<T: Stored>(&self, length: usize) -> Vec<T> {
            if length * size_of::<T>() < MIN_POOLED_BYTES {
                return T::zeroed(length);
            }
            let recycled = {
                let mut shelf = self.shelf.lock();
                let fit = shelf
                    .buffers
                    .iter()
                    .enumerate()
                    .filter(|(_, buffer)| fits::<T>(buffer, length))
                    .min_by_key(|(_, buffer)| buffer.len())
                    .map(|(index, _)| index);
                fit.map(|index| shelf.buffers.swap_remove(index))
            };
            match recycled.map(T::unwrap) {
                Some(Ok(mut buffer)) => {
                    // Shrinking writes nothing; the old contents are never read.
                    buffer.truncate(length);
                    buffer
                }
                // `fits` checked the element type, so this is a fresh buffer in practice.
                _ => T::zeroed(length),
            }
        }

        /// Keep up to `buffers` buffers (the world being served) from now on.
        pub(crate) fn reserve(&self, buffers: usize) {
            let mut shelf = self.shelf.lock();
            shelf.capacity = shelf.capacity.max(buffers);
        }

        /// Keep `values` for a later generation, if it is worth keeping.
        pub(crate) fn give(&self, values: HostValues) {
            let bytes = values.len() * values.element_type().size();
            if bytes < MIN_POOLED_BYTES {
                return;
            }
            let evicted = {
                let mut shelf = self.shelf.lock();
                shelf.buffers.push(values);
                if shelf.buffers.len() > shelf.capacity.max(1) {
                    let smallest = shelf
                        .buffers
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, buffer)| buffer.len() * buffer.element_type().size())
                        .map(|(index, _)| index);
                    smallest.map(|index| shelf.buffers.swap_remove(index))
                } else {
                    None
                }
            };
            // Freed outside the lock: unmapping a large buffer takes a while.
            drop(evicted);
        }

        /// Buffers held right now.
        pub(crate) fn held(&self) -> usize {
            self.shelf.lock().buffers.len()
        }
    }

    fn fits<T: Stored>(buffer: &HostValues, length: usize) -> bool {
        T::view(buffer).is_some() && buffer.len() >= length && buffer.len() / 2 <= length
    }
}

#[cfg(any(ruccl_loom, ruccl_shuttle))]
mod enabled {
    use super::Stored;
    use crate::host::HostValues;

    /// Under a checker the pool keeps nothing and allocates every buffer. (A field, so that
    /// both configurations build it with `Pool::default()`.)
    #[derive(Clone, Default)]
    pub(crate) struct Pool {
        _nothing: (),
    }

    impl Pool {
        /// A fresh buffer of `length` elements.
        pub(crate) fn take<T: Stored>(&self, length: usize) -> Vec<T> {
            T::zeroed(length)
        }

        /// Keeps nothing.
        pub(crate) fn reserve(&self, buffers: usize) {
            let _ = buffers;
        }

        /// Drops `values`.
        pub(crate) fn give(&self, values: HostValues) {
            drop(values);
        }

        /// Always 0.
        pub(crate) fn held(&self) -> usize {
            0
        }
    }
}

pub(crate) use enabled::Pool;

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("held", &self.held()).finish()
    }
}

/// Whether a buffer of these values would be pooled when dropped.
pub(crate) fn worth_pooling(values: &HostValues) -> bool {
    values.len() * values.element_type().size() >= MIN_POOLED_BYTES
}

#[cfg(all(test, not(any(ruccl_loom, ruccl_shuttle))))]
mod tests {
    use super::{MIN_POOLED_BYTES, Pool};
    use crate::host::HostValues;

    /// f32 elements in a buffer twice the pooling threshold.
    const LARGE: usize = MIN_POOLED_BYTES / 2;

    fn all(values: &[f32], expected: f32) -> bool {
        values.iter().all(|&value| value == expected)
    }

    #[test]
    fn buffers_are_reused_for_tensors_of_a_similar_size_and_type() {
        let pool = Pool::default();
        pool.reserve(2);
        pool.give(HostValues::F32(vec![7.0; LARGE]));
        pool.give(HostValues::I32(vec![7; 4 * LARGE]));
        // Too small to keep.
        pool.give(HostValues::F32(vec![7.0; 16]));
        assert_eq!(pool.held(), 2);
        // Another type, or a tensor under half the buffer's length, gets a fresh one.
        assert!(pool.take::<f64>(LARGE).iter().all(|&value| value == 0.0));
        assert!(pool.take::<i32>(LARGE).iter().all(|&value| value == 0));
        assert_eq!(pool.held(), 2);
        // A fit is handed out, shortened (its old contents are never read by the device).
        let reused = pool.take::<f32>(LARGE - 1);
        assert_eq!(reused.len(), LARGE - 1);
        assert!(all(&reused, 7.0));
        assert_eq!(pool.held(), 1);
    }

    #[test]
    fn the_pool_keeps_the_largest_buffers_up_to_its_capacity() {
        let pool = Pool::default();
        pool.reserve(2);
        for length in [LARGE, 3 * LARGE, 2 * LARGE] {
            pool.give(HostValues::F32(vec![1.0; length]));
        }
        // The smallest was evicted.
        assert_eq!(pool.held(), 2);
        // The best fit for LARGE is the 2·LARGE buffer; 3·LARGE is too long for it.
        let first = pool.take::<f32>(LARGE);
        assert_eq!((first.len(), first.capacity()), (LARGE, 2 * LARGE));
        let second = pool.take::<f32>(2 * LARGE);
        assert_eq!((second.len(), second.capacity()), (2 * LARGE, 3 * LARGE));
        assert_eq!(pool.held(), 0);
    }
}
