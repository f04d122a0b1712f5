//! The per-logical-device buffer cache: steady-state collectives of one shape allocate nothing.
//!
//! Every device allocation the executor makes for a logical device — working buffers, scratch,
//! staging, output copies, uploads — comes from that device's [`Pool`] and carries a link back
//! to it. When such a buffer is released (a generation's scratch at `finish`, an input consumed
//! out of place, a tensor the caller drops) it goes back to the pool instead of `cuMemFree`, and
//! the next request of exactly the same size takes it instead of `cuMemAlloc`. A generation of
//! the same collective, algorithm, world, length and type asks for the same sizes as the one
//! before, so from the second generation on every request is a hit (the unit tests replay every
//! built-in plan's requests to show it).
//!
//! # Why a returned buffer needs no wait
//! A pooled buffer belongs to one logical device: its owner stream is that device's stream
//! `S_r`, and the pool hands it only to work of the same device. Every later use is either on
//! `S_r`, and so after everything queued on it before, or on another rank's stream after that
//! stream waited on an event recorded on `S_r` after the buffer was taken (`exchange.rs`). So a
//! buffer may go back to the pool with work still queued on `S_r` (a tensor dropped right after
//! the caller queued a kernel on it): whatever uses it next is ordered after that work, exactly
//! as with the stream-ordered allocator. Work on other streams of the caller's must be ordered
//! before the drop by the caller, as for any CUDA allocation.
//!
//! # Bounds and release
//! A pool keeps at most [`CudaConfig::cache_bytes`](crate::CudaConfig::cache_bytes) bytes and
//! [`MAX_CACHED_BUFFERS`] buffers; returning one more evicts the oldest, and a buffer larger
//! than the whole budget is not kept. Evicted buffers, and every buffer still cached when the
//! pool is dropped (with its lane, when the executor goes away) or trimmed
//! ([`CudaCollective::trim_caches`](crate::CudaCollective::trim_caches)), are freed the safe way
//! (`buffer.rs`): drain the context's deferred error, bind the context, complete the owner
//! stream, `cuMemFree`. Freeing happens outside the pool's lock.

use crate::buffer::DeviceBuffer;
use crate::error::Result;
use cudarc::driver::CudaStream;
use ruccl_core::DeviceId;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// The most idle buffers one logical device keeps.
pub const MAX_CACHED_BUFFERS: usize = 64;

/// What a logical device's buffer cache has done so far, and what it holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Requests served from the cache (no allocation).
    pub hits: u64,
    /// Requests that allocated device memory (`cuMemAlloc`): nothing of that size was cached.
    pub misses: u64,
    /// Buffers given back and kept.
    pub kept: u64,
    /// Buffers given back and freed: larger than the budget, or evicted to stay within it.
    pub freed: u64,
    /// Buffers cached now.
    pub cached_buffers: usize,
    /// Bytes cached now.
    pub cached_bytes: usize,
}

/// Something with a size in bytes, as the cache keys it.
pub(crate) trait HasSize {
    /// The size in bytes.
    fn size(&self) -> usize;
}

/// The bookkeeping of one cache: idle buffers, oldest first, within a byte and a count budget.
/// Generic over the buffer so the policy is tested without a GPU.
#[derive(Debug)]
pub(crate) struct BufferCache<B> {
    limit_bytes: usize,
    limit_buffers: usize,
    idle: VecDeque<B>,
    stats: CacheStats,
}

impl<B: HasSize> BufferCache<B> {
    /// An empty cache keeping at most `limit_bytes` bytes in at most `limit_buffers` buffers.
    pub(crate) fn new(limit_bytes: usize, limit_buffers: usize) -> Self {
        Self {
            limit_bytes,
            limit_buffers,
            idle: VecDeque::new(),
            stats: CacheStats::default(),
        }
    }

    /// A cached buffer of exactly `bytes` bytes (the most recently returned one), counted as a
    /// hit; `None`, counted as a miss, when there is none (the caller allocates).
    pub(crate) fn take(&mut self, bytes: usize) -> Option<B> {
        let found = self.idle.iter().rposition(|buffer| buffer.size() == bytes);
        match found.and_then(|index| self.idle.remove(index)) {
            Some(buffer) => {
                self.stats.hits += 1;
                self.stats.cached_buffers -= 1;
                self.stats.cached_bytes -= bytes;
                Some(buffer)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Keep `buffer` for later. Returns what must be freed instead: the buffer itself when it is
    /// larger than the whole budget, else the oldest buffers evicted to make room for it.
    pub(crate) fn give(&mut self, buffer: B) -> Vec<B> {
        let bytes = buffer.size();
        if bytes > self.limit_bytes || self.limit_buffers == 0 {
            self.stats.freed += 1;
            return vec![buffer];
        }
        let mut evicted = Vec::new();
        while self.stats.cached_bytes + bytes > self.limit_bytes
            || self.stats.cached_buffers + 1 > self.limit_buffers
        {
            let Some(oldest) = self.idle.pop_front() else {
                break;
            };
            self.stats.cached_buffers -= 1;
            self.stats.cached_bytes -= oldest.size();
            self.stats.freed += 1;
            evicted.push(oldest);
        }
        self.idle.push_back(buffer);
        self.stats.kept += 1;
        self.stats.cached_buffers += 1;
        self.stats.cached_bytes += bytes;
        evicted
    }

    /// Every cached buffer, for freeing.
    pub(crate) fn drain(&mut self) -> Vec<B> {
        self.stats.freed += self.idle.len() as u64;
        self.stats.cached_buffers = 0;
        self.stats.cached_bytes = 0;
        self.idle.drain(..).collect()
    }

    /// The counters and the current contents.
    pub(crate) fn stats(&self) -> CacheStats {
        self.stats
    }
}

impl HasSize for DeviceBuffer {
    fn size(&self) -> usize {
        self.bytes()
    }
}

/// One logical device's cache of device buffers (see the module docs).
pub(crate) struct Pool {
    cache: Mutex<BufferCache<DeviceBuffer>>,
}

impl Pool {
    /// A pool keeping at most `limit_bytes` bytes.
    pub(crate) fn new(limit_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            cache: Mutex::new(BufferCache::new(limit_bytes, MAX_CACHED_BUFFERS)),
        })
    }

    /// A buffer of exactly `bytes` bytes owned by `stream` (this pool's device's stream): a
    /// cached one, or a new allocation. Either way it returns here when released. An empty
    /// buffer allocates nothing and is neither counted nor cached. The caller has saved the
    /// thread's context.
    pub(crate) fn take(
        self: &Arc<Self>,
        stream: &Arc<CudaStream>,
        bytes: usize,
        device: DeviceId,
    ) -> Result<DeviceBuffer> {
        if bytes == 0 {
            return DeviceBuffer::alloc(stream, 0, device);
        }
        let cached = self.lock().take(bytes);
        let buffer = match cached {
            Some(buffer) => buffer,
            None => DeviceBuffer::alloc(stream, bytes, device)?,
        };
        Ok(buffer.homed(Arc::downgrade(self)))
    }

    /// Keep a released buffer (no longer linked to this pool); free what the budget cannot keep,
    /// after the lock is released.
    pub(crate) fn give(&self, buffer: DeviceBuffer) {
        let to_free = self.lock().give(buffer);
        drop(to_free);
    }

    /// Free every cached buffer.
    pub(crate) fn trim(&self) {
        let to_free = self.lock().drain();
        drop(to_free);
    }

    /// The pool's counters.
    pub(crate) fn stats(&self) -> CacheStats {
        self.lock().stats()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BufferCache<DeviceBuffer>> {
        // The critical sections only move values in and out of a deque: a panic there leaves
        // the cache consistent enough to keep using.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Free outside the lock, each buffer the safe way (`buffer.rs`).
        let to_free = self
            .cache
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain();
        drop(to_free);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in buffer: its size and a label.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) struct Fake(pub(crate) usize, pub(crate) u32);

    impl HasSize for Fake {
        fn size(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn a_returned_buffer_serves_the_next_request_of_its_exact_size() {
        let mut cache = BufferCache::new(1 << 20, 8);
        assert_eq!(cache.take(256), None);
        assert!(cache.give(Fake(256, 1)).is_empty());
        assert_eq!(cache.take(128), None, "no other size is served");
        assert_eq!(cache.take(256), Some(Fake(256, 1)));
        assert_eq!(cache.take(256), None, "taken buffers are gone");
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.kept), (1, 3, 1));
        assert_eq!((stats.cached_buffers, stats.cached_bytes), (0, 0));
    }

    #[test]
    fn the_most_recently_returned_buffer_of_a_size_is_taken_first() {
        let mut cache = BufferCache::new(1 << 20, 8);
        let _ = cache.give(Fake(64, 1));
        let _ = cache.give(Fake(64, 2));
        assert_eq!(cache.take(64), Some(Fake(64, 2)));
    }

    #[test]
    fn the_byte_budget_evicts_the_oldest_and_refuses_what_never_fits() {
        let mut cache = BufferCache::new(1000, 8);
        assert!(cache.give(Fake(400, 1)).is_empty());
        assert!(cache.give(Fake(400, 2)).is_empty());
        assert_eq!(cache.give(Fake(400, 3)), vec![Fake(400, 1)]);
        assert_eq!(cache.give(Fake(1001, 4)), vec![Fake(1001, 4)]);
        let stats = cache.stats();
        assert_eq!((stats.cached_buffers, stats.cached_bytes), (2, 800));
        assert_eq!((stats.kept, stats.freed), (3, 2));
    }

    #[test]
    fn the_count_budget_evicts_the_oldest() {
        let mut cache = BufferCache::new(1 << 20, 2);
        let _ = cache.give(Fake(8, 1));
        let _ = cache.give(Fake(8, 2));
        assert_eq!(cache.give(Fake(8, 3)), vec![Fake(8, 1)]);
        assert_eq!(cache.stats().cached_buffers, 2);
    }

    #[test]
    fn a_zero_budget_keeps_nothing_and_drain_empties_the_cache() {
        let mut cache = BufferCache::new(0, 8);
        assert_eq!(cache.give(Fake(1, 1)), vec![Fake(1, 1)]);
        let mut cache = BufferCache::new(100, 8);
        let _ = cache.give(Fake(10, 1));
        let _ = cache.give(Fake(20, 2));
        assert_eq!(cache.drain(), vec![Fake(10, 1), Fake(20, 2)]);
        assert_eq!(cache.stats().cached_bytes, 0);
        assert_eq!(cache.stats().freed, 2);
    }
}
