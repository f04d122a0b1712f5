//! [`Pool`]: the simulated device's caching allocator.
//!
//! Memory fresh from the operating system costs a page fault per page on first touch, and a
//! large allocation freed goes back to it: on a 2-vCPU VM an all-gather of
//! 1 MiB per rank at W = 4, whose outputs were fresh allocations, took 9 ms on the device alone,
//! 1.4–1.6 ms with this pool (`cargo bench -p ruccl-sim --bench device_model`). Like a GPU
//! framework's caching allocator, the device keeps the large allocations it is done with —
//! inputs it copied out of, buffers it cut outputs from, copies aside, and the tensors it made
//! once they are dropped — and hands them out again.
//!
//! Bounds, each set by a measurement:
//!
//! - only allocations of at least [`MIN_POOLED_BYTES`] (smaller ones are cheap from `malloc`,
//!   and would add a lock to the small-message path);
//! - at most the pool's limit in all, the oldest freed first, and at most
//!   [`MAX_KEPT_PER_SIZE`] of one type and size;
//! - a request takes the smallest kept allocation that holds it and is at most twice its size,
//!   so a small tensor never pins a large allocation; one that finds none frees the kept ones of
//!   its type too small for it (a sweep to larger sizes leaves nothing behind);
//! - of several kept allocations of that size, the one given back last (last in, first out): it
//!   is the likeliest still in the caches, and the others age out. Oldest first made every plan
//!   run after one that left many allocations behind (a direct all-reduce's copies aside) cycle
//!   through all of them, cold: 1.5× slower on the device alone (halving-doubling after direct,
//!   W = 4, 4 MiB per rank);
//! - an allocation not taken within [`HORIZON`] of the pool's operations is freed, and nothing
//!   is kept while no request came within the last [`HORIZON`]: memory only given back (a
//!   caller whose buffers come from elsewhere) goes straight back to the system allocator,
//!   which can then reuse it for that caller;
//! - nothing, once the caller asks
//!   ([`release_cached`](crate::host::HostTensors::release_cached)): what ages out is freed on
//!   a later call, inside whatever that call's caller times (ruccl-perf asks before each row,
//!   so a warm-up's 64 MiB buffers are not freed inside a 1 MiB row).
//!
//! The shelf is harness bookkeeping behind std's lock, like the census's books (see there for
//! why not the facade's): a checker never sees it, and the sizes models use are below
//! [`MIN_POOLED_BYTES`] anyway.

use super::census::books;
use super::memory::Stored;
use super::pages;
use crate::host::{ElementType, HostValues};
use std::collections::BTreeMap;

/// The smallest allocation the pool keeps, in bytes.
pub(crate) const MIN_POOLED_BYTES: usize = 64 << 10;

/// How many allocations of one type and size the pool keeps at once: two generations' outputs
/// at W = 8.
const MAX_KEPT_PER_SIZE: usize = 16;

/// How many of the pool's operations (requests and allocations given back) a kept allocation
/// survives without being taken: a few generations' worth. What is not in rotation is freed, so
/// sizes a run has left behind go back to the system allocator soon (glibc adapts its own
/// thresholds only to what it sees freed).
const HORIZON: u64 = 64;

/// A device's kept allocations; clones share them. Empty and lock-free when the limit is 0.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    shelf: Option<books::Shared<Shelf>>,
}

/// The kept allocations, each with no elements, by element type, size and age: a request and an
/// eviction are each a logarithmic search, however many are kept.
#[derive(Debug)]
struct Shelf {
    /// By `(type, allocated bytes, age)`.
    kept: BTreeMap<(usize, usize, u64), HostValues>,
    /// The keys of `kept` by age, oldest first.
    ages: BTreeMap<u64, (usize, usize, u64)>,
    /// The next age to give.
    next_age: u64,
    /// `next_age` at the last request for an allocation of at least [`MIN_POOLED_BYTES`].
    last_request: u64,
    /// Σ allocated bytes of `kept`; at most `limit`.
    bytes: usize,
    limit: usize,
}

impl Shelf {
    /// Count one operation, and take out every allocation kept for longer than [`HORIZON`]
    /// operations (to be freed by the caller, outside the lock).
    fn tick(&mut self) -> Vec<HostValues> {
        self.next_age += 1;
        let mut expired = Vec::new();
        while let Some((&age, &key)) = self.ages.first_key_value() {
            if age + HORIZON > self.next_age {
                break;
            }
            expired.extend(self.remove(key));
        }
        expired
    }

    /// Remove the kept allocation under `key`.
    fn remove(&mut self, key: (usize, usize, u64)) -> Option<HostValues> {
        let values = self.kept.remove(&key)?;
        self.ages.remove(&key.2);
        self.bytes -= key.1;
        Some(values)
    }
}

/// The shelf's index of an element type.
fn type_key(element_type: ElementType) -> usize {
    ElementType::ALL
        .iter()
        .position(|&known| known == element_type)
        .unwrap_or(usize::MAX)
}

impl Pool {
    /// A pool keeping at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            shelf: (limit > 0).then(|| {
                books::share(Shelf {
                    kept: BTreeMap::new(),
                    ages: BTreeMap::new(),
                    next_age: 0,
                    last_request: 0,
                    bytes: 0,
                    limit,
                })
            }),
        }
    }

    /// Free every kept allocation (outside the lock).
    pub(crate) fn clear(&self) {
        let Some(shelf) = self.shelf.as_ref() else {
            return;
        };
        let freed = {
            let mut shelf = books::lock(shelf);
            shelf.ages.clear();
            shelf.bytes = 0;
            std::mem::take(&mut shelf.kept)
        };
        drop(freed);
    }

    /// Bytes kept now.
    pub(crate) fn kept_bytes(&self) -> usize {
        self.shelf
            .as_ref()
            .map_or(0, |shelf| books::lock(shelf).bytes)
    }

    /// An empty vector with room for `len` elements, kept or new.
    pub(crate) fn take<T: Stored>(&self, len: usize) -> Vec<T> {
        let wanted = len.saturating_mul(size_of::<T>());
        let Some(shelf) = self.shelf.as_ref().filter(|_| wanted >= MIN_POOLED_BYTES) else {
            return pages::with_capacity(len);
        };
        let kind = type_key(T::TYPE);
        let mut shelf = books::lock(shelf);
        let expired = shelf.tick();
        shelf.last_request = shelf.next_age;
        // The smallest size of this type kept that holds `wanted` bytes, and of that size the
        // allocation given back last: the one most likely still in the caches.
        let best = shelf
            .kept
            .range((kind, wanted, 0)..=(kind, wanted.saturating_mul(2), u64::MAX))
            .next()
            .and_then(|(&(_, size, _), _)| {
                shelf
                    .kept
                    .range((kind, size, 0)..=(kind, size, u64::MAX))
                    .next_back()
            })
            .map(|(&key, _)| key);
        let Some(values) = best.and_then(|key| shelf.remove(key)) else {
            // The sizes in use grew past every kept allocation of this type smaller than the
            // request: free them rather than keep them to the limit.
            let outgrown: Vec<(usize, usize, u64)> = shelf
                .kept
                .range((kind, 0, 0)..(kind, wanted, 0))
                .map(|(&key, _)| key)
                .collect();
            let freed: Vec<HostValues> = outgrown
                .into_iter()
                .filter_map(|key| shelf.remove(key))
                .collect();
            drop(shelf);
            drop((freed, expired));
            return pages::with_capacity(len);
        };
        drop(shelf);
        drop(expired);
        // The key matched the element type, so the unwrap cannot hand the values back.
        T::unwrap(values).unwrap_or_else(|_| pages::with_capacity(len))
    }

    /// `len` elements: `source` from `at`, zeros elsewhere, each written once. The caller
    /// checked that `source` fits from `at` (`validate::begin` does for a rank's input).
    pub(crate) fn placed<T: Stored>(&self, len: usize, at: usize, source: &[T]) -> Vec<T> {
        if len.saturating_mul(size_of::<T>()) >= MIN_POOLED_BYTES && self.shelf.is_none() {
            // Untouched zero pages straight from the allocator.
            let mut values = T::zeroed(len);
            values[at..at + source.len()].copy_from_slice(source);
            return values;
        }
        // Kept, or new from `malloc` — for a small buffer not `calloc`: glibc's `calloc` (2.36
        // here) bypasses the thread's cache of freed chunks, so when one thread allocates the
        // buffers (the runner) and the ranks' threads free them, every allocation and every free
        // took an arena's lock — another core's, in turn (W = 2, one element: out of place cost
        // 0.5–0.6 µs a generation more than in place with `calloc`, 0.10–0.21 µs with `malloc`).
        let mut values = self.take(len);
        values.resize(at, T::default());
        values.extend_from_slice(source);
        values.resize(len, T::default());
        values
    }

    /// A copy of `source`.
    pub(crate) fn copied<T: Stored>(&self, source: &[T]) -> Vec<T> {
        let mut values = self.take(source.len());
        values.extend_from_slice(source);
        values
    }

    /// A copy of `values`, of the same type.
    pub(crate) fn copied_values(&self, values: &HostValues) -> HostValues {
        match values {
            HostValues::F32(v) => HostValues::F32(self.copied(v)),
            HostValues::F64(v) => HostValues::F64(self.copied(v)),
            HostValues::F16(v) => HostValues::F16(self.copied(v)),
            HostValues::BF16(v) => HostValues::BF16(self.copied(v)),
            HostValues::I32(v) => HostValues::I32(self.copied(v)),
            HostValues::I64(v) => HostValues::I64(self.copied(v)),
            HostValues::I8(v) => HostValues::I8(self.copied(v)),
            HostValues::U8(v) => HostValues::U8(self.copied(v)),
            HostValues::U32(v) => HostValues::U32(self.copied(v)),
            HostValues::U64(v) => HostValues::U64(self.copied(v)),
            // A type added to ruccl-host after this pool: a plain copy, outside the pool.
            other => other.clone(),
        }
    }

    /// A handle for giving `values`' allocation back later, only if the pool could keep it:
    /// for a small one (or a pool that keeps nothing), `None`, so that the value holds no
    /// reference to the shared pool (a reference count every core writes, whose cache line would
    /// cross cores every generation).
    pub(crate) fn keeper_of(&self, values: &HostValues) -> Option<Pool> {
        let keeps = self.shelf.is_some() && values.allocated_bytes() >= MIN_POOLED_BYTES;
        keeps.then(|| self.clone())
    }

    /// Keep `values`' allocation for a later request, if it is large enough.
    pub(crate) fn give<T: Stored>(&self, values: Vec<T>) {
        if values.capacity().saturating_mul(size_of::<T>()) >= MIN_POOLED_BYTES {
            self.give_values(T::wrap(values));
        }
    }

    /// Keep `values`' allocation for a later request, if it is large enough and fits the limit
    /// (evicting the oldest).
    pub(crate) fn give_values(&self, mut values: HostValues) {
        let bytes = values.allocated_bytes();
        let Some(shelf) = self.shelf.as_ref().filter(|_| bytes >= MIN_POOLED_BYTES) else {
            return;
        };
        values.clear();
        let mut evicted;
        {
            let mut shelf = books::lock(shelf);
            evicted = shelf.tick();
            let kind = type_key(values.element_type());
            let alike = shelf
                .kept
                .range((kind, bytes, 0)..=(kind, bytes, u64::MAX))
                .count();
            // Nobody asked for a large allocation lately: keeping this one would only hold it
            // back from the system allocator.
            let unasked = shelf.next_age - shelf.last_request > HORIZON;
            if bytes > shelf.limit || alike >= MAX_KEPT_PER_SIZE || unasked {
                drop(shelf);
                drop((evicted, values));
                return;
            }
            while shelf.bytes + bytes > shelf.limit {
                let Some(oldest) = shelf.ages.first_key_value().map(|(_, &key)| key) else {
                    break;
                };
                evicted.extend(shelf.remove(oldest));
            }
            let key = (kind, bytes, shelf.next_age);
            shelf.bytes += bytes;
            shelf.ages.insert(key.2, key);
            shelf.kept.insert(key, values);
        }
        // Freed outside the lock: returning memory to the system is a system call.
        drop(evicted);
    }
}

#[cfg(test)]
mod tests {
    use super::{MIN_POOLED_BYTES, Pool};
    use crate::HostValues;

    const LARGE: usize = MIN_POOLED_BYTES / 4;

    #[test]
    fn a_large_allocation_given_back_is_handed_out_again() {
        let pool = Pool::new(1 << 30);
        let values: Vec<f32> = vec![1.0; LARGE];
        let address = values.as_ptr();
        pool.give(values);
        assert_eq!(pool.kept_bytes(), MIN_POOLED_BYTES);
        let again: Vec<f32> = pool.placed(LARGE, 1, &[2.0, 3.0]);
        assert_eq!(again.as_ptr(), address);
        assert_eq!(again[..4], [0.0, 2.0, 3.0, 0.0]);
        assert!(again[4..].iter().all(|&value| value == 0.0));
        assert_eq!(pool.kept_bytes(), 0);
    }

    #[test]
    fn only_an_allocation_the_pool_could_keep_holds_a_handle_to_it() {
        let small = HostValues::F32(vec![0.0; LARGE - 1]);
        let large = HostValues::F32(vec![0.0; LARGE]);
        assert!(Pool::new(1 << 30).keeper_of(&small).is_none());
        assert!(Pool::new(1 << 30).keeper_of(&large).is_some());
        assert!(Pool::new(0).keeper_of(&large).is_none());
    }

    #[test]
    fn of_one_size_the_allocation_given_back_last_is_handed_out_first() {
        let pool = Pool::new(1 << 30);
        let first = vec![0f32; LARGE];
        let second = vec![0f32; LARGE];
        let (first_address, second_address) = (first.as_ptr(), second.as_ptr());
        pool.give(first);
        pool.give(second);
        let taken: Vec<f32> = pool.copied(&[1.0; LARGE]);
        assert_eq!(taken.as_ptr(), second_address);
        let next: Vec<f32> = pool.copied(&[1.0; LARGE]);
        assert_eq!(next.as_ptr(), first_address);
    }

    #[test]
    fn small_other_typed_or_much_larger_allocations_are_not_handed_out() {
        let pool = Pool::new(1 << 30);
        pool.give(vec![0f32; 16]);
        assert_eq!(pool.kept_bytes(), 0, "small allocations are not kept");
        pool.give(vec![0f32; 4 * LARGE]);
        let other: Vec<i32> = pool.copied(&[7; LARGE]);
        assert_eq!(other.len(), LARGE);
        let half: Vec<f32> = pool.copied(&[1.0; LARGE]);
        assert_eq!(
            half.capacity(),
            LARGE,
            "four times larger than asked: left kept"
        );
        assert_eq!(pool.kept_bytes(), 4 * MIN_POOLED_BYTES);
    }

    #[test]
    fn the_pool_keeps_at_most_its_limit_evicting_the_oldest() {
        let pool = Pool::new(2 * MIN_POOLED_BYTES);
        let oldest = vec![0f32; LARGE];
        let oldest_address = oldest.as_ptr();
        pool.give(oldest);
        pool.give(vec![0f32; LARGE]);
        pool.give(vec![0f32; LARGE]);
        assert_eq!(pool.kept_bytes(), 2 * MIN_POOLED_BYTES);
        pool.give(vec![0f32; 3 * LARGE]);
        assert_eq!(
            pool.kept_bytes(),
            2 * MIN_POOLED_BYTES,
            "larger than the limit: freed"
        );
        for _ in 0..2 {
            let values: Vec<f32> = pool.placed(LARGE, 0, &[]);
            assert_ne!(values.as_ptr(), oldest_address);
        }
    }

    #[test]
    fn an_allocation_out_of_rotation_is_freed() {
        let pool = Pool::new(1 << 30);
        pool.give(vec![0f32; LARGE]);
        for _ in 0..super::HORIZON {
            let other: Vec<i32> = pool.copied(&[1; LARGE]);
            drop(other);
        }
        assert_eq!(pool.kept_bytes(), 0);
    }

    #[test]
    fn allocations_of_one_size_beyond_the_cap_are_freed_at_once() {
        let pool = Pool::new(1 << 30);
        for _ in 0..super::MAX_KEPT_PER_SIZE + 3 {
            pool.give(vec![0f32; LARGE]);
        }
        assert_eq!(
            pool.kept_bytes(),
            super::MAX_KEPT_PER_SIZE * MIN_POOLED_BYTES
        );
    }

    #[test]
    fn a_pool_nobody_asks_keeps_nothing() {
        let pool = Pool::new(1 << 30);
        for _ in 0..2 * super::HORIZON {
            pool.give(vec![0f32; LARGE]);
            pool.give(vec![0i32; LARGE]);
        }
        assert_eq!(pool.kept_bytes(), 0);
        let asked: Vec<f32> = pool.copied(&[1.0; LARGE]);
        pool.give(asked);
        assert_eq!(pool.kept_bytes(), MIN_POOLED_BYTES, "kept again once asked");
    }

    #[test]
    fn a_pool_without_room_keeps_nothing() {
        let pool = Pool::new(0);
        pool.give_values(HostValues::F32(vec![0.0; LARGE]));
        assert_eq!(pool.kept_bytes(), 0);
    }
}
