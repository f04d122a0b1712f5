//! The delivery slots: where the runner of a generation leaves every other rank's result, and
//! where each rank takes its own **without the state lock**. The protocol as a whole is told once,
//! in `README.md` beside this file ("Delivery without the lock"); what follows states who may touch
//! what, on the fields themselves.

use super::padded::Padded;
use super::parity;
use super::state::{Delivery, Outcome};
use crate::error::NativeCollectiveError;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::cell::UnsafeCell;

/// One rank's delivery of the generations of one parity.
struct Slot<T> {
    /// `g + 1` once generation `g`'s delivery is in `value`; 0 before any. Stored (`Release`) only
    /// by the runner of `g`, under the state lock, *after* it wrote `value`; loaded (`Acquire`) by
    /// the slot's own rank, with or without the lock.
    published: AtomicU64,
    /// The delivery of generation `published - 1` until the slot's rank takes it (then `None`).
    ///
    /// Invariant — every two accesses are ordered by happens-before, so none overlaps:
    /// - the runner of `g` writes it before its `Release` store of `g + 1` to `published`;
    /// - the slot's rank reads and empties it only after an `Acquire` load of `published` returns
    ///   `g + 1`, and never again for `g`;
    /// - the next writer is the runner of `g + 2`, which runs only once every rank has deposited
    ///   into `g + 2` — and the slot's rank deposits into `g + 2` (under the state lock) only after
    ///   its call of `g` returned, that is after it emptied the slot. The state lock orders that
    ///   deposit before the runner's.
    value: UnsafeCell<Option<Delivery<T>>>,
}

// SAFETY: a `Slot` is shared between threads only through `Deliveries`, whose accesses to `value`
// follow the invariant on `Slot::value` (each access ordered by happens-before with the others);
// the value itself moves between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Slot<T> {}

/// What belongs to one rank.
struct Desk<T> {
    /// The rank has deposited and not yet taken its delivery. Set by the rank's own call under
    /// the state lock when it deposits; cleared (`Release`) when it takes its delivery (with or
    /// without the lock; the runner clears its own when it publishes); read (`Acquire`) under
    /// the state lock by the next call for the rank, which refuses to start while it is set. A
    /// call that ends with the abort error leaves it set, harmlessly: every later call is
    /// refused for the abort first. A rank's calls are sequential only while this refuses a
    /// concurrent one — which the invariant on `Slot::value` rests on.
    busy: AtomicBool,
    /// `slots[g % 2]` holds the rank's delivery of generation `g`.
    slots: [Slot<T>; 2],
}

/// Every rank's delivery slots, each rank's on cache lines of its own (a rank polls only its own).
pub(super) struct Deliveries<T> {
    desks: Box<[Padded<Desk<T>>]>,
}

impl<T> Deliveries<T> {
    /// Empty slots for `world` ranks, nobody busy.
    pub(super) fn new(world: usize) -> Self {
        let slot = || Slot {
            published: AtomicU64::new(0),
            value: UnsafeCell::new(None),
        };
        let desk = |_| {
            Padded(Desk {
                busy: AtomicBool::new(false),
                slots: [slot(), slot()],
            })
        };
        Self {
            desks: (0..world).map(desk).collect(),
        }
    }

    /// Whether `rank` has a call in progress (deposited, delivery not yet taken). Read under the
    /// state lock.
    pub(super) fn busy(&self, rank: usize) -> bool {
        self.desks[rank].busy.load(Ordering::Acquire)
    }

    /// `rank` deposits: it has a call in progress until it takes its delivery. Under the state
    /// lock.
    pub(super) fn enter(&self, rank: usize) {
        self.desks[rank].busy.store(true, Ordering::Relaxed);
    }

    /// Leave generation `generation`'s `outcome` in every rank's slot but `runner`'s, whose own
    /// delivery is returned instead. Called only by `State::publish`, under the state lock, so
    /// that an abort cannot land between the decision to publish and the publication. `Ok`
    /// holds exactly one output per rank (the plan driver turns any other count into
    /// `OutputCount`). Also returns any delivery found still in a slot it fills — never, by the
    /// invariant on `Slot::value` — for the caller to drop outside the lock.
    pub(super) fn publish(
        &self,
        generation: u64,
        outcome: Outcome<T>,
        runner: usize,
    ) -> (Delivery<T>, Vec<Delivery<T>>) {
        let world = self.desks.len();
        let mut left = Vec::new();
        let own = match outcome {
            Ok(outputs) => {
                let count = outputs.len();
                let mut own = None;
                for (rank, output) in outputs.into_iter().enumerate() {
                    if rank == runner {
                        own = Some(Ok(output));
                    } else {
                        left.extend(self.fill(rank, generation, Ok(output)));
                    }
                }
                own.unwrap_or(Err(NativeCollectiveError::OutputCount {
                    expected: world,
                    actual: count,
                }))
            }
            Err(error) => {
                for rank in (0..world).filter(|&rank| rank != runner) {
                    left.extend(self.fill(rank, generation, Err(error.clone())));
                }
                Err(error)
            }
        };
        self.desks[runner].busy.store(false, Ordering::Release);
        (own, left)
    }

    /// Write `delivery` into `rank`'s slot of `generation`, then mark it published; returns what
    /// the slot held (nothing, by the invariant on `Slot::value`).
    fn fill(&self, rank: usize, generation: u64, delivery: Delivery<T>) -> Option<Delivery<T>> {
        let desk = &self.desks[rank];
        let slot = &desk.slots[parity(generation)];
        // SAFETY: the slot's memory is owned by `self` and lives as long as it. This is the
        // runner of `generation` writing before its `Release` store below: by the invariant on
        // `Slot::value`, the slot's rank took the delivery of `generation - 2` before depositing
        // into `generation` (so the slot is empty and nobody else touches it now), and it will
        // not read until it sees this store.
        let left = slot
            .value
            .with_mut(|value| unsafe { (*value).replace(delivery) });
        slot.published.store(generation + 1, Ordering::Release);
        debug_assert!(
            left.is_none(),
            "a delivery of generation {generation} - 2 was never taken"
        );
        left
    }

    /// Take `rank`'s delivery of `generation` if it has been published; the rank's call is then
    /// no longer in progress. Only `rank`'s own call of `generation` calls this, with or
    /// without the state lock.
    pub(super) fn take(&self, rank: usize, generation: u64) -> Option<Delivery<T>> {
        let desk = &self.desks[rank];
        let slot = &desk.slots[parity(generation)];
        if slot.published.load(Ordering::Acquire) != generation + 1 {
            return None;
        }
        // SAFETY: the slot's memory is owned by `self` and lives as long as it. The `Acquire`
        // load above saw the runner's `Release` store of `generation + 1`, so its write of the
        // value happened before this read; the next write is by the runner of `generation + 2`,
        // which cannot start before this rank deposits into it — after this call returns (the
        // invariant on `Slot::value`).
        let delivery = slot.value.with_mut(|value| unsafe { (*value).take() })?;
        desk.busy.store(false, Ordering::Release);
        Some(delivery)
    }
}
