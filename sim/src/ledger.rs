//! The traffic ledger: how many elements (and bytes) crossed each link — each ordered pair of
//! ranks — in each step of each generation, and how that compares with the collective's
//! bandwidth lower bound. A [`SimDevice`](crate::SimDevice) records one [`GenerationTraffic`] per
//! generation that reaches `finish`; a harness reads them through the device's [`Ledger`] handle.

use crate::host::ElementType;
use ruccl_core::sync::{Arc, Mutex};
use ruccl_core::{Algorithm, Collective, DeviceId, LinkModel, Links, Step};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// Elements that crossed one link in one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkTraffic {
    /// The sending rank.
    pub from: usize,
    /// The receiving rank.
    pub to: usize,
    /// Elements sent.
    pub elements: usize,
    /// Non-empty transfers that carried them.
    pub transfers: usize,
}

/// The elements every link carried in one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTraffic {
    /// Whether receivers combined or overwrote.
    pub combine: bool,
    /// Every link that carried something, ordered by `(from, to)`.
    pub links: Vec<LinkTraffic>,
    /// Elements the device copied aside before writing, because the step overwrites them on
    /// their sender ([`Step::copied_aside`]); memory traffic on a shared link, none on a link.
    pub copied_aside: usize,
    /// The non-empty ranges those elements were copied aside in ([`Step::overwritten_sources`]).
    pub ranges_aside: usize,
    /// Elements of the receivers' buffers the step folds into, each once
    /// ([`Step::folded_elements`]; 0 for an overwriting step): memory traffic on a shared link.
    pub folded: usize,
    /// Elements ranks copied (or folded) within their own buffers (self-transfers): memory
    /// traffic on a shared link, no link's.
    pub local: usize,
}

impl StepTraffic {
    /// The traffic of `step`: its transfers summed per link.
    pub fn of(step: &Step) -> Self {
        let mut links: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
        let mut local = 0;
        for transfer in &step.transfers {
            if transfer.from == transfer.to {
                local += transfer.range.len();
            } else if !transfer.range.is_empty() {
                let link = links.entry((transfer.from, transfer.to)).or_default();
                link.0 += transfer.range.len();
                link.1 += 1;
            }
        }
        let aside = step.overwritten_sources();
        Self {
            combine: step.combine,
            copied_aside: aside.iter().map(|(_, range)| range.len()).sum(),
            ranges_aside: aside.iter().filter(|(_, range)| !range.is_empty()).count(),
            folded: step.folded_elements(),
            local,
            links: links
                .into_iter()
                .map(|((from, to), (elements, transfers))| LinkTraffic {
                    from,
                    to,
                    elements,
                    transfers,
                })
                .collect(),
        }
    }

    /// Elements rank `rank` sent in this step.
    pub fn sent_by(&self, rank: usize) -> usize {
        self.links
            .iter()
            .filter(|link| link.from == rank)
            .map(|link| link.elements)
            .sum()
    }

    /// Elements rank `rank` received in this step.
    pub fn received_by(&self, rank: usize) -> usize {
        self.links
            .iter()
            .filter(|link| link.to == rank)
            .map(|link| link.elements)
            .sum()
    }

    /// Elements all links carried in this step.
    pub fn total_elements(&self) -> usize {
        self.links.iter().map(|link| link.elements).sum()
    }

    /// The elements on the step's busiest link under `links` (see [`Links`]): the most any rank
    /// sent or received, or on a shared link the step's total, its copies aside and the
    /// elements it folds into.
    pub fn busiest_elements(&self, links: Links) -> usize {
        self.busiest(
            links,
            |link| link.elements,
            self.copied_aside + self.folded + self.local,
        )
    }

    /// The transfers on the step's busiest link under `links`, as
    /// [`LinkModel::busiest_transfers`] counts them.
    pub fn busiest_transfers(&self, links: Links) -> usize {
        self.busiest(links, |link| link.transfers, self.ranges_aside)
    }

    /// The busiest link's `count`: the step's total plus `beyond` (what the shared memory
    /// system carries beside the links) on a shared link, the most one rank sends or receives
    /// otherwise.
    fn busiest(&self, links: Links, count: impl Fn(&LinkTraffic) -> usize, beyond: usize) -> usize {
        match links {
            Links::Shared => self.links.iter().map(&count).sum::<usize>() + beyond,
            _ => {
                let mut per_rank: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
                for link in &self.links {
                    per_rank.entry(link.from).or_default().0 += count(link);
                    per_rank.entry(link.to).or_default().1 += count(link);
                }
                per_rank
                    .values()
                    .map(|&(sent, received)| sent.max(received))
                    .max()
                    .unwrap_or(0)
            }
        }
    }
}

/// The traffic of one generation, as recorded by the device that ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationTraffic {
    /// Position of this record among every generation this ledger has recorded (0-based).
    pub sequence: u64,
    /// The ranks' devices, in rank order.
    pub devices: Vec<DeviceId>,
    /// The collective the generation ran.
    pub collective: Collective,
    /// The algorithm of its plan.
    pub algorithm: Algorithm,
    /// Elements of every rank's input.
    pub input_len: usize,
    /// The element type.
    pub element_type: ElementType,
    /// Every `exchange` call, in order.
    pub steps: Vec<StepTraffic>,
}

impl GenerationTraffic {
    /// The number of ranks, `W`.
    pub fn world(&self) -> usize {
        self.devices.len()
    }

    /// Elements that crossed each link over the whole generation, by `(from, to)`.
    pub fn link_elements(&self) -> BTreeMap<(usize, usize), usize> {
        let mut links = BTreeMap::new();
        for link in self.steps.iter().flat_map(|step| &step.links) {
            *links.entry((link.from, link.to)).or_default() += link.elements;
        }
        links
    }

    /// Elements rank `rank` sent over the generation; 0 for a rank outside the world.
    pub fn sent_by(&self, rank: usize) -> usize {
        self.steps.iter().map(|step| step.sent_by(rank)).sum()
    }

    /// Elements rank `rank` received over the generation; 0 for a rank outside the world.
    pub fn received_by(&self, rank: usize) -> usize {
        self.steps.iter().map(|step| step.received_by(rank)).sum()
    }

    /// Elements moved over all links.
    pub fn total_elements(&self) -> usize {
        self.steps.iter().map(StepTraffic::total_elements).sum()
    }

    /// [`total_elements`](Self::total_elements) in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_elements() as u64 * self.element_type.size() as u64
    }

    /// The bandwidth lower bound on elements the busiest rank must send or receive: nccl-tests'
    /// bus factor times the larger of the input and output — `2(W-1)/W · n` for all-reduce,
    /// `(W-1)/W · W·m` for reduce-scatter, all-gather, gather, scatter and all-to-all, `n` for
    /// broadcast and reduce.
    pub fn lower_bound_per_rank(&self) -> f64 {
        lower_bound_per_rank(self.collective, self.world(), self.input_len)
    }

    /// The most elements any one rank sent, or received, over the generation: what the device
    /// recorded of the measure the core bounds every built-in plan by
    /// ([`Plan::busiest_rank_elements`](ruccl_core::Plan::busiest_rank_elements),
    /// [`TRAFFIC_BOUND`](ruccl_core::TRAFFIC_BOUND)); equal to it for the plan that ran.
    pub fn busiest_rank_elements(&self) -> usize {
        (0..self.world())
            .map(|rank| self.sent_by(rank).max(self.received_by(rank)))
            .max()
            .unwrap_or(0)
    }

    /// What rank `rank` sent or received, whichever is more, divided by the per-rank lower
    /// bound (a root receives all a reduce or gather moves); `None` when the bound is zero
    /// (`W = 1` or an empty tensor).
    pub fn ratio_to_lower_bound(&self, rank: usize) -> Option<f64> {
        let bound = self.lower_bound_per_rank();
        let moved = self.sent_by(rank).max(self.received_by(rank));
        (bound > 0.0).then(|| moved as f64 / bound)
    }

    /// The largest [`ratio_to_lower_bound`](Self::ratio_to_lower_bound) over all ranks: the
    /// [`busiest_rank_elements`](Self::busiest_rank_elements) over the bound.
    pub fn max_ratio_to_lower_bound(&self) -> Option<f64> {
        let bound = self.lower_bound_per_rank();
        (bound > 0.0 && self.world() > 0).then(|| self.busiest_rank_elements() as f64 / bound)
    }

    /// The generation's time under `model`: each step waits for its busiest link.
    pub fn priced(&self, model: &LinkModel) -> f64 {
        let size = self.element_type.size() as u64;
        self.steps
            .iter()
            .map(|step| {
                model.step_time(
                    step.busiest_transfers(model.links()),
                    step.busiest_elements(model.links()) as u64 * size,
                )
            })
            .sum()
    }
}

/// The bandwidth lower bound on elements the busiest rank sends in `collective` over `world`
/// ranks with inputs of `input_len` elements (see
/// [`GenerationTraffic::lower_bound_per_rank`]).
pub fn lower_bound_per_rank(collective: Collective, world: usize, input_len: usize) -> f64 {
    let output_len = collective.output_len(world, input_len).unwrap_or(0);
    let size = input_len.max(output_len) as f64;
    if world <= 1 {
        return 0.0;
    }
    collective.bus_factor(world) * size
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
///
/// A harness timing many identical generations can [`pause`](Self::pause) it: a generation that
/// begins while the ledger is paused is not recorded, and its device work takes no lock and
/// allocates nothing for the ledger (W = 2, one element: 1.7–2.1 µs a generation without the
/// ledger, 2.1–2.4 µs with it recording).
#[derive(Clone)]
pub struct Ledger {
    records: Arc<Mutex<Records>>,
    pauses: pause::Pauses,
}

/// The pause count: harness bookkeeping, read once per generation, behind std's atomics like the
/// device's census books (a checker never sees it; models do not pause).
#[allow(
    clippy::disallowed_types,
    reason = "harness bookkeeping kept out of the checkers' state space, like the census's books"
)]
mod pause {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// How many [`LedgerPause`]s are alive; shared by a ledger's clones.
    #[derive(Clone, Debug, Default)]
    pub(super) struct Pauses(Arc<AtomicUsize>);

    impl Pauses {
        pub(super) fn pause(&self) -> LedgerPause {
            self.0.fetch_add(1, Ordering::AcqRel);
            LedgerPause(self.clone())
        }

        pub(super) fn paused(&self) -> bool {
            self.0.load(Ordering::Acquire) > 0
        }
    }

    /// While alive, the [`Ledger`](super::Ledger) it came from records nothing; dropping it
    /// resumes recording (once every pause is dropped).
    #[derive(Debug)]
    #[must_use = "the ledger resumes recording when the pause is dropped"]
    pub struct LedgerPause(Pauses);

    impl Drop for LedgerPause {
        fn drop(&mut self) {
            (self.0).0.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

pub use pause::LedgerPause;

impl Ledger {
    /// An empty ledger that keeps the most recent `retention` records (`None`: all of them).
    pub fn new(retention: Option<usize>) -> Self {
        Self {
            records: Arc::new(Mutex::new(Records {
                kept: VecDeque::new(),
                retention,
                recorded: 0,
            })),
            pauses: pause::Pauses::default(),
        }
    }

    /// Stop recording until the returned guard (and every other pause) is dropped. A generation
    /// that began before the pause is still recorded; one that begins during it is not, and does
    /// not advance [`recorded`](Self::recorded).
    pub fn pause(&self) -> LedgerPause {
        self.pauses.pause()
    }

    /// Whether a pause is alive: a generation beginning now would not be recorded.
    pub fn is_paused(&self) -> bool {
        self.pauses.paused()
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
