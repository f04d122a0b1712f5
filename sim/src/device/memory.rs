//! The simulated device memory of one generation: one working buffer per rank, typed.
//!
//! A rank's buffer is its input's own allocation when the plan works in place (the buffer is the
//! input, placed at 0) and the device allows it; otherwise a fresh buffer of the plan's length
//! with the input copied to its placement — a whole input (placed at 0, the buffer's length)
//! only when the first step needs it: a first step that is a clique of those ranks over their
//! whole buffers folds from the inputs straight into the fresh buffers, so an out-of-place
//! all-reduce by one clique moves what an in-place one does. The element type is matched once
//! per call; everything below runs on typed slices.

use super::census::Registry;
use super::elements::Element;
use super::error::SimError;
use super::kernels::{Kernel, combine_into, map_in_place, stream_copy, stream_fence};
use super::parallel::{self, Team};
use super::pool::Pool;
use super::{SimPrepared, SimTensor};
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::{
    Clique, DeviceId, Piece, Plan, ReduceOperation, Source, StepLayout, Write, WriteKind,
};
use std::mem::MaybeUninit;
use std::ops::Range;

/// Every rank's buffer, for one element type.
#[derive(Debug)]
pub(crate) enum Memory {
    F32(Ranks<f32>),
    F64(Ranks<f64>),
    F16(Ranks<f16>),
    BF16(Ranks<bf16>),
    I32(Ranks<i32>),
    I64(Ranks<i64>),
    I8(Ranks<i8>),
    U8(Ranks<u8>),
    U32(Ranks<u32>),
    U64(Ranks<u64>),
}

/// Run `$body` with `$buffers` bound to the typed buffers of whichever variant.
macro_rules! with_buffers {
    ($self:expr, $buffers:ident => $body:expr) => {
        match $self {
            Memory::F32($buffers) => $body,
            Memory::F64($buffers) => $body,
            Memory::F16($buffers) => $body,
            Memory::BF16($buffers) => $body,
            Memory::I32($buffers) => $body,
            Memory::I64($buffers) => $body,
            Memory::I8($buffers) => $body,
            Memory::U8($buffers) => $body,
            Memory::U32($buffers) => $body,
            Memory::U64($buffers) => $body,
        }
    };
}

/// Every rank's working buffer for one element type, and the whole inputs not copied in yet.
#[derive(Debug)]
pub(crate) struct Ranks<T> {
    /// Rank `r`'s working buffer. While `pending` holds rank `r`'s input, the buffer is empty,
    /// with room for the buffer's length, and the input holds its values.
    buffers: Vec<Vec<T>>,
    /// `(rank, input)`, ranks ascending: whole inputs of an out-of-place generation, waiting
    /// for the first step (`step`: folded from by a clique of exactly them over their whole
    /// buffers, else copied in first); empty from then on.
    pending: Vec<(usize, Vec<T>)>,
}

impl<T: Stored> Ranks<T> {
    /// Copy every pending input into its buffer, on up to `threads` threads at once, as one
    /// [`parallel::run_pieces`] call for every rank: one pass over each buffer, no zero-fill.
    /// The inputs go back to `pool`.
    fn copy_in(&mut self, team: Team, pool: &Pool) {
        if self.pending.is_empty() {
            return;
        }
        let mut sources = self.pending.iter().peekable();
        let mut pieces = Vec::with_capacity(self.pending.len());
        for (rank, buffer) in self.buffers.iter_mut().enumerate() {
            if let Some((_, source)) = sources.next_if(|(copy_rank, _)| *copy_rank == rank) {
                pieces.push(CopyIn {
                    dst: &mut buffer.spare_capacity_mut()[..source.len()],
                    src: source,
                });
            }
        }
        parallel::run_pieces(pieces, size_of::<T>(), team, CopyIn::run);
        for (rank, values) in std::mem::take(&mut self.pending) {
            // SAFETY: `buffers[rank]` came from `Pool::take` for the buffer's length, which is
            // `values.len()` (a pending input is a whole one), so its capacity holds that many
            // elements, and every one of them was written: its `CopyIn` covered them all, and
            // `run_pieces` runs every piece, cut into parts that cover each element exactly
            // once (`parallel.rs`). `T` is `Copy`: no element needs dropping.
            unsafe { self.buffers[rank].set_len(values.len()) };
            pool.give(values);
        }
    }

    /// Whether `clique` can run straight from the pending inputs: its members are exactly the
    /// ranks pending, and it covers their whole buffers.
    fn folds_every_pending_input(&self, clique: &Clique) -> bool {
        !self.pending.is_empty()
            && clique.ranks.len() == self.pending.len()
            && clique
                .ranks
                .iter()
                .zip(&self.pending)
                .all(|(member, (rank, input))| {
                    member == rank && clique.range.start == 0 && clique.range.end == input.len()
                })
    }
}

impl Memory {
    /// The buffers of a generation of `plan` over `inputs` (checked: one per rank, all of
    /// `element_type` and the plan's input length). In place when `in_place` allows it; fresh
    /// buffers come from `pool`, and inputs copied out of go back to it. Whole inputs are
    /// copied in by the first step ([`Ranks::pending`]).
    pub(crate) fn new(
        element_type: ElementType,
        inputs: Vec<SimPrepared>,
        plan: &Plan,
        in_place: bool,
        pool: &Pool,
    ) -> Result<Self, SimError> {
        let buffers = Buffers {
            plan,
            in_place,
            pool,
        };
        Ok(match element_type {
            ElementType::F32 => Memory::F32(buffers.build(inputs)?),
            ElementType::F64 => Memory::F64(buffers.build(inputs)?),
            ElementType::F16 => Memory::F16(buffers.build(inputs)?),
            ElementType::BF16 => Memory::BF16(buffers.build(inputs)?),
            ElementType::I32 => Memory::I32(buffers.build(inputs)?),
            ElementType::I64 => Memory::I64(buffers.build(inputs)?),
            ElementType::I8 => Memory::I8(buffers.build(inputs)?),
            ElementType::U8 => Memory::U8(buffers.build(inputs)?),
            ElementType::U32 => Memory::U32(buffers.build(inputs)?),
            ElementType::U64 => Memory::U64(buffers.build(inputs)?),
            other => return Err(SimError::UnsupportedType(other)),
        })
    }

    /// Apply one checked step; `combining` is the operation a combining step folds with. Copies
    /// aside and scratch come from `pool` and go back to it.
    ///
    /// A step that is a clique ([`Step::clique`](ruccl_core::Step::clique)) comes with it and
    /// runs as one fold stored on every rank of the group; `layout` is then unused.
    pub(crate) fn step(
        &mut self,
        layout: &StepLayout,
        clique: Option<&Clique>,
        combining: ReduceOperation,
        team: Team,
        pool: &Pool,
    ) {
        with_buffers!(self, ranks => step(ranks, layout, clique, combining, team, pool));
    }

    /// Hand over rank `r`'s `plan.output(r)` range on `devices[r]`, each divided by `divide_by`
    /// if given (the `Mean` scaling), counted in `census`; an output cut from a larger buffer is
    /// a copy from `pool`, and the buffer goes back to it.
    pub(crate) fn into_outputs(
        self,
        devices: &[DeviceId],
        plan: &Plan,
        divide_by: Option<usize>,
        team: Team,
        keeping: Keeping<'_>,
    ) -> Vec<SimTensor> {
        with_buffers!(self, ranks => {
            let mut ranks = ranks;
            ranks.copy_in(team, keeping.pool);
            into_outputs(ranks.buffers, devices, plan, divide_by, team, keeping)
        })
    }

    /// A copy of rank `rank`'s buffer as it is now.
    pub(crate) fn buffer(&self, rank: usize) -> Option<HostValues> {
        with_buffers!(self, ranks => {
            let pending = ranks.pending.iter().find(|(pending, _)| *pending == rank);
            let values = pending.map(|(_, input)| input).or_else(|| ranks.buffers.get(rank));
            values.map(|values| Stored::wrap(values.clone()))
        })
    }
}

/// How a generation's working buffers are made.
struct Buffers<'a> {
    plan: &'a Plan,
    in_place: bool,
    pool: &'a Pool,
}

impl Buffers<'_> {
    /// Each rank's working buffer: its input's allocation in place, or a fresh one holding the
    /// input at its placement. A fresh buffer that is a whole input's copy (placed at 0, the
    /// input's length: out of place) is left empty and its input pending
    /// ([`Ranks::pending`]).
    fn build<T: Stored>(&self, inputs: Vec<SimPrepared>) -> Result<Ranks<T>, SimError> {
        let buffer_len = self.plan.buffer_len();
        // A vector of its own rather than collected in the inputs' allocation: the elements
        // differ in size, so collecting in place would reallocate it.
        let mut buffers = Vec::with_capacity(inputs.len());
        // `(rank, input)`: whole copies still to make into `buffers[rank]`, which is empty with
        // room for `buffer_len` elements until then (`Ranks::pending`).
        let mut whole: Vec<(usize, Vec<T>)> = Vec::new();
        for (rank, input) in inputs.into_iter().enumerate() {
            let tensor = input.into_tensor();
            let actual = tensor.element_type();
            let values =
                T::unwrap(tensor.into_values()).map_err(|_| SimError::ElementTypeMismatch {
                    rank,
                    expected: T::TYPE,
                    actual,
                })?;
            let placement = self.plan.placement(rank);
            if placement == 0 && values.len() == buffer_len {
                if self.in_place {
                    buffers.push(values);
                } else {
                    buffers.push(self.pool.take(buffer_len));
                    whole.push((rank, values));
                }
                continue;
            }
            // `validate::begin` checked the placement and length fit the buffer.
            let buffer = self.pool.placed(buffer_len, placement, &values);
            self.pool.give(values);
            buffers.push(buffer);
        }
        Ok(Ranks {
            buffers,
            pending: whole,
        })
    }
}

/// A fresh buffer's uninitialised elements and the input they get: a unit of
/// [`parallel::run_pieces`].
struct CopyIn<'a, T> {
    dst: &'a mut [std::mem::MaybeUninit<T>],
    src: &'a [T],
}

impl<T: Copy> CopyIn<'_, T> {
    fn run(self) {
        let len = self.dst.len().min(self.src.len());
        // SAFETY: both slices are borrows the caller holds (the buffer's spare capacity,
        // exclusively; the input, shared) and hold at least `len` elements; they cannot overlap
        // (one is a fresh allocation's capacity, the other a live vector). `MaybeUninit<T>` has
        // `T`'s layout, and `T: Copy`, so a bitwise copy initialises each element.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.src.as_ptr(),
                self.dst.as_mut_ptr().cast::<T>(),
                len,
            );
        }
    }
}

impl<T: Send + Sync> parallel::Piece for CopyIn<'_, T> {
    fn len(&self) -> usize {
        self.dst.len()
    }
    fn split_at(self, at: usize) -> (Self, Self) {
        let (low, high) = self.dst.split_at_mut(at);
        let (first, rest) = self.src.split_at(at.min(self.src.len()));
        (
            CopyIn {
                dst: low,
                src: first,
            },
            CopyIn {
                dst: high,
                src: rest,
            },
        )
    }
}

fn step<T: Stored>(
    ranks: &mut Ranks<T>,
    layout: &StepLayout,
    clique: Option<&Clique>,
    combining: ReduceOperation,
    team: Team,
    pool: &Pool,
) {
    // Each operation as its own function item, so that the loops are compiled for it (a
    // function pointer would cost a call per element and no vectors).
    match combining {
        ReduceOperation::Sum | ReduceOperation::Mean => {
            step_with(ranks, layout, clique, T::sum, team, pool)
        }
        ReduceOperation::Product => step_with(ranks, layout, clique, T::product, team, pool),
        ReduceOperation::Min => step_with(ranks, layout, clique, T::min, team, pool),
        ReduceOperation::Max => step_with(ranks, layout, clique, T::max, team, pool),
    }
}

/// [`step`] with its operation.
fn step_with<T: Stored, F: Fn(T, T) -> T + Copy + Sync>(
    ranks: &mut Ranks<T>,
    layout: &StepLayout,
    clique: Option<&Clique>,
    op: F,
    team: Team,
    pool: &Pool,
) {
    match clique {
        Some(clique) if ranks.folds_every_pending_input(clique) => {
            apply_clique_from_inputs(ranks, op, team, pool);
        }
        Some(clique) => {
            ranks.copy_in(team, pool);
            apply_clique(&mut ranks.buffers, clique, op, team);
        }
        None => {
            ranks.copy_in(team, pool);
            apply(&mut ranks.buffers, layout, op, team, pool);
        }
    }
}

/// Run a clique: block by block, fold the members' blocks in rank order — the fold every
/// member's write is ([`Write::operands`](ruccl_core::Write::operands): the group ascending,
/// folded from the left, the same operands in the same order on every member, so the same
/// bits) — then store it on every member. Each member's range is read once and written once,
/// and nothing is set aside: every member's block is read before any is written. A clique worth
/// more than one thread is cut across cores at the same offsets on every member.
fn apply_clique<T: Stored, F: Fn(T, T) -> T + Copy + Sync>(
    buffers: &mut [Vec<T>],
    clique: &Clique,
    op: F,
    team: Team,
) {
    let members: Vec<&mut [T]> = buffers
        .iter_mut()
        .enumerate()
        .filter(|(rank, _)| clique.ranks.binary_search(rank).is_ok())
        .map(|(_, buffer)| &mut buffer[clique.range.clone()])
        .collect();
    // Each element of the piece is one element of every member, read and written.
    let element_bytes = size_of::<T>().saturating_mul(members.len());
    let working_set = clique.range.len().saturating_mul(element_bytes);
    let block = clique_block::<T>(working_set, Place::InPlace(members.len()));
    parallel::run_pieces(vec![Members(members)], element_bytes, team, |piece| {
        fold_members(piece.0, op, block)
    });
}

/// The same elements of every member of a clique, ranks ascending.
struct Members<'a, T>(Vec<&'a mut [T]>);

impl<T: Send> parallel::Piece for Members<'_, T> {
    fn len(&self) -> usize {
        self.0.first().map_or(0, |member| member.len())
    }
    fn split_at(self, at: usize) -> (Self, Self) {
        let (low, high) = self
            .0
            .into_iter()
            .map(|member| member.split_at_mut(at))
            .unzip();
        (Members(low), Members(high))
    }
}

/// Fold `members` (two or more slices of one length, ranks ascending) `block` elements at a
/// time ([`clique_block`]) into a block on the stack, then copy it into every member.
fn fold_members<T: Stored>(
    mut members: Vec<&mut [T]>,
    op: impl Fn(T, T) -> T + Copy,
    block: usize,
) {
    let len = members.first().map_or(0, |member| member.len());
    let mut scratch = Scratch([MaybeUninit::uninit(); SCRATCH_BYTES]);
    let scratch = scratch.elements::<T>();
    let block = block.clamp(1, scratch.len());
    let mut start = 0;
    while start < len {
        let range = start..len.min(start + block);
        let Some(folded) = fold_block(scratch, &members, range.clone(), op) else {
            return;
        };
        for member in &mut members {
            member[range.clone()].copy_from_slice(folded);
        }
        start = range.end;
    }
}

/// `range` of every one of `sources` (ranks ascending) folded from the left into the start of
/// `scratch` (at least `range.len()` long); `None` unless there are two sources or more (a
/// clique has: `Step::clique`).
fn fold_block<'s, T: Stored, S: AsRef<[T]>>(
    scratch: &'s mut [MaybeUninit<T>],
    sources: &[S],
    range: Range<usize>,
    op: impl Fn(T, T) -> T + Copy,
) -> Option<&'s mut [T]> {
    let [first, second, rest @ ..] = sources else {
        return None;
    };
    let folded = combine_into(
        &mut scratch[..range.len()],
        &first.as_ref()[range.clone()],
        &second.as_ref()[range.clone()],
        op,
    );
    for source in rest {
        Kernel::Accumulate {
            dst: &mut *folded,
            src: &source.as_ref()[range.clone()],
        }
        .run(op);
    }
    Some(folded)
}

/// Run a clique whose members are exactly the pending ranks, over their whole buffers
/// ([`Ranks::folds_every_pending_input`]): fold the inputs, block by block as
/// [`apply_clique`] does, straight into the members' empty buffers, then give the inputs back
/// to `pool`. Each input is read once and each buffer written once: no copy-in.
fn apply_clique_from_inputs<T: Stored, F: Fn(T, T) -> T + Copy + Sync>(
    ranks: &mut Ranks<T>,
    op: F,
    team: Team,
    pool: &Pool,
) {
    let inputs: Vec<&[T]> = ranks.pending.iter().map(|(_, input)| &input[..]).collect();
    let len = inputs.first().map_or(0, |input| input.len());
    let mut pending = ranks.pending.iter().peekable();
    let mut outputs = Vec::with_capacity(inputs.len());
    for (rank, buffer) in ranks.buffers.iter_mut().enumerate() {
        if pending.next_if(|(member, _)| *member == rank).is_some() {
            outputs.push(&mut buffer.spare_capacity_mut()[..len]);
        }
    }
    let element_bytes = size_of::<T>().saturating_mul(inputs.len());
    // Inputs and outputs: twice the members' elements.
    let working_set = len.saturating_mul(element_bytes).saturating_mul(2);
    let stream = working_set > CACHED_BYTES;
    let block = clique_block::<T>(working_set, Place::FromInputs);
    let piece = FromInputs {
        inputs,
        outputs,
        stream,
    };
    parallel::run_pieces(vec![piece], element_bytes, team, |piece| {
        piece.fold(op, block)
    });
    for (rank, input) in std::mem::take(&mut ranks.pending) {
        // SAFETY: `buffers[rank]` came from `Pool::take` for the buffer's length, which is
        // `input.len()` = `len` (a pending input is a whole one; the clique covers `0..len`), so
        // its capacity holds `len` elements, and every one was written: `FromInputs::fold`
        // writes every element of its outputs, and `run_pieces` runs every piece, cut into
        // parts that cover each element exactly once (`parallel.rs`). `T` is `Copy`: no
        // element needs dropping.
        unsafe { ranks.buffers[rank].set_len(input.len()) };
        pool.give(input);
    }
}

/// The most bytes a clique's members (inputs and outputs together, out of place) may take and
/// still be served from the caches: a last-level cache of one core complex (32 MiB on the
/// machines `perf/PERF.md` measures). Beyond it a clique folded from the inputs writes its
/// outputs past the caches ([`stream_copy`]): they cannot stay cached until they are read, and
/// the inputs can only if the outputs do not evict them. Up to it a cached output is read back
/// from the cache: at exactly 32 MiB (W = 4, 4 MiB and W = 2, 8 MiB out of place) cached stores
/// took 366–385 and 313–448 µs against 506–611 and 490–543 streamed, and at 40 MiB (W = 4,
/// 5 MiB) streamed 585–619 against 572–1 184 (`ruccl-perf -b 2M -e 8M`, alternated). From it a
/// clique folds in short runs ([`clique_block`]).
const CACHED_BYTES: usize = 32 << 20;

/// The same elements of every member's input and of its empty buffer, ranks ascending, and
/// whether the outputs are written past the caches.
struct FromInputs<'a, T> {
    inputs: Vec<&'a [T]>,
    outputs: Vec<&'a mut [MaybeUninit<T>]>,
    stream: bool,
}

impl<T: Stored> FromInputs<'_, T> {
    /// Fold the inputs block by block, as [`fold_members`], and write each block to every
    /// output (past the caches when `stream`, fenced before the piece ends, so that whoever
    /// learns the piece is done sees its stores): every element of every output is written (a
    /// clique has two members or more, and only pending ranks that a clique covers come here,
    /// so `fold_block` folds every block).
    fn fold(mut self, op: impl Fn(T, T) -> T + Copy, block: usize) {
        let len = self.inputs.first().map_or(0, |input| input.len());
        let mut scratch = Scratch([MaybeUninit::uninit(); SCRATCH_BYTES]);
        let scratch = scratch.elements::<T>();
        let block = block.clamp(1, scratch.len());
        let mut start = 0;
        while start < len {
            let range = start..len.min(start + block);
            let Some(folded) = fold_block(scratch, &self.inputs, range.clone(), op) else {
                return;
            };
            for output in &mut self.outputs {
                let block = &mut output[range.clone()];
                if self.stream {
                    stream_copy(block, folded);
                    continue;
                }
                // SAFETY: `block` is this piece's exclusive borrow of `range.len()` elements of
                // a buffer's spare capacity; `folded` is as long and lies on this thread's stack,
                // so they cannot overlap. `MaybeUninit<T>` has `T`'s layout and `T: Copy`, so a
                // bitwise copy initialises each element.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        folded.as_ptr(),
                        block.as_mut_ptr().cast::<T>(),
                        block.len(),
                    );
                }
            }
            start = range.end;
        }
        if self.stream {
            stream_fence();
        }
    }
}

impl<T: Send + Sync> parallel::Piece for FromInputs<'_, T> {
    fn len(&self) -> usize {
        self.inputs.first().map_or(0, |input| input.len())
    }
    fn split_at(self, at: usize) -> (Self, Self) {
        let (low_in, high_in) = self
            .inputs
            .into_iter()
            .map(|input| input.split_at(at))
            .unzip();
        let (low_out, high_out) = self
            .outputs
            .into_iter()
            .map(|output| output.split_at_mut(at))
            .unzip();
        (
            FromInputs {
                inputs: low_in,
                outputs: low_out,
                stream: self.stream,
            },
            FromInputs {
                inputs: high_in,
                outputs: high_out,
                stream: self.stream,
            },
        )
    }
}

/// Copy the snapshots, then run every write: copies, or folds in the contract's order —
/// `before` (folded from the left), the receiver's own value, then `after`.
///
/// A step worth one thread runs write by write on the calling thread. A larger one is cut into
/// one share per thread as a whole ([`parallel::run_pieces`]): one hand-over to the pool per
/// step, however many writes it has (each hand-over costs a wake-up, which the device's model
/// cannot see).
fn apply<T: Stored, F: Fn(T, T) -> T + Copy + Sync>(
    buffers: &mut [Vec<T>],
    layout: &StepLayout,
    op: F,
    team: Team,
    pool: &Pool,
) {
    let copies: Vec<Vec<T>> = layout
        .snapshots
        .iter()
        .map(|(rank, range)| pool.copied(&buffers[*rank][range.clone()]))
        .collect();
    let total: usize = layout.writes.iter().map(|write| write.range.len()).sum();
    if parallel::worth(total, size_of::<T>(), team.threads) <= 1 {
        for write in &layout.writes {
            let len = write.range.len();
            // The receiver's buffer is taken out while its sources are read from the others': a
            // source on the receiver itself was set aside (`layouts::local_sources_copied`), so
            // the hole is never read.
            let mut target = std::mem::take(&mut buffers[write.to]);
            let read = |source: &Source| -> &[T] {
                match *source {
                    Source::Live { rank, start } => &buffers[rank][start..start + len],
                    Source::Copied { snapshot, offset } => &copies[snapshot][offset..offset + len],
                }
            };
            run_write(&mut target[write.range.clone()], &write.kind, read, op);
            buffers[write.to] = target;
        }
    } else {
        let (units, unwritten) = units(buffers, layout);
        let resolve = Resolve {
            unwritten: &unwritten,
            copies: &copies,
        };
        parallel::run_pieces(units, size_of::<T>(), team, |unit| {
            let (offset, len) = (unit.offset, unit.dst.len());
            let read =
                |source: &Source| &resolve.full(source, unit.write.range.len())[offset..][..len];
            run_write(unit.dst, &unit.write.kind, read, op);
        });
    }
    copies.into_iter().for_each(|kept| pool.give(kept));
}

/// Elements per block of a fold: the receiver's block (and the running fold of the senders
/// below it) stay in the first-level cache while every sender's block passes over them, so a
/// fold of `k` senders streams through the receiver once, not `k` times. Each fold keeps one
/// block on its stack.
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
const FOLD_BLOCK: usize = 2048;

/// Under a model checker a thread is a coroutine with a small stack, and the models' tensors
/// are a few elements: a small block. The block size changes no result (every element is
/// folded in the same order whatever the blocks).
#[cfg(any(ruccl_loom, ruccl_shuttle))]
const FOLD_BLOCK: usize = 64;

/// Bytes of a clique fold's block on the stack ([`Scratch`]): a [`FOLD_BLOCK`] of the widest
/// element (8 bytes), and the run of an in-place clique of [`LONG_RUNS_FROM_MEMBERS`] or more
/// beyond the caches ([`clique_block`]).
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
const SCRATCH_BYTES: usize = 32 << 10;

/// Under a model checker, a [`FOLD_BLOCK`] of the widest element.
#[cfg(any(ruccl_loom, ruccl_shuttle))]
const SCRATCH_BYTES: usize = FOLD_BLOCK * 8;

/// From how many members an in-place clique whose members take the caches or more folds runs of
/// all of [`SCRATCH_BYTES`] rather than [`STREAMING_RUN_BYTES`]: at W = 8, 64 MiB, in place,
/// 26.1–27.2 ms against 29.2–31.3 (at 16 MiB the two are even), where W = 6 took 3.6–3.8 and
/// 20.0 ms at 16 and 64 MiB with short runs against 4.5–5.0 and 20.2–20.6 with long ones
/// (`ruccl-perf -b 16M -e 64M`, alternated). Out of place short runs win at every world.
const LONG_RUNS_FROM_MEMBERS: usize = 8;

/// Bytes of each member a clique whose members take the caches or more ([`CACHED_BYTES`],
/// [`clique_block`]) folds per block: a short run of every member in turn, so the hardware
/// prefetchers follow all of the members' streams at once, each a few lines ahead, instead of
/// one member's at a time, ramping up again at each. On the VM of `perf/PERF.md` (in place and
/// out of place, `ruccl-perf -b 16M -e 16M`, alternated in one run): at 16 MiB, W = 2,
/// 496–546 µs in place and 1.35–1.40 ms out of place against 867–895 µs and 1.82–1.86 ms with
/// 32 KiB runs; W = 4 and 8 out of place 2.9 and 6.8–7.2 ms against 4.1 and 9.0–9.8. 512 bytes
/// ran as 1 KiB; 2 KiB slower.
const STREAMING_RUN_BYTES: usize = 1 << 10;

/// A clique fold's block: [`SCRATCH_BYTES`] on the stack, aligned for every element type,
/// whatever the type: one array sized for the widest element serves every type.
#[repr(C, align(64))]
struct Scratch([MaybeUninit<u8>; SCRATCH_BYTES]);

impl Scratch {
    /// The block as elements of `T`: as many as fit.
    fn elements<T: Stored>(&mut self) -> &mut [MaybeUninit<T>] {
        let len = SCRATCH_BYTES / size_of::<T>().max(1);
        // SAFETY: the pointer is to `SCRATCH_BYTES` bytes this borrow holds exclusively, aligned
        // to 64, which no element type's alignment exceeds (the largest is 8); `len` elements
        // of `T` take at most `SCRATCH_BYTES` bytes. `MaybeUninit<T>` may hold any bytes,
        // initialised or not, so no value is assumed.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), len) }
    }
}

/// How a clique's members are laid out: its members' own buffers, read and written (with how
/// many members), or inputs folded into fresh outputs.
#[derive(Clone, Copy)]
enum Place {
    InPlace(usize),
    FromInputs,
}

/// The block, in elements of `T`, of a clique whose members' memory comes to `working_set`
/// bytes: [`FOLD_BLOCK`] below [`CACHED_BYTES`], where the working set stays cached; from there
/// on [`STREAMING_RUN_BYTES`], or all of [`SCRATCH_BYTES`] in place from
/// [`LONG_RUNS_FROM_MEMBERS`] members.
fn clique_block<T>(working_set: usize, place: Place) -> usize {
    let bytes = match place {
        _ if working_set < CACHED_BYTES => return FOLD_BLOCK,
        Place::InPlace(members) if members >= LONG_RUNS_FROM_MEMBERS => SCRATCH_BYTES,
        Place::InPlace(_) | Place::FromInputs => STREAMING_RUN_BYTES,
    };
    (bytes / size_of::<T>().max(1)).max(1)
}

/// Run one write into `dst`, whose sources `read` returns as slices as long as `dst`.
fn run_write<'s, T: Stored + 's, F: Fn(T, T) -> T + Copy>(
    dst: &mut [T],
    kind: &WriteKind,
    read: impl Fn(&Source) -> &'s [T],
    op: F,
) {
    let (before, after): (&[Piece], &[Piece]) = match kind {
        WriteKind::Copy(piece) => {
            dst.copy_from_slice(read(&piece.source));
            return;
        }
        WriteKind::Fold { before, after } => (before, after),
    };
    // Where the fold of two or more senders below the receiver is built, block by block: on the
    // stack, so that no generation allocates it, and never initialised but by that fold.
    let mut scratch = [const { MaybeUninit::<T>::uninit() }; FOLD_BLOCK];
    for (index, block) in dst.chunks_mut(FOLD_BLOCK).enumerate() {
        let range = index * FOLD_BLOCK..index * FOLD_BLOCK + block.len();
        let sender = |piece: &Piece| &read(&piece.source)[range.clone()];
        match before {
            [] => {}
            [only] => Kernel::AccumulateLeft {
                dst: &mut *block,
                src: sender(only),
            }
            .run(op),
            [first, second, rest @ ..] => {
                let folded = combine_into(
                    &mut scratch[..block.len()],
                    sender(first),
                    sender(second),
                    op,
                );
                for source in rest {
                    Kernel::Accumulate {
                        dst: &mut *folded,
                        src: sender(source),
                    }
                    .run(op);
                }
                Kernel::AccumulateLeft {
                    dst: &mut *block,
                    src: folded,
                }
                .run(op);
            }
        }
        for source in after {
            Kernel::Accumulate {
                dst: &mut *block,
                src: sender(source),
            }
            .run(op);
        }
    }
}

/// A piece of one write, for a thread: `dst` is the write's elements from `offset` on.
struct Unit<'a, T> {
    dst: &'a mut [T],
    write: &'a Write,
    offset: usize,
}

impl<T: Send + Sync> parallel::Piece for Unit<'_, T> {
    fn len(&self) -> usize {
        self.dst.len()
    }
    fn split_at(self, at: usize) -> (Self, Self) {
        let (low, high) = self.dst.split_at_mut(at);
        (
            Unit {
                dst: low,
                write: self.write,
                offset: self.offset,
            },
            Unit {
                dst: high,
                write: self.write,
                offset: self.offset + at,
            },
        )
    }
}

/// Every rank's buffer cut at the step's writes: one [`Unit`] per write, and per rank the
/// stretches no write touches, `(first element, elements)` in order — where every live source
/// lies, since a source that a write of the step overlaps was copied aside
/// ([`StepLayout::snapshots`]).
fn units<'a, T>(
    buffers: &'a mut [Vec<T>],
    layout: &'a StepLayout,
) -> (Vec<Unit<'a, T>>, Vec<Stretches<'a, T>>) {
    let mut order: Vec<&Write> = layout.writes.iter().collect();
    order.sort_unstable_by_key(|write| (write.to, write.range.start));
    let mut units = Vec::with_capacity(order.len());
    let mut unwritten = Vec::with_capacity(buffers.len());
    let mut writes = order.into_iter().peekable();
    for (rank, buffer) in buffers.iter_mut().enumerate() {
        let mut stretches = Vec::new();
        let mut rest: &'a mut [T] = buffer;
        let mut at = 0;
        while let Some(write) = writes.next_if(|write| write.to == rank) {
            // The writes of one rank are disjoint (checked) and sorted by their start.
            let (gap, tail) = std::mem::take(&mut rest).split_at_mut(write.range.start - at);
            let (dst, tail) = tail.split_at_mut(write.range.len());
            stretches.push((at, &*gap));
            units.push(Unit {
                dst,
                write,
                offset: 0,
            });
            rest = tail;
            at = write.range.end;
        }
        stretches.push((at, &*rest));
        unwritten.push(stretches);
    }
    (units, unwritten)
}

/// One rank's stretches that no write of the step touches: `(first element, elements)`, in
/// order of their first element, strictly increasing.
type Stretches<'a, T> = Vec<(usize, &'a [T])>;

/// Where a step's sources are, while its writes are handed out.
struct Resolve<'a, T> {
    unwritten: &'a [Stretches<'a, T>],
    copies: &'a [Vec<T>],
}

impl<'a, T> Resolve<'a, T> {
    /// The `len` elements `source` names.
    fn full(&self, source: &Source, len: usize) -> &'a [T] {
        match *source {
            Source::Live { rank, start } => {
                let stretches = &self.unwritten[rank];
                // The stretch holding `start`: the last one starting at or before it (the first
                // starts at 0). The source lies inside it: no write of the step overlaps it.
                let index = stretches
                    .partition_point(|&(first, _)| first <= start)
                    .saturating_sub(1);
                let (first, stretch) = stretches[index];
                &stretch[start - first..][..len]
            }
            Source::Copied { snapshot, offset } => &self.copies[snapshot][offset..][..len],
        }
    }
}

/// Where the values a generation hands out are counted and go back to when dropped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keeping<'a> {
    /// The device's census, if it keeps one.
    pub(crate) census: Option<&'a Registry>,
    /// The device's pool.
    pub(crate) pool: &'a Pool,
}

fn into_outputs<T: Stored>(
    buffers: Vec<Vec<T>>,
    devices: &[DeviceId],
    plan: &Plan,
    divide_by: Option<usize>,
    team: Team,
    keeping: Keeping<'_>,
) -> Vec<SimTensor> {
    let mut outputs: Vec<Vec<T>> = buffers
        .into_iter()
        .enumerate()
        .map(|(rank, buffer)| {
            let range = plan.output(rank);
            if range == (0..buffer.len()) {
                buffer
            } else {
                let output = keeping.pool.copied(&buffer[range]);
                keeping.pool.give(buffer);
                output
            }
        })
        .collect();
    if let Some(world) = divide_by {
        let slices: Vec<&mut [T]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
        parallel::run_pieces(slices, size_of::<T>(), team, |slice| {
            map_in_place(slice, |value| value.divide(world));
        });
    }
    outputs
        .into_iter()
        .zip(devices)
        .map(|(values, &device)| SimTensor::counted(device, T::wrap(values), keeping))
        .collect()
}

/// An element type the device keeps in [`HostValues`].
pub(crate) trait Stored: Element + Default {
    /// The element type's name.
    const TYPE: ElementType;
    /// Wrap a vector of this type.
    fn wrap(values: Vec<Self>) -> HostValues;
    /// The vector inside `values`, if it holds this type (else `values` back).
    fn unwrap(values: HostValues) -> Result<Vec<Self>, HostValues>;
    /// `length` zeros (for the primitive types, untouched zero pages from the allocator).
    fn zeroed(length: usize) -> Vec<Self> {
        vec![Self::default(); length]
    }
}

macro_rules! stored {
    ($type:ty, $variant:ident) => {
        impl Stored for $type {
            const TYPE: ElementType = ElementType::$variant;
            fn wrap(values: Vec<Self>) -> HostValues {
                HostValues::$variant(values)
            }
            fn unwrap(values: HostValues) -> Result<Vec<Self>, HostValues> {
                match values {
                    HostValues::$variant(values) => Ok(values),
                    other => Err(other),
                }
            }
        }
    };
}

stored!(f32, F32);
stored!(f64, F64);
stored!(f16, F16);
stored!(bf16, BF16);
stored!(i32, I32);
stored!(i64, I64);
stored!(i8, I8);
stored!(u8, U8);
stored!(u32, U32);
stored!(u64, U64);

#[cfg(test)]
mod tests {
    //! A clique run as one fold stored on every member gives every member the bits that the
    //! per-receiver writes of the same step give: every element type, every operation, edge-case
    //! operands, block boundaries, and a clique cut across two threads.
    use super::{
        FOLD_BLOCK, FromInputs, Ranks, SCRATCH_BYTES, STREAMING_RUN_BYTES, Stored, fold_members,
        step,
    };
    use crate::device::kernels::tests::Bits;
    use crate::device::parallel::Team;
    use crate::device::pool::Pool;
    use half::{bf16, f16};
    use ruccl_core::{ReduceOperation, Step, Transfer};
    use std::mem::MaybeUninit;

    /// Raw words: the kernels' edge cases (zero, one, all ones, sign bits, infinities, NaNs with
    /// payloads) every third element, else splitmix64.
    fn word(index: usize, salt: u64) -> u64 {
        const EDGES: [u64; 7] = [
            0,
            1,
            u64::MAX,
            0x8000_0000_8000_8080,
            0x7f80_0000_7c00_7f80,
            0xff80_0000_fc00_ff80,
            0x7fc0_0001_7e01_7fc1,
        ];
        let mut z = (index as u64 ^ salt.rotate_left(17)).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if z % 3 == 0 {
            EDGES[(z >> 8) as usize % EDGES.len()]
        } else {
            z
        }
    }

    /// Every member of `ranks` folding every other's `range`: a clique.
    fn clique_step(ranks: &[usize], range: std::ops::Range<usize>) -> Step {
        Step {
            combine: true,
            transfers: ranks
                .iter()
                .flat_map(|&from| {
                    let range = range.clone();
                    ranks
                        .iter()
                        .filter(move |&&to| to != from)
                        .map(move |&to| Transfer::new(from, to, range.clone()))
                })
                .collect(),
        }
    }

    fn fused_and_laid_out_agree<T: Stored + Bits>(
        world: usize,
        ranks: &[usize],
        range: std::ops::Range<usize>,
        len: usize,
        threads: usize,
    ) {
        let team = Team::new(threads, world);
        let planned = clique_step(ranks, range.clone());
        let clique = planned.clique().expect("a clique");
        assert_eq!(clique.ranks, ranks);
        let layout = planned.lay_out(world, len).unwrap();
        let pool = Pool::new(0);
        let buffers: Vec<Vec<T>> = (0..world)
            .map(|rank| {
                (0..len)
                    .map(|index| T::from_bits(word(index, rank as u64 * 7 + len as u64)))
                    .collect()
            })
            .collect();
        let bits = |buffers: &[Vec<T>]| -> Vec<Vec<u64>> {
            buffers
                .iter()
                .map(|buffer| buffer.iter().map(|&value| value.bits()).collect())
                .collect()
        };
        for operation in [
            ReduceOperation::Sum,
            ReduceOperation::Product,
            ReduceOperation::Min,
            ReduceOperation::Max,
        ] {
            let in_place = |buffers: Vec<Vec<T>>| Ranks {
                buffers,
                pending: Vec::new(),
            };
            // Out of place: every rank's input waits for the first step.
            let out_of_place = |buffers: Vec<Vec<T>>| Ranks {
                buffers: (0..world).map(|_| Vec::with_capacity(len)).collect(),
                pending: buffers.into_iter().enumerate().collect(),
            };
            let mut written = in_place(buffers.clone());
            step(&mut written, &layout, None, operation, team, &pool);
            let written = bits(&written.buffers);
            for (how, mut fused) in [
                ("in place", in_place(buffers.clone())),
                ("out of place", out_of_place(buffers.clone())),
            ] {
                let from_inputs = fused.folds_every_pending_input(&clique);
                let whole = ranks.len() == world && range == (0..len);
                assert_eq!(from_inputs, how == "out of place" && whole);
                step(&mut fused, &layout, Some(&clique), operation, team, &pool);
                assert!(fused.pending.is_empty());
                let fused = bits(&fused.buffers);
                let differing = (0..world)
                    .flat_map(|rank| (0..len).map(move |index| (rank, index)))
                    .find(|&(rank, index)| fused[rank][index] != written[rank][index]);
                assert_eq!(
                    differing,
                    None,
                    "{:?} {operation:?}, W = {world}, members {ranks:?}, {range:?} of {len}, \
                     {how} (from the inputs: {from_inputs}): first (rank, element) where the \
                     fused clique differs",
                    T::TYPE
                );
            }
        }
    }

    fn every_shape<T: Stored + Bits>() {
        for world in 2..=5 {
            let all: Vec<usize> = (0..world).collect();
            for len in [1, 63, 2047, 2048, 2049, 5000] {
                fused_and_laid_out_agree::<T>(world, &all, 0..len, len, 1);
            }
            // Part of the buffers, part of the world: the rest is left alone.
            let some: Vec<usize> = all.iter().copied().filter(|rank| rank % 2 == 0).collect();
            if some.len() >= 2 {
                fused_and_laid_out_agree::<T>(world, &some, 100..2300, 3000, 1);
            }
        }
    }

    #[test]
    fn a_fused_clique_gives_every_member_the_bits_of_its_own_write() {
        every_shape::<f32>();
        every_shape::<f64>();
        every_shape::<f16>();
        every_shape::<bf16>();
        every_shape::<i8>();
        every_shape::<u8>();
        every_shape::<i32>();
        every_shape::<u32>();
        every_shape::<i64>();
        every_shape::<u64>();
    }

    /// A clique folded from the inputs writes the same bits whether its outputs are written
    /// past the caches or not, at every alignment of the outputs, and in long blocks, short ones
    /// or blocks of an odd length; so does a clique folded in place.
    fn streamed_outputs_agree<T: Stored + Bits>(members: usize, len: usize) {
        let inputs: Vec<Vec<T>> = (0..members)
            .map(|rank| {
                (0..len)
                    .map(|index| T::from_bits(word(index, rank as u64)))
                    .collect()
            })
            .collect();
        let fold = |stream: bool, offset: usize, block: usize| -> Vec<Vec<u64>> {
            let mut outputs: Vec<Vec<MaybeUninit<T>>> = (0..members)
                .map(|_| vec![MaybeUninit::uninit(); len + offset])
                .collect();
            let piece = FromInputs {
                inputs: inputs.iter().map(|input| &input[..]).collect(),
                outputs: outputs
                    .iter_mut()
                    .map(|output| &mut output[offset..])
                    .collect(),
                stream,
            };
            piece.fold(T::sum, block);
            outputs
                .iter()
                .map(|output| {
                    // SAFETY: `fold` wrote every element of `output[offset..]`.
                    output[offset..]
                        .iter()
                        .map(|v| unsafe { v.assume_init() }.bits())
                        .collect()
                })
                .collect()
        };
        let cached = fold(false, 0, FOLD_BLOCK);
        let runs = [STREAMING_RUN_BYTES, SCRATCH_BYTES].map(|bytes| bytes / size_of::<T>());
        for block in [FOLD_BLOCK, runs[0], runs[1], 7] {
            for offset in 0..4 {
                let streamed = fold(true, offset, block);
                assert_eq!(streamed, cached, "{:?}, offset {offset}, {block}", T::TYPE);
            }
            assert_eq!(fold(false, 0, block), cached, "{:?}, {block}", T::TYPE);
            let mut buffers = inputs.clone();
            fold_members(
                buffers.iter_mut().map(|b| &mut b[..]).collect(),
                T::sum,
                block,
            );
            let in_place: Vec<Vec<u64>> = buffers
                .iter()
                .map(|buffer| buffer.iter().map(|&value| value.bits()).collect())
                .collect();
            assert_eq!(in_place, cached, "{:?} in place, {block}", T::TYPE);
        }
    }

    #[test]
    fn outputs_written_past_the_caches_hold_the_folds_bits() {
        for (members, len) in [(2, 1), (2, 2049), (3, 5000), (5, 4097), (3, 20_000)] {
            streamed_outputs_agree::<f32>(members, len);
            streamed_outputs_agree::<u8>(members, len);
            streamed_outputs_agree::<f16>(members, len);
            streamed_outputs_agree::<f64>(members, len);
        }
    }

    #[test]
    fn a_clique_cut_across_threads_gives_the_same_bits() {
        // 3 members × 4 bytes × 120 000 elements: two shares above the per-thread minimum.
        fused_and_laid_out_agree::<f32>(3, &[0, 1, 2], 0..120_000, 120_000, 2);
        fused_and_laid_out_agree::<f64>(4, &[0, 1, 3], 5_000..125_000, 130_000, 2);
    }
}
