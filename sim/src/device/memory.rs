//! The simulated device memory of one generation, per rank: an output buffer that holds the rank's
//! current values wherever [`Ready`] says so, and — for a large tensor — the input, shared with its
//! prepared value and never written, holding the current values everywhere else.
//!
//! A small input is copied whole into the output by `begin` (everything is ready at once); a
//! large one is not copied at all: the first step that writes an element reads the input in the
//! same pass. The element type is matched once per call; everything below runs on typed slices.

use super::elements::Element;
use super::exchange;
use super::kernels::{Kernel, map_in_place};
use super::parallel;
use super::pool::{MIN_POOLED_BYTES, Pool};
use super::ready::Ready;
use super::tensor::SharedTensor;
use super::{SimPrepared, SimTensor};
use crate::host::{ElementType, HostValues};
use half::{bf16, f16};
use ruccl_core::{DeviceId, ReduceOperation};
use std::ops::Range;

/// Every rank's memory, for one element type.
#[derive(Debug)]
pub(crate) enum Memory {
    F32(Vec<Rank<f32>>),
    F64(Vec<Rank<f64>>),
    F16(Vec<Rank<f16>>),
    BF16(Vec<Rank<bf16>>),
    I32(Vec<Rank<i32>>),
    I64(Vec<Rank<i64>>),
}

/// Run `$body` with `$ranks` bound to the typed ranks of whichever variant.
macro_rules! with_ranks {
    ($self:expr, $ranks:ident => $body:expr) => {
        match $self {
            Memory::F32($ranks) => $body,
            Memory::F64($ranks) => $body,
            Memory::F16($ranks) => $body,
            Memory::BF16($ranks) => $body,
            Memory::I32($ranks) => $body,
            Memory::I64($ranks) => $body,
        }
    };
}

impl Memory {
    /// The memory of a generation over `inputs` (validated: one element type, one length), with
    /// output buffers for large inputs from `pool`.
    pub(crate) fn new(
        element_type: ElementType,
        inputs: &[SimPrepared],
        length: usize,
        pool: &Pool,
    ) -> Self {
        match element_type {
            ElementType::F32 => Memory::F32(ranks(inputs, length, pool)),
            ElementType::F64 => Memory::F64(ranks(inputs, length, pool)),
            ElementType::F16 => Memory::F16(ranks(inputs, length, pool)),
            ElementType::BF16 => Memory::BF16(ranks(inputs, length, pool)),
            ElementType::I32 => Memory::I32(ranks(inputs, length, pool)),
            ElementType::I64 => Memory::I64(ranks(inputs, length, pool)),
        }
    }

    /// Apply one validated ring step: `ranges[r]` goes from rank `r` to `(r + 1) % W`, reading
    /// the pre-step state; `reduce` is the combining operation, or `None` to overwrite.
    pub(crate) fn step(
        &mut self,
        ranges: &[Range<usize>],
        reduce: Option<ReduceOperation>,
        threads: usize,
    ) {
        with_ranks!(self, ranks => step(ranks, ranges, reduce, threads));
    }

    /// Complete every output (copying what no step wrote), divide by `divide_by` if given (the
    /// `Mean` scaling), and hand the outputs over, rank `r`'s on `devices[r]`.
    pub(crate) fn into_outputs(
        self,
        devices: &[DeviceId],
        divide_by: Option<usize>,
        threads: usize,
    ) -> Vec<SimTensor> {
        with_ranks!(self, ranks => into_outputs(ranks, devices, divide_by, threads))
    }
}

/// One rank's memory, for elements of type `T`.
#[derive(Debug)]
pub(crate) struct Rank<T> {
    /// The shared input of a large tensor (`None`: the output was copied from it whole).
    input: Option<SharedTensor>,
    /// The output buffer: the rank's current values where `ready` says so.
    output: Vec<T>,
    /// Where the rank's current value is in `output` (elsewhere: in `input`). Grows with every
    /// step that writes to the rank.
    ready: Ready,
}

impl<T: Stored> Rank<T> {
    /// The shared input's elements (empty for a copied one, whose output is ready everywhere).
    pub(crate) fn input(&self) -> &[T] {
        // `begin` admits only inputs of the generation's element type and a shared tensor never
        // changes, so the view exists whenever an input does.
        self.input
            .as_deref()
            .and_then(|tensor| T::view(tensor.values()))
            .unwrap_or_default()
    }

    /// The output buffer.
    pub(crate) fn output(&self) -> &[T] {
        &self.output
    }

    /// Where the output holds the current values.
    pub(crate) fn ready(&self) -> &Ready {
        &self.ready
    }

    /// The input, the output (mutably) and the ready set, borrowed apart.
    pub(crate) fn parts(&mut self) -> (&[T], &mut [T], &Ready) {
        let input = self
            .input
            .as_deref()
            .and_then(|tensor| T::view(tensor.values()))
            .unwrap_or_default();
        (input, &mut self.output, &self.ready)
    }

    /// Record that `range` of the output now holds current values.
    pub(crate) fn mark_ready(&mut self, range: Range<usize>) {
        self.ready.insert(range);
    }
}

fn ranks<T: Stored>(inputs: &[SimPrepared], length: usize, pool: &Pool) -> Vec<Rank<T>> {
    if length * size_of::<T>() >= MIN_POOLED_BYTES {
        pool.reserve(inputs.len());
    }
    inputs
        .iter()
        .map(|input| match input.shared() {
            Some(shared) => Rank {
                input: Some(shared),
                output: pool.take(length),
                ready: Ready::default(),
            },
            None => Rank {
                input: None,
                output: T::view(input.tensor().values())
                    .map(<[T]>::to_vec)
                    .unwrap_or_default(),
                ready: Ready::all(),
            },
        })
        .collect()
}

fn step<T: Stored>(
    ranks: &mut [Rank<T>],
    ranges: &[Range<usize>],
    reduce: Option<ReduceOperation>,
    threads: usize,
) {
    match reduce {
        None => exchange::step(ranks, ranges, false, T::sum, threads),
        Some(ReduceOperation::Sum | ReduceOperation::Mean) => {
            exchange::step(ranks, ranges, true, T::sum, threads);
        }
        Some(ReduceOperation::Product) => exchange::step(ranks, ranges, true, T::product, threads),
        Some(ReduceOperation::Min) => exchange::step(ranks, ranges, true, T::min, threads),
        Some(ReduceOperation::Max) => exchange::step(ranks, ranges, true, T::max, threads),
    }
}

fn into_outputs<T: Stored>(
    mut ranks: Vec<Rank<T>>,
    devices: &[DeviceId],
    divide_by: Option<usize>,
    threads: usize,
) -> Vec<SimTensor> {
    // The indices no step wrote still hold the input: copy them (the whole tensor for a world of
    // one; nothing for the ring schedule on two or more ranks).
    let mut copies = Vec::new();
    for rank in &mut ranks {
        let length = rank.output.len();
        if rank.ready.covers(length) {
            continue;
        }
        let (input, output, ready) = rank.parts();
        let mut rest = output;
        let mut at = 0;
        for (piece, held) in ready.pieces(0..length) {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(piece.end - at);
            rest = tail;
            at = piece.end;
            if !held {
                copies.push(Kernel::Copy {
                    dst: head,
                    src: &input[piece],
                });
            }
        }
    }
    parallel::run_pieces(copies, size_of::<T>(), threads, |kernel| kernel.run(T::sum));
    if let Some(world) = divide_by {
        let slices: Vec<&mut [T]> = ranks
            .iter_mut()
            .map(|rank| rank.output.as_mut_slice())
            .collect();
        parallel::run_pieces(slices, size_of::<T>(), threads, |slice| {
            map_in_place(slice, |value| value.divide(world));
        });
    }
    // Collected into a fresh vector: reusing the ranks' allocation (the standard library's
    // in-place collection) would shrink it with a `realloc`, which costs more.
    let mut outputs = Vec::with_capacity(ranks.len());
    for (rank, &device) in ranks.into_iter().zip(devices) {
        outputs.push(SimTensor::new(device, T::wrap(rank.output)));
    }
    outputs
}

/// An [`Element`] that a [`HostValues`] variant stores.
pub(crate) trait Stored: Element + Default {
    /// The elements, if `values` holds this type.
    fn view(values: &HostValues) -> Option<&[Self]>;
    /// Wrap a vector of this type.
    fn wrap(values: Vec<Self>) -> HostValues;
    /// The vector inside `values`, if it holds this type (else `values` back).
    // Only the pool unwraps, and there is none under a model checker.
    #[cfg_attr(any(ruccl_loom, ruccl_shuttle), allow(dead_code))]
    fn unwrap(values: HostValues) -> Result<Vec<Self>, HostValues>;
    /// `length` zeros (for the primitive types, untouched zero pages from the allocator).
    fn zeroed(length: usize) -> Vec<Self> {
        vec![Self::default(); length]
    }
}

macro_rules! stored {
    ($type:ty, $variant:ident) => {
        impl Stored for $type {
            fn view(values: &HostValues) -> Option<&[Self]> {
                match values {
                    HostValues::$variant(values) => Some(values),
                    _ => None,
                }
            }
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
