//! The calling thread's current CUDA context, and completing a stream without skipping the wait.
//!
//! # The caller's context is the caller's
//! Every cudarc call binds its context to the calling thread (`cuCtxSetCurrent`) and leaves it
//! there. The executor runs on its callers' threads — the ranks' threads, the thread that drops
//! a tensor — which may use other CUDA code (PyTorch, the runtime API) with a context of their
//! own. So every executor entry point, and every drop of a value that owns a CUDA handle, runs
//! inside a [`SavedContext`]: it reads the current context on entry and puts it back on exit,
//! whatever happened in between. Values that hold cudarc handles keep them in a [`Scoped`], so
//! that the drop that releases the *last* reference to a context (cudarc binds it, then destroys
//! it, which pops the caller's stack) is covered too.
//!
//! # Completing a stream
//! cudarc's `CudaStream::synchronize` first binds the context, and binding first returns — and
//! clears — any error an earlier drop deferred into the context, *without synchronising*. A free
//! after such an error could run under a copy or kernel still in flight. [`complete`] therefore
//! drains the deferred error first, binds the context through the driver directly, and then
//! always waits for the stream, reporting every failure it saw.

use crate::error::{CudaError, Result};
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaStream, DriverError, result};
use ruccl_core::DeviceId;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;

/// The calling thread's current context when it was saved; restored when this is dropped.
///
/// Create it only after the driver probe has succeeded (every value that can create one exists
/// only then): it calls the driver. Not `Send`: the context it restores is this thread's.
pub(crate) struct SavedContext {
    /// `Some(context)` (null for "none current") when it could be read; `None` when
    /// `cuCtxGetCurrent` failed, in which case nothing is restored.
    saved: Option<sys::CUcontext>,
    /// The saved context belongs to the thread that saved it.
    _thread: PhantomData<*const ()>,
}

impl SavedContext {
    /// Save the calling thread's current context.
    pub(crate) fn save() -> Self {
        let saved = result::ctx::get_current()
            .ok()
            .map(|current| current.unwrap_or(std::ptr::null_mut()));
        Self {
            saved,
            _thread: PhantomData,
        }
    }
}

impl Drop for SavedContext {
    fn drop(&mut self) {
        let Some(saved) = self.saved else {
            return;
        };
        let current = result::ctx::get_current()
            .ok()
            .flatten()
            .unwrap_or(std::ptr::null_mut());
        if current != saved {
            // SAFETY: `saved` is the context this thread had current when it entered the
            // executor (or null, which unbinds), so it is the caller's to have current. The
            // executor destroys only contexts it created; should the caller have made one of
            // those current itself and let go of every value holding it, it gets back the
            // (destroyed) context it had chosen, exactly as without the executor. A failure
            // cannot be reported from `drop` and leaves the thread as the driver left it.
            let _ = unsafe { result::ctx::set_current(saved) };
        }
    }
}

/// A value holding CUDA handles whose drop runs inside a [`SavedContext`]: cudarc's drops bind
/// their context (and the last one destroys it), which must not disturb the dropping thread.
pub(crate) struct Scoped<T>(ManuallyDrop<T>);

impl<T> Scoped<T> {
    /// Wrap `value`.
    pub(crate) fn new(value: T) -> Self {
        Self(ManuallyDrop::new(value))
    }
}

impl<T> Deref for Scoped<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Drop for Scoped<T> {
    fn drop(&mut self) {
        let _restore = SavedContext::save();
        // SAFETY: the value is dropped exactly once, here, and `self.0` is never used again
        // (this is the wrapper's own drop). `_restore` is dropped after it, restoring the
        // thread's context once the value's drop has bound (or destroyed) its own.
        unsafe { ManuallyDrop::drop(&mut self.0) }
    }
}

/// Make `context` current on this thread through the driver directly. Unlike cudarc's
/// `bind_to_thread`, it neither reads nor clears the context's deferred error.
pub(crate) fn bind(context: &CudaContext) -> std::result::Result<(), DriverError> {
    let target = context.cu_ctx();
    if result::ctx::get_current()? == Some(target) {
        return Ok(());
    }
    // SAFETY: `target` is a live context: `context` (held by the caller) owns it and destroys it
    // only when dropped.
    unsafe { result::ctx::set_current(target) }
}

/// What [`complete`] found: the error an earlier drop had deferred into the stream's context,
/// and the outcome of binding and waiting.
#[must_use]
pub(crate) struct Completion {
    /// The context's deferred error, drained before anything else.
    pub(crate) deferred: std::result::Result<(), DriverError>,
    /// Binding the context, then waiting for the stream (the wait runs even if binding fails).
    pub(crate) waited: std::result::Result<(), DriverError>,
}

impl Completion {
    /// The first failure as a typed error for `device`: the deferred one as
    /// [`CudaError::Driver`], a failed wait as [`CudaError::Asynchronous`].
    pub(crate) fn into_result(self, device: DeviceId) -> Result<()> {
        self.deferred.map_err(|error| {
            CudaError::driver("deferred (an earlier drop)", Some(device), error)
        })?;
        self.waited.map_err(|error| CudaError::Asynchronous {
            device,
            source: error.into(),
        })
    }

    /// Put the failures back into `context`'s deferred slot (for drops, which cannot return
    /// them), so that the earliest one — the deferred error — is what the next call sees.
    pub(crate) fn defer_into(self, context: &CudaContext) {
        context.record_err(self.waited);
        context.record_err(self.deferred);
    }
}

/// Wait on the host until every operation queued on `stream` has completed: drain the context's
/// deferred error, bind the context, then synchronise — the wait is never skipped.
pub(crate) fn complete(stream: &CudaStream) -> Completion {
    let context = stream.context();
    let deferred = context.check_err();
    let bound = bind(context);
    // SAFETY: `stream` is a live stream of `context` (the `CudaStream` owns it); the wait runs
    // whether or not binding succeeded, since a stream names its own context.
    let waited = unsafe { result::stream::synchronize(stream.cu_stream()) };
    Completion {
        deferred,
        waited: bound.and(waited),
    }
}

/// Create a context of its own on `device` and take it off this thread's context stack again.
/// `cuCtxCreate` *pushes* the new context; popping it leaves the caller's stack as it was.
/// `cuCtxCreate_v2` (flags 0: a regular context): the CUDA 12.0 entry point the bindings link,
/// which CUDA 13 drivers still export for binaries built against 12.x.
///
/// # Safety
/// `device` must be a valid device handle (from a live context).
pub(crate) unsafe fn create_unpushed(
    device: sys::CUdevice,
) -> std::result::Result<sys::CUcontext, DriverError> {
    let mut created: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the out-pointer is a live local; `device` is valid (caller); flags 0 are allowed.
    unsafe { sys::cuCtxCreate_v2(&mut created, 0, device) }.result()?;
    let mut popped: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the out-pointer is a live local; `created` is on top of this thread's stack (the
    // create just pushed it), so this pops exactly it.
    let code = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    if code != CUresult::CUDA_SUCCESS {
        // SAFETY: `created` is ours alone (nobody has seen it yet); destroy it once.
        let _ = unsafe { sys::cuCtxDestroy_v2(created) };
        return Err(DriverError(code));
    }
    Ok(created)
}
