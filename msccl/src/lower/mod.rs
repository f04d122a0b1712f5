//! [`Program::lower`]: a program as ruCCL plan parts that compute what MSCCL's executors
//! compute, which [`Plan::from_parts`] then proves again.
//!
//! | file       | job                                                                      |
//! |------------|--------------------------------------------------------------------------|
//! | `mod.rs`   | the API, the element layout of chunks, the report's summary              |
//! | `build.rs` | instructions to transfers, their dependence graph, staging, steps         |
//! | `fold.rs`  | the fold trees ruCCL's order gives, so all-reduce bits agree or we say so |
//!
//! # Layout
//! One working buffer per rank: the collective's region (input and output, or the one buffer
//! they share in place, exactly as the checker aliases them), then the rank's scratch chunks,
//! then temporary chunks the lowering adds (see `build.rs`). A chunk of the region is a
//! balanced piece of its block: the region is `B` blocks of `L` elements (`L` the input length,
//! or its `W`-th part where the input is `W` blocks), each cut into `K` chunks by
//! [`balanced_ranges`], so any input length lowers, 0 and lengths that do not divide included;
//! a scratch or temporary chunk holds the longest piece. Every transfer moves exactly the
//! elements of the value it carries.

mod build;
mod fold;

use crate::check::{Agreement, Analysis, Cells, Model};
use crate::error::MscclError;
use crate::program::{Mode, MscclCollective, Program};
use ruccl_core::{Collective, Plan, PlanParts, ReduceOperation, balanced_ranges};
use std::ops::Range;

/// How to lower: which declared mode, and which reduction the collective uses (the format
/// leaves both to the call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LowerOptions {
    /// The mode; `None` takes in place if the program declares it, else out of place.
    pub mode: Option<Mode>,
    /// The reduction of all-reduce, reduce-scatter and reduce.
    pub operation: ReduceOperation,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            mode: None,
            operation: ReduceOperation::Sum,
        }
    }
}

impl LowerOptions {
    /// These options with `mode`.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// These options with `operation`.
    pub fn with_operation(mut self, operation: ReduceOperation) -> Self {
        self.operation = operation;
        self
    }
}

/// A program's lowering, summarised for a [`Report`](crate::Report): at one element per
/// chunk, proved by [`Plan::from_parts`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Lowered {
    /// The mode lowered.
    pub mode: Mode,
    /// ruCCL steps.
    pub steps: usize,
    /// Elements (= chunks) the busiest rank sends to other ranks.
    pub busiest_sent: usize,
    /// The lower bound for the busiest rank: the collective's bus factor times the larger of
    /// its input and output, in chunks.
    pub lower_bound: f64,
    /// Local copies and folds (self-transfers, no link traffic).
    pub local_transfers: usize,
    /// Messages that had to land in a staging chunk first, because their source is rewritten
    /// before their receiver runs.
    pub staged: usize,
}

impl Program {
    /// The ruCCL plan parts of this program for inputs of `input_len` elements per rank, in
    /// place if the program declares it, with `Sum`: see [`lower_with`](Program::lower_with).
    ///
    /// ```
    /// # let xml = include_str!("../../tests/data/allreduce_ring_n3.xml");
    /// use ruccl_core::Plan;
    ///
    /// let program = ruccl_msccl::parse(xml)?;
    /// let parts = program.lower(1000)?;
    /// let plan = Plan::from_parts(parts).expect("the ring all-reduce is proved again");
    /// assert_eq!(plan.world(), 3);
    /// # Ok::<(), ruccl_msccl::MscclError>(())
    /// ```
    pub fn lower(&self, input_len: usize) -> Result<PlanParts, MscclError> {
        self.lower_with(input_len, LowerOptions::default())
    }

    /// The ruCCL plan parts of this program for inputs of `input_len` elements per rank.
    ///
    /// Every instruction becomes transfers of ruCCL steps that respect every happens-before
    /// edge the data needs: a send and its receive become one transfer from the sender's
    /// buffer to the receiver's (landing at the receiver's offset), local copies and `re`
    /// become self-transfers, reductions become combining steps. A program that cannot run
    /// (deadlock, race, bad peer, …) is refused ([`MscclError::Unsound`]); one that runs but
    /// computes a wrong result is lowered, and `from_parts` refuses the plan. For an
    /// all-reduce whose ranks end with differently ordered folds once in ruCCL's fixed order,
    /// it fails with [`MscclError::FoldOrder`]: ruCCL promises identical bits on every rank.
    pub fn lower_with(
        &self,
        input_len: usize,
        options: LowerOptions,
    ) -> Result<PlanParts, MscclError> {
        let collective_of = ruccl_collective(self)?;
        let analysis =
            Analysis::new(self).map_err(|violation| MscclError::Unsound(Box::new(violation)))?;
        let mode = options
            .mode
            .unwrap_or_else(|| self.modes().first().copied().unwrap_or(Mode::InPlace));
        if !self.modes().contains(&mode) {
            return Err(MscclError::Mode { mode });
        }
        lower_analysis(&analysis, mode, input_len, |root| {
            collective_of(options.operation, root)
        })
        .map(|(parts, _)| parts)
    }
}

/// The ruCCL collective of a program, given the reduction and the root.
fn ruccl_collective(
    program: &Program,
) -> Result<impl Fn(ReduceOperation, usize) -> Collective, MscclError> {
    let kind = program.collective;
    if !kind.has_result() {
        return Err(MscclError::Unsupported {
            collective: program.coll.clone(),
        });
    }
    Ok(move |operation: ReduceOperation, root: usize| match kind {
        MscclCollective::AllReduce => Collective::AllReduce(operation),
        MscclCollective::ReduceScatter => Collective::ReduceScatter(operation),
        MscclCollective::AllGather => Collective::AllGather,
        MscclCollective::AllToAll => Collective::AllToAll,
        MscclCollective::Broadcast => Collective::Broadcast { root },
        MscclCollective::Reduce => Collective::Reduce {
            op: operation,
            root,
        },
        MscclCollective::Gather => Collective::Gather { root },
        MscclCollective::Scatter => Collective::Scatter { root },
        MscclCollective::Custom | MscclCollective::PointToPoint => Collective::AllToAll,
    })
}

/// Lower an analysed program in `mode`; also the number of staged messages.
fn lower_analysis(
    analysis: &Analysis,
    mode: Mode,
    input_len: usize,
    collective: impl Fn(usize) -> Collective,
) -> Result<(PlanParts, usize), MscclError> {
    lower_staging(analysis, mode, input_len, collective, false)
}

/// [`lower_analysis`], staging every message if `stage_all` (for tests of the staging path).
fn lower_staging(
    analysis: &Analysis,
    mode: Mode,
    input_len: usize,
    collective: impl Fn(usize) -> Collective,
    stage_all: bool,
) -> Result<(PlanParts, usize), MscclError> {
    let model = &analysis.model;
    // Races and the result: a race makes the program unsound; a wrong result lowers anyway.
    let (root, agreement) = match analysis.evaluate(mode) {
        Ok(evaluation) => (evaluation.root.unwrap_or(0), evaluation.agreement),
        Err(violation) if violation.kind.is_result() => (0, None),
        Err(violation) => return Err(MscclError::Unsound(Box::new(violation))),
    };
    let cells = Cells::new(model, mode);
    let elements = Elements::new(model, &cells, input_len)?;
    let collective = collective(root);
    let mut built = build::build(model, &analysis.order, &cells, &elements, true, stage_all)?;
    if let Collective::AllReduce(_) = collective {
        if fold::check(model, &cells, &built).is_err() {
            built = build::build(model, &analysis.order, &cells, &elements, false, stage_all)?;
        }
        fold::check(model, &cells, &built).map_err(|error| match error {
            MscclError::FoldOrder { gpu, chunk, .. } => MscclError::FoldOrder {
                gpu,
                chunk,
                reason: match agreement {
                    Some(Agreement::Bitwise) => "on MSCCL's executors the ranks agree bitwise (their reductions differ only in operand order, and ⊕ is commutative), but ruCCL's fixed order turns some operands around on this rank".to_owned(),
                    Some(Agreement::TermsOnly { .. }) => "the ranks fold in different orders on MSCCL's executors too, so their bits may differ there as well".to_owned(),
                    None => "the program's result is wrong anyway".to_owned(),
                },
            },
            other => other,
        })?;
    }
    let outputs = (0..model.world)
        .map(|rank| match collective {
            Collective::Reduce { root, .. } | Collective::Gather { root } if rank != root => 0..0,
            _ => elements.output(rank, &cells),
        })
        .collect();
    let parts = PlanParts {
        collective,
        world: model.world,
        input_len,
        buffer_len: built.buffer_len,
        placements: (0..model.world)
            .map(|rank| elements.input_start(rank, &cells))
            .collect(),
        outputs,
        steps: built.steps,
    };
    Ok((parts, built.staged))
}

/// The summary of `program`'s lowering for a report: at one element per chunk, in the first
/// declared mode, proved by [`Plan::from_parts`].
pub(crate) fn summary(program: &Program, analysis: &Analysis) -> Result<Lowered, MscclError> {
    let collective_of = ruccl_collective(program)?;
    let model = &analysis.model;
    let mode = program.modes().first().copied().unwrap_or(Mode::InPlace);
    let (world, chunks) = (model.world, model.chunks);
    // One element per chunk: the input is K chunks per block, one or W blocks.
    let input_len = match model.collective {
        MscclCollective::AllGather => chunks / world,
        _ => {
            let (input, _) = model.collective.buffer_chunks(world as u64, chunks as u64);
            usize::try_from(input).unwrap_or(0)
        }
    };
    let (parts, staged) = lower_analysis(analysis, mode, input_len, |root| {
        collective_of(ReduceOperation::Sum, root)
    })?;
    let plan = Plan::from_parts(parts).map_err(|violation| MscclError::Refused {
        reason: violation.to_string(),
    })?;
    let busiest_sent = (0..world)
        .map(|rank| {
            plan.steps()
                .iter()
                .flat_map(|step| &step.transfers)
                .filter(|transfer| transfer.from == rank && transfer.crosses_a_link())
                .map(|transfer| transfer.range.len())
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    let local_transfers = plan
        .steps()
        .iter()
        .flat_map(|step| &step.transfers)
        .filter(|transfer| transfer.from == transfer.to)
        .count();
    let (input, output) = model.collective.buffer_chunks(world as u64, chunks as u64);
    let larger = input.max(output) as f64;
    Ok(Lowered {
        mode,
        steps: plan.steps().len(),
        busiest_sent,
        lower_bound: plan.collective().bus_factor(world) * larger,
        local_transfers,
        staged,
    })
}

/// Where every chunk of every rank lies in the rank's working buffer, in elements.
pub(crate) struct Elements {
    /// The pieces of one block: chunk `k` of a block starts at `pieces[k].start` within it.
    pieces: Vec<Range<usize>>,
    /// Elements of one block.
    block: usize,
    /// Elements of a scratch or temporary chunk: the longest piece.
    pub(crate) unit: usize,
    /// Chunks of the input area (before the output area, out of place).
    input_chunks: usize,
    /// Elements of the input area.
    input_elements: usize,
    /// Elements of the region (input and output areas, or the shared one).
    region: usize,
    mode: Mode,
}

impl Elements {
    fn new(model: &Model, cells: &Cells, input_len: usize) -> Result<Elements, MscclError> {
        let world = model.world;
        let per_block = match model.collective {
            MscclCollective::AllGather
            | MscclCollective::ReduceScatter
            | MscclCollective::AllToAll => model.chunks / world,
            _ => model.chunks,
        };
        let input_blocks = cells.input.checked_div(per_block).unwrap_or(0).max(1);
        if input_len % input_blocks != 0 {
            return Err(MscclError::Length {
                input_len,
                reason: format!(
                    "{} takes an input of {input_blocks} equal blocks",
                    model.collective_label()
                ),
            });
        }
        let block = input_len / input_blocks;
        let pieces = balanced_ranges(block, per_block);
        let unit = pieces.iter().map(Range::len).max().unwrap_or(0);
        let output_blocks = cells.output.checked_div(per_block).unwrap_or(0).max(1);
        let blocks = match cells.mode {
            Mode::OutOfPlace => input_blocks + output_blocks,
            Mode::InPlace => input_blocks.max(output_blocks),
        };
        // Room for the region and any number of scratch and temporary chunks a program within
        // the parser's bounds can need, so element offsets never overflow.
        let region = blocks
            .checked_mul(block)
            .filter(|&region| {
                unit.checked_mul(1 << 32)
                    .and_then(|room| region.checked_add(room))
                    .is_some()
            })
            .ok_or_else(|| MscclError::Length {
                input_len,
                reason: "the working buffer's elements would overflow the address space".to_owned(),
            })?;
        Ok(Elements {
            pieces,
            block,
            unit,
            input_chunks: cells.input,
            input_elements: input_blocks * block,
            region,
            mode: cells.mode,
        })
    }

    /// The elements of chunk `chunk` of an area (blocks of `pieces`).
    fn area_chunk(&self, chunk: usize) -> Range<usize> {
        let per_block = self.pieces.len().max(1);
        let (block, piece) = (chunk / per_block, chunk % per_block);
        let offset = block * self.block;
        let piece = self.pieces.get(piece).cloned().unwrap_or(0..0);
        offset + piece.start..offset + piece.end
    }

    /// The elements of a rank's local cell `cell` (`region` cells of the region first).
    pub(crate) fn cell(&self, region: usize, cell: usize) -> Range<usize> {
        if cell < region {
            match self.mode {
                Mode::OutOfPlace if cell >= self.input_chunks => {
                    let inner = self.area_chunk(cell - self.input_chunks);
                    inner.start + self.input_elements..inner.end + self.input_elements
                }
                _ => self.area_chunk(cell),
            }
        } else {
            let start = self.region + (cell - region) * self.unit;
            start..start + self.unit
        }
    }

    /// Elements of a rank's buffer with `cells` local cells of which `region` in the region.
    pub(crate) fn buffer_len(&self, region: usize, cells: usize) -> usize {
        self.region + cells.saturating_sub(region) * self.unit
    }

    /// Where `rank`'s input starts.
    fn input_start(&self, rank: usize, cells: &Cells) -> usize {
        let region = cells.region(rank);
        let first = cells.local(rank, crate::Buffer::Input, 0..0).start;
        if first < region {
            self.cell(region, first).start
        } else {
            0
        }
    }

    /// `rank`'s output range.
    fn output(&self, rank: usize, cells: &Cells) -> Range<usize> {
        let region = cells.region(rank);
        let chunks = cells.local(rank, crate::Buffer::Output, 0..cells.output);
        if chunks.is_empty() {
            return 0..0;
        }
        let first = self.cell(region, chunks.start);
        let last = self.cell(region, chunks.end - 1);
        first.start..last.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    /// Every passing program of the committed corpus, lowered with every message staged (sent
    /// into a temporary of the receiver, copied or folded at the receive), at several lengths:
    /// ruCCL's checker accepts it, as it accepts the direct lowering.
    #[test]
    fn staging_every_message_still_computes_the_collective() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let mut lowered = 0;
        for entry in std::fs::read_dir(folder).expect("tests/data") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("readable");
            let Ok(program) = parse(&text) else { continue };
            if program.check().is_err() {
                continue;
            }
            let Ok(analysis) = Analysis::new(&program) else {
                continue;
            };
            let Ok(collective_of) = ruccl_collective(&program) else {
                continue;
            };
            for mode in program.modes() {
                for input_len in [0, 7, 60, 61] {
                    for stage_all in [false, true] {
                        let result = lower_staging(
                            &analysis,
                            mode,
                            input_len,
                            |root| collective_of(ReduceOperation::Sum, root),
                            stage_all,
                        );
                        match result {
                            Ok((parts, staged)) => {
                                assert!(
                                    !stage_all
                                        || staged > 0
                                        || parts.steps.is_empty()
                                        || analysis.model.messages.is_empty()
                                );
                                if let Err(violation) = Plan::from_parts(parts) {
                                    panic!(
                                        "{} {mode} n={input_len} staged={stage_all}: {violation}",
                                        path.display()
                                    );
                                }
                                lowered += 1;
                            }
                            Err(MscclError::Length { .. } | MscclError::FoldOrder { .. }) => {}
                            Err(error) => panic!("{}: {error}", path.display()),
                        }
                    }
                }
            }
        }
        assert!(lowered > 20, "{lowered}");
    }
}
