//! Target `plans`: the plan builder and [`verify`] against a brute-force element-level simulator
//! ([`brute`]), and every accepted plan run on a [`SimDevice`](ruccl_sim::SimDevice).
//!
//! An input decodes to a [`PlanCase`]: a collective (any of the eight kinds, any operation, a
//! root up to one past the world), a world, an input length, and either a built-in algorithm
//! (whose plan is then edited by [`Mutation`]s into a custom one) or raw parts — the collective's
//! layout or an arbitrary one, and arbitrary steps of arbitrary transfers (local copies and
//! transfers that land elsewhere included).
//!
//! - **Built-in plans** (`Plan::new`): refused exactly for the requests DESIGN.md calls impossible
//!   (no rank, a root outside the world, a reduce-scatter, scatter or all-to-all input not in `W`
//!   blocks, halving-doubling on a world that is not a power of two, all-to-all by any algorithm
//!   but direct, `Custom` by name), with `InvalidCollective` naming the
//!   request; otherwise the plan is for the request, `Auto` resolved to the built-in algorithm of
//!   least modelled time (ties to the earlier of `Algorithm::BUILT_IN`), within the algorithm's
//!   step count, ring all-reduce moving `2(W-1)·n` elements (each rank within 2 of
//!   `2(W-1)/W·n`), `verify` accepts it, the simulator finds nothing wrong, and its own parts make
//!   the same plan again through `Plan::from_parts`.
//! - **Custom plans** (`Plan::from_parts`): accepted only if the simulator finds the plan correct
//!   — every output element holds what the collective defines, and for all-reduce one tree on every
//!   rank — so **a wrong custom schedule is never accepted**; refused only with a violation that
//!   names a defect the simulator found at the same stage (same kind, same step, rank, element).
//! - **Every accepted plan** runs on a `SimDevice` with values of the case's element type
//!   (floats of any bit pattern): every output is the sim crate's plan interpreter's bit for bit,
//!   an integer output the collective's exact result, all-reduce outputs have the same bits on
//!   every rank (NaN payloads aside, which Rust leaves open), and the ledger holds exactly the
//!   plan's transfers.

pub mod brute;
pub mod mutate;
mod run;

use crate::bytes::{Reader, Writer};
use brute::{Examination, examine, output_len_at};
pub use mutate::{Mutation, MutationKind};
use ruccl_core::{
    Algorithm, Collective, LinkModel, NativeCollectiveError, Plan, PlanParts, ReduceOperation,
    Step, TRAFFIC_BOUND, Transfer, verify,
};
use ruccl_sim::ElementType;
use std::ops::Range;

/// The largest world of a built-in plan.
pub const MAX_WORLD: usize = 8;
/// The longest input of a built-in plan.
pub const MAX_LEN: usize = 24;
/// The largest world of raw parts.
pub const MAX_RAW_WORLD: usize = 4;
/// The longest input of raw parts.
pub const MAX_RAW_LEN: usize = 4;
/// The longest explicit buffer of raw parts (besides the huge ones).
pub const MAX_RAW_BUFFER: usize = 12;
/// The most raw steps.
pub const MAX_RAW_STEPS: usize = 8;
/// The most transfers per raw step.
pub const MAX_RAW_TRANSFERS: usize = 4;
/// The most edits of a plan.
pub const MAX_MUTATIONS: usize = 4;
/// Buffer lengths beyond what the core's checker takes on for any world, even after
/// [`MAX_MUTATIONS`] layout edits of at most 128 each (the simulator runs up to
/// [`SIMULATED_ELEMENTS`](brute::SIMULATED_ELEMENTS) elements and no case comes between).
pub const HUGE_BUFFERS: [usize; 3] = [(1 << 22) + 1024, 1 << 40, usize::MAX];
/// The algorithms a built-in case asks for.
pub const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Auto,
    Algorithm::Ring,
    Algorithm::Direct,
    Algorithm::HalvingDoubling,
    Algorithm::Custom,
];

/// One plan to build and judge.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanCase {
    /// The collective.
    pub collective: Collective,
    /// The world.
    pub world: usize,
    /// Elements per rank's input.
    pub input_len: usize,
    /// Where the plan comes from.
    pub origin: Origin,
    /// Edits, applied in order to the parts before `Plan::from_parts`.
    pub mutations: Vec<Mutation>,
    /// The element type of the device run.
    pub element_type: ElementType,
    /// Seeds the device run's values.
    pub seed: u64,
}

/// Where a case's plan comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// `Plan::new` with this algorithm; its parts, edited, make the custom plan.
    BuiltIn(Algorithm),
    /// Parts from scratch.
    Raw {
        /// An explicit layout, or `None` for the collective's own.
        layout: Option<RawLayout>,
        /// The steps.
        steps: Vec<Step>,
    },
}

/// An explicit layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawLayout {
    /// Elements per buffer.
    pub buffer_len: usize,
    /// Where each rank's input starts.
    pub placements: Vec<usize>,
    /// What each rank receives.
    pub outputs: Vec<Range<usize>>,
}

/// The collective's own layout (DESIGN.md's tables): buffer, placements, outputs. For a request
/// the collective cannot take, a layout whose outputs the checkers never look at.
pub fn standard_layout(
    collective: Collective,
    world: usize,
    input_len: usize,
) -> (usize, Vec<usize>, Vec<Range<usize>>) {
    let block = input_len.checked_div(world).unwrap_or(0);
    let blocks = || -> Vec<Range<usize>> {
        (0..world)
            .map(|rank| rank * block..(rank + 1) * block)
            .collect()
    };
    // Only the root receives anything.
    let at_root = |root: usize, len: usize| -> Vec<Range<usize>> {
        (0..world)
            .map(|rank| if rank == root { 0..len } else { 0..0 })
            .collect()
    };
    match collective {
        Collective::AllGather | Collective::Gather { .. } => {
            let buffer_len = input_len.saturating_mul(world);
            let outputs = match collective.root() {
                Some(root) => at_root(root, buffer_len),
                None => vec![0..buffer_len; world],
            };
            (
                buffer_len,
                (0..world).map(|rank| rank * input_len).collect(),
                outputs,
            )
        }
        Collective::ReduceScatter(_) | Collective::Scatter { .. } => {
            (input_len, vec![0; world], blocks())
        }
        Collective::Reduce { root, .. } => (input_len, vec![0; world], at_root(root, input_len)),
        _ => (input_len, vec![0; world], vec![0..input_len; world]),
    }
}

/// Whether the collective takes `W` equal blocks per rank (reduce-scatter, scatter, all-to-all).
fn in_blocks(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll
    )
}

impl PlanCase {
    /// Decode a case; every input decodes to one.
    pub fn decode(reader: &mut Reader<'_>) -> Self {
        let built_in = reader.flag();
        let (max_world, max_len) = if built_in {
            (MAX_WORLD, MAX_LEN)
        } else {
            (MAX_RAW_WORLD, MAX_RAW_LEN)
        };
        let world = reader.below(max_world + 1);
        let collective = decode_collective(reader, world);
        let mut input_len = reader.below(max_len + 1);
        if in_blocks(collective) && world > 0 && reader.below(4) != 0 {
            input_len = input_len.next_multiple_of(world);
        }
        let origin = if built_in {
            Origin::BuiltIn(reader.pick(&ALGORITHMS))
        } else {
            let layout = reader
                .flag()
                .then(|| decode_layout(reader, collective, world, input_len));
            let buffer_len = layout.as_ref().map_or_else(
                || standard_layout(collective, world, input_len).0,
                |layout| layout.buffer_len,
            );
            let steps = (0..reader.below(MAX_RAW_STEPS + 1))
                .map(|_| decode_step(reader, world, buffer_len))
                .collect();
            Origin::Raw { layout, steps }
        };
        let mutations = (0..reader.below(MAX_MUTATIONS + 1))
            .map(|_| Mutation {
                kind: reader.pick(&MutationKind::ALL),
                a: reader.byte(),
                b: reader.byte(),
                c: reader.byte(),
            })
            .collect();
        let element_type = reader.pick(&ElementType::ALL);
        let seed = reader.u64();
        Self {
            collective,
            world,
            input_len,
            origin,
            mutations,
            element_type,
            seed,
        }
    }

    /// The bytes that decode to this case (within the decoder's bounds).
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        let built_in = matches!(self.origin, Origin::BuiltIn(_));
        writer.flag(built_in);
        let (max_world, max_len) = if built_in {
            (MAX_WORLD, MAX_LEN)
        } else {
            (MAX_RAW_WORLD, MAX_RAW_LEN)
        };
        writer.below(self.world, max_world + 1);
        encode_collective(&mut writer, self.collective, self.world);
        writer.below(self.input_len, max_len + 1);
        if in_blocks(self.collective) && self.world > 0 {
            writer.below(usize::from(self.input_len % self.world == 0), 4);
        }
        match &self.origin {
            Origin::BuiltIn(algorithm) => writer.pick(algorithm, &ALGORITHMS),
            Origin::Raw { layout, steps } => {
                writer.flag(layout.is_some());
                if let Some(layout) = layout {
                    encode_layout(
                        &mut writer,
                        layout,
                        self.collective,
                        self.world,
                        self.input_len,
                    );
                }
                let buffer_len = layout.as_ref().map_or_else(
                    || standard_layout(self.collective, self.world, self.input_len).0,
                    |layout| layout.buffer_len,
                );
                writer.below(steps.len(), MAX_RAW_STEPS + 1);
                for step in steps {
                    encode_step(&mut writer, step, self.world, buffer_len);
                }
            }
        }
        writer.below(self.mutations.len(), MAX_MUTATIONS + 1);
        for mutation in &self.mutations {
            writer.pick(&mutation.kind, &MutationKind::ALL);
            writer.byte(mutation.a);
            writer.byte(mutation.b);
            writer.byte(mutation.c);
        }
        writer.pick(&self.element_type, &ElementType::ALL);
        writer.u64(self.seed);
        writer.finish()
    }
}

/// A collective: the kind (`Collective::KINDS`' order), then its operation, then its root (up to
/// one past the world).
fn decode_collective(reader: &mut Reader<'_>, world: usize) -> Collective {
    let mut collective = reader.pick(&Collective::KINDS);
    if collective.operation().is_some() {
        collective = collective.with_operation(reader.pick(&ReduceOperation::ALL));
    }
    if collective.root().is_some() {
        collective = collective.with_root(reader.below(world + 2));
    }
    collective
}

fn encode_collective(writer: &mut Writer, collective: Collective, world: usize) {
    let kind = Collective::KINDS
        .iter()
        .position(|kind| {
            kind.with_operation(ReduceOperation::Sum).with_root(0)
                == collective.with_operation(ReduceOperation::Sum).with_root(0)
        })
        .unwrap_or_else(|| panic!("no encoding for {collective}"));
    writer.below(kind, Collective::KINDS.len());
    if let Some(operation) = collective.operation() {
        writer.pick(&operation, &ReduceOperation::ALL);
    }
    if let Some(root) = collective.root() {
        writer.below(root, world + 2);
    }
}

/// How far raw placements, output starts and ranges reach: a little past a small buffer.
fn reach(buffer_len: usize) -> usize {
    buffer_len.min(MAX_RAW_BUFFER) + 2
}

/// How many of something per rank: usually one per rank, sometimes one too many or too few.
fn decode_count(reader: &mut Reader<'_>, world: usize) -> usize {
    match reader.below(8) {
        0 => world + 1,
        1 => world.saturating_sub(1),
        _ => world,
    }
}

fn encode_count(writer: &mut Writer, count: usize, world: usize) {
    if count == world {
        writer.below(2, 8);
    } else if count == world + 1 {
        writer.below(0, 8);
    } else {
        assert_eq!(count + 1, world, "a count the decoder cannot produce");
        writer.below(1, 8);
    }
}

fn decode_layout(
    reader: &mut Reader<'_>,
    collective: Collective,
    world: usize,
    input_len: usize,
) -> RawLayout {
    let buffer_len = match reader.below(8) {
        0 => reader.pick(&HUGE_BUFFERS),
        _ => reader.below(MAX_RAW_BUFFER + 1),
    };
    let reach = reach(buffer_len);
    let placements = (0..decode_count(reader, world))
        .map(|_| reader.below(reach))
        .collect();
    let outputs = (0..decode_count(reader, world))
        .map(|rank| {
            let start = reader.below(reach);
            let len = if reader.below(4) == 0 {
                reader.below(reach)
            } else {
                output_len_at(collective, rank, world, input_len).unwrap_or(0)
            };
            start..start.saturating_add(len)
        })
        .collect();
    RawLayout {
        buffer_len,
        placements,
        outputs,
    }
}

fn encode_layout(
    writer: &mut Writer,
    layout: &RawLayout,
    collective: Collective,
    world: usize,
    input_len: usize,
) {
    if HUGE_BUFFERS.contains(&layout.buffer_len) {
        writer.below(0, 8);
        writer.pick(&layout.buffer_len, &HUGE_BUFFERS);
    } else {
        writer.below(1, 8);
        writer.below(layout.buffer_len, MAX_RAW_BUFFER + 1);
    }
    let reach = reach(layout.buffer_len);
    encode_count(writer, layout.placements.len(), world);
    for &placement in &layout.placements {
        writer.below(placement, reach);
    }
    encode_count(writer, layout.outputs.len(), world);
    for (rank, output) in layout.outputs.iter().enumerate() {
        let expected = output_len_at(collective, rank, world, input_len).unwrap_or(0);
        writer.below(output.start, reach);
        if output.len() == expected && output.start <= output.end {
            writer.below(1, 4);
        } else {
            writer.below(0, 4);
            writer.below(output.end - output.start, reach);
        }
    }
}

fn decode_step(reader: &mut Reader<'_>, world: usize, buffer_len: usize) -> Step {
    let combine = reader.flag();
    let reach = reach(buffer_len);
    let transfers = (0..reader.between(1, MAX_RAW_TRANSFERS))
        .map(|_| {
            let from = reader.below(world + 1);
            let to = reader.below(world + 1);
            let start = reader.below(reach);
            let end = if reader.below(4) == 0 {
                reader.below(reach)
            } else {
                start + reader.below(3)
            };
            // Usually the v2 meaning (the same indices on both ranks), else anywhere in reach.
            let at = if reader.below(4) == 0 {
                reader.below(reach)
            } else {
                start
            };
            Transfer {
                from,
                to,
                range: start..end,
                at,
            }
        })
        .collect();
    Step { combine, transfers }
}

fn encode_step(writer: &mut Writer, step: &Step, world: usize, buffer_len: usize) {
    writer.flag(step.combine);
    let reach = reach(buffer_len);
    writer.between(step.transfers.len(), 1, MAX_RAW_TRANSFERS);
    for transfer in &step.transfers {
        writer.below(transfer.from, world + 1);
        writer.below(transfer.to, world + 1);
        writer.below(transfer.range.start, reach);
        let range = &transfer.range;
        if range.end >= range.start && range.end - range.start < 3 {
            writer.below(1, 4);
            writer.below(range.end - range.start, 3);
        } else {
            writer.below(0, 4);
            writer.below(range.end, reach);
        }
        if transfer.at == range.start {
            writer.below(1, 4);
        } else {
            writer.below(0, 4);
            writer.below(transfer.at, reach);
        }
    }
}

/// Decode `data` and check it; panics on any violation.
pub fn check(data: &[u8]) {
    check_case(&PlanCase::decode(&mut Reader::new(data)));
}

/// Check one case; panics on any violation.
pub fn check_case(case: &PlanCase) {
    let mut parts = match &case.origin {
        Origin::BuiltIn(algorithm) => {
            let built = Plan::new(case.collective, *algorithm, case.world, case.input_len);
            let Some(plan) = check_built_in(case, *algorithm, built) else {
                return;
            };
            if case.mutations.is_empty() {
                // `check_built_in` made the same plan from its own parts already.
                return;
            }
            plan.into_parts()
        }
        Origin::Raw { layout, steps } => {
            let (buffer_len, placements, outputs) = match layout {
                Some(layout) => (
                    layout.buffer_len,
                    layout.placements.clone(),
                    layout.outputs.clone(),
                ),
                None => standard_layout(case.collective, case.world, case.input_len),
            };
            PlanParts {
                collective: case.collective,
                world: case.world,
                input_len: case.input_len,
                buffer_len,
                placements,
                outputs,
                steps: steps.clone(),
            }
        }
    };
    for mutation in &case.mutations {
        mutation.apply(&mut parts);
    }
    check_custom(case, parts);
}

/// Why DESIGN.md calls a built-in request impossible, if it does.
fn impossible(
    collective: Collective,
    algorithm: Algorithm,
    world: usize,
    input_len: usize,
) -> bool {
    world == 0
        || (0..world).any(|rank| output_len_at(collective, rank, world, input_len).is_none())
        || (algorithm == Algorithm::HalvingDoubling && !world.is_power_of_two())
        || (collective == Collective::AllToAll
            && matches!(algorithm, Algorithm::Ring | Algorithm::HalvingDoubling))
        || algorithm == Algorithm::Custom
}

/// The most steps `algorithm` takes for `collective` on `world` ranks (DESIGN.md's table; the
/// ring reduce is a ring reduce-scatter and one step to the root, the halving-doubling one a
/// halving and a binomial gather; a built-in plan leaves out steps that would move nothing).
fn most_steps(algorithm: Algorithm, collective: Collective, world: usize) -> usize {
    let log = world.max(1).trailing_zeros() as usize;
    match (algorithm, collective) {
        // Two (a scatter or reduce-scatter of chunks, then their gather) where one would move
        // more than TRAFFIC_BOUND × the least.
        (
            Algorithm::Direct,
            Collective::AllReduce(_) | Collective::Broadcast { .. } | Collective::Reduce { .. },
        ) => 2,
        (Algorithm::Direct, _) => 1,
        (Algorithm::Ring, Collective::AllReduce(_)) => 2 * (world - 1),
        (Algorithm::Ring, Collective::Broadcast { .. } | Collective::Reduce { .. }) => world,
        (Algorithm::Ring, _) => world - 1,
        (
            Algorithm::HalvingDoubling,
            Collective::AllReduce(_) | Collective::Broadcast { .. } | Collective::Reduce { .. },
        ) => 2 * log,
        (Algorithm::HalvingDoubling, _) => log,
        _ => 0,
    }
}

/// `Plan::new`'s answer to the case's request, checked; the plan if there is one.
fn check_built_in(
    case: &PlanCase,
    algorithm: Algorithm,
    built: Result<Plan, NativeCollectiveError>,
) -> Option<Plan> {
    let (collective, world, input_len) = (case.collective, case.world, case.input_len);
    let request = format!("{collective} via {algorithm} on {world} ranks × {input_len}");
    let plan = match built {
        Ok(plan) => plan,
        Err(error) if refused_for_traffic(&error) => {
            check_traffic_refusal(case, algorithm, &request);
            return None;
        }
        Err(error) => {
            assert!(
                impossible(collective, algorithm, world, input_len),
                "{request}: refused a possible request: {error}"
            );
            assert!(
                matches!(
                    &error,
                    NativeCollectiveError::InvalidCollective {
                        collective: c,
                        algorithm: a,
                        world: w,
                        input_len: n,
                        ..
                    } if (*c, *a, *w, *n) == (collective, algorithm, world, input_len)
                ),
                "{request}: refused with {error:?}"
            );
            return None;
        }
    };
    assert!(
        !impossible(collective, algorithm, world, input_len),
        "{request}: built a plan for an impossible request"
    );
    assert_eq!(
        (plan.collective(), plan.world(), plan.input_len()),
        (collective, world, input_len),
        "{request}: the plan is for another request"
    );
    let resolved = plan.algorithm();
    if algorithm == Algorithm::Auto {
        check_auto(&plan, &request);
    } else {
        assert_eq!(resolved, algorithm, "{request}: another algorithm");
    }
    assert_eq!(
        verify(&plan),
        Ok(()),
        "{request}: verify refuses a built-in plan"
    );
    let parts = plan.clone().into_parts();
    let examination = examine(&parts);
    assert!(
        examination.is_correct(),
        "{request}: the built-in plan is wrong: {:?}\n{parts:?}",
        examination.defects
    );
    assert!(
        plan.steps().len() <= most_steps(resolved, collective, world),
        "{request}: {} steps, more than {resolved} takes",
        plan.steps().len()
    );
    if resolved == Algorithm::Ring && matches!(collective, Collective::AllReduce(_)) {
        check_ring_traffic(&plan, &request);
    }
    let least = least_traffic(case);
    assert!(
        plan.busiest_rank_elements() <= TRAFFIC_BOUND * least,
        "{request}: its busiest rank moves {}, more than {TRAFFIC_BOUND} × {least}",
        plan.busiest_rank_elements()
    );
    run::run_on_device(&plan, case.element_type, case.seed);
    if case.mutations.is_empty() {
        let rebuilt = Plan::from_parts(parts.clone())
            .unwrap_or_else(|error| panic!("{request}: its own parts are refused: {error}"));
        assert_eq!(
            rebuilt.into_parts(),
            parts,
            "{request}: from_parts changed the parts"
        );
    }
    Some(plan)
}

/// Whether `error` is a fixed algorithm's refusal of a size for its traffic
/// ([`TRAFFIC_BOUND`]).
fn refused_for_traffic(error: &NativeCollectiveError) -> bool {
    matches!(error, NativeCollectiveError::InvalidCollective { reason, .. }
        if reason.contains("the least is refused"))
}

/// The least traffic through a busiest rank of any built-in plan of the case's request.
fn least_traffic(case: &PlanCase) -> usize {
    Algorithm::BUILT_IN
        .into_iter()
        .filter_map(|algorithm| {
            Plan::new(case.collective, algorithm, case.world, case.input_len).ok()
        })
        .map(|plan| plan.busiest_rank_elements())
        .min()
        .unwrap_or(0)
}

/// A refusal for traffic: of a possible request by a fixed algorithm, while another built-in
/// algorithm builds it (`Auto` always does), moving something.
fn check_traffic_refusal(case: &PlanCase, algorithm: Algorithm, request: &str) {
    let (collective, world, input_len) = (case.collective, case.world, case.input_len);
    assert!(
        algorithm != Algorithm::Auto && !impossible(collective, algorithm, world, input_len),
        "{request}: refused for its traffic"
    );
    let auto = Plan::new(collective, Algorithm::Auto, world, input_len)
        .unwrap_or_else(|error| panic!("{request}: Auto refuses it too: {error}"));
    assert_ne!(auto.algorithm(), algorithm, "{request}: Auto took it");
    assert!(
        least_traffic(case) > 0,
        "{request}: refused where nothing moves"
    );
}

/// `Auto` resolved to the built-in algorithm of least modelled time, ties to the earlier one.
fn check_auto(plan: &Plan, request: &str) {
    let model = LinkModel::default();
    let time = |algorithm| {
        Plan::new(plan.collective(), algorithm, plan.world(), plan.input_len())
            .ok()
            .map(|candidate| model.plan_time(&candidate, ElementType::F32.size()))
    };
    let chosen = plan.algorithm();
    let position = Algorithm::BUILT_IN.iter().position(|&a| a == chosen);
    let Some(position) = position else {
        panic!("{request}: Auto resolved to {chosen}, not a built-in algorithm");
    };
    let Some(least) = time(chosen) else {
        panic!("{request}: Auto resolved to {chosen}, which cannot build it");
    };
    for (index, &candidate) in Algorithm::BUILT_IN.iter().enumerate() {
        if let Some(other) = time(candidate) {
            assert!(
                other > least || (other == least && index >= position),
                "{request}: Auto chose {chosen} ({least} s) over {candidate} ({other} s)"
            );
        }
    }
}

/// Ring all-reduce moves `2(W-1)·n` elements, each rank within 2 of `2(W-1)/W·n`.
fn check_ring_traffic(plan: &Plan, request: &str) {
    let world = plan.world();
    let mut sent = vec![0usize; world];
    for transfer in plan.steps().iter().flat_map(|step| &step.transfers) {
        sent[transfer.from] += transfer.range.len();
    }
    let n = plan.input_len();
    assert_eq!(
        sent.iter().sum::<usize>(),
        2 * (world - 1) * n,
        "{request}: ring traffic"
    );
    let share = 2.0 * (world - 1) as f64 * n as f64 / world as f64;
    for (rank, &elements) in sent.iter().enumerate() {
        assert!(
            (elements as f64 - share).abs() < 2.0,
            "{request}: rank {rank} sends {elements}, the lower bound is {share}"
        );
    }
}

/// `Plan::from_parts` on `parts`, judged by the simulator.
fn check_custom(case: &PlanCase, parts: PlanParts) {
    let examination: Examination = examine(&parts);
    match Plan::from_parts(parts.clone()) {
        Ok(plan) => {
            assert!(
                examination.is_correct(),
                "a wrong custom plan was accepted; the simulator finds {:?}\n{parts:?}",
                examination.defects
            );
            assert_eq!(plan.algorithm(), Algorithm::Custom);
            assert_eq!(
                plan.clone().into_parts(),
                parts,
                "from_parts changed the parts"
            );
            run::run_on_device(&plan, case.element_type, case.seed);
        }
        Err(violation) => {
            assert!(
                !examination.is_correct(),
                "a correct custom plan was refused: {violation}\n{parts:?}"
            );
            assert!(
                examination.names(&violation),
                "the refusal `{violation}` ({violation:?}) names none of the defects the simulator finds: {:?}\n{parts:?}",
                examination.defects
            );
        }
    }
}

/// Readable seed cases: every collective and algorithm built in, near misses of each, and small
/// schedules written from scratch, right and wrong.
pub fn seeds() -> Vec<(&'static str, PlanCase)> {
    use Collective::*;
    use ReduceOperation::*;
    let case = |collective, world, input_len, origin, mutations: Vec<Mutation>| PlanCase {
        collective,
        world,
        input_len,
        origin,
        mutations,
        element_type: ElementType::F32,
        seed: 11,
    };
    let edit = |kind, a, b, c| Mutation { kind, a, b, c };
    let built = |collective, world, input_len, algorithm, mutations| {
        case(
            collective,
            world,
            input_len,
            Origin::BuiltIn(algorithm),
            mutations,
        )
    };
    let t = |from, to, range: Range<usize>| Transfer::new(from, to, range);
    let at = |from, to, range: Range<usize>, at| Transfer {
        from,
        to,
        range,
        at,
    };
    let raw = |collective, world, input_len, steps: Vec<Step>| {
        case(
            collective,
            world,
            input_len,
            Origin::Raw {
                layout: None,
                steps,
            },
            Vec::new(),
        )
    };
    let step = |combine, transfers| Step { combine, transfers };
    vec![
        (
            "ring_all_reduce",
            built(AllReduce(Sum), 4, 10, Algorithm::Ring, vec![]),
        ),
        (
            "direct_all_reduce_two_steps",
            PlanCase {
                element_type: ElementType::F32,
                ..built(AllReduce(Sum), 8, 24, Algorithm::Direct, vec![])
            },
        ),
        (
            "direct_reduce_two_steps_root_five",
            built(
                Reduce { op: Min, root: 5 },
                8,
                20,
                Algorithm::Direct,
                vec![],
            ),
        ),
        (
            "direct_refuses_one_element_on_eight_ranks",
            built(AllReduce(Sum), 8, 1, Algorithm::Direct, vec![]),
        ),
        (
            "auto_all_reduce_mean",
            PlanCase {
                element_type: ElementType::BF16,
                ..built(AllReduce(Mean), 3, 7, Algorithm::Auto, vec![])
            },
        ),
        (
            "direct_reduce_scatter",
            PlanCase {
                element_type: ElementType::U32,
                ..built(ReduceScatter(Product), 3, 6, Algorithm::Direct, vec![])
            },
        ),
        (
            "halving_doubling_all_gather",
            built(AllGather, 8, 3, Algorithm::HalvingDoubling, vec![]),
        ),
        (
            "ring_broadcast_root_two",
            PlanCase {
                element_type: ElementType::F64,
                ..built(Broadcast { root: 2 }, 5, 9, Algorithm::Ring, vec![])
            },
        ),
        (
            "halving_doubling_on_six_ranks",
            built(AllReduce(Max), 6, 4, Algorithm::HalvingDoubling, vec![]),
        ),
        (
            "root_outside_the_world",
            built(Broadcast { root: 3 }, 3, 4, Algorithm::Direct, vec![]),
        ),
        (
            "reduce_scatter_not_in_blocks",
            built(ReduceScatter(Sum), 4, 7, Algorithm::Ring, vec![]),
        ),
        (
            "custom_by_name",
            built(AllGather, 2, 2, Algorithm::Custom, vec![]),
        ),
        (
            "no_rank",
            built(AllReduce(Min), 0, 2, Algorithm::Auto, vec![]),
        ),
        (
            "ring_without_its_last_step",
            built(
                AllReduce(Sum),
                4,
                8,
                Algorithm::Ring,
                vec![edit(MutationKind::RemoveStep, 5, 0, 0)],
            ),
        ),
        (
            "ring_with_a_step_twice",
            built(
                AllReduce(Sum),
                3,
                6,
                Algorithm::Ring,
                vec![edit(MutationKind::DuplicateStep, 0, 0, 0)],
            ),
        ),
        (
            "direct_overwrites_instead_of_combining",
            built(
                AllReduce(Max),
                3,
                3,
                Algorithm::Direct,
                vec![edit(MutationKind::FlipCombine, 0, 0, 0)],
            ),
        ),
        (
            "a_range_one_element_short",
            built(
                ReduceScatter(Sum),
                4,
                8,
                Algorithm::HalvingDoubling,
                vec![edit(MutationKind::ShiftEnd, 0, 1, 0xFF)],
            ),
        ),
        (
            "a_split_transfer_is_the_same_schedule",
            built(
                AllGather,
                3,
                4,
                Algorithm::Ring,
                vec![edit(MutationKind::SplitTransfer, 1, 2, 3)],
            ),
        ),
        (
            "a_transfer_to_a_rank_outside",
            built(
                Broadcast { root: 0 },
                4,
                4,
                Algorithm::Direct,
                vec![edit(MutationKind::SetTo, 0, 1, 4)],
            ),
        ),
        (
            "a_reduce_scatter_claimed_as_all_reduce",
            built(
                ReduceScatter(Sum),
                2,
                4,
                Algorithm::Ring,
                vec![edit(MutationKind::Retarget, 0, 0, 0)],
            ),
        ),
        (
            "an_output_moved",
            built(
                AllReduce(Sum),
                2,
                3,
                Algorithm::Direct,
                vec![edit(MutationKind::Layout, 2, 1, 1)],
            ),
        ),
        (
            "two_ranks_reduce_then_copy",
            raw(
                AllReduce(Sum),
                2,
                1,
                vec![
                    step(true, vec![t(0, 1, 0..1)]),
                    step(false, vec![t(1, 0, 0..1)]),
                ],
            ),
        ),
        (
            "both_ranks_fold_at_once",
            raw(
                AllReduce(Product),
                2,
                2,
                vec![step(true, vec![t(0, 1, 0..2), t(1, 0, 0..2)])],
            ),
        ),
        (
            "reassociated_fold",
            raw(
                AllReduce(Sum),
                3,
                1,
                vec![
                    step(true, vec![t(0, 1, 0..1), t(2, 1, 0..1), t(1, 2, 0..1)]),
                    step(true, vec![t(2, 0, 0..1)]),
                    step(false, vec![t(1, 2, 0..1)]),
                ],
            ),
        ),
        (
            "double_write",
            raw(
                AllGather,
                3,
                1,
                vec![step(false, vec![t(0, 2, 0..1), t(1, 2, 0..1)])],
            ),
        ),
        (
            "duplicate_source",
            raw(
                ReduceScatter(Max),
                2,
                2,
                vec![step(true, vec![t(0, 1, 0..2), t(0, 1, 1..2)])],
            ),
        ),
        (
            "read_before_write",
            raw(AllGather, 2, 2, vec![step(false, vec![t(0, 1, 2..4)])]),
        ),
        (
            "self_transfer_and_inverted_range",
            raw(
                Broadcast { root: 1 },
                2,
                3,
                vec![step(
                    false,
                    vec![t(1, 1, 0..3), t(1, 0, Range { start: 2, end: 1 })],
                )],
            ),
        ),
        (
            "huge_buffer",
            case(
                AllReduce(Sum),
                2,
                1,
                Origin::Raw {
                    layout: Some(RawLayout {
                        buffer_len: usize::MAX,
                        placements: vec![0, 1],
                        outputs: vec![0..1, 3..4],
                    }),
                    steps: vec![],
                },
                vec![],
            ),
        ),
        (
            "layout_with_a_missing_rank",
            case(
                ReduceScatter(Sum),
                3,
                3,
                Origin::Raw {
                    layout: Some(RawLayout {
                        buffer_len: 5,
                        placements: vec![0, 2],
                        outputs: vec![0..1, 1..2, 4..6, 1..2],
                    }),
                    steps: vec![step(true, vec![t(0, 1, 0..3)])],
                },
                vec![],
            ),
        ),
        // Contract v3: the four new collectives built in, refused, and edited; transfers that
        // land elsewhere and local copies written from scratch.
        (
            "ring_reduce_root_two",
            built(Reduce { op: Sum, root: 2 }, 5, 9, Algorithm::Ring, vec![]),
        ),
        (
            "halving_doubling_reduce_mean",
            PlanCase {
                element_type: ElementType::I32,
                ..built(
                    Reduce { op: Mean, root: 3 },
                    4,
                    6,
                    Algorithm::HalvingDoubling,
                    vec![],
                )
            },
        ),
        (
            "direct_gather_root_one",
            PlanCase {
                element_type: ElementType::U8,
                ..built(Gather { root: 1 }, 3, 2, Algorithm::Direct, vec![])
            },
        ),
        (
            "ring_gather_root_three",
            built(Gather { root: 3 }, 4, 3, Algorithm::Ring, vec![]),
        ),
        (
            "halving_doubling_scatter",
            PlanCase {
                element_type: ElementType::F64,
                ..built(
                    Scatter { root: 2 },
                    8,
                    16,
                    Algorithm::HalvingDoubling,
                    vec![],
                )
            },
        ),
        (
            "ring_scatter_root_one",
            PlanCase {
                element_type: ElementType::I64,
                ..built(Scatter { root: 1 }, 3, 6, Algorithm::Ring, vec![])
            },
        ),
        (
            "direct_all_to_all",
            PlanCase {
                element_type: ElementType::U32,
                ..built(AllToAll, 4, 8, Algorithm::Direct, vec![])
            },
        ),
        (
            "auto_all_to_all",
            built(AllToAll, 3, 9, Algorithm::Auto, vec![]),
        ),
        (
            "ring_all_to_all_is_refused",
            built(AllToAll, 4, 4, Algorithm::Ring, vec![]),
        ),
        (
            "scatter_not_in_blocks",
            built(Scatter { root: 0 }, 3, 4, Algorithm::Direct, vec![]),
        ),
        (
            "gather_root_outside_the_world",
            built(Gather { root: 3 }, 3, 2, Algorithm::Direct, vec![]),
        ),
        (
            "all_to_all_block_lands_one_off",
            built(
                AllToAll,
                3,
                6,
                Algorithm::Direct,
                vec![edit(MutationKind::ShiftAt, 0, 1, 1)],
            ),
        ),
        (
            "gather_block_to_the_wrong_root_offset",
            built(
                Gather { root: 0 },
                4,
                2,
                Algorithm::Direct,
                // Rank 3's block lands on the root's own block 0.
                vec![edit(MutationKind::ShiftAt, 0, 2, (-6i8) as u8)],
            ),
        ),
        (
            "a_broadcast_transfer_made_local",
            built(
                Broadcast { root: 0 },
                3,
                4,
                Algorithm::Direct,
                vec![edit(MutationKind::SelfTransfer, 0, 1, 0)],
            ),
        ),
        (
            "a_split_all_to_all_is_the_same_schedule",
            built(
                AllToAll,
                2,
                4,
                Algorithm::Direct,
                vec![edit(MutationKind::SplitTransfer, 0, 0, 1)],
            ),
        ),
        (
            "an_all_to_all_start_moved_keeps_its_landing",
            built(
                AllToAll,
                2,
                4,
                Algorithm::Direct,
                vec![edit(MutationKind::ShiftStart, 0, 1, 1)],
            ),
        ),
        (
            "a_reduce_claimed_as_all_to_all",
            built(
                Reduce { op: Sum, root: 1 },
                2,
                4,
                Algorithm::Ring,
                vec![edit(MutationKind::Retarget, 7, 0, 0)],
            ),
        ),
        (
            "all_to_all_by_hand_with_offsets",
            raw(
                AllToAll,
                2,
                4,
                vec![step(false, vec![at(1, 0, 0..2, 2), at(0, 1, 2..4, 0)])],
            ),
        ),
        (
            "all_to_all_by_hand_one_off",
            raw(
                AllToAll,
                2,
                4,
                vec![step(false, vec![at(1, 0, 0..2, 1), at(0, 1, 2..4, 0)])],
            ),
        ),
        (
            "a_local_fold_of_another_element",
            raw(
                AllReduce(Sum),
                2,
                2,
                vec![step(true, vec![t(1, 0, 0..2), at(0, 0, 1..2, 0)])],
            ),
        ),
        (
            "a_local_copy_whose_source_the_step_overwrites",
            case(
                AllGather,
                2,
                1,
                Origin::Raw {
                    layout: Some(RawLayout {
                        buffer_len: 2,
                        placements: vec![1, 1],
                        outputs: vec![0..2, 0..2],
                    }),
                    steps: vec![step(
                        false,
                        vec![at(0, 0, 1..2, 0), at(1, 0, 1..2, 1), at(0, 1, 1..2, 0)],
                    )],
                },
                vec![],
            ),
        ),
        (
            "a_gather_received_at_the_root_by_hand",
            raw(
                Gather { root: 1 },
                3,
                1,
                vec![step(false, vec![t(0, 1, 0..1), t(2, 1, 2..3)])],
            ),
        ),
        (
            "a_target_past_the_buffer",
            raw(
                Scatter { root: 0 },
                2,
                2,
                vec![step(false, vec![at(0, 1, 1..2, 2)])],
            ),
        ),
        (
            "two_local_copies_fold_into_one_element",
            raw(
                Reduce { op: Max, root: 0 },
                2,
                1,
                vec![step(
                    true,
                    vec![at(0, 0, 0..1, 0), t(1, 0, 0..1), at(0, 0, 0..1, 0)],
                )],
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{Origin, PlanCase, check_case, refused_for_traffic, seeds, standard_layout};
    use crate::bytes::Reader;
    use ruccl_core::{Algorithm, Plan, PlanParts, ScheduleViolation, StepViolation};

    /// The custom parts a seed hands `Plan::from_parts` (a built-in plan's after its edits).
    fn custom_parts(case: &PlanCase) -> PlanParts {
        let mut parts = match &case.origin {
            Origin::BuiltIn(algorithm) => {
                Plan::new(case.collective, *algorithm, case.world, case.input_len)
                    .unwrap_or_else(|error| panic!("{error}"))
                    .into_parts()
            }
            Origin::Raw { layout, steps } => {
                let (buffer_len, placements, outputs) = match layout {
                    Some(layout) => (
                        layout.buffer_len,
                        layout.placements.clone(),
                        layout.outputs.clone(),
                    ),
                    None => standard_layout(case.collective, case.world, case.input_len),
                };
                PlanParts {
                    collective: case.collective,
                    world: case.world,
                    input_len: case.input_len,
                    buffer_len,
                    placements,
                    outputs,
                    steps: steps.clone(),
                }
            }
        };
        for mutation in &case.mutations {
            mutation.apply(&mut parts);
        }
        parts
    }

    /// The v3 seeds show what their names say: `verify` accepts the right schedules with offsets
    /// and local copies, and refuses each slip with the violation it is about.
    #[test]
    fn the_v3_seeds_are_judged_as_named() {
        use ScheduleViolation as V;
        let accepted = |verdict: &Result<(), V>| verdict.is_ok();
        let wrong = |verdict: &Result<(), V>| matches!(verdict, Err(V::WrongContents { .. }));
        type Judge<'a> = &'a dyn Fn(&Result<(), V>) -> bool;
        let expectations: [(&str, Judge<'_>); 13] = [
            ("all_to_all_block_lands_one_off", &|verdict| {
                matches!(
                    verdict,
                    Err(V::BrokenStep {
                        violation: StepViolation::DoubleWrite { rank: 2, .. },
                        ..
                    })
                )
            }),
            ("gather_block_to_the_wrong_root_offset", &wrong),
            ("a_broadcast_transfer_made_local", &|verdict| {
                matches!(verdict, Err(V::WrongContents { rank: 2, .. }))
            }),
            ("a_split_all_to_all_is_the_same_schedule", &accepted),
            ("an_all_to_all_start_moved_keeps_its_landing", &wrong),
            // Rank 0 of a reduce to root 1 receives nothing; an all-to-all gives it 4 elements.
            ("a_reduce_claimed_as_all_to_all", &|verdict| {
                matches!(
                    verdict,
                    Err(V::BadOutput {
                        rank: 0,
                        expected: 4,
                        ..
                    })
                )
            }),
            ("all_to_all_by_hand_with_offsets", &accepted),
            ("all_to_all_by_hand_one_off", &wrong),
            ("a_local_fold_of_another_element", &wrong),
            ("a_local_copy_whose_source_the_step_overwrites", &accepted),
            ("a_gather_received_at_the_root_by_hand", &accepted),
            ("a_target_past_the_buffer", &|verdict| {
                matches!(
                    verdict,
                    Err(V::BrokenStep {
                        violation: StepViolation::OutOfBounds { at: 2, .. },
                        ..
                    })
                )
            }),
            ("two_local_copies_fold_into_one_element", &|verdict| {
                matches!(
                    verdict,
                    Err(V::BrokenStep {
                        violation: StepViolation::DuplicateSource { from: 0, .. },
                        ..
                    })
                )
            }),
        ];
        let seeds = seeds();
        for (name, expected) in expectations {
            let Some((_, case)) = seeds.iter().find(|(seed, _)| *seed == name) else {
                panic!("no seed {name}");
            };
            let verdict = Plan::from_parts(custom_parts(case)).map(|_| ());
            assert!(expected(&verdict), "{name}: {verdict:?}");
        }
    }

    #[test]
    fn direct_takes_two_steps_or_is_refused_for_its_traffic() {
        let seeds = seeds();
        let seed = |name: &str| &seeds.iter().find(|(seed, _)| *seed == name).unwrap().1;
        for name in [
            "direct_all_reduce_two_steps",
            "direct_reduce_two_steps_root_five",
            "direct_refuses_one_element_on_eight_ranks",
        ] {
            check_case(seed(name));
        }
        let refused = seed("direct_refuses_one_element_on_eight_ranks");
        let built = Plan::new(refused.collective, Algorithm::Direct, 8, 1);
        assert!(built.as_ref().is_err_and(refused_for_traffic), "{built:?}");
        let two = seed("direct_all_reduce_two_steps");
        let plan = Plan::new(two.collective, Algorithm::Direct, 8, 24).unwrap();
        assert_eq!(plan.steps().len(), 2);
    }

    #[test]
    fn seeds_decode_to_themselves() {
        for (name, case) in seeds() {
            assert_eq!(
                PlanCase::decode(&mut Reader::new(&case.encode())),
                case,
                "{name}"
            );
        }
    }
}
