//! The traffic ledger: how many elements (and bytes) crossed each ring link in each step of each
//! generation, and how that compares with the all-reduce bandwidth lower bound.
//!
//! Link `r` is the link from rank `r` to its successor `(r + 1) % W`; in the ring, everything rank
//! `r` sends crosses link `r` and everything it receives crosses link `r - 1`. A
//! [`SimDevice`](crate::SimDevice) records one [`GenerationTraffic`] per generation that reaches
//! `finish`; a harness reads them through the device's [`Ledger`] handle.

use crate::host::ElementType;
use ruccl_core::sync::{Arc, Mutex};
use ruccl_core::{DeviceId, ReduceOperation};
use std::collections::VecDeque;
use std::fmt;

/// The elements every rank sent in one ring step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTraffic {
    /// Whether receivers combined (reduce-scatter) or overwrote (all-gather).
    pub reduce: bool,
    /// `sent[r]`: elements rank `r` sent over link `r` to rank `(r + 1) % W`.
    pub sent: Vec<usize>,
}

impl StepTraffic {
    /// The most elements any one link carried in this step: what an α–β link model waits for.
    pub fn max_link_elements(&self) -> usize {
        self.sent.iter().copied().max().unwrap_or(0)
    }
}

/// The traffic of one generation, as recorded by the device that ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationTraffic {
    /// Position of this record among every generation this ledger has recorded (0-based).
    pub sequence: u64,
    /// The ranks' devices, in rank order.
    pub devices: Vec<DeviceId>,
    /// Elements per rank's tensor, `n`.
    pub length: usize,
    /// The element type.
    pub element_type: ElementType,
    /// The operation the generation reduced with.
    pub operation: ReduceOperation,
    /// Every `exchange` call, in order.
    pub steps: Vec<StepTraffic>,
}

impl GenerationTraffic {
    /// The number of ranks, `W`.
    pub fn world(&self) -> usize {
        self.devices.len()
    }

    /// Elements that crossed each link over the whole generation: `links[r]` for link
    /// `r → (r + 1) % W`, which is also what rank `r` sent.
    pub fn link_elements(&self) -> Vec<usize> {
        let mut links = vec![0; self.world()];
        for step in &self.steps {
            for (link, &sent) in links.iter_mut().zip(&step.sent) {
                *link += sent;
            }
        }
        links
    }

    /// [`link_elements`](Self::link_elements) in bytes.
    pub fn link_bytes(&self) -> Vec<u64> {
        let size = self.element_type.size() as u64;
        self.link_elements()
            .into_iter()
            .map(|elements| elements as u64 * size)
            .collect()
    }

    /// Elements rank `rank` sent (over link `rank`); 0 for a rank outside the world.
    pub fn sent_by(&self, rank: usize) -> usize {
        self.link_elements().get(rank).copied().unwrap_or(0)
    }

    /// Elements rank `rank` received (over link `rank - 1`); 0 for a rank outside the world.
    pub fn received_by(&self, rank: usize) -> usize {
        let world = self.world();
        if rank >= world {
            return 0;
        }
        self.sent_by((rank + world - 1) % world)
    }

    /// Elements moved over all links: `2(W-1)·n` for the ring all-reduce.
    pub fn total_elements(&self) -> usize {
        self.link_elements().iter().sum()
    }

    /// [`total_elements`](Self::total_elements) in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_elements() as u64 * self.element_type.size() as u64
    }

    /// The all-reduce lower bound on elements each rank must send: `2(W-1)/W · n`.
    pub fn lower_bound_per_rank(&self) -> f64 {
        all_reduce_lower_bound(self.world(), self.length)
    }

    /// What rank `rank` sent divided by the per-rank lower bound: 1.0 when `W` divides `n` for
    /// the ring; `None` when the bound is zero (`W = 1` or `n = 0`).
    pub fn ratio_to_lower_bound(&self, rank: usize) -> Option<f64> {
        let bound = self.lower_bound_per_rank();
        (bound > 0.0).then(|| self.sent_by(rank) as f64 / bound)
    }

    /// The largest [`ratio_to_lower_bound`](Self::ratio_to_lower_bound) over all ranks.
    pub fn max_ratio_to_lower_bound(&self) -> Option<f64> {
        (0..self.world())
            .filter_map(|rank| self.ratio_to_lower_bound(rank))
            .reduce(f64::max)
    }
}

/// The all-reduce bandwidth lower bound per rank, `2(W-1)/W · n` elements (0 for `W = 0`).
pub fn all_reduce_lower_bound(world: usize, length: usize) -> f64 {
    if world == 0 {
        return 0.0;
    }
    2.0 * (world - 1) as f64 / world as f64 * length as f64
}

/// The records of a [`Ledger`], guarded by its lock.
#[derive(Debug)]
struct Records {
    /// The most recent records, oldest first; at most `retention` of them.
    kept: VecDeque<GenerationTraffic>,
    /// How many records to keep; `None` keeps all.
    retention: Option<usize>,
    /// Records ever made, including those no longer kept; the next record's `sequence`.
    recorded: u64,
}

/// A handle on a device's traffic records; clones share them. Readable from any thread while the
/// device runs. Its lock is [`ruccl_core::sync`]'s, so it is visible to loom and shuttle (and, like
/// every facade object, must be created inside the model under a checker).
#[derive(Clone)]
pub struct Ledger {
    records: Arc<Mutex<Records>>,
}

impl Ledger {
    /// An empty ledger that keeps the most recent `retention` records (`None`: all of them).
    pub fn new(retention: Option<usize>) -> Self {
        Self {
            records: Arc::new(Mutex::new(Records {
                kept: VecDeque::new(),
                retention,
                recorded: 0,
            })),
        }
    }

    /// Append a generation's traffic, setting its `sequence`.
    pub fn record(&self, mut traffic: GenerationTraffic) {
        let mut records = self.records.lock();
        traffic.sequence = records.recorded;
        records.recorded += 1;
        if records.retention == Some(0) {
            return;
        }
        if records
            .retention
            .is_some_and(|retention| records.kept.len() >= retention)
        {
            records.kept.pop_front();
        }
        records.kept.push_back(traffic);
    }

    /// Copies of the kept records, oldest first.
    pub fn records(&self) -> Vec<GenerationTraffic> {
        self.records.lock().kept.iter().cloned().collect()
    }

    /// A copy of the most recent record.
    pub fn last(&self) -> Option<GenerationTraffic> {
        self.records.lock().kept.back().cloned()
    }

    /// Remove and return the kept records, oldest first (the sequence keeps counting).
    pub fn take(&self) -> Vec<GenerationTraffic> {
        self.records.lock().kept.drain(..).collect()
    }

    /// Forget the kept records (the sequence keeps counting).
    pub fn clear(&self) {
        self.records.lock().kept.clear();
    }

    /// How many records have ever been made.
    pub fn recorded(&self) -> u64 {
        self.records.lock().recorded
    }
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records = self.records.lock();
        f.debug_struct("Ledger")
            .field("kept", &records.kept.len())
            .field("recorded", &records.recorded)
            .field("retention", &records.retention)
            .finish()
    }
}
