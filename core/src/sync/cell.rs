//! [`UnsafeCell`]: interior mutability whose accesses a checker can see. Under loom it is loom's
//! cell, which records every access and fails a model in which two of them are not ordered by
//! happens-before (a data race the C11 model allows); under std and shuttle it is `std`'s cell
//! behind the same closure API, at no cost.
//!
//! The only user is the rendezvous's delivery slots (`core/src/rendezvous/delivery.rs`), which a
//! rank reads without the state lock.

#[cfg(ruccl_loom)]
pub use loom::cell::UnsafeCell;

/// A `std::cell::UnsafeCell` with loom's API: the pointer is only handed to a closure.
#[cfg(not(ruccl_loom))]
#[derive(Debug, Default)]
pub struct UnsafeCell<T>(
    #[allow(
        clippy::disallowed_types,
        reason = "the facade's own cell for the backends that do not track accesses"
    )]
    std::cell::UnsafeCell<T>,
);

#[cfg(not(ruccl_loom))]
impl<T> UnsafeCell<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Run `access` with a shared pointer to the value. Dereferencing it is the caller's
    /// `unsafe`: no write may overlap.
    pub fn with<R>(&self, access: impl FnOnce(*const T) -> R) -> R {
        access(self.0.get())
    }

    /// Run `access` with a mutable pointer to the value. Dereferencing it is the caller's
    /// `unsafe`: no other access may overlap.
    pub fn with_mut<R>(&self, access: impl FnOnce(*mut T) -> R) -> R {
        access(self.0.get())
    }
}
