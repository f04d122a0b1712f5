//! Target `rendezvous_script`: an arbitrary script of generations — per-rank collectives (every
//! kind, operations, roots, algorithms, so mismatches of each), input lengths and element types
//! (so shape mismatches), values, fault sites (as [`FaultSpec`]s of a
//! [`FaultyDevice`](ruccl_sim::FaultyDevice) around a
//! [`SimDevice`](ruccl_sim::SimDevice)), aborts before and during a phase, timeouts, immediate
//! re-entry, stalls, bad ranks — run by real threads, one per rank, against communicators from a
//! [`NativeCommunicators`](ruccl_core::NativeCommunicators) registry.
//!
//! Checked, per DESIGN.md:
//!
//! - **Agreement**: in every generation every rank gets `Ok` with *that generation's* result of the
//!   collective (each input carries a per-generation tag), or every rank gets the same error.
//! - **Failure delivery**: the error is exactly the one the sim crate's outcome predictor
//!   ([`FaultPlan::predict`], through [`model::predict`]) names — a mismatch of kind, root,
//!   algorithm or operation, a shape mismatch, an impossible collective, or the first fault met —
//!   and the next generation behaves as predicted (normally, unless another fault is planned).
//! - **Reuse**: ranks re-enter at once, generation after generation, with stalls in between.
//! - **Abort**: sticky and first-wins. Within a phase, every generation is delivered as predicted
//!   up to some point, and from there on every rank of every generation gets one abort error —
//!   the one that won (an abort before the phase, a concurrent abort, or the `TimedOut` of a
//!   straggler's generation). Later calls on the aborted communicator fail fast with it; the
//!   registry replaces it with a fresh one, while a healthy one is handed out again.
//! - **Resources**: after each phase the simulated device's census reads no live value and no
//!   double drop, whatever failed, aborted or timed out.
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
use ruccl_core::{Algorithm, Collective, ReduceOperation};
use ruccl_sim::ElementType;
use ruccl_sim::fault::{DropTarget, FaultAction, FaultPlan, FaultSite, FaultSpec};

pub use run::run_script;

/// The largest world (threads per phase, besides an aborter).
pub const MAX_WORLD: usize = 5;
/// The longest input (before rounding a reduce-scatter input up to whole blocks).
pub const MAX_LENGTH: usize = 8;
/// The most phases.
pub const MAX_PHASES: usize = 3;
/// The most generations per phase.
pub const MAX_GENERATIONS: usize = 4;
/// The most faults per generation.
pub const MAX_FAULTS: usize = 2;
/// The element types of a script (integers: every collective's result is exact).
pub const ELEMENT_TYPES: [ElementType; 6] = [
    ElementType::I32,
    ElementType::I64,
    ElementType::I8,
    ElementType::U8,
    ElementType::U32,
    ElementType::U64,
];
/// The algorithms ranks ask for.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Auto,
    Algorithm::Ring,
    Algorithm::Direct,
    Algorithm::HalvingDoubling,
];

/// A whole script.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    /// Ranks, `1..=MAX_WORLD`.
    pub world: usize,
    /// One of [`ELEMENT_TYPES`].
    pub element_type: ElementType,
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

/// What a rank asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The collective.
    pub collective: Collective,
    /// The algorithm.
    pub algorithm: Algorithm,
}

/// How one rank's input differs from the others'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OddShape {
    /// One element more.
    Longer,
    /// One element fewer (the same, for an empty input).
    Shorter,
    /// The next of [`ELEMENT_TYPES`].
    OtherType,
}

/// One generation.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationPlan {
    /// What every rank asks for …
    pub request: Request,
    /// … except this rank, which asks for this.
    pub deviant: Option<(usize, Request)>,
    /// Elements of every rank's input: a tag, then `values`.
    pub length: usize,
    /// This rank's input has another shape.
    pub odd_shape: Option<(usize, OddShape)>,
    /// `values[r]`: rank `r`'s elements after the tag (`length - 1` of them).
    pub values: Vec<Vec<i64>>,
    /// Faults; the first matching one wins, as in a plan.
    pub faults: Vec<Fault>,
    /// This rank arrives only once the communicator is aborted; its peers wait with a short
    /// timeout, so they time out (worlds of two or more).
    pub straggler: Option<usize>,
    /// This rank yields this many times before calling.
    pub stall: Option<(usize, u8)>,
    /// Ranks other than a straggler's peers wait without a timeout instead of with the generous
    /// one.
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
    /// What `rank` asks for.
    pub fn request_of(&self, rank: usize) -> Request {
        match self.deviant {
            Some((deviant, request)) if deviant == rank => request,
            _ => self.request,
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
        let element_type = reader.pick(&ELEMENT_TYPES);
        let phases = (0..reader.between(1, MAX_PHASES))
            .map(|_| decode_phase(reader, world, element_type))
            .collect();
        Self {
            world,
            element_type,
            phases,
        }
    }

    /// The bytes that decode to this script.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        writer.between(self.world, 1, MAX_WORLD);
        writer.pick(&self.element_type, &ELEMENT_TYPES);
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

    /// Rank `rank`'s input in device generation `t`: its element type, and a tag unique to
    /// `(t, rank)` that makes another generation's data recognisable followed by the
    /// generation's values (one more or one fewer for an odd shape).
    pub fn input(
        &self,
        t: u64,
        rank: usize,
        generation: &GenerationPlan,
    ) -> (ElementType, Vec<i64>) {
        let tag = t as i64 * self.world as i64 + rank as i64 + 1;
        let mut values = vec![tag];
        values.extend(generation.values.get(rank).into_iter().flatten().copied());
        values.truncate(generation.length);
        let mut element_type = self.element_type;
        match generation.odd_shape {
            Some((odd, OddShape::Longer)) if odd == rank => values.push(-tag),
            Some((odd, OddShape::Shorter)) if odd == rank => {
                values.pop();
            }
            Some((odd, OddShape::OtherType)) if odd == rank => {
                let index = ELEMENT_TYPES
                    .iter()
                    .position(|&candidate| candidate == element_type)
                    .unwrap_or(0);
                element_type = ELEMENT_TYPES[(index + 1) % ELEMENT_TYPES.len()];
            }
            _ => {}
        }
        (element_type, values)
    }
}

/// An integer of `element_type` from two bytes (as i64; narrower types keep its low bits):
/// small (`-8..=8`), spread bits, an extreme of the type, or a 16-bit value.
fn integer(raw: u16, element_type: ElementType) -> i64 {
    let payload = raw >> 2;
    let (min, max) = match element_type {
        ElementType::I8 => (i64::from(i8::MIN), i64::from(i8::MAX)),
        ElementType::U8 => (0, i64::from(u8::MAX)),
        ElementType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        ElementType::U32 => (0, i64::from(u32::MAX)),
        ElementType::U64 => (0, -1),
        _ => (i64::MIN, i64::MAX),
    };
    match raw & 3 {
        0 => i64::from(payload % 17) - 8,
        1 => u64::from(payload).wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64,
        2 => [min, max, -1, 0, 1, min + 1, max - 1][usize::from(payload) % 7],
        _ => i64::from(raw as i16),
    }
}

fn decode_phase(reader: &mut Reader<'_>, world: usize, element_type: ElementType) -> PhasePlan {
    let bad_rank = reader.flag().then(|| reader.byte());
    let abort_before = reader.flag();
    let concurrent_abort = reader.flag().then(|| reader.byte());
    let sticky_probe = reader.flag();
    let generations = (0..reader.between(1, MAX_GENERATIONS))
        .map(|_| decode_generation(reader, world, element_type))
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

/// A request: any kind, operation and algorithm; a root up to one past the world.
fn decode_request(reader: &mut Reader<'_>, world: usize) -> Request {
    let collective = match reader.below(4) {
        0 => Collective::AllReduce(reader.pick(&ReduceOperation::ALL)),
        1 => Collective::ReduceScatter(reader.pick(&ReduceOperation::ALL)),
        2 => Collective::AllGather,
        _ => Collective::Broadcast {
            root: reader.below(world + 1),
        },
    };
    Request {
        collective,
        algorithm: reader.pick(&ALGORITHMS),
    }
}

fn encode_request(writer: &mut Writer, request: &Request, world: usize) {
    match request.collective {
        Collective::AllReduce(operation) => {
            writer.below(0, 4);
            writer.pick(&operation, &ReduceOperation::ALL);
        }
        Collective::ReduceScatter(operation) => {
            writer.below(1, 4);
            writer.pick(&operation, &ReduceOperation::ALL);
        }
        Collective::AllGather => writer.below(2, 4),
        Collective::Broadcast { root } => {
            writer.below(3, 4);
            writer.below(root, world + 1);
        }
        other => panic!("no encoding for {other}"),
    }
    writer.pick(&request.algorithm, &ALGORITHMS);
}

const ODD_SHAPES: [OddShape; 3] = [OddShape::Longer, OddShape::Shorter, OddShape::OtherType];

fn decode_generation(
    reader: &mut Reader<'_>,
    world: usize,
    element_type: ElementType,
) -> GenerationPlan {
    let request = decode_request(reader, world);
    let deviant = reader
        .flag()
        .then(|| (reader.below(world), decode_request(reader, world)));
    let mut length = reader.below(MAX_LENGTH + 1);
    if matches!(request.collective, Collective::ReduceScatter(_)) && reader.below(4) != 0 {
        length = length.next_multiple_of(world);
    }
    let odd_shape = (reader.below(8) == 0).then(|| (reader.below(world), reader.pick(&ODD_SHAPES)));
    let values = (0..world)
        .map(|_| {
            (1..length)
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
        request,
        deviant,
        length,
        odd_shape,
        values,
        faults,
        straggler,
        stall,
        untimed,
    }
}

fn encode_generation(writer: &mut Writer, generation: &GenerationPlan, world: usize) {
    encode_request(writer, &generation.request, world);
    writer.flag(generation.deviant.is_some());
    if let Some((rank, request)) = &generation.deviant {
        writer.below(*rank, world);
        encode_request(writer, request, world);
    }
    writer.below(generation.length, MAX_LENGTH + 1);
    if matches!(generation.request.collective, Collective::ReduceScatter(_)) {
        writer.below(usize::from(generation.length % world == 0), 4);
    }
    match generation.odd_shape {
        Some((rank, shape)) => {
            writer.below(0, 8);
            writer.below(rank, world);
            writer.pick(&shape, &ODD_SHAPES);
        }
        None => writer.below(1, 8),
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
    // A straggler needs two ranks; the decoder reads its rank only then.
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

/// Steps up to past the longest plan of the world (ring all-reduce: `2(W-1)`), so that some
/// exchange faults never fire.
fn step_bound(world: usize) -> usize {
    2 * world + 1
}

fn decode_fault(reader: &mut Reader<'_>, world: usize) -> Fault {
    let kind = reader.below(8);
    let action = if reader.flag() {
        FaultAction::Panic
    } else {
        FaultAction::Error
    };
    let step = reader.flag().then(|| reader.below(step_bound(world)));
    // Counts one past the world, so that some are right.
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
        writer.below(step, step_bound(world));
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

/// A generation in which every rank asks for `collective` via `algorithm` with inputs of
/// `length` elements: the tag, then small values.
pub fn generation(
    collective: Collective,
    algorithm: Algorithm,
    world: usize,
    length: usize,
) -> GenerationPlan {
    GenerationPlan {
        request: Request {
            collective,
            algorithm,
        },
        deviant: None,
        length,
        odd_shape: None,
        values: (0..world)
            .map(|rank| {
                (1..length)
                    .map(|index| ((rank * 3 + index) % 17) as i64 - 8)
                    .collect()
            })
            .collect(),
        faults: Vec::new(),
        straggler: None,
        stall: None,
        untimed: false,
    }
}

/// A phase of `generations`, with nothing else going on.
pub fn phase(generations: Vec<GenerationPlan>) -> PhasePlan {
    PhasePlan {
        bad_rank: None,
        abort_before: false,
        concurrent_abort: None,
        sticky_probe: false,
        generations,
    }
}

/// Readable seed scripts: every collective and algorithm, each fault site, mismatches of each
/// kind, shapes, aborts, a straggler's timeout, stickiness, recovery.
pub fn seeds() -> Vec<(&'static str, Script)> {
    use Collective::*;
    use ReduceOperation::*;
    let auto = Algorithm::Auto;
    let script = |world, phases: Vec<PhasePlan>| Script {
        world,
        element_type: ElementType::I64,
        phases,
    };
    let fault = |site, rank| Fault {
        site,
        rank,
        when: When::This,
    };
    let faulty = |site, rank| {
        let mut failing = generation(ReduceScatter(Sum), Algorithm::Ring, 3, 6);
        failing.faults = vec![fault(site, rank)];
        script(
            3,
            vec![phase(vec![
                generation(AllReduce(Max), auto, 3, 4),
                failing,
                generation(AllGather, Algorithm::Direct, 3, 2),
            ])],
        )
    };
    let mut seeds = vec![
        (
            "every_collective",
            Script {
                element_type: ElementType::U8,
                ..script(
                    4,
                    vec![phase(vec![
                        generation(AllReduce(Sum), Algorithm::Ring, 4, 5),
                        generation(ReduceScatter(Product), Algorithm::HalvingDoubling, 4, 8),
                        generation(AllGather, Algorithm::Direct, 4, 3),
                        generation(Broadcast { root: 3 }, auto, 4, 7),
                    ])],
                )
            },
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
            "exchange_error_at_step_one",
            faulty(
                FaultSite::Exchange {
                    step: Some(1),
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
    let deviant = |request: GenerationPlan, rank, collective, algorithm| GenerationPlan {
        deviant: Some((
            rank,
            Request {
                collective,
                algorithm,
            },
        )),
        ..request
    };
    seeds.push((
        "mismatches_of_operation_kind_root_and_algorithm",
        script(
            4,
            vec![phase(vec![
                deviant(
                    generation(AllReduce(Sum), auto, 4, 2),
                    2,
                    AllReduce(Max),
                    auto,
                ),
                deviant(
                    generation(AllGather, auto, 4, 2),
                    1,
                    ReduceScatter(Sum),
                    auto,
                ),
                deviant(
                    generation(Broadcast { root: 0 }, auto, 4, 2),
                    3,
                    Broadcast { root: 1 },
                    auto,
                ),
                deviant(
                    generation(AllReduce(Sum), Algorithm::Ring, 4, 2),
                    0,
                    AllReduce(Sum),
                    Algorithm::Direct,
                ),
            ])],
        ),
    ));
    let mut longer = generation(AllReduce(Sum), auto, 3, 3);
    longer.odd_shape = Some((1, OddShape::Longer));
    let mut typed = generation(AllGather, auto, 3, 2);
    typed.odd_shape = Some((2, OddShape::OtherType));
    seeds.push((
        "shape_mismatches_then_recovery",
        Script {
            element_type: ElementType::I8,
            ..script(
                3,
                vec![phase(vec![
                    longer,
                    typed,
                    generation(AllReduce(Min), auto, 3, 3),
                ])],
            )
        },
    ));
    seeds.push((
        "impossible_collectives",
        script(
            3,
            vec![phase(vec![
                generation(Broadcast { root: 3 }, auto, 3, 2),
                generation(ReduceScatter(Sum), auto, 3, 4),
                generation(AllReduce(Sum), Algorithm::HalvingDoubling, 3, 4),
                generation(AllReduce(Sum), Algorithm::HalvingDoubling, 3, 0),
            ])],
        ),
    ));
    let mut aborted = phase(vec![
        generation(AllReduce(Sum), auto, 2, 3),
        generation(AllGather, auto, 2, 3),
    ]);
    aborted.abort_before = true;
    aborted.sticky_probe = true;
    seeds.push((
        "abort_before_then_fresh_communicator",
        script(
            2,
            vec![aborted, phase(vec![generation(AllReduce(Min), auto, 2, 3)])],
        ),
    ));
    let mut racing = phase(vec![
        generation(AllReduce(Sum), auto, 3, 3),
        generation(Broadcast { root: 1 }, Algorithm::Ring, 3, 3),
        generation(AllReduce(Max), auto, 3, 3),
    ]);
    racing.concurrent_abort = Some(20);
    seeds.push((
        "concurrent_abort",
        script(
            3,
            vec![racing, phase(vec![generation(AllReduce(Sum), auto, 3, 3)])],
        ),
    ));
    let mut late = generation(AllReduce(Sum), auto, 3, 3);
    late.straggler = Some(1);
    let mut timed_out = phase(vec![
        generation(AllReduce(Sum), auto, 3, 3),
        late,
        generation(AllReduce(Max), auto, 3, 3),
    ]);
    timed_out.sticky_probe = true;
    seeds.push((
        "straggler_times_out_then_fresh_communicator",
        script(
            3,
            vec![
                timed_out,
                phase(vec![generation(AllReduce(Sum), auto, 3, 3)]),
            ],
        ),
    ));
    let mut probed = phase(vec![generation(AllReduce(Sum), auto, 1, 3)]);
    probed.bad_rank = Some(3);
    let mut lonely = generation(AllReduce(Product), auto, 1, 3);
    lonely.faults = vec![fault(FaultSite::Begin(FaultAction::Panic), None)];
    probed.generations.push(lonely);
    probed
        .generations
        .push(generation(ReduceScatter(Product), auto, 1, 3));
    seeds.push((
        "one_rank_bad_rank_and_begin_panic",
        Script {
            element_type: ElementType::I32,
            ..script(1, vec![probed])
        },
    ));
    let mut stalled = generation(AllReduce(Sum), auto, 5, 2);
    stalled.stall = Some((4, 50));
    stalled.untimed = true;
    let mut every = generation(AllGather, auto, 5, 2);
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
                phase(vec![generation(AllReduce(Max), auto, 5, 2)]),
            ],
        ),
    ));
    seeds
}

/// The old format's regressions, in this one: `(name, script)`, written as
/// `corpus/rendezvous_script/regression-<name>`.
pub fn regressions() -> Vec<(&'static str, Script)> {
    use Collective::*;
    use ReduceOperation::*;
    let auto = Algorithm::Auto;
    // Generation 2 plans `finish:error` for every generation and `drop:what=work`.
    let mut armed = generation(AllReduce(Sum), auto, 2, 2);
    armed.faults = vec![
        Fault {
            site: FaultSite::Finish(FaultAction::Error),
            rank: None,
            when: When::Every,
        },
        Fault {
            site: FaultSite::Drop(DropTarget::Work),
            rank: None,
            when: When::This,
        },
    ];
    let finish_error_with_armed_work = Script {
        world: 2,
        element_type: ElementType::I64,
        phases: vec![phase(vec![
            generation(AllReduce(Sum), auto, 2, 2),
            generation(AllReduce(Sum), auto, 2, 2),
            armed,
        ])],
    };
    // An abort before phase 0 with stickiness probed, then a concurrent abort racing four
    // generations of a fresh communicator.
    let mut before = phase(vec![generation(AllReduce(Sum), auto, 2, 1)]);
    before.abort_before = true;
    before.sticky_probe = true;
    let mut racing = phase(vec![generation(AllReduce(Max), auto, 2, 1); 4]);
    racing.concurrent_abort = Some(0);
    let sticky_probes = Script {
        world: 2,
        element_type: ElementType::I32,
        phases: vec![before, racing],
    };
    // A concurrent abort of five ranks' single generation.
    let mut five = phase(vec![generation(AllReduce(Sum), auto, 5, 1)]);
    five.concurrent_abort = Some(3);
    let concurrent_abort = Script {
        world: 5,
        element_type: ElementType::I64,
        phases: vec![five],
    };
    vec![
        ("finish_error_with_armed_work", finish_error_with_armed_work),
        ("sticky_probes_on_the_fuzzing_thread", sticky_probes),
        (
            "concurrent_abort_thread_exits_before_the_check",
            concurrent_abort,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{Script, regressions, seeds};
    use crate::bytes::Reader;

    #[test]
    fn seeds_decode_to_themselves() {
        for (name, script) in seeds().into_iter().chain(regressions()) {
            assert_eq!(
                Script::decode(&mut Reader::new(&script.encode())),
                script,
                "{name}"
            );
        }
    }
}
