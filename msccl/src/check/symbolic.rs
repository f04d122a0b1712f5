//! The result, symbolically: every cell holds a node of a hash-consed expression DAG.
//!
//! Input chunk `c` of rank `r` is the leaf `x[r][c]`; every reduction the executors perform is
//! binary (`rrs`, `rrc`, `rrcs`: the received chunk and the local source; `re`: the source and
//! the destination), so a reduced chunk is a binary tree. The executors' reduction operations
//! are commutative bit for bit (IEEE addition, multiplication, minimum and maximum give the same
//! bits for `a ⊕ b` and `b ⊕ a`, NaN payloads aside), but not associative, so a node is the
//! *unordered* pair of its children and two chunks hold the same bits exactly when they hold the
//! same node: decidable by comparing numbers.
//!
//! Race freedom (checked before) makes the result the same in every execution, so one
//! topological order of the happens-before graph evaluates them all.

use super::cells::Cells;
use super::model::Model;
use super::order::Order;
use super::races::access;
use super::violation::{Violation, ViolationKind};
use crate::program::{Buffer, MscclCollective, StepKind};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The node of a cell that holds nothing yet.
pub(crate) const UNSET: u32 = 0;

/// A multiply-rotate hasher: node numbers are the checker's own small integers.
#[derive(Default)]
pub(crate) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A [`HashMap`]/[`HashSet`] hasher for node numbers.
pub(crate) type Mixed = BuildHasherDefault<MixHasher>;

/// A combining node.
#[derive(Clone, Copy)]
struct Combine {
    left: u32,
    right: u32,
    /// Input leaves under it, with repetition (saturating).
    leaves: u32,
}

/// The expression DAG: leaves `1 + rank·input + chunk`, then combines.
pub(crate) struct Nodes {
    input: usize,
    first_combine: u32,
    combines: Vec<Combine>,
    /// The op that first built each combine.
    creators: Vec<usize>,
    interned: HashMap<(u32, u32), u32, Mixed>,
}

impl Nodes {
    pub(crate) fn new(world: usize, input: usize) -> Self {
        let leaves = world.saturating_mul(input);
        Nodes {
            input,
            first_combine: u32::try_from(leaves + 1).unwrap_or(u32::MAX),
            combines: Vec::new(),
            creators: Vec::new(),
            interned: HashMap::default(),
        }
    }

    pub(crate) fn leaf(&self, rank: usize, chunk: usize) -> u32 {
        u32::try_from(1 + rank * self.input + chunk).unwrap_or(u32::MAX)
    }

    /// `a ⊕ b` as an unordered pair, built by op `by` if it is new.
    pub(crate) fn combine(&mut self, a: u32, b: u32, by: usize) -> u32 {
        let key = (a.min(b), a.max(b));
        if let Some(&node) = self.interned.get(&key) {
            return node;
        }
        let leaves = self.leaves(a).saturating_add(self.leaves(b));
        let node = self
            .first_combine
            .saturating_add(u32::try_from(self.combines.len()).unwrap_or(u32::MAX));
        self.combines.push(Combine {
            left: key.0,
            right: key.1,
            leaves,
        });
        self.creators.push(by);
        self.interned.insert(key, node);
        node
    }

    /// Every node of `node`'s tree, itself included (call on small trees only).
    fn subtree(&self, node: u32) -> HashSet<u32, Mixed> {
        let mut found = HashSet::default();
        let mut pending = vec![node];
        while let Some(next) = pending.pop() {
            if found.insert(next) {
                if let Some(combine) = self.combine_node(next) {
                    pending.extend([combine.left, combine.right]);
                }
            }
        }
        found
    }

    /// Whether `node`'s tree holds the leaf `leaf`.
    fn holds(&self, node: u32, leaf: u32) -> bool {
        self.subtree(node).contains(&leaf)
    }

    /// The lowest combine of `node`'s tree whose two sides both hold `leaf`, and the op that
    /// built it: where a contribution was counted twice.
    fn doubling(&self, node: u32, leaf: u32) -> Option<usize> {
        let mut current = node;
        loop {
            let combine = self.combine_node(current)?;
            let (left, right) = (
                self.holds(combine.left, leaf),
                self.holds(combine.right, leaf),
            );
            match (left, right) {
                (true, true) => {
                    let index = (current - self.first_combine) as usize;
                    return self.creators.get(index).copied();
                }
                (true, false) => current = combine.left,
                (false, true) => current = combine.right,
                (false, false) => return None,
            }
        }
    }

    fn combine_node(&self, node: u32) -> Option<Combine> {
        node.checked_sub(self.first_combine)
            .and_then(|index| self.combines.get(index as usize).copied())
    }

    /// Input leaves under `node`, with repetition.
    pub(crate) fn leaves(&self, node: u32) -> u32 {
        match self.combine_node(node) {
            Some(combine) => combine.leaves,
            None => u32::from(node != UNSET),
        }
    }

    /// The `(rank, chunk)` a leaf stands for.
    pub(crate) fn symbol(&self, node: u32) -> Option<(usize, usize)> {
        (node != UNSET && node < self.first_combine && self.input > 0).then(|| {
            let offset = node as usize - 1;
            (offset / self.input, offset % self.input)
        })
    }

    /// Every leaf under `node`, with repetition (call on small trees only).
    fn symbols(&self, node: u32) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        let mut pending = vec![node];
        while let Some(next) = pending.pop() {
            match self.combine_node(next) {
                Some(combine) => pending.extend([combine.left, combine.right]),
                None => found.extend(self.symbol(next)),
            }
        }
        found
    }

    /// A few words for what `node` holds.
    fn describe(&self, node: u32) -> String {
        match (self.symbol(node), self.leaves(node)) {
            (Some((rank, chunk)), _) => format!("gpu {rank}'s input chunk {chunk}"),
            (None, 0) => "nothing".to_owned(),
            (None, leaves) => format!("a reduction of {leaves} chunks"),
        }
    }
}

/// What an output chunk must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expected {
    /// Input chunk `.1` of rank `.0`, as it is.
    Copy(usize, usize),
    /// Every rank's input chunk `.0`, each once, reduced.
    Reduction(usize),
    /// Nothing (a non-root's output of reduce or gather).
    Anything,
}

/// Whether all ranks hold the same bits for a reduction, or only the same terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Agreement {
    /// Every rank's output chunk is the same tree: the same bits on every executor.
    Bitwise,
    /// Every rank holds every contribution once, but some rank folds them in another order:
    /// floating-point outputs may differ in their last bits between ranks.
    TermsOnly {
        /// A rank whose output differs from rank 0's.
        gpu: usize,
        /// The output chunk where it first differs.
        chunk: usize,
    },
}

/// The outcome of evaluating one mode.
pub(crate) struct Evaluation {
    pub(crate) root: Option<usize>,
    pub(crate) agreement: Option<Agreement>,
}

/// Evaluate every op in `order`, then judge every rank's output.
pub(crate) fn evaluate(
    model: &Model,
    order: &Order,
    cells: &Cells,
) -> Result<Evaluation, Violation> {
    let mut nodes = Nodes::new(model.world, cells.input);
    let mut values = vec![UNSET; cells.total()];
    let mut writer: Vec<Option<usize>> = vec![None; cells.total()];
    for rank in 0..model.world {
        for chunk in 0..cells.input {
            values[cells.input_cell(rank, chunk)] = nodes.leaf(rank, chunk);
        }
    }
    let mut messages: Vec<Vec<u32>> = vec![Vec::new(); model.messages.len()];
    let mut produced: Vec<Vec<u32>> = vec![Vec::new(); model.ops.len()];
    let mut overwritten: Vec<Vec<u32>> = vec![Vec::new(); model.ops.len()];
    for &index in &order.topological {
        let op = &model.ops[index];
        let access = access(op, cells);
        let uninitialized = |buffer: Buffer, chunk: usize| {
            Violation::new(
                ViolationKind::UninitializedRead,
                format!(
                    "it reads chunk {buffer}[{chunk}], which holds no input and which no step has written before it"
                ),
            )
            .at(op.at)
            .chunk(buffer, chunk)
            .in_mode(cells.mode)
        };
        let read = |values: &[u32],
                    (buffer, chunks, range): &(
            Buffer,
            std::ops::Range<usize>,
            std::ops::Range<usize>,
        )| {
            let read: Vec<u32> = values[range.clone()].to_vec();
            match read.iter().position(|&value| value == UNSET) {
                Some(index) => Err(uninitialized(*buffer, chunks.start + index)),
                None => Ok(read),
            }
        };
        let source = match &access.reads {
            Some(view) => Some(read(&values, view)?),
            None => None,
        };
        let incoming = op
            .recv_msg
            .map(|message| std::mem::take(&mut messages[message]));
        let fold = |nodes: &mut Nodes, a: &[u32], b: &[u32]| -> Vec<u32> {
            a.iter()
                .zip(b)
                .map(|(&a, &b)| nodes.combine(a, b, index))
                .collect()
        };
        let empty = Vec::new();
        let source = source.as_ref().unwrap_or(&empty);
        let incoming = incoming.as_ref().unwrap_or(&empty);
        let (written, sent): (Option<Vec<u32>>, Option<Vec<u32>>) = match op.kind {
            StepKind::Send => (None, Some(source.clone())),
            StepKind::Recv => (Some(incoming.clone()), None),
            StepKind::RecvCopySend => (Some(incoming.clone()), Some(incoming.clone())),
            StepKind::RecvReduceSend => (None, Some(fold(&mut nodes, source, incoming))),
            StepKind::RecvReduceCopy => (Some(fold(&mut nodes, source, incoming)), None),
            StepKind::RecvReduceCopySend => {
                let result = fold(&mut nodes, source, incoming);
                (Some(result.clone()), Some(result))
            }
            StepKind::Copy => (Some(source.clone()), None),
            StepKind::Reduce => match &access.writes {
                Some(view) => {
                    let old = read(&values, view)?;
                    (Some(fold(&mut nodes, source, &old)), None)
                }
                None => (None, None),
            },
            StepKind::Nop => (None, None),
        };
        if let Some(written) = &written {
            produced[index].extend_from_slice(written);
        } else if let Some(sent) = &sent {
            produced[index].extend_from_slice(sent);
        }
        if let (Some(written), Some((_, _, range))) = (written, &access.writes) {
            for (cell, value) in range.clone().zip(written) {
                overwritten[index].push(values[cell]);
                values[cell] = value;
                writer[cell] = Some(index);
            }
        }
        if let (Some(sent), Some(message)) = (sent, op.send_msg) {
            messages[message] = sent;
        }
    }
    let state = State {
        values,
        writer,
        produced,
        overwritten,
    };
    judge(model, order, cells, &mut nodes, &state)
}

/// The evaluated cells, who wrote each last, what every op produced and what it overwrote.
struct State {
    values: Vec<u32>,
    writer: Vec<Option<usize>>,
    produced: Vec<Vec<u32>>,
    overwritten: Vec<Vec<u32>>,
}

/// Check every rank's output against the collective; infer the root where there is one.
fn judge(
    model: &Model,
    order: &Order,
    cells: &Cells,
    nodes: &mut Nodes,
    state: &State,
) -> Result<Evaluation, Violation> {
    let values = &state.values;
    let world = model.world;
    let block = model.chunks / world.max(1);
    let output = cells.output;
    let value = |rank: usize, chunk: usize| values[cells.output_cell(rank, chunk)];
    // The root: where the data flow puts it. A broadcast or scatter delivers the root's input to
    // rank 0 too; a reduce leaves complete reductions at the root, a gather the right blocks.
    let best = |score: &dyn Fn(usize) -> usize| {
        (0..world)
            .max_by_key(|&rank| (score(rank), std::cmp::Reverse(rank)))
            .unwrap_or(0)
    };
    let root = match model.collective {
        MscclCollective::Broadcast | MscclCollective::Scatter if output > 0 => {
            Some(nodes.symbol(value(0, 0)).map_or(0, |(rank, _)| rank))
        }
        MscclCollective::Reduce => Some(best(&|rank| {
            (0..output)
                .filter(|&chunk| nodes.leaves(value(rank, chunk)) as usize == world)
                .count()
        })),
        MscclCollective::Gather => Some(best(&|rank| {
            let input = cells.input.max(1);
            (0..output)
                .filter(|&chunk| value(rank, chunk) == nodes.leaf(chunk / input, chunk % input))
                .count()
        })),
        _ => None,
    };
    let root_rank = root.unwrap_or(0);
    let mut proved: HashSet<(u32, usize), Mixed> = HashSet::default();
    for rank in 0..world {
        for chunk in 0..output {
            let expected = match model.collective {
                MscclCollective::AllReduce => Expected::Reduction(chunk),
                MscclCollective::ReduceScatter => Expected::Reduction(rank * block + chunk),
                MscclCollective::AllGather => {
                    Expected::Copy(chunk / cells.input.max(1), chunk % cells.input.max(1))
                }
                MscclCollective::AllToAll => {
                    Expected::Copy(chunk / block.max(1), rank * block + chunk % block.max(1))
                }
                MscclCollective::Broadcast => Expected::Copy(root_rank, chunk),
                MscclCollective::Reduce if rank == root_rank => Expected::Reduction(chunk),
                MscclCollective::Gather if rank == root_rank => {
                    Expected::Copy(chunk / cells.input.max(1), chunk % cells.input.max(1))
                }
                MscclCollective::Scatter => Expected::Copy(root_rank, rank * output + chunk),
                _ => Expected::Anything,
            };
            let node = value(rank, chunk);
            let problem = match expected {
                Expected::Anything => None,
                Expected::Copy(source, index) => (node != nodes.leaf(source, index)).then(|| {
                    (
                        ViolationKind::WrongData,
                        format!(
                            "holds {}, but {} needs gpu {source}'s input chunk {index} there",
                            nodes.describe(node),
                            model.collective_label()
                        ),
                        None,
                    )
                }),
                Expected::Reduction(index) => {
                    if proved.contains(&(node, index)) {
                        None
                    } else {
                        let problem = reduction_problem(nodes, node, index, world);
                        if problem.is_none() {
                            proved.insert((node, index));
                        }
                        problem
                    }
                }
            };
            if let Some(problem) = problem {
                return Err(locate(
                    model, order, cells, nodes, state, rank, chunk, node, problem,
                ));
            }
        }
    }
    let agreement = match model.collective {
        MscclCollective::AllReduce => Some(
            (1..world)
                .find_map(|rank| {
                    (0..output)
                        .find(|&chunk| value(rank, chunk) != value(0, chunk))
                        .map(|chunk| Agreement::TermsOnly { gpu: rank, chunk })
                })
                .unwrap_or(Agreement::Bitwise),
        ),
        MscclCollective::ReduceScatter | MscclCollective::Reduce => Some(Agreement::Bitwise),
        _ => None,
    };
    Ok(Evaluation { root, agreement })
}

/// What is wrong with an output chunk: the kind, the sentence, and the contribution at fault
/// (`(rank, chunk)`) for a missing or doubled one.
type Problem = (ViolationKind, String, Option<(usize, usize)>);

/// Name the step to blame for `problem` in rank `rank`'s output chunk `chunk` (holding `node`):
/// for a doubled contribution, the step that built the reduction counting it twice; for a
/// missing one, the first step on the contributing rank that wrote a part of this chunk's
/// reduction over a value holding the contribution (or, failing that, that handled such a
/// part at all); otherwise the step that wrote the output last. The last writer is the other
/// step named.
#[allow(clippy::too_many_arguments)]
fn locate(
    model: &Model,
    order: &Order,
    cells: &Cells,
    nodes: &Nodes,
    state: &State,
    rank: usize,
    chunk: usize,
    node: u32,
    (kind, detail, contribution): Problem,
) -> Violation {
    let writer = state.writer[cells.output_cell(rank, chunk)];
    let culprit = match (kind, contribution) {
        (ViolationKind::DoubledContribution, Some((source, index))) => {
            nodes.doubling(node, nodes.leaf(source, index))
        }
        (ViolationKind::MissingContribution, Some((source, index))) => {
            let parts = nodes.subtree(node);
            let leaf = nodes.leaf(source, index);
            let handles = |op: usize| {
                model.ops[op].gpu == source
                    && state.produced[op].iter().any(|value| parts.contains(value))
            };
            let destroys = |op: usize| {
                handles(op)
                    && state.overwritten[op]
                        .iter()
                        .any(|&old| old != UNSET && nodes.holds(old, leaf))
            };
            let ops = || order.topological.iter().copied();
            ops()
                .find(|&op| destroys(op))
                .or_else(|| ops().find(|&op| handles(op)))
        }
        _ => None,
    };
    let blamed = culprit.or(writer);
    let mut text = format!("gpu {rank}'s output chunk o[{chunk}] {detail}");
    match (culprit, writer) {
        (Some(culprit), Some(writer)) if culprit != writer => text.push_str(&format!(
            "; this step is where it goes wrong ({} wrote the output last)",
            model.ops[writer].at
        )),
        (Some(_), _) => text.push_str("; this step is where it goes wrong"),
        (None, Some(_)) => text.push_str("; this step wrote it last"),
        (None, None) => text.push_str("; no step writes it"),
    }
    let mut violation = Violation::new(kind, text)
        .on_gpu(rank)
        .chunk(Buffer::Output, chunk)
        .in_mode(cells.mode);
    if let Some(op) = blamed {
        violation = violation.at(model.ops[op].at);
    }
    if let (Some(culprit), Some(writer)) = (culprit, writer) {
        if culprit != writer {
            violation = violation.other(model.ops[writer].at);
        }
    }
    violation
}

/// What is wrong with `node` as the reduction of every rank's input chunk `index`.
fn reduction_problem(nodes: &Nodes, node: u32, index: usize, world: usize) -> Option<Problem> {
    let leaves = nodes.leaves(node) as usize;
    if leaves == 0 {
        return Some((
            ViolationKind::WrongData,
            format!("holds nothing, but needs the reduction of every gpu's input chunk {index}"),
            None,
        ));
    }
    if leaves > 2 * world + 2 {
        return Some((
            ViolationKind::DoubledContribution,
            format!("holds {leaves} contributions, more than one from each of the {world} gpus"),
            None,
        ));
    }
    let found = nodes.symbols(node);
    let mut counts = vec![0usize; world];
    let mut foreign = None;
    for &(rank, chunk) in &found {
        if chunk == index {
            if let Some(count) = counts.get_mut(rank) {
                *count += 1;
            }
        } else if foreign.is_none() {
            foreign = Some((rank, chunk));
        }
    }
    if let Some(rank) = counts.iter().position(|&count| count > 1) {
        return Some((
            ViolationKind::DoubledContribution,
            format!(
                "holds gpu {rank}'s input chunk {index} {} times in its reduction",
                counts[rank]
            ),
            Some((rank, index)),
        ));
    }
    if let Some((rank, chunk)) = foreign {
        return Some((
            ViolationKind::WrongData,
            format!(
                "reduces gpu {rank}'s input chunk {chunk} into what must be the reduction of chunk {index}"
            ),
            None,
        ));
    }
    if let Some(rank) = counts.iter().position(|&count| count == 0) {
        return Some((
            ViolationKind::MissingContribution,
            format!(
                "lacks gpu {rank}'s input chunk {index}: it holds {} of the {world} contributions",
                counts.iter().filter(|&&count| count > 0).count()
            ),
            Some((rank, index)),
        ));
    }
    None
}

impl Model {
    /// "an all-reduce" and the like, for messages.
    pub(crate) fn collective_label(&self) -> &'static str {
        match self.collective {
            MscclCollective::AllReduce => "an all-reduce",
            MscclCollective::AllGather => "an all-gather",
            MscclCollective::ReduceScatter => "a reduce-scatter",
            MscclCollective::AllToAll => "an all-to-all",
            MscclCollective::Broadcast => "a broadcast",
            MscclCollective::Reduce => "a reduce",
            MscclCollective::Gather => "a gather",
            MscclCollective::Scatter => "a scatter",
            MscclCollective::Custom | MscclCollective::PointToPoint => "this collective",
        }
    }
}
