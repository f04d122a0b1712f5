//! The simulated device memory of one generation: one working buffer per rank, typed.
//!
//! A rank's buffer is its input's own allocation when the plan works in place (the buffer is the
//! input, placed at 0) and the device allows it; otherwise a fresh buffer of the plan's length
//! with the input copied to its placement. The element type is matched once per call; everything
//! below runs on typed slices.

use super::census::Registry;
use super::elements::Element;
use super::error::SimError;
use super::kernels::{Kernel, combine_into, map_in_place};
use super::parallel;
use super::pool::Pool;
use super::{SimPrepared, SimTensor};
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::{DeviceId, Piece, Plan, ReduceOperation, Source, StepLayout, Write, WriteKind};
use std::mem::MaybeUninit;

/// Every rank's buffer, for one element type.
#[derive(Debug)]
pub(crate) enum Memory {
    F32(Vec<Vec<f32>>),
    F64(Vec<Vec<f64>>),
    F16(Vec<Vec<f16>>),
    BF16(Vec<Vec<bf16>>),
    I32(Vec<Vec<i32>>),
    I64(Vec<Vec<i64>>),
    I8(Vec<Vec<i8>>),
    U8(Vec<Vec<u8>>),
    U32(Vec<Vec<u32>>),
    U64(Vec<Vec<u64>>),
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

impl Memory {
    /// The buffers of a generation of `plan` over `inputs` (checked: one per rank, all of
    /// `element_type` and the plan's input length). In place when `in_place` allows it; fresh
    /// buffers come from `pool`, and inputs copied out of go back to it. Whole inputs are
    /// copied on up to `threads` threads.
    pub(crate) fn new(
        element_type: ElementType,
        inputs: Vec<SimPrepared>,
        plan: &Plan,
        in_place: bool,
        threads: usize,
        pool: &Pool,
    ) -> Result<Self, SimError> {
        let buffers = Buffers {
            plan,
            in_place,
            threads,
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
    pub(crate) fn step(
        &mut self,
        layout: &StepLayout,
        combining: ReduceOperation,
        threads: usize,
        pool: &Pool,
    ) {
        with_buffers!(self, buffers => step(buffers, layout, combining, threads, pool));
    }

    /// Hand over rank `r`'s `plan.output(r)` range on `devices[r]`, each divided by `divide_by`
    /// if given (the `Mean` scaling), counted in `census`; an output cut from a larger buffer is
    /// a copy from `pool`, and the buffer goes back to it.
    pub(crate) fn into_outputs(
        self,
        devices: &[DeviceId],
        plan: &Plan,
        divide_by: Option<usize>,
        threads: usize,
        keeping: Keeping<'_>,
    ) -> Vec<SimTensor> {
        with_buffers!(self, buffers => {
            into_outputs(buffers, devices, plan, divide_by, threads, keeping)
        })
    }

    /// A copy of rank `rank`'s buffer as it is now.
    pub(crate) fn buffer(&self, rank: usize) -> Option<HostValues> {
        with_buffers!(self, buffers => buffers.get(rank).map(|buffer| Stored::wrap(buffer.clone())))
    }
}

/// How a generation's working buffers are made.
struct Buffers<'a> {
    plan: &'a Plan,
    in_place: bool,
    threads: usize,
    pool: &'a Pool,
}

impl Buffers<'_> {
    /// Each rank's working buffer: its input's allocation in place, or a fresh one holding the
    /// input at its placement. A fresh buffer that is a whole input's copy (placed at 0, the
    /// input's length: out of place) is filled on up to `threads` threads at once, as one
    /// [`parallel::run_pieces`] call for every rank: one pass over each buffer, no zero-fill.
    fn build<T: Stored>(&self, inputs: Vec<SimPrepared>) -> Result<Vec<Vec<T>>, SimError> {
        let buffer_len = self.plan.buffer_len();
        // A vector of its own rather than collected in the inputs' allocation: the elements
        // differ in size, so collecting in place would reallocate it.
        let mut buffers = Vec::with_capacity(inputs.len());
        // `(rank, input)`: whole copies still to make into `buffers[rank]`, which is empty with
        // room for `buffer_len` elements until then.
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
        let mut sources = whole.iter().peekable();
        let mut pieces = Vec::with_capacity(whole.len());
        for (rank, buffer) in buffers.iter_mut().enumerate() {
            if let Some((_, source)) = sources.next_if(|(copy_rank, _)| *copy_rank == rank) {
                pieces.push(CopyIn {
                    dst: &mut buffer.spare_capacity_mut()[..buffer_len],
                    src: source,
                });
            }
        }
        parallel::run_pieces(pieces, size_of::<T>(), self.threads, CopyIn::run);
        for (rank, values) in whole {
            // SAFETY: `buffers[rank]` came from `Pool::take(buffer_len)`, so its capacity holds
            // `buffer_len` elements, and every one of them was written: its `CopyIn` covered
            // `0..buffer_len`, and `run_pieces` runs every piece, cut into parts that cover each
            // element exactly once (`parallel.rs`). `T` is `Copy`: no element needs dropping.
            unsafe { buffers[rank].set_len(buffer_len) };
            self.pool.give(values);
        }
        Ok(buffers)
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
    buffers: &mut [Vec<T>],
    layout: &StepLayout,
    combining: ReduceOperation,
    threads: usize,
    pool: &Pool,
) {
    match combining {
        ReduceOperation::Sum | ReduceOperation::Mean => {
            apply(buffers, layout, T::sum, threads, pool)
        }
        ReduceOperation::Product => apply(buffers, layout, T::product, threads, pool),
        ReduceOperation::Min => apply(buffers, layout, T::min, threads, pool),
        ReduceOperation::Max => apply(buffers, layout, T::max, threads, pool),
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
    threads: usize,
    pool: &Pool,
) {
    let copies: Vec<Vec<T>> = layout
        .snapshots
        .iter()
        .map(|(rank, range)| pool.copied(&buffers[*rank][range.clone()]))
        .collect();
    let total: usize = layout.writes.iter().map(|write| write.range.len()).sum();
    if parallel::worth(total, size_of::<T>(), threads) <= 1 {
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
        parallel::run_pieces(units, size_of::<T>(), threads, |unit| {
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
/// fold of `k` senders streams through the receiver once, not `k` times.
const FOLD_BLOCK: usize = 2048;

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
    threads: usize,
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
        parallel::run_pieces(slices, size_of::<T>(), threads, |slice| {
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
