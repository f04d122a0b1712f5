//! Where each buffer's chunks live in a rank's memory, per [`Mode`].
//!
//! A rank's memory is a row of chunk-sized cells. Out of place, input, output and scratch are
//! three separate runs. In place, the input and output are one allocation, as NCCL defines it
//! for each collective: the same memory when both have the same size (all-reduce, all-to-all,
//! broadcast, reduce), otherwise the smaller one is block `rank` of the larger (all-gather and
//! gather: the input is the rank's block of the output; reduce-scatter and scatter: the output
//! is the rank's block of the input). Scratch follows.

use super::model::Model;
use crate::program::{Buffer, Mode};
use std::ops::Range;

/// The cells of every rank, flattened: rank `r`'s cells are `first[r]..first[r + 1]`.
pub(crate) struct Cells {
    pub(crate) mode: Mode,
    /// Per rank, the first cell of its input, output and scratch buffers (absolute).
    bases: Vec<[usize; 3]>,
    /// Per rank, the first cell; one more entry for the end.
    pub(crate) first: Vec<usize>,
    /// Chunks of every rank's input and output as allocated.
    pub(crate) input: usize,
    pub(crate) output: usize,
}

impl Cells {
    pub(crate) fn new(model: &Model, mode: Mode) -> Cells {
        let (input, output) = model
            .collective
            .buffer_chunks(model.world as u64, model.chunks as u64);
        let input = usize::try_from(input).unwrap_or(0);
        let output = usize::try_from(output).unwrap_or(0);
        let mut bases = Vec::with_capacity(model.world);
        let mut first = Vec::with_capacity(model.world + 1);
        let mut next = 0;
        for (rank, sizes) in model.sizes.iter().enumerate() {
            first.push(next);
            let (input_at, output_at, region) = match mode {
                Mode::OutOfPlace => (0, input, input + output),
                Mode::InPlace if input == output => (0, 0, input),
                Mode::InPlace if input < output => (rank * input, 0, output),
                Mode::InPlace => (0, rank * output, input),
            };
            bases.push([next + input_at, next + output_at, next + region]);
            next += region + sizes[Buffer::Scratch as usize];
        }
        first.push(next);
        Cells {
            mode,
            bases,
            first,
            input,
            output,
        }
    }

    /// Every rank's cells together.
    pub(crate) fn total(&self) -> usize {
        self.first.last().copied().unwrap_or(0)
    }

    /// The cells of `chunks` of `buffer` on `rank` (chunks were validated to fit).
    pub(crate) fn range(&self, rank: usize, buffer: Buffer, chunks: Range<usize>) -> Range<usize> {
        let base = self.bases[rank][buffer as usize];
        base + chunks.start..base + chunks.end
    }

    /// The cell of input chunk `chunk` of `rank`.
    pub(crate) fn input_cell(&self, rank: usize, chunk: usize) -> usize {
        self.bases[rank][Buffer::Input as usize] + chunk
    }

    /// The cell of output chunk `chunk` of `rank`.
    pub(crate) fn output_cell(&self, rank: usize, chunk: usize) -> usize {
        self.bases[rank][Buffer::Output as usize] + chunk
    }

    /// The cells of `chunks` of `buffer` on `rank`, counted from the rank's first cell.
    pub(crate) fn local(&self, rank: usize, buffer: Buffer, chunks: Range<usize>) -> Range<usize> {
        let range = self.range(rank, buffer, chunks);
        range.start - self.first[rank]..range.end - self.first[rank]
    }

    /// Cells of `rank`'s input and output region (both buffers, or the one they share).
    pub(crate) fn region(&self, rank: usize) -> usize {
        self.bases[rank][Buffer::Scratch as usize] - self.first[rank]
    }

    /// Cells of one rank.
    pub(crate) fn rank_len(&self, rank: usize) -> usize {
        self.first[rank + 1] - self.first[rank]
    }
}
