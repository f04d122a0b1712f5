//! [`DeviceBuffer`]: one plain device allocation (`cuMemAlloc`), owned, freed on drop.
//!
//! The executor manages device memory itself rather than through cudarc's `CudaSlice`, whose
//! automatic per-slice events add implicit waits and cannot be recorded across contexts (a peer
//! copy between two logical ranks' contexts would leave an error in cudarc's deferred-error
//! slot). Here every ordering is an explicit event (see `exchange.rs`).
//!
//! Plain allocations, not the stream-ordered pool: a peer copy between contexts reads and writes
//! them without `cuMemPoolSetAccess` grants.
//!
//! # Ownership and lifetime
//! A buffer belongs to one logical device's context and records its *owner stream*: the stream
//! that created it. Dropping it first completes the owner stream, then frees. Every use of a
//! buffer is either on its owner stream, or on another rank's stream inside one generation (a
//! peer copy into a scratch buffer, a clone out of an input) — and every generation completes all
//! its ranks' streams before it releases any buffer (`CudaWork` does so in `finish` and in its
//! `Drop`). So memory is never freed under queued work: dropping drains the context's deferred
//! error, binds the context and *always* waits for the owner stream before `cuMemFree` (see
//! `context.rs` for why cudarc's own `synchronize` is not enough). Failures in `drop` cannot be
//! returned; they are put back into the context (cudarc's deferred error) and surface on its
//! next call, the earliest first.
//!
//! # Pooled buffers
//! A buffer taken from a logical device's pool (`cache.rs`) keeps a weak link to it: dropping
//! it hands the allocation back to the pool (no wait, no free; `cache.rs` says why that is
//! safe) while the pool lives, and frees it as above otherwise — or when the pool's budget
//! cannot keep it.
//!
//! # Bounds
//! Every address handed to a copy or kernel comes from [`DeviceBuffer::span`], which checks the
//! byte range against the buffer in every build and returns [`CudaError::BufferOverrun`].

use crate::cache::Pool;
use crate::context::{SavedContext, Scoped, bind, complete};
use crate::error::{CudaError, DriverResultExt, Result};
use cudarc::driver::{CudaContext, CudaStream, result};
use ruccl_core::DeviceId;
use std::sync::{Arc, Weak};

/// An owned device allocation of `bytes` bytes in its owner stream's context. A zero-byte buffer
/// allocates nothing (its address is 0, which is never dereferenced: zero-length copies and
/// kernels are skipped).
pub(crate) struct DeviceBuffer {
    /// Device address; 0 exactly when `bytes == 0`.
    address: u64,
    bytes: usize,
    stream: Scoped<Arc<CudaStream>>,
    /// The pool the allocation goes back to when released, if it came from one.
    home: Option<Weak<Pool>>,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("address", &self.address)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl DeviceBuffer {
    /// Allocate `bytes` bytes in `stream`'s context, owned by `stream`. The caller has saved the
    /// thread's context (the executor's entry points do).
    pub(crate) fn alloc(stream: &Arc<CudaStream>, bytes: usize, device: DeviceId) -> Result<Self> {
        let address = if bytes == 0 {
            0
        } else {
            stream
                .context()
                .bind_to_thread()
                .during("cuCtxSetCurrent", Some(device))?;
            // SAFETY: the context is current on this thread (bound above); the allocation is
            // uninitialised memory that nothing reads before the executor writes it (a clone, a
            // copy or an upload), and it is freed exactly once, in `drop`.
            unsafe { result::malloc_sync(bytes) }.during("cuMemAlloc", Some(device))?
        };
        Ok(Self {
            address,
            bytes,
            stream: Scoped::new(Arc::clone(stream)),
            home: None,
        })
    }

    /// This buffer, going back to `home` when released.
    pub(crate) fn homed(mut self, home: Weak<Pool>) -> Self {
        self.home = Some(home);
        self
    }

    /// The device address of the first byte (0 for an empty buffer). Valid for `bytes()` bytes.
    pub(crate) fn base_address(&self) -> u64 {
        self.address
    }

    /// The device address of `len` bytes starting at byte `offset`, checked to lie within the
    /// buffer (in every build).
    pub(crate) fn span(&self, offset: usize, len: usize) -> Result<u64> {
        span_of(self.address, self.bytes, offset, len)
    }

    /// The size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The owner stream.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The context the memory belongs to.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        self.stream.context()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.address == 0 {
            return;
        }
        if let Some(pool) = self.home.take().and_then(|home| home.upgrade()) {
            // Hand the allocation over to a buffer the pool keeps (unlinked, so that its own
            // release is a free), and leave this one empty.
            let kept = DeviceBuffer {
                address: self.address,
                bytes: self.bytes,
                stream: Scoped::new(Arc::clone(&self.stream)),
                home: None,
            };
            self.address = 0;
            pool.give(kept);
            return;
        }
        let _restore = SavedContext::save();
        let context = self.stream.context();
        // Drain the deferred error, bind, and wait for every queued use — never skipped.
        let completion = complete(&self.stream);
        // Free only in the buffer's own context: if it cannot be bound, leaking is the safe
        // failure.
        let freed = bind(context).and_then(|()| {
            // SAFETY: `address` came from `cuMemAlloc` in this context (current: bound above) and
            // is freed only here; the owner stream — on which every use of the buffer is
            // ordered — has just been waited for.
            unsafe { result::free_sync(self.address) }
        });
        context.record_err(freed);
        completion.defer_into(context);
    }
}

/// The address of `len` bytes at `offset` in an allocation of `size` bytes at `base`, or
/// [`CudaError::BufferOverrun`] when they do not lie within it.
fn span_of(base: u64, size: usize, offset: usize, len: usize) -> Result<u64> {
    let within = offset
        .checked_add(len)
        .filter(|&end| end <= size)
        .and_then(|_| u64::try_from(offset).ok())
        .and_then(|offset| base.checked_add(offset));
    within.ok_or(CudaError::BufferOverrun {
        offset,
        bytes: len,
        size,
    })
}

/// Queue a copy of `bytes` bytes from `src` at `src_offset` to `dst` at `dst_offset`, on
/// `stream`. Within one context this is `cuMemcpyDtoDAsync`; between contexts (another GPU, or
/// another logical rank's context on the same GPU) `cuMemcpyPeerAsync`, which goes over the peer
/// link when peer access is enabled and is staged by the driver otherwise. Both ranges are
/// checked against their buffers first ([`CudaError::BufferOverrun`]).
///
/// # Safety
/// The ranges must not overlap, and the caller must order the copy (with events) after every
/// earlier write of the source range and every earlier access of the destination range, and
/// before any later one: the copy runs asynchronously on `stream`.
pub(crate) unsafe fn copy_async(
    (dst, dst_offset): (&DeviceBuffer, usize),
    (src, src_offset): (&DeviceBuffer, usize),
    bytes: usize,
    stream: &CudaStream,
    device: DeviceId,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let (dst_address, src_address) = (dst.span(dst_offset, bytes)?, src.span(src_offset, bytes)?);
    stream
        .context()
        .bind_to_thread()
        .during("cuCtxSetCurrent", Some(device))?;
    let (dst_context, src_context) = (dst.context().cu_ctx(), src.context().cu_ctx());
    if dst_context == src_context {
        // SAFETY: both addresses are live allocations of this context (they belong to buffers
        // borrowed for the call, which outlive the copy because their owner streams are
        // completed before they are freed), and both ranges were checked in bounds above.
        unsafe { result::memcpy_dtod_async(dst_address, src_address, bytes, stream.cu_stream()) }
            .during("cuMemcpyDtoDAsync", Some(device))
    } else {
        // SAFETY: as above, with each address valid in its own context, which the call names.
        unsafe {
            result::memcpy_peer_async(
                dst_context,
                dst_address,
                src_context,
                src_address,
                bytes,
                stream.cu_stream(),
            )
        }
        .during("cuMemcpyPeerAsync", Some(device))
    }
}

#[cfg(feature = "harness")]
/// Fill `buffer` (of exactly `bytes.len()` bytes, owned by `stream`) with `bytes` from the host;
/// returns once the copy has completed. The caller has saved the thread's context.
pub(crate) fn upload_bytes(
    buffer: DeviceBuffer,
    stream: &Arc<CudaStream>,
    bytes: &[u8],
    device: DeviceId,
) -> Result<DeviceBuffer> {
    if bytes.is_empty() {
        return Ok(buffer);
    }
    let destination = buffer.span(0, bytes.len())?;
    stream
        .context()
        .bind_to_thread()
        .during("cuCtxSetCurrent", Some(device))?;
    // SAFETY: the destination holds exactly `bytes.len()` bytes in this context (checked by
    // `span`; current: bound above), and it is owned here: no other value references it, and any
    // earlier use of it is queued on this same stream, before the copy. The host slice is
    // borrowed for this whole function, which waits for the copy below (a wait that is never
    // skipped) before returning on any path after this point.
    let queued = unsafe { result::memcpy_htod_async(destination, bytes, stream.cu_stream()) }
        .during("cuMemcpyHtoDAsync", Some(device));
    let waited = complete(stream).into_result(device);
    queued?;
    waited?;
    Ok(buffer)
}

#[cfg(feature = "harness")]
/// The contents of `buffer`, copied to the host after all work queued on its owner stream.
/// The caller has saved the thread's context.
pub(crate) fn download_bytes(buffer: &DeviceBuffer, device: DeviceId) -> Result<Vec<u8>> {
    let mut bytes = vec![0_u8; buffer.bytes()];
    if bytes.is_empty() {
        return Ok(bytes);
    }
    let source = buffer.span(0, bytes.len())?;
    let stream = buffer.stream();
    stream
        .context()
        .bind_to_thread()
        .during("cuCtxSetCurrent", Some(device))?;
    // SAFETY: the buffer holds `bytes.len()` bytes in its owner stream's context (current: bound
    // above) and is borrowed for this call; the copy is ordered after all work queued on that
    // stream. The host vector is owned here and not touched, moved or dropped until the wait
    // below (never skipped) has completed the copy.
    let queued = unsafe { result::memcpy_dtoh_async(&mut bytes, source, stream.cu_stream()) }
        .during("cuMemcpyDtoHAsync", Some(device));
    let waited = complete(stream).into_result(device);
    queued?;
    waited?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer description without a driver: the span check is pure arithmetic.
    fn check(size: usize, offset: usize, len: usize) -> std::result::Result<u64, CudaError> {
        span_of(0x1000, size, offset, len)
    }

    #[test]
    fn spans_inside_the_buffer_are_addresses_from_its_base() {
        assert_eq!(check(64, 0, 64).ok(), Some(0x1000));
        assert_eq!(check(64, 16, 48).ok(), Some(0x1010));
        assert_eq!(check(64, 64, 0).ok(), Some(0x1040));
    }

    #[test]
    fn spans_past_the_end_or_overflowing_are_overruns_in_every_build() {
        assert!(matches!(
            check(64, 60, 8),
            Err(CudaError::BufferOverrun {
                offset: 60,
                bytes: 8,
                size: 64
            })
        ));
        assert!(matches!(
            check(64, 65, 0),
            Err(CudaError::BufferOverrun { .. })
        ));
        assert!(matches!(
            check(64, usize::MAX, 2),
            Err(CudaError::BufferOverrun { .. })
        ));
    }
}
