//! `Mutex` and `Condvar` wrappers shared by every backend: no poisoning, and a condition variable
//! whose `wait` may return spuriously (the shuttle backend injects such wake-ups on purpose).

use super::backend::{self, Deadline};
use std::ops::{Deref, DerefMut};

/// A mutual-exclusion lock whose `lock` cannot fail.
///
/// Poisoning is dropped: `ruccl-core` never panics while holding a lock, and code that shares this
/// type keeps its state consistent at every point a foreign panic could unwind.
#[derive(Debug, Default)]
pub struct Mutex<T> {
    inner: backend::RawMutex<T>,
}

/// The guard of a [`Mutex`]; the lock is held until it is dropped.
#[derive(Debug)]
pub struct MutexGuard<'a, T> {
    raw: backend::RawGuard<'a, T>,
    mutex: &'a Mutex<T>,
}

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Self {
            inner: backend::RawMutex::new(value),
        }
    }

    /// Block until the lock is held.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let raw = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        MutexGuard { raw, mutex: self }
    }

    /// Consume the mutex and return its value.
    pub fn into_inner(self) -> T {
        self.inner
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.raw
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.raw
    }
}

/// A condition variable paired with [`Mutex`].
///
/// Callers must wait in a loop that re-checks their condition: [`Condvar::wait`] may return
/// without a notification. Under shuttle this happens deliberately, chosen by shuttle's
/// deterministic random source, so an `if` written where a `while` belongs is caught.
#[derive(Debug, Default)]
pub struct Condvar {
    inner: backend::RawCondvar,
}

impl Condvar {
    /// A new condition variable with no waiters.
    pub fn new() -> Self {
        Self {
            inner: backend::RawCondvar::new(),
        }
    }

    /// Release the lock, wait for a notification (or a spurious wake-up), re-acquire the lock.
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        let mutex = guard.mutex;
        if backend::spurious_wakeup() {
            drop(guard);
            thread_yield();
            return mutex.lock();
        }
        let raw = self
            .inner
            .wait(guard.raw)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        MutexGuard { raw, mutex }
    }

    /// Like [`Condvar::wait`], but give up once `deadline` has passed. Returns the re-acquired
    /// guard and whether the deadline had passed on return. Under a checker a deadline never
    /// passes (neither loom nor shuttle models time), so this is exactly [`Condvar::wait`].
    pub fn wait_until<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: &Deadline,
    ) -> (MutexGuard<'a, T>, bool) {
        match deadline.remaining() {
            None => (self.wait(guard), false),
            Some(left) if left.is_zero() => (guard, true),
            Some(left) => {
                let mutex = guard.mutex;
                let (raw, _) = backend::wait_timeout(&self.inner, guard.raw, left);
                let guard = MutexGuard { raw, mutex };
                let expired = deadline.expired();
                (guard, expired)
            }
        }
    }

    /// Wake every waiter.
    pub fn notify_all(&self) {
        self.inner.notify_all();
    }

    /// Wake one waiter.
    pub fn notify_one(&self) {
        self.inner.notify_one();
    }
}

fn thread_yield() {
    super::thread::yield_now();
}
