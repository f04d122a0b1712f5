//! The values of a [`FaultyDevice`](super::FaultyDevice): the wrapped device's, each possibly
//! armed to panic when dropped.

use std::fmt;

/// A tensor of a [`FaultyDevice`](super::FaultyDevice): `D`'s tensor, possibly armed to panic when dropped.
///
/// Only the padding of an `outputs` fault is a *phantom*, holding no tensor; a communicator never
/// delivers those (it rejects the wrong output count and drops them).
pub struct FaultyTensor<T> {
    pub(super) inner: Option<T>,
    pub(super) bomb: Option<String>,
}

impl<T> FaultyTensor<T> {
    /// Wrap a device tensor (unarmed).
    pub fn new(inner: T) -> Self {
        Self {
            inner: Some(inner),
            bomb: None,
        }
    }

    pub(super) fn phantom() -> Self {
        Self {
            inner: None,
            bomb: None,
        }
    }

    /// The device tensor; `None` for a phantom.
    pub fn get(&self) -> Option<&T> {
        self.inner.as_ref()
    }

    /// The device tensor, mutably; `None` for a phantom.
    pub fn get_mut(&mut self) -> Option<&mut T> {
        self.inner.as_mut()
    }

    /// Whether this is a phantom (padding of an `outputs` fault).
    pub fn is_phantom(&self) -> bool {
        self.inner.is_none()
    }

    /// Whether dropping this wrapper panics (a `drop:what=output` fault armed it).
    pub fn is_armed(&self) -> bool {
        self.bomb.is_some()
    }

    /// Defuse an armed wrapper.
    pub fn disarm(&mut self) {
        self.bomb = None;
    }

    /// The device tensor; `None` for a phantom. An armed wrapper still panics as it is dropped
    /// here: disarm it first to keep the tensor.
    pub fn into_inner(mut self) -> Option<T> {
        self.inner.take()
    }
}

impl<T> Drop for FaultyTensor<T> {
    fn drop(&mut self) {
        if let Some(message) = self.bomb.take() {
            if !std::thread::panicking() {
                panic!("{message}");
            }
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for FaultyTensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyTensor")
            .field("inner", &self.inner)
            .field("armed", &self.bomb.is_some())
            .finish()
    }
}

/// A prepared input of a [`FaultyDevice`](super::FaultyDevice): `D`'s, with the rank and generation it was prepared
/// in, possibly armed to panic when dropped (which `begin` does, after taking `D`'s value out).
pub struct FaultyPrepared<P> {
    /// `Some` until `begin` takes it.
    pub(super) inner: Option<P>,
    pub(super) rank: Option<usize>,
    pub(super) generation: u64,
    pub(super) bomb: Option<String>,
}

impl<P> FaultyPrepared<P> {
    /// The rank it was prepared for (`None`: a device outside the decorator's list).
    pub fn rank(&self) -> Option<usize> {
        self.rank
    }

    /// The generation it was prepared in.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether dropping it panics.
    pub fn is_armed(&self) -> bool {
        self.bomb.is_some()
    }

    /// Whether it holds the wrapped device's prepared value (until `begin` takes it).
    pub fn holds_inner(&self) -> bool {
        self.inner.is_some()
    }
}

impl<P> Drop for FaultyPrepared<P> {
    fn drop(&mut self) {
        if let Some(message) = self.bomb.take() {
            if !std::thread::panicking() {
                panic!("{message}");
            }
        }
    }
}

impl<P> fmt::Debug for FaultyPrepared<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyPrepared")
            .field("rank", &self.rank)
            .field("generation", &self.generation)
            .field("armed", &self.bomb.is_some())
            .finish_non_exhaustive()
    }
}

/// The work of a [`FaultyDevice`](super::FaultyDevice): `D`'s, with the generation and the next step number, possibly
/// armed to panic when dropped.
pub struct FaultyWork<W> {
    /// `Some` until `finish` takes it.
    pub(super) inner: Option<W>,
    pub(super) generation: u64,
    pub(super) next_step: usize,
    pub(super) bomb: Option<String>,
}

impl<W> FaultyWork<W> {
    /// The wrapped device's work (`None` only inside `finish`).
    pub fn inner(&self) -> Option<&W> {
        self.inner.as_ref()
    }

    /// The generation it belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many `exchange` calls it has seen.
    pub fn steps(&self) -> usize {
        self.next_step
    }
}

impl<W> Drop for FaultyWork<W> {
    fn drop(&mut self) {
        if let Some(message) = self.bomb.take() {
            if !std::thread::panicking() {
                panic!("{message}");
            }
        }
    }
}

impl<W> fmt::Debug for FaultyWork<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyWork")
            .field("generation", &self.generation)
            .field("next_step", &self.next_step)
            .field("armed", &self.bomb.is_some())
            .finish_non_exhaustive()
    }
}
