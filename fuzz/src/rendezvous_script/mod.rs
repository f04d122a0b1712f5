//! Target `rendezvous_script`: an arbitrary script of generations — per-rank operations and
//! values, fault sites (as [`FaultSpec`]s of a [`FaultyDevice`](ruccl_sim::FaultyDevice) around a
//! [`SimDevice`](ruccl_sim::SimDevice)), aborts before and during a phase, timeouts, immediate
//! re-entry, stalls, bad ranks — run by real threads, one per rank, against communicators from a
//! [`NativeCommunicators`](ruccl_core::NativeCommunicators) registry.
//!
//! Checked, per DESIGN.md:
//!
//! - **Agreement**: in every generation every rank gets `Ok` with *that generation's* reduction
//!   (each input carries a per-generation tag), or every rank gets the same error.
//! - **Failure delivery**: the error is exactly the one the fault plan predicts
//!   ([`model::predict`], the sim crate's outcome predictor), and the next generation behaves as predicted (normally, unless
//!   another fault is planned).
//! - **Reuse**: ranks re-enter at once, generation after generation, with stalls in between.
//! - **Abort**: sticky and first-wins. Within a phase, every generation is delivered as predicted
//!   up to some point, and from there on every rank of every generation gets one abort error —
//!   the one that won (an abort before the phase, a concurrent abort, or the `TimedOut` of a
//!   straggler's generation). Later calls on the aborted communicator fail fast with it; the
//!   registry replaces it with a fresh one, while a healthy one is handed out again.
//! - **No hang**: every wait is bounded — a straggler's peers use a short timeout, everyone else a
//!   generous one (or none, watched by a [`Watchdog`](crate::harness::Watchdog) that aborts the
//!   run).
//!
//! A script runs in phases; each phase spawns one thread per rank that runs the phase's
//! generations back to back. The fault decorator numbers generations by each device's `prepare`
//! calls, and every rank calls exactly once per generation (stragglers late), so its generation is
//! the script's running count of generations.

pub mod model;
mod run;

use crate::bytes::{Reader, Writer};
use ruccl_core::ReduceOperation;
use ruccl_sim::ElementType;
use ruccl_sim::fault::{DropTarget, FaultAction, FaultPlan, FaultSite, FaultSpec};

pub use run::run_script;

/// The largest world (threads per phase, besides an aborter).
pub const MAX_WORLD: usize = 5;
/// The most elements after the generation tag.
pub const MAX_EXTRA: usize = 4;
/// The most phases.
pub const MAX_PHASES: usize = 3;
/// The most generations per phase.
pub const MAX_GENERATIONS: usize = 4;
/// The most faults per generation.
pub const MAX_FAULTS: usize = 2;

/// A whole script.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    /// Ranks, `1..=MAX_WORLD`.
    pub world: usize,
    /// `I32` or `I64`.
    pub element_type: ElementType,
    /// Elements after the tag, `0..=MAX_EXTRA`.
    pub extra: usize,
    /// The phases, in order.
    pub phases: Vec<PhasePlan>,
}

/// One phase: a communicator from the registry and generations run back to back on it.
#[derive(Clone, Debug, PartialEq)]
pub struct PhasePlan {
    /// Call `rank = world + k` once first: `RankOutOfRange`, no device call.
    pub bad_rank: Option<u8>,
    /// Abort the communicator before the ranks start.
    pub abort_before: bool,
    /// Abort from another thread after this many yields, while the ranks run.
    pub concurrent_abort: Option<u8>,
    /// If the phase ends aborted, every rank calls the old communicator once more afterwards.
    pub sticky_probe: bool,
    /// The generations.
    pub generations: Vec<GenerationPlan>,
}

/// One generation.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationPlan {
    /// The operation every rank asks for …
    pub operation: ReduceOperation,
    /// … except this rank, which asks for this one.
    pub deviant: Option<(usize, ReduceOperation)>,
    /// `values[r]`: rank `r`'s elements after the tag (`extra` of them).
    pub values: Vec<Vec<i64>>,
    /// Faults; the first matching one wins, as in a plan.
    pub faults: Vec<Fault>,
    /// This rank arrives only once the communicator is aborted; its peers wait with a short
    /// timeout, so they time out (worlds of two or more).
    pub straggler: Option<usize>,
    /// This rank yields this many times before calling.
    pub stall: Option<(usize, u8)>,
    /// Ranks other than a straggler's peers call `all_reduce` (no timeout) instead of
    /// `all_reduce_timeout` with the generous timeout.
    pub untimed: bool,
}

/// A fault, placed relative to the generation that lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Where it strikes.
    pub site: FaultSite,
    /// The rank it hits (per-rank sites) or is attributed to.
    pub rank: Option<usize>,
    /// Which generations it applies to.
    pub when: When,
}

/// Which generations a [`Fault`] applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// The generation that lists it.
    This,
    /// Every generation.
    Every,
    /// This device generation (a script's count of generations).
    At(u64),
}

impl GenerationPlan {
    /// The operation `rank` asks for.
    pub fn operation_of(&self, rank: usize) -> ReduceOperation {
        match self.deviant {
            Some((deviant, operation)) if deviant == rank => operation,
            _ => self.operation,
        }
    }
}

impl PhasePlan {
    /// Whether the phase certainly leaves its communicator aborted.
    pub fn ends_aborted(&self) -> bool {
        self.abort_before
            || self.concurrent_abort.is_some()
            || self
                .generations
                .iter()
                .any(|generation| generation.straggler.is_some())
    }
}

impl Script {
    /// Decode a script; every input decodes to one.
    pub fn decode(reader: &mut Reader<'_>) -> Self {
        let world = reader.between(1, MAX_WORLD);
        let element_type = if reader.flag() {
            ElementType::I64
        } else {
            ElementType::I32
        };
        let extra = reader.below(MAX_EXTRA + 1);
        let phases = (0..reader.between(1, MAX_PHASES))
            .map(|_| decode_phase(reader, world, extra, element_type))
            .collect();
        Self {
            world,
            element_type,
            extra,
            phases,
        }
    }

    /// The bytes that decode to this script.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        writer.between(self.world, 1, MAX_WORLD);
        writer.flag(self.element_type == ElementType::I64);
        writer.below(self.extra, MAX_EXTRA + 1);
        writer.between(self.phases.len(), 1, MAX_PHASES);
        for phase in &self.phases {
            encode_phase(&mut writer, phase, self.world);
        }
        writer.finish()
    }

    /// The fault plan of the whole script, generation after generation (a phase that ends
    /// aborted and probes stickiness uses one generation more).
    pub fn plan(&self) -> FaultPlan {
        let mut specs = Vec::new();
        let mut t = 0u64;
        for phase in &self.phases {
            for generation in &phase.generations {
                specs.extend(generation.faults.iter().map(|fault| FaultSpec {
                    site: fault.site,
                    rank: fault.rank,
                    generation: match fault.when {
                        When::This => Some(t),
                        When::Every => None,
                        When::At(at) => Some(at),
                    },
                }));
                t += 1;
            }
            if phase.sticky_probe && phase.ends_aborted() {
                t += 1;
            }
        }
        FaultPlan::new(specs)
    }

    /// Rank `rank`'s input in device generation `t`: a tag unique to `(t, rank)` that makes another
    /// generation's data recognisable, then the generation's values.
    pub fn input(&self, t: u64, rank: usize, generation: &GenerationPlan) -> Vec<i64> {
        let tag = t as i64 * self.world as i64 + rank as i64 + 1;
        let mut values = vec![tag];
        values.extend(generation.values.get(rank).into_iter().flatten().copied());
        values
    }
}

/// An i32 or i64 from two bytes: small (`-8..=8`), spread bits, an extreme, or a 16-bit value.
fn integer(raw: u16, element_type: ElementType) -> i64 {
    let payload = raw >> 2;
    let (min, max) = if element_type == ElementType::I32 {
        (i64::from(i32::MIN), i64::from(i32::MAX))
    } else {
        (i64::MIN, i64::MAX)
    };
    let value = match raw & 3 {
        0 => i64::from(payload % 17) - 8,
        1 => u64::from(payload).wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64,
        2 => [min, max, -1, 0, 1, min + 1, max - 1][usize::from(payload) % 7],
        _ => i64::from(raw as i16),
    };
    if element_type == ElementType::I32 {
        i64::from(value as i32)
    } else {
        value
    }
}

fn decode_phase(
    reader: &mut Reader<'_>,
    world: usize,
    extra: usize,
    element_type: ElementType,
) -> PhasePlan {
    let bad_rank = reader.flag().then(|| reader.byte());
    let abort_before = reader.flag();
    let concurrent_abort = reader.flag().then(|| reader.byte());
    let sticky_probe = reader.flag();
    let generations = (0..reader.between(1, MAX_GENERATIONS))
        .map(|_| decode_generation(reader, world, extra, element_type))
        .collect();
    PhasePlan {
        bad_rank,
        abort_before,
        concurrent_abort,
        sticky_probe,
        generations,
    }
}

fn encode_phase(writer: &mut Writer, phase: &PhasePlan, world: usize) {
    writer.flag(phase.bad_rank.is_some());
    if let Some(k) = phase.bad_rank {
        writer.byte(k);
    }
    writer.flag(phase.abort_before);
    writer.flag(phase.concurrent_abort.is_some());
    if let Some(yields) = phase.concurrent_abort {
        writer.byte(yields);
    }
    writer.flag(phase.sticky_probe);
    writer.between(phase.generations.len(), 1, MAX_GENERATIONS);
    for generation in &phase.generations {
        encode_generation(writer, generation, world);
    }
}

fn decode_generation(
    reader: &mut Reader<'_>,
    world: usize,
    extra: usize,
    element_type: ElementType,
) -> GenerationPlan {
    let operation = reader.pick(&ReduceOperation::ALL);
    let deviant = reader
        .flag()
        .then(|| (reader.below(world), reader.pick(&ReduceOperation::ALL)));
    let values = (0..world)
        .map(|_| {
            (0..extra)
                .map(|_| integer(reader.u16(), element_type))
                .collect()
        })
        .collect();
    let faults = (0..reader.below(MAX_FAULTS + 1))
        .map(|_| decode_fault(reader, world))
        .collect();
    let straggler = (reader.flag() && world >= 2).then(|| reader.below(world));
    let stall = reader.flag().then(|| (reader.below(world), reader.byte()));
    let untimed = reader.flag();
    GenerationPlan {
        operation,
        deviant,
        values,
        faults,
        straggler,
        stall,
        untimed,
    }
}

fn encode_generation(writer: &mut Writer, generation: &GenerationPlan, world: usize) {
    writer.pick(&generation.operation, &ReduceOperation::ALL);
    writer.flag(generation.deviant.is_some());
    if let Some((rank, operation)) = generation.deviant {
        writer.below(rank, world);
        writer.pick(&operation, &ReduceOperation::ALL);
    }
    for values in &generation.values {
        for &value in values {
            writer.u16(raw_for(value));
        }
    }
    writer.below(generation.faults.len(), MAX_FAULTS + 1);
    for fault in &generation.faults {
        encode_fault(writer, fault, world);
    }
    writer.flag(generation.straggler.is_some());
    if let Some(rank) = generation.straggler {
        writer.below(rank, world);
    }
    writer.flag(generation.stall.is_some());
    if let Some((rank, yields)) = generation.stall {
        writer.below(rank, world);
        writer.byte(yields);
    }
    writer.flag(generation.untimed);
}

/// The two bytes that [`integer`] maps to `value`, for the small values seeds use (`-8..=8`).
fn raw_for(value: i64) -> u16 {
    assert!((-8..=8).contains(&value), "seed values are small: {value}");
    ((value + 8) as u16) << 2
}

/// The sites in decoding order.
fn site_kinds(action: FaultAction, step: Option<usize>, count: usize) -> [FaultSite; 8] {
    [
        FaultSite::Prepare(action),
        FaultSite::Begin(action),
        FaultSite::Exchange { step, action },
        FaultSite::Finish(action),
        FaultSite::Outputs { count },
        FaultSite::Drop(DropTarget::Prepared),
        FaultSite::Drop(DropTarget::Work),
        FaultSite::Drop(DropTarget::Output),
    ]
}

fn decode_fault(reader: &mut Reader<'_>, world: usize) -> Fault {
    let kind = reader.below(8);
    let action = if reader.flag() {
        FaultAction::Panic
    } else {
        FaultAction::Error
    };
    // Steps and counts one past what the world uses, so that some faults never fire.
    let step = reader.flag().then(|| reader.below(2 * world));
    let count = reader.below(world + 2);
    let rank = reader.flag().then(|| reader.below(world + 1));
    let when = match reader.below(8) {
        0 => When::Every,
        1 => When::At(reader.below(16) as u64),
        _ => When::This,
    };
    Fault {
        site: site_kinds(action, step, count)[kind],
        rank,
        when,
    }
}

fn encode_fault(writer: &mut Writer, fault: &Fault, world: usize) {
    let (kind, action, step, count) = match fault.site {
        FaultSite::Prepare(action) => (0, action, None, 0),
        FaultSite::Begin(action) => (1, action, None, 0),
        FaultSite::Exchange { step, action } => (2, action, step, 0),
        FaultSite::Finish(action) => (3, action, None, 0),
        FaultSite::Outputs { count } => (4, FaultAction::Error, None, count),
        FaultSite::Drop(DropTarget::Prepared) => (5, FaultAction::Error, None, 0),
        FaultSite::Drop(DropTarget::Work) => (6, FaultAction::Error, None, 0),
        _ => (7, FaultAction::Error, None, 0),
    };
    writer.below(kind, 8);
    writer.flag(action == FaultAction::Panic);
    writer.flag(step.is_some());
    if let Some(step) = step {
        writer.below(step, 2 * world);
    }
    writer.below(count, world + 2);
    writer.flag(fault.rank.is_some());
    if let Some(rank) = fault.rank {
        writer.below(rank, world + 1);
    }
    match fault.when {
        When::Every => writer.below(0, 8),
        When::At(at) => {
            writer.below(1, 8);
            writer.below(at as usize, 16);
        }
        When::This => writer.below(2, 8),
    }
}

/// Decode `data` and run the script; panics on any violation.
pub fn check(data: &[u8]) {
    let script = Script::decode(&mut Reader::new(data));
    crate::harness::on_own_thread(|| run_script(&script));
}

/// Readable seed scripts: each fault site, aborts, a straggler's timeout, stickiness, recovery.
pub fn seeds() -> Vec<(&'static str, Script)> {
    use ReduceOperation::*;
    let generation = |operation, world: usize, extra: usize| GenerationPlan {
        operation,
        deviant: None,
        values: (0..world)
            .map(|rank| {
                (0..extra)
                    .map(|index| ((rank * 3 + index) % 17) as i64 - 8)
                    .collect()
            })
            .collect(),
        faults: Vec::new(),
        straggler: None,
        stall: None,
        untimed: false,
    };
    let phase = |generations| PhasePlan {
        bad_rank: None,
        abort_before: false,
        concurrent_abort: None,
        sticky_probe: false,
        generations,
    };
    let script = |world, phases: Vec<PhasePlan>| Script {
        world,
        element_type: ElementType::I64,
        extra: phases[0].generations[0].values[0].len(),
        phases,
    };
    let fault = |site, rank| Fault {
        site,
        rank,
        when: When::This,
    };
    let faulty = |site, rank| {
        let mut failing = generation(Sum, 3, 3);
        failing.faults = vec![fault(site, rank)];
        script(
            3,
            vec![phase(vec![
                generation(Max, 3, 3),
                failing,
                generation(Mean, 3, 3),
            ])],
        )
    };
    let mut seeds = vec![
        (
            "clean_generations",
            script(
                3,
                vec![phase(vec![
                    generation(Sum, 3, 3),
                    generation(Max, 3, 3),
                    generation(Product, 3, 3),
                    generation(Min, 3, 3),
                ])],
            ),
        ),
        (
            "prepare_error_then_recovery",
            faulty(FaultSite::Prepare(FaultAction::Error), Some(1)),
        ),
        (
            "prepare_panic_on_every_rank",
            faulty(FaultSite::Prepare(FaultAction::Panic), None),
        ),
        (
            "begin_panic",
            faulty(FaultSite::Begin(FaultAction::Panic), Some(2)),
        ),
        (
            "exchange_error_at_step_two",
            faulty(
                FaultSite::Exchange {
                    step: Some(2),
                    action: FaultAction::Error,
                },
                Some(1),
            ),
        ),
        (
            "exchange_panic_at_first_step",
            faulty(
                FaultSite::Exchange {
                    step: None,
                    action: FaultAction::Panic,
                },
                None,
            ),
        ),
        (
            "finish_error",
            faulty(FaultSite::Finish(FaultAction::Error), None),
        ),
        (
            "too_few_outputs",
            faulty(FaultSite::Outputs { count: 1 }, None),
        ),
        (
            "drop_of_prepared_panics",
            faulty(FaultSite::Drop(DropTarget::Prepared), Some(2)),
        ),
        (
            "drop_of_work_panics",
            faulty(FaultSite::Drop(DropTarget::Work), None),
        ),
        (
            "drop_of_output_panics",
            faulty(FaultSite::Drop(DropTarget::Output), Some(0)),
        ),
    ];
    let mut mismatch = generation(Sum, 4, 2);
    mismatch.deviant = Some((2, Max));
    seeds.push((
        "operation_mismatch",
        script(4, vec![phase(vec![mismatch, generation(Sum, 4, 2)])]),
    ));
    let mut aborted = phase(vec![generation(Sum, 2, 3), generation(Sum, 2, 3)]);
    aborted.abort_before = true;
    aborted.sticky_probe = true;
    seeds.push((
        "abort_before_then_fresh_communicator",
        script(2, vec![aborted, phase(vec![generation(Min, 2, 3)])]),
    ));
    let mut racing = phase(vec![
        generation(Sum, 3, 3),
        generation(Sum, 3, 3),
        generation(Max, 3, 3),
    ]);
    racing.concurrent_abort = Some(20);
    seeds.push((
        "concurrent_abort",
        script(3, vec![racing, phase(vec![generation(Sum, 3, 3)])]),
    ));
    let mut late = generation(Sum, 3, 3);
    late.straggler = Some(1);
    let mut timed_out = phase(vec![generation(Sum, 3, 3), late, generation(Max, 3, 3)]);
    timed_out.sticky_probe = true;
    seeds.push((
        "straggler_times_out_then_fresh_communicator",
        script(3, vec![timed_out, phase(vec![generation(Sum, 3, 3)])]),
    ));
    let mut probed = phase(vec![generation(Sum, 1, 2)]);
    probed.bad_rank = Some(3);
    let mut lonely = generation(Product, 1, 2);
    lonely.faults = vec![fault(FaultSite::Begin(FaultAction::Panic), None)];
    probed.generations.push(lonely);
    probed.generations.push(generation(Product, 1, 2));
    seeds.push((
        "one_rank_bad_rank_and_begin_panic",
        Script {
            element_type: ElementType::I32,
            ..script(1, vec![probed])
        },
    ));
    let mut stalled = generation(Sum, 5, 1);
    stalled.stall = Some((4, 50));
    stalled.untimed = true;
    let mut every = generation(Sum, 5, 1);
    every.faults = vec![Fault {
        site: FaultSite::Drop(DropTarget::Output),
        rank: Some(3),
        when: When::Every,
    }];
    seeds.push((
        "five_ranks_stall_and_armed_outputs",
        script(
            5,
            vec![
                phase(vec![stalled, every]),
                phase(vec![generation(Max, 5, 1)]),
            ],
        ),
    ));
    seeds
}

#[cfg(test)]
mod tests {
    use super::{Script, seeds};
    use crate::bytes::Reader;

    #[test]
    fn seeds_decode_to_themselves() {
        for (name, script) in seeds() {
            assert_eq!(
                Script::decode(&mut Reader::new(&script.encode())),
                script,
                "{name}"
            );
        }
    }
}
