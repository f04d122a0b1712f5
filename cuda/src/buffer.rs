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
//! `Drop`). So memory is never freed under queued work. Failures in `drop` cannot be returned; they are recorded in the
//! context (cudarc's deferred error) and surface on its next call.

use crate::error::{DriverResultExt, Result};
use cudarc::driver::{CudaContext, CudaStream, result};
use ruccl_core::DeviceId;
use std::sync::Arc;

/// An owned device allocation of `bytes` bytes in its owner stream's context. A zero-byte buffer
/// allocates nothing (its address is 0, which is never dereferenced: zero-length copies and
/// kernels are skipped).
#[derive(Debug)]
pub(crate) struct DeviceBuffer {
    /// Device address; 0 exactly when `bytes == 0`.
    address: u64,
    bytes: usize,
    stream: Arc<CudaStream>,
}

impl DeviceBuffer {
    /// Allocate `bytes` bytes in `stream`'s context, owned by `stream`.
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
            stream: Arc::clone(stream),
        })
    }

    /// The device address of byte `offset`. Callers keep `offset <= bytes()`.
    pub(crate) fn address_at(&self, offset: usize) -> u64 {
        debug_assert!(
            offset <= self.bytes,
            "offset {offset} past {} bytes",
            self.bytes
        );
        self.address + offset as u64
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
        let context = self.stream.context();
        // Complete every queued use before freeing (errors are deferred to the context).
        context.record_err(self.stream.synchronize());
        context.record_err(context.bind_to_thread());
        // SAFETY: `address` came from `cuMemAlloc` in this context and is freed only here; the
        // owner stream — on which every use of the buffer is ordered — has just been completed.
        context.record_err(unsafe { result::free_sync(self.address) });
    }
}

/// Queue a copy of `bytes` bytes from `src` at `src_offset` to `dst` at `dst_offset`, on
/// `stream`. Within one context this is `cuMemcpyDtoDAsync`; between contexts (another GPU, or
/// another logical rank's context on the same GPU) `cuMemcpyPeerAsync`, which goes over the peer
/// link when peer access is enabled and is staged by the driver otherwise.
///
/// # Safety
/// Both ranges must lie within their buffers, must not overlap, and the caller must order the
/// copy (with events) after every earlier write of the source range and every earlier access of
/// the destination range, and before any later one: the copy runs asynchronously on `stream`.
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
    debug_assert!(dst_offset + bytes <= dst.bytes() && src_offset + bytes <= src.bytes());
    stream
        .context()
        .bind_to_thread()
        .during("cuCtxSetCurrent", Some(device))?;
    let (dst_address, src_address) = (dst.address_at(dst_offset), src.address_at(src_offset));
    let (dst_context, src_context) = (dst.context().cu_ctx(), src.context().cu_ctx());
    if dst_context == src_context {
        // SAFETY: both addresses are live allocations of this context (they belong to buffers
        // borrowed for the call, which outlive the copy because their owner streams are
        // completed before they are freed), in bounds by the caller's contract.
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
