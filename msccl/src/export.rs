//! [`export`]: a verified ruCCL plan as an MSCCL `<algo>`.
//!
//! # Chunks
//! MSCCL cuts every buffer into equal chunks; the export uses the coarsest grid on which every
//! transfer, placement and output of the plan starts and ends (the greatest common divisor of
//! all of them). A plan built for an input length that is a multiple of what its algorithm
//! cuts it into (a multiple of `W` for ring, of `W²` for ring all-reduce's blocks, …) gives few
//! chunks; MSCCL's executors then scale the chunks with the message size.
//!
//! # Buffers
//! Where the plan's layout is NCCL's in-place layout of its collective (every built-in plan's
//! is), the program is in place: the region is MSCCL's input or output buffer (whichever is
//! larger; they alias), anything beyond it is scratch. Otherwise the whole working buffer
//! lives in scratch, out of place: one copy brings the input in, one copy takes the output
//! out.
//!
//! # Steps
//! Each ruCCL step becomes, on every rank: copies setting aside local sources that the step
//! overwrites; the sends; then the writes. A transfer between ranks is a send and a receive
//! (`s`, `r`) on threadblocks of their own per peer and lane (one lane per transfer between the
//! pair in a step, each lane its own channel), so every connection has one sending and one
//! receiving threadblock and sends precede receives in every threadblock: one global order
//! (step by step, reads before writes) runs without deadlock whatever the buffering. A fold
//! keeps ruCCL's order: one sender is an in-place `rrc`; several are folded in the contract's
//! order (senders below, own value, local value, senders above) into an accumulator — senders
//! below the receiver through scratch slots and `re`, senders above by `rrc` — then copied
//! over the target. Every read and write is tracked per chunk, and a step waits (`depid`, with
//! `nop`s for more than one wait) for exactly the steps of other threadblocks it depends on.

use crate::program::{Buffer, StepKind};
use ruccl_core::{Collective, Plan, Step};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;

/// The most chunks one MSCCL step moves (`cnt` < 72 in the executors).
const MAX_COUNT: usize = 71;

/// Threadblocks of one channel the executors allow per rank.
const PER_CHANNEL: usize = 32;

/// An MSCCL XML algorithm that computes what `plan` computes, for its collective, world and
/// input length (and, MSCCL scaling chunks with the message, for any multiple of it).
///
/// ```
/// use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation};
///
/// let plan = Plan::new(Collective::AllReduce(ReduceOperation::Sum), Algorithm::Ring, 4, 16)?;
/// let xml = ruccl_msccl::export(&plan);
/// let program = ruccl_msccl::parse(&xml).expect("well-formed");
/// let report = program.check().expect("the exported ring is correct");
/// assert_eq!(report.world, 4);
/// let again = Plan::from_parts(program.lower(16).expect("lowers")).expect("verified");
/// assert_eq!(again.collective(), plan.collective());
/// # Ok::<(), ruccl_core::NativeCollectiveError>(())
/// ```
pub fn export(plan: &Plan) -> String {
    let grid = Grid::new(plan);
    let mut program = Exporter::new(plan, &grid);
    program.run(plan);
    program.render(plan, &grid)
}

/// The chunk grid and where chunks live.
struct Grid {
    /// Elements per chunk (0 for an empty plan: then every count is 0).
    size: usize,
    /// Chunks of the working buffer.
    buffer: usize,
    /// In place: chunks of the region (MSCCL's larger buffer); `None`: out of place.
    region: Option<usize>,
    /// The MSCCL buffer the region is addressed through, in place.
    region_buffer: Buffer,
    /// Chunks of MSCCL's input and output buffers.
    input: usize,
    output: usize,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Grid {
    fn new(plan: &Plan) -> Grid {
        let world = plan.world();
        let n = plan.input_len();
        let mut size = 0;
        let mut add = |value: usize| size = gcd(size, value);
        add(n);
        add(plan.buffer_len());
        for &placement in plan.placements() {
            add(placement);
        }
        for output in plan.outputs() {
            add(output.start);
            add(output.end);
        }
        for step in plan.steps() {
            for transfer in &step.transfers {
                add(transfer.range.start);
                add(transfer.range.end);
                add(transfer.at);
            }
        }
        let chunks = |elements: usize| elements.checked_div(size).unwrap_or(0);
        let collective = plan.collective();
        let output_len = collective.output_len(world, n).unwrap_or(0);
        let region_len = n.max(output_len);
        let in_place = (0..world).all(|rank| {
            let (placement, output) = in_place_layout(collective, world, n, rank);
            let expected_output = match collective {
                Collective::Reduce { root, .. } | Collective::Gather { root } if rank != root => {
                    plan.output(rank).is_empty()
                }
                _ => plan.output(rank) == output,
            };
            plan.placement(rank) == placement && expected_output
        }) && plan.buffer_len() >= region_len;
        let region_buffer = if output_len > n {
            Buffer::Output
        } else {
            Buffer::Input
        };
        Grid {
            size,
            buffer: chunks(plan.buffer_len()),
            region: in_place.then(|| chunks(region_len)),
            region_buffer,
            input: chunks(n),
            output: chunks(output_len),
        }
    }
}

/// NCCL's in-place layout of `collective`: where rank `rank`'s input starts and its output.
fn in_place_layout(
    collective: Collective,
    world: usize,
    n: usize,
    rank: usize,
) -> (usize, Range<usize>) {
    let block = n.checked_div(world).unwrap_or(0);
    match collective {
        Collective::AllGather | Collective::Gather { .. } => (rank * n, 0..world * n),
        Collective::ReduceScatter(_) | Collective::Scatter { .. } => {
            (0, rank * block..(rank + 1) * block)
        }
        _ => (0, 0..n),
    }
}

/// One step of an exported threadblock.
#[derive(Clone)]
struct Instruction {
    kind: StepKind,
    src: (Buffer, usize),
    dst: (Buffer, usize),
    count: usize,
    depid: Option<(usize, usize)>,
    hasdep: bool,
}

/// One exported threadblock.
struct Block {
    send: Option<usize>,
    recv: Option<usize>,
    channel: usize,
    steps: Vec<Instruction>,
}

/// Who touched a chunk since its last write: `(threadblock, step)`.
#[derive(Clone, Default)]
struct Access {
    writer: Option<(usize, usize)>,
    readers: Vec<(usize, usize)>,
}

/// One rank's exported threadblocks and chunk accesses.
struct Rank {
    blocks: Vec<Block>,
    /// The threadblock of `(peer, lane)`.
    links: BTreeMap<(usize, usize), usize>,
    local: Option<usize>,
    access: Vec<Access>,
}

struct Exporter {
    world: usize,
    /// Elements per chunk.
    size: usize,
    ranks: Vec<Rank>,
    /// Working-buffer chunks; temporaries follow.
    base: usize,
    /// Temporaries handed out on each rank in the current step.
    temporaries: Vec<usize>,
    /// The most temporaries any step used.
    most: usize,
    /// Channel groups: `⌈(W - 1) / 32⌉`.
    groups: usize,
    region: Option<usize>,
    region_buffer: Buffer,
}

impl Exporter {
    fn new(plan: &Plan, grid: &Grid) -> Exporter {
        let world = plan.world();
        Exporter {
            world,
            size: grid.size,
            ranks: (0..world)
                .map(|_| Rank {
                    blocks: Vec::new(),
                    links: BTreeMap::new(),
                    local: None,
                    access: vec![Access::default(); grid.buffer],
                })
                .collect(),
            base: grid.buffer,
            temporaries: vec![0; world],
            most: 0,
            groups: world.saturating_sub(1).div_ceil(PER_CHANNEL).max(1),
            region: grid.region,
            region_buffer: grid.region_buffer,
        }
    }

    fn locate(&self, chunk: usize) -> (Buffer, usize) {
        match self.region {
            Some(region) if chunk < region => (self.region_buffer, chunk),
            Some(region) => (Buffer::Scratch, chunk - region),
            None => (Buffer::Scratch, chunk),
        }
    }

    /// `count` temporary chunks of `rank` for this step.
    fn temporary(&mut self, rank: usize, count: usize) -> usize {
        let start = self.base + self.temporaries[rank];
        self.temporaries[rank] += count;
        self.most = self.most.max(self.temporaries[rank]);
        let access = &mut self.ranks[rank].access;
        if access.len() < start + count {
            access.resize(start + count, Access::default());
        }
        start
    }

    fn link(&mut self, rank: usize, peer: usize, lane: usize) -> usize {
        let groups = self.groups;
        let state = &mut self.ranks[rank];
        if let Some(&block) = state.links.get(&(peer, lane)) {
            return block;
        }
        let block = state.blocks.len();
        state.blocks.push(Block {
            send: Some(peer),
            recv: Some(peer),
            channel: lane * groups + (rank + peer) % groups,
            steps: Vec::new(),
        });
        state.links.insert((peer, lane), block);
        block
    }

    fn local(&mut self, rank: usize) -> usize {
        let state = &mut self.ranks[rank];
        if let Some(block) = state.local {
            return block;
        }
        let block = state.blocks.len();
        state.blocks.push(Block {
            send: None,
            recv: None,
            channel: 0,
            steps: Vec::new(),
        });
        state.local = Some(block);
        block
    }

    /// Append an instruction to `block` of `rank`, waiting for every other threadblock's step
    /// it depends on through the chunks it reads (`reads`) and writes (`writes`).
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        rank: usize,
        block: usize,
        kind: StepKind,
        src: usize,
        dst: usize,
        count: usize,
        reads: Range<usize>,
        writes: Range<usize>,
    ) {
        let state = &mut self.ranks[rank];
        let mut waits: BTreeMap<usize, usize> = BTreeMap::new();
        let mut wait = |(other, step): (usize, usize)| {
            if other != block {
                let entry = waits.entry(other).or_insert(step);
                *entry = (*entry).max(step);
            }
        };
        for chunk in reads.clone() {
            if let Some(writer) = state.access[chunk].writer {
                wait(writer);
            }
        }
        for chunk in writes.clone() {
            let access = &state.access[chunk];
            if let Some(writer) = access.writer {
                wait(writer);
            }
            for &reader in &access.readers {
                wait(reader);
            }
        }
        let waits: Vec<(usize, usize)> = waits.into_iter().collect();
        for &(other, step) in &waits {
            state.blocks[other].steps[step].hasdep = true;
        }
        let (own, extra) = waits
            .split_last()
            .map_or((None, &[][..]), |(last, rest)| (Some(*last), rest));
        for &wait in extra {
            state.blocks[block].steps.push(Instruction {
                kind: StepKind::Nop,
                src: (Buffer::Input, 0),
                dst: (Buffer::Output, 0),
                count: 0,
                depid: Some(wait),
                hasdep: false,
            });
        }
        let (src, dst) = (self.locate(src), self.locate(dst));
        let state = &mut self.ranks[rank];
        let position = state.blocks[block].steps.len();
        state.blocks[block].steps.push(Instruction {
            kind,
            src,
            dst,
            count,
            depid: own,
            hasdep: false,
        });
        for chunk in reads {
            state.access[chunk].readers.push((block, position));
        }
        for chunk in writes {
            let access = &mut state.access[chunk];
            access.readers.clear();
            access.writer = Some((block, position));
        }
    }

    fn run(&mut self, plan: &Plan) {
        let size = self.size;
        let chunks = |range: &Range<usize>| match size {
            0 => 0..0,
            size => range.start / size..range.end / size,
        };
        if self.region.is_none() {
            // Out of place: the input comes into the working buffer first.
            for rank in 0..self.world {
                let placement = plan.placement(rank);
                let input = chunks(&(placement..placement + plan.input_len()));
                let block = self.local(rank);
                self.copy_in(rank, block, input);
            }
        }
        for step in plan.steps() {
            self.temporaries.fill(0);
            self.step(step, &chunks);
        }
        if self.region.is_none() {
            for rank in 0..self.world {
                let output = chunks(&plan.output(rank));
                let block = self.local(rank);
                self.copy_out(rank, block, output);
            }
        }
    }

    /// `cpy i[..] → s[input]` in pieces of at most [`MAX_COUNT`].
    fn copy_in(&mut self, rank: usize, block: usize, input: Range<usize>) {
        for (offset, count) in pieces(input.len()) {
            let to = input.start + offset;
            let state = &mut self.ranks[rank];
            let position = state.blocks[block].steps.len();
            state.blocks[block].steps.push(Instruction {
                kind: StepKind::Copy,
                src: (Buffer::Input, offset),
                dst: (Buffer::Scratch, to),
                count,
                depid: None,
                hasdep: false,
            });
            for chunk in to..to + count {
                state.access[chunk].writer = Some((block, position));
            }
        }
    }

    /// `cpy s[output] → o[..]` in pieces, after everything that writes the output.
    fn copy_out(&mut self, rank: usize, block: usize, output: Range<usize>) {
        for (offset, count) in pieces(output.len()) {
            let from = output.start + offset;
            self.push(
                rank,
                block,
                StepKind::Copy,
                from,
                from,
                count,
                from..from + count,
                0..0,
            );
            // The destination is the output buffer, not a working chunk.
            let state = &mut self.ranks[rank];
            if let Some(last) = state.blocks[block].steps.last_mut() {
                last.dst = (Buffer::Output, offset);
            }
        }
    }

    fn step(&mut self, step: &Step, chunks: &impl Fn(&Range<usize>) -> Range<usize>) {
        // Transfers as chunk ranges: (from, to, source chunks, target start).
        let moves: Vec<(usize, usize, Range<usize>, usize)> = step
            .transfers
            .iter()
            .filter(|transfer| !transfer.range.is_empty())
            .map(|transfer| {
                let source = chunks(&transfer.range);
                let target = chunks(&(transfer.at..transfer.at + 1)).start;
                (transfer.from, transfer.to, source, target)
            })
            .filter(|(_, _, source, _)| !source.is_empty())
            .collect();
        // Local sources the step overwrites on their rank are set aside first.
        let mut aside: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for (from, to, source, _) in &moves {
            if from != to {
                continue;
            }
            let overwritten = moves.iter().any(|(_, writer, other, at)| {
                writer == from && *at < source.end && source.start < *at + other.len()
            });
            if overwritten {
                let copy = self.temporary(*from, source.len());
                let block = self.local(*from);
                for (offset, count) in pieces(source.len()) {
                    let (src, dst) = (source.start + offset, copy + offset);
                    self.push(
                        *from,
                        block,
                        StepKind::Copy,
                        src,
                        dst,
                        count,
                        src..src + count,
                        dst..dst + count,
                    );
                }
                for (index, chunk) in source.clone().enumerate() {
                    aside.insert((*from, chunk), copy + index);
                }
            }
        }
        let read_from =
            |rank: usize, chunk: usize| aside.get(&(rank, chunk)).copied().unwrap_or(chunk);
        if step.combine {
            self.fold(&moves, &read_from);
        } else {
            self.overwrite(&moves, &read_from);
        }
    }

    /// An overwriting step: sends, then receives and local copies.
    fn overwrite(
        &mut self,
        moves: &[(usize, usize, Range<usize>, usize)],
        read_from: &impl Fn(usize, usize) -> usize,
    ) {
        let mut lanes: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        let mut messages = Vec::new();
        for (from, to, source, target) in moves {
            if from == to {
                continue;
            }
            for (offset, count) in pieces(source.len()) {
                let lane = lanes.entry((*from, *to)).or_insert(0);
                messages.push((
                    *from,
                    *to,
                    *lane,
                    source.start + offset,
                    target + offset,
                    count,
                ));
                *lane += 1;
            }
        }
        for &(from, to, lane, src, _, count) in &messages {
            let block = self.link(from, to, lane);
            self.push(
                from,
                block,
                StepKind::Send,
                src,
                src,
                count,
                src..src + count,
                0..0,
            );
        }
        for (from, to, source, target) in moves {
            if from != to {
                continue;
            }
            let block = self.local(*from);
            for (offset, count) in pieces(source.len()) {
                let src = read_from(*from, source.start + offset);
                let dst = target + offset;
                self.push(
                    *from,
                    block,
                    StepKind::Copy,
                    src,
                    dst,
                    count,
                    src..src + count,
                    dst..dst + count,
                );
            }
        }
        for &(from, to, lane, _, dst, count) in &messages {
            let block = self.link(to, from, lane);
            self.push(
                to,
                block,
                StepKind::Recv,
                dst,
                dst,
                count,
                0..0,
                dst..dst + count,
            );
        }
    }

    /// A combining step: per target run, the operands in ruCCL's order.
    fn fold(
        &mut self,
        moves: &[(usize, usize, Range<usize>, usize)],
        read_from: &impl Fn(usize, usize) -> usize,
    ) {
        // Per (rank, target chunk): its operands `(sender, source chunk)`.
        let mut operands: BTreeMap<(usize, usize), Vec<(usize, usize)>> = BTreeMap::new();
        for (from, to, source, target) in moves {
            for (index, chunk) in source.clone().enumerate() {
                operands
                    .entry((*to, target + index))
                    .or_default()
                    .push((*from, chunk));
            }
        }
        // Runs of consecutive targets whose operands come from the same senders, consecutively.
        let mut runs: Vec<Run> = Vec::new();
        for ((rank, target), mut list) in operands {
            list.sort_unstable_by_key(|&(sender, _)| order_key(sender, rank));
            if let Some((last_rank, start, count, first)) = runs.last_mut() {
                let continues = *last_rank == rank
                    && *start + *count == target
                    && *count < MAX_COUNT
                    && first.len() == list.len()
                    && first
                        .iter()
                        .zip(&list)
                        .all(|(&(a, ca), &(b, cb))| a == b && ca + *count == cb);
                if continues {
                    *count += 1;
                    continue;
                }
            }
            runs.push((rank, target, 1, list));
        }
        // Lanes: one per message between a pair in this step.
        let mut lanes: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        let mut lane_of = |from: usize, to: usize| {
            let lane = lanes.entry((from, to)).or_insert(0);
            *lane += 1;
            *lane - 1
        };
        // Every remote operand is one message; sends first.
        let mut planned = Vec::new();
        for (rank, _, count, list) in &runs {
            let mut lanes_here = Vec::new();
            for &(sender, chunk) in list {
                if sender == *rank {
                    lanes_here.push(None);
                    continue;
                }
                let lane = lane_of(sender, *rank);
                let block = self.link(sender, *rank, lane);
                self.push(
                    sender,
                    block,
                    StepKind::Send,
                    chunk,
                    chunk,
                    *count,
                    chunk..chunk + count,
                    0..0,
                );
                lanes_here.push(Some(lane));
            }
            planned.push(lanes_here);
        }
        for ((rank, target, count, list), lanes_here) in runs.iter().zip(planned) {
            let (rank, target, count) = (*rank, *target, *count);
            let remote: Vec<(usize, usize, Option<usize>)> = list
                .iter()
                .zip(&lanes_here)
                .map(|(&(sender, chunk), &lane)| (sender, chunk, lane))
                .collect();
            if remote.len() == 1 {
                let (sender, chunk, lane) = remote[0];
                match lane {
                    Some(lane) => {
                        let block = self.link(rank, sender, lane);
                        let range = target..target + count;
                        self.push(
                            rank,
                            block,
                            StepKind::RecvReduceCopy,
                            target,
                            target,
                            count,
                            range.clone(),
                            range,
                        );
                    }
                    None => {
                        let src = read_from(rank, chunk);
                        let block = self.local(rank);
                        self.push(
                            rank,
                            block,
                            StepKind::Reduce,
                            src,
                            target,
                            count,
                            src..src + count,
                            target..target + count,
                        );
                    }
                }
                continue;
            }
            self.fold_many(rank, target, count, &remote, read_from);
        }
    }

    /// Fold several operands into `target..target + count` of `rank` in ruCCL's order.
    fn fold_many(
        &mut self,
        rank: usize,
        target: usize,
        count: usize,
        operands: &[(usize, usize, Option<usize>)],
        read_from: &impl Fn(usize, usize) -> usize,
    ) {
        let own_first = operands
            .first()
            .is_none_or(|&(sender, _, _)| sender >= rank);
        let accumulator = if own_first {
            target
        } else {
            self.temporary(rank, count)
        };
        let span = |start: usize| start..start + count;
        for (index, &(sender, chunk, lane)) in operands.iter().enumerate() {
            match lane {
                Some(lane) if index == 0 && !own_first => {
                    let block = self.link(rank, sender, lane);
                    self.push(
                        rank,
                        block,
                        StepKind::Recv,
                        accumulator,
                        accumulator,
                        count,
                        0..0,
                        span(accumulator),
                    );
                }
                Some(lane) if sender > rank => {
                    let block = self.link(rank, sender, lane);
                    self.push(
                        rank,
                        block,
                        StepKind::RecvReduceCopy,
                        accumulator,
                        accumulator,
                        count,
                        span(accumulator),
                        span(accumulator),
                    );
                }
                Some(lane) => {
                    let slot = self.temporary(rank, count);
                    let block = self.link(rank, sender, lane);
                    self.push(
                        rank,
                        block,
                        StepKind::Recv,
                        slot,
                        slot,
                        count,
                        0..0,
                        span(slot),
                    );
                    let local = self.local(rank);
                    self.push(
                        rank,
                        local,
                        StepKind::Reduce,
                        slot,
                        accumulator,
                        count,
                        span(slot),
                        span(accumulator),
                    );
                }
                None => {
                    let src = read_from(rank, chunk);
                    let local = self.local(rank);
                    self.push(
                        rank,
                        local,
                        StepKind::Reduce,
                        src,
                        accumulator,
                        count,
                        span(src),
                        span(accumulator),
                    );
                }
            }
            // The receiver's own value comes right before its local value and the senders above.
            let next_is_above = operands
                .get(index + 1)
                .is_none_or(|&(next, _, _)| next >= rank);
            let own_next = !own_first && sender < rank && next_is_above;
            if own_next {
                let local = self.local(rank);
                self.push(
                    rank,
                    local,
                    StepKind::Reduce,
                    target,
                    accumulator,
                    count,
                    span(target),
                    span(accumulator),
                );
            }
        }
        if !own_first {
            let local = self.local(rank);
            self.push(
                rank,
                local,
                StepKind::Copy,
                accumulator,
                target,
                count,
                span(accumulator),
                span(target),
            );
        }
    }

    fn render(&self, plan: &Plan, grid: &Grid) -> String {
        let collective = plan.collective();
        let coll = match collective {
            Collective::AllReduce(_) => "allreduce",
            Collective::ReduceScatter(_) => "reducescatter",
            Collective::AllGather => "allgather",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Reduce { .. } => "reduce",
            Collective::Gather { .. } => "gather",
            Collective::Scatter { .. } => "scatter",
            _ => "alltoall",
        };
        let chunks_per_loop = match collective {
            Collective::AllGather => grid.output,
            Collective::Gather { .. }
            | Collective::Broadcast { .. }
            | Collective::Reduce { .. }
            | Collective::AllReduce(_) => grid.input,
            Collective::Scatter { .. } => grid.output,
            _ => grid.input,
        };
        let channels = self
            .ranks
            .iter()
            .flat_map(|rank| &rank.blocks)
            .map(|block| block.channel + 1)
            .max()
            .unwrap_or(1);
        let in_place = grid.region.is_some();
        let scratch = match grid.region {
            Some(region) => grid.buffer - region + self.most,
            None => grid.buffer + self.most,
        };
        let mut xml = String::new();
        let _ = writeln!(
            xml,
            "<!-- ruCCL {} plan of {collective} on {} ranks, {} elements per rank: one chunk is {} elements -->",
            plan.algorithm(),
            plan.world(),
            plan.input_len(),
            grid.size
        );
        let _ = writeln!(
            xml,
            "<algo name=\"ruccl_{}_{}\" proto=\"Simple\" nchannels=\"{channels}\" nchunksperloop=\"{}\" ngpus=\"{}\" coll=\"{coll}\" inplace=\"{}\" outofplace=\"{}\" minBytes=\"0\" maxBytes=\"1099511627776\">",
            collective.nccl_name(),
            plan.algorithm()
                .to_string()
                .to_lowercase()
                .replace(['-', ' '], "_"),
            chunks_per_loop.max(1),
            plan.world(),
            u8::from(in_place),
            u8::from(!in_place),
        );
        for (id, rank) in self.ranks.iter().enumerate() {
            let _ = writeln!(
                xml,
                "  <gpu id=\"{id}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{scratch}\">",
                grid.input, grid.output
            );
            for (tb, block) in rank.blocks.iter().enumerate() {
                let peer = |peer: Option<usize>| peer.map_or(-1, |peer| peer as i64);
                let _ = writeln!(
                    xml,
                    "    <tb id=\"{tb}\" send=\"{}\" recv=\"{}\" chan=\"{}\">",
                    peer(block.send),
                    peer(block.recv),
                    block.channel
                );
                for (s, step) in block.steps.iter().enumerate() {
                    let (depid, deps) =
                        step.depid.map_or((-1, -1), |(tb, s)| (tb as i64, s as i64));
                    let (src, dst) = if step.kind == StepKind::Nop {
                        (("i", -1), ("o", -1))
                    } else {
                        (
                            (step.src.0.letter(), step.src.1 as i64),
                            (step.dst.0.letter(), step.dst.1 as i64),
                        )
                    };
                    let _ = writeln!(
                        xml,
                        "      <step s=\"{s}\" type=\"{}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{}\" depid=\"{depid}\" deps=\"{deps}\" hasdep=\"{}\"/>",
                        step.kind.name(),
                        src.0,
                        src.1,
                        dst.0,
                        dst.1,
                        step.count,
                        u8::from(step.hasdep)
                    );
                }
                xml.push_str("    </tb>\n");
            }
            xml.push_str("  </gpu>\n");
        }
        xml.push_str("</algo>\n");
        xml
    }
}

/// Consecutive target chunks of one rank folded from the same senders: `(rank, first target,
/// chunks, operands as (sender, first source chunk) in fold order)`.
type Run = (usize, usize, usize, Vec<(usize, usize)>);

/// ruCCL's fold order as a sort key: senders below the receiver, its own value, senders above.
fn order_key(sender: usize, rank: usize) -> (u8, usize) {
    match sender.cmp(&rank) {
        std::cmp::Ordering::Less => (0, sender),
        std::cmp::Ordering::Equal => (1, 0),
        std::cmp::Ordering::Greater => (2, sender),
    }
}

/// `(offset, count)` pieces of at most [`MAX_COUNT`] chunks covering `total`.
fn pieces(total: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..total)
        .step_by(MAX_COUNT)
        .map(move |offset| (offset, MAX_COUNT.min(total - offset)))
}
