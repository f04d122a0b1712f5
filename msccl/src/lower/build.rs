//! Instructions to ruCCL steps.
//!
//! Every instruction becomes *micro transfers*, each one ruCCL transfer of `cnt` chunks that
//! overwrites or folds:
//!
//! | instruction              | micro transfers                                                   |
//! |--------------------------|-------------------------------------------------------------------|
//! | `s` → `r`/`rcs`          | sender's `src` → receiver's `dst`, overwriting                     |
//! | `s` → `rrc`/`rrcs`       | `src` → `dst` locally (if they differ), then sender's data folded into `dst` |
//! | `s` → `rrs`              | `src` → a temporary chunk locally, then the sender's data folded into it; the temporary is what `rrs` sends on |
//! | `rcs`, `rrcs` sending on | from `dst`, which they just wrote                                  |
//! | `cpy`                    | `src` → `dst` locally (nothing if they are the same chunks)        |
//! | `re`                     | `src` folded into `dst` locally                                    |
//!
//! A message's transfer reads the sender's chunks where the send reads them and writes the
//! receiver's where the receive writes them: the instructions are walked in a happens-before
//! order, and every chunk's accesses give the edges between micro transfers — a write after
//! the last write and the reads since (strict: a later step; a read before a write may share
//! the write's step, since a step reads the state from before it), a read after the last
//! write. A message whose source is rewritten before its receiver runs would make a cycle; it
//! is *staged* instead: sent at the send into a fresh temporary chunk of the receiver, then
//! copied or folded locally at the receive. Cycles of reads-before-writes alone (two ranks
//! swapping chunks) are one step, as in ruCCL's own direct plans.
//!
//! Two shortcuts save local copies: an `rrs` whose source is overwritten before anything
//! reads it again folds the received data into the source itself; a receive whose only reader
//! is the next `re`, taking it whole as its source and leaving it dead, lands in the `re`'s
//! destination directly, folding (MSCCLang's "receive into scratch, then reduce" becomes one
//! fold, which also gives both ranks of a pairwise exchange the same ordered tree).
//!
//! Steps are the levels of the graph: the earliest level after every predecessor, overwriting
//! transfers on even levels and folding ones on odd levels (a ruCCL step does one or the
//! other); empty levels dropped.

use super::Elements;
use crate::check::{Cells, Model, Order};
use crate::error::MscclError;
use crate::program::StepKind;
use ruccl_core::{Step, Transfer};
use std::ops::Range;

/// One ruCCL transfer of whole chunks, in cells local to its ranks.
#[derive(Clone, Debug)]
pub(crate) struct Micro {
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// The first source cell on `from`.
    pub(crate) src: usize,
    /// The first target cell on `to`.
    pub(crate) dst: usize,
    /// Elements each chunk carries.
    pub(crate) lens: Vec<usize>,
    pub(crate) combine: bool,
}

/// The lowering: steps, buffer length, and the micro transfers of each step for the fold check.
pub(crate) struct Built {
    pub(crate) steps: Vec<Step>,
    pub(crate) buffer_len: usize,
    pub(crate) staged: usize,
    pub(crate) micros: Vec<Micro>,
    /// The micro transfers of each step, in step order.
    pub(crate) levels: Vec<Vec<usize>>,
    /// Local cells of every rank, temporaries included.
    pub(crate) cells: Vec<usize>,
}

/// Lower the model's instructions in `cells`' layout.
pub(crate) fn build(
    model: &Model,
    order: &Order,
    cells: &Cells,
    elements: &Elements,
    feed: bool,
    stage_all: bool,
) -> Result<Built, MscclError> {
    let mut staged = vec![stage_all; model.messages.len()];
    for _round in 0..4 {
        let graph = Graph::build(model, order, cells, elements, &staged, feed);
        let components = graph.components();
        let mut restage = false;
        for component in &components.bad {
            for &micro in component {
                if let Some(message) = graph.message_of[micro] {
                    if !staged[message] {
                        staged[message] = true;
                        restage = true;
                    }
                }
            }
        }
        if components.bad.is_empty() {
            return Ok(graph.emit(cells, elements, &components, &staged));
        }
        if !restage {
            break;
        }
    }
    Err(MscclError::Inexpressible {
        reason: "the transfers' dependences stay cyclic even with every message staged".to_owned(),
    })
}

/// Who accessed a cell since its last write.
#[derive(Clone, Default)]
struct Access {
    writer: Option<u32>,
    readers: Vec<u32>,
}

/// Micro transfers and their dependence edges `(from, to, strict)`.
struct Graph {
    micros: Vec<Micro>,
    edges: Vec<(u32, u32, bool)>,
    /// The message a micro transfer carries directly, if any.
    message_of: Vec<Option<usize>>,
    /// Local cells per rank, temporaries included.
    cells: Vec<usize>,
}

/// The builder's state while walking the instructions.
struct Walk<'a> {
    cells: &'a Cells,
    elements: &'a Elements,
    graph: Graph,
    access: Vec<Vec<Access>>,
    lens: Vec<Vec<Option<usize>>>,
    /// A direct message's micro transfer, waiting for its receive.
    pending: Vec<Option<usize>>,
    /// A staged message's temporary cells on its receiver.
    staging: Vec<Option<usize>>,
}

impl Walk<'_> {
    fn capacity(&self, rank: usize, cell: usize) -> usize {
        self.elements.cell(self.cells.region(rank), cell).len()
    }

    fn len_of(&self, rank: usize, cell: usize) -> usize {
        self.lens[rank][cell].unwrap_or_else(|| self.capacity(rank, cell))
    }

    fn allocate(&mut self, rank: usize, count: usize) -> usize {
        let start = self.access[rank].len();
        self.access[rank].resize(start + count, Access::default());
        self.lens[rank].resize(start + count, None);
        self.graph.cells[rank] = start + count;
        start
    }

    fn read(&mut self, micro: usize, rank: usize, cells: Range<usize>) {
        let id = micro as u32;
        for cell in cells {
            let access = &mut self.access[rank][cell];
            if let Some(writer) = access.writer {
                if writer != id {
                    self.graph.edges.push((writer, id, true));
                }
            }
            access.readers.push(id);
        }
    }

    fn write(&mut self, micro: usize, rank: usize, cells: Range<usize>) {
        let id = micro as u32;
        for cell in cells {
            let access = &mut self.access[rank][cell];
            if let Some(writer) = access.writer {
                if writer != id {
                    self.graph.edges.push((writer, id, true));
                }
            }
            for reader in access.readers.drain(..) {
                if reader != id {
                    self.graph.edges.push((reader, id, false));
                }
            }
            access.writer = Some(id);
        }
    }

    fn push(&mut self, micro: Micro, message: Option<usize>) -> usize {
        self.graph.micros.push(micro);
        self.graph.message_of.push(message);
        self.graph.micros.len() - 1
    }

    /// Settle a micro transfer's target: lengths capped by what the target holds, reads and
    /// writes registered, lengths of overwritten cells updated.
    fn land(&mut self, micro: usize, dst: usize, combine: bool) {
        let (to, count) = {
            let micro = &self.graph.micros[micro];
            (micro.to, micro.lens.len())
        };
        let mut lens = self.graph.micros[micro].lens.clone();
        for (index, len) in lens.iter_mut().enumerate() {
            let cell = dst + index;
            *len = (*len).min(self.capacity(to, cell));
            if combine {
                *len = (*len).min(self.len_of(to, cell));
            }
        }
        let target = &mut self.graph.micros[micro];
        target.dst = dst;
        target.combine = combine;
        target.lens = lens.clone();
        self.write(micro, to, dst..dst + count);
        if !combine {
            for (index, len) in lens.into_iter().enumerate() {
                self.lens[to][dst + index] = Some(len);
            }
        }
    }

    /// A local transfer (or fold) of `count` cells on `rank`.
    fn local(&mut self, rank: usize, src: usize, dst: usize, count: usize, combine: bool) {
        let lens = (src..src + count)
            .map(|cell| self.len_of(rank, cell))
            .collect();
        let micro = self.push(
            Micro {
                from: rank,
                to: rank,
                src,
                dst,
                lens,
                combine,
            },
            None,
        );
        self.read(micro, rank, src..src + count);
        self.land(micro, dst, combine);
    }

    /// The transfer of `message`, read from `src` on `rank` now.
    fn send(
        &mut self,
        message: usize,
        rank: usize,
        to: usize,
        src: usize,
        count: usize,
        staged: bool,
    ) {
        let lens: Vec<usize> = (src..src + count)
            .map(|cell| self.len_of(rank, cell))
            .collect();
        let direct = (!staged).then_some(message);
        let micro = self.push(
            Micro {
                from: rank,
                to,
                src,
                dst: 0,
                lens,
                combine: false,
            },
            direct,
        );
        self.read(micro, rank, src..src + count);
        if staged {
            let cells = self.allocate(to, count);
            self.land(micro, cells, false);
            self.staging[message] = Some(cells);
        } else {
            self.pending[message] = Some(micro);
        }
    }

    /// The receive of `message` into `dst` on `rank`, overwriting or folding.
    fn receive(&mut self, message: usize, rank: usize, dst: usize, count: usize, combine: bool) {
        if let Some(cells) = self.staging[message] {
            self.local(rank, cells, dst, count, combine);
        } else if let Some(micro) = self.pending[message].take() {
            self.land(micro, dst, combine);
        }
    }
}

/// What the instructions after an op do with its chunks: found by one backward walk.
struct Lookahead {
    /// The op's source chunks are overwritten before anything reads them again (or, in
    /// scratch, never touched again): the op may fold into them in place.
    src_dead: Vec<bool>,
    /// The `re` that is the next and only reader of the op's destination chunks, taking them
    /// whole as its source, and after which they are dead: a receive then lands in that `re`'s
    /// destination directly.
    feeds: Vec<Option<usize>>,
}

/// How an op first touches a cell.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Touch {
    Read,
    Overwrite,
}

impl Lookahead {
    fn new(model: &Model, order: &Order, cells: &Cells) -> Lookahead {
        let count = model.ops.len();
        let mut next: Vec<Vec<Option<(usize, Touch)>>> = (0..model.world)
            .map(|rank| vec![None; cells.rank_len(rank)])
            .collect();
        let mut src_dead = vec![false; count];
        let mut feeds = vec![None; count];
        for &index in order.topological.iter().rev() {
            let op = &model.ops[index];
            if op.count == 0 {
                continue;
            }
            let rank = op.gpu;
            let region = cells.region(rank);
            let range = |offset: i64, buffer| {
                let start = usize::try_from(offset).unwrap_or(0);
                cells.local(rank, buffer, start..start + op.count)
            };
            let src = range(op.src.offset, op.src.buffer);
            let dst = range(op.dst.offset, op.dst.buffer);
            let next = &mut next[rank];
            if op.kind.reads_src() {
                src_dead[index] = src.clone().all(|cell| match next[cell] {
                    Some((_, touch)) => touch == Touch::Overwrite,
                    None => cell >= region,
                });
            }
            if op.kind == StepKind::Recv {
                let first = next[dst.start].map(|(reader, _)| reader);
                feeds[index] = first.filter(|&reader| {
                    let consumer = &model.ops[reader];
                    consumer.kind == StepKind::Reduce
                        && consumer.src.buffer == op.dst.buffer
                        && consumer.src.offset == op.dst.offset
                        && consumer.count == op.count
                        && dst
                            .clone()
                            .all(|cell| next[cell] == Some((reader, Touch::Read)))
                });
            }
            let dst_touch = match op.kind {
                StepKind::Reduce => Some(Touch::Read),
                StepKind::RecvReduceCopy | StepKind::RecvReduceCopySend if src == dst => {
                    Some(Touch::Read)
                }
                StepKind::Copy if src == dst => None,
                kind if kind.writes_dst() => Some(Touch::Overwrite),
                _ => None,
            };
            if let Some(touch) = dst_touch {
                for cell in dst {
                    next[cell] = Some((index, touch));
                }
            }
            if op.kind.reads_src() {
                for cell in src {
                    next[cell] = Some((index, Touch::Read));
                }
            }
        }
        // A feed is taken only where the `re` leaves its source dead.
        for feed in &mut feeds {
            if feed.is_some_and(|reader| !src_dead[reader]) {
                *feed = None;
            }
        }
        Lookahead { src_dead, feeds }
    }
}

impl Graph {
    fn build(
        model: &Model,
        order: &Order,
        cells: &Cells,
        elements: &Elements,
        staged: &[bool],
        feed: bool,
    ) -> Graph {
        let world = model.world;
        let counts: Vec<usize> = (0..world).map(|rank| cells.rank_len(rank)).collect();
        let mut walk = Walk {
            cells,
            elements,
            graph: Graph {
                micros: Vec::new(),
                edges: Vec::new(),
                message_of: Vec::new(),
                cells: counts.clone(),
            },
            access: counts
                .iter()
                .map(|&count| vec![Access::default(); count])
                .collect(),
            lens: counts.iter().map(|&count| vec![None; count]).collect(),
            pending: vec![None; model.messages.len()],
            staging: vec![None; model.messages.len()],
        };
        let mut lookahead = Lookahead::new(model, order, cells);
        if !feed {
            lookahead.feeds.fill(None);
        }
        // The message each `re` takes straight from a receive it is fed by.
        let mut fed: Vec<Option<usize>> = vec![None; model.ops.len()];
        // Input cells hold their chunk's elements from the start.
        for rank in 0..world {
            let input = cells.local(rank, crate::Buffer::Input, 0..cells.input);
            for cell in input {
                let len = walk.capacity(rank, cell);
                walk.lens[rank][cell] = Some(len);
            }
        }
        for &index in &order.topological {
            let op = &model.ops[index];
            let count = op.count;
            if count == 0 {
                continue;
            }
            let rank = op.gpu;
            let chunks = |offset: i64| {
                let start = usize::try_from(offset).unwrap_or(0);
                start..start + count
            };
            let src = cells
                .local(rank, op.src.buffer, chunks(op.src.offset))
                .start;
            let dst = cells
                .local(rank, op.dst.buffer, chunks(op.dst.offset))
                .start;
            let receiver = |message: usize| model.ops[model.messages[message].recv].gpu;
            let incoming = op.recv_msg;
            let outgoing = op.send_msg;
            // Where an instruction that sends on finds what it sends.
            let mut sent_from = src;
            match op.kind {
                StepKind::Send | StepKind::Nop => {}
                StepKind::Recv if lookahead.feeds[index].is_some() => {
                    if let (Some(reader), Some(message)) = (lookahead.feeds[index], incoming) {
                        fed[reader] = Some(message);
                    }
                }
                StepKind::Recv | StepKind::RecvCopySend => {
                    if let Some(message) = incoming {
                        walk.receive(message, rank, dst, count, false);
                    }
                    sent_from = dst;
                }
                StepKind::RecvReduceCopy | StepKind::RecvReduceCopySend => {
                    if src != dst {
                        walk.local(rank, src, dst, count, false);
                    }
                    if let Some(message) = incoming {
                        walk.receive(message, rank, dst, count, true);
                    }
                    sent_from = dst;
                }
                StepKind::RecvReduceSend => {
                    // Fold into the source itself when nothing reads it again, else into a
                    // temporary copy of it.
                    let target = if lookahead.src_dead[index] {
                        src
                    } else {
                        let temporary = walk.allocate(rank, count);
                        walk.local(rank, src, temporary, count, false);
                        temporary
                    };
                    if let Some(message) = incoming {
                        walk.receive(message, rank, target, count, true);
                    }
                    sent_from = target;
                }
                StepKind::Copy => {
                    if src != dst {
                        walk.local(rank, src, dst, count, false);
                    }
                }
                StepKind::Reduce => match fed[index] {
                    Some(message) => walk.receive(message, rank, dst, count, true),
                    None => walk.local(rank, src, dst, count, true),
                },
            }
            if let Some(message) = outgoing {
                let to = receiver(message);
                walk.send(message, rank, to, sent_from, count, staged[message]);
            }
        }
        walk.graph
    }

    /// Strongly connected components, and those that cannot share one step.
    fn components(&self) -> Components {
        let count = self.micros.len();
        let mut starts = vec![0usize; count + 1];
        for &(from, _, _) in &self.edges {
            starts[from as usize + 1] += 1;
        }
        for index in 0..count {
            starts[index + 1] += starts[index];
        }
        let mut fill = starts.clone();
        let mut successors = vec![0u32; self.edges.len()];
        for &(from, to, _) in &self.edges {
            successors[fill[from as usize]] = to;
            fill[from as usize] += 1;
        }
        let component = tarjan(count, &starts, &successors);
        let total = component.iter().map(|&c| c + 1).max().unwrap_or(0);
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); total];
        for (micro, &c) in component.iter().enumerate() {
            members[c].push(micro);
        }
        let mut bad_flag = vec![false; total];
        for &(from, to, strict) in &self.edges {
            let (a, b) = (component[from as usize], component[to as usize]);
            if a == b && strict {
                bad_flag[a] = true;
            }
        }
        for (c, list) in members.iter().enumerate() {
            if list.len() > 1 {
                let combine = self.micros[list[0]].combine;
                if list
                    .iter()
                    .any(|&micro| self.micros[micro].combine != combine)
                {
                    bad_flag[c] = true;
                }
            }
        }
        let bad = members
            .iter()
            .enumerate()
            .filter(|(c, _)| bad_flag[*c])
            .map(|(_, list)| list.clone())
            .collect();
        Components {
            component,
            members,
            bad,
        }
    }

    /// Levels, steps, transfers.
    fn emit(
        self,
        cells: &Cells,
        elements: &Elements,
        components: &Components,
        staged: &[bool],
    ) -> Built {
        let total = components.members.len();
        // Tarjan numbers components in reverse topological order: the last found comes first.
        let mut incoming: Vec<Vec<(usize, bool)>> = vec![Vec::new(); total];
        for &(from, to, strict) in &self.edges {
            let (a, b) = (
                components.component[from as usize],
                components.component[to as usize],
            );
            if a != b {
                incoming[b].push((a, strict));
            }
        }
        let mut level = vec![0usize; total];
        for c in (0..total).rev() {
            let bound = incoming[c]
                .iter()
                .map(|&(a, strict)| level[a] + usize::from(strict))
                .max()
                .unwrap_or(0);
            let combine = components.members[c]
                .first()
                .is_some_and(|&micro| self.micros[micro].combine);
            let parity = usize::from(combine);
            level[c] = if bound % 2 == parity {
                bound
            } else {
                bound + 1
            };
        }
        let levels_total = level.iter().map(|&l| l + 1).max().unwrap_or(0);
        let mut by_level: Vec<Vec<usize>> = vec![Vec::new(); levels_total];
        for (micro, &c) in components.component.iter().enumerate() {
            by_level[level[c]].push(micro);
        }
        let mut steps = Vec::new();
        let mut levels = Vec::new();
        for (index, micros) in by_level.into_iter().enumerate() {
            let mut transfers: Vec<Transfer> = Vec::new();
            for &micro in &micros {
                let micro = &self.micros[micro];
                let (from_region, to_region) = (cells.region(micro.from), cells.region(micro.to));
                for (chunk, &len) in micro.lens.iter().enumerate() {
                    if len == 0 {
                        continue;
                    }
                    let source = elements.cell(from_region, micro.src + chunk).start;
                    let target = elements.cell(to_region, micro.dst + chunk).start;
                    transfers.push(Transfer {
                        from: micro.from,
                        to: micro.to,
                        range: source..source + len,
                        at: target,
                    });
                }
            }
            if transfers.is_empty() {
                continue;
            }
            steps.push(Step {
                combine: index % 2 == 1,
                transfers: merge(transfers),
            });
            levels.push(micros);
        }
        let buffer_len = (0..self.cells.len())
            .map(|rank| elements.buffer_len(cells.region(rank), self.cells[rank]))
            .max()
            .unwrap_or(0);
        Built {
            steps,
            buffer_len,
            staged: staged.iter().filter(|&&staged| staged).count(),
            micros: self.micros,
            levels,
            cells: self.cells,
        }
    }
}

/// Components: each micro transfer's, every component's members, and the ones that cannot be
/// one step.
struct Components {
    component: Vec<usize>,
    members: Vec<Vec<usize>>,
    bad: Vec<Vec<usize>>,
}

/// Merge transfers that continue each other (same ranks, contiguous source and target).
fn merge(mut transfers: Vec<Transfer>) -> Vec<Transfer> {
    transfers.sort_unstable_by_key(|transfer| (transfer.from, transfer.to, transfer.range.start));
    let mut merged: Vec<Transfer> = Vec::with_capacity(transfers.len());
    for transfer in transfers {
        if let Some(last) = merged.last_mut() {
            if last.from == transfer.from
                && last.to == transfer.to
                && last.range.end == transfer.range.start
                && last.at + last.range.len() == transfer.at
            {
                last.range.end = transfer.range.end;
                continue;
            }
        }
        merged.push(transfer);
    }
    merged
}

/// Tarjan's strongly connected components, iteratively: the component of every node, numbered
/// in reverse topological order of the condensation.
fn tarjan(count: usize, starts: &[usize], successors: &[u32]) -> Vec<usize> {
    const NONE: usize = usize::MAX;
    let mut index = vec![NONE; count];
    let mut low = vec![0usize; count];
    let mut on_stack = vec![false; count];
    let mut stack = Vec::new();
    let mut component = vec![NONE; count];
    let mut next_index = 0;
    let mut next_component = 0;
    let mut frames: Vec<(usize, usize)> = Vec::new();
    for root in 0..count {
        if index[root] != NONE {
            continue;
        }
        frames.push((root, starts[root]));
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (node, ref mut edge)) = frames.last_mut() {
            if *edge < starts[node + 1] {
                let next = successors[*edge] as usize;
                *edge += 1;
                if index[next] == NONE {
                    index[next] = next_index;
                    low[next] = next_index;
                    next_index += 1;
                    stack.push(next);
                    on_stack[next] = true;
                    frames.push((next, starts[next]));
                } else if on_stack[next] {
                    low[node] = low[node].min(index[next]);
                }
            } else {
                frames.pop();
                if let Some(&(parent, _)) = frames.last() {
                    low[parent] = low[parent].min(low[node]);
                }
                if low[node] == index[node] {
                    while let Some(member) = stack.pop() {
                        on_stack[member] = false;
                        component[member] = next_component;
                        if member == node {
                            break;
                        }
                    }
                    next_component += 1;
                }
            }
        }
    }
    component
}
