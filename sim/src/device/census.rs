//! The census of a simulated device's live values: every tensor, prepared input and work the
//! device makes carries a [`Token`] with a unique id; the census keeps the ids that are live, per
//! kind, and counts a drop of an id that is not live as a double drop.
//!
//! The books are the harness's own bookkeeping, not under test: they sit behind std's lock and
//! `Arc`, invisible to loom and shuttle, like the models' execution counters. Through the facade
//! every value made or dropped would be a lock operation and a reference count the checkers
//! branch on — all of them dependent, on one lock — and loom's state spaces exploded (W = 2 × G =
//! 3: 159 executions without the census, more than 560 000 at preemption bound 8 and not
//! finished unbounded with it; models/README.md, "loom cost"). A checker runs one thread at a
//! time and switches only at its own operations, none of which happens while the books are held,
//! so the lock is never contended there and every count is exact.

use std::collections::BTreeSet;
use std::fmt;

/// The books' sharing and lock: std's (see the module docs for why not the facade's).
#[allow(
    clippy::disallowed_types,
    reason = "harness bookkeeping, kept out of the checkers' state space (module docs)"
)]
pub(super) mod books {
    pub(in crate::device) type Shared<T> = std::sync::Arc<std::sync::Mutex<T>>;

    /// The books, locked; a panic elsewhere while they were held cannot leave them inconsistent
    /// (every update is one step), so poisoning is ignored.
    pub(in crate::device) fn lock<T>(shared: &Shared<T>) -> std::sync::MutexGuard<'_, T> {
        shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// New shared books.
    pub(in crate::device) fn share<T>(value: T) -> Shared<T> {
        std::sync::Arc::new(std::sync::Mutex::new(value))
    }
}

/// A kind of device value the census counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueKind {
    /// A [`SimTensor`](crate::SimTensor): an uploaded input or an output of `finish`.
    Tensor,
    /// A [`SimPrepared`](crate::SimPrepared): made by `prepare`, taken by `begin`.
    Prepared,
    /// A [`SimWork`](crate::SimWork): made by `begin`, taken by `finish`.
    Work,
}

impl ValueKind {
    /// Every kind, in the order [`ValueCounts`] lists them.
    pub const ALL: [ValueKind; 3] = [ValueKind::Tensor, ValueKind::Prepared, ValueKind::Work];

    fn index(self) -> usize {
        match self {
            ValueKind::Tensor => 0,
            ValueKind::Prepared => 1,
            ValueKind::Work => 2,
        }
    }
}

impl fmt::Display for ValueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueKind::Tensor => "tensor",
            ValueKind::Prepared => "prepared input",
            ValueKind::Work => "work",
        })
    }
}

/// A count of values per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ValueCounts {
    /// Tensors (uploaded inputs and outputs).
    pub tensors: usize,
    /// Prepared inputs.
    pub prepared: usize,
    /// Works.
    pub works: usize,
}

impl ValueCounts {
    /// The count of `kind`.
    pub fn of(&self, kind: ValueKind) -> usize {
        match kind {
            ValueKind::Tensor => self.tensors,
            ValueKind::Prepared => self.prepared,
            ValueKind::Work => self.works,
        }
    }

    /// All kinds together.
    pub fn total(&self) -> usize {
        self.tensors + self.prepared + self.works
    }

    fn from_counts(counts: [usize; 3]) -> Self {
        Self {
            tensors: counts[0],
            prepared: counts[1],
            works: counts[2],
        }
    }
}

impl fmt::Display for ValueCounts {
    /// `2 tensors, 1 prepared input, 0 works`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |count: usize, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        write!(
            f,
            "{}, {}, {}",
            plural(self.tensors, "tensor", "tensors"),
            plural(self.prepared, "prepared input", "prepared inputs"),
            plural(self.works, "work", "works")
        )
    }
}

/// A drop of a value whose id was not live: the same value dropped twice (a bitwise copy of a
/// device value, say), or a value from another census.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DoubleDrop {
    /// The kind of the value.
    pub kind: ValueKind,
    /// Its id.
    pub id: u64,
}

/// What a [`SimDevice`](crate::SimDevice) (and its clones) have alive right now: read it with
/// [`SimDevice::census`](crate::SimDevice::census), or check it with
/// [`SimDevice::check_quiescent`](crate::SimDevice::check_quiescent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Values made and not yet dropped, per kind.
    pub live: ValueCounts,
    /// Values ever made, per kind.
    pub created: ValueCounts,
    /// Every drop of a value that was not live, in order.
    pub double_drops: Vec<DoubleDrop>,
}

impl Census {
    /// Whether nothing is live and nothing was dropped twice.
    pub fn is_quiescent(&self) -> bool {
        self.live.total() == 0 && self.double_drops.is_empty()
    }

    /// `Ok` when [quiescent](Self::is_quiescent), else what is wrong.
    pub fn quiescent(&self) -> Result<(), NotQuiescent> {
        if self.is_quiescent() {
            Ok(())
        } else {
            Err(NotQuiescent {
                live: self.live,
                double_drops: self.double_drops.len(),
            })
        }
    }
}

/// A census that is not quiescent: values leaked (still live) or dropped twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the simulated device is not quiescent: {live} still live, {double_drops} dropped twice")]
pub struct NotQuiescent {
    /// What is still live, per kind.
    pub live: ValueCounts,
    /// How many drops found their value not live.
    pub double_drops: usize,
}

/// The books: the live ids per kind.
#[derive(Debug, Default)]
struct Books {
    next_id: u64,
    live: [BTreeSet<u64>; 3],
    created: [usize; 3],
    double_drops: Vec<DoubleDrop>,
}

/// The census handle a device and its values share; clones share the books.
#[derive(Clone)]
pub(crate) struct Registry {
    books: books::Shared<Books>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// Empty books.
    pub(crate) fn new() -> Self {
        Self {
            books: books::share(Books::default()),
        }
    }

    /// A snapshot of the books.
    pub(crate) fn census(&self) -> Census {
        let books = books::lock(&self.books);
        Census {
            live: ValueCounts::from_counts(books.live.each_ref().map(BTreeSet::len)),
            created: ValueCounts::from_counts(books.created),
            double_drops: books.double_drops.clone(),
        }
    }

    /// A token for a new value of `kind`.
    pub(crate) fn token(&self, kind: ValueKind) -> Token {
        let id = {
            let mut books = books::lock(&self.books);
            let id = books.next_id;
            books.next_id += 1;
            books.live[kind.index()].insert(id);
            books.created[kind.index()] += 1;
            id
        };
        Token {
            registry: self.clone(),
            kind,
            id,
        }
    }

    /// A value of `kind` with `id` was dropped.
    fn release(&self, kind: ValueKind, id: u64) {
        let mut books = books::lock(&self.books);
        if !books.live[kind.index()].remove(&id) {
            books.double_drops.push(DoubleDrop { kind, id });
        }
    }
}

/// A tracked value's entry in the census: made with the value, released when it is dropped. A
/// clone is a new value with a new id.
#[derive(Debug)]
pub(crate) struct Token {
    registry: Registry,
    kind: ValueKind,
    id: u64,
}

impl Clone for Token {
    fn clone(&self) -> Self {
        self.registry.token(self.kind)
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.registry.release(self.kind, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::{DoubleDrop, Registry, ValueCounts, ValueKind};

    #[test]
    fn a_token_counts_while_it_lives_and_a_clone_is_a_new_value() {
        let registry = Registry::new();
        let token = registry.token(ValueKind::Prepared);
        let twin = token.clone();
        assert_eq!(registry.census().live.prepared, 2);
        drop(token);
        drop(twin);
        let census = registry.census();
        assert!(census.is_quiescent(), "{census:?}");
        assert_eq!(census.created.prepared, 2);
    }

    #[test]
    fn a_second_release_of_one_id_is_a_double_drop() {
        let registry = Registry::new();
        let token = registry.token(ValueKind::Work);
        let id = token.id;
        drop(token);
        // What a second drop of the same value would do (a bitwise copy dropped again).
        registry.release(ValueKind::Work, id);
        let census = registry.census();
        assert_eq!(
            census.double_drops,
            vec![DoubleDrop {
                kind: ValueKind::Work,
                id
            }]
        );
        let error = census.quiescent().unwrap_err();
        assert_eq!(
            error.to_string(),
            "the simulated device is not quiescent: 0 tensors, 0 prepared inputs, 0 works still live, 1 dropped twice"
        );
    }

    #[test]
    fn live_values_are_named_per_kind() {
        let values = ValueCounts {
            tensors: 1,
            prepared: 2,
            works: 0,
        };
        assert_eq!(values.to_string(), "1 tensor, 2 prepared inputs, 0 works");
        assert_eq!(values.of(ValueKind::Prepared), 2);
        assert_eq!(values.total(), 3);
    }
}
