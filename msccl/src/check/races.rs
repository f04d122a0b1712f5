//! Data races: two ops of a rank touching one cell, one writing, with no happens-before order.
//!
//! Per rank, a vector clock over that rank's threadblocks is carried through the whole
//! happens-before graph in topological order: entry `t` of op `v`'s clock is how many ops of
//! threadblock `t` happen before or at `v`, so `u` happens before `v` exactly when `v`'s entry
//! for `u`'s threadblock is past `u`. Then each cell's accesses, taken in topological order,
//! must each be ordered after the last write, and a write after every read since it: if every
//! such neighbour pair is ordered, every conflicting pair is (by transitivity), and if one is
//! not, that pair is a race in some execution. Work: edges × threadblocks of the rank, per rank.

use super::cells::Cells;
use super::model::{Model, Op};
use super::order::Order;
use super::violation::{Violation, ViolationKind};
use crate::program::Buffer;
use std::ops::Range;

/// The cells an op reads and writes, in `cells`' numbering, with the buffer view it uses.
pub(crate) struct Access {
    pub(crate) reads: Option<(Buffer, Range<usize>, Range<usize>)>,
    pub(crate) writes: Option<(Buffer, Range<usize>, Range<usize>)>,
}

/// `(buffer, chunks, cells)` of an op's source and destination; `re` reads its destination too.
pub(crate) fn access(op: &Op, cells: &Cells) -> Access {
    let view = |(buffer, chunks): (Buffer, Range<usize>)| {
        let range = cells.range(op.gpu, buffer, chunks.clone());
        (buffer, chunks, range)
    };
    Access {
        reads: op.reads().map(view),
        writes: op.writes().map(view),
    }
}

/// Refuse the first race, or an op whose source and destination partly overlap.
pub(crate) fn check(model: &Model, order: &Order, cells: &Cells) -> Result<(), Violation> {
    let accesses: Vec<Access> = model.ops.iter().map(|op| access(op, cells)).collect();
    for (op, access) in model.ops.iter().zip(&accesses) {
        if let (Some((_, _, read)), Some((buffer, chunks, write))) = (&access.reads, &access.writes)
        {
            let overlap = read.start < write.end && write.start < read.end;
            if overlap && read != write {
                return Err(Violation::new(
                    ViolationKind::Race,
                    format!(
                        "its source and destination overlap without being the same chunks, so its threads read chunks others of them write ({} source {}[{}..{}])",
                        op.kind, op.src.buffer, op.src.offset, op.src.offset + op.count as i64
                    ),
                )
                .at(op.at)
                .chunk(*buffer, chunks.start)
                .other(op.at)
                .in_mode(cells.mode));
            }
        }
    }
    for rank in 0..model.world {
        check_rank(model, order, cells, &accesses, rank)?;
    }
    Ok(())
}

fn check_rank(
    model: &Model,
    order: &Order,
    cells: &Cells,
    accesses: &[Access],
    rank: usize,
) -> Result<(), Violation> {
    let tbs = &model.tbs_of[rank];
    let width = tbs.len();
    if width == 0 {
        return Ok(());
    }
    let first_tb = tbs[0];
    // Vector clocks of every op, restricted to this rank's threadblocks.
    let mut clocks = vec![0u32; model.ops.len() * width];
    for &op in &order.topological {
        let row = op * width;
        for &pred in order.predecessors(op) {
            let pred = pred as usize * width;
            for index in 0..width {
                let value = clocks[pred + index];
                if value > clocks[row + index] {
                    clocks[row + index] = value;
                }
            }
        }
        let this = &model.ops[op];
        if this.gpu == rank {
            clocks[row + (this.tb - first_tb)] = u32::try_from(this.pos + 1).unwrap_or(u32::MAX);
        }
    }
    let before = |earlier: usize, later: usize| {
        let op = &model.ops[earlier];
        clocks[later * width + (op.tb - first_tb)] as usize > op.pos
    };
    let offset = cells.first[rank];
    let mut last_write: Vec<Option<usize>> = vec![None; cells.rank_len(rank)];
    let mut reads: Vec<Vec<usize>> = vec![Vec::new(); cells.rank_len(rank)];
    let race = |op: usize, other: usize, cell: usize, buffer: Buffer, chunk: usize, verb: &str| {
        let (this, that) = (&model.ops[op], &model.ops[other]);
        let _ = cell;
        Violation::new(
            ViolationKind::Race,
            format!(
                "it {verb} chunk {buffer}[{chunk}] while the {} step {} may touch it at the same time: no dependency, message or program order puts one before the other",
                that.kind, that.at
            ),
        )
        .at(this.at)
        .chunk(buffer, chunk)
        .other(that.at)
        .in_mode(cells.mode)
    };
    for &op in &order.topological {
        if model.ops[op].gpu != rank {
            continue;
        }
        let access = &accesses[op];
        if let Some((buffer, chunks, range)) = &access.reads {
            for (index, cell) in range.clone().enumerate() {
                let local = cell - offset;
                if let Some(writer) = last_write[local] {
                    if writer != op && !before(writer, op) {
                        return Err(race(
                            op,
                            writer,
                            cell,
                            *buffer,
                            chunks.start + index,
                            "reads",
                        ));
                    }
                }
                reads[local].push(op);
            }
        }
        if let Some((buffer, chunks, range)) = &access.writes {
            for (index, cell) in range.clone().enumerate() {
                let local = cell - offset;
                let chunk = chunks.start + index;
                if let Some(writer) = last_write[local] {
                    if writer != op && !before(writer, op) {
                        return Err(race(op, writer, cell, *buffer, chunk, "writes"));
                    }
                }
                if let Some(&reader) = reads[local]
                    .iter()
                    .find(|&&reader| reader != op && !before(reader, op))
                {
                    return Err(race(op, reader, cell, *buffer, chunk, "writes"));
                }
                reads[local].clear();
                last_write[local] = Some(op);
            }
        }
    }
    Ok(())
}
