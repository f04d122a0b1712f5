//! `Mutex` and `Condvar` wrappers shared by every backend: no poisoning, and a condition variable
//! whose `wait` may return spuriously (the shuttle backend injects such wake-ups on purpose).

use super::backend::{self, Deadline, Shared};
use std::ops::{Deref, DerefMut};

/// A mutual-exclusion lock whose `lock` cannot fail.
///
/// Poisoning is dropped: `ruccl-core` never panics while holding a lock, and code that shares this
/// type keeps its state consistent at every point a foreign panic could unwind.
#[derive(Debug, Default)]
pub struct Mutex<T> {
    inner: Shared<backend::RawMutex<T>>,
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
            inner: backend::share(backend::RawMutex::new(value)),
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
    inner: Shared<backend::RawCondvar>,
}

impl Condvar {
    /// A new condition variable with no waiters.
    pub fn new() -> Self {
        Self {
            inner: backend::share(backend::RawCondvar::new()),
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
    /// guard and whether the deadline had passed on return (a wake-up may be both: notified and
    /// late). Under a checker the clock is never read and a deadline passes whenever the
    /// checker runs its timer thread (see the backends' `checked_deadline.rs`).
    pub fn wait_until<'a, T: Send + 'static>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: &Deadline,
    ) -> (MutexGuard<'a, T>, bool) {
        let mutex = guard.mutex;
        if backend::spurious_wakeup() {
            drop(guard);
            thread_yield();
            let guard = mutex.lock();
            let expired = deadline.expired();
            return (guard, expired);
        }
        let (raw, expired) = deadline.wait(&self.inner, &mutex.inner, guard.raw);
        (MutexGuard { raw, mutex }, expired)
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
